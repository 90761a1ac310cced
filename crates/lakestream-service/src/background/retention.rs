//! Retention in the background: each `[retention] interval`, every partition of every stream
//! whose properties set `retention_ms` or `retention_bytes` is soft-trimmed through what the
//! policy expires (the writer reads only the offset index to find it). The compactor role's
//! passes then hard-trim index records below the trim marker ([`hard_trim_behind_markers`]),
//! and reclamation deletes the objects no record names any more.
//!
//! Runs in processes that serve the writer role (soft trim is the writer's step).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use lakestream_catalog::Stream;
use lakestream_compactor::{Compactor, no_progress};
use lakestream_format::{LogRef, keys};
use lakestream_meta::Comparison;
use lakestream_writer::RetentionPolicy;
use tokio::sync::watch;

use crate::background::sweep;
use crate::metrics::Metrics;
use crate::stack::Stack;

/// The stream property limiting the age of entries, in milliseconds.
pub const RETENTION_MS: &str = "retention_ms";
/// The stream property limiting the payload bytes kept per partition.
pub const RETENTION_BYTES: &str = "retention_bytes";

/// The retention policy a stream's properties set; an error names the property and value.
pub fn policy_of(properties: &BTreeMap<String, String>) -> Result<RetentionPolicy, String> {
    let read = |key: &str| -> Result<Option<u64>, String> {
        match properties.get(key) {
            None => Ok(None),
            Some(v) => match v.trim().parse::<u64>() {
                Ok(0) | Err(_) => Err(format!(
                    "properties.{key}: {v:?} is not a whole number greater than 0 ({})",
                    if key == RETENTION_MS { "milliseconds" } else { "bytes per partition" }
                )),
                Ok(n) => Ok(Some(n)),
            },
        }
    };
    Ok(RetentionPolicy { max_age_ms: read(RETENTION_MS)?, max_bytes: read(RETENTION_BYTES)? })
}

/// The background loop: one pass per `interval` until `stop`.
pub(crate) async fn run(
    stack: Stack,
    interval: std::time::Duration,
    metrics: Arc<Metrics>,
    stop: watch::Receiver<bool>,
) {
    let Some(writer) = stack.writer.clone() else { return };
    let select = |stream: &Stream| match policy_of(&stream.properties) {
        Ok(p) if p.is_unlimited() => None,
        Ok(p) => Some(p),
        Err(e) => {
            // Refused at create and update; a record written otherwise is reported.
            tracing::warn!(namespace = %stream.namespace, stream = %stream.name, error = %e, "retention skipped");
            None
        }
    };
    // References moved into each visit: the visits borrow from this function, not the closure.
    let (writer, stack, metrics) = (&writer, &stack, &metrics);
    let visit = move |p: usize, log: LogRef, policy: RetentionPolicy| async move {
        match writer.enforce_retention(log.log_id, policy, stack.clock.now_ms()).await {
            Ok(Some(t)) if t.advanced => {
                metrics.retention_trims.fetch_add(1, Ordering::Relaxed);
                tracing::info!(namespace = %log.namespace, stream = %log.stream, partition = p, trim_marker = t.marker, "retention trimmed");
            }
            Ok(_) => {}
            Err(e) => {
                metrics.retention_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(namespace = %log.namespace, stream = %log.stream, partition = p, error = %e, "retention failed; retried next pass");
            }
        }
    };
    sweep::every_partition(stack, interval, "retention pass skipped", stop, select, visit).await;
}

/// Hard-trims each log whose oldest index record ends at or below its trim marker B (what a
/// soft trim, by retention or by a user, left for the compactor). A log with nothing to remove
/// costs two reads. Returns how many logs were trimmed.
pub(crate) async fn hard_trim_behind_markers(
    stack: &Stack,
    compactor: &Compactor,
    logs: &[LogRef],
    metrics: &Metrics,
) -> usize {
    let mut trimmed = 0;
    for log in logs {
        let partition = keys::partition(log.log_id);
        let marker = match stack.meta.get(&partition, &keys::trim_marker_key(log.log_id)).await {
            Ok(Some(r)) => match keys::decode_trim_marker(&r.value) {
                Ok(b) => b,
                Err(_) => continue, // the compaction pass reports a corrupt marker
            },
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(log_id = %log.log_id, error = %e, "hard trim skipped: cannot read the trim marker");
                continue;
            }
        };
        let first =
            match stack.meta.get_cmp(&partition, &keys::first_key(log.log_id), Comparison::Ceiling).await {
                Ok(found) => found.filter(|r| keys::is_index_key_of(&r.key, log.log_id)),
                Err(_) => continue,
            };
        let Some(end) = first.and_then(|r| keys::IndexKey::parse(&r.key).ok()).map(|k| k.end_offset) else {
            continue;
        };
        if end > marker {
            continue;
        }
        match compactor.hard_trim(log, marker, &no_progress).await {
            Ok(_) => {
                trimmed += 1;
                metrics.hard_trims.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => tracing::warn!(log_id = %log.log_id, error = %e, "hard trim failed; retried next pass"),
        }
    }
    trimmed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_are_read_from_properties_and_bad_values_named() {
        let props =
            |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert!(policy_of(&props(&[])).unwrap().is_unlimited());
        let p = policy_of(&props(&[(RETENTION_MS, "60000"), (RETENTION_BYTES, "1048576")])).unwrap();
        assert_eq!((p.max_age_ms, p.max_bytes), (Some(60000), Some(1 << 20)));
        let e = policy_of(&props(&[(RETENTION_MS, "7d")])).unwrap_err();
        assert!(e.contains("properties.retention_ms") && e.contains("\"7d\""), "{e}");
        assert!(policy_of(&props(&[(RETENTION_BYTES, "0")])).unwrap_err().contains("retention_bytes"));
    }
}
