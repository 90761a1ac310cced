//! Prometheus metrics through `prometheus-client`, the Prometheus project's Rust client. Each
//! family is registered beside the code that records it (the operations' here, the front
//! ends' in `requests`, the compactor role's in `background::compaction`, the tables' in
//! `background::tables`, consumer groups' lag in `groups`, object-store operations in
//! `objects`, the writer's, reader cache's and Oxia client's in `components`), into the one
//! registry that `Metrics::of` builds when the service starts; `/metrics` encodes it in the
//! Prometheus text format (version 0.0.4).
//!
//! Recording is a relaxed atomic increment on the hot path (a histogram observation takes a
//! short lock). Two rules of the registry shape every registration: a counter is registered
//! without its `_total` suffix, which the encoder appends, and a help without its final
//! period, which the registry appends.

mod components;
mod kinds;
mod requests;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

pub use crate::background::compaction::CompactionMetrics;
pub use crate::background::tables::TableMetrics;
pub use crate::groups::GroupLagMetrics;
pub(crate) use components::{register_cache, register_oxia, register_writer};
pub(crate) use kinds::{Announced, FixedFamily, counter, gauge, histogram};
pub use kinds::{Counter, Gauge};
pub use requests::{ConnectionStats, GRPC_METHODS, GrpcRequestMetrics, HttpRequestMetrics, UNMATCHED_ROUTE};

/// The service's metrics, and the registry `/metrics` encodes.
#[derive(Debug)]
pub struct Metrics {
    /// Entries acknowledged.
    pub appended_entries: Counter,
    /// Payload bytes acknowledged.
    pub appended_bytes: Counter,
    /// Appends that failed (any reason, including unknown outcome).
    pub append_errors: Counter,
    /// Appends answered with an unknown outcome.
    pub append_unknown: Counter,
    /// Idempotent producers' retries answered from their state, appending nothing.
    pub producer_duplicates: Counter,
    /// Time from receiving an append to its acknowledgement.
    pub append_latency: Histogram,
    /// Entries returned by fetches.
    pub fetched_entries: Counter,
    /// Payload bytes returned by fetches.
    pub fetched_bytes: Counter,
    /// Fetch latency (including tail waits).
    pub fetch_latency: Histogram,
    /// Requests answered with a 4xx or 5xx status.
    pub http_errors: Counter,
    /// Requests refused by a client's rate limit (both APIs).
    pub rate_limited: Counter,
    /// HTTP requests by route, method and status class, and their latency.
    pub http_requests: HttpRequestMetrics,
    /// gRPC calls by method and status code, and their latency.
    pub grpc_requests: GrpcRequestMetrics,
    /// gRPC calls answered with a status other than OK.
    pub grpc_errors: Counter,
    /// CloudEvents appended by ingest (not counting duplicates).
    pub events_ingested: Counter,
    /// CloudEvents answered as duplicates of earlier ones.
    pub events_duplicate: Counter,
    /// Ingest requests answered `in_flight` (HTTP 409).
    pub events_in_flight: Counter,
    /// The compactor role's progress and each log's backlog.
    pub compaction: CompactionMetrics,
    /// Streams as Iceberg tables: commits, rows, failures, lag.
    pub tables: TableMetrics,
    /// Consumer groups' lag per partition.
    pub group_lag: GroupLagMetrics,
    /// The HTTP listener's connections.
    pub http_connections: Arc<ConnectionStats>,
    /// The gRPC listener's connections.
    pub grpc_connections: Arc<ConnectionStats>,
    /// The outcome of the last readiness check: 1 ready, 0 not (or draining).
    pub ready: Gauge,
    /// Readiness checks that failed (a store did not answer, or the service is draining).
    pub readiness_failures: Counter,
    /// Soft trims made by retention.
    pub retention_trims: Counter,
    /// Retention attempts that failed (retried next pass).
    pub retention_failures: Counter,
    /// Hard trims made by the compactor role behind trim markers.
    pub hard_trims: Counter,
    /// Idempotent producers' state records deleted after `[producers] idle_expiry`.
    pub producer_states_expired: Counter,
    /// Producer-expiry sweeps of a partition that failed (retried next sweep).
    pub producer_expiry_failures: Counter,
    /// Every family above, and those of the components registered at the start.
    registry: Registry,
}

impl Default for Metrics {
    /// The operations' metrics alone, with no component's.
    fn default() -> Self {
        Metrics::with(|_| {})
    }
}

impl Metrics {
    /// The metrics of a service over `stack`: the operations', and those of the stack's
    /// components (the object stores; the writer, the reader's object cache and the Oxia
    /// client when the process has them).
    pub(crate) fn of(stack: &crate::stack::Stack) -> Metrics {
        Metrics::with(|registry| {
            stack.object_ops.register(registry);
            if let Some(writer) = stack.writer.clone() {
                register_writer(registry, move || writer.stats());
            }
            if let Some(reader) = stack.reader.clone() {
                register_cache(registry, move || reader.cache_stats());
            }
            if let Some(oxia) = stack.oxia.clone() {
                register_oxia(registry, move || oxia.stats());
            }
        })
    }

