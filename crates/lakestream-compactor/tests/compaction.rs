//! The compactor over the in-memory stores with the real writer and reader: the spec's
//! Compaction (C1–C5), hard trim and reclamation rules, one test per rule.

mod common;

use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use common::{Stack, append_n, log_ref, object_names, read_all, test_config};
use lakestream_compactor::plan::NextRange;
use lakestream_compactor::{CompactError, CompactorConfig, InstallOutcome, Progress, ledger, no_progress};
use lakestream_format::companion::{ReadOptions, read_companion};
use lakestream_format::entry_index::{self, IndexValue};
use lakestream_format::keys;
use lakestream_format::{FileType, LogId, LogRef};
use lakestream_meta::PutCondition;
use lakestream_meta::lease;
use lakestream_objstore::ObjectPath;
use lakestream_writer::WriterConfig;

const AGE: i64 = 180_000;

async fn index_values(s: &Stack, log: LogId) -> Vec<(keys::IndexKey, IndexValue, i64)> {
    let p = keys::partition(log);
    let records = s.meta.scan(&p, &keys::first_key(log), &keys::last_key(log), None).await.unwrap();
    records
        .into_iter()
        .map(|r| {
            (keys::IndexKey::parse(&r.key).unwrap(), entry_index::decode(&r.value).unwrap(), r.created_ms)
        })
        .collect()
}

/// Where most rule tests start: a log of aged one-record entries, a compactor holding the
/// log's claim, and the range it planned (C1).
struct Planned {
    s: Stack,
    w: lakestream_writer::Writer,
    log: lakestream_format::LogRef,
    acked: Vec<lakestream_format::Entry>,
    c: lakestream_compactor::Compactor,
    claim: lakestream_compactor::compactor::Claim,
    plan: lakestream_compactor::plan::RangePlan,
}

impl Planned {
    /// Appends `entries` entries (payloads tagged `tag`) with writer `writer_seed` to log
    /// `log_id`, ages them past the range's age limit, and plans with compactor
    /// `compactor_seed`.
    async fn new(writer_seed: u64, log_id: u64, entries: usize, tag: &str, compactor_seed: u64) -> Planned {
        let s = Stack::new();
        let w = s.writer(writer_seed);
        let log = log_ref(log_id);
        let acked = append_n(&w, log.log_id, entries, 1, tag).await;
        s.clock.advance_ms(AGE);
        let c = s.compactor(test_config(), compactor_seed);
        let claim = c.claim(log.log_id).await.unwrap();
        let (_, planning) = c.plan(log.log_id).await.unwrap();
        let NextRange::Ready(plan) = planning.next else {
            panic!("{entries} aged entries make a ready range")
        };
        Planned { s, w, log, acked, c, claim, plan }
    }
}

// spec-rule: 1b2f6a683f [Reader] A reader MUST resolve the file names in a file index against the director…
// spec-rule: da8dfcfa03 [Compactor] A compactor MUST write every PARQUET record with the values that this…
// spec-rule: d2e7149b36 [Compactor] Each compacted file MUST be a Parquet file with exactly one row per en…
// spec-rule: 828de80d36 [Compactor] The payload of each row MUST hold the entry's payload unchanged.
// spec-rule: 6e4600fb6f [Reader] A reader MUST take the timestamp of an entry read from a compacted object…
// spec-rule: ae4c35709f [Compactor] The compactor MUST read the key K(L, e, c_e) with Get; if the key exis…
// spec-rule: d270924739 [Compactor] After step C3, or after skipping it, the compactor MUST delete the oth…
#[tokio::test]
async fn compaction_preserves_bytes_offsets_timestamps_and_the_last_key() {
    let s = Stack::new();
    let w = s.writer(1);
    let log = log_ref(7);
    let mut acked = append_n(&w, log.log_id, 5, 1, "a").await;
    s.clock.advance_ms(1500);
    acked.extend(append_n(&w, log.log_id, 4, 3, "b").await);
    let before = index_values(&s, log.log_id).await;
    let (last_key, _, last_created) = before.last().cloned().unwrap();
    s.clock.advance_ms(AGE);
    let c = s.compactor(test_config(), 11);
    let report = c.compact_once(std::slice::from_ref(&log), &no_progress).await;
    assert_eq!(report.failed, vec![]);
    assert_eq!(report.ranges.len(), 1);
    assert_eq!((report.ranges[0].start, report.ranges[0].end), (0, 17));
    // One PARQUET record under the last RAW record's key, keeping its creation timestamp.
    let after = index_values(&s, log.log_id).await;
    assert_eq!(after.len(), 1);
    let (key, value, created) = &after[0];
    assert_eq!((*key, *created), (last_key, last_created), "C3 keeps the key and its creation timestamp");
    let IndexValue::Parquet(pq) = value else { panic!("{value:?}") };
    assert_eq!(pq.message_count, 17);
    assert_eq!(pq.file_index.last_offset(), 16, "the last file ends at e - 1");
    // Readers get the same entries, offsets and timestamps from the Parquet files.
    assert_eq!(read_all(&s.reader(), &log, 0).await, acked);
    // C5: the cursor is e, in P(L), ASCII decimal (not Ursa's e + 1).
    let cursor = s.meta.get("7", &keys::compaction_cursor_key(LogId(7))).await.unwrap().unwrap();
    assert_eq!(&cursor.value[..], b"17");
    // The next append continues after the greatest key.
    let ack = w.append(log.log_id, Bytes::from_static(b"next"), 1).await.unwrap();
    assert_eq!(ack.offset, 17);
    w.close().await;
}

// spec-rule: afaff6b174 [Compactor] A compactor MUST write the compacted files of a log, and their compani…
// spec-rule: d2e7149b36 [Compactor] Each compacted file MUST be a Parquet file with exactly one row per en…
// spec-rule: 9ff4690c61 [Compactor] The entryHeader of each row MUST equal the header of the entry as read…
#[tokio::test]
async fn companion_rows_carry_each_entry_header_as_read_from_its_raw_record() {
    // [Compactor] The entryHeader of each row MUST equal the header of the entry as read from
    // its RAW record: offset, record count, timestamp, payload size, cumulative size.
    let s = Stack::new();
    let w = s.writer(2);
    let log = log_ref(8);
    let acked = append_n(&w, log.log_id, 6, 2, "h").await;
    s.clock.advance_ms(AGE);
    let c = s.compactor(test_config(), 12);
    c.compact_log(&log, &no_progress).await.unwrap();
    let files = object_names(&s.compacted).await;
    let companion = files.iter().find(|f| f.ends_with(".index")).unwrap();
    assert!(companion.starts_with("ns/stream-8/ls-8-"), "in the stream's directory: {companion}");
    let bytes = s.compacted.get(&ObjectPath::new(companion.clone()).unwrap()).await.unwrap();
    let rows = read_companion(&bytes, ReadOptions::default()).unwrap();
    let mut cumulative = 0u64;
    assert_eq!(rows.rows().len(), acked.len());
    for (row, entry) in rows.rows().iter().zip(&acked) {
        cumulative += entry.payload.len() as u64;
        assert_eq!(
            (row.offset, row.record_count, row.timestamp_ms, row.entry_size as usize, row.cumulative_size),
            (entry.offset, entry.record_count, entry.timestamp_ms, entry.payload.len(), cumulative)
        );
    }
    w.close().await;
}

/// The backlog events of one `compact_log` of `log`.
async fn backlogs(
    c: &lakestream_compactor::Compactor,
    log: &lakestream_format::LogRef,
) -> Vec<lakestream_compactor::Backlog> {
    let mut events = Vec::new();
    let seen = Mutex::new(&mut events);
    let record = |p: &Progress| seen.lock().unwrap().push(p.clone());
    c.compact_log(log, &record).await.unwrap();
    events
        .into_iter()
        .filter_map(|e| match e {
            Progress::Backlog(b) => Some(b),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_pass_reports_each_logs_backlog_for_the_lag_metrics() {
    let s = Stack::new();
    let w = s.writer(40);
    let log = log_ref(41);
    let acked = append_n(&w, log.log_id, 3, 1, "lag").await;
    let c = s.compactor(test_config(), 41);
    // Young entries: an open range holding all their payload, oldest written first.
    let young = backlogs(&c, &log).await;
    let payload: u64 = acked.iter().map(|e| e.payload.len() as u64).sum();
    assert_eq!(young.len(), 1);
    assert_eq!(young[0].log_id, log.log_id);
    assert_eq!(young[0].open_payload_bytes, payload);
    assert_eq!(young[0].oldest_open_entry_ms, Some(acked[0].timestamp_ms));
    assert_eq!(young[0].trim_marker, 0);
    // Aged: the range is compacted and nothing waits; the marker moves with a soft trim.
    w.soft_trim(log.log_id, 0).await.unwrap();
    s.clock.advance_ms(AGE);
    let done = backlogs(&c, &log).await;
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].open_payload_bytes, done[0].oldest_open_entry_ms), (0, None));
    assert_eq!(done[0].trim_marker, 1);
    w.close().await;
}

