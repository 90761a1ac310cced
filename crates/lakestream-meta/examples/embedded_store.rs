//! The metadata side of an append on the embedded (redb) store: a write lease, sequenced puts
//! that hand out offsets, and a scan of the log's index. Run it twice on the same file: the
//! store is durable, so the second run continues the log where the first stopped. With
//! `FENCE=1` the log is fenced at the end, and later runs find it fenced.
//!
//! ```text
//! cargo run -p lakestream-meta --example embedded_store -- /tmp/metadata.redb
//! ```
#![allow(clippy::disallowed_methods)] // an example: real lease tokens

use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use lakestream_format::{LogId, keys};
use lakestream_meta::lease::{self, RandomTokens, TokenSource};
use lakestream_meta::{EmbeddedStore, MetaStore};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("usage: embedded_store FILE (a redb file, created if missing)");
        return ExitCode::from(2);
    };
    match run(std::path::Path::new(&path)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("embedded_store: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(path: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let store = EmbeddedStore::open(path).await?;
    let log = LogId(7);
    if lease::is_fenced(&store, log).await? {
        println!("log {log} is fenced (an earlier run fenced it); its index:");
    } else {
        // A1: a lease is an ephemeral record of a session: it goes when the session ends.
        let session = store.open_session(Duration::from_secs(15)).await?;
        let held = lease::acquire(&store, &session, log, &RandomTokens.new_token()).await?;
        println!("lease {} held", held.key());
        // A3: one sequenced put per flushed section, deltas (records, payload bytes).
        for (records, bytes) in [(3, 120), (1, 40)] {
            let written = store
                .sequenced_put(
                    &keys::partition(log),
                    &keys::index_prefix(log),
                    &[records, bytes],
                    Bytes::from("RAW index value"),
                )
                .await?;
            println!("appended {records} record(s): {}", written.key);
        }
        held.release(&store).await?;
    }
    for record in store.scan(&keys::partition(log), &keys::first_key(log), &keys::last_key(log), None).await?
    {
        let key = keys::IndexKey::parse(&record.key)?;
        println!("  {key}: offsets up to {}, {} payload bytes so far", key.end_offset, key.cumulative_size);
    }
    if std::env::var_os("FENCE").is_some() {
        lease::fence(&store, log).await?;
        println!("log {log} fenced: no writer can take a lease on it any more");
    }
    store.close().await?;
    Ok(())
}
