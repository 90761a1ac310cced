//! CloudEvents ingest and consume over TCP against a dev stack (the embedded metadata store and
//! the local filesystem in a temporary directory), as `http_api.rs` runs it.

use std::time::Duration;

use http::StatusCode;
use lakestream_cloudevents::kafka::{self, Record};
use lakestream_cloudevents::ledger::{ClaimResult, Scope};
use lakestream_cloudevents::partition::partition_for_key;
use lakestream_cloudevents::{dedup_key, http as ce_http, json};
use lakestream_format::LogId;
use serde_json::{Value, json};

mod support;

use support::Running;
use support::http_client::{Answer, call};

async fn start() -> Running {
    support::start_with(|config| config.service.roles.compactor = false).await
}

/// Request headers, values as raw bytes.
type Headers<'a> = Vec<(&'a str, &'a [u8])>;

async fn create_stream(base: &str, name: &str, partitions: u32) -> Value {
    let body = json!({"name": name, "partitions": partitions}).to_string();
    let answer = call(
        base,
        "POST",
        "/v1/namespaces/default/streams",
        &[("content-type", b"application/json")],
        body.as_bytes(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED);
    answer.json()
}

fn events_path(stream: &str) -> String {
    format!("/v1/namespaces/default/streams/{stream}/events")
}

async fn post_structured(base: &str, stream: &str, body: &str) -> Answer {
    call(
        base,
        "POST",
        &events_path(stream),
        &[("content-type", json::MEDIA_TYPE.as_bytes())],
        body.as_bytes(),
    )
    .await
}

async fn post_batch(base: &str, path: &str, body: &str) -> Answer {
    call(base, "POST", path, &[("content-type", json::BATCH_MEDIA_TYPE.as_bytes())], body.as_bytes()).await
}

async fn consume(base: &str, stream: &str, partition: u32, query: &str) -> Answer {
    let path = format!("/v1/namespaces/default/streams/{stream}/partitions/{partition}/events?{query}");
    call(base, "GET", &path, &[], b"").await
}

/// (status, partition, offset) of each event of a 200 answer.
fn placements(answer: &Answer) -> Vec<(String, u64, u64)> {
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
    answer.json()["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["status"].as_str().unwrap().to_string(),
                e["partition"].as_u64().unwrap(),
                e["offset"].as_u64().unwrap(),
            )
        })
        .collect()
}

const STRUCTURED: &str = r#"{"specversion":"1.0","id":"s1","source":"/test","type":"dev.lakestream.test","time":"2024-01-02T03:04:05.600+01:00","extcount":3,"extflag":true,"data":{"a":[1,2.50]}}"#;
const BATCH: &str = r#"[{"specversion":"1.0","id":"b1","source":"/test","type":"t","datacontenttype":"text/plain","data":"plain text"},{"specversion":"1.0","id":"b2","source":"/test","type":"t","data_base64":"AAEC/w=="}]"#;

