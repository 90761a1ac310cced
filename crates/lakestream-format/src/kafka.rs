//! The Kafka binding (Appendix A; addendum §7).
//!
//! * **Stream identity.** Each incarnation of a topic is the stream
//!   `default/{topic}-topic-id-{topic ID}`; see [`stream_name`] and [`parse_stream_name`].
//! * **Entry payloads.** A payload is one or more complete Kafka record batches, back to back,
//!   with no envelope. [`count_records`] validates a payload and returns its record count;
//!   [`assign_offsets`] rewrites the batches' offsets for a reader; [`decode_records`] decodes
//!   each record (offset, timestamp, key, value, headers), e.g. for table rows.
//! * **Record batches.** [`RecordBatch`] is the one view of a magic-2 batch: its header
//!   fields ([`RecordBatchHeader`]), its CRC-32C ([`record_batch_crc`]) and its records;
//!   [`RecordBatchBuilder`] encodes one; [`payload_batches`] validates a payload and returns
//!   its batches, for callers that read their headers too.
//! * **Compacted objects.** [`KAFKA_BINDING`]: `entrySerDeType` `KAFKA_BATCHED_RAW_PARQUET`,
//!   Avro record `KafkaMessage`. Only a Kafka topic's stream (one created with
//!   [`topic_stream_properties`]) carries them; every other stream follows the native binding
//!   ([`crate::native`]). A payload appended to a topic's stream, over any API, must pass
//!   [`check_entry`].
//!
//! Both batch formats put the magic byte at position 16, after an 8-byte offset and a 4-byte
//! length, so a payload is walked batch by batch and each is checked by its magic:
//!
//! ```text
//! magic 2 (record batch)                 magic 0/1 (one message of a message set)
//!  0  baseOffset        int64             0  offset          int64
//!  8  batchLength       int32             8  messageSize     int32
//! 12  partitionLeaderEpoch int32         12  crc (CRC-32 of bytes 16..end)
//! 16  magic = 2                          16  magic = 0 or 1
//! 17  crc (CRC-32C of bytes 21..end)     17  attributes (bits 0-2: codec)
//! 21  attributes int16 (0-2 codec,       18  [magic 1: timestamp int64]
//!     0x10 transactional, 0x20 control)      key   int32 length (-1 = null) + bytes
//! 23  lastOffsetDelta   int32                value int32 length (-1 = null) + bytes
//! 27  baseTimestamp, maxTimestamp int64
//! 43  producerId int64, producerEpoch int16, baseSequence int32
//! 57  record count      int32
//! 61  records
//! ```
//!
//! Checks on a magic-2 batch: base offset 0; a record count above 0 equal to
//! `lastOffsetDelta + 1`; neither transactional nor control; a known codec; the CRC-32C; and,
//! when uncompressed, that the records region holds exactly that many length-prefixed records.
//!
//! Checks on a magic-0/1 message: its CRC-32, a known codec, and key and value that fill it
//! exactly. An uncompressed message is one record. A compressed wrapper counts its inner
//! messages, which must be uncompressed messages of the same magic (at least one). Wrappers
//! are decompressed within [`Limits::max_decompressed_bytes`]: gzip; snappy (the xerial
//! stream format Kafka's Java clients write, or a single raw block); and LZ4 frames of
//! magic 1. Magic-0 LZ4 wrappers, whose pre-KIP-57 frames carry a wrong header checksum, give
//! [`FormatError::Unsupported`] rather than a guessed count.

use std::io::Read;

mod batch;

pub use batch::{
    RECORD_BATCH_HEADER_LEN, RecordBatch, RecordBatchBuilder, RecordBatchHeader, record_batch_crc,
};

use crate::compacted::Binding;
use crate::error::{FormatError, Result};
use crate::types::Offset;

const STRUCTURE: &str = "Kafka entry payload";
const STREAM_STRUCTURE: &str = "Kafka stream name";

