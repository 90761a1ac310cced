//! The writer's rules over the in-memory stores, one test per rule, each named after it: index
//! records are published under a lease and only after their WAL object is written, soft trim
//! holds its lease and stops when the lease's session ends, appends queued under a lost session
//! fail with `LeaseLost` and publish nothing, and WAL object names never collide. Pauses are
//! gates the test opens, never sleeps; tokio's
//! clock is paused, so a flush window ends only once every runnable task has run (the
//! entries a test spawns together share one upload).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use lakestream_format::entry_index::{self, IndexValue};
use lakestream_format::keys;
use lakestream_format::{Clock, ErrorClass, LogId, ManualClock};
use lakestream_meta::hooked::{Gate, HookedStore, Op, gate};
use lakestream_meta::lease::{self, SeededTokens};
use lakestream_meta::{InMemoryStore, MetaStore, Record};
use lakestream_objstore::{
    ByteRange, InMemoryStore as MemObjects, ObjectMeta, ObjectPath, ObjectPrefix, ObjectResult, ObjectStore,
    WriteOnce,
};
use lakestream_writer::{AppendError, TrimError, Writer, WriterConfig, WriterDeps};

/// `written {name}` when a WAL object put completed, `indexed {location}` when a sequenced
/// put naming it is issued.
type Events = Arc<Mutex<Vec<String>>>;

/// Pauses the next read of a trim marker at `gate`.
fn pause_next_marker_read(meta: &HookedStore, gate: Gate) {
    meta.on(Op::Get).key_prefix("/mark-deleted-offsets/").once().pause(gate);
}

/// The in-memory object store, with a gate on the next `put` (a WAL object upload) and the
/// name of every put ever made, deleted objects included.
#[derive(Debug)]
struct Objects {
    inner: MemObjects,
    put_gate: Mutex<Option<Gate>>,
    names: Mutex<Vec<String>>,
    events: Events,
    /// How many puts have completed: a signal a test can wait on.
    written: tokio::sync::watch::Sender<usize>,
}

