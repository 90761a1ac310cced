//! Compaction throughput per core, as a ratio to copying the same WAL bytes raw, measured in
//! the same run on the same store.
//!
//! ```text
//! cargo run --release -p lakestream-compactor --example compaction_bench -- [MiB] [entry bytes] [repetitions]
//! ```
//!
//! For each backend (the local filesystem; and the S3 server when `LAKESTREAM_TEST_S3_*` is
//! set), on a current-thread runtime (one core):
//! 1. the writer appends `MiB` of entries to 4 logs (not timed);
//! 2. **raw**: every WAL object is read whole and written back under a new name (timed);
//! 3. **compaction**: `compact_once` over the 4 logs — read through the reader, Parquet and
//!    companion encoding, writes, C3–C5 (timed).
//!
//! `BENCH_CODEC=uncompressed|snappy|lz4|zstd` picks the Parquet codec (default snappy).
//!
//! Each repetition writes a fresh data set and times both on it. Prints MB/s of entry payload
//! for both, their ratio per repetition, and the median ratio (goal ≥ 0.7). No timing is
//! asserted: on a shared machine absolute figures vary, the ratio much less.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use lakestream_compactor::{Compactor, CompactorConfig, CompactorDeps, ParquetCodec, no_progress};
use lakestream_format::compacted::{CompactedFileWriter, KNOWN_BINDINGS, WriteOptions};
use lakestream_format::{Clock, LogId, LogRef, ManualClock, SystemClock};
use lakestream_meta::lease::SeededTokens;
use lakestream_meta::{InMemoryStore, MetaStore};
use lakestream_objstore::{LocalFsStore, ObjectPath, ObjectPrefix, ObjectRoot, ObjectStore};
use lakestream_objstore_s3::testkit::server_store;
use lakestream_reader::{Reader, ReaderConfig, ReaderDeps};
use lakestream_writer::{Writer, WriterConfig, WriterDeps};

const LOGS: u64 = 4;

struct Roots {
    name: &'static str,
    wal: Arc<dyn ObjectStore>,
    compacted: Arc<dyn ObjectStore>,
    copies: Arc<dyn ObjectStore>,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().map_or(64, |a| a.parse().expect("MiB must be a number"));
    let entry_bytes: usize = args.next().map_or(4096, |a| a.parse().expect("entry bytes must be a number"));
    let repetitions: usize = args.next().map_or(3, |a| a.parse().expect("repetitions must be a number"));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        if std::env::var("LAKESTREAM_TEST_S3_ENDPOINT").is_err() {
            println!("(LAKESTREAM_TEST_S3_* unset: the S3 figures are skipped)");
        }
        for backend in ["local-fs", "s3"] {
            let mut ratios = Vec::new();
            for _ in 0..repetitions {
                let dir = tempfile::tempdir().expect("temp dir");
                let Some(roots) = roots(backend, dir.path()) else { break };
                ratios.push(bench(&roots, mib, entry_bytes).await);
            }
            if !ratios.is_empty() {
                ratios.sort_by(f64::total_cmp);
                println!(
                    "{backend:9} median ratio {:.2} over {} runs\n",
                    ratios[ratios.len() / 2],
                    ratios.len()
                );
            }
        }
    });
}

fn roots(backend: &str, dir: &std::path::Path) -> Option<Roots> {
    if backend == "s3" {
        return s3_roots();
    }
    let local = |root: &str| -> Arc<dyn ObjectStore> {
        Arc::new(LocalFsStore::new(dir, ObjectRoot::parse(root).expect("root")).expect("store"))
    };
    Some(Roots {
        name: "local-fs",
        wal: local("bench/wal"),
        compacted: local("bench/compacted"),
        copies: local("bench/copies"),
    })
}

fn s3_roots() -> Option<Roots> {
    // Optional here: without the S3 server the S3 figures are skipped.
    std::env::var_os("LAKESTREAM_TEST_S3_ENDPOINT")?;
    let run = format!("bench-{}", SystemClock.now_ms());
    let store = |prefix: &str| -> Arc<dyn ObjectStore> { Arc::new(server_store(format!("{run}/{prefix}"))) };
    Some(Roots { name: "s3", wal: store("wal"), compacted: store("compacted"), copies: store("copies") })
}

