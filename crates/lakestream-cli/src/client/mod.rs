//! The client commands: a small HTTP client of one Lakestream service (plain or TLS, with a
//! bearer token), profiles, and the commands built on it.
//!
//! Every failure is a [`ClientError`] whose [`ExitStatus`] is the process's exit code, so that
//! scripts can tell "the server refused" from "some entries were not appended".

pub mod commands;
pub mod consume;
pub mod produce;
pub mod profile;

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

/// The exit codes of the client commands (documented in `docs/cli.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// 1: the request failed: the server refused it, or could not be reached.
    Failed = 1,
    /// 2: bad usage or configuration (flags, profile file, CA file, input framing).
    Usage = 2,
    /// 3: produce: some entries were not appended (each is named on stderr).
    EntriesFailed = 3,
    /// 4: the server refused the credentials (401) or the permission (403).
    Unauthorized = 4,
    /// 5: the namespace, stream or partition does not exist (404).
    NotFound = 5,
}

/// Why a client command failed, and which exit status says so.
#[derive(Debug)]
pub struct ClientError {
    /// The process's exit status.
    pub status: ExitStatus,
    /// What went wrong, naming the request or the input.
    pub message: String,
    /// Whether the same request may succeed later (unreachable server, 429, 503).
    pub transient: bool,
    /// The HTTP status of a refused request.
    pub http_status: Option<u16>,
}

impl ClientError {
    /// A failure of the request (exit status 1).
    pub fn failed(message: impl Into<String>) -> Self {
        ClientError {
            status: ExitStatus::Failed,
            message: message.into(),
            transient: false,
            http_status: None,
        }
    }

    /// Bad usage or configuration (exit status 2).
    pub fn usage(message: impl Into<String>) -> Self {
        ClientError {
            status: ExitStatus::Usage,
            message: message.into(),
            transient: false,
            http_status: None,
        }
    }

    fn unreachable(message: String) -> Self {
        ClientError { status: ExitStatus::Failed, message, transient: true, http_status: None }
    }

    fn from_status(status: http::StatusCode, message: String) -> Self {
        let exit = match status.as_u16() {
            401 | 403 => ExitStatus::Unauthorized,
            404 => ExitStatus::NotFound,
            _ => ExitStatus::Failed,
        };
        let transient = matches!(status.as_u16(), 429 | 502 | 503);
        ClientError { status: exit, message, transient, http_status: Some(status.as_u16()) }
    }
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A client command's result.
pub type ClientResult<T> = Result<T, ClientError>;

/// Where and how to reach a service: resolved from flags, environment and profile.
#[derive(Clone, Default)]
pub struct Connection {
    /// `http://host:port` or `https://host:port`, with an optional path prefix.
    pub url: String,
    /// The bearer token, if the service requires one.
    pub token: Option<String>,
    /// A PEM file of CA certificates to trust (besides the system's) for `https://`.
    pub ca_file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

/// Characters escaped in one path segment (a namespace or stream name may hold anything).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// One path segment, percent-encoded.
pub fn segment(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// A small JSON client of one Lakestream HTTP endpoint.
pub struct Api {
    base: String,
    token: Option<String>,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Api {
    /// A client of `connection`; `https://` URLs verify the server against the system's
    /// roots plus `ca_file`.
    pub fn new(connection: &Connection) -> ClientResult<Api> {
        let url = connection.url.trim_end_matches('/');
        let https = if url.starts_with("https://") {
            true
        } else if url.starts_with("http://") {
            false
        } else {
            return Err(ClientError::usage(format!("--url {url:?}: expected an http:// or https:// URL")));
        };
        if connection.ca_file.is_some() && !https {
            return Err(ClientError::usage(format!("--ca-file is given but --url {url:?} is not https://")));
        }
        let tls = tls_config(connection.ca_file.as_deref())?;
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        if let Some(token) = &connection.token
            && (token.is_empty() || token.chars().any(|c| c.is_control() || c == ' '))
        {
            return Err(ClientError::usage("--token: empty, or holds spaces or control characters"));
        }
        Ok(Api {
            base: url.to_string(),
            token: connection.token.clone(),
            client: Client::builder(TokioExecutor::new()).build(connector),
        })
    }

    /// Sends one request and returns the answer's status and body; transport failures are
    /// errors, HTTP error statuses are not.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Bytes,
    ) -> ClientResult<(http::StatusCode, Bytes)> {
        let uri = format!("{}{path}", self.base);
        let mut request =
            http::Request::builder().method(method).uri(&uri).header("content-type", content_type);
        if let Some(token) = &self.token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = request.body(Full::new(body)).map_err(|e| ClientError::usage(format!("{uri}: {e}")))?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| ClientError::unreachable(format!("{method} {uri}: {}", error_chain(&e))))?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| ClientError::unreachable(format!("{method} {uri}: reading the answer: {e}")))?
            .to_bytes();
        Ok((status, bytes))
    }

