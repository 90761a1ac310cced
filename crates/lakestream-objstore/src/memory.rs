//! An in-memory backend for unit tests: write-once is atomic (one lock), modification times
//! come from the injected [`Clock`], and listing pages through a sorted map.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use lakestream_format::Clock;

use crate::error::{ObjectResult, ObjectStoreError};
use crate::path::{ObjectPath, ObjectPrefix};
use crate::range::ByteRange;
use crate::store::{ObjectMeta, ObjectStore, WriteOnce};

/// How many objects one listing page holds by default. Small, so that the conformance suite
/// exercises paging.
pub const DEFAULT_LIST_PAGE_SIZE: usize = 7;

#[derive(Debug, Clone)]
struct StoredObject {
    bytes: Bytes,
    last_modified_ms: i64,
}

type Objects = Arc<Mutex<BTreeMap<ObjectPath, StoredObject>>>;

/// Objects kept in a map in memory. Cloning shares the same objects.
#[derive(Debug, Clone)]
pub struct InMemoryStore {
    objects: Objects,
    clock: Arc<dyn Clock>,
    list_page_size: usize,
}

impl InMemoryStore {
    /// An empty store whose modification times come from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        InMemoryStore { objects: Objects::default(), clock, list_page_size: DEFAULT_LIST_PAGE_SIZE }
    }

    /// Sets how many objects each listing page holds (at least one).
    pub fn with_list_page_size(mut self, page_size: usize) -> Self {
        self.list_page_size = page_size.max(1);
        self
    }

    /// How many objects the store holds.
    pub fn len(&self) -> usize {
        lock(&self.objects).len()
    }

    /// Whether the store holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// A poisoned lock means a panic while holding it; the map itself is always consistent
// because every critical section is a single map operation.
fn lock(objects: &Objects) -> MutexGuard<'_, BTreeMap<ObjectPath, StoredObject>> {
    objects.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn meta(path: &ObjectPath, object: &StoredObject) -> ObjectMeta {
    ObjectMeta {
        path: path.clone(),
        size: object.bytes.len() as u64,
        last_modified_ms: object.last_modified_ms,
    }
}

#[async_trait]
impl ObjectStore for InMemoryStore {
    async fn put(&self, path: &ObjectPath, bytes: Bytes) -> ObjectResult<()> {
        let last_modified_ms = self.clock.now_ms();
        let mut objects = lock(&self.objects);
        if objects.contains_key(path) {
            return Err(ObjectStoreError::already_exists(path));
        }
        objects.insert(path.clone(), StoredObject { bytes, last_modified_ms });
        Ok(())
    }

    async fn get(&self, path: &ObjectPath) -> ObjectResult<Bytes> {
        let objects = lock(&self.objects);
        objects.get(path).map(|o| o.bytes.clone()).ok_or_else(|| ObjectStoreError::not_found(path))
    }

    async fn get_range(&self, path: &ObjectPath, range: ByteRange) -> ObjectResult<Bytes> {
        range.validate(path)?;
        let bytes = self.get(path).await?;
        let selected = range.resolve(path, bytes.len() as u64)?;
        // `resolve` keeps the range within the object, whose length fits in usize.
        Ok(bytes.slice(selected.start as usize..selected.end as usize))
    }

    async fn head(&self, path: &ObjectPath) -> ObjectResult<ObjectMeta> {
        let objects = lock(&self.objects);
        objects.get(path).map(|o| meta(path, o)).ok_or_else(|| ObjectStoreError::not_found(path))
    }

    async fn delete(&self, path: &ObjectPath) -> ObjectResult<()> {
        lock(&self.objects).remove(path);
        Ok(())
    }

    async fn delete_many(&self, paths: &[ObjectPath]) -> ObjectResult<()> {
        let mut objects = lock(&self.objects);
        for path in paths {
            objects.remove(path);
        }
        Ok(())
    }

    fn list(
        &self,
        prefix: &ObjectPrefix,
        start_after: Option<&ObjectPath>,
    ) -> BoxStream<'static, ObjectResult<ObjectMeta>> {
        // Page through the map as the stream is polled, like a paginated remote listing:
        // each page resumes after the last path of the previous one.
        let objects = self.objects.clone();
        let prefix = prefix.clone();
        let page_size = self.list_page_size;
        let initial = (start_after.cloned(), false);
        stream::unfold(initial, move |(after, done)| {
            let objects = objects.clone();
            let prefix = prefix.clone();
            async move {
                if done {
                    return None;
                }
                let lower = match &after {
                    Some(path) => Bound::Excluded(path.clone()),
                    None => Bound::Unbounded,
                };
                let page: Vec<ObjectMeta> = lock(&objects)
                    .range((lower, Bound::Unbounded))
                    .filter(|(path, _)| prefix.matches(path))
                    .take(page_size)
                    .map(|(path, object)| meta(path, object))
                    .collect();
                let next_after = page.last().map(|m| m.path.clone());
                let done = page.len() < page_size;
                Some((stream::iter(page.into_iter().map(Ok)), (next_after, done)))
            }
        })
        .flatten()
        .boxed()
    }

    fn write_once(&self) -> WriteOnce {
        WriteOnce::Atomic
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lakestream_format::ManualClock;

    #[tokio::test]
    async fn passes_the_conformance_suite() {
        crate::conformance::run_all(|| async {
            Arc::new(InMemoryStore::new(Arc::new(ManualClock::new(1_700_000_000_000))))
                as Arc<dyn ObjectStore>
        })
        .await;
    }

    #[tokio::test]
    async fn modification_time_comes_from_the_injected_clock() {
        let clock = ManualClock::new(5_000);
        let store = InMemoryStore::new(Arc::new(clock.clone()));
        let a = ObjectPath::new("a").unwrap();
        store.put(&a, Bytes::from_static(b"x")).await.unwrap();
        clock.advance_ms(250);
        let b = ObjectPath::new("b").unwrap();
        store.put(&b, Bytes::from_static(b"y")).await.unwrap();
        assert_eq!(store.head(&a).await.unwrap().last_modified_ms, 5_000);
        assert_eq!(store.head(&b).await.unwrap().last_modified_ms, 5_250);
    }
}
