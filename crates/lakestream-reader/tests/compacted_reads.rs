//! How much of a compacted file a read fetches, on a real (local-filesystem) object store whose
//! reads are counted: a read near the end of a large file fetches its footer, its companion
//! and the row group holding the offset — a small fraction of the file — and concurrent
//! reads of one file fetch each part once.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lakestream_format::compacted::{self, Codec, KNOWN_BINDINGS, WriteOptions};
use lakestream_format::companion::{self, CompanionRow};
use lakestream_format::entry_index::{EntryIndex, ParquetRange};
use lakestream_format::file_index::{FileIndex, FileIndexEntry};
use lakestream_format::keys;
use lakestream_format::{LogId, LogRef};
use lakestream_meta::test_rng::TestRng;
use lakestream_meta::{InMemoryStore, MetaStore, PutCondition};
use lakestream_objstore::{
    CountingStore, Counts, FaultConfig, FaultyStore, LocalFsStore, ObjectPath, ObjectRoot, ObjectStore,
    Operation, OperationFaults,
};
use lakestream_reader::{Reader, ReaderConfig, ReaderDeps};

const ENTRY: usize = 64 << 10;
const ENTRIES: u64 = 512; // 32 MiB of payload
const ROW_GROUP: usize = 2 << 20; // 32 entries

/// Entry `i`'s payload: distinct, incompressible.
fn payload(i: u64) -> Bytes {
    Bytes::from(TestRng::new(i).bytes(ENTRY))
}

struct Compacted {
    meta: Arc<InMemoryStore>,
    /// The file's store, counting GETs (whole and ranged), the bytes they return, and HEADs.
    counted: Arc<CountingStore>,
    log: LogRef,
    file_len: u64,
}

