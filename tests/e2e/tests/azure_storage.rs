//! `lakestream serve` on Azure Blob storage: the binary, with every role, the embedded
//! metadata store and both roots given as `az://` URLs on Azurite (the Azure Storage
//! emulator `scripts/test` starts). produce → consume from the WAL → compact → consume the
//! same entries from Parquet; both roots hold the objects afterwards.
//!
//! Not proven here: the real service's behaviour and throughput (the roots keep the default
//! `conditional_put = "atomic"`, which Azurite honours). GCS is not run end to end: fake-gcs-server 1.56.1 does
//! not accept object_store's XML-API uploads (see lakestream-objstore-cloud's
//! tests/emulators.rs).

mod common;

use std::time::Duration;

use futures::StreamExt;
use lakestream_e2e::api::Api;
use lakestream_e2e::config::Compaction;
use lakestream_e2e::env::AzureEnv;
use lakestream_e2e::rng::Rng;
use lakestream_objstore::{ObjectPrefix, ObjectStore};
use lakestream_objstore_cloud::{AzureConfig, CloudStore, testkit};

const NS: &str = "default";
const PARTITIONS: u32 = 2;

/// The objects below `{run}/{root}` in the container.
async fn objects_under(run: &str, root: &str) -> Vec<String> {
    let store = CloudStore::azure(AzureConfig {
        prefix: Some(format!("{run}/{root}")),
        ..testkit::azure_config("unused")
    })
    .expect("azure store");
    store.list(&ObjectPrefix::all(), None).map(|m| m.expect("list").path.to_string()).collect().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_azure_blob_round_trips_and_compacts() {
    let azure = AzureEnv::from_env().unwrap_or_else(|e| panic!("{e}"));
    let seed = common::seed("azure_storage");
    let rng = Rng::new(seed);
    let stream = format!("azure-{seed:x}");
    let run = common::run_id("azure_storage", seed);
    let dir = common::workdir("azure_storage");
    let mut service = common::all_in_one(dir.path(), "azure_storage", seed, |c| {
        c.azure = Some(azure);
        c.compaction = Compaction {
            max_range_bytes: 1 << 20,
            max_range_age: Duration::from_secs(2),
            ..Compaction::frantic()
        };
    })
    .await;
    let api = Api::new(&service.url(), Duration::from_secs(30));
    let logs = api.create_stream(NS, &stream, PARTITIONS).await.unwrap_or_else(|e| panic!("{e}"));
    let acked = common::produce_varied(&api, NS, &stream, PARTITIONS, &rng).await;
    let before = common::read_partitions(&api, NS, &stream, PARTITIONS, Duration::from_secs(30)).await;
    assert_eq!(before.values().map(Vec::len).sum::<usize>(), acked, "every acknowledged entry reads back");

    common::wait_compacted(&service, &logs, &before, Duration::from_secs(120)).await;
    let after = common::read_partitions(&api, NS, &stream, PARTITIONS, Duration::from_secs(30)).await;
    common::assert_identical(&before, &after, "after compaction on Azure Blob storage");

    let compacted = objects_under(&run, "compacted").await;
    assert!(
        compacted.iter().any(|p| p.ends_with(".parquet")),
        "the compacted root in Azurite holds Parquet files: {compacted:?}"
    );
    let status = service.terminate(Duration::from_secs(90)).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success(), "graceful stop: {status}");
}
