//! The gRPC API over a real stack: the embedded metadata store and the local filesystem in a
//! temporary directory, served on loopback ports and driven over TCP with the generated client.

use std::time::Duration;

use lakestream_server::grpc::pb;
use lakestream_server::grpc::pb::lakestream_client::LakestreamClient;
use support::TestConfig;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

mod support;

use support::Running;
use support::http_client::get_ok;

impl Running {
    async fn client(&self) -> LakestreamClient<Channel> {
        let addr = self.at.grpc.expect("gRPC is served");
        LakestreamClient::connect(format!("http://{addr}")).await.unwrap()
    }
}

async fn start() -> Running {
    start_with(|_| {}).await
}

/// A dev stack with the tests' small limits and whatever `configure` changes.
async fn start_with(configure: impl FnOnce(&mut TestConfig)) -> Running {
    support::start_with(|config| {
        config.server.grpc.max_message_bytes = 64 * 1024;
        config.service.writer.max_entry_bytes = 32 * 1024;
        configure(config);
    })
    .await
}

fn with_token<T>(message: T, token: Option<&str>) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(t) = token {
        request.metadata_mut().insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    request
}

fn error_code(status: &Status) -> &str {
    status.metadata().get("lakestream-error-code").and_then(|v| v.to_str().ok()).unwrap_or("")
}

fn entry(payload: &[u8], record_count: Option<u32>) -> pb::ProduceEntry {
    pb::ProduceEntry { payload: payload.to_vec().into(), record_count }
}

fn produce(ns: &str, stream: &str, entries: Vec<pb::ProduceEntry>) -> pb::ProduceRequest {
    pb::ProduceRequest {
        namespace: ns.into(),
        stream: stream.into(),
        partition: 0,
        entries,
        kafka_batches: false,
        ..Default::default()
    }
}

fn offsets_of(ns: &str, stream: &str) -> pb::GetOffsetsRequest {
    pb::GetOffsetsRequest { namespace: ns.into(), stream: stream.into(), partition: 0 }
}

fn fetch_from(ns: &str, stream: &str, offset: u64) -> pb::FetchRequest {
    pb::FetchRequest {
        namespace: ns.into(),
        stream: stream.into(),
        partition: 0,
        offset,
        max_bytes: None,
        max_wait_ms: 0,
    }
}

