//! A streaming-proof style correctness checker: producers append sequence-numbered entries to
//! several logs while faults are injected into object storage (errors, throttling, timeouts
//! after the write succeeded) and into the metadata store (index puts that fail before
//! sending, and ones that commit but lose their response). A verifier then reads every log
//! and counts:
//!
//! - **lost** — acknowledged but not read back (must be 0);
//! - **misplaced** — read back at another offset than acknowledged (must be 0);
//! - **reordered** — one producer's entries out of its order within a log (must be 0);
//! - **phantom** — reported failed (not "unknown") but readable (must be 0);
//! - **duplicates** — read back more than once; allowed only for appends whose outcome was
//!   reported unknown and that the producer therefore retried.
//!
//! It runs on the in-memory stores, and on the production stack: a real Oxia server (a fresh
//! `oxia standalone` per run, from `LAKESTREAM_TEST_OXIA_BIN`) and the S3 server
//! (`LAKESTREAM_TEST_S3_*`), both set by `scripts/test`.
//!
//! `LAKESTREAM_TEST_SEED` replays a seed; `LAKESTREAM_TEST_SEEDS` runs more seeds.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use lakestream_format::{Clock, LogId, LogRef, SystemClock};
use lakestream_meta::hooked::{HookedStore, Op};
use lakestream_meta::lease::SeededTokens;
use lakestream_meta::test_rng::{Seed, TestRng, sweep};
use lakestream_meta::{InMemoryStore, MetaError, MetaStore};
use lakestream_meta_oxia::testkit::{Relay, StandaloneOxia};
use lakestream_meta_oxia::{OxiaConfig, OxiaStore};
use lakestream_objstore::{
    FaultConfig, FaultyStore, InMemoryStore as MemObjects, ObjectStore, Operation, OperationFaults,
};
use lakestream_reader::{Reader, ReaderConfig, ReaderDeps};
use lakestream_writer::{AppendError, Writer, WriterConfig, WriterDeps};

/// The metadata store with index-put faults: some fail before they are sent (nothing
/// happens), some commit and then lose their response (the outcome is unknown). Drawn from
/// the run's seed, so a seed replays the same fault decisions.
fn faulty_meta(
    inner: Arc<dyn MetaStore>,
    seed: u64,
    fail_before: f64,
    lose_response: f64,
) -> Arc<HookedStore> {
    let meta = HookedStore::new(inner);
    let rng = Arc::new(TestRng::new(seed));
    let draw = rng.clone();
    let not_sent = MetaError::Unavailable("injected: not sent".into());
    meta.on(Op::SequencedPut).when(move |_| draw.chance(fail_before)).fail(not_sent);
    meta.on(Op::SequencedPut).when(move |_| rng.chance(lose_response)).lose_answer();
    meta
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Report {
    acknowledged: usize,
    unknown: usize,
    failed: usize,
    lost: usize,
    misplaced: usize,
    reordered: usize,
    phantom: usize,
    duplicates: usize,
    unexplained_duplicates: usize,
    /// With a real fault: how long after the store was back the first append was
    /// acknowledged (`Some(None)`: never).
    recovery: Option<Option<Duration>>,
}

const LOGS: u64 = 3;
const PRODUCERS: usize = 6;
const APPENDS: usize = 40;

/// Where the checker's logs live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    /// The in-memory metadata and object stores.
    Memory,
    /// A fresh real Oxia server and the S3 server.
    OxiaAndS3,
}

/// A root on the test S3 server (`LAKESTREAM_TEST_S3_*`), under a prefix of the run's own.
fn s3_store(prefix: String) -> Arc<dyn ObjectStore> {
    Arc::new(lakestream_objstore_s3::testkit::server_store(prefix))
}

/// A fault of the real stack, made from outside the client while the producers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RealFault {
    /// None: the producers append a fixed number of entries each.
    None,
    /// `kill -9` of the Oxia server under load, then a restart on the same directories.
    KillOxia,
    /// Every connection to Oxia dropped, again and again, through a TCP relay.
    DropOxiaConnections,
}

