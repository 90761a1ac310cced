//! The metric types the service records into, over `prometheus-client`'s, and the helpers that
//! create one and register it in the same step.

use std::fmt;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric, counter, gauge};
use prometheus_client::registry::Registry;

/// Upper bounds of the latency histograms' buckets, in seconds.
const LATENCY_BUCKETS: [f64; 14] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// A counter. It is recorded through its atomic (`fetch_add`), as the recording sites always
/// have: one relaxed increment on the hot path.
#[derive(Debug, Clone, Default)]
pub struct Counter(counter::Counter<u64, AtomicU64>);

impl std::ops::Deref for Counter {
    type Target = AtomicU64;

    fn deref(&self) -> &AtomicU64 {
        self.0.inner()
    }
}

impl TypedMetric for Counter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for Counter {
    fn encode(&self, encoder: MetricEncoder) -> fmt::Result {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// A gauge of a count, which goes up and down. It is recorded through its atomic (`store`,
/// `fetch_add`, `fetch_sub`).
#[derive(Debug, Clone, Default)]
pub struct Gauge(gauge::Gauge<u64, AtomicU64>);

impl std::ops::Deref for Gauge {
    type Target = AtomicU64;

    fn deref(&self) -> &AtomicU64 {
        self.0.inner()
    }
}

impl TypedMetric for Gauge {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for Gauge {
    fn encode(&self, encoder: MetricEncoder) -> fmt::Result {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// A new latency histogram (seconds, 1 ms to 30 s).
pub(crate) fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// A new counter, registered as `name` (without `_total`, which the encoder appends) with
/// `help` (without its final period, which the registry appends).
pub(crate) fn counter(registry: &mut Registry, name: &str, help: &str) -> Counter {
    let counter = Counter::default();
    registry.register(name, help, counter.clone());
    counter
}

/// A new gauge, registered as `name` with `help` (see [`counter`]).
pub(crate) fn gauge(registry: &mut Registry, name: &str, help: &str) -> Gauge {
    let gauge = Gauge::default();
    registry.register(name, help, gauge.clone());
    gauge
}

/// A new latency histogram, registered as `name` with `help` (see [`counter`]).
pub(crate) fn histogram(registry: &mut Registry, name: &str, help: &str) -> Histogram {
    let histogram = latency_histogram();
    registry.register(name, help, histogram.clone());
    histogram
}

/// A family (`prometheus_client::metrics::family::Family`) that announces itself (`# HELP`,
/// `# TYPE`) before its first series too, as `/metrics` always has: what a scrape lists does
/// not depend on the traffic seen so far.
#[derive(Debug)]
pub(crate) struct Announced<F>(pub(crate) F);

impl<F: EncodeMetric> EncodeMetric for Announced<F> {
    fn encode(&self, encoder: MetricEncoder) -> fmt::Result {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }
}

/// A family whose label sets are all known when it is made (a root and an operation, a
/// listener): every series is exposed from the start, and recording goes to a metric the
/// recorder holds, with no lookup by labels.
#[derive(Debug)]
pub(crate) struct FixedFamily<L, M> {
    series: Vec<(L, M)>,
}

impl<L, M> FixedFamily<L, M> {
    /// The family of these series, in this order.
    pub(crate) fn new(series: impl IntoIterator<Item = (L, M)>) -> Self {
        FixedFamily { series: series.into_iter().collect() }
    }
}

impl<L: EncodeLabelSet, M: EncodeMetric + TypedMetric> EncodeMetric for FixedFamily<L, M> {
    fn encode(&self, mut encoder: MetricEncoder) -> fmt::Result {
        for (labels, metric) in &self.series {
            metric.encode(encoder.encode_family(labels)?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        M::TYPE
    }
}
