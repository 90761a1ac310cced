//! The conformance suite every [`MetaStore`] backend passes (feature `testkit`).
//!
//! A backend's tests implement [`StoreFactory`] and call [`run_all`], or the individual
//! `check_*` functions to pinpoint a failure. Each check panics with a message that names the
//! check and the rule it tests.
//!
//! Every check works in its own partition and key range, named after a fresh random run id,
//! so the suite can run again and again against a persistent server that keeps old data and
//! shares shards between partitions. For the same reason the checks never assume an empty
//! shard: lookups that may leave the check's keys only assert that what they find is not one
//! of them.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use lakestream_format::LogId;
use lakestream_format::keys::{self, IndexKey};
use tokio::sync::watch;

use crate::cas::{CasOptions, CasRecord, Change, Current, cas_update};
use crate::error::MetaError;
use crate::lease::{self, DrainConfig, DrainOutcome, LeaseError, RandomTokens, TokenSource};
use crate::linearizability::{self, HistoryClock, Operation, RegisterOp, RegisterResult};
use crate::store::{Comparison, MetaStore, PutCondition, Session};

/// What the suite needs from a backend's test harness.
#[async_trait]
pub trait StoreFactory: Send + Sync {
    /// The store a check runs against: a fresh one, or one shared by every check.
    async fn store(&self) -> Arc<dyn MetaStore>;

    /// Forces `session` to end as if it had expired (no keep-alive within its timeout).
    /// Returns `false` when the harness cannot; the checks that need it then **fail**: expiry
    /// is part of the contract, so a backend whose expiry is untested does not pass the suite.
    async fn expire_session(&self, _store: &Arc<dyn MetaStore>, _session: &Arc<dyn Session>) -> bool {
        false
    }

