//! Compacted Parquet reader on arbitrary bytes: opening, planning ranges and reading rows
//! never panic. A panic inside the `parquet` crate is a finding to report, not to catch.
#![no_main]

use bytes::Bytes;
use lakestream_format::compacted::{CompactedFileReader, KNOWN_BINDINGS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(reader) = CompactedFileReader::open(Bytes::copy_from_slice(data), KNOWN_BINDINGS) {
        let rows = reader.row_count().min(1024);
        let _ = reader.byte_ranges(0..rows);
        let _ = reader.read_payloads(0..rows);
        let _ = reader.read_payloads(rows / 2..rows);
    }
});
