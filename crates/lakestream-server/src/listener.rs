//! The listeners of both APIs: one accept loop that serves HTTP/1.1 and HTTP/2 (gRPC), with
//! TLS when `[tls]` names a certificate, records each connection's peer address for the rate
//! limiter, and shuts down gracefully (open requests finish, idle connections close).
//!
//! Every connection is bounded by `[listener]` ([`ListenerConfig`]): at most
//! `max_connections` open per listener (one more is refused at once, with a `503` naming the
//! limit on a plain-TCP listener), a TLS handshake within `tls_handshake_timeout`, an HTTP/1
//! request head within `header_read_timeout`, no request in flight for at most
//! `idle_timeout` (which also ends a client that trickles a request in, over either
//! protocol), and HTTP/2 stream limits.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http_body_util::BodyExt as _;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// `[tls]`: serve both APIs over TLS. Both files are PEM; absent means plain TCP.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// The certificate chain, leaf first.
    pub cert_file: Option<PathBuf>,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
}

/// Why the TLS settings cannot be used; names the key and the file.
#[derive(Debug, thiserror::Error)]
#[error("tls.{key}: {message}")]
pub struct TlsError {
    /// `cert_file` or `key_file`.
    pub key: &'static str,
    /// What is wrong.
    pub message: String,
}

impl TlsConfig {
    /// Loads the certificate and key into an acceptor; `None` when TLS is off.
    pub fn acceptor(&self) -> Result<Option<TlsAcceptor>, TlsError> {
        let (cert_file, key_file) = match (&self.cert_file, &self.key_file) {
            (None, None) => return Ok(None),
            (Some(c), Some(k)) => (c, k),
            (Some(_), None) => return Err(missing("key_file", "cert_file")),
            (None, Some(_)) => return Err(missing("cert_file", "key_file")),
        };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_file)
            .and_then(|certs| certs.collect())
            .map_err(|e| file_error("cert_file", cert_file, e))?;
        if certs.is_empty() {
            return Err(file_error("cert_file", cert_file, "no CERTIFICATE block"));
        }
        let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| file_error("key_file", key_file, e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError { key: "cert_file", message: e.to_string() })?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| TlsError {
                key: "key_file",
                message: format!("does not fit the certificate: {e}"),
            })?;
        // gRPC needs HTTP/2; browsers and curl may use either.
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Some(TlsAcceptor::from(Arc::new(config))))
    }
}

fn missing(absent: &'static str, present: &str) -> TlsError {
    TlsError { key: absent, message: format!("is required when tls.{present} is set") }
}

fn file_error(key: &'static str, path: &Path, e: impl std::fmt::Display) -> TlsError {
    TlsError { key, message: format!("{}: {e}", path.display()) }
}

/// The largest `listener.max_connections`.
pub const MAX_CONNECTIONS: usize = 1_000_000;

/// The largest `listener.http2_max_send_buf_size` accepted (hyper takes at most `u32::MAX`).
pub const MAX_SEND_BUF_SIZE: usize = 1 << 30;

/// `[listener]`: connection limits and timeouts, applied to the HTTP and the gRPC listener
/// each. Every value has to be greater than zero.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ListenerConfig {
    /// Open connections per listener. One more is refused as soon as it is accepted: on a
    /// plain-TCP listener with `503 Service Unavailable`, `Retry-After: 1`, `Connection: close`
    /// and `{"error":{"code":"too_many_connections",…}}`; on a TLS listener it is closed
    /// (answering would cost a handshake). Open connections keep being served. Default 10,000.
    pub max_connections: usize,
    /// HTTP/1: time a client has to send a complete request head (request line and headers),
    /// counted from the connection's start or the end of the previous response. A client
    /// that trickles its head in (slowloris) is disconnected; so is a kept-alive HTTP/1
    /// connection that sends no next request within it. Default 30 s.
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// Time a connection may stay open with no request in flight: before its first request,
    /// between requests, or while a request head trickles in (over HTTP/1 or HTTP/2). A
    /// request in flight (a long-polling fetch included) keeps its connection. Default 60 s.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Time for a client to complete the TLS handshake. Default 10 s.
    #[serde(with = "humantime_serde")]
    pub tls_handshake_timeout: Duration,
    /// HTTP/2 (gRPC): streams a client may have open at once on one connection, advertised
    /// in the server's SETTINGS. Default 256.
    pub http2_max_concurrent_streams: u32,
    /// HTTP/2: streams a client may open and reset before the server handles them (the
    /// "rapid reset" attack); beyond it the connection is closed with GOAWAY. Default 20.
    pub http2_max_pending_accept_reset_streams: usize,
    /// HTTP/2: the largest header list a client may send, in bytes. Default 16 KiB.
    pub http2_max_header_list_size: u32,
    /// HTTP/2: how much of an answer the server queues on one stream ahead of the socket,
    /// in bytes. Read answers are up to 8 MiB: with hyper's default of 400 KiB, a client
    /// that accepts large frames gets them cut to 400 KiB and the connection wakes for each.
    /// Default 4 MiB, at most 1 GiB. The bytes queued are slices of the answer, not copies.
    pub http2_max_send_buf_size: usize,
    /// On shutdown (SIGTERM), time between `/readyz` starting to answer 503 and the listeners
    /// closing; requests are served meanwhile, so load balancers can take the instance out
    /// first. Default 0 s (close at once); the Helm chart sets 5 s.
    #[serde(with = "humantime_serde")]
    pub drain_delay: Duration,
}

