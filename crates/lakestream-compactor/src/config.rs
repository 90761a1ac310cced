//! Compactor settings: a serde struct with human-readable durations, documented defaults and
//! a [`CompactorConfig::validate`] that names the setting and the rule it breaks.

use std::time::Duration;

use lakestream_meta::SESSION_TIMEOUT_RANGE;
use lakestream_reader::ReaderConfig;
use serde::Deserialize;

/// The largest `entry_size_bytes` a PARQUET record may carry: the spec says a compactor SHOULD
/// keep it below 2³¹ (Appendix E: Ursa's 32-bit entry sizes).
pub const MAX_RANGE_PAYLOAD: u64 = (1 << 31) - 1;

/// Settings of a [`crate::Compactor`]. Every field has a default; `validate()` checks them.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompactorConfig {
    /// A range closes once it holds this much payload. Default 256 MiB (Ursa's value). Larger
    /// ranges mean fewer index records and Parquet files, and a longer C2 (not more memory:
    /// files are uploaded as they are written). At most 2³¹ − 1.
    pub max_range_bytes: u64,
    /// A range closes once its oldest entry is this old, even if small. Default 180 s (Ursa's
    /// value). Lower means readers move to Parquet sooner and WAL objects are freed sooner, at
    /// the cost of more, smaller files.
    #[serde(with = "humantime_serde")]
    pub max_range_age: Duration,
    /// A compacted file is closed and a new one started once it holds this much payload.
    /// Default 128 MiB. Smaller files cost more objects and index bytes. A file is uploaded
    /// row group by row group where the store streams (S3, local disk), so its size does not
    /// add to the compactor's memory there; GCS and Azure still hold a file whole.
    pub max_file_bytes: u64,
    /// Accepted for older configuration files; unused since C2 reads WAL objects itself
    /// (`fetch_bytes`). Default 8 MiB; must be at least 1.
    pub read_chunk_bytes: usize,
    /// The compactor's cache: how many bytes of WAL objects (or of their sections) C2 fetches
    /// ahead of the one it is handing out, so that reads overlap encoding. A fetched object is
    /// handed to every log of the pass that needs it at once, then dropped: nothing is kept
    /// for reuse, since a pass reads each object once. Default 64 MiB (at least one object is
    /// always fetched, however large). The compactor holds about this much WAL data plus,
    /// for each of `concurrent_logs` logs, the row group it collects and the part of a file
    /// being uploaded, and `row_group_budget_bytes` of row groups encoding or on their way
    /// to the upload across all logs.
    pub fetch_bytes: usize,
    /// How many logs one pass compacts together (consecutive logs of the list it is given,
    /// usually the partitions of one stream, which share WAL objects): their ranges' C2 runs
    /// at once and fetches each shared object once for all of them. Default 8; 1 compacts
    /// log after log (each object then fetched once per log that holds it, by ranged reads
    /// of its section when that is under a quarter of the object).
    pub concurrent_logs: usize,
    /// A compacted file's row groups hold about this much payload. Default 4 MiB. Payloads
    /// are copied out of the WAL objects they were read from into the row group being
    /// built, which is encoded off the async runtime while the next one is read; so each
    /// log holds about one row group being collected, all logs together at most two more
    /// being encoded or uploaded (`row_group_budget_bytes`), never whole WAL objects, and a reader
    /// of a compacted file can fetch one small row group rather than a large one.
    pub row_group_bytes: usize,
    /// How long a WAL object is kept after no index record names it any more. Default 1 h.
    /// Must exceed `reader_index_cache_ttl`: a reader may use a cached record that long.
    #[serde(with = "humantime_serde")]
    pub wal_grace: Duration,
    /// The longest time any reader of the deployment keeps index records cached. Default
    /// 600 s, Ursa's `entryIndexCacheTTLInSecs` (addendum §12 row 12). Our reader caches index
    /// records for `reader.index_cache_ttl` (5 s by default); the server refuses a reader TTL
    /// above this value.
    #[serde(with = "humantime_serde")]
    pub reader_index_cache_ttl: Duration,
    /// How long a compacted file that no index record names is kept after it was written.
    /// Default 1 h. Must exceed `max_compaction_duration`, so that a compaction still able to
    /// install a file never loses it.
    #[serde(with = "humantime_serde")]
    pub compacted_grace: Duration,
    /// The longest time from the start of C2 to the last C3 attempt that may still install
    /// the range's files. Default 15 min. A compaction that passes it gives up before C3.
    #[serde(with = "humantime_serde")]
    pub max_compaction_duration: Duration,
    /// The metadata-store session timeout of the compactor's session. Default 30 s. Leases
    /// and claims vanish this long after the process stops.
    #[serde(with = "humantime_serde")]
    pub session_timeout: Duration,
    /// Whether `gc_once` also lists the WAL and compacted roots for objects that no ledger
    /// entry mentions (orphans of failed writes, failed compactions and deleted logs).
    /// Default true. Listing costs one LIST page per 1000 objects.
    pub orphan_scan: bool,
    /// How many times a failed C3/C4 attempt is retried in one pass before the compaction is
    /// kept for the next pass. Default 3.
    pub install_attempts: u32,
    /// The Parquet codec of the payload column. Default `snappy` (what parquet-mr writers use
    /// by default). Payloads that producers already compressed gain nothing from a codec:
    /// `uncompressed` then costs no CPU; `zstd` trades CPU for smaller files.
    pub codec: ParquetCodec,
    /// Accepted for older configuration files (and validated); unused since C2 reads WAL
    /// objects itself through its own fetch window (`fetch_bytes`).
    pub reader: ReaderConfig,
}

