//! The attempts of a compaction's index update (C3–C5) within one `finish`, under the write
//! lease: a failure after C3 took effect is repeated in process with the same range and value
//! until C4 completes, or until the log is fenced; a change whose outcome is unknown keeps its
//! lease until a read settles it, and otherwise the lease goes with its session, never by a
//! delete. Over the in-memory stores, every metadata operation recorded in order.

mod common;

use common::{OpLog, Stack, append_n, log_ref, test_config};
use lakestream_compactor::plan::NextRange;
use lakestream_compactor::{Compactor, InstallOutcome, PreparedCompaction, compactor::Claim};
use lakestream_format::entry_index::{self, IndexValue};
use lakestream_format::{FileType, LogRef, keys};
use lakestream_meta::lease;

const AGE: i64 = 10 * 60_000;

/// A log of `n` aged entries, claimed and prepared (C2 done) by a compactor of `seed`.
async fn prepared(s: &Stack, log: &LogRef, n: usize, seed: u64) -> (Compactor, Claim, PreparedCompaction) {
    let w = s.writer(seed);
    append_n(&w, log.log_id, n, 1, "attempt").await;
    w.close().await; // the writer's lease goes: every lease record below is the compactor's
    s.clock.advance_ms(AGE);
    let c = s.compactor(test_config(), seed);
    let claim = c.claim(log.log_id).await.unwrap();
    let (_, planning) = c.plan(log.log_id).await.unwrap();
    let NextRange::Ready(plan) = planning.next else { panic!("{n} aged entries make a ready range") };
    let prepared = c.prepare(log, &plan).await.unwrap().unwrap();
    (c, claim, prepared)
}

/// The file types of the log's index records, in key order.
async fn file_types(s: &Stack, log: &LogRef) -> Vec<FileType> {
    let p = keys::partition(log.log_id);
    let records =
        s.meta.scan(&p, &keys::first_key(log.log_id), &keys::last_key(log.log_id), None).await.unwrap();
    records.iter().map(|r| entry_index::decode(&r.value).unwrap().file_type()).collect()
}

/// Positions of the operations that contain every one of `parts`.
fn positions(ops: &OpLog, parts: &[&str]) -> Vec<usize> {
    ops.ops()
        .iter()
        .enumerate()
        .filter(|(_, op)| parts.iter().all(|p| op.contains(p)))
        .map(|(i, _)| i)
        .collect()
}

// spec-rule: 0a53579984 [Compactor] If a compaction fails after step C3 has taken effect, the compactor MU…
#[tokio::test]
async fn c3_and_c4_are_repeated_in_process_with_the_same_range_and_value_until_c4_completes() {
    // [Compactor] If a compaction fails after step C3 has taken effect, the compactor MUST
    // repeat steps C3 and C4, with the same range and the same value, until step C4 has
    // completed. Here C4 fails once, within one `finish`.
    let (s, ops) = Stack::recorded();
    let log = log_ref(60);
    let (c, claim, prepared) = prepared(&s, &log, 4, 60).await;
    let p = keys::partition(log.log_id);
    let key = prepared.key();
    ops.clear();
    ops.fail_once(|op| op.starts_with("meta.delete_range 60 "));
    assert_eq!(c.finish(&claim, &prepared).await.unwrap(), InstallOutcome::AlreadyInstalled);
    assert!(ops.failed());
    let gets = positions(&ops, &[&format!("meta.get {p} {key} Equal")]);
    let puts = positions(&ops, &[&format!("meta.put {p} {key}")]);
    let c4 = positions(&ops, &["meta.delete_range 60 "]);
    assert_eq!(puts.len(), 1, "C3 put once; the repetition's Get found the value: {:#?}", ops.ops());
    assert_eq!((gets.len(), c4.len()), (2, 2), "C3 and C4 twice: {:#?}", ops.ops());
    assert!(ops.ops()[c4[0]].ends_with("FAILED"));
    assert!(gets[0] < puts[0] && puts[0] < c4[0] && c4[0] < gets[1] && gets[1] < c4[1], "{:#?}", ops.ops());
    // Each attempt under a lease of its own, the failed one's released first (it has a known
    // outcome: the DeleteRange did not run).
    let acquired = positions(&ops, &["session.create_ephemeral 60 /stream-write-leases/60/"]);
    let released = positions(&ops, &["meta.delete 60 /stream-write-leases/60/"]);
    assert_eq!((acquired.len(), released.len()), (2, 2), "{:#?}", ops.ops());
    assert!(
        acquired[0] < puts[0] && c4[0] < released[0] && released[0] < acquired[1] && acquired[1] < gets[1]
    );
    // The same value, one PARQUET record, nothing kept for later.
    let stored = s.meta.get(&p, &key).await.unwrap().unwrap();
    assert_eq!(stored.value, prepared.value);
    assert_eq!(file_types(&s, &log).await, [FileType::Parquet]);
    assert!(c.pending().is_empty());
    claim.release(s.meta.as_ref()).await;
}

