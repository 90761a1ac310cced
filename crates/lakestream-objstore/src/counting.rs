//! A wrapper that counts what passes through it: GETs (whole and ranged, and per object when
//! asked), the bytes they return, HEADs and PUTs. For tests and benchmarks that check or
//! report how much a component fetched from storage (feature `testkit`).
//!
//! A call is counted when it is made, before the inner store answers, so a GET still in
//! flight already counts (failed ones too); bytes are counted when a GET returns them.
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use lakestream_format::SystemClock;
//! use lakestream_objstore::{ByteRange, CountingStore, InMemoryStore, ObjectPath, ObjectStore};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let counting = Arc::new(CountingStore::new(Arc::new(InMemoryStore::new(Arc::new(SystemClock)))));
//! let path = ObjectPath::new("wal/00000001.wal")?;
//! counting.put(&path, Bytes::from_static(b"hello world")).await?;
//! counting.get_range(&path, ByteRange::Suffix(5)).await?;
//! let counts = counting.take();
//! assert_eq!((counts.puts, counts.gets, counts.ranged_gets, counts.bytes_fetched), (1, 1, 1, 5));
//! assert_eq!(counting.counts().gets, 0, "take resets the counts");
//! # Ok::<(), lakestream_objstore::ObjectStoreError>(())
//! # }).unwrap();
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;

use crate::error::ObjectResult;
use crate::path::{ObjectPath, ObjectPrefix};
use crate::range::ByteRange;
use crate::store::{ObjectMeta, ObjectStore, Upload, WriteOnce};

/// What a [`CountingStore`] counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// GETs made, whole and ranged.
    pub gets: u64,
    /// Of those, the ranged ones ([`ObjectStore::get_range`]).
    pub ranged_gets: u64,
    /// Bytes returned by the GETs that succeeded.
    pub bytes_fetched: u64,
    /// HEADs made.
    pub heads: u64,
    /// PUTs made: [`ObjectStore::put`]s and [`ObjectStore::start_upload`]s.
    pub puts: u64,
}

/// Wraps a store and counts the calls made through it ([`Counts`]); every call is passed on
/// unchanged.
#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn ObjectStore>,
    gets: AtomicU64,
    ranged_gets: AtomicU64,
    bytes_fetched: AtomicU64,
    heads: AtomicU64,
    puts: AtomicU64,
    /// GETs per object, kept only when asked for ([`CountingStore::per_object`]): a long
    /// benchmark would otherwise hold every name it read.
    gets_per_object: Option<Mutex<BTreeMap<ObjectPath, u64>>>,
}

impl CountingStore {
    /// Counts the calls made to `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        CountingStore {
            inner,
            gets: AtomicU64::new(0),
            ranged_gets: AtomicU64::new(0),
            bytes_fetched: AtomicU64::new(0),
            heads: AtomicU64::new(0),
            puts: AtomicU64::new(0),
            gets_per_object: None,
        }
    }

    /// As [`CountingStore::new`], and also the GETs of each object
    /// ([`CountingStore::gets_per_object`]).
    pub fn per_object(inner: Arc<dyn ObjectStore>) -> Self {
        CountingStore { gets_per_object: Some(Mutex::default()), ..CountingStore::new(inner) }
    }

    /// The counts so far.
    pub fn counts(&self) -> Counts {
        Counts {
            gets: self.gets.load(Ordering::SeqCst),
            ranged_gets: self.ranged_gets.load(Ordering::SeqCst),
            bytes_fetched: self.bytes_fetched.load(Ordering::SeqCst),
            heads: self.heads.load(Ordering::SeqCst),
            puts: self.puts.load(Ordering::SeqCst),
        }
    }

    /// The counts so far, resetting them (and the GETs per object) to zero.
    pub fn take(&self) -> Counts {
        if let Some(mut per_object) = self.lock_per_object() {
            per_object.clear();
        }
        Counts {
            gets: self.gets.swap(0, Ordering::SeqCst),
            ranged_gets: self.ranged_gets.swap(0, Ordering::SeqCst),
            bytes_fetched: self.bytes_fetched.swap(0, Ordering::SeqCst),
            heads: self.heads.swap(0, Ordering::SeqCst),
            puts: self.puts.swap(0, Ordering::SeqCst),
        }
    }

    /// The GETs (whole and ranged) of each object read since the start or the last
    /// [`CountingStore::take`]; empty unless made with [`CountingStore::per_object`].
    pub fn gets_per_object(&self) -> BTreeMap<ObjectPath, u64> {
        self.lock_per_object().map(|per_object| per_object.clone()).unwrap_or_default()
    }

    fn lock_per_object(&self) -> Option<MutexGuard<'_, BTreeMap<ObjectPath, u64>>> {
        let per_object = self.gets_per_object.as_ref()?;
        Some(per_object.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    fn count_get(&self, path: &ObjectPath) {
        self.gets.fetch_add(1, Ordering::SeqCst);
        if let Some(mut per_object) = self.lock_per_object() {
            *per_object.entry(path.clone()).or_default() += 1;
        }
    }

    fn count_fetched(&self, got: ObjectResult<Bytes>) -> ObjectResult<Bytes> {
        if let Ok(bytes) = &got {
            self.bytes_fetched.fetch_add(bytes.len() as u64, Ordering::SeqCst);
        }
        got
    }
}

