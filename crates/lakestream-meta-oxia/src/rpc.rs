//! gRPC plumbing: method paths built from the configured service name, the metadata a
//! `WriteStream` needs, channels to servers, and typed calls through `tonic::client::Grpc`.
//!
//! tonic's generated clients hard-code `/package.Service/Method`. Oxia serves the same
//! messages under two service names (oxia.md §2), so the path is built at runtime from
//! [`crate::OxiaConfig::service_name`]: switching to `io.oxia.proto.v1.OxiaClient` is a
//! configuration change.

use std::time::Duration;

use futures::Stream;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Streaming};

use crate::config::OxiaConfig;
use crate::errors::{OxiaError, OxiaErrorKind};
use crate::proto::oxia::{WriteRequest, WriteResponse};
use crate::routing::ShardId;

/// HTTP/2 keep-alive ping interval: the server closes connections that ping more often than
/// every 5 s (oxia.md §13).
const HTTP2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// How long to wait for a keep-alive ping's answer.
const HTTP2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// How many reset streams a connection remembers (h2's default: 10).
const MAX_REMEMBERED_RESET_STREAMS: usize = 65_536;
/// How long a reset stream is remembered (h2's default: 30 s).
const RESET_STREAM_MEMORY: Duration = Duration::from_secs(60);

/// The metadata key carrying the shard id on a `WriteStream` (oxia.md §6).
pub const SHARD_ID_HEADER: &str = "shard-id";
/// The metadata key carrying the namespace on a `WriteStream` (oxia.md §6).
pub const NAMESPACE_HEADER: &str = "namespace";

/// The Oxia methods the client calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Server-streaming shard assignments.
    GetShardAssignments,
    /// Bidirectional ordered writes.
    WriteStream,
    /// Server-streaming reads.
    Read,
    /// Server-streaming key lists.
    List,
    /// Server-streaming record scans.
    RangeScan,
    /// Unary session creation.
    CreateSession,
    /// Unary session heartbeat.
    KeepAlive,
    /// Unary session close.
    CloseSession,
}

impl Method {
    /// The method's name in the service.
    pub fn name(self) -> &'static str {
        match self {
            Method::GetShardAssignments => "GetShardAssignments",
            Method::WriteStream => "WriteStream",
            Method::Read => "Read",
            Method::List => "List",
            Method::RangeScan => "RangeScan",
            Method::CreateSession => "CreateSession",
            Method::KeepAlive => "KeepAlive",
            Method::CloseSession => "CloseSession",
        }
    }
}

/// `/{service}/{method}` for a configured service name.
pub fn method_path(service_name: &str, method: Method) -> Result<PathAndQuery, OxiaError> {
    let path = format!("/{service_name}/{}", method.name());
    PathAndQuery::try_from(path.as_str())
        .map_err(|e| OxiaError::new(OxiaErrorKind::InvalidArgument, format!("bad gRPC path {path}: {e}")))
}

/// The metadata a `WriteStream` must carry, each key exactly once (oxia.md §6): the shard id
/// in ASCII decimal and the namespace.
pub fn write_stream_metadata(shard: ShardId, namespace: &str) -> Result<MetadataMap, OxiaError> {
    let mut metadata = MetadataMap::new();
    set_write_stream_metadata(&mut metadata, shard, namespace)?;
    Ok(metadata)
}

fn set_write_stream_metadata(
    metadata: &mut MetadataMap,
    shard: ShardId,
    namespace: &str,
) -> Result<(), OxiaError> {
    let not_ascii =
        || OxiaError::new(OxiaErrorKind::InvalidArgument, format!("namespace {namespace:?} is not ASCII"));
    // HTTP header values admit bytes above 0x7F; gRPC ASCII metadata does not.
    if !namespace.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(not_ascii());
    }
    let namespace = AsciiMetadataValue::try_from(namespace).map_err(|_| not_ascii())?;
    // `insert` replaces any earlier value: each key ends up present once.
    metadata.insert(SHARD_ID_HEADER, AsciiMetadataValue::from(shard));
    metadata.insert(NAMESPACE_HEADER, namespace);
    Ok(())
}