/// The Parquet codec of compacted files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParquetCodec {
    /// No compression.
    Uncompressed,
    /// Snappy.
    Snappy,
    /// LZ4 (raw block format).
    Lz4Raw,
    /// Zstandard at level 3.
    Zstd,
}

impl ParquetCodec {
    pub(crate) fn to_format(self) -> lakestream_format::compacted::Codec {
        use lakestream_format::compacted::Codec;
        match self {
            ParquetCodec::Uncompressed => Codec::Uncompressed,
            ParquetCodec::Snappy => Codec::Snappy,
            ParquetCodec::Lz4Raw => Codec::Lz4Raw,
            ParquetCodec::Zstd => Codec::Zstd(3),
        }
    }
}

impl Default for CompactorConfig {
    fn default() -> Self {
        CompactorConfig {
            max_range_bytes: 256 << 20,
            max_range_age: Duration::from_secs(180),
            max_file_bytes: 128 << 20,
            read_chunk_bytes: 8 << 20,
            fetch_bytes: 64 << 20,
            concurrent_logs: 8,
            row_group_bytes: 4 << 20,
            wal_grace: Duration::from_secs(3600),
            reader_index_cache_ttl: Duration::from_secs(600),
            compacted_grace: Duration::from_secs(3600),
            max_compaction_duration: Duration::from_secs(15 * 60),
            session_timeout: Duration::from_secs(30),
            orphan_scan: true,
            install_attempts: 3,
            codec: ParquetCodec::Snappy,
            reader: ReaderConfig {
                object_cache_bytes: 64 << 20,
                read_ahead_bytes: 24 << 20,
                ..ReaderConfig::default()
            },
        }
    }
}

/// A setting that is out of range: names the field and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("compactor setting `{field}`: {rule}")]
pub struct ConfigError {
    /// The field.
    pub field: &'static str,
    /// The rule it breaks.
    pub rule: String,
}

