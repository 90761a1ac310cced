//! The service layer under every front end: each operation of the HTTP/JSON and gRPC APIs
//! (`lakestream-server`), the Kafka protocol (`lakestream-kafka`) and the CloudEvents
//! bindings as a plain async method of [`Api`], taking typed arguments and returning typed
//! results or an [`ApiError`]. The front ends only parse, call, and render, so they cannot
//! drift apart in their rules, permissions, limits or metrics.
//!
//! [`ErrorKind`] is the one place that maps an error to its HTTP status, its gRPC code and
//! its stable machine-readable code:
//!
//! The Kafka front end answers each kind with [`ErrorKind::kafka_code`] where no
//! request-specific code applies.
//!
//! | kind | HTTP | gRPC | code |
//! |---|---|---|---|
//! | invalid argument (names the field) | 400 | `INVALID_ARGUMENT` | `invalid_argument` |
//! | unauthenticated | 401 | `UNAUTHENTICATED` | `unauthenticated` |
//! | permission denied | 403 | `PERMISSION_DENIED` | `permission_denied` |
//! | not found | 404 | `NOT_FOUND` | `not_found` |
//! | already exists | 409 | `ALREADY_EXISTS` | `conflict` |
//! | conflict: fenced log, dropped stream | 409 | `FAILED_PRECONDITION` | `conflict` |
//! | contended (lost compare-and-set races to concurrent changes; retry) | 409 + `Retry-After` | `ABORTED` + `retry-after` | `contended` |
//! | in flight (a CloudEvent another request is appending; retry after a pause) | 409 + `Retry-After` | `ABORTED` + `retry-after` | `in_flight` |
//!
//! Contention is every lost compare-and-set, wherever it happens (`ErrorClass::Contended`:
//! catalog records, counters, group offsets, producer state, trims, the CloudEvents ledger,
//! the compactor's ledger), after the loop's own retries gave up. It is a 409 — the request
//! met a concurrent change of the state it read, as `If-Match` races do, and gRPC's `ABORTED`
//! ("a concurrency conflict; retry at a higher level") — not a 503: the service is healthy,
//! and a client that backs off on 503s should not count it as an outage. Unlike the other
//! 409s it is retryable as is, so it carries `Retry-After` and its own code `contended`.
//! | out of sequence (an idempotent producer's gap or stale sequence) | 409 | `FAILED_PRECONDITION` | `out_of_sequence` |
//! | precondition failed (a conditional append's expected next offset) | 412 | `FAILED_PRECONDITION` | `precondition_failed` |
//! | too large | 413 | `RESOURCE_EXHAUSTED` | `too_large` |
//! | unsupported media type | 415 | `INVALID_ARGUMENT` | `unsupported_media_type` |
//! | over the client's rate limit | 429 + `Retry-After` | `RESOURCE_EXHAUSTED` + `retry-after` | `rate_limited` |
//! | role not served, not implemented | 501 | `UNIMPLEMENTED` | `role_not_served`, `not_implemented` |
//! | backpressure, retryable | 503 + `Retry-After` | `UNAVAILABLE` + `retry-after` | `backpressure`, `unavailable` |
//! | not ready | 503 | `UNAVAILABLE` | `not_ready` |
//! | outcome unknown (may have been written) | 504 | `DEADLINE_EXCEEDED` | `outcome_unknown` |
//! | corrupt data | 500 | `DATA_LOSS` | `corrupt_data` |
//! | internal | 500 | `INTERNAL` | `internal` |

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use lakestream_catalog::{CatalogError, Growth};
pub use lakestream_catalog::{Namespace, Page, Stream};
use lakestream_format::{ErrorClass, LogRef};
pub use lakestream_reader::ReadBatch;
use lakestream_reader::{ReadError, Reader};
pub use lakestream_writer::{AppendAck, TrimOutcome};
use lakestream_writer::{AppendError, AppendOptions, TrimError, Writer};

use crate::auth::{Caller, Denied, Operation, Permission};
use crate::groups::{CommittedOffset, GroupStore, OffsetCommit, PartitionLag, SameGeneration};
use crate::metrics::Metrics;
use crate::producers::{self, Decision, ProducerSequence, RequestState, StateRecord};
use crate::stack::Stack;

/// What went wrong, coarsely: decides the HTTP status, the gRPC code and the stable code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A malformed request; the message names the field.
    InvalidArgument,
    /// No valid bearer token.
    Unauthenticated,
    /// The token does not grant what the operation needs.
    PermissionDenied,
    /// The namespace, stream or partition does not exist.
    NotFound,
    /// The name is taken.
    AlreadyExists,
    /// The state forbids the operation (a fenced log, a dropped stream); retrying will not help.
    Conflict,
    /// Lost compare-and-set races with concurrent changes ([`ErrorClass::Contended`]):
    /// nothing was changed; retrying the same request after a pause may succeed.
    Contended,
    /// A CloudEvent of the request is being appended by another request (its deduplication
    /// claim is live); nothing was appended. Retrying the whole request after a pause is safe.
    InFlight,
    /// An idempotent producer's sequence number is not the next one (a gap), or is an old
    /// one whose offsets are no longer kept. Nothing was written.
    OutOfSequence,
    /// A conditional append's expected next offset is not the partition's next offset.
    /// Nothing was written; the error carries the actual next offset.
    PreconditionFailed,
    /// An entry or request over a size limit.
    TooLarge,
    /// A body whose content type the operation does not take.
    UnsupportedMediaType,
    /// This process does not serve the role the operation needs.
    RoleNotServed,
    /// The operation is not implemented by this server.
    NotImplemented,
    /// The writer is over its in-flight limit; retry after a pause.
    Backpressure,
    /// The client sent more requests than its rate limit allows; retry after a pause.
    RateLimited,
    /// A transient failure; retry after a pause.
    Unavailable,
    /// The service cannot serve yet (its metadata store does not answer).
    NotReady,
    /// A write that may or may not have taken effect.
    OutcomeUnknown,
    /// Stored bytes that break a format rule.
    CorruptData,
    /// A bug or an unexpected state.
    Internal,
}

