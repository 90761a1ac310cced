//! The gRPC API, `lakestream.v1.Lakestream` (`proto/lakestream/v1/lakestream.proto`): the
//! same operations as the HTTP/JSON API, each a thin adapter over [`lakestream_service::api::Api`], so
//! the rules, limits, permissions and metrics are the HTTP API's.
//!
//! Every call:
//! - runs in a tracing span named by its `x-request-id` metadata (the client's, or a new one),
//!   which every response, success or failure, echoes;
//! - is checked against the bearer token in its `authorization` metadata when tokens are
//!   configured, with the HTTP API's per-namespace permissions, before anything runs;
//! - fails with the code [`lakestream_service::api::ErrorKind::grpc_code`] gives, the message naming what
//!   was wrong, `lakestream-error-code` metadata holding the stable code, and `retry-after`
//!   (seconds) on retryable `UNAVAILABLE`s;
//! - is counted in `lakestream_grpc_requests_total{method, code}` (the method's name, or
//!   `unknown` for a path that is not ours) and `lakestream_grpc_request_duration_seconds`, and
//!   a failure in `lakestream_grpc_errors_total`.
//!
//! A request message over `grpc.max_message_bytes` is refused by the transport before it is
//! decoded; [`serve`] turns tonic's `OUT_OF_RANGE` for it into `RESOURCE_EXHAUSTED`, the code
//! an over-large entry gets, so both limits answer alike.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Request, Response, Status};
use tracing::Instrument as _;

use crate::config::GrpcConfig;
use lakestream_service::api::{
    Api, ApiError, ApiResult, ErrorKind, FetchParams, PartitionRef, ProduceInput, REQUEST_ID,
};
use lakestream_service::auth::Caller;
use lakestream_service::metrics::Metrics;

pub mod codec;

/// Generated code, one module per protobuf package (the nesting lets the packages refer to
/// each other).
#[allow(missing_docs, clippy::all, clippy::pedantic, unreachable_pub)]
pub mod proto {
    /// `lakestream.*`
    pub mod lakestream {
        /// `lakestream.v1`: the API's messages, the server trait and the client.
        pub mod v1 {
            tonic::include_proto!("lakestream.v1");
        }
    }
    /// `io.*`
    pub mod io {
        /// `io.cloudevents.*`
        pub mod cloudevents {
            /// `io.cloudevents.v1`: the CloudEvents protobuf format.
            pub mod v1 {
                tonic::include_proto!("io.cloudevents.v1");
            }
        }
    }
}

use pb::lakestream_server::{Lakestream, LakestreamServer};
pub use proto::lakestream::v1 as pb;

/// The metadata key of the stable error code.
pub const ERROR_CODE: &str = "lakestream-error-code";

/// The encoded descriptor set of `lakestream.v1` and its imports, for server reflection.
const DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/lakestream_descriptor.bin"));

/// The metadata key of a failed conditional append's actual next offset.
pub const NEXT_OFFSET: &str = "lakestream-next-offset";

/// The gRPC service over the service layer.
#[derive(Debug, Clone)]
pub struct GrpcService {
    api: Api,
}

impl GrpcService {
    /// The service over `api`.
    pub fn new(api: Api) -> Self {
        GrpcService { api }
    }

    /// The tonic server for this service, refusing request messages over `max_message_bytes`.
    pub fn into_server(self, max_message_bytes: usize) -> LakestreamServer<Self> {
        LakestreamServer::new(self).max_decoding_message_size(max_message_bytes)
    }

