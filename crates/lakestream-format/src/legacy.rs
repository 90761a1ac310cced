//! Read-only parsers for format versions 1 and 2 (Appendix C), and the checks that tell
//! them from version 3.
//!
//! Legacy WAL object:
//!
//! ```text
//! index_length     int64 BE
//! index region     index_length bytes of 32-byte tuples, in no particular order:
//!   log_id           int64 BE
//!   entry_id         int64 BE   numbers the object's entries from 0, across all logs
//!   payload_offset   int64 BE   from the start of the payload region
//!   payload_length   int64 BE
//! payload region   the rest of the object
//! ```
//!
//! Legacy index values are UTF-8 strings, one record per entry:
//!
//! ```text
//! version 1:  {message_count:020}-{entry_size_bytes:020}-{location}-{entry_id}
//! version 2:  {message_count:020}-{entry_size_bytes:020}-{location}-{entry_id}-{file_type}
//! ```
//!
//! The numbers are characters 0–19 and 21–40; the position is everything from character 42.
//! The trailing fields split off at the last `-`, since a location may itself contain `-`.
//!
//! Telling versions apart (Appendix C, addendum §11.11): a version 3 value begins `08 03`, a
//! legacy value with an ASCII digit; a legacy WAL object begins with an 8-byte length whose
//! four high bytes are 0, a version 3 object with a 4-byte length of at least 4. The v3
//! decoders call [`check_not_legacy_index_value`] and [`check_not_legacy_wal_object`] so that
//! meeting legacy data gives an error that names its version.

use bytes::Bytes;

use crate::error::{FormatError, Result};
use crate::types::{FileType, LogId};

const WAL: &str = "legacy WAL object";
const VALUE: &str = "legacy index value";
const TUPLE_LEN: u64 = 32;

/// A format version older than 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LegacyVersion {
    /// Version 1: no file type in the value.
    V1,
    /// Version 2: the value ends with the file type.
    V2,
}

impl std::fmt::Display for LegacyVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LegacyVersion::V1 => "version 1",
            LegacyVersion::V2 => "version 2",
        })
    }
}

/// What the first bytes of an index value or WAL object suggest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DetectedFormat {
    /// Format version 3.
    V3,
    /// Format version 1 or 2.
    Legacy,
    /// Neither pattern matches.
    Unknown,
}

/// Detects the format of an index value: version 3 begins `08 03`, version 1 or 2 with an
/// ASCII digit.
pub fn detect_index_value(value: &[u8]) -> DetectedFormat {
    match value {
        [0x08, 0x03, ..] => DetectedFormat::V3,
        [first, ..] if first.is_ascii_digit() => DetectedFormat::Legacy,
        _ => DetectedFormat::Unknown,
    }
}

/// Detects the format of a WAL object from its first bytes (4 are enough): a legacy object
/// begins with four zero bytes (the high half of its 8-byte length), a version 3 object with a
/// 4-byte big-endian length of at least 4.
pub fn detect_wal_object(first_bytes: &[u8]) -> DetectedFormat {
    match first_bytes.first_chunk::<4>().map(|b| i32::from_be_bytes(*b)) {
        Some(0) => DetectedFormat::Legacy,
        Some(len) if len >= 4 => DetectedFormat::V3,
        _ => DetectedFormat::Unknown,
    }
}

/// An [`FormatError::Unsupported`] error naming the legacy version when `value` is a version 1
/// or 2 string value; `Ok` otherwise.
///
/// Beginning with an ASCII digit is not enough: a v3 value whose first field is
/// `entry_size_bytes` (tag `0x30`) or `file_size` (`0x38`) does too, and readers accept any field
/// order. So the value must parse as a legacy string, which no protobuf `EntryIndex` does.
pub fn check_not_legacy_index_value(value: &[u8]) -> Result<()> {
    if detect_index_value(value) != DetectedFormat::Legacy {
        return Ok(());
    }
    match LegacyIndexValue::parse(value) {
        Ok(parsed) => Err(FormatError::unsupported(
            "EntryIndex",
            format!("a {} string value, not a version 3 EntryIndex", parsed.version),
        )),
        Err(_) => Ok(()),
    }
}

