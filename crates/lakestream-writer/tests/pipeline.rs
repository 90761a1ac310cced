//! The append pipeline's shape: WAL objects that fill up with many logs, each log's payloads
//! grouped, and logs that do not wait for each other's uploads.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use lakestream_format::wal::WalIndex;
use lakestream_format::{LogId, SystemClock};
use lakestream_meta::InMemoryStore;
use lakestream_meta::lease::SeededTokens;
use lakestream_objstore::{
    ByteRange, InMemoryStore as MemObjects, ObjectMeta, ObjectPath, ObjectPrefix, ObjectResult, ObjectStore,
    WriteOnce,
};
use lakestream_writer::{Writer, WriterConfig, WriterDeps};
use tokio::sync::watch;

fn writer(objects: Arc<dyn ObjectStore>, config: WriterConfig) -> Writer {
    let deps = WriterDeps {
        meta: Arc::new(InMemoryStore::new()),
        objects,
        clock: Arc::new(SystemClock),
        tokens: Arc::new(SeededTokens::new(1)),
    };
    Writer::start(config, deps).unwrap()
}

async fn objects(store: &Arc<dyn ObjectStore>) -> Vec<Bytes> {
    let listed: Vec<_> = store.list(&ObjectPrefix::all(), None).collect().await;
    let mut all = Vec::new();
    for meta in listed {
        all.push(store.get(&meta.unwrap().path).await.unwrap());
    }
    all
}

/// A WAL object closes on its size or its window, not after a few logs: 300 logs appended
/// together land in one object, and each log's payloads lie together in it, so that a reader
/// reads one log's bytes with one range. (The window alone: group commit is off.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_fill_up_with_hundreds_of_logs_and_group_each_logs_payloads() {
    const LOGS: u64 = 300;
    let store: Arc<dyn ObjectStore> = Arc::new(MemObjects::new(Arc::new(SystemClock)));
    let w = writer(
        store.clone(),
        WriterConfig {
            flush_window: Duration::from_millis(500),
            flush_when_idle: false,
            ..WriterConfig::default()
        },
    );
    // Two entries per log, interleaved across logs, all in one window.
    let appends = (0..2u64).flat_map(|round| (0..LOGS).map(move |log| (round, log))).map(|(round, log)| {
        let w = w.clone();
        async move { w.append(LogId(log), Bytes::from(format!("log {log} entry {round}")), 1).await }
    });
    for ack in futures::future::join_all(appends).await {
        ack.unwrap();
    }
    let all = objects(&store).await;
    assert!(all.len() <= 2, "{} objects for one window of 600 small entries", all.len());
    let mut sections = 0;
    for object in &all {
        let index = WalIndex::parse(object).unwrap();
        for section in index.sections() {
            sections += 1;
            let span = section.payload_span();
            assert_eq!(
                span.end - span.start,
                section.payload_bytes(),
                "log {}'s payloads lie together",
                section.log_id
            );
        }
    }
    assert_eq!(sections, LOGS as usize + all.len() - 1, "every log in a section (a log split at most once)");
    w.close().await;
}

/// An object store whose first PUT waits until released.
#[derive(Debug)]
struct GatedStore {
    inner: Arc<dyn ObjectStore>,
    puts: AtomicUsize,
    release: watch::Receiver<bool>,
}

