//! The HTTP/JSON API, version 1. Handlers are thin: they parse, call a role, and map the
//! result; every error goes through [`ApiError`], the one place that turns error classes into
//! status codes.
//!
//! | method | path | what |
//! |---|---|---|
//! | GET | `/healthz`, `/readyz` | liveness; readiness (the metadata store answers) |
//! | GET | `/metrics` | Prometheus metrics |
//! | POST, GET | `/v1/namespaces` | create, list namespaces |
//! | POST, GET | `/v1/namespaces/{ns}/streams` | create, list streams |
//! | GET, DELETE | `/v1/namespaces/{ns}/streams/{stream}` | get, drop a stream |
//! | POST | `/v1/namespaces/{ns}/streams/{stream}/partitions` | add partitions |
//! | POST | `…/partitions/{p}/entries` | produce entries |
//! | GET | `…/partitions/{p}/entries` | fetch entries from an offset |
//! | GET | `…/partitions/{p}/offsets` | first and next offsets, trim marker |
//! | POST | `…/partitions/{p}/trim` | soft trim |

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use lakestream_catalog::{CatalogError, Growth, Namespace, Stream};
use lakestream_format::{ErrorClass, LogRef};
use lakestream_reader::{ReadError, Reader};
use lakestream_writer::{AppendError, TrimError, Writer};
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;

use crate::config::HttpConfig;
use crate::metrics::Metrics;
use crate::stack::Stack;

/// Shared state of the handlers.
#[derive(Debug, Clone)]
pub struct AppState {
    stack: Stack,
    config: HttpConfig,
    metrics: Arc<Metrics>,
}

impl AppState {
    /// State over a running stack.
    pub fn new(stack: Stack, config: HttpConfig) -> Self {
        AppState { stack, config, metrics: Arc::new(Metrics::default()) }
    }
}

/// The API's router.
pub fn router(state: AppState) -> Router {
    let body_limit = state.config.max_body_bytes;
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/v1/namespaces", post(create_namespace).get(list_namespaces))
        .route("/v1/namespaces/{ns}/streams", post(create_stream).get(list_streams))
        .route("/v1/namespaces/{ns}/streams/{stream}", get(get_stream).delete(drop_stream))
        .route("/v1/namespaces/{ns}/streams/{stream}/partitions", post(add_partitions))
        .route("/v1/namespaces/{ns}/streams/{stream}/partitions/{p}/entries", post(produce).get(fetch))
        .route("/v1/namespaces/{ns}/streams/{stream}/partitions/{p}/offsets", get(offsets))
        .route("/v1/namespaces/{ns}/streams/{stream}/partitions/{p}/trim", post(trim))
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(state.clone(), authorize))
        .layer(axum::middleware::from_fn(request_span))
        .with_state(state)
}

/// Refuses a `/v1` request whose bearer token lacks the permission it needs (when tokens are
/// configured): 401 without a valid token, 403 with one that does not reach. Nothing runs.
async fn authorize(
    State(s): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if s.stack.auth.enabled()
        && let Some((namespace, needed)) = crate::auth::required(request.method(), request.uri().path())
    {
        let header = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        match s.stack.auth.check(header, namespace.as_deref(), needed) {
            Ok(token) => tracing::debug!(%token, "authorized"),
            Err(crate::auth::Denied::Unauthenticated) => {
                s.metrics.http_errors.fetch_add(1, Ordering::Relaxed);
                let mut r = ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthenticated",
                    "a valid bearer token is required",
                )
                .into_response();
                r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return r;
            }
            Err(crate::auth::Denied::Forbidden(why)) => {
                s.metrics.http_errors.fetch_add(1, Ordering::Relaxed);
                return ApiError::new(StatusCode::FORBIDDEN, "permission_denied", why).into_response();
            }
        }
    }
    next.run(request).await
}

/// The header carrying a request's id; a client may send its own (at most 128 visible ASCII
/// characters), else one is made. It is echoed in the response and names the request's span.
pub const REQUEST_ID: &str = "x-request-id";