impl ErrorKind {
    /// The HTTP status.
    pub fn http_status(self) -> StatusCode {
        match self {
            ErrorKind::InvalidArgument => StatusCode::BAD_REQUEST,
            ErrorKind::Unauthenticated => StatusCode::UNAUTHORIZED,
            ErrorKind::PermissionDenied => StatusCode::FORBIDDEN,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::AlreadyExists
            | ErrorKind::Conflict
            | ErrorKind::Contended
            | ErrorKind::InFlight
            | ErrorKind::OutOfSequence => StatusCode::CONFLICT,
            ErrorKind::PreconditionFailed => StatusCode::PRECONDITION_FAILED,
            ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::RoleNotServed | ErrorKind::NotImplemented => StatusCode::NOT_IMPLEMENTED,
            ErrorKind::Backpressure | ErrorKind::Unavailable | ErrorKind::NotReady => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ErrorKind::OutcomeUnknown => StatusCode::GATEWAY_TIMEOUT,
            ErrorKind::CorruptData | ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The gRPC status code. Too large is `RESOURCE_EXHAUSTED`, which is also what the
    /// transport's own message-size limit answers, so a client sees one code for both.
    /// Outcome unknown is `DEADLINE_EXCEEDED`, the code gRPC defines for "may have completed".
    pub fn grpc_code(self) -> tonic::Code {
        match self {
            ErrorKind::InvalidArgument | ErrorKind::UnsupportedMediaType => tonic::Code::InvalidArgument,
            ErrorKind::Unauthenticated => tonic::Code::Unauthenticated,
            ErrorKind::PermissionDenied => tonic::Code::PermissionDenied,
            ErrorKind::NotFound => tonic::Code::NotFound,
            ErrorKind::AlreadyExists => tonic::Code::AlreadyExists,
            ErrorKind::Conflict | ErrorKind::OutOfSequence | ErrorKind::PreconditionFailed => {
                tonic::Code::FailedPrecondition
            }
            ErrorKind::Contended | ErrorKind::InFlight => tonic::Code::Aborted,
            ErrorKind::TooLarge | ErrorKind::RateLimited => tonic::Code::ResourceExhausted,
            ErrorKind::RoleNotServed | ErrorKind::NotImplemented => tonic::Code::Unimplemented,
            ErrorKind::Backpressure | ErrorKind::Unavailable | ErrorKind::NotReady => {
                tonic::Code::Unavailable
            }
            ErrorKind::OutcomeUnknown => tonic::Code::DeadlineExceeded,
            ErrorKind::CorruptData => tonic::Code::DataLoss,
            ErrorKind::Internal => tonic::Code::Internal,
        }
    }

    /// The stable machine-readable code (HTTP `error.code`, gRPC `lakestream-error-code`).
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::Unauthenticated => "unauthenticated",
            ErrorKind::PermissionDenied => "permission_denied",
            ErrorKind::NotFound => "not_found",
            ErrorKind::AlreadyExists | ErrorKind::Conflict => "conflict",
            ErrorKind::Contended => "contended",
            ErrorKind::InFlight => "in_flight",
            ErrorKind::OutOfSequence => "out_of_sequence",
            ErrorKind::PreconditionFailed => "precondition_failed",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::UnsupportedMediaType => "unsupported_media_type",
            ErrorKind::RoleNotServed => "role_not_served",
            ErrorKind::NotImplemented => "not_implemented",
            ErrorKind::Backpressure => "backpressure",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::NotReady => "not_ready",
            ErrorKind::OutcomeUnknown => "outcome_unknown",
            ErrorKind::CorruptData => "corrupt_data",
            ErrorKind::Internal => "internal",
        }
    }

    /// The Kafka protocol's error code (as the Kafka front end answers the kind where no
    /// request-specific code applies). Kafka clients retry the retriable ones by themselves:
    /// `KAFKA_STORAGE_ERROR` for a pause, `REQUEST_TIMED_OUT` for "may have been written".
    pub fn kafka_code(self) -> i16 {
        /// The Kafka error codes the table uses (Kafka's `Errors` enum).
        mod kafka {
            pub const UNKNOWN_SERVER_ERROR: i16 = -1;
            pub const CORRUPT_MESSAGE: i16 = 2;
            pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
            pub const REQUEST_TIMED_OUT: i16 = 7;
            pub const MESSAGE_TOO_LARGE: i16 = 10;
            pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
            pub const TOPIC_ALREADY_EXISTS: i16 = 36;
            pub const INVALID_REQUEST: i16 = 42;
            pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
            pub const KAFKA_STORAGE_ERROR: i16 = 56;
            pub const THROTTLING_QUOTA_EXCEEDED: i16 = 89;
        }
        match self {
            ErrorKind::InvalidArgument | ErrorKind::UnsupportedMediaType => kafka::INVALID_REQUEST,
            // Kafka clients carry no bearer tokens: a deployment with tokens refuses them.
            ErrorKind::Unauthenticated | ErrorKind::PermissionDenied => kafka::TOPIC_AUTHORIZATION_FAILED,
            ErrorKind::NotFound | ErrorKind::Conflict => kafka::UNKNOWN_TOPIC_OR_PARTITION,
            ErrorKind::AlreadyExists => kafka::TOPIC_ALREADY_EXISTS,
            ErrorKind::TooLarge => kafka::MESSAGE_TOO_LARGE,
            ErrorKind::RateLimited => kafka::THROTTLING_QUOTA_EXCEEDED,
            ErrorKind::Contended
            | ErrorKind::InFlight
            | ErrorKind::Backpressure
            | ErrorKind::Unavailable
            | ErrorKind::NotReady => kafka::KAFKA_STORAGE_ERROR,
            ErrorKind::OutcomeUnknown => kafka::REQUEST_TIMED_OUT,
            ErrorKind::CorruptData => kafka::CORRUPT_MESSAGE,
            ErrorKind::OutOfSequence => kafka::OUT_OF_ORDER_SEQUENCE_NUMBER,
            // A conditional append whose expected offset no longer holds.
            ErrorKind::PreconditionFailed => kafka::INVALID_REQUEST,
            ErrorKind::RoleNotServed | ErrorKind::NotImplemented | ErrorKind::Internal => {
                kafka::UNKNOWN_SERVER_ERROR
            }
        }
    }

    /// Seconds a client should wait before retrying, for the kinds worth retrying as is.
    pub fn retry_after_secs(self) -> Option<u32> {
        match self {
            ErrorKind::Backpressure
            | ErrorKind::Unavailable
            | ErrorKind::RateLimited
            | ErrorKind::Contended
            | ErrorKind::InFlight => Some(1),
            _ => None,
        }
    }

    /// The kind of an error class (for errors with no finer distinction).
    pub fn of_class(class: ErrorClass) -> Self {
        match class {
            ErrorClass::InvalidInput => ErrorKind::InvalidArgument,
            ErrorClass::NotFound => ErrorKind::NotFound,
            ErrorClass::Conflict => ErrorKind::Conflict,
            ErrorClass::Contended => ErrorKind::Contended,
            ErrorClass::Retryable => ErrorKind::Unavailable,
            ErrorClass::OutcomeUnknown => ErrorKind::OutcomeUnknown,
            ErrorClass::CorruptData => ErrorKind::CorruptData,
            ErrorClass::Internal => ErrorKind::Internal,
        }
    }
}

/// An operation's failure: its kind, a message naming what was wrong, and the details some
/// kinds carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    kind: ErrorKind,
    pub(crate) message: String,
    next_offset: Option<u64>,
    next_sequence: Option<u64>,
    unknown_producer: bool,
    attribute: Option<String>,
    pub(crate) event_index: Option<usize>,
    pub(crate) retry_after: Option<Duration>,
}

impl ApiError {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ApiError {
            kind,
            message: message.into(),
            next_offset: None,
            next_sequence: None,
            unknown_producer: false,
            attribute: None,
            event_index: None,
            retry_after: None,
        }
    }

    /// The CloudEvents attribute an invalid event broke a rule of (HTTP `error.attribute`).
    pub fn attribute(&self) -> Option<&str> {
        self.attribute.as_deref()
    }

    /// The request index of the event an [`ErrorKind::InFlight`] request found in flight
    /// (HTTP `error.index`).
    pub fn event_index(&self) -> Option<usize> {
        self.event_index
    }

    /// Whole seconds a client should wait before retrying, for the kinds worth retrying as
    /// is: the error's own hint when it has one (at least 1), else the kind's.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self.retry_after {
            Some(wait) => Some(wait.as_secs().max(1)),
            None => self.kind.retry_after_secs().map(u64::from),
        }
    }

    /// The sequence an idempotent producer's next new request must start at, for a refused
    /// one ([`ErrorKind::OutOfSequence`]): every sequence below it was appended, so a client
    /// can tell an old request (a duplicate) from a gap.
    pub fn next_sequence(&self) -> Option<u64> {
        self.next_sequence
    }

    /// This error, naming the producer's next expected sequence.
    pub fn with_next_sequence(mut self, next: u64) -> Self {
        self.next_sequence = Some(next);
        self
    }

    /// Whether a refused idempotent request's producer has no state on the partition (new,
    /// or expired after `[producers] idle_expiry`): the Kafka front end answers
    /// `UNKNOWN_PRODUCER_ID` then, so that clients reset their sequences.
    pub fn unknown_producer(&self) -> bool {
        self.unknown_producer
    }

    /// This error, for a producer with no state on the partition.
    fn of_unknown_producer(mut self) -> Self {
        self.unknown_producer = true;
        self.message.push_str(
            "; this producer has no state on this partition (new, or expired after [producers] idle_expiry)",
        );
        self
    }

    /// The partition's actual next offset, for a failed conditional append
    /// ([`ErrorKind::PreconditionFailed`]): HTTP `error.next_offset`, gRPC
    /// `lakestream-next-offset` metadata.
    pub fn next_offset(&self) -> Option<u64> {
        self.next_offset
    }

    /// A malformed request; `message` should start with the field's name.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }

    /// Its kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// What was wrong.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The HTTP status.
    pub fn http_status(&self) -> StatusCode {
        self.kind.http_status()
    }

    /// The gRPC code.
    pub fn grpc_code(&self) -> tonic::Code {
        self.kind.grpc_code()
    }

    /// The stable code.
    pub fn code(&self) -> &'static str {
        self.kind.code()
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind.code(), self.message)
    }
}

