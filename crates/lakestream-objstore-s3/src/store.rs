//! [`S3Store`]: the [`ObjectStore`] trait over aws-sdk-s3.
//!
//! - **Write once.** PutObject and CompleteMultipartUpload carry `If-None-Match: *` (unless
//!   [`ConditionalPut::Disabled`]); `412 Precondition Failed` becomes `AlreadyExists`.
//! - **Checksums.** Every PutObject and UploadPart carries `x-amz-checksum-crc32c`, computed
//!   here with the `crc32c` crate (the SDK's own calculation is switched to `WhenRequired`,
//!   where it would send nothing for PutObject); multipart uploads also declare a
//!   full-object CRC32C. Whole-object GETs send `x-amz-checksum-mode: ENABLED` and compare
//!   the returned full-object CRC32C with the bytes received.
//! - **Streaming writes** ([`ObjectStore::start_upload`]): a multipart upload whose parts are
//!   sent as the data arrives, each as soon as 5 MiB (S3's smallest part) or more are pending
//!   (at most `multipart_part_size`), so an upload holds little unsent data; parts in flight
//!   stay within `multipart_concurrency` × `multipart_part_size` bytes across all of the
//!   store's uploads. Completed with the full-object CRC32C (computed as the data passes) and
//!   `If-None-Match: *`; an upload of less than 5 MiB is one PutObject at `complete`.
//! - **Retries** with the project's one backoff policy ([`lakestream_format::retry`]:
//!   exponential, full jitter; `max_attempts`, `initial_backoff`, `max_backoff`, and
//!   `retry_seed` to replay the jitter). The SDK's own retries are off, so that one policy,
//!   which knows our error classes, decides: throttling (503 SlowDown, 429) and transient
//!   failures (500, 502, 504, connection errors) are retried, and timeouts of reads; a write
//!   whose attempt may have reached the server is retried only where repeating it is safe.
//!   **Timeouts** per attempt and per connect.
//!
//! [`ConditionalPut::Disabled`]: crate::ConditionalPut::Disabled

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use aws_credential_types::provider::error::CredentialsError;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    ChecksumAlgorithm, ChecksumType, CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier,
};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use lakestream_format::retry::{Backoff, BackoffPolicy};
use lakestream_objstore::{
    ByteRange, ObjectMeta, ObjectPath, ObjectPrefix, ObjectResult, ObjectRoot, ObjectStore, ObjectStoreError,
    Upload, WriteOnce,
};

use crate::config::{ConditionalPut, MAX_PARTS, MIN_PART_SIZE, S3Config};
use crate::credentials::{LazyDefaultChain, credentials_failure};

/// The header that asks S3 to return an object's checksum with a GET.
const CHECKSUM_MODE_HEADER: &str = "x-amz-checksum-mode";

/// Objects in an S3 bucket (or any server speaking the S3 API).
#[derive(Debug, Clone)]
pub struct S3Store {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: Client,
    root: ObjectRoot,
    config: S3Config,
    backoff: Backoff,
    /// KiB of streaming uploads' parts in flight, across all of the store's uploads: at most
    /// `multipart_concurrency` × `multipart_part_size`, however many uploads run at once.
    part_slots: Arc<tokio::sync::Semaphore>,
}

/// The base64 text of the CRC32C of `bytes`, as S3's `x-amz-checksum-crc32c` carries it
/// (the big-endian bytes of the 32-bit value).
pub fn crc32c_base64(bytes: &[u8]) -> String {
    BASE64.encode(crc32c::crc32c(bytes).to_be_bytes())
}

impl S3Store {
    /// A store with the given settings.
    pub fn new(config: S3Config) -> ObjectResult<Self> {
        S3Store::with_sdk_config(config, |builder| builder)
    }