#[tokio::test]
async fn a_range_closes_only_when_old_enough_or_full() {
    let s = Stack::new();
    let w = s.writer(3);
    let log = log_ref(9);
    append_n(&w, log.log_id, 3, 1, "young").await;
    let c = s.compactor(test_config(), 13);
    let (_, planning) = c.plan(log.log_id).await.unwrap();
    assert!(matches!(planning.next, NextRange::Open { .. }), "{planning:?}");
    assert!(c.compact_log(&log, &no_progress).await.unwrap().is_empty());
    s.clock.advance_ms(AGE - 1);
    assert!(c.compact_log(&log, &no_progress).await.unwrap().is_empty());
    s.clock.advance_ms(1);
    assert_eq!(c.compact_log(&log, &no_progress).await.unwrap().len(), 1);
    // A full range closes at once, whatever its age.
    let small = CompactorConfig { max_range_bytes: 30, ..test_config() };
    let c = s.compactor(small, 14);
    append_n(&w, log.log_id, 4, 1, "full-range-entry").await;
    let ranges = c.compact_log(&log, &no_progress).await.unwrap();
    assert!(!ranges.is_empty() && ranges.iter().all(|r| r.payload_bytes <= 30 + 25), "{ranges:?}");
    w.close().await;
}

// spec-rule: 3fa043136a [Compactor] The files of a file index MUST appear once each, in ascending last_off…
#[tokio::test]
async fn a_new_file_starts_past_max_file_bytes() {
    let s = Stack::new();
    let w = s.writer(4);
    let log = log_ref(10);
    let acked = append_n(&w, log.log_id, 10, 1, "split").await;
    s.clock.advance_ms(AGE);
    let c = s.compactor(CompactorConfig { max_file_bytes: 40, ..test_config() }, 15);
    let ranges = c.compact_log(&log, &no_progress).await.unwrap();
    assert!(ranges[0].files >= 3, "{ranges:?}");
    let (_, value, _) = index_values(&s, log.log_id).await.pop().unwrap();
    let IndexValue::Parquet(pq) = value else { panic!() };
    let lasts: Vec<u64> = pq.file_index.entries().iter().map(|f| f.last_offset).collect();
    assert!(lasts.windows(2).all(|w| w[0] < w[1]) && *lasts.last().unwrap() == 9, "{lasts:?}");
    assert_eq!(read_all(&s.reader(), &log, 0).await, acked);
    w.close().await;
}

// spec-rule: 3fa043136a [Compactor] The files of a file index MUST appear once each, in ascending last_off…
// spec-rule: b0cbd8d113 [Compactor] The compacted files of a range MUST hold one row for every entry of th…
#[tokio::test]
async fn entries_ending_at_or_below_b_may_be_left_out_but_the_file_index_ends_at_e_minus_1() {
    // [Compactor] MUST hold one row for every entry of the range that ends above B; MAY leave
    // out those that end at or below B; the last file's last_offset MUST be e − 1.
    let s = Stack::new();
    let w = s.writer(5);
    let log = log_ref(11);
    let acked = append_n(&w, log.log_id, 6, 2, "t").await; // entries at 0,2,4,6,8,10
    // Records [0,2) [2,4) … ; B = 5 falls inside the entry [4,6).
    w.soft_trim(log.log_id, 4).await.unwrap();
    assert_eq!(s.reader().trim_marker(log.log_id).await.unwrap(), 5);
    s.clock.advance_ms(AGE);
    let c = s.compactor(test_config(), 16);
    let ranges = c.compact_log(&log, &no_progress).await.unwrap();
    // Records ending at or below B ([0,2), [2,4)) are left for hard trim; the range starts at 4.
    assert_eq!((ranges[0].start, ranges[0].end, ranges[0].rows), (4, 12, 4));
    let (_, value, _) = index_values(&s, log.log_id).await.pop().unwrap();
    let IndexValue::Parquet(pq) = value else { panic!() };
    assert_eq!(pq.file_index.last_offset(), 11);
    assert_eq!(
        read_all(&s.reader(), &log, 0).await,
        acked[2..].to_vec(),
        "readable from B, entry holding B first"
    );
    w.close().await;
}

// spec-rule: 9ff4690c61 [Compactor] The entryHeader of each row MUST equal the header of the entry as read…
// spec-rule: b0cbd8d113 [Compactor] The compacted files of a range MUST hold one row for every entry of th…
#[tokio::test]
async fn entries_below_b_left_out_of_a_straddling_record_keep_exact_cumulative_sizes() {
    // One RAW record of three entries; B inside it: the rows written are the entries from
    // the one holding B, with cumulative sizes counted back from the record's key.
    let s = Stack::new();
    let log = log_ref(12);
    // 1 + 2 + 3 payload bytes fill one batch: the three entries share one RAW record.
    let w = s.writer_with(6, one_batch_of_bytes(6));
    let payloads = ["a", "bb", "ccc"];
    let futures: Vec<_> =
        payloads.iter().map(|p| w.append(log.log_id, Bytes::from_static(p.as_bytes()), 1)).collect();
    let acks = futures::future::join_all(futures).await;
    assert!(acks.iter().all(Result::is_ok));
    w.close().await;
    let w = s.writer(60); // its own token seed: the clock stands still, names differ by token
    w.append(log.log_id, Bytes::from_static(b"dddd"), 1).await.unwrap();
    let records: Vec<u64> = index_values(&s, log.log_id).await.iter().map(|(k, _, _)| k.end_offset).collect();
    assert_eq!(records, vec![3, 4], "the layout this test needs: [0, 3) in one record, then [3, 4)");
    let entries = read_all(&s.reader(), &log, 0).await;
    let order: Vec<&[u8]> = entries.iter().map(|e| &e.payload[..]).collect();
    assert_eq!(order, vec![&b"a"[..], b"bb", b"ccc", b"dddd"]);
    w.soft_trim(log.log_id, 1).await.unwrap(); // B = 2, inside the record [0, 3)
    s.clock.advance_ms(AGE);
    let c = s.compactor(test_config(), 17);
    c.compact_log(&log, &no_progress).await.unwrap();
    let files = object_names(&s.compacted).await;
    let companion = files.iter().find(|f| f.ends_with(".index")).unwrap();
    let bytes = s.compacted.get(&ObjectPath::new(companion.clone()).unwrap()).await.unwrap();
    let rows = read_companion(&bytes, ReadOptions::default()).unwrap();
    let got: Vec<(u64, u64)> = rows.rows().iter().map(|r| (r.offset, r.cumulative_size)).collect();
    // "a" (ends at 1) is left out; "bb" holds B; cumulative sizes 1+2+3 = 6 and 6+4 = 10.
    assert_eq!(got, vec![(2, 6), (3, 10)]);
    w.close().await;
}

// spec-rule: d270924739 [Compactor] After step C3, or after skipping it, the compactor MUST delete the oth…
// spec-rule: 0a53579984 [Compactor] If a compaction fails after step C3 has taken effect, the compactor MU…
#[tokio::test]
async fn a_crash_between_c3_and_c4_is_finished_by_the_next_compactor() {
    // [Compactor] If a compaction fails after step C3 has taken effect, the compactor MUST
    // repeat C3 and C4 … until C4 has completed.
    let Planned { s, w, log, acked, c, claim, plan } = Planned::new(7, 13, 5, "crash", 18).await;
    let prepared = c.prepare(&log, &plan).await.unwrap().unwrap();
    let lease = c.acquire_lease(&claim).await.unwrap();
    assert_eq!(c.install(&prepared, &lease).await.unwrap(), InstallOutcome::Installed);
    // Crash: the session goes, with its claim and lease.
    assert!(s.mem.expire_session(&c.session_id().await.unwrap()));
    assert_eq!(index_values(&s, log.log_id).await.len(), 5, "RAW records overlap the PARQUET record");
    assert_eq!(read_all(&s.reader(), &log, 0).await, acked, "NoReaderError inside the C3–C4 window");
    let c2 = s.compactor(test_config(), 19);
    let mut events = Vec::new();
    let seen = Mutex::new(&mut events);
    let record = |p: &Progress| seen.lock().unwrap().push(p.clone());
    c2.compact_log(&log, &record).await.unwrap();
    assert!(
        events.iter().any(|e| matches!(e, Progress::RetireRepaired { start: 0, end: 5, .. })),
        "{events:?}"
    );
    let after = index_values(&s, log.log_id).await;
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].1.file_type(), FileType::Parquet);
    assert_eq!(read_all(&s.reader(), &log, 0).await, acked);
    w.close().await;
}