/// The `authorization` value for a bearer token.
pub fn bearer_value(token: &str) -> Result<AsciiMetadataValue, OxiaError> {
    AsciiMetadataValue::try_from(format!("Bearer {token}"))
        .map_err(|_| OxiaError::new(OxiaErrorKind::InvalidArgument, "the bearer token is not ASCII"))
}

/// A lazily-connecting channel to `address` (`host:port`) with the configured transport
/// settings. `:authority` is the address itself, as Oxia expects (oxia.md §5.4).
pub fn channel(address: &str, config: &OxiaConfig) -> Result<Channel, OxiaError> {
    let scheme = if config.tls.is_some() { "https" } else { "http" };
    let uri = format!("{scheme}://{address}");
    let bad_address = |e: &dyn std::fmt::Display| {
        OxiaError::new(OxiaErrorKind::InvalidArgument, format!("cannot dial {uri}: {e}"))
    };
    let endpoint = Endpoint::from_shared(uri.clone())
        .map_err(|e| bad_address(&e))?
        .connect_timeout(config.connect_timeout)
        .http2_keep_alive_interval(HTTP2_KEEPALIVE_INTERVAL)
        .keep_alive_timeout(HTTP2_KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
        // Reads stop server-streaming calls early (a scan with a limit, a timeout), which
        // resets their HTTP/2 streams. h2 remembers only 10 reset streams by default; a frame
        // the server already sent on a forgotten one counts as a protocol error, and 1024 of
        // those close the connection (`too_many_internal_resets`). Remember enough of them
        // for as long as the server may still be sending.
        .http2_max_concurrent_reset_streams(MAX_REMEMBERED_RESET_STREAMS)
        .http2_reset_stream_duration(RESET_STREAM_MEMORY)
        .tcp_nodelay(true);
    #[cfg(feature = "tls")]
    let endpoint = match &config.tls {
        Some(tls) => {
            let mut settings = tonic::transport::ClientTlsConfig::new().with_webpki_roots();
            if let Some(pem) = &tls.ca_certificate_pem {
                settings = settings.ca_certificate(tonic::transport::Certificate::from_pem(pem));
            }
            if let Some(domain) = &tls.domain_name {
                settings = settings.domain_name(domain.clone());
            }
            endpoint.tls_config(settings).map_err(|e| bad_address(&e))?
        }
        None => endpoint,
    };
    Ok(endpoint.connect_lazy())
}

/// Typed calls on one server connection.
#[derive(Debug, Clone)]
pub struct Rpc {
    channel: Channel,
    service_name: String,
    bearer: Option<AsciiMetadataValue>,
    max_decoding_message_size: usize,
}

impl Rpc {
    /// Calls over `channel` with the configured service name, token and decode limit.
    pub fn new(channel: Channel, config: &OxiaConfig) -> Result<Self, OxiaError> {
        let bearer = config.bearer_token.as_deref().map(bearer_value).transpose()?;
        Ok(Self {
            channel,
            service_name: config.service_name.clone(),
            bearer,
            max_decoding_message_size: config.max_decoding_message_size,
        })
    }

    fn request<T>(&self, message: T, timeout: Option<Duration>) -> Request<T> {
        let mut request = Request::new(message);
        if let Some(bearer) = &self.bearer {
            request.metadata_mut().insert("authorization", bearer.clone());
        }
        if let Some(timeout) = timeout {
            request.set_timeout(timeout);
        }
        request
    }

    /// A client on the connection once it is ready to send. An error here means nothing was
    /// sent.
    pub async fn ready(&self) -> Result<tonic::client::Grpc<Channel>, OxiaError> {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone())
            .max_decoding_message_size(self.max_decoding_message_size)
            .max_encoding_message_size(self.max_decoding_message_size);
        grpc.ready()
            .await
            .map_err(|e| OxiaError::new(OxiaErrorKind::Transport, format!("connection not ready: {e}")))?;
        Ok(grpc)
    }

    /// A unary call; `timeout` bounds it on the server and the client.
    pub async fn unary<Req, Resp>(
        &self,
        method: Method,
        message: Req,
        timeout: Duration,
    ) -> Result<Resp, OxiaError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let path = method_path(&self.service_name, method)?;
        let call = async {
            let mut grpc = self.ready().await?;
            let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
            grpc.unary(self.request(message, Some(timeout)), path, codec)
                .await
                .map(tonic::Response::into_inner)
                .map_err(|status| OxiaError::from_status(&status))
        };
        with_timeout(timeout, method, call).await
    }

    /// Opens a server-streaming call. `timeout`, if any, bounds the whole call on the server.
    pub async fn server_streaming<Req, Resp>(
        &self,
        method: Method,
        message: Req,
        timeout: Option<Duration>,
    ) -> Result<Streaming<Resp>, OxiaError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let path = method_path(&self.service_name, method)?;
        let mut grpc = self.ready().await?;
        let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
        grpc.server_streaming(self.request(message, timeout), path, codec)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| OxiaError::from_status(&status))
    }

    /// Opens the `WriteStream` of `shard` on a [`Rpc::ready`] client, sending the requests
    /// `requests` yields.
    pub async fn write_stream<S>(
        &self,
        mut grpc: tonic::client::Grpc<Channel>,
        shard: ShardId,
        namespace: &str,
        requests: S,
    ) -> Result<Streaming<WriteResponse>, OxiaError>
    where
        S: Stream<Item = WriteRequest> + Send + 'static,
    {
        let path = method_path(&self.service_name, Method::WriteStream)?;
        let mut request = self.request(requests, None);
        set_write_stream_metadata(request.metadata_mut(), shard, namespace)?;
        let codec = tonic_prost::ProstCodec::<WriteRequest, WriteResponse>::default();
        grpc.streaming(request, path, codec)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| OxiaError::from_status(&status))
    }
}

