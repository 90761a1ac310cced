//! `EntryIndex` values of index records ("Offset index values"; addendum §4).
//!
//! The value of an index record is a proto2 `storage.proto.EntryIndex`:
//!
//! ```text
//!  #  field              RAW record (as Ursa writes it)       PARQUET record
//!  1  version            3                                    3
//!  2  location           WAL object name                      first compacted file
//!  3  file_type          RAW = 0 (written explicitly)         PARQUET = 1
//!  4  index_type         COMPACT iff the object has 1 section COMPACT
//!  5  message_count      sum of record counts                 e - s
//!  6  entry_size_bytes   sum of payload sizes                 c_e - c_s
//!  7  file_size          payload-region length (all logs)     c_e - c_s
//!  8  offset_in_file     -1                                   0
//!  9  entry_count        entries in the section               1
//! 10  entry_offsets      iff entry_count > 1: FastPFOR, 4n,   absent
//!                        IntegratedIntCompressor words (BE)
//! 11  extraData          none                                 CompactedObjectFileIndex -> Base64
//! ```
//!
//! The messages are hand-written prost structs with `Option` fields, so that every field the
//! writer sets is emitted even when it is zero (`18 00`, `20 00`), as Ursa's proto2 encoder
//! does (addendum §4.3). [`EntryIndex::raw`] and [`EntryIndex::parquet`] build values exactly
//! as Ursa writes them; [`decode`] validates a value and returns an [`IndexValue`], which tells
//! RAW from PARQUET by `file_type` alone.
//!
//! ```
//! use lakestream_format::entry_index::{self, IndexValue};
//! use lakestream_format::wal::WalObjectBuilder;
//! use lakestream_format::LogId;
//!
//! let mut builder = WalObjectBuilder::new();
//! builder.add_entry(LogId(7), vec![1, 2, 3, 4, 5], 2)?;
//! builder.add_entry(LogId(7), vec![6, 7, 8], 1)?;
//! let built = builder.build()?;
//! let value = entry_index::EntryIndex::raw("7-00000001.wal", &built.sections[0])?.encode();
//! assert_eq!(value.len(), 61); // the spec's RAW example
//! let IndexValue::Raw(record) = entry_index::decode(&value)? else { unreachable!() };
//! assert_eq!(record.boundaries, [2, 3]);
//! # Ok::<(), lakestream_format::FormatError>(())
//! ```

use std::collections::HashSet;

use prost::Message as _;

use crate::entry_offsets;
use crate::error::{FormatError, Result};
use crate::file_index::{FILE_INDEX_KEY, FileIndex};
use crate::legacy;
use crate::types::{FileType, Offset};
use crate::wal::SectionSummary;

const STRUCTURE: &str = "EntryIndex";
const BUILD: &str = "EntryIndex builder";

/// `storage.proto.CompressionType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum CompressionType {
    /// Not used in format version 3.
    None = 0,
    /// JavaFastPFOR `IntegratedIntCompressor` words: the only value of format version 3.
    FastPfor = 1,
    /// Not used in format version 3.
    Zstd = 2,
}

/// `storage.proto.FileType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum ProtoFileType {
    /// The entries are in a WAL object.
    Raw = 0,
    /// The entries are in compacted Parquet files.
    Parquet = 1,
}

/// `storage.proto.IndexType`: informational; readers never dispatch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum IndexType {
    /// A RAW record of a WAL object with several sections.
    Normal = 0,
    /// A PARQUET record, or a RAW record of a WAL object with one section.
    Compact = 1,
}

/// `storage.proto.Version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Version {
    /// Format version 3.
    V3 = 3,
}

/// `storage.proto.ExtraData`: a key-value pair of a record.
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct ExtraData {
    /// The key; every pair must set it.
    #[prost(string, optional, tag = "1")]
    pub key: Option<String>,
    /// The value; every pair must set it.
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
}

