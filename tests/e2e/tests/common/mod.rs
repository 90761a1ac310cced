//! What every suite shares: its seed, its run id, the S3 server and a one-process service.
#![allow(dead_code)] // each suite uses a different part

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use lakestream_e2e::api::{Api, Entry, Outcome};
use lakestream_e2e::checker::{self, Ledger, Load, Report};
use lakestream_e2e::config::ServiceConfig;
use lakestream_e2e::env::S3Env;
use lakestream_e2e::history::History;
use lakestream_e2e::lin::{self, Observers, Verdict, Watched};
use lakestream_e2e::process::{Service, free_port};
use lakestream_e2e::rng::{Rng, Seed};
use tokio::sync::watch;

/// The run's seed: `LAKESTREAM_TEST_SEED`, else fresh; printed so a failure can be replayed as
/// far as process timing allows.
pub fn seed(suite: &str) -> u64 {
    Seed::fresh(suite).value()
}

/// A working directory for the suite's processes (configuration, metadata, logs); kept, and
/// its path printed, when `LAKESTREAM_E2E_KEEP` is set, to look at the logs after a run.
pub fn workdir(suite: &str) -> tempfile::TempDir {
    let mut dir = tempfile::Builder::new().prefix(&format!("lakestream-e2e-{suite}-")).tempdir().unwrap();
    if std::env::var_os("LAKESTREAM_E2E_KEEP").is_some() {
        dir.disable_cleanup(true);
        println!("{suite}: keeping {}", dir.path().display());
    }
    dir
}

/// A key prefix of its own in the bucket for this run.
pub fn run_id(suite: &str, seed: u64) -> String {
    format!("e2e-{suite}-{}-{seed:x}", std::process::id())
}

/// The S3 server, or a panic that says how to start one.
pub fn s3() -> S3Env {
    S3Env::from_env().unwrap_or_else(|e| panic!("{e}"))
}

/// Every role in one process on the embedded store under `dir`, storing into S3 under a
/// prefix of its own; `tweak` adjusts the configuration first.
pub async fn all_in_one(
    dir: &Path,
    suite: &str,
    seed: u64,
    tweak: impl FnOnce(&mut ServiceConfig),
) -> Service {
    let port = free_port().unwrap_or_else(|e| panic!("{e}"));
    let mut config = ServiceConfig::all_in_one(port, dir.join("metadata.redb"), s3(), &run_id(suite, seed));
    tweak(&mut config);
    Service::start(suite, dir, &config).await.unwrap_or_else(|e| panic!("{e}"))
}

/// Every entry of partitions `0..partitions`.
pub async fn read_partitions(
    api: &Api,
    ns: &str,
    stream: &str,
    partitions: u32,
    patience: Duration,
) -> BTreeMap<u32, Vec<Entry>> {
    let mut reads = BTreeMap::new();
    for p in 0..partitions {
        let entries =
            api.read_all(ns, stream, p, patience).await.unwrap_or_else(|e| panic!("reading back: {e}"));
        reads.insert(p, entries);
    }
    reads
}

/// Appends a few hundred entries of varied sizes (1 B to 3 KB) and record counts (1 to 4) in
/// batches of 5 to each partition; every one must be acknowledged. Returns how many.
pub async fn produce_varied(api: &Api, ns: &str, stream: &str, partitions: u32, rng: &Rng) -> usize {
    let mut acked = 0;
    for round in 0..20u32 {
        for p in 0..partitions {
            let batch: Vec<(Bytes, u32)> = (0..5)
                .map(|i| {
                    let len = rng.between(1, 3000) as usize;
                    let body: Vec<u8> = (0..len).map(|j| (j as u32 ^ round ^ i ^ p) as u8).collect();
                    (Bytes::from(body), rng.between(1, 4) as u32)
                })
                .collect();
            for (i, o) in api.produce(ns, stream, p, &batch).await.into_iter().enumerate() {
                assert!(
                    matches!(o, Outcome::Acked { .. }),
                    "append {i} of round {round} to partition {p}: {o:?}"
                );
                acked += 1;
            }
        }
    }
    acked
}

