//! Progress events and the reports of the one-shot operations, for operators and the CLI.

use lakestream_format::{LogId, Offset};

use crate::compactor::PreparedCompaction;

/// A progress callback: called on every event, in order, from the task doing the work.
pub type ProgressFn<'a> = &'a (dyn Fn(&Progress) + Send + Sync);

/// A callback that ignores every event.
pub fn no_progress(_: &Progress) {}

/// One step of a compaction or collection pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// A log's compaction starts.
    LogStarted {
        /// The log.
        log_id: LogId,
    },
    /// A range's C2 starts.
    RangeStarted {
        /// The log.
        log_id: LogId,
        /// `s`.
        start: Offset,
        /// `e`.
        end: Offset,
    },
    /// A range was compacted (C2–C5 done).
    RangeCompacted(RangeReport),
    /// An interrupted C4 was finished.
    RetireRepaired {
        /// The log.
        log_id: LogId,
        /// `s`.
        start: Offset,
        /// `e`.
        end: Offset,
    },
    /// No closed range is left in a log: how far its compaction is behind.
    Backlog(Backlog),
    /// A log's compaction ended.
    LogDone {
        /// The log.
        log_id: LogId,
    },
    /// An object was deleted by hard trim or collection.
    ObjectDeleted {
        /// Which root: `"wal"` or `"compacted"`.
        root: &'static str,
        /// Its path.
        path: String,
    },
}

/// How far a log's compaction is behind when a pass over it ends (for lag metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backlog {
    /// The log.
    pub log_id: LogId,
    /// Its trim marker B.
    pub trim_marker: Offset,
    /// Payload bytes of RAW records above B not yet in a closed range.
    pub open_payload_bytes: u64,
    /// When the oldest of those entries was written (ms since the epoch); `None` when
    /// nothing is waiting.
    pub oldest_open_entry_ms: Option<i64>,
}

/// One compacted range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeReport {
    /// The log.
    pub log_id: LogId,
    /// `s`.
    pub start: Offset,
    /// `e`.
    pub end: Offset,
    /// The Parquet files written.
    pub files: usize,
    /// Rows written.
    pub rows: u64,
    /// Payload bytes written to rows.
    pub payload_bytes: u64,
    /// Bytes of Parquet files and companions written.
    pub bytes_written: u64,
}

impl RangeReport {
    pub(crate) fn of(p: &PreparedCompaction) -> RangeReport {
        RangeReport {
            log_id: p.log.log_id,
            start: p.plan.start,
            end: p.plan.end,
            files: p.files.len(),
            rows: p.files.iter().map(|f| f.rows).sum(),
            payload_bytes: p.payload_bytes,
            bytes_written: p.files.iter().map(|f| f.parquet_bytes + f.companion_bytes).sum(),
        }
    }
}

/// What `compact_once` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactReport {
    /// Logs with at least one compacted range.
    pub logs_compacted: usize,
    /// Every compacted range.
    pub ranges: Vec<RangeReport>,
    /// Payload bytes compacted.
    pub payload_bytes: u64,
    /// Bytes written to the compacted root.
    pub bytes_written: u64,
    /// Logs another compactor held.
    pub busy: Vec<LogId>,
    /// Logs whose compaction failed, with the error.
    pub failed: Vec<(LogId, String)>,
}

impl CompactReport {
    pub(crate) fn add_ranges(&mut self, ranges: Vec<RangeReport>) {
        for r in ranges {
            self.payload_bytes += r.payload_bytes;
            self.bytes_written += r.bytes_written;
            self.ranges.push(r);
        }
    }
}

/// What a hard trim did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HardTrimReport {
    /// The X actually used (at or below B, below the last record's end), if anything was removed.
    pub trimmed_to: Option<Offset>,
    /// Index records removed.
    pub records_removed: usize,
    /// Compacted files and companions deleted (paths in the compacted root).
    pub compacted_deleted: Vec<String>,
    /// WAL objects announced in the retirement ledger.
    pub wal_retired: Vec<String>,
}

/// What `gc_once` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// WAL objects deleted.
    pub wal_deleted: Vec<String>,
    /// Compacted files and companions deleted as orphans.
    pub compacted_deleted: Vec<String>,
    /// WAL objects first found unreferenced in this pass (their grace period starts now).
    pub marked_unreferenced: usize,
    /// Unreferenced WAL objects still inside their grace period.
    pub waiting: usize,
    /// Ledger entries whose object is still named by an index record.
    pub still_referenced: usize,
    /// Ledger entries removed because their object was already gone.
    pub ledger_cleared: usize,
    /// Retirement announcements turned into per-object ledger entries.
    pub announcements_expanded: usize,
    /// Objects that could not be handled, with the error.
    pub failed: Vec<(String, String)>,
}
