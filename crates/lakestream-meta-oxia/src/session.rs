//! [`OxiaSession`]: the spec's session on Oxia, made of one Oxia session per shard
//! (oxia.md §10).
//!
//! Oxia sessions belong to a shard, and an ephemeral record must be bound to a session on the
//! shard of its partition. The session therefore creates a shard session lazily, the first
//! time an ephemeral record needs that shard, and keeps each alive in the background every
//! `max(timeout / 10, 2 s)`. When any shard session expires, or goes unconfirmed for longer
//! than the timeout, the whole session has ended: [`Session::ended`] fires and the remaining
//! shard sessions are closed, so that no lease outlives the holder's knowledge of it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use lakestream_format::Clock;
use lakestream_meta::{MetaError, MetaResult, PutCondition, Session, WriteResult};

use crate::client::OxiaClient;
use crate::errors::{OxiaErrorKind, RequestPhase};
use crate::keepalive::{HeartbeatOutcome, SessionLiveness, keepalive_interval};
use crate::requests::{ephemeral_put_request, write_put};
use crate::responses::{put_outcome, single_put};
use crate::routing::ShardId;

/// The `(shard, Oxia session id)` pairs named in an [`OxiaSession`]'s [`Session::id`], which
/// reads `{client identity}#{n}[{shard}:{session id},…]`. For tests and diagnostics that must
/// act on the Oxia sessions behind a `dyn Session`. `None` if `id` is not in that form.
pub fn shard_sessions_from_id(id: &str) -> Option<Vec<(ShardId, i64)>> {
    let list = id.strip_suffix(']')?.rsplit_once('[')?.1;
    if list.is_empty() {
        return Some(Vec::new());
    }
    list.split(',')
        .map(|pair| {
            let (shard, session) = pair.split_once(':')?;
            Some((shard.parse().ok()?, session.parse().ok()?))
        })
        .collect()
}

/// One Oxia session on one shard, with its keep-alive task.
#[derive(Debug)]
struct ShardSession {
    session_id: i64,
    keepalive: JoinHandle<()>,
}

#[derive(Debug)]
struct Shared {
    label: String,
    client: OxiaClient,
    clock: Arc<dyn Clock>,
    timeout: Duration,
    shards: Mutex<HashMap<ShardId, ShardSession>>,
    /// Serialises shard-session creation so that a shard gets one session.
    creating: tokio::sync::Mutex<()>,
    ended: watch::Sender<bool>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn is_ended(&self) -> bool {
        *self.ended.borrow()
    }

    fn ended_error(&self) -> MetaError {
        MetaError::SessionEnded(format!("session {} has ended", self.label))
    }

    /// Marks the session ended (once) and closes the other shard sessions in the background.
    fn end(&self, reason: &str) {
        if self.ended.send_replace(true) {
            return;
        }
        tracing::warn!(session = %self.label, reason, "Oxia session ended");
        let shards: Vec<(ShardId, ShardSession)> = lock(&self.shards).drain().collect();
        let client = self.client.clone();
        for (_, shard_session) in &shards {
            shard_session.keepalive.abort();
        }
        tokio::spawn(async move {
            for (shard, shard_session) in shards {
                // Best effort: an expired session is already gone on the server.
                if let Err(error) = client.close_session(shard, shard_session.session_id).await {
                    tracing::debug!(shard, %error, "closing a shard session after the session ended");
                }
            }
        });
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Not closed explicitly: stop heart-beating; the server expires the shard sessions.
        for shard_session in lock(&self.shards).values() {
            shard_session.keepalive.abort();
        }
    }
}

/// A session on an Oxia cluster (one Oxia session per shard used).
#[derive(Debug)]
pub struct OxiaSession {
    shared: Arc<Shared>,
}

impl OxiaSession {
    /// A session that has no shard sessions yet; `number` labels it in logs.
    pub fn new(client: OxiaClient, clock: Arc<dyn Clock>, timeout: Duration, number: u64) -> Self {
        let (ended, _) = watch::channel(false);
        let label = format!("{}#{number}", client.config().client_identity);
        Self {
            shared: Arc::new(Shared {
                label,
                client,
                clock,
                timeout,
                shards: Mutex::default(),
                creating: tokio::sync::Mutex::new(()),
                ended,
            }),
        }
    }

