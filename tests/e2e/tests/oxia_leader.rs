//! The Oxia leader killed under load: `lakestream serve` (every role) with its metadata on an
//! Oxia cluster as production runs it — a coordinator and three data servers, replication
//! factor 3, four shards (`OxiaCluster`, the binary from `LAKESTREAM_TEST_OXIA_BIN`) — and
//! its objects on the S3 server. While producers append, tail readers read and a trimmer
//! trims, the data server leading the shard that holds most of the stream's logs is killed
//! with SIGKILL, restarted a few seconds later on its directories, and (in longer runs)
//! again. Then the sequence checker reads everything back and the history of every operation
//! goes to the linearizability checker (`tests/lincheck`).
//!
//! CI: one kill in 12 s of load; `LAKESTREAM_E2E_NIGHTLY=1`: kills for 5 minutes. Fails,
//! never skips, without an Oxia binary or an S3 server.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lakestream_e2e::api::Api;
use lakestream_e2e::checker::Load;
use lakestream_e2e::config::{Metadata, ServiceConfig};
use lakestream_e2e::env;
use lakestream_e2e::history::History;
use lakestream_e2e::process::{CompactionLog, Service, free_port};
use lakestream_e2e::rng::Rng;
use lakestream_format::{LogId, keys};
use lakestream_meta_oxia::ShardId;
use lakestream_meta_oxia::testkit::OxiaCluster;

const KILL: &str = "kill -9 oxia leader";

/// The data server that leads the shard holding most of `logs`, and that shard's id.
fn busiest_leader(cluster: &OxiaCluster, logs: &[u64]) -> (usize, ShardId) {
    let map = cluster.shard_map();
    let mut per_shard: BTreeMap<ShardId, usize> = BTreeMap::new();
    for &log in logs {
        let shard = map
            .shard_for_key(&keys::partition(LogId(log)))
            .unwrap_or_else(|| panic!("no shard holds log {log}"));
        *per_shard.entry(shard.id).or_default() += 1;
    }
    let (&shard, _) = per_shard.iter().max_by_key(|(_, n)| **n).expect("at least one log");
    let leader = cluster.leader_of(shard).unwrap_or_else(|| panic!("shard {shard} has no leader"));
    (leader, shard)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oxia_leader_of_the_streams_shard_killed_under_load() {
    let seed = common::seed("oxia_leader");
    let rng = Rng::new(seed);
    let length = env::fault_run_length(Duration::from_secs(12), Duration::from_secs(300))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut cluster = OxiaCluster::start().await;
    println!("oxia_leader: cluster {:?}", cluster.command_lines());
    let dir = common::workdir("oxia_leader");
    let port = free_port().unwrap_or_else(|e| panic!("{e}"));
    let mut config = ServiceConfig::all_in_one(
        port,
        dir.path().join("unused.redb"),
        common::s3(),
        &common::run_id("oxia_leader", seed),
    );
    config.metadata = Metadata::Oxia { addresses: cluster.addresses(), namespace: "default".into() };
    let mut service =
        Service::start("lakestream", dir.path(), &config).await.unwrap_or_else(|e| panic!("{e}"));
    let api = Api::new(&service.url(), Duration::from_secs(10));
    let load = Load {
        namespace: "default".into(),
        stream: format!("oxia-leader-{seed:x}"),
        partitions: 4,
        producers_per_partition: 2,
        entry_bytes: 300,
        max_attempts: 400,
    };
    let logs = api
        .create_stream(&load.namespace, &load.stream, load.partitions)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let run = common::LinRun::start(History::new(), vec![api.clone()], api.clone(), &load, seed);

    let started = Instant::now();
    let mut kills = 0;
    // Each round: load, kill the busiest shard's leader, let the cluster elect another and
    // the appends resume, restart the server and wait until the coordinator has taken it
    // back (so that the next kill leaves a quorum).
    while started.elapsed() + Duration::from_secs(6) < length || kills == 0 {
        tokio::time::sleep(Duration::from_millis(rng.between(2000, 4000))).await;
        let (victim, shard) = busiest_leader(&cluster, &logs);
        println!(
            "oxia_leader: {:.1}s: kill -9 oxia server {victim} (pid {:?}), leader of shard {shard}",
            started.elapsed().as_secs_f64(),
            cluster.server_pid(victim)
        );
        run.history.fault(KILL);
        cluster.kill9_server(victim);
        kills += 1;
        tokio::time::sleep(Duration::from_millis(rng.between(2000, 4000))).await;
        let leaders = cluster.wait_for_leaders(Duration::from_secs(60)).await;
        println!("oxia_leader: leaders after the kill {leaders:?}");
        cluster.restart_server(victim).await;
        let waited = cluster.wait_until_initialized(victim, Duration::from_secs(120)).await;
        println!("oxia_leader: server {victim} restarted and taken back after {waited:?}");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    let verifier = Api::new(&service.url(), Duration::from_secs(120));
    run.finish(&verifier, "oxia_leader", dir.path(), &[KILL]).await;
    println!("oxia_leader: {kills} leader kills; {:?}", CompactionLog::of(&service.log_text()));
    common::assert_no_panics(&[&service]);
    service.kill9().unwrap_or_else(|e| panic!("{e}"));
}
