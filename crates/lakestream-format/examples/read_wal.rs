//! Reads a WAL object the way a reader does: the index region first (which logs it holds,
//! each entry's place and record count), then each log's payloads; and checks each section
//! against the RAW index record that names it.
//!
//! ```text
//! cargo run -p lakestream-format --example read_wal              # an object built here
//! cargo run -p lakestream-format --example read_wal -- WAL_FILE  # a stored one, e.g. under
//!                                                                # lakestream-data/objects/wal/
//! ```
//!
//! Without a file, the example first does what a writer does (A2, A3): builds a WAL object
//! holding entries of two logs and the RAW index value of each log's section, as the metadata
//! store would keep it under the key `K(L, end offset, cumulative size)`. With a file there
//! are no index values at hand (they live in the metadata store), so only the object is read.

use std::process::ExitCode;

use bytes::Bytes;
use lakestream_format::entry_index::{self, EntryIndex, IndexValue};
use lakestream_format::wal::{WalObject, WalObjectBuilder};
use lakestream_format::{FormatError, LogId, keys};

fn main() -> ExitCode {
    let result = match std::env::args_os().nth(1) {
        Some(path) => std::fs::read(&path)
            .map_err(|e| format!("reading {}: {e}", path.to_string_lossy()))
            .and_then(|bytes| read_object(Bytes::from(bytes), &[]).map_err(|e| e.to_string())),
        None => built_here().map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("read_wal: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Builds an object and its index values (what a writer stores), then reads them.
fn built_here() -> Result<(), FormatError> {
    let mut builder = WalObjectBuilder::new();
    builder.add_entry(LogId(7), Bytes::from_static(b"order 1 created"), 1)?;
    builder.add_entry(LogId(9), Bytes::from_static(b"payment 1 received"), 1)?;
    builder.add_entry(LogId(7), Bytes::from_static(b"order 1 paid; order 1 shipped"), 2)?;
    let object = builder.build()?;
    let name = "2026/01/02/03/04/05/00000000-0000-4000-8000-000000000001";

    // A3: one index record per section; on an empty log, the sequenced put's first key is
    // K(L, record count, payload bytes).
    let mut index_values = Vec::new();
    for section in &object.sections {
        let key = keys::index_key(section.log_id, section.record_count, section.payload_bytes);
        let value = EntryIndex::raw(name, section)?.encode();
        println!("index record {key}: {} bytes", value.len());
        index_values.push((section.log_id, value));
    }
    println!("WAL object {name}: {} bytes", object.bytes.len());
    read_object(object.bytes, &index_values)
}

/// Reads `bytes` as a WAL object; checks each section against its RAW index value, if given.
fn read_object(bytes: Bytes, index_values: &[(LogId, Vec<u8>)]) -> Result<(), FormatError> {
    let object = WalObject::parse(bytes)?;
    let index = object.index();
    println!(
        "{} log section(s); the payload region starts at byte {}",
        index.sections().len(),
        index.payload_region_start()
    );
    for section in index.sections() {
        println!(
            "log {}: {} entries, {} records, {} payload bytes",
            section.log_id,
            section.entries.len(),
            section.record_count(),
            section.payload_bytes()
        );
        if let Some((_, value)) = index_values.iter().find(|(log, _)| *log == section.log_id) {
            // A reader decides by file_type alone and validates as it decodes.
            match entry_index::decode(value)? {
                IndexValue::Raw(record) => {
                    section.check_matches_record(&record)?;
                    println!("  matches its RAW record (location {})", record.location);
                }
                IndexValue::Parquet(_) => println!("  its index record is PARQUET: compacted since"),
            }
        }
        let payloads = object.payloads(section.log_id)?.unwrap_or_default();
        for (entry, payload) in section.entries.iter().zip(&payloads) {
            println!("  {} record(s): {}", entry.record_count, printable(payload));
        }
    }
    Ok(())
}

/// The payload as text when it is UTF-8 (at most 60 characters), else its length.
fn printable(payload: &Bytes) -> String {
    match std::str::from_utf8(payload) {
        Ok(text) if text.chars().count() <= 60 => format!("{text:?}"),
        Ok(text) => format!("{:?}…", text.chars().take(60).collect::<String>()),
        Err(_) => format!("{} bytes of binary data", payload.len()),
    }
}
