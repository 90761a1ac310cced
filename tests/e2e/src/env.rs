//! What the environment names. Every variable a suite needs but does not find is an error
//! that says how to provide it: no suite passes by skipping.
//!
//! | variable | meaning |
//! |---|---|
//! | `LAKESTREAM_TEST_S3_ENDPOINT`, `_BUCKET`, `_ACCESS_KEY`, `_SECRET_KEY`, `_REGION` | the S3 server (`scripts/test` starts s3s-fs and sets them) |
//! | `LAKESTREAM_TEST_AZURE_ENDPOINT`, `_ACCOUNT`, `_ACCESS_KEY`, `_CONTAINER` | Azurite, for the suites on Azure Blob storage (`scripts/test` starts it) |
//! | `LAKESTREAM_TEST_OXIA_BIN` | the Oxia binary; the separate-process topology starts its own server with it |
//! | `LAKESTREAM_BIN` | the `lakestream` binary (default: next to the test executable's `deps/`) |
//! | `LAKESTREAM_E2E_HTTP` | an external stack's writer (and catalog) URL, e.g. after `docker compose up` |
//! | `LAKESTREAM_E2E_READ_HTTP` | its reader URL (default: `LAKESTREAM_E2E_HTTP`) |
//! | `LAKESTREAM_E2E_COMPACT_WAIT_SECS` | how long to let an external stack's compactor work (default 200 s) |
//! | `LAKESTREAM_SOAK_SECS` | run a suite's load phase this long instead of its CI length |
//! | `LAKESTREAM_E2E_NIGHTLY` | `1`: the fault suites run their nightly length (minutes each, more faults) |
//! | `LAKESTREAM_LINCHECK_BIN` | the linearizability checker (default: built from `tests/lincheck` with `go build`) |
//! | `LAKESTREAM_E2E_HISTORY_DIR` | also keep each recorded history there |
//! | `LAKESTREAM_E2E_KILLS` | how many kill -9 rounds the crash suite runs |
//! | `LAKESTREAM_TEST_SEED` | replay a seed (kill points, reset decisions) |

use std::net::ToSocketAddrs;
use std::time::Duration;

use crate::{Error, Result};

/// How to start an S3 server when none is configured.
pub const HOW_TO_START_S3: &str = "run the suite through scripts/test, or start one with \
     `source scripts/servers.sh && start_s3 $(mktemp -d)` in the shell that runs cargo test";

/// An Azure Blob Storage account the services store into instead of S3 (Azurite).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AzureEnv {
    /// The account URL, `http://host:port/account`.
    pub endpoint: String,
    /// The account.
    pub account: String,
    /// Its shared key.
    pub access_key: String,
    /// The container (it exists).
    pub container: String,
}

impl AzureEnv {
    /// Reads `LAKESTREAM_TEST_AZURE_*`; an error names the first missing variable.
    pub fn from_env() -> Result<AzureEnv> {
        let get = |name: &str| {
            std::env::var(name).ok().filter(|v| !v.is_empty()).ok_or_else(|| {
                Error::new(format!(
                    "{name} is not set: this suite needs Azurite; run it through scripts/test, or start it \
                     with `source scripts/servers.sh && install_azurite && start_azurite $(mktemp -d)` in \
                     the shell that runs cargo test"
                ))
            })
        };
        Ok(AzureEnv {
            endpoint: get("LAKESTREAM_TEST_AZURE_ENDPOINT")?,
            account: get("LAKESTREAM_TEST_AZURE_ACCOUNT")?,
            access_key: get("LAKESTREAM_TEST_AZURE_ACCESS_KEY")?,
            container: get("LAKESTREAM_TEST_AZURE_CONTAINER")?,
        })
    }
}

/// The S3 server the services store into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Env {
    /// `http://host:port`.
    pub endpoint: String,
    /// The bucket (it exists).
    pub bucket: String,
    /// Access key id.
    pub access_key: String,
    /// Secret access key.
    pub secret_key: String,
    /// Region.
    pub region: String,
}

impl S3Env {
    /// Reads `LAKESTREAM_TEST_S3_*`; an error names the first missing variable.
    pub fn from_env() -> Result<S3Env> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// As [`S3Env::from_env`], through `var` (tests need not touch the process environment).
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<S3Env> {
        let get = |name: &str| {
            var(name).filter(|v| !v.is_empty()).ok_or_else(|| {
                Error::new(format!(
                    "{name} is not set: the end-to-end suites need a real S3 server; {HOW_TO_START_S3}"
                ))
            })
        };
        Ok(S3Env {
            endpoint: get("LAKESTREAM_TEST_S3_ENDPOINT")?,
            bucket: get("LAKESTREAM_TEST_S3_BUCKET")?,
            access_key: get("LAKESTREAM_TEST_S3_ACCESS_KEY")?,
            secret_key: get("LAKESTREAM_TEST_S3_SECRET_KEY")?,
            region: get("LAKESTREAM_TEST_S3_REGION")?,
        })
    }

