//! ListOffsets: the first and next offsets of a partition, and the first entry at or after a
//! time.

use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use lakestream_service::api::{ApiError, ApiResult};
use lakestream_service::auth::Permission;

use super::{Handler, topic_name};
use crate::errors::code_of;
use crate::topics::Topic;

impl Handler {
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
}
