//! Companion files: the gzip `.index` file beside each compacted Parquet file ("Companion
//! files"; addendum §6.3).
//!
//! Row `i` of a companion describes row `i` of its Parquet file. After decompression the
//! content is:
//!
//! ```text
//! block            repeated; every block but the last holds at least one row
//!   length         int32 BE  N  (0 <= N < 0x7FFFFFFF)
//!   rows           N bytes of JSON: [{"metadata":"<base64>","offset":"<decimal>"}, ...]
//! sentinel         int32 BE  0x7FFFFFFF
//! offset map
//!   length         int32 BE  N
//!   map            N bytes of JSON: {"<entry start offset>": <row>, ...}
//! ```
//!
//! `metadata` is the standard Base64 (with padding) of a proto3 [`LakehouseEntryMetadata`]
//! whose [`EntryHeader`] carries the entry's offset, record count, timestamp, payload size and
//! cumulative size.
//!
//! Decisions of this implementation, each allowed by the spec:
//!
//! * The writer flushes the pending block when the file is finished, like Ursa does, so when
//!   the row count is a multiple of the block size the last block is the empty array `[]`
//!   (and a companion of zero rows is one empty block). Readers must accept it either way.
//! * The writer emits the offset map in row order. The gzip header carries no time and OS
//!   "unknown", so the same rows always give the same bytes with one `flate2` version.
//! * The reader is strict where Ursa is lenient (addendum §12 row 4): every offset-map key is
//!   parsed as a canonical unsigned decimal, duplicates are refused, and the map must agree
//!   with the rows. The lookup is a numeric floor, so an offset inside an entry finds the
//!   entry's row.
//! * Decompression is bounded by [`ReadOptions::max_decompressed_bytes`], so a small gzip
//!   bomb cannot exhaust memory.

use std::fmt;
use std::io::{Read, Write};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use flate2::Compression;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use prost::Message as _;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use crate::error::{FormatError, Result};
use crate::types::Offset;

const STRUCTURE: &str = "companion file";

/// The block length that ends the blocks and introduces the offset map.
pub const SENTINEL: i32 = 0x7FFF_FFFF;

/// The default number of rows per block: Ursa's `ursaIndexFileWriterMaxBufferedRecords`.
pub const DEFAULT_MAX_ROWS_PER_BLOCK: usize = 10_000;

/// The default bound on a companion's decompressed size: 256 MiB, about four million rows.
pub const DEFAULT_MAX_DECOMPRESSED_BYTES: u64 = 256 * 1024 * 1024;

/// `EntryHeader` of package `materialization.proto`: the header of one entry.
///
/// Every field is proto3 `optional` (explicit presence), so a present zero is written.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EntryHeader {
    /// The entry's start offset.
    #[prost(int64, optional, tag = "1")]
    pub offset: Option<i64>,
    /// The entry's record count.
    #[prost(int32, optional, tag = "2")]
    pub number_of_messages: Option<i32>,
    /// The entry's timestamp in ms since the epoch (the creation timestamp of its RAW record).
    #[prost(int64, optional, tag = "3")]
    pub written_timestamp: Option<i64>,
    /// The entry's payload size in bytes.
    #[prost(int32, optional, tag = "4")]
    pub entry_size: Option<i32>,
    /// The log's cumulative payload size at the end of this entry, including its payload.
    #[prost(int64, optional, tag = "5")]
    pub cumulative_size: Option<i64>,
}

/// `LakehouseEntryMetadata` of package `materialization.proto`: the `metadata` of a row.
///
/// Fields 1 and 3 are reserved; old payloads may carry them and decoding skips them.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LakehouseEntryMetadata {
    /// The entry header; always written.
    #[prost(message, optional, tag = "2")]
    pub entry_header: Option<EntryHeader>,
    /// A schema version; written only when set (the Kafka binding leaves it unset).
    #[prost(int64, optional, tag = "4")]
    pub schema_version: Option<i64>,
}