// spec-rule: 0a53579984 [Compactor] If a compaction fails after step C3 has taken effect, the compactor MU…
#[tokio::test]
async fn c3_and_c4_repeated_with_the_same_value_give_the_same_state() {
    // Idempotent retry (addendum §13.2).
    let Planned { s, w, log, c, claim, plan, .. } = Planned::new(8, 14, 4, "idem", 20).await;
    let prepared = c.prepare(&log, &plan).await.unwrap().unwrap();
    assert_eq!(c.finish(&claim, &prepared).await.unwrap(), InstallOutcome::Installed);
    let once = index_values(&s, log.log_id).await;
    assert_eq!(c.finish(&claim, &prepared).await.unwrap(), InstallOutcome::AlreadyInstalled);
    assert_eq!(index_values(&s, log.log_id).await, once);
    claim.release(s.meta.as_ref()).await;
    w.close().await;
}

// spec-rule: d7b39dc25b [Compactor] A compaction MUST NOT replace or delete a PARQUET record that an earli…
#[tokio::test]
async fn a_parquet_record_of_an_earlier_compaction_is_never_replaced() {
    // [Compactor] A compaction MUST NOT replace or delete a PARQUET record that an earlier
    // compaction installed.
    let Planned { s, w, log, c, claim, plan, .. } = Planned::new(9, 15, 3, "first", 21).await;
    let stale = c.prepare(&log, &plan).await.unwrap().unwrap();
    let winner = c.prepare(&log, &plan).await.unwrap().unwrap(); // other files, other value
    assert_ne!(stale.value, winner.value);
    c.finish(&claim, &winner).await.unwrap();
    let installed = index_values(&s, log.log_id).await;
    let err = c.finish(&claim, &stale).await.unwrap_err();
    assert!(matches!(err, CompactError::AlreadyCompacted { .. }), "{err}");
    assert_eq!(index_values(&s, log.log_id).await, installed);
    claim.release(s.meta.as_ref()).await;
    w.close().await;
}

// spec-rule: d161565de4 [All] An implementation MUST NOT create an index key except by the sequenced put o…
// spec-rule: ae4c35709f [Compactor] The compactor MUST read the key K(L, e, c_e) with Get; if the key exis…
#[tokio::test]
async fn c3_is_skipped_when_a_hard_trim_removed_the_key() {
    // C3: "if the key no longer exists, it MUST skip this step"; C4 still runs.
    let Planned { s, w, log, c, claim, mut plan, .. } = Planned::new(10, 16, 4, "gone", 22).await;
    // Compact only [0, 3) so that the log keeps a last record.
    plan.records.truncate(3);
    plan.end = 3;
    plan.cumulative_end = plan.records[2].cumulative_end;
    let prepared = c.prepare(&log, &plan).await.unwrap().unwrap();
    w.soft_trim(log.log_id, 2).await.unwrap(); // B = 3
    s.meta
        .delete_range("16", &keys::first_key(log.log_id), &keys::covering_lookup_key(log.log_id, 3))
        .await
        .unwrap();
    assert_eq!(c.finish(&claim, &prepared).await.unwrap(), InstallOutcome::KeyAbsent);
    assert_eq!(index_values(&s, log.log_id).await.len(), 1, "no key was re-created");
    claim.release(s.meta.as_ref()).await;
    w.close().await;
}

// spec-rule: 96371d79e8 [Compactor] Compaction index updates of one log MUST NOT run concurrently with eac…
#[tokio::test]
async fn one_compactor_per_log_at_a_time_through_the_metadata_store() {
    // [Compactor] Compaction index updates of one log MUST NOT run concurrently.
    let s = Stack::new();
    let a = s.compactor(test_config(), 23);
    let b = s.compactor(test_config(), 24);
    let claim = a.claim(LogId(17)).await.unwrap();
    assert!(matches!(b.claim(LogId(17)).await.unwrap_err(), CompactError::Busy { .. }));
    let report = b.compact_once(&[log_ref(17)], &no_progress).await;
    assert_eq!(report.busy, vec![LogId(17)]);
    claim.release(s.meta.as_ref()).await;
    b.claim(LogId(17)).await.unwrap();
    // A crashed holder's claim vanishes with its session.
    assert!(s.mem.expire_session(&b.session_id().await.unwrap()));
    a.claim(LogId(17)).await.unwrap();
}

// spec-rule: 3efab3bc24 [Compactor] A compactor SHOULD stop the compaction index update (C3–C5) and any ha…
#[tokio::test]
async fn c3_to_c5_stop_once_the_session_ends() {
    // [Compactor] SHOULD stop the compaction index update once it learns that the session
    // behind its write lease has ended.
    let Planned { s, w, log, c, claim, plan, .. } = Planned::new(11, 18, 3, "s", 25).await;
    let prepared = c.prepare(&log, &plan).await.unwrap().unwrap();
    let lease = c.acquire_lease(&claim).await.unwrap();
    assert!(s.mem.expire_session(&c.session_id().await.unwrap()));
    let err = c.install(&prepared, &lease).await.unwrap_err();
    assert!(matches!(err, CompactError::SessionEnded { .. }), "{err}");
    let err = c.finish(&claim, &prepared).await.unwrap_err();
    assert!(matches!(err, CompactError::SessionEnded { .. }), "{err}");
    assert!(index_values(&s, log.log_id).await.iter().all(|(_, v, _)| v.file_type() == FileType::Raw));
    w.close().await;
}

// spec-rule: bc3a241078 [Writer, Compactor] If the fence exists, or the Get fails, the implementation MUST…
#[tokio::test]
async fn a_fenced_log_stops_the_compaction() {
    // [Compactor] repeat C3/C4 "until it can no longer acquire a write lease on L because L
    // has been fenced for deletion".
    let s = Stack::new();
    let w = s.writer(12);
    let log = log_ref(19);
    append_n(&w, log.log_id, 3, 1, "f").await;
    w.close().await;
    s.clock.advance_ms(AGE);
    let c = s.compactor(test_config(), 26);
    let claim = c.claim(log.log_id).await.unwrap();
    let (_, planning) = c.plan(log.log_id).await.unwrap();
    let NextRange::Ready(plan) = planning.next else { panic!() };
    let prepared = c.prepare(&log, &plan).await.unwrap().unwrap();
    lease::fence(s.meta.as_ref(), log.log_id).await.unwrap();
    let err = c.finish(&claim, &prepared).await.unwrap_err();
    assert!(err.is_fenced(), "{err}");
    assert!(c.pending().is_empty(), "a fenced log's compaction is not retried");
}

// spec-rule: d345c153de [All] An implementation MUST NOT delete a compacted file that a compaction in prog…
#[tokio::test]
async fn c3_never_puts_after_the_deadline() {
    let Planned { s, w, log, c, claim, plan, .. } = Planned::new(13, 20, 3, "late", 27).await;
    let prepared = c.prepare(&log, &plan).await.unwrap().unwrap();
    s.clock.advance_ms(15 * 60_000 + 1);
    let err = c.finish(&claim, &prepared).await.unwrap_err();
    assert!(matches!(err, CompactError::DeadlinePassed { .. }), "{err}");
    assert!(index_values(&s, log.log_id).await.iter().all(|(_, v, _)| v.file_type() == FileType::Raw));
    claim.release(s.meta.as_ref()).await;
    w.close().await;
}

