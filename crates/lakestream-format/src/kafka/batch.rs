//! The magic-2 record batch (Kafka's `RecordBatch`, KIP-98): one view of its header fields,
//! its records and its CRC-32C, and its encoder. The binding's payload rules
//! ([`super::count_records`]), the Kafka front end (idempotent producers' fields) and the
//! CloudEvents binding (events stored as one batch) all read and write batches through it.
//!
//! ```text
//!  0  baseOffset           int64     43  producerId    int64
//!  8  batchLength          int32     51  producerEpoch int16
//! 12  partitionLeaderEpoch int32     53  baseSequence  int32
//! 16  magic = 2            int8      57  record count  int32
//! 17  crc (CRC-32C of bytes 21..end) 61  records: each a varint length and
//! 21  attributes           int16         attributes int8, timestampDelta varlong,
//! 23  lastOffsetDelta      int32         offsetDelta varint, key, value (varint
//! 27  baseTimestamp        int64         length, -1 = null), header count varint,
//! 35  maxTimestamp         int64         headers (key, value as key and value)
//! ```
//!
//! ```
//! use lakestream_format::kafka::{RecordBatch, RecordBatchBuilder};
//!
//! let mut builder = RecordBatchBuilder::new();
//! builder.push(1_700_000_000_000, Some(b"key"), Some(b"value"), [("h", Some(&b"v"[..]))]);
//! let bytes = builder.finish().unwrap();
//! let batch = RecordBatch::read(&bytes).unwrap();
//! assert_eq!(batch.header().record_count, 1);
//! let records = batch.records(100).unwrap();
//! assert_eq!((records[0].offset, records[0].value.as_deref()), (100, Some(&b"value"[..])));
//! ```

use super::{
    CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, KafkaHeader, KafkaRecord, Limits, be_i32, be_i64, gunzip,
    read_bounded, unlz4_frame, unsnappy,
};
use crate::error::{FormatError, Result};
use crate::types::Offset;

/// The structure named in errors of [`RecordBatch::read`] and [`RecordBatchBuilder::finish`].
const BATCH_STRUCTURE: &str = "Kafka record batch";

/// The bytes of a magic-2 batch's header, before its records.
pub const RECORD_BATCH_HEADER_LEN: usize = 61;
/// Where the CRC-32C field starts; the checksum covers every byte after the field.
const CRC_AT: usize = 17;
const CRC_COVERS_FROM: usize = 21;

const ATTR_CODEC_MASK: i16 = 0x07;
const ATTR_LOG_APPEND_TIME: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;

/// The CRC-32C a magic-2 batch's header carries: over every byte after the CRC field (from
/// the attributes on), so that the base offset and the partition leader epoch can be
/// rewritten without it. Bytes too short to hold the field give the CRC of nothing.
pub fn record_batch_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(batch.get(CRC_COVERS_FROM..).unwrap_or_default())
}

/// The header fields of a magic-2 record batch, as its first 61 bytes carry them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordBatchHeader {
    /// The first record's offset (0 in an entry payload; a reader assigns the real one).
    pub base_offset: i64,
    /// The bytes after this field: the batch is `12 + batch_length` bytes.
    pub batch_length: i32,
    /// The partition leader epoch (-1: none).
    pub partition_leader_epoch: i32,
    /// The CRC-32C stored in the header.
    pub crc: u32,
    /// The attributes: bits 0-2 the compression codec, 0x08 LogAppendTime, 0x10
    /// transactional, 0x20 control.
    pub attributes: i16,
    /// The last record's offset delta (the record count minus one).
    pub last_offset_delta: i32,
    /// The first record's timestamp.
    pub base_timestamp: i64,
    /// The largest record timestamp (under LogAppendTime, every record's).
    pub max_timestamp: i64,
    /// The idempotent producer's id (-1: none).
    pub producer_id: i64,
    /// The producer's epoch (-1: none).
    pub producer_epoch: i16,
    /// The first record's sequence number (-1: none).
    pub base_sequence: i32,
    /// How many records the batch holds.
    pub record_count: i32,
}

