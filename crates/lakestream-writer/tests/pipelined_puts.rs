//! Index puts pipelined per log (issue #18): up to `max_index_puts_in_flight_per_log` of one
//! log's sequenced puts in flight, issued in the log's flush order on a store that commits
//! them in that order, answered in that order; a failed or unknown put fails its own entries,
//! and the puts issued behind it are never acknowledged. The store is the in-memory one
//! (which applies a sequenced put at the call), wrapped so that a test can hold a put's
//! answer or make it fail; one object per append (`flush()` between appends).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;
use lakestream_format::{Clock, LogId, ManualClock, keys};
use lakestream_meta::lease::SeededTokens;
use lakestream_meta::{
    Comparison, InMemoryStore, MetaError, MetaResult, MetaStore, PutCondition, Record, Session, WriteResult,
};
use lakestream_objstore::InMemoryStore as MemObjects;
use lakestream_writer::{AppendAck, AppendError, Writer, WriterConfig, WriterDeps};
use tokio::sync::{oneshot, watch};

/// What happens to the n-th sequenced put (counted from 1).
enum Plan {
    /// Applied at the call; its answer waits until the sender fires (or is dropped).
    Hold(oneshot::Receiver<()>),
    /// Not applied; answered, when the sender fires, with an error that says it did not
    /// take effect.
    FailAfter(oneshot::Receiver<()>),
}

/// The in-memory store, with a plan per sequenced put and a count of puts in flight.
#[derive(Debug)]
struct Planned {
    inner: Arc<InMemoryStore>,
    ordered: bool,
    plans: Mutex<HashMap<usize, Plan>>,
    calls: AtomicUsize,
    /// Sequenced puts issued (watchable) and the most in flight at once.
    issued: watch::Sender<usize>,
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Plan")
    }
}

impl Planned {
    fn new(ordered: bool, clock: Arc<dyn Clock>) -> Arc<Planned> {
        Arc::new(Planned {
            inner: Arc::new(InMemoryStore::with_config(1, clock).unwrap()),
            ordered,
            plans: Mutex::new(HashMap::new()),
            calls: AtomicUsize::new(0),
            issued: watch::channel(0).0,
            in_flight: Arc::new(AtomicUsize::new(0)),
            max_in_flight: Arc::new(AtomicUsize::new(0)),
        })
    }

    fn plan(&self, n: usize, plan: Plan) {
        self.plans.lock().unwrap().insert(n, plan);
    }

    async fn wait_issued(&self, n: usize) {
        self.issued.subscribe().wait_for(|i| *i >= n).await.unwrap();
    }

    async fn index_records(&self, log: LogId) -> Vec<Record> {
        let p = keys::partition(log);
        self.inner.scan(&p, &keys::first_key(log), &keys::last_key(log), None).await.unwrap()
    }
}