/// `storage.proto.EntryOffsets`: the entry boundaries of a RAW record with several entries.
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct EntryOffsets {
    /// Must be FastPFOR (1).
    #[prost(enumeration = "CompressionType", optional, tag = "1")]
    pub compression_type: Option<i32>,
    /// Ursa writes 4 × n, the byte size of the boundaries as int32s, and so do we. The spec
    /// does not constrain it, so readers ignore it.
    #[prost(int32, optional, tag = "2")]
    pub uncompressed_size: Option<i32>,
    /// The `IntegratedIntCompressor` words, each a big-endian int32.
    #[prost(bytes = "vec", optional, tag = "3")]
    pub compressed_payload: Option<Vec<u8>>,
}

/// `storage.proto.EntryIndex`: the value of an index record, field for field.
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct EntryIndex {
    /// Must be 3.
    #[prost(enumeration = "Version", optional, tag = "1")]
    pub version: Option<i32>,
    /// RAW: the WAL object's name. PARQUET: the first compacted file's name.
    #[prost(string, optional, tag = "2")]
    pub location: Option<String>,
    /// RAW (0) or PARQUET (1): the one field readers dispatch on.
    #[prost(enumeration = "ProtoFileType", optional, tag = "3")]
    pub file_type: Option<i32>,
    /// NORMAL (0) or COMPACT (1); informational.
    #[prost(enumeration = "IndexType", optional, tag = "4")]
    pub index_type: Option<i32>,
    /// The number of records (offsets) the record covers.
    #[prost(int32, optional, tag = "5")]
    pub message_count: Option<i32>,
    /// The total payload size of the record's entries.
    #[prost(int64, optional, tag = "6")]
    pub entry_size_bytes: Option<i64>,
    /// RAW: the payload-region length. PARQUET: `entry_size_bytes` again. Informational.
    #[prost(int64, optional, tag = "7")]
    pub file_size: Option<i64>,
    /// RAW: −1. PARQUET: 0. Informational.
    #[prost(int64, optional, tag = "8")]
    pub offset_in_file: Option<i64>,
    /// RAW: the number of entries. PARQUET: 1.
    #[prost(int32, optional, tag = "9")]
    pub entry_count: Option<i32>,
    /// The entry boundaries, present iff a RAW record has more than one entry.
    #[prost(message, optional, tag = "10")]
    pub entry_offsets: Option<EntryOffsets>,
    /// Key-value pairs; a PARQUET record has exactly one, its file index.
    #[prost(message, repeated, tag = "11")]
    pub extra_data: Vec<ExtraData>,
}

impl EntryIndex {
    /// The RAW value of a WAL object's log section, exactly as Ursa writes it.
    pub fn raw(location: &str, section: &SectionSummary) -> Result<EntryIndex> {
        let record_counts: Vec<u32> = section.entries.iter().map(|e| e.record_count).collect();
        Self::raw_from_parts(&RawParts {
            location,
            record_counts: &record_counts,
            entry_size_bytes: section.payload_bytes,
            payload_region_len: section.payload_region_len,
            single_section: section.sections_in_object == 1,
        })
    }

