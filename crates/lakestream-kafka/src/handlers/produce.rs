//! Produce: a request's batches are queued per partition as it is decoded (`crate::appends`);
//! each group of queued batches is checked, its producer admitted, and handed to the writer
//! as one entry. InitProducerId hands out the idempotent producers' ids.

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use lakestream_format::kafka::{self, NAMESPACE};
use lakestream_service::api::{ApiError, ApiResult, ErrorKind, PartitionRef, ProduceInput, ProduceOptions};
use lakestream_service::auth::Permission;
use tokio::sync::oneshot;

use super::{Handler, TRANSACTIONS_REFUSED, text, topic_name};
use crate::appends::{AppendResult, Queued};
use crate::errors::{code_of, produce_code_of};
use crate::idempotence::{self, BatchProducer};
use crate::topics::Topic;

/// One request's checked batches for a partition.
struct Batches {
    records: Bytes,
    count: u32,
    producer: Option<BatchProducer>,
    reply: oneshot::Sender<AppendResult>,
}

impl Batches {
    /// Whether `next` can go in one entry after these: both without a producer id, or both of
    /// one producer and epoch with `next` starting where these end.
    fn followed_by(&self, next: &Batches) -> bool {
        match (&self.producer, &next.producer) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                (a.id, a.epoch) == (b.id, b.epoch)
                    && i64::from(a.base_sequence) + i64::from(self.count) == i64::from(b.base_sequence)
            }
            _ => false,
        }
    }
}

impl Handler {
    /// Answers a produce whose batches were queued when it was decoded (`crate::appends`);
    /// `outcomes` are their appends' outcomes, by topic and partition (none when `acks` is
    /// invalid).
    pub(crate) async fn produce(
        &self,
        request: ProduceRequest,
        version: i16,
        mut outcomes: HashMap<(String, i32), oneshot::Receiver<AppendResult>>,
    ) -> ProduceResponse {
        let acks_ok = matches!(request.acks, -1..=1);
        let mut topics_out = Vec::with_capacity(request.topic_data.len());
        for data in request.topic_data {
            let name = data.name.0.to_string();
            let partitions = data.partition_data.into_iter().map(|p| {
                let outcome = outcomes.remove(&(name.clone(), p.index));
                let name = &name;
                async move {
                    let out = produce_response::PartitionProduceResponse::default()
                        .with_index(p.index)
                        .with_log_append_time_ms(-1)
                        .with_log_start_offset(-1);
                    let fail = |code: i16, message: String| {
                        let out = out.clone().with_error_code(code).with_base_offset(-1);
                        if version >= 8 { out.with_error_message(Some(text(message))) } else { out }
                    };
                    if !acks_ok {
                        return fail(
                            ResponseError::InvalidRequiredAcks.code(),
                            format!("acks {} is not 0, 1 or -1", request.acks),
                        );
                    }
                    let Some(outcome) = outcome else {
                        return fail(
                            ResponseError::InvalidRequest.code(),
                            format!("partition {} of {name:?} is named twice", p.index),
                        );
                    };
                    match outcome.await {
                        Ok(Ok(base)) => out.with_base_offset(base),
                        Ok(Err((code, message))) => fail(code, message),
                        Err(_) => {
                            fail(ResponseError::UnknownServerError.code(), "the append was dropped".into())
                        }
                    }
                }
            });
            let partition_responses = futures::future::join_all(partitions).await;
            topics_out.push(
                produce_response::TopicProduceResponse::default()
                    .with_name(topic_name(&name))
                    .with_partition_responses(partition_responses),
            );
        }
        ProduceResponse::default().with_responses(topics_out)
    }