    /// A store whose SDK configuration `customize` may extend after ours is applied, e.g. to
    /// add an interceptor or an HTTP client.
    pub fn with_sdk_config(
        config: S3Config,
        customize: impl FnOnce(aws_sdk_s3::config::Builder) -> aws_sdk_s3::config::Builder,
    ) -> ObjectResult<Self> {
        config.validate()?;
        let root = config.root()?;
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(config.connect_timeout)
            .operation_attempt_timeout(config.attempt_timeout)
            .build();
        let mut builder = aws_sdk_s3::config::Builder::new()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(config.region.clone()))
            .force_path_style(config.force_path_style)
            .timeout_config(timeouts)
            // One retry policy, ours, which knows which writes are safe to repeat.
            .retry_config(RetryConfig::disabled())
            // We send the CRC32C ourselves and validate it ourselves (see the module doc).
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired);
        if let Some(endpoint) = &config.endpoint {
            builder = builder.endpoint_url(endpoint);
        }
        // Static keys when configured; unsigned requests only when asked for; else the AWS
        // default credential chain (crate::credentials).
        builder = match (&config.access_key_id, &config.secret_access_key) {
            (Some(key), Some(secret)) => builder.credentials_provider(Credentials::new(
                key,
                secret,
                config.session_token.clone(),
                None,
                "lakestream-s3-config",
            )),
            _ if config.anonymous => builder.allow_no_auth(),
            _ => builder.credentials_provider(LazyDefaultChain::new(Region::new(config.region.clone()))),
        };
        let client = Client::from_conf(customize(builder).build());
        // The project's one retry policy (full jitter); `retry_seed` fixes its jitter, else
        // the process's generator (seeded from the OS) draws it.
        let policy = BackoffPolicy::new(config.initial_backoff, config.max_backoff, config.max_attempts);
        let backoff = Backoff::with_seed(policy, config.retry_seed);
        let slots = usize::try_from(config.multipart_part_size / 1024)
            .unwrap_or(usize::MAX)
            .saturating_mul(config.multipart_concurrency)
            .min(tokio::sync::Semaphore::MAX_PERMITS);
        let part_slots = Arc::new(tokio::sync::Semaphore::new(slots));
        Ok(S3Store { inner: Arc::new(Inner { client, root, config, backoff, part_slots }) })
    }

    /// The root this store writes to.
    pub fn root(&self) -> &ObjectRoot {
        &self.inner.root
    }

    /// The SDK client, for calls this trait does not cover.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }
}

/// What the failed attempts before the last one may have done.
#[derive(Debug, Clone, Copy, Default)]
struct EarlierAttempts {
    /// Some attempt failed and was retried.
    failed: bool,
    /// Some attempt of a write timed out after sending: it may have taken effect.
    maybe_applied: bool,
}

/// Whether a failed attempt is worth repeating.
fn is_retryable(error: &ObjectStoreError) -> bool {
    matches!(
        error,
        ObjectStoreError::Throttled { .. }
            | ObjectStoreError::Unavailable { .. }
            | ObjectStoreError::TimedOutAfterSend { .. }
    )
}

/// Maps an SDK error to ours. `write` says whether the request changes state, because a
/// write that timed out after sending has an unknown outcome while a read simply failed.
pub(crate) fn classify<E>(
    error: &SdkError<E>,
    operation: &'static str,
    path: &str,
    write: bool,
) -> ObjectStoreError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let path = path.to_owned();
    let detail = DisplayErrorContext(error).to_string();
    let maybe_sent = |detail: String| {
        if write {
            ObjectStoreError::TimedOutAfterSend { operation, path: path.clone(), detail }
        } else {
            ObjectStoreError::Unavailable { operation, path: path.clone(), detail }
        }
    };
    // Credentials are resolved before a request is signed and sent: a request that found
    // none was never sent, whatever kind of SDK error carries the failure.
    if let Some(failure) = credentials_failure(error) {
        let detail = format!("no S3 credentials ({detail})");
        return match failure {
            CredentialsError::ProviderTimedOut(_) | CredentialsError::ProviderError(_) => {
                ObjectStoreError::Unavailable { operation, path, detail }
            }
            _ => ObjectStoreError::backend(operation, &path, detail),
        };
    }
    match error {
        SdkError::ConstructionFailure(_) => ObjectStoreError::backend(operation, &path, detail),
        // The request may have reached the server; we cannot tell.
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            maybe_sent(detail)
        }
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            let code = error.code().unwrap_or_default();
            match (status, code) {
                // A missing bucket is a configuration problem, not a missing object.
                (_, "NoSuchBucket") => ObjectStoreError::backend(operation, &path, detail),
                (404, _) | (_, "NoSuchKey") => ObjectStoreError::NotFound { path },
                (412, _) | (_, "PreconditionFailed") => ObjectStoreError::AlreadyExists { path },
                (416, _) | (_, "InvalidRange") => ObjectStoreError::InvalidRange {
                    path,
                    range: String::new(),
                    reason: "the server answered 416 Range Not Satisfiable".to_owned(),
                },
                (429, _)
                | (503, _)
                | (_, "SlowDown" | "Throttling" | "ThrottlingException" | "TooManyRequests") => {
                    ObjectStoreError::Throttled { operation, path, detail }
                }
                // 409 ConditionalRequestConflict: a concurrent conditional write is in
                // progress; AWS asks to retry. BadDigest: the body was damaged in flight.
                (500 | 502 | 504 | 409, _) | (_, "InternalError" | "RequestTimeout" | "BadDigest") => {
                    ObjectStoreError::Unavailable { operation, path, detail }
                }
                _ => ObjectStoreError::backend(operation, &path, detail),
            }
        }
        _ => ObjectStoreError::backend(operation, &path, detail),
    }
}

