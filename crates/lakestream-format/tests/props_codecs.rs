//! Property tests of the core codecs: round trips of every codec, and decoders that never
//! panic on arbitrary or mutated input. Case counts stay modest so debug builds stay fast.

use std::collections::BTreeMap;

use bytes::Bytes;
use lakestream_format::entry_index::{self, EntryIndex, IndexValue, ParquetRange};
use lakestream_format::entry_offsets;
use lakestream_format::file_index::{FileIndex, FileIndexEntry};
use lakestream_format::legacy::{LegacyIndexValue, LegacyVersion, LegacyWalObject};
use lakestream_format::wal::{WalIndex, WalObject, WalObjectBuilder};
use lakestream_format::{FileType, LogId};
use proptest::prelude::*;

/// Entries for a few logs: (log, payload, record_count), in the order a writer accepts them.
fn wal_entries() -> impl Strategy<Value = Vec<(u64, Vec<u8>, u32)>> {
    let log = prop_oneof![0u64..4, Just(i64::MAX as u64), 1_000_000u64..1_000_010];
    let record_count = prop_oneof![1u32..4, 1u32..100_000, Just(i32::MAX as u32 / 64)];
    prop::collection::vec((log, prop::collection::vec(any::<u8>(), 0..40), record_count), 1..60)
}

