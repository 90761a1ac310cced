//! The append path, A1–A4, as a pipeline of tasks:
//!
//! ```text
//! append() ─A1 lease─▶ batcher ──flush──▶ upload tasks (≤ N at once) ──▶ publisher
//!                      groups entries     A2: build + PUT the WAL        A3: one sequenced put per
//!                      by window/size     object under a fresh name      log section, up to K per log
//!                                                                        in flight, in each log's flush
//!                                                                        order; A4: answer in that order
//! ```
//!
//! A WAL object closes when its payload reaches `flush_bytes`, when its window passes, or —
//! with `flush_when_idle` (the default) — at once when none of the writer's objects is
//! uploading: group commit, where the next object gathers what arrives during the current
//! uploads and closes when they end. At low load an acknowledgement costs one PUT and one
//! index put and waits for no window; under load uploads overlap, so objects fill up and hold
//! many logs (their payloads grouped by log, so that a reader range-reads one log's bytes).
//! Uploads run in parallel, so throughput is not bound by one PUT's latency.
//!
//! The publisher keeps, for each log, the objects holding it in flush order, and issues a
//! log's index puts in that order, up to `max_index_puts_in_flight_per_log` (K) at once when
//! the store commits sequenced puts in the order they are issued (Oxia: one ordered write
//! stream per shard; the put is queued at the call), else one at a time: one writer's appends
//! to a log take offsets in the order they were flushed. Entries are answered in issue order.
//! When a put fails or its outcome is unknown, its entries get that error, and the puts
//! already issued behind it are not acknowledged even if they commit (their entries get
//! [`AppendError::OutcomeUnknown`]): a caller retrying the failed entries is never told that
//! later entries were appended before them. The log issues nothing more until those drained.
//! Logs do not wait for each other: a slow upload or put holds back only its own logs. The
//! index puts of one object's sections are issued together, without yielding, so a metadata
//! store that batches (Oxia: put-only calls queued together share one request per shard)
//! carries them in one round trip. A log's state is dropped once nothing of it is pending, so
//! idle logs cost no memory and no task.
//!
//! An entry's future resolves only after its log's index record committed (A4), with
//! [`AppendError::OutcomeUnknown`] when the put's outcome is unknown, and with a failure —
//! never an index record — when the object write failed.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use lakestream_format::entry_index::EntryIndex;
use lakestream_format::keys::{self, IndexKey};
use lakestream_format::wal::{SectionSummary, WalObjectBuilder};
use lakestream_format::{Clock, LogId, Offset};
use lakestream_meta::MetaStore;
use lakestream_meta::lease::TokenSource;
use lakestream_objstore::{ObjectPath, ObjectStore};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::{Backpressure, WriterConfig};
use crate::error::AppendError;
use crate::leases::{HeldLease, Leases, Unsettled};
use crate::naming::wal_object_name;
use crate::stats::{Counters, PutOutcome};

/// A group of entries handed to the writer whose results are still to come.
#[derive(Debug)]
pub struct PendingAppend {
    receivers: Vec<oneshot::Receiver<Result<AppendAck, AppendError>>>,
}

impl PendingAppend {
    /// Each entry's result, in order, once the group is acknowledged or failed.
    pub async fn acks(self) -> Vec<Result<AppendAck, AppendError>> {
        let mut results = Vec::with_capacity(self.receivers.len());
        for rx in self.receivers {
            results.push(rx.await.unwrap_or(Err(AppendError::Closed)));
        }
        results
    }
}

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

/// A caller's last check before a group's index put: given the name of the WAL object that
/// holds the group, it runs in the publisher, after every earlier index put of this writer to
/// the log has completed and before the group's own. An error fails the group unpublished.
pub type PublishGate = Box<dyn FnOnce(String) -> BoxFuture<'static, Result<(), AppendError>> + Send>;

/// Conditions on a group of entries ([`Writer::append_many_with`]). A group with a condition
/// gets a log section (and so an index put) of its own, so that its failing condition fails
/// no other request's entries.
#[derive(Default)]
pub struct AppendOptions {
    /// Append only if the log's next offset is this one when the group's index put is made;
    /// else fail with [`AppendError::OffsetMismatch`] and write nothing. The check reads the
    /// log's last index record in the publisher, after this writer's earlier puts to the log
    /// completed and before the group's put: it is linearizable with every append this writer
    /// makes to the log. Appends to the same log through another writer at the same moment
    /// are not ordered against it (the sequenced put takes no condition).
    pub expect_next_offset: Option<u64>,
    /// A check to run just before the index put (see [`PublishGate`]).
    pub before_publish: Option<PublishGate>,
}

