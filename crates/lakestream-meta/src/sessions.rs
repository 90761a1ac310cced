//! Session bookkeeping shared by the in-memory and embedded stores.
//!
//! A session lives while its client heartbeats. In these single-process stores the client is
//! the process itself, so a session is kept alive implicitly until it is closed, until its
//! handle is dropped (the client went away: heartbeats stop), or until a test simulates a
//! lost connection. Once heartbeats stop, the session expires when the injected clock passes
//! `last heartbeat + timeout`, as Oxia's server does (oxia.md §10).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tokio::sync::watch;

use crate::engine::SessionId;
use crate::error::{MetaError, MetaResult};

/// The session timeouts Oxia accepts (oxia.md §10); the local stores enforce the same range
/// so that code tested against them also runs against Oxia.
pub const SESSION_TIMEOUT_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(2)..=Duration::from_secs(300);

/// An ephemeral record a session owns: the shard index and the encoded key.
pub(crate) type EphemeralKey = (usize, Vec<u8>);

#[derive(Debug)]
struct SessionState {
    timeout_ms: i64,
    /// `None` while the client heartbeats; the expiry deadline once heartbeats stopped.
    deadline_ms: Option<i64>,
    ephemeral_keys: BTreeSet<EphemeralKey>,
    ended: watch::Sender<bool>,
}

/// The live sessions of a store.
#[derive(Debug, Default)]
pub(crate) struct SessionTable {
    last_id: SessionId,
    live: HashMap<SessionId, SessionState>,
}

/// A session that has ended: the store removes its records, then calls [`EndedSession::notify`].
#[must_use = "the session's holders learn of the end only through notify()"]
pub(crate) struct EndedSession {
    pub id: SessionId,
    pub ephemeral_keys: BTreeSet<EphemeralKey>,
    ended: watch::Sender<bool>,
}

impl EndedSession {
    /// Fires the session's `ended` signal. Called after its records are gone, so a holder that
    /// sees the signal never finds its lease record still listed.
    pub fn notify(self) {
        self.ended.send_replace(true);
    }
}

/// Checks a requested session timeout.
pub(crate) fn validate_timeout(timeout: Duration) -> MetaResult<i64> {
    if !SESSION_TIMEOUT_RANGE.contains(&timeout) {
        return Err(MetaError::InvalidRequest(format!(
            "session timeout {timeout:?} is outside {:?}..={:?}",
            SESSION_TIMEOUT_RANGE.start(),
            SESSION_TIMEOUT_RANGE.end()
        )));
    }
    Ok(i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX))
}

impl SessionTable {
    /// Opens a session; returns its id and the receiver of its `ended` signal.
    pub fn open(&mut self, timeout_ms: i64) -> (SessionId, watch::Receiver<bool>) {
        self.last_id += 1;
        let (ended, receiver) = watch::channel(false);
        let state = SessionState { timeout_ms, deadline_ms: None, ephemeral_keys: BTreeSet::new(), ended };
        self.live.insert(self.last_id, state);
        (self.last_id, receiver)
    }

    /// Fails with [`MetaError::SessionEnded`] unless the session is live.
    pub fn require_live(&self, id: SessionId) -> MetaResult<()> {
        if self.live.contains_key(&id) {
            Ok(())
        } else {
            Err(MetaError::SessionEnded(format!("session {id}")))
        }
    }

    /// Records that the session owns an ephemeral record.
    pub fn bind(&mut self, id: SessionId, key: EphemeralKey) {
        if let Some(state) = self.live.get_mut(&id) {
            state.ephemeral_keys.insert(key);
        }
    }

    /// The client stopped heartbeating at `now_ms`: the session expires `timeout` later.
    /// Returns whether the session was live.
    pub fn stop_heartbeats(&mut self, id: SessionId, now_ms: i64) -> bool {
        match self.live.get_mut(&id) {
            Some(state) => {
                let deadline = now_ms.saturating_add(state.timeout_ms);
                state.deadline_ms = Some(state.deadline_ms.map_or(deadline, |d| d.min(deadline)));
                true
            }
            None => false,
        }
    }

    /// Ends a session now (closed or expired). `None` when it had already ended.
    pub fn end(&mut self, id: SessionId) -> Option<EndedSession> {
        self.live.remove(&id).map(|state| EndedSession {
            id,
            ephemeral_keys: state.ephemeral_keys,
            ended: state.ended,
        })
    }

    /// Ends every session whose deadline is at or before `now_ms`.
    pub fn end_expired(&mut self, now_ms: i64) -> Vec<EndedSession> {
        let expired: Vec<SessionId> = self
            .live
            .iter()
            .filter(|(_, s)| s.deadline_ms.is_some_and(|d| d <= now_ms))
            .map(|(id, _)| *id)
            .collect();
        expired.into_iter().filter_map(|id| self.end(id)).collect()
    }

    /// Ends every session (the store is going away).
    pub fn end_all(&mut self) -> Vec<EndedSession> {
        let ids: Vec<SessionId> = self.live.keys().copied().collect();
        ids.into_iter().filter_map(|id| self.end(id)).collect()
    }
}

/// Parses the id a store's session handle reports.
pub(crate) fn parse_session_id(text: &str) -> Option<SessionId> {
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oxia_session_timeout_range_is_enforced() {
        assert!(validate_timeout(Duration::from_millis(1999)).is_err());
        assert!(validate_timeout(Duration::from_secs(301)).is_err());
        assert_eq!(validate_timeout(Duration::from_secs(2)).unwrap(), 2000);
        assert_eq!(validate_timeout(Duration::from_secs(300)).unwrap(), 300_000);
    }

    #[test]
    fn heartbeating_sessions_never_expire_and_lost_ones_do_at_the_deadline() {
        let mut table = SessionTable::default();
        let (kept, kept_rx) = table.open(2000);
        let (lost, lost_rx) = table.open(2000);
        assert!(table.stop_heartbeats(lost, 1000));
        assert!(table.end_expired(2999).is_empty());
        let ended = table.end_expired(3000);
        assert_eq!(ended.iter().map(|e| e.id).collect::<Vec<_>>(), [lost]);
        ended.into_iter().for_each(EndedSession::notify);
        assert!(*lost_rx.borrow() && !*kept_rx.borrow());
        assert!(table.require_live(lost).is_err() && table.require_live(kept).is_ok());
        assert!(table.end_expired(i64::MAX).is_empty());
    }
}
