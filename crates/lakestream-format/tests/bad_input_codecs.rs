//! Bad input for every decoder of the core codecs: each case returns a typed error that names
//! what was wrong, never a panic.

use bytes::Bytes;
use lakestream_format::entry_index::{
    self, CompressionType, EntryIndex, EntryOffsets, ExtraData, IndexValue, ParquetRange,
};
use lakestream_format::entry_offsets;
use lakestream_format::file_index::{FileIndex, FileIndexEntry};
use lakestream_format::legacy::{LegacyIndexValue, LegacyWalObject};
use lakestream_format::wal::{self, WalIndex, WalObject, WalObjectBuilder};
use lakestream_format::{ErrorClass, FormatError, LogId};
use prost::Message as _;

/// The bytes of a hex vector; lines starting with `#` are comments naming the spec section.
fn unhex(text: &str) -> Vec<u8> {
    hex::decode(
        text.lines().filter(|l| !l.starts_with('#')).flat_map(|l| l.split_whitespace()).collect::<String>(),
    )
    .expect("hex")
}

const SPEC_WAL: &str = include_str!("vectors/core/wal-spec-31.hex");
const TWO_LOG_WAL: &str = include_str!("vectors/core/wal-two-logs-46.hex");
const SPEC_RAW: &str = include_str!("vectors/core/raw-spec-61.hex");
const SPEC_PARQUET: &str = include_str!("vectors/core/parquet-spec-123.hex");
const SPEC_FILE_INDEX: &str = include_str!("vectors/core/file-index-spec-46.hex");

/// Asserts a decoding error of `structure` whose message contains `needle`.
fn assert_corrupt<T: std::fmt::Debug>(result: Result<T, FormatError>, structure: &str, needle: &str) {
    let err = result.expect_err("expected an error");
    assert_eq!(err.class(), ErrorClass::CorruptData, "{err}");
    let (FormatError::Corrupt { structure: s, detail } | FormatError::Unsupported { structure: s, detail }) =
        &err
    else {
        panic!("not a decoding error: {err}");
    };
    assert_eq!(*s, structure, "{err}");
    assert!(detail.contains(needle), "{err:?} does not mention {needle:?}");
}

/// A WAL object with the given index_version, sections (raw bytes after the version) and payloads.
fn wal(version: i32, sections: &[u8], payloads: &[u8]) -> Bytes {
    let mut out = Vec::new();
    out.extend_from_slice(&(4 + sections.len() as i32).to_be_bytes());
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(sections);
    out.extend_from_slice(payloads);
    Bytes::from(out)
}

fn section(log_id: i64, rest: &[u8]) -> Vec<u8> {
    let mut out = log_id.to_be_bytes().to_vec();
    out.extend_from_slice(rest);
    out
}

// ---- WAL objects -----------------------------------------------------------------------------

// spec-rule: 04717da605 [Reader] A reader MUST parse WAL objects by the layout below.
#[test]
fn wal_truncation_at_every_length_is_an_error() {
    for vector in [SPEC_WAL, TWO_LOG_WAL] {
        let bytes = unhex(vector);
        for len in 0..bytes.len() {
            let result = WalObject::parse(Bytes::copy_from_slice(&bytes[..len]));
            assert!(result.is_err(), "prefix of {len} bytes of {vector} parsed");
        }
    }
}

// spec-rule: 8e2d4c22f7 [Reader] A reader SHOULD reject a WAL object whose index_version is not 3, and an…
#[test]
fn wal_reader_rule_index_version_must_be_3() {
    // [Reader] SHOULD reject index_version != 3; addendum §12 #1.
    for version in [0, 2, 4, -1] {
        assert_corrupt(
            WalObject::parse(wal(version, &section(7, &[1, 0, 1, 1]), &[9])),
            "WAL object",
            &format!("index_version {version}"),
        );
    }
}

