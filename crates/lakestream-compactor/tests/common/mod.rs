//! Shared helpers of the compactor's integration tests: an in-memory stack with a manual
//! clock, a writer, a reader, and whole-log reads.

#![allow(dead_code)] // each test file uses a different subset

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use lakestream_compactor::{Compactor, CompactorConfig, CompactorDeps};
use lakestream_format::{Clock, Entry, LogId, LogRef, ManualClock};
use lakestream_meta::hooked::{Call, Hook, HookedStore, Op};
use lakestream_meta::lease::SeededTokens;
use lakestream_meta::{Comparison, InMemoryStore, MetaError, MetaStore};
use lakestream_objstore::{
    ByteRange, InMemoryStore as MemObjects, ObjectMeta, ObjectPath, ObjectPrefix, ObjectResult, ObjectStore,
    WriteOnce,
};
use lakestream_reader::{Reader, ReaderConfig, ReaderDeps};
use lakestream_writer::{Writer, WriterConfig, WriterDeps};

/// 2026-11-30 00:00:00 UTC: WAL names carry real-looking dates.
pub const START_MS: i64 = 1_796_000_000_000;

pub struct Stack {
    pub clock: ManualClock,
    pub mem: InMemoryStore,
    /// The metadata store the roles use: `mem` behind hooks.
    pub hooks: Arc<HookedStore>,
    /// The hook [`Stack::delete_after_get`] armed last (arming another replaces it).
    armed: Mutex<Option<Hook>>,
    pub meta: Arc<dyn MetaStore>,
    pub wal: Arc<dyn ObjectStore>,
    pub compacted: Arc<dyn ObjectStore>,
}

impl Stack {
    pub fn new() -> Stack {
        let clock = ManualClock::new(START_MS);
        let shared: Arc<dyn Clock> = Arc::new(clock.clone());
        let mem = InMemoryStore::with_config(2, shared.clone()).unwrap();
        let hooks = HookedStore::new(Arc::new(mem.clone()));
        Stack {
            clock,
            meta: hooks.clone(),
            hooks,
            armed: Mutex::new(None),
            mem,
            wal: Arc::new(MemObjects::new(shared.clone())),
            compacted: Arc::new(MemObjects::new(shared)),
        }
    }

    pub fn writer(&self, seed: u64) -> Writer {
        let deps = WriterDeps {
            meta: self.meta.clone(),
            objects: self.wal.clone(),
            clock: Arc::new(self.clock.clone()),
            tokens: Arc::new(SeededTokens::new(seed)),
        };
        let config = WriterConfig { flush_window: Duration::from_millis(1), ..WriterConfig::default() };
        Writer::start(config, deps).unwrap()
    }

    /// A reader without an object cache: every read sees what the stores hold now.
    pub fn reader(&self) -> Reader {
        let deps =
            ReaderDeps { meta: self.meta.clone(), wal: self.wal.clone(), compacted: self.compacted.clone() };
        Reader::new(ReaderConfig { object_cache_bytes: 0, ..ReaderConfig::default() }, deps).unwrap()
    }

    pub fn compactor(&self, config: CompactorConfig, seed: u64) -> Compactor {
        let deps = CompactorDeps {
            meta: self.meta.clone(),
            wal: self.wal.clone(),
            compacted: self.compacted.clone(),
            clock: Arc::new(self.clock.clone()),
            tokens: Arc::new(SeededTokens::new(seed)),
        };
        Compactor::new(config, deps).unwrap()
    }
}

/// Small thresholds so tests close ranges quickly; grace periods as configured by default.
pub fn test_config() -> CompactorConfig {
    CompactorConfig {
        max_range_bytes: 1 << 20,
        max_file_bytes: 1 << 20,
        read_chunk_bytes: 4096,
        ..CompactorConfig::default()
    }
}

pub fn log_ref(id: u64) -> LogRef {
    LogRef { log_id: LogId(id), namespace: "ns".into(), stream: format!("stream-{id}") }
}

