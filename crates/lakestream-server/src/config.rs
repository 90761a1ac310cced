//! Service configuration: one TOML file, environment variables and flags.
//!
//! Precedence, highest first: command-line flags, `LAKESTREAM_*` environment variables, the
//! TOML file, the defaults. Unknown keys are refused with an error naming them, so a typo
//! never silently falls back to a default.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lakestream_catalog::CatalogConfig;
use lakestream_compactor::CompactorConfig;
use lakestream_objstore_s3::S3Config;
use lakestream_reader::ReaderConfig;
use lakestream_writer::WriterConfig;
use serde::Deserialize;

/// Everything a Lakestream service process needs to start.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// The HTTP API.
    pub http: HttpConfig,
    /// Which roles this process serves.
    pub roles: RolesConfig,
    /// The metadata store.
    pub metadata: MetadataConfig,
    /// The object-storage roots.
    pub storage: StorageConfig,
    /// Writer settings.
    pub writer: WriterConfig,
    /// Reader settings.
    pub reader: ReaderConfig,
    /// Catalog settings.
    pub catalog: CatalogConfig,
    /// Compactor settings (used when `roles.compactor` is on).
    pub compactor: CompactorConfig,
    /// How often the compactor role runs its passes.
    pub compactor_schedule: CompactorSchedule,
    /// Bearer tokens and their per-namespace permissions; none means the API is open.
    pub auth: crate::auth::AuthConfig,
}

/// When the compactor role runs.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompactorSchedule {
    /// Time between compaction passes over every log. Default 10 s. A pass compacts only
    /// ranges that are closed (by size or age), so frequent passes are cheap.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Time between reclamation passes (WAL objects and orphaned compacted files). Default
    /// 5 min; reclamation lists object storage when `compactor.orphan_scan` is on.
    #[serde(with = "humantime_serde")]
    pub gc_interval: Duration,
}

impl Default for CompactorSchedule {
    fn default() -> Self {
        CompactorSchedule { interval: Duration::from_secs(10), gc_interval: Duration::from_secs(300) }
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

/// Which roles a process serves. `lakestream dev` serves all of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RolesConfig {
    /// Accept appends and soft trims.
    pub writer: bool,
    /// Serve fetches and offsets.
    pub reader: bool,
    /// Create, list and drop namespaces and streams.
    pub catalog: bool,
    /// Compact every log and reclaim storage in the background. Several compactor processes
    /// may run side by side; they coordinate through the metadata store.
    pub compactor: bool,
}

impl Default for RolesConfig {
    fn default() -> Self {
        RolesConfig { writer: true, reader: true, catalog: true, compactor: true }
    }
}

/// The metadata store backend.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "backend", rename_all = "snake_case", deny_unknown_fields)]
pub enum MetadataConfig {
    /// The embedded durable store (redb) in one file: zero setup, one process.
    Embedded {
        /// The database file.
        path: PathBuf,
    },
    /// An in-memory store: nothing survives a restart. For tests and demos.
    Memory,
    /// An Oxia cluster.
    Oxia {
        /// Bootstrap servers, `host:port`.
        addresses: Vec<String>,
        /// The Oxia namespace. Default `default`.
        #[serde(default = "default_oxia_namespace")]
        namespace: String,
        /// Session timeout behind leases. Default 15 s.
        #[serde(default = "default_session_timeout", with = "humantime_serde")]
        session_timeout: Duration,
        /// Per-request timeout. Default 30 s.
        #[serde(default = "default_request_timeout", with = "humantime_serde")]
        request_timeout: Duration,
        /// A bearer token for the servers, if they require one.
        #[serde(default)]
        bearer_token: Option<String>,
    },
}

fn default_oxia_namespace() -> String {
    "default".into()
}
fn default_session_timeout() -> Duration {
    Duration::from_secs(15)
}
fn default_request_timeout() -> Duration {
    Duration::from_secs(30)
}

impl Default for MetadataConfig {
    fn default() -> Self {
        MetadataConfig::Embedded { path: PathBuf::from("lakestream-data/metadata.redb") }
    }
}

/// The WAL root and the compacted root.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// Where WAL objects live.
    pub wal: ObjectStoreConfig,
    /// Where compacted Parquet files and their companions live.
    pub compacted: ObjectStoreConfig,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            wal: ObjectStoreConfig::Local {
                dir: PathBuf::from("lakestream-data/objects"),
                root: "wal".into(),
            },
            compacted: ObjectStoreConfig::Local {
                dir: PathBuf::from("lakestream-data/objects"),
                root: "compacted".into(),
            },
        }
    }
}