#[test]
fn wal_index_length_must_be_at_least_4_and_within_the_object() {
    assert_corrupt(wal::index_length(&[0, 0, 0]), "WAL object", "too short");
    assert_corrupt(wal::index_length(&[0, 0, 0, 3]), "WAL object", "below 4");
    assert_corrupt(wal::index_length(&[0xff, 0xff, 0xff, 0xff]), "WAL object", "below 4");
    let mut bytes = unhex(SPEC_WAL);
    bytes[3] = 40; // index_length 40 > 27 bytes available
    assert_corrupt(WalObject::parse(Bytes::from(bytes)), "WAL object", "reaches past");
    // Four zero bytes: the 8-byte length of a legacy object, named as such.
    assert_corrupt(wal::index_length(&[0, 0, 0, 0, 0, 0, 0, 64]), "WAL object", "version 1 or 2");
}

#[test]
fn wal_writer_rule_varint32_at_most_5_bytes_and_2_pow_31_minus_1() {
    // [Writer] each varint32 in at most 5 bytes, value between 0 and 2^31 − 1; addendum §12 #7.
    let six_byte_count = section(7, &[0x81, 0x80, 0x80, 0x80, 0x80, 0x00, 0, 1, 1]);
    assert_corrupt(WalObject::parse(wal(3, &six_byte_count, &[9])), "WAL object", "longer than 5 bytes");
    let too_large_size = section(7, &[1, 0, 0x80, 0x80, 0x80, 0x80, 0x08, 1]);
    assert_corrupt(WalObject::parse(wal(3, &too_large_size, &[9])), "WAL object", "exceeds 2^31-1");
    let truncated = section(7, &[1, 0, 0x81, 0x81]);
    assert_corrupt(WalObject::parse(wal(3, &truncated, &[])), "WAL object", "truncated varint32");
}

// spec-rule: 04717da605 [Reader] A reader MUST parse WAL objects by the layout below.
#[test]
fn wal_reader_accepts_non_minimal_varint32s_of_another_writer() {
    // [Reader] MUST parse WAL objects by the layout: a varint32 is LEB128 of at most 5 bytes,
    // and the spec does not ask for the shortest form. `80 00` is 0, `81 80 00` is 1.
    let padded = section(7, &[0x81, 0x80, 0x00, 0x80, 0x00, 0x82, 0x00, 0x83, 0x80, 0x80, 0x80, 0x00]);
    let object = WalObject::parse(wal(3, &padded, &[1, 2, 9])).unwrap();
    let log = object.section(LogId(7)).unwrap();
    assert_eq!(log.entries.len(), 1);
    assert_eq!(
        (log.entries[0].payload_offset, log.entries[0].payload_size, log.entries[0].record_count),
        (0, 2, 3)
    );
    assert_eq!(object.payloads(LogId(7)).unwrap().unwrap(), [Bytes::from_static(&[1, 2])]);
}

#[test]
fn wal_writer_rule_payloads_lie_within_the_payload_region() {
    // [Writer] payload_size bytes from payload_offset MUST lie within the payload region.
    let past_end = section(7, &[1, 2, 2, 1]);
    assert_corrupt(
        WalObject::parse(wal(3, &past_end, &[1, 2, 3])),
        "WAL object",
        "ends past the payload region of 3 bytes",
    );
    let index = WalIndex::parse(&wal(3, &past_end, &[1, 2, 3])).unwrap();
    assert!(index.check_payload_region_len(4).is_ok());
    assert!(index.check_payload_region_len(3).is_err());
}

#[test]
fn wal_writer_rule_a_log_id_in_at_most_one_section() {
    let mut sections = section(7, &[1, 0, 1, 1]);
    sections.extend(section(7, &[1, 1, 1, 1]));
    assert_corrupt(WalObject::parse(wal(3, &sections, &[1, 2])), "WAL object", "more than one section");
}

// spec-rule: 6c2c744c42 [Writer] Every entry MUST hold at least one record.
#[test]
fn wal_entry_count_and_record_count_at_least_1_and_log_ids_non_negative() {
    assert_corrupt(WalObject::parse(wal(3, &section(7, &[0]), &[])), "WAL object", "entry_count 0");
    assert_corrupt(
        WalObject::parse(wal(3, &section(7, &[1, 0, 1, 0]), &[9])),
        "WAL object",
        "record_count 0",
    );
    assert_corrupt(
        WalObject::parse(wal(3, &section(-1, &[1, 0, 1, 1]), &[9])),
        "WAL object",
        "negative log_id",
    );
    // An entry_count larger than the index can hold is refused before any allocation.
    let huge = section(7, &[0xff, 0xff, 0xff, 0xff, 0x07]);
    assert_corrupt(WalObject::parse(wal(3, &huge, &[])), "WAL object", "needs more than");
}

