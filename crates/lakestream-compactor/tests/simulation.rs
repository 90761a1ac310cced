//! A deterministic, seeded simulation of the protocol: the real writer, reader and compactor
//! over the in-memory stores, driven one step at a time on a current-thread Tokio runtime
//! with paused time, with a manual clock for every timestamp, grace period and range age.
//!
//! Each run interleaves appends from two writers (sometimes concurrent on one log), two
//! compactor processes side by side (claims make them take turns per log),
//! compactions run whole or step by step with crashes between C2, C3 and C4 (and retried
//! C3/C4 under a new session), soft and hard trims, log deletion (fence, drain, delete-range),
//! session expiry while leases are held, collection passes and clock jumps. After **every**
//! step it checks the properties of addendum §13.2 (see [`check`]) plus reclamation safety.
//!
//! Runs: `LAKESTREAM_TEST_SEEDS` seeds (default 150, about 40 s in a debug build on 2 busy
//! cores) from 0; `LAKESTREAM_SIM_STEPS` steps each (default 150). A failing seed is printed
//! with its trace tail and replays with
//! `LAKESTREAM_TEST_SEED=<seed> cargo test -p lakestream-compactor --test simulation`.
//! Longer runs: `LAKESTREAM_TEST_SEEDS=2000 cargo test --release -p lakestream-compactor --test simulation`.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use common::Stack;
use lakestream_compactor::plan::NextRange;
use lakestream_compactor::{
    Claim, CompactError, Compactor, CompactorConfig, InstallOutcome, PreparedCompaction, no_progress,
};
use lakestream_format::entry_index::{self, IndexValue};
use lakestream_format::keys::{self, IndexKey};
use lakestream_format::{Clock, Entry, FileType, LogId, LogRef, Offset};
use lakestream_meta::MetaStore;
use lakestream_meta::lease::{self, DrainConfig, DrainOutcome, WriteLease};
use lakestream_meta::test_rng::{Seed, TestRng, sweep};
use lakestream_reader::Reader;
use lakestream_writer::{AppendError, Writer};

const LOGS: u64 = 3;
const GRACE_MS: i64 = 20 * 60_000;

fn sim_config() -> CompactorConfig {
    CompactorConfig {
        max_range_bytes: 160,
        max_range_age: Duration::from_secs(180),
        max_file_bytes: 48,
        read_chunk_bytes: 64,
        wal_grace: Duration::from_millis(GRACE_MS as u64),
        reader_index_cache_ttl: Duration::from_secs(600),
        compacted_grace: Duration::from_secs(20 * 60),
        max_compaction_duration: Duration::from_secs(5 * 60),
        ..CompactorConfig::default()
    }
}

/// Where a step-by-step compaction stands.
enum Stage {
    /// C2 done.
    Prepared,
    /// C3 took effect (or may have); C4 not yet done.
    Installed(WriteLease),
}

struct Stepwise {
    claim: Option<Claim>,
    prepared: PreparedCompaction,
    stage: Stage,
}

/// What the checker remembers between steps.
#[derive(Default)]
struct Memory {
    /// Per log: acknowledged entries by offset.
    acked: HashMap<LogId, BTreeMap<Offset, Entry>>,
    deleted: HashSet<LogId>,
    last_b: HashMap<LogId, Offset>,
    last_next: HashMap<LogId, Offset>,
    last_greatest_key: HashMap<LogId, String>,
    /// Compactions whose C3 took effect: (log, s, e, key, value).
    installed: Vec<(LogId, Offset, Offset, String, Bytes)>,
    /// Compactions whose C4 completed: (log, s, e).
    retired: Vec<(LogId, Offset, Offset)>,
    /// WAL objects seen in the store, and when each stopped being named (None while named).
    wal_objects: HashMap<String, Option<i64>>,
}

struct Sim {
    seed: u64,
    rng: TestRng,
    stack: Stack,
    writers: Vec<Writer>,
    compactor: Compactor,
    /// A second compactor process working on the same logs, side by side.
    peer: Compactor,
    compactor_generation: u64,
    stepwise: Vec<Stepwise>,
    memory: Memory,
    trace: Vec<String>,
    reader: Reader,
}

