//! The conformance suite every [`ObjectStore`] backend passes: one set of checks for the
//! in-memory, local-filesystem and S3 backends (and any wrapper that claims to be
//! transparent).
//!
//! Each check is a pub fn that takes a store and a prefix of its own, and panics with a
//! message naming the contract it found broken. [`run_all`] runs every check, each under a
//! fresh unique prefix (`conformance-{ms}-{pid}-{n}/{check}`), so the suite can run again and
//! again against a shared bucket without cleaning up first.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures::StreamExt;
use futures::future::join_all;
use lakestream_format::{Clock, ErrorClass, SystemClock};

use crate::error::ObjectStoreError;
use crate::path::{ObjectPath, ObjectPrefix};
use crate::range::ByteRange;
use crate::store::{ObjectMeta, ObjectStore, Upload, WriteOnce};

/// Runs every check, each with a store from `store_factory` and a unique prefix.
pub async fn run_all<F, Fut>(store_factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn ObjectStore>>,
{
    let run = unique_run_prefix();
    macro_rules! check {
        ($name:ident) => {{
            let store = store_factory().await;
            let prefix = ObjectPath::new(format!("{run}/{}", stringify!($name))).expect("valid prefix");
            $name(store.as_ref(), &prefix).await;
        }};
    }
    check!(put_then_get_returns_the_same_bytes);
    check!(put_refuses_to_overwrite);
    check!(concurrent_creates_have_one_winner);
    check!(missing_objects_are_not_found);
    check!(range_edges);
    check!(ranges_of_an_empty_object);
    check!(malformed_ranges_are_invalid_input);
    check!(head_reports_size_and_time);
    check!(delete_is_idempotent);
    check!(delete_many_removes_every_named_object);
    check!(list_pages_through_every_object_in_order);
    check!(list_prefix_is_not_segment_aware);
    check!(list_resumes_after_a_path);
    check!(uploads_become_visible_whole_at_complete);
    check!(aborted_and_dropped_uploads_leave_nothing);
    check!(uploads_refuse_to_overwrite);
}

/// A prefix no earlier run used: wall-clock ms, process id and a counter.
pub fn unique_run_prefix() -> String {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let n = RUNS.fetch_add(1, Ordering::Relaxed);
    format!("conformance-{}-{}-{n}", SystemClock.now_ms(), std::process::id())
}

fn at(prefix: &ObjectPath, name: &str) -> ObjectPath {
    prefix.child(name).expect("valid test path")
}

/// Bytes whose every position differs from its neighbours, so an off-by-one shows.
fn patterned(len: usize) -> Bytes {
    (0..len).map(|i| (i % 251) as u8).collect::<Vec<u8>>().into()
}

async fn list_all(
    store: &dyn ObjectStore,
    prefix: &ObjectPrefix,
    after: Option<&ObjectPath>,
) -> Vec<ObjectMeta> {
    store
        .list(prefix, after)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .unwrap_or_else(|e| panic!("list {prefix}: {e}"))
}

/// `put` then `get` returns the same bytes: empty, one byte, and larger than a buffer.
pub async fn put_then_get_returns_the_same_bytes(store: &dyn ObjectStore, prefix: &ObjectPath) {
    for (name, bytes) in
        [("empty", Bytes::new()), ("one", Bytes::from_static(b"\x00")), ("big", patterned(1 << 20 | 3))]
    {
        let path = at(prefix, name);
        store.put(&path, bytes.clone()).await.unwrap_or_else(|e| panic!("put {path}: {e}"));
        let read = store.get(&path).await.unwrap_or_else(|e| panic!("get {path}: {e}"));
        assert_eq!(read.len(), bytes.len(), "get {path} returns the whole object");
        assert!(read == bytes, "get {path} returns the bytes written");
    }
}

/// Write once: a second `put` of a name fails with `AlreadyExists` (class Conflict) and
/// leaves the first object unchanged, where the backend can tell. This is how the store backs
/// the spec's "\[Writer\] A writer MUST NOT change or overwrite a WAL object after writing it"
/// and its "Write once" operation.
pub async fn put_refuses_to_overwrite(store: &dyn ObjectStore, prefix: &ObjectPath) {
    let path = at(prefix, "once");
    store.put(&path, Bytes::from_static(b"first")).await.expect("first put");
    let second = store.put(&path, Bytes::from_static(b"second")).await;
    match store.write_once() {
        WriteOnce::Atomic | WriteOnce::Sequential => {
            let err = second.expect_err("a second put of one name must fail");
            assert!(
                matches!(err, ObjectStoreError::AlreadyExists { .. }),
                "expected AlreadyExists, got {err}"
            );
            assert_eq!(err.class(), ErrorClass::Conflict);
            assert_eq!(
                store.get(&path).await.expect("get"),
                Bytes::from_static(b"first"),
                "object unchanged"
            );
        }
        WriteOnce::Unenforced => {}
    }
}

/// Size of each contending write in [`concurrent_creates_have_one_winner`].
const CONTENDED_SIZE: usize = 512 * 1024;

/// Of several concurrent `put`s of one new name exactly one wins, and the object holds the
/// winner's bytes (only for backends that promise [`WriteOnce::Atomic`]). Three rounds of
/// eight writers of 512 KiB each.
pub async fn concurrent_creates_have_one_winner(store: &dyn ObjectStore, prefix: &ObjectPath) {
    if store.write_once() != WriteOnce::Atomic {
        return;
    }
    for round in 0..3 {
        let path = at(prefix, &format!("contended-{round}"));
        let writers = (0..8u8).map(|i| {
            let path = path.clone();
            // Large enough that a server which checks and then writes leaves a window.
            async move { (i, store.put(&path, Bytes::from(vec![i; CONTENDED_SIZE])).await) }
        });
        let results = join_all(writers).await;
        let winners: Vec<u8> = results.iter().filter(|(_, r)| r.is_ok()).map(|(i, _)| *i).collect();
        assert_eq!(winners.len(), 1, "exactly one concurrent create of {path} succeeds: {results:?}");
        // A loser sees AlreadyExists, or an unknown outcome if one of its attempts failed
        // on the way (the object may then be its own, as far as it can tell).
        for (_, result) in &results {
            if let Err(e) = result {
                assert!(
                    matches!(e.class(), ErrorClass::Conflict | ErrorClass::OutcomeUnknown),
                    "losers see AlreadyExists or an unknown outcome: {e}"
                );
            }
        }
        assert!(
            store.get(&path).await.expect("get") == vec![winners[0]; CONTENDED_SIZE],
            "the winner's bytes"
        );
    }
}

/// `get`, `get_range` (even an empty range) and `head` of a missing object fail with
/// `NotFound`.
pub async fn missing_objects_are_not_found(store: &dyn ObjectStore, prefix: &ObjectPath) {
    let path = at(prefix, "missing");
    let is_not_found = |r: Result<(), ObjectStoreError>, what: &str| match r {
        Err(ObjectStoreError::NotFound { path: named }) => {
            assert!(named.contains("missing"), "{what}: {named}")
        }
        other => panic!("{what} of a missing object: expected NotFound, got {other:?}"),
    };
    is_not_found(store.get(&path).await.map(drop), "get");
    is_not_found(store.head(&path).await.map(drop), "head");
    for range in
        [ByteRange::Bounded(0..10), ByteRange::Bounded(0..0), ByteRange::From(0), ByteRange::Suffix(0)]
    {
        is_not_found(store.get_range(&path, range.clone()).await.map(drop), &format!("get_range {range}"));
    }
}

/// Range edges on a 100-byte object: bounded, open and suffix ranges, truncation at the end,
/// ranges starting at and beyond the end.
pub async fn range_edges(store: &dyn ObjectStore, prefix: &ObjectPath) {
    let path = at(prefix, "hundred");
    let bytes = patterned(100);
    store.put(&path, bytes.clone()).await.expect("put");
    let expect_ok = [
        (ByteRange::Bounded(0..100), 0..100),
        (ByteRange::Bounded(0..1), 0..1),
        (ByteRange::Bounded(10..20), 10..20),
        (ByteRange::Bounded(99..100), 99..100),
        (ByteRange::Bounded(90..1000), 90..100),
        (ByteRange::Bounded(100..200), 100..100),
        (ByteRange::Bounded(40..40), 40..40),
        (ByteRange::From(0), 0..100),
        (ByteRange::From(37), 37..100),
        (ByteRange::From(99), 99..100),
        (ByteRange::From(100), 100..100),
        (ByteRange::Suffix(1), 99..100),
        (ByteRange::Suffix(10), 90..100),
        (ByteRange::Suffix(100), 0..100),
        (ByteRange::Suffix(1000), 0..100),
        (ByteRange::Suffix(0), 100..100),
    ];
    for (range, want) in expect_ok {
        let got =
            store.get_range(&path, range.clone()).await.unwrap_or_else(|e| panic!("get_range {range}: {e}"));
        assert!(
            got == bytes.slice(want.start..want.end),
            "get_range {range} returns bytes {want:?}, got {} bytes",
            got.len()
        );
    }
    for range in [ByteRange::Bounded(101..102), ByteRange::From(101), ByteRange::From(5000)] {
        match store.get_range(&path, range.clone()).await {
            Err(e @ ObjectStoreError::InvalidRange { .. }) => assert_eq!(e.class(), ErrorClass::InvalidInput),
            other => panic!("get_range {range} beyond the end: expected InvalidRange, got {other:?}"),
        }
    }
}

/// Ranges of an empty object return no bytes unless they start beyond its end.
pub async fn ranges_of_an_empty_object(store: &dyn ObjectStore, prefix: &ObjectPath) {
    let path = at(prefix, "empty");
    store.put(&path, Bytes::new()).await.expect("put");
    for range in [ByteRange::Bounded(0..10), ByteRange::From(0), ByteRange::Suffix(5), ByteRange::Suffix(0)] {
        let got =
            store.get_range(&path, range.clone()).await.unwrap_or_else(|e| panic!("get_range {range}: {e}"));
        assert!(got.is_empty(), "get_range {range} of an empty object is empty");
    }
    assert!(matches!(
        store.get_range(&path, ByteRange::From(1)).await,
        Err(ObjectStoreError::InvalidRange { .. })
    ));
}

/// A range that ends before it starts is invalid input, whether or not the object exists.
#[allow(clippy::reversed_empty_ranges)] // the malformed range is the point
pub async fn malformed_ranges_are_invalid_input(store: &dyn ObjectStore, prefix: &ObjectPath) {
    let path = at(prefix, "object");
    store.put(&path, patterned(10)).await.expect("put");
    for target in [path, at(prefix, "missing")] {
        let err = store.get_range(&target, ByteRange::Bounded(5..3)).await.expect_err("reversed range");
        assert_eq!(err.class(), ErrorClass::InvalidInput, "{err}");
    }
}

/// `head` reports the size written and a modification time that is stable and set.
pub async fn head_reports_size_and_time(store: &dyn ObjectStore, prefix: &ObjectPath) {
    let path = at(prefix, "sized");
    store.put(&path, patterned(4321)).await.expect("put");
    let meta = store.head(&path).await.expect("head");
    assert_eq!(meta.path, path);
    assert_eq!(meta.size, 4321);
    assert!(meta.last_modified_ms > 0, "last_modified_ms is set: {meta:?}");
    assert_eq!(store.head(&path).await.expect("head again"), meta, "head is stable");
}

/// `delete` removes an object; deleting it again (or a never-written name) succeeds; the
/// name stays taken in the sense that `get` now fails with `NotFound`.
pub async fn delete_is_idempotent(store: &dyn ObjectStore, prefix: &ObjectPath) {
    let path = at(prefix, "doomed");
    store.put(&path, Bytes::from_static(b"x")).await.expect("put");
    store.delete(&path).await.expect("delete");
    assert!(matches!(store.get(&path).await, Err(ObjectStoreError::NotFound { .. })), "gone after delete");
    store.delete(&path).await.expect("second delete succeeds");
    store.delete(&at(prefix, "never-written")).await.expect("deleting a missing object succeeds");
}

/// `delete_many` removes every named object, ignores missing ones and leaves others alone.
pub async fn delete_many_removes_every_named_object(store: &dyn ObjectStore, prefix: &ObjectPath) {
    let doomed: Vec<ObjectPath> = (0..12).map(|i| at(prefix, &format!("d{i:02}"))).collect();
    for path in &doomed {
        store.put(path, Bytes::from_static(b"x")).await.expect("put");
    }
    let keep = at(prefix, "keep");
    store.put(&keep, Bytes::from_static(b"k")).await.expect("put");
    let mut named = doomed.clone();
    named.push(at(prefix, "never-written"));
    store.delete_many(&named).await.expect("delete_many");
    store.delete_many(&[]).await.expect("delete_many of nothing");
    let left = list_all(store, &ObjectPrefix::from(prefix), None).await;
    assert_eq!(
        left.iter().map(|m| m.path.clone()).collect::<Vec<_>>(),
        vec![keep],
        "only the kept object is left"
    );
}

/// `list` returns every object under a prefix exactly once, in ascending path order, with
/// sizes, across more objects than a page holds in any backend's test configuration.
pub async fn list_pages_through_every_object_in_order(store: &dyn ObjectStore, prefix: &ObjectPath) {
    // Written out of order, some in sub-"directories".
    let mut written: Vec<(ObjectPath, usize)> = (0..23)
        .map(|i| {
            let name =
                if i % 5 == 0 { format!("sub/{:02}", (i * 7) % 23) } else { format!("{:02}", (i * 7) % 23) };
            (at(prefix, &name), i)
        })
        .collect();
    for (path, size) in &written {
        store.put(path, patterned(*size)).await.expect("put");
    }
    written.sort();
    let listed = list_all(store, &ObjectPrefix::from(prefix), None).await;
    let got: Vec<(ObjectPath, usize)> = listed.iter().map(|m| (m.path.clone(), m.size as usize)).collect();
    assert_eq!(got, written, "list returns every object once, in order, with its size");
    assert!(listed.iter().all(|m| m.last_modified_ms > 0), "listed objects carry a modification time");
}

/// A prefix matches text, not whole segments: `p/ab` lists `p/ab`, `p/abc` and `p/abd/x`.
pub async fn list_prefix_is_not_segment_aware(store: &dyn ObjectStore, prefix: &ObjectPath) {
    for name in ["a", "ab", "abc", "abd/x", "b"] {
        store.put(&at(prefix, name), Bytes::from_static(b"x")).await.expect("put");
    }
    let text_prefix = ObjectPrefix::new(format!("{prefix}/ab")).expect("prefix");
    let got: Vec<String> =
        list_all(store, &text_prefix, None).await.into_iter().map(|m| m.path.to_string()).collect();
    let want: Vec<String> = ["ab", "abc", "abd/x"].iter().map(|n| at(prefix, n).to_string()).collect();
    assert_eq!(got, want);
    let nothing = ObjectPrefix::new(format!("{prefix}/zzz")).expect("prefix");
    assert!(list_all(store, &nothing, None).await.is_empty(), "an unmatched prefix lists nothing");
}

/// `list` with `start_after` returns only paths strictly after it.
pub async fn list_resumes_after_a_path(store: &dyn ObjectStore, prefix: &ObjectPath) {
    let paths: Vec<ObjectPath> = (0..10).map(|i| at(prefix, &format!("{i:02}"))).collect();
    for path in &paths {
        store.put(path, Bytes::from_static(b"x")).await.expect("put");
    }
    let after = list_all(store, &ObjectPrefix::from(prefix), Some(&paths[3])).await;
    assert_eq!(after.into_iter().map(|m| m.path).collect::<Vec<_>>(), paths[4..].to_vec());
    let not_an_object = at(prefix, "03x");
    let after = list_all(store, &ObjectPrefix::from(prefix), Some(&not_an_object)).await;
    assert_eq!(after.into_iter().map(|m| m.path).collect::<Vec<_>>(), paths[4..].to_vec());
}

/// Size of the object [`uploads_become_visible_whole_at_complete`] streams: above two S3
/// parts of the smallest size (5 MiB), so that a streaming backend sends several parts.
const STREAMED_SIZE: usize = 11 << 20 | 5;

/// `start_upload`: pieces of any size, written one after another, read back as one object,
/// which no `head`, `get` or `list` sees before `complete`; an upload of nothing is an empty
/// object.
pub async fn uploads_become_visible_whole_at_complete(store: &dyn ObjectStore, prefix: &ObjectPath) {
    let path = at(prefix, "streamed");
    let whole = patterned(STREAMED_SIZE);
    let mut upload = store.start_upload(&path).await.unwrap_or_else(|e| panic!("start_upload {path}: {e}"));
    let cuts = [0, 1, 4096, 3 << 20, (5 << 20) + 7, 10 << 20, STREAMED_SIZE];
    for piece in cuts.windows(2) {
        upload.write(whole.slice(piece[0]..piece[1])).await.unwrap_or_else(|e| panic!("write {path}: {e}"));
        upload.write(Bytes::new()).await.unwrap_or_else(|e| panic!("empty write {path}: {e}"));
    }
    assert!(
        matches!(store.head(&path).await, Err(ObjectStoreError::NotFound { .. })),
        "an upload is invisible before complete"
    );
    let listed = list_all(store, &ObjectPrefix::new(prefix.as_str()).expect("prefix"), None).await;
    assert!(listed.is_empty(), "an upload is not listed before complete: {listed:?}");
    upload.complete().await.unwrap_or_else(|e| panic!("complete {path}: {e}"));
    let read = store.get(&path).await.unwrap_or_else(|e| panic!("get {path}: {e}"));
    assert_eq!(read.len(), whole.len(), "get {path} returns the whole streamed object");
    assert!(read == whole, "get {path} returns the pieces in order");
    assert_eq!(store.head(&path).await.expect("head").size, whole.len() as u64);

    let empty = at(prefix, "empty");
    store.start_upload(&empty).await.expect("start_upload").complete().await.expect("complete");
    assert_eq!(store.get(&empty).await.expect("get"), Bytes::new());
}

/// An aborted upload, and one dropped without `complete`, leave no object.
pub async fn aborted_and_dropped_uploads_leave_nothing(store: &dyn ObjectStore, prefix: &ObjectPath) {
    let aborted = at(prefix, "aborted");
    let mut upload = store.start_upload(&aborted).await.expect("start_upload");
    upload.write(patterned(1000)).await.expect("write");
    upload.abort().await.expect("abort");
    let dropped = at(prefix, "dropped");
    let mut upload: Box<dyn Upload + '_> = store.start_upload(&dropped).await.expect("start_upload");
    upload.write(patterned(1000)).await.expect("write");
    drop(upload);
    for path in [aborted, dropped] {
        assert!(
            matches!(store.head(&path).await, Err(ObjectStoreError::NotFound { .. })),
            "{path}: no object after an upload given up"
        );
    }
    let listed = list_all(store, &ObjectPrefix::new(prefix.as_str()).expect("prefix"), None).await;
    assert!(listed.is_empty(), "nothing listed after uploads given up: {listed:?}");
}

/// `complete` keeps `put`'s write-once promise: on a name taken (before the upload started,
/// or while it ran) it fails with `AlreadyExists` and leaves the object unchanged.
pub async fn uploads_refuse_to_overwrite(store: &dyn ObjectStore, prefix: &ObjectPath) {
    if store.write_once() == WriteOnce::Unenforced {
        return;
    }
    for taken_during in [false, true] {
        let path = at(prefix, if taken_during { "taken-during" } else { "taken-before" });
        if !taken_during {
            store.put(&path, Bytes::from_static(b"first")).await.expect("first put");
        }
        let mut upload = store.start_upload(&path).await.expect("start_upload");
        upload.write(Bytes::from_static(b"second")).await.expect("write");
        if taken_during {
            store.put(&path, Bytes::from_static(b"first")).await.expect("first put");
        }
        let err = upload.complete().await.expect_err("complete on a taken name must fail");
        assert!(matches!(err, ObjectStoreError::AlreadyExists { .. }), "expected AlreadyExists, got {err}");
        assert_eq!(store.get(&path).await.expect("get"), Bytes::from_static(b"first"), "object unchanged");
    }
}
