//! Appends with the writer and reads back with the reader, on the embedded stores: metadata in
//! redb (`DIR/metadata.redb`), objects on the local filesystem (`DIR/objects/wal/…` and
//! `DIR/objects/compacted/…`), the layout `lakestream dev --data-dir DIR` uses.
//!
//! ```text
//! cargo run -p lakestream-reader --example read -- /tmp/lakestream-data [LOG_ID]
//! ```
//!
//! The reader needs no lease and no catalog: a `LogRef` names the log. The example appends
//! five entries to the log (1 by default), reads the whole log from its first offset, then
//! makes a tail read that waits for an entry appended while it waits.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lakestream_format::{LogId, LogRef, SystemClock};
use lakestream_meta::lease::RandomTokens;
use lakestream_meta::{EmbeddedStore, MetaStore};
use lakestream_objstore::{LocalFsStore, ObjectRoot, ObjectStore};
use lakestream_reader::{Reader, ReaderConfig, ReaderDeps};
use lakestream_writer::{Writer, WriterConfig, WriterDeps};

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: read DIR [LOG_ID]");
        return ExitCode::from(2);
    };
    let log_id = match args.next().map(|id| id.to_string_lossy().parse::<u64>()) {
        None => LogId(1),
        Some(Ok(id)) => LogId(id),
        Some(Err(e)) => {
            eprintln!("read: LOG_ID is not a number: {e}");
            return ExitCode::from(2);
        }
    };
    match run(std::path::Path::new(&dir), log_id).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("read: {message}");
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
    for i in 0..5 {
        writer.append(log_id, Bytes::from(format!("entry {i}")), 1).await?;
    }

    let reader = Reader::new(ReaderConfig::default(), ReaderDeps { meta, wal, compacted })?;
    // The catalog would name the stream; the reader only passes it through to its errors.
    let log = LogRef { log_id, namespace: "default".into(), stream: "example".into() };
    let mut offset = reader.first_offset(log_id).await?;
    loop {
        let batch = reader.read(&log, offset, 64 * 1024, Duration::ZERO).await?;
        if batch.entries.is_empty() {
            break;
        }
        for entry in &batch.entries {
            println!(
                "offset {} ({} record(s), at {} ms): {:?}",
                entry.offset,
                entry.record_count,
                entry.timestamp_ms,
                String::from_utf8_lossy(&entry.payload)
            );
        }
        offset = batch.next_offset;
    }
    println!("log {log_id} ends at offset {offset}");

    // A tail read at the end waits (up to 5 s here) for the next append.
    let late = {
        let writer = writer.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            writer.append(log_id, Bytes::from_static(b"appended while the reader waited"), 1).await
        })
    };
    let batch = reader.read(&log, offset, 64 * 1024, Duration::from_secs(5)).await?;
    late.await??;
    match batch.entries.first() {
        Some(entry) => {
            println!("tail read got offset {}: {:?}", entry.offset, String::from_utf8_lossy(&entry.payload))
        }
        None => return Err("the tail read returned nothing within 5 s".into()),
    }
    writer.close().await;
    Ok(())
}
