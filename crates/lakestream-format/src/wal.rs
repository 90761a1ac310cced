//! WAL objects ("WAL objects"; addendum §2).
//!
//! ```text
//! WAL object
//!   index_length          int32 BE: bytes of the index region (not counting itself), >= 4
//!   index region
//!     index_version       int32 BE: 3
//!     log section         one per log, in any order
//!       log_id            int64 BE
//!       entry_count       varint32, >= 1
//!       entry             entry_count times, in offset order
//!         payload_offset  varint32, from the first byte of the payload region
//!         payload_size    varint32
//!         record_count    varint32, >= 1
//!   payload region        byte 4 + index_length to the end of the object
//! ```
//!
//! A `varint32` is unsigned LEB128 of at most 5 bytes holding at most 2³¹ − 1. The payload
//! region is every accepted payload concatenated in the order the writer accepted it, so the
//! payloads of one log can interleave with another's; readers locate each payload by its
//! `payload_offset` alone.
//!
//! [`WalObjectBuilder`] writes objects; [`WalObject`] reads a whole object; [`WalIndex`] reads
//! only the index region, for callers that fetch the object by byte range: read the first
//! 4 bytes ([`index_length`]), then the index region, then only the payload span of the log
//! section they need ([`LogSection::payload_span`], [`LogSection::slice_payloads`]).
//!
//! ```
//! use bytes::Bytes;
//! use lakestream_format::LogId;
//! use lakestream_format::wal::{WalObject, WalObjectBuilder};
//!
//! // The spec's example: log 7, an entry of 2 records then an entry of 1 record.
//! let mut builder = WalObjectBuilder::new();
//! builder.add_entry(LogId(7), Bytes::from_static(&[1, 2, 3, 4, 5]), 2)?;
//! builder.add_entry(LogId(7), Bytes::from_static(&[6, 7, 8]), 1)?;
//! let built = builder.build()?;
//! assert_eq!(built.bytes.len(), 31);
//! assert_eq!(built.sections[0].record_count, 3);
//!
//! let object = WalObject::parse(built.bytes)?;
//! let payloads = object.payloads(LogId(7))?.expect("log 7 has a section");
//! assert_eq!(payloads[1].as_ref(), &[6, 7, 8]);
//! # Ok::<(), lakestream_format::FormatError>(())
//! ```

use std::collections::HashMap;
use std::ops::Range;

use bytes::Bytes;

use crate::entry_index::RawRecord;
use crate::error::{FormatError, Result};
use crate::legacy;
use crate::types::LogId;
use crate::varint::{VARINT32_MAX, read_varint32, varint32_len, write_varint32};

/// The `index_version` of format version 3.
pub const INDEX_VERSION: i32 = 3;

/// The length of the `index_length` prefix.
pub const INDEX_LENGTH_PREFIX: usize = 4;

const STRUCTURE: &str = "WAL object";
const BUILD: &str = "WAL object builder";

/// One entry as a log section describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EntryDescriptor {
    /// Where the payload starts, counted from the first byte of the payload region.
    pub payload_offset: u32,
    /// The payload's length in bytes.
    pub payload_size: u32,
    /// How many records (offsets) the entry holds; at least 1.
    pub record_count: u32,
}

impl EntryDescriptor {
    /// The payload's byte range within the payload region.
    pub fn payload_range(&self) -> Range<u64> {
        u64::from(self.payload_offset)..u64::from(self.payload_offset) + u64::from(self.payload_size)
    }
}

/// What the writer needs to index one log section: the inputs of the section's RAW record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionSummary {
    /// The section's log.
    pub log_id: LogId,
    /// The section's entries, in the order added (their offset order).
    pub entries: Vec<EntryDescriptor>,
    /// The sum of the entries' record counts: the record's `message_count` and the first delta
    /// of the sequenced put. At most 2³¹ − 1.
    pub record_count: u64,
    /// The sum of the entries' payload sizes: the record's `entry_size_bytes` and the second
    /// delta of the sequenced put.
    pub payload_bytes: u64,
    /// The length of the object's whole payload region (all logs): the RAW record's `file_size`.
    pub payload_region_len: u64,
    /// How many log sections the object has: a RAW record's `index_type` is COMPACT when this
    /// is 1 and NORMAL otherwise.
    pub sections_in_object: usize,
}

