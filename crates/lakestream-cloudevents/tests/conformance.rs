//! The official CloudEvents format conformance data (`cloudevents/conformance`, branch
//! `format-tests`): `format/json/` run against our JSON codec, with each valid event carried
//! through every other format and binding; `format/protobuf/` (proto JSON form) turned into
//! protobuf wire bytes and run against our protobuf decoder.

use lakestream_cloudevents::time::parse_rfc3339;
use lakestream_cloudevents::{AttrType, CeError, CloudEvent, Data, http, json, kafka, proto};
use serde::Deserialize;
use serde_json::value::RawValue;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TestFile {
    test_type: String,
    tests: Vec<TestCase>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TestCase {
    id: String,
    sample_id: Option<String>,
    event: Option<Box<RawValue>>,
    batch: Option<Box<RawValue>>,
}

fn fixture_text(path: &str) -> String {
    let path = format!("{}/tests/fixtures/conformance/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{path}: {error}"));
    // The conformance repository starts some files with a UTF-8 BOM.
    text.trim_start_matches('\u{feff}').to_owned()
}

fn load(name: &str) -> TestFile {
    serde_json::from_str(&fixture_text(&format!("json/{name}")))
        .unwrap_or_else(|error| panic!("{name}: {error}"))
}

/// A golden sample of `format/README.md`: attribute name, value, data.
type Sample = (Vec<(&'static str, &'static str)>, Option<Data>);

fn sample(id: &str) -> Sample {
    let minimal = |id: &'static str| {
        vec![
            ("specversion", "1.0"),
            ("id", id),
            ("type", "io.cloudevents.test"),
            ("source", "https://cloudevents.io"),
        ]
    };
    let with = |id: &'static str, extra: &[(&'static str, &'static str)]| {
        let mut attributes = minimal(id);
        attributes.extend_from_slice(extra);
        attributes
    };
    match id {
        "minimal" => (minimal("minimal"), None),
        "minimalWithTime" => (with("minimalWithTime", &[("time", "2018-04-05T17:31:00Z")]), None),
        "minimalWithRelativeSource" => {
            let mut attributes = minimal("minimalWithRelativeSource");
            attributes[3].1 = "#fragment";
            (attributes, None)
        }
        "allCore" => (
            with(
                "allCore",
                &[
                    ("datacontenttype", "text/plain"),
                    ("dataschema", "https://cloudevents.io/dataschema"),
                    ("subject", "tests"),
                    ("time", "2018-04-05T17:31:00Z"),
                ],
            ),
            None,
        ),
        // The README names the id `simpleData`; the file uses `simpleTextData`, which we follow.
        "simpleTextData" => (
            with("simpleTextData", &[("datacontenttype", "text/plain")]),
            Some(Data::Text("Simple text".into())),
        ),
        "allExtensionTypes" => (
            with(
                "allExtensionTypes",
                &[
                    ("extinteger", "10"),
                    ("extboolean", "true"),
                    ("extstring", "text"),
                    ("extbinary", "TWE="),
                    ("exttimestamp", "2023-03-31T15:12:00Z"),
                    ("exturi", "https://cloudevents.io"),
                    ("exturiref", "//authority/path"),
                ],
            ),
            None,
        ),
        other => panic!("unknown sample {other}"),
    }
}

fn batch_sample(id: &str) -> Vec<Sample> {
    match id {
        "empty" => vec![],
        "minimal" => vec![sample("minimal")],
        "minimal2" => vec![sample("minimal"), sample("minimal")],
        "minimalAndAllCore" => vec![sample("minimal"), sample("allCore")],
        "minimalAndAllExtensionTypes" => vec![sample("minimal"), sample("allExtensionTypes")],
        other => panic!("unknown batch sample {other}"),
    }
}

