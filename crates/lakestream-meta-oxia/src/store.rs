//! [`OxiaStore`]: the spec's metadata store on Oxia (oxia.md §14).
//!
//! Every primitive is routed by its partition: `S(P)` is the shard whose range holds the hash
//! of `P`. Writes go on that shard's ordered write stream, reads name the shard.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use lakestream_format::{Clock, SystemClock};
use lakestream_meta::{
    Comparison, MetaError, MetaResult, MetaStore, PutCondition, Record, Session, Version, WriteResult,
};

use crate::client::OxiaClient;
use crate::config::{MAX_SESSION_TIMEOUT, MIN_SESSION_TIMEOUT, OxiaConfig};
use crate::requests::{
    delete_if_version_request, delete_range_request, delete_request, is_internal_key, list_request,
    put_request, range_scan_request, read_request, sequenced_put_request, write_delete, write_delete_range,
    write_put,
};
use crate::responses::{
    delete_if_version_outcome, delete_outcome, delete_range_outcome, get_outcome, put_outcome, record,
    sequenced_put_outcome, single_put,
};
use crate::session::OxiaSession;

/// Numbers the key-order probes of one process, so concurrent ones use distinct keys.
static KEY_ORDER_PROBES: AtomicU64 = AtomicU64::new(0);

/// The Lakestream metadata store on an Oxia cluster. Cheap to clone.
#[derive(Debug, Clone)]
pub struct OxiaStore {
    client: OxiaClient,
    clock: Arc<dyn Clock>,
    sessions_opened: Arc<AtomicU64>,
}

impl OxiaStore {
    /// Connects with `config` and the system clock, and checks that the namespace sorts keys
    /// hierarchically (see [`OxiaStore::check_key_order`]).
    pub async fn connect(config: OxiaConfig) -> MetaResult<Self> {
        let store = Self::new(OxiaClient::connect(config).await?, Arc::new(SystemClock));
        store.check_key_order().await?;
        Ok(store)
    }

    /// Lakestream needs Oxia's hierarchical key order (`--key-sorting=hierarchical`, the
    /// default of v0.15+): the catalog lists a directory's direct children with
    /// `List("{dir}/", "{dir}//")`, which under natural (bytewise) order returns nothing.
    /// Probes the namespace with two records under a partition of its own and refuses a
    /// namespace that sorts otherwise, naming the setting.
    pub async fn check_key_order(&self) -> MetaResult<()> {
        const PARTITION: &str = "lakestream-key-order-probe";
        let run = format!(
            "/lakestream-key-order-probe/{}-{}-{}",
            self.clock.now_ms(),
            std::process::id(),
            KEY_ORDER_PROBES.fetch_add(1, Ordering::Relaxed)
        );
        let (child, grandchild) = (format!("{run}/b"), format!("{run}/a/deeper"));
        for key in [&child, &grandchild] {
            self.put(PARTITION, key, Bytes::new(), PutCondition::None).await?;
        }
        let listed = self.list(PARTITION, &format!("{run}/"), &format!("{run}//")).await;
        // Cleaned up whatever the answer: the probe must not leave records behind. (One
        // delete each: in hierarchical order no single range holds two depths.)
        for key in [&child, &grandchild] {
            self.delete(PARTITION, key).await?;
        }
        let listed = listed?;
        if listed == [child] {
            return Ok(());
        }
        Err(MetaError::InvalidRequest(format!(
            "Oxia namespace `{}` does not sort keys hierarchically (List of a directory's \
             children returned {listed:?}): Lakestream needs `--key-sorting=hierarchical`, the \
             default of Oxia v0.15 and later",
            self.client.config().namespace
        )))
    }

    /// A store over a connected client; `clock` times session expiry.
    pub fn new(client: OxiaClient, clock: Arc<dyn Clock>) -> Self {
        Self { client, clock, sessions_opened: Arc::new(AtomicU64::new(0)) }
    }

    /// The client underneath, for Oxia-specific calls.
    pub fn client(&self) -> &OxiaClient {
        &self.client
    }

    /// Opens a session with the configured default timeout.
    pub async fn open_default_session(&self) -> MetaResult<Arc<dyn Session>> {
        self.open_session(self.client.config().session_timeout).await
    }
}

#[async_trait]
impl MetaStore for OxiaStore {
    async fn get_cmp(&self, partition: &str, key: &str, cmp: Comparison) -> MetaResult<Option<Record>> {
        let shard = self.client.shard_for(partition)?;
        let gets = self.client.read(shard, read_request(shard, key, cmp)?).await?;
        let [get] = <[_; 1]>::try_from(gets).map_err(|gets: Vec<_>| {
            MetaError::Internal(format!("get of {key}: {} results for one lookup", gets.len()))
        })?;
        get_outcome(key, cmp == Comparison::Equal, get)
    }