    /// Runs one call: request id and span, admission of the caller (its token, its rate
    /// limit), then `f` with the caller, whose permission the operation checks; maps its error
    /// to a status.
    async fn call<T, R, Fut>(
        &self,
        method: &'static str,
        request: Request<T>,
        f: impl FnOnce(Api, Caller, T) -> Fut,
    ) -> Result<Response<R>, Status>
    where
        Fut: Future<Output = ApiResult<R>>,
    {
        // The edge layer has already put an id into the metadata; this only reads it.
        let id = lakestream_service::api::request_id(
            request.metadata().get(REQUEST_ID).and_then(|v| v.to_str().ok()),
        );
        let span = tracing::info_span!("grpc", id = %id, method);
        let authorization =
            request.metadata().get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let peer = request.extensions().get::<crate::listener::PeerAddr>().map(|p| p.0.ip());
        let message = request.into_inner();
        let api = self.api.clone();
        let result = async move {
            let caller = api.admit(authorization.as_deref(), peer)?;
            f(api, caller, message).await
        }
        .instrument(span.clone())
        .await;
        match result {
            Ok(reply) => Ok(Response::new(reply)),
            Err(e) => {
                span.in_scope(|| tracing::info!(code = e.code(), message = e.message(), "call failed"));
                Err(status_of(&e))
            }
        }
    }
}

/// The status of an error: its code and message, with the stable code and any retry hint in
/// the metadata.
pub fn status_of(e: &ApiError) -> Status {
    let mut metadata = MetadataMap::new();
    metadata.insert(ERROR_CODE, MetadataValue::from_static(e.code()));
    if let Some(secs) = e.retry_after_secs() {
        metadata.insert("retry-after", MetadataValue::from(secs));
    }
    if let Some(next) = e.next_offset() {
        metadata.insert(NEXT_OFFSET, MetadataValue::from(next));
    }
    Status::with_metadata(e.grpc_code(), e.message(), metadata)
}

/// How many requests of an append session may be in flight (handed to the writer and not yet
/// answered) at once.
pub const APPEND_SESSION_PIPELINE: usize = 64;

/// A produce request's input and conditions.
fn produce_parts(
    r: &pb::ProduceRequest,
) -> ApiResult<(ProduceInput, lakestream_service::api::ProduceOptions)> {
    let input = if r.kafka_batches {
        match &r.entries[..] {
            [e] => ProduceInput::KafkaBatches { payload: e.payload.clone(), record_count: e.record_count },
            _ => {
                return Err(ApiError::invalid(
                    "entries: with kafka_batches, give exactly one entry holding the batches",
                ));
            }
        }
    } else {
        ProduceInput::Entries(
            r.entries.iter().map(|e| (e.payload.clone(), e.record_count.unwrap_or(1))).collect(),
        )
    };
    let options = lakestream_service::api::ProduceOptions {
        expect_next_offset: r.expected_next_offset,
        producer: lakestream_service::api::producer_of(Some(&r.producer_id), r.producer_sequence)?,
    };
    Ok((input, options))
}

fn produce_response_of(outcomes: &[lakestream_service::api::EntryOutcome]) -> pb::ProduceResponse {
    use pb::produce_result::Result as Outcome;
    let results = outcomes
        .iter()
        .map(|o| pb::ProduceResult {
            result: Some(match o {
                Ok(ack) => Outcome::Appended(appended(ack)),
                Err(e) => Outcome::Error(pb::EntryError {
                    class: format!("{:?}", e.class),
                    message: e.error.message().to_owned(),
                    code: e.error.code().to_owned(),
                }),
            }),
        })
        .collect();
    pb::ProduceResponse { results }
}

fn fetch_response_of(batch: lakestream_service::api::ReadBatch) -> pb::FetchResponse {
    pb::FetchResponse {
        entries: batch
            .entries
            .into_iter()
            .map(|e| pb::Entry {
                offset: e.offset,
                record_count: e.record_count,
                timestamp_ms: e.timestamp_ms,
                payload: e.payload,
            })
            .collect(),
        next_offset: batch.next_offset,
        trim_marker: batch.trim_marker,
    }
}

fn committed_of(c: lakestream_service::groups::CommittedOffset) -> pb::CommittedOffset {
    pb::CommittedOffset {
        stream: c.stream,
        partition: u32::try_from(c.partition).unwrap_or(u32::MAX),
        offset: c.offset,
        generation: c.generation,
        metadata: c.metadata,
        committed_ms: c.committed_ms,
    }
}