impl RecordBatchHeader {
    /// Reads the header at the start of `bytes` (fields only: the CRC is checked by
    /// [`RecordBatch::read`]). Fewer than 61 bytes are refused as truncated, a magic other
    /// than 2 as unsupported.
    pub fn read(bytes: &[u8]) -> Result<Self> {
        let header = bytes.get(..RECORD_BATCH_HEADER_LEN).ok_or_else(|| {
            FormatError::corrupt(
                BATCH_STRUCTURE,
                format!(
                    "the header is truncated: {} bytes, a magic-2 batch header takes {RECORD_BATCH_HEADER_LEN}",
                    bytes.len()
                ),
            )
        })?;
        if header[16] != 2 {
            return Err(FormatError::unsupported(
                BATCH_STRUCTURE,
                format!("magic {}; a record batch has magic 2", header[16]),
            ));
        }
        Ok(Self::read_unchecked(header))
    }

    /// The fields of a header known to be 61 bytes of magic 2.
    fn read_unchecked(header: &[u8]) -> Self {
        let be_i16 = |at: usize| i16::from_be_bytes([header[at], header[at + 1]]);
        RecordBatchHeader {
            base_offset: be_i64(header, 0),
            batch_length: be_i32(header, 8),
            partition_leader_epoch: be_i32(header, 12),
            crc: u32::from_be_bytes([header[17], header[18], header[19], header[20]]),
            attributes: be_i16(21),
            last_offset_delta: be_i32(header, 23),
            base_timestamp: be_i64(header, 27),
            max_timestamp: be_i64(header, 35),
            producer_id: be_i64(header, 43),
            producer_epoch: be_i16(51),
            base_sequence: be_i32(header, 53),
            record_count: be_i32(header, 57),
        }
    }

    /// The header's 61 bytes (magic 2, the fields as they are, `crc` included).
    pub fn to_bytes(&self) -> [u8; RECORD_BATCH_HEADER_LEN] {
        let mut out = [0u8; RECORD_BATCH_HEADER_LEN];
        out[0..8].copy_from_slice(&self.base_offset.to_be_bytes());
        out[8..12].copy_from_slice(&self.batch_length.to_be_bytes());
        out[12..16].copy_from_slice(&self.partition_leader_epoch.to_be_bytes());
        out[16] = 2;
        out[17..21].copy_from_slice(&self.crc.to_be_bytes());
        out[21..23].copy_from_slice(&self.attributes.to_be_bytes());
        out[23..27].copy_from_slice(&self.last_offset_delta.to_be_bytes());
        out[27..35].copy_from_slice(&self.base_timestamp.to_be_bytes());
        out[35..43].copy_from_slice(&self.max_timestamp.to_be_bytes());
        out[43..51].copy_from_slice(&self.producer_id.to_be_bytes());
        out[51..53].copy_from_slice(&self.producer_epoch.to_be_bytes());
        out[53..57].copy_from_slice(&self.base_sequence.to_be_bytes());
        out[57..61].copy_from_slice(&self.record_count.to_be_bytes());
        out
    }

    /// The compression codec: 0 none, 1 gzip, 2 snappy, 3 LZ4, 4 zstd.
    pub fn compression(&self) -> u8 {
        (self.attributes & ATTR_CODEC_MASK) as u8
    }

    /// Whether the timestamps are the broker's (LogAppendTime: every record's is
    /// `max_timestamp`) rather than the producer's (CreateTime).
    pub fn log_append_time(&self) -> bool {
        self.attributes & ATTR_LOG_APPEND_TIME != 0
    }

    /// Whether the batch is part of a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// Whether the batch holds a transaction's control record.
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// Whether an idempotent producer sent the batch (it carries a producer id).
    pub fn has_producer(&self) -> bool {
        self.producer_id >= 0
    }
}

