//! The Kafka binding (Appendix A; addendum §7): entry payloads from kafka-python's record
//! builders (tests/vectors/kafka, made by tests/python/make_kafka_fixtures.py), malformed
//! payloads, offset assignment and stream identity.

use std::path::PathBuf;

use lakestream_format::kafka::{
    self, KAFKA_BINDING, Limits, NAMESPACE, assign_offsets, count_records, count_records_with,
    parse_stream_name, stream_name,
};
use lakestream_format::{ErrorClass, FormatError};
use serde::Deserialize;

#[derive(Deserialize)]
struct Manifest {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    file: String,
    expect: String,
    records: Option<u32>,
    refusal: Option<String>,
    description: String,
}

fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/kafka")
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(vectors_dir().join(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

fn manifest() -> Manifest {
    serde_json::from_slice(&fixture("manifest.json")).unwrap()
}

fn assert_refused(result: Result<u32, FormatError>, needle: &str) {
    let err = result.expect_err("a malformed payload was accepted");
    assert_eq!(err.class(), ErrorClass::CorruptData, "{err}");
    assert!(err.to_string().contains(needle), "error {err:?} does not mention {needle:?}");
}

// spec-rule: 1b06759306 [Writer] A Kafka entry payload MUST be exactly the bytes of one or more complete K…
// spec-rule: 7ca40308c1 [Writer] Each record batch of magic 0 or 1 MUST hold at least one record.
#[test]
fn fixtures_count_or_refuse_as_the_manifest_says() {
    let manifest = manifest();
    assert!(manifest.cases.len() >= 12, "the manifest lost cases");
    for case in &manifest.cases {
        let payload = fixture(&case.file);
        let result = count_records(&payload);
        match case.expect.as_str() {
            "ok" => {
                assert_eq!(
                    result.as_ref().ok(),
                    case.records.as_ref(),
                    "{}: {}: {result:?}",
                    case.file,
                    case.description
                )
            }
            "refused" => assert_refused(result, case.refusal.as_deref().unwrap()),
            other => panic!("unknown expectation {other}"),
        }
    }
}

// spec-rule: 56be6a9713 [Writer] A Kafka entry payload MUST NOT contain a control batch or a transactional…
#[test]
fn a_payload_must_not_hold_control_or_transactional_batches() {
    assert_refused(count_records(&fixture("v2_control.bin")), "control batch");
    assert_refused(count_records(&fixture("v2_transactional.bin")), "transactional batch");
    assert_refused(count_records(&fixture("v2_valid_then_control.bin")), "batch 1");
}

/// Overwrites the CRC-32C of the magic-2 batch at `at` after a header change.
fn fix_v2_crc(payload: &mut [u8], at: usize) {
    let len = i32::from_be_bytes(payload[at + 8..at + 12].try_into().unwrap()) as usize;
    let crc = crc32c::crc32c(&payload[at + 21..at + 12 + len]);
    payload[at + 17..at + 21].copy_from_slice(&crc.to_be_bytes());
}

fn fix_legacy_crc(payload: &mut [u8], at: usize) {
    let len = i32::from_be_bytes(payload[at + 8..at + 12].try_into().unwrap()) as usize;
    let mut crc = flate2::Crc::new();
    crc.update(&payload[at + 16..at + 12 + len]);
    payload[at + 12..at + 16].copy_from_slice(&crc.sum().to_be_bytes());
}

/// The positions where a batch starts, and the payload's end.
fn batch_boundaries(payload: &[u8]) -> Vec<usize> {
    let mut pos = 0;
    let mut out = vec![0];
    while pos < payload.len() {
        pos += 12 + i32::from_be_bytes(payload[pos + 8..pos + 12].try_into().unwrap()) as usize;
        out.push(pos);
    }
    out
}

#[test]
fn every_truncation_inside_a_batch_is_refused() {
    for name in ["v2_three_batches.bin", "v1_plain_then_gzip.bin", "v0_gzip_wrapper.bin", "v2_headers.bin"] {
        let payload = fixture(name);
        let boundaries = batch_boundaries(&payload);
        for cut in (0..payload.len()).filter(|cut| !boundaries.contains(cut)) {
            let result = count_records(&payload[..cut]);
            assert!(result.is_err(), "{name} cut at {cut} was accepted as {result:?}");
        }
        // A cut between whole batches leaves a shorter valid payload.
        for cut in boundaries.into_iter().filter(|cut| *cut > 0) {
            assert!(count_records(&payload[..cut]).is_ok(), "{name} cut after a whole batch at {cut}");
        }
    }
}

#[test]
fn a_bad_crc_is_refused() {
    let mut payload = fixture("v2_headers.bin");
    let last = payload.len() - 1;
    payload[last] ^= 0x01;
    assert_refused(count_records(&payload), "CRC-32C");

    let mut legacy = fixture("v1_plain.bin");
    legacy[30] ^= 0x01;
    assert_refused(count_records(&legacy), "CRC-32 is");
}

// spec-rule: 290f8be86f [Writer] Each record batch of magic 2 or later MUST have base offset 0, and MUST d…
#[test]
fn magic_2_base_offset_must_be_zero() {
    // The base offset is outside the CRC, so no CRC fix is needed.
    let mut payload = fixture("v2_single_record.bin");
    payload[7] = 5;
    assert_refused(count_records(&payload), "baseOffset is 5");
}

// spec-rule: 290f8be86f [Writer] Each record batch of magic 2 or later MUST have base offset 0, and MUST d…
#[test]
fn magic_2_record_count_must_be_positive_and_match_the_offset_range() {
    let mut payload = fixture("v2_headers.bin");
    payload[57..61].copy_from_slice(&2i32.to_be_bytes());
    fix_v2_crc(&mut payload, 0);
    assert_refused(count_records(&payload), "record count 2 differs from lastOffsetDelta + 1 = 3");

    let mut zero = fixture("v2_single_record.bin");
    zero[57..61].copy_from_slice(&0i32.to_be_bytes());
    zero[23..27].copy_from_slice(&(-1i32).to_be_bytes());
    fix_v2_crc(&mut zero, 0);
    assert_refused(count_records(&zero), "record count is 0");

    // Header and offset range agree on 4, but the records region holds 3 records.
    let mut region = fixture("v2_headers.bin");
    region[57..61].copy_from_slice(&4i32.to_be_bytes());
    region[23..27].copy_from_slice(&3i32.to_be_bytes());
    fix_v2_crc(&mut region, 0);
    assert_refused(count_records(&region), "header declares 4 records, the records region holds 3");
}

#[test]
fn unknown_magic_and_codec_are_refused() {
    let mut payload = fixture("v2_single_record.bin");
    payload[16] = 3;
    let err = count_records(&payload).unwrap_err();
    assert!(matches!(err, FormatError::Unsupported { .. }), "{err}");
    assert!(err.to_string().contains("magic 3"), "{err}");

    let mut codec = fixture("v2_single_record.bin");
    codec[22] |= 0x07;
    fix_v2_crc(&mut codec, 0);
    assert_refused(count_records(&codec), "compression codec 7");
}

/// The inner message set of a kafka-python gzip wrapper fixture, and the wrapper's magic.
fn inner_set(name: &str) -> (Vec<u8>, u8) {
    use std::io::Read;
    let wrapper = fixture(name);
    let magic = wrapper[16];
    let value_len_at = if magic == 0 { 22 } else { 30 };
    let len = i32::from_be_bytes(wrapper[value_len_at..value_len_at + 4].try_into().unwrap()) as usize;
    let value = &wrapper[value_len_at + 4..value_len_at + 4 + len];
    let mut inner = Vec::new();
    flate2::read::GzDecoder::new(value).read_to_end(&mut inner).unwrap();
    (inner, magic)
}

/// A magic-0/1 wrapper message with a null key around `value`, compressed with `codec`.
fn wrapper(magic: u8, codec: u8, value: &[u8]) -> Vec<u8> {
    let mut message = vec![0u8; 16];
    message.push(magic);
    message.push(codec);
    if magic == 1 {
        message.extend(1_700_000_000_000i64.to_be_bytes());
    }
    message.extend((-1i32).to_be_bytes());
    message.extend((value.len() as i32).to_be_bytes());
    message.extend(value);
    let size = (message.len() - 12) as i32;
    message[8..12].copy_from_slice(&size.to_be_bytes());
    fix_legacy_crc(&mut message, 0);
    message
}

fn xerial_snappy(data: &[u8], chunk: usize) -> Vec<u8> {
    let mut out = b"\x82SNAPPY\0".to_vec();
    out.extend(1i32.to_be_bytes());
    out.extend(1i32.to_be_bytes());
    for piece in data.chunks(chunk) {
        let block = snap::raw::Encoder::new().compress_vec(piece).unwrap();
        out.extend((block.len() as i32).to_be_bytes());
        out.extend(block);
    }
    out
}

fn lz4_frame(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = lz4_flex::frame::FrameEncoder::new(Vec::new());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

#[test]
fn snappy_and_lz4_wrappers_count_their_inner_messages() {
    // The inner messages are kafka-python's; only the outer compression is ours.
    for name in ["v0_gzip_wrapper.bin", "v1_gzip_wrapper.bin"] {
        let (inner, magic) = inner_set(name);
        let xerial = wrapper(magic, 2, &xerial_snappy(&inner, 100));
        assert_eq!(count_records(&xerial).unwrap(), 5, "{name} as xerial snappy");
        let raw = wrapper(magic, 2, &snap::raw::Encoder::new().compress_vec(&inner).unwrap());
        assert_eq!(count_records(&raw).unwrap(), 5, "{name} as raw snappy");
    }
    let (inner, _) = inner_set("v1_gzip_wrapper.bin");
    assert_eq!(count_records(&wrapper(1, 3, &lz4_frame(&inner))).unwrap(), 5);
}

#[test]
fn magic_0_lz4_wrappers_are_unsupported_not_miscounted() {
    let (inner, magic) = inner_set("v0_gzip_wrapper.bin");
    let err = count_records(&wrapper(magic, 3, &lz4_frame(&inner))).unwrap_err();
    assert!(matches!(err, FormatError::Unsupported { .. }), "{err}");
    assert!(err.to_string().contains("LZ4 magic-0"), "{err}");
}

#[test]
fn bad_compressed_wrappers_are_refused() {
    let (inner, magic) = inner_set("v1_gzip_wrapper.bin");
    // gzip bytes labelled snappy, LZ4 or an unknown codec.
    let mut relabelled = fixture("v1_gzip_wrapper.bin");
    for (codec, needle) in
        [(2u8, "snappy block"), (3, "LZ4 wrapper does not decompress"), (4, "codec 4 is unknown")]
    {
        relabelled[17] = (relabelled[17] & !0x07) | codec;
        fix_legacy_crc(&mut relabelled, 0);
        assert_refused(count_records(&relabelled), needle);
    }
    let mut cut_chunk = xerial_snappy(&inner, 100);
    cut_chunk.truncate(cut_chunk.len() - 3);
    assert_refused(count_records(&wrapper(magic, 2, &cut_chunk)), "runs past the value");
    // A raw snappy block that declares 1 GiB: refused from its header, before allocating.
    let mut bomb = vec![0x80, 0x80, 0x80, 0x80, 0x04];
    bomb.extend([0u8; 8]);
    let tight = Limits { max_decompressed_bytes: 1 << 20 };
    assert_refused(count_records_with(&wrapper(magic, 2, &bomb), tight), "max_decompressed_bytes");
    // A wrapper inside a wrapper.
    let nested = wrapper(magic, 1, &{
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&fixture("v1_gzip_wrapper.bin")).unwrap();
        gz.finish().unwrap()
    });
    assert_refused(count_records(&nested), "inside a compressed wrapper");
}

// spec-rule: 7ca40308c1 [Writer] Each record batch of magic 0 or 1 MUST hold at least one record.
#[test]
fn a_wrapper_without_inner_messages_is_refused() {
    // Rebuild the magic-1 gzip wrapper around an empty inner message set.
    let mut payload = fixture("v1_gzip_wrapper.bin");
    let empty = {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&[]).unwrap();
        gz.finish().unwrap()
    };
    // Magic 1 header: offset 8, size 4, crc 4, magic 1, attributes 1, timestamp 8, key -1.
    payload.truncate(30);
    payload.extend((empty.len() as i32).to_be_bytes());
    payload.extend(&empty);
    let size = (payload.len() - 12) as i32;
    payload[8..12].copy_from_slice(&size.to_be_bytes());
    fix_legacy_crc(&mut payload, 0);
    assert_refused(count_records(&payload), "no inner messages");
}

// spec-rule: 1b06759306 [Writer] A Kafka entry payload MUST be exactly the bytes of one or more complete K…
#[test]
fn trailing_garbage_is_refused() {
    let mut payload = fixture("v2_single_record.bin");
    payload.extend([0, 0, 0]);
    assert_refused(count_records(&payload), "truncated");
}

#[test]
fn decompression_is_bounded() {
    let payload = fixture("v1_gzip_wrapper.bin");
    let tight = Limits { max_decompressed_bytes: 16 };
    assert_refused(count_records_with(&payload, tight), "max_decompressed_bytes");
    assert_eq!(count_records_with(&payload, Limits::default()).unwrap(), 5);
}

/// The offsets a reader would see: `(base offset, records)` per magic-2 batch.
fn v2_offsets(payload: &[u8]) -> Vec<(i64, i32)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < payload.len() {
        let len = i32::from_be_bytes(payload[pos + 8..pos + 12].try_into().unwrap()) as usize;
        let base = i64::from_be_bytes(payload[pos..pos + 8].try_into().unwrap());
        let count = i32::from_be_bytes(payload[pos + 57..pos + 61].try_into().unwrap());
        let crc = u32::from_be_bytes(payload[pos + 17..pos + 21].try_into().unwrap());
        assert_eq!(crc, crc32c::crc32c(&payload[pos + 21..pos + 12 + len]), "CRC broken by the rewrite");
        out.push((base, count));
        pos += 12 + len;
    }
    out
}

