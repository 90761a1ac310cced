//! The local-filesystem backend, the embedded default.
//!
//! Layout: the object `p` of the root `bucket/prefix` is the file
//! `{base_dir}/{bucket}/{prefix}/{p}`, the same layout `s3s-fs` uses, so a directory can be
//! served over S3 by `s3s-fs` and read back locally.
//!
//! Writing an object (why each step is there):
//! 1. The bytes go to a fresh temporary file in `{base_dir}/{bucket}/.lakestream-tmp/`
//!    (same filesystem as the object, so it can be linked into place), then `fsync`: the
//!    data is durable before the object has a name.
//! 2. Missing parent directories are created and each new directory's parent is `fsync`ed,
//!    so that the directory entries survive a crash too.
//! 3. The temporary file is hard-linked to the object's name. `link(2)` fails with `EEXIST`
//!    if the name exists, atomically: this is what makes write-once hold among concurrent
//!    writers (a `rename` would silently replace the object). No reader can see a partial
//!    object because the name appears only once the data is complete.
//! 4. The parent directory is `fsync`ed so the new name is durable, then the temporary name
//!    is removed.
//!
//! A streaming write ([`ObjectStore::start_upload`]) appends each piece to the temporary
//! file as it comes and takes steps 2–4 at `complete`.
//!
//! A crash between steps 1 and 4 can leave a file in `.lakestream-tmp/`; it is never listed
//! or read, and can be removed by an operator when no writer is running. Deleting an object
//! leaves its (possibly empty) directories in place.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::UNIX_EPOCH;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};

use crate::error::{ObjectResult, ObjectStoreError};
use crate::path::{ObjectPath, ObjectPrefix, ObjectRoot};
use crate::range::ByteRange;
use crate::store::{ObjectMeta, ObjectStore, Upload, WriteOnce};

/// The directory below the bucket that holds objects being written. Keys whose first
/// segment is this name cannot be stored by this backend.
pub const TEMP_DIR_NAME: &str = ".lakestream-tmp";

/// Objects as files below a directory.
#[derive(Debug, Clone)]
pub struct LocalFsStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    bucket_dir: PathBuf,
    root: ObjectRoot,
    /// Distinguishes this process's temporary files; with the process id it makes their
    /// names unique without a random source.
    temp_counter: AtomicU64,
}

impl LocalFsStore {
    /// A store for `root` below `base_dir`, creating `{base_dir}/{bucket}` if needed.
    pub fn new(base_dir: impl Into<PathBuf>, root: ObjectRoot) -> ObjectResult<Self> {
        let bucket_dir = base_dir.into().join(root.bucket());
        fs::create_dir_all(bucket_dir.join(TEMP_DIR_NAME))
            .map_err(|e| io_error("open", &bucket_dir.display(), &e))?;
        Ok(LocalFsStore { inner: Arc::new(Inner { bucket_dir, root, temp_counter: AtomicU64::new(0) }) })
    }

    /// The root this store writes to.
    pub fn root(&self) -> &ObjectRoot {
        &self.inner.root
    }

    async fn blocking<T, F>(&self, operation: &'static str, path: String, work: F) -> ObjectResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> ObjectResult<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || work(&inner))
            .await
            .map_err(|e| ObjectStoreError::backend(operation, path, format!("blocking task failed: {e}")))?
    }
}

fn io_error(operation: &'static str, path: &dyn std::fmt::Display, error: &io::Error) -> ObjectStoreError {
    ObjectStoreError::backend(operation, path, error)
}

impl Inner {
    fn file_of(&self, path: &ObjectPath) -> ObjectResult<PathBuf> {
        let key = self.root.key_of(path)?;
        if key.split('/').next() == Some(TEMP_DIR_NAME) {
            return Err(ObjectStoreError::invalid_path(
                &key,
                "the local backend reserves the first segment '.lakestream-tmp'",
            ));
        }
        Ok(self.bucket_dir.join(key))
    }

    fn put(&self, path: &ObjectPath, bytes: &[u8]) -> ObjectResult<()> {
        let file = self.file_of(path)?;
        if file.is_dir() {
            return Err(ObjectStoreError::backend(
                "put",
                path,
                "a directory holding other objects has this name; the local backend cannot hold both",
            ));
        }
        if file.exists() {
            return Err(ObjectStoreError::already_exists(path));
        }
        let (temp, mut temp_file) = self.create_temp_file().map_err(|e| io_error("put", path, &e))?;
        let result = (|| {
            temp_file.write_all(bytes).map_err(|e| io_error("put", path, &e))?;
            self.publish(path, &temp, temp_file)
        })();
        // The temporary name is only scaffolding: whether or not the link succeeded, it goes.
        let _ = fs::remove_file(&temp);
        result
    }