    /// Lets at least `ms` milliseconds pass on the store's clock (the clock its timestamps
    /// come from). The default sleeps; a store on a manual clock advances it instead.
    async fn advance_clock(&self, ms: u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// The session timeout the checks use (within Oxia's 2 s – 5 min).
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a check waits for something that should happen promptly.
const PROMPTLY: Duration = Duration::from_secs(10);

/// Runs every check, in order.
pub async fn run_all(factory: &dyn StoreFactory) {
    check_put_get_and_overwrite(factory).await;
    check_versions_increase(factory).await;
    check_create_if_absent(factory).await;
    check_compare_and_set(factory).await;
    check_delete(factory).await;
    check_delete_if_version(factory).await;
    check_comparisons(factory).await;
    check_lookups_leave_the_log(factory).await;
    check_delete_range_bounds(factory).await;
    check_list_and_scan(factory).await;
    check_key_order(factory).await;
    check_sequenced_put_starts_at_delta(factory).await;
    check_sequenced_put_continues_from_greatest_key(factory).await;
    check_sequenced_put_restarts_when_all_keys_deleted(factory).await;
    check_sequenced_put_validation(factory).await;
    check_concurrent_sequenced_puts(factory).await;
    check_concurrent_cas_updates(factory).await;
    check_ephemeral_removed_on_close(factory).await;
    check_closed_session_refuses_ephemeral(factory).await;
    check_ephemeral_removed_on_expiry(factory).await;
    check_permanent_overwrite_outlives_session(factory).await;
    check_lease_acquire_and_release(factory).await;
    check_lease_token_unique(factory).await;
    check_fenced_acquire_leaves_no_lease(factory).await;
    check_fence_idempotent(factory).await;
    check_drain_waits_for_release(factory).await;
    check_drain_times_out_changing_nothing(factory).await;
    check_session_end_removes_lease_record(factory).await;
    check_linearizable_register(factory).await;
}

/// The names a check works with: a partition and a key prefix unique to this run.
struct Scope {
    check: &'static str,
    partition: String,
    prefix: String,
    seed: u64,
}

impl Scope {
    fn new(check: &'static str) -> Self {
        let run = RandomTokens.new_token().replace('-', "");
        let seed = xxhash_rust::xxh3::xxh3_64(run.as_bytes());
        Self { check, partition: format!("conf-{run}"), prefix: format!("conf-{run}-{check}"), seed }
    }

    /// A key without `/`, inside the check's range.
    fn key(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    /// Whether `key` is one of this check's keys.
    fn owns(&self, key: &str) -> bool {
        key.starts_with(&self.prefix) || key.contains(&format!("/{}", self.prefix))
    }

    /// A log ID unique to this run (below 2^62, so any small offset stays valid).
    fn log_id(&self, n: u64) -> LogId {
        LogId((self.seed.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15))) >> 2)
    }

    fn fail(&self, what: impl std::fmt::Display) -> ! {
        panic!("conformance check {} failed: {what}", self.check)
    }
}

fn bytes(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

async fn wait_ended(scope: &Scope, mut ended: watch::Receiver<bool>) {
    if tokio::time::timeout(PROMPTLY, ended.wait_for(|e| *e)).await.is_err() {
        scope.fail("the session's ended signal did not fire");
    }
}

/// Put, get, and overwrite: the spec's "Creation timestamps" (kept on replace) and "Versions"
/// (changed on every write).
pub async fn check_put_get_and_overwrite(factory: &dyn StoreFactory) {
    let s = Scope::new("put_get_overwrite");
    let store = factory.store().await;
    let (p, k) = (&s.partition, s.key("k"));
    let first = store.put(p, &k, bytes("v1"), PutCondition::None).await.unwrap_or_else(|e| s.fail(e));
    assert_eq!(first.key, k, "{}: write result names the key", s.check);
    assert_eq!(first.created_ms, first.modified_ms, "{}: a new record's timestamps are equal", s.check);
    let read =
        store.get(p, &k).await.unwrap_or_else(|e| s.fail(e)).unwrap_or_else(|| s.fail("record not found"));
    assert_eq!(
        (read.key.as_str(), &read.value[..], read.version),
        (k.as_str(), &b"v1"[..], first.version),
        "{}",
        s.check
    );
    assert_eq!((read.created_ms, read.modified_ms), (first.created_ms, first.modified_ms), "{}", s.check);
    factory.advance_clock(20).await;
    let second = store.put(p, &k, bytes("v2"), PutCondition::None).await.unwrap_or_else(|e| s.fail(e));
    assert!(second.version > first.version, "{}: overwrite must give a greater version", s.check);
    assert_eq!(
        second.created_ms, first.created_ms,
        "{}: spec 'Creation timestamps': kept on replace",
        s.check
    );
    assert!(
        second.modified_ms > first.modified_ms,
        "{}: modification time must move with the clock",
        s.check
    );
    let read =
        store.get(p, &k).await.unwrap_or_else(|e| s.fail(e)).unwrap_or_else(|| s.fail("record not found"));
    assert_eq!(
        (&read.value[..], read.version, read.created_ms),
        (&b"v2"[..], second.version, first.created_ms),
        "{}",
        s.check
    );
    assert!(store.get(p, &s.key("absent")).await.unwrap_or_else(|e| s.fail(e)).is_none(), "{}", s.check);
}

/// Versions increase with every write, of one key and across the keys of one partition.
pub async fn check_versions_increase(factory: &dyn StoreFactory) {
    let s = Scope::new("versions_increase");
    let store = factory.store().await;
    let mut last = i64::MIN;
    for i in 0..10 {
        let key = s.key(&format!("k{}", i % 3));
        let written =
            store.put(&s.partition, &key, bytes("v"), PutCondition::None).await.unwrap_or_else(|e| s.fail(e));
        if written.version <= last {
            s.fail(format!("version {} after {last}", written.version));
        }
        last = written.version;
    }
}

/// `CreateIfAbsent` creates an absent key and fails with KeyExists on an existing one,
/// leaving it unchanged.
pub async fn check_create_if_absent(factory: &dyn StoreFactory) {
    let s = Scope::new("create_if_absent");
    let store = factory.store().await;
    let (p, k) = (&s.partition, s.key("k"));
    let created =
        store.put(p, &k, bytes("first"), PutCondition::IfAbsent).await.unwrap_or_else(|e| s.fail(e));
    match store.put(p, &k, bytes("second"), PutCondition::IfAbsent).await {
        Err(MetaError::KeyExists { key }) => assert_eq!(key, k, "{}", s.check),
        other => s.fail(format!("create-if-absent on an existing key gave {other:?}, expected KeyExists")),
    }
    let read =
        store.get(p, &k).await.unwrap_or_else(|e| s.fail(e)).unwrap_or_else(|| s.fail("record not found"));
    assert_eq!(
        (&read.value[..], read.version),
        (&b"first"[..], created.version),
        "{}: value unchanged",
        s.check
    );
}

/// `CompareAndSet` fails on an absent key and on another version, and succeeds on the current one.
pub async fn check_compare_and_set(factory: &dyn StoreFactory) {
    let s = Scope::new("compare_and_set");
    let store = factory.store().await;
    let (p, k) = (&s.partition, s.key("k"));
    match store.put(p, &k, bytes("x"), PutCondition::IfVersion(1)).await {
        Err(MetaError::VersionMismatch { .. }) => {}
        other => s.fail(format!("CAS on an absent key gave {other:?}, expected VersionMismatch")),
    }
    assert!(
        store.get(p, &k).await.unwrap_or_else(|e| s.fail(e)).is_none(),
        "{}: failed CAS created the key",
        s.check
    );
    let v1 = store.put(p, &k, bytes("a"), PutCondition::None).await.unwrap_or_else(|e| s.fail(e)).version;
    match store.put(p, &k, bytes("b"), PutCondition::IfVersion(v1 + 1_000_000)).await {
        Err(MetaError::VersionMismatch { expected, .. }) => {
            assert_eq!(expected, v1 + 1_000_000, "{}", s.check)
        }
        other => s.fail(format!("CAS on a wrong version gave {other:?}")),
    }
    let v2 =
        store.put(p, &k, bytes("c"), PutCondition::IfVersion(v1)).await.unwrap_or_else(|e| s.fail(e)).version;
    assert!(v2 > v1, "{}", s.check);
    if !matches!(
        store.put(p, &k, bytes("d"), PutCondition::IfVersion(v1)).await,
        Err(MetaError::VersionMismatch { .. })
    ) {
        s.fail("a second CAS on a consumed version succeeded");
    }
    let read =
        store.get(p, &k).await.unwrap_or_else(|e| s.fail(e)).unwrap_or_else(|| s.fail("record not found"));
    assert_eq!((&read.value[..], read.version), (&b"c"[..], v2), "{}", s.check);
}

/// `Delete` removes a key and reports whether it existed.
pub async fn check_delete(factory: &dyn StoreFactory) {
    let s = Scope::new("delete");
    let store = factory.store().await;
    let (p, k) = (&s.partition, s.key("k"));
    assert!(
        !store.delete(p, &k).await.unwrap_or_else(|e| s.fail(e)),
        "{}: absent key reported deleted",
        s.check
    );
    store.put(p, &k, bytes("v"), PutCondition::None).await.unwrap_or_else(|e| s.fail(e));
    assert!(store.delete(p, &k).await.unwrap_or_else(|e| s.fail(e)), "{}", s.check);
    assert!(store.get(p, &k).await.unwrap_or_else(|e| s.fail(e)).is_none(), "{}", s.check);
    assert!(!store.delete(p, &k).await.unwrap_or_else(|e| s.fail(e)), "{}", s.check);
}

/// A conditional delete removes the record only at the version given: another version, or an
/// absent key, is a version mismatch that leaves the store as it was.
pub async fn check_delete_if_version(factory: &dyn StoreFactory) {
    let s = Scope::new("delete_if_version");
    let store = factory.store().await;
    let (p, k) = (&s.partition, s.key("k"));
    match store.delete_if_version(p, &k, 0).await {
        Err(MetaError::VersionMismatch { .. }) => {}
        other => {
            s.fail(format!("conditional delete of an absent key gave {other:?}, expected VersionMismatch"))
        }
    }
    let v1 = store.put(p, &k, bytes("a"), PutCondition::None).await.unwrap_or_else(|e| s.fail(e)).version;
    let v2 = store.put(p, &k, bytes("b"), PutCondition::None).await.unwrap_or_else(|e| s.fail(e)).version;
    match store.delete_if_version(p, &k, v1).await {
        Err(MetaError::VersionMismatch { expected, .. }) => assert_eq!(expected, v1, "{}", s.check),
        other => s.fail(format!("conditional delete at a replaced version gave {other:?}")),
    }
    let kept = store.get(p, &k).await.unwrap_or_else(|e| s.fail(e));
    if kept.as_ref().map(|r| (&r.value[..], r.version)) != Some((&b"b"[..], v2)) {
        s.fail(format!("a refused conditional delete changed the record: {kept:?}"));
    }
    store.delete_if_version(p, &k, v2).await.unwrap_or_else(|e| s.fail(e));
    if store.get(p, &k).await.unwrap_or_else(|e| s.fail(e)).is_some() {
        s.fail("a conditional delete at the current version left the record");
    }
}

/// Floor, Ceiling, Lower, Higher and Equal on a set of keys.
pub async fn check_comparisons(factory: &dyn StoreFactory) {
    let s = Scope::new("comparisons");
    let store = factory.store().await;
    let p = &s.partition;
    for name in ["b", "d", "f"] {
        store.put(p, &s.key(name), bytes(name), PutCondition::None).await.unwrap_or_else(|e| s.fail(e));
    }
    let store = store.as_ref();
    let find = |key: String, cmp: Comparison| find(&s, store, key, cmp);
    let ours = |name: &str| Some((s.key(name), bytes(name)));
    assert_eq!(find(s.key("c"), Comparison::Equal).await, None, "{}: Equal of an absent key", s.check);
    assert_eq!(find(s.key("d"), Comparison::Equal).await, ours("d"), "{}: Equal", s.check);
    assert_eq!(find(s.key("c"), Comparison::Floor).await, ours("b"), "{}: Floor between keys", s.check);
    assert_eq!(find(s.key("d"), Comparison::Floor).await, ours("d"), "{}: Floor of a key", s.check);
    assert_eq!(find(s.key("c"), Comparison::Ceiling).await, ours("d"), "{}: Ceiling between keys", s.check);
    assert_eq!(find(s.key("d"), Comparison::Ceiling).await, ours("d"), "{}: Ceiling of a key", s.check);
    assert_eq!(find(s.key("d"), Comparison::Lower).await, ours("b"), "{}: Lower", s.check);
    assert_eq!(find(s.key("d"), Comparison::Higher).await, ours("f"), "{}: Higher", s.check);
    // Beyond the first and last key the result, if any, is someone else's key.
    for (key, cmp) in [(s.key("b"), Comparison::Lower), (s.key("f"), Comparison::Higher)] {
        if let Some((found, _)) = find(key, cmp).await
            && s.owns(&found)
        {
            s.fail(format!("{cmp:?} beyond the check's keys returned {found:?}"));
        }
    }
}

async fn find(s: &Scope, store: &dyn MetaStore, key: String, cmp: Comparison) -> Option<(String, Bytes)> {
    let found = store.get_cmp(&s.partition, &key, cmp).await.unwrap_or_else(|e| s.fail(e));
    found.map(|r| (r.key, r.value))
}

// spec-rule: 49fb846f28 [Reader] A reader MUST read the entries at o′ from the index record of L with the…
/// Spec "Metadata store model": a lookup can return a key beyond a log's first or last index
/// key, which is why readers check the prefix. Higher of the log's last key finds a record
/// (at least the log's own trim marker) that is not an index key of the log.
pub async fn check_lookups_leave_the_log(factory: &dyn StoreFactory) {
    let s = Scope::new("lookups_leave_the_log");
    let store = factory.store().await;
    let log = s.log_id(0);
    let p = keys::partition(log);
    let prefix = keys::index_prefix(log);
    for n in 1..=3 {
        store.sequenced_put(&p, &prefix, &[n, n], bytes("e")).await.unwrap_or_else(|e| s.fail(e));
    }
    store
        .put(&p, &keys::trim_marker_key(log), bytes("0"), PutCondition::None)
        .await
        .unwrap_or_else(|e| s.fail(e));
    let last = store.get_cmp(&p, &keys::last_key(log), Comparison::Floor).await.unwrap_or_else(|e| s.fail(e));
    let last = last.unwrap_or_else(|| s.fail("Floor(K(L,MAX,MAX)) found no record"));
    assert_eq!(last.key, keys::index_key(log, 6, 6), "{}: Floor of K(L,MAX,MAX) is the last record", s.check);
    let beyond = store
        .get_cmp(&p, &keys::covering_lookup_key(log, 6), Comparison::Higher)
        .await
        .unwrap_or_else(|e| s.fail(e));
    match beyond {
        Some(record) if keys::is_index_key_of(&record.key, log) => {
            s.fail(format!("Higher past the end of the log returned its index key {:?}", record.key))
        }
        Some(_) => {}
        None => s.fail("Higher past the log's end found nothing, not even the log's trim marker"),
    }
    let before =
        store.get_cmp(&p, &keys::first_key(log), Comparison::Floor).await.unwrap_or_else(|e| s.fail(e));
    if let Some(record) = before
        && keys::is_index_key_of(&record.key, log)
    {
        s.fail(format!("Floor below the log's first key returned its index key {:?}", record.key));
    }
}

/// `DeleteRange(a, b)` removes `a <= key < b`: `a` goes, `b` stays.
pub async fn check_delete_range_bounds(factory: &dyn StoreFactory) {
    let s = Scope::new("delete_range_bounds");
    let store = factory.store().await;
    let p = &s.partition;
    for name in ["a", "b", "c", "d", "e"] {
        store.put(p, &s.key(name), bytes(name), PutCondition::None).await.unwrap_or_else(|e| s.fail(e));
    }
    store.delete_range(p, &s.key("b"), &s.key("d")).await.unwrap_or_else(|e| s.fail(e));
    let left = store.list(p, &s.key(""), &s.key("~")).await.unwrap_or_else(|e| s.fail(e));
    assert_eq!(left, [s.key("a"), s.key("d"), s.key("e")], "{}: [b, d) removed b and c only", s.check);
    // An empty range removes nothing.
    store.delete_range(p, &s.key("e"), &s.key("e")).await.unwrap_or_else(|e| s.fail(e));
    assert!(store.get(p, &s.key("e")).await.unwrap_or_else(|e| s.fail(e)).is_some(), "{}", s.check);
}

/// `List` and `Scan`: `[start, end)` in key order; `Scan` carries values and versions, and
/// stops at its limit.
pub async fn check_list_and_scan(factory: &dyn StoreFactory) {
    let s = Scope::new("list_and_scan");
    let store = factory.store().await;
    let p = &s.partition;
    let mut versions = Vec::new();
    for name in ["3", "1", "4", "2"] {
        let written =
            store.put(p, &s.key(name), bytes(name), PutCondition::None).await.unwrap_or_else(|e| s.fail(e));
        versions.push((s.key(name), written.version));
    }
    versions.sort();
    let listed = store.list(p, &s.key("1"), &s.key("4")).await.unwrap_or_else(|e| s.fail(e));
    assert_eq!(listed, [s.key("1"), s.key("2"), s.key("3")], "{}: list is [start, end) in order", s.check);
    let scanned = store.scan(p, &s.key("1"), &s.key("5"), None).await.unwrap_or_else(|e| s.fail(e));
    let seen: Vec<(String, i64)> = scanned.iter().map(|r| (r.key.clone(), r.version)).collect();
    assert_eq!(seen, versions, "{}: scan returns every record with its version", s.check);
    assert!(
        scanned.iter().all(|r| r.key.ends_with(&format!("-{}", String::from_utf8_lossy(&r.value)))),
        "{}",
        s.check
    );
    let limited = store.scan(p, &s.key("1"), &s.key("5"), Some(2)).await.unwrap_or_else(|e| s.fail(e));
    let limited: Vec<String> = limited.into_iter().map(|r| r.key).collect();
    assert_eq!(limited, [s.key("1"), s.key("2")], "{}: scan stops at its limit, from the start", s.check);
    assert!(
        store.list(p, &s.key("4"), &s.key("4")).await.unwrap_or_else(|e| s.fail(e)).is_empty(),
        "{}",
        s.check
    );
}

/// The spec's key-order property (keys without `/` bytewise, no `/` key between two of them)
/// and Oxia's hierarchical order: `List("/x/", "/x//")` holds the direct children of `/x/`.
pub async fn check_key_order(factory: &dyn StoreFactory) {
    let s = Scope::new("key_order");
    let store = factory.store().await;
    let p = &s.partition;
    let dir = format!("/{}", s.prefix);
    let slash_keys = [format!("{dir}/a"), format!("{dir}/b"), format!("{dir}/a/deeper"), format!("{dir}-c")];
    let plain_keys = [s.key("a"), s.key("b"), s.key("c")];
    for key in slash_keys.iter().chain(&plain_keys) {
        store.put(p, key, bytes("v"), PutCondition::None).await.unwrap_or_else(|e| s.fail(e));
    }
    let plain = store.list(p, &s.key("a"), &s.key("d")).await.unwrap_or_else(|e| s.fail(e));
    assert_eq!(plain, plain_keys, "{}: no '/' key sorts between keys without '/'", s.check);
    let next = store.get_cmp(p, &s.key("a"), Comparison::Higher).await.unwrap_or_else(|e| s.fail(e));
    assert_eq!(next.map(|r| r.key), Some(s.key("b")), "{}", s.check);
    let children = store.list(p, &format!("{dir}/"), &format!("{dir}//")).await.unwrap_or_else(|e| s.fail(e));
    assert_eq!(children, [format!("{dir}/a"), format!("{dir}/b")], "{}: direct children of {dir}/", s.check);
}

/// Spec "Sequenced put" and oxia.md §8: on a prefix with no key, the first put creates
/// `prefix-{d1:020}-{d2:020}`, with the value, version and creation timestamp it returns.
pub async fn check_sequenced_put_starts_at_delta(factory: &dyn StoreFactory) {
    let s = Scope::new("sequenced_put_starts");
    let store = factory.store().await;
    let log = s.log_id(0);
    let p = keys::partition(log);
    let written = store
        .sequenced_put(&p, &keys::index_prefix(log), &[3, 8], bytes("first"))
        .await
        .unwrap_or_else(|e| s.fail(e));
    assert_eq!(written.key, keys::index_key(log, 3, 8), "{}", s.check);
    let read = store
        .get(&p, &written.key)
        .await
        .unwrap_or_else(|e| s.fail(e))
        .unwrap_or_else(|| s.fail("record not found"));
    assert_eq!(
        (&read.value[..], read.version, read.created_ms),
        (&b"first"[..], written.version, written.created_ms),
        "{}",
        s.check
    );
}

/// The counters continue from the greatest suffixed key, each dimension on its own; later
/// deltas may be 0.
pub async fn check_sequenced_put_continues_from_greatest_key(factory: &dyn StoreFactory) {
    let s = Scope::new("sequenced_put_continues");
    let store = factory.store().await;
    let log = s.log_id(0);
    let (p, prefix) = (keys::partition(log), keys::index_prefix(log));
    let mut created = Vec::new();
    for deltas in [[3, 8], [2, 5], [1, 0]] {
        created.push(
            store.sequenced_put(&p, &prefix, &deltas, bytes("e")).await.unwrap_or_else(|e| s.fail(e)).key,
        );
    }
    let expected = [keys::index_key(log, 3, 8), keys::index_key(log, 5, 13), keys::index_key(log, 6, 13)];
    assert_eq!(created, expected, "{}: oxia.md §8 example", s.check);
    // Removing records below the greatest one does not move the counters.
    store.delete(&p, &expected[0]).await.unwrap_or_else(|e| s.fail(e));
    let next = store.sequenced_put(&p, &prefix, &[1, 1], bytes("e")).await.unwrap_or_else(|e| s.fail(e));
    assert_eq!(next.key, keys::index_key(log, 7, 14), "{}", s.check);
}

/// Spec "Metadata store model": the sequenced put derives offsets from the greatest existing
/// key, so deleting every key of the prefix restarts the counters at 0.
pub async fn check_sequenced_put_restarts_when_all_keys_deleted(factory: &dyn StoreFactory) {
    let s = Scope::new("sequenced_put_restarts");
    let store = factory.store().await;
    let log = s.log_id(0);
    let (p, prefix) = (keys::partition(log), keys::index_prefix(log));
    for _ in 0..3 {
        store.sequenced_put(&p, &prefix, &[5, 50], bytes("e")).await.unwrap_or_else(|e| s.fail(e));
    }
    store.delete_range(&p, &keys::first_key(log), &keys::last_key(log)).await.unwrap_or_else(|e| s.fail(e));
    let remaining =
        store.list(&p, &keys::first_key(log), &keys::last_key(log)).await.unwrap_or_else(|e| s.fail(e));
    assert!(remaining.is_empty(), "{}: DeleteRange(K(L,0,0), K(L,MAX,MAX)) left {remaining:?}", s.check);
    let again = store.sequenced_put(&p, &prefix, &[2, 7], bytes("e")).await.unwrap_or_else(|e| s.fail(e));
    assert_eq!(again.key, keys::index_key(log, 2, 7), "{}: counters restart at 0", s.check);
}

/// A first delta of 0 and an empty delta list are refused without creating anything.
pub async fn check_sequenced_put_validation(factory: &dyn StoreFactory) {
    let s = Scope::new("sequenced_put_validation");
    let store = factory.store().await;
    let log = s.log_id(0);
    let (p, prefix) = (keys::partition(log), keys::index_prefix(log));
    for deltas in [&[0u64, 5][..], &[]] {
        match store.sequenced_put(&p, &prefix, deltas, bytes("e")).await {
            Err(MetaError::InvalidRequest(_)) => {}
            other => s.fail(format!("deltas {deltas:?} gave {other:?}, expected InvalidRequest")),
        }
    }
    let created =
        store.list(&p, &keys::first_key(log), &keys::last_key(log)).await.unwrap_or_else(|e| s.fail(e));
    assert!(created.is_empty(), "{}: a refused sequenced put created {created:?}", s.check);
}

/// Spec "Leaderless appends": concurrent sequenced puts on one prefix receive disjoint,
/// contiguous ranges, in both dimensions.
pub async fn check_concurrent_sequenced_puts(factory: &dyn StoreFactory) {
    const TASKS: u64 = 8;
    const PUTS_PER_TASK: u64 = 8;
    let s = Scope::new("concurrent_sequenced_puts");
    let store = factory.store().await;
    let log = s.log_id(0);
    let mut tasks = tokio::task::JoinSet::new();
    for task in 1..=TASKS {
        let store = Arc::clone(&store);
        tasks.spawn(async move {
            let (p, prefix) = (keys::partition(log), keys::index_prefix(log));
            let mut keys = Vec::new();
            for _ in 0..PUTS_PER_TASK {
                // Task t appends t records of 10 bytes each, so every range says who made it.
                let result =
                    store.sequenced_put(&p, &prefix, &[task, task * 10], Bytes::from(task.to_string())).await;
                keys.push((task, result.map(|w| w.key)));
            }
            keys
        });
    }
    let mut ranges = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        for (task, key) in joined.unwrap_or_else(|e| s.fail(e)) {
            let key = key.unwrap_or_else(|e| s.fail(e));
            let parsed = IndexKey::parse(&key).unwrap_or_else(|e| s.fail(e));
            ranges.push((parsed.end_offset, parsed.cumulative_size, task));
        }
    }
    ranges.sort();
    let (mut end, mut size) = (0, 0);
    for (range_end, range_size, task) in &ranges {
        if *range_end != end + task || *range_size != size + task * 10 {
            s.fail(format!("range ending at {range_end} (size {range_size}) of task {task} does not follow ({end}, {size})"));
        }
        (end, size) = (*range_end, *range_size);
    }
    let total: u64 = (1..=TASKS).sum::<u64>() * PUTS_PER_TASK;
    assert_eq!(end, total, "{}: every put got a range", s.check);
}

/// A counter record for [`check_concurrent_cas_updates`]: decimal text.
struct CasCounter(u64);

impl CasRecord for CasCounter {
    type Error = String;

