//! The service's settings: which roles a process serves, its metadata store and object
//! stores, and every role's settings, as plain serde structs with documented defaults.
//!
//! [`ServiceConfig`] is one part of the `lakestream` command's configuration file: its fields
//! are top-level sections of that file, beside the transports' (`[http]`, `[grpc]`,
//! `[kafka]`, ...), which belong to their crates. The command reads every part from the one
//! merged document and refuses a section no part has; every section refuses unknown keys, so
//! a typo never silently falls back to a default. [`ServiceConfig::validate`] names the key
//! of a setting that breaks a rule.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lakestream_catalog::CatalogConfig;
use lakestream_compactor::CompactorConfig;
use lakestream_objstore_cloud::{AzureConfig, GcsConfig};
use lakestream_objstore_s3::S3Config;
use lakestream_reader::ReaderConfig;
use lakestream_writer::WriterConfig;
use serde::Deserialize;

/// Everything the service layer needs to start: the roles this process serves, the stores,
/// and each role's settings. Unknown top-level keys are left to the caller, since the same
/// file holds other parts' sections.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ServiceConfig {
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
    /// How often retention (`retention_ms`, `retention_bytes` stream properties) is enforced.
    pub retention: RetentionConfig,
    /// When idempotent producers' state records expire.
    pub producers: ProducersConfig,
    /// Streams as Iceberg tables (`docs/tables.md`): which streams (`table = "iceberg"`), the
    /// catalog (`catalog`, `uri`), file sizes; committed by the compactor role.
    pub tables: lakestream_iceberg::TablesConfig,
    /// Bearer tokens and their per-namespace permissions; none means the API is open.
    pub auth: crate::auth::AuthConfig,
    /// Per-client request rate limits on every operation; off by default.
    pub limits: crate::limits::RateLimitConfig,
    /// CloudEvents ingest: the deduplication window (`dedup_window`, default 1 h, at most
    /// 24 h) and the claim lapse (`claim_lapse`, default 2 min).
    pub cloudevents: lakestream_cloudevents::ledger::LedgerConfig,
    /// How long a shutdown may take (`timeout`, default 10 s): past it, pending work is
    /// abandoned and write leases are left to expire with the metadata session.
    pub shutdown: ShutdownConfig,
    /// The longest a fetch may wait for new entries, whatever the front end. Not a section of
    /// its own: the `lakestream` command sets it from `http.max_fetch_wait`. Default 30 s.
    #[serde(skip)]
    pub max_fetch_wait: Duration,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            roles: RolesConfig::default(),
            metadata: MetadataConfig::default(),
            storage: StorageConfig::default(),
            writer: WriterConfig::default(),
            reader: ReaderConfig::default(),
            catalog: CatalogConfig::default(),
            compactor: CompactorConfig::default(),
            compactor_schedule: CompactorSchedule::default(),
            retention: RetentionConfig::default(),
            producers: ProducersConfig::default(),
            tables: lakestream_iceberg::TablesConfig::default(),
            auth: crate::auth::AuthConfig::default(),
            limits: crate::limits::RateLimitConfig::default(),
            cloudevents: lakestream_cloudevents::ledger::LedgerConfig::default(),
            shutdown: ShutdownConfig::default(),
            max_fetch_wait: DEFAULT_MAX_FETCH_WAIT,
        }
    }
}

/// The default of [`ServiceConfig::max_fetch_wait`].
pub const DEFAULT_MAX_FETCH_WAIT: Duration = Duration::from_secs(30);

/// A setting that breaks a rule: its full key (`writer.flush_window`) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid setting {key}: {message}")]
pub struct InvalidSetting {
    /// The key, e.g. `writer.flush_window`.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl InvalidSetting {
    /// The setting `key` breaks a rule: `message`.
    pub fn new(key: impl Into<String>, message: impl std::fmt::Display) -> Self {
        InvalidSetting { key: key.into(), message: message.to_string() }
    }
}

/// The SQLite Iceberg catalog of `lakestream dev`: `catalog.db` in its data directory.
fn dev_catalog_uri(data_dir: &Path) -> String {
    let dir = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    format!("sqlite://{}", dir.join("catalog.db").display())
}

impl ServiceConfig {
    /// The service `lakestream dev` runs: every role in one process, the embedded metadata
    /// store and the local filesystem under `data_dir`, and an SQLite Iceberg catalog there.
    /// Parsed from [`ServiceConfig::dev_toml`], the profile's one definition.
    pub fn dev(data_dir: &Path) -> ServiceConfig {
        // The document is ours and every path in it is quoted: a failure is a bug here.
        toml::from_str(&Self::dev_toml(data_dir))
            .unwrap_or_else(|e| panic!("the dev profile does not parse: {e}"))
    }

