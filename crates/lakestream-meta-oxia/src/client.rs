//! [`OxiaClient`]: the connection to an Oxia cluster.
//!
//! - **Shard map.** A background task keeps a `GetShardAssignments` stream open to one of the
//!   bootstrap servers and replaces the map on every message (each is complete). When the
//!   stream breaks it reconnects, trying the addresses in turn with a growing pause. A shard
//!   announced without a leader (an election under way, or no quorum) is kept in the map:
//!   its calls wait for the next assignment, and the other shards' moves are followed.
//! - **Routing.** Each call names a shard; [`OxiaClient::shard_for`] picks it from a partition
//!   key. Calls go to the shard's leader; a leader named in a "not leader" error is used until
//!   the next assignment arrives.
//! - **Writes** go through one [`ShardWriter`] per shard for the client's life, so they commit
//!   in the order they were issued. The writer opens its stream on the shard's current leader,
//!   re-routes after a refusal, and reopens after a break; a write is never sent twice (a
//!   retry could apply a sequenced put twice).
//! - **Reads and session calls** are retried within the request timeout: after a re-route
//!   when the shard moved, after a short pause when the server was momentarily unable.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tonic::Streaming;

use lakestream_format::retry::{Backoff, BackoffPolicy};
use lakestream_meta::{MetaError, MetaResult};

use crate::config::OxiaConfig;
use crate::errors::{OxiaError, OxiaErrorKind, RequestPhase, RetryAdvice};
use crate::merge::merge_sorted;
use crate::proto::oxia::{
    CloseSessionRequest, CloseSessionResponse, CreateSessionRequest, CreateSessionResponse, GetResponse,
    KeepAliveResponse, ListRequest, ListResponse, RangeScanRequest, RangeScanResponse, ReadRequest,
    ReadResponse, SessionHeartbeat, ShardAssignmentsRequest, WriteRequest, WriteResponse,
};
use crate::routing::{ShardId, ShardMap};
use crate::rpc::{Method, Rpc, channel};
use crate::stats::{Counters, OxiaStats, RequestKind};
use crate::write_stream::{Opener, ShardWriter, StreamChannels, WriteReply, open_grpc_stream};

/// How many times a read or session call is tried before its error is returned.
const MAX_ATTEMPTS: u32 = 5;
/// The longest pause between retries and between assignment-stream reconnects.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// The pauses between retries of a read or session call and between assignment-stream
/// reconnects: the project's one policy (`lakestream_format::retry`, full jitter), below
/// 50 ms first, the bound doubling to [`MAX_BACKOFF`]. Calls are bounded by [`MAX_ATTEMPTS`]
/// and the request timeout; reconnects by the client's life.
const BACKOFF: BackoffPolicy = BackoffPolicy::unbounded(Duration::from_millis(50), MAX_BACKOFF);

/// The current shard map and its generation (one per assignments message received).
#[derive(Debug, Clone)]
pub(crate) struct MapState {
    map: Arc<ShardMap>,
    generation: u64,
}