// spec-rule: 0358c3f49d [Compactor] A hard trim MUST use an X at or below B, and MUST NOT remove the log's…
#[tokio::test]
async fn hard_trim_stays_at_or_below_b_and_keeps_the_last_record() {
    // [Compactor] A hard trim MUST use an X at or below B, and MUST NOT remove the log's last
    // index record. (The order of file and record deletion:
    // hard_trim_deletes_the_compacted_files_before_the_records_that_name_them.)
    let s = Stack::new();
    let w = s.writer(14);
    let log = log_ref(21);
    append_n(&w, log.log_id, 4, 1, "old").await;
    s.clock.advance_ms(AGE);
    let c = s.compactor(test_config(), 28);
    c.compact_log(&log, &no_progress).await.unwrap(); // PARQUET [0,4)
    let tail = append_n(&w, log.log_id, 3, 1, "new").await; // RAW [4,5) [5,6) [6,7)
    let files_before = object_names(&s.compacted).await;
    assert_eq!(files_before.len(), 2);
    // Nothing above B is touched: with B = 0 a hard trim to 100 removes nothing.
    let report = c.hard_trim(&log, 100, &no_progress).await.unwrap();
    assert_eq!(report.records_removed, 0);
    w.soft_trim(log.log_id, 5).await.unwrap(); // B = 6
    let report = c.hard_trim(&log, 100, &no_progress).await.unwrap();
    assert_eq!(report.trimmed_to, Some(6));
    assert_eq!(report.records_removed, 3, "PARQUET [0,4), RAW [4,5), RAW [5,6)");
    let mut deleted = report.compacted_deleted.clone();
    deleted.sort();
    let mut expected = files_before.clone();
    expected.sort();
    assert_eq!(deleted, expected);
    assert!(object_names(&s.compacted).await.is_empty());
    assert_eq!(report.wal_retired.len(), 2, "the WAL objects of the two RAW records are in the ledger");
    let keys_left: Vec<u64> =
        index_values(&s, log.log_id).await.iter().map(|(k, _, _)| k.end_offset).collect();
    assert_eq!(keys_left, vec![7]);
    assert_eq!(read_all(&s.reader(), &log, 0).await, tail[2..].to_vec());
    // Trimming again cannot remove the last record even with B at its start.
    w.soft_trim(log.log_id, 100).await.unwrap();
    assert_eq!(c.hard_trim(&log, 100, &no_progress).await.unwrap().records_removed, 0);
    assert_eq!(s.reader().next_offset(log.log_id).await.unwrap(), 7);
    w.close().await;
}

// spec-rule: cedd7cd2ae [All] An implementation MUST NOT delete a WAL object while an index record of any…
// spec-rule: e7a7efda67 [All] After the last index record that names a WAL object has been removed, an imp…
#[tokio::test]
async fn wal_objects_are_deleted_only_a_grace_period_after_their_last_record_went() {
    // [All] After the last index record that names a WAL object has been removed, an
    // implementation MUST keep the object for a grace period before it deletes it.
    let s = Stack::new();
    let w = s.writer(15);
    let log = log_ref(22);
    let acked = append_n(&w, log.log_id, 3, 1, "g").await;
    let wal_before = object_names(&s.wal).await;
    assert_eq!(wal_before.len(), 3);
    let c = s.compactor(CompactorConfig { orphan_scan: false, ..test_config() }, 29);
    // Named objects are never deleted, however old.
    s.clock.advance_ms(10 * 3_600_000);
    let report = c.gc_once(&no_progress).await.unwrap();
    assert!(report.wal_deleted.is_empty());
    c.compact_log(&log, &no_progress).await.unwrap();
    assert_eq!(
        ledger::candidates(s.meta.as_ref()).await.unwrap().len(),
        3,
        "retirements announced before C3/C4"
    );
    let report = c.gc_once(&no_progress).await.unwrap();
    assert_eq!((report.marked_unreferenced, report.wal_deleted.len()), (3, 0));
    s.clock.advance_ms(3_600_000 - 1);
    let report = c.gc_once(&no_progress).await.unwrap();
    assert_eq!((report.waiting, report.wal_deleted.len()), (3, 0), "one ms short of the grace period");
    s.clock.advance_ms(1);
    let mut deleted = c.gc_once(&no_progress).await.unwrap().wal_deleted;
    deleted.sort();
    assert_eq!(deleted, wal_before);
    assert!(object_names(&s.wal).await.is_empty());
    assert!(ledger::candidates(s.meta.as_ref()).await.unwrap().is_empty());
    assert_eq!(read_all(&s.reader(), &log, 0).await, acked, "the data lives on in Parquet");
    w.close().await;
}

// spec-rule: cedd7cd2ae [All] An implementation MUST NOT delete a WAL object while an index record of any…
#[tokio::test]
async fn a_wal_object_shared_by_two_logs_waits_for_both() {
    let s = Stack::new();
    // The batch flushes when it holds 2 payload bytes, never on time: both entries share
    // one WAL object whatever the scheduling.
    let w = s.writer_with(16, one_batch_of_bytes(2));
    let (a, b) = (LogId(23), LogId(24));
    let acks = futures::future::join(
        w.append(a, Bytes::from_static(b"a"), 1),
        w.append(b, Bytes::from_static(b"b"), 1),
    )
    .await;
    acks.0.unwrap();
    acks.1.unwrap();
    let objects = object_names(&s.wal).await;
    assert_eq!(objects.len(), 1, "the layout this test needs: one object for both logs");
    let shared = s.wal.get(&ObjectPath::new(objects[0].clone()).unwrap()).await.unwrap();
    let sections = lakestream_format::wal::WalObject::parse(shared).unwrap().index().sections().len();
    assert_eq!(sections, 2);
    let c = s.compactor(CompactorConfig { orphan_scan: false, ..test_config() }, 30);
    s.clock.advance_ms(AGE);
    c.compact_log(&log_ref(23), &no_progress).await.unwrap();
    assert_eq!(ledger::candidates(s.meta.as_ref()).await.unwrap().len(), 1, "log 23 retired the object");
    s.clock.advance_ms(10 * 3_600_000);
    for _ in 0..3 {
        c.gc_once(&no_progress).await.unwrap();
        s.clock.advance_ms(2 * 3_600_000);
    }
    assert_eq!(object_names(&s.wal).await, objects, "log 24 still names the shared object");
    assert_eq!(read_all(&s.reader(), &log_ref(24), 0).await.len(), 1);
    w.close().await;
}

/// Writer settings under which a batch is flushed once it holds `bytes` payload bytes (or on
/// close), never by its time window: entries appended together share one WAL object.
fn one_batch_of_bytes(bytes: usize) -> WriterConfig {
    WriterConfig {
        flush_window: Duration::from_secs(24 * 3600),
        flush_when_idle: false,
        flush_bytes: bytes,
        ..WriterConfig::default()
    }
}

// spec-rule: d345c153de [All] An implementation MUST NOT delete a compacted file that a compaction in prog…
#[tokio::test]
async fn orphans_are_reclaimed_after_their_grace_period_and_young_files_are_kept() {
    let s = Stack::new();
    let w = s.writer(17);
    let log = log_ref(25);
    append_n(&w, log.log_id, 2, 1, "kept").await;
    // An orphaned WAL object: written, never indexed (a failed index put).
    let orphan = lakestream_writer_name(s.clock_ms());
    s.wal
        .put(&ObjectPath::new(orphan.clone()).unwrap(), Bytes::from_static(&[0, 0, 0, 4, 0, 0, 0, 3]))
        .await
        .unwrap();
    // A failed compaction's files (C2 done, no C3): prepare but never install.
    s.clock.advance_ms(AGE);
    let c = s.compactor(test_config(), 31);
    let (_, planning) = c.plan(log.log_id).await.unwrap();
    let NextRange::Ready(plan) = planning.next else { panic!() };
    c.prepare(&log, &plan).await.unwrap().unwrap();
    let orphan_files = object_names(&s.compacted).await;
    assert_eq!(orphan_files.len(), 2);
    // Young orphans stay.
    let report = c.gc_once(&no_progress).await.unwrap();
    assert!(report.compacted_deleted.is_empty() && report.marked_unreferenced == 0, "{report:?}");
    // A real compaction's files stay, orphans go after the grace period.
    c.compact_log(&log, &no_progress).await.unwrap();
    s.clock.advance_ms(3_600_000);
    let report = c.gc_once(&no_progress).await.unwrap();
    let mut deleted = report.compacted_deleted.clone();
    deleted.sort();
    assert_eq!(deleted, orphan_files);
    assert_eq!(object_names(&s.compacted).await.len(), 2, "the installed files are named and kept");
    assert!(report.marked_unreferenced >= 1, "the orphaned WAL object starts its grace period");
    assert!(object_names(&s.wal).await.contains(&orphan));
    s.clock.advance_ms(3_600_000);
    let report = c.gc_once(&no_progress).await.unwrap();
    assert!(report.wal_deleted.contains(&orphan), "{report:?}");
    assert_eq!(read_all(&s.reader(), &log, 0).await.len(), 2);
    w.close().await;
}

/// A WAL name as our writer forms it, for an object written at `ms`.
fn lakestream_writer_name(ms: i64) -> String {
    let secs = ms / 1000;
    let (days, sod) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil(days);
    format!("{y:04}/{m:02}/{d:02}/{:02}/{:02}/{:02}/orphan-0001", sod / 3600, sod % 3600 / 60, sod % 60)
}

fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

trait ClockMs {
    fn clock_ms(&self) -> i64;
}

impl ClockMs for Stack {
    fn clock_ms(&self) -> i64 {
        use lakestream_format::Clock;
        self.clock.now_ms()
    }
}

