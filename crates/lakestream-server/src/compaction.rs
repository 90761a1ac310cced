//! The compactor role as a background loop: a compaction pass over every log of every live
//! stream each `interval`, and a reclamation pass each `gc_interval`, until stopped.

use lakestream_compactor::{Compactor, no_progress};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::CompactorSchedule;
use crate::stack::Stack;

pub(crate) async fn run(
    stack: Stack,
    compactor: Compactor,
    schedule: CompactorSchedule,
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
        let report = compactor.compact_once(&logs, &no_progress).await;
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
        if Instant::now() >= next_gc {
            next_gc = Instant::now() + schedule.gc_interval;
            match compactor.gc_once(&no_progress).await {
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
