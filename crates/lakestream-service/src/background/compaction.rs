//! The compactor role as a background loop: a compaction pass over every log of every live
//! stream each `interval`, and a reclamation pass each `gc_interval`, until stopped; a stop
//! abandons a running pass at once. Each
//! pass records its progress and every log's backlog in the metrics.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use lakestream_compactor::{Compactor, Progress, no_progress};
use lakestream_format::{LogId, LogRef};
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
        let logs = match stack.all_logs().await {
            Ok(logs) => logs,
            Err(e) => {
                tracing::warn!(error = %e, "compaction pass skipped: cannot list the catalog's logs");
                continue;
            }
        };
        let by_id: BTreeMap<LogId, &LogRef> = logs.iter().map(|l| (l.log_id, l)).collect();
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
            report = compactor.compact_once(&logs, &record) => report,
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
        let trimmed = tokio::select! {
            _ = stop.changed() => return,
            n = crate::background::retention::hard_trim_behind_markers(&stack, &compactor, &logs, &metrics) => n,
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
