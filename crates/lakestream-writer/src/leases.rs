//! A1: the write leases a writer holds, one per log, all backed by one metadata-store
//! session. When the session ends every lease is lost; the next append opens a new session
//! and acquires a new lease.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lakestream_format::LogId;
use lakestream_meta::lease::{self, LeaseError, TokenSource, WriteLease};
use lakestream_meta::{MetaStore, Session};
use tokio::sync::Mutex;

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
    leases: HashMap<LogId, Arc<WriteLease>>,
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
        if let Some(lease) = state.leases.get(&log_id) {
            return Ok(HeldLease { lease: lease.clone() });
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
        state.leases.insert(log_id, lease.clone());
        Ok(HeldLease { lease })
    }

    /// The id of the current metadata-store session, if one is open (for logs and tests).
    pub(crate) async fn session_id(&self) -> Option<String> {
        self.state.lock().await.session.as_ref().map(|s| s.id())
    }

    /// Releases every lease and closes the session. Call only after every change started
    /// under the leases has completed.
    pub(crate) async fn release_all(&self) {
        let mut state = self.state.lock().await;
        for (log_id, lease) in state.leases.drain() {
            match Arc::try_unwrap(lease) {
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
