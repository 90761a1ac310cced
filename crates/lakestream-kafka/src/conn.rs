//! Connections: framing, request headers and dispatch.
//!
//! A frame is a 4-byte big-endian size and that many bytes. A connection processes up to
//! [`MAX_IN_FLIGHT`] requests at once and answers them in request order, keeping each
//! partition's appends in request order too (`crate::appends`); it is closed, with nothing
//! answered (after the requests before it), on a frame whose size is negative or above
//! `kafka.max_request_bytes`, on an unknown API key, on a version of an API other than
//! ApiVersions that is not served, and on a request that does not decode. An ApiVersions
//! request of a version above the served ones gets a version-0 answer with
//! `UNSUPPORTED_VERSION` and the served versions, so that the client can retry with one.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures::StreamExt as _;
use futures::stream::FuturesOrdered;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, decode_request_header_from_buffer};
use lakestream_service::api::Api;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, info, warn};

use crate::appends::PartitionQueues;
use crate::handlers::{self, Handler};
use crate::{Settings, Shared};

/// Accepts connections until `shutdown` resolves, then waits for them to finish.
pub(crate) async fn serve(
    listener: TcpListener,
    api: Api,
    settings: Arc<Settings>,
    shared: Arc<Shared>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let (stop, stopped) = watch::channel(false);
    let signal = tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    let mut connections = tokio::task::JoinSet::new();
    let mut stopping = stopped.clone();
    loop {
        tokio::select! {
            _ = until_stopped(&mut stopping) => break,
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    let _ = socket.set_nodelay(true);
                    let handler = Handler::new(api.clone(), settings.clone(), shared.clone(), peer);
                    connections.spawn(connection(socket, peer, handler, stopped.clone()));
                }
                Err(e) => {
                    // Out of file descriptors and the like: pause rather than spin.
                    warn!(error = %e, "Kafka listener: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
    signal.abort();
}

/// Resolves once `stop` says so (the guard `wait_for` returns is not `Send`: drop it here).
async fn until_stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Why a connection is closed.
#[derive(Debug)]
enum Close {
    /// The peer closed it, or the service is stopping.
    Done,
    /// A protocol violation, with what was wrong.
    Violation(String),
    /// A socket error.
    Io(std::io::Error),
}

impl From<std::io::Error> for Close {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::UnexpectedEof { Close::Done } else { Close::Io(e) }
    }
}

/// How many requests of one connection are processed at once, and how many of their bytes;
/// the responses still go out in request order. Kafka's broker takes one at a time, which
/// costs it little as its appends take well under a millisecond; an append here waits for an
/// object-store PUT, so a client pipelining small produce requests (librdkafka, the Java
/// client) needs many in flight, which `crate::appends` then commits in groups.
const MAX_IN_FLIGHT: usize = 1024;
/// See [`MAX_IN_FLIGHT`]; one larger request is still taken when none is in flight.
const MAX_IN_FLIGHT_BYTES: usize = 64 << 20;

/// A request being processed: its response frame, `None` when none is due (acks=0), or why
/// the connection must close.
type Pending = Pin<Box<dyn Future<Output = Result<Option<Bytes>, Close>> + Send>>;

/// Frames from the reading half, or why reading stopped.
async fn read_frames(
    mut socket: OwnedReadHalf,
    max_request_bytes: usize,
    frames: mpsc::Sender<Result<Bytes, Close>>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let size = tokio::select! {
            _ = until_stopped(&mut stopped) => return,
            size = socket.read_i32() => match size {
                Ok(size) => size,
                Err(e) => {
                    let _ = frames.send(Err(Close::from(e))).await;
                    return;
                }
            },
        };
        if size < 0 || size as usize > max_request_bytes {
            let _ = frames
                .send(Err(Close::Violation(format!(
                    "request frame of {size} bytes (the largest accepted is kafka.max_request_bytes = {max_request_bytes})"
                ))))
                .await;
            return;
        }
        let mut frame = BytesMut::zeroed(size as usize);
        if let Err(e) = socket.read_exact(&mut frame).await {
            let _ = frames.send(Err(Close::from(e))).await;
            return;
        }
        if frames.send(Ok(frame.freeze())).await.is_err() {
            return;
        }
    }
}

async fn connection(socket: TcpStream, peer: SocketAddr, handler: Handler, stopped: watch::Receiver<bool>) {
    debug!(%peer, "Kafka connection opened");
    let (read_half, mut write_half) = socket.into_split();
    let (frames_tx, mut frames) = mpsc::channel(64);
    let reader = tokio::spawn(read_frames(read_half, handler.settings.max_request_bytes, frames_tx, stopped));
    let mut order = Order::default();
    let mut in_flight: FuturesOrdered<Pending> = FuturesOrdered::new();
    // The frame size of each request in flight, in request order, and their sum.
    let mut sizes: std::collections::VecDeque<usize> = std::collections::VecDeque::new();
    let mut in_flight_bytes = 0usize;
    // Set once no more requests are taken: the peer closed, the service is stopping, or a
    // request broke the protocol (then the connection closes once the requests before it
    // are answered, as a broker taking one request at a time would have answered them).
    let mut reading = true;
    let mut closing = Close::Done;
    let outcome = loop {
        tokio::select! {
            biased;
            Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                in_flight_bytes -= sizes.pop_front().unwrap_or(0);
                match done {
                    Ok(Some(response)) => {
                        if let Err(e) = write_half.write_all(&response).await {
                            break Close::from(e);
                        }
                    }
                    Ok(None) => {} // acks=0: no response
                    Err(close) => break close,
                }
            }
            frame = frames.recv(), if reading
                && in_flight.len() < MAX_IN_FLIGHT
                && (in_flight_bytes < MAX_IN_FLIGHT_BYTES || in_flight.is_empty()) =>
            {
                match frame {
                    Some(Ok(frame)) => {
                        let size = frame.len();
                        match prepare(&handler, frame, &mut order) {
                            Ok(pending) => {
                                in_flight.push_back(pending);
                                sizes.push_back(size);
                                in_flight_bytes += size;
                            }
                            Err(close) => {
                                reading = false;
                                closing = close;
                            }
                        }
                    }
                    Some(Err(close)) => {
                        reading = false;
                        closing = close;
                    }
                    None => reading = false,
                }
            }
            else => break std::mem::replace(&mut closing, Close::Done),
        }
    };
    reader.abort();
    match outcome {
        Close::Done => debug!(%peer, "Kafka connection closed"),
        Close::Violation(why) => info!(%peer, %why, "closing a Kafka connection: protocol violation"),
        Close::Io(e) => debug!(%peer, error = %e, "Kafka connection failed"),
    }
    let _ = write_half.shutdown().await;
}

