//! One consumer group's membership as a state machine (the rules of `crate::group`): no I/O,
//! no clock of its own. Every event carries the time it happens at; the machine answers with
//! [`Effect`]s for its driver to carry out, and [`GroupMachine::next_deadline`] says when it
//! next needs [`GroupMachine::tick`]. A request the machine holds (a JoinGroup waiting for a
//! rebalance, a SyncGroup waiting for the leader's) is a [`Waiter`] the driver named; every
//! waiter handed to the machine is answered exactly once, by an effect.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use lakestream_service::state::Version;

use super::{GroupRecord, GroupView, Join, Joined, MemberView, Phase, Synced};

/// How long a group without members stays loaded after its last request. Unloaded, it is
/// loaded again from its record by its next request (this process still holds the claim).
pub(crate) const IDLE_UNLOAD: Duration = Duration::from_secs(300);

/// The driver's name for a request the machine holds.
pub(crate) type Waiter = u64;

/// What the driver is to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Effect {
    /// Answer the JoinGroup held as this waiter.
    Join(Waiter, Joined),
    /// Answer the SyncGroup held as this waiter.
    Sync(Waiter, Synced),
    /// Write the group's record, compare-and-set against `version` (`None`: it must not
    /// exist yet), and report the outcome to [`GroupMachine::persisted`] before any other
    /// event.
    Persist { record: GroupRecord, version: Option<Version> },
}

/// Why the record of a new generation was not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PersistFailed {
    /// Another process wrote it: it coordinates the group now.
    Lost,
    /// The write's outcome is unknown: the generation cannot be trusted any more.
    Unknown,
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
    join_waiter: Option<Waiter>,
    sync_waiter: Option<Waiter>,
}

impl Member {
    fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols.iter().find(|(name, _)| name == protocol).map(|(_, m)| m.clone()).unwrap_or_default()
    }

    /// When the member's session times out.
    fn session_deadline(&self) -> Instant {
        self.last_seen + self.session_timeout
    }
}

/// A generation whose record is being written.
#[derive(Debug)]
struct NextGeneration {
    generation: i32,
    protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<String>,
}

/// A consumer group's membership (see the module's documentation).
#[derive(Debug)]
pub(crate) struct GroupMachine {
    /// `kafka.group_initial_rebalance_delay`.
    initial_delay: Duration,
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
    next_order: u64,
    /// The last request about the group.
    last_request: Instant,
    /// The generation being written, until [`GroupMachine::persisted`].
    writing: Option<NextGeneration>,
}

impl GroupMachine {
    /// A group continuing from its record (`None`: a new group), loaded at `now`.
    pub fn new(record: Option<(GroupRecord, Version)>, initial_delay: Duration, now: Instant) -> Self {
        let (generation, record_version, protocol_type) = match record {
            Some((r, v)) => (r.generation, Some(v), r.protocol_type),
            None => (0, None, None),
        };
        GroupMachine {
            initial_delay,
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
            next_order: 0,
            last_request: now,
            writing: None,
        }
    }

