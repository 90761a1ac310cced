//! The catalog suite: every scenario is a function over a fresh `Arc<dyn MetaStore>`, so each
//! backend (in-memory, embedded, later a real Oxia) runs all of them through
//! [`catalog_suite!`] with its own factory.

#![allow(dead_code)] // each test binary uses the whole suite, but rustc checks per binary

pub mod hooks;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lakestream_catalog::records::{self, CatalogRecord, LogIdCounterRecord, listing_end};
use lakestream_catalog::{Catalog, CatalogConfig, CatalogError, Growth, NameRule, Stream, kafka_stream_name};
use lakestream_format::{LogId, keys};
use lakestream_meta::lease::{self, LeaseError};
use lakestream_meta::{MetaStore, PutCondition, Record, Session};

use hooks::{audited, fail_puts_after, fence_before_next_fence_read};
use lakestream_meta::hooked::Op;
use lakestream_meta::test_rng::{Seed, TestRng};

/// Instantiates every scenario as a `#[tokio::test]` for a backend. `$factory` is an
/// `async fn() -> (Arc<dyn MetaStore>, impl Drop)`; the second value keeps the backend's
/// resources (a temporary directory) alive for the test.
#[macro_export]
macro_rules! catalog_suite {
    ($factory:path) => {
        $crate::catalog_suite!(@tests $factory;
            log_ids_are_unique_and_never_reused_after_deletion,
            log_ids_are_unique_under_concurrent_creates,
            opening_an_existing_log_changes_nothing,
            layout_records_resolve_log_to_stream_and_partition,
            creating_a_dropped_identity_fails,
            dropping_records_a_tombstone_without_a_live_stream,
            a_new_incarnation_gets_a_new_identity,
            adding_partitions_publishes_only_after_every_new_log_exists,
            interrupted_expansion_is_completed_by_a_retry,
            interrupted_create_is_completed_or_dropped,
            concurrent_expansions_lose_no_partition,
            a_drop_racing_expansions_leaves_every_claimed_log_fenced,
            random_concurrent_operations_keep_the_catalog_invariants,
            deleting_a_log_is_idempotent,
            deleting_a_log_fences_drains_then_purges_index_records,
            an_acquired_lease_blocks_deletion_until_released,
            a_deletion_that_times_out_purges_nothing_and_keeps_the_fence,
            a_fence_before_the_lease_fence_read_makes_the_writer_give_up,
            a_lease_whose_session_ended_counts_as_drained,
            fencing_closing_and_dropping_are_idempotent,
            a_log_of_a_live_stream_cannot_be_deleted_alone,
            names_with_slash_are_refused_by_every_operation,
            listings_page_in_name_order_without_tombstones,
            lookups_report_what_is_missing,
            a_namespace_is_deleted_only_when_it_holds_no_live_stream,
            a_stream_created_during_a_namespace_deletion_never_outlives_it,
            stream_properties_change_by_compare_and_set,
            a_streams_binding_is_fixed_by_its_creation_properties,
            a_lost_compare_and_set_is_retried_after_a_pause_then_reported_as_contention,
        );
    };
    (@tests $factory:path; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let (store, _resources) = $factory().await;
                suite::$name(store).await;
            }
        )*
    };
}

const NS: &str = "ns";

/// Settings with short drains, so that tests about timing out take milliseconds.
pub fn test_config() -> CatalogConfig {
    CatalogConfig {
        drain_timeout: Duration::from_millis(300),
        drain_poll_interval: Duration::from_millis(5),
        ..CatalogConfig::default()
    }
}

async fn catalog_over(store: Arc<dyn MetaStore>, config: CatalogConfig) -> Catalog {
    let catalog = Catalog::new(store, config).unwrap();
    catalog.create_namespace(NS, BTreeMap::new()).await.unwrap();
    catalog
}

async fn create(catalog: &Catalog, name: &str, partitions: u32) -> Stream {
    catalog.create_stream(NS, name, partitions, BTreeMap::new()).await.unwrap()
}

/// Appends `count` index records to `log_id` the way a writer does (A3), and returns their keys.
async fn append_index_records(store: &dyn MetaStore, log_id: LogId, count: usize) -> Vec<String> {
    let mut created = Vec::new();
    for _ in 0..count {
        let written = store
            .sequenced_put(
                &keys::partition(log_id),
                &keys::index_prefix(log_id),
                &[3, 8],
                Bytes::from_static(b"v"),
            )
            .await
            .unwrap();
        created.push(written.key);
    }
    created
}

async fn index_keys(store: &dyn MetaStore, log_id: LogId) -> Vec<String> {
    store.list(&keys::partition(log_id), &keys::first_key(log_id), &keys::last_key(log_id)).await.unwrap()
}

async fn open_session(store: &dyn MetaStore) -> Arc<dyn Session> {
    store.open_session(Duration::from_secs(30)).await.unwrap()
}

async fn counter(store: &dyn MetaStore, config: &CatalogConfig) -> Option<Record> {
    store.get(&config.partition, &records::log_id_counter_key()).await.unwrap()
}

/// Every catalog record and every record of the given logs, with its version: a change of
/// any value or any write shows up as a difference.
async fn snapshot(
    store: &dyn MetaStore,
    config: &CatalogConfig,
    logs: &[LogId],
) -> Vec<(String, i64, Bytes)> {
    let p = &config.partition;
    let mut all = Vec::new();
    let mut add = |records: Vec<Record>| all.extend(records.into_iter().map(|r| (r.key, r.version, r.value)));
    add(counter(store, config).await.into_iter().collect());
    let ns_prefix = records::namespaces_prefix();
    add(store.scan(p, &ns_prefix, &listing_end(&ns_prefix), None).await.unwrap());
    let streams_prefix = records::streams_prefix(NS);
    add(store.scan(p, &streams_prefix, &listing_end(&streams_prefix), None).await.unwrap());
    let logs_prefix = "/lakestream-catalog/logs/";
    add(store.scan(p, logs_prefix, &listing_end(logs_prefix), None).await.unwrap());
    for &log_id in logs {
        let lp = keys::partition(log_id);
        add(store.scan(&lp, &keys::first_key(log_id), &keys::last_key(log_id), None).await.unwrap());
        for key in [keys::fence_key(log_id), keys::trim_marker_key(log_id)] {
            add(store.get(&lp, &key).await.unwrap().into_iter().collect());
        }
    }
    all
}

fn assert_unique(ids: &[LogId]) {
    let unique: HashSet<&LogId> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "a log ID was handed out twice: {ids:?}");
}

// ---- log IDs -------------------------------------------------------------------------

// spec-rule: 64e28bb170 [Catalog] A catalog MUST give every log a log ID that no other log of the deployme…
/// [Catalog] A catalog MUST give every log a log ID that no other log of the deployment has
/// had, and MUST NOT reuse a log ID, even after its log has been deleted.
pub async fn log_ids_are_unique_and_never_reused_after_deletion(store: Arc<dyn MetaStore>) {
    let catalog = catalog_over(store.clone(), test_config()).await;
    let first = create(&catalog, "a", 3).await;
    catalog.drop_stream(NS, "a").await.unwrap();
    for log_id in &first.logs {
        assert!(matches!(catalog.open_log(*log_id).await, Err(CatalogError::LogNotFound { .. })));
    }
    let mut all = first.logs.clone();
    for name in ["b", "c"] {
        all.extend(create(&catalog, name, 2).await.logs);
    }
    all.extend(catalog.add_partitions(NS, "b", Growth::By(2)).await.unwrap().logs[2..].iter().copied());
    assert_eq!(all.len(), 9);
    assert_unique(&all);
    // The counter only grows: it stays above every ID handed out, deleted or not.
    let counter = counter(store.as_ref(), catalog.config()).await.unwrap();
    let next = LogIdCounterRecord::decode(&counter.key, &counter.value).unwrap().next_log_id;
    assert!(all.iter().all(|id| id.0 < next), "counter {next} not above {all:?}");
}