/// One row of a companion: the header of the entry in the same row of the Parquet file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompanionRow {
    /// The entry's start offset (at most `i64::MAX`).
    pub offset: Offset,
    /// The entry's record count (1 to `i32::MAX`).
    pub record_count: u32,
    /// The entry's timestamp in ms since the epoch. Readers take it from here, not from the
    /// PARQUET record.
    pub timestamp_ms: i64,
    /// The entry's payload size in bytes (at most `i32::MAX`, addendum §12 row 13).
    pub entry_size: u32,
    /// The log's cumulative payload size at the end of the entry (at most `i64::MAX`).
    pub cumulative_size: u64,
    /// The optional `schemaVersion`; `None` for the Kafka binding.
    pub schema_version: Option<i64>,
}

impl CompanionRow {
    /// The offset after the entry's last record.
    pub fn end_offset(&self) -> Offset {
        self.offset + u64::from(self.record_count)
    }

    /// The row's `LakehouseEntryMetadata`, after checking that every value fits its protobuf
    /// field.
    pub fn to_metadata(&self) -> Result<LakehouseEntryMetadata> {
        let invalid = |field: &str, value: String, max: &str| {
            FormatError::invalid(STRUCTURE, format!("row {field} {value} does not fit (at most {max})"))
        };
        let offset =
            i64::try_from(self.offset).map_err(|_| invalid("offset", self.offset.to_string(), "i64::MAX"))?;
        if self.record_count == 0 {
            return Err(FormatError::invalid(STRUCTURE, "row record count is 0; every entry holds a record"));
        }
        let number_of_messages = i32::try_from(self.record_count)
            .map_err(|_| invalid("record count", self.record_count.to_string(), "i32::MAX"))?;
        let entry_size = i32::try_from(self.entry_size)
            .map_err(|_| invalid("entry size", self.entry_size.to_string(), "i32::MAX"))?;
        let cumulative_size = i64::try_from(self.cumulative_size)
            .map_err(|_| invalid("cumulative size", self.cumulative_size.to_string(), "i64::MAX"))?;
        if self.end_offset() > i64::MAX as u64 {
            return Err(invalid("end offset", self.end_offset().to_string(), "i64::MAX"));
        }
        Ok(LakehouseEntryMetadata {
            entry_header: Some(EntryHeader {
                offset: Some(offset),
                number_of_messages: Some(number_of_messages),
                written_timestamp: Some(self.timestamp_ms),
                entry_size: Some(entry_size),
                cumulative_size: Some(cumulative_size),
            }),
            schema_version: self.schema_version,
        })
    }

    /// Reads a row from a decoded `LakehouseEntryMetadata`: every header field must be present
    /// and in range.
    pub fn from_metadata(metadata: &LakehouseEntryMetadata) -> Result<Self> {
        let header = metadata
            .entry_header
            .as_ref()
            .ok_or_else(|| FormatError::corrupt(STRUCTURE, "row metadata has no entryHeader (field 2)"))?;
        let missing = |field: &str| FormatError::corrupt(STRUCTURE, format!("entryHeader has no {field}"));
        let offset = header.offset.ok_or_else(|| missing("offset (field 1)"))?;
        let number_of_messages =
            header.number_of_messages.ok_or_else(|| missing("numberOfMessages (field 2)"))?;
        let timestamp_ms = header.written_timestamp.ok_or_else(|| missing("writtenTimestamp (field 3)"))?;
        let entry_size = header.entry_size.ok_or_else(|| missing("entrySize (field 4)"))?;
        let cumulative_size = header.cumulative_size.ok_or_else(|| missing("cumulativeSize (field 5)"))?;
        let negative = |field: &str, value: i64| {
            FormatError::corrupt(
                STRUCTURE,
                format!("entryHeader {field} is {value}, below the allowed minimum"),
            )
        };
        let offset = u64::try_from(offset).map_err(|_| negative("offset", offset))?;
        let record_count = u32::try_from(number_of_messages)
            .ok()
            .filter(|count| *count > 0)
            .ok_or_else(|| negative("numberOfMessages", i64::from(number_of_messages)))?;
        let entry_size =
            u32::try_from(entry_size).map_err(|_| negative("entrySize", i64::from(entry_size)))?;
        let cumulative_size =
            u64::try_from(cumulative_size).map_err(|_| negative("cumulativeSize", cumulative_size))?;
        let row = CompanionRow {
            offset,
            record_count,
            timestamp_ms,
            entry_size,
            cumulative_size,
            schema_version: metadata.schema_version,
        };
        if row.end_offset() > i64::MAX as u64 {
            return Err(FormatError::corrupt(
                STRUCTURE,
                format!("entry at offset {offset} with {record_count} records ends beyond i64::MAX"),
            ));
        }
        Ok(row)
    }

