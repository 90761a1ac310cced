//! S3 under pressure: an HTTP proxy before the S3 server answers a fifth of all requests
//! `503 SlowDown` without forwarding them, and holds a fifth of the PUTs for up to 2 s,
//! half before the server stores the object and half after (a late answer). The service
//! (every role, embedded metadata) has 3 attempts per S3 request, so some PUTs fail after
//! their retries and reach the writer. Producers append, tail readers read and a trimmer
//! trims meanwhile; then the sequence checker reads everything back and the history of every
//! operation goes to the linearizability checker (`tests/lincheck`).
//!
//! CI: 15 s of load; `LAKESTREAM_E2E_NIGHTLY=1`: 5 minutes.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use lakestream_e2e::api::Api;
use lakestream_e2e::checker::Load;
use lakestream_e2e::env;
use lakestream_e2e::history::History;
use lakestream_e2e::process::CompactionLog;
use lakestream_e2e::s3_faults::{S3FaultConfig, S3FaultProxy};

const SLOW_DOWN: &str = "s3 503 SlowDown";
const SLOW_PUT: &str = "s3 slow PUT";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_answering_503_slowdown_and_slow_puts_loses_no_acknowledged_entry() {
    let seed = common::seed("s3_slowdown");
    let length = env::fault_run_length(Duration::from_secs(15), Duration::from_secs(300))
        .unwrap_or_else(|e| panic!("{e}"));
    let upstream = common::s3().host_port().unwrap_or_else(|e| panic!("{e}"));
    let history = History::new();
    let faults = S3FaultConfig { slow_down: 0.2, slow_put: 0.2, max_put_delay: Duration::from_secs(2), seed };
    let proxy = S3FaultProxy::start_recording(upstream, faults, Some(history.clone())).await.unwrap();
    let dir = common::workdir("s3_slowdown");
    let mut service = common::all_in_one(dir.path(), "s3_slowdown", seed, |c| {
        c.s3_endpoint = proxy.url();
        // Few attempts, so some throttled PUTs fail after their retries.
        c.s3_max_attempts = 3;
    })
    .await;
    let api = Api::new(&service.url(), Duration::from_secs(30));
    let load = Load {
        namespace: "default".into(),
        stream: format!("s3-slowdown-{seed:x}"),
        partitions: 4,
        producers_per_partition: 2,
        entry_bytes: 1000,
        max_attempts: 100,
    };
    api.create_stream(&load.namespace, &load.stream, load.partitions).await.unwrap_or_else(|e| panic!("{e}"));
    let run = common::LinRun::start(history, vec![api.clone()], api.clone(), &load, seed);
    tokio::time::sleep(length).await;

    // Verify without the faults: they are in the run, not in the verification.
    proxy.set_enabled(false);
    let verifier = Api::new(&service.url(), Duration::from_secs(120));
    let (report, _) = run.finish(&verifier, "s3_slowdown", dir.path(), &[SLOW_DOWN, SLOW_PUT]).await;
    let s = proxy.stats();
    println!(
        "s3_slowdown: {length:?} of load; proxy: {} requests, {} answered 503 SlowDown, {} PUTs held before and {} after \
         the server stored them; {} appends failed, {} of unknown outcome",
        s.requests.load(Ordering::Relaxed),
        s.slow_downs.load(Ordering::Relaxed),
        s.puts_held_before.load(Ordering::Relaxed),
        s.puts_held_after.load(Ordering::Relaxed),
        report.failed_attempts,
        report.unknown,
    );
    println!("s3_slowdown: {:?}", CompactionLog::of(&service.log_text()));
    common::assert_no_panics(&[&service]);
    service.kill9().unwrap_or_else(|e| panic!("{e}"));
}
