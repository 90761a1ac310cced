//! Conditional appends (expected next offset) and idempotent producers (producer id and
//! sequence), over HTTP and gRPC, on a dev stack (the embedded metadata store and local files)
//! and on a stack with a real Oxia server of its own (`LAKESTREAM_TEST_OXIA_BIN`, which
//! `scripts/test` sets; those tests fail without it).

use http::StatusCode;
use lakestream_server::grpc::pb;
use lakestream_server::grpc::pb::lakestream_client::LakestreamClient;
use serde_json::{Value, json};
use tonic::Code;
use tonic::transport::Channel;

mod support;

use support::Running;
use support::http_client::json_call;

/// The stack: the dev stack, or with `oxia` the metadata on that Oxia server.
async fn start(oxia: Option<&lakestream_meta_oxia::testkit::StandaloneOxia>) -> Running {
    let address = oxia.map(|o| o.address());
    support::start_with(move |config| {
        if let Some(address) = address {
            config.service.metadata = lakestream_service::config::MetadataConfig::oxia(vec![address.clone()]);
        }
    })
    .await
}

async fn client(s: &Running) -> LakestreamClient<Channel> {
    LakestreamClient::connect(format!("http://{}", s.at.grpc.expect("gRPC is served"))).await.unwrap()
}

async fn create_stream(s: &Running, name: &str) -> String {
    let (status, body) =
        json_call(&s.base, "POST", "/v1/namespaces/default/streams", json!({ "name": name })).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    format!("/v1/namespaces/default/streams/{name}/partitions/0")
}

/// The `n` entries `"{tag}-{i}"` as a produce body, plus `extra` fields.
fn entries(tag: &str, n: usize, extra: Value) -> Value {
    use base64::Engine as _;
    let entries: Vec<Value> = (0..n)
        .map(|i| json!({ "payload_base64": base64::engine::general_purpose::STANDARD.encode(format!("{tag}-{i}")) }))
        .collect();
    let mut body = json!({ "entries": entries });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    body
}

fn offsets_of(body: &Value) -> Vec<u64> {
    body["entries"].as_array().unwrap().iter().map(|e| e["offset"].as_u64().unwrap()).collect()
}

async fn next_offset(s: &Running, partition: &str) -> u64 {
    let (status, body) = json_call(&s.base, "GET", &format!("{partition}/offsets"), Value::Null).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["next_offset"].as_u64().unwrap()
}

/// Every payload of the partition, in offset order.
async fn payloads(s: &Running, partition: &str) -> Vec<String> {
    use base64::Engine as _;
    let (status, body) =
        json_call(&s.base, "GET", &format!("{partition}/entries?offset=0"), Value::Null).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(e["payload_base64"].as_str().unwrap())
                .unwrap();
            String::from_utf8(bytes).unwrap()
        })
        .collect()
}

