//! Iceberg's file I/O on a Lakestream [`ObjectStore`]: table metadata, manifests and data
//! files are objects of the compacted root, written and read with the same backend (local
//! files, S3, GCS, Azure), its retries and its metrics.
//!
//! Iceberg names files by location URI. A location `{root_uri}/{rest}` is the object `{rest}`
//! of the store; any other location is refused. Readers (Spark, Trino, pyiceberg) open the
//! same URIs with their own file systems, so `root_uri` must be how they reach the compacted
//! root.

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use futures::stream::BoxStream;
use iceberg::io::{
    FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage, StorageConfig, StorageFactory,
};
use iceberg::{Error, ErrorKind, Result};
use lakestream_objstore::{ByteRange, ObjectPath, ObjectPrefix, ObjectStore, ObjectStoreError};
use serde::{Deserialize, Serialize};

/// Iceberg storage over an [`ObjectStore`], for locations below `root_uri`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObjectStoreStorage {
    root_uri: String,
    /// Not serialisable: a deserialised copy refuses every operation.
    #[serde(skip)]
    store: Option<Arc<dyn ObjectStore>>,
}

impl ObjectStoreStorage {
    /// Storage for locations `{root_uri}/…` (no trailing `/`), the objects of `store`.
    pub fn new(root_uri: impl Into<String>, store: Arc<dyn ObjectStore>) -> ObjectStoreStorage {
        ObjectStoreStorage { root_uri: root_uri.into(), store: Some(store) }
    }

    /// The object path of a location, or an error for a location outside the root.
    pub fn object_path(&self, location: &str) -> Result<ObjectPath> {
        let rest = location
            .strip_prefix(self.root_uri.as_str())
            .and_then(|r| r.strip_prefix('/'))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::FeatureUnsupported,
                    format!("location {location} is outside the compacted root {}", self.root_uri),
                )
            })?;
        ObjectPath::new(rest).map_err(|e| Error::new(ErrorKind::DataInvalid, e.to_string()))
    }

    /// The object store (absent in a deserialised copy).
    pub fn object_store(&self) -> Option<&Arc<dyn ObjectStore>> {
        self.store.as_ref()
    }

    fn store(&self) -> Result<&Arc<dyn ObjectStore>> {
        self.store.as_ref().ok_or_else(|| {
            Error::new(ErrorKind::Unexpected, "an object-store storage cannot be used after deserialisation")
        })
    }
}

fn object_error(location: &str, e: ObjectStoreError) -> Error {
    let kind = match e {
        ObjectStoreError::NotFound { .. } => ErrorKind::DataInvalid,
        _ => ErrorKind::Unexpected,
    };
    Error::new(kind, format!("{location}: {e}"))
}

#[async_trait]
#[typetag::serde(name = "lakestream-object-store")]
impl Storage for ObjectStoreStorage {
    async fn exists(&self, path: &str) -> Result<bool> {
        match self.store()?.head(&self.object_path(path)?).await {
            Ok(_) => Ok(true),
            Err(ObjectStoreError::NotFound { .. }) => Ok(false),
            Err(e) => Err(object_error(path, e)),
        }
    }

    async fn metadata(&self, path: &str) -> Result<FileMetadata> {
        let meta = self.store()?.head(&self.object_path(path)?).await.map_err(|e| object_error(path, e))?;
        Ok(FileMetadata { size: meta.size })
    }

    async fn read(&self, path: &str) -> Result<Bytes> {
        self.store()?.get(&self.object_path(path)?).await.map_err(|e| object_error(path, e))
    }

    async fn reader(&self, path: &str) -> Result<Box<dyn FileRead>> {
        Ok(Box::new(ObjectRead {
            store: self.store()?.clone(),
            path: self.object_path(path)?,
            location: path.to_owned(),
        }))
    }

    async fn write(&self, path: &str, bs: Bytes) -> Result<()> {
        self.store()?.put(&self.object_path(path)?, bs).await.map_err(|e| object_error(path, e))
    }

    async fn writer(&self, path: &str) -> Result<Box<dyn FileWrite>> {
        Ok(Box::new(ObjectWrite {
            store: self.store()?.clone(),
            path: self.object_path(path)?,
            location: path.to_owned(),
            buffer: BytesMut::new(),
            closed: false,
        }))
    }

    async fn delete(&self, path: &str) -> Result<()> {
        self.store()?.delete(&self.object_path(path)?).await.map_err(|e| object_error(path, e))
    }