// spec-rule: 0a53579984 [Compactor] If a compaction fails after step C3 has taken effect, the compactor MU…
#[tokio::test]
async fn a_log_fenced_after_c3_took_effect_stops_the_repetition_at_its_lease() {
    // [Compactor] … repeat C3 and C4 … until step C4 has completed, or until it can no longer
    // acquire a write lease on L because L has been fenced for deletion. The fence lands after
    // C3's Put took effect; C4 then fails once, and the repetition finds the fence.
    let (s, ops) = Stack::recorded();
    let log = log_ref(61);
    let (c, claim, prepared) = prepared(&s, &log, 4, 61).await;
    let key = prepared.key();
    let mem = s.mem.clone();
    ops.clear();
    ops.after(
        move |op| op.starts_with("meta.put 61 ") && op.contains(&key),
        move || futures::executor::block_on(lease::fence(&mem, log_ref(61).log_id)).unwrap(),
    );
    ops.fail_once(|op| op.starts_with("meta.delete_range 61 "));
    let err = c.finish(&claim, &prepared).await.unwrap_err();
    assert!(err.is_fenced(), "{err}");
    assert!(ops.fired() && ops.failed());
    // C3 took effect, C4 did not: the PARQUET record overlaps the RAW ones it replaces,
    // which the log's deletion removes.
    assert_eq!(file_types(&s, &log).await, [FileType::Raw, FileType::Raw, FileType::Raw, FileType::Parquet]);
    assert!(c.pending().is_empty(), "a fenced log's compaction is not kept for a retry");
    assert!(lease::list_leases(s.meta.as_ref(), log.log_id).await.unwrap().is_empty());
    claim.release(s.meta.as_ref()).await;
}

// spec-rule: 2c1ecab615 [Writer, Compactor] An implementation MUST NOT delete a lease record before every…
#[tokio::test]
async fn a_c3_put_of_unknown_outcome_keeps_its_lease_for_the_attempt_whose_get_settles_it() {
    // [Writer, Compactor] An implementation MUST NOT delete a lease record before every change
    // it started under that lease has completed. C3's Put committed but its answer was lost:
    // the next attempt runs under the same lease, and its Get finds the value.
    let (s, ops) = Stack::recorded();
    let log = log_ref(62);
    let (c, claim, prepared) = prepared(&s, &log, 4, 62).await;
    let key = prepared.key();
    ops.clear();
    let target = key.clone();
    ops.unknown_once(move |op| op.starts_with("meta.put 62 ") && op.contains(&target), true);
    assert_eq!(c.finish(&claim, &prepared).await.unwrap(), InstallOutcome::AlreadyInstalled);
    let acquired = positions(&ops, &["session.create_ephemeral 62 /stream-write-leases/62/"]);
    let released = positions(&ops, &["meta.delete 62 /stream-write-leases/62/"]);
    let lost = positions(&ops, &["meta.put 62 ", &key, "ANSWER LOST"]);
    let settled = positions(&ops, &[&format!("meta.get 62 {key} Equal")]);
    assert_eq!(acquired.len(), 1, "one lease for both attempts: {:#?}", ops.ops());
    assert_eq!((lost.len(), settled.len(), released.len()), (1, 2, 1), "{:#?}", ops.ops());
    assert!(
        lost[0] < settled[1] && settled[1] < released[0],
        "released only after the Get: {:#?}",
        ops.ops()
    );
    assert_eq!(file_types(&s, &log).await, [FileType::Parquet]);
    assert!(claim.is_live(), "no session had to end");
    claim.release(s.meta.as_ref()).await;
}

// spec-rule: 2c1ecab615 [Writer, Compactor] An implementation MUST NOT delete a lease record before every…
#[tokio::test]
async fn a_c3_put_still_unknown_after_its_attempts_lets_the_lease_go_only_with_the_session() {
    // The same rule when C3's Put is still in the store's pipeline: the next attempt's Get does
    // not see it and puts again, so the first Put may still land after `finish`. The lease
    // record must not be deleted; it goes with its session, which the compactor closes.
    let (s, ops) = Stack::recorded();
    let log = log_ref(63);
    let (c, claim, prepared) = prepared(&s, &log, 4, 63).await;
    let key = prepared.key();
    ops.clear();
    let target = key.clone();
    ops.unknown_once(move |op| op.starts_with("meta.put 63 ") && op.contains(&target), false);
    assert_eq!(c.finish(&claim, &prepared).await.unwrap(), InstallOutcome::Installed);
    assert_eq!(positions(&ops, &["meta.put 63 ", &key, "HELD"]).len(), 1, "{:#?}", ops.ops());
    assert_eq!(positions(&ops, &["session.create_ephemeral 63 /stream-write-leases/63/"]).len(), 1);
    assert!(positions(&ops, &["meta.delete 63 /stream-write-leases/"]).is_empty(), "{:#?}", ops.ops());
    assert!(
        lease::list_leases(s.meta.as_ref(), log.log_id).await.unwrap().is_empty(),
        "gone with the session"
    );
    assert!(!claim.is_live(), "the session behind the lease (and the claim) was closed");
    assert_eq!(file_types(&s, &log).await, [FileType::Parquet]);
    // The held Put landing late changes nothing: the same value under the same key.
    let p = keys::partition(log.log_id);
    let before = s.meta.get(&p, &key).await.unwrap().unwrap();
    assert!(matches!(entry_index::decode(&before.value).unwrap(), IndexValue::Parquet(_)));
    assert_eq!(before.value, prepared.value);
    // The compactor goes on with a new session.
    let next = c.claim(log.log_id).await.unwrap();
    assert!(next.is_live());
    next.release(s.meta.as_ref()).await;
}
