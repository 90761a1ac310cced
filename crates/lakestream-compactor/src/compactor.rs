//! The [`Compactor`]: claims, C2 (data), C3 (install), C4 (retire), C5 (progress), and the
//! one-shot `compact_once`.
//!
//! Each step is a public method so that tests and the simulation can stop between any two of
//! them, as a crash would. `compact_log` runs them in order:
//!
//! 1. **claim** the log: an ephemeral record `/lakestream-compaction-claims/{L}` in P(L),
//!    created through the compactor's session. At most one compactor holds it, so compaction
//!    index updates of a log never run concurrently, across processes (spec MUST). It
//!    vanishes with the session, so a crashed compactor never blocks a log for longer than
//!    the session timeout.
//! 2. **plan** ([`crate::plan`]), finishing interrupted C4 steps first.
//! 3. **prepare** (C2): read the range's entries from its WAL objects (the private `fetch` module: in a
//!    pass over several logs, each object once for all of them, the next objects fetched
//!    while the current row groups encode), write Parquet files and companions.
//! 4. **finish**: under a write lease taken through the claim's session, install (C3),
//!    retire (C4) and record progress (C5); repeat on failure; stop when the session ends
//!    or the log is fenced.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use lakestream_format::compacted::{self, Binding, CompactedFileWriter};
use lakestream_format::companion::{self, CompanionRow, CompanionWriter};
use lakestream_format::entry_index::{self, EntryIndex, IndexValue, ParquetRange};
use lakestream_format::file_index::{FileIndex, FileIndexEntry};
use lakestream_format::keys;
use lakestream_format::native::NATIVE_BINDING;
use lakestream_format::retry::{Backoff, BackoffPolicy};
use lakestream_format::{Clock, Entry, LogId, LogRef, Offset};
use lakestream_meta::lease::{self, TokenSource, WriteLease};
use lakestream_meta::{
    CasError, CasOptions, CasRecord, Change, Current, MetaError, MetaStore, PutCondition, Session, cas_update,
};
use lakestream_objstore::{ObjectPath, ObjectStore};

use crate::config::CompactorConfig;
use crate::error::{C3_PUT, C4_DELETE_RANGE, C5_PUT, CompactError, CompactResult};
use crate::fetch::{self, Fetched, LogWork};
use crate::ledger;
use crate::names;
use crate::plan::{self, NextRange, PendingRetire, Planning, RangePlan, Thresholds};
use crate::progress::{Backlog, CompactReport, Progress, ProgressFn, RangeReport};
use crate::records::{self, IndexRecord};

/// The components a compactor needs. Time and randomness are injected.
#[derive(Debug, Clone)]
pub struct CompactorDeps {
    /// The metadata store holding the offset index.
    pub meta: Arc<dyn MetaStore>,
    /// The WAL root.
    pub wal: Arc<dyn ObjectStore>,
    /// The compacted root.
    pub compacted: Arc<dyn ObjectStore>,
    /// Wall-clock time: range ages, deadlines, grace periods.
    pub clock: Arc<dyn Clock>,
    /// Fresh UUIDs: compacted file names, lease tokens, claim owners.
    pub tokens: Arc<dyn TokenSource>,
}

/// A compactor. Cheap to clone; clones share the session, the reader and pending work.
#[derive(Debug, Clone)]
pub struct Compactor {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) config: CompactorConfig,
    pub(crate) deps: CompactorDeps,
    session: tokio::sync::Mutex<Option<Arc<dyn Session>>>,
    /// Compactions whose C3 may have taken effect but whose C4 did not complete: retried
    /// with the same range and value before the log is planned again (spec MUST).
    pending: Mutex<HashMap<LogId, Vec<PreparedCompaction>>>,
    /// Row groups being encoded at once, across every log of every pass: one per core.
    /// Encoding is CPU-bound, so more would not go faster, only hold more row groups.
    encoders: Arc<tokio::sync::Semaphore>,
    /// Bytes of full row groups between collection and their upload, across every log:
    /// a log takes its row group's share before encoding it and gives it back once the
    /// encoded bytes are in the file's upload. See [`RowGroupBudget`].
    row_groups: RowGroupBudget,
}

/// The claim on one log's compaction work: an ephemeral record in P(L).
#[derive(Debug)]
pub struct Claim {
    log_id: LogId,
    key: String,
    session: Arc<dyn Session>,
}

impl Claim {
    /// The claimed log.
    pub fn log_id(&self) -> LogId {
        self.log_id
    }

    /// Whether the session behind the claim is still alive; once it ended, another compactor
    /// may hold the claim, and this one must change nothing more.
    pub fn is_live(&self) -> bool {
        !self.session.is_ended()
    }

    /// Deletes the claim record. Call after every change made under it has completed.
    pub async fn release(self, meta: &dyn MetaStore) {
        if let Err(e) = meta.delete(&keys::partition(self.log_id), &self.key).await {
            tracing::debug!(log_id = %self.log_id, error = %e, "releasing a compaction claim failed; it ends with the session");
        }
    }
}

/// The key of a log's compaction claim.
pub fn claim_key(log_id: LogId) -> String {
    format!("/lakestream-compaction-claims/{}", log_id.0)
}

/// A log to compact and the binding of its stream, which names its compacted files
/// (`entrySerDeType` and the Avro record): [`lakestream_format::kafka::KAFKA_BINDING`] for a
/// Kafka topic's stream, [`NATIVE_BINDING`] for every other stream. The caller knows it from
/// the stream's properties: [`lakestream_format::native::binding_of_stream`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionLog {
    /// The log and its stream.
    pub log: LogRef,
    /// The binding of the log's stream.
    pub binding: Binding,
}

impl CompactionLog {
    /// A log of a stream that follows `binding`.
    pub fn new(log: LogRef, binding: Binding) -> Self {
        CompactionLog { log, binding }
    }

    /// A log of a stream that is not a Kafka topic: the native binding.
    pub fn native(log: LogRef) -> Self {
        CompactionLog { log, binding: NATIVE_BINDING }
    }
}

/// One compacted file written in C2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenFile {
    /// The Parquet file's name in the stream's directory.
    pub name: String,
    /// The last offset it holds (its file-index entry).
    pub last_offset: Offset,
    /// Its rows (entries).
    pub rows: u64,
    /// The Parquet file's size.
    pub parquet_bytes: u64,
    /// The companion's size.
    pub companion_bytes: u64,
}

/// A range whose files are written (C2 done): everything C3–C5 need, reusable for retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedCompaction {
    /// The log.
    pub log: LogRef,
    /// The binding its files were written for.
    pub binding: Binding,
    /// The range.
    pub plan: RangePlan,
    /// The files, in offset order.
    pub files: Vec<WrittenFile>,
    /// The PARQUET record's value.
    pub value: Bytes,
    /// After this time C3 must not put the value any more (see `max_compaction_duration`).
    pub deadline_ms: i64,
    /// The payload bytes written to files (entries ending at or below B are left out).
    pub payload_bytes: u64,
}

impl PreparedCompaction {
    /// `K(L, e, c_e)`, the key of the range's last record.
    pub fn key(&self) -> String {
        keys::index_key(self.log.log_id, self.plan.end, self.plan.cumulative_end)
    }

    fn wal_objects(&self) -> impl Iterator<Item = &str> {
        self.plan.records.iter().map(|r| r.wal_object.as_str())
    }
}