#[async_trait]
impl MetaStore for Planned {
    async fn get_cmp(&self, p: &str, k: &str, c: Comparison) -> MetaResult<Option<Record>> {
        self.inner.get_cmp(p, k, c).await
    }
    async fn put(&self, p: &str, k: &str, v: Bytes, c: PutCondition) -> MetaResult<WriteResult> {
        self.inner.put(p, k, v, c).await
    }
    async fn delete(&self, p: &str, k: &str) -> MetaResult<bool> {
        self.inner.delete(p, k).await
    }
    async fn delete_if_version(&self, p: &str, k: &str, version: lakestream_meta::Version) -> MetaResult<()> {
        self.inner.delete_if_version(p, k, version).await
    }
    async fn delete_range(&self, p: &str, a: &str, b: &str) -> MetaResult<()> {
        self.inner.delete_range(p, a, b).await
    }
    async fn sequenced_put(&self, p: &str, prefix: &str, d: &[u64], v: Bytes) -> MetaResult<WriteResult> {
        self.inner.sequenced_put(p, prefix, d, v).await
    }
    fn sequenced_puts_commit_in_call_order(&self) -> bool {
        self.ordered
    }
    fn sequenced_put_owned(
        self: Arc<Self>,
        partition: String,
        prefix: String,
        deltas: Vec<u64>,
        value: Bytes,
    ) -> BoxFuture<'static, MetaResult<WriteResult>> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let plan = self.plans.lock().unwrap().remove(&n);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        self.issued.send_modify(|i| *i += 1);
        // Applied (or not) here, at the call, as a store that commits in call order does.
        let (wait, applied) = match plan {
            Some(Plan::FailAfter(go)) => (Some(go), None),
            Some(Plan::Hold(go)) => {
                (Some(go), Some(self.inner.clone().sequenced_put_owned(partition, prefix, deltas, value)))
            }
            None => (None, Some(self.inner.clone().sequenced_put_owned(partition, prefix, deltas, value))),
        };
        let in_flight = self.in_flight.clone();
        Box::pin(async move {
            if let Some(go) = wait {
                let _ = go.await;
            }
            let result = match applied {
                Some(applied) => applied.await,
                None => Err(MetaError::Unavailable(format!("sequenced put {n} refused by the test"))),
            };
            in_flight.fetch_sub(1, Ordering::SeqCst);
            result
        })
    }
    async fn list(&self, p: &str, a: &str, b: &str) -> MetaResult<Vec<String>> {
        self.inner.list(p, a, b).await
    }
    async fn scan(&self, p: &str, a: &str, b: &str, limit: Option<usize>) -> MetaResult<Vec<Record>> {
        self.inner.scan(p, a, b, limit).await
    }
    async fn open_session(&self, timeout: Duration) -> MetaResult<Arc<dyn Session>> {
        self.inner.open_session(timeout).await
    }
}

fn writer(meta: Arc<Planned>, clock: Arc<dyn Clock>, puts_per_log: usize) -> Writer {
    let deps = WriterDeps {
        meta,
        objects: Arc::new(MemObjects::new(clock.clone())),
        clock,
        tokens: Arc::new(SeededTokens::new(18)),
    };
    // A long window: objects close only at flush(), one per append.
    let config = WriterConfig {
        flush_window: Duration::from_secs(3600),
        flush_when_idle: false,
        max_index_puts_in_flight_per_log: puts_per_log,
        ..WriterConfig::default()
    };
    Writer::start(config, deps).unwrap()
}

fn clock() -> Arc<dyn Clock> {
    Arc::new(ManualClock::new(1_796_000_000_000))
}

/// Appends `n` one-record entries to `log`, each in an object of its own, and waits until
/// `wait_for` index puts in all have been issued; answers the appends' handles.
async fn append_each_in_its_object(
    w: &Writer,
    meta: &Planned,
    log: LogId,
    n: usize,
    wait_for: usize,
) -> Vec<tokio::task::JoinHandle<Result<AppendAck, AppendError>>> {
    let mut handles = Vec::new();
    let before = w.stats().objects_written;
    for i in 0..n {
        let w2 = w.clone();
        handles.push(tokio::spawn(async move { w2.append(log, Bytes::from(vec![i as u8; 8]), 1).await }));
        // Let the append reach the batcher, then close its object.
        tokio::task::yield_now().await;
        while w.stats().objects_written < before + handles.len() as u64 {
            w.flush().await;
            tokio::task::yield_now().await;
        }
    }
    meta.wait_issued(wait_for).await;
    handles
}