/// Every entry from `from` to the end of the log.
pub async fn read_all(reader: &Reader, log: &LogRef, from: u64) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut next = from;
    loop {
        let batch = reader.read(log, next, 1 << 20, Duration::ZERO).await.unwrap();
        if batch.entries.is_empty() {
            return out;
        }
        next = batch.next_offset;
        out.extend(batch.entries);
    }
}

/// Appends `n` entries of `records` records each, one WAL object per append.
pub async fn append_n(writer: &Writer, log: LogId, n: usize, records: u32, tag: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    for i in 0..n {
        let payload = Bytes::from(format!("{tag}-{log}-{i}-{}", "x".repeat(i % 7)));
        let ack = writer.append(log, payload.clone(), records).await.unwrap();
        out.push(Entry {
            offset: ack.offset,
            record_count: ack.record_count,
            timestamp_ms: ack.timestamp_ms,
            payload,
        });
    }
    out
}

/// The paths of every object in a store.
pub async fn object_names(store: &Arc<dyn ObjectStore>) -> Vec<String> {
    use futures::StreamExt;
    let listed: Vec<_> = store.list(&ObjectPrefix::all(), None).collect().await;
    listed.into_iter().map(|m| m.unwrap().path.to_string()).collect()
}

/// One `DeleteRange` to run right after a `Get` of a given key ([`Stack::delete_after_get`]):
/// a hard trim (or a log deletion) landing between the Get and the Put of step C3.
#[derive(Debug, Clone)]
pub struct DeleteAfterGet {
    pub trigger_key: String,
    pub partition: String,
    pub start: String,
    pub end: String,
}

impl Stack {
    /// Runs `hook`'s `DeleteRange` right after the next `Get` of its key, instead of any
    /// armed before; the answered hook tells whether it fired.
    pub fn delete_after_get(&self, hook: DeleteAfterGet) -> Hook {
        let DeleteAfterGet { trigger_key, partition, start, end } = hook;
        let armed = self
            .hooks
            .on(Op::Get)
            .key(trigger_key)
            .when(|call| call.cmp == Some(Comparison::Equal))
            .once()
            .run_after(move |inner, _| {
                let (partition, start, end) = (partition.clone(), start.clone(), end.clone());
                async move { inner.delete_range(&partition, &start, &end).await }
            });
        if let Some(earlier) = self.armed.lock().unwrap().replace(armed.clone()) {
            earlier.remove();
        }
        armed
    }
}

/// One shared, ordered log of the operations the compactor makes on the metadata store and
/// the compacted root, so a test can assert their order across both stores. Each mutating
/// metadata operation on a log's partition notes how many lease records the log had as it
/// ran (`leases=N`), so a test can tell a change made under a lease from one made without.
#[derive(Default)]
pub struct OpLog {
    ops: Mutex<Vec<String>>,
    /// Runs once, right after the first operation whose entry the predicate accepts.
    after: Mutex<Option<(OpPredicate, OpAction)>>,
    /// Fails (without running it) the first metadata operation the predicate accepts, as a
    /// crash or a lost connection right before it would.
    fail: Mutex<Option<OpPredicate>>,
    /// Answers the first metadata operation the predicate accepts with `OutcomeUnknown`:
    /// after running it when the flag is set (its answer was lost), without running it
    /// otherwise (it is still in the store's pipeline; it lands only if the test makes it).
    unknown: Mutex<Option<(OpPredicate, bool)>>,
}

type OpPredicate = Box<dyn Fn(&str) -> bool + Send + Sync>;
type OpAction = Box<dyn FnOnce() + Send>;

impl std::fmt::Debug for OpLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpLog").field("ops", &self.ops).finish_non_exhaustive()
    }
}

impl OpLog {
    /// The operations so far, in order.
    pub fn ops(&self) -> Vec<String> {
        self.ops.lock().unwrap().clone()
    }

    /// Forgets the operations so far.
    pub fn clear(&self) {
        self.ops.lock().unwrap().clear();
    }

    /// Runs `action` right after the first operation whose log entry `when` accepts.
    pub fn after(
        &self,
        when: impl Fn(&str) -> bool + Send + Sync + 'static,
        action: impl FnOnce() + Send + 'static,
    ) {
        *self.after.lock().unwrap() = Some((Box::new(when), Box::new(action)));
    }