impl Inner {
    /// Runs `attempt` until it succeeds, fails for good, or runs out of attempts, sleeping
    /// the jittered backoff in between. Returns the result and what the failed attempts
    /// before it may have done (for writes).
    async fn retrying<T, F, Fut>(&self, mut attempt: F) -> (ObjectResult<T>, EarlierAttempts)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = ObjectResult<T>>,
    {
        let mut earlier = EarlierAttempts::default();
        let mut retry = 0;
        loop {
            match attempt().await {
                Err(error) if is_retryable(&error) && self.backoff.allows_another(retry + 1) => {
                    earlier.failed = true;
                    earlier.maybe_applied |= matches!(error, ObjectStoreError::TimedOutAfterSend { .. });
                    tracing::debug!(%error, retry, "retrying S3 request");
                    tokio::time::sleep(self.backoff.delay(retry)).await;
                    retry += 1;
                }
                result => return (result, earlier),
            }
        }
    }

    /// A write's final result, given what earlier attempts may have done:
    /// - after an attempt that timed out once sent, a retryable failure or "not found" (a
    ///   multipart upload that our own earlier attempt completed) is an unknown outcome;
    /// - after any failed attempt, "already exists" may be our own earlier attempt (a 500
    ///   after the write, or s3s-fs, which keeps the object of a PUT it refused with
    ///   BadDigest), so it is an unknown outcome too, never a plain conflict.
    fn settle_write<T>(
        result: ObjectResult<T>,
        earlier: EarlierAttempts,
        operation: &'static str,
        path: &str,
    ) -> ObjectResult<T> {
        let unknown = match &result {
            Err(ObjectStoreError::AlreadyExists { .. }) => earlier.failed,
            Err(ObjectStoreError::NotFound { .. }) => earlier.maybe_applied,
            Err(error) if is_retryable(error) => earlier.maybe_applied,
            _ => false,
        };
        match result {
            Err(error) if unknown => Err(ObjectStoreError::TimedOutAfterSend {
                operation,
                path: path.to_owned(),
                detail: format!("an earlier attempt may have taken effect; last attempt: {error}"),
            }),
            other => other,
        }
    }

    fn if_none_match(&self) -> Option<String> {
        (self.config.conditional_put != ConditionalPut::Disabled).then(|| "*".to_owned())
    }

