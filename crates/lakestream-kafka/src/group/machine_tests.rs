//! The group state machine, driven directly: events at chosen instants, effects checked.
//! The harness applies effects as the driver does and checks after every step that each
//! request handed to the machine is answered exactly once (or still held), and after every
//! tick that the next deadline lies ahead.

use std::collections::{BTreeSet, HashMap};

use super::*;

const SESSION: Duration = Duration::from_secs(10);
const REBALANCE: Duration = Duration::from_secs(30);

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn join_req(member_id: &str, protocols: &[(&str, &str)]) -> Join {
    Join {
        member_id: member_id.to_owned(),
        instance_id: None,
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout: SESSION,
        rebalance_timeout: REBALANCE,
        protocol_type: "consumer".into(),
        protocols: protocols.iter().map(|(n, m)| (n.to_string(), Bytes::from(m.to_string()))).collect(),
        require_known_member_id: true,
    }
}

fn range(member: &str) -> Join {
    join_req(member, &[("range", member)])
}

/// A machine and a driver of it without I/O.
struct Harness {
    m: GroupMachine,
    t0: Instant,
    now: Instant,
    next_waiter: Waiter,
    /// Waiters handed to the machine and not answered yet.
    outstanding: BTreeSet<Waiter>,
    joins: HashMap<Waiter, Joined>,
    syncs: HashMap<Waiter, Synced>,
    /// Every record written, in order.
    records: Vec<GroupRecord>,
    /// How the next write fails (`None`: it succeeds).
    fail_next_write: Option<PersistFailed>,
}

impl Harness {
    fn new(initial_delay: Duration) -> Self {
        let t0 = Instant::now();
        Harness {
            m: GroupMachine::new(None, initial_delay, t0),
            t0,
            now: t0,
            next_waiter: 0,
            outstanding: BTreeSet::new(),
            joins: HashMap::new(),
            syncs: HashMap::new(),
            records: Vec::new(),
            fail_next_write: None,
        }
    }

    /// Moves the clock to `since_start` after the start.
    fn at(&mut self, since_start: Duration) -> &mut Self {
        assert!(self.t0 + since_start >= self.now, "time goes forward");
        self.now = self.t0 + since_start;
        self
    }

    fn waiter(&mut self) -> Waiter {
        self.next_waiter += 1;
        self.outstanding.insert(self.next_waiter);
        self.next_waiter
    }

    fn apply(&mut self, effects: Vec<Effect>) {
        let mut queue = std::collections::VecDeque::from(effects);
        while let Some(effect) = queue.pop_front() {
            match effect {
                Effect::Join(w, joined) => {
                    assert!(self.outstanding.remove(&w), "join waiter {w} answered twice or never given");
                    self.joins.insert(w, joined);
                }
                Effect::Sync(w, synced) => {
                    assert!(self.outstanding.remove(&w), "sync waiter {w} answered twice or never given");
                    self.syncs.insert(w, synced);
                }
                Effect::Persist { record, version } => {
                    assert_eq!(version, self.records.len().checked_sub(1).map(|v| v as Version));
                    assert_eq!(self.m.next_deadline(), None, "no timer while the record is written");
                    self.records.push(record);
                    let outcome = match self.fail_next_write.take() {
                        Some(failed) => Err(failed),
                        None => Ok((self.records.len() - 1) as Version),
                    };
                    let more = self.m.persisted(outcome, self.now);
                    for e in more.into_iter().rev() {
                        queue.push_front(e);
                    }
                }
            }
        }
        let held: BTreeSet<Waiter> = self.m.held_waiters().into_iter().collect();
        assert_eq!(held, self.outstanding, "every waiter is held or answered once");
    }

    /// A JoinGroup; a member without an id gets `new_id`.
    fn join_as(&mut self, join: Join, new_id: &str) -> Waiter {
        let w = self.waiter();
        let new_id = new_id.to_owned();
        let effects = self.m.join(join, w, move || new_id, self.now);
        self.apply(effects);
        w
    }

    fn join(&mut self, join: Join) -> Waiter {
        self.join_as(join, "unused")
    }

    /// The answer to a JoinGroup, which must have come.
    fn joined(&self, w: Waiter) -> &Joined {
        self.joins.get(&w).unwrap_or_else(|| panic!("join {w} is not answered"))
    }

