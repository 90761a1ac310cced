//! The commit protocol against the real SQL catalog, on SQLite and on a real PostgreSQL
//! server (`LAKESTREAM_TEST_POSTGRES_URL`, which `scripts/test` sets; the PostgreSQL tests
//! fail without it). The tables are read back through iceberg-rust's own scan, so the data
//! files' field ids, partition values and the manifests are checked by an Iceberg reader.
#![allow(clippy::disallowed_methods)] // tests take fresh UUIDs for file and catalog names

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{Array, RecordBatch};
use bytes::Bytes;
use futures::TryStreamExt;
use lakestream_format::Entry;
use lakestream_iceberg::tables::{NEXT_OFFSET_PROPERTY, RANGES_SUMMARY};
use lakestream_iceberg::{LogRange, StreamRef, Tables, TablesConfig};
use lakestream_objstore::{LocalFsStore, ObjectRoot, ObjectStore};
use tempfile::TempDir;

#[derive(Debug, Clone, Copy)]
enum Db {
    Sqlite,
    Postgres,
}

struct Fixture {
    dir: TempDir,
    config: TablesConfig,
    store: Arc<dyn ObjectStore>,
    root_uri: String,
    tables: Tables,
}

fn postgres_url() -> String {
    std::env::var("LAKESTREAM_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!(
            "LAKESTREAM_TEST_POSTGRES_URL is not set: these tests need a PostgreSQL server. scripts/test \
             starts one; or run `source scripts/servers.sh; install_postgres; start_postgres` and export it"
        )
    })
}

fn tokens() -> lakestream_iceberg::TokenFn {
    Arc::new(|| uuid::Uuid::new_v4().to_string())
}

async fn fixture(db: Db) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> =
        Arc::new(LocalFsStore::new(dir.path(), ObjectRoot::parse("compacted").unwrap()).unwrap());
    let root_uri = format!("file://{}/compacted", dir.path().display());
    let uri = match db {
        Db::Sqlite => format!("sqlite://{}/catalog.db", dir.path().display()),
        Db::Postgres => postgres_url(),
    };
    // One catalog name per test: the PostgreSQL database is shared by the tests.
    let config = TablesConfig {
        uri: Some(uri),
        catalog_name: format!("test-{}", uuid::Uuid::new_v4()),
        target_file_bytes: 1 << 20,
        row_group_bytes: 64 << 10,
        ..TablesConfig::default()
    };
    let tables = Tables::connect(&config, store.clone(), &root_uri, tokens()).await.unwrap();
    Fixture { dir, config, store, root_uri, tables }
}

fn entry(offset: u64, record_count: u32, timestamp_ms: i64, payload: impl Into<Bytes>) -> Entry {
    Entry { offset, record_count, timestamp_ms, payload: payload.into() }
}

/// Entries `[start, end)`, one offset each, one per millisecond from a fixed time.
fn entries(start: u64, end: u64) -> Vec<Entry> {
    (start..end).map(|o| entry(o, 1, 1_700_000_000_000 + o as i64, format!("payload-{o}"))).collect()
}

fn range(log_id: u64, partition: u32, start: u64, end: u64) -> LogRange {
    LogRange { log_id, partition, start, end, entries: entries(start, end) }
}

/// Every row of the table, through iceberg-rust's scan.
async fn scan(tables: &Tables, stream: &StreamRef) -> Vec<RecordBatch> {
    let table = tables.catalog().load_table(&stream.ident()).await.unwrap();
    if table.metadata().current_snapshot().is_none() {
        return Vec::new();
    }
    let scan = table.scan().select_all().build().unwrap();
    scan.to_arrow().await.unwrap().try_collect().await.unwrap()
}

/// (partition, offset) of every row, sorted.
async fn offsets(tables: &Tables, stream: &StreamRef) -> Vec<(i32, i64)> {
    let mut rows = Vec::new();
    for batch in scan(tables, stream).await {
        let p = batch.column_by_name("partition").unwrap().as_primitive::<Int32Type>();
        let o = batch.column_by_name("offset").unwrap().as_primitive::<Int64Type>();
        rows.extend((0..batch.num_rows()).map(|i| (p.value(i), o.value(i))));
    }
    rows.sort_unstable();
    rows
}

fn files_under(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path());
            }
        }
    }
    out
}

