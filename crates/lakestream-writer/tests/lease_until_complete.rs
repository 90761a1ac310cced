//! [Writer, Compactor] An implementation MUST NOT delete a lease record before every change it
//! started under that lease has completed. An index put whose outcome is unknown may still
//! commit: its lease record stays until a read shows the record (the put completed), or, if no
//! read does within a session timeout, it goes with its session, never by a delete. Over the
//! in-memory stores, with a put the store holds back as a slow pipeline would.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lakestream_format::{Clock, ErrorClass, LogId, ManualClock, keys};
use lakestream_meta::hooked::{HookedStore, Op};
use lakestream_meta::lease::{self, DrainConfig, DrainOutcome, SeededTokens};
use lakestream_meta::{InMemoryStore, MetaError, WriteResult};
use lakestream_objstore::InMemoryStore as MemObjects;
use lakestream_writer::{AppendError, Writer, WriterConfig, WriterDeps};

/// The next sequenced put of `log` is held back: it answers "outcome unknown" now and commits
/// when the test lands it ([`land_held`]).
fn hold_next_index_put(meta: &HookedStore, log: LogId) {
    meta.on(Op::SequencedPut).partition(keys::partition(log)).once().hold();
}

/// The next write of `log`'s trim marker is held back, and the read of the marker after it
/// fails.
fn hold_next_marker_write(meta: &HookedStore, log: LogId) {
    let held = meta.on(Op::Put).key(keys::trim_marker_key(log)).once().hold();
    let refused = MetaError::Unavailable("injected: the marker read failed".into());
    meta.on(Op::Get)
        .key_prefix("/mark-deleted-offsets/")
        .when(move |_| held.fired() > 0)
        .once()
        .fail(refused);
}

/// Commits the held call, as the store's pipeline finally does.
async fn land_held(meta: &HookedStore) -> Option<WriteResult> {
    let held = meta.held();
    assert_eq!(held.len(), 1, "one held call: {held:?}");
    meta.land(&held[0]).await.unwrap().written()
}

/// The keys of every delete made so far.
fn deletes(meta: &HookedStore) -> Vec<String> {
    meta.history().into_iter().filter(|call| call.op == Op::Delete).map(|call| call.key).collect()
}

const SESSION_TIMEOUT: Duration = Duration::from_secs(15);

fn stack() -> (Arc<HookedStore>, Writer) {
    let clock = ManualClock::new(1_796_000_000_000);
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let meta = HookedStore::new(Arc::new(InMemoryStore::with_config(1, shared.clone()).unwrap()));
    let deps = WriterDeps {
        meta: meta.clone(),
        objects: Arc::new(MemObjects::new(shared)),
        clock: Arc::new(clock),
        tokens: Arc::new(SeededTokens::new(407)),
    };
    let config = WriterConfig {
        flush_window: Duration::from_millis(1),
        session_timeout: SESSION_TIMEOUT,
        ..WriterConfig::default()
    };
    (meta, Writer::start(config, deps).unwrap())
}

/// Appends one entry whose index put the store holds back: it fails with an unknown outcome.
async fn append_with_unknown_outcome(meta: &HookedStore, w: &Writer, log: LogId) -> String {
    let leases_before = lease::list_leases(meta, log).await.unwrap();
    hold_next_index_put(meta, log);
    let err = w.append(log, Bytes::from_static(b"in flight"), 1).await.unwrap_err();
    assert!(matches!(err, AppendError::OutcomeUnknown { .. }), "{err}");
    assert_eq!(err.class(), ErrorClass::OutcomeUnknown);
    assert_eq!(w.unsettled_leases(), 1);
    let leases = lease::list_leases(meta, log).await.unwrap();
    assert_eq!(leases, leases_before, "the put ran under the lease already held");
    leases.into_iter().next().expect("a lease record")
}

/// A catalog's drain (after its fence), shortened: does it find the log's leases gone?
async fn drains(meta: &HookedStore, log: LogId) -> bool {
    let config =
        DrainConfig { timeout: Duration::from_millis(100), poll_interval: Duration::from_millis(10) };
    lease::drain(meta, log, &config).await.unwrap() == DrainOutcome::Drained
}