// spec-rule: 64e28bb170 [Catalog] A catalog MUST give every log a log ID that no other log of the deployme…
/// [Catalog] Log IDs are unique across the deployment: many tasks creating and growing many
/// streams at once, through two catalog instances sharing the store, never get the same ID.
pub async fn log_ids_are_unique_under_concurrent_creates(store: Arc<dyn MetaStore>) {
    let (hooks, audit) = audited(store, &test_config().partition);
    audit.interleave();
    let first = catalog_over(hooks.clone(), test_config()).await;
    let second = Catalog::new(hooks.clone(), test_config()).unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..8u32 {
        let catalog = if task % 2 == 0 { first.clone() } else { second.clone() };
        tasks.spawn(async move {
            let mut ids = Vec::new();
            for i in 0..5u32 {
                let name = format!("t{task}-s{i}");
                let stream =
                    catalog.create_stream(NS, &name, 1 + (task + i) % 3, BTreeMap::new()).await.unwrap();
                ids.extend(stream.logs);
            }
            // Grow one stream concurrently with the other tasks' creates.
            let grown = catalog.add_partitions(NS, &format!("t{task}-s0"), Growth::By(2)).await.unwrap();
            ids.extend(grown.logs[grown.logs.len() - 2..].iter().copied());
            ids
        });
    }
    let mut all = Vec::new();
    while let Some(ids) = tasks.join_next().await {
        all.extend(ids.unwrap());
    }
    let expected: u32 = (0..8u32).map(|t| (0..5u32).map(|i| 1 + (t + i) % 3).sum::<u32>() + 2).sum();
    assert_eq!(all.len(), expected as usize);
    assert_unique(&all);
    for log_id in all {
        first.open_log(log_id).await.unwrap();
    }
    assert_eq!(audit.violations(), Vec::<String>::new());
}

// ---- opening logs and layout records -------------------------------------------------

// spec-rule: e1890f8d00 [Catalog] Opening an existing log MUST NOT allocate a log ID, register a stream pa…
/// [Catalog] Opening an existing log MUST NOT allocate a log ID, register a stream
/// partition, grow a stream, or change catalog metadata.
pub async fn opening_an_existing_log_changes_nothing(store: Arc<dyn MetaStore>) {
    let catalog = catalog_over(store.clone(), test_config()).await;
    let stream = create(&catalog, "orders", 3).await;
    append_index_records(store.as_ref(), stream.logs[0], 2).await;
    let before = snapshot(store.as_ref(), catalog.config(), &stream.logs).await;
    for _ in 0..3 {
        for log_id in &stream.logs {
            catalog.open_log(*log_id).await.unwrap();
        }
        // Opening a log that does not exist allocates nothing either.
        let err = catalog.open_log(LogId(1_000_000)).await.unwrap_err();
        assert!(matches!(err, CatalogError::LogNotFound { log_id: LogId(1_000_000) }), "{err}");
    }
    let after = snapshot(store.as_ref(), catalog.config(), &stream.logs).await;
    assert_eq!(before, after);
    assert_eq!(catalog.get_stream(NS, "orders").await.unwrap(), stream);
}

/// A reader or compactor learns, for a log ID, its namespace, stream and partition.
pub async fn layout_records_resolve_log_to_stream_and_partition(store: Arc<dyn MetaStore>) {
    let catalog = catalog_over(store, test_config()).await;
    let orders = create(&catalog, "orders", 3).await;
    let clicks = create(&catalog, "clicks", 1).await;
    for (partition, log_id) in orders.logs.iter().enumerate() {
        let info = catalog.open_log(*log_id).await.unwrap();
        assert_eq!(Some(info.log_ref), orders.log_ref(partition));
        assert_eq!(info.partition as usize, partition);
    }
    let info = catalog.open_log(clicks.logs[0]).await.unwrap();
    assert_eq!(
        (info.log_ref.namespace.as_str(), info.log_ref.stream.as_str(), info.partition),
        (NS, "clicks", 0)
    );
}

// ---- identities and tombstones -------------------------------------------------------

// spec-rule: 0cf73906ed [Catalog] Creating a stream MUST fail when its identity, the pair of namespace and…
/// [Catalog] Creating a stream MUST fail when its identity, the pair of namespace and stream
/// name, has been dropped.
pub async fn creating_a_dropped_identity_fails(store: Arc<dyn MetaStore>) {
    let catalog = catalog_over(store, test_config()).await;
    create(&catalog, "orders", 1).await;
    let err = catalog.create_stream(NS, "orders", 1, BTreeMap::new()).await.unwrap_err();
    assert!(matches!(err, CatalogError::StreamExists { .. }), "{err}");
    catalog.drop_stream(NS, "orders").await.unwrap();
    for _ in 0..2 {
        let err = catalog.create_stream(NS, "orders", 2, BTreeMap::new()).await.unwrap_err();
        assert!(matches!(err, CatalogError::StreamDropped { .. }), "{err}");
        assert_eq!(err.class(), lakestream_format::ErrorClass::Conflict);
    }
    assert!(matches!(catalog.get_stream(NS, "orders").await, Err(CatalogError::StreamDropped { .. })));
    // Another name in the same namespace, and the same name elsewhere, are other identities.
    create(&catalog, "orders2", 1).await;
    catalog.create_namespace("other", BTreeMap::new()).await.unwrap();
    catalog.create_stream("other", "orders", 1, BTreeMap::new()).await.unwrap();
}

// spec-rule: 68657430c6 [Catalog] Dropping a stream MUST record a durable tombstone for its identity, even…
/// [Catalog] Dropping a stream MUST record a durable tombstone for its identity, even when no
/// live stream has that identity.
pub async fn dropping_records_a_tombstone_without_a_live_stream(store: Arc<dyn MetaStore>) {
    let catalog = catalog_over(store.clone(), test_config()).await;
    assert!(!catalog.is_dropped(NS, "never").await.unwrap());
    catalog.drop_stream(NS, "never").await.unwrap();
    assert!(catalog.is_dropped(NS, "never").await.unwrap());
    // The tombstone is a stored record, so a fresh catalog over the same store sees it.
    let fresh = Catalog::new(store, test_config()).unwrap();
    let err = fresh.create_stream(NS, "never", 1, BTreeMap::new()).await.unwrap_err();
    assert!(matches!(err, CatalogError::StreamDropped { .. }), "{err}");
    // It is a tombstone even in a namespace that does not exist (yet).
    fresh.drop_stream("elsewhere", "x").await.unwrap();
    fresh.create_namespace("elsewhere", BTreeMap::new()).await.unwrap();
    let err = fresh.create_stream("elsewhere", "x", 1, BTreeMap::new()).await.unwrap_err();
    assert!(matches!(err, CatalogError::StreamDropped { .. }), "{err}");
}