    /// Appends a group of queued batches for one partition and answers each: consecutive
    /// requests of one kind (without a producer id, or of one idempotent producer and epoch
    /// whose sequences follow each other) as one entry. A request whose batches are not valid
    /// is answered `INVALID_RECORD` alone, one of a fenced epoch `INVALID_PRODUCER_EPOCH`; the
    /// others still go.
    pub(crate) async fn append_group(&self, topic: &str, partition: i32, group: Vec<Queued>) {
        let fail_all = |group: Vec<Queued>, code: i16, message: &str| {
            for q in group {
                let _ = q.reply.send(Err((code, message.to_owned())));
            }
        };
        if let Err(e) = self.admit(Permission::Write) {
            return fail_all(group, code_of(&e), e.message());
        }
        let topic = match self.produce_topic(topic, partition).await {
            Ok(t) => t,
            Err(e) => return fail_all(group, code_of(&e), e.message()),
        };
        let Some(index) = usize::try_from(partition).ok().filter(|i| *i < topic.partitions) else {
            let message = format!("topic {:?} has no partition {partition}", topic.name);
            return fail_all(group, ResponseError::UnknownTopicOrPartition.code(), &message);
        };
        // Each request's batches are checked alone, so that one bad request fails alone.
        let mut runs: Vec<Vec<Batches>> = Vec::new();
        for q in group {
            let Some(records) = q.records.filter(|r| !r.is_empty()) else {
                let _ = q.reply.send(Err((ResponseError::InvalidRecord.code(), "no record batches".into())));
                continue;
            };
            // One validation of the batches gives their record count and their producer.
            let checked = kafka::payload_batches(&records)
                .and_then(|batches| Ok((kafka::record_count(&batches)?, batches)))
                .map_err(|e| format!("not valid Kafka record batches: {e}"))
                .and_then(|(count, batches)| Ok((count, idempotence::producer_of(&batches)?)));
            let (count, producer) = match checked {
                Ok(checked) => checked,
                Err(message) => {
                    let _ = q.reply.send(Err((ResponseError::InvalidRecord.code(), message)));
                    continue;
                }
            };
            if let Some(p) = &producer
                && !self.api.admit_producer_epoch(p.id, p.epoch)
            {
                let message = format!("producer {} epoch {} is older than one already seen", p.id, p.epoch);
                let _ = q.reply.send(Err((ResponseError::InvalidProducerEpoch.code(), message)));
                continue;
            }
            let batches = Batches { records, count, producer, reply: q.reply };
            match runs.last_mut() {
                Some(run) if run.last().is_some_and(|last| last.followed_by(&batches)) => run.push(batches),
                _ => runs.push(vec![batches]),
            }
        }
        let target = PartitionRef { namespace: NAMESPACE, stream: &topic.stream, partition: index };
        for run in runs {
            self.append_run(target, run).await;
        }
    }

    /// The topic a produce names, from the cache when it was resolved recently and has the
    /// partition (see [`topics::TopicCache`]), else looked up and cached.
    async fn produce_topic(&self, name: &str, partition: i32) -> ApiResult<Topic> {
        if let Some(topic) = self.shared.topics.get(name)
            && usize::try_from(partition).is_ok_and(|p| p < topic.partitions)
        {
            return Ok(topic);
        }
        let topic = self.topic(name, false).await?;
        self.shared.topics.insert(&topic);
        Ok(topic)
    }

    /// Hands a run of requests to the writer as one entry, or, when together they are over
    /// the largest entry or an idempotent producer's run is refused (a retry may repeat part
    /// of it), each alone in order; each request is answered when its append completes. The
    /// writer commits a partition's appends in the order they are handed over, so the next
    /// group need not wait for this one's PUT (an idempotent producer's append completes
    /// before it is handed over: its requests go one at a time).
    async fn append_run(&self, target: PartitionRef<'_>, run: Vec<Batches>) {
        if run.len() > 1 {
            let mut joined = BytesMut::with_capacity(run.iter().map(|b| b.records.len()).sum());
            for b in &run {
                joined.extend_from_slice(&b.records);
            }
            let records: u64 = run.iter().map(|b| u64::from(b.count)).sum();
            match self.hand_over(target, joined.freeze(), run[0].producer, records).await {
                Ok(outcome) => {
                    tokio::spawn(async move {
                        match outcome.await {
                            Ok(mut base) => {
                                for b in run {
                                    let _ = b.reply.send(Ok(base));
                                    base += i64::from(b.count);
                                }
                            }
                            Err(e) => {
                                for b in run {
                                    let _ = b.reply.send(Err(Self::append_error(&e, b.producer)));
                                }
                            }
                        }
                    });
                    return;
                }
                Err(e) if e.kind() == ErrorKind::TooLarge || e.kind() == ErrorKind::OutOfSequence => {}
                Err(e) => {
                    for b in run {
                        let _ = b.reply.send(Err(Self::append_error(&e, b.producer)));
                    }
                    return;
                }
            }
        }
        for b in run {
            match self.hand_over(target, b.records, b.producer, u64::from(b.count)).await {
                Ok(outcome) => {
                    tokio::spawn(async move {
                        let outcome = outcome.await;
                        let _ = b.reply.send(outcome.map_err(|e| Self::append_error(&e, b.producer)));
                    });
                }
                Err(e) => {
                    let _ = b.reply.send(Err(Self::append_error(&e, b.producer)));
                }
            }
        }
    }

