//! WAL object decoder: never panics; a parsed object's index parses the same from its prefix.
#![no_main]

use bytes::Bytes;
use lakestream_format::wal::{self, WalIndex, WalObject};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(object) = WalObject::parse(Bytes::copy_from_slice(data)) else {
        return;
    };
    let index_len = wal::index_length(data).expect("a parsed object has a valid index_length") as usize;
    let index = WalIndex::parse(&data[..4 + index_len]).expect("the index region alone parses");
    assert_eq!(&index, object.index());
    for section in object.index().sections() {
        let payloads =
            object.payloads(section.log_id).expect("payloads are in range").expect("section exists");
        assert_eq!(payloads.len(), section.entries.len());
    }
});
