//! The write lease and fence protocol of the spec ("Write leases and fences"), over any
//! [`MetaStore`].
//!
//! - **Acquire** (writer, compactor): create the ephemeral lease record
//!   `/stream-write-leases/{L}/{token}` with `CreateIfAbsent` through a session, *then* read
//!   the fence `/stream-write-fences/{L}`. Only when that read succeeds and finds no fence is
//!   the lease usable; otherwise the lease record is deleted and the acquisition fails.
//! - **Fence** (catalog): `CreateIfAbsent` of the fence with value `0x01`; an existing fence
//!   counts as success. Fences are never changed or deleted.
//! - **Drain** (catalog, deleting a log): after fencing, list the lease records of the log
//!   until none remains, or give up after a timeout and change nothing.
//!
//! Why the order matters: the lease record and the fence live in one partition, whose
//! operations are linearizable. Either the acquirer's fence read comes after the fence was
//! created (and it backs off), or the catalog's list comes after the lease record was
//! created (and it waits for it).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use lakestream_format::keys::{FENCE_VALUE, fence_key, lease_key, lease_prefix, lease_range_end, partition};
use lakestream_format::retry::{Backoff, BackoffPolicy};
use lakestream_format::{ErrorClass, LogId};
use tokio::sync::watch;

use crate::error::{MetaError, MetaResult};
use crate::store::{MetaStore, PutCondition, Session};

/// A write lease on one log, held from [`acquire`] until [`WriteLease::release`].
///
/// If the session behind the lease record ends, the store removes the record, but the lease
/// is not released in the spec's sense: the holder must stop changing the log as soon as
/// [`WriteLease::session_ended`] fires (spec: "SHOULD stop … as soon as it learns").
#[derive(Debug)]
pub struct WriteLease {
    log_id: LogId,
    token: String,
    key: String,
    session: Arc<dyn Session>,
}

impl WriteLease {
    /// The leased log.
    pub fn log_id(&self) -> LogId {
        self.log_id
    }

    /// The lease token (the last segment of the lease record's key, and its value).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The lease record's key, `/stream-write-leases/{L}/{token}`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Fires (becomes true) when the session behind the lease record has ended.
    pub fn session_ended(&self) -> watch::Receiver<bool> {
        self.session.ended()
    }

    /// The session behind the lease record. A holder that cannot delete the record (a change
    /// it started may still land) ends this session instead, once nothing else uses it: the
    /// spec lets the record go with its session, never by a delete before the change completed.
    pub fn session(&self) -> &Arc<dyn Session> {
        &self.session
    }

    /// Deletes the lease record. Call only after every change started under the lease
    /// completed (spec: "MUST NOT delete a lease record before every change it started under
    /// that lease has completed").
    pub async fn release(self, store: &dyn MetaStore) -> MetaResult<()> {
        store.delete(&partition(self.log_id), &self.key).await.map(|_| ())
    }
}

/// Why a lease could not be acquired.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The log has a write fence: it is being or has been deleted. No lease will be granted.
    #[error("log {log_id} is fenced: no new write leases")]
    Fenced {
        /// The fenced log.
        log_id: LogId,
    },
    /// The store failed (creating the lease record, or reading the fence).
    #[error(transparent)]
    Meta(#[from] MetaError),
}

impl LeaseError {
    /// The class of the error: a fence is a conflict; store errors keep their class.
    pub fn class(&self) -> ErrorClass {
        match self {
            LeaseError::Fenced { .. } => ErrorClass::Conflict,
            LeaseError::Meta(e) => e.class(),
        }
    }
}

/// The pauses between attempts to delete an unusable lease record: below 10 ms, doubling to
/// 1 s, with full jitter; bounded by the delete's success or the session's end.
const DELETE_BACKOFF: BackoffPolicy =
    BackoffPolicy::unbounded(Duration::from_millis(10), Duration::from_secs(1));