/// The Kafka binding's compacted-object identifiers (addendum §7.1).
pub const KAFKA_BINDING: Binding =
    Binding { entry_serde_type: "KAFKA_BATCHED_RAW_PARQUET", avro_record_name: "KafkaMessage" };

/// The namespace of every Kafka topic's stream.
pub const NAMESPACE: &str = "default";

/// The stream property that names the Kafka topic a stream stores (Appendix A). A stream
/// created with it follows the Kafka binding ([`crate::native::binding_of_stream`]): its
/// payloads must be complete record batches and its compacted files carry [`KAFKA_BINDING`].
pub const TOPIC_NAME_PROPERTY: &str = "lakestream.kafka.topic.name";

/// The stream property that names the stream's source; for a Kafka topic, the topic name
/// (Appendix A).
pub const SOURCE_LOGICAL_NAME_PROPERTY: &str = "lakestream.source.logical.name";

/// The property our Kafka front end gave topic streams before it wrote the spec's two; such a
/// stream is a Kafka topic as well.
pub const LEGACY_TOPIC_PROPERTY: &str = "kafka.topic";

/// The properties a Kafka topic's stream is created with (Appendix A): both
/// [`TOPIC_NAME_PROPERTY`] and [`SOURCE_LOGICAL_NAME_PROPERTY`] hold the topic name.
pub fn topic_stream_properties(topic: &str) -> std::collections::BTreeMap<String, String> {
    std::collections::BTreeMap::from([
        (TOPIC_NAME_PROPERTY.to_owned(), topic.to_owned()),
        (SOURCE_LOGICAL_NAME_PROPERTY.to_owned(), topic.to_owned()),
    ])
}

/// Whether a stream with these properties stores a Kafka topic: it carries
/// [`TOPIC_NAME_PROPERTY`] (or, created by an earlier version of our front end,
/// [`LEGACY_TOPIC_PROPERTY`]).
pub fn is_topic_stream(properties: &std::collections::BTreeMap<String, String>) -> bool {
    properties.contains_key(TOPIC_NAME_PROPERTY) || properties.contains_key(LEGACY_TOPIC_PROPERTY)
}

/// The text between a topic name and its topic ID in a stream name.
pub const TOPIC_ID_SEPARATOR: &str = "-topic-id-";

/// Kafka's longest legal topic name.
const MAX_TOPIC_LEN: usize = 249;
/// The length of a Kafka topic ID in its string form: URL-safe Base64 of 16 bytes, no padding.
const TOPIC_ID_LEN: usize = 22;

/// One incarnation of a Kafka topic: its name and topic ID.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopicIncarnation {
    /// The topic name.
    pub topic: String,
    /// The Kafka topic ID in its string form (22 characters of URL-safe Base64).
    pub topic_id: String,
}

fn check_topic(topic: &str) -> Result<()> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if topic.is_empty() || topic.len() > MAX_TOPIC_LEN || !topic.chars().all(legal) {
        return Err(FormatError::invalid(
            STREAM_STRUCTURE,
            format!("{topic:?} is not a legal Kafka topic name (1 to 249 of [a-zA-Z0-9._-])"),
        ));
    }
    Ok(())
}

fn check_topic_id(topic_id: &str) -> Result<()> {
    let base64url = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_');
    if topic_id.len() != TOPIC_ID_LEN || !topic_id.chars().all(base64url) {
        return Err(FormatError::invalid(
            STREAM_STRUCTURE,
            format!("{topic_id:?} is not a Kafka topic ID (22 characters of URL-safe Base64)"),
        ));
    }
    if topic_id.contains(TOPIC_ID_SEPARATOR) {
        // The name would split at this later separator and not parse back.
        return Err(FormatError::invalid(
            STREAM_STRUCTURE,
            format!("topic ID {topic_id:?} contains {TOPIC_ID_SEPARATOR:?}, so its stream name is ambiguous"),
        ));
    }
    Ok(())
}

