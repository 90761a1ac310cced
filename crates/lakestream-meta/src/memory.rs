//! [`InMemoryStore`]: the fast, linearizable store for unit tests, shaped like Oxia.
//!
//! - **Virtual shards.** The store has a fixed number of shards (default 1). A partition is
//!   placed on the shard whose hash range holds the low 32 bits of the XXH3-64 hash of the
//!   partition name, with Oxia's standalone ranges (oxia.md §4, §5). Partitions on one shard
//!   share its keyspace: a key is unique per shard, and comparisons, lists and delete-ranges
//!   see every key of the shard, as they do in Oxia.
//! - **Versions** come from a per-shard counter; **timestamps** from the injected [`Clock`].
//! - **Linearizable** by construction: one lock guards every shard and the session table.
//! - **Sessions** are kept alive implicitly; tests end them with
//!   [`InMemoryStore::expire_session`], or simulate a lost connection with
//!   [`InMemoryStore::lose_session`] and move the clock past the deadline.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use lakestream_format::{Clock, SystemClock};
use tokio::sync::watch;

use crate::engine::{self, KeySpace, KeySpaceMut, SessionId, StoredRecord};
use crate::error::{MetaError, MetaResult};
use crate::key_order;
use crate::sessions::{self, EndedSession, SessionTable};
use crate::store::{Comparison, MetaStore, PutCondition, Record, Session, Version, WriteResult};

/// The shard index of `partition` among `shard_count` shards, as Oxia's standalone server
/// splits the 32-bit hash space: shard `i` owns `[i·bucket, i·bucket + bucket − 1]` with
/// `bucket = ⌊0xFFFFFFFF / N⌋ + 1`, and the last shard's range ends at `0xFFFFFFFF`.
pub fn shard_index(partition: &str, shard_count: usize) -> usize {
    let shard_count = shard_count.max(1) as u64;
    let hash = u64::from(xxhash_rust::xxh3::xxh3_64(partition.as_bytes()) as u32);
    let bucket = u64::from(u32::MAX) / shard_count + 1;
    // Both operands are below 2^33, so the quotient fits; the last shard takes the remainder.
    ((hash / bucket).min(shard_count - 1)) as usize
}

/// One virtual shard: an ordered map of encoded keys and the shard's version counter.
#[derive(Debug, Default)]
pub(crate) struct Shard {
    pub(crate) records: BTreeMap<Vec<u8>, StoredRecord>,
    last_version: Version,
}

impl KeySpace for Shard {
    fn get(&self, key: &[u8]) -> MetaResult<Option<StoredRecord>> {
        Ok(self.records.get(key).cloned())
    }

    fn seek(&self, key: &[u8], cmp: Comparison) -> MetaResult<Option<(Vec<u8>, StoredRecord)>> {
        let bounds: (Bound<&[u8]>, Bound<&[u8]>) = match cmp {
            Comparison::Equal => (Bound::Included(key), Bound::Included(key)),
            Comparison::Floor => (Bound::Unbounded, Bound::Included(key)),
            Comparison::Lower => (Bound::Unbounded, Bound::Excluded(key)),
            Comparison::Ceiling => (Bound::Included(key), Bound::Unbounded),
            Comparison::Higher => (Bound::Excluded(key), Bound::Unbounded),
        };
        let mut range = self.records.range::<[u8], _>(bounds);
        let found = match cmp {
            Comparison::Floor | Comparison::Lower => range.next_back(),
            Comparison::Equal | Comparison::Ceiling | Comparison::Higher => range.next(),
        };
        Ok(found.map(|(k, r)| (k.clone(), r.clone())))
    }

    fn range(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: Option<usize>,
    ) -> MetaResult<Vec<(Vec<u8>, StoredRecord)>> {
        let end = end.map_or(Bound::Unbounded, Bound::Excluded);
        let found = self.records.range::<[u8], _>((Bound::Included(start), end));
        Ok(found.take(limit.unwrap_or(usize::MAX)).map(|(k, r)| (k.clone(), r.clone())).collect())
    }
}

impl KeySpaceMut for Shard {
    fn insert(&mut self, key: &[u8], record: &StoredRecord) -> MetaResult<()> {
        self.records.insert(key.to_vec(), record.clone());
        Ok(())
    }

    fn remove(&mut self, key: &[u8]) -> MetaResult<Option<StoredRecord>> {
        Ok(self.records.remove(key))
    }

    fn next_version(&mut self) -> MetaResult<Version> {
        self.last_version += 1;
        Ok(self.last_version)
    }
}

#[derive(Debug)]
struct State {
    shards: Vec<Shard>,
    sessions: SessionTable,
}