impl AppendOptions {
    fn is_conditional(&self) -> bool {
        self.expect_next_offset.is_some() || self.before_publish.is_some()
    }
}

impl std::fmt::Debug for AppendOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppendOptions")
            .field("expect_next_offset", &self.expect_next_offset)
            .field("before_publish", &self.before_publish.is_some())
            .finish()
    }
}

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
    /// A group's conditions, carried by its first entry.
    condition: Option<AppendOptions>,
}

#[derive(Debug)]
enum BatcherMsg {
    Entry(PendingEntry),
    /// Entries of one log that must share an object (and so one index put).
    Group(Vec<PendingEntry>),
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
    /// The WAL object's name.
    object: String,
    /// The conditions of the (one) group in the section, if it has any.
    condition: Option<AppendOptions>,
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
    stats: Arc<Counters>,
}

impl Writer {
    /// Starts a writer. Must be called inside a Tokio runtime.
    pub fn start(config: WriterConfig, deps: WriterDeps) -> Result<Writer, crate::config::ConfigError> {
        config.validate()?;
        let leases = Arc::new(Leases::new(
            deps.meta.clone(),
            deps.tokens.clone(),
            config.session_timeout,
            config.lease_idle_release,
        ));
        let (batcher_tx, batcher_rx) = mpsc::unbounded_channel();
        let (uploaded_tx, uploaded_rx) = mpsc::unbounded_channel();
        let stats = Arc::new(Counters::default());
        let upload = Arc::new(UploadCtx {
            objects: deps.objects,
            clock: deps.clock,
            tokens: deps.tokens,
            stats: stats.clone(),
            upload_ended: Notify::new(),
        });
        let batcher = tokio::spawn(run_batcher(config.clone(), batcher_rx, uploaded_tx, upload));
        let publisher = tokio::spawn(run_publisher(
            uploaded_rx,
            deps.meta.clone(),
            leases.clone(),
            stats.clone(),
            config.max_index_puts_in_flight_per_log,
        ));
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
                stats,
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
        self.inner.leases.release_idle(tokio::time::Instant::now(), Some(idle)).await
    }

    /// How many write leases the writer has acquired since it started (each costs a lease
    /// record put and a fence read; a sparse log should not pay them per append).
    pub fn lease_acquisitions(&self) -> u64 {
        self.inner.leases.acquisitions()
    }

    /// The logs whose write lease this writer holds now.
    pub async fn leased_logs(&self) -> Vec<LogId> {
        self.inner.leases.held().await
    }

    /// What the writer has done since it started: WAL objects written (count, sizes, logs
    /// per object) and index puts by outcome. Cheap: a few atomic loads.
    pub fn stats(&self) -> crate::stats::WriterStats {
        self.inner.stats.snapshot()
    }

    /// The log's next offset as the metadata store has it now: the end offset of its last
    /// index record, 0 if it has none.
    pub async fn next_offset(&self, log_id: LogId) -> Result<u64, AppendError> {
        log_next_offset(log_id, self.inner.meta.as_ref()).await
    }

    /// The writer's settings.
    pub fn config(&self) -> &WriterConfig {
        &self.inner.config
    }

    pub(crate) fn meta(&self) -> &Arc<dyn MetaStore> {
        &self.inner.meta
    }

    /// Keeps `lease` from being released while `change`, started under it, has an unknown
    /// outcome ([`crate::leases`]).
    pub(crate) fn pin_unsettled(&self, lease: &HeldLease, change: Unsettled) {
        self.inner.leases.pin_unsettled(lease, change);
    }