/// What step C3 did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallOutcome {
    /// The PARQUET value replaced the RAW value under `K(L, e, c_e)`.
    Installed,
    /// The key already held this very value (an earlier attempt took effect).
    AlreadyInstalled,
    /// The key no longer exists (a hard trim removed it): the step is skipped (spec C3).
    KeyAbsent,
}

impl Compactor {
    /// A compactor over these components.
    pub fn new(config: CompactorConfig, deps: CompactorDeps) -> CompactResult<Compactor> {
        config.validate()?;
        Ok(Compactor {
            inner: Arc::new(Inner {
                deps,
                session: tokio::sync::Mutex::new(None),
                pending: Mutex::new(HashMap::new()),
                encoders: Arc::new(tokio::sync::Semaphore::new(
                    std::thread::available_parallelism().map_or(2, usize::from),
                )),
                row_groups: RowGroupBudget::new(config.row_group_budget_bytes()),
                config,
            }),
        })
    }

    /// The settings.
    pub fn config(&self) -> &CompactorConfig {
        &self.inner.config
    }

    /// The most bytes of row groups that were between collection and upload at once since
    /// the compactor started (at most [`CompactorConfig::row_group_budget_bytes`]).
    pub fn row_group_bytes_high_water(&self) -> u64 {
        self.inner.row_groups.high_water.load(Ordering::Relaxed)
    }

    pub(crate) fn meta(&self) -> &dyn MetaStore {
        self.inner.deps.meta.as_ref()
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.inner.deps.clock.now_ms()
    }

    /// The compactor's live metadata-store session, opened on first use and again after it ended.
    pub async fn session(&self) -> CompactResult<Arc<dyn Session>> {
        let mut slot = self.inner.session.lock().await;
        if let Some(s) = slot.as_ref().filter(|s| !s.is_ended()) {
            return Ok(s.clone());
        }
        let session = self
            .meta()
            .open_session(self.inner.config.session_timeout)
            .await
            .map_err(CompactError::meta(LogId::MAX, "opening a session"))?;
        *slot = Some(session.clone());
        Ok(session)
    }

    /// The id of the current session, if one is open.
    pub async fn session_id(&self) -> Option<String> {
        self.inner.session.lock().await.as_ref().map(|s| s.id())
    }

    /// Claims a log's compaction work; [`CompactError::Busy`] when another compactor holds it.
    pub async fn claim(&self, log_id: LogId) -> CompactResult<Claim> {
        let session = self.session().await?;
        let key = claim_key(log_id);
        let owner = Bytes::from(self.inner.deps.tokens.new_token());
        match session.create_ephemeral(&keys::partition(log_id), &key, owner).await {
            Ok(_) => Ok(Claim { log_id, key, session }),
            Err(MetaError::KeyExists { .. }) => Err(CompactError::Busy { log_id }),
            Err(MetaError::SessionEnded(_)) => Err(CompactError::SessionEnded { log_id }),
            Err(e) => Err(CompactError::meta(log_id, "creating the compaction claim")(e)),
        }
    }

    /// Acquires a write lease on the claimed log through the claim's session, so that the
    /// lease ends when the claim does.
    pub async fn acquire_lease(&self, claim: &Claim) -> CompactResult<WriteLease> {
        let log_id = claim.log_id;
        if !claim.is_live() {
            return Err(CompactError::SessionEnded { log_id });
        }
        let token = self.inner.deps.tokens.new_token();
        lease::acquire(self.meta(), &claim.session, log_id, &token)
            .await
            .map_err(|source| CompactError::Lease { log_id, source })
    }

    /// Plans the log's next compaction from its records, B and the clock.
    pub async fn plan(&self, log_id: LogId) -> CompactResult<(Vec<IndexRecord>, Planning)> {
        let (_, records, planning) = self.plan_with_marker(log_id).await?;
        Ok((records, planning))
    }

    /// [`Compactor::plan`], also answering the trim marker B it planned with.
    async fn plan_with_marker(&self, log_id: LogId) -> CompactResult<(Offset, Vec<IndexRecord>, Planning)> {
        let b = records::trim_marker(self.meta(), log_id).await?;
        let records = records::scan_log(self.meta(), log_id).await?;
        let planning = plan::plan(&records, b, self.now_ms(), self.thresholds());
        Ok((b, records, planning))
    }

    fn thresholds(&self) -> Thresholds {
        Thresholds {
            max_range_bytes: self.inner.config.max_range_bytes,
            max_range_age_ms: CompactorConfig::ms(self.inner.config.max_range_age),
        }
    }

    /// C2: reads the range's entries that end above B and writes them to compacted files with
    /// companions, in the stream's directory, for a stream of the native binding. `None` when
    /// every entry of the range ends at or below B (nothing to keep: hard trim removes those
    /// records).
    pub async fn prepare(&self, log: &LogRef, plan: &RangePlan) -> CompactResult<Option<PreparedCompaction>> {
        self.prepare_as(&CompactionLog::native(log.clone()), plan).await
    }

    /// [`Compactor::prepare`] for a log whose stream follows `log.binding`.
    pub async fn prepare_as(
        &self,
        log: &CompactionLog,
        plan: &RangePlan,
    ) -> CompactResult<Option<PreparedCompaction>> {
        let b = records::trim_marker(self.meta(), log.log.log_id).await?;
        let mut out = self.prepare_many(&[(log, plan, b)]).await;
        out.pop().unwrap_or(Ok(None))
    }

    /// C2 for several logs in one pass, each with its range and the trim marker B it was
    /// planned with: every WAL object is fetched once for all the logs that need it
    /// ([`crate::fetch`]), up to `fetch_bytes` ahead, and each log's rows go into its own
    /// files, whose row groups encode on blocking threads. One result per log, in order.
    pub(crate) async fn prepare_many(
        &self,
        work: &[(&CompactionLog, &RangePlan, Offset)],
    ) -> Vec<CompactResult<Option<PreparedCompaction>>> {
        let started_ms = self.now_ms();
        let deadline_ms =
            started_ms.saturating_add(CompactorConfig::ms(self.inner.config.max_compaction_duration));
        let works: Vec<LogWork<'_>> = work
            .iter()
            .map(|(log, plan, b)| LogWork { log_id: log.log.log_id, plan, trim_marker: *b })
            .collect();
        let mut senders = Vec::with_capacity(works.len());
        let mut consumers = Vec::with_capacity(works.len());
        for (i, (log, plan, b)) in work.iter().enumerate() {
            // One record's entries at a time: they are slices of a fetched object until the
            // log copies them into its row group.
            let (tx, rx) = tokio::sync::mpsc::channel(1);
            senders.push(tx);
            consumers.push(self.consume_range(log, plan, *b, works[i].first_record(), deadline_ms, rx));
        }
        let driver = self.drive_fetches(&works, senders);
        let ((), results) = futures::future::join(driver, futures::future::join_all(consumers)).await;
        results
    }

