//! The Kafka binding's binary-mode record layout: how Lakestream stores an event (reference
//! §5; seed "An event is an ordinary stream record").
//!
//! | record part | content |
//! |---|---|
//! | key | `partitionkey`, else `subject`, else null |
//! | timestamp | `time` in milliseconds, else the caller's clock |
//! | header `content-type` | `datacontenttype` |
//! | header `ce_{name}` | every other attribute, in attribute order, UTF-8, not percent-encoded |
//! | header `lakestream_ce_types` | extension types and data form (below), when there is any |
//! | value | the data bytes; null when the event has no data, empty for zero-length data |
//!
//! **`lakestream_ce_types`.** Header values are strings, so binary mode loses extension types;
//! we keep them for structured-JSON and protobuf ingest in a header of our own:
//! comma-separated `name:type` pairs for each extension that is not a String (`type` as in
//! [`AttrType::name`]), plus `data:json|text|binary` for the form the data arrived in
//! (`data` can never be an attribute name). Records without it read back with String
//! extensions and data classified by its content type.
//!
//! An entry is ONE magic-2 record batch (base offset 0, uncompressed, CRC-32C) with one record
//! per event, which `lakestream_format::kafka::count_records` accepts; batches are written and
//! read with the format's record-batch view (`lakestream_format::kafka::RecordBatch`).

use lakestream_format::FormatError;
use lakestream_format::kafka::{self, PayloadBatch, RecordBatchBuilder};

use crate::error::{CeError, Result};
use crate::event::{AttrType, Attribute, CloudEvent, Data, core_type};
use crate::http::body_to_data;
use crate::time::parse_rfc3339;

/// The prefix of an attribute header.
pub const HEADER_PREFIX: &str = "ce_";
/// The header carrying `datacontenttype`.
pub const CONTENT_TYPE_HEADER: &str = "content-type";
/// Our header recording extension types and the data form.
pub const TYPES_HEADER: &str = "lakestream_ce_types";

const BATCH: &str = "Kafka record batch";

/// One Kafka record, as the binding lays out an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The record key (null when `None`).
    pub key: Option<Vec<u8>>,
    /// The record value (null when `None`).
    pub value: Option<Vec<u8>>,
    /// The headers in order; Kafka header values may be null.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// The record timestamp in milliseconds since the Unix epoch (CreateTime).
    pub timestamp_ms: i64,
}

/// Lays an event out as a record. `default_timestamp_ms` (from the caller's clock) is used
/// when the event has no `time`.
pub fn event_to_record(event: &CloudEvent, default_timestamp_ms: i64) -> Record {
    let mut headers = Vec::with_capacity(event.attributes().len() + 1);
    let mut types = Vec::new();
    for attribute in event.attributes() {
        let name = if attribute.name == "datacontenttype" {
            CONTENT_TYPE_HEADER.to_owned()
        } else {
            format!("{HEADER_PREFIX}{}", attribute.name)
        };
        headers.push((name, Some(attribute.value.clone().into_bytes())));
        if core_type(&attribute.name).is_none() && attribute.kind != AttrType::String {
            types.push(format!("{}:{}", attribute.name, attribute.kind.name()));
        }
    }
    if let Some(data) = event.data() {
        types.push(format!("data:{}", data.form_name()));
    }
    if !types.is_empty() {
        headers.push((TYPES_HEADER.to_owned(), Some(types.join(",").into_bytes())));
    }
    let key = event.get("partitionkey").or_else(|| event.get("subject")).map(|key| key.as_bytes().to_vec());
    let timestamp_ms = event
        .get("time")
        .and_then(parse_rfc3339)
        .map(|(seconds, nanos)| seconds.saturating_mul(1000).saturating_add(i64::from(nanos / 1_000_000)))
        .unwrap_or(default_timestamp_ms);
    Record { key, value: event.data().map(|data| data.as_bytes().to_vec()), headers, timestamp_ms }
}

