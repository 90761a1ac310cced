//! The HTTP API over a real stack: the embedded metadata store and the local filesystem in a
//! temporary directory, served on a loopback port and driven over TCP.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use http::StatusCode;
use lakestream_service::Stack;
use serde_json::{Value, json};
use support::TestConfig;

mod support;

use support::Running;
use support::http_client::{self, json_call};

async fn start() -> Running {
    start_with(|_| {}).await
}

/// A dev stack with the tests' small limits and whatever `configure` changes.
async fn start_with(configure: impl FnOnce(&mut TestConfig)) -> Running {
    support::start_with(|config| {
        config.server.http.max_body_bytes = 64 * 1024;
        config.service.writer.max_entry_bytes = 32 * 1024;
        config.service.writer.max_in_flight_bytes = 1 << 20;
        configure(config);
    })
    .await
}

/// A request with a content type; the answer's status, headers (as text) and body.
async fn call(
    base: &str,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> (StatusCode, Vec<(String, String)>, Vec<u8>) {
    call_as(base, method, path, content_type, body, None).await
}

/// [`call`] with an optional bearer token.
async fn call_as(
    base: &str,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
    token: Option<&str>,
) -> (StatusCode, Vec<(String, String)>, Vec<u8>) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("content-type", content_type.as_bytes())];
    if let Some(auth) = &auth {
        headers.push(("authorization", auth.as_bytes()));
    }
    let answer = http_client::call(base, method, path, &headers, body).await;
    let headers =
        answer.headers.iter().map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned())).collect();
    (answer.status, headers, answer.body)
}