/// The stream name `{topic}-topic-id-{topic ID}` of a topic incarnation.
pub fn stream_name(topic: &str, topic_id: &str) -> Result<String> {
    check_topic(topic)?;
    check_topic_id(topic_id)?;
    Ok(format!("{topic}{TOPIC_ID_SEPARATOR}{topic_id}"))
}

/// Splits a stream name at its **last** `-topic-id-` (a topic name may itself contain the
/// text) and checks both parts.
pub fn parse_stream_name(name: &str) -> Result<TopicIncarnation> {
    let Some(split) = name.rfind(TOPIC_ID_SEPARATOR) else {
        return Err(FormatError::invalid(
            STREAM_STRUCTURE,
            format!("{name:?} contains no {TOPIC_ID_SEPARATOR:?}"),
        ));
    };
    let topic = &name[..split];
    let topic_id = &name[split + TOPIC_ID_SEPARATOR.len()..];
    check_topic(topic)?;
    check_topic_id(topic_id)?;
    Ok(TopicIncarnation { topic: topic.to_owned(), topic_id: topic_id.to_owned() })
}

/// Bounds of payload validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most bytes that decompressing the payload's compressed magic-0/1 wrappers may
    /// produce in total. Default 256 MiB.
    pub max_decompressed_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_decompressed_bytes: 256 * 1024 * 1024 }
    }
}

/// Validates an entry payload with the default [`Limits`] and returns its record count.
pub fn count_records(payload: &[u8]) -> Result<u32> {
    count_records_with(payload, Limits::default())
}

/// The \[Writer\] payload rules of Appendix A for an entry of a Kafka topic's stream: the payload
/// is one or more complete record batches (checked as [`count_records`] does), and the entry's
/// record count, when the producer gave one, equals the records in those batches. Returns the
/// record count the entry takes. A front end calls this for every entry it appends to a Kafka
/// topic's stream, whatever the API, and refuses the entry on error (invalid input).
pub fn check_entry(payload: &[u8], record_count: Option<u32>) -> Result<u32> {
    let counted = count_records(payload)?;
    match record_count {
        Some(given) if given != counted => Err(FormatError::invalid(
            STRUCTURE,
            format!("the entry declares {given} records, its record batches hold {counted}"),
        )),
        _ => Ok(counted),
    }
}

/// Validates an entry payload against the binding's rules and returns the total number of
/// records in its batches.
///
/// Errors are [`FormatError::Corrupt`] (or `Unsupported` for a codec or magic not handled);
/// a writer validating a producer's input reports them to its caller as invalid input.
pub fn count_records_with(payload: &[u8], limits: Limits) -> Result<u32> {
    record_count(&payload_batches_with(payload, limits)?)
}

/// The records of a validated payload's batches: their sum, which an entry holds at most
/// `i32::MAX` of.
pub fn record_count(batches: &[PayloadBatch<'_>]) -> Result<u32> {
    let total: u64 = batches.iter().map(|batch| u64::from(batch.records())).sum();
    u32::try_from(total).ok().filter(|total| *total <= i32::MAX as u32).ok_or_else(|| {
        FormatError::corrupt(STRUCTURE, format!("{total} records are more than an entry can hold (i32::MAX)"))
    })
}

/// One unit of an entry payload, checked against the binding's rules: a magic-2 record
/// batch, or a magic-0/1 message (a compressed wrapper counting its inner messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadBatch<'a> {
    /// A magic-2 record batch.
    RecordBatch(RecordBatch<'a>),
    /// A magic-0/1 message.
    Message {
        /// The message's bytes, from its offset field to its end.
        bytes: &'a [u8],
        /// Its magic: 0 or 1.
        magic: u8,
        /// 1, or the inner messages of a compressed wrapper.
        records: u32,
    },
}

impl<'a> PayloadBatch<'a> {
    /// The unit's bytes in the payload.
    pub fn bytes(&self) -> &'a [u8] {
        match self {
            PayloadBatch::RecordBatch(batch) => batch.bytes(),
            PayloadBatch::Message { bytes, .. } => bytes,
        }
    }

    /// Its magic byte.
    pub fn magic(&self) -> u8 {
        match self {
            PayloadBatch::RecordBatch(_) => 2,
            PayloadBatch::Message { magic, .. } => *magic,
        }
    }

    /// How many records it holds.
    pub fn records(&self) -> u32 {
        match self {
            // Checked to be above 0.
            PayloadBatch::RecordBatch(batch) => batch.header().record_count as u32,
            PayloadBatch::Message { records, .. } => *records,
        }
    }
}