    /// Fetches the pass's WAL objects in schedule order, up to `fetch_bytes` ahead, and hands
    /// each log the entries of its records. A failed fetch is handed to the logs that needed
    /// it; a log that stopped (its receiver gone) is no longer fetched for.
    async fn drive_fetches(&self, works: &[LogWork<'_>], senders: Vec<RecordSender>) {
        let budget = self.inner.config.fetch_bytes as u64;
        let mut schedule = fetch::schedule(works).into_iter();
        let mut window = Window::default();
        loop {
            // Start fetches while within the budget (always at least one).
            while window.tasks.is_empty() || window.bytes < budget {
                let Some(mut f) = schedule.next() else { break };
                f.needs.retain(|n| !senders[n.log].is_closed());
                let Some(first) = f.needs.first() else { continue };
                let raw = &works[first.log].plan.records[first.record].raw;
                let file_size = raw.file_size.and_then(|s| u64::try_from(s).ok());
                let logs = f.needs.iter().map(|n| works[n.log].log_id).collect();
                let task = tokio::spawn(fetch::run(
                    self.inner.deps.wal.clone(),
                    f.object.clone(),
                    f.whole,
                    file_size,
                    logs,
                ));
                window.bytes += f.bytes;
                window.tasks.push_back((f, task));
            }
            let Some((f, task)) = window.tasks.pop_front() else { break };
            let fetched = match task.await {
                Ok(r) => r.map_err(Arc::new),
                Err(e) => Err(Arc::new(CompactError::Corrupt {
                    log_id: LogId::MAX,
                    what: format!("WAL object {}", f.object),
                    detail: format!("the fetch task failed: {e}"),
                })),
            };
            window.bytes = window.bytes.saturating_sub(f.bytes);
            for need in &f.needs {
                let work = &works[need.log];
                let record = &work.plan.records[need.record];
                let message = match &fetched {
                    Ok(got) => fetch::entries_of(
                        got,
                        work.log_id,
                        &record.raw,
                        record.start,
                        record.created_ms,
                        work.trim_marker,
                    )
                    .map(|entries| (need.record, entries))
                    .map_err(|detail| CompactError::Corrupt {
                        log_id: work.log_id,
                        what: format!(
                            "WAL object {} (named by the record ending at {})",
                            f.object, record.end
                        ),
                        detail,
                    }),
                    Err(e) => Err(CompactError::Fetch { log_id: work.log_id, source: e.clone() }),
                };
                // A log that failed has dropped its receiver: nothing more for it.
                let _ = senders[need.log].send(message).await;
            }
        }
    }

    /// One log's share of [`Compactor::prepare_many`]: its records' entries as the driver
    /// hands them out, in order, into compacted files.
    async fn consume_range(
        &self,
        log: &CompactionLog,
        plan: &RangePlan,
        b: Offset,
        first_record: usize,
        deadline_ms: i64,
        mut entries: tokio::sync::mpsc::Receiver<RecordEntries>,
    ) -> CompactResult<Option<PreparedCompaction>> {
        let (binding, log) = (log.binding, &log.log);
        let log_id = log.log_id;
        if first_record == plan.records.len() || b >= plan.end {
            return Ok(None); // every entry ends at or below B
        }
        let mut files = FilesBuilder::new(self, log, binding);
        let mut expected = first_record;
        while let Some(message) = files.recv(&mut entries).await? {
            let (record_index, got) = message?;
            if record_index != expected {
                return Err(corrupt(
                    log_id,
                    plan,
                    format!("record {record_index} of the range was read before record {expected}"),
                ));
            }
            for (row, payload) in rows_of_record(log_id, plan, record_index, got)? {
                files.push(row, payload).await?;
            }
            expected += 1;
            if expected == plan.records.len() {
                break;
            }
        }
        if expected != plan.records.len() {
            return Err(corrupt(log_id, plan, format!("the read stopped before record {expected}")));
        }
        drop(entries);
        let (written, payload_bytes) = files.finish().await?;
        if written.is_empty() {
            return Ok(None);
        }
        let file_index = FileIndex::new(
            written
                .iter()
                .map(|f| FileIndexEntry { last_offset: f.last_offset, name: f.name.clone() })
                .collect(),
        )
        .map_err(|source| CompactError::Encode { log_id, what: "file index", source })?;
        let range = ParquetRange {
            start: plan.start,
            end: plan.end,
            cumulative_start: plan.cumulative_start,
            cumulative_end: plan.cumulative_end,
        };
        // Never a PARQUET record without a file index (addendum §12 row 5): `parquet` always
        // writes it, and refuses a file index that does not end at e − 1.
        let value = EntryIndex::parquet(range, &file_index)
            .map_err(|source| CompactError::Encode { log_id, what: "PARQUET record", source })?
            .encode();
        Ok(Some(PreparedCompaction {
            log: log.clone(),
            binding,
            plan: plan.clone(),
            files: written,
            value: Bytes::from(value),
            deadline_ms,
            payload_bytes,
        }))
    }

    /// C3: `Get(K(L, e, c_e))`; if present, `Put` the PARQUET value keeping the key. Before it
    /// removes the last RAW record's reference, announces the range's WAL objects in the
    /// retirement ledger (one Put for the range). Never replaces another compaction's PARQUET record, and never puts
    /// after the deadline (the files may be reclaimed as orphans by then).
    pub async fn install(
        &self,
        prepared: &PreparedCompaction,
        lease: &WriteLease,
    ) -> CompactResult<InstallOutcome> {
        let log_id = prepared.log.log_id;
        let partition = keys::partition(log_id);
        let key = prepared.key();
        ensure_live(lease)?;
        let current =
            self.meta().get(&partition, &key).await.map_err(CompactError::meta(log_id, "C3 get"))?;
        let Some(current) = current else {
            // The key is gone. A hard trim does that only to a range at or below B; but a
            // stale compaction (its C1 checked long ago) can find it removed by a later
            // compaction's C4, and its own C4 must then not run over that compaction's record.
            self.check_c1_still_holds(prepared).await?;
            return Ok(InstallOutcome::KeyAbsent);
        };
        if current.value == prepared.value {
            return Ok(InstallOutcome::AlreadyInstalled);
        }
        let decoded = entry_index::decode(&current.value).map_err(|e| CompactError::Corrupt {
            log_id,
            what: format!("index record {key}"),
            detail: e.to_string(),
        })?;
        if let IndexValue::Parquet(_) = decoded {
            return Err(CompactError::AlreadyCompacted { log_id, key });
        }
        if self.now_ms() > prepared.deadline_ms {
            return Err(CompactError::DeadlinePassed {
                log_id,
                start: prepared.plan.start,
                end: prepared.plan.end,
            });
        }
        self.check_c1_still_holds(prepared).await?;
        ledger::record_retirements(self.meta(), prepared.wal_objects(), self.now_ms()).await?;
        ensure_live(lease)?;
        self.meta()
            .put(&partition, &key, prepared.value.clone(), PutCondition::None)
            .await
            .map_err(CompactError::meta(log_id, C3_PUT))?;
        Ok(InstallOutcome::Installed)
    }

    /// C1 again, before a C3 that has not taken effect (and before the C4 that follows a
    /// skipped C3): every record ending in `(s, e]` must still be RAW, and no PARQUET record
    /// ending after `e` may reach into the range. A compaction retried after its session
    /// ended can meet a range that another compaction planned and installed meanwhile;
    /// installing it then would let its C4 delete that compaction's PARQUET record (found by
    /// the simulation, seeds 1223 and 20555).
    async fn check_c1_still_holds(&self, prepared: &PreparedCompaction) -> CompactResult<()> {
        let log_id = prepared.log.log_id;
        let partition = keys::partition(log_id);
        let (s, e) = (prepared.plan.start, prepared.plan.end);
        let start = keys::index_key(log_id, s + 1, 0);
        let end = keys::covering_lookup_key(log_id, e);
        let inside = self
            .meta()
            .scan(&partition, &start, &end, None)
            .await
            .map_err(CompactError::meta(log_id, "C1 re-check"))?;
        for record in inside.iter().filter(|r| keys::is_index_key_of(&r.key, log_id)) {
            if !IndexRecord::parse(log_id, record)?.is_raw() {
                return Err(CompactError::AlreadyCompacted { log_id, key: record.key.clone() });
            }
        }
        // A PARQUET record that covers `e` ends after it; RAW records that its C4 has not yet
        // removed can lie between. Walk forward to the first PARQUET record.
        let mut from = end.clone();
        let last = keys::last_key(log_id);
        loop {
            let page = self
                .meta()
                .scan(&partition, &from, &last, Some(C1_SCAN_PAGE))
                .await
                .map_err(CompactError::meta(log_id, "C1 re-check"))?;
            for record in page.iter().filter(|r| keys::is_index_key_of(&r.key, log_id)) {
                let later = IndexRecord::parse(log_id, record)?;
                if !later.is_raw() {
                    if later.start < e {
                        return Err(CompactError::AlreadyCompacted { log_id, key: record.key.clone() });
                    }
                    return Ok(());
                }
            }
            match page.last().map(|r| keys::IndexKey::parse(&r.key)) {
                // K(L, end, MAX) sorts after the record ending at `end` and before the next.
                Some(Ok(k)) if page.len() == C1_SCAN_PAGE && k.log_id == log_id => {
                    from = keys::covering_lookup_key(log_id, k.end_offset)
                }
                _ => return Ok(()),
            }
        }
    }

    /// C4: `DeleteRange(K(L, s+1, 0), K(L, e−1, MAX))`, after announcing the WAL objects of
    /// the records it removes in the retirement ledger.
    pub async fn retire<'a>(
        &self,
        log_id: LogId,
        range: PendingRetire,
        wal_objects: impl IntoIterator<Item = &'a str>,
        lease: &WriteLease,
    ) -> CompactResult<()> {
        ensure_live(lease)?;
        ledger::record_retirements(self.meta(), wal_objects, self.now_ms()).await?;
        if range.end < range.start + 2 {
            return Ok(()); // no end offset lies in [s+1, e-1]
        }
        ensure_live(lease)?;
        let start = keys::index_key(log_id, range.start + 1, 0);
        let end = keys::covering_lookup_key(log_id, range.end - 1);
        self.meta()
            .delete_range(&keys::partition(log_id), &start, &end)
            .await
            .map_err(CompactError::meta(log_id, C4_DELETE_RANGE))
    }