impl std::error::Error for ApiError {}

impl From<CatalogError> for ApiError {
    fn from(e: CatalogError) -> Self {
        let kind = match &e {
            CatalogError::NamespaceExists { .. } | CatalogError::StreamExists { .. } => {
                ErrorKind::AlreadyExists
            }
            _ => ErrorKind::of_class(e.class()),
        };
        Self::new(kind, e.to_string())
    }
}

impl From<AppendError> for ApiError {
    fn from(e: AppendError) -> Self {
        let kind = match &e {
            AppendError::Backpressure => ErrorKind::Backpressure,
            AppendError::OffsetMismatch { actual, .. } => {
                let mut error = Self::new(ErrorKind::PreconditionFailed, e.to_string());
                error.next_offset = Some(*actual);
                return error;
            }
            _ => ErrorKind::of_class(e.class()),
        };
        Self::new(kind, e.to_string())
    }
}

impl From<ReadError> for ApiError {
    fn from(e: ReadError) -> Self {
        Self::new(ErrorKind::of_class(e.class()), e.to_string())
    }
}

impl From<lakestream_cloudevents::CeError> for ApiError {
    fn from(e: lakestream_cloudevents::CeError) -> Self {
        let mut error = Self::new(ErrorKind::of_class(e.class()), e.to_string());
        error.attribute = e.attribute_name().map(str::to_owned);
        error
    }
}

impl From<lakestream_cloudevents::ledger::LedgerError> for ApiError {
    fn from(e: lakestream_cloudevents::ledger::LedgerError) -> Self {
        Self::new(ErrorKind::of_class(e.class()), e.to_string())
    }
}

impl From<TrimError> for ApiError {
    fn from(e: TrimError) -> Self {
        Self::new(ErrorKind::of_class(e.class()), e.to_string())
    }
}

/// The result of an operation.
pub type ApiResult<T> = Result<T, ApiError>;

/// The header (HTTP) and metadata key (gRPC) carrying a request's id; a client may send its
/// own (at most 128 visible ASCII characters), else one is made. It is echoed in the response
/// and names the request's tracing span.
pub const REQUEST_ID: &str = "x-request-id";

static NEXT_REQUEST: AtomicU64 = AtomicU64::new(1);

/// The id of a request: the client's when it is acceptable, else a new one (process id and a
/// counter: unique per process without randomness).
pub fn request_id(given: Option<&str>) -> String {
    match given.filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic())) {
        Some(id) => id.to_owned(),
        None => format!("{}-{}", std::process::id(), NEXT_REQUEST.fetch_add(1, Ordering::Relaxed)),
    }
}

/// Default page size of the list operations.
pub const DEFAULT_PAGE: usize = 100;
/// Largest page size of the list operations.
pub const MAX_PAGE: usize = 1000;
/// Default `max_bytes` of a fetch.
pub const DEFAULT_FETCH_BYTES: usize = 1 << 20;

/// A stream's partition, as named by a request.
#[derive(Debug, Clone, Copy)]
pub struct PartitionRef<'a> {
    /// The namespace.
    pub namespace: &'a str,
    /// The stream.
    pub stream: &'a str,
    /// The partition number.
    pub partition: usize,
}

/// What a produce request carries.
#[derive(Debug, Clone)]
pub enum ProduceInput {
    /// Opaque entries: payload and record count each.
    Entries(Vec<(Bytes, u32)>),
    /// One entry of complete Kafka record batches, validated and counted by the Kafka binding;
    /// `record_count`, when given, must agree with the count.
    KafkaBatches {
        /// The batches.
        payload: Bytes,
        /// The record count the client expects.
        record_count: Option<u32>,
    },
}

/// The conditions of a produce request ([`Api::produce_with`]).
#[derive(Debug, Clone, Default)]
pub struct ProduceOptions {
    /// A conditional append: append only if the partition's next offset is this one, else
    /// fail with [`ErrorKind::PreconditionFailed`] carrying the actual next offset, having
    /// written nothing. Linearizable with every append made through the same writer process
    /// (see [`lakestream_writer::AppendOptions::expect_next_offset`]).
    pub expect_next_offset: Option<u64>,
    /// An idempotent producer's id and sequence (see [`crate::producers`]).
    pub producer: Option<ProducerSequence>,
}

/// Why one entry of a produce request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryError {
    /// The error class (an entry with [`ErrorClass::OutcomeUnknown`] may have been written).
    pub class: ErrorClass,
    /// The error, with its kind.
    pub error: ApiError,
}

/// The outcome of one produced entry.
pub type EntryOutcome = Result<AppendAck, EntryError>;

/// A partition's offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    /// The first readable offset.
    pub first_offset: u64,
    /// The offset the next entry will get.
    pub next_offset: u64,
    /// The trim marker.
    pub trim_marker: u64,
}

/// A fetch's parameters.
#[derive(Debug, Clone, Copy, Default)]
pub struct FetchParams {
    /// Read from this offset.
    pub offset: u64,
    /// About how many payload bytes to return; default [`DEFAULT_FETCH_BYTES`].
    pub max_bytes: Option<usize>,
    /// How long to wait for new entries when none is available.
    pub max_wait_ms: u64,
}

/// The operations of the API over the running roles and stores (the service's private
/// wiring), with the metrics every front end records into.
#[derive(Debug, Clone)]
pub struct Api {
    pub(crate) stack: Stack,
    pub(crate) metrics: Arc<Metrics>,
    max_fetch_wait: Duration,
    /// Set when a graceful shutdown starts: readiness fails from then on.
    draining: Arc<std::sync::atomic::AtomicBool>,
    /// Requests of one idempotent producer to one partition run one at a time in a process:
    /// each takes the lock its (log, producer) hashes to.
    producer_locks: Arc<Vec<tokio::sync::Mutex<()>>>,
    /// Kafka producer ids, a block at a time from the metadata store.
    producer_ids: Arc<producers::ids::ProducerIds>,
    /// The highest epoch seen per Kafka producer id.
    producer_epochs: Arc<producers::ids::Epochs>,
}

/// How many locks the idempotent producers' requests share.
const PRODUCER_LOCKS: usize = 64;

/// How long a readiness check waits for the metadata store and the object stores.
pub const READINESS_TIMEOUT: Duration = Duration::from_secs(5);

/// The object-store prefix a readiness check lists (one request, normally empty).
const READINESS_PROBE_PREFIX: &str = "lakestream-readyz-probe/";

impl Api {
    /// The operations over `stack`; fetches may wait at most `max_fetch_wait`.
    pub(crate) fn new(stack: Stack, metrics: Arc<Metrics>, max_fetch_wait: Duration) -> Self {
        let producer_locks = Arc::new((0..PRODUCER_LOCKS).map(|_| tokio::sync::Mutex::new(())).collect());
        let producer_ids = Arc::new(producers::ids::ProducerIds::new(stack.meta.clone()));
        Api {
            stack,
            metrics,
            max_fetch_wait,
            draining: Arc::default(),
            producer_locks,
            producer_ids,
            producer_epochs: Arc::default(),
        }
    }