    async fn put_single(&self, path: &ObjectPath, key: &str, bytes: Bytes) -> ObjectResult<()> {
        let checksum = crc32c_base64(&bytes);
        let (result, earlier) = self
            .retrying(|| async {
                self.client
                    .put_object()
                    .bucket(self.root.bucket())
                    .key(key)
                    .body(ByteStream::from(bytes.clone()))
                    .checksum_crc32_c(&checksum)
                    .set_if_none_match(self.if_none_match())
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| classify(&e, "put", path.as_str(), true))
            })
            .await;
        Inner::settle_write(result, earlier, "put", path.as_str())
    }

    async fn put_multipart(&self, path: &ObjectPath, key: &str, bytes: Bytes) -> ObjectResult<()> {
        let part_size = self.config.multipart_part_size;
        let part_count = (bytes.len() as u64).div_ceil(part_size);
        if part_count > MAX_PARTS {
            return Err(ObjectStoreError::InvalidConfig {
                field: "multipart_part_size",
                reason: format!("{} bytes need {part_count} parts, more than S3's 10000", bytes.len()),
            });
        }
        let upload_id = self.create_upload(path, key).await?;
        let uploaded = self.upload_parts_and_complete(path, key, &upload_id, bytes, part_count).await;
        if uploaded.is_err() {
            self.abort_upload(key, &upload_id).await;
        }
        uploaded
    }

    /// CreateMultipartUpload with a full-object CRC32C: the upload id.
    async fn create_upload(&self, path: &ObjectPath, key: &str) -> ObjectResult<String> {
        let (created, _) = self
            .retrying(|| async {
                self.client
                    .create_multipart_upload()
                    .bucket(self.root.bucket())
                    .key(key)
                    .checksum_algorithm(ChecksumAlgorithm::Crc32C)
                    .checksum_type(ChecksumType::FullObject)
                    .send()
                    .await
                    .map_err(|e| classify(&e, "put", path.as_str(), false))
            })
            .await;
        created?.upload_id.ok_or_else(|| {
            ObjectStoreError::backend("put", path, "CreateMultipartUpload returned no upload id")
        })
    }

    /// Best effort: an unfinished upload costs storage until a lifecycle rule or this abort
    /// removes it. The object itself never becomes visible.
    async fn abort_upload(&self, key: &str, upload_id: &str) {
        let abort =
            self.client.abort_multipart_upload().bucket(self.root.bucket()).key(key).upload_id(upload_id);
        if let Err(e) = abort.send().await {
            tracing::warn!(%key, error = %DisplayErrorContext(&e), "could not abort multipart upload");
        }
    }

    async fn upload_parts_and_complete(
        &self,
        path: &ObjectPath,
        key: &str,
        upload_id: &str,
        bytes: Bytes,
        part_count: u64,
    ) -> ObjectResult<()> {
        let part_size = self.config.multipart_part_size as usize;
        let parts: Vec<CompletedPart> = stream::iter(0..part_count as usize)
            .map(|index| {
                let start = index * part_size;
                let part = bytes.slice(start..(start + part_size).min(bytes.len()));
                // Part numbers are 1-based and at most 10000, checked above.
                let part_number = index as i32 + 1;
                self.upload_part(path, key, upload_id, part_number, part)
            })
            .buffered(self.config.multipart_concurrency)
            .try_collect()
            .await?;
        self.complete_upload(path, key, upload_id, parts, &crc32c_base64(&bytes)).await
    }

    /// CompleteMultipartUpload with the whole object's CRC32C and `If-None-Match: *`.
    async fn complete_upload(
        &self,
        path: &ObjectPath,
        key: &str,
        upload_id: &str,
        parts: Vec<CompletedPart>,
        whole_checksum: &str,
    ) -> ObjectResult<()> {
        let (result, earlier) = self
            .retrying(|| async {
                self.client
                    .complete_multipart_upload()
                    .bucket(self.root.bucket())
                    .key(key)
                    .upload_id(upload_id)
                    .multipart_upload(
                        CompletedMultipartUpload::builder().set_parts(Some(parts.clone())).build(),
                    )
                    .checksum_crc32_c(whole_checksum)
                    .checksum_type(ChecksumType::FullObject)
                    .set_if_none_match(self.if_none_match())
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| classify(&e, "put", path.as_str(), true))
            })
            .await;
        Inner::settle_write(result, earlier, "put", path.as_str())
    }

    async fn upload_part(
        &self,
        path: &ObjectPath,
        key: &str,
        upload_id: &str,
        part_number: i32,
        part: Bytes,
    ) -> ObjectResult<CompletedPart> {
        let checksum = crc32c_base64(&part);
        // Uploading a part again replaces it: always safe to retry.
        let (result, _) = self
            .retrying(|| async {
                self.client
                    .upload_part()
                    .bucket(self.root.bucket())
                    .key(key)
                    .upload_id(upload_id)
                    .part_number(part_number)
                    .body(ByteStream::from(part.clone()))
                    .checksum_crc32_c(&checksum)
                    .send()
                    .await
                    .map_err(|e| classify(&e, "put", path.as_str(), false))
            })
            .await;
        let uploaded = result?;
        Ok(CompletedPart::builder()
            .part_number(part_number)
            .set_e_tag(uploaded.e_tag)
            .checksum_crc32_c(checksum)
            .build())
    }

    /// One GET attempt: the whole object (checksum-checked) or an HTTP range.
    async fn get_once(&self, path: &ObjectPath, key: &str, range: Option<&str>) -> ObjectResult<Bytes> {
        let request =
            self.client.get_object().bucket(self.root.bucket()).key(key).set_range(range.map(str::to_owned));
        let response = if range.is_none() {
            // Asked for through the raw header so that the SDK leaves the comparison to us
            // (it would report a mismatch as an opaque body error).
            request
                .customize()
                .mutate_request(|request| {
                    request.headers_mut().insert(CHECKSUM_MODE_HEADER, "ENABLED");
                })
                .send()
                .await
        } else {
            request.send().await
        }
        .map_err(|e| classify(&e, "get", path.as_str(), false))?;
        let expected = response.checksum_crc32_c.clone();
        let body = response.body.collect().await.map_err(|e| ObjectStoreError::Unavailable {
            operation: "get",
            path: path.to_string(),
            detail: format!("reading the response body: {e}"),
        })?;
        let bytes = body.into_bytes();
        // A composite checksum of a multipart object ends in "-{parts}" and is not the CRC32C
        // of the bytes; S3 returns no checksum for a partial range.
        if range.is_none()
            && let Some(expected) = expected.filter(|c| !c.contains('-'))
        {
            let actual = crc32c_base64(&bytes);
            if actual != expected {
                return Err(ObjectStoreError::ChecksumMismatch {
                    path: path.to_string(),
                    algorithm: "CRC32C",
                    expected,
                    actual,
                });
            }
        }
        Ok(bytes)
    }

    /// The answer to a range S3 will not serve: it cannot express an empty range and answers
    /// 416 to one that starts at the end of the object. Our contract gives no bytes there,
    /// and `InvalidRange` beyond the end (or `NotFound`): the object's size decides.
    async fn answer_without_bytes(&self, path: &ObjectPath, range: &ByteRange) -> ObjectResult<Bytes> {
        let size = self.head(path).await?.size;
        let selected = range.resolve(path, size)?;
        if selected.is_empty() {
            Ok(Bytes::new())
        } else {
            let detail = format!("the server refused range {range} of a {size}-byte object");
            Err(ObjectStoreError::backend("get", path, detail))
        }
    }

    async fn head(&self, path: &ObjectPath) -> ObjectResult<ObjectMeta> {
        let key = self.root.key_of(path)?;
        let (result, _) = self
            .retrying(|| async {
                self.client
                    .head_object()
                    .bucket(self.root.bucket())
                    .key(&key)
                    .send()
                    .await
                    .map_err(|e| classify(&e, "head", path.as_str(), false))
            })
            .await;
        let head = result?;
        let size = head.content_length.and_then(|l| u64::try_from(l).ok()).unwrap_or(0);
        let last_modified_ms = head.last_modified.and_then(|t| t.to_millis().ok()).unwrap_or(0);
        Ok(ObjectMeta { path: path.clone(), size, last_modified_ms })
    }

    async fn delete_batch(&self, keys: &[String], described: &str) -> ObjectResult<()> {
        let objects: Vec<ObjectIdentifier> = keys
            .iter()
            .map(|key| ObjectIdentifier::builder().key(key).build())
            .collect::<Result<_, _>>()
            .map_err(|e| ObjectStoreError::backend("delete", described, e))?;
        let delete = Delete::builder()
            .set_objects(Some(objects))
            .quiet(true)
            .build()
            .map_err(|e| ObjectStoreError::backend("delete", described, e))?;
        let (result, _) = self
            .retrying(|| async {
                self.client
                    .delete_objects()
                    .bucket(self.root.bucket())
                    .delete(delete.clone())
                    .send()
                    .await
                    .map_err(|e| classify(&e, "delete", described, false))
            })
            .await;
        let response = result?;
        // With quiet mode only failures are listed. A missing key is not a failure.
        match response.errors().iter().find(|e| e.code() != Some("NoSuchKey")) {
            Some(failed) => Err(ObjectStoreError::backend(
                "delete",
                failed.key().unwrap_or(described),
                format!("{}: {}", failed.code().unwrap_or("?"), failed.message().unwrap_or("")),
            )),
            None => Ok(()),
        }
    }

    /// One ListObjectsV2 page: the objects and the token of the next page.
    async fn list_page(
        &self,
        key_prefix: &str,
        start_after: Option<&str>,
        token: Option<&str>,
    ) -> ObjectResult<(Vec<ObjectMeta>, Option<String>)> {
        let (result, _) = self
            .retrying(|| async {
                self.client
                    .list_objects_v2()
                    .bucket(self.root.bucket())
                    .prefix(key_prefix)
                    .max_keys(self.config.list_page_size as i32)
                    .set_start_after(start_after.map(str::to_owned))
                    .set_continuation_token(token.map(str::to_owned))
                    .send()
                    .await
                    .map_err(|e| classify(&e, "list", key_prefix, false))
            })
            .await;
        let page = result?;
        let objects = page
            .contents()
            .iter()
            .filter_map(|object| {
                let path = self.root.path_of_key(object.key()?)?;
                let size = object.size.and_then(|s| u64::try_from(s).ok()).unwrap_or(0);
                let last_modified_ms = object.last_modified.and_then(|t| t.to_millis().ok()).unwrap_or(0);
                Some(ObjectMeta { path, size, last_modified_ms })
            })
            .collect();
        let next = match page.is_truncated {
            Some(true) => page.next_continuation_token.clone(),
            _ => None,
        };
        Ok((objects, next))
    }
}

