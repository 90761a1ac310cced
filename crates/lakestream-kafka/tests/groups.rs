//! Consumer-group requests on the wire, one front end (a stack of the embedded metadata store
//! and the real S3 server, as `wire.rs`; each first rebalance waits the default initial delay
//! of 3 s): a connection's group requests run in request order, as a Kafka broker runs them;
//! OffsetCommit and OffsetFetch round-trip, an offset may move back; a member of an older
//! generation is refused; group ids the offset store does not take are INVALID_GROUP_ID.

mod support;

use kafka_protocol::messages::*;
use support::*;

const ILLEGAL_GENERATION: i16 = 22;
const INVALID_GROUP_ID: i16 = 24;

/// A JoinGroup waiting out a rebalance holds the heartbeat sent behind it on the same
/// connection: the heartbeat, of the generation the join will get, then succeeds.
#[tokio::test]
async fn a_connections_group_requests_run_in_request_order() {
    let r = start().await;
    let mut c = Client::connect(&r).await;
    let first = join(&mut c, "ordered", "").await;
    assert_eq!(first.error_code, MEMBER_ID_REQUIRED);
    let member = first.member_id.to_string();
    let join_request = JoinGroupRequest::default()
        .with_group_id(group("ordered"))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(text(&member))
        .with_protocol_type(text("consumer"))
        .with_protocols(vec![
            join_group_request::JoinGroupRequestProtocol::default()
                .with_name(text("range"))
                .with_metadata(bytes::Bytes::from_static(b"m")),
        ]);
    let join_id = c.send(&join_request, 5).await;
    let beat = HeartbeatRequest::default()
        .with_group_id(group("ordered"))
        .with_member_id(text(&member))
        .with_generation_id(1);
    let beat_id = c.send(&beat, 4).await;
    let (got, joined) = c.receive::<JoinGroupRequest>(5).await;
    assert_eq!((got, joined.error_code, joined.generation_id), (join_id, 0, 1));
    let (got, beat) = c.receive::<HeartbeatRequest>(4).await;
    assert_eq!((got, beat.error_code), (beat_id, 0), "run after the join, in generation 1");
    r.stop().await;
}

#[tokio::test]
async fn committed_offsets_round_trip_and_stale_generations_are_refused() {
    let r = start().await;
    let mut c = Client::connect(&r).await;
    assert_eq!(create_topic(&mut c, "events", 1).await, 0);
    for v in ["a", "b", "c", "d"] {
        assert_eq!(produce(&mut c, "events", 0, batch(&[v])).await.0, 0);
    }
    // Nothing committed yet: -1.
    assert_eq!(committed(&mut c, "readers", "events").await, (0, -1));
    let joined = join_new(&mut c, "readers").await;
    let member = joined.member_id.to_string();
    sync_alone(&mut c, "readers", &member, 1).await;
    assert_eq!(commit(&mut c, "readers", &member, 1, "events", 3).await, 0);
    assert_eq!(committed(&mut c, "readers", "events").await, (0, 3));
    // Back, as a Kafka consumer may after seeking.
    assert_eq!(commit(&mut c, "readers", &member, 1, "events", 1).await, 0);
    assert_eq!(committed(&mut c, "readers", "events").await, (0, 1));
    assert_eq!(commit(&mut c, "readers", &member, 0, "events", 2).await, ILLEGAL_GENERATION);
    assert_eq!(commit(&mut c, "readers", "someone", 1, "events", 2).await, UNKNOWN_MEMBER_ID);
    // A commit without membership into a group with members.
    assert_eq!(commit(&mut c, "readers", "", -1, "events", 2).await, UNKNOWN_MEMBER_ID);
    // Beyond the partition's end.
    assert_eq!(commit(&mut c, "readers", &member, 1, "events", 9).await, OFFSET_OUT_OF_RANGE);
    assert_eq!(committed(&mut c, "readers", "events").await, (0, 1), "nothing refused was stored");
    // A group id with a character the offset store refuses.
    let bad =
        FindCoordinatorRequest::default().with_key_type(0).with_coordinator_keys(vec![text("has space")]);
    assert_eq!(c.call(&bad, 4).await.coordinators[0].error_code, INVALID_GROUP_ID);
    r.stop().await;
}

const OFFSET_OUT_OF_RANGE: i16 = 1;