#[test]
fn wal_trailing_garbage_in_the_index_region_is_refused() {
    let mut sections = section(7, &[1, 0, 1, 1]);
    sections.extend_from_slice(&[0, 0, 0]);
    assert_corrupt(WalObject::parse(wal(3, &sections, &[9])), "WAL object", "are not a log section");
    // Bytes after the last section that begin like a section but end early.
    let mut sections = section(7, &[1, 0, 1, 1]);
    sections.extend_from_slice(&section(8, &[1, 0]));
    assert_corrupt(
        WalObject::parse(wal(3, &sections, &[9])),
        "WAL object",
        "needs more than the 1 index bytes left",
    );
}

#[test]
fn wal_builder_refuses_what_the_format_cannot_hold() {
    let mut builder = WalObjectBuilder::new();
    assert!(builder.add_entry(LogId(7), vec![1], 0).is_err(), "record_count 0");
    assert!(builder.add_entry(LogId(u64::MAX), vec![1], 1).is_err(), "log id above 2^63-1");
    assert!(builder.add_entry(LogId(7), vec![1], 1 << 31).is_err(), "record count above 2^31-1");
    builder.add_entry(LogId(7), vec![1], i32::MAX as u32).unwrap();
    let err = builder.add_entry(LogId(7), vec![1], 1).unwrap_err();
    assert_eq!(err.class(), ErrorClass::InvalidInput);
    assert_eq!(builder.entry_count(), 1, "a refused entry leaves the builder unchanged");
    assert!(WalObjectBuilder::new().build().is_err(), "empty object");
    let mut two = WalObjectBuilder::new();
    two.add_entry(LogId(1), vec![1], 1).unwrap();
    two.add_entry(LogId(2), vec![2], 1).unwrap();
    assert!(two.clone().build_with_section_order(&[LogId(1)]).is_err());
    assert!(two.clone().build_with_section_order(&[LogId(1), LogId(1)]).is_err());
    assert!(two.build_with_section_order(&[LogId(2), LogId(3)]).is_err());
}

// spec-rule: 6fe0818048 [Writer] A writer MUST write every RAW record with the values that this table give…
#[test]
fn wal_section_and_raw_record_must_agree_addendum_2() {
    let object = WalObject::parse(Bytes::from(unhex(SPEC_WAL))).unwrap();
    let section = object.section(LogId(7)).unwrap();
    let IndexValue::Raw(good) = entry_index::decode(&unhex(SPEC_RAW)).unwrap() else { panic!("RAW") };
    section.check_matches_record(&good).unwrap();
    let mut bad = good.clone();
    bad.message_count = 4;
    bad.boundaries = vec![2, 4];
    assert_corrupt(section.check_matches_record(&bad), "WAL object", "message_count 4");
    let mut bad = good.clone();
    bad.entry_size_bytes = 9;
    assert_corrupt(section.check_matches_record(&bad), "WAL object", "entry_size_bytes 9");
    let mut bad = good.clone();
    bad.entry_count = 1;
    bad.boundaries = vec![3];
    assert_corrupt(section.check_matches_record(&bad), "WAL object", "entry_count 1");
    let mut bad = good;
    bad.boundaries = vec![1, 3];
    assert_corrupt(section.check_matches_record(&bad), "WAL object", "entry 0 holds 2 records");
}

// ---- EntryIndex ------------------------------------------------------------------------------

fn raw_value() -> EntryIndex {
    EntryIndex::decode(unhex(SPEC_RAW).as_slice()).unwrap()
}

fn parquet_value() -> EntryIndex {
    EntryIndex::decode(unhex(SPEC_PARQUET).as_slice()).unwrap()
}

fn check(message: EntryIndex) -> Result<IndexValue, FormatError> {
    entry_index::decode(&message.encode())
}