    /// The RAW value described by `parts`, exactly as Ursa writes it.
    pub fn raw_from_parts(parts: &RawParts<'_>) -> Result<EntryIndex> {
        let invalid = |detail: String| FormatError::invalid(BUILD, detail);
        if parts.location.is_empty() {
            return Err(invalid("a RAW record needs a location".into()));
        }
        let boundaries = boundaries_of(parts.record_counts)?;
        let entry_count =
            i32::try_from(boundaries.len()).map_err(|_| invalid("more than 2^31-1 entries".into()))?;
        let message_count = boundaries.last().copied().unwrap_or(0) as i32;
        let entry_size_bytes = to_i64(parts.entry_size_bytes, "entry_size_bytes").map_err(invalid)?;
        let file_size = to_i64(parts.payload_region_len, "payload-region length").map_err(invalid)?;
        if parts.entry_size_bytes > parts.payload_region_len {
            return Err(invalid(format!(
                "entry_size_bytes {} exceeds the payload region of {} bytes",
                parts.entry_size_bytes, parts.payload_region_len
            )));
        }
        let entry_offsets = if boundaries.len() > 1 {
            Some(EntryOffsets {
                compression_type: Some(CompressionType::FastPfor as i32),
                uncompressed_size: Some(
                    entry_count.checked_mul(4).ok_or_else(|| invalid("too many entries".into()))?,
                ),
                compressed_payload: Some(entry_offsets::encode_to_bytes(&boundaries)?),
            })
        } else {
            None
        };
        let index_type = if parts.single_section { IndexType::Compact } else { IndexType::Normal };
        Ok(EntryIndex {
            version: Some(Version::V3 as i32),
            location: Some(parts.location.to_owned()),
            file_type: Some(ProtoFileType::Raw as i32),
            index_type: Some(index_type as i32),
            message_count: Some(message_count),
            entry_size_bytes: Some(entry_size_bytes),
            file_size: Some(file_size),
            offset_in_file: Some(-1),
            entry_count: Some(entry_count),
            entry_offsets,
            extra_data: Vec::new(),
        })
    }

    /// The PARQUET value for the compacted range `[start, end)` with cumulative sizes
    /// `cumulative_start` (`c_s`) and `cumulative_end` (`c_e`), whose entries are in the files
    /// of `files`, exactly as Ursa writes it. The last file must end at `end − 1`.
    pub fn parquet(range: ParquetRange, files: &FileIndex) -> Result<EntryIndex> {
        let invalid = |detail: String| FormatError::invalid(BUILD, detail);
        let ParquetRange { start, end, cumulative_start, cumulative_end } = range;
        if start >= end {
            return Err(invalid(format!("empty or inverted range [{start}, {end})")));
        }
        let message_count = i32::try_from(end - start)
            .map_err(|_| invalid(format!("range [{start}, {end}) holds more than 2^31-1 offsets")))?;
        if files.last_offset() != end - 1 {
            return Err(invalid(format!(
                "the last file ends at {}, the range at {}",
                files.last_offset(),
                end - 1
            )));
        }
        if files.entries()[0].last_offset < start {
            return Err(invalid(format!(
                "the first file ends at {}, before the range start {start}",
                files.entries()[0].last_offset
            )));
        }
        let size = cumulative_end
            .checked_sub(cumulative_start)
            .ok_or_else(|| invalid(format!("c_e {cumulative_end} is below c_s {cumulative_start}")))?;
        let size = to_i64(size, "c_e - c_s").map_err(invalid)?;
        Ok(EntryIndex {
            version: Some(Version::V3 as i32),
            location: Some(files.first_name().to_owned()),
            file_type: Some(ProtoFileType::Parquet as i32),
            index_type: Some(IndexType::Compact as i32),
            message_count: Some(message_count),
            entry_size_bytes: Some(size),
            file_size: Some(size),
            offset_in_file: Some(0),
            entry_count: Some(1),
            entry_offsets: None,
            extra_data: vec![ExtraData {
                key: Some(FILE_INDEX_KEY.to_owned()),
                value: Some(files.to_base64()),
            }],
        })
    }

    /// The protobuf bytes, fields in ascending number order.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_to_vec()
    }
}

/// The inputs of a RAW value, for callers that do not hold a [`SectionSummary`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawParts<'a> {
    /// The WAL object's name.
    pub location: &'a str,
    /// Each entry's record count, in section order.
    pub record_counts: &'a [u32],
    /// The sum of the section's payload sizes.
    pub entry_size_bytes: u64,
    /// The length of the object's whole payload region.
    pub payload_region_len: u64,
    /// Whether the object has exactly one log section.
    pub single_section: bool,
}

