//! The [All] rules on where a log's records live, checked on what our writer and compactor
//! actually send the metadata store: a workload of appends, soft and hard trims, compactions,
//! leases and a fence over logs 5, 50 and 500 (whose decimal names prefix each other), every
//! operation recorded with its partition, its key and whether the key existed. Also the
//! ExtraData rules on the PARQUET records our compactor writes. Over the in-memory stores.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::{Stack, append_n, log_ref, test_config};
use lakestream_compactor::no_progress;
use lakestream_format::entry_index;
use lakestream_format::file_index::FILE_INDEX_KEY;
use lakestream_format::keys::{self, IndexKey};
use lakestream_format::{LogId, LogRef};
use lakestream_meta::hooked::{Answer, HookedStore, Op as StoreOp};
use lakestream_meta::lease;
use lakestream_meta::{Comparison, Record};

const AGE: i64 = 10 * 60_000;

/// One operation as the store saw it.
#[derive(Debug, Clone)]
struct Op {
    kind: &'static str,
    partition: String,
    key: String,
    /// For a write: whether the key existed just before it.
    existed: Option<bool>,
    value: Option<Bytes>,
}

/// Records every operation through `hooks`, sessions' ephemeral creates included.
fn record(hooks: &HookedStore) -> Arc<Mutex<Vec<Op>>> {
    let ops = Arc::new(Mutex::new(Vec::new()));
    let noted = ops.clone();
    let recorded = [
        StoreOp::Get,
        StoreOp::Put,
        StoreOp::Delete,
        StoreOp::DeleteIfVersion,
        StoreOp::DeleteRange,
        StoreOp::SequencedPut,
        StoreOp::List,
        StoreOp::Scan,
        StoreOp::CreateEphemeral,
    ];
    hooks.on_any(&recorded).around(move |call, next| {
        let ops = noted.clone();
        Box::pin(async move {
            let note = |kind, key: &str, existed, value| {
                let op = Op { kind, partition: call.partition.clone(), key: key.into(), existed, value };
                ops.lock().unwrap().push(op);
            };
            let (key, value) = (call.key.as_str(), call.value.clone());
            match call.op {
                StoreOp::Get if call.cmp == Some(Comparison::Equal) => note("get", key, None, None),
                StoreOp::Get => note("lookup", key, None, None),
                StoreOp::Put => {
                    let existed = next.inner().get(&call.partition, key).await.unwrap().is_some();
                    note("put", key, Some(existed), value);
                }
                StoreOp::Delete | StoreOp::DeleteIfVersion => note("delete", key, None, None),
                StoreOp::DeleteRange => {
                    note("delete_range", key, None, None);
                    note("delete_range", &call.end, None, None);
                }
                StoreOp::SequencedPut => {
                    // Noted once done, under the key the store derived.
                    let answer = next.forward().await?;
                    if let Answer::Written(written) = &answer {
                        note("sequenced_put", &written.key, Some(false), value);
                    }
                    return Ok(answer);
                }
                StoreOp::List => note("list", key, None, None),
                StoreOp::Scan => note("scan", key, None, None),
                StoreOp::CreateEphemeral => note("create_ephemeral", key, None, value),
                _ => {}
            }
            next.forward().await
        })
    });
    ops
}

const LOGS: [u64; 3] = [5, 50, 500];

/// Appends, soft trims, compactions, hard trims, leases and a fence over [`LOGS`]; answers
/// every operation made, in order.
async fn workload() -> (Stack, Vec<Op>) {
    let s = Stack::new();
    let ops = record(&s.hooks);
    let w = s.writer(128);
    let c = s.compactor(test_config(), 128);
    let logs: Vec<LogRef> = LOGS.iter().map(|&l| log_ref(l)).collect();
    for round in 0..2 {
        for log in &logs {
            append_n(&w, log.log_id, 4, 1 + round, "placed").await;
        }
        s.clock.advance_ms(AGE);
        let report = c.compact_once(&logs, &no_progress).await;
        assert!(report.failed.is_empty() && report.ranges.len() == 3, "{report:?}");
    }
    for log in &logs {
        append_n(&w, log.log_id, 2, 1, "tail").await;
        w.soft_trim(log.log_id, 9).await.unwrap();
        c.hard_trim(log, 10, &no_progress).await.unwrap();
    }
    w.release_idle_leases(Duration::ZERO).await;
    lease::fence(s.meta.as_ref(), LogId(50)).await.unwrap();
    w.close().await;
    let ops = ops.lock().unwrap().clone();
    (s, ops)
}

