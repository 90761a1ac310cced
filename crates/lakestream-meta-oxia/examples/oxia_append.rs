//! Appends to a log's offset index on a real Oxia server through `OxiaStore`: a write lease
//! (an ephemeral record of an Oxia session), two sequenced puts, a scan of the log's index.
//! Run it again: the log continues where it stopped, since the index lives on the server.
//!
//! ```text
//! oxia standalone --shards 4 &                     # or any cluster
//! cargo run -p lakestream-meta-oxia --example oxia_append -- 127.0.0.1:6648 [LOG_ID]
//! ```
//!
//! Without an address it uses `LAKESTREAM_TEST_OXIA` (set by the repository's
//! `scripts/test`).
#![allow(clippy::disallowed_methods)] // an example: real lease tokens

use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use lakestream_format::{LogId, keys};
use lakestream_meta::MetaStore;
use lakestream_meta::lease::{self, RandomTokens, TokenSource};
use lakestream_meta_oxia::{OxiaConfig, OxiaStore};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(address) = args.next().or_else(|| std::env::var("LAKESTREAM_TEST_OXIA").ok()) else {
        eprintln!("usage: oxia_append HOST:PORT [LOG_ID] (or set LAKESTREAM_TEST_OXIA)");
        return ExitCode::from(2);
    };
    let log = match args.next().map(|id| id.parse::<u64>()) {
        None => LogId(7),
        Some(Ok(id)) => LogId(id),
        Some(Err(e)) => {
            eprintln!("oxia_append: LOG_ID is not a number: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&address, log).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("oxia_append: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(address: &str, log: LogId) -> Result<(), Box<dyn std::error::Error>> {
    // Every setting but the addresses has a default; `connect` validates them.
    let store = OxiaStore::connect(OxiaConfig::new([address])).await?;
    let session = store.open_session(Duration::from_secs(15)).await?;
    let held = lease::acquire(&store, &session, log, &RandomTokens.new_token()).await?;
    println!("lease {} held on {address}", held.key());
    for (records, bytes) in [(3, 120), (1, 40)] {
        // The server derives the new key from the log's greatest key: K(L, x + records, y + bytes).
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
    let index = store.list(&keys::partition(log), &keys::first_key(log), &keys::last_key(log)).await?;
    println!(
        "log {log} has {} index record(s); the last is {}",
        index.len(),
        index.last().map_or("-", String::as_str)
    );
    // Ends the Oxia session; its ephemeral records (leases) go with it.
    session.close().await?;
    Ok(())
}
