//! Prometheus metrics in the text exposition format, kept as plain atomics so recording costs
//! a few relaxed increments on the hot path.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the latency histogram buckets, in seconds.
const BUCKETS: [f64; 14] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// A latency histogram with fixed buckets.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (bound, bucket) in BUCKETS.iter().zip(&self.buckets) {
            if secs <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    fn render(&self, name: &str, help: &str, out: &mut String) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (bound, bucket) in BUCKETS.iter().zip(&self.buckets) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {}", bucket.load(Ordering::Relaxed));
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{name}_sum {}", self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "{name}_count {count}");
    }
}

/// The service's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Entries acknowledged.
    pub appended_entries: AtomicU64,
    /// Payload bytes acknowledged.
    pub appended_bytes: AtomicU64,
    /// Appends that failed (any reason, including unknown outcome).
    pub append_errors: AtomicU64,
    /// Appends answered with an unknown outcome.
    pub append_unknown: AtomicU64,
    /// Time from receiving an append to its acknowledgement.
    pub append_latency: Histogram,
    /// Entries returned by fetches.
    pub fetched_entries: AtomicU64,
    /// Payload bytes returned by fetches.
    pub fetched_bytes: AtomicU64,
    /// Fetch latency (including tail waits).
    pub fetch_latency: Histogram,
    /// Requests answered with a 4xx or 5xx status.
    pub http_errors: AtomicU64,
}

impl Metrics {
    /// Renders every metric; `cache` adds the reader's object-cache counters.
    pub fn render(&self, cache: Option<lakestream_reader::cache::CacheStats>) -> String {
        let mut out = String::new();
        let counter = |out: &mut String, name: &str, help: &str, v: &AtomicU64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        };
        counter(
            &mut out,
            "lakestream_appended_entries_total",
            "Entries acknowledged.",
            &self.appended_entries,
        );
        counter(
            &mut out,
            "lakestream_appended_bytes_total",
            "Payload bytes acknowledged.",
            &self.appended_bytes,
        );
        counter(&mut out, "lakestream_append_errors_total", "Appends not acknowledged.", &self.append_errors);
        counter(
            &mut out,
            "lakestream_append_unknown_total",
            "Appends with an unknown outcome.",
            &self.append_unknown,
        );
        self.append_latency.render(
            "lakestream_append_latency_seconds",
            "Append acknowledgement latency.",
            &mut out,
        );
        counter(
            &mut out,
            "lakestream_fetched_entries_total",
            "Entries returned by fetches.",
            &self.fetched_entries,
        );
        counter(
            &mut out,
            "lakestream_fetched_bytes_total",
            "Payload bytes returned by fetches.",
            &self.fetched_bytes,
        );
        self.fetch_latency.render("lakestream_fetch_latency_seconds", "Fetch latency.", &mut out);
        counter(
            &mut out,
            "lakestream_http_errors_total",
            "Requests answered with an error status.",
            &self.http_errors,
        );
        if let Some(c) = cache {
            let _ = writeln!(
                out,
                "# HELP lakestream_object_cache_hits_total Object cache hits.\n# TYPE lakestream_object_cache_hits_total counter\nlakestream_object_cache_hits_total {}\n# HELP lakestream_object_cache_misses_total Object cache misses.\n# TYPE lakestream_object_cache_misses_total counter\nlakestream_object_cache_misses_total {}\n# HELP lakestream_object_cache_bytes Bytes held by the object cache.\n# TYPE lakestream_object_cache_bytes gauge\nlakestream_object_cache_bytes {}",
                c.hits, c.misses, c.bytes
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::default();
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(60));
        let mut out = String::new();
        h.render("x", "x", &mut out);
        assert!(out.contains("x_bucket{le=\"0.005\"} 1"));
        assert!(out.contains("x_bucket{le=\"30\"} 1"));
        assert!(out.contains("x_bucket{le=\"+Inf\"} 2"));
        assert!(out.contains("x_count 2"));
    }
}
