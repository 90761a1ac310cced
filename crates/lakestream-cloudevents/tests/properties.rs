//! Property tests: every format round-trips generated events, percent-encoding round-trips
//! any String value, and no decoder panics on arbitrary bytes (bad input is an error).

use lakestream_cloudevents::{AttrType, Attribute, CloudEvent, Data, http, json, kafka, proto};
use proptest::prelude::*;

/// A value a CloudEvents String may hold: no control characters, no noncharacters.
fn string_value() -> impl Strategy<Value = String> {
    any::<String>().prop_map(|text| {
        text.chars()
            .filter(|c| {
                let code = u32::from(*c);
                !(code <= 0x1F
                    || (0x7F..=0x9F).contains(&code)
                    || (0xFDD0..=0xFDEF).contains(&code)
                    || code & 0xFFFE == 0xFFFE)
            })
            .collect()
    })
}

fn extension() -> impl Strategy<Value = Attribute> {
    let name = "[a-z][a-z0-9]{0,7}".prop_filter("core or reserved name", |name| {
        !matches!(
            name.as_str(),
            "specversion"
                | "id"
                | "source"
                | "type"
                | "subject"
                | "time"
                | "dataschema"
                | "datacontenttype"
                | "data"
                | "partitionkey"
        )
    });
    let value = prop_oneof![
        string_value().prop_map(|v| (v, AttrType::String)),
        any::<i32>().prop_map(|v| (v.to_string(), AttrType::Integer)),
        any::<bool>().prop_map(|v| (v.to_string(), AttrType::Boolean)),
    ];
    (name, value).prop_map(|(name, (value, kind))| Attribute::new(name, value, kind))
}

fn event() -> impl Strategy<Value = CloudEvent> {
    let required = (
        string_value().prop_filter("non-empty", |v| !v.is_empty()),
        string_value().prop_filter("non-empty", |v| !v.is_empty()),
    );
    let time = proptest::option::of((0i64..253_402_300_799, 0u32..1_000_000_000));
    let data = proptest::option::of(prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(Data::Binary),
        Just(Data::Json(r#"{"a": [1, 2.50, "x"]}"#.to_owned())),
    ]);
    (required, proptest::collection::vec(extension(), 0..5), time, data).prop_filter_map(
        "duplicate extension names",
        |((id, source), extensions, time, data)| {
            let mut attributes = vec![
                Attribute::string("specversion", "1.0"),
                Attribute::string("id", id),
                Attribute::string("source", source),
                Attribute::string("type", "dev.lakestream.test"),
            ];
            if let Some((seconds, nanos)) = time {
                let rendered = lakestream_cloudevents::time::format_utc(seconds, nanos)?;
                attributes.push(Attribute::string("time", rendered));
            }
            attributes.extend(extensions);
            CloudEvent::new(attributes, data).ok()
        },
    )
}

proptest! {
    #[test]
    fn percent_encoding_round_trips(value in string_value()) {
        let encoded = http::encode_header_value(&value);
        prop_assert!(encoded.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b'"'));
        prop_assert_eq!(http::decode_header_value(encoded.as_bytes()), Ok(value));
    }

    #[test]
    fn json_kafka_and_protobuf_round_trip(event in event()) {
        let text = json::encode_event(&event);
        let from_json = json::decode_event(text.as_bytes()).unwrap();
        prop_assert_eq!(&from_json, &event);
        prop_assert_eq!(json::encode_event(&from_json), text);

        let entry = kafka::encode_events(std::slice::from_ref(&event), 0).unwrap();
        prop_assert_eq!(lakestream_format::kafka::count_records(&entry), Ok(1));
        prop_assert_eq!(kafka::decode_events(&entry).unwrap(), vec![event.clone()]);

        // time is rendered canonically here, so protobuf keeps it exactly.
        let wire = proto::encode_event(&event);
        let from_proto = proto::decode_event(&wire).unwrap();
        prop_assert_eq!(proto::encode_event(&from_proto), wire);
        prop_assert_eq!(from_proto.get("time"), event.get("time"));
    }

    #[test]
    fn http_binary_keeps_attribute_strings(event in event()) {
        let (headers, body) = http::encode_binary(&event);
        let back = http::decode_binary(&headers, &body).unwrap();
        for attribute in event.attributes() {
            prop_assert_eq!(back.get(&attribute.name), Some(attribute.value.as_str()));
        }
        prop_assert_eq!(back.data().map(Data::as_bytes).unwrap_or_default(), body.as_slice());
    }

    #[test]
    fn decoders_refuse_garbage_without_panicking(tail in proptest::collection::vec(any::<u8>(), 0..256)) {
        // Garbage by construction: a leading 0xFF starts no valid input of any decoder here.
        // It is not UTF-8 (JSON, header values), as a protobuf tag it has wire type 7, which
        // does not exist, and as a Kafka batch it is neither base offset 0 nor a valid frame.
        let mut garbage = vec![0xFF];
        garbage.extend_from_slice(&tail);
        prop_assert!(json::decode_event(&garbage).is_err());
        prop_assert!(json::decode_batch(&garbage).is_err());
        prop_assert!(proto::decode_event(&garbage).is_err());
        prop_assert!(proto::decode_batch(&garbage).is_err());
        prop_assert!(kafka::decode_events(&garbage).is_err());
        prop_assert!(http::decode_header_value(&garbage).is_err());
        prop_assert!(http::decode_binary(&[("ce-specversion", &garbage[..])], &tail).is_err());
        // Any bytes at all, valid or not, give an answer and never a panic.
        let _ = json::decode_event(&tail);
        let _ = json::decode_batch(&tail);
        let _ = proto::decode_event(&tail);
        let _ = proto::decode_batch(&tail);
        let _ = kafka::decode_events(&tail);
        let _ = http::decode_header_value(&tail);
        let _ = http::decode_binary(&[("ce-specversion", &tail[..])], &tail);
    }

    #[test]
    fn corrupting_a_stored_entry_is_an_error_not_a_panic(event in event(), position in any::<prop::sample::Index>(), flip in 1u8..=255) {
        let mut entry = kafka::encode_events(std::slice::from_ref(&event), 0).unwrap();
        let at = position.index(entry.len());
        entry[at] ^= flip;
        // Offsets 0..8 and the partition leader epoch are outside the CRC; anything else
        // must be caught.
        let result = kafka::decode_events(&entry);
        if !(0..8).contains(&at) && !(12..16).contains(&at) {
            prop_assert!(result.is_err(), "flip at {} accepted", at);
        }
    }
}