#[tokio::test]
async fn a_corrupt_index_record_is_reported_not_compacted() {
    let s = Stack::new();
    let log = log_ref(26);
    s.meta
        .put("26", &keys::index_key(log.log_id, 3, 3), Bytes::from_static(b"\x08\x63"), PutCondition::None)
        .await
        .unwrap();
    let c = s.compactor(test_config(), 32);
    let report = c.compact_once(std::slice::from_ref(&log), &no_progress).await;
    assert_eq!(report.failed.len(), 1);
    assert!(report.failed[0].1.contains("corrupt"), "{:?}", report.failed);
}

#[tokio::test]
async fn a_hard_trim_between_the_get_and_the_put_of_c3_leaves_a_record_below_b() {
    // Spec "Offset index keys": a hard trim that runs between the Get and the Put of step C3
    // lets the Put re-create the key; the record and the gap both lie below B.
    let Planned { s, w, log, acked, c, claim, mut plan } = Planned::new(18, 27, 4, "race", 33).await;
    plan.records.truncate(3);
    plan.end = 3;
    plan.cumulative_end = plan.records[2].cumulative_end;
    let prepared = c.prepare(&log, &plan).await.unwrap().unwrap();
    w.soft_trim(log.log_id, 2).await.unwrap(); // B = 3
    let armed = s.delete_after_get(common::DeleteAfterGet {
        trigger_key: prepared.key(),
        partition: "27".into(),
        start: keys::first_key(log.log_id),
        end: keys::covering_lookup_key(log.log_id, 3),
    });
    assert_eq!(c.finish(&claim, &prepared).await.unwrap(), InstallOutcome::Installed);
    assert_eq!(armed.fired(), 1);
    let ends: Vec<(u64, FileType)> =
        index_values(&s, log.log_id).await.iter().map(|(k, v, _)| (k.end_offset, v.file_type())).collect();
    assert_eq!(ends, vec![(3, FileType::Parquet), (4, FileType::Raw)], "re-created below B");
    assert_eq!(read_all(&s.reader(), &log, 0).await, acked[3..].to_vec());
    claim.release(s.meta.as_ref()).await;
    w.close().await;
}

// spec-rule: 05a5353448 [Compactor] The range MUST start at offset 0 or at the end offset of an earlier in…
#[tokio::test]
async fn a_late_c3_re_checks_c1_and_never_covers_an_earlier_parquet_record() {
    // C1 holds when a compaction starts; a compaction whose C3 had not taken effect before its
    // session ended must not install later over a PARQUET record another compaction put in
    // its range, or its C4 would delete that record (spec: MUST NOT replace or delete a
    // PARQUET record that an earlier compaction installed).
    let Planned { s, w, log, acked, c, claim, plan: whole } = Planned::new(19, 28, 4, "late", 34).await;
    let late = c.prepare(&log, &whole).await.unwrap().unwrap(); // [0, 4), not installed
    let mut first = whole.clone();
    first.records.truncate(2);
    first.end = 2;
    first.cumulative_end = first.records[1].cumulative_end;
    let early = c.prepare(&log, &first).await.unwrap().unwrap(); // [0, 2)
    c.finish(&claim, &early).await.unwrap();
    let installed = index_values(&s, log.log_id).await;
    let err = c.finish(&claim, &late).await.unwrap_err();
    assert!(matches!(err, CompactError::AlreadyCompacted { .. }), "{err}");
    assert_eq!(index_values(&s, log.log_id).await, installed);
    assert_eq!(read_all(&s.reader(), &log, 0).await, acked);
    claim.release(s.meta.as_ref()).await;
    w.close().await;
}

/// Prepares the compaction of the planned range cut to its first `records` records.
async fn prepare_prefix(
    c: &lakestream_compactor::Compactor,
    log: &lakestream_format::LogRef,
    whole: &lakestream_compactor::plan::RangePlan,
    skip: usize,
    records: usize,
) -> lakestream_compactor::PreparedCompaction {
    let mut plan = whole.clone();
    plan.records = whole.records[skip..skip + records].to_vec();
    plan.start = plan.records[0].start;
    plan.end = plan.records[records - 1].end;
    plan.cumulative_start =
        if skip == 0 { whole.cumulative_start } else { whole.records[skip - 1].cumulative_end };
    plan.cumulative_end = plan.records[records - 1].cumulative_end;
    c.prepare(log, &plan).await.unwrap().unwrap()
}

// spec-rule: d7b39dc25b [Compactor] A compaction MUST NOT replace or delete a PARQUET record that an earli…
#[tokio::test]
async fn a_stale_compaction_whose_key_a_later_compaction_removed_runs_no_c4() {
    // The key of R_k is absent here because a later compaction retired it, not because of a
    // hard trim: the stale compaction's C4 would delete the PARQUET record [0, 2).
    let Planned { s, w, log, acked, c, claim, plan: whole } = Planned::new(20, 29, 6, "stale", 35).await;
    let stale = prepare_prefix(&c, &log, &whole, 0, 4).await; // [0, 4)
    c.finish(&claim, &prepare_prefix(&c, &log, &whole, 0, 2).await).await.unwrap(); // [0, 2)
    c.finish(&claim, &prepare_prefix(&c, &log, &whole, 2, 4).await).await.unwrap(); // [2, 6)
    let before = index_values(&s, log.log_id).await;
    assert_eq!(before.iter().map(|(k, _, _)| k.end_offset).collect::<Vec<_>>(), vec![2, 6]);
    let err = c.finish(&claim, &stale).await.unwrap_err();
    assert!(matches!(err, CompactError::AlreadyCompacted { .. }), "{err}");
    assert_eq!(index_values(&s, log.log_id).await, before);
    assert_eq!(read_all(&s.reader(), &log, 0).await, acked);
    claim.release(s.meta.as_ref()).await;
    w.close().await;
}

// spec-rule: d7b39dc25b [Compactor] A compaction MUST NOT replace or delete a PARQUET record that an earli…
#[tokio::test]
async fn a_stale_compaction_inside_an_installed_range_is_refused() {
    // A PARQUET record [0, 4) whose C4 has not run yet covers [0, 2): a stale compaction of
    // [0, 2) must not install there, or the later C4 of [0, 4) would delete it.
    let Planned { s, w, log, acked, c, claim, plan: whole } = Planned::new(21, 30, 4, "inside", 36).await;
    let stale = prepare_prefix(&c, &log, &whole, 0, 2).await;
    let outer = prepare_prefix(&c, &log, &whole, 0, 4).await;
    let lease = c.acquire_lease(&claim).await.unwrap();
    assert_eq!(c.install(&outer, &lease).await.unwrap(), InstallOutcome::Installed); // no C4 yet
    let err = c.install(&stale, &lease).await.unwrap_err();
    assert!(matches!(err, CompactError::AlreadyCompacted { .. }), "{err}");
    c.finish(&claim, &outer).await.unwrap();
    assert_eq!(index_values(&s, log.log_id).await.len(), 1);
    assert_eq!(read_all(&s.reader(), &log, 0).await, acked);
    lease.release(s.meta.as_ref()).await.unwrap();
    claim.release(s.meta.as_ref()).await;
    w.close().await;
}

/// Appends `n` one-record entries to `log` with `w`, ages them, and has `c` claim the log and
/// prepare (C2) its whole range.
async fn claimed_and_prepared(
    s: &Stack,
    w: &lakestream_writer::Writer,
    c: &lakestream_compactor::Compactor,
    log: &lakestream_format::LogRef,
    n: usize,
) -> (lakestream_compactor::compactor::Claim, lakestream_compactor::PreparedCompaction) {
    append_n(w, log.log_id, n, 1, "rule").await;
    s.clock.advance_ms(AGE);
    let claim = c.claim(log.log_id).await.unwrap();
    let (_, planning) = c.plan(log.log_id).await.unwrap();
    let NextRange::Ready(plan) = planning.next else { panic!("{n} aged entries make a ready range") };
    let prepared = c.prepare(log, &plan).await.unwrap().unwrap();
    (claim, prepared)
}

