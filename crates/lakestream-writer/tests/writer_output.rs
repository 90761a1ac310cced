//! The writer's rules checked from the writer's side: the bytes our `Writer` puts in the WAL
//! root and the index values it publishes, read back here byte by byte with a parser of this
//! file's own (not the format crate's reader, which would accept or refuse on its own terms).
//! Over the in-memory stores.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use lakestream_format::entry_index::{self, EntryIndex};
use lakestream_format::{Clock, LogId, ManualClock, keys};
use lakestream_meta::lease::SeededTokens;
use lakestream_meta::{InMemoryStore, MetaStore};
use lakestream_objstore::{InMemoryStore as MemObjects, ObjectPrefix, ObjectStore};
use lakestream_writer::{AppendOptions, Writer, WriterConfig, WriterDeps};

/// One varint32 as written: its value and how many bytes it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Varint {
    value: u64,
    len: usize,
}

/// One log section as written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Section {
    log_id: i64,
    entry_count: Varint,
    /// (payload_offset, payload_size, record_count) of each entry.
    entries: Vec<(Varint, Varint, Varint)>,
}

/// A WAL object as written: its sections in object order and its payload region.
#[derive(Debug)]
struct Written {
    index_version: i32,
    sections: Vec<Section>,
    payload_region: Vec<u8>,
}

/// LEB128 as the spec defines it, without limits: the test checks the limits.
fn varint(bytes: &[u8], pos: &mut usize) -> Varint {
    let (mut value, mut len) = (0u64, 0usize);
    loop {
        let byte = bytes[*pos + len];
        value |= u64::from(byte & 0x7F) << (7 * len);
        len += 1;
        if byte & 0x80 == 0 {
            *pos += len;
            return Varint { value, len };
        }
        assert!(len < 10, "a varint runs on past 10 bytes");
    }
}

fn parse(object: &[u8]) -> Written {
    let index_length = i32::from_be_bytes(object[0..4].try_into().unwrap()) as usize;
    let region = &object[4..4 + index_length];
    let index_version = i32::from_be_bytes(region[0..4].try_into().unwrap());
    let mut pos = 4;
    let mut sections = Vec::new();
    while pos < region.len() {
        let log_id = i64::from_be_bytes(region[pos..pos + 8].try_into().unwrap());
        pos += 8;
        let entry_count = varint(region, &mut pos);
        let entries = (0..entry_count.value)
            .map(|_| (varint(region, &mut pos), varint(region, &mut pos), varint(region, &mut pos)))
            .collect();
        sections.push(Section { log_id, entry_count, entries });
    }
    assert_eq!(pos, region.len(), "the sections fill the index region exactly");
    Written { index_version, sections, payload_region: object[4 + index_length..].to_vec() }
}

/// The shortest LEB128 length of `value`.
fn shortest(value: u64) -> usize {
    ((64 - value.leading_zeros() as usize).max(1)).div_ceil(7)
}

struct Stack {
    meta: InMemoryStore,
    wal: Arc<MemObjects>,
    writer: Writer,
}

/// A writer whose objects close only when flushed, so that a test decides what shares one.
fn stack(seed: u64) -> Stack {
    let clock = ManualClock::new(1_796_000_000_000);
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let meta = InMemoryStore::with_config(1, shared.clone()).unwrap();
    let wal = Arc::new(MemObjects::new(shared));
    let deps = WriterDeps {
        meta: Arc::new(meta.clone()),
        objects: wal.clone(),
        clock: Arc::new(clock),
        tokens: Arc::new(SeededTokens::new(seed)),
    };
    let config = WriterConfig {
        flush_window: Duration::from_secs(3600),
        flush_when_idle: false,
        flush_bytes: 64 << 20,
        max_in_flight_bytes: 256 << 20,
        ..WriterConfig::default()
    };
    Stack { meta, wal, writer: Writer::start(config, deps).unwrap() }
}

