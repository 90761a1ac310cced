//! Tests against a real Oxia server: the `lakestream-meta` conformance suite, and checks of
//! this client's own behaviour (routing over 4 shards, ordered pipelined writes, leader
//! change, session expiry, outcome-unknown on a broken stream). The last two put a plain TCP
//! relay (`mod relay`) between client and server to break the transport on purpose.
//!
//! They need a server: `scripts/test` starts `oxia standalone --shards 4` and exports its
//! address. Elsewhere, start one (e.g. `docker compose up oxia`) and run
//!
//! ```text
//! LAKESTREAM_TEST_OXIA=127.0.0.1:6648 cargo test -p lakestream-meta-oxia --test oxia_server
//! ```
//!
//! Without `LAKESTREAM_TEST_OXIA` every test fails with these instructions (none skips).
//! Every test works on keys and log ids unique to the run, so the server may keep data
//! between runs.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use lakestream_format::LogId;
use lakestream_format::keys;
use lakestream_meta::conformance::{self, StoreFactory};
use lakestream_meta::{MetaError, MetaStore, PutCondition, Session};
use lakestream_meta_oxia::errors::OxiaErrorKind;
use lakestream_meta_oxia::testkit::{self, Relay, StandaloneOxia};
use lakestream_meta_oxia::{
    LEGACY_SERVICE_NAME, OxiaClient, OxiaConfig, OxiaStore, RequestKind, ShardMap, V1_SERVICE_NAME,
    shard_sessions_from_id,
};

/// The server under test; panics (never skips) when it is not configured.
fn server_address() -> String {
    testkit::shared_address()
}

fn config() -> OxiaConfig {
    OxiaConfig { request_timeout: Duration::from_secs(10), ..OxiaConfig::new([server_address()]) }
}

async fn store() -> OxiaStore {
    OxiaStore::connect(config()).await.expect("connect to the Oxia server")
}

/// A log id no earlier run used: the wall clock in µs, below 2^62.
#[allow(clippy::disallowed_methods)] // tests may read the clock
fn fresh_log_id() -> LogId {
    let micros =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_micros();
    LogId(u64::try_from(micros % (1 << 62)).expect("below 2^62"))
}

struct OxiaFactory {
    store: Arc<OxiaStore>,
}

#[async_trait]
impl StoreFactory for OxiaFactory {
    async fn store(&self) -> Arc<dyn MetaStore> {
        Arc::clone(&self.store) as Arc<dyn MetaStore>
    }

    /// Makes the server drop the session's Oxia sessions, as expiry does; the client learns
    /// it from its next keep-alive.
    async fn expire_session(&self, _store: &Arc<dyn MetaStore>, session: &Arc<dyn Session>) -> bool {
        let shard_sessions = shard_sessions_from_id(&session.id()).expect("an OxiaSession id");
        assert!(!shard_sessions.is_empty(), "the session holds no Oxia session yet");
        for (shard, session_id) in shard_sessions {
            self.store.client().close_session(shard, session_id).await.expect("close the shard session");
        }
        true
    }
}

// spec-runs-suite: crates/lakestream-meta/src/conformance.rs
// spec-rule: 90683d74de [All] An implementation MUST use a metadata store that provides:
/// The `lakestream-meta` conformance suite through the default service name,
/// `io.oxia.proto.v1.OxiaClient`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_suite_under_the_v1_service_name() {
    let config = OxiaConfig { service_name: V1_SERVICE_NAME.to_owned(), ..config() };
    assert_eq!(config.service_name, OxiaConfig::new(["x:1"]).service_name, "v1 is the default");
    let factory = OxiaFactory { store: Arc::new(OxiaStore::connect(config).await.expect("connect")) };
    conformance::run_all(&factory).await;
}