#[test]
fn entry_index_truncation_at_every_length_is_an_error() {
    for vector in [SPEC_RAW, SPEC_PARQUET] {
        let bytes = unhex(vector);
        for len in 0..bytes.len() {
            assert!(entry_index::decode(&bytes[..len]).is_err(), "prefix of {len} bytes of {vector} decoded");
        }
    }
}

// spec-rule: 8e2d4c22f7 [Reader] A reader SHOULD reject a WAL object whose index_version is not 3, and an…
#[test]
fn entry_index_reader_rule_version_must_be_3() {
    // [Reader] SHOULD reject an EntryIndex whose version is not 3; absent counts as not 3 (§4.3).
    assert_corrupt(check(EntryIndex { version: Some(2), ..raw_value() }), "EntryIndex", "version 2");
    assert_corrupt(check(EntryIndex { version: None, ..raw_value() }), "EntryIndex", "version is absent");
}

#[test]
fn entry_index_unknown_or_absent_file_type_is_refused() {
    assert_corrupt(
        check(EntryIndex { file_type: Some(2), ..raw_value() }),
        "EntryIndex",
        "unknown file_type 2",
    );
    assert_corrupt(check(EntryIndex { file_type: None, ..raw_value() }), "EntryIndex", "file_type is absent");
}

// spec-rule: 4971f0bf1c [Reader] A reader MUST decide how to read a record's entries from its file_type, a…
#[test]
fn entry_index_reader_dispatches_on_file_type_never_index_type() {
    // [Reader] decide from file_type, MUST NOT use index_type: a RAW record with any index_type
    // (even an unknown one) is RAW, and a PARQUET record with NORMAL is PARQUET.
    for index_type in [None, Some(0), Some(1), Some(7)] {
        let value = check(EntryIndex { index_type, ..raw_value() }).unwrap();
        assert!(matches!(value, IndexValue::Raw(_)));
        let value = check(EntryIndex { index_type, ..parquet_value() }).unwrap();
        assert!(matches!(value, IndexValue::Parquet(_)));
    }
}

// spec-rule: 9a592b674e [Writer] compression_type MUST be FastPFOR (1), and compressed_payload MUST hold e…
#[test]
fn entry_offsets_writer_rule_compression_type_must_be_fastpfor() {
    // [Writer] compression_type MUST be FastPFOR (1); NONE and ZSTD are unused; §12 #2.
    for (compression_type, needle) in
        [(Some(0), "compression_type 0"), (Some(2), "compression_type 2"), (None, "absent")]
    {
        let mut value = raw_value();
        value.entry_offsets.as_mut().unwrap().compression_type = compression_type;
        assert_corrupt(check(value), "EntryIndex", needle);
    }
}

#[test]
fn entry_offsets_word_0_must_equal_entry_count_and_last_boundary_message_count() {
    // Addendum §4.2 / §12 #2: word 0 = entry_count, A[n−1] = message_count.
    let with_boundaries = |boundaries: &[u32], entry_count: i32, message_count: i32| EntryIndex {
        entry_count: Some(entry_count),
        message_count: Some(message_count),
        entry_offsets: Some(EntryOffsets {
            compression_type: Some(CompressionType::FastPfor as i32),
            uncompressed_size: Some(4 * entry_count),
            compressed_payload: Some(entry_offsets::encode_to_bytes(boundaries).unwrap()),
        }),
        ..raw_value()
    };
    assert_corrupt(check(with_boundaries(&[1, 2, 3], 2, 3)), "EntryIndex", "word 0");
    assert_corrupt(check(with_boundaries(&[2, 4], 2, 3)), "EntryIndex", "differs from message_count 3");
    assert_corrupt(check(with_boundaries(&[2, 2], 2, 2)), "EntryIndex", "not above the previous");
    assert_corrupt(check(with_boundaries(&[0, 3], 2, 3)), "EntryIndex", "boundary 0 is 0");
    assert_corrupt(check(with_boundaries(&[3, 2], 2, 2)), "EntryIndex", "not above the previous");
    let mut value = raw_value();
    value.entry_offsets.as_mut().unwrap().compressed_payload = Some(vec![0, 0, 0, 2, 0, 0]);
    assert_corrupt(check(value), "entry offsets (FastPFOR)", "whole number");
    let mut value = raw_value();
    value.entry_offsets.as_mut().unwrap().compressed_payload = None;
    assert_corrupt(check(value), "EntryIndex", "compressed_payload is absent");
}