impl SectionSummary {
    /// The number of entries in the section.
    pub fn entry_count(&self) -> usize {
        self.entries.len()
    }
}

/// The result of [`WalObjectBuilder::build`]: the object's bytes and one summary per section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltWalObject {
    /// The whole object, ready to be written once.
    pub bytes: Bytes,
    /// One summary per log section, in the order the sections appear in the object (the order
    /// in which each log's first entry was added).
    pub sections: Vec<SectionSummary>,
}

impl BuiltWalObject {
    /// The summary of `log_id`'s section, if the object has one.
    pub fn section(&self, log_id: LogId) -> Option<&SectionSummary> {
        self.sections.iter().find(|s| s.log_id == log_id)
    }
}

#[derive(Debug, Clone)]
struct SectionBuilder {
    log_id: LogId,
    entries: Vec<EntryDescriptor>,
    record_count: u64,
    payload_bytes: u64,
}

/// Collects entries for one or more logs and writes them as one WAL object.
///
/// Each log gets one section; a section lists its entries in the order they were added; the
/// payload region holds the payloads in the order they were added, across all logs. Payloads
/// are kept as [`Bytes`] handles until [`build`](Self::build), which copies each once.
#[derive(Debug, Clone, Default)]
pub struct WalObjectBuilder {
    sections: Vec<SectionBuilder>,
    section_of: HashMap<LogId, usize>,
    payloads: Vec<Bytes>,
    payload_region_len: u64,
    /// The bytes of the log sections written so far (the index region less `index_version`).
    sections_len: usize,
}

