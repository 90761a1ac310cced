//! Writer settings: what a deployment tunes, each with its cost.

use std::time::Duration;

use serde::Deserialize;

/// What an append does when the writer already holds `max_in_flight_bytes` of unacknowledged
/// payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Backpressure {
    /// Wait until earlier appends complete (the default).
    #[default]
    Wait,
    /// Fail at once with [`crate::AppendError::Backpressure`], so the caller can shed load
    /// (services answer 503 with Retry-After).
    FailFast,
}

/// Settings of a [`crate::Writer`]. Every field has a default; `validate()` names a bad one.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WriterConfig {
    /// How long entries wait for company before their WAL object is written. Longer windows
    /// mean fewer, larger PUTs (cheaper storage requests) and higher acknowledgement latency.
    /// Default 250 ms; at least 1 ms.
    #[serde(with = "humantime_serde")]
    pub flush_window: Duration,
    /// Group commit: an object also closes at once when none of this writer's objects is
    /// uploading, and otherwise when the uploads under way end (or on its window or size,
    /// whichever comes first). Default true: at low load an acknowledgement costs one PUT
    /// and one index put and waits for no window; under load uploads overlap and objects fill
    /// up as before. The price is more, smaller PUTs at low and moderate load (about one per
    /// PUT round trip while anything arrives); false makes the window the only timer, for
    /// deployments that pay per request more than they care about latency.
    pub flush_when_idle: bool,
    /// A WAL object is written as soon as its payload reaches this size. Default 4 MiB. An
    /// entry larger than this gets an object of its own.
    pub flush_bytes: usize,
    /// The most logs one WAL object holds. Default 10,000: objects close on `flush_bytes` or
    /// the window, so under many-log load they fill up (one PUT for many logs) instead of
    /// closing after a handful of logs (Ursa closes at 4, which costs one PUT per few
    /// entries). Each log costs one index put per object either way, and 21+ bytes of the
    /// object's index region per section.
    pub max_logs_per_object: usize,
    /// How many WAL objects may be uploading at once. Default: `max_in_flight_bytes /
    /// flush_bytes` (16 with the defaults), at least 1 — as many full objects as the
    /// in-flight bound holds. More overlap hides PUT latency; memory stays bounded by
    /// `max_in_flight_bytes`.
    pub max_concurrent_uploads: Option<usize>,
    /// How many index puts (sequenced puts) of one log may be in flight at once. Default 4.
    /// They are issued in the log's flush order, and a metadata store that commits puts in
    /// the order they are issued (Oxia: one ordered stream per shard) keeps that order, so a
    /// log's throughput is not bound by one put's round trip. A store that does not promise
    /// that order gets one at a time. Entries are answered in the same order; once a put
    /// fails, the puts issued behind it are not acknowledged (see the writer's docs).
    pub max_index_puts_in_flight_per_log: usize,
    /// The most unacknowledged payload bytes the writer holds. Default 64 MiB.
    pub max_in_flight_bytes: usize,
    /// What an append does when the in-flight bound is reached.
    pub backpressure: Backpressure,
    /// The largest entry accepted. Default 16 MiB; at most 2³¹ − 1 (a varint32).
    pub max_entry_bytes: usize,
    /// The metadata-store session timeout that backs the writer's leases. Default 15 s:
    /// a crashed writer's leases vanish this long after its last keep-alive.
    #[serde(with = "humantime_serde")]
    pub session_timeout: Duration,
    /// How many times a soft trim re-reads the marker after losing a compare-and-set.
    pub trim_retries: u32,
    /// A log's write lease is released once no append has used it for this long, so that
    /// deleting the log (which waits until no lease record remains, 30 s by default) does not
    /// wait for the writer to close. The next append acquires a new lease: two metadata
    /// operations. Default 5 s; at least 1 ms.
    #[serde(with = "humantime_serde")]
    pub lease_idle_release: Duration,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            flush_window: Duration::from_millis(250),
            flush_when_idle: true,
            flush_bytes: 4 << 20,
            max_logs_per_object: 10_000,
            max_concurrent_uploads: None,
            max_index_puts_in_flight_per_log: 4,
            max_in_flight_bytes: 64 << 20,
            backpressure: Backpressure::Wait,
            max_entry_bytes: 16 << 20,
            session_timeout: Duration::from_secs(15),
            trim_retries: 8,
            lease_idle_release: Duration::from_secs(5),
        }
    }
}

