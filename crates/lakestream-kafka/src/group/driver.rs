//! The driver of a group's [`GroupMachine`]: it takes the time from tokio's clock, holds the
//! reply channel of each request the machine holds, writes the group's record to the
//! metadata store when the machine asks, and runs one timer task that wakes the machine at
//! its next deadline.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use lakestream_service::state::{PutCondition, StateError as MetaError, StateStore, Version};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use super::machine::{Effect, GroupMachine, PersistFailed, Waiter};
use super::{GroupRecord, GroupView, Join, Joined, Synced, record_key};

/// The time on tokio's clock (paused in tests), as the machine takes it.
fn now() -> std::time::Instant {
    Instant::now().into_std()
}

/// A group's machine and the reply channels of the requests it holds.
#[derive(Debug)]
struct Driven {
    machine: GroupMachine,
    next_waiter: Waiter,
    joins: HashMap<Waiter, oneshot::Sender<Joined>>,
    syncs: HashMap<Waiter, oneshot::Sender<Synced>>,
}

impl Driven {
    fn hold_join(&mut self) -> (Waiter, oneshot::Receiver<Joined>) {
        let (sender, receiver) = oneshot::channel();
        let waiter = self.next_waiter;
        self.next_waiter += 1;
        self.joins.insert(waiter, sender);
        (waiter, receiver)
    }

    fn hold_sync(&mut self) -> (Waiter, oneshot::Receiver<Synced>) {
        let (sender, receiver) = oneshot::channel();
        let waiter = self.next_waiter;
        self.next_waiter += 1;
        self.syncs.insert(waiter, sender);
        (waiter, receiver)
    }
}

