//! An object store that counts the bytes its reads return: what a reader fetched from
//! storage, to report beside the bytes it delivered.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use lakestream_objstore::{
    ByteRange, ObjectMeta, ObjectPath, ObjectPrefix, ObjectResult, ObjectStore, WriteOnce,
};

/// Wraps a store; counts GETs (whole and ranged) and the bytes they returned.
#[derive(Debug)]
pub struct FetchCounter {
    inner: Arc<dyn ObjectStore>,
    gets: AtomicU64,
    bytes: AtomicU64,
}

impl FetchCounter {
    /// A counter in front of `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        FetchCounter { inner, gets: AtomicU64::new(0), bytes: AtomicU64::new(0) }
    }

    /// GETs so far and the bytes they returned.
    pub fn fetched(&self) -> (u64, u64) {
        (self.gets.load(Ordering::Relaxed), self.bytes.load(Ordering::Relaxed))
    }

    fn count(&self, got: ObjectResult<Bytes>) -> ObjectResult<Bytes> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        if let Ok(b) = &got {
            self.bytes.fetch_add(b.len() as u64, Ordering::Relaxed);
        }
        got
    }
}

#[async_trait]
impl ObjectStore for FetchCounter {
    async fn put(&self, path: &ObjectPath, bytes: Bytes) -> ObjectResult<()> {
        self.inner.put(path, bytes).await
    }
    async fn get(&self, path: &ObjectPath) -> ObjectResult<Bytes> {
        let got = self.inner.get(path).await;
        self.count(got)
    }
    async fn get_range(&self, path: &ObjectPath, range: ByteRange) -> ObjectResult<Bytes> {
        let got = self.inner.get_range(path, range).await;
        self.count(got)
    }
    async fn head(&self, path: &ObjectPath) -> ObjectResult<ObjectMeta> {
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
}
