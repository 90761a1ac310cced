//! The deployment record: the WAL root and the compacted root of a deployment, recorded once in
//! the metadata store by the first service that starts, and checked by every later one.
//!
//! Spec ("Object storage, roots and naming"): all implementations in a deployment MUST use the
//! same WAL root and the same compacted root. A service configured with other roots would
//! write objects that the index names but the other services cannot find, and its reclamation
//! would see the other roots' objects as orphans (or the reverse), so it refuses to start.
//!
//! A root is identified by its backend, its bucket and its key prefix — for a local root, the
//! absolute base directory too. An S3 endpoint is not part of it: services can reach one
//! bucket through different addresses (inside and outside a container network).

use bytes::Bytes;
use lakestream_meta::{MetaError, MetaStore, PutCondition};
use lakestream_objstore::ObjectRoot;
use serde::{Deserialize, Serialize};

use crate::config::{ObjectStoreConfig, StorageConfig};

/// The key of the record, in the catalog's partition (every service of a deployment uses it).
pub const STORAGE_ROOTS_KEY: &str = "/lakestream-deployment/storage-roots";

/// The key recording that the deployment writes format version 3 (its value is `3`): put by
/// the first writer or compactor, read by readers set to a legacy version.
pub const FORMAT_VERSION_KEY: &str = "/lakestream-deployment/format-version";

/// The format version this implementation's writer and compactor write.
pub const WRITTEN_FORMAT_VERSION: u32 = 3;

/// A reader set to a legacy format version beside a deployment that writes version 3.
#[derive(Debug, thiserror::Error)]
pub enum FormatVersionError {
    /// A writer or compactor of this deployment writes version 3.
    #[error(
        "reader.format_version is {configured}, but this deployment's metadata store records that \
         its writers and compactors write format version {recorded} (key {FORMAT_VERSION_KEY}); all \
         roles of a deployment use one format version, and a v{configured} reader would misread \
         its index. Set reader.format_version = {recorded}, or point `metadata` at the legacy \
         v{configured} deployment to read it (legacy-read mode: no writer or compactor there)"
    )]
    LegacyReaderBesideV3 {
        /// The reader's configured version.
        configured: u32,
        /// The recorded version.
        recorded: u32,
    },
    /// The record exists but cannot be read.
    #[error("the deployment record {FORMAT_VERSION_KEY} is not readable: {0:?}")]
    Corrupt(String),
    /// The metadata store failed.
    #[error("checking the deployment's format version in the metadata store: {0}")]
    Meta(#[from] MetaError),
}

/// Spec "Format Versioning", across processes: a process that writes (writer or compactor
/// role) records that the deployment writes version 3; a process whose reader is set to a
/// legacy version (1 or 2) refuses to start where that record exists. A legacy reader is
/// thus a read-only process over a legacy deployment's metadata store: the explicit
/// legacy-read mode.
pub async fn record_or_check_format_version(
    meta: &dyn MetaStore,
    partition: &str,
    writes: bool,
    reader_version: Option<u32>,
) -> Result<(), FormatVersionError> {
    if writes {
        let value = Bytes::from(WRITTEN_FORMAT_VERSION.to_string());
        match meta.put(partition, FORMAT_VERSION_KEY, value, PutCondition::IfAbsent).await {
            Ok(_) | Err(MetaError::KeyExists { .. }) => {}
            Err(e) if e.class() == lakestream_format::ErrorClass::OutcomeUnknown => {}
            Err(e) => return Err(e.into()),
        }
    }
    let Some(configured) = reader_version.filter(|v| *v != WRITTEN_FORMAT_VERSION) else { return Ok(()) };
    let Some(record) = meta.get(partition, FORMAT_VERSION_KEY).await? else { return Ok(()) };
    let recorded: u32 = std::str::from_utf8(&record.value)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .ok_or_else(|| FormatVersionError::Corrupt(String::from_utf8_lossy(&record.value).into_owned()))?;
    Err(FormatVersionError::LegacyReaderBesideV3 { configured, recorded })
}