/// An [`FormatError::Unsupported`] error when a WAL object begins like a version 1 or 2 object
/// (four zero bytes); `Ok` otherwise.
pub fn check_not_legacy_wal_object(first_bytes: &[u8]) -> Result<()> {
    if detect_wal_object(first_bytes) != DetectedFormat::Legacy {
        return Ok(());
    }
    let length = first_bytes.first_chunk::<8>().map(|b| i64::from_be_bytes(*b));
    let detail = match length {
        Some(len) => format!("begins with the 8-byte index length {len} of a version 1 or 2 WAL object"),
        None => "begins with four zero bytes, as a version 1 or 2 WAL object does".to_owned(),
    };
    Err(FormatError::unsupported("WAL object", detail))
}

/// One 32-byte tuple of a legacy WAL object's index region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LegacyTuple {
    /// The log.
    pub log_id: LogId,
    /// The entry's number within the object, from 0 across all logs, in the order added.
    pub entry_id: u64,
    /// Where the payload starts in the payload region.
    pub payload_offset: u64,
    /// The payload's length.
    pub payload_length: u64,
}

/// A parsed legacy WAL object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyWalObject {
    tuples: Vec<LegacyTuple>,
    payload_region: Bytes,
}

impl LegacyWalObject {
    /// Parses a whole legacy WAL object. Refuses a negative index length, one that is not a
    /// whole number of 32-byte tuples or reaches past the object, negative fields, repeated
    /// entry IDs or IDs not below the number of tuples, and payloads outside the payload region.
    pub fn parse(object: Bytes) -> Result<LegacyWalObject> {
        let corrupt = |detail: String| FormatError::corrupt(WAL, detail);
        let Some(prefix) = object.first_chunk::<8>() else {
            return Err(corrupt(format!("{} bytes is too short for the 8-byte index length", object.len())));
        };
        let index_length = i64::from_be_bytes(*prefix);
        let index_len = u64::try_from(index_length)
            .map_err(|_| corrupt(format!("negative index length {index_length}")))?;
        if index_len % TUPLE_LEN != 0 {
            return Err(corrupt(format!("index length {index_len} is not a multiple of {TUPLE_LEN}")));
        }
        let region_end =
            8u64.checked_add(index_len).filter(|&end| end <= object.len() as u64).ok_or_else(|| {
                corrupt(format!("index length {index_len} reaches past the object's {} bytes", object.len()))
            })?;
        let region = &object[8..region_end as usize];
        let payload_region = object.slice(region_end as usize..);
        let count = region.len() / TUPLE_LEN as usize;
        let mut seen = vec![false; count];
        let mut tuples = Vec::with_capacity(count);
        for (i, chunk) in region.as_chunks::<32>().0.iter().enumerate() {
            let field = |at: usize, name: &str| -> Result<u64> {
                let raw = i64::from_be_bytes(chunk[at..at + 8].try_into().unwrap_or([0; 8]));
                u64::try_from(raw).map_err(|_| corrupt(format!("tuple {i}: negative {name} {raw}")))
            };
            let tuple = LegacyTuple {
                log_id: LogId(field(0, "log_id")?),
                entry_id: field(8, "entry_id")?,
                payload_offset: field(16, "payload_offset")?,
                payload_length: field(24, "payload_length")?,
            };
            match seen.get_mut(tuple.entry_id as usize) {
                Some(slot) if tuple.entry_id < count as u64 && !*slot => *slot = true,
                _ => {
                    return Err(corrupt(format!(
                        "tuple {i}: entry_id {} is repeated or not below the {count} entries",
                        tuple.entry_id
                    )));
                }
            }
            let end = tuple.payload_offset.checked_add(tuple.payload_length);
            if end.is_none_or(|end| end > payload_region.len() as u64) {
                return Err(corrupt(format!(
                    "tuple {i}: payload {}+{} is outside the payload region of {} bytes",
                    tuple.payload_offset,
                    tuple.payload_length,
                    payload_region.len()
                )));
            }
            tuples.push(tuple);
        }
        Ok(LegacyWalObject { tuples, payload_region })
    }

    /// The tuples, in the order of the index region.
    pub fn tuples(&self) -> &[LegacyTuple] {
        &self.tuples
    }

    /// The tuple of entry `entry_id` and its payload (a zero-copy slice).
    pub fn entry(&self, entry_id: u64) -> Option<(LegacyTuple, Bytes)> {
        self.tuples.iter().find(|t| t.entry_id == entry_id).map(|t| (*t, self.payload(t)))
    }