// spec-rule: 3efab3bc24 [Compactor] A compactor SHOULD stop the compaction index update (C3–C5) and any ha…
#[tokio::test]
async fn a_compactor_stops_c3_to_c5_and_hard_trims_once_its_session_ends() {
    // [Compactor] A compactor SHOULD stop the compaction index update (C3–C5) and any hard
    // trim once it learns that the session behind its write lease has ended. The session
    // ends right after one step took effect; the next step must not run.
    let (s, ops) = common::Stack::recorded();
    let w = s.writer(150);
    let c = s.compactor(test_config(), 50);

    // Ends after C3's Put: no C4, no C5.
    let log = log_ref(50);
    let (claim, prepared) = claimed_and_prepared(&s, &w, &c, &log, 4).await;
    let (mem, session) = (s.mem.clone(), c.session_id().await.unwrap());
    let key = prepared.key();
    ops.after(
        move |op| op.starts_with("meta.put 50 ") && op.contains(&key),
        move || assert!(mem.expire_session(&session)),
    );
    let err = c.finish(&claim, &prepared).await.unwrap_err();
    assert!(matches!(err, CompactError::SessionEnded { .. }), "{err}");
    assert!(ops.fired());
    let types: Vec<FileType> =
        index_values(&s, log.log_id).await.iter().map(|(_, v, _)| v.file_type()).collect();
    assert_eq!(types, [FileType::Raw, FileType::Raw, FileType::Raw, FileType::Parquet], "C3 only");
    assert!(ops.position(&["meta.delete_range 50 "]).is_none(), "no C4: {:?}", ops.ops());
    assert!(s.meta.get("50", &keys::compaction_cursor_key(log.log_id)).await.unwrap().is_none(), "no C5");

    // Ends after C4's DeleteRange: no C5.
    let log = log_ref(51);
    let (claim, prepared) = claimed_and_prepared(&s, &w, &c, &log, 4).await;
    let (mem, session) = (s.mem.clone(), c.session_id().await.unwrap());
    ops.after(|op| op.starts_with("meta.delete_range 51 "), move || assert!(mem.expire_session(&session)));
    let err = c.finish(&claim, &prepared).await.unwrap_err();
    assert!(matches!(err, CompactError::SessionEnded { .. }), "{err}");
    assert!(ops.fired());
    assert_eq!(index_values(&s, log.log_id).await.len(), 1, "C3 and C4 took effect");
    assert!(s.meta.get("51", &keys::compaction_cursor_key(log.log_id)).await.unwrap().is_none(), "no C5");

    // A hard trim: the session ends while it takes its write lease (after the fence Get that
    // acquisition makes); it must not remove records.
    let log = log_ref(52);
    append_n(&w, log.log_id, 3, 1, "trim").await;
    w.soft_trim(log.log_id, 1).await.unwrap(); // B = 2
    let session = c.session().await.unwrap().id();
    let mem = s.mem.clone();
    ops.after(
        |op| op.starts_with("meta.get 52 /stream-write-fences/52"),
        move || assert!(mem.expire_session(&session)),
    );
    ops.clear();
    let err = c.hard_trim(&log, 2, &no_progress).await.unwrap_err();
    assert!(matches!(err, CompactError::SessionEnded { .. }), "{err}");
    assert!(ops.fired());
    assert!(ops.position(&["meta.delete_range 52 "]).is_none(), "no records removed: {:?}", ops.ops());
    assert_eq!(index_values(&s, log.log_id).await.len(), 3);
    // With a live session the same trim goes through.
    assert_eq!(c.hard_trim(&log, 2, &no_progress).await.unwrap().records_removed, 2);
    w.close().await;
}

// spec-rule: c1370562c3 [Writer, Compactor] An implementation MUST hold a write lease on L while it publis…
// spec-rule: 2c1ecab615 [Writer, Compactor] An implementation MUST NOT delete a lease record before every…
// spec-rule: 31b5e75b0b [Compactor] A compactor MUST acquire a write lease on L before each attempt at ste…
#[tokio::test]
async fn the_write_lease_is_held_from_c3_through_c4() {
    // [Compactor] A compactor MUST acquire a write lease on L before each attempt at step C3
    // and hold it until that attempt's step C4 has completed or the attempt has failed.
    let (s, ops) = common::Stack::recorded();
    let w = s.writer(153);
    let log = log_ref(53);
    append_n(&w, log.log_id, 4, 1, "held").await;
    w.close().await; // the writer's lease is gone: every lease record below is the compactor's
    s.clock.advance_ms(AGE);
    let c = s.compactor(test_config(), 53);
    ops.clear();
    c.compact_log(&log, &no_progress).await.unwrap();
    let all = ops.ops();
    let acquired = ops.position(&["session.create_ephemeral 53 /stream-write-leases/53/"]).expect("a lease");
    let token = all[acquired].rsplit('/').next().unwrap().to_string();
    let c3 = ops.position(&["meta.put 53 00000000000000000053-"]).expect("C3 put");
    let c4 = ops.position(&["meta.delete_range 53 00000000000000000053-"]).expect("C4");
    let released = ops.position(&["meta.delete 53 /stream-write-leases/53/", &token]).expect("a release");
    assert!(acquired < c3 && c3 < c4 && c4 < released, "{all:#?}");
    // Held: its record existed at C3 and at C4, and no lease was released in between.
    assert!(all[c3].ends_with(" leases=1") && all[c4].ends_with(" leases=1"), "{all:#?}");
    assert!(
        !all[acquired..c4].iter().any(|op| op.starts_with("meta.delete 53 /stream-write-leases/")),
        "{all:#?}"
    );
    assert!(lease::list_leases(s.meta.as_ref(), log.log_id).await.unwrap().is_empty(), "released after");
}

// spec-rule: c1370562c3 [Writer, Compactor] An implementation MUST hold a write lease on L while it publis…
// spec-rule: 731f7d40ad [Compactor] A compactor SHOULD delete such files before it hard-trims the records…
#[tokio::test]
async fn hard_trim_deletes_the_compacted_files_before_the_records_that_name_them() {
    // [Compactor] A compactor SHOULD delete such files before it hard-trims the records that
    // name them, so that a failed deletion can be retried from those records.
    let (s, ops) = common::Stack::recorded();
    let w = s.writer(154);
    let log = log_ref(54);
    append_n(&w, log.log_id, 4, 1, "old").await;
    s.clock.advance_ms(AGE);
    let c = s.compactor(test_config(), 54);
    c.compact_log(&log, &no_progress).await.unwrap(); // PARQUET [0, 4)
    append_n(&w, log.log_id, 2, 1, "new").await; // RAW [4, 5) [5, 6)
    let files = object_names(&s.compacted).await;
    assert_eq!(files.len(), 2, "a Parquet file and its companion");
    w.soft_trim(log.log_id, 4).await.unwrap(); // B = 5
    w.close().await; // its lease goes: the one lease record below is the compactor's
    ops.clear();
    let report = c.hard_trim(&log, 5, &no_progress).await.unwrap();
    assert_eq!(report.records_removed, 2);
    let all = ops.ops();
    let records_go = ops.position(&["meta.delete_range 54 00000000000000000054-"]).expect("the hard trim");
    assert!(all[records_go].ends_with(" leases=1"), "hard-trimmed under the compactor's lease: {all:#?}");
    for file in &files {
        let deleted = all
            .iter()
            .position(|op| op.starts_with("compacted.delete") && op.split(' ').any(|p| p == file))
            .unwrap_or_else(|| panic!("{file} was not deleted: {all:#?}"));
        assert!(deleted < records_go, "{file} deleted after the records naming it: {all:#?}");
    }
    assert!(object_names(&s.compacted).await.is_empty());
    w.close().await;
}

// spec-rule: 3088925c53 [Compactor] Every compacted file of the range and its companion MUST be completely…
#[tokio::test]
async fn c2_writes_every_file_and_companion_before_c3() {
    // [Compactor] Every compacted file of the range and its companion MUST be completely
    // written to object storage before step C3.
    let (s, ops) = common::Stack::recorded();
    let w = s.writer(155);
    let log = log_ref(55);
    append_n(&w, log.log_id, 10, 1, "files").await;
    s.clock.advance_ms(AGE);
    let c = s.compactor(CompactorConfig { max_file_bytes: 40, ..test_config() }, 55);
    ops.clear();
    let ranges = c.compact_log(&log, &no_progress).await.unwrap();
    assert!(ranges[0].files >= 3, "{ranges:?}");
    let all = ops.ops();
    let c3 = ops.position(&["meta.put 55 00000000000000000055-"]).expect("C3 put");
    let puts: Vec<usize> =
        all.iter().enumerate().filter(|(_, op)| op.starts_with("compacted.put ")).map(|(i, _)| i).collect();
    assert_eq!(puts.len(), 2 * ranges[0].files, "a Parquet file and a companion per file: {all:#?}");
    assert!(puts.iter().all(|&i| i < c3), "every put completes before C3: {all:#?}");
    w.close().await;
}