    /// The Kafka error of a failed append of `producer`'s batches: an idempotent producer's
    /// sequence below the next expected one was appended before (`DUPLICATE_SEQUENCE_NUMBER`,
    /// which clients count a success); above, it is a gap; with no state at all (expired
    /// while idle), `UNKNOWN_PRODUCER_ID`.
    fn append_error(e: &ApiError, producer: Option<BatchProducer>) -> (i16, String) {
        // As Kafka does for a producer whose state expired: the client resets its sequence.
        if e.kind() == ErrorKind::OutOfSequence && producer.is_some() && e.unknown_producer() {
            return (ResponseError::UnknownProducerId.code(), e.message().to_owned());
        }
        if let (ErrorKind::OutOfSequence, Some(p), Some(next)) = (e.kind(), producer, e.next_sequence())
            && (p.base_sequence as u64) < next
        {
            return (ResponseError::DuplicateSequenceNumber.code(), e.message().to_owned());
        }
        (produce_code_of(e), e.message().to_owned())
    }

    /// Hands one entry of record batches of `records` records to the writer (through the
    /// service layer's idempotent-producer path when they have a producer id): returns once
    /// its place in the partition's order is fixed, with a future of its first offset.
    async fn hand_over(
        &self,
        target: PartitionRef<'_>,
        payload: Bytes,
        producer: Option<BatchProducer>,
        records: u64,
    ) -> ApiResult<futures::future::BoxFuture<'static, ApiResult<i64>>> {
        use futures::FutureExt as _;
        let input = ProduceInput::KafkaBatches { payload, record_count: None };
        let options = ProduceOptions {
            producer: producer.map(|p| p.sequence(records)).transpose()?,
            ..ProduceOptions::default()
        };
        let outcomes = match self.api.produce_pipelined(self.caller(), target, input, options).await {
            // The cached topic's stream was dropped (or replaced): look it up again next time.
            Err(e) if e.kind() == ErrorKind::NotFound => {
                self.shared.topics.forget_stream(target.stream);
                return Err(e);
            }
            other => other?,
        };
        Ok(async move {
            match outcomes.await?.into_iter().next() {
                Some(Ok(ack)) => Ok(ack.offset as i64),
                Some(Err(e)) => Err(e.error),
                None => Err(ApiError::new(ErrorKind::Internal, "the append gave no outcome")),
            }
        }
        .boxed())
    }

    /// A new producer id, unique across front-end processes, at epoch 0. As Kafka does for a
    /// producer without a transactional id, a request naming its current id and epoch (a
    /// client bumping its epoch, KIP-360) also gets a new id. Transactional producers are
    /// refused (`docs/kafka.md`).
    pub(crate) async fn init_producer_id(
        &self,
        request: InitProducerIdRequest,
        _version: i16,
    ) -> InitProducerIdResponse {
        let refuse = |code: i16| {
            InitProducerIdResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
        };
        if request.transactional_id.is_some() {
            return refuse(TRANSACTIONS_REFUSED.code());
        }
        if let Err(e) = self.admit(Permission::Write) {
            return refuse(code_of(&e));
        }
        match self.api.new_producer_id(self.caller(), NAMESPACE).await {
            Ok(id) => {
                InitProducerIdResponse::default().with_producer_id(ProducerId(id)).with_producer_epoch(0)
            }
            Err(e) => refuse(code_of(&e)),
        }
    }
}