fn stream_of(s: lakestream_service::api::Stream) -> pb::Stream {
    pb::Stream {
        partitions: u32::try_from(s.partition_count()).unwrap_or(u32::MAX),
        log_ids: s.logs.iter().map(|l| l.0).collect(),
        namespace: s.namespace,
        name: s.name,
        properties: s.properties.into_iter().collect(),
        created_ms: s.created_ms,
    }
}

fn namespace_of(n: lakestream_service::api::Namespace) -> pb::Namespace {
    pb::Namespace { name: n.name, properties: n.properties.into_iter().collect(), created_ms: n.created_ms }
}

fn appended(ack: &lakestream_service::api::AppendAck) -> pb::Appended {
    pb::Appended { offset: ack.offset, record_count: ack.record_count, timestamp_ms: ack.timestamp_ms }
}

fn limit(limit: Option<u32>) -> Option<usize> {
    limit.map(|l| l as usize)
}

#[tonic::async_trait]
impl Lakestream for GrpcService {
    async fn create_namespace(
        &self,
        request: Request<pb::CreateNamespaceRequest>,
    ) -> Result<Response<pb::Namespace>, Status> {
        self.call("CreateNamespace", request, |api, caller, r| async move {
            let created = api.create_namespace(&caller, &r.name, r.properties.into_iter().collect()).await?;
            Ok(namespace_of(created))
        })
        .await
    }

    async fn list_namespaces(
        &self,
        request: Request<pb::ListNamespacesRequest>,
    ) -> Result<Response<pb::ListNamespacesResponse>, Status> {
        self.call("ListNamespaces", request, |api, caller, r| async move {
            let page = api.list_namespaces(&caller, r.after.as_deref(), limit(r.limit)).await?;
            Ok(pb::ListNamespacesResponse {
                namespaces: page.items.into_iter().map(namespace_of).collect(),
                next_page: page.next_page,
            })
        })
        .await
    }

    async fn create_stream(
        &self,
        request: Request<pb::CreateStreamRequest>,
    ) -> Result<Response<pb::Stream>, Status> {
        self.call("CreateStream", request, |api, caller, r| async move {
            let properties = r.properties.into_iter().collect();
            Ok(stream_of(api.create_stream(&caller, &r.namespace, &r.name, r.partitions, properties).await?))
        })
        .await
    }

    async fn get_stream(
        &self,
        request: Request<pb::GetStreamRequest>,
    ) -> Result<Response<pb::Stream>, Status> {
        self.call("GetStream", request, |api, caller, r| async move {
            Ok(stream_of(api.get_stream(&caller, &r.namespace, &r.stream).await?))
        })
        .await
    }

    async fn list_streams(
        &self,
        request: Request<pb::ListStreamsRequest>,
    ) -> Result<Response<pb::ListStreamsResponse>, Status> {
        self.call("ListStreams", request, |api, caller, r| async move {
            let page = api.list_streams(&caller, &r.namespace, r.after.as_deref(), limit(r.limit)).await?;
            Ok(pb::ListStreamsResponse {
                streams: page.items.into_iter().map(stream_of).collect(),
                next_page: page.next_page,
            })
        })
        .await
    }

    async fn drop_stream(
        &self,
        request: Request<pb::DropStreamRequest>,
    ) -> Result<Response<pb::DropStreamResponse>, Status> {
        self.call("DropStream", request, |api, caller, r| async move {
            api.drop_stream(&caller, &r.namespace, &r.stream).await?;
            Ok(pb::DropStreamResponse {})
        })
        .await
    }

    async fn add_partitions(
        &self,
        request: Request<pb::AddPartitionsRequest>,
    ) -> Result<Response<pb::Stream>, Status> {
        use pb::add_partitions_request::Growth;
        self.call("AddPartitions", request, |api, caller, r| async move {
            let (to, by) = match r.growth {
                Some(Growth::To(to)) => (Some(to), None),
                Some(Growth::By(by)) => (None, Some(by)),
                None => (None, None),
            };
            Ok(stream_of(api.add_partitions(&caller, &r.namespace, &r.stream, to, by).await?))
        })
        .await
    }

