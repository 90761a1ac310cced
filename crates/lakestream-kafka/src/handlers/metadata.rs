//! Metadata: every registered front-end process as a broker, this one leading every
//! partition; topics named by name or by ID, created when automatic creation is on.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use lakestream_service::api::{ApiResult, ErrorKind};
use lakestream_service::auth::Permission;

use super::{Handler, text, topic_name};
use crate::errors::code_of;
use crate::topics::{self, Topic};

/// The cluster id every front end reports: all of them serve one deployment.
const CLUSTER_ID: &str = "lakestream";

impl Handler {
    fn node(&self) -> BrokerId {
        BrokerId(self.settings.node_id)
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
}