/// WAL objects that hold hundreds of logs (the writer closes objects on size or window, not
/// on a count of logs) are read back whole by every reader path: RAW, then after compaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_of_hundreds_of_logs_read_back_raw_and_after_compaction() {
    const LOGS: u64 = 200;
    let s = Stack::new();
    let deps = lakestream_writer::WriterDeps {
        meta: s.meta.clone(),
        objects: s.wal.clone(),
        clock: std::sync::Arc::new(s.clock.clone()),
        tokens: std::sync::Arc::new(lakestream_meta::lease::SeededTokens::new(41)),
    };
    let config = WriterConfig {
        flush_window: Duration::from_millis(300),
        flush_when_idle: false,
        ..WriterConfig::default()
    };
    let w = lakestream_writer::Writer::start(config, deps).unwrap();
    let appends = (0..3u64).flat_map(|round| (1..=LOGS).map(move |log| (round, log))).map(|(round, log)| {
        let w = w.clone();
        async move {
            let payload = Bytes::from(format!("log {log} entry {round} {}", "y".repeat((log % 13) as usize)));
            let ack = w.append(LogId(log), payload.clone(), 1 + (round as u32 % 2)).await.unwrap();
            (
                log,
                lakestream_format::Entry {
                    offset: ack.offset,
                    record_count: ack.record_count,
                    timestamp_ms: ack.timestamp_ms,
                    payload,
                },
            )
        }
    });
    let mut acked: std::collections::BTreeMap<u64, Vec<lakestream_format::Entry>> = Default::default();
    for (log, entry) in futures::future::join_all(appends).await {
        acked.entry(log).or_default().push(entry);
    }
    for entries in acked.values_mut() {
        entries.sort_by_key(|e| e.offset);
    }
    let wal_objects = object_names(&s.wal).await.len();
    assert!(wal_objects <= 3, "{wal_objects} WAL objects for 600 entries of {LOGS} logs in one window");
    let logs: Vec<_> = (1..=LOGS).map(log_ref).collect();
    for log in &logs {
        assert_eq!(read_all(&s.reader(), log, 0).await, acked[&log.log_id.0], "RAW read of {}", log.log_id);
    }
    s.clock.advance_ms(181_000);
    let c = s.compactor(test_config(), 42);
    let report = c.compact_once(&logs, &no_progress).await;
    assert_eq!(report.failed, vec![], "{report:?}");
    assert_eq!(report.ranges.len(), LOGS as usize, "one range per log");
    for log in &logs {
        assert_eq!(
            read_all(&s.reader(), log, 0).await,
            acked[&log.log_id.0],
            "read of {} after compaction",
            log.log_id
        );
    }
    w.close().await;
}

// spec-rule: 9bc0ff7256 [Compactor] A compactor MUST give each compacted file a name that ends in .parquet…
// spec-rule: 5c928435fa [Compactor] A compactor MUST NOT change or overwrite a compacted file or a compani…
#[tokio::test]
async fn compacted_files_are_written_once_and_never_overwritten() {
    // [Compactor] A compactor MUST NOT change or overwrite a compacted file or a companion
    // file after writing it. Two ranges, a repeated C3/C4 and a second prepare of one range:
    // every put names a file no earlier put named.
    let (s, ops) = common::Stack::recorded();
    let w = s.writer(156);
    let log = log_ref(56);
    let c = s.compactor(CompactorConfig { max_file_bytes: 40, ..test_config() }, 56);
    let (claim, prepared) = claimed_and_prepared(&s, &w, &c, &log, 6).await;
    let again = c.prepare(&log, &prepared.plan).await.unwrap().unwrap(); // an abandoned C2
    assert_eq!(c.finish(&claim, &prepared).await.unwrap(), InstallOutcome::Installed);
    assert_eq!(c.finish(&claim, &prepared).await.unwrap(), InstallOutcome::AlreadyInstalled);
    claim.release(s.meta.as_ref()).await;
    append_n(&w, log.log_id, 4, 1, "more").await;
    s.clock.advance_ms(AGE);
    assert_eq!(c.compact_log(&log, &no_progress).await.unwrap().len(), 1);
    let puts: Vec<String> = ops.ops().into_iter().filter(|op| op.starts_with("compacted.put ")).collect();
    let files = prepared.files.len() + again.files.len();
    assert!(puts.len() > 2 * files, "two compactions and an abandoned C2 wrote files: {puts:#?}");
    let unique: std::collections::HashSet<&String> = puts.iter().collect();
    assert_eq!(unique.len(), puts.len(), "a compacted file or companion was written twice: {puts:#?}");
    w.close().await;
}

/// The metadata-store operations of one compacted range of `objects` one-entry WAL objects:
/// (ledger operations, point operations (every one but scans, whose pages follow the
/// reader's read size), every operation).
async fn ops_of_one_range(objects: usize) -> (usize, usize, Vec<String>) {
    let (s, ops) = common::Stack::recorded();
    let w = s.writer(160);
    let log = log_ref(60);
    append_n(&w, log.log_id, objects, 1, "count").await;
    w.close().await;
    assert_eq!(object_names(&s.wal).await.len(), objects, "one WAL object per append");
    s.clock.advance_ms(AGE);
    let c = s.compactor(test_config(), 60);
    c.session().await.unwrap();
    ops.clear();
    let ranges = c.compact_log(&log, &no_progress).await.unwrap();
    assert_eq!(ranges.len(), 1);
    let all: Vec<String> = ops.ops().into_iter().filter(|op| !op.starts_with("compacted.")).collect();
    let ledger = all.iter().filter(|op| op.contains(&format!(" {} ", ledger::LEDGER_PARTITION))).count();
    let point = all.iter().filter(|op| !op.starts_with("meta.scan ")).count();
    (ledger, point, all)
}

#[tokio::test]
async fn one_ledger_write_per_range_whatever_its_number_of_wal_objects() {
    // Before issue #19: a Get and a Put of a ledger entry per WAL object (4 objects: 8 ledger
    // operations of 26 metadata operations; 32 objects: 64 of 83). Now one announcement per
    // range (4 objects: 1 of 19; 32 objects: 1 of 20, the extra one a page of the reader).
    let (ledger_4, point_4, all_4) = ops_of_one_range(4).await;
    let (ledger_32, point_32, all_32) = ops_of_one_range(32).await;
    eprintln!(
        "metadata operations per range: 4 objects: {ledger_4} ledger, {} in all; 32 objects: {ledger_32} ledger, {} in all",
        all_4.len(),
        all_32.len()
    );
    assert_eq!((ledger_4, ledger_32), (1, 1), "one ledger put per range: {all_32:#?}");
    assert!(all_32.iter().any(|op| op.starts_with("meta.put lakestream-gc /lakestream-wal-retirements/")));
    assert_eq!(point_4, point_32, "a range's point operations do not grow with its objects: {all_32:#?}");
}

#[tokio::test]
async fn a_crash_between_the_announcement_and_c3_keeps_every_object_until_a_later_compaction() {
    // The announcement is written before C3's Put; a crash in between leaves an announcement
    // of objects that RAW records still name. The collector must keep them (however long)
    // and reclaim them a grace period after the compaction that finally removes the records.
    let (s, ops) = common::Stack::recorded();
    let w = s.writer(161);
    let log = log_ref(61);
    let config = CompactorConfig { orphan_scan: false, ..test_config() };
    let c = s.compactor(config.clone(), 61);
    let (claim, prepared) = claimed_and_prepared(&s, &w, &c, &log, 4).await;
    let acked = read_all(&s.reader(), &log, 0).await;
    let wal_before = object_names(&s.wal).await;
    assert_eq!(wal_before.len(), 4);
    let (mem, session) = (s.mem.clone(), c.session_id().await.unwrap());
    ops.after(
        |op| op.starts_with("meta.put lakestream-gc /lakestream-wal-retirements/"),
        move || assert!(mem.expire_session(&session)),
    );
    let err = c.finish(&claim, &prepared).await.unwrap_err();
    assert!(matches!(err, CompactError::SessionEnded { .. }), "{err}");
    assert!(ops.fired());
    let types: Vec<FileType> =
        index_values(&s, log.log_id).await.iter().map(|(_, v, _)| v.file_type()).collect();
    assert_eq!(types, [FileType::Raw; 4], "no C3");
    let announced: Vec<String> = ledger::candidates(s.meta.as_ref()).await.unwrap().into_iter().collect();
    assert_eq!(announced, wal_before);

    // Named objects stay, however old their announcement.
    s.clock.advance_ms(10 * 3_600_000);
    let report = c.gc_once(&no_progress).await.unwrap();
    assert_eq!((report.announcements_expanded, report.still_referenced), (1, 4), "{report:?}");
    s.clock.advance_ms(10 * 3_600_000);
    assert!(c.gc_once(&no_progress).await.unwrap().wal_deleted.is_empty());
    assert_eq!(object_names(&s.wal).await, wal_before);
    assert_eq!(read_all(&s.reader(), &log, 0).await, acked);

    // A later compaction removes the records; the objects go a grace period after that.
    let c2 = s.compactor(config, 62);
    assert_eq!(c2.compact_log(&log, &no_progress).await.unwrap().len(), 1);
    let report = c2.gc_once(&no_progress).await.unwrap();
    assert_eq!((report.announcements_expanded, report.marked_unreferenced), (1, 4), "{report:?}");
    s.clock.advance_ms(3_600_000 - 1);
    assert!(c2.gc_once(&no_progress).await.unwrap().wal_deleted.is_empty(), "one ms short of the grace");
    s.clock.advance_ms(1);
    let mut deleted = c2.gc_once(&no_progress).await.unwrap().wal_deleted;
    deleted.sort();
    assert_eq!(deleted, wal_before);
    assert!(ledger::candidates(s.meta.as_ref()).await.unwrap().is_empty());
    assert_eq!(read_all(&s.reader(), &log, 0).await, acked, "the data lives on in Parquet");
    w.close().await;
}