/// A magic-2 record batch: its header and its bytes, its length and CRC-32C checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordBatch<'a> {
    header: RecordBatchHeader,
    bytes: &'a [u8],
}

impl<'a> RecordBatch<'a> {
    /// The batch at the start of `bytes` (bytes after it are not looked at): its header
    /// (refused when truncated, or of a magic other than 2), its declared length (refused
    /// when it runs past `bytes` or is shorter than the header) and its CRC-32C (refused when
    /// it does not match the header's). The records themselves are checked when read.
    pub fn read(bytes: &'a [u8]) -> Result<Self> {
        let header = RecordBatchHeader::read(bytes)?;
        let declared = usize::try_from(header.batch_length)
            .ok()
            .and_then(|len| len.checked_add(12))
            .filter(|len| *len <= bytes.len())
            .ok_or_else(|| {
                FormatError::corrupt(
                    BATCH_STRUCTURE,
                    format!(
                        "the batch is truncated: batchLength {} declares {} bytes, {} are there",
                        header.batch_length,
                        i64::from(header.batch_length) + 12,
                        bytes.len()
                    ),
                )
            })?;
        Self::read_framed(&bytes[..declared], BATCH_STRUCTURE, "the batch")
    }

    /// The batch that is exactly `frame` (a magic-2 unit delimited by its length), errors
    /// naming `structure` and `what`.
    pub(super) fn read_framed(frame: &'a [u8], structure: &'static str, what: &str) -> Result<Self> {
        let bad = |detail: String| FormatError::corrupt(structure, format!("{what}: {detail}"));
        if frame.len() < RECORD_BATCH_HEADER_LEN {
            return Err(bad(format!(
                "batchLength {} is shorter than the {RECORD_BATCH_HEADER_LEN}-byte header",
                frame.len().saturating_sub(12)
            )));
        }
        let header = RecordBatchHeader::read_unchecked(&frame[..RECORD_BATCH_HEADER_LEN]);
        let crc = record_batch_crc(frame);
        if crc != header.crc {
            return Err(bad(format!("CRC-32C is {crc:#010x} but the header says {:#010x}", header.crc)));
        }
        Ok(RecordBatch { header, bytes: frame })
    }

    /// The header's fields.
    pub fn header(&self) -> &RecordBatchHeader {
        &self.header
    }

    /// The whole batch: header and records.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The records region after the header, compressed with [`RecordBatchHeader::compression`].
    pub fn records_region(&self) -> &'a [u8] {
        &self.bytes[RECORD_BATCH_HEADER_LEN..]
    }

    /// Decodes the batch's records, numbered from `first_offset` (decompressed within the
    /// default [`Limits`]). Refused: a region that does not hold exactly the header's record
    /// count of well-formed records, or that does not decompress.
    pub fn records(&self, first_offset: Offset) -> Result<Vec<KafkaRecord>> {
        let mut budget = Limits::default().max_decompressed_bytes;
        let mut out = Vec::new();
        self.decode_into(BATCH_STRUCTURE, "the batch", first_offset, &mut budget, &mut out)?;
        Ok(out)
    }

    /// Decodes the records into `out`, spending `budget` on decompression.
    pub(super) fn decode_into(
        &self,
        structure: &'static str,
        what: &str,
        first_offset: Offset,
        budget: &mut u64,
        out: &mut Vec<KafkaRecord>,
    ) -> Result<()> {
        let bad = |detail: String| FormatError::corrupt(structure, format!("{what}: {detail}"));
        let header = &self.header;
        let region = self.records_region();
        let decompressed;
        let mut records = match header.compression() {
            0 => region,
            CODEC_GZIP => {
                decompressed = gunzip(region, budget).map_err(bad)?;
                &decompressed[..]
            }
            CODEC_SNAPPY => {
                decompressed = unsnappy(region, budget).map_err(bad)?;
                &decompressed[..]
            }
            CODEC_LZ4 => {
                decompressed = unlz4_frame(region, budget).map_err(bad)?;
                &decompressed[..]
            }
            4 => {
                decompressed = read_bounded(
                    zstd::stream::read::Decoder::new(region).map_err(|e| bad(format!("zstd: {e}")))?,
                    budget,
                    "zstd",
                )
                .map_err(bad)?;
                &decompressed[..]
            }
            codec => return Err(bad(format!("compression codec {codec} is unknown (0 to 4)"))),
        };
        for index in 0..header.record_count.max(0) as u64 {
            let (len, used) =
                read_varint(records).ok_or_else(|| bad(format!("record {index}: malformed length")))?;
            let len = usize::try_from(len).map_err(|_| bad(format!("record {index} has length {len}")))?;
            let body = records
                .get(used..used + len)
                .ok_or_else(|| bad(format!("record {index} declares {len} bytes beyond the batch end")))?;
            records = &records[used + len..];
            let record = decode_record(body, header, first_offset + index)
                .map_err(|e| bad(format!("record {index}: {e}")))?;
            out.push(record);
        }
        if !records.is_empty() {
            return Err(bad(format!("{} bytes follow the last record", records.len())));
        }
        Ok(())
    }
}