/// Validates an entry payload as [`count_records`] does (default [`Limits`]) and returns its
/// batches in order: one pass for a caller that also reads their headers (an idempotent
/// producer's fields, say).
pub fn payload_batches(payload: &[u8]) -> Result<Vec<PayloadBatch<'_>>> {
    payload_batches_with(payload, Limits::default())
}

/// Validates an entry payload (with the default [`Limits`]) and returns a copy whose batches
/// carry the offsets a reader assigns (Appendix A; addendum §7.2): the batches take offsets in
/// order from `entry_offset`, each as many as it has records. A magic-2 batch gets its first offset as `baseOffset`; a
/// magic-0/1 message gets its offset, and a compressed wrapper the offset of its last inner
/// message (its inner messages are left as they are). No CRC covers these fields.
pub fn assign_offsets(payload: &[u8], entry_offset: Offset) -> Result<Vec<u8>> {
    let batches = payload_batches(payload)?;
    let mut out = payload.to_vec();
    let mut next = entry_offset;
    let mut start = 0;
    for batch in &batches {
        let records = u64::from(batch.records());
        let offset = match batch.magic() {
            2 => next,
            _ => next + records - 1,
        };
        let offset = i64::try_from(offset).map_err(|_| {
            FormatError::invalid(STRUCTURE, format!("offset {offset} does not fit a Kafka int64 offset"))
        })?;
        out[start..start + 8].copy_from_slice(&offset.to_be_bytes());
        next += records;
        start += batch.bytes().len();
    }
    Ok(out)
}

/// One Kafka record of an entry payload, as a consumer sees it (see [`decode_records`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaRecord {
    /// The record's offset: the entry's offset plus the record's position in the payload.
    pub offset: Offset,
    /// The record timestamp in ms since the Unix epoch: CreateTime (a magic-2 batch's base
    /// timestamp plus the record's delta, a magic-1 message's own), or the batch's (wrapper's)
    /// time under LogAppendTime; `None` for magic-0 messages, which carry none.
    pub timestamp_ms: Option<i64>,
    /// The key; `None` when null.
    pub key: Option<Vec<u8>>,
    /// The value; `None` when null.
    pub value: Option<Vec<u8>>,
    /// The headers in order (magic 2 only); a header value may be null.
    pub headers: Vec<KafkaHeader>,
}

/// One record header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaHeader {
    /// The header key (UTF-8, as Kafka requires).
    pub key: String,
    /// The header value; `None` when null.
    pub value: Option<Vec<u8>>,
}

/// Validates an entry payload (with the default [`Limits`]) and decodes its records in order,
/// numbering them from `entry_offset` as [`assign_offsets`] does. Compressed batches are
/// decompressed: magic 2 with gzip, snappy (xerial stream or raw block), LZ4 (frame) or
/// zstd; magic-0/1 wrappers as [`count_records`] accepts them. The decompressed bytes of the
/// whole payload are bounded by [`Limits::max_decompressed_bytes`].
pub fn decode_records(payload: &[u8], entry_offset: Offset) -> Result<Vec<KafkaRecord>> {
    let limits = Limits::default();
    let batches = payload_batches_with(payload, limits)?;
    let mut budget = limits.max_decompressed_bytes;
    let mut records = Vec::new();
    let mut next = entry_offset;
    let mut start = 0;
    for (i, batch) in batches.iter().enumerate() {
        let what = format!("batch {i} (magic at byte {})", start + 16);
        let before = records.len();
        match batch {
            PayloadBatch::RecordBatch(batch) => {
                batch.decode_into(STRUCTURE, &what, next, &mut budget, &mut records)?
            }
            PayloadBatch::Message { bytes, .. } => {
                decode_legacy_message(bytes, &what, next, None, &mut budget, &mut records)?
            }
        }
        let decoded = (records.len() - before) as u64;
        if decoded != u64::from(batch.records()) {
            return Err(FormatError::corrupt(
                STRUCTURE,
                format!("{what}: decoded {decoded} records, the batch holds {}", batch.records()),
            ));
        }
        next += decoded;
        start += batch.bytes().len();
    }
    Ok(records)
}

