//! Consumer groups' committed offsets over HTTP and gRPC, on a dev stack (the embedded
//! metadata store and local files) and on a stack with a real Oxia server of its own
//! (`LAKESTREAM_TEST_OXIA_BIN`, which `scripts/test` sets; that test fails without it).

use http::StatusCode;
use lakestream_server::grpc::pb;
use lakestream_server::grpc::pb::lakestream_client::LakestreamClient;
use serde_json::{Value, json};
use tonic::Code;

mod support;

use support::Running;
use support::http_client::json_call;

async fn start(oxia: Option<&lakestream_meta_oxia::testkit::StandaloneOxia>) -> Running {
    let address = oxia.map(|o| o.address());
    support::start_with(move |config| {
        if let Some(address) = address {
            config.service.metadata = lakestream_service::config::MetadataConfig::oxia(vec![address.clone()]);
        }
    })
    .await
}

async fn produce(s: &Running, stream: &str, partition: usize, n: usize) {
    let entries: Vec<Value> = (0..n).map(|_| json!({ "payload_base64": "eA==" })).collect();
    let path = format!("/v1/namespaces/default/streams/{stream}/partitions/{partition}/entries");
    let (status, body) = json_call(&s.base, "POST", &path, json!({ "entries": entries })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

fn commit_path(group: &str, stream: &str, partition: usize) -> String {
    format!("/v1/namespaces/default/groups/{group}/streams/{stream}/partitions/{partition}")
}

async fn offsets_over_http(s: &Running) {
    let (status, body) = json_call(
        &s.base,
        "POST",
        "/v1/namespaces/default/streams",
        json!({ "name": "g-events", "partitions": 2 }),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    produce(s, "g-events", 0, 5).await;
    produce(s, "g-events", 1, 2).await;
    let offsets = |group: &str| format!("/v1/namespaces/default/groups/{group}/streams/g-events");

    // An unknown group is a clear 404.
    let (status, body) = json_call(&s.base, "GET", &offsets("nobody"), Value::Null).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found")),
        "{body}"
    );

    let commit =
        |offset: u64, generation: u64| json!({ "offset": offset, "generation": generation, "metadata": "m" });
    let (status, body) =
        json_call(&s.base, "PUT", &commit_path("billing", "g-events", 0), commit(3, 1)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!((body["offset"].as_u64(), body["generation"].as_u64()), (Some(3), Some(1)));

    // Refused, writing nothing: backwards in one generation, a stale generation, beyond the
    // end, a malformed group, an unknown stream or partition.
    for (path, body, status) in [
        (commit_path("billing", "g-events", 0), commit(2, 1), StatusCode::CONFLICT),
        (commit_path("billing", "g-events", 0), commit(4, 0), StatusCode::CONFLICT),
        (commit_path("billing", "g-events", 0), commit(6, 1), StatusCode::BAD_REQUEST),
        (commit_path("bad%20group", "g-events", 0), commit(1, 1), StatusCode::BAD_REQUEST),
        (commit_path("billing", "missing", 0), commit(1, 1), StatusCode::NOT_FOUND),
        (commit_path("billing", "g-events", 7), commit(1, 1), StatusCode::NOT_FOUND),
        (commit_path("billing", "g-events", 0), json!({ "generation": 1 }), StatusCode::BAD_REQUEST),
    ] {
        let (got, answer) = json_call(&s.base, "PUT", &path, body.clone()).await;
        assert_eq!(got, status, "{path} {body}: {answer}");
    }
    let (status, body) = json_call(&s.base, "GET", &offsets("billing"), Value::Null).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["partitions"][0]["committed"]["offset"], 3);
    assert_eq!(body["partitions"][0]["lag"], 2);

    // A newer generation may move the group anywhere, backwards included.
    let (status, body) =
        json_call(&s.base, "PUT", &commit_path("billing", "g-events", 0), commit(1, 2)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, body) = json_call(&s.base, "GET", &offsets("billing"), Value::Null).await;
    assert_eq!(body["partitions"][0]["committed"]["generation"], 2);
    assert_eq!(body["partitions"][0]["committed"]["metadata"], "m");
    assert_eq!(
        (body["partitions"][0]["lag"].as_u64(), body["partitions"][0]["next_offset"].as_u64()),
        (Some(4), Some(5))
    );
    assert_eq!(body["partitions"][1]["committed"], Value::Null);
    assert_eq!(body["partitions"][1]["lag"], 2);

    // Concurrent commits of generations 0..10: the greatest generation's commit stands.
    let tasks: Vec<_> = (0..10u64)
        .map(|g| {
            let base = s.base.clone();
            tokio::spawn(async move {
                json_call(
                    &base,
                    "PUT",
                    &commit_path("race", "g-events", 1),
                    json!({ "offset": g % 3, "generation": 10 + g }),
                )
                .await
            })
        })
        .collect();
    for t in tasks {
        let (status, body) = t.await.unwrap();
        assert!(status == StatusCode::OK || status == StatusCode::CONFLICT, "{status}: {body}");
    }
    let (_, body) = json_call(&s.base, "GET", &offsets("race"), Value::Null).await;
    assert_eq!(
        (
            body["partitions"][1]["committed"]["generation"].as_u64(),
            body["partitions"][1]["committed"]["offset"].as_u64()
        ),
        (Some(19), Some(0))
    );

    // Listing, one page at a time.
    let (status, body) = json_call(&s.base, "GET", "/v1/namespaces/default/groups", Value::Null).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["groups"], json!(["billing", "race"]));
    let (_, body) = json_call(&s.base, "GET", "/v1/namespaces/default/groups?limit=1", Value::Null).await;
    assert_eq!((body["groups"].clone(), body["next_page"].clone()), (json!(["billing"]), json!("billing")));
    let (_, body) =
        json_call(&s.base, "GET", "/v1/namespaces/default/groups?limit=1&after=billing", Value::Null).await;
    assert_eq!(body["groups"], json!(["race"]));
    let (status, _) = json_call(&s.base, "GET", "/v1/namespaces/missing/groups", Value::Null).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The lag metric.
    let (_, metrics) = json_call(&s.base, "GET", "/metrics", Value::Null).await;
    let metrics = metrics.as_str().unwrap().to_owned();
    assert!(
        metrics.contains(r#"lakestream_group_lag_records{namespace="default",group="billing",stream="g-events",partition="0"} 4"#),
        "{metrics}"
    );
}

async fn offsets_over_grpc(s: &Running) {
    let mut c = LakestreamClient::connect(format!("http://{}", s.at.grpc.unwrap())).await.unwrap();
    let commit = |group: &str, offset: u64, generation: u64| pb::CommitOffsetRequest {
        namespace: "default".into(),
        group: group.into(),
        stream: "g-events".into(),
        partition: 0,
        offset,
        generation,
        metadata: String::new(),
    };
    let ok = c.commit_offset(commit("grpc-group", 2, 5)).await.unwrap().into_inner();
    assert_eq!((ok.offset, ok.generation, ok.partition), (2, 5, 0));
    let stale = c.commit_offset(commit("grpc-group", 3, 4)).await.unwrap_err();
    assert_eq!(stale.code(), Code::FailedPrecondition);
    assert!(stale.message().contains("stale"), "{}", stale.message());
    let bad = c.commit_offset(commit("bad/group", 1, 1)).await.unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    let lag = c
        .get_group_offsets(pb::GetGroupOffsetsRequest {
            namespace: "default".into(),
            group: "grpc-group".into(),
            stream: "g-events".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(lag.partitions.len(), 2);
    assert_eq!((lag.partitions[0].committed.as_ref().map(|c| c.offset), lag.partitions[0].lag), (Some(2), 3));
    let unknown = c
        .get_group_offsets(pb::GetGroupOffsetsRequest {
            namespace: "default".into(),
            group: "nobody".into(),
            stream: "g-events".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    let groups = c
        .list_groups(pb::ListGroupsRequest { namespace: "default".into(), after: None, limit: None })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(groups.groups, ["billing", "grpc-group", "race"]);
}

#[tokio::test]
async fn committed_offsets_on_the_dev_stack() {
    let s = start(None).await;
    offsets_over_http(&s).await;
    offsets_over_grpc(&s).await;
    s.stop().await;
}

#[tokio::test]
async fn committed_offsets_on_oxia() {
    let oxia = lakestream_meta_oxia::testkit::StandaloneOxia::start(4, &[]).await;
    let s = start(Some(&oxia)).await;
    offsets_over_http(&s).await;
    offsets_over_grpc(&s).await;
    s.stop().await;
}