    /// The operations over `stack`, with metrics of their own (for benchmarks that drive a
    /// stack they opened).
    #[cfg(feature = "testkit")]
    pub fn over_stack(stack: Stack, max_fetch_wait: Duration) -> Self {
        Api::new(stack, Arc::new(Metrics::default()), max_fetch_wait)
    }

    /// The wiring behind the operations: for tests and benchmarks that check what lies behind
    /// the API. Front ends never reach it (only the `testkit` feature exposes it).
    #[cfg(feature = "testkit")]
    pub fn stack(&self) -> &Stack {
        &self.stack
    }

    /// The records of the front end `name` (see [`crate::state`]): the only metadata a front
    /// end reaches other than through the operations.
    pub fn front_end_state(&self, name: &str) -> ApiResult<crate::state::StateStore> {
        crate::state::StateStore::new(self.stack.meta.clone(), name)
    }

    /// A new Kafka producer id (InitProducerId), unique across every process of the deployment.
    pub async fn new_producer_id(&self, caller: &Caller, namespace: &str) -> ApiResult<i64> {
        self.authorize_operation(caller, Some(namespace), Operation::NewProducerId)?;
        self.producer_ids.allocate().await
    }

    /// Whether a batch of Kafka producer `id` at `epoch` may be appended: false when this
    /// process has seen a higher epoch of the id (the producer was fenced by a newer one).
    pub fn admit_producer_epoch(&self, id: i64, epoch: i16) -> bool {
        self.producer_epochs.admit(id, epoch)
    }

