//! Shared helpers of the compactor's integration tests: an in-memory stack with a manual
//! clock, a writer, a reader, and whole-log reads.

#![allow(dead_code)] // each test file uses a different subset

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use lakestream_compactor::{Compactor, CompactorConfig, CompactorDeps};
use lakestream_format::{Clock, Entry, LogId, LogRef, ManualClock};
use lakestream_meta::lease::SeededTokens;
use lakestream_meta::{
    Comparison, InMemoryStore, MetaResult, MetaStore, PutCondition, Record, Session, WriteResult,
};
use lakestream_objstore::{InMemoryStore as MemObjects, ObjectPrefix, ObjectStore};
use lakestream_reader::{Reader, ReaderConfig, ReaderDeps};
use lakestream_writer::{Writer, WriterConfig, WriterDeps};

/// 2026-11-30 00:00:00 UTC: WAL names carry real-looking dates.
pub const START_MS: i64 = 1_796_000_000_000;

pub struct Stack {
    pub clock: ManualClock,
    pub mem: InMemoryStore,
    pub hooks: Arc<HookedMeta>,
    pub meta: Arc<dyn MetaStore>,
    pub wal: Arc<dyn ObjectStore>,
    pub compacted: Arc<dyn ObjectStore>,
}

impl Stack {
    pub fn new() -> Stack {
        let clock = ManualClock::new(START_MS);
        let shared: Arc<dyn Clock> = Arc::new(clock.clone());
        let mem = InMemoryStore::with_config(2, shared.clone()).unwrap();
        let hooks = Arc::new(HookedMeta { inner: mem.clone(), armed: Mutex::new(None) });
        Stack {
            clock,
            meta: hooks.clone(),
            hooks,
            mem,
            wal: Arc::new(MemObjects::new(shared.clone())),
            compacted: Arc::new(MemObjects::new(shared)),
        }
    }

    pub fn writer(&self, seed: u64) -> Writer {
        let deps = WriterDeps {
            meta: self.meta.clone(),
            objects: self.wal.clone(),
            clock: Arc::new(self.clock.clone()),
            tokens: Arc::new(SeededTokens::new(seed)),
        };
        let config = WriterConfig { flush_window: Duration::from_millis(1), ..WriterConfig::default() };
        Writer::start(config, deps).unwrap()
    }

    /// A reader without an object cache: every read sees what the stores hold now.
    pub fn reader(&self) -> Reader {
        let deps =
            ReaderDeps { meta: self.meta.clone(), wal: self.wal.clone(), compacted: self.compacted.clone() };
        Reader::new(ReaderConfig { object_cache_bytes: 0, ..ReaderConfig::default() }, deps).unwrap()
    }

    pub fn compactor(&self, config: CompactorConfig, seed: u64) -> Compactor {
        let deps = CompactorDeps {
            meta: self.meta.clone(),
            wal: self.wal.clone(),
            compacted: self.compacted.clone(),
            clock: Arc::new(self.clock.clone()),
            tokens: Arc::new(SeededTokens::new(seed)),
        };
        Compactor::new(config, deps).unwrap()
    }
}

/// Small thresholds so tests close ranges quickly; grace periods as configured by default.
pub fn test_config() -> CompactorConfig {
    CompactorConfig {
        max_range_bytes: 1 << 20,
        max_file_bytes: 1 << 20,
        read_chunk_bytes: 4096,
        ..CompactorConfig::default()
    }
}

pub fn log_ref(id: u64) -> LogRef {
    LogRef { log_id: LogId(id), namespace: "ns".into(), stream: format!("stream-{id}") }
}

/// Every entry from `from` to the end of the log.
pub async fn read_all(reader: &Reader, log: &LogRef, from: u64) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut next = from;
    loop {
        let batch = reader.read(log, next, 1 << 20, Duration::ZERO).await.unwrap();
        if batch.entries.is_empty() {
            return out;
        }
        next = batch.next_offset;
        out.extend(batch.entries);
    }
}

/// Appends `n` entries of `records` records each, one WAL object per append.
pub async fn append_n(writer: &Writer, log: LogId, n: usize, records: u32, tag: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    for i in 0..n {
        let payload = Bytes::from(format!("{tag}-{log}-{i}-{}", "x".repeat(i % 7)));
        let ack = writer.append(log, payload.clone(), records).await.unwrap();
        out.push(Entry {
            offset: ack.offset,
            record_count: ack.record_count,
            timestamp_ms: ack.timestamp_ms,
            payload,
        });
    }
    out
}

/// The paths of every object in a store.
pub async fn object_names(store: &Arc<dyn ObjectStore>) -> Vec<String> {
    use futures::StreamExt;
    let listed: Vec<_> = store.list(&ObjectPrefix::all(), None).collect().await;
    listed.into_iter().map(|m| m.unwrap().path.to_string()).collect()
}

/// A metadata store that can run one `DeleteRange` right after a `Get` of a given key: a hard
/// trim (or a log deletion) landing between the Get and the Put of step C3.
#[derive(Debug)]
pub struct HookedMeta {
    inner: InMemoryStore,
    armed: Mutex<Option<DeleteAfterGet>>,
}

#[derive(Debug, Clone)]
pub struct DeleteAfterGet {
    pub trigger_key: String,
    pub partition: String,
    pub start: String,
    pub end: String,
}

impl HookedMeta {
    pub fn arm(&self, hook: DeleteAfterGet) {
        *self.armed.lock().unwrap() = Some(hook);
    }

    /// Whether the armed hook has fired (or none was armed).
    pub fn fired(&self) -> bool {
        self.armed.lock().unwrap().is_none()
    }
}

#[async_trait]
impl MetaStore for HookedMeta {
    async fn get_cmp(&self, p: &str, k: &str, c: Comparison) -> MetaResult<Option<Record>> {
        let result = self.inner.get_cmp(p, k, c).await;
        let hook = {
            let mut armed = self.armed.lock().unwrap();
            match armed.as_ref() {
                Some(h) if c == Comparison::Equal && h.trigger_key == k => armed.take(),
                _ => None,
            }
        };
        if let Some(h) = hook {
            self.inner.delete_range(&h.partition, &h.start, &h.end).await?;
        }
        result
    }
    async fn put(&self, p: &str, k: &str, v: Bytes, c: PutCondition) -> MetaResult<WriteResult> {
        self.inner.put(p, k, v, c).await
    }
    async fn delete(&self, p: &str, k: &str) -> MetaResult<bool> {
        self.inner.delete(p, k).await
    }
    async fn delete_range(&self, p: &str, a: &str, b: &str) -> MetaResult<()> {
        self.inner.delete_range(p, a, b).await
    }
    async fn sequenced_put(&self, p: &str, prefix: &str, d: &[u64], v: Bytes) -> MetaResult<WriteResult> {
        self.inner.sequenced_put(p, prefix, d, v).await
    }
    async fn list(&self, p: &str, a: &str, b: &str) -> MetaResult<Vec<String>> {
        self.inner.list(p, a, b).await
    }
    async fn scan(&self, p: &str, a: &str, b: &str, limit: Option<usize>) -> MetaResult<Vec<Record>> {
        self.inner.scan(p, a, b, limit).await
    }
    async fn open_session(&self, timeout: Duration) -> MetaResult<Arc<dyn Session>> {
        self.inner.open_session(timeout).await
    }
}