    /// Where the group stands.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// A JoinGroup, held as `waiter`: answered at once (an error, a new member id, a member
    /// of a stable group with nothing new), or when the rebalance it waits for completes.
    /// `new_member_id` names a member joining without an id.
    pub fn join(
        &mut self,
        join: Join,
        waiter: Waiter,
        new_member_id: impl FnOnce() -> String,
        now: Instant,
    ) -> Vec<Effect> {
        let mut fx = Vec::new();
        self.last_request = now;
        if self.phase == Phase::Dead {
            fx.push(Effect::Join(waiter, Joined::error(ResponseError::NotCoordinator, &join.member_id)));
            return fx;
        }
        if !self.supports(&join) {
            let joined = Joined::error(ResponseError::InconsistentGroupProtocol, &join.member_id);
            fx.push(Effect::Join(waiter, joined));
            return fx;
        }
        let mut member_id = join.member_id.clone();
        if member_id.is_empty() {
            member_id = new_member_id();
            if join.require_known_member_id && join.instance_id.is_none() {
                self.pending.insert(member_id.clone(), now + join.session_timeout);
                let joined = Joined {
                    error: ResponseError::MemberIdRequired.code(),
                    generation: -1,
                    member_id,
                    ..Joined::default()
                };
                fx.push(Effect::Join(waiter, joined));
                return fx;
            }
        } else if self.pending.remove(&member_id).is_none() && !self.members.contains_key(&member_id) {
            fx.push(Effect::Join(waiter, Joined::error(ResponseError::UnknownMemberId, &member_id)));
            return fx;
        }
        // A static member replaces the one with its instance id.
        if let Some(instance) = &join.instance_id {
            let replaced: Vec<String> = self
                .members
                .iter()
                .filter(|(id, m)| **id != member_id && m.instance_id.as_ref() == Some(instance))
                .map(|(id, _)| id.clone())
                .collect();
            for id in replaced {
                self.remove_member(&id, ResponseError::FencedInstanceId, &mut fx);
            }
        }
        let order = self.next_order;
        let unchanged = match self.members.get_mut(&member_id) {
            Some(m) => {
                let unchanged = m.protocols == join.protocols;
                m.protocols = join.protocols;
                m.session_timeout = join.session_timeout;
                m.rebalance_timeout = join.rebalance_timeout;
                m.last_seen = now;
                if let Some(old) = m.join_waiter.replace(waiter) {
                    let joined = Joined::error(ResponseError::RebalanceInProgress, &member_id);
                    fx.push(Effect::Join(old, joined));
                }
                unchanged
            }
            None => {
                self.next_order += 1;
                self.members.insert(
                    member_id.clone(),
                    Member {
                        instance_id: join.instance_id,
                        client_id: join.client_id,
                        client_host: join.client_host,
                        session_timeout: join.session_timeout,
                        rebalance_timeout: join.rebalance_timeout,
                        protocol_type: join.protocol_type,
                        protocols: join.protocols,
                        assignment: Bytes::new(),
                        last_seen: now,
                        joined_order: order,
                        join_waiter: Some(waiter),
                        sync_waiter: None,
                    },
                );
                false
            }
        };
        match self.phase {
            // A follower of a stable group with nothing new: the current generation.
            Phase::Stable | Phase::CompletingRebalance
                if unchanged && self.leader.as_deref() != Some(member_id.as_str()) =>
            {
                let joined = self.joined_of(&member_id, false);
                if let Some(w) = self.members.get_mut(&member_id).and_then(|m| m.join_waiter.take()) {
                    fx.push(Effect::Join(w, joined));
                }
            }
            Phase::PreparingRebalance => {
                // A new member of a group waiting out its initial delay extends it.
                if self.not_before > now {
                    self.not_before = (now + self.initial_delay).min(self.rebalance_deadline);
                }
            }
            _ => self.prepare_rebalance(now, &mut fx),
        }
        self.try_complete_join(now, &mut fx);
        fx
    }

    /// Whether the group takes a member of this protocol type and protocols.
    fn supports(&self, join: &Join) -> bool {
        if join.protocol_type.is_empty() || join.protocols.is_empty() {
            return false;
        }
        let Some(any) = self.members.values().next() else {
            return true;
        };
        if any.protocol_type != join.protocol_type {
            return false;
        }
        join.protocols.iter().any(|(name, _)| {
            self.members.values().all(|m| m.protocols.iter().any(|(other, _)| other == name))
        })
    }

    /// Removes a member, answering its held requests with `error`.
    fn remove_member(&mut self, id: &str, error: ResponseError, fx: &mut Vec<Effect>) -> Option<Member> {
        let mut gone = self.members.remove(id)?;
        if let Some(w) = gone.join_waiter.take() {
            fx.push(Effect::Join(w, Joined::error(error, id)));
        }
        if let Some(w) = gone.sync_waiter.take() {
            fx.push(Effect::Sync(w, Synced::error(error)));
        }
        Some(gone)
    }

    /// Starts a rebalance: SyncGroup requests waiting are answered `REBALANCE_IN_PROGRESS`.
    fn prepare_rebalance(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        for m in self.members.values_mut() {
            if let Some(w) = m.sync_waiter.take() {
                fx.push(Effect::Sync(w, Synced::error(ResponseError::RebalanceInProgress)));
            }
        }
        let longest = self.members.values().map(|m| m.rebalance_timeout).max().unwrap_or_default();
        self.not_before =
            if self.phase == Phase::Empty { now + self.initial_delay.min(longest) } else { now };
        self.phase = Phase::PreparingRebalance;
        self.rebalance_deadline = now + longest;
    }

    /// Whether every member has joined again and no member id handed out is still to come.
    fn all_joined(&self) -> bool {
        self.members.values().all(|m| m.join_waiter.is_some()) && self.pending.is_empty()
    }