// spec-runs-suite: crates/lakestream-meta/src/conformance.rs
/// The same suite through the pre-0.15 name, `io.streamnative.oxia.proto.OxiaClient`, which
/// v0.15+ servers still answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_suite_under_the_legacy_service_name() {
    let config = OxiaConfig { service_name: LEGACY_SERVICE_NAME.to_owned(), ..config() };
    let factory = OxiaFactory { store: Arc::new(OxiaStore::connect(config).await.expect("connect")) };
    conformance::run_all(&factory).await;
}

/// Lakestream needs hierarchical key order; the store checks it when it connects. The server
/// under test sorts hierarchically (the default); a second server started here with
/// `--key-sorting=natural` is refused at connect, with the setting named.
#[tokio::test]
async fn connect_refuses_a_namespace_without_hierarchical_key_order() {
    let store = store().await;
    store.check_key_order().await.expect("hierarchical key order");

    let natural = StandaloneOxia::start(1, &["--key-sorting", "natural"]).await;
    let refused =
        OxiaStore::connect(OxiaConfig::new([natural.address()])).await.expect_err("natural order refused");
    assert!(matches!(refused, MetaError::InvalidRequest(_)), "{refused:?}");
    assert!(refused.to_string().contains("--key-sorting=hierarchical"), "{refused}");
}

/// oxia.md §4–5: with `--shards 4` the server announces the standalone ranges, and the
/// partitions of the reference vectors live on the shards the vectors name: a record written
/// through the client is found on its shard and on no other.
#[tokio::test]
async fn routing_with_four_shards() {
    let store = store().await;
    let client = store.client();
    let map = client.shard_map().expect("a shard map");
    let leader = map.shards()[0].leader.clone();
    assert_eq!(*map, ShardMap::standalone(4, &leader).expect("valid"), "run the server with --shards 4");

    let key = format!("/lakestream-oxia-test/routing/{}", fresh_log_id().0);
    for (partition, shard) in [("foo", 0), ("bar", 2), ("baz", 0), ("3", 1), ("7", 2), ("42", 3)] {
        assert_eq!(client.shard_for(partition).expect("routed"), shard, "partition {partition}");
        let key = format!("{key}/{partition}");
        store.put(partition, &key, Bytes::from_static(b"x"), PutCondition::None).await.expect("put");
        for other in 0..4 {
            let request =
                lakestream_meta_oxia::requests::read_request(other, &key, lakestream_meta::Comparison::Equal)
                    .expect("valid");
            let gets = client.read(other, request).await.expect("read");
            let found = gets.first().is_some_and(|g| g.status == 0);
            assert_eq!(found, other == shard, "{key} on shard {other}");
        }
    }
}

/// oxia.md §6 and §8: one writer's pipelined sequenced puts on one log commit in the order
/// they were issued, each continuing from the previous key (reference example: [3,8],
/// [2,5], [1,0] → …3-…8, …5-…13, …6-…13) — also when far more are issued than the stream
/// keeps in flight, and however the futures are polled.
#[tokio::test]
async fn pipelined_sequenced_puts_commit_in_issue_order() {
    for max_pending in [4, 1024] {
        let store = OxiaStore::connect(OxiaConfig { max_pending_writes_per_shard: max_pending, ..config() })
            .await
            .expect("connect");
        let log = fresh_log_id();
        let (partition, prefix) = (keys::partition(log), keys::index_prefix(log));
        let deltas: Vec<[u64; 2]> =
            [[3, 8], [2, 5], [1, 0]].into_iter().chain((1..=300).map(|i| [1, i])).collect();
        // Issued in this order (the puts are queued when called), then polled from the last.
        let puts: Vec<_> = deltas
            .iter()
            .map(|d| store.sequenced_put(&partition, &prefix, d, Bytes::from_static(b"e")))
            .collect();
        let mut results = futures::future::join_all(puts.into_iter().rev()).await;
        results.reverse();
        let (mut end, mut size) = (0u64, 0u64);
        for (d, result) in deltas.iter().zip(results) {
            (end, size) = (end + d[0], size + d[1]);
            let written = result.expect("sequenced put");
            assert_eq!(
                written.key,
                keys::index_key(log, end, size),
                "deltas {d:?}, max_pending {max_pending}"
            );
        }
    }
}