/// A setting that is out of range: names the field and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("writer setting `{field}`: {rule}")]
pub struct ConfigError {
    /// The field.
    pub field: &'static str,
    /// The rule it breaks.
    pub rule: String,
}

impl WriterConfig {
    /// How many WAL objects may upload at once: `max_concurrent_uploads`, else
    /// `max_in_flight_bytes / flush_bytes`, at least 1.
    pub fn upload_concurrency(&self) -> usize {
        self.max_concurrent_uploads.unwrap_or(self.max_in_flight_bytes / self.flush_bytes.max(1)).max(1)
    }

    /// Checks every setting against its rule.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field, rule: &str| Err(ConfigError { field, rule: rule.to_string() });
        if self.lease_idle_release < Duration::from_millis(1) {
            return bad("lease_idle_release", "must be at least 1ms");
        }
        if self.flush_window < Duration::from_millis(1) {
            return bad("flush_window", "must be at least 1ms");
        }
        if self.flush_bytes == 0 {
            return bad("flush_bytes", "must be greater than 0");
        }
        if self.max_logs_per_object == 0 {
            return bad("max_logs_per_object", "must be at least 1");
        }
        if self.max_index_puts_in_flight_per_log == 0 {
            return bad("max_index_puts_in_flight_per_log", "must be at least 1");
        }
        if self.max_concurrent_uploads == Some(0) {
            return bad("max_concurrent_uploads", "must be at least 1");
        }
        if self.max_entry_bytes == 0 || self.max_entry_bytes > i32::MAX as usize {
            return bad("max_entry_bytes", "must be between 1 and 2147483647 (a varint32)");
        }
        if self.max_in_flight_bytes < self.max_entry_bytes {
            return bad(
                "max_in_flight_bytes",
                "must be at least max_entry_bytes, or a large entry could never be admitted",
            );
        }
        if self.session_timeout < Duration::from_secs(2) || self.session_timeout > Duration::from_secs(300) {
            return bad("session_timeout", "must be between 2s and 5min (Oxia's bounds)");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_match_the_documented_values() {
        let c = WriterConfig::default();
        c.validate().unwrap();
        assert_eq!(c.flush_window, Duration::from_millis(250));
        assert!(c.flush_when_idle);
        assert_eq!(c.flush_bytes, 4 << 20);
        assert_eq!(c.max_logs_per_object, 10_000);
        assert_eq!(c.upload_concurrency(), 16, "64 MiB in flight / 4 MiB objects");
    }

    #[test]
    fn bad_settings_name_the_field() {
        let c = WriterConfig { flush_window: Duration::ZERO, ..Default::default() };
        assert_eq!(c.validate().unwrap_err().field, "flush_window");
        let c = WriterConfig { max_entry_bytes: usize::MAX, ..Default::default() };
        assert_eq!(c.validate().unwrap_err().field, "max_entry_bytes");
    }

    #[test]
    fn parses_human_readable_durations() {
        let c: WriterConfig =
            serde_json::from_str(r#"{"flush_window":"10ms","backpressure":"fail_fast"}"#).unwrap();
        assert_eq!(c.flush_window, Duration::from_millis(10));
        assert_eq!(c.backpressure, Backpressure::FailFast);
        assert!(serde_json::from_str::<WriterConfig>(r#"{"flush_windo":"10ms"}"#).is_err());
    }
}