/// What a run does: where the logs live, whether faults are injected into the stores, and
/// which fault of the real stack happens meanwhile.
#[derive(Debug, Clone, Copy)]
struct Scenario {
    backend: Backend,
    injected_faults: bool,
    real_fault: RealFault,
}

/// How long producers run, and when the fault happens, in a run with a real fault.
const FAULT_AFTER: Duration = Duration::from_millis(1500);
const OUTAGE: Duration = Duration::from_secs(1);
const RUN_FOR: Duration = Duration::from_secs(6);

/// A run's metadata store, WAL root, and the Oxia server and relay behind them, if any.
type Stores = (Arc<dyn MetaStore>, Arc<dyn ObjectStore>, Option<StandaloneOxia>, Option<Relay>);

async fn run(seed: u64, scenario: Scenario) -> Report {
    let Scenario { backend, injected_faults, real_fault } = scenario;
    // The Oxia server lives as long as the run (its guard is dropped at the end).
    let (meta, wal, oxia, relay): Stores = match backend {
        Backend::Memory => {
            (Arc::new(InMemoryStore::new()), Arc::new(MemObjects::new(Arc::new(SystemClock))), None, None)
        }
        Backend::OxiaAndS3 => {
            let oxia = StandaloneOxia::start(4, &[]).await;
            let run = format!("checker-{seed}-{}-{}", std::process::id(), SystemClock.now_ms());
            let wal = s3_store(format!("{run}/wal"));
            if real_fault == RealFault::DropOxiaConnections {
                let relay = Relay::start(&oxia.address()).await;
                let config = OxiaConfig {
                    request_timeout: Duration::from_secs(10),
                    ..OxiaConfig::new([relay.address()])
                };
                let store = OxiaStore::connect(config).await.expect("connect through the relay");
                (Arc::new(store), wal, Some(oxia), Some(relay))
            } else {
                (Arc::new(oxia.store().await), wal, Some(oxia), None)
            }
        }
    };
    let (writer_meta, writer_wal): (Arc<dyn MetaStore>, Arc<dyn ObjectStore>) = if injected_faults {
        let faulty_meta = faulty_meta(meta.clone(), seed, 0.05, 0.05);
        let put_faults = OperationFaults {
            error_probability: 0.08,
            throttle_probability: 0.04,
            timeout_after_success_probability: 0.08,
            ..OperationFaults::default()
        };
        let faulty_wal =
            FaultyStore::new(wal.clone(), FaultConfig::new(seed).with(Operation::Put, put_faults));
        (faulty_meta, Arc::new(faulty_wal))
    } else {
        (meta.clone(), wal.clone())
    };
    let writer = Writer::start(
        WriterConfig { flush_window: Duration::from_millis(1), ..WriterConfig::default() },
        WriterDeps {
            meta: writer_meta,
            objects: writer_wal,
            clock: Arc::new(SystemClock),
            tokens: Arc::new(SeededTokens::new(seed)),
        },
    )
    .unwrap();

    // The real fault, from outside the writer; it reports when the store came back.
    let started = Instant::now();
    let (stop_tx, stop) = tokio::sync::watch::channel(real_fault == RealFault::None);
    let fault = tokio::spawn(async move {
        let mut oxia = oxia;
        let back = match real_fault {
            RealFault::None => None,
            RealFault::KillOxia => {
                tokio::time::sleep(FAULT_AFTER).await;
                let server = oxia.as_mut().expect("an Oxia server");
                println!("kill -9 oxia (pid {:?})", server.pid());
                server.kill9();
                tokio::time::sleep(OUTAGE).await;
                server.restart().await;
                Some(Instant::now())
            }
            RealFault::DropOxiaConnections => {
                tokio::time::sleep(FAULT_AFTER).await;
                let relay = relay.as_ref().expect("a relay");
                let until = Instant::now() + OUTAGE * 3;
                while Instant::now() < until {
                    relay.cut();
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                Some(Instant::now())
            }
        };
        if real_fault != RealFault::None {
            tokio::time::sleep_until(started + RUN_FOR).await;
            let _ = stop_tx.send(true);
        }
        (back, oxia, relay)
    });

    // Outcome per (producer, seq): the acknowledged offset, "unknown", or "failed".
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Outcome {
        Acked(u64),
        Unknown,
        Failed,
    }
    let mut tasks = Vec::new();
    for producer in 0..PRODUCERS {
        let w = writer.clone();
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let log = LogId(producer as u64 % LOGS);
            let mut outcomes = Vec::new();
            let mut acked_at = Vec::new();
            // A fixed count without a real fault; until told to stop with one.
            let mut seq = 0;
            while if real_fault == RealFault::None { seq < APPENDS } else { !*stop.borrow() } {
                let payload = Bytes::from(format!("{producer}:{seq}"));
                let mut outcome = match w.append(log, payload.clone(), 1).await {
                    Ok(ack) => Outcome::Acked(ack.offset),
                    Err(AppendError::OutcomeUnknown { .. }) => Outcome::Unknown,
                    Err(_) => Outcome::Failed,
                };
                // A client retries an append whose outcome is unknown: that may store it twice.
                if outcome == Outcome::Unknown
                    && let Ok(ack) = w.append(log, payload, 1).await
                {
                    outcome = Outcome::Acked(ack.offset);
                    outcomes.push((seq, Outcome::Unknown)); // the first attempt's outcome
                }
                if matches!(outcome, Outcome::Acked(_)) {
                    acked_at.push(Instant::now());
                }
                outcomes.push((seq, outcome));
                seq += 1;
            }
            (producer, outcomes, acked_at)
        }));
    }
    let mut outcomes: HashMap<(usize, usize), Vec<Outcome>> = HashMap::new();
    let mut acked_at = Vec::new();
    for t in tasks {
        let (producer, list, times) = t.await.unwrap();
        for (seq, o) in list {
            outcomes.entry((producer, seq)).or_default().push(o);
        }
        acked_at.extend(times);
    }
    writer.close().await;
    let (back, _oxia, _relay) = fault.await.expect("the fault task");
    // Recovery: from the moment the store was back to the first acknowledgement after it.
    let recovery = back.map(|back| acked_at.iter().filter(|t| **t >= back).min().map(|first| *first - back));

    // Verify through a clean reader.
    let reader = Reader::new(
        ReaderConfig::default(),
        ReaderDeps { meta: meta.clone(), wal, compacted: Arc::new(MemObjects::new(Arc::new(SystemClock))) },
    )
    .unwrap();
    let mut seen: HashMap<(usize, usize), Vec<u64>> = HashMap::new();
    let mut report = Report { recovery, ..Report::default() };
    for l in 0..LOGS {
        let log = LogRef { log_id: LogId(l), namespace: "ns".into(), stream: "s".into() };
        let mut next = 0;
        let mut last_seq: HashMap<usize, usize> = HashMap::new();
        loop {
            let batch = reader.read(&log, next, 1 << 20, Duration::ZERO).await.expect("verifier read");
            if batch.entries.is_empty() {
                break;
            }
            for e in &batch.entries {
                let text = String::from_utf8(e.payload.to_vec()).unwrap();
                let (p, s) = text.split_once(':').unwrap();
                let (p, s): (usize, usize) = (p.parse().unwrap(), s.parse().unwrap());
                if last_seq.get(&p).is_some_and(|&prev| s < prev) {
                    report.reordered += 1;
                }
                last_seq.insert(p, s);
                seen.entry((p, s)).or_default().push(e.offset);
            }
            next = batch.next_offset;
        }
    }
    for (key, list) in &outcomes {
        let acked: Vec<u64> =
            list.iter().filter_map(|o| if let Outcome::Acked(off) = o { Some(*off) } else { None }).collect();
        let unknown = list.contains(&Outcome::Unknown);
        report.acknowledged += acked.len();
        report.unknown += usize::from(unknown);
        report.failed += list.iter().filter(|o| **o == Outcome::Failed).count();
        let read = seen.get(key).cloned().unwrap_or_default();
        for off in &acked {
            if read.is_empty() {
                report.lost += 1;
            } else if !read.contains(off) {
                report.misplaced += 1;
            }
        }
        if acked.is_empty() && !unknown && !read.is_empty() {
            report.phantom += 1;
        }
        if read.len() > 1 {
            report.duplicates += read.len() - 1;
            if !unknown {
                report.unexplained_duplicates += read.len() - 1;
            }
        }
    }
    // Entries read back that no producer sent cannot happen with this payload scheme, but
    // count them as phantoms all the same.
    let sent: HashSet<_> = outcomes.keys().collect();
    report.phantom += seen.keys().filter(|k| !sent.contains(k)).count();
    report
}