/// A re-created Kafka topic is a new incarnation with a new identity
/// (`{topic}-topic-id-{id}`), which the old tombstone does not block.
pub async fn a_new_incarnation_gets_a_new_identity(store: Arc<dyn MetaStore>) {
    let catalog = Catalog::new(store, test_config()).unwrap();
    catalog.create_namespace(lakestream_catalog::KAFKA_NAMESPACE, BTreeMap::new()).await.unwrap();
    let ns = lakestream_catalog::KAFKA_NAMESPACE;
    let first = kafka_stream_name("orders", "AAAAAAAAAAAAAAAAAAAAAQ").unwrap();
    let old = catalog.create_stream(ns, &first, 2, BTreeMap::new()).await.unwrap();
    catalog.drop_stream(ns, &first).await.unwrap();
    let second = kafka_stream_name("orders", "AAAAAAAAAAAAAAAAAAAAAg").unwrap();
    let new = catalog.create_stream(ns, &second, 2, BTreeMap::new()).await.unwrap();
    assert!(new.logs.iter().all(|id| !old.logs.contains(id)));
    assert!(catalog.create_stream(ns, &first, 2, BTreeMap::new()).await.is_err());
}

// ---- adding partitions ---------------------------------------------------------------

// spec-rule: 96319b97d6 [Catalog] Adding stream partitions MUST publish the stream's new layout atomically…
/// [Catalog] Adding stream partitions MUST publish the stream's new layout atomically, and
/// only after the log of every new partition exists. The hook store checks, at every
/// stream-record write, that each log of the layout being written has its log record.
pub async fn adding_partitions_publishes_only_after_every_new_log_exists(store: Arc<dyn MetaStore>) {
    let config = test_config();
    let (hooks, audit) = audited(store, &config.partition);
    let catalog = catalog_over(hooks.clone(), config).await;
    let start = create(&catalog, "orders", 2).await;
    let grown = catalog.add_partitions(NS, "orders", Growth::By(3)).await.unwrap();
    assert_eq!(grown.logs.len(), 5);
    assert_eq!(&grown.logs[..2], &start.logs[..], "existing partitions keep their logs");
    assert!(grown.pending_logs.is_empty());
    let same = catalog.add_partitions(NS, "orders", Growth::To(4)).await.unwrap();
    assert_eq!(same, grown, "growing to fewer partitions than it has changes nothing");
    for (partition, log_id) in grown.logs.iter().enumerate() {
        assert_eq!(catalog.open_log(*log_id).await.unwrap().partition as usize, partition);
    }
    assert!(audit.layouts_checked() >= 4);
    assert_eq!(audit.violations(), Vec::<String>::new());
}

/// A crash in the middle of an expansion (here: log-record writes failing after the claim)
/// leaves the published layout intact and the claim pending; a retry completes it with the
/// claimed logs, and never publishes a layout that names a missing log.
pub async fn interrupted_expansion_is_completed_by_a_retry(store: Arc<dyn MetaStore>) {
    let config = test_config();
    let (hooks, audit) = audited(store, &config.partition);
    let catalog = catalog_over(hooks.clone(), config).await;
    let start = create(&catalog, "orders", 1).await;
    let failing = fail_puts_after(&hooks, "/lakestream-catalog/logs/", 1);
    let err = catalog.add_partitions(NS, "orders", Growth::By(3)).await.unwrap_err();
    assert_eq!(err.class(), lakestream_format::ErrorClass::Retryable, "{err}");
    let stuck = catalog.get_stream(NS, "orders").await.unwrap();
    assert_eq!(stuck.logs, start.logs, "the published layout is unchanged");
    assert_eq!(stuck.pending_logs.len(), 3, "the claim survives the crash");
    for pending in &stuck.pending_logs {
        assert!(matches!(catalog.open_log(*pending).await, Err(CatalogError::LogNotFound { .. })));
    }
    failing.remove();
    // Another caller's expansion finishes the interrupted one first, then adds its own.
    let done = catalog.add_partitions(NS, "orders", Growth::By(1)).await.unwrap();
    assert_eq!(done.logs.len(), 5);
    assert_eq!(&done.logs[1..4], &stuck.pending_logs[..], "the claimed logs are the ones published");
    for log_id in &done.logs {
        catalog.open_log(*log_id).await.unwrap();
    }
    assert_eq!(audit.violations(), Vec::<String>::new());
}

/// A create interrupted after its claim: the identity is taken, the retry path publishes
/// the logs, and a drop deletes even logs that were only pending.
pub async fn interrupted_create_is_completed_or_dropped(store: Arc<dyn MetaStore>) {
    let config = test_config();
    let (hooks, audit) = audited(store, &config.partition);
    let catalog = catalog_over(hooks.clone(), config).await;
    let failing = fail_puts_after(&hooks, "/lakestream-catalog/logs/", 0);
    assert!(catalog.create_stream(NS, "a", 2, BTreeMap::new()).await.is_err());
    assert!(catalog.create_stream(NS, "b", 2, BTreeMap::new()).await.is_err());
    failing.remove();
    let a = catalog.get_stream(NS, "a").await.unwrap();
    assert_eq!((a.logs.len(), a.pending_logs.len()), (0, 2));
    let err = catalog.create_stream(NS, "a", 2, BTreeMap::new()).await.unwrap_err();
    assert!(matches!(err, CatalogError::StreamExists { .. }), "{err}");
    let a_done = catalog.complete_pending_expansion(NS, "a").await.unwrap();
    assert_eq!(a_done.logs, a.pending_logs);
    // b is dropped while its logs are still pending: they are fenced all the same.
    let b = catalog.get_stream(NS, "b").await.unwrap();
    catalog.drop_stream(NS, "b").await.unwrap();
    for log_id in &b.pending_logs {
        let store = hooks.inner().as_ref();
        assert!(lease::is_fenced(store, *log_id).await.unwrap());
        let session = open_session(store).await;
        assert!(matches!(
            lease::acquire(store, &session, *log_id, "w").await,
            Err(LeaseError::Fenced { .. })
        ));
    }
    assert_eq!(audit.violations(), Vec::<String>::new());
}

/// Two (and more) concurrent expansions neither lose a partition nor publish a layout that
/// names a missing log: additions add up, and "grow to" takes the largest target.
pub async fn concurrent_expansions_lose_no_partition(store: Arc<dyn MetaStore>) {
    let config = test_config();
    let (hooks, audit) = audited(store, &config.partition);
    audit.interleave();
    let catalog = catalog_over(hooks.clone(), config).await;
    let start = create(&catalog, "orders", 1).await;
    let mut tasks = tokio::task::JoinSet::new();
    for add in [2u32, 3, 1, 4] {
        let catalog = catalog.clone();
        tasks.spawn(async move { catalog.add_partitions(NS, "orders", Growth::By(add)).await.unwrap() });
    }
    while let Some(result) = tasks.join_next().await {
        result.unwrap();
    }
    let after_by = catalog.get_stream(NS, "orders").await.unwrap();
    assert_eq!(after_by.logs.len(), 1 + 2 + 3 + 1 + 4);
    assert_eq!(after_by.logs[0], start.logs[0]);
    for target in [12u32, 15, 13] {
        let catalog = catalog.clone();
        tasks.spawn(async move { catalog.add_partitions(NS, "orders", Growth::To(target)).await.unwrap() });
    }
    while let Some(result) = tasks.join_next().await {
        result.unwrap();
    }
    let after_to = catalog.get_stream(NS, "orders").await.unwrap();
    assert_eq!(after_to.logs.len(), 15);
    assert_eq!(&after_to.logs[..11], &after_by.logs[..]);
    assert_unique(&after_to.logs);
    for (partition, log_id) in after_to.logs.iter().enumerate() {
        assert_eq!(catalog.open_log(*log_id).await.unwrap().partition as usize, partition);
    }
    assert_eq!(audit.violations(), Vec::<String>::new());
}

