//! Counters of the writer's WAL flushes and index puts, for a service's metrics. Plain
//! atomics, updated once per object and once per index put; [`crate::Writer::stats`] reads a
//! snapshot. No metrics library: the service renders the snapshot as it likes.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds (inclusive) of the logs-per-object buckets.
pub const LOGS_PER_OBJECT_BUCKETS: [u64; 12] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096, 10_000];

/// Upper bounds (inclusive) of the object-size buckets, in bytes: 4 KiB to 64 MiB.
pub const OBJECT_BYTES_BUCKETS: [u64; 10] =
    [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 64 << 20];

/// A histogram read at one moment: per bound, how many observations were at most it
/// (cumulative, as Prometheus buckets are), and the count and sum of all observations.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HistogramSnapshot {
    /// The buckets' upper bounds, inclusive, ascending.
    pub bounds: &'static [u64],
    /// Per bound, the observations at most it.
    pub cumulative: Vec<u64>,
    /// Every observation.
    pub count: u64,
    /// The sum of every observation.
    pub sum: u64,
}

/// What a writer has done since it started.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WriterStats {
    /// WAL objects written (PUTs that succeeded).
    pub objects_written: u64,
    /// WAL objects that could not be built or written (their entries failed, unindexed).
    pub object_write_failures: u64,
    /// Sizes of the WAL objects written, in bytes (the sum is every byte written).
    pub object_bytes: HistogramSnapshot,
    /// Log sections per WAL object written.
    pub logs_per_object: HistogramSnapshot,
    /// Index puts (one per log section) that committed.
    pub index_puts: u64,
    /// Index puts that failed (nothing was published).
    pub index_put_failures: u64,
    /// Index puts whose outcome is unknown (the entries were answered `OutcomeUnknown`).
    pub index_put_unknown: u64,
}

#[derive(Debug)]
struct Histogram<const N: usize> {
    bounds: &'static [u64; N],
    buckets: [AtomicU64; N],
    count: AtomicU64,
    sum: AtomicU64,
}

impl<const N: usize> Histogram<N> {
    fn new(bounds: &'static [u64; N]) -> Self {
        Histogram {
            bounds,
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum: AtomicU64::new(0),
        }
    }

    fn observe(&self, value: u64) {
        // One bucket per observation; the snapshot accumulates.
        if let Some(i) = self.bounds.iter().position(|b| value <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    fn snapshot(&self) -> HistogramSnapshot {
        let mut running = 0;
        let cumulative = self
            .buckets
            .iter()
            .map(|b| {
                running += b.load(Ordering::Relaxed);
                running
            })
            .collect();
        HistogramSnapshot {
            bounds: self.bounds,
            cumulative,
            count: self.count.load(Ordering::Relaxed),
            sum: self.sum.load(Ordering::Relaxed),
        }
    }
}

/// The live counters behind [`WriterStats`].
#[derive(Debug)]
pub(crate) struct Counters {
    objects_written: AtomicU64,
    object_write_failures: AtomicU64,
    object_bytes: Histogram<{ OBJECT_BYTES_BUCKETS.len() }>,
    logs_per_object: Histogram<{ LOGS_PER_OBJECT_BUCKETS.len() }>,
    index_puts: AtomicU64,
    index_put_failures: AtomicU64,
    index_put_unknown: AtomicU64,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            objects_written: AtomicU64::new(0),
            object_write_failures: AtomicU64::new(0),
            object_bytes: Histogram::new(&OBJECT_BYTES_BUCKETS),
            logs_per_object: Histogram::new(&LOGS_PER_OBJECT_BUCKETS),
            index_puts: AtomicU64::new(0),
            index_put_failures: AtomicU64::new(0),
            index_put_unknown: AtomicU64::new(0),
        }
    }
}

/// How an index put ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PutOutcome {
    Committed,
    Failed,
    Unknown,
}

impl Counters {
    pub(crate) fn object_written(&self, bytes: usize, logs: usize) {
        self.objects_written.fetch_add(1, Ordering::Relaxed);
        self.object_bytes.observe(bytes as u64);
        self.logs_per_object.observe(logs as u64);
    }

    pub(crate) fn object_failed(&self) {
        self.object_write_failures.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn index_put(&self, outcome: PutOutcome) {
        let counter = match outcome {
            PutOutcome::Committed => &self.index_puts,
            PutOutcome::Failed => &self.index_put_failures,
            PutOutcome::Unknown => &self.index_put_unknown,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> WriterStats {
        WriterStats {
            objects_written: self.objects_written.load(Ordering::Relaxed),
            object_write_failures: self.object_write_failures.load(Ordering::Relaxed),
            object_bytes: self.object_bytes.snapshot(),
            logs_per_object: self.logs_per_object.snapshot(),
            index_puts: self.index_puts.load(Ordering::Relaxed),
            index_put_failures: self.index_put_failures.load(Ordering::Relaxed),
            index_put_unknown: self.index_put_unknown.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_count_values_over_the_last_bound() {
        let c = Counters::default();
        c.object_written(100, 1);
        c.object_written(5 << 20, 3);
        c.object_written(100 << 20, 20_000);
        let s = c.snapshot();
        assert_eq!(s.objects_written, 3);
        assert_eq!(s.object_bytes.count, 3);
        assert_eq!(s.object_bytes.sum, 100 + (5 << 20) + (100 << 20));
        assert_eq!(s.object_bytes.cumulative, [1, 1, 1, 1, 1, 1, 1, 2, 2, 2]);
        assert_eq!(s.logs_per_object.cumulative, [1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]);
        assert_eq!(s.logs_per_object.sum, 20_004);
        c.index_put(PutOutcome::Committed);
        c.index_put(PutOutcome::Unknown);
        c.object_failed();
        let s = c.snapshot();
        assert_eq!((s.index_puts, s.index_put_failures, s.index_put_unknown), (1, 0, 1));
        assert_eq!(s.object_write_failures, 1);
    }
}