    /// A new member: its id (whatever `join` names), then its join with it (held until the
    /// rebalance completes).
    fn new_member(&mut self, id: &str, join: Join) -> Waiter {
        let first = self.join_as(Join { member_id: String::new(), ..join.clone() }, id);
        assert_eq!(
            (self.joined(first).error, self.joined(first).member_id.as_str()),
            (ResponseError::MemberIdRequired.code(), id)
        );
        self.join(Join { member_id: id.to_owned(), ..join })
    }

    fn sync(&mut self, member: &str, generation: i32, assignments: &[(&str, &str)]) -> Waiter {
        let w = self.waiter();
        let assignments =
            assignments.iter().map(|(id, a)| (id.to_string(), Bytes::from(a.to_string()))).collect();
        let effects = self.m.sync(member, None, generation, (None, None), assignments, w, self.now);
        self.apply(effects);
        w
    }

    fn synced(&self, w: Waiter) -> &Synced {
        self.syncs.get(&w).unwrap_or_else(|| panic!("sync {w} is not answered"))
    }

    fn heartbeat(&mut self, member: &str, generation: i32) -> Result<(), ResponseError> {
        let outcome = self.m.heartbeat(member, None, generation, self.now);
        self.apply(Vec::new());
        outcome
    }

    fn leave(&mut self, member: &str, instance: Option<&str>) -> Result<(), ResponseError> {
        let (outcome, effects) = self.m.leave(member, instance, self.now);
        self.apply(effects);
        outcome
    }

    fn commit(&mut self, member: &str, generation: i32) -> Result<i32, ResponseError> {
        let outcome = self.m.check_commit(member, None, generation, self.now);
        self.apply(Vec::new());
        outcome
    }

    fn tick(&mut self) {
        let effects = self.m.tick(self.now);
        self.apply(effects);
        if let Some(next) = self.m.next_deadline() {
            assert!(next > self.now, "a deadline at or before the tick that handled it");
        }
    }

    /// The next deadline, after the start.
    fn deadline(&self) -> Option<Duration> {
        self.m.next_deadline().map(|at| at - self.t0)
    }

    fn phase(&mut self) -> Phase {
        self.m.phase()
    }

    /// A group with `a` alone, stable in generation 1.
    fn stable_with_a() -> Self {
        let mut h = Harness::new(Duration::ZERO);
        let a = h.new_member("a", range("a"));
        assert_eq!(h.joined(a).generation, 1);
        let s = h.sync("a", 1, &[("a", "pa")]);
        assert_eq!(h.synced(s).error, 0);
        h
    }
}

#[test]
fn a_new_member_gets_its_id_then_leads_generation_1() {
    let mut h = Harness::new(Duration::ZERO);
    let first = h.join_as(range(""), "m-1");
    assert_eq!(h.joined(first).error, ResponseError::MemberIdRequired.code());
    assert_eq!(h.joined(first).member_id, "m-1");
    assert!(h.records.is_empty(), "an id handed out changes no generation");
    let joined = h.join(range("m-1"));
    let joined = h.joined(joined).clone();
    assert_eq!((joined.error, joined.generation, joined.leader.as_str()), (0, 1, "m-1"));
    assert_eq!(
        (joined.protocol_type.as_deref(), joined.protocol.as_deref()),
        (Some("consumer"), Some("range"))
    );
    assert_eq!(joined.members, [("m-1".to_owned(), None, Bytes::from("m-1"))]);
    assert_eq!(
        h.records,
        [GroupRecord {
            v: 1,
            generation: 1,
            protocol_type: Some("consumer".into()),
            protocol: Some("range".into()),
            state: "Stable".into(),
            members: 1,
        }]
    );
    assert_eq!(h.phase(), Phase::CompletingRebalance);
    let synced = h.sync("m-1", 1, &[("m-1", "a1")]);
    assert_eq!((h.synced(synced).error, &h.synced(synced).assignment[..]), (0, &b"a1"[..]));
    assert_eq!(h.phase(), Phase::Stable);
    assert_eq!(h.heartbeat("m-1", 1), Ok(()));
    assert_eq!(h.heartbeat("m-1", 0), Err(ResponseError::IllegalGeneration));
    assert_eq!(h.heartbeat("nobody", 1), Err(ResponseError::UnknownMemberId));
    let unknown = h.join(range("m-9"));
    assert_eq!(h.joined(unknown).error, ResponseError::UnknownMemberId.code());
    let view = h.m.view(h.now);
    assert_eq!(
        (view.phase, view.protocol.as_str(), &view.members[0].assignment[..]),
        (Phase::Stable, "range", &b"a1"[..])
    );
}

