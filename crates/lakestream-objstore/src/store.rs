//! The [`ObjectStore`] trait: the spec's three object-storage operations ("Write once",
//! "Read", "Delete") plus the head and list calls that reclamation needs.
//!
//! The trait is object-safe: components hold an `Arc<dyn ObjectStore>`, and behaviour such
//! as fault injection is added by wrappers ([`crate::FaultyStore`]) around the same trait.

use std::fmt::Debug;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;

use crate::error::ObjectResult;
use crate::path::{ObjectPath, ObjectPrefix};
use crate::range::ByteRange;

/// What a store knows about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// The object's path, relative to the store's root.
    pub path: ObjectPath,
    /// The object's size in bytes.
    pub size: u64,
    /// When the object was written, in ms since the Unix epoch, as the store records it
    /// (S3: `Last-Modified`, which has one-second resolution; local: the file's mtime).
    pub last_modified_ms: i64,
}

/// How far a backend enforces write-once `put`.
///
/// | backend | promise |
/// |---|---|
/// | `InMemoryStore`, `LocalFsStore` | `Atomic` |
/// | S3 (`lakestream-objstore-s3`), `If-None-Match: *` | per `conditional_put`: `Atomic` on AWS S3, `Sequential` on s3s-fs |
/// | GCS (`lakestream-objstore-cloud`), `ifGenerationMatch=0` | `Atomic` (the service's documented precondition); `Sequential` as configured for fake-gcs-server |
/// | Azure Blob (`lakestream-objstore-cloud`), `If-None-Match: *` | `Atomic` (the service's documented condition); `Sequential` as configured for Azurite |
///
/// Large objects on GCS and Azure are uploaded to a staging name and copied into place under
/// the same condition, so the promise covers them too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteOnce {
    /// `put` on an existing name fails with `AlreadyExists`, and of several concurrent
    /// `put`s of one new name exactly one succeeds.
    Atomic,
    /// `put` on a name that already existed when it started fails with `AlreadyExists`, but
    /// concurrent `put`s of one new name may all succeed and the last one wins. (s3s-fs
    /// checks `If-None-Match` before writing, not atomically.)
    Sequential,
    /// The backend cannot tell: `put` overwrites. Writers rely on unique names alone.
    Unenforced,
}

/// Object storage as the Lakestream spec uses it. Every method documents its contract; the
/// conformance suite (`testkit` feature) checks each backend against it.
///
/// Paths are relative to the store's root. All methods are cancel-safe in the sense that
/// dropping a future never leaves a partial object visible.
#[async_trait]
pub trait ObjectStore: Send + Sync + Debug {
    /// Writes `bytes` as a new object at `path` (the spec's "Write once").
    ///
    /// - The object becomes visible whole or not at all; no reader sees a partial object.
    /// - If the name is taken, fails with `AlreadyExists` and leaves the existing object
    ///   unchanged, as far as [`ObjectStore::write_once`] promises.
    /// - `TimedOutAfterSend` means the object may exist now: never reuse the name.
    async fn put(&self, path: &ObjectPath, bytes: Bytes) -> ObjectResult<()>;

    /// Reads a whole object. `NotFound` if there is none. Where the backend keeps a
    /// checksum of the whole object, the bytes are checked against it (`ChecksumMismatch`).
    async fn get(&self, path: &ObjectPath) -> ObjectResult<Bytes>;

    /// Reads a byte range of an object, with the semantics of [`ByteRange`]: truncated at
    /// the end of the object, `InvalidRange` if it starts beyond the end. `NotFound` if
    /// there is no object, even for an empty range.
    async fn get_range(&self, path: &ObjectPath, range: ByteRange) -> ObjectResult<Bytes>;

    /// The size and modification time of an object. `NotFound` if there is none.
    async fn head(&self, path: &ObjectPath) -> ObjectResult<ObjectMeta>;

