//! [Writer, Compactor] An implementation MUST NOT delete a lease record before every change it
//! started under that lease has completed. An index put whose outcome is unknown may still
//! commit: its lease record stays until a read shows the record (the put completed), or, if no
//! read does within a session timeout, it goes with its session, never by a delete. Over the
//! in-memory stores, with a put the store holds back as a slow pipeline would.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use lakestream_format::{Clock, ErrorClass, LogId, ManualClock, keys};
use lakestream_meta::lease::{self, DrainConfig, DrainOutcome, SeededTokens};
use lakestream_meta::{
    Comparison, InMemoryStore, MetaError, MetaResult, MetaStore, PutCondition, Record, Session, WriteResult,
};
use lakestream_objstore::InMemoryStore as MemObjects;
use lakestream_writer::{AppendError, Writer, WriterConfig, WriterDeps};

/// A sequenced put the store accepted but has not committed: it answers "outcome unknown" now
/// and commits when the test says.
#[derive(Debug, Clone)]
struct HeldPut {
    partition: String,
    prefix: String,
    deltas: Vec<u64>,
    value: Bytes,
}

/// The in-memory store; the next sequenced put of `hold` is held back, so is the next write of
/// `hold_marker`'s trim marker (and the read after it fails), and every delete is recorded.
#[derive(Debug)]
struct Meta {
    inner: InMemoryStore,
    hold: Mutex<Option<LogId>>,
    held: Mutex<Option<HeldPut>>,
    hold_marker: Mutex<Option<LogId>>,
    held_marker: Mutex<Option<(String, String, Bytes, PutCondition)>>,
    fail_next_marker_read: Mutex<bool>,
    deletes: Mutex<Vec<String>>,
}

impl Meta {
    /// Commits the held put, as the store's pipeline finally does.
    async fn land_held_put(&self) -> WriteResult {
        let put = self.held.lock().unwrap().take().expect("a held put");
        self.inner.sequenced_put(&put.partition, &put.prefix, &put.deltas, put.value).await.unwrap()
    }

    /// Applies the held trim-marker write, as the store's pipeline finally does.
    async fn land_held_marker(&self) {
        let (p, k, v, c) = self.held_marker.lock().unwrap().take().expect("a held marker write");
        self.inner.put(&p, &k, v, c).await.unwrap();
    }
}

#[async_trait]
impl MetaStore for Meta {
    async fn get_cmp(&self, p: &str, k: &str, c: Comparison) -> MetaResult<Option<Record>> {
        if k.starts_with("/mark-deleted-offsets/")
            && std::mem::take(&mut *self.fail_next_marker_read.lock().unwrap())
        {
            return Err(MetaError::Unavailable("injected: the marker read failed".into()));
        }
        self.inner.get_cmp(p, k, c).await
    }
    async fn put(&self, p: &str, k: &str, v: Bytes, c: PutCondition) -> MetaResult<WriteResult> {
        let hold =
            self.hold_marker.lock().unwrap().take_if(|log| *k == keys::trim_marker_key(*log)).is_some();
        if hold {
            *self.held_marker.lock().unwrap() = Some((p.into(), k.into(), v, c));
            *self.fail_next_marker_read.lock().unwrap() = true;
            return Err(MetaError::OutcomeUnknown("injected: no answer to the marker write".into()));
        }
        self.inner.put(p, k, v, c).await
    }
    async fn delete(&self, p: &str, k: &str) -> MetaResult<bool> {
        self.deletes.lock().unwrap().push(k.to_owned());
        self.inner.delete(p, k).await
    }
    async fn delete_if_version(&self, p: &str, k: &str, version: lakestream_meta::Version) -> MetaResult<()> {
        self.inner.delete_if_version(p, k, version).await
    }
    async fn delete_range(&self, p: &str, a: &str, b: &str) -> MetaResult<()> {
        self.inner.delete_range(p, a, b).await
    }
    async fn sequenced_put(&self, p: &str, prefix: &str, d: &[u64], v: Bytes) -> MetaResult<WriteResult> {
        let hold = self.hold.lock().unwrap().take_if(|log| keys::partition(*log) == p).is_some();
        if hold {
            let put = HeldPut { partition: p.into(), prefix: prefix.into(), deltas: d.to_vec(), value: v };
            *self.held.lock().unwrap() = Some(put);
            return Err(MetaError::OutcomeUnknown("injected: no answer within the request timeout".into()));
        }
        self.inner.sequenced_put(p, prefix, d, v).await
    }
    async fn list(&self, p: &str, a: &str, b: &str) -> MetaResult<Vec<String>> {
        self.inner.list(p, a, b).await
    }
    async fn scan(&self, p: &str, a: &str, b: &str, limit: Option<usize>) -> MetaResult<Vec<Record>> {
        self.inner.scan(p, a, b, limit).await
    }
    async fn open_session(&self, timeout: Duration) -> MetaResult<Arc<dyn Session>> {
        self.inner.open_session(timeout).await
    }
}

