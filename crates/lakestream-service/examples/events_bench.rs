//! CloudEvents ingest with deduplication against the plain produce path of the same events,
//! measured in the same run on the same stack: the ledger's cost as a ratio.
//!
//! ```text
//! cargo run --release -p lakestream-service --features testkit --example events_bench -- \
//!     [--meta embedded|memory] [--partitions 4] [--batch 10] [--producers 64] [--seconds 5]
//! ```
//! Both paths encode each request's events as one Kafka record batch per partition and append
//! it through the same writer; the deduplicated path (`events::ingest`) adds the ledger's
//! claim and complete writes. Objects go to the local filesystem; metadata to the embedded
//! (redb, `lakestream dev`'s) or in-memory store. Prints a Markdown table and a JSON line.
#![allow(clippy::disallowed_methods)] // a benchmark reads the real clock

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use lakestream_cloudevents::{CloudEvent, json, kafka};
use lakestream_service::ServiceConfig;
use lakestream_service::config::MetadataConfig;
use lakestream_service::testkit::Stack;

struct Args {
    meta: String,
    partitions: u32,
    batch: usize,
    producers: usize,
    seconds: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args { meta: "embedded".into(), partitions: 4, batch: 10, producers: 64, seconds: 5 };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let key = pair[0].as_str();
        let value = pair.get(1).ok_or_else(|| format!("{key} needs a value"))?;
        let num = || value.parse::<u64>().map_err(|_| format!("{key}: {value:?} is not a number"));
        match key {
            "--meta" => a.meta = value.clone(),
            "--partitions" => a.partitions = num()? as u32,
            "--batch" => a.batch = num()? as usize,
            "--producers" => a.producers = num()? as usize,
            "--seconds" => a.seconds = num()?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.partitions == 0 || a.batch == 0 || a.producers == 0 || a.seconds == 0 {
        return Err("every number must be at least 1".into());
    }
    Ok(a)
}

/// The events of one request of one producer: unique ids, a partition key per producer (so a
/// request maps to one partition, like a keyed sender's), a small JSON payload.
fn request_events(producer: usize, request: u64, batch: usize, path: &str) -> Vec<CloudEvent> {
    (0..batch)
        .map(|i| {
            let body = format!(
                r#"{{"specversion":"1.0","id":"{path}-{producer}-{request}-{i}","source":"/bench/{producer}","type":"dev.lakestream.bench","partitionkey":"p{producer}","time":"2024-01-01T00:00:00Z","data":{{"n":{i},"payload":"0123456789abcdef0123456789abcdef"}}}}"#
            );
            json::decode_event(body.as_bytes()).expect("the bench's events are valid")
        })
        .collect()
}

/// Runs `producers` loops for `seconds`; returns events per second.
async fn measure<F, Fut>(args: &Args, run: F) -> f64
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = usize> + Send,
{
    let run = Arc::new(run);
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.seconds);
    let tasks: Vec<_> = (0..args.producers)
        .map(|producer| {
            let (run, done) = (run.clone(), done.clone());
            tokio::spawn(async move {
                let mut request = 0;
                while Instant::now() < deadline {
                    let n = run(producer, request).await;
                    done.fetch_add(n as u64, Ordering::Relaxed);
                    request += 1;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a producer panicked");
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = parse_args()?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut config = ServiceConfig::dev(dir.path());
    config.roles.compactor = false;
    match args.meta.as_str() {
        "embedded" => {}
        "memory" => config.metadata = MetadataConfig::Memory,
        other => return Err(format!("--meta: {other:?} is not embedded or memory")),
    }
    let stack = Stack::open(&config).await.map_err(|e| e.to_string())?;
    let stream = stack
        .catalog
        .create_stream("default", "bench", args.partitions, Default::default())
        .await
        .map_err(|e| e.to_string())?;
    let batch = args.batch;
    let partitions = args.partitions;

    // The plain produce path: the same events, encoded and appended, no ledger.
    let (plain_stack, logs) = (stack.clone(), stream.logs.clone());
    let plain = measure(&args, move |producer, request| {
        let (stack, logs) = (plain_stack.clone(), logs.clone());
        async move {
            let events = request_events(producer, request, batch, "plain");
            let partition = lakestream_cloudevents::partition::partition_for_event(&events[0], partitions)
                .expect("partitions > 0");
            let payload = kafka::encode_events(&events, 0).expect("encodable");
            let writer = stack.writer.as_ref().expect("the dev stack writes");
            writer
                .append(logs[partition as usize], Bytes::from(payload), batch as u32)
                .await
                .expect("plain append");
            batch
        }
    })
    .await;

    // The deduplicated path: `Api::ingest_events`, as the HTTP and gRPC APIs call it.
    let dedup_api = lakestream_service::Api::over_stack(stack.clone(), std::time::Duration::from_secs(30));
    let caller = dedup_api.admit(None, None).map_err(|e| e.to_string())?;
    let dedup = measure(&args, move |producer, request| {
        let (api, caller) = (dedup_api.clone(), caller.clone());
        async move {
            let events = request_events(producer, request, batch, "dedup");
            api.ingest_events(&caller, "default", "bench", None, events).await.expect("ingest").len()
        }
    })
    .await;

    stack.close().await;
    let ratio = dedup / plain;
    println!(
        "| metadata | partitions | events/request | producers | plain events/s | dedup events/s | ratio |"
    );
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {} | {} | {plain:.0} | {dedup:.0} | {ratio:.2} |",
        args.meta, args.partitions, args.batch, args.producers
    );
    println!(
        "{}",
        serde_json::json!({
            "bench": "events", "meta": args.meta, "partitions": args.partitions, "batch": args.batch,
            "producers": args.producers, "seconds": args.seconds,
            "plain_events_per_s": plain, "dedup_events_per_s": dedup, "ratio": ratio,
        })
    );
    Ok(())
}