#[test]
fn a_join_rebalances_a_stable_group_and_fences_the_old_generation() {
    let mut h = Harness::new(Duration::ZERO);
    let a_protocols = [("range", "a"), ("roundrobin", "a")];
    let a = h.new_member("a", join_req("", &a_protocols));
    assert_eq!(h.joined(a).generation, 1);
    let synced = h.sync("a", 1, &[]);
    assert_eq!(h.synced(synced).error, 0);
    // B joins (supports only roundrobin): the group prepares a rebalance, A learns of it.
    let b = h.new_member("b", join_req("", &[("roundrobin", "b")]));
    assert!(!h.joins.contains_key(&b), "held until A joins again");
    assert_eq!(h.phase(), Phase::PreparingRebalance);
    assert_eq!(h.heartbeat("a", 1), Err(ResponseError::RebalanceInProgress));
    let early = h.sync("a", 1, &[]);
    assert_eq!(h.synced(early).error, ResponseError::RebalanceInProgress.code());
    let a = h.join(join_req("a", &a_protocols));
    let (a, b) = (h.joined(a).clone(), h.joined(b).clone());
    assert_eq!((a.generation, b.generation), (2, 2));
    assert_eq!(a.protocol.as_deref(), Some("roundrobin"), "the one protocol both support");
    assert_eq!((a.leader.as_str(), a.members.len(), b.members.len()), ("a", 2, 0));
    assert_eq!(h.records.last().map(|r| (r.generation, r.members)), Some((2, 2)));
    // B's sync waits for the leader's; commits wait for the assignments too.
    let b_sync = h.sync("b", 2, &[]);
    assert!(!h.syncs.contains_key(&b_sync));
    assert_eq!(h.commit("b", 2), Err(ResponseError::RebalanceInProgress));
    let a_sync = h.sync("a", 2, &[("a", "pa"), ("b", "pb")]);
    assert_eq!(
        (&h.synced(a_sync).assignment[..], &h.synced(b_sync).assignment[..]),
        (&b"pa"[..], &b"pb"[..])
    );
    assert_eq!(h.commit("b", 2), Ok(2));
    // The old generation is fenced everywhere.
    assert_eq!(h.commit("b", 1), Err(ResponseError::IllegalGeneration));
    assert_eq!(h.heartbeat("a", 1), Err(ResponseError::IllegalGeneration));
    let stale = h.sync("a", 1, &[]);
    assert_eq!(h.synced(stale).error, ResponseError::IllegalGeneration.code());
    // A commit without membership goes only into a group without members.
    assert_eq!(h.commit("", -1), Err(ResponseError::UnknownMemberId));
    // A member with a protocol no one else supports is refused.
    let c = h.join(join_req("", &[("sticky", "c")]));
    assert_eq!(h.joined(c).error, ResponseError::InconsistentGroupProtocol.code());
    let other_type = h.join(Join { protocol_type: "connect".into(), ..range("") });
    assert_eq!(h.joined(other_type).error, ResponseError::InconsistentGroupProtocol.code());
}

#[test]
fn an_unchanged_follower_rejoining_gets_the_current_generation_without_a_rebalance() {
    let mut h = Harness::stable_with_a();
    let b = h.new_member("b", range("b"));
    let a = h.join(range("a"));
    assert_eq!((h.joined(a).generation, h.joined(b).generation), (2, 2));
    h.sync("b", 2, &[]);
    h.sync("a", 2, &[("a", "pa"), ("b", "pb")]);
    let writes = h.records.len();
    let again = h.join(range("b"));
    assert_eq!((h.joined(again).error, h.joined(again).generation), (0, 2));
    assert_eq!((h.records.len(), h.phase()), (writes, Phase::Stable));
    // New metadata, or the leader rejoining, rebalances.
    h.join(join_req("b", &[("range", "b2")]));
    assert_eq!(h.phase(), Phase::PreparingRebalance);
}