    /// The row's `metadata` value: standard Base64, with padding, of its protobuf encoding.
    pub fn metadata_base64(&self) -> Result<String> {
        Ok(BASE64.encode(self.to_metadata()?.encode_to_vec()))
    }

    /// Decodes a `metadata` value (Base64 of a `LakehouseEntryMetadata`).
    pub fn from_metadata_base64(text: &str) -> Result<Self> {
        let bytes = BASE64.decode(text).map_err(|e| {
            FormatError::corrupt(STRUCTURE, format!("row metadata {text:?} is not Base64: {e}"))
        })?;
        let metadata = LakehouseEntryMetadata::decode(bytes.as_slice()).map_err(|e| {
            FormatError::corrupt(STRUCTURE, format!("row metadata is not a LakehouseEntryMetadata: {e}"))
        })?;
        Self::from_metadata(&metadata)
    }
}

/// Settings of a [`CompanionWriter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// Rows per block; at least 1. Default [`DEFAULT_MAX_ROWS_PER_BLOCK`]. Smaller blocks cost
    /// a few bytes each; Ursa's readers accept any block size.
    pub max_rows_per_block: usize,
    /// The gzip level, 0 to 9. Default 6.
    pub gzip_level: u32,
}

impl Default for WriteOptions {
    fn default() -> Self {
        Self { max_rows_per_block: DEFAULT_MAX_ROWS_PER_BLOCK, gzip_level: 6 }
    }
}

/// Writes a companion file row by row, in row order.
pub struct CompanionWriter {
    options: WriteOptions,
    gzip: GzEncoder<Vec<u8>>,
    /// The JSON array of the pending block, without its closing `]`.
    block: Vec<u8>,
    rows_in_block: usize,
    /// The start offset of each row so far, for the offset map.
    row_offsets: Vec<Offset>,
    /// The end offset of the last row, which the next row must start at.
    next_offset: Option<Offset>,
}

impl fmt::Debug for CompanionWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompanionWriter")
            .field("options", &self.options)
            .field("rows", &self.row_offsets.len())
            .finish_non_exhaustive()
    }
}

impl CompanionWriter {
    /// A writer with the given settings.
    pub fn new(options: WriteOptions) -> Result<Self> {
        if options.max_rows_per_block == 0 {
            return Err(FormatError::invalid(STRUCTURE, "max_rows_per_block must be at least 1"));
        }
        if options.gzip_level > 9 {
            return Err(FormatError::invalid(
                STRUCTURE,
                format!("gzip level {} is outside 0..=9", options.gzip_level),
            ));
        }
        Ok(Self {
            options,
            gzip: GzEncoder::new(Vec::new(), Compression::new(options.gzip_level)),
            block: vec![b'['],
            rows_in_block: 0,
            row_offsets: Vec::new(),
            next_offset: None,
        })
    }

    /// The number of rows written so far.
    pub fn row_count(&self) -> usize {
        self.row_offsets.len()
    }