/// The served version range of each API, in ApiVersions order.
pub(crate) const SERVED: [(ApiKey, i16, i16); 18] = [
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::CreatePartitions, 0, 3),
];

fn served_range(key: ApiKey) -> Option<(i16, i16)> {
    SERVED.iter().find(|(k, _, _)| *k == key).map(|&(_, lo, hi)| (lo, hi))
}

/// Decodes one request frame and starts its processing, or says why the connection must
/// close.
/// What keeps a connection's requests in order while they are processed at once: produce
/// batches are queued per partition (`crate::appends`), and group requests run one after
/// another in request order, as a Kafka broker runs a connection's requests (a member's
/// OffsetCommit before its LeaveGroup, say; a JoinGroup waiting for a rebalance holds the
/// group requests behind it, as in Kafka, while fetches and produces go on).
#[derive(Default)]
struct Order {
    partitions: PartitionQueues,
    /// Resolves when the last group request taken has been answered.
    last_group_request: Option<oneshot::Receiver<()>>,
}

impl Order {
    /// Takes a group request's place: what to wait for before running it, and what to drop
    /// once it is answered.
    fn next_group_request(&mut self) -> (Option<oneshot::Receiver<()>>, oneshot::Sender<()>) {
        let (done, answered) = oneshot::channel();
        (self.last_group_request.replace(answered), done)
    }
}

