//! A log-linear latency histogram: exact below 64 ns, then 64 buckets per power of two, so
//! every recorded value is kept within 1/64 (1.6 %) of its true value in constant memory,
//! whatever the run length. Percentiles use the nearest-rank definition.

use std::time::Duration;

use serde::Serialize;

/// Bits of sub-bucket precision per power of two.
const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;

/// Latencies in nanoseconds, bucketed.
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    counts: Vec<u64>,
    count: u64,
    sum_ns: u128,
    max_ns: u64,
}

/// The bucket of a value.
fn bucket(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // >= SUB_BITS
    let shift = exp - SUB_BITS;
    let sub = (v >> shift) - SUB;
    (SUB + u64::from(shift) * SUB + sub) as usize
}

/// The highest value that falls in bucket `i`.
fn bucket_high(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let shift = (i - SUB) / SUB;
    let sub = (i - SUB) % SUB;
    let low = (SUB + sub) << shift;
    low.saturating_add((1u64 << shift) - 1)
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Histogram {
        Histogram::default()
    }

    /// Records one latency.
    pub fn record(&mut self, latency: Duration) {
        self.record_ns(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Records one latency given in nanoseconds.
    pub fn record_ns(&mut self, ns: u64) {
        let b = bucket(ns);
        if self.counts.len() <= b {
            self.counts.resize(b + 1, 0);
        }
        self.counts[b] += 1;
        self.count += 1;
        self.sum_ns += u128::from(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.count += other.count;
        self.sum_ns += other.sum_ns;
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The largest value recorded (exact); zero when empty.
    pub fn max(&self) -> Duration {
        Duration::from_nanos(self.max_ns)
    }

    /// The mean (exact); zero when empty.
    pub fn mean(&self) -> Duration {
        if self.count == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(u64::try_from(self.sum_ns / u128::from(self.count)).unwrap_or(u64::MAX))
    }

    /// The nearest-rank percentile `q` in `[0, 1]` (0.99 is p99): the smallest recorded value
    /// such that at least `q` of all values are at or below it, to bucket precision and never
    /// above the recorded maximum. Zero when empty; `q` outside `[0, 1]` is clamped.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.count == 0 {
            return Duration::ZERO;
        }
        let q = if q.is_nan() { 0.0 } else { q.clamp(0.0, 1.0) };
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0u64;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Duration::from_nanos(bucket_high(i).min(self.max_ns));
            }
        }
        self.max()
    }

    /// The usual summary.
    pub fn summary(&self) -> LatencySummary {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        LatencySummary {
            count: self.count,
            mean_ms: ms(self.mean()),
            p50_ms: ms(self.quantile(0.50)),
            p90_ms: ms(self.quantile(0.90)),
            p99_ms: ms(self.quantile(0.99)),
            p999_ms: ms(self.quantile(0.999)),
            max_ms: ms(self.max()),
        }
    }

    /// Points `(quantile, ms)` of the latency distribution from p0 to p99.9 and the maximum,
    /// denser towards the tail, for plotting.
    pub fn curve(&self) -> Vec<(f64, f64)> {
        if self.count == 0 {
            return Vec::new();
        }
        // Evenly spaced in "nines" (-log10(1 - q)) from q = 0 to q = 0.999.
        let mut points: Vec<(f64, f64)> = (0..=60)
            .map(|i| {
                let nines = f64::from(i) * 0.05;
                let q = 1.0 - 10f64.powf(-nines);
                (q, self.quantile(q).as_secs_f64() * 1e3)
            })
            .collect();
        points.push((1.0, self.max().as_secs_f64() * 1e3));
        points
    }
}

/// Percentiles of one latency distribution, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct LatencySummary {
    /// How many values.
    pub count: u64,
    /// The mean.
    pub mean_ms: f64,
    /// p50.
    pub p50_ms: f64,
    /// p90.
    pub p90_ms: f64,
    /// p99.
    pub p99_ms: f64,
    /// p99.9.
    pub p999_ms: f64,
    /// The maximum.
    pub max_ms: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_values_in_order_with_bounded_error() {
        let mut last = 0;
        for v in (0..5000u64).chain([1 << 20, (1 << 20) + 12345, u64::MAX / 3, u64::MAX]) {
            let b = bucket(v);
            assert!(b >= last, "bucket order at {v}");
            last = b;
            let high = bucket_high(b);
            assert!(high >= v, "{v} above its bucket's high {high}");
            // Within 1/64 of the value.
            assert!((high - v) as f64 <= v as f64 / 64.0 + 1.0, "{v} -> {high}");
        }
        assert_eq!(bucket_high(bucket(63)), 63);
        assert_eq!(bucket_high(bucket(64)), 64);
    }

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut h = Histogram::new();
        // 1..=1000 µs: p50 = 500 µs, p90 = 900 µs, p99 = 990 µs, p99.9 = 999 µs.
        for us in 1..=1000u64 {
            h.record(Duration::from_micros(us));
        }
        let s = h.summary();
        assert_eq!(s.count, 1000);
        let close = |got: f64, want: f64| (got - want).abs() <= want / 64.0 + 1e-9;
        assert!(close(s.p50_ms, 0.500), "{s:?}");
        assert!(close(s.p90_ms, 0.900), "{s:?}");
        assert!(close(s.p99_ms, 0.990), "{s:?}");
        assert!(close(s.p999_ms, 0.999), "{s:?}");
        assert_eq!(s.max_ms, 1.0);
        assert!(close(s.mean_ms, 0.5005), "{s:?}");
        assert!(
            s.p50_ms <= s.p90_ms && s.p90_ms <= s.p99_ms && s.p99_ms <= s.p999_ms && s.p999_ms <= s.max_ms
        );
    }

    #[test]
    fn a_single_outlier_is_the_max_and_not_the_p99() {
        let mut h = Histogram::new();
        for _ in 0..999 {
            h.record(Duration::from_millis(1));
        }
        h.record(Duration::from_secs(2));
        assert!(h.quantile(0.99) <= Duration::from_micros(1016));
        assert_eq!(h.quantile(0.9995), Duration::from_secs(2));
        assert_eq!(h.max(), Duration::from_secs(2));
        assert_eq!(h.quantile(1.0), Duration::from_secs(2));
    }

    #[test]
    fn empty_and_out_of_range_quantiles_do_not_panic() {
        let h = Histogram::new();
        assert_eq!(h.quantile(0.5), Duration::ZERO);
        assert_eq!(h.summary().count, 0);
        assert!(h.curve().is_empty());
        let mut h = Histogram::new();
        h.record(Duration::from_nanos(7));
        assert_eq!(h.quantile(-1.0), Duration::from_nanos(7));
        assert_eq!(h.quantile(f64::NAN), Duration::from_nanos(7));
        assert_eq!(h.quantile(5.0), Duration::from_nanos(7));
        h.record(Duration::MAX);
        assert_eq!(h.max(), Duration::from_nanos(u64::MAX));
    }

    #[test]
    fn merge_equals_recording_into_one() {
        let (mut a, mut b, mut all) = (Histogram::new(), Histogram::new(), Histogram::new());
        for i in 0..500u64 {
            let d = Duration::from_micros(i * 37 % 9000);
            if i % 3 == 0 {
                a.record(d)
            } else {
                b.record(d)
            }
            all.record(d);
        }
        a.merge(&b);
        assert_eq!(a.summary(), all.summary());
        let curve = a.curve();
        assert!(curve.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1), "{curve:?}");
    }
}
