//! A1: the write leases a writer holds, one per log, all backed by one metadata-store
//! session. When the session ends every lease is lost; the next append opens a new session
//! and acquires a new lease.
//!
//! A lease no pending entry uses is released once it has been idle for
//! `lease_idle_release`: deleting a log waits until no lease record of it remains, so a
//! writer that kept every lease until it closed would block every deletion of a log it
//! ever wrote. The next append to the log acquires a new lease (and checks the fence again).
//!
//! A sparse log, appended to a little less often than `lease_idle_release`, would pay a lease
//! acquisition and a release (three metadata operations) per append. So a log whose lease is
//! acquired again soon after an idle release keeps its next lease longer: its idle period
//! doubles, up to [`MAX_IDLE_FACTOR`] × `lease_idle_release` (20 s with the default 5 s,
//! below the 30 s a log deletion waits for leases to go). The writer remembers a released log
//! for twice that long (about 80 bytes each), then forgets it.
//!
//! A lease record is never deleted while a change started under it may still land (spec: "MUST
//! NOT delete a lease record before every change it started under that lease has completed").
//! A change whose outcome is unknown (a timeout, a broken connection) *pins* its lease: no
//! release touches it. Every idle-release round then re-reads what the change would have
//! written ([`Unsettled`]): an index put is known once its record is found (its value names its
//! WAL object, so it is unique), a conditional trim-marker write once the marker has moved past
//! the version it expected (it can then never apply). A known outcome unpins the lease, and it
//! is released as any other. A change still unknown a session timeout after it failed may be
//! gone or may still be in the store's pipeline, and no read can tell; its lease is never
//! deleted, its session is *retired* instead: new leases go to a fresh session (each log's next
//! append acquires one there), and once no lease of the retired session is in use, the writer
//! closes it, which removes its lease records — the end the spec allows a lease record ("If the
//! session that created the lease record ends, the store removes the record").

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use lakestream_format::LogId;
use lakestream_meta::lease::{self, LeaseError, TokenSource, WriteLease};
use lakestream_meta::{MetaStore, Session};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::error::AppendError;

/// A lease as appends see it: valid while its session has not ended.
#[derive(Debug, Clone)]
pub(crate) struct HeldLease {
    lease: Arc<WriteLease>,
}

impl HeldLease {
    /// Whether the session behind the lease has ended (the lease record is gone).
    pub(crate) fn is_lost(&self) -> bool {
        *self.lease.session_ended().borrow()
    }

    /// Whether two handles are the same lease.
    pub(crate) fn same_lease(&self, other: &HeldLease) -> bool {
        Arc::ptr_eq(&self.lease, &other.lease)
    }
}

/// A change whose outcome is unknown, and how a read can learn it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unsettled {
    /// An index put of `log_id` with this value: known once a record of the log holds it.
    IndexPut {
        /// The log.
        log_id: LogId,
        /// The record's value (a RAW value names its WAL object, so no other record has it).
        value: bytes::Bytes,
    },
    /// A conditional write of `log_id`'s trim marker that expected this version (`None`: a
    /// create): known once the marker has another version (or, for a create, exists).
    TrimMarker {
        /// The log.
        log_id: LogId,
        /// The version the write was conditioned on.
        expected: Option<lakestream_meta::Version>,
    },
}

/// A pinned lease: the change under it, and when it failed.
#[derive(Debug)]
struct Pinned {
    lease: Arc<WriteLease>,
    change: Unsettled,
    since: Instant,
}

/// A session that takes no new lease because a change under one of its leases has an unknown
/// outcome; it is closed once none of `leases` (those of its leases taken out of use) is in
/// use and no slot holds one of its leases.
#[derive(Debug)]
struct Retiring {
    session: Arc<dyn Session>,
    leases: Vec<Arc<WriteLease>>,
}

fn same_session(a: &Arc<dyn Session>, b: &Arc<dyn Session>) -> bool {
    Arc::ptr_eq(a, b) || a.id() == b.id()
}

/// The longest idle period a churning log's lease gets, in multiples of `lease_idle_release`.
pub(crate) const MAX_IDLE_FACTOR: u32 = 4;

/// A log's lease slot: its own lock, so that acquiring one log's lease (two metadata round
/// trips) never holds back appends to other logs.
type Slot = Arc<Mutex<Option<Held>>>;

