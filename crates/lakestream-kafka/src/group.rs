//! One consumer group's membership, in the process that coordinates it: Kafka's classic
//! group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), as Kafka's group coordinator
//! runs it.
//!
//! ## States
//!
//! ```text
//!            join                    every member joined (or the              the leader's
//!  Empty ───────────► Preparing ───── rebalance timeout passed) ───► Completing ─ SyncGroup ─► Stable
//!    ▲                Rebalance        generation + 1, persisted      Rebalance                  │
//!    │                   ▲                                                 │                       │
//!    └── no member left ─┘◄──── a join, a leave, a session expiry ────────┴───────────────────────┘
//! ```
//!
//! - **PreparingRebalance**: JoinGroup requests are held until every known member has joined
//!   again (and none handed a member id is still to come), or until the longest rebalance
//!   timeout of the members passes; members that did not join are then removed. The first
//!   rebalance of an empty group also waits `kafka.group_initial_rebalance_delay` for more
//!   members. Heartbeats answer `REBALANCE_IN_PROGRESS`, so members know to join.
//! - **Completing the join**: the generation goes up by one and is written to the group's
//!   record in the metadata store (compare-and-set: a lost race means another process now
//!   coordinates the group, which this one then gives up); the protocol most members prefer
//!   among those all support is chosen; the leader (the previous one if it is still a member,
//!   else the first to join) gets every member's metadata.
//! - **CompletingRebalance**: SyncGroup requests wait for the leader's, which carries the
//!   assignments; all are then answered with their own, and the group is **Stable**.
//! - A member whose session timeout passes without a heartbeat (or a join, sync or commit) is
//!   removed, and the group rebalances.
//!
//! JoinGroup v4+ with no member id is answered `MEMBER_ID_REQUIRED` with a new id, which the
//! member joins with (KIP-394). A static member (`group.instance.id`) replaces the member
//! with the same instance id, whose requests are then `FENCED_INSTANCE_ID`; unlike Kafka, its
//! rejoining still rebalances the group.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use lakestream_service::state::{PutCondition, StateError as MetaError, StateStore, Version};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// How often a group checks its timeouts.
const TICK: Duration = Duration::from_millis(100);

/// How long a group without members stays loaded after its last request. Unloaded, it is
/// loaded again from its record by its next request (this process still holds the claim).
const IDLE_UNLOAD: Duration = Duration::from_secs(300);

/// The key of a group's record.
pub(crate) fn record_key(group: &str) -> String {
    format!("{GROUP_RECORD_PREFIX}{group}")
}

/// The prefix of every group record's key.
pub(crate) const GROUP_RECORD_PREFIX: &str = "/lakestream-kafka/groups/";

/// A group's record in the metadata store, written at each new generation: what survives the
/// coordinating process, so that the next one continues the generations (committed offsets
/// carry them) and other processes can list the group.
///
/// ```text
/// key (metadata partition `lakestream-kafka`)   value (JSON)
/// /lakestream-kafka/groups/{group}              {"v":1,"generation":4,"protocol_type":"consumer",
///                                                "protocol":"range","state":"Stable","members":3}
/// ```
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct GroupRecord {
    pub v: u32,
    pub generation: i32,
    #[serde(default)]
    pub protocol_type: Option<String>,
    #[serde(default)]
    pub protocol: Option<String>,
    /// `Stable` with members at the generation's start, else `Empty`.
    pub state: String,
    #[serde(default)]
    pub members: usize,
}

/// Where a group stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    /// This process no longer coordinates the group.
    Dead,
}

impl Phase {
    /// The state's name in DescribeGroups and ListGroups.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Empty => "Empty",
            Phase::PreparingRebalance => "PreparingRebalance",
            Phase::CompletingRebalance => "CompletingRebalance",
            Phase::Stable => "Stable",
            Phase::Dead => "Dead",
        }
    }
}

/// What a JoinGroup asks.
#[derive(Debug, Clone)]
pub(crate) struct Join {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: a new member first gets its id with `MEMBER_ID_REQUIRED`.
    pub require_known_member_id: bool,
}

/// A JoinGroup's answer.
#[derive(Debug, Clone, Default)]
pub(crate) struct Joined {
    pub error: i16,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// For the leader: every member's id, instance id and metadata for the chosen protocol.
    pub members: Vec<(String, Option<String>, Bytes)>,
}