/// A connection to an Oxia cluster. Cheap to clone; the background task stops when the last
/// clone is dropped.
#[derive(Debug, Clone)]
pub struct OxiaClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: OxiaConfig,
    shard_map: watch::Receiver<Option<MapState>>,
    /// Connections by server address (lazy channels; tonic reconnects them).
    connections: Mutex<HashMap<String, Rpc>>,
    writers: Mutex<HashMap<ShardId, Arc<ShardWriter>>>,
    /// Leaders named by "not leader" errors, valid for the map generation they were seen in.
    leader_hints: Mutex<HashMap<ShardId, (u64, String)>>,
    assignments: JoinHandle<()>,
    /// Requests by kind, for [`OxiaClient::stats`].
    stats: Arc<Counters>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.assignments.abort();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The maps stay consistent under a panic elsewhere (each update is one insert/remove).
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl OxiaClient {
    /// Validates `config`, starts following the shard assignments, and waits (up to the
    /// request timeout) for the first one.
    pub async fn connect(config: OxiaConfig) -> MetaResult<Self> {
        config.validate().map_err(|e| MetaError::InvalidRequest(e.to_string()))?;
        let (map_tx, mut map_rx) = watch::channel(None);
        let assignments = tokio::spawn(follow_assignments(config.clone(), map_tx));
        let ready = matches!(
            tokio::time::timeout(config.request_timeout, map_rx.wait_for(Option::is_some)).await,
            Ok(Ok(_))
        );
        if !ready {
            assignments.abort();
            return Err(MetaError::Unavailable(format!(
                "no shard assignments for namespace `{}` from {:?} within {:?}",
                config.namespace, config.addresses, config.request_timeout
            )));
        }
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                shard_map: map_rx,
                connections: Mutex::default(),
                writers: Mutex::default(),
                leader_hints: Mutex::default(),
                assignments,
                stats: Arc::default(),
            }),
        })
    }

    /// A client on a fixed shard map with no assignment stream, for tests that need no
    /// server: channels are lazy, so nothing connects until a call is made. The sender
    /// publishes later maps.
    #[cfg(test)]
    pub(crate) fn with_fixed_map(map: ShardMap) -> (Self, watch::Sender<Option<MapState>>) {
        let config = OxiaConfig {
            request_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_millis(500),
            ..OxiaConfig::new(["127.0.0.1:1"])
        };
        let (map_tx, map_rx) = watch::channel(Some(MapState { map: Arc::new(map), generation: 1 }));
        let client = Self {
            inner: Arc::new(Inner {
                config,
                shard_map: map_rx,
                connections: Mutex::default(),
                writers: Mutex::default(),
                leader_hints: Mutex::default(),
                assignments: tokio::spawn(async {}),
                stats: Arc::default(),
            }),
        };
        (client, map_tx)
    }

    /// The requests made since the client connected, by kind, and how many failed.
    pub fn stats(&self) -> OxiaStats {
        self.inner.stats.snapshot()
    }

    /// Counts the outcome of one request of `kind`.
    fn counted<T, E>(&self, kind: RequestKind, result: Result<T, E>) -> Result<T, E> {
        self.inner.stats.record(kind, result.is_err());
        result
    }

    /// The settings in use.
    pub fn config(&self) -> &OxiaConfig {
        &self.inner.config
    }

    /// The current shard map.
    pub fn shard_map(&self) -> Option<Arc<ShardMap>> {
        self.inner.shard_map.borrow().as_ref().map(|state| Arc::clone(&state.map))
    }

    /// The shard that owns `partition_key`.
    pub fn shard_for(&self, partition_key: &str) -> MetaResult<ShardId> {
        let map =
            self.shard_map().ok_or_else(|| MetaError::Unavailable("no shard assignments yet".to_owned()))?;
        map.shard_for_key(partition_key).map(|shard| shard.id).ok_or_else(|| {
            MetaError::Unavailable(format!(
                "no shard owns partition `{partition_key}` in the current assignment"
            ))
        })
    }

    /// The leader to call for `shard`: a hint from this map generation, else the map's.
    fn leader_of(&self, shard: ShardId) -> Result<String, OxiaError> {
        let state = self.inner.shard_map.borrow().clone();
        let state =
            state.ok_or_else(|| OxiaError::new(OxiaErrorKind::Transport, "no shard assignments yet"))?;
        if let Some((generation, hint)) = lock(&self.inner.leader_hints).get(&shard)
            && *generation == state.generation
        {
            return Ok(hint.clone());
        }
        match state.map.shard(shard) {
            // An election is under way (or has no quorum): wait for the assignment that names
            // the new leader.
            Some(s) if s.leader.is_empty() => Err(OxiaError::new(
                OxiaErrorKind::NotLeader { leader_hint: None },
                format!("shard {shard} has no leader at the moment"),
            )),
            Some(s) => Ok(s.leader.clone()),
            None => {
                Err(OxiaError::new(OxiaErrorKind::ShardNotFound, format!("shard {shard} is not assigned")))
            }
        }
    }

    fn rpc_for(&self, address: &str) -> Result<Rpc, OxiaError> {
        let mut connections = lock(&self.inner.connections);
        if let Some(rpc) = connections.get(address) {
            return Ok(rpc.clone());
        }
        let rpc = Rpc::new(channel(address, &self.inner.config)?, &self.inner.config)?;
        connections.insert(address.to_owned(), rpc.clone());
        Ok(rpc)
    }

    /// Acts on a re-route advice: remembers the hinted leader, or waits (up to `deadline`)
    /// for the next assignment.
    async fn reroute(&self, shard: ShardId, leader_hint: Option<String>, deadline: Instant) {
        let mut map_rx = self.inner.shard_map.clone();
        let generation = map_rx.borrow_and_update().as_ref().map_or(0, |state| state.generation);
        match leader_hint {
            Some(leader) => {
                tracing::debug!(shard, %leader, "following the leader hint");
                lock(&self.inner.leader_hints).insert(shard, (generation, leader));
            }
            None => {
                lock(&self.inner.leader_hints).remove(&shard);
                let _ = tokio::time::timeout_at(deadline, map_rx.changed()).await;
            }
        }
    }

    /// Runs `call` against the leader of `shard`, re-routing and retrying as the error
    /// advises, within the request timeout. For reads and session calls, never for writes.
    async fn with_retries<T, F, Fut>(&self, shard: ShardId, method: Method, call: F) -> Result<T, OxiaError>
    where
        F: Fn(Rpc) -> Fut,
        Fut: Future<Output = Result<T, OxiaError>>,
    {
        let deadline = Instant::now() + self.inner.config.request_timeout;
        let backoff = Backoff::process(BACKOFF.with_max_attempts(MAX_ATTEMPTS));
        let mut pauses = 0;
        let mut attempt = 1;
        loop {
            let result = match self.leader_of(shard).and_then(|leader| self.rpc_for(&leader)) {
                Ok(rpc) => call(rpc).await,
                Err(error) => Err(error),
            };
            let error = match result {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            let advice = error.retry_advice();
            if advice == RetryAdvice::DoNotRetry
                || !backoff.allows_another(attempt)
                || Instant::now() >= deadline
            {
                return Err(error);
            }
            tracing::debug!(shard, method = method.name(), attempt, %error, "retrying");
            match advice {
                RetryAdvice::Reroute { leader_hint } => self.reroute(shard, leader_hint, deadline).await,
                RetryAdvice::Retry | RetryAdvice::DoNotRetry => {
                    tokio::time::sleep_until((Instant::now() + backoff.delay(pauses)).min(deadline)).await;
                    pauses += 1;
                }
            }
            attempt += 1;
        }
    }

    /// The writer of `shard`: one per shard for the client's life, so that every write to
    /// the shard is ordered behind the earlier ones. It follows the shard's leader itself.
    fn writer(&self, shard: ShardId) -> Arc<ShardWriter> {
        let mut writers = lock(&self.inner.writers);
        let writer = writers.entry(shard).or_insert_with(|| {
            let opener = Arc::new(ShardOpener { client: Arc::downgrade(&self.inner), shard });
            let config = &self.inner.config;
            Arc::new(ShardWriter::spawn(
                shard,
                opener,
                config.max_pending_writes_per_shard,
                config.request_timeout,
            ))
        });
        Arc::clone(writer)
    }

    /// Queues `request` on the ordered write stream of `shard` now, behind every write issued
    /// before, and returns the future of its response. Writes commit in the order of these
    /// calls. Never retried once sent: a failure after sending is [`WriteFailure::InFlight`](crate::write_stream::WriteFailure::InFlight)
    /// (outcome unknown); a write withdrawn unsent (timeout, dropped future) is
    /// [`WriteFailure::NotSent`](crate::write_stream::WriteFailure::NotSent).
    pub fn write(
        &self,
        shard: ShardId,
        request: WriteRequest,
    ) -> impl Future<Output = WriteReply> + Send + use<> {
        let reply = self.writer(shard).write(request, self.inner.config.request_timeout);
        let stats = Arc::clone(&self.inner.stats);
        async move {
            let reply = reply.await;
            stats.record(RequestKind::Write, reply.is_err());
            reply
        }
    }

    /// A write whose failure is reported as a store error.
    pub fn write_or_error(
        &self,
        shard: ShardId,
        request: WriteRequest,
    ) -> impl Future<Output = MetaResult<WriteResponse>> + Send + use<> {
        let reply = self.write(shard, request);
        async move { reply.await.map_err(|failure| failure.to_meta_error()) }
    }

    /// `Read`: the responses to the request's gets, in request order, from every stream
    /// message.
    pub async fn read(&self, shard: ShardId, request: ReadRequest) -> MetaResult<Vec<GetResponse>> {
        let result = self.collect_stream(shard, Method::Read, request, |m: ReadResponse| m.gets, None).await;
        self.counted(RequestKind::Read, result)
    }

    /// `List`: the keys of every stream message, in the shard's order.
    pub async fn list(&self, shard: ShardId, request: ListRequest) -> MetaResult<Vec<String>> {
        let result = self.collect_stream(shard, Method::List, request, |m: ListResponse| m.keys, None).await;
        self.counted(RequestKind::List, result)
    }

    /// `RangeScan`: the records of every stream message, stopping (cancelling the call) once
    /// `limit` records are in.
    pub async fn range_scan(
        &self,
        shard: ShardId,
        request: RangeScanRequest,
        limit: Option<usize>,
    ) -> MetaResult<Vec<GetResponse>> {
        let result = self
            .collect_stream(shard, Method::RangeScan, request, |m: RangeScanResponse| m.records, limit)
            .await;
        self.counted(RequestKind::Scan, result)
    }

    /// Calls a server-streaming `method` (retried while nothing was received) and collects the
    /// items of every response message, dropping the stream — which cancels the call — once
    /// `limit` items are in.
    async fn collect_stream<Req, Resp, Item>(
        &self,
        shard: ShardId,
        method: Method,
        request: Req,
        items: fn(Resp) -> Vec<Item>,
        limit: Option<usize>,
    ) -> MetaResult<Vec<Item>>
    where
        Req: prost::Message + Clone + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let timeout = self.inner.config.request_timeout;
        self.with_retries(shard, method, |rpc| {
            let request = request.clone();
            async move {
                let mut stream: Streaming<Resp> =
                    rpc.server_streaming(method, request, Some(timeout)).await?;
                let mut collected = Vec::new();
                while let Some(message) = stream.message().await.map_err(|s| OxiaError::from_status(&s))? {
                    collected.extend(items(message));
                    if limit.is_some_and(|limit| collected.len() >= limit) {
                        break;
                    }
                }
                Ok(collected)
            }
        })
        .await
        .map_err(|error| error.to_meta_error(RequestPhase::Rejected))
    }

    /// Lists `[start, end)` on every shard and merges the keys in Oxia's key order, for keys
    /// that are not placed by one partition (e.g. every log's registration).
    pub async fn list_all_shards(&self, start: &str, end: &str) -> MetaResult<Vec<String>> {
        let map =
            self.shard_map().ok_or_else(|| MetaError::Unavailable("no shard assignments yet".to_owned()))?;
        let lists = map.shards().iter().map(|shard| {
            let request = crate::requests::list_request(shard.id, start, end);
            self.list(shard.id, request)
        });
        let lists = futures::future::try_join_all(lists).await?;
        Ok(merge_sorted(lists))
    }

    /// `CreateSession` on `shard`: the new session's id.
    pub async fn create_session(&self, shard: ShardId, timeout: Duration) -> Result<i64, OxiaError> {
        let timeout_ms = u32::try_from(timeout.as_millis()).map_err(|_| {
            OxiaError::new(
                OxiaErrorKind::InvalidSessionTimeout,
                format!("session timeout {timeout:?} is too long"),
            )
        })?;
        let request = CreateSessionRequest {
            shard,
            session_timeout_ms: timeout_ms,
            client_identity: self.inner.config.client_identity.clone(),
        };
        let call_timeout = self.inner.config.request_timeout;
        let response: Result<CreateSessionResponse, OxiaError> = self
            .with_retries(shard, Method::CreateSession, |rpc| {
                let request = request.clone();
                async move { rpc.unary(Method::CreateSession, request, call_timeout).await }
            })
            .await;
        Ok(self.counted(RequestKind::Session, response)?.session_id)
    }

    /// One `KeepAlive` for a session, on the current leader, without retries (the next
    /// heartbeat is the retry). `timeout` bounds the call.
    pub async fn keep_alive(
        &self,
        shard: ShardId,
        session_id: i64,
        timeout: Duration,
    ) -> Result<(), OxiaError> {
        let rpc = match self.leader_of(shard).and_then(|leader| self.rpc_for(&leader)) {
            Ok(rpc) => rpc,
            Err(error) => return self.counted(RequestKind::Session, Err(error)),
        };
        let result: Result<KeepAliveResponse, OxiaError> =
            rpc.unary(Method::KeepAlive, SessionHeartbeat { shard, session_id }, timeout).await;
        let result = self.counted(RequestKind::Session, result);
        if let Err(error) = &result
            && let RetryAdvice::Reroute { leader_hint } = error.retry_advice()
        {
            self.reroute(shard, leader_hint, Instant::now()).await;
        }
        result.map(|_| ())
    }

    /// `CloseSession`: the server deletes the session's ephemeral records.
    pub async fn close_session(&self, shard: ShardId, session_id: i64) -> Result<(), OxiaError> {
        let call_timeout = self.inner.config.request_timeout;
        let response: Result<CloseSessionResponse, OxiaError> = self
            .with_retries(shard, Method::CloseSession, |rpc| async move {
                rpc.unary(Method::CloseSession, CloseSessionRequest { shard, session_id }, call_timeout).await
            })
            .await;
        self.counted(RequestKind::Session, response).map(|_| ())
    }
}