/// Compares an event with a sample as the README asks: attributes as a set, timestamps as
/// instants.
fn assert_matches(event: &CloudEvent, (attributes, data): &Sample, context: &str) {
    assert_eq!(event.attributes().len(), attributes.len(), "{context}: {event:?}");
    for (name, expected) in attributes {
        let actual = event.get(name).unwrap_or_else(|| panic!("{context}: no {name}"));
        if *name == "time" || *name == "exttimestamp" {
            assert_eq!(parse_rfc3339(actual), parse_rfc3339(expected), "{context}: {name}");
        } else {
            assert_eq!(actual, *expected, "{context}: {name}");
        }
    }
    assert_eq!(event.data(), data.as_ref(), "{context}: data");
}

/// Carries an event through every other format and binding and back.
fn through_every_format(event: &CloudEvent, sample: &Sample, id: &str) {
    // JSON strings are untyped, so Binary, Timestamp and URI extensions come back as Strings
    // with the same value; events that arrived as JSON round-trip exactly (tested separately).
    let structured = json::decode_event(json::encode_event(event).as_bytes()).unwrap();
    assert_matches(&structured, sample, &format!("{id}: JSON"));
    let (headers, body) = http::encode_binary(event);
    assert_matches(&http::decode_binary(&headers, &body).unwrap(), sample, &format!("{id}: HTTP binary"));
    let stored =
        kafka::decode_events(&kafka::encode_events(std::slice::from_ref(event), 0).unwrap()).unwrap();
    assert_eq!(stored, vec![event.clone()], "{id}: Kafka record");
    assert_matches(
        &proto::decode_event(&proto::encode_event(event)).unwrap(),
        sample,
        &format!("{id}: protobuf"),
    );
}

#[test]
fn valid_events_decode_to_their_golden_samples() {
    let file = load("valid-events.json");
    assert_eq!(file.test_type, "ValidSingleEvent");
    assert_eq!(file.tests.len(), 10);
    for case in &file.tests {
        let raw = case.event.as_ref().unwrap_or_else(|| panic!("{}: no event", case.id));
        let event =
            json::decode_event(raw.get().as_bytes()).unwrap_or_else(|error| panic!("{}: {error}", case.id));
        let expected = sample(case.sample_id.as_deref().unwrap_or_default());
        assert_matches(&event, &expected, &case.id);
        let again = json::decode_event(json::encode_event(&event).as_bytes()).unwrap();
        assert_eq!(again, event, "{}: JSON round trip", case.id);
        through_every_format(&event, &expected, &case.id);
    }
}

#[test]
fn valid_extension_types_keep_their_json_types() {
    let file = load("valid-events.json");
    let case = file.tests.iter().find(|case| case.id == "validAllExtensionTypes").unwrap();
    let event = json::decode_event(case.event.as_ref().unwrap().get().as_bytes()).unwrap();
    assert_eq!(event.attribute("extinteger").map(|a| a.kind), Some(AttrType::Integer));
    assert_eq!(event.attribute("extboolean").map(|a| a.kind), Some(AttrType::Boolean));
    // Kafka binary mode keeps them through the lakestream_ce_types header.
    let stored =
        kafka::decode_events(&kafka::encode_events(std::slice::from_ref(&event), 0).unwrap()).unwrap();
    assert_eq!(stored[0].attribute("extinteger").map(|a| a.kind), Some(AttrType::Integer));
}

/// The attribute each invalid conformance case must be refused for (reference §7).
fn expected_attribute(id: &str) -> &'static str {
    match id {
        "invalidNoSpecVersion" | "invalidEmptySpecVersion" | "invalidUnknownSpecVersion" => "specversion",
        "invalidNoId" | "invalidEmptyId" | "invalidNumericId" | "invalidObjectId" => "id",
        "invalidNoType" | "invalidEmptyType" => "type",
        "invalidNoSource" | "invalidEmptySource" => "source",
        id if id.starts_with("invalidTime") => "time",
        "invalidNonRfc2046DataContentType" | "invalidEmptyDataContentType" => "datacontenttype",
        "invalidEmptyDataSchema" => "dataschema",
        "invalidEmptySubject" => "subject",
        "invalidCapitalizedExtension" => "MyExtension",
        "invalidPunctuatedExtension" | "invalidNonIntegerExtensionValue" => "my.extension",
        "invalidBothDataAndDataBase64" => "data",
        other => panic!("no expectation for {other}"),
    }
}

