//! Counts of the client's requests to Oxia by kind, for a service's metrics: plain atomics,
//! read as a snapshot with [`crate::OxiaClient::stats`]. No metrics library.
//!
//! A request is one call of the client (a write on a shard's stream, a read, a list, a range
//! scan, a session call), retries included; an error is a call that failed as a request
//! (unreachable, timed out, refused, outcome unknown), not an answer such as "the key
//! exists", which is a successful request.

use std::sync::atomic::{AtomicU64, Ordering};

/// The kinds of request, in the order of [`OxiaStats::by_kind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// Puts, deletes, range deletes and sequenced puts on a shard's write stream.
    Write,
    /// `Read` (gets).
    Read,
    /// `List`.
    List,
    /// `RangeScan`.
    Scan,
    /// `CreateSession`, `KeepAlive` and `CloseSession`.
    Session,
}

impl RequestKind {
    /// Every kind.
    pub const ALL: [RequestKind; 5] =
        [RequestKind::Write, RequestKind::Read, RequestKind::List, RequestKind::Scan, RequestKind::Session];

    /// A short lowercase name (`write`, `read`, `list`, `scan`, `session`).
    pub fn name(self) -> &'static str {
        match self {
            RequestKind::Write => "write",
            RequestKind::Read => "read",
            RequestKind::List => "list",
            RequestKind::Scan => "scan",
            RequestKind::Session => "session",
        }
    }
}

/// Requests of one kind and how many of them failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequestCounts {
    /// Requests made.
    pub requests: u64,
    /// Requests that failed.
    pub errors: u64,
}

/// The client's requests since it connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OxiaStats {
    /// Per kind, in the order of [`RequestKind::ALL`].
    pub counts: [RequestCounts; 5],
}

impl OxiaStats {
    /// The counts of `kind`.
    pub fn of(&self, kind: RequestKind) -> RequestCounts {
        self.counts[kind as usize]
    }

    /// Every kind with its counts.
    pub fn by_kind(&self) -> [(RequestKind, RequestCounts); 5] {
        RequestKind::ALL.map(|kind| (kind, self.of(kind)))
    }
}

/// The live counters behind [`OxiaStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    requests: [AtomicU64; 5],
    errors: [AtomicU64; 5],
}

impl Counters {
    pub(crate) fn record(&self, kind: RequestKind, failed: bool) {
        self.requests[kind as usize].fetch_add(1, Ordering::Relaxed);
        if failed {
            self.errors[kind as usize].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn snapshot(&self) -> OxiaStats {
        let mut counts = [RequestCounts::default(); 5];
        for (i, c) in counts.iter_mut().enumerate() {
            c.requests = self.requests[i].load(Ordering::Relaxed);
            c.errors = self.errors[i].load(Ordering::Relaxed);
        }
        OxiaStats { counts }
    }
}