    /// The operations' metrics, and whatever `components` registers besides.
    pub(crate) fn with(components: impl FnOnce(&mut Registry)) -> Metrics {
        let r = &mut Registry::default();
        let (http_connections, grpc_connections) = (Arc::default(), Arc::default());
        ConnectionStats::register_listeners(r, &http_connections, &grpc_connections);
        Metrics {
            appended_entries: counter(r, "lakestream_appended_entries", "Entries acknowledged"),
            appended_bytes: counter(r, "lakestream_appended_bytes", "Payload bytes acknowledged"),
            append_errors: counter(r, "lakestream_append_errors", "Appends not acknowledged"),
            append_unknown: counter(r, "lakestream_append_unknown", "Appends with an unknown outcome"),
            producer_duplicates: counter(
                r,
                "lakestream_producer_duplicates",
                "Idempotent producer retries answered with their original offsets, appending nothing",
            ),
            append_latency: histogram(
                r,
                "lakestream_append_latency_seconds",
                "Append acknowledgement latency",
            ),
            fetched_entries: counter(r, "lakestream_fetched_entries", "Entries returned by fetches"),
            fetched_bytes: counter(r, "lakestream_fetched_bytes", "Payload bytes returned by fetches"),
            fetch_latency: histogram(r, "lakestream_fetch_latency_seconds", "Fetch latency"),
            retention_trims: counter(r, "lakestream_retention_trims", "Soft trims made by retention"),
            retention_failures: counter(
                r,
                "lakestream_retention_failures",
                "Retention attempts that failed (retried next pass)",
            ),
            producer_states_expired: counter(
                r,
                "lakestream_producer_states_expired",
                "Idempotent producers' state records deleted after [producers] idle_expiry",
            ),
            producer_expiry_failures: counter(
                r,
                "lakestream_producer_expiry_failures",
                "Producer-expiry sweeps of a partition that failed (retried next sweep)",
            ),
            hard_trims: counter(
                r,
                "lakestream_hard_trims",
                "Hard trims made by the compactor role behind trim markers",
            ),
            rate_limited: counter(r, "lakestream_rate_limited", "Requests refused by a client's rate limit"),
            http_errors: counter(r, "lakestream_http_errors", "Requests answered with an error status"),
            http_requests: HttpRequestMetrics::registered(r),
            grpc_requests: GrpcRequestMetrics::registered(r),
            grpc_errors: counter(
                r,
                "lakestream_grpc_errors",
                "gRPC calls answered with a status other than OK",
            ),
            events_ingested: counter(r, "lakestream_events_ingested", "CloudEvents appended by ingest"),
            events_duplicate: counter(r, "lakestream_events_duplicate", "CloudEvents answered as duplicates"),
            events_in_flight: counter(
                r,
                "lakestream_events_in_flight",
                "CloudEvents ingest requests answered in_flight",
            ),
            compaction: CompactionMetrics::registered(r),
            tables: TableMetrics::registered(r),
            group_lag: GroupLagMetrics::registered(r),
            ready: gauge(
                r,
                "lakestream_ready",
                "Outcome of the last readiness check (1 ready, 0 not ready or draining)",
            ),
            readiness_failures: counter(
                r,
                "lakestream_readiness_failures",
                "Readiness checks that failed (a store did not answer, or draining)",
            ),
            http_connections,
            grpc_connections,
            registry: {
                components(r);
                std::mem::take(r)
            },
        }
    }

    /// Records one appended entry of `len` payload bytes whose append started at `started`:
    /// acknowledged (count, bytes, latency), or failed (errors; unknown outcomes apart).
    pub fn record_append(
        &self,
        result: &Result<lakestream_writer::AppendAck, lakestream_writer::AppendError>,
        len: usize,
        started: std::time::Instant,
    ) {
        use std::sync::atomic::Ordering::Relaxed;
        match result {
            Ok(_) => {
                self.appended_entries.fetch_add(1, Relaxed);
                self.appended_bytes.fetch_add(len as u64, Relaxed);
                self.append_latency.observe(started.elapsed().as_secs_f64());
            }
            Err(e) => {
                self.append_errors.fetch_add(1, Relaxed);
                if e.class() == lakestream_format::ErrorClass::OutcomeUnknown {
                    self.append_unknown.fetch_add(1, Relaxed);
                }
            }
        }
    }

    /// Records one fetch that started at `started` and read `batch`.
    pub fn record_fetch(&self, batch: &lakestream_reader::ReadBatch, started: std::time::Instant) {
        use std::sync::atomic::Ordering::Relaxed;
        self.fetch_latency.observe(started.elapsed().as_secs_f64());
        self.fetched_entries.fetch_add(batch.entries.len() as u64, Relaxed);
        let bytes: usize = batch.entries.iter().map(|e| e.payload.len()).sum();
        self.fetched_bytes.fetch_add(bytes as u64, Relaxed);
    }

    /// Every metric registered, in the Prometheus text format (version 0.0.4).
    pub fn render(&self) -> String {
        encode(&self.registry)
    }
}

/// `registry` in the Prometheus text format (version 0.0.4).
pub(crate) fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    // Writing to a String cannot fail, and no metric of ours fails to encode: an error would
    // be a bug, logged; the page is served as far as it got.
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut text, registry) {
        tracing::error!(error = %e, "the metrics could not be encoded");
    }
    text
}
