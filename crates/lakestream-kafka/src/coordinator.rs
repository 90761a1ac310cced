//! Which front-end process coordinates a consumer group, chosen through the metadata store.
//!
//! Every front-end process can serve any group, but one at a time does: the one whose
//! ephemeral record names it. A process claims a group the first time a client asks about it
//! (FindCoordinator, or any group request) and nobody holds it: it creates the record with
//! `CreateIfAbsent` through its own session. The record lives as long as the session: when
//! the process stops (it closes the session) or dies (the session times out after
//! `kafka.coordinator_session_timeout`), the record goes, and the next process asked claims
//! the group. FindCoordinator answers with the address in the record; group requests sent to
//! a process that does not coordinate the group are answered `NOT_COORDINATOR`.
//!
//! ```text
//! key (metadata partition `lakestream-kafka`)   value (JSON)                        kind
//! /lakestream-kafka/coordinators/{group}        {"v":1,"node_id":2,"host":"10.0.0.7", ephemeral
//!                                                "port":9092,"session":"…"}
//! /lakestream-kafka/groups/{group}              see `crate::group::GroupRecord`     persistent
//! /lakestream-kafka/brokers/{node_id:010}       as a coordinator record             ephemeral
//! ```
//!
//! Each process also registers itself under `brokers/` through the same session, and
//! Metadata lists every registered process as a broker: clients then know the address of a
//! group's coordinator wherever they bootstrapped (librdkafka drops a coordinator that
//! Metadata does not list). A node id registered by a live process at another address is
//! not taken over: the second process logs the clash and is not listed by the others.
//!
//! Membership lives in the coordinating process's memory (as in Kafka, whose coordinator
//! keeps it in memory and in its log); the group's generation lives in the group's record,
//! so a process taking a group over continues from the last generation, and the generation
//! stored with each committed offset only grows. A group moved to another process starts
//! with no members: the members' next requests are `UNKNOWN_MEMBER_ID` and they join again.
//! Should a process's session end while it still serves a group (the store expired it), it
//! gives up every group it held under it; and any write of a group's record that loses a
//! compare-and-set (another process took the group meanwhile) makes it give that group up.
//! The committed offsets' own compare-and-set on the generation keeps a stale coordinator's
//! member from overwriting a newer generation's commits.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use lakestream_meta::{MetaError, MetaStore, Session};
use lakestream_service::api::{ApiError, ApiResult, ErrorKind};
use serde::{Deserialize, Serialize};

use crate::group::{Group, GroupRecord, record_key};
use crate::idempotence::KAFKA_PARTITION;

/// A coordinator record's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Address {
    pub v: u32,
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    /// The claiming process's session.
    pub session: String,
}

/// Where a group is coordinated.
#[derive(Debug, Clone)]
pub(crate) enum Location {
    /// Here.
    Here(Arc<Group>),
    /// By another process.
    There(Address),
}

/// The prefix of the front-end processes' registrations.
const BROKER_PREFIX: &str = "/lakestream-kafka/brokers/";

/// How long a listing of the registered processes is reused by Metadata.
const BROKERS_TTL: Duration = Duration::from_secs(1);

/// How often a process whose registration failed tries again.
const REGISTER_RETRY: Duration = Duration::from_secs(5);

fn broker_key(node_id: i32) -> String {
    format!("{BROKER_PREFIX}{node_id:010}")
}

fn coordinator_key(group: &str) -> String {
    format!("{COORDINATOR_PREFIX}{group}")
}

/// The prefix of the coordinator records' keys.
const COORDINATOR_PREFIX: &str = "/lakestream-kafka/coordinators/";

fn meta_error(what: &str, e: MetaError) -> ApiError {
    ApiError::new(ErrorKind::of_class(e.class()), format!("{what}: {e}"))
}