    async fn put(
        &self,
        partition: &str,
        key: &str,
        value: Bytes,
        condition: PutCondition,
    ) -> MetaResult<WriteResult> {
        let request = put_request(partition, key, value, condition)?;
        let shard = self.client.shard_for(partition)?;
        let response = self.client.write_or_error(shard, write_put(shard, request)).await?;
        put_outcome(key, condition, &single_put(response, key)?)
    }

    async fn delete(&self, partition: &str, key: &str) -> MetaResult<bool> {
        let request = delete_request(partition, key)?;
        let shard = self.client.shard_for(partition)?;
        let response = self.client.write_or_error(shard, write_delete(shard, request)).await?;
        delete_outcome(key, response)
    }

    async fn delete_if_version(&self, partition: &str, key: &str, version: Version) -> MetaResult<()> {
        let request = delete_if_version_request(partition, key, version)?;
        let shard = self.client.shard_for(partition)?;
        let response = self.client.write_or_error(shard, write_delete(shard, request)).await?;
        delete_if_version_outcome(key, version, response)
    }

    async fn delete_range(&self, partition: &str, start: &str, end: &str) -> MetaResult<()> {
        let request = delete_range_request(start, end)?;
        let shard = self.client.shard_for(partition)?;
        let response = self.client.write_or_error(shard, write_delete_range(shard, request)).await?;
        delete_range_outcome(start, end, response)
    }

    /// Not an `async fn`: the put is queued on its shard's ordered write stream when this is
    /// *called*, so sequenced puts issued one after another commit in that order, however the
    /// returned futures are later polled (oxia.md §6).
    fn sequenced_put<'life0, 'life1, 'life2, 'life3, 'async_trait>(
        &'life0 self,
        partition: &'life1 str,
        prefix: &'life2 str,
        deltas: &'life3 [u64],
        value: Bytes,
    ) -> Pin<Box<dyn Future<Output = MetaResult<WriteResult>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        'life3: 'async_trait,
        Self: 'async_trait,
    {
        // Validated before routing: a malformed sequenced put never reaches the server.
        let queued = sequenced_put_request(partition, prefix, deltas, value).and_then(|request| {
            let shard = self.client.shard_for(partition)?;
            Ok(self.client.write_or_error(shard, write_put(shard, request)))
        });
        Box::pin(async move {
            let response = queued?.await?;
            sequenced_put_outcome(prefix, &single_put(response, prefix)?)
        })
    }

    /// Puts are queued on their shard's ordered write stream at the call (see above).
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
        let queued = sequenced_put_request(&partition, &prefix, &deltas, value).and_then(|request| {
            let shard = self.client.shard_for(&partition)?;
            Ok(self.client.write_or_error(shard, write_put(shard, request)))
        });
        Box::pin(async move {
            let response = queued?.await?;
            sequenced_put_outcome(&prefix, &single_put(response, &prefix)?)
        })
    }

    async fn list(&self, partition: &str, start: &str, end: &str) -> MetaResult<Vec<String>> {
        let shard = self.client.shard_for(partition)?;
        let mut keys = self.client.list(shard, list_request(shard, start, end)).await?;
        // Servers before v0.15 can return their internal keys from wide ranges.
        keys.retain(|key| !is_internal_key(key));
        Ok(keys)
    }

    async fn scan(
        &self,
        partition: &str,
        start: &str,
        end: &str,
        limit: Option<usize>,
    ) -> MetaResult<Vec<Record>> {
        let shard = self.client.shard_for(partition)?;
        let responses = self.client.range_scan(shard, range_scan_request(shard, start, end), limit).await?;
        let mut records = Vec::with_capacity(responses.len());
        for response in responses {
            let record = record(None, response)?;
            if !is_internal_key(&record.key) {
                records.push(record);
            }
            if limit.is_some_and(|limit| records.len() >= limit) {
                break;
            }
        }
        Ok(records)
    }

    async fn open_session(&self, timeout: Duration) -> MetaResult<Arc<dyn Session>> {
        if !(MIN_SESSION_TIMEOUT..=MAX_SESSION_TIMEOUT).contains(&timeout) {
            return Err(MetaError::InvalidRequest(format!(
                "session timeout {timeout:?} is outside Oxia's range 2 s ..= 300 s"
            )));
        }
        let number = self.sessions_opened.fetch_add(1, Ordering::Relaxed) + 1;
        Ok(Arc::new(OxiaSession::new(self.client.clone(), Arc::clone(&self.clock), timeout, number)))
    }
}
