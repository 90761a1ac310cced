//! Idempotent producers on the wire (a stack of the embedded metadata store and the real S3
//! server, as `wire.rs`): InitProducerId hands out distinct ids; a batch sent again is answered
//! with its original offset and appended once; an older batch is DUPLICATE_SEQUENCE_NUMBER, a
//! gap OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch INVALID_PRODUCER_EPOCH, and none of them
//! writes anything; a new epoch starts again at sequence 0; pipelined batches of one producer
//! are appended in order; a producer whose state expired is UNKNOWN_PRODUCER_ID; a
//! transactional producer is refused.

mod support;

use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use support::*;

const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
const UNKNOWN_PRODUCER_ID: i16 = 59;

#[tokio::test]
async fn a_batch_sent_again_is_appended_once() {
    let r = start().await;
    let mut c = Client::connect(&r).await;
    assert_eq!(create_topic(&mut c, "idem", 1).await, 0);
    let versions = c.call(&ApiVersionsRequest::default(), 3).await;
    let init = versions.api_keys.iter().find(|k| k.api_key == ApiKey::InitProducerId as i16).unwrap();
    assert_eq!((init.min_version, init.max_version), (0, 5));

    let (pid, epoch) = init_producer_id(&mut c).await;
    let (other, _) = init_producer_id(&mut c).await;
    assert_ne!(pid, other, "every InitProducerId gets a new id");
    assert_eq!(epoch, 0);

    let first = idempotent_batch(&["a", "b", "c"], pid, epoch, 0);
    assert_eq!(produce(&mut c, "idem", 0, first.clone()).await, (0, 0));
    // The same batch again (a retry): its original offset, nothing appended.
    assert_eq!(produce(&mut c, "idem", 0, first.clone()).await, (0, 0));
    let second = idempotent_batch(&["d", "e"], pid, epoch, 3);
    assert_eq!(produce(&mut c, "idem", 0, second.clone()).await, (0, 3));
    assert_eq!(produce(&mut c, "idem", 0, second).await, (0, 3));
    // The first again, now older than the last: a duplicate, appended before.
    assert_eq!(produce(&mut c, "idem", 0, first).await.0, DUPLICATE_SEQUENCE_NUMBER);
    // A gap.
    let gap = idempotent_batch(&["x"], pid, epoch, 9);
    assert_eq!(produce(&mut c, "idem", 0, gap).await.0, OUT_OF_ORDER_SEQUENCE_NUMBER);
    // A new epoch (the Java client bumps its own) starts again at 0; the old one is fenced.
    let bumped = idempotent_batch(&["f"], pid, epoch + 1, 0);
    assert_eq!(produce(&mut c, "idem", 0, bumped).await, (0, 5));
    let stale = idempotent_batch(&["y"], pid, epoch, 5);
    assert_eq!(produce(&mut c, "idem", 0, stale).await.0, INVALID_PRODUCER_EPOCH);
    // A new epoch must start at 0. Its state does not exist yet, so the answer is Kafka's for
    // a producer without state, UNKNOWN_PRODUCER_ID (Kafka itself says OUT_OF_ORDER_SEQUENCE_NUMBER
    // when it holds an older epoch's state; clients reset their sequences on either).
    let late_start = idempotent_batch(&["z"], pid, epoch + 2, 4);
    assert_eq!(produce(&mut c, "idem", 0, late_start).await.0, UNKNOWN_PRODUCER_ID);
    // Another producer on the same partition has sequences of its own.
    assert_eq!(produce(&mut c, "idem", 0, idempotent_batch(&["g"], other, 0, 0)).await, (0, 6));

    assert_eq!(values(&mut c, "idem").await, ["a", "b", "c", "d", "e", "f", "g"]);
    r.stop().await;
}