#[test]
fn a_second_join_of_a_member_replaces_its_held_one() {
    let mut h = Harness::new(ms(3_000));
    let first = h.new_member("a", range("a"));
    let second = h.join(range("a"));
    assert_eq!(h.joined(first).error, ResponseError::RebalanceInProgress.code());
    h.at(ms(3_000)).tick();
    assert_eq!((h.joined(second).error, h.joined(second).generation), (0, 1));
}

#[test]
fn leaving_rebalances_and_the_last_member_leaves_an_empty_group_at_a_new_generation() {
    let mut h = Harness::stable_with_a();
    let b = h.new_member("b", range("b"));
    h.join(range("a"));
    assert_eq!(h.joined(b).generation, 2);
    assert_eq!(h.leave("b", None), Ok(()));
    assert_eq!(h.phase(), Phase::PreparingRebalance, "A has not joined again");
    assert_eq!(h.heartbeat("a", 2), Err(ResponseError::RebalanceInProgress));
    let a = h.join(range("a"));
    assert_eq!((h.joined(a).generation, h.joined(a).members.len()), (3, 1));
    assert_eq!(h.leave("b", None), Err(ResponseError::UnknownMemberId));
    assert_eq!(h.leave("a", None), Ok(()));
    assert_eq!(h.phase(), Phase::Empty);
    assert_eq!(h.records.last().map(|r| (r.generation, r.state.as_str(), r.members)), Some((4, "Empty", 0)));
    assert_eq!(h.commit("", -1), Ok(4), "a commit without membership into an empty group");
    assert_eq!(h.m.view(h.now).members.len(), 0);
}

#[test]
fn a_session_times_out_at_its_deadline_and_the_group_rebalances() {
    let mut h = Harness::stable_with_a();
    let b = h.new_member("b", range("b"));
    h.at(ms(1_000));
    h.join(range("a"));
    assert_eq!(h.joined(b).generation, 2);
    // Sessions run from the completed join (at 1 s): both time out at 11 s.
    assert_eq!(h.deadline(), Some(ms(11_000)));
    h.sync("b", 2, &[]);
    h.sync("a", 2, &[]);
    h.at(ms(6_000));
    assert_eq!(h.heartbeat("b", 2), Ok(()));
    assert_eq!(h.deadline(), Some(ms(11_000)), "A's session");
    h.at(ms(10_999)).tick();
    assert_eq!(h.phase(), Phase::Stable, "not yet");
    h.at(ms(11_000)).tick();
    assert_eq!(h.phase(), Phase::PreparingRebalance);
    assert_eq!(h.heartbeat("a", 2), Err(ResponseError::UnknownMemberId));
    assert_eq!(h.heartbeat("b", 2), Err(ResponseError::RebalanceInProgress));
    let b = h.join(range("b"));
    assert_eq!((h.joined(b).generation, h.joined(b).leader.as_str(), h.joined(b).members.len()), (3, "b", 1));
    // B alone, its session then times out: the group is empty.
    h.sync("b", 3, &[]);
    assert_eq!(h.deadline(), Some(ms(21_000)));
    h.at(ms(21_000)).tick();
    assert_eq!(h.phase(), Phase::Empty);
    assert_eq!(h.records.last().map(|r| r.generation), Some(4));
}

#[test]
fn a_follower_waiting_for_assignments_whose_session_times_out_is_answered_unknown_member() {
    let mut h = Harness::stable_with_a();
    let b = h.new_member("b", range("b"));
    h.join(range("a"));
    assert_eq!(h.joined(b).generation, 2);
    let waiting = h.sync("b", 2, &[]);
    h.at(SESSION).tick();
    assert_eq!(h.synced(waiting).error, ResponseError::UnknownMemberId.code());
}

