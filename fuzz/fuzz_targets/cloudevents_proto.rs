//! CloudEvents protobuf format (`CloudEvent` and `CloudEventBatch`): decoding never panics,
//! and a decoded event (or batch) re-encodes to bytes that decode to the same event(s) and
//! re-encode to the same bytes.
#![no_main]

use lakestream_cloudevents::proto;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(event) = proto::decode_event(data) {
        let encoded = proto::encode_event(&event);
        let again = proto::decode_event(&encoded).expect("our encoding of an accepted event decodes");
        assert_eq!(again, event);
        assert_eq!(proto::encode_event(&again), encoded);
    }
    if let Ok(events) = proto::decode_batch(data) {
        let encoded = proto::encode_batch(&events);
        let again = proto::decode_batch(&encoded).expect("our encoding of an accepted batch decodes");
        assert_eq!(again, events);
        assert_eq!(proto::encode_batch(&again), encoded);
    }
});
