//! The protobuf event format `io.cloudevents.v1` (`formats/cloudevents.proto` of spec tag
//! `ce@v1.0.2`, which is the wire authority), with hand-written prost messages.
//!
//! Reading: the four required fields come first (`specversion`, `id`, `source`, `type`), then
//! the `attributes` map in name order (the map keeps no order). `time` is rendered in
//! canonical UTC (a `Timestamp` cannot keep an offset or trailing zeros), `ce_bytes` as
//! standard Base64, `ce_integer` in decimal. `text_data` whose content type declares JSON is
//! [`Data::Json`]. `proto_data` is refused: its type URL has no place in a Kafka record.

use std::collections::BTreeMap;

use base64::Engine as _;
use prost::Message as _;

use crate::error::{CeError, Result};
use crate::event::{AttrType, Attribute, CloudEvent, Data, check_name, is_json_media_type};
use crate::time::{format_utc, parse_rfc3339};

/// The media type of one protobuf event.
pub const MEDIA_TYPE: &str = "application/cloudevents+protobuf";
/// The media type of a protobuf batch.
pub const BATCH_MEDIA_TYPE: &str = "application/cloudevents-batch+protobuf";

const STRUCTURE: &str = "protobuf CloudEvent";

/// `io.cloudevents.v1.CloudEvent`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoCloudEvent {
    /// Field 1, `id`.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Field 2, `source`.
    #[prost(string, tag = "2")]
    pub source: String,
    /// Field 3, `spec_version`.
    #[prost(string, tag = "3")]
    pub spec_version: String,
    /// Field 4, `type`.
    #[prost(string, tag = "4")]
    pub r#type: String,
    /// Field 5: optional attributes and extensions. A BTreeMap, so encoding is deterministic.
    #[prost(btree_map = "string, message", tag = "5")]
    pub attributes: BTreeMap<String, ProtoAttributeValue>,
    /// The `data` oneof, fields 6–8.
    #[prost(oneof = "ProtoData", tags = "6, 7, 8")]
    pub data: Option<ProtoData>,
}

/// The `data` oneof of `CloudEvent`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ProtoData {
    /// Field 6, `binary_data`.
    #[prost(bytes, tag = "6")]
    BinaryData(Vec<u8>),
    /// Field 7, `text_data`.
    #[prost(string, tag = "7")]
    TextData(String),
    /// Field 8, `proto_data` (`google.protobuf.Any`).
    #[prost(message, tag = "8")]
    ProtoData(ProtoAny),
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoAny {
    /// Field 1.
    #[prost(string, tag = "1")]
    pub type_url: String,
    /// Field 2.
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// `google.protobuf.Timestamp`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoTimestamp {
    /// Field 1, seconds since the Unix epoch.
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    /// Field 2, 0–999,999,999.
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

/// `CloudEvent.CloudEventAttributeValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoAttributeValue {
    /// The `attr` oneof, fields 1–7; unset is invalid.
    #[prost(oneof = "ProtoAttr", tags = "1, 2, 3, 4, 5, 6, 7")]
    pub attr: Option<ProtoAttr>,
}

/// The `attr` oneof of `CloudEventAttributeValue`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ProtoAttr {
    /// Field 1.
    #[prost(bool, tag = "1")]
    CeBoolean(bool),
    /// Field 2.
    #[prost(int32, tag = "2")]
    CeInteger(i32),
    /// Field 3.
    #[prost(string, tag = "3")]
    CeString(String),
    /// Field 4.
    #[prost(bytes, tag = "4")]
    CeBytes(Vec<u8>),
    /// Field 5.
    #[prost(string, tag = "5")]
    CeUri(String),
    /// Field 6.
    #[prost(string, tag = "6")]
    CeUriRef(String),
    /// Field 7.
    #[prost(message, tag = "7")]
    CeTimestamp(ProtoTimestamp),
}

/// `io.cloudevents.v1.CloudEventBatch`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoCloudEventBatch {
    /// Field 1.
    #[prost(message, repeated, tag = "1")]
    pub events: Vec<ProtoCloudEvent>,
}