/// An object-storage root.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "backend", rename_all = "snake_case", deny_unknown_fields)]
pub enum ObjectStoreConfig {
    /// A directory on the local filesystem.
    Local {
        /// The base directory.
        dir: PathBuf,
        /// `bucket` or `bucket/key/prefix` below the base directory.
        root: String,
    },
    /// An S3-compatible object store.
    S3(Box<S3Config>),
}

/// A configuration that cannot be used: names the file, key or variable and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema (the message names the key).
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, naming the key and line.
        message: String,
    },
    /// An environment variable holds a bad value.
    #[error("environment variable {var}: {message}")]
    Env {
        /// The variable.
        var: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A setting breaks a rule.
    #[error("invalid setting {key}: {message}")]
    Invalid {
        /// The key, e.g. `writer.flush_window`.
        key: String,
        /// What is wrong.
        message: String,
    },
}

impl ServerConfig {
    /// The configuration `lakestream dev` uses: everything in one process, the embedded
    /// metadata store and the local filesystem under `data_dir`.
    pub fn dev(data_dir: &Path, addr: SocketAddr) -> ServerConfig {
        let objects = data_dir.join("objects");
        ServerConfig {
            http: HttpConfig { addr, ..HttpConfig::default() },
            metadata: MetadataConfig::Embedded { path: data_dir.join("metadata.redb") },
            storage: StorageConfig {
                wal: ObjectStoreConfig::Local { dir: objects.clone(), root: "wal".into() },
                compacted: ObjectStoreConfig::Local { dir: objects, root: "compacted".into() },
            },
            ..ServerConfig::default()
        }
    }

    /// Parses a TOML document.
    pub fn from_toml(text: &str, path: &Path) -> Result<ServerConfig, ConfigError> {
        toml::from_str(text)
            .map_err(|e| ConfigError::Parse { path: path.to_path_buf(), message: e.to_string() })
    }