/// A malformed sequenced put never reaches the server, so it cannot break the stream that
/// other writes share.
#[tokio::test]
async fn malformed_sequenced_put_leaves_the_stream_working() {
    let store = store().await;
    let log = fresh_log_id();
    let (partition, prefix) = (keys::partition(log), keys::index_prefix(log));
    let first = store.sequenced_put(&partition, &prefix, &[1, 1], Bytes::new());
    let bad = store.sequenced_put(&partition, &prefix, &[0, 1], Bytes::new());
    let last = store.sequenced_put(&partition, &prefix, &[1, 1], Bytes::new());
    let (first, bad, last) = tokio::join!(first, bad, last);
    assert!(matches!(bad, Err(MetaError::InvalidRequest(_))), "{bad:?}");
    assert_eq!(first.expect("first").key, keys::index_key(log, 1, 1));
    assert_eq!(last.expect("last").key, keys::index_key(log, 2, 2));
}

/// oxia.md §6: a write whose stream broke after it was sent is reported as outcome unknown,
/// never as failed — and it may indeed have committed. The client reaches the server through
/// a local TCP relay that holds back the server's answers and then cuts the connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcome_unknown_on_a_broken_stream() {
    let direct = store().await;
    let relay = Relay::start(&server_address()).await;
    // Standalone names as leader the address the client dialled: the relay.
    let relayed = OxiaStore::connect(OxiaConfig {
        request_timeout: Duration::from_secs(10),
        ..OxiaConfig::new([relay.address()])
    })
    .await
    .expect("connect through the relay");
    let log = fresh_log_id();
    let (partition, prefix) = (keys::partition(log), keys::index_prefix(log));
    relayed.sequenced_put(&partition, &prefix, &[1, 1], Bytes::new()).await.expect("first put");

    relay.hold_answers(true);
    let pending = {
        let relayed = relayed.clone();
        let (partition, prefix) = (partition.clone(), prefix.clone());
        tokio::spawn(async move { relayed.sequenced_put(&partition, &prefix, &[1, 1], Bytes::new()).await })
    };
    // The request reaches the server (only answers are held); wait until it committed.
    let second = keys::index_key(log, 2, 2);
    let committed = async {
        loop {
            let keys =
                direct.list(&partition, &keys::first_key(log), &keys::last_key(log)).await.expect("list");
            if keys.contains(&second) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), committed).await.expect("the second put committed");
    relay.cut();

    let outcome = pending.await.expect("joined");
    assert!(matches!(outcome, Err(MetaError::OutcomeUnknown(_))), "committed but reported {outcome:?}");

    // A new stream carries the next write, continuing the sequence.
    relay.hold_answers(false);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let written = loop {
        match relayed.sequenced_put(&partition, &prefix, &[1, 1], Bytes::new()).await {
            Ok(written) => break written,
            Err(MetaError::Unavailable(reason)) if tokio::time::Instant::now() < deadline => {
                eprintln!("retrying after: {reason}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("the write after the break failed: {error}"),
        }
    };
    assert_eq!(written.key, keys::index_key(log, 3, 3));
}

/// oxia.md §10: the client learns that a session ended from its keep-alive (session not
/// found), fires `ended`, and the server has removed the ephemeral records.
#[tokio::test]
async fn session_expiry_is_detected() {
    let store = store().await;
    let log = fresh_log_id();
    let partition = keys::partition(log);
    let session = store.open_session(Duration::from_secs(4)).await.expect("session");
    let lease = keys::lease_key(log, "expiry-test");
    session.create_ephemeral(&partition, &lease, Bytes::from_static(b"t")).await.expect("ephemeral");
    let mut ended = session.ended();
    assert!(!*ended.borrow());

    // Remove the session on the server behind the client's back: like expiry, this deletes
    // it and its ephemeral records, and the client must learn it from its next keep-alive.
    for (shard, session_id) in shard_sessions_from_id(&session.id()).expect("an OxiaSession id") {
        store.client().close_session(shard, session_id).await.expect("close");
    }
    tokio::time::timeout(Duration::from_secs(10), ended.wait_for(|e| *e))
        .await
        .expect("ended fired")
        .expect("open");
    assert_eq!(
        store.get(&partition, &lease).await.expect("get"),
        None,
        "the lease vanished with the session"
    );
    let late = session.create_ephemeral(&partition, &lease, Bytes::new()).await;
    assert!(matches!(late, Err(MetaError::SessionEnded(_))), "{late:?}");

    // And a session nobody keeps alive is gone on the server after its timeout.
    let client = store.client();
    let shard = client.shard_for(&partition).expect("routed");
    let orphan = client.create_session(shard, Duration::from_secs(2)).await.expect("create");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let error = client.keep_alive(shard, orphan, Duration::from_secs(5)).await.expect_err("expired");
    assert_eq!(error.kind, OxiaErrorKind::SessionNotFound, "{error}");
}

/// Leader change: when the assignment names a new leader, writes move to it. Two relays
/// stand for two addresses of the same standalone server, which names as leader whatever
/// address the client dialled. The client starts on relay A; A is shut down, the client's
/// assignment stream reconnects through B, the leader of every shard becomes B, and writes
/// continue there with the sequence intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_follow_a_leader_change() {
    let address = server_address();
    let (relay_a, relay_b) = (Relay::start(&address).await, Relay::start(&address).await);
    let store = OxiaStore::connect(OxiaConfig {
        request_timeout: Duration::from_secs(5),
        ..OxiaConfig::new([relay_a.address(), relay_b.address()])
    })
    .await
    .expect("connect through relay A");
    let client: &OxiaClient = store.client();
    let log = fresh_log_id();
    let (partition, prefix) = (keys::partition(log), keys::index_prefix(log));
    let shard = client.shard_for(&partition).expect("routed");
    let leader =
        |client: &OxiaClient| client.shard_map().and_then(|m| m.shard(shard).map(|s| s.leader.clone()));
    assert_eq!(leader(client).as_deref(), Some(relay_a.address().as_str()));
    store.sequenced_put(&partition, &prefix, &[1, 1], Bytes::new()).await.expect("before the move");

    relay_a.shut_down();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let written = loop {
        match store.sequenced_put(&partition, &prefix, &[1, 1], Bytes::new()).await {
            Ok(written) => break written,
            // During the move writes fail as retryable, or as unknown if they were sent.
            Err(error @ (MetaError::Unavailable(_) | MetaError::OutcomeUnknown(_))) => {
                assert!(tokio::time::Instant::now() < deadline, "no write succeeded after the move: {error}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("unexpected error during the leader move: {error}"),
        }
    };
    assert_eq!(leader(client).as_deref(), Some(relay_b.address().as_str()), "re-routed to the new leader");
    let parsed = keys::IndexKey::parse(&written.key).expect("index key");
    assert!(parsed.end_offset >= 2, "the sequence continued across the move: {}", written.key);
}

/// A write stream that the server refuses at open applied nothing: the write is never
/// reported as outcome unknown, and once a server that holds the shard answers, it is sent
/// and commits exactly once, continuing the log's sequence. Two real servers stand behind one
/// relay address: A (4 shards) and B (1 shard, so shard 2 is unknown to it and every stream
/// for it is refused); the relay sends connections to B for a while, then back to A.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_write_stream_applies_nothing_and_the_write_commits_once_later() {
    let (a, b) = (StandaloneOxia::start(4, &[]).await, StandaloneOxia::start(1, &[]).await);
    let relay = Relay::start(&a.address()).await;
    let config =
        OxiaConfig { request_timeout: Duration::from_secs(20), ..OxiaConfig::new([relay.address()]) };
    let store = OxiaStore::connect(config).await.expect("connect through the relay to A");
    // A log whose partition lives on shard 2 of A.
    let log = (1..)
        .map(|n| LogId(fresh_log_id().0 + n))
        .find(|log| store.client().shard_for(&keys::partition(*log)) == Ok(2))
        .expect("some log id routes to shard 2");
    let (partition, prefix) = (keys::partition(log), keys::index_prefix(log));
    store.sequenced_put(&partition, &prefix, &[1, 1], Bytes::new()).await.expect("first put, on A");

    // Only the write connection goes to B: the assignment stream (the first connection) stays
    // on A, so the client keeps routing the log to shard 2.
    assert_eq!(relay.accepted(), 2, "the assignment stream and the write stream");
    relay.redirect(&b.address());
    relay.cut_from(1);
    // Let the client see its stream to A end first: a write handed to a stream that is already
    // cut but not yet known to be is honestly outcome unknown, and that is not this test.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pending = {
        let store = store.clone();
        let (partition, prefix) = (partition.clone(), prefix.clone());
        tokio::spawn(async move { store.sequenced_put(&partition, &prefix, &[1, 1], Bytes::new()).await })
    };
    // Long enough for B to refuse the stream several times.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!pending.is_finished(), "the write gave up while only B answered: {:?}", pending.await);
    let b_store = OxiaStore::connect(OxiaConfig::new([b.address()])).await.expect("connect to B");
    let on_b = b_store.list(&partition, &keys::first_key(log), &keys::last_key(log)).await.expect("list B");
    assert!(on_b.is_empty(), "B applied something: {on_b:?}");

    relay.redirect(&a.address());
    relay.cut_from(1);
    let written = pending.await.expect("joined").expect("committed once A answered again");
    assert_eq!(written.key, keys::index_key(log, 2, 2), "continues the sequence, applied once");
    let on_a = store.list(&partition, &keys::first_key(log), &keys::last_key(log)).await.expect("list A");
    assert_eq!(on_a, [keys::index_key(log, 1, 1), keys::index_key(log, 2, 2)]);
}