impl Default for ListenerConfig {
    fn default() -> Self {
        ListenerConfig {
            max_connections: 10_000,
            header_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            tls_handshake_timeout: Duration::from_secs(10),
            http2_max_concurrent_streams: 256,
            http2_max_pending_accept_reset_streams: 20,
            http2_max_header_list_size: 16 << 10,
            http2_max_send_buf_size: 4 << 20,
            drain_delay: Duration::ZERO,
        }
    }
}

impl ListenerConfig {
    /// Checks every value; the error names the key (without the `listener.` section).
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let zero = |key: &'static str| Err((key, "must be greater than 0".to_owned()));
        if self.max_connections == 0 {
            return zero("max_connections");
        }
        if self.max_connections > MAX_CONNECTIONS {
            return Err(("max_connections", format!("must be at most {MAX_CONNECTIONS}")));
        }
        for (key, value) in [
            ("header_read_timeout", self.header_read_timeout),
            ("idle_timeout", self.idle_timeout),
            ("tls_handshake_timeout", self.tls_handshake_timeout),
        ] {
            if value.is_zero() {
                return zero(key);
            }
        }
        if self.http2_max_concurrent_streams == 0 {
            return zero("http2_max_concurrent_streams");
        }
        if self.http2_max_pending_accept_reset_streams == 0 {
            return zero("http2_max_pending_accept_reset_streams");
        }
        if self.http2_max_header_list_size == 0 {
            return zero("http2_max_header_list_size");
        }
        if self.http2_max_send_buf_size == 0 {
            return zero("http2_max_send_buf_size");
        }
        if self.http2_max_send_buf_size > MAX_SEND_BUF_SIZE {
            return Err(("http2_max_send_buf_size", format!("must be at most {MAX_SEND_BUF_SIZE} (1 GiB)")));
        }
        Ok(())
    }
}

pub use lakestream_service::metrics::ConnectionStats;

/// The peer of a connection, in every request's extensions (the rate limiter's client when
/// no token names one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// Requests in flight on one connection, and since when none has been.
#[derive(Debug)]
struct Activity {
    started: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds after `started` when the last request ended (or 0).
    idle_since_ms: AtomicU64,
}

impl Activity {
    fn new() -> Arc<Self> {
        Arc::new(Activity {
            started: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(0),
        })
    }

    fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// Resolves once no request has been in flight for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            if self.in_flight.load(Ordering::SeqCst) == 0 {
                let since = self.started + Duration::from_millis(self.idle_since_ms.load(Ordering::SeqCst));
                let deadline = since + idle;
                if Instant::now() >= deadline && self.in_flight.load(Ordering::SeqCst) == 0 {
                    return;
                }
                tokio::time::sleep_until(deadline.max(Instant::now() + Duration::from_millis(10)).into())
                    .await;
            } else {
                tokio::time::sleep(idle).await;
            }
        }
    }
}

/// A request in flight, from the service call until its response body is done or dropped.
#[derive(Debug)]
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let a = &self.0;
        a.idle_since_ms.store(a.started.elapsed().as_millis() as u64, Ordering::SeqCst);
        a.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a refused connection reads before it is closed (plain TCP only).
const TOO_MANY_CONNECTIONS: &str = "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
retry-after: 1\r\nconnection: close\r\ncontent-length: ";