// spec-rule: 2c1ecab615 [Writer, Compactor] An implementation MUST NOT delete a lease record before every…
#[tokio::test(start_paused = true)]
async fn a_lease_record_stays_until_a_read_finds_the_index_put_of_unknown_outcome() {
    let (meta, w) = stack();
    let log = LogId(407);
    assert_eq!(w.append(log, Bytes::from_static(b"first"), 1).await.unwrap().offset, 0);
    let lease_key = append_with_unknown_outcome(&meta, &w, log).await;

    // Releasing idle leases (as before a stream deletion) keeps this one: its put may land.
    w.release_idle_leases(Duration::ZERO).await;
    assert_eq!(lease::list_leases(meta.as_ref(), log).await.unwrap(), std::slice::from_ref(&lease_key));
    assert!(!drains(&meta, log).await, "a deletion waits for the lease");
    assert!(!deletes(&meta).contains(&lease_key));

    // The put commits late. The next round reads it back: its outcome is known, and the lease
    // is released as usual, by deleting its record.
    let landed = land_held(&meta).await.unwrap();
    assert_eq!(landed.key, keys::index_key(log, 2, 14));
    w.release_idle_leases(Duration::ZERO).await;
    assert_eq!(w.unsettled_leases(), 0);
    assert!(deletes(&meta).contains(&lease_key), "released once the put completed");
    assert!(drains(&meta, log).await);
    // The log goes on from the put that landed.
    assert_eq!(w.append(log, Bytes::from_static(b"next"), 1).await.unwrap().offset, 2);
    w.close().await;
}

// spec-rule: 2c1ecab615 [Writer, Compactor] An implementation MUST NOT delete a lease record before every…
#[tokio::test(start_paused = true)]
async fn a_put_still_unknown_after_a_session_timeout_lets_its_lease_go_only_with_the_session() {
    let (meta, w) = stack();
    let (log, other) = (LogId(408), LogId(409));
    w.append(log, Bytes::from_static(b"first"), 1).await.unwrap();
    w.append(other, Bytes::from_static(b"other"), 1).await.unwrap();
    let session = w.session_id().await.unwrap();
    let lease_key = append_with_unknown_outcome(&meta, &w, log).await;

    // Within a session timeout no read shows the put: the lease stays.
    tokio::time::advance(SESSION_TIMEOUT / 2).await;
    w.release_idle_leases(Duration::ZERO).await;
    assert_eq!(lease::list_leases(meta.as_ref(), log).await.unwrap(), std::slice::from_ref(&lease_key));
    assert_eq!(w.unsettled_leases(), 1);

    // Past it, the put may be gone or may still be in the store's pipeline: the writer
    // retires the session behind the lease and closes it, which removes the record. It never
    // deletes the record itself.
    tokio::time::advance(SESSION_TIMEOUT).await;
    w.release_idle_leases(Duration::ZERO).await;
    assert!(lease::list_leases(meta.as_ref(), log).await.unwrap().is_empty());
    assert!(!deletes(&meta).contains(&lease_key), "the record went with its session");
    assert_eq!(w.unsettled_leases(), 0);
    assert!(drains(&meta, log).await);

    // Appends go on under new leases of a new session, for this log and the others.
    assert_eq!(w.append(other, Bytes::from_static(b"again"), 1).await.unwrap().offset, 1);
    assert_eq!(w.append(log, Bytes::from_static(b"again"), 1).await.unwrap().offset, 1);
    assert_ne!(w.session_id().await.unwrap(), session);
    let leases = lease::list_leases(meta.as_ref(), log).await.unwrap();
    assert_eq!(leases.len(), 1);
    assert_ne!(leases[0], lease_key);
    w.close().await;
}

// spec-rule: 2c1ecab615 [Writer, Compactor] An implementation MUST NOT delete a lease record before ev…
#[tokio::test(start_paused = true)]
async fn a_lease_record_stays_until_a_read_shows_a_trim_marker_write_of_unknown_outcome() {
    // The same rule for soft trim: its conditional marker write gets no answer, and the trim
    // cannot read the marker again before it gives up. The write may still apply; the lease
    // stays until a read shows the marker past the version the write expected.
    let (meta, w) = stack();
    let log = LogId(410);
    for i in 0..4u8 {
        w.append(log, Bytes::from(vec![i]), 1).await.unwrap();
    }
    let lease_key = lease::list_leases(meta.as_ref(), log).await.unwrap().remove(0);
    hold_next_marker_write(&meta, log);
    let err = w.soft_trim(log, 1).await.unwrap_err();
    assert!(err.to_string().contains("marker read failed"), "{err}");
    assert_eq!(w.unsettled_leases(), 1);
    w.release_idle_leases(Duration::ZERO).await;
    assert_eq!(lease::list_leases(meta.as_ref(), log).await.unwrap(), std::slice::from_ref(&lease_key));
    assert!(!drains(&meta, log).await);

    land_held(&meta).await;
    w.release_idle_leases(Duration::ZERO).await;
    assert_eq!(w.unsettled_leases(), 0, "the marker exists now: the create can no longer apply");
    assert!(deletes(&meta).contains(&lease_key), "released as usual once known");
    let marker = meta.inner().get(&keys::partition(log), &keys::trim_marker_key(log)).await.unwrap().unwrap();
    assert_eq!(marker.value.as_ref(), b"2");
    w.close().await;
}