#[test]
fn entry_offsets_writer_rule_required_when_entry_count_above_1() {
    // [Writer] A RAW record whose entry_count is greater than 1 MUST carry entry_offsets.
    assert_corrupt(
        check(EntryIndex { entry_offsets: None, ..raw_value() }),
        "EntryIndex",
        "without entry_offsets",
    );
}

#[test]
fn entry_index_counts_and_sizes_must_be_present_and_in_range() {
    assert_corrupt(
        check(EntryIndex { message_count: Some(0), ..raw_value() }),
        "EntryIndex",
        "message_count 0",
    );
    assert_corrupt(
        check(EntryIndex { message_count: None, ..raw_value() }),
        "EntryIndex",
        "message_count is absent",
    );
    assert_corrupt(
        check(EntryIndex { entry_size_bytes: Some(-1), ..raw_value() }),
        "EntryIndex",
        "negative entry_size_bytes",
    );
    assert_corrupt(check(EntryIndex { entry_count: Some(0), ..raw_value() }), "EntryIndex", "entry_count 0");
    assert_corrupt(
        check(EntryIndex { entry_count: None, ..raw_value() }),
        "EntryIndex",
        "entry_count is absent",
    );
    assert_corrupt(check(EntryIndex { location: None, ..raw_value() }), "EntryIndex", "without a location");
}

// spec-rule: 242bc7f5db [All] Every ExtraData pair MUST set both key and value.
#[test]
fn extra_data_all_rule_every_pair_sets_key_and_value() {
    // [All] Every ExtraData pair MUST set both key and value.
    for pair in
        [ExtraData { key: None, value: Some("v".into()) }, ExtraData { key: Some("k".into()), value: None }]
    {
        let mut value = parquet_value();
        value.extra_data.push(pair);
        assert_corrupt(check(value), "EntryIndex", "both key and value");
    }
}

// spec-rule: ba04da13e1 [All] The keys of the extraData pairs of one record MUST be distinct.
#[test]
fn extra_data_all_rule_keys_are_distinct() {
    // [All] The keys of the extraData pairs of one record MUST be distinct.
    let mut value = parquet_value();
    value.extra_data.push(value.extra_data[0].clone());
    assert_corrupt(check(value), "EntryIndex", "appears more than once");
}

// spec-rule: ba7af4e0ef [Reader] A reader MUST NOT read the entries of a PARQUET record whose extraData ha…
#[test]
fn reader_rule_parquet_record_without_file_index_is_not_read() {
    // [Reader] MUST NOT read the entries of a PARQUET record without CompactedObjectFileIndex.
    let mut value = parquet_value();
    value.extra_data[0].key = Some("SomethingElse".into());
    assert_corrupt(check(value), "EntryIndex", "without a CompactedObjectFileIndex");
    let mut value = parquet_value();
    value.extra_data[0].value = Some("not base64!".into());
    assert_corrupt(check(value), "file index", "Base64");
}

#[test]
fn entry_index_non_protobuf_bytes_are_refused() {
    assert_corrupt(entry_index::decode(&[0x08]), "EntryIndex", "not a protobuf");
    assert_corrupt(entry_index::decode(&[0x0a, 0x05, 0x01]), "EntryIndex", "not a protobuf");
    assert_corrupt(entry_index::decode(&[0x12, 0x02, 0xff, 0xfe]), "EntryIndex", "not a protobuf"); // non-UTF-8 location
}

#[test]
fn entry_index_builders_refuse_unrepresentable_values() {
    let files = FileIndex::new(vec![FileIndexEntry { last_offset: 6, name: "a.parquet".into() }]).unwrap();
    let range = |start, end| ParquetRange { start, end, cumulative_start: 0, cumulative_end: 28 };
    assert!(EntryIndex::parquet(range(0, 7), &files).is_ok());
    assert!(EntryIndex::parquet(range(0, 8), &files).is_err(), "last file must end at e - 1");
    assert!(EntryIndex::parquet(range(7, 7), &files).is_err(), "empty range");
    assert!(EntryIndex::parquet(range(0, 7).with_sizes(28, 0), &files).is_err(), "c_e < c_s");
    assert!(entry_index::boundaries_of(&[]).is_err());
    assert!(entry_index::boundaries_of(&[1, 0]).is_err());
    assert!(entry_index::boundaries_of(&[i32::MAX as u32, 1]).is_err());
}