    /// [`ServiceConfig::dev`] as a TOML document, so that the `lakestream dev` command takes
    /// the environment over it as over a file.
    pub fn dev_toml(data_dir: &Path) -> String {
        // A JSON string is a valid TOML basic string (the same escapes).
        let quoted = |text: &str| serde_json::Value::String(text.to_owned()).to_string();
        let path = |p: &Path| quoted(&p.to_string_lossy());
        let objects = path(&data_dir.join("objects"));
        format!(
            "[metadata]\nbackend = \"embedded\"\npath = {}\n\n\
             [storage.wal]\nbackend = \"local\"\ndir = {objects}\nroot = \"wal\"\n\n\
             [storage.compacted]\nbackend = \"local\"\ndir = {objects}\nroot = \"compacted\"\n\n\
             [tables]\nuri = {}\n",
            path(&data_dir.join("metadata.redb")),
            quoted(&dev_catalog_uri(data_dir)),
        )
    }

    /// Checks every component's settings, naming the key of a bad one.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        self.writer.validate().map_err(|e| InvalidSetting::new(format!("writer.{}", e.field), &e.rule))?;
        self.reader.validate().map_err(|e| InvalidSetting::new(format!("reader.{}", e.field), &e.rule))?;
        self.catalog.validate().map_err(|e| InvalidSetting::new("catalog", &e))?;
        self.compactor
            .validate()
            .map_err(|e| InvalidSetting::new(format!("compactor.{}", e.field), &e.rule))?;
        // A reader may serve a cached index record for its TTL; the objects it names must
        // outlive that (spec: WAL objects are kept for a grace period after their last record).
        if self.reader.index_cache_ttl > self.compactor.reader_index_cache_ttl {
            return Err(InvalidSetting::new(
                "reader.index_cache_ttl",
                format!(
                    "{:?} exceeds compactor.reader_index_cache_ttl ({:?}), which the WAL grace period is checked against",
                    self.reader.index_cache_ttl, self.compactor.reader_index_cache_ttl
                ),
            ));
        }
        if self.compactor_schedule.interval.is_zero() || self.compactor_schedule.gc_interval.is_zero() {
            return Err(InvalidSetting::new("compactor_schedule", "intervals must be greater than 0"));
        }
        if self.shutdown.timeout.is_zero() || self.shutdown.timeout > Duration::from_secs(600) {
            return Err(InvalidSetting::new(
                "shutdown.timeout",
                format!("is {:?}; it must be greater than 0 and at most 10 min", self.shutdown.timeout),
            ));
        }
        self.cloudevents
            .validate()
            .map_err(|e| InvalidSetting::new(format!("cloudevents.{}", e.field), &e.rule))?;
        self.limits.validate().map_err(|(key, rule)| InvalidSetting::new(format!("limits.{key}"), &rule))?;
        self.tables.validate(false).map_err(|e| match e {
            lakestream_iceberg::TablesError::Config { key, message } => InvalidSetting { key, message },
            other => InvalidSetting::new("tables", &other),
        })?;
        // The full key of the field a backend names (`storage.wal.url`).
        let invalid_field = |section: &str, e: lakestream_objstore::ObjectStoreError| match e {
            lakestream_objstore::ObjectStoreError::InvalidConfig { field, reason } => {
                InvalidSetting::new(format!("{section}.{field}"), &reason)
            }
            other => InvalidSetting::new(section, &other),
        };
        for (key, store) in
            [("storage.wal", &self.storage.wal), ("storage.compacted", &self.storage.compacted)]
        {
            match store {
                ObjectStoreConfig::Local { .. } => {}
                ObjectStoreConfig::S3(s3) => s3.validate().map_err(|e| InvalidSetting::new(key, &e))?,
                ObjectStoreConfig::Gcs(gcs) => gcs.validate().map(drop).map_err(|e| invalid_field(key, e))?,
                ObjectStoreConfig::Azure(azure) => {
                    azure.validate().map(drop).map_err(|e| invalid_field(key, e))?
                }
            }
        }
        if let MetadataConfig::Oxia { addresses, .. } = &self.metadata
            && addresses.is_empty()
        {
            return Err(InvalidSetting::new("metadata.addresses", "names no Oxia server"));
        }
        Ok(())
    }
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

/// The bound of a shutdown. A process told to stop (SIGTERM) lets open requests finish,
/// stops its background roles, publishes pending appends and releases its write leases; with
/// the metadata store unreachable, the last two could wait out request timeouts and the
/// session (about 30 s), past an orchestrator's grace period (Kubernetes: 30 s), which then
/// kills the process anyway. Past `timeout` the shutdown gives up instead: appends not yet
/// acknowledged stay unacknowledged (their clients retry), and the leases expire with the
/// metadata session, as after a crash. Nothing acknowledged is lost either way.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShutdownConfig {
    /// From the shutdown signal (after the listener's drain delay) to the end of the
    /// shutdown. Default 10 s; at most 10 min.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        ShutdownConfig { timeout: DEFAULT_SHUTDOWN_TIMEOUT }
    }
}

