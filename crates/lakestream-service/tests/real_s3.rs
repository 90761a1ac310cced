//! The writer and reader of a service over a real S3 server (s3s-fs, started by
//! `scripts/test`), with the embedded metadata store: acknowledged entries survive a restart.
//!
//! Needs LAKESTREAM_TEST_S3_ENDPOINT, _BUCKET, _ACCESS_KEY, _SECRET_KEY, _REGION.

use std::time::Duration;

use bytes::Bytes;
use lakestream_objstore_s3::testkit::server_config_under;
use lakestream_service::ServiceConfig;
use lakestream_service::config::{MetadataConfig, ObjectStoreConfig};
use lakestream_service::testkit::Stack;

fn config(dir: &std::path::Path, run: &str) -> ServiceConfig {
    let mut c = ServiceConfig::dev(dir);
    c.metadata = MetadataConfig::Embedded { path: dir.join("metadata.redb") };
    c.storage.wal = ObjectStoreConfig::S3(Box::new(server_config_under(format!("{run}/wal"))));
    c.storage.compacted = ObjectStoreConfig::S3(Box::new(server_config_under(format!("{run}/compacted"))));
    c.writer.flush_window = Duration::from_millis(5);
    c
}

fn run_id() -> String {
    format!("real-s3-{}-{}", std::process::id(), std::time::UNIX_EPOCH.elapsed().unwrap().as_nanos())
}

#[tokio::test]
async fn appends_are_read_back_identical_from_a_real_s3_server_and_survive_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &run_id());
    let mut sent = Vec::new();
    {
        let stack = Stack::open(&config).await.unwrap();
        let stream =
            stack.catalog.create_stream("default", "s3-events", 3, Default::default()).await.unwrap();
        let w = stack.writer.clone().unwrap();
        let mut tasks = Vec::new();
        for i in 0..90u32 {
            let w = w.clone();
            let log = stream.logs[(i % 3) as usize];
            let payload = Bytes::from(format!("payload-{i}-").repeat(1 + (i as usize % 50)));
            tasks.push(tokio::spawn(async move {
                (log, w.append(log, payload.clone(), 1 + i % 4).await.unwrap(), payload)
            }));
        }
        for t in tasks {
            sent.push(t.await.unwrap());
        }
        stack.close().await;
    }
    // A new process (new caches) reads every acknowledged entry back from S3.
    let stack = Stack::open(&config).await.unwrap();
    let stream = stack.catalog.get_stream("default", "s3-events").await.unwrap();
    let reader = stack.reader.clone().unwrap();
    for p in 0..3 {
        let log = stream.log_ref(p).unwrap();
        let mut expected: Vec<_> = sent.iter().filter(|(l, _, _)| *l == log.log_id).collect();
        expected.sort_by_key(|(_, ack, _)| ack.offset);
        let mut got = Vec::new();
        let mut next = 0;
        loop {
            let batch = reader.read(&log, next, 4096, Duration::ZERO).await.unwrap();
            if batch.entries.is_empty() {
                break;
            }
            next = batch.next_offset;
            got.extend(batch.entries);
        }
        assert_eq!(got.len(), expected.len());
        for (entry, (_, ack, payload)) in got.iter().zip(expected) {
            assert_eq!(
                (entry.offset, entry.record_count, entry.timestamp_ms),
                (ack.offset, ack.record_count, ack.timestamp_ms)
            );
            assert_eq!(&entry.payload, payload);
        }
    }
    stack.close().await;
}