trait WithSizes {
    fn with_sizes(self, cumulative_start: u64, cumulative_end: u64) -> Self;
}

impl WithSizes for ParquetRange {
    fn with_sizes(self, cumulative_start: u64, cumulative_end: u64) -> Self {
        ParquetRange { cumulative_start, cumulative_end, ..self }
    }
}

// ---- Entry offsets (FastPFOR) ------------------------------------------------------------------

const FASTPFOR: &str = "entry offsets (FastPFOR)";

#[test]
fn fastpfor_truncation_at_every_length_is_an_error() {
    let vectors: [Vec<u32>; 4] =
        [vec![2, 3], (1..=40).collect(), (1..=128).collect(), vec![200, 100_000, 100_001]];
    for a in vectors {
        let words = entry_offsets::encode(&a).unwrap();
        for len in 0..words.len() {
            assert!(entry_offsets::decode(&words[..len]).is_err(), "{len} words of {a:?}");
        }
        let bytes = entry_offsets::words_to_be_bytes(&words);
        for len in 0..bytes.len() {
            assert!(entry_offsets::decode_from_bytes(&bytes[..len]).is_err(), "{len} bytes of {a:?}");
        }
    }
}

#[test]
fn fastpfor_bad_words_are_refused() {
    let decode = entry_offsets::decode;
    assert_corrupt(decode(&[]), FASTPFOR, "no words");
    assert_corrupt(decode(&[0x8000_0000, 0]), FASTPFOR, "negative");
    assert_corrupt(decode(&[0x7fff_ffff, 0]), FASTPFOR, "need at least");
    assert_corrupt(decode(&[32, 33, 0]), FASTPFOR, "bit width 33");
    assert_corrupt(decode(&[128, 0x2100_0000, 0, 0, 0]), FASTPFOR, "bit width 33");
    assert_corrupt(
        decode(&[32, 2, 0x5555_5555, 0x5555_5555]),
        FASTPFOR,
        "declares bit width 2 but its deltas need 1",
    );
    assert_corrupt(decode(&[32, 1]), FASTPFOR, "truncated");
    assert_corrupt(decode(&[2, 1, 0x8182]), FASTPFOR, "marker word");
    assert_corrupt(decode(&[2, 0, 0x8182, 0]), FASTPFOR, "1 words after");
    assert_corrupt(decode(&[0, 0]), FASTPFOR, "after a value count of 0");
    assert_corrupt(decode(&[1, 0, 0x0102_0082]), FASTPFOR, "non-zero padding");
    assert_corrupt(decode(&[1, 0, 0x0000_8000]), FASTPFOR, "not minimally encoded");
    assert_corrupt(decode(&[1, 0, 0x7f7f_7f7f, 0x0000_007f]), FASTPFOR, "longer than 5 bytes");
    assert_corrupt(decode(&[1, 0, 0x7f7f_7f7f, 0x0000_00ff]), FASTPFOR, "exceeds 32 bits");
    assert_corrupt(decode(&[2, 0, 0x0000_0082]), FASTPFOR, "truncated");
}

// ---- File index ----------------------------------------------------------------------------

#[test]
fn file_index_truncation_is_an_error_except_at_entry_boundaries() {
    // The file index has no count: a prefix that ends exactly after an entry is a shorter
    // valid index. Every other prefix is an error (addendum §6.4: no silent stop, §12 #6).
    let bytes = unhex(SPEC_FILE_INDEX);
    let full = FileIndex::decode(&bytes).unwrap();
    for len in 0..bytes.len() {
        match FileIndex::decode(&bytes[..len]) {
            Ok(prefix) => {
                assert_eq!(len, 23, "only the first entry's end is a boundary");
                assert_eq!(prefix.entries(), &full.entries()[..1]);
            }
            Err(err) => assert_eq!(err.class(), ErrorClass::CorruptData),
        }
    }
}

