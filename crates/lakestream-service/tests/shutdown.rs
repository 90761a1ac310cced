//! A shutdown is bounded by `shutdown.timeout`, also when the metadata store stops answering
//! (issue #34: with Oxia unreachable a shutdown waited out request timeouts and the session,
//! past Kubernetes' 30 s grace period). Runs on an Oxia server of the test's own, which it
//! freezes with SIGSTOP (connections stay open and nothing answers: the worst case).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use lakestream_meta_oxia::testkit::StandaloneOxia;
use lakestream_service::api::{PartitionRef, ProduceInput};
use lakestream_service::config::MetadataConfig;
use lakestream_service::{Service, ServiceConfig, Shutdown};

/// A service on `oxia` and the local filesystem that has appended one entry, so that its
/// writer holds a write lease to release at shutdown.
async fn service_holding_a_lease(oxia: &StandaloneOxia, dir: &std::path::Path) -> Service {
    let mut config = ServiceConfig::dev(dir);
    config.metadata = MetadataConfig::oxia(vec![oxia.address()]);
    config.shutdown.timeout = Duration::from_secs(2);
    let service = Service::start(&config).await.expect("the service starts on Oxia");
    let api = service.api();
    let caller = api.admit(None, None).unwrap();
    api.create_stream(&caller, "default", "orders", Some(1), BTreeMap::new()).await.unwrap();
    let target = PartitionRef { namespace: "default", stream: "orders", partition: 0 };
    let entry = ProduceInput::Entries(vec![(Bytes::from_static(b"first"), 1)]);
    api.produce(&caller, target, entry).await.expect("an append, under a write lease");
    service
}

fn signal(oxia: &StandaloneOxia, signal: &str) {
    let pid = oxia.pid().expect("the Oxia server runs").to_string();
    let status = Command::new("kill").args([signal, &pid]).status().expect("run kill");
    assert!(status.success(), "kill {signal} {pid}");
}

#[tokio::test]
async fn a_shutdown_with_the_metadata_store_frozen_gives_up_at_its_deadline() {
    let oxia = StandaloneOxia::start(1, &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let service = service_holding_a_lease(&oxia, dir.path()).await;
    signal(&oxia, "-STOP");
    // The guard only keeps a hang from stalling the suite; the assertion is the outcome.
    let outcome = tokio::time::timeout(Duration::from_secs(120), service.shutdown()).await;
    signal(&oxia, "-CONT");
    assert_eq!(outcome.expect("the shutdown hung"), Shutdown::DeadlinePassed);
}

#[tokio::test]
async fn a_shutdown_with_the_metadata_store_up_completes() {
    let oxia = StandaloneOxia::start(1, &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let service = service_holding_a_lease(&oxia, dir.path()).await;
    let outcome = tokio::time::timeout(Duration::from_secs(120), service.shutdown()).await;
    assert_eq!(outcome.expect("the shutdown hung"), Shutdown::Complete);
}

#[test]
fn the_shutdown_timeout_must_be_positive_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["0s", "11m"] {
        let toml = format!("{}\n[shutdown]\ntimeout = \"{bad}\"\n", ServiceConfig::dev_toml(dir.path()));
        let config: ServiceConfig = toml::from_str(&toml).unwrap();
        let err = config.validate().unwrap_err();
        assert_eq!(err.key, "shutdown.timeout", "{err}");
    }
    assert_eq!(ServiceConfig::dev(dir.path()).shutdown.timeout, Duration::from_secs(10));
}