/// Kafka's timestamp-type attribute bit: LogAppendTime (the batch's or wrapper's time).
const ATTR_LOG_APPEND_TIME: u16 = 0x08;

/// Decodes one magic-0/1 message: a record, or a compressed wrapper's inner messages.
/// `wrapper_time` is the wrapper's timestamp when it says LogAppendTime.
fn decode_legacy_message(
    message: &[u8],
    what: &str,
    first_offset: Offset,
    wrapper_time: Option<i64>,
    budget: &mut u64,
    out: &mut Vec<KafkaRecord>,
) -> Result<()> {
    let bad = |detail: String| FormatError::corrupt(STRUCTURE, format!("{what}: {detail}"));
    let magic = message[16];
    let attributes = message[17];
    let header_len = if magic == 0 { 18 } else { 26 };
    let timestamp = (magic == 1).then(|| be_i64(message, 18));
    let (key_end, key) = legacy_bytes(message, header_len).map_err(|e| bad(format!("key {e}")))?;
    let (_, value) = legacy_bytes(message, key_end).map_err(|e| bad(format!("value {e}")))?;
    let codec = attributes & 0x07;
    if codec == 0 {
        out.push(KafkaRecord {
            offset: first_offset,
            timestamp_ms: wrapper_time.or(timestamp),
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            headers: Vec::new(),
        });
        return Ok(());
    }
    let compressed = value.ok_or_else(|| bad("is a compressed wrapper with a null value".into()))?;
    let inner_set = match codec {
        CODEC_GZIP => gunzip(compressed, budget).map_err(bad)?,
        CODEC_SNAPPY => unsnappy(compressed, budget).map_err(bad)?,
        CODEC_LZ4 if magic == 1 => unlz4_frame(compressed, budget).map_err(bad)?,
        other => return Err(bad(format!("compression codec {other} is not decoded for magic {magic}"))),
    };
    let wrapper_time = (u16::from(attributes) & ATTR_LOG_APPEND_TIME != 0).then_some(timestamp).flatten();
    let mut pos = 0;
    let mut index = 0u64;
    while pos < inner_set.len() {
        let inner_what = format!("{what}, inner message {index}");
        let inner = frame(&inner_set, pos, &inner_what)?;
        if inner.len() < header_len + 8 {
            return Err(bad(format!("inner message {index} is too short")));
        }
        decode_legacy_message(inner, &inner_what, first_offset + index, wrapper_time, budget, out)?;
        pos += inner.len();
        index += 1;
    }
    Ok(())
}

/// The bytes of the length-prefixed unit at `pos`: an 8-byte offset, a 4-byte length and that
/// many bytes.
fn frame<'a>(bytes: &'a [u8], pos: usize, what: &str) -> Result<&'a [u8]> {
    let header = bytes.get(pos..pos + 12).ok_or_else(|| {
        FormatError::corrupt(
            STRUCTURE,
            format!(
                "{what} at byte {pos} is truncated: {} bytes remain, its header needs 12",
                bytes.len() - pos
            ),
        )
    })?;
    let len = i32::from_be_bytes([header[8], header[9], header[10], header[11]]);
    let len = usize::try_from(len).map_err(|_| {
        FormatError::corrupt(STRUCTURE, format!("{what} at byte {pos} declares length {len}"))
    })?;
    bytes.get(pos..pos + 12 + len).ok_or_else(|| {
        FormatError::corrupt(
            STRUCTURE,
            format!(
                "{what} at byte {pos} is truncated: it declares {} bytes, {} remain",
                12 + len,
                bytes.len() - pos
            ),
        )
    })
}

