//! The harness the server suites share: a dev stack (the embedded metadata store and the
//! local filesystem in a temporary directory) served on loopback ports, both APIs on port 0.

#![allow(dead_code)] // Each suite uses its own part of the harness.

pub mod http_client;

use std::time::Duration;

use lakestream_server::{Listening, ServerConfig};
use lakestream_service::{Service, ServiceConfig, Stack};

/// What a test service is configured with: the service's settings and the transports'.
#[derive(Debug, Clone)]
pub struct TestConfig {
    /// The service layer.
    pub service: ServiceConfig,
    /// The HTTP and gRPC APIs.
    pub server: ServerConfig,
}

impl TestConfig {
    /// A dev service in `dir`: the HTTP API on a free port, no gRPC.
    pub fn dev(dir: &std::path::Path) -> TestConfig {
        TestConfig {
            service: ServiceConfig::dev(dir),
            server: ServerConfig::dev("127.0.0.1:0".parse().unwrap(), None),
        }
    }
}

/// A running service.
pub struct Running {
    /// Where it listens.
    pub at: Listening,
    /// `http://{addr}` of the HTTP API.
    pub base: String,
    /// Its stack, for checks behind the API.
    pub stack: Stack,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    _dir: tempfile::TempDir,
}

impl Running {
    /// Shuts the service down gracefully and checks that it stopped cleanly.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.unwrap().unwrap();
    }
}

/// Serves a dev stack with a 5 ms flush window and whatever `configure` changes.
pub async fn start_with(configure: impl FnOnce(&mut TestConfig)) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let mut config = TestConfig::dev(dir.path());
    config.server.grpc.addr = Some("127.0.0.1:0".parse().unwrap());
    config.service.writer.flush_window = Duration::from_millis(5);
    configure(&mut config);
    let service = Service::start(&config.service).await.unwrap();
    let stack = service.api().stack().clone();
    let (at_tx, at_rx) = tokio::sync::oneshot::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        lakestream_server::run(
            &config.server,
            service,
            Vec::new(),
            move |at| {
                let _ = at_tx.send(at);
            },
            async move {
                let _ = stopped.await;
            },
        )
        .await
    });
    let at: Listening = at_rx.await.unwrap();
    Running { base: format!("http://{}", at.http), at, stack, stop: Some(stop), task, _dir: dir }
}

/// One JSON request over a fresh connection: the status and the JSON body (null when empty).
pub async fn call(
    base: &str,
    method: &str,
    path: &str,
    body: serde_json::Value,
) -> (http::StatusCode, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let body = if body.is_null() { String::new() } else { body.to_string() };
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a complete response");
    let status: u16 = String::from_utf8_lossy(&raw[..split]).split(' ').nth(1).unwrap().parse().unwrap();
    let bytes = &raw[split + 4..];
    let value = if bytes.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(bytes).unwrap_or(serde_json::Value::Null)
    };
    (http::StatusCode::from_u16(status).unwrap(), value)
}

/// The value of the series `series` (a metric name, with its labels if it has any) in a
/// `/metrics` page, as written there; `None` if the page has no such series.
pub fn series_value<'a>(metrics: &'a str, series: &str) -> Option<&'a str> {
    metrics.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')).map(str::trim)
}
