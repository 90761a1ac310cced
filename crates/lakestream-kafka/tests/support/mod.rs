//! What the Kafka front-end tests share: a stack on a real S3 server, a front end on a
//! loopback port, and a client that writes requests as a Kafka client does.
#![allow(dead_code)] // each test file uses its own part

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use lakestream_kafka::KafkaConfig;
use lakestream_kafka::KafkaFrontEnd;
use lakestream_meta::lease::SeededTokens;
use lakestream_objstore_s3::testkit::server_config_under;
use lakestream_service::config::{MetadataConfig, ObjectStoreConfig};
use lakestream_service::testkit::Stack;
use lakestream_service::{Service, ServiceConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const MAX_REQUEST: usize = 64 * 1024;

pub struct Running {
    pub addr: std::net::SocketAddr,
    _dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    service: Service,
    pub stack: Stack,
}

impl Running {
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap();
        self.service.shutdown().await;
    }
}

/// A stack on the embedded metadata store in `dir` and the S3 server under the prefix `run`.
pub fn stack_config(dir: &std::path::Path, run: &str) -> ServiceConfig {
    let mut config = ServiceConfig::dev(dir);
    config.metadata = MetadataConfig::Embedded { path: dir.join("metadata.redb") };
    config.storage.wal = ObjectStoreConfig::S3(Box::new(server_config_under(format!("{run}/wal"))));
    config.storage.compacted =
        ObjectStoreConfig::S3(Box::new(server_config_under(format!("{run}/compacted"))));
    config.writer.flush_window = Duration::from_millis(5);
    config
}

/// A name for this run's objects: unique across test processes sharing the S3 server.
pub fn run_id(what: &str) -> String {
    format!("{what}-{}-{}", std::process::id(), std::time::UNIX_EPOCH.elapsed().unwrap().as_nanos())
}

/// A front end (without automatic topic creation) over a stack on the embedded store and S3.
pub async fn start() -> Running {
    let dir = tempfile::tempdir().unwrap();
    let config = stack_config(dir.path(), &run_id("kafka-wire"));
    start_with(&config, 1, dir).await
}

/// A front end of broker id `node_id` (without automatic topic creation) over a stack opened
/// from `config`; `dir` lives as long as it runs.
pub async fn start_with(config: &ServiceConfig, node_id: i32, dir: tempfile::TempDir) -> Running {
    let service = Service::start(config).await.unwrap();
    let api = service.api().clone();
    let stack = api.stack().clone();
    let kafka = KafkaConfig {
        addr: Some("127.0.0.1:0".parse().unwrap()),
        node_id,
        max_request_bytes: MAX_REQUEST,
        auto_create_topics: false,
        ..KafkaConfig::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tokens = Arc::new(SeededTokens::new(u64::from(std::process::id()) << 8 | node_id as u64));
    let front = KafkaFrontEnd::from_listener(listener, &kafka, Duration::from_secs(30), tokens).unwrap();
    let addr = front.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(front.serve(api, async move {
        let _ = stopped.await;
    }));
    Running { addr, _dir: dir, stop: Some(stop), task, service, stack }
}

pub struct Client {
    pub socket: TcpStream,
    next_id: i32,
}

impl Client {
    pub async fn connect(r: &Running) -> Client {
        Client { socket: TcpStream::connect(r.addr).await.unwrap(), next_id: 1 }
    }

    pub async fn send_frame(&mut self, frame: &[u8]) {
        self.socket.write_all(frame).await.unwrap();
    }

    /// The next response frame, or `None` when the server closed the connection.
    pub async fn read_frame(&mut self) -> Option<Bytes> {
        let read = async {
            let size = self.socket.read_i32().await.ok()?;
            let mut body = BytesMut::zeroed(size as usize);
            self.socket.read_exact(&mut body).await.ok()?;
            Some(body.freeze())
        };
        tokio::time::timeout(Duration::from_secs(30), read)
            .await
            .expect("the server answers or closes within 30 s")
    }

    /// Sends a request without waiting for its response; returns its correlation id.
    pub async fn send<R: Request>(&mut self, request: &R, version: i16) -> i32 {
        let id = self.next_id;
        self.next_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(id)
            .with_client_id(Some(StrBytes::from_static_str("wire-test")));
        let mut frame = BytesMut::new();
        frame.put_i32(0);
        header.encode(&mut frame, R::header_version(version)).unwrap();
        request.encode(&mut frame, version).unwrap();
        let size = (frame.len() - 4) as i32;
        frame[..4].copy_from_slice(&size.to_be_bytes());
        self.send_frame(&frame).await;
        id
    }

    /// The next response, as a response of `R` at `version`, with its correlation id.
    pub async fn receive<R: Request>(&mut self, version: i16) -> (i32, R::Response) {
        let mut body = self.read_frame().await.expect("a response, not a closed connection");
        let header = ResponseHeader::decode(&mut body, R::Response::header_version(version)).unwrap();
        (header.correlation_id, R::Response::decode(&mut body, version).unwrap())
    }

    pub async fn call<R: Request>(&mut self, request: &R, version: i16) -> R::Response {
        let id = self.send(request, version).await;
        let (got, response) = self.receive::<R>(version).await;
        assert_eq!(got, id);
        response
    }

    pub async fn is_closed(&mut self) -> bool {
        self.read_frame().await.is_none()
    }
}

pub fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

pub fn batch(values: &[&str]) -> Bytes {
    batch_with(values, Compression::None)
}

/// One record batch of `values`, compressed with `compression`.
pub fn batch_with(values: &[&str], compression: Compression) -> Bytes {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder batches records whose offset minus sequence agree: -1 for the first
            // makes one batch with base sequence -1, as a producer without an id sends.
            sequence: i as i32 - 1,
            timestamp: 1_700_000_000_000,
            key: None,
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            headers: Default::default(),
        })
        .collect();
    let mut out = BytesMut::new();
    RecordBatchEncoder::encode(&mut out, &records, &RecordEncodeOptions { version: 2, compression }).unwrap();
    out.freeze()
}

