//! The HTTP/JSON API, version 1. Handlers are thin: they parse, call the service layer
//! ([`lakestream_service::api::Api`], shared with the gRPC API) and render JSON; every error is an
//! [`ApiError`], whose kind decides the status code (the table is in [`lakestream_service::api`]).
//!
//! | method | path | what |
//! |---|---|---|
//! | GET | `/healthz`, `/readyz` | liveness; readiness (the metadata and object stores answer; 503 once draining) |
//! | GET | `/metrics` | Prometheus metrics |
//! | POST, GET | `/v1/namespaces` | create, list namespaces |
//! | POST, GET | `/v1/namespaces/{ns}/streams` | create, list streams |
//! | GET, DELETE | `/v1/namespaces/{ns}/streams/{stream}` | get, drop a stream |
//! | POST | `/v1/namespaces/{ns}/streams/{stream}/partitions` | add partitions |
//! | POST | `…/partitions/{p}/entries` | produce entries |
//! | GET | `…/partitions/{p}/entries` | fetch entries from an offset |
//! | GET | `…/partitions/{p}/offsets` | first and next offsets, trim marker |
//! | POST | `…/partitions/{p}/trim` | soft trim |
//! | GET | `/v1/namespaces/{ns}/groups` | list the namespace's consumer groups |
//! | GET | `/v1/namespaces/{ns}/groups/{group}/streams/{stream}` | a group's committed offsets and lag per partition |
//! | PUT | `/v1/namespaces/{ns}/groups/{group}/streams/{stream}/partitions/{p}` | commit a group's offset |

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::Router;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Extension, FromRequestParts, MatchedPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use lakestream_service::api::{Namespace, Stream};
use lakestream_service::auth::{Caller, Operation};
use serde::{Deserialize, Serialize};

use crate::config::HttpConfig;
use lakestream_service::api::Api;
use lakestream_service::metrics::Metrics;

/// Shared state of the handlers.
#[derive(Debug, Clone)]
pub struct AppState {
    pub(crate) config: HttpConfig,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) api: Api,
}

impl AppState {
    /// State over the service layer `api`, sharing its metrics (with the gRPC API).
    pub fn with_api(api: Api, config: HttpConfig) -> Self {
        AppState { metrics: api.metrics().clone(), config, api }
    }

    /// The service layer.
    pub fn api(&self) -> &Api {
        &self.api
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
        .route("/v1/namespaces/{ns}", axum::routing::delete(delete_namespace))
        .route("/v1/namespaces/{ns}/streams", post(create_stream).get(list_streams))
        .route(
            "/v1/namespaces/{ns}/streams/{stream}",
            get(get_stream).delete(drop_stream).patch(update_stream),
        )
        .route("/v1/namespaces/{ns}/streams/{stream}/partitions", post(add_partitions))
        .route("/v1/namespaces/{ns}/streams/{stream}/partitions/{p}/entries", post(produce).get(fetch))
        .route("/v1/namespaces/{ns}/streams/{stream}/partitions/{p}/offsets", get(offsets))
        .route("/v1/namespaces/{ns}/streams/{stream}/partitions/{p}/trim", post(trim))
        .route("/v1/namespaces/{ns}/groups", get(list_groups))
        .route("/v1/namespaces/{ns}/groups/{group}/streams/{stream}", get(group_offsets))
        .route("/v1/namespaces/{ns}/groups/{group}/streams/{stream}/partitions/{p}", put(commit_offset))
        .merge(crate::events::routes())
        // After routing, so that `admit` sees the matched route.
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), admit))
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(state.clone(), request_span))
        .with_state(state)
}