    /// C5: raises the compaction cursor `/first-uncompacted-offset/{L}` in P(L) to `end`
    /// (0-based: the first offset not compacted; not Ursa's `e + 1`, addendum §12 row 10).
    pub async fn record_progress(&self, log_id: LogId, end: Offset, lease: &WriteLease) -> CompactResult<()> {
        let partition = keys::partition(log_id);
        let key = keys::compaction_cursor_key(log_id);
        let options = CasOptions::new(Backoff::process(BackoffPolicy::compare_and_set(CURSOR_CAS_ATTEMPTS)));
        let raise = |current: Option<&Current<Cursor>>| {
            // Checked just before each write: no change of the log once the session ended.
            ensure_live(lease)?;
            Ok(match current.and_then(|c| c.value.0) {
                Some(cursor) if cursor >= end => Change::Keep,
                // Absent, lower, or unreadable (then replaced).
                _ => Change::Write(Cursor(Some(end))),
            })
        };
        match cas_update(self.meta(), &partition, &key, &options, raise).await {
            Ok(_) => Ok(()),
            Err(CasError::Record(e)) => Err(e),
            // The cursor is informational; another compactor keeps moving it.
            Err(CasError::Contended { .. }) => Ok(()),
            Err(CasError::Meta(e)) => Err(CompactError::meta(log_id, C5_PUT)(e)),
        }
    }

    /// C3, C4 and C5 under one write lease per attempt, repeated up to `install_attempts`
    /// times. Stops at once when the log is fenced, the claim's session ended, another
    /// compaction's record is in the way, or the deadline passed before C3 took effect.
    ///
    /// An attempt whose change ended with an unknown outcome (it may still take effect) keeps
    /// its lease for the next attempt, so that the lease record is never deleted before the
    /// change completed (spec "Leases"). The next attempt's Get of `K(L, e, c_e)` shows whether
    /// a C3 Put landed (the key holds the value); a C4 DeleteRange or C5 Put is settled by
    /// the next attempt's own, which completes the same change (no key can appear in C4's
    /// range again, and C5 writes conditionally). If an unknown change is still unsettled when
    /// `finish` returns, the lease goes with its session, which is closed, never by a delete.
    pub async fn finish(
        &self,
        claim: &Claim,
        prepared: &PreparedCompaction,
    ) -> CompactResult<InstallOutcome> {
        let log_id = prepared.log.log_id;
        let mut last = None;
        // The lease of the previous attempt, kept because a change under it is unsettled.
        let mut kept: Option<WriteLease> = None;
        // An earlier attempt's C3 Put, or C4/C5, whose outcome is unknown and unsettled.
        let (mut unsettled_c3, mut unsettled_rest) = (false, false);
        for _ in 0..self.inner.config.install_attempts {
            let lease = match kept.take() {
                Some(lease) if !*lease.session_ended().borrow() => lease,
                _ => {
                    // No lease kept, or its session ended (its record with it).
                    (unsettled_c3, unsettled_rest) = (false, false);
                    self.acquire_lease(claim).await?
                }
            };
            let result = async {
                let (start, end) = (prepared.plan.start, prepared.plan.end);
                let outcome = self.install(prepared, &lease).await?;
                // One line per step, so that an operator (or a crash test) can tell which
                // steps of a range took effect before a failure.
                tracing::debug!(%log_id, start, end, ?outcome, "C3 done");
                let range = PendingRetire { start, end };
                // C3 (this attempt's or an earlier one's) announced the range's objects
                // before its Put, and an announcement outlives its objects' last naming
                // record (it becomes per-object entries, each removed only once its object is
                // gone), so C4 announces them again only after a skipped C3: one ledger write
                // per range.
                let announced =
                    matches!(outcome, InstallOutcome::Installed | InstallOutcome::AlreadyInstalled);
                let objects: Vec<&str> =
                    if announced { Vec::new() } else { prepared.wal_objects().collect() };
                self.retire(log_id, range, objects, &lease).await?;
                tracing::debug!(%log_id, start, end, "C4 done");
                self.record_progress(log_id, prepared.plan.end, &lease).await?;
                tracing::debug!(%log_id, cursor = end, "C5 done");
                Ok::<_, CompactError>(outcome)
            }
            .await;
            match &result {
                // The key holds the value: every earlier C3 Put landed, and C4/C5 completed.
                Ok(InstallOutcome::AlreadyInstalled) => (unsettled_c3, unsettled_rest) = (false, false),
                // C4 and C5 completed; an earlier C3 Put this Get did not see may still land.
                Ok(_) => unsettled_rest = false,
                Err(e) => match e.unknown_change() {
                    Some(C3_PUT) => unsettled_c3 = true,
                    Some(_) => unsettled_rest = true,
                    None => {}
                },
            }
            let unsettled = unsettled_c3 || unsettled_rest;
            let done = match result {
                Ok(outcome) => Some(Ok(outcome)),
                Err(e @ (CompactError::AlreadyCompacted { .. } | CompactError::DeadlinePassed { .. })) => {
                    Some(Err(e))
                }
                Err(e @ CompactError::SessionEnded { .. }) => Some(Err(e)),
                Err(e) => {
                    tracing::warn!(%log_id, error = %e, "C3/C4 attempt failed; repeating");
                    last = Some(e);
                    None
                }
            };
            match done {
                Some(result) => {
                    self.let_go(lease, unsettled).await;
                    return result;
                }
                // Every change of the attempt has completed or failed: the lease may go.
                None if !unsettled => self.let_go(lease, false).await,
                None => kept = Some(lease),
            }
        }
        if let Some(lease) = kept {
            self.let_go(lease, unsettled_c3 || unsettled_rest).await;
        }
        Err(last.unwrap_or(CompactError::SessionEnded { log_id }))
    }