const SESSION_TIMEOUT: Duration = Duration::from_secs(15);

fn stack() -> (Arc<Meta>, Writer) {
    let clock = ManualClock::new(1_796_000_000_000);
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let meta = Arc::new(Meta {
        inner: InMemoryStore::with_config(1, shared.clone()).unwrap(),
        hold: Mutex::new(None),
        held: Mutex::new(None),
        hold_marker: Mutex::new(None),
        held_marker: Mutex::new(None),
        fail_next_marker_read: Mutex::new(false),
        deletes: Mutex::new(Vec::new()),
    });
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
async fn append_with_unknown_outcome(meta: &Meta, w: &Writer, log: LogId) -> String {
    let leases_before = lease::list_leases(meta, log).await.unwrap();
    *meta.hold.lock().unwrap() = Some(log);
    let err = w.append(log, Bytes::from_static(b"in flight"), 1).await.unwrap_err();
    assert!(matches!(err, AppendError::OutcomeUnknown { .. }), "{err}");
    assert_eq!(err.class(), ErrorClass::OutcomeUnknown);
    assert_eq!(w.unsettled_leases(), 1);
    let leases = lease::list_leases(meta, log).await.unwrap();
    assert_eq!(leases, leases_before, "the put ran under the lease already held");
    leases.into_iter().next().expect("a lease record")
}

/// A catalog's drain (after its fence), shortened: does it find the log's leases gone?
async fn drains(meta: &Meta, log: LogId) -> bool {
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
    assert!(!meta.deletes.lock().unwrap().contains(&lease_key));

    // The put commits late. The next round reads it back: its outcome is known, and the lease
    // is released as usual, by deleting its record.
    let landed = meta.land_held_put().await;
    assert_eq!(landed.key, keys::index_key(log, 2, 14));
    w.release_idle_leases(Duration::ZERO).await;
    assert_eq!(w.unsettled_leases(), 0);
    assert!(meta.deletes.lock().unwrap().contains(&lease_key), "released once the put completed");
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
    assert!(!meta.deletes.lock().unwrap().contains(&lease_key), "the record went with its session");
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
    *meta.hold_marker.lock().unwrap() = Some(log);
    let err = w.soft_trim(log, 1).await.unwrap_err();
    assert!(err.to_string().contains("marker read failed"), "{err}");
    assert_eq!(w.unsettled_leases(), 1);
    w.release_idle_leases(Duration::ZERO).await;
    assert_eq!(lease::list_leases(meta.as_ref(), log).await.unwrap(), std::slice::from_ref(&lease_key));
    assert!(!drains(&meta, log).await);

    meta.land_held_marker().await;
    w.release_idle_leases(Duration::ZERO).await;
    assert_eq!(w.unsettled_leases(), 0, "the marker exists now: the create can no longer apply");
    assert!(meta.deletes.lock().unwrap().contains(&lease_key), "released as usual once known");
    let marker = meta.inner.get(&keys::partition(log), &keys::trim_marker_key(log)).await.unwrap().unwrap();
    assert_eq!(marker.value.as_ref(), b"2");
    w.close().await;
}
