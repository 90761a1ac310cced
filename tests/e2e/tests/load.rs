//! Sustained load: a target rate of 1 KiB entries (default 2,000/s over 4 partitions, on
//! loopback) held for a bounded time while the server's resident memory is sampled every
//! second from `/proc/<pid>/status`. Asserts that no append failed, that each partition's
//! next offset is the count acknowledged (one partition is read back whole, the others' tails),
//! and that memory stays flat: the last window's peak is at most
//! 1.5 × the first window's peak + 64 MiB (windows of a minute, or a third of a shorter
//! run). No timing is asserted; the achieved rate is printed.
//!
//! CI: 30 s. Soak: `LAKESTREAM_SOAK_SECS=600 nice -n 10 cargo test -p lakestream-e2e --test load -- --nocapture`
//! (`LAKESTREAM_LOAD_RATE` changes the rate).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use lakestream_e2e::api::{Api, Outcome};
use lakestream_e2e::checker::{parse_payload, payload};
use lakestream_e2e::config::Compaction;
use lakestream_e2e::env;

const NS: &str = "default";
const PARTITIONS: u32 = 4;
const ENTRY_BYTES: usize = 1024;
const MIB: u64 = 1 << 20;

#[derive(Debug, Default)]
struct Counters {
    acked: AtomicU64,
    errors: AtomicU64,
}

/// Holds `rate / PARTITIONS` entries per second on one partition: every 50 ms it sends what
/// the schedule owes in one request (so a slow answer makes the next batch larger, not the
/// rate lower). Returns the entries acknowledged and the first error seen.
async fn partition_load(
    api: Api,
    stream: String,
    p: u32,
    per_second: f64,
    length: Duration,
    counters: Arc<Counters>,
) -> (u64, Option<String>) {
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut seq, mut first_error) = (0u64, None);
    while started.elapsed() < length {
        tick.tick().await;
        let owed = (started.elapsed().as_secs_f64() * per_second) as u64;
        let n = owed.saturating_sub(seq).min(2000);
        if n == 0 {
            continue;
        }
        let batch: Vec<(Bytes, u32)> = (seq..seq + n).map(|s| (payload((p, 0, s), ENTRY_BYTES), 1)).collect();
        for (i, outcome) in api.produce(NS, &stream, p, &batch).await.into_iter().enumerate() {
            match outcome {
                Outcome::Acked { offset, .. } if offset == seq + i as u64 => {
                    counters.acked.fetch_add(1, Ordering::Relaxed);
                }
                other => {
                    counters.errors.fetch_add(1, Ordering::Relaxed);
                    first_error
                        .get_or_insert_with(|| format!("partition {p}, entry {}: {other:?}", seq + i as u64));
                }
            }
        }
        seq += n;
    }
    (seq, first_error)
}

