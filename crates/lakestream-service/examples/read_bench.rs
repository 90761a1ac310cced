//! Fetch throughput, cold (empty caches) and cached, with raw GETs of the same WAL objects
//! measured in the same run as the baseline.
//!
//! ```text
//! cargo run --release -p lakestream-service --features testkit --example read_bench -- \
//!     [--store local|s3] [--logs 8] [--entry-bytes 65536] [--mib 256]
//! ```
//! `--store s3` uses the LAKESTREAM_TEST_S3_* variables. Metadata is the embedded store.
#![allow(clippy::disallowed_methods)] // a benchmark reads the real clock and makes real UUIDs

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt as _;
use lakestream_format::LogRef;
use lakestream_objstore::ObjectPrefix;
use lakestream_objstore_s3::testkit::server_config_under;
use lakestream_reader::{Reader, ReaderConfig, ReaderDeps, WalReadMode};
use lakestream_service::ServiceConfig;
use lakestream_service::config::{MetadataConfig, ObjectStoreConfig};
use lakestream_service::testkit::Stack;

fn arg(name: &str, default: &str) -> String {
    let argv: Vec<String> = std::env::args().collect();
    argv.iter()
        .position(|a| a == name)
        .and_then(|i| argv.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

async fn read_everything(reader: &Reader, logs: &[LogRef]) -> (u64, Duration) {
    let started = Instant::now();
    let mut bytes = 0u64;
    for log in logs {
        let mut next = 0;
        loop {
            let batch = reader.read(log, next, 8 << 20, Duration::ZERO).await.expect("read");
            if batch.entries.is_empty() {
                break;
            }
            bytes += batch.entries.iter().map(|e| e.payload.len() as u64).sum::<u64>();
            next = batch.next_offset;
        }
    }
    (bytes, started.elapsed())
}

#[tokio::main]
async fn main() {
    let store = arg("--store", "local");
    let logs_n: u64 = arg("--logs", "8").parse().expect("--logs");
    let entry_bytes: usize = arg("--entry-bytes", "65536").parse().expect("--entry-bytes");
    let mib: usize = arg("--mib", "256").parse().expect("--mib");
    let dir = tempfile::tempdir().expect("temp dir");
    let run = uuid::Uuid::new_v4().to_string();
    let mut config = ServiceConfig::dev(dir.path());
    config.metadata = MetadataConfig::Embedded { path: dir.path().join("metadata.redb") };
    config.roles.compactor = false;
    config.writer.flush_window = Duration::from_millis(20);
    if store == "s3" {
        config.storage.wal = ObjectStoreConfig::S3(Box::new(server_config_under(format!("bench-{run}/wal"))));
        config.storage.compacted =
            ObjectStoreConfig::S3(Box::new(server_config_under(format!("bench-{run}/compacted"))));
    }
    let stack = Stack::open(&config).await.expect("stack");
    let stream = stack
        .catalog
        .create_stream("default", "bench", logs_n as u32, Default::default())
        .await
        .expect("stream");
    let logs: Vec<LogRef> = (0..logs_n as usize).map(|p| stream.log_ref(p).unwrap()).collect();
    let w = stack.writer.clone().unwrap();
    let payload = Bytes::from(vec![0x42u8; entry_bytes]);
    let entries = (mib << 20) / entry_bytes;
    let mut tasks = Vec::new();
    for i in 0..entries {
        let w = w.clone();
        let payload = payload.clone();
        let log = logs[i % logs.len()].log_id;
        tasks.push(tokio::spawn(async move { w.append(log, payload, 1).await.expect("append") }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    stack.close().await;

    // Baseline: GET every WAL object once, sequentially, as the reader does.
    let listed: Vec<_> = stack.wal.list(&ObjectPrefix::new("").unwrap(), None).collect().await;
    let paths: Vec<_> = listed.into_iter().map(|m| m.expect("list").path).collect();
    let started = Instant::now();
    let mut raw_bytes = 0u64;
    for p in &paths {
        raw_bytes += stack.wal.get(p).await.expect("get").len() as u64;
    }
    let raw_mbs = raw_bytes as f64 / started.elapsed().as_secs_f64() / 1e6;

    let deps =
        ReaderDeps { meta: stack.meta.clone(), wal: stack.wal.clone(), compacted: stack.compacted.clone() };
    let ranged =
        Reader::new(ReaderConfig { wal_read: WalReadMode::Ranged, ..ReaderConfig::default() }, deps.clone())
            .unwrap();
    let (ranged_bytes, ranged_time) = read_everything(&ranged, &logs).await;
    let reader =
        Reader::new(ReaderConfig { object_cache_bytes: 2 << 30, ..ReaderConfig::default() }, deps).unwrap();
    let (cold_bytes, cold) = read_everything(&reader, &logs).await;
    let (cached_bytes, cached) = read_everything(&reader, &logs).await;
    let mbs = |b: u64, d: Duration| b as f64 / d.as_secs_f64() / 1e6;
    let (cold_mbs, cached_mbs, ranged_mbs) =
        (mbs(cold_bytes, cold), mbs(cached_bytes, cached), mbs(ranged_bytes, ranged_time));
    println!(
        "| store | data | objects | raw GET MB/s | cold whole-object fetch MB/s | cold / raw GET | cold ranged fetch MB/s | ranged / whole | cached fetch MB/s |"
    );
    println!(
        "| {store} | {} MiB in {entry_bytes} B entries, {logs_n} logs | {} | {raw_mbs:.0} | {cold_mbs:.0} | {:.2} | {ranged_mbs:.0} | {:.2} | {cached_mbs:.0} |",
        cold_bytes >> 20,
        paths.len(),
        cold_mbs / raw_mbs,
        ranged_mbs / cold_mbs
    );
}