// spec-rule: 79d817af13 [Reader] A reader MUST assign offsets to the batches of an entry in order, startin…
#[test]
fn readers_assign_offsets_in_order_from_the_entry_offset() {
    let payload = fixture("v2_three_batches.bin");
    let rewritten = assign_offsets(&payload, 100).unwrap();
    assert_eq!(v2_offsets(&rewritten), [(100, 1), (101, 5), (106, 2)]);
    assert_eq!(rewritten.len(), payload.len());
    let single = fixture("v2_single_record.bin");
    assert_eq!(assign_offsets(&single, 0).unwrap(), single, "offset 0 leaves one batch as written");
}

#[test]
fn a_compressed_legacy_wrapper_takes_the_offset_of_its_last_inner_message() {
    let payload = fixture("v1_plain_then_gzip.bin");
    let rewritten = assign_offsets(&payload, 100).unwrap();
    let mut offsets = Vec::new();
    let mut pos = 0;
    while pos < rewritten.len() {
        offsets.push(i64::from_be_bytes(rewritten[pos..pos + 8].try_into().unwrap()));
        pos += 12 + i32::from_be_bytes(rewritten[pos + 8..pos + 12].try_into().unwrap()) as usize;
    }
    // Three plain messages (100, 101, 102), then a wrapper of five (103..=107).
    assert_eq!(offsets, [100, 101, 102, 107]);
    assert!(assign_offsets(&fixture("v2_control.bin"), 0).is_err(), "validates before rewriting");
}