fn log_ref(id: u64) -> LogRef {
    LogRef { log_id: LogId(id), namespace: "sim".into(), stream: format!("s{}", id % 2) }
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let stack = Stack::new();
        let writers = vec![stack.writer(seed * 10 + 1), stack.writer(seed * 10 + 2)];
        let compactor = stack.compactor(sim_config(), seed * 1000);
        let peer = stack.compactor(sim_config(), seed * 1000 + 500);
        let reader = stack.reader();
        Sim {
            seed,
            rng: TestRng::new(seed),
            stack,
            writers,
            compactor,
            peer,
            compactor_generation: 0,
            stepwise: Vec::new(),
            memory: Memory::default(),
            trace: Vec::new(),
            reader,
        }
    }

    fn live_logs(&self) -> Vec<u64> {
        (1..=LOGS).filter(|l| !self.memory.deleted.contains(&LogId(*l))).collect()
    }

    fn pick_log(&mut self) -> Option<u64> {
        let live = self.live_logs();
        if live.is_empty() {
            return None;
        }
        Some(live[self.rng.below(live.len() as u64) as usize])
    }

    /// One of the two compactor processes, at random, and its name for the trace.
    fn any_compactor(&mut self) -> (Compactor, &'static str) {
        if self.rng.below(2) == 0 { (self.compactor.clone(), "c1") } else { (self.peer.clone(), "c2") }
    }

    fn now(&self) -> i64 {
        self.stack.clock.now_ms()
    }

    async fn step(&mut self) -> String {
        let roll = self.rng.below(100);
        match roll {
            0..=27 => self.append().await,
            28..=39 => {
                let ms = 1000 * (1 + self.rng.below(400)) as i64;
                self.stack.clock.advance_ms(ms);
                format!("advance {ms} ms")
            }
            40..=47 => self.compact_whole().await,
            48..=55 => self.start_stepwise().await,
            56..=65 => self.continue_stepwise().await,
            66..=68 => self.crash_compactor().await,
            69..=70 => self.expire_compactor_session().await,
            71..=76 => self.soft_trim().await,
            77..=82 => self.hard_trim().await,
            83..=90 => self.gc().await,
            91 => self.expire_writer_session().await,
            92 => self.hard_trim_inside_c3().await,
            93 => self.delete_log().await,
            _ => self.concurrent_appends().await,
        }
    }

    async fn append(&mut self) -> String {
        let Some(l) = self.pick_log() else { return "append: no live log".into() };
        let w = self.rng.below(2) as usize;
        let count = 1 + self.rng.below(3) as u32;
        let len = 1 + self.rng.below(30) as usize;
        let payload = Bytes::from(vec![b'a' + (self.rng.below(26) as u8); len]);
        let result = self.writers[w].append(LogId(l), payload.clone(), count).await;
        self.record_ack(l, payload, result)
    }

    async fn concurrent_appends(&mut self) -> String {
        let Some(l) = self.pick_log() else { return "concurrent: no live log".into() };
        let p1 = Bytes::from(format!("w0-{}", self.rng.below(1000)));
        let p2 = Bytes::from(format!("w1-{}", self.rng.below(1000)));
        let (a, b) = futures::future::join(
            self.writers[0].append(LogId(l), p1.clone(), 1),
            self.writers[1].append(LogId(l), p2.clone(), 2),
        )
        .await;
        let first = self.record_ack(l, p1, a);
        let second = self.record_ack(l, p2, b);
        format!("concurrent appends: {first}; {second}")
    }

    fn record_ack(
        &mut self,
        l: u64,
        payload: Bytes,
        result: Result<lakestream_writer::AppendAck, AppendError>,
    ) -> String {
        match result {
            Ok(ack) => {
                let entry = Entry {
                    offset: ack.offset,
                    record_count: ack.record_count,
                    timestamp_ms: ack.timestamp_ms,
                    payload,
                };
                let log = self.memory.acked.entry(LogId(l)).or_default();
                assert!(
                    log.insert(ack.offset, entry).is_none(),
                    "seed {}: offset {} of log {l} acknowledged twice",
                    self.seed,
                    ack.offset
                );
                format!("append log {l} -> [{}, {})", ack.offset, ack.end_offset())
            }
            Err(e) => format!("append log {l} failed: {e}"),
        }
    }

    async fn compact_whole(&mut self) -> String {
        if self.rng.below(2) == 0 {
            return self.compact_pass().await;
        }
        let Some(l) = self.pick_log() else { return "compact: no live log".into() };
        let (compactor, name) = self.any_compactor();
        match compactor.compact_log(&log_ref(l), &no_progress).await {
            Ok(ranges) => {
                for r in &ranges {
                    self.note_whole_compaction(LogId(l), r.start, r.end).await;
                }
                format!(
                    "{name} compact log {l}: {:?}",
                    ranges.iter().map(|r| (r.start, r.end)).collect::<Vec<_>>()
                )
            }
            Err(e) => format!("{name} compact log {l}: {e}"),
        }
    }

    /// One pass over every live log (`compact_once`): the logs' ranges are read together,
    /// each WAL object they share fetched once.
    async fn compact_pass(&mut self) -> String {
        let live = self.live_logs();
        if live.is_empty() {
            return "compact pass: no live log".into();
        }
        let (compactor, name) = self.any_compactor();
        let refs: Vec<_> = live.iter().map(|&l| log_ref(l)).collect();
        let report = compactor.compact_once(&refs, &no_progress).await;
        for r in &report.ranges {
            self.note_whole_compaction(r.log_id, r.start, r.end).await;
        }
        format!(
            "{name} compact pass over {live:?}: {:?}, busy {:?}, failed {:?}",
            report.ranges.iter().map(|r| (r.log_id.0, r.start, r.end)).collect::<Vec<_>>(),
            report.busy,
            report.failed
        )
    }

    /// A whole compaction completed C3 and C4 for [s, e): remember its record.
    async fn note_whole_compaction(&mut self, log: LogId, s: Offset, e: Offset) {
        let p = keys::partition(log);
        let found = self
            .stack
            .meta
            .get_cmp(&p, &keys::covering_lookup_key(log, e - 1), lakestream_meta::Comparison::Higher)
            .await
            .unwrap();
        if let Some(r) = found.filter(|r| keys::is_index_key_of(&r.key, log))
            && IndexKey::parse(&r.key).unwrap().end_offset == e
        {
            self.memory.installed.push((log, s, e, r.key.clone(), r.value.clone()));
        }
        self.memory.retired.push((log, s, e));
    }

    async fn start_stepwise(&mut self) -> String {
        let Some(l) = self.pick_log() else { return "stepwise: no live log".into() };
        let log = log_ref(l);
        let claim = match self.compactor.claim(log.log_id).await {
            Ok(c) => c,
            Err(e) => return format!("stepwise log {l}: claim: {e}"),
        };
        let plan = match self.compactor.plan(log.log_id).await {
            Ok((_, planning)) => planning.next,
            Err(e) => {
                claim.release(self.stack.meta.as_ref()).await;
                return format!("stepwise log {l}: plan: {e}");
            }
        };
        let NextRange::Ready(plan) = plan else {
            claim.release(self.stack.meta.as_ref()).await;
            return format!("stepwise log {l}: nothing ready");
        };
        match self.compactor.prepare(&log, &plan).await {
            Ok(Some(prepared)) => {
                let text = format!("stepwise log {l}: C2 of [{}, {})", plan.start, plan.end);
                self.stepwise.push(Stepwise { claim: Some(claim), prepared, stage: Stage::Prepared });
                text
            }
            Ok(None) => {
                claim.release(self.stack.meta.as_ref()).await;
                format!("stepwise log {l}: nothing above B")
            }
            Err(e) => {
                claim.release(self.stack.meta.as_ref()).await;
                format!("stepwise log {l}: C2: {e}")
            }
        }
    }

    async fn continue_stepwise(&mut self) -> String {
        if self.stepwise.is_empty() {
            return "continue: none".into();
        }
        let i = self.rng.below(self.stepwise.len() as u64) as usize;
        self.continue_op(i).await
    }

    async fn continue_op(&mut self, i: usize) -> String {
        let mut op = self.stepwise.remove(i);
        let log = op.prepared.log.log_id;
        let (s, e) = (op.prepared.plan.start, op.prepared.plan.end);
        if self.memory.deleted.contains(&log) {
            return format!("continue [{s}, {e}) of log {log}: log deleted, dropped");
        }
        // A claim whose session ended: retry C3/C4 under a new claim (spec: repeat C3 and C4
        // with the same range and value).
        if op.claim.as_ref().is_none_or(|c| !c.is_live()) {
            let claim = match self.compactor.claim(log).await {
                Ok(c) => c,
                Err(err) => {
                    if !matches!(err, CompactError::Busy { .. }) {
                        return format!("retry [{s}, {e}) of log {log}: claim: {err}");
                    }
                    self.stepwise.push(op);
                    return format!("retry [{s}, {e}) of log {log}: busy");
                }
            };
            let result = self.compactor.finish(&claim, &op.prepared).await;
            claim.release(self.stack.meta.as_ref()).await;
            return match result {
                Ok(outcome) => {
                    self.after_c3(&op.prepared, outcome).await;
                    self.memory.retired.push((log, s, e));
                    format!("retried C3-C5 of [{s}, {e}) of log {log}: {outcome:?}")
                }
                Err(err) => format!("retried C3-C5 of [{s}, {e}) of log {log}: {err}"),
            };
        }
        match op.stage {
            Stage::Prepared => {
                let claim = op.claim.as_ref().expect("live claim");
                let lease = match self.compactor.acquire_lease(claim).await {
                    Ok(l) => l,
                    Err(err) => {
                        let c = op.claim.take().expect("claim");
                        c.release(self.stack.meta.as_ref()).await;
                        return format!("C3 of [{s}, {e}) of log {log}: lease: {err}");
                    }
                };
                match self.compactor.install(&op.prepared, &lease).await {
                    Ok(outcome) => {
                        self.after_c3(&op.prepared, outcome).await;
                        op.stage = Stage::Installed(lease);
                        self.stepwise.push(op);
                        format!("C3 of [{s}, {e}) of log {log}: {outcome:?}")
                    }
                    Err(err) => {
                        let _ = lease.release(self.stack.meta.as_ref()).await;
                        let c = op.claim.take().expect("claim");
                        c.release(self.stack.meta.as_ref()).await;
                        format!("C3 of [{s}, {e}) of log {log}: {err}")
                    }
                }
            }
            Stage::Installed(lease) => {
                let range = lakestream_compactor::plan::PendingRetire { start: s, end: e };
                let wal: Vec<String> =
                    op.prepared.plan.records.iter().map(|r| r.wal_object.clone()).collect();
                let result = self.compactor.retire(log, range, wal.iter().map(String::as_str), &lease).await;
                let result = match result {
                    Ok(()) => self.compactor.record_progress(log, e, &lease).await,
                    Err(err) => Err(err),
                };
                let _ = lease.release(self.stack.meta.as_ref()).await;
                let c = op.claim.take().expect("claim");
                c.release(self.stack.meta.as_ref()).await;
                match result {
                    Ok(()) => {
                        self.memory.retired.push((log, s, e));
                        format!("C4+C5 of [{s}, {e}) of log {log}")
                    }
                    Err(err) => format!("C4 of [{s}, {e}) of log {log}: {err}"),
                }
            }
        }
    }

    /// A hard trim that lands between the Get and the Put of a C3 (as another
    /// implementation's trim could): the Put re-creates the key below B, leaving a gap there.
    async fn hard_trim_inside_c3(&mut self) -> String {
        let Some(i) = self.stepwise.iter().position(|op| {
            matches!(op.stage, Stage::Prepared) && op.claim.as_ref().is_some_and(Claim::is_live)
        }) else {
            return "hard trim inside C3: no prepared compaction".into();
        };
        let (log, e, key) = {
            let p = &self.stepwise[i].prepared;
            (p.log.log_id, p.plan.end, p.key())
        };
        if self.memory.deleted.contains(&log) {
            return "hard trim inside C3: log deleted".into();
        }
        let trimmed = self.writers[0].soft_trim(log, e - 1).await;
        let next = self.reader.next_offset(log).await.unwrap();
        let last = log_state(self.stack.meta.as_ref(), log).await.records.last().map(|r| r.1);
        match trimmed {
            Ok(t) if t.marker >= e && next > e && last.is_some_and(|start| start >= e) => {
                let armed = self.stack.delete_after_get(common::DeleteAfterGet {
                    trigger_key: key,
                    partition: keys::partition(log),
                    start: keys::first_key(log),
                    end: keys::covering_lookup_key(log, e),
                });
                let outcome = self.continue_op(i).await;
                format!("hard trim to {e} inside C3 (fired {}): {outcome}", armed.fired() > 0)
            }
            Ok(t) => format!("hard trim inside C3: B = {} does not cover [.., {e})", t.marker),
            Err(err) => format!("hard trim inside C3: soft trim: {err}"),
        }
    }

    async fn after_c3(&mut self, prepared: &PreparedCompaction, outcome: InstallOutcome) {
        if outcome != InstallOutcome::KeyAbsent {
            let log = prepared.log.log_id;
            let entry = (log, prepared.plan.start, prepared.plan.end, prepared.key(), prepared.value.clone());
            if !self.memory.installed.contains(&entry) {
                self.memory.installed.push(entry);
            }
        }
    }

    /// The compactor process dies: its session (claims, leases) ends and its memory is lost.
    /// Step-by-step compactions it ran are abandoned; an installed one leaves C4 undone.
    async fn crash_compactor(&mut self) -> String {
        if let Some(id) = self.compactor.session_id().await {
            self.stack.mem.expire_session(&id);
        }
        let abandoned = self.stepwise.len();
        self.stepwise.clear();
        self.compactor_generation += 1;
        self.compactor = self.stack.compactor(sim_config(), self.seed * 1000 + self.compactor_generation);
        format!("compactor crashed, {abandoned} step-by-step compactions abandoned")
    }

    /// The compactor's session expires while it holds claims and leases; the process lives
    /// on and retries its compactions under a new session.
    async fn expire_compactor_session(&mut self) -> String {
        let (compactor, name) = self.any_compactor();
        match compactor.session_id().await {
            Some(id) => {
                format!("{name} compactor session {id} expired: {}", self.stack.mem.expire_session(&id))
            }
            None => "compactor has no session".into(),
        }
    }

    async fn expire_writer_session(&mut self) -> String {
        let w = self.rng.below(2) as usize;
        match self.writers[w].session_id().await {
            Some(id) => format!("writer {w} session {id} expired: {}", self.stack.mem.expire_session(&id)),
            None => format!("writer {w} has no session"),
        }
    }

    async fn soft_trim(&mut self) -> String {
        let Some(l) = self.pick_log() else { return "soft trim: no live log".into() };
        let next = self.reader.next_offset(LogId(l)).await.unwrap();
        let through = self.rng.below(next + 2);
        match self.writers[self.rng.below(2) as usize].soft_trim(LogId(l), through).await {
            Ok(t) => format!("soft trim log {l} through {through}: B = {} advanced {}", t.marker, t.advanced),
            Err(e) => format!("soft trim log {l} through {through}: {e}"),
        }
    }

    async fn hard_trim(&mut self) -> String {
        let Some(l) = self.pick_log() else { return "hard trim: no live log".into() };
        let next = self.reader.next_offset(LogId(l)).await.unwrap();
        let x = self.rng.below(next + 2);
        let (compactor, name) = self.any_compactor();
        match compactor.hard_trim(&log_ref(l), x, &no_progress).await {
            Ok(r) => {
                format!(
                    "{name} hard trim log {l} to {x}: to {:?}, {} records",
                    r.trimmed_to, r.records_removed
                )
            }
            Err(e) => format!("{name} hard trim log {l} to {x}: {e}"),
        }
    }

    async fn gc(&mut self) -> String {
        let (compactor, name) = self.any_compactor();
        match compactor.gc_once(&no_progress).await {
            Ok(r) => format!(
                "{name} gc: {} WAL deleted, {} compacted deleted, {} marked, {} waiting, {} referenced",
                r.wal_deleted.len(),
                r.compacted_deleted.len(),
                r.marked_unreferenced,
                r.waiting,
                r.still_referenced
            ),
            Err(e) => format!("{name} gc: {e}"),
        }
    }

    /// Catalog-style deletion: fence, drain the leases (expiring the sessions of writers that
    /// still hold one, as a crash would), then remove every index record of the log.
    async fn delete_log(&mut self) -> String {
        if !self.memory.deleted.is_empty() {
            return "delete: one deletion per run".into();
        }
        let Some(l) = self.pick_log() else { return "delete: no live log".into() };
        let log = LogId(l);
        let meta = self.stack.meta.as_ref();
        lease::fence(meta, log).await.unwrap();
        let quick =
            DrainConfig { timeout: Duration::from_millis(100), poll_interval: Duration::from_millis(25) };
        let mut drained = lease::drain(meta, log, &quick).await.unwrap();
        if let DrainOutcome::TimedOut { .. } = drained {
            for w in &self.writers {
                if let Some(id) = w.session_id().await {
                    self.stack.mem.expire_session(&id);
                }
            }
            for c in [&self.compactor, &self.peer] {
                if let Some(id) = c.session_id().await {
                    self.stack.mem.expire_session(&id);
                }
            }
            drained = lease::drain(meta, log, &quick).await.unwrap();
        }
        if drained != DrainOutcome::Drained {
            return format!("delete log {l}: leases did not drain: {drained:?}");
        }
        meta.delete_range(&keys::partition(log), &keys::first_key(log), &keys::last_key(log)).await.unwrap();
        self.memory.deleted.insert(log);
        format!("deleted log {l}")
    }
}

