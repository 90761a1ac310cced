//! gRPC append sessions (client streaming with pipelined acknowledgements in order), on a dev
//! stack and on a stack with a real Oxia server of its own (`LAKESTREAM_TEST_OXIA_BIN`, which
//! `scripts/test` sets; that test fails without it).

use std::time::Instant;

use futures::StreamExt as _;
use lakestream_server::grpc::pb;
use lakestream_server::grpc::pb::lakestream_client::LakestreamClient;
use tonic::transport::Channel;

mod support;

use support::Running;

async fn start(oxia: Option<&lakestream_meta_oxia::testkit::StandaloneOxia>) -> Running {
    let address = oxia.map(|o| o.address());
    support::start_with(move |config| {
        if let Some(address) = address {
            config.service.metadata = lakestream_service::config::MetadataConfig::oxia(vec![address.clone()]);
        }
    })
    .await
}

fn request(stream: &str, tag: &str) -> pb::ProduceRequest {
    pb::ProduceRequest {
        namespace: "default".into(),
        stream: stream.into(),
        partition: 0,
        entries: (0..2)
            .map(|i| pb::ProduceEntry {
                payload: format!("{tag}-{i}").into_bytes().into(),
                record_count: None,
            })
            .collect(),
        ..Default::default()
    }
}

fn offsets(response: &pb::ProduceResponse) -> Vec<u64> {
    response
        .results
        .iter()
        .map(|r| match &r.result {
            Some(pb::produce_result::Result::Appended(a)) => a.offset,
            other => panic!("entry failed: {other:?}"),
        })
        .collect()
}

async fn all_payloads(c: &mut LakestreamClient<Channel>, stream: &str) -> Vec<String> {
    let mut payloads = Vec::new();
    let mut offset = 0;
    loop {
        let batch = c
            .fetch(pb::FetchRequest {
                namespace: "default".into(),
                stream: stream.into(),
                partition: 0,
                offset,
                max_bytes: None,
                max_wait_ms: 0,
            })
            .await
            .unwrap()
            .into_inner();
        if batch.entries.is_empty() {
            return payloads;
        }
        payloads.extend(batch.entries.iter().map(|e| String::from_utf8(e.payload.to_vec()).unwrap()));
        offset = batch.next_offset;
    }
}

async fn sessions(s: &Running) {
    let mut c = LakestreamClient::connect(format!("http://{}", s.at.grpc.unwrap())).await.unwrap();
    for name in ["piped", "unary"] {
        c.create_stream(pb::CreateStreamRequest {
            namespace: "default".into(),
            name: name.into(),
            partitions: Some(1),
            properties: Default::default(),
        })
        .await
        .unwrap();
    }
    const REQUESTS: usize = 60;

    // Pipelined: every request sent at once, answered in order at contiguous offsets.
    let started = Instant::now();
    let requests: Vec<_> = (0..REQUESTS).map(|i| request("piped", &format!("r{i}"))).collect();
    let mut answers = c.append_session(futures::stream::iter(requests)).await.unwrap().into_inner();
    let mut answered = 0;
    while let Some(answer) = answers.next().await {
        let answer = answer.unwrap();
        assert_eq!(offsets(&answer), [2 * answered as u64, 2 * answered as u64 + 1]);
        answered += 1;
    }
    let piped = started.elapsed();
    assert_eq!(answered, REQUESTS);
    let want: Vec<String> = (0..REQUESTS).flat_map(|i| [format!("r{i}-0"), format!("r{i}-1")]).collect();
    assert_eq!(all_payloads(&mut c, "piped").await, want);

    // The same requests one unary call after another, for comparison.
    let started = Instant::now();
    for i in 0..REQUESTS {
        c.produce(request("unary", &format!("r{i}"))).await.unwrap();
    }
    let unary = started.elapsed();
    println!(
        "{REQUESTS} requests: append session {piped:?}, sequential unary Produce {unary:?} (ratio {:.1})",
        unary.as_secs_f64() / piped.as_secs_f64()
    );

    // A failing request ends the session with its status, after the answers before it.
    let bad = request("missing", "x");
    let requests = vec![request("piped", "s0"), request("piped", "s1"), bad, request("piped", "s3")];
    let mut answers = c.append_session(futures::stream::iter(requests)).await.unwrap().into_inner();
    let first = answers.next().await.unwrap().unwrap();
    assert_eq!(offsets(&first), [2 * REQUESTS as u64, 2 * REQUESTS as u64 + 1]);
    answers.next().await.unwrap().unwrap();
    let failure = answers.next().await.unwrap().unwrap_err();
    assert_eq!(failure.code(), tonic::Code::NotFound);
    assert!(answers.next().await.is_none(), "the session ends at its first failure");
}

#[tokio::test]
async fn append_sessions_answer_in_order_on_the_dev_stack() {
    let s = start(None).await;
    sessions(&s).await;
    s.stop().await;
}

#[tokio::test]
async fn append_sessions_answer_in_order_on_oxia() {
    let oxia = lakestream_meta_oxia::testkit::StandaloneOxia::start(4, &[]).await;
    let s = start(Some(&oxia)).await;
    sessions(&s).await;
    s.stop().await;
}