    /// Lets a write lease go once the changes under it are over: deletes its record, unless
    /// one of them has an unknown outcome no read settled (`unsettled`) and so may still take
    /// effect; then the record goes with its session, which is closed (with the claims it
    /// backs: the compactor opens a new session on its next use). The spec forbids deleting a
    /// lease record before every change under it has completed, and lets the store remove it
    /// when its session ends.
    pub(crate) async fn let_go(&self, lease: WriteLease, unsettled: bool) {
        if *lease.session_ended().borrow() {
            return; // the record is gone with the session
        }
        if !unsettled {
            let _ = lease.release(self.meta()).await;
            return;
        }
        let session = lease.session().clone();
        tracing::warn!(
            log_id = %lease.log_id(),
            session = %session.id(),
            "a change under this write lease has an unknown outcome: closing its session instead of deleting the lease record"
        );
        if let Err(e) = session.close().await {
            tracing::warn!(session = %session.id(), error = %e, "closing the session failed; its records go when it times out");
        }
    }

    /// Finishes interrupted C4 steps the planner found, under a lease.
    async fn repair(
        &self,
        claim: &Claim,
        records: &[IndexRecord],
        repairs: &[PendingRetire],
        progress: ProgressFn<'_>,
    ) -> CompactResult<usize> {
        if repairs.is_empty() {
            return Ok(0);
        }
        let lease = self.acquire_lease(claim).await?;
        let result = async {
            for r in repairs {
                // Collected before the await: a lazy iterator of closures held across it makes
                // the future's Send bound not general enough for `tokio::spawn`.
                let covered: Vec<&str> = records
                    .iter()
                    .filter(|x| x.end() > r.start && x.end() < r.end)
                    .filter_map(IndexRecord::wal_object)
                    .collect();
                self.retire(claim.log_id, *r, covered, &lease).await?;
                progress(&Progress::RetireRepaired { log_id: claim.log_id, start: r.start, end: r.end });
            }
            Ok::<_, CompactError>(repairs.len())
        }
        .await;
        let unsettled = result.as_ref().err().and_then(CompactError::unknown_change).is_some();
        self.let_go(lease, unsettled).await;
        result
    }

    /// Compacts every closed range of one log of a stream of the native binding: claim, retry
    /// pending C3/C4, finish interrupted C4 steps, then plan → C2 → C3–C5 until no range is
    /// closed.
    pub async fn compact_log(
        &self,
        log: &LogRef,
        progress: ProgressFn<'_>,
    ) -> CompactResult<Vec<RangeReport>> {
        self.compact_log_as(&CompactionLog::native(log.clone()), progress).await
    }

    /// [`Compactor::compact_log`] for a log whose stream follows `log.binding`.
    pub async fn compact_log_as(
        &self,
        log: &CompactionLog,
        progress: ProgressFn<'_>,
    ) -> CompactResult<Vec<RangeReport>> {
        let claim = self.claim(log.log.log_id).await?;
        let mut outcomes = self.compact_claimed(&[(&claim, log)], progress).await;
        claim.release(self.meta()).await;
        outcomes.pop().unwrap_or(Ok(Vec::new()))
    }

    /// Compacts every closed range of each claimed log, in rounds: each round plans every log
    /// still in the pass (after its kept compactions and repairs), runs C2 for all their ready
    /// ranges at once ([`Compactor::prepare_many`]: a WAL object they share is fetched once),
    /// then C3–C5 of each. A log leaves the pass when it has no ready range or fails. One
    /// outcome per log, in order.
    async fn compact_claimed(
        &self,
        logs: &[(&Claim, &CompactionLog)],
        progress: ProgressFn<'_>,
    ) -> Vec<CompactResult<Vec<RangeReport>>> {
        let mut outcomes: Vec<CompactResult<Vec<RangeReport>>> =
            logs.iter().map(|_| Ok(Vec::new())).collect();
        let mut active: Vec<usize> = Vec::new();
        for (i, (claim, _)) in logs.iter().enumerate() {
            let pending = self.take_pending(claim.log_id);
            let mut result = Ok(());
            for (k, prepared) in pending.iter().enumerate() {
                if let Err(e) = self.finish_or_keep(claim, prepared).await {
                    self.keep_pending(pending[k + 1..].iter().cloned());
                    result = Err(e);
                    break;
                }
            }
            match result {
                Ok(()) => active.push(i),
                Err(e) => outcomes[i] = Err(e),
            }
        }
        // Each round compacts one range per log; the bound only guards against a planner that
        // would return the same range forever.
        for _ in 0..10_000 {
            let mut ready: Vec<(usize, Offset, RangePlan)> = Vec::new();
            for &i in &active {
                let (claim, log) = (logs[i].0, &logs[i].1.log);
                let planned = async {
                    let (b, records, planning) = self.plan_with_marker(log.log_id).await?;
                    self.repair(claim, &records, &planning.repairs, progress).await?;
                    Ok::<_, CompactError>((b, planning.next))
                }
                .await;
                match planned {
                    Ok((b, NextRange::Ready(plan))) => {
                        progress(&Progress::RangeStarted {
                            log_id: log.log_id,
                            start: plan.start,
                            end: plan.end,
                        });
                        ready.push((i, b, plan));
                    }
                    Ok((b, open_or_nothing)) => {
                        progress(&Progress::Backlog(self.backlog(log.log_id, b, &open_or_nothing)));
                    }
                    Err(e) => outcomes[i] = Err(e),
                }
            }
            active = ready.iter().map(|(i, _, _)| *i).collect();
            if ready.is_empty() {
                break;
            }
            let work: Vec<(&CompactionLog, &RangePlan, Offset)> =
                ready.iter().map(|(i, b, plan)| (logs[*i].1, plan, *b)).collect();
            let prepared = self.prepare_many(&work).await;
            for ((i, _, plan), result) in ready.iter().zip(prepared) {
                let (claim, log) = (logs[*i].0, &logs[*i].1.log);
                let finished = async {
                    let Some(prepared) = result? else { return Ok(None) };
                    tracing::debug!(log_id = %log.log_id, start = plan.start, end = plan.end, files = prepared.files.len(), "C2 done");
                    self.finish_or_keep(claim, &prepared).await?;
                    Ok::<_, CompactError>(Some(RangeReport::of(&prepared)))
                }
                .await;
                match finished {
                    Ok(Some(report)) => {
                        tracing::info!(log_id = %log.log_id, start = plan.start, end = plan.end, files = report.files, "compacted a range");
                        progress(&Progress::RangeCompacted(report.clone()));
                        if let Ok(reports) = &mut outcomes[*i] {
                            reports.push(report);
                        }
                    }
                    Ok(None) => {} // B moved past the range: plan again
                    Err(e) => {
                        outcomes[*i] = Err(e);
                        active.retain(|a| a != i);
                    }
                }
            }
        }
        outcomes
    }