/// oxia.md §10: with the shortest session timeout Oxia accepts (2 s), heartbeats come often
/// enough that the session and its ephemeral record outlive several timeouts.
#[tokio::test]
async fn a_session_with_the_shortest_timeout_survives() {
    let store = store().await;
    let log = fresh_log_id();
    let partition = keys::partition(log);
    let session = store.open_session(Duration::from_secs(2)).await.expect("session");
    let lease = keys::lease_key(log, "short-session");
    session.create_ephemeral(&partition, &lease, Bytes::from_static(b"t")).await.expect("ephemeral");
    let ended = session.ended();
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert!(!*ended.borrow(), "a 2 s session ended although it was kept alive");
    assert!(store.get(&partition, &lease).await.expect("get").is_some(), "the ephemeral record expired");
    session.close().await.expect("close");
    assert_eq!(store.get(&partition, &lease).await.expect("get"), None);
}

/// Reads that stop early (a scan with a limit, a caller's timeout) reset their HTTP/2
/// streams while the server is still sending. Under a `bench consume`-like load of
/// thousands of them the connection must stay healthy: h2 by default remembers 10 reset
/// streams, counts frames on forgotten ones as errors and closes the connection after 1024.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_reads_under_load_keep_the_connection_healthy() {
    const RECORDS: usize = 2_500; // three RangeScan messages of at most 1000 records
    const SCANS: usize = 3_000;
    const CONCURRENCY: usize = 48;
    let store = store().await;
    let partition = format!("reset-load-{}", fresh_log_id().0);
    let value = Bytes::from(vec![b'v'; 512]);
    let puts = (0..RECORDS).map(|i| {
        let key = format!("/lakestream-oxia-test/{partition}/{i:06}");
        let (store, partition, value) = (store.clone(), partition.clone(), value.clone());
        async move { store.put(&partition, &key, value, PutCondition::None).await }
    });
    for result in futures::future::join_all(puts).await {
        result.expect("put");
    }
    let (start, end) =
        (format!("/lakestream-oxia-test/{partition}/"), format!("/lakestream-oxia-test/{partition}//"));
    let failures = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers = (0..CONCURRENCY).map(|worker| {
        let (store, partition, start, end) = (store.clone(), partition.clone(), start.clone(), end.clone());
        let (failures, next) = (Arc::clone(&failures), Arc::clone(&next));
        tokio::spawn(async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < SCANS {
                let scan = store.scan(&partition, &start, &end, Some(1));
                if worker % 4 == 0 {
                    // A caller that gives up mid-read: its stream is reset too.
                    let _ = tokio::time::timeout(Duration::from_micros(300), scan).await;
                    continue;
                }
                match scan.await {
                    Ok(records) if records.len() == 1 => {}
                    other => {
                        eprintln!("scan failed: {other:?}");
                        failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
        })
    });
    for worker in futures::future::join_all(workers).await {
        worker.expect("joined");
    }
    assert_eq!(failures.load(std::sync::atomic::Ordering::Relaxed), 0, "reads failed under load");
    let all = store.list(&partition, &start, &end).await.expect("a read after the load");
    assert_eq!(all.len(), RECORDS);
}

/// A connection that fails is re-established without failing the read: reads through a
/// relay that cuts every connection again and again all succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_survive_dropped_connections() {
    let relay = Relay::start(&server_address()).await;
    let store = OxiaStore::connect(OxiaConfig {
        request_timeout: Duration::from_secs(10),
        ..OxiaConfig::new([relay.address()])
    })
    .await
    .expect("connect through the relay");
    let log = fresh_log_id();
    let partition = keys::partition(log);
    let key = format!("/lakestream-oxia-test/drops/{}", log.0);
    store.put(&partition, &key, Bytes::from_static(b"kept"), PutCondition::None).await.expect("put");
    for round in 0..20 {
        relay.cut();
        let read = store.get(&partition, &key).await;
        assert_eq!(
            read.map(|r| r.map(|r| r.value)),
            Ok(Some(Bytes::from_static(b"kept"))),
            "read {round} after a cut"
        );
    }
}

