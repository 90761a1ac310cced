//! Writes the seed corpora of the CloudEvents and FastPFOR fuzz targets from the repository's
//! real examples: the CloudEvents conformance fixtures, the Kafka golden entry and the
//! EntryOffsets golden vector. Run from `fuzz/`: `cargo run --example seeds` (plain build, no
//! fuzzing flags). Existing files with the same name are overwritten; names are content hashes.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use base64::Engine as _;
use lakestream_cloudevents::proto::{
    ProtoAttr, ProtoAttributeValue, ProtoCloudEvent, ProtoCloudEventBatch, ProtoData, ProtoTimestamp,
};
use lakestream_cloudevents::{http, json, kafka, time};
use prost::Message as _;
use serde_json::Value;

const FIXTURES: &str = "../crates/lakestream-cloudevents/tests/fixtures";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut json_seeds = Vec::new();
    let mut events = Vec::new();
    for file in ["valid-events", "invalid-events", "valid-batches", "invalid-batches"] {
        let fixture: Value =
            serde_json::from_str(&fs::read_to_string(format!("{FIXTURES}/conformance/json/{file}.json"))?)?;
        for test in fixture["tests"].as_array().ok_or("tests is not an array")? {
            let member = test.get("event").or_else(|| test.get("batch")).ok_or("no event or batch")?;
            let text = serde_json::to_string(member)?;
            if let Ok(event) = json::decode_event(text.as_bytes()) {
                events.push(event);
            }
            if let Ok(batch) = json::decode_batch(text.as_bytes()) {
                events.extend(batch);
            }
            json_seeds.push(text.into_bytes());
        }
    }
    write("cloudevents_json", &json_seeds)?;

    let http_seeds: Vec<Vec<u8>> = events
        .iter()
        .map(|event| {
            let (headers, body) = http::encode_binary(event);
            let mut seed = Vec::new();
            for (name, value) in headers {
                seed.extend_from_slice(format!("{name}: {value}\n").as_bytes());
            }
            seed.push(b'\n');
            seed.extend_from_slice(&body);
            seed
        })
        .chain([b"ce-specversion: \"1.0\"\nce-id: %31\nce-source: %2Fs\nce-type: t\nce-note: caf%C3%A9%20%E2%82%AC\ncontent-type: text/plain\n\nhi".to_vec()])
        .collect();
    write("cloudevents_http", &http_seeds)?;

    let mut kafka_seeds: Vec<Vec<u8>> = events
        .chunks(3)
        .map(|chunk| kafka::encode_events(chunk, 1_700_000_000_000))
        .collect::<Result<_, _>>()?;
    let golden = fs::read_to_string(format!("{FIXTURES}/kafka/three-events.hex"))?;
    kafka_seeds.push(from_hex(golden.trim())?);
    write("cloudevents_kafka", &kafka_seeds)?;

    let mut proto_seeds = Vec::new();
    for file in ["valid-events", "invalid-events", "valid-batches", "invalid-batches"] {
        let fixture: Value = serde_json::from_str(&fs::read_to_string(format!(
            "{FIXTURES}/conformance/protobuf/{file}.json"
        ))?)?;
        for test in fixture["tests"].as_array().ok_or("tests is not an array")? {
            for (key, value) in test.as_object().ok_or("a test is not an object")? {
                match value {
                    Value::Object(_) if key.to_ascii_lowercase().contains("single") => {
                        proto_seeds.push(proto_event(value)?.encode_to_vec());
                    }
                    Value::Array(items) if key.to_ascii_lowercase().contains("batch") => {
                        let events = items.iter().map(proto_event).collect::<Result<_, _>>()?;
                        proto_seeds.push(ProtoCloudEventBatch { events }.encode_to_vec());
                    }
                    _ => {}
                }
            }
        }
    }
    write("cloudevents_proto", &proto_seeds)?;

    // FastPFOR: the golden vector's values as deltas (width byte 32), and a few shapes that
    // cross the block (32) and block-group (128) boundaries.
    let vector =
        fs::read_to_string("../crates/lakestream-format/tests/vectors/core/entry-offsets-40-27.hex")?;
    let hex: String = vector.lines().filter(|line| !line.starts_with('#')).collect();
    // The vector is an EntryOffsets message; its field 3 (tag 0x1a, one length byte) is the
    // compressed payload and runs to the end.
    let message = from_hex(&hex)?;
    let at = message.iter().position(|&b| b == 0x1a).ok_or("no compressed_payload field")?;
    let values =
        lakestream_format::entry_offsets::decode_from_bytes(message.get(at + 2..).unwrap_or_default())?;
    let mut golden = vec![32u8];
    let mut previous = 0u32;
    for value in values {
        golden.extend_from_slice(&value.wrapping_sub(previous).to_le_bytes());
        previous = value;
    }
    let mut fastpfor_seeds = vec![golden];
    for (width, count) in [(3u8, 31usize), (7, 32), (12, 33), (20, 129), (32, 160), (0, 5)] {
        let mut seed = vec![width];
        for i in 0..count {
            seed.extend_from_slice(&(i as u32).wrapping_mul(2_654_435_761).to_le_bytes());
        }
        fastpfor_seeds.push(seed);
    }
    write("fastpfor", &fastpfor_seeds)?;

    // api_requests: one request per route, in the target's `METHOD PATH` / headers / body
    // layout, with a conformance event and the binary-mode seed as event bodies.
    let partition = "/v1/namespaces/default/streams/s/partitions/0";
    let event = json::encode_event(events.first().ok_or("no valid conformance event")?);
    let batch = json::encode_batch(&events[..events.len().min(3)]);
    let json_type = "content-type: application/json";
    let api_seeds: Vec<String> = vec![
        "GET /healthz\n\n".into(),
        "GET /readyz\n\n".into(),
        "GET /metrics\n\n".into(),
        format!("POST /v1/namespaces\n{json_type}\n\n{{\"name\":\"n2\",\"properties\":{{\"a\":\"b\"}}}}"),
        "GET /v1/namespaces?limit=1\n\n".into(),
        format!("POST /v1/namespaces/default/streams\n{json_type}\n\n{{\"name\":\"t\",\"partitions\":2}}"),
        "GET /v1/namespaces/default/streams\n\n".into(),
        "GET /v1/namespaces/default/streams/s\n\n".into(),
        "DELETE /v1/namespaces/default/streams/t\n\n".into(),
        format!("POST /v1/namespaces/default/streams/s/partitions\n{json_type}\n\n{{\"by\":1}}"),
        format!(
            "POST {partition}/entries\n{json_type}\n\n{{\"entries\":[{{\"payload_base64\":\"Zmlyc3Q=\",\"record_count\":2}}]}}"
        ),
        format!("POST {partition}/entries?record_count=3\ncontent-type: application/octet-stream\n\nraw"),
        format!("GET {partition}/entries?offset=0\n\n"),
        format!("GET {partition}/offsets\n\n"),
        format!("POST {partition}/trim\n{json_type}\n\n{{\"through\":0}}"),
        format!(
            "POST /v1/namespaces/default/streams/s/events\ncontent-type: {}\n\n{event}",
            json::MEDIA_TYPE
        ),
        format!(
            "POST /v1/namespaces/default/streams/s/events?partition=1\ncontent-type: {}\n\n{batch}",
            json::BATCH_MEDIA_TYPE
        ),
        format!("POST /v1/namespaces/default/streams/s/events\n{}", String::from_utf8_lossy(&http_seeds[0])),
        format!("GET {partition}/events?offset=0&mode=binary\n\n"),
        format!("GET {partition}/events?offset=0&max_wait_ms=1\n\n"),
    ];
    write("api_requests", &api_seeds.into_iter().map(String::into_bytes).collect::<Vec<_>>())?;
    Ok(())
}