#[async_trait]
impl ObjectStore for S3Store {
    async fn put(&self, path: &ObjectPath, bytes: Bytes) -> ObjectResult<()> {
        let key = self.inner.root.key_of(path)?;
        if bytes.len() as u64 > self.inner.config.multipart_threshold {
            self.inner.put_multipart(path, &key, bytes).await
        } else {
            self.inner.put_single(path, &key, bytes).await
        }
    }

    async fn get(&self, path: &ObjectPath) -> ObjectResult<Bytes> {
        let key = self.inner.root.key_of(path)?;
        self.inner.retrying(|| self.inner.get_once(path, &key, None)).await.0
    }

    async fn get_range(&self, path: &ObjectPath, range: ByteRange) -> ObjectResult<Bytes> {
        range.validate(path)?;
        let key = self.inner.root.key_of(path)?;
        let Some(header) = range.to_http_header() else {
            return self.inner.answer_without_bytes(path, &range).await;
        };
        if let ByteRange::Suffix(n) = range {
            // s3s-fs 0.14.1 answers 500 to a suffix longer than the object (it seeks before
            // the start of the file) where S3 returns the whole object. One attempt first; if
            // it fails transiently, the size tells whether this is that case.
            match self.inner.get_once(path, &key, Some(&header)).await {
                Err(ObjectStoreError::Unavailable { .. }) => {
                    if self.inner.head(path).await?.size <= n {
                        return self.get(path).await;
                    }
                }
                Err(ObjectStoreError::InvalidRange { .. }) => {
                    return self.inner.answer_without_bytes(path, &range).await;
                }
                other => return other,
            }
        }
        let (result, _) = self.inner.retrying(|| self.inner.get_once(path, &key, Some(&header))).await;
        match result {
            Err(ObjectStoreError::InvalidRange { .. }) => self.inner.answer_without_bytes(path, &range).await,
            other => other,
        }
    }

