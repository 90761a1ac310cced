//! The JSON event format (`application/cloudevents+json`) and the JSON batch format
//! (`application/cloudevents-batch+json`).
//!
//! Members are read in document order and each attribute keeps the string it arrived with
//! (an Integer keeps its number text). `data` with a JSON content type (or none) keeps its
//! exact JSON text, so writing an event back reproduces it byte for byte when the input was
//! compact JSON with the data member last, which is what the encoder writes.

use std::fmt;

use base64::Engine as _;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::error::{CeError, Result};
use crate::event::{
    AttrType, Attribute, CloudEvent, Data, core_type, is_canonical_int32, is_json_media_type,
};

/// The media type of one event in the JSON format.
pub const MEDIA_TYPE: &str = "application/cloudevents+json";
/// The media type of a JSON batch.
pub const BATCH_MEDIA_TYPE: &str = "application/cloudevents-batch+json";

const EVENT: &str = "JSON event";
const BATCH: &str = "JSON batch";

/// An object's members in document order, each value as its raw JSON text.
struct Members(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members;
            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, Box<RawValue>>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

/// Decodes one event in the JSON format.
pub fn decode_event(body: &[u8]) -> Result<CloudEvent> {
    let members: Members = serde_json::from_slice(body)
        .map_err(|error| CeError::malformed(EVENT, format!("not a JSON object: {error}")))?;
    event_from_members(members)
}

/// Decodes a JSON batch: an array of events, all valid (`[]` is a valid batch). One invalid
/// element rejects the whole batch; the error says which element.
pub fn decode_batch(body: &[u8]) -> Result<Vec<CloudEvent>> {
    let elements: Vec<Box<RawValue>> = serde_json::from_slice(body)
        .map_err(|error| CeError::malformed(BATCH, format!("not a JSON array: {error}")))?;
    elements
        .iter()
        .enumerate()
        .map(|(index, element)| {
            if !element.get().starts_with('{') {
                return Err(CeError::malformed(BATCH, format!("element {index} is not a JSON object")));
            }
            let members: Members = serde_json::from_str(element.get())
                .map_err(|error| CeError::malformed(BATCH, format!("element {index}: {error}")))?;
            event_from_members(members).map_err(|error| match error {
                CeError::InvalidAttribute { attribute, reason } => CeError::InvalidAttribute {
                    attribute,
                    reason: format!("event {index} of the batch: {reason}"),
                },
                other => other,
            })
        })
        .collect()
}

fn event_from_members(members: Members) -> Result<CloudEvent> {
    let mut attributes = Vec::new();
    let mut data: Option<Box<RawValue>> = None;
    let mut data_base64: Option<Box<RawValue>> = None;
    for (name, raw) in members.0 {
        match name.as_str() {
            "data" | "data_base64" => {
                let slot = if name == "data" { &mut data } else { &mut data_base64 };
                if slot.replace(raw).is_some() {
                    return Err(CeError::attribute(name, "the member appears more than once"));
                }
            }
            _ => {
                crate::event::check_name(&name)?;
                if let Some(attribute) = attribute_from_json(name, &raw)? {
                    attributes.push(attribute);
                }
            }
        }
    }
    // `"data_base64": null` is an unset member; `"data": null` is an explicit null payload.
    let data_base64 = data_base64.filter(|raw| raw.get() != "null");
    let content_type = attributes.iter().find(|a| a.name == "datacontenttype").map(|a| a.value.clone());
    // `data` is read according to the content type, so the content type is checked first.
    if let Some(content_type) = &content_type {
        crate::event::check_content_type(content_type)?;
    }
    let data = match (data, data_base64) {
        (Some(_), Some(_)) => {
            return Err(CeError::attribute("data", "an event must not have both `data` and `data_base64`"));
        }
        (None, None) => None,
        (None, Some(encoded)) => {
            let text: String = serde_json::from_str(encoded.get())
                .map_err(|_| CeError::attribute("data_base64", "must be a JSON string"))?;
            let bytes = base64::engine::general_purpose::STANDARD.decode(&text).map_err(|error| {
                CeError::attribute("data_base64", format!("is not valid Base64: {error}"))
            })?;
            Some(Data::Binary(bytes))
        }
        (Some(value), None) => match content_type.as_deref() {
            None => Some(Data::Json(value.get().to_owned())),
            Some(content_type) if is_json_media_type(content_type) => {
                Some(Data::Json(value.get().to_owned()))
            }
            Some(content_type) => {
                let text: String = serde_json::from_str(value.get()).map_err(|_| {
                    CeError::attribute(
                        "data",
                        format!("must be a JSON string for content type {content_type:?}"),
                    )
                })?;
                Some(Data::Text(text))
            }
        },
    };
    CloudEvent::new(attributes, data)
}

/// Maps one JSON member to an attribute; `null` means unset (`None`).
fn attribute_from_json(name: String, raw: &RawValue) -> Result<Option<Attribute>> {
    let text = raw.get();
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|error| CeError::attribute(&name, format!("unreadable JSON value: {error}")))?;
    let attribute = match (core_type(&name), value) {
        (_, serde_json::Value::Null) => return Ok(None),
        (Some(kind), serde_json::Value::String(value)) => Attribute::new(name, value, kind),
        (Some(_), other) => {
            return Err(CeError::attribute(
                name,
                format!("must be a JSON string, not {}", json_kind(&other)),
            ));
        }
        (None, serde_json::Value::String(value)) => Attribute::new(name, value, AttrType::String),
        (None, serde_json::Value::Bool(value)) => Attribute::new(name, value.to_string(), AttrType::Boolean),
        (None, serde_json::Value::Number(_)) if is_canonical_int32(text) => {
            Attribute::new(name, text, AttrType::Integer)
        }
        (None, other) => {
            return Err(CeError::attribute(
                name,
                format!(
                    "an extension must be a string, boolean or 32-bit integer, not {}",
                    json_kind(&other)
                ),
            ));
        }
    };
    Ok(Some(attribute))
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a non-integer or out-of-range number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Encodes an event in the JSON format: compact, attributes in their order, data last.
///
/// Data is written as `data` (its JSON text) when it is JSON and the content type declares
/// JSON or is absent, as a `data` string when it is text of a non-JSON content type, and
/// otherwise as `data_base64`.
pub fn encode_event(event: &CloudEvent) -> String {
    let mut out = String::from("{");
    for (index, attribute) in event.attributes().iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        push_json_string(&mut out, &attribute.name);
        out.push(':');
        match attribute.kind {
            AttrType::Boolean | AttrType::Integer => out.push_str(&attribute.value),
            _ => push_json_string(&mut out, &attribute.value),
        }
    }
    if let Some(data) = event.data() {
        if !event.attributes().is_empty() {
            out.push(',');
        }
        let json_content = event.get("datacontenttype").is_none_or(is_json_media_type);
        match data {
            Data::Json(text) if json_content => {
                out.push_str("\"data\":");
                out.push_str(text);
            }
            Data::Text(text) if !json_content => {
                out.push_str("\"data\":");
                push_json_string(&mut out, text);
            }
            other => {
                out.push_str("\"data_base64\":");
                push_json_string(
                    &mut out,
                    &base64::engine::general_purpose::STANDARD.encode(other.as_bytes()),
                );
            }
        }
    }
    out.push('}');
    out
}

