//! Reader settings.

use std::time::Duration;

use serde::Deserialize;

/// How the reader fetches a WAL object for a RAW record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum WalReadMode {
    /// Whole objects for sections of a quarter of the object or more (and for objects in
    /// the cache); for smaller sections, by what the reader has seen: writers put many logs
    /// in one object, each log's payloads together, so a reader of one log reads its share
    /// by range (the object's index, then the log's span), while a reader serving most logs
    /// of the objects it reads (a stream's partitions, consumed together) reads them whole,
    /// once for all its logs. It starts with ranged reads and switches once the objects it
    /// read turn out to be mostly used (half their payload delivered within 2 s), and back
    /// when they do not. Ranged reads of one object asked for at the same time share one
    /// read of its index and one GET of their spans. The default.
    #[default]
    Adaptive,
    /// One GET of the whole object, cached: later reads of the object's other logs cost
    /// nothing. Best when one reader serves every log of the objects it reads.
    Whole,
    /// A ranged GET of the index region (with a 4 KiB guess, a second one when the index is
    /// larger), then a ranged GET of the log's payload span. Fewer bytes per read, more
    /// requests; not cached.
    Ranged,
}

/// Settings of a [`crate::Reader`]. Every field has a default; `validate()` names a bad one.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReaderConfig {
    /// Bytes kept in memory by each of the two object caches: parsed WAL objects (or the
    /// sections read of them), and parts of compacted files (companions, footers, decoded
    /// row groups). Default 256 MiB each. Cached reads avoid a GET; objects never change,
    /// so the caches are never stale.
    pub object_cache_bytes: usize,
    /// How many consecutive index records one metadata scan fetches during a batched read.
    /// Default 32: fewer round trips for large reads, a little more data per scan.
    pub scan_batch: usize,
    /// The longest interval between two looks at the end of a log that reads wait on, when
    /// no append through this process signals new data (appends made by other processes are
    /// seen within it). One poller per log looks, however many reads wait on it, starting
    /// 1 ms after the log last changed and doubling up to this bound: an idle tailed log
    /// costs about `1 / tail_poll_max` metadata reads a second. Default 250 ms.
    #[serde(with = "humantime_serde")]
    pub tail_poll_max: Duration,
    /// How many times a read looks up the covering record again after its object turned out
    /// missing (replaced by compaction or trim) before it reports an error. Default 3.
    pub missing_object_retries: u32,
    /// How long a scanned index record may serve later reads without asking the metadata
    /// store again. Default 5 s; 0 disables the cache. A cached record may have been replaced
    /// by a compaction or removed by a trim meanwhile; its objects stay readable for the WAL
    /// grace period, so this TTL must stay well below the compactor's grace period (the
    /// server enforces it), and a missing object drops the log's cached records.
    #[serde(with = "humantime_serde")]
    pub index_cache_ttl: Duration,
    /// The most index records the cache holds across all logs. Default 100,000.
    pub index_cache_records: usize,
    /// How WAL objects are fetched.
    pub wal_read: WalReadMode,
    /// Read-ahead: while a read takes a record of a log, the WAL objects (or the log's
    /// sections of them) of the next index records it found are fetched in the background,
    /// while the bytes being fetched ahead stay within this budget (per reader, across
    /// logs; at least one object at a time), and no read looks further ahead than this
    /// budget past the record it reads. Fetched data lands in the object cache, so memory
    /// stays bounded by `object_cache_bytes` plus this budget; keep it well below half the
    /// cache (the cache's share for objects not yet read twice), or objects read ahead may
    /// be evicted before they are read. Default 64 MiB; 0 disables read-ahead.
    pub read_ahead_bytes: usize,
    /// The deployment's format version: 3 (the default), or 1 or 2 to read deployments that
    /// predate version 3 (Appendix C: per-entry string index values, legacy WAL objects).
    /// A deployment uses one version; values of another version are refused, never guessed.
    pub format_version: u8,
}

impl Default for ReaderConfig {
    fn default() -> Self {
        ReaderConfig {
            object_cache_bytes: 256 << 20,
            scan_batch: 32,
            tail_poll_max: Duration::from_millis(250),
            missing_object_retries: 3,
            format_version: 3,
            wal_read: WalReadMode::Adaptive,
            read_ahead_bytes: 64 << 20,
            index_cache_ttl: Duration::from_secs(5),
            index_cache_records: 100_000,
        }
    }
}

/// A setting that is out of range: names the field and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("reader setting `{field}`: {rule}")]
pub struct ConfigError {
    /// The field.
    pub field: &'static str,
    /// The rule it breaks.
    pub rule: String,
}

impl ReaderConfig {
    /// Checks every setting against its rule.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.scan_batch == 0 {
            return Err(ConfigError { field: "scan_batch", rule: "must be at least 1".into() });
        }
        if self.tail_poll_max < Duration::from_millis(1) {
            return Err(ConfigError { field: "tail_poll_max", rule: "must be at least 1ms".into() });
        }
        if !(1..=3).contains(&self.format_version) {
            return Err(ConfigError { field: "format_version", rule: "must be 1, 2 or 3".into() });
        }
        Ok(())
    }
}