/// Spec "Leases": ephemeral `CreateIfAbsent` of `/stream-write-leases/{L}/{token}` through
/// `session`, then `Get` of `/stream-write-fences/{L}`; if fenced or the `Get` fails, delete
/// the lease record (retrying with backoff 10 ms .. 1 s) and fail.
///
/// `token` must be unique among the leases of `L` (use a [`TokenSource`]); it must be
/// non-empty, contain no `/`, and only characters below U+FFFF, so that the record is one of
/// the keys the catalog's drain lists.
pub async fn acquire(
    store: &dyn MetaStore,
    session: &Arc<dyn Session>,
    log_id: LogId,
    token: &str,
) -> Result<WriteLease, LeaseError> {
    validate_token(token)?;
    let partition = partition(log_id);
    let key = lease_key(log_id, token);
    session.create_ephemeral(&partition, &key, Bytes::copy_from_slice(token.as_bytes())).await?;
    let failure = match store.get(&partition, &fence_key(log_id)).await {
        Ok(None) => {
            return Ok(WriteLease { log_id, token: token.to_string(), key, session: Arc::clone(session) });
        }
        Ok(Some(_)) => LeaseError::Fenced { log_id },
        Err(e) => LeaseError::Meta(e),
    };
    delete_unusable_lease(store, session, &partition, &key).await;
    Err(failure)
}

/// Deletes a lease record we must not use, until the delete succeeds (spec: "MUST delete its
/// lease record") or the session has ended, which removes the record anyway.
async fn delete_unusable_lease(
    store: &dyn MetaStore,
    session: &Arc<dyn Session>,
    partition: &str,
    key: &str,
) {
    let backoff = Backoff::process(DELETE_BACKOFF);
    for retry in 0.. {
        match store.delete(partition, key).await {
            Ok(_) => return,
            Err(e) if session.is_ended() => {
                tracing::debug!(key, error = %e, "lease record delete failed, but its session ended");
                return;
            }
            Err(e) => {
                let pause = backoff.delay(retry);
                tracing::warn!(key, error = %e, retry_in = ?pause, "deleting an unusable lease record failed");
                tokio::time::sleep(pause).await;
            }
        }
    }
}

fn validate_token(token: &str) -> MetaResult<()> {
    let listable = token.chars().all(|c| c != '/' && c < '\u{FFFF}');
    if token.is_empty() || !listable {
        return Err(MetaError::InvalidRequest(format!(
            "lease token {token:?} must be non-empty, without '/', and only characters below U+FFFF"
        )));
    }
    Ok(())
}

