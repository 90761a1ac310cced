//! The catalog suite against a real Oxia server: each scenario gets a fresh
//! `oxia standalone --shards 4` of its own (the suite's scenarios list and count everything
//! in the store, so they cannot share one), so that the catalog partition and the logs'
//! partitions land on different shards, as in production. The binary comes from
//! `LAKESTREAM_TEST_OXIA_BIN`, which `scripts/test` sets; without it every test fails with
//! instructions.

#[macro_use]
mod suite;

use std::sync::Arc;

use lakestream_meta::MetaStore;
use lakestream_meta_oxia::testkit::StandaloneOxia;

async fn oxia_store() -> (Arc<dyn MetaStore>, StandaloneOxia) {
    let server = StandaloneOxia::start(4, &[]).await;
    (Arc::new(server.store().await), server)
}

catalog_suite!(oxia_store);