#[test]
fn invalid_events_are_refused_naming_the_attribute() {
    let file = load("invalid-events.json");
    assert_eq!(file.test_type, "InvalidSingleEvent");
    assert_eq!(file.tests.len(), 25);
    for case in &file.tests {
        let raw = case.event.as_ref().unwrap_or_else(|| panic!("{}: no event", case.id));
        let error = json::decode_event(raw.get().as_bytes()).expect_err(&case.id);
        assert_eq!(error.attribute_name(), Some(expected_attribute(&case.id)), "{}: {error}", case.id);
        assert_eq!(error.class(), lakestream_format::ErrorClass::InvalidInput);
    }
}

#[test]
fn valid_batches_decode_to_their_golden_samples_and_round_trip() {
    let file = load("valid-batches.json");
    assert_eq!(file.test_type, "ValidBatch");
    assert_eq!(file.tests.len(), 5);
    for case in &file.tests {
        let raw = case.batch.as_ref().unwrap_or_else(|| panic!("{}: no batch", case.id));
        let events =
            json::decode_batch(raw.get().as_bytes()).unwrap_or_else(|error| panic!("{}: {error}", case.id));
        let expected = batch_sample(case.sample_id.as_deref().unwrap_or_default());
        assert_eq!(events.len(), expected.len(), "{}", case.id);
        for (event, sample) in events.iter().zip(&expected) {
            assert_matches(event, sample, &case.id);
        }
        assert_eq!(json::decode_batch(json::encode_batch(&events).as_bytes()).unwrap(), events);
        assert_eq!(proto::decode_batch(&proto::encode_batch(&events)).unwrap().len(), events.len());
        if !events.is_empty() {
            // One stored entry: one Kafka batch with one record per event.
            let payload = kafka::encode_events(&events, 0).unwrap();
            assert_eq!(lakestream_format::kafka::count_records(&payload), Ok(events.len() as u32));
            assert_eq!(kafka::decode_events(&payload).unwrap(), events);
        }
    }
}

#[test]
fn invalid_batches_are_refused_as_a_whole() {
    let file = load("invalid-batches.json");
    assert_eq!(file.test_type, "InvalidBatch");
    assert_eq!(file.tests.len(), 3);
    for case in &file.tests {
        let raw = case.batch.as_ref().unwrap_or_else(|| panic!("{}: no batch", case.id));
        let error = json::decode_batch(raw.get().as_bytes()).expect_err(&case.id);
        let expected_attribute = match case.id.as_str() {
            "invalidBatchMixedSpecVersions" => Some("specversion"),
            "invalidBatchContainingInvalidCloudEvent" => Some("id"),
            _ => None,
        };
        assert_eq!(error.attribute_name(), expected_attribute, "{}: {error}", case.id);
        if expected_attribute.is_none() {
            assert!(matches!(error, CeError::Malformed { .. }), "{}: {error}", case.id);
        }
        assert_eq!(error.class(), lakestream_format::ErrorClass::InvalidInput);
    }
}

// ---------------------------------------------------------------------------------------------
// format/protobuf: the files hold `ConformanceTestFile` in the proto JSON form.

use base64::Engine as _;
use lakestream_cloudevents::proto::{
    ProtoAny, ProtoAttr, ProtoAttributeValue, ProtoCloudEvent, ProtoCloudEventBatch, ProtoData,
    ProtoTimestamp,
};
use prost::Message as _;
use serde_json::Value;

