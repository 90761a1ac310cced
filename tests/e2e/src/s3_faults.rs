//! An HTTP proxy on loopback before the S3 server that behaves like an S3 under pressure:
//! a share of requests is answered `503 SlowDown` without reaching the server, and a share
//! of PUTs is slow, held before it is forwarded (the object is not stored yet) or after the
//! server stored it (the answer is late). Requests are forwarded byte for byte, `Host`
//! included, so the client's SigV4 signatures still verify at the server.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

use crate::history::History;
use crate::rng::Rng;

/// What the proxy does to requests.
#[derive(Debug, Clone, Copy)]
pub struct S3FaultConfig {
    /// The share of requests answered 503 SlowDown, not forwarded.
    pub slow_down: f64,
    /// The share of PUTs held for up to `max_put_delay`, half before and half after the
    /// server stored them.
    pub slow_put: f64,
    /// The longest hold of a slow PUT.
    pub max_put_delay: Duration,
    /// The seed of the decisions.
    pub seed: u64,
}

/// Counts of what the proxy did.
#[derive(Debug, Default)]
pub struct S3FaultStats {
    /// Requests received.
    pub requests: AtomicU64,
    /// Answered 503 SlowDown.
    pub slow_downs: AtomicU64,
    /// PUTs held before they were forwarded.
    pub puts_held_before: AtomicU64,
    /// PUTs whose answer was held after the server stored them.
    pub puts_held_after: AtomicU64,
    /// Requests the server could not be reached for (answered 502).
    pub upstream_errors: AtomicU64,
}