fn prepare(handler: &Handler, mut frame: Bytes, order: &mut Order) -> Result<Pending, Close> {
    if frame.len() < 8 {
        return Err(Close::Violation(format!(
            "a {}-byte request frame holds no request header",
            frame.len()
        )));
    }
    let (raw_key, version, correlation_id) = {
        let mut peek = &frame[..8];
        (peek.get_i16(), peek.get_i16(), peek.get_i32())
    };
    let Ok(key) = ApiKey::try_from(raw_key) else {
        return Err(Close::Violation(format!("unknown API key {raw_key}")));
    };
    let Some((lo, hi)) = served_range(key).filter(|&(lo, hi)| (lo..=hi).contains(&version)) else {
        if key == ApiKey::ApiVersions {
            // KIP-511: answer in version 0, whatever the body holds.
            let body = handlers::api_versions_unsupported();
            let response = encode(correlation_id, ApiVersionsResponse::header_version(0), &body, 0);
            return Ok(Box::pin(async move { response.map(Some) }));
        }
        let served = served_range(key).map_or("none".to_owned(), |(lo, hi)| format!("{lo} to {hi}"));
        return Err(Close::Violation(format!("{key:?} version {version} is not served (served: {served})")));
    };
    debug_assert!(lo <= version && version <= hi);
    let header = decode_request_header_from_buffer(&mut frame)
        .map_err(|e| Close::Violation(format!("{key:?} v{version}: request header: {e}")))?;
    dispatch(handler, key, version, &header, frame, order)
}

fn decode<T: Decodable>(key: ApiKey, version: i16, mut body: Bytes) -> Result<T, Close> {
    let decoded = T::decode(&mut body, version)
        .map_err(|e| Close::Violation(format!("{key:?} v{version}: request body: {e}")))?;
    if body.has_remaining() {
        // Kafka's broker ignores bytes after a request's fields, and some clients send them
        // (librdkafka's Metadata v12 for all topics has three).
        debug!(?key, version, extra = body.remaining(), "ignoring bytes after the request body");
    }
    Ok(decoded)
}

/// Encodes a response frame: size, response header, body.
fn encode<T: Encodable>(
    correlation_id: i32,
    header_version: i16,
    body: &T,
    version: i16,
) -> Result<Bytes, Close> {
    let mut out = BytesMut::new();
    out.put_i32(0);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    header
        .encode(&mut out, header_version)
        .and_then(|()| body.encode(&mut out, version))
        .map_err(|e| Close::Violation(format!("encoding the response failed: {e}")))?;
    let size = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Ok(out.freeze())
}