#[tokio::test]
async fn a_logs_index_puts_are_pipelined_up_to_the_limit_and_answered_in_issue_order() {
    // Up to K puts of one log in flight at once, not more; the first held back, the later
    // ones complete first, yet every entry is answered only after the earlier ones, at
    // offsets in append order.
    let clock = clock();
    let meta = Planned::new(true, clock.clone());
    let w = writer(meta.clone(), clock, 4);
    let log = LogId(1801);
    let (release, held) = oneshot::channel();
    meta.plan(1, Plan::Hold(held));
    let handles = append_each_in_its_object(&w, &meta, log, 6, 4).await;
    // Four puts issued (the first held); the fifth waits for a free place.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(*meta.issued.borrow(), 4, "puts issued with the first one held");
    assert!(handles.iter().all(|h| !h.is_finished()), "no entry answered before the first put's");
    release.send(()).unwrap();
    let mut offsets = Vec::new();
    for h in handles {
        offsets.push(h.await.unwrap().unwrap().offset);
    }
    assert_eq!(offsets, (0..6).collect::<Vec<u64>>(), "offsets follow the append order");
    assert_eq!(*meta.issued.borrow(), 6);
    assert_eq!(meta.index_records(log).await.len(), 6);
    w.close().await;
}

#[tokio::test]
async fn a_store_that_does_not_commit_in_call_order_gets_one_index_put_per_log_at_a_time() {
    let clock = clock();
    let meta = Planned::new(false, clock.clone());
    let w = writer(meta.clone(), clock, 4);
    let log = LogId(1802);
    let handles = append_each_in_its_object(&w, &meta, log, 5, 5).await;
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.await.unwrap().unwrap().offset, i as u64);
    }
    assert_eq!(meta.max_in_flight.load(Ordering::SeqCst), 1);
    w.close().await;
}

#[tokio::test]
async fn a_failed_index_put_fails_its_entries_and_the_puts_issued_behind_it_are_not_acknowledged() {
    // Put 1 fails without taking effect, after puts 2 and 3 (issued behind it) committed:
    // entry 1 is reported not appended; entries 2 and 3 are not acknowledged (outcome
    // unknown: they are in the log, but a caller retrying entry 1 must not be told that later
    // entries were appended before it). Appends after the failure are acknowledged again.
    let clock = clock();
    let meta = Planned::new(true, clock.clone());
    let w = writer(meta.clone(), clock, 4);
    let log = LogId(1803);
    let (fail, failing) = oneshot::channel();
    meta.plan(1, Plan::FailAfter(failing));
    let handles = append_each_in_its_object(&w, &meta, log, 3, 3).await;
    // Puts 2 and 3 have committed; their entries wait for put 1's answer.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(meta.index_records(log).await.len(), 2);
    assert!(handles.iter().all(|h| !h.is_finished()));
    fail.send(()).unwrap();
    let mut results = Vec::new();
    for h in handles {
        results.push(h.await.unwrap());
    }
    assert!(
        matches!(&results[0], Err(AppendError::IndexPutFailed { log_id, .. }) if *log_id == log),
        "{:?}",
        results[0]
    );
    for r in &results[1..] {
        assert!(
            matches!(r, Err(AppendError::OutcomeUnknown { reason, .. }) if reason.contains("earlier index put")),
            "{r:?}"
        );
    }
    // The log goes on: the next entry takes the offsets after the committed puts.
    let next = append_each_in_its_object(&w, &meta, log, 1, 4).await.pop().unwrap();
    assert_eq!(next.await.unwrap().unwrap().offset, 2);
    w.close().await;
}

#[tokio::test]
async fn one_logs_held_index_put_does_not_hold_back_another_log() {
    // Logs are independent: log A's first put is held, log B's entries are acknowledged.
    let clock = clock();
    let meta = Planned::new(true, clock.clone());
    let w = writer(meta.clone(), clock, 4);
    let (release, held) = oneshot::channel();
    meta.plan(1, Plan::Hold(held));
    let a = append_each_in_its_object(&w, &meta, LogId(1804), 1, 1).await;
    let b = append_each_in_its_object(&w, &meta, LogId(1805), 3, 4).await;
    for (i, h) in b.into_iter().enumerate() {
        assert_eq!(h.await.unwrap().unwrap().offset, i as u64);
    }
    assert!(!a[0].is_finished());
    release.send(()).unwrap();
    for h in a {
        assert_eq!(h.await.unwrap().unwrap().offset, 0);
    }
    w.close().await;
}
