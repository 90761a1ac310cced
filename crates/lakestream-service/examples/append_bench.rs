//! Append throughput and latency, with the raw object-store PUT rate of the same object sizes
//! measured in the same run as the baseline.
//!
//! ```text
//! cargo run --release -p lakestream-service --features testkit --example append_bench -- \
//!     [--store local|s3] [--logs 16] [--entry-bytes 65536] [--window-ms 10] \
//!     [--producers 512] [--seconds 5]
//! ```
//! `--store s3` uses the LAKESTREAM_TEST_S3_* variables (see scripts/servers.sh). Metadata is
//! the embedded store. Prints a Markdown row and a JSON line.
#![allow(clippy::disallowed_methods)] // a benchmark reads the real clock and makes real UUIDs

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_free::join_all;
use lakestream_format::LogId;
use lakestream_objstore::{ObjectPath, ObjectPrefix, ObjectStore};
use lakestream_objstore_s3::testkit::server_config_under;
use lakestream_service::ServiceConfig;
use lakestream_service::config::{MetadataConfig, ObjectStoreConfig};
use lakestream_service::testkit::Stack;

mod futures_free {
    /// Awaits every handle, in order.
    pub async fn join_all<T>(handles: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
        let mut out = Vec::with_capacity(handles.len());
        for h in handles {
            out.push(h.await.expect("benchmark task panicked"));
        }
        out
    }
}

struct Args {
    store: String,
    logs: u64,
    entry_bytes: usize,
    window_ms: u64,
    producers: usize,
    seconds: u64,
}

fn parse_args() -> Args {
    let mut a = Args {
        store: "local".into(),
        logs: 16,
        entry_bytes: 65536,
        window_ms: 10,
        producers: 512,
        seconds: 5,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let k = pair[0].as_str();
        let v = pair.get(1).map(String::as_str).unwrap_or_else(|| panic!("{k} needs a value"));
        let num = || v.parse::<u64>().unwrap_or_else(|_| panic!("{k}: {v:?} is not a number"));
        match k {
            "--store" => a.store = v.to_string(),
            "--logs" => a.logs = num(),
            "--entry-bytes" => a.entry_bytes = num() as usize,
            "--window-ms" => a.window_ms = num(),
            "--producers" => a.producers = num() as usize,
            "--seconds" => a.seconds = num(),
            _ => panic!("unknown argument {k}"),
        }
    }
    a
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let args = parse_args();
    let dir = tempfile::tempdir().expect("temp dir");
    let run = uuid::Uuid::new_v4().to_string();
    let mut config = ServiceConfig::dev(dir.path());
    config.metadata = MetadataConfig::Embedded { path: dir.path().join("metadata.redb") };
    if args.store == "s3" {
        config.storage.wal = ObjectStoreConfig::S3(Box::new(server_config_under(format!("bench-{run}/wal"))));
        config.storage.compacted =
            ObjectStoreConfig::S3(Box::new(server_config_under(format!("bench-{run}/compacted"))));
    }
    config.writer.flush_window = Duration::from_millis(args.window_ms.max(1));
    config.writer.max_in_flight_bytes = config.writer.max_in_flight_bytes.max(args.entry_bytes * 2);
    let stack = Stack::open(&config).await.expect("stack");
    let writer = stack.writer.clone().expect("writer role");

    // Take the leases first so that lease set-up is not part of the measurement.
    for l in 0..args.logs {
        writer.append(LogId(l), Bytes::from_static(b"warm-up"), 1).await.expect("warm-up append");
    }
    let payload = Bytes::from(vec![0x5au8; args.entry_bytes]);
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let started = Instant::now();
    let handles: Vec<_> = (0..args.producers)
        .map(|p| {
            let w = writer.clone();
            let payload = payload.clone();
            let log = LogId(p as u64 % args.logs);
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    w.append(log, payload.clone(), 1).await.expect("append");
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut latencies: Vec<Duration> = join_all(handles).await.into_iter().flatten().collect();
    let elapsed = started.elapsed();
    latencies.sort();
    let acked_bytes = latencies.len() as f64 * args.entry_bytes as f64;
    let acked_mbs = acked_bytes / elapsed.as_secs_f64() / 1e6;

    // The objects the writer wrote: their count and mean size.
    use futures::StreamExt as _;
    let listed: Vec<_> = stack.wal.list(&ObjectPrefix::new("").unwrap(), None).collect().await;
    let sizes: Vec<u64> = listed.into_iter().map(|m| m.expect("list").size).collect();
    let objects = sizes.len();
    let mean_object = (sizes.iter().sum::<u64>() as f64 / objects.max(1) as f64) as usize;
    stack.close().await;

    // Baseline: raw PUTs of the same object size, with the writer's upload concurrency.
    let raw_store: Arc<dyn ObjectStore> = stack.wal.clone();
    let body = Bytes::from(vec![0xa5u8; mean_object.max(1)]);
    let uploads = config.writer.upload_concurrency();
    let raw_deadline = Instant::now() + Duration::from_secs(args.seconds.max(2));
    let raw_started = Instant::now();
    let handles: Vec<_> = (0..uploads)
        .map(|u| {
            let store = raw_store.clone();
            let body = body.clone();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut i = 0u64;
                while Instant::now() < raw_deadline {
                    let path = ObjectPath::new(format!("raw-baseline/{u}/{i}")).unwrap();
                    let t = Instant::now();
                    store.put(&path, body.clone()).await.expect("raw put");
                    lat.push(t.elapsed());
                    i += 1;
                }
                lat
            })
        })
        .collect();
    let mut raw_lat: Vec<Duration> = join_all(handles).await.into_iter().flatten().collect();
    let raw_elapsed = raw_started.elapsed();
    raw_lat.sort();
    let raw_mbs = raw_lat.len() as f64 * body.len() as f64 / raw_elapsed.as_secs_f64() / 1e6;

    let gib = acked_bytes / (1u64 << 30) as f64;
    let puts_per_gib = objects as f64 / gib.max(f64::MIN_POSITIVE);
    let (p50, p99) = (percentile(&latencies, 0.50), percentile(&latencies, 0.99));
    let raw_p99 = percentile(&raw_lat, 0.99);
    println!(
        "| store | logs | entry | window | producers | acked MB/s | raw PUT MB/s ({} KiB objects) | ratio | ack p50 | ack p99 | raw PUT p99 | PUTs/GiB |",
        mean_object / 1024
    );
    println!(
        "| {} | {} | {} B | {} ms | {} | {:.1} | {:.1} | {:.2} | {:.1} ms | {:.1} ms | {:.1} ms | {:.0} |",
        args.store,
        args.logs,
        args.entry_bytes,
        args.window_ms,
        args.producers,
        acked_mbs,
        raw_mbs,
        acked_mbs / raw_mbs,
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        raw_p99.as_secs_f64() * 1e3,
        puts_per_gib
    );
    println!(
        "{}",
        serde_json::json!({
            "store": args.store, "logs": args.logs, "entry_bytes": args.entry_bytes, "window_ms": args.window_ms,
            "producers": args.producers, "acked_mb_s": acked_mbs, "raw_put_mb_s": raw_mbs, "ratio": acked_mbs / raw_mbs,
            "ack_p50_ms": p50.as_secs_f64() * 1e3, "ack_p99_ms": p99.as_secs_f64() * 1e3,
            "raw_put_p99_ms": raw_p99.as_secs_f64() * 1e3, "objects": objects, "mean_object_bytes": mean_object,
            "puts_per_gib": puts_per_gib,
        })
    );
}
