//! [`RacingStore`]: a [`MetaStore`] wrapper that makes chosen conditional writes lose real
//! races (feature `testkit`), for tests of compare-and-set loops and of how a lost race is
//! reported.
//!
//! Nothing is faked: before a conditional put it takes, another writer really rewrites the
//! record (the same value, so only the version changes; or, for a create, the value being
//! created), so the put finds another version — or an existing key — exactly as it would
//! against a concurrent process.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::{MetaError, MetaResult};
use crate::store::{Comparison, MetaStore, PutCondition, Record, Session, Version, WriteResult};

/// Forwards to the inner store, except that the next conditional puts under a key prefix
/// lose a race ([`RacingStore::race`]) or lose their answer ([`RacingStore::lose_answers`]).
#[derive(Debug)]
pub struct RacingStore {
    inner: Arc<dyn MetaStore>,
    races: Mutex<Option<(String, u64)>>,
    lost_answers: Mutex<Option<(String, u64)>>,
    /// When each conditional put under a raced prefix was made (tokio's clock).
    put_times: Mutex<Vec<tokio::time::Instant>>,
}

impl RacingStore {
    /// A wrapper of `inner` that races nothing yet.
    pub fn new(inner: Arc<dyn MetaStore>) -> Arc<Self> {
        Arc::new(RacingStore {
            inner,
            races: Mutex::new(None),
            lost_answers: Mutex::new(None),
            put_times: Mutex::new(Vec::new()),
        })
    }

    /// The next `count` conditional puts of keys starting with `key_prefix` lose to a
    /// concurrent writer (`u64::MAX`: every one). Replaces an earlier setting.
    pub fn race(&self, key_prefix: &str, count: u64) {
        *lock(&self.races) = Some((key_prefix.to_owned(), count));
        lock(&self.put_times).clear();
    }

    /// The next `count` conditional puts of keys starting with `key_prefix` take effect, but
    /// their answer is lost ([`MetaError::OutcomeUnknown`]).
    pub fn lose_answers(&self, key_prefix: &str, count: u64) {
        *lock(&self.lost_answers) = Some((key_prefix.to_owned(), count));
    }

    /// When the conditional puts under the prefix last given to [`RacingStore::race`] were
    /// made, on tokio's clock (paused in tests that check pauses).
    pub fn put_times(&self) -> Vec<tokio::time::Instant> {
        lock(&self.put_times).clone()
    }

    fn take(slot: &Mutex<Option<(String, u64)>>, key: &str) -> Option<bool> {
        let mut guard = lock(slot);
        let (prefix, count) = guard.as_mut()?;
        if !key.starts_with(prefix.as_str()) {
            return None;
        }
        if *count == 0 {
            return Some(false);
        }
        *count -= 1;
        Some(true)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[async_trait]
impl MetaStore for RacingStore {
    async fn get_cmp(&self, partition: &str, key: &str, cmp: Comparison) -> MetaResult<Option<Record>> {
        self.inner.get_cmp(partition, key, cmp).await
    }

    async fn put(
        &self,
        partition: &str,
        key: &str,
        value: Bytes,
        condition: PutCondition,
    ) -> MetaResult<WriteResult> {
        if condition == PutCondition::None {
            return self.inner.put(partition, key, value, condition).await;
        }
        if let Some(race) = RacingStore::take(&self.races, key) {
            lock(&self.put_times).push(tokio::time::Instant::now());
            if race {
                // The concurrent writer: same value (or, creating, the value being created).
                let theirs = match self.inner.get(partition, key).await? {
                    Some(current) => current.value,
                    None => value.clone(),
                };
                self.inner.put(partition, key, theirs, PutCondition::None).await?;
            }
        }
        if RacingStore::take(&self.lost_answers, key) == Some(true) {
            let landed = self.inner.put(partition, key, value, condition).await?;
            return Err(MetaError::OutcomeUnknown(format!(
                "the answer to the put of {key} (version {}) was lost",
                landed.version
            )));
        }
        self.inner.put(partition, key, value, condition).await
    }

    async fn delete(&self, partition: &str, key: &str) -> MetaResult<bool> {
        self.inner.delete(partition, key).await
    }

    async fn delete_if_version(&self, partition: &str, key: &str, version: Version) -> MetaResult<()> {
        self.inner.delete_if_version(partition, key, version).await
    }

    async fn delete_range(&self, partition: &str, start: &str, end: &str) -> MetaResult<()> {
        self.inner.delete_range(partition, start, end).await
    }

    async fn sequenced_put(
        &self,
        partition: &str,
        prefix: &str,
        deltas: &[u64],
        value: Bytes,
    ) -> MetaResult<WriteResult> {
        self.inner.sequenced_put(partition, prefix, deltas, value).await
    }

    async fn list(&self, partition: &str, start: &str, end: &str) -> MetaResult<Vec<String>> {
        self.inner.list(partition, start, end).await
    }

    async fn scan(
        &self,
        partition: &str,
        start: &str,
        end: &str,
        limit: Option<usize>,
    ) -> MetaResult<Vec<Record>> {
        self.inner.scan(partition, start, end, limit).await
    }

    async fn open_session(&self, timeout: Duration) -> MetaResult<Arc<dyn Session>> {
        self.inner.open_session(timeout).await
    }
}
