//! A small LRU cache of immutable objects, bounded in bytes. WAL objects and compacted files
//! never change once written, so a cached copy is never stale; a name may only disappear
//! (reclamation), which the reader handles by looking the covering record up again.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;

#[derive(Debug)]
struct State<V> {
    entries: HashMap<String, (V, usize, u64)>,
    bytes: usize,
    tick: u64,
    hits: u64,
    misses: u64,
}

impl<V> Default for State<V> {
    fn default() -> Self {
        State { entries: HashMap::new(), bytes: 0, tick: 0, hits: 0, misses: 0 }
    }
}

/// An LRU map from object name to a value (the object's bytes, or its parsed form), holding
/// values that weigh at most `capacity` bytes in total.
#[derive(Debug)]
pub struct ObjectCache<V = Bytes> {
    capacity: usize,
    state: Mutex<State<V>>,
}

/// Hit and miss counts of a cache, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Lookups that found the object.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Bytes held now.
    pub bytes: usize,
}

impl<V: Clone> ObjectCache<V> {
    /// A cache holding at most `capacity` bytes. 0 disables caching.
    pub fn new(capacity: usize) -> Self {
        ObjectCache { capacity, state: Mutex::new(State::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<V>> {
        // A panic while holding the lock cannot leave the map inconsistent in a way that
        // matters for a cache, so recover the guard.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached value of `name`, marking it recently used.
    pub fn get(&self, name: &str) -> Option<V> {
        let mut s = self.lock();
        s.tick += 1;
        let tick = s.tick;
        match s.entries.get_mut(name) {
            Some((value, _, used)) => {
                *used = tick;
                let value = value.clone();
                s.hits += 1;
                Some(value)
            }
            None => {
                s.misses += 1;
                None
            }
        }
    }

    /// Caches `value`, which weighs `weight` bytes, under `name`, evicting the least recently
    /// used values to stay within capacity. Values heavier than the capacity are not cached.
    pub fn insert(&self, name: &str, value: V, weight: usize) {
        if weight > self.capacity {
            return;
        }
        let mut s = self.lock();
        s.tick += 1;
        let tick = s.tick;
        if let Some((_, old, _)) = s.entries.insert(name.to_string(), (value, weight, tick)) {
            s.bytes -= old;
        }
        s.bytes += weight;
        while s.bytes > self.capacity {
            let Some(victim) = s.entries.iter().min_by_key(|(_, (_, _, used))| *used).map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some((_, w, _)) = s.entries.remove(&victim) {
                s.bytes -= w;
            }
        }
    }

    /// Forgets `name` (its object was found missing).
    pub fn remove(&self, name: &str) {
        let mut s = self.lock();
        if let Some((_, w, _)) = s.entries.remove(name) {
            s.bytes -= w;
        }
    }

    /// Hit and miss counts so far.
    pub fn stats(&self) -> CacheStats {
        let s = self.lock();
        CacheStats { hits: s.hits, misses: s.misses, bytes: s.bytes }
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
    fn evicts_least_recently_used_within_capacity() {
        let c = ObjectCache::new(10);
        c.insert("a", Bytes::from_static(b"aaaa"), 4);
        c.insert("b", Bytes::from_static(b"bbbb"), 4);
        assert!(c.get("a").is_some()); // a is now more recent than b
        c.insert("c", Bytes::from_static(b"cccc"), 4);
        assert!(c.get("b").is_none());
        assert!(c.get("a").is_some() && c.get("c").is_some());
        assert!(c.stats().bytes <= 10);
        c.insert("huge", Bytes::from(vec![0; 11]), 11);
        assert!(c.get("huge").is_none());
        c.remove("a");
        assert_eq!(c.stats().bytes, 4);
    }
}
