//! `lakestream inspect`: decode the structures an operator meets in an incident — a WAL
//! object, an index value, a companion file, a compacted file's footer — with the same strict
//! codecs the roles use, so a corrupt structure is named with the rule it breaks.

use std::fmt::Write as _;
use std::path::Path;

use bytes::Bytes;
use lakestream_format::compacted::{self, KNOWN_BINDINGS};
use lakestream_format::companion;
use lakestream_format::entry_index::{self, IndexValue};
use lakestream_format::legacy::{self, DetectedFormat};
use lakestream_format::wal::WalObject;

/// What to decode.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Kind {
    /// A WAL object file (format v3; a legacy v1/v2 object is detected and named).
    Wal,
    /// An index record value (EntryIndex protobuf), as a file of raw bytes.
    IndexValue,
    /// A companion `.index` file (gzip).
    Companion,
    /// A compacted Parquet file: its footer keys and row count.
    Compacted,
}

/// Decodes `path` as `kind` and renders it as text.
pub fn inspect(kind: Kind, path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut out = String::new();
    match kind {
        Kind::Wal => {
            if legacy::detect_wal_object(&bytes) == DetectedFormat::Legacy {
                let object = legacy::LegacyWalObject::parse(Bytes::from(bytes)).map_err(|e| e.to_string())?;
                let _ = writeln!(
                    out,
                    "legacy WAL object (format version 1 or 2), {} entries",
                    object.tuples().len()
                );
                for t in object.tuples() {
                    let _ = writeln!(
                        out,
                        "  log {} entry {} payload [{}, {})",
                        t.log_id,
                        t.entry_id,
                        t.payload_offset,
                        t.payload_offset + t.payload_length
                    );
                }
                return Ok(out);
            }
            let len = bytes.len();
            let object = WalObject::parse(Bytes::from(bytes)).map_err(|e| e.to_string())?;
            let index = object.index();
            let _ = writeln!(
                out,
                "WAL object v3: {len} bytes, index region {} bytes, payload region {} bytes, {} log section(s)",
                index.index_length(),
                object.payload_region().len(),
                index.sections().len()
            );
            for section in index.sections() {
                let _ = writeln!(
                    out,
                    "  log {}: {} entries, {} records, {} payload bytes",
                    section.log_id,
                    section.entries.len(),
                    section.record_count(),
                    section.payload_bytes()
                );
                for (i, e) in section.entries.iter().enumerate() {
                    let _ = writeln!(
                        out,
                        "    entry {i}: {} record(s), payload [{}, {})",
                        e.record_count,
                        e.payload_offset,
                        u64::from(e.payload_offset) + u64::from(e.payload_size)
                    );
                }
            }
        }
        Kind::IndexValue => match entry_index::decode(&bytes).map_err(|e| e.to_string())? {
            IndexValue::Raw(r) => {
                let _ = writeln!(
                    out,
                    "RAW record: location {}, {} records in {} entries, {} payload bytes, entry boundaries {:?}",
                    r.location, r.message_count, r.entry_count, r.entry_size_bytes, r.boundaries
                );
            }
            IndexValue::Parquet(p) => {
                let _ = writeln!(
                    out,
                    "PARQUET record: {} records, {} payload bytes",
                    p.message_count, p.entry_size_bytes
                );
                for f in p.file_index.entries() {
                    let _ = writeln!(out, "  file {} holds offsets up to {}", f.name, f.last_offset);
                }
            }
        },
        Kind::Companion => {
            let c = companion::read_companion(&bytes, companion::ReadOptions::default())
                .map_err(|e| e.to_string())?;
            let _ = writeln!(out, "companion: {} rows", c.rows().len());
            for (i, r) in c.rows().iter().enumerate() {
                let _ = writeln!(
                    out,
                    "  row {i}: offset {} ({} records), {} bytes, cumulative {}, written {} ms",
                    r.offset, r.record_count, r.entry_size, r.cumulative_size, r.timestamp_ms
                );
            }
        }
        Kind::Compacted => {
            let reader = compacted::CompactedFileReader::open(Bytes::from(bytes), KNOWN_BINDINGS)
                .map_err(|e| e.to_string())?;
            let _ =
                writeln!(out, "compacted file: {} rows, binding {:?}", reader.row_count(), reader.binding());
            if let Some(kv) = reader.footer().file_metadata().key_value_metadata() {
                for pair in kv {
                    let _ = writeln!(out, "  {} = {}", pair.key, pair.value.as_deref().unwrap_or(""));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_spec_wal_example_and_names_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("obj");
        // The spec's 31-byte WAL object.
        let spec = hex("00000013000000030000000000000007020005020503010102030405060708");
        std::fs::write(&path, &spec).unwrap();
        let text = inspect(Kind::Wal, &path).unwrap();
        assert!(text.contains("1 log section"), "{text}");
        assert!(text.contains("log 7: 2 entries, 3 records, 8 payload bytes"), "{text}");
        std::fs::write(&path, &spec[..20]).unwrap();
        assert!(inspect(Kind::Wal, &path).unwrap_err().to_lowercase().contains("wal object"));
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }
}