/// Admits a `/v1` request before its body is read: its bearer token (when tokens are
/// configured; 401 without a valid one), its client's rate limit (429), and the permission of
/// the operation its route serves on the namespace it names (403), so that a refused caller
/// learns nothing of what its request would have done. The [`Caller`] goes into the request's
/// extensions; the operation checks its permission again against it.
///
/// Runs on the matched route. The namespace is the router's `{ns}` parameter, percent-decoded
/// by the same extractor the handlers use: the check and the handler see one namespace.
/// (Reading the raw path here once let `%`-escapes name one namespace to the check and another
/// to the handler.)
async fn admit(
    State(s): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    // A route layer runs only on a matched route; health, readiness and metrics need no caller.
    let Some(operation) =
        request.extensions().get::<MatchedPath>().and_then(|r| operation_of(request.method(), r.as_str()))
    else {
        return next.run(request).await;
    };
    let (mut parts, body) = request.into_parts();
    let namespace = match Path::<HashMap<String, String>>::from_request_parts(&mut parts, &s).await {
        Ok(Path(params)) => params.get("ns").cloned(),
        // The handler would refuse the path too (say, a `%`-escape that is not UTF-8); no
        // namespace is named, so nothing can be reached.
        Err(e) => return e.into_response(),
    };
    let header = parts.headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let peer = parts.extensions.get::<crate::listener::PeerAddr>().map(|p| p.0.ip());
    let caller = match s.api.admit(header, peer) {
        Ok(caller) => caller,
        Err(e) => return e.into_http(),
    };
    if let Err(e) = s.api.authorize_operation(&caller, namespace.as_deref(), operation) {
        return e.into_http();
    }
    parts.extensions.insert(caller);
    next.run(axum::extract::Request::from_parts(parts, body)).await
}

/// The operation a `/v1` route serves, from its method and pattern (as registered with the
/// router); `None` outside `/v1`.
fn operation_of(method: &axum::http::Method, route: &str) -> Option<Operation> {
    use axum::http::Method;
    let parts: Vec<&str> = route.trim_matches('/').split('/').collect();
    if parts.first() != Some(&"v1") || parts.get(1) != Some(&"namespaces") {
        return None;
    }
    let get = method == Method::GET;
    Some(match (parts.get(3), parts.get(5), parts.get(7)) {
        (None, _, _) if parts.len() == 2 => {
            if get {
                Operation::ListNamespaces
            } else {
                Operation::CreateNamespace
            }
        }
        (None, _, _) => Operation::DeleteNamespace,
        (Some(&"groups"), _, _) if method == Method::PUT => Operation::CommitOffset,
        (Some(&"groups"), _, _) if parts.len() == 4 => Operation::ListGroups,
        (Some(&"groups"), _, _) => Operation::GroupOffsets,
        (Some(&"streams"), Some(&"partitions"), Some(&"entries")) if get => Operation::Fetch,
        (Some(&"streams"), Some(&"partitions"), Some(&"entries")) => Operation::Produce,
        (Some(&"streams"), Some(&"partitions"), Some(&"offsets")) => Operation::Offsets,
        (Some(&"streams"), Some(&"partitions"), Some(&"trim")) => Operation::Trim,
        (Some(&"streams"), Some(&"partitions"), Some(&"events")) => Operation::ConsumeEvents,
        (Some(&"streams"), Some(&"partitions"), _) => Operation::AddPartitions,
        (Some(&"streams"), Some(&"events"), None) => Operation::IngestEvents,
        (Some(&"streams"), None, _) if parts.len() == 4 && get => Operation::ListStreams,
        (Some(&"streams"), None, _) if parts.len() == 4 => Operation::CreateStream,
        (Some(&"streams"), None, _) if get => Operation::GetStream,
        (Some(&"streams"), None, _) if method == Method::PATCH => Operation::UpdateStream,
        (Some(&"streams"), None, _) => Operation::DropStream,
        // A route this table does not know: the strictest permission, so that a new route
        // cannot open what it should guard (the operation checks its own as well).
        _ => Operation::CreateNamespace,
    })
}

pub use lakestream_service::api::REQUEST_ID;