static NEXT_REQUEST: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Runs every request in a tracing span with its method, path and id, and logs failures.
async fn request_span(mut request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    use tracing::Instrument as _;
    let given = request
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned);
    let id = given.unwrap_or_else(|| {
        format!("{}-{}", std::process::id(), NEXT_REQUEST.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    });
    if let Ok(value) = HeaderValue::from_str(&id) {
        request.headers_mut().insert(REQUEST_ID, value);
    }
    let span =
        tracing::info_span!("request", id = %id, method = %request.method(), path = %request.uri().path());
    let started = Instant::now();
    let mut response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    if status.is_client_error() || status.is_server_error() {
        span.in_scope(
            || tracing::info!(%status, elapsed_ms = started.elapsed().as_millis() as u64, "request failed"),
        );
    }
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    response
}

/// An error answer: a status, a stable machine-readable code and a message naming what was
/// wrong, as `{"error": {"code": …, "message": …}}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into() }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_argument", message)
    }

    /// The one mapping from error classes to HTTP status codes.
    fn from_class(class: ErrorClass, message: String) -> Self {
        let (status, code) = match class {
            ErrorClass::InvalidInput => (StatusCode::BAD_REQUEST, "invalid_argument"),
            ErrorClass::NotFound => (StatusCode::NOT_FOUND, "not_found"),
            ErrorClass::Conflict => (StatusCode::CONFLICT, "conflict"),
            ErrorClass::Retryable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ErrorClass::OutcomeUnknown => (StatusCode::GATEWAY_TIMEOUT, "outcome_unknown"),
            ErrorClass::CorruptData => (StatusCode::INTERNAL_SERVER_ERROR, "corrupt_data"),
            ErrorClass::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        Self::new(status, code, message)
    }
}

impl From<CatalogError> for ApiError {
    fn from(e: CatalogError) -> Self {
        Self::from_class(e.class(), e.to_string())
    }
}

impl From<AppendError> for ApiError {
    fn from(e: AppendError) -> Self {
        match e {
            AppendError::Backpressure => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "backpressure", e.to_string())
            }
            _ => Self::from_class(e.class(), e.to_string()),
        }
    }
}

impl From<ReadError> for ApiError {
    fn from(e: ReadError) -> Self {
        Self::from_class(e.class(), e.to_string())
    }
}

impl From<TrimError> for ApiError {
    fn from(e: TrimError) -> Self {
        Self::from_class(e.class(), e.to_string())
    }
}