#[tokio::test]
async fn produce_fetch_trim_over_http() {
    let s = start().await;
    let b = &s.base;
    let (status, stream) =
        json_call(b, "POST", "/v1/namespaces/default/streams", json!({"name": "orders", "partitions": 2}))
            .await;
    assert_eq!(status, StatusCode::CREATED, "{stream}");
    assert_eq!(stream["partitions"], 2);

    // A JSON batch of entries.
    let body = json!({"entries": [
        {"payload_base64": BASE64.encode(b"first"), "record_count": 2},
        {"payload_base64": BASE64.encode(b"second")},
    ]});
    let (status, answer) =
        json_call(b, "POST", "/v1/namespaces/default/streams/orders/partitions/1/entries", body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let offsets: Vec<u64> =
        answer["entries"].as_array().unwrap().iter().map(|e| e["offset"].as_u64().unwrap()).collect();
    let mut sorted = offsets.clone();
    sorted.sort();
    assert!(sorted == vec![0, 1] || sorted == vec![0, 2], "{offsets:?}");

    // A raw single entry.
    let (status, _, raw) = call(
        b,
        "POST",
        "/v1/namespaces/default/streams/orders/partitions/1/entries?record_count=3",
        "application/octet-stream",
        b"\x00raw\xff",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&raw));

    let (status, fetched) = json_call(
        b,
        "GET",
        "/v1/namespaces/default/streams/orders/partitions/1/entries?offset=0",
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let entries = fetched["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(fetched["next_offset"], 6);
    assert_eq!(BASE64.decode(entries[2]["payload_base64"].as_str().unwrap()).unwrap(), b"\x00raw\xff");

    let (_, offs) =
        json_call(b, "GET", "/v1/namespaces/default/streams/orders/partitions/1/offsets", Value::Null).await;
    assert_eq!((offs["first_offset"].as_u64(), offs["next_offset"].as_u64()), (Some(0), Some(6)));

    let (status, trimmed) = json_call(
        b,
        "POST",
        "/v1/namespaces/default/streams/orders/partitions/1/trim",
        json!({"through": 1}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{trimmed}");
    assert_eq!(trimmed["trim_marker"], 2);

    let (_, metrics, text) = call(b, "GET", "/metrics", "text/plain", b"").await;
    assert!(
        metrics.iter().any(|(k, v)| k == "x-request-id" && !v.is_empty()),
        "every response carries its request id"
    );
    assert!(metrics.iter().any(|(k, v)| k == "content-type" && v.starts_with("text/plain")));
    assert!(String::from_utf8_lossy(&text).contains("lakestream_appended_entries_total 3"));
    stop(s).await;
}

#[tokio::test]
async fn errors_have_precise_status_codes_and_name_the_problem() {
    let s = start().await;
    let b = &s.base;
    json_call(b, "POST", "/v1/namespaces/default/streams", json!({"name": "t"})).await;

    // 404: unknown stream, unknown partition.
    let (status, e) =
        json_call(b, "GET", "/v1/namespaces/default/streams/nope/partitions/0/entries", Value::Null).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{e}");
    let (status, e) =
        json_call(b, "GET", "/v1/namespaces/default/streams/t/partitions/7/offsets", Value::Null).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("no partition 7"));

    // 400: malformed fields, named.
    let (status, e) = json_call(
        b,
        "POST",
        "/v1/namespaces/default/streams/t/partitions/0/entries",
        json!({"entries": [{"payload_base64": "!!"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(e["error"]["message"].as_str().unwrap().contains("entries[0].payload_base64"), "{e}");
    let (status, e) = json_call(b, "POST", "/v1/namespaces/default/streams", json!({"name": "a/b"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{e}");
    let (status, _) =
        json_call(b, "POST", "/v1/namespaces/default/streams/t/partitions/x/entries", json!({})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // 413: an entry over the limit, and a body over the limit; nothing is written.
    let big = vec![7u8; 40 * 1024];
    let (status, _, _) = call(
        b,
        "POST",
        "/v1/namespaces/default/streams/t/partitions/0/entries",
        "application/octet-stream",
        &big,
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let huge = vec![7u8; 80 * 1024];
    let (status, _, _) = call(
        b,
        "POST",
        "/v1/namespaces/default/streams/t/partitions/0/entries",
        "application/octet-stream",
        &huge,
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let (_, offs) =
        json_call(b, "GET", "/v1/namespaces/default/streams/t/partitions/0/offsets", Value::Null).await;
    assert_eq!(offs["next_offset"], 0, "nothing may be written by refused requests");

    // A stream this process's writer wrote to can be dropped: the writer gives up its unused
    // leases, so the deletion's drain does not time out (it waited 30 s, then answered 409).
    let (status, _, _) = call(
        b,
        "POST",
        "/v1/namespaces/default/streams/t/partitions/0/entries",
        "application/octet-stream",
        b"written",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // 409: a dropped identity cannot be created again.
    let (status, _) = json_call(b, "DELETE", "/v1/namespaces/default/streams/t", Value::Null).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, e) = json_call(b, "POST", "/v1/namespaces/default/streams", json!({"name": "t"})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{e}");
    stop(s).await;
}

async fn stop(s: Running) {
    s.stop().await;
}

#[tokio::test]
async fn acknowledged_entries_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = TestConfig::dev(dir.path());
    config.service.writer.flush_window = Duration::from_millis(2);
    {
        let stack = Stack::open(&config.service).await.unwrap();
        let stream = stack.catalog.create_stream("default", "durable", 1, Default::default()).await.unwrap();
        let w = stack.writer.clone().unwrap();
        for i in 0..5u8 {
            w.append(stream.logs[0], bytes::Bytes::from(vec![i; 10]), 1).await.unwrap();
        }
        stack.close().await;
    }
    let stack = Stack::open(&config.service).await.unwrap();
    let stream = stack.catalog.get_stream("default", "durable").await.unwrap();
    let batch = stack
        .reader
        .clone()
        .unwrap()
        .read(&stream.log_ref(0).unwrap(), 0, 1 << 20, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(batch.entries.len(), 5);
    assert_eq!(batch.entries[4].payload.as_ref(), &[4u8; 10]);
    stack.close().await;
}

#[tokio::test]
async fn the_compactor_role_compacts_in_the_background_and_reads_stay_identical() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = TestConfig::dev(dir.path());
    config.service.writer.flush_window = Duration::from_millis(2);
    config.service.compactor.max_range_age = Duration::from_millis(200);
    config.service.compactor_schedule.interval = Duration::from_millis(100);
    let service = lakestream_service::Service::start(&config.service).await.unwrap();
    let stack = service.api().stack().clone();
    let stream = stack.catalog.create_stream("default", "compacted", 1, Default::default()).await.unwrap();
    let log = stream.log_ref(0).unwrap();
    let w = stack.writer.clone().unwrap();
    for i in 0..20u32 {
        w.append(log.log_id, bytes::Bytes::from(format!("entry-{i}")), 1 + i % 3).await.unwrap();
    }
    let reader = stack.reader.clone().unwrap();
    let before = reader.read(&log, 0, 1 << 20, Duration::ZERO).await.unwrap().entries;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
    let serving = tokio::spawn(async move {
        let on_listening = move |at: lakestream_server::Listening| {
            let _ = addr_tx.send(at.http);
        };
        lakestream_server::run(&config.server, service, Vec::new(), on_listening, async move {
            let _ = stop_rx.await;
        })
        .await
    });
    let base = format!("http://{}", addr_rx.await.unwrap());
    // Wait (bounded) until the log's records are PARQUET records.
    let p = lakestream_format::keys::partition(log.log_id);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let records = stack
            .meta
            .scan(
                &p,
                &lakestream_format::keys::first_key(log.log_id),
                &lakestream_format::keys::last_key(log.log_id),
                None,
            )
            .await
            .unwrap();
        let parquet = records.iter().all(|r| {
            matches!(
                lakestream_format::entry_index::decode(&r.value),
                Ok(lakestream_format::entry_index::IndexValue::Parquet(_))
            )
        });
        if parquet && !records.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the compactor role did not compact the log within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let fresh = lakestream_reader::Reader::new(
        lakestream_reader::ReaderConfig::default(),
        lakestream_reader::ReaderDeps {
            meta: stack.meta.clone(),
            wal: stack.wal.clone(),
            compacted: stack.compacted.clone(),
        },
    )
    .unwrap();
    let after = fresh.read(&log, 0, 1 << 20, Duration::ZERO).await.unwrap().entries;
    assert_eq!(after, before, "compaction keeps every entry's bytes, offsets and timestamps");
    // The pass is in the metrics: ranges compacted, and the log's gauges with nothing left.
    let labels = format!("{{namespace=\"default\",stream=\"compacted\",log=\"{}\"}}", log.log_id);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, _, metrics) = call(&base, "GET", "/metrics", "text/plain", b"").await;
        let metrics = String::from_utf8(metrics).unwrap();
        let compacted = metrics
            .lines()
            .find_map(|l| l.strip_prefix("lakestream_compaction_ranges_total "))
            .is_some_and(|v| v.trim() != "0");
        if compacted && metrics.contains(&format!("lakestream_compaction_lag_bytes{labels} 0")) {
            assert!(metrics.contains(&format!("lakestream_trim_marker{labels} 0")), "{metrics}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no compaction in the metrics within 30 s: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop_tx.send(()).unwrap();
    serving.await.unwrap().unwrap();
}

#[tokio::test]
async fn kafka_record_batches_are_validated_and_counted_by_the_binding() {
    let s = start().await;
    let b = &s.base;
    json_call(b, "POST", "/v1/namespaces/default/streams", json!({"name": "topic-a"})).await;
    let vectors =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../lakestream-format/tests/vectors/kafka");
    let three = std::fs::read(vectors.join("v2_three_batches.bin")).unwrap();
    let path = "/v1/namespaces/default/streams/topic-a/partitions/0/entries";
    let (status, _, body) = call(b, "POST", path, "application/vnd.kafka.record-batch", &three).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let answer: Value = serde_json::from_slice(&body).unwrap();
    let expected = lakestream_format::kafka::count_records(&three).unwrap();
    assert_eq!(answer["entries"][0]["record_count"], expected);
    // A control batch is refused by the binding, and nothing is written.
    let control = std::fs::read(vectors.join("v2_control.bin")).unwrap();
    let (status, _, body) = call(b, "POST", path, "application/vnd.kafka.record-batch", &control).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{}", String::from_utf8_lossy(&body));
    let (_, offs) =
        json_call(b, "GET", "/v1/namespaces/default/streams/topic-a/partitions/0/offsets", Value::Null).await;
    assert_eq!(offs["next_offset"], u64::from(expected));
    stop(s).await;
}

#[tokio::test]
async fn bearer_tokens_guard_every_namespace_and_refused_requests_write_nothing() {
    let s = start_with(|config| {
        config.service.auth = toml::from_str(
            r#"
            [[tokens]]
            name = "ops"
            token = "ops-token-0123456789"
            namespaces = { "*" = "admin" }
            [[tokens]]
            name = "team-a"
            token = "team-a-token-0123456789"
            namespaces = { a = "write" }
            [[tokens]]
            name = "reader"
            token = "reader-token-0123456789"
            namespaces = { default = "read" }
            "#,
        )
        .unwrap();
    })
    .await;
    let b = &s.base;
    let create = br#"{"name":"guarded"}"#;
    let (status, _, _) = call_as(
        b,
        "POST",
        "/v1/namespaces/default/streams",
        "application/json",
        create,
        Some("ops-token-0123456789"),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let produce = "/v1/namespaces/default/streams/guarded/partitions/0/entries";
    let offsets = "/v1/namespaces/default/streams/guarded/partitions/0/offsets";

    // Unauthenticated and wrong-namespace writes are refused; nothing is written.
    let (status, headers, _) = call_as(b, "POST", produce, "application/octet-stream", b"x", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(headers.iter().any(|(k, v)| k == "www-authenticate" && v == "Bearer"));
    let (status, _, _) =
        call_as(b, "POST", produce, "application/octet-stream", b"x", Some("wrong-token-0123456789")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, body) =
        call_as(b, "POST", produce, "application/octet-stream", b"x", Some("team-a-token-0123456789")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{}", String::from_utf8_lossy(&body));
    let (status, _, _) =
        call_as(b, "POST", produce, "application/octet-stream", b"x", Some("reader-token-0123456789")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "read does not allow produce");
    let (status, _, body) =
        call_as(b, "GET", offsets, "text/plain", b"", Some("reader-token-0123456789")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["next_offset"],
        0,
        "refused requests wrote nothing"
    );

    // The right token writes; stream administration needs admin.
    let (status, _, _) =
        call_as(b, "POST", produce, "application/octet-stream", b"x", Some("ops-token-0123456789")).await;
    assert_eq!(status, StatusCode::OK);
    let create = br#"{"name":"more"}"#;
    let (status, _, _) = call_as(
        b,
        "POST",
        "/v1/namespaces/default/streams",
        "application/json",
        create,
        Some("reader-token-0123456789"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Operations endpoints need no token.
    let (status, _, _) = call_as(b, "GET", "/healthz", "text/plain", b"", None).await;
    assert_eq!(status, StatusCode::OK);
    stop(s).await;
}

#[tokio::test]
async fn a_process_without_the_catalog_role_refuses_catalog_changes_but_resolves_streams() {
    // `lakestream writer` serves only the writer role: streams are created elsewhere.
    let s = start_with(|c| {
        c.service.roles.catalog = false;
        c.service.roles.reader = false;
        c.service.roles.compactor = false;
    })
    .await;
    let b = &s.base;
    let (status, e) = json_call(b, "POST", "/v1/namespaces/default/streams", json!({"name": "w"})).await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("catalog role"), "{e}");
    let (status, _) = json_call(b, "GET", "/v1/namespaces/default/streams", Value::Null).await;
    assert_eq!(status, StatusCode::OK, "reading the catalog needs no catalog role");
    let (status, _) =
        json_call(b, "GET", "/v1/namespaces/default/streams/w/partitions/0/entries", Value::Null).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "the stream does not exist; fetches are not served either way");
    stop(s).await;
}
