//! Per-entry cost of the read path: cached reads of small entries on one core, with a plain
//! copy of the same payload bytes measured in the same run as the baseline.
//!
//! ```text
//! cargo run --release -p lakestream-reader --example read_path_bench -- [MiB] [entry bytes] [repetitions]
//! ```
//!
//! A writer appends `MiB` of entries (default 64 MiB of 1 KiB entries) to 8 logs on in-memory
//! stores; a reader with a cache large enough for every object reads each log once to warm it
//! (not timed), then again `repetitions` times (timed). Prints the cached MB/s of payload, the
//! copy MB/s, and the median of the two.
#![allow(clippy::disallowed_methods)] // a benchmark reads the real clock

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use lakestream_format::{Clock, LogId, LogRef, ManualClock, SystemClock};
use lakestream_meta::lease::SeededTokens;
use lakestream_meta::{InMemoryStore, MetaStore};
use lakestream_objstore::ObjectStore;
use lakestream_reader::{Reader, ReaderConfig, ReaderDeps};
use lakestream_writer::{Writer, WriterConfig, WriterDeps};

const LOGS: u64 = 8;

fn log(l: u64) -> LogRef {
    LogRef { log_id: LogId(l), namespace: "bench".into(), stream: format!("s{l}") }
}

/// Reads every log from offset 0 to its end; returns the payload bytes read.
async fn read_all(reader: &Reader) -> u64 {
    let mut bytes = 0u64;
    for l in 0..LOGS {
        let log = log(l);
        let mut next = 0;
        loop {
            let batch = reader.read(&log, next, 8 << 20, Duration::ZERO).await.expect("read");
            if batch.entries.is_empty() {
                break;
            }
            bytes += batch.entries.iter().map(|e| e.payload.len() as u64).sum::<u64>();
            next = batch.next_offset;
        }
    }
    bytes
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().map_or(64, |a| a.parse().expect("MiB must be a number"));
    let entry_bytes: usize = args.next().map_or(1024, |a| a.parse().expect("entry bytes must be a number"));
    let repetitions: usize = args.next().map_or(5, |a| a.parse().expect("repetitions must be a number"));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(SystemClock.now_ms()));
        let meta: Arc<dyn MetaStore> = Arc::new(InMemoryStore::with_config(1, clock.clone()).expect("meta"));
        let objects = |_: &str| -> Arc<dyn ObjectStore> {
            Arc::new(lakestream_objstore::InMemoryStore::new(clock.clone()))
        };
        let (wal, compacted) = (objects("wal"), objects("compacted"));
        let writer = Writer::start(
            WriterConfig { flush_window: Duration::from_millis(5), ..WriterConfig::default() },
            WriterDeps {
                meta: meta.clone(),
                objects: wal.clone(),
                clock: clock.clone(),
                tokens: Arc::new(SeededTokens::new(1)),
            },
        )
        .expect("writer");
        let entries = (mib << 20) / entry_bytes;
        let payload = Bytes::from(vec![0x42u8; entry_bytes]);
        let all: Vec<usize> = (0..entries).collect();
        for chunk in all.chunks(4096) {
            let appends =
                chunk.iter().map(|i| writer.append(LogId(*i as u64 % LOGS), payload.clone(), 1));
            for r in futures::future::join_all(appends).await {
                r.expect("append");
            }
        }
        writer.close().await;

        let reader = Reader::new(
            ReaderConfig { object_cache_bytes: 4 << 30, ..ReaderConfig::default() },
            ReaderDeps { meta, wal, compacted },
        )
        .expect("reader");
        let total = read_all(&reader).await; // warms the caches
        assert_eq!(total as usize, entries * entry_bytes, "the reader returned every payload");
        let payloads: Vec<Bytes> = (0..entries).map(|_| Bytes::from(vec![0x42u8; entry_bytes])).collect();

        let (mut cached, mut copy) = (Vec::new(), Vec::new());
        for _ in 0..repetitions {
            let started = Instant::now();
            let bytes = read_all(&reader).await;
            cached.push(bytes as f64 / started.elapsed().as_secs_f64() / 1e6);
            let started = Instant::now();
            let mut out = Vec::with_capacity(entries * entry_bytes);
            for p in &payloads {
                out.extend_from_slice(p);
            }
            std::hint::black_box(&out);
            copy.push(out.len() as f64 / started.elapsed().as_secs_f64() / 1e6);
        }
        let (cached, copy) = (median(cached), median(copy));
        println!(
            "{mib} MiB in {entries} entries of {entry_bytes} B, {LOGS} logs: cached read {cached:.0} MB/s | copy {copy:.0} MB/s | ratio {:.3}",
            cached / copy
        );
    });
}
