//! kill -9 of the service at random points under load, restart, repeat; then the checker
//! reads everything back: no acknowledged entry lost, misplaced or reordered, duplicates only
//! where an outcome was unknown. Every append, read, tail and trim of the run (tail readers
//! and a trimmer run beside the producers) is recorded and the history checked for
//! linearizability (`tests/lincheck`). Compaction runs all the time (ranges close after 500 ms,
//! passes every 200 ms, reclamation every 3 s), so kills land inside compactions too. At
//! each kill the suite prints what the service's log shows had happened: ranges compacted
//! (the compactor logs one line per range after C5, none per step), retried installs.
//!
//! CI: `LAKESTREAM_E2E_KILLS` rounds (default 5); `LAKESTREAM_E2E_NIGHTLY=1`: 10 minutes of
//! kills. Soak (S3 server and binary as in docs/reliability.md), killing for that long:
//! `LAKESTREAM_SOAK_SECS=600 nice -n 10 cargo test -p lakestream-e2e --test crash -- --nocapture`.

mod common;

use std::time::{Duration, Instant};

use lakestream_e2e::api::Api;
use lakestream_e2e::checker::Load;
use lakestream_e2e::env;
use lakestream_e2e::history::History;
use lakestream_e2e::process::CompactionLog;
use lakestream_e2e::rng::Rng;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_no_acknowledged_entry() {
    let seed = common::seed("crash");
    let rng = Rng::new(seed);
    let kills = env::number("LAKESTREAM_E2E_KILLS", 5).unwrap_or_else(|e| panic!("{e}"));
    // Nightly: 10 minutes of kills.
    let soak = (std::env::var("LAKESTREAM_SOAK_SECS").is_ok() || env::nightly()).then(|| {
        env::fault_run_length(Duration::ZERO, Duration::from_secs(600)).unwrap_or_else(|e| panic!("{e}"))
    });
    let dir = common::workdir("crash");
    let mut service = common::all_in_one(dir.path(), "crash", seed, |_| {}).await;
    let api = Api::new(&service.url(), Duration::from_secs(10));
    let load = Load {
        namespace: "default".into(),
        stream: format!("crash-{seed:x}"),
        partitions: 4,
        producers_per_partition: 2,
        entry_bytes: 300,
        max_attempts: 400,
    };
    api.create_stream(&load.namespace, &load.stream, load.partitions).await.unwrap_or_else(|e| panic!("{e}"));

    // The checker's producers, a tail reader per partition and a trimmer, every operation
    // recorded for the linearizability checker.
    let run = common::LinRun::start(History::new(), vec![api.clone()], api.clone(), &load, seed);

    let started = Instant::now();
    let mut round = 0u64;
    println!("round  up_ms  acked_keys  ranges_compacted  install_retries  compaction_failures");
    loop {
        let more = match soak {
            Some(limit) => started.elapsed() < limit,
            None => round < kills,
        };
        if !more {
            break;
        }
        round += 1;
        // After a start the compactor needs ~10 s before it completes a log's first range;
        // every fourth round lives long enough for compaction to be under way at the kill.
        let up = if round % 4 == 2 { rng.between(10_000, 16_000) } else { rng.between(1000, 5000) };
        let up = Duration::from_millis(up);
        tokio::time::sleep(up).await;
        run.history.fault(KILL);
        service.kill9().unwrap_or_else(|e| panic!("{e}"));
        // What the logs show had happened when the process died (cumulative over starts).
        let c = CompactionLog::of(&service.log_text());
        let acked = run.ledger.snapshot().values().filter(|o| o.iter().any(is_acked)).count();
        println!(
            "{round:>5}  {:>5}  {acked:>10}  {:>16}  {:>15}  {:>19}",
            up.as_millis(),
            c.ranges_compacted,
            c.install_retries,
            c.failed
        );
        tokio::time::sleep(Duration::from_millis(rng.between(0, 500))).await;
        service.restart().await.unwrap_or_else(|e| panic!("restart {round}: {e}"));
    }
    // Let the producers finish their pending retries against the live service.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The verifier's reads may be slow (a WAL of many small objects): a long request timeout.
    let verifier = Api::new(&service.url(), Duration::from_secs(120));
    let faults: &[&str] = if round > 0 { &[KILL] } else { &[] };
    let (report, verdict) = run.finish(&verifier, "crash", dir.path(), faults).await;
    let compaction = CompactionLog::of(&service.log_text());
    println!("crash: {round} kills, {compaction:?}");
    // The kills must have hit requests, or the run proves nothing about them.
    assert!(
        round == 0 || report.unknown + report.failed_attempts > 0,
        "no append was interrupted: {report:?}"
    );
    assert!(verdict.trims > 0, "no trim was answered: {verdict:?}");
    assert!(compaction.ranges_compacted > 0, "no range was compacted during the run: {compaction:?}");
    common::assert_no_panics(&[&service]);
    // The last stop is a kill too: a graceful stop waits for a running reclamation pass,
    // which may take long here (round_trip checks graceful stops).
    service.kill9().unwrap_or_else(|e| panic!("{e}"));
}

/// The fault this suite injects, as the history names it.
const KILL: &str = "kill -9 of the service (every role)";

fn is_acked(o: &lakestream_e2e::api::Outcome) -> bool {
    matches!(o, lakestream_e2e::api::Outcome::Acked { .. })
}
