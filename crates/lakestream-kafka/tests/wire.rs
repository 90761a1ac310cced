//! The Kafka front end on the wire, against bad input and the basic exchanges: a stack of
//! the embedded metadata store and a real S3 server (s3s-fs, started by `scripts/test`;
//! these tests fail when LAKESTREAM_TEST_S3_* is not set), the front end on a loopback port,
//! and requests written as a client writes them (`kafka-protocol`'s client side).
//!
//! Bad input: a frame over `kafka.max_request_bytes`, a negative size, an unknown API key,
//! an unserved version and an undecodable body close the connection with nothing answered
//! (Kafka's broker does the same); an ApiVersions request of an unserved version gets a
//! version-0 answer with UNSUPPORTED_VERSION on a connection kept open; an unknown topic
//! gets UNKNOWN_TOPIC_OR_PARTITION and bytes that are not record batches INVALID_RECORD, on
//! a connection kept open, and nothing is written.

mod support;

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request};
use kafka_protocol::records::RecordBatchDecoder;
use support::*;
use tokio::io::AsyncWriteExt;

const UNKNOWN_TOPIC: i16 = 3;
const OFFSET_OUT_OF_RANGE: i16 = 1;
const INVALID_TOPIC: i16 = 17;
const UNSUPPORTED_VERSION: i16 = 35;
const TOPIC_ALREADY_EXISTS: i16 = 36;
const INVALID_PARTITIONS: i16 = 37;
const INVALID_RECORD: i16 = 87;

#[tokio::test]
async fn produce_fetch_and_list_offsets_round_trip() {
    let r = start().await;
    let mut c = Client::connect(&r).await;
    let versions = c.call(&ApiVersionsRequest::default(), 3).await;
    assert_eq!(versions.error_code, 0);
    let served = versions.api_keys.iter().find(|k| k.api_key == ApiKey::Produce as i16).unwrap();
    assert_eq!((served.min_version, served.max_version), (3, 12));

    assert_eq!(create_topic(&mut c, "orders", 2).await, 0);
    let metadata = c
        .call(
            &MetadataRequest::default().with_topics(Some(vec![
                metadata_request::MetadataRequestTopic::default().with_name(Some(name("orders"))),
            ])),
            12,
        )
        .await;
    assert_eq!(metadata.brokers.len(), 1);
    let topic = &metadata.topics[0];
    assert_eq!(topic.error_code, 0);
    assert_eq!(topic.partitions.len(), 2);
    assert!(topic.partitions.iter().all(|p| p.leader_id == metadata.brokers[0].node_id));
    assert!(!topic.topic_id.is_nil());

    assert_eq!(produce(&mut c, "orders", 0, batch(&["a", "b", "c"])).await, (0, 0));
    assert_eq!(produce(&mut c, "orders", 0, batch(&["d", "e"])).await, (0, 3));
    assert_eq!(list_offset(&mut c, "orders", -2).await, (0, 0));
    assert_eq!(list_offset(&mut c, "orders", -1).await, (0, 5));

    // From offset 4 (inside the second entry): the whole entry, base offset rewritten to 3.
    let data = fetch(&mut c, "orders", 4, 0).await;
    assert_eq!(data.error_code, 0);
    assert_eq!(data.high_watermark, 5);
    let mut records = data.records.unwrap();
    let sets = RecordBatchDecoder::decode_all(&mut records).unwrap();
    let offsets: Vec<i64> = sets.iter().flat_map(|s| s.records.iter().map(|r| r.offset)).collect();
    assert_eq!(offsets, [3, 4]);
    let values: Vec<_> =
        sets.iter().flat_map(|s| s.records.iter().map(|r| r.value.clone().unwrap())).collect();
    assert_eq!(values, [Bytes::from_static(b"d"), Bytes::from_static(b"e")]);

    // At the end: empty after the wait; beyond it: out of range.
    let started = std::time::Instant::now();
    let data = fetch(&mut c, "orders", 5, 200).await;
    assert_eq!((data.error_code, data.records.map_or(0, |r| r.len())), (0, 0));
    assert!(started.elapsed() >= Duration::from_millis(150), "the fetch waited max_wait_ms");
    assert_eq!(fetch(&mut c, "orders", 6, 0).await.error_code, OFFSET_OUT_OF_RANGE);
    r.stop().await;
}

