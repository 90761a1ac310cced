//! One ordered, pipelined `WriteStream` per shard (oxia.md §6).
//!
//! On one stream the leader proposes requests in the order it receives them, commits them in
//! that order and answers in that order (FIFO). A writer whose calls go through one
//! [`ShardWriter`] therefore gets "issue order = commit order" for its sequenced puts, with
//! many requests in flight at once.
//!
//! The pipeline ([`run_pipeline`]) is written against channels, not the network: it moves
//! calls to the outbound stream, keeps the callers of sent requests in a FIFO, and hands each
//! response to the oldest caller. When the stream breaks, every sent request fails as
//! [`WriteFailure::InFlight`] (outcome unknown: any of them may have committed) and every
//! call not yet sent fails as [`WriteFailure::NotSent`]. A broken writer is not reopened:
//! the client replaces it, so that requests are never silently re-sent out of order.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;

use lakestream_meta::MetaError;

use crate::errors::{OxiaError, OxiaErrorKind, RequestPhase};
use crate::proto::oxia::{WriteRequest, WriteResponse};
use crate::routing::ShardId;
use crate::rpc::Rpc;

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

/// A write request and where to send its answer.
#[derive(Debug)]
pub struct WriteCall {
    /// The request.
    pub request: WriteRequest,
    /// Receives the response or the failure.
    pub reply: oneshot::Sender<WriteReply>,
}

/// Callers of requests that were sent, oldest first: responses come back in this order.
#[derive(Debug, Default)]
pub struct PendingWrites {
    callers: VecDeque<oneshot::Sender<WriteReply>>,
}

impl PendingWrites {
    /// How many requests await a response.
    pub fn len(&self) -> usize {
        self.callers.len()
    }

    /// Whether no request awaits a response.
    pub fn is_empty(&self) -> bool {
        self.callers.is_empty()
    }

    /// Records a sent request's caller.
    pub fn sent(&mut self, caller: oneshot::Sender<WriteReply>) {
        self.callers.push_back(caller);
    }

    /// Hands a response to the oldest caller. A response with no request waiting breaks the
    /// protocol: returned as an error.
    pub fn answer(&mut self, response: WriteResponse) -> Result<(), OxiaError> {
        let caller = self.callers.pop_front().ok_or_else(|| {
            OxiaError::new(OxiaErrorKind::Other, "the server answered a write that was not sent")
        })?;
        // The caller may have given up (timeout); the answer is then dropped.
        let _ = caller.send(Ok(response));
        Ok(())
    }

    /// Fails every waiting caller: with an unknown outcome when the requests were
    /// transmitted, as not sent when the stream never connected.
    pub fn break_all(&mut self, error: &OxiaError, transmitted: bool) {
        for caller in self.callers.drain(..) {
            let failure = if transmitted {
                WriteFailure::InFlight(error.clone())
            } else {
                WriteFailure::NotSent(error.clone())
            };
            let _ = caller.send(Err(failure));
        }
    }
}

/// What the inbound side of a stream reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    /// The response to the oldest request in flight.
    Response(WriteResponse),
    /// The server ended the stream.
    Ended,
    /// The stream failed after it was opened.
    Failed(OxiaError),
    /// No connection could be made: nothing queued was transmitted.
    NotConnected(OxiaError),
}

