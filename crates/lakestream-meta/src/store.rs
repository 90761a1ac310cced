//! The metadata-store model of the spec ("Metadata store model") as an async trait.
//!
//! A store is a linearizable key-value store divided into partitions. Keys are UTF-8
//! strings, values are bytes. Every record has a version that changes on each write and a
//! creation timestamp that is kept when the value is replaced. Ephemeral records belong to a
//! [`Session`] and vanish when it ends.
//!
//! A store may keep several partitions together (Oxia keeps many on one shard), so lookups
//! such as [`Comparison::Higher`] and [`MetaStore::delete_range`] act on every key that shares
//! the partition's placement. Callers bracket their ranges and check key prefixes.
//!
//! Key order within a partition is Oxia's hierarchical order (see [`crate::key_order`]):
//! keys without `/` compare bytewise and sort before every key with `/`.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::watch;

use crate::error::MetaResult;

/// A record version. Every successful write of a record gives it a new, greater version
/// (in Oxia a shard-wide counter, so versions of different keys are comparable per shard).
pub type Version = i64;

/// A record as a read returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The record's key (for comparison lookups, the key that was found).
    pub key: String,
    /// The record's value.
    pub value: Bytes,
    /// The record's version.
    pub version: Version,
    /// When the record was created, in ms since the Unix epoch. Kept on overwrite.
    pub created_ms: i64,
    /// When the record was last written, in ms since the Unix epoch.
    pub modified_ms: i64,
}

/// What a successful write returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteResult {
    /// The key written (for a sequenced put, the key the store derived).
    pub key: String,
    /// The record's new version.
    pub version: Version,
    /// The record's creation timestamp, in ms since the Unix epoch.
    pub created_ms: i64,
    /// The record's modification timestamp, in ms since the Unix epoch.
    pub modified_ms: i64,
}

/// The condition of a [`MetaStore::put`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutCondition {
    /// Create the key, or replace its value unconditionally (the spec's `Put`).
    None,
    /// Create the key only if it does not exist (the spec's `CreateIfAbsent`); otherwise
    /// fail with [`crate::MetaError::KeyExists`].
    IfAbsent,
    /// Replace the key only if its current version is this one (the spec's `CompareAndSet`);
    /// fail with [`crate::MetaError::VersionMismatch`] otherwise, including when it is absent.
    IfVersion(Version),
}

/// How a [`MetaStore::get_cmp`] lookup compares keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    /// The record with exactly this key.
    Equal,
    /// The record with the greatest key `<=` the given key.
    Floor,
    /// The record with the smallest key `>=` the given key.
    Ceiling,
    /// The record with the greatest key `<` the given key.
    Lower,
    /// The record with the smallest key `>` the given key.
    Higher,
}

/// The spec's metadata store: every primitive acts atomically on one partition, and the
/// operations on each partition are linearizable.
///
/// `partition` is the partition name (for log `L`, `P(L)` = the decimal `L`). Ranges are
/// `[start, end)` in the store's key order. Implementations must be cheap to share
/// (`Arc<dyn MetaStore>`).
#[async_trait]
pub trait MetaStore: Send + Sync + Debug {
    /// `Get(P, k)`: the record with exactly this key, or `None`.
    async fn get(&self, partition: &str, key: &str) -> MetaResult<Option<Record>> {
        self.get_cmp(partition, key, Comparison::Equal).await
    }

    /// A lookup by comparison (`Floor`, `Ceiling`, `Lower`, `Higher`, or `Equal`). The record
    /// found may belong to another partition placed with this one: callers check the prefix.
    async fn get_cmp(&self, partition: &str, key: &str, cmp: Comparison) -> MetaResult<Option<Record>>;

    /// `Put`, `CreateIfAbsent` or `CompareAndSet`, by `condition`. Replacing a value keeps the
    /// record's creation timestamp and gives it a new version.
    async fn put(
        &self,
        partition: &str,
        key: &str,
        value: Bytes,
        condition: PutCondition,
    ) -> MetaResult<WriteResult>;

    /// `Delete(P, k)`: removes the key if present. Returns whether it existed.
    async fn delete(&self, partition: &str, key: &str) -> MetaResult<bool>;