impl Stack {
    /// Enqueues each group (log, entries of (payload, record count)) and flushes them into one
    /// WAL object; waits until every entry is acknowledged.
    async fn one_object(&self, groups: Vec<(LogId, Vec<(Bytes, u32)>)>) {
        let mut pending = Vec::new();
        for (log, entries) in groups {
            let group = self.writer.enqueue_many_with(log, entries, AppendOptions::default()).await.unwrap();
            pending.push(group);
        }
        self.writer.flush().await;
        for group in pending {
            for ack in group.acks().await {
                ack.unwrap();
            }
        }
    }

    /// Every WAL object written, as (name, bytes).
    async fn objects(&self) -> Vec<(String, Bytes)> {
        let listed: Vec<_> = self.wal.list(&ObjectPrefix::all(), None).collect().await;
        let mut out = Vec::new();
        for meta in listed {
            let meta = meta.unwrap();
            out.push((meta.path.to_string(), self.wal.get(&meta.path).await.unwrap()));
        }
        out
    }

    /// The raw index values of `log`, in key order, decoded by prost only (no validation).
    async fn values(&self, log: LogId) -> Vec<(String, Vec<u8>, EntryIndex)> {
        let records = self
            .meta
            .scan(&keys::partition(log), &keys::first_key(log), &keys::last_key(log), None)
            .await
            .unwrap();
        records
            .into_iter()
            .map(|r| (r.key, r.value.to_vec(), entry_index::decode_fields(&r.value).unwrap()))
            .collect()
    }
}

fn payload(len: usize, tag: u8) -> Bytes {
    Bytes::from((0..len).map(|i| tag.wrapping_add(i as u8)).collect::<Vec<u8>>())
}

// spec-rule: 6299d96336 [Writer] A writer MUST encode each varint32 in at most 5 bytes, with a value betwe…
#[tokio::test]
async fn writer_output_varint32s_take_at_most_5_bytes_and_hold_at_most_2_pow_31_minus_1() {
    // [Writer] A writer MUST encode each varint32 in at most 5 bytes, with a value between 0
    // and 2^31 − 1. Values at every encoded length, up to a record count of 2^31 − 1; our
    // writer also writes each in the fewest bytes.
    let s = stack(227);
    let counts =
        [1, 127, 128, 16_383, 16_384, 2_097_151, 2_097_152, 268_435_455, 268_435_456, i32::MAX as u32];
    let groups = counts
        .iter()
        .enumerate()
        .map(|(i, &c)| (LogId(i as u64 + 1), vec![(payload(i * 40, 1), c)]))
        .collect();
    s.one_object(groups).await;
    // A payload region past 2^14 and 2^21 bytes: offsets and sizes of 3 and 4 bytes.
    s.one_object(vec![(
        LogId(20),
        vec![(payload(20_000, 2), 1), (payload(2_100_000, 3), 1), (payload(5, 4), 1)],
    )])
    .await;
    let mut lengths_seen = std::collections::BTreeSet::new();
    for (name, object) in s.objects().await {
        let written = parse(&object);
        assert_eq!(written.index_version, 3, "{name}");
        for section in &written.sections {
            let all = std::iter::once(section.entry_count)
                .chain(section.entries.iter().flat_map(|(o, z, r)| [*o, *z, *r]));
            for v in all {
                assert!(v.len <= 5, "{name}: log {}: {v:?} takes more than 5 bytes", section.log_id);
                assert!(v.value <= i32::MAX as u64, "{name}: log {}: {v:?} exceeds 2^31-1", section.log_id);
                assert_eq!(v.len, shortest(v.value), "{name}: {v:?} is not in its fewest bytes");
                lengths_seen.insert(v.len);
            }
        }
        let counts_written: Vec<u64> =
            written.sections.iter().flat_map(|s| s.entries.iter().map(|e| e.2.value)).collect();
        assert!(counts_written.iter().all(|&c| c >= 1));
    }
    assert_eq!(lengths_seen.into_iter().collect::<Vec<_>>(), [1, 2, 3, 4, 5], "every length was exercised");
}

