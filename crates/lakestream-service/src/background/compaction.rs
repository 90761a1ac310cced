//! The compactor role as a background loop: a compaction pass over every log of every live
//! stream each `interval`, and a reclamation pass each `gc_interval`, until stopped; a stop
//! abandons a running pass at once. Each
//! pass records its progress and every log's backlog in the metrics.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use lakestream_compactor::{Compactor, Progress, no_progress};
use lakestream_format::{LogId, LogRef};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::CompactorSchedule;
use crate::metrics::Metrics;
use crate::stack::Stack;

pub(crate) async fn run(
    stack: Stack,
    compactor: Compactor,
    schedule: CompactorSchedule,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
) {
    let mut next_gc = Instant::now() + schedule.gc_interval;
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(schedule.interval) => {}
        }
        let logs = match stack.all_compaction_logs().await {
            Ok(logs) => logs,
            Err(e) => {
                tracing::warn!(error = %e, "compaction pass skipped: cannot list the catalog's logs");
                continue;
            }
        };
        let by_id: BTreeMap<LogId, &LogRef> = logs.iter().map(|l| (l.log.log_id, &l.log)).collect();
        let clock = stack.clock.clone();
        let record = |p: &Progress| {
            if let Progress::Backlog(b) = p
                && let Some(log) = by_id.get(&b.log_id)
            {
                metrics.compaction.record_backlog(log, *b, clock.now_ms());
            }
            // After C3–C5 of a range: the table committer may append it (never before C3).
            if let (Progress::RangeCompacted(_), Some(tables)) = (p, &stack.tables) {
                tables.wake.notify_one();
            }
        };
        // A stop abandons a pass where it is: every step is safe to interrupt (a crash
        // between any two is what the compactor is built for), and shutdown must not wait
        // for a pass over every log. The next start picks up where this one left off.
        let report = tokio::select! {
            _ = stop.changed() => {
                tracing::info!("stopping: compaction pass abandoned; the next start resumes it");
                return;
            }
            report = compactor.compact_logs_once(&logs, &record) => report,
        };
        metrics.compaction.retain_logs(&by_id.keys().copied().collect::<BTreeSet<_>>());
        metrics.compaction.ranges.fetch_add(report.ranges.len() as u64, Ordering::Relaxed);
        metrics.compaction.payload_bytes.fetch_add(report.payload_bytes, Ordering::Relaxed);
        metrics.compaction.failures.fetch_add(report.failed.len() as u64, Ordering::Relaxed);
        if report.logs_compacted > 0 || !report.failed.is_empty() {
            tracing::info!(
                logs_compacted = report.logs_compacted,
                ranges = report.ranges.len(),
                payload_bytes = report.payload_bytes,
                failed = report.failed.len(),
                "compaction pass"
            );
        }
        for (log_id, error) in &report.failed {
            tracing::warn!(%log_id, %error, "compaction of a log failed; it is retried next pass");
        }
        // Index records below trim markers (retention, user trims) go now; their objects at
        // the next reclamation pass.
        let log_refs: Vec<LogRef> = logs.iter().map(|l| l.log.clone()).collect();
        let trimmed = tokio::select! {
            _ = stop.changed() => return,
            n = crate::background::retention::hard_trim_behind_markers(&stack, &compactor, &log_refs, &metrics) => n,
        };
        if trimmed > 0 {
            tracing::info!(logs = trimmed, "hard-trimmed behind trim markers");
        }
        if Instant::now() >= next_gc {
            next_gc = Instant::now() + schedule.gc_interval;
            let gc = tokio::select! {
                _ = stop.changed() => {
                    tracing::info!("stopping: reclamation pass abandoned; the next start resumes it");
                    return;
                }
                gc = compactor.gc_once(&no_progress) => gc,
            };
            match gc {
                Ok(gc) => {
                    if !gc.wal_deleted.is_empty() || !gc.compacted_deleted.is_empty() {
                        tracing::info!(
                            wal_deleted = gc.wal_deleted.len(),
                            compacted_deleted = gc.compacted_deleted.len(),
                            "reclamation pass"
                        );
                    }
                }
                Err(e) => tracing::warn!(error = %e, "reclamation pass failed; retried next time"),
            }
        }
    }
}

