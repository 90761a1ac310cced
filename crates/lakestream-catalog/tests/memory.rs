//! The catalog suite against the in-memory store (with several virtual shards, so that the
//! catalog partition and the logs' partitions land on different shards).

#[macro_use]
mod suite;

use std::sync::Arc;

use lakestream_format::SystemClock;
use lakestream_meta::{InMemoryStore, MetaStore};

async fn in_memory_store() -> (Arc<dyn MetaStore>, ()) {
    let store = InMemoryStore::with_config(4, Arc::new(SystemClock)).expect("four shards are valid");
    (Arc::new(store), ())
}

catalog_suite!(in_memory_store);
