//! CloudEvents as stored entries (one magic-2 Kafka record batch): the record and event
//! decoders never panic; decoded events re-encode to an entry that decodes to the same events,
//! and the entry passes the format crate's Kafka validation.
#![no_main]

use lakestream_cloudevents::kafka;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(records) = kafka::decode_record_batches(data) {
        for record in &records {
            let _ = kafka::record_to_event(record);
        }
    }
    if let Ok(events) = kafka::decode_events(data) {
        let entry = kafka::encode_events(&events, 1_700_000_000_000).expect("decoded events are not empty");
        assert_eq!(
            lakestream_format::kafka::count_records(&entry).ok().map(|count| count as usize),
            Some(events.len())
        );
        assert_eq!(kafka::decode_events(&entry).expect("our entry decodes"), events);
    }
});
