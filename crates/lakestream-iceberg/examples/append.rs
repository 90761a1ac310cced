//! Appends two ranges of a stream to its Iceberg table in a SQLite catalog under DIR, then
//! appends the first again (a no-op), and prints where the table is and how to read it.
//!
//! `cargo run -p lakestream-iceberg --example append -- DIR`
#![allow(clippy::disallowed_methods)] // an example: fresh UUIDs for file names

use std::sync::Arc;

use bytes::Bytes;
use lakestream_format::Entry;
use lakestream_iceberg::{LogRange, StreamRef, Tables, TablesConfig};
use lakestream_objstore::{LocalFsStore, ObjectRoot, ObjectStore};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::path::absolute(std::env::args().nth(1).ok_or("usage: append DIR")?)?;
    std::fs::create_dir_all(&dir)?;
    // The compacted root `{DIR}/compacted`, as `lakestream dev` lays it out.
    let store: Arc<dyn ObjectStore> = Arc::new(LocalFsStore::new(&dir, ObjectRoot::parse("compacted")?)?);
    let config = TablesConfig {
        uri: Some(format!("sqlite://{}/catalog.db", dir.display())),
        ..TablesConfig::default()
    };
    let tokens = Arc::new(|| uuid::Uuid::new_v4().to_string());
    let root_uri = format!("file://{}/compacted", dir.display());
    let tables = Tables::connect(&config, store, &root_uri, tokens).await?;

    let stream = StreamRef::new("demo", "events");
    let entries = |start: u64, end: u64| -> Vec<Entry> {
        (start..end)
            .map(|offset| Entry {
                offset,
                record_count: 1,
                timestamp_ms: 1_700_000_000_000 + offset as i64 * 1000,
                payload: Bytes::from(format!("event {offset}")),
            })
            .collect()
    };
    let first = LogRange { log_id: 1, partition: 0, start: 0, end: 10, entries: entries(0, 10) };
    let start = tables.watermarks(&stream).await?.get(&1).copied().unwrap_or(0);
    if start == 0 {
        let report = tables.append(&stream, vec![first.clone()]).await?;
        println!("committed {:?} in snapshot {:?}", report.committed, report.snapshot_id);
        let second = LogRange { log_id: 1, partition: 0, start: 10, end: 15, entries: entries(10, 15) };
        tables.append(&stream, vec![second]).await?;
    }
    // The same range again: the table already holds it.
    let again = tables.append(&stream, vec![first]).await?;
    println!(
        "again: committed {}, already committed {}",
        again.committed.len(),
        again.already_committed.len()
    );
    println!("watermarks: {:?}", tables.watermarks(&stream).await?);
    println!("table location: {}", tables.location(&stream));
    println!(
        "pyiceberg: SqlCatalog(\"lakestream\", uri=\"sqlite:///{}/catalog.db\", warehouse=\"{root_uri}\").load_table(\"demo.events\")",
        dir.display()
    );
    Ok(())
}