/// The default of [`ShutdownConfig::timeout`]: well under Kubernetes' default grace period
/// of 30 s, with the Helm chart's drain delay (5 s) added.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Retention enforcement, in processes serving the writer role.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// Time between passes over every stream with a retention policy. Default 1 min; `0s`
    /// turns retention enforcement off in this process.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig { interval: Duration::from_secs(60) }
    }
}

/// Idempotent producers' state (`docs/api.md`): a producer's record on a partition that
/// nothing wrote for `idle_expiry` is deleted by the writer role.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProducersConfig {
    /// How long a producer's state on a partition is kept after its last request. Default
    /// 7 days; `0s` keeps every state forever.
    #[serde(with = "humantime_serde")]
    pub idle_expiry: Duration,
    /// Time between sweeps over every partition. Default 1 h.
    #[serde(with = "humantime_serde")]
    pub sweep_interval: Duration,
}

impl Default for ProducersConfig {
    fn default() -> Self {
        ProducersConfig {
            idle_expiry: Duration::from_secs(7 * 24 * 3600),
            sweep_interval: Duration::from_secs(3600),
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
#[derive(Clone, Deserialize)]
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
        /// The gRPC service name. Default `io.oxia.proto.v1.OxiaClient` (servers v0.15 and
        /// later); `io.streamnative.oxia.proto.OxiaClient` for older servers.
        #[serde(default = "default_oxia_service_name")]
        service_name: String,
        /// Session timeout behind leases. Default 15 s.
        #[serde(default = "default_session_timeout", with = "humantime_serde")]
        session_timeout: Duration,
        /// Per-request timeout. Default 30 s.
        #[serde(default = "default_request_timeout", with = "humantime_serde")]
        request_timeout: Duration,
        /// A bearer token for the servers, if they require one. Never shown by `Debug`.
        #[serde(default)]
        bearer_token: Option<String>,
        /// Connect over TLS, verifying the servers against the webpki roots or `tls_ca_file`.
        #[serde(default)]
        tls: bool,
        /// A PEM file of CA certificates to trust instead of the webpki roots (implies `tls`).
        #[serde(default)]
        tls_ca_file: Option<PathBuf>,
        /// The name to verify in the servers' certificates, when it differs from the host
        /// dialled.
        #[serde(default)]
        tls_domain: Option<String>,
    },
}

impl std::fmt::Debug for MetadataConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetadataConfig::Embedded { path } => f.debug_struct("Embedded").field("path", path).finish(),
            MetadataConfig::Memory => f.write_str("Memory"),
            MetadataConfig::Oxia {
                addresses,
                namespace,
                service_name,
                session_timeout,
                request_timeout,
                bearer_token,
                tls,
                tls_ca_file,
                tls_domain,
            } => f
                .debug_struct("Oxia")
                .field("addresses", addresses)
                .field("namespace", namespace)
                .field("service_name", service_name)
                .field("session_timeout", session_timeout)
                .field("request_timeout", request_timeout)
                .field("bearer_token", &bearer_token.as_ref().map(|_| "<redacted>"))
                .field("tls", tls)
                .field("tls_ca_file", tls_ca_file)
                .field("tls_domain", tls_domain)
                .finish(),
        }
    }
}

fn default_oxia_namespace() -> String {
    "default".into()
}
fn default_oxia_service_name() -> String {
    lakestream_meta_oxia::DEFAULT_SERVICE_NAME.into()
}
fn default_session_timeout() -> Duration {
    Duration::from_secs(15)
}
fn default_request_timeout() -> Duration {
    Duration::from_secs(30)
}

impl MetadataConfig {
    /// Oxia at `addresses`, every other setting at its default.
    pub fn oxia(addresses: Vec<String>) -> MetadataConfig {
        MetadataConfig::Oxia {
            addresses,
            namespace: default_oxia_namespace(),
            service_name: default_oxia_service_name(),
            session_timeout: default_session_timeout(),
            request_timeout: default_request_timeout(),
            bearer_token: None,
            tls: false,
            tls_ca_file: None,
            tls_domain: None,
        }
    }
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
    /// Google Cloud Storage (`bucket` and `prefix`, or `url = "gs://bucket/prefix"`).
    Gcs(Box<GcsConfig>),
    /// Azure Blob Storage (`container` and `prefix`, or `url = "az://container/prefix"`).
    Azure(Box<AzureConfig>),
}