    /// The Oxia sessions held so far, as `(shard, session id)`, ordered by shard.
    pub fn shard_sessions(&self) -> Vec<(ShardId, i64)> {
        let mut sessions: Vec<(ShardId, i64)> =
            lock(&self.shared.shards).iter().map(|(shard, s)| (*shard, s.session_id)).collect();
        sessions.sort_unstable();
        sessions
    }

    /// The Oxia session id on `shard`, creating the shard session if needed.
    async fn shard_session(&self, shard: ShardId) -> MetaResult<i64> {
        let shared = &self.shared;
        if let Some(existing) = lock(&shared.shards).get(&shard) {
            return Ok(existing.session_id);
        }
        let _creating = shared.creating.lock().await;
        if let Some(existing) = lock(&shared.shards).get(&shard) {
            return Ok(existing.session_id);
        }
        let session_id = shared
            .client
            .create_session(shard, shared.timeout)
            .await
            .map_err(|error| error.to_meta_error(RequestPhase::Rejected))?;
        let created_ms = shared.clock.now_ms();
        if shared.is_ended() {
            // Ended while creating: do not leave a live shard session behind.
            let _ = shared.client.close_session(shard, session_id).await;
            return Err(shared.ended_error());
        }
        self.adopt_shard_session(shard, session_id, created_ms);
        tracing::debug!(session = %shared.label, shard, session_id, "created shard session");
        Ok(session_id)
    }

    /// Records a shard session created at `created_ms` and starts keeping it alive.
    fn adopt_shard_session(&self, shard: ShardId, session_id: i64, created_ms: i64) {
        let keepalive = tokio::spawn(keep_alive(Arc::downgrade(&self.shared), shard, session_id, created_ms));
        lock(&self.shared.shards).insert(shard, ShardSession { session_id, keepalive });
    }
}

/// Heart-beats one shard session until the session ends or is dropped.
async fn keep_alive(shared: Weak<Shared>, shard: ShardId, session_id: i64, created_ms: i64) {
    let Some(timeout) = shared.upgrade().map(|s| s.timeout) else { return };
    let interval = keepalive_interval(timeout);
    let mut liveness = SessionLiveness::new(timeout, created_ms);
    loop {
        tokio::time::sleep(interval).await;
        let Some(shared) = shared.upgrade() else { return };
        if shared.is_ended() {
            return;
        }
        // Each heartbeat gets at most one interval: a slow one must not delay the next.
        let outcome = match shared.client.keep_alive(shard, session_id, interval).await {
            Ok(()) => HeartbeatOutcome::Accepted,
            Err(error) if error.kind == OxiaErrorKind::SessionNotFound => HeartbeatOutcome::SessionGone,
            Err(error) => {
                tracing::debug!(shard, session_id, %error, "keep-alive failed");
                HeartbeatOutcome::Failed
            }
        };
        if let Some(end) = liveness.record(outcome, shared.clock.now_ms()) {
            shared.end(&format!("shard {shard} session {session_id}: {end:?}"));
            return;
        }
    }
}

#[async_trait]
impl Session for OxiaSession {
    fn id(&self) -> String {
        let ids: Vec<String> =
            self.shard_sessions().iter().map(|(shard, session)| format!("{shard}:{session}")).collect();
        format!("{}[{}]", self.shared.label, ids.join(","))
    }

    async fn create_ephemeral(&self, partition: &str, key: &str, value: Bytes) -> MetaResult<WriteResult> {
        let shared = &self.shared;
        if shared.is_ended() {
            return Err(shared.ended_error());
        }
        let shard = shared.client.shard_for(partition)?;
        let session_id = self.shard_session(shard).await?;
        let identity = &shared.client.config().client_identity;
        let request = ephemeral_put_request(partition, key, value, session_id, identity)?;
        let response = shared.client.write_or_error(shard, write_put(shard, request)).await?;
        let outcome = put_outcome(key, PutCondition::IfAbsent, &single_put(response, key)?);
        if let Err(MetaError::SessionEnded(reason)) = &outcome {
            shared.end(reason);
        }
        outcome
    }

    fn ended(&self) -> watch::Receiver<bool> {
        self.shared.ended.subscribe()
    }