    fn decode(record: &crate::store::Record) -> Result<Self, String> {
        std::str::from_utf8(&record.value)
            .ok()
            .and_then(|text| text.parse().ok())
            .map(CasCounter)
            .ok_or_else(|| format!("{}: not a counter", record.key))
    }

    fn encode(&self) -> Result<Bytes, String> {
        Ok(Bytes::from(self.0.to_string()))
    }
}

/// [`crate::cas::cas_update`] over the backend: concurrent read-modify-writes of one record
/// (`CreateIfAbsent` first, `CompareAndSet` after) lose races and retry, and none is lost or
/// applied twice: every increment returns a distinct value, and the last one is the total.
pub async fn check_concurrent_cas_updates(factory: &dyn StoreFactory) {
    const TASKS: u64 = 4;
    const UPDATES_PER_TASK: u64 = 8;
    let s = Scope::new("concurrent_cas_updates");
    let store = factory.store().await;
    let key = s.key("counter");
    // Enough attempts that only a broken compare-and-set can exhaust them.
    let policy = lakestream_format::retry::BackoffPolicy::compare_and_set(10_000);
    let options = CasOptions::new(lakestream_format::retry::Backoff::seeded(policy, s.seed));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..TASKS {
        let (store, partition, key, options) =
            (Arc::clone(&store), s.partition.clone(), key.clone(), options.clone());
        tasks.spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..UPDATES_PER_TASK {
                let updated = cas_update(
                    store.as_ref(),
                    &partition,
                    &key,
                    &options,
                    |c: Option<&Current<CasCounter>>| {
                        Ok(Change::Write(CasCounter(c.map_or(0, |c| c.value.0) + 1)))
                    },
                )
                .await;
                seen.push(updated.map(|u| (u.value().map(|c| c.0), u.written)));
            }
            seen
        });
    }
    let mut values = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        for result in joined.unwrap_or_else(|e| s.fail(e)) {
            match result {
                Ok((Some(value), true)) => values.push(value),
                other => s.fail(format!("an update ended with {other:?}")),
            }
        }
    }
    values.sort_unstable();
    let expected: Vec<u64> = (1..=TASKS * UPDATES_PER_TASK).collect();
    assert_eq!(values, expected, "{}: each increment wrote its own value", s.check);
    let stored = store
        .get(&s.partition, &key)
        .await
        .unwrap_or_else(|e| s.fail(e))
        .unwrap_or_else(|| s.fail("no record"));
    assert_eq!(&stored.value[..], (TASKS * UPDATES_PER_TASK).to_string().as_bytes(), "{}", s.check);
}