/// A drop racing expansions: whichever wins each compare-and-set, every log the identity
/// ever claimed ends fenced with no index records, the identity is a tombstone, and no
/// layout ever named a missing log.
pub async fn a_drop_racing_expansions_leaves_every_claimed_log_fenced(store: Arc<dyn MetaStore>) {
    let config = test_config();
    let (hooks, audit) = audited(store, &config.partition);
    audit.interleave();
    let catalog = catalog_over(hooks.clone(), config).await;
    let start = create(&catalog, "orders", 1).await;
    let mut tasks = tokio::task::JoinSet::new();
    for add in [2u32, 1] {
        let catalog = catalog.clone();
        tasks.spawn(async move {
            match catalog.add_partitions(NS, "orders", Growth::By(add)).await {
                Ok(_) | Err(CatalogError::StreamDropped { .. }) => {}
                Err(other) => panic!("expansion failed with {other}"),
            }
        });
    }
    let dropper = catalog.clone();
    tasks.spawn(async move { dropper.drop_stream(NS, "orders").await.unwrap() });
    while let Some(result) = tasks.join_next().await {
        result.unwrap();
    }
    assert!(catalog.is_dropped(NS, "orders").await.unwrap());
    let key = records::stream_key(NS, "orders");
    let tombstone = hooks.inner().get(&catalog.config().partition, &key).await.unwrap().unwrap();
    let tombstone = records::StreamRecord::decode(&key, &tombstone.value).unwrap();
    assert_eq!(tombstone.state, records::StreamState::Dropped);
    let claimed: Vec<LogId> = tombstone.all_logs().collect();
    assert!(claimed.contains(&start.logs[0]));
    for log_id in claimed {
        assert!(lease::is_fenced(hooks.as_ref(), log_id).await.unwrap(), "log {log_id} not fenced");
        assert!(matches!(catalog.open_log(log_id).await, Err(CatalogError::LogNotFound { .. })));
    }
    assert_eq!(audit.violations(), Vec::<String>::new());
}

/// Random operations from several tasks at once (each task's sequence fixed by the run's
/// seed, printed; `LAKESTREAM_TEST_SEED` replays it), then the invariants: IDs unique across every identity ever created;
/// each live stream's layout fully registered, nothing left pending, every log opening to
/// its partition; every tombstone `dropped`, with all of its logs fenced and purged; and no
/// live layout ever written that named a missing log.
pub async fn random_concurrent_operations_keep_the_catalog_invariants(store: Arc<dyn MetaStore>) {
    let config = test_config();
    let (hooks, audit) = audited(store, &config.partition);
    audit.interleave();
    let catalog = catalog_over(hooks.clone(), config).await;
    let names: Vec<String> = (0..6).map(|i| format!("s{i}")).collect();
    let mut tasks = tokio::task::JoinSet::new();
    let run = Seed::or("random_concurrent_operations_keep_the_catalog_invariants", 0);
    for task in 1..=4u64 {
        let seed = run.value().wrapping_add(task);
        let (catalog, names, store) = (catalog.clone(), names.clone(), hooks.clone());
        tasks.spawn(async move {
            let choose = TestRng::new(seed);
            for step in 0..25 {
                let name = &names[choose.below(names.len() as u64) as usize];
                let result = match choose.below(10) {
                    0..=2 => catalog
                        .create_stream(NS, name, 1 + choose.below(3) as u32, BTreeMap::new())
                        .await
                        .map(drop),
                    3..=4 => catalog
                        .add_partitions(NS, name, Growth::By(1 + choose.below(2) as u32))
                        .await
                        .map(drop),
                    5 => catalog
                        .add_partitions(NS, name, Growth::To(1 + choose.below(6) as u32))
                        .await
                        .map(drop),
                    6 => catalog.drop_stream(NS, name).await,
                    7 => match catalog.get_stream(NS, name).await {
                        Ok(stream) if !stream.logs.is_empty() => {
                            append_index_records(store.as_ref(), stream.logs[0], 1).await;
                            Ok(())
                        }
                        other => other.map(drop),
                    },
                    8 => match catalog.get_stream(NS, name).await {
                        Ok(stream) => {
                            for log_id in stream.logs {
                                match catalog.open_log(log_id).await {
                                    Ok(_) | Err(CatalogError::LogNotFound { .. }) => {}
                                    Err(other) => panic!("seed {seed} step {step}: open_log: {other}"),
                                }
                            }
                            Ok(())
                        }
                        Err(e) => Err(e),
                    },
                    _ => catalog.list_streams(NS, None, 2).await.map(drop),
                };
                match result {
                    Ok(())
                    | Err(
                        CatalogError::StreamExists { .. }
                        | CatalogError::StreamDropped { .. }
                        | CatalogError::StreamNotFound { .. },
                    ) => {}
                    Err(other) => panic!("seed {seed} step {step}: unexpected {other}"),
                }
            }
        });
    }
    while let Some(result) = tasks.join_next().await {
        result.unwrap();
    }
    let mut seen = Vec::new();
    let mut dropped = 0;
    for name in &names {
        let key = records::stream_key(NS, name);
        let Some(found) = hooks.inner().get(&catalog.config().partition, &key).await.unwrap() else {
            continue;
        };
        let record = records::StreamRecord::decode(&key, &found.value).unwrap();
        seen.extend(record.all_logs());
        match record.state {
            records::StreamState::Active => {
                assert_eq!(record.pending_expansion, None, "{name}: an expansion was left pending");
                for (partition, &id) in record.layout.iter().enumerate() {
                    assert_eq!(catalog.open_log(LogId(id)).await.unwrap().partition as usize, partition);
                }
            }
            records::StreamState::Dropping => panic!("{name}: a drop without leases stopped half way"),
            records::StreamState::Dropped => {
                dropped += 1;
                for log_id in record.all_logs() {
                    assert!(
                        lease::is_fenced(hooks.as_ref(), log_id).await.unwrap(),
                        "{name}: {log_id} not fenced"
                    );
                    assert!(
                        index_keys(hooks.as_ref(), log_id).await.is_empty(),
                        "{name}: {log_id} not purged"
                    );
                }
            }
        }
    }
    assert!(!seen.is_empty() && dropped > 0, "the operations created {seen:?} and dropped {dropped}");
    assert_unique(&seen);
    assert_eq!(audit.violations(), Vec::<String>::new());
}

// ---- deleting logs, fences and leases ------------------------------------------------

