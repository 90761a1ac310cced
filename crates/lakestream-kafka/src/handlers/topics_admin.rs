//! Topic administration: CreateTopics, DeleteTopics, CreatePartitions.

use std::collections::HashMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use lakestream_format::kafka::NAMESPACE;
use lakestream_service::auth::Permission;
use uuid::Uuid;

use super::{Handler, text, topic_name};
use crate::errors::{admin_code_of, code_of};
use crate::topics::{self, Topic};

impl Handler {
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
}
