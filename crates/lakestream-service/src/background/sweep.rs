//! The loop of the background sweeps over every partition (retention, producer expiry): each
//! `interval` until `stop`, list the catalog's streams and visit each partition of each in
//! turn.

use std::time::Duration;

use lakestream_catalog::Stream;
use lakestream_format::LogRef;
use tokio::sync::watch;

use crate::stack::Stack;

/// Sweeps every `interval` until `stop`. Each pass lists the catalog's streams (when it
/// cannot, it logs `{skipped}: cannot list the catalog's streams` and waits for the next),
/// asks `select` what a stream's partitions need (`None` passes the stream by), and awaits
/// `visit` with each partition's index, its log (which names the stream) and that. Stops
/// before the next partition once `stop` is set.
pub(crate) async fn every_partition<S: Clone, Visit: Future<Output = ()>>(
    stack: &Stack,
    interval: Duration,
    skipped: &str,
    mut stop: watch::Receiver<bool>,
    mut select: impl FnMut(&Stream) -> Option<S>,
    mut visit: impl FnMut(usize, LogRef, S) -> Visit,
) {
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        let streams = match stack.all_streams().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "{skipped}: cannot list the catalog's streams");
                continue;
            }
        };
        for stream in streams {
            let Some(selected) = select(&stream) else { continue };
            for p in 0..stream.partition_count() {
                let Some(log) = stream.log_ref(p) else { continue };
                if *stop.borrow() {
                    return;
                }
                visit(p, log, selected.clone()).await;
            }
        }
    }
}