/// A member by its proto JSON name (lowerCamelCase) or its original field name.
fn member<'a>(object: &'a Value, camel: &str, snake: &str) -> Option<&'a Value> {
    object.get(camel).or_else(|| object.get(snake))
}

fn proto_string(object: &Value, camel: &str, snake: &str) -> String {
    member(object, camel, snake).and_then(Value::as_str).unwrap_or_default().to_owned()
}

fn proto_attribute(value: &Value) -> ProtoAttributeValue {
    let base64 =
        |text: &Value| base64::engine::general_purpose::STANDARD.decode(text.as_str().unwrap()).unwrap();
    let attr = if let Some(v) = member(value, "ceBoolean", "ce_boolean") {
        Some(ProtoAttr::CeBoolean(v.as_bool().unwrap()))
    } else if let Some(v) = member(value, "ceInteger", "ce_integer") {
        Some(ProtoAttr::CeInteger(i32::try_from(v.as_i64().unwrap()).unwrap()))
    } else if let Some(v) = member(value, "ceString", "ce_string") {
        Some(ProtoAttr::CeString(v.as_str().unwrap().to_owned()))
    } else if let Some(v) = member(value, "ceBytes", "ce_bytes") {
        Some(ProtoAttr::CeBytes(base64(v)))
    } else if let Some(v) = member(value, "ceUri", "ce_uri") {
        Some(ProtoAttr::CeUri(v.as_str().unwrap().to_owned()))
    } else if let Some(v) = member(value, "ceUriRef", "ce_uri_ref") {
        Some(ProtoAttr::CeUriRef(v.as_str().unwrap().to_owned()))
    } else {
        member(value, "ceTimestamp", "ce_timestamp").map(|v| {
            let (seconds, nanos) = parse_rfc3339(v.as_str().unwrap()).unwrap();
            ProtoAttr::CeTimestamp(ProtoTimestamp { seconds, nanos: i32::try_from(nanos).unwrap() })
        })
    };
    ProtoAttributeValue { attr }
}

fn proto_event(object: &Value) -> ProtoCloudEvent {
    let attributes = member(object, "attributes", "attributes")
        .and_then(Value::as_object)
        .map(|map| map.iter().map(|(name, value)| (name.clone(), proto_attribute(value))).collect())
        .unwrap_or_default();
    let data = if let Some(v) = member(object, "binaryData", "binary_data") {
        Some(ProtoData::BinaryData(
            base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap()).unwrap(),
        ))
    } else if let Some(v) = member(object, "textData", "text_data") {
        Some(ProtoData::TextData(v.as_str().unwrap().to_owned()))
    } else {
        member(object, "protoData", "proto_data").map(|v| {
            ProtoData::ProtoData(ProtoAny { type_url: proto_string(v, "@type", "@type"), value: Vec::new() })
        })
    };
    ProtoCloudEvent {
        id: proto_string(object, "id", "id"),
        source: proto_string(object, "source", "source"),
        spec_version: proto_string(object, "specVersion", "spec_version"),
        r#type: proto_string(object, "type", "type"),
        attributes,
        data,
    }
}

fn proto_batch(object: &Value) -> ProtoCloudEventBatch {
    let events =
        object.get("events").and_then(Value::as_array).map(|events| events.iter().map(proto_event).collect());
    ProtoCloudEventBatch { events: events.unwrap_or_default() }
}

fn load_proto(name: &str) -> Vec<Value> {
    let file: Value = serde_json::from_str(&fixture_text(&format!("protobuf/{name}"))).unwrap();
    file["tests"].as_array().unwrap().clone()
}

