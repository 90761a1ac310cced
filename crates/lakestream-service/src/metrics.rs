//! Prometheus metrics in the text exposition format, kept as plain atomics so recording costs
//! a few relaxed increments on the hot path.

use std::fmt::Write as _;
use std::sync::Arc;
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
        self.render_series(name, "", out);
    }

    /// The samples of one series of a labelled histogram; `labels` is `a="x",b="y"` (already
    /// escaped) or empty.
    fn render_series(&self, name: &str, labels: &str, out: &mut String) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (bound, bucket) in BUCKETS.iter().zip(&self.buckets) {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {}",
                bucket.load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let braced = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        let _ = writeln!(out, "{name}_sum{braced} {}", self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "{name}_count{braced} {count}");
    }
}

/// The route label of a request no route matched (a 404 from the fallback): one value for
/// every unknown path, so that probing paths cannot grow the label set.
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// The HTTP methods counted by name; any other method is counted as `other`.
const HTTP_METHODS: [&str; 7] = ["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH", "OPTIONS"];

/// The status classes, indexed by the status's first digit minus one.
const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The bounded label value of an HTTP method.
fn method_label(method: &http::Method) -> &'static str {
    HTTP_METHODS.iter().find(|m| **m == method.as_str()).copied().unwrap_or("other")
}

/// One route and method's requests: a count per status class and the latency.
#[derive(Debug, Default)]
struct HttpSeries {
    by_class: [AtomicU64; STATUS_CLASSES.len()],
    duration: Histogram,
}

/// HTTP requests by route template (the router's pattern, never the raw path), method and
/// status class. The label set is bounded by the routes the router has.
#[derive(Debug, Default)]
pub struct HttpRequestMetrics {
    series: std::sync::Mutex<std::collections::BTreeMap<(String, &'static str), Arc<HttpSeries>>>,
}

impl HttpRequestMetrics {
    /// Records a request answered with `status` after `elapsed`. `route` is the matched
    /// route's pattern, or `None` when no route matched.
    pub fn observe(
        &self,
        route: Option<&str>,
        method: &http::Method,
        status: http::StatusCode,
        elapsed: Duration,
    ) {
        let key = (route.unwrap_or(UNMATCHED_ROUTE).to_owned(), method_label(method));
        let series = self.series.lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_default().clone();
        let class = usize::from(status.as_u16() / 100).clamp(1, 5) - 1;
        series.by_class[class].fetch_add(1, Ordering::Relaxed);
        series.duration.observe(elapsed);
    }

    fn render(&self, out: &mut String) {
        let series = self.series.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let name = "lakestream_http_requests_total";
        let _ = writeln!(
            out,
            "# HELP {name} HTTP requests answered, by route template, method and status class.\n# TYPE {name} counter"
        );
        for ((route, method), s) in &series {
            for (class, count) in STATUS_CLASSES.iter().zip(&s.by_class) {
                let count = count.load(Ordering::Relaxed);
                if count > 0 {
                    let _ = writeln!(
                        out,
                        "{name}{{route=\"{}\",method=\"{method}\",status=\"{class}\"}} {count}",
                        LabelValue(route)
                    );
                }
            }
        }
        let name = "lakestream_http_request_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time to answer an HTTP request (to the response head), by route template and method.\n# TYPE {name} histogram"
        );
        for ((route, method), s) in &series {
            s.duration.render_series(
                name,
                &format!("route=\"{}\",method=\"{method}\"", LabelValue(route)),
                out,
            );
        }
    }
}

/// The methods of `lakestream.v1.Lakestream`; a call to any other path is counted as
/// `unknown`.
pub const GRPC_METHODS: [&str; 12] = [
    "CreateNamespace",
    "ListNamespaces",
    "CreateStream",
    "GetStream",
    "ListStreams",
    "DropStream",
    "AddPartitions",
    "Produce",
    "Fetch",
    "GetOffsets",
    "Trim",
    "ProduceCloudEvents",
];

/// The gRPC status codes' names, indexed by their numbers.
const GRPC_CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// One gRPC method's calls: a count per status code and the latency.
#[derive(Debug, Default)]
struct GrpcSeries {
    by_code: [AtomicU64; GRPC_CODES.len()],
    duration: Histogram,
}

/// gRPC calls by method and status code: at most 13 methods times 17 codes.
#[derive(Debug, Default)]
pub struct GrpcRequestMetrics {
    series: std::sync::Mutex<std::collections::BTreeMap<&'static str, Arc<GrpcSeries>>>,
}

