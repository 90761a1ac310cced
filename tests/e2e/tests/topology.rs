//! The separate-process topology of production: a catalog, two writers, a reader and a
//! compactor process sharing a real Oxia server and the S3 server. Only Oxia gives processes
//! a shared metadata store, so this suite needs one: it starts its own from the binary that
//! `scripts/test` names in `LAKESTREAM_TEST_OXIA_BIN`. Without it the test fails with
//! instructions (it never skips).
//!
//! It checks create (catalog) → produce (both writers) → consume (reader) → compact
//! (compactor) → consume again, identical; then runs the checker's producers through both
//! writers at once, on the same logs, while each process is killed with SIGKILL and restarted
//! once (six times in a nightly run, `LAKESTREAM_E2E_NIGHTLY=1`), tail readers read through
//! the reader and a trimmer trims, and verifies through the reader: the sequence checker, and
//! the linearizability checker over the history of every operation (`tests/lincheck`). With
//! the `testcontainers` feature, a second test starts Oxia and MinIO in Docker.

mod common;

use std::time::Duration;

use lakestream_e2e::api::Api;
use lakestream_e2e::checker::Load;
use lakestream_e2e::config::{Compaction, Metadata, Roles, ServiceConfig};
use lakestream_e2e::env::{self, S3Env};
use lakestream_e2e::history::History;
use lakestream_e2e::process::{CompactionLog, Service, free_port};
use lakestream_e2e::rng::Rng;

const NS: &str = "default";

async fn start(
    role: &str,
    roles: Roles,
    dir: &std::path::Path,
    oxia: &str,
    s3: &S3Env,
    prefix: &str,
) -> Service {
    let port = free_port().unwrap_or_else(|e| panic!("{e}"));
    let mut c = ServiceConfig::all_in_one(port, dir.join("unused.redb"), s3.clone(), prefix);
    c.roles = roles;
    c.metadata = Metadata::Oxia { addresses: vec![oxia.to_string()], namespace: "default".into() };
    c.compaction = Compaction { max_range_age: Duration::from_secs(1), ..Compaction::frantic() };
    Service::start(role, dir, &c).await.unwrap_or_else(|e| panic!("{e}"))
}

/// The whole scenario against an Oxia server at `oxia` and the S3 server `s3`.
async fn separate_processes(oxia: &str, s3: S3Env, suite: &str) {
    let seed = common::seed(suite);
    let rng = Rng::new(seed);
    let dir = common::workdir(suite);
    // Oxia keeps its state across runs: every run has its own S3 prefix and stream names.
    let prefix = common::run_id(suite, seed);
    let mut procs = [
        start("catalog", Roles::CATALOG, dir.path(), oxia, &s3, &prefix).await,
        start("writer-a", Roles::WRITER, dir.path(), oxia, &s3, &prefix).await,
        start("writer-b", Roles::WRITER, dir.path(), oxia, &s3, &prefix).await,
        start("reader", Roles::READER, dir.path(), oxia, &s3, &prefix).await,
        start("compactor", Roles::COMPACTOR, dir.path(), oxia, &s3, &prefix).await,
    ];
    const CATALOG: usize = 0;
    const WRITER_A: usize = 1;
    const WRITER_B: usize = 2;
    const READER: usize = 3;
    const COMPACTOR: usize = 4;
    let catalog = Api::new(&procs[CATALOG].url(), Duration::from_secs(10));
    let writers = [WRITER_A, WRITER_B].map(|i| Api::new(&procs[i].url(), Duration::from_secs(10)));
    let r = Api::new(&procs[READER].url(), Duration::from_secs(30));

    // create → produce through both writers → consume → compact → consume again.
    let stream = format!("topology-{seed:x}");
    let logs = catalog.create_stream(NS, &stream, 3).await.unwrap_or_else(|e| panic!("{e}"));
    let mut acked = 0;
    for w in &writers {
        acked += common::produce_varied(w, NS, &stream, 3, &rng).await;
    }
    let before = common::read_partitions(&r, NS, &stream, 3, Duration::from_secs(30)).await;
    assert_eq!(
        before.values().map(Vec::len).sum::<usize>(),
        acked,
        "the reader process reads every entry both writers acknowledged"
    );
    common::wait_compacted(&procs[COMPACTOR], &logs, &before, Duration::from_secs(90)).await;
    let after = common::read_partitions(&r, NS, &stream, 3, Duration::from_secs(30)).await;
    common::assert_identical(&before, &after, "after the compactor process compacted them");

    // The checker under load while each process is killed once and restarted.
    let load = Load {
        namespace: NS.into(),
        stream: format!("topology-checker-{seed:x}"),
        partitions: 3,
        producers_per_partition: 2,
        entry_bytes: 300,
        max_attempts: 400,
    };
    catalog.create_stream(NS, &load.stream, load.partitions).await.unwrap_or_else(|e| panic!("{e}"));
    // The checker's producers through both writers, tail readers through the reader and a
    // trimmer through writer-a, all recorded for the linearizability checker.
    let run = common::LinRun::start(History::new(), writers.to_vec(), r.clone(), &load, seed);
    let rounds = if env::nightly() { 6 } else { 1 };
    for _ in 0..rounds {
        for i in [WRITER_A, COMPACTOR, READER, WRITER_B, CATALOG] {
            let service = &mut procs[i];
            tokio::time::sleep(Duration::from_millis(rng.between(1000, 3000))).await;
            println!("{suite}: kill -9 {} (pid {:?})", service.name(), service.pid());
            run.history.fault(&format!("kill -9 {}", role_of(service.name())));
            service.kill9().unwrap_or_else(|e| panic!("{e}"));
            tokio::time::sleep(Duration::from_millis(rng.between(0, 500))).await;
            service.restart().await.unwrap_or_else(|e| panic!("{e}"));
        }
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The verifier's reads may be slow (a WAL of many small objects): a long request timeout.
    let verifier = Api::new(&procs[READER].url(), Duration::from_secs(120));
    let faults = ["kill -9 writer", "kill -9 reader", "kill -9 compactor", "kill -9 catalog"];
    run.finish(&verifier, suite, dir.path(), &faults).await;
    println!("{suite}: compactor {:?}", CompactionLog::of(&procs[COMPACTOR].log_text()));
    common::assert_no_panics(&procs.iter().collect::<Vec<_>>());
    for s in &mut procs {
        s.kill9().unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The role a process of this suite serves, from its name (`writer-a` → `writer`).
fn role_of(name: &str) -> &str {
    name.split('-').next().unwrap_or(name)
}

/// On an Oxia server of its own (a fresh `oxia standalone --shards 4`, binary from
/// `LAKESTREAM_TEST_OXIA_BIN`): a deployment records its storage roots in the metadata store
/// and a service with other roots refuses to start, so each run, with its own S3 prefix, needs
/// a metadata store of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_writers_reader_and_compactor_as_separate_processes_on_oxia() {
    let oxia = lakestream_meta_oxia::testkit::StandaloneOxia::start(4, &[]).await;
    separate_processes(&oxia.address(), common::s3(), "topology").await;
}

#[cfg(feature = "testcontainers")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_processes_on_oxia_and_minio_in_docker() {
    let containers = lakestream_e2e::containers::Containers::start().await.unwrap_or_else(|e| panic!("{e}"));
    println!("containers: {containers:?}");
    separate_processes(&containers.oxia_addr, containers.s3.clone(), "topology_docker").await;
}