/// Runs every request in a tracing span with its method, path and id (see [`REQUEST_ID`]),
/// logs failures and counts every request by route template (the router's pattern, or
/// `unmatched`: never the raw path), method and status class.
async fn request_span(
    State(s): State<AppState>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use tracing::Instrument as _;
    let id =
        lakestream_service::api::request_id(request.headers().get(REQUEST_ID).and_then(|v| v.to_str().ok()));
    if let Ok(value) = HeaderValue::from_str(&id) {
        request.headers_mut().insert(REQUEST_ID, value);
    }
    let span =
        tracing::info_span!("request", id = %id, method = %request.method(), path = %request.uri().path());
    // This layer runs per route (and on the fallback), after routing: the pattern is known.
    let route = request.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned());
    let method = request.method().clone();
    let started = Instant::now();
    let mut response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    s.metrics.http_requests.observe(route.as_deref(), &method, status, started.elapsed());
    if status.is_client_error() || status.is_server_error() {
        s.metrics.http_errors.fetch_add(1, Ordering::Relaxed);
        span.in_scope(
            || tracing::info!(%status, elapsed_ms = started.elapsed().as_millis() as u64, "request failed"),
        );
    }
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    response
}

pub use lakestream_service::api::ApiError;
use lakestream_service::api::{ErrorKind, FetchParams, PartitionRef, ProduceInput};

/// An [`ApiError`] as an HTTP answer (the error table is the service's; the body and headers
/// are this transport's).
#[derive(Debug)]
pub struct HttpError(pub ApiError);

impl From<ApiError> for HttpError {
    fn from(e: ApiError) -> Self {
        HttpError(e)
    }
}

impl From<JsonRejection> for HttpError {
    fn from(e: JsonRejection) -> Self {
        HttpError(match e.status() {
            StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(ErrorKind::TooLarge, e.body_text()),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => {
                ApiError::new(ErrorKind::UnsupportedMediaType, e.body_text())
            }
            _ => ApiError::invalid(e.body_text()),
        })
    }
}

/// An error answer: the kind's status, and `{"error": {"code": …, "message": …}}`; 503s and
/// 429s carry `Retry-After`.
impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let HttpError(e) = self;
        e.into_http()
    }
}

/// [`HttpError`]'s answer.
trait IntoHttp {
    fn into_http(self) -> Response;
}

impl IntoHttp for ApiError {
    fn into_http(self) -> Response {
        let status = self.http_status();
        let mut error = serde_json::json!({ "code": self.code(), "message": self.message() });
        if let Some(next) = self.next_offset() {
            error["next_offset"] = serde_json::json!(next);
        }
        if let Some(attribute) = self.attribute() {
            error["attribute"] = serde_json::json!(attribute);
        }
        if let Some(index) = self.event_index() {
            error["index"] = serde_json::json!(index);
        }
        let body = serde_json::json!({ "error": error });
        let mut response = (status, axum::Json(body)).into_response();
        // Every 503 and 429 says when to come back, as does a kind worth retrying after a pause.
        let pause =
            [StatusCode::SERVICE_UNAVAILABLE, StatusCode::TOO_MANY_REQUESTS].contains(&status).then_some(1);
        if let Some(secs) = self.retry_after_secs().or(pause) {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.kind() == ErrorKind::Unauthenticated {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

type ApiResult<T> = Result<T, HttpError>;

/// A JSON body whose rejections become [`ApiError`]s.
struct Json<T>(T);

impl<S, T> axum::extract::FromRequest<S> for Json<T>
where
    axum::Json<T>: axum::extract::FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = HttpError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        let axum::Json(v) = axum::Json::<T>::from_request(req, state).await?;
        Ok(Json(v))
    }
}

/// Path parameters whose rejections become [`ApiError`]s (JSON, 400), not axum's plain text.
struct Path<T>(T);

impl<S, T> FromRequestParts<S> for Path<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = HttpError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, HttpError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(Path(v)),
            Err(e) => Err(ApiError::invalid(format!("path: {}", e.body_text())).into()),
        }
    }
}