fn payload_batches_with(payload: &[u8], limits: Limits) -> Result<Vec<PayloadBatch<'_>>> {
    if payload.is_empty() {
        return Err(FormatError::corrupt(STRUCTURE, "the payload is empty; it must hold at least one batch"));
    }
    let mut budget = limits.max_decompressed_bytes;
    let mut batches = Vec::new();
    let mut pos = 0;
    while pos < payload.len() {
        let what = format!("batch {} (magic at byte {})", batches.len(), pos + 16);
        let frame = frame(payload, pos, &what)?;
        let magic = *frame.get(16).ok_or_else(|| {
            FormatError::corrupt(
                STRUCTURE,
                format!("{what} is {} bytes, too short to hold a magic byte", frame.len()),
            )
        })?;
        batches.push(match magic {
            2 => PayloadBatch::RecordBatch(check_v2_batch(frame, &what)?),
            0 | 1 => PayloadBatch::Message {
                bytes: frame,
                magic,
                records: check_legacy_message(frame, &what, &mut budget, false)?,
            },
            other => {
                return Err(FormatError::unsupported(
                    STRUCTURE,
                    format!("{what} has magic {other}; known: 0, 1, 2"),
                ));
            }
        });
        pos += frame.len();
    }
    Ok(batches)
}

fn be_i32(bytes: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn be_i64(bytes: &[u8], at: usize) -> i64 {
    let mut field = [0u8; 8];
    field.copy_from_slice(&bytes[at..at + 8]);
    i64::from_be_bytes(field)
}

/// Checks a magic-2 batch (the whole frame) against the binding's rules.
fn check_v2_batch<'a>(frame: &'a [u8], what: &str) -> Result<RecordBatch<'a>> {
    let bad = |detail: String| FormatError::corrupt(STRUCTURE, format!("{what}: {detail}"));
    let batch = RecordBatch::read_framed(frame, STRUCTURE, what)?;
    let header = batch.header();
    if header.base_offset != 0 {
        return Err(bad(format!("baseOffset is {}; the binding requires 0", header.base_offset)));
    }
    if header.is_control() {
        return Err(bad("is a control batch, which an entry payload must not contain".into()));
    }
    if header.is_transactional() {
        return Err(bad("is a transactional batch, which an entry payload must not contain".into()));
    }
    let codec = header.compression();
    if codec > 4 {
        return Err(bad(format!("compression codec {codec} is unknown (0 to 4)")));
    }
    let count = header.record_count;
    if count <= 0 {
        return Err(bad(format!("record count is {count}; it must be above 0")));
    }
    if i64::from(count) != i64::from(header.last_offset_delta) + 1 {
        return Err(bad(format!(
            "record count {count} differs from lastOffsetDelta + 1 = {}",
            i64::from(header.last_offset_delta) + 1
        )));
    }
    if codec == 0 {
        let found = batch::count_v2_records(batch.records_region()).map_err(bad)?;
        if found != count as u64 {
            return Err(bad(format!("header declares {count} records, the records region holds {found}")));
        }
    }
    Ok(batch)
}

const CODEC_GZIP: u8 = 1;
const CODEC_SNAPPY: u8 = 2;
const CODEC_LZ4: u8 = 3;

