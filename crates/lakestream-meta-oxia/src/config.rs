//! Settings of the Oxia client: a plain struct with documented defaults and a
//! [`OxiaConfig::validate`] whose errors name the field that is wrong.

use std::time::Duration;

/// The service name of v0.15+ servers, and the client's default.
pub const V1_SERVICE_NAME: &str = "io.oxia.proto.v1.OxiaClient";

/// The service name of servers before v0.15, which v0.15+ servers still answer as an alias.
pub const LEGACY_SERVICE_NAME: &str = "io.streamnative.oxia.proto.OxiaClient";

/// The service name the client uses unless configured otherwise: [`V1_SERVICE_NAME`].
/// Set [`LEGACY_SERVICE_NAME`] to talk to a server older than v0.15.
pub const DEFAULT_SERVICE_NAME: &str = V1_SERVICE_NAME;

/// The shortest session timeout an Oxia server accepts (oxia.md §10).
pub const MIN_SESSION_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest session timeout an Oxia server accepts (oxia.md §10).
pub const MAX_SESSION_TIMEOUT: Duration = Duration::from_secs(300);

/// How the client reaches an Oxia cluster.
///
/// Every field has a default ([`OxiaConfig::default`]) except `addresses`, which must name at
/// least one server. Call [`OxiaConfig::validate`] before use; [`crate::OxiaClient::connect`]
/// does. `Debug` shows every field but the bearer token.
#[derive(Clone, PartialEq, Eq)]
pub struct OxiaConfig {
    /// Bootstrap servers as `host:port`, tried in order for the `GetShardAssignments` stream.
    /// Leaders are then dialled at the addresses the servers announce. No default.
    pub addresses: Vec<String>,
    /// The Oxia namespace. Default `"default"` (the only namespace of `oxia standalone`).
    pub namespace: String,
    /// The gRPC service name; the HTTP/2 path is `/{service_name}/{method}`.
    /// Default [`V1_SERVICE_NAME`] (servers v0.15 and later); [`LEGACY_SERVICE_NAME`] for
    /// older servers (v0.15+ answer both).
    pub service_name: String,
    /// The timeout of sessions the store opens when the caller does not give one, between
    /// 2 s and 5 min. Default 15 s (Oxia's Go client). Longer: fewer keep-alives but a lost
    /// holder keeps its leases longer.
    pub session_timeout: Duration,
    /// How long one request (a read, a write's round trip, a session call) may take before
    /// it fails. Default 30 s (Oxia's Go client). A write that times out after it was sent is
    /// reported as outcome unknown.
    pub request_timeout: Duration,
    /// How long connecting to a server may take. Default 10 s.
    pub connect_timeout: Duration,
    /// The identity recorded with ephemeral records and sessions. Default `"lakestream"`.
    pub client_identity: String,
    /// A bearer token sent as `authorization: Bearer <token>` on every call. Default none.
    pub bearer_token: Option<String>,
    /// TLS to the servers. Default none (plain HTTP/2). Needs the crate feature `tls`.
    pub tls: Option<OxiaTls>,
    /// The largest response message accepted, in bytes. Default 256 MiB, the server's own
    /// limit: a single large value can exceed tonic's 4 MiB default.
    pub max_decoding_message_size: usize,
    /// How many writes one shard's write stream keeps in flight before callers wait.
    /// Default 1024, the per-stream limit of v0.17 servers (oxia.md §6).
    pub max_pending_writes_per_shard: usize,
}

/// TLS settings for the connections to the Oxia servers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OxiaTls {
    /// PEM-encoded CA certificate(s) to trust instead of the webpki roots. Default none.
    pub ca_certificate_pem: Option<Vec<u8>>,
    /// The server name to verify, when it differs from the host dialled. Default none.
    pub domain_name: Option<String>,
}

impl std::fmt::Debug for OxiaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OxiaConfig")
            .field("addresses", &self.addresses)
            .field("namespace", &self.namespace)
            .field("service_name", &self.service_name)
            .field("session_timeout", &self.session_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("client_identity", &self.client_identity)
            .field("bearer_token", &self.bearer_token.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .field("max_decoding_message_size", &self.max_decoding_message_size)
            .field("max_pending_writes_per_shard", &self.max_pending_writes_per_shard)
            .finish()
    }
}