/// A group coordinated by this process.
#[derive(Debug)]
pub(crate) struct Group {
    pub id: String,
    /// The metadata-store session under which this process claimed the group.
    pub session_id: String,
    store: StateStore,
    state: tokio::sync::Mutex<Driven>,
    dead: AtomicBool,
    /// The machine's next deadline, which the timer task sleeps until.
    deadline: watch::Sender<Option<Instant>>,
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
        let machine = GroupMachine::new(record, initial_delay, now());
        let (deadline, deadlines) = watch::channel(machine.next_deadline().map(Instant::from_std));
        let group = Arc::new(Group {
            id,
            session_id,
            store,
            state: tokio::sync::Mutex::new(Driven {
                machine,
                next_waiter: 0,
                joins: HashMap::new(),
                syncs: HashMap::new(),
            }),
            dead: AtomicBool::new(false),
            deadline,
        });
        tokio::spawn(run_timer(Arc::downgrade(&group), deadlines));
        group
    }

    /// Whether this process gave the group up.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    /// Gives the group up: every waiting request is answered `NOT_COORDINATOR`.
    pub async fn unload(&self) {
        let mut st = self.state.lock().await;
        let effects = st.machine.give_up();
        self.apply(&mut st, effects).await;
    }

    /// A JoinGroup: answered at once (an error, a new member id, a member of a stable group
    /// with nothing new), or when the rebalance it waits for completes.
    pub async fn join(&self, join: Join, new_member_id: impl FnOnce() -> String) -> Joined {
        let member_id = join.member_id.clone();
        let receiver = {
            let mut st = self.state.lock().await;
            let (waiter, receiver) = st.hold_join();
            let effects = st.machine.join(join, waiter, new_member_id, now());
            self.apply(&mut st, effects).await;
            receiver
        };
        receiver.await.unwrap_or_else(|_| Joined::error(ResponseError::NotCoordinator, &member_id))
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
            let (waiter, receiver) = st.hold_sync();
            let effects =
                st.machine.sync(member_id, instance_id, generation, protocol, assignments, waiter, now());
            self.apply(&mut st, effects).await;
            receiver
        };
        receiver.await.unwrap_or_else(|_| Synced::error(ResponseError::NotCoordinator))
    }

    /// A Heartbeat: keeps the member alive; `REBALANCE_IN_PROGRESS` tells it to join again.
    pub async fn heartbeat(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), ResponseError> {
        let mut st = self.state.lock().await;
        let outcome = st.machine.heartbeat(member_id, instance_id, generation, now());
        self.apply(&mut st, Vec::new()).await;
        outcome
    }

    /// A LeaveGroup of one member (by member id, or by instance id when the id is empty).
    pub async fn leave(&self, member_id: &str, instance_id: Option<&str>) -> Result<(), ResponseError> {
        let mut st = self.state.lock().await;
        let (outcome, effects) = st.machine.leave(member_id, instance_id, now());
        self.apply(&mut st, effects).await;
        outcome
    }

    /// Whether an OffsetCommit may go ahead, and the generation to store it with (see
    /// [`GroupMachine::check_commit`]).
    pub async fn check_commit(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<i32, ResponseError> {
        let mut st = self.state.lock().await;
        let outcome = st.machine.check_commit(member_id, instance_id, generation, now());
        self.apply(&mut st, Vec::new()).await;
        outcome
    }

    /// The group as DescribeGroups shows it.
    pub async fn view(&self) -> GroupView {
        let mut st = self.state.lock().await;
        let view = st.machine.view(now());
        self.apply(&mut st, Vec::new()).await;
        view
    }

    /// The timer fired: the time passed to the machine.
    async fn tick(&self) {
        let mut st = self.state.lock().await;
        let effects = st.machine.tick(now());
        self.apply(&mut st, effects).await;
    }

    /// Carries the machine's effects out, in order (a write's outcome goes back to the
    /// machine before anything else, with the lock held), then arms the timer at its next
    /// deadline.
    async fn apply(&self, st: &mut Driven, effects: Vec<Effect>) {
        let mut queue = VecDeque::from(effects);
        while let Some(effect) = queue.pop_front() {
            match effect {
                Effect::Join(waiter, joined) => {
                    if let Some(reply) = st.joins.remove(&waiter) {
                        let _ = reply.send(joined);
                    }
                }
                Effect::Sync(waiter, synced) => {
                    if let Some(reply) = st.syncs.remove(&waiter) {
                        let _ = reply.send(synced);
                    }
                }
                Effect::Persist { record, version } => {
                    let outcome = self.persist(&record, version).await;
                    if outcome == Err(PersistFailed::Lost) {
                        tracing::warn!(group = %self.id, "the group's record changed elsewhere: another process coordinates it now");
                    }
                    for next in st.machine.persisted(outcome, now()).into_iter().rev() {
                        queue.push_front(next);
                    }
                }
            }
        }
        if st.machine.phase() == super::Phase::Dead {
            self.dead.store(true, Ordering::SeqCst);
        }
        let next = st.machine.next_deadline().map(Instant::from_std);
        self.deadline.send_if_modified(|armed| std::mem::replace(armed, next) != next);
    }

    /// Writes the group's record (compare-and-set on `version`).
    async fn persist(
        &self,
        record: &GroupRecord,
        version: Option<Version>,
    ) -> Result<Version, PersistFailed> {
        let value = serde_json::to_vec(record).map_err(|_| PersistFailed::Unknown)?;
        let condition = match version {
            Some(v) => PutCondition::IfVersion(v),
            None => PutCondition::IfAbsent,
        };
        match self.store.put(&record_key(&self.id), Bytes::from(value), condition).await {
            Ok(written) => Ok(written.version),
            Err(MetaError::VersionMismatch { .. } | MetaError::KeyExists { .. }) => Err(PersistFailed::Lost),
            Err(e) => {
                // The outcome is unknown: the generation cannot be trusted any more; give the
                // group up, and the next request claims it again from the store.
                tracing::warn!(group = %self.id, error = %e, "writing the group's record failed");
                Err(PersistFailed::Unknown)
            }
        }
    }
}

/// Wakes the group at each deadline it arms, until it is dropped or given up.
async fn run_timer(group: Weak<Group>, mut deadlines: watch::Receiver<Option<Instant>>) {
    loop {
        let next = *deadlines.borrow_and_update();
        let fired = match next {
            Some(at) => tokio::select! {
                () = tokio::time::sleep_until(at) => true,
                changed = deadlines.changed() => match changed {
                    Ok(()) => false,
                    Err(_) => return, // the group was dropped
                },
            },
            None => match deadlines.changed().await {
                Ok(()) => false,
                Err(_) => return,
            },
        };
        if fired {
            let Some(group) = group.upgrade() else { return };
            if group.is_dead() {
                return;
            }
            group.tick().await;
        }
    }
}