impl WalObjectBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an entry holding `record_count` records to the section of `log_id`.
    ///
    /// Refuses, leaving the builder unchanged: a log ID above 2⁶³ − 1, a record count of 0 or
    /// above 2³¹ − 1, a payload larger than 2³¹ − 1 bytes, a payload that would start beyond
    /// offset 2³¹ − 1 of the payload region (varint32 limits), and an entry that would push the
    /// section's record count above 2³¹ − 1 (the int32 `message_count` of its RAW record).
    pub fn add_entry(&mut self, log_id: LogId, payload: impl Into<Bytes>, record_count: u32) -> Result<()> {
        let payload = payload.into();
        if log_id > LogId::MAX {
            return Err(FormatError::invalid(BUILD, format!("log ID {log_id} exceeds 2^63-1")));
        }
        if record_count == 0 || record_count > VARINT32_MAX {
            return Err(FormatError::invalid(
                BUILD,
                format!(
                    "record count {record_count} of an entry of log {log_id} is not between 1 and 2^31-1"
                ),
            ));
        }
        let payload_size =
            u32::try_from(payload.len()).ok().filter(|&s| s <= VARINT32_MAX).ok_or_else(|| {
                FormatError::invalid(
                    BUILD,
                    format!("payload of {} bytes for log {log_id} exceeds 2^31-1", payload.len()),
                )
            })?;
        let payload_offset =
            u32::try_from(self.payload_region_len).ok().filter(|&o| o <= VARINT32_MAX).ok_or_else(|| {
                FormatError::invalid(
                    BUILD,
                    format!(
                        "payload region is already {} bytes; a payload offset must stay below 2^31",
                        self.payload_region_len
                    ),
                )
            })?;
        let existing = self.find_section(log_id);
        let section_records = existing.map_or(0, |i| self.sections[i].record_count);
        if section_records + u64::from(record_count) > u64::from(VARINT32_MAX) {
            return Err(FormatError::invalid(
                BUILD,
                format!("log {log_id}'s section would hold more than 2^31-1 records; start a new object"),
            ));
        }
        let entry = EntryDescriptor { payload_offset, payload_size, record_count };
        let index = match existing {
            Some(index) => index,
            None => {
                self.sections.push(SectionBuilder {
                    log_id,
                    entries: Vec::new(),
                    record_count: 0,
                    payload_bytes: 0,
                });
                self.section_of.insert(log_id, self.sections.len() - 1);
                // log_id plus the entry_count varint, which grows as entries arrive.
                self.sections_len += 8 + 1;
                self.sections.len() - 1
            }
        };
        let section = &mut self.sections[index];
        let count_before = section.entries.len();
        self.sections_len += varint32_len(count_before as u32 + 1) - varint32_len(count_before.max(1) as u32)
            + varint32_len(payload_offset)
            + varint32_len(payload_size)
            + varint32_len(record_count);
        section.entries.push(entry);
        section.record_count += u64::from(record_count);
        section.payload_bytes += u64::from(payload_size);
        self.payload_region_len += u64::from(payload_size);
        self.payloads.push(payload);
        Ok(())
    }

    /// The position of `log_id`'s section. Objects usually hold a handful of logs (Ursa: at
    /// most 4), for which a scan beats hashing on this per-entry path.
    fn find_section(&self, log_id: LogId) -> Option<usize> {
        const SCAN_LIMIT: usize = 8;
        if self.sections.len() <= SCAN_LIMIT {
            self.sections.iter().position(|s| s.log_id == log_id)
        } else {
            self.section_of.get(&log_id).copied()
        }
    }

    /// Whether no entry has been added.
    pub fn is_empty(&self) -> bool {
        self.payloads.is_empty()
    }

    /// How many entries have been added, across all logs.
    pub fn entry_count(&self) -> usize {
        self.payloads.len()
    }

    /// How many log sections the object will have.
    pub fn section_count(&self) -> usize {
        self.sections.len()
    }

    /// The length of the payload region so far.
    pub fn payload_region_len(&self) -> u64 {
        self.payload_region_len
    }

    /// The exact length the object would have if built now.
    pub fn object_len(&self) -> u64 {
        (INDEX_LENGTH_PREFIX + self.index_len()) as u64 + self.payload_region_len
    }

    /// The index region's length: `index_version` plus the sections.
    fn index_len(&self) -> usize {
        4 + self.sections_len
    }

    /// Writes the object. Fails for an empty builder (a WAL object holds at least one entry)
    /// and for an index region longer than 2³¹ − 1 bytes.
    pub fn build(self) -> Result<BuiltWalObject> {
        let order: Vec<LogId> = self.sections.iter().map(|s| s.log_id).collect();
        self.build_with_section_order(&order)
    }

    /// Like [`build`](Self::build), but lists the sections in `order`, which must name every
    /// log of the builder once. Readers must not depend on section order; this exists so that
    /// tests can reproduce objects written by other implementations (Ursa lists sections in
    /// hash-map order) byte for byte. The payload region keeps the order of addition.
    pub fn build_with_section_order(mut self, order: &[LogId]) -> Result<BuiltWalObject> {
        if self.sections.is_empty() {
            return Err(FormatError::invalid(BUILD, "no entries: a WAL object holds at least one entry"));
        }
        let mut ordered = Vec::with_capacity(self.sections.len());
        for log_id in order {
            let slot = self.section_of.remove(log_id).ok_or_else(|| {
                FormatError::invalid(
                    BUILD,
                    format!("section order names log {log_id}, which has no entries or is named twice"),
                )
            })?;
            ordered.push(slot);
        }
        if !self.section_of.is_empty() || ordered.len() != self.sections.len() {
            return Err(FormatError::invalid(BUILD, "section order does not name every log of the object"));
        }
        let mut taken: Vec<Option<SectionBuilder>> =
            std::mem::take(&mut self.sections).into_iter().map(Some).collect();
        self.sections = ordered.into_iter().filter_map(|slot| taken[slot].take()).collect();
        let index_len = self.index_len();
        let index_length = i32::try_from(index_len).map_err(|_| {
            FormatError::invalid(BUILD, format!("index region of {index_len} bytes exceeds 2^31-1"))
        })?;
        let total = INDEX_LENGTH_PREFIX + index_len + self.payload_region_len as usize;
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&index_length.to_be_bytes());
        out.extend_from_slice(&INDEX_VERSION.to_be_bytes());
        for section in &self.sections {
            out.extend_from_slice(&(section.log_id.0 as i64).to_be_bytes());
            write_varint32(&mut out, section.entries.len() as u32);
            for entry in &section.entries {
                write_varint32(&mut out, entry.payload_offset);
                write_varint32(&mut out, entry.payload_size);
                write_varint32(&mut out, entry.record_count);
            }
        }
        debug_assert_eq!(out.len(), INDEX_LENGTH_PREFIX + index_len, "index length prediction");
        for payload in &self.payloads {
            out.extend_from_slice(payload);
        }
        let sections_in_object = self.sections.len();
        let payload_region_len = self.payload_region_len;
        let sections = self
            .sections
            .into_iter()
            .map(|s| SectionSummary {
                log_id: s.log_id,
                entries: s.entries,
                record_count: s.record_count,
                payload_bytes: s.payload_bytes,
                payload_region_len,
                sections_in_object,
            })
            .collect();
        Ok(BuiltWalObject { bytes: Bytes::from(out), sections })
    }
}