    /// Fails the first metadata operation whose log entry `when` accepts: it does not run
    /// and answers `Unavailable`.
    pub fn fail_once(&self, when: impl Fn(&str) -> bool + Send + Sync + 'static) {
        *self.fail.lock().unwrap() = Some(Box::new(when));
    }

    /// Answers the first metadata operation `when` accepts with `OutcomeUnknown`: if `lands`,
    /// it runs first (its answer is lost), else it does not run (still in flight).
    pub fn unknown_once(&self, when: impl Fn(&str) -> bool + Send + Sync + 'static, lands: bool) {
        *self.unknown.lock().unwrap() = Some((Box::new(when), lands));
    }

    /// Whether `op` is the one to answer `OutcomeUnknown` (disarming it), and whether it lands.
    fn unknown(&self, op: &str) -> Option<bool> {
        let mut unknown = self.unknown.lock().unwrap();
        if unknown.as_ref().is_some_and(|(when, _)| when(op)) {
            return unknown.take().map(|(_, lands)| lands);
        }
        None
    }

    /// Whether the failure armed with [`OpLog::fail_once`] has happened (or none was armed).
    pub fn failed(&self) -> bool {
        self.fail.lock().unwrap().is_none()
    }

    /// Whether `op` is the one to fail (disarming it).
    fn fails(&self, op: &str) -> bool {
        let mut fail = self.fail.lock().unwrap();
        if fail.as_ref().is_some_and(|when| when(op)) {
            *fail = None;
            return true;
        }
        false
    }

    /// Whether the action armed with [`OpLog::after`] has run (or none was armed).
    pub fn fired(&self) -> bool {
        self.after.lock().unwrap().is_none()
    }

    fn push(&self, op: String) {
        self.ops.lock().unwrap().push(op);
    }

    /// Fires the armed action if `op` is the one it waits for.
    fn done(&self, op: &str) {
        let action = {
            let mut after = self.after.lock().unwrap();
            match after.as_ref() {
                Some((when, _)) if when(op) => after.take().map(|(_, action)| action),
                _ => None,
            }
        };
        if let Some(action) = action {
            action();
        }
    }

    /// The position of the first operation containing every one of `parts`.
    pub fn position(&self, parts: &[&str]) -> Option<usize> {
        self.ops().iter().position(|op| parts.iter().all(|p| op.contains(p)))
    }
}

/// `leases=N` for a log partition (a decimal name), nothing for other partitions.
async fn leases(inner: &dyn MetaStore, partition: &str) -> String {
    match partition.parse::<u64>() {
        Ok(id) => {
            let n = lakestream_meta::lease::list_leases(inner, LogId(id))
                .await
                .map(|l| l.len().to_string())
                .unwrap_or_else(|e| format!("error {e}"));
            format!(" leases={n}")
        }
        Err(_) => String::new(),
    }
}

/// A metadata operation as the [`OpLog`] writes it.
async fn describe(inner: &dyn MetaStore, call: &Call) -> String {
    let (p, k, end) = (&call.partition, &call.key, &call.end);
    match call.op {
        Op::Get => format!("meta.get {p} {k} {:?}", call.cmp.unwrap_or(Comparison::Equal)),
        Op::Put => format!("meta.put {p} {k}{}", leases(inner, p).await),
        Op::Delete => format!("meta.delete {p} {k}{}", leases(inner, p).await),
        Op::DeleteIfVersion => {
            let version = call.version.unwrap_or_default();
            format!("meta.delete_if_version {p} {k} {version}{}", leases(inner, p).await)
        }
        Op::DeleteRange => format!("meta.delete_range {p} {k}..{end}{}", leases(inner, p).await),
        Op::SequencedPut => format!("meta.sequenced_put {p} {k}"),
        Op::List => format!("meta.list {p} {k}..{end}"),
        Op::Scan => format!("meta.scan {p} {k}..{end}"),
        Op::OpenSession => "meta.open_session".to_owned(),
        other => format!("meta.{other:?} {p} {k}"),
    }
}