impl Joined {
    fn error(error: ResponseError, member_id: &str) -> Self {
        Joined { error: error.code(), generation: -1, member_id: member_id.to_owned(), ..Joined::default() }
    }
}

/// A SyncGroup's answer.
#[derive(Debug, Clone, Default)]
pub(crate) struct Synced {
    pub error: i16,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub assignment: Bytes,
}

impl Synced {
    fn error(error: ResponseError) -> Self {
        Synced { error: error.code(), ..Synced::default() }
    }
}

/// One member, as DescribeGroups shows it.
#[derive(Debug, Clone)]
pub(crate) struct MemberView {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// The group as DescribeGroups and ListGroups show it.
#[derive(Debug, Clone)]
pub(crate) struct GroupView {
    pub phase: Phase,
    pub generation: i32,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<MemberView>,
}

#[derive(Debug)]
struct Member {
    instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    protocol_type: String,
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    /// The last request that kept the member alive.
    last_seen: Instant,
    /// The order it first joined in (the leader, when one must be chosen, is the earliest).
    joined_order: u64,
    join_waiter: Option<oneshot::Sender<Joined>>,
    sync_waiter: Option<oneshot::Sender<Synced>>,
}

impl Member {
    fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols.iter().find(|(name, _)| name == protocol).map(|(_, m)| m.clone()).unwrap_or_default()
    }

    fn expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_seen) > self.session_timeout
    }
}

#[derive(Debug)]
struct State {
    phase: Phase,
    generation: i32,
    /// The group record's version (`None`: not written yet).
    record_version: Option<Version>,
    protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// Member ids handed out with `MEMBER_ID_REQUIRED`, until when they may join.
    pending: HashMap<String, Instant>,
    /// PreparingRebalance: when members that have not joined are removed.
    rebalance_deadline: Instant,
    /// PreparingRebalance: not completed before (the initial delay of an empty group).
    not_before: Instant,
    /// PreparingRebalance: when the rebalance started.
    rebalance_started: Instant,
    next_order: u64,
    /// The last request about the group.
    last_request: Instant,
}

/// A group coordinated by this process.
#[derive(Debug)]
pub(crate) struct Group {
    pub id: String,
    /// The metadata-store session under which this process claimed the group.
    pub session_id: String,
    store: StateStore,
    initial_delay: Duration,
    state: tokio::sync::Mutex<State>,
    dead: AtomicBool,
}