async fn check_seeds(scenario: Scenario, seeds: Vec<u64>) -> Report {
    let mut totals = Report::default();
    for seed in seeds {
        // Printed, and again with how to replay it if the run fails.
        let _replay = Seed::of(&format!("checker {scenario:?}"), seed);
        let r = run(seed, scenario).await;
        println!("{scenario:?} seed {seed}: {r:?}");
        assert_eq!(
            (r.lost, r.misplaced, r.reordered, r.phantom, r.unexplained_duplicates),
            (0, 0, 0, 0, 0),
            "{scenario:?} seed {seed}: {r:?}"
        );
        if let Some(recovery) = r.recovery {
            let recovery = recovery.unwrap_or_else(|| {
                panic!("{scenario:?} seed {seed}: no append succeeded after the fault: {r:?}")
            });
            assert!(recovery <= RECOVERY_BOUND, "{scenario:?} seed {seed}: recovered after {recovery:?}");
            totals.recovery =
                Some(Some(totals.recovery.flatten().map_or(recovery, |worst| worst.max(recovery))));
        }
        totals.acknowledged += r.acknowledged;
        totals.unknown += r.unknown;
        totals.failed += r.failed;
        totals.duplicates += r.duplicates;
    }
    println!("{scenario:?} checker totals: {totals:?}");
    totals
}

