//! Several front ends over one deployment: two stacks (each with its own writer, leases,
//! reader caches and catalog client, as two processes have) on a real Oxia server of this
//! test's own (`LAKESTREAM_TEST_OXIA_BIN`, which `scripts/test` sets; fails without it) and
//! the S3 server, each serving Kafka on its own port. Either accepts any partition: a topic
//! created through one is seen by the other, both append to one partition, and each reads
//! everything either wrote, in one order with no gap.

mod support;

use kafka_protocol::messages::*;
use kafka_protocol::records::RecordBatchDecoder;
use lakestream_service::config::MetadataConfig;
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
        config.metadata = MetadataConfig::oxia(vec![address.clone()]);
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

/// The groups ListGroups names.
async fn listed(c: &mut Client) -> Vec<String> {
    let response = c.call(&ListGroupsRequest::default(), 4).await;
    assert_eq!(response.error_code, 0);
    response.groups.iter().map(|g| g.group_id.0.to_string()).collect()
}

/// A consumer group is coordinated by one front end, chosen through the metadata store (each
/// front end's first rebalance of a group waits the default initial delay, 3 s): the
/// other sends clients to it and refuses group requests with NOT_COORDINATOR; when the
/// coordinator stops, the other takes the group over, continues its generations, and still
/// has its committed offsets; the old members join again.
#[tokio::test]
async fn a_group_is_coordinated_by_one_front_end_and_moves_when_it_stops() {
    let oxia = lakestream_meta_oxia::testkit::StandaloneOxia::start(2, &[]).await;
    let address = oxia.address();
    let run = run_id("kafka-coordinators");
    let mut running = Vec::new();
    for node_id in [1, 2] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = stack_config(dir.path(), &run);
        config.metadata = MetadataConfig::oxia(vec![address.clone()]);
        running.push(start_with(&config, node_id, dir).await);
    }
    let b_server = running.pop().unwrap();
    let a_server = running.pop().unwrap();
    let (a_port, b_port) = (i32::from(a_server.addr.port()), i32::from(b_server.addr.port()));
    let mut a = Client::connect(&a_server).await;
    let mut b = Client::connect(&b_server).await;
    assert_eq!(create_topic(&mut a, "orders", 1).await, 0);
    for value in ["x", "y", "z"] {
        assert_eq!(produce(&mut a, "orders", 0, batch(&[value])).await.0, 0);
    }

    // Metadata from either lists both front ends.
    let metadata = b.call(&MetadataRequest::default().with_topics(Some(vec![])), 12).await;
    let mut nodes: Vec<i32> = metadata.brokers.iter().map(|b| b.node_id.0).collect();
    nodes.sort();
    assert_eq!(nodes, [1, 2]);

    // A is asked first and claims the group; B sends clients to A.
    assert_eq!(coordinator_of(&mut a, "billing").await, (1, a_port));
    assert_eq!(coordinator_of(&mut b, "billing").await, (1, a_port));
    assert_eq!(join(&mut b, "billing", "").await.error_code, NOT_COORDINATOR);
    assert_eq!(committed(&mut b, "billing", "orders").await.0, NOT_COORDINATOR);

    let joined = join_new(&mut a, "billing").await;
    let (member, generation) = (joined.member_id.to_string(), joined.generation_id);
    assert_eq!((generation, joined.leader.as_str()), (1, member.as_str()));
    // Before the leader's SyncGroup the rebalance is not complete: no commits.
    assert_eq!(commit(&mut a, "billing", &member, generation, "orders", 1).await, REBALANCE_IN_PROGRESS);
    sync_alone(&mut a, "billing", &member, generation).await;
    assert_eq!(heartbeat(&mut a, "billing", &member, generation).await, 0);
    // Each group is listed by one process: its coordinator.
    assert!(listed(&mut a).await.contains(&"billing".to_owned()));
    assert!(!listed(&mut b).await.contains(&"billing".to_owned()));
    assert_eq!(commit(&mut a, "billing", &member, generation, "orders", 2).await, 0);
    assert_eq!(committed(&mut a, "billing", "orders").await, (0, 2));

    // A stops: B takes the group over.
    a_server.stop().await;
    assert_eq!(coordinator_of(&mut b, "billing").await, (2, b_port));
    assert_eq!(heartbeat(&mut b, "billing", &member, generation).await, UNKNOWN_MEMBER_ID);
    assert_eq!(committed(&mut b, "billing", "orders").await, (0, 2), "the committed offset is in the store");
    let rejoined = join_new(&mut b, "billing").await;
    assert_eq!(rejoined.generation_id, 2, "the generations continue");
    let member = rejoined.member_id.to_string();
    sync_alone(&mut b, "billing", &member, 2).await;
    assert_eq!(commit(&mut b, "billing", &member, 2, "orders", 3).await, 0);
    assert_eq!(committed(&mut b, "billing", "orders").await, (0, 3));
    assert!(listed(&mut b).await.contains(&"billing".to_owned()));
    b_server.stop().await;
}