    async fn head(&self, path: &ObjectPath) -> ObjectResult<ObjectMeta> {
        self.inner.head(path).await
    }

    async fn delete(&self, path: &ObjectPath) -> ObjectResult<()> {
        let key = self.inner.root.key_of(path)?;
        // Deleting is idempotent, so a retry after an unknown outcome settles it.
        let (result, _) = self
            .inner
            .retrying(|| async {
                self.inner
                    .client
                    .delete_object()
                    .bucket(self.inner.root.bucket())
                    .key(&key)
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| classify(&e, "delete", path.as_str(), false))
            })
            .await;
        match result {
            Err(ObjectStoreError::NotFound { .. }) => Ok(()),
            other => other,
        }
    }

    async fn delete_many(&self, paths: &[ObjectPath]) -> ObjectResult<()> {
        let keys: Vec<String> = paths.iter().map(|p| self.inner.root.key_of(p)).collect::<Result<_, _>>()?;
        for batch in keys.chunks(self.inner.config.delete_batch_size) {
            let described = format!("{} objects from {}", batch.len(), batch[0]);
            self.inner.delete_batch(batch, &described).await?;
        }
        Ok(())
    }

    fn list(
        &self,
        prefix: &ObjectPrefix,
        start_after: Option<&ObjectPath>,
    ) -> BoxStream<'static, ObjectResult<ObjectMeta>> {
        enum Page {
            First,
            Next(String),
            Done,
        }
        let inner = self.inner.clone();
        let key_prefix = inner.root.key_prefix_of(prefix);
        let start_after = match start_after.map(|p| inner.root.key_of(p)).transpose() {
            Ok(start_after) => start_after,
            Err(e) => return stream::once(async move { Err(e) }).boxed(),
        };
        stream::try_unfold(Page::First, move |page| {
            let inner = inner.clone();
            let key_prefix = key_prefix.clone();
            let start_after = start_after.clone();
            async move {
                let token = match page {
                    Page::Done => return Ok(None),
                    Page::First => None,
                    Page::Next(token) => Some(token),
                };
                let (objects, next) =
                    inner.list_page(&key_prefix, start_after.as_deref(), token.as_deref()).await?;
                let next_page = next.map_or(Page::Done, Page::Next);
                Ok(Some((stream::iter(objects.into_iter().map(Ok)), next_page)))
            }
        })
        .try_flatten()
        .boxed()
    }

    fn write_once(&self) -> WriteOnce {
        self.inner.config.conditional_put.write_once()
    }

    async fn start_upload<'a>(&'a self, path: &ObjectPath) -> ObjectResult<Box<dyn Upload + 'a>> {
        let key = self.inner.root.key_of(path)?;
        Ok(Box::new(S3Upload {
            inner: self.inner.clone(),
            path: path.clone(),
            key,
            pending: std::collections::VecDeque::new(),
            pending_len: 0,
            crc: 0,
            upload_id: None,
            sending: std::collections::VecDeque::new(),
            sent: Vec::new(),
            parts: 0,
            finished: false,
        }))
    }
}