    /// The entries of `log_id`, ordered by entry ID (the order they were added).
    pub fn entries_of(&self, log_id: LogId) -> Vec<(LegacyTuple, Bytes)> {
        let mut found: Vec<_> =
            self.tuples.iter().filter(|t| t.log_id == log_id).map(|t| (*t, self.payload(t))).collect();
        found.sort_by_key(|(t, _)| t.entry_id);
        found
    }

    fn payload(&self, tuple: &LegacyTuple) -> Bytes {
        // `parse` checked that every payload lies within the region.
        self.payload_region
            .slice(tuple.payload_offset as usize..(tuple.payload_offset + tuple.payload_length) as usize)
    }
}

/// A parsed version 1 or 2 index value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LegacyIndexValue {
    /// The format version the value is written in.
    pub version: LegacyVersion,
    /// The entry's record count.
    pub message_count: u64,
    /// The entry's payload size.
    pub entry_size_bytes: u64,
    /// The object the entry is in.
    pub location: String,
    /// The entry's number within a legacy WAL object.
    pub entry_id: u64,
    /// The file type (version 2 only; version 1 values are RAW).
    pub file_type: Option<FileType>,
}

impl LegacyIndexValue {
    /// Parses a value, telling version 1 from version 2 by its last field: `RAW` or `PARQUET`
    /// makes it version 2, a decimal entry ID version 1.
    pub fn parse(value: &[u8]) -> Result<LegacyIndexValue> {
        let (message_count, entry_size_bytes, position) = split_value(value)?;
        let (rest, last) = split_last(position)?;
        let (version, location, entry_id, file_type) = match last {
            "RAW" | "PARQUET" => {
                let (location, entry_id) = split_last(rest)?;
                let file_type = if last == "RAW" { FileType::Raw } else { FileType::Parquet };
                (LegacyVersion::V2, location, entry_id, Some(file_type))
            }
            _ => (LegacyVersion::V1, rest, last, None),
        };
        Self::finish(version, message_count, entry_size_bytes, location, entry_id, file_type)
    }

    /// Parses a value that must be in `version`.
    pub fn parse_version(value: &[u8], version: LegacyVersion) -> Result<LegacyIndexValue> {
        let parsed = Self::parse(value)?;
        if parsed.version != version {
            return Err(FormatError::corrupt(
                VALUE,
                format!("expected a {version} value, found a {}", parsed.version),
            ));
        }
        Ok(parsed)
    }

    /// The file type, taking version 1 values as RAW.
    pub fn effective_file_type(&self) -> FileType {
        self.file_type.unwrap_or(FileType::Raw)
    }

    fn finish(
        version: LegacyVersion,
        message_count: u64,
        entry_size_bytes: u64,
        location: &str,
        entry_id: &str,
        file_type: Option<FileType>,
    ) -> Result<LegacyIndexValue> {
        if location.is_empty() {
            return Err(FormatError::corrupt(VALUE, "empty location"));
        }
        let entry_id = parse_decimal(entry_id, "entry_id")?;
        Ok(LegacyIndexValue {
            version,
            message_count,
            entry_size_bytes,
            location: location.to_owned(),
            entry_id,
            file_type,
        })
    }
}

fn split_value(value: &[u8]) -> Result<(u64, u64, &str)> {
    let text = std::str::from_utf8(value).map_err(|_| FormatError::corrupt(VALUE, "not UTF-8"))?;
    let b = text.as_bytes();
    if b.len() < 43 || b[20] != b'-' || b[41] != b'-' {
        return Err(FormatError::corrupt(
            VALUE,
            format!("{text:?} does not begin with two 20-digit numbers, each followed by '-'"),
        ));
    }
    let message_count = parse_decimal(&text[0..20], "message_count")?;
    let entry_size_bytes = parse_decimal(&text[21..41], "entry_size_bytes")?;
    Ok((message_count, entry_size_bytes, &text[42..]))
}

fn split_last(text: &str) -> Result<(&str, &str)> {
    text.rsplit_once('-').ok_or_else(|| {
        FormatError::corrupt(VALUE, format!("position {text:?} has no '-' before its last field"))
    })
}

fn parse_decimal(digits: &str, name: &str) -> Result<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(FormatError::corrupt(VALUE, format!("{name} {digits:?} is not decimal digits")));
    }
    digits
        .parse::<u64>()
        .ok()
        .filter(|&v| v <= i64::MAX as u64)
        .ok_or_else(|| FormatError::corrupt(VALUE, format!("{name} {digits} exceeds 2^63-1")))
}
