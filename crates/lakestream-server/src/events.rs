//! CloudEvents over HTTP: the binding of the service's ingest and consume
//! ([`lakestream_service::events`], docs/cloudevents.md).
//!
//! | method | path | what |
//! |---|---|---|
//! | POST | `/v1/namespaces/{ns}/streams/{stream}/events[?partition=p]` | ingest: binary, structured or batched mode |
//! | GET | `…/streams/{stream}/partitions/{p}/events?offset=&max_bytes=&max_wait_ms=&mode=` | consume as CloudEvents |

use axum::Router;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use lakestream_cloudevents::{CloudEvent, http as ce_http, json, proto};
use lakestream_service::api::{ApiError, ErrorKind, FetchParams, PartitionRef};
use lakestream_service::auth::Caller;
use lakestream_service::events::{Consumed, NEXT_OFFSET_HEADER, OFFSETS_HEADER};
use serde::Deserialize;

use crate::http::{AppState, HttpError};

/// Decodes the events of an HTTP ingest request: binary mode (`ce-` headers), structured
/// mode or batched mode (JSON or protobuf event format). Refuses with
/// [`ErrorKind::UnsupportedMediaType`] a request with neither a `ce-specversion` header nor a
/// CloudEvents content type, or with an event format we do not read.
pub fn decode_request(headers: &HeaderMap, body: &[u8]) -> Result<Vec<CloudEvent>, ApiError> {
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
            other => Err(unsupported(format!("unsupported CloudEvents batch format {other:?}"))),
        },
        ce_http::Mode::Structured => match essence.as_str() {
            json::MEDIA_TYPE => Ok(vec![json::decode_event(body)?]),
            proto::MEDIA_TYPE => Ok(vec![proto::decode_event(body)?]),
            other => Err(unsupported(format!("unsupported CloudEvents event format {other:?}"))),
        },
        ce_http::Mode::Binary => {
            if !headers.contains_key("ce-specversion") {
                return Err(unsupported(format!(
                    "not a CloudEvent: no ce-specversion header and content type {:?} is not application/cloudevents[-batch]+json",
                    content_type.unwrap_or_default()
                )));
            }
            let pairs: Vec<(&str, &[u8])> = headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())).collect();
            Ok(vec![ce_http::decode_binary(&pairs, body)?])
        }
    }
}

fn unsupported(message: String) -> ApiError {
    ApiError::new(ErrorKind::UnsupportedMediaType, message)
}

/// The events routes, to merge into the API's router before its layers (so authorization and
/// the body limit apply).
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/namespaces/{ns}/streams/{stream}/events", post(ingest_handler))
        .route("/v1/namespaces/{ns}/streams/{stream}/partitions/{p}/events", get(consume_handler))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IngestQuery {
    partition: Option<String>,
}

async fn ingest_handler(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((ns, stream)): Path<(String, String)>,
    query: Result<Query<IngestQuery>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, HttpError> {
    let Query(query) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let partition = query
        .partition
        .map(|p| {
            p.parse::<u32>()
                .map_err(|_| ApiError::invalid(format!("partition: {p:?} is not a non-negative integer")))
        })
        .transpose()?;
    let events = decode_request(&headers, &body)?;
    let results = s.api().ingest_events(&caller, &ns, &stream, partition, events).await?;
    Ok((StatusCode::OK, axum::Json(serde_json::json!({ "events": results }))).into_response())
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

async fn consume_handler(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((ns, stream, p)): Path<(String, String, String)>,
    query: Result<Query<ConsumeQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, HttpError> {
    let Query(q) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let partition: usize =
        p.parse().map_err(|_| ApiError::invalid(format!("partition {p:?} is not a non-negative integer")))?;
    let target = PartitionRef { namespace: &ns, stream: &stream, partition };
    let params = FetchParams { offset: q.offset, max_bytes: q.max_bytes, max_wait_ms: q.max_wait_ms };
    let consumed = s.api().consume_events(&caller, target, params).await?;
    Ok(match q.mode {
        ConsumeMode::Structured => structured_response(&consumed),
        ConsumeMode::Binary => binary_response(&consumed)?,
    })
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
fn binary_response(consumed: &Consumed) -> Result<Response, ApiError> {
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
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| ApiError::invalid(format!("attribute {name}: not a valid header name ({e})")))?;
        let value = HeaderValue::from_str(&value)
            .map_err(|e| ApiError::invalid(format!("attribute {name}: not a valid header value ({e})")))?;
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