#[derive(Debug)]
struct Held {
    lease: Arc<WriteLease>,
    last_used: Instant,
    /// How long the lease may sit unused before it is released.
    idle_after: Duration,
}

/// A log whose lease was released for being idle: when, and the idle period it had.
#[derive(Debug, Clone, Copy)]
struct Released {
    at: Instant,
    idle_after: Duration,
}

/// The writer's leases. Memory per leased log: one map entry and slot with the lease's token
/// and keys, about half a KiB; a log's entry goes when its lease is released (after
/// `lease_idle_release` unused), so idle logs cost nothing.
#[derive(Debug)]
pub(crate) struct Leases {
    store: Arc<dyn MetaStore>,
    tokens: Arc<dyn TokenSource>,
    session_timeout: Duration,
    /// The session behind every lease; locked only to read it or, once, to open it.
    session: Mutex<Option<Arc<dyn Session>>>,
    /// Held briefly, never across an await.
    slots: std::sync::Mutex<HashMap<LogId, Slot>>,
    /// `lease_idle_release`.
    idle: Duration,
    /// Logs released for being idle in the last 2 × [`MAX_IDLE_FACTOR`] idle periods. Held
    /// briefly, never across an await.
    released: std::sync::Mutex<HashMap<LogId, Released>>,
    /// Leases acquired since the writer started (for tests and metrics).
    acquisitions: std::sync::atomic::AtomicU64,
    /// Leases under which a change has an unknown outcome. Held briefly, never across an
    /// await.
    pinned: std::sync::Mutex<Vec<Pinned>>,
    /// Sessions being retired because a change under one of their leases may still land.
    /// Held briefly, never across an await.
    retiring: std::sync::Mutex<Vec<Retiring>>,
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn lock_slots(
    slots: &std::sync::Mutex<HashMap<LogId, Slot>>,
) -> std::sync::MutexGuard<'_, HashMap<LogId, Slot>> {
    slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Leases {
    pub(crate) fn new(
        store: Arc<dyn MetaStore>,
        tokens: Arc<dyn TokenSource>,
        session_timeout: Duration,
        idle: Duration,
    ) -> Self {
        Leases {
            store,
            tokens,
            session_timeout,
            session: Mutex::new(None),
            slots: std::sync::Mutex::default(),
            idle,
            released: std::sync::Mutex::default(),
            acquisitions: std::sync::atomic::AtomicU64::new(0),
            pinned: std::sync::Mutex::default(),
            retiring: std::sync::Mutex::default(),
        }
    }

    /// Whether `session` is being retired.
    fn is_retiring(&self, session: &Arc<dyn Session>) -> bool {
        lock(&self.retiring).iter().any(|r| same_session(&r.session, session))
    }

    /// Keeps `lease` out of reach of every release: `change`, started under it, has an
    /// unknown outcome and may still land. Each idle-release round re-reads it
    /// ([`Leases::settle_pinned`]).
    pub(crate) fn pin_unsettled(&self, lease: &HeldLease, change: Unsettled) {
        if lease.lease.session().is_ended() {
            return; // its records are gone with it
        }
        tracing::warn!(
            log_id = %lease.lease.log_id(),
            ?change,
            "a change under this write lease has an unknown outcome: the lease is kept until a read shows the outcome"
        );
        lock(&self.pinned).push(Pinned { lease: lease.lease.clone(), change, since: Instant::now() });
    }

    /// The leases pinned now (for tests and metrics).
    pub(crate) fn pinned_count(&self) -> usize {
        lock(&self.pinned).len()
    }

    /// Whether a read shows the outcome of `change`.
    async fn outcome_known(&self, change: &Unsettled) -> Result<bool, lakestream_meta::MetaError> {
        use lakestream_format::keys;
        match change {
            Unsettled::IndexPut { log_id, value } => {
                // The log's records, page by page: rare (only after an unknown outcome), and a
                // log keeps few records once compacted.
                const PAGE: usize = 256;
                let partition = keys::partition(*log_id);
                let end = keys::last_key(*log_id);
                let mut from = keys::first_key(*log_id);
                loop {
                    let page = self.store.scan(&partition, &from, &end, Some(PAGE)).await?;
                    if page.iter().any(|r| keys::is_index_key_of(&r.key, *log_id) && r.value == *value) {
                        return Ok(true);
                    }
                    match page.last() {
                        Some(last) if page.len() == PAGE => from = format!("{}\u{0}", last.key),
                        _ => return Ok(false),
                    }
                }
            }
            Unsettled::TrimMarker { log_id, expected } => {
                let marker =
                    self.store.get(&keys::partition(*log_id), &keys::trim_marker_key(*log_id)).await?;
                Ok(match (marker, expected) {
                    (None, _) => false,
                    (Some(_), None) => true,
                    (Some(r), Some(v)) => r.version != *v,
                })
            }
        }
    }

    /// Re-reads each pinned change: a known outcome unpins its lease (released as any other);
    /// one still unknown a session timeout after it failed retires the lease's session, which
    /// is then closed once nothing uses it. A pin whose session ended is dropped: the record
    /// is gone with the session.
    async fn settle_pinned(&self, now: Instant) {
        let pinned: Vec<Pinned> = std::mem::take(&mut *lock(&self.pinned));
        let mut keep = Vec::new();
        for p in pinned {
            if p.lease.session().is_ended() {
                continue;
            }
            match self.outcome_known(&p.change).await {
                Ok(true) => {
                    tracing::info!(log_id = %p.lease.log_id(), change = ?p.change, "the unknown outcome is known now: the write lease is released as usual");
                }
                known => {
                    if now.saturating_duration_since(p.since) < self.session_timeout {
                        keep.push(p);
                        continue;
                    }
                    if let Err(e) = known {
                        tracing::warn!(log_id = %p.lease.log_id(), error = %e, "re-reading an unknown outcome failed");
                    }
                    self.retire_session(&p.lease);
                }
            }
        }
        lock(&self.pinned).extend(keep);
    }

    /// Retires the session of `lease`, whose change may still land: no new lease is taken on
    /// it, `lease` is never deleted, and the session is closed (which removes its lease
    /// records) once none of its leases is in use.
    fn retire_session(&self, lease: &Arc<WriteLease>) {
        let session = lease.session().clone();
        if session.is_ended() {
            return;
        }
        let mut retiring = lock(&self.retiring);
        let entry = match retiring.iter().position(|r| same_session(&r.session, &session)) {
            Some(i) => &mut retiring[i],
            None => {
                tracing::warn!(
                    log_id = %lease.log_id(),
                    session = %session.id(),
                    "a change under this write lease still has an unknown outcome a session timeout later: \
                     the session is retired, so that the lease record goes only with it"
                );
                retiring.push(Retiring { session, leases: Vec::new() });
                retiring.last_mut().expect("just pushed")
            }
        };
        if !entry.leases.iter().any(|l| Arc::ptr_eq(l, lease)) {
            entry.leases.push(lease.clone());
        }
    }

    /// Moves a lease of a retiring session out of use into its session's retirement, so that
    /// the session can close once the lease is no longer used.
    fn retire_lease(&self, lease: Arc<WriteLease>) {
        let mut retiring = lock(&self.retiring);
        if let Some(entry) = retiring.iter_mut().find(|r| same_session(&r.session, lease.session()))
            && !entry.leases.iter().any(|l| Arc::ptr_eq(l, &lease))
        {
            entry.leases.push(lease);
        }
    }

    /// Closes each retiring session that nothing uses any more: none of its retired leases is
    /// held by a pending change, and no slot holds one of its leases (slots that do and are
    /// free give theirs up here). Forgets sessions that ended by themselves. Answers how many
    /// sessions it closed.
    async fn close_retired_sessions(&self) -> usize {
        if lock(&self.retiring).is_empty() {
            return 0;
        }
        // Slots holding a lease of a retiring session give it up (the next append to the log
        // acquires a new lease on the current session).
        let slots: Vec<Slot> = lock_slots(&self.slots).values().cloned().collect();
        let mut busy_sessions: Vec<Arc<dyn Session>> = Vec::new();
        for slot in slots {
            let Ok(mut held) = slot.try_lock() else { continue };
            let Some(h) = held.as_ref() else { continue };
            if !self.is_retiring(h.lease.session()) {
                continue;
            }
            if let Some(h) = held.take() {
                self.retire_lease(h.lease);
            }
        }
        // A slot being acquired or used right now may still hold a retiring lease.
        for slot in lock_slots(&self.slots).values() {
            if let Ok(held) = slot.try_lock() {
                if let Some(h) = held.as_ref()
                    && self.is_retiring(h.lease.session())
                {
                    busy_sessions.push(h.lease.session().clone());
                }
            } else {
                // Locked: an `ensure` is under way; it moves a retiring lease out itself.
            }
        }
        let closable: Vec<Arc<dyn Session>> = {
            let mut retiring = lock(&self.retiring);
            retiring.retain(|r| !r.session.is_ended());
            let mut closable = Vec::new();
            retiring.retain(|r| {
                let idle = r.leases.iter().all(|l| Arc::strong_count(l) == 1)
                    && !busy_sessions.iter().any(|b| same_session(b, &r.session));
                if idle {
                    closable.push(r.session.clone());
                }
                !idle
            });
            closable
        };
        for session in &closable {
            match session.close().await {
                Ok(()) => {
                    tracing::info!(session = %session.id(), "closed a retired session: its lease records are gone with it")
                }
                Err(e) => {
                    tracing::warn!(session = %session.id(), error = %e, "closing a retired session failed; it ends when it times out")
                }
            }
        }
        closable.len()
    }

    /// How many leases were acquired since the writer started.
    pub(crate) fn acquisitions(&self) -> u64 {
        self.acquisitions.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The idle period of a lease acquired now on `log_id`: doubled if the log's previous
    /// lease was released for being idle within its last period's reach (the log is sparse,
    /// not gone), up to the cap; otherwise `lease_idle_release`.
    fn idle_period(&self, log_id: LogId, now: Instant) -> Duration {
        let cap = self.idle * MAX_IDLE_FACTOR;
        let released =
            self.released.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&log_id);
        match released {
            Some(r) if now.saturating_duration_since(r.at) < r.idle_after * 2 => (r.idle_after * 2).min(cap),
            _ => self.idle,
        }
    }

    /// The live session, opening one if there is none or it ended (every lease of an ended
    /// session is gone with its records).
    async fn session(&self, log_id: LogId) -> Result<Arc<dyn Session>, AppendError> {
        let mut session = self.session.lock().await;
        if let Some(s) = session.as_ref()
            && !s.is_ended()
            && !self.is_retiring(s)
        {
            return Ok(s.clone());
        }
        let s = self
            .store
            .open_session(self.session_timeout)
            .await
            .map_err(|source| AppendError::Lease { log_id, source })?;
        *session = Some(s.clone());
        Ok(s)
    }

    /// The lease on `log_id`, acquired now if not held (spec "Leases": ephemeral lease record,
    /// then the fence check; a fenced log refuses). Only appends to the same log wait for an
    /// acquisition in progress.
    pub(crate) async fn ensure(&self, log_id: LogId) -> Result<HeldLease, AppendError> {
        let slot = lock_slots(&self.slots).entry(log_id).or_default().clone();
        let mut held = slot.lock().await;
        if let Some(h) = held.as_mut()
            && !*h.lease.session_ended().borrow()
        {
            if !self.is_retiring(h.lease.session()) {
                h.last_used = Instant::now();
                return Ok(HeldLease { lease: h.lease.clone() });
            }
            // Its session is retiring: the lease goes with it; take a new one.
            if let Some(h) = held.take() {
                self.retire_lease(h.lease);
            }
        }
        let session = self.session(log_id).await?;
        let token = self.tokens.new_token();
        let lease = match lease::acquire(self.store.as_ref(), &session, log_id, &token).await {
            Ok(lease) => Arc::new(lease),
            Err(LeaseError::Fenced { .. }) => return Err(AppendError::Fenced { log_id }),
            Err(LeaseError::Meta(source)) => return Err(AppendError::Lease { log_id, source }),
        };
        self.acquisitions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let now = Instant::now();
        *held =
            Some(Held { lease: lease.clone(), last_used: now, idle_after: self.idle_period(log_id, now) });
        Ok(HeldLease { lease })
    }

    /// Takes out the leases that no pending entry holds and that were last used their idle
    /// period or longer before `now` — `idle` if given (a caller forcing a release), else
    /// each lease's own — skipping any being acquired or used right now, and forgets their
    /// logs; then releases them, without holding any lock across the round trips.
    pub(crate) async fn release_idle(&self, now: Instant, idle: Option<Duration>) -> usize {
        // Unpinned leases are released in this same round.
        self.settle_pinned(now).await;
        let mut idle_leases = Vec::new();
        let mut released_now = Vec::new();
        lock_slots(&self.slots).retain(|log_id, slot| {
            // Another reference is an `ensure` under way (it clones the slot under this lock):
            // leave the log alone, or its lease could land in a slot nobody tracks.
            if Arc::strong_count(slot) > 1 {
                return true;
            }
            let Ok(mut held) = slot.try_lock() else { return true };
            let unused = held.as_ref().is_some_and(|h| {
                Arc::strong_count(&h.lease) == 1
                    && now.saturating_duration_since(h.last_used) >= idle.unwrap_or(h.idle_after)
            });
            if unused && let Some(h) = held.take() {
                released_now.push((*log_id, Released { at: now, idle_after: h.idle_after }));
                idle_leases.push((*log_id, h.lease));
            }
            held.is_some()
        });
        {
            // Remember the released logs for a while (a sparse log comes back); forget the
            // ones that did not.
            let mut released = self.released.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let keep = self.idle * MAX_IDLE_FACTOR * 2;
            released.retain(|_, r| now.saturating_duration_since(r.at) < keep);
            if idle.is_none() {
                released.extend(released_now);
            }
        }
        let released = idle_leases.len();
        for (log_id, lease) in idle_leases {
            if self.is_retiring(lease.session()) {
                // Its session closes soon, and the record with it; a pinned lease is never in
                // this list (the pin holds a handle).
                self.retire_lease(lease);
                continue;
            }
            let Ok(lease) = Arc::try_unwrap(lease) else { continue };
            if let Err(e) = lease.release(self.store.as_ref()).await {
                tracing::warn!(%log_id, error = %e, "releasing an idle write lease failed; it ends with the session");
            } else {
                tracing::debug!(%log_id, "released an idle write lease");
            }
        }
        self.close_retired_sessions().await;
        released
    }

    /// The logs whose lease is held now (for tests and metrics).
    pub(crate) async fn held(&self) -> Vec<LogId> {
        let slots: Vec<(LogId, Slot)> =
            lock_slots(&self.slots).iter().map(|(l, s)| (*l, s.clone())).collect();
        let mut logs = Vec::new();
        for (log_id, slot) in slots {
            if slot.lock().await.is_some() {
                logs.push(log_id);
            }
        }
        logs.sort();
        logs
    }

    /// The id of the current metadata-store session, if one is open (for logs and tests).
    pub(crate) async fn session_id(&self) -> Option<String> {
        self.session.lock().await.as_ref().map(|s| s.id())
    }

    /// Releases every lease and closes the session. Call only after every change started
    /// under the leases has completed.
    pub(crate) async fn release_all(&self) {
        let slots: Vec<(LogId, Slot)> = lock_slots(&self.slots).drain().collect();
        let pinned: Vec<Pinned> = std::mem::take(&mut *lock(&self.pinned));
        for p in pinned {
            // A change may still land: the record goes with the session, closed below.
            self.retire_session(&p.lease);
        }
        for (log_id, slot) in slots {
            let Some(held) = slot.lock().await.take() else { continue };
            if self.is_retiring(held.lease.session()) {
                continue; // goes with its session, closed below
            }
            match Arc::try_unwrap(held.lease) {
                Ok(lease) => {
                    if let Err(e) = lease.release(self.store.as_ref()).await {
                        tracing::warn!(%log_id, error = %e, "releasing write lease failed; it ends with the session");
                    }
                }
                Err(_) => {
                    tracing::warn!(%log_id, "write lease still in use at close; it ends with the session")
                }
            }
        }
        let retiring: Vec<Retiring> = std::mem::take(&mut *lock(&self.retiring));
        for r in retiring {
            if let Err(e) = r.session.close().await {
                tracing::warn!(error = %e, "closing a retired metadata session failed; it ends when it times out");
            }
        }
        if let Some(session) = self.session.lock().await.take()
            && let Err(e) = session.close().await
        {
            tracing::warn!(error = %e, "closing the writer's metadata session failed");
        }
    }
}

/// Releases idle leases every half `idle` (each after its own idle period) until the writer
/// is gone.
pub(crate) async fn run_idle_release(leases: Weak<Leases>, idle: Duration) {
    let mut tick = tokio::time::interval((idle / 2).max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(leases) = leases.upgrade() else { return };
        leases.release_idle(Instant::now(), None).await;
    }
}