/// Checks one magic-0/1 message (the whole frame) and returns how many records it holds:
/// 1, or the inner-message count of a compressed wrapper.
fn check_legacy_message(message: &[u8], what: &str, budget: &mut u64, inner: bool) -> Result<u32> {
    let bad = |detail: String| FormatError::corrupt(STRUCTURE, format!("{what}: {detail}"));
    let magic = message[16];
    let header_len = if magic == 0 { 18 } else { 26 };
    if message.len() < header_len + 8 {
        return Err(bad(format!(
            "messageSize {} is too short for a magic-{magic} message",
            message.len() - 12
        )));
    }
    let stored_crc = u32::from_be_bytes([message[12], message[13], message[14], message[15]]);
    let mut crc = flate2::Crc::new();
    crc.update(&message[16..]);
    if crc.sum() != stored_crc {
        return Err(bad(format!("CRC-32 is {:#010x} but the message says {stored_crc:#010x}", crc.sum())));
    }
    let codec = message[17] & 0x07;
    let (key_end, _) = legacy_bytes(message, header_len).map_err(|e| bad(format!("key {e}")))?;
    let (value_end, value) = legacy_bytes(message, key_end).map_err(|e| bad(format!("value {e}")))?;
    if value_end != message.len() {
        return Err(bad(format!("{} bytes follow the value", message.len() - value_end)));
    }
    if codec == 0 {
        return Ok(1);
    }
    if inner {
        return Err(bad("is a compressed message inside a compressed wrapper".into()));
    }
    let compressed = value.ok_or_else(|| bad("is a compressed wrapper with a null value".into()))?;
    let inner_set = match codec {
        CODEC_GZIP => gunzip(compressed, budget).map_err(bad)?,
        CODEC_SNAPPY => unsnappy(compressed, budget).map_err(bad)?,
        CODEC_LZ4 if magic == 1 => unlz4_frame(compressed, budget).map_err(bad)?,
        CODEC_LZ4 => {
            // Before KIP-57, magic-0 LZ4 computed the frame's header checksum over the wrong
            // bytes; standard decoders refuse it, and we do not carry a second decoder.
            return Err(FormatError::unsupported(
                STRUCTURE,
                format!("{what}: an LZ4 magic-0 wrapper (pre-KIP-57 framing) is not supported"),
            ));
        }
        other => return Err(bad(format!("compression codec {other} is unknown for magic {magic} (0 to 3)"))),
    };
    let mut count = 0u32;
    let mut pos = 0;
    while pos < inner_set.len() {
        let inner_what = format!("{what}, inner message {count}");
        let frame = frame(&inner_set, pos, &inner_what)?;
        let inner_magic = *frame.get(16).ok_or_else(|| bad(format!("inner message {count} is too short")))?;
        if inner_magic != magic {
            return Err(bad(format!("inner message {count} has magic {inner_magic}, its wrapper {magic}")));
        }
        count += check_legacy_message(frame, &inner_what, budget, true)?;
        pos += frame.len();
    }
    if count == 0 {
        return Err(bad(
            "is a compressed wrapper with no inner messages; a batch holds at least one record".into()
        ));
    }
    Ok(count)
}

/// Reads an `int32` length (-1 for null) and that many bytes at `at`; returns the end position
/// and the bytes.
fn legacy_bytes(message: &[u8], at: usize) -> std::result::Result<(usize, Option<&[u8]>), String> {
    let len_field = message.get(at..at + 4).ok_or("length is missing")?;
    let len = i32::from_be_bytes([len_field[0], len_field[1], len_field[2], len_field[3]]);
    if len == -1 {
        return Ok((at + 4, None));
    }
    let len = usize::try_from(len).map_err(|_| format!("length {len} is negative"))?;
    let bytes = message.get(at + 4..at + 4 + len).ok_or(format!("of {len} bytes runs past the message"))?;
    Ok((at + 4 + len, Some(bytes)))
}

const OVER_BUDGET: &str = "decompressed wrappers exceed Limits::max_decompressed_bytes";

/// Reads a decompressing stream to its end, within the remaining budget.
fn read_bounded(decoder: impl Read, budget: &mut u64, codec: &str) -> std::result::Result<Vec<u8>, String> {
    let mut out = Vec::new();
    decoder
        .take(budget.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| format!("{codec} wrapper does not decompress: {e}"))?;
    spend(budget, out.len())?;
    Ok(out)
}