#[async_trait]
impl ObjectStore for GatedStore {
    async fn put(&self, path: &ObjectPath, bytes: Bytes) -> ObjectResult<()> {
        if self.puts.fetch_add(1, Ordering::SeqCst) == 0 {
            let mut release = self.release.clone();
            let _ = release.wait_for(|r| *r).await;
        }
        self.inner.put(path, bytes).await
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

/// Index puts are ordered per log, not across logs: while the object holding log A's entry
/// is still uploading, a later object holding only log B is published and acknowledged; A's
/// entry is acknowledged once its upload completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_upload_holds_back_only_the_logs_it_holds() {
    let (release, gate) = watch::channel(false);
    let gated = Arc::new(GatedStore {
        inner: Arc::new(MemObjects::new(Arc::new(SystemClock))),
        puts: AtomicUsize::new(0),
        release: gate,
    });
    let w = writer(
        gated.clone(),
        WriterConfig { flush_window: Duration::from_millis(1), ..WriterConfig::default() },
    );
    let a = tokio::spawn({
        let w = w.clone();
        async move { w.append(LogId(1), Bytes::from_static(b"a"), 1).await }
    });
    while gated.puts.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let b =
        tokio::time::timeout(Duration::from_secs(10), w.append(LogId(2), Bytes::from_static(b"b"), 1)).await;
    assert_eq!(b.expect("log B was not held back by log A's upload").unwrap().offset, 0);
    assert!(!a.is_finished(), "log A's entry waits for its own upload");
    release.send_replace(true);
    assert_eq!(a.await.unwrap().unwrap().offset, 0);
    w.close().await;
}

/// An object store on which every PUT finds its name taken (so every upload fails).
#[derive(Debug)]
struct TakenNames(MemObjects);

#[async_trait]
impl ObjectStore for TakenNames {
    async fn put(&self, path: &ObjectPath, bytes: Bytes) -> ObjectResult<()> {
        self.0.put(path, Bytes::from_static(b"squatter")).await?;
        self.0.put(path, bytes).await
    }
    async fn get(&self, path: &ObjectPath) -> ObjectResult<Bytes> {
        self.0.get(path).await
    }
    async fn get_range(&self, path: &ObjectPath, range: ByteRange) -> ObjectResult<Bytes> {
        self.0.get_range(path, range).await
    }
    async fn head(&self, path: &ObjectPath) -> ObjectResult<ObjectMeta> {
        self.0.head(path).await
    }
    async fn delete(&self, path: &ObjectPath) -> ObjectResult<()> {
        self.0.delete(path).await
    }
    async fn delete_many(&self, paths: &[ObjectPath]) -> ObjectResult<()> {
        self.0.delete_many(paths).await
    }
    fn list(
        &self,
        prefix: &ObjectPrefix,
        start_after: Option<&ObjectPath>,
    ) -> BoxStream<'static, ObjectResult<ObjectMeta>> {
        self.0.list(prefix, start_after)
    }
    fn write_once(&self) -> WriteOnce {
        self.0.write_once()
    }
}