    /// A conditional `Delete(P, k)`: removes the key only while its version is `version`
    /// (Oxia's `expected_version_id` on a delete). A record at another version, or none, is
    /// [`MetaError::VersionMismatch`](crate::MetaError::VersionMismatch) and nothing is removed, so a record rewritten since it
    /// was read is never lost to a delete decided on the old value.
    async fn delete_if_version(&self, partition: &str, key: &str, version: Version) -> MetaResult<()>;

    /// `DeleteRange(P, a, b)`: removes every record with `start <= key < end` placed with the
    /// partition. Both bounds must be non-empty.
    async fn delete_range(&self, partition: &str, start: &str, end: &str) -> MetaResult<()>;

    /// Whether [`MetaStore::sequenced_put_owned`] issues the put when it is *called* (before
    /// the returned future is first polled), so that puts of one sequence called one after
    /// another commit in that order: a caller may then keep several in flight and still get
    /// its keys in call order. Default: no (the writer then keeps one put per log in flight).
    fn sequenced_puts_commit_in_call_order(&self) -> bool {
        false
    }

    /// [`MetaStore::sequenced_put`] with owned arguments, for a caller that keeps the future
    /// (a pipeline of puts). Stores for which [`MetaStore::sequenced_puts_commit_in_call_order`]
    /// holds issue the put here, at the call; the default issues it when first polled.
    fn sequenced_put_owned(
        self: Arc<Self>,
        partition: String,
        prefix: String,
        deltas: Vec<u64>,
        value: Bytes,
    ) -> futures::future::BoxFuture<'static, MetaResult<WriteResult>>
    where
        Self: 'static,
    {
        Box::pin(async move { self.sequenced_put(&partition, &prefix, &deltas, value).await })
    }

    /// `SequencedPut(P, p, d1, d2, …, v)`: in one atomic step, take the greatest existing key
    /// `{prefix}-{x1:020}-{x2:020}…` placed with the partition (all zeros if none), and create
    /// `{prefix}-{x1+d1:020}-{x2+d2:020}…` with `value`. `deltas[0]` must be > 0; the others
    /// may be 0. Takes no condition. Returns the created key, its version and timestamps.
    ///
    /// A failure after the request was sent is reported as
    /// [`crate::MetaError::OutcomeUnknown`]: the record may have been created.
    async fn sequenced_put(
        &self,
        partition: &str,
        prefix: &str,
        deltas: &[u64],
        value: Bytes,
    ) -> MetaResult<WriteResult>;

    /// `List(P, a, b)`: the keys with `start <= key < end`, in key order. An empty `end`
    /// means "to the end" (as in Oxia).
    async fn list(&self, partition: &str, start: &str, end: &str) -> MetaResult<Vec<String>>;

    /// `Scan(P, a, b)`: the records with `start <= key < end`, in key order, at most `limit`
    /// of them when given. An empty `end` means "to the end" (as in Oxia).
    async fn scan(
        &self,
        partition: &str,
        start: &str,
        end: &str,
        limit: Option<usize>,
    ) -> MetaResult<Vec<Record>>;

    /// Opens a session that lives while it is kept alive (the store does that in the
    /// background) and ends when closed or when `timeout` passes without a keep-alive.
    async fn open_session(&self, timeout: Duration) -> MetaResult<Arc<dyn Session>>;
}

/// A client session with the store. Ephemeral records created through it exist until the
/// session ends. Holders (writers, compactors) watch [`Session::ended`] and stop changing the
/// records they guard as soon as it fires.
#[async_trait]
pub trait Session: Send + Sync + Debug {
    /// A printable identifier of the session, for logs.
    fn id(&self) -> String;

    /// `CreateIfAbsent(P, k, v, ephemeral)`: creates `key` bound to this session, only if it
    /// does not exist. Fails with [`crate::MetaError::SessionEnded`] once the session ended.
    async fn create_ephemeral(&self, partition: &str, key: &str, value: Bytes) -> MetaResult<WriteResult>;

    /// A receiver whose value becomes `true` once the session has ended (closed, expired, or
    /// lost). Never goes back to `false`.
    fn ended(&self) -> watch::Receiver<bool>;

    /// Whether the session has ended.
    fn is_ended(&self) -> bool {
        *self.ended().borrow()
    }

    /// Closes the session; its ephemeral records are removed. Idempotent.
    async fn close(&self) -> MetaResult<()>;
}
