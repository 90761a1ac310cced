//! Ranged reads of one WAL object's sections, gathered. Readers of different logs of one
//! object that ask for their sections while its index region is being read (readers of the
//! partitions of a stream, and their read-ahead, come close together) join one batch; once
//! the index is in, the first of them reads the batch's payload spans with as few ranged GETs
//! as their layout allows — a writer puts each log's payloads together, so the sections of
//! the logs read are usually adjacent and one GET serves them all — and every member takes
//! its span from the batch. The bytes fetched stay the bytes wanted (spans at most
//! [`GAP`] apart are read together), and the GETs per object drop from one per log to one.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use lakestream_format::LogId;
use lakestream_format::wal::WalIndex;
use lakestream_objstore::{ByteRange, ObjectPath, ObjectStoreError};

use super::Reader;
use crate::error::ReadError;

/// Spans at most this far apart are read in one GET (the bytes between are read for nothing).
const GAP: u64 = 64 << 10;

/// Open batches kept before stale ones (whose members all failed) are dropped.
const MAX_OPEN: usize = 4096;

/// The open batches, by object name.
#[derive(Debug, Default)]
pub(super) struct Batches {
    open: Mutex<HashMap<String, Arc<Batch>>>,
}

/// The logs whose sections of one object are read together.
#[derive(Debug, Default)]
pub(super) struct Batch {
    members: Mutex<Vec<LogId>>,
    done: tokio::sync::OnceCell<Arc<Parts>>,
}

/// What a batch read: each member's payload span (within the payload region), or that the
/// object is missing.
#[derive(Debug, Default)]
struct Parts {
    missing: bool,
    spans: HashMap<LogId, Bytes>,
}

impl Batches {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Batch>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Joins `log_id` to the open batch of `object` (opening one).
    pub(super) fn join(&self, object: &str, log_id: LogId) -> Arc<Batch> {
        let mut open = self.lock();
        if open.len() >= MAX_OPEN && !open.contains_key(object) {
            open.clear();
        }
        let batch = open.entry(object.to_string()).or_default().clone();
        batch.members.lock().unwrap_or_else(|e| e.into_inner()).push(log_id);
        batch
    }

    /// Whether ranged reads of `object` are gathering (its index is being read).
    pub(super) fn is_open(&self, object: &str) -> bool {
        self.lock().contains_key(object)
    }

    /// Closes `batch` (no one joins it any more) and returns its members.
    fn close(&self, object: &str, batch: &Arc<Batch>) -> Vec<LogId> {
        let mut open = self.lock();
        if open.get(object).is_some_and(|b| Arc::ptr_eq(b, batch)) {
            open.remove(object);
        }
        batch.members.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A range of the payload region read by one GET, and the spans it serves.
type Run = (Range<u64>, Vec<(LogId, Range<u64>)>);

/// Groups spans into runs read by one GET each: in order of their starts, a span joins the
/// run before it when it starts at most [`GAP`] after that run's end.
fn runs(mut spans: Vec<(LogId, Range<u64>)>) -> Vec<Run> {
    spans.sort_by_key(|(_, s)| s.start);
    let mut out: Vec<Run> = Vec::new();
    for (log, span) in spans {
        match out.last_mut() {
            Some((run, members)) if span.start <= run.end.saturating_add(GAP) => {
                run.end = run.end.max(span.end);
                members.push((log, span));
            }
            _ => out.push((span.clone(), vec![(log, span)])),
        }
    }
    out
}

impl Reader {
    /// The payload span of `log_id`'s section (bytes `span` of the payload region) of the WAL
    /// object `object`, read with the batch it joined. `None` when the object is missing.
    pub(super) async fn gathered_span(
        &self,
        log_id: LogId,
        object: &str,
        batch: &Arc<Batch>,
        index: &WalIndex,
        head_len: u64,
        span: &Range<u64>,
    ) -> Result<Option<Bytes>, ReadError> {
        let read = || async {
            let members = self.inner.batches.close(object, batch);
            let base = index.payload_region_start();
            // Sections that are empty or lie in the bytes read with the index need no GET.
            let mut spans: Vec<(LogId, Range<u64>)> = members
                .iter()
                .filter_map(|log| Some((*log, index.section(*log)?.payload_span())))
                .filter(|(_, s)| !s.is_empty() && base + s.end > head_len)
                .collect();
            spans.sort_by_key(|(log, _)| log.0);
            spans.dedup_by_key(|(log, _)| *log);
            let path = ObjectPath::new(object.to_string()).map_err(|e| ReadError::Corrupt {
                log_id,
                what: format!("WAL object {object}"),
                detail: e.to_string(),
            })?;
            let gets = runs(spans).into_iter().map(|(run, members)| {
                let path = &path;
                async move {
                    let range = ByteRange::Bounded(base + run.start..base + run.end);
                    let got = self.inner.deps.wal.get_range(path, range).await;
                    (run, members, got)
                }
            });
            let mut parts = Parts::default();
            for (run, members, got) in futures::future::join_all(gets).await {
                let bytes = match got {
                    Ok(b) => b,
                    Err(ObjectStoreError::NotFound { .. }) => {
                        return Ok::<_, ReadError>(Arc::new(Parts { missing: true, ..Parts::default() }));
                    }
                    Err(source) => {
                        return Err(ReadError::Object { log_id, object: object.to_string(), source });
                    }
                };
                for (log, span) in members {
                    let (from, to) = ((span.start - run.start) as usize, (span.end - run.start) as usize);
                    if to <= bytes.len() {
                        parts.spans.insert(log, bytes.slice(from..to));
                    }
                }
            }
            Ok(Arc::new(parts))
        };
        let parts = batch.done.get_or_try_init(read).await?;
        if parts.missing {
            return Ok(None);
        }
        match parts.spans.get(&log_id) {
            Some(b) => Ok(Some(b.clone())),
            // Not read with the batch (its bytes came short): read it alone.
            None => {
                let path = ObjectPath::new(object.to_string()).map_err(|e| ReadError::Corrupt {
                    log_id,
                    what: format!("WAL object {object}"),
                    detail: e.to_string(),
                })?;
                let base = index.payload_region_start();
                let range = ByteRange::Bounded(base + span.start..base + span.end);
                match self.inner.deps.wal.get_range(&path, range).await {
                    Ok(b) => Ok(Some(b)),
                    Err(ObjectStoreError::NotFound { .. }) => Ok(None),
                    Err(source) => Err(ReadError::Object { log_id, object: object.to_string(), source }),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjacent_and_near_spans_are_read_together() {
        let spans = vec![
            (LogId(3), 300..400),
            (LogId(1), 0..100),
            (LogId(2), 100..300),
            (LogId(9), 400 + 3 * GAP..400 + 3 * GAP + 10),
            (LogId(4), 400 + GAP / 2..400 + GAP),
        ];
        let got = runs(spans);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].0, 0..400 + GAP);
        assert_eq!(got[0].1.len(), 4);
        assert_eq!(got[1].0, 400 + 3 * GAP..400 + 3 * GAP + 10);
    }
}
