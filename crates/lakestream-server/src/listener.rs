//! The listeners of both APIs: one accept loop that serves HTTP/1.1 and HTTP/2 (gRPC), with
//! TLS when `[tls]` names a certificate, records each connection's peer address for the rate
//! limiter, and shuts down gracefully (open requests finish, idle connections close).

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
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

/// The peer of a connection, in every request's extensions (the rate limiter's client when
/// no token names one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// Serves `service` on every connection `listener` accepts until `shutdown` resolves, then
/// stops accepting and waits for open connections to finish their requests.
pub async fn serve_connections<S, B>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    service: S,
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
    let graceful = GracefulShutdown::new();
    let builder = Builder::new(TokioExecutor::new());
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of descriptors or a reset before accept: keep serving the others.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let service = tower::util::MapRequest::new(service.clone(), move |mut r: http::Request<_>| {
            r.extensions_mut().insert(PeerAddr(peer));
            r
        });
        let hyper_service = hyper_util::service::TowerToHyperService::new(service);
        match &tls {
            None => {
                let conn = builder.serve_connection(TokioIo::new(tcp), hyper_service).into_owned();
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                });
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                let builder = builder.clone();
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    let stream = match acceptor.accept(tcp).await {
                        Ok(stream) => stream,
                        Err(e) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                    };
                    let conn = builder.serve_connection(TokioIo::new(stream), hyper_service);
                    if let Err(e) = watcher.watch(conn.into_owned()).await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                });
            }
        }
    }
    drop(listener);
    graceful.shutdown().await;
}