/// This process's side of group coordination.
#[derive(Debug)]
pub(crate) struct Coordinator {
    meta: Arc<dyn MetaStore>,
    node_id: i32,
    host: String,
    port: i32,
    session_timeout: Duration,
    initial_delay: Duration,
    session: tokio::sync::Mutex<Option<Arc<dyn Session>>>,
    groups: std::sync::Mutex<HashMap<String, Arc<Group>>>,
    /// The registered processes, and when they were listed.
    brokers: std::sync::Mutex<Option<(tokio::time::Instant, Vec<Address>)>>,
    /// Whether this process is registered under its current session, and when it last tried.
    registered: std::sync::Mutex<(bool, Option<tokio::time::Instant>)>,
}

impl Coordinator {
    pub fn new(
        meta: Arc<dyn MetaStore>,
        node_id: i32,
        (host, port): (String, i32),
        session_timeout: Duration,
        initial_delay: Duration,
    ) -> Arc<Self> {
        Arc::new(Coordinator {
            meta,
            node_id,
            host,
            port,
            session_timeout,
            initial_delay,
            session: tokio::sync::Mutex::new(None),
            groups: std::sync::Mutex::new(HashMap::new()),
            brokers: std::sync::Mutex::new(None),
            registered: std::sync::Mutex::new((false, None)),
        })
    }

    /// This process's address record under `session`.
    fn me(&self, session: &Arc<dyn Session>) -> Address {
        Address {
            v: 1,
            node_id: self.node_id,
            host: self.host.clone(),
            port: self.port,
            session: session.id(),
        }
    }

    /// Opens the session and registers this process (at start, so that Metadata from every
    /// process lists it from then on).
    pub async fn start(self: &Arc<Self>) {
        if let Err(e) = self.session().await {
            tracing::warn!(error = %e, "the Kafka front end could not register itself; it retries on the next group request");
        }
    }

    /// Registers this process under `brokers/` through `session` (see [`Coordinator::try_register`]).
    async fn register(&self, session: &Arc<dyn Session>) -> ApiResult<()> {
        let outcome = self.try_register(session).await;
        *self.registered.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            (outcome.is_ok(), Some(tokio::time::Instant::now()));
        outcome
    }

    /// Registers again if the last attempt failed (the node id was taken by a record that may
    /// since have expired), at most every [`REGISTER_RETRY`].
    async fn retry_registration(self: &Arc<Self>) {
        let due = {
            let r = self.registered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            !r.0 && r.1.is_none_or(|at| at.elapsed() >= REGISTER_RETRY)
        };
        if !due {
            return;
        }
        let session = self.session.lock().await.clone().filter(|s| !s.is_ended());
        match session {
            Some(session) => {
                if self.register(&session).await.is_ok() {
                    tracing::info!(node_id = self.node_id, "the Kafka front end is registered");
                }
            }
            // A new session registers as it opens.
            None => drop(self.session().await),
        }
    }

    /// Registers this process under `brokers/` through `session`, replacing a record of the
    /// same node id and address left by a previous run of it.
    async fn try_register(&self, session: &Arc<dyn Session>) -> ApiResult<()> {
        let key = broker_key(self.node_id);
        let me = self.me(session);
        let value = serde_json::to_vec(&me).map_err(|e| ApiError::new(ErrorKind::Internal, e.to_string()))?;
        for _ in 0..2 {
            match session.create_ephemeral(KAFKA_PARTITION, &key, Bytes::from(value.clone())).await {
                Ok(_) => return Ok(()),
                Err(MetaError::KeyExists { .. }) => {}
                Err(e) => return Err(meta_error("registering the front end", e)),
            }
            let found = self
                .meta
                .get(KAFKA_PARTITION, &key)
                .await
                .map_err(|e| meta_error("registering the front end", e))?;
            if let Some(r) = found {
                let other: Option<Address> = serde_json::from_slice(&r.value).ok();
                if other.as_ref().is_some_and(|o| (o.host.as_str(), o.port) != (me.host.as_str(), me.port)) {
                    return Err(ApiError::new(
                        ErrorKind::AlreadyExists,
                        format!(
                            "kafka.node_id {} is registered by a live front end at {:?}: give each front-end process its own node_id",
                            self.node_id,
                            other.map(|o| format!("{}:{}", o.host, o.port))
                        ),
                    ));
                }
                // Left by an earlier run of this process whose session has not expired yet.
                self.meta
                    .delete(KAFKA_PARTITION, &key)
                    .await
                    .map_err(|e| meta_error("registering the front end", e))?;
            }
        }
        Err(ApiError::new(
            ErrorKind::Contended,
            "registering the front end raced; retried on the next session",
        ))
    }