    /// How many write leases are kept now because a change under them has an unknown outcome
    /// that no read has shown yet.
    pub fn unsettled_leases(&self) -> usize {
        self.inner.leases.pinned_count()
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

    /// Appends several entries to `log_id` as one unit: they go into the same WAL object, in
    /// one log section, so they are published by one sequenced put and commit all or none, at
    /// contiguous offsets in the given order (as a producer's request expects). Each entry
    /// gets its own result, in order; all succeed or all fail alike.
    pub async fn append_many(
        &self,
        log_id: LogId,
        entries: impl IntoIterator<Item = (Bytes, u32)>,
    ) -> Vec<Result<AppendAck, AppendError>> {
        self.append_many_with(log_id, entries, AppendOptions::default()).await
    }

    /// [`Writer::append_many`] under conditions: an expected next offset (a conditional
    /// append) and a caller's check just before the index put.
    pub async fn append_many_with(
        &self,
        log_id: LogId,
        entries: impl IntoIterator<Item = (Bytes, u32)>,
        options: AppendOptions,
    ) -> Vec<Result<AppendAck, AppendError>> {
        let entries: Vec<(Bytes, u32)> = entries.into_iter().collect();
        let count = entries.len();
        match self.enqueue_many_with(log_id, entries, options).await {
            Ok(pending) => pending.acks().await,
            Err(e) => (0..count).map(|_| Err(e.clone())).collect(),
        }
    }

    /// [`Writer::append_many_with`] in two steps, for pipelining: returns once the group is
    /// checked and handed to the batcher, which fixes its order among this writer's appends
    /// to the log (groups handed over one after another commit in that order); the returned
    /// [`PendingAppend`] resolves with the results.
    pub async fn enqueue_many_with(
        &self,
        log_id: LogId,
        entries: Vec<(Bytes, u32)>,
        options: AppendOptions,
    ) -> Result<PendingAppend, AppendError> {
        Ok(PendingAppend { receivers: self.enqueue_group(log_id, entries, options).await? })
    }

    /// Validates a group of entries for one log, takes the in-flight bound for all of them at
    /// once and the log's lease (A1), and hands them to the batcher as one unit.
    async fn enqueue_group(
        &self,
        log_id: LogId,
        entries: Vec<(Bytes, u32)>,
        options: AppendOptions,
    ) -> Result<Vec<oneshot::Receiver<Result<AppendAck, AppendError>>>, AppendError> {
        let inner = &self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Err(AppendError::Closed);
        }
        for (payload, record_count) in &entries {
            validate_entry(&inner.config, log_id, payload, *record_count)?;
        }
        let total: usize = entries.iter().map(|(p, _)| p.len().max(1)).sum();
        if total > inner.config.max_in_flight_bytes {
            return Err(AppendError::InvalidInput(format!(
                "a request of {total} bytes for one log exceeds max_in_flight_bytes ({}): it must \
                 commit as one unit",
                inner.config.max_in_flight_bytes
            )));
        }
        let permit = self.admit(total).await?;
        let lease = inner.leases.ensure(log_id).await?; // A1
        let mut group = Vec::with_capacity(entries.len());
        let mut receivers = Vec::with_capacity(entries.len());
        let mut permit = permit;
        let mut condition = options.is_conditional().then_some(options);
        for (payload, record_count) in entries {
            let (reply, rx) = oneshot::channel();
            // One permit for the whole group, held by its first entry: every entry of the
            // group is answered at once.
            let entry = PendingEntry {
                log_id,
                payload,
                record_count,
                lease: lease.clone(),
                reply,
                _permit: permit.take(),
                condition: condition.take(),
            };
            group.push(entry);
            receivers.push(rx);
        }
        inner.batcher.send(BatcherMsg::Group(group)).map_err(|_| AppendError::Closed)?;
        Ok(receivers)
    }

