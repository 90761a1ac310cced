//! How much of a WAL object a read fetches: with many logs in one object (the writer's
//! default), a reader of one log fetches that log's share, not the whole object.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lakestream_format::{LogId, LogRef, SystemClock};
use lakestream_meta::InMemoryStore;
use lakestream_meta::lease::SeededTokens;
use lakestream_objstore::{CountingStore, InMemoryStore as MemObjects, ObjectStore};
use lakestream_reader::{Reader, ReaderConfig, ReaderDeps, WalReadMode};
use lakestream_writer::{Writer, WriterConfig, WriterDeps};

/// The default read mode fetches one log's span of an object that holds eight logs equally
/// (its eighth, plus the index); the whole-object mode fetches the object; a log that is most
/// of its object is read whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_of_one_log_fetches_its_share_of_a_many_log_object() {
    const ENTRY: usize = 10 << 10;
    let meta: Arc<InMemoryStore> = Arc::new(InMemoryStore::new());
    let wal: Arc<dyn ObjectStore> = Arc::new(MemObjects::new(Arc::new(SystemClock)));
    let deps = WriterDeps {
        meta: meta.clone(),
        objects: wal.clone(),
        clock: Arc::new(SystemClock),
        tokens: Arc::new(SeededTokens::new(3)),
    };
    let w = Writer::start(
        WriterConfig {
            flush_window: Duration::from_millis(200),
            flush_when_idle: false,
            ..WriterConfig::default()
        },
        deps,
    )
    .unwrap();
    let appends = (0..8u64).map(|log| {
        let w = w.clone();
        async move { w.append(LogId(log), Bytes::from(vec![log as u8; ENTRY]), 1).await.unwrap() }
    });
    futures::future::join_all(appends).await;
    // And a log alone in an object of its own.
    w.append(LogId(9), Bytes::from(vec![9u8; ENTRY]), 1).await.unwrap();
    w.close().await;

    let fetched_by = |mode: WalReadMode, log: u64| {
        let (meta, wal) = (meta.clone(), wal.clone());
        async move {
            let counted = Arc::new(CountingStore::new(wal));
            let deps = ReaderDeps {
                meta,
                wal: counted.clone(),
                compacted: Arc::new(MemObjects::new(Arc::new(SystemClock))),
            };
            let reader =
                Reader::new(ReaderConfig { wal_read: mode, ..ReaderConfig::default() }, deps).unwrap();
            let log_ref = LogRef { log_id: LogId(log), namespace: "ns".into(), stream: "s".into() };
            let batch = reader.read(&log_ref, 0, 1 << 20, Duration::ZERO).await.unwrap();
            assert_eq!(batch.entries.len(), 1);
            assert_eq!(batch.entries[0].payload, Bytes::from(vec![log as u8; ENTRY]));
            counted.counts().bytes_fetched as usize
        }
    };
    assert_eq!(ReaderConfig::default().wal_read, WalReadMode::Adaptive);
    let adaptive = fetched_by(WalReadMode::Adaptive, 3).await;
    let whole = fetched_by(WalReadMode::Whole, 3).await;
    assert!(whole >= 8 * ENTRY, "whole mode fetched {whole} bytes");
    assert!(adaptive < 2 * ENTRY, "adaptive mode fetched {adaptive} bytes for a {ENTRY}-byte entry");
    // A log that is its whole object: one GET of the object.
    let alone = fetched_by(WalReadMode::Adaptive, 9).await;
    assert!((ENTRY..2 * ENTRY).contains(&alone), "{alone}");

    // A section read with ranged GETs is cached: reading it again fetches nothing.
    let counted = Arc::new(CountingStore::new(wal.clone()));
    let deps = ReaderDeps {
        meta: meta.clone(),
        wal: counted.clone(),
        compacted: Arc::new(MemObjects::new(Arc::new(SystemClock))),
    };
    let reader = Reader::new(ReaderConfig::default(), deps).unwrap();
    let log = LogRef { log_id: LogId(3), namespace: "ns".into(), stream: "s".into() };
    let first = reader.read(&log, 0, 1 << 20, Duration::ZERO).await.unwrap();
    let after_first = counted.counts().bytes_fetched;
    let again = reader.read(&log, 0, 1 << 20, Duration::ZERO).await.unwrap();
    assert_eq!(first.entries, again.entries);
    assert_eq!(counted.counts().bytes_fetched, after_first, "the second read came from the cache");
}
