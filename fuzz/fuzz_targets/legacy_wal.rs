//! Legacy (v1/v2) WAL object parser: never panics; every tuple's payload is reachable.
#![no_main]

use bytes::Bytes;
use lakestream_format::legacy::LegacyWalObject;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(object) = LegacyWalObject::parse(Bytes::copy_from_slice(data)) {
        for tuple in object.tuples() {
            let (_, payload) = object.entry(tuple.entry_id).expect("every entry id resolves");
            assert_eq!(payload.len() as u64, tuple.payload_length);
        }
    }
});