/// Spec "Fences and log deletion": `CreateIfAbsent` of the fence (value `0x01`); an existing
/// fence counts as success.
pub async fn fence(store: &dyn MetaStore, log_id: LogId) -> MetaResult<()> {
    let (partition, key) = (partition(log_id), fence_key(log_id));
    match store.put(&partition, &key, Bytes::from_static(FENCE_VALUE), PutCondition::IfAbsent).await {
        Ok(_) | Err(MetaError::KeyExists { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether the write fence of `log_id` exists.
pub async fn is_fenced(store: &dyn MetaStore, log_id: LogId) -> MetaResult<bool> {
    Ok(store.get(&partition(log_id), &fence_key(log_id)).await?.is_some())
}

/// The lease record keys of L: `List [/stream-write-leases/{L}/, prefix + U+FFFF)`.
pub async fn list_leases(store: &dyn MetaStore, log_id: LogId) -> MetaResult<Vec<String>> {
    store.list(&partition(log_id), &lease_prefix(log_id), &lease_range_end(log_id)).await
}

/// How long [`drain`] waits for lease records to go, and how often it looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainConfig {
    /// Give up after this long. Default 30 s (Ursa's value).
    pub timeout: Duration,
    /// List the lease records this often. Default 25 ms (Ursa's value).
    pub poll_interval: Duration,
}

impl Default for DrainConfig {
    fn default() -> Self {
        Self { timeout: Duration::from_secs(30), poll_interval: Duration::from_millis(25) }
    }
}

/// The result of [`drain`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainOutcome {
    /// A list came back empty: no lease record of the log remains.
    Drained,
    /// Lease records remained when the timeout passed. The caller must leave the log's
    /// records, objects and fence unchanged (spec: "MUST leave the log's records … unchanged").
    TimedOut {
        /// The lease record keys of the last list.
        remaining: Vec<String>,
    },
}

/// Polls [`list_leases`] every `poll_interval` until none remains or `timeout` passes. Call it
/// after [`fence`]; it changes nothing itself.
pub async fn drain(store: &dyn MetaStore, log_id: LogId, config: &DrainConfig) -> MetaResult<DrainOutcome> {
    let deadline = tokio::time::Instant::now() + config.timeout;
    loop {
        let remaining = list_leases(store, log_id).await?;
        if remaining.is_empty() {
            return Ok(DrainOutcome::Drained);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(DrainOutcome::TimedOut { remaining });
        }
        tokio::time::sleep_until(deadline.min(tokio::time::Instant::now() + config.poll_interval)).await;
    }
}

/// A source of lease tokens: canonical lower-case 36-character UUID text, unique per call.
pub trait TokenSource: Send + Sync + std::fmt::Debug {
    /// A new token.
    fn new_token(&self) -> String;
}

/// Random version-4 UUIDs: the source services use.
#[derive(Debug, Default, Clone, Copy)]
pub struct RandomTokens;

impl TokenSource for RandomTokens {
    #[allow(clippy::disallowed_methods)] // the one place that draws random lease tokens
    fn new_token(&self) -> String {
        uuid::Uuid::new_v4().to_string()
    }
}

/// Deterministic version-4-shaped UUIDs from a seed, for tests and simulations: the same seed
/// gives the same sequence of tokens.
#[derive(Debug)]
pub struct SeededTokens {
    state: AtomicU64,
}

impl SeededTokens {
    /// A source whose sequence is determined by `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: AtomicU64::new(seed) }
    }

    /// SplitMix64: a small, well-distributed generator (Steele, Lea, Flood 2014).
    fn next_u64(&self) -> u64 {
        let mut z = self
            .state
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl TokenSource for SeededTokens {
    fn new_token(&self) -> String {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&self.next_u64().to_be_bytes());
        bytes[8..].copy_from_slice(&self.next_u64().to_be_bytes());
        uuid::Builder::from_random_bytes(bytes).into_uuid().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::InMemoryStore;

    fn is_canonical_uuid(token: &str) -> bool {
        token.len() == 36
            && token.char_indices().all(|(i, c)| match i {
                8 | 13 | 18 | 23 => c == '-',
                _ => c.is_ascii_digit() || ('a'..='f').contains(&c),
            })
    }

    #[test]
    fn tokens_are_canonical_lower_case_uuids() {
        // Addendum §5.3: a random UUID in the canonical lower-case 36-character form.
        let random = RandomTokens;
        let (a, b) = (random.new_token(), random.new_token());
        assert!(is_canonical_uuid(&a) && is_canonical_uuid(&b) && a != b, "{a} {b}");
        let seeded = SeededTokens::new(42);
        let tokens: Vec<String> = (0..100).map(|_| seeded.new_token()).collect();
        assert!(tokens.iter().all(|t| is_canonical_uuid(t)));
        let unique: std::collections::HashSet<&String> = tokens.iter().collect();
        assert_eq!(unique.len(), tokens.len());
        let replay = SeededTokens::new(42);
        assert_eq!(replay.new_token(), tokens[0], "the same seed gives the same tokens");
        assert_ne!(SeededTokens::new(43).new_token(), tokens[0]);
    }

    #[tokio::test]
    async fn tokens_that_the_drain_could_not_list_are_refused() {
        let store = InMemoryStore::new();
        let session = store.open_session(Duration::from_secs(10)).await.unwrap();
        for bad in ["", "a/b", "\u{FFFF}", "\u{1F600}"] {
            let err = acquire(&store, &session, LogId(7), bad).await.unwrap_err();
            assert!(matches!(err, LeaseError::Meta(MetaError::InvalidRequest(_))), "{bad:?}: {err}");
            assert_eq!(err.class(), ErrorClass::InvalidInput);
        }
        assert!(list_leases(&store, LogId(7)).await.unwrap().is_empty());
    }

    /// A store whose fence reads fail, and whose first deletes fail.
    #[derive(Debug)]
    struct Faulty {
        inner: InMemoryStore,
        fail_fence_reads: bool,
        failing_deletes: std::sync::atomic::AtomicU32,
        /// How many lease records of the log existed at each fence read.
        leases_at_fence_read: std::sync::Mutex<Vec<usize>>,
    }

    impl Faulty {
        fn new(fail_fence_reads: bool, failing_deletes: u32) -> Self {
            let inner = InMemoryStore::new();
            let leases_at_fence_read = std::sync::Mutex::default();
            Self { inner, fail_fence_reads, failing_deletes: failing_deletes.into(), leases_at_fence_read }
        }
    }

    #[async_trait::async_trait]
    impl MetaStore for Faulty {
        async fn get_cmp(
            &self,
            p: &str,
            key: &str,
            cmp: crate::Comparison,
        ) -> MetaResult<Option<crate::Record>> {
            if key.starts_with("/stream-write-fences/") {
                let leases = list_leases(&self.inner, LogId(7)).await?.len();
                self.leases_at_fence_read.lock().unwrap().push(leases);
                if self.fail_fence_reads {
                    return Err(MetaError::Unavailable("injected fence read failure".into()));
                }
            }
            self.inner.get_cmp(p, key, cmp).await
        }
        async fn put(
            &self,
            p: &str,
            key: &str,
            value: Bytes,
            c: PutCondition,
        ) -> MetaResult<crate::WriteResult> {
            self.inner.put(p, key, value, c).await
        }
        async fn delete(&self, p: &str, key: &str) -> MetaResult<bool> {
            let left = self.failing_deletes.load(Ordering::SeqCst);
            if left > 0 {
                self.failing_deletes.store(left - 1, Ordering::SeqCst);
                return Err(MetaError::Unavailable("injected delete failure".into()));
            }
            self.inner.delete(p, key).await
        }
        async fn delete_if_version(&self, p: &str, key: &str, v: crate::Version) -> MetaResult<()> {
            self.inner.delete_if_version(p, key, v).await
        }
        async fn delete_range(&self, p: &str, a: &str, b: &str) -> MetaResult<()> {
            self.inner.delete_range(p, a, b).await
        }
        async fn sequenced_put(
            &self,
            p: &str,
            prefix: &str,
            d: &[u64],
            v: Bytes,
        ) -> MetaResult<crate::WriteResult> {
            self.inner.sequenced_put(p, prefix, d, v).await
        }
        async fn list(&self, p: &str, a: &str, b: &str) -> MetaResult<Vec<String>> {
            self.inner.list(p, a, b).await
        }
        async fn scan(
            &self,
            p: &str,
            a: &str,
            b: &str,
            limit: Option<usize>,
        ) -> MetaResult<Vec<crate::Record>> {
            self.inner.scan(p, a, b, limit).await
        }
        async fn open_session(&self, timeout: Duration) -> MetaResult<Arc<dyn Session>> {
            self.inner.open_session(timeout).await
        }
    }

    // spec-rule: bc3a241078 [Writer, Compactor] If the fence exists, or the Get fails, the implementation…
    #[tokio::test]
    async fn failed_fence_read_deletes_the_lease_record_retrying_the_delete() {
        // Spec "Leases": if the Get of the fence fails, the implementation MUST delete its
        // lease record and MUST NOT change the log. Ursa retries the delete until it succeeds.
        let store = Faulty::new(true, 2);
        let session = store.open_session(Duration::from_secs(10)).await.unwrap();
        let err = acquire(&store, &session, LogId(7), "t").await.unwrap_err();
        assert!(matches!(err, LeaseError::Meta(MetaError::Unavailable(_))), "{err}");
        assert_eq!(err.class(), ErrorClass::Retryable);
        assert_eq!(store.failing_deletes.load(Ordering::SeqCst), 0, "both failed deletes were retried");
        assert!(list_leases(&store, LogId(7)).await.unwrap().is_empty());
        assert!(!session.is_ended(), "the lease record went by the delete, not by ending the session");
    }

    // spec-rule: 915c1bb508 [Writer, Compactor] To acquire a write lease on log L, an implementation MUST,…
    #[tokio::test]
    async fn the_lease_record_exists_before_the_fence_is_read() {
        // Spec "Leases": an implementation MUST, in this order, create its lease record and
        // then read the write fence. Reading first would let a catalog's drain miss the lease.
        let store = Faulty::new(false, 0);
        let session = store.open_session(Duration::from_secs(10)).await.unwrap();
        let lease = acquire(&store, &session, LogId(7), "t").await.unwrap();
        assert_eq!(*store.leases_at_fence_read.lock().unwrap(), [1]);
        lease.release(&store).await.unwrap();
        assert!(list_leases(&store, LogId(7)).await.unwrap().is_empty());
    }

    #[test]
    fn drain_defaults_are_ursas() {
        // Addendum §5.3: poll every 25 ms for up to 30 s.
        let config = DrainConfig::default();
        assert_eq!(
            (config.timeout, config.poll_interval),
            (Duration::from_secs(30), Duration::from_millis(25))
        );
    }

    #[test]
    fn fenced_is_a_conflict() {
        assert_eq!(LeaseError::Fenced { log_id: LogId(7) }.class(), ErrorClass::Conflict);
    }
}
