//! The append path, A1–A4, as a pipeline of tasks:
//!
//! ```text
//! append() ─A1 lease─▶ batcher ──flush──▶ upload tasks (≤ N at once) ──▶ publisher ──▶ one task per log
//!                      groups entries     A2: build + PUT the WAL        reorders by      A3: sequenced put,
//!                      by window/size/    object under a fresh name      flush order      A4: acknowledge
//!                      log count
//! ```
//!
//! Uploads run in parallel so throughput is not bound by one PUT's latency, while each log's
//! index puts are issued in flush order, one at a time, so one writer's appends to a log take
//! offsets in the order they were flushed. An entry's future resolves only after its log's
//! index record committed (A4), with [`AppendError::OutcomeUnknown`] when the put's outcome
//! is unknown, and with a failure — never an index record — when the object write failed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use lakestream_format::entry_index::EntryIndex;
use lakestream_format::keys::{self, IndexKey};
use lakestream_format::wal::{SectionSummary, WalObjectBuilder};
use lakestream_format::{Clock, LogId, Offset};
use lakestream_meta::MetaStore;
use lakestream_meta::lease::TokenSource;
use lakestream_objstore::{ObjectPath, ObjectStore};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::{Backpressure, WriterConfig};
use crate::error::AppendError;
use crate::leases::{HeldLease, Leases};
use crate::naming::wal_object_name;

/// What an acknowledged append returns: where the entry landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendAck {
    /// The log.
    pub log_id: LogId,
    /// The entry's first offset.
    pub offset: Offset,
    /// How many records (offsets) the entry holds.
    pub record_count: u32,
    /// The entry's timestamp: the creation time of its index record, in ms since the epoch.
    pub timestamp_ms: i64,
}

impl AppendAck {
    /// The offset after the entry's last record.
    pub fn end_offset(&self) -> Offset {
        self.offset + u64::from(self.record_count)
    }
}

type Reply = oneshot::Sender<Result<AppendAck, AppendError>>;

/// An entry on its way through the pipeline. Dropping it without replying resolves the
/// caller's future with [`AppendError::Closed`]; the permit returns its bytes to the bound.
#[derive(Debug)]
struct PendingEntry {
    log_id: LogId,
    payload: Bytes,
    record_count: u32,
    lease: HeldLease,
    reply: Reply,
    _permit: Option<OwnedSemaphorePermit>,
}

#[derive(Debug)]
enum BatcherMsg {
    Entry(PendingEntry),
    Flush(oneshot::Sender<()>),
    Close,
}

/// An uploaded WAL object (or a failed upload), tagged with its flush sequence number.
#[derive(Debug)]
struct Uploaded {
    seq: u64,
    outcome: Result<(String, Vec<SectionSummary>), String>,
    entries: Vec<PendingEntry>,
}

/// One log section's index put, with the entries it acknowledges (in section order).
#[derive(Debug)]
struct IndexJob {
    value: Bytes,
    record_count: u64,
    payload_bytes: u64,
    entries: Vec<PendingEntry>,
}

/// The components a writer needs. Time and randomness are injected.
#[derive(Debug, Clone)]
pub struct WriterDeps {
    /// The metadata store holding the offset index.
    pub meta: Arc<dyn MetaStore>,
    /// The WAL root.
    pub objects: Arc<dyn ObjectStore>,
    /// Wall-clock time, for WAL object names.
    pub clock: Arc<dyn Clock>,
    /// Fresh UUIDs, for WAL object names and lease tokens.
    pub tokens: Arc<dyn TokenSource>,
}

/// A writer: accepts concurrent appends for many logs and makes them durable. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Writer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: WriterConfig,
    meta: Arc<dyn MetaStore>,
    leases: Arc<Leases>,
    in_flight: Arc<Semaphore>,
    batcher: mpsc::UnboundedSender<BatcherMsg>,
    closed: AtomicBool,
    tasks: tokio::sync::Mutex<Option<JoinHandle<()>>>,
}

impl Writer {
    /// Starts a writer. Must be called inside a Tokio runtime.
    pub fn start(config: WriterConfig, deps: WriterDeps) -> Result<Writer, crate::config::ConfigError> {
        config.validate()?;
        let leases = Arc::new(Leases::new(deps.meta.clone(), deps.tokens.clone(), config.session_timeout));
        let (batcher_tx, batcher_rx) = mpsc::unbounded_channel();
        let (uploaded_tx, uploaded_rx) = mpsc::unbounded_channel();
        let upload = Arc::new(UploadCtx { objects: deps.objects, clock: deps.clock, tokens: deps.tokens });
        let batcher = tokio::spawn(run_batcher(config.clone(), batcher_rx, uploaded_tx, upload));
        let publisher = tokio::spawn(run_publisher(uploaded_rx, deps.meta.clone()));
        tokio::spawn(crate::leases::run_idle_release(Arc::downgrade(&leases), config.lease_idle_release));
        let pipeline = tokio::spawn(async move {
            let _ = batcher.await;
            let _ = publisher.await;
        });
        Ok(Writer {
            inner: Arc::new(Inner {
                in_flight: Arc::new(Semaphore::new(config.max_in_flight_bytes)),
                config,
                meta: deps.meta,
                leases,
                batcher: batcher_tx,
                closed: AtomicBool::new(false),
                tasks: tokio::sync::Mutex::new(Some(pipeline)),
            }),
        })
    }