#[test]
fn members_that_do_not_rejoin_within_the_rebalance_timeout_are_removed() {
    let mut h = Harness::new(Duration::ZERO);
    let long = |member: &str| Join { session_timeout: ms(45_000), ..range(member) };
    h.new_member("a", long(""));
    h.sync("a", 1, &[]);
    let b = h.new_member("b", long(""));
    h.join(long("a"));
    assert_eq!(h.joined(b).generation, 2);
    h.sync("b", 2, &[]);
    h.sync("a", 2, &[]);
    h.at(ms(1_000));
    let c = h.new_member("c", long(""));
    let a = h.join(long("a"));
    // B does not join again: the rebalance waits the longest rebalance timeout, 30 s.
    assert_eq!(h.deadline(), Some(ms(31_000)));
    h.at(ms(30_999)).tick();
    assert!(!h.joins.contains_key(&c));
    h.at(ms(31_000)).tick();
    let (a, c) = (h.joined(a).clone(), h.joined(c).clone());
    assert_eq!((a.generation, c.generation, a.leader.as_str(), a.members.len()), (3, 3, "a", 2));
    assert_eq!(h.heartbeat("b", 2), Err(ResponseError::UnknownMemberId));
}

#[test]
fn the_first_rebalance_waits_the_initial_delay_which_each_new_member_extends() {
    let mut h = Harness::new(ms(3_000));
    let a = h.new_member("a", range("a"));
    assert_eq!(h.deadline(), Some(ms(3_000)));
    h.at(ms(2_000));
    let b = h.new_member("b", range("b"));
    assert_eq!(h.deadline(), Some(ms(5_000)), "the delay starts again");
    h.at(ms(3_000)).tick();
    assert!(!h.joins.contains_key(&a));
    h.at(ms(5_000)).tick();
    let (a, b) = (h.joined(a).clone(), h.joined(b).clone());
    assert_eq!((a.generation, b.generation, a.leader.as_str()), (1, 1, "a"));
    assert_eq!(a.members.len() + b.members.len(), 2, "the leader gets both members");
}

#[test]
fn a_member_id_handed_out_holds_the_rebalance_until_used_or_expired() {
    let mut h = Harness::stable_with_a();
    h.at(ms(1_000));
    let x = h.join_as(range(""), "x");
    assert_eq!(h.joined(x).error, ResponseError::MemberIdRequired.code());
    // Another member joining starts a rebalance, which waits for X to use its id.
    h.new_member("b", range("b"));
    let a = h.join(range("a"));
    assert!(!h.joins.contains_key(&a));
    assert_eq!(h.deadline(), Some(ms(11_000)), "X's id expires after a session timeout");
    h.at(ms(11_000)).tick();
    assert_eq!(h.joined(a).generation, 2);
    let late = h.join(range("x"));
    assert_eq!(h.joined(late).error, ResponseError::UnknownMemberId.code());
}

#[test]
fn a_static_member_replaces_its_instance_and_fences_the_old_member() {
    let statik = |member: &str| Join { instance_id: Some("i1".into()), ..range(member) };
    let mut h = Harness::new(ms(3_000));
    // An instance id needs no MEMBER_ID_REQUIRED round.
    let first = h.join_as(statik(""), "s-1");
    assert!(!h.joins.contains_key(&first), "held by the initial delay");
    h.at(ms(1_000));
    let second = h.join_as(statik(""), "s-2");
    assert_eq!(h.joined(first).error, ResponseError::FencedInstanceId.code());
    h.at(ms(4_000)).tick();
    let joined = h.joined(second).clone();
    assert_eq!((joined.generation, joined.leader.as_str()), (1, "s-2"));
    assert_eq!(joined.members, [("s-2".to_owned(), Some("i1".to_owned()), Bytes::from(""))]);
    h.sync("s-2", 1, &[]);
    assert_eq!(h.m.heartbeat("s-1", Some("i1"), 1, h.now), Err(ResponseError::FencedInstanceId));
    assert_eq!(h.m.heartbeat("s-2", Some("i2"), 1, h.now), Err(ResponseError::FencedInstanceId));
    assert_eq!(h.m.heartbeat("s-2", Some("i1"), 1, h.now), Ok(()));
    assert_eq!(h.leave("s-2", Some("i2")), Err(ResponseError::FencedInstanceId));
    assert_eq!(h.leave("", Some("nobody")), Err(ResponseError::UnknownMemberId));
    // Leaving by instance id alone.
    assert_eq!(h.leave("", Some("i1")), Ok(()));
    assert_eq!((h.phase(), h.records.last().map(|r| r.generation)), (Phase::Empty, Some(2)));
}

