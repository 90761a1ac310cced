//! Companion files ("Companion files"; addendum §6.3, §11.10, §12 row 4): the pinned vector,
//! layout rules, strict reading of bad input, and round-trip properties.

use std::io::{Read, Write};

use flate2::Compression;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use lakestream_format::companion::{
    self, Companion, CompanionRow, ReadOptions, SENTINEL, WriteOptions, read_companion, write_companion,
};
use lakestream_format::{ErrorClass, FormatError};
use proptest::prelude::*;

const T: i64 = 1_700_000_000_000;

fn row(offset: u64, record_count: u32, entry_size: u32, cumulative_size: u64) -> CompanionRow {
    CompanionRow { offset, record_count, timestamp_ms: T, entry_size, cumulative_size, schema_version: None }
}

/// The running example's two entries (§11.10).
fn example_rows() -> [CompanionRow; 2] {
    [row(0, 2, 5, 5), row(2, 1, 3, 8)]
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    MultiGzDecoder::new(bytes).read_to_end(&mut out).unwrap();
    out
}

fn gzip(content: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(content).unwrap();
    encoder.finish().unwrap()
}

fn framed(json: &str) -> Vec<u8> {
    let mut out = (json.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(json.as_bytes());
    out
}

/// Builds companion content from raw JSON blocks and a raw offset map.
fn content(blocks: &[&str], map: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for block in blocks {
        out.extend(framed(block));
    }
    out.extend(SENTINEL.to_be_bytes());
    out.extend(framed(map));
    out
}

fn read(content: &[u8]) -> Result<Companion, FormatError> {
    read_companion(&gzip(content), ReadOptions::default())
}

const M0: &str = "Eg8IABACGIDQlf+8MSAFKAU=";
const M1: &str = "Eg8IAhABGIDQlf+8MSADKAg=";

fn example_block() -> String {
    format!(r#"[{{"metadata":"{M0}","offset":"0"}},{{"metadata":"{M1}","offset":"2"}}]"#)
}

fn assert_corrupt(result: Result<Companion, FormatError>, needle: &str) {
    let err = result.expect_err("bad input was accepted");
    assert_eq!(err.class(), ErrorClass::CorruptData, "{err}");
    assert!(err.to_string().contains(needle), "error {err:?} does not mention {needle:?}");
}

// spec-rule: edd7fbe36c [All] An implementation that writes a structure defined by a field table MUST writ…
// spec-rule: f396ef517a [Compactor] A compactor MUST write every companion file in this layout.
#[test]
fn vector_11_10_metadata_values_are_byte_exact() {
    let [first, second] = example_rows();
    assert_eq!(first.metadata_base64().unwrap(), M0);
    assert_eq!(second.metadata_base64().unwrap(), M1);
    assert_eq!(CompanionRow::from_metadata_base64(M0).unwrap(), first);
    assert_eq!(CompanionRow::from_metadata_base64(M1).unwrap(), second);
}

// spec-rule: f396ef517a [Compactor] A compactor MUST write every companion file in this layout.
#[test]
fn vector_11_10_uncompressed_content_is_byte_exact() {
    let options = WriteOptions::default();
    let content = gunzip(&write_companion(&example_rows(), options).unwrap());
    let mut expected = hex::decode("0000006b").unwrap();
    expected.extend_from_slice(example_block().as_bytes());
    expected.extend(hex::decode("7fffffff0000000d").unwrap());
    expected.extend_from_slice(br#"{"0":0,"2":1}"#);
    assert_eq!(expected.len(), 132);
    assert_eq!(content, expected);
}

// spec-rule: 03f320ef42 [Reader] To find the row of the entry that holds offset o, a reader MUST look up t…
#[test]
fn vector_11_10_lookups_use_the_numeric_floor() {
    let gz = write_companion(&example_rows(), WriteOptions::default()).unwrap();
    let companion = read_companion(&gz, ReadOptions::default()).unwrap();
    assert_eq!(companion.rows(), &example_rows());
    assert_eq!(companion.row_holding(0), Some(0));
    // o = 1 lies inside the first entry: Ursa's exact-match default fails here (§12 row 4).
    assert_eq!(companion.row_holding(1), Some(0));
    assert_eq!(companion.row_holding(2), Some(1));
    assert_eq!(companion.row_holding(3), None, "offset 3 is past the last entry");
}

// spec-rule: 03f320ef42 [Reader] To find the row of the entry that holds offset o, a reader MUST look up t…
#[test]
fn lookup_compares_offsets_as_numbers_not_strings() {
    // As strings "10" < "9"; as numbers the entry starting at 10 holds 10 and 57.
    let rows = [row(8, 1, 1, 1), row(9, 1, 1, 2), row(10, 90, 1, 3)];
    let companion =
        read_companion(&write_companion(&rows, WriteOptions::default()).unwrap(), ReadOptions::default())
            .unwrap();
    assert_eq!(companion.row_holding(7), None, "offset before the first entry");
    assert_eq!(companion.row_holding(9), Some(1));
    assert_eq!(companion.row_holding(10), Some(2));
    assert_eq!(companion.row_holding(57), Some(2));
    assert_eq!(companion.row_holding(99), Some(2));
    assert_eq!(companion.row_holding(100), None);
}

// spec-rule: 595d0b1791 [Reader] A reader MUST accept an empty last block.
#[test]
fn reader_accepts_an_empty_last_block() {
    let companion = read(&content(&[&example_block(), "[]"], r#"{"2":1,"0":0}"#)).unwrap();
    assert_eq!(companion.rows(), &example_rows());
    assert_eq!(companion.offset_map(), &[(0, 0), (2, 1)]);
}

#[test]
fn reader_refuses_an_empty_block_before_the_last() {
    assert_corrupt(read(&content(&["[]", &example_block()], r#"{"0":0,"2":1}"#)), "block 0 is empty");
}

#[test]
fn reader_accepts_multi_member_gzip() {
    let bytes = content(&[&example_block()], r#"{"0":0,"2":1}"#);
    let mut two_members = gzip(&bytes[..50]);
    two_members.extend(gzip(&bytes[50..]));
    let companion = read_companion(&two_members, ReadOptions::default()).unwrap();
    assert_eq!(companion.rows(), &example_rows());
}

#[test]
fn reader_ignores_unknown_row_keys_and_key_order() {
    let block =
        format!(r#"[{{"offset":"0","extra":[1,2],"metadata":"{M0}"}},{{"metadata":"{M1}","offset":"2"}}]"#);
    assert_eq!(read(&content(&[&block], r#"{"0":0,"2":1}"#)).unwrap().rows(), &example_rows());
}

#[test]
fn zero_rows_round_trip_as_one_empty_block() {
    let gz = write_companion(&[], WriteOptions::default()).unwrap();
    assert_eq!(gunzip(&gz), content(&["[]"], "{}"));
    let companion = read_companion(&gz, ReadOptions::default()).unwrap();
    assert!(companion.rows().is_empty());
    assert_eq!(companion.row_holding(0), None);
}

#[test]
fn bad_gzip_is_refused() {
    assert_corrupt(read_companion(b"", ReadOptions::default()), "empty");
    assert_corrupt(read_companion(b"not gzip at all", ReadOptions::default()), "gzip");
    let gz = write_companion(&example_rows(), WriteOptions::default()).unwrap();
    assert_corrupt(read_companion(&gz[..gz.len() - 6], ReadOptions::default()), "gzip");
}

#[test]
fn decompressed_size_is_bounded() {
    let bomb = gzip(&vec![0u8; 1 << 20]);
    let options = ReadOptions { max_decompressed_bytes: 4096 };
    assert_corrupt(read_companion(&bomb, options), "max_decompressed_bytes");
    let gz = write_companion(&example_rows(), WriteOptions::default()).unwrap();
    assert!(read_companion(&gz, ReadOptions { max_decompressed_bytes: 132 }).is_ok());
    assert_corrupt(read_companion(&gz, ReadOptions { max_decompressed_bytes: 131 }), "exceeds the limit");
}

#[test]
fn bad_json_is_refused() {
    assert_corrupt(read(&content(&["[{"], "{}")), "block 0 is not a JSON array");
    assert_corrupt(read(&content(&[r#"{"metadata":"x"}"#], "{}")), "block 0 is not a JSON array");
    assert_corrupt(read(&content(&[r#"[{"offset":"0"}]"#], "{}")), "missing field `metadata`");
    assert_corrupt(read(&content(&[&example_block()], "[0]")), "offset map is not a JSON object");
    assert_corrupt(read(&content(&[&example_block()], r#"{"0":0,"2":1} x"#)), "offset map");
    assert_corrupt(read(&content(&[&example_block()], r#"{"0":0,"2":-1}"#)), "offset map");
    let dup_field = format!(r#"[{{"metadata":"{M0}","offset":"0","offset":"0"}}]"#);
    assert_corrupt(read(&content(&[&dup_field], r#"{"0":0}"#)), "duplicate field");
    let invalid_utf8 = {
        let mut bytes = framed(&example_block());
        bytes[10] = 0xff;
        bytes.extend(SENTINEL.to_be_bytes());
        bytes.extend(framed("{}"));
        bytes
    };
    assert_corrupt(read(&invalid_utf8), "block 0");
}

#[test]
fn bad_metadata_is_refused() {
    let not_base64 = r#"[{"metadata":"Eg8I*BACGIDQlf+8MSAFKAU=","offset":"0"}]"#;
    assert_corrupt(read(&content(&[not_base64], r#"{"0":0}"#)), "row 0: row metadata");
    let no_padding = r#"[{"metadata":"Eg8IABACGIDQlf+8MSAFKAU","offset":"0"}]"#;
    assert_corrupt(read(&content(&[no_padding], r#"{"0":0}"#)), "not Base64");
    // Base64 of bytes that are not a protobuf message (a truncated length-delimited field).
    let not_proto = r#"[{"metadata":"Eg8I","offset":"0"}]"#;
    assert_corrupt(read(&content(&[not_proto], r#"{"0":0}"#)), "not a LakehouseEntryMetadata");
    // An empty message: no entryHeader.
    let no_header = r#"[{"metadata":"","offset":"0"}]"#;
    assert_corrupt(read(&content(&[no_header], r#"{"0":0}"#)), "no entryHeader");
    // entryHeader without writtenTimestamp: 12 06 08 00 10 01 20 00 ... built by hand.
    let header = [0x12, 0x08, 0x08, 0x00, 0x10, 0x01, 0x20, 0x00, 0x28, 0x00];
    let text = base64_of(&header);
    let missing_ts = format!(r#"[{{"metadata":"{text}","offset":"0"}}]"#);
    assert_corrupt(read(&content(&[&missing_ts], r#"{"0":0}"#)), "writtenTimestamp");
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[test]
fn layout_errors_are_refused() {
    let good = content(&[&example_block()], r#"{"0":0,"2":1}"#);
    // Cut inside the first block, inside the sentinel, and inside the offset map.
    assert_corrupt(read(&good[..40]), "declares 107 bytes");
    assert_corrupt(read(&good[..113]), "where the block length or sentinel was expected");
    assert_corrupt(read(&good[..115]), "where the offset map length was expected");
    assert_corrupt(read(&good[..good.len() - 1]), "offset map");
    // No sentinel: the map's length is read as a block, and the content ends.
    let no_sentinel = [framed(&example_block()), framed(r#"{"0":0,"2":1}"#)].concat();
    assert_corrupt(read(&no_sentinel), "block 1 is not a JSON array");
    let only_block = framed(&example_block());
    assert_corrupt(read(&only_block), "sentinel was expected");
    assert_corrupt(read(&[]), "sentinel was expected");
    let mut negative = good.clone();
    negative[0] = 0x80;
    assert_corrupt(read(&negative), "negative block length");
    let mut trailing = good;
    trailing.push(0);
    assert_corrupt(read(&trailing), "1 bytes follow the offset map");
}

#[test]
fn offset_map_keys_must_be_canonical_unique_and_agree_with_rows() {
    let block = example_block();
    let cases = [
        (r#"{"00":0,"2":1}"#, "leading zero"),
        (r#"{"0":0,"02":1}"#, "leading zero"),
        (r#"{"+0":0,"2":1}"#, "not an unsigned decimal"),
        (r#"{"-0":0,"2":1}"#, "not an unsigned decimal"),
        (r#"{"":0,"2":1}"#, "empty"),
        (r#"{"0":0,"2":1,"2":1}"#, "twice"),
        (r#"{"0":0,"0":0,"2":1}"#, "twice"),
        (r#"{"0":0,"2":2}"#, "names row 2, but the file has 2 rows"),
        (r#"{"0":0,"2":0}"#, "names row 0, whose offset is 0"),
        (r#"{"0":0}"#, "1 keys for 2 rows"),
        (r#"{"0":0,"2":1,"99999999999999999999":1}"#, "larger than i64::MAX"),
    ];
    for (map, needle) in cases {
        assert_corrupt(read(&content(&[&block], map)), needle);
    }
}

#[test]
fn rows_must_hold_consecutive_entries_matching_their_offsets() {
    let wrong_offset = format!(r#"[{{"metadata":"{M0}","offset":"1"}}]"#);
    assert_corrupt(read(&content(&[&wrong_offset], r#"{"1":0}"#)), "differs from its entryHeader offset");
    let gap = format!(r#"[{{"metadata":"{M1}","offset":"2"}},{{"metadata":"{M0}","offset":"0"}}]"#);
    assert_corrupt(read(&content(&[&gap], r#"{"0":1,"2":0}"#)), "consecutive entries");
    let non_canonical = format!(r#"[{{"metadata":"{M0}","offset":"00"}}]"#);
    assert_corrupt(
        read(&content(&[&non_canonical], r#"{"0":0}"#)),
        "row 0: offset \"00\" has a leading zero",
    );
}

#[test]
fn blocks_split_at_the_configured_row_count() {
    let rows: Vec<CompanionRow> = (0..7).map(|i| row(i, 1, 10, (i + 1) * 10)).collect();
    let gz = write_companion(&rows, WriteOptions { max_rows_per_block: 3, gzip_level: 1 }).unwrap();
    let text = gunzip(&gz);
    let mut lens = Vec::new();
    let mut pos = 0;
    loop {
        let len = i32::from_be_bytes(text[pos..pos + 4].try_into().unwrap());
        pos += 4;
        if len == SENTINEL {
            break;
        }
        let block: Vec<serde_json::Value> = serde_json::from_slice(&text[pos..pos + len as usize]).unwrap();
        lens.push(block.len());
        pos += len as usize;
    }
    assert_eq!(lens, [3, 3, 1]);
    assert_eq!(read_companion(&gz, ReadOptions::default()).unwrap().rows(), rows.as_slice());
}

#[test]
fn parse_content_reads_uncompressed_content() {
    let parsed = companion::parse_content(&content(&[&example_block()], r#"{"0":0,"2":1}"#)).unwrap();
    assert_eq!(parsed.rows(), &example_rows());
}

fn rows_strategy() -> impl Strategy<Value = Vec<CompanionRow>> {
    (
        0u64..1 << 40,
        prop::collection::vec(
            (1u32..5000, 0u32..1 << 20, any::<i64>(), prop::option::of(any::<i64>())),
            0..40,
        ),
    )
        .prop_map(|(start, shapes)| {
            let mut offset = start;
            let mut cumulative = 0u64;
            shapes
                .into_iter()
                .map(|(record_count, entry_size, timestamp_ms, schema_version)| {
                    cumulative += u64::from(entry_size);
                    let row = CompanionRow {
                        offset,
                        record_count,
                        timestamp_ms,
                        entry_size,
                        cumulative_size: cumulative,
                        schema_version,
                    };
                    offset += u64::from(record_count);
                    row
                })
                .collect()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn companion_round_trips_and_every_offset_finds_its_row(
        rows in rows_strategy(),
        max_rows_per_block in 1usize..6,
        probe in any::<prop::sample::Index>(),
    ) {
        let gz = write_companion(&rows, WriteOptions { max_rows_per_block, gzip_level: 1 }).unwrap();
        let companion = read_companion(&gz, ReadOptions::default()).unwrap();
        prop_assert_eq!(companion.rows(), rows.as_slice());
        for (index, row) in rows.iter().enumerate() {
            prop_assert_eq!(companion.row_holding(row.offset), Some(index));
            prop_assert_eq!(companion.row_holding(row.end_offset() - 1), Some(index));
            let inside = row.offset + probe.index(row.record_count as usize) as u64;
            prop_assert_eq!(companion.row_holding(inside), Some(index));
        }
        if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
            prop_assert_eq!(companion.row_holding(last.end_offset()), None);
            if first.offset > 0 {
                prop_assert_eq!(companion.row_holding(first.offset - 1), None);
            }
        }
    }

    #[test]
    fn companion_reader_never_panics_on_arbitrary_content(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = read(&bytes);
        let _ = read_companion(&bytes, ReadOptions::default());
    }
}
