//! Index puts pipelined per log (issue #18): up to `max_index_puts_in_flight_per_log` of one
//! log's sequenced puts in flight, issued in the log's flush order on a store that commits
//! them in that order, answered in that order; a failed or unknown put fails its own entries,
//! and the puts issued behind it are never acknowledged. The store is the in-memory one
//! (which applies a sequenced put at the call), wrapped so that a test can hold a put's
//! answer or make it fail; one object per append (`flush()` between appends).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lakestream_format::{Clock, LogId, ManualClock, keys};
use lakestream_meta::hooked::{self, GateHandle, HookedStore, Op};
use lakestream_meta::lease::SeededTokens;
use lakestream_meta::{InMemoryStore, MetaError, Record};
use lakestream_objstore::InMemoryStore as MemObjects;
use lakestream_writer::{AppendAck, AppendError, Writer, WriterConfig, WriterDeps};

/// The in-memory store (which applies a sequenced put at the call), claiming or not that it
/// commits sequenced puts in call order.
fn planned(ordered: bool, clock: Arc<dyn Clock>) -> Arc<HookedStore> {
    let meta = HookedStore::new(Arc::new(InMemoryStore::with_config(1, clock).unwrap()));
    meta.claim_commit_in_call_order(ordered);
    meta
}

/// The `n`-th sequenced put (counted from 1) is applied at the call; its answer waits until
/// the handle opens the gate (or is dropped).
fn hold(meta: &HookedStore, n: u64) -> GateHandle {
    let (gate, release) = hooked::gate();
    meta.on(Op::SequencedPut).when(move |call| call.nth == n).pause_after(gate);
    release
}

/// The `n`-th sequenced put is not applied; once the handle opens the gate, it is answered
/// with an error that says it did not take effect.
fn fail_after(meta: &HookedStore, n: u64) -> GateHandle {
    let (gate, release) = hooked::gate();
    meta.on(Op::SequencedPut).when(move |call| call.nth == n).pause(gate);
    let refused = MetaError::Unavailable(format!("sequenced put {n} refused by the test"));
    meta.on(Op::SequencedPut).when(move |call| call.nth == n).fail(refused);
    release
}

async fn index_records(meta: &HookedStore, log: LogId) -> Vec<Record> {
    let p = keys::partition(log);
    meta.inner().scan(&p, &keys::first_key(log), &keys::last_key(log), None).await.unwrap()
}

fn writer(meta: Arc<HookedStore>, clock: Arc<dyn Clock>, puts_per_log: usize) -> Writer {
    let deps = WriterDeps {
        meta,
        objects: Arc::new(MemObjects::new(clock.clone())),
        clock,
        tokens: Arc::new(SeededTokens::new(18)),
    };
    // A long window: objects close only at flush(), one per append.
    let config = WriterConfig {
        flush_window: Duration::from_secs(3600),
        flush_when_idle: false,
        max_index_puts_in_flight_per_log: puts_per_log,
        ..WriterConfig::default()
    };
    Writer::start(config, deps).unwrap()
}

fn clock() -> Arc<dyn Clock> {
    Arc::new(ManualClock::new(1_796_000_000_000))
}

/// Appends `n` one-record entries to `log`, each in an object of its own, and waits until
/// `wait_for` index puts in all have been issued; answers the appends' handles.
async fn append_each_in_its_object(
    w: &Writer,
    meta: &HookedStore,
    log: LogId,
    n: usize,
    wait_for: usize,
) -> Vec<tokio::task::JoinHandle<Result<AppendAck, AppendError>>> {
    let mut handles = Vec::new();
    let before = w.stats().objects_written;
    for i in 0..n {
        let w2 = w.clone();
        handles.push(tokio::spawn(async move { w2.append(log, Bytes::from(vec![i as u8; 8]), 1).await }));
        // Let the append reach the batcher, then close its object.
        tokio::task::yield_now().await;
        while w.stats().objects_written < before + handles.len() as u64 {
            w.flush().await;
            tokio::task::yield_now().await;
        }
    }
    meta.wait_for_calls(Op::SequencedPut, wait_for as u64).await;
    handles
}

