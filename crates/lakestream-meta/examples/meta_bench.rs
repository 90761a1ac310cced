//! A light throughput benchmark of the local stores: ops/s of put, get and sequenced put on
//! the embedded (redb) store, with the in-memory store measured in the same run as the
//! baseline. Prints each figure and the embedded / in-memory ratio.
//!
//! ```text
//! cargo run -p lakestream-meta --example meta_bench [--release] -- [ops]
//! ```
//!
//! The first three figures run operations one after another from one task, so they are
//! per-client latency turned into a rate; each embedded write is a durable (fsync'd) commit.
//! The last runs sequenced puts from 16 concurrent clients, one prefix each (as the writer's
//! per-log publishers do): the embedded store commits concurrent writes in groups, one fsync
//! per group.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use lakestream_meta::{EmbeddedStore, InMemoryStore, MetaStore, PutCondition};

/// Concurrent clients of the last figure.
const CLIENTS: usize = 16;

/// Ops/s of put, get, sequenced put, and sequenced put from concurrent clients against `store`.
async fn measure(store: Arc<dyn MetaStore>, ops: usize) -> [f64; 4] {
    let value = Bytes::from(vec![7u8; 64]);
    let rate = |started: Instant| ops as f64 / started.elapsed().as_secs_f64();

    let started = Instant::now();
    for i in 0..ops {
        store.put("1", &format!("/bench/{i}"), value.clone(), PutCondition::None).await.expect("put");
    }
    let put = rate(started);

    let started = Instant::now();
    for i in 0..ops {
        store.get("1", &format!("/bench/{i}")).await.expect("get").expect("present");
    }
    let get = rate(started);

    let started = Instant::now();
    for _ in 0..ops {
        store
            .sequenced_put("1", "00000000000000000001", &[1, 64], value.clone())
            .await
            .expect("sequenced put");
    }
    let sequenced = rate(started);

    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (store, value) = (Arc::clone(&store), value.clone());
            tokio::spawn(async move {
                let prefix = format!("{:020}", 100 + c);
                for _ in 0..ops / CLIENTS {
                    store.sequenced_put("1", &prefix, &[1, 64], value.clone()).await.expect("sequenced put");
                }
            })
        })
        .collect();
    for client in clients {
        client.await.expect("client task");
    }
    let concurrent = (ops / CLIENTS * CLIENTS) as f64 / started.elapsed().as_secs_f64();
    [put, get, sequenced, concurrent]
}

#[tokio::main]
async fn main() {
    let ops: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(500);
    let dir = tempfile::tempdir().expect("temp dir");
    let embedded: Arc<dyn MetaStore> =
        Arc::new(EmbeddedStore::open(dir.path().join("bench.redb")).await.expect("open embedded store"));
    let memory: Arc<dyn MetaStore> = Arc::new(InMemoryStore::new());

    let baseline = measure(memory, ops).await;
    let durable = measure(embedded, ops).await;

    println!("{ops} sequential ops per figure");
    println!("{:<15} {:>14} {:>14} {:>10}", "operation", "in-memory/s", "embedded/s", "ratio");
    let names = ["put", "get", "sequenced put", "seq. put x16"];
    for (name, (m, e)) in names.iter().zip(baseline.iter().zip(durable.iter())) {
        println!("{name:<15} {m:>14.0} {e:>14.0} {:>10.4}", e / m);
    }
}