#[tokio::test]
async fn pipelined_batches_of_one_producer_are_appended_in_order_and_retries_are_duplicates() {
    let r = start().await;
    let mut c = Client::connect(&r).await;
    assert_eq!(create_topic(&mut c, "pipelined", 1).await, 0);
    let (pid, epoch) = init_producer_id(&mut c).await;
    // Ten requests of two records each, sent without waiting (a client with several
    // in flight): the front end may append several as one entry.
    let batches: Vec<_> = (0..10)
        .map(|i| {
            let (a, b) = (format!("r{}", 2 * i), format!("r{}", 2 * i + 1));
            idempotent_batch(&[&a, &b], pid, epoch, 2 * i)
        })
        .collect();
    let mut ids = Vec::new();
    for b in &batches {
        ids.push(c.send(&produce_request("pipelined", 0, b.clone(), -1), 9).await);
    }
    let mut bases = Vec::new();
    for id in ids {
        let (got, response) = c.receive::<ProduceRequest>(9).await;
        assert_eq!(got, id);
        let p = &response.responses[0].partition_responses[0];
        assert_eq!(p.error_code, 0, "{:?}", p.error_message);
        bases.push(p.base_offset);
    }
    assert_eq!(bases, (0..10).map(|i| 2 * i).collect::<Vec<i64>>());
    // The client retries them all (it lost the answers), pipelined again: the last is answered
    // with its offset, the others are duplicates; nothing is appended.
    let mut ids = Vec::new();
    for b in &batches {
        ids.push(c.send(&produce_request("pipelined", 0, b.clone(), -1), 9).await);
    }
    for (i, id) in ids.into_iter().enumerate() {
        let (got, response) = c.receive::<ProduceRequest>(9).await;
        assert_eq!(got, id);
        let p = &response.responses[0].partition_responses[0];
        assert!(
            p.error_code == DUPLICATE_SEQUENCE_NUMBER || (p.error_code == 0 && p.base_offset == 2 * i as i64),
            "retry {i}: {} {:?}",
            p.error_code,
            p.error_message
        );
    }
    let expected: Vec<String> = (0..20).map(|i| format!("r{i}")).collect();
    assert_eq!(values(&mut c, "pipelined").await, expected);
    r.stop().await;
}

/// A producer whose state expired while it was idle (`[producers] idle_expiry`) gets
/// UNKNOWN_PRODUCER_ID, as from Kafka, and starts again at sequence 0 of the same epoch.
#[tokio::test]
async fn a_producer_whose_state_expired_is_unknown_then_starts_again() {
    let r = start().await;
    let mut c = Client::connect(&r).await;
    assert_eq!(create_topic(&mut c, "expiring", 1).await, 0);
    let (pid, epoch) = init_producer_id(&mut c).await;
    assert_eq!(produce(&mut c, "expiring", 0, idempotent_batch(&["a", "b"], pid, epoch, 0)).await, (0, 0));
    // The topic's stream is named after the topic and its topic id.
    let streams = r.stack.all_streams().await.unwrap();
    let stream =
        streams.iter().find(|s| s.name.starts_with("expiring-topic-id-")).expect("the topic's stream");
    let log = stream.log_ref(0).unwrap().log_id;
    let eight_days_on = r.stack.clock.now_ms() + 8 * 24 * 3600 * 1000;
    let swept = lakestream_service::producers::expire_idle(
        r.stack.meta.as_ref(),
        log,
        eight_days_on,
        7 * 24 * 3600 * 1000,
    )
    .await
    .unwrap();
    assert_eq!(swept.expired, 1);
    let next = idempotent_batch(&["c"], pid, epoch, 2);
    assert_eq!(produce(&mut c, "expiring", 0, next).await.0, UNKNOWN_PRODUCER_ID);
    // The client resets its sequence (Java bumps its epoch; either starts at 0).
    assert_eq!(produce(&mut c, "expiring", 0, idempotent_batch(&["c"], pid, epoch, 0)).await, (0, 2));
    assert_eq!(values(&mut c, "expiring").await, ["a", "b", "c"]);
    r.stop().await;
}

#[tokio::test]
async fn transactional_producers_are_refused() {
    let r = start().await;
    let mut c = Client::connect(&r).await;
    let request = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("tx-1"))))
        .with_transaction_timeout_ms(60_000);
    let response = c.call(&request, 4).await;
    assert_eq!((response.error_code, response.producer_id.0), (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1));
    let find = FindCoordinatorRequest::default()
        .with_key_type(1)
        .with_coordinator_keys(vec![StrBytes::from_static_str("tx-1")]);
    let response = c.call(&find, 4).await;
    assert_eq!(response.coordinators[0].error_code, TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    r.stop().await;
}