impl Group {
    /// The group, continuing from its record (`None`: a new group), with its timer running.
    pub fn start(
        id: String,
        session_id: String,
        store: StateStore,
        initial_delay: Duration,
        record: Option<(GroupRecord, Version)>,
    ) -> Arc<Group> {
        let now = Instant::now();
        let (generation, record_version, protocol_type) = match record {
            Some((r, v)) => (r.generation, Some(v), r.protocol_type),
            None => (0, None, None),
        };
        let group = Arc::new(Group {
            id,
            session_id,
            store,
            initial_delay,
            dead: AtomicBool::new(false),
            state: tokio::sync::Mutex::new(State {
                phase: Phase::Empty,
                generation,
                record_version,
                protocol_type,
                protocol: None,
                leader: None,
                members: BTreeMap::new(),
                pending: HashMap::new(),
                rebalance_deadline: now,
                not_before: now,
                rebalance_started: now,
                next_order: 0,
                last_request: now,
            }),
        });
        let weak = Arc::downgrade(&group);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(TICK).await;
                let Some(group) = weak.upgrade() else { return };
                if group.is_dead() {
                    return;
                }
                group.tick().await;
            }
        });
        group
    }

    /// Whether this process gave the group up.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    /// Gives the group up: every waiting request is answered `NOT_COORDINATOR`.
    pub async fn unload(&self) {
        let mut st = self.state.lock().await;
        Self::kill(&self.dead, &mut st);
    }

    fn kill(dead: &AtomicBool, st: &mut State) {
        dead.store(true, Ordering::SeqCst);
        st.phase = Phase::Dead;
        for (id, m) in &mut st.members {
            if let Some(w) = m.join_waiter.take() {
                let _ = w.send(Joined::error(ResponseError::NotCoordinator, id));
            }
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send(Synced::error(ResponseError::NotCoordinator));
            }
        }
    }

    /// A JoinGroup: answered at once (an error, a new member id, a member of a stable group
    /// with nothing new), or when the rebalance it waits for completes.
    pub async fn join(&self, join: Join, new_member_id: impl FnOnce() -> String) -> Joined {
        let receiver = {
            let mut st = self.state.lock().await;
            let now = Instant::now();
            st.last_request = now;
            if st.phase == Phase::Dead {
                return Joined::error(ResponseError::NotCoordinator, &join.member_id);
            }
            if !Self::supports(&st, &join) {
                return Joined::error(ResponseError::InconsistentGroupProtocol, &join.member_id);
            }
            let mut member_id = join.member_id.clone();
            if member_id.is_empty() {
                member_id = new_member_id();
                if join.require_known_member_id && join.instance_id.is_none() {
                    st.pending.insert(member_id.clone(), now + join.session_timeout);
                    return Joined {
                        error: ResponseError::MemberIdRequired.code(),
                        generation: -1,
                        member_id,
                        ..Joined::default()
                    };
                }
            } else if st.pending.remove(&member_id).is_none() && !st.members.contains_key(&member_id) {
                return Joined::error(ResponseError::UnknownMemberId, &member_id);
            }
            // A static member replaces the one with its instance id.
            if let Some(instance) = &join.instance_id {
                let replaced: Vec<String> = st
                    .members
                    .iter()
                    .filter(|(id, m)| **id != member_id && m.instance_id.as_ref() == Some(instance))
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in replaced {
                    if let Some(mut old) = st.members.remove(&id) {
                        if let Some(w) = old.join_waiter.take() {
                            let _ = w.send(Joined::error(ResponseError::FencedInstanceId, &id));
                        }
                        if let Some(w) = old.sync_waiter.take() {
                            let _ = w.send(Synced::error(ResponseError::FencedInstanceId));
                        }
                    }
                }
            }
            let (sender, receiver) = oneshot::channel();
            let order = st.next_order;
            let unchanged = match st.members.get_mut(&member_id) {
                Some(m) => {
                    let unchanged = m.protocols == join.protocols;
                    m.protocols = join.protocols.clone();
                    m.session_timeout = join.session_timeout;
                    m.rebalance_timeout = join.rebalance_timeout;
                    m.last_seen = now;
                    if let Some(old) = m.join_waiter.replace(sender) {
                        let _ = old.send(Joined::error(ResponseError::RebalanceInProgress, &member_id));
                    }
                    unchanged
                }
                None => {
                    st.next_order += 1;
                    st.members.insert(
                        member_id.clone(),
                        Member {
                            instance_id: join.instance_id.clone(),
                            client_id: join.client_id.clone(),
                            client_host: join.client_host.clone(),
                            session_timeout: join.session_timeout,
                            rebalance_timeout: join.rebalance_timeout,
                            protocol_type: join.protocol_type.clone(),
                            protocols: join.protocols.clone(),
                            assignment: Bytes::new(),
                            last_seen: now,
                            joined_order: order,
                            join_waiter: Some(sender),
                            sync_waiter: None,
                        },
                    );
                    false
                }
            };
            match st.phase {
                // A follower of a stable group with nothing new: the current generation.
                Phase::Stable | Phase::CompletingRebalance
                    if unchanged && st.leader.as_deref() != Some(member_id.as_str()) =>
                {
                    let joined = Self::joined_of(&st, &member_id, false);
                    if let Some(m) = st.members.get_mut(&member_id)
                        && let Some(w) = m.join_waiter.take()
                    {
                        let _ = w.send(joined);
                    }
                }
                Phase::PreparingRebalance => {
                    // A new member of a group waiting out its initial delay extends it.
                    if st.not_before > now {
                        let delay = self.initial_delay;
                        st.not_before = (now + delay).min(st.rebalance_deadline);
                    }
                }
                _ => self.prepare_rebalance(&mut st, now),
            }
            self.try_complete_join(&mut st, now).await;
            receiver
        };
        receiver.await.unwrap_or_else(|_| Joined::error(ResponseError::NotCoordinator, &join.member_id))
    }

    /// Whether the group takes a member of this protocol type and protocols.
    fn supports(st: &State, join: &Join) -> bool {
        if join.protocol_type.is_empty() || join.protocols.is_empty() {
            return false;
        }
        let Some(any) = st.members.values().next() else {
            return true;
        };
        if any.protocol_type != join.protocol_type {
            return false;
        }
        join.protocols
            .iter()
            .any(|(name, _)| st.members.values().all(|m| m.protocols.iter().any(|(other, _)| other == name)))
    }

    /// Starts a rebalance: SyncGroup requests waiting are answered `REBALANCE_IN_PROGRESS`.
    fn prepare_rebalance(&self, st: &mut State, now: Instant) {
        for m in st.members.values_mut() {
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send(Synced::error(ResponseError::RebalanceInProgress));
            }
        }
        let longest = st.members.values().map(|m| m.rebalance_timeout).max().unwrap_or_default();
        st.not_before = if st.phase == Phase::Empty { now + self.initial_delay.min(longest) } else { now };
        st.phase = Phase::PreparingRebalance;
        st.rebalance_started = now;
        st.rebalance_deadline = now + longest;
    }

    /// Completes the join when every member has joined (and no member id handed out is still
    /// to come) and the initial delay has passed, or when the rebalance timeout has passed.
    async fn try_complete_join(&self, st: &mut State, now: Instant) {
        if st.phase != Phase::PreparingRebalance {
            return;
        }
        let all_joined = st.members.values().all(|m| m.join_waiter.is_some()) && st.pending.is_empty();
        let timed_out = now >= st.rebalance_deadline;
        if !(timed_out || (all_joined && now >= st.not_before)) {
            return;
        }
        // Members that did not join in time are gone.
        st.members.retain(|_, m| m.join_waiter.is_some());
        st.pending.clear();
        let generation = st.generation.wrapping_add(1).max(1);
        let protocol = Self::choose_protocol(st);
        let protocol_type = st.members.values().next().map(|m| m.protocol_type.clone());
        let leader = match &st.leader {
            Some(l) if st.members.contains_key(l) => Some(l.clone()),
            _ => st.members.iter().min_by_key(|(_, m)| m.joined_order).map(|(id, _)| id.clone()),
        };
        let record = GroupRecord {
            v: 1,
            generation,
            protocol_type: protocol_type.clone(),
            protocol: protocol.clone(),
            state: if st.members.is_empty() { Phase::Empty } else { Phase::Stable }.name().to_owned(),
            members: st.members.len(),
        };
        if !self.persist(st, &record).await {
            tracing::warn!(group = %self.id, "the group's record changed elsewhere: another process coordinates it now");
            return Self::kill(&self.dead, st);
        }
        st.generation = generation;
        st.protocol = protocol;
        st.protocol_type = protocol_type;
        st.leader = leader;
        st.phase = if st.members.is_empty() { Phase::Empty } else { Phase::CompletingRebalance };
        let ids: Vec<String> = st.members.keys().cloned().collect();
        for id in ids {
            let is_leader = st.leader.as_deref() == Some(id.as_str());
            let joined = Self::joined_of(st, &id, is_leader);
            if let Some(m) = st.members.get_mut(&id) {
                m.last_seen = now;
                m.assignment = Bytes::new();
                if let Some(w) = m.join_waiter.take() {
                    let _ = w.send(joined);
                }
            }
        }
    }

    /// The protocol most members prefer among those every member supports.
    fn choose_protocol(st: &State) -> Option<String> {
        let first = st.members.values().min_by_key(|m| m.joined_order)?;
        let candidates: Vec<&String> = first
            .protocols
            .iter()
            .map(|(name, _)| name)
            .filter(|name| st.members.values().all(|m| m.protocols.iter().any(|(n, _)| n == *name)))
            .collect();
        let votes = |name: &String| {
            st.members
                .values()
                .filter(|m| m.protocols.iter().map(|(n, _)| n).find(|n| candidates.contains(n)) == Some(name))
                .count()
        };
        // The first of the earliest member's candidates wins a tie.
        let mut best: Option<(&String, usize)> = None;
        for name in &candidates {
            let v = votes(name);
            if best.is_none_or(|(_, b)| v > b) {
                best = Some((name, v));
            }
        }
        best.map(|(name, _)| name.clone())
    }

    fn joined_of(st: &State, member_id: &str, with_members: bool) -> Joined {
        let protocol = st.protocol.clone().unwrap_or_default();
        let members = if with_members {
            let mut ordered: Vec<(&String, &Member)> = st.members.iter().collect();
            ordered.sort_by_key(|(_, m)| m.joined_order);
            ordered
                .into_iter()
                .map(|(id, m)| (id.clone(), m.instance_id.clone(), m.metadata_for(&protocol)))
                .collect()
        } else {
            Vec::new()
        };
        Joined {
            error: 0,
            generation: st.generation,
            protocol_type: st.protocol_type.clone(),
            protocol: st.protocol.clone(),
            leader: st.leader.clone().unwrap_or_default(),
            member_id: member_id.to_owned(),
            members,
        }
    }

    /// Writes the group's record (compare-and-set); false when another process wrote it.
    async fn persist(&self, st: &mut State, record: &GroupRecord) -> bool {
        let Ok(value) = serde_json::to_vec(record) else { return false };
        let condition = match st.record_version {
            Some(v) => PutCondition::IfVersion(v),
            None => PutCondition::IfAbsent,
        };
        match self.store.put(&record_key(&self.id), Bytes::from(value), condition).await {
            Ok(written) => {
                st.record_version = Some(written.version);
                true
            }
            Err(MetaError::VersionMismatch { .. } | MetaError::KeyExists { .. }) => false,
            Err(e) => {
                // The outcome is unknown: the generation cannot be trusted any more; give the
                // group up, and the next request claims it again from the store.
                tracing::warn!(group = %self.id, error = %e, "writing the group's record failed");
                false
            }
        }
    }

    /// A member's generation check shared by SyncGroup, Heartbeat and OffsetCommit.
    fn check_member(
        st: &State,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), ResponseError> {
        if st.phase == Phase::Dead {
            return Err(ResponseError::NotCoordinator);
        }
        let Some(m) = st.members.get(member_id) else {
            if let Some(instance) = instance_id
                && st.members.values().any(|m| m.instance_id.as_deref() == Some(instance))
            {
                return Err(ResponseError::FencedInstanceId);
            }
            return Err(ResponseError::UnknownMemberId);
        };
        if let (Some(given), Some(known)) = (instance_id, m.instance_id.as_deref())
            && given != known
        {
            return Err(ResponseError::FencedInstanceId);
        }
        if generation != st.generation {
            return Err(ResponseError::IllegalGeneration);
        }
        Ok(())
    }

    /// A SyncGroup: the leader's assignments complete the rebalance; a follower waits for them.
    pub async fn sync(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        protocol: (Option<&str>, Option<&str>),
        assignments: Vec<(String, Bytes)>,
    ) -> Synced {
        let receiver = {
            let mut st = self.state.lock().await;
            st.last_request = Instant::now();
            if let Err(e) = Self::check_member(&st, member_id, instance_id, generation) {
                return Synced::error(e);
            }
            let (protocol_type, protocol_name) = protocol;
            if protocol_type.is_some_and(|t| Some(t) != st.protocol_type.as_deref())
                || protocol_name.is_some_and(|p| Some(p) != st.protocol.as_deref())
            {
                return Synced::error(ResponseError::InconsistentGroupProtocol);
            }
            let now = Instant::now();
            match st.phase {
                Phase::PreparingRebalance => return Synced::error(ResponseError::RebalanceInProgress),
                Phase::Stable => {
                    let synced = self.synced_of(&st, member_id);
                    if let Some(m) = st.members.get_mut(member_id) {
                        m.last_seen = now;
                    }
                    return synced;
                }
                Phase::CompletingRebalance => {}
                Phase::Empty | Phase::Dead => return Synced::error(ResponseError::UnknownMemberId),
            }
            let (sender, receiver) = oneshot::channel();
            if let Some(m) = st.members.get_mut(member_id) {
                m.last_seen = now;
                if let Some(old) = m.sync_waiter.replace(sender) {
                    let _ = old.send(Synced::error(ResponseError::RebalanceInProgress));
                }
            }
            if st.leader.as_deref() == Some(member_id) {
                for (id, assignment) in assignments {
                    if let Some(m) = st.members.get_mut(&id) {
                        m.assignment = assignment;
                    }
                }
                st.phase = Phase::Stable;
                let ids: Vec<String> = st.members.keys().cloned().collect();
                for id in ids {
                    let synced = self.synced_of(&st, &id);
                    if let Some(w) = st.members.get_mut(&id).and_then(|m| m.sync_waiter.take()) {
                        let _ = w.send(synced);
                    }
                }
            }
            receiver
        };
        receiver.await.unwrap_or_else(|_| Synced::error(ResponseError::NotCoordinator))
    }

    fn synced_of(&self, st: &State, member_id: &str) -> Synced {
        Synced {
            error: 0,
            protocol_type: st.protocol_type.clone(),
            protocol: st.protocol.clone(),
            assignment: st.members.get(member_id).map(|m| m.assignment.clone()).unwrap_or_default(),
        }
    }

    /// A Heartbeat: keeps the member alive; `REBALANCE_IN_PROGRESS` tells it to join again.
    pub async fn heartbeat(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), ResponseError> {
        let mut st = self.state.lock().await;
        st.last_request = Instant::now();
        let checked = Self::check_member(&st, member_id, instance_id, generation);
        if let Some(m) = st.members.get_mut(member_id)
            && !matches!(checked, Err(ResponseError::UnknownMemberId | ResponseError::FencedInstanceId))
        {
            m.last_seen = Instant::now();
        }
        checked?;
        if st.phase == Phase::PreparingRebalance {
            return Err(ResponseError::RebalanceInProgress);
        }
        Ok(())
    }

    /// A LeaveGroup of one member (by member id, or by instance id when the id is empty).
    pub async fn leave(&self, member_id: &str, instance_id: Option<&str>) -> Result<(), ResponseError> {
        let mut st = self.state.lock().await;
        st.last_request = Instant::now();
        if st.phase == Phase::Dead {
            return Err(ResponseError::NotCoordinator);
        }
        let id = if member_id.is_empty() {
            let found = st
                .members
                .iter()
                .find(|(_, m)| m.instance_id.as_deref() == instance_id && instance_id.is_some());
            match found {
                Some((id, _)) => id.clone(),
                None => return Err(ResponseError::UnknownMemberId),
            }
        } else {
            member_id.to_owned()
        };
        let Some(mut gone) = st.members.remove(&id) else {
            return Err(ResponseError::UnknownMemberId);
        };
        if let (Some(given), Some(known)) = (instance_id, gone.instance_id.as_deref())
            && given != known
        {
            st.members.insert(id, gone);
            return Err(ResponseError::FencedInstanceId);
        }
        if let Some(w) = gone.join_waiter.take() {
            let _ = w.send(Joined::error(ResponseError::UnknownMemberId, &id));
        }
        if let Some(w) = gone.sync_waiter.take() {
            let _ = w.send(Synced::error(ResponseError::UnknownMemberId));
        }
        let now = Instant::now();
        if st.phase != Phase::PreparingRebalance {
            self.prepare_rebalance(&mut st, now);
        }
        self.try_complete_join(&mut st, now).await;
        Ok(())
    }

    /// Whether an OffsetCommit may go ahead, and the generation to store it with: a member
    /// of the current generation (not while the group completes a rebalance), or, into a
    /// group without members, a commit without one (generation -1: a consumer that assigns
    /// its partitions itself). Keeps the member alive.
    pub async fn check_commit(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<i32, ResponseError> {
        let mut st = self.state.lock().await;
        st.last_request = Instant::now();
        if st.phase == Phase::Dead {
            return Err(ResponseError::NotCoordinator);
        }
        if generation < 0 && member_id.is_empty() {
            return if st.members.is_empty() {
                Ok(st.generation)
            } else {
                Err(ResponseError::UnknownMemberId)
            };
        }
        Self::check_member(&st, member_id, instance_id, generation)?;
        if st.phase == Phase::CompletingRebalance {
            return Err(ResponseError::RebalanceInProgress);
        }
        if let Some(m) = st.members.get_mut(member_id) {
            m.last_seen = Instant::now();
        }
        Ok(st.generation)
    }

    /// The group as DescribeGroups shows it.
    pub async fn view(&self) -> GroupView {
        let mut st = self.state.lock().await;
        st.last_request = Instant::now();
        let protocol = st.protocol.clone().unwrap_or_default();
        let show_members =
            matches!(st.phase, Phase::Stable | Phase::CompletingRebalance | Phase::PreparingRebalance);
        let mut members: Vec<(&String, &Member)> =
            if show_members { st.members.iter().collect() } else { Vec::new() };
        members.sort_by_key(|(_, m)| m.joined_order);
        GroupView {
            phase: st.phase,
            generation: st.generation,
            protocol_type: st.protocol_type.clone().unwrap_or_default(),
            protocol: if st.phase == Phase::Stable { protocol.clone() } else { String::new() },
            members: members
                .into_iter()
                .map(|(id, m)| MemberView {
                    member_id: id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: m.metadata_for(&protocol),
                    assignment: if st.phase == Phase::Stable { m.assignment.clone() } else { Bytes::new() },
                })
                .collect(),
        }
    }

    /// Removes members whose session timed out, member ids handed out and never used, and
    /// completes a rebalance whose timeout passed; unloads a group long without members.
    async fn tick(&self) {
        let mut st = self.state.lock().await;
        if st.phase == Phase::Dead {
            return;
        }
        let now = Instant::now();
        if st.phase == Phase::Empty
            && st.pending.is_empty()
            && now.saturating_duration_since(st.last_request) > IDLE_UNLOAD
        {
            return Self::kill(&self.dead, &mut st);
        }
        st.pending.retain(|_, until| *until > now);
        let waiting_join = st.phase == Phase::PreparingRebalance;
        let expired: Vec<String> = st
            .members
            .iter()
            .filter(|(_, m)| m.expired(now) && !(waiting_join && m.join_waiter.is_some()))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            if let Some(mut m) = st.members.remove(id) {
                tracing::info!(group = %self.id, member = %id, "a member's session timed out");
                if let Some(w) = m.sync_waiter.take() {
                    let _ = w.send(Synced::error(ResponseError::UnknownMemberId));
                }
            }
        }
        if !expired.is_empty() && matches!(st.phase, Phase::Stable | Phase::CompletingRebalance) {
            self.prepare_rebalance(&mut st, now);
        }
        self.try_complete_join(&mut st, now).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lakestream_meta::memory::InMemoryStore;

    fn memory_store() -> StateStore {
        StateStore::new(Arc::new(InMemoryStore::new()), "kafka").unwrap()
    }

    fn join(member_id: &str, protocols: &[(&str, &str)]) -> Join {
        Join {
            member_id: member_id.to_owned(),
            instance_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout: Duration::from_secs(10),
            rebalance_timeout: Duration::from_secs(30),
            protocol_type: "consumer".into(),
            protocols: protocols.iter().map(|(n, m)| (n.to_string(), Bytes::from(m.to_string()))).collect(),
            require_known_member_id: true,
        }
    }

    fn group() -> Arc<Group> {
        let meta: StateStore = memory_store();
        Group::start("g".into(), "s".into(), meta, Duration::ZERO, None)
    }

    #[tokio::test]
    async fn a_member_joins_with_the_id_it_is_given_and_leads_generation_1() {
        let g = group();
        let first = g.join(join("", &[("range", "m1")]), || "m-1".into()).await;
        assert_eq!((first.error, first.member_id.as_str()), (ResponseError::MemberIdRequired.code(), "m-1"));
        let joined = g.join(join("m-1", &[("range", "m1")]), || unreachable!()).await;
        assert_eq!((joined.error, joined.generation, joined.leader.as_str()), (0, 1, "m-1"));
        assert_eq!(joined.protocol.as_deref(), Some("range"));
        assert_eq!(joined.members.len(), 1);
        let synced =
            g.sync("m-1", None, 1, (None, None), vec![("m-1".into(), Bytes::from_static(b"a1"))]).await;
        assert_eq!((synced.error, &synced.assignment[..]), (0, &b"a1"[..]));
        assert_eq!(g.heartbeat("m-1", None, 1).await, Ok(()));
        assert_eq!(g.heartbeat("m-1", None, 0).await, Err(ResponseError::IllegalGeneration));
        assert_eq!(g.heartbeat("nobody", None, 1).await, Err(ResponseError::UnknownMemberId));
        assert_eq!(g.view().await.phase, Phase::Stable);
        // Its leaving empties the group at a new generation.
        assert_eq!(g.leave("m-1", None).await, Ok(()));
        let view = g.view().await;
        assert_eq!((view.phase, view.members.len()), (Phase::Empty, 0));
        assert_eq!(g.check_commit("", None, -1).await, Ok(2));
    }

    #[tokio::test]
    async fn a_second_member_rebalances_the_group_and_both_get_the_new_generation() {
        let g = group();
        let a = g.join(join("", &[("range", "a"), ("roundrobin", "a")]), || "a".into()).await;
        let a = g.join(join(&a.member_id, &[("range", "a"), ("roundrobin", "a")]), || unreachable!()).await;
        assert_eq!(a.generation, 1);
        assert_eq!(g.sync("a", None, 1, (None, None), vec![]).await.error, 0);
        // B joins (supports only roundrobin): A learns of the rebalance by heartbeat and joins.
        let b_id = g.join(join("", &[("roundrobin", "b")]), || "b".into()).await.member_id;
        let g2 = g.clone();
        let b = tokio::spawn(
            async move { g2.join(join(&b_id, &[("roundrobin", "b")]), || unreachable!()).await },
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(g.heartbeat("a", None, 1).await, Err(ResponseError::RebalanceInProgress));
        assert_eq!(
            g.sync("a", None, 1, (None, None), vec![]).await.error,
            ResponseError::RebalanceInProgress.code()
        );
        let a = g.join(join("a", &[("range", "a"), ("roundrobin", "a")]), || unreachable!()).await;
        let b = b.await.unwrap();
        assert_eq!((a.generation, b.generation), (2, 2));
        assert_eq!(a.protocol.as_deref(), Some("roundrobin"), "the one protocol both support");
        assert_eq!((a.leader.as_str(), a.members.len(), b.members.len()), ("a", 2, 0));
        // B's sync waits for the leader's.
        let g2 = g.clone();
        let b_sync = tokio::spawn(async move { g2.sync("b", None, 2, (None, None), vec![]).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(g.check_commit("b", None, 2).await, Err(ResponseError::RebalanceInProgress));
        let assignments =
            vec![("a".into(), Bytes::from_static(b"pa")), ("b".into(), Bytes::from_static(b"pb"))];
        assert_eq!(&g.sync("a", None, 2, (None, None), assignments).await.assignment[..], b"pa");
        assert_eq!(&b_sync.await.unwrap().assignment[..], b"pb");
        assert_eq!(g.check_commit("b", None, 2).await, Ok(2));
        assert_eq!(g.check_commit("", None, -1).await, Err(ResponseError::UnknownMemberId));
        // A member with a protocol no one else supports is refused.
        let c = g.join(join("", &[("sticky", "c")]), || "c".into()).await;
        assert_eq!(c.error, ResponseError::InconsistentGroupProtocol.code());
    }

    #[tokio::test]
    async fn members_joining_together_share_the_first_generation() {
        let meta: StateStore = memory_store();
        // A delay long enough for both to join before the first generation completes.
        let g = Group::start("g".into(), "s".into(), meta, Duration::from_millis(300), None);
        let a = g.join(join("", &[("range", "a")]), || "a".into()).await.member_id;
        let b = g.join(join("", &[("range", "b")]), || "b".into()).await.member_id;
        let (g1, g2) = (g.clone(), g.clone());
        let a = tokio::spawn(async move { g1.join(join(&a, &[("range", "a")]), || unreachable!()).await });
        let b = tokio::spawn(async move { g2.join(join(&b, &[("range", "b")]), || unreachable!()).await });
        let (a, b) = (a.await.unwrap(), b.await.unwrap());
        assert_eq!((a.error, b.error), (0, 0));
        assert_eq!((a.generation, b.generation), (1, 1));
        assert_eq!(a.members.len() + b.members.len(), 2, "the leader gets both members");
    }

    #[tokio::test]
    async fn a_member_whose_session_times_out_is_removed() {
        let g = group();
        let mut j = join("", &[("range", "a")]);
        j.session_timeout = Duration::from_millis(300);
        let id = g.join(j.clone(), || "a".into()).await.member_id;
        j.member_id = id;
        assert_eq!(g.join(j, || unreachable!()).await.generation, 1);
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(g.heartbeat("a", None, 1).await, Err(ResponseError::UnknownMemberId));
        assert_eq!(g.view().await.phase, Phase::Empty);
    }

    #[tokio::test]
    async fn a_lost_record_race_gives_the_group_up() {
        let meta: StateStore = memory_store();
        let g = Group::start("g".into(), "s".into(), meta.clone(), Duration::ZERO, None);
        // Another process wrote the group's record meanwhile.
        meta.put(&record_key("g"), Bytes::from_static(b"{}"), PutCondition::None).await.unwrap();
        let id = g.join(join("", &[("range", "a")]), || "a".into()).await.member_id;
        let joined = g.join(join(&id, &[("range", "a")]), || unreachable!()).await;
        assert_eq!(joined.error, ResponseError::NotCoordinator.code());
        assert!(g.is_dead());
    }
}
