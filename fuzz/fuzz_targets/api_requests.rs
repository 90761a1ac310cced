//! The HTTP API's request handling: any method, path, headers and body sent to the server's
//! router must not panic and must not answer 500 (a 500 means a bug or corrupt stored data,
//! and nothing here stores corrupt data).
//!
//! The router is built once per process over a service with the in-memory metadata store and a
//! temporary local object directory, and keeps its state between inputs: streams and entries
//! an input creates stay, so later inputs reach produce, fetch, trim and the event routes.
//! A finding may therefore depend on earlier inputs; replay it on a fresh process first.
//!
//! Input: a first line `METHOD PATH`, header lines `name: value`, a blank line, then the body
//! (the same text layout as an HTTP/1.1 request without the version). Inputs whose method,
//! URI or headers `http` refuses to build are skipped: a real server never routes those.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use http::{HeaderName, HeaderValue, Method, Request, StatusCode, Uri};
use lakestream_server::ServerConfig;
use lakestream_server::http::{AppState, router};
use lakestream_service::config::MetadataConfig;
use lakestream_service::{Service, ServiceConfig};
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt as _;

struct Harness {
    runtime: tokio::runtime::Runtime,
    router: axum::Router,
    _service: Service,
    _dir: tempfile::TempDir,
}

/// The stream the harness creates, so that inputs naming it reach the data paths at once.
const SETUP: &[(&str, &str, &str, &[u8])] = &[
    ("POST", "/v1/namespaces/default/streams", "application/json", br#"{"name":"s","partitions":2}"#),
    (
        "POST",
        "/v1/namespaces/default/streams/s/partitions/0/entries?record_count=2",
        "application/octet-stream",
        b"\x00entry\xff",
    ),
];

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory for the object store");
        let addr = "127.0.0.1:0".parse().expect("a literal socket address");
        let mut service_config = ServiceConfig::dev(dir.path());
        service_config.metadata = MetadataConfig::Memory;
        // Small limits keep every input fast: produce waits one flush window, a fetch or
        // consume at the end of a partition waits at most max_fetch_wait.
        service_config.writer.flush_window = Duration::from_millis(1);
        service_config.max_fetch_wait = Duration::from_millis(5);
        let mut config = ServerConfig::dev(addr, None);
        config.http.max_fetch_wait = Duration::from_millis(5);
        config.http.max_body_bytes = 64 * 1024;
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
        let service = runtime.block_on(Service::start(&service_config)).expect("the in-memory service starts");
        let router = router(AppState::with_api(service.api().clone(), config.http.clone()));
        for &(method, path, content_type, body) in SETUP {
            let request = Request::builder()
                .method(method)
                .uri(path)
                .header(http::header::CONTENT_TYPE, content_type)
                .body(Body::from(body))
                .expect("a valid setup request");
            let response = runtime.block_on(router.clone().oneshot(request)).expect("infallible");
            assert!(response.status().is_success(), "setup {method} {path}: {}", response.status());
        }
        Harness { runtime, router, _service: service, _dir: dir }
    })
}

/// Splits the input into a request, or `None` when `http` would not build it.
fn request(data: &[u8]) -> Option<Request<Body>> {
    let (head, body) = match data.windows(2).position(|pair| pair == b"\n\n") {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (data, &[][..]),
    };
    let mut lines = head.split(|&b| b == b'\n');
    let first = lines.next()?;
    let space = first.iter().position(|&b| b == b' ')?;
    let method = Method::from_bytes(&first[..space]).ok()?;
    let uri = Uri::try_from(&first[space + 1..]).ok()?;
    let mut builder = Request::builder().method(method).uri(uri);
    for line in lines.filter(|line| !line.is_empty()) {
        let colon = line.iter().position(|&b| b == b':')?;
        let value = &line[colon + 1..];
        let value = value.strip_prefix(b" ").unwrap_or(value);
        builder = builder
            .header(HeaderName::from_bytes(&line[..colon]).ok()?, HeaderValue::from_bytes(value).ok()?);
    }
    builder.body(Body::from(body.to_vec())).ok()
}

fuzz_target!(|data: &[u8]| {
    let Some(request) = request(data) else {
        return;
    };
    let harness = harness();
    let (method, uri) = (request.method().clone(), request.uri().clone());
    let response = harness.runtime.block_on(harness.router.clone().oneshot(request)).expect("infallible");
    if response.status() == StatusCode::INTERNAL_SERVER_ERROR {
        let body = harness.runtime.block_on(axum::body::to_bytes(response.into_body(), 1 << 16));
        panic!(
            "{method} {uri} answered 500: {}",
            body.map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
        );
    }
});