impl Default for OxiaConfig {
    fn default() -> Self {
        Self {
            addresses: Vec::new(),
            namespace: "default".to_owned(),
            service_name: DEFAULT_SERVICE_NAME.to_owned(),
            session_timeout: Duration::from_secs(15),
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            client_identity: "lakestream".to_owned(),
            bearer_token: None,
            tls: None,
            max_decoding_message_size: 256 * 1024 * 1024,
            max_pending_writes_per_shard: 1024,
        }
    }
}

/// A setting that cannot work, with the field's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Oxia setting `{field}`: {problem}")]
pub struct ConfigError {
    /// The field of [`OxiaConfig`] (dotted for nested settings).
    pub field: &'static str,
    /// What is wrong with its value.
    pub problem: String,
}

impl ConfigError {
    fn new(field: &'static str, problem: impl Into<String>) -> Self {
        Self { field, problem: problem.into() }
    }
}

impl OxiaConfig {
    /// A configuration with the defaults and these bootstrap addresses.
    pub fn new(addresses: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self { addresses: addresses.into_iter().map(Into::into).collect(), ..Self::default() }
    }

    /// Checks every setting; the error names the first field that cannot work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.addresses.is_empty() {
            return Err(ConfigError::new("addresses", "at least one `host:port` is needed"));
        }
        for address in &self.addresses {
            validate_host_port(address).map_err(|problem| ConfigError::new("addresses", problem))?;
        }
        if self.namespace.is_empty() {
            return Err(ConfigError::new("namespace", "must not be empty (the standalone one is `default`)"));
        }
        if !is_metadata_value(&self.namespace) {
            return Err(ConfigError::new(
                "namespace",
                "must be printable ASCII (it is sent as gRPC metadata)",
            ));
        }
        validate_service_name(&self.service_name)
            .map_err(|problem| ConfigError::new("service_name", problem))?;
        if self.session_timeout < MIN_SESSION_TIMEOUT || self.session_timeout > MAX_SESSION_TIMEOUT {
            return Err(ConfigError::new(
                "session_timeout",
                format!("{:?} is outside the server's range 2 s ..= 300 s", self.session_timeout),
            ));
        }
        if self.request_timeout.is_zero() {
            return Err(ConfigError::new("request_timeout", "must be greater than zero"));
        }
        if self.connect_timeout.is_zero() {
            return Err(ConfigError::new("connect_timeout", "must be greater than zero"));
        }
        if !is_metadata_value(&self.client_identity) {
            return Err(ConfigError::new("client_identity", "must be printable ASCII"));
        }
        if let Some(token) = &self.bearer_token
            && (token.is_empty() || !is_metadata_value(token))
        {
            return Err(ConfigError::new("bearer_token", "must be non-empty printable ASCII"));
        }
        if self.tls.is_some() && !cfg!(feature = "tls") {
            return Err(ConfigError::new("tls", "this build lacks the crate feature `tls`"));
        }
        if self.max_decoding_message_size < 4 * 1024 * 1024 {
            return Err(ConfigError::new(
                "max_decoding_message_size",
                "must be at least 4 MiB (the server sends chunks of about 2 MiB plus large values)",
            ));
        }
        if self.max_pending_writes_per_shard == 0 {
            return Err(ConfigError::new("max_pending_writes_per_shard", "must be at least 1"));
        }
        Ok(())
    }
}

/// `host:port` with a non-empty host and a numeric port; no scheme (TLS is its own setting).
pub(crate) fn validate_host_port(address: &str) -> Result<(), String> {
    if address.contains("://") {
        return Err(format!("`{address}`: give `host:port` without a scheme (set `tls` for TLS)"));
    }
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err(format!("`{address}` is not `host:port`"));
    };
    if host.is_empty() || host.contains('/') || host.chars().any(char::is_whitespace) {
        return Err(format!("`{address}` has no valid host"));
    }
    if port.parse::<u16>().is_err() {
        return Err(format!("`{address}` has no valid port"));
    }
    Ok(())
}

