//! The reader's fetch path, on a real (local-filesystem) object store whose GETs are counted:
//! a cache miss is single-flight (concurrent reads of logs that share a WAL object fetch it
//! once), and reads fetch the next objects of a log ahead.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lakestream_format::{LogId, LogRef, SystemClock};
use lakestream_meta::InMemoryStore;
use lakestream_meta::lease::SeededTokens;
use lakestream_objstore::{
    CountingStore, FaultConfig, FaultyStore, LocalFsStore, ObjectPrefix, ObjectRoot, ObjectStore, Operation,
    OperationFaults,
};
use lakestream_reader::{Reader, ReaderConfig, ReaderDeps, WalReadMode};
use lakestream_writer::{Writer, WriterConfig, WriterDeps};

/// `wal` behind a counter of its GETs (whole and ranged), each slowed a little so that
/// concurrent reads overlap for certain (counted as made, before the delay).
fn counted_gets(wal: Arc<dyn ObjectStore>) -> Arc<CountingStore> {
    let slowed = OperationFaults { delay: Duration::from_millis(50), ..OperationFaults::default() };
    let config = FaultConfig::new(0).with(Operation::Get, slowed).with(Operation::GetRange, slowed);
    Arc::new(CountingStore::new(Arc::new(FaultyStore::new(wal, config))))
}