/// One record's body (after its length).
fn decode_record(
    body: &[u8],
    header: &RecordBatchHeader,
    offset: Offset,
) -> std::result::Result<KafkaRecord, &'static str> {
    let mut cursor = Cursor { bytes: body, pos: 0 };
    cursor.take(1)?; // record attributes, unused
    let timestamp_delta = cursor.varlong()?;
    let _offset_delta = cursor.varint()?;
    let key = cursor.nullable()?;
    let value = cursor.nullable()?;
    let header_count = cursor.varint()?;
    let mut headers = Vec::with_capacity(header_count.clamp(0, 64) as usize);
    for _ in 0..header_count.max(0) {
        let key = cursor.nullable()?.ok_or("a header key is null")?;
        let key = String::from_utf8(key).map_err(|_| "a header key is not UTF-8")?;
        headers.push(KafkaHeader { key, value: cursor.nullable()? });
    }
    if cursor.pos != body.len() {
        return Err("bytes follow the record's headers");
    }
    let timestamp = if header.log_append_time() {
        header.max_timestamp
    } else {
        header.base_timestamp.wrapping_add(timestamp_delta)
    };
    Ok(KafkaRecord { offset, timestamp_ms: Some(timestamp), key, value, headers })
}

/// Counts the length-prefixed records of an uncompressed magic-2 records region.
pub(super) fn count_v2_records(mut records: &[u8]) -> std::result::Result<u64, String> {
    let mut count = 0u64;
    while !records.is_empty() {
        let (len, used) =
            read_varint(records).ok_or_else(|| format!("record {count} has a malformed length varint"))?;
        let len = usize::try_from(len).map_err(|_| format!("record {count} has length {len}"))?;
        records = records
            .get(used..)
            .and_then(|rest| rest.get(len..))
            .ok_or_else(|| format!("record {count} declares {len} bytes beyond the batch end"))?;
        count += 1;
    }
    Ok(count)
}

/// A zigzag varint of at most 5 bytes (a Kafka `varint`): the value and the bytes it took.
fn read_varint(bytes: &[u8]) -> Option<(i32, usize)> {
    let mut raw = 0u32;
    for (i, byte) in bytes.iter().take(5).enumerate() {
        let bits = u32::from(byte & 0x7f);
        if i == 4 && bits > 0x0f {
            return None;
        }
        raw |= bits << (7 * i);
        if byte & 0x80 == 0 {
            return Some((((raw >> 1) as i32) ^ -((raw & 1) as i32), i + 1));
        }
    }
    None
}