impl From<JsonRejection> for ApiError {
    fn from(e: JsonRejection) -> Self {
        match e.status() {
            StatusCode::PAYLOAD_TOO_LARGE => {
                Self::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", e.body_text())
            }
            StatusCode::UNSUPPORTED_MEDIA_TYPE => {
                Self::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", e.body_text())
            }
            _ => Self::bad_request(e.body_text()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": { "code": self.code, "message": self.message } });
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// A JSON body whose rejections become [`ApiError`]s.
struct Json<T>(T);

impl<S, T> axum::extract::FromRequest<S> for Json<T>
where
    axum::Json<T>: axum::extract::FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        let axum::Json(v) = axum::Json::<T>::from_request(req, state).await?;
        Ok(Json(v))
    }
}

fn ok<T: Serialize>(status: StatusCode, value: T) -> Response {
    (status, axum::Json(value)).into_response()
}

async fn readyz(State(s): State<AppState>) -> Response {
    match s.stack.meta.get("0", "/readyz").await {
        Ok(_) => "ready".into_response(),
        Err(e) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_ready", format!("metadata store: {e}"))
            .into_response(),
    }
}

async fn metrics(State(s): State<AppState>) -> Response {
    let cache = s.stack.reader.as_ref().map(Reader::cache_stats);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.metrics.render(cache)).into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateNamespace {
    name: String,
    #[serde(default)]
    properties: BTreeMap<String, String>,
}

#[derive(Debug, Serialize)]
struct NamespaceJson {
    name: String,
    properties: BTreeMap<String, String>,
    created_ms: i64,
}

impl From<Namespace> for NamespaceJson {
    fn from(n: Namespace) -> Self {
        NamespaceJson { name: n.name, properties: n.properties, created_ms: n.created_ms }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    after: Option<String>,
    limit: Option<usize>,
}

const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

fn page_limit(limit: Option<usize>) -> ApiResult<usize> {
    match limit.unwrap_or(DEFAULT_PAGE) {
        0 => Err(ApiError::bad_request("limit must be at least 1")),
        n if n > MAX_PAGE => Err(ApiError::bad_request(format!("limit must be at most {MAX_PAGE}"))),
        n => Ok(n),
    }
}

async fn create_namespace(
    State(s): State<AppState>,
    Json(body): Json<CreateNamespace>,
) -> ApiResult<Response> {
    let ns = s.stack.catalog.create_namespace(&body.name, body.properties).await?;
    Ok(ok(StatusCode::CREATED, NamespaceJson::from(ns)))
}

async fn list_namespaces(State(s): State<AppState>, Query(q): Query<ListQuery>) -> ApiResult<Response> {
    let page = s.stack.catalog.list_namespaces(q.after.as_deref(), page_limit(q.limit)?).await?;
    let items: Vec<NamespaceJson> = page.items.into_iter().map(Into::into).collect();
    Ok(ok(StatusCode::OK, serde_json::json!({ "namespaces": items, "next_page": page.next_page })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateStream {
    name: String,
    #[serde(default = "one")]
    partitions: u32,
    #[serde(default)]
    properties: BTreeMap<String, String>,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Serialize)]
struct StreamJson {
    namespace: String,
    name: String,
    partitions: usize,
    log_ids: Vec<u64>,
    properties: BTreeMap<String, String>,
    created_ms: i64,
}

impl From<Stream> for StreamJson {
    fn from(s: Stream) -> Self {
        StreamJson {
            partitions: s.partition_count(),
            log_ids: s.logs.iter().map(|l| l.0).collect(),
            namespace: s.namespace,
            name: s.name,
            properties: s.properties,
            created_ms: s.created_ms,
        }
    }
}

async fn create_stream(
    State(s): State<AppState>,
    Path(ns): Path<String>,
    Json(body): Json<CreateStream>,
) -> ApiResult<Response> {
    let stream = s.stack.catalog.create_stream(&ns, &body.name, body.partitions, body.properties).await?;
    Ok(ok(StatusCode::CREATED, StreamJson::from(stream)))
}

async fn list_streams(
    State(s): State<AppState>,
    Path(ns): Path<String>,
    Query(q): Query<ListQuery>,
) -> ApiResult<Response> {
    let page = s.stack.catalog.list_streams(&ns, q.after.as_deref(), page_limit(q.limit)?).await?;
    let items: Vec<StreamJson> = page.items.into_iter().map(Into::into).collect();
    Ok(ok(StatusCode::OK, serde_json::json!({ "streams": items, "next_page": page.next_page })))
}

async fn get_stream(
    State(s): State<AppState>,
    Path((ns, stream)): Path<(String, String)>,
) -> ApiResult<Response> {
    Ok(ok(StatusCode::OK, StreamJson::from(s.stack.catalog.get_stream(&ns, &stream).await?)))
}

async fn drop_stream(
    State(s): State<AppState>,
    Path((ns, stream)): Path<(String, String)>,
) -> ApiResult<Response> {
    s.stack.catalog.drop_stream(&ns, &stream).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AddPartitions {
    /// Grow to at least this many partitions (idempotent).
    to: Option<u32>,
    /// Add this many partitions.
    by: Option<u32>,
}

async fn add_partitions(
    State(s): State<AppState>,
    Path((ns, stream)): Path<(String, String)>,
    Json(body): Json<AddPartitions>,
) -> ApiResult<Response> {
    let growth = match (body.to, body.by) {
        (Some(to), None) => Growth::To(to),
        (None, Some(by)) => Growth::By(by),
        _ => return Err(ApiError::bad_request("give exactly one of `to` and `by`")),
    };
    Ok(ok(StatusCode::OK, StreamJson::from(s.stack.catalog.add_partitions(&ns, &stream, growth).await?)))
}

/// Resolves a partition of a stream to its log through the catalog.
async fn log_of(s: &AppState, ns: &str, stream: &str, partition: &str) -> ApiResult<LogRef> {
    let p: usize = partition.parse().map_err(|_| {
        ApiError::bad_request(format!("partition {partition:?} is not a non-negative integer"))
    })?;
    let stream = s.stack.catalog.get_stream(ns, stream).await?;
    let count = stream.partition_count();
    stream.log_ref(p).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("stream {ns}/{} has {count} partitions; no partition {p}", stream.name),
        )
    })
}

fn writer(s: &AppState) -> ApiResult<&Writer> {
    s.stack.writer.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "role_not_served",
            "this process does not serve the writer role",
        )
    })
}

