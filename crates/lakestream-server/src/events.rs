//! CloudEvents over HTTP: the binding of the service's ingest and consume
//! ([`lakestream_service::events`], docs/cloudevents.md).
//!
//! | method | path | what |
//! |---|---|---|
//! | POST | `/v1/namespaces/{ns}/streams/{stream}/events[?partition=p]` | ingest: binary, structured or batched mode |
//! | GET | `…/streams/{stream}/partitions/{p}/events?offset=&max_bytes=&max_wait_ms=&mode=` | consume as CloudEvents |

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use lakestream_cloudevents::{CloudEvent, http as ce_http, json, proto};
use lakestream_service::Stack;
use lakestream_service::events::{
    Consumed, EventStatus, EventsError, IngestOutcome, NEXT_OFFSET_HEADER, OFFSETS_HEADER, consume, ingest,
};
use lakestream_service::metrics::Metrics;
use serde::Deserialize;

/// Decodes the events of an HTTP ingest request: binary mode (`ce-` headers), structured
/// mode or batched mode (JSON or protobuf event format). Refuses with
/// [`EventsError::UnsupportedMediaType`] a request with neither a `ce-specversion` header
/// nor a CloudEvents content type, or with an event format we do not read.
pub fn decode_request(headers: &HeaderMap, body: &[u8]) -> Result<Vec<CloudEvent>, EventsError> {
    let content_type =
        headers.get(header::CONTENT_TYPE).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let essence = content_type
        .as_deref()
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match ce_http::detect_mode(content_type.as_deref()) {
        ce_http::Mode::Batch => match essence.as_str() {
            json::BATCH_MEDIA_TYPE => Ok(json::decode_batch(body)?),
            proto::BATCH_MEDIA_TYPE => Ok(proto::decode_batch(body)?),
            other => Err(EventsError::UnsupportedMediaType(format!(
                "unsupported CloudEvents batch format {other:?}"
            ))),
        },
        ce_http::Mode::Structured => match essence.as_str() {
            json::MEDIA_TYPE => Ok(vec![json::decode_event(body)?]),
            proto::MEDIA_TYPE => Ok(vec![proto::decode_event(body)?]),
            other => Err(EventsError::UnsupportedMediaType(format!(
                "unsupported CloudEvents event format {other:?}"
            ))),
        },
        ce_http::Mode::Binary => {
            if !headers.contains_key("ce-specversion") {
                return Err(EventsError::UnsupportedMediaType(format!(
                    "not a CloudEvent: no ce-specversion header and content type {:?} is not application/cloudevents[-batch]+json",
                    content_type.unwrap_or_default()
                )));
            }
            let pairs: Vec<(&str, &[u8])> = headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())).collect();
            Ok(vec![ce_http::decode_binary(&pairs, body)?])
        }
    }
}

/// The events endpoints' state: the stack, the service's metrics and the longest fetch wait.
#[derive(Debug, Clone)]
struct EventsState {
    stack: Stack,
    metrics: Arc<Metrics>,
    max_fetch_wait: Duration,
}

/// The events routes over `api`, with their own state, to merge into the API's router before
/// its layers (so authorization and the body limit apply). `max_fetch_wait` bounds a
/// consume's `max_wait_ms`.
pub fn routes<S: Clone + Send + Sync + 'static>(
    api: &lakestream_service::Api,
    max_fetch_wait: Duration,
) -> Router<S> {
    let state = EventsState { stack: api.stack().clone(), metrics: api.metrics().clone(), max_fetch_wait };
    Router::new()
        .route("/v1/namespaces/{ns}/streams/{stream}/events", post(ingest_handler))
        .route("/v1/namespaces/{ns}/streams/{stream}/partitions/{p}/events", get(consume_handler))
        .with_state(state)
}

