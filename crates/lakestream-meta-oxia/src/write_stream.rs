//! One ordered, pipelined `WriteStream` per shard (oxia.md §6).
//!
//! On one stream the leader proposes requests in the order it receives them, commits them in
//! that order and answers in that order (FIFO). Every write to a shard goes through that
//! shard's one [`ShardWriter`], so writes commit in the order they were *issued*: a call is
//! queued synchronously, when [`ShardWriter::write`] is called, not when its future is first
//! polled (a runtime's cooperative budget can poll futures out of order).
//!
//! What a caller is told depends on whether its request was transmitted:
//!
//! - A call is transmitted only on a stream the server has **accepted**: after opening a
//!   stream the writer sends an empty `WriteRequest` (a handshake) and waits for its answer.
//!   A server that refuses the stream (not leader, not initialized, unknown shard) answers
//!   with an error before it reads any request, so nothing queued behind the handshake was
//!   applied; the writer re-routes and tries again with the calls still queued, in order.
//! - When an accepted stream breaks, every transmitted request without an answer fails as
//!   [`WriteFailure::InFlight`] (outcome unknown: any of them may have committed). Calls not
//!   yet transmitted stay queued and go out, in order, on the next stream.
//! - A caller that gives up (its timeout, or its future dropped) before its call was
//!   transmitted withdraws it: it is never sent, and the caller gets
//!   [`WriteFailure::NotSent`].
//!
//! The pipeline ([`run_pipeline`]) and the stream's life ([`drive`]) are written against
//! channels and an [`Opener`], not the network, so both are unit-tested without a server.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;

use lakestream_format::retry::{Backoff, BackoffPolicy};
use lakestream_meta::MetaError;

use crate::errors::{OxiaError, OxiaErrorKind, RequestPhase, RetryAdvice};
use crate::proto::oxia::{WriteRequest, WriteResponse};
use crate::routing::ShardId;
use crate::rpc::Rpc;

/// The pauses between attempts to open a stream: the project's one policy
/// (`lakestream_format::retry`, full jitter), below 20 ms first, the bound doubling to 1 s;
/// bounded by the callers' lives (and cut short by a new shard assignment).
const OPEN_BACKOFF: BackoffPolicy =
    BackoffPolicy::unbounded(Duration::from_millis(20), Duration::from_secs(1));

/// Why a write did not get its response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteFailure {
    /// The request never left the client: it did not take effect.
    NotSent(OxiaError),
    /// The request was sent and no response came: it may have committed.
    InFlight(OxiaError),
}

impl WriteFailure {
    /// The underlying error.
    pub fn error(&self) -> &OxiaError {
        match self {
            WriteFailure::NotSent(error) | WriteFailure::InFlight(error) => error,
        }
    }

    /// The store error: unknown outcome for a write in flight, otherwise by the error's kind.
    pub fn to_meta_error(&self) -> MetaError {
        match self {
            WriteFailure::NotSent(error) => error.to_meta_error(RequestPhase::NotSent),
            WriteFailure::InFlight(error) => error.to_meta_error(RequestPhase::WriteInFlight),
        }
    }
}

/// The answer a write call receives.
pub type WriteReply = Result<WriteResponse, WriteFailure>;

const QUEUED: u8 = 0;
const SENT: u8 = 1;
const WITHDRAWN: u8 = 2;

/// Where a call is: queued, transmitted, or withdrawn by its caller. The writer and the
/// caller race to move it out of "queued"; exactly one wins, so a withdrawn call is never
/// transmitted and a transmitted one is never reported as not sent.
#[derive(Debug, Clone, Default)]
pub struct CallState(Arc<AtomicU8>);