fn acks(response: &pb::ProduceResponse) -> Vec<pb::Appended> {
    response
        .results
        .iter()
        .map(|r| match &r.result {
            Some(pb::produce_result::Result::Appended(a)) => *a,
            other => panic!("entry failed: {other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn every_rpc_works_and_produce_then_fetch_returns_identical_bytes_and_offsets() {
    let s = start().await;
    let mut c = s.client().await;

    let ns = c
        .create_namespace(pb::CreateNamespaceRequest {
            name: "g".into(),
            properties: [("team".to_string(), "a".to_string())].into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((ns.name.as_str(), ns.properties["team"].as_str()), ("g", "a"));
    let page = c.list_namespaces(pb::ListNamespacesRequest { after: None, limit: Some(1) }).await.unwrap();
    let page = page.into_inner();
    assert_eq!(page.namespaces.len(), 1);
    let rest = c
        .list_namespaces(pb::ListNamespacesRequest { after: page.next_page.clone(), limit: None })
        .await
        .unwrap()
        .into_inner();
    let mut names: Vec<String> =
        page.namespaces.iter().chain(&rest.namespaces).map(|n| n.name.clone()).collect();
    names.sort();
    assert_eq!(names, ["default", "g"]);

    let created = c
        .create_stream(pb::CreateStreamRequest {
            namespace: "g".into(),
            name: "orders".into(),
            partitions: Some(2),
            properties: Default::default(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((created.partitions, created.log_ids.len()), (2, 2));
    let got = c
        .get_stream(pb::GetStreamRequest { namespace: "g".into(), stream: "orders".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got, created);
    let grown = c
        .add_partitions(pb::AddPartitionsRequest {
            namespace: "g".into(),
            stream: "orders".into(),
            growth: Some(pb::add_partitions_request::Growth::To(3)),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(grown.partitions, 3);
    let listed = c
        .list_streams(pb::ListStreamsRequest { namespace: "g".into(), after: None, limit: None })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.streams, vec![grown]);
    assert_eq!(listed.next_page, None);

    // Produce a batch; fetch returns the same bytes at the acknowledged offsets.
    let payloads: Vec<Vec<u8>> = vec![b"first".to_vec(), vec![0u8, 255, 1, 254], vec![b'x'; 5000]];
    let counts = [1u32, 3, 2];
    let entries = payloads.iter().zip(counts).map(|(p, n)| entry(p, Some(n))).collect();
    let answer = c.produce(produce("g", "orders", entries)).await.unwrap().into_inner();
    let acked = acks(&answer);
    assert_eq!(
        acked.iter().map(|a| (a.offset, a.record_count)).collect::<Vec<_>>(),
        [(0, 1), (1, 3), (4, 2)]
    );
    let fetched = c.fetch(fetch_from("g", "orders", 0)).await.unwrap().into_inner();
    assert_eq!(fetched.next_offset, 6);
    assert_eq!(fetched.trim_marker, 0);
    assert_eq!(fetched.entries.len(), 3);
    for ((e, a), p) in fetched.entries.iter().zip(&acked).zip(&payloads) {
        assert_eq!((e.offset, e.record_count, e.timestamp_ms), (a.offset, a.record_count, a.timestamp_ms));
        assert_eq!(&e.payload[..], &p[..]);
    }
    // From the middle of an entry: that whole entry.
    let mid = c.fetch(fetch_from("g", "orders", 2)).await.unwrap().into_inner();
    assert_eq!(mid.entries[0].offset, 1);

    // A long-poll fetch at the tail wakes up for a new entry.
    let mut tail = fetch_from("g", "orders", 6);
    tail.max_wait_ms = 5_000;
    let mut c2 = c.clone();
    let waiting = tokio::spawn(async move { c2.fetch(tail).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    c.produce(produce("g", "orders", vec![entry(b"late", None)])).await.unwrap();
    let woke = waiting.await.unwrap().unwrap().into_inner();
    assert_eq!((woke.entries[0].offset, &woke.entries[0].payload[..]), (6, &b"late"[..]));

    // Kafka record batches: validated and counted by the binding.
    let vectors =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../lakestream-format/tests/vectors/kafka");
    let three = std::fs::read(vectors.join("v2_three_batches.bin")).unwrap();
    let records = lakestream_format::kafka::count_records(&three).unwrap();
    let mut kafka = produce("g", "orders", vec![entry(&three, None)]);
    kafka.kafka_batches = true;
    let answer = c.produce(kafka).await.unwrap().into_inner();
    assert_eq!(acks(&answer)[0].record_count, records);

    let offsets = c.get_offsets(offsets_of("g", "orders")).await.unwrap().into_inner();
    assert_eq!((offsets.first_offset, offsets.next_offset), (0, 7 + u64::from(records)));
    let trimmed = c
        .trim(pb::TrimRequest { namespace: "g".into(), stream: "orders".into(), partition: 0, through: 3 })
        .await
        .unwrap()
        .into_inner();
    assert!(trimmed.advanced);
    assert_eq!(trimmed.trim_marker, 4, "trims whole entries: through 3 ends the entry at 1..4");
    let after = c.fetch(fetch_from("g", "orders", 0)).await.unwrap().into_inner();
    assert_eq!((after.trim_marker, after.entries[0].offset), (4, 4));

    // Drop a stream this process has not written (dropping a log the local writer still
    // leases waits for the lease to go; that is the catalog's business, not the API's).
    c.create_stream(pb::CreateStreamRequest {
        namespace: "g".into(),
        name: "scratch".into(),
        partitions: None,
        properties: Default::default(),
    })
    .await
    .unwrap();
    c.drop_stream(pb::DropStreamRequest { namespace: "g".into(), stream: "scratch".into() }).await.unwrap();
    let left = c
        .list_streams(pb::ListStreamsRequest { namespace: "g".into(), after: None, limit: None })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(left.streams.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["orders"]);

    // ProduceCloudEvents: a protobuf batch and a JSON batch, deduplicated on source + id.
    c.create_stream(pb::CreateStreamRequest {
        namespace: "default".into(),
        name: "ce".into(),
        partitions: Some(1),
        ..Default::default()
    })
    .await
    .unwrap();
    use lakestream_server::grpc::proto::io::cloudevents::v1 as ce;
    let event = |id: &str| ce::CloudEvent {
        id: id.into(),
        source: "/grpc/test".into(),
        spec_version: "1.0".into(),
        r#type: "dev.lakestream.test".into(),
        data: Some(ce::cloud_event::Data::TextData(format!("payload {id}"))),
        ..Default::default()
    };
    let produce = |events| pb::ProduceCloudEventsRequest {
        namespace: "default".into(),
        stream: "ce".into(),
        partition: None,
        events: Some(events),
    };
    let batch = pb::produce_cloud_events_request::Events::Batch(ce::CloudEventBatch {
        events: vec![event("a"), event("b")],
    });
    let first = c.produce_cloud_events(produce(batch.clone())).await.unwrap().into_inner().results;
    assert_eq!(
        first.iter().map(|r| (r.id.as_str(), r.offset, r.duplicate)).collect::<Vec<_>>(),
        [("a", 0, false), ("b", 1, false)]
    );
    // A retry answers the original offsets and appends nothing; a JSON batch mixes old and new.
    let again = c.produce_cloud_events(produce(batch)).await.unwrap().into_inner().results;
    assert!(again.iter().all(|r| r.duplicate), "{again:?}");
    assert_eq!(again.iter().map(|r| r.offset).collect::<Vec<_>>(), [0, 1]);
    let json = br#"[{"specversion":"1.0","id":"b","source":"/grpc/test","type":"t"},{"specversion":"1.0","id":"c","source":"/grpc/test","type":"t"}]"#;
    let mixed = c
        .produce_cloud_events(produce(pb::produce_cloud_events_request::Events::JsonBatch(
            json.to_vec().into(),
        )))
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(
        mixed.iter().map(|r| (r.id.as_str(), r.offset, r.duplicate)).collect::<Vec<_>>(),
        [("b", 1, true), ("c", 2, false)]
    );
    let offsets = c
        .get_offsets(pb::GetOffsetsRequest { namespace: "default".into(), stream: "ce".into(), partition: 0 })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(offsets.next_offset, 3, "three events appended, duplicates not");
    // An invalid event is refused naming the attribute, and nothing is written.
    let bad = br#"[{"specversion":"0.3","id":"d","source":"/grpc/test","type":"t"}]"#;
    let err = c
        .produce_cloud_events(produce(pb::produce_cloud_events_request::Events::JsonBatch(
            bad.to_vec().into(),
        )))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("specversion"), "{err:?}");
    s.stop().await;
}

#[tokio::test]
async fn errors_carry_precise_codes_and_name_the_problem() {
    let s = start().await;
    let mut c = s.client().await;
    let stream = |name: &str| pb::CreateStreamRequest {
        namespace: "default".into(),
        name: name.into(),
        partitions: None,
        properties: Default::default(),
    };
    c.create_stream(stream("t")).await.unwrap();

    // NOT_FOUND: unknown stream, unknown partition.
    let err = c.fetch(fetch_from("default", "nope", 0)).await.unwrap_err();
    assert_eq!((err.code(), error_code(&err)), (Code::NotFound, "not_found"), "{err:?}");
    let mut p7 = offsets_of("default", "t");
    p7.partition = 7;
    let err = c.get_offsets(p7).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains("no partition 7"), "{err:?}");

    // INVALID_ARGUMENT naming the field.
    let err = c.produce(produce("default", "t", vec![entry(b"x", Some(0))])).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("entries[0].record_count"), "{err:?}");
    let mut zero = fetch_from("default", "t", 0);
    zero.max_bytes = Some(0);
    let err = c.fetch(zero).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().starts_with("max_bytes"), "{err:?}");
    let err = c.produce(produce("default", "t", vec![])).await.unwrap_err();
    assert!(err.message().starts_with("entries"), "{err:?}");
    let err = c.create_stream(stream("a/b")).await.unwrap_err();
    assert_eq!((err.code(), error_code(&err)), (Code::InvalidArgument, "invalid_argument"), "{err:?}");
    let err = c
        .add_partitions(pb::AddPartitionsRequest {
            namespace: "default".into(),
            stream: "t".into(),
            growth: None,
        })
        .await
        .unwrap_err();
    assert!(err.message().contains("`to`"), "{err:?}");

    // RESOURCE_EXHAUSTED: an entry over the largest entry, and a message over the transport's
    // limit (refused before decoding); nothing is written by either.
    let err = c.produce(produce("default", "t", vec![entry(&[7u8; 40 * 1024], None)])).await.unwrap_err();
    assert_eq!((err.code(), error_code(&err)), (Code::ResourceExhausted, "too_large"), "{err:?}");
    assert!(err.message().contains("entries[0]"), "{err:?}");
    let err = c.produce(produce("default", "t", vec![entry(&[7u8; 80 * 1024], None)])).await.unwrap_err();
    assert_eq!((err.code(), error_code(&err)), (Code::ResourceExhausted, "too_large"), "{err:?}");
    let o = c.get_offsets(offsets_of("default", "t")).await.unwrap().into_inner();
    assert_eq!(o.next_offset, 0, "refused requests write nothing");

    // ALREADY_EXISTS for a live name; FAILED_PRECONDITION for a dropped stream, which can be
    // neither written nor created again.
    let err = c.create_stream(stream("t")).await.unwrap_err();
    assert_eq!((err.code(), error_code(&err)), (Code::AlreadyExists, "conflict"), "{err:?}");
    c.drop_stream(pb::DropStreamRequest { namespace: "default".into(), stream: "t".into() }).await.unwrap();
    let err = c.produce(produce("default", "t", vec![entry(b"x", None)])).await.unwrap_err();
    assert_eq!((err.code(), error_code(&err)), (Code::FailedPrecondition, "conflict"), "{err:?}");
    let err = c.create_stream(stream("t")).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("dropped"), "{err:?}");
    s.stop().await;
}

#[tokio::test]
async fn request_ids_are_honoured_or_made_and_calls_are_counted() {
    let s = start().await;
    let mut c = s.client().await;
    let mut request =
        Request::new(pb::GetStreamRequest { namespace: "default".into(), stream: "none".into() });
    request.metadata_mut().insert("x-request-id", "trace-42".parse().unwrap());
    let err = c.get_stream(request).await.unwrap_err();
    assert_eq!(err.metadata().get("x-request-id").unwrap(), "trace-42");
    let ok = c.list_namespaces(pb::ListNamespacesRequest::default()).await.unwrap();
    let made = ok.metadata().get("x-request-id").expect("an id is made").to_str().unwrap().to_owned();
    assert!(!made.is_empty() && made != "trace-42");

    // The HTTP API's /metrics counts gRPC calls too.
    let metrics = get_ok(&s.at.http.to_string(), "/metrics").await;
    // By method and status code.
    for series in [
        r#"lakestream_grpc_requests_total{method="GetStream",code="NOT_FOUND"} 1"#,
        r#"lakestream_grpc_requests_total{method="ListNamespaces",code="OK"} 1"#,
        r#"lakestream_grpc_request_duration_seconds_count{method="GetStream"} 1"#,
        r#"lakestream_grpc_request_duration_seconds_bucket{method="ListNamespaces",le="+Inf"} 1"#,
    ] {
        assert!(metrics.lines().any(|l| l == series), "{series} in\n{metrics}");
    }
    assert_eq!(metrics.lines().filter(|l| l.starts_with("lakestream_grpc_requests_total{")).count(), 2);
    assert!(metrics.contains("lakestream_grpc_errors_total 1"), "{metrics}");
    s.stop().await;
}

#[tokio::test]
async fn tokens_guard_grpc_like_http_and_refused_calls_write_nothing() {
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
            name = "writer"
            token = "writer-token-0123456789"
            namespaces = { default = "write" }
            "#,
        )
        .unwrap();
    })
    .await;
    let mut c = s.client().await;
    let ops = Some("ops-token-0123456789");
    let create = |name: &str| pb::CreateStreamRequest {
        namespace: "default".into(),
        name: name.into(),
        partitions: None,
        properties: Default::default(),
    };
    c.create_stream(with_token(create("guarded"), ops)).await.unwrap();
    let x = || produce("default", "guarded", vec![entry(b"x", None)]);

    let err = c.produce(with_token(x(), None)).await.unwrap_err();
    assert_eq!((err.code(), error_code(&err)), (Code::Unauthenticated, "unauthenticated"));
    let err = c.produce(with_token(x(), Some("wrong-token-0123456789"))).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let err = c.produce(with_token(x(), Some("team-a-token-0123456789"))).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    assert!(err.message().contains("default"), "{err:?}");
    let o = c.get_offsets(with_token(offsets_of("default", "guarded"), ops)).await.unwrap().into_inner();
    assert_eq!(o.next_offset, 0, "refused calls wrote nothing");

    // Write permission produces and reads, but administration needs admin.
    let writer = Some("writer-token-0123456789");
    c.produce(with_token(x(), writer)).await.unwrap();
    c.fetch(with_token(fetch_from("default", "guarded", 0), writer)).await.unwrap();
    let err = c.create_stream(with_token(create("more"), writer)).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    c.create_stream(with_token(create("unused"), ops)).await.unwrap();
    let drop = pb::DropStreamRequest { namespace: "default".into(), stream: "unused".into() };
    let err = c.drop_stream(with_token(drop.clone(), writer)).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    let ns = pb::CreateNamespaceRequest { name: "b".into(), properties: Default::default() };
    let err = c.create_namespace(with_token(ns.clone(), writer)).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "a namespace needs admin on *");
    let err = c.list_namespaces(with_token(pb::ListNamespacesRequest::default(), writer)).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "listing namespaces needs read on *");
    c.create_namespace(with_token(ns, ops)).await.unwrap();
    c.drop_stream(with_token(drop, ops)).await.unwrap();
    s.stop().await;
}

#[tokio::test]
async fn http_and_grpc_serve_the_same_data() {
    let s = start().await;
    let mut c = s.client().await;
    c.create_stream(pb::CreateStreamRequest {
        namespace: "default".into(),
        name: "shared".into(),
        partitions: None,
        properties: Default::default(),
    })
    .await
    .unwrap();
    let payload = b"over grpc \x00\xff".to_vec();
    let answer = c.produce(produce("default", "shared", vec![entry(&payload, Some(2))])).await.unwrap();
    let ack = acks(answer.get_ref())[0];
    let body =
        get_ok(&s.at.http.to_string(), "/v1/namespaces/default/streams/shared/partitions/0/entries?offset=0")
            .await;
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let e = &json["entries"][0];
    assert_eq!(e["offset"], ack.offset);
    assert_eq!(e["record_count"], 2);
    assert_eq!(e["timestamp_ms"], ack.timestamp_ms);
    use base64::Engine as _;
    let decoded =
        base64::engine::general_purpose::STANDARD.decode(e["payload_base64"].as_str().unwrap()).unwrap();
    assert_eq!(decoded, payload);
    assert_eq!(json["next_offset"], 2);
    s.stop().await;
}

#[tokio::test]
async fn grpc_is_not_served_unless_configured() {
    let s = start_with(|config| config.server.grpc.addr = None).await;
    assert_eq!(s.at.grpc, None);
    assert!(get_ok(&s.at.http.to_string(), "/healthz").await.contains("ok"));
    s.stop().await;
}