/// The driver over a real (in-memory) metadata store, on tokio's paused clock: the timer
/// fires at the machine's deadlines, and time moves only when every task waits.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::{Phase, record_key};
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

    /// The generation in the group's record.
    async fn recorded_generation(meta: &StateStore) -> i32 {
        let record = meta.get(&record_key("g")).await.unwrap().expect("a record");
        serde_json::from_slice::<GroupRecord>(&record.value).unwrap().generation
    }

    #[tokio::test(start_paused = true)]
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

    #[tokio::test(start_paused = true)]
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
        assert!(!b_sync.is_finished());
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

    #[tokio::test(start_paused = true)]
    async fn members_joining_together_share_the_first_generation() {
        let meta: StateStore = memory_store();
        // A delay long enough for both to join before the first generation completes.
        let g = Group::start("g".into(), "s".into(), meta, Duration::from_millis(300), None);
        let started = Instant::now();
        let a = g.join(join("", &[("range", "a")]), || "a".into()).await.member_id;
        let b = g.join(join("", &[("range", "b")]), || "b".into()).await.member_id;
        let (g1, g2) = (g.clone(), g.clone());
        let a = tokio::spawn(async move { g1.join(join(&a, &[("range", "a")]), || unreachable!()).await });
        let b = tokio::spawn(async move { g2.join(join(&b, &[("range", "b")]), || unreachable!()).await });
        let (a, b) = (a.await.unwrap(), b.await.unwrap());
        assert_eq!((a.error, b.error), (0, 0));
        assert_eq!((a.generation, b.generation), (1, 1));
        assert_eq!(a.members.len() + b.members.len(), 2, "the leader gets both members");
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(300),
            "completed by the timer at the delay's end"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_member_whose_session_times_out_is_removed_when_it_does() {
        let meta: StateStore = memory_store();
        let g = Group::start("g".into(), "s".into(), meta.clone(), Duration::ZERO, None);
        let mut j = join("", &[("range", "a")]);
        j.session_timeout = Duration::from_millis(300);
        let id = g.join(j.clone(), || "a".into()).await.member_id;
        j.member_id = id;
        assert_eq!(g.join(j, || unreachable!()).await.generation, 1);
        tokio::time::sleep(Duration::from_millis(299)).await;
        assert_eq!(g.view().await.members.len(), 1, "not yet");
        // Past the deadline (at it, this task and the timer's wake at once, in either order).
        tokio::time::sleep(Duration::from_millis(2)).await;
        // The timer removed it; the group, empty, is at a new generation.
        let view = g.view().await;
        assert_eq!((view.phase, view.members.len(), view.generation), (Phase::Empty, 0, 2));
        assert_eq!(recorded_generation(&meta).await, 2);
        assert_eq!(g.heartbeat("a", None, 1).await, Err(ResponseError::UnknownMemberId));
    }

    #[tokio::test(start_paused = true)]
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

    #[tokio::test(start_paused = true)]
    async fn unloading_answers_a_waiting_join_not_coordinator() {
        let meta: StateStore = memory_store();
        let g = Group::start("g".into(), "s".into(), meta, Duration::from_secs(3), None);
        let id = g.join(join("", &[("range", "a")]), || "a".into()).await.member_id;
        let g2 = g.clone();
        let waiting =
            tokio::spawn(async move { g2.join(join(&id, &[("range", "a")]), || unreachable!()).await });
        tokio::task::yield_now().await;
        g.unload().await;
        assert_eq!(waiting.await.unwrap().error, ResponseError::NotCoordinator.code());
        assert!(g.is_dead());
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_empty_group_unloads_itself_and_its_timer_stops() {
        let g = group();
        tokio::time::sleep(crate::group::machine::IDLE_UNLOAD - Duration::from_millis(1)).await;
        assert!(!g.is_dead());
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(g.is_dead(), "given up by its timer");
        // A dropped group's timer task ends with it.
        let weak = Arc::downgrade(&g);
        drop(g);
        tokio::task::yield_now().await;
        assert!(weak.upgrade().is_none());
    }
}