impl GrpcRequestMetrics {
    /// The method label of a call to `path` (`/lakestream.v1.Lakestream/Produce`): the
    /// method's name when it is one of ours, else `unknown`.
    pub fn method_of(path: &str) -> &'static str {
        path.strip_prefix("/lakestream.v1.Lakestream/")
            .and_then(|m| GRPC_METHODS.iter().find(|k| **k == m))
            .copied()
            .unwrap_or("unknown")
    }

    /// Records a call to `method` (see [`GrpcRequestMetrics::method_of`]) answered with `code`
    /// after `elapsed`.
    pub fn observe(&self, method: &'static str, code: tonic::Code, elapsed: Duration) {
        let series = self.series.lock().unwrap_or_else(|e| e.into_inner()).entry(method).or_default().clone();
        let code = (code as usize).min(GRPC_CODES.len() - 1);
        series.by_code[code].fetch_add(1, Ordering::Relaxed);
        series.duration.observe(elapsed);
    }

    fn render(&self, out: &mut String) {
        let series = self.series.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let name = "lakestream_grpc_requests_total";
        let _ = writeln!(
            out,
            "# HELP {name} gRPC calls answered, by method and status code.\n# TYPE {name} counter"
        );
        for (method, s) in &series {
            for (code, count) in GRPC_CODES.iter().zip(&s.by_code) {
                let count = count.load(Ordering::Relaxed);
                if count > 0 {
                    let _ = writeln!(out, "{name}{{method=\"{method}\",code=\"{code}\"}} {count}");
                }
            }
        }
        let name = "lakestream_grpc_request_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time to answer a gRPC call (to the response head), by method.\n# TYPE {name} histogram"
        );
        for (method, s) in &series {
            s.duration.render_series(name, &format!("method=\"{method}\""), out);
        }
    }
}

/// Consumer groups' lag per partition, as of each group's last commit or offset fetch
/// (`lakestream_group_lag_records{namespace, group, stream, partition}`).
#[derive(Debug, Default)]
pub struct GroupLagMetrics {
    lags: std::sync::Mutex<std::collections::BTreeMap<(String, String, String, usize), u64>>,
}

impl GroupLagMetrics {
    /// Records a group's lag on a partition.
    pub fn record(&self, namespace: &str, group: &str, stream: &str, partition: usize, lag: u64) {
        let key = (namespace.to_owned(), group.to_owned(), stream.to_owned(), partition);
        self.lags.lock().unwrap_or_else(|e| e.into_inner()).insert(key, lag);
    }

    fn render(&self, out: &mut String) {
        let lags = self.lags.lock().unwrap_or_else(|e| e.into_inner());
        let name = "lakestream_group_lag_records";
        let _ = writeln!(
            out,
            "# HELP {name} Records between a consumer group's committed offset and the partition's next offset, as of the group's last commit or offset fetch.\n# TYPE {name} gauge"
        );
        for ((namespace, group, stream, partition), lag) in lags.iter() {
            let _ = writeln!(
                out,
                "{name}{{namespace=\"{}\",group=\"{}\",stream=\"{}\",partition=\"{partition}\"}} {lag}",
                LabelValue(namespace),
                LabelValue(group),
                LabelValue(stream)
            );
        }
    }
}

/// A label value escaped for the text exposition format: `\` as `\\`, `"` as `\"` and a
/// line feed as `\n`. Names may hold `"` and `\`; unescaped, one such name breaks the whole
/// scrape.
struct LabelValue<'a>(&'a str);

impl std::fmt::Display for LabelValue<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in self.0.chars() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '"' => f.write_str("\\\"")?,
                '\n' => f.write_str("\\n")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// Renders a histogram read from a library's counters (integer bounds).
fn render_snapshot(name: &str, help: &str, h: &lakestream_writer::HistogramSnapshot, out: &mut String) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for (bound, count) in h.bounds.iter().zip(&h.cumulative) {
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {count}");
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", h.sum, h.count);
}

/// Appends the writer role's WAL flush counters ([`lakestream_writer::Writer::stats`]): the
/// rate of `lakestream_wal_objects_written_total` is the WAL's PUTs per second.
pub fn render_writer(stats: &lakestream_writer::WriterStats, out: &mut String) {
    let counters = [
        ("lakestream_wal_objects_written_total", "WAL objects written.", stats.objects_written),
        (
            "lakestream_wal_object_write_failures_total",
            "WAL objects that could not be built or written (their entries failed).",
            stats.object_write_failures,
        ),
    ];
    for (name, help, value) in counters {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}");
    }
    render_snapshot(
        "lakestream_wal_object_size_bytes",
        "Sizes of the WAL objects written.",
        &stats.object_bytes,
        out,
    );
    render_snapshot(
        "lakestream_wal_object_logs",
        "Log sections per WAL object written.",
        &stats.logs_per_object,
        out,
    );
    let name = "lakestream_wal_index_puts_total";
    let _ = writeln!(
        out,
        "# HELP {name} Index puts (one per log section of a WAL object), by outcome.\n# TYPE {name} counter"
    );
    for (outcome, value) in [
        ("committed", stats.index_puts),
        ("failed", stats.index_put_failures),
        ("unknown", stats.index_put_unknown),
    ] {
        let _ = writeln!(out, "{name}{{outcome=\"{outcome}\"}} {value}");
    }
}