fn build(entries: &[(u64, Vec<u8>, u32)]) -> lakestream_format::wal::BuiltWalObject {
    let mut builder = WalObjectBuilder::new();
    for (log, payload, count) in entries {
        builder.add_entry(LogId(*log), payload.clone(), *count).unwrap();
    }
    let predicted = builder.object_len();
    let built = builder.build().unwrap();
    assert_eq!(built.bytes.len() as u64, predicted, "object_len predicts the built length");
    built
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    // spec-rule: 04717da605 [Reader] A reader MUST parse WAL objects by the layout below.
    // spec-rule: e7ec250a7b [Writer] The entries of a log section MUST be listed in the order of their off…
    #[test]
    fn wal_random_entries_of_several_logs_parse_back_exactly(entries in wal_entries()) {
        let built = build(&entries);
        let object = WalObject::parse(built.bytes.clone()).unwrap();
        let mut expected: BTreeMap<u64, Vec<(Vec<u8>, u32)>> = BTreeMap::new();
        for (log, payload, count) in &entries {
            expected.entry(*log).or_default().push((payload.clone(), *count));
        }
        prop_assert_eq!(object.index().sections().len(), expected.len());
        for (log, want) in &expected {
            let section = object.section(LogId(*log)).unwrap();
            let payloads = object.payloads(LogId(*log)).unwrap().unwrap();
            let got: Vec<(Vec<u8>, u32)> =
                payloads.iter().zip(&section.entries).map(|(p, e)| (p.to_vec(), e.record_count)).collect();
            prop_assert_eq!(&got, want);
            // The summary handed to the writer describes the same section.
            let summary = built.section(LogId(*log)).unwrap();
            prop_assert_eq!(&summary.entries, &section.entries);
            prop_assert_eq!(summary.record_count, section.record_count());
            prop_assert_eq!(summary.payload_bytes, section.payload_bytes());
            prop_assert_eq!(summary.payload_region_len, object.payload_region().len() as u64);
            prop_assert_eq!(summary.sections_in_object, expected.len());
            // Its RAW value decodes to a record that passes the addendum §2 checks.
            let value = EntryIndex::raw("wal/object", summary).unwrap().encode();
            let IndexValue::Raw(record) = entry_index::decode(&value).unwrap() else { panic!("RAW") };
            section.check_matches_record(&record).unwrap();
            prop_assert_eq!(record.record_counts(), section.entries.iter().map(|e| e.record_count).collect::<Vec<_>>());
        }
        // Parsing only the index region (a ranged read) gives the same index.
        let index_len = lakestream_format::wal::index_length(&built.bytes[..4]).unwrap() as usize;
        prop_assert_eq!(&WalIndex::parse(&built.bytes[..4 + index_len]).unwrap(), object.index());
        // The payload region is the payloads in the order accepted.
        let concatenated: Vec<u8> = entries.iter().flat_map(|(_, p, _)| p.clone()).collect();
        prop_assert_eq!(object.payload_region().as_ref(), concatenated.as_slice());
    }

    // spec-rule: 65817223a0 [Reader] A reader MUST find a log's section by its log_id, and MUST NOT depend…
    // spec-rule: 8e4b1b0018 [Reader] A reader MUST locate each payload by its payload_offset, and MUST NOT…
    #[test]
    fn wal_section_order_never_matters_to_the_reader(entries in wal_entries(), seed in any::<u64>()) {
        let built = build(&entries);
        let mut order: Vec<LogId> = built.sections.iter().map(|s| s.log_id).collect();
        let len = order.len();
        order.rotate_left((seed % len as u64) as usize);
        if seed & 1 == 1 { order.reverse(); }
        let mut builder = WalObjectBuilder::new();
        for (log, payload, count) in &entries {
            builder.add_entry(LogId(*log), payload.clone(), *count).unwrap();
        }
        let reordered = WalObject::parse(builder.build_with_section_order(&order).unwrap().bytes).unwrap();
        let original = WalObject::parse(built.bytes).unwrap();
        for log in order {
            prop_assert_eq!(reordered.section(log), original.section(log));
            prop_assert_eq!(reordered.payloads(log).unwrap(), original.payloads(log).unwrap());
        }
    }

    #[test]
    fn wal_decoder_never_panics_on_mutated_objects(entries in wal_entries(), flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6), cut in any::<usize>()) {
        let mut bytes = build(&entries).bytes.to_vec();
        for (at, value) in flips {
            let at = at % bytes.len();
            bytes[at] = value;
        }
        bytes.truncate(cut % (bytes.len() + 1));
        let _ = WalObject::parse(Bytes::from(bytes));
    }

    #[test]
    fn wal_decoder_never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = WalObject::parse(Bytes::from(bytes.clone()));
        let _ = LegacyWalObject::parse(Bytes::from(bytes));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn fastpfor_round_trips_up_to_5000_values_with_deltas_up_to_2_pow_31_minus_1(
        deltas in prop::collection::vec(prop_oneof![0u32..4, 0u32..=i32::MAX as u32, Just(i32::MAX as u32)], 0..5000)
    ) {
        let mut sum = 0u32;
        let values: Vec<u32> = deltas.iter().map(|d| { sum = sum.wrapping_add(*d); sum }).collect();
        let words = entry_offsets::encode(&values).unwrap();
        prop_assert_eq!(words[0] as usize, values.len());
        prop_assert_eq!(entry_offsets::decode(&words).unwrap(), values.clone());
        let bytes = entry_offsets::encode_to_bytes(&values).unwrap();
        prop_assert_eq!(entry_offsets::decode_from_bytes(&bytes).unwrap(), values);
    }

    #[test]
    fn fastpfor_round_trips_increasing_boundaries(counts in prop::collection::vec(1u32..1000, 1..5000)) {
        let boundaries = entry_index::boundaries_of(&counts).unwrap();
        let words = entry_offsets::encode(&boundaries).unwrap();
        prop_assert_eq!(entry_offsets::decode(&words).unwrap(), boundaries);
    }

    #[test]
    fn fastpfor_decoder_accepts_only_canonical_words(words in prop::collection::vec(any::<u32>(), 0..40), n in 0u32..300) {
        // Arbitrary words, with word 0 sometimes a plausible count: never a panic, and whatever
        // is accepted is exactly what the encoder writes for the decoded values.
        let mut words = words;
        if let Some(first) = words.first_mut() && n % 2 == 0 { *first = n; }
        if let Ok(values) = entry_offsets::decode(&words) {
            prop_assert_eq!(entry_offsets::encode(&values).unwrap(), words);
        }
    }

    #[test]
    fn fastpfor_decoder_never_panics_on_mutated_words(counts in prop::collection::vec(1u32..300, 1..300), at in any::<usize>(), value in any::<u32>()) {
        let mut words = entry_offsets::encode(&entry_index::boundaries_of(&counts).unwrap()).unwrap();
        let at = at % words.len();
        words[at] = value;
        if let Ok(values) = entry_offsets::decode(&words) {
            prop_assert_eq!(entry_offsets::encode(&values).unwrap(), words);
        }
    }

    #[test]
    fn raw_values_round_trip(counts in prop::collection::vec(1u32..10_000, 1..300), extra in 0u64..1000, sections in 1usize..5, location in "[a-z0-9/_-]{1,40}") {
        let size: u64 = counts.iter().map(|&c| u64::from(c) * 3).sum();
        let parts = entry_index::RawParts {
            location: &location,
            record_counts: &counts,
            entry_size_bytes: size,
            payload_region_len: size + extra,
            single_section: sections == 1,
        };
        let value = EntryIndex::raw_from_parts(&parts).unwrap();
        prop_assert_eq!(value.entry_offsets.is_some(), counts.len() > 1);
        let IndexValue::Raw(record) = entry_index::decode(&value.encode()).unwrap() else { panic!("RAW") };
        prop_assert_eq!(record.record_counts(), counts.clone());
        prop_assert_eq!(record.entry_count as usize, counts.len());
        prop_assert_eq!(u64::from(record.message_count), counts.iter().map(|&c| u64::from(c)).sum::<u64>());
        prop_assert_eq!(record.entry_size_bytes, size);
        prop_assert_eq!(record.file_size, Some((size + extra) as i64));
        prop_assert_eq!(record.offset_in_file, Some(-1));
        let compact_iff_one_section = if sections == 1 { 1 } else { 0 };
        prop_assert_eq!(record.index_type, Some(compact_iff_one_section));
        prop_assert_eq!(record.location, location);
    }

    #[test]
    fn parquet_values_and_file_indexes_round_trip(
        start in 0u64..1_000_000,
        lengths in prop::collection::vec(1u64..10_000, 1..20),
        cumulative_start in 0u64..1 << 40,
        size in 0u64..1 << 31,
    ) {
        let mut last = start;
        let entries: Vec<FileIndexEntry> = lengths
            .iter()
            .enumerate()
            .map(|(i, len)| {
                last += len;
                FileIndexEntry { last_offset: last - 1, name: format!("ursa-{i:04}.parquet") }
            })
            .collect();
        let files = FileIndex::new(entries).unwrap();
        prop_assert_eq!(&FileIndex::decode(&files.encode()).unwrap(), &files);
        prop_assert_eq!(&FileIndex::from_base64(&files.to_base64()).unwrap(), &files);
        let range = ParquetRange { start, end: last, cumulative_start, cumulative_end: cumulative_start + size };
        let value = EntryIndex::parquet(range, &files).unwrap();
        let IndexValue::Parquet(record) = entry_index::decode(&value.encode()).unwrap() else { panic!("PARQUET") };
        prop_assert_eq!(&record.file_index, &files);
        prop_assert_eq!(u64::from(record.message_count), last - start);
        prop_assert_eq!(record.entry_size_bytes, size);
        prop_assert_eq!(record.location.as_deref(), Some(files.first_name()));
        record.check_range(last).unwrap();
        // Lookup agrees with a linear scan.
        for offset in [start, start + lengths[0] - 1, (start + last) / 2, last - 1] {
            let found = files.locate(start, offset).unwrap();
            let position = files.entries().iter().position(|e| e.last_offset >= offset).unwrap();
            prop_assert_eq!(found.position, position);
            let base = if position == 0 { start } else { files.entries()[position - 1].last_offset + 1 };
            prop_assert_eq!(found.base_offset, base);
            prop_assert!(found.base_offset <= offset && offset <= found.last_offset);
        }
    }

    #[test]
    fn entry_index_and_file_index_decoders_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = entry_index::decode(&bytes);
        let _ = FileIndex::decode(&bytes);
        let _ = FileIndex::from_base64(&String::from_utf8_lossy(&bytes));
        let _ = LegacyIndexValue::parse(&bytes);
    }

    #[test]
    fn legacy_values_round_trip(
        message_count in 0u64..=i64::MAX as u64,
        size in 0u64..=i64::MAX as u64,
        location in "[a-z0-9/-]{0,10}[a-z0-9]",
        entry_id in 0u64..1_000_000,
        file_type in prop::option::of(prop_oneof![Just(FileType::Raw), Just(FileType::Parquet)]),
    ) {
        let mut text = format!("{message_count:020}-{size:020}-{location}-{entry_id}");
        if let Some(file_type) = file_type {
            text.push_str(if file_type == FileType::Raw { "-RAW" } else { "-PARQUET" });
        }
        let parsed = LegacyIndexValue::parse(text.as_bytes()).unwrap();
        let version = if file_type.is_some() { LegacyVersion::V2 } else { LegacyVersion::V1 };
        prop_assert_eq!(parsed, LegacyIndexValue { version, message_count, entry_size_bytes: size, location, entry_id, file_type });
    }

    #[test]
    fn legacy_wal_objects_round_trip(entries in prop::collection::vec((0u64..5, prop::collection::vec(any::<u8>(), 0..20)), 0..20), seed in any::<u64>()) {
        // A version 1/2 writer: tuples in a scrambled order, payloads in entry order.
        let mut tuples = Vec::new();
        let mut payloads = Vec::new();
        for (entry_id, (log, payload)) in entries.iter().enumerate() {
            tuples.push([*log as i64, entry_id as i64, payloads.len() as i64, payload.len() as i64]);
            payloads.extend_from_slice(payload);
        }
        if !tuples.is_empty() {
            let len = tuples.len();
            tuples.rotate_left((seed % len as u64) as usize);
        }
        let mut object = ((tuples.len() * 32) as i64).to_be_bytes().to_vec();
        for tuple in &tuples {
            for field in tuple {
                object.extend_from_slice(&field.to_be_bytes());
            }
        }
        object.extend_from_slice(&payloads);
        let parsed = LegacyWalObject::parse(Bytes::from(object)).unwrap();
        for log in 0..5u64 {
            let got: Vec<Vec<u8>> = parsed.entries_of(LogId(log)).into_iter().map(|(_, p)| p.to_vec()).collect();
            let want: Vec<Vec<u8>> = entries.iter().filter(|(l, _)| *l == log).map(|(_, p)| p.clone()).collect();
            prop_assert_eq!(got, want);
        }
    }
}