    async fn produce(
        &self,
        request: Request<pb::ProduceRequest>,
    ) -> Result<Response<pb::ProduceResponse>, Status> {
        self.call("Produce", request, |api, caller, r| async move {
            let (input, options) = produce_parts(&r)?;
            let target =
                PartitionRef { namespace: &r.namespace, stream: &r.stream, partition: r.partition as usize };
            Ok(produce_response_of(&api.produce_with(&caller, target, input, options).await?))
        })
        .await
    }

    type AppendSessionStream =
        Pin<Box<dyn futures::Stream<Item = Result<pb::ProduceResponse, Status>> + Send + 'static>>;

    /// An append session: produce requests streamed in, answered in order, pipelined (see the
    /// proto). Each request is authorized for its namespace.
    async fn append_session(
        &self,
        request: Request<tonic::Streaming<pb::ProduceRequest>>,
    ) -> Result<Response<Self::AppendSessionStream>, Status> {
        use futures::StreamExt as _;
        let authorization =
            request.metadata().get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let peer = request.extensions().get::<crate::listener::PeerAddr>().map(|p| p.0.ip());
        let api = self.api.clone();
        let handed_over = request.into_inner().then(move |message| {
            let (api, authorization) = (api.clone(), authorization.clone());
            async move {
                let r = message.map_err(|s| {
                    ApiError::new(ErrorKind::InvalidArgument, format!("append session: {}", s.message()))
                })?;
                let caller = api.admit(authorization.as_deref(), peer)?;
                let (input, options) = produce_parts(&r)?;
                let target = PartitionRef {
                    namespace: &r.namespace,
                    stream: &r.stream,
                    partition: r.partition as usize,
                };
                api.produce_pipelined(&caller, target, input, options).await
            }
        });
        let answers = handed_over
            .map(|handed| async move {
                match handed {
                    Ok(outcomes) => outcomes.await,
                    Err(e) => Err(e),
                }
            })
            .buffered(APPEND_SESSION_PIPELINE)
            .map(|outcomes| outcomes.map(|o| produce_response_of(&o)).map_err(|e| status_of(&e)))
            // The session ends at its first failure: later requests may have been appended
            // already, and the client must know from where to resume.
            .scan(false, |failed, answer| {
                let end = *failed;
                *failed |= answer.is_err();
                futures::future::ready((!end).then_some(answer))
            });
        Ok(Response::new(Box::pin(answers)))
    }

    async fn fetch(&self, request: Request<pb::FetchRequest>) -> Result<Response<pb::FetchResponse>, Status> {
        self.call("Fetch", request, |api, caller, r| async move {
            let target =
                PartitionRef { namespace: &r.namespace, stream: &r.stream, partition: r.partition as usize };
            let params = FetchParams {
                offset: r.offset,
                // Larger than memory is the same as unbounded: the reader stops at what it has.
                max_bytes: r.max_bytes.map(|b| usize::try_from(b).unwrap_or(usize::MAX)),
                max_wait_ms: r.max_wait_ms,
            };
            Ok(fetch_response_of(api.fetch(&caller, target, params).await?))
        })
        .await
    }

    type ReadSessionStream =
        Pin<Box<dyn futures::Stream<Item = Result<pb::FetchResponse, Status>> + Send + 'static>>;

    async fn read_session(
        &self,
        request: Request<pb::ReadSessionRequest>,
    ) -> Result<Response<Self::ReadSessionStream>, Status> {
        use futures::StreamExt as _;
        self.call("ReadSession", request, |api, caller, r| async move {
            let target =
                PartitionRef { namespace: &r.namespace, stream: &r.stream, partition: r.partition as usize };
            let max_bytes = r.max_bytes.map(|b| usize::try_from(b).unwrap_or(usize::MAX));
            let batches = api.read_session(&caller, target, r.offset, max_bytes).await?;
            let responses = batches.map(|b| b.map(fetch_response_of).map_err(|e| status_of(&e)));
            Ok(Box::pin(responses) as Self::ReadSessionStream)
        })
        .await
    }

