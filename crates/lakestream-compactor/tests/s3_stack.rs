//! The compactor on the real stack: WAL and compacted roots on a real S3 server (s3s-fs in
//! `scripts/test`; any server given by `LAKESTREAM_TEST_S3_*`), metadata on a real Oxia server
//! (a fresh `oxia standalone --shards 4` from `LAKESTREAM_TEST_OXIA_BIN`) and on the embedded
//! redb store; time from a manual clock that starts at the real time so that the server's
//! `Last-Modified` and WAL names agree with it (Oxia stamps records with its own wall clock,
//! which the manual clock only ever runs ahead of).
//!
//! Writes through the writer, compacts, reads back identical bytes and timestamps, and checks
//! that trims and grace periods reclaim exactly the objects they should.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{append_n, object_names, read_all};
use lakestream_compactor::InstallOutcome;
use lakestream_compactor::plan::NextRange;
use lakestream_compactor::{Compactor, CompactorConfig, CompactorDeps, no_progress};
use lakestream_format::keys;
use lakestream_format::{Clock, LogId, LogRef, ManualClock, SystemClock};
use lakestream_meta::lease;
use lakestream_meta::lease::SeededTokens;
use lakestream_meta::{EmbeddedStore, MetaStore};
use lakestream_meta_oxia::shard_sessions_from_id;
use lakestream_meta_oxia::testkit::StandaloneOxia;
use lakestream_objstore::ObjectStore;
use lakestream_objstore_s3::testkit::server_store;
use lakestream_reader::{Reader, ReaderConfig, ReaderDeps};
use lakestream_writer::{Writer, WriterConfig, WriterDeps};