/// The key recording the deployment's bound on readers' index caches: the longest time a
/// reader may keep index records cached (`compactor.reader_index_cache_ttl`), which every
/// compactor's WAL grace period is checked against. Put by the first compactor.
pub const READER_CACHE_BOUND_KEY: &str = "/lakestream-deployment/reader-index-cache-ttl-bound";

/// The record under [`READER_CACHE_BOUND_KEY`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct ReaderCacheBound {
    /// The bound in milliseconds.
    reader_index_cache_ttl_ms: u64,
}

fn show(d: std::time::Duration) -> humantime_serde::re::humantime::FormattedDuration {
    humantime_serde::re::humantime::format_duration(d)
}

/// A reader or a compactor whose index-cache setting does not fit the deployment's record.
#[derive(Debug, thiserror::Error)]
pub enum CacheBoundError {
    /// A reader would cache index records longer than the compactors keep WAL objects for.
    #[error(
        "reader.index_cache_ttl is {}, but this deployment's compactors are set for readers that \
         cache index records at most {} (compactor.reader_index_cache_ttl, recorded by the first \
         compactor under key {READER_CACHE_BOUND_KEY}); a reader caching longer could read a WAL \
         object after its grace period ended and it was deleted. Set reader.index_cache_ttl to \
         at most {}, or raise every compactor's reader_index_cache_ttl (and wal_grace above it) \
         and the record",
        show(*.configured), show(*.recorded), show(*.recorded)
    )]
    ReaderCacheTooLong {
        /// The reader's `index_cache_ttl`.
        configured: std::time::Duration,
        /// The recorded bound.
        recorded: std::time::Duration,
    },
    /// A compactor set for shorter reader caches than readers may already use.
    #[error(
        "compactor.reader_index_cache_ttl is {}, but this deployment records {} (key \
         {READER_CACHE_BOUND_KEY}, put by its first compactor): readers may have started with \
         index caches that long, and this compactor's wal_grace is only checked against {}. Set \
         compactor.reader_index_cache_ttl to at least {} (and wal_grace above it); to lower the \
         bound, set every reader's index_cache_ttl at most the new bound and change the record \
         with the services stopped",
        show(*.configured), show(*.recorded), show(*.configured), show(*.recorded)
    )]
    CompactorBoundTooShort {
        /// The compactor's `reader_index_cache_ttl`.
        configured: std::time::Duration,
        /// The recorded bound.
        recorded: std::time::Duration,
    },
    /// The record exists but cannot be read.
    #[error("the deployment record {READER_CACHE_BOUND_KEY} is not readable: {0}")]
    Corrupt(String),
    /// The metadata store failed.
    #[error("checking the readers' index-cache bound in the metadata store: {0}")]
    Meta(#[from] MetaError),
}

async fn recorded_cache_bound(
    meta: &dyn MetaStore,
    partition: &str,
) -> Result<Option<std::time::Duration>, CacheBoundError> {
    let Some(record) = meta.get(partition, READER_CACHE_BOUND_KEY).await? else { return Ok(None) };
    let bound: ReaderCacheBound =
        serde_json::from_slice(&record.value).map_err(|e| CacheBoundError::Corrupt(e.to_string()))?;
    Ok(Some(std::time::Duration::from_millis(bound.reader_index_cache_ttl_ms)))
}

/// A compactor's start: records its `compactor.reader_index_cache_ttl` as the deployment's
/// bound if none is recorded (CreateIfAbsent: of compactors that start together, one
/// records), else refuses a bound below the recorded one — readers may have been admitted
/// against it. A larger bound is fine (its WAL grace covers the recorded bound too) and
/// leaves the record as it is: raising it while another compactor runs with the smaller bound
/// would admit readers that compactor does not protect.
pub async fn record_or_check_reader_cache_bound(
    meta: &dyn MetaStore,
    partition: &str,
    bound: std::time::Duration,
) -> Result<(), CacheBoundError> {
    loop {
        let Some(recorded) = recorded_cache_bound(meta, partition).await? else {
            let record = ReaderCacheBound {
                reader_index_cache_ttl_ms: u64::try_from(bound.as_millis()).unwrap_or(u64::MAX),
            };
            let value = Bytes::from(
                serde_json::to_vec(&record).map_err(|e| CacheBoundError::Corrupt(e.to_string()))?,
            );
            match meta.put(partition, READER_CACHE_BOUND_KEY, value, PutCondition::IfAbsent).await {
                Ok(_) => {
                    tracing::info!(bound = %show(bound), "recorded the deployment's bound on readers' index caches");
                    return Ok(());
                }
                Err(MetaError::KeyExists { .. }) => continue,
                Err(e) if e.class() == lakestream_format::ErrorClass::OutcomeUnknown => continue,
                Err(e) => return Err(e.into()),
            }
        };
        if bound < recorded {
            return Err(CacheBoundError::CompactorBoundTooShort { configured: bound, recorded });
        }
        return Ok(());
    }
}

