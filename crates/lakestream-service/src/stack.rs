//! Wiring: builds the metadata store, the object stores and the roles from a
//! [`ServiceConfig`]. The only place that knows every backend.

use std::collections::BTreeMap;
use std::sync::Arc;

use lakestream_catalog::{Catalog, CatalogError};
use lakestream_compactor::{Compactor, CompactorDeps};
use lakestream_format::{Clock, SystemClock};
use lakestream_meta::lease::RandomTokens;
use lakestream_meta::{EmbeddedStore, InMemoryStore, MetaStore};
use lakestream_meta_oxia::{OxiaConfig, OxiaStore, OxiaTls};
use lakestream_objstore::{LocalFsStore, ObjectRoot, ObjectStore};
use lakestream_objstore_cloud::CloudStore;
use lakestream_objstore_s3::S3Store;
use lakestream_reader::{Reader, ReaderDeps};
use lakestream_writer::{Writer, WriterDeps};

use crate::config::{MetadataConfig, ObjectStoreConfig, ServiceConfig};

/// The running components of a service process.
#[derive(Debug, Clone)]
pub struct Stack {
    /// The metadata store.
    pub meta: Arc<dyn MetaStore>,
    /// The WAL root.
    pub wal: Arc<dyn ObjectStore>,
    /// The compacted root.
    pub compacted: Arc<dyn ObjectStore>,
    /// The catalog.
    pub catalog: Catalog,
    /// The writer, when this process serves the writer role.
    pub writer: Option<Writer>,
    /// The reader, when this process serves the reader role.
    pub reader: Option<Reader>,
    /// What CloudEvents ingest reads with, to find the events of an append whose outcome is
    /// unknown: the reader role's reader, or one of its own in a process without that role.
    pub events_reader: Reader,
    /// The compactor, when this process serves the compactor role.
    pub compactor: Option<Compactor>,
    /// Streams as Iceberg tables, when this process serves the compactor role and `[tables]`
    /// names a catalog.
    pub tables: Option<crate::background::tables::TablesRole>,
    /// The accepted bearer tokens (none: the API is open).
    pub auth: crate::auth::Authenticator,
    /// The roles this process serves.
    pub roles: crate::config::RolesConfig,
    /// Wall-clock time, as every component of this process sees it.
    pub clock: Arc<dyn Clock>,
    /// Per-client request rate limits, shared by both APIs.
    pub limiter: Arc<crate::limits::RateLimiter>,
    /// The CloudEvents deduplication ledger (and the clock ingest stamps events with).
    pub ledger: lakestream_cloudevents::ledger::Ledger,
    /// Operations on both object-store roots, for `/metrics`.
    pub object_ops: Arc<crate::objects::ObjectStoreMetrics>,
    /// The Oxia client, when the metadata store is Oxia: its request counts for `/metrics`.
    pub oxia: Option<lakestream_meta_oxia::OxiaClient>,
}