async fn conditional_appends_over_http(s: &Running) {
    let p = create_stream(s, "cond-http").await;
    let (status, body) = json_call(
        &s.base,
        "POST",
        &format!("{p}/entries"),
        entries("a", 2, json!({ "expected_next_offset": 0 })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(offsets_of(&body), [0, 1]);
    // A stale expectation: 412 with the actual next offset, and nothing written.
    let (status, body) = json_call(
        &s.base,
        "POST",
        &format!("{p}/entries"),
        entries("b", 1, json!({ "expected_next_offset": 1 })),
    )
    .await;
    assert_eq!(status, StatusCode::PRECONDITION_FAILED, "{body}");
    assert_eq!(body["error"]["code"], "precondition_failed");
    assert_eq!(body["error"]["next_offset"], 2);
    assert_eq!(next_offset(s, &p).await, 2);
    // The query form, and a bad value.
    let (status, body) = json_call(
        &s.base,
        "POST",
        &format!("{p}/entries?expected_next_offset=2"),
        entries("c", 1, json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(offsets_of(&body), [2]);
    let (status, body) = json_call(
        &s.base,
        "POST",
        &format!("{p}/entries?expected_next_offset=-1"),
        entries("d", 1, json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // A malformed query is a JSON error like any other.
    assert_eq!(body["error"]["code"], "invalid_argument", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().starts_with("query"), "{body}");
    let (status, body) = json_call(
        &s.base,
        "POST",
        &format!("{p}/entries?expected_next_offset=3"),
        entries("d", 1, json!({ "expected_next_offset": 3 })),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().starts_with("expected_next_offset"), "{body}");
    assert_eq!(payloads(s, &p).await, ["a-0", "a-1", "c-0"]);

    // Concurrent conditional appends expecting the same next offset: exactly one wins.
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (base, p) = (s.base.clone(), p.clone());
            tokio::spawn(async move {
                json_call(
                    &base,
                    "POST",
                    &format!("{p}/entries"),
                    entries(&format!("race{i}"), 2, json!({ "expected_next_offset": 3 })),
                )
                .await
            })
        })
        .collect();
    let mut won = 0;
    for t in tasks {
        let (status, body) = t.await.unwrap();
        match status {
            StatusCode::OK => {
                won += 1;
                assert_eq!(offsets_of(&body), [3, 4]);
            }
            StatusCode::PRECONDITION_FAILED => assert_eq!(body["error"]["next_offset"], 5, "{body}"),
            other => panic!("{other}: {body}"),
        }
    }
    assert_eq!(won, 1);
    assert_eq!(next_offset(s, &p).await, 5);
}

async fn idempotent_producer_over_http(s: &Running) {
    let p = create_stream(s, "idem-http").await;
    let produce = |tag: &str, n: usize, seq: u64| {
        entries(tag, n, json!({ "producer_id": "prod-1", "producer_sequence": seq }))
    };
    let (status, body) = json_call(&s.base, "POST", &format!("{p}/entries"), produce("a", 2, 0)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(offsets_of(&body), [0, 1]);
    // A retry answers the original offsets and appends nothing.
    let (status, body) = json_call(&s.base, "POST", &format!("{p}/entries"), produce("a", 2, 0)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(offsets_of(&body), [0, 1]);
    assert_eq!(next_offset(s, &p).await, 2);
    let (status, body) = json_call(&s.base, "POST", &format!("{p}/entries"), produce("b", 1, 2)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(offsets_of(&body), [2]);

    // Refused, writing nothing: a gap, an old sequence, a retry that differs, malformed ids,
    // half of the pair.
    for (body, status, code) in [
        (produce("gap", 1, 5), StatusCode::CONFLICT, "out_of_sequence"),
        (produce("old", 2, 0), StatusCode::CONFLICT, "out_of_sequence"),
        (produce("differs", 2, 2), StatusCode::CONFLICT, "out_of_sequence"),
        (
            entries("x", 1, json!({ "producer_id": "has space", "producer_sequence": 3 })),
            StatusCode::BAD_REQUEST,
            "invalid_argument",
        ),
        (
            entries("x", 1, json!({ "producer_id": "x".repeat(65), "producer_sequence": 3 })),
            StatusCode::BAD_REQUEST,
            "invalid_argument",
        ),
        (entries("x", 1, json!({ "producer_id": "prod-1" })), StatusCode::BAD_REQUEST, "invalid_argument"),
        (entries("x", 1, json!({ "producer_sequence": 3 })), StatusCode::BAD_REQUEST, "invalid_argument"),
    ] {
        let (got, answer) = json_call(&s.base, "POST", &format!("{p}/entries"), body.clone()).await;
        assert_eq!((got, answer["error"]["code"].as_str().unwrap()), (status, code), "{body}: {answer}");
        assert!(
            answer["error"]["message"].as_str().unwrap().contains("producer_") || got == StatusCode::CONFLICT,
            "{answer}"
        );
    }
    // Another producer has its own sequence; one producer's sequences are per partition.
    let (status, body) = json_call(
        &s.base,
        "POST",
        &format!("{p}/entries"),
        entries("q", 1, json!({ "producer_id": "prod-2", "producer_sequence": 0 })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(offsets_of(&body), [3]);
    // Conditional and idempotent together: the condition is checked on a new request.
    let (status, body) = json_call(
        &s.base,
        "POST",
        &format!("{p}/entries"),
        entries(
            "r",
            1,
            json!({ "producer_id": "prod-1", "producer_sequence": 3, "expected_next_offset": 0 }),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::PRECONDITION_FAILED, "{body}");
    let (status, body) = json_call(
        &s.base,
        "POST",
        &format!("{p}/entries"),
        entries(
            "r",
            1,
            json!({ "producer_id": "prod-1", "producer_sequence": 3, "expected_next_offset": 4 }),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(offsets_of(&body), [4]);
    assert_eq!(payloads(s, &p).await, ["a-0", "a-1", "b-0", "q-0", "r-0"]);

    // Concurrent requests of one producer with one sequence: one append.
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let (base, p) = (s.base.clone(), p.clone());
            tokio::spawn(async move {
                json_call(
                    &base,
                    "POST",
                    &format!("{p}/entries"),
                    entries("same", 1, json!({ "producer_id": "prod-1", "producer_sequence": 4 })),
                )
                .await
            })
        })
        .collect();
    for t in tasks {
        let (status, body) = t.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(offsets_of(&body), [5]);
    }
    assert_eq!(next_offset(s, &p).await, 6);
}

fn grpc_produce(stream: &str, payloads: &[&str]) -> pb::ProduceRequest {
    pb::ProduceRequest {
        namespace: "default".into(),
        stream: stream.into(),
        partition: 0,
        entries: payloads
            .iter()
            .map(|p| pb::ProduceEntry { payload: p.as_bytes().to_vec().into(), record_count: None })
            .collect(),
        kafka_batches: false,
        expected_next_offset: None,
        producer_id: String::new(),
        producer_sequence: None,
    }
}

fn grpc_offsets(response: &pb::ProduceResponse) -> Vec<u64> {
    response
        .results
        .iter()
        .map(|r| match &r.result {
            Some(pb::produce_result::Result::Appended(a)) => a.offset,
            other => panic!("entry failed: {other:?}"),
        })
        .collect()
}

fn error_code(status: &tonic::Status) -> &str {
    status.metadata().get("lakestream-error-code").and_then(|v| v.to_str().ok()).unwrap_or("")
}

async fn both_over_grpc(s: &Running) {
    let mut c = client(s).await;
    let p = create_stream(s, "grpc-cond").await;
    let with = |payloads: &[&str], expect: Option<u64>, producer: Option<(&str, u64)>| {
        let mut r = grpc_produce("grpc-cond", payloads);
        r.expected_next_offset = expect;
        if let Some((id, seq)) = producer {
            r.producer_id = id.into();
            r.producer_sequence = Some(seq);
        }
        r
    };
    let ok = c.produce(with(&["a", "b"], Some(0), None)).await.unwrap().into_inner();
    assert_eq!(grpc_offsets(&ok), [0, 1]);
    let refused = c.produce(with(&["c"], Some(0), None)).await.unwrap_err();
    assert_eq!((refused.code(), error_code(&refused)), (Code::FailedPrecondition, "precondition_failed"));
    assert_eq!(refused.metadata().get("lakestream-next-offset").unwrap(), "2");

    let first = c.produce(with(&["p0", "p1"], None, Some(("g-1", 0)))).await.unwrap().into_inner();
    assert_eq!(grpc_offsets(&first), [2, 3]);
    let retry = c.produce(with(&["p0", "p1"], None, Some(("g-1", 0)))).await.unwrap().into_inner();
    assert_eq!(grpc_offsets(&retry), [2, 3]);
    let gap = c.produce(with(&["p9"], None, Some(("g-1", 9)))).await.unwrap_err();
    assert_eq!((gap.code(), error_code(&gap)), (Code::FailedPrecondition, "out_of_sequence"));
    assert!(gap.message().contains("next expected sequence is 2"), "{}", gap.message());
    let malformed = c.produce(with(&["x"], None, Some(("bad/id", 0)))).await.unwrap_err();
    assert_eq!(malformed.code(), Code::InvalidArgument);
    assert!(malformed.message().starts_with("producer_id"), "{}", malformed.message());
    let mut half = grpc_produce("grpc-cond", &["x"]);
    half.producer_sequence = Some(2);
    let half = c.produce(half).await.unwrap_err();
    assert_eq!(half.code(), Code::InvalidArgument);
    let next = c.produce(with(&["p2"], Some(4), Some(("g-1", 2)))).await.unwrap().into_inner();
    assert_eq!(grpc_offsets(&next), [4]);
    assert_eq!(payloads(s, &p).await, ["a", "b", "p0", "p1", "p2"]);
}

#[tokio::test]
async fn conditional_and_idempotent_appends_on_the_dev_stack() {
    let s = start(None).await;
    conditional_appends_over_http(&s).await;
    idempotent_producer_over_http(&s).await;
    both_over_grpc(&s).await;
    s.stop().await;
}

#[tokio::test]
async fn conditional_and_idempotent_appends_on_oxia() {
    let oxia = lakestream_meta_oxia::testkit::StandaloneOxia::start(4, &[]).await;
    let s = start(Some(&oxia)).await;
    conditional_appends_over_http(&s).await;
    idempotent_producer_over_http(&s).await;
    both_over_grpc(&s).await;
    s.stop().await;
}

/// A producer whose request was left pending (as by a crash before its index put) is
/// resolved from the index: a retry after the server restarted appends it exactly once.
#[tokio::test]
async fn a_pending_request_without_an_index_put_is_appended_once_on_retry() {
    use lakestream_service::producers::{ProducerId, ProducerState, StateRecord, pending};
    let s = start(None).await;
    let p = create_stream(&s, "pending").await;
    let (status, body) = json_call(
        &s.base,
        "POST",
        &format!("{p}/entries"),
        entries("a", 1, json!({ "producer_id": "crashy", "producer_sequence": 0 })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Leave sequence 1 pending with an object that was never published.
    let log = s.stack.catalog.get_stream("default", "pending").await.unwrap().log_ref(0).unwrap().log_id;
    let record = StateRecord::new(s.stack.meta.clone(), log, &ProducerId::parse("crashy").unwrap());
    let (state, version) = record.read().await.unwrap();
    assert_eq!(state.next_sequence, 1);
    let mut stuck: ProducerState = pending(&state, 1, 1, 1);
    if let Some(last) = stuck.last.as_mut()
        && let lakestream_service::producers::RequestState::Pending { object, .. } = &mut last.state
    {
        *object = Some("never-published".into());
    }
    record.write(&stuck, version).await.unwrap();
    // The retry finds no index record of that object, so it appends; its own retry is a duplicate.
    for _ in 0..2 {
        let (status, body) = json_call(
            &s.base,
            "POST",
            &format!("{p}/entries"),
            entries("b", 1, json!({ "producer_id": "crashy", "producer_sequence": 1 })),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(offsets_of(&body), [1]);
    }
    // Left pending after a put that did commit: the retry finds it and appends nothing.
    let (status, body) = json_call(
        &s.base,
        "POST",
        &format!("{p}/entries"),
        entries("c", 1, json!({ "producer_id": "crashy", "producer_sequence": 2 })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let index = s
        .stack
        .meta
        .scan(&log.0.to_string(), &format!("{:020}-", log.0), &format!("{:020}.", log.0), None)
        .await
        .unwrap();
    let last = index.last().unwrap();
    let object = match lakestream_format::entry_index::decode(&last.value).unwrap() {
        lakestream_format::entry_index::IndexValue::Raw(raw) => raw.location,
        other => panic!("{other:?}"),
    };
    let (current, current_version) = record.read().await.unwrap();
    let mut committed_but_pending = pending(&ProducerState { next_sequence: 2, ..current }, 2, 1, 2);
    if let Some(last) = committed_but_pending.last.as_mut()
        && let lakestream_service::producers::RequestState::Pending { object: slot, .. } = &mut last.state
    {
        *slot = Some(object);
    }
    record.write(&committed_but_pending, current_version).await.unwrap();
    let (status, body) = json_call(
        &s.base,
        "POST",
        &format!("{p}/entries"),
        entries("c", 1, json!({ "producer_id": "crashy", "producer_sequence": 2 })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(offsets_of(&body), [2]);
    assert_eq!(payloads(&s, &p).await, ["a-0", "b-0", "c-0"]);
    s.stop().await;
}

/// Idle producers' states expire: a sweep deletes the states of one partition that nothing
/// wrote for the expiry (paging past 1,000 of them), keeps those of other partitions, and a
/// producer that comes back starts again at sequence 0.
async fn idle_producer_states_expire(s: &Running) {
    use lakestream_service::producers::{ProducerId, ProducerState, StateRecord, expire_idle};
    const DAY_MS: i64 = 24 * 3600 * 1000;
    let p = create_stream(s, "expiry").await;
    let other = create_stream(s, "expiry-other").await;
    let produce = |tag: &str, producer: &str, sequence: u64| {
        entries(tag, 1, json!({ "producer_id": producer, "producer_sequence": sequence }))
    };
    for partition in [&p, &other] {
        let (status, body) =
            json_call(&s.base, "POST", &format!("{partition}/entries"), produce("a", "back", 0)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let log_of = |name: &'static str| async move {
        s.stack.catalog.get_stream("default", name).await.unwrap().log_ref(0).unwrap().log_id
    };
    let (log, other_log) = (log_of("expiry").await, log_of("expiry-other").await);
    // Enough more states that the sweep reads them in pages.
    for i in 0..1_001 {
        let id = ProducerId::parse(&format!("bulk-{i:04}")).unwrap();
        StateRecord::new(s.stack.meta.clone(), log, &id)
            .write(&ProducerState::default(), None)
            .await
            .unwrap();
    }
    let meta = s.stack.meta.as_ref();
    let now = s.stack.clock.now_ms();
    // Nothing is idle yet.
    let fresh = expire_idle(meta, log, now, 7 * DAY_MS).await.unwrap();
    assert_eq!((fresh.scanned, fresh.expired), (1_002, 0));
    // Eight days on, every state of the partition goes, and only those.
    let swept = expire_idle(meta, log, now + 8 * DAY_MS, 7 * DAY_MS).await.unwrap();
    assert_eq!((swept.scanned, swept.expired, swept.raced), (1_002, 1_002, 0));
    assert_eq!(expire_idle(meta, log, now + 8 * DAY_MS, 7 * DAY_MS).await.unwrap().scanned, 0);
    let kept = StateRecord::new(s.stack.meta.clone(), other_log, &ProducerId::parse("back").unwrap());
    assert_eq!(kept.read().await.unwrap().0.next_sequence, 1, "another partition's state was swept");
    // The producer that comes back starts again at 0: sequence 1 is refused naming 0.
    let (status, body) = json_call(&s.base, "POST", &format!("{p}/entries"), produce("b", "back", 1)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "out_of_sequence", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("the next expected sequence is 0"), "{body}");
    assert!(message.contains("no state on this partition"), "{body}");
    let (status, body) = json_call(&s.base, "POST", &format!("{p}/entries"), produce("b", "back", 0)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(offsets_of(&body), [1]);
}

#[tokio::test]
async fn idle_producer_states_expire_on_the_dev_stack() {
    let s = start(None).await;
    idle_producer_states_expire(&s).await;
    s.stop().await;
}

#[tokio::test]
async fn idle_producer_states_expire_on_oxia() {
    let oxia = lakestream_meta_oxia::testkit::StandaloneOxia::start(4, &[]).await;
    let s = start(Some(&oxia)).await;
    idle_producer_states_expire(&s).await;
    s.stop().await;
}