/// A streaming write ([`ObjectStore::start_upload`]): a multipart upload created with the
/// first full part, each part sent in a task of its own as soon as it is full.
struct S3Upload {
    inner: Arc<Inner>,
    path: ObjectPath,
    key: String,
    /// Bytes not yet sent, and how many.
    pending: std::collections::VecDeque<Bytes>,
    pending_len: usize,
    /// The CRC32C of every byte written so far.
    crc: u32,
    upload_id: Option<String>,
    /// Parts being sent, in part order.
    sending: std::collections::VecDeque<tokio::task::JoinHandle<ObjectResult<CompletedPart>>>,
    /// Parts sent.
    sent: Vec<CompletedPart>,
    /// Parts started.
    parts: u64,
    /// Completed or aborted: nothing to clean up on drop.
    finished: bool,
}

impl S3Upload {
    /// The first `len` pending bytes as one part.
    fn take_pending(&mut self, len: usize) -> Bytes {
        if self.pending.front().is_some_and(|b| b.len() == len) {
            self.pending_len -= len;
            return self.pending.pop_front().unwrap_or_default();
        }
        let mut part = bytes::BytesMut::with_capacity(len);
        while part.len() < len {
            let Some(mut piece) = self.pending.pop_front() else { break };
            let wanted = len - part.len();
            if piece.len() > wanted {
                let rest = piece.split_off(wanted);
                self.pending.push_front(rest);
            }
            part.extend_from_slice(&piece);
        }
        self.pending_len -= part.len();
        part.freeze()
    }