    /// Closes the writer: pending appends are published and leases released.
    pub(crate) async fn close(&self) {
        self.stack.close().await;
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The longest a fetch may wait for new entries (`http.max_fetch_wait`); front ends cut
    /// longer client waits to it.
    pub fn max_fetch_wait(&self) -> Duration {
        self.max_fetch_wait
    }

    /// Every metric of this process in the Prometheus text format: the operations', the
    /// roles' (writer, reader cache, compaction, tables), the object stores' and the Oxia
    /// client's.
    pub fn render_metrics(&self) -> String {
        self.metrics.render()
    }

    /// Whether requests are checked at all: bearer tokens or rate limits are configured.
    pub fn admission_enabled(&self) -> bool {
        self.stack.auth.enabled() || self.stack.limiter.enabled()
    }

    /// Admits one request: [`Api::authenticate`] what it presents, then [`Api::throttle`]
    /// its client. The [`Caller`] it returns is what every operation checks its permission
    /// against.
    pub fn admit(&self, authorization: Option<&str>, peer: Option<std::net::IpAddr>) -> ApiResult<Caller> {
        let caller = self.authenticate(authorization)?;
        self.throttle(&caller, peer)?;
        Ok(caller)
    }

    /// The caller presenting `authorization` (the HTTP header's or gRPC metadata's value,
    /// `Bearer …`): any caller when the API is open, else the holder of a configured token
    /// ([`ErrorKind::Unauthenticated`] without a valid one). A front end whose connections
    /// authenticate once (Kafka) calls it per connection and [`Api::throttle`] per request.
    pub fn authenticate(&self, authorization: Option<&str>) -> ApiResult<Caller> {
        if !self.stack.auth.enabled() {
            return Ok(Caller::open());
        }
        match self.stack.auth.authenticate(authorization) {
            Ok(grant) => Ok(Caller::token(grant)),
            Err(_) => Err(ApiError::new(ErrorKind::Unauthenticated, "a valid bearer token is required")),
        }
    }

    /// Applies the client's rate limit to one request of `caller` from `peer`. The client is
    /// the token's name when tokens are configured, else the peer's IP address, so one
    /// token's callers share one budget wherever they connect from.
    pub fn throttle(&self, caller: &Caller, peer: Option<std::net::IpAddr>) -> ApiResult<()> {
        let limiter = &self.stack.limiter;
        if !limiter.enabled() {
            return Ok(());
        }
        let client = match (caller.token_name(), peer) {
            (Some(name), _) => format!("token:{name}"),
            (None, Some(ip)) => format!("ip:{ip}"),
            (None, None) => "unknown".to_owned(),
        };
        limiter.check(&client, tokio::time::Instant::now()).map_err(|wait| {
            self.metrics.rate_limited.fetch_add(1, Ordering::Relaxed);
            ApiError::new(
                ErrorKind::RateLimited,
                format!("rate limit exceeded for {client}; retry in {} ms", wait.as_millis().max(1)),
            )
        })
    }

    /// Refuses `caller` unless it may run `operation` on `namespace` (`None`: every
    /// namespace). Every operation calls it first; a transport may call it before decoding a
    /// request's body.
    pub fn authorize_operation(
        &self,
        caller: &Caller,
        namespace: Option<&str>,
        operation: Operation,
    ) -> ApiResult<()> {
        self.authorize(caller, namespace, operation.permission())
    }

    /// Refuses `caller` unless it holds `needed` on `namespace` (`None`: every namespace).
    /// Every operation calls it first; a front end calls it for what it serves from state
    /// of its own (the Kafka front end's consumer groups).
    pub fn authorize(&self, caller: &Caller, namespace: Option<&str>, needed: Permission) -> ApiResult<()> {
        match caller.permits(namespace, needed) {
            Ok(()) => Ok(()),
            Err(Denied::Unauthenticated) => {
                Err(ApiError::new(ErrorKind::Unauthenticated, "a valid bearer token is required"))
            }
            Err(Denied::Forbidden(why)) => Err(ApiError::new(ErrorKind::PermissionDenied, why)),
        }
    }

    /// Marks the service as draining (a graceful shutdown started): [`Api::ready`] fails
    /// from now on, while requests are still served.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Whether a graceful shutdown has started.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Whether the service should get traffic: not draining, and the metadata store and both
    /// object stores (`storage.wal`, `storage.compacted`) answer a read within
    /// [`READINESS_TIMEOUT`]. Records the outcome in the metrics.
    pub async fn ready(&self) -> ApiResult<()> {
        let outcome = self.check_ready().await;
        let ok = outcome.is_ok();
        self.metrics.ready.store(u64::from(ok), Ordering::Relaxed);
        if !ok {
            self.metrics.readiness_failures.fetch_add(1, Ordering::Relaxed);
        }
        outcome
    }

    async fn check_ready(&self) -> ApiResult<()> {
        use futures::StreamExt as _;
        let not_ready = |message: String| ApiError::new(ErrorKind::NotReady, message);
        if self.is_draining() {
            return Err(not_ready("draining: the service is shutting down".into()));
        }
        let checks = async {
            self.stack
                .meta
                .get("0", "/readyz")
                .await
                .map_err(|e| not_ready(format!("metadata store: {e}")))?;
            let prefix = lakestream_objstore::ObjectPrefix::new(READINESS_PROBE_PREFIX)
                .map_err(|e| ApiError::new(ErrorKind::Internal, e.to_string()))?;
            for (root, store) in
                [("storage.wal", &self.stack.wal), ("storage.compacted", &self.stack.compacted)]
            {
                // One listing request: it needs the bucket, the network and valid credentials.
                if let Some(Err(e)) = store.list(&prefix, None).next().await {
                    return Err(not_ready(format!("object store {root}: {e}")));
                }
            }
            Ok(())
        };
        match tokio::time::timeout(READINESS_TIMEOUT, checks).await {
            Ok(outcome) => outcome,
            Err(_) => Err(not_ready(format!(
                "the metadata store or an object store did not answer within {READINESS_TIMEOUT:?}"
            ))),
        }
    }

    /// Creates a namespace.
    pub async fn create_namespace(
        &self,
        caller: &Caller,
        name: &str,
        properties: BTreeMap<String, String>,
    ) -> ApiResult<Namespace> {
        self.authorize_operation(caller, None, Operation::CreateNamespace)?;
        self.catalog_role()?;
        Ok(self.stack.catalog.create_namespace(name, properties).await?)
    }

    /// Lists namespaces after `after`, at most `limit` (default [`DEFAULT_PAGE`]).
    pub async fn list_namespaces(
        &self,
        caller: &Caller,
        after: Option<&str>,
        limit: Option<usize>,
    ) -> ApiResult<Page<Namespace>> {
        self.authorize_operation(caller, None, Operation::ListNamespaces)?;
        Ok(self.stack.catalog.list_namespaces(after, page_limit(limit)?).await?)
    }

    /// Creates a stream with `partitions` partitions (default 1).
    pub async fn create_stream(
        &self,
        caller: &Caller,
        namespace: &str,
        name: &str,
        partitions: Option<u32>,
        properties: BTreeMap<String, String>,
    ) -> ApiResult<Stream> {
        self.authorize_operation(caller, Some(namespace), Operation::CreateStream)?;
        self.catalog_role()?;
        crate::background::retention::policy_of(&properties).map_err(ApiError::invalid)?;
        crate::background::tables::check_property(&properties).map_err(ApiError::invalid)?;
        Ok(self.stack.catalog.create_stream(namespace, name, partitions.unwrap_or(1), properties).await?)
    }

    /// Changes a stream's properties: each `Some` value is set, each `None` removed. The
    /// retention properties (`retention_ms`, `retention_bytes`) are checked first.
    pub async fn update_stream(
        &self,
        caller: &Caller,
        namespace: &str,
        name: &str,
        changes: BTreeMap<String, Option<String>>,
    ) -> ApiResult<Stream> {
        self.authorize_operation(caller, Some(namespace), Operation::UpdateStream)?;
        self.catalog_role()?;
        let mut after = self.stack.catalog.get_stream(namespace, name).await?.properties;
        for (k, v) in &changes {
            match v {
                Some(v) => after.insert(k.clone(), v.clone()),
                None => after.remove(k),
            };
        }
        crate::background::retention::policy_of(&after).map_err(ApiError::invalid)?;
        crate::background::tables::check_property(&after).map_err(ApiError::invalid)?;
        Ok(self.stack.catalog.update_stream_properties(namespace, name, &changes).await?)
    }

    /// Deletes a namespace that holds no live stream (409 while it holds one).
    pub async fn delete_namespace(&self, caller: &Caller, name: &str) -> ApiResult<()> {
        self.authorize_operation(caller, Some(name), Operation::DeleteNamespace)?;
        self.catalog_role()?;
        Ok(self.stack.catalog.delete_namespace(name).await?)
    }

    /// Describes a stream.
    pub async fn get_stream(&self, caller: &Caller, namespace: &str, name: &str) -> ApiResult<Stream> {
        self.authorize_operation(caller, Some(namespace), Operation::GetStream)?;
        Ok(self.stack.catalog.get_stream(namespace, name).await?)
    }

    /// Lists a namespace's streams after `after`, at most `limit` (default [`DEFAULT_PAGE`]).
    pub async fn list_streams(
        &self,
        caller: &Caller,
        namespace: &str,
        after: Option<&str>,
        limit: Option<usize>,
    ) -> ApiResult<Page<Stream>> {
        self.authorize_operation(caller, Some(namespace), Operation::ListStreams)?;
        Ok(self.stack.catalog.list_streams(namespace, after, page_limit(limit)?).await?)
    }

    /// Drops a stream.
    pub async fn drop_stream(&self, caller: &Caller, namespace: &str, name: &str) -> ApiResult<()> {
        self.authorize_operation(caller, Some(namespace), Operation::DropStream)?;
        self.catalog_role()?;
        // Deleting the stream's logs waits until no lease of them remains: let this
        // process's writer give up its unused leases now rather than after its idle period.
        if let Some(w) = &self.stack.writer {
            w.release_idle_leases(std::time::Duration::ZERO).await;
        }
        Ok(self.stack.catalog.drop_stream(namespace, name).await?)
    }

    /// Grows a stream: to at least `to` partitions, or by `by`; exactly one must be given.
    pub async fn add_partitions(
        &self,
        caller: &Caller,
        namespace: &str,
        name: &str,
        to: Option<u32>,
        by: Option<u32>,
    ) -> ApiResult<Stream> {
        self.authorize_operation(caller, Some(namespace), Operation::AddPartitions)?;
        self.catalog_role()?;
        let growth = match (to, by) {
            (Some(to), None) => Growth::To(to),
            (None, Some(by)) => Growth::By(by),
            _ => return Err(ApiError::invalid("give exactly one of `to` and `by`")),
        };
        Ok(self.stack.catalog.add_partitions(namespace, name, growth).await?)
    }

    /// Resolves a partition of a stream to its log through the catalog.
    pub(crate) async fn log_of(&self, target: PartitionRef<'_>) -> ApiResult<LogRef> {
        Ok(self.partition_of(target).await?.1)
    }

    /// The stream of a partition, and the partition's log.
    async fn partition_of(&self, target: PartitionRef<'_>) -> ApiResult<(Stream, LogRef)> {
        let stream = self.stack.catalog.get_stream(target.namespace, target.stream).await?;
        let count = stream.partition_count();
        let log = stream.log_ref(target.partition).ok_or_else(|| {
            ApiError::new(
                ErrorKind::NotFound,
                format!(
                    "stream {}/{} has {count} partitions; no partition {}",
                    target.namespace, stream.name, target.partition
                ),
            )
        })?;
        Ok((stream, log))
    }

    /// Changes to namespaces and streams need the catalog role; reading them does not (every
    /// role resolves streams through the catalog).
    fn catalog_role(&self) -> ApiResult<()> {
        if self.stack.roles.catalog {
            Ok(())
        } else {
            Err(ApiError::new(ErrorKind::RoleNotServed, "this process does not serve the catalog role"))
        }
    }

    pub(crate) fn writer(&self) -> ApiResult<&Writer> {
        self.stack.writer.as_ref().ok_or_else(|| {
            ApiError::new(ErrorKind::RoleNotServed, "this process does not serve the writer role")
        })
    }

    pub(crate) fn reader(&self) -> ApiResult<&Reader> {
        self.stack.reader.as_ref().ok_or_else(|| {
            ApiError::new(ErrorKind::RoleNotServed, "this process does not serve the reader role")
        })
    }

    /// Appends entries to a partition, concurrently, answering per entry in order. Every entry
    /// is checked (record count, size) before any is appended, so a refused request writes
    /// nothing. When every entry fails, the first failure is the answer.
    pub async fn produce(
        &self,
        caller: &Caller,
        target: PartitionRef<'_>,
        input: ProduceInput,
    ) -> ApiResult<Vec<EntryOutcome>> {
        self.produce_with(caller, target, input, ProduceOptions::default()).await
    }

    /// [`Api::produce`] under conditions: an expected next offset and an idempotent
    /// producer's sequence. A request's entries commit all or none, so with conditions a
    /// refusal is the whole answer.
    pub async fn produce_with(
        &self,
        caller: &Caller,
        target: PartitionRef<'_>,
        input: ProduceInput,
        options: ProduceOptions,
    ) -> ApiResult<Vec<EntryOutcome>> {
        self.produce_pipelined(caller, target, input, options).await?.await
    }

    /// [`Api::produce_with`] in two steps, for pipelining: the call returns once the request
    /// is checked and handed to the writer (its place in the partition's order is then fixed),
    /// and the future it returns resolves with the outcomes. Requests to one partition handed
    /// over one after another commit in that order. An idempotent producer's request is
    /// completed before the call returns.
    pub async fn produce_pipelined(
        &self,
        caller: &Caller,
        target: PartitionRef<'_>,
        input: ProduceInput,
        options: ProduceOptions,
    ) -> ApiResult<futures::future::BoxFuture<'static, ApiResult<Vec<EntryOutcome>>>> {
        self.authorize_operation(caller, Some(target.namespace), Operation::Produce)?;
        use futures::FutureExt as _;
        let (stream, log) = self.partition_of(target).await?;
        let w = self.writer()?;
        let entries = match input {
            ProduceInput::Entries(entries) => {
                if entries.is_empty() {
                    return Err(ApiError::invalid("entries: must hold at least one entry"));
                }
                if lakestream_format::kafka::is_topic_stream(&stream.properties) {
                    check_kafka_entries(&stream, &entries)?;
                }
                entries
            }
            ProduceInput::KafkaBatches { payload, record_count } => {
                // The Kafka binding (Appendix A): one entry of complete record batches; its
                // record count is what the batches hold, which `record_count` must not contradict.
                let records = lakestream_format::kafka::count_records(&payload)
                    .map_err(|e| ApiError::invalid(format!("body: not a valid Kafka entry payload: {e}")))?;
                if let Some(n) = record_count.filter(|n| *n != records) {
                    return Err(ApiError::invalid(format!(
                        "record_count: {n} disagrees with the {records} records the batches hold"
                    )));
                }
                vec![(payload, records)]
            }
        };
        let max = w.config().max_entry_bytes;
        for (i, (payload, records)) in entries.iter().enumerate() {
            if *records == 0 {
                return Err(ApiError::invalid(format!("entries[{i}].record_count: must be at least 1")));
            }
            if payload.len() > max {
                return Err(ApiError::new(
                    ErrorKind::TooLarge,
                    format!("entries[{i}]: {} bytes exceeds the largest entry ({max})", payload.len()),
                ));
            }
        }
        let started = Instant::now();
        let lens: Vec<usize> = entries.iter().map(|(p, _)| p.len()).collect();
        let metrics = self.metrics.clone();
        let results = match options.producer {
            None => {
                let conditions =
                    AppendOptions { expect_next_offset: options.expect_next_offset, before_publish: None };
                let count = entries.len();
                let (reader, log_id) = (self.stack.reader.clone(), log.log_id);
                return Ok(match w.enqueue_many_with(log.log_id, entries, conditions).await {
                    Ok(pending) => async move {
                        let acks = pending.acks().await;
                        notify_readers(reader.as_ref(), log_id, &acks);
                        outcomes_of(&metrics, acks, lens, started)
                    }
                    .boxed(),
                    Err(e) => {
                        let results = (0..count).map(|_| Err(e.clone())).collect();
                        futures::future::ready(outcomes_of(&metrics, results, lens, started)).boxed()
                    }
                });
            }
            Some(producer) => {
                // Run to the end even if the caller goes away, so that a retry (which waits
                // for the producer's lock) never overtakes the request it retries.
                let api = self.clone();
                let expect = options.expect_next_offset;
                let task = tokio::spawn(async move {
                    api.produce_idempotent(log.log_id, entries, expect, producer).await
                });
                match task.await {
                    Ok(Ok(Ok(acks))) => {
                        // A retry of an appended request: nothing was appended now.
                        self.metrics.producer_duplicates.fetch_add(1, Ordering::Relaxed);
                        return Ok(futures::future::ready(Ok(acks.into_iter().map(Ok).collect())).boxed());
                    }
                    Ok(Ok(Err(results))) => {
                        notify_readers(self.stack.reader.as_ref(), log.log_id, &results);
                        results
                    }
                    Ok(Err(e)) => return Err(e),
                    Err(e) => return Err(ApiError::new(ErrorKind::Internal, format!("produce task: {e}"))),
                }
            }
        };
        Ok(futures::future::ready(outcomes_of(&metrics, results, lens, started)).boxed())
    }