/// Runs one stream's pipeline until it breaks, or until every caller handle is gone and every
/// sent request is answered.
///
/// `calls` are the callers' requests; `outbound` feeds the stream; `inbound` reports the
/// stream's responses and its end. At most `max_pending` requests are in flight.
pub async fn run_pipeline(
    calls: &mut mpsc::Receiver<WriteCall>,
    outbound: mpsc::Sender<WriteRequest>,
    mut inbound: mpsc::Receiver<Inbound>,
    max_pending: usize,
) {
    let mut pending = PendingWrites::default();
    let mut accepting = true;
    // The failure that ended the stream, and whether queued requests may have been transmitted.
    let broken: Option<(OxiaError, bool)> = loop {
        if !accepting && pending.is_empty() {
            break None;
        }
        tokio::select! {
            // Completions first: they free room in the pipeline and answer callers sooner.
            biased;
            event = inbound.recv() => match event {
                Some(Inbound::Response(response)) => {
                    if let Err(error) = pending.answer(response) {
                        break Some((error, true));
                    }
                }
                Some(Inbound::Ended) | None => {
                    break Some((OxiaError::new(OxiaErrorKind::StreamEnded, "the write stream ended"), true));
                }
                Some(Inbound::Failed(error)) => break Some((error, true)),
                Some(Inbound::NotConnected(error)) => break Some((error, false)),
            },
            call = calls.recv(), if accepting && pending.len() < max_pending => match call {
                Some(call) => {
                    if outbound.send(call.request).await.is_ok() {
                        pending.sent(call.reply);
                    } else {
                        let error = OxiaError::new(OxiaErrorKind::StreamEnded, "the write stream closed");
                        let _ = call.reply.send(Err(WriteFailure::NotSent(error.clone())));
                        break Some((error, true));
                    }
                }
                None => accepting = false,
            },
        }
    };
    if let Some((error, transmitted)) = broken {
        tracing::debug!(%error, in_flight = pending.len(), transmitted, "write stream broke");
        pending.break_all(&error, transmitted);
        // Calls queued behind the break were never sent.
        calls.close();
        while let Ok(call) = calls.try_recv() {
            let _ = call.reply.send(Err(WriteFailure::NotSent(error.clone())));
        }
    }
}

/// The write stream of one shard's leader. It opens when the writer starts; the client
/// starts one on the first write to the shard, and a new one when the stream broke or the
/// leader moved.
#[derive(Debug)]
pub struct ShardWriter {
    shard: ShardId,
    leader: String,
    calls: mpsc::Sender<WriteCall>,
    task: JoinHandle<()>,
}