/// A fully-qualified gRPC service name: dot-separated identifiers, at least a package and a
/// service, because the HTTP/2 path is built from it.
fn validate_service_name(name: &str) -> Result<(), String> {
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() < 2 {
        return Err(format!("`{name}` is not `package.Service`"));
    }
    let identifier = |part: &&str| {
        let mut chars = part.chars();
        matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    if !parts.iter().all(identifier) {
        return Err(format!("`{name}` is not a dotted list of identifiers"));
    }
    Ok(())
}

fn is_metadata_value(value: &str) -> bool {
    value.bytes().all(|b| (0x20..0x7f).contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> OxiaConfig {
        OxiaConfig::new(["127.0.0.1:6648"])
    }

    #[test]
    fn debug_never_shows_the_bearer_token() {
        let config = OxiaConfig { bearer_token: Some("s3cr3t-token-value".into()), ..valid() };
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(
            shown.contains("bearer_token: Some(\"<redacted>\")") && shown.contains("127.0.0.1:6648"),
            "{shown}"
        );
    }

    #[test]
    fn defaults_are_documented_values_and_valid_with_an_address() {
        let config = valid();
        assert_eq!(config.namespace, "default");
        assert_eq!(config.service_name, DEFAULT_SERVICE_NAME);
        assert_eq!(config.session_timeout, Duration::from_secs(15));
        assert_eq!(config.request_timeout, Duration::from_secs(30));
        assert_eq!(config.max_decoding_message_size, 256 * 1024 * 1024);
        assert_eq!(config.max_pending_writes_per_shard, 1024);
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn the_legacy_service_name_is_a_config_change() {
        assert_eq!(valid().service_name, V1_SERVICE_NAME);
        let config = OxiaConfig { service_name: LEGACY_SERVICE_NAME.to_owned(), ..valid() };
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn each_bad_setting_is_named() {
        let cases: Vec<(OxiaConfig, &str)> = vec![
            (OxiaConfig::default(), "addresses"),
            (OxiaConfig::new(["localhost"]), "addresses"),
            (OxiaConfig::new(["http://localhost:6648"]), "addresses"),
            (OxiaConfig::new([":6648"]), "addresses"),
            (OxiaConfig::new(["localhost:port"]), "addresses"),
            (OxiaConfig { namespace: String::new(), ..valid() }, "namespace"),
            (OxiaConfig { namespace: "ns\n".to_owned(), ..valid() }, "namespace"),
            (OxiaConfig { service_name: "OxiaClient".to_owned(), ..valid() }, "service_name"),
            (OxiaConfig { service_name: "io.oxia/x.OxiaClient".to_owned(), ..valid() }, "service_name"),
            (OxiaConfig { session_timeout: Duration::from_millis(1999), ..valid() }, "session_timeout"),
            (OxiaConfig { session_timeout: Duration::from_secs(301), ..valid() }, "session_timeout"),
            (OxiaConfig { request_timeout: Duration::ZERO, ..valid() }, "request_timeout"),
            (OxiaConfig { connect_timeout: Duration::ZERO, ..valid() }, "connect_timeout"),
            (OxiaConfig { client_identity: "é".to_owned(), ..valid() }, "client_identity"),
            (OxiaConfig { bearer_token: Some(String::new()), ..valid() }, "bearer_token"),
            (OxiaConfig { max_decoding_message_size: 1024, ..valid() }, "max_decoding_message_size"),
            (OxiaConfig { max_pending_writes_per_shard: 0, ..valid() }, "max_pending_writes_per_shard"),
        ];
        for (config, field) in cases {
            let error = config.validate().expect_err(field);
            assert_eq!(error.field, field, "{error}");
            assert!(error.to_string().contains(field), "{error}");
        }
    }

    #[test]
    fn session_timeout_bounds_are_inclusive() {
        for timeout in [MIN_SESSION_TIMEOUT, MAX_SESSION_TIMEOUT] {
            let config = OxiaConfig { session_timeout: timeout, ..valid() };
            assert_eq!(config.validate(), Ok(()));
        }
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn tls_without_the_feature_is_rejected_by_name() {
        let config = OxiaConfig { tls: Some(OxiaTls::default()), ..valid() };
        assert_eq!(config.validate().map_err(|e| e.field), Err("tls"));
    }
}