    /// What is left to compact once no range is closed: the open range's payload and the time
    /// its oldest entry was written.
    fn backlog(&self, log_id: LogId, trim_marker: Offset, next: &NextRange) -> Backlog {
        let (open_payload_bytes, oldest_open_entry_ms) = match next {
            NextRange::Open { closes_at_ms, payload_bytes } => {
                (*payload_bytes, Some(closes_at_ms - self.thresholds().max_range_age_ms))
            }
            NextRange::Ready(_) | NextRange::Nothing => (0, None),
        };
        Backlog { log_id, trim_marker, open_payload_bytes, oldest_open_entry_ms }
    }

    /// `finish`, keeping the compaction for a later retry when its C3 may have taken effect
    /// and the failure is not final.
    async fn finish_or_keep(
        &self,
        claim: &Claim,
        prepared: &PreparedCompaction,
    ) -> CompactResult<InstallOutcome> {
        match self.finish(claim, prepared).await {
            Ok(outcome) => Ok(outcome),
            Err(e) => {
                let fin =
                    matches!(e, CompactError::AlreadyCompacted { .. } | CompactError::DeadlinePassed { .. })
                        || e.is_fenced();
                if !fin {
                    self.keep_pending([prepared.clone()]);
                }
                Err(e)
            }
        }
    }

    fn take_pending(&self, log_id: LogId) -> Vec<PreparedCompaction> {
        self.inner.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&log_id).unwrap_or_default()
    }

    fn keep_pending(&self, prepared: impl IntoIterator<Item = PreparedCompaction>) {
        let mut pending = self.inner.pending.lock().unwrap_or_else(|e| e.into_inner());
        for p in prepared {
            pending.entry(p.log.log_id).or_default().push(p);
        }
    }

    /// The compactions kept for a retry of their C3/C4.
    pub fn pending(&self) -> Vec<PreparedCompaction> {
        let pending = self.inner.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.values().flatten().cloned().collect()
    }

    /// [`Compactor::compact_logs_once`] over logs whose streams all follow the native binding
    /// (none is a Kafka topic): their compacted files carry
    /// [`lakestream_format::native::NATIVE_BINDING`]. A caller that may hold Kafka topics' logs
    /// passes each log's binding to [`Compactor::compact_logs_once`] instead.
    pub async fn compact_once(&self, logs: &[LogRef], progress: ProgressFn<'_>) -> CompactReport {
        let logs: Vec<CompactionLog> = logs.iter().cloned().map(CompactionLog::native).collect();
        self.compact_logs_once(&logs, progress).await
    }

    /// One pass over `logs` (the catalog resolves them, each with its stream's binding):
    /// compacts every closed range of each log, `concurrent_logs` logs at a time (consecutive
    /// logs of the list, which are usually the partitions of one stream and share WAL objects:
    /// each object is then fetched once for all of them). A log another compactor holds is
    /// skipped; a failing log does not stop the others.
    pub async fn compact_logs_once(&self, logs: &[CompactionLog], progress: ProgressFn<'_>) -> CompactReport {
        let mut report = CompactReport::default();
        for group in logs.chunks(self.inner.config.concurrent_logs.max(1)) {
            let mut claimed: Vec<(Claim, &CompactionLog)> = Vec::new();
            for bound in group {
                let log = &bound.log;
                progress(&Progress::LogStarted { log_id: log.log_id });
                match self.claim(log.log_id).await {
                    Ok(claim) => claimed.push((claim, bound)),
                    Err(CompactError::Busy { log_id }) => {
                        report.busy.push(log_id);
                        progress(&Progress::LogDone { log_id });
                    }
                    Err(e) => {
                        tracing::warn!(log_id = %log.log_id, error = %e, "compaction failed");
                        report.failed.push((log.log_id, e.to_string()));
                        progress(&Progress::LogDone { log_id: log.log_id });
                    }
                }
            }
            let refs: Vec<(&Claim, &CompactionLog)> = claimed.iter().map(|(c, l)| (c, *l)).collect();
            let outcomes = self.compact_claimed(&refs, progress).await;
            for ((claim, bound), outcome) in claimed.into_iter().zip(outcomes) {
                let log = &bound.log;
                claim.release(self.meta()).await;
                match outcome {
                    Ok(ranges) => {
                        if !ranges.is_empty() {
                            report.logs_compacted += 1;
                        }
                        report.add_ranges(ranges);
                    }
                    Err(CompactError::Busy { log_id }) => report.busy.push(log_id),
                    Err(e) => {
                        tracing::warn!(log_id = %log.log_id, error = %e, "compaction failed");
                        report.failed.push((log.log_id, e.to_string()));
                    }
                }
                progress(&Progress::LogDone { log_id: log.log_id });
            }
        }
        report
    }

    pub(crate) fn object_path(name: String) -> CompactResult<ObjectPath> {
        ObjectPath::new(name.clone()).map_err(CompactError::object(name))
    }
}

/// How many writes C5 tries before leaving the cursor to the compactor that keeps moving it.
const CURSOR_CAS_ATTEMPTS: u32 = 8;

/// The compaction cursor's value (`None`: bytes that are not a cursor, which C5 replaces).
struct Cursor(Option<Offset>);

impl CasRecord for Cursor {
    type Error = CompactError;

    fn decode(record: &lakestream_meta::Record) -> CompactResult<Self> {
        Ok(Cursor(keys::decode_trim_marker(&record.value).ok()))
    }

    fn encode(&self) -> CompactResult<Bytes> {
        Ok(Bytes::from(self.0.unwrap_or_default().to_string()))
    }
}

/// Fails with [`CompactError::SessionEnded`] once the lease's session ended: the compactor
/// stops C3–C5 and hard trims as soon as it learns (spec SHOULD, which we treat as MUST).
pub(crate) fn ensure_live(lease: &WriteLease) -> CompactResult<()> {
    if *lease.session_ended().borrow() {
        return Err(CompactError::SessionEnded { log_id: lease.log_id() });
    }
    Ok(())
}

/// How many records one page of the C1 re-check's forward walk holds.
const C1_SCAN_PAGE: usize = 256;

/// What the fetch driver hands a log: the index of one of its range's records and that
/// record's entries (those ending above B), or why they could not be read.
type RecordEntries = CompactResult<(usize, Vec<Entry>)>;
type RecordSender = tokio::sync::mpsc::Sender<RecordEntries>;

/// The fetches under way in a pass, in schedule order, and the bytes they bring in. Dropping
/// it (a pass given up) aborts them.
#[derive(Default)]
struct Window {
    tasks: std::collections::VecDeque<(fetch::Fetch, tokio::task::JoinHandle<CompactResult<Fetched>>)>,
    bytes: u64,
}

impl Drop for Window {
    fn drop(&mut self) {
        for (_, task) in &self.tasks {
            task.abort();
        }
    }
}
/// Row groups are cut by bytes; this bounds the per-row overhead of tiny payloads.
const MAX_ROWS_PER_ROW_GROUP: usize = 100_000;