/// Bounds `call` by `timeout` on the client side too (the server may never answer).
pub async fn with_timeout<T>(
    timeout: Duration,
    method: Method,
    call: impl Future<Output = Result<T, OxiaError>>,
) -> Result<T, OxiaError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result,
        Err(_) => Err(OxiaError::new(
            OxiaErrorKind::DeadlineExceeded,
            format!("{} took longer than {timeout:?}", method.name()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DEFAULT_SERVICE_NAME, LEGACY_SERVICE_NAME, V1_SERVICE_NAME};

    #[test]
    fn paths_follow_the_configured_service_name() {
        let path = method_path(LEGACY_SERVICE_NAME, Method::WriteStream).expect("valid");
        assert_eq!(path.as_str(), "/io.streamnative.oxia.proto.OxiaClient/WriteStream");
        assert_eq!(DEFAULT_SERVICE_NAME, V1_SERVICE_NAME, "the v1 name is the default");
        let path = method_path(V1_SERVICE_NAME, Method::GetShardAssignments).expect("valid");
        assert_eq!(path.as_str(), "/io.oxia.proto.v1.OxiaClient/GetShardAssignments");
        let all = [
            Method::GetShardAssignments,
            Method::WriteStream,
            Method::Read,
            Method::List,
            Method::RangeScan,
            Method::CreateSession,
            Method::KeepAlive,
            Method::CloseSession,
        ];
        for method in all {
            let path = method_path("a.B", method).expect("valid");
            assert_eq!(path.as_str(), format!("/a.B/{}", method.name()));
        }
    }

    /// oxia.md §6: the stream carries `shard-id` (ASCII decimal) and `namespace`, each exactly
    /// once.
    #[test]
    fn write_stream_metadata_has_each_header_exactly_once() {
        let metadata = write_stream_metadata(12, "default").expect("valid");
        let headers = metadata.into_headers();
        assert_eq!(headers.get_all(SHARD_ID_HEADER).iter().collect::<Vec<_>>(), ["12"]);
        assert_eq!(headers.get_all(NAMESPACE_HEADER).iter().collect::<Vec<_>>(), ["default"]);
        assert_eq!(headers.len(), 2);
        assert!(write_stream_metadata(0, "naïve").is_err());
    }

    #[test]
    fn bearer_token_header() {
        assert_eq!(bearer_value("abc").expect("ascii").to_str().ok(), Some("Bearer abc"));
        assert!(bearer_value("ab\nc").is_err());
    }

    #[tokio::test]
    async fn channels_are_lazy_and_reject_bad_addresses() {
        let config = OxiaConfig::new(["127.0.0.1:6648"]);
        assert!(channel("127.0.0.1:1", &config).is_ok());
        assert!(channel("bad host:1", &config).is_err());
    }
}