    /// The id of the metadata-store session behind the writer's leases, once one is open.
    pub async fn session_id(&self) -> Option<String> {
        self.inner.leases.session_id().await
    }

    /// Releases now every lease that no pending entry uses and that has not been used for
    /// `idle` (zero: every unused lease), as the background task does after
    /// `lease_idle_release`. A service calls it before deleting a stream, so that the
    /// deletion's drain does not wait for the idle period. Answers how many were released.
    pub async fn release_idle_leases(&self, idle: std::time::Duration) -> usize {
        self.inner.leases.release_idle(tokio::time::Instant::now(), idle).await
    }

    /// The logs whose write lease this writer holds now.
    pub async fn leased_logs(&self) -> Vec<LogId> {
        self.inner.leases.held().await
    }

    /// The writer's settings.
    pub fn config(&self) -> &WriterConfig {
        &self.inner.config
    }

    pub(crate) fn meta(&self) -> &Arc<dyn MetaStore> {
        &self.inner.meta
    }

    /// The log's write lease, acquired if not held. Holding the handle keeps the idle
    /// releaser from deleting the lease record (it skips leases in use).
    pub(crate) async fn lease(&self, log_id: LogId) -> Result<HeldLease, AppendError> {
        self.inner.leases.ensure(log_id).await
    }

    /// Appends one entry of `record_count` records to `log_id` and resolves once it is
    /// durable and sequenced (A1–A4), with its offsets and timestamp.
    pub async fn append(
        &self,
        log_id: LogId,
        payload: Bytes,
        record_count: u32,
    ) -> Result<AppendAck, AppendError> {
        let ack = self.enqueue(log_id, payload, record_count).await?;
        ack.await.unwrap_or(Err(AppendError::Closed))
    }

    /// Appends several entries to `log_id` in the given order: they are handed to the batcher
    /// one after another from this task, so they take increasing offsets in that order (as a
    /// producer's request expects). Each entry gets its own result, in order.
    pub async fn append_many(
        &self,
        log_id: LogId,
        entries: impl IntoIterator<Item = (Bytes, u32)>,
    ) -> Vec<Result<AppendAck, AppendError>> {
        let mut pending = Vec::new();
        for (payload, record_count) in entries {
            pending.push(self.enqueue(log_id, payload, record_count).await);
        }
        let mut results = Vec::with_capacity(pending.len());
        for p in pending {
            results.push(match p {
                Ok(ack) => ack.await.unwrap_or(Err(AppendError::Closed)),
                Err(e) => Err(e),
            });
        }
        results
    }

    /// Validates an entry, takes its share of the in-flight bound and the log's lease (A1),
    /// and hands it to the batcher; the receiver resolves with the entry's outcome.
    async fn enqueue(
        &self,
        log_id: LogId,
        payload: Bytes,
        record_count: u32,
    ) -> Result<oneshot::Receiver<Result<AppendAck, AppendError>>, AppendError> {
        let inner = &self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Err(AppendError::Closed);
        }
        if record_count == 0 {
            return Err(AppendError::InvalidInput("an entry must hold at least one record".into()));
        }
        if record_count > i32::MAX as u32 {
            return Err(AppendError::InvalidInput(format!("record count {record_count} exceeds 2^31-1")));
        }
        if payload.len() > inner.config.max_entry_bytes {
            return Err(AppendError::InvalidInput(format!(
                "entry of {} bytes exceeds max_entry_bytes ({})",
                payload.len(),
                inner.config.max_entry_bytes
            )));
        }
        if log_id > LogId::MAX {
            return Err(AppendError::InvalidInput(format!("log id {log_id} exceeds 2^63-1")));
        }
        // Bound memory: hold one permit per payload byte until the entry is acknowledged.
        let weight = u32::try_from(payload.len().max(1)).unwrap_or(u32::MAX);
        let permit = match inner.config.backpressure {
            Backpressure::Wait => inner.in_flight.clone().acquire_many_owned(weight).await.ok(),
            Backpressure::FailFast => match inner.in_flight.clone().try_acquire_many_owned(weight) {
                Ok(p) => Some(p),
                Err(tokio::sync::TryAcquireError::NoPermits) => return Err(AppendError::Backpressure),
                Err(tokio::sync::TryAcquireError::Closed) => return Err(AppendError::Closed),
            },
        };
        let lease = inner.leases.ensure(log_id).await?; // A1
        let (reply, rx) = oneshot::channel();
        let entry = PendingEntry { log_id, payload, record_count, lease, reply, _permit: permit };
        inner.batcher.send(BatcherMsg::Entry(entry)).map_err(|_| AppendError::Closed)?;
        Ok(rx)
    }

    /// Writes the entries collected so far without waiting for the flush window. Resolves
    /// once their WAL object is handed to an upload (not when they are acknowledged).
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.inner.batcher.send(BatcherMsg::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    /// Stops accepting appends, writes and publishes everything pending, waits until every
    /// accepted entry is acknowledged or failed, then releases the leases and closes the
    /// session (graceful shutdown). Idempotent.
    pub async fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        let Some(pipeline) = self.inner.tasks.lock().await.take() else { return };
        let _ = self.inner.batcher.send(BatcherMsg::Close);
        // The pipeline ends when the batcher has flushed, every upload has reported and every
        // log's publisher has drained its queue.
        let _ = pipeline.await;
        self.inner.leases.release_all().await;
    }
}