#[test]
fn protobuf_valid_events_decode_to_their_golden_samples() {
    let tests = load_proto("valid-events.json");
    assert_eq!(tests.len(), 6);
    for case in &tests {
        let id = case["id"].as_str().unwrap();
        let wire = proto_event(&case["validSingle"]).encode_to_vec();
        let event = proto::decode_event(&wire).unwrap_or_else(|error| panic!("{id}: {error}"));
        let expected = sample(case["sampleId"].as_str().unwrap());
        assert_matches(&event, &expected, id);
        assert_eq!(proto::encode_event(&event), wire, "{id}: protobuf round trip byte for byte");
        through_every_format(&event, &expected, id);
    }
}

#[test]
fn protobuf_extension_types_are_kept() {
    let tests = load_proto("valid-events.json");
    let case = tests.iter().find(|case| case["id"] == "validAllExtensionTypes").unwrap();
    let event = proto::decode_event(&proto_event(&case["validSingle"]).encode_to_vec()).unwrap();
    for (name, kind) in [
        ("extinteger", AttrType::Integer),
        ("extboolean", AttrType::Boolean),
        ("extstring", AttrType::String),
        ("exturi", AttrType::Uri),
        ("exturiref", AttrType::UriRef),
        ("exttimestamp", AttrType::Timestamp),
        ("extbinary", AttrType::Binary),
    ] {
        assert_eq!(event.attribute(name).map(|a| a.kind), Some(kind), "{name}");
    }
    // Structured JSON writes the typed ones with their JSON types, and the stored Kafka
    // record keeps every type in lakestream_ce_types.
    let text = json::encode_event(&event);
    assert!(text.contains(r#""extinteger":10"#) && text.contains(r#""extboolean":true"#), "{text}");
    let stored =
        kafka::decode_events(&kafka::encode_events(std::slice::from_ref(&event), 0).unwrap()).unwrap();
    assert_eq!(stored, vec![event]);
}

fn proto_expected_attribute(id: &str) -> &'static str {
    match id {
        "invalidDataContentTypeWrongType" => "datacontenttype",
        "invalidDataSchemaWrongType" => "dataschema",
        "invalidSubjectWrongType" => "subject",
        "invalidTimeWrongType" => "time",
        "invalidPunctuatedExtension" | "invalidExtensionNoValue" => "My.Extension",
        other => expected_attribute(other),
    }
}

#[test]
fn protobuf_invalid_events_are_refused_naming_the_attribute() {
    let tests = load_proto("invalid-events.json");
    assert_eq!(tests.len(), 20);
    for case in &tests {
        let id = case["id"].as_str().unwrap();
        let wire = proto_event(&case["invalidSingle"]).encode_to_vec();
        let error = proto::decode_event(&wire).expect_err(id);
        assert_eq!(error.attribute_name(), Some(proto_expected_attribute(id)), "{id}: {error}");
        assert_eq!(error.class(), lakestream_format::ErrorClass::InvalidInput);
    }
}

#[test]
fn protobuf_batches() {
    let valid = load_proto("valid-batches.json");
    assert_eq!(valid.len(), 5);
    for case in &valid {
        let id = case["id"].as_str().unwrap();
        let wire = proto_batch(&case["validBatch"]).encode_to_vec();
        let events = proto::decode_batch(&wire).unwrap_or_else(|error| panic!("{id}: {error}"));
        let expected = batch_sample(case["sampleId"].as_str().unwrap());
        assert_eq!(events.len(), expected.len(), "{id}");
        for (event, sample) in events.iter().zip(&expected) {
            assert_matches(event, sample, id);
        }
        assert_eq!(proto::encode_batch(&events), wire, "{id}: byte for byte");
    }
    let invalid = load_proto("invalid-batches.json");
    assert_eq!(invalid.len(), 2);
    for case in &invalid {
        let id = case["id"].as_str().unwrap();
        let wire = proto_batch(&case["invalidBatch"]).encode_to_vec();
        let error = proto::decode_batch(&wire).expect_err(id);
        let expected = if id == "invalidBatchMixedSpecVersions" { "specversion" } else { "id" };
        assert_eq!(error.attribute_name(), Some(expected), "{id}: {error}");
    }
}