impl CallState {
    /// The writer's move: true if the call may be transmitted now.
    pub fn take_for_sending(&self) -> bool {
        self.0.compare_exchange(QUEUED, SENT, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// The caller's move: true if the call was withdrawn before it was transmitted.
    pub fn withdraw(&self) -> bool {
        self.0.compare_exchange(QUEUED, WITHDRAWN, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Makes a call that was taken for sending but not transmitted sendable again.
    fn requeue(&self) {
        let _ = self.0.compare_exchange(SENT, QUEUED, Ordering::AcqRel, Ordering::Acquire);
    }

    fn is_withdrawn(&self) -> bool {
        self.0.load(Ordering::Acquire) == WITHDRAWN
    }
}

/// A write request and where to send its answer.
#[derive(Debug)]
pub struct WriteCall {
    /// The request.
    pub request: WriteRequest,
    /// Receives the response or the failure.
    pub reply: oneshot::Sender<WriteReply>,
    /// Shared with the caller, who may withdraw the call while it is queued.
    pub state: CallState,
}

impl WriteCall {
    /// A call and the receiver of its answer.
    pub fn new(request: WriteRequest) -> (Self, oneshot::Receiver<WriteReply>, CallState) {
        let (reply, receiver) = oneshot::channel();
        let state = CallState::default();
        (Self { request, reply, state: state.clone() }, receiver, state)
    }
}

/// Callers of requests that were sent, oldest first: responses come back in this order. One
/// request may carry the puts of several callers (`coalesce`); its response is split back
/// among them, each getting its own puts' outcomes.
#[derive(Debug, Default)]
pub struct PendingWrites {
    requests: VecDeque<Vec<(oneshot::Sender<WriteReply>, usize)>>,
}

impl PendingWrites {
    /// How many requests await a response.
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether no request awaits a response.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// Records a sent request of one caller.
    pub fn sent(&mut self, caller: oneshot::Sender<WriteReply>) {
        self.requests.push_back(vec![(caller, 0)]);
    }

    /// Records a sent request that carries the puts of several callers, in order: each with
    /// how many puts are its.
    pub fn sent_coalesced(&mut self, callers: Vec<(oneshot::Sender<WriteReply>, usize)>) {
        self.requests.push_back(callers);
    }

    /// Hands a response to the oldest request's callers. A response with no request waiting,
    /// or whose puts do not match the callers' counts, breaks the protocol: returned as an
    /// error (the request's callers then learn nothing more than "in flight").
    pub fn answer(&mut self, response: WriteResponse) -> Result<(), OxiaError> {
        let mut callers = self.requests.pop_front().ok_or_else(|| {
            OxiaError::new(OxiaErrorKind::Other, "the server answered a write that was not sent")
        })?;
        if callers.len() == 1
            && let Some((caller, _)) = callers.pop()
        {
            // One caller: the whole response is its, whatever it holds.
            let _ = caller.send(Ok(response));
            return Ok(());
        }
        let expected: usize = callers.iter().map(|(_, puts)| puts).sum();
        if response.puts.len() != expected
            || !response.deletes.is_empty()
            || !response.delete_ranges.is_empty()
        {
            let error = OxiaError::new(
                OxiaErrorKind::Other,
                format!("a write of {expected} puts was answered with {} put results", response.puts.len()),
            );
            for (caller, _) in callers {
                let _ = caller.send(Err(WriteFailure::InFlight(error.clone())));
            }
            return Err(error);
        }
        let mut results = response.puts.into_iter();
        for (caller, puts) in callers {
            let own =
                WriteResponse { puts: results.by_ref().take(puts).collect(), ..WriteResponse::default() };
            // The caller may have given up (timeout); its answer is then dropped.
            let _ = caller.send(Ok(own));
        }
        Ok(())
    }

    /// Fails every waiting caller with an unknown outcome: each request was transmitted.
    pub fn break_all(&mut self, error: &OxiaError) {
        for (caller, _) in self.requests.drain(..).flatten() {
            let _ = caller.send(Err(WriteFailure::InFlight(error.clone())));
        }
    }
}

/// The most puts one coalesced request carries (Oxia's Go client batches at most 1000).
pub const MAX_COALESCED_PUTS: usize = 1000;
/// The most bytes of keys and values one coalesced request carries.
pub const MAX_COALESCED_BYTES: usize = 4 << 20;

/// Whether a request holds puts only: only those may share a request, because the server
/// applies a request's puts before its deletes and delete-ranges (oxia.md §6.1), which would
/// reorder calls of different kinds.
fn puts_only(request: &WriteRequest) -> bool {
    !request.puts.is_empty() && request.deletes.is_empty() && request.delete_ranges.is_empty()
}

fn put_bytes(request: &WriteRequest) -> usize {
    request.puts.iter().map(|p| p.key.len() + p.value.len()).sum()
}

/// Calls taken from the queue but not yet transmitted, oldest first: they go before any call
/// still in the channel.
pub type Held = VecDeque<WriteCall>;

/// The next call: a held one first, then the channel's, without waiting.
fn try_next(calls: &mut mpsc::UnboundedReceiver<WriteCall>, held: &mut Held) -> Option<WriteCall> {
    held.pop_front().or_else(|| calls.try_recv().ok())
}

/// Takes the calls queued behind `first` that may share its request (puts only, within the
/// batch limits), in order, and returns them; the first call that may not goes back to the
/// front of `held`. Withdrawn calls are dropped on the way.
fn coalesce(
    first: &WriteCall,
    calls: &mut mpsc::UnboundedReceiver<WriteCall>,
    held: &mut Held,
) -> Vec<WriteCall> {
    let mut taken = Vec::new();
    if !puts_only(&first.request) {
        return taken;
    }
    let (mut puts, mut bytes) = (first.request.puts.len(), put_bytes(&first.request));
    while let Some(call) = try_next(calls, held) {
        if call.state.is_withdrawn() {
            continue;
        }
        let fits = puts_only(&call.request)
            && puts + call.request.puts.len() <= MAX_COALESCED_PUTS
            && bytes + put_bytes(&call.request) <= MAX_COALESCED_BYTES;
        if !fits {
            held.push_front(call);
            break;
        }
        puts += call.request.puts.len();
        bytes += put_bytes(&call.request);
        taken.push(call);
    }
    taken
}

/// What the inbound side of a stream reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    /// The response to the oldest request in flight.
    Response(WriteResponse),
    /// The server ended the stream.
    Ended,
    /// The stream failed (or was refused).
    Failed(OxiaError),
}

/// An open stream, as channels: requests go out on `outbound`, responses and the stream's
/// end come back on `inbound`.
#[derive(Debug)]
pub struct StreamChannels {
    /// The leader the stream goes to.
    pub leader: String,
    /// Requests to transmit, in order.
    pub outbound: mpsc::Sender<WriteRequest>,
    /// Responses, then the stream's end.
    pub inbound: mpsc::Receiver<Inbound>,
    /// The task feeding `inbound`; aborted when the stream is dropped.
    pub task: Option<JoinHandle<()>>,
}

impl Drop for StreamChannels {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Opens streams to a shard's current leader and re-routes after a refusal.
pub trait Opener: Send + Sync + 'static {
    /// Opens a write stream to the shard's current leader. An error means nothing was sent.
    fn open(&self) -> BoxFuture<'_, Result<StreamChannels, OxiaError>>;

    /// Acts on a refusal's advice before the next [`Opener::open`]: follow the hint, or wait
    /// (briefly) for the next shard assignment.
    fn reroute(&self, leader_hint: Option<String>) -> BoxFuture<'_, ()>;

    /// Resolves when the next shard assignment arrives (a new leader may be in it). Never
    /// resolving is allowed: the writer then waits out its back-off.
    fn assignment_changed(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::pending())
    }
}

/// How a pipeline run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum PipelineEnd {
    /// Every caller handle is gone and every sent request is answered.
    CallersGone,
    /// The stream broke; the sent requests failed as in flight, queued calls are kept.
    Broken(OxiaError),
}

/// Runs one accepted stream's pipeline until it breaks, or until every caller handle is gone
/// and every sent request is answered.
///
/// `held` are calls taken from `calls` but not yet transmitted; they go first. Calls withdrawn
/// by their callers are dropped unsent. At most `max_pending` requests are in flight. When
/// the stream breaks, calls that could not be transmitted are left in `held`, in order.
pub async fn run_pipeline(
    calls: &mut mpsc::UnboundedReceiver<WriteCall>,
    held: &mut Held,
    stream: &mut StreamChannels,
    max_pending: usize,
) -> PipelineEnd {
    let mut pending = PendingWrites::default();
    let mut accepting = true;
    let end = loop {
        if !accepting && held.is_empty() && pending.is_empty() {
            break PipelineEnd::CallersGone;
        }
        let room = pending.len() < max_pending;
        if room && let Some(call) = held.pop_front() {
            // Puts queued behind it go in the same request, in order.
            let more = coalesce(&call, calls, held);
            if let Err((unsent, error)) = transmit(call, more, &stream.outbound, &mut pending).await {
                for call in unsent.into_iter().rev() {
                    held.push_front(call);
                }
                break PipelineEnd::Broken(error);
            }
            continue;
        }
        tokio::select! {
            // Completions first: they free room in the pipeline and answer callers sooner.
            biased;
            event = stream.inbound.recv() => match event {
                Some(Inbound::Response(response)) => {
                    if let Err(error) = pending.answer(response) {
                        break PipelineEnd::Broken(error);
                    }
                }
                Some(Inbound::Ended) | None => {
                    break PipelineEnd::Broken(OxiaError::new(OxiaErrorKind::StreamEnded, "the write stream ended"));
                }
                Some(Inbound::Failed(error)) => break PipelineEnd::Broken(error),
            },
            // Transmitted at the top of the loop, once there is room.
            call = calls.recv(), if accepting && held.is_empty() => match call {
                Some(call) => held.push_back(call),
                None => accepting = false,
            },
        }
    };
    let error = match &end {
        PipelineEnd::Broken(error) => {
            tracing::debug!(%error, in_flight = pending.len(), "write stream broke");
            error.clone()
        }
        PipelineEnd::CallersGone => OxiaError::new(OxiaErrorKind::StreamEnded, "the write stream closed"),
    };
    pending.break_all(&error);
    end
}

/// Transmits `first` with the puts of `more` in the same request, in order, leaving out calls
/// withdrawn meanwhile. If the stream no longer takes requests nothing was transmitted: the
/// calls, sendable again, are handed back in order with the error.
async fn transmit(
    first: WriteCall,
    more: Vec<WriteCall>,
    outbound: &mpsc::Sender<WriteRequest>,
    pending: &mut PendingWrites,
) -> Result<(), (Vec<WriteCall>, OxiaError)> {
    let mut calls: Vec<WriteCall> =
        std::iter::once(first).chain(more).filter(|call| call.state.take_for_sending()).collect();
    let counts: Vec<usize> = calls.iter().map(|call| call.request.puts.len()).collect();
    // The requests move into the one sent (no copy of their values), and back on failure.
    let request = match calls.as_mut_slice() {
        [] => return Ok(()), // every one withdrawn by its caller: never sent
        [only] => std::mem::take(&mut only.request),
        all => WriteRequest {
            shard: all[0].request.shard,
            puts: all.iter_mut().flat_map(|call| std::mem::take(&mut call.request.puts)).collect(),
            ..WriteRequest::default()
        },
    };
    if let Err(mpsc::error::SendError(request)) = outbound.send(request).await {
        if let [only] = calls.as_mut_slice() {
            only.request = request;
        } else {
            let mut puts = request.puts.into_iter();
            for (call, count) in calls.iter_mut().zip(&counts) {
                call.request.puts = puts.by_ref().take(*count).collect();
            }
        }
        for call in &calls {
            call.state.requeue();
        }
        return Err((calls, OxiaError::new(OxiaErrorKind::StreamEnded, "the write stream closed")));
    }
    if calls.len() == 1 {
        pending.sent(calls.remove(0).reply);
    } else {
        pending.sent_coalesced(calls.into_iter().map(|call| call.reply).zip(counts).collect());
    }
    Ok(())
}

/// Drops held and queued calls that their callers withdrew, until a live one is at the front
/// of `held`. Returns false once every sender is gone and nothing is held.
async fn wait_for_live_call(calls: &mut mpsc::UnboundedReceiver<WriteCall>, held: &mut Held) -> bool {
    loop {
        match held.front() {
            Some(call) if !call.state.is_withdrawn() => return true,
            Some(_) => {
                held.pop_front();
            }
            None => match calls.recv().await {
                Some(call) => held.push_back(call),
                None => return false,
            },
        }
    }
}

/// The life of a shard's writes: waits for a call, opens and confirms a stream (handshake),
/// runs the pipeline on it, and after a refusal or a break opens the next one for the calls
/// still queued. Ends when every caller handle is gone.
pub async fn drive(
    opener: Arc<dyn Opener>,
    mut calls: mpsc::UnboundedReceiver<WriteCall>,
    shard: ShardId,
    max_pending: usize,
    handshake_timeout: Duration,
) {
    let mut held = Held::new();
    let backoff = Backoff::process(OPEN_BACKOFF);
    // Failed opens since the last accepted stream: the retry number of the next pause.
    let mut failures = 0;
    loop {
        if !wait_for_live_call(&mut calls, &mut held).await {
            return;
        }
        let mut stream = match open_confirmed(opener.as_ref(), shard, handshake_timeout).await {
            Ok(stream) => stream,
            Err(error) => {
                // Refused or never connected: nothing queued was transmitted.
                tracing::debug!(shard, %error, "write stream not accepted; retrying");
                if let RetryAdvice::Reroute { leader_hint } = error.retry_advice() {
                    opener.reroute(leader_hint).await;
                }
                // A new assignment (e.g. a dead leader replaced) ends the back-off early.
                tokio::select! {
                    () = tokio::time::sleep(backoff.delay(failures)) => {}
                    () = opener.assignment_changed() => {}
                }
                failures = failures.saturating_add(1);
                continue;
            }
        };
        failures = 0;
        match run_pipeline(&mut calls, &mut held, &mut stream, max_pending).await {
            PipelineEnd::CallersGone => return,
            PipelineEnd::Broken(error) => {
                if let RetryAdvice::Reroute { leader_hint } = error.retry_advice() {
                    opener.reroute(leader_hint).await;
                }
            }
        }
    }
}

/// Opens a stream and confirms that the server accepted it: an empty `WriteRequest` must be
/// answered before any caller's request is transmitted.
async fn open_confirmed(
    opener: &dyn Opener,
    shard: ShardId,
    timeout: Duration,
) -> Result<StreamChannels, OxiaError> {
    let mut stream = opener.open().await?;
    let handshake = WriteRequest { shard: Some(shard), ..WriteRequest::default() };
    if stream.outbound.send(handshake).await.is_err() {
        return Err(OxiaError::new(OxiaErrorKind::StreamEnded, "the write stream closed at open"));
    }
    match tokio::time::timeout(timeout, stream.inbound.recv()).await {
        Ok(Some(Inbound::Response(_))) => Ok(stream),
        Ok(Some(Inbound::Failed(error))) => Err(error),
        Ok(Some(Inbound::Ended) | None) => {
            Err(OxiaError::new(OxiaErrorKind::StreamEnded, "the write stream ended at open"))
        }
        Err(_) => Err(OxiaError::new(
            OxiaErrorKind::DeadlineExceeded,
            format!("the write stream's handshake took longer than {timeout:?}"),
        )),
    }
}

/// Opens a real `WriteStream` on `rpc` and pumps its responses into a channel.
pub async fn open_grpc_stream(
    rpc: Rpc,
    leader: String,
    shard: ShardId,
    namespace: String,
    max_pending: usize,
) -> Result<StreamChannels, OxiaError> {
    let grpc = rpc.ready().await?;
    // One more than the pipeline's bound, for the handshake.
    let (outbound_tx, outbound_rx) = mpsc::channel::<WriteRequest>(max_pending + 1);
    let (inbound_tx, inbound_rx) = mpsc::channel::<Inbound>(max_pending + 1);
    let task = tokio::spawn(async move {
        let opened = rpc.write_stream(grpc, shard, &namespace, ReceiverStream::new(outbound_rx)).await;
        let mut stream = match opened {
            Ok(stream) => stream,
            Err(error) => {
                let _ = inbound_tx.send(Inbound::Failed(error)).await;
                return;
            }
        };
        loop {
            let event = match stream.message().await {
                Ok(Some(response)) => Inbound::Response(response),
                Ok(None) => Inbound::Ended,
                Err(status) => Inbound::Failed(OxiaError::from_status(&status)),
            };
            let done = !matches!(event, Inbound::Response(_));
            if inbound_tx.send(event).await.is_err() || done {
                return;
            }
        }
    });
    Ok(StreamChannels { leader, outbound: outbound_tx, inbound: inbound_rx, task: Some(task) })
}

/// The writes of one shard: a queue and the task that drives it (see the module docs).
#[derive(Debug)]
pub struct ShardWriter {
    shard: ShardId,
    calls: mpsc::UnboundedSender<WriteCall>,
    task: JoinHandle<()>,
}

impl Drop for ShardWriter {
    fn drop(&mut self) {
        // Calls already answered are unaffected; queued ones fail as not sent.
        self.task.abort();
    }
}

impl ShardWriter {
    /// Starts the writer of `shard`. Streams are opened by `opener` when calls arrive.
    pub fn spawn(
        shard: ShardId,
        opener: Arc<dyn Opener>,
        max_pending: usize,
        handshake_timeout: Duration,
    ) -> Self {
        let (calls, calls_rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(drive(opener, calls_rx, shard, max_pending, handshake_timeout));
        Self { shard, calls, task }
    }

    /// The shard written to.
    pub fn shard(&self) -> ShardId {
        self.shard
    }

    /// Queues `request` behind every earlier call *now* and returns the future of its
    /// response. After `timeout` a call still queued is withdrawn (not sent); one already
    /// sent is reported in flight (it may commit later). Dropping the future withdraws a call
    /// that was not sent yet.
    pub fn write(
        &self,
        request: WriteRequest,
        timeout: Duration,
    ) -> impl Future<Output = WriteReply> + Send + use<> {
        let (call, reply, state) = WriteCall::new(request);
        let queued = self.calls.send(call).is_ok();
        async move {
            if !queued {
                return Err(WriteFailure::NotSent(OxiaError::new(
                    OxiaErrorKind::StreamEnded,
                    "the shard's writer has stopped",
                )));
            }
            let _withdraw_if_dropped = WithdrawOnDrop(state.clone());
            let failure = match tokio::time::timeout(timeout, reply).await {
                Ok(Ok(reply)) => return reply,
                Ok(Err(_)) => OxiaError::new(OxiaErrorKind::StreamEnded, "the shard's writer stopped"),
                Err(_) => OxiaError::new(
                    OxiaErrorKind::DeadlineExceeded,
                    format!("no write response within {timeout:?}"),
                ),
            };
            Err(if state.withdraw() {
                WriteFailure::NotSent(failure)
            } else {
                WriteFailure::InFlight(failure)
            })
        }
    }
}

/// Withdraws a call whose caller stopped waiting (a no-op once it was transmitted).
struct WithdrawOnDrop(CallState);

impl Drop for WithdrawOnDrop {
    fn drop(&mut self) {
        self.0.withdraw();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use lakestream_format::ErrorClass;

    use super::*;
    use crate::proto::oxia::{DeleteRequest, PutRequest, PutResponse};

    /// A request that shares no request with another (a delete), so that one call is one
    /// request on the stream.
    fn request(tag: &str) -> WriteRequest {
        WriteRequest {
            shard: Some(0),
            deletes: vec![DeleteRequest { key: tag.to_owned(), ..DeleteRequest::default() }],
            ..WriteRequest::default()
        }
    }

    /// A put: puts queued together share one request.
    fn put(tag: &str) -> WriteRequest {
        WriteRequest {
            shard: Some(0),
            puts: vec![PutRequest { key: tag.to_owned(), ..PutRequest::default() }],
            ..WriteRequest::default()
        }
    }

    fn puts_of(request: &WriteRequest) -> Vec<String> {
        request.puts.iter().map(|p| p.key.clone()).collect()
    }

    fn response(tag: &str) -> WriteResponse {
        WriteResponse {
            puts: vec![PutResponse { key: Some(tag.to_owned()), ..PutResponse::default() }],
            ..WriteResponse::default()
        }
    }

    fn tag_of_request(request: &WriteRequest) -> Option<String> {
        request.deletes.first().map(|d| d.key.clone()).or_else(|| request.puts.first().map(|p| p.key.clone()))
    }

    fn tag_of(reply: WriteReply) -> String {
        reply.expect("answered").puts[0].key.clone().expect("tagged")
    }

    /// The far side of one scripted stream: what the client transmitted, and a way to answer.
    struct FarSide {
        outbound: mpsc::Receiver<WriteRequest>,
        inbound: mpsc::Sender<Inbound>,
    }

    impl FarSide {
        async fn next_request(&mut self) -> WriteRequest {
            tokio::time::timeout(Duration::from_secs(5), self.outbound.recv())
                .await
                .expect("a request in time")
                .expect("stream open")
        }

        /// Receives the handshake and accepts the stream.
        async fn accept(&mut self) {
            let handshake = self.next_request().await;
            assert!(handshake.puts.is_empty() && handshake.deletes.is_empty(), "an empty handshake first");
            self.inbound.send(Inbound::Response(WriteResponse::default())).await.expect("alive");
        }

        async fn answer(&self, tag: &str) {
            self.inbound.send(Inbound::Response(response(tag))).await.expect("alive");
        }
    }

    /// Hands out scripted streams: each `open` gives the test the far side of a new stream.
    struct ScriptedOpener {
        far_sides: mpsc::UnboundedSender<FarSide>,
        reroutes: Mutex<Vec<Option<String>>>,
    }

    impl Opener for ScriptedOpener {
        fn open(&self) -> BoxFuture<'_, Result<StreamChannels, OxiaError>> {
            Box::pin(async move {
                let (outbound, outbound_rx) = mpsc::channel(64);
                let (inbound_tx, inbound) = mpsc::channel(64);
                self.far_sides
                    .send(FarSide { outbound: outbound_rx, inbound: inbound_tx })
                    .map_err(|_| OxiaError::new(OxiaErrorKind::ConnectFailed, "test over"))?;
                Ok(StreamChannels { leader: "scripted".into(), outbound, inbound, task: None })
            })
        }

        fn reroute(&self, leader_hint: Option<String>) -> BoxFuture<'_, ()> {
            self.reroutes.lock().expect("lock").push(leader_hint);
            Box::pin(async {})
        }
    }