#[test]
fn a_record_write_lost_to_another_process_gives_the_group_up() {
    let mut h = Harness::new(Duration::ZERO);
    h.fail_next_write = Some(PersistFailed::Lost);
    let a = h.new_member("a", range("a"));
    assert_eq!(h.joined(a).error, ResponseError::NotCoordinator.code());
    assert_eq!((h.phase(), h.deadline()), (Phase::Dead, None));
    assert_eq!(h.heartbeat("a", 1), Err(ResponseError::NotCoordinator));
    assert_eq!(h.leave("a", None), Err(ResponseError::NotCoordinator));
    assert_eq!(h.commit("", -1), Err(ResponseError::NotCoordinator));
    let again = h.join(range("a"));
    assert_eq!(h.joined(again).error, ResponseError::NotCoordinator.code());
    h.at(ms(3_600_000)).tick();
    assert_eq!(h.records.len(), 1, "nothing written after");
}

#[test]
fn an_unknown_write_outcome_gives_the_group_up_too() {
    let mut h = Harness::stable_with_a();
    h.fail_next_write = Some(PersistFailed::Unknown);
    let b = h.new_member("b", range("b"));
    h.join(range("a"));
    assert_eq!(h.joined(b).error, ResponseError::NotCoordinator.code());
    assert_eq!(h.phase(), Phase::Dead);
}

#[test]
fn giving_up_answers_every_held_request_not_coordinator() {
    let mut h = Harness::stable_with_a();
    let b = h.new_member("b", range("b"));
    h.join(range("a"));
    let waiting_sync = h.sync("b", 2, &[]);
    let mut with_delay = Harness::new(ms(3_000));
    let waiting_join = with_delay.new_member("c", range("c"));
    for h in [&mut h, &mut with_delay] {
        let effects = h.m.give_up();
        h.apply(effects);
        assert_eq!((h.phase(), h.deadline()), (Phase::Dead, None));
    }
    assert_eq!(h.joined(b).generation, 2);
    assert_eq!(h.synced(waiting_sync).error, ResponseError::NotCoordinator.code());
    assert_eq!(with_delay.joined(waiting_join).error, ResponseError::NotCoordinator.code());
}

#[test]
fn an_empty_group_is_given_up_after_five_idle_minutes() {
    let mut h = Harness::new(Duration::ZERO);
    assert_eq!(h.deadline(), Some(IDLE_UNLOAD));
    h.at(ms(100_000));
    h.m.view(h.now);
    assert_eq!(h.deadline(), Some(IDLE_UNLOAD + ms(100_000)), "each request starts it again");
    h.at(IDLE_UNLOAD + ms(99_999)).tick();
    assert_eq!(h.phase(), Phase::Empty);
    h.at(IDLE_UNLOAD + ms(100_000)).tick();
    assert_eq!(h.phase(), Phase::Dead);
    // A member id handed out keeps a group loaded until it expires.
    let mut h = Harness::new(Duration::ZERO);
    h.join_as(range(""), "x");
    assert_eq!(h.deadline(), Some(SESSION));
    h.at(SESSION).tick();
    assert_eq!((h.phase(), h.deadline()), (Phase::Empty, Some(IDLE_UNLOAD)));
}

#[test]
fn a_group_continues_from_its_record() {
    let record =
        GroupRecord { v: 1, generation: 7, protocol_type: Some("consumer".into()), ..GroupRecord::default() };
    let now = Instant::now();
    let mut m = GroupMachine::new(Some((record, 41)), Duration::ZERO, now);
    assert_eq!(m.check_commit("", None, -1, now), Ok(7));
    let fx = m.join(range(""), 1, || "a".into(), now);
    assert!(matches!(&fx[..], [Effect::Join(1, j)] if j.error == ResponseError::MemberIdRequired.code()));
    let fx = m.join(range("a"), 2, || unreachable!(), now);
    let [Effect::Persist { record, version }] = &fx[..] else { panic!("{fx:?}") };
    assert_eq!((record.generation, *version), (8, Some(41)), "the next generation, over the record read");
}
