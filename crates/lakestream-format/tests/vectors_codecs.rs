//! Golden vectors of the core codecs, in both directions: encoding gives exactly the bytes of
//! the spec or addendum, and decoding those bytes gives the whole value. Each test names the
//! section it pins.

use bytes::Bytes;
use lakestream_format::entry_index::{
    self, CompressionType, EntryIndex, EntryOffsets, ExtraData, IndexType, IndexValue, ParquetRange,
    ParquetRecord, ProtoFileType, RawRecord,
};
use lakestream_format::entry_offsets;
use lakestream_format::file_index::{FileIndex, FileIndexEntry};
use lakestream_format::legacy::{
    self, DetectedFormat, LegacyIndexValue, LegacyTuple, LegacyVersion, LegacyWalObject,
};
use lakestream_format::wal::{
    self, EntryDescriptor, LogSection, SectionSummary, WalIndex, WalObject, WalObjectBuilder,
};
use lakestream_format::{FileType, LogId};
use prost::Message as _;

/// The bytes of a hex vector; lines starting with `#` are comments naming the spec section.
fn unhex(text: &str) -> Vec<u8> {
    let compact: String =
        text.lines().filter(|l| !l.starts_with('#')).flat_map(|l| l.split_whitespace()).collect();
    hex::decode(compact).expect("test vector is hex")
}

/// The text of a vector file without its comment lines.
fn text_of(vector: &str) -> &str {
    vector.lines().find(|l| !l.starts_with('#')).unwrap_or("").trim()
}

fn words(text: &str) -> Vec<u32> {
    text.split_whitespace().map(|w| u32::from_str_radix(w, 16).expect("hex word")).collect()
}

const SPEC_WAL: &str = include_str!("vectors/core/wal-spec-31.hex");
const SPEC_RAW: &str = include_str!("vectors/core/raw-spec-61.hex");
const SPEC_PARQUET: &str = include_str!("vectors/core/parquet-spec-123.hex");
const SPEC_FILE_INDEX: &str = include_str!("vectors/core/file-index-spec-46.hex");
const SPEC_FILE_INDEX_BASE64_FILE: &str = include_str!("vectors/core/file-index-spec.base64");
const RAW_TWO_LOGS_42: &str = include_str!("vectors/core/raw-two-logs-log42-32.hex");
const RAW_TWO_LOGS_7: &str = include_str!("vectors/core/raw-two-logs-log7-52.hex");
const ENTRY_OFFSETS_40: &str = include_str!("vectors/core/entry-offsets-40-27.hex");
const TWO_LOG_WAL: &str = include_str!("vectors/core/wal-two-logs-46.hex");

fn spec_example_builder() -> WalObjectBuilder {
    let mut builder = WalObjectBuilder::new();
    builder.add_entry(LogId(7), Bytes::from_static(&[1, 2, 3, 4, 5]), 2).unwrap();
    builder.add_entry(LogId(7), Bytes::from_static(&[6, 7, 8]), 1).unwrap();
    builder
}

fn e(payload_offset: u32, payload_size: u32, record_count: u32) -> EntryDescriptor {
    EntryDescriptor { payload_offset, payload_size, record_count }
}

fn spec_file_index() -> FileIndex {
    FileIndex::new(vec![
        FileIndexEntry { last_offset: 2, name: "7-0.parquet".into() },
        FileIndexEntry { last_offset: 6, name: "7-3.parquet".into() },
    ])
    .unwrap()
}

// ---- WAL objects -----------------------------------------------------------------------------

// spec-rule: 32dfc535dc [Writer] A writer MUST write every WAL object in the layout below.
#[test]
fn wal_objects_spec_example_31_bytes_encode() {
    // Spec "WAL objects", Example; addendum §11.1.
    let builder = spec_example_builder();
    assert_eq!(builder.object_len(), 31);
    let built = builder.build().unwrap();
    assert_eq!(built.bytes.as_ref(), unhex(SPEC_WAL));
    assert_eq!(
        built.sections,
        vec![SectionSummary {
            log_id: LogId(7),
            entries: vec![e(0, 5, 2), e(5, 3, 1)],
            record_count: 3,
            payload_bytes: 8,
            payload_region_len: 8,
            sections_in_object: 1,
        }]
    );
}