    struct Harness {
        writer: ShardWriter,
        streams: mpsc::UnboundedReceiver<FarSide>,
        opener: Arc<ScriptedOpener>,
    }

    fn harness(max_pending: usize) -> Harness {
        let (far_sides, streams) = mpsc::unbounded_channel();
        let opener = Arc::new(ScriptedOpener { far_sides, reroutes: Mutex::default() });
        let writer = ShardWriter::spawn(0, opener.clone(), max_pending, Duration::from_secs(5));
        Harness { writer, streams, opener }
    }

    impl Harness {
        async fn next_stream(&mut self) -> FarSide {
            tokio::time::timeout(Duration::from_secs(5), self.streams.recv())
                .await
                .expect("a stream opened in time")
                .expect("opener alive")
        }

        fn write(&self, tag: &str) -> tokio::task::JoinHandle<WriteReply> {
            tokio::spawn(self.writer.write(request(tag), Duration::from_secs(30)))
        }
    }

    /// oxia.md §6: requests reach the stream in issue order and each response goes to the
    /// caller that issued the matching request. Issue order is call order, even when the
    /// futures are polled in another order.
    #[tokio::test]
    async fn calls_are_transmitted_in_call_order_whatever_the_poll_order() {
        let mut h = harness(16);
        let futures: Vec<_> =
            (0..5).map(|i| h.writer.write(request(&format!("w{i}")), Duration::from_secs(30))).collect();
        // Polled last-first: the order of calls still decides.
        let handles: Vec<_> = futures.into_iter().rev().map(tokio::spawn).collect();
        let mut far = h.next_stream().await;
        far.accept().await;
        for i in 0..5 {
            assert_eq!(
                tag_of_request(&far.next_request().await),
                Some(format!("w{i}")),
                "issue order on the stream"
            );
        }
        for i in 0..5 {
            far.answer(&format!("r{i}")).await;
        }
        for (i, handle) in handles.into_iter().rev().enumerate() {
            assert_eq!(tag_of(handle.await.expect("joined")), format!("r{i}"));
        }
    }