/// A cursor over one magic-2 record's bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], &'static str> {
        let bytes = self.bytes.get(self.pos..self.pos + n).ok_or("truncated")?;
        self.pos += n;
        Ok(bytes)
    }

    fn varint(&mut self) -> std::result::Result<i32, &'static str> {
        let (value, used) = read_varint(&self.bytes[self.pos..]).ok_or("malformed varint")?;
        self.pos += used;
        Ok(value)
    }

    /// A zigzag varlong of at most 10 bytes.
    fn varlong(&mut self) -> std::result::Result<i64, &'static str> {
        let mut raw = 0u64;
        for i in 0..10 {
            let byte = *self.bytes.get(self.pos).ok_or("truncated varlong")?;
            self.pos += 1;
            raw |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
            }
        }
        Err("malformed varlong")
    }

    fn nullable(&mut self) -> std::result::Result<Option<Vec<u8>>, &'static str> {
        let len = self.varint()?;
        if len < 0 {
            return Ok(None);
        }
        Ok(Some(self.take(len as usize)?.to_vec()))
    }
}

/// Builds one uncompressed magic-2 record batch with base offset 0 (an entry payload of the
/// binding): records are pushed in order, each taking the next offset delta, and
/// [`RecordBatchBuilder::finish`] writes the header and its CRC-32C.
#[derive(Debug, Clone)]
pub struct RecordBatchBuilder {
    producer: (i64, i16, i32),
    base_timestamp: Option<i64>,
    max_timestamp: i64,
    count: u64,
    records: Vec<u8>,
}

impl Default for RecordBatchBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl RecordBatchBuilder {
    /// A builder of a batch without a producer id (not idempotent).
    pub fn new() -> Self {
        RecordBatchBuilder {
            producer: (-1, -1, -1),
            base_timestamp: None,
            max_timestamp: i64::MIN,
            count: 0,
            records: Vec::new(),
        }
    }

    /// The batch of an idempotent producer: its id, epoch and first sequence number.
    pub fn with_producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer = (producer_id, producer_epoch, base_sequence);
        self
    }

    /// Appends a record (CreateTime `timestamp_ms`; a null key, value or header value is
    /// `None`).
    pub fn push<'h>(
        &mut self,
        timestamp_ms: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: impl IntoIterator<Item = (&'h str, Option<&'h [u8]>)>,
    ) {
        let base_timestamp = *self.base_timestamp.get_or_insert(timestamp_ms);
        self.max_timestamp = self.max_timestamp.max(timestamp_ms);
        let mut body = vec![0u8]; // record attributes
        put_varlong(&mut body, timestamp_ms.wrapping_sub(base_timestamp));
        put_varlong(&mut body, self.count as i64);
        put_nullable(&mut body, key);
        put_nullable(&mut body, value);
        let headers: Vec<(&str, Option<&[u8]>)> = headers.into_iter().collect();
        put_varlong(&mut body, headers.len() as i64);
        for (name, value) in headers {
            put_nullable(&mut body, Some(name.as_bytes()));
            put_nullable(&mut body, value);
        }
        put_varlong(&mut self.records, body.len() as i64);
        self.records.extend_from_slice(&body);
        self.count += 1;
    }

    /// How many records were pushed.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether no record was pushed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The batch's bytes. Refused: no record (a batch holds at least one), more records than
    /// an `int32` counts, or more than 2 GiB.
    pub fn finish(self) -> Result<Vec<u8>> {
        let Some(base_timestamp) = self.base_timestamp else {
            return Err(FormatError::invalid(BATCH_STRUCTURE, "a record batch needs at least one record"));
        };
        let count = i32::try_from(self.count).map_err(|_| {
            FormatError::invalid(
                BATCH_STRUCTURE,
                format!("{} records are too many for one batch", self.count),
            )
        })?;
        let batch_length = i32::try_from(RECORD_BATCH_HEADER_LEN - 12 + self.records.len())
            .map_err(|_| FormatError::invalid(BATCH_STRUCTURE, "the batch is larger than 2 GiB"))?;
        let (producer_id, producer_epoch, base_sequence) = self.producer;
        let header = RecordBatchHeader {
            base_offset: 0,
            batch_length,
            partition_leader_epoch: -1,
            crc: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp,
            max_timestamp: self.max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            record_count: count,
        };
        let mut out = Vec::with_capacity(RECORD_BATCH_HEADER_LEN + self.records.len());
        out.extend_from_slice(&header.to_bytes());
        out.extend_from_slice(&self.records);
        let crc = record_batch_crc(&out);
        out[CRC_AT..CRC_COVERS_FROM].copy_from_slice(&crc.to_be_bytes());
        Ok(out)
    }
}