/// One record batch of `values` from an idempotent producer: producer id `pid`, `epoch`, and
/// base sequence `sequence`.
pub fn idempotent_batch(values: &[&str], pid: i64, epoch: i16, sequence: i32) -> Bytes {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: pid,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: sequence + i as i32,
            timestamp: 1_700_000_000_000,
            key: None,
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            headers: Default::default(),
        })
        .collect();
    let mut out = BytesMut::new();
    let options = RecordEncodeOptions { version: 2, compression: Compression::None };
    RecordBatchEncoder::encode(&mut out, &records, &options).unwrap();
    out.freeze()
}

/// A new producer id and epoch from InitProducerId.
pub async fn init_producer_id(c: &mut Client) -> (i64, i16) {
    let response = c
        .call(
            &InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60_000),
            4,
        )
        .await;
    assert_eq!(response.error_code, 0);
    (response.producer_id.0, response.producer_epoch)
}

/// Every record value of partition 0 of `topic`, in offset order.
pub async fn values(c: &mut Client, topic: &str) -> Vec<String> {
    let (_, end) = list_offset(c, topic, -1).await;
    let mut offset = 0;
    let mut out = Vec::new();
    while offset < end {
        let data = fetch(c, topic, offset, 0).await;
        assert_eq!(data.error_code, 0);
        let mut records = data.records.unwrap();
        for set in kafka_protocol::records::RecordBatchDecoder::decode_all(&mut records).unwrap() {
            for r in set.records {
                if r.offset >= offset {
                    out.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
                    offset = r.offset + 1;
                }
            }
        }
    }
    out
}

pub async fn create_topic(c: &mut Client, topic: &str, partitions: i32) -> i16 {
    let request = CreateTopicsRequest::default().with_topics(vec![
        create_topics_request::CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(-1),
    ]);
    c.call(&request, 7).await.topics[0].error_code
}

pub fn produce_request(topic: &str, partition: i32, records: Bytes, acks: i16) -> ProduceRequest {
    ProduceRequest::default().with_acks(acks).with_timeout_ms(30_000).with_topic_data(vec![
        produce_request::TopicProduceData::default().with_name(name(topic)).with_partition_data(vec![
            produce_request::PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records)),
        ]),
    ])
}

pub async fn produce(c: &mut Client, topic: &str, partition: i32, records: Bytes) -> (i16, i64) {
    let response = c.call(&produce_request(topic, partition, records, -1), 9).await;
    let p = &response.responses[0].partition_responses[0];
    if p.error_code != 0 {
        eprintln!("produce to {topic}/{partition}: error {} {:?}", p.error_code, p.error_message);
    }
    (p.error_code, p.base_offset)
}

pub async fn fetch(
    c: &mut Client,
    topic: &str,
    offset: i64,
    max_wait_ms: i32,
) -> fetch_response::PartitionData {
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![fetch_request::FetchTopic::default().with_topic(name(topic)).with_partitions(
            vec![
            fetch_request::FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20),
        ],
        )]);
    c.call(&request, 12).await.responses.remove(0).partitions.remove(0)
}