#[tokio::test]
async fn a_logs_index_puts_are_pipelined_up_to_the_limit_and_answered_in_issue_order() {
    // Up to K puts of one log in flight at once, not more; the first held back, the later
    // ones complete first, yet every entry is answered only after the earlier ones, at
    // offsets in append order.
    let clock = clock();
    let meta = planned(true, clock.clone());
    let w = writer(meta.clone(), clock, 4);
    let log = LogId(1801);
    let release = hold(&meta, 1);
    let handles = append_each_in_its_object(&w, &meta, log, 6, 4).await;
    // Four puts issued (the first held); the fifth waits for a free place.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(meta.calls(Op::SequencedPut), 4, "puts issued with the first one held");
    assert!(handles.iter().all(|h| !h.is_finished()), "no entry answered before the first put's");
    release.open();
    let mut offsets = Vec::new();
    for h in handles {
        offsets.push(h.await.unwrap().unwrap().offset);
    }
    assert_eq!(offsets, (0..6).collect::<Vec<u64>>(), "offsets follow the append order");
    assert_eq!(meta.calls(Op::SequencedPut), 6);
    assert_eq!(index_records(&meta, log).await.len(), 6);
    w.close().await;
}

#[tokio::test]
async fn a_store_that_does_not_commit_in_call_order_gets_one_index_put_per_log_at_a_time() {
    let clock = clock();
    let meta = planned(false, clock.clone());
    let w = writer(meta.clone(), clock, 4);
    let log = LogId(1802);
    let handles = append_each_in_its_object(&w, &meta, log, 5, 5).await;
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.await.unwrap().unwrap().offset, i as u64);
    }
    assert_eq!(meta.max_in_flight(Op::SequencedPut), 1);
    w.close().await;
}

#[tokio::test]
async fn a_failed_index_put_fails_its_entries_and_the_puts_issued_behind_it_are_not_acknowledged() {
    // Put 1 fails without taking effect, after puts 2 and 3 (issued behind it) committed:
    // entry 1 is reported not appended; entries 2 and 3 are not acknowledged (outcome
    // unknown: they are in the log, but a caller retrying entry 1 must not be told that later
    // entries were appended before it). Appends after the failure are acknowledged again.
    let clock = clock();
    let meta = planned(true, clock.clone());
    let w = writer(meta.clone(), clock, 4);
    let log = LogId(1803);
    let fail = fail_after(&meta, 1);
    let handles = append_each_in_its_object(&w, &meta, log, 3, 3).await;
    // Puts 2 and 3 have committed; their entries wait for put 1's answer.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(index_records(&meta, log).await.len(), 2);
    assert!(handles.iter().all(|h| !h.is_finished()));
    fail.open();
    let mut results = Vec::new();
    for h in handles {
        results.push(h.await.unwrap());
    }
    assert!(
        matches!(&results[0], Err(AppendError::IndexPutFailed { log_id, .. }) if *log_id == log),
        "{:?}",
        results[0]
    );
    for r in &results[1..] {
        assert!(
            matches!(r, Err(AppendError::OutcomeUnknown { reason, .. }) if reason.contains("earlier index put")),
            "{r:?}"
        );
    }
    // The log goes on: the next entry takes the offsets after the committed puts.
    let next = append_each_in_its_object(&w, &meta, log, 1, 4).await.pop().unwrap();
    assert_eq!(next.await.unwrap().unwrap().offset, 2);
    w.close().await;
}

#[tokio::test]
async fn one_logs_held_index_put_does_not_hold_back_another_log() {
    // Logs are independent: log A's first put is held, log B's entries are acknowledged.
    let clock = clock();
    let meta = planned(true, clock.clone());
    let w = writer(meta.clone(), clock, 4);
    let release = hold(&meta, 1);
    let a = append_each_in_its_object(&w, &meta, LogId(1804), 1, 1).await;
    let b = append_each_in_its_object(&w, &meta, LogId(1805), 3, 4).await;
    for (i, h) in b.into_iter().enumerate() {
        assert_eq!(h.await.unwrap().unwrap().offset, i as u64);
    }
    assert!(!a[0].is_finished());
    release.open();
    for h in a {
        assert_eq!(h.await.unwrap().unwrap().offset, 0);
    }
    w.close().await;
}