fn dispatch(
    handler: &Handler,
    key: ApiKey,
    version: i16,
    header: &RequestHeader,
    body: Bytes,
    order: &mut Order,
) -> Result<Pending, Close> {
    use kafka_protocol::messages::*;
    let id = header.correlation_id;
    let handler = handler.clone();
    macro_rules! answer {
        ($req:ty, $resp:ty, $method:ident) => {{
            let request: $req = decode(key, version, body)?;
            Ok(Box::pin(async move {
                let response: $resp = handler.$method(request, version).await;
                encode(id, <$resp>::header_version(version), &response, version).map(Some)
            }))
        }};
    }
    // A group request, run after the connection's previous one has been answered.
    macro_rules! answer_in_order {
        ($req:ty, $resp:ty, $method:ident $(, $extra:expr)*) => {{
            let request: $req = decode(key, version, body)?;
            let (previous, done) = order.next_group_request();
            Ok(Box::pin(async move {
                if let Some(previous) = previous {
                    let _ = previous.await;
                }
                let response: $resp = handler.$method(request, version $(, $extra)*).await;
                drop(done);
                encode(id, <$resp>::header_version(version), &response, version).map(Some)
            }))
        }};
    }
    match key {
        ApiKey::ApiVersions => answer!(ApiVersionsRequest, ApiVersionsResponse, api_versions),
        ApiKey::Metadata => answer!(MetadataRequest, MetadataResponse, metadata),
        ApiKey::Fetch => answer!(FetchRequest, FetchResponse, fetch),
        ApiKey::ListOffsets => answer!(ListOffsetsRequest, ListOffsetsResponse, list_offsets),
        ApiKey::CreateTopics => answer!(CreateTopicsRequest, CreateTopicsResponse, create_topics),
        ApiKey::DeleteTopics => answer!(DeleteTopicsRequest, DeleteTopicsResponse, delete_topics),
        ApiKey::CreatePartitions => {
            answer!(CreatePartitionsRequest, CreatePartitionsResponse, create_partitions)
        }
        ApiKey::InitProducerId => answer!(InitProducerIdRequest, InitProducerIdResponse, init_producer_id),
        ApiKey::FindCoordinator => {
            answer!(FindCoordinatorRequest, FindCoordinatorResponse, find_coordinator)
        }
        ApiKey::JoinGroup => {
            let client_id = header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default();
            answer_in_order!(JoinGroupRequest, JoinGroupResponse, join_group, client_id)
        }
        ApiKey::SyncGroup => answer_in_order!(SyncGroupRequest, SyncGroupResponse, sync_group),
        ApiKey::Heartbeat => answer_in_order!(HeartbeatRequest, HeartbeatResponse, heartbeat),
        ApiKey::LeaveGroup => answer_in_order!(LeaveGroupRequest, LeaveGroupResponse, leave_group),
        ApiKey::OffsetCommit => answer_in_order!(OffsetCommitRequest, OffsetCommitResponse, offset_commit),
        ApiKey::OffsetFetch => answer_in_order!(OffsetFetchRequest, OffsetFetchResponse, offset_fetch),
        ApiKey::ListGroups => answer!(ListGroupsRequest, ListGroupsResponse, list_groups),
        ApiKey::DescribeGroups => answer!(DescribeGroupsRequest, DescribeGroupsResponse, describe_groups),
        ApiKey::Produce => {
            let mut request: ProduceRequest = decode(key, version, body)?;
            // Batches are queued now, in request order, so that appends keep it.
            let mut outcomes = HashMap::new();
            if matches!(request.acks, -1..=1) {
                for t in &mut request.topic_data {
                    let topic = t.name.0.to_string();
                    for p in &mut t.partition_data {
                        if let std::collections::hash_map::Entry::Vacant(slot) =
                            outcomes.entry((topic.clone(), p.index))
                        {
                            slot.insert(order.partitions.enqueue(
                                &handler,
                                &topic,
                                p.index,
                                p.records.take(),
                            ));
                        }
                    }
                }
            }
            Ok(Box::pin(async move {
                let acks = request.acks;
                let response = handler.produce(request, version, outcomes).await;
                if acks == 0 {
                    // No response is due; as Kafka does, a failure closes the connection, the
                    // only way to tell such a client.
                    let failed = response
                        .responses
                        .iter()
                        .flat_map(|t| t.partition_responses.iter())
                        .find(|p| p.error_code != 0);
                    return match failed {
                        Some(p) => Err(Close::Violation(format!(
                            "an acks=0 produce failed with error code {} ({:?})",
                            p.error_code, p.error_message
                        ))),
                        None => Ok(None),
                    };
                }
                encode(id, ProduceResponse::header_version(version), &response, version).map(Some)
            }))
        }
        other => Err(Close::Violation(format!("{other:?} is not served"))),
    }
}