    /// A JSON request; a non-2xx answer is an error carrying the server's message.
    pub async fn json(&self, method: &str, path: &str, body: Value) -> ClientResult<Value> {
        let bytes = if body.is_null() { Bytes::new() } else { Bytes::from(body.to_string()) };
        let (status, bytes) = self.send(method, path, "application/json", bytes).await?;
        let uri = format!("{}{path}", self.base);
        let value: Value = if bytes.is_empty() {
            Value::Null
        } else {
            match serde_json::from_slice(&bytes) {
                Ok(v) => v,
                Err(_) if !status.is_success() => {
                    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned();
                    return Err(ClientError::from_status(
                        status,
                        format!("{method} {uri}: {status}: {text}"),
                    ));
                }
                Err(e) => {
                    return Err(ClientError::failed(format!("{method} {uri}: answer is not JSON: {e}")));
                }
            }
        };
        if !status.is_success() {
            let message = value["error"]["message"].as_str().unwrap_or("(no message)");
            return Err(ClientError::from_status(status, format!("{method} {uri}: {status}: {message}")));
        }
        Ok(value)
    }
}

/// rustls for `https://`: the platform's roots, plus the CA file's certificates.
fn tls_config(ca_file: Option<&Path>) -> ClientResult<rustls::ClientConfig> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    // Unreadable platform certificates are skipped: a CA file may be all that is needed.
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_file {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .and_then(|iter| iter.collect())
            .map_err(|e| ClientError::usage(format!("--ca-file {}: {e}", path.display())))?;
        if certs.is_empty() {
            return Err(ClientError::usage(format!(
                "--ca-file {}: no PEM certificate in it",
                path.display()
            )));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| ClientError::usage(format!("--ca-file {}: {e}", path.display())))?;
        }
    }
    // Explicitly ring: the S3 SDK's rustls may enable a second provider in this binary.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::usage(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// An error and its sources, on one line (hyper's own message says little: "client error").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The path of a partition's resource, e.g. `/v1/namespaces/ns/streams/s/partitions/0/entries`.
pub fn partition_path(ns: &str, stream: &str, partition: u32, rest: &str) -> String {
    format!("/v1/namespaces/{}/streams/{}/partitions/{partition}/{rest}", segment(ns), segment(stream))
}

/// The path of a stream.
pub fn stream_path(ns: &str, stream: &str) -> String {
    format!("/v1/namespaces/{}/streams/{}", segment(ns), segment(stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_escape_what_a_path_cannot_hold() {
        assert_eq!(segment("team a/b%"), "team%20a%2Fb%25");
        assert_eq!(segment("events-1_x.y~"), "events-1_x.y~");
    }

    #[test]
    fn urls_other_than_http_and_https_are_refused_naming_the_flag() {
        let c = Connection { url: "ftp://x".into(), ..Connection::default() };
        let e = Api::new(&c).err().expect("refused");
        assert_eq!(e.status, ExitStatus::Usage);
        assert!(e.message.contains("--url"), "{e}");
    }

    #[test]
    fn a_ca_file_that_holds_no_certificate_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate").unwrap();
        let c = Connection { url: "https://localhost:1".into(), token: None, ca_file: Some(path) };
        let e = Api::new(&c).err().expect("refused");
        assert_eq!(e.status, ExitStatus::Usage);
        assert!(e.message.contains("ca.pem"), "{e}");
    }

    #[test]
    fn tokens_are_never_printed() {
        let c = Connection { url: "http://x".into(), token: Some("s3cret".into()), ca_file: None };
        assert!(!format!("{c:?}").contains("s3cret"));
    }
}