    /// An idempotent producer's request (see [`crate::producers`]): `Ok(acks)` for a retry of
    /// an appended request, `Err(results)` for the results of a new append.
    async fn produce_idempotent(
        &self,
        log_id: lakestream_format::LogId,
        entries: Vec<(Bytes, u32)>,
        expect_next_offset: Option<u64>,
        producer: ProducerSequence,
    ) -> ApiResult<Result<Vec<AppendAck>, Vec<Result<AppendAck, AppendError>>>> {
        use std::hash::{Hash, Hasher};
        let w = self.writer()?;
        if producer.advance == Some(0) {
            return Err(ApiError::invalid(
                "producer_sequence: a request must advance the sequence by at least 1",
            ));
        }
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (log_id, &producer.id).hash(&mut hasher);
        let _serial = self.producer_locks[(hasher.finish() as usize) % PRODUCER_LOCKS].lock().await;
        let record = StateRecord::new(self.stack.meta.clone(), log_id, &producer.id);
        let (mut state, mut version) = record.read().await?;
        // Resolve a request whose outcome is unknown.
        if let Some(last) = state.last.clone()
            && let RequestState::Pending { tail_before, ref object } = last.state
        {
            let found = match object {
                Some(object) => record.find_published(tail_before, object).await?,
                None => None,
            };
            state.last = match found {
                Some((first_offset, end_offset, timestamp_ms)) => {
                    state.next_sequence = last.next_sequence();
                    Some(producers::LastRequest {
                        state: RequestState::Done { first_offset, end_offset, timestamp_ms },
                        ..last
                    })
                }
                None => None,
            };
            version = Some(record.write(&state, version).await?);
        }
        let record_counts: Vec<u32> = entries.iter().map(|(_, n)| *n).collect();
        let decision = producers::decide(log_id, &state, producer.sequence, &record_counts).map_err(|e| {
            // No record: a new producer, or one whose state expired while it was idle.
            if version.is_none() { e.of_unknown_producer() } else { e }
        })?;
        match decision {
            Decision::Duplicate(acks) => return Ok(Ok(acks)),
            Decision::Append => {}
        }
        let tail_before = w.next_offset(log_id).await?;
        let count = u32::try_from(entries.len()).unwrap_or(u32::MAX);
        let mut pending = producers::pending_of(&state, &producer, count, tail_before);
        let pending_version = record.write(&pending, version).await?;
        // Just before the index put: record the WAL object in the pending state, so that a
        // retry after a crash can tell whether the put was made.
        let gate_version = Arc::new(std::sync::Mutex::new(None));
        let gate = {
            let (record, gate_version, mut pending) = (record.clone(), gate_version.clone(), pending.clone());
            Box::new(move |object: String| -> futures::future::BoxFuture<'static, Result<(), AppendError>> {
                Box::pin(async move {
                    if let Some(producers::LastRequest {
                        state: RequestState::Pending { object: slot, .. },
                        ..
                    }) = pending.last.as_mut()
                    {
                        *slot = Some(object);
                    }
                    let v = record
                        .write(&pending, Some(pending_version))
                        .await
                        .map_err(|e| producers::gate_refusal(log_id, &e))?;
                    *gate_version.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(v);
                    Ok(())
                })
            })
        };
        let conditions = AppendOptions { expect_next_offset, before_publish: Some(gate) };
        let results = w.append_many_with(log_id, entries, conditions).await;
        let first = results.first().and_then(|r| r.as_ref().ok()).map(|a| (a.offset, a.timestamp_ms));
        let end = results.last().and_then(|r| r.as_ref().ok()).map(AppendAck::end_offset);
        let written = *gate_version.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let (Some((first_offset, timestamp_ms)), Some(end_offset), Some(v)) = (first, end, written) {
            pending.next_sequence = producer.sequence + producer.advance_of(count);
            pending.last = Some(producers::LastRequest {
                sequence: producer.sequence,
                entries: count,
                advance: producer.advance,
                state: RequestState::Done { first_offset, end_offset, timestamp_ms },
            });
            // The entries are appended whatever this write's outcome: left pending, the next
            // request of the producer resolves them from the index.
            if let Err(e) = record.write(&pending, Some(v)).await {
                tracing::warn!(log_id = %log_id, producer = producer.id.as_str(), error = %e,
                    "recording an idempotent producer's acknowledged request failed; the next request resolves it");
            }
        }
        Ok(Err(results))
    }

    /// Reads whole entries of a partition from an offset.
    pub async fn fetch(
        &self,
        caller: &Caller,
        target: PartitionRef<'_>,
        params: FetchParams,
    ) -> ApiResult<ReadBatch> {
        self.authorize_operation(caller, Some(target.namespace), Operation::Fetch)?;
        let log = self.log_of(target).await?;
        let r = self.reader()?;
        let (max_bytes, wait) = self.fetch_limits(&params)?;
        let started = Instant::now();
        let batch = r.read(&log, params.offset, max_bytes, wait).await?;
        self.metrics.record_fetch(&batch, started);
        Ok(batch)
    }

    /// A fetch's byte budget (default [`DEFAULT_FETCH_BYTES`], at least 1) and wait (at most
    /// the service's `max_fetch_wait`).
    pub(crate) fn fetch_limits(&self, params: &FetchParams) -> ApiResult<(usize, Duration)> {
        let max_bytes = params.max_bytes.unwrap_or(DEFAULT_FETCH_BYTES);
        if max_bytes == 0 {
            return Err(ApiError::invalid("max_bytes: must be at least 1"));
        }
        let wait = Duration::from_millis(params.max_wait_ms);
        if wait > self.max_fetch_wait {
            return Err(ApiError::invalid(format!(
                "max_wait_ms: at most {} ms",
                self.max_fetch_wait.as_millis()
            )));
        }
        Ok((max_bytes, wait))
    }

    /// A read session: batches of whole entries of a partition from `offset`, each at most
    /// about `max_bytes` of payload (default [`DEFAULT_FETCH_BYTES`]), waiting at the end of
    /// the partition for new entries for as long as the caller keeps polling. Empty reads are
    /// not yielded. The stream ends after yielding an error (a dropped stream, say).
    ///
    /// Flow control: the next batch is read only when the caller polls for it, so a session
    /// holds at most one batch in memory beyond what its transport buffers; a slow client
    /// slows its session down (HTTP/2 and TCP windows) instead of growing a queue.
    pub async fn read_session(
        &self,
        caller: &Caller,
        target: PartitionRef<'_>,
        offset: u64,
        max_bytes: Option<usize>,
    ) -> ApiResult<futures::stream::BoxStream<'static, ApiResult<ReadBatch>>> {
        self.authorize_operation(caller, Some(target.namespace), Operation::Fetch)?;
        use futures::StreamExt as _;
        let log = self.log_of(target).await?;
        self.reader()?;
        let max_bytes = max_bytes.unwrap_or(DEFAULT_FETCH_BYTES);
        if max_bytes == 0 {
            return Err(ApiError::invalid("max_bytes: must be at least 1"));
        }
        // Each read waits at most this long at the end of the partition before it reads again.
        let wait = self.max_fetch_wait.max(Duration::from_millis(1));
        let api = self.clone();
        let batches = futures::stream::unfold(Some(offset), move |next| {
            let (api, log) = (api.clone(), log.clone());
            async move {
                let mut offset = next?;
                loop {
                    let reader = match api.reader() {
                        Ok(r) => r,
                        Err(e) => return Some((Err(e), None)),
                    };
                    let started = Instant::now();
                    match reader.read(&log, offset, max_bytes, wait).await {
                        Ok(batch) if batch.entries.is_empty() => offset = batch.next_offset.max(offset),
                        Ok(batch) => {
                            api.metrics.record_fetch(&batch, started);
                            let next = batch.next_offset;
                            return Some((Ok(batch), Some(next)));
                        }
                        Err(e) => return Some((Err(e.into()), None)),
                    }
                }
            }
        });
        Ok(batches.boxed())
    }

    /// A partition's first and next offsets and trim marker.
    pub async fn offsets(&self, caller: &Caller, target: PartitionRef<'_>) -> ApiResult<Offsets> {
        self.authorize_operation(caller, Some(target.namespace), Operation::Offsets)?;
        let log = self.log_of(target).await?;
        let r = self.reader()?;
        Ok(Offsets {
            first_offset: r.first_offset(log.log_id).await?,
            next_offset: r.next_offset(log.log_id).await?,
            trim_marker: r.trim_marker(log.log_id).await?,
        })
    }

    /// Soft-trims a partition through `through` (inclusive).
    pub async fn trim(
        &self,
        caller: &Caller,
        target: PartitionRef<'_>,
        through: u64,
    ) -> ApiResult<TrimOutcome> {
        self.authorize_operation(caller, Some(target.namespace), Operation::Trim)?;
        let log = self.log_of(target).await?;
        Ok(self.writer()?.soft_trim(log.log_id, through).await?)
    }
}