async fn commit_and_recommit(db: Db) {
    let f = fixture(db).await;
    let stream = StreamRef::new("shop", "orders");
    assert!(f.tables.watermarks(&stream).await.unwrap().is_empty());
    let staged = f.tables.stage(&stream, vec![range(7, 0, 0, 5), range(8, 1, 0, 3)]).await.unwrap();
    let report = f.tables.commit(&staged).await.unwrap();
    assert_eq!(report.committed.len(), 2, "{report:?}");
    assert_eq!(report.attempts, 1);
    assert_eq!(f.tables.watermarks(&stream).await.unwrap(), BTreeMap::from([(7, 5), (8, 3)]));
    let expected: Vec<(i32, i64)> = (0..5).map(|o| (0, o)).chain((0..3).map(|o| (1, o))).collect();
    assert_eq!(offsets(&f.tables, &stream).await, expected);

    // The snapshot records the ranges it covers.
    let table = f.tables.catalog().load_table(&stream.ident()).await.unwrap();
    let snapshot = table.metadata().current_snapshot().unwrap();
    let ranges = &snapshot.summary().additional_properties[RANGES_SUMMARY];
    assert!(ranges.contains(r#""log_id":7"#) && ranges.contains(r#""end":5"#), "{ranges}");
    assert_eq!(table.metadata().properties()[&format!("{NEXT_OFFSET_PROPERTY}7")], "5");

    // Committing the same staged ranges again (a retry after an unknown outcome) adds nothing.
    let again = f.tables.commit(&staged).await.unwrap();
    assert!(again.committed.is_empty() && again.snapshot_id.is_none(), "{again:?}");
    assert_eq!(again.already_committed.len(), 2);
    assert_eq!(offsets(&f.tables, &stream).await, expected);

    // The next ranges continue from the watermarks, in one more snapshot.
    let report = f.tables.append(&stream, vec![range(7, 0, 5, 9)]).await.unwrap();
    assert_eq!(report.committed.len(), 1);
    assert_eq!(offsets(&f.tables, &stream).await.len(), 12);
    // Table files live under the compacted root, below the prefix.
    let table_dir = f.dir.path().join("compacted/_iceberg/shop/orders");
    let files = files_under(&table_dir);
    assert!(
        files.iter().any(|p| p.to_string_lossy().contains("/data/timestamp_day=2023-11-14/")),
        "{files:?}"
    );
    assert!(files.iter().any(|p| p.extension().is_some_and(|e| e == "json")), "{files:?}");
}

async fn crash_between_write_and_commit(db: Db) {
    let f = fixture(db).await;
    let stream = StreamRef::new("shop", "payments");
    f.tables.append(&stream, vec![range(3, 0, 0, 4)]).await.unwrap();
    // A committer writes the files of [4, 10) and crashes before its commit.
    let crashed = f.tables.stage(&stream, vec![range(3, 0, 4, 10)]).await.unwrap();
    // The next pass reads the range again from the unchanged watermark.
    assert_eq!(f.tables.watermarks(&stream).await.unwrap()[&3], 4);
    let restarted = Tables::connect(&f.config, f.store.clone(), &f.root_uri, tokens()).await.unwrap();
    let retry = restarted.append(&stream, vec![range(3, 0, 4, 10)]).await.unwrap();
    assert_eq!(retry.committed.len(), 1);
    // A late commit of the crashed attempt's files is refused: its range no longer starts at
    // the watermark, or the table already holds it.
    let late = restarted.commit(&crashed).await.unwrap();
    assert!(late.committed.is_empty(), "{late:?}");
    assert_eq!(late.already_committed.len(), 1);
    let rows = offsets(&restarted, &stream).await;
    assert_eq!(rows, (0..10).map(|o| (0, o)).collect::<Vec<_>>(), "no offset twice");
    // The crashed attempt's files exist but no snapshot refers to them.
    let table = restarted.catalog().load_table(&stream.ident()).await.unwrap();
    let scan = table.scan().select_all().build().unwrap();
    let referenced: Vec<String> =
        scan.plan_files().await.unwrap().map_ok(|t| t.data_file_path).try_collect().await.unwrap();
    for orphan in crashed.file_paths() {
        assert!(!referenced.contains(&orphan), "{orphan} is referenced");
        assert!(std::path::Path::new(orphan.strip_prefix("file://").unwrap()).exists());
    }

    // An attempt superseded half-way: staged for [12, 20) at watermark 12, while another
    // commit took the watermark to 13. Refused as stale; no offset twice.
    restarted.append(&stream, vec![range(3, 0, 10, 12)]).await.unwrap();
    let overlapping = restarted.stage(&stream, vec![range(3, 0, 12, 20)]).await.unwrap();
    restarted.append(&stream, vec![range(3, 0, 12, 13)]).await.unwrap();
    let late = restarted.commit(&overlapping).await.unwrap();
    assert!(late.committed.is_empty() && late.already_committed.is_empty(), "{late:?}");
    assert_eq!(late.stale.len(), 1);
    assert_eq!(offsets(&restarted, &stream).await, (0..13).map(|o| (0, o)).collect::<Vec<_>>());
}

async fn concurrent_committers_keep_each_others_watermarks(db: Db) {
    let f = fixture(db).await;
    let other = Tables::connect(&f.config, f.store.clone(), &f.root_uri, tokens()).await.unwrap();
    let stream = StreamRef::new("shop", "clicks");
    // Both stage from the same table state, for different logs; both commit.
    let a = f.tables.stage(&stream, vec![range(1, 0, 0, 3)]).await.unwrap();
    let b = other.stage(&stream, vec![range(2, 1, 0, 4)]).await.unwrap();
    let (ra, rb) = tokio::join!(f.tables.commit(&a), other.commit(&b));
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!((ra.committed.len(), rb.committed.len()), (1, 1), "{ra:?} {rb:?}");
    assert_eq!(f.tables.watermarks(&stream).await.unwrap(), BTreeMap::from([(1, 3), (2, 4)]));
    assert_eq!(offsets(&f.tables, &stream).await.len(), 7);
}

async fn kafka_records_become_rows(db: Db) {
    let f = fixture(db).await;
    let stream = StreamRef::new("default", "orders-topic-id-AAAAAAAAAAAAAAAAAAAAAA");
    let vectors = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../lakestream-format/tests/vectors/kafka");
    let headers = std::fs::read(vectors.join("v2_headers.bin")).unwrap();
    let three = std::fs::read(vectors.join("v2_three_batches.bin")).unwrap();
    // Entries: 3 records at offset 0, 8 at offset 3, and one that is not a record batch.
    let range = LogRange {
        log_id: 11,
        partition: 2,
        start: 0,
        end: 12,
        entries: vec![
            entry(0, 3, 1_800_000_000_000, headers),
            entry(3, 8, 1_800_000_000_000, three),
            entry(11, 1, 1_800_000_000_000, &b"not a batch"[..]),
        ],
    };
    let staged = f.tables.stage(&stream, vec![range]).await.unwrap();
    assert_eq!(staged.ranges[0].undecodable_entries, 1);
    f.tables.commit(&staged).await.unwrap();
    let mut rows = Vec::new();
    for batch in scan(&f.tables, &stream).await {
        let offset = batch.column_by_name("offset").unwrap().as_primitive::<Int64Type>().clone();
        let ts =
            batch.column_by_name("timestamp").unwrap().as_primitive::<TimestampMicrosecondType>().clone();
        let key = batch.column_by_name("key").unwrap().clone();
        let value = batch.column_by_name("value").unwrap().clone();
        let headers = batch.column_by_name("headers").unwrap().as_list::<i32>().clone();
        for i in 0..batch.num_rows() {
            let h = headers.value(i);
            let h = h.as_struct();
            let hs: Vec<(String, Option<Vec<u8>>)> = (0..h.len())
                .map(|j| (String::from_utf8(bytes(h.column(0), j).unwrap()).unwrap(), bytes(h.column(1), j)))
                .collect();
            rows.push((offset.value(i), ts.value(i), bytes(&key, i), bytes(&value, i), hs));
        }
    }
    rows.sort_by_key(|r| r.0);
    assert_eq!(rows.len(), 12);
    assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), (0..12).collect::<Vec<_>>());
    // kafka-python wrote timestamps 1_700_000_000_000 + i (ms): they are the rows' times.
    assert_eq!(rows[0].1, 1_700_000_000_000_000);
    assert_eq!(rows[1].1, 1_700_000_000_001_000);
    assert_eq!(rows[0].2.as_deref(), Some(&b"k0"[..]));
    assert_eq!(rows[0].3.as_deref(), Some(&b"v0"[..]));
    assert_eq!(rows[0].4, vec![("trace".into(), Some(b"abc".to_vec())), ("empty".into(), Some(Vec::new()))]);
    assert_eq!((rows[1].3.as_deref(), rows[1].4.clone()), (None, vec![("h".into(), None)]));
    assert_eq!(rows[2].2, None);
    assert_eq!(rows[4].2.as_deref(), Some(&b"key-0"[..]));
    // The undecodable entry: one row with its payload and why, at the entry's time.
    assert_eq!(rows[11].3.as_deref(), Some(&b"not a batch"[..]));
    assert_eq!(rows[11].4[0].0, lakestream_iceberg::files::UNDECODED_HEADER);
    assert_eq!(rows[11].1, 1_800_000_000_000_000);
}