#[derive(Debug)]
struct UploadCtx {
    objects: Arc<dyn ObjectStore>,
    clock: Arc<dyn Clock>,
    tokens: Arc<dyn TokenSource>,
}

/// The open batch: entries in acceptance order and the logs they touch.
#[derive(Debug, Default)]
struct Batch {
    entries: Vec<PendingEntry>,
    logs: Vec<LogId>,
    bytes: usize,
    deadline: Option<Instant>,
}

async fn run_batcher(
    config: WriterConfig,
    mut rx: mpsc::UnboundedReceiver<BatcherMsg>,
    uploaded: mpsc::UnboundedSender<Uploaded>,
    ctx: Arc<UploadCtx>,
) {
    let uploads = Arc::new(Semaphore::new(config.max_concurrent_uploads));
    let mut batch = Batch::default();
    let mut seq = 0u64;
    loop {
        let deadline = batch.deadline;
        let msg = tokio::select! {
            msg = rx.recv() => msg,
            _ = async { tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)).await }, if deadline.is_some() => {
                flush(&mut batch, &mut seq, &uploads, &uploaded, &ctx).await;
                continue;
            }
        };
        match msg {
            None | Some(BatcherMsg::Close) => {
                flush(&mut batch, &mut seq, &uploads, &uploaded, &ctx).await;
                return;
            }
            Some(BatcherMsg::Flush(done)) => {
                flush(&mut batch, &mut seq, &uploads, &uploaded, &ctx).await;
                let _ = done.send(());
            }
            Some(BatcherMsg::Entry(entry)) => {
                let new_log = !batch.logs.contains(&entry.log_id);
                let too_many_logs = new_log && batch.logs.len() >= config.max_logs_per_object;
                let too_big =
                    !batch.entries.is_empty() && batch.bytes + entry.payload.len() > config.flush_bytes;
                if too_many_logs || too_big {
                    flush(&mut batch, &mut seq, &uploads, &uploaded, &ctx).await;
                }
                if !batch.logs.contains(&entry.log_id) {
                    batch.logs.push(entry.log_id);
                }
                batch.bytes += entry.payload.len();
                batch.entries.push(entry);
                if batch.deadline.is_none() {
                    batch.deadline = Some(Instant::now() + config.flush_window);
                }
                if batch.bytes >= config.flush_bytes {
                    flush(&mut batch, &mut seq, &uploads, &uploaded, &ctx).await;
                }
            }
        }
    }
}

async fn flush(
    batch: &mut Batch,
    seq: &mut u64,
    uploads: &Arc<Semaphore>,
    uploaded: &mpsc::UnboundedSender<Uploaded>,
    ctx: &Arc<UploadCtx>,
) {
    let taken = std::mem::take(batch);
    if taken.entries.is_empty() {
        return;
    }
    *seq += 1;
    let seq = *seq;
    // Waiting here for an upload slot pushes back on the batcher, which is what bounds the
    // number of objects in flight.
    let Ok(slot) = uploads.clone().acquire_owned().await else { return };
    let uploaded = uploaded.clone();
    let ctx = ctx.clone();
    tokio::spawn(async move {
        let outcome = upload(&ctx, &taken.entries).await;
        drop(slot);
        let _ = uploaded.send(Uploaded { seq, outcome, entries: taken.entries });
    });
}

