//! The commit protocol against the real SQL catalog, on SQLite and on a real PostgreSQL
//! server (`LAKESTREAM_TEST_POSTGRES_URL`, which `scripts/test` sets; the PostgreSQL tests
//! fail without it). The tables are read back through iceberg-rust's own scan, so the data
//! files' field ids, partition values and the manifests are checked by an Iceberg reader.
#![allow(clippy::disallowed_methods)] // tests take fresh UUIDs for file and catalog names

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array_58::cast::AsArray;
use arrow_array_58::types::{Int32Type, Int64Type, TimestampMicrosecondType};
use arrow_array_58::{Array, RecordBatch};
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
fn bytes(array: &arrow_array_58::ArrayRef, i: usize) -> Option<Vec<u8>> {
    use arrow_schema_58::DataType;
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
    bad_settings_name_the_key
);
