//! EntryIndex decoder: never panics; an accepted RAW record's counts are consistent.
#![no_main]

use lakestream_format::entry_index::{self, IndexValue};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(IndexValue::Raw(record)) = entry_index::decode(data) {
        assert_eq!(record.boundaries.len(), record.entry_count as usize);
        assert_eq!(
            record.record_counts().iter().map(|&c| u64::from(c)).sum::<u64>(),
            u64::from(record.message_count)
        );
    }
});
