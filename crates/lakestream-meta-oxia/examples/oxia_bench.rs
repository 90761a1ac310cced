//! Throughput of sequenced puts through the pipelined client, against a real Oxia server.
//!
//! ```text
//! LAKESTREAM_TEST_OXIA=127.0.0.1:6648 cargo run --release -p lakestream-meta-oxia --example oxia_bench [puts]
//! ```
//!
//! Measures, in one run and on the same server:
//! 1. sequenced puts on **one log**, all issued at once through the pipelined write stream;
//! 2. sequenced puts spread over **64 logs**, issued at once;
//! 3. the baseline: **plain puts**, issued at once, to the same partitions as (2);
//! 4. sequenced puts on one log issued **one at a time** (each waits for the previous).
//!
//! It prints each rate and the ratios to the plain-put baseline, never absolute pass/fail
//! thresholds: the numbers depend on the server's disk and fsync settings.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::try_join_all;
use lakestream_format::{LogId, keys};
use lakestream_meta::{MetaResult, MetaStore, PutCondition};
use lakestream_meta_oxia::{OxiaConfig, OxiaStore};

const VALUE: &[u8] = &[0u8; 64];

#[allow(clippy::disallowed_methods)] // a bench binary may read the clock for fresh ids
fn fresh_base_log() -> u64 {
    let micros =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros());
    u64::try_from(micros % (1 << 60)).unwrap_or(0) * 128
}

/// Runs `puts` operations produced by `op(i)`, all issued at once; returns operations/s.
async fn rate<F, Fut>(puts: u64, op: F) -> MetaResult<f64>
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = MetaResult<()>>,
{
    let started = Instant::now();
    try_join_all((0..puts).map(op)).await?;
    Ok(per_second(puts, started.elapsed()))
}

fn per_second(ops: u64, elapsed: Duration) -> f64 {
    ops as f64 / elapsed.as_secs_f64().max(f64::EPSILON)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let address = std::env::var("LAKESTREAM_TEST_OXIA")
        .map_err(|_| "set LAKESTREAM_TEST_OXIA=host:port of an Oxia server (e.g. docker compose up oxia)")?;
    let puts: u64 = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 10_000,
    };
    let store = OxiaStore::connect(OxiaConfig::new([address])).await?;
    let base = fresh_base_log();
    let log = |n: u64| LogId(base + n);
    let store = &store;

    let one_log = rate(puts, |_| async move {
        let l = log(0);
        store
            .sequenced_put(&keys::partition(l), &keys::index_prefix(l), &[1, 64], Bytes::from_static(VALUE))
            .await?;
        Ok(())
    })
    .await?;

    let many_logs = rate(puts, |i| async move {
        let l = log(1 + i % 64);
        store
            .sequenced_put(&keys::partition(l), &keys::index_prefix(l), &[1, 64], Bytes::from_static(VALUE))
            .await?;
        Ok(())
    })
    .await?;

    let plain = rate(puts, |i| async move {
        let l = log(1 + i % 64);
        let key = format!("/lakestream-bench/{}/{i}", l.0);
        store.put(&keys::partition(l), &key, Bytes::from_static(VALUE), PutCondition::None).await?;
        Ok(())
    })
    .await?;

    let sequential_puts = puts.min(1_000);
    let started = Instant::now();
    let l = log(100);
    for _ in 0..sequential_puts {
        store
            .sequenced_put(&keys::partition(l), &keys::index_prefix(l), &[1, 64], Bytes::from_static(VALUE))
            .await?;
    }
    let one_at_a_time = per_second(sequential_puts, started.elapsed());

    println!("{puts} operations per pipelined case, {sequential_puts} one at a time");
    println!(
        "sequenced puts, 1 log, pipelined:   {one_log:>10.0}/s  ratio to plain puts {:.2}",
        one_log / plain
    );
    println!(
        "sequenced puts, 64 logs, pipelined: {many_logs:>10.0}/s  ratio to plain puts {:.2}",
        many_logs / plain
    );
    println!("plain puts, 64 partitions:          {plain:>10.0}/s  (baseline)");
    println!(
        "sequenced puts, 1 log, one at a time: {one_at_a_time:>8.0}/s  pipelining speed-up {:.1}x",
        one_log / one_at_a_time
    );
    Ok(())
}