    /// Takes `bytes` of the in-flight bound, waiting or failing as configured.
    async fn admit(&self, bytes: usize) -> Result<Option<OwnedSemaphorePermit>, AppendError> {
        let inner = &self.inner;
        let weight = u32::try_from(bytes.max(1)).unwrap_or(u32::MAX);
        Ok(match inner.config.backpressure {
            Backpressure::Wait => inner.in_flight.clone().acquire_many_owned(weight).await.ok(),
            Backpressure::FailFast => match inner.in_flight.clone().try_acquire_many_owned(weight) {
                Ok(p) => Some(p),
                Err(tokio::sync::TryAcquireError::NoPermits) => return Err(AppendError::Backpressure),
                Err(tokio::sync::TryAcquireError::Closed) => return Err(AppendError::Closed),
            },
        })
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
        validate_entry(&inner.config, log_id, &payload, record_count)?;
        // Bound memory: hold one permit per payload byte until the entry is acknowledged.
        let permit = self.admit(payload.len()).await?;
        let lease = inner.leases.ensure(log_id).await?; // A1
        let (reply, rx) = oneshot::channel();
        let entry =
            PendingEntry { log_id, payload, record_count, lease, reply, _permit: permit, condition: None };
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

/// The checks every entry passes before it is accepted.
fn validate_entry(
    config: &WriterConfig,
    log_id: LogId,
    payload: &Bytes,
    record_count: u32,
) -> Result<(), AppendError> {
    if record_count == 0 {
        return Err(AppendError::InvalidInput("an entry must hold at least one record".into()));
    }
    if record_count > i32::MAX as u32 {
        return Err(AppendError::InvalidInput(format!("record count {record_count} exceeds 2^31-1")));
    }
    if payload.len() > config.max_entry_bytes {
        return Err(AppendError::InvalidInput(format!(
            "entry of {} bytes exceeds max_entry_bytes ({})",
            payload.len(),
            config.max_entry_bytes
        )));
    }
    if log_id > LogId::MAX {
        return Err(AppendError::InvalidInput(format!("log id {log_id} exceeds 2^63-1")));
    }
    Ok(())
}

#[derive(Debug)]
struct UploadCtx {
    objects: Arc<dyn ObjectStore>,
    clock: Arc<dyn Clock>,
    tokens: Arc<dyn TokenSource>,
    stats: Arc<Counters>,
    /// Signalled each time an upload ends (its slot given back): an open batch waiting for
    /// the uploads to end (`flush_when_idle`) may close.
    upload_ended: Notify,
}

/// The open batch: entries in acceptance order and the logs they touch.
#[derive(Debug, Default)]
struct Batch {
    entries: Vec<PendingEntry>,
    /// The logs, for membership tests (objects hold hundreds).
    logs: HashSet<LogId>,
    /// The logs in the order of their first entry: the object's section order.
    log_order: Vec<LogId>,
    bytes: usize,
    deadline: Option<Instant>,
}

async fn run_batcher(
    config: WriterConfig,
    mut rx: mpsc::UnboundedReceiver<BatcherMsg>,
    publisher: mpsc::UnboundedSender<PublisherMsg>,
    ctx: Arc<UploadCtx>,
) {
    let slots = config.upload_concurrency();
    let uploads = Arc::new(Semaphore::new(slots));
    let mut batch = Batch::default();
    let mut seq = 0u64;
    loop {
        let deadline = batch.deadline;
        let waits_for_uploads = config.flush_when_idle && !batch.entries.is_empty();
        let msg = if waits_for_uploads && uploads.available_permits() == slots {
            // Nothing uploading: the batch closes now, with whatever has already arrived (but
            // not later than its window, however fast entries keep arriving).
            let window_passed = deadline.is_some_and(|d| Instant::now() >= d);
            match rx.try_recv() {
                Ok(msg) if !window_passed => Some(msg),
                Ok(msg) => {
                    flush(&mut batch, &mut seq, &uploads, &publisher, &ctx).await;
                    Some(msg)
                }
                Err(mpsc::error::TryRecvError::Empty) => {
                    flush(&mut batch, &mut seq, &uploads, &publisher, &ctx).await;
                    continue;
                }
                Err(mpsc::error::TryRecvError::Disconnected) => None,
            }
        } else {
            tokio::select! {
                msg = rx.recv() => msg,
                _ = async { tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)).await }, if deadline.is_some() => {
                    flush(&mut batch, &mut seq, &uploads, &publisher, &ctx).await;
                    continue;
                }
                // An upload ended: the loop looks again whether any is left.
                () = ctx.upload_ended.notified(), if waits_for_uploads => continue,
            }
        };
        match msg {
            None | Some(BatcherMsg::Close) => {
                flush(&mut batch, &mut seq, &uploads, &publisher, &ctx).await;
                return;
            }
            Some(BatcherMsg::Flush(done)) => {
                flush(&mut batch, &mut seq, &uploads, &publisher, &ctx).await;
                let _ = done.send(());
            }
            Some(BatcherMsg::Entry(entry)) => {
                accept(vec![entry], &config, &mut batch, &mut seq, &uploads, &publisher, &ctx).await;
            }
            Some(BatcherMsg::Group(group)) => {
                accept(group, &config, &mut batch, &mut seq, &uploads, &publisher, &ctx).await;
            }
        }
    }
}

/// Adds entries of one log to the open batch, all into the same object: the batch is flushed
/// first if they would not fit (a group larger than `flush_bytes` gets an object of its own).
async fn accept(
    entries: Vec<PendingEntry>,
    config: &WriterConfig,
    batch: &mut Batch,
    seq: &mut u64,
    uploads: &Arc<Semaphore>,
    publisher: &mpsc::UnboundedSender<PublisherMsg>,
    ctx: &Arc<UploadCtx>,
) {
    let Some(log_id) = entries.first().map(|e| e.log_id) else { return };
    let conditional = entries.iter().any(|e| e.condition.is_some());
    let bytes: usize = entries.iter().map(|e| e.payload.len()).sum();
    let new_log = !batch.logs.contains(&log_id);
    let too_many_logs = new_log && batch.logs.len() >= config.max_logs_per_object;
    let too_big = !batch.entries.is_empty() && batch.bytes + bytes > config.flush_bytes;
    // A conditional group's section holds it alone: its condition can fail only its entries.
    let shares_section = conditional && !new_log;
    if too_many_logs || too_big || shares_section {
        flush(batch, seq, uploads, publisher, ctx).await;
    }
    if batch.logs.insert(log_id) {
        batch.log_order.push(log_id);
    }
    batch.bytes += bytes;
    batch.entries.extend(entries);
    if batch.deadline.is_none() {
        batch.deadline = Some(Instant::now() + config.flush_window);
    }
    if batch.bytes >= config.flush_bytes || conditional {
        flush(batch, seq, uploads, publisher, ctx).await;
    }
}