    /// Reads and parses a TOML file.
    pub fn from_file(path: &Path) -> Result<ServerConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Self::from_toml(&text, path)
    }

    /// Applies the documented environment variables (`LAKESTREAM_HTTP_ADDR`,
    /// `LAKESTREAM_OXIA_ADDRESSES`), read through `var` so tests need not touch the process
    /// environment.
    pub fn apply_env(&mut self, var: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        if let Some(addr) = var("LAKESTREAM_HTTP_ADDR") {
            self.http.addr = addr.parse().map_err(|e| ConfigError::Env {
                var: "LAKESTREAM_HTTP_ADDR",
                message: format!("{addr:?} is not host:port ({e})"),
            })?;
        }
        if let Some(addresses) = var("LAKESTREAM_OXIA_ADDRESSES") {
            let list: Vec<String> =
                addresses.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
            if list.is_empty() {
                return Err(ConfigError::Env {
                    var: "LAKESTREAM_OXIA_ADDRESSES",
                    message: "names no address".into(),
                });
            }
            self.metadata = match std::mem::replace(&mut self.metadata, MetadataConfig::Memory) {
                MetadataConfig::Oxia {
                    namespace, session_timeout, request_timeout, bearer_token, ..
                } => MetadataConfig::Oxia {
                    addresses: list,
                    namespace,
                    session_timeout,
                    request_timeout,
                    bearer_token,
                },
                _ => MetadataConfig::Oxia {
                    addresses: list,
                    namespace: default_oxia_namespace(),
                    session_timeout: default_session_timeout(),
                    request_timeout: default_request_timeout(),
                    bearer_token: None,
                },
            };
        }
        Ok(())
    }

    /// Checks every component's settings, naming the key of a bad one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |section: &str, e: &dyn std::fmt::Display| ConfigError::Invalid {
            key: section.to_string(),
            message: e.to_string(),
        };
        self.writer.validate().map_err(|e| invalid(&format!("writer.{}", e.field), &e.rule))?;
        self.reader.validate().map_err(|e| invalid(&format!("reader.{}", e.field), &e.rule))?;
        self.catalog.validate().map_err(|e| invalid("catalog", &e))?;
        self.compactor.validate().map_err(|e| invalid(&format!("compactor.{}", e.field), &e.rule))?;
        // A reader may serve a cached index record for its TTL; the objects it names must
        // outlive that (spec: WAL objects are kept for a grace period after their last record).
        if self.reader.index_cache_ttl > self.compactor.reader_index_cache_ttl {
            return Err(invalid(
                "reader.index_cache_ttl",
                &format!(
                    "{:?} exceeds compactor.reader_index_cache_ttl ({:?}), which the WAL grace period is checked against",
                    self.reader.index_cache_ttl, self.compactor.reader_index_cache_ttl
                ),
            ));
        }
        if self.compactor_schedule.interval.is_zero() || self.compactor_schedule.gc_interval.is_zero() {
            return Err(invalid("compactor_schedule", &"intervals must be greater than 0"));
        }
        if self.http.max_body_bytes == 0 {
            return Err(invalid("http.max_body_bytes", &"must be greater than 0"));
        }
        for (key, store) in
            [("storage.wal", &self.storage.wal), ("storage.compacted", &self.storage.compacted)]
        {
            if let ObjectStoreConfig::S3(s3) = store {
                s3.validate().map_err(|e| invalid(key, &e))?;
            }
        }
        if let MetadataConfig::Oxia { addresses, .. } = &self.metadata
            && addresses.is_empty()
        {
            return Err(invalid("metadata.addresses", &"names no Oxia server"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_files_parse_and_validate() {
        for name in ["dev.toml", "writer.toml", "reader.toml", "compactor.toml"] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy").join(name);
            let config = ServerConfig::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
            config.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn a_reader_cache_longer_than_the_grace_checks_allow_is_refused() {
        let mut config = ServerConfig::default();
        config.reader.index_cache_ttl = config.compactor.reader_index_cache_ttl + Duration::from_secs(1);
        assert!(config.validate().unwrap_err().to_string().contains("reader.index_cache_ttl"));
    }

    #[test]
    fn an_unknown_key_is_named() {
        let err =
            ServerConfig::from_toml("[writer]\nflush_windw = \"10ms\"\n", Path::new("x.toml")).unwrap_err();
        assert!(err.to_string().contains("flush_windw"), "{err}");
    }

    #[test]
    fn a_bad_value_is_named() {
        let config =
            ServerConfig::from_toml("[writer]\nflush_window = \"0ms\"\n", Path::new("x.toml")).unwrap();
        assert!(config.validate().unwrap_err().to_string().contains("writer.flush_window"));
        let err = ServerConfig::default().apply_env(|v| (v == "LAKESTREAM_HTTP_ADDR").then(|| "nope".into()));
        assert!(err.unwrap_err().to_string().contains("LAKESTREAM_HTTP_ADDR"));
    }

    #[test]
    fn environment_overrides_the_file() {
        let mut config = ServerConfig::default();
        config
            .apply_env(|v| match v {
                "LAKESTREAM_HTTP_ADDR" => Some("0.0.0.0:9999".into()),
                "LAKESTREAM_OXIA_ADDRESSES" => Some("oxia:6648, other:6648".into()),
                _ => None,
            })
            .unwrap();
        assert_eq!(config.http.addr.port(), 9999);
        assert!(matches!(&config.metadata, MetadataConfig::Oxia { addresses, .. } if addresses.len() == 2));
    }
}