    #[tokio::test]
    async fn at_most_max_pending_requests_are_in_flight() {
        let mut h = harness(2);
        let first = h.write("a");
        let _second = h.write("b");
        let _third = h.write("c");
        let mut far = h.next_stream().await;
        far.accept().await;
        assert_eq!(tag_of_request(&far.next_request().await).as_deref(), Some("a"));
        assert_eq!(tag_of_request(&far.next_request().await).as_deref(), Some("b"));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(far.outbound.try_recv().is_err(), "the third waits for room");
        far.answer("ra").await;
        assert_eq!(tag_of(first.await.expect("joined")), "ra");
        assert_eq!(tag_of_request(&far.next_request().await).as_deref(), Some("c"));
    }

    /// A stream the server refuses at open (here: not leader, with a hint) applied nothing:
    /// the writer follows the hint and sends the queued calls, in order, on the next stream.
    #[tokio::test]
    async fn a_refused_stream_is_retried_on_the_new_leader_with_the_calls_in_order() {
        let mut h = harness(16);
        let first = h.write("a");
        let second = h.write("b");
        let mut refused = h.next_stream().await;
        let _handshake = refused.next_request().await;
        let not_leader = OxiaError::new(
            OxiaErrorKind::NotLeader { leader_hint: Some("10.0.0.2:6648".into()) },
            "node is not leader",
        );
        refused.inbound.send(Inbound::Failed(not_leader)).await.expect("alive");

        let mut far = h.next_stream().await;
        far.accept().await;
        assert_eq!(tag_of_request(&far.next_request().await).as_deref(), Some("a"));
        assert_eq!(tag_of_request(&far.next_request().await).as_deref(), Some("b"));
        far.answer("ra").await;
        far.answer("rb").await;
        assert_eq!(tag_of(first.await.expect("joined")), "ra");
        assert_eq!(tag_of(second.await.expect("joined")), "rb");
        assert_eq!(*h.opener.reroutes.lock().expect("lock"), vec![Some("10.0.0.2:6648".to_owned())]);
    }