/// Logs every metadata operation through `hooks` to `log` (sessions' ephemeral creates
/// included), failing or losing the answer of the ones `log` was told to.
fn record(hooks: &HookedStore, log: Arc<OpLog>) {
    let ops = log.clone();
    hooks.on_any(&Op::STORE).around(move |call, next| {
        let log = ops.clone();
        Box::pin(async move {
            let op = describe(next.inner().as_ref(), &call).await;
            if log.fails(&op) {
                log.push(format!("{op} FAILED"));
                return Err(MetaError::Unavailable(format!("injected failure of {op}")));
            }
            if let Some(lands) = log.unknown(&op) {
                let unknown = MetaError::OutcomeUnknown(format!("injected: no answer to {op}"));
                if !lands {
                    log.push(format!("{op} HELD"));
                    return Err(unknown);
                }
                log.push(format!("{op} ANSWER LOST"));
                next.forward().await?;
                return Err(unknown);
            }
            log.push(op.clone());
            let answer = next.forward().await;
            log.done(&op);
            answer
        })
    });
    hooks.on(Op::CreateEphemeral).around(move |call, next| {
        let log = log.clone();
        Box::pin(async move {
            let op = format!("session.create_ephemeral {} {}", call.partition, call.key);
            log.push(op.clone());
            let answer = next.forward().await;
            log.done(&op);
            answer
        })
    });
}

/// An object store that logs its writes and deletes to an [`OpLog`] under the root's name.
#[derive(Debug)]
pub struct RecordingObjects {
    pub root: &'static str,
    pub inner: Arc<dyn ObjectStore>,
    pub log: Arc<OpLog>,
}

#[async_trait]
impl ObjectStore for RecordingObjects {
    async fn put(&self, path: &ObjectPath, bytes: Bytes) -> ObjectResult<()> {
        let op = format!("{}.put {path}", self.root);
        self.log.push(op.clone());
        let result = self.inner.put(path, bytes).await;
        self.log.done(&op);
        result
    }
    async fn get(&self, path: &ObjectPath) -> ObjectResult<Bytes> {
        self.inner.get(path).await
    }
    async fn get_range(&self, path: &ObjectPath, range: ByteRange) -> ObjectResult<Bytes> {
        self.inner.get_range(path, range).await
    }
    async fn head(&self, path: &ObjectPath) -> ObjectResult<ObjectMeta> {
        self.inner.head(path).await
    }
    async fn delete(&self, path: &ObjectPath) -> ObjectResult<()> {
        let op = format!("{}.delete {path}", self.root);
        self.log.push(op.clone());
        let result = self.inner.delete(path).await;
        self.log.done(&op);
        result
    }
    async fn delete_many(&self, paths: &[ObjectPath]) -> ObjectResult<()> {
        let names: Vec<String> = paths.iter().map(ToString::to_string).collect();
        let op = format!("{}.delete_many {}", self.root, names.join(" "));
        self.log.push(op.clone());
        let result = self.inner.delete_many(paths).await;
        self.log.done(&op);
        result
    }
    fn list(
        &self,
        prefix: &ObjectPrefix,
        start_after: Option<&ObjectPath>,
    ) -> BoxStream<'static, ObjectResult<ObjectMeta>> {
        self.inner.list(prefix, start_after)
    }
    fn write_once(&self) -> WriteOnce {
        self.inner.write_once()
    }
}

impl Stack {
    /// A stack whose metadata store and compacted root log every operation to one
    /// [`OpLog`], in order.
    pub fn recorded() -> (Stack, Arc<OpLog>) {
        let mut s = Stack::new();
        let log = Arc::new(OpLog::default());
        record(&s.hooks, log.clone());
        s.compacted =
            Arc::new(RecordingObjects { root: "compacted", inner: s.compacted.clone(), log: log.clone() });
        (s, log)
    }

    /// A writer with these settings (time and tokens as [`Stack::writer`]).
    pub fn writer_with(&self, seed: u64, config: WriterConfig) -> Writer {
        let deps = WriterDeps {
            meta: self.meta.clone(),
            objects: self.wal.clone(),
            clock: Arc::new(self.clock.clone()),
            tokens: Arc::new(SeededTokens::new(seed)),
        };
        Writer::start(config, deps).unwrap()
    }
}
