//! Two soft trims of one log racing through two writers: [All] An implementation MUST NOT
//! decrease B, and [Writer] a soft trim MUST write B′ with CreateIfAbsent when no marker
//! exists, or otherwise with CompareAndSet on the version it read. The lower trim reads the
//! marker, pauses while the higher one writes, then writes: an unconditional put would lower
//! B; the conditional one fails, the trim reads again and leaves B where it is.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lakestream_format::{Clock, LogId, ManualClock, keys};
use lakestream_meta::hooked::{self, HookedStore, Op};
use lakestream_meta::lease::SeededTokens;
use lakestream_meta::{InMemoryStore, PutCondition};
use lakestream_objstore::InMemoryStore as MemObjects;
use lakestream_writer::{Writer, WriterConfig, WriterDeps};

const MARKERS: &str = "/mark-deleted-offsets/";

fn writer(meta: &Arc<HookedStore>, objects: &Arc<MemObjects>, clock: &ManualClock, seed: u64) -> Writer {
    let deps = WriterDeps {
        meta: meta.clone(),
        objects: objects.clone(),
        clock: Arc::new(clock.clone()),
        tokens: Arc::new(SeededTokens::new(seed)),
    };
    Writer::start(WriterConfig { flush_window: Duration::from_millis(1), ..WriterConfig::default() }, deps)
        .unwrap()
}

/// Races a soft trim of `low` (paused after its marker read) against one of `high`; answers
/// the marker stored after both.
async fn race(meta: &HookedStore, lower: &Writer, higher: &Writer, log: LogId, low: u64, high: u64) -> u64 {
    // The next read of the marker pauses after reading.
    let (pause, at_read) = hooked::gate();
    meta.on(Op::Get).key_prefix(MARKERS).once().pause_after(pause);
    let slow = tokio::spawn({
        let lower = lower.clone();
        async move { lower.soft_trim(log, low).await }
    });
    at_read.reached().await; // the lower trim has read the marker and computed its write
    let fast = higher.soft_trim(log, high).await.unwrap();
    assert!(fast.advanced && fast.marker == high + 1, "{fast:?}");
    at_read.open();
    let slow = slow.await.unwrap().unwrap();
    assert_eq!((slow.marker, slow.advanced), (high + 1, false), "the lower trim saw the higher marker");
    let stored = meta.inner().get(&keys::partition(log), &keys::trim_marker_key(log)).await.unwrap().unwrap();
    keys::decode_trim_marker(&stored.value).unwrap()
}

// spec-rule: 402d4f8579 [All] An implementation MUST NOT decrease B.
// spec-rule: c7bc99327d [Writer] A soft trim through offset o, inclusive, MUST compute B′ as the smaller o…
#[tokio::test]
async fn racing_soft_trims_never_decrease_b() {
    let clock = ManualClock::new(1_796_000_000_000);
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let meta = HookedStore::new(Arc::new(InMemoryStore::with_config(1, shared.clone()).unwrap()));
    let objects = Arc::new(MemObjects::new(shared));
    let (a, b) = (writer(&meta, &objects, &clock, 580), writer(&meta, &objects, &clock, 581));
    let log = LogId(580);
    for i in 0..20u8 {
        a.append(log, Bytes::from(vec![i]), 1).await.unwrap();
    }

    // No marker yet: both trims would create it; the higher one does first.
    assert_eq!(race(&meta, &a, &b, log, 4, 8).await, 9);
    // A marker exists: both compare-and-set on the version they read.
    assert_eq!(race(&meta, &b, &a, log, 11, 15).await, 16);

    // Every write of the marker, with its condition.
    let writes: Vec<(String, PutCondition)> = meta
        .history()
        .into_iter()
        .filter(|call| call.op == Op::Put && call.key.starts_with(MARKERS))
        .map(|call| (String::from_utf8_lossy(&call.value.unwrap()).into_owned(), call.condition.unwrap()))
        .collect();
    let expected_conditions: Vec<(&str, bool)> =
        writes.iter().map(|(v, c)| (v.as_str(), matches!(c, PutCondition::IfAbsent))).collect();
    // Each race: the higher trim's write lands, the lower trim's conditional write fails.
    assert_eq!(expected_conditions, [("9", true), ("5", true), ("16", false), ("12", false)]);
    assert!(writes.iter().all(|(_, c)| !matches!(c, PutCondition::None)), "no unconditional marker write");
    a.close().await;
    b.close().await;
}
