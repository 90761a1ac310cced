//! WAL objects that hold hundreds of logs (issue #18: objects close on size or window, not
//! after a few logs) are read back correctly by every reader path: each log's entries, RAW
//! through a reader with and without its object cache, then after compaction from Parquet.
//! On the in-memory stores, and on a real Oxia server with a real S3 server.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::read_all;
use lakestream_compactor::{Compactor, CompactorConfig, CompactorDeps, no_progress};
use lakestream_format::{Clock, Entry, LogId, LogRef, ManualClock, SystemClock};
use lakestream_meta::MetaStore;
use lakestream_meta::lease::SeededTokens;
use lakestream_meta_oxia::testkit::StandaloneOxia;
use lakestream_objstore::ObjectStore;
use lakestream_objstore_s3::testkit::server_store;
use lakestream_reader::{Reader, ReaderConfig, ReaderDeps};
use lakestream_writer::{Writer, WriterConfig, WriterDeps};

/// Numbers the runs of this process, so that concurrent ones use distinct S3 prefixes.
static RUNS: AtomicU64 = AtomicU64::new(0);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal_objects_of_hundreds_of_logs_read_back_raw_and_after_compaction_in_memory() {
    let s = common::Stack::new();
    round_trip(s.meta.clone(), s.wal.clone(), s.compacted.clone(), s.clock.clone(), 300).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal_objects_of_hundreds_of_logs_read_back_raw_and_after_compaction_on_oxia_and_s3() {
    let oxia = StandaloneOxia::start(4, &[]).await;
    let clock = ManualClock::new(SystemClock.now_ms());
    let run = format!(
        "many-logs-{}-{}-{}",
        clock.now_ms(),
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    );
    let wal: Arc<dyn ObjectStore> = Arc::new(server_store(format!("{run}/wal")));
    let compacted: Arc<dyn ObjectStore> = Arc::new(server_store(format!("{run}/compacted")));
    round_trip(Arc::new(oxia.store().await), wal, compacted, clock, 200).await;
}

/// Appends three rounds of one entry to each of `logs` logs at once (so that each round's
/// entries share WAL objects), checks that objects held hundreds of logs, reads every log
/// back RAW (uncached and cached readers), compacts every log and reads it back again.
async fn round_trip(
    meta: Arc<dyn MetaStore>,
    wal: Arc<dyn ObjectStore>,
    compacted: Arc<dyn ObjectStore>,
    clock: ManualClock,
    logs: u64,
) {
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    // A window long enough for a round's appends to share an object; flush_bytes is not
    // reached (entries are small), so only the window closes objects.
    let writer = Writer::start(
        WriterConfig {
            flush_window: Duration::from_millis(300),
            flush_when_idle: false,
            ..WriterConfig::default()
        },
        WriterDeps {
            meta: meta.clone(),
            objects: wal.clone(),
            clock: shared.clone(),
            tokens: Arc::new(SeededTokens::new(18)),
        },
    )
    .unwrap();
    let refs: Vec<LogRef> = (0..logs)
        .map(|i| LogRef { log_id: LogId(18_000 + i), namespace: "ns".into(), stream: format!("many-{i}") })
        .collect();
    let mut acked: Vec<Vec<Entry>> = vec![Vec::new(); refs.len()];
    for round in 0..3u32 {
        let appends = refs.iter().map(|log| {
            // Sizes differ per log and round, so that a misplaced range shows.
            let filler = "y".repeat(((log.log_id.0 as usize) * 7 + round as usize) % 61);
            let payload = Bytes::from(format!("round {round} of log {}: {filler}", log.log_id));
            let writer = &writer;
            async move {
                let ack = writer.append(log.log_id, payload.clone(), round + 1).await.unwrap();
                Entry {
                    offset: ack.offset,
                    record_count: ack.record_count,
                    timestamp_ms: ack.timestamp_ms,
                    payload,
                }
            }
        });
        for (i, entry) in futures::future::join_all(appends).await.into_iter().enumerate() {
            acked[i].push(entry);
        }
    }
    // Objects held hundreds of logs: at least two (the rounds whose leases were already held)
    // had more than 128 log sections.
    let stats = writer.stats().logs_per_object;
    let at_most_128 = stats.bounds.iter().position(|b| *b == 128).map(|i| stats.cumulative[i]).unwrap();
    assert!(
        stats.count - at_most_128 >= 2,
        "objects with more than 128 logs: {} of {} ({stats:?})",
        stats.count - at_most_128,
        stats.count
    );

    let reader = |cache: usize| {
        let deps = ReaderDeps { meta: meta.clone(), wal: wal.clone(), compacted: compacted.clone() };
        Reader::new(ReaderConfig { object_cache_bytes: cache, ..ReaderConfig::default() }, deps).unwrap()
    };
    let (uncached, cached) = (reader(0), reader(64 << 20));
    for (log, want) in refs.iter().zip(&acked) {
        assert_eq!(&read_all(&uncached, log, 0).await, want, "RAW read of log {}", log.log_id);
        assert_eq!(&read_all(&cached, log, 0).await, want, "RAW read of log {} (cached)", log.log_id);
        // From the middle: the second entry on.
        assert_eq!(&read_all(&uncached, log, want[1].offset).await[..], &want[1..], "log {}", log.log_id);
    }

    clock.advance_ms(181_000);
    let compactor = Compactor::new(
        CompactorConfig { max_range_bytes: 1 << 20, max_file_bytes: 1 << 20, ..CompactorConfig::default() },
        CompactorDeps {
            meta: meta.clone(),
            wal: wal.clone(),
            compacted: compacted.clone(),
            clock: shared,
            tokens: Arc::new(SeededTokens::new(19)),
        },
    )
    .unwrap();
    let report = compactor.compact_once(&refs, &no_progress).await;
    assert_eq!(report.failed, vec![]);
    assert_eq!(report.ranges.len(), refs.len(), "one range per log");
    let after = reader(0);
    for (log, want) in refs.iter().zip(&acked) {
        assert_eq!(&read_all(&after, log, 0).await, want, "read of log {} after compaction", log.log_id);
    }
    writer.close().await;
}
