//! One method per served API: Kafka request in, Kafka response out, every operation through
//! the service layer ([`Api`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use lakestream_format::kafka::NAMESPACE;
use lakestream_service::api::ReadBatch;
use lakestream_service::api::{
    Api, ApiError, ApiResult, ErrorKind, FetchParams, Offsets, PartitionRef, ProduceInput, ProduceOptions,
};
use lakestream_service::auth::{Caller, Permission};
use tokio::sync::oneshot;
use tokio::time::Instant;
use uuid::Uuid;

use crate::appends::{AppendResult, Queued};
use crate::conn::SERVED;
use crate::errors::{admin_code_of, code_of, produce_code_of};
use crate::idempotence::{self, BatchProducer};
use crate::topics::{self, Topic};
use crate::{Settings, Shared};

/// The answer to a transactional producer's FindCoordinator and InitProducerId: transactions
/// are not served (`docs/kafka.md`). No transactional id is allowed, and this is the one code
/// both librdkafka and the Java client treat as final there (librdkafka retries every other
/// FindCoordinator error until its timeout).
pub(crate) const TRANSACTIONS_REFUSED: ResponseError = ResponseError::TransactionalIdAuthorizationFailed;

/// The cluster id every front end reports: all of them serve one deployment.
const CLUSTER_ID: &str = "lakestream";

/// Serves the requests of one connection.
#[derive(Debug, Clone)]
pub(crate) struct Handler {
    pub(crate) api: Api,
    pub settings: Arc<Settings>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) peer: SocketAddr,
    /// Who the connection's client is, as authenticated when it connected (Kafka clients
    /// present no bearer token: with tokens configured, it is anonymous and every request is
    /// refused).
    caller: Caller,
}