/// A reader's start: refuses an `index_cache_ttl` above the recorded bound. Before any
/// compactor has recorded one there is nothing to check across processes (the process's own
/// file still bounds it by its `compactor.reader_index_cache_ttl`, see `ServiceConfig::validate`).
pub async fn check_reader_cache_ttl(
    meta: &dyn MetaStore,
    partition: &str,
    ttl: std::time::Duration,
) -> Result<(), CacheBoundError> {
    match recorded_cache_bound(meta, partition).await? {
        Some(recorded) if ttl > recorded => {
            Err(CacheBoundError::ReaderCacheTooLong { configured: ttl, recorded })
        }
        _ => Ok(()),
    }
}

/// The roots a service is configured with, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageRoots {
    /// The WAL root, e.g. `s3://lakestream/wal` or `local:/srv/lakestream/objects/wal`.
    pub wal: String,
    /// The compacted root.
    pub compacted: String,
}

impl StorageRoots {
    /// The roots named by `storage`; the error names the setting that cannot be resolved.
    pub fn of(storage: &StorageConfig) -> Result<StorageRoots, (&'static str, String)> {
        Ok(StorageRoots {
            wal: describe("storage.wal", &storage.wal)?,
            compacted: describe("storage.compacted", &storage.compacted)?,
        })
    }
}

fn describe(key: &'static str, config: &ObjectStoreConfig) -> Result<String, (&'static str, String)> {
    match config {
        ObjectStoreConfig::Local { dir, root } => {
            let root = ObjectRoot::parse(root).map_err(|e| (key, e.to_string()))?;
            let dir = std::path::absolute(dir).map_err(|e| (key, format!("{}: {e}", dir.display())))?;
            Ok(format!("local:{}/{root}", dir.display()))
        }
        ObjectStoreConfig::S3(s3) => {
            let prefix = s3.prefix.as_deref().map(|p| p.trim_matches('/')).filter(|p| !p.is_empty());
            Ok(match prefix {
                Some(prefix) => format!("s3://{}/{prefix}", s3.bucket),
                None => format!("s3://{}", s3.bucket),
            })
        }
        // The root as the validated config resolves it (from `url` or the separate keys).
        ObjectStoreConfig::Gcs(gcs) => {
            Ok(format!("gs://{}", gcs.validate().map_err(|e| (key, e.to_string()))?))
        }
        ObjectStoreConfig::Azure(azure) => {
            Ok(format!("az://{}", azure.validate().map_err(|e| (key, e.to_string()))?))
        }
    }
}

/// Why the roots could not be recorded or do not match.
#[derive(Debug, thiserror::Error)]
pub enum RootsError {
    /// The configured roots differ from the recorded ones.
    #[error(
        "{key} is {configured}, but this deployment's metadata store records its {what} as \
         {recorded} (key {STORAGE_ROOTS_KEY}, written by the first service that started); every \
         service of a deployment must use the same WAL root and compacted root. Fix {key}, or \
         point `metadata` at the deployment that owns this root"
    )]
    Mismatch {
        /// The setting, `storage.wal` or `storage.compacted`.
        key: &'static str,
        /// "WAL root" or "compacted root".
        what: &'static str,
        /// The recorded root.
        recorded: String,
        /// The configured root.
        configured: String,
    },
    /// The record exists but cannot be read.
    #[error("the deployment record {STORAGE_ROOTS_KEY} is not readable: {0}")]
    Corrupt(String),
    /// The metadata store failed.
    #[error("recording the storage roots in the metadata store: {0}")]
    Meta(#[from] MetaError),
}