/// `Writer::stats` counts what was written: objects, their sizes and logs, and one committed
/// index put per log section; a failed upload counts as a failure and writes no index put.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_count_objects_their_bytes_and_logs_and_index_puts() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemObjects::new(Arc::new(SystemClock)));
    // Objects close only on `flush()`: group commit off, a window that does not pass.
    let w = writer(
        store.clone(),
        WriterConfig {
            flush_window: Duration::from_secs(60),
            flush_when_idle: false,
            ..WriterConfig::default()
        },
    );
    assert_eq!((w.stats().objects_written, w.stats().index_puts), (0, 0));
    // Object 1: three logs; object 2: one log.
    let first = (0..3u64).map(|log| {
        let w = w.clone();
        async move { w.append(LogId(log), Bytes::from_static(b"payload"), 1).await }
    });
    let first = tokio::spawn(futures::future::join_all(first));
    tokio::time::sleep(Duration::from_millis(100)).await;
    w.flush().await;
    for ack in first.await.unwrap() {
        ack.unwrap();
    }
    let second = {
        let w = w.clone();
        tokio::spawn(async move { w.append(LogId(9), Bytes::from_static(b"x"), 1).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    w.flush().await;
    second.await.unwrap().unwrap();

    let written = objects(&store).await;
    assert_eq!(written.len(), 2);
    let stats = w.stats();
    assert_eq!(stats.objects_written, 2);
    assert_eq!(stats.object_write_failures, 0);
    assert_eq!(stats.object_bytes.count, 2);
    assert_eq!(stats.object_bytes.sum, written.iter().map(|o| o.len() as u64).sum::<u64>());
    assert_eq!(stats.logs_per_object.count, 2);
    assert_eq!(stats.logs_per_object.sum, 4);
    // Bounds 1, 2, 4, …: the one-log object in the first bucket, the three-log one by 4.
    assert_eq!(&stats.logs_per_object.cumulative[..3], &[1, 1, 2]);
    assert_eq!((stats.index_puts, stats.index_put_failures, stats.index_put_unknown), (4, 0, 0));
    w.close().await;

    let failing =
        writer(Arc::new(TakenNames(MemObjects::new(Arc::new(SystemClock)))), WriterConfig::default());
    failing.append(LogId(1), Bytes::from_static(b"lost"), 1).await.unwrap_err();
    let stats = failing.stats();
    assert_eq!((stats.objects_written, stats.object_write_failures), (0, 1));
    assert_eq!((stats.object_bytes.count, stats.index_puts), (0, 0));
    failing.close().await;
}

/// Group commit (`flush_when_idle`, the default): an append to a writer with nothing uploading
/// is written at once, not after its window; with it off, the same append waits the window.
/// Paused time: the runtime's clock moves only when every task waits for a timer, so the
/// elapsed time is exactly what the writer waited for.
#[tokio::test(start_paused = true)]
async fn an_append_to_an_idle_writer_is_written_at_once_not_after_its_window() {
    const WINDOW: Duration = Duration::from_secs(60);
    for flush_when_idle in [true, false] {
        let store: Arc<dyn ObjectStore> = Arc::new(MemObjects::new(Arc::new(SystemClock)));
        let w =
            writer(store, WriterConfig { flush_window: WINDOW, flush_when_idle, ..WriterConfig::default() });
        let started = tokio::time::Instant::now();
        w.append(LogId(1), Bytes::from_static(b"alone"), 1).await.unwrap();
        let waited = started.elapsed();
        if flush_when_idle {
            assert!(waited < WINDOW, "waited {waited:?} for the window with nothing uploading");
        } else {
            assert!(waited >= WINDOW, "written after {waited:?}, before its window, with group commit off");
        }
        w.close().await;
    }
}

/// Group commit: entries that arrive while an object uploads gather in the next object, which
/// closes as soon as that upload ends (not on its window): two objects for four appends.
#[tokio::test(start_paused = true)]
async fn entries_arriving_during_an_upload_close_together_when_it_ends() {
    const WINDOW: Duration = Duration::from_secs(60);
    let (release, gate) = watch::channel(false);
    let gated = Arc::new(GatedStore {
        inner: Arc::new(MemObjects::new(Arc::new(SystemClock))),
        puts: AtomicUsize::new(0),
        release: gate,
    });
    let w = writer(gated.clone(), WriterConfig { flush_window: WINDOW, ..WriterConfig::default() });
    let started = tokio::time::Instant::now();
    let first = tokio::spawn({
        let w = w.clone();
        async move { w.append(LogId(1), Bytes::from_static(b"first"), 1).await }
    });
    while gated.puts.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(started.elapsed() < WINDOW, "the first entry waited {:?} for its upload", started.elapsed());
    let later: Vec<_> = (2..5u64)
        .map(|log| {
            let w = w.clone();
            tokio::spawn(async move { w.append(LogId(log), Bytes::from_static(b"later"), 1).await })
        })
        .collect();
    // Every task runs until it waits (the first upload, the open batch): the clock moves 1 ms.
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(gated.puts.load(Ordering::SeqCst), 1, "the later entries wait for the upload under way");
    release.send_replace(true);
    first.await.unwrap().unwrap();
    for ack in later {
        ack.await.unwrap().unwrap();
    }
    assert!(started.elapsed() < WINDOW, "the gathered object waited {:?}", started.elapsed());
    assert_eq!(
        gated.puts.load(Ordering::SeqCst),
        2,
        "one object for the first entry, one for the three later"
    );
    let written = objects(&(gated.clone() as Arc<dyn ObjectStore>)).await;
    let sections: Vec<usize> = written.iter().map(|o| WalIndex::parse(o).unwrap().sections().len()).collect();
    let mut sorted = sections.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, vec![1, 3], "objects' sections: {sections:?}");
    w.close().await;
}
