//! CloudEvents JSON event and batch formats: decoding never panics, and a decoded event (or
//! batch) re-encodes to JSON that decodes to the same event(s) and re-encodes to the same text.
#![no_main]

use lakestream_cloudevents::json;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(event) = json::decode_event(data) {
        let encoded = json::encode_event(&event);
        let again =
            json::decode_event(encoded.as_bytes()).expect("our encoding of an accepted event decodes");
        assert_eq!(again, event);
        assert_eq!(json::encode_event(&again), encoded);
    }
    if let Ok(events) = json::decode_batch(data) {
        let encoded = json::encode_batch(&events);
        let again =
            json::decode_batch(encoded.as_bytes()).expect("our encoding of an accepted batch decodes");
        assert_eq!(again, events);
        assert_eq!(json::encode_batch(&again), encoded);
    }
});