fn corrupt(log_id: LogId, plan: &RangePlan, detail: String) -> CompactError {
    CompactError::Corrupt { log_id, what: format!("range [{}, {})", plan.start, plan.end), detail }
}

/// The companion rows of one record's entries (all of them, or those from B on): each
/// entry's header as read from the RAW record, with the cumulative size at its end counted
/// back from the record's key.
fn rows_of_record(
    log_id: LogId,
    plan: &RangePlan,
    record_index: usize,
    entries: Vec<Entry>,
) -> CompactResult<Vec<(CompanionRow, Bytes)>> {
    let record = &plan.records[record_index];
    let payload: u64 = entries.iter().map(|e| e.payload.len() as u64).sum();
    let whole = entries.first().is_some_and(|e| e.offset == record.start);
    if payload > record.entry_size_bytes || (whole && payload != record.entry_size_bytes) {
        return Err(corrupt(
            log_id,
            plan,
            format!(
                "the record ending at {} has entry_size_bytes {}, its entries {payload} bytes",
                record.end, record.entry_size_bytes
            ),
        ));
    }
    let mut cumulative = record.cumulative_end - payload;
    entries
        .into_iter()
        .map(|e| {
            let size = u32::try_from(e.payload.len())
                .map_err(|_| corrupt(log_id, plan, format!("entry at {} exceeds 2^32 bytes", e.offset)))?;
            cumulative += u64::from(size);
            let row = CompanionRow {
                offset: e.offset,
                record_count: e.record_count,
                timestamp_ms: e.timestamp_ms,
                entry_size: size,
                cumulative_size: cumulative,
                schema_version: None,
            };
            Ok((row, e.payload))
        })
        .collect()
}

/// The compactor-wide budget of row-group bytes between collection and upload: a full row
/// group's payload bytes are taken before it is encoded and given back once its encoded
/// bytes are in the file's upload. With `concurrent_logs` logs filling row groups at once,
/// this keeps the row groups being encoded, their output and what waits to be handed to
/// the uploads to the budget instead of growing with the number of logs.
///
/// Why it cannot deadlock: a log asks for budget only while it holds none (its previous row
/// group is uploaded first), and once it holds budget, giving it back needs nothing from the
/// fetch driver: encoding runs on a blocking thread, the upload's write waits only on its own
/// parts, and the log keeps driving both while it waits for its next entries
/// ([`FilesBuilder::recv`]). A share never exceeds the budget, so a log whose turn comes
/// always gets it.
#[derive(Debug)]
struct RowGroupBudget {
    /// Permits in KiB (a semaphore counts at most 2^61 − 1 permits, taken 2^32 − 1 at a time).
    permits: Arc<tokio::sync::Semaphore>,
    total_kib: u32,
    in_use: Arc<AtomicU64>,
    high_water: Arc<AtomicU64>,
}

/// A share of the [`RowGroupBudget`]; dropping it gives the share back.
struct RowGroupShare {
    _permit: tokio::sync::OwnedSemaphorePermit,
    kib: u64,
    in_use: Arc<AtomicU64>,
}

impl Drop for RowGroupShare {
    fn drop(&mut self) {
        self.in_use.fetch_sub(self.kib << 10, Ordering::Relaxed);
    }
}

impl RowGroupBudget {
    fn new(bytes: u64) -> Self {
        let total_kib = u32::try_from(bytes.div_ceil(1024).max(1)).unwrap_or(u32::MAX);
        RowGroupBudget {
            permits: Arc::new(tokio::sync::Semaphore::new(total_kib as usize)),
            total_kib,
            in_use: Arc::new(AtomicU64::new(0)),
            high_water: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Waits for `bytes` of the budget (all of it, for a row group larger than the budget).
    async fn take(&self, log_id: LogId, bytes: usize) -> CompactResult<RowGroupShare> {
        let kib = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX).clamp(1, self.total_kib);
        let permit = self.permits.clone().acquire_many_owned(kib).await.map_err(|e| {
            let source = lakestream_format::FormatError::invalid(
                "compacted file",
                format!("no row-group budget: {e}"),
            );
            CompactError::Encode { log_id, what: "compacted row group", source }
        })?;
        let kib = u64::from(kib);
        let now = self.in_use.fetch_add(kib << 10, Ordering::Relaxed) + (kib << 10);
        self.high_water.fetch_max(now, Ordering::Relaxed);
        Ok(RowGroupShare { _permit: permit, kib, in_use: self.in_use.clone() })
    }
}

/// Streams rows into compacted files, starting a new file past `max_file_bytes`. Payloads are
/// copied into the row group being collected (so that it pins no WAL object); a full row
/// group is encoded on a blocking thread and its bytes written to the file's upload
/// ([`lakestream_objstore::Upload`]: parts sent as they fill where the store streams) while
/// the next one is collected, so no file is held whole in memory.
struct FilesBuilder<'a> {
    compactor: &'a Compactor,
    log: &'a LogRef,
    binding: Binding,
    current: Option<OpenFile<'a>>,
    written: Vec<WrittenFile>,
    payload_bytes: u64,
}

struct OpenFile<'a> {
    name: String,
    /// The file's writer and upload, or the encoding and upload of its last row group that
    /// holds them.
    data: Encoding<'a>,
    /// The bytes written to the Parquet file's upload so far.
    uploaded: u64,
    data_path: ObjectPath,
    companion: CompanionWriter,
    /// The row group being collected, and its payload bytes.
    rows: Vec<Bytes>,
    rows_bytes: usize,
    payload_bytes: u64,
    last_offset: Offset,
}

type FileUpload<'a> = Box<dyn lakestream_objstore::Upload + 'a>;