// spec-rule: 4cd58907db [Catalog] Deleting a log MUST be idempotent: deleting a log that is already absent…
/// [Catalog] Deleting a log MUST be idempotent: deleting a log that is already absent
/// succeeds.
pub async fn deleting_a_log_is_idempotent(store: Arc<dyn MetaStore>) {
    let catalog = catalog_over(store.clone(), test_config()).await;
    catalog.delete_log(LogId(424_242)).await.unwrap();
    catalog.delete_log(LogId(424_242)).await.unwrap();
    // A log the catalog never registered is not fenced: its ID might be a claimed partition.
    assert!(!lease::is_fenced(store.as_ref(), LogId(424_242)).await.unwrap());
    // A log whose stream's drop stopped at a lease: deleting it directly, twice.
    let log_id = create(&catalog, "orders", 1).await.logs[0];
    append_index_records(store.as_ref(), log_id, 3).await;
    let session = open_session(store.as_ref()).await;
    let held = lease::acquire(store.as_ref(), &session, log_id, "writer-1").await.unwrap();
    assert!(matches!(catalog.drop_stream(NS, "orders").await, Err(CatalogError::LeasesRemain { .. })));
    held.release(store.as_ref()).await.unwrap();
    catalog.delete_log(log_id).await.unwrap();
    assert!(index_keys(store.as_ref(), log_id).await.is_empty());
    assert!(lease::is_fenced(store.as_ref(), log_id).await.unwrap());
    catalog.delete_log(log_id).await.unwrap();
    // The interrupted drop, run again, deletes the already deleted log once more and finishes.
    catalog.drop_stream(NS, "orders").await.unwrap();
    assert!(index_keys(store.as_ref(), log_id).await.is_empty());
}

// spec-rule: 3c1c561618 [All] An implementation MUST NOT delete or change a write fence.
// spec-rule: ae487782d5 [Catalog] To delete log L, a catalog MUST fence L; then list the lease records of…
/// [Catalog] To fence log L, a catalog MUST create the write fence with CreateIfAbsent;
/// [Catalog] to delete L it MUST fence L, list the lease records until none remains, and only
/// then delete every index record with DeleteRange(P(L), K(L,0,0), K(L,MAX,MAX)).
/// Records of other logs, and the fence, stay; the log's idempotent-producer states go.
pub async fn deleting_a_log_fences_drains_then_purges_index_records(store: Arc<dyn MetaStore>) {
    let catalog = catalog_over(store.clone(), test_config()).await;
    let doomed = create(&catalog, "doomed", 1).await.logs[0];
    let kept = create(&catalog, "kept", 1).await.logs[0];
    append_index_records(store.as_ref(), doomed, 4).await;
    let kept_keys = append_index_records(store.as_ref(), kept, 2).await;
    // Idempotent producers' states go with their log, and only with it.
    for (log, producer) in [(doomed, "p1"), (doomed, "p2"), (kept, "p1")] {
        let key = keys::producer_state_key(log, producer);
        store.put(&keys::partition(log), &key, Bytes::from_static(b"{}"), PutCondition::None).await.unwrap();
    }
    let session = open_session(store.as_ref()).await;
    let kept_lease = lease::acquire(store.as_ref(), &session, kept, "writer-1").await.unwrap();
    catalog.drop_stream(NS, "doomed").await.unwrap();
    assert!(index_keys(store.as_ref(), doomed).await.is_empty());
    let fence = store.get(&keys::partition(doomed), &keys::fence_key(doomed)).await.unwrap().unwrap();
    assert_eq!(&fence.value[..], keys::FENCE_VALUE, "the fence is 0x01 and stays after deletion");
    assert_eq!(index_keys(store.as_ref(), kept).await, kept_keys);
    let producers = |log: LogId| {
        let store = store.clone();
        async move {
            let (start, end) = keys::producer_state_range(log);
            store.list(&keys::partition(log), &start, &end).await.unwrap()
        }
    };
    assert!(producers(doomed).await.is_empty(), "the dropped log's producer states are purged");
    assert_eq!(producers(kept).await, [keys::producer_state_key(kept, "p1")]);
    assert!(!lease::is_fenced(store.as_ref(), kept).await.unwrap());
    kept_lease.release(store.as_ref()).await.unwrap();
    // A fenced log grants no new lease.
    assert!(matches!(
        lease::acquire(store.as_ref(), &session, doomed, "late").await,
        Err(LeaseError::Fenced { .. })
    ));
    assert!(lease::list_leases(store.as_ref(), doomed).await.unwrap().is_empty());
}

// spec-rule: ae487782d5 [Catalog] To delete log L, a catalog MUST fence L; then list the lease records of…
/// An acquired lease blocks deletion: the catalog keeps polling while the lease record
/// exists and purges nothing; once the lease is released, deletion resumes and completes.
pub async fn an_acquired_lease_blocks_deletion_until_released(store: Arc<dyn MetaStore>) {
    let config = CatalogConfig { drain_timeout: Duration::from_secs(20), ..test_config() };
    let catalog = catalog_over(store.clone(), config).await;
    let log_id = create(&catalog, "orders", 1).await.logs[0];
    let records = append_index_records(store.as_ref(), log_id, 3).await;
    let session = open_session(store.as_ref()).await;
    let held = lease::acquire(store.as_ref(), &session, log_id, "writer-1").await.unwrap();
    let dropping = tokio::spawn({
        let catalog = catalog.clone();
        async move { catalog.drop_stream(NS, "orders").await }
    });
    // Wait until the fence is in place, then a while longer: deletion must still be waiting.
    while !lease::is_fenced(store.as_ref(), log_id).await.unwrap() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(!dropping.is_finished(), "deletion went ahead while a lease record existed");
    assert_eq!(index_keys(store.as_ref(), log_id).await, records);
    // The writer may still publish under the lease it acquired before the fence.
    append_index_records(store.as_ref(), log_id, 1).await;
    held.release(store.as_ref()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), dropping).await.unwrap().unwrap().unwrap();
    assert!(index_keys(store.as_ref(), log_id).await.is_empty());
    assert!(catalog.is_dropped(NS, "orders").await.unwrap());
}

