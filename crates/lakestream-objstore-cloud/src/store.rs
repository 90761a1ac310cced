//! [`CloudStore`]: the [`ObjectStore`] trait over an `object_store` client of GCS or Azure.
//!
//! - **Write once.** `put` sends `PutMode::Create`: GCS `ifGenerationMatch=0`, Azure
//!   `If-None-Match: *`; the service's refusal becomes `AlreadyExists`. Both services create
//!   atomically ([`WriteOnce::Atomic`]); an emulator may not (`conditional_put`).
//! - **Multipart.** Objects above `multipart_threshold` are uploaded in parts (GCS XML
//!   multipart, Azure block list) to a staging name below the root (`_uploads/{uuid}`), which
//!   object_store cannot make conditional; the staged object is then copied to its name with
//!   the same condition (GCS copy with `ifGenerationMatch=0`, Azure Copy Blob with
//!   `If-None-Match: *`) and the staging object deleted. The object becomes visible whole.
//! - **Retries and timeouts** are object_store's, set from the same fields as the S3
//!   backend's: attempts, a doubling backoff between `initial_backoff` and `max_backoff`,
//!   per-attempt and connect timeouts. A conditional create is not retried after it may have
//!   reached the service (object_store treats it as non-idempotent): its timeout becomes
//!   `TimedOutAfterSend`.
//! - **Ranges** go to the service as HTTP ranges; the edge cases the services answer with
//!   416 (a range at or past the end, suffixes of empty objects) are settled by a `head` and
//!   [`ByteRange::resolve`], so every backend answers the same. Azure has no suffix ranges,
//!   so a suffix read there costs a `head` first.
//! - **Checksums.** Not checked on read: object_store does not expose the services' CRC32C
//!   (GCS) or Content-MD5 (Azure) of whole objects. TLS and the format's own checksums are
//!   what protects the bytes here.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use lakestream_objstore::{
    ByteRange, ObjectMeta, ObjectPath, ObjectPrefix, ObjectResult, ObjectRoot, ObjectStore, ObjectStoreError,
    WriteOnce,
};
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, GetRange, ObjectStoreExt, PutMode, PutOptions, PutPayload,
    RetryConfig, WriteMultipart,
};

use crate::config::{ConditionalPut, TransferSettings};

/// Deletes in flight at once in `delete_many` (neither service batch-deletes through
/// object_store's GCS client; Azure's batch is used per request).
const DELETE_CONCURRENCY: usize = 16;

/// Which service a [`CloudStore`] talks to (named in errors and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// Google Cloud Storage.
    Gcs,
    /// Azure Blob Storage.
    Azure,
}

impl Service {
    fn name(self) -> &'static str {
        match self {
            Service::Gcs => "gcs",
            Service::Azure => "azure",
        }
    }
}

/// An [`ObjectStore`] on Google Cloud Storage or Azure Blob Storage. Build it with
/// [`CloudStore::gcs`] or [`CloudStore::azure`].
pub struct CloudStore {
    service: Service,
    client: Arc<dyn object_store::ObjectStore>,
    root: ObjectRoot,
    transfer: TransferSettings,
}

impl std::fmt::Debug for CloudStore {
    // The client's own Debug may show credentials; only say where the store is.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudStore")
            .field("service", &self.service)
            .field("root", &self.root.to_string())
            .field("transfer", &self.transfer)
            .finish()
    }
}

/// object_store's client options and retry policy from our settings.
pub(crate) fn client_settings(
    transfer: &TransferSettings,
    endpoint: Option<&str>,
) -> (ClientOptions, RetryConfig) {
    let options = ClientOptions::new()
        .with_timeout(transfer.attempt_timeout)
        .with_connect_timeout(transfer.connect_timeout)
        .with_allow_http(endpoint.is_some_and(|e| e.starts_with("http://")));
    let retry = RetryConfig {
        backoff: BackoffConfig {
            init_backoff: transfer.initial_backoff,
            max_backoff: transfer.max_backoff,
            base: 2.0,
        },
        max_retries: transfer.max_attempts.saturating_sub(1) as usize,
        // Bounded by attempts and backoff; this only stops retries of a request that has
        // been failing for longer than every attempt could take.
        retry_timeout: transfer.attempt_timeout.saturating_mul(transfer.max_attempts),
    };
    (options, retry)
}