fn file_index_bytes(entries: &[(i64, i32, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (last_offset, name_length, name) in entries {
        out.extend_from_slice(&last_offset.to_be_bytes());
        out.extend_from_slice(&name_length.to_be_bytes());
        out.extend_from_slice(name);
    }
    out
}

// spec-rule: 3fa043136a [Compactor] The files of a file index MUST appear once each, in ascending last_off…
#[test]
fn file_index_strict_parse_addendum_6_4() {
    let fi = |entries: &[(i64, i32, &[u8])]| FileIndex::decode(&file_index_bytes(entries));
    assert_corrupt(fi(&[]), "file index", "no files");
    assert_corrupt(fi(&[(2, -1, b"")]), "file index", "negative name_length -1");
    assert_corrupt(fi(&[(2, 20, b"7-0.parquet")]), "file index", "name_length 20 exceeds");
    assert_corrupt(fi(&[(-2, 11, b"7-0.parquet")]), "file index", "negative last_offset");
    assert_corrupt(fi(&[(2, 11, b"7-0.parquet"), (2, 11, b"7-3.parquet")]), "file index", "does not ascend");
    assert_corrupt(fi(&[(6, 11, b"7-0.parquet"), (2, 11, b"7-3.parquet")]), "file index", "does not ascend");
    assert_corrupt(fi(&[(2, 11, b"7-0.parquet"), (6, 11, b"7-0.parquet")]), "file index", "more than once");
    assert_corrupt(fi(&[(2, 9, b"7-0.index")]), "file index", "must end in");
    assert_corrupt(fi(&[(2, 19, b"7.parquet-0.parquet")]), "file index", "contain it once");
    assert_corrupt(fi(&[(2, 9, b"\xff.parquet")]), "file index", "not UTF-8");
    let mut trailing = file_index_bytes(&[(2, 11, b"7-0.parquet")]);
    trailing.extend_from_slice(&[0, 0, 0]);
    assert_corrupt(FileIndex::decode(&trailing), "file index", "partial entry");
}

#[test]
fn file_index_bad_base64_is_refused() {
    let good = "AAAAAAAAAAIAAAALNy0wLnBhcnF1ZXQAAAAAAAAABgAAAAs3LTMucGFycXVldA==";
    for bad in [
        &good[..good.len() - 2],
        "AAAA*AAA",
        "AAAAAAAAAAIAAAALNy0wLnBhcnF1ZXQAAAAAAAAABgAAAAs3LTMucGFycXVldA",
        " AAAA",
    ] {
        assert_corrupt(FileIndex::from_base64(bad), "file index", "Base64");
    }
    // URL-safe alphabet is not standard Base64.
    assert!(FileIndex::from_base64("AAAAAAAAAAIAAAALNy0wLnBhcnF1ZXQ_").is_err());
}

#[test]
fn file_index_lookup_out_of_range() {
    let index =
        FileIndex::from_base64("AAAAAAAAAAIAAAALNy0wLnBhcnF1ZXQAAAAAAAAABgAAAAs3LTMucGFycXVldA==").unwrap();
    assert_eq!(index.locate(0, 7).unwrap_err().class(), ErrorClass::InvalidInput);
    assert_eq!(index.locate(1, 0).unwrap_err().class(), ErrorClass::InvalidInput);
    assert_eq!(
        index.locate(3, 4).unwrap_err().class(),
        ErrorClass::CorruptData,
        "start above the first file"
    );
}

// ---- Legacy ---------------------------------------------------------------------------------

fn legacy_wal(index_length: i64, tuples: &[[i64; 4]], payload: &[u8]) -> Bytes {
    let mut out = index_length.to_be_bytes().to_vec();
    for tuple in tuples {
        for field in tuple {
            out.extend_from_slice(&field.to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
    Bytes::from(out)
}

#[test]
fn legacy_wal_truncation_at_every_length_is_an_error() {
    let bytes = legacy_wal(64, &[[7, 1, 2, 3], [7, 0, 0, 2]], &[1, 2, 3, 4, 5]);
    assert!(LegacyWalObject::parse(bytes.clone()).is_ok());
    for len in 0..bytes.len() {
        assert!(LegacyWalObject::parse(bytes.slice(..len)).is_err(), "{len}");
    }
}

#[test]
fn legacy_wal_bad_objects_are_refused() {
    const S: &str = "legacy WAL object";
    assert_corrupt(LegacyWalObject::parse(legacy_wal(-32, &[], &[])), S, "negative index length");
    assert_corrupt(LegacyWalObject::parse(legacy_wal(31, &[[7, 0, 0, 0]], &[])), S, "not a multiple of 32");
    assert_corrupt(LegacyWalObject::parse(legacy_wal(64, &[[7, 0, 0, 0]], &[])), S, "reaches past");
    assert_corrupt(
        LegacyWalObject::parse(legacy_wal(64, &[[7, 0, 0, 1], [8, 0, 1, 1]], &[1, 2])),
        S,
        "repeated",
    );
    assert_corrupt(LegacyWalObject::parse(legacy_wal(32, &[[7, 1, 0, 1]], &[1])), S, "entry_id 1");
    assert_corrupt(
        LegacyWalObject::parse(legacy_wal(32, &[[7, 0, 1, 1]], &[1])),
        S,
        "outside the payload region",
    );
    assert_corrupt(LegacyWalObject::parse(legacy_wal(32, &[[7, 0, i64::MAX, i64::MAX]], &[1])), S, "outside");
    assert_corrupt(LegacyWalObject::parse(legacy_wal(32, &[[-7, 0, 0, 1]], &[1])), S, "negative log_id");
}

#[test]
fn legacy_values_bad_strings_are_refused() {
    const S: &str = "legacy index value";
    let p = |text: &[u8]| LegacyIndexValue::parse(text);
    assert_corrupt(p(b"3-8-loc-1"), S, "two 20-digit numbers");
    assert_corrupt(p(b"0000000000000000000x-00000000000000000008-loc-1"), S, "message_count");
    assert_corrupt(p(b"00000000000000000003-99999999999999999999-loc-1"), S, "exceeds 2^63-1");
    assert_corrupt(p(b"00000000000000000003_00000000000000000008-loc-1"), S, "two 20-digit numbers");
    assert_corrupt(p(b"00000000000000000003-00000000000000000008-loc"), S, "no '-'");
    assert_corrupt(p(b"00000000000000000003-00000000000000000008--1"), S, "empty location");
    assert_corrupt(p(b"00000000000000000003-00000000000000000008-loc-x"), S, "entry_id");
    assert_corrupt(p(b"00000000000000000003-00000000000000000008-loc-RAW"), S, "no '-'");
    assert_corrupt(p(b"00000000000000000003-00000000000000000008-loc--RAW"), S, "entry_id");
    assert_corrupt(p(b"00000000000000000003-00000000000000000008-loc-1-raw"), S, "entry_id");
    assert_corrupt(p(b"00000000000000000003-00000000000000000008-\xff-1"), S, "UTF-8");
}

// spec-rule: 04717da605 [Reader] A reader MUST parse WAL objects by the layout below.
#[test]
fn entry_offsets_reader_accepts_any_uncompressed_size() {
    // The spec does not constrain `uncompressed_size`: another writer's 12, 0, -1 or none
    // leaves the record readable, with the boundaries of `compressed_payload`.
    for size in [Some(12), Some(0), Some(-1), Some(i32::MAX), None] {
        let mut value = raw_value();
        value.entry_offsets.as_mut().unwrap().uncompressed_size = size;
        let IndexValue::Raw(record) = check(value).unwrap() else { panic!("a RAW record") };
        assert_eq!(record.boundaries, [2, 3], "uncompressed_size {size:?}");
    }
    // Our writer still writes 4n.
    let mut builder = WalObjectBuilder::new();
    for records in [2, 1, 4] {
        builder.add_entry(LogId(7), Bytes::from_static(b"x"), records).unwrap();
    }
    let built = builder.build().unwrap();
    let ours = EntryIndex::raw("7-1.wal", &built.sections[0]).unwrap();
    assert_eq!(ours.entry_offsets.unwrap().uncompressed_size, Some(12));
}
