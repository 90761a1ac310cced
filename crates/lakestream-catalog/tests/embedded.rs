//! The catalog suite against the embedded (redb) store, plus durability across a reopen.

#[macro_use]
mod suite;

use std::collections::BTreeMap;
use std::sync::Arc;

use lakestream_catalog::{Catalog, CatalogError};
use lakestream_meta::{EmbeddedStore, MetaStore};

async fn embedded_store() -> (Arc<dyn MetaStore>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = EmbeddedStore::open(dir.path().join("meta.redb")).await.expect("a new store file");
    (Arc::new(store), dir)
}

catalog_suite!(embedded_store);

/// [Catalog] Dropping a stream MUST record a *durable* tombstone: it survives closing and
/// reopening the store, and so do layouts and the log-ID counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tombstones_layouts_and_the_counter_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta.redb");
    let (kept, dropped_logs) = {
        let store = EmbeddedStore::open(&path).await.unwrap();
        let catalog = Catalog::new(Arc::new(store.clone()), suite::test_config()).unwrap();
        catalog.create_namespace("ns", BTreeMap::new()).await.unwrap();
        let kept = catalog.create_stream("ns", "kept", 2, BTreeMap::new()).await.unwrap();
        let dropped = catalog.create_stream("ns", "dropped", 1, BTreeMap::new()).await.unwrap();
        catalog.drop_stream("ns", "dropped").await.unwrap();
        catalog.drop_stream("ns", "never-created").await.unwrap();
        drop(catalog);
        store.close().await.unwrap();
        (kept, dropped.logs)
    };
    let store = EmbeddedStore::open(&path).await.unwrap();
    let catalog = Catalog::new(Arc::new(store), suite::test_config()).unwrap();
    for name in ["dropped", "never-created"] {
        let err = catalog.create_stream("ns", name, 1, BTreeMap::new()).await.unwrap_err();
        assert!(matches!(err, CatalogError::StreamDropped { .. }), "{name}: {err}");
    }
    assert_eq!(catalog.get_stream("ns", "kept").await.unwrap(), kept);
    let fresh = catalog.create_stream("ns", "fresh", 1, BTreeMap::new()).await.unwrap();
    for old in kept.logs.iter().chain(&dropped_logs) {
        assert!(fresh.logs[0] > *old, "log ID {} reused or lowered after reopen", fresh.logs[0]);
    }
}
