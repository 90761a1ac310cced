//! Dropped connections to S3: a TCP proxy on loopback between the service and the S3 server
//! resets a share of the connections mid-request. Producers append sequence-numbered entries
//! meanwhile, tail readers read and a trimmer trims; the checker then finds no acknowledged
//! entry lost or reordered, and the history of every operation is linearizable
//! (`tests/lincheck`).
//!
//! CI: 10 s of load; `LAKESTREAM_E2E_NIGHTLY=1`: 5 minutes. Soak:
//! `LAKESTREAM_SOAK_SECS=600 nice -n 10 cargo test -p lakestream-e2e --test s3_drops -- --nocapture`.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use lakestream_e2e::api::Api;
use lakestream_e2e::checker::Load;
use lakestream_e2e::env;
use lakestream_e2e::history::History;
use lakestream_e2e::process::CompactionLog;
use lakestream_e2e::proxy::{FaultProxy, ProxyConfig};

const RESET: &str = "s3 connection reset";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_to_s3_reset_at_random_lose_no_acknowledged_entry() {
    let seed = common::seed("s3_drops");
    let length = env::fault_run_length(Duration::from_secs(10), Duration::from_secs(300))
        .unwrap_or_else(|e| panic!("{e}"));
    let s3 = common::s3();
    let upstream = s3.host_port().unwrap_or_else(|e| panic!("{e}"));
    let history = History::new();
    let proxy = FaultProxy::start_recording(
        upstream,
        // The S3 client keeps connections alive across requests and routes its traffic over
        // whichever survive, so every connection is doomed, each after a random amount of
        // traffic (256 KiB on average): resets keep coming for the whole run.
        ProxyConfig { reset_probability: 1.0, max_bytes_before_reset: 512 << 10, seed },
        Some((history.clone(), RESET)),
    )
    .await
    .unwrap();
    let dir = common::workdir("s3_drops");
    let mut service = common::all_in_one(dir.path(), "s3_drops", seed, |c| {
        c.s3_endpoint = proxy.url();
        // Fewer S3 retries than the default, so some resets reach the writer as failures.
        c.s3_max_attempts = 3;
    })
    .await;
    let api = Api::new(&service.url(), Duration::from_secs(30));
    let load = Load {
        namespace: "default".into(),
        stream: format!("s3-drops-{seed:x}"),
        partitions: 4,
        producers_per_partition: 2,
        entry_bytes: 2000,
        max_attempts: 50,
    };
    api.create_stream(&load.namespace, &load.stream, load.partitions).await.unwrap_or_else(|e| panic!("{e}"));
    let run = common::LinRun::start(history, vec![api.clone()], api.clone(), &load, seed);
    tokio::time::sleep(length).await;

    // Verify over clean connections: the faults are in the run, not in the verification.
    proxy.set_enabled(false);
    // The verifier's reads may be slow (a WAL of many small objects): a long request timeout.
    let verifier = Api::new(&service.url(), Duration::from_secs(120));
    let (_, _) = run.finish(&verifier, "s3_drops", dir.path(), &[RESET]).await;
    let stats = proxy.stats();
    let (connections, resets) =
        (stats.connections.load(Ordering::Relaxed), stats.resets.load(Ordering::Relaxed));
    println!("s3_drops: {length:?} of load; proxy: {connections} connections, {resets} reset");
    println!("s3_drops: {:?}", CompactionLog::of(&service.log_text()));
    assert!(resets > 0, "the proxy reset no connection ({connections} accepted): the run proves nothing");
    common::assert_no_panics(&[&service]);
    service.kill9().unwrap_or_else(|e| panic!("{e}"));
}