#[test]
fn stream_identity_is_default_and_topic_id() {
    assert_eq!(NAMESPACE, "default");
    let name = stream_name("orders", "vJmGBu0sQ0yH1DnDRVlUeQ").unwrap();
    assert_eq!(name, "orders-topic-id-vJmGBu0sQ0yH1DnDRVlUeQ");
    let parsed = parse_stream_name(&name).unwrap();
    assert_eq!((parsed.topic.as_str(), parsed.topic_id.as_str()), ("orders", "vJmGBu0sQ0yH1DnDRVlUeQ"));
    // A topic name may itself contain the separator; the last one splits.
    let tricky = parse_stream_name("a-topic-id-b-topic-id-vJmGBu0sQ0yH1DnDRVlUeQ").unwrap();
    assert_eq!(tricky.topic, "a-topic-id-b");
    let err = parse_stream_name("orders").unwrap_err();
    assert_eq!(err.class(), ErrorClass::InvalidInput);
}

#[test]
fn kafka_binding_identifiers() {
    assert_eq!(KAFKA_BINDING.entry_serde_type, "KAFKA_BATCHED_RAW_PARQUET");
    assert_eq!(KAFKA_BINDING.avro_record_name, "KafkaMessage");
    assert_eq!(kafka::TOPIC_ID_SEPARATOR, "-topic-id-");
}