    /// Appends the next row. Rows hold consecutive entries: each starts where the previous
    /// one ends.
    pub fn push(&mut self, row: &CompanionRow) -> Result<()> {
        if let Some(expected) = self.next_offset
            && row.offset != expected
        {
            return Err(FormatError::invalid(
                STRUCTURE,
                format!(
                    "row {} starts at offset {}, but the previous entry ends at {expected}; \
                     rows must hold consecutive entries",
                    self.row_offsets.len(),
                    row.offset
                ),
            ));
        }
        let metadata = row.metadata_base64()?;
        if self.rows_in_block > 0 {
            self.block.push(b',');
        }
        // Base64 and decimal digits need no JSON escaping.
        write!(self.block, r#"{{"metadata":"{metadata}","offset":"{}"}}"#, row.offset)
            .map_err(|e| internal_io(&e))?;
        self.rows_in_block += 1;
        self.row_offsets.push(row.offset);
        self.next_offset = Some(row.end_offset());
        if self.rows_in_block == self.options.max_rows_per_block {
            self.flush_block()?;
        }
        Ok(())
    }

    fn flush_block(&mut self) -> Result<()> {
        self.block.push(b']');
        write_framed(&mut self.gzip, &self.block, "block")?;
        self.block.clear();
        self.block.push(b'[');
        self.rows_in_block = 0;
        Ok(())
    }

    /// Writes the last block, the sentinel and the offset map, and returns the gzip bytes.
    pub fn finish(mut self) -> Result<Vec<u8>> {
        // Like Ursa, always flush the pending block: it is empty only when it is the last.
        self.flush_block()?;
        self.gzip.write_all(&SENTINEL.to_be_bytes()).map_err(|e| internal_io(&e))?;
        let mut map = Vec::with_capacity(2 + self.row_offsets.len() * 16);
        map.push(b'{');
        for (row, offset) in self.row_offsets.iter().enumerate() {
            if row > 0 {
                map.push(b',');
            }
            write!(map, r#""{offset}":{row}"#).map_err(|e| internal_io(&e))?;
        }
        map.push(b'}');
        write_framed(&mut self.gzip, &map, "offset map")?;
        self.gzip.finish().map_err(|e| internal_io(&e))
    }
}

/// Writes a whole companion file for `rows` with the given settings.
pub fn write_companion(rows: &[CompanionRow], options: WriteOptions) -> Result<Vec<u8>> {
    let mut writer = CompanionWriter::new(options)?;
    for row in rows {
        writer.push(row)?;
    }
    writer.finish()
}

fn write_framed(out: &mut impl Write, json: &[u8], what: &str) -> Result<()> {
    let len = i32::try_from(json.len()).ok().filter(|len| *len != SENTINEL).ok_or_else(|| {
        FormatError::invalid(
            STRUCTURE,
            format!("{what} of {} bytes is too long for an int32 length", json.len()),
        )
    })?;
    out.write_all(&len.to_be_bytes()).map_err(|e| internal_io(&e))?;
    out.write_all(json).map_err(|e| internal_io(&e))
}

/// Writing to a `Vec` does not fail; if it ever does, say so rather than panic.
fn internal_io(error: &std::io::Error) -> FormatError {
    FormatError::invalid(STRUCTURE, format!("writing to memory failed: {error}"))
}

/// Settings of [`read_companion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOptions {
    /// The largest decompressed size accepted; a larger companion is refused. Default
    /// [`DEFAULT_MAX_DECOMPRESSED_BYTES`]. A row takes about 60 bytes.
    pub max_decompressed_bytes: u64,
}

impl Default for ReadOptions {
    fn default() -> Self {
        Self { max_decompressed_bytes: DEFAULT_MAX_DECOMPRESSED_BYTES }
    }
}

/// A decoded companion file: its rows, checked against its offset map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Companion {
    rows: Vec<CompanionRow>,
    /// `(start offset, row)` from the offset map, ascending by offset.
    offset_map: Vec<(Offset, usize)>,
}

impl Companion {
    /// The rows, in row order.
    pub fn rows(&self) -> &[CompanionRow] {
        &self.rows
    }

    /// The offset map as `(entry start offset, row)` pairs, ascending by offset.
    pub fn offset_map(&self) -> &[(Offset, usize)] {
        &self.offset_map
    }

    /// The row of the entry that holds offset `o`: the row of the greatest start offset at or
    /// below `o`, comparing offsets as numbers ("Companion files"; addendum §12 row 4). `None`
    /// when `o` lies before the first entry or at or after the end of the last.
    pub fn row_holding(&self, o: Offset) -> Option<usize> {
        let after = self.offset_map.partition_point(|(start, _)| *start <= o);
        let (_, row) = *self.offset_map.get(after.checked_sub(1)?)?;
        (o < self.rows[row].end_offset()).then_some(row)
    }
}

/// Decodes a companion file: decompresses it (single or multi-member gzip), reads the blocks
/// up to the sentinel and the offset map, and checks that rows and map agree.
pub fn read_companion(gzip_bytes: &[u8], options: ReadOptions) -> Result<Companion> {
    let content = decompress(gzip_bytes, options.max_decompressed_bytes)?;
    parse_content(&content)
}

