//! Retention over the in-memory stores: the boundary found from the offset index alone (by
//! payload bytes after an entry, and by the age of its index record), the soft trim it
//! drives, and the log's last record kept whatever the policy says.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lakestream_format::{LogId, SystemClock, keys};
use lakestream_meta::lease::SeededTokens;
use lakestream_meta::{InMemoryStore, MetaStore};
use lakestream_objstore::InMemoryStore as MemObjects;
use lakestream_writer::{RetentionPolicy, Writer, WriterConfig, WriterDeps};

const LOG: LogId = LogId(7);

fn writer(meta: Arc<InMemoryStore>) -> Writer {
    let deps = WriterDeps {
        meta,
        objects: Arc::new(MemObjects::new(Arc::new(SystemClock))),
        clock: Arc::new(SystemClock),
        tokens: Arc::new(SeededTokens::new(1)),
    };
    Writer::start(WriterConfig { flush_window: Duration::from_millis(1), ..WriterConfig::default() }, deps)
        .unwrap()
}

/// Appends `n` entries of `size` bytes, one index record each.
async fn append(w: &Writer, n: usize, size: usize) {
    for _ in 0..n {
        w.append(LOG, Bytes::from(vec![b'x'; size]), 1).await.unwrap();
    }
}

async fn marker(meta: &InMemoryStore) -> u64 {
    match meta.get(&keys::partition(LOG), &keys::trim_marker_key(LOG)).await.unwrap() {
        Some(r) => keys::decode_trim_marker(&r.value).unwrap(),
        None => 0,
    }
}

fn bytes(max: u64) -> RetentionPolicy {
    RetentionPolicy { max_bytes: Some(max), max_age_ms: None }
}

#[tokio::test]
async fn entries_expire_once_the_bytes_after_them_reach_the_limit() {
    let meta = Arc::new(InMemoryStore::new());
    let w = writer(meta.clone());
    append(&w, 10, 100).await;
    // Entry i has 100 × (9 − i) bytes after it: entries 0..=5 have at least 350.
    assert_eq!(w.retention_boundary(LOG, bytes(350), 0, 0).await.unwrap(), Some(6));
    let trimmed = w.enforce_retention(LOG, bytes(350), 0).await.unwrap().unwrap();
    assert!(trimmed.advanced);
    assert_eq!((trimmed.marker, marker(&meta).await), (6, 6));
    // Nothing more has expired: a second pass changes nothing.
    assert_eq!(w.enforce_retention(LOG, bytes(350), 0).await.unwrap(), None);
    append(&w, 2, 100).await;
    assert_eq!(w.enforce_retention(LOG, bytes(350), 0).await.unwrap().unwrap().marker, 8);
    w.close().await;
}

#[tokio::test]
async fn entries_expire_by_the_age_of_their_index_record() {
    let meta = Arc::new(InMemoryStore::new());
    let w = writer(meta.clone());
    append(&w, 3, 10).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    append(&w, 2, 10).await;
    let records =
        meta.scan(&keys::partition(LOG), &keys::first_key(LOG), &keys::last_key(LOG), None).await.unwrap();
    assert_eq!(records.len(), 5);
    let fourth = records[3].created_ms;
    assert!(records[2].created_ms < fourth, "the two batches were created apart");
    let policy = RetentionPolicy { max_age_ms: Some(10), max_bytes: None };
    // At `fourth + 10` ms, the records created before `fourth` are older than 10 ms.
    assert_eq!(w.retention_boundary(LOG, policy, 0, fourth + 10).await.unwrap(), Some(3));
    assert_eq!(w.retention_boundary(LOG, policy, 0, records[0].created_ms + 10).await.unwrap(), None);
    w.close().await;
}

#[tokio::test]
async fn the_last_record_is_kept_whatever_the_policy() {
    let meta = Arc::new(InMemoryStore::new());
    let w = writer(meta.clone());
    assert_eq!(w.enforce_retention(LOG, bytes(1), 0).await.unwrap(), None, "an empty log");
    append(&w, 4, 10).await;
    let everything = RetentionPolicy { max_age_ms: Some(0), max_bytes: Some(1) };
    assert_eq!(w.retention_boundary(LOG, everything, 0, i64::MAX).await.unwrap(), Some(4));
    // Spec (soft trim): B′ is capped at the start of the last record, which stays readable.
    assert_eq!(w.enforce_retention(LOG, everything, i64::MAX).await.unwrap().unwrap().marker, 3);
    assert_eq!(w.retention_boundary(LOG, RetentionPolicy::default(), 0, i64::MAX).await.unwrap(), None);
    w.close().await;
}
