//! Session keep-alive scheduling and expiry detection (oxia.md §10). Pure: time comes in as
//! milliseconds from the caller's [`lakestream_format::Clock`].
//!
//! The server expires a session when no heartbeat arrives within its timeout. The client
//! sends one every `min(max(timeout / 10, 2 s), timeout / 3)`: Oxia's Go client uses
//! `max(timeout / 10, 2 s)`, which for the shortest timeout Oxia accepts (2 s) is the timeout
//! itself, so one late heartbeat would lose the session; at most a third of the timeout
//! leaves room for two heartbeats to fail. The client considers the
//! session ended when the server says the session is unknown, or when no keep-alive has
//! succeeded for longer than the timeout: by then the server has expired it, or is about to,
//! and the holder must stop relying on its ephemeral records.

use std::time::Duration;

/// The floor of the keep-alive interval.
pub const MIN_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);

/// How often to send `KeepAlive` for a session with this timeout:
/// `min(max(timeout / 10, 2 s), timeout / 3)`.
pub fn keepalive_interval(session_timeout: Duration) -> Duration {
    (session_timeout / 10).max(MIN_KEEPALIVE_INTERVAL).min(session_timeout / 3)
}

/// The result of one keep-alive attempt, as the liveness tracker sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatOutcome {
    /// The server accepted the heartbeat.
    Accepted,
    /// The server says the session does not exist (expired or closed).
    SessionGone,
    /// The attempt failed for another reason (network, leader change); the session may live.
    Failed,
}

/// Why a session is considered ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEnd {
    /// The server no longer knows the session.
    Expired,
    /// No keep-alive succeeded for longer than the timeout.
    Unconfirmed {
        /// Milliseconds since the last accepted heartbeat (or since creation).
        silent_ms: i64,
    },
}

/// Tracks one shard session's last confirmed liveness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionLiveness {
    timeout_ms: i64,
    last_confirmed_ms: i64,
}

impl SessionLiveness {
    /// A session the server created at `created_ms` (our clock).
    pub fn new(session_timeout: Duration, created_ms: i64) -> Self {
        let timeout_ms = i64::try_from(session_timeout.as_millis()).unwrap_or(i64::MAX);
        Self { timeout_ms, last_confirmed_ms: created_ms }
    }

    /// Records the outcome of a keep-alive finished at `now_ms`; returns the end of the
    /// session if this outcome ends it.
    pub fn record(&mut self, outcome: HeartbeatOutcome, now_ms: i64) -> Option<SessionEnd> {
        match outcome {
            HeartbeatOutcome::Accepted => {
                self.last_confirmed_ms = self.last_confirmed_ms.max(now_ms);
                None
            }
            HeartbeatOutcome::SessionGone => Some(SessionEnd::Expired),
            HeartbeatOutcome::Failed => self.check(now_ms),
        }
    }

    /// Whether, at `now_ms`, the session has gone unconfirmed for longer than its timeout.
    pub fn check(&self, now_ms: i64) -> Option<SessionEnd> {
        let silent_ms = now_ms.saturating_sub(self.last_confirmed_ms);
        (silent_ms > self.timeout_ms).then_some(SessionEnd::Unconfirmed { silent_ms })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// oxia.md §10: KeepAlive every max(timeout / 10, 2 s), but never less often than three
    /// times per timeout.
    #[test]
    fn interval_is_a_tenth_of_the_timeout_at_least_two_seconds_at_most_a_third() {
        assert_eq!(keepalive_interval(Duration::from_secs(15)), Duration::from_secs(2));
        assert_eq!(keepalive_interval(Duration::from_secs(2)), Duration::from_secs(2) / 3);
        assert_eq!(keepalive_interval(Duration::from_secs(5)), Duration::from_secs(5) / 3);
        assert_eq!(keepalive_interval(Duration::from_secs(6)), Duration::from_secs(2));
        assert_eq!(keepalive_interval(Duration::from_secs(20)), Duration::from_secs(2));
        assert_eq!(keepalive_interval(Duration::from_secs(30)), Duration::from_secs(3));
        assert_eq!(keepalive_interval(Duration::from_secs(300)), Duration::from_secs(30));
    }

    #[test]
    fn accepted_heartbeats_keep_the_session() {
        let mut liveness = SessionLiveness::new(Duration::from_secs(10), 1_000);
        for now in (2_000..=60_000).step_by(2_000) {
            assert_eq!(liveness.record(HeartbeatOutcome::Accepted, now), None);
        }
        // Ten seconds of silence after the last accepted heartbeat is still within the timeout.
        assert_eq!(liveness.check(70_000), None);
    }

    /// oxia.md §10: a session is learned to have ended when KeepAlive says session-not-found.
    #[test]
    fn session_not_found_ends_the_session_at_once() {
        let mut liveness = SessionLiveness::new(Duration::from_secs(10), 0);
        assert_eq!(liveness.record(HeartbeatOutcome::SessionGone, 1), Some(SessionEnd::Expired));
    }

    /// oxia.md §10: … or when no KeepAlive has succeeded for longer than the timeout.
    #[test]
    fn failures_end_the_session_only_after_the_timeout() {
        let mut liveness = SessionLiveness::new(Duration::from_secs(10), 0);
        assert_eq!(liveness.record(HeartbeatOutcome::Accepted, 4_000), None);
        assert_eq!(liveness.record(HeartbeatOutcome::Failed, 6_000), None);
        assert_eq!(liveness.record(HeartbeatOutcome::Failed, 14_000), None);
        assert_eq!(
            liveness.record(HeartbeatOutcome::Failed, 14_001),
            Some(SessionEnd::Unconfirmed { silent_ms: 10_001 })
        );
        assert_eq!(liveness.check(20_000), Some(SessionEnd::Unconfirmed { silent_ms: 16_000 }));
    }

    #[test]
    fn a_clock_going_backwards_does_not_extend_the_session() {
        let mut liveness = SessionLiveness::new(Duration::from_secs(10), 5_000);
        assert_eq!(liveness.record(HeartbeatOutcome::Accepted, 3_000), None);
        assert_eq!(liveness.check(15_001), Some(SessionEnd::Unconfirmed { silent_ms: 10_001 }));
    }
}
