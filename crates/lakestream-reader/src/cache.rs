//! Caches of immutable objects, bounded in bytes. WAL objects and compacted files never
//! change once written, so a cached copy is never stale; a name may only disappear
//! (reclamation), which the reader handles by looking the covering record up again.
//!
//! The object cache is `quick_cache` (S3-FIFO-like: O(1) per operation, and a one-time scan of
//! many objects passes through a small probation section instead of evicting the hot ones).
//! Its placeholders make a miss single-flight: concurrent loads of one name wait for the
//! first and share its value, so readers of logs that share an object cause one GET.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use quick_cache::Weighter;
use quick_cache::sync::Cache;

/// A cached value and its weight in bytes.
#[derive(Debug, Clone)]
struct Weighted<V> {
    value: V,
    weight: u64,
}

#[derive(Debug, Clone, Copy)]
struct ByWeight;

impl<V> Weighter<String, Weighted<V>> for ByWeight {
    fn weight(&self, _name: &String, value: &Weighted<V>) -> u64 {
        // quick_cache never evicts zero-weight items; everything weighs at least a byte.
        value.weight.max(1)
    }
}

/// A map from object name to a value (the object's bytes, or its parsed form), holding
/// values that weigh at most `capacity` bytes in total, with single-flight loads.
pub struct ObjectCache<V = Bytes> {
    cache: Cache<String, Weighted<V>, ByWeight>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl<V: Clone> std::fmt::Debug for ObjectCache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectCache")
            .field("capacity", &self.cache.capacity())
            .field("bytes", &self.cache.weight())
            .finish()
    }
}

/// Hit and miss counts of a cache, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Lookups that found the object, or joined a load of it already under way.
    pub hits: u64,
    /// Lookups that loaded the object.
    pub misses: u64,
    /// Bytes held now.
    pub bytes: usize,
}

/// Objects are megabytes each: a cache holds tens to thousands of them.
const TYPICAL_OBJECT_BYTES: usize = 1 << 20;

impl<V: Clone> ObjectCache<V> {
    /// A cache holding at most `capacity` bytes. 0 disables caching (loads stay single-flight).
    pub fn new(capacity: usize) -> Self {
        // One shard: a shard holds at most its share of the capacity, and compacted files
        // may be a large share of the whole. Hits take a shared lock, so one shard is cheap.
        let options = quick_cache::OptionsBuilder::new()
            .shards(1)
            // Half for values read at least twice (hot), at least half for new ones (cold): new
            // values include those read ahead and not yet read, which the default 3 % cold
            // share would evict before their reader comes (a wasted GET each).
            .hot_allocation(0.5)
            .weight_capacity(capacity as u64)
            .estimated_items_capacity((capacity / TYPICAL_OBJECT_BYTES).clamp(16, 1 << 16))
            .build()
            .expect("the cache options set every required field");
        ObjectCache {
            cache: Cache::with_options(options, ByWeight, Default::default(), Default::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The cached value of `name`, marking it recently used.
    pub fn get(&self, name: &str) -> Option<V> {
        let got = self.cache.get(name).map(|w| w.value);
        let counter = if got.is_some() { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        got
    }

    /// The cached value of `name`, or else the value `load` yields with its weight, cached.
    /// Concurrent calls for one name run one load and share its value; when the load yields
    /// `None` (the object is missing) or fails, nothing is cached and a waiting call loads
    /// again. Values heavier than the cache are returned, not kept.
    pub async fn get_or_load<E>(
        &self,
        name: &str,
        load: impl Future<Output = Result<Option<(V, usize)>, E>>,
    ) -> Result<Option<V>, E> {
        match self.cache.get_value_or_guard_async(name).await {
            Ok(w) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                Ok(Some(w.value))
            }
            Err(guard) => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                let Some((value, weight)) = load.await? else { return Ok(None) };
                // Err: the placeholder was replaced meanwhile (a plain insert); nothing to do.
                let _ = guard.insert(Weighted { value: value.clone(), weight: weight as u64 });
                Ok(Some(value))
            }
        }
    }

    /// Caches `value`, which weighs `weight` bytes, under `name`, evicting cold values to stay
    /// within capacity. Values heavier than the capacity are not cached.
    pub fn insert(&self, name: &str, value: V, weight: usize) {
        self.cache.insert(name.to_string(), Weighted { value, weight: weight as u64 });
    }

    /// Whether `name` is cached, without counting a lookup or touching its recency.
    pub fn contains(&self, name: &str) -> bool {
        self.cache.contains_key(name)
    }

    /// Forgets `name` (its object was found missing).
    pub fn remove(&self, name: &str) {
        self.cache.remove(name);
    }

    /// Hit and miss counts so far.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bytes: usize::try_from(self.cache.weight()).unwrap_or(usize::MAX),
        }
    }
}

