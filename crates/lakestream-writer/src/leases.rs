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
        }
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
            h.last_used = Instant::now();
            return Ok(HeldLease { lease: h.lease.clone() });
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
            let Ok(lease) = Arc::try_unwrap(lease) else { continue };
            if let Err(e) = lease.release(self.store.as_ref()).await {
                tracing::warn!(%log_id, error = %e, "releasing an idle write lease failed; it ends with the session");
            } else {
                tracing::debug!(%log_id, "released an idle write lease");
            }
        }
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
        for (log_id, slot) in slots {
            let Some(held) = slot.lock().await.take() else { continue };
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