/// `decode_records` against kafka-python's bytes: the records `make_kafka_fixtures.py` put
/// in, numbered from the entry's offset, with their timestamps (`BASE_TIMESTAMP + i`).
#[test]
fn decoded_records_are_the_ones_kafka_python_wrote() {
    use lakestream_format::kafka::{KafkaHeader, decode_records};
    const BASE: i64 = 1_700_000_000_000;
    let header = |k: &str, v: Option<&[u8]>| KafkaHeader { key: k.into(), value: v.map(<[u8]>::to_vec) };

    let records = decode_records(&fixture("v2_headers.bin"), 40).unwrap();
    assert_eq!(records.len(), 3);
    assert_eq!(records.iter().map(|r| r.offset).collect::<Vec<_>>(), [40, 41, 42]);
    assert_eq!(
        records.iter().map(|r| r.timestamp_ms).collect::<Vec<_>>(),
        [Some(BASE), Some(BASE + 1), Some(BASE + 2)]
    );
    assert_eq!(records[0].key.as_deref(), Some(&b"k0"[..]));
    assert_eq!(records[0].value.as_deref(), Some(&b"v0"[..]));
    assert_eq!(records[0].headers, [header("trace", Some(b"abc")), header("empty", Some(b""))]);
    assert_eq!((records[1].key.as_deref(), records[1].value.as_deref()), (Some(&b"k1"[..]), None));
    assert_eq!(records[1].headers, [header("h", None)]);
    assert_eq!((records[2].key.as_deref(), records[2].value.as_deref()), (None, Some(&b"\x00\x01\x02"[..])));
    assert!(records[2].headers.is_empty());

    // Compressed (gzip) batches, and several batches in one entry.
    let records = decode_records(&fixture("v2_three_batches.bin"), 0).unwrap();
    assert_eq!(records.len(), 8);
    assert_eq!(records.iter().map(|r| r.offset).collect::<Vec<_>>(), (0..8).collect::<Vec<_>>());
    assert_eq!(records[0].value.as_deref(), Some(&b"a"[..]));
    for i in 0..5 {
        let r = &records[1 + i];
        assert_eq!(r.key.as_deref(), Some(format!("key-{i}").as_bytes()));
        let value = format!("{}{i}", "value ".repeat(40));
        assert_eq!(r.value.as_deref(), Some(value.as_bytes()));
        assert_eq!(r.timestamp_ms, Some(BASE + i as i64));
    }
    assert_eq!((records[7].key.as_deref(), records[7].value.as_deref()), (Some(&b"z"[..]), Some(&b"w"[..])));

    // Magic 0 (no timestamps) and 1, plain and in gzip wrappers.
    for (file, timestamps) in [("v0_plain_then_gzip.bin", false), ("v1_plain_then_gzip.bin", true)] {
        let records = decode_records(&fixture(file), 100).unwrap();
        assert_eq!(records.len(), 8, "{file}");
        assert_eq!(records.iter().map(|r| r.offset).collect::<Vec<_>>(), (100..108).collect::<Vec<_>>());
        for (i, r) in records[..3].iter().enumerate() {
            assert_eq!(r.key.as_deref(), Some(&b"k"[..]));
            assert_eq!(r.value.as_deref(), Some(format!("v{i}").as_bytes()));
            assert_eq!(r.timestamp_ms, timestamps.then_some(BASE + i as i64), "{file}");
        }
        assert_eq!(records[3].key.as_deref(), Some(&b"key-0"[..]));
        assert_eq!(records[7].timestamp_ms, timestamps.then_some(BASE + 4), "{file}");
        assert!(records.iter().all(|r| r.headers.is_empty()));
    }

    // What count_records refuses, decode_records refuses too.
    assert!(decode_records(&fixture("v2_control.bin"), 0).is_err());
    assert!(decode_records(&[], 0).is_err());
}