// spec-rule: 04717da605 [Reader] A reader MUST parse WAL objects by the layout below.
#[test]
fn wal_objects_spec_example_31_bytes_decode() {
    // Spec "WAL objects", Example; addendum §11.1: index_length 19, version 3, log 7, (0,5,2), (5,3,1).
    let object = WalObject::parse(Bytes::from(unhex(SPEC_WAL))).unwrap();
    assert_eq!(object.index().index_length(), 19);
    assert_eq!(object.index().payload_region_start(), 23);
    assert_eq!(
        object.index().sections(),
        [LogSection { log_id: LogId(7), entries: vec![e(0, 5, 2), e(5, 3, 1)] }]
    );
    assert_eq!(object.payload_region().as_ref(), [1, 2, 3, 4, 5, 6, 7, 8]);
    let payloads = object.payloads(LogId(7)).unwrap().unwrap();
    assert_eq!(payloads, [Bytes::from_static(&[1, 2, 3, 4, 5]), Bytes::from_static(&[6, 7, 8])]);
    assert_eq!(object.payloads(LogId(8)).unwrap(), None);
}

#[test]
fn wal_objects_index_length_from_first_four_bytes_allows_ranged_reads() {
    // Spec "WAL objects": the payload region starts at byte 4 + index_length.
    let bytes = unhex(SPEC_WAL);
    let index_length = wal::index_length(&bytes[..4]).unwrap();
    assert_eq!(index_length, 19);
    let index = WalIndex::parse(&bytes[..4 + index_length as usize]).unwrap();
    let section = index.section(LogId(7)).unwrap();
    assert_eq!(section.payload_span(), 0..8);
    let start = index.payload_region_start() as usize;
    // A ranged read of just the second payload.
    let part = Bytes::copy_from_slice(&bytes[start + 5..start + 8]);
    let second = LogSection { log_id: LogId(7), entries: vec![section.entries[1]] };
    assert_eq!(second.slice_payloads(&part, 5).unwrap(), [Bytes::from_static(&[6, 7, 8])]);
    assert!(section.slice_payloads(&part, 5).is_err(), "the first payload is not in the part");
}