/// What the compactor role reports: counters of its passes, and per log the backlog it saw
/// when a pass over the log ended (gauges labelled with the log's stream).
#[derive(Debug)]
pub struct CompactionMetrics {
    /// Ranges compacted (C2–C5 done).
    pub ranges: crate::metrics::Counter,
    /// Payload bytes compacted.
    pub payload_bytes: crate::metrics::Counter,
    /// Logs whose compaction failed in a pass.
    pub failures: crate::metrics::Counter,
    lag_bytes: Family<LogLabels, Gauge<u64, AtomicU64>>,
    lag_seconds: Family<LogLabels, Gauge<f64, AtomicU64>>,
    trim_marker: Family<LogLabels, Gauge<u64, AtomicU64>>,
    /// The labels of every log with gauges, to forget dropped logs.
    logs: Mutex<BTreeMap<LogId, LogLabels>>,
}

/// The labels of a log's gauges.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LogLabels {
    namespace: String,
    stream: String,
    log: u64,
}

impl CompactionMetrics {
    /// New compaction metrics, registered in `registry`.
    pub(crate) fn registered(registry: &mut Registry) -> Self {
        use crate::metrics::{Announced, counter};
        let metrics = CompactionMetrics {
            ranges: counter(registry, "lakestream_compaction_ranges", "Ranges compacted"),
            payload_bytes: counter(
                registry,
                "lakestream_compaction_payload_bytes",
                "Payload bytes compacted",
            ),
            failures: counter(registry, "lakestream_compaction_failures", "Log compactions that failed"),
            lag_bytes: Family::default(),
            lag_seconds: Family::default(),
            trim_marker: Family::default(),
            logs: Mutex::default(),
        };
        registry.register(
            "lakestream_compaction_lag_bytes",
            "Payload bytes of a log not yet compacted",
            Announced(metrics.lag_bytes.clone()),
        );
        registry.register(
            "lakestream_compaction_lag_seconds",
            "Age of a log's oldest entry not yet compacted, when last seen (0: none)",
            Announced(metrics.lag_seconds.clone()),
        );
        registry.register(
            "lakestream_trim_marker",
            "A log's trim marker B (entries below it are trimmed)",
            Announced(metrics.trim_marker.clone()),
        );
        metrics
    }

    /// Records the backlog of `log` seen at `now_ms` (wall clock, ms).
    pub fn record_backlog(&self, log: &LogRef, backlog: lakestream_compactor::Backlog, now_ms: i64) {
        let labels =
            LogLabels { namespace: log.namespace.clone(), stream: log.stream.clone(), log: log.log_id.0 };
        let mut logs = self.logs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(before) = logs.insert(log.log_id, labels.clone())
            && before != labels
        {
            self.forget(&before);
        }
        self.lag_bytes.get_or_create(&labels).set(backlog.open_payload_bytes);
        let lag_ms = backlog.oldest_open_entry_ms.map_or(0, |t| (now_ms - t).max(0));
        self.lag_seconds.get_or_create(&labels).set(lag_ms as f64 / 1e3);
        self.trim_marker.get_or_create(&labels).set(backlog.trim_marker);
    }

    /// Forgets logs that are no longer in the catalog (dropped streams).
    pub fn retain_logs(&self, live: &BTreeSet<LogId>) {
        let mut logs = self.logs.lock().unwrap_or_else(|e| e.into_inner());
        logs.retain(|id, labels| {
            let keep = live.contains(id);
            if !keep {
                self.forget(labels);
            }
            keep
        });
    }

    fn forget(&self, labels: &LogLabels) {
        self.lag_bytes.remove(labels);
        self.lag_seconds.remove(labels);
        self.trim_marker.remove(labels);
    }
}
