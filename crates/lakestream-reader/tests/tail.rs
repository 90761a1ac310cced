//! Tail reads: what an idle tailed log costs the metadata store, and how late a tail read sees
//! an append made by another process (a writer that does not tell the reader).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lakestream_format::{LogId, LogRef, SystemClock};
use lakestream_meta::hooked::{HookedStore, Op};
use lakestream_meta::lease::SeededTokens;
use lakestream_meta::{InMemoryStore, MetaStore};
use lakestream_objstore::{InMemoryStore as MemObjects, ObjectStore};
use lakestream_reader::{Reader, ReaderConfig, ReaderDeps};
use lakestream_writer::{Writer, WriterConfig, WriterDeps};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The metadata reads (lookups, scans, lists) made through `counted` so far.
fn metadata_reads(counted: &HookedStore) -> u64 {
    [Op::Get, Op::Scan, Op::List].into_iter().map(|op| counted.calls(op)).sum()
}

const LOG: LogId = LogId(1);

struct Setup {
    /// A writer of "another process": it never tells the reader about its appends.
    writer: Writer,
    reader: Reader,
    counted: Arc<HookedStore>,
}

/// A log with one entry, a writer, and a reader whose metadata reads are counted.
async fn setup() -> Setup {
    let meta: Arc<dyn MetaStore> = Arc::new(InMemoryStore::new());
    let wal: Arc<dyn ObjectStore> = Arc::new(MemObjects::new(Arc::new(SystemClock)));
    let deps = WriterDeps {
        meta: meta.clone(),
        objects: wal.clone(),
        clock: Arc::new(SystemClock),
        tokens: Arc::new(SeededTokens::new(3)),
    };
    let config = WriterConfig { flush_window: Duration::from_millis(1), ..WriterConfig::default() };
    let writer = Writer::start(config, deps).unwrap();
    writer.append(LOG, Bytes::from_static(b"first"), 1).await.unwrap();
    let counted = HookedStore::new(meta);
    let deps = ReaderDeps { meta: counted.clone(), wal: wal.clone(), compacted: wal };
    let reader = Reader::new(ReaderConfig::default(), deps).unwrap();
    Setup { writer, reader, counted }
}

fn log() -> LogRef {
    LogRef { log_id: LOG, namespace: "ns".into(), stream: "s".into() }
}

/// A client tailing the log from `from` with reads of `max_wait` each, in a loop (as a Kafka
/// consumer's fetches, or a read session, do); sends each entry's offset and arrival time.
fn tail(
    reader: &Reader,
    from: u64,
    max_wait: Duration,
) -> (mpsc::UnboundedReceiver<(u64, Instant)>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let reader = reader.clone();
    let task = tokio::spawn(async move {
        let mut next = from;
        loop {
            let batch = reader.read(&log(), next, 1 << 20, max_wait).await.unwrap();
            for e in &batch.entries {
                if tx.send((e.offset, Instant::now())).is_err() {
                    return;
                }
            }
            next = batch.next_offset;
        }
    });
    (rx, task)
}

/// Metadata reads a second while `tailers` clients tail the idle log with 500 ms fetches.
async fn idle_reads_per_second(tailers: usize) -> f64 {
    let s = setup().await;
    let tasks: Vec<_> = (0..tailers).map(|_| tail(&s.reader, 1, Duration::from_millis(500))).collect();
    tokio::time::sleep(Duration::from_secs(1)).await; // past the backoff's ramp
    let before = metadata_reads(&s.counted);
    let window = Duration::from_secs(4);
    tokio::time::sleep(window).await;
    let reads = metadata_reads(&s.counted) - before;
    for (_, task) in tasks {
        task.abort();
    }
    s.writer.close().await;
    reads as f64 / window.as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tailed_log_costs_a_few_metadata_reads_a_second() {
    let one = idle_reads_per_second(1).await;
    let eight = idle_reads_per_second(8).await;
    eprintln!(
        "idle tailed log, 500 ms fetches: {one:.1} metadata reads/s (1 client), {eight:.1} (8 clients)"
    );
    // One poller at 4 looks a second, and R1 + R2 (2 reads) per fetch of each client.
    assert!(one <= 10.0, "{one:.1} metadata reads a second for one client tailing an idle log");
    assert!(eight <= 45.0, "{eight:.1} metadata reads a second for eight clients tailing an idle log");
}

/// How late the tail client sees each of `appends` entries appended after `idle` without a
/// word to the reader (`notify`: with `notify_appended_to`, as the server does for its own
/// appends).
async fn tail_latencies(appends: u64, idle: Duration, notify: bool) -> Vec<Duration> {
    let s = setup().await;
    let (mut arrived, task) = tail(&s.reader, 1, Duration::from_secs(10));
    let mut latencies = Vec::new();
    for i in 0..appends {
        tokio::time::sleep(idle).await;
        let ack = s.writer.append(LOG, Bytes::from(format!("late {i}")), 1).await.unwrap();
        let acked = Instant::now();
        if notify {
            s.reader.notify_appended_to(LOG, ack.end_offset());
        }
        let (offset, at) = arrived.recv().await.unwrap();
        assert_eq!(offset, ack.offset);
        latencies.push(at.saturating_duration_since(acked));
    }
    task.abort();
    s.writer.close().await;
    latencies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tail_read_sees_an_append_made_elsewhere_within_the_poll_bound() {
    let latencies = tail_latencies(6, Duration::from_millis(1500), false).await;
    let max = latencies.iter().max().copied().unwrap_or_default();
    let mean = latencies.iter().sum::<Duration>() / latencies.len() as u32;
    eprintln!("append made elsewhere, after 1.5 s idle: seen after {mean:?} on average, {max:?} at most");
    let bound = ReaderConfig::default().tail_poll_max + Duration::from_millis(150);
    assert!(max <= bound, "an append was seen {max:?} after its acknowledgement: {latencies:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tail_read_sees_an_in_process_append_at_once() {
    let latencies = tail_latencies(6, Duration::from_millis(600), true).await;
    let max = latencies.iter().max().copied().unwrap_or_default();
    eprintln!("in-process append, notified: seen after {max:?} at most");
    assert!(max <= Duration::from_millis(60), "{latencies:?}");
}
