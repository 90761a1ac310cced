//! Two soft trims of one log racing through two writers: [All] An implementation MUST NOT
//! decrease B, and [Writer] a soft trim MUST write B′ with CreateIfAbsent when no marker
//! exists, or otherwise with CompareAndSet on the version it read. The lower trim reads the
//! marker, pauses while the higher one writes, then writes: an unconditional put would lower
//! B; the conditional one fails, the trim reads again and leaves B where it is.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use lakestream_format::{Clock, LogId, ManualClock, keys};
use lakestream_meta::lease::SeededTokens;
use lakestream_meta::{
    Comparison, InMemoryStore, MetaResult, MetaStore, PutCondition, Record, Session, WriteResult,
};
use lakestream_objstore::InMemoryStore as MemObjects;
use lakestream_writer::{Writer, WriterConfig, WriterDeps};
use tokio::sync::oneshot;

/// A pause after a read: the store tells the test the read is done, then waits for it.
struct Pause {
    read_done: oneshot::Sender<()>,
    resume: oneshot::Receiver<()>,
}

/// The in-memory store; the next read of the trim marker pauses *after* reading, and every
/// write of the marker is recorded with its condition.
#[derive(Default)]
struct Meta {
    inner: InMemoryStore,
    pause: Mutex<Option<Pause>>,
    marker_writes: Mutex<Vec<(String, PutCondition)>>,
}

impl std::fmt::Debug for Meta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meta").finish_non_exhaustive()
    }
}

#[async_trait]
impl MetaStore for Meta {
    async fn get_cmp(&self, p: &str, k: &str, c: Comparison) -> MetaResult<Option<Record>> {
        let read = self.inner.get_cmp(p, k, c).await;
        let pause =
            if k.starts_with("/mark-deleted-offsets/") { self.pause.lock().unwrap().take() } else { None };
        if let Some(pause) = pause {
            let _ = pause.read_done.send(());
            let _ = pause.resume.await;
        }
        read
    }
    async fn put(&self, p: &str, k: &str, v: Bytes, c: PutCondition) -> MetaResult<WriteResult> {
        if k.starts_with("/mark-deleted-offsets/") {
            self.marker_writes.lock().unwrap().push((String::from_utf8_lossy(&v).into_owned(), c));
        }
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

fn writer(meta: &Arc<Meta>, objects: &Arc<MemObjects>, clock: &ManualClock, seed: u64) -> Writer {
    let deps = WriterDeps {
        meta: meta.clone(),
        objects: objects.clone(),
        clock: Arc::new(clock.clone()),
        tokens: Arc::new(SeededTokens::new(seed)),
    };
    Writer::start(WriterConfig { flush_window: Duration::from_millis(1), ..WriterConfig::default() }, deps)
        .unwrap()
}

/// Races a soft trim of `low` (paused after its marker read) against one of `high`; answers
/// the marker stored after both.
async fn race(meta: &Arc<Meta>, lower: &Writer, higher: &Writer, log: LogId, low: u64, high: u64) -> u64 {
    let (read_done, at_read) = oneshot::channel();
    let (resume, resumed) = oneshot::channel();
    *meta.pause.lock().unwrap() = Some(Pause { read_done, resume: resumed });
    let slow = tokio::spawn({
        let lower = lower.clone();
        async move { lower.soft_trim(log, low).await }
    });
    at_read.await.unwrap(); // the lower trim has read the marker and computed its write
    let fast = higher.soft_trim(log, high).await.unwrap();
    assert!(fast.advanced && fast.marker == high + 1, "{fast:?}");
    resume.send(()).unwrap();
    let slow = slow.await.unwrap().unwrap();
    assert_eq!((slow.marker, slow.advanced), (high + 1, false), "the lower trim saw the higher marker");
    let stored = meta.inner.get(&keys::partition(log), &keys::trim_marker_key(log)).await.unwrap().unwrap();
    keys::decode_trim_marker(&stored.value).unwrap()
}

// spec-rule: 402d4f8579 [All] An implementation MUST NOT decrease B.
// spec-rule: c7bc99327d [Writer] A soft trim through offset o, inclusive, MUST compute B′ as the smaller o…
#[tokio::test]
async fn racing_soft_trims_never_decrease_b() {
    let clock = ManualClock::new(1_796_000_000_000);
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let meta =
        Arc::new(Meta { inner: InMemoryStore::with_config(1, shared.clone()).unwrap(), ..Meta::default() });
    let objects = Arc::new(MemObjects::new(shared));
    let (a, b) = (writer(&meta, &objects, &clock, 580), writer(&meta, &objects, &clock, 581));
    let log = LogId(580);
    for i in 0..20u8 {
        a.append(log, Bytes::from(vec![i]), 1).await.unwrap();
    }

    // No marker yet: both trims would create it; the higher one does first.
    assert_eq!(race(&meta, &a, &b, log, 4, 8).await, 9);
    // A marker exists: both compare-and-set on the version they read.
    assert_eq!(race(&meta, &b, &a, log, 11, 15).await, 16);

    let writes = meta.marker_writes.lock().unwrap().clone();
    let expected_conditions: Vec<(&str, bool)> =
        writes.iter().map(|(v, c)| (v.as_str(), matches!(c, PutCondition::IfAbsent))).collect();
    // Each race: the higher trim's write lands, the lower trim's conditional write fails.
    assert_eq!(expected_conditions, [("9", true), ("5", true), ("16", false), ("12", false)]);
    assert!(writes.iter().all(|(_, c)| !matches!(c, PutCondition::None)), "no unconditional marker write");
    a.close().await;
    b.close().await;
}