    /// Starts sending `part` (creating the upload first if need be), then waits while more
    /// than `multipart_concurrency` parts are in flight.
    async fn send(&mut self, part: Bytes) -> ObjectResult<()> {
        let upload_id = match &self.upload_id {
            Some(id) => id.clone(),
            None => {
                let id = self.inner.create_upload(&self.path, &self.key).await?;
                self.upload_id = Some(id.clone());
                id
            }
        };
        if self.parts >= MAX_PARTS {
            return Err(ObjectStoreError::InvalidConfig {
                field: "multipart_part_size",
                reason: format!("the upload of {} needs more than S3's 10000 parts", self.path),
            });
        }
        self.parts += 1;
        // At most 10000, checked above.
        let part_number = self.parts as i32;
        let kib = u32::try_from(part.len().div_ceil(1024)).unwrap_or(u32::MAX);
        let permit = self.inner.part_slots.clone().acquire_many_owned(kib).await.map_err(|e| {
            ObjectStoreError::backend("put", &self.path, format!("the part slots are closed: {e}"))
        })?;
        let (inner, path, key) = (self.inner.clone(), self.path.clone(), self.key.clone());
        self.sending.push_back(tokio::spawn(async move {
            let sent = inner.upload_part(&path, &key, &upload_id, part_number, part).await;
            drop(permit);
            sent
        }));
        while self.sending.len() > self.inner.config.multipart_concurrency {
            self.wait_oldest().await?;
        }
        Ok(())
    }

    async fn wait_oldest(&mut self) -> ObjectResult<()> {
        let Some(task) = self.sending.pop_front() else { return Ok(()) };
        let part = task.await.map_err(|e| {
            ObjectStoreError::backend("put", &self.path, format!("a part's upload task failed: {e}"))
        })??;
        self.sent.push(part);
        Ok(())
    }

    async fn finish(&mut self) -> ObjectResult<()> {
        let Some(upload_id) = self.upload_id.clone() else {
            // Less than one part in all: one PutObject (or the buffered multipart path).
            let whole = self.take_pending(self.pending_len);
            return if whole.len() as u64 > self.inner.config.multipart_threshold {
                self.inner.put_multipart(&self.path, &self.key, whole).await
            } else {
                self.inner.put_single(&self.path, &self.key, whole).await
            };
        };
        if self.pending_len > 0 {
            let last = self.take_pending(self.pending_len);
            self.send(last).await?;
        }
        while !self.sending.is_empty() {
            self.wait_oldest().await?;
        }
        let whole_checksum = BASE64.encode(self.crc.to_be_bytes());
        let parts = std::mem::take(&mut self.sent);
        self.inner.complete_upload(&self.path, &self.key, &upload_id, parts, &whole_checksum).await
    }

    fn stop_sending(&mut self) {
        for task in self.sending.drain(..) {
            task.abort();
        }
    }
}

#[async_trait]
impl Upload for S3Upload {
    async fn write(&mut self, bytes: Bytes) -> ObjectResult<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.crc = crc32c::crc32c_append(self.crc, &bytes);
        self.pending_len += bytes.len();
        self.pending.push_back(bytes);
        // A part as soon as S3 takes one (every part but the last is at least 5 MiB), of
        // everything pending up to the configured part size.
        let part_size = usize::try_from(self.inner.config.multipart_part_size).unwrap_or(usize::MAX);
        let min_part = usize::try_from(MIN_PART_SIZE).unwrap_or(usize::MAX).min(part_size);
        while self.pending_len >= min_part {
            let part = self.take_pending(self.pending_len.min(part_size));
            self.send(part).await?;
        }
        Ok(())
    }

    async fn complete(mut self: Box<Self>) -> ObjectResult<()> {
        let result = self.finish().await;
        self.finished = result.is_ok();
        result // on failure, the drop aborts the upload
    }

    async fn abort(mut self: Box<Self>) -> ObjectResult<()> {
        self.finished = true;
        self.stop_sending();
        if let Some(upload_id) = self.upload_id.take() {
            self.inner.abort_upload(&self.key, &upload_id).await;
        }
        Ok(())
    }
}

impl Drop for S3Upload {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.stop_sending();
        if let (Some(upload_id), Ok(runtime)) = (self.upload_id.take(), tokio::runtime::Handle::try_current())
        {
            let (inner, key) = (self.inner.clone(), self.key.clone());
            runtime.spawn(async move { inner.abort_upload(&key, &upload_id).await });
        }
    }
}