/// The `index_length` from the first 4 bytes of a WAL object, so that a caller can read the
/// index region (`4 + index_length` bytes from the start) by byte range before the payloads.
///
/// Refuses fewer than 4 bytes, and an `index_length` below 4 (it must hold `index_version`)
/// or negative. Four zero bytes are the start of a legacy (version 1 or 2) object's 8-byte
/// length, and give an [`FormatError::Unsupported`] error saying so.
pub fn index_length(first_bytes: &[u8]) -> Result<u32> {
    let Some(prefix) = first_bytes.first_chunk::<4>() else {
        return Err(FormatError::corrupt(
            STRUCTURE,
            format!("{} bytes is too short for the 4-byte index_length", first_bytes.len()),
        ));
    };
    let index_length = i32::from_be_bytes(*prefix);
    if index_length == 0 {
        legacy::check_not_legacy_wal_object(first_bytes)?;
    }
    if index_length < 4 {
        return Err(FormatError::corrupt(
            STRUCTURE,
            format!("index_length {index_length} is below 4, the size of index_version"),
        ));
    }
    Ok(index_length as u32)
}

/// One log's section of a WAL object's index region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSection {
    /// The log.
    pub log_id: LogId,
    /// The entries, in offset order.
    pub entries: Vec<EntryDescriptor>,
}

impl LogSection {
    /// The sum of the entries' record counts.
    pub fn record_count(&self) -> u64 {
        self.entries.iter().map(|e| u64::from(e.record_count)).sum()
    }

    /// The sum of the entries' payload sizes.
    pub fn payload_bytes(&self) -> u64 {
        self.entries.iter().map(|e| u64::from(e.payload_size)).sum()
    }

    /// The smallest range of the payload region that holds every payload of this section: a
    /// caller can read just this span of the object (shifted by [`WalIndex::payload_region_start`]).
    pub fn payload_span(&self) -> Range<u64> {
        let start = self.entries.iter().map(|e| u64::from(e.payload_offset)).min().unwrap_or(0);
        let end = self.entries.iter().map(|e| e.payload_range().end).max().unwrap_or(0);
        start..end
    }

    /// Each entry's payload as a zero-copy slice of `region_part`, which holds the payload
    /// region's bytes from `part_start` on (the whole region when `part_start` is 0). Fails if
    /// a payload does not lie inside `region_part`.
    pub fn slice_payloads(&self, region_part: &Bytes, part_start: u64) -> Result<Vec<Bytes>> {
        let part_end = part_start + region_part.len() as u64;
        self.entries
            .iter()
            .enumerate()
            .map(|(i, entry)| {
                let range = entry.payload_range();
                if range.start < part_start || range.end > part_end {
                    return Err(FormatError::corrupt(
                        STRUCTURE,
                        format!(
                            "entry {i} of log {}: payload {}..{} is outside the payload bytes {part_start}..{part_end}",
                            self.log_id, range.start, range.end
                        ),
                    ));
                }
                Ok(region_part.slice((range.start - part_start) as usize..(range.end - part_start) as usize))
            })
            .collect()
    }