/// The state of one log as the checker reads it.
struct LogState {
    records: Vec<(IndexKey, u64, IndexValue, Bytes)>,
}

async fn log_state(meta: &dyn MetaStore, log: LogId) -> LogState {
    let p = keys::partition(log);
    let raw = meta.scan(&p, &keys::first_key(log), &keys::last_key(log), None).await.unwrap();
    let records = raw
        .into_iter()
        .filter(|r| keys::is_index_key_of(&r.key, log))
        .map(|r| {
            let key = IndexKey::parse(&r.key).unwrap();
            let value = entry_index::decode(&r.value).unwrap();
            let start = key.end_offset - u64::from(value.message_count());
            (key, start, value, r.value)
        })
        .collect();
    LogState { records }
}

async fn read_log(reader: &Reader, log: &LogRef) -> Result<Vec<Entry>, String> {
    let mut out = Vec::new();
    let mut next = 0;
    loop {
        let batch = reader.read(log, next, 256, Duration::ZERO).await.map_err(|e| e.to_string())?;
        if batch.entries.is_empty() {
            return Ok(out);
        }
        next = batch.next_offset;
        out.extend(batch.entries);
    }
}

/// The properties of addendum §13.2, checked after every step. Returns the first violation.
async fn check(sim: &mut Sim) -> Result<(), String> {
    let meta = sim.stack.meta.clone();
    let now = sim.now();
    let mut named_wal: HashSet<String> = HashSet::new();
    for l in 1..=LOGS {
        let log = LogId(l);
        let state = log_state(meta.as_ref(), log).await;
        for (_, _, value, _) in &state.records {
            if let IndexValue::Raw(raw) = value {
                named_wal.insert(raw.location.clone());
            }
        }
        if sim.memory.deleted.contains(&log) {
            continue; // the properties do not apply to deleted logs
        }
        let b = sim.reader.trim_marker(log).await.map_err(|e| e.to_string())?;
        let next = state.records.last().map_or(0, |r| r.0.end_offset);
        let last_start = state.records.last().map(|r| r.1);
        // MonotonicOffsets: next never decreases; the greatest key is never removed.
        let prev_next = sim.memory.last_next.insert(log, next).unwrap_or(0);
        if next < prev_next {
            return Err(format!("MonotonicOffsets: log {l} next went from {prev_next} to {next}"));
        }
        if let Some(last) = state.records.last() {
            let key = last.0.encode();
            if let Some(prev) = sim.memory.last_greatest_key.insert(log, key.clone())
                && key < prev
            {
                return Err(format!("MonotonicOffsets: log {l} greatest key {prev} was removed (now {key})"));
            }
        }
        // Trim: B never decreases and never exceeds the start of the last record.
        let prev_b = sim.memory.last_b.insert(log, b).unwrap_or(0);
        if b < prev_b {
            return Err(format!("Trim: log {l} B went from {prev_b} to {b}"));
        }
        // A soft trim caps B at the start of the last record. A later compaction can merge
        // that record into a PARQUET record that starts lower, so for a PARQUET last record
        // the bound is the start of the RAW record it replaced, which lies below its end.
        if let (Some(start), Some(last)) = (last_start, state.records.last()) {
            let raw = last.2.file_type() == FileType::Raw;
            if (raw && b > start) || (!raw && b >= next) {
                return Err(format!("Trim: log {l} B {b} exceeds the start {start} of the last record"));
            }
        }
        // NoOverlappingRanges: RAW records never overlap; a PARQUET record overlaps earlier
        // records only inside the C3–C4 window of an installed compaction.
        for pair in state.records.windows(2) {
            let (earlier, later) = (&pair[0], &pair[1]);
            if earlier.0.end_offset > later.1 {
                let window = later.2.file_type() == FileType::Parquet
                    && sim
                        .memory
                        .installed
                        .iter()
                        .any(|(il, s, e, _, _)| *il == log && *s == later.1 && *e == later.0.end_offset);
                if !window {
                    return Err(format!(
                        "NoOverlappingRanges: log {l} record ending {} overlaps record [{}, {})",
                        earlier.0.end_offset, later.1, later.0.end_offset
                    ));
                }
            }
        }
        // NoPhantomEntries: after C4 of [s, e), no record ends in [s+1, e-1].
        for (rl, s, e) in &sim.memory.retired {
            if *rl == log
                && let Some(r) = state.records.iter().find(|r| r.0.end_offset > *s && r.0.end_offset < *e)
            {
                return Err(format!(
                    "NoPhantomEntries: log {l} record ending {} inside retired [{s}, {e})",
                    r.0.end_offset
                ));
            }
        }
        // CompactionPreservesData / SequentialCompactionSafety: once C3 took effect the key
        // holds that PARQUET value, or is absent because a hard trim at or below B removed it.
        for (il, _, e, key, value) in &sim.memory.installed {
            if *il != log {
                continue;
            }
            match state.records.iter().find(|r| r.0.encode() == *key) {
                Some(r) if r.3 == *value => {}
                Some(_) => {
                    return Err(format!("CompactionPreservesData: log {l} key {key} holds another value"));
                }
                None if *e <= b => {}
                None => {
                    return Err(format!("CompactionPreservesData: log {l} key {key} vanished with B = {b}"));
                }
            }
        }
        // CursorConsistency.
        if let Some(cursor) =
            meta.get(&keys::partition(log), &keys::compaction_cursor_key(log)).await.unwrap()
        {
            let cursor: u64 = std::str::from_utf8(&cursor.value).unwrap().parse().unwrap();
            if cursor > next {
                return Err(format!("CursorConsistency: log {l} cursor {cursor} above next {next}"));
            }
        }
        // NoReaderError: every acknowledged entry ending above B reads back with its bytes,
        // offsets and timestamp; nothing else is returned; offsets inside entries work too.
        let expected: Vec<Entry> = sim
            .memory
            .acked
            .get(&log)
            .map(|m| m.values().filter(|e| e.end_offset() > b).cloned().collect())
            .unwrap_or_default();
        let got =
            read_log(&sim.reader, &log_ref(l)).await.map_err(|e| format!("NoReaderError: log {l}: {e}"))?;
        if got != expected {
            let first_diff =
                got.iter().zip(&expected).position(|(g, x)| g != x).unwrap_or(got.len().min(expected.len()));
            return Err(format!(
                "NoReaderError: log {l} (B = {b}, next = {next}) read {} entries, expected {}; first difference at #{first_diff}: got {:?}, expected {:?}",
                got.len(),
                expected.len(),
                got.get(first_diff).map(|e| (e.offset, e.record_count)),
                expected.get(first_diff).map(|e| (e.offset, e.record_count))
            ));
        }
        if let Some(entry) = expected.iter().find(|e| e.record_count > 1) {
            let inside = entry.offset + 1;
            let batch =
                sim.reader.read(&log_ref(l), inside, 1, Duration::ZERO).await.map_err(|e| e.to_string())?;
            if batch.entries.first() != Some(entry) {
                return Err(format!("NoReaderError: log {l} offset {inside} does not return its entry"));
            }
        }
    }
    // Reclamation: a WAL object is deleted only a grace period after no record named it.
    let present: HashSet<String> = common::object_names(&sim.stack.wal).await.into_iter().collect();
    let mut gone = Vec::new();
    for (name, unnamed_since) in sim.memory.wal_objects.iter_mut() {
        if !present.contains(name) {
            match unnamed_since {
                None => {
                    return Err(format!(
                        "Reclamation: WAL object {name} was deleted while a record named it"
                    ));
                }
                Some(t) if now - *t < GRACE_MS => {
                    return Err(format!(
                        "Reclamation: WAL object {name} deleted {} ms after its last record went",
                        now - *t
                    ));
                }
                Some(_) => gone.push(name.clone()),
            }
        } else if named_wal.contains(name) {
            *unnamed_since = None;
        } else if unnamed_since.is_none() {
            *unnamed_since = Some(now);
        }
    }
    for name in gone {
        sim.memory.wal_objects.remove(&name);
    }
    for name in present {
        let named = named_wal.contains(&name);
        sim.memory.wal_objects.entry(name).or_insert(if named { None } else { Some(now) });
    }
    Ok(())
}