impl State {
    /// Removes an ended session's records, then tells its holders.
    fn finish(&mut self, ended: EndedSession) -> MetaResult<()> {
        for (index, shard) in self.shards.iter_mut().enumerate() {
            let keys = ended.ephemeral_keys.iter().filter(|(s, _)| *s == index).map(|(_, k)| k);
            engine::remove_session_records(shard, ended.id, keys)?;
        }
        ended.notify();
        Ok(())
    }

    fn end_expired(&mut self, now_ms: i64) -> MetaResult<usize> {
        let expired = self.sessions.end_expired(now_ms);
        let count = expired.len();
        expired.into_iter().try_for_each(|ended| self.finish(ended))?;
        Ok(count)
    }
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    shard_count: usize,
    clock: Arc<dyn Clock>,
}

/// The in-memory metadata store. Cloning shares the same store.
#[derive(Debug, Clone)]
pub struct InMemoryStore {
    inner: Arc<Inner>,
}

impl Default for InMemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl InMemoryStore {
    /// A store with one shard and the system clock.
    pub fn new() -> Self {
        Self::build(1, Arc::new(SystemClock))
    }

    /// A store with `shard_count` virtual shards whose timestamps and session deadlines come
    /// from `clock`. Fails when `shard_count` is 0.
    pub fn with_config(shard_count: usize, clock: Arc<dyn Clock>) -> MetaResult<Self> {
        if shard_count == 0 {
            return Err(MetaError::InvalidRequest("an in-memory store needs at least one shard".into()));
        }
        Ok(Self::build(shard_count, clock))
    }

    fn build(shard_count: usize, clock: Arc<dyn Clock>) -> Self {
        let shards = (0..shard_count).map(|_| Shard::default()).collect();
        let state = State { shards, sessions: SessionTable::default() };
        Self { inner: Arc::new(Inner { state: Mutex::new(state), shard_count, clock }) }
    }

    /// The number of virtual shards.
    pub fn shard_count(&self) -> usize {
        self.inner.shard_count
    }

    /// The shard `partition` is placed on.
    pub fn shard_of(&self, partition: &str) -> usize {
        shard_index(partition, self.shard_count())
    }

    /// Ends the session with this id now, as if it expired: its ephemeral records are removed
    /// and its `ended` signal fires. Returns whether it was live.
    pub fn expire_session(&self, session_id: &str) -> bool {
        let Some(id) = sessions::parse_session_id(session_id) else { return false };
        self.with_state(|state, _| match state.sessions.end(id) {
            Some(ended) => state.finish(ended).map(|()| true),
            None => Ok(false),
        })
        .unwrap_or(false)
    }

    /// Simulates a client that lost its connection: heartbeats stop now, and the session
    /// expires once the clock passes now + its timeout (on the next operation, or on
    /// [`InMemoryStore::check_session_deadlines`]). Returns whether it was live.
    pub fn lose_session(&self, session_id: &str) -> bool {
        let Some(id) = sessions::parse_session_id(session_id) else { return false };
        self.with_state(|state, now_ms| Ok(state.sessions.stop_heartbeats(id, now_ms))).unwrap_or(false)
    }

    /// Ends the sessions whose deadline the clock has passed. Every operation does this
    /// first; tests that only move the clock call it to fire the `ended` signals.
    /// Returns how many sessions ended.
    pub fn check_session_deadlines(&self) -> MetaResult<usize> {
        let mut state = self.lock()?;
        let now_ms = self.inner.clock.now_ms();
        state.end_expired(now_ms)
    }

    fn lock(&self) -> MetaResult<MutexGuard<'_, State>> {
        self.inner.state.lock().map_err(|_| MetaError::Internal("in-memory store lock poisoned".into()))
    }

    /// Runs `op` under the store's lock, after ending the sessions the clock has expired.
    fn with_state<R>(&self, op: impl FnOnce(&mut State, i64) -> MetaResult<R>) -> MetaResult<R> {
        let mut state = self.lock()?;
        let now_ms = self.inner.clock.now_ms();
        state.end_expired(now_ms)?;
        op(&mut state, now_ms)
    }

    fn with_shard<R>(
        &self,
        partition: &str,
        op: impl FnOnce(&mut Shard, i64) -> MetaResult<R>,
    ) -> MetaResult<R> {
        self.with_state(|state, now_ms| {
            let index = shard_index(partition, state.shards.len());
            op(&mut state.shards[index], now_ms)
        })
    }
}

#[async_trait]
impl MetaStore for InMemoryStore {
    async fn get_cmp(&self, partition: &str, key: &str, cmp: Comparison) -> MetaResult<Option<Record>> {
        self.with_shard(partition, |shard, _| engine::lookup(shard, key, cmp))
    }

