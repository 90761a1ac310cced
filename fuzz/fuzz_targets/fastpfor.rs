//! FastPFOR / EntryOffsets codec, structure-aware: arbitrary values (built from arbitrary u32
//! deltas) encode to words that decode back to the same values, in words and in bytes.
//! `entry_offsets` covers the decoder on raw bytes; this one reaches every bit width and the
//! block/tail split with valid input, which random words almost never are.
//!
//! Input: byte 0 picks a delta bit width (0..=32, so small widths are common), the rest are
//! little-endian u32 deltas masked to that width.
#![no_main]

use lakestream_format::entry_offsets;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&width_byte, rest)) = data.split_first() else {
        return;
    };
    let width = u32::from(width_byte) % 33;
    let mask = if width == 32 { u32::MAX } else { (1u32 << width) - 1 };
    let (chunks, _) = rest.as_chunks::<4>();
    let mut previous = 0u32;
    let values: Vec<u32> = chunks
        .iter()
        .map(|chunk| {
            // Wrapping, like the Java codec: deltas are modulo 2^32.
            previous = previous.wrapping_add(u32::from_le_bytes(*chunk) & mask);
            previous
        })
        .collect();
    let words = entry_offsets::encode(&values).expect("any u32 values encode");
    assert_eq!(words[0] as usize, values.len());
    assert_eq!(entry_offsets::decode(&words).expect("encoder output decodes"), values);
    let bytes = entry_offsets::encode_to_bytes(&values).expect("any u32 values encode");
    assert_eq!(bytes, entry_offsets::words_to_be_bytes(&words));
    assert_eq!(entry_offsets::decode_from_bytes(&bytes).expect("encoder bytes decode"), values);
});