    /// oxia.md §6: an error after requests are in flight fails every sent request with an
    /// unknown outcome, never as failed; calls not yet sent go out on the next stream.
    #[tokio::test]
    async fn a_broken_stream_makes_sent_writes_outcome_unknown_and_reopens_for_the_rest() {
        let mut h = harness(1);
        let first = h.write("a");
        let mut far = h.next_stream().await;
        far.accept().await;
        assert_eq!(tag_of_request(&far.next_request().await).as_deref(), Some("a"));
        let queued = h.write("b");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let error = OxiaError::new(OxiaErrorKind::Transport, "connection reset");
        far.inbound.send(Inbound::Failed(error.clone())).await.expect("alive");

        let failure = first.await.expect("joined").expect_err("broken");
        assert_eq!(failure, WriteFailure::InFlight(error));
        assert_eq!(failure.to_meta_error().class(), ErrorClass::OutcomeUnknown);

        let mut next = h.next_stream().await;
        next.accept().await;
        assert_eq!(tag_of_request(&next.next_request().await).as_deref(), Some("b"));
        next.answer("rb").await;
        assert_eq!(tag_of(queued.await.expect("joined")), "rb");
    }

    #[tokio::test]
    async fn an_ended_stream_with_writes_in_flight_is_outcome_unknown() {
        let mut h = harness(4);
        let first = h.write("a");
        let mut far = h.next_stream().await;
        far.accept().await;
        let _ = far.next_request().await;
        far.inbound.send(Inbound::Ended).await.expect("alive");
        let failure = first.await.expect("joined").expect_err("ended");
        assert_eq!(failure.to_meta_error().class(), ErrorClass::OutcomeUnknown);
    }