#[tokio::test]
async fn a_collector_crash_between_expanding_and_deleting_an_announcement_is_repeated() {
    // The collector deletes an announcement only after its per-object entries are written;
    // a failure in between leaves it, and the next pass expands it again.
    let (s, ops) = common::Stack::recorded();
    let w = s.writer(162);
    let log = log_ref(63);
    append_n(&w, log.log_id, 3, 1, "gc").await;
    s.clock.advance_ms(AGE);
    let c = s.compactor(CompactorConfig { orphan_scan: false, ..test_config() }, 63);
    c.compact_log(&log, &no_progress).await.unwrap();
    let wal_before = object_names(&s.wal).await;
    ops.fail_once(|op| op.starts_with("meta.delete lakestream-gc /lakestream-wal-retirements/"));
    c.gc_once(&no_progress).await.unwrap_err();
    assert!(ops.failed());
    assert_eq!(ledger::list(s.meta.as_ref()).await.unwrap().len(), 3, "the entries were written");
    assert_eq!(ledger::announcements(s.meta.as_ref()).await.unwrap().len(), 1, "the announcement stays");
    let report = c.gc_once(&no_progress).await.unwrap();
    assert_eq!((report.announcements_expanded, report.marked_unreferenced), (1, 3), "{report:?}");
    assert!(ledger::announcements(s.meta.as_ref()).await.unwrap().is_empty());
    s.clock.advance_ms(3_600_000 - 1);
    assert!(c.gc_once(&no_progress).await.unwrap().wal_deleted.is_empty());
    s.clock.advance_ms(1);
    let mut deleted = c.gc_once(&no_progress).await.unwrap().wal_deleted;
    deleted.sort();
    assert_eq!(deleted, wal_before);
    w.close().await;
}

/// Three logs whose entries share every WAL object, on the local-filesystem store behind a
/// counter of GETs per object: one pass fetches each object once for all three logs (one log
/// at a time, `concurrent_logs = 1`, fetches it once per log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pass_fetches_each_shared_wal_object_once_for_all_its_logs() {
    const PAYLOAD: usize = 1000;
    for (concurrent_logs, gets_per_object) in [(8, 1), (1, 3)] {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Stack::new();
        let root = lakestream_objstore::ObjectRoot::new("wal", None).unwrap();
        let local = lakestream_objstore::LocalFsStore::new(dir.path(), root).unwrap();
        let counting =
            std::sync::Arc::new(lakestream_objstore::CountingStore::per_object(std::sync::Arc::new(local)));
        s.wal = counting.clone();
        // Compacted files stream to disk row group by row group (16-byte row groups here).
        let compacted_root = lakestream_objstore::ObjectRoot::new("compacted", None).unwrap();
        s.compacted =
            std::sync::Arc::new(lakestream_objstore::LocalFsStore::new(dir.path(), compacted_root).unwrap());
        // A batch flushes once it holds the three logs' entries of a round: one object each.
        let w = s.writer_with(170, one_batch_of_bytes(3 * PAYLOAD));
        let logs = [log_ref(70), log_ref(71), log_ref(72)];
        let mut acked: Vec<Vec<lakestream_format::Entry>> = vec![Vec::new(); logs.len()];
        for round in 0..4u8 {
            let appends = logs.iter().enumerate().map(|(i, l)| {
                let payload = Bytes::from(vec![round * 8 + i as u8; PAYLOAD]);
                let w = &w;
                async move { (payload.clone(), w.append(l.log_id, payload, 1).await.unwrap()) }
            });
            for (i, (payload, ack)) in futures::future::join_all(appends).await.into_iter().enumerate() {
                acked[i].push(lakestream_format::Entry {
                    offset: ack.offset,
                    record_count: ack.record_count,
                    timestamp_ms: ack.timestamp_ms,
                    payload,
                });
            }
        }
        let objects = object_names(&s.wal).await;
        assert_eq!(objects.len(), 4, "one object per round");
        s.clock.advance_ms(AGE);
        let c = s.compactor(CompactorConfig { concurrent_logs, row_group_bytes: 16, ..test_config() }, 70);
        counting.take();
        let report = c.compact_once(&logs, &no_progress).await;
        assert_eq!((report.ranges.len(), report.failed.len()), (3, 0), "{report:?}");
        let gets = counting.gets_per_object();
        assert_eq!(gets.keys().map(ToString::to_string).collect::<Vec<_>>(), objects);
        assert!(
            gets.values().all(|&n| n == gets_per_object),
            "concurrent_logs {concurrent_logs}: GETs per object {gets:?}"
        );
        for (log, entries) in logs.iter().zip(&acked) {
            assert_eq!(&read_all(&s.reader(), log, 0).await, entries, "log {}", log.log_id);
            let types: Vec<FileType> =
                index_values(&s, log.log_id).await.iter().map(|(_, v, _)| v.file_type()).collect();
            assert_eq!(types, [FileType::Parquet]);
        }
        w.close().await;
    }
}

/// Eight logs compacted in one pass, whose entries share every WAL object: the row groups
/// between collection and upload never exceed the compactor-wide budget
/// (`row_group_budget_bytes`, two row groups here, against eight logs filling row groups at
/// once), every log still completes, and every log reads back what was appended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_logs_stay_within_the_row_group_budget_and_complete() {
    const PAYLOAD: usize = 1024;
    const ROW_GROUP: usize = 4 * PAYLOAD;
    let dir = tempfile::tempdir().unwrap();
    let mut s = Stack::new();
    // Compacted files stream to disk row group by row group.
    let compacted_root = lakestream_objstore::ObjectRoot::new("compacted", None).unwrap();
    s.compacted =
        std::sync::Arc::new(lakestream_objstore::LocalFsStore::new(dir.path(), compacted_root).unwrap());
    let logs: Vec<LogRef> = (0..8).map(|i| log_ref(190 + i)).collect();
    // A batch flushes once it holds the eight logs' entries of a round: one object each.
    let w = s.writer_with(190, one_batch_of_bytes(logs.len() * PAYLOAD));
    let mut acked: Vec<Vec<lakestream_format::Entry>> = vec![Vec::new(); logs.len()];
    for round in 0..12u8 {
        let appends = logs.iter().enumerate().map(|(i, l)| {
            let payload = Bytes::from(vec![round.wrapping_mul(16).wrapping_add(i as u8); PAYLOAD]);
            let w = &w;
            async move { (payload.clone(), w.append(l.log_id, payload, 1).await.unwrap()) }
        });
        for (i, (payload, ack)) in futures::future::join_all(appends).await.into_iter().enumerate() {
            acked[i].push(lakestream_format::Entry {
                offset: ack.offset,
                record_count: ack.record_count,
                timestamp_ms: ack.timestamp_ms,
                payload,
            });
        }
    }
    s.clock.advance_ms(AGE);
    let config = CompactorConfig { concurrent_logs: 8, row_group_bytes: ROW_GROUP, ..test_config() };
    let budget = config.row_group_budget_bytes();
    assert_eq!(budget, 2 * ROW_GROUP as u64);
    let c = s.compactor(config, 190);
    let report =
        tokio::time::timeout(std::time::Duration::from_secs(60), c.compact_once(&logs, &no_progress))
            .await
            .expect("the pass did not finish in 60 s: logs waiting on the row-group budget deadlocked");
    assert_eq!((report.logs_compacted, report.ranges.len(), report.failed.len()), (8, 8, 0), "{report:?}");
    let high_water = c.row_group_bytes_high_water();
    assert!(
        (ROW_GROUP as u64..=budget).contains(&high_water),
        "row-group bytes held at once: {high_water}, budget {budget}"
    );
    for (log, entries) in logs.iter().zip(&acked) {
        assert_eq!(&read_all(&s.reader(), log, 0).await, entries, "log {}", log.log_id);
        let types: Vec<FileType> =
            index_values(&s, log.log_id).await.iter().map(|(_, v, _)| v.file_type()).collect();
        assert_eq!(types, [FileType::Parquet]);
    }
    w.close().await;
}