fn spend(budget: &mut u64, bytes: usize) -> std::result::Result<(), String> {
    *budget = budget.checked_sub(bytes as u64).ok_or(OVER_BUDGET)?;
    Ok(())
}

fn gunzip(compressed: &[u8], budget: &mut u64) -> std::result::Result<Vec<u8>, String> {
    read_bounded(flate2::read::MultiGzDecoder::new(compressed), budget, "gzip")
}

/// Kafka LZ4 wrappers of magic 1 are standard LZ4 frames (KIP-57).
fn unlz4_frame(compressed: &[u8], budget: &mut u64) -> std::result::Result<Vec<u8>, String> {
    read_bounded(lz4_flex::frame::FrameDecoder::new(compressed), budget, "LZ4")
}

/// The header of xerial snappy-java's stream format, which Kafka's Java clients write for
/// snappy wrappers: magic, then a version and a compatible version (int32 each).
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\0";
const XERIAL_HEADER_LEN: usize = 16;

/// Decompresses a snappy wrapper value: the xerial stream format (chunks, each an
/// `int32 BE length` and a raw snappy block) when it starts with the xerial header, else one
/// raw snappy block; the same two forms snappy-java's and kafka-python's readers accept.
fn unsnappy(compressed: &[u8], budget: &mut u64) -> std::result::Result<Vec<u8>, String> {
    let Some(mut chunks) =
        compressed.strip_prefix(XERIAL_MAGIC.as_slice()).and_then(|rest| rest.get(XERIAL_HEADER_LEN - 8..))
    else {
        return unsnappy_block(compressed, budget);
    };
    let mut out = Vec::new();
    while !chunks.is_empty() {
        let len_field = chunks.get(..4).ok_or("snappy stream ends inside a chunk length")?;
        let len = u32::from_be_bytes([len_field[0], len_field[1], len_field[2], len_field[3]]) as usize;
        let block =
            chunks.get(4..4 + len).ok_or(format!("snappy chunk of {len} bytes runs past the value"))?;
        out.extend(unsnappy_block(block, budget)?);
        chunks = &chunks[4 + len..];
    }
    Ok(out)
}

fn unsnappy_block(block: &[u8], budget: &mut u64) -> std::result::Result<Vec<u8>, String> {
    // The block declares its length first: check it against the budget before allocating.
    let len = snap::raw::decompress_len(block).map_err(|e| format!("snappy block: {e}"))?;
    spend(budget, len)?;
    snap::raw::Decoder::new().decompress_vec(block).map_err(|e| format!("snappy block: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_name_round_trips_and_splits_at_the_last_separator() {
        let id = "AAAAAAAAAAAAAAAAAAAAAA";
        let name = stream_name("orders-topic-id-x", id).unwrap();
        assert_eq!(name, format!("orders-topic-id-x-topic-id-{id}"));
        let parsed = parse_stream_name(&name).unwrap();
        assert_eq!(parsed.topic, "orders-topic-id-x");
        assert_eq!(parsed.topic_id, id);
    }

    #[test]
    fn stream_name_rejects_bad_parts() {
        let id = "AAAAAAAAAAAAAAAAAAAAAA";
        assert!(stream_name("", id).is_err());
        assert!(stream_name("a/b", id).is_err());
        assert!(stream_name("t", "short").is_err());
        assert!(stream_name("t", "AAAA-topic-id-AAAAAAAA").is_err());
        assert!(parse_stream_name("no-separator").is_err());
        assert!(parse_stream_name("-topic-id-AAAAAAAAAAAAAAAAAAAAAA").is_err());
    }

    // spec-rule: 1b06759306 [Writer] A Kafka entry payload MUST be exactly the bytes of one or more comple…
    #[test]
    fn empty_payload_is_refused() {
        let err = count_records(&[]).unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");
    }
}