// spec-rule: 32dfc535dc [Writer] A writer MUST write every WAL object in the layout below.
// spec-rule: 8e4b1b0018 [Reader] A reader MUST locate each payload by its payload_offset, and MUST NOT ass…
#[test]
fn wal_objects_two_logs_46_bytes_addendum_11_9() {
    // Addendum §11.9: log 42's section first; log 7's payloads are not adjacent.
    let bytes = unhex(TWO_LOG_WAL);
    assert_eq!(bytes.len(), 46);
    let object = WalObject::parse(Bytes::from(bytes.clone())).unwrap();
    assert_eq!(object.index().index_length(), 31);
    assert_eq!(
        object.index().sections(),
        [
            LogSection { log_id: LogId(42), entries: vec![e(5, 3, 4)] },
            LogSection { log_id: LogId(7), entries: vec![e(0, 5, 2), e(8, 3, 1)] },
        ]
    );
    assert_eq!(object.payloads(LogId(42)).unwrap().unwrap(), [Bytes::from_static(&[0xaa, 0xbb, 0xcc])]);
    assert_eq!(
        object.payloads(LogId(7)).unwrap().unwrap(),
        [Bytes::from_static(&[1, 2, 3, 4, 5]), Bytes::from_static(&[6, 7, 8])]
    );

    // Encoding: payloads in the order accepted (7, 42, 7), sections listed 42 first.
    let mut builder = WalObjectBuilder::new();
    builder.add_entry(LogId(7), Bytes::from_static(&[1, 2, 3, 4, 5]), 2).unwrap();
    builder.add_entry(LogId(42), Bytes::from_static(&[0xaa, 0xbb, 0xcc]), 4).unwrap();
    builder.add_entry(LogId(7), Bytes::from_static(&[6, 7, 8]), 1).unwrap();
    let built = builder.build_with_section_order(&[LogId(42), LogId(7)]).unwrap();
    assert_eq!(built.bytes.as_ref(), bytes);
    assert_eq!(built.sections.iter().map(|s| s.log_id).collect::<Vec<_>>(), [LogId(42), LogId(7)]);

    // The two RAW values of §11.9.
    let raw42 = EntryIndex::raw("x.wal", built.section(LogId(42)).unwrap()).unwrap().encode();
    assert_eq!(raw42, unhex(RAW_TWO_LOGS_42));
    let raw7 = EntryIndex::raw("x.wal", built.section(LogId(7)).unwrap()).unwrap().encode();
    assert_eq!(raw7, unhex(RAW_TWO_LOGS_7));
    assert_eq!((raw42.len(), raw7.len()), (32, 52));

    // Decoding them and checking them against the sections (addendum §2 consistency checks).
    let IndexValue::Raw(record42) = entry_index::decode(&raw42).unwrap() else { panic!("RAW") };
    assert_eq!(
        record42,
        RawRecord {
            location: "x.wal".into(),
            message_count: 4,
            entry_size_bytes: 3,
            entry_count: 1,
            boundaries: vec![4],
            index_type: Some(IndexType::Normal as i32),
            file_size: Some(11),
            offset_in_file: Some(-1),
            extra_data: vec![],
        }
    );
    object.section(LogId(42)).unwrap().check_matches_record(&record42).unwrap();
    let IndexValue::Raw(record7) = entry_index::decode(&raw7).unwrap() else { panic!("RAW") };
    assert_eq!(record7.boundaries, [2, 3]);
    object.section(LogId(7)).unwrap().check_matches_record(&record7).unwrap();
    assert!(object.section(LogId(42)).unwrap().check_matches_record(&record7).is_err());
}

#[test]
fn wal_objects_two_logs_builder_lists_sections_in_first_appearance_order() {
    // Without an explicit order, sections follow the first entry of each log.
    let mut builder = WalObjectBuilder::new();
    builder.add_entry(LogId(42), Bytes::from_static(&[0xaa, 0xbb, 0xcc]), 4).unwrap();
    builder.add_entry(LogId(7), Bytes::from_static(&[1, 2, 3, 4, 5]), 2).unwrap();
    builder.add_entry(LogId(7), Bytes::from_static(&[6, 7, 8]), 1).unwrap();
    let built = builder.build().unwrap();
    assert_eq!(
        built.bytes.as_ref(),
        unhex(
            "0000001f 00000003 00000000 0000002a 01 00 03 04 00000000 00000007 02 03 05 02 08 03 01 aabbcc 0102030405 060708"
        )
    );
    assert_eq!(built.sections.iter().map(|s| s.log_id).collect::<Vec<_>>(), [LogId(42), LogId(7)]);
    assert!(built.sections.iter().all(|s| s.sections_in_object == 2 && s.payload_region_len == 11));
}

// ---- EntryIndex values -------------------------------------------------------------------------

// spec-rule: edd7fbe36c [All] An implementation that writes a structure defined by a field table MUST writ…
// spec-rule: 6fe0818048 [Writer] A writer MUST write every RAW record with the values that this table give…
#[test]
fn offset_index_values_raw_record_61_bytes_encode() {
    // Spec "Offset index values", Example: RAW record; addendum §11.3.
    let built = spec_example_builder().build().unwrap();
    let value = EntryIndex::raw("7-00000001.wal", &built.sections[0]).unwrap();
    assert_eq!(
        value,
        EntryIndex {
            version: Some(3),
            location: Some("7-00000001.wal".into()),
            file_type: Some(ProtoFileType::Raw as i32),
            index_type: Some(IndexType::Compact as i32),
            message_count: Some(3),
            entry_size_bytes: Some(8),
            file_size: Some(8),
            offset_in_file: Some(-1),
            entry_count: Some(2),
            entry_offsets: Some(EntryOffsets {
                compression_type: Some(CompressionType::FastPfor as i32),
                uncompressed_size: Some(8),
                compressed_payload: Some(unhex("00000002 00000000 00008182")),
            }),
            extra_data: vec![],
        }
    );
    assert_eq!(value.encode(), unhex(SPEC_RAW));
}

