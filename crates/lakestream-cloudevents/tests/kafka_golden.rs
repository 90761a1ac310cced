//! Golden bytes of our stored entry (the Kafka binding's binary-mode record batch), so that a
//! change of layout is seen. The fixture was also parsed with Apache kafka-clients 4.3.1
//! (`DefaultRecordBatch.ensureValid`, record headers, keys, values and timestamps), see
//! `fixtures/kafka/README.md`.

use lakestream_cloudevents::{json, kafka};

const EVENTS: &str = r#"[{"specversion":"1.0","id":"1","source":"/github/acme/repo","type":"com.github.push","partitionkey":"mykey","time":"2018-04-05T03:56:24Z","datacontenttype":"text/plain","data":"Euro € 😀"},{"specversion":"1.0","id":"allExtensionTypes","source":"https://cloudevents.io","type":"io.cloudevents.test","subject":"tests","extinteger":10,"extboolean":true,"data":{"a": [1, 2]}},{"specversion":"1.0","id":"3","source":"/s","type":"t"}]"#;

/// The clock reading used for events without `time`.
const NOW_MS: i64 = 1_700_000_000_000;

fn fixture() -> Vec<u8> {
    let path = format!("{}/tests/fixtures/kafka/three-events.hex", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{path}: {error}"));
    hex::decode(text.trim()).unwrap_or_else(|error| panic!("{path}: {error}"))
}

#[test]
fn stored_entry_matches_golden_bytes() {
    let events = json::decode_batch(EVENTS.as_bytes()).unwrap();
    let payload = kafka::encode_events(&events, NOW_MS).unwrap();
    assert_eq!(hex::encode(&payload), hex::encode(fixture()));
}

#[test]
fn golden_bytes_decode_to_the_events() {
    let events = json::decode_batch(EVENTS.as_bytes()).unwrap();
    assert_eq!(kafka::decode_events(&fixture()).unwrap(), events);
    assert_eq!(json::encode_batch(&events), EVENTS, "the JSON batch itself round-trips byte for byte");
}
