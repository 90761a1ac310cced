//! Fetch: every partition read once without waiting, then, while fewer than `min_bytes` are
//! there, a waiting read of each at once; entries come back whole, their batches' offsets
//! assigned.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use lakestream_format::kafka::NAMESPACE;
use lakestream_service::api::{ApiError, ApiResult, FetchParams, Offsets, PartitionRef, ReadBatch};
use lakestream_service::auth::Permission;
use tokio::time::Instant;

use super::{Handler, topic_name};
use crate::errors::code_of;
use crate::topics::Topic;

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

impl Handler {
    /// One read of a partition from `from`, waiting up to `wait` when nothing is there.
    pub(super) async fn read(
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

    pub(super) async fn offsets(&self, topic: &Topic, partition: usize) -> ApiResult<Offsets> {
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
}