/// The range of a compaction: offsets `[start, end)`, cumulative sizes `c_s` and `c_e`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParquetRange {
    /// `s`, the first offset.
    pub start: Offset,
    /// `e`, the exclusive end offset.
    pub end: Offset,
    /// `c_s`, the cumulative size at `s`.
    pub cumulative_start: u64,
    /// `c_e`, the cumulative size at `e`.
    pub cumulative_end: u64,
}

/// A validated index value, told apart by `file_type` alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexValue {
    /// A RAW record: the entries are in a WAL object.
    Raw(RawRecord),
    /// A PARQUET record: the entries are in compacted files.
    Parquet(ParquetRecord),
}

impl IndexValue {
    /// The record's file type.
    pub fn file_type(&self) -> FileType {
        match self {
            IndexValue::Raw(_) => FileType::Raw,
            IndexValue::Parquet(_) => FileType::Parquet,
        }
    }

    /// The number of offsets the record covers: its start offset is its key's end offset minus this.
    pub fn message_count(&self) -> u32 {
        match self {
            IndexValue::Raw(r) => r.message_count,
            IndexValue::Parquet(p) => p.message_count,
        }
    }

    /// The total payload size of the record's entries.
    pub fn entry_size_bytes(&self) -> u64 {
        match self {
            IndexValue::Raw(r) => r.entry_size_bytes,
            IndexValue::Parquet(p) => p.entry_size_bytes,
        }
    }
}

/// A validated RAW record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    /// The WAL object's name, relative to the WAL root.
    pub location: String,
    /// The number of offsets the record covers (>= 1).
    pub message_count: u32,
    /// The sum of the entries' payload sizes.
    pub entry_size_bytes: u64,
    /// The number of entries (>= 1).
    pub entry_count: u32,
    /// The boundaries A: `A[i]` is the record count of entries `0..=i`; `A[n−1]` is
    /// `message_count`. For one entry, `[message_count]`.
    pub boundaries: Vec<u32>,
    /// The `index_type` as written, if any (informational).
    pub index_type: Option<i32>,
    /// The `file_size` as written, if any (informational).
    pub file_size: Option<i64>,
    /// The `offset_in_file` as written, if any (informational).
    pub offset_in_file: Option<i64>,
    /// The extraData pairs (a RAW record normally has none), validated.
    pub extra_data: Vec<(String, String)>,
}

impl RawRecord {
    /// Each entry's record count, from the boundaries.
    pub fn record_counts(&self) -> Vec<u32> {
        let mut previous = 0;
        self.boundaries
            .iter()
            .map(|&b| {
                let count = b.saturating_sub(previous);
                previous = b;
                count
            })
            .collect()
    }
}

/// A validated PARQUET record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParquetRecord {
    /// The `location` as written (the first file; informational).
    pub location: Option<String>,
    /// `e − s` (>= 1).
    pub message_count: u32,
    /// `c_e − c_s`.
    pub entry_size_bytes: u64,
    /// The decoded `CompactedObjectFileIndex`.
    pub file_index: FileIndex,
    /// All extraData pairs, including the file index, validated.
    pub extra_data: Vec<(String, String)>,
}

impl ParquetRecord {
    /// Checks the file index against the record's range `[end − message_count, end)`, given the
    /// `end` from the record's key: the last file must end at `end − 1`, and the first must
    /// end at or after the start.
    pub fn check_range(&self, end: Offset) -> Result<()> {
        let start = end.checked_sub(u64::from(self.message_count)).ok_or_else(|| {
            FormatError::corrupt(
                STRUCTURE,
                format!("message_count {} exceeds the key's end offset {end}", self.message_count),
            )
        })?;
        if self.file_index.last_offset() + 1 != end || self.file_index.entries()[0].last_offset < start {
            return Err(FormatError::corrupt(
                STRUCTURE,
                format!(
                    "file index covers up to {} (first file to {}), the record [{start}, {end})",
                    self.file_index.last_offset(),
                    self.file_index.entries()[0].last_offset
                ),
            ));
        }
        Ok(())
    }
}