#[test]
fn offset_index_values_raw_record_61_bytes_decode() {
    // Spec "Offset index values", Example: RAW record; addendum §11.3.
    let bytes = unhex(SPEC_RAW);
    assert_eq!(bytes.len(), 61);
    let decoded = entry_index::decode(&bytes).unwrap();
    assert_eq!(decoded.file_type(), FileType::Raw);
    assert_eq!(
        decoded,
        IndexValue::Raw(RawRecord {
            location: "7-00000001.wal".into(),
            message_count: 3,
            entry_size_bytes: 8,
            entry_count: 2,
            boundaries: vec![2, 3],
            index_type: Some(IndexType::Compact as i32),
            file_size: Some(8),
            offset_in_file: Some(-1),
            extra_data: vec![],
        })
    );
    let IndexValue::Raw(record) = decoded else { unreachable!() };
    assert_eq!(record.record_counts(), [2, 1]);
    // Addendum §2: the section of the spec's WAL object matches this record.
    let object = WalObject::parse(Bytes::from(unhex(SPEC_WAL))).unwrap();
    object.section(LogId(7)).unwrap().check_matches_record(&record).unwrap();
}

// spec-rule: edd7fbe36c [All] An implementation that writes a structure defined by a field table MUST writ…
// spec-rule: da8dfcfa03 [Compactor] A compactor MUST write every PARQUET record with the values that this…
#[test]
fn offset_index_values_parquet_record_123_bytes_encode() {
    // Spec "Offset index values", Example: PARQUET record; addendum §11.4.
    let range = ParquetRange { start: 0, end: 7, cumulative_start: 0, cumulative_end: 28 };
    let value = EntryIndex::parquet(range, &spec_file_index()).unwrap();
    assert_eq!(
        value,
        EntryIndex {
            version: Some(3),
            location: Some("7-0.parquet".into()),
            file_type: Some(ProtoFileType::Parquet as i32),
            index_type: Some(IndexType::Compact as i32),
            message_count: Some(7),
            entry_size_bytes: Some(28),
            file_size: Some(28),
            offset_in_file: Some(0),
            entry_count: Some(1),
            entry_offsets: None,
            extra_data: vec![ExtraData {
                key: Some("CompactedObjectFileIndex".into()),
                value: Some(text_of(SPEC_FILE_INDEX_BASE64_FILE).into()),
            }],
        }
    );
    let bytes = value.encode();
    assert_eq!(bytes.len(), 123);
    assert_eq!(bytes, unhex(SPEC_PARQUET));
}

#[test]
fn offset_index_values_parquet_record_123_bytes_decode() {
    // Spec "Offset index values", Example: PARQUET record; addendum §11.4.
    let decoded = entry_index::decode(&unhex(SPEC_PARQUET)).unwrap();
    assert_eq!(
        decoded,
        IndexValue::Parquet(ParquetRecord {
            location: Some("7-0.parquet".into()),
            message_count: 7,
            entry_size_bytes: 28,
            file_index: spec_file_index(),
            extra_data: vec![(
                "CompactedObjectFileIndex".into(),
                text_of(SPEC_FILE_INDEX_BASE64_FILE).into()
            )],
        })
    );
    let IndexValue::Parquet(record) = decoded else { unreachable!() };
    record.check_range(7).unwrap(); // key K(7, 7, 28)
    assert!(record.check_range(8).is_err());
}

