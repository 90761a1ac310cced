//! A [`MetaStore`] wrapper for the catalog suite: it injects faults and interleavings at
//! chosen keys, and audits every stream layout the catalog publishes.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use lakestream_catalog::records::{CatalogRecord, StreamRecord, StreamState, log_key};
use lakestream_format::{LogId, keys};
use lakestream_meta::{
    Comparison, MetaError, MetaResult, MetaStore, PutCondition, Record, Session, WriteResult, lease,
};

/// Forwards to `inner`, with the hooks below.
#[derive(Debug)]
pub struct HookStore {
    inner: Arc<dyn MetaStore>,
    catalog_partition: String,
    /// Puts whose key starts with this prefix fail (`Unavailable`, not sent) once this many
    /// have succeeded.
    fail_puts: Mutex<Option<(String, usize)>>,
    /// Before the next `Get` of this log's fence, install the fence (the catalog's fence
    /// landing between a writer's lease-record create and its fence read).
    fence_before_fence_read: Mutex<Option<LogId>>,
    /// Committed layout puts that named a log without a log record.
    pub layout_violations: Mutex<Vec<String>>,
    /// How many live stream-record puts the audit checked.
    pub layouts_checked: AtomicUsize,
    audit: AtomicBool,
    /// Yield to the scheduler before every operation, so that concurrent tasks interleave
    /// between a read and the write that depends on it.
    interleave: AtomicBool,
    /// Before each of the next conditional puts of an existing record whose key starts with
    /// this prefix, another writer rewrites the record (same value, new version), so that
    /// the put loses its compare-and-set. With the times of those puts.
    race_puts: Mutex<Option<(String, usize)>>,
    pub raced_put_times: Mutex<Vec<std::time::Instant>>,
}

impl HookStore {
    pub fn new(inner: Arc<dyn MetaStore>, catalog_partition: &str) -> Arc<Self> {
        Arc::new(Self {
            inner,
            catalog_partition: catalog_partition.to_owned(),
            fail_puts: Mutex::new(None),
            fence_before_fence_read: Mutex::new(None),
            layout_violations: Mutex::new(Vec::new()),
            layouts_checked: AtomicUsize::new(0),
            audit: AtomicBool::new(true),
            interleave: AtomicBool::new(false),
            race_puts: Mutex::new(None),
            raced_put_times: Mutex::new(Vec::new()),
        })
    }

    /// The next `races` conditional puts of existing records under `key_prefix` lose to a
    /// concurrent writer.
    pub fn race_puts(&self, key_prefix: &str, races: usize) {
        *self.race_puts.lock().unwrap() = Some((key_prefix.to_owned(), races));
    }

    /// Rewrites `key` first if the put is one the race hook takes.
    async fn maybe_race(&self, partition: &str, key: &str, condition: PutCondition) -> MetaResult<()> {
        if condition == PutCondition::None {
            return Ok(());
        }
        {
            let mut guard = self.race_puts.lock().unwrap();
            match guard.as_mut() {
                Some((prefix, races)) if *races > 0 && key.starts_with(prefix.as_str()) => *races -= 1,
                _ => return Ok(()),
            }
        }
        self.raced_put_times.lock().unwrap().push(std::time::Instant::now());
        if let Some(current) = self.inner.get(partition, key).await? {
            self.inner.put(partition, key, current.value, PutCondition::None).await?;
        }
        Ok(())
    }

    pub fn interleave(&self) {
        self.interleave.store(true, Ordering::SeqCst);
    }