impl CompactorConfig {
    /// Checks every setting against its rule.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |field: &'static str, rule: String| Err(ConfigError { field, rule });
        if self.max_range_bytes == 0 || self.max_range_bytes > MAX_RANGE_PAYLOAD {
            return fail("max_range_bytes", format!("must be between 1 and {MAX_RANGE_PAYLOAD} (2^31 - 1)"));
        }
        if self.max_file_bytes == 0 {
            return fail("max_file_bytes", "must be at least 1".into());
        }
        if self.read_chunk_bytes == 0 {
            return fail("read_chunk_bytes", "must be at least 1".into());
        }
        if self.concurrent_logs == 0 {
            return fail("concurrent_logs", "must be at least 1".into());
        }
        if self.row_group_bytes == 0 {
            return fail("row_group_bytes", "must be at least 1".into());
        }
        if self.wal_grace <= self.reader_index_cache_ttl {
            return fail(
                "wal_grace",
                format!(
                    "must exceed reader_index_cache_ttl ({:?}): a reader may read a WAL object through a cached record that long",
                    self.reader_index_cache_ttl
                ),
            );
        }
        if self.compacted_grace <= self.max_compaction_duration {
            return fail(
                "compacted_grace",
                format!(
                    "must exceed max_compaction_duration ({:?}): a compaction may install its files that long after writing them",
                    self.max_compaction_duration
                ),
            );
        }
        if self.max_compaction_duration.is_zero() {
            return fail("max_compaction_duration", "must be positive".into());
        }
        if !SESSION_TIMEOUT_RANGE.contains(&self.session_timeout) {
            return fail("session_timeout", format!("must lie in {SESSION_TIMEOUT_RANGE:?}"));
        }
        if self.install_attempts == 0 {
            return fail("install_attempts", "must be at least 1".into());
        }
        self.reader.validate().map_err(|e| ConfigError { field: "reader", rule: e.to_string() })
    }

    /// The bytes of full row groups the compactor holds at once between collection and
    /// upload, across all of its concurrent logs: two row groups (one encoding on each of
    /// two cores, or one encoding while the other's bytes go to its upload). Derived, not
    /// set: `row_group_bytes` × 2.
    pub fn row_group_budget_bytes(&self) -> u64 {
        (self.row_group_bytes as u64).saturating_mul(2)
    }

    pub(crate) fn ms(d: Duration) -> i64 {
        i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_ursas() {
        let c = CompactorConfig::default();
        c.validate().unwrap();
        assert_eq!((c.max_range_bytes, c.max_range_age), (256 << 20, Duration::from_secs(180)));
        assert_eq!(c.wal_grace, Duration::from_secs(3600));
    }

    #[test]
    fn wal_grace_must_exceed_every_reader_index_cache_ttl() {
        // Spec "Reclaiming WAL objects" + addendum §12 row 12.
        let c = CompactorConfig { wal_grace: Duration::from_secs(600), ..CompactorConfig::default() };
        assert_eq!(c.validate().unwrap_err().field, "wal_grace");
        let c = CompactorConfig {
            wal_grace: Duration::from_secs(60),
            reader_index_cache_ttl: Duration::from_secs(30),
            ..CompactorConfig::default()
        };
        c.validate().unwrap();
    }

    #[test]
    fn bad_settings_name_the_field() {
        let cases: Vec<(CompactorConfig, &str)> = vec![
            (CompactorConfig { max_range_bytes: 1 << 31, ..Default::default() }, "max_range_bytes"),
            (CompactorConfig { max_range_bytes: 0, ..Default::default() }, "max_range_bytes"),
            (CompactorConfig { max_file_bytes: 0, ..Default::default() }, "max_file_bytes"),
            (CompactorConfig { read_chunk_bytes: 0, ..Default::default() }, "read_chunk_bytes"),
            (
                CompactorConfig { compacted_grace: Duration::from_secs(900), ..Default::default() },
                "compacted_grace",
            ),
            (
                CompactorConfig { session_timeout: Duration::from_secs(1), ..Default::default() },
                "session_timeout",
            ),
            (CompactorConfig { install_attempts: 0, ..Default::default() }, "install_attempts"),
            (CompactorConfig { concurrent_logs: 0, ..Default::default() }, "concurrent_logs"),
        ];
        for (config, field) in cases {
            assert_eq!(config.validate().unwrap_err().field, field);
        }
    }

    #[test]
    fn deserializes_human_readable_durations() {
        let c: CompactorConfig = serde_json::from_str(
            r#"{"max_range_age":"5m","wal_grace":"2h","max_range_bytes":1048576,"codec":"zstd"}"#,
        )
        .unwrap();
        assert_eq!(c.max_range_age, Duration::from_secs(300));
        assert_eq!(c.wal_grace, Duration::from_secs(7200));
        assert_eq!(c.codec, ParquetCodec::Zstd);
        assert!(serde_json::from_str::<CompactorConfig>(r#"{"no_such":1}"#).is_err());
    }
}