/// Spec "Sessions": an ephemeral record exists until its session ends; closing ends it. A
/// second create of the same key fails with KeyExists.
pub async fn check_ephemeral_removed_on_close(factory: &dyn StoreFactory) {
    let s = Scope::new("ephemeral_close");
    let store = factory.store().await;
    let session = store.open_session(SESSION_TIMEOUT).await.unwrap_or_else(|e| s.fail(e));
    let (p, k) = (&s.partition, s.key("eph"));
    session.create_ephemeral(p, &k, bytes("mine")).await.unwrap_or_else(|e| s.fail(e));
    assert!(store.get(p, &k).await.unwrap_or_else(|e| s.fail(e)).is_some(), "{}", s.check);
    if !matches!(session.create_ephemeral(p, &k, bytes("again")).await, Err(MetaError::KeyExists { .. })) {
        s.fail("a second ephemeral create of one key did not fail with KeyExists");
    }
    assert!(!session.is_ended(), "{}", s.check);
    let ended = session.ended();
    session.close().await.unwrap_or_else(|e| s.fail(e));
    wait_ended(&s, ended).await;
    assert!(
        store.get(p, &k).await.unwrap_or_else(|e| s.fail(e)).is_none(),
        "{}: record outlived its session",
        s.check
    );
    session.close().await.unwrap_or_else(|e| s.fail(format!("close is not idempotent: {e}")));
}