/// Reads an event back from a record's headers and value. The key and timestamp are derived
/// from attributes, so they are not read back (the key mapper must not modify the event).
pub fn record_to_event(record: &Record) -> Result<CloudEvent> {
    let mut types: Vec<(String, String)> = Vec::new();
    if let Some((_, Some(value))) = record.headers.iter().find(|(name, _)| name == TYPES_HEADER) {
        let text = std::str::from_utf8(value)
            .map_err(|_| CeError::corrupt(BATCH, format!("{TYPES_HEADER} is not UTF-8")))?;
        for pair in text.split(',').filter(|pair| !pair.is_empty()) {
            let (name, kind) = pair.split_once(':').ok_or_else(|| {
                CeError::corrupt(BATCH, format!("{TYPES_HEADER} entry {pair:?} is not name:type"))
            })?;
            types.push((name.to_owned(), kind.to_owned()));
        }
    }
    let type_of = |name: &str| types.iter().find(|(typed, _)| typed == name).map(|(_, kind)| kind.as_str());
    let mut attributes = Vec::new();
    for (header, value) in &record.headers {
        let name = if header == CONTENT_TYPE_HEADER {
            "datacontenttype"
        } else if let Some(name) = header.strip_prefix(HEADER_PREFIX) {
            if name == "datacontenttype" {
                return Err(CeError::attribute(
                    name,
                    "binary mode carries it in content-type; a ce_datacontenttype header must not be present",
                ));
            }
            name
        } else {
            continue;
        };
        let value = value.as_deref().ok_or_else(|| CeError::attribute(name, "the header value is null"))?;
        let value = String::from_utf8(value.to_vec())
            .map_err(|_| CeError::attribute(name, "the header value is not UTF-8"))?;
        let kind = match (core_type(name), type_of(name)) {
            (Some(kind), _) => kind,
            (None, Some(kind)) => AttrType::from_name(kind).ok_or_else(|| {
                CeError::corrupt(BATCH, format!("{TYPES_HEADER} names unknown type {kind:?}"))
            })?,
            (None, None) => AttrType::String,
        };
        attributes.push(Attribute::new(name, value, kind));
    }
    let content_type = attributes.iter().find(|a| a.name == "datacontenttype").map(|a| a.value.as_str());
    let data = match (&record.value, type_of("data")) {
        (None, _) => None,
        (Some(value), Some("binary")) => Some(Data::Binary(value.clone())),
        (Some(value), Some(form @ ("json" | "text"))) => {
            let text = String::from_utf8(value.clone())
                .map_err(|_| CeError::attribute("data", format!("{form} data is not UTF-8")))?;
            Some(if form == "json" { Data::Json(text) } else { Data::Text(text) })
        }
        (Some(_), Some(other)) => {
            return Err(CeError::corrupt(BATCH, format!("{TYPES_HEADER} names unknown data form {other:?}")));
        }
        (Some(value), None) if value.is_empty() => Some(Data::Binary(Vec::new())),
        (Some(value), None) => body_to_data(content_type, value),
    };
    CloudEvent::new(attributes, data)
}

/// Encodes events as one Kafka record batch, one record each: our stored entry.
pub fn encode_events(events: &[CloudEvent], default_timestamp_ms: i64) -> Result<Vec<u8>> {
    let records: Vec<Record> =
        events.iter().map(|event| event_to_record(event, default_timestamp_ms)).collect();
    encode_record_batch(&records)
}

/// Decodes a stored entry back into events, after validating it with
/// `lakestream_format::kafka::count_records`.
pub fn decode_events(payload: &[u8]) -> Result<Vec<CloudEvent>> {
    decode_record_batches(payload)?.iter().map(record_to_event).collect()
}

