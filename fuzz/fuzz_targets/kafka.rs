//! Kafka binding: payload validation never panics; an accepted payload has at least one
//! record, rewrites to the same length and decodes to that many records; an accepted stream name rebuilds itself.
#![no_main]

use lakestream_format::kafka::{
    Limits, assign_offsets, count_records_with, decode_records, parse_stream_name, stream_name,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(count) = count_records_with(data, Limits { max_decompressed_bytes: 1 << 20 }) {
        assert!(count > 0);
        let rewritten = assign_offsets(data, 1_000_000).expect("an accepted payload rewrites");
        assert_eq!(rewritten.len(), data.len());
        // Decoding may still refuse (a compressed batch's records are checked only here), but
        // what it decodes is every record, numbered in order.
        if let Ok(records) = decode_records(data, 7) {
            assert_eq!(records.len(), count as usize);
            assert!(records.iter().enumerate().all(|(i, r)| r.offset == 7 + i as u64));
        }
    }
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(parsed) = parse_stream_name(text)
    {
        assert_eq!(stream_name(&parsed.topic, &parsed.topic_id).expect("parsed parts are valid"), text);
    }
});