    async fn delete_prefix(&self, path: &str) -> Result<()> {
        let dir = self.object_path(path.trim_end_matches('/'))?;
        let prefix = ObjectPrefix::new(format!("{}/", dir.as_str()))
            .map_err(|e| Error::new(ErrorKind::DataInvalid, e.to_string()))?;
        let store = self.store()?;
        let mut listing = store.list(&prefix, None);
        let mut batch = Vec::new();
        while let Some(meta) = listing.next().await {
            batch.push(meta.map_err(|e| object_error(path, e))?.path);
            if batch.len() == 1000 {
                store.delete_many(&std::mem::take(&mut batch)).await.map_err(|e| object_error(path, e))?;
            }
        }
        store.delete_many(&batch).await.map_err(|e| object_error(path, e))
    }

    async fn delete_stream(&self, mut paths: BoxStream<'static, String>) -> Result<()> {
        while let Some(path) = paths.next().await {
            self.delete(&path).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> Result<InputFile> {
        self.object_path(path)?;
        Ok(InputFile::new(Arc::new(self.clone()), path.to_owned()))
    }

    fn new_output(&self, path: &str) -> Result<OutputFile> {
        self.object_path(path)?;
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_owned()))
    }
}

struct ObjectRead {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    location: String,
}

#[async_trait]
impl FileRead for ObjectRead {
    async fn read(&self, range: Range<u64>) -> Result<Bytes> {
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        self.store
            .get_range(&self.path, ByteRange::Bounded(range))
            .await
            .map_err(|e| object_error(&self.location, e))
    }
}

/// Buffers the file and writes it as one object on close (objects are write-once).
struct ObjectWrite {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    location: String,
    buffer: BytesMut,
    closed: bool,
}

#[async_trait]
impl FileWrite for ObjectWrite {
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        if self.closed {
            return Err(Error::new(ErrorKind::Unexpected, format!("{} is closed", self.location)));
        }
        self.buffer.extend_from_slice(&bs);
        Ok(())
    }

    async fn close(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        let bytes = std::mem::take(&mut self.buffer).freeze();
        self.store.put(&self.path, bytes).await.map_err(|e| object_error(&self.location, e))
    }
}

/// Hands the one [`ObjectStoreStorage`] to the catalog's file I/O.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObjectStoreStorageFactory {
    storage: ObjectStoreStorage,
}

impl ObjectStoreStorageFactory {
    /// A factory of `storage`.
    pub fn new(storage: ObjectStoreStorage) -> ObjectStoreStorageFactory {
        ObjectStoreStorageFactory { storage }
    }
}

#[typetag::serde(name = "lakestream-object-store-factory")]
impl StorageFactory for ObjectStoreStorageFactory {
    fn build(&self, _config: &StorageConfig) -> Result<Arc<dyn Storage>> {
        self.storage.store()?;
        Ok(Arc::new(self.storage.clone()))
    }
}

#[cfg(test)]
mod tests {
    use lakestream_objstore::InMemoryStore;

    use super::*;

    #[tokio::test]
    async fn locations_map_onto_objects_below_the_root() {
        let store: Arc<dyn ObjectStore> =
            Arc::new(InMemoryStore::new(Arc::new(lakestream_format::ManualClock::new(0))));
        let storage = ObjectStoreStorage::new("s3://bucket/compacted", store.clone());
        assert_eq!(
            storage.object_path("s3://bucket/compacted/_iceberg/a/b").unwrap().as_str(),
            "_iceberg/a/b"
        );
        assert!(storage.object_path("s3://bucket/other/x").is_err());
        assert!(storage.object_path("s3://bucket/compactedx/y").is_err());

        let out = storage.new_output("s3://bucket/compacted/_iceberg/t/m.json").unwrap();
        let mut w = out.writer().await.unwrap();
        w.write(Bytes::from_static(b"hello ")).await.unwrap();
        w.write(Bytes::from_static(b"world")).await.unwrap();
        w.close().await.unwrap();
        let input = storage.new_input("s3://bucket/compacted/_iceberg/t/m.json").unwrap();
        assert_eq!(input.read().await.unwrap(), Bytes::from_static(b"hello world"));
        assert_eq!(input.metadata().await.unwrap().size, 11);
        assert_eq!(input.reader().await.unwrap().read(6..11).await.unwrap(), Bytes::from_static(b"world"));
        assert!(input.exists().await.unwrap());
        storage.delete_prefix("s3://bucket/compacted/_iceberg/t").await.unwrap();
        assert!(!input.exists().await.unwrap());
    }
}