/// Appends resume within this long after Oxia is back (stated in docs/reliability.md).
const RECOVERY_BOUND: Duration = Duration::from_secs(5);

// spec-rule: 05bf0372f3 [Writer] A writer MUST append entries by the following steps.
// spec-rule: ae30e1a21f [Writer] A writer MUST NOT report an entry as appended before the index record of…
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_entry_is_lost_or_reordered_under_injected_faults() {
    let scenario = Scenario { backend: Backend::Memory, injected_faults: true, real_fault: RealFault::None };
    let totals = check_seeds(scenario, sweep("checker in memory", 1..9)).await;
    // The faults must actually have happened, or the run proves nothing.
    assert!(totals.failed > 0 && totals.unknown > 0, "no faults were injected: {totals:?}");
}

/// The same checker on a real Oxia server and the S3 server: the faults are injected on top
/// of the real stores (S3 PUTs, index puts), and the verifier reads back through them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_entry_is_lost_or_reordered_on_oxia_and_s3_under_injected_faults() {
    // Fewer seeds than in memory: each run starts its own Oxia server and writes to S3.
    let seeds = sweep("checker on Oxia and S3", 1..4);
    let scenario =
        Scenario { backend: Backend::OxiaAndS3, injected_faults: true, real_fault: RealFault::None };
    let totals = check_seeds(scenario, seeds).await;
    assert!(totals.failed > 0 && totals.unknown > 0, "no faults were injected: {totals:?}");
}

/// `kill -9` of the Oxia server under a produce load, and a restart on the same directories:
/// no acknowledged entry is lost or reordered, and the writer recovers on its own within
/// [`RECOVERY_BOUND`] of the server's return.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_of_oxia_under_load_loses_no_acknowledged_entry() {
    let scenario =
        Scenario { backend: Backend::OxiaAndS3, injected_faults: false, real_fault: RealFault::KillOxia };
    let totals = check_seeds(scenario, vec![1]).await;
    assert!(totals.acknowledged > 0, "{totals:?}");
}

/// Every connection to Oxia dropped again and again under a produce load: no acknowledged
/// entry is lost or reordered, and appends go on once the connections stay up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_oxia_connections_under_load_lose_no_acknowledged_entry() {
    let scenario = Scenario {
        backend: Backend::OxiaAndS3,
        injected_faults: false,
        real_fault: RealFault::DropOxiaConnections,
    };
    let totals = check_seeds(scenario, vec![1]).await;
    assert!(totals.acknowledged > 0, "{totals:?}");
}