/// Index records recently returned by scans, per log and by end offset. Only hits are served
/// from here: a read whose offset no fresh cached record covers asks the store, so tail reads
/// always see new records.
#[derive(Debug)]
pub struct IndexCache {
    ttl: std::time::Duration,
    capacity: usize,
    state: Mutex<IndexState>,
}

#[derive(Debug, Default)]
struct IndexState {
    logs: HashMap<
        lakestream_format::LogId,
        std::collections::BTreeMap<u64, (lakestream_meta::Record, tokio::time::Instant)>,
    >,
    records: usize,
}

impl IndexCache {
    /// A cache whose records serve reads for `ttl`, holding at most `capacity` records.
    pub fn new(ttl: std::time::Duration, capacity: usize) -> Self {
        IndexCache { ttl, capacity, state: Mutex::new(IndexState::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, IndexState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fresh cached records of `log` whose end offsets follow `from` consecutively, starting
    /// with the one whose end offset is the smallest above `from`; empty on a miss.
    pub fn covering(
        &self,
        log: lakestream_format::LogId,
        from: u64,
        limit: usize,
    ) -> Vec<lakestream_meta::Record> {
        if self.ttl.is_zero() {
            return Vec::new();
        }
        let now = tokio::time::Instant::now();
        let state = self.lock();
        let Some(records) = state.logs.get(&log) else { return Vec::new() };
        records
            .range(from.saturating_add(1)..)
            .take(limit)
            .take_while(|(_, (_, at))| now.duration_since(*at) < self.ttl)
            .map(|(_, (r, _))| r.clone())
            .collect()
    }

    /// Remembers records of `log` just read from the store, keyed by their end offsets.
    pub fn insert(
        &self,
        log: lakestream_format::LogId,
        records: impl IntoIterator<Item = (u64, lakestream_meta::Record)>,
    ) {
        if self.ttl.is_zero() {
            return;
        }
        let now = tokio::time::Instant::now();
        let mut state = self.lock();
        if state.records >= self.capacity {
            state.logs.clear();
            state.records = 0;
        }
        let mut added = 0;
        let entry = state.logs.entry(log).or_default();
        for (end, record) in records {
            if entry.insert(end, (record, now)).is_none() {
                added += 1;
            }
        }
        state.records += added;
    }

    /// Forgets every cached record of `log` (an object it named turned out missing).
    pub fn invalidate(&self, log: lakestream_format::LogId) {
        let mut state = self.lock();
        if let Some(records) = state.logs.remove(&log) {
            state.records -= records.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_capacity_and_skips_values_heavier_than_it() {
        let c = ObjectCache::new(10 << 20);
        for i in 0..40 {
            c.insert(&format!("o{i}"), Bytes::from_static(b"x"), 1 << 20);
        }
        assert!(c.stats().bytes <= 10 << 20, "{:?}", c.stats());
        c.insert("huge", Bytes::new(), 11 << 20);
        assert!(c.get("huge").is_none());
        c.insert("a", Bytes::from_static(b"a"), 4);
        assert!(c.get("a").is_some());
        c.remove("a");
        assert!(c.get("a").is_none());
    }

    #[test]
    fn a_hot_object_survives_a_scan_of_many_others() {
        let c = ObjectCache::new(16 << 20);
        c.insert("hot", Bytes::from_static(b"h"), 1 << 20);
        for _ in 0..4 {
            assert!(c.get("hot").is_some());
        }
        for i in 0..200 {
            c.insert(&format!("scan{i}"), Bytes::from_static(b"s"), 1 << 20);
        }
        assert!(c.get("hot").is_some(), "a scan evicted the hot object");
    }

    #[tokio::test]
    async fn concurrent_loads_of_one_name_run_once() {
        let c = ObjectCache::new(1 << 20);
        let loads = AtomicU64::new(0);
        let load = || async {
            loads.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            Ok::<_, ()>(Some((Bytes::from_static(b"v"), 1)))
        };
        let (a, b) = tokio::join!(c.get_or_load("k", load()), c.get_or_load("k", load()));
        assert_eq!((a, b), (Ok(Some(Bytes::from_static(b"v"))), Ok(Some(Bytes::from_static(b"v")))));
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        // A missing object is not cached: the next call loads again.
        let gone = c.get_or_load("gone", async { Ok::<_, ()>(None) }).await;
        assert_eq!(gone, Ok(None));
        assert_eq!(
            c.get_or_load("gone", async { Ok::<_, ()>(Some((Bytes::new(), 1))) }).await,
            Ok(Some(Bytes::new()))
        );
    }
}
