//! CloudEvents ingest when an append's outcome is unknown (issue #34): the events' claims are
//! kept, naming where the entry would be, and are resolved by reading the log — never by
//! appending again blindly. The whole service runs on a metadata store that answers a log's
//! index put with an unknown outcome at chosen moments: after applying it (the answer was
//! lost), before applying it and applying it later (it lands late), or without applying it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lakestream_cloudevents::{Attribute, CloudEvent};
use lakestream_meta::InMemoryStore;
use lakestream_meta::hooked::{HookedStore, Op};
use lakestream_service::api::{FetchParams, PartitionRef};
use lakestream_service::auth::Caller;
use lakestream_service::events::EventStatus;
use lakestream_service::{Api, ErrorKind, Service, ServiceConfig};

/// What the store does to the next index put of a log (a sequenced put into a log's
/// partition, whose name is the decimal log ID).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Apply it, then answer with an unknown outcome.
    LoseAnswer,
    /// Hold it (not applied) and answer with an unknown outcome; the test applies it later.
    LandLate,
    /// Drop it and answer with an unknown outcome.
    Drop,
}

/// Arms `fault` for the next index put of a log.
fn arm(store: &HookedStore, fault: Fault) {
    let next =
        store.on(Op::SequencedPut).when(|call| call.partition.bytes().all(|b| b.is_ascii_digit())).once();
    match fault {
        Fault::LoseAnswer => next.lose_answer(),
        // Held: `land_held` applies it; a dropped one is never applied.
        Fault::LandLate | Fault::Drop => next.hold(),
    };
}

/// Applies the held put now: the append lands late.
async fn land_held(store: &HookedStore) {
    let held = store.held();
    assert_eq!(held.len(), 1, "one held put: {held:?}");
    store.land(&held[0]).await.unwrap();
}

/// The claim lapse of these tests: the shortest allowed.
const LAPSE: Duration = Duration::from_secs(1);

async fn service(dir: &std::path::Path) -> (Service, Arc<HookedStore>) {
    let store = HookedStore::new(Arc::new(InMemoryStore::new()));
    let mut config = ServiceConfig::dev(dir);
    config.cloudevents.claim_lapse = LAPSE;
    let service = Service::start_with_meta(&config, store.clone()).await.expect("the service starts");
    let api = service.api();
    let caller = api.admit(None, None).unwrap();
    api.create_stream(&caller, "default", "orders", Some(1), BTreeMap::new()).await.unwrap();
    (service, store)
}

fn event(id: &str) -> CloudEvent {
    let attributes = vec![
        Attribute::string("specversion", "1.0"),
        Attribute::string("id", id),
        Attribute::string("source", "/shop"),
        Attribute::string("type", "order.placed"),
    ];
    CloudEvent::new(attributes, None).unwrap()
}

async fn ingest(api: &Api, caller: &Caller, id: &str) -> lakestream_service::ApiResult<(EventStatus, u64)> {
    let results = api.ingest_events(caller, "default", "orders", Some(0), vec![event(id)]).await?;
    Ok((results[0].status, results[0].offset))
}

/// The ids of the events in partition 0, in offset order.
async fn stored_ids(api: &Api, caller: &Caller) -> Vec<String> {
    let target = PartitionRef { namespace: "default", stream: "orders", partition: 0 };
    let mut ids = Vec::new();
    let mut offset = 0;
    loop {
        let params = FetchParams { offset, max_bytes: None, max_wait_ms: 0 };
        let consumed = api.consume_events(caller, target, params).await.unwrap();
        if consumed.events.is_empty() {
            return ids;
        }
        ids.extend(consumed.events.iter().map(|e| e.event.id().to_string()));
        offset = consumed.next_offset;
    }
}

/// Waits out the claims' lapse (restarted at the unknown outcome).
async fn past_the_lapse() {
    tokio::time::sleep(LAPSE + Duration::from_millis(300)).await;
}

#[tokio::test]
async fn an_append_whose_answer_was_lost_is_found_in_the_log_and_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let (service, store) = service(dir.path()).await;
    let api = service.api();
    let caller = api.admit(None, None).unwrap();
    ingest(api, &caller, "a").await.unwrap();
    arm(&store, Fault::LoseAnswer);
    let (status, offset) = ingest(api, &caller, "b").await.expect("found where the append put it");
    assert_eq!((status, offset), (EventStatus::Appended, 1));
    let (status, offset) = ingest(api, &caller, "b").await.unwrap();
    assert_eq!((status, offset), (EventStatus::Duplicate, 1));
    assert_eq!(stored_ids(api, &caller).await, ["a", "b"]);
    service.shutdown().await;
}

#[tokio::test]
async fn an_append_that_lands_late_is_found_by_the_retry_and_not_appended_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (service, store) = service(dir.path()).await;
    let api = service.api();
    let caller = api.admit(None, None).unwrap();
    arm(&store, Fault::LandLate);
    let unknown = ingest(api, &caller, "late").await.unwrap_err();
    assert_eq!(unknown.kind(), ErrorKind::OutcomeUnknown, "{unknown:?}");
    // A retry before the lapse is told to wait: the claim is kept.
    let waiting = ingest(api, &caller, "late").await.unwrap_err();
    assert_eq!(waiting.kind(), ErrorKind::InFlight, "{waiting:?}");
    // The put lands after the request was answered...
    land_held(&store).await;
    past_the_lapse().await;
    // ...and the retry finds it instead of appending the event again.
    let (status, offset) = ingest(api, &caller, "late").await.unwrap();
    assert_eq!((status, offset), (EventStatus::Duplicate, 0));
    ingest(api, &caller, "next").await.unwrap();
    assert_eq!(stored_ids(api, &caller).await, ["late", "next"]);
    service.shutdown().await;
}

#[tokio::test]
async fn an_append_that_never_landed_is_appended_by_the_retry() {
    let dir = tempfile::tempdir().unwrap();
    let (service, store) = service(dir.path()).await;
    let api = service.api();
    let caller = api.admit(None, None).unwrap();
    ingest(api, &caller, "first").await.unwrap();
    arm(&store, Fault::Drop);
    let unknown = ingest(api, &caller, "lost").await.unwrap_err();
    assert_eq!(unknown.kind(), ErrorKind::OutcomeUnknown, "{unknown:?}");
    assert!(unknown.retry_after_secs().is_some(), "the answer says when to retry");
    past_the_lapse().await;
    let (status, offset) = ingest(api, &caller, "lost").await.unwrap();
    assert_eq!((status, offset), (EventStatus::Appended, 1));
    assert_eq!(stored_ids(api, &caller).await, ["first", "lost"]);
    service.shutdown().await;
}
