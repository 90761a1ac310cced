//! FastPFOR decoder: never panics, and accepts only what the encoder writes.
#![no_main]

use lakestream_format::entry_offsets;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(values) = entry_offsets::decode_from_bytes(data) {
        assert_eq!(entry_offsets::encode_to_bytes(&values).expect("re-encode"), data);
    }
});
