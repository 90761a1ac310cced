//! One compaction pass on the embedded stores: metadata in redb (`DIR/metadata.redb`), objects
//! on the local filesystem (`DIR/objects/wal/…`, `DIR/objects/compacted/…`), the layout
//! `lakestream dev --data-dir DIR` uses.
//!
//! ```text
//! cargo run -p lakestream-compactor --example compact -- /tmp/lakestream-data [LOG_ID]
//! ```
//!
//! The example appends twenty entries to the log (1 by default) with the writer, runs
//! `compact_once` with ranges that close at once (an age limit of zero), lists the Parquet
//! files and companions written, and reads the log back through the reader, now from Parquet.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use lakestream_compactor::{Compactor, CompactorConfig, CompactorDeps, no_progress};
use lakestream_format::{LogId, LogRef, SystemClock};
use lakestream_meta::lease::RandomTokens;
use lakestream_meta::{EmbeddedStore, MetaStore};
use lakestream_objstore::{LocalFsStore, ObjectPrefix, ObjectRoot, ObjectStore};
use lakestream_reader::{Reader, ReaderConfig, ReaderDeps};
use lakestream_writer::{Writer, WriterConfig, WriterDeps};

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: compact DIR [LOG_ID]");
        return ExitCode::from(2);
    };
    let log_id = match args.next().map(|id| id.to_string_lossy().parse::<u64>()) {
        None => LogId(1),
        Some(Ok(id)) => LogId(id),
        Some(Err(e)) => {
            eprintln!("compact: LOG_ID is not a number: {e}");
            return ExitCode::from(2);
        }
    };
    match run(std::path::Path::new(&dir), log_id).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("compact: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(dir: &std::path::Path, log_id: LogId) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    let meta: Arc<dyn MetaStore> = Arc::new(EmbeddedStore::open(dir.join("metadata.redb")).await?);
    let wal: Arc<dyn ObjectStore> =
        Arc::new(LocalFsStore::new(dir.join("objects"), ObjectRoot::parse("wal")?)?);
    let compacted: Arc<dyn ObjectStore> =
        Arc::new(LocalFsStore::new(dir.join("objects"), ObjectRoot::parse("compacted")?)?);

    let writer = Writer::start(
        WriterConfig::default(),
        WriterDeps {
            meta: meta.clone(),
            objects: wal.clone(),
            clock: Arc::new(SystemClock),
            tokens: Arc::new(RandomTokens),
        },
    )?;
    for i in 0..20 {
        writer.append(log_id, Bytes::from(format!("entry {i}")), 1).await?;
    }
    writer.close().await;

    // The catalog would name the stream: compacted files go under `{namespace}/{stream}/`.
    let log = LogRef { log_id, namespace: "default".into(), stream: "example".into() };
    let config = CompactorConfig { max_range_age: Duration::ZERO, ..CompactorConfig::default() };
    let deps = CompactorDeps {
        meta: meta.clone(),
        wal: wal.clone(),
        compacted: compacted.clone(),
        clock: Arc::new(SystemClock),
        tokens: Arc::new(RandomTokens),
    };
    let compactor = Compactor::new(config, deps)?;
    let report = compactor.compact_once(std::slice::from_ref(&log), &no_progress).await;
    if let Some((log_id, error)) = report.failed.first() {
        return Err(format!("compacting log {log_id} failed: {error}").into());
    }
    for range in &report.ranges {
        println!(
            "compacted log {} offsets {}..{}: {} rows, {} file(s), {} bytes written",
            range.log_id, range.start, range.end, range.rows, range.files, range.bytes_written
        );
    }
    let files: Vec<_> = compacted.list(&ObjectPrefix::all(), None).try_collect().await?;
    for file in &files {
        println!("  {} ({} bytes)", file.path, file.size);
    }

    let reader = Reader::new(ReaderConfig::default(), ReaderDeps { meta, wal, compacted })?;
    let (first, next) = (reader.first_offset(log_id).await?, reader.next_offset(log_id).await?);
    let batch = reader.read(&log, first, 1 << 20, Duration::ZERO).await?;
    println!(
        "read {} entries of offsets {first}..{next} back, the first {:?}",
        batch.entries.len(),
        batch.entries.first().map(|e| String::from_utf8_lossy(&e.payload).into_owned())
    );
    Ok(())
}
