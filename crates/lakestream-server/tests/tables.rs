//! Streams as Iceberg tables on a real (embedded) stack with the SQLite catalog of
//! `lakestream dev`: compacted ranges reach the stream's table after compaction; a stream
//! without `table = "iceberg"` gets none; a failing commit is counted in the metrics and
//! retried while compaction goes on; bad settings stop the start naming the key; a trim
//! removes the trimmed rows from the table, expiry deletes the files no snapshot needs, and
//! dropping the stream drops its table.

use std::path::PathBuf;
use std::time::Duration;

use http::StatusCode;
use lakestream_iceberg::StreamRef;
use lakestream_service::Stack;
use serde_json::{Value, json};
use support::TestConfig;

mod support;

use support::{Running, call};

async fn start(data: &mut Option<PathBuf>) -> Running {
    support::start_with(|config| {
        config.service.compactor_schedule.interval = Duration::from_millis(100);
        config.service.compactor.max_range_age = Duration::from_millis(100);
        config.service.tables.interval = Duration::from_millis(200);
        if let lakestream_service::config::ObjectStoreConfig::Local { dir, .. } =
            &config.service.storage.compacted
        {
            *data = Some(dir.join("compacted"));
        }
    })
    .await
}

async fn create(base: &str, stream: &str, properties: Value) {
    let (status, v) = call(
        base,
        "POST",
        "/v1/namespaces/default/streams",
        json!({"name": stream, "partitions": 2, "properties": properties}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
}

/// `n` entries of 2 records each to each of the stream's two partitions.
async fn produce(base: &str, stream: &str, n: usize) {
    use base64::Engine as _;
    for partition in 0..2 {
        for i in 0..n {
            let payload = base64::engine::general_purpose::STANDARD.encode(format!("p{partition}-{i}"));
            let path = format!("/v1/namespaces/default/streams/{stream}/partitions/{partition}/entries");
            let body = json!({"entries": [{"payload_base64": payload, "record_count": 2}]});
            let (status, v) = call(base, "POST", &path, body).await;
            assert_eq!(status, StatusCode::OK, "{v}");
        }
    }
}

async fn metric(base: &str, name: &str) -> u64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    stream
        .write_all(format!("GET /metrics HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    support::series_value(&raw, name).map_or(0, |v| v.parse().unwrap())
}

/// Waits (bounded) until `check` holds.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "{what} did not happen within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The table's watermarks, one per partition in order (0 when absent).
async fn watermarks(s: &Running, stream: &str) -> Vec<u64> {
    let role = s.stack.tables.as_ref().expect("the dev stack has tables");
    let marks = role.tables.watermarks(&StreamRef::new("default", stream)).await.unwrap();
    let logs = s.stack.catalog.get_stream("default", stream).await.unwrap().logs;
    logs.iter().map(|l| marks.get(&l.0).copied().unwrap_or(0)).collect()
}

/// The current snapshot's `total-records`.
async fn table_rows(s: &Running, stream: &str) -> u64 {
    let role = s.stack.tables.as_ref().unwrap();
    let table = role.tables.catalog().load_table(&StreamRef::new("default", stream).ident()).await.unwrap();
    table
        .metadata()
        .current_snapshot()
        .and_then(|snap| snap.summary().additional_properties.get("total-records").cloned())
        .map_or(0, |v| v.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn compacted_ranges_reach_the_table_of_a_stream_that_asks_for_one() {
    let mut data = None;
    let s = start(&mut data).await;
    create(&s.base, "orders", json!({"table": "iceberg"})).await;
    create(&s.base, "plain", json!({})).await;
    produce(&s.base, "orders", 5).await;
    produce(&s.base, "plain", 3).await;
    // Every entry (2 offsets each) reaches the table once its range is compacted.
    eventually("the table holds every entry", async || watermarks(&s, "orders").await == [10, 10]).await;
    assert_eq!(table_rows(&s, "orders").await, 10);
    assert!(metric(&s.base, "lakestream_table_commits_total").await >= 1);
    assert_eq!(metric(&s.base, "lakestream_table_rows_total").await, 10);
    // More entries continue the table, nothing twice.
    produce(&s.base, "orders", 2).await;
    eventually("the table holds the new entries", async || watermarks(&s, "orders").await == [14, 14]).await;
    assert_eq!(table_rows(&s, "orders").await, 14);
    // The stream without the property has no table.
    let role = s.stack.tables.as_ref().unwrap();
    assert!(!role.tables.catalog().table_exists(&StreamRef::new("default", "plain").ident()).await.unwrap());
    // Table files live under the compacted root's `_iceberg/`.
    assert!(data.unwrap().join("_iceberg/default/orders/metadata").is_dir());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_commit_is_counted_and_retried_while_compaction_goes_on() {
    let mut data = None;
    let s = start(&mut data).await;
    let root = data.unwrap();
    // A file where the tables' directory must be: every table write fails.
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("_iceberg"), b"in the way").unwrap();
    create(&s.base, "orders", json!({"table": "iceberg"})).await;
    produce(&s.base, "orders", 4).await;
    eventually("a failed commit is counted", async || {
        metric(&s.base, "lakestream_table_commit_failures_total").await >= 2
    })
    .await;
    // Compaction goes on: the ranges are compacted (C3–C5 done) with the table stuck.
    eventually("both partitions are compacted", async || {
        metric(&s.base, "lakestream_compaction_ranges_total").await >= 2
    })
    .await;
    assert_eq!(metric(&s.base, "lakestream_compaction_failures_total").await, 0);
    // Once the way is clear, the next pass commits everything, once.
    std::fs::remove_file(root.join("_iceberg")).unwrap();
    eventually("the table catches up", async || watermarks(&s, "orders").await == [8, 8]).await;
    assert_eq!(table_rows(&s, "orders").await, 8);
    eventually("the lag gauge returns to 0", async || {
        metric(&s.base, "lakestream_table_lag_offsets").await == 0
    })
    .await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn trims_expiry_and_drops_reach_the_table() {
    let mut data = None;
    let s = support::start_with(|config| {
        config.service.compactor_schedule.interval = Duration::from_millis(100);
        config.service.compactor.max_range_age = Duration::from_millis(100);
        config.service.tables.interval = Duration::from_millis(200);
        config.service.tables.maintenance_interval = Duration::from_millis(200);
        config.service.tables.snapshot_max_age = Duration::ZERO;
        config.service.tables.min_snapshots = 1;
        config.service.tables.orphan_grace = Duration::ZERO;
        if let lakestream_service::config::ObjectStoreConfig::Local { dir, .. } =
            &config.service.storage.compacted
        {
            data = Some(dir.join("compacted"));
        }
    })
    .await;
    let table_dir = data.unwrap().join("_iceberg/default/trimmed");
    create(&s.base, "trimmed", json!({"table": "iceberg"})).await;
    produce(&s.base, "trimmed", 5).await;
    eventually("the table holds every entry", async || watermarks(&s, "trimmed").await == [10, 10]).await;
    assert_eq!(table_rows(&s, "trimmed").await, 10);

    // More entries, in ranges of their own: a soft trim stops at the log's last index
    // record, so these keep the first ones trimmable.
    produce(&s.base, "trimmed", 2).await;
    eventually("the table holds the new entries", async || watermarks(&s, "trimmed").await == [14, 14]).await;

    // A client trims partition 0 through the first entries: their rows leave the table.
    let (status, v) = call(
        &s.base,
        "POST",
        "/v1/namespaces/default/streams/trimmed/partitions/0/trim",
        json!({"through": 9}),
    )
    .await;
    assert_eq!((status, v["trim_marker"].as_u64()), (StatusCode::OK, Some(10)), "{v}");
    eventually("the trimmed rows leave the table", async || table_rows(&s, "trimmed").await == 9).await;
    assert!(metric(&s.base, "lakestream_table_trimmed_files_total").await >= 1);
    let role = s.stack.tables.as_ref().unwrap();
    let stream = StreamRef::new("default", "trimmed");
    let table = role.tables.catalog().load_table(&stream.ident()).await.unwrap();
    let scan = table.scan().select_all().build().unwrap();
    let live: Vec<String> = {
        use futures::TryStreamExt;
        scan.plan_files().await.unwrap().map_ok(|t| t.data_file_path).try_collect().await.unwrap()
    };
    // Expiry (no age kept here) deletes the trimmed files; the live ones stay.
    eventually("the trimmed files are deleted", async || {
        let data_files =
            walk(&table_dir).into_iter().filter(|p| p.extension().is_some_and(|e| e == "parquet"));
        data_files.count() == live.len()
    })
    .await;
    assert!(metric(&s.base, "lakestream_table_snapshots_expired_total").await >= 1);
    assert!(metric(&s.base, "lakestream_table_files_deleted_total").await >= 1);
    for file in &live {
        assert!(std::path::Path::new(file.strip_prefix("file://").unwrap()).exists(), "{file}");
    }
    assert_eq!(metric(&s.base, "lakestream_table_maintenance_failures_total").await, 0);

    // Dropping the stream drops its table and its files.
    let (status, v) = call(&s.base, "DELETE", "/v1/namespaces/default/streams/trimmed", Value::Null).await;
    assert!(status.is_success(), "{status} {v}");
    eventually("the table is dropped", async || {
        !role.tables.catalog().table_exists(&stream.ident()).await.unwrap()
    })
    .await;
    assert!(walk(&table_dir).is_empty(), "{:?}", walk(&table_dir));
    assert_eq!(metric(&s.base, "lakestream_table_dropped_total").await, 1);
    s.stop().await;
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
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

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_table_property_is_refused_naming_it() {
    let mut data = None;
    let s = start(&mut data).await;
    let (status, v) = call(
        &s.base,
        "POST",
        "/v1/namespaces/default/streams",
        json!({"name": "x", "properties": {"table": "delta"}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert!(v.to_string().contains("properties.table"), "{v}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_table_settings_stop_the_start_naming_the_key() {
    // A fresh directory per start: a failed start may hold the metadata file a moment longer.
    let open = |f: fn(&mut TestConfig, &std::path::Path)| async move {
        let dir = tempfile::tempdir().unwrap();
        let mut config = TestConfig::dev(dir.path());
        f(&mut config, dir.path());
        Stack::open(&config.service).await.map(|_| ()).unwrap_err().to_string()
    };
    let err = open(|c, _| c.service.tables.catalog = "hive".into()).await;
    assert!(err.contains("tables.catalog") && err.contains("hive"), "{err}");
    let err =
        open(|c, d| c.service.tables.uri = Some(format!("sqlite://{}/no/such/dir/catalog.db", d.display())))
            .await;
    assert!(err.contains("tables.uri"), "{err}");
    let err = open(|c, _| {
        c.service.tables.uri = None;
        c.service.tables.table = "iceberg".into();
    })
    .await;
    assert!(err.contains("tables.uri"), "{err}");
    let err = open(|c, _| c.service.tables.table = "delta".into()).await;
    assert!(err.contains("tables.table"), "{err}");
    // A process without the compactor role does not connect the catalog.
    let dir = tempfile::tempdir().unwrap();
    let mut config = TestConfig::dev(dir.path());
    config.service.roles.compactor = false;
    config.service.tables.uri = Some(format!("sqlite://{}/no/such/dir/catalog.db", dir.path().display()));
    assert!(Stack::open(&config.service).await.unwrap().tables.is_none());
}
