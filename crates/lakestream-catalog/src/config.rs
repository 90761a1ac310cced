//! The catalog's settings: a plain struct with documented defaults, deserializable with serde.

use std::time::Duration;

use serde::Deserialize;

use crate::error::{CatalogError, Result};

/// Settings of a [`crate::Catalog`]. Every field has a default; a configuration file names
/// only what it changes. Durations are human-readable (`"30s"`, `"25ms"`).
///
/// ```
/// let config: lakestream_catalog::CatalogConfig =
///     serde_json::from_str(r#"{"drain_timeout": "5s"}"#).unwrap();
/// assert_eq!(config.drain_timeout, std::time::Duration::from_secs(5));
/// assert_eq!(config.drain_poll_interval, std::time::Duration::from_millis(25));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CatalogConfig {
    /// The metadata-store partition that holds every catalog record. Default
    /// `"lakestream-catalog"`. It must not be a decimal number, so that catalog records never
    /// share a partition name `P(L)` with a log. All catalog operations of a deployment go
    /// through this one partition: that is what makes them linearizable with each other.
    pub partition: String,
    /// How long deleting a log waits for lease records to disappear before it gives up
    /// (leaving the fence and everything else in place). Default 30 s, as Ursa. Longer waits
    /// let slow writers finish; shorter ones return `LeasesRemain` sooner for a retry.
    #[serde(with = "humantime_serde")]
    pub drain_timeout: Duration,
    /// How often deleting a log lists the lease records while it waits. Default 25 ms, as
    /// Ursa. Each poll is one List on the log's partition.
    #[serde(with = "humantime_serde")]
    pub drain_poll_interval: Duration,
    /// The lowest log ID the allocator hands out. Default 0. Raising it (for instance above
    /// the IDs another catalog used in the same metadata store) takes effect on the next
    /// allocation; lowering it never makes the allocator go back.
    pub first_log_id: u64,
    /// The most partitions (logs) a stream may have. Default 10 000. The stream record lists
    /// every log ID, so this bounds its size (about 21 bytes per log).
    pub max_partitions: u32,
    /// How many lost compare-and-set rounds an operation tolerates before it reports
    /// `Contended` (retryable). Default 1 000. Every lost round means another catalog
    /// operation on the same record succeeded, so the bound only stops pathological storms.
    pub max_cas_attempts: u32,
}

impl Default for CatalogConfig {
    fn default() -> Self {
        Self {
            partition: "lakestream-catalog".to_owned(),
            drain_timeout: Duration::from_secs(30),
            drain_poll_interval: Duration::from_millis(25),
            first_log_id: 0,
            max_partitions: 10_000,
            max_cas_attempts: 1_000,
        }
    }
}

impl CatalogConfig {
    /// Checks the settings, naming the first one that is unusable.
    pub fn validate(&self) -> Result<()> {
        let invalid = |detail: String| Err(CatalogError::InvalidConfig(detail));
        if self.partition.is_empty() {
            return invalid("partition must not be empty".to_owned());
        }
        if self.partition.bytes().all(|b| b.is_ascii_digit()) {
            return invalid(format!(
                "partition {:?} is a decimal number, the partition name of a log; choose a name with a letter",
                self.partition
            ));
        }
        if self.drain_poll_interval.is_zero() {
            return invalid("drain_poll_interval must be greater than zero".to_owned());
        }
        if self.first_log_id > lakestream_format::LogId::MAX.0 {
            return invalid(format!("first_log_id {} exceeds 2^63-1", self.first_log_id));
        }
        if self.max_partitions == 0 {
            return invalid("max_partitions must be at least 1".to_owned());
        }
        if self.max_cas_attempts == 0 {
            return invalid("max_cas_attempts must be at least 1".to_owned());
        }
        Ok(())
    }

    /// The lease-drain settings of log deletion.
    pub fn drain_config(&self) -> lakestream_meta::lease::DrainConfig {
        lakestream_meta::lease::DrainConfig {
            timeout: self.drain_timeout,
            poll_interval: self.drain_poll_interval,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_ones() {
        let c = CatalogConfig::default();
        assert_eq!(c.drain_timeout, Duration::from_secs(30));
        assert_eq!(c.drain_poll_interval, Duration::from_millis(25));
        assert_eq!(c.partition, "lakestream-catalog");
        c.validate().unwrap();
        let from_empty: CatalogConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(from_empty, c);
    }

    #[test]
    fn unknown_settings_and_bad_values_are_refused() {
        assert!(serde_json::from_str::<CatalogConfig>(r#"{"drain_timeot": "1s"}"#).is_err());
        assert!(serde_json::from_str::<CatalogConfig>(r#"{"drain_timeout": "soon"}"#).is_err());
        for bad in [
            CatalogConfig { partition: String::new(), ..Default::default() },
            CatalogConfig { partition: "42".into(), ..Default::default() },
            CatalogConfig { drain_poll_interval: Duration::ZERO, ..Default::default() },
            CatalogConfig { first_log_id: u64::MAX, ..Default::default() },
            CatalogConfig { max_partitions: 0, ..Default::default() },
            CatalogConfig { max_cas_attempts: 0, ..Default::default() },
        ] {
            let err = bad.validate().unwrap_err();
            assert!(matches!(err, CatalogError::InvalidConfig(_)), "{bad:?}: {err}");
        }
    }
}