/// A running proxy; stops accepting when dropped.
#[derive(Debug)]
pub struct S3FaultProxy {
    addr: SocketAddr,
    stats: Arc<S3FaultStats>,
    enabled: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

const SLOW_DOWN_BODY: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>\
     <Message>Please reduce your request rate.</Message><RequestId>lakestream-e2e</RequestId></Error>";

/// Headers that belong to one connection, not to the request.
const HOP_BY_HOP: [&str; 5] =
    ["connection", "keep-alive", "transfer-encoding", "upgrade", "proxy-connection"];

struct Shared {
    upstream: String,
    config: S3FaultConfig,
    rng: Mutex<Rng>,
    stats: Arc<S3FaultStats>,
    enabled: Arc<AtomicBool>,
    client: Client<HttpConnector, Full<Bytes>>,
    history: Option<History>,
}

impl S3FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream` (`host:port`).
    pub async fn start(upstream: String, config: S3FaultConfig) -> std::io::Result<S3FaultProxy> {
        Self::start_recording(upstream, config, None).await
    }

    /// As [`S3FaultProxy::start`], recording each fault in `history` ("s3 503 SlowDown",
    /// "s3 slow PUT").
    pub async fn start_recording(
        upstream: String,
        config: S3FaultConfig,
        history: Option<History>,
    ) -> std::io::Result<S3FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stats = Arc::new(S3FaultStats::default());
        let enabled = Arc::new(AtomicBool::new(true));
        let shared = Arc::new(Shared {
            upstream,
            config,
            rng: Mutex::new(Rng::new(config.seed)),
            stats: stats.clone(),
            enabled: enabled.clone(),
            client: Client::builder(TokioExecutor::new()).build(HttpConnector::new()),
            history,
        });
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let shared = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let shared = shared.clone();
                        async move { Ok::<_, std::convert::Infallible>(shared.handle(request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(S3FaultProxy { addr, stats, enabled, task })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What it did so far.
    pub fn stats(&self) -> &S3FaultStats {
        &self.stats
    }

    /// Turns the faults on or off (the final verification runs without).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }
}

impl Drop for S3FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What to do with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Forward,
    SlowDown,
    HoldBefore(Duration),
    HoldAfter(Duration),
}

impl Shared {
    fn decide(&self, method: &http::Method) -> Decision {
        if !self.enabled.load(Ordering::Relaxed) {
            return Decision::Forward;
        }
        let rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        if rng.chance(self.config.slow_down) {
            return Decision::SlowDown;
        }
        if method == http::Method::PUT && rng.chance(self.config.slow_put) {
            let max_ms = u64::try_from(self.config.max_put_delay.as_millis()).unwrap_or(u64::MAX);
            let hold = Duration::from_millis(rng.between(max_ms / 10, max_ms));
            return if rng.chance(0.5) { Decision::HoldBefore(hold) } else { Decision::HoldAfter(hold) };
        }
        Decision::Forward
    }

    async fn handle(&self, request: http::Request<Incoming>) -> http::Response<Full<Bytes>> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let decision = self.decide(request.method());
        if let Some(history) = &self.history {
            match decision {
                Decision::SlowDown => history.fault("s3 503 SlowDown"),
                Decision::HoldBefore(_) | Decision::HoldAfter(_) => history.fault("s3 slow PUT"),
                Decision::Forward => {}
            }
        }
        let (parts, body) = request.into_parts();
        // Read the whole body first, as a server does before it answers.
        let body = match body.collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => return answer(400, format!("reading the request body: {e}")),
        };
        match decision {
            Decision::SlowDown => {
                self.stats.slow_downs.fetch_add(1, Ordering::Relaxed);
                let mut response = answer(503, SLOW_DOWN_BODY.to_string());
                response
                    .headers_mut()
                    .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/xml"));
                return response;
            }
            Decision::HoldBefore(hold) => {
                self.stats.puts_held_before.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(hold).await;
            }
            Decision::Forward | Decision::HoldAfter(_) => {}
        }
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut forward = http::Request::builder()
            .method(parts.method.clone())
            .uri(format!("http://{}{path}", self.upstream));
        for (name, value) in &parts.headers {
            if !HOP_BY_HOP.contains(&name.as_str()) {
                forward = forward.header(name, value);
            }
        }
        let Ok(forward) = forward.body(Full::new(body)) else {
            return answer(400, "the request could not be rebuilt".into());
        };
        let response = match self.client.request(forward).await {
            Ok(r) => r,
            Err(e) => {
                self.stats.upstream_errors.fetch_add(1, Ordering::Relaxed);
                return answer(502, format!("the S3 server: {e}"));
            }
        };
        let (parts, body) = response.into_parts();
        let body = match body.collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                self.stats.upstream_errors.fetch_add(1, Ordering::Relaxed);
                return answer(502, format!("reading the S3 server's answer: {e}"));
            }
        };
        if let Decision::HoldAfter(hold) = decision {
            self.stats.puts_held_after.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(hold).await;
        }
        let mut out = http::Response::new(Full::new(body));
        *out.status_mut() = parts.status;
        for (name, value) in &parts.headers {
            if !HOP_BY_HOP.contains(&name.as_str()) {
                out.headers_mut().append(name, value.clone());
            }
        }
        out
    }
}

fn answer(status: u16, body: String) -> http::Response<Full<Bytes>> {
    let mut response = http::Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Api;

    /// An HTTP server that answers every request with its method, path and body.
    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let service = service_fn(|request: http::Request<Incoming>| async move {
                        let head = format!(
                            "{} {} host={:?} ",
                            request.method(),
                            request.uri(),
                            request.headers().get("host")
                        );
                        let body =
                            request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        let text = format!("{head}{}", String::from_utf8_lossy(&body));
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from(text))))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn requests_pass_byte_for_byte_or_meet_the_configured_faults() {
        let upstream = echo_server().await.to_string();
        let calm = S3FaultConfig { slow_down: 0.0, slow_put: 0.0, max_put_delay: Duration::ZERO, seed: 1 };
        let proxy = S3FaultProxy::start(upstream.clone(), calm).await.unwrap();
        let api = Api::new(&proxy.url(), Duration::from_secs(5));
        let a =
            api.call(http::Method::PUT, "/bucket/key?x=1", None, Bytes::from_static(b"bytes")).await.unwrap();
        assert_eq!(a.status, 200);
        let text = String::from_utf8_lossy(&a.body).into_owned();
        // The Host header the client sent (the proxy's address) reaches the server.
        assert!(
            text.starts_with("PUT /bucket/key?x=1 host=Some(") && text.contains(&proxy.addr.to_string()),
            "{text}"
        );
        assert!(text.ends_with("bytes"), "{text}");

        let pressure = S3FaultConfig { slow_down: 1.0, ..calm };
        let throttled = S3FaultProxy::start(upstream.clone(), pressure).await.unwrap();
        let api = Api::new(&throttled.url(), Duration::from_secs(5));
        let a = api.call(http::Method::GET, "/bucket/key", None, Bytes::new()).await.unwrap();
        assert_eq!(a.status, 503);
        assert!(String::from_utf8_lossy(&a.body).contains("<Code>SlowDown</Code>"));
        assert_eq!(throttled.stats().slow_downs.load(Ordering::Relaxed), 1);
        throttled.set_enabled(false);
        assert_eq!(api.call(http::Method::GET, "/bucket/key", None, Bytes::new()).await.unwrap().status, 200);

        let slow = S3FaultConfig { slow_put: 1.0, max_put_delay: Duration::from_millis(300), ..calm };
        let slow = S3FaultProxy::start(upstream, slow).await.unwrap();
        let api = Api::new(&slow.url(), Duration::from_secs(5));
        let started = std::time::Instant::now();
        for _ in 0..4 {
            assert_eq!(
                api.call(http::Method::PUT, "/b/k", None, Bytes::from_static(b"x")).await.unwrap().status,
                200
            );
        }
        let s = slow.stats();
        let held = s.puts_held_before.load(Ordering::Relaxed) + s.puts_held_after.load(Ordering::Relaxed);
        assert_eq!(held, 4);
        assert!(started.elapsed() >= Duration::from_millis(4 * 30), "held PUTs took {:?}", started.elapsed());
        assert_eq!(
            api.call(http::Method::GET, "/b/k", None, Bytes::new()).await.unwrap().status,
            200,
            "GETs are not held"
        );
    }
}