#[tokio::test]
async fn bad_requests_get_kafka_error_codes_and_write_nothing() {
    let r = start().await;
    let mut c = Client::connect(&r).await;
    assert_eq!(create_topic(&mut c, "bad", 1).await, 0);
    assert_eq!(create_topic(&mut c, "bad", 1).await, TOPIC_ALREADY_EXISTS);
    assert_eq!(create_topic(&mut c, "has space", 1).await, INVALID_TOPIC);
    assert_eq!(create_topic(&mut c, "zero", 0).await, INVALID_PARTITIONS);

    assert_eq!(produce(&mut c, "missing", 0, batch(&["x"])).await.0, UNKNOWN_TOPIC);
    assert_eq!(produce(&mut c, "bad", 1, batch(&["x"])).await.0, UNKNOWN_TOPIC);
    assert_eq!(produce(&mut c, "bad", 0, Bytes::from_static(b"not a record batch")).await.0, INVALID_RECORD);
    // A batch whose CRC does not match its bytes.
    let mut corrupt = BytesMut::from(&batch(&["x"])[..]);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xFF;
    assert_eq!(produce(&mut c, "bad", 0, corrupt.freeze()).await.0, INVALID_RECORD);
    assert_eq!(fetch(&mut c, "missing", 0, 0).await.error_code, UNKNOWN_TOPIC);
    assert_eq!(list_offset(&mut c, "missing", -1).await.0, UNKNOWN_TOPIC);
    // The connection is still open, and nothing was written.
    assert_eq!(list_offset(&mut c, "bad", -1).await, (0, 0));
    r.stop().await;
}

#[tokio::test]
async fn unserved_api_versions_answer_with_unsupported_version_and_keep_the_connection() {
    let r = start().await;
    let mut c = Client::connect(&r).await;
    // ApiVersions v99: a v0 body (no tagged fields) after a v0-style header.
    let mut frame = BytesMut::new();
    frame.put_i32(0);
    frame.put_i16(ApiKey::ApiVersions as i16);
    frame.put_i16(99);
    frame.put_i32(7);
    frame.put_i16(-1);
    frame.put_slice(b"\x00future body");
    let size = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&size.to_be_bytes());
    c.send_frame(&frame).await;
    let mut body = c.read_frame().await.unwrap();
    assert_eq!(body.get_i32(), 7);
    let answer = ApiVersionsResponse::decode(&mut body, 0).unwrap();
    assert_eq!(answer.error_code, UNSUPPORTED_VERSION);
    // As Kafka 4.4 answers: ApiVersions' own range only.
    assert_eq!(answer.api_keys.len(), 1);
    assert_eq!((answer.api_keys[0].api_key, answer.api_keys[0].max_version), (ApiKey::ApiVersions as i16, 4));
    // Kept open: a served version works next.
    assert_eq!(c.call(&ApiVersionsRequest::default(), 0).await.error_code, 0);
    r.stop().await;
}

/// A raw frame of `api_key`/`version` with `body` after a v1 request header.
fn raw_frame(api_key: i16, version: i16, body: &[u8]) -> BytesMut {
    let mut frame = BytesMut::new();
    frame.put_i32((8 + 2 + body.len()) as i32);
    frame.put_i16(api_key);
    frame.put_i16(version);
    frame.put_i32(1);
    frame.put_i16(-1);
    frame.put_slice(body);
    frame
}

#[tokio::test]
async fn malformed_frames_close_the_connection_and_write_nothing() {
    let r = start().await;
    let mut setup = Client::connect(&r).await;
    assert_eq!(create_topic(&mut setup, "frames", 1).await, 0);

    // Over kafka.max_request_bytes: closed before the body is read.
    let mut c = Client::connect(&r).await;
    let mut frame = BytesMut::new();
    frame.put_i32((MAX_REQUEST + 1) as i32);
    c.send_frame(&frame).await;
    assert!(c.is_closed().await, "an oversized frame closes the connection");

    // A produce request over the limit, sent whole: closed, nothing written.
    let mut c = Client::connect(&r).await;
    let big = vec![b'x'; MAX_REQUEST];
    let big_values: Vec<&str> = vec![std::str::from_utf8(&big).unwrap()];
    let request = produce_request("frames", 0, batch(&big_values), -1);
    let mut frame = BytesMut::new();
    frame.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(ProduceRequest::KEY)
        .with_request_api_version(9)
        .with_correlation_id(1)
        .encode(&mut frame, ProduceRequest::header_version(9))
        .unwrap();
    request.encode(&mut frame, 9).unwrap();
    let size = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&size.to_be_bytes());
    let _ = c.socket.write_all(&frame).await; // the server may close before all is sent
    assert!(c.is_closed().await, "an oversized produce closes the connection");

    // Negative size.
    let mut c = Client::connect(&r).await;
    c.send_frame(&(-5i32).to_be_bytes()).await;
    assert!(c.is_closed().await, "a negative size closes the connection");

    // A frame too short for a request header.
    let mut c = Client::connect(&r).await;
    c.send_frame(&[0, 0, 0, 3, 0, 0, 0]).await;
    assert!(c.is_closed().await, "a frame without a header closes the connection");

    // An unknown API key.
    let mut c = Client::connect(&r).await;
    c.send_frame(&raw_frame(999, 0, b"")).await;
    assert!(c.is_closed().await, "an unknown API key closes the connection");

    // A version not served (Fetch v3, Produce v2), and an API not served (JoinGroup).
    for (key, version) in [(ApiKey::Fetch, 3), (ApiKey::Produce, 2), (ApiKey::JoinGroup, 5)] {
        let mut c = Client::connect(&r).await;
        c.send_frame(&raw_frame(key as i16, version, b"")).await;
        assert!(c.is_closed().await, "{key:?} v{version} closes the connection");
    }

    // A produce body cut short.
    let mut c = Client::connect(&r).await;
    c.send_frame(&raw_frame(ApiKey::Produce as i16, 3, &[0xFF, 0xFF, 0, 1, 0, 0])).await;
    assert!(c.is_closed().await, "an undecodable body closes the connection");

    // acks=0 with bad records: no response is due, so the connection is closed to say so.
    let mut c = Client::connect(&r).await;
    let request = produce_request("frames", 0, Bytes::from_static(b"garbage"), 0);
    let mut frame = BytesMut::new();
    frame.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(ProduceRequest::KEY)
        .with_request_api_version(9)
        .with_correlation_id(1)
        .encode(&mut frame, ProduceRequest::header_version(9))
        .unwrap();
    request.encode(&mut frame, 9).unwrap();
    let size = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&size.to_be_bytes());
    c.send_frame(&frame).await;
    assert!(c.is_closed().await, "a failed acks=0 produce closes the connection");

    // Nothing was written by any of them.
    assert_eq!(list_offset(&mut setup, "frames", -1).await, (0, 0));
    r.stop().await;
}