#[test]
fn offset_index_values_any_field_order_and_unknown_fields_are_accepted() {
    // Addendum §4.3 "Reading": any field order, unknown fields skipped.
    let built = spec_example_builder().build().unwrap();
    let value = EntryIndex::raw("7-00000001.wal", &built.sections[0]).unwrap();
    let mut fields = Vec::new();
    // entry_count, then an unknown field 99 (varint 5), then everything else.
    fields.extend_from_slice(&[0x48, 0x02]);
    fields.extend_from_slice(&[0x98, 0x06, 0x05]);
    let normal = value.encode();
    fields.extend_from_slice(&normal[..normal.len()]);
    assert_eq!(entry_index::decode(&fields).unwrap(), entry_index::decode(&normal).unwrap());
    // A value that begins with entry_size_bytes (tag 0x30, the ASCII digit '0') is still v3,
    // not a legacy string value.
    let mut starts_with_digit =
        EntryIndex { entry_size_bytes: value.entry_size_bytes, ..Default::default() }.encode();
    starts_with_digit.extend(EntryIndex { entry_size_bytes: None, ..value.clone() }.encode());
    assert_eq!(starts_with_digit[0], b'0');
    assert_eq!(entry_index::decode(&starts_with_digit).unwrap(), entry_index::decode(&normal).unwrap());
    // The same fields in reverse order.
    let mut reversed = Vec::new();
    let mut single = |m: EntryIndex| {
        reversed.splice(0..0, m.encode());
    };
    single(EntryIndex { version: value.version, ..Default::default() });
    single(EntryIndex { location: value.location.clone(), ..Default::default() });
    single(EntryIndex { file_type: value.file_type, ..Default::default() });
    single(EntryIndex { message_count: value.message_count, ..Default::default() });
    single(EntryIndex { entry_size_bytes: value.entry_size_bytes, ..Default::default() });
    single(EntryIndex { entry_count: value.entry_count, ..Default::default() });
    single(EntryIndex { entry_offsets: value.entry_offsets.clone(), ..Default::default() });
    let IndexValue::Raw(record) = entry_index::decode(&reversed).unwrap() else { panic!("RAW") };
    assert_eq!((record.boundaries, record.index_type, record.file_size), (vec![2, 3], None, None));
}

// ---- Entry offsets (FastPFOR) ------------------------------------------------------------------

// spec-rule: 9a592b674e [Writer] compression_type MUST be FastPFOR (1), and compressed_payload MUST hold e…
#[test]
fn entry_offsets_spec_example_2_3() {
    // Spec "Entry offsets", Example; Appendix D; addendum §11.6.
    assert_eq!(entry_offsets::encode(&[2, 3]).unwrap(), words("00000002 00000000 00008182"));
    assert_eq!(entry_offsets::encode_to_bytes(&[2, 3]).unwrap(), unhex("00000002 00000000 00008182"));
    assert_eq!(entry_offsets::decode_from_bytes(&unhex("00000002 00000000 00008182")).unwrap(), [2, 3]);
}

#[test]
fn entry_offsets_40_single_record_entries_and_their_27_byte_message() {
    // Appendix D, addendum §11.7.
    let a: Vec<u32> = (1..=40).collect();
    let expected = words("00000028 00000001 ffffffff 81818181 81818181");
    assert_eq!(entry_offsets::encode(&a).unwrap(), expected);
    assert_eq!(entry_offsets::decode(&expected).unwrap(), a);
    let message = EntryOffsets {
        compression_type: Some(CompressionType::FastPfor as i32),
        uncompressed_size: Some(160),
        compressed_payload: Some(entry_offsets::encode_to_bytes(&a).unwrap()),
    };
    let bytes = message.encode_to_vec();
    assert_eq!(bytes, unhex(ENTRY_OFFSETS_40));
    assert_eq!(bytes.len(), 27);
    assert_eq!(EntryOffsets::decode(bytes.as_slice()).unwrap(), message);

    // The RAW value of 40 single-record entries carries exactly this message.
    let mut builder = WalObjectBuilder::new();
    for i in 0..40u8 {
        builder.add_entry(LogId(1), vec![i], 1).unwrap();
    }
    let built = builder.build().unwrap();
    let value = EntryIndex::raw("w", &built.sections[0]).unwrap();
    assert_eq!(value.entry_offsets, Some(message));
}