/// The same entries (offsets, record counts, timestamps, bytes) in both reads.
pub fn assert_identical(before: &BTreeMap<u32, Vec<Entry>>, after: &BTreeMap<u32, Vec<Entry>>, what: &str) {
    for (p, entries) in before {
        let again = &after[p];
        assert_eq!(entries.len(), again.len(), "partition {p}: entry count differs {what}");
        for (a, b) in entries.iter().zip(again) {
            assert_eq!(a, b, "partition {p}: entry at offset {} differs {what}", a.offset);
        }
    }
}

/// Waits until the compactor's log shows ranges reaching the end of every log (`logs[p]` is
/// partition p's log id; `reads` what was read from it).
pub async fn wait_compacted(
    compactor: &Service,
    logs: &[u64],
    reads: &BTreeMap<u32, Vec<Entry>>,
    patience: Duration,
) {
    let deadline = std::time::Instant::now() + patience;
    loop {
        let ends = lakestream_e2e::process::compacted_ends(&compactor.log_text());
        let done = logs.iter().zip(reads.values()).all(|(log, entries)| {
            let end = entries.last().map_or(0, |e| e.offset + u64::from(e.record_count));
            ends.get(log).is_some_and(|&e| e >= end)
        });
        if done {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the compactor did not reach the end of every log within {patience:?} (ends {ends:?}); its log ends:\n{}",
            compactor.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A run recorded for the linearizability checker: the checker's producers (through
/// `writers`), a tail reader per partition (through `reader`) and a trimmer (through the
/// first writer), all into one history.
pub struct LinRun {
    /// The history every client records into (faults too).
    pub history: History,
    /// Every attempt's outcome, for the sequence checker.
    pub ledger: Ledger,
    /// What the observers watch.
    pub watched: Watched,
    stop_tx: watch::Sender<bool>,
    producers: tokio::task::JoinHandle<u64>,
    observers: Observers,
}

impl LinRun {
    /// Starts producers, tail readers and the trimmer on `load`'s stream (created already),
    /// recording into `history`.
    pub fn start(history: History, writers: Vec<Api>, reader: Api, load: &Load, seed: u64) -> LinRun {
        let ledger = Ledger::recording(history.clone());
        let watched = Watched {
            namespace: load.namespace.clone(),
            stream: load.stream.clone(),
            partitions: load.partitions,
        };
        let (stop_tx, stop) = watch::channel(false);
        let observers = Observers::start(reader, Some(writers[0].clone()), &watched, &history, &stop, seed);
        let producers = tokio::spawn(checker::produce_through(writers, load.clone(), ledger.clone(), stop));
        LinRun { history, ledger, watched, stop_tx, producers, observers }
    }

    /// Stops every client, reads each partition to its end through `verifier`, and checks
    /// the run twice: the sequence checker over what every read returned (0 lost,
    /// misplaced, reordered, phantom, corrupt, unexplained duplicates) and the
    /// linearizability checker over the history (0 violations, every planted anomaly caught,
    /// every fault kind in `faults` injected). Returns both reports.
    pub async fn finish(self, verifier: &Api, suite: &str, dir: &Path, faults: &[&str]) -> (Report, Verdict) {
        let _ = self.stop_tx.send(true);
        let sent = self.producers.await.unwrap();
        let observed = self.observers.join().await;
        lin::snapshot_all(verifier, &self.history, &self.watched, &observed, Duration::from_secs(300))
            .await
            .unwrap_or_else(|e| panic!("{suite}: reading back: {e}"));
        let report = checker::verify(&self.ledger.snapshot(), &observed.logs(self.watched.partitions));
        println!("{suite}: {sent} entries sent; {report:?}");
        assert_eq!(
            report.violations(),
            (0, 0, 0, 0, 0, 0),
            "{suite}: (lost, misplaced, reordered, phantom, corrupt, unexplained duplicates): {report:?}"
        );
        assert!(report.acknowledged > 0, "{suite}: nothing was acknowledged: {report:?}");
        let verdict = lin::assert_linearizable(suite, &self.history, dir, faults);
        (report, verdict)
    }
}

/// Fails when a service's logs report a panic.
pub fn assert_no_panics(services: &[&Service]) {
    for s in services {
        let panics = s.panics();
        assert!(panics.is_empty(), "{} logged a panic:\n{}", s.name(), panics.join("\n"));
    }
}