    /// The registered front-end processes (this one first), listed at most [`BROKERS_TTL`]
    /// ago.
    pub async fn brokers(self: &Arc<Self>) -> Vec<(i32, String, i32)> {
        self.retry_registration().await;
        let me = (self.node_id, self.host.clone(), self.port);
        let cached = self.brokers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let listed = match cached {
            Some((at, list)) if at.elapsed() < BROKERS_TTL => list,
            _ => {
                let end = format!("{BROKER_PREFIX}\u{10FFFF}");
                match self.meta.scan(KAFKA_PARTITION, BROKER_PREFIX, &end, Some(1000)).await {
                    Ok(records) => {
                        let list: Vec<Address> = records
                            .iter()
                            .filter(|r| r.key.starts_with(BROKER_PREFIX))
                            .filter_map(|r| serde_json::from_slice(&r.value).ok())
                            .collect();
                        *self.brokers.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                            Some((tokio::time::Instant::now(), list.clone()));
                        list
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "listing the front-end processes failed");
                        Vec::new()
                    }
                }
            }
        };
        let mut out = vec![me];
        out.extend(
            listed.into_iter().filter(|a| a.node_id != self.node_id).map(|a| (a.node_id, a.host, a.port)),
        );
        out
    }

    fn groups(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Group>>> {
        self.groups.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The group, if this process coordinates it now (and has it loaded); forgets it if it
    /// was given up or unloaded.
    pub fn local(&self, group: &str) -> Option<Arc<Group>> {
        let mut groups = self.groups();
        match groups.get(group) {
            Some(g) if g.is_dead() => {
                groups.remove(group);
                None
            }
            found => found.cloned(),
        }
    }

    /// Every group this process coordinates.
    pub fn local_groups(&self) -> Vec<Arc<Group>> {
        let mut groups = self.groups();
        groups.retain(|_, g| !g.is_dead());
        groups.values().cloned().collect()
    }

    /// This process's live session, opening one (and watching it end) if there is none.
    async fn session(self: &Arc<Self>) -> ApiResult<Arc<dyn Session>> {
        let mut slot = self.session.lock().await;
        if let Some(s) = slot.as_ref()
            && !s.is_ended()
        {
            return Ok(s.clone());
        }
        let session = self
            .meta
            .open_session(self.session_timeout)
            .await
            .map_err(|e| meta_error("opening the group coordinator's session", e))?;
        if let Err(e) = self.register(&session).await {
            tracing::error!(error = %e, "the Kafka front end is not registered: other front-end processes do not list it");
        }
        let (weak, id, mut ended): (Weak<Self>, String, _) =
            (Arc::downgrade(self), session.id(), session.ended());
        tokio::spawn(async move {
            let _ = ended.wait_for(|e| *e).await;
            if let Some(c) = weak.upgrade() {
                c.give_up_session(&id, true).await;
            }
        });
        *slot = Some(session.clone());
        Ok(session)
    }

    /// Gives up every group held under session `id`: it ended (`ended`), or this process is
    /// stopping.
    async fn give_up_session(&self, id: &str, ended: bool) {
        let lost: Vec<Arc<Group>> = {
            let mut groups = self.groups();
            let ids: Vec<String> =
                groups.iter().filter(|(_, g)| g.session_id == id).map(|(k, _)| k.clone()).collect();
            ids.into_iter().filter_map(|k| groups.remove(&k)).collect()
        };
        if ended && !lost.is_empty() {
            tracing::warn!(
                session = id,
                groups = lost.len(),
                "the coordinator's session ended: giving up its groups"
            );
        } else if !lost.is_empty() {
            tracing::info!(
                groups = lost.len(),
                "stopping: handing the consumer groups coordinated here over"
            );
        }
        for g in lost {
            g.unload().await;
        }
    }

    /// Who coordinates `group`, claiming it for this process when nobody does.
    pub async fn locate(self: &Arc<Self>, group: &str) -> ApiResult<Location> {
        if let Some(g) = self.local(group) {
            return Ok(Location::Here(g));
        }
        let key = coordinator_key(group);
        for _ in 0..3 {
            let found = self
                .meta
                .get(KAFKA_PARTITION, &key)
                .await
                .map_err(|e| meta_error("finding the group's coordinator", e))?;
            let session = self.session().await?;
            if let Some(record) = found {
                let address: Address = serde_json::from_slice(&record.value)
                    .map_err(|e| ApiError::new(ErrorKind::CorruptData, format!("{key}: {e}")))?;
                if address.session != session.id() {
                    return Ok(Location::There(address));
                }
                // Claimed by this process's session (by a request running at the same time).
                return self.load(group, &session).await.map(Location::Here);
            }
            let me = self.me(&session);
            let value =
                serde_json::to_vec(&me).map_err(|e| ApiError::new(ErrorKind::Internal, e.to_string()))?;
            match session.create_ephemeral(KAFKA_PARTITION, &key, Bytes::from(value)).await {
                Ok(_) => {
                    tracing::info!(group, "coordinating the consumer group");
                    return self.load(group, &session).await.map(Location::Here);
                }
                // Another process claimed it first: read who.
                Err(MetaError::KeyExists { .. }) => continue,
                Err(e) => return Err(meta_error("claiming the group", e)),
            }
        }
        Err(ApiError::new(
            ErrorKind::Contended,
            format!("the coordinator of group {group} kept changing; retry"),
        ))
    }

    /// The group's state in this process, continuing from its record.
    async fn load(&self, group: &str, session: &Arc<dyn Session>) -> ApiResult<Arc<Group>> {
        if let Some(g) = self.local(group) {
            return Ok(g);
        }
        let record = self
            .meta
            .get(KAFKA_PARTITION, &record_key(group))
            .await
            .map_err(|e| meta_error("reading the group's record", e))?;
        let record = match record {
            None => None,
            Some(r) => {
                let parsed: GroupRecord = serde_json::from_slice(&r.value).map_err(|e| {
                    ApiError::new(ErrorKind::CorruptData, format!("{}: {e}", record_key(group)))
                })?;
                Some((parsed, r.version))
            }
        };
        let mut groups = self.groups();
        if let Some(g) = groups.get(group).filter(|g| !g.is_dead()) {
            return Ok(g.clone());
        }
        let g = Group::start(group.to_owned(), session.id(), self.meta.clone(), self.initial_delay, record);
        groups.insert(group.to_owned(), g.clone());
        Ok(g)
    }

    /// Every group with a record, and its record (for ListGroups).
    pub async fn recorded_groups(&self) -> ApiResult<Vec<(String, GroupRecord)>> {
        let prefix = crate::group::GROUP_RECORD_PREFIX;
        let end = format!("{prefix}\u{10FFFF}");
        let mut start = prefix.to_owned();
        let mut out = Vec::new();
        loop {
            let page = self
                .meta
                .scan(KAFKA_PARTITION, &start, &end, Some(1000))
                .await
                .map_err(|e| meta_error("listing groups", e))?;
            for r in &page {
                let Some(name) = r.key.strip_prefix(prefix).filter(|n| !n.contains('/')) else { continue };
                if let Ok(record) = serde_json::from_slice::<GroupRecord>(&r.value) {
                    out.push((name.to_owned(), record));
                }
            }
            match page.last() {
                Some(last) if page.len() == 1000 => start = format!("{}\u{0}", last.key),
                _ => return Ok(out),
            }
        }
    }

    /// The node id of the process that claims each claimed group (for ListGroups).
    pub async fn claims(&self) -> ApiResult<HashMap<String, i32>> {
        let prefix = COORDINATOR_PREFIX;
        let end = format!("{prefix}\u{10FFFF}");
        let mut start = prefix.to_owned();
        let mut out = HashMap::new();
        loop {
            let page = self
                .meta
                .scan(KAFKA_PARTITION, &start, &end, Some(1000))
                .await
                .map_err(|e| meta_error("listing the groups' coordinators", e))?;
            for r in &page {
                let Some(name) = r.key.strip_prefix(prefix).filter(|n| !n.contains('/')) else { continue };
                if let Ok(a) = serde_json::from_slice::<Address>(&r.value) {
                    out.insert(name.to_owned(), a.node_id);
                }
            }
            match page.last() {
                Some(last) if page.len() == 1000 => start = format!("{}\u{0}", last.key),
                _ => return Ok(out),
            }
        }
    }

    /// Stops coordinating: closes the session (its records go at once, so another process
    /// takes the groups over on its next request) and gives every group up.
    pub async fn close(&self) {
        if let Some(session) = self.session.lock().await.take() {
            // Groups first, so that the session's end (watched) finds none left to warn about;
            // no request comes any more (the listener is closed).
            self.give_up_session(&session.id(), false).await;
            if let Err(e) = session.close().await {
                tracing::warn!(error = %e, "closing the group coordinator's session failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lakestream_meta::memory::InMemoryStore;

    fn coordinator(meta: &Arc<dyn MetaStore>, node_id: i32) -> Arc<Coordinator> {
        let address = ("127.0.0.1".to_owned(), 9000 + node_id);
        Coordinator::new(meta.clone(), node_id, address, Duration::from_secs(10), Duration::ZERO)
    }

    #[tokio::test]
    async fn one_process_coordinates_a_group_until_it_stops() {
        let meta: Arc<dyn MetaStore> = Arc::new(InMemoryStore::new());
        let (a, b) = (coordinator(&meta, 1), coordinator(&meta, 2));
        assert!(matches!(a.locate("g").await.unwrap(), Location::Here(_)));
        assert!(matches!(a.locate("g").await.unwrap(), Location::Here(_)));
        match b.locate("g").await.unwrap() {
            Location::There(address) => assert_eq!((address.node_id, address.port), (1, 9001)),
            Location::Here(_) => panic!("B must not coordinate A's group"),
        }
        // Another group may go to B.
        assert!(matches!(b.locate("h").await.unwrap(), Location::Here(_)));
        let brokers = b.brokers().await;
        assert_eq!(brokers, [(2, "127.0.0.1".to_owned(), 9002), (1, "127.0.0.1".to_owned(), 9001)]);
        // A third process with A's node id at another address is not registered: B lists A.
        let clash = Coordinator::new(
            meta.clone(),
            1,
            ("10.0.0.9".to_owned(), 1),
            Duration::from_secs(10),
            Duration::ZERO,
        );
        clash.start().await;
        assert_eq!(b.brokers().await[1], (1, "127.0.0.1".to_owned(), 9001));
        clash.close().await;
        a.close().await;
        assert!(a.local("g").is_none());
        assert!(matches!(b.locate("g").await.unwrap(), Location::Here(_)));
        match a.locate("g").await.unwrap() {
            Location::There(address) => assert_eq!(address.node_id, 2),
            Location::Here(_) => panic!("B took the group over"),
        }
    }
}
