//! The transports' settings: the HTTP and gRPC listeners, TLS on both, and their connection
//! limits. [`ServerConfig`] is one part of the `lakestream` command's configuration file (its
//! fields are top-level sections there); the service's own settings are
//! `lakestream_service::ServiceConfig`.

use std::net::SocketAddr;
use std::time::Duration;

use lakestream_service::config::InvalidSetting;
use serde::Deserialize;

/// The HTTP and gRPC APIs' settings. Unknown top-level keys are left to the caller, since the
/// same file holds other parts' sections.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ServerConfig {
    /// The HTTP API.
    pub http: HttpConfig,
    /// The gRPC API.
    pub grpc: GrpcConfig,
    /// TLS for both APIs (`cert_file`, `key_file`); off when absent.
    pub tls: crate::listener::TlsConfig,
    /// Connection limits and timeouts of both listeners, and the shutdown drain delay.
    pub listener: crate::listener::ListenerConfig,
}

impl ServerConfig {
    /// The APIs of `lakestream dev`: HTTP on `http`, gRPC on `grpc` (when given).
    pub fn dev(http: SocketAddr, grpc: Option<SocketAddr>) -> ServerConfig {
        ServerConfig {
            http: HttpConfig { addr: http, ..HttpConfig::default() },
            grpc: GrpcConfig { addr: grpc, ..GrpcConfig::default() },
            ..ServerConfig::default()
        }
    }

    /// Checks the settings, naming the key of a bad one.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        self.listener
            .validate()
            .map_err(|(key, rule)| InvalidSetting::new(format!("listener.{key}"), rule))?;
        if let Err(e) = self.tls.acceptor() {
            return Err(InvalidSetting::new(format!("tls.{}", e.key), e.message));
        }
        if self.grpc.max_message_bytes == 0 {
            return Err(InvalidSetting::new("grpc.max_message_bytes", "must be greater than 0"));
        }
        if self.http.max_body_bytes == 0 {
            return Err(InvalidSetting::new("http.max_body_bytes", "must be greater than 0"));
        }
        Ok(())
    }
}

/// The HTTP API's settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Where to listen. Default `127.0.0.1:8080`.
    pub addr: SocketAddr,
    /// The largest request body accepted; larger requests get 413. Default 16 MiB.
    pub max_body_bytes: usize,
    /// The longest `max_wait_ms` a fetch may ask for. Default 30 s.
    #[serde(with = "humantime_serde")]
    pub max_fetch_wait: Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            max_body_bytes: 16 << 20,
            max_fetch_wait: Duration::from_secs(30),
        }
    }
}

/// The gRPC API's settings. Fetch waits are limited by `http.max_fetch_wait` for both APIs.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GrpcConfig {
    /// Where to listen; absent (the default) serves no gRPC. `lakestream dev` listens on
    /// `127.0.0.1:9090`. Off by default so that a service only opens the ports its file names.
    pub addr: Option<SocketAddr>,
    /// The largest request message accepted; larger ones are refused with
    /// `RESOURCE_EXHAUSTED` before any of it is processed. Default 16 MiB, like
    /// `http.max_body_bytes`.
    pub max_message_bytes: usize,
}

impl Default for GrpcConfig {
    fn default() -> Self {
        GrpcConfig { addr: None, max_message_bytes: 16 << 20 }
    }
}