    /// Completes the join when every member has joined (and the initial delay has passed), or
    /// when the rebalance timeout has passed: the next generation's record is to be written.
    fn try_complete_join(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        if self.phase != Phase::PreparingRebalance || self.writing.is_some() {
            return;
        }
        let timed_out = now >= self.rebalance_deadline;
        if !(timed_out || (self.all_joined() && now >= self.not_before)) {
            return;
        }
        // Members that did not join in time are gone (none holds a SyncGroup: the rebalance
        // answered those).
        let late: Vec<String> =
            self.members.iter().filter(|(_, m)| m.join_waiter.is_none()).map(|(id, _)| id.clone()).collect();
        for id in late {
            self.remove_member(&id, ResponseError::UnknownMemberId, fx);
        }
        self.pending.clear();
        let next = NextGeneration {
            generation: self.generation.wrapping_add(1).max(1),
            protocol_type: self.members.values().next().map(|m| m.protocol_type.clone()),
            protocol: self.choose_protocol(),
            leader: match &self.leader {
                Some(l) if self.members.contains_key(l) => Some(l.clone()),
                _ => self.members.iter().min_by_key(|(_, m)| m.joined_order).map(|(id, _)| id.clone()),
            },
        };
        let record = GroupRecord {
            v: 1,
            generation: next.generation,
            protocol_type: next.protocol_type.clone(),
            protocol: next.protocol.clone(),
            state: if self.members.is_empty() { Phase::Empty } else { Phase::Stable }.name().to_owned(),
            members: self.members.len(),
        };
        self.writing = Some(next);
        fx.push(Effect::Persist { record, version: self.record_version });
    }