    async fn get_offsets(
        &self,
        request: Request<pb::GetOffsetsRequest>,
    ) -> Result<Response<pb::GetOffsetsResponse>, Status> {
        self.call("GetOffsets", request, |api, caller, r| async move {
            let target =
                PartitionRef { namespace: &r.namespace, stream: &r.stream, partition: r.partition as usize };
            let o = api.offsets(&caller, target).await?;
            Ok(pb::GetOffsetsResponse {
                first_offset: o.first_offset,
                next_offset: o.next_offset,
                trim_marker: o.trim_marker,
            })
        })
        .await
    }

    async fn commit_offset(
        &self,
        request: Request<pb::CommitOffsetRequest>,
    ) -> Result<Response<pb::CommittedOffset>, Status> {
        self.call("CommitOffset", request, |api, caller, r| async move {
            let target =
                PartitionRef { namespace: &r.namespace, stream: &r.stream, partition: r.partition as usize };
            let commit = lakestream_service::groups::OffsetCommit {
                offset: r.offset,
                generation: r.generation,
                metadata: r.metadata,
            };
            Ok(committed_of(api.commit_offset(&caller, &r.group, target, commit).await?))
        })
        .await
    }

    async fn get_group_offsets(
        &self,
        request: Request<pb::GetGroupOffsetsRequest>,
    ) -> Result<Response<pb::GetGroupOffsetsResponse>, Status> {
        self.call("GetGroupOffsets", request, |api, caller, r| async move {
            let partitions = api
                .group_offsets(&caller, &r.namespace, &r.group, &r.stream)
                .await?
                .into_iter()
                .map(|p| pb::PartitionLag {
                    partition: u32::try_from(p.partition).unwrap_or(u32::MAX),
                    committed: p.committed.map(committed_of),
                    next_offset: p.next_offset,
                    lag: p.lag,
                })
                .collect();
            Ok(pb::GetGroupOffsetsResponse { partitions })
        })
        .await
    }

    async fn list_groups(
        &self,
        request: Request<pb::ListGroupsRequest>,
    ) -> Result<Response<pb::ListGroupsResponse>, Status> {
        self.call("ListGroups", request, |api, caller, r| async move {
            let page = api.list_groups(&caller, &r.namespace, r.after.as_deref(), limit(r.limit)).await?;
            Ok(pb::ListGroupsResponse { groups: page.items, next_page: page.next_page })
        })
        .await
    }

    async fn trim(&self, request: Request<pb::TrimRequest>) -> Result<Response<pb::TrimResponse>, Status> {
        self.call("Trim", request, |api, caller, r| async move {
            let target =
                PartitionRef { namespace: &r.namespace, stream: &r.stream, partition: r.partition as usize };
            let outcome = api.trim(&caller, target, r.through).await?;
            Ok(pb::TrimResponse { trim_marker: outcome.marker, advanced: outcome.advanced })
        })
        .await
    }

    async fn produce_cloud_events(
        &self,
        request: Request<pb::ProduceCloudEventsRequest>,
    ) -> Result<Response<pb::ProduceCloudEventsResponse>, Status> {
        use pb::produce_cloud_events_request::Events;
        self.call("ProduceCloudEvents", request, |api, caller, r| async move {
            // Both forms go through the codec crate's validation, which names the attribute.
            let events = match &r.events {
                Some(Events::Batch(batch)) => {
                    lakestream_cloudevents::proto::decode_batch(&prost::Message::encode_to_vec(batch))
                }
                Some(Events::JsonBatch(json)) => lakestream_cloudevents::json::decode_batch(json),
                None => return Err(ApiError::invalid("events: give `batch` or `json_batch`")),
            }
            .map_err(|e| ApiError::invalid(format!("events: {e}")))?;
            let results = api.ingest_events(&caller, &r.namespace, &r.stream, r.partition, events).await?;
            Ok(pb::ProduceCloudEventsResponse {
                results: results.into_iter().map(cloud_event_result).collect(),
            })
        })
        .await
    }
}