async fn flush(
    batch: &mut Batch,
    seq: &mut u64,
    uploads: &Arc<Semaphore>,
    publisher: &mpsc::UnboundedSender<PublisherMsg>,
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
    // The publisher learns the object's place in each of its logs before the upload can
    // report: it publishes each log's sections in this order.
    let _ = publisher.send(PublisherMsg::Flushed { seq, logs: taken.log_order.clone() });
    let publisher = publisher.clone();
    let ctx = ctx.clone();
    tokio::spawn(async move {
        let mut entries = taken.entries;
        let outcome = upload(&ctx, &mut entries, &taken.log_order).await;
        if outcome.is_err() {
            ctx.stats.object_failed();
        }
        drop(slot);
        ctx.upload_ended.notify_one();
        let _ = publisher.send(PublisherMsg::Uploaded(Uploaded { seq, outcome, entries }));
    });
}

/// A2: builds the WAL object, its payloads grouped by log (each log's in append order), and
/// writes it under a new name. Reorders `entries` the same way, so that they line up with the
/// sections' entries.
async fn upload(
    ctx: &UploadCtx,
    entries: &mut [PendingEntry],
    log_order: &[LogId],
) -> Result<(String, Vec<SectionSummary>), String> {
    let rank: HashMap<LogId, usize> = log_order.iter().enumerate().map(|(i, log)| (*log, i)).collect();
    // Stable: a log's entries keep their order.
    entries.sort_by_key(|e| rank.get(&e.log_id).copied().unwrap_or(usize::MAX));
    let mut builder = WalObjectBuilder::new();
    for e in entries.iter() {
        builder.add_entry(e.log_id, e.payload.clone(), e.record_count).map_err(|e| e.to_string())?;
    }
    let built = builder.build().map_err(|e| e.to_string())?;
    let name = wal_object_name(ctx.clock.now_ms(), &ctx.tokens.new_token());
    let path = ObjectPath::new(name.clone()).map_err(|e| e.to_string())?;
    let size = built.bytes.len();
    ctx.objects.put(&path, built.bytes).await.map_err(|e| e.to_string())?;
    ctx.stats.object_written(size, built.sections.len());
    Ok((name, built.sections))
}

/// What the publisher hears from the batcher and the uploads.
#[derive(Debug)]
enum PublisherMsg {
    /// An object was closed with these logs (in section order); sent before its upload starts.
    Flushed { seq: u64, logs: Vec<LogId> },
    /// Its upload finished (or failed).
    Uploaded(Uploaded),
}

/// One object's place in a log's queue.
#[derive(Debug)]
enum Slot {
    /// Still uploading.
    Uploading,
    /// Uploaded: the section's index put, ready to publish.
    Ready(IndexJob),
    /// Nothing to publish (the upload failed; its entries were answered).
    Skip,
}

/// How an index put ended (or why it was not made).
#[derive(Debug)]
enum PutResult {
    /// The store answered.
    Store(lakestream_meta::MetaResult<lakestream_meta::WriteResult>),
    /// Not made: the session behind the lease ended first.
    LeaseLost,
    /// Not made: the section's condition did not hold (or its gate refused).
    Refused(AppendError),
}

/// An index put issued and not yet answered to its entries.
#[derive(Debug)]
struct IssuedPut {
    id: u64,
    record_count: u64,
    /// The record's value, once the put is issued: after an unknown outcome, a read of the
    /// log finds it if the put committed.
    value: Option<Bytes>,
    entries: Vec<PendingEntry>,
    /// A conditional section's put: nothing else of the log is issued while it is in flight,
    /// so that the condition it checked still holds when its put is made.
    exclusive: bool,
    /// Set when the put completes; entries are answered once every earlier put of the log
    /// has been.
    result: Option<PutResult>,
}

