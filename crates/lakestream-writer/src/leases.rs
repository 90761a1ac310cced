//! A1: the write leases a writer holds, one per log, all backed by one metadata-store
//! session. When the session ends every lease is lost; the next append opens a new session
//! and acquires a new lease.
//!
//! A lease no pending entry uses is released once it has been idle for
//! `lease_idle_release`: deleting a log waits until no lease record of it remains, so a
//! writer that kept every lease until it closed would block every deletion of a log it
//! ever wrote. The next append to the log acquires a new lease (and checks the fence again).

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

#[derive(Debug, Default)]
struct State {
    session: Option<Arc<dyn Session>>,
    leases: HashMap<LogId, Held>,
}

#[derive(Debug)]
struct Held {
    lease: Arc<WriteLease>,
    last_used: Instant,
}

#[derive(Debug)]
pub(crate) struct Leases {
    store: Arc<dyn MetaStore>,
    tokens: Arc<dyn TokenSource>,
    session_timeout: Duration,
    state: Mutex<State>,
}

impl Leases {
    pub(crate) fn new(
        store: Arc<dyn MetaStore>,
        tokens: Arc<dyn TokenSource>,
        session_timeout: Duration,
    ) -> Self {
        Leases { store, tokens, session_timeout, state: Mutex::new(State::default()) }
    }

    /// The lease on `log_id`, acquired now if not held (spec "Leases": ephemeral lease record,
    /// then the fence check; a fenced log refuses).
    pub(crate) async fn ensure(&self, log_id: LogId) -> Result<HeldLease, AppendError> {
        let mut state = self.state.lock().await;
        if state.session.as_ref().is_some_and(|s| s.is_ended()) {
            // Every lease of the ended session is gone with its records.
            state.session = None;
            state.leases.clear();
        }
        if let Some(held) = state.leases.get_mut(&log_id) {
            held.last_used = Instant::now();
            return Ok(HeldLease { lease: held.lease.clone() });
        }
        let session = match &state.session {
            Some(s) => s.clone(),
            None => {
                let s = self
                    .store
                    .open_session(self.session_timeout)
                    .await
                    .map_err(|source| AppendError::Lease { log_id, source })?;
                state.session = Some(s.clone());
                s
            }
        };
        let token = self.tokens.new_token();
        let lease = match lease::acquire(self.store.as_ref(), &session, log_id, &token).await {
            Ok(lease) => Arc::new(lease),
            Err(LeaseError::Fenced { .. }) => return Err(AppendError::Fenced { log_id }),
            Err(LeaseError::Meta(source)) => return Err(AppendError::Lease { log_id, source }),
        };
        state.leases.insert(log_id, Held { lease: lease.clone(), last_used: Instant::now() });
        Ok(HeldLease { lease })
    }

    /// Releases the leases that no pending entry holds and that were last used `idle` or
    /// longer before `now`. Holding the state lock keeps `ensure` from handing one out while
    /// it is being released.
    pub(crate) async fn release_idle(&self, now: Instant, idle: Duration) -> usize {
        let mut state = self.state.lock().await;
        let idle_logs: Vec<LogId> = state
            .leases
            .iter()
            .filter(|(_, h)| {
                Arc::strong_count(&h.lease) == 1 && now.saturating_duration_since(h.last_used) >= idle
            })
            .map(|(log_id, _)| *log_id)
            .collect();
        for log_id in &idle_logs {
            let Some(held) = state.leases.remove(log_id) else { continue };
            let Ok(lease) = Arc::try_unwrap(held.lease) else { continue };
            if let Err(e) = lease.release(self.store.as_ref()).await {
                tracing::warn!(%log_id, error = %e, "releasing an idle write lease failed; it ends with the session");
            } else {
                tracing::debug!(%log_id, "released an idle write lease");
            }
        }
        idle_logs.len()
    }

    /// The logs whose lease is held now (for tests and metrics).
    pub(crate) async fn held(&self) -> Vec<LogId> {
        let mut logs: Vec<LogId> = self.state.lock().await.leases.keys().copied().collect();
        logs.sort();
        logs
    }

    /// The id of the current metadata-store session, if one is open (for logs and tests).
    pub(crate) async fn session_id(&self) -> Option<String> {
        self.state.lock().await.session.as_ref().map(|s| s.id())
    }

    /// Releases every lease and closes the session. Call only after every change started
    /// under the leases has completed.
    pub(crate) async fn release_all(&self) {
        let mut state = self.state.lock().await;
        for (log_id, held) in state.leases.drain() {
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
        if let Some(session) = state.session.take()
            && let Err(e) = session.close().await
        {
            tracing::warn!(error = %e, "closing the writer's metadata session failed");
        }
    }
}

/// Releases idle leases every half `idle` until the writer is gone.
pub(crate) async fn run_idle_release(leases: Weak<Leases>, idle: Duration) {
    let mut tick = tokio::time::interval((idle / 2).max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(leases) = leases.upgrade() else { return };
        leases.release_idle(Instant::now(), idle).await;
    }
}