pub(crate) fn text(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

pub(crate) fn topic_name(name: &str) -> TopicName {
    TopicName(text(name))
}

/// The versions this front end serves, for ApiVersions.
fn api_keys() -> Vec<api_versions_response::ApiVersion> {
    SERVED
        .iter()
        .map(|&(key, min, max)| {
            api_versions_response::ApiVersion::default()
                .with_api_key(key as i16)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect()
}

/// The version-0 answer to an ApiVersions request of a version not served: as Kafka's
/// broker answers, the error and ApiVersions' own range only (the client retries with it).
pub(crate) fn api_versions_unsupported() -> ApiVersionsResponse {
    let own = api_keys().into_iter().filter(|k| k.api_key == ApiKey::ApiVersions as i16).collect();
    ApiVersionsResponse::default()
        .with_error_code(ResponseError::UnsupportedVersion.code())
        .with_api_keys(own)
}

/// One partition's fetch in progress.
struct PartitionFetch {
    topic: Option<Topic>,
    partition: i32,
    offset: i64,
    max_bytes: usize,
    error: i16,
    high_watermark: i64,
    log_start: i64,
    /// The entries read so far, offsets assigned, back to back.
    records: BytesMut,
    /// Where the next read starts.
    next: u64,
}

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
    pub(crate) fn new(api: Api, settings: Arc<Settings>, shared: Arc<Shared>, peer: SocketAddr) -> Self {
        let caller = api.authenticate(None).unwrap_or_else(|_| Caller::anonymous());
        Handler { api, settings, shared, peer, caller }
    }

    /// Admits one request: the connection's caller, the client's rate limit (counting the
    /// peer's address) and `needed` on the topics' namespace. The operations the request then
    /// calls check their own permissions against the same caller.
    pub(crate) fn admit(&self, needed: Permission) -> ApiResult<()> {
        self.api.throttle(&self.caller, Some(self.peer.ip()))?;
        self.api.authorize(&self.caller, Some(NAMESPACE), needed)
    }

    /// The connection's caller.
    pub(crate) fn caller(&self) -> &Caller {
        &self.caller
    }

    fn node(&self) -> BrokerId {
        BrokerId(self.settings.node_id)
    }

    pub(crate) async fn api_versions(
        &self,
        _request: ApiVersionsRequest,
        _version: i16,
    ) -> ApiVersionsResponse {
        ApiVersionsResponse::default().with_api_keys(api_keys())
    }

    /// Looks a topic up, creating it when `create` and it does not exist.
    pub(crate) async fn topic(&self, name: &str, create: bool) -> ApiResult<Topic> {
        if let Some(topic) = topics::find(&self.api, self.caller(), name).await? {
            return Ok(topic);
        }
        if create {
            self.admit(Permission::Admin)?;
            topics::check_name(name)?;
            match topics::create(
                &self.api,
                self.caller(),
                self.settings.tokens.as_ref(),
                name,
                self.settings.default_partitions,
            )
            .await
            {
                // Another client created it meanwhile.
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                other => return other,
            }
            if let Some(topic) = topics::find(&self.api, self.caller(), name).await? {
                return Ok(topic);
            }
        }
        Err(ApiError::new(ErrorKind::NotFound, format!("topic {name:?} does not exist")))
    }

    fn metadata_topic(
        &self,
        name: &str,
        found: ApiResult<Topic>,
    ) -> metadata_response::MetadataResponseTopic {
        let out = metadata_response::MetadataResponseTopic::default().with_name(Some(topic_name(name)));
        match found {
            Err(e) => out.with_error_code(match e.kind() {
                ErrorKind::InvalidArgument => ResponseError::InvalidTopicException.code(),
                _ => code_of(&e),
            }),
            Ok(topic) => out.with_topic_id(topic.id).with_partitions(
                (0..topic.partitions as i32)
                    .map(|index| {
                        metadata_response::MetadataResponsePartition::default()
                            .with_partition_index(index)
                            .with_leader_id(self.node())
                            .with_leader_epoch(0)
                            .with_replica_nodes(vec![self.node()])
                            .with_isr_nodes(vec![self.node()])
                    })
                    .collect(),
            ),
        }
    }

    pub(crate) async fn metadata(&self, request: MetadataRequest, version: i16) -> MetadataResponse {
        // Every registered front-end process (a group's coordinator may be another one); this
        // one leads every partition.
        let brokers = self
            .shared
            .coordinator
            .brokers()
            .await
            .into_iter()
            .map(|(node_id, host, port)| {
                metadata_response::MetadataResponseBroker::default()
                    .with_node_id(BrokerId(node_id))
                    .with_host(text(host))
                    .with_port(port)
            })
            .collect();
        let response = MetadataResponse::default()
            .with_brokers(brokers)
            .with_cluster_id(Some(text(CLUSTER_ID)))
            .with_controller_id(self.node());
        let allow_create =
            self.settings.auto_create_topics && (version < 4 || request.allow_auto_topic_creation);
        let all = match &request.topics {
            None => true,
            Some(list) => version == 0 && list.is_empty(),
        };
        let mut out = Vec::new();
        if let Err(e) = self.admit(Permission::Read) {
            // Without a topic to name, the refusal is reported on each one asked for.
            for t in request.topics.iter().flatten() {
                let name = t.name.as_ref().map_or(String::new(), |n| n.0.to_string());
                out.push(self.metadata_topic(&name, Err(e.clone())));
            }
            return response.with_topics(out);
        }
        if all {
            match topics::list(&self.api, self.caller()).await {
                Ok(list) => out.extend(list.into_iter().map(|t| self.metadata_topic(&t.name.clone(), Ok(t)))),
                Err(e) => tracing::warn!(error = %e, "Kafka Metadata: listing topics failed"),
            }
            return response.with_topics(out);
        }
        let mut by_id: Option<Vec<Topic>> = None;
        for requested in request.topics.unwrap_or_default() {
            match requested.name {
                Some(name) => {
                    let name = name.0.to_string();
                    let found = self.topic(&name, allow_create).await;
                    out.push(self.metadata_topic(&name, found));
                }
                None => {
                    if by_id.is_none() {
                        by_id = Some(topics::list(&self.api, self.caller()).await.unwrap_or_default());
                    }
                    let found = by_id.iter().flatten().find(|t| t.id == requested.topic_id).cloned();
                    out.push(match found {
                        Some(t) => self.metadata_topic(&t.name.clone(), Ok(t)),
                        None => metadata_response::MetadataResponseTopic::default()
                            .with_topic_id(requested.topic_id)
                            .with_error_code(ResponseError::UnknownTopicId.code()),
                    });
                }
            }
        }
        response.with_topics(out)
    }

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
            let checked = lakestream_format::kafka::count_records(&records)
                .map_err(|e| format!("not valid Kafka record batches: {e}"))
                .and_then(|count| Ok((count, idempotence::producer_of(&records)?)));
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

    /// One read of a partition from `from`, waiting up to `wait` when nothing is there.
    async fn read(
        &self,
        topic: &Topic,
        partition: usize,
        from: u64,
        max_bytes: usize,
        wait: Duration,
    ) -> ApiResult<ReadBatch> {
        let target = PartitionRef { namespace: NAMESPACE, stream: &topic.stream, partition };
        let params = FetchParams {
            offset: from,
            max_bytes: Some(max_bytes.max(1)),
            max_wait_ms: wait.as_millis() as u64,
        };
        self.api.fetch(self.caller(), target, params).await
    }

    async fn offsets(&self, topic: &Topic, partition: usize) -> ApiResult<Offsets> {
        self.api
            .offsets(self.caller(), PartitionRef { namespace: NAMESPACE, stream: &topic.stream, partition })
            .await
    }

    /// Appends a read's entries to `f`, their batches' offsets assigned.
    fn take(f: &mut PartitionFetch, batch: ReadBatch) {
        for entry in batch.entries {
            match lakestream_format::kafka::assign_offsets(&entry.payload, entry.offset) {
                Ok(bytes) => f.records.extend_from_slice(&bytes),
                Err(e) => {
                    // An entry that is not Kafka record batches (written to this stream over
                    // another API): the partition cannot be served as Kafka.
                    tracing::warn!(offset = entry.offset, error = %e, "Kafka Fetch: entry is not Kafka record batches");
                    if f.records.is_empty() {
                        f.error = ResponseError::CorruptMessage.code();
                    }
                    return;
                }
            }
        }
        f.next = f.next.max(batch.next_offset);
        f.high_watermark = f.high_watermark.max(batch.next_offset as i64);
    }

    /// The first read of a partition, not waiting, and its offsets.
    async fn first_read(&self, mut f: PartitionFetch) -> PartitionFetch {
        let Some(topic) = f.topic.clone() else { return f };
        let Ok(partition) = usize::try_from(f.partition) else {
            f.error = ResponseError::UnknownTopicOrPartition.code();
            return f;
        };
        if f.offset < 0 {
            f.error = ResponseError::OffsetOutOfRange.code();
            return f;
        }
        let offsets = match self.offsets(&topic, partition).await {
            Ok(o) => o,
            Err(e) => {
                f.error = code_of(&e);
                return f;
            }
        };
        f.high_watermark = offsets.next_offset as i64;
        f.log_start = offsets.first_offset as i64;
        if (f.offset as u64) < offsets.first_offset || (f.offset as u64) > offsets.next_offset {
            f.error = ResponseError::OffsetOutOfRange.code();
            return f;
        }
        if f.offset as u64 == offsets.next_offset {
            return f; // caught up: the waiting read, if any, comes next
        }
        match self.read(&topic, partition, f.next, f.max_bytes, Duration::ZERO).await {
            Ok(batch) => Self::take(&mut f, batch),
            Err(e) => f.error = code_of(&e),
        }
        f
    }

    pub(crate) async fn fetch(&self, request: FetchRequest, _version: i16) -> FetchResponse {
        let started = Instant::now();
        let admitted = self.admit(Permission::Read);
        let wait = Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0))
            .min(self.settings.max_fetch_wait);
        let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0);
        let max_bytes = usize::try_from(request.max_bytes).unwrap_or(usize::MAX).max(1);
        // The request's layout: topics in order, each with its partitions in order.
        let mut layout: Vec<(String, Vec<usize>)> = Vec::new();
        let mut fetches: Vec<PartitionFetch> = Vec::new();
        for t in request.topics {
            let name = t.topic.0.to_string();
            let (topic, error) = match &admitted {
                Err(e) => (None, code_of(e)),
                Ok(()) => match self.topic(&name, false).await {
                    Ok(topic) => (Some(topic), 0),
                    Err(e) => (None, code_of(&e)),
                },
            };
            let mut indexes = Vec::new();
            for p in t.partitions {
                let error = match &topic {
                    Some(topic) if p.partition >= 0 && (p.partition as usize) < topic.partitions => error,
                    Some(_) => ResponseError::UnknownTopicOrPartition.code(),
                    None => error,
                };
                indexes.push(fetches.len());
                fetches.push(PartitionFetch {
                    topic: if error == 0 { topic.clone() } else { None },
                    partition: p.partition,
                    offset: p.fetch_offset,
                    max_bytes: usize::try_from(p.partition_max_bytes).unwrap_or(0).max(1),
                    error,
                    high_watermark: -1,
                    log_start: -1,
                    records: BytesMut::new(),
                    next: u64::try_from(p.fetch_offset).unwrap_or(0),
                });
            }
            layout.push((name, indexes));
        }
        // Every partition once, without waiting.
        let mut fetches: Vec<PartitionFetch> =
            futures::future::join_all(fetches.into_iter().map(|f| self.first_read(f))).await;
        let total = |fs: &[PartitionFetch]| fs.iter().map(|f| f.records.len()).sum::<usize>();
        // Then, while fewer than min_bytes are there, wait for more on every partition at
        // once, until min_bytes arrive or max_wait passes.
        let remaining = wait.saturating_sub(started.elapsed());
        if total(&fetches) < min_bytes.max(1) && !remaining.is_zero() {
            let mut waiting: FuturesUnordered<_> = fetches
                .iter()
                .enumerate()
                .filter(|(_, f)| f.error == 0 && f.topic.is_some())
                .map(|(i, f)| {
                    let topic = f.topic.clone();
                    let (partition, from, budget) =
                        (f.partition as usize, f.next, f.max_bytes.saturating_sub(f.records.len()));
                    async move {
                        let Some(topic) = topic else { return (i, Err(ApiError::invalid("no topic"))) };
                        (i, self.read(&topic, partition, from, budget, remaining).await)
                    }
                })
                .collect();
            let mut have = total(&fetches);
            while let Some((i, result)) = waiting.next().await {
                match result {
                    Ok(batch) => {
                        let before = fetches[i].records.len();
                        Self::take(&mut fetches[i], batch);
                        have += fetches[i].records.len() - before;
                    }
                    Err(e) => tracing::debug!(error = %e, "Kafka Fetch: waiting read failed"),
                }
                if have >= min_bytes.max(1) {
                    break; // the other reads are dropped: reads are safe to abandon
                }
            }
        }
        // The response's max_bytes: whole partitions past it are left out, except the first
        // with data, so that a batch larger than the limit is still returned (as Kafka does).
        let mut sent = 0usize;
        let mut responses = Vec::with_capacity(layout.len());
        for (name, indexes) in layout {
            let mut partitions = Vec::with_capacity(indexes.len());
            for i in indexes {
                let f = &mut fetches[i];
                let mut records = std::mem::take(&mut f.records).freeze();
                if sent > 0 && sent + records.len() > max_bytes {
                    records = Bytes::new();
                }
                sent += records.len();
                partitions.push(
                    fetch_response::PartitionData::default()
                        .with_partition_index(f.partition)
                        .with_error_code(f.error)
                        .with_high_watermark(f.high_watermark)
                        .with_last_stable_offset(f.high_watermark)
                        .with_log_start_offset(f.log_start)
                        .with_aborted_transactions(None)
                        .with_records(Some(records)),
                );
            }
            responses.push(
                fetch_response::FetchableTopicResponse::default()
                    .with_topic(topic_name(&name))
                    .with_partitions(partitions),
            );
        }
        FetchResponse::default().with_responses(responses)
    }

    /// The first entry whose timestamp is at or after `timestamp`: a binary search over the
    /// partition's offsets, one read of one entry per step (entry timestamps are the times
    /// their index records were made, which do not decrease along a log).
    async fn offset_for_time(
        &self,
        topic: &Topic,
        partition: usize,
        timestamp: i64,
    ) -> ApiResult<(i64, i64)> {
        let offsets = self.offsets(topic, partition).await?;
        let (mut lo, mut hi) = (offsets.first_offset, offsets.next_offset);
        let mut found_ts = -1;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let batch = self.read(topic, partition, mid, 1, Duration::ZERO).await?;
            let Some(entry) = batch.entries.into_iter().next() else {
                break; // trimmed or gone meanwhile: what remains is above
            };
            if entry.timestamp_ms >= timestamp {
                hi = entry.offset.min(hi);
                found_ts = entry.timestamp_ms;
                if entry.offset <= lo {
                    break;
                }
            } else {
                lo = entry.end_offset();
            }
        }
        if lo >= offsets.next_offset || found_ts < 0 {
            return Ok((-1, -1));
        }
        Ok((lo as i64, found_ts))
    }

    async fn list_offset(&self, topic: &Topic, partition: usize, timestamp: i64) -> ApiResult<(i64, i64)> {
        match timestamp {
            // latest
            -1 => Ok((self.offsets(topic, partition).await?.next_offset as i64, -1)),
            // earliest, earliest local
            -2 | -4 => Ok((self.offsets(topic, partition).await?.first_offset as i64, -1)),
            // max timestamp: the last entry's, entry timestamps not decreasing
            -3 => {
                let offsets = self.offsets(topic, partition).await?;
                if offsets.next_offset <= offsets.first_offset {
                    return Ok((-1, -1));
                }
                let last = offsets.next_offset - 1;
                let batch = self.read(topic, partition, last, 1, Duration::ZERO).await?;
                Ok(batch.entries.first().map_or((-1, -1), |e| (last as i64, e.timestamp_ms)))
            }
            // latest tiered: nothing is tiered in Kafka's sense
            -5 => Ok((-1, -1)),
            t if t >= 0 => self.offset_for_time(topic, partition, t).await,
            t => Err(ApiError::invalid(format!("timestamp {t} is not a time or a known special value"))),
        }
    }

    pub(crate) async fn list_offsets(
        &self,
        request: ListOffsetsRequest,
        _version: i16,
    ) -> ListOffsetsResponse {
        let admitted = self.admit(Permission::Read);
        let mut topics_out = Vec::with_capacity(request.topics.len());
        for t in request.topics {
            let name = t.name.0.to_string();
            let topic = match &admitted {
                Err(e) => Err(e.clone()),
                Ok(()) => self.topic(&name, false).await,
            };
            let partitions = t.partitions.into_iter().map(|p| {
                let topic = &topic;
                async move {
                    let out = list_offsets_response::ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_timestamp(-1)
                        .with_offset(-1);
                    let topic = match topic {
                        Ok(t) => t,
                        Err(e) => return out.with_error_code(code_of(e)),
                    };
                    let partition = match usize::try_from(p.partition_index) {
                        Ok(i) if i < topic.partitions => i,
                        _ => return out.with_error_code(ResponseError::UnknownTopicOrPartition.code()),
                    };
                    match self.list_offset(topic, partition, p.timestamp).await {
                        Ok((offset, timestamp)) => out.with_offset(offset).with_timestamp(timestamp),
                        Err(e) => out.with_error_code(code_of(&e)),
                    }
                }
            });
            topics_out.push(
                list_offsets_response::ListOffsetsTopicResponse::default()
                    .with_name(topic_name(&name))
                    .with_partitions(futures::future::join_all(partitions).await),
            );
        }
        ListOffsetsResponse::default().with_topics(topics_out)
    }

    pub(crate) async fn create_topics(
        &self,
        request: CreateTopicsRequest,
        _version: i16,
    ) -> CreateTopicsResponse {
        let admitted = self.admit(Permission::Admin);
        let mut results = Vec::with_capacity(request.topics.len());
        let mut seen: HashMap<String, usize> = HashMap::new();
        for t in &request.topics {
            *seen.entry(t.name.0.to_string()).or_default() += 1;
        }
        for t in request.topics {
            let name = t.name.0.to_string();
            let out = create_topics_response::CreatableTopicResult::default()
                .with_name(topic_name(&name))
                .with_num_partitions(-1)
                .with_replication_factor(-1);
            let fail = |code: i16, message: String| {
                out.clone().with_error_code(code).with_error_message(Some(text(message)))
            };
            if let Err(e) = &admitted {
                results.push(fail(code_of(e), e.message().to_owned()));
                continue;
            }
            if seen.get(&name).copied().unwrap_or(0) > 1 {
                results.push(fail(
                    ResponseError::InvalidRequest.code(),
                    format!("topic {name:?} is named more than once"),
                ));
                continue;
            }
            let partitions = match t.num_partitions {
                -1 if !t.assignments.is_empty() => t.assignments.len() as u32,
                -1 => self.settings.default_partitions,
                n if n >= 1 => n as u32,
                n => {
                    results.push(fail(
                        ResponseError::InvalidPartitions.code(),
                        format!("{n} partitions: at least 1, or -1 for the default"),
                    ));
                    continue;
                }
            };
            if t.replication_factor == 0 || t.replication_factor < -1 {
                results.push(fail(
                    ResponseError::InvalidReplicationFactor.code(),
                    format!("replication factor {}: at least 1, or -1 for the default", t.replication_factor),
                ));
                continue;
            }
            if let Err(e) = topics::check_name(&name) {
                results.push(fail(ResponseError::InvalidTopicException.code(), e.message().to_owned()));
                continue;
            }
            if request.validate_only {
                let exists = topics::find(&self.api, self.caller(), &name).await;
                results.push(match exists {
                    Ok(Some(_)) => fail(
                        ResponseError::TopicAlreadyExists.code(),
                        format!("topic {name:?} already exists"),
                    ),
                    Ok(None) => out.with_num_partitions(partitions as i32).with_replication_factor(1),
                    Err(e) => fail(admin_code_of(&e), e.message().to_owned()),
                });
                continue;
            }
            results.push(
                match topics::create(
                    &self.api,
                    self.caller(),
                    self.settings.tokens.as_ref(),
                    &name,
                    partitions,
                )
                .await
                {
                    Ok(topic) => out
                        .with_topic_id(topic.id)
                        .with_num_partitions(topic.partitions as i32)
                        .with_replication_factor(1),
                    Err(e) => fail(admin_code_of(&e), e.message().to_owned()),
                },
            );
        }
        CreateTopicsResponse::default().with_topics(results)
    }

    pub(crate) async fn delete_topics(
        &self,
        request: DeleteTopicsRequest,
        version: i16,
    ) -> DeleteTopicsResponse {
        let admitted = self.admit(Permission::Admin);
        // Up to v5 topics are named in `topic_names`; from v6 in `topics`, by name or ID.
        let mut wanted: Vec<(Option<String>, Uuid)> =
            request.topic_names.iter().map(|n| (Some(n.0.to_string()), Uuid::nil())).collect();
        wanted.extend(request.topics.iter().map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id)));
        let mut all: Option<Vec<Topic>> = None;
        let mut responses = Vec::with_capacity(wanted.len());
        for (name, id) in wanted {
            let out = delete_topics_response::DeletableTopicResult::default()
                .with_name(name.as_deref().map(topic_name))
                .with_topic_id(id);
            let fail = |code: i16, message: String| {
                let out = out.clone().with_error_code(code);
                if version >= 5 { out.with_error_message(Some(text(message))) } else { out }
            };
            if let Err(e) = &admitted {
                responses.push(fail(code_of(e), e.message().to_owned()));
                continue;
            }
            let found = match &name {
                Some(name) => topics::find(&self.api, self.caller(), name).await,
                None => {
                    if all.is_none() {
                        all = Some(topics::list(&self.api, self.caller()).await.unwrap_or_default());
                    }
                    Ok(all.iter().flatten().find(|t| t.id == id).cloned())
                }
            };
            responses.push(match found {
                Ok(Some(topic)) => {
                    self.shared.topics.forget(&topic.name);
                    match topics::delete(&self.api, self.caller(), &topic).await {
                        Ok(()) => out.with_name(Some(topic_name(&topic.name))).with_topic_id(topic.id),
                        Err(e) => fail(admin_code_of(&e), e.message().to_owned()),
                    }
                }
                Ok(None) if name.is_none() => {
                    fail(ResponseError::UnknownTopicId.code(), format!("no topic has ID {id}"))
                }
                Ok(None) => fail(ResponseError::UnknownTopicOrPartition.code(), "no such topic".into()),
                Err(e) => fail(admin_code_of(&e), e.message().to_owned()),
            });
        }
        DeleteTopicsResponse::default().with_responses(responses)
    }

    pub(crate) async fn create_partitions(
        &self,
        request: CreatePartitionsRequest,
        _version: i16,
    ) -> CreatePartitionsResponse {
        let admitted = self.admit(Permission::Admin);
        let mut results = Vec::with_capacity(request.topics.len());
        for t in request.topics {
            let name = t.name.0.to_string();
            let out = create_partitions_response::CreatePartitionsTopicResult::default()
                .with_name(topic_name(&name));
            let fail = |code: i16, message: String| {
                out.clone().with_error_code(code).with_error_message(Some(text(message)))
            };
            if let Err(e) = &admitted {
                results.push(fail(code_of(e), e.message().to_owned()));
                continue;
            }
            let topic = match topics::find(&self.api, self.caller(), &name).await {
                Ok(Some(topic)) => topic,
                Ok(None) => {
                    results.push(fail(ResponseError::UnknownTopicOrPartition.code(), "no such topic".into()));
                    continue;
                }
                Err(e) => {
                    results.push(fail(admin_code_of(&e), e.message().to_owned()));
                    continue;
                }
            };
            if t.count <= topic.partitions as i32 {
                results.push(fail(
                    ResponseError::InvalidPartitions.code(),
                    format!(
                        "topic {name:?} has {} partitions; the new count {} must be more",
                        topic.partitions, t.count
                    ),
                ));
                continue;
            }
            if request.validate_only {
                results.push(out);
                continue;
            }
            self.shared.topics.forget(&name);
            results.push(
                match self
                    .api
                    .add_partitions(self.caller(), NAMESPACE, &topic.stream, Some(t.count as u32), None)
                    .await
                {
                    Ok(_) => out,
                    Err(e) => fail(admin_code_of(&e), e.message().to_owned()),
                },
            );
        }
        CreatePartitionsResponse::default().with_results(results)
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