fn reader(s: &AppState) -> ApiResult<&Reader> {
    s.stack.reader.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "role_not_served",
            "this process does not serve the reader role",
        )
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProduceEntry {
    /// The payload, standard Base64.
    payload_base64: String,
    #[serde(default = "one")]
    record_count: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProduceBody {
    entries: Vec<ProduceEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProduceQuery {
    record_count: Option<u32>,
}

#[derive(Debug, Serialize)]
struct Appended {
    offset: u64,
    record_count: u32,
    timestamp_ms: i64,
}

/// The content type of a produce body holding Kafka record batches (one entry).
pub const KAFKA_BATCHES: &str = "application/vnd.kafka.record-batch";

/// Produces entries. `application/json`: `{"entries": [{"payload_base64", "record_count"}]}`,
/// appended concurrently and answered per entry in order. [`KAFKA_BATCHES`]: one entry of
/// Kafka record batches, validated by the Kafka binding, which also counts its records. Any
/// other content type: the body is one entry's payload, with `?record_count=N` (default 1).
async fn produce(
    State(s): State<AppState>,
    Path((ns, stream, p)): Path<(String, String, String)>,
    Query(q): Query<ProduceQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let log = log_of(&s, &ns, &stream, &p).await?;
    let w = writer(&s)?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|t| t.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let entries: Vec<(Bytes, u32)> = if content_type == KAFKA_BATCHES {
        // The Kafka binding (Appendix A): the body is one entry of complete record batches;
        // its record count is what the batches hold. `record_count` must not disagree.
        let records = lakestream_format::kafka::count_records(&body)
            .map_err(|e| ApiError::bad_request(format!("body: not a valid Kafka entry payload: {e}")))?;
        if let Some(n) = q.record_count.filter(|n| *n != records) {
            return Err(ApiError::bad_request(format!(
                "record_count: {n} disagrees with the {records} records the batches hold"
            )));
        }
        vec![(body, records)]
    } else if content_type == "application/json" {
        let parsed: ProduceBody =
            serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(format!("request body: {e}")))?;
        if parsed.entries.is_empty() {
            return Err(ApiError::bad_request("entries: must hold at least one entry"));
        }
        parsed
            .entries
            .into_iter()
            .enumerate()
            .map(|(i, e)| {
                BASE64
                    .decode(e.payload_base64.as_bytes())
                    .map(|b| (Bytes::from(b), e.record_count))
                    .map_err(|err| ApiError::bad_request(format!("entries[{i}].payload_base64: {err}")))
            })
            .collect::<ApiResult<_>>()?
    } else {
        vec![(body, q.record_count.unwrap_or(1))]
    };
    for (i, (payload, records)) in entries.iter().enumerate() {
        if *records == 0 {
            return Err(ApiError::bad_request(format!("entries[{i}].record_count: must be at least 1")));
        }
        if payload.len() > w.config().max_entry_bytes {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!(
                    "entries[{i}]: {} bytes exceeds the largest entry ({})",
                    payload.len(),
                    w.config().max_entry_bytes
                ),
            ));
        }
    }
    let started = Instant::now();
    let lens: Vec<usize> = entries.iter().map(|(p, _)| p.len()).collect();
    let results = w.append_many(log.log_id, entries).await.into_iter().zip(lens);
    let mut answers = Vec::new();
    let mut first_error = None;
    for (result, len) in results {
        match result {
            Ok(ack) => {
                s.metrics.appended_entries.fetch_add(1, Ordering::Relaxed);
                s.metrics.appended_bytes.fetch_add(len as u64, Ordering::Relaxed);
                s.metrics.append_latency.observe(started.elapsed());
                answers.push(serde_json::json!(Appended {
                    offset: ack.offset,
                    record_count: ack.record_count,
                    timestamp_ms: ack.timestamp_ms
                }));
            }
            Err(e) => {
                s.metrics.append_errors.fetch_add(1, Ordering::Relaxed);
                if e.class() == ErrorClass::OutcomeUnknown {
                    s.metrics.append_unknown.fetch_add(1, Ordering::Relaxed);
                }
                answers.push(serde_json::json!({ "error": { "class": format!("{:?}", e.class()), "message": e.to_string() } }));
                first_error.get_or_insert(e);
            }
        }
    }
    // A single entry answers with its own status; a batch answers 200 with one result per
    // entry unless every entry failed, in which case the first error decides.
    if let Some(e) = first_error
        && answers.iter().all(|a| a.get("error").is_some())
    {
        s.metrics.http_errors.fetch_add(1, Ordering::Relaxed);
        return Err(e.into());
    }
    Ok(ok(StatusCode::OK, serde_json::json!({ "entries": answers })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FetchQuery {
    #[serde(default)]
    offset: u64,
    max_bytes: Option<usize>,
    #[serde(default)]
    max_wait_ms: u64,
}

const DEFAULT_FETCH_BYTES: usize = 1 << 20;

async fn fetch(
    State(s): State<AppState>,
    Path((ns, stream, p)): Path<(String, String, String)>,
    Query(q): Query<FetchQuery>,
) -> ApiResult<Response> {
    let log = log_of(&s, &ns, &stream, &p).await?;
    let r = reader(&s)?;
    let max_bytes = q.max_bytes.unwrap_or(DEFAULT_FETCH_BYTES);
    if max_bytes == 0 {
        return Err(ApiError::bad_request("max_bytes: must be at least 1"));
    }
    let wait = Duration::from_millis(q.max_wait_ms);
    if wait > s.config.max_fetch_wait {
        return Err(ApiError::bad_request(format!(
            "max_wait_ms: at most {} ms",
            s.config.max_fetch_wait.as_millis()
        )));
    }
    let started = Instant::now();
    let batch = r.read(&log, q.offset, max_bytes, wait).await?;
    s.metrics.fetch_latency.observe(started.elapsed());
    s.metrics.fetched_entries.fetch_add(batch.entries.len() as u64, Ordering::Relaxed);
    let entries: Vec<_> = batch
        .entries
        .iter()
        .map(|e| {
            s.metrics.fetched_bytes.fetch_add(e.payload.len() as u64, Ordering::Relaxed);
            serde_json::json!({
                "offset": e.offset,
                "record_count": e.record_count,
                "timestamp_ms": e.timestamp_ms,
                "payload_base64": BASE64.encode(&e.payload),
            })
        })
        .collect();
    Ok(ok(
        StatusCode::OK,
        serde_json::json!({ "entries": entries, "next_offset": batch.next_offset, "trim_marker": batch.trim_marker }),
    ))
}

async fn offsets(
    State(s): State<AppState>,
    Path((ns, stream, p)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    let log = log_of(&s, &ns, &stream, &p).await?;
    let r = reader(&s)?;
    let first = r.first_offset(log.log_id).await?;
    let next = r.next_offset(log.log_id).await?;
    let b = r.trim_marker(log.log_id).await?;
    Ok(ok(
        StatusCode::OK,
        serde_json::json!({ "first_offset": first, "next_offset": next, "trim_marker": b }),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TrimBody {
    /// Trim through this offset, inclusive.
    through: u64,
}

async fn trim(
    State(s): State<AppState>,
    Path((ns, stream, p)): Path<(String, String, String)>,
    Json(body): Json<TrimBody>,
) -> ApiResult<Response> {
    let log = log_of(&s, &ns, &stream, &p).await?;
    let outcome = writer(&s)?.soft_trim(log.log_id, body.through).await?;
    Ok(ok(StatusCode::OK, serde_json::json!({ "trim_marker": outcome.marker, "advanced": outcome.advanced })))
}