/// A closed session refuses ephemeral creates with SessionEnded, and creates nothing.
pub async fn check_closed_session_refuses_ephemeral(factory: &dyn StoreFactory) {
    let s = Scope::new("closed_session_refuses");
    let store = factory.store().await;
    let session = store.open_session(SESSION_TIMEOUT).await.unwrap_or_else(|e| s.fail(e));
    session.close().await.unwrap_or_else(|e| s.fail(e));
    let k = s.key("eph");
    match session.create_ephemeral(&s.partition, &k, bytes("late")).await {
        Err(MetaError::SessionEnded(_)) => {}
        other => s.fail(format!("ephemeral create on a closed session gave {other:?}")),
    }
    assert!(store.get(&s.partition, &k).await.unwrap_or_else(|e| s.fail(e)).is_none(), "{}", s.check);
}

/// An expired session's ephemeral records vanish and its ended signal fires.
pub async fn check_ephemeral_removed_on_expiry(factory: &dyn StoreFactory) {
    let s = Scope::new("ephemeral_expiry");
    let store = factory.store().await;
    let session = store.open_session(SESSION_TIMEOUT).await.unwrap_or_else(|e| s.fail(e));
    let k = s.key("eph");
    session.create_ephemeral(&s.partition, &k, bytes("mine")).await.unwrap_or_else(|e| s.fail(e));
    if !factory.expire_session(&store, &session).await {
        s.fail("the factory cannot force a session to expire, so expiry goes unchecked");
    }
    wait_ended(&s, session.ended()).await;
    assert!(
        store.get(&s.partition, &k).await.unwrap_or_else(|e| s.fail(e)).is_none(),
        "{}: record outlived its session",
        s.check
    );
    if !matches!(
        session.create_ephemeral(&s.partition, &k, bytes("late")).await,
        Err(MetaError::SessionEnded(_))
    ) {
        s.fail("an expired session accepted an ephemeral create");
    }
}

/// A permanent put over an ephemeral record makes it permanent (oxia.md §7.1).
pub async fn check_permanent_overwrite_outlives_session(factory: &dyn StoreFactory) {
    let s = Scope::new("permanent_overwrite");
    let store = factory.store().await;
    let session = store.open_session(SESSION_TIMEOUT).await.unwrap_or_else(|e| s.fail(e));
    let k = s.key("k");
    session.create_ephemeral(&s.partition, &k, bytes("eph")).await.unwrap_or_else(|e| s.fail(e));
    store.put(&s.partition, &k, bytes("perm"), PutCondition::None).await.unwrap_or_else(|e| s.fail(e));
    session.close().await.unwrap_or_else(|e| s.fail(e));
    let read = store.get(&s.partition, &k).await.unwrap_or_else(|e| s.fail(e));
    assert_eq!(read.map(|r| r.value), Some(bytes("perm")), "{}", s.check);
}

// spec-rule: 915c1bb508 [Writer, Compactor] To acquire a write lease on log L, an implementation MUST, in…
/// Spec "Leases": acquiring creates the lease record (value = token) that the catalog lists;
/// releasing deletes it.
pub async fn check_lease_acquire_and_release(factory: &dyn StoreFactory) {
    let s = Scope::new("lease_acquire_release");
    let store = factory.store().await;
    let log = s.log_id(0);
    let session = store.open_session(SESSION_TIMEOUT).await.unwrap_or_else(|e| s.fail(e));
    let token = RandomTokens.new_token();
    let held = lease::acquire(store.as_ref(), &session, log, &token).await.unwrap_or_else(|e| s.fail(e));
    assert_eq!((held.log_id(), held.token()), (log, token.as_str()), "{}", s.check);
    assert_eq!(
        lease::list_leases(store.as_ref(), log).await.unwrap_or_else(|e| s.fail(e)),
        [keys::lease_key(log, &token)],
        "{}",
        s.check
    );
    let record =
        store.get(&keys::partition(log), &keys::lease_key(log, &token)).await.unwrap_or_else(|e| s.fail(e));
    assert_eq!(record.map(|r| r.value), Some(bytes(&token)), "{}: lease record value is the token", s.check);
    assert!(!*held.session_ended().borrow(), "{}", s.check);
    held.release(store.as_ref()).await.unwrap_or_else(|e| s.fail(e));
    assert!(
        lease::list_leases(store.as_ref(), log).await.unwrap_or_else(|e| s.fail(e)).is_empty(),
        "{}",
        s.check
    );
    session.close().await.unwrap_or_else(|e| s.fail(e));
}