/// Numbers the runs of this process, so that concurrent ones use distinct S3 prefixes.
static RUNS: AtomicU64 = AtomicU64::new(0);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_trim_and_reclamation_on_a_real_s3_server_and_the_embedded_store() {
    let clock = ManualClock::new(SystemClock.now_ms());
    let shared_clock: Arc<dyn Clock> = Arc::new(clock.clone());
    let dir = tempfile::tempdir().unwrap();
    let embedded =
        EmbeddedStore::open_with_clock(dir.path().join("meta.redb"), shared_clock.clone()).await.unwrap();
    compaction_trim_and_reclamation(Arc::new(embedded), clock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_trim_and_reclamation_on_oxia_and_a_real_s3_server() {
    let oxia = StandaloneOxia::start(4, &[]).await;
    let clock = ManualClock::new(SystemClock.now_ms());
    compaction_trim_and_reclamation(Arc::new(oxia.store().await), clock).await;
}

async fn compaction_trim_and_reclamation(meta: Arc<dyn MetaStore>, clock: ManualClock) {
    let run = format!(
        "compactor-test-{}-{}-{}",
        clock.now_ms(),
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    );
    let wal: Arc<dyn ObjectStore> = Arc::new(server_store(format!("{run}/wal")));
    let compacted: Arc<dyn ObjectStore> = Arc::new(server_store(format!("{run}/compacted")));
    let shared_clock: Arc<dyn Clock> = Arc::new(clock.clone());

    let writer = Writer::start(
        WriterConfig { flush_window: Duration::from_millis(2), ..WriterConfig::default() },
        WriterDeps {
            meta: meta.clone(),
            objects: wal.clone(),
            clock: shared_clock.clone(),
            tokens: Arc::new(SeededTokens::new(1)),
        },
    )
    .unwrap();
    let reader = || {
        let deps = ReaderDeps { meta: meta.clone(), wal: wal.clone(), compacted: compacted.clone() };
        Reader::new(ReaderConfig { object_cache_bytes: 0, ..ReaderConfig::default() }, deps).unwrap()
    };
    let config = CompactorConfig {
        max_range_bytes: 1 << 20,
        max_file_bytes: 50,
        orphan_scan: true,
        ..CompactorConfig::default()
    };
    let compactor = Compactor::new(
        config,
        CompactorDeps {
            meta: meta.clone(),
            wal: wal.clone(),
            compacted: compacted.clone(),
            clock: shared_clock.clone(),
            tokens: Arc::new(SeededTokens::new(2)),
        },
    )
    .unwrap();
    let log_a = LogRef { log_id: LogId(1), namespace: "ns".into(), stream: "a".into() };
    let log_b = LogRef { log_id: LogId(2), namespace: "ns".into(), stream: "b".into() };

    // Write: 12 entries to A, 4 to B.
    let acked_a = append_n(&writer, log_a.log_id, 12, 2, "s3").await;
    let acked_b = append_n(&writer, log_b.log_id, 4, 1, "s3").await;
    let wal_all: BTreeSet<String> = object_names(&wal).await.into_iter().collect();
    assert_eq!(wal_all.len(), 16, "one WAL object per append");

    // An orphan compacted file pair: C2 of log B without C3 (a compactor that failed).
    clock.advance_ms(181_000);
    let (_, planning) = compactor.plan(log_b.log_id).await.unwrap();
    let NextRange::Ready(plan_b) = planning.next else { panic!("{planning:?}") };
    compactor.prepare(&log_b, &plan_b).await.unwrap().unwrap();
    let orphans: BTreeSet<String> = object_names(&compacted).await.into_iter().collect();
    assert_eq!(orphans.len(), 2);

    // Compact A only; read back identical bytes, offsets and timestamps.
    let report = compactor.compact_once(std::slice::from_ref(&log_a), &no_progress).await;
    assert_eq!(report.failed, vec![]);
    assert_eq!(report.ranges.len(), 1);
    assert!(report.ranges[0].files >= 2, "max_file_bytes splits the range: {report:?}");
    assert_eq!(read_all(&reader(), &log_a, 0).await, acked_a);
    assert_eq!(read_all(&reader(), &log_b, 0).await, acked_b);
    let files_a: BTreeSet<String> =
        object_names(&compacted).await.into_iter().filter(|n| n.starts_with("ns/a/")).collect();

    // Grace periods: nothing named goes, and unnamed objects wait a full grace period from
    // the first pass that found them unnamed.
    let gc = compactor.gc_once(&no_progress).await.unwrap();
    assert_eq!(gc.marked_unreferenced, 12, "the 12 WAL objects of A's compacted records");
    assert!(gc.wal_deleted.is_empty() && gc.compacted_deleted.is_empty(), "{gc:?}");
    // The server's Last-Modified is real time; the manual clock moves ahead of it.
    clock.advance_ms(3_600_000);
    let gc = compactor.gc_once(&no_progress).await.unwrap();
    let deleted_wal: BTreeSet<String> = gc.wal_deleted.iter().cloned().collect();
    let wal_left: BTreeSet<String> = object_names(&wal).await.into_iter().collect();
    assert_eq!(deleted_wal.len(), 12);
    assert_eq!(wal_left.len(), 4, "B's four objects are still named");
    assert_eq!(deleted_wal.union(&wal_left).cloned().collect::<BTreeSet<_>>(), wal_all);
    let deleted_compacted: BTreeSet<String> = gc.compacted_deleted.iter().cloned().collect();
    assert_eq!(deleted_compacted, orphans, "exactly the failed compaction's files");
    assert_eq!(object_names(&compacted).await.into_iter().collect::<BTreeSet<_>>(), files_a);
    assert_eq!(read_all(&reader(), &log_a, 0).await, acked_a, "reads need no WAL object after compaction");

    // Soft trim A past its PARQUET record's files, append so the record is not the last,
    // then hard trim: the files go first, then the record; the new entry stays readable.
    let tail = append_n(&writer, log_a.log_id, 1, 1, "tail").await;
    writer.soft_trim(log_a.log_id, 23).await.unwrap();
    let trim = compactor.hard_trim(&log_a, 24, &no_progress).await.unwrap();
    assert_eq!(trim.trimmed_to, Some(24));
    assert_eq!(trim.compacted_deleted.iter().cloned().collect::<BTreeSet<_>>(), files_a);
    assert!(object_names(&compacted).await.is_empty());
    assert_eq!(read_all(&reader(), &log_a, 0).await, tail);
    assert_eq!(read_all(&reader(), &log_b, 0).await, acked_b);

    writer.close().await;
}

/// [Compactor] A compactor that dies after C3 took effect and before C4, on the production
/// stack: its Oxia sessions are removed on the server (as expiry does), taking its claim and
/// lease with them. Reads stay whole inside the C3–C4 window, and the next compactor finishes
/// C4, so that the log ends with one PARQUET record and the same entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compactor_dead_between_c3_and_c4_on_oxia_is_finished_by_the_next() {
    let oxia = StandaloneOxia::start(4, &[]).await;
    let store = oxia.store().await;
    let meta: Arc<dyn MetaStore> = Arc::new(store.clone());
    let clock = ManualClock::new(SystemClock.now_ms());
    let shared_clock: Arc<dyn Clock> = Arc::new(clock.clone());
    let run = format!("compactor-c3c4-{}-{}", clock.now_ms(), std::process::id());
    let wal: Arc<dyn ObjectStore> = Arc::new(server_store(format!("{run}/wal")));
    let compacted: Arc<dyn ObjectStore> = Arc::new(server_store(format!("{run}/compacted")));
    let writer = Writer::start(
        WriterConfig { flush_window: Duration::from_millis(2), ..WriterConfig::default() },
        WriterDeps {
            meta: meta.clone(),
            objects: wal.clone(),
            clock: shared_clock.clone(),
            tokens: Arc::new(SeededTokens::new(5)),
        },
    )
    .unwrap();
    let reader = || {
        let deps = ReaderDeps { meta: meta.clone(), wal: wal.clone(), compacted: compacted.clone() };
        Reader::new(ReaderConfig { object_cache_bytes: 0, ..ReaderConfig::default() }, deps).unwrap()
    };
    let compactor = |seed| {
        let deps = CompactorDeps {
            meta: meta.clone(),
            wal: wal.clone(),
            compacted: compacted.clone(),
            clock: shared_clock.clone(),
            tokens: Arc::new(SeededTokens::new(seed)),
        };
        Compactor::new(CompactorConfig { max_range_bytes: 1 << 20, ..CompactorConfig::default() }, deps)
            .unwrap()
    };
    let log = LogRef { log_id: LogId(7), namespace: "ns".into(), stream: "c3c4".into() };
    let acked = append_n(&writer, log.log_id, 6, 1, "c3c4").await;
    clock.advance_ms(181_000);

    let dying = compactor(1);
    let claim = dying.claim(log.log_id).await.unwrap();
    let (_, planning) = dying.plan(log.log_id).await.unwrap();
    let NextRange::Ready(plan) = planning.next else { panic!("{planning:?}") };
    let prepared = dying.prepare(&log, &plan).await.unwrap().unwrap();
    let lease = dying.acquire_lease(&claim).await.unwrap();
    assert_eq!(dying.install(&prepared, &lease).await.unwrap(), InstallOutcome::Installed);
    // The writer's lease and the compactor's.
    let leases_before = lease::list_leases(meta.as_ref(), log.log_id).await.unwrap();
    // The compactor dies here: its sessions end on the server, and their records with them.
    let session = dying.session_id().await.expect("a session");
    for (shard, id) in shard_sessions_from_id(&session).expect("an Oxia session id") {
        store.client().close_session(shard, id).await.unwrap();
    }
    let leases = lease::list_leases(meta.as_ref(), log.log_id).await.unwrap();
    assert!(
        leases.len() + 1 == leases_before.len() && leases.iter().all(|l| leases_before.contains(l)),
        "the dead compactor's lease went with its session, the writer's stayed: {leases_before:?} → {leases:?}"
    );
    assert_eq!(read_all(&reader(), &log, 0).await, acked, "whole reads inside the C3–C4 window");
    let raw_left = index_records(&meta, log.log_id).await;
    assert!(raw_left.len() > 1, "C4 has not run yet: {raw_left:?}");

    let next = compactor(2);
    next.compact_log(&log, &no_progress).await.unwrap();
    let after = index_records(&meta, log.log_id).await;
    assert_eq!(after.len(), 1, "the next compactor finished C4: {after:?}");
    assert_eq!(read_all(&reader(), &log, 0).await, acked, "the same entries after C4");
    writer.close().await;
}

/// The keys of a log's index records.
async fn index_records(meta: &Arc<dyn MetaStore>, log_id: LogId) -> Vec<String> {
    meta.list(&keys::partition(log_id), &keys::first_key(log_id), &keys::last_key(log_id)).await.unwrap()
}