// spec-rule: 1b06759306 [Writer] A Kafka entry payload MUST be exactly the bytes of one or more complete K…
#[test]
fn a_topic_entry_must_be_complete_record_batches_with_their_record_count() {
    // [Writer] A Kafka entry payload MUST be exactly one or more complete record batches, and
    // the entry's record count MUST equal the records in them: `check_entry` is the check a
    // front end makes for every entry of a Kafka topic's stream, whatever API it came by.
    let batch = fixture("v2_single_record.bin");
    assert_eq!(kafka::check_entry(&batch, None).unwrap(), 1);
    assert_eq!(kafka::check_entry(&batch, Some(1)).unwrap(), 1);
    let err = kafka::check_entry(&batch, Some(2)).unwrap_err();
    assert_eq!(err.class(), ErrorClass::InvalidInput, "{err}");
    assert!(err.to_string().contains("declares 2 records") && err.to_string().contains("hold 1"), "{err}");
    // Opaque bytes (what an HTTP or gRPC producer of a native stream sends) are refused.
    for opaque in [&b""[..], b"hello", b"{\"json\":true}", &[0u8; 61]] {
        let err = kafka::check_entry(opaque, None).unwrap_err();
        assert_eq!(err.class(), ErrorClass::CorruptData, "{opaque:?}: {err}");
    }
}