impl CloudStore {
    /// A store over an object_store client (built by [`crate::gcs`] or [`crate::azure`]).
    pub(crate) fn new(
        service: Service,
        client: Arc<dyn object_store::ObjectStore>,
        root: ObjectRoot,
        transfer: TransferSettings,
    ) -> Self {
        CloudStore { service, client, root, transfer }
    }

    /// The root this store keeps its objects under.
    pub fn root(&self) -> &ObjectRoot {
        &self.root
    }

    /// Which service this store talks to.
    pub fn service(&self) -> Service {
        self.service
    }

    fn location(&self, path: &ObjectPath) -> ObjectResult<Path> {
        let key = self.root.key_of(path)?;
        Path::parse(&key).map_err(|e| ObjectStoreError::InvalidPath { path: key, reason: path_reason(&e) })
    }

    fn meta(&self, path: ObjectPath, meta: &object_store::ObjectMeta) -> ObjectMeta {
        ObjectMeta { path, size: meta.size, last_modified_ms: meta.last_modified.timestamp_millis() }
    }

    fn error(&self, operation: &'static str, path: &str, error: object_store::Error) -> ObjectStoreError {
        classify(self.service, operation, path, error)
    }

    fn put_mode(&self) -> PutMode {
        match self.transfer.conditional_put {
            ConditionalPut::Atomic | ConditionalPut::Sequential => PutMode::Create,
            ConditionalPut::Disabled => PutMode::Overwrite,
        }
    }

    /// Uploads `bytes` in parts to a staging name, then copies it to `target` under the
    /// write-once condition and deletes the staging object (whatever the copy's outcome).
    async fn put_multipart(&self, path: &ObjectPath, target: &Path, bytes: Bytes) -> ObjectResult<()> {
        let staging_path = ObjectPath::new(format!("_uploads/{}", staging_name()))?;
        let staging = self.location(&staging_path)?;
        let upload =
            self.client.put_multipart(&staging).await.map_err(|e| self.error("put", path.as_str(), e))?;
        let mut writer =
            WriteMultipart::new_with_chunk_size(upload, self.transfer.multipart_part_size as usize);
        for chunk in bytes.chunks(self.transfer.multipart_part_size as usize) {
            writer
                .wait_for_capacity(self.transfer.multipart_concurrency)
                .await
                .map_err(|e| self.error("put", path.as_str(), e))?;
            writer.write(chunk);
        }
        if let Err(e) = writer.finish().await {
            return Err(self.error("put", path.as_str(), e));
        }
        let copied = match self.transfer.conditional_put {
            ConditionalPut::Disabled => self.client.copy(&staging, target).await,
            _ => self.client.copy_if_not_exists(&staging, target).await,
        };
        let cleanup = self.client.delete(&staging).await;
        copied.map_err(|e| self.error("put", path.as_str(), e))?;
        if let Err(e) = cleanup {
            // The object is in place; a leftover staging object only costs space.
            tracing::warn!(staging = %staging, error = %e, "could not delete a multipart staging object");
        }
        // A copy the service finishes asynchronously would show a shorter object.
        let meta = self.client.head(target).await.map_err(|e| self.error("put", path.as_str(), e))?;
        if meta.size != bytes.len() as u64 {
            return Err(ObjectStoreError::backend(
                "put",
                path,
                format!("the copied object has {} bytes, not {}", meta.size, bytes.len()),
            ));
        }
        Ok(())
    }
}

/// A random staging name. Random rather than injected: nothing observable depends on it,
/// and two writers racing for one object must not share a staging name.
#[allow(clippy::disallowed_methods)]
fn staging_name() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn path_reason(_: &object_store::path::Error) -> &'static str {
    "the service's client refuses this key"
}

