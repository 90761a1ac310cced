//! Value types shared by every Lakestream crate.
//!
//! These are plain data: the spec's vocabulary (log ID, offset, entry, file type) as Rust
//! types, so that the writer, reader, compactor and catalog speak about the same things.

use bytes::Bytes;

/// A log ID `L`: a non-negative 64-bit integer that names a log in a deployment.
///
/// The spec bounds it by the key format (20 decimal digits) and by Java's `long`, so the
/// largest valid value is `i64::MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogId(pub u64);

impl LogId {
    /// The largest log ID the format can express (`2^63 - 1`).
    pub const MAX: LogId = LogId(i64::MAX as u64);

    /// The partition name `P(L)`: the decimal log ID without leading zeros.
    pub fn partition(self) -> String {
        self.0.to_string()
    }
}

impl std::fmt::Display for LogId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// An offset: the position of a record in its log, counted from 0.
pub type Offset = u64;

/// One entry as a reader returns it: an opaque payload holding `record_count` records that
/// take the offsets `[offset, offset + record_count)`, and the entry's timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The first offset of the entry.
    pub offset: Offset,
    /// How many records (offsets) the entry holds; at least 1.
    pub record_count: u32,
    /// The entry's timestamp in milliseconds since the Unix epoch: the creation timestamp of
    /// the RAW record that indexed it.
    pub timestamp_ms: i64,
    /// The entry payload, unchanged.
    pub payload: Bytes,
}

impl Entry {
    /// The offset after the entry's last record.
    pub fn end_offset(&self) -> Offset {
        self.offset + u64::from(self.record_count)
    }
}

/// What a reader needs to know about a log: its ID and the stream it belongs to. The catalog
/// resolves it; the reader does not depend on a catalog.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LogRef {
    /// The log ID.
    pub log_id: LogId,
    /// The stream's namespace (contains no `/`).
    pub namespace: String,
    /// The stream's name (contains no `/`).
    pub stream: String,
}

/// Where an index record's entries live. Readers dispatch on this alone (R3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    /// The entries are in a WAL object.
    Raw,
    /// The entries are in compacted Parquet files.
    Parquet,
}
