//! Companion reader: never panics, on gzip input or on decompressed content; an accepted
//! companion writes back to the same rows, and every row's start offset finds its row.
#![no_main]

use lakestream_format::companion::{
    ReadOptions, WriteOptions, parse_content, read_companion, write_companion,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = read_companion(data, ReadOptions { max_decompressed_bytes: 1 << 20 });
    if let Ok(companion) = parse_content(data) {
        for (index, row) in companion.rows().iter().enumerate() {
            assert_eq!(companion.row_holding(row.offset), Some(index));
            assert_eq!(companion.row_holding(row.end_offset() - 1), Some(index));
        }
        let options = WriteOptions { max_rows_per_block: 3, gzip_level: 1 };
        let rewritten = write_companion(companion.rows(), options).expect("accepted rows are writable");
        let again = read_companion(&rewritten, ReadOptions::default()).expect("our output reads back");
        assert_eq!(again.rows(), companion.rows());
    }
});