/// A binary or string value (iceberg-rust reads `binary` as LargeBinary), `None` when null.
fn bytes(array: &arrow_array::ArrayRef, i: usize) -> Option<Vec<u8>> {
    use arrow_schema::DataType;
    if array.is_null(i) {
        return None;
    }
    Some(match array.data_type() {
        DataType::Binary => array.as_binary::<i32>().value(i).to_vec(),
        DataType::LargeBinary => array.as_binary::<i64>().value(i).to_vec(),
        DataType::Utf8 => array.as_string::<i32>().value(i).as_bytes().to_vec(),
        DataType::LargeUtf8 => array.as_string::<i64>().value(i).as_bytes().to_vec(),
        DataType::Utf8View => array.as_string_view().value(i).as_bytes().to_vec(),
        DataType::BinaryView => array.as_binary_view().value(i).to_vec(),
        other => panic!("not binary: {other}"),
    })
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// (partition, offset) of every row of one snapshot (time travel), sorted.
async fn offsets_at(tables: &Tables, stream: &StreamRef, snapshot_id: i64) -> Vec<(i32, i64)> {
    let table = tables.catalog().load_table(&stream.ident()).await.unwrap();
    let scan = table.scan().snapshot_id(snapshot_id).select_all().build().unwrap();
    let batches: Vec<RecordBatch> = scan.to_arrow().await.unwrap().try_collect().await.unwrap();
    let mut rows = Vec::new();
    for batch in batches {
        let p = batch.column_by_name("partition").unwrap().as_primitive::<Int32Type>();
        let o = batch.column_by_name("offset").unwrap().as_primitive::<Int64Type>();
        rows.extend((0..batch.num_rows()).map(|i| (p.value(i), o.value(i))));
    }
    rows.sort_unstable();
    rows
}

/// The data files of the current snapshot.
async fn live_files(tables: &Tables, stream: &StreamRef) -> Vec<String> {
    let table = tables.catalog().load_table(&stream.ident()).await.unwrap();
    let scan = table.scan().select_all().build().unwrap();
    let mut files: Vec<String> =
        scan.plan_files().await.unwrap().map_ok(|t| t.data_file_path).try_collect().await.unwrap();
    files.sort();
    files
}

fn local(location: &str) -> PathBuf {
    PathBuf::from(location.strip_prefix("file://").unwrap())
}

fn rows(log_partition: i32, offsets: std::ops::Range<i64>) -> Vec<(i32, i64)> {
    offsets.map(|o| (log_partition, o)).collect()
}

/// Log 7 (partition 0) in three commits of one data file each, [0,5) [5,10) [10,15); log 8
/// (partition 1) [0,4).
async fn three_commits(tables: &Tables, stream: &StreamRef) {
    tables.append(stream, vec![range(7, 0, 0, 5), range(8, 1, 0, 4)]).await.unwrap();
    tables.append(stream, vec![range(7, 0, 5, 10)]).await.unwrap();
    tables.append(stream, vec![range(7, 0, 10, 15)]).await.unwrap();
}

async fn trims_remove_trimmed_files_from_the_table(db: Db) {
    let f = fixture(db).await;
    let stream = StreamRef::new("shop", "trimmed");
    three_commits(&f.tables, &stream).await;
    let before = f.tables.catalog().load_table(&stream.ident()).await.unwrap();
    let before_snapshot = before.metadata().current_snapshot_id().unwrap();
    let files_before = live_files(&f.tables, &stream).await;
    assert_eq!(files_before.len(), 4);

    // Log 7 trimmed at 7: [0,5) goes, [5,10) straddles and stays whole; log 8 untouched.
    let report = f.tables.trim(&stream, &BTreeMap::from([(7, 7)]), now_ms()).await.unwrap();
    assert_eq!((report.files_removed, report.rows_removed, report.files_straddling), (1, 5, 1), "{report:?}");
    assert!(report.snapshot_id.is_some());
    let expected: Vec<_> = rows(0, 5..15).into_iter().chain(rows(1, 0..4)).collect();
    assert_eq!(offsets(&f.tables, &stream).await, expected);
    let table = f.tables.catalog().load_table(&stream.ident()).await.unwrap();
    let snapshot = table.metadata().current_snapshot().unwrap();
    assert_eq!(snapshot.summary().operation, iceberg::spec::Operation::Delete);
    assert_eq!(snapshot.summary().additional_properties["deleted-data-files"], "1");
    assert_eq!(table.metadata().properties()["lakestream.trimmed-below.7"], "7");
    // The watermarks are untouched: the next range continues the log.
    assert_eq!(f.tables.watermarks(&stream).await.unwrap(), BTreeMap::from([(7, 15), (8, 4)]));
    // A reader of the older snapshot still reads it whole: its files are still there.
    let old: Vec<_> = rows(0, 0..15).into_iter().chain(rows(1, 0..4)).collect();
    assert_eq!(offsets_at(&f.tables, &stream, before_snapshot).await, old);

    // The same trim points again: no commit.
    let again = f.tables.trim(&stream, &BTreeMap::from([(7, 7)]), now_ms()).await.unwrap();
    assert_eq!(again, lakestream_iceberg::TrimReport::default());
    let unchanged = f.tables.catalog().load_table(&stream.ident()).await.unwrap();
    assert_eq!(unchanged.metadata_location(), table.metadata_location());

    // Trimmed at 10 (log 7) and 4 (log 8, all of it); then appends go on.
    let report = f.tables.trim(&stream, &BTreeMap::from([(7, 10), (8, 4)]), now_ms()).await.unwrap();
    assert_eq!((report.files_removed, report.rows_removed), (2, 9), "{report:?}");
    assert_eq!(offsets(&f.tables, &stream).await, rows(0, 10..15));
    f.tables.append(&stream, vec![range(7, 0, 15, 20)]).await.unwrap();
    assert_eq!(offsets(&f.tables, &stream).await, rows(0, 10..20));

    // A trim point moving with no file wholly below it is recorded without a snapshot.
    let snapshots =
        f.tables.catalog().load_table(&stream.ident()).await.unwrap().metadata().snapshots().count();
    let report = f.tables.trim(&stream, &BTreeMap::from([(7, 12)]), now_ms()).await.unwrap();
    assert!(report.recorded && report.snapshot_id.is_none() && report.files_straddling == 1, "{report:?}");
    let table = f.tables.catalog().load_table(&stream.ident()).await.unwrap();
    assert_eq!(table.metadata().snapshots().count(), snapshots);
    assert_eq!(table.metadata().properties()["lakestream.trimmed-below.7"], "12");
}

async fn expiry_deletes_unreferenced_files_and_keeps_referenced_ones(db: Db) {
    let mut f = fixture(db).await;
    let stream = StreamRef::new("shop", "expired");
    three_commits(&f.tables, &stream).await;
    let first_files = live_files(&f.tables, &stream).await;
    f.tables.trim(&stream, &BTreeMap::from([(7, 10)]), now_ms()).await.unwrap();
    let kept_files = live_files(&f.tables, &stream).await;
    assert_eq!(kept_files.len(), 2);
    // A crashed commit attempt: files no snapshot refers to.
    let crashed = f.tables.stage(&stream, vec![range(7, 0, 15, 18)]).await.unwrap();
    // A table whose name extends this one's: its files are not this table's.
    let sibling = StreamRef::new("shop", "expired2");
    f.tables.append(&sibling, vec![range(9, 0, 0, 3)]).await.unwrap();
    let sibling_files = files_under(&f.dir.path().join("compacted/_iceberg/shop/expired2"));

    // Nothing old enough yet with the defaults (1 h, 10 snapshots): nothing expires or goes.
    let report = f.tables.maintain(&stream, now_ms()).await.unwrap();
    assert_eq!((report.snapshots_expired, report.files_deleted()), (0, 0), "{report:?}");
    assert!(report.young_files_kept >= crashed.file_paths().len(), "{report:?}");

    f.tables.set_maintenance(lakestream_iceberg::MaintenanceOptions {
        snapshot_max_age: std::time::Duration::ZERO,
        min_snapshots: 1,
        orphan_grace: std::time::Duration::ZERO,
    });
    let report = f.tables.maintain(&stream, now_ms() + 1000).await.unwrap();
    assert_eq!(report.snapshots_expired, 3, "{report:?}");
    // The trimmed files ([0,5) of log 7, log 8's) and the crashed attempt's are gone.
    assert_eq!(report.data_files_deleted, 2 + crashed.file_paths().len(), "{report:?}");
    assert!(report.metadata_files_deleted >= 3, "manifest lists of expired snapshots: {report:?}");
    for gone in first_files.iter().filter(|p| !kept_files.contains(p)).chain(&crashed.file_paths()) {
        assert!(!local(gone).exists(), "{gone} was not deleted");
    }
    // What the current snapshot reads stays, and reads the same.
    for kept in &kept_files {
        assert!(local(kept).exists(), "{kept} was deleted");
    }
    let log8 = rows(1, 0..4);
    assert_eq!(offsets(&f.tables, &stream).await, [rows(0, 10..15), log8.clone()].concat());
    let table = f.tables.catalog().load_table(&stream.ident()).await.unwrap();
    assert_eq!(table.metadata().snapshots().count(), 1);
    assert!(local(table.metadata_location().unwrap()).exists());
    assert_eq!(files_under(&f.dir.path().join("compacted/_iceberg/shop/expired2")), sibling_files);
    // Appends and trims go on after expiry.
    f.tables.append(&stream, vec![range(7, 0, 15, 20)]).await.unwrap();
    assert_eq!(offsets(&f.tables, &stream).await, [rows(0, 10..20), log8].concat());
    // A second pass finds nothing more to delete but the metadata versions that left the log.
    let again = f.tables.delete_unreferenced(&stream, now_ms() + 1000).await.unwrap();
    assert_eq!(again.data_files_deleted, 0, "{again:?}");
}

async fn orphans_are_deleted_after_their_grace_period(db: Db) {
    let mut f = fixture(db).await;
    let stream = StreamRef::new("shop", "orphans");
    f.tables.append(&stream, vec![range(4, 0, 0, 5)]).await.unwrap();
    f.tables.set_maintenance(lakestream_iceberg::MaintenanceOptions {
        snapshot_max_age: std::time::Duration::from_secs(3600),
        min_snapshots: 1,
        orphan_grace: std::time::Duration::from_secs(3600),
    });
    let young = f.tables.stage(&stream, vec![range(4, 0, 5, 8)]).await.unwrap();
    // Younger than the grace period (a commit that may still be under way): kept.
    let report = f.tables.delete_unreferenced(&stream, now_ms()).await.unwrap();
    assert_eq!(report.files_deleted(), 0, "{report:?}");
    assert_eq!(report.young_files_kept, young.file_paths().len());
    for p in young.file_paths() {
        assert!(local(&p).exists());
    }
    // Two hours later they are orphans; the table's own files stay.
    let live = live_files(&f.tables, &stream).await;
    let report = f.tables.delete_unreferenced(&stream, now_ms() + 2 * 3600 * 1000).await.unwrap();
    assert_eq!(report.data_files_deleted, young.file_paths().len(), "{report:?}");
    for p in young.file_paths() {
        assert!(!local(&p).exists());
    }
    for p in &live {
        assert!(local(p).exists());
    }
    assert_eq!(offsets(&f.tables, &stream).await, rows(0, 0..5));
}

/// An object store whose writes of metadata JSON fail while `fail` is set: a trim that dies
/// after writing its manifests and manifest list, before its metadata.
#[derive(Debug)]
struct MetadataWritesFail {
    inner: Arc<dyn ObjectStore>,
    fail: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl ObjectStore for MetadataWritesFail {
    async fn put(
        &self,
        path: &lakestream_objstore::ObjectPath,
        bytes: Bytes,
    ) -> lakestream_objstore::ObjectResult<()> {
        if self.fail.load(std::sync::atomic::Ordering::SeqCst) && path.as_str().ends_with(".metadata.json") {
            return Err(lakestream_objstore::ObjectStoreError::Unavailable {
                operation: "put",
                path: path.as_str().to_owned(),
                detail: "injected: the process died here".into(),
            });
        }
        self.inner.put(path, bytes).await
    }
    async fn get(&self, path: &lakestream_objstore::ObjectPath) -> lakestream_objstore::ObjectResult<Bytes> {
        self.inner.get(path).await
    }
    async fn get_range(
        &self,
        path: &lakestream_objstore::ObjectPath,
        range: lakestream_objstore::ByteRange,
    ) -> lakestream_objstore::ObjectResult<Bytes> {
        self.inner.get_range(path, range).await
    }
    async fn head(
        &self,
        path: &lakestream_objstore::ObjectPath,
    ) -> lakestream_objstore::ObjectResult<lakestream_objstore::ObjectMeta> {
        self.inner.head(path).await
    }
    async fn delete(&self, path: &lakestream_objstore::ObjectPath) -> lakestream_objstore::ObjectResult<()> {
        self.inner.delete(path).await
    }
    async fn delete_many(
        &self,
        paths: &[lakestream_objstore::ObjectPath],
    ) -> lakestream_objstore::ObjectResult<()> {
        self.inner.delete_many(paths).await
    }
    fn list(
        &self,
        prefix: &lakestream_objstore::ObjectPrefix,
        start_after: Option<&lakestream_objstore::ObjectPath>,
    ) -> futures::stream::BoxStream<'static, lakestream_objstore::ObjectResult<lakestream_objstore::ObjectMeta>>
    {
        self.inner.list(prefix, start_after)
    }
    fn write_once(&self) -> lakestream_objstore::WriteOnce {
        self.inner.write_once()
    }
}

async fn a_crash_between_trim_steps_is_repaired(db: Db) {
    let f = fixture(db).await;
    let stream = StreamRef::new("shop", "crashing");
    three_commits(&f.tables, &stream).await;
    let failing = Arc::new(MetadataWritesFail { inner: f.store.clone(), fail: true.into() });
    let store: Arc<dyn ObjectStore> = failing.clone();
    let crashing = Tables::connect(&f.config, store, &f.root_uri, tokens()).await.unwrap();
    // Every attempt writes its manifests and manifest list, then dies before the metadata.
    let err = crashing.trim(&stream, &BTreeMap::from([(7, 10)]), now_ms()).await.unwrap_err();
    assert!(err.to_string().contains("injected"), "{err}");
    // The table is valid and unchanged.
    let all: Vec<_> = rows(0, 0..15).into_iter().chain(rows(1, 0..4)).collect();
    assert_eq!(offsets(&f.tables, &stream).await, all);
    assert!(
        !f.tables
            .catalog()
            .load_table(&stream.ident())
            .await
            .unwrap()
            .metadata()
            .properties()
            .contains_key("lakestream.trimmed-below.7")
    );
    // The next pass (another process) finishes the trim.
    let report = f.tables.trim(&stream, &BTreeMap::from([(7, 10)]), now_ms()).await.unwrap();
    assert_eq!(report.files_removed, 2, "{report:?}");
    assert_eq!(
        offsets(&f.tables, &stream).await,
        rows(0, 10..15).into_iter().chain(rows(1, 0..4)).collect::<Vec<_>>()
    );

    // Expiry committed, then a crash before any file was deleted: the next pass deletes them.
    let mut tables = Tables::connect(&f.config, f.store.clone(), &f.root_uri, tokens()).await.unwrap();
    tables.set_maintenance(lakestream_iceberg::MaintenanceOptions {
        snapshot_max_age: std::time::Duration::ZERO,
        min_snapshots: 1,
        orphan_grace: std::time::Duration::ZERO,
    });
    assert_eq!(tables.expire_snapshots(&stream, now_ms() + 1000).await.unwrap(), 3);
    let restarted = {
        let mut t = Tables::connect(&f.config, f.store.clone(), &f.root_uri, tokens()).await.unwrap();
        t.set_maintenance(tables.maintenance());
        t
    };
    let report = restarted.delete_unreferenced(&stream, now_ms() + 1000).await.unwrap();
    // The two trimmed data files, and the crashed trims' manifests and manifest lists among
    // the metadata files.
    assert_eq!(report.data_files_deleted, 2, "{report:?}");
    assert!(report.metadata_files_deleted >= 2 * 4, "{report:?}");
    assert_eq!(
        offsets(&restarted, &stream).await,
        rows(0, 10..15).into_iter().chain(rows(1, 0..4)).collect::<Vec<_>>()
    );
}

async fn dropping_a_table_deletes_it_and_its_files(db: Db) {
    let f = fixture(db).await;
    let stream = StreamRef::new("shop", "dropped");
    let sibling = StreamRef::new("shop", "dropped-not");
    f.tables.append(&stream, vec![range(5, 0, 0, 5)]).await.unwrap();
    f.tables.stage(&stream, vec![range(5, 0, 5, 6)]).await.unwrap(); // an orphan too
    f.tables.append(&sibling, vec![range(6, 0, 0, 5)]).await.unwrap();
    let dir = f.dir.path().join("compacted/_iceberg/shop/dropped");
    assert!(!files_under(&dir).is_empty());
    assert!(f.tables.list_tables().await.unwrap().contains(&stream));

    let deleted = f.tables.drop_table(&stream).await.unwrap();
    assert!(deleted >= 4, "{deleted}");
    assert!(files_under(&dir).is_empty(), "{:?}", files_under(&dir));
    let err = f.tables.catalog().load_table(&stream.ident()).await.unwrap_err();
    assert_eq!(err.kind(), iceberg::ErrorKind::TableNotFound, "{err}");
    assert!(!f.tables.list_tables().await.unwrap().contains(&stream));
    // Again (a drop repeated after a crash): nothing left, no error.
    assert_eq!(f.tables.drop_table(&stream).await.unwrap(), 0);
    // The other table is whole.
    assert_eq!(offsets(&f.tables, &sibling).await, rows(0, 0..5));

    // A drop that died after deleting the files but before the catalog row: finished later.
    f.tables.append(&stream, vec![range(5, 0, 0, 5)]).await.unwrap();
    for file in files_under(&dir) {
        std::fs::remove_file(file).unwrap();
    }
    assert_eq!(f.tables.drop_table(&stream).await.unwrap(), 0);
    assert!(!f.tables.list_tables().await.unwrap().contains(&stream));
}

async fn bad_settings_name_the_key(db: Db) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> =
        Arc::new(LocalFsStore::new(dir.path(), ObjectRoot::parse("compacted").unwrap()).unwrap());
    let connect = |config: TablesConfig| {
        let store = store.clone();
        async move {
            Tables::connect(&config, store, "file:///x/compacted", tokens()).await.unwrap_err().to_string()
        }
    };
    let unknown = TablesConfig {
        catalog: "glue".into(),
        uri: Some("sqlite:///tmp/x.db".into()),
        ..TablesConfig::default()
    };
    let err = connect(unknown).await;
    assert!(err.contains("tables.catalog") && err.contains("glue"), "{err}");
    let unreachable = match db {
        // A directory that does not exist: SQLite cannot create the file.
        Db::Sqlite => format!("sqlite://{}/missing/dir/catalog.db", dir.path().display()),
        // The server's port, but a database that does not exist; and a closed port.
        Db::Postgres => {
            let url = postgres_url();
            let (base, _) = url.rsplit_once('/').unwrap();
            format!("{base}/no_such_database")
        }
    };
    let err = connect(TablesConfig { uri: Some(unreachable), ..TablesConfig::default() }).await;
    assert!(err.contains("tables.uri"), "{err}");
    if let Db::Postgres = db {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let uri = format!("postgres://lakestream:secret@127.0.0.1:{closed}/postgres");
        let config = TablesConfig { uri: Some(uri), ..TablesConfig::default() };
        let err = tokio::time::timeout(std::time::Duration::from_secs(60), connect(config)).await.unwrap();
        assert!(err.contains("tables.uri") && !err.contains("secret"), "{err}");
    }
}

macro_rules! on_both {
    ($($name:ident),*) => {
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread")] async fn $name() { super::$name(super::Db::Sqlite).await })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread")] async fn $name() { super::$name(super::Db::Postgres).await })*
        }
    };
}

on_both!(
    commit_and_recommit,
    crash_between_write_and_commit,
    concurrent_committers_keep_each_others_watermarks,
    kafka_records_become_rows,
    bad_settings_name_the_key,
    trims_remove_trimmed_files_from_the_table,
    expiry_deletes_unreferenced_files_and_keeps_referenced_ones,
    orphans_are_deleted_after_their_grace_period,
    a_crash_between_trim_steps_is_repaired,
    dropping_a_table_deletes_it_and_its_files
);