// spec-rule: 3c1c561618 [All] An implementation MUST NOT delete or change a write fence.
// spec-rule: 4bbadf9fa8 [Catalog] If lease records remain when the catalog stops waiting for them, it MUST…
/// [Catalog] If lease records remain when the catalog stops waiting for them, it MUST leave
/// the log's records and objects unchanged, and MUST leave the fence in place. A later
/// attempt, once the lease is gone, completes the deletion.
pub async fn a_deletion_that_times_out_purges_nothing_and_keeps_the_fence(store: Arc<dyn MetaStore>) {
    let catalog = catalog_over(store.clone(), test_config()).await;
    let stream = create(&catalog, "orders", 1).await;
    let log_id = stream.logs[0];
    append_index_records(store.as_ref(), log_id, 3).await;
    let trim = store
        .put(
            &keys::partition(log_id),
            &keys::trim_marker_key(log_id),
            Bytes::from_static(b"3"),
            lakestream_meta::PutCondition::IfAbsent,
        )
        .await
        .unwrap();
    let session = open_session(store.as_ref()).await;
    let held = lease::acquire(store.as_ref(), &session, log_id, "writer-1").await.unwrap();
    let logs_before = snapshot(store.as_ref(), catalog.config(), &[]).await;
    let index_before = index_keys(store.as_ref(), log_id).await;

    let err = catalog.drop_stream(NS, "orders").await.unwrap_err();
    match &err {
        CatalogError::LeasesRemain { log_id: l, remaining, .. } => {
            assert_eq!(*l, log_id);
            assert_eq!(remaining, &vec![keys::lease_key(log_id, "writer-1")]);
        }
        other => panic!("expected LeasesRemain, got {other}"),
    }
    assert_eq!(err.class(), lakestream_format::ErrorClass::Conflict);
    assert!(err.to_string().contains("nothing was deleted"), "{err}");
    assert_eq!(index_keys(store.as_ref(), log_id).await, index_before, "no index record was purged");
    let trim_after =
        store.get(&keys::partition(log_id), &keys::trim_marker_key(log_id)).await.unwrap().unwrap();
    assert_eq!(trim_after.version, trim.version, "the trim marker is unchanged");
    assert!(lease::is_fenced(store.as_ref(), log_id).await.unwrap(), "the fence stays");
    // The log record and the other catalog records are untouched; only the identity turned
    // into a tombstone (it was dropped before its logs).
    let logs_after = snapshot(store.as_ref(), catalog.config(), &[]).await;
    let changed: Vec<&String> =
        logs_after.iter().zip(&logs_before).filter(|(a, b)| a != b).map(|(a, _)| &a.0).collect();
    assert_eq!(changed, vec![&records::stream_key(NS, "orders")]);
    assert!(catalog.is_dropped(NS, "orders").await.unwrap());

    held.release(store.as_ref()).await.unwrap();
    catalog.drop_stream(NS, "orders").await.unwrap();
    assert!(index_keys(store.as_ref(), log_id).await.is_empty());
}

// spec-rule: 915c1bb508 [Writer, Compactor] To acquire a write lease on log L, an implementation MUST, in…
/// The race of the spec: the catalog's fence lands after the writer created its lease record
/// but before the writer's fence read. The writer reads the fence, gives up, and removes its
/// lease record, so the deletion finds no lease and completes.
pub async fn a_fence_before_the_lease_fence_read_makes_the_writer_give_up(store: Arc<dyn MetaStore>) {
    let config = test_config();
    let (hooks, _audit) = audited(store, &config.partition);
    let catalog = catalog_over(hooks.clone(), config).await;
    let log_id = create(&catalog, "orders", 1).await.logs[0];
    append_index_records(hooks.as_ref(), log_id, 2).await;
    let session = open_session(hooks.as_ref()).await;
    fence_before_next_fence_read(&hooks, log_id);
    let err = lease::acquire(hooks.as_ref(), &session, log_id, "writer-1").await.unwrap_err();
    assert!(matches!(err, LeaseError::Fenced { log_id: l } if l == log_id), "{err}");
    assert!(
        lease::list_leases(hooks.as_ref(), log_id).await.unwrap().is_empty(),
        "the writer removed its lease record"
    );
    // The drain finds nothing to wait for (a remaining lease would time out after 300 ms).
    catalog.drop_stream(NS, "orders").await.unwrap();
    assert!(index_keys(hooks.as_ref(), log_id).await.is_empty());
}

// spec-rule: ae487782d5 [Catalog] To delete log L, a catalog MUST fence L; then list the lease records of…
/// A lease record removed because its session ended counts as drained (spec: "The catalog
/// counts a lease as drained once its lease record is gone").
pub async fn a_lease_whose_session_ended_counts_as_drained(store: Arc<dyn MetaStore>) {
    let config = CatalogConfig { drain_timeout: Duration::from_secs(20), ..test_config() };
    let catalog = catalog_over(store.clone(), config).await;
    let log_id = create(&catalog, "orders", 1).await.logs[0];
    let session = open_session(store.as_ref()).await;
    let held = lease::acquire(store.as_ref(), &session, log_id, "writer-1").await.unwrap();
    let mut ended = held.session_ended();
    let dropping = tokio::spawn({
        let catalog = catalog.clone();
        async move { catalog.drop_stream(NS, "orders").await }
    });
    while !lease::is_fenced(store.as_ref(), log_id).await.unwrap() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    session.close().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), ended.wait_for(|e| *e)).await.unwrap().unwrap();
    tokio::time::timeout(Duration::from_secs(10), dropping).await.unwrap().unwrap().unwrap();
    assert!(catalog.is_dropped(NS, "orders").await.unwrap());
}

// spec-rule: 9980fb4670 [Catalog] To fence log L, a catalog MUST create the write fence of L with CreateIf…
/// Fencing, closing sessions, dropping and deleting can all be repeated.
pub async fn fencing_closing_and_dropping_are_idempotent(store: Arc<dyn MetaStore>) {
    let catalog = catalog_over(store.clone(), test_config()).await;
    let log_id = create(&catalog, "orders", 1).await.logs[0];
    // [Catalog] A fence that already exists counts as success.
    lease::fence(store.as_ref(), log_id).await.unwrap();
    lease::fence(store.as_ref(), log_id).await.unwrap();
    let session = open_session(store.as_ref()).await;
    session.close().await.unwrap();
    session.close().await.unwrap();
    catalog.drop_stream(NS, "orders").await.unwrap();
    catalog.drop_stream(NS, "orders").await.unwrap();
    catalog.delete_log(log_id).await.unwrap();
    assert!(catalog.is_dropped(NS, "orders").await.unwrap());
}

/// Deleting one log of a live stream alone would leave a layout naming a deleted log.
pub async fn a_log_of_a_live_stream_cannot_be_deleted_alone(store: Arc<dyn MetaStore>) {
    let catalog = catalog_over(store.clone(), test_config()).await;
    let stream = create(&catalog, "orders", 2).await;
    let err = catalog.delete_log(stream.logs[1]).await.unwrap_err();
    assert!(matches!(err, CatalogError::LogInUse { .. }), "{err}");
    assert!(
        !lease::is_fenced(store.as_ref(), stream.logs[1]).await.unwrap(),
        "a refused deletion fences nothing"
    );
    catalog.open_log(stream.logs[1]).await.unwrap();
}

// ---- names and listings --------------------------------------------------------------

// spec-rule: 135b20f22a [Catalog] In format version 3, a stream namespace MUST NOT contain /.
// spec-rule: 20275f9337 [Catalog] In format version 3, a stream name MUST NOT contain /.
/// [Catalog] In format version 3, a stream namespace MUST NOT contain /, and a stream name
/// MUST NOT contain /: every operation that takes a name refuses one.
pub async fn names_with_slash_are_refused_by_every_operation(store: Arc<dyn MetaStore>) {
    let catalog = catalog_over(store.clone(), test_config()).await;
    let is_slash = |r: Result<(), CatalogError>| {
        matches!(r, Err(CatalogError::InvalidName { rule: NameRule::ContainsSlash { .. }, .. }))
    };
    let none = BTreeMap::new;
    assert!(is_slash(catalog.create_namespace("a/b", none()).await.map(drop)));
    assert!(is_slash(catalog.create_stream("a/b", "s", 1, none()).await.map(drop)));
    assert!(is_slash(catalog.create_stream(NS, "s/t", 1, none()).await.map(drop)));
    assert!(is_slash(catalog.get_stream(NS, "s/t").await.map(drop)));
    assert!(is_slash(catalog.add_partitions(NS, "s/t", Growth::By(1)).await.map(drop)));
    assert!(is_slash(catalog.drop_stream(NS, "s/t").await));
    assert!(is_slash(catalog.list_streams("a/b", None, 10).await.map(drop)));
    let err = catalog.create_stream(NS, "", 1, none()).await.unwrap_err();
    assert!(matches!(err, CatalogError::InvalidName { rule: NameRule::Empty, .. }), "{err}");
    let err = catalog.create_stream(NS, "s", 0, none()).await.unwrap_err();
    assert!(matches!(err, CatalogError::InvalidArgument(_)), "{err}");
    // Nothing was written for the refused names (not even a log-ID allocation).
    assert!(counter(store.as_ref(), catalog.config()).await.is_none());
    assert!(catalog.list_streams(NS, None, 10).await.unwrap().items.is_empty());
}