    /// The consistency checks of addendum §2 between this section and the RAW record that
    /// indexes it: the entry count, the sum of record counts (`message_count`), the sum of
    /// payload sizes (`entry_size_bytes`), and, when the record carries boundaries, each
    /// entry's record count.
    pub fn check_matches_record(&self, record: &RawRecord) -> Result<()> {
        let mismatch = |what: String| {
            Err(FormatError::corrupt(
                STRUCTURE,
                format!(
                    "log {}'s section does not match its RAW record at {:?}: {what}",
                    self.log_id, record.location
                ),
            ))
        };
        if self.entries.len() as u64 != u64::from(record.entry_count) {
            return mismatch(format!(
                "{} entries, record entry_count {}",
                self.entries.len(),
                record.entry_count
            ));
        }
        if self.record_count() != u64::from(record.message_count) {
            return mismatch(format!(
                "record counts sum to {}, message_count {}",
                self.record_count(),
                record.message_count
            ));
        }
        if self.payload_bytes() != record.entry_size_bytes {
            return mismatch(format!(
                "payload sizes sum to {}, entry_size_bytes {}",
                self.payload_bytes(),
                record.entry_size_bytes
            ));
        }
        let counts = record.record_counts();
        if let Some(i) = self.entries.iter().zip(&counts).position(|(e, &c)| e.record_count != c) {
            return mismatch(format!(
                "entry {i} holds {} records, entry_offsets say {}",
                self.entries[i].record_count, counts[i]
            ));
        }
        Ok(())
    }
}

/// The parsed index region of a WAL object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalIndex {
    index_length: u32,
    sections: Vec<LogSection>,
    section_of: HashMap<LogId, usize>,
}

impl WalIndex {
    /// Parses the index region from `prefix`, the first bytes of the object: at least
    /// `4 + index_length` of them (the whole object will do; bytes after the index region are
    /// not looked at).
    ///
    /// Enforces the \[Writer\] and \[Reader\] rules that need only the index: `index_length` >= 4,
    /// `index_version` = 3, strict varint32s, `entry_count` >= 1, `record_count` >= 1, each
    /// log ID in one section only, non-negative log IDs, and no bytes left over after the last
    /// section. Payload positions are checked by [`check_payload_region_len`](Self::check_payload_region_len).
    pub fn parse(prefix: &[u8]) -> Result<WalIndex> {
        let index_length = index_length(prefix)?;
        let region_end = INDEX_LENGTH_PREFIX as u64 + u64::from(index_length);
        let region = prefix.get(INDEX_LENGTH_PREFIX..region_end as usize).ok_or_else(|| {
            FormatError::corrupt(
                STRUCTURE,
                format!("index_length {index_length} reaches past the {} bytes available", prefix.len()),
            )
        })?;
        let version = i32::from_be_bytes([region[0], region[1], region[2], region[3]]);
        if version != INDEX_VERSION {
            return Err(FormatError::unsupported(
                STRUCTURE,
                format!("index_version {version}; only format version {INDEX_VERSION} is read"),
            ));
        }
        let mut pos = 4usize;
        let mut sections = Vec::new();
        let mut section_of = HashMap::new();
        while pos < region.len() {
            let section_at = pos;
            let Some(log_id_bytes) = region[pos..].first_chunk::<8>() else {
                return Err(FormatError::corrupt(
                    STRUCTURE,
                    format!(
                        "{} bytes left at index byte {section_at} are not a log section",
                        region.len() - pos
                    ),
                ));
            };
            let raw_log_id = i64::from_be_bytes(*log_id_bytes);
            pos += 8;
            let log_id = u64::try_from(raw_log_id).map(LogId).map_err(|_| {
                FormatError::corrupt(
                    STRUCTURE,
                    format!("negative log_id {raw_log_id} at index byte {section_at}"),
                )
            })?;
            let field = |pos: &mut usize, name: &str| -> Result<u32> {
                let at = *pos;
                read_varint32(region, pos).map_err(|e| {
                    FormatError::corrupt(STRUCTURE, format!("{name} of log {log_id} at index byte {at}: {e}"))
                })
            };
            let entry_count = field(&mut pos, "entry_count")?;
            if entry_count == 0 {
                return Err(FormatError::corrupt(
                    STRUCTURE,
                    format!("log {log_id}'s section has entry_count 0"),
                ));
            }
            // Each entry takes at least 3 bytes: refuse a count the region cannot hold before
            // reserving room for it.
            if u64::from(entry_count) * 3 > (region.len() - pos) as u64 {
                return Err(FormatError::corrupt(
                    STRUCTURE,
                    format!(
                        "log {log_id}'s entry_count {entry_count} needs more than the {} index bytes left",
                        region.len() - pos
                    ),
                ));
            }
            let mut entries = Vec::with_capacity(entry_count as usize);
            for _ in 0..entry_count {
                let payload_offset = field(&mut pos, "payload_offset")?;
                let payload_size = field(&mut pos, "payload_size")?;
                let record_count = field(&mut pos, "record_count")?;
                if record_count == 0 {
                    return Err(FormatError::corrupt(
                        STRUCTURE,
                        format!("entry {} of log {log_id} has record_count 0", entries.len()),
                    ));
                }
                entries.push(EntryDescriptor { payload_offset, payload_size, record_count });
            }
            if section_of.insert(log_id, sections.len()).is_some() {
                return Err(FormatError::corrupt(
                    STRUCTURE,
                    format!("log {log_id} has more than one section"),
                ));
            }
            sections.push(LogSection { log_id, entries });
        }
        Ok(WalIndex { index_length, sections, section_of })
    }