    async fn put(
        &self,
        partition: &str,
        key: &str,
        value: Bytes,
        condition: PutCondition,
    ) -> MetaResult<WriteResult> {
        self.with_shard(partition, |shard, now_ms| engine::put(shard, key, value, condition, now_ms, None))
    }

    async fn delete(&self, partition: &str, key: &str) -> MetaResult<bool> {
        self.with_shard(partition, |shard, _| engine::delete(shard, key))
    }

    async fn delete_if_version(&self, partition: &str, key: &str, version: Version) -> MetaResult<()> {
        self.with_shard(partition, |shard, _| engine::delete_if_version(shard, key, version))
    }

    async fn delete_range(&self, partition: &str, start: &str, end: &str) -> MetaResult<()> {
        self.with_shard(partition, |shard, _| engine::delete_range(shard, start, end).map(|_| ()))
    }

    async fn sequenced_put(
        &self,
        partition: &str,
        prefix: &str,
        deltas: &[u64],
        value: Bytes,
    ) -> MetaResult<WriteResult> {
        self.with_shard(partition, |shard, now_ms| {
            engine::sequenced_put(shard, prefix, deltas, value, now_ms)
        })
    }

    /// The put is applied at the call, so puts called one after another commit in that order.
    fn sequenced_puts_commit_in_call_order(&self) -> bool {
        true
    }

    fn sequenced_put_owned(
        self: Arc<Self>,
        partition: String,
        prefix: String,
        deltas: Vec<u64>,
        value: Bytes,
    ) -> futures::future::BoxFuture<'static, MetaResult<WriteResult>> {
        let result = self.with_shard(&partition, |shard, now_ms| {
            engine::sequenced_put(shard, &prefix, &deltas, value, now_ms)
        });
        Box::pin(std::future::ready(result))
    }

    async fn list(&self, partition: &str, start: &str, end: &str) -> MetaResult<Vec<String>> {
        let records = self.with_shard(partition, |shard, _| engine::scan(shard, start, end, None))?;
        Ok(records.into_iter().map(|r| r.key).collect())
    }

    async fn scan(
        &self,
        partition: &str,
        start: &str,
        end: &str,
        limit: Option<usize>,
    ) -> MetaResult<Vec<Record>> {
        self.with_shard(partition, |shard, _| engine::scan(shard, start, end, limit))
    }

    async fn open_session(&self, timeout: Duration) -> MetaResult<Arc<dyn Session>> {
        let timeout_ms = sessions::validate_timeout(timeout)?;
        let (id, ended) = self.with_state(|state, _| Ok(state.sessions.open(timeout_ms)))?;
        Ok(Arc::new(MemorySession { id, store: self.clone(), ended }))
    }
}

/// A session of an [`InMemoryStore`]. Dropping the handle stops its heartbeats: the session
/// then expires after its timeout, as a vanished Oxia client's would.
#[derive(Debug)]
struct MemorySession {
    id: SessionId,
    store: InMemoryStore,
    ended: watch::Receiver<bool>,
}

#[async_trait]
impl Session for MemorySession {
    fn id(&self) -> String {
        self.id.to_string()
    }

    async fn create_ephemeral(&self, partition: &str, key: &str, value: Bytes) -> MetaResult<WriteResult> {
        self.store.with_state(|state, now_ms| {
            state.sessions.require_live(self.id)?;
            let index = shard_index(partition, state.shards.len());
            let written = engine::put(
                &mut state.shards[index],
                key,
                value,
                PutCondition::IfAbsent,
                now_ms,
                Some(self.id),
            )?;
            state.sessions.bind(self.id, (index, key_order::encode(key)?));
            Ok(written)
        })
    }

    fn ended(&self) -> watch::Receiver<bool> {
        // A lost session whose deadline has passed ends here even if nothing else ran; a
        // poisoned lock leaves the signal as it is (the next operation reports the error).
        let _ = self.store.check_session_deadlines();
        self.ended.clone()
    }

    async fn close(&self) -> MetaResult<()> {
        self.store.with_state(|state, _| match state.sessions.end(self.id) {
            Some(ended) => state.finish(ended),
            None => Ok(()),
        })
    }
}