/// Appends the Oxia client's requests by kind (`write`, `read`, `list`, `scan`, `session`)
/// and their failures, when the metadata store is Oxia.
pub fn render_oxia(stats: &lakestream_meta_oxia::OxiaStats, out: &mut String) {
    for (name, help, errors) in [
        ("lakestream_oxia_requests_total", "Requests to Oxia, by kind.", false),
        ("lakestream_oxia_request_errors_total", "Requests to Oxia that failed, by kind.", true),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (kind, counts) in stats.by_kind() {
            let value = if errors { counts.errors } else { counts.requests };
            let _ = writeln!(out, "{name}{{kind=\"{}\"}} {value}", kind.name());
        }
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
    /// Idempotent producers' retries answered from their state, appending nothing.
    pub producer_duplicates: AtomicU64,
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
    /// Requests refused by a client's rate limit (both APIs).
    pub rate_limited: AtomicU64,
    /// HTTP requests by route, method and status class, and their latency.
    pub http_requests: HttpRequestMetrics,
    /// gRPC calls by method and status code, and their latency.
    pub grpc_requests: GrpcRequestMetrics,
    /// gRPC calls answered with a status other than OK.
    pub grpc_errors: AtomicU64,
    /// CloudEvents appended by ingest (not counting duplicates).
    pub events_ingested: AtomicU64,
    /// CloudEvents answered as duplicates of earlier ones.
    pub events_duplicate: AtomicU64,
    /// Ingest requests answered `in_flight` (HTTP 409).
    pub events_in_flight: AtomicU64,
    /// The compactor role's progress and each log's backlog.
    pub compaction: CompactionMetrics,
    /// Streams as Iceberg tables: commits, rows, failures, lag.
    pub tables: TableMetrics,
    /// Consumer groups' lag per partition.
    pub group_lag: GroupLagMetrics,
    /// The HTTP listener's connections.
    pub http_connections: std::sync::Arc<ConnectionStats>,
    /// The gRPC listener's connections.
    pub grpc_connections: std::sync::Arc<ConnectionStats>,
    /// The outcome of the last readiness check: 1 ready, 0 not (or draining).
    pub ready: AtomicU64,
    /// Readiness checks that failed (a store did not answer, or the service is draining).
    pub readiness_failures: AtomicU64,
    /// Soft trims made by retention.
    pub retention_trims: AtomicU64,
    /// Retention attempts that failed (retried next pass).
    pub retention_failures: AtomicU64,
    /// Hard trims made by the compactor role behind trim markers.
    pub hard_trims: AtomicU64,
    /// Idempotent producers' state records deleted after `[producers] idle_expiry`.
    pub producer_states_expired: AtomicU64,
    /// Producer-expiry sweeps of a partition that failed (retried next sweep).
    pub producer_expiry_failures: AtomicU64,
}

/// What the compactor role reports: counters of its passes, and per log the backlog it saw
/// when a pass over the log ended (gauges labelled with the log's stream).
#[derive(Debug, Default)]
pub struct CompactionMetrics {
    /// Ranges compacted (C2–C5 done).
    pub ranges: AtomicU64,
    /// Payload bytes compacted.
    pub payload_bytes: AtomicU64,
    /// Logs whose compaction failed in a pass.
    pub failures: AtomicU64,
    backlogs: std::sync::Mutex<std::collections::BTreeMap<lakestream_format::LogId, LogBacklog>>,
}

/// A per-log gauge: name, help, and how to read its value.
type Gauge = (&'static str, &'static str, fn(&LogBacklog) -> f64);

#[derive(Debug, Clone)]
struct LogBacklog {
    log: lakestream_format::LogRef,
    backlog: lakestream_compactor::Backlog,
    seen_ms: i64,
}

impl CompactionMetrics {
    /// Records the backlog of `log` seen at `now_ms` (wall clock, ms).
    pub fn record_backlog(
        &self,
        log: &lakestream_format::LogRef,
        backlog: lakestream_compactor::Backlog,
        now_ms: i64,
    ) {
        let entry = LogBacklog { log: log.clone(), backlog, seen_ms: now_ms };
        self.backlogs.lock().unwrap_or_else(|e| e.into_inner()).insert(log.log_id, entry);
    }

    /// Forgets logs that are no longer in the catalog (dropped streams).
    pub fn retain_logs(&self, live: &std::collections::BTreeSet<lakestream_format::LogId>) {
        self.backlogs.lock().unwrap_or_else(|e| e.into_inner()).retain(|id, _| live.contains(id));
    }

    fn render(&self, out: &mut String) {
        let counters = [
            ("lakestream_compaction_ranges_total", "Ranges compacted.", &self.ranges),
            ("lakestream_compaction_payload_bytes_total", "Payload bytes compacted.", &self.payload_bytes),
            ("lakestream_compaction_failures_total", "Log compactions that failed.", &self.failures),
        ];
        for (name, help, v) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        }
        let backlogs = self.backlogs.lock().unwrap_or_else(|e| e.into_inner());
        let gauges: [Gauge; 3] = [
            ("lakestream_compaction_lag_bytes", "Payload bytes of a log not yet compacted.", |b| {
                b.backlog.open_payload_bytes as f64
            }),
            (
                "lakestream_compaction_lag_seconds",
                "Age of a log's oldest entry not yet compacted, when last seen (0: none).",
                |b| b.backlog.oldest_open_entry_ms.map_or(0.0, |t| (b.seen_ms - t).max(0) as f64 / 1e3),
            ),
            ("lakestream_trim_marker", "A log's trim marker B (entries below it are trimmed).", |b| {
                b.backlog.trim_marker as f64
            }),
        ];
        for (name, help, value) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for b in backlogs.values() {
                let _ = writeln!(
                    out,
                    "{name}{{namespace=\"{}\",stream=\"{}\",log=\"{}\"}} {}",
                    LabelValue(&b.log.namespace),
                    LabelValue(&b.log.stream),
                    b.log.log_id,
                    value(b)
                );
            }
        }
    }
}