    /// A call whose caller gave up before it was transmitted is withdrawn: it is reported as
    /// not sent (retryable) and never reaches the server.
    #[tokio::test]
    async fn a_call_that_times_out_unsent_is_withdrawn_and_never_sent() {
        let mut h = harness(4);
        let late = tokio::spawn(h.writer.write(request("late"), Duration::from_millis(50)));
        let mut refused = h.next_stream().await;
        // Hold the handshake unanswered past the caller's timeout.
        let _handshake = refused.next_request().await;
        let failure = late.await.expect("joined").expect_err("timed out");
        assert!(matches!(failure, WriteFailure::NotSent(_)), "{failure:?}");
        assert_eq!(failure.to_meta_error().class(), ErrorClass::Retryable);

        refused.inbound.send(Inbound::Response(WriteResponse::default())).await.expect("alive");
        let next = h.write("next");
        assert_eq!(
            tag_of_request(&refused.next_request().await).as_deref(),
            Some("next"),
            "the withdrawn call was skipped"
        );
        refused.answer("rnext").await;
        assert_eq!(tag_of(next.await.expect("joined")), "rnext");
    }

    /// A call transmitted but not answered within the caller's timeout may still commit: it
    /// is reported as outcome unknown.
    #[tokio::test]
    async fn a_sent_call_that_times_out_is_outcome_unknown() {
        let mut h = harness(4);
        let slow = tokio::spawn(h.writer.write(request("slow"), Duration::from_millis(200)));
        let mut far = h.next_stream().await;
        far.accept().await;
        let _ = far.next_request().await;
        let failure = slow.await.expect("joined").expect_err("timed out");
        assert!(matches!(failure, WriteFailure::InFlight(_)), "{failure:?}");
        assert_eq!(failure.to_meta_error().class(), ErrorClass::OutcomeUnknown);
    }