fn decompress(gzip_bytes: &[u8], limit: u64) -> Result<Vec<u8>> {
    if gzip_bytes.is_empty() {
        return Err(FormatError::corrupt(STRUCTURE, "the file is empty; expected a gzip stream"));
    }
    let mut content = Vec::new();
    MultiGzDecoder::new(gzip_bytes)
        .take(limit.saturating_add(1))
        .read_to_end(&mut content)
        .map_err(|e| FormatError::corrupt(STRUCTURE, format!("gzip decompression failed: {e}")))?;
    if content.len() as u64 > limit {
        return Err(FormatError::corrupt(
            STRUCTURE,
            format!("decompressed content exceeds the limit of {limit} bytes (max_decompressed_bytes)"),
        ));
    }
    Ok(content)
}

/// Decodes the decompressed content of a companion file.
pub fn parse_content(content: &[u8]) -> Result<Companion> {
    let mut cursor = Cursor { bytes: content, pos: 0, blocks_read: 0 };
    let mut rows: Vec<CompanionRow> = Vec::new();
    let mut empty_block_at: Option<usize> = None;
    loop {
        let len = cursor.read_len("block length or sentinel")?;
        if len == SENTINEL {
            break;
        }
        let block_index = cursor.blocks_read;
        if let Some(empty) = empty_block_at {
            return Err(FormatError::corrupt(
                STRUCTURE,
                format!("block {empty} is empty but is not the last block (block {block_index} follows)"),
            ));
        }
        let json = cursor.take(len, "block")?;
        cursor.blocks_read += 1;
        let block: Vec<RowJson> = serde_json::from_slice(json).map_err(|e| {
            FormatError::corrupt(STRUCTURE, format!("block {block_index} is not a JSON array of rows: {e}"))
        })?;
        if block.is_empty() {
            empty_block_at = Some(block_index);
        }
        for row_json in block {
            let row_index = rows.len();
            let row =
                CompanionRow::from_metadata_base64(&row_json.metadata).map_err(|e| in_row(row_index, e))?;
            let offset = parse_offset_key(&row_json.offset)
                .map_err(|detail| in_row(row_index, FormatError::corrupt(STRUCTURE, detail)))?;
            if offset != row.offset {
                return Err(FormatError::corrupt(
                    STRUCTURE,
                    format!(
                        "row {row_index}: offset {offset} differs from its entryHeader offset {}",
                        row.offset
                    ),
                ));
            }
            if let Some(previous) = rows.last()
                && row.offset != previous.end_offset()
            {
                return Err(FormatError::corrupt(
                    STRUCTURE,
                    format!(
                        "row {row_index} starts at offset {}, but row {} ends at {}; rows must hold \
                         consecutive entries",
                        row.offset,
                        row_index - 1,
                        previous.end_offset()
                    ),
                ));
            }
            rows.push(row);
        }
    }
    let len = cursor.read_len("offset map length")?;
    let json = cursor.take(len, "offset map")?;
    if cursor.pos != content.len() {
        return Err(FormatError::corrupt(
            STRUCTURE,
            format!("{} bytes follow the offset map", content.len() - cursor.pos),
        ));
    }
    let OffsetMapJson(pairs) = serde_json::from_slice(json)
        .map_err(|e| FormatError::corrupt(STRUCTURE, format!("offset map is not a JSON object: {e}")))?;
    let offset_map = check_offset_map(pairs, &rows)?;
    Ok(Companion { rows, offset_map })
}

fn in_row(row: usize, error: FormatError) -> FormatError {
    match error {
        FormatError::Corrupt { structure, detail } => {
            FormatError::Corrupt { structure, detail: format!("row {row}: {detail}") }
        }
        other => other,
    }
}