impl Api {
    /// Commits a consumer group's offset on a partition (see [`crate::groups`] for the rule:
    /// a stale generation, or a lower offset in the same generation, is refused with
    /// [`ErrorKind::Conflict`] and nothing is written). The offset may not exceed the
    /// partition's next offset. Records the group's lag in the metrics.
    pub async fn commit_offset(
        &self,
        caller: &Caller,
        group: &str,
        target: PartitionRef<'_>,
        commit: OffsetCommit,
    ) -> ApiResult<CommittedOffset> {
        self.commit_offset_with(caller, group, target, commit, SameGeneration::Forward).await
    }

    /// [`Api::commit_offset`], with `same` deciding whether a commit of the stored generation
    /// may move the offset back (the Kafka front end's coordinator lets it, as Kafka does).
    pub async fn commit_offset_with(
        &self,
        caller: &Caller,
        group: &str,
        target: PartitionRef<'_>,
        commit: OffsetCommit,
        same: SameGeneration,
    ) -> ApiResult<CommittedOffset> {
        self.authorize_operation(caller, Some(target.namespace), Operation::CommitOffset)?;
        crate::groups::check_group_id(group)?;
        let log = self.log_of(target).await?;
        let next = self.reader()?.next_offset(log.log_id).await?;
        if commit.offset > next {
            return Err(ApiError::invalid(format!(
                "offset: {} is beyond the partition's next offset {next}",
                commit.offset
            )));
        }
        let committed = GroupStore::new(self.stack.meta.as_ref())
            .commit_with(target.namespace, group, target.stream, target.partition, log.log_id, &commit, same)
            .await?;
        self.metrics.group_lag.record(
            target.namespace,
            group,
            target.stream,
            target.partition,
            next.saturating_sub(committed.offset),
        );
        Ok(committed)
    }

    /// A group's committed offsets and lag on every partition of a stream. A group that has
    /// committed nothing in the namespace is [`ErrorKind::NotFound`].
    pub async fn group_offsets(
        &self,
        caller: &Caller,
        namespace: &str,
        group: &str,
        stream: &str,
    ) -> ApiResult<Vec<PartitionLag>> {
        self.authorize_operation(caller, Some(namespace), Operation::GroupOffsets)?;
        let store = GroupStore::new(self.stack.meta.as_ref());
        if !store.exists(namespace, group).await? {
            return Err(ApiError::new(
                ErrorKind::NotFound,
                format!("group {group} has committed no offsets in namespace {namespace}"),
            ));
        }
        let s = self.stack.catalog.get_stream(namespace, stream).await?;
        let reader = self.reader()?;
        let mut partitions = Vec::with_capacity(s.partition_count());
        for partition in 0..s.partition_count() {
            let Some(log) = s.log_ref(partition) else { continue };
            let committed = store.committed(namespace, group, log.log_id).await?;
            let next_offset = reader.next_offset(log.log_id).await?;
            let lag = next_offset.saturating_sub(committed.as_ref().map_or(0, |c| c.offset));
            self.metrics.group_lag.record(namespace, group, stream, partition, lag);
            partitions.push(PartitionLag { partition, committed, next_offset, lag });
        }
        Ok(partitions)
    }