/// Decodes and validates an index value.
///
/// Accepts any field order and skips unknown fields. Rejects: a legacy (version 1 or 2) string
/// value, naming it; `version` absent or not 3; `file_type` absent or unknown; a missing or
/// non-positive `message_count`, a missing or negative `entry_size_bytes`; extraData pairs
/// without key or value, or with a repeated key. For RAW: a missing location, `entry_count`
/// below 1, missing `entry_offsets` when `entry_count` > 1, `compression_type` other than
/// FastPFOR, word 0 ≠ `entry_count`, boundaries that do not increase, and `A[n−1]` ≠
/// `message_count`. `uncompressed_size` may hold any value or be absent (the spec does not
/// constrain it; [`EntryIndex::raw`] writes 4n). For PARQUET: no `CompactedObjectFileIndex`
/// pair, or one that is not a valid file index.
pub fn decode(bytes: &[u8]) -> Result<IndexValue> {
    legacy::check_not_legacy_index_value(bytes)?;
    let message =
        EntryIndex::decode(bytes).map_err(|e| corrupt(format!("not a protobuf EntryIndex: {e}")))?;
    validate(message)
}

/// The fields of an index value as written, without the checks of [`decode`]: for tools and
/// tests that look at what a writer put there, right or wrong. Fails only on bytes that are
/// not a protobuf `EntryIndex` at all.
pub fn decode_fields(bytes: &[u8]) -> Result<EntryIndex> {
    EntryIndex::decode(bytes).map_err(|e| corrupt(format!("not a protobuf EntryIndex: {e}")))
}

/// Validates a decoded [`EntryIndex`] (see [`decode`]).
pub fn validate(message: EntryIndex) -> Result<IndexValue> {
    match message.version {
        Some(3) => {}
        Some(other) => {
            return Err(FormatError::unsupported(STRUCTURE, format!("version {other}; only 3 is read")));
        }
        None => return Err(FormatError::unsupported(STRUCTURE, "version is absent; only 3 is read")),
    }
    let file_type = match message.file_type {
        Some(0) => FileType::Raw,
        Some(1) => FileType::Parquet,
        Some(other) => return Err(corrupt(format!("unknown file_type {other}"))),
        None => return Err(corrupt("file_type is absent")),
    };
    let message_count = match message.message_count {
        Some(m) if m >= 1 => m as u32,
        Some(m) => return Err(corrupt(format!("message_count {m} is below 1"))),
        None => return Err(corrupt("message_count is absent")),
    };
    let entry_size_bytes = match message.entry_size_bytes {
        Some(s) if s >= 0 => s as u64,
        Some(s) => return Err(corrupt(format!("negative entry_size_bytes {s}"))),
        None => return Err(corrupt("entry_size_bytes is absent")),
    };
    let extra_data = validate_extra_data(&message.extra_data)?;
    match file_type {
        FileType::Raw => {
            validate_raw(message, message_count, entry_size_bytes, extra_data).map(IndexValue::Raw)
        }
        FileType::Parquet => {
            let Some((_, value)) = extra_data.iter().find(|(k, _)| k == FILE_INDEX_KEY) else {
                return Err(corrupt(format!(
                    "PARQUET record without a {FILE_INDEX_KEY} pair cannot be read"
                )));
            };
            let file_index = FileIndex::from_base64(value)?;
            Ok(IndexValue::Parquet(ParquetRecord {
                location: message.location,
                message_count,
                entry_size_bytes,
                file_index,
                extra_data,
            }))
        }
    }
}