// spec-rule: 915c1bb508 [Writer, Compactor] To acquire a write lease on log L, an implementation MUST, in…
/// Spec "Leases": a token no other lease of L uses. Reusing a live token fails with KeyExists.
pub async fn check_lease_token_unique(factory: &dyn StoreFactory) {
    let s = Scope::new("lease_token_unique");
    let store = factory.store().await;
    let log = s.log_id(0);
    let session = store.open_session(SESSION_TIMEOUT).await.unwrap_or_else(|e| s.fail(e));
    let token = RandomTokens.new_token();
    let held = lease::acquire(store.as_ref(), &session, log, &token).await.unwrap_or_else(|e| s.fail(e));
    match lease::acquire(store.as_ref(), &session, log, &token).await {
        Err(LeaseError::Meta(MetaError::KeyExists { .. })) => {}
        other => s.fail(format!("a second lease with the same token gave {other:?}")),
    }
    held.release(store.as_ref()).await.unwrap_or_else(|e| s.fail(e));
    session.close().await.unwrap_or_else(|e| s.fail(e));
}

// spec-rule: bc3a241078 [Writer, Compactor] If the fence exists, or the Get fails, the implementation MUST…
/// Spec "Leases": if the fence exists, the implementation MUST delete its lease record and
/// MUST NOT use the lease. The acquisition fails with Fenced and no lease record remains.
pub async fn check_fenced_acquire_leaves_no_lease(factory: &dyn StoreFactory) {
    let s = Scope::new("fenced_acquire");
    let store = factory.store().await;
    let log = s.log_id(0);
    lease::fence(store.as_ref(), log).await.unwrap_or_else(|e| s.fail(e));
    let session = store.open_session(SESSION_TIMEOUT).await.unwrap_or_else(|e| s.fail(e));
    match lease::acquire(store.as_ref(), &session, log, &RandomTokens.new_token()).await {
        Err(LeaseError::Fenced { log_id }) => assert_eq!(log_id, log, "{}", s.check),
        other => s.fail(format!("acquiring a lease on a fenced log gave {other:?}")),
    }
    let left = lease::list_leases(store.as_ref(), log).await.unwrap_or_else(|e| s.fail(e));
    assert!(left.is_empty(), "{}: a failed acquisition left lease records {left:?}", s.check);
    session.close().await.unwrap_or_else(|e| s.fail(e));
}

// spec-rule: 9980fb4670 [Catalog] To fence log L, a catalog MUST create the write fence of L with CreateIf…
// spec-rule: 3c1c561618 [All] An implementation MUST NOT delete or change a write fence.
/// Spec "Fences and log deletion": fencing creates the fence (value 0x01); fencing again
/// counts as success and changes nothing.
pub async fn check_fence_idempotent(factory: &dyn StoreFactory) {
    let s = Scope::new("fence_idempotent");
    let store = factory.store().await;
    let log = s.log_id(0);
    assert!(!lease::is_fenced(store.as_ref(), log).await.unwrap_or_else(|e| s.fail(e)), "{}", s.check);
    lease::fence(store.as_ref(), log).await.unwrap_or_else(|e| s.fail(e));
    let first = store.get(&keys::partition(log), &keys::fence_key(log)).await.unwrap_or_else(|e| s.fail(e));
    let first = first.unwrap_or_else(|| s.fail("no fence record after fence()"));
    assert_eq!(&first.value[..], keys::FENCE_VALUE, "{}", s.check);
    lease::fence(store.as_ref(), log).await.unwrap_or_else(|e| s.fail(format!("fencing twice failed: {e}")));
    let second = store.get(&keys::partition(log), &keys::fence_key(log)).await.unwrap_or_else(|e| s.fail(e));
    assert_eq!(second.map(|r| r.version), Some(first.version), "{}: MUST NOT change a write fence", s.check);
    assert!(lease::is_fenced(store.as_ref(), log).await.unwrap_or_else(|e| s.fail(e)), "{}", s.check);
}

