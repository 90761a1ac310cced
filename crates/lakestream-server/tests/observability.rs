//! What `/metrics` tells an operator about the traffic and the writer, scraped from a real
//! stack after real requests: request counts by route template (never the raw path), method
//! and status class, and the writer's WAL flushes.

mod support;

use support::http_client;

/// One HTTP/1.1 request; answers the status and the body.
async fn call(addr: std::net::SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    // A JSON object is sent as JSON; anything else is one entry's raw payload.
    let content_type: &[u8] =
        if body.starts_with(b"{") { b"application/json" } else { b"application/octet-stream" };
    let answer =
        http_client::call(&addr.to_string(), method, path, &[("content-type", content_type)], body).await;
    (answer.status.as_u16(), answer.text())
}

/// The value of the sample named exactly `series` (name and labels), if exposed.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

async fn scrape(addr: std::net::SocketAddr) -> String {
    let (status, body) = call(addr, "GET", "/metrics", b"").await;
    assert_eq!(status, 200);
    body
}

#[tokio::test]
async fn http_requests_are_counted_by_route_template_method_and_status_class() {
    let s = support::start_with(|_| {}).await;
    let at = s.at.http;
    let (status, body) =
        call(at, "POST", "/v1/namespaces/default/streams", br#"{"name":"orders","partitions":1}"#).await;
    assert_eq!(status, 201, "{body}");
    for payload in ["a", "b"] {
        let (status, body) = call(
            at,
            "POST",
            "/v1/namespaces/default/streams/orders/partitions/0/entries",
            payload.as_bytes(),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    // A matched route answering 404: counted under its pattern, not under the stream's name.
    let (status, _) = call(at, "GET", "/v1/namespaces/default/streams/missing-stream", b"").await;
    assert_eq!(status, 404);
    // Unknown paths: one `unmatched` label value for all of them.
    for path in ["/nope/one", "/nope/two", "/v1/namespaces/default/whatever"] {
        assert_eq!(call(at, "GET", path, b"").await.0, 404, "{path}");
    }
    // An unknown method on a known route: 405, and the method is not a label value of its own.
    assert_eq!(call(at, "BREW", "/v1/namespaces", b"").await.0, 405);

    let metrics = scrape(at).await;
    let entries = "/v1/namespaces/{ns}/streams/{stream}/partitions/{p}/entries";
    let expect = [
        (r#"route="/v1/namespaces/{ns}/streams",method="POST",status="2xx""#.to_string(), 1.0),
        (format!(r#"route="{entries}",method="POST",status="2xx""#), 2.0),
        (r#"route="/v1/namespaces/{ns}/streams/{stream}",method="GET",status="4xx""#.to_string(), 1.0),
        (r#"route="unmatched",method="GET",status="4xx""#.to_string(), 3.0),
        (r#"route="/v1/namespaces",method="other",status="4xx""#.to_string(), 1.0),
    ];
    for (labels, value) in expect {
        let series = format!("lakestream_http_requests_total{{{labels}}}");
        assert_eq!(sample(&metrics, &series), Some(value), "{series} in\n{metrics}");
    }
    let count =
        format!(r#"lakestream_http_request_duration_seconds_count{{route="{entries}",method="POST"}}"#);
    assert_eq!(sample(&metrics, &count), Some(2.0), "{metrics}");
    let inf = format!(
        r#"lakestream_http_request_duration_seconds_bucket{{route="{entries}",method="POST",le="+Inf"}}"#
    );
    assert_eq!(sample(&metrics, &inf), Some(2.0), "{metrics}");
    // No raw path, stream name or unknown method became a label value.
    for raw in ["nope", "missing-stream", "orders", "whatever", "BREW"] {
        assert!(
            !metrics.lines().any(|l| l.starts_with("lakestream_http_request") && l.contains(raw)),
            "{raw} is a label value in\n{metrics}"
        );
    }
    s.stop().await;
}

#[tokio::test]
async fn unknown_paths_do_not_grow_the_request_series() {
    let s = support::start_with(|_| {}).await;
    let at = s.at.http;
    let series = |m: &str| m.lines().filter(|l| l.starts_with("lakestream_http_requests_total{")).count();
    call(at, "GET", "/first-unknown", b"").await;
    // The scrape itself is a series (`/metrics`, 2xx), counted once it is answered.
    scrape(at).await;
    let before = series(&scrape(at).await);
    for i in 0..20 {
        assert_eq!(call(at, "GET", &format!("/unknown/{i}"), b"").await.0, 404);
    }
    let metrics = scrape(at).await;
    assert_eq!(series(&metrics), before, "{metrics}");
    assert_eq!(
        sample(&metrics, r#"lakestream_http_requests_total{route="unmatched",method="GET",status="4xx"}"#),
        Some(21.0)
    );
    s.stop().await;
}

#[tokio::test]
async fn the_writer_role_exposes_its_wal_flushes() {
    let s = support::start_with(|_| {}).await;
    let at = s.at.http;
    call(at, "POST", "/v1/namespaces/default/streams", br#"{"name":"orders","partitions":2}"#).await;
    for p in [0, 1] {
        let path = format!("/v1/namespaces/default/streams/orders/partitions/{p}/entries");
        assert_eq!(call(at, "POST", &path, b"0123456789").await.0, 200);
    }
    let metrics = scrape(at).await;
    let objects = sample(&metrics, "lakestream_wal_objects_written_total").expect("written objects");
    assert!(objects >= 1.0, "{metrics}");
    // Two sections committed (each appended alone or together), each object at least as big
    // as its payload, every object counted once in both histograms.
    assert_eq!(
        sample(&metrics, r#"lakestream_wal_index_puts_total{outcome="committed"}"#),
        Some(2.0),
        "{metrics}"
    );
    assert_eq!(sample(&metrics, "lakestream_wal_object_logs_sum"), Some(2.0), "{metrics}");
    assert_eq!(sample(&metrics, "lakestream_wal_object_logs_count"), Some(objects), "{metrics}");
    assert_eq!(sample(&metrics, "lakestream_wal_object_size_bytes_count"), Some(objects), "{metrics}");
    assert!(sample(&metrics, "lakestream_wal_object_size_bytes_sum").unwrap() >= 20.0, "{metrics}");
    // The same PUTs the object-store decorator counted on the WAL root.
    assert_eq!(
        sample(&metrics, r#"lakestream_object_store_operations_total{root="wal",operation="put"}"#),
        Some(objects),
        "{metrics}"
    );
    s.stop().await;
}

/// With Oxia as the metadata store, `/metrics` shows the client's requests by kind. On a real
/// Oxia server of its own (`LAKESTREAM_TEST_OXIA_BIN`, which `scripts/test` sets; fails
/// without it): a deployment records its storage roots, so it cannot share a server with
/// another test's deployment.
#[tokio::test]
async fn oxia_requests_are_exposed_by_kind() {
    let oxia = lakestream_meta_oxia::testkit::StandaloneOxia::start(4, &[]).await;
    let address = oxia.address();
    let s = support::start_with(|config| {
        config.service.metadata = lakestream_service::config::MetadataConfig::oxia(vec![address.clone()]);
    })
    .await;
    let metrics = scrape(s.at.http).await;
    // Opening the stack wrote (the deployment record, the default namespace) and read.
    for kind in ["write", "read"] {
        let series = format!(r#"lakestream_oxia_requests_total{{kind="{kind}"}}"#);
        assert!(sample(&metrics, &series).is_some_and(|v| v >= 1.0), "{series} in\n{metrics}");
    }
    for kind in ["write", "read", "list", "scan", "session"] {
        let series = format!(r#"lakestream_oxia_request_errors_total{{kind="{kind}"}}"#);
        assert_eq!(sample(&metrics, &series), Some(0.0), "{series} in\n{metrics}");
    }
    s.stop().await;
}

/// The embedded metadata store has no Oxia client: no Oxia series.
#[tokio::test]
async fn no_oxia_series_without_oxia() {
    let s = support::start_with(|_| {}).await;
    let metrics = scrape(s.at.http).await;
    assert!(metrics.contains("lakestream_wal_objects_written_total"), "{metrics}");
    assert!(!metrics.contains("lakestream_oxia_"), "{metrics}");
    s.stop().await;
}