    /// The outcome of the [`Effect::Persist`] asked for last: the new generation starts (each
    /// held JoinGroup is answered, the leader's with every member), or, the record not
    /// written, the group is given up.
    pub fn persisted(&mut self, outcome: Result<Version, PersistFailed>, now: Instant) -> Vec<Effect> {
        let mut fx = Vec::new();
        let Some(next) = self.writing.take() else { return fx };
        let version = match outcome {
            Ok(version) => version,
            Err(_) => {
                self.give_up_into(&mut fx);
                return fx;
            }
        };
        self.record_version = Some(version);
        self.generation = next.generation;
        self.protocol = next.protocol;
        self.protocol_type = next.protocol_type;
        self.leader = next.leader;
        self.phase = if self.members.is_empty() { Phase::Empty } else { Phase::CompletingRebalance };
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let is_leader = self.leader.as_deref() == Some(id.as_str());
            let joined = self.joined_of(&id, is_leader);
            if let Some(m) = self.members.get_mut(&id) {
                m.last_seen = now;
                m.assignment = Bytes::new();
                if let Some(w) = m.join_waiter.take() {
                    fx.push(Effect::Join(w, joined));
                }
            }
        }
        fx
    }

    /// The protocol most members prefer among those every member supports.
    fn choose_protocol(&self) -> Option<String> {
        let first = self.members.values().min_by_key(|m| m.joined_order)?;
        let candidates: Vec<&String> = first
            .protocols
            .iter()
            .map(|(name, _)| name)
            .filter(|name| self.members.values().all(|m| m.protocols.iter().any(|(n, _)| n == *name)))
            .collect();
        let votes = |name: &String| {
            self.members
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

    fn joined_of(&self, member_id: &str, with_members: bool) -> Joined {
        let protocol = self.protocol.clone().unwrap_or_default();
        let members = if with_members {
            let mut ordered: Vec<(&String, &Member)> = self.members.iter().collect();
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
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            member_id: member_id.to_owned(),
            members,
        }
    }

    fn synced_of(&self, member_id: &str) -> Synced {
        Synced {
            error: 0,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            assignment: self.members.get(member_id).map(|m| m.assignment.clone()).unwrap_or_default(),
        }
    }

    /// A member's generation check shared by SyncGroup, Heartbeat and OffsetCommit.
    fn check_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), ResponseError> {
        if self.phase == Phase::Dead {
            return Err(ResponseError::NotCoordinator);
        }
        let Some(m) = self.members.get(member_id) else {
            if let Some(instance) = instance_id
                && self.members.values().any(|m| m.instance_id.as_deref() == Some(instance))
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
        if generation != self.generation {
            return Err(ResponseError::IllegalGeneration);
        }
        Ok(())
    }

    /// A SyncGroup, held as `waiter`: the leader's assignments complete the rebalance (and
    /// answer every member's); a follower's waits for them.
    #[allow(clippy::too_many_arguments)] // the request's fields, the waiter and the time
    pub fn sync(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        (protocol_type, protocol_name): (Option<&str>, Option<&str>),
        assignments: Vec<(String, Bytes)>,
        waiter: Waiter,
        now: Instant,
    ) -> Vec<Effect> {
        let mut fx = Vec::new();
        self.last_request = now;
        if let Err(e) = self.check_member(member_id, instance_id, generation) {
            fx.push(Effect::Sync(waiter, Synced::error(e)));
            return fx;
        }
        if protocol_type.is_some_and(|t| Some(t) != self.protocol_type.as_deref())
            || protocol_name.is_some_and(|p| Some(p) != self.protocol.as_deref())
        {
            fx.push(Effect::Sync(waiter, Synced::error(ResponseError::InconsistentGroupProtocol)));
            return fx;
        }
        match self.phase {
            Phase::PreparingRebalance => {
                fx.push(Effect::Sync(waiter, Synced::error(ResponseError::RebalanceInProgress)));
                return fx;
            }
            Phase::Stable => {
                fx.push(Effect::Sync(waiter, self.synced_of(member_id)));
                if let Some(m) = self.members.get_mut(member_id) {
                    m.last_seen = now;
                }
                return fx;
            }
            Phase::CompletingRebalance => {}
            Phase::Empty | Phase::Dead => {
                fx.push(Effect::Sync(waiter, Synced::error(ResponseError::UnknownMemberId)));
                return fx;
            }
        }
        if let Some(m) = self.members.get_mut(member_id) {
            m.last_seen = now;
            if let Some(old) = m.sync_waiter.replace(waiter) {
                fx.push(Effect::Sync(old, Synced::error(ResponseError::RebalanceInProgress)));
            }
        }
        if self.leader.as_deref() == Some(member_id) {
            for (id, assignment) in assignments {
                if let Some(m) = self.members.get_mut(&id) {
                    m.assignment = assignment;
                }
            }
            self.phase = Phase::Stable;
            let ids: Vec<String> = self.members.keys().cloned().collect();
            for id in ids {
                let synced = self.synced_of(&id);
                if let Some(w) = self.members.get_mut(&id).and_then(|m| m.sync_waiter.take()) {
                    fx.push(Effect::Sync(w, synced));
                }
            }
        }
        fx
    }

    /// A Heartbeat: keeps the member alive; `REBALANCE_IN_PROGRESS` tells it to join again.
    pub fn heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> Result<(), ResponseError> {
        self.last_request = now;
        let checked = self.check_member(member_id, instance_id, generation);
        if let Some(m) = self.members.get_mut(member_id)
            && !matches!(checked, Err(ResponseError::UnknownMemberId | ResponseError::FencedInstanceId))
        {
            m.last_seen = now;
        }
        checked?;
        if self.phase == Phase::PreparingRebalance {
            return Err(ResponseError::RebalanceInProgress);
        }
        Ok(())
    }

    /// A LeaveGroup of one member (by member id, or by instance id when the id is empty): the
    /// group rebalances without it.
    pub fn leave(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        now: Instant,
    ) -> (Result<(), ResponseError>, Vec<Effect>) {
        let mut fx = Vec::new();
        self.last_request = now;
        if self.phase == Phase::Dead {
            return (Err(ResponseError::NotCoordinator), fx);
        }
        let id = if member_id.is_empty() {
            let found = self
                .members
                .iter()
                .find(|(_, m)| m.instance_id.as_deref() == instance_id && instance_id.is_some());
            match found {
                Some((id, _)) => id.clone(),
                None => return (Err(ResponseError::UnknownMemberId), fx),
            }
        } else {
            member_id.to_owned()
        };
        let Some(known) = self.members.get(&id) else {
            return (Err(ResponseError::UnknownMemberId), fx);
        };
        if let (Some(given), Some(known)) = (instance_id, known.instance_id.as_deref())
            && given != known
        {
            return (Err(ResponseError::FencedInstanceId), fx);
        }
        self.remove_member(&id, ResponseError::UnknownMemberId, &mut fx);
        if self.phase != Phase::PreparingRebalance {
            self.prepare_rebalance(now, &mut fx);
        }
        self.try_complete_join(now, &mut fx);
        (Ok(()), fx)
    }

    /// Whether an OffsetCommit may go ahead, and the generation to store it with: a member
    /// of the current generation (not while the group completes a rebalance), or, into a
    /// group without members, a commit without one (generation -1: a consumer that assigns
    /// its partitions itself). Keeps the member alive.
    pub fn check_commit(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> Result<i32, ResponseError> {
        self.last_request = now;
        if self.phase == Phase::Dead {
            return Err(ResponseError::NotCoordinator);
        }
        if generation < 0 && member_id.is_empty() {
            return if self.members.is_empty() {
                Ok(self.generation)
            } else {
                Err(ResponseError::UnknownMemberId)
            };
        }
        self.check_member(member_id, instance_id, generation)?;
        if self.phase == Phase::CompletingRebalance {
            return Err(ResponseError::RebalanceInProgress);
        }
        if let Some(m) = self.members.get_mut(member_id) {
            m.last_seen = now;
        }
        Ok(self.generation)
    }

    /// The group as DescribeGroups shows it.
    pub fn view(&mut self, now: Instant) -> GroupView {
        self.last_request = now;
        let protocol = self.protocol.clone().unwrap_or_default();
        let show_members =
            matches!(self.phase, Phase::Stable | Phase::CompletingRebalance | Phase::PreparingRebalance);
        let mut members: Vec<(&String, &Member)> =
            if show_members { self.members.iter().collect() } else { Vec::new() };
        members.sort_by_key(|(_, m)| m.joined_order);
        let stable = self.phase == Phase::Stable;
        GroupView {
            phase: self.phase,
            generation: self.generation,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol: if stable { protocol.clone() } else { String::new() },
            members: members
                .into_iter()
                .map(|(id, m)| MemberView {
                    member_id: id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: m.metadata_for(&protocol),
                    assignment: if stable { m.assignment.clone() } else { Bytes::new() },
                })
                .collect(),
        }
    }

    /// The time passed to `now`: members whose session timed out are removed (and the
    /// group rebalances), member ids handed out and never used are forgotten, a rebalance
    /// whose timeout passed (or whose initial delay ended with every member in) completes,
    /// and a group long without members is given up (the driver then unloads it).
    pub fn tick(&mut self, now: Instant) -> Vec<Effect> {
        let mut fx = Vec::new();
        if self.phase == Phase::Dead || self.writing.is_some() {
            return fx;
        }
        if self.phase == Phase::Empty && self.pending.is_empty() && now >= self.last_request + IDLE_UNLOAD {
            self.give_up_into(&mut fx);
            return fx;
        }
        self.pending.retain(|_, until| *until > now);
        let waiting_join = self.phase == Phase::PreparingRebalance;
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| now >= m.session_deadline() && !(waiting_join && m.join_waiter.is_some()))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            tracing::info!(member = %id, "a consumer group member's session timed out");
            self.remove_member(id, ResponseError::UnknownMemberId, &mut fx);
        }
        if !expired.is_empty() && matches!(self.phase, Phase::Stable | Phase::CompletingRebalance) {
            self.prepare_rebalance(now, &mut fx);
        }
        self.try_complete_join(now, &mut fx);
        fx
    }

    /// When [`GroupMachine::tick`] next has something to do (`None`: nothing until another
    /// event). After a tick at `now`, it is later than `now`.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.phase == Phase::Dead || self.writing.is_some() {
            return None;
        }
        let preparing = self.phase == Phase::PreparingRebalance;
        let idle =
            (self.phase == Phase::Empty && self.pending.is_empty()).then(|| self.last_request + IDLE_UNLOAD);
        let sessions = self
            .members
            .values()
            // A member waiting for the rebalance to complete is not timed out meanwhile.
            .filter(|m| !(preparing && m.join_waiter.is_some()))
            .map(Member::session_deadline);
        let rebalance = preparing.then_some(self.rebalance_deadline);
        let initial_delay = (preparing && self.all_joined()).then_some(self.not_before);
        idle.into_iter()
            .chain(self.pending.values().copied())
            .chain(sessions)
            .chain(rebalance)
            .chain(initial_delay)
            .min()
    }

    /// Gives the group up (this process no longer coordinates it): every held request is
    /// answered `NOT_COORDINATOR`, and every later one too.
    pub fn give_up(&mut self) -> Vec<Effect> {
        let mut fx = Vec::new();
        self.give_up_into(&mut fx);
        fx
    }

    fn give_up_into(&mut self, fx: &mut Vec<Effect>) {
        self.phase = Phase::Dead;
        self.writing = None;
        for (id, m) in &mut self.members {
            if let Some(w) = m.join_waiter.take() {
                fx.push(Effect::Join(w, Joined::error(ResponseError::NotCoordinator, id)));
            }
            if let Some(w) = m.sync_waiter.take() {
                fx.push(Effect::Sync(w, Synced::error(ResponseError::NotCoordinator)));
            }
        }
    }

    /// The waiters held now (for the tests' check that each is answered exactly once).
    #[cfg(test)]
    fn held_waiters(&self) -> Vec<Waiter> {
        self.members.values().flat_map(|m| m.join_waiter.into_iter().chain(m.sync_waiter)).collect()
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