/// An error answer, in the API's shape `{"error": {"code", "message"[, "attribute"]}}`, with
/// the status of the API's one error table ([`lakestream_service::api::ErrorKind`]).
fn error_response(e: &EventsError) -> Response {
    let kind = e.kind();
    let mut error = serde_json::json!({ "code": kind.code(), "message": e.to_string() });
    if let EventsError::Event(ce) = e
        && let Some(attribute) = ce.attribute_name()
    {
        error["attribute"] = serde_json::Value::String(attribute.to_string());
    }
    let mut response =
        (kind.http_status(), axum::Json(serde_json::json!({ "error": error }))).into_response();
    if let Some(secs) = kind.retry_after_secs() {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IngestQuery {
    partition: Option<String>,
}

async fn ingest_handler(
    State(s): State<EventsState>,
    Path((ns, stream)): Path<(String, String)>,
    query: Result<Query<IngestQuery>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let run = async {
        let Query(query) = query.map_err(|e| EventsError::InvalidArgument(e.body_text()))?;
        let partition = query
            .partition
            .map(|p| {
                p.parse::<u32>().map_err(|_| {
                    EventsError::InvalidArgument(format!("partition: {p:?} is not a non-negative integer"))
                })
            })
            .transpose()?;
        let events = decode_request(&headers, &body)?;
        ingest(&s.stack, &ns, &stream, partition, events).await
    };
    match run.await {
        Ok(IngestOutcome::Done(results)) => {
            for result in &results {
                let counter = match result.status {
                    EventStatus::Appended => &s.metrics.events_ingested,
                    EventStatus::Duplicate => &s.metrics.events_duplicate,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
            (StatusCode::OK, axum::Json(serde_json::json!({ "events": results }))).into_response()
        }
        Ok(IngestOutcome::InFlight { index, retry_after }) => {
            // (`http_errors` counts the 409 in the request layer, like every error answer.)
            s.metrics.events_in_flight.fetch_add(1, Ordering::Relaxed);
            let body = serde_json::json!({ "error": {
                "code": "in_flight",
                "message": format!("event {index} of the request is being appended by another request; retry the whole request"),
                "index": index,
            }});
            let mut response = (StatusCode::CONFLICT, axum::Json(body)).into_response();
            let seconds = retry_after.as_secs().max(1).to_string();
            if let Ok(value) = HeaderValue::from_str(&seconds) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            response
        }
        Err(e) => error_response(&e),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsumeQuery {
    #[serde(default)]
    offset: u64,
    max_bytes: Option<usize>,
    #[serde(default)]
    max_wait_ms: u64,
    #[serde(default)]
    mode: ConsumeMode,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum ConsumeMode {
    #[default]
    Structured,
    Binary,
}

const DEFAULT_FETCH_BYTES: usize = 1 << 20;

async fn consume_handler(
    State(s): State<EventsState>,
    Path((ns, stream, p)): Path<(String, String, String)>,
    query: Result<Query<ConsumeQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let run = async {
        let Query(q) = query.map_err(|e| EventsError::InvalidArgument(e.body_text()))?;
        let partition: u32 = p.parse().map_err(|_| {
            EventsError::InvalidArgument(format!("partition {p:?} is not a non-negative integer"))
        })?;
        let wait = Duration::from_millis(q.max_wait_ms);
        if wait > s.max_fetch_wait {
            return Err(EventsError::InvalidArgument(format!(
                "max_wait_ms: at most {} ms",
                s.max_fetch_wait.as_millis()
            )));
        }
        let max_bytes = q.max_bytes.unwrap_or(DEFAULT_FETCH_BYTES);
        let consumed = consume(&s.stack, &ns, &stream, partition, q.offset, max_bytes, wait).await?;
        Ok((q.mode, consumed))
    };
    match run.await {
        Ok((ConsumeMode::Structured, consumed)) => structured_response(&consumed),
        Ok((ConsumeMode::Binary, consumed)) => {
            binary_response(&consumed).unwrap_or_else(|e| error_response(&e))
        }
        Err(e) => error_response(&e),
    }
}

fn structured_response(consumed: &Consumed) -> Response {
    let events: Vec<CloudEvent> = consumed.events.iter().map(|e| e.event.clone()).collect();
    let offsets: Vec<String> = consumed.events.iter().map(|e| e.offset.to_string()).collect();
    let mut response = (StatusCode::OK, json::encode_batch(&events)).into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(json::BATCH_MEDIA_TYPE));
    insert(h, NEXT_OFFSET_HEADER, &consumed.next_offset.to_string());
    insert(h, OFFSETS_HEADER, &offsets.join(","));
    response
}

/// One event as one binary-mode message; 204 with the next offset when there is none.
fn binary_response(consumed: &Consumed) -> Result<Response, EventsError> {
    let Some(first) = consumed.events.first() else {
        let mut response = StatusCode::NO_CONTENT.into_response();
        insert(response.headers_mut(), NEXT_OFFSET_HEADER, &consumed.next_offset.to_string());
        return Ok(response);
    };
    let (headers, body) = ce_http::encode_binary(&first.event);
    let mut response = (StatusCode::OK, body).into_response();
    let h = response.headers_mut();
    h.remove(header::CONTENT_TYPE);
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| {
            EventsError::InvalidArgument(format!("attribute {name}: not a valid header name ({e})"))
        })?;
        let value = HeaderValue::from_str(&value).map_err(|e| {
            EventsError::InvalidArgument(format!("attribute {name}: not a valid header value ({e})"))
        })?;
        h.append(name, value);
    }
    insert(h, NEXT_OFFSET_HEADER, &first.next_offset.to_string());
    insert(h, OFFSETS_HEADER, &first.offset.to_string());
    Ok(response)
}

fn insert(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(name, value);
    }
}