    /// The `index_length` field.
    pub fn index_length(&self) -> u32 {
        self.index_length
    }

    /// Where the payload region starts in the object: `4 + index_length`.
    pub fn payload_region_start(&self) -> u64 {
        INDEX_LENGTH_PREFIX as u64 + u64::from(self.index_length)
    }

    /// The sections, in the order they appear in the object (which means nothing).
    pub fn sections(&self) -> &[LogSection] {
        &self.sections
    }

    /// The section of `log_id`, found by its log ID, whatever the section order.
    pub fn section(&self, log_id: LogId) -> Option<&LogSection> {
        self.section_of.get(&log_id).map(|&i| &self.sections[i])
    }

    /// Checks that every payload lies within a payload region of `len` bytes, given the object's
    /// length minus [`payload_region_start`](Self::payload_region_start).
    pub fn check_payload_region_len(&self, len: u64) -> Result<()> {
        for section in &self.sections {
            for (i, entry) in section.entries.iter().enumerate() {
                let range = entry.payload_range();
                if range.end > len {
                    return Err(FormatError::corrupt(
                        STRUCTURE,
                        format!(
                            "entry {i} of log {}: payload {}..{} ends past the payload region of {len} bytes",
                            section.log_id, range.start, range.end
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A whole WAL object, parsed and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalObject {
    index: WalIndex,
    payload_region: Bytes,
}

impl WalObject {
    /// Parses a whole object: the index region ([`WalIndex::parse`]) and the check that every
    /// payload lies within the payload region.
    pub fn parse(object: Bytes) -> Result<WalObject> {
        let index = WalIndex::parse(&object)?;
        let payload_region = object.slice(index.payload_region_start() as usize..);
        index.check_payload_region_len(payload_region.len() as u64)?;
        Ok(WalObject { index, payload_region })
    }

    /// The parsed index region.
    pub fn index(&self) -> &WalIndex {
        &self.index
    }

    /// The payload region.
    pub fn payload_region(&self) -> &Bytes {
        &self.payload_region
    }

    /// The section of `log_id`, if the object has one.
    pub fn section(&self, log_id: LogId) -> Option<&LogSection> {
        self.index.section(log_id)
    }

    /// The payloads of `log_id`'s entries in section order, as zero-copy slices of the object;
    /// `None` when the object has no section for the log.
    pub fn payloads(&self, log_id: LogId) -> Result<Option<Vec<Bytes>>> {
        self.index.section(log_id).map(|section| section.slice_payloads(&self.payload_region, 0)).transpose()
    }
}
