//! Counts the object-store operations of each root for `/metrics`
//! (`lakestream_object_store_operations_total{root, operation}`): a decorator over any
//! [`ObjectStore`]. These are the operations the roles ask for; the S3 backend's retries and
//! the parts of a multipart upload are not counted separately. PUTs cost money on S3, so the
//! alert rules watch their rate.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use lakestream_objstore::{
    ByteRange, ObjectMeta, ObjectPath, ObjectPrefix, ObjectResult, ObjectStore, Upload, WriteOnce,
};
use prometheus_client::registry::Registry;

use crate::metrics::{Counter, FixedFamily};

/// The operations counted, in the order of [`OperationCounts::counts`].
const OPERATIONS: [&str; 7] = ["put", "get", "get_range", "head", "delete", "delete_many", "list"];

/// Per-operation counters of one root, and how many of them failed.
#[derive(Debug, Default)]
pub struct OperationCounts {
    counts: [Counter; OPERATIONS.len()],
    errors: [Counter; OPERATIONS.len()],
}

impl OperationCounts {
    fn record<T>(&self, operation: usize, result: &ObjectResult<T>) {
        self.counts[operation].fetch_add(1, Ordering::Relaxed);
        if result.is_err() {
            self.errors[operation].fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The counters of both roots.
#[derive(Debug, Default)]
pub struct ObjectStoreMetrics {
    /// `storage.wal`.
    pub wal: Arc<OperationCounts>,
    /// `storage.compacted`.
    pub compacted: Arc<OperationCounts>,
}

impl ObjectStoreMetrics {
    /// Registers the counters of both roots in `registry`, every series from the start.
    pub(crate) fn register(&self, registry: &mut Registry) {
        for (name, help, errors) in [
            ("lakestream_object_store_operations", "Object-store operations, per root and operation", false),
            (
                "lakestream_object_store_errors",
                "Object-store operations that failed, per root and operation",
                true,
            ),
        ] {
            let series = [("wal", &self.wal), ("compacted", &self.compacted)].into_iter().flat_map(
                |(root, counts)| {
                    let counters = if errors { &counts.errors } else { &counts.counts };
                    OPERATIONS.iter().zip(counters).map(move |(operation, counter)| {
                        ([("root", root), ("operation", *operation)], counter.clone())
                    })
                },
            );
            registry.register(name, help, FixedFamily::new(series));
        }
    }
}

/// An object store whose operations are counted.
#[derive(Debug)]
pub struct Counted {
    inner: Arc<dyn ObjectStore>,
    counts: Arc<OperationCounts>,
}

impl Counted {
    /// Counts the operations on `inner` in `counts`.
    pub fn new(inner: Arc<dyn ObjectStore>, counts: Arc<OperationCounts>) -> Self {
        Counted { inner, counts }
    }
}

#[async_trait]
impl ObjectStore for Counted {
    async fn put(&self, path: &ObjectPath, bytes: Bytes) -> ObjectResult<()> {
        let result = self.inner.put(path, bytes).await;
        self.counts.record(0, &result);
        result
    }

    async fn get(&self, path: &ObjectPath) -> ObjectResult<Bytes> {
        let result = self.inner.get(path).await;
        self.counts.record(1, &result);
        result
    }

    async fn get_range(&self, path: &ObjectPath, range: ByteRange) -> ObjectResult<Bytes> {
        let result = self.inner.get_range(path, range).await;
        self.counts.record(2, &result);
        result
    }

    async fn head(&self, path: &ObjectPath) -> ObjectResult<ObjectMeta> {
        let result = self.inner.head(path).await;
        self.counts.record(3, &result);
        result
    }

    async fn delete(&self, path: &ObjectPath) -> ObjectResult<()> {
        let result = self.inner.delete(path).await;
        self.counts.record(4, &result);
        result
    }

    async fn delete_many(&self, paths: &[ObjectPath]) -> ObjectResult<()> {
        let result = self.inner.delete_many(paths).await;
        self.counts.record(5, &result);
        result
    }

    fn list(
        &self,
        prefix: &ObjectPrefix,
        start_after: Option<&ObjectPath>,
    ) -> BoxStream<'static, ObjectResult<ObjectMeta>> {
        // One count per listing (its pages are fetched lazily by the stream).
        self.counts.counts[6].fetch_add(1, Ordering::Relaxed);
        self.inner.list(prefix, start_after)
    }

    fn write_once(&self) -> WriteOnce {
        self.inner.write_once()
    }

    /// The inner store's upload (streaming where it streams), counted as one `put` when it
    /// completes or fails to start.
    async fn start_upload<'a>(&'a self, path: &ObjectPath) -> ObjectResult<Box<dyn Upload + 'a>> {
        match self.inner.start_upload(path).await {
            Ok(inner) => Ok(Box::new(CountedUpload { inner, counts: &self.counts })),
            Err(e) => {
                self.counts.counts[0].fetch_add(1, Ordering::Relaxed);
                self.counts.errors[0].fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }
}

/// An upload counted as one `put` when it completes.
struct CountedUpload<'a> {
    inner: Box<dyn Upload + 'a>,
    counts: &'a OperationCounts,
}

#[async_trait]
impl Upload for CountedUpload<'_> {
    async fn write(&mut self, bytes: Bytes) -> ObjectResult<()> {
        self.inner.write(bytes).await
    }

    async fn complete(self: Box<Self>) -> ObjectResult<()> {
        let result = self.inner.complete().await;
        self.counts.record(0, &result);
        result
    }

    async fn abort(self: Box<Self>) -> ObjectResult<()> {
        self.inner.abort().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn operations_are_counted_per_root_and_operation() {
        let metrics = ObjectStoreMetrics::default();
        let store = Counted::new(
            Arc::new(lakestream_objstore::InMemoryStore::new(Arc::new(lakestream_format::SystemClock))),
            metrics.wal.clone(),
        );
        let path = ObjectPath::new("a/b").unwrap();
        store.put(&path, Bytes::from_static(b"x")).await.unwrap();
        store.put(&path, Bytes::from_static(b"y")).await.unwrap_err();
        store.get(&path).await.unwrap();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let out = crate::metrics::encode(&registry);
        assert!(
            out.contains("lakestream_object_store_operations_total{root=\"wal\",operation=\"put\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("lakestream_object_store_errors_total{root=\"wal\",operation=\"put\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("lakestream_object_store_operations_total{root=\"wal\",operation=\"get\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains(
                "lakestream_object_store_operations_total{root=\"compacted\",operation=\"put\"} 0\n"
            )
        );
    }
}