/// Maps an object_store error onto our error model. object_store hides its HTTP error type,
/// so the status code is read from the message and the transport failure from the
/// `HttpError` in the source chain.
fn classify(
    service: Service,
    operation: &'static str,
    path: &str,
    error: object_store::Error,
) -> ObjectStoreError {
    use object_store::Error as E;
    let path = path.to_owned();
    let detail = format!("{}: {error}", service.name());
    match &error {
        E::NotFound { .. } => return ObjectStoreError::NotFound { path },
        E::AlreadyExists { .. } | E::Precondition { .. } if operation == "put" => {
            return ObjectStoreError::AlreadyExists { path };
        }
        _ => {}
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(current) = source {
        if let Some(http) = current.downcast_ref::<object_store::client::HttpError>() {
            use object_store::client::HttpErrorKind as K;
            return match http.kind() {
                K::Connect => ObjectStoreError::Unavailable { operation, path, detail },
                K::Timeout | K::Interrupted | K::Request if operation == "put" => {
                    ObjectStoreError::TimedOutAfterSend { operation, path, detail }
                }
                K::Timeout | K::Interrupted | K::Request => {
                    ObjectStoreError::Unavailable { operation, path, detail }
                }
                _ => ObjectStoreError::Backend { operation, path, detail },
            };
        }
        source = current.source();
    }
    match status_in(&detail) {
        Some(429 | 503) => ObjectStoreError::Throttled { operation, path, detail },
        Some(500..=599) => ObjectStoreError::Unavailable { operation, path, detail },
        _ => ObjectStoreError::Backend { operation, path, detail },
    }
}

/// The HTTP status in object_store's "status code: 503 ..." message, if any.
fn status_in(message: &str) -> Option<u16> {
    let (_, rest) = message.split_once("status code: ")?;
    rest.get(..3)?.parse().ok()
}

fn to_get_range(range: &ByteRange) -> GetRange {
    match range {
        ByteRange::Bounded(r) => GetRange::Bounded(r.clone()),
        ByteRange::From(start) => GetRange::Offset(*start),
        ByteRange::Suffix(n) => GetRange::Suffix(*n),
    }
}

#[async_trait]
impl ObjectStore for CloudStore {
    async fn put(&self, path: &ObjectPath, bytes: Bytes) -> ObjectResult<()> {
        let target = self.location(path)?;
        if bytes.len() as u64 > self.transfer.multipart_threshold {
            return self.put_multipart(path, &target, bytes).await;
        }
        let options = PutOptions { mode: self.put_mode(), ..PutOptions::default() };
        self.client
            .put_opts(&target, PutPayload::from_bytes(bytes), options)
            .await
            .map(drop)
            .map_err(|e| self.error("put", path.as_str(), e))
    }

    async fn get(&self, path: &ObjectPath) -> ObjectResult<Bytes> {
        let location = self.location(path)?;
        let result = self.client.get(&location).await.map_err(|e| self.error("get", path.as_str(), e))?;
        result.bytes().await.map_err(|e| self.error("get", path.as_str(), e))
    }

    async fn get_range(&self, path: &ObjectPath, range: ByteRange) -> ObjectResult<Bytes> {
        range.validate(path)?;
        let location = self.location(path)?;
        if range.is_empty() {
            // No request can ask for nothing; the object must still exist.
            self.head(path).await?;
            return Ok(Bytes::new());
        }
        let range = match range {
            // Azure has no suffix ranges: find the size first.
            ByteRange::Suffix(n) if self.service == Service::Azure => {
                let size = self.head(path).await?.size;
                if n == 0 || size == 0 {
                    return Ok(Bytes::new());
                }
                ByteRange::Bounded(size - n.min(size)..size)
            }
            other => other,
        };
        let options = GetOptions { range: Some(to_get_range(&range)), ..GetOptions::default() };
        let fetched = match self.client.get_opts(&location, options).await {
            Ok(result) => result.bytes().await,
            Err(e) => Err(e),
        };
        match fetched {
            Ok(bytes) => Ok(bytes),
            Err(object_store::Error::NotFound { .. }) => Err(ObjectStoreError::not_found(path)),
            Err(e) => {
                // 416 and its kin: settle the range against the object's size, the same
                // way for every backend. Anything else is reported as it was.
                let size = self.head(path).await?.size;
                let resolved = range.resolve(path, size)?;
                if resolved.is_empty() {
                    Ok(Bytes::new())
                } else {
                    Err(self.error("get_range", path.as_str(), e))
                }
            }
        }
    }

    async fn head(&self, path: &ObjectPath) -> ObjectResult<ObjectMeta> {
        let location = self.location(path)?;
        let meta = self.client.head(&location).await.map_err(|e| self.error("head", path.as_str(), e))?;
        Ok(self.meta(path.clone(), &meta))
    }

    async fn delete(&self, path: &ObjectPath) -> ObjectResult<()> {
        let location = self.location(path)?;
        match self.client.delete(&location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error("delete", path.as_str(), e)),
        }
    }

    async fn delete_many(&self, paths: &[ObjectPath]) -> ObjectResult<()> {
        let deletes: Vec<_> = paths.iter().map(|path| self.delete(path)).collect();
        let results: Vec<ObjectResult<()>> =
            stream::iter(deletes).buffer_unordered(DELETE_CONCURRENCY).collect().await;
        results.into_iter().collect()
    }

    fn list(
        &self,
        prefix: &ObjectPrefix,
        start_after: Option<&ObjectPath>,
    ) -> BoxStream<'static, ObjectResult<ObjectMeta>> {
        // object_store lists whole path segments; our prefixes are text. List the last
        // complete segment and filter by text, stopping at the first key past the prefix.
        let key_prefix = self.root.key_prefix_of(prefix);
        let directory = key_prefix.rfind('/').map(|slash| Path::from(&key_prefix[..slash]));
        let offset = match start_after.map(|p| self.root.key_of(p)) {
            Some(Ok(key)) => Some(Path::from(key)),
            Some(Err(e)) => return stream::once(async move { Err(e) }).boxed(),
            None => None,
        };
        let listing = match &offset {
            Some(offset) => self.client.list_with_offset(directory.as_ref(), offset),
            None => self.client.list(directory.as_ref()),
        };
        let root = self.root.clone();
        let service = self.service;
        let shown_prefix = prefix.to_string();
        let after = offset.map(|p| p.to_string());
        listing
            .map(move |item| (item, key_prefix.clone(), after.clone()))
            .take_while(|(item, key_prefix, _)| {
                // Keys come in ascending order: once one sorts past every key with the
                // prefix, no later one has it.
                let past = match item {
                    Ok(meta) => {
                        let key = meta.location.as_ref();
                        !key.starts_with(key_prefix.as_str()) && key > key_prefix.as_str()
                    }
                    Err(_) => false,
                };
                futures::future::ready(!past)
            })
            .filter_map(move |(item, key_prefix, after)| {
                let root = root.clone();
                let shown_prefix = shown_prefix.clone();
                async move {
                    match item {
                        Err(e) => Some(Err(classify(service, "list", &shown_prefix, e))),
                        Ok(meta) => {
                            let key = meta.location.as_ref();
                            // Emulators may ignore the offset (Azurite does), so it is
                            // applied here too.
                            if !key.starts_with(key_prefix.as_str())
                                || after.as_deref().is_some_and(|a| key <= a)
                            {
                                return None;
                            }
                            let path = root.path_of_key(key)?;
                            Some(Ok(ObjectMeta {
                                path,
                                size: meta.size,
                                last_modified_ms: meta.last_modified.timestamp_millis(),
                            }))
                        }
                    }
                }
            })
            .boxed()
    }

    fn write_once(&self) -> WriteOnce {
        self.transfer.conditional_put.write_once()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_status_from_object_stores_message() {
        assert_eq!(status_in("Server returned non-2xx status code: 503 Service Unavailable: x"), Some(503));
        assert_eq!(status_in("Server returned non-2xx status code: 429 Too Many"), Some(429));
        assert_eq!(status_in("no status here"), None);
    }
}