/// A2: builds the WAL object and writes it under a new name.
async fn upload(ctx: &UploadCtx, entries: &[PendingEntry]) -> Result<(String, Vec<SectionSummary>), String> {
    let mut builder = WalObjectBuilder::new();
    for e in entries {
        builder.add_entry(e.log_id, e.payload.clone(), e.record_count).map_err(|e| e.to_string())?;
    }
    let built = builder.build().map_err(|e| e.to_string())?;
    let name = wal_object_name(ctx.clock.now_ms(), &ctx.tokens.new_token());
    let path = ObjectPath::new(name.clone()).map_err(|e| e.to_string())?;
    ctx.objects.put(&path, built.bytes).await.map_err(|e| e.to_string())?;
    Ok((name, built.sections))
}

/// Receives uploads in any order and hands their log sections to the per-log publishers in
/// flush order.
async fn run_publisher(mut rx: mpsc::UnboundedReceiver<Uploaded>, meta: Arc<dyn MetaStore>) {
    let mut next = 1u64;
    let mut waiting: BTreeMap<u64, Uploaded> = BTreeMap::new();
    let mut logs: HashMap<LogId, mpsc::UnboundedSender<IndexJob>> = HashMap::new();
    let mut log_tasks = Vec::new();
    while let Some(up) = rx.recv().await {
        waiting.insert(up.seq, up);
        while let Some(up) = waiting.remove(&next) {
            next += 1;
            dispatch(up, &meta, &mut logs, &mut log_tasks);
        }
    }
    drop(logs);
    for t in log_tasks {
        let _ = t.await;
    }
}

fn dispatch(
    up: Uploaded,
    meta: &Arc<dyn MetaStore>,
    logs: &mut HashMap<LogId, mpsc::UnboundedSender<IndexJob>>,
    log_tasks: &mut Vec<JoinHandle<()>>,
) {
    let (name, sections) = match up.outcome {
        Ok(ok) => ok,
        Err(reason) => {
            // The spec: no index record for an object that failed to write, and none of its
            // entries reported appended.
            for e in up.entries {
                let _ = e.reply.send(Err(AppendError::ObjectWriteFailed(reason.clone())));
            }
            return;
        }
    };
    let mut by_log: HashMap<LogId, Vec<PendingEntry>> = HashMap::new();
    for e in up.entries {
        by_log.entry(e.log_id).or_default().push(e);
    }
    for section in sections {
        let entries = by_log.remove(&section.log_id).unwrap_or_default();
        let job = match EntryIndex::raw(&name, &section) {
            Ok(value) => IndexJob {
                value: Bytes::from(value.encode()),
                record_count: section.record_count,
                payload_bytes: section.payload_bytes,
                entries,
            },
            Err(e) => {
                for entry in entries {
                    let _ = entry.reply.send(Err(AppendError::InvalidInput(e.to_string())));
                }
                continue;
            }
        };
        let tx = logs.entry(section.log_id).or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            log_tasks.push(tokio::spawn(run_log_publisher(section.log_id, rx, meta.clone())));
            tx
        });
        let _ = tx.send(job);
    }
}

/// A3 and A4 for one log: one sequenced put per log section, in flush order.
async fn run_log_publisher(
    log_id: LogId,
    mut rx: mpsc::UnboundedReceiver<IndexJob>,
    meta: Arc<dyn MetaStore>,
) {
    let partition = keys::partition(log_id);
    let prefix = keys::index_prefix(log_id);
    while let Some(job) = rx.recv().await {
        // Stop publishing as soon as the session behind the lease ended (spec SHOULD).
        if job.entries.iter().any(|e| e.lease.is_lost()) {
            for e in job.entries {
                let _ = e.reply.send(Err(AppendError::LeaseLost { log_id }));
            }
            continue;
        }
        let result =
            meta.sequenced_put(&partition, &prefix, &[job.record_count, job.payload_bytes], job.value).await;
        match result {
            Ok(written) => match IndexKey::parse(&written.key) {
                Ok(key) if key.end_offset >= job.record_count => {
                    let mut offset = key.end_offset - job.record_count;
                    for e in job.entries {
                        let ack = AppendAck {
                            log_id,
                            offset,
                            record_count: e.record_count,
                            timestamp_ms: written.created_ms,
                        };
                        offset += u64::from(e.record_count);
                        let _ = e.reply.send(Ok(ack));
                    }
                }
                other => {
                    let reason = match other {
                        Err(e) => format!("the store returned key {:?}: {e}", written.key),
                        Ok(_) => format!("the store returned key {:?}, below the record count", written.key),
                    };
                    for e in job.entries {
                        let _ =
                            e.reply.send(Err(AppendError::OutcomeUnknown { log_id, reason: reason.clone() }));
                    }
                }
            },
            Err(err) => {
                let unknown = err.class() == lakestream_format::ErrorClass::OutcomeUnknown;
                for e in job.entries {
                    let reason = err.to_string();
                    let _ = e.reply.send(Err(if unknown {
                        AppendError::OutcomeUnknown { log_id, reason }
                    } else {
                        AppendError::IndexPutFailed { log_id, reason }
                    }));
                }
            }
        }
    }
}