/// Encodes events as a JSON batch.
pub fn encode_batch(events: &[CloudEvent]) -> String {
    let encoded: Vec<String> = events.iter().map(encode_event).collect();
    format!("[{}]", encoded.join(","))
}

fn push_json_string(out: &mut String, text: &str) {
    // Serializing a &str cannot fail.
    out.push_str(&serde_json::to_string(text).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(body: &str) -> CeError {
        match decode_event(body.as_bytes()) {
            Err(error) => error,
            Ok(event) => panic!("accepted {event:?}"),
        }
    }

    const MINIMAL: &str = r#""specversion":"1.0","id":"1","type":"t","source":"/s""#;

    #[test]
    fn compact_events_round_trip_byte_for_byte() {
        for body in [
            format!("{{{MINIMAL}}}"),
            format!(r#"{{{MINIMAL},"extinteger":-10,"extboolean":false,"exts":"café \"q\""}}"#),
            format!(r#"{{{MINIMAL},"data":{{ "keep" : [1, 2.50, "x"] }}}}"#),
            format!(r#"{{{MINIMAL},"data":"I'm just a string"}}"#),
            format!(r#"{{{MINIMAL},"data":null}}"#),
            format!(r#"{{{MINIMAL},"datacontenttype":"application/xml","data":"<a>é</a>"}}"#),
            format!(r#"{{{MINIMAL},"datacontenttype":"application/octet-stream","data_base64":"AAH/"}}"#),
            format!(r#"{{{MINIMAL},"time":"2018-04-05T18:31:00.10+01:00"}}"#),
        ] {
            let event = decode_event(body.as_bytes()).unwrap();
            assert_eq!(encode_event(&event), body);
        }
    }

    #[test]
    fn escapes_are_decoded_to_the_attribute_string() {
        let event = decode_event(format!(r#"{{{MINIMAL},"ext":"caf\u00e9"}}"#).as_bytes()).unwrap();
        assert_eq!(event.get("ext"), Some("café"));
    }

    #[test]
    fn json_data_keeps_its_exact_text_and_a_string_is_not_parsed_again() {
        let event = decode_event(format!(r#"{{{MINIMAL},"data": "{{\"a\":1}}" }}"#).as_bytes()).unwrap();
        assert_eq!(event.data(), Some(&Data::Json(r#""{\"a\":1}""#.into())));
        let event = decode_event(format!(r#"{{{MINIMAL},"data":1.50}}"#).as_bytes()).unwrap();
        assert_eq!(event.data(), Some(&Data::Json("1.50".into())));
    }

    #[test]
    fn null_attribute_is_unset_and_null_data_base64_is_absent() {
        let event =
            decode_event(format!(r#"{{{MINIMAL},"subject":null,"data_base64":null}}"#).as_bytes()).unwrap();
        assert_eq!(event.get("subject"), None);
        assert_eq!(event.data(), None);
    }

    #[test]
    fn both_data_and_data_base64_is_refused() {
        let error = rejected(&format!(r#"{{{MINIMAL},"data":"text","data_base64":"eyAieHl6IjogMTIzIH0="}}"#));
        assert_eq!(error.attribute_name(), Some("data"));
    }

    #[test]
    fn invalid_data_base64_is_refused() {
        assert_eq!(
            rejected(&format!(r#"{{{MINIMAL},"data_base64":"!!"}}"#)).attribute_name(),
            Some("data_base64")
        );
        assert_eq!(
            rejected(&format!(r#"{{{MINIMAL},"data_base64":5}}"#)).attribute_name(),
            Some("data_base64")
        );
    }

    #[test]
    fn context_attribute_of_the_wrong_json_type_is_refused() {
        for (member, name) in [
            (r#""id":25"#, "id"),
            (r#""id":{"xyz":"abc"}"#, "id"),
            (r#""time":1522949460"#, "time"),
            (r#""ext":1.5"#, "ext"),
            (r#""ext":1.0"#, "ext"),
            (r#""ext":2147483648"#, "ext"),
            (r#""ext":[1]"#, "ext"),
            (r#""ext":{}"#, "ext"),
        ] {
            let body = format!(r#"{{"specversion":"1.0","source":"/s","type":"t","id":"x",{member}}}"#)
                .replacen(r#""id":"x","id""#, r#""id""#, 1);
            assert_eq!(rejected(&body).attribute_name(), Some(name), "{body}");
        }
    }

    #[test]
    fn non_json_data_must_be_a_string() {
        let body = format!(r#"{{{MINIMAL},"datacontenttype":"text/plain","data":{{}}}}"#);
        assert_eq!(rejected(&body).attribute_name(), Some("data"));
    }

    #[test]
    fn invalid_datacontenttype_is_reported_on_datacontenttype_not_on_data() {
        // Object data with a bad content type used to be refused as "data must be a JSON
        // string", hiding the real mistake.
        for (content_type, data) in [
            ("xyz", r#""data":{"a":1}"#),
            ("xyz", r#""data":"text""#),
            ("application/json;", r#""data":{}"#),
            ("text plain", r#""data":[1]"#),
            ("xyz", r#""data_base64":"AAH/""#),
        ] {
            let body = format!(r#"{{{MINIMAL},"datacontenttype":"{content_type}",{data}}}"#);
            let error = rejected(&body);
            assert_eq!(error.attribute_name(), Some("datacontenttype"), "{body}: {error}");
            assert!(error.to_string().contains(&format!("{content_type:?}")), "{body}: {error}");
            let batch = format!("[{body}]");
            let error = decode_batch(batch.as_bytes()).unwrap_err();
            assert_eq!(error.attribute_name(), Some("datacontenttype"), "{batch}: {error}");
        }
    }

    #[test]
    fn duplicate_member_is_refused() {
        assert_eq!(rejected(&format!(r#"{{{MINIMAL},"id":"2"}}"#)).attribute_name(), Some("id"));
        assert_eq!(rejected(&format!(r#"{{{MINIMAL},"data":1,"data":2}}"#)).attribute_name(), Some("data"));
    }

    #[test]
    fn not_an_object_is_malformed_invalid_input() {
        for body in ["[]", "\"x\"", "{", ""] {
            let error = rejected(body);
            assert!(matches!(error, CeError::Malformed { .. }), "{body}: {error}");
            assert_eq!(error.class(), lakestream_format::ErrorClass::InvalidInput);
        }
    }

    #[test]
    fn batches_round_trip_and_fail_as_a_whole() {
        let body = format!(r#"[{{{MINIMAL}}},{{{MINIMAL},"data":[1]}}]"#);
        let events = decode_batch(body.as_bytes()).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(encode_batch(&events), body);
        assert_eq!(decode_batch(b"[]").unwrap(), vec![]);
        assert_eq!(encode_batch(&[]), "[]");
        let bad = format!(r#"[{{{MINIMAL}}},{{"specversion":"1.0","type":"t","source":"/s"}}]"#);
        assert_eq!(decode_batch(bad.as_bytes()).unwrap_err().attribute_name(), Some("id"));
        assert!(matches!(decode_batch(b"[1]").unwrap_err(), CeError::Malformed { .. }));
        assert!(matches!(decode_batch(b"{}").unwrap_err(), CeError::Malformed { .. }));
    }
}
