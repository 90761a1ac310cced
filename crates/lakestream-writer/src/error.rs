//! Append and trim errors, each with its class.

use lakestream_format::{ErrorClass, LogId};
use lakestream_meta::MetaError;

/// Why an append was not acknowledged. The variants follow the spec's failure semantics:
/// an entry is reported appended only after its index record committed; a failed object
/// write means the entries were not appended; an index put whose outcome is unknown is
/// reported as [`AppendError::OutcomeUnknown`], never as a failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppendError {
    /// The append itself is malformed (no records, payload too large, …). Not retried.
    #[error("invalid append: {0}")]
    InvalidInput(String),
    /// The log has a write fence: it is being or has been deleted. No lease can be had.
    #[error("log {log_id} is fenced (deleted); appends are refused")]
    Fenced {
        /// The log.
        log_id: LogId,
    },
    /// The metadata-store session behind the log's write lease ended before the entry's
    /// index record was published, so it was not published. The entry was not appended.
    #[error("write lease on log {log_id} lost (its session ended); the entry was not appended")]
    LeaseLost {
        /// The log.
        log_id: LogId,
    },
    /// Writing the WAL object failed, so no index record was published (spec A2/A3). The
    /// entry was not appended.
    #[error("WAL object write failed; the entry was not appended: {0}")]
    ObjectWriteFailed(String),
    /// The index put failed before taking effect. The entry was not appended.
    #[error("index put for log {log_id} failed; the entry was not appended: {reason}")]
    IndexPutFailed {
        /// The log.
        log_id: LogId,
        /// The store's error.
        reason: String,
    },
    /// The index put may or may not have committed. The entry may be readable; appending it
    /// again may store it twice.
    #[error(
        "index put for log {log_id} has an unknown outcome; the entry may or may not be appended: {reason}"
    )]
    OutcomeUnknown {
        /// The log.
        log_id: LogId,
        /// The store's error.
        reason: String,
    },
    /// The writer holds `max_in_flight_bytes` already and is configured to fail fast.
    #[error("writer is at its in-flight limit; retry later")]
    Backpressure,
    /// The writer is closed or closing.
    #[error("writer is closed")]
    Closed,
    /// A conditional append expected the log's next offset to be `expected`, but it was
    /// `actual`. Nothing was written.
    #[error("log {log_id}: expected next offset {expected}, but it is {actual}; nothing was appended")]
    OffsetMismatch {
        /// The log.
        log_id: LogId,
        /// The next offset the append expected.
        expected: u64,
        /// The log's next offset when the condition was checked.
        actual: u64,
    },
    /// A caller's publish gate (see [`crate::AppendOptions::before_publish`]) refused the
    /// append before its index put. Nothing was written.
    #[error("log {log_id}: the append was refused before publishing; nothing was appended: {reason}")]
    GateRefused {
        /// The log.
        log_id: LogId,
        /// Why, with the class the caller should act on.
        reason: String,
        /// The class of the refusal.
        class: ErrorClass,
    },
    /// A metadata-store error while acquiring the log's write lease. Nothing was written.
    #[error("acquiring the write lease on log {log_id} failed: {source}")]
    Lease {
        /// The log.
        log_id: LogId,
        /// The store's error.
        source: MetaError,
    },
}

impl AppendError {
    /// The class of the error, for callers and for the services' status codes.
    pub fn class(&self) -> ErrorClass {
        match self {
            AppendError::InvalidInput(_) => ErrorClass::InvalidInput,
            AppendError::Fenced { .. } => ErrorClass::Conflict,
            AppendError::LeaseLost { .. } => ErrorClass::Retryable,
            AppendError::ObjectWriteFailed(_) => ErrorClass::Retryable,
            AppendError::IndexPutFailed { .. } => ErrorClass::Retryable,
            AppendError::OutcomeUnknown { .. } => ErrorClass::OutcomeUnknown,
            AppendError::Backpressure => ErrorClass::Retryable,
            AppendError::Closed => ErrorClass::Retryable,
            AppendError::OffsetMismatch { .. } => ErrorClass::Conflict,
            AppendError::GateRefused { class, .. } => *class,
            AppendError::Lease { source, .. } => source.class(),
        }
    }
}

/// Why a soft trim did not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrimError {
    /// The log is fenced; its trim marker cannot be written.
    #[error("log {log_id} is fenced (deleted)")]
    Fenced {
        /// The log.
        log_id: LogId,
    },
    /// Other trims kept changing the marker; ours was not written. Unlike Ursa, we do not
    /// report the computed marker as if it had been stored.
    #[error("soft trim of log {log_id} lost {attempts} compare-and-set races; the marker was not advanced")]
    Contended {
        /// The log.
        log_id: LogId,
        /// How many attempts were made.
        attempts: u32,
    },
    /// The session behind the log's write lease ended during the trim, so the marker was not
    /// written (a catalog may have counted the lease as drained). Retrying takes a new lease.
    #[error("write lease on log {log_id} lost (its session ended); the trim marker was not written")]
    LeaseLost {
        /// The log.
        log_id: LogId,
    },
    /// The log's last index record could not be decoded.
    #[error("log {log_id}: {detail}")]
    Corrupt {
        /// The log.
        log_id: LogId,
        /// What was wrong.
        detail: String,
    },
    /// A metadata-store error.
    #[error("soft trim of log {log_id}: {source}")]
    Meta {
        /// The log.
        log_id: LogId,
        /// The store's error.
        source: MetaError,
    },
}

impl TrimError {
    /// The class of the error.
    pub fn class(&self) -> ErrorClass {
        match self {
            TrimError::Fenced { .. } => ErrorClass::Conflict,
            // Other trims kept moving the marker: a lost race, which a retry may win.
            TrimError::Contended { .. } => ErrorClass::Contended,
            TrimError::LeaseLost { .. } => ErrorClass::Retryable,
            TrimError::Corrupt { .. } => ErrorClass::CorruptData,
            TrimError::Meta { source, .. } => source.class(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_trim_race_is_contention_and_a_fence_a_conflict() {
        let log_id = LogId(3);
        assert_eq!(TrimError::Contended { log_id, attempts: 8 }.class(), ErrorClass::Contended);
        assert_eq!(TrimError::Fenced { log_id }.class(), ErrorClass::Conflict);
        let mismatch = MetaError::VersionMismatch { key: "k".into(), expected: 1 };
        assert_eq!(TrimError::Meta { log_id, source: mismatch }.class(), ErrorClass::Contended);
    }
}