    /// Every offset a group has committed in a namespace (none for a group that has committed
    /// nothing), whatever the streams: those of dropped streams too.
    pub async fn group_committed_offsets(
        &self,
        caller: &Caller,
        namespace: &str,
        group: &str,
    ) -> ApiResult<Vec<CommittedOffset>> {
        self.authorize_operation(caller, Some(namespace), Operation::GroupOffsets)?;
        GroupStore::new(self.stack.meta.as_ref()).offsets(namespace, group).await
    }

    /// The groups of a namespace after `after`, at most `limit` (default [`DEFAULT_PAGE`]).
    pub async fn list_groups(
        &self,
        caller: &Caller,
        namespace: &str,
        after: Option<&str>,
        limit: Option<usize>,
    ) -> ApiResult<Page<String>> {
        self.authorize_operation(caller, Some(namespace), Operation::ListGroups)?;
        let limit = page_limit(limit)?;
        self.stack.catalog.get_namespace(namespace).await?;
        let (items, more) = GroupStore::new(self.stack.meta.as_ref()).list(namespace, after, limit).await?;
        let next_page = if more { items.last().cloned() } else { None };
        Ok(Page { items, next_page })
    }
}

/// Records the append metrics of a request's results and turns them into its answer: every
/// entry's outcome, or the first error when every entry failed.
/// Wakes this process's tail reads of `log_id` after appends to it were acknowledged: they
/// read at once instead of at their poller's next look.
pub(crate) fn notify_readers(
    reader: Option<&lakestream_reader::Reader>,
    log_id: lakestream_format::LogId,
    results: &[Result<AppendAck, AppendError>],
) {
    let end = results.iter().filter_map(|r| r.as_ref().ok()).map(AppendAck::end_offset).max();
    if let (Some(reader), Some(end)) = (reader, end) {
        reader.notify_appended_to(log_id, end);
    }
}

fn outcomes_of(
    m: &Metrics,
    results: Vec<Result<AppendAck, AppendError>>,
    lens: Vec<usize>,
    started: Instant,
) -> ApiResult<Vec<EntryOutcome>> {
    let mut outcomes = Vec::with_capacity(results.len());
    for (result, len) in results.into_iter().zip(lens) {
        m.record_append(&result, len, started);
        outcomes.push(result.map_err(|e| EntryError { class: e.class(), error: e.into() }));
    }
    if outcomes.iter().all(Result::is_err)
        && let Some(Err(first)) = outcomes.first()
    {
        return Err(first.error.clone());
    }
    Ok(outcomes)
}

/// Checks that every entry for a Kafka topic's stream holds complete record batches whose
/// records number what the entry declares (the Kafka binding, spec Appendix A): any other
/// payload would be misread by every reader of the binding, ours and others'.
fn check_kafka_entries(stream: &Stream, entries: &[(Bytes, u32)]) -> ApiResult<()> {
    for (i, (payload, records)) in entries.iter().enumerate() {
        lakestream_format::kafka::check_entry(payload, Some(*records)).map_err(|e| {
            ApiError::invalid(format!(
                "entries[{i}]: stream {}/{} is a Kafka topic, so an entry must be complete Kafka record \
                 batches whose records number its record_count ({e}); send record batches with \
                 content-type application/vnd.kafka.record-batch, which counts them",
                stream.namespace, stream.name
            ))
        })?;
    }
    Ok(())
}

/// An idempotent producer's part of a request, from its two fields (an empty id counts as
/// none): both or neither must be given.
pub fn producer_of(id: Option<&str>, sequence: Option<u64>) -> ApiResult<Option<ProducerSequence>> {
    match (id.filter(|id| !id.is_empty()), sequence) {
        (None, None) => Ok(None),
        (Some(id), Some(sequence)) => {
            Ok(Some(ProducerSequence { id: producers::ProducerId::parse(id)?, sequence, advance: None }))
        }
        (Some(_), None) => Err(ApiError::invalid("producer_sequence: required with producer_id")),
        (None, Some(_)) => Err(ApiError::invalid("producer_id: required with producer_sequence")),
    }
}

fn page_limit(limit: Option<usize>) -> ApiResult<usize> {
    match limit.unwrap_or(DEFAULT_PAGE) {
        0 => Err(ApiError::invalid("limit: must be at least 1")),
        n if n > MAX_PAGE => Err(ApiError::invalid(format!("limit: must be at most {MAX_PAGE}"))),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_maps_consistently() {
        let all = [
            ErrorKind::InvalidArgument,
            ErrorKind::Unauthenticated,
            ErrorKind::PermissionDenied,
            ErrorKind::NotFound,
            ErrorKind::AlreadyExists,
            ErrorKind::Conflict,
            ErrorKind::Contended,
            ErrorKind::OutOfSequence,
            ErrorKind::PreconditionFailed,
            ErrorKind::TooLarge,
            ErrorKind::UnsupportedMediaType,
            ErrorKind::RoleNotServed,
            ErrorKind::NotImplemented,
            ErrorKind::Backpressure,
            ErrorKind::Unavailable,
            ErrorKind::NotReady,
            ErrorKind::OutcomeUnknown,
            ErrorKind::CorruptData,
            ErrorKind::Internal,
            ErrorKind::RateLimited,
            ErrorKind::InFlight,
        ];
        for kind in all {
            let status = kind.http_status();
            assert!(status.is_client_error() || status.is_server_error(), "{kind:?}");
            assert_ne!(kind.grpc_code(), tonic::Code::Ok, "{kind:?}");
            // Only retryable kinds carry a retry hint: 503 / UNAVAILABLE, the rate limit's
            // 429 / RESOURCE_EXHAUSTED, and the lost races' 409 / ABORTED.
            if kind.retry_after_secs().is_some()
                && ![ErrorKind::RateLimited, ErrorKind::InFlight, ErrorKind::Contended].contains(&kind)
            {
                assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
                assert_eq!(kind.grpc_code(), tonic::Code::Unavailable);
            }
        }
        assert_eq!(ErrorKind::TooLarge.grpc_code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            ErrorKind::of_class(ErrorClass::OutcomeUnknown).grpc_code(),
            tonic::Code::DeadlineExceeded
        );
        assert_eq!(ErrorKind::of_class(ErrorClass::Conflict).http_status(), StatusCode::CONFLICT);
        // A lost race is one kind everywhere: 409 + Retry-After, ABORTED + retry-after, its
        // own code (a client tells it from the conflicts that retrying cannot fix), and a
        // Kafka code clients retry.
        let contended = ErrorKind::of_class(ErrorClass::Contended);
        assert_eq!(contended, ErrorKind::Contended);
        assert_eq!(
            (contended.http_status(), contended.grpc_code(), contended.code(), contended.retry_after_secs()),
            (StatusCode::CONFLICT, tonic::Code::Aborted, "contended", Some(1))
        );
        assert_ne!(contended.code(), ErrorKind::Conflict.code());
        assert_eq!(ErrorKind::Conflict.retry_after_secs(), None, "a conflict is not retried as is");
        assert_eq!(contended.kafka_code(), 56, "KAFKA_STORAGE_ERROR: clients retry it");
    }

    #[test]
    fn request_ids_are_honoured_or_made() {
        assert_eq!(request_id(Some("abc-123")), "abc-123");
        let made = request_id(Some("has space"));
        assert_ne!(made, "has space");
        assert_ne!(request_id(None), request_id(None));
        assert_ne!(request_id(Some(&"x".repeat(129))), "x".repeat(129));
    }

    #[test]
    fn page_limits_name_the_field() {
        assert!(page_limit(Some(0)).unwrap_err().message().starts_with("limit"));
        assert!(page_limit(Some(MAX_PAGE + 1)).is_err());
        assert_eq!(page_limit(None).unwrap(), DEFAULT_PAGE);
    }
}