fn validate_raw(
    message: EntryIndex,
    message_count: u32,
    entry_size_bytes: u64,
    extra_data: Vec<(String, String)>,
) -> Result<RawRecord> {
    let location = match message.location {
        Some(l) if !l.is_empty() => l,
        _ => return Err(corrupt("RAW record without a location")),
    };
    let entry_count = match message.entry_count {
        Some(n) if n >= 1 => n as u32,
        Some(n) => return Err(corrupt(format!("RAW entry_count {n} is below 1"))),
        None => return Err(corrupt("RAW entry_count is absent")),
    };
    let boundaries = match (&message.entry_offsets, entry_count) {
        (None, 1) => vec![message_count],
        (None, n) => return Err(corrupt(format!("RAW record of {n} entries without entry_offsets"))),
        (Some(offsets), n) => decode_boundaries(offsets, n, message_count)?,
    };
    Ok(RawRecord {
        location,
        message_count,
        entry_size_bytes,
        entry_count,
        boundaries,
        index_type: message.index_type,
        file_size: message.file_size,
        offset_in_file: message.offset_in_file,
        extra_data,
    })
}

fn decode_boundaries(offsets: &EntryOffsets, entry_count: u32, message_count: u32) -> Result<Vec<u32>> {
    match offsets.compression_type {
        Some(1) => {}
        Some(other) => return Err(corrupt(format!("compression_type {other}; only FastPFOR (1) is used"))),
        None => return Err(corrupt("compression_type is absent; must be FastPFOR (1)")),
    }
    // `uncompressed_size` is not read: the spec sets no value for it (Ursa writes 4n, and so
    // do we), so another writer's value, or none, must not make the record unreadable.
    let payload =
        offsets.compressed_payload.as_deref().ok_or_else(|| corrupt("compressed_payload is absent"))?;
    let words = entry_offsets::words_from_be_bytes(payload)?;
    if words.first() != Some(&entry_count) {
        return Err(corrupt(format!(
            "entry_offsets word 0 is {:?}, entry_count {entry_count}",
            words.first()
        )));
    }
    let boundaries = entry_offsets::decode(&words)?;
    let mut previous = 0u32;
    for (i, &b) in boundaries.iter().enumerate() {
        if b <= previous || b > i32::MAX as u32 {
            return Err(corrupt(format!("boundary {i} is {b}, not above the previous {previous}")));
        }
        previous = b;
    }
    if previous != message_count {
        return Err(corrupt(format!("last boundary {previous} differs from message_count {message_count}")));
    }
    Ok(boundaries)
}

fn validate_extra_data(pairs: &[ExtraData]) -> Result<Vec<(String, String)>> {
    let mut seen = HashSet::new();
    pairs
        .iter()
        .enumerate()
        .map(|(i, pair)| {
            let (Some(key), Some(value)) = (&pair.key, &pair.value) else {
                return Err(corrupt(format!("extraData pair {i} does not set both key and value")));
            };
            if !seen.insert(key.as_str()) {
                return Err(corrupt(format!("extraData key {key:?} appears more than once")));
            }
            Ok((key.clone(), value.clone()))
        })
        .collect()
}

/// The boundaries A of entries with these record counts (each >= 1, total <= 2³¹ − 1).
pub fn boundaries_of(record_counts: &[u32]) -> Result<Vec<u32>> {
    let invalid = |detail: String| FormatError::invalid("entry boundaries", detail);
    if record_counts.is_empty() {
        return Err(invalid("a record holds at least one entry".into()));
    }
    let mut total = 0u64;
    record_counts
        .iter()
        .enumerate()
        .map(|(i, &count)| {
            if count == 0 {
                return Err(invalid(format!("entry {i} has record count 0")));
            }
            total += u64::from(count);
            if total > i32::MAX as u64 {
                return Err(invalid(format!("record counts exceed 2^31-1 at entry {i}")));
            }
            Ok(total as u32)
        })
        .collect()
}

fn to_i64(value: u64, what: &str) -> std::result::Result<i64, String> {
    i64::try_from(value).map_err(|_| format!("{what} {value} exceeds 2^63-1"))
}

fn corrupt(detail: impl Into<String>) -> FormatError {
    FormatError::corrupt(STRUCTURE, detail)
}