#[async_trait]
impl ObjectStore for CountingStore {
    async fn put(&self, path: &ObjectPath, bytes: Bytes) -> ObjectResult<()> {
        self.puts.fetch_add(1, Ordering::SeqCst);
        self.inner.put(path, bytes).await
    }

    async fn get(&self, path: &ObjectPath) -> ObjectResult<Bytes> {
        self.count_get(path);
        self.count_fetched(self.inner.get(path).await)
    }

    async fn get_range(&self, path: &ObjectPath, range: ByteRange) -> ObjectResult<Bytes> {
        self.count_get(path);
        self.ranged_gets.fetch_add(1, Ordering::SeqCst);
        self.count_fetched(self.inner.get_range(path, range).await)
    }

    async fn head(&self, path: &ObjectPath) -> ObjectResult<ObjectMeta> {
        self.heads.fetch_add(1, Ordering::SeqCst);
        self.inner.head(path).await
    }

    async fn delete(&self, path: &ObjectPath) -> ObjectResult<()> {
        self.inner.delete(path).await
    }

    async fn delete_many(&self, paths: &[ObjectPath]) -> ObjectResult<()> {
        self.inner.delete_many(paths).await
    }

    fn list(
        &self,
        prefix: &ObjectPrefix,
        start_after: Option<&ObjectPath>,
    ) -> BoxStream<'static, ObjectResult<ObjectMeta>> {
        self.inner.list(prefix, start_after)
    }

    fn write_once(&self) -> WriteOnce {
        self.inner.write_once()
    }

    // Passed on, so that the inner store streams the upload as it would without the wrapper.
    async fn start_upload<'a>(&'a self, path: &ObjectPath) -> ObjectResult<Box<dyn Upload + 'a>> {
        self.puts.fetch_add(1, Ordering::SeqCst);
        self.inner.start_upload(path).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::InMemoryStore;
    use lakestream_format::ManualClock;

    fn memory() -> Arc<InMemoryStore> {
        Arc::new(InMemoryStore::new(Arc::new(ManualClock::new(1_700_000_000_000))))
    }

    #[tokio::test]
    async fn it_passes_the_conformance_suite() {
        crate::conformance::run_all(|| async {
            Arc::new(CountingStore::new(memory())) as Arc<dyn ObjectStore>
        })
        .await;
    }

    #[tokio::test]
    async fn it_counts_gets_ranged_gets_bytes_heads_and_puts() {
        let inner = memory();
        let store = CountingStore::per_object(inner.clone());
        let (a, b) = (ObjectPath::new("o/a").unwrap(), ObjectPath::new("o/b").unwrap());
        store.put(&a, Bytes::from_static(b"0123456789")).await.unwrap();
        inner.put(&b, Bytes::from_static(b"abc")).await.unwrap(); // behind the counter's back
        assert_eq!(store.counts(), Counts { puts: 1, ..Counts::default() });

        assert_eq!(store.get(&a).await.unwrap(), Bytes::from_static(b"0123456789"));
        assert_eq!(store.get_range(&a, ByteRange::Bounded(2..5)).await.unwrap(), Bytes::from_static(b"234"));
        assert_eq!(store.get(&b).await.unwrap(), Bytes::from_static(b"abc"));
        assert_eq!(store.head(&a).await.unwrap().size, 10);
        // A failed GET counts as made, with no bytes.
        let missing = ObjectPath::new("o/missing").unwrap();
        assert!(store.get(&missing).await.is_err());
        assert_eq!(
            store.counts(),
            Counts { gets: 4, ranged_gets: 1, bytes_fetched: 10 + 3 + 3, heads: 1, puts: 1 }
        );
        let per_object: Vec<(String, u64)> =
            store.gets_per_object().into_iter().map(|(path, n)| (path.to_string(), n)).collect();
        assert_eq!(per_object, [("o/a".to_owned(), 2), ("o/b".to_owned(), 1), ("o/missing".to_owned(), 1)]);

        assert_eq!(store.take().gets, 4);
        assert_eq!(store.counts(), Counts::default());
        assert!(store.gets_per_object().is_empty());
    }

    #[tokio::test]
    async fn it_forwards_writes_deletes_and_uploads_to_the_inner_store() {
        let inner = memory();
        let store = CountingStore::new(inner.clone());
        let path = ObjectPath::new("o/streamed").unwrap();
        let mut upload = store.start_upload(&path).await.unwrap();
        upload.write(Bytes::from_static(b"ab")).await.unwrap();
        upload.write(Bytes::from_static(b"cd")).await.unwrap();
        upload.complete().await.unwrap();
        assert_eq!(inner.get(&path).await.unwrap(), Bytes::from_static(b"abcd"));
        assert_eq!(store.counts().puts, 1);
        assert!(store.gets_per_object().is_empty(), "not kept unless asked for");
        store.delete(&path).await.unwrap();
        assert!(inner.is_empty());
        assert_eq!(store.write_once(), inner.write_once());
    }
}