/// Opens a shard's write streams on its current leader, for that shard's [`ShardWriter`].
/// Holds the client weakly: the writers live inside it.
struct ShardOpener {
    client: std::sync::Weak<Inner>,
    shard: ShardId,
}

impl ShardOpener {
    fn client(&self) -> Result<OxiaClient, OxiaError> {
        self.client
            .upgrade()
            .map(|inner| OxiaClient { inner })
            .ok_or_else(|| OxiaError::new(OxiaErrorKind::ConnectFailed, "the Oxia client was dropped"))
    }
}

impl Opener for ShardOpener {
    fn open(&self) -> BoxFuture<'_, Result<StreamChannels, OxiaError>> {
        Box::pin(async move {
            let client = self.client()?;
            let leader = client.leader_of(self.shard)?;
            let rpc = client.rpc_for(&leader)?;
            let config = client.config();
            let (namespace, max_pending) = (config.namespace.clone(), config.max_pending_writes_per_shard);
            drop(client);
            open_grpc_stream(rpc, leader, self.shard, namespace, max_pending).await
        })
    }

    fn reroute(&self, leader_hint: Option<String>) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Ok(client) = self.client() {
                client.reroute(self.shard, leader_hint, Instant::now() + MAX_BACKOFF).await;
            }
        })
    }

    fn assignment_changed(&self) -> BoxFuture<'_, ()> {
        let map = self.client().map(|client| client.inner.shard_map.clone());
        Box::pin(async move {
            match map {
                Ok(mut map) => {
                    map.borrow_and_update();
                    if map.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                Err(_) => std::future::pending::<()>().await,
            }
        })
    }
}