/// One log whose entries 0..ENTRIES (one record each) are in one compacted file of SNAPPY row
/// groups of ROW_GROUP bytes (as the compactor cuts them), under one PARQUET record.
async fn compacted_log(name: &str) -> Compacted {
    let dir = std::env::temp_dir().join(format!("lakestream-compacted-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store: Arc<dyn ObjectStore> =
        Arc::new(LocalFsStore::new(&dir, ObjectRoot::parse("compacted").unwrap()).expect("local store"));
    let log = LogRef { log_id: LogId(4), namespace: "ns".into(), stream: "s".into() };
    let name = "4-0.parquet".to_string();
    let options =
        WriteOptions { codec: Codec::Snappy, max_row_group_bytes: ROW_GROUP, ..WriteOptions::default() };
    let file = compacted::write_compacted_file(KNOWN_BINDINGS[0], &name, (0..ENTRIES).map(payload), options)
        .unwrap();
    let file_len = file.len() as u64;
    let rows: Vec<CompanionRow> = (0..ENTRIES)
        .map(|i| CompanionRow {
            offset: i,
            record_count: 1,
            timestamp_ms: 1_000 + i as i64,
            entry_size: ENTRY as u32,
            cumulative_size: (i + 1) * ENTRY as u64,
            schema_version: None,
        })
        .collect();
    let index = companion::write_companion(&rows, Default::default()).unwrap();
    let at = |n: &str| ObjectPath::new(format!("{}/{}/{n}", log.namespace, log.stream)).unwrap();
    store.put(&at(&name), Bytes::from(file)).await.unwrap();
    store.put(&at(&compacted::companion_name(&name).unwrap()), Bytes::from(index)).await.unwrap();
    let range =
        ParquetRange { start: 0, end: ENTRIES, cumulative_start: 0, cumulative_end: ENTRIES * ENTRY as u64 };
    let files = FileIndex::new(vec![FileIndexEntry { last_offset: ENTRIES - 1, name }]).unwrap();
    let value = EntryIndex::parquet(range, &files).unwrap().encode();
    let meta = Arc::new(InMemoryStore::new());
    let key = keys::index_key(log.log_id, ENTRIES, range.cumulative_end);
    meta.put(&keys::partition(log.log_id), &key, Bytes::from(value), PutCondition::None).await.unwrap();
    // Ranged GETs slowed a little, so that concurrent reads overlap for certain.
    let slowed = OperationFaults { delay: Duration::from_millis(20), ..OperationFaults::default() };
    let slowed = FaultyStore::new(store, FaultConfig::new(0).with(Operation::GetRange, slowed));
    let counted = Arc::new(CountingStore::new(Arc::new(slowed)));
    Compacted { meta, counted, log, file_len }
}

fn reader(c: &Compacted, config: ReaderConfig) -> Reader {
    let deps = ReaderDeps { meta: c.meta.clone(), wal: c.counted.clone(), compacted: c.counted.clone() };
    Reader::new(config, deps).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_near_the_end_of_a_large_compacted_file_fetches_a_small_fraction_of_it() {
    let c = compacted_log("near-end").await;
    assert!(c.file_len > 32 << 20, "the file is {} bytes", c.file_len);
    let r = reader(&c, ReaderConfig::default());
    let offset = ENTRIES - 3; // in the last row group
    let batch = r.read(&c.log, offset, 1, Duration::ZERO).await.unwrap();
    assert_eq!(batch.entries.len(), 1);
    assert_eq!(batch.entries[0].offset, offset);
    assert_eq!(batch.entries[0].timestamp_ms, 1_000 + offset as i64);
    assert_eq!(batch.entries[0].payload, payload(offset));
    let Counts { gets, bytes_fetched: bytes, heads, .. } = c.counted.take();
    eprintln!(
        "one read near the end: {gets} GETs, {heads} HEAD, {bytes} bytes of a {}-byte file",
        c.file_len
    );
    // The companion, the footer (one GET of the file's tail, with a HEAD for its length) and
    // one row group.
    assert_eq!((gets, heads), (3, 1), "GETs and HEADs for one read near the end");
    assert!(
        bytes * 10 < c.file_len,
        "a read near the end fetched {bytes} bytes of a {}-byte file",
        c.file_len
    );
    assert!(bytes < (ROW_GROUP + (256 << 10)) as u64, "fetched {bytes} bytes for one row group");

    // The rest of the row group is cached, decoded: reading it fetches nothing.
    let batch = r.read(&c.log, offset + 1, 1 << 20, Duration::ZERO).await.unwrap();
    assert_eq!(batch.entries.len(), 2);
    assert_eq!(batch.next_offset, ENTRIES);
    let after = c.counted.take();
    assert_eq!((after.gets, after.bytes_fetched, after.heads), (0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reads_of_one_compacted_file_fetch_each_part_once() {
    let c = compacted_log("concurrent").await;
    let config = ReaderConfig { read_ahead_bytes: 0, ..ReaderConfig::default() };
    let r = reader(&c, config);
    let reads = (0..8).map(|_| {
        let (r, log) = (r.clone(), c.log.clone());
        tokio::spawn(async move { r.read(&log, 100, 1, Duration::ZERO).await.unwrap() })
    });
    for read in futures::future::join_all(reads).await {
        assert_eq!(read.unwrap().entries[0].payload, payload(100));
    }
    let Counts { gets, heads, .. } = c.counted.take();
    assert_eq!((gets, heads), (3, 1), "eight concurrent reads of one row group");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catch_up_read_of_a_compacted_file_fetches_it_about_once() {
    let c = compacted_log("catch-up").await;
    let r = reader(&c, ReaderConfig { read_ahead_bytes: 8 << 20, ..ReaderConfig::default() });
    let mut next = 0;
    while next < ENTRIES {
        let batch = r.read(&c.log, next, 1 << 20, Duration::ZERO).await.unwrap();
        for e in &batch.entries {
            assert_eq!(e.offset, next);
            assert_eq!(e.payload, payload(next), "entry {next}");
            next += 1;
        }
        assert_eq!(batch.next_offset, next);
    }
    tokio::time::sleep(Duration::from_millis(100)).await; // any read-ahead still landing
    let Counts { gets, bytes_fetched: bytes, heads, .. } = c.counted.take();
    assert_eq!(heads, 1);
    assert!(gets <= 2 + ENTRIES.div_ceil((ROW_GROUP / ENTRY) as u64), "{gets} GETs");
    assert!(bytes <= c.file_len + c.file_len / 50, "fetched {bytes} bytes of a {}-byte file", c.file_len);
}