/// Reads a partition back from `from` without keeping it: every entry must be the one sent
/// at its offset.
async fn verify_partition(api: &Api, stream: &str, p: u32, from: u64, expected: u64) -> Result<(), String> {
    let mut next = from;
    while next < expected {
        let batch = api.fetch(NS, stream, p, next, 4 << 20).await.map_err(|e| e.to_string())?;
        if batch.entries.is_empty() {
            return Err(format!("partition {p}: nothing at offset {next} of {expected}"));
        }
        for e in &batch.entries {
            if e.offset != next || parse_payload(&e.payload) != Some((p, 0, next)) {
                return Err(format!(
                    "partition {p}: entry at offset {} is not the one sent at {next}",
                    e.offset
                ));
            }
            next += 1;
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sustained_rate_runs_without_errors_in_flat_memory() {
    let seed = common::seed("load");
    let length = env::soak_or(Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}"));
    let rate = env::number("LAKESTREAM_LOAD_RATE", 2000).unwrap_or_else(|e| panic!("{e}"));
    let dir = common::workdir("load");
    let service = common::all_in_one(dir.path(), "load", seed, |c| {
        c.compaction = Compaction::steady();
        c.flush_window = Duration::from_millis(20);
        c.reader_cache_bytes = 64 << 20;
    })
    .await;
    let pid = service.pid().expect("running");
    let api = Api::new(&service.url(), Duration::from_secs(60));
    let stream = format!("load-{seed:x}");
    api.create_stream(NS, &stream, PARTITIONS).await.unwrap_or_else(|e| panic!("{e}"));

    let counters = Arc::new(Counters::default());
    let mut tasks = Vec::new();
    for p in 0..PARTITIONS {
        let per_second = rate as f64 / f64::from(PARTITIONS);
        tasks.push(tokio::spawn(partition_load(
            api.clone(),
            stream.clone(),
            p,
            per_second,
            length,
            counters.clone(),
        )));
    }
    // RSS every second while the load runs.
    let started = Instant::now();
    let mut samples: Vec<(u64, u64)> = Vec::new(); // (second, bytes)
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut printed_minute = 0;
    while started.elapsed() < length {
        tick.tick().await;
        if let Some(rss) = lakestream_e2e::process::rss_bytes(pid) {
            samples.push((started.elapsed().as_secs(), rss));
        }
        let minute = started.elapsed().as_secs() / 60;
        if minute > printed_minute {
            printed_minute = minute;
            println!(
                "load: t={}s acked={} errors={} rss={} MiB",
                minute * 60,
                counters.acked.load(Ordering::Relaxed),
                counters.errors.load(Ordering::Relaxed),
                samples.last().map_or(0, |x| x.1 / MIB)
            );
        }
    }
    let mut sent = Vec::new();
    let mut first_error = None;
    for t in tasks {
        let (n, e) = t.await.unwrap();
        sent.push(n);
        first_error = first_error.or(e);
    }
    let elapsed = started.elapsed();
    let acked = counters.acked.load(Ordering::Relaxed);
    let errors = counters.errors.load(Ordering::Relaxed);
    println!(
        "load: target {rate}/s of {ENTRY_BYTES} B for {length:?}: {acked} acknowledged, {errors} errors, achieved {:.0}/s",
        acked as f64 / elapsed.as_secs_f64()
    );

    // Memory: the peak per minute (or per window), first against last.
    let window = (length.as_secs() / 3).clamp(1, 60);
    let peak = |from: u64, to: u64| samples.iter().filter(|(s, _)| *s >= from && *s < to).map(|x| x.1).max();
    let buckets = length.as_secs().div_ceil(window);
    let summary: Vec<String> = (0..buckets)
        .filter_map(|b| peak(b * window, (b + 1) * window).map(|p| format!("{}s:{}", b * window, p / MIB)))
        .collect();
    println!("load: RSS peak per {window} s window, MiB: {}", summary.join(" "));
    let first = peak(0, window).expect("an RSS sample in the first window");
    let last =
        peak(length.as_secs().saturating_sub(window), u64::MAX).expect("an RSS sample in the last window");
    println!(
        "load: RSS first-window peak {} MiB, last-window peak {} MiB (ratio {:.2})",
        first / MIB,
        last / MIB,
        last as f64 / first as f64
    );

    assert_eq!(errors, 0, "appends failed under load; the first: {first_error:?}");
    assert!(acked > 0, "nothing was acknowledged");
    // Every partition holds exactly what was acknowledged; one (chosen by the seed) is read
    // back whole and the others' last 1,000 entries (reading all costs more than the run).
    let whole = (seed % u64::from(PARTITIONS)) as usize;
    for (p, &n) in sent.iter().enumerate() {
        let offsets = api.offsets(NS, &stream, p as u32).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(offsets.next_offset, n, "partition {p}: next offset vs entries acknowledged");
        let from = if p == whole { 0 } else { n.saturating_sub(1000) };
        verify_partition(&api, &stream, p as u32, from, n).await.unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(
        last <= first + first / 2 + 64 * MIB,
        "resident memory grew: first-window peak {} MiB, last-window peak {} MiB",
        first / MIB,
        last / MIB
    );
}