// spec-rule: 9a592b674e [Writer] compression_type MUST be FastPFOR (1), and compressed_payload MUST hold e…
#[test]
fn entry_offsets_addendum_11_8_vectors() {
    // Addendum §11.8, computed with JavaFastPFOR 0.2.1's IntegratedIntCompressor.
    let thirty_two_twos_then_fives: Vec<u32> =
        (1..=32).map(|i| 2 * i).chain((1..=32).map(|i| 64 + 5 * i)).collect();
    let cases: Vec<(Vec<u32>, &str)> = vec![
        (vec![1, 2], "00000002 00000000 00008181"),
        (vec![5, 6, 10], "00000003 00000000 00848185"),
        (vec![200, 100_000, 100_001], "00000003 00000000 0b588148 00008186"),
        (vec![1, 2_147_483_647], "00000002 00000000 7f7f7e81 0000877f"),
        ((1..=32).collect(), "00000020 00000001 ffffffff"),
        ((1..=33).map(|i| 3 * i).collect(), "00000021 00000002 ffffffff ffffffff 00000083"),
        (
            thirty_two_twos_then_fives,
            "00000040 00000002 aaaaaaaa aaaaaaaa 00000003 6db6db6d db6db6db b6db6db6",
        ),
        ((1..=128).collect(), "00000080 01010101 ffffffff ffffffff ffffffff ffffffff"),
    ];
    for (a, expected) in cases {
        let expected = words(expected);
        assert_eq!(entry_offsets::encode(&a).unwrap(), expected, "encode {a:?}");
        assert_eq!(entry_offsets::decode(&expected).unwrap(), a, "decode {expected:08x?}");
    }
}

// ---- File index -----------------------------------------------------------------------------

// spec-rule: edd7fbe36c [All] An implementation that writes a structure defined by a field table MUST writ…
#[test]
fn file_index_spec_example_46_bytes_and_base64() {
    // Spec "File index", Example; addendum §11.5.
    let index = spec_file_index();
    assert_eq!(index.encode(), unhex(SPEC_FILE_INDEX));
    assert_eq!(index.encode().len(), 46);
    assert_eq!(index.to_base64(), text_of(SPEC_FILE_INDEX_BASE64_FILE));
    assert_eq!(FileIndex::decode(&unhex(SPEC_FILE_INDEX)).unwrap(), index);
    assert_eq!(FileIndex::from_base64(text_of(SPEC_FILE_INDEX_BASE64_FILE)).unwrap(), index);
}

// spec-rule: 41cc9e9a8e [Reader] A reader MUST read a PARQUET record's entries by these steps.
#[test]
fn file_index_spec_lookups() {
    // Addendum §11.5: 0 → file 1; 2 → file 1; 3 → file 2 (base 3); 6 → file 2; 7 → error.
    let index = spec_file_index();
    let at = |o| index.locate(0, o).map(|f| (f.name, f.base_offset));
    assert_eq!(at(0).unwrap(), ("7-0.parquet", 0));
    assert_eq!(at(2).unwrap(), ("7-0.parquet", 0));
    assert_eq!(at(3).unwrap(), ("7-3.parquet", 3));
    assert_eq!(at(6).unwrap(), ("7-3.parquet", 3));
    assert!(at(7).is_err());
}