/// Converts a protobuf message to a validated event.
pub fn from_proto(message: &ProtoCloudEvent) -> Result<CloudEvent> {
    let mut attributes = vec![
        Attribute::string("specversion", &message.spec_version),
        Attribute::string("id", &message.id),
        Attribute::string("source", &message.source),
        Attribute::string("type", &message.r#type),
    ];
    for (name, value) in &message.attributes {
        check_name(name)?;
        let (value, kind) = match &value.attr {
            None => return Err(CeError::attribute(name, "the attribute has no value set")),
            Some(ProtoAttr::CeBoolean(value)) => (value.to_string(), AttrType::Boolean),
            Some(ProtoAttr::CeInteger(value)) => (value.to_string(), AttrType::Integer),
            Some(ProtoAttr::CeString(value)) => (value.clone(), AttrType::String),
            Some(ProtoAttr::CeBytes(value)) => {
                (base64::engine::general_purpose::STANDARD.encode(value), AttrType::Binary)
            }
            Some(ProtoAttr::CeUri(value)) => (value.clone(), AttrType::Uri),
            Some(ProtoAttr::CeUriRef(value)) => (value.clone(), AttrType::UriRef),
            Some(ProtoAttr::CeTimestamp(timestamp)) => {
                let rendered = u32::try_from(timestamp.nanos)
                    .ok()
                    .and_then(|nanos| format_utc(timestamp.seconds, nanos))
                    .ok_or_else(|| CeError::attribute(name, "the Timestamp is out of range"))?;
                (rendered, AttrType::Timestamp)
            }
        };
        attributes.push(Attribute::new(name, value, kind));
    }
    let content_type = message.attributes.get("datacontenttype").and_then(|value| match &value.attr {
        Some(ProtoAttr::CeString(content_type)) => Some(content_type.as_str()),
        _ => None,
    });
    let data = match &message.data {
        None => None,
        Some(ProtoData::BinaryData(bytes)) => Some(Data::Binary(bytes.clone())),
        Some(ProtoData::TextData(text))
            if content_type.is_some_and(is_json_media_type)
                && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() =>
        {
            Some(Data::Json(text.clone()))
        }
        Some(ProtoData::TextData(text)) => Some(Data::Text(text.clone())),
        Some(ProtoData::ProtoData(_)) => {
            return Err(CeError::attribute(
                "data",
                "proto_data is not accepted: its type URL cannot be stored",
            ));
        }
    };
    CloudEvent::new(attributes, data)
}

/// Converts an event to its protobuf message.
pub fn to_proto(event: &CloudEvent) -> ProtoCloudEvent {
    let mut message = ProtoCloudEvent::default();
    for attribute in event.attributes() {
        let value = attribute.value.clone();
        match attribute.name.as_str() {
            "specversion" => message.spec_version = value,
            "id" => message.id = value,
            "source" => message.source = value,
            "type" => message.r#type = value,
            name => {
                // Values were validated against their type when the event was built, so the
                // parses below succeed; a String is the lossless fallback regardless.
                let attr = match attribute.kind {
                    AttrType::Boolean => ProtoAttr::CeBoolean(value == "true"),
                    AttrType::Integer => {
                        value.parse().map(ProtoAttr::CeInteger).unwrap_or(ProtoAttr::CeString(value))
                    }
                    AttrType::String => ProtoAttr::CeString(value),
                    AttrType::Binary => base64::engine::general_purpose::STANDARD
                        .decode(&value)
                        .map(ProtoAttr::CeBytes)
                        .unwrap_or(ProtoAttr::CeString(value)),
                    AttrType::Uri => ProtoAttr::CeUri(value),
                    AttrType::UriRef => ProtoAttr::CeUriRef(value),
                    AttrType::Timestamp => match parse_rfc3339(&value) {
                        Some((seconds, nanos)) => {
                            ProtoAttr::CeTimestamp(ProtoTimestamp { seconds, nanos: nanos as i32 })
                        }
                        None => ProtoAttr::CeString(value),
                    },
                };
                message.attributes.insert(name.to_owned(), ProtoAttributeValue { attr: Some(attr) });
            }
        }
    }
    message.data = event.data().map(|data| match data {
        Data::Json(text) | Data::Text(text) => ProtoData::TextData(text.clone()),
        Data::Binary(bytes) => ProtoData::BinaryData(bytes.clone()),
    });
    message
}

/// Decodes one protobuf `CloudEvent`.
pub fn decode_event(bytes: &[u8]) -> Result<CloudEvent> {
    let message =
        ProtoCloudEvent::decode(bytes).map_err(|error| CeError::malformed(STRUCTURE, error.to_string()))?;
    from_proto(&message)
}

/// Encodes one event as a protobuf `CloudEvent`.
pub fn encode_event(event: &CloudEvent) -> Vec<u8> {
    to_proto(event).encode_to_vec()
}

/// Decodes a `CloudEventBatch`; one invalid event rejects the batch.
pub fn decode_batch(bytes: &[u8]) -> Result<Vec<CloudEvent>> {
    let batch = ProtoCloudEventBatch::decode(bytes)
        .map_err(|error| CeError::malformed("protobuf CloudEventBatch", error.to_string()))?;
    batch.events.iter().map(from_proto).collect()
}

/// Encodes events as a `CloudEventBatch`.
pub fn encode_batch(events: &[CloudEvent]) -> Vec<u8> {
    ProtoCloudEventBatch { events: events.iter().map(to_proto).collect() }.encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(attr: ProtoAttr) -> ProtoAttributeValue {
        ProtoAttributeValue { attr: Some(attr) }
    }

    fn minimal() -> ProtoCloudEvent {
        ProtoCloudEvent {
            id: "minimal".into(),
            source: "https://cloudevents.io".into(),
            spec_version: "1.0".into(),
            r#type: "io.cloudevents.test".into(),
            ..Default::default()
        }
    }

    fn all_extension_types() -> ProtoCloudEvent {
        let mut message = minimal();
        message.id = "allExtensionTypes".into();
        for (name, attr) in [
            ("extinteger", ProtoAttr::CeInteger(10)),
            ("extboolean", ProtoAttr::CeBoolean(true)),
            ("extstring", ProtoAttr::CeString("text".into())),
            ("extbinary", ProtoAttr::CeBytes(vec![0x4d, 0x61])),
            ("exttimestamp", ProtoAttr::CeTimestamp(ProtoTimestamp { seconds: 1_680_275_520, nanos: 0 })),
            ("exturi", ProtoAttr::CeUri("https://cloudevents.io".into())),
            ("exturiref", ProtoAttr::CeUriRef("//authority/path".into())),
        ] {
            message.attributes.insert(name.into(), value(attr));
        }
        message
    }

    #[test]
    fn protobuf_round_trips_byte_for_byte() {
        let mut with_text = minimal();
        with_text
            .attributes
            .insert("datacontenttype".into(), value(ProtoAttr::CeString("application/json".into())));
        with_text.data = Some(ProtoData::TextData(r#"{"a": 1}"#.into()));
        let mut with_bytes = all_extension_types();
        with_bytes.data = Some(ProtoData::BinaryData(vec![0, 1, 255]));
        for message in [minimal(), all_extension_types(), with_text, with_bytes] {
            let bytes = message.encode_to_vec();
            let event = decode_event(&bytes).unwrap();
            assert_eq!(encode_event(&event), bytes);
        }
    }

    #[test]
    fn extension_types_map_to_canonical_strings() {
        let event = from_proto(&all_extension_types()).unwrap();
        let get = |name: &str| event.attribute(name).map(|a| (a.value.as_str(), a.kind));
        assert_eq!(get("extbinary"), Some(("TWE=", AttrType::Binary)));
        assert_eq!(get("exttimestamp"), Some(("2023-03-31T15:12:00Z", AttrType::Timestamp)));
        assert_eq!(get("extinteger"), Some(("10", AttrType::Integer)));
        assert_eq!(get("exturiref"), Some(("//authority/path", AttrType::UriRef)));
        // Required attributes first, then the map in name order.
        let names: Vec<&str> = event.attributes().iter().map(|a| a.name.as_str()).collect();
        assert_eq!(&names[..5], ["specversion", "id", "source", "type", "extbinary"]);
    }

    #[test]
    fn time_is_normalized_to_canonical_utc() {
        let json = crate::json::decode_event(
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","time":"2018-04-05T18:31:00.000+01:00"}"#,
        )
        .unwrap();
        let back = decode_event(&encode_event(&json)).unwrap();
        assert_eq!(back.get("time"), Some("2018-04-05T17:31:00Z"));
    }

    #[test]
    fn core_attribute_with_the_wrong_value_type_is_refused() {
        for (name, attr) in [
            ("datacontenttype", ProtoAttr::CeInteger(1)),
            ("dataschema", ProtoAttr::CeString("https://x".into())),
            ("subject", ProtoAttr::CeBoolean(true)),
            ("time", ProtoAttr::CeString("2018-04-05T17:31:00Z".into())),
        ] {
            let mut message = minimal();
            message.attributes.insert(name.into(), value(attr));
            assert_eq!(from_proto(&message).unwrap_err().attribute_name(), Some(name));
        }
    }

    #[test]
    fn attribute_without_value_and_proto_data_are_refused() {
        let mut message = minimal();
        message.attributes.insert("ext".into(), ProtoAttributeValue { attr: None });
        assert_eq!(from_proto(&message).unwrap_err().attribute_name(), Some("ext"));
        let mut message = minimal();
        message.data = Some(ProtoData::ProtoData(ProtoAny { type_url: "t".into(), value: vec![] }));
        assert_eq!(from_proto(&message).unwrap_err().attribute_name(), Some("data"));
        let mut message = minimal();
        message
            .attributes
            .insert("ext".into(), value(ProtoAttr::CeTimestamp(ProtoTimestamp { seconds: 0, nanos: -1 })));
        assert_eq!(from_proto(&message).unwrap_err().attribute_name(), Some("ext"));
    }

    #[test]
    fn batches_round_trip_and_garbage_is_malformed() {
        let bytes = ProtoCloudEventBatch { events: vec![minimal(), all_extension_types()] }.encode_to_vec();
        let events = decode_batch(&bytes).unwrap();
        assert_eq!(encode_batch(&events), bytes);
        assert_eq!(decode_batch(&[]).unwrap(), vec![]);
        assert!(matches!(decode_event(&[0xff, 0xff]).unwrap_err(), CeError::Malformed { .. }));
    }
}
