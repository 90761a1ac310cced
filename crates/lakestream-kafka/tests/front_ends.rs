//! Several front ends over one deployment: two stacks (each with its own writer, leases,
//! reader caches and catalog client, as two processes have) on a real Oxia server of this
//! test's own (`LAKESTREAM_TEST_OXIA_BIN`, which `scripts/test` sets; fails without it) and
//! the S3 server, each serving Kafka on its own port. Either accepts any partition: a topic
//! created through one is seen by the other, both append to one partition, and each reads
//! everything either wrote, in one order with no gap.

mod support;

use kafka_protocol::messages::*;
use kafka_protocol::records::RecordBatchDecoder;
use support::*;

#[tokio::test]
async fn any_front_end_serves_any_partition() {
    let oxia = lakestream_meta_oxia::testkit::StandaloneOxia::start(2, &[]).await;
    let address = oxia.address();
    let run = run_id("kafka-front-ends");
    let mut running = Vec::new();
    for node_id in [1, 2] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = stack_config(dir.path(), &run);
        config.apply_env(|var| (var == "LAKESTREAM_OXIA_ADDRESSES").then(|| address.clone())).unwrap();
        running.push(start_with(&config, node_id, dir).await);
    }
    let mut a = Client::connect(&running[0]).await;
    let mut b = Client::connect(&running[1]).await;

    assert_eq!(create_topic(&mut a, "shared", 2).await, 0);
    // B sees the topic A created, and names itself the leader of every partition.
    let metadata = b
        .call(
            &MetadataRequest::default().with_topics(Some(vec![
                metadata_request::MetadataRequestTopic::default().with_name(Some(name("shared"))),
            ])),
            12,
        )
        .await;
    assert_eq!(metadata.topics[0].error_code, 0);
    assert_eq!(metadata.topics[0].partitions.len(), 2);
    assert!(metadata.topics[0].partitions.iter().all(|p| p.leader_id == BrokerId(2)));
    assert_eq!(create_topic(&mut b, "shared", 2).await, 36, "B refuses a second incarnation");

    // Both append to partition 0, alternately.
    let mut bases = Vec::new();
    for i in 0..6 {
        let value = format!("v{i}");
        let client = if i % 2 == 0 { &mut a } else { &mut b };
        let (error, base) = produce(client, "shared", 0, batch(&[&value, &value])).await;
        assert_eq!(error, 0);
        bases.push(base);
    }
    assert_eq!(bases, [0, 2, 4, 6, 8, 10]);

    // Each reads all twelve records, in the order they were acknowledged.
    for client in [&mut a, &mut b] {
        assert_eq!(list_offset(client, "shared", -1).await, (0, 12));
        let mut offset = 0;
        let mut values = Vec::new();
        while offset < 12 {
            let data = fetch(client, "shared", offset, 0).await;
            assert_eq!(data.error_code, 0);
            let mut records = data.records.unwrap();
            for set in RecordBatchDecoder::decode_all(&mut records).unwrap() {
                for r in set.records {
                    if r.offset >= offset {
                        values.push((r.offset, String::from_utf8(r.value.unwrap().to_vec()).unwrap()));
                        offset = r.offset + 1;
                    }
                }
            }
        }
        let expected: Vec<(i64, String)> = (0..12).map(|o| (o, format!("v{}", o / 2))).collect();
        assert_eq!(values, expected);
    }
    for r in running {
        r.stop().await;
    }
}
