//! Compacted Parquet reader on arbitrary bytes: opening, planning ranges and reading rows
//! never panic. The reader contains a panic inside the `parquet` crate (`catch_unwind`), but
//! libFuzzer's panic hook aborts on any panic, so such an upstream bug is still a finding here.
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