/// Parses the offset-map keys and checks that the map holds exactly one key per row, equal to
/// that row's offset.
fn check_offset_map(pairs: Vec<(String, u64)>, rows: &[CompanionRow]) -> Result<Vec<(Offset, usize)>> {
    let mut map = Vec::with_capacity(pairs.len());
    for (key, row) in pairs {
        let offset = parse_offset_key(&key)
            .map_err(|detail| FormatError::corrupt(STRUCTURE, format!("offset map key {key:?}: {detail}")))?;
        let row_index = usize::try_from(row).ok().filter(|r| *r < rows.len()).ok_or_else(|| {
            FormatError::corrupt(
                STRUCTURE,
                format!("offset map key {key:?} names row {row}, but the file has {} rows", rows.len()),
            )
        })?;
        if rows[row_index].offset != offset {
            return Err(FormatError::corrupt(
                STRUCTURE,
                format!(
                    "offset map key {key:?} names row {row_index}, whose offset is {}",
                    rows[row_index].offset
                ),
            ));
        }
        map.push((offset, row_index));
    }
    map.sort_unstable();
    if let Some(pair) = map.windows(2).find(|pair| pair[0].0 == pair[1].0) {
        return Err(FormatError::corrupt(
            STRUCTURE,
            format!("offset map has the key \"{}\" twice", pair[0].0),
        ));
    }
    if map.len() != rows.len() {
        return Err(FormatError::corrupt(
            STRUCTURE,
            format!("offset map has {} keys for {} rows", map.len(), rows.len()),
        ));
    }
    Ok(map)
}

/// Parses a canonical unsigned decimal offset: digits only, no sign, no leading zero except
/// `"0"` itself, at most `i64::MAX`.
fn parse_offset_key(text: &str) -> std::result::Result<Offset, String> {
    if text.is_empty() {
        return Err("offset is empty".into());
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("offset {text:?} is not an unsigned decimal"));
    }
    if text.len() > 1 && text.starts_with('0') {
        return Err(format!("offset {text:?} has a leading zero"));
    }
    text.parse::<u64>()
        .ok()
        .filter(|offset| *offset <= i64::MAX as u64)
        .ok_or_else(|| format!("offset {text:?} is larger than i64::MAX"))
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    blocks_read: usize,
}

impl<'a> Cursor<'a> {
    fn read_len(&mut self, what: &str) -> Result<i32> {
        let field = self.bytes.get(self.pos..self.pos + 4).ok_or_else(|| {
            FormatError::corrupt(
                STRUCTURE,
                format!("content ends at byte {} where the {what} was expected", self.bytes.len()),
            )
        })?;
        self.pos += 4;
        let len = i32::from_be_bytes([field[0], field[1], field[2], field[3]]);
        if len < 0 {
            return Err(FormatError::corrupt(
                STRUCTURE,
                format!("negative {what} {len} at byte {}", self.pos - 4),
            ));
        }
        Ok(len)
    }

    fn take(&mut self, len: i32, what: &str) -> Result<&'a [u8]> {
        let len = len as usize; // non-negative: read_len checked it
        let end = self.pos.checked_add(len).filter(|end| *end <= self.bytes.len()).ok_or_else(|| {
            FormatError::corrupt(
                STRUCTURE,
                format!(
                    "{what} at byte {} declares {len} bytes, but only {} remain",
                    self.pos,
                    self.bytes.len() - self.pos
                ),
            )
        })?;
        let slice = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(slice)
    }
}

/// A row object of a block. Unknown keys are ignored; a repeated key is refused.
#[derive(Deserialize)]
struct RowJson {
    metadata: String,
    offset: String,
}

/// The offset map with every pair kept, so that duplicate keys can be refused.
struct OffsetMapJson(Vec<(String, u64)>);