/// A log's pending objects, in flush order, and its index puts in flight, in issue order.
#[derive(Debug, Default)]
struct LogQueue {
    objects: VecDeque<(u64, Slot)>,
    issued: VecDeque<IssuedPut>,
    /// An index put of the log failed (or its outcome is unknown) while others were issued
    /// behind it: no more are issued, and those are not acknowledged, until they drained.
    halted: bool,
}

/// What the publisher shares with the puts it starts.
#[derive(Debug)]
struct PublishCtx {
    meta: Arc<dyn MetaStore>,
    /// Where a lease under which a put has an unknown outcome is pinned.
    leases: Arc<Leases>,
    stats: Arc<Counters>,
    /// Index puts in flight per log: the configured number if the store commits puts in the
    /// order they are issued, else 1.
    puts_per_log: usize,
}

type PutFuture = BoxFuture<'static, (LogId, u64, PutResult)>;

/// A3 and A4: publishes each log's sections in the log's flush order, up to `puts_per_log`
/// puts in flight per log, issued in that order (so that the store, committing a shard's
/// puts in issue order, gives them offsets in that order); logs are independent of each
/// other. Ends once the batcher and every upload are done and every put has completed.
async fn run_publisher(
    mut rx: mpsc::UnboundedReceiver<PublisherMsg>,
    meta: Arc<dyn MetaStore>,
    leases: Arc<Leases>,
    stats: Arc<Counters>,
    max_puts_per_log: usize,
) {
    let puts_per_log = if meta.sequenced_puts_commit_in_call_order() { max_puts_per_log.max(1) } else { 1 };
    let ctx = PublishCtx { meta, leases, stats, puts_per_log };
    let mut logs: HashMap<LogId, LogQueue> = HashMap::new();
    let mut puts: FuturesUnordered<PutFuture> = FuturesUnordered::new();
    let mut next_id = 0u64;
    let mut open = true;
    while open || !puts.is_empty() {
        tokio::select! {
            msg = rx.recv(), if open => match msg {
                Some(PublisherMsg::Flushed { seq, logs: in_object }) => {
                    for log_id in in_object {
                        logs.entry(log_id).or_default().objects.push_back((seq, Slot::Uploading));
                    }
                }
                Some(PublisherMsg::Uploaded(up)) => {
                    // Every section of the object is issued here, without yielding: a store
                    // that batches (Oxia: one request per shard) carries them together.
                    for log_id in settle(up, &mut logs) {
                        publish_next(log_id, &mut logs, &mut puts, &mut next_id, &ctx);
                    }
                }
                None => open = false,
            },
            Some((log_id, id, result)) = puts.next(), if !puts.is_empty() => {
                if let Some(queue) = logs.get_mut(&log_id)
                    && let Some(put) = queue.issued.iter_mut().find(|p| p.id == id)
                {
                    put.result = Some(result);
                }
                publish_next(log_id, &mut logs, &mut puts, &mut next_id, &ctx);
            }
        }
    }
}

/// Fills the uploaded object's slot in each of its logs' queues; answers its entries if the
/// upload failed. Returns the object's logs.
fn settle(up: Uploaded, logs: &mut HashMap<LogId, LogQueue>) -> Vec<LogId> {
    let mut slots: HashMap<LogId, Slot> = HashMap::new();
    match up.outcome {
        Err(reason) => {
            // The spec: no index record for an object that failed to write, and none of its
            // entries reported appended.
            for e in up.entries {
                slots.entry(e.log_id).or_insert(Slot::Skip);
                let _ = e.reply.send(Err(AppendError::ObjectWriteFailed(reason.clone())));
            }
        }
        Ok((name, sections)) => {
            let mut by_log: HashMap<LogId, Vec<PendingEntry>> = HashMap::new();
            for e in up.entries {
                by_log.entry(e.log_id).or_default().push(e);
            }
            for section in sections {
                let mut entries = by_log.remove(&section.log_id).unwrap_or_default();
                let condition = entries.iter_mut().find_map(|e| e.condition.take());
                let slot = match EntryIndex::raw(&name, &section) {
                    Ok(value) => Slot::Ready(IndexJob {
                        object: name.clone(),
                        condition,
                        value: Bytes::from(value.encode()),
                        record_count: section.record_count,
                        payload_bytes: section.payload_bytes,
                        entries,
                    }),
                    Err(e) => {
                        for entry in entries {
                            let _ = entry.reply.send(Err(AppendError::InvalidInput(e.to_string())));
                        }
                        Slot::Skip
                    }
                };
                slots.insert(section.log_id, slot);
            }
        }
    }
    let mut touched = Vec::with_capacity(slots.len());
    for (log_id, slot) in slots {
        if let Some(queue) = logs.get_mut(&log_id)
            && let Some((_, pending)) = queue.objects.iter_mut().find(|(seq, _)| *seq == up.seq)
        {
            *pending = slot;
            touched.push(log_id);
        }
    }
    touched
}