/// Spec "Fences and log deletion": the catalog lists lease records until none remains. The
/// drain waits while a lease is held and succeeds once it is released.
pub async fn check_drain_waits_for_release(factory: &dyn StoreFactory) {
    let s = Scope::new("drain_waits");
    let store = factory.store().await;
    let log = s.log_id(0);
    let session = store.open_session(SESSION_TIMEOUT).await.unwrap_or_else(|e| s.fail(e));
    let held = lease::acquire(store.as_ref(), &session, log, &RandomTokens.new_token())
        .await
        .unwrap_or_else(|e| s.fail(e));
    lease::fence(store.as_ref(), log).await.unwrap_or_else(|e| s.fail(e));
    let config = DrainConfig { timeout: Duration::from_secs(20), poll_interval: Duration::from_millis(10) };
    let drainer = {
        let store = Arc::clone(&store);
        tokio::spawn(async move { lease::drain(store.as_ref(), log, &config).await })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(!drainer.is_finished(), "{}: drain finished while a lease record existed", s.check);
    held.release(store.as_ref()).await.unwrap_or_else(|e| s.fail(e));
    let outcome =
        tokio::time::timeout(PROMPTLY, drainer).await.unwrap_or_else(|_| s.fail("drain did not finish"));
    assert_eq!(
        outcome.unwrap_or_else(|e| s.fail(e)).unwrap_or_else(|e| s.fail(e)),
        DrainOutcome::Drained,
        "{}",
        s.check
    );
    session.close().await.unwrap_or_else(|e| s.fail(e));
}

/// Spec "Fences and log deletion": if lease records remain when the catalog stops waiting, it
/// MUST leave the log's records unchanged and the fence in place.
pub async fn check_drain_times_out_changing_nothing(factory: &dyn StoreFactory) {
    let s = Scope::new("drain_times_out");
    let store = factory.store().await;
    let log = s.log_id(0);
    let p = keys::partition(log);
    let session = store.open_session(SESSION_TIMEOUT).await.unwrap_or_else(|e| s.fail(e));
    let held = lease::acquire(store.as_ref(), &session, log, &RandomTokens.new_token())
        .await
        .unwrap_or_else(|e| s.fail(e));
    let index = store
        .sequenced_put(&p, &keys::index_prefix(log), &[1, 1], bytes("e"))
        .await
        .unwrap_or_else(|e| s.fail(e));
    lease::fence(store.as_ref(), log).await.unwrap_or_else(|e| s.fail(e));
    let config =
        DrainConfig { timeout: Duration::from_millis(100), poll_interval: Duration::from_millis(10) };
    match lease::drain(store.as_ref(), log, &config).await.unwrap_or_else(|e| s.fail(e)) {
        DrainOutcome::TimedOut { remaining } => {
            assert_eq!(remaining, [held.key().to_string()], "{}", s.check)
        }
        DrainOutcome::Drained => s.fail("drain reported Drained while a lease was held"),
    }
    let index_left = store.get(&p, &index.key).await.unwrap_or_else(|e| s.fail(e));
    assert_eq!(index_left.map(|r| r.version), Some(index.version), "{}: index record changed", s.check);
    assert!(
        lease::is_fenced(store.as_ref(), log).await.unwrap_or_else(|e| s.fail(e)),
        "{}: fence removed",
        s.check
    );
    assert_eq!(
        lease::list_leases(store.as_ref(), log).await.unwrap_or_else(|e| s.fail(e)),
        [held.key().to_string()],
        "{}",
        s.check
    );
    held.release(store.as_ref()).await.unwrap_or_else(|e| s.fail(e));
    session.close().await.unwrap_or_else(|e| s.fail(e));
}

/// Spec "Leases": when the session behind a lease record ends, the store removes the record
/// (so a drain completes) and the holder learns of it through `session_ended`.
pub async fn check_session_end_removes_lease_record(factory: &dyn StoreFactory) {
    let s = Scope::new("session_end_removes_lease");
    let store = factory.store().await;
    let (closed_log, expired_log) = (s.log_id(0), s.log_id(1));
    let session = store.open_session(SESSION_TIMEOUT).await.unwrap_or_else(|e| s.fail(e));
    let held = lease::acquire(store.as_ref(), &session, closed_log, &RandomTokens.new_token())
        .await
        .unwrap_or_else(|e| s.fail(e));
    session.close().await.unwrap_or_else(|e| s.fail(e));
    wait_ended(&s, held.session_ended()).await;
    let left = lease::list_leases(store.as_ref(), closed_log).await.unwrap_or_else(|e| s.fail(e));
    assert!(left.is_empty(), "{}: lease record outlived its closed session: {left:?}", s.check);

    let session = store.open_session(SESSION_TIMEOUT).await.unwrap_or_else(|e| s.fail(e));
    let held = lease::acquire(store.as_ref(), &session, expired_log, &RandomTokens.new_token())
        .await
        .unwrap_or_else(|e| s.fail(e));
    if !factory.expire_session(&store, &session).await {
        s.fail("the factory cannot force a session to expire, so expiry goes unchecked");
    }
    wait_ended(&s, held.session_ended()).await;
    let config = DrainConfig { timeout: Duration::from_secs(5), poll_interval: Duration::from_millis(10) };
    let outcome = lease::drain(store.as_ref(), expired_log, &config).await.unwrap_or_else(|e| s.fail(e));
    assert_eq!(outcome, DrainOutcome::Drained, "{}: drain after the session expired", s.check);
}

/// Spec "Linearizable partitions": puts, gets and CAS on one key from several concurrent
/// clients form a linearizable history of a register.
pub async fn check_linearizable_register(factory: &dyn StoreFactory) {
    const CLIENTS: usize = 4;
    const OPS_PER_CLIENT: usize = 12;
    let s = Scope::new("linearizable_register");
    let store = factory.store().await;
    let clock = Arc::new(HistoryClock::default());
    let mut clients = tokio::task::JoinSet::new();
    for client in 0..CLIENTS {
        let (store, clock, partition, key) =
            (Arc::clone(&store), Arc::clone(&clock), s.partition.clone(), s.key("register"));
        clients.spawn(async move {
            let mut history = Vec::new();
            let mut last_seen = None;
            for i in 0..OPS_PER_CLIENT {
                let value = (client * 1000 + i) as u64;
                // A fixed mix per client: reads, blind writes, and CAS on the version last seen.
                let op = match (client + i) % 3 {
                    0 => RegisterOp::Get,
                    1 => RegisterOp::Put { value },
                    _ => RegisterOp::Cas { expected: last_seen.unwrap_or(1), value },
                };
                let invoked = clock.tick();
                let result = match op {
                    RegisterOp::Get => store.get(&partition, &key).await.map(|found| {
                        let found = found.map(|r| {
                            (String::from_utf8_lossy(&r.value).parse::<u64>().unwrap_or(u64::MAX), r.version)
                        });
                        RegisterResult::Read(found)
                    }),
                    RegisterOp::Put { value } => store
                        .put(&partition, &key, Bytes::from(value.to_string()), PutCondition::None)
                        .await
                        .map(|w| RegisterResult::Written { version: w.version }),
                    RegisterOp::Cas { expected, value } => {
                        match store
                            .put(
                                &partition,
                                &key,
                                Bytes::from(value.to_string()),
                                PutCondition::IfVersion(expected),
                            )
                            .await
                        {
                            Err(MetaError::VersionMismatch { .. }) => Ok(RegisterResult::CasFailed),
                            other => other.map(|w| RegisterResult::Written { version: w.version }),
                        }
                    }
                };
                let completed = clock.tick();
                let result = result?;
                match result {
                    RegisterResult::Written { version } | RegisterResult::Read(Some((_, version))) => {
                        last_seen = Some(version)
                    }
                    RegisterResult::Read(None) | RegisterResult::CasFailed => {}
                }
                history.push(Operation { client, invoked, completed, op, result });
            }
            Ok::<_, MetaError>(history)
        });
    }
    let mut history = Vec::new();
    while let Some(joined) = clients.join_next().await {
        history.extend(joined.unwrap_or_else(|e| s.fail(e)).unwrap_or_else(|e| s.fail(e)));
    }
    if let Err(e) = linearizability::check(&history) {
        s.fail(format!("{e}: {history:#?}"));
    }
}

#[cfg(test)]
mod tests {
    //! The suite against this crate's backends.
    use super::*;
    use crate::embedded::EmbeddedStore;
    use crate::memory::InMemoryStore;
    use lakestream_format::ManualClock;

    struct MemoryFactory {
        store: InMemoryStore,
        clock: ManualClock,
    }

    impl MemoryFactory {
        fn new(shards: usize) -> Self {
            let clock = ManualClock::new(1_700_000_000_000);
            Self {
                store: InMemoryStore::with_config(shards, Arc::new(clock.clone())).expect("valid config"),
                clock,
            }
        }
    }

    #[async_trait]
    impl StoreFactory for MemoryFactory {
        async fn store(&self) -> Arc<dyn MetaStore> {
            Arc::new(self.store.clone())
        }

        async fn expire_session(&self, _store: &Arc<dyn MetaStore>, session: &Arc<dyn Session>) -> bool {
            self.store.expire_session(&session.id())
        }

        async fn advance_clock(&self, ms: u64) {
            self.clock.advance_ms(i64::try_from(ms).expect("small"));
        }
    }

    struct EmbeddedFactory {
        store: EmbeddedStore,
        _dir: tempfile::TempDir,
    }

    #[async_trait]
    impl StoreFactory for EmbeddedFactory {
        async fn store(&self) -> Arc<dyn MetaStore> {
            Arc::new(self.store.clone())
        }

        async fn expire_session(&self, _store: &Arc<dyn MetaStore>, session: &Arc<dyn Session>) -> bool {
            self.store.expire_session(&session.id()).await.expect("expire")
        }
    }

    // spec-runs-suite: crates/lakestream-meta/src/conformance.rs
    // spec-rule: 90683d74de [All] An implementation MUST use a metadata store that provides:
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn in_memory_store_one_shard_passes_the_suite() {
        run_all(&MemoryFactory::new(1)).await;
    }

    // spec-runs-suite: crates/lakestream-meta/src/conformance.rs
    // spec-rule: 90683d74de [All] An implementation MUST use a metadata store that provides:
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn in_memory_store_four_shards_passes_the_suite() {
        run_all(&MemoryFactory::new(4)).await;
    }

    // spec-runs-suite: crates/lakestream-meta/src/conformance.rs
    // spec-rule: 90683d74de [All] An implementation MUST use a metadata store that provides:
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn embedded_store_passes_the_suite() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = EmbeddedStore::open(dir.path().join("meta.redb")).await.expect("open");
        run_all(&EmbeddedFactory { store, _dir: dir }).await;
    }

    /// An in-memory store with one deliberate bug, to show that the checks catch it.
    #[derive(Debug)]
    struct Broken {
        inner: InMemoryStore,
        bug: Bug,
    }

    #[derive(Debug, Clone, Copy)]
    enum Bug {
        /// Compare-and-set ignores the expected version.
        CasIgnoresVersion,
        /// Delete-range also removes its end key.
        InclusiveDeleteRange,
        /// A conditional delete ignores the expected version.
        DeleteIgnoresVersion,
        /// Closing a session leaves its ephemeral records.
        CloseKeepsEphemerals,
    }

    #[async_trait]
    impl MetaStore for Broken {
        async fn get_cmp(
            &self,
            p: &str,
            key: &str,
            cmp: Comparison,
        ) -> crate::MetaResult<Option<crate::Record>> {
            self.inner.get_cmp(p, key, cmp).await
        }
        async fn put(
            &self,
            p: &str,
            key: &str,
            value: Bytes,
            c: PutCondition,
        ) -> crate::MetaResult<crate::WriteResult> {
            match (self.bug, c) {
                (Bug::CasIgnoresVersion, PutCondition::IfVersion(_)) => {
                    self.inner.put(p, key, value, PutCondition::None).await
                }
                _ => self.inner.put(p, key, value, c).await,
            }
        }
        async fn delete(&self, p: &str, key: &str) -> crate::MetaResult<bool> {
            self.inner.delete(p, key).await
        }
        async fn delete_if_version(&self, p: &str, key: &str, v: crate::Version) -> crate::MetaResult<()> {
            if matches!(self.bug, Bug::DeleteIgnoresVersion) {
                self.inner.delete(p, key).await?;
                return Ok(());
            }
            self.inner.delete_if_version(p, key, v).await
        }
        async fn delete_range(&self, p: &str, a: &str, b: &str) -> crate::MetaResult<()> {
            self.inner.delete_range(p, a, b).await?;
            if matches!(self.bug, Bug::InclusiveDeleteRange) {
                self.inner.delete(p, b).await?;
            }
            Ok(())
        }
        async fn sequenced_put(
            &self,
            p: &str,
            prefix: &str,
            d: &[u64],
            v: Bytes,
        ) -> crate::MetaResult<crate::WriteResult> {
            self.inner.sequenced_put(p, prefix, d, v).await
        }
        async fn list(&self, p: &str, a: &str, b: &str) -> crate::MetaResult<Vec<String>> {
            self.inner.list(p, a, b).await
        }
        async fn scan(
            &self,
            p: &str,
            a: &str,
            b: &str,
            limit: Option<usize>,
        ) -> crate::MetaResult<Vec<crate::Record>> {
            self.inner.scan(p, a, b, limit).await
        }
        async fn open_session(&self, timeout: Duration) -> crate::MetaResult<Arc<dyn Session>> {
            let session = self.inner.open_session(timeout).await?;
            Ok(match self.bug {
                Bug::CloseKeepsEphemerals => Arc::new(LeakySession(session, watch::channel(false).0)),
                _ => session,
            })
        }
    }

    /// A session whose close only pretends: it signals the end but keeps the records.
    #[derive(Debug)]
    struct LeakySession(Arc<dyn Session>, watch::Sender<bool>);

    #[async_trait]
    impl Session for LeakySession {
        fn id(&self) -> String {
            self.0.id()
        }
        async fn create_ephemeral(
            &self,
            p: &str,
            key: &str,
            value: Bytes,
        ) -> crate::MetaResult<crate::WriteResult> {
            self.0.create_ephemeral(p, key, value).await
        }
        fn ended(&self) -> watch::Receiver<bool> {
            self.1.subscribe()
        }
        async fn close(&self) -> crate::MetaResult<()> {
            self.1.send_replace(true);
            Ok(())
        }
    }

    struct BrokenFactory(Bug);

    #[async_trait]
    impl StoreFactory for BrokenFactory {
        async fn store(&self) -> Arc<dyn MetaStore> {
            Arc::new(Broken { inner: InMemoryStore::new(), bug: self.0 })
        }
    }

    /// Runs `check` and returns its panic message, if it panicked.
    async fn failure_of(check: impl std::future::Future<Output = ()>) -> Option<String> {
        use futures::FutureExt;
        let outcome = std::panic::AssertUnwindSafe(check).catch_unwind().await;
        outcome.err().map(|panic| {
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        })
    }

    #[tokio::test]
    async fn the_checks_catch_broken_stores() {
        let cas = failure_of(check_compare_and_set(&BrokenFactory(Bug::CasIgnoresVersion))).await;
        assert!(cas.is_some_and(|m| m.contains("compare_and_set")));
        let range = failure_of(check_delete_range_bounds(&BrokenFactory(Bug::InclusiveDeleteRange))).await;
        assert!(range.is_some_and(|m| m.contains("[b, d)")));
        let delete = failure_of(check_delete_if_version(&BrokenFactory(Bug::DeleteIgnoresVersion))).await;
        assert!(delete.as_ref().is_some_and(|m| m.contains("delete_if_version")), "{delete:?}");
        let close =
            failure_of(check_ephemeral_removed_on_close(&BrokenFactory(Bug::CloseKeepsEphemerals))).await;
        assert!(close.is_some_and(|m| m.contains("outlived its session")));
        let lease =
            failure_of(check_session_end_removes_lease_record(&BrokenFactory(Bug::CloseKeepsEphemerals)))
                .await;
        assert!(lease.is_some_and(|m| m.contains("outlived its closed session")));
        // A harness that cannot force expiry fails the expiry checks instead of skipping them.
        let no_expiry =
            failure_of(check_ephemeral_removed_on_expiry(&BrokenFactory(Bug::CasIgnoresVersion))).await;
        assert!(no_expiry.is_some_and(|m| m.contains("cannot force a session to expire")));
        // And the same checks pass on the correct store.
        let healthy = MemoryFactory::new(1);
        assert_eq!(failure_of(check_compare_and_set(&healthy)).await, None);
        assert_eq!(failure_of(check_delete_range_bounds(&healthy)).await, None);
        assert_eq!(failure_of(check_delete_if_version(&healthy)).await, None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_suite_runs_twice_against_one_store() {
        // Unique keys per run: a persistent server keeps the first run's data.
        let factory = MemoryFactory::new(2);
        run_all(&factory).await;
        run_all(&factory).await;
    }
}
