//! A front end's own records: the narrow handle through which a protocol front end keeps
//! state the service layer has no operation for (the Kafka front end's broker registry and
//! consumer-group records, for instance).
//!
//! A [`StateStore`] reaches one metadata partition, `lakestream-{name}`, and only keys under
//! `/lakestream-{name}/`; a key outside that prefix is refused. It offers what such state
//! needs — reads, conditional writes, deletes, range scans, and sessions whose ephemeral
//! records vanish when the process dies — and nothing of the streams: their records, leases
//! and offsets are reached only through the operations of [`crate::Api`].
//!
//! ```text
//! partition             keys
//! lakestream-{name}     /lakestream-{name}/…
//! ```

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
pub use lakestream_meta::{MetaError as StateError, PutCondition, Record, Version, WriteResult};
use lakestream_meta::{MetaStore, Session};

use crate::api::{ApiError, ApiResult, ErrorKind};

/// The records of one front end (see the module).
#[derive(Clone)]
pub struct StateStore {
    meta: Arc<dyn MetaStore>,
    partition: String,
    prefix: String,
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore").field("partition", &self.partition).finish()
    }
}

impl StateStore {
    /// The records of the front end `name` (lower-case letters, digits and `-`) in `meta`.
    pub fn new(meta: Arc<dyn MetaStore>, name: &str) -> ApiResult<StateStore> {
        let valid = !name.is_empty()
            && name.len() <= 32
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !valid {
            return Err(ApiError::new(
                ErrorKind::Internal,
                format!("front-end state name {name:?}: lower-case letters, digits and '-', at most 32"),
            ));
        }
        Ok(StateStore {
            meta,
            partition: format!("lakestream-{name}"),
            prefix: format!("/lakestream-{name}/"),
        })
    }

    /// The prefix every key of this store starts with: `/lakestream-{name}/`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn check(&self, key: &str) -> Result<(), StateError> {
        if key.starts_with(&self.prefix) {
            Ok(())
        } else {
            Err(StateError::InvalidRequest(format!(
                "key {key:?} is outside this front end's records ({})",
                self.prefix
            )))
        }
    }

    /// The record at `key`, if any.
    pub async fn get(&self, key: &str) -> Result<Option<Record>, StateError> {
        self.check(key)?;
        self.meta.get(&self.partition, key).await
    }

    /// Writes `value` at `key` if `condition` holds.
    pub async fn put(
        &self,
        key: &str,
        value: Bytes,
        condition: PutCondition,
    ) -> Result<WriteResult, StateError> {
        self.check(key)?;
        self.meta.put(&self.partition, key, value, condition).await
    }

    /// Deletes the record at `key`; whether it existed.
    pub async fn delete(&self, key: &str) -> Result<bool, StateError> {
        self.check(key)?;
        self.meta.delete(&self.partition, key).await
    }

    /// The records with keys in `[from, to)` (both under this store's prefix), in the
    /// metadata store's key order, at most `limit`. The partition holds only this front end's
    /// records, so a range cannot reach another's.
    pub async fn scan(&self, from: &str, to: &str, limit: Option<usize>) -> Result<Vec<Record>, StateError> {
        self.check(from)?;
        self.check(to)?;
        self.meta.scan(&self.partition, from, to, limit).await
    }

    /// A session of this process: its ephemeral records are deleted when it ends (closed, or
    /// not kept alive for `timeout` because the process died).
    pub async fn open_session(&self, timeout: Duration) -> Result<StateSession, StateError> {
        let session = self.meta.open_session(timeout).await?;
        Ok(StateSession { session, store: self.clone() })
    }
}

/// A session of a [`StateStore`] (see [`StateStore::open_session`]).
#[derive(Clone)]
pub struct StateSession {
    session: Arc<dyn Session>,
    store: StateStore,
}

impl std::fmt::Debug for StateSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateSession").field("id", &self.session.id()).finish()
    }
}

impl StateSession {
    /// The session's id.
    pub fn id(&self) -> String {
        self.session.id()
    }

    /// Creates `key` with `value`, to be deleted when this session ends; fails with
    /// [`StateError::KeyExists`] when the key exists.
    pub async fn create_ephemeral(&self, key: &str, value: Bytes) -> Result<WriteResult, StateError> {
        self.store.check(key)?;
        self.session.create_ephemeral(&self.store.partition, key, value).await
    }

    /// Whether the session has ended.
    pub fn is_ended(&self) -> bool {
        self.session.is_ended()
    }

    /// Turns true when the session ends.
    pub fn ended(&self) -> tokio::sync::watch::Receiver<bool> {
        self.session.ended()
    }

    /// Ends the session: its ephemeral records are deleted now.
    pub async fn close(&self) -> Result<(), StateError> {
        self.session.close().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> StateStore {
        StateStore::new(Arc::new(lakestream_meta::InMemoryStore::new()), "proto").unwrap()
    }

    #[tokio::test]
    async fn a_front_end_reaches_only_its_own_keys() {
        let s = store();
        assert_eq!(s.prefix(), "/lakestream-proto/");
        s.put("/lakestream-proto/a", Bytes::from_static(b"1"), PutCondition::IfAbsent).await.unwrap();
        assert_eq!(s.get("/lakestream-proto/a").await.unwrap().unwrap().value.as_ref(), b"1");
        for key in ["/lakestream-other/a", "/lakestream-proto", "a", "/00000000000000000001/index"] {
            assert!(matches!(s.get(key).await, Err(StateError::InvalidRequest(_))), "{key}");
            let put = s.put(key, Bytes::new(), PutCondition::None).await;
            assert!(matches!(put, Err(StateError::InvalidRequest(_))), "{key}");
        }
        let all = s.scan("/lakestream-proto/", "/lakestream-proto/\u{10FFFF}", None).await.unwrap();
        assert_eq!(all.len(), 1);
        assert!(s.scan("/lakestream-proto/", "\u{10FFFF}", None).await.is_err());
        assert!(StateStore::new(Arc::new(lakestream_meta::InMemoryStore::new()), "Bad Name").is_err());
    }

    #[tokio::test]
    async fn ephemeral_records_go_with_their_session() {
        let s = store();
        let session = s.open_session(Duration::from_secs(10)).await.unwrap();
        session.create_ephemeral("/lakestream-proto/me", Bytes::from_static(b"x")).await.unwrap();
        assert!(session.create_ephemeral("/lakestream-elsewhere/me", Bytes::new()).await.is_err());
        session.close().await.unwrap();
        assert!(s.get("/lakestream-proto/me").await.unwrap().is_none());
    }
}