    /// Steps 1 (the `fsync`) to 4 for a temporary file holding the whole object; the caller
    /// removes the temporary name.
    fn publish(&self, path: &ObjectPath, temp: &Path, temp_file: File) -> ObjectResult<()> {
        let file = self.file_of(path)?;
        temp_file.sync_all().map_err(|e| io_error("put", path, &e))?;
        drop(temp_file);
        let parent = file.parent().unwrap_or(&self.bucket_dir);
        create_dirs_durably(parent).map_err(|e| io_error("put", path, &e))?;
        match fs::hard_link(temp, &file) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(ObjectStoreError::already_exists(path));
            }
            Err(e) => return Err(io_error("put", path, &e)),
        }
        sync_dir(parent).map_err(|e| io_error("put", path, &e))
    }

    fn create_temp_file(&self) -> io::Result<(PathBuf, File)> {
        let dir = self.bucket_dir.join(TEMP_DIR_NAME);
        loop {
            let n = self.temp_counter.fetch_add(1, Ordering::Relaxed);
            let temp = dir.join(format!("{}-{n}.part", std::process::id()));
            match OpenOptions::new().write(true).create_new(true).open(&temp) {
                Ok(file) => return Ok((temp, file)),
                // Left over by an earlier process with the same id: take the next name.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn get_range(&self, path: &ObjectPath, range: Option<&ByteRange>) -> ObjectResult<Bytes> {
        let file_path = self.file_of(path)?;
        let mut file = match File::open(&file_path) {
            Ok(file) => file,
            Err(e) if is_missing(&e) => return Err(ObjectStoreError::not_found(path)),
            Err(e) => return Err(io_error("get", path, &e)),
        };
        let metadata = file.metadata().map_err(|e| io_error("get", path, &e))?;
        if !metadata.is_file() {
            return Err(ObjectStoreError::not_found(path));
        }
        let size = metadata.len();
        let selected = match range {
            Some(range) => range.resolve(path, size)?,
            None => 0..size,
        };
        let length = usize::try_from(selected.end - selected.start)
            .map_err(|_| ObjectStoreError::backend("get", path, "range longer than memory can hold"))?;
        file.seek(SeekFrom::Start(selected.start)).map_err(|e| io_error("get", path, &e))?;
        // Read into spare capacity: zeroing the buffer first cost as much CPU as the read.
        let mut buffer = Vec::with_capacity(length);
        (&mut file).take(length as u64).read_to_end(&mut buffer).map_err(|e| io_error("get", path, &e))?;
        if buffer.len() != length {
            return Err(ObjectStoreError::backend(
                "get",
                path,
                format!("the file ended after {} of the {length} bytes asked for", buffer.len()),
            ));
        }
        Ok(Bytes::from(buffer))
    }

    fn head(&self, path: &ObjectPath) -> ObjectResult<ObjectMeta> {
        let file = self.file_of(path)?;
        match fs::metadata(&file) {
            Ok(metadata) if metadata.is_file() => Ok(meta_of(path.clone(), &metadata)),
            Ok(_) => Err(ObjectStoreError::not_found(path)),
            Err(e) if is_missing(&e) => Err(ObjectStoreError::not_found(path)),
            Err(e) => Err(io_error("head", path, &e)),
        }
    }

    fn delete(&self, path: &ObjectPath) -> ObjectResult<()> {
        let file = self.file_of(path)?;
        if file.is_dir() {
            return Ok(()); // a directory of other objects: there is no object by this name
        }
        match fs::remove_file(&file) {
            Ok(()) => Ok(()),
            Err(e) if is_missing(&e) => Ok(()),
            Err(e) => Err(io_error("delete", path, &e)),
        }
    }

    fn list(&self, prefix: &ObjectPrefix, start_after: Option<&ObjectPath>) -> ObjectResult<Vec<ObjectMeta>> {
        // Walk only the directory that holds the prefix's complete segments.
        let key_prefix = self.root.key_prefix_of(prefix);
        let walk_from = match key_prefix.rsplit_once('/') {
            Some((dir, _)) => self.bucket_dir.join(dir),
            None => self.bucket_dir.clone(),
        };
        let mut found = Vec::new();
        walk(&walk_from, &self.bucket_dir, &mut found).map_err(|e| io_error("list", prefix, &e))?;
        let mut listed: Vec<ObjectMeta> = found
            .into_iter()
            .filter_map(|(key, metadata)| {
                let path = self.root.path_of_key(&key)?;
                let in_range = prefix.matches(&path) && start_after.is_none_or(|after| &path > after);
                in_range.then(|| meta_of(path, &metadata))
            })
            .collect();
        listed.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(listed)
    }
}

fn is_missing(error: &io::Error) -> bool {
    matches!(error.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory)
}

fn meta_of(path: ObjectPath, metadata: &fs::Metadata) -> ObjectMeta {
    let last_modified_ms = metadata
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .and_then(|d| i64::try_from(d.as_millis()).ok())
        .unwrap_or(0);
    ObjectMeta { path, size: metadata.len(), last_modified_ms }
}

/// Collects every file below `dir` with its key relative to `bucket_dir`, skipping the
/// temporary directory. Entries that vanish during the walk are skipped.
fn walk(dir: &Path, bucket_dir: &Path, found: &mut Vec<(String, fs::Metadata)>) -> io::Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if is_missing(&e) => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let full = entry.path();
        let metadata = match fs::metadata(&full) {
            Ok(metadata) => metadata,
            Err(e) if is_missing(&e) => continue,
            Err(e) => return Err(e),
        };
        let Ok(relative) = full.strip_prefix(bucket_dir) else { continue };
        let Some(key) = relative.to_str().map(|k| k.replace(std::path::MAIN_SEPARATOR, "/")) else {
            continue; // not UTF-8: not one of ours
        };
        if metadata.is_dir() {
            if key != TEMP_DIR_NAME {
                walk(&full, bucket_dir, found)?;
            }
        } else if metadata.is_file() {
            found.push((key, metadata));
        }
    }
    Ok(())
}

