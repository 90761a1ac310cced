//! The embedded store across restarts, and its errors for files it cannot use.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lakestream_format::{ErrorClass, ManualClock};
use lakestream_meta::{EmbeddedStore, MetaStore, OpenError, PutCondition};

fn temp_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("meta.redb");
    (dir, path)
}

#[tokio::test]
async fn permanent_records_versions_and_timestamps_survive_a_restart() {
    let (_dir, path) = temp_file();
    let clock = ManualClock::new(1_000);
    let store = EmbeddedStore::open_with_clock(&path, Arc::new(clock.clone())).await.unwrap();
    let created = store
        .put("7", "/mark-deleted-offsets/7", Bytes::from_static(b"3"), PutCondition::None)
        .await
        .unwrap();
    clock.advance_ms(10);
    let replaced = store
        .put("7", "/mark-deleted-offsets/7", Bytes::from_static(b"4"), PutCondition::None)
        .await
        .unwrap();
    let indexed =
        store.sequenced_put("7", "00000000000000000007", &[3, 8], Bytes::from_static(b"raw")).await.unwrap();
    store.close().await.unwrap();

    let store = EmbeddedStore::open_with_clock(&path, Arc::new(clock.clone())).await.unwrap();
    let marker = store.get("7", "/mark-deleted-offsets/7").await.unwrap().expect("marker survives");
    assert_eq!((&marker.value[..], marker.version), (&b"4"[..], replaced.version));
    assert_eq!((marker.created_ms, marker.modified_ms), (created.created_ms, 1_010));
    let index = store.get("7", &indexed.key).await.unwrap().expect("index record survives");
    assert_eq!(
        (index.version, index.created_ms, &index.value[..]),
        (indexed.version, indexed.created_ms, &b"raw"[..])
    );
    // The sequence continues from the greatest key on disk.
    let next = store.sequenced_put("7", "00000000000000000007", &[2, 5], Bytes::new()).await.unwrap();
    assert_eq!(next.key, "00000000000000000007-00000000000000000005-00000000000000000013");
}

#[tokio::test]
async fn versions_keep_increasing_after_a_restart() {
    // Spec "Versions": every write changes a record's version; a reused version would let a
    // stale compare-and-set succeed after a restart.
    let (_dir, path) = temp_file();
    let store = EmbeddedStore::open(&path).await.unwrap();
    let mut last = 0;
    for i in 0..5 {
        last = store.put("1", &format!("k{i}"), Bytes::new(), PutCondition::None).await.unwrap().version;
    }
    store.delete_range("1", "k", "l").await.unwrap();
    store.close().await.unwrap();
    let store = EmbeddedStore::open(&path).await.unwrap();
    let after = store.put("1", "k0", Bytes::new(), PutCondition::None).await.unwrap();
    assert!(after.version > last, "version {} after restart, {last} before", after.version);
    // A CAS on a version from before the restart fails.
    let stale = store.put("1", "k0", Bytes::new(), PutCondition::IfVersion(last)).await;
    assert!(stale.is_err());
}

#[tokio::test]
async fn ephemeral_records_do_not_survive_a_restart() {
    // Spec "Sessions": an ephemeral record exists until its session ends, and sessions end
    // with the process.
    let (_dir, path) = temp_file();
    let store = EmbeddedStore::open(&path).await.unwrap();
    let session = store.open_session(Duration::from_secs(10)).await.unwrap();
    session.create_ephemeral("7", "/stream-write-leases/7/t", Bytes::from_static(b"t")).await.unwrap();
    store.put("7", "/stream-write-fences/7", Bytes::from_static(&[1]), PutCondition::IfAbsent).await.unwrap();
    // A crash: the handles go away without closing the session.
    drop(session);
    drop(store);
    let store = EmbeddedStore::open(&path).await.unwrap();
    assert!(store.get("7", "/stream-write-leases/7/t").await.unwrap().is_none());
    assert!(store.get("7", "/stream-write-fences/7").await.unwrap().is_some());
}

#[tokio::test]
async fn a_file_open_elsewhere_is_reported_locked() {
    let (_dir, path) = temp_file();
    let _first = EmbeddedStore::open(&path).await.unwrap();
    let err = EmbeddedStore::open(&path).await.unwrap_err();
    assert!(matches!(err, OpenError::Locked { path: ref locked } if locked == &path), "{err}");
    assert!(err.to_string().contains(&path.display().to_string()));
    assert_eq!(err.class(), ErrorClass::Conflict);
}

#[tokio::test]
async fn a_file_that_is_not_redb_is_reported_corrupt() {
    let (_dir, path) = temp_file();
    std::fs::write(&path, vec![0x5A; 8192]).unwrap();
    let err = EmbeddedStore::open(&path).await.unwrap_err();
    assert!(matches!(err, OpenError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains(&path.display().to_string()), "{err}");
    assert_eq!(err.class(), ErrorClass::CorruptData);
}

#[tokio::test]
async fn a_foreign_redb_file_is_refused() {
    let (_dir, path) = temp_file();
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(redb::TableDefinition::<&str, u64>::new("someone_else"))
            .unwrap()
            .insert("x", &1)
            .unwrap();
        txn.commit().unwrap();
    }
    let err = EmbeddedStore::open(&path).await.unwrap_err();
    assert!(matches!(err, OpenError::Corrupt { ref detail, .. } if detail.contains("someone_else")), "{err}");
}

#[tokio::test]
async fn a_damaged_record_is_reported_with_its_key() {
    let (_dir, path) = temp_file();
    let store = EmbeddedStore::open(&path).await.unwrap();
    store.put("7", "/stream-write-fences/7", Bytes::from_static(&[1]), PutCondition::None).await.unwrap();
    store.close().await.unwrap();
    {
        // Truncate the stored value behind the store's back.
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut records = txn.open_table(redb::TableDefinition::<&[u8], &[u8]>::new("records")).unwrap();
            let key = lakestream_meta::key_order::encode("/stream-write-fences/7").unwrap();
            records.insert(key.as_slice(), &[1u8, 0, 0][..]).unwrap();
        }
        txn.commit().unwrap();
    }
    let err = EmbeddedStore::open(&path).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, OpenError::Corrupt { .. }), "{text}");
    assert!(text.contains("/stream-write-fences/7") && text.contains("shorter than"), "{text}");
}

#[tokio::test]
async fn an_unreachable_path_is_named_in_the_error() {
    let (dir, _) = temp_file();
    let path = dir.path().join("no-such-dir").join("meta.redb");
    let err = EmbeddedStore::open(&path).await.unwrap_err();
    assert!(matches!(err, OpenError::Io { .. }), "{err}");
    assert!(err.to_string().contains("no-such-dir"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_are_serialized() {
    // Linearizable within the process: concurrent durable writes each take their own version
    // from the stored counter, and all of them land.
    let (_dir, path) = temp_file();
    let store = Arc::new(EmbeddedStore::open(&path).await.unwrap());
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let mut versions = Vec::new();
                for i in 0..20 {
                    versions.push(
                        store
                            .put("1", &format!("w{w}-{i}"), Bytes::new(), PutCondition::None)
                            .await
                            .unwrap()
                            .version,
                    );
                }
                versions
            })
        })
        .collect();
    let mut versions = Vec::new();
    for writer in writers {
        versions.extend(writer.await.unwrap());
    }
    versions.sort();
    versions.dedup();
    assert_eq!(versions.len(), 80, "two writes shared a version");
    assert_eq!(store.list("1", "w", "x").await.unwrap().len(), 80);
}
