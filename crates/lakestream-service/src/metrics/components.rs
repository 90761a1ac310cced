//! The metrics of components that keep counters of their own, with no metrics library (the
//! writer's WAL flushes, the reader's object cache, the Oxia client's requests): each is a
//! collector that reads the component's snapshot when `/metrics` is scraped.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// A snapshot read at each scrape, and how to encode it.
struct Scraped<T> {
    read: Box<dyn Fn() -> T + Send + Sync>,
    encode: fn(&T, &mut DescriptorEncoder<'_>) -> fmt::Result,
}

impl<T> fmt::Debug for Scraped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scraped").field("of", &std::any::type_name::<T>()).finish_non_exhaustive()
    }
}

impl<T: 'static> Collector for Scraped<T> {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        (self.encode)(&(self.read)(), &mut encoder)
    }
}

fn register<T: 'static>(
    registry: &mut Registry,
    read: impl Fn() -> T + Send + Sync + 'static,
    encode: fn(&T, &mut DescriptorEncoder<'_>) -> fmt::Result,
) {
    registry.register_collector(Box::new(Scraped { read: Box::new(read), encode }));
}

/// Starts a family: `help` without its final period, as for the registry's own families.
fn describe<'s>(
    encoder: &'s mut DescriptorEncoder<'_>,
    name: &'s str,
    help: &str,
    kind: MetricType,
) -> Result<MetricEncoder<'s>, fmt::Error> {
    encoder.encode_descriptor(name, &format!("{help}."), None, kind)
}

fn counter(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: u64) -> fmt::Result {
    ConstCounter::new(value).encode(describe(encoder, name, help, MetricType::Counter)?)
}

/// A histogram read from a library's cumulative counts (integer bounds).
fn histogram(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    h: &lakestream_writer::HistogramSnapshot,
) -> fmt::Result {
    // The encoder takes each bucket's own count and accumulates them.
    let mut below = 0;
    let buckets: Vec<(f64, u64)> = h
        .bounds
        .iter()
        .zip(&h.cumulative)
        .map(|(bound, cumulative)| {
            let own = cumulative.saturating_sub(below);
            below = *cumulative;
            (*bound as f64, own)
        })
        .collect();
    describe(encoder, name, help, MetricType::Histogram)?.encode_histogram::<NoLabelSet>(
        h.sum as f64,
        h.count,
        &buckets,
        None,
    )
}

/// Registers the writer role's WAL flush counters, read with `read`
/// ([`lakestream_writer::Writer::stats`]): the rate of `lakestream_wal_objects_written_total`
/// is the WAL's PUTs per second.
pub(crate) fn register_writer(
    registry: &mut Registry,
    read: impl Fn() -> lakestream_writer::WriterStats + Send + Sync + 'static,
) {
    register(registry, read, |stats, encoder| {
        counter(encoder, "lakestream_wal_objects_written", "WAL objects written", stats.objects_written)?;
        counter(
            encoder,
            "lakestream_wal_object_write_failures",
            "WAL objects that could not be built or written (their entries failed)",
            stats.object_write_failures,
        )?;
        histogram(
            encoder,
            "lakestream_wal_object_size_bytes",
            "Sizes of the WAL objects written",
            &stats.object_bytes,
        )?;
        histogram(
            encoder,
            "lakestream_wal_object_logs",
            "Log sections per WAL object written",
            &stats.logs_per_object,
        )?;
        let mut family = describe(
            encoder,
            "lakestream_wal_index_puts",
            "Index puts (one per log section of a WAL object), by outcome",
            MetricType::Counter,
        )?;
        for (outcome, value) in [
            ("committed", stats.index_puts),
            ("failed", stats.index_put_failures),
            ("unknown", stats.index_put_unknown),
        ] {
            ConstCounter::new(value).encode(family.encode_family(&[("outcome", outcome)])?)?;
        }
        Ok(())
    });
}

/// Registers the Oxia client's requests by kind (`write`, `read`, `list`, `scan`, `session`)
/// and their failures, read with `read` ([`lakestream_meta_oxia::OxiaClient::stats`]).
pub(crate) fn register_oxia(
    registry: &mut Registry,
    read: impl Fn() -> lakestream_meta_oxia::OxiaStats + Send + Sync + 'static,
) {
    register(registry, read, |stats, encoder| {
        for (name, help, errors) in [
            ("lakestream_oxia_requests", "Requests to Oxia, by kind", false),
            ("lakestream_oxia_request_errors", "Requests to Oxia that failed, by kind", true),
        ] {
            let mut family = describe(encoder, name, help, MetricType::Counter)?;
            for (kind, counts) in stats.by_kind() {
                let value = if errors { counts.errors } else { counts.requests };
                ConstCounter::new(value).encode(family.encode_family(&[("kind", kind.name())])?)?;
            }
        }
        Ok(())
    });
}

/// Registers the reader role's object-cache counters, read with `read`
/// ([`lakestream_reader::Reader::cache_stats`]).
pub(crate) fn register_cache(
    registry: &mut Registry,
    read: impl Fn() -> lakestream_reader::cache::CacheStats + Send + Sync + 'static,
) {
    register(registry, read, |stats, encoder| {
        counter(encoder, "lakestream_object_cache_hits", "Object cache hits", stats.hits)?;
        counter(encoder, "lakestream_object_cache_misses", "Object cache misses", stats.misses)?;
        ConstGauge::new(stats.bytes as u64).encode(describe(
            encoder,
            "lakestream_object_cache_bytes",
            "Bytes held by the object cache",
            MetricType::Gauge,
        )?)
    });
}