/// Keeps the shard map current: follows a `GetShardAssignments` stream, reconnecting through
/// the bootstrap addresses in turn. Ends when the client is gone.
async fn follow_assignments(config: OxiaConfig, map_tx: watch::Sender<Option<MapState>>) {
    let mut generation = 0;
    let backoff = Backoff::process(BACKOFF);
    // Reconnects since the last assignment received: the retry number of the next pause.
    let mut failures = 0;
    for address in config.addresses.iter().cycle() {
        if map_tx.is_closed() {
            return;
        }
        match stream_assignments(address, &config, &map_tx, &mut generation, &mut failures).await {
            Ok(()) => tracing::info!(%address, "shard assignment stream ended; reconnecting"),
            Err(error) => tracing::warn!(%address, %error, "shard assignment stream failed; reconnecting"),
        }
        tokio::time::sleep(backoff.delay(failures)).await;
        failures = failures.saturating_add(1);
    }
}

async fn stream_assignments(
    address: &str,
    config: &OxiaConfig,
    map_tx: &watch::Sender<Option<MapState>>,
    generation: &mut u64,
    failures: &mut u32,
) -> Result<(), OxiaError> {
    let rpc = Rpc::new(channel(address, config)?, config)?;
    let request = ShardAssignmentsRequest { namespace: config.namespace.clone() };
    let mut stream = rpc.server_streaming(Method::GetShardAssignments, request, None).await?;
    while let Some(message) = stream.message().await.map_err(|status| OxiaError::from_status(&status))? {
        match ShardMap::from_assignments(&message, &config.namespace) {
            Ok(map) => {
                *generation += 1;
                *failures = 0;
                tracing::debug!(shards = map.shards().len(), generation, "new shard assignment");
                map_tx.send_replace(Some(MapState { map: Arc::new(map), generation: *generation }));
            }
            // Keep routing with the last good map rather than with none.
            Err(error) => tracing::warn!(%error, "ignoring an unusable shard assignment"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use lakestream_format::ErrorClass;

    use super::*;
    use crate::requests::{put_request, write_put};
    use crate::write_stream::WriteFailure;

    fn client_with_map(map: ShardMap) -> (OxiaClient, watch::Sender<Option<MapState>>) {
        OxiaClient::with_fixed_map(map)
    }

    fn publish(map_tx: &watch::Sender<Option<MapState>>, map: ShardMap, generation: u64) {
        map_tx.send_replace(Some(MapState { map: Arc::new(map), generation }));
    }

    /// Requests are counted by kind, failures too: with no server behind the address, a
    /// read, a list, a scan, a write and a session call each fail once.
    #[tokio::test]
    async fn requests_are_counted_by_kind_with_their_failures() {
        let (client, _map_tx) = client_with_map(ShardMap::standalone(1, "127.0.0.1:1").expect("valid"));
        assert_eq!(client.stats(), OxiaStats::default());
        client
            .read(0, crate::requests::read_request(0, "k", lakestream_meta::Comparison::Equal).unwrap())
            .await
            .unwrap_err();
        client.list(0, crate::requests::list_request(0, "a", "b")).await.unwrap_err();
        client.range_scan(0, crate::requests::range_scan_request(0, "a", "b"), None).await.unwrap_err();
        let put = put_request("p", "k", bytes::Bytes::new(), lakestream_meta::PutCondition::None).unwrap();
        client.write(0, write_put(0, put)).await.unwrap_err();
        client.keep_alive(0, 1, Duration::from_millis(200)).await.unwrap_err();
        let stats = client.stats();
        for kind in RequestKind::ALL {
            assert_eq!(stats.of(kind), crate::stats::RequestCounts { requests: 1, errors: 1 }, "{kind:?}");
        }
        assert_eq!(stats.by_kind().map(|(k, _)| k.name()), ["write", "read", "list", "scan", "session"]);
    }

    #[tokio::test]
    async fn partitions_route_by_the_current_map() {
        let (client, _map_tx) = client_with_map(ShardMap::standalone(4, "127.0.0.1:1").expect("valid"));
        // oxia.md §5.1: "7" → shard 2 and "42" → shard 3 with four standalone shards.
        assert_eq!(client.shard_for("7"), Ok(2));
        assert_eq!(client.shard_for("42"), Ok(3));
    }

    /// One writer per shard for the client's life: every write to a shard is ordered behind
    /// the earlier ones, across leader moves too (the writer follows the leader).
    #[tokio::test]
    async fn one_writer_per_shard_for_the_clients_life() {
        let (client, map_tx) = client_with_map(ShardMap::standalone(2, "127.0.0.1:1").expect("valid"));
        let first = client.writer(0);
        assert!(Arc::ptr_eq(&first, &client.writer(0)), "one ordered stream per shard");
        assert!(!Arc::ptr_eq(&first, &client.writer(1)));
        publish(&map_tx, ShardMap::standalone(2, "127.0.0.1:2").expect("valid"), 2);
        assert!(Arc::ptr_eq(&first, &client.writer(0)), "kept across a leader move");
    }

    #[tokio::test]
    async fn a_leader_hint_holds_until_the_next_assignment() {
        let (client, map_tx) = client_with_map(ShardMap::standalone(2, "127.0.0.1:1").expect("valid"));
        client.reroute(1, Some("10.0.0.9:6648".to_owned()), Instant::now()).await;
        assert_eq!(client.leader_of(1).expect("routed"), "10.0.0.9:6648");
        assert_eq!(client.leader_of(0).expect("routed"), "127.0.0.1:1");

        publish(&map_tx, ShardMap::standalone(2, "127.0.0.1:3").expect("valid"), 2);
        assert_eq!(client.leader_of(1).expect("routed"), "127.0.0.1:3");
    }

    /// A shard announced without a leader (an election) is refused as "not leader" with no
    /// hint, so callers wait for the next assignment; the leader moves of the other shards in
    /// the same assignment are followed at once.
    #[tokio::test]
    async fn a_shard_without_a_leader_waits_and_the_others_follow_their_new_leaders() {
        let (client, map_tx) = client_with_map(ShardMap::standalone(2, "127.0.0.1:1").expect("valid"));
        let during_election = ShardMap::new(vec![
            crate::routing::Shard {
                leader: String::new(),
                ..ShardMap::standalone(2, "x:1").expect("valid").shards()[0].clone()
            },
            crate::routing::Shard {
                leader: "127.0.0.1:2".into(),
                ..ShardMap::standalone(2, "x:1").expect("valid").shards()[1].clone()
            },
        ])
        .expect("a leaderless shard is a usable map");
        publish(&map_tx, during_election, 2);
        assert_eq!(client.leader_of(1).expect("routed"), "127.0.0.1:2", "the other shard's move is followed");
        let error = client.leader_of(0).expect_err("no leader");
        assert_eq!(error.retry_advice(), RetryAdvice::Reroute { leader_hint: None }, "{error}");
        assert_eq!(error.to_meta_error(RequestPhase::NotSent).class(), ErrorClass::Retryable);

        publish(&map_tx, ShardMap::standalone(2, "127.0.0.1:3").expect("valid"), 3);
        assert_eq!(client.leader_of(0).expect("elected"), "127.0.0.1:3");
    }

    #[tokio::test]
    async fn not_leader_without_a_hint_waits_for_the_next_assignment() {
        let (client, map_tx) = client_with_map(ShardMap::standalone(1, "127.0.0.1:1").expect("valid"));
        let waiting = {
            let client = client.clone();
            tokio::spawn(async move {
                client.reroute(0, None, Instant::now() + Duration::from_secs(30)).await;
                client.leader_of(0)
            })
        };
        tokio::task::yield_now().await;
        publish(&map_tx, ShardMap::standalone(1, "127.0.0.1:4").expect("valid"), 2);
        let leader =
            tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("woke").expect("joined");
        assert_eq!(leader.expect("routed"), "127.0.0.1:4");
    }

    /// A write that cannot connect was never sent: a plain, retryable failure, not an
    /// unknown outcome.
    #[tokio::test]
    async fn a_write_to_an_unreachable_leader_is_not_sent() {
        let (client, _map_tx) = client_with_map(ShardMap::standalone(1, "127.0.0.1:1").expect("valid"));
        let put =
            put_request("7", "/k", bytes::Bytes::new(), lakestream_meta::PutCondition::None).expect("valid");
        let failure = client.write(0, write_put(0, put)).await.expect_err("nothing listens on port 1");
        assert!(matches!(failure, WriteFailure::NotSent(_)), "{failure:?}");
        assert_eq!(failure.to_meta_error().class(), ErrorClass::Retryable);
    }

    #[tokio::test]
    async fn connect_fails_as_unavailable_when_no_server_answers() {
        let config =
            OxiaConfig { request_timeout: Duration::from_millis(300), ..OxiaConfig::new(["127.0.0.1:1"]) };
        let error = OxiaClient::connect(config).await.expect_err("nothing listens on port 1");
        assert_eq!(error.class(), ErrorClass::Retryable, "{error}");
        assert!(error.to_string().contains("no shard assignments"), "{error}");
    }

    #[tokio::test]
    async fn connect_rejects_a_bad_setting_by_name() {
        let config = OxiaConfig { namespace: String::new(), ..OxiaConfig::new(["127.0.0.1:1"]) };
        let error = OxiaClient::connect(config).await.expect_err("invalid");
        assert_eq!(error.class(), ErrorClass::InvalidInput);
        assert!(error.to_string().contains("`namespace`"), "{error}");
    }

    #[tokio::test]
    async fn a_hash_without_a_shard_is_unavailable() {
        let map = ShardMap::new(vec![crate::routing::Shard {
            id: 0,
            leader: "127.0.0.1:1".into(),
            range: crate::routing::HashRange { min: 0, max: 10 },
        }])
        .expect("valid");
        let (client, _map_tx) = client_with_map(map);
        assert_eq!(client.shard_for("7").map_err(|e| e.class()), Err(ErrorClass::Retryable));
    }
}
