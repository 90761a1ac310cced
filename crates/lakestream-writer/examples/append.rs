//! Appends to three logs at once with the writer on the embedded stores: metadata in redb
//! (`DIR/metadata.redb`), WAL objects on the local filesystem (`DIR/objects/wal/…`), the
//! layout `lakestream dev --data-dir DIR` uses. Concurrent appends to different logs share
//! WAL objects; each append resolves once its index record committed.
//!
//! ```text
//! cargo run -p lakestream-writer --example append -- /tmp/lakestream-data
//! cargo run -p lakestream-reader --example read -- /tmp/lakestream-data   # reads them back
//! ```
//!
//! Run it again on the same directory: the logs continue at the offsets where they stopped.

use std::process::ExitCode;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::join_all;
use lakestream_format::{LogId, SystemClock};
use lakestream_meta::EmbeddedStore;
use lakestream_meta::lease::RandomTokens;
use lakestream_objstore::{LocalFsStore, ObjectRoot};
use lakestream_writer::{Writer, WriterConfig, WriterDeps};

#[tokio::main]
async fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: append DIR");
        return ExitCode::from(2);
    };
    match run(std::path::Path::new(&dir)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("append: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    let deps = WriterDeps {
        meta: Arc::new(EmbeddedStore::open(dir.join("metadata.redb")).await?),
        objects: Arc::new(LocalFsStore::new(dir.join("objects"), ObjectRoot::parse("wal")?)?),
        clock: Arc::new(SystemClock),
        tokens: Arc::new(RandomTokens),
    };
    let writer = Writer::start(WriterConfig::default(), deps)?;

    // Ten entries to each of logs 1, 2 and 3, all in flight together; an entry may hold
    // several records (here 1 to 3), and takes that many offsets.
    let appends = (1..=3u64).flat_map(|log| {
        let writer = &writer;
        (0..10u32).map(move |i| async move {
            let payload = Bytes::from(format!("log {log}, entry {i}"));
            writer.append(LogId(log), payload, 1 + i % 3).await
        })
    });
    let acks = join_all(appends).await;
    for log in 1..=3u64 {
        let ours: Vec<_> = acks.iter().flatten().filter(|ack| ack.log_id == LogId(log)).collect();
        let first = ours.iter().map(|a| a.offset).min().unwrap_or(0);
        let end = ours.iter().map(|a| a.end_offset()).max().unwrap_or(0);
        println!("log {log}: {} entries acknowledged, offsets {first}..{end}", ours.len());
    }
    if let Some(error) = acks.iter().find_map(|ack| ack.as_ref().err()) {
        return Err(format!("an append failed: {error}").into());
    }

    let stats = writer.stats();
    println!("{} WAL object(s) written, {} index put(s) committed", stats.objects_written, stats.index_puts);
    // Publishes what is pending and releases the leases.
    writer.close().await;
    Ok(())
}