/// Records `roots` if the deployment has no record yet (CreateIfAbsent, so of services that
/// start together exactly one records), else checks that they equal the recorded ones.
pub async fn record_or_check(
    meta: &dyn MetaStore,
    partition: &str,
    roots: &StorageRoots,
) -> Result<(), RootsError> {
    loop {
        let Some(record) = meta.get(partition, STORAGE_ROOTS_KEY).await? else {
            let value =
                Bytes::from(serde_json::to_vec(roots).map_err(|e| RootsError::Corrupt(e.to_string()))?);
            match meta.put(partition, STORAGE_ROOTS_KEY, value, PutCondition::IfAbsent).await {
                Ok(_) => {
                    tracing::info!(wal = %roots.wal, compacted = %roots.compacted, "recorded the deployment's storage roots");
                    return Ok(());
                }
                // Another service recorded first (or our put's outcome was unknown): check.
                Err(MetaError::KeyExists { .. }) => continue,
                Err(e) if e.class() == lakestream_format::ErrorClass::OutcomeUnknown => continue,
                Err(e) => return Err(e.into()),
            }
        };
        let recorded: StorageRoots =
            serde_json::from_slice(&record.value).map_err(|e| RootsError::Corrupt(e.to_string()))?;
        for (key, what, recorded, configured) in [
            ("storage.wal", "WAL root", &recorded.wal, &roots.wal),
            ("storage.compacted", "compacted root", &recorded.compacted, &roots.compacted),
        ] {
            if recorded != configured {
                return Err(RootsError::Mismatch {
                    key,
                    what,
                    recorded: recorded.clone(),
                    configured: configured.clone(),
                });
            }
        }
        return Ok(());
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use lakestream_meta::InMemoryStore;

    use super::*;

    fn local(dir: &str, root: &str) -> ObjectStoreConfig {
        ObjectStoreConfig::Local { dir: PathBuf::from(dir), root: root.into() }
    }

    fn roots(wal: &str, compacted: &str) -> StorageRoots {
        StorageRoots::of(&StorageConfig {
            wal: local("/srv/objects", wal),
            compacted: local("/srv/objects", compacted),
        })
        .unwrap()
    }

    #[tokio::test]
    async fn the_storage_roots_are_recorded_once_and_other_roots_are_refused() {
        // [All] All implementations in a deployment MUST use the same WAL root and the same
        // compacted root.
        let meta = InMemoryStore::new();
        let first = roots("wal", "compacted");
        assert_eq!(first.wal, "local:/srv/objects/wal");
        record_or_check(&meta, "cat", &first).await.unwrap();
        let stored = meta.get("cat", STORAGE_ROOTS_KEY).await.unwrap().unwrap();
        // The same roots start again; the record is not rewritten.
        record_or_check(&meta, "cat", &roots("wal", "compacted")).await.unwrap();
        assert_eq!(meta.get("cat", STORAGE_ROOTS_KEY).await.unwrap().unwrap().version, stored.version);
        for (other, key) in [
            (roots("wal2", "compacted"), "storage.wal"),
            (roots("wal", "compacted/elsewhere"), "storage.compacted"),
        ] {
            let err = record_or_check(&meta, "cat", &other).await.unwrap_err();
            let message = err.to_string();
            assert!(matches!(err, RootsError::Mismatch { .. }), "{message}");
            assert!(message.starts_with(key), "{message}");
            assert!(message.contains("local:/srv/objects/"), "{message}");
        }
        assert_eq!(meta.get("cat", STORAGE_ROOTS_KEY).await.unwrap().unwrap().version, stored.version);
    }

    /// [All] All WAL objects and index records of a deployment use one format version: a
    /// reader set to v1 or v2 in a process of its own is refused where a writer or compactor
    /// of the deployment recorded version 3; over a store no v3 role wrote (a legacy
    /// deployment) it starts.
    #[tokio::test]
    async fn a_legacy_reader_process_is_refused_where_a_writer_recorded_format_version_3() {
        let legacy = InMemoryStore::new();
        record_or_check_format_version(&legacy, "cat", false, Some(2)).await.expect("legacy-read mode");
        assert!(legacy.get("cat", FORMAT_VERSION_KEY).await.unwrap().is_none(), "a reader records nothing");

        let v3 = InMemoryStore::new();
        record_or_check_format_version(&v3, "cat", true, None).await.expect("a writer records");
        record_or_check_format_version(&v3, "cat", true, Some(3)).await.expect("again, the same");
        record_or_check_format_version(&v3, "cat", false, Some(3)).await.expect("a v3 reader");
        for legacy_version in [1, 2] {
            let err =
                record_or_check_format_version(&v3, "cat", false, Some(legacy_version)).await.unwrap_err();
            let message = err.to_string();
            assert!(matches!(err, FormatVersionError::LegacyReaderBesideV3 { recorded: 3, .. }), "{message}");
            assert!(message.starts_with(&format!("reader.format_version is {legacy_version}")), "{message}");
        }
    }

    /// The compactor's bound on readers' index caches, across processes: the first compactor
    /// records it; a reader caching longer is refused, naming both values; a compactor set for
    /// shorter caches than recorded is refused; a longer bound starts and leaves the record.
    #[tokio::test]
    async fn the_readers_cache_bound_is_recorded_by_the_first_compactor_and_enforced() {
        use std::time::Duration;
        let meta = InMemoryStore::new();
        // No compactor yet: nothing recorded, nothing to check.
        check_reader_cache_ttl(&meta, "cat", Duration::from_secs(3600)).await.unwrap();
        assert!(meta.get("cat", READER_CACHE_BOUND_KEY).await.unwrap().is_none(), "a reader records nothing");
        record_or_check_reader_cache_bound(&meta, "cat", Duration::from_secs(60)).await.unwrap();
        let stored = meta.get("cat", READER_CACHE_BOUND_KEY).await.unwrap().unwrap();
        for ok in [Duration::from_secs(5), Duration::from_secs(60)] {
            check_reader_cache_ttl(&meta, "cat", ok).await.unwrap();
        }
        let err = check_reader_cache_ttl(&meta, "cat", Duration::from_secs(61)).await.unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, CacheBoundError::ReaderCacheTooLong { .. }), "{message}");
        assert!(message.starts_with("reader.index_cache_ttl is 1m 1s"), "{message}");
        assert!(message.contains("at most 1m ") && message.contains(READER_CACHE_BOUND_KEY), "{message}");
        // A compactor with the same or a longer bound starts; the record stays.
        for ok in [Duration::from_secs(60), Duration::from_secs(600)] {
            record_or_check_reader_cache_bound(&meta, "cat", ok).await.unwrap();
        }
        assert_eq!(meta.get("cat", READER_CACHE_BOUND_KEY).await.unwrap().unwrap().version, stored.version);
        check_reader_cache_ttl(&meta, "cat", Duration::from_secs(61)).await.unwrap_err();
        // A shorter one does not.
        let err =
            record_or_check_reader_cache_bound(&meta, "cat", Duration::from_secs(30)).await.unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, CacheBoundError::CompactorBoundTooShort { .. }), "{message}");
        assert!(message.starts_with("compactor.reader_index_cache_ttl is 30s"), "{message}");
        assert!(message.contains("records 1m "), "{message}");
    }

    #[test]
    fn an_s3_root_is_its_bucket_and_prefix_whatever_the_endpoint() {
        let s3 = |endpoint: &str, prefix: Option<&str>| {
            let c = lakestream_objstore_s3::S3Config {
                bucket: "lake".into(),
                prefix: prefix.map(String::from),
                endpoint: Some(endpoint.into()),
                ..Default::default()
            };
            ObjectStoreConfig::S3(Box::new(c))
        };
        let a = StorageRoots::of(&StorageConfig {
            wal: s3("http://minio:9000", Some("wal")),
            compacted: s3("http://minio:9000", None),
        })
        .unwrap();
        let b = StorageRoots::of(&StorageConfig {
            wal: s3("http://127.0.0.1:9000", Some("/wal/")),
            compacted: s3("http://127.0.0.1:9000", None),
        })
        .unwrap();
        assert_eq!(a, b);
        assert_eq!((a.wal.as_str(), a.compacted.as_str()), ("s3://lake/wal", "s3://lake"));
    }
}