/// A row group's encoding and upload: the writer and upload back, and the bytes written.
type InFlight<'a> =
    Pin<Box<dyn Future<Output = CompactResult<(Box<CompactedFileWriter>, FileUpload<'a>, u64)>> + Send + 'a>>;

enum Encoding<'a> {
    Idle(Box<CompactedFileWriter>, FileUpload<'a>),
    Busy(InFlight<'a>),
    /// An encoding or upload failed; its error was returned.
    Failed,
}

/// A row group's encoding task that panicked or was cancelled.
fn encode_task_failed(log_id: LogId, e: tokio::task::JoinError) -> CompactError {
    let source =
        lakestream_format::FormatError::invalid("compacted file", format!("the encoding task failed: {e}"));
    CompactError::Encode { log_id, what: "compacted row group", source }
}

fn writer_lost(log_id: LogId) -> CompactError {
    let source =
        lakestream_format::FormatError::invalid("compacted file", "an earlier row group failed to encode");
    CompactError::Encode { log_id, what: "compacted row group", source }
}

impl<'a> OpenFile<'a> {
    /// Waits for the row group in flight, if any, to be encoded and in the upload. Cancel
    /// safe: dropped before it completes, it leaves the row group in flight.
    async fn settle(&mut self) -> CompactResult<()> {
        if let Encoding::Busy(in_flight) = &mut self.data {
            let done = in_flight.as_mut().await;
            self.data = Encoding::Failed;
            let (writer, upload, sent) = done?;
            self.uploaded += sent;
            self.data = Encoding::Idle(writer, upload);
        }
        Ok(())
    }

    /// Starts encoding the collected rows as one row group on a blocking thread and writing
    /// its bytes to the upload (after the previous row group is uploaded, once the
    /// row-group budget has room for it and one of the `encoders` is free).
    async fn encode_rows(&mut self, log_id: LogId, inner: &Inner) -> CompactResult<()> {
        if self.rows.is_empty() {
            return Ok(());
        }
        self.settle().await?;
        // Holding no share here (the previous row group gave its share back above).
        let share = inner.row_groups.take(log_id, self.rows_bytes).await?;
        let encoder = inner.encoders.clone().acquire_owned().await.map_err(|e| {
            let source =
                lakestream_format::FormatError::invalid("compacted file", format!("no encoder: {e}"));
            CompactError::Encode { log_id, what: "compacted row group", source }
        })?;
        let rows = std::mem::take(&mut self.rows);
        self.rows_bytes = 0;
        let Encoding::Idle(mut writer, mut upload) = std::mem::replace(&mut self.data, Encoding::Failed)
        else {
            return Err(writer_lost(log_id));
        };
        let data_path = self.data_path.clone();
        self.data = Encoding::Busy(Box::pin(async move {
            let encoded = tokio::task::spawn_blocking(move || {
                let _encoder = encoder;
                for payload in rows {
                    writer.push(payload)?;
                }
                writer.flush_row_group()?;
                let bytes = writer.take_written()?;
                Ok::<_, lakestream_format::FormatError>((writer, bytes))
            })
            .await;
            let (writer, bytes) = encoded
                .map_err(|e| encode_task_failed(log_id, e))?
                .map_err(|source| CompactError::Encode { log_id, what: "compacted row group", source })?;
            let sent = bytes.len() as u64;
            upload.write(Bytes::from(bytes)).await.map_err(CompactError::object(&data_path))?;
            drop(share);
            Ok((writer, upload, sent))
        }));
        Ok(())
    }
}

impl<'a> FilesBuilder<'a> {
    fn new(compactor: &'a Compactor, log: &'a LogRef, binding: Binding) -> Self {
        FilesBuilder { compactor, log, binding, current: None, written: Vec::new(), payload_bytes: 0 }
    }

    fn encode_err(&self, what: &'static str) -> impl FnOnce(lakestream_format::FormatError) -> CompactError {
        let log_id = self.log.log_id;
        move |source| CompactError::Encode { log_id, what, source }
    }

    fn dir(&self) -> String {
        format!("{}/{}", self.log.namespace, self.log.stream)
    }

    async fn push(&mut self, row: CompanionRow, payload: Bytes) -> CompactResult<()> {
        let config = &self.compactor.inner.config;
        if self.current.is_none() {
            let name =
                names::compacted_file_name(self.log.log_id, &self.compactor.inner.deps.tokens.new_token());
            let options = compacted::WriteOptions {
                codec: config.codec.to_format(),
                // Row groups are cut here, by `row_group_bytes`, and flushed explicitly.
                max_rows_per_row_group: usize::MAX,
                max_row_group_bytes: usize::MAX,
            };
            let data = CompactedFileWriter::new(self.binding, &name, options)
                .map_err(self.encode_err("compacted file"))?;
            let companion = CompanionWriter::new(companion::WriteOptions::default())
                .map_err(self.encode_err("companion file"))?;
            let data_path = Compactor::object_path(format!("{}/{name}", self.dir()))?;
            let store: &'a Arc<dyn ObjectStore> = &self.compactor.inner.deps.compacted;
            let upload = store.start_upload(&data_path).await.map_err(CompactError::object(&data_path))?;
            self.current = Some(OpenFile {
                name,
                data: Encoding::Idle(Box::new(data), upload),
                uploaded: 0,
                data_path,
                companion,
                rows: Vec::new(),
                rows_bytes: 0,
                payload_bytes: 0,
                last_offset: 0,
            });
        }
        let log_id = self.log.log_id;
        let Some(file) = self.current.as_mut() else { return Ok(()) };
        file.companion.push(&row).map_err(|source| CompactError::Encode {
            log_id,
            what: "companion row",
            source,
        })?;
        // A copy: a slice would keep the whole WAL object (or section) it came from alive.
        file.rows_bytes += payload.len();
        file.rows.push(Bytes::copy_from_slice(&payload));
        file.payload_bytes += u64::from(row.entry_size);
        file.last_offset = row.end_offset() - 1;
        self.payload_bytes += u64::from(row.entry_size);
        if file.rows_bytes >= config.row_group_bytes || file.rows.len() >= MAX_ROWS_PER_ROW_GROUP {
            file.encode_rows(log_id, &self.compactor.inner).await?;
        }
        if file.payload_bytes >= config.max_file_bytes {
            self.close_file().await?;
        }
        Ok(())
    }

    /// Finishes the open file: its last row groups and footer go to its upload; then the
    /// companion is written, and only then is the upload completed, so that a visible
    /// Parquet file always has its companion (both before C3, spec C2).
    async fn close_file(&mut self) -> CompactResult<()> {
        let Some(mut file) = self.current.take() else { return Ok(()) };
        let log_id = self.log.log_id;
        file.encode_rows(log_id, &self.compactor.inner).await?;
        file.settle().await?;
        let Encoding::Idle(writer, upload) = std::mem::replace(&mut file.data, Encoding::Failed) else {
            return Err(writer_lost(log_id));
        };
        let rows = writer.row_count();
        let rest = tokio::task::spawn_blocking(move || (*writer).finish())
            .await
            .map_err(|e| encode_task_failed(log_id, e))?
            .map_err(self.encode_err("compacted file"))?;
        let mut upload = upload;
        let rest_len = rest.len() as u64;
        upload.write(Bytes::from(rest)).await.map_err(CompactError::object(&file.data_path))?;
        file.uploaded += rest_len;
        let index = file.companion.finish().map_err(self.encode_err("companion file"))?;
        let companion_name =
            compacted::companion_name(&file.name).map_err(self.encode_err("companion name"))?;
        let (parquet_bytes, companion_bytes) = (file.uploaded, index.len() as u64);
        let store = &self.compactor.inner.deps.compacted;
        let companion_path = Compactor::object_path(format!("{}/{companion_name}", self.dir()))?;
        store
            .put(&companion_path, Bytes::from(index))
            .await
            .map_err(CompactError::object(&companion_path))?;
        let data_path = file.data_path.clone();
        upload.complete().await.map_err(CompactError::object(&data_path))?;
        self.written.push(WrittenFile {
            name: file.name,
            last_offset: file.last_offset,
            rows,
            parquet_bytes,
            companion_bytes,
        });
        Ok(())
    }

    /// The log's next message from the fetch driver, while the open file's row group in
    /// flight (if any) is encoded and uploaded: its share of the row-group budget is given
    /// back without waiting for more entries, which may wait on logs that need that share.
    async fn recv(
        &mut self,
        entries: &mut tokio::sync::mpsc::Receiver<RecordEntries>,
    ) -> CompactResult<Option<RecordEntries>> {
        if let Some(file) = self.current.as_mut().filter(|f| matches!(f.data, Encoding::Busy(_))) {
            tokio::select! {
                settled = file.settle() => settled?,
                message = entries.recv() => return Ok(message),
            }
        }
        Ok(entries.recv().await)
    }

    async fn finish(mut self) -> CompactResult<(Vec<WrittenFile>, u64)> {
        self.close_file().await?;
        Ok((self.written, self.payload_bytes))
    }
}