/// The client's request counts on a real server: each primitive is one request of its kind,
/// and answers such as "the key exists" are not request errors.
#[tokio::test]
async fn requests_are_counted_by_kind_on_a_real_server() {
    let s = store().await;
    let before = s.client().stats();
    let partition = format!("stats-{}", fresh_log_id());
    let key = format!("/stats/{partition}");
    s.put(&partition, &key, Bytes::from_static(b"v"), PutCondition::None).await.unwrap();
    let exists = s.put(&partition, &key, Bytes::new(), PutCondition::IfAbsent).await;
    assert!(matches!(exists, Err(MetaError::KeyExists { .. })), "{exists:?}");
    s.get(&partition, &key).await.unwrap().unwrap();
    s.list(&partition, "/stats/", "/stats//").await.unwrap();
    s.scan(&partition, "/stats/", "/stats//", None).await.unwrap();
    let after = s.client().stats();
    let delta = |kind: RequestKind| {
        let (a, b) = (after.of(kind), before.of(kind));
        (a.requests - b.requests, a.errors - b.errors)
    };
    assert_eq!(delta(RequestKind::Write), (2, 0));
    assert_eq!(delta(RequestKind::Read), (1, 0));
    assert_eq!(delta(RequestKind::List), (1, 0));
    assert_eq!(delta(RequestKind::Scan), (1, 0));
    s.delete(&partition, &key).await.unwrap();
}