#[test]
fn topic_streams_carry_the_spec_properties() {
    // Appendix A: the stream's properties include lakestream.source.logical.name and
    // lakestream.kafka.topic.name, which both hold the topic name.
    let props = kafka::topic_stream_properties("orders");
    assert_eq!(props.get("lakestream.kafka.topic.name").map(String::as_str), Some("orders"));
    assert_eq!(props.get("lakestream.source.logical.name").map(String::as_str), Some("orders"));
    assert_eq!(props.len(), 2);
    assert!(kafka::is_topic_stream(&props));
    assert!(!kafka::is_topic_stream(&std::collections::BTreeMap::new()));
}

/// The record-batch view reads kafka-python's batches as the payload rules do: a payload's
/// units are its magic-2 batches (header fields, CRC-32C, records) and magic-0/1 messages.
#[test]
fn the_record_batch_view_reads_kafka_pythons_batches() {
    use kafka::{PayloadBatch, RecordBatch, payload_batches, record_batch_crc};
    for name in ["v2_single_record.bin", "v2_three_batches.bin", "v2_headers.bin", "v2_gzip.bin"] {
        let payload = fixture(name);
        let batches = payload_batches(&payload).unwrap();
        let mut decoded = Vec::new();
        let mut next = 0;
        for unit in &batches {
            let PayloadBatch::RecordBatch(batch) = unit else { panic!("{name}: not magic 2") };
            assert_eq!(RecordBatch::read(unit.bytes()).unwrap(), *batch, "{name}");
            let header = batch.header();
            assert_eq!(header.crc, record_batch_crc(batch.bytes()), "{name}");
            assert_eq!((header.base_offset, header.record_count - 1), (0, header.last_offset_delta));
            assert!(!header.has_producer(), "{name}: kafka-python's plain producer");
            decoded.extend(batch.records(next).unwrap());
            next += u64::from(unit.records());
        }
        assert_eq!(kafka::record_count(&batches).unwrap(), count_records(&payload).unwrap());
        assert_eq!(decoded, kafka::decode_records(&payload, 0).unwrap(), "{name}");
    }
    let legacy = fixture("v1_plain_then_gzip.bin");
    let units = payload_batches(&legacy).unwrap();
    assert!(units.iter().all(|u| matches!(u, PayloadBatch::Message { magic: 1, .. })));
    assert_eq!(kafka::record_count(&units).unwrap(), count_records(&legacy).unwrap());
}