fn refusal(max: usize) -> Vec<u8> {
    let body = format!(
        "{{\"error\":{{\"code\":\"too_many_connections\",\"message\":\"the server has {max} connections open \
         (listener.max_connections); retry later\"}}}}"
    );
    format!("{TOO_MANY_CONNECTIONS}{}\r\n\r\n{body}", body.len()).into_bytes()
}

/// Serves `service` on every connection `listener` accepts until `shutdown` resolves, then
/// stops accepting and waits for open connections to finish their requests. `limits` bounds
/// every connection (see the module doc); `stats` counts what happened.
pub async fn serve_connections<S, B>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    service: S,
    limits: &ListenerConfig,
    stats: Arc<ConnectionStats>,
    shutdown: impl Future<Output = ()>,
) where
    S: tower::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_concurrent_streams)
        .max_pending_accept_reset_streams(limits.http2_max_pending_accept_reset_streams)
        .max_header_list_size(limits.http2_max_header_list_size)
        .max_send_buf_size(limits.http2_max_send_buf_size);
    let max = limits.max_connections;
    let permits = Arc::new(tokio::sync::Semaphore::new(max));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let refusal = Arc::new(refusal(max));
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of descriptors or a reset before accept: keep serving the others.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%peer, max_connections = max, "connection refused: listener.max_connections open");
            if tls.is_none() {
                let refusal = refusal.clone();
                tokio::spawn(async move {
                    let mut tcp = tcp;
                    let _ = tokio::time::timeout(Duration::from_secs(1), async {
                        let _ = tcp.write_all(&refusal).await;
                        let _ = tcp.shutdown().await;
                    })
                    .await;
                });
            }
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let activity = Activity::new();
        let in_flight = activity.clone();
        let service = tower::util::MapRequest::new(service.clone(), move |mut r: http::Request<_>| {
            r.extensions_mut().insert(PeerAddr(peer));
            r
        });
        // Counts the request in flight until its response body is done or dropped.
        let service = tower::util::MapFuture::new(service, move |answer: S::Future| {
            let guard = in_flight.begin();
            async move {
                let response = answer.await?;
                Ok::<_, S::Error>(response.map(move |body| {
                    body.map_frame(move |frame| {
                        let _ = &guard;
                        frame
                    })
                }))
            }
        });
        let hyper_service = hyper_util::service::TowerToHyperService::new(service);
        let builder = builder.clone();
        let stopped = stopped.clone();
        let stats = stats.clone();
        let tls = tls.clone();
        let limits = limits.clone();
        stats.open.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let _permit = permit;
            match tls {
                None => {
                    serve_one(tcp, &builder, hyper_service, activity, &limits, &stats, stopped, peer).await
                }
                Some(acceptor) => {
                    match tokio::time::timeout(limits.tls_handshake_timeout, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            serve_one(
                                stream,
                                &builder,
                                hyper_service,
                                activity,
                                &limits,
                                &stats,
                                stopped,
                                peer,
                            )
                            .await
                        }
                        Ok(Err(e)) => {
                            stats.tls_handshake_failed.fetch_add(1, Ordering::Relaxed);
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        }
                        Err(_) => {
                            stats.tls_handshake_failed.fetch_add(1, Ordering::Relaxed);
                            tracing::debug!(%peer, "TLS handshake timed out (listener.tls_handshake_timeout)");
                        }
                    }
                }
            }
            stats.open.fetch_sub(1, Ordering::Relaxed);
        });
    }
    drop(listener);
    let _ = stop.send(true);
    // Every connection holds a permit until it ends: all of them back means all are done.
    let _ = permits.acquire_many(u32::try_from(max).unwrap_or(u32::MAX)).await;
}

/// Serves one connection until it ends, shutting it down gracefully when `stopped` turns
/// true, and closing it once no request has been in flight for `idle_timeout`.
#[allow(clippy::too_many_arguments)]
async fn serve_one<I, S, B>(
    io: I,
    builder: &Builder<TokioExecutor>,
    service: S,
    activity: Arc<Activity>,
    limits: &ListenerConfig,
    stats: &ConnectionStats,
    mut stopped: tokio::sync::watch::Receiver<bool>,
    peer: SocketAddr,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let mut draining = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            _ = stopped.wait_for(|s| *s), if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = activity.idle_for(limits.idle_timeout) => {
                stats.idle_closed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%peer, "closing a connection idle for listener.idle_timeout");
                return;
            }
        }
    }
}