pub async fn list_offset(c: &mut Client, topic: &str, timestamp: i64) -> (i16, i64) {
    let request = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
        list_offsets_request::ListOffsetsTopic::default().with_name(name(topic)).with_partitions(vec![
            list_offsets_request::ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(timestamp),
        ]),
    ]);
    let response = c.call(&request, 7).await;
    let p = &response.topics[0].partitions[0];
    (p.error_code, p.offset)
}

pub const NOT_COORDINATOR: i16 = 16;
pub const UNKNOWN_MEMBER_ID: i16 = 25;
pub const REBALANCE_IN_PROGRESS: i16 = 27;
pub const MEMBER_ID_REQUIRED: i16 = 79;

pub fn group(g: &str) -> GroupId {
    GroupId(kafka_protocol::protocol::StrBytes::from_string(g.to_owned()))
}

pub fn text(s: &str) -> kafka_protocol::protocol::StrBytes {
    kafka_protocol::protocol::StrBytes::from_string(s.to_owned())
}

/// FindCoordinator for group `g`: the coordinator's node id and port.
pub async fn coordinator_of(c: &mut Client, g: &str) -> (i32, i32) {
    let request = FindCoordinatorRequest::default().with_key_type(0).with_coordinator_keys(vec![text(g)]);
    let response = c.call(&request, 4).await;
    let found = &response.coordinators[0];
    assert_eq!(found.error_code, 0, "{:?}", found.error_message);
    (found.node_id.0, found.port)
}

/// A JoinGroup (v5) of `member` ("" for a new one) with one "range" protocol.
pub async fn join(c: &mut Client, g: &str, member: &str) -> JoinGroupResponse {
    let request = JoinGroupRequest::default()
        .with_group_id(group(g))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(text(member))
        .with_protocol_type(text("consumer"))
        .with_protocols(vec![
            join_group_request::JoinGroupRequestProtocol::default()
                .with_name(text("range"))
                .with_metadata(bytes::Bytes::from_static(b"subscription")),
        ]);
    c.call(&request, 5).await
}

/// Joins as a new member: MEMBER_ID_REQUIRED with an id, then joined with it.
pub async fn join_new(c: &mut Client, g: &str) -> JoinGroupResponse {
    let first = join(c, g, "").await;
    assert_eq!(first.error_code, MEMBER_ID_REQUIRED);
    let joined = join(c, g, &first.member_id).await;
    assert_eq!(joined.error_code, 0);
    joined
}

/// The SyncGroup of the leader of a group of one, assigning itself partition 0.
pub async fn sync_alone(c: &mut Client, g: &str, member: &str, generation: i32) {
    let sync = SyncGroupRequest::default()
        .with_group_id(group(g))
        .with_member_id(text(member))
        .with_generation_id(generation)
        .with_assignments(vec![
            sync_group_request::SyncGroupRequestAssignment::default()
                .with_member_id(text(member))
                .with_assignment(bytes::Bytes::from_static(b"orders-0")),
        ]);
    let synced = c.call(&sync, 3).await;
    assert_eq!((synced.error_code, &synced.assignment[..]), (0, &b"orders-0"[..]));
}

pub async fn heartbeat(c: &mut Client, g: &str, member: &str, generation: i32) -> i16 {
    let request = HeartbeatRequest::default()
        .with_group_id(group(g))
        .with_member_id(text(member))
        .with_generation_id(generation);
    c.call(&request, 4).await.error_code
}

pub async fn commit(c: &mut Client, g: &str, member: &str, generation: i32, topic: &str, offset: i64) -> i16 {
    let request = OffsetCommitRequest::default()
        .with_group_id(group(g))
        .with_member_id(text(member))
        .with_generation_id_or_member_epoch(generation)
        .with_topics(vec![
            offset_commit_request::OffsetCommitRequestTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![
                    offset_commit_request::OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset),
                ]),
        ]);
    c.call(&request, 8).await.topics[0].partitions[0].error_code
}

/// OffsetFetch (v8) of partition 0: the group's error and the committed offset.
pub async fn committed(c: &mut Client, g: &str, topic: &str) -> (i16, i64) {
    let request = OffsetFetchRequest::default().with_groups(vec![
        offset_fetch_request::OffsetFetchRequestGroup::default().with_group_id(group(g)).with_topics(Some(
            vec![
                offset_fetch_request::OffsetFetchRequestTopics::default()
                    .with_name(name(topic))
                    .with_partition_indexes(vec![0]),
            ],
        )),
    ]);
    let response = c.call(&request, 8).await;
    let g = &response.groups[0];
    (g.error_code, g.topics.first().map_or(-1, |t| t.partitions[0].committed_offset))
}