/// The log a spec-defined record's key belongs to: an index key `{L:020}-…`, the trim marker,
/// the write fence or a write lease of L.
fn log_of_record(key: &str) -> Option<u64> {
    if key.len() > 20 && key.as_bytes()[20] == b'-' && key[..20].bytes().all(|b| b.is_ascii_digit()) {
        return key[..20].parse().ok();
    }
    for prefix in ["/mark-deleted-offsets/", "/stream-write-fences/", "/stream-write-leases/"] {
        if let Some(rest) = key.strip_prefix(prefix) {
            return rest.split('/').next()?.parse().ok();
        }
    }
    None
}

// spec-rule: 8240198bb4 [All] An implementation MUST keep every record of log L that this specification de…
#[tokio::test]
async fn every_record_of_log_l_is_kept_in_its_partition_p_l() {
    // [All] An implementation MUST keep every record of log L that this specification defines
    // in the partition P(L), the decimal L without leading zeros: every operation our writer,
    // compactor and lease code made on such a record names that partition.
    let (_, ops) = workload().await;
    let mut kinds_seen = HashSet::new();
    for op in &ops {
        let Some(log) = log_of_record(&op.key) else { continue };
        assert_eq!(op.partition, log.to_string(), "{op:?} is not in P({log})");
        kinds_seen.insert((op.kind, op.key.split('/').nth(1).unwrap_or("index").to_owned()));
    }
    for kind in [
        ("sequenced_put", "index"),
        ("put", "index"),
        ("put", "mark-deleted-offsets"),
        ("create_ephemeral", "stream-write-leases"),
        ("delete", "stream-write-leases"),
        ("put", "stream-write-fences"),
        ("get", "stream-write-fences"),
        ("delete_range", "index"),
    ] {
        assert!(kinds_seen.contains(&(kind.0, kind.1.to_owned())), "the workload made no {kind:?}");
    }
}

// spec-rule: 025e6373f9 [All] An implementation MUST NOT store any record other than an index record of L…
#[tokio::test]
async fn no_record_but_an_index_record_of_l_is_stored_under_l_index_prefix() {
    // [All] An implementation MUST NOT store any record other than an index record of L under
    // a key that begins with {log_id:020d}- for L: every write of such a key is an index
    // record (a parsable key of L and an EntryIndex value), and so is every such key stored.
    let (s, ops) = workload().await;
    let mut writes = 0;
    for op in ops.iter().filter(|op| op.value.is_some()) {
        let Some(log) =
            LOGS.iter().find(|&&l| op.key.starts_with(&format!("{}-", keys::index_prefix(LogId(l)))))
        else {
            assert!(
                !op.key.as_bytes().first().is_some_and(u8::is_ascii_digit),
                "{op:?} looks like an index key"
            );
            continue;
        };
        let key = IndexKey::parse(&op.key).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        assert_eq!(key.log_id, LogId(*log));
        entry_index::decode(op.value.as_ref().unwrap()).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        writes += 1;
    }
    assert!(writes > 20, "{writes} index writes");
    for &l in &LOGS {
        let log = LogId(l);
        let stored = s.meta.scan(&keys::partition(log), "0", ":", None).await.unwrap();
        let prefix = format!("{}-", keys::index_prefix(log));
        let mine: Vec<&Record> = stored.iter().filter(|r| r.key.starts_with(&prefix)).collect();
        assert!(!mine.is_empty());
        for record in mine {
            assert_eq!(IndexKey::parse(&record.key).unwrap().log_id, log);
            entry_index::decode(&record.value).unwrap_or_else(|e| panic!("{}: {e}", record.key));
        }
    }
}