#[tokio::test]
async fn binary_structured_and_batched_ingest_read_back_byte_for_byte() {
    let s = start().await;
    let b = &s.base;
    create_stream(b, "ev", 1).await;
    assert_eq!(placements(&post_structured(b, "ev", STRUCTURED).await), vec![("appended".into(), 0, 0)]);
    assert_eq!(
        placements(&post_batch(b, &events_path("ev"), BATCH).await),
        vec![("appended".into(), 0, 1), ("appended".into(), 0, 2)]
    );
    let binary_headers: Vec<(&str, &[u8])> = vec![
        ("ce-specversion", b"1.0"),
        ("ce-id", b"bin1"),
        ("ce-source", b"/test"),
        ("ce-type", b"t.binary"),
        ("ce-subject", b"Euro%20%E2%82%AC%20%F0%9F%98%80"),
        ("ce-traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        ("content-type", b"application/xml"),
    ];
    let answer = call(b, "POST", &events_path("ev"), &binary_headers, b"<hello/>").await;
    assert_eq!(placements(&answer), vec![("appended".into(), 0, 3)]);

    // Structured consume: the JSON bodies come back exactly, extension types included.
    let read = consume(b, "ev", 0, "").await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.header("content-type").as_deref(), Some(json::BATCH_MEDIA_TYPE));
    assert_eq!(read.header("lakestream-next-offset").as_deref(), Some("4"));
    assert_eq!(read.header("lakestream-offsets").as_deref(), Some("0,1,2,3"));
    let binary_event = ce_http::decode_binary(&binary_headers, b"<hello/>").unwrap();
    let expected =
        format!("[{STRUCTURED},{},{}]", &BATCH[1..BATCH.len() - 1], json::encode_event(&binary_event));
    assert_eq!(String::from_utf8(read.body).unwrap(), expected);

    // Binary consume of the binary event: the same headers (percent-encoded) and body.
    let read = consume(b, "ev", 0, "offset=3&mode=binary").await;
    assert_eq!(read.status, StatusCode::OK);
    for (name, value) in &binary_headers {
        assert_eq!(read.header(name).as_deref().map(str::as_bytes), Some(*value), "{name}");
    }
    assert_eq!(read.body, b"<hello/>");
    assert_eq!(read.header("lakestream-next-offset").as_deref(), Some("4"));

    // Binary consume of the structured event: JSON data gets an explicit content type.
    let read = consume(b, "ev", 0, "offset=0&mode=binary").await;
    assert_eq!(read.header("ce-extcount").as_deref(), Some("3"));
    assert_eq!(read.header("ce-time").as_deref(), Some("2024-01-02T03:04:05.600+01:00"));
    assert_eq!(read.header("content-type").as_deref(), Some("application/json"));
    assert_eq!(read.body, br#"{"a":[1,2.50]}"#);
    assert_eq!(read.header("lakestream-next-offset").as_deref(), Some("1"));

    // Reading from the middle of an entry starts at that record.
    let read = consume(b, "ev", 0, "offset=2").await;
    assert_eq!(read.header("lakestream-offsets").as_deref(), Some("2,3"));

    // Nothing at the tail: binary mode answers 204 with where to continue.
    let read = consume(b, "ev", 0, "offset=4&mode=binary").await;
    assert_eq!(read.status, StatusCode::NO_CONTENT);
    assert_eq!(read.header("lakestream-next-offset").as_deref(), Some("4"));

    // Retrying every request answers the original offsets and appends nothing.
    assert_eq!(placements(&post_structured(b, "ev", STRUCTURED).await), vec![("duplicate".into(), 0, 0)]);
    assert_eq!(
        placements(&post_batch(b, &events_path("ev"), BATCH).await),
        vec![("duplicate".into(), 0, 1), ("duplicate".into(), 0, 2)]
    );
    assert_eq!(
        placements(&call(b, "POST", &events_path("ev"), &binary_headers, b"<hello/>").await),
        vec![("duplicate".into(), 0, 3)]
    );
    assert_eq!(consume(b, "ev", 0, "offset=4").await.body, b"[]");
    let metrics = String::from_utf8(call(b, "GET", "/metrics", &[], b"").await.body).unwrap();
    assert!(metrics.contains("lakestream_events_ingested_total 4"), "{metrics}");
    assert!(metrics.contains("lakestream_events_duplicate_total 4"), "{metrics}");
    s.stop().await;
}

#[tokio::test]
async fn a_request_that_is_not_a_cloudevent_gets_415() {
    let s = start().await;
    create_stream(&s.base, "ev", 1).await;
    for (content_type, body) in [
        ("application/json", br#"{"specversion":"1.0","id":"1","source":"/s","type":"t"}"#.as_slice()),
        ("text/plain", b"hello".as_slice()),
        ("application/cloudevents+avro", b"x".as_slice()),
    ] {
        let answer =
            call(&s.base, "POST", &events_path("ev"), &[("content-type", content_type.as_bytes())], body)
                .await;
        assert_eq!(answer.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{content_type}");
        assert_eq!(answer.json()["error"]["code"], "unsupported_media_type");
    }
    // Without a content type and without ce-specversion, too.
    let answer = call(&s.base, "POST", &events_path("ev"), &[("ce-id", b"1")], b"").await;
    assert_eq!(answer.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    s.stop().await;
}

#[tokio::test]
async fn every_validation_error_is_a_400_naming_the_attribute_and_appends_nothing() {
    let s = start().await;
    let b = &s.base;
    create_stream(b, "ev", 1).await;
    let ok = r#""specversion":"1.0","id":"1","source":"/s","type":"t""#;
    let json_cases: Vec<(String, &str)> = vec![
        (r#"{"specversion":"0.3","id":"1","source":"/s","type":"t"}"#.into(), "specversion"),
        (r#"{"id":"1","source":"/s","type":"t"}"#.into(), "specversion"),
        (r#"{"specversion":"1.0","source":"/s","type":"t"}"#.into(), "id"),
        (r#"{"specversion":"1.0","id":"","source":"/s","type":"t"}"#.into(), "id"),
        (r#"{"specversion":"1.0","id":"1","source":"","type":"t"}"#.into(), "source"),
        (r#"{"specversion":"1.0","id":"1","source":"/s"}"#.into(), "type"),
        (r#"{"specversion":"1.0","id":1,"source":"/s","type":"t"}"#.into(), "id"),
        (format!(r#"{{{ok},"time":"lunchtime"}}"#), "time"),
        (format!(r#"{{{ok},"time":"2018-04-05T18:31Z"}}"#), "time"),
        (format!(r#"{{{ok},"MyExtension":"x"}}"#), "MyExtension"),
        (format!(r#"{{{ok},"my.extension":"x"}}"#), "my.extension"),
        (format!(r#"{{{ok},"ext":1.5}}"#), "ext"),
        (format!(r#"{{{ok},"ext":2147483648}}"#), "ext"),
        (format!(r#"{{{ok},"subject":""}}"#), "subject"),
        (format!(r#"{{{ok},"datacontenttype":"nonsense"}}"#), "datacontenttype"),
        (format!(r#"{{{ok},"dataschema":""}}"#), "dataschema"),
        (format!(r#"{{{ok},"data":1,"data_base64":"AA=="}}"#), "data"),
        (format!(r#"{{{ok},"data_base64":"***"}}"#), "data_base64"),
    ];
    for (body, attribute) in &json_cases {
        let answer = post_structured(b, "ev", body).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(answer.json()["error"]["attribute"], *attribute, "{body}");
        // The same event as the second element of a batch refuses the whole batch.
        let batch = format!(r#"[{{{ok}}},{body}]"#);
        let answer = post_batch(b, &events_path("ev"), &batch).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{batch}");
    }
    let base: Vec<(&str, &[u8])> = vec![("ce-specversion", b"1.0"), ("ce-type", b"t")];
    let binary_cases: Vec<(Headers, &str)> = vec![
        (vec![("ce-id", b"1"), ("ce-source", b"%C0%A0")], "source"),
        (vec![("ce-id", b"100%"), ("ce-source", b"/s")], "id"),
        (vec![("ce-id", b"%ZZ"), ("ce-source", b"/s")], "id"),
        (
            vec![("ce-id", b"1"), ("ce-source", b"/s"), ("ce-datacontenttype", b"text/plain")],
            "datacontenttype",
        ),
        (vec![("ce-id", b"1")], "source"),
        (vec![("ce-id", b"1"), ("ce-source", b"/s"), ("ce-time", b"yesterday")], "time"),
    ];
    for (extra, attribute) in binary_cases {
        let headers: Vec<(&str, &[u8])> = base.iter().cloned().chain(extra).collect();
        let answer = call(b, "POST", &events_path("ev"), &headers, b"").await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{attribute}");
        assert_eq!(answer.json()["error"]["attribute"], attribute);
    }
    let spec_03 = call(
        b,
        "POST",
        &events_path("ev"),
        &[("ce-specversion", b"0.3"), ("ce-id", b"1"), ("ce-source", b"/s"), ("ce-type", b"t")],
        b"",
    )
    .await;
    assert_eq!(spec_03.json()["error"]["attribute"], "specversion");
    // A batch that is not an array, or holds a non-object, names no attribute but is a 400.
    for batch in ["{}", "[1]", "not json"] {
        assert_eq!(post_batch(b, &events_path("ev"), batch).await.status, StatusCode::BAD_REQUEST, "{batch}");
    }
    // Nothing was appended.
    let read = consume(b, "ev", 0, "").await;
    assert_eq!(read.body, b"[]");
    assert_eq!(read.header("lakestream-next-offset").as_deref(), Some("0"));
    // Bad parameters.
    assert_eq!(
        post_batch(b, &format!("{}?partition=x", events_path("ev")), "[]").await.status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        post_batch(b, &format!("{}?partition=1", events_path("ev")), "[]").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(post_batch(b, &events_path("nope"), "[]").await.status, StatusCode::NOT_FOUND);
    assert_eq!(consume(b, "ev", 0, "mode=xml").await.status, StatusCode::BAD_REQUEST);
    assert_eq!(consume(b, "ev", 0, "max_bytes=0").await.status, StatusCode::BAD_REQUEST);
    assert_eq!(consume(b, "ev", 0, "max_wait_ms=600000").await.status, StatusCode::BAD_REQUEST);
    assert_eq!(consume(b, "ev", 3, "").await.status, StatusCode::NOT_FOUND);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_retries_of_one_batch_append_once_and_answer_the_original_offsets() {
    let s = start().await;
    create_stream(&s.base, "race", 3).await;
    let batch: Vec<Value> = (0..12)
        .map(|i| json!({"specversion":"1.0","id":format!("e{i}"),"source":"/race","type":"t","data":{"i":i}}))
        .collect();
    let body = serde_json::to_string(&batch).unwrap();
    let path = events_path("race");
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (base, body, path) = (s.base.clone(), body.clone(), path.clone());
            tokio::spawn(async move {
                let mut in_flight = 0;
                loop {
                    let answer = post_batch(&base, &path, &body).await;
                    if answer.status == StatusCode::CONFLICT {
                        assert_eq!(answer.header("retry-after").as_deref(), Some("1"));
                        assert_eq!(answer.json()["error"]["code"], "in_flight");
                        in_flight += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    return (placements(&answer), in_flight);
                }
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    let where_of =
        |p: &Vec<(String, u64, u64)>| p.iter().map(|(_, part, off)| (*part, *off)).collect::<Vec<_>>();
    let first = where_of(&answers[0].0);
    assert!(answers.iter().all(|(p, _)| where_of(p) == first), "answers disagree");
    let appenders =
        answers.iter().filter(|(p, _)| p.iter().all(|(status, _, _)| status == "appended")).count();
    assert_eq!(appenders, 1, "exactly one request appends");
    assert!(
        answers.iter().all(|(p, _)| p.iter().all(|(st, _, _)| st == "appended")
            || p.iter().all(|(st, _, _)| st == "duplicate"))
    );
    // Exactly 12 records across the partitions.
    let mut total = 0;
    for p in 0..3 {
        let read = consume(&s.base, "race", p, "").await;
        total +=
            read.header("lakestream-offsets").map_or(0, |o| o.split(',').filter(|x| !x.is_empty()).count());
    }
    assert_eq!(total, 12);
    s.stop().await;
}

#[tokio::test]
async fn an_event_claimed_by_an_unfinished_request_answers_in_flight() {
    let s = start().await;
    let stream = create_stream(&s.base, "held", 2).await;
    let scope = Scope(LogId(stream["log_ids"][0].as_u64().unwrap()));
    let key = dedup_key("/held", "2");
    let ClaimResult::Claimed(mut claim) = s.stack.ledger.claim(scope, &[key]).await.unwrap() else {
        panic!("the first claim must succeed");
    };
    let body = r#"[{"specversion":"1.0","id":"1","source":"/held","type":"t"},{"specversion":"1.0","id":"2","source":"/held","type":"t"}]"#;
    let answer = post_batch(&s.base, &events_path("held"), body).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(answer.header("retry-after").as_deref(), Some("1"));
    assert_eq!(answer.json()["error"]["index"], 1);
    // All or nothing: the free event was not appended either.
    for p in 0..2 {
        assert_eq!(consume(&s.base, "held", p, "").await.body, b"[]");
    }
    let metrics = String::from_utf8(call(&s.base, "GET", "/metrics", &[], b"").await.body).unwrap();
    assert!(metrics.contains("lakestream_events_in_flight_total 1"), "{metrics}");
    // The 409 is counted once, as every error answer is, by the request layer.
    assert!(metrics.lines().any(|l| l == "lakestream_http_errors_total 1"), "{metrics}");
    let route = "/v1/namespaces/{ns}/streams/{stream}/events";
    let series = format!(r#"lakestream_http_requests_total{{route="{route}",method="POST",status="4xx"}} 1"#);
    assert!(metrics.lines().any(|l| l == series), "{series} in\n{metrics}");
    // Once the holder gives up its claim, the retry goes through.
    s.stack.ledger.release(&mut claim).await;
    let statuses = placements(&post_batch(&s.base, &events_path("held"), body).await);
    assert!(statuses.iter().all(|(st, _, _)| st == "appended"));
    s.stop().await;
}

#[tokio::test]
async fn percent_encoding_edge_cases_through_http() {
    let s = start().await;
    let b = &s.base;
    create_stream(b, "pct", 1).await;
    // (header as sent, value stored, header as served)
    let cases: Vec<(&[u8], &str, &str)> = vec![
        (b"%2Fgithub%2Facme", "/github/acme", "/github/acme"),
        (b"%c3%a9", "\u{e9}", "%C3%A9"),
        ("\u{e9}t\u{e9}".as_bytes(), "\u{e9}t\u{e9}", "%C3%A9t%C3%A9"),
        (br#""a \"b\"""#, "a \"b\"", "a%20%22b%22"),
        (b"%41%42", "AB", "AB"),
        (b"100%25", "100%", "100%25"),
        (b"Euro%20%E2%82%AC%20%F0%9F%98%80", "Euro \u{20ac} \u{1f600}", "Euro%20%E2%82%AC%20%F0%9F%98%80"),
    ];
    for (i, (sent, stored, served)) in cases.iter().enumerate() {
        let id = format!("p{i}");
        let headers: Vec<(&str, &[u8])> = vec![
            ("ce-specversion", b"1.0"),
            ("ce-id", id.as_bytes()),
            ("ce-source", b"/pct"),
            ("ce-type", b"t"),
            ("ce-ext", sent),
        ];
        let answer = call(b, "POST", &events_path("pct"), &headers, b"").await;
        assert_eq!(placements(&answer), vec![("appended".into(), 0, i as u64)]);
        let read = consume(b, "pct", 0, &format!("offset={i}&mode=binary")).await;
        assert_eq!(read.header("ce-ext").as_deref(), Some(*served), "{stored}");
        let structured = consume(b, "pct", 0, &format!("offset={i}&max_bytes=1")).await;
        let events = json::decode_batch(&structured.body).unwrap();
        assert_eq!(events[0].get("ext"), Some(*stored));
    }
    // The dedup key uses the decoded strings: the same source over-encoded is a duplicate.
    let headers: Vec<(&str, &[u8])> =
        vec![("ce-specversion", b"1.0"), ("ce-id", b"p0"), ("ce-source", b"%2Fpct"), ("ce-type", b"t")];
    assert_eq!(
        placements(&call(b, "POST", &events_path("pct"), &headers, b"").await),
        vec![("duplicate".into(), 0, 0)]
    );
    s.stop().await;
}

#[tokio::test]
async fn partitions_follow_kafkas_partitioner_and_a_batch_splits_per_partition() {
    let s = start().await;
    let b = &s.base;
    create_stream(b, "parts", 6).await;
    // Reference values (Kafka's UtilsTest and the reference): "mykey" -> 4 of 6,
    // "/github/acme/repo" -> 2 of 6.
    let body = r#"[{"specversion":"1.0","id":"k1","source":"/p","type":"t","partitionkey":"mykey"},{"specversion":"1.0","id":"k2","source":"/p","type":"t","subject":"/github/acme/repo"},{"specversion":"1.0","id":"k3","source":"/p","type":"t","partitionkey":"mykey"},{"specversion":"1.0","id":"k4","source":"/p","type":"t"}]"#;
    let keyless = partition_for_key(&dedup_key("/p", "k4"), 6).unwrap() as u64;
    let answer = placements(&post_batch(b, &events_path("parts"), body).await);
    let mut expected =
        vec![("appended".to_string(), 4, 0), ("appended".to_string(), 2, 0), ("appended".to_string(), 4, 1)];
    let keyless_offset = if keyless == 4 {
        2
    } else if keyless == 2 {
        1
    } else {
        0
    };
    expected.push(("appended".to_string(), keyless, keyless_offset));
    assert_eq!(answer, expected);
    // Partition 4 holds its two events as one entry, in request order.
    let read = consume(b, "parts", 4, "").await;
    let events = json::decode_batch(&read.body).unwrap();
    assert_eq!(events.iter().map(|e| e.id()).take(2).collect::<Vec<_>>(), ["k1", "k3"]);
    // An explicit partition wins.
    let forced = r#"{"specversion":"1.0","id":"k5","source":"/p","type":"t","partitionkey":"mykey"}"#;
    let answer = call(
        b,
        "POST",
        &format!("{}?partition=5", events_path("parts")),
        &[("content-type", json::MEDIA_TYPE.as_bytes())],
        forced.as_bytes(),
    )
    .await;
    assert_eq!(placements(&answer), vec![("appended".into(), 5, 0)]);
    s.stop().await;
}

#[tokio::test]
async fn other_records_get_synthesized_envelopes_and_ce_records_come_back_as_events() {
    let s = start().await;
    let b = &s.base;
    let stream = create_stream(b, "plain", 1).await;
    let log = stream["log_ids"][0].as_u64().unwrap();
    let entries = "/v1/namespaces/default/streams/plain/partitions/0/entries";
    // A plain two-record entry (offsets 0 and 1).
    let answer = call(
        b,
        "POST",
        &format!("{entries}?record_count=2"),
        &[("content-type", b"application/octet-stream")],
        b"opaque",
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    // A Kafka batch: one record without ce_ headers, one with (offsets 2 and 3).
    let event = json::decode_event(br#"{"specversion":"1.0","id":"x","source":"/k","type":"t","data":"hi"}"#)
        .unwrap();
    let records = vec![
        Record { key: None, value: Some(b"raw".to_vec()), headers: vec![], timestamp_ms: 1_000 },
        kafka::event_to_record(&event, 2_000),
    ];
    let batch = kafka::encode_record_batch(&records).unwrap();
    let answer =
        call(b, "POST", entries, &[("content-type", b"application/vnd.kafka.record-batch")], &batch).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));

    let read = consume(b, "plain", 0, "").await;
    assert_eq!(read.header("lakestream-offsets").as_deref(), Some("0,2,3"));
    assert_eq!(read.header("lakestream-next-offset").as_deref(), Some("4"));
    let events = json::decode_batch(&read.body).unwrap();
    let source = "/v1/namespaces/default/streams/plain/partitions/0";
    assert_eq!(events[0].id(), format!("{log}-0"));
    assert_eq!(events[0].event_type(), "dev.lakestream.record");
    assert_eq!(events[0].source(), source);
    assert_eq!(events[0].data().unwrap().as_bytes(), b"opaque");
    assert_eq!(events[1].id(), format!("{log}-2"));
    assert_eq!(events[1].get("time"), Some("1970-01-01T00:00:01Z"));
    assert_eq!(events[1].data().unwrap().as_bytes(), b"raw");
    assert_eq!(events[2], event);
    // Binary mode of the plain entry: one message, and the next offset skips its records.
    let read = consume(b, "plain", 0, "offset=1&mode=binary").await;
    assert_eq!(read.header("ce-id"), Some(format!("{log}-0")));
    assert_eq!(read.header("content-type").as_deref(), Some("application/octet-stream"));
    assert_eq!(read.body, b"opaque");
    assert_eq!(read.header("lakestream-next-offset").as_deref(), Some("2"));
    s.stop().await;
}

#[tokio::test]
async fn a_repeated_event_within_one_request_is_appended_once() {
    let s = start().await;
    create_stream(&s.base, "rep", 1).await;
    let a = r#"{"specversion":"1.0","id":"a","source":"/rep","type":"t"}"#;
    let b = r#"{"specversion":"1.0","id":"b","source":"/rep","type":"t"}"#;
    assert_eq!(placements(&post_structured(&s.base, "rep", a).await), vec![("appended".into(), 0, 0)]);
    // `a` was appended before, `b` is new and repeated: appended once, the repeat points at it.
    let answer = post_batch(&s.base, &events_path("rep"), &format!("[{a},{b},{a},{b}]")).await;
    assert_eq!(
        placements(&answer),
        vec![
            ("duplicate".into(), 0, 0),
            ("appended".into(), 0, 1),
            ("duplicate".into(), 0, 0),
            ("duplicate".into(), 0, 1)
        ]
    );
    assert_eq!(consume(&s.base, "rep", 0, "").await.header("lakestream-offsets").as_deref(), Some("0,1"));
    s.stop().await;
}

#[tokio::test]
async fn consume_honours_max_bytes_inside_one_batch_entry() {
    let s = start().await;
    let b = &s.base;
    create_stream(b, "sized", 1).await;
    // Five events of one size in one request: one entry (one record batch) of partition 0.
    // Compact JSON with data last comes back byte for byte, so each is served as `event(i)`.
    let event = |i: usize| {
        format!(
            r#"{{"specversion":"1.0","id":"e{i}","source":"/sized","type":"t","data":"{}"}}"#,
            "x".repeat(380)
        )
    };
    let events: Vec<String> = (0..5).map(event).collect();
    let size = events[0].len();
    assert!((400..500).contains(&size), "about 450 bytes each: {size}");
    let answer =
        post_batch(b, &format!("{}?partition=0", events_path("sized")), &format!("[{}]", events.join(",")))
            .await;
    assert_eq!(placements(&answer).len(), 5);

    // (from, max_bytes) → the offsets served and the next offset.
    let cases = [
        (0, size + size / 3, "0", 1),    // one fits; a second would exceed
        (1, 2 * size + 10, "1,2", 3),    // two fit
        (3, 1, "3", 4),                  // always at least one
        (0, 5 * size, "0,1,2,3,4", 5),   // exactly all five
        (0, 5 * size - 1, "0,1,2,3", 4), // one byte short of five
    ];
    for (from, max_bytes, offsets, next) in cases {
        let read = consume(b, "sized", 0, &format!("offset={from}&max_bytes={max_bytes}")).await;
        assert_eq!(read.status, StatusCode::OK);
        assert_eq!(
            read.header("lakestream-offsets").as_deref(),
            Some(offsets),
            "from {from}, max_bytes {max_bytes}"
        );
        assert_eq!(
            read.header("lakestream-next-offset"),
            Some(next.to_string()),
            "from {from}, max_bytes {max_bytes}"
        );
        let served: Vec<&str> =
            offsets.split(',').map(|o| events[o.parse::<usize>().unwrap()].as_str()).collect();
        assert_eq!(String::from_utf8_lossy(&read.body), format!("[{}]", served.join(",")));
    }
    // Binary mode serves one event whatever the budget, and the same next offset.
    let read = consume(b, "sized", 0, "offset=2&max_bytes=1&mode=binary").await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.header("lakestream-next-offset").as_deref(), Some("3"));
    s.stop().await;
}

#[tokio::test]
async fn an_invalid_datacontenttype_is_a_400_naming_datacontenttype_not_data() {
    let s = start().await;
    let b = &s.base;
    create_stream(b, "ct", 1).await;
    let ok = r#""specversion":"1.0","id":"1","source":"/s","type":"t""#;
    // Object data used to be judged against the bad content type and refused as `data`.
    for body in [
        format!(r#"{{{ok},"datacontenttype":"nonsense","data":{{"a":1}}}}"#),
        format!(r#"{{{ok},"datacontenttype":"application/json;","data":[1]}}"#),
        format!(r#"{{{ok},"datacontenttype":"nonsense","data_base64":"AAH/"}}"#),
    ] {
        for (answer, what) in [
            (post_structured(b, "ct", &body).await, "structured"),
            (post_batch(b, &events_path("ct"), &format!("[{body}]")).await, "batch"),
        ] {
            assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{what} {body}");
            let error = answer.json()["error"].clone();
            assert_eq!(error["attribute"], "datacontenttype", "{what} {body}: {error}");
            let message = error["message"].as_str().unwrap_or_default();
            assert!(message.contains("datacontenttype"), "{what} {body}: {message}");
        }
    }
    let read = consume(b, "ct", 0, "").await;
    assert_eq!(read.body, b"[]", "nothing was appended");
    s.stop().await;
}
