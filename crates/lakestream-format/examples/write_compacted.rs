//! Writes a compacted Parquet file and its companion from a few known entries, plus
//! `expected.json` describing them, so that an outside reader (pyarrow, in
//! `tests/python/check_compacted.py`) can check our bytes.
//!
//! Usage: `cargo run -p lakestream-format --example write_compacted -- OUT_DIR`

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use bytes::Bytes;
use lakestream_format::compacted::{self, CompactedFileWriter, WriteOptions};
use lakestream_format::companion::{self, CompanionRow, CompanionWriter};
use lakestream_format::kafka::KAFKA_BINDING;

const FILE_NAME: &str = "ursa-00000000-0000-4000-8000-000000000001.parquet";
const TIMESTAMP_MS: i64 = 1_700_000_000_000;

/// `(first offset, record count, payload)` of each entry, in offset order.
fn entries() -> Vec<(u64, u32, Bytes)> {
    vec![
        (0, 2, Bytes::from_static(b"hello, lakestream")),
        (2, 1, Bytes::new()),
        (3, 3, Bytes::from_static(&[0x00, 0x01, 0x00, 0xff, 0xfe, 0x00])),
        (6, 1, Bytes::from(vec![0x5a; 3000])),
    ]
}

fn main() -> ExitCode {
    let Some(out_dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: write_compacted OUT_DIR");
        return ExitCode::from(2);
    };
    match run(&out_dir) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("write_compacted: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(out_dir: &std::path::Path) -> Result<(), String> {
    std::fs::create_dir_all(out_dir).map_err(|e| format!("creating {}: {e}", out_dir.display()))?;
    let companion_name = compacted::companion_name(FILE_NAME).map_err(|e| e.to_string())?;

    let mut parquet = CompactedFileWriter::new(KAFKA_BINDING, FILE_NAME, WriteOptions::default())
        .map_err(|e| e.to_string())?;
    let mut index = CompanionWriter::new(companion::WriteOptions::default()).map_err(|e| e.to_string())?;
    let mut cumulative_size = 0u64;
    for (offset, record_count, payload) in entries() {
        cumulative_size += payload.len() as u64;
        let row = CompanionRow {
            offset,
            record_count,
            timestamp_ms: TIMESTAMP_MS,
            entry_size: payload.len() as u32,
            cumulative_size,
            schema_version: None,
        };
        index.push(&row).map_err(|e| e.to_string())?;
        parquet.push(payload).map_err(|e| e.to_string())?;
    }
    let parquet_bytes = parquet.finish().map_err(|e| e.to_string())?;
    let index_bytes = index.finish().map_err(|e| e.to_string())?;

    let write = |name: &str, bytes: &[u8]| {
        std::fs::write(out_dir.join(name), bytes).map_err(|e| format!("writing {name}: {e}"))
    };
    write(FILE_NAME, &parquet_bytes)?;
    write(&companion_name, &index_bytes)?;

    let payloads_hex: Vec<String> = entries()
        .iter()
        .map(|(_, _, payload)| {
            payload.iter().fold(String::new(), |mut s, b| {
                let _ = write!(s, "{b:02x}");
                s
            })
        })
        .collect();
    let expected = serde_json::json!({
        "parquet_file": FILE_NAME,
        "companion_file": companion_name,
        "schema_name": KAFKA_BINDING.avro_record_name,
        "payloads_hex": payloads_hex,
        "entry_offsets": entries().iter().map(|(offset, _, _)| offset.to_string()).collect::<Vec<_>>(),
        "footer": {
            compacted::KEY_ENTRY_SERDE_TYPE: KAFKA_BINDING.entry_serde_type,
            compacted::KEY_ROW_METADATA: companion_name,
            compacted::KEY_SCHEMA_TYPE: "avro",
            compacted::KEY_AVRO_SCHEMA: KAFKA_BINDING.avro_schema(),
            compacted::KEY_WRITER_MODEL: "avro",
        },
    });
    let text = serde_json::to_string_pretty(&expected).map_err(|e| e.to_string())?;
    write("expected.json", text.as_bytes())?;
    println!("wrote {FILE_NAME}, {companion_name} and expected.json to {}", out_dir.display());
    Ok(())
}