/// The protobuf JSON mapping of a conformance fixture as a message (camelCase or snake_case).
fn proto_event(object: &Value) -> Result<ProtoCloudEvent, Box<dyn std::error::Error>> {
    let get = |camel: &str, snake: &str| object.get(camel).or_else(|| object.get(snake));
    let text =
        |camel: &str, snake: &str| get(camel, snake).and_then(Value::as_str).unwrap_or_default().to_owned();
    let base64 =
        |value: &Value| base64::engine::general_purpose::STANDARD.decode(value.as_str().unwrap_or_default());
    let mut attributes = BTreeMap::new();
    if let Some(Value::Object(map)) = get("attributes", "attributes") {
        for (name, value) in map {
            // An empty value object is an unset `attr` (an invalid fixture).
            let Some((kind, inner)) = value.as_object().and_then(|v| v.iter().next()) else {
                attributes.insert(name.clone(), ProtoAttributeValue { attr: None });
                continue;
            };
            let attr = match kind.as_str() {
                "ceBoolean" | "ce_boolean" => ProtoAttr::CeBoolean(inner.as_bool().unwrap_or_default()),
                "ceInteger" | "ce_integer" => ProtoAttr::CeInteger(inner.as_i64().unwrap_or_default() as i32),
                "ceBytes" | "ce_bytes" => ProtoAttr::CeBytes(base64(inner)?),
                "ceUri" | "ce_uri" => ProtoAttr::CeUri(inner.as_str().unwrap_or_default().into()),
                "ceUriRef" | "ce_uri_ref" => ProtoAttr::CeUriRef(inner.as_str().unwrap_or_default().into()),
                "ceTimestamp" | "ce_timestamp" => {
                    let (seconds, nanos) =
                        time::parse_rfc3339(inner.as_str().unwrap_or_default()).unwrap_or_default();
                    ProtoAttr::CeTimestamp(ProtoTimestamp { seconds, nanos: nanos as i32 })
                }
                _ => ProtoAttr::CeString(inner.as_str().unwrap_or_default().into()),
            };
            attributes.insert(name.clone(), ProtoAttributeValue { attr: Some(attr) });
        }
    }
    let data = if let Some(value) = get("binaryData", "binary_data") {
        Some(ProtoData::BinaryData(base64(value)?))
    } else {
        get("textData", "text_data")
            .map(|value| ProtoData::TextData(value.as_str().unwrap_or_default().into()))
    };
    Ok(ProtoCloudEvent {
        id: text("id", "id"),
        source: text("source", "source"),
        spec_version: text("specVersion", "spec_version"),
        r#type: text("type", "type"),
        attributes,
        data,
    })
}

fn from_hex(text: &str) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    digits.chunks(2).map(|pair| Ok(u8::from_str_radix(std::str::from_utf8(pair)?, 16)?)).collect()
}

/// Writes each seed as corpus/<target>/<FNV-1a hash>, a stable content-derived name.
fn write(target: &str, seeds: &[Vec<u8>]) -> std::io::Result<()> {
    let dir = Path::new("corpus").join(target);
    fs::create_dir_all(&dir)?;
    for seed in seeds {
        let hash = seed
            .iter()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        fs::write(dir.join(format!("seed-{hash:016x}")), seed)?;
    }
    println!("{target}: {} seeds", seeds.len());
    Ok(())
}