/// Answers the log's completed puts in issue order, then issues its next puts while fewer
/// than `puts_per_log` are in flight and its oldest objects are uploaded; forgets the log
/// once nothing of it is pending.
fn publish_next(
    log_id: LogId,
    logs: &mut HashMap<LogId, LogQueue>,
    puts: &mut FuturesUnordered<PutFuture>,
    next_id: &mut u64,
    ctx: &PublishCtx,
) {
    let Some(queue) = logs.get_mut(&log_id) else { return };
    loop {
        while queue.issued.front().is_some_and(|p| p.result.is_some()) {
            let Some(put) = queue.issued.pop_front() else { break };
            let halted_before = queue.halted;
            let committed = answer(log_id, put, halted_before, ctx);
            if !committed && !queue.issued.is_empty() {
                queue.halted = true;
            }
        }
        if queue.issued.is_empty() {
            queue.halted = false;
        }
        if queue.halted || queue.issued.len() >= ctx.puts_per_log || queue.issued.iter().any(|p| p.exclusive)
        {
            break;
        }
        match queue.objects.front() {
            Some((_, Slot::Uploading)) | None => break,
            Some((_, Slot::Skip)) => {
                queue.objects.pop_front();
            }
            // A conditional section waits until the log's earlier puts have drained.
            Some((_, Slot::Ready(job))) if job.condition.is_some() && !queue.issued.is_empty() => break,
            Some((_, Slot::Ready(_))) => {
                let Some((_, Slot::Ready(job))) = queue.objects.pop_front() else { break };
                *next_id += 1;
                let id = *next_id;
                // Stop publishing as soon as the session behind the lease ended (spec SHOULD).
                if job.entries.iter().any(|e| e.lease.is_lost()) {
                    queue.issued.push_back(IssuedPut {
                        id,
                        record_count: job.record_count,
                        value: None,
                        entries: job.entries,
                        exclusive: false,
                        result: Some(PutResult::LeaseLost),
                    });
                    continue;
                }
                if let Some(condition) = job.condition {
                    // Checked, then put, with nothing else of the log in flight.
                    let meta = ctx.meta.clone();
                    let (object, value) = (job.object, job.value);
                    let counts = vec![job.record_count, job.payload_bytes];
                    queue.issued.push_back(IssuedPut {
                        id,
                        record_count: job.record_count,
                        value: Some(value.clone()),
                        entries: job.entries,
                        exclusive: true,
                        result: None,
                    });
                    puts.push(Box::pin(async move {
                        if let Err(refusal) = check_condition(log_id, condition, &object, meta.as_ref()).await
                        {
                            return (log_id, id, PutResult::Refused(refusal));
                        }
                        let put = meta.sequenced_put_owned(
                            keys::partition(log_id),
                            keys::index_prefix(log_id),
                            counts,
                            value,
                        );
                        (log_id, id, PutResult::Store(put.await))
                    }));
                    continue;
                }
                // Issued now, in the log's order: the store queues the put at this call.
                let put = ctx.meta.clone().sequenced_put_owned(
                    keys::partition(log_id),
                    keys::index_prefix(log_id),
                    vec![job.record_count, job.payload_bytes],
                    job.value.clone(),
                );
                queue.issued.push_back(IssuedPut {
                    id,
                    record_count: job.record_count,
                    value: Some(job.value),
                    entries: job.entries,
                    exclusive: false,
                    result: None,
                });
                puts.push(Box::pin(async move { (log_id, id, PutResult::Store(put.await)) }));
            }
        }
    }
    if queue.objects.is_empty() && queue.issued.is_empty() {
        logs.remove(&log_id);
    }
}

/// A group's conditions, checked in the publisher right before its index put: no other put of
/// this writer to the log is in flight (a conditional section waits for the log's puts to
/// drain and holds back those behind it), so the log's next offset read here is the one the
/// put will extend (unless another writer appends to the log at the same moment).
async fn check_condition(
    log_id: LogId,
    condition: AppendOptions,
    object: &str,
    meta: &dyn MetaStore,
) -> Result<(), AppendError> {
    if let Some(expected) = condition.expect_next_offset {
        let actual = log_next_offset(log_id, meta).await?;
        if actual != expected {
            return Err(AppendError::OffsetMismatch { log_id, expected, actual });
        }
    }
    if let Some(gate) = condition.before_publish {
        gate(object.to_owned()).await?;
    }
    Ok(())
}