/// Why a service could not start; names the component.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::InvalidSetting),
    /// The metadata store could not be opened.
    #[error("metadata store: {0}")]
    Metadata(String),
    /// An object store could not be opened.
    #[error("object store {root}: {message}")]
    Objects {
        /// Which root (`storage.wal` or `storage.compacted`).
        root: &'static str,
        /// Why.
        message: String,
    },
    /// The compactor could not be set up.
    #[error("compactor: {0}")]
    Compactor(String),
    /// The catalog could not be set up.
    #[error("catalog: {0}")]
    Catalog(#[from] CatalogError),
    /// The configured storage roots are not the deployment's.
    #[error("storage roots: {0}")]
    Roots(#[from] crate::deployment::RootsError),
    /// A legacy reader beside a deployment that writes format version 3.
    #[error("format version: {0}")]
    FormatVersion(#[from] crate::deployment::FormatVersionError),
    /// A reader's index cache, or a compactor's bound on it, does not fit the deployment's.
    #[error("index cache: {0}")]
    CacheBound(#[from] crate::deployment::CacheBoundError),
}

/// The namespace every deployment has, created at start if missing.
pub const DEFAULT_NAMESPACE: &str = "default";

impl Stack {
    /// Opens every component named by `config`.
    pub async fn open(config: &ServiceConfig) -> Result<Stack, StartError> {
        config.validate()?;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let (meta, oxia) = open_meta(&config.metadata, clock.clone()).await?;
        Self::open_over(config, meta, oxia, clock).await
    }

    /// [`Stack::open`] over a metadata store the caller opened (`config.metadata` is not
    /// used): for tests that put a store with injected faults under a whole service.
    #[cfg(feature = "testkit")]
    pub async fn open_with_meta(
        config: &ServiceConfig,
        meta: Arc<dyn MetaStore>,
    ) -> Result<Stack, StartError> {
        config.validate()?;
        Self::open_over(config, meta, None, Arc::new(SystemClock)).await
    }

    async fn open_over(
        config: &ServiceConfig,
        meta: Arc<dyn MetaStore>,
        oxia: Option<lakestream_meta_oxia::OxiaClient>,
        clock: Arc<dyn Clock>,
    ) -> Result<Stack, StartError> {
        check_one_format_version(config)?;
        let roots = crate::deployment::StorageRoots::of(&config.storage)
            .map_err(|(key, message)| crate::config::InvalidSetting { key: key.into(), message })?;
        let auth = crate::auth::Authenticator::from_config(&config.auth, |v| std::env::var(v).ok())
            .map_err(|message| crate::config::InvalidSetting { key: "auth.tokens".into(), message })?;
        // Before any role can write: a service with another deployment's roots stops here.
        crate::deployment::record_or_check(meta.as_ref(), &config.catalog.partition, &roots).await?;
        // One format version per deployment, across processes too.
        let writes = config.roles.writer || config.roles.compactor;
        let reads = config.roles.reader.then_some(u32::from(config.reader.format_version));
        crate::deployment::record_or_check_format_version(
            meta.as_ref(),
            &config.catalog.partition,
            writes,
            reads,
        )
        .await?;
        // Readers' index caches against the compactors' WAL grace, across processes too: a
        // compactor records its bound (first), a reader checks against the record.
        if config.roles.compactor {
            crate::deployment::record_or_check_reader_cache_bound(
                meta.as_ref(),
                &config.catalog.partition,
                config.compactor.reader_index_cache_ttl,
            )
            .await?;
        }
        if config.roles.reader {
            crate::deployment::check_reader_cache_ttl(
                meta.as_ref(),
                &config.catalog.partition,
                config.reader.index_cache_ttl,
            )
            .await?;
        }
        let object_ops = Arc::new(crate::objects::ObjectStoreMetrics::default());
        let wal: Arc<dyn ObjectStore> = Arc::new(crate::objects::Counted::new(
            open_objects("storage.wal", &config.storage.wal)?,
            object_ops.wal.clone(),
        ));
        let compacted: Arc<dyn ObjectStore> = Arc::new(crate::objects::Counted::new(
            open_objects("storage.compacted", &config.storage.compacted)?,
            object_ops.compacted.clone(),
        ));
        let catalog = Catalog::new(meta.clone(), config.catalog.clone())?;
        match catalog.create_namespace(DEFAULT_NAMESPACE, BTreeMap::new()).await {
            Ok(_) | Err(CatalogError::NamespaceExists { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        let writer = if config.roles.writer {
            let deps = WriterDeps {
                meta: meta.clone(),
                objects: wal.clone(),
                clock: clock.clone(),
                tokens: Arc::new(RandomTokens),
            };
            Some(Writer::start(config.writer.clone(), deps).map_err(|e| crate::config::InvalidSetting {
                key: format!("writer.{}", e.field),
                message: e.rule,
            })?)
        } else {
            None
        };
        let new_reader = || {
            let deps = ReaderDeps { meta: meta.clone(), wal: wal.clone(), compacted: compacted.clone() };
            Reader::new(config.reader.clone(), deps).map_err(|e| crate::config::InvalidSetting {
                key: format!("reader.{}", e.field),
                message: e.rule,
            })
        };
        let reader = if config.roles.reader { Some(new_reader()?) } else { None };
        let events_reader = match &reader {
            Some(reader) => reader.clone(),
            None => new_reader()?,
        };
        let compactor = if config.roles.compactor {
            let deps = CompactorDeps {
                meta: meta.clone(),
                wal: wal.clone(),
                compacted: compacted.clone(),
                clock: clock.clone(),
                tokens: Arc::new(RandomTokens),
            };
            Some(
                Compactor::new(config.compactor.clone(), deps)
                    .map_err(|e| StartError::Compactor(e.to_string()))?,
            )
        } else {
            None
        };
        // Bad table settings (unknown catalog, unreachable database) stop the start here,
        // naming the key.
        let tables = if config.roles.compactor {
            crate::background::tables::open(&config.tables, &config.storage.compacted, compacted.clone())
                .await?
        } else {
            None
        };
        let ledger = lakestream_cloudevents::ledger::Ledger::new(
            meta.clone(),
            clock.clone(),
            Arc::new(RandomTokens),
            config.cloudevents.clone(),
        )
        .map_err(|e| crate::config::InvalidSetting {
            key: format!("cloudevents.{}", e.field),
            message: e.rule,
        })?;
        let limiter = Arc::new(crate::limits::RateLimiter::new(config.limits.clone()));
        let roles = config.roles.clone();
        Ok(Stack {
            meta,
            wal,
            compacted,
            catalog,
            writer,
            reader,
            events_reader,
            compactor,
            tables,
            auth,
            roles,
            clock,
            limiter,
            ledger,
            object_ops,
            oxia,
        })
    }

    /// Every log of every live stream, with its stream's binding (which identifiers its
    /// compacted files carry), for a compaction pass.
    pub async fn all_compaction_logs(
        &self,
    ) -> Result<Vec<lakestream_compactor::CompactionLog>, CatalogError> {
        Ok(self
            .all_streams()
            .await?
            .iter()
            .flat_map(|stream| {
                let binding = stream.binding();
                (0..stream.partition_count())
                    .filter_map(|p| stream.log_ref(p))
                    .map(move |log| lakestream_compactor::CompactionLog::new(log, binding))
            })
            .collect())
    }

    /// Every live stream of every namespace.
    pub async fn all_streams(&self) -> Result<Vec<lakestream_catalog::Stream>, CatalogError> {
        const PAGE: usize = 500;
        let mut all = Vec::new();
        let mut ns_after: Option<String> = None;
        loop {
            let namespaces = self.catalog.list_namespaces(ns_after.as_deref(), PAGE).await?;
            let names: Vec<String> = namespaces.items.into_iter().map(|ns| ns.name).collect();
            for ns in names {
                let mut after: Option<String> = None;
                loop {
                    let streams = self.catalog.list_streams(&ns, after.as_deref(), PAGE).await?;
                    all.extend(streams.items);
                    match streams.next_page {
                        Some(next) => after = Some(next),
                        None => break,
                    }
                }
            }
            match namespaces.next_page {
                Some(next) => ns_after = Some(next),
                None => return Ok(all),
            }
        }
    }

    /// Graceful shutdown: publishes pending appends and releases the writer's leases.
    pub async fn close(&self) {
        if let Some(w) = &self.writer {
            w.close().await;
        }
    }
}

/// Spec "Format Versioning": all WAL objects and index records of a deployment use one
/// format version. The writer and the compactor write version 3, so a reader set to read
/// version 1 or 2 (`reader.format_version`) may not serve beside them: that is a legacy read
/// mode, which a process states explicitly by serving neither the writer nor the compactor.
fn check_one_format_version(config: &ServiceConfig) -> Result<(), crate::config::InvalidSetting> {
    let version = config.reader.format_version;
    let writes_v3: Vec<&str> =
        [("roles.writer", config.roles.writer), ("roles.compactor", config.roles.compactor)]
            .into_iter()
            .filter_map(|(role, on)| on.then_some(role))
            .collect();
    if !config.roles.reader || version == 3 || writes_v3.is_empty() {
        return Ok(());
    }
    Err(crate::config::InvalidSetting {
        key: "reader.format_version".into(),
        message: format!(
            "is {version} (reads a legacy v{version} deployment), but this process also serves {}, which \
             writes format version 3, and all roles of a deployment use one format version. Set \
             reader.format_version = 3, or read the legacy deployment from a process that serves \
             neither the writer nor the compactor (roles.writer = false, roles.compactor = false)",
            writes_v3.join(" and ")
        ),
    })
}

/// The metadata store, and its Oxia client when it is Oxia.
async fn open_meta(
    config: &MetadataConfig,
    clock: Arc<dyn Clock>,
) -> Result<(Arc<dyn MetaStore>, Option<lakestream_meta_oxia::OxiaClient>), StartError> {
    let store: Arc<dyn MetaStore> = match config {
        MetadataConfig::Memory => {
            Arc::new(InMemoryStore::with_config(1, clock).map_err(|e| StartError::Metadata(e.to_string()))?)
        }
        MetadataConfig::Embedded { path } => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .map_err(|e| StartError::Metadata(format!("cannot create {}: {e}", dir.display())))?;
            }
            Arc::new(
                EmbeddedStore::open_with_clock(path, clock)
                    .await
                    .map_err(|e| StartError::Metadata(e.to_string()))?,
            )
        }
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
        } => {
            let mut c = OxiaConfig::new(addresses.clone());
            c.namespace = namespace.clone();
            c.service_name = service_name.clone();
            c.session_timeout = *session_timeout;
            c.request_timeout = *request_timeout;
            c.bearer_token = bearer_token.clone();
            if *tls || tls_ca_file.is_some() {
                let ca_certificate_pem = match tls_ca_file {
                    Some(file) => Some(std::fs::read(file).map_err(|e| {
                        StartError::Metadata(format!("metadata.tls_ca_file: {}: {e}", file.display()))
                    })?),
                    None => None,
                };
                c.tls = Some(OxiaTls { ca_certificate_pem, domain_name: tls_domain.clone() });
            }
            let store = OxiaStore::connect(c).await.map_err(|e| StartError::Metadata(e.to_string()))?;
            let client = store.client().clone();
            return Ok((Arc::new(store), Some(client)));
        }
    };
    Ok((store, None))
}

fn open_objects(root: &'static str, config: &ObjectStoreConfig) -> Result<Arc<dyn ObjectStore>, StartError> {
    let err = |message: String| StartError::Objects { root, message };
    Ok(match config {
        ObjectStoreConfig::Local { dir, root: spec } => {
            let parsed = ObjectRoot::parse(spec).map_err(|e| err(e.to_string()))?;
            Arc::new(LocalFsStore::new(dir, parsed).map_err(|e| err(e.to_string()))?)
        }
        ObjectStoreConfig::S3(s3) => Arc::new(S3Store::new((**s3).clone()).map_err(|e| err(e.to_string()))?),
        ObjectStoreConfig::Gcs(gcs) => {
            Arc::new(CloudStore::gcs((**gcs).clone()).map_err(|e| err(e.to_string()))?)
        }
        ObjectStoreConfig::Azure(azure) => {
            Arc::new(CloudStore::azure((**azure).clone()).map_err(|e| err(e.to_string()))?)
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    // spec-rule: f315275c0f [All] All WAL objects and index records of a deployment MUST use one format ve…
    #[test]
    fn a_legacy_reader_beside_a_v3_writer_or_compactor_is_refused() {
        // [All] All WAL objects and index records of a deployment MUST use one format version.
        let mut config = ServiceConfig::default();
        config.reader.format_version = 2;
        let err = check_one_format_version(&config).unwrap_err().to_string();
        assert!(err.contains("reader.format_version"), "{err}");
        assert!(err.contains("roles.writer and roles.compactor"), "{err}");
        config.roles.writer = false;
        let err = check_one_format_version(&config).unwrap_err().to_string();
        assert!(err.contains("also serves roles.compactor,"), "{err}");
        // The explicit legacy read mode: a process that serves no role writing version 3.
        config.roles.compactor = false;
        check_one_format_version(&config).unwrap();
        // Version 3 everywhere, and a legacy setting in a process that does not read, pass.
        let mut config = ServiceConfig::default();
        check_one_format_version(&config).unwrap();
        config.reader.format_version = 1;
        config.roles.reader = false;
        check_one_format_version(&config).unwrap();
    }

    /// The reader and the compactor in separate processes (separate files, one metadata
    /// store): the compactor records its bound on readers' index caches at start, and a reader
    /// that would cache longer refuses to start, naming `reader.index_cache_ttl` and the bound.
    #[tokio::test]
    async fn a_reader_process_caching_longer_than_the_compactors_bound_refuses_to_start() {
        let dir = tempfile::tempdir().unwrap();
        let base = ServiceConfig::dev(dir.path());
        let only = |reader: bool, compactor: bool| crate::config::RolesConfig {
            writer: false,
            reader,
            catalog: false,
            compactor,
        };
        let mut compactor = base.clone();
        compactor.roles = only(false, true);
        compactor.compactor.reader_index_cache_ttl = Duration::from_secs(60);
        let mut reader = base.clone();
        reader.roles = only(true, false);
        // Valid on its own: its file's (default) compactor section allows 10 min.
        reader.reader.index_cache_ttl = Duration::from_secs(120);
        reader.validate().unwrap();
        // Before any compactor started, the reader starts.
        Stack::open(&reader).await.unwrap().close().await;
        Stack::open(&compactor).await.unwrap().close().await;
        let err = Stack::open(&reader).await.unwrap_err().to_string();
        assert!(err.contains("reader.index_cache_ttl is 2m") && err.contains("at most 1m"), "{err}");
        reader.reader.index_cache_ttl = Duration::from_secs(60);
        Stack::open(&reader).await.unwrap().close().await;
        // A compactor set for shorter caches than recorded stops too.
        compactor.compactor.reader_index_cache_ttl = Duration::from_secs(30);
        let err = Stack::open(&compactor).await.unwrap_err().to_string();
        assert!(err.contains("compactor.reader_index_cache_ttl is 30s"), "{err}");
    }

    // spec-rule: d6a83ad200 [All] All implementations in a deployment MUST use the same WAL root and the s…
    #[tokio::test]
    async fn a_service_started_with_other_storage_roots_refuses_to_start() {
        // [All] All implementations in a deployment MUST use the same WAL root and the same
        // compacted root: the first start records them, a later one with others stops.
        let dir = tempfile::tempdir().unwrap();
        let mut config = ServiceConfig::dev(dir.path());
        config.writer.flush_window = Duration::from_millis(2);
        {
            let stack = Stack::open(&config).await.unwrap();
            stack.close().await;
        }
        let same = Stack::open(&config).await.unwrap();
        same.close().await;
        drop(same);
        if let ObjectStoreConfig::Local { root, .. } = &mut config.storage.compacted {
            *root = "compacted-elsewhere".into();
        }
        let err = Stack::open(&config).await.unwrap_err().to_string();
        assert!(err.contains("storage.compacted"), "{err}");
        assert!(err.contains("compacted-elsewhere") && err.contains("/compacted"), "{err}");
    }
}