/// Builds one uncompressed magic-2 record batch with base offset 0 (with
/// [`lakestream_format::kafka::RecordBatchBuilder`]).
pub fn encode_record_batch(records: &[Record]) -> Result<Vec<u8>> {
    let mut batch = RecordBatchBuilder::new();
    for record in records {
        batch.push(
            record.timestamp_ms,
            record.key.as_deref(),
            record.value.as_deref(),
            record.headers.iter().map(|(name, value)| (name.as_str(), value.as_deref())),
        );
    }
    batch.finish().map_err(|error| CeError::malformed(BATCH, error.to_string()))
}

/// Decodes the records of a payload of uncompressed magic-2 batches, after validating it with
/// the binding's payload rules (`lakestream_format::kafka::payload_batches`).
pub fn decode_record_batches(payload: &[u8]) -> Result<Vec<Record>> {
    let corrupt = |error: FormatError| CeError::corrupt(BATCH, error.to_string());
    let mut records = Vec::new();
    let mut start = 0;
    for unit in kafka::payload_batches(payload).map_err(corrupt)? {
        let PayloadBatch::RecordBatch(batch) = unit else {
            return Err(CeError::corrupt(
                BATCH,
                format!("the batch at byte {start} is not an uncompressed magic-2 batch"),
            ));
        };
        if batch.header().compression() != 0 {
            return Err(CeError::corrupt(
                BATCH,
                format!("the batch at byte {start} is compressed; stored events are not"),
            ));
        }
        for record in batch.records(0).map_err(corrupt)? {
            records.push(Record {
                key: record.key,
                value: record.value,
                headers: record.headers.into_iter().map(|header| (header.key, header.value)).collect(),
                // Always set in a magic-2 batch.
                timestamp_ms: record.timestamp_ms.unwrap_or_default(),
            });
        }
        start += unit.bytes().len();
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json;

    fn event(body: &str) -> CloudEvent {
        json::decode_event(body.as_bytes()).unwrap()
    }

    const TYPED: &str = r#"{"specversion":"1.0","id":"allExtensionTypes","source":"https://cloudevents.io","type":"io.cloudevents.test","extinteger":10,"extboolean":true,"extstring":"text","datacontenttype":"application/json","time":"2018-04-05T18:31:00.5+01:00","data":{"a": [1, 2]}}"#;

    #[test]
    fn batch_is_valid_kafka_and_counts_the_events() {
        let events = vec![event(TYPED), event(r#"{"specversion":"1.0","id":"2","source":"/s","type":"t"}"#)];
        let payload = encode_events(&events, 1_700_000_000_000).unwrap();
        assert_eq!(lakestream_format::kafka::count_records(&payload), Ok(2));
        assert_eq!(&payload[..8], &[0; 8], "base offset 0");
        assert_eq!(payload[16], 2, "magic 2");
        assert_eq!(decode_events(&payload).unwrap(), events);
    }

    #[test]
    fn record_layout_follows_the_binding() {
        let record = event_to_record(&event(TYPED), 0);
        let names: Vec<&str> = record.headers.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [
                "ce_specversion",
                "ce_id",
                "ce_source",
                "ce_type",
                "ce_extinteger",
                "ce_extboolean",
                "ce_extstring",
                "content-type",
                "ce_time",
                TYPES_HEADER
            ]
        );
        assert_eq!(
            record.headers[9].1.as_deref(),
            Some(&b"extinteger:integer,extboolean:boolean,data:json"[..])
        );
        assert_eq!(record.value.as_deref(), Some(&br#"{"a": [1, 2]}"#[..]));
        assert_eq!(record.timestamp_ms, 1_522_949_460_500, "timestamp from time, in ms");
        assert_eq!(record.key, None);
    }

    #[test]
    fn key_is_partitionkey_else_subject_else_null() {
        let both = event(
            r#"{"specversion":"1.0","id":"1","source":"/s","type":"t","subject":"sub","partitionkey":"pk"}"#,
        );
        assert_eq!(event_to_record(&both, 0).key.as_deref(), Some(&b"pk"[..]));
        let subject = event(r#"{"specversion":"1.0","id":"1","source":"/s","type":"t","subject":"sub"}"#);
        assert_eq!(event_to_record(&subject, 0).key.as_deref(), Some(&b"sub"[..]));
        assert_eq!(event_to_record(&subject, 42).timestamp_ms, 42, "no time: the caller's clock");
        // The key mapper does not modify the event: partitionkey stays a header.
        assert!(event_to_record(&both, 0).headers.iter().any(|(name, _)| name == "ce_partitionkey"));
    }

    #[test]
    fn no_data_is_a_null_value_and_zero_length_data_an_empty_one() {
        let none = event(r#"{"specversion":"1.0","id":"1","source":"/s","type":"t"}"#);
        assert_eq!(event_to_record(&none, 0).value, None);
        let empty = CloudEvent::new(none.attributes().to_vec(), Some(Data::Binary(vec![]))).unwrap();
        assert_eq!(event_to_record(&empty, 0).value, Some(vec![]));
        let payload = encode_events(&[none.clone(), empty.clone()], 0).unwrap();
        assert_eq!(decode_events(&payload).unwrap(), vec![none, empty]);
    }

    #[test]
    fn batch_round_trips_byte_for_byte() {
        let payload = encode_events(&[event(TYPED)], 5).unwrap();
        let again = encode_events(&decode_events(&payload).unwrap(), 5).unwrap();
        assert_eq!(again, payload);
    }

    #[test]
    fn records_from_plain_producers_read_with_string_extensions() {
        let record = Record {
            key: Some(b"mykey".to_vec()),
            value: Some(b"avro bytes".to_vec()),
            headers: [
                ("ce_specversion", "1.0"),
                ("ce_type", "com.example.someevent"),
                ("ce_source", "/mycontext/subcontext"),
                ("ce_id", "1234-1234-1234"),
                ("ce_time", "2018-04-05T03:56:24Z"),
                ("ce_count", "5"),
                ("content-type", "application/avro"),
            ]
            .into_iter()
            .map(|(n, v)| (n.to_owned(), Some(v.as_bytes().to_vec())))
            .collect(),
            timestamp_ms: 0,
        };
        let event = decode_events(&encode_record_batch(&[record]).unwrap()).unwrap().remove(0);
        assert_eq!(event.attribute("ce_count".strip_prefix("ce_").unwrap()).unwrap().kind, AttrType::String);
        assert_eq!(event.data(), Some(&Data::Binary(b"avro bytes".to_vec())));
        assert_eq!(event.get("datacontenttype"), Some("application/avro"));
    }

    #[test]
    fn ce_datacontenttype_header_is_refused() {
        let mut record = event_to_record(&event(TYPED), 0);
        record.headers.push(("ce_datacontenttype".into(), Some(b"text/plain".to_vec())));
        assert_eq!(record_to_event(&record).unwrap_err().attribute_name(), Some("datacontenttype"));
    }

    #[test]
    fn corrupted_batch_is_corrupt_data() {
        let mut payload = encode_events(&[event(TYPED)], 0).unwrap();
        let last = payload.len() - 1;
        payload[last] ^= 1;
        let error = decode_events(&payload).unwrap_err();
        assert_eq!(error.class(), lakestream_format::ErrorClass::CorruptData, "{error}");
        assert!(encode_record_batch(&[]).is_err());
    }

    #[test]
    fn compressed_batches_are_not_stored_events() {
        // A batch labelled gzip (its CRC-32C made right again) passes the binding's checks,
        // which do not decompress magic-2 batches, but is not a stored entry of events.
        let mut payload = encode_events(&[event(TYPED)], 0).unwrap();
        payload[22] |= 0x01;
        let crc = lakestream_format::kafka::record_batch_crc(&payload);
        payload[17..21].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(lakestream_format::kafka::count_records(&payload), Ok(1));
        let error = decode_events(&payload).unwrap_err();
        assert_eq!(error.class(), lakestream_format::ErrorClass::CorruptData, "{error}");
        assert!(error.to_string().contains("compressed"), "{error}");
    }
}