async fn bench(roots: &Roots, mib: usize, entry_bytes: usize) -> f64 {
    let clock = ManualClock::new(SystemClock.now_ms());
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let meta: Arc<dyn MetaStore> = Arc::new(InMemoryStore::with_config(1, shared.clone()).expect("meta"));
    let writer = Writer::start(
        WriterConfig { flush_window: Duration::from_millis(5), ..WriterConfig::default() },
        WriterDeps {
            meta: meta.clone(),
            objects: roots.wal.clone(),
            clock: shared.clone(),
            tokens: Arc::new(SeededTokens::new(1)),
        },
    )
    .expect("writer");
    let entries = (mib << 20) / entry_bytes;
    // Incompressible payloads, so that Parquet's codec cannot make the writes cheap.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut random_payload = || {
        let bytes: Vec<u8> = (0..entry_bytes)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        Bytes::from(bytes)
    };
    for chunk in (0..entries).collect::<Vec<_>>().chunks(512) {
        let payloads: Vec<Bytes> = chunk.iter().map(|_| random_payload()).collect();
        let appends =
            chunk.iter().zip(payloads).map(|(i, payload)| writer.append(LogId(*i as u64 % LOGS), payload, 1));
        for r in futures::future::join_all(appends).await {
            r.expect("append");
        }
    }
    writer.close().await;
    let payload_bytes = (entries * entry_bytes) as f64;

    // Raw: read every WAL object and write it back under another name.
    let names: Vec<ObjectPath> =
        roots.wal.list(&ObjectPrefix::all(), None).map(|m| m.expect("list").path).collect().await;
    let started = Instant::now();
    let mut raw_bytes = 0u64;
    for (i, path) in names.iter().enumerate() {
        let bytes = roots.wal.get(path).await.expect("get");
        raw_bytes += bytes.len() as u64;
        roots.copies.put(&ObjectPath::new(format!("copy-{i}")).expect("path"), bytes).await.expect("put");
    }
    let raw = started.elapsed();

    // Breakdown (informative): reading the entries through a cold reader, and encoding them.
    let reader = Reader::new(
        ReaderConfig::default(),
        ReaderDeps { meta: meta.clone(), wal: roots.wal.clone(), compacted: roots.compacted.clone() },
    )
    .expect("reader");
    let started = Instant::now();
    let mut entries_read = Vec::new();
    for l in 0..LOGS {
        let log = LogRef { log_id: LogId(l), namespace: "bench".into(), stream: format!("s{l}") };
        let mut next = 0;
        loop {
            let batch = reader.read(&log, next, 8 << 20, Duration::ZERO).await.expect("read");
            if batch.entries.is_empty() {
                break;
            }
            next = batch.next_offset;
            entries_read.extend(batch.entries);
        }
    }
    let read = started.elapsed();
    let started = Instant::now();
    let mut encoded = 0usize;
    for chunk in entries_read.chunks(entries_read.len().div_ceil(LOGS as usize).max(1)) {
        let mut writer =
            CompactedFileWriter::new(KNOWN_BINDINGS[0], "ls-0-bench.parquet", WriteOptions::default())
                .expect("writer");
        for e in chunk {
            writer.push(e.payload.clone()).expect("push");
        }
        encoded += writer.finish().expect("finish").len();
    }
    let encode = started.elapsed();
    drop(entries_read);

    // Compaction of the same bytes.
    clock.advance_ms(181_000);
    let codec = match std::env::var("BENCH_CODEC").as_deref() {
        Ok("uncompressed") => ParquetCodec::Uncompressed,
        Ok("zstd") => ParquetCodec::Zstd,
        Ok("lz4") => ParquetCodec::Lz4Raw,
        _ => ParquetCodec::Snappy,
    };
    let compactor = Compactor::new(
        CompactorConfig { codec, ..CompactorConfig::default() },
        CompactorDeps {
            meta,
            wal: roots.wal.clone(),
            compacted: roots.compacted.clone(),
            clock: shared,
            tokens: Arc::new(SeededTokens::new(2)),
        },
    )
    .expect("compactor");
    let logs: Vec<LogRef> = (0..LOGS)
        .map(|l| LogRef { log_id: LogId(l), namespace: "bench".into(), stream: format!("s{l}") })
        .collect();
    let started = Instant::now();
    let report = compactor.compact_once(&logs, &no_progress).await;
    let compaction = started.elapsed();
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(report.payload_bytes as f64, payload_bytes);

    let mbps = |d: Duration| payload_bytes / 1e6 / d.as_secs_f64();
    println!(
        "{:9} {mib} MiB in {entries} entries of {entry_bytes} B, {} WAL objects ({raw_bytes} B), {} ranges, {} B written",
        roots.name,
        names.len(),
        report.ranges.len(),
        report.bytes_written
    );
    println!(
        "{:9} raw copy {:8.1} MB/s ({:?}) | compaction {:8.1} MB/s ({:?}) | ratio {:.2}",
        roots.name,
        mbps(raw),
        raw,
        mbps(compaction),
        compaction,
        raw.as_secs_f64() / compaction.as_secs_f64()
    );
    println!(
        "{:9} breakdown: read through the reader {:8.1} MB/s | Parquet encoding (snappy) {:8.1} MB/s ({encoded} B)",
        roots.name,
        mbps(read),
        mbps(encode)
    );
    raw.as_secs_f64() / compaction.as_secs_f64()
}