/// Appends a zigzag varint of up to 10 bytes (a Kafka `varlong`; a `varint` is the same
/// encoding of a smaller value).
fn put_varlong(out: &mut Vec<u8>, value: i64) {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    while zigzag >= 0x80 {
        out.push((zigzag as u8) | 0x80);
        zigzag >>= 7;
    }
    out.push(zigzag as u8);
}

fn put_nullable(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => put_varlong(out, -1),
        Some(bytes) => {
            put_varlong(out, bytes.len() as i64);
            out.extend_from_slice(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorClass;

    fn two_records() -> Vec<u8> {
        let mut builder = RecordBatchBuilder::new().with_producer(42, 3, 10);
        builder.push(1_000, Some(b"k"), Some(b"v1"), [("h1", Some(&b"x"[..])), ("h2", None)]);
        builder.push(990, None, None, []);
        assert_eq!(builder.len(), 2);
        builder.finish().unwrap()
    }

    #[test]
    fn varints_are_zigzag_and_at_most_five_bytes() {
        assert_eq!(read_varint(&[0x00]), Some((0, 1)));
        assert_eq!(read_varint(&[0x01]), Some((-1, 1)));
        assert_eq!(read_varint(&[0x02]), Some((1, 1)));
        assert_eq!(read_varint(&[0xfe, 0xff, 0xff, 0xff, 0x0f]), Some((i32::MAX, 5)));
        assert_eq!(read_varint(&[0xff, 0xff, 0xff, 0xff, 0x1f]), None);
        assert_eq!(read_varint(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01]), None);
        assert_eq!(read_varint(&[0x80]), None);
        for value in [0i64, -1, 1, 63, -64, 64, i64::from(i32::MAX), i64::from(i32::MIN)] {
            let mut out = Vec::new();
            put_varlong(&mut out, value);
            if let Ok(small) = i32::try_from(value) {
                assert_eq!(read_varint(&out), Some((small, out.len())), "{value}");
            }
            let mut cursor = Cursor { bytes: &out, pos: 0 };
            assert_eq!(cursor.varlong(), Ok(value));
        }
    }

    #[test]
    fn a_built_batch_reads_back_field_by_field_and_record_by_record() {
        let bytes = two_records();
        let batch = RecordBatch::read(&bytes).unwrap();
        let header = *batch.header();
        assert_eq!(
            (header.base_offset, header.batch_length as usize + 12, header.partition_leader_epoch),
            (0, bytes.len(), -1)
        );
        assert_eq!((header.last_offset_delta, header.record_count), (1, 2));
        assert_eq!((header.base_timestamp, header.max_timestamp), (1_000, 1_000));
        assert_eq!((header.producer_id, header.producer_epoch, header.base_sequence), (42, 3, 10));
        assert!(header.has_producer() && !header.is_control() && !header.is_transactional());
        assert_eq!((header.compression(), header.log_append_time()), (0, false));
        assert_eq!(header.crc, record_batch_crc(&bytes));
        assert_eq!(header.crc, crc32c::crc32c(&bytes[21..]), "CRC-32C of every byte after the field");
        assert_eq!(&header.to_bytes()[..], &bytes[..RECORD_BATCH_HEADER_LEN], "the header round-trips");
        assert_eq!(batch.bytes(), &bytes[..]);
        let records = batch.records(7).unwrap();
        assert_eq!(
            records,
            [
                KafkaRecord {
                    offset: 7,
                    timestamp_ms: Some(1_000),
                    key: Some(b"k".to_vec()),
                    value: Some(b"v1".to_vec()),
                    headers: vec![
                        KafkaHeader { key: "h1".into(), value: Some(b"x".to_vec()) },
                        KafkaHeader { key: "h2".into(), value: None },
                    ],
                },
                KafkaRecord { offset: 8, timestamp_ms: Some(990), key: None, value: None, headers: vec![] },
            ]
        );
        // The binding takes it as it is.
        assert_eq!(super::super::count_records(&bytes), Ok(2));
        // Bytes after the batch are not part of it.
        let mut longer = bytes.clone();
        longer.extend_from_slice(b"next batch");
        assert_eq!(RecordBatch::read(&longer).unwrap().bytes(), &bytes[..]);
    }

    #[test]
    fn a_crc_mismatch_is_refused_naming_both_checksums() {
        let bytes = two_records();
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0x01;
        let error = RecordBatch::read(&flipped).unwrap_err();
        assert_eq!(error.class(), ErrorClass::CorruptData);
        let stored = RecordBatch::read(&bytes).unwrap().header().crc;
        let message = error.to_string();
        assert!(message.contains("CRC-32C") && message.contains(&format!("{stored:#010x}")), "{message}");
        // The base offset and the leader epoch are outside the checksum.
        let mut rewritten = bytes.clone();
        rewritten[..8].copy_from_slice(&99i64.to_be_bytes());
        rewritten[12..16].copy_from_slice(&5i32.to_be_bytes());
        let header = *RecordBatch::read(&rewritten).unwrap().header();
        assert_eq!((header.base_offset, header.partition_leader_epoch), (99, 5));
    }

    #[test]
    fn a_truncated_header_or_batch_is_refused() {
        let bytes = two_records();
        for cut in [0, 11, 12, 60] {
            let error = RecordBatch::read(&bytes[..cut]).unwrap_err();
            assert_eq!(error.class(), ErrorClass::CorruptData);
            assert!(error.to_string().contains("header is truncated"), "{cut}: {error}");
            assert!(RecordBatchHeader::read(&bytes[..cut]).is_err());
        }
        for cut in [61, bytes.len() - 1] {
            let error = RecordBatch::read(&bytes[..cut]).unwrap_err();
            assert!(error.to_string().contains("batch is truncated"), "{cut}: {error}");
        }
        // A length shorter than the header it is part of.
        let mut short = bytes.clone();
        short[8..12].copy_from_slice(&20i32.to_be_bytes());
        let error = RecordBatch::read(&short).unwrap_err();
        assert!(error.to_string().contains("shorter than the 61-byte header"), "{error}");
        // Another magic.
        let mut legacy = bytes;
        legacy[16] = 1;
        let error = RecordBatch::read(&legacy).unwrap_err();
        assert!(matches!(error, FormatError::Unsupported { .. }) && error.to_string().contains("magic 1"));
    }

    #[test]
    fn records_that_do_not_fill_the_region_exactly_are_refused() {
        let bytes = two_records();
        // The header claims a third record the region does not hold.
        let mut header = *RecordBatch::read(&bytes).unwrap().header();
        header.record_count = 3;
        header.last_offset_delta = 2;
        let mut more = header.to_bytes().to_vec();
        more.extend_from_slice(&bytes[RECORD_BATCH_HEADER_LEN..]);
        let crc = record_batch_crc(&more);
        more[CRC_AT..CRC_COVERS_FROM].copy_from_slice(&crc.to_be_bytes());
        let error = RecordBatch::read(&more).unwrap().records(0).unwrap_err();
        assert!(error.to_string().contains("record 2"), "{error}");
    }

    #[test]
    fn an_empty_builder_is_refused() {
        let error = RecordBatchBuilder::default().finish().unwrap_err();
        assert_eq!(error.class(), ErrorClass::InvalidInput);
        assert!(error.to_string().contains("at least one record"), "{error}");
    }
}