impl<'de> Deserialize<'de> for OffsetMapJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct PairsVisitor;
        impl<'de> Visitor<'de> for PairsVisitor {
            type Value = OffsetMapJson;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object from decimal offsets to row numbers")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut access: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut pairs = Vec::new();
                while let Some((key, row)) = access.next_entry::<String, u64>()? {
                    pairs.push((key, row));
                }
                Ok(OffsetMapJson(pairs))
            }
        }
        deserializer.deserialize_map(PairsVisitor).map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(offset: u64, record_count: u32, entry_size: u32, cumulative_size: u64) -> CompanionRow {
        CompanionRow {
            offset,
            record_count,
            timestamp_ms: 1_700_000_000_000,
            entry_size,
            cumulative_size,
            schema_version: None,
        }
    }

    fn content_of(gzip_bytes: &[u8]) -> Vec<u8> {
        decompress(gzip_bytes, u64::MAX).unwrap()
    }

    // spec-rule: edd7fbe36c [All] An implementation that writes a structure defined by a field table MUST…
    #[test]
    fn entry_header_emits_present_zeros_in_field_order() {
        // proto3 `optional`: explicit presence, so offset 0 is still written.
        let bytes = row(0, 2, 5, 5).to_metadata().unwrap().encode_to_vec();
        assert_eq!(hex(&bytes), "120f0800100218 80d095ffbc31 20052805".replace(' ', ""));
    }

    #[test]
    fn schema_version_is_written_only_when_set() {
        let mut with_version = row(0, 1, 0, 0);
        with_version.schema_version = Some(0);
        let bytes = with_version.to_metadata().unwrap().encode_to_vec();
        assert_eq!(&bytes[bytes.len() - 2..], &[0x20, 0x00]);
        let without = row(0, 1, 0, 0).to_metadata().unwrap().encode_to_vec();
        assert_eq!(bytes.len(), without.len() + 2);
    }

    #[test]
    fn reserved_fields_1_and_3_are_skipped_on_read() {
        let mut bytes = vec![0x08, 0x07, 0x1a, 0x02, 0xff, 0xff]; // field 1 varint, field 3 bytes
        bytes.extend(row(4, 1, 3, 9).to_metadata().unwrap().encode_to_vec());
        let decoded = LakehouseEntryMetadata::decode(bytes.as_slice()).unwrap();
        assert_eq!(CompanionRow::from_metadata(&decoded).unwrap(), row(4, 1, 3, 9));
    }

    // spec-rule: 1c414b48b6 [Compactor] Every block except the last MUST hold at least one row.
    #[test]
    fn exact_multiple_of_block_size_ends_with_an_empty_block() {
        let rows = [row(0, 1, 1, 1), row(1, 1, 1, 2)];
        let options = WriteOptions { max_rows_per_block: 2, ..WriteOptions::default() };
        let content = content_of(&write_companion(&rows, options).unwrap());
        let first_len = u32::from_be_bytes(content[0..4].try_into().unwrap()) as usize;
        let after_first = 4 + first_len;
        assert_eq!(&content[after_first..after_first + 6], &[0, 0, 0, 2, b'[', b']']);
        assert_eq!(
            read_companion(&write_companion(&rows, options).unwrap(), ReadOptions::default()).unwrap().rows(),
            &rows
        );
    }

    // spec-rule: 1c414b48b6 [Compactor] Every block except the last MUST hold at least one row.
    #[test]
    fn no_empty_block_before_the_last() {
        let rows: Vec<_> = (0..5).map(|i| row(i, 1, 1, i + 1)).collect();
        let options = WriteOptions { max_rows_per_block: 2, ..WriteOptions::default() };
        let content = content_of(&write_companion(&rows, options).unwrap());
        let mut pos = 0;
        let mut block_rows = Vec::new();
        loop {
            let len = i32::from_be_bytes(content[pos..pos + 4].try_into().unwrap());
            pos += 4;
            if len == SENTINEL {
                break;
            }
            let block: Vec<serde_json::Value> =
                serde_json::from_slice(&content[pos..pos + len as usize]).unwrap();
            block_rows.push(block.len());
            pos += len as usize;
        }
        assert_eq!(block_rows, vec![2, 2, 1]);
    }

    #[test]
    fn writer_refuses_non_consecutive_rows_and_unrepresentable_values() {
        let mut writer = CompanionWriter::new(WriteOptions::default()).unwrap();
        writer.push(&row(0, 2, 1, 1)).unwrap();
        let err = writer.push(&row(3, 1, 1, 2)).unwrap_err();
        assert!(err.to_string().contains("previous entry ends at 2"), "{err}");
        let err = row(0, 1, u32::MAX, 1).to_metadata().unwrap_err();
        assert!(err.to_string().contains("entry size"), "{err}");
        let err = row(0, 0, 1, 1).to_metadata().unwrap_err();
        assert!(err.to_string().contains("record count is 0"), "{err}");
        assert!(CompanionWriter::new(WriteOptions { max_rows_per_block: 0, gzip_level: 6 }).is_err());
    }

    #[test]
    fn offset_keys_must_be_canonical() {
        assert_eq!(parse_offset_key("0"), Ok(0));
        assert_eq!(parse_offset_key("9223372036854775807"), Ok(i64::MAX as u64));
        for bad in ["", "-1", "+1", "01", "00", " 1", "1.0", "1e3", "9223372036854775808", "٣"] {
            assert!(parse_offset_key(bad).is_err(), "{bad:?} accepted");
        }
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