// spec-rule: 6a3e51f773 [Writer] A log ID MUST appear in at most one log section of an object.
#[tokio::test]
async fn writer_output_a_log_id_appears_in_at_most_one_section() {
    // [Writer] A log ID MUST appear in at most one log section of an object. Entries of three
    // logs arrive interleaved, as separate requests, into one object.
    let s = stack(229);
    let (a, b, c) = (LogId(7), LogId(70), LogId(7_000_000_000));
    let mut groups = Vec::new();
    for round in 0..4u8 {
        for log in [a, b, c, a] {
            groups.push((log, vec![(payload(3 + usize::from(round), round), 1)]));
        }
    }
    s.one_object(groups).await;
    let objects = s.objects().await;
    assert_eq!(objects.len(), 1, "one object holds every entry");
    let written = parse(&objects[0].1);
    let mut ids: Vec<i64> = written.sections.iter().map(|s| s.log_id).collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    ids.sort();
    ids.dedup();
    assert_eq!(ids, [7, 70, 7_000_000_000], "each log ID once");
    let by_log: HashMap<i64, usize> = written.sections.iter().map(|s| (s.log_id, s.entries.len())).collect();
    assert_eq!((by_log[&7], by_log[&70], by_log[&7_000_000_000]), (8, 4, 4));
}

// spec-rule: 1e8dbca8a7 [Writer] The payload of every entry, payload_size bytes from payload_offset, MUST…
#[tokio::test]
async fn writer_output_every_payload_lies_within_the_payload_region() {
    // [Writer] The payload of every entry, payload_size bytes from payload_offset, MUST lie
    // within the payload region; it holds exactly the bytes appended (checked here byte by
    // byte), including empty payloads at the region's very end.
    let s = stack(233);
    let mut expected: HashMap<i64, Vec<Bytes>> = HashMap::new();
    let mut groups = Vec::new();
    for (i, len) in [0usize, 1, 300, 0, 70_000, 5, 0].into_iter().enumerate() {
        let log = LogId(1 + (i as u64 % 3));
        let p = payload(len, i as u8);
        expected.entry(log.0 as i64).or_default().push(p.clone());
        groups.push((log, vec![(p, 1)]));
    }
    s.one_object(groups).await;
    let objects = s.objects().await;
    let written = parse(&objects[0].1);
    let region = written.payload_region.len() as u64;
    let mut covered = 0u64;
    for section in &written.sections {
        let mut got = Vec::new();
        for (offset, size, _) in &section.entries {
            let end = offset.value + size.value;
            assert!(
                end <= region,
                "log {}: payload {}..{end} past the region of {region}",
                section.log_id,
                offset.value
            );
            got.push(Bytes::copy_from_slice(&written.payload_region[offset.value as usize..end as usize]));
            covered += size.value;
        }
        assert_eq!(got, expected[&section.log_id], "log {}", section.log_id);
    }
    assert_eq!(covered, region, "the region holds the payloads and nothing else");
}