    async fn close(&self) -> MetaResult<()> {
        let shared = &self.shared;
        shared.ended.send_replace(true);
        let shards: Vec<(ShardId, ShardSession)> = lock(&shared.shards).drain().collect();
        let mut first_error = None;
        for (shard, shard_session) in shards {
            shard_session.keepalive.abort();
            match shared.client.close_session(shard, shard_session.session_id).await {
                Ok(()) => {}
                // Already gone: its ephemeral records are gone too.
                Err(error) if error.kind == OxiaErrorKind::SessionNotFound => {}
                Err(error) => {
                    tracing::warn!(shard, %error, "closing a shard session failed; it will expire");
                    first_error.get_or_insert(error.to_meta_error(RequestPhase::Rejected));
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use lakestream_format::ManualClock;

    use super::*;
    use crate::routing::ShardMap;

    /// A session whose shard 0 session (id 77) is heart-beaten against a leader that does
    /// not answer (nothing listens on port 1), timed by a manual clock.
    fn unanswered_session(clock: &ManualClock) -> OxiaSession {
        let (client, _map_tx) =
            OxiaClient::with_fixed_map(ShardMap::standalone(1, "127.0.0.1:1").expect("valid"));
        let session = OxiaSession::new(client, Arc::new(clock.clone()), Duration::from_secs(2), 1);
        session.adopt_shard_session(0, 77, clock.now_ms());
        session
    }

    /// oxia.md §10: failed keep-alives end the session only once none succeeded for longer
    /// than the timeout.
    #[tokio::test(start_paused = true)]
    async fn failed_keepalives_within_the_timeout_keep_the_session() {
        let clock = ManualClock::new(1_000_000);
        let session = unanswered_session(&clock);
        let mut ended = session.ended();
        // Several keep-alive rounds fail while the clock stays within the timeout.
        let waited = tokio::time::timeout(Duration::from_secs(10), ended.wait_for(|e| *e)).await;
        assert!(waited.is_err(), "ended although the timeout has not passed");
        assert!(!session.is_ended());
        assert_eq!(session.shard_sessions(), vec![(0, 77)]);
    }

    /// oxia.md §10: no keep-alive succeeded for longer than the timeout → the session has
    /// ended: `ended` fires and ephemeral creates are refused.
    #[tokio::test(start_paused = true)]
    async fn keepalives_failing_past_the_timeout_end_the_session() {
        let clock = ManualClock::new(1_000_000);
        let session = unanswered_session(&clock);
        let mut ended = session.ended();
        clock.advance_ms(2_001);
        tokio::time::timeout(Duration::from_secs(10), ended.wait_for(|e| *e))
            .await
            .expect("ended fired")
            .expect("sender alive");
        assert!(session.shard_sessions().is_empty(), "the shard sessions were let go");
        let late = session.create_ephemeral("7", "/stream-write-leases/7/u", Bytes::new()).await;
        assert!(matches!(late, Err(MetaError::SessionEnded(_))), "{late:?}");
    }

    #[tokio::test]
    async fn close_is_idempotent_and_ends_the_session() {
        let clock = ManualClock::new(0);
        let (client, _map_tx) =
            OxiaClient::with_fixed_map(ShardMap::standalone(1, "127.0.0.1:1").expect("valid"));
        let session = OxiaSession::new(client, Arc::new(clock), Duration::from_secs(2), 1);
        // No shard session yet: closing needs no server.
        assert_eq!(session.close().await, Ok(()));
        assert!(session.is_ended());
        assert_eq!(session.close().await, Ok(()));
    }

    #[test]
    fn shard_sessions_are_read_back_from_the_session_id() {
        assert_eq!(shard_sessions_from_id("lakestream#3[]"), Some(vec![]));
        assert_eq!(shard_sessions_from_id("lakestream#3[0:17,2:40]"), Some(vec![(0, 17), (2, 40)]));
        assert_eq!(shard_sessions_from_id("a[b]#1[1:2]"), Some(vec![(1, 2)]));
        assert_eq!(shard_sessions_from_id("lakestream#3"), None);
        assert_eq!(shard_sessions_from_id("lakestream#3[0-17]"), None);
    }
}
