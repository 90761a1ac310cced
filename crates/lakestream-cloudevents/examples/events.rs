//! CloudEvents through the codec the way the ingest path uses it: a JSON batch decoded and
//! validated, each event's deduplication key and the partition Kafka's partitioner gives it,
//! the events of one partition stored as one Kafka-binding entry (a magic-2 record batch) and
//! read back, and one event served in HTTP binary mode.
//!
//! ```text
//! cargo run -p lakestream-cloudevents --example events [-- BATCH.json] [PARTITIONS]
//! ```
//!
//! `BATCH.json` is a JSON array of structured events (`application/cloudevents-batch+json`);
//! without it a built-in batch is used. `PARTITIONS` defaults to 3.

use std::process::ExitCode;

use lakestream_cloudevents::{CeError, CloudEvent, http, json, kafka, partition};

const BUILT_IN: &str = r#"[
  {"specversion":"1.0","id":"1","source":"/shop/checkout","type":"dev.lakestream.order.created","subject":"order-1","data":{"total":12}},
  {"specversion":"1.0","id":"2","source":"/shop/checkout","type":"dev.lakestream.order.created","subject":"order-2","data":{"total":30}},
  {"specversion":"1.0","id":"3","source":"/shop/payments","type":"dev.lakestream.payment","time":"2026-01-02T03:04:05Z","datacontenttype":"text/plain","data":"paid"}
]"#;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let batch = match args.next() {
        Some(path) => match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) => {
                eprintln!("events: reading {path}: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => BUILT_IN.as_bytes().to_vec(),
    };
    let partitions = match args.next().map(|n| n.parse::<u32>()) {
        None => 3,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("events: PARTITIONS must be a number above 0");
            return ExitCode::from(2);
        }
    };
    match run(&batch, partitions) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Refusals name the attribute that broke a rule.
            eprintln!("events: {e} (attribute: {})", e.attribute_name().unwrap_or("-"));
            ExitCode::FAILURE
        }
    }
}

fn run(batch: &[u8], partitions: u32) -> Result<(), CeError> {
    let events = json::decode_batch(batch)?;
    println!("{} event(s) decoded and validated", events.len());

    let mut by_partition: Vec<Vec<CloudEvent>> = vec![Vec::new(); partitions as usize];
    for event in &events {
        // A retry of an event (same source and id) is recognised by this key.
        let key: String = event.dedup_key().iter().take(8).map(|b| format!("{b:02x}")).collect();
        let p = partition::partition_for_event(event, partitions).unwrap_or(0);
        println!("{} {} {}: dedup key {key}…, partition {p}", event.source(), event.id(), event.event_type());
        by_partition[p as usize].push(event.clone());
    }

    for (p, events) in by_partition.iter().enumerate().filter(|(_, events)| !events.is_empty()) {
        // One entry per partition, as the server appends it; the timestamp is the default
        // for events without `time`.
        let entry = kafka::encode_events(events, 1_700_000_000_000)?;
        let back = kafka::decode_events(&entry)?;
        assert_eq!(&back, events, "the Kafka binding gives back the same events");
        println!("partition {p}: one entry of {} bytes holding {} record(s)", entry.len(), back.len());
    }

    if let Some(first) = events.first() {
        let (headers, data) = http::encode_binary(first);
        println!("HTTP binary mode of the first event:");
        for (name, value) in headers {
            println!("  {name}: {value}");
        }
        println!("  body: {}", String::from_utf8_lossy(&data));
        // And back to the JSON format: attributes in arrival order, values as they came.
        println!("  as JSON again: {}", json::encode_event(first));
    }
    Ok(())
}