/// A writer to a fresh local-filesystem WAL root named `name`, with this flush window.
fn local_writer(name: &str, flush_window: Duration) -> (Writer, Arc<InMemoryStore>, Arc<dyn ObjectStore>) {
    let dir = std::env::temp_dir().join(format!("lakestream-fetch-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let wal: Arc<dyn ObjectStore> =
        Arc::new(LocalFsStore::new(&dir, ObjectRoot::parse("wal").unwrap()).expect("local store"));
    let meta = Arc::new(InMemoryStore::new());
    let deps = WriterDeps {
        meta: meta.clone(),
        objects: wal.clone(),
        clock: Arc::new(SystemClock),
        tokens: Arc::new(SeededTokens::new(7)),
    };
    // Objects close on the window (group commit off), so that entries share them.
    let w =
        Writer::start(WriterConfig { flush_window, flush_when_idle: false, ..WriterConfig::default() }, deps)
            .unwrap();
    (w, meta, wal)
}

/// Writes one entry to each of `logs` logs, all in one WAL object, on the local filesystem.
async fn one_object_of_logs(
    name: &str,
    logs: u64,
    entry: usize,
) -> (Arc<InMemoryStore>, Arc<dyn ObjectStore>) {
    let (w, meta, wal) = local_writer(name, Duration::from_millis(300));
    let appends = (0..logs).map(|log| {
        let w = w.clone();
        async move { w.append(LogId(log), Bytes::from(vec![log as u8; entry]), 1).await.unwrap() }
    });
    futures::future::join_all(appends).await;
    w.close().await;
    let mut objects = 0;
    let mut listing = wal.list(&ObjectPrefix::new("").unwrap(), None);
    while let Some(o) = futures::StreamExt::next(&mut listing).await {
        o.unwrap();
        objects += 1;
    }
    assert_eq!(objects, 1, "the writer was to put all {logs} logs in one object");
    (meta, wal)
}

/// Reads every log from offset 0 concurrently with one reader; returns the GETs made.
async fn concurrent_reads(name: &str, config: ReaderConfig, logs: u64, entry: usize) -> u64 {
    let (meta, wal) = one_object_of_logs(name, logs, entry).await;
    let counted = counted_gets(wal);
    let deps = ReaderDeps { meta, wal: counted.clone(), compacted: counted.clone() };
    let reader = Reader::new(config, deps).unwrap();
    let reads = (0..logs).map(|log| {
        let reader = reader.clone();
        tokio::spawn(async move {
            let log_ref = LogRef { log_id: LogId(log), namespace: "ns".into(), stream: "s".into() };
            let batch = reader.read(&log_ref, 0, 1 << 20, Duration::ZERO).await.unwrap();
            assert_eq!(batch.entries.len(), 1);
            assert_eq!(batch.entries[0].payload, Bytes::from(vec![log as u8; entry]));
        })
    });
    for read in futures::future::join_all(reads).await {
        read.unwrap();
    }
    counted.counts().gets
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_readers_of_logs_sharing_an_object_cause_one_get() {
    // Each log is half the object, so the default (adaptive) mode reads the object whole.
    let gets = concurrent_reads("two", ReaderConfig::default(), 2, 64 << 10).await;
    assert_eq!(gets, 1, "two concurrent reads of logs sharing one object made {gets} GETs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_readers_of_logs_sharing_an_object_cause_one_get_in_whole_mode() {
    let config = ReaderConfig { wal_read: WalReadMode::Whole, ..ReaderConfig::default() };
    let gets = concurrent_reads("eight-whole", config, 8, 16 << 10).await;
    assert_eq!(gets, 1, "eight concurrent reads of logs sharing one object made {gets} GETs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_readers_of_logs_sharing_an_object_make_two_gets_in_adaptive_mode() {
    // Each log is an eighth of the object: the default (adaptive) mode reads each log's span
    // by range, after one read of the object's index region that all eight share; the spans
    // asked for while the index was read are read together, in one GET.
    let gets = concurrent_reads("eight-adaptive", ReaderConfig::default(), 8, 16 << 10).await;
    assert_eq!(gets, 2, "eight concurrent ranged reads of logs sharing one object made {gets} GETs");
}

/// A read of a log's first object starts fetching its next objects (within the read-ahead
/// budget), so the reads that follow find them cached; with read-ahead off, each read
/// fetches its own object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_fetches_the_next_objects_of_its_log_ahead() {
    const ENTRY: usize = 32 << 10;
    const OBJECTS: u64 = 6;
    let (w, meta, wal) = local_writer("read-ahead", Duration::from_millis(1));
    for i in 0..OBJECTS {
        // Awaited one by one: each append is flushed in an object of its own.
        w.append(LogId(1), Bytes::from(vec![i as u8; ENTRY]), 1).await.unwrap();
    }
    w.close().await;
    let log = LogRef { log_id: LogId(1), namespace: "ns".into(), stream: "s".into() };
    for (budget, expect_ahead) in [(4 * ENTRY, 4), (0, 0)] {
        let counted = counted_gets(wal.clone());
        let deps = ReaderDeps { meta: meta.clone(), wal: counted.clone(), compacted: counted.clone() };
        let config = ReaderConfig { read_ahead_bytes: budget, ..ReaderConfig::default() };
        let reader = Reader::new(config, deps).unwrap();
        // One entry per read, as a consumer polling with a small fetch size does.
        let first = reader.read(&log, 0, 1, Duration::ZERO).await.unwrap();
        assert_eq!(first.entries.len(), 1);
        tokio::time::sleep(Duration::from_millis(500)).await; // the read-ahead lands
        let after_first = counted.counts().gets;
        assert_eq!(after_first, 1 + expect_ahead, "GETs after the first read (budget {budget})");
        let mut next = first.next_offset;
        for i in 1..OBJECTS {
            let batch = reader.read(&log, next, 1, Duration::ZERO).await.unwrap();
            assert_eq!(batch.entries[0].payload, Bytes::from(vec![i as u8; ENTRY]));
            next = batch.next_offset;
        }
        assert_eq!(counted.counts().gets, OBJECTS, "each object is fetched once");
    }
}

/// Eight logs written together, `objects` times: each WAL object holds every log's entry.
async fn objects_of_eight_logs(
    name: &str,
    objects: u64,
    entry: usize,
) -> (Arc<InMemoryStore>, Arc<dyn ObjectStore>) {
    let (w, meta, wal) = local_writer(name, Duration::from_millis(100));
    for round in 0..objects {
        let appends = (0..8u64).map(|log| {
            let w = w.clone();
            async move {
                w.append(LogId(log), Bytes::from(vec![(log * 16 + round) as u8; entry]), 1).await.unwrap()
            }
        });
        futures::future::join_all(appends).await;
    }
    w.close().await;
    (meta, wal)
}

/// Reads `logs` concurrently with one reader from offset 0 to `objects`, one entry per read;
/// returns the GETs and the bytes fetched.
async fn read_logs(
    meta: Arc<InMemoryStore>,
    wal: Arc<dyn ObjectStore>,
    logs: &[u64],
    objects: u64,
    entry: usize,
) -> (u64, u64) {
    let counted = counted_gets(wal);
    let deps = ReaderDeps { meta, wal: counted.clone(), compacted: counted.clone() };
    let reader = Reader::new(ReaderConfig::default(), deps).unwrap();
    read_with(&reader, &counted, logs, objects, entry).await
}

/// Reads `logs` concurrently with `reader` from offset 0 to `objects`, one entry per read,
/// checking each entry; returns the GETs and the bytes `counted` saw fetched meanwhile.
async fn read_with(
    reader: &Reader,
    counted: &CountingStore,
    logs: &[u64],
    objects: u64,
    entry: usize,
) -> (u64, u64) {
    counted.take();
    let reads = logs.iter().map(|&log| {
        let reader = reader.clone();
        tokio::spawn(async move {
            let log_ref = LogRef { log_id: LogId(log), namespace: "ns".into(), stream: "s".into() };
            for round in 0..objects {
                let batch = reader.read(&log_ref, round, 1, Duration::ZERO).await.unwrap();
                assert_eq!(batch.entries[0].payload, Bytes::from(vec![(log * 16 + round) as u8; entry]));
            }
        })
    });
    for read in futures::future::join_all(reads).await {
        read.unwrap();
    }
    let counts = counted.take();
    (counts.gets, counts.bytes_fetched)
}

/// Readers of every log of shared objects: the first objects, read by ranges, show that the
/// objects are shared, and the next ones are read whole, once (single-flight) for all eight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_of_every_log_of_shared_objects_switch_to_whole_objects() {
    const OBJECTS: u64 = 12;
    const ENTRY: usize = 16 << 10;
    let (meta, wal) = objects_of_eight_logs("shared-many", OBJECTS, ENTRY).await;
    let (gets, bytes) = read_logs(meta, wal, &(0..8).collect::<Vec<_>>(), OBJECTS, ENTRY).await;
    let delivered = OBJECTS * 8 * ENTRY as u64;
    eprintln!("{gets} GETs, {bytes} bytes fetched for {delivered} delivered");
    // Ranged reads of every section would take 2 to 9 GETs per object.
    assert!(gets <= OBJECTS + 3 * 9, "{gets} GETs for {OBJECTS} objects of eight logs");
    assert!(bytes as f64 <= 1.1 * delivered as f64, "fetched {bytes} bytes to deliver {delivered}");
}

/// A reader of one log of shared objects keeps reading its share by ranges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_of_one_log_of_shared_objects_reads_its_share() {
    const OBJECTS: u64 = 12;
    const ENTRY: usize = 16 << 10;
    let (meta, wal) = objects_of_eight_logs("one-of-many", OBJECTS, ENTRY).await;
    let (_, bytes) = read_logs(meta, wal, &[3], OBJECTS, ENTRY).await;
    // Its section and the object's index (4 KiB read) per object; the whole object is 8×.
    assert!(
        bytes <= OBJECTS * (ENTRY as u64 + 4096),
        "fetched {bytes} bytes for {OBJECTS} entries of {ENTRY}"
    );
}

/// A log read after the others, by more than the cache holds, finds the objects they read
/// whole evicted: it reads its own section of each (and the object's index), not each object
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_behind_the_cache_reads_its_sections_of_evicted_objects() {
    const OBJECTS: u64 = 12;
    const ENTRY: usize = 64 << 10;
    let (meta, wal) = objects_of_eight_logs("lagging", OBJECTS, ENTRY).await;
    let counted = counted_gets(wal);
    let deps = ReaderDeps { meta, wal: counted.clone(), compacted: counted.clone() };
    // Room for two objects of eight entries; no read-ahead, so that the second step fetches
    // for the lagging log only.
    let config = ReaderConfig {
        object_cache_bytes: 2 * 8 * (ENTRY + 4096),
        read_ahead_bytes: 0,
        ..ReaderConfig::default()
    };
    let reader = Reader::new(config, deps).unwrap();
    let (gets, bytes) = read_with(&reader, &counted, &[0, 1, 2, 3, 4, 5, 6], OBJECTS, ENTRY).await;
    eprintln!("seven logs: {gets} GETs, {bytes} bytes");
    assert!(gets < OBJECTS * 2, "the seven logs read the objects whole: {gets} GETs for {OBJECTS} objects");
    let (gets, bytes) = read_with(&reader, &counted, &[7], OBJECTS, ENTRY).await;
    eprintln!("the lagging log: {gets} GETs, {bytes} bytes");
    // Its section and the object's index (a 4 KiB read) per object; each object is 8× that.
    assert!(
        bytes <= OBJECTS * (ENTRY as u64 + 4096),
        "the lagging log fetched {bytes} bytes for {OBJECTS} entries of {ENTRY}"
    );
}