/// Counters of the committer, for `/metrics`.
#[derive(Debug, Default)]
pub struct TableMetrics {
    /// Snapshots committed.
    pub commits: AtomicU64,
    /// Rows committed.
    pub rows: AtomicU64,
    /// Ranges committed.
    pub ranges: AtomicU64,
    /// Stream commits that failed (retried on the next pass).
    pub failures: AtomicU64,
    /// Kafka entries that did not decode (written as one row each).
    pub undecodable_entries: AtomicU64,
    /// Compacted offsets not yet in their tables, summed over the logs, at the last pass.
    pub lag_offsets: AtomicU64,
    /// Data files removed from tables' current snapshots by trims.
    pub trimmed_files: AtomicU64,
    /// Snapshots expired.
    pub snapshots_expired: AtomicU64,
    /// Files deleted because no snapshot referred to them (data and metadata).
    pub files_deleted: AtomicU64,
    /// Tables dropped with their streams.
    pub dropped: AtomicU64,
    /// Trims, expiries, file deletions or drops that failed (retried on a later pass).
    pub maintenance_failures: AtomicU64,
}

impl TableMetrics {
    fn render(&self, out: &mut String) {
        let rows = [
            (
                "lakestream_table_commits_total",
                "counter",
                "Iceberg table snapshots committed.",
                &self.commits,
            ),
            ("lakestream_table_rows_total", "counter", "Rows committed to Iceberg tables.", &self.rows),
            (
                "lakestream_table_ranges_total",
                "counter",
                "Log offset ranges committed to Iceberg tables.",
                &self.ranges,
            ),
            (
                "lakestream_table_commit_failures_total",
                "counter",
                "Table commits that failed (retried on the next pass).",
                &self.failures,
            ),
            (
                "lakestream_table_undecodable_entries_total",
                "counter",
                "Kafka entries that did not decode, written as one row each.",
                &self.undecodable_entries,
            ),
            (
                "lakestream_table_lag_offsets",
                "gauge",
                "Compacted offsets not yet in their tables, over all logs, at the last pass.",
                &self.lag_offsets,
            ),
            (
                "lakestream_table_trimmed_files_total",
                "counter",
                "Data files removed from tables' current snapshots because their log was trimmed.",
                &self.trimmed_files,
            ),
            (
                "lakestream_table_snapshots_expired_total",
                "counter",
                "Table snapshots expired.",
                &self.snapshots_expired,
            ),
            (
                "lakestream_table_files_deleted_total",
                "counter",
                "Table files deleted because no snapshot referred to them.",
                &self.files_deleted,
            ),
            (
                "lakestream_table_dropped_total",
                "counter",
                "Tables dropped with their streams.",
                &self.dropped,
            ),
            (
                "lakestream_table_maintenance_failures_total",
                "counter",
                "Table trims, expiries, file deletions or drops that failed (retried later).",
                &self.maintenance_failures,
            ),
        ];
        for (name, kind, help, v) in rows {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        }
    }
}

