//! produce → consume → compact → consume again: the entries (offsets, record counts,
//! timestamps, bytes) read from the WAL and read from compacted Parquet files are identical,
//! and identical again after a graceful restart. Runs `lakestream serve` with every role on
//! the embedded store and the real S3 server, or, with `LAKESTREAM_E2E_HTTP` set, against an
//! external stack (e.g. after `docker compose up`).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use lakestream_e2e::api::{Api, Entry};
use lakestream_e2e::config::Compaction;
use lakestream_e2e::env;
use lakestream_e2e::process::CompactionLog;
use lakestream_e2e::rng::Rng;

const NS: &str = "default";
const PARTITIONS: u32 = 3;

async fn produce(api: &Api, stream: &str, rng: &Rng) -> usize {
    common::produce_varied(api, NS, stream, PARTITIONS, rng).await
}

async fn consume(api: &Api, stream: &str) -> BTreeMap<u32, Vec<Entry>> {
    common::read_partitions(api, NS, stream, PARTITIONS, Duration::from_secs(30)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_consume_compact_consume_again_identical() {
    let seed = common::seed("round_trip");
    let rng = Rng::new(seed);
    let stream = format!("round-trip-{seed:x}");
    if let Some(external) = env::external().unwrap_or_else(|e| panic!("{e}")) {
        // An external stack: its compactor runs on its own schedule; give it the time.
        let writer = Api::new(&external.http, Duration::from_secs(30));
        let reader = Api::new(&external.read_http, Duration::from_secs(30));
        writer.create_stream(NS, &stream, PARTITIONS).await.unwrap_or_else(|e| panic!("{e}"));
        let acked = produce(&writer, &stream, &rng).await;
        let before = consume(&reader, &stream).await;
        assert_eq!(before.values().map(Vec::len).sum::<usize>(), acked);
        println!("external stack: waiting {:?} for its compactor", external.compact_wait);
        tokio::time::sleep(external.compact_wait).await;
        common::assert_identical(&before, &consume(&reader, &stream).await, "after the compaction wait");
        return;
    }

    let dir = common::workdir("round_trip");
    // Ranges close after 2 s, so the first consume reads the WAL and the second Parquet.
    let mut service = common::all_in_one(dir.path(), "round_trip", seed, |c| {
        c.compaction = Compaction {
            max_range_bytes: 1 << 20,
            max_range_age: Duration::from_secs(2),
            ..Compaction::frantic()
        };
    })
    .await;
    let api = Api::new(&service.url(), Duration::from_secs(30));
    let logs = api.create_stream(NS, &stream, PARTITIONS).await.unwrap_or_else(|e| panic!("{e}"));
    let acked = produce(&api, &stream, &rng).await;
    let before = consume(&api, &stream).await;
    assert_eq!(before.values().map(Vec::len).sum::<usize>(), acked, "every acknowledged entry reads back");

    // Wait until the compactor logged ranges reaching each partition's end.
    // (After a start the compactor takes ~10 s before the first range of each log.)
    common::wait_compacted(&service, &logs, &before, Duration::from_secs(120)).await;
    let compaction = CompactionLog::of(&service.log_text());
    println!("compaction: {compaction:?}");
    common::assert_identical(&before, &consume(&api, &stream).await, "after compaction");

    // A graceful stop exits 0; a new process (cold caches) reads the same entries. The stop
    // waits for a running reclamation pass, which deletes WAL objects one by one: hence the
    // generous bound.
    let status = service.terminate(Duration::from_secs(90)).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success(), "graceful stop: {status}");
    service.restart().await.unwrap_or_else(|e| panic!("{e}"));
    common::assert_identical(&before, &consume(&api, &stream).await, "after a restart");
    let status = service.terminate(Duration::from_secs(90)).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success(), "graceful stop: {status}");
}