impl ShardWriter {
    /// Starts the writer of `shard` on its leader `leader` (reached through `rpc`).
    pub fn spawn(shard: ShardId, leader: String, rpc: Rpc, namespace: String, max_pending: usize) -> Self {
        let (calls_tx, mut calls_rx) = mpsc::channel::<WriteCall>(max_pending);
        // The client creates a writer on the first write to the shard, so the stream opens
        // only when it is needed.
        let task = tokio::spawn(async move {
            let (outbound_tx, outbound_rx) = mpsc::channel::<WriteRequest>(max_pending);
            let (inbound_tx, inbound_rx) = mpsc::channel::<Inbound>(max_pending);
            let reader = tokio::spawn(async move {
                let grpc = match rpc.ready().await {
                    Ok(grpc) => grpc,
                    Err(error) => {
                        let _ = inbound_tx.send(Inbound::NotConnected(error)).await;
                        return;
                    }
                };
                let opened =
                    rpc.write_stream(grpc, shard, &namespace, ReceiverStream::new(outbound_rx)).await;
                let mut stream = match opened {
                    Ok(stream) => stream,
                    Err(error) => {
                        let event = if error.kind == OxiaErrorKind::ConnectFailed {
                            Inbound::NotConnected(error)
                        } else {
                            Inbound::Failed(error)
                        };
                        let _ = inbound_tx.send(event).await;
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
            run_pipeline(&mut calls_rx, outbound_tx, inbound_rx, max_pending).await;
            reader.abort();
        });
        Self { shard, leader, calls: calls_tx, task }
    }

    /// The shard written to.
    pub fn shard(&self) -> ShardId {
        self.shard
    }

    /// The leader address the stream goes to.
    pub fn leader(&self) -> &str {
        &self.leader
    }

    /// Whether the stream broke or ended; a new writer is needed.
    pub fn is_closed(&self) -> bool {
        self.calls.is_closed() || self.task.is_finished()
    }

    /// Sends `request` in order behind earlier calls and waits for its response. A call that
    /// times out after it was queued is reported as in flight (it may commit later).
    pub async fn write(&self, request: WriteRequest, timeout: Duration) -> WriteReply {
        let (reply_tx, reply_rx) = oneshot::channel();
        let not_sent = |_| {
            WriteFailure::NotSent(OxiaError::new(
                OxiaErrorKind::StreamEnded,
                "the shard's write stream is closed",
            ))
        };
        self.calls.send(WriteCall { request, reply: reply_tx }).await.map_err(not_sent)?;
        match tokio::time::timeout(timeout, reply_rx).await {
            Ok(Ok(reply)) => reply,
            // The pipeline dropped the call without answering: it may have been sent.
            Ok(Err(_)) => Err(WriteFailure::InFlight(OxiaError::new(
                OxiaErrorKind::StreamEnded,
                "the write stream stopped without answering",
            ))),
            Err(_) => Err(WriteFailure::InFlight(OxiaError::new(
                OxiaErrorKind::DeadlineExceeded,
                format!("no write response within {timeout:?}"),
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use lakestream_format::ErrorClass;

    use super::*;
    use crate::proto::oxia::{PutRequest, PutResponse};

    fn request(tag: &str) -> WriteRequest {
        WriteRequest {
            shard: Some(0),
            puts: vec![PutRequest { key: tag.to_owned(), ..PutRequest::default() }],
            ..WriteRequest::default()
        }
    }

    fn response(tag: &str) -> WriteResponse {
        WriteResponse {
            puts: vec![PutResponse { key: Some(tag.to_owned()), ..PutResponse::default() }],
            ..WriteResponse::default()
        }
    }

    struct Harness {
        calls: mpsc::Sender<WriteCall>,
        outbound: mpsc::Receiver<WriteRequest>,
        inbound: mpsc::Sender<Inbound>,
        pipeline: JoinHandle<()>,
    }

    fn harness(max_pending: usize) -> Harness {
        let (calls_tx, mut calls_rx) = mpsc::channel(64);
        let (outbound_tx, outbound_rx) = mpsc::channel(64);
        let (inbound_tx, inbound_rx) = mpsc::channel(64);
        let pipeline = tokio::spawn(async move {
            run_pipeline(&mut calls_rx, outbound_tx, inbound_rx, max_pending).await;
        });
        Harness { calls: calls_tx, outbound: outbound_rx, inbound: inbound_tx, pipeline }
    }

    async fn call(h: &Harness, tag: &str) -> oneshot::Receiver<WriteReply> {
        let (reply, receiver) = oneshot::channel();
        h.calls.send(WriteCall { request: request(tag), reply }).await.expect("pipeline alive");
        receiver
    }

    fn tag_of(reply: WriteReply) -> String {
        reply.expect("answered").puts[0].key.clone().expect("tagged")
    }

    /// oxia.md §6: responses come back in request order; each goes to the caller that issued
    /// the matching request, and requests reach the stream in issue order.
    #[tokio::test]
    async fn responses_are_matched_to_callers_in_issue_order() {
        let mut h = harness(16);
        let mut receivers = Vec::new();
        for i in 0..5 {
            receivers.push(call(&h, &format!("w{i}")).await);
        }
        for i in 0..5 {
            let sent = h.outbound.recv().await.expect("sent");
            assert_eq!(sent.puts[0].key, format!("w{i}"), "issue order on the stream");
        }
        for i in 0..5 {
            h.inbound.send(Inbound::Response(response(&format!("r{i}")))).await.expect("alive");
        }
        for (i, receiver) in receivers.into_iter().enumerate() {
            assert_eq!(tag_of(receiver.await.expect("answered")), format!("r{i}"));
        }
    }

    #[tokio::test]
    async fn at_most_max_pending_requests_are_in_flight() {
        let mut h = harness(2);
        let first = call(&h, "a").await;
        let _second = call(&h, "b").await;
        let _third = call(&h, "c").await;
        assert_eq!(h.outbound.recv().await.map(|r| r.puts[0].key.clone()), Some("a".into()));
        assert_eq!(h.outbound.recv().await.map(|r| r.puts[0].key.clone()), Some("b".into()));
        tokio::task::yield_now().await;
        assert!(h.outbound.try_recv().is_err(), "the third waits for room");
        h.inbound.send(Inbound::Response(response("ra"))).await.expect("alive");
        assert_eq!(tag_of(first.await.expect("answered")), "ra");
        assert_eq!(h.outbound.recv().await.map(|r| r.puts[0].key.clone()), Some("c".into()));
    }

    /// oxia.md §6: an error after requests are in flight fails every pending request with an
    /// unknown outcome, never as failed; calls not yet sent fail as not sent.
    #[tokio::test]
    async fn a_broken_stream_makes_sent_writes_outcome_unknown() {
        let mut h = harness(1);
        let first = call(&h, "a").await;
        assert!(h.outbound.recv().await.is_some());
        let queued = call(&h, "b").await;
        let error = OxiaError::new(OxiaErrorKind::Transport, "connection reset");
        h.inbound.send(Inbound::Failed(error.clone())).await.expect("alive");

        let failure = first.await.expect("answered").expect_err("broken");
        assert_eq!(failure, WriteFailure::InFlight(error.clone()));
        assert_eq!(failure.to_meta_error().class(), ErrorClass::OutcomeUnknown);
        let failure = queued.await.expect("answered").expect_err("broken");
        assert_eq!(failure, WriteFailure::NotSent(error));
        assert_eq!(failure.to_meta_error().class(), ErrorClass::Retryable);
        h.pipeline.await.expect("pipeline finished");
        assert!(h.calls.is_closed(), "a broken writer takes no more calls");
    }

    #[tokio::test]
    async fn an_ended_stream_with_writes_in_flight_is_outcome_unknown() {
        let mut h = harness(4);
        let first = call(&h, "a").await;
        assert!(h.outbound.recv().await.is_some());
        h.inbound.send(Inbound::Ended).await.expect("alive");
        let failure = first.await.expect("answered").expect_err("ended");
        assert_eq!(failure.to_meta_error().class(), ErrorClass::OutcomeUnknown);
    }

    /// A stream that never connected transmitted nothing: its writes plainly failed and may
    /// be retried.
    #[tokio::test]
    async fn a_stream_that_never_connected_fails_writes_as_not_sent() {
        let mut h = harness(4);
        let first = call(&h, "a").await;
        assert!(h.outbound.recv().await.is_some());
        let error = OxiaError::new(OxiaErrorKind::Transport, "connection refused");
        h.inbound.send(Inbound::NotConnected(error.clone())).await.expect("alive");
        let failure = first.await.expect("answered").expect_err("not connected");
        assert_eq!(failure, WriteFailure::NotSent(error));
        assert_eq!(failure.to_meta_error().class(), ErrorClass::Retryable);
    }

    #[tokio::test]
    async fn a_response_without_a_request_breaks_the_stream() {
        let h = harness(4);
        h.inbound.send(Inbound::Response(response("stray"))).await.expect("alive");
        h.pipeline.await.expect("pipeline finished");
        assert!(h.calls.is_closed());
    }

    #[tokio::test]
    async fn the_pipeline_drains_answers_after_the_last_caller_leaves() {
        let mut h = harness(4);
        let first = call(&h, "a").await;
        assert!(h.outbound.recv().await.is_some());
        drop(h.calls);
        h.inbound.send(Inbound::Response(response("ra"))).await.expect("alive");
        assert_eq!(tag_of(first.await.expect("answered")), "ra");
        h.pipeline.await.expect("pipeline finished");
    }
}