impl Metrics {
    fn render_connections(&self, out: &mut String) {
        type Read = fn(&ConnectionStats) -> u64;
        let series: [(&str, &str, &str, Read); 4] = [
            ("lakestream_connections_open", "gauge", "Connections open.", |c| c.open.load(Ordering::Relaxed)),
            (
                "lakestream_connections_refused_total",
                "counter",
                "Connections refused at listener.max_connections.",
                |c| c.refused.load(Ordering::Relaxed),
            ),
            (
                "lakestream_connections_idle_closed_total",
                "counter",
                "Connections closed after listener.idle_timeout without a request in flight.",
                |c| c.idle_closed.load(Ordering::Relaxed),
            ),
            (
                "lakestream_tls_handshake_failures_total",
                "counter",
                "TLS handshakes that failed or timed out.",
                |c| c.tls_handshake_failed.load(Ordering::Relaxed),
            ),
        ];
        for (name, kind, help, read) in series {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (listener, stats) in [("http", &self.http_connections), ("grpc", &self.grpc_connections)] {
                let _ = writeln!(out, "{name}{{listener=\"{listener}\"}} {}", read(stats));
            }
        }
    }

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
        counter(
            &mut out,
            "lakestream_producer_duplicates_total",
            "Idempotent producer retries answered with their original offsets, appending nothing.",
            &self.producer_duplicates,
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
            "lakestream_retention_trims_total",
            "Soft trims made by retention.",
            &self.retention_trims,
        );
        counter(
            &mut out,
            "lakestream_retention_failures_total",
            "Retention attempts that failed (retried next pass).",
            &self.retention_failures,
        );
        counter(
            &mut out,
            "lakestream_producer_states_expired_total",
            "Idempotent producers' state records deleted after [producers] idle_expiry.",
            &self.producer_states_expired,
        );
        counter(
            &mut out,
            "lakestream_producer_expiry_failures_total",
            "Producer-expiry sweeps of a partition that failed (retried next sweep).",
            &self.producer_expiry_failures,
        );
        counter(
            &mut out,
            "lakestream_hard_trims_total",
            "Hard trims made by the compactor role behind trim markers.",
            &self.hard_trims,
        );
        counter(
            &mut out,
            "lakestream_rate_limited_total",
            "Requests refused by a client's rate limit.",
            &self.rate_limited,
        );
        counter(
            &mut out,
            "lakestream_http_errors_total",
            "Requests answered with an error status.",
            &self.http_errors,
        );
        self.http_requests.render(&mut out);
        self.grpc_requests.render(&mut out);
        counter(
            &mut out,
            "lakestream_grpc_errors_total",
            "gRPC calls answered with a status other than OK.",
            &self.grpc_errors,
        );
        counter(
            &mut out,
            "lakestream_events_ingested_total",
            "CloudEvents appended by ingest.",
            &self.events_ingested,
        );
        counter(
            &mut out,
            "lakestream_events_duplicate_total",
            "CloudEvents answered as duplicates.",
            &self.events_duplicate,
        );
        counter(
            &mut out,
            "lakestream_events_in_flight_total",
            "CloudEvents ingest requests answered in_flight.",
            &self.events_in_flight,
        );
        self.compaction.render(&mut out);
        self.tables.render(&mut out);
        self.group_lag.render(&mut out);
        let _ = writeln!(
            out,
            "# HELP lakestream_ready Outcome of the last readiness check (1 ready, 0 not ready or draining).\n\
             # TYPE lakestream_ready gauge\nlakestream_ready {}",
            self.ready.load(Ordering::Relaxed)
        );
        counter(
            &mut out,
            "lakestream_readiness_failures_total",
            "Readiness checks that failed (a store did not answer, or draining).",
            &self.readiness_failures,
        );
        self.render_connections(&mut out);
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