#[test]
fn file_index_ursa_lookup_example() {
    // Addendum §11.5, Ursa's CompactedObjectFileIndexTest: last offsets 10, 20, 30; 15 → the
    // second file with base offset 11.
    let index = FileIndex::new(
        [10u64, 20, 30]
            .iter()
            .map(|&o| FileIndexEntry { last_offset: o, name: format!("ursa-{o}.parquet") })
            .collect(),
    )
    .unwrap();
    let found = index.locate(0, 15).unwrap();
    assert_eq!(
        (found.position, found.name, found.base_offset, found.last_offset),
        (1, "ursa-20.parquet", 11, 20)
    );
}

// ---- Legacy (Appendix C) -------------------------------------------------------------------

#[test]
fn appendix_c_legacy_wal_object() {
    // Two logs, three entries, tuples out of order; payload offsets relative to the region.
    let mut object = Vec::new();
    object.extend_from_slice(&96i64.to_be_bytes());
    for (log, entry_id, offset, length) in [(7i64, 2i64, 5i64, 3i64), (9, 1, 2, 3), (7, 0, 0, 2)] {
        for field in [log, entry_id, offset, length] {
            object.extend_from_slice(&field.to_be_bytes());
        }
    }
    object.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(legacy::detect_wal_object(&object), DetectedFormat::Legacy);
    let parsed = LegacyWalObject::parse(Bytes::from(object.clone())).unwrap();
    assert_eq!(
        parsed.tuples(),
        [
            LegacyTuple { log_id: LogId(7), entry_id: 2, payload_offset: 5, payload_length: 3 },
            LegacyTuple { log_id: LogId(9), entry_id: 1, payload_offset: 2, payload_length: 3 },
            LegacyTuple { log_id: LogId(7), entry_id: 0, payload_offset: 0, payload_length: 2 },
        ]
    );
    let log7: Vec<_> = parsed.entries_of(LogId(7)).into_iter().map(|(t, p)| (t.entry_id, p)).collect();
    assert_eq!(log7, [(0, Bytes::from_static(&[1, 2])), (2, Bytes::from_static(&[6, 7, 8]))]);
    assert_eq!(parsed.entry(1).unwrap().1.as_ref(), [3, 4, 5]);
    // The v3 reader names the legacy version instead of misparsing it.
    let err = WalObject::parse(Bytes::from(object)).unwrap_err();
    assert!(err.to_string().contains("version 1 or 2"), "{err}");
}

#[test]
fn appendix_c_legacy_index_values() {
    let v1 = b"00000000000000000003-00000000000000000008-2024/01/02/my-wal-object-5";
    let parsed = LegacyIndexValue::parse(v1).unwrap();
    assert_eq!(
        parsed,
        LegacyIndexValue {
            version: LegacyVersion::V1,
            message_count: 3,
            entry_size_bytes: 8,
            location: "2024/01/02/my-wal-object".into(),
            entry_id: 5,
            file_type: None,
        }
    );
    assert_eq!(parsed.effective_file_type(), FileType::Raw);
    let v2 = b"00000000000000000001-00000000000000000042-a-b-c-17-PARQUET";
    assert_eq!(
        LegacyIndexValue::parse_version(v2, LegacyVersion::V2).unwrap(),
        LegacyIndexValue {
            version: LegacyVersion::V2,
            message_count: 1,
            entry_size_bytes: 42,
            location: "a-b-c".into(),
            entry_id: 17,
            file_type: Some(FileType::Parquet),
        }
    );
    assert!(LegacyIndexValue::parse_version(v2, LegacyVersion::V1).is_err());
    // Addendum §11.11: detection, and an error from the v3 decoder naming the version.
    assert_eq!(legacy::detect_index_value(&unhex(SPEC_RAW)), DetectedFormat::V3);
    assert_eq!(legacy::detect_index_value(v2), DetectedFormat::Legacy);
    let err = entry_index::decode(v2).unwrap_err();
    assert!(err.to_string().contains("version 2 string value"), "{err}");
    let err = entry_index::decode(v1).unwrap_err();
    assert!(err.to_string().contains("version 1 string value"), "{err}");
    assert_eq!(legacy::detect_wal_object(&unhex(SPEC_WAL)), DetectedFormat::V3);
}