/// Listings page through names in order, and leave out tombstones.
pub async fn listings_page_in_name_order_without_tombstones(store: Arc<dyn MetaStore>) {
    let catalog = catalog_over(store, test_config()).await;
    for name in ["e", "b", "dropped", "a", "d", "c", "\u{1F600}emoji"] {
        create(&catalog, name, 1).await;
    }
    catalog.drop_stream(NS, "dropped").await.unwrap();
    catalog.drop_stream(NS, "ba-never-created").await.unwrap();
    let mut names = Vec::new();
    let mut pages = 0;
    let mut token: Option<String> = None;
    loop {
        let page = catalog.list_streams(NS, token.as_deref(), 2).await.unwrap();
        assert!(page.items.len() <= 2);
        pages += 1;
        names.extend(page.items.into_iter().map(|s| s.name));
        match page.next_page {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    assert_eq!(names, ["a", "b", "c", "d", "e", "\u{1F600}emoji"]);
    assert_eq!(pages, 3);
    let all = catalog.list_streams(NS, None, 100).await.unwrap();
    assert_eq!((all.items.len(), all.next_page), (6, None));
    for ns in ["n3", "n1", "n2"] {
        catalog.create_namespace(ns, BTreeMap::new()).await.unwrap();
    }
    let first = catalog.list_namespaces(None, 2).await.unwrap();
    let first_names: Vec<&str> = first.items.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(first_names, ["n1", "n2"]);
    let rest = catalog.list_namespaces(first.next_page.as_deref(), 2).await.unwrap();
    let rest_names: Vec<&str> = rest.items.iter().map(|n| n.name.as_str()).collect();
    assert_eq!((rest_names, rest.next_page), (vec!["n3", NS], None));
    assert!(matches!(catalog.list_streams(NS, None, 0).await, Err(CatalogError::InvalidArgument(_))));
}

/// Missing things are reported as what they are.
pub async fn lookups_report_what_is_missing(store: Arc<dyn MetaStore>) {
    let catalog = catalog_over(store, test_config()).await;
    let err = catalog.create_stream("nope", "s", 1, BTreeMap::new()).await.unwrap_err();
    assert!(matches!(err, CatalogError::NamespaceNotFound { .. }), "{err}");
    let err = catalog.get_stream(NS, "nope").await.unwrap_err();
    assert!(matches!(err, CatalogError::StreamNotFound { .. }), "{err}");
    assert_eq!(err.class(), lakestream_format::ErrorClass::NotFound);
    let err = catalog.add_partitions(NS, "nope", Growth::By(1)).await.unwrap_err();
    assert!(matches!(err, CatalogError::StreamNotFound { .. }), "{err}");
    let err = catalog.create_namespace(NS, BTreeMap::new()).await.unwrap_err();
    assert!(matches!(err, CatalogError::NamespaceExists { .. }), "{err}");
    let props = BTreeMap::from([("retention".to_owned(), "7d".to_owned())]);
    let created = catalog.create_stream(NS, "s", 1, props.clone()).await.unwrap();
    assert_eq!(catalog.get_stream(NS, "s").await.unwrap().properties, props);
    assert_eq!(created.properties, props);
}

pub async fn a_namespace_is_deleted_only_when_it_holds_no_live_stream(store: Arc<dyn MetaStore>) {
    let catalog = catalog_over(store, test_config()).await;
    catalog.create_namespace("team", BTreeMap::new()).await.unwrap();
    catalog.create_stream("team", "a", 1, BTreeMap::new()).await.unwrap();
    let err = catalog.delete_namespace("team").await.unwrap_err();
    assert!(matches!(err, CatalogError::NamespaceNotEmpty { streams: 1, .. }), "{err}");
    assert_eq!(err.class(), lakestream_format::ErrorClass::Conflict);
    // The refused deletion changed nothing: streams can still be created there.
    catalog.create_stream("team", "b", 1, BTreeMap::new()).await.unwrap();
    catalog.drop_stream("team", "a").await.unwrap();
    catalog.drop_stream("team", "b").await.unwrap();
    catalog.delete_namespace("team").await.unwrap();
    let err = catalog.get_namespace("team").await.unwrap_err();
    assert!(matches!(err, CatalogError::NamespaceNotFound { .. }), "{err}");
    let err = catalog.delete_namespace("team").await.unwrap_err();
    assert!(matches!(err, CatalogError::NamespaceNotFound { .. }), "{err}");
    let err = catalog.create_stream("team", "c", 1, BTreeMap::new()).await.unwrap_err();
    assert!(matches!(err, CatalogError::NamespaceNotFound { .. }), "{err}");
    // Created again, the namespace keeps its dropped identities dropped (spec: creating a
    // stream MUST fail when its identity has been dropped).
    catalog.create_namespace("team", BTreeMap::new()).await.unwrap();
    let err = catalog.create_stream("team", "a", 1, BTreeMap::new()).await.unwrap_err();
    assert!(matches!(err, CatalogError::StreamDropped { .. }), "{err}");
    catalog.create_stream("team", "d", 1, BTreeMap::new()).await.unwrap();
}

pub async fn a_stream_created_during_a_namespace_deletion_never_outlives_it(store: Arc<dyn MetaStore>) {
    let catalog = catalog_over(store.clone(), test_config()).await;
    for round in 0..8 {
        let ns = format!("race{round}");
        catalog.create_namespace(&ns, BTreeMap::new()).await.unwrap();
        let creators: Vec<_> = (0..3)
            .map(|i| {
                let (catalog, ns) = (catalog.clone(), ns.clone());
                tokio::spawn(
                    async move { catalog.create_stream(&ns, &format!("s{i}"), 1, BTreeMap::new()).await },
                )
            })
            .collect();
        let deleter = {
            let (catalog, ns) = (catalog.clone(), ns.clone());
            tokio::spawn(async move { catalog.delete_namespace(&ns).await })
        };
        let deleted = deleter.await.unwrap();
        let created: Vec<_> = futures_join(creators).await;
        let live = catalog.list_streams(&ns, None, 100).await.unwrap().items.len();
        match deleted {
            // Deleted: no stream of it may be live, whatever the creators answered.
            Ok(()) => {
                assert!(catalog.get_namespace(&ns).await.is_err());
                assert_eq!(live, 0, "round {round}: a live stream outlived its namespace");
                assert!(
                    created.iter().all(|c| c.is_err()),
                    "round {round}: a creation succeeded in a deleted namespace"
                );
            }
            Err(CatalogError::NamespaceNotEmpty { .. }) => {
                assert!(catalog.get_namespace(&ns).await.is_ok());
                assert_eq!(live, created.iter().filter(|c| c.is_ok()).count(), "round {round}");
            }
            Err(other) => panic!("round {round}: {other}"),
        }
    }
}

async fn futures_join<T>(handles: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

pub async fn stream_properties_change_by_compare_and_set(store: Arc<dyn MetaStore>) {
    let catalog = catalog_over(store, test_config()).await;
    let initial = BTreeMap::from([("a".to_owned(), "1".to_owned()), ("b".to_owned(), "2".to_owned())]);
    catalog.create_stream(NS, "p", 1, initial).await.unwrap();
    let changes = BTreeMap::from([("a".to_owned(), Some("10".to_owned())), ("b".to_owned(), None)]);
    let updated = catalog.update_stream_properties(NS, "p", &changes).await.unwrap();
    assert_eq!(updated.properties, BTreeMap::from([("a".to_owned(), "10".to_owned())]));
    assert_eq!(catalog.get_stream(NS, "p").await.unwrap().properties, updated.properties);
    // Concurrent updates of different keys all land.
    let tasks: Vec<_> = (0..6)
        .map(|i| {
            let catalog = catalog.clone();
            tokio::spawn(async move {
                let change = BTreeMap::from([(format!("k{i}"), Some(i.to_string()))]);
                catalog.update_stream_properties(NS, "p", &change).await
            })
        })
        .collect();
    for r in futures_join(tasks).await {
        r.unwrap();
    }
    let props = catalog.get_stream(NS, "p").await.unwrap().properties;
    assert_eq!(props.len(), 7, "{props:?}");
    let err = catalog.update_stream_properties(NS, "missing", &changes).await.unwrap_err();
    assert!(matches!(err, CatalogError::StreamNotFound { .. }), "{err}");
    catalog.drop_stream(NS, "p").await.unwrap();
    let err = catalog.update_stream_properties(NS, "p", &changes).await.unwrap_err();
    assert!(matches!(err, CatalogError::StreamDropped { .. }), "{err}");
}

/// A stream's binding (docs/format.md): Kafka for a stream created with the Kafka binding's
/// properties (Appendix A), native for every other; the properties deciding it cannot change
/// afterwards, so a stream's entries and its compacted files never follow different bindings.
pub async fn a_streams_binding_is_fixed_by_its_creation_properties(store: Arc<dyn MetaStore>) {
    use lakestream_format::{kafka, native};
    let catalog = catalog_over(store, test_config()).await;
    let plain = catalog.create_stream(NS, "plain", 1, BTreeMap::new()).await.unwrap();
    assert_eq!(plain.binding(), native::NATIVE_BINDING);
    let topic = catalog.create_stream(NS, "topic", 1, kafka::topic_stream_properties("t")).await.unwrap();
    assert_eq!(topic.binding(), kafka::KAFKA_BINDING);
    assert_eq!(catalog.get_stream(NS, "topic").await.unwrap().binding(), kafka::KAFKA_BINDING);
    for (stream, key, value) in [
        ("plain", kafka::TOPIC_NAME_PROPERTY, Some("t")),
        ("plain", kafka::LEGACY_TOPIC_PROPERTY, Some("t")),
        ("topic", kafka::TOPIC_NAME_PROPERTY, None),
        ("topic", kafka::TOPIC_NAME_PROPERTY, Some("other")),
    ] {
        let change = BTreeMap::from([(key.to_owned(), value.map(str::to_owned))]);
        let err = catalog.update_stream_properties(NS, stream, &change).await.unwrap_err();
        assert!(matches!(err, CatalogError::InvalidArgument(_)), "{stream} {key}: {err}");
        assert!(err.to_string().contains(key), "{err}");
    }
    assert_eq!(catalog.get_stream(NS, "plain").await.unwrap().binding(), native::NATIVE_BINDING);
    assert_eq!(catalog.get_stream(NS, "topic").await.unwrap().binding(), kafka::KAFKA_BINDING);
    // Other properties still change, and setting a binding property to its value is no change.
    let same = BTreeMap::from([
        (kafka::TOPIC_NAME_PROPERTY.to_owned(), Some("t".to_owned())),
        ("owner".to_owned(), Some("me".to_owned())),
    ]);
    let updated = catalog.update_stream_properties(NS, "topic", &same).await.unwrap();
    assert_eq!(updated.properties.get("owner").map(String::as_str), Some("me"));
    assert_eq!(updated.binding(), kafka::KAFKA_BINDING);
}

/// Every compare-and-set of the catalog retries a lost race after a growing, jittered pause
/// (the shared backoff policy), and reports a race it keeps losing as `Contended` — the class
/// of a lost race everywhere, not a transient failure.
pub async fn a_lost_compare_and_set_is_retried_after_a_pause_then_reported_as_contention(
    store: Arc<dyn MetaStore>,
) {
    use lakestream_format::retry::{Backoff, BackoffPolicy, Jitter};
    const SEED: u64 = 31;
    let config = CatalogConfig { max_cas_attempts: 8, ..test_config() };
    let (hooks, _audit) = audited(store, &config.partition);
    let catalog = Catalog::with_jitter(hooks.clone(), config, Arc::new(Jitter::seeded(SEED))).unwrap();
    catalog.create_namespace(NS, BTreeMap::new()).await.unwrap();
    create(&catalog, "orders", 1).await;
    let stream_prefix = records::stream_key(NS, "orders");
    let change = BTreeMap::from([("retention".to_owned(), Some("1d".to_owned()))]);

    // Six lost races, then a win: the change is made once, after six pauses.
    let race = hooks.on(Op::Put).key_prefix(&stream_prefix).times(6).lose_race();
    let started = std::time::Instant::now();
    let changed = catalog.update_stream_properties(NS, "orders", &change).await.unwrap();
    assert_eq!(changed.properties.get("retention").map(String::as_str), Some("1d"));
    let times = race.fired_at();
    assert_eq!(times.len(), 6, "six conditional puts lost");
    // The pauses are the seeded backoff's draws for retries 0..5 (sleeps last at least that).
    let replay = Backoff::new(BackoffPolicy::compare_and_set(8), Arc::new(Jitter::seeded(SEED)));
    let expected: Vec<Duration> = (0..6).map(|retry| replay.delay(retry)).collect();
    let paused: Duration = expected.iter().sum();
    assert!(paused >= Duration::from_millis(5), "the seed draws real pauses: {expected:?}");
    for (retry, (pair, want)) in times.windows(2).zip(&expected).enumerate() {
        assert!(pair[1] - pair[0] >= *want, "retry {retry}: {:?} < {want:?}", pair[1] - pair[0]);
    }
    assert!(started.elapsed() >= paused);

    // A race lost on every attempt: bounded by max_cas_attempts, reported as contention,
    // and nothing of the change written.
    race.remove();
    let race = hooks.on(Op::Put).key_prefix(&stream_prefix).lose_race();
    let undo = BTreeMap::from([("retention".to_owned(), None)]);
    let err = catalog.update_stream_properties(NS, "orders", &undo).await.unwrap_err();
    assert!(matches!(&err, CatalogError::Contended { attempts: 8, .. }), "{err}");
    assert_eq!(err.class(), lakestream_format::ErrorClass::Contended);
    race.remove();
    let stream = catalog.get_stream(NS, "orders").await.unwrap();
    assert_eq!(stream.properties.get("retention").map(String::as_str), Some("1d"));
}