    /// Every `lakestream_*` metric the alert rules and the dashboard under `deploy/` query is
    /// one `/metrics` exposes (histograms with their `_bucket`, `_sum` and `_count` series).
    #[test]
    fn the_alerts_and_the_dashboard_query_only_metrics_we_expose() {
        let mut text = Metrics::default().render(Some(lakestream_reader::cache::CacheStats::default()));
        crate::objects::ObjectStoreMetrics::default().render(&mut text);
        render_writer(&lakestream_writer::WriterStats::default(), &mut text);
        render_oxia(&lakestream_meta_oxia::OxiaStats::default(), &mut text);
        let mut exposed = std::collections::BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split(' ');
                let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
                exposed.insert(name.to_string());
                if kind == "histogram" {
                    for suffix in ["_bucket", "_sum", "_count"] {
                        exposed.insert(format!("{name}{suffix}"));
                    }
                }
            }
        }
        let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
        let mut checked = 0;
        for file in ["prometheus/alerts.yml", "prometheus/alerts_test.yml", "grafana/lakestream.json"] {
            let content = std::fs::read_to_string(deploy.join(file)).unwrap();
            let mut rest = content.as_str();
            while let Some(at) = rest.find("lakestream_") {
                let name: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                assert!(exposed.contains(&name), "{file} queries {name}, which /metrics does not expose");
                checked += 1;
                rest = &rest[at + name.len()..];
            }
        }
        assert!(checked > 40, "only {checked} metric references found");
    }

    #[test]
    fn grpc_methods_are_ours_or_unknown() {
        assert_eq!(GrpcRequestMetrics::method_of("/lakestream.v1.Lakestream/Produce"), "Produce");
        assert_eq!(GrpcRequestMetrics::method_of("/lakestream.v1.Lakestream/Nope"), "unknown");
        assert_eq!(GrpcRequestMetrics::method_of("/other.Service/Produce"), "unknown");
        let m = Metrics::default();
        m.grpc_requests.observe("unknown", tonic::Code::Unimplemented, Duration::from_millis(1));
        m.grpc_requests.observe("Produce", tonic::Code::Ok, Duration::from_millis(1));
        m.grpc_requests.observe("Produce", tonic::Code::Ok, Duration::from_millis(1));
        let out = m.render(None);
        assert!(
            out.contains("lakestream_grpc_requests_total{method=\"unknown\",code=\"UNIMPLEMENTED\"} 1\n"),
            "{out}"
        );
        assert!(out.contains("lakestream_grpc_requests_total{method=\"Produce\",code=\"OK\"} 2\n"), "{out}");
        parse_scrape(&out).unwrap();
    }

    #[test]
    fn http_route_labels_are_escaped_and_the_scrape_parses() {
        let m = Metrics::default();
        let (get, ok, missing) = (http::Method::GET, http::StatusCode::OK, http::StatusCode::NOT_FOUND);
        m.http_requests.observe(Some("/a/{x}"), &get, ok, Duration::from_millis(2));
        m.http_requests.observe(Some("/a/{x}"), &get, missing, Duration::from_millis(2));
        m.http_requests.observe(None, &http::Method::from_bytes(b"BREW").unwrap(), missing, Duration::ZERO);
        let out = m.render(None);
        parse_scrape(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
        assert!(
            out.contains(
                "lakestream_http_requests_total{route=\"/a/{x}\",method=\"GET\",status=\"2xx\"} 1\n"
            ),
            "{out}"
        );
        assert!(
            out.contains(
                "lakestream_http_requests_total{route=\"/a/{x}\",method=\"GET\",status=\"4xx\"} 1\n"
            ),
            "{out}"
        );
        assert!(
            out.contains(
                "lakestream_http_requests_total{route=\"unmatched\",method=\"other\",status=\"4xx\"} 1\n"
            ),
            "{out}"
        );
        assert!(
            out.contains(
                "lakestream_http_request_duration_seconds_count{route=\"/a/{x}\",method=\"GET\"} 2\n"
            ),
            "{out}"
        );
        assert!(out.contains("lakestream_http_request_duration_seconds_bucket{route=\"/a/{x}\",method=\"GET\",le=\"0.0025\"} 2\n"), "{out}");
    }

    #[test]
    fn writer_stats_render_as_counters_and_histograms() {
        let stats = lakestream_writer::WriterStats {
            objects_written: 3,
            object_write_failures: 1,
            object_bytes: lakestream_writer::HistogramSnapshot {
                bounds: &[1024, 4096],
                cumulative: vec![1, 2],
                count: 3,
                sum: 10_000,
            },
            logs_per_object: lakestream_writer::HistogramSnapshot {
                bounds: &[1, 2],
                cumulative: vec![2, 2],
                count: 3,
                sum: 9,
            },
            index_puts: 8,
            index_put_failures: 0,
            index_put_unknown: 1,
        };
        let mut out = String::new();
        render_writer(&stats, &mut out);
        parse_scrape(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
        for line in [
            "lakestream_wal_objects_written_total 3",
            "lakestream_wal_object_write_failures_total 1",
            "lakestream_wal_object_size_bytes_bucket{le=\"4096\"} 2",
            "lakestream_wal_object_size_bytes_bucket{le=\"+Inf\"} 3",
            "lakestream_wal_object_size_bytes_sum 10000",
            "lakestream_wal_object_logs_bucket{le=\"1\"} 2",
            "lakestream_wal_object_logs_count 3",
            "lakestream_wal_object_logs_sum 9",
            "lakestream_wal_index_puts_total{outcome=\"committed\"} 8",
            "lakestream_wal_index_puts_total{outcome=\"unknown\"} 1",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} in\n{out}");
        }
    }

    #[test]
    fn oxia_requests_render_per_kind() {
        let mut stats = lakestream_meta_oxia::OxiaStats::default();
        stats.counts[0] = lakestream_meta_oxia::RequestCounts { requests: 7, errors: 2 };
        stats.counts[4] = lakestream_meta_oxia::RequestCounts { requests: 3, errors: 0 };
        let mut out = String::new();
        render_oxia(&stats, &mut out);
        parse_scrape(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
        for line in [
            "lakestream_oxia_requests_total{kind=\"write\"} 7",
            "lakestream_oxia_request_errors_total{kind=\"write\"} 2",
            "lakestream_oxia_requests_total{kind=\"session\"} 3",
            "lakestream_oxia_requests_total{kind=\"scan\"} 0",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} in\n{out}");
        }
    }

    /// `docs/operations.md`'s metrics reference names every metric `/metrics` can expose, with
    /// its type, and nothing else.
    #[test]
    fn the_metrics_reference_lists_every_metric_with_its_type() {
        let mut text = Metrics::default().render(Some(lakestream_reader::cache::CacheStats::default()));
        crate::objects::ObjectStoreMetrics::default().render(&mut text);
        render_writer(&lakestream_writer::WriterStats::default(), &mut text);
        render_oxia(&lakestream_meta_oxia::OxiaStats::default(), &mut text);
        let exposed: std::collections::BTreeMap<String, String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|rest| {
                let (name, kind) = rest.split_once(' ').unwrap();
                (name.to_string(), kind.to_string())
            })
            .collect();
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md");
        let docs = std::fs::read_to_string(docs).unwrap();
        let documented: std::collections::BTreeMap<String, String> = docs
            .lines()
            .filter_map(|l| l.strip_prefix("| `lakestream_"))
            .map(|rest| {
                let mut cells = rest.split('|');
                let name = format!("lakestream_{}", cells.next().unwrap().trim().trim_end_matches('`'));
                (name, cells.next().unwrap().trim().to_string())
            })
            .collect();
        assert!(exposed.len() > 40, "{exposed:?}");
        assert_eq!(documented, exposed);
    }

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

    #[test]
    fn compaction_gauges_are_labelled_per_log_and_forget_dropped_logs() {
        let m = Metrics::default();
        let log = lakestream_format::LogRef {
            log_id: lakestream_format::LogId(7),
            namespace: "default".into(),
            stream: "orders".into(),
        };
        let backlog = lakestream_compactor::Backlog {
            log_id: log.log_id,
            trim_marker: 3,
            open_payload_bytes: 1024,
            oldest_open_entry_ms: Some(10_000),
        };
        m.compaction.record_backlog(&log, backlog, 12_500);
        let out = m.render(None);
        let labels = "{namespace=\"default\",stream=\"orders\",log=\"7\"}";
        assert!(out.contains(&format!("lakestream_compaction_lag_bytes{labels} 1024")), "{out}");
        assert!(out.contains(&format!("lakestream_compaction_lag_seconds{labels} 2.5")), "{out}");
        assert!(out.contains(&format!("lakestream_trim_marker{labels} 3")), "{out}");
        m.compaction.retain_logs(&Default::default());
        assert!(!m.render(None).contains("log=\"7\""));
    }

    /// A sample: metric name, labels (values unescaped), value.
    type Sample = (String, Vec<(String, String)>, String);

    /// Parses one sample line of the text exposition format strictly; the error names what is
    /// wrong in which line.
    fn parse_sample(line: &str) -> Result<Sample, String> {
        let bad = |what: String| Err(format!("{what} in {line:?}"));
        let mut chars = line.chars().peekable();
        let name = take_while(&mut chars, |c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            return bad(format!("bad metric name {name:?}"));
        }
        let mut labels = Vec::new();
        if chars.peek() == Some(&'{') {
            chars.next();
            loop {
                if chars.peek() == Some(&'}') {
                    chars.next();
                    break;
                }
                let label = take_while(&mut chars, |c| c.is_ascii_alphanumeric() || c == '_');
                if label.is_empty() || label.starts_with(|c: char| c.is_ascii_digit()) {
                    return bad(format!("bad label name {label:?}"));
                }
                if chars.next() != Some('=') || chars.next() != Some('"') {
                    return bad(format!("label {label}: expected =\""));
                }
                let mut value = String::new();
                loop {
                    match chars.next() {
                        None => return bad(format!("label {label}: unterminated value")),
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some('\\') => value.push('\\'),
                            Some('"') => value.push('"'),
                            Some('n') => value.push('\n'),
                            other => return bad(format!("label {label}: bad escape \\{other:?}")),
                        },
                        Some(c) => value.push(c),
                    }
                }
                labels.push((label.clone(), value));
                match chars.next() {
                    Some(',') => {}
                    Some('}') => break,
                    other => return bad(format!("after label {label}: expected , or }}, found {other:?}")),
                }
            }
        }
        if chars.next() != Some(' ') {
            return bad("expected one space before the value".into());
        }
        let value: String = chars.collect();
        if value.parse::<f64>().is_err() && !["+Inf", "-Inf", "NaN"].contains(&value.as_str()) {
            return bad(format!("bad value {value:?}"));
        }
        Ok((name, labels, value))
    }

    fn take_while(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, ok: impl Fn(char) -> bool) -> String {
        let mut taken = String::new();
        while let Some(c) = chars.next_if(|c| ok(*c)) {
            taken.push(c);
        }
        taken
    }

    /// Parses a whole scrape: `# HELP`/`# TYPE` lines and samples, nothing else.
    fn parse_scrape(text: &str) -> Result<Vec<Sample>, String> {
        let mut samples = Vec::new();
        for line in text.lines() {
            if let Some(comment) = line.strip_prefix("# ") {
                let ok = match comment.split_once(' ') {
                    Some(("HELP", rest)) => rest.split_once(' ').is_some(),
                    Some(("TYPE", rest)) => rest
                        .split_once(' ')
                        .is_some_and(|(_, kind)| ["counter", "gauge", "histogram"].contains(&kind)),
                    _ => false,
                };
                if !ok {
                    return Err(format!("bad comment line {line:?}"));
                }
            } else {
                samples.push(parse_sample(line)?);
            }
        }
        Ok(samples)
    }

    #[test]
    fn the_strict_parser_refuses_unescaped_label_values() {
        assert!(parse_sample(r#"x{stream="a"b"} 1"#).is_err());
        assert!(parse_sample(r#"x{stream="a\qb"} 1"#).is_err());
        assert!(parse_sample(r#"x{stream="a} 1"#).is_err());
        assert!(parse_scrape("x{stream=\"a\nb\"} 1\n").is_err(), "a raw line feed splits the sample");
        let (_, labels, _) = parse_sample(r#"x{stream="a\"b\\c\nd"} 1"#).unwrap();
        assert_eq!(labels, [("stream".to_string(), "a\"b\\c\nd".to_string())]);
    }

    #[test]
    fn label_values_are_escaped_so_a_scrape_with_any_stream_name_parses() {
        let m = Metrics::default();
        // Catalog names may hold `"`, `\`, spaces, `%` and non-ASCII; line feeds are refused
        // by the catalog but escaped here all the same.
        let names = [("default", "a\"b\\c"), ("ns \"q\" %41 é", "line\nbreak"), ("plain", "plain")];
        for (i, (namespace, stream)) in names.iter().enumerate() {
            let log = lakestream_format::LogRef {
                log_id: lakestream_format::LogId(i as u64 + 1),
                namespace: (*namespace).into(),
                stream: (*stream).into(),
            };
            let backlog = lakestream_compactor::Backlog {
                log_id: log.log_id,
                trim_marker: 0,
                open_payload_bytes: 10,
                oldest_open_entry_ms: None,
            };
            m.compaction.record_backlog(&log, backlog, 0);
        }
        let out = m.render(None);
        let samples = parse_scrape(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
        for (namespace, stream) in names {
            let matching = samples
                .iter()
                .filter(|(name, labels, _)| {
                    name == "lakestream_compaction_lag_bytes"
                        && labels.contains(&("namespace".into(), namespace.into()))
                        && labels.contains(&("stream".into(), stream.into()))
                })
                .count();
            assert_eq!(matching, 1, "{namespace:?}/{stream:?} in\n{out}");
        }
        assert!(out.contains(r#"stream="a\"b\\c""#), "{out}");
        assert!(out.contains(r#"stream="line\nbreak""#), "{out}");
    }
}

/// Counters and the open-connections gauge of one listener, for `/metrics`.
#[derive(Debug, Default)]
pub struct ConnectionStats {
    /// Connections open now.
    pub open: AtomicU64,
    /// Connections refused because `max_connections` were open.
    pub refused: AtomicU64,
    /// Connections closed because no request was in flight for `idle_timeout`.
    pub idle_closed: AtomicU64,
    /// TLS handshakes that failed or did not finish within `tls_handshake_timeout`.
    pub tls_handshake_failed: AtomicU64,
}