impl Drop for MemorySession {
    fn drop(&mut self) {
        let _ = self.store.with_state(|state, now_ms| Ok(state.sessions.stop_heartbeats(self.id, now_ms)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lakestream_format::ManualClock;

    #[test]
    fn placement_matches_oxia_routing_table() {
        // oxia.md §5.1: shard of each input for N = 2, 3, 4, 8.
        let table = [
            ("foo", [0, 0, 0, 0]),
            ("bar", [1, 1, 2, 5]),
            ("baz", [0, 0, 0, 1]),
            ("0", [1, 2, 2, 5]),
            ("1", [1, 1, 2, 4]),
            ("2", [0, 0, 0, 1]),
            ("3", [0, 1, 1, 3]),
            ("7", [1, 2, 2, 5]),
            ("42", [1, 2, 3, 6]),
            ("100", [0, 0, 0, 0]),
        ];
        for (partition, shards) in table {
            for (n, expected) in [2, 3, 4, 8].into_iter().zip(shards) {
                assert_eq!(shard_index(partition, n), expected, "partition {partition:?}, {n} shards");
            }
        }
        assert_eq!(xxhash_rust::xxh3::xxh3_64(b"7") as u32, 3_089_270_266);
        assert_eq!(shard_index("anything", 1), 0);
    }

    #[tokio::test]
    async fn co_located_partitions_share_keys_and_lookups() {
        // Spec "Metadata store model": a store can keep several partitions together, so a
        // lookup in one partition can return a record of another. "2" and "baz" share shard 0 of 2.
        let store = InMemoryStore::with_config(2, Arc::new(ManualClock::new(1))).unwrap();
        assert_eq!(store.shard_of("2"), store.shard_of("baz"));
        store.put("2", "k-2", Bytes::from_static(b"a"), PutCondition::None).await.unwrap();
        store.put("baz", "k-3", Bytes::from_static(b"b"), PutCondition::None).await.unwrap();
        let higher = store.get_cmp("2", "k-2", Comparison::Higher).await.unwrap().unwrap();
        assert_eq!(higher.key, "k-3");
        // Keys are unique per shard: the same key through another co-located partition is the same record.
        assert_eq!(store.get("baz", "k-2").await.unwrap().unwrap().value, Bytes::from_static(b"a"));
        // A partition on the other shard sees none of it.
        assert_ne!(store.shard_of("7"), store.shard_of("2"));
        assert!(store.get("7", "k-2").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn versions_count_per_shard_and_timestamps_come_from_the_clock() {
        let clock = ManualClock::new(1_000);
        let store = InMemoryStore::with_config(2, Arc::new(clock.clone())).unwrap();
        let a = store.put("2", "a", Bytes::new(), PutCondition::None).await.unwrap();
        clock.advance_ms(5);
        let b = store.put("7", "b", Bytes::new(), PutCondition::None).await.unwrap();
        assert_eq!((a.version, b.version), (1, 1), "each shard has its own counter");
        assert_eq!((a.created_ms, b.created_ms), (1_000, 1_005));
    }

    #[tokio::test]
    async fn lost_session_expires_when_the_clock_passes_its_deadline() {
        // Spec "Sessions": an ephemeral record exists until the session that created it ends.
        let clock = ManualClock::new(0);
        let store = InMemoryStore::with_config(1, Arc::new(clock.clone())).unwrap();
        let session = store.open_session(Duration::from_secs(10)).await.unwrap();
        session.create_ephemeral("7", "/e/7/x", Bytes::new()).await.unwrap();
        assert!(store.lose_session(&session.id()));
        clock.advance_ms(9_999);
        assert!(!*session.ended().borrow());
        assert!(store.get("7", "/e/7/x").await.unwrap().is_some());
        clock.advance_ms(1);
        assert_eq!(store.check_session_deadlines().unwrap(), 1);
        assert!(*session.ended().borrow());
        assert!(store.get("7", "/e/7/x").await.unwrap().is_none());
        let refused = session.create_ephemeral("7", "/e/7/y", Bytes::new()).await.unwrap_err();
        assert!(matches!(refused, MetaError::SessionEnded(_)));
    }

    #[tokio::test]
    async fn dropped_session_handle_expires_after_its_timeout() {
        let clock = ManualClock::new(0);
        let store = InMemoryStore::with_config(1, Arc::new(clock.clone())).unwrap();
        let session = store.open_session(Duration::from_secs(2)).await.unwrap();
        session.create_ephemeral("7", "/e/7/x", Bytes::new()).await.unwrap();
        drop(session);
        assert!(store.get("7", "/e/7/x").await.unwrap().is_some());
        clock.advance_ms(2_000);
        assert!(store.get("7", "/e/7/x").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn zero_shards_and_bad_timeouts_are_refused() {
        assert!(matches!(
            InMemoryStore::with_config(0, Arc::new(SystemClock)),
            Err(MetaError::InvalidRequest(_))
        ));
        let store = InMemoryStore::new();
        assert!(matches!(
            store.open_session(Duration::from_millis(10)).await,
            Err(MetaError::InvalidRequest(_))
        ));
    }
}