/// Creates `dir` and its missing ancestors, and fsyncs the parent of each directory it
/// created so the new entries are durable.
fn create_dirs_durably(dir: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut current = dir;
    while !current.exists() {
        missing.push(current.to_path_buf());
        match current.parent() {
            Some(parent) => current = parent,
            None => break,
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    fs::create_dir_all(dir)?;
    for created in missing.iter().rev() {
        if let Some(parent) = created.parent() {
            sync_dir(parent)?;
        }
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[async_trait]
impl ObjectStore for LocalFsStore {
    async fn put(&self, path: &ObjectPath, bytes: Bytes) -> ObjectResult<()> {
        let path = path.clone();
        self.blocking("put", path.to_string(), move |inner| inner.put(&path, &bytes)).await
    }

    async fn get(&self, path: &ObjectPath) -> ObjectResult<Bytes> {
        let path = path.clone();
        self.blocking("get", path.to_string(), move |inner| inner.get_range(&path, None)).await
    }

    async fn get_range(&self, path: &ObjectPath, range: ByteRange) -> ObjectResult<Bytes> {
        range.validate(path)?;
        let path = path.clone();
        self.blocking("get", path.to_string(), move |inner| inner.get_range(&path, Some(&range))).await
    }

    async fn head(&self, path: &ObjectPath) -> ObjectResult<ObjectMeta> {
        let path = path.clone();
        self.blocking("head", path.to_string(), move |inner| inner.head(&path)).await
    }

    async fn delete(&self, path: &ObjectPath) -> ObjectResult<()> {
        let path = path.clone();
        self.blocking("delete", path.to_string(), move |inner| inner.delete(&path)).await
    }

    async fn delete_many(&self, paths: &[ObjectPath]) -> ObjectResult<()> {
        let paths = paths.to_vec();
        self.blocking("delete", format!("{} objects", paths.len()), move |inner| {
            paths.iter().try_for_each(|path| inner.delete(path))
        })
        .await
    }

    fn list(
        &self,
        prefix: &ObjectPrefix,
        start_after: Option<&ObjectPath>,
    ) -> BoxStream<'static, ObjectResult<ObjectMeta>> {
        // A directory walk cannot resume in key order, so the listing is collected whole
        // (one blocking task) and then streamed.
        let store = self.clone();
        let prefix = prefix.clone();
        let start_after = start_after.cloned();
        stream::once(async move {
            let listed = store
                .blocking("list", prefix.to_string(), move |inner| inner.list(&prefix, start_after.as_ref()))
                .await;
            match listed {
                Ok(objects) => stream::iter(objects.into_iter().map(Ok)).boxed(),
                Err(e) => stream::once(async move { Err(e) }).boxed(),
            }
        })
        .flatten()
        .boxed()
    }

    fn write_once(&self) -> WriteOnce {
        WriteOnce::Atomic
    }

    async fn start_upload<'a>(&'a self, path: &ObjectPath) -> ObjectResult<Box<dyn Upload + 'a>> {
        self.inner.file_of(path)?; // a reserved or foreign name fails now, not at the end
        let name = path.clone();
        let (temp, file) = self
            .blocking("put", path.to_string(), move |inner| {
                inner.create_temp_file().map_err(|e| io_error("put", &name, &e))
            })
            .await?;
        Ok(Box::new(LocalUpload { store: self.clone(), path: path.clone(), temp, file: Some(file) }))
    }
}

/// A streaming write: the pieces go to a temporary file, linked into place at `complete`.
struct LocalUpload {
    store: LocalFsStore,
    path: ObjectPath,
    temp: PathBuf,
    /// `None` while a piece is being written (or once completed).
    file: Option<File>,
}

impl LocalUpload {
    fn file(&mut self) -> ObjectResult<File> {
        self.file.take().ok_or_else(|| {
            ObjectStoreError::backend("put", &self.path, "an earlier write of this upload failed")
        })
    }
}

#[async_trait]
impl Upload for LocalUpload {
    async fn write(&mut self, bytes: Bytes) -> ObjectResult<()> {
        let mut file = self.file()?;
        let path = self.path.clone();
        let file = self
            .store
            .blocking("put", path.to_string(), move |_| {
                file.write_all(&bytes).map_err(|e| io_error("put", &path, &e))?;
                Ok(file)
            })
            .await?;
        self.file = Some(file);
        Ok(())
    }

    async fn complete(mut self: Box<Self>) -> ObjectResult<()> {
        let file = self.file()?;
        let (path, temp) = (self.path.clone(), self.temp.clone());
        // Dropping `self` removes the temporary name, linked or not.
        self.store.blocking("put", path.to_string(), move |inner| inner.publish(&path, &temp, file)).await
    }

    async fn abort(self: Box<Self>) -> ObjectResult<()> {
        Ok(()) // the drop removes the temporary file
    }
}

impl Drop for LocalUpload {
    fn drop(&mut self) {
        self.file = None;
        let _ = fs::remove_file(&self.temp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(dir: &Path, root: &str) -> LocalFsStore {
        LocalFsStore::new(dir, ObjectRoot::parse(root).unwrap()).unwrap()
    }

    #[tokio::test]
    async fn passes_the_conformance_suite() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().to_path_buf();
        crate::conformance::run_all(|| {
            let base = base.clone();
            async move { Arc::new(store(&base, "bucket/root")) as Arc<dyn ObjectStore> }
        })
        .await;
    }

    #[tokio::test]
    async fn passes_the_conformance_suite_without_a_root_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().to_path_buf();
        crate::conformance::run_all(|| {
            let base = base.clone();
            async move { Arc::new(store(&base, "bucket")) as Arc<dyn ObjectStore> }
        })
        .await;
    }

    #[tokio::test]
    async fn objects_are_files_in_the_s3s_fs_layout_and_temp_files_are_cleaned_up() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path(), "bucket/wal");
        let path = ObjectPath::new("7/a.wal").unwrap();
        store.put(&path, Bytes::from_static(b"abc")).await.unwrap();
        assert_eq!(fs::read(dir.path().join("bucket/wal/7/a.wal")).unwrap(), b"abc");
        let leftovers = fs::read_dir(dir.path().join("bucket").join(TEMP_DIR_NAME)).unwrap().count();
        assert_eq!(leftovers, 0, "the temporary file is removed after the link");
    }

    #[tokio::test]
    async fn the_temp_directory_is_neither_listed_nor_writable() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path(), "bucket");
        fs::write(dir.path().join("bucket").join(TEMP_DIR_NAME).join("1-0.part"), b"partial").unwrap();
        let listed: Vec<_> = store.list(&ObjectPrefix::all(), None).collect().await;
        assert!(listed.is_empty(), "{listed:?}");
        let reserved = ObjectPath::new(format!("{TEMP_DIR_NAME}/x")).unwrap();
        let err = store.put(&reserved, Bytes::new()).await.unwrap_err();
        assert!(matches!(err, ObjectStoreError::InvalidPath { .. }), "{err}");
    }

    #[tokio::test]
    async fn a_failed_put_leaves_no_object_and_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path(), "bucket");
        let file = ObjectPath::new("a").unwrap();
        store.put(&file, Bytes::from_static(b"1")).await.unwrap();
        // "a" is a file, so "a/b" cannot get a parent directory.
        let below = ObjectPath::new("a/b").unwrap();
        let err = store.put(&below, Bytes::from_static(b"2")).await.unwrap_err();
        assert_eq!(err.class(), lakestream_format::ErrorClass::Internal, "{err}");
        assert!(matches!(store.head(&below).await, Err(ObjectStoreError::NotFound { .. })));
        let leftovers = fs::read_dir(dir.path().join("bucket").join(TEMP_DIR_NAME)).unwrap().count();
        assert_eq!(leftovers, 0);
    }
}