/// One event's answer: where it was appended, or where its first copy was.
fn cloud_event_result(r: lakestream_service::events::EventResult) -> pb::CloudEventResult {
    pb::CloudEventResult {
        duplicate: r.status == lakestream_service::events::EventStatus::Duplicate,
        id: r.id,
        source: r.source,
        partition: r.partition,
        offset: r.offset,
    }
}

/// Serves the gRPC API of `api` on `listener` (over TLS when `tls` is given) until
/// `shutdown` resolves; in-flight calls finish first.
pub async fn serve(
    listener: tokio::net::TcpListener,
    api: Api,
    config: &GrpcConfig,
    limits: &crate::listener::ListenerConfig,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send,
) {
    let metrics = api.metrics().clone();
    let stats = metrics.grpc_connections.clone();
    // The standard health service (`grpc.health.v1`, for grpc_health_probe and load
    // balancers): SERVING for the whole server ("") and for the Lakestream service.
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<pb::lakestream_server::LakestreamServer<GrpcService>>().await;
    // Server reflection (`grpc.reflection.v1` and `v1alpha`), so grpcurl needs no .proto files.
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(DESCRIPTOR_SET)
        .build_v1();
    let reflection_alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(DESCRIPTOR_SET)
        .build_v1alpha();
    let mut routes = tonic::service::Routes::new(GrpcService::new(api).into_server(config.max_message_bytes))
        .add_service(health_service);
    match (reflection, reflection_alpha) {
        (Ok(v1), Ok(v1alpha)) => routes = routes.add_service(v1).add_service(v1alpha),
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(error = %e, "gRPC reflection is not served: its descriptor set is invalid")
        }
    }
    let edge = Edge { inner: routes, metrics };
    crate::listener::serve_connections(listener, tls, edge, limits, stats, shutdown).await
}

/// The layer every call passes: assigns the request id before the service sees the call and
/// echoes it on every response, counts calls and failures, and gives an over-large request
/// message `RESOURCE_EXHAUSTED` (tonic answers `OUT_OF_RANGE` before any handler runs).
#[derive(Debug, Clone)]
struct Edge<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

type HttpResponse = axum::http::Response<tonic::body::Body>;

impl<S, B> tower::Service<axum::http::Request<B>> for Edge<S>
where
    S: tower::Service<axum::http::Request<B>, Response = HttpResponse> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = HttpResponse;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: axum::http::Request<B>) -> Self::Future {
        let id = lakestream_service::api::request_id(
            request.headers().get(REQUEST_ID).and_then(|v| v.to_str().ok()),
        );
        let id = axum::http::HeaderValue::from_str(&id).ok();
        if let Some(id) = &id {
            request.headers_mut().insert(REQUEST_ID, id.clone());
        }
        let metrics = self.metrics.clone();
        let method = lakestream_service::metrics::GrpcRequestMetrics::method_of(request.uri().path());
        let started = std::time::Instant::now();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let mut response = answer.await?;
            // A failed unary call answers with its status in the headers (trailers-only).
            if let Some(status) = response.extensions().get::<Status>() {
                if status.code() == tonic::Code::OutOfRange
                    && status.message().contains("message length too large")
                {
                    let e = ApiError::new(ErrorKind::TooLarge, format!("request: {}", status.message()));
                    response = status_of(&e).into_http();
                }
                if response.extensions().get::<Status>().is_some_and(|s| s.code() != tonic::Code::Ok) {
                    metrics.grpc_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            // A unary call that succeeded carries its OK in the trailers, after the message.
            let code = response.extensions().get::<Status>().map_or(tonic::Code::Ok, Status::code);
            metrics.grpc_requests.observe(method, code, started.elapsed());
            if let Some(id) = id {
                response.headers_mut().insert(REQUEST_ID, id);
            }
            Ok(response)
        })
    }
}