#[async_trait]
impl ObjectStore for Objects {
    async fn put(&self, path: &ObjectPath, bytes: Bytes) -> ObjectResult<()> {
        let gate = self.put_gate.lock().unwrap().take();
        if let Some(gate) = gate {
            gate.pass().await;
        }
        self.names.lock().unwrap().push(path.to_string());
        self.inner.put(path, bytes).await?;
        self.events.lock().unwrap().push(format!("written {path}"));
        self.written.send_modify(|n| *n += 1);
        Ok(())
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
        self.inner.delete(path).await
    }
    async fn delete_many(&self, paths: &[ObjectPath]) -> ObjectResult<()> {
        self.inner.delete_many(paths).await
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

struct Stack {
    mem: InMemoryStore,
    /// The in-memory metadata store; each sequenced put (an index record published) notes how
    /// many lease records its log had as it ran, and its WAL object in the events.
    meta: Arc<HookedStore>,
    leases_at_publish: Arc<Mutex<Vec<usize>>>,
    wal: Arc<Objects>,
    /// Completed WAL object writes and index puts, in order.
    events: Events,
    clock: ManualClock,
}

impl Stack {
    fn new() -> Stack {
        let clock = ManualClock::new(1_796_000_000_000);
        let shared: Arc<dyn Clock> = Arc::new(clock.clone());
        let mem = InMemoryStore::with_config(1, shared.clone()).unwrap();
        let events = Events::default();
        let meta = HookedStore::new(Arc::new(mem.clone()));
        let leases_at_publish = Arc::new(Mutex::new(Vec::new()));
        let seen = leases_at_publish.clone();
        meta.on(Op::SequencedPut).run(move |inner, call| {
            let seen = seen.clone();
            async move {
                let log = LogId(call.partition.parse().expect("index puts go to a log's partition"));
                let leases = lease::list_leases(inner.as_ref(), log).await.unwrap().len();
                seen.lock().unwrap().push(leases);
                Ok(())
            }
        });
        let indexed = events.clone();
        meta.on(Op::SequencedPut).observe(move |call| {
            if let Ok(IndexValue::Raw(raw)) = entry_index::decode(call.value.as_ref().unwrap()) {
                indexed.lock().unwrap().push(format!("indexed {}", raw.location));
            }
        });
        let wal = Arc::new(Objects {
            inner: MemObjects::new(shared),
            put_gate: Mutex::new(None),
            names: Mutex::new(Vec::new()),
            events: events.clone(),
            written: tokio::sync::watch::channel(0).0,
        });
        Stack { mem, meta, leases_at_publish, wal, events, clock }
    }

    fn writer(&self, seed: u64) -> Writer {
        let deps = WriterDeps {
            meta: self.meta.clone(),
            objects: self.wal.clone(),
            clock: Arc::new(self.clock.clone()),
            tokens: Arc::new(SeededTokens::new(seed)),
        };
        let config = WriterConfig { flush_window: Duration::from_millis(1), ..WriterConfig::default() };
        Writer::start(config, deps).unwrap()
    }

    async fn index_records(&self, log: LogId) -> Vec<Record> {
        let p = keys::partition(log);
        self.mem.scan(&p, &keys::first_key(log), &keys::last_key(log), None).await.unwrap()
    }
}

/// Appends one entry and waits for its acknowledgement.
async fn append_now(w: &Writer, log: LogId, payload: &'static [u8]) -> lakestream_writer::AppendAck {
    w.append(log, Bytes::from_static(payload), 1).await.unwrap()
}

// spec-rule: c1370562c3 [Writer, Compactor] An implementation MUST hold a write lease on L while it publis…
#[tokio::test(start_paused = true)]
async fn every_index_record_is_published_under_a_write_lease() {
    // [Writer, Compactor] An implementation MUST hold a write lease on L while it publishes an
    // index record of L. Between rounds the idle releaser lets every lease go, so each round
    // must take the leases again before publishing.
    let s = Stack::new();
    let w = s.writer(5);
    for round in 0..3u8 {
        let appends = (0..4u64).map(|log| w.append(LogId(10 + log), Bytes::from(vec![round; 3]), 1));
        for ack in futures::future::join_all(appends).await {
            ack.unwrap();
        }
        assert_eq!(w.release_idle_leases(Duration::ZERO).await, 4);
    }
    let seen = s.leases_at_publish.lock().unwrap().clone();
    assert!(!seen.is_empty() && seen.iter().all(|&n| n == 1), "lease records at each index put: {seen:?}");
    w.close().await;
}

// spec-rule: 2d6413a9e8 [Writer] A writer MUST NOT publish an index record for a WAL object before the obj…
#[tokio::test(start_paused = true)]
async fn no_index_record_is_published_before_its_wal_object_is_written() {
    // [Writer] A writer MUST NOT publish an index record for a WAL object before the object
    // has been written. Uploads run in parallel and finish out of order (the first one waits
    // at a gate while later ones complete); every index put must still follow its object.
    let s = Stack::new();
    let w = s.writer(6);
    let (paused, at) = gate();
    *s.wal.put_gate.lock().unwrap() = Some(paused);
    let first = tokio::spawn({
        let w = w.clone();
        async move { w.append(LogId(20), Bytes::from_static(b"first"), 1).await }
    });
    at.reached().await;
    let mut written = s.wal.written.subscribe();
    // A later object completes while the first is still being written. (Whether its index
    // puts wait for the first object's is the writer's choice, not this rule's.)
    let later: Vec<_> = (0..3u64)
        .map(|i| {
            let w = w.clone();
            tokio::spawn(async move { w.append(LogId(21 + i), Bytes::from_static(b"later"), 1).await })
        })
        .collect();
    written.wait_for(|&n| n >= 1).await.unwrap(); // the later entries share one object
    at.open();
    first.await.unwrap().unwrap();
    for append in later {
        append.await.unwrap().unwrap();
    }
    let events = s.events.lock().unwrap().clone();
    let indexed: Vec<usize> = (0..events.len()).filter(|&i| events[i].starts_with("indexed ")).collect();
    assert_eq!(indexed.len(), 4, "{events:#?}");
    for i in indexed {
        let name = &events[i]["indexed ".len()..];
        let written = events.iter().position(|e| e == &format!("written {name}"));
        assert!(written.is_some_and(|w| w < i), "{name} indexed before it was written: {events:#?}");
    }
    w.close().await;
}

// spec-rule: c1370562c3 [Writer, Compactor] An implementation MUST hold a write lease on L while it publis…
// spec-rule: 2c1ecab615 [Writer, Compactor] An implementation MUST NOT delete a lease record before every…
#[tokio::test(start_paused = true)]
async fn soft_trim_holds_the_write_lease_for_its_whole_duration() {
    // [Writer, Compactor] An implementation MUST hold a write lease on L while it writes the
    // trim marker of L. The idle releaser (here called with no idle time at all) must find
    // the lease in use while a trim runs, and only release it after.
    let s = Stack::new();
    let w = s.writer(1);
    let log = LogId(3);
    for payload in [b"a", b"b", b"c"] {
        append_now(&w, log, payload).await;
    }
    let (paused, at) = gate();
    pause_next_marker_read(&s.meta, paused);
    let trim = tokio::spawn({
        let w = w.clone();
        async move { w.soft_trim(log, 0).await }
    });
    at.reached().await; // the trim holds its lease and reads the marker
    assert_eq!(w.release_idle_leases(Duration::ZERO).await, 0, "the trim's lease is in use");
    assert_eq!(lease::list_leases(s.meta.as_ref(), log).await.unwrap().len(), 1);
    assert_eq!(w.leased_logs().await, vec![log]);
    at.open();
    let outcome = trim.await.unwrap().unwrap();
    assert_eq!((outcome.marker, outcome.advanced), (1, true));
    // Once the trim is over the lease is idle and goes.
    assert_eq!(w.release_idle_leases(Duration::ZERO).await, 1);
    assert!(lease::list_leases(s.meta.as_ref(), log).await.unwrap().is_empty());
    w.close().await;
}

#[tokio::test(start_paused = true)]
async fn soft_trim_writes_no_trim_marker_after_its_lease_session_has_ended() {
    // [Writer] A writer SHOULD stop … as soon as it learns that the session that created its
    // lease record on L has ended; the marker is one of the changes the lease covers.
    let s = Stack::new();
    let w = s.writer(2);
    let log = LogId(4);
    for payload in [b"a", b"b", b"c"] {
        append_now(&w, log, payload).await;
    }
    let session = w.session_id().await.unwrap();
    let (paused, at) = gate();
    pause_next_marker_read(&s.meta, paused);
    let trim = tokio::spawn({
        let w = w.clone();
        async move { w.soft_trim(log, 0).await }
    });
    at.reached().await;
    assert!(s.mem.expire_session(&session));
    at.open();
    let err = trim.await.unwrap().unwrap_err();
    assert_eq!(err, TrimError::LeaseLost { log_id: log });
    assert_eq!(err.class(), ErrorClass::Retryable);
    let marker = s.meta.get(&keys::partition(log), &keys::trim_marker_key(log)).await.unwrap();
    assert!(marker.is_none(), "no marker may be written after the session ended: {marker:?}");
    // A retry takes a new lease in a new session and trims.
    let outcome = w.soft_trim(log, 0).await.unwrap();
    assert_eq!((outcome.marker, outcome.advanced), (1, true));
    assert_ne!(w.session_id().await.unwrap(), session);
    w.close().await;
}

/// Appends `entries`, which share one upload, and ends the writer's session while that upload
/// is in flight. Answers each entry's result.
async fn queue_then_lose_session(
    s: &Stack,
    w: &Writer,
    entries: &[LogId],
) -> Vec<Result<lakestream_writer::AppendAck, AppendError>> {
    let session = w.session_id().await.unwrap();
    let objects_before = s.wal.inner.len();
    let (paused, at) = gate();
    *s.wal.put_gate.lock().unwrap() = Some(paused);
    let appends: Vec<_> = entries
        .iter()
        .map(|&log| {
            let w = w.clone();
            tokio::spawn(async move { w.append(log, Bytes::from_static(b"0123456789"), 1).await })
        })
        .collect();
    at.reached().await; // every spawned append is queued in the upload
    assert!(s.mem.expire_session(&session));
    at.open();
    let mut results = Vec::new();
    for a in appends {
        results.push(a.await.unwrap());
    }
    assert_eq!(s.wal.inner.len(), objects_before + 1, "the entries shared one WAL object");
    results
}

// spec-rule: ae30e1a21f [Writer] A writer MUST NOT report an entry as appended before the index record of…
// spec-rule: 37ebae7c1f [Writer] A writer SHOULD stop publishing index records for L as soon as it learns…
#[tokio::test(start_paused = true)]
async fn a_writer_stops_publishing_once_its_lease_session_has_ended() {
    // [Writer] A writer SHOULD stop publishing index records for L as soon as it learns that
    // the session that created its lease record on L has ended.
    let s = Stack::new();
    let (a, b) = (LogId(5), LogId(6));
    let w = s.writer(3);
    append_now(&w, a, b"x").await;
    append_now(&w, b, b"y").await;
    let published = s.meta.calls(Op::SequencedPut);
    assert_eq!(published, 2);
    let results = queue_then_lose_session(&s, &w, &[a, a, b]).await;
    for (result, log) in results.iter().zip([a, a, b]) {
        assert_eq!(result, &Err(AppendError::LeaseLost { log_id: log }));
    }
    assert_eq!(s.meta.calls(Op::SequencedPut), published, "no index put was issued");
    assert_eq!(s.index_records(a).await.len(), 1);
    assert_eq!(s.index_records(b).await.len(), 1);
    w.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_lost_session_fails_appends_clearly_and_a_new_lease_is_taken() {
    let s = Stack::new();
    let log = LogId(7);
    let w = s.writer(4);
    append_now(&w, log, b"a").await;
    let old_session = w.session_id().await.unwrap();
    let old_leases = lease::list_leases(s.meta.as_ref(), log).await.unwrap();
    let results = queue_then_lose_session(&s, &w, &[log]).await;
    // Clearly: the error names the log and the cause, says the entry was not appended, and
    // is retryable.
    let err = results[0].clone().unwrap_err();
    assert_eq!(err, AppendError::LeaseLost { log_id: log });
    assert_eq!(err.class(), ErrorClass::Retryable);
    let message = err.to_string();
    for part in ["log 7", "session ended", "not appended"] {
        assert!(message.contains(part), "{message:?} lacks {part:?}");
    }
    assert_eq!(s.index_records(log).await.len(), 1, "the lost entry was not published");
    // The next append opens a new session, takes a new lease and continues the log.
    let ack = append_now(&w, log, b"b").await;
    assert_eq!(ack.offset, 1);
    assert_ne!(w.session_id().await.unwrap(), old_session);
    let new_leases = lease::list_leases(s.meta.as_ref(), log).await.unwrap();
    assert_eq!(new_leases.len(), 1);
    assert_ne!(new_leases, old_leases);
    w.close().await;
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    // spec-rule: 2014df76d7 [Writer] A writer MUST give every WAL object a name that no other object in th…
    // spec-rule: e69c3621f2 [Writer] A writer MUST NOT change or overwrite a WAL object after writing it.
    /// [Writer] A writer MUST give every WAL object a name that no other object in the WAL
    /// root has had, and MUST NOT reuse a name, even after its object has been deleted. Many
    /// writers share one root and one clock that stands still, repeats and goes back (a name's
    /// time part is no help); every object is deleted halfway through. Each writer has its own
    /// token seed, as each service has its own random UUIDs.
    #[test]
    fn wal_object_names_never_collide(
        seeds in proptest::collection::hash_set(proptest::prelude::any::<u64>(), 2..6),
        steps in proptest::collection::vec(
            (0usize..6, proptest::prop_oneof![
                proptest::strategy::Just(0i64), proptest::strategy::Just(0), proptest::strategy::Just(999),
                proptest::strategy::Just(-1_000), proptest::strategy::Just(86_400_000)
            ]),
            2..40,
        ),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        let names = runtime.block_on(async {
            let s = Stack::new();
            let start = s.clock.now_ms();
            let writers: Vec<Writer> = seeds.iter().map(|&seed| s.writer(seed)).collect();
            for (i, (writer, clock_offset)) in steps.iter().enumerate() {
                s.clock.set_ms(start + clock_offset);
                let w = &writers[writer % writers.len()];
                // Two logs per append: the object is shared, and named once.
                let (x, y) = futures::join!(
                    w.append(LogId(1), Bytes::from_static(b"x"), 1),
                    w.append(LogId(2), Bytes::from_static(b"y"), 1)
                );
                x.unwrap();
                y.unwrap();
                if i == steps.len() / 2 {
                    let all: Vec<ObjectPath> = s.wal.names.lock().unwrap().iter().map(|n| ObjectPath::new(n.clone()).unwrap()).collect();
                    s.wal.delete_many(&all).await.unwrap();
                }
            }
            for w in &writers {
                w.close().await;
            }
            s.wal.names.lock().unwrap().clone()
        });
        let unique: std::collections::HashSet<&String> = names.iter().collect();
        proptest::prop_assert!(names.len() >= steps.len());
        proptest::prop_assert_eq!(unique.len(), names.len(), "a WAL object name was used twice: {:?}", names);
    }
}

/// A1 without a global lock across a round trip: while one log's lease acquisition waits on
/// the metadata store, appends to another log go through (only appends to the same log wait).
#[tokio::test]
async fn a_slow_lease_acquisition_holds_back_only_its_own_log() {
    let s = Stack::new();
    let w = s.writer(21);
    append_now(&w, LogId(2), b"opens the session").await;
    let (gate, handle) = gate();
    s.meta.on(Op::Get).key(keys::fence_key(LogId(1))).once().pause(gate);
    let slow = tokio::spawn({
        let w = w.clone();
        async move { w.append(LogId(1), Bytes::from_static(b"slow"), 1).await }
    });
    handle.reached().await; // the acquisition reached the fence read
    let other =
        tokio::time::timeout(Duration::from_secs(10), w.append(LogId(3), Bytes::from_static(b"b"), 1)).await;
    assert_eq!(other.expect("log 3 waited for log 1's lease").unwrap().offset, 0);
    assert!(!slow.is_finished());
    handle.open();
    assert_eq!(slow.await.unwrap().unwrap().offset, 0);
    w.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_sparse_log_keeps_its_lease_instead_of_churning_and_an_idle_one_still_lets_go() {
    // Issue #18: a log appended to every 6 s with a 5 s idle release would take and release a
    // lease per append (three metadata operations each). Once its lease comes back soon after
    // an idle release, the log keeps the next one longer; a log that stops is still released
    // (within 4 × lease_idle_release), so deleting it does not wait for the writer to close.
    let s = Stack::new();
    let deps = WriterDeps {
        meta: s.meta.clone(),
        objects: s.wal.clone(),
        clock: Arc::new(s.clock.clone()),
        tokens: Arc::new(SeededTokens::new(18)),
    };
    let config = WriterConfig {
        flush_window: Duration::from_millis(1),
        lease_idle_release: Duration::from_secs(5),
        ..WriterConfig::default()
    };
    let w = Writer::start(config, deps).unwrap();
    let log = LogId(1806);
    for _ in 0..10 {
        append_now(&w, log, b"sparse").await;
        tokio::time::sleep(Duration::from_secs(6)).await;
    }
    assert_eq!(w.lease_acquisitions(), 2, "one lease, then one more after the first idle release");
    assert_eq!(w.leased_logs().await, vec![log]);
    tokio::time::sleep(Duration::from_secs(25)).await;
    assert!(w.leased_logs().await.is_empty(), "a log that stopped is released");
    assert!(lease::list_leases(&s.mem, log).await.unwrap().is_empty());
    w.close().await;
}