/// A query string whose rejections become [`ApiError`]s (JSON, 400), not axum's plain text.
struct Query<T>(T);

impl<S, T> FromRequestParts<S> for Query<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = HttpError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, HttpError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(Query(v)),
            Err(e) => Err(ApiError::invalid(format!("query: {}", e.body_text())).into()),
        }
    }
}

fn ok<T: Serialize>(status: StatusCode, value: T) -> Response {
    (status, axum::Json(value)).into_response()
}

async fn readyz(State(s): State<AppState>) -> ApiResult<Response> {
    s.api.ready().await?;
    Ok("ready".into_response())
}

async fn metrics(State(s): State<AppState>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.api.render_metrics()).into_response()
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

async fn create_namespace(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<CreateNamespace>,
) -> ApiResult<Response> {
    let ns = s.api.create_namespace(&caller, &body.name, body.properties).await?;
    Ok(ok(StatusCode::CREATED, NamespaceJson::from(ns)))
}

async fn list_namespaces(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<ListQuery>,
) -> ApiResult<Response> {
    let page = s.api.list_namespaces(&caller, q.after.as_deref(), q.limit).await?;
    let items: Vec<NamespaceJson> = page.items.into_iter().map(Into::into).collect();
    Ok(ok(StatusCode::OK, serde_json::json!({ "namespaces": items, "next_page": page.next_page })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateStream {
    name: String,
    partitions: Option<u32>,
    #[serde(default)]
    properties: BTreeMap<String, String>,
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
    Extension(caller): Extension<Caller>,
    Path(ns): Path<String>,
    Json(body): Json<CreateStream>,
) -> ApiResult<Response> {
    let stream = s.api.create_stream(&caller, &ns, &body.name, body.partitions, body.properties).await?;
    Ok(ok(StatusCode::CREATED, StreamJson::from(stream)))
}

async fn list_streams(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(ns): Path<String>,
    Query(q): Query<ListQuery>,
) -> ApiResult<Response> {
    let page = s.api.list_streams(&caller, &ns, q.after.as_deref(), q.limit).await?;
    let items: Vec<StreamJson> = page.items.into_iter().map(Into::into).collect();
    Ok(ok(StatusCode::OK, serde_json::json!({ "streams": items, "next_page": page.next_page })))
}

async fn get_stream(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((ns, stream)): Path<(String, String)>,
) -> ApiResult<Response> {
    Ok(ok(StatusCode::OK, StreamJson::from(s.api.get_stream(&caller, &ns, &stream).await?)))
}

async fn delete_namespace(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(ns): Path<String>,
) -> ApiResult<Response> {
    s.api.delete_namespace(&caller, &ns).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateStream {
    /// Properties to set (a string) or remove (`null`).
    #[serde(default)]
    properties: BTreeMap<String, Option<String>>,
}

async fn update_stream(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((ns, stream)): Path<(String, String)>,
    Json(body): Json<UpdateStream>,
) -> ApiResult<Response> {
    Ok(ok(
        StatusCode::OK,
        StreamJson::from(s.api.update_stream(&caller, &ns, &stream, body.properties).await?),
    ))
}

async fn drop_stream(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((ns, stream)): Path<(String, String)>,
) -> ApiResult<Response> {
    s.api.drop_stream(&caller, &ns, &stream).await?;
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
    Extension(caller): Extension<Caller>,
    Path((ns, stream)): Path<(String, String)>,
    Json(body): Json<AddPartitions>,
) -> ApiResult<Response> {
    Ok(ok(
        StatusCode::OK,
        StreamJson::from(s.api.add_partitions(&caller, &ns, &stream, body.to, body.by).await?),
    ))
}

/// Parses a partition path segment.
fn partition(p: &str) -> Result<usize, ApiError> {
    p.parse().map_err(|_| ApiError::invalid(format!("partition {p:?} is not a non-negative integer")))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProduceEntry {
    /// The payload, standard Base64.
    payload_base64: String,
    #[serde(default = "one")]
    record_count: u32,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProduceBody {
    entries: Vec<ProduceEntry>,
    expected_next_offset: Option<u64>,
    producer_id: Option<String>,
    producer_sequence: Option<u64>,
}

/// A produce request's query: the conditions may be given here for every content type.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProduceQuery {
    record_count: Option<u32>,
    expected_next_offset: Option<u64>,
    producer_id: Option<String>,
    producer_sequence: Option<u64>,
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
    Extension(caller): Extension<Caller>,
    Path((ns, stream, p)): Path<(String, String, String)>,
    Query(q): Query<ProduceQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let target = PartitionRef { namespace: &ns, stream: &stream, partition: partition(&p)? };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|t| t.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let mut expect = q.expected_next_offset;
    let (mut producer_id, mut producer_sequence) = (q.producer_id, q.producer_sequence);
    let input = if content_type == KAFKA_BATCHES {
        ProduceInput::KafkaBatches { payload: body, record_count: q.record_count }
    } else if content_type == "application/json" {
        let parsed: ProduceBody =
            serde_json::from_slice(&body).map_err(|e| ApiError::invalid(format!("request body: {e}")))?;
        expect = one_of("expected_next_offset", expect, parsed.expected_next_offset)?;
        producer_id = one_of("producer_id", producer_id, parsed.producer_id)?;
        producer_sequence = one_of("producer_sequence", producer_sequence, parsed.producer_sequence)?;
        let entries = parsed
            .entries
            .into_iter()
            .enumerate()
            .map(|(i, e)| {
                BASE64
                    .decode(e.payload_base64.as_bytes())
                    .map(|b| (Bytes::from(b), e.record_count))
                    .map_err(|err| ApiError::invalid(format!("entries[{i}].payload_base64: {err}")))
            })
            .collect::<Result<_, ApiError>>()?;
        ProduceInput::Entries(entries)
    } else {
        ProduceInput::Entries(vec![(body, q.record_count.unwrap_or(1))])
    };
    // A batch answers 200 with one result per entry unless every entry failed, in which case
    // the first error decides (and a single entry answers with its own status).
    let options = lakestream_service::api::ProduceOptions {
        expect_next_offset: expect,
        producer: lakestream_service::api::producer_of(producer_id.as_deref(), producer_sequence)?,
    };
    let answers: Vec<serde_json::Value> = s
        .api
        .produce_with(&caller, target, input, options)
        .await?
        .into_iter()
        .map(|outcome| match outcome {
            Ok(ack) => serde_json::json!(Appended {
                offset: ack.offset,
                record_count: ack.record_count,
                timestamp_ms: ack.timestamp_ms
            }),
            Err(e) => serde_json::json!({ "error": {
                "class": format!("{:?}", e.class), "code": e.error.code(), "message": e.error.message()
            } }),
        })
        .collect();
    Ok(ok(StatusCode::OK, serde_json::json!({ "entries": answers })))
}

/// A field given in the query or the body, not both.
fn one_of<T>(field: &str, query: Option<T>, body: Option<T>) -> Result<Option<T>, ApiError> {
    match (query, body) {
        (Some(_), Some(_)) => {
            Err(ApiError::invalid(format!("{field}: give it in the query or the body, not both")))
        }
        (q, b) => Ok(q.or(b)),
    }
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

/// Fetches entries; with `Accept: text/event-stream`, opens a read session instead (see
/// [`read_session`]).
async fn fetch(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((ns, stream, p)): Path<(String, String, String)>,
    Query(q): Query<FetchQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let target = PartitionRef { namespace: &ns, stream: &stream, partition: partition(&p)? };
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if accept.contains("text/event-stream") {
        return read_session(&s, &caller, target, &q, &headers).await;
    }
    let params = FetchParams { offset: q.offset, max_bytes: q.max_bytes, max_wait_ms: q.max_wait_ms };
    let batch = s.api.fetch(&caller, target, params).await?;
    if accept.contains(RAW_ENTRIES) {
        return Ok(raw_entries(&batch));
    }
    let entries: Vec<_> = batch
        .entries
        .iter()
        .map(|e| {
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

/// The content type of a fetch answered in raw frames (no Base64, no JSON): for throughput.
pub const RAW_ENTRIES: &str = "application/vnd.lakestream.entries";

/// A fetch's entries as raw frames, one per entry: offset (u64), record count (u32),
/// timestamp in ms (i64), payload length (u32), all big-endian, then the payload bytes. The
/// next offset and the trim marker are in the `lakestream-next-offset` and
/// `lakestream-trim-marker` headers.
fn raw_entries(batch: &lakestream_service::api::ReadBatch) -> Response {
    let body = Chunks::of_entries(&batch.entries);
    let mut response = (StatusCode::OK, axum::body::Body::new(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(RAW_ENTRIES));
    headers.insert("lakestream-next-offset", HeaderValue::from(batch.next_offset));
    headers.insert("lakestream-trim-marker", HeaderValue::from(batch.trim_marker));
    response
}

/// A body of byte chunks of known total length, sent as they are: a fetch's large payloads
/// go out as the reader's own slices (vectored writes), not copied into one buffer first.
#[derive(Debug)]
struct Chunks {
    chunks: std::collections::VecDeque<Bytes>,
    left: u64,
}

impl Chunks {
    /// Payloads at least this large are sent as chunks of their own; smaller ones are copied
    /// next to their frame headers (a chunk per tiny payload would cost more than the copy).
    const OWN_CHUNK: usize = 16 << 10;

    /// The raw frames of `entries` (see [`raw_entries`]).
    fn of_entries(entries: &[lakestream_format::Entry]) -> Chunks {
        let mut chunks = std::collections::VecDeque::new();
        let mut pending = bytes::BytesMut::new();
        let mut left = 0u64;
        for e in entries {
            pending.extend_from_slice(&e.offset.to_be_bytes());
            pending.extend_from_slice(&e.record_count.to_be_bytes());
            pending.extend_from_slice(&e.timestamp_ms.to_be_bytes());
            pending.extend_from_slice(&u32::try_from(e.payload.len()).unwrap_or(u32::MAX).to_be_bytes());
            if e.payload.len() < Self::OWN_CHUNK {
                pending.extend_from_slice(&e.payload);
                continue;
            }
            let frames = pending.split().freeze();
            left += (frames.len() + e.payload.len()) as u64;
            chunks.push_back(frames);
            chunks.push_back(e.payload.clone());
        }
        if !pending.is_empty() {
            left += pending.len() as u64;
            chunks.push_back(pending.freeze());
        }
        Chunks { chunks, left }
    }
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let next = self.chunks.pop_front();
        if let Some(chunk) = &next {
            self.left -= chunk.len() as u64;
        }
        std::task::Poll::Ready(next.map(|chunk| Ok(http_body::Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.left)
    }
}

/// A read session as Server-Sent Events: one `entry` event per entry, pushed as entries are
/// appended, whose `id` is the offset after it, so that a client reconnecting with
/// `Last-Event-ID` (which EventSource sends by itself) resumes right after the last entry it
/// saw. The data is `{"offset", "record_count", "timestamp_ms", "payload_base64"}`. A failure
/// after the response started is an `error` event (`{"code", "message"}`), and the stream
/// ends. Comments keep an idle connection alive every 15 s.
async fn read_session(
    s: &AppState,
    caller: &Caller,
    target: PartitionRef<'_>,
    q: &FetchQuery,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    use axum::response::sse::{Event, KeepAlive, Sse};
    use futures::StreamExt as _;
    let offset = match headers.get("last-event-id") {
        None => q.offset,
        Some(v) => v.to_str().ok().and_then(|v| v.trim().parse().ok()).ok_or_else(|| {
            ApiError::invalid("Last-Event-ID: must be an offset (the id of the last event received)")
        })?,
    };
    let batches = s.api.read_session(caller, target, offset, q.max_bytes).await?;
    let events = batches
        .flat_map(|batch| {
            let events: Vec<Event> = match batch {
                Ok(batch) => batch
                    .entries
                    .iter()
                    .map(|e| {
                        let data = serde_json::json!({
                            "offset": e.offset,
                            "record_count": e.record_count,
                            "timestamp_ms": e.timestamp_ms,
                            "payload_base64": BASE64.encode(&e.payload),
                        });
                        Event::default()
                            .event("entry")
                            .id((e.offset + u64::from(e.record_count)).to_string())
                            .data(data.to_string())
                    })
                    .collect(),
                Err(e) => {
                    let data = serde_json::json!({ "code": e.code(), "message": e.message() });
                    vec![Event::default().event("error").data(data.to_string())]
                }
            };
            futures::stream::iter(events)
        })
        .map(Ok::<_, std::convert::Infallible>);
    Ok(Sse::new(events).keep_alive(KeepAlive::default()).into_response())
}

async fn offsets(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((ns, stream, p)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    let target = PartitionRef { namespace: &ns, stream: &stream, partition: partition(&p)? };
    let o = s.api.offsets(&caller, target).await?;
    Ok(ok(
        StatusCode::OK,
        serde_json::json!({ "first_offset": o.first_offset, "next_offset": o.next_offset, "trim_marker": o.trim_marker }),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommitBody {
    offset: u64,
    #[serde(default)]
    generation: u64,
    #[serde(default)]
    metadata: String,
}

fn committed_json(c: &lakestream_service::groups::CommittedOffset) -> serde_json::Value {
    serde_json::json!({
        "stream": c.stream,
        "partition": c.partition,
        "offset": c.offset,
        "generation": c.generation,
        "metadata": c.metadata,
        "committed_ms": c.committed_ms,
    })
}

async fn commit_offset(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((ns, group, stream, p)): Path<(String, String, String, String)>,
    Json(body): Json<CommitBody>,
) -> ApiResult<Response> {
    let target = PartitionRef { namespace: &ns, stream: &stream, partition: partition(&p)? };
    let commit = lakestream_service::groups::OffsetCommit {
        offset: body.offset,
        generation: body.generation,
        metadata: body.metadata,
    };
    let committed = s.api.commit_offset(&caller, &group, target, commit).await?;
    Ok(ok(StatusCode::OK, committed_json(&committed)))
}

async fn group_offsets(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((ns, group, stream)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    let partitions: Vec<_> = s
        .api
        .group_offsets(&caller, &ns, &group, &stream)
        .await?
        .iter()
        .map(|p| {
            serde_json::json!({
                "partition": p.partition,
                "committed": p.committed.as_ref().map(committed_json),
                "next_offset": p.next_offset,
                "lag": p.lag,
            })
        })
        .collect();
    Ok(ok(StatusCode::OK, serde_json::json!({ "group": group, "stream": stream, "partitions": partitions })))
}

async fn list_groups(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(ns): Path<String>,
    Query(q): Query<ListQuery>,
) -> ApiResult<Response> {
    let page = s.api.list_groups(&caller, &ns, q.after.as_deref(), q.limit).await?;
    Ok(ok(StatusCode::OK, serde_json::json!({ "groups": page.items, "next_page": page.next_page })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TrimBody {
    /// Trim through this offset, inclusive.
    through: u64,
}

async fn trim(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((ns, stream, p)): Path<(String, String, String)>,
    Json(body): Json<TrimBody>,
) -> ApiResult<Response> {
    let target = PartitionRef { namespace: &ns, stream: &stream, partition: partition(&p)? };
    let outcome = s.api.trim(&caller, target, body.through).await?;
    Ok(ok(StatusCode::OK, serde_json::json!({ "trim_marker": outcome.marker, "advanced": outcome.advanced })))
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;

    use super::*;

    /// Every route of the router maps to the operation its handler calls.
    #[test]
    fn routes_map_to_their_operations() {
        use axum::http::Method;
        let r = |m: Method, p: &str| operation_of(&m, p);
        assert_eq!(r(Method::GET, "/healthz"), None);
        assert_eq!(r(Method::GET, "/metrics"), None);
        assert_eq!(r(Method::POST, "/v1/namespaces"), Some(Operation::CreateNamespace));
        assert_eq!(r(Method::GET, "/v1/namespaces"), Some(Operation::ListNamespaces));
        assert_eq!(r(Method::DELETE, "/v1/namespaces/{ns}"), Some(Operation::DeleteNamespace));
        assert_eq!(r(Method::POST, "/v1/namespaces/{ns}/streams"), Some(Operation::CreateStream));
        assert_eq!(r(Method::GET, "/v1/namespaces/{ns}/streams"), Some(Operation::ListStreams));
        let stream = "/v1/namespaces/{ns}/streams/{stream}";
        assert_eq!(r(Method::GET, stream), Some(Operation::GetStream));
        assert_eq!(r(Method::PATCH, stream), Some(Operation::UpdateStream));
        assert_eq!(r(Method::DELETE, stream), Some(Operation::DropStream));
        assert_eq!(r(Method::POST, &format!("{stream}/partitions")), Some(Operation::AddPartitions));
        assert_eq!(r(Method::POST, &format!("{stream}/events")), Some(Operation::IngestEvents));
        let partition = format!("{stream}/partitions/{{p}}");
        assert_eq!(r(Method::POST, &format!("{partition}/entries")), Some(Operation::Produce));
        assert_eq!(r(Method::GET, &format!("{partition}/entries")), Some(Operation::Fetch));
        assert_eq!(r(Method::POST, &format!("{partition}/trim")), Some(Operation::Trim));
        assert_eq!(r(Method::GET, &format!("{partition}/offsets")), Some(Operation::Offsets));
        assert_eq!(r(Method::GET, &format!("{partition}/events")), Some(Operation::ConsumeEvents));
        assert_eq!(r(Method::GET, "/v1/namespaces/{ns}/groups"), Some(Operation::ListGroups));
        let group = "/v1/namespaces/{ns}/groups/{group}/streams/{stream}";
        assert_eq!(r(Method::GET, group), Some(Operation::GroupOffsets));
        assert_eq!(r(Method::PUT, &format!("{group}/partitions/{{p}}")), Some(Operation::CommitOffset));
    }

    /// Raw frames sent as chunks read back as the frames, whatever the payload sizes.
    #[tokio::test]
    async fn raw_frames_in_chunks_are_the_frames() {
        let sizes = [0usize, 5, Chunks::OWN_CHUNK - 1, Chunks::OWN_CHUNK, 100_000, 3];
        let entries: Vec<lakestream_format::Entry> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| lakestream_format::Entry {
                offset: 10 * i as u64,
                record_count: 2,
                timestamp_ms: -(i as i64),
                payload: Bytes::from(vec![i as u8; n]),
            })
            .collect();
        let mut expected = Vec::new();
        for e in &entries {
            expected.extend_from_slice(&e.offset.to_be_bytes());
            expected.extend_from_slice(&e.record_count.to_be_bytes());
            expected.extend_from_slice(&e.timestamp_ms.to_be_bytes());
            expected.extend_from_slice(&(e.payload.len() as u32).to_be_bytes());
            expected.extend_from_slice(&e.payload);
        }
        let body = Chunks::of_entries(&entries);
        assert_eq!(http_body::Body::size_hint(&body).exact(), Some(expected.len() as u64));
        assert_eq!(body.chunks.len(), 5, "small payloads beside their headers, large ones alone");
        assert_eq!(body.collect().await.unwrap().to_bytes(), Bytes::from(expected));
        assert_eq!(http_body::Body::size_hint(&Chunks::of_entries(&[])).exact(), Some(0));
    }
}
