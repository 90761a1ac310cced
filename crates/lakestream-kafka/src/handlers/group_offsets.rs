//! Committed offsets of consumer groups: OffsetCommit and OffsetFetch, in the service layer's
//! group offset store ([`lakestream_service::groups`]), each commit with the group's
//! generation.

use std::collections::{BTreeMap, HashMap};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use lakestream_format::kafka::NAMESPACE;
use lakestream_service::api::{ErrorKind, PartitionRef};
use lakestream_service::groups::{MAX_METADATA_BYTES, OffsetCommit, SameGeneration};

use super::groups::{code, group_code_of, opt_text};
use super::{Handler, text, topic_name};
use crate::topics;

impl Handler {
    pub(crate) async fn offset_commit(
        &self,
        request: OffsetCommitRequest,
        _version: i16,
    ) -> OffsetCommitResponse {
        let group_id = request.group_id.0.to_string();
        let checked = match self.coordinated(&group_id).await {
            Ok(g) => {
                g.check_commit(
                    &request.member_id,
                    opt_text(request.group_instance_id.as_ref()),
                    request.generation_id_or_member_epoch,
                )
                .await
            }
            Err(e) => Err(e),
        };
        let mut topics_out = Vec::with_capacity(request.topics.len());
        for t in request.topics {
            let name = t.name.0.to_string();
            let topic = match &checked {
                Ok(_) => self.topic(&name, false).await.map_err(|e| match e.kind() {
                    ErrorKind::NotFound => ResponseError::UnknownTopicOrPartition,
                    _ => group_code_of(&e),
                }),
                Err(e) => Err(*e),
            };
            let partitions = t.partitions.into_iter().map(|p| {
                let (topic, group_id, checked) = (&topic, &group_id, &checked);
                async move {
                    let out = offset_commit_response::OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index);
                    let topic = match topic {
                        Ok(t) => t,
                        Err(e) => return out.with_error_code(e.code()),
                    };
                    let generation = match checked {
                        Ok(g) => *g,
                        Err(e) => return out.with_error_code(e.code()),
                    };
                    let Some(partition) =
                        usize::try_from(p.partition_index).ok().filter(|i| *i < topic.partitions)
                    else {
                        return out.with_error_code(ResponseError::UnknownTopicOrPartition.code());
                    };
                    let metadata = p.committed_metadata.map(|m| m.to_string()).unwrap_or_default();
                    if metadata.len() > MAX_METADATA_BYTES {
                        return out.with_error_code(ResponseError::OffsetMetadataTooLarge.code());
                    }
                    let Ok(offset) = u64::try_from(p.committed_offset) else {
                        return out.with_error_code(ResponseError::OffsetOutOfRange.code());
                    };
                    let commit =
                        OffsetCommit { offset, generation: u64::try_from(generation).unwrap_or(0), metadata };
                    let target = PartitionRef { namespace: NAMESPACE, stream: &topic.stream, partition };
                    let caller = self.caller();
                    let outcome = match self
                        .api
                        .commit_offset_with(caller, group_id, target, commit, SameGeneration::Any)
                        .await
                    {
                        Ok(_) => Ok(()),
                        // A newer generation committed here: this member's is stale.
                        Err(e) if e.kind() == ErrorKind::Conflict => Err(ResponseError::IllegalGeneration),
                        // An offset beyond the partition's next offset.
                        Err(e) if e.kind() == ErrorKind::InvalidArgument => {
                            Err(ResponseError::OffsetOutOfRange)
                        }
                        Err(e) if e.kind() == ErrorKind::NotFound => {
                            Err(ResponseError::UnknownTopicOrPartition)
                        }
                        Err(e) => {
                            tracing::debug!(group = %group_id, error = %e, "Kafka OffsetCommit failed");
                            Err(ResponseError::CoordinatorLoadInProgress)
                        }
                    };
                    out.with_error_code(code(outcome))
                }
            });
            topics_out.push(
                offset_commit_response::OffsetCommitResponseTopic::default()
                    .with_name(topic_name(&name))
                    .with_partitions(futures::future::join_all(partitions).await),
            );
        }
        OffsetCommitResponse::default().with_topics(topics_out)
    }

    /// One group's committed offsets: for the named topics' partitions (-1 where none), or,
    /// with no topics named, for every live topic it committed on.
    async fn fetch_offsets(
        &self,
        group_id: &str,
        wanted: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<Vec<(String, Vec<(i32, i64, String)>)>, ResponseError> {
        self.coordinated(group_id).await?;
        let caller = self.caller();
        let committed = self
            .api
            .group_committed_offsets(caller, NAMESPACE, group_id)
            .await
            .map_err(|e| group_code_of(&e))?;
        let by_stream: HashMap<(&str, usize), (i64, &str)> = committed
            .iter()
            .map(|c| {
                (
                    (c.stream.as_str(), c.partition),
                    (i64::try_from(c.offset).unwrap_or(i64::MAX), c.metadata.as_str()),
                )
            })
            .collect();
        let wanted = match wanted {
            Some(w) => w,
            None => {
                let live = topics::list(&self.api, caller).await.map_err(|e| group_code_of(&e))?;
                let mut out: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                for t in &live {
                    for c in committed.iter().filter(|c| c.stream == t.stream) {
                        out.entry(t.name.clone()).or_default().push(c.partition as i32);
                    }
                }
                out.into_iter().collect()
            }
        };
        let mut result = Vec::with_capacity(wanted.len());
        for (name, partitions) in wanted {
            let topic = topics::find(&self.api, caller, &name).await.ok().flatten();
            let offsets = partitions
                .into_iter()
                .map(|p| {
                    let found = topic.as_ref().and_then(|t| {
                        let index = usize::try_from(p).ok()?;
                        by_stream.get(&(t.stream.as_str(), index))
                    });
                    match found {
                        Some((offset, metadata)) => (p, *offset, (*metadata).to_owned()),
                        None => (p, -1, String::new()),
                    }
                })
                .collect();
            result.push((name, offsets));
        }
        Ok(result)
    }

    pub(crate) async fn offset_fetch(
        &self,
        request: OffsetFetchRequest,
        version: i16,
    ) -> OffsetFetchResponse {
        if version >= 8 {
            let mut groups = Vec::with_capacity(request.groups.len());
            for g in request.groups {
                let wanted = g
                    .topics
                    .map(|ts| ts.into_iter().map(|t| (t.name.0.to_string(), t.partition_indexes)).collect());
                let out = offset_fetch_response::OffsetFetchResponseGroup::default()
                    .with_group_id(g.group_id.clone());
                groups.push(match self.fetch_offsets(&g.group_id.0, wanted).await {
                    Err(e) => out.with_error_code(e.code()),
                    Ok(topics) => out.with_topics(
                        topics
                            .into_iter()
                            .map(|(name, partitions)| {
                                offset_fetch_response::OffsetFetchResponseTopics::default()
                                    .with_name(topic_name(&name))
                                    .with_partitions(
                                        partitions
                                            .into_iter()
                                            .map(|(p, offset, metadata)| {
                                                offset_fetch_response::OffsetFetchResponsePartitions::default(
                                                )
                                                .with_partition_index(p)
                                                .with_committed_offset(offset)
                                                .with_committed_leader_epoch(-1)
                                                .with_metadata(Some(text(metadata)))
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    ),
                });
            }
            return OffsetFetchResponse::default().with_groups(groups);
        }
        let wanted = request
            .topics
            .map(|ts| ts.into_iter().map(|t| (t.name.0.to_string(), t.partition_indexes)).collect());
        let partition = |p: i32, offset: i64, metadata: String, error: i16| {
            offset_fetch_response::OffsetFetchResponsePartition::default()
                .with_partition_index(p)
                .with_committed_offset(offset)
                .with_committed_leader_epoch(-1)
                .with_metadata(Some(text(metadata)))
                .with_error_code(error)
        };
        match self.fetch_offsets(&request.group_id.0, wanted.clone()).await {
            Ok(topics) => OffsetFetchResponse::default().with_topics(
                topics
                    .into_iter()
                    .map(|(name, partitions)| {
                        offset_fetch_response::OffsetFetchResponseTopic::default()
                            .with_name(topic_name(&name))
                            .with_partitions(
                                partitions.into_iter().map(|(p, o, m)| partition(p, o, m, 0)).collect(),
                            )
                    })
                    .collect(),
            ),
            // Up to v1 the error is in each partition; from v2 also at the top.
            Err(e) => OffsetFetchResponse::default()
                .with_error_code(if version >= 2 { e.code() } else { 0 })
                .with_topics(
                    wanted
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(name, partitions)| {
                            offset_fetch_response::OffsetFetchResponseTopic::default()
                                .with_name(topic_name(&name))
                                .with_partitions(
                                    partitions
                                        .into_iter()
                                        .map(|p| partition(p, -1, String::new(), e.code()))
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
        }
    }
}