    /// The endpoint's `host:port` (for a proxy in front of it).
    pub fn host_port(&self) -> Result<String> {
        let rest = self.endpoint.strip_prefix("http://").ok_or_else(|| {
            Error::new(format!("LAKESTREAM_TEST_S3_ENDPOINT {:?}: expected http://host:port", self.endpoint))
        })?;
        Ok(rest.trim_end_matches('/').to_string())
    }
}

/// Fails unless something accepts TCP connections at `addr` within `timeout`.
pub fn check_reachable(what: &str, addr: &str, timeout: Duration) -> Result<()> {
    let resolved: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|e| Error::new(format!("{what} {addr:?} does not resolve: {e}")))?
        .collect();
    for a in &resolved {
        if std::net::TcpStream::connect_timeout(a, timeout).is_ok() {
            return Ok(());
        }
    }
    Err(Error::new(format!(
        "{what} at {addr} does not accept connections (tried {resolved:?} for {timeout:?})"
    )))
}

/// An already running stack the suites target instead of spawning processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct External {
    /// The writer's (and catalog's) base URL.
    pub http: String,
    /// The reader's base URL.
    pub read_http: String,
    /// How long to let its compactor work before reading again.
    pub compact_wait: Duration,
}

/// The external stack named by `LAKESTREAM_E2E_HTTP`, if any.
pub fn external() -> Result<Option<External>> {
    let Some(http) = std::env::var("LAKESTREAM_E2E_HTTP").ok().filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let read_http = std::env::var("LAKESTREAM_E2E_READ_HTTP").ok().filter(|v| !v.is_empty());
    Ok(Some(External {
        read_http: read_http.unwrap_or_else(|| http.clone()),
        http,
        compact_wait: Duration::from_secs(number("LAKESTREAM_E2E_COMPACT_WAIT_SECS", 200)?),
    }))
}

/// A number from the environment, `default` when unset; an error names a bad value.
pub fn number(name: &str, default: u64) -> Result<u64> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => v.trim().parse().map_err(|e| Error::new(format!("{name}={v:?} is not a whole number: {e}"))),
    }
}

/// Whether the nightly-sized runs are asked for (`LAKESTREAM_E2E_NIGHTLY=1`).
pub fn nightly() -> bool {
    std::env::var("LAKESTREAM_E2E_NIGHTLY").is_ok_and(|v| v == "1")
}

/// A fault suite's length: `LAKESTREAM_SOAK_SECS` when set, else `nightly` in a nightly run
/// ([`nightly`]), else `ci`.
pub fn fault_run_length(ci: Duration, nightly_length: Duration) -> Result<Duration> {
    if std::env::var("LAKESTREAM_SOAK_SECS").is_ok() {
        return soak_or(ci);
    }
    Ok(if nightly() { nightly_length } else { ci })
}

/// A phase's length: `LAKESTREAM_SOAK_SECS` when set (a soak), else `ci`.
pub fn soak_or(ci: Duration) -> Result<Duration> {
    Ok(match std::env::var("LAKESTREAM_SOAK_SECS") {
        Err(_) => ci,
        Ok(_) => Duration::from_secs(number("LAKESTREAM_SOAK_SECS", 0)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_s3_variable_is_named_with_the_way_to_start_a_server() {
        let err = S3Env::from_lookup(|v| (v != "LAKESTREAM_TEST_S3_BUCKET").then(|| "x".into())).unwrap_err();
        assert!(err.0.contains("LAKESTREAM_TEST_S3_BUCKET") && err.0.contains("start_s3"), "{err}");
        let s3 = S3Env::from_lookup(|v| {
            Some(if v.ends_with("ENDPOINT") { "http://127.0.0.1:9/".into() } else { "x".into() })
        })
        .unwrap();
        assert_eq!(s3.host_port().unwrap(), "127.0.0.1:9");
    }

    #[test]
    fn an_unreachable_address_is_an_error() {
        // Port 1 on loopback: nothing listens there on a test machine.
        let err = check_reachable("Oxia", "127.0.0.1:1", Duration::from_millis(200)).unwrap_err();
        assert!(err.0.contains("Oxia at 127.0.0.1:1"), "{err}");
    }
}