/// The log's next offset: the end offset of its last index record (0 if it has none), as the
/// reader computes it.
async fn log_next_offset(log_id: LogId, meta: &dyn MetaStore) -> Result<u64, AppendError> {
    let not_checked = |reason: String| AppendError::IndexPutFailed { log_id, reason };
    let last = meta
        .get_cmp(&keys::partition(log_id), &keys::last_key(log_id), lakestream_meta::Comparison::Floor)
        .await
        .map_err(|e| not_checked(format!("reading the log's next offset for a conditional append: {e}")))?;
    match last.filter(|r| keys::is_index_key_of(&r.key, log_id)) {
        None => Ok(0),
        Some(r) => IndexKey::parse(&r.key)
            .map(|k| k.end_offset)
            .map_err(|e| not_checked(format!("the log's last index key {:?}: {e}", r.key))),
    }
}

/// A4 for one log section: each entry's answer. `behind_a_failure`: an earlier put of the log
/// failed or has an unknown outcome, and this one was issued before that was known; if it
/// committed, its entries are answered [`AppendError::OutcomeUnknown`], not acknowledged, so
/// that a caller retrying the earlier entries is never told that later ones were appended
/// before them. Returns whether the put committed and was acknowledged.
fn answer(log_id: LogId, put: IssuedPut, behind_a_failure: bool, ctx: &PublishCtx) -> bool {
    let stats = &ctx.stats;
    let IssuedPut { record_count, value, entries, result, .. } = put;
    let fail_all = |entries: Vec<PendingEntry>, error: AppendError| {
        for e in entries {
            let _ = e.reply.send(Err(error.clone()));
        }
    };
    match result {
        None => {
            fail_all(entries, AppendError::Closed);
            false
        }
        Some(PutResult::LeaseLost) => {
            fail_all(entries, AppendError::LeaseLost { log_id });
            false
        }
        Some(PutResult::Refused(refusal)) => {
            fail_all(entries, refusal);
            false
        }
        Some(PutResult::Store(Ok(written))) => match IndexKey::parse(&written.key) {
            Ok(key) if key.end_offset >= record_count => {
                stats.index_put(PutOutcome::Committed);
                let start = key.end_offset - record_count;
                if behind_a_failure {
                    let reason = format!(
                        "its index record committed at offsets {start}..{} after an earlier index put of \
                         the log failed or has an unknown outcome; not acknowledged, so that a retry of \
                         the earlier entries is not ordered before entries reported appended",
                        key.end_offset
                    );
                    fail_all(entries, AppendError::OutcomeUnknown { log_id, reason });
                    return false;
                }
                let mut offset = start;
                for e in entries {
                    let ack = AppendAck {
                        log_id,
                        offset,
                        record_count: e.record_count,
                        timestamp_ms: written.created_ms,
                    };
                    offset += u64::from(e.record_count);
                    let _ = e.reply.send(Ok(ack));
                }
                true
            }
            other => {
                stats.index_put(PutOutcome::Unknown);
                let reason = match other {
                    Err(e) => format!("the store returned key {:?}: {e}", written.key),
                    Ok(_) => format!("the store returned key {:?}, below the record count", written.key),
                };
                fail_all(entries, AppendError::OutcomeUnknown { log_id, reason });
                false
            }
        },
        Some(PutResult::Store(Err(err))) => {
            let unknown = err.class() == lakestream_format::ErrorClass::OutcomeUnknown;
            stats.index_put(if unknown { PutOutcome::Unknown } else { PutOutcome::Failed });
            if let (true, Some(value)) = (unknown, value) {
                // The put may still commit: the leases it ran under must not be released
                // before its outcome is known (spec "Leases").
                let mut pinned: Vec<&HeldLease> = Vec::new();
                for e in &entries {
                    if !pinned.iter().any(|p| p.same_lease(&e.lease)) {
                        ctx.leases
                            .pin_unsettled(&e.lease, Unsettled::IndexPut { log_id, value: value.clone() });
                        pinned.push(&e.lease);
                    }
                }
            }
            let reason = err.to_string();
            fail_all(
                entries,
                if unknown {
                    AppendError::OutcomeUnknown { log_id, reason }
                } else {
                    AppendError::IndexPutFailed { log_id, reason }
                },
            );
            false
        }
    }
}
