//! File index decoder: never panics; accepted bytes re-encode to themselves.
#![no_main]

use lakestream_format::file_index::FileIndex;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(index) = FileIndex::decode(data) {
        assert_eq!(index.encode(), data);
    }
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(index) = FileIndex::from_base64(text)
    {
        let last = index.last_offset();
        let found = index.locate(0, last).expect("the last offset is in the last file");
        assert_eq!(found.position, index.entries().len() - 1);
    }
});