// spec-rule: d161565de4 [All] An implementation MUST NOT create an index key except by the sequenced put o…
#[tokio::test]
async fn index_keys_are_created_only_by_a3_sequenced_puts_or_c3_puts() {
    // [All] An implementation MUST NOT create an index key except by the sequenced put of A3
    // or by the Put of step C3: every write that found an index key absent was a sequenced
    // put, and every plain Put of an index key is C3's, after its Get of that very key.
    let (_, ops) = workload().await;
    let is_index_key = |key: &str| IndexKey::parse(key).is_ok();
    let mut sequenced = 0;
    let mut c3 = 0;
    for (i, op) in ops.iter().enumerate().filter(|(_, op)| op.value.is_some() && is_index_key(&op.key)) {
        match op.kind {
            "sequenced_put" => sequenced += 1,
            "put" => {
                assert_eq!(op.existed, Some(true), "a Put created index key {}", op.key);
                let got_first = ops[..i]
                    .iter()
                    .any(|g| g.kind == "get" && g.key == op.key && g.partition == op.partition);
                assert!(got_first, "a Put of {} without C3's Get of it", op.key);
                c3 += 1;
            }
            other => panic!("index key {} written by {other}", op.key),
        }
    }
    assert_eq!(c3, 6, "two compactions of three logs");
    assert!(sequenced >= 30, "{sequenced}");
}

// spec-rule: 242bc7f5db [All] Every ExtraData pair MUST set both key and value.
// spec-rule: ba04da13e1 [All] The keys of the extraData pairs of one record MUST be distinct.
#[tokio::test]
async fn compactor_output_extra_data_pairs_set_key_and_value_with_distinct_keys() {
    // [All] Every ExtraData pair MUST set both key and value; [All] the keys of the extraData
    // pairs of one record MUST be distinct. Checked on the PARQUET values our compactor puts,
    // field by field as written: each pair is a field 11 holding a field 1 and a field 2.
    let (_, ops) = workload().await;
    let mut seen = 0;
    for op in ops.iter().filter(|op| op.kind == "put" && IndexKey::parse(&op.key).is_ok()) {
        let bytes = op.value.as_ref().unwrap();
        let value = entry_index::decode_fields(bytes).unwrap();
        assert_eq!(value.file_type, Some(1), "C3 writes PARQUET records");
        let mut keys_seen = HashSet::new();
        for pair in &value.extra_data {
            let (Some(key), Some(_)) = (&pair.key, &pair.value) else {
                panic!("{}: a pair lacks key or value", op.key)
            };
            assert!(keys_seen.insert(key.clone()), "{}: key {key} twice", op.key);
        }
        assert_eq!(keys_seen, HashSet::from([FILE_INDEX_KEY.to_owned()]));
        for pair in fields(bytes).into_iter().filter(|(tag, _)| *tag == 11) {
            let inner: Vec<u64> = fields(pair.1).into_iter().map(|(tag, _)| tag).collect();
            assert_eq!(inner, [1, 2], "{}: a pair's fields as written", op.key);
        }
        seen += 1;
    }
    assert_eq!(seen, 6);
}

/// The top-level fields of a protobuf message: each tag with its bytes (length-delimited
/// fields) or its varint's bytes.
fn fields(bytes: &[u8]) -> Vec<(u64, &[u8])> {
    fn varint(bytes: &[u8], pos: &mut usize) -> u64 {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = bytes[*pos];
            *pos += 1;
            value |= u64::from(byte & 0x7F) << shift;
            if byte & 0x80 == 0 {
                break;
            }
        }
        value
    }
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let key = varint(bytes, &mut pos);
        let start = pos;
        match key & 7 {
            0 => {
                varint(bytes, &mut pos);
                out.push((key >> 3, &bytes[start..pos]));
            }
            2 => {
                let len = varint(bytes, &mut pos) as usize;
                out.push((key >> 3, &bytes[pos..pos + len]));
                pos += len;
            }
            other => panic!("wire type {other}"),
        }
    }
    out
}
