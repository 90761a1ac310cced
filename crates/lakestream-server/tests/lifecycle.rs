//! Stream lifecycle over HTTP on a real (embedded) stack: retention by bytes and by age,
//! enforced in the background (soft trim by the writer role, then hard trim by the compactor
//! role), idle producers' states swept in the background, updating a stream's settings, and
//! deleting an empty namespace.

use std::time::Duration;

use http::StatusCode;
use serde_json::{Value, json};

mod support;

use support::Running;
use support::http_client::{get_ok, json_call};

async fn start() -> Running {
    support::start_with(|config| {
        config.service.retention.interval = Duration::from_millis(50);
        config.service.compactor_schedule.interval = Duration::from_millis(100);
        config.service.compactor.max_range_age = Duration::from_millis(100);
    })
    .await
}

/// Produces `n` entries of `size` bytes, one request (and so one index record) each.
async fn produce(base: &str, stream: &str, n: usize, size: usize) {
    use base64::Engine as _;
    let payload = base64::engine::general_purpose::STANDARD.encode(vec![b'x'; size]);
    for _ in 0..n {
        let path = format!("/v1/namespaces/default/streams/{stream}/partitions/0/entries");
        let (status, v) = json_call(
            base,
            "POST",
            &path,
            json!({"entries": [{"payload_base64": payload, "record_count": 1}]}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{v}");
    }
}

async fn offsets(base: &str, stream: &str) -> Value {
    json_call(
        base,
        "GET",
        &format!("/v1/namespaces/default/streams/{stream}/partitions/0/offsets"),
        Value::Null,
    )
    .await
    .1
}

/// Waits (bounded) until `check` holds.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "{what} did not happen within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn retention_by_bytes_soft_trims_then_the_compactor_hard_trims() {
    // Retention trims at index-record boundaries: a compaction that merged entries 0..10 into
    // one record before the retention pass ran would leave nothing to trim at offset 5, so
    // the range only becomes due for compaction well after the 50 ms retention passes.
    let s = support::start_with(|config| {
        config.service.retention.interval = Duration::from_millis(50);
        config.service.compactor_schedule.interval = Duration::from_millis(100);
        config.service.compactor.max_range_age = Duration::from_secs(3);
    })
    .await;
    let (status, v) = json_call(
        &s.base,
        "POST",
        "/v1/namespaces/default/streams",
        json!({"name": "bytes", "properties": {"retention_bytes": "250"}}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    produce(&s.base, "bytes", 10, 50).await;
    // Entry i has 50 × (9 − i) bytes after it: entries 0..=4 have at least 250.
    eventually("the retention soft trim", async || offsets(&s.base, "bytes").await["trim_marker"] == 5).await;
    let (_, fetched) = json_call(
        &s.base,
        "GET",
        "/v1/namespaces/default/streams/bytes/partitions/0/entries?offset=0",
        Value::Null,
    )
    .await;
    assert_eq!(fetched["entries"][0]["offset"], 5, "trimmed entries are never read: {fetched}");
    // The compactor role removes the index records below the marker.
    let log = s.stack.catalog.get_stream("default", "bytes").await.unwrap().log_ref(0).unwrap();
    let p = lakestream_format::keys::partition(log.log_id);
    eventually("the hard trim", async || {
        let first = s
            .stack
            .meta
            .get_cmp(
                &p,
                &lakestream_format::keys::first_key(log.log_id),
                lakestream_meta::Comparison::Ceiling,
            )
            .await
            .unwrap()
            .unwrap();
        lakestream_format::keys::IndexKey::parse(&first.key).unwrap().end_offset > 5
    })
    .await;
    eventually("the trims in the metrics", async || {
        let m = metrics(&s.base).await;
        counter(&m, "lakestream_retention_trims_total") >= 1
            && counter(&m, "lakestream_hard_trims_total") >= 1
    })
    .await;
    s.stop().await;
}

async fn metrics(base: &str) -> String {
    get_ok(base, "/metrics").await
}

/// The value of the counter `name` in a metrics page; 0 if absent.
fn counter(text: &str, name: &str) -> u64 {
    support::series_value(text, name).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The writer role's background sweep deletes a producer's state once it has been idle for
/// `[producers] idle_expiry`: the deletion is counted, and the producer's next sequence is
/// then refused as an unknown producer's.
#[tokio::test]
async fn idle_producer_states_are_swept_in_the_background() {
    let s = support::start_with(|config| {
        config.service.producers.idle_expiry = Duration::from_millis(300);
        config.service.producers.sweep_interval = Duration::from_millis(50);
    })
    .await;
    let (status, v) =
        json_call(&s.base, "POST", "/v1/namespaces/default/streams", json!({"name": "idle"})).await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    let path = "/v1/namespaces/default/streams/idle/partitions/0/entries";
    let request = |sequence: u64| json!({"entries": [{"payload_base64": "eA=="}], "producer_id": "prod-idle", "producer_sequence": sequence});
    let (status, v) = json_call(&s.base, "POST", path, request(0)).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    eventually("the sweep of the idle producer's state", async || {
        counter(&metrics(&s.base).await, "lakestream_producer_states_expired_total") >= 1
    })
    .await;
    let (status, v) = json_call(&s.base, "POST", path, request(1)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("no state on this partition"), "{v}");
    s.stop().await;
}

#[tokio::test]
async fn retention_by_age_expires_entries_older_than_the_limit() {
    let s = start().await;
    let (status, v) =
        json_call(&s.base, "POST", "/v1/namespaces/default/streams", json!({"name": "aged"})).await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    produce(&s.base, "aged", 3, 10).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    produce(&s.base, "aged", 2, 10).await;
    // Set afterwards: the first three entries are over 500 ms old, the last two are not yet.
    let (status, v) = json_call(
        &s.base,
        "PATCH",
        "/v1/namespaces/default/streams/aged",
        json!({"properties": {"retention_ms": "500"}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    eventually("the age-based trim", async || {
        offsets(&s.base, "aged").await["trim_marker"].as_u64() >= Some(3)
    })
    .await;
    s.stop().await;
}

#[tokio::test]
async fn stream_settings_are_updated_and_bad_retention_values_refused() {
    let s = start().await;
    let create = |props: Value| {
        let base = s.base.clone();
        async move {
            json_call(
                &base,
                "POST",
                "/v1/namespaces/default/streams",
                json!({"name": "st", "properties": props}),
            )
            .await
        }
    };
    let (status, v) = create(json!({"retention_ms": "7d"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("properties.retention_ms"), "{v}");
    let (status, _) = create(json!({"owner": "team-a"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let patch = |body: Value| {
        let base = s.base.clone();
        async move { json_call(&base, "PATCH", "/v1/namespaces/default/streams/st", body).await }
    };
    let (status, v) = patch(json!({"properties": {"retention_bytes": "0"}})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("properties.retention_bytes"), "{v}");
    let (status, v) = patch(json!({"properties": {"retention_bytes": "1048576", "owner": null}})).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["properties"], json!({"retention_bytes": "1048576"}));
    let (_, got) = json_call(&s.base, "GET", "/v1/namespaces/default/streams/st", Value::Null).await;
    assert_eq!(got["properties"], json!({"retention_bytes": "1048576"}));
    let (status, v) = patch(json!({"props": {}})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "unknown fields are refused: {v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("props"), "{v}");
    let (status, _) =
        json_call(&s.base, "PATCH", "/v1/namespaces/default/streams/missing", json!({"properties": {}}))
            .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    s.stop().await;
}

#[tokio::test]
async fn a_namespace_is_deleted_once_it_holds_no_stream() {
    let s = start().await;
    assert_eq!(
        json_call(&s.base, "POST", "/v1/namespaces", json!({"name": "temp"})).await.0,
        StatusCode::CREATED
    );
    let (status, _) = json_call(&s.base, "POST", "/v1/namespaces/temp/streams", json!({"name": "x"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, v) = json_call(&s.base, "DELETE", "/v1/namespaces/temp", Value::Null).await;
    assert_eq!(status, StatusCode::CONFLICT, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("not empty"), "{v}");
    assert_eq!(
        json_call(&s.base, "DELETE", "/v1/namespaces/temp/streams/x", Value::Null).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        json_call(&s.base, "DELETE", "/v1/namespaces/temp", Value::Null).await.0,
        StatusCode::NO_CONTENT
    );
    let (_, listed) = json_call(&s.base, "GET", "/v1/namespaces", Value::Null).await;
    assert!(!listed["namespaces"].as_array().unwrap().iter().any(|n| n["name"] == "temp"), "{listed}");
    assert_eq!(
        json_call(&s.base, "DELETE", "/v1/namespaces/temp", Value::Null).await.0,
        StatusCode::NOT_FOUND
    );
    s.stop().await;
}