    async fn maybe_yield(&self) {
        if self.interleave.load(Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
    }

    pub fn inner(&self) -> &Arc<dyn MetaStore> {
        &self.inner
    }

    pub fn fail_puts_after(&self, key_prefix: &str, successes: usize) {
        *self.fail_puts.lock().unwrap() = Some((key_prefix.to_owned(), successes));
    }

    pub fn stop_failing(&self) {
        *self.fail_puts.lock().unwrap() = None;
    }

    pub fn fence_before_next_fence_read(&self, log_id: LogId) {
        *self.fence_before_fence_read.lock().unwrap() = Some(log_id);
    }

    pub fn violations(&self) -> Vec<String> {
        self.layout_violations.lock().unwrap().clone()
    }

    fn injected_failure(&self, key: &str) -> Option<MetaError> {
        let mut guard = self.fail_puts.lock().unwrap();
        let (prefix, budget) = guard.as_mut()?;
        if !key.starts_with(prefix.as_str()) {
            return None;
        }
        if *budget == 0 {
            return Some(MetaError::Unavailable(format!("injected failure on {key}")));
        }
        *budget -= 1;
        None
    }

    /// Spec: a layout is published only after the log of every partition exists. For a
    /// live stream's record, the logs of the layout about to be written that have no log
    /// record yet. Checked just before the put and reported only if the put then commits: a
    /// committed write of a live record cannot have raced a purge of its logs, which starts
    /// only after the record left the active state.
    async fn missing_logs_of_layout(&self, key: &str, value: &Bytes) -> Vec<String> {
        if !self.audit.load(Ordering::SeqCst) || !key.starts_with("/lakestream-catalog/streams/") {
            return Vec::new();
        }
        let Ok(record) = StreamRecord::decode(key, value) else {
            return vec![format!("{key}: undecodable stream record")];
        };
        // A tombstone's layout is history: the logs it names are being, or have been, deleted.
        if record.state != StreamState::Active {
            return Vec::new();
        }
        self.layouts_checked.fetch_add(1, Ordering::SeqCst);
        let mut missing = Vec::new();
        for &id in &record.layout {
            let registered = self.inner.get(&self.catalog_partition, &log_key(LogId(id))).await;
            if !matches!(registered, Ok(Some(_))) {
                missing.push(format!("{key}: layout names log {id} without a record"));
            }
        }
        missing
    }
}

#[async_trait]
impl MetaStore for HookStore {
    async fn get_cmp(&self, partition: &str, key: &str, cmp: Comparison) -> MetaResult<Option<Record>> {
        self.maybe_yield().await;
        let fence_first = {
            let mut guard = self.fence_before_fence_read.lock().unwrap();
            match *guard {
                Some(log_id) if cmp == Comparison::Equal && key == keys::fence_key(log_id) => guard.take(),
                _ => None,
            }
        };
        if let Some(log_id) = fence_first {
            lease::fence(self.inner.as_ref(), log_id).await?;
        }
        self.inner.get_cmp(partition, key, cmp).await
    }

    async fn put(
        &self,
        partition: &str,
        key: &str,
        value: Bytes,
        condition: PutCondition,
    ) -> MetaResult<WriteResult> {
        self.maybe_yield().await;
        if let Some(failure) = self.injected_failure(key) {
            return Err(failure);
        }
        self.maybe_race(partition, key, condition).await?;
        let missing = self.missing_logs_of_layout(key, &value).await;
        let result = self.inner.put(partition, key, value, condition).await;
        if result.is_ok() {
            self.layout_violations.lock().unwrap().extend(missing);
        }
        result
    }

    async fn delete(&self, partition: &str, key: &str) -> MetaResult<bool> {
        self.maybe_yield().await;
        self.inner.delete(partition, key).await
    }
    async fn delete_if_version(
        &self,
        partition: &str,
        key: &str,
        version: lakestream_meta::Version,
    ) -> MetaResult<()> {
        self.maybe_yield().await;
        self.inner.delete_if_version(partition, key, version).await
    }

    async fn delete_range(&self, partition: &str, start: &str, end: &str) -> MetaResult<()> {
        self.maybe_yield().await;
        self.inner.delete_range(partition, start, end).await
    }

    async fn sequenced_put(
        &self,
        partition: &str,
        prefix: &str,
        deltas: &[u64],
        value: Bytes,
    ) -> MetaResult<WriteResult> {
        self.maybe_yield().await;
        self.inner.sequenced_put(partition, prefix, deltas, value).await
    }

    async fn list(&self, partition: &str, start: &str, end: &str) -> MetaResult<Vec<String>> {
        self.maybe_yield().await;
        self.inner.list(partition, start, end).await
    }

    async fn scan(
        &self,
        partition: &str,
        start: &str,
        end: &str,
        limit: Option<usize>,
    ) -> MetaResult<Vec<Record>> {
        self.maybe_yield().await;
        self.inner.scan(partition, start, end, limit).await
    }

    async fn open_session(&self, timeout: Duration) -> MetaResult<Arc<dyn Session>> {
        self.maybe_yield().await;
        self.inner.open_session(timeout).await
    }
}