/// Runs one seed; returns the trace, or the violation with the trace so far.
async fn run(seed: u64, steps: usize) -> Result<Vec<String>, (String, Vec<String>)> {
    let mut sim = Sim::new(seed);
    for i in 0..steps {
        let what = sim.step().await;
        let digest = digest(&sim).await;
        sim.trace.push(format!("{i:03} t={} {what} | {digest}", sim.now()));
        if let Err(violation) = check(&mut sim).await {
            return Err((violation, std::mem::take(&mut sim.trace)));
        }
    }
    for w in &sim.writers {
        w.close().await;
    }
    Ok(sim.trace)
}

/// A short summary of the stores: per log its records' ends, and the object counts.
async fn digest(sim: &Sim) -> String {
    let mut parts = Vec::new();
    for l in 1..=LOGS {
        let state = log_state(sim.stack.meta.as_ref(), LogId(l)).await;
        let ends: Vec<String> = state
            .records
            .iter()
            .map(|r| {
                format!("{}{}", if r.2.file_type() == FileType::Raw { "r" } else { "p" }, r.0.end_offset)
            })
            .collect();
        parts.push(format!("L{l}:{}", ends.join(",")));
    }
    let wal = common::object_names(&sim.stack.wal).await.len();
    let compacted = common::object_names(&sim.stack.compacted).await.len();
    format!("{} wal={wal} compacted={compacted}", parts.join(" "))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap()
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

// spec-rule: d161565de4 [All] An implementation MUST NOT create an index key except by the sequenced put o…
#[test]
fn simulation_keeps_every_protocol_property() {
    let steps = env_u64("LAKESTREAM_SIM_STEPS", 150) as usize;
    let seeds = sweep("simulation", 0..150);
    let replay = seeds.len() == 1;
    for seed in seeds {
        let _replay = Seed::of("simulation", seed);
        match runtime().block_on(run(seed, steps)) {
            Ok(trace) => {
                if replay {
                    println!("{}", trace.join("\n"));
                }
            }
            Err((violation, trace)) => {
                let tail = trace[trace.len().saturating_sub(25)..].join("\n");
                panic!(
                    "seed {seed} violated a property: {violation}\nlast steps:\n{tail}\n\
                     replay: LAKESTREAM_TEST_SEED={seed} cargo test -p lakestream-compactor --test simulation -- --nocapture"
                );
            }
        }
    }
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    let a = runtime().block_on(run(7, 80)).map_err(|e| e.0).unwrap();
    let b = runtime().block_on(run(7, 80)).map_err(|e| e.0).unwrap();
    assert_eq!(a, b);
    let c = runtime().block_on(run(8, 80)).map_err(|e| e.0).unwrap();
    assert_ne!(a, c, "another seed explores another interleaving");
}

#[test]
fn the_checker_catches_a_compaction_that_deletes_before_installing() {
    // A buggy compactor that runs C4 before C3: between the two steps the range has no
    // index record, so NoReaderError must fail.
    runtime().block_on(async {
        let mut sim = Sim::new(99);
        for _ in 0..6 {
            sim.append().await;
        }
        sim.stack.clock.advance_ms(200_000);
        check(&mut sim).await.unwrap();
        let log = log_ref(1);
        if sim.memory.acked.get(&log.log_id).is_none_or(|m| m.len() < 2) {
            let w = sim.writers[0].clone();
            for p in ["x", "y"] {
                let r = w.append(log.log_id, Bytes::from_static(p.as_bytes()), 1).await;
                sim.record_ack(1, Bytes::from_static(p.as_bytes()), r);
            }
            sim.stack.clock.advance_ms(200_000);
        }
        let c = sim.compactor.clone();
        let claim = c.claim(log.log_id).await.unwrap();
        let (_, planning) = c.plan(log.log_id).await.unwrap();
        let NextRange::Ready(plan) = planning.next else { panic!("{planning:?}") };
        assert!(plan.records.len() >= 2, "{plan:?}");
        let prepared = c.prepare(&log, &plan).await.unwrap().unwrap();
        let lease = c.acquire_lease(&claim).await.unwrap();
        let range = lakestream_compactor::plan::PendingRetire { start: plan.start, end: plan.end };
        c.retire(log.log_id, range, std::iter::empty(), &lease).await.unwrap(); // C4 first: the bug
        let violation = check(&mut sim).await.unwrap_err();
        assert!(violation.starts_with("NoReaderError"), "{violation}");
        c.install(&prepared, &lease).await.unwrap();
    });
}

// spec-rule: cedd7cd2ae [All] An implementation MUST NOT delete a WAL object while an index record of any…
#[test]
fn the_checker_catches_a_wal_object_deleted_while_named() {
    runtime().block_on(async {
        let mut sim = Sim::new(5);
        sim.append().await;
        check(&mut sim).await.unwrap();
        let names = common::object_names(&sim.stack.wal).await;
        let path = lakestream_objstore::ObjectPath::new(names[0].clone()).unwrap();
        sim.stack.wal.delete(&path).await.unwrap();
        let violation = check(&mut sim).await.unwrap_err();
        assert!(
            violation.starts_with("NoReaderError") || violation.starts_with("Reclamation"),
            "{violation}"
        );
    });
}