    /// Deletes an object. Deleting a missing object succeeds (deletes are idempotent, so a
    /// delete whose outcome was unknown can simply be repeated).
    async fn delete(&self, path: &ObjectPath) -> ObjectResult<()>;

    /// Deletes several objects, in batches where the backend has a batch call. Missing
    /// objects are not an error. On failure some of the objects may have been deleted; the
    /// error names one that was not.
    async fn delete_many(&self, paths: &[ObjectPath]) -> ObjectResult<()>;

    /// Lists the objects whose path starts with `prefix` and sorts after `start_after` (if
    /// given), in ascending byte order of their paths, fetching pages lazily as the stream
    /// is polled. Objects written or deleted during the listing may or may not appear.
    /// Keys in a shared bucket that are not valid [`ObjectPath`]s are skipped.
    fn list(
        &self,
        prefix: &ObjectPrefix,
        start_after: Option<&ObjectPath>,
    ) -> BoxStream<'static, ObjectResult<ObjectMeta>>;

    /// How far this backend enforces write-once `put`.
    fn write_once(&self) -> WriteOnce;

    /// Starts writing a new object at `path` piece by piece ([`Upload`]): for a large object
    /// produced bit by bit (a compacted file, row group after row group), so that it need not
    /// be held in memory whole. The object becomes visible only at [`Upload::complete`], whole
    /// and with `put`'s write-once promise; never if the upload is aborted or dropped.
    ///
    /// The default holds every piece in memory and `put`s the whole at `complete` (no
    /// streaming, the same memory as `put`). Streaming backends: [`crate::LocalFsStore`] (a
    /// temporary file, linked into place at `complete`) and the S3 backend (a multipart
    /// upload, a part sent as each `multipart_part_size` of data arrives).
    async fn start_upload<'a>(&'a self, path: &ObjectPath) -> ObjectResult<Box<dyn Upload + 'a>> {
        Ok(Box::new(BufferedUpload { store: self, path: path.clone(), pieces: Vec::new() }))
    }
}

/// An object being written piece by piece ([`ObjectStore::start_upload`]).
#[async_trait]
pub trait Upload: Send {
    /// Appends `bytes` to the object. May send a part (and wait for an earlier one to finish,
    /// to bound the memory held).
    async fn write(&mut self, bytes: Bytes) -> ObjectResult<()>;

    /// Makes the object visible, whole, with the write-once promise of
    /// [`ObjectStore::put`] (`AlreadyExists` when the name is taken).
    async fn complete(self: Box<Self>) -> ObjectResult<()>;

    /// Gives the upload up: nothing becomes visible, and what was sent is freed (best effort).
    /// Dropping an upload without completing it does the same, in the background.
    async fn abort(self: Box<Self>) -> ObjectResult<()>;
}

/// [`ObjectStore::start_upload`]'s default: the pieces in memory, one `put` at `complete`.
struct BufferedUpload<'a, S: ObjectStore + ?Sized> {
    store: &'a S,
    path: ObjectPath,
    pieces: Vec<Bytes>,
}

#[async_trait]
impl<S: ObjectStore + ?Sized> Upload for BufferedUpload<'_, S> {
    async fn write(&mut self, bytes: Bytes) -> ObjectResult<()> {
        if !bytes.is_empty() {
            self.pieces.push(bytes);
        }
        Ok(())
    }

    async fn complete(self: Box<Self>) -> ObjectResult<()> {
        let whole = match self.pieces.len() {
            0 => Bytes::new(),
            1 => self.pieces[0].clone(),
            _ => {
                let mut joined = bytes::BytesMut::with_capacity(self.pieces.iter().map(Bytes::len).sum());
                for piece in &self.pieces {
                    joined.extend_from_slice(piece);
                }
                joined.freeze()
            }
        };
        self.store.put(&self.path, whole).await
    }

    async fn abort(self: Box<Self>) -> ObjectResult<()> {
        Ok(())
    }
}
