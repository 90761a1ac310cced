//! Fetch reads compacted entries as it reads RAW ones: batches produced over Kafka (plain and
//! gzip), fetched, compacted into Parquet by the stack's compactor, and fetched again give the
//! same bytes, and the offsets stay where they were. On the embedded metadata store and a real
//! S3 server (LAKESTREAM_TEST_S3_*; fails without it).

mod support;

use std::time::Duration;

use kafka_protocol::records::Compression;
use lakestream_compactor::no_progress;
use support::*;

async fn fetch_all(c: &mut Client, topic: &str, end: i64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < end {
        let data = fetch(c, topic, offset, 0).await;
        assert_eq!(data.error_code, 0);
        let records = data.records.unwrap();
        assert!(!records.is_empty(), "a fetch at {offset} below the end {end} returns data");
        out.extend_from_slice(&records);
        // The next fetch starts after the last batch returned: its base offset plus its
        // lastOffsetDelta plus one.
        let mut pos = 0;
        while pos < records.len() {
            let base = i64::from_be_bytes(records[pos..pos + 8].try_into().unwrap());
            let len = i32::from_be_bytes(records[pos + 8..pos + 12].try_into().unwrap()) as usize;
            let delta = i32::from_be_bytes(records[pos + 23..pos + 27].try_into().unwrap());
            offset = base + i64::from(delta) + 1;
            pos += 12 + len;
        }
    }
    out
}

#[tokio::test]
async fn compacted_entries_fetch_as_they_were_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = stack_config(dir.path(), &run_id("kafka-compacted"));
    config.compactor.max_range_age = Duration::from_millis(1);
    let running = start_with(&config, 1, dir).await;
    let mut c = Client::connect(&running).await;
    assert_eq!(create_topic(&mut c, "compact-me", 1).await, 0);
    let mut next = 0;
    for i in 0..6 {
        let values: Vec<String> = (0..3).map(|j| format!("record {i}.{j} {}", "x".repeat(50))).collect();
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        let compression = if i % 2 == 0 { Compression::None } else { Compression::Gzip };
        let (error, base) = produce(&mut c, "compact-me", 0, batch_with(&values, compression)).await;
        assert_eq!((error, base), (0, next));
        next += 3;
    }
    let before = fetch_all(&mut c, "compact-me", next).await;

    tokio::time::sleep(Duration::from_millis(50)).await;
    let compactor = running.stack.compactor.clone().expect("the stack serves the compactor role");
    let logs = running.stack.all_compaction_logs().await.unwrap();
    let report = compactor.compact_logs_once(&logs, &no_progress).await;
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert!(!report.ranges.is_empty(), "something was compacted: {report:?}");

    let after = fetch_all(&mut c, "compact-me", next).await;
    assert_eq!(after, before, "compacted entries fetch byte for byte as RAW ones did");
    assert_eq!(list_offset(&mut c, "compact-me", -2).await, (0, 0));
    assert_eq!(list_offset(&mut c, "compact-me", -1).await, (0, next));
    running.stop().await;
}