// spec-rule: 6fe0818048 [Writer] A writer MUST write every RAW record with the values that this table give…
// spec-rule: a6f5cbf2f2 [Writer] A RAW record whose entry_count is greater than 1 MUST carry entry_offsets…
// spec-rule: 9a592b674e [Writer] compression_type MUST be FastPFOR (1), and compressed_payload MUST hold e…
#[tokio::test]
async fn writer_output_a_raw_record_of_several_entries_carries_entry_offsets_from_its_section() {
    // [Writer] A RAW record whose entry_count is greater than 1 MUST carry entry_offsets,
    // computed from its log section; [Writer] compression_type MUST be FastPFOR (1). Checked
    // on the published values' bytes: the spec's A = [2, 3] gives exactly the 12 bytes
    // 00000002 00000000 00008182; a one-entry record carries no entry_offsets.
    let s = stack(354);
    let (two, one, many) = (LogId(7), LogId(8), LogId(9));
    s.one_object(vec![
        (two, vec![(payload(5, 1), 2), (payload(3, 6), 1)]),
        (one, vec![(payload(4, 9), 3)]),
        (many, (1..=40).map(|i| (payload(i, i as u8), 1)).collect()),
    ])
    .await;
    let written = parse(&s.objects().await[0].1);
    let section_counts = |log: LogId| -> Vec<u32> {
        let section = written.sections.iter().find(|s| s.log_id == log.0 as i64).unwrap();
        section.entries.iter().map(|e| e.2.value as u32).collect()
    };

    let [(key, bytes, value)] = &s.values(two).await[..] else { panic!("one record of log 7") };
    assert_eq!(key, &keys::index_key(two, 3, 8));
    assert_eq!(value.entry_count, Some(2));
    let offsets = value.entry_offsets.as_ref().expect("entry_offsets for 2 entries");
    assert_eq!(offsets.compression_type, Some(1), "FastPFOR");
    assert_eq!(offsets.compressed_payload.as_deref(), Some(&hex("000000020000000000008182")[..]));
    assert_eq!(section_counts(two), [2, 1], "A = [2, 3] comes from the section's record counts");
    // Byte by byte: field 10 of the value is `52 12` + compression_type `08 01`, the
    // uncompressed size `10 08`, then the 12 payload bytes under `1a 0c`.
    let field_10 = hex("5212080110081a0c000000020000000000008182");
    assert!(bytes.windows(field_10.len()).any(|w| w == field_10), "{}", to_hex(bytes));

    let [(_, bytes, value)] = &s.values(one).await[..] else { panic!("one record of log 8") };
    assert_eq!((value.entry_count, value.entry_offsets.as_ref()), (Some(1), None));
    assert!(!bytes.contains(&0x52), "no field 10 tag in {}", to_hex(bytes));

    let [(_, _, value)] = &s.values(many).await[..] else { panic!("one record of log 9") };
    let offsets = value.entry_offsets.as_ref().expect("entry_offsets for 40 entries");
    assert_eq!(section_counts(many), vec![1; 40]);
    // Appendix D's 40 ones: n = 40, one block of width 1, all 32 bits set, 8 tail bytes 0x81.
    assert_eq!(
        offsets.compressed_payload.as_deref(),
        Some(&hex("0000002800000001ffffffff8181818181818181")[..])
    );
}

// spec-rule: 242bc7f5db [All] Every ExtraData pair MUST set both key and value.
// spec-rule: ba04da13e1 [All] The keys of the extraData pairs of one record MUST be distinct.
#[tokio::test]
async fn writer_output_extra_data_pairs_set_key_and_value_with_distinct_keys() {
    // [All] Every ExtraData pair MUST set both key and value; [All] the keys of one record's
    // pairs MUST be distinct. Our writer's RAW records carry no pair at all: no field 11 in
    // the bytes it publishes.
    let s = stack(330);
    s.one_object(vec![
        (LogId(1), vec![(payload(5, 1), 2), (payload(3, 2), 1)]),
        (LogId(2), vec![(payload(1, 3), 1)]),
    ])
    .await;
    for log in [LogId(1), LogId(2)] {
        for (key, bytes, value) in s.values(log).await {
            assert!(value.extra_data.is_empty(), "{key}");
            assert!(top_level_tags(&bytes).iter().all(|&tag| tag != 11), "{key}: {}", to_hex(&bytes));
        }
    }
}

/// The field numbers of a protobuf message's top-level fields, in order.
fn top_level_tags(bytes: &[u8]) -> Vec<u64> {
    let mut pos = 0;
    let mut tags = Vec::new();
    while pos < bytes.len() {
        let key = varint(bytes, &mut pos).value;
        tags.push(key >> 3);
        match key & 7 {
            0 => {
                varint(bytes, &mut pos);
            }
            2 => {
                let len = varint(bytes, &mut pos).value as usize;
                pos += len;
            }
            other => panic!("wire type {other} in an EntryIndex"),
        }
    }
    tags
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