    #[tokio::test]
    async fn a_response_without_a_request_breaks_the_stream() {
        let mut h = harness(4);
        let first = h.write("a");
        let mut far = h.next_stream().await;
        far.accept().await;
        let _ = far.next_request().await;
        far.answer("ra").await;
        far.answer("stray").await;
        assert_eq!(tag_of(first.await.expect("joined")), "ra");
        // The stray answer broke that stream; the next call opens another.
        let second = h.write("b");
        let mut next = h.next_stream().await;
        next.accept().await;
        assert_eq!(tag_of_request(&next.next_request().await).as_deref(), Some("b"));
        next.answer("rb").await;
        assert_eq!(tag_of(second.await.expect("joined")), "rb");
    }

    /// Puts queued together go out as one request, in call order, and each caller gets its
    /// own puts' results; a call of another kind (a delete) never shares a request, because
    /// the server applies a request's puts before its deletes (oxia.md §6.1).
    #[tokio::test]
    async fn queued_puts_share_a_request_in_order_and_each_caller_gets_its_results() {
        let mut h = harness(16);
        let calls = [put("p0"), put("p1"), request("d2"), put("p3"), put("p4")];
        let futures: Vec<_> = calls.into_iter().map(|r| h.writer.write(r, Duration::from_secs(30))).collect();
        let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
        let mut far = h.next_stream().await;
        far.accept().await;
        assert_eq!(puts_of(&far.next_request().await), ["p0", "p1"]);
        assert_eq!(tag_of_request(&far.next_request().await).as_deref(), Some("d2"));
        assert_eq!(puts_of(&far.next_request().await), ["p3", "p4"]);
        let two = |a: &str, b: &str| WriteResponse {
            puts: vec![
                PutResponse { key: Some(a.to_owned()), ..PutResponse::default() },
                PutResponse { key: Some(b.to_owned()), ..PutResponse::default() },
            ],
            ..WriteResponse::default()
        };
        far.inbound.send(Inbound::Response(two("r0", "r1"))).await.expect("alive");
        far.answer("r2").await;
        far.inbound.send(Inbound::Response(two("r3", "r4"))).await.expect("alive");
        for (i, handle) in handles.into_iter().enumerate() {
            assert_eq!(tag_of(handle.await.expect("joined")), format!("r{i}"));
        }
    }

    /// A coalesced request answered with the wrong number of put results breaks the stream:
    /// its callers learn only that their puts were in flight.
    #[tokio::test]
    async fn a_coalesced_request_answered_with_too_few_results_is_outcome_unknown() {
        let mut h = harness(16);
        let futures: Vec<_> =
            [put("p0"), put("p1")].into_iter().map(|r| h.writer.write(r, Duration::from_secs(30))).collect();
        let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
        let mut far = h.next_stream().await;
        far.accept().await;
        assert_eq!(puts_of(&far.next_request().await), ["p0", "p1"]);
        far.answer("only-one").await;
        for handle in handles {
            let failure = handle.await.expect("joined").expect_err("mismatched answer");
            assert_eq!(failure.to_meta_error().class(), ErrorClass::OutcomeUnknown, "{failure:?}");
        }
    }

    #[test]
    fn exactly_one_of_sending_and_withdrawing_wins() {
        let state = CallState::default();
        assert!(state.withdraw());
        assert!(!state.take_for_sending());
        let state = CallState::default();
        assert!(state.take_for_sending());
        assert!(!state.withdraw());
    }
}