/// Requests sent back to back, as clients pipeline them: the responses come in request order,
/// the appends to one partition take offsets in request order (several requests' batches may
/// share an entry), and a request with bad batches among them fails alone.
#[tokio::test]
async fn pipelined_produces_keep_request_order() {
    let r = start().await;
    let mut c = Client::connect(&r).await;
    assert_eq!(create_topic(&mut c, "pipelined", 2).await, 0);
    let mut ids = Vec::new();
    for i in 0..12 {
        let value = format!("r{i}");
        let records =
            if i == 6 { Bytes::from_static(b"not a batch") } else { batch(&[&value, &value, &value]) };
        let request = produce_request("pipelined", i % 2, records, -1);
        ids.push(c.send(&request, 9).await);
    }
    let mut bases = [Vec::new(), Vec::new()];
    for (i, id) in ids.into_iter().enumerate() {
        let (got, response) = c.receive::<ProduceRequest>(9).await;
        assert_eq!(got, id, "responses in request order");
        let p = &response.responses[0].partition_responses[0];
        if i == 6 {
            assert_eq!(p.error_code, INVALID_RECORD);
            continue;
        }
        assert_eq!(p.error_code, 0);
        bases[i % 2].push(p.base_offset);
    }
    assert_eq!(bases[0], [0, 3, 6, 9, 12]);
    assert_eq!(bases[1], [0, 3, 6, 9, 12, 15]);
    // Every record reads back in request order.
    let mut offset = 0;
    let mut values = Vec::new();
    while offset < 15 {
        let mut records = fetch(&mut c, "pipelined", offset, 0).await.records.unwrap();
        for set in RecordBatchDecoder::decode_all(&mut records).unwrap() {
            let from = offset;
            for r in set.records.into_iter().filter(|r| r.offset >= from) {
                offset = r.offset + 1;
                values.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
            }
        }
    }
    let expected: Vec<String> =
        [0, 2, 4, 8, 10].iter().flat_map(|i| [format!("r{i}"), format!("r{i}"), format!("r{i}")]).collect();
    assert_eq!(values, expected);
    r.stop().await;
}

/// Pipelined requests whose batches together exceed the writer's largest entry are appended
/// one by one, in order; one larger than it alone gets MESSAGE_TOO_LARGE.
#[tokio::test]
async fn groups_over_the_largest_entry_are_appended_one_by_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = stack_config(dir.path(), &run_id("kafka-groups"));
    config.writer.max_entry_bytes = 4096;
    let r = start_with(&config, 1, dir).await;
    let mut c = Client::connect(&r).await;
    assert_eq!(create_topic(&mut c, "grouped", 1).await, 0);
    let value = "v".repeat(3000);
    let big = "b".repeat(5000);
    let mut ids = Vec::new();
    for i in 0..8 {
        let records = if i == 4 { batch(&[&big]) } else { batch(&[&value]) };
        ids.push(c.send(&produce_request("grouped", 0, records, -1), 9).await);
    }
    let mut bases = Vec::new();
    for (i, id) in ids.into_iter().enumerate() {
        let (got, response) = c.receive::<ProduceRequest>(9).await;
        assert_eq!(got, id);
        let p = &response.responses[0].partition_responses[0];
        if i == 4 {
            assert_eq!(p.error_code, 10, "MESSAGE_TOO_LARGE");
        } else {
            assert_eq!(p.error_code, 0, "{:?}", p.error_message);
            bases.push(p.base_offset);
        }
    }
    assert_eq!(bases, [0, 1, 2, 3, 4, 5, 6]);
    r.stop().await;
}
