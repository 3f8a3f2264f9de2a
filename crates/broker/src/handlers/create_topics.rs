//! CreateTopics (key 19): validate name, partitions, replication factor and
//! configs, then record the topic in the metadata log and create its logs.
//! `validate_only` checks without creating. v5+ answers with the topic's
//! effective configs.

use std::sync::Arc;

use proto_kafka::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use proto_kafka::messages::{CreateTopicsRequest, CreateTopicsResponse};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;

use super::Ctx;
use crate::broker::{ApiError, Broker};

pub(crate) const VERSIONS: (i16, i16) = (2, 7);

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: CreateTopicsRequest,
    ctx: &Ctx,
) -> CreateTopicsResponse {
    let mut resp = CreateTopicsResponse::default();
    let mut seen = std::collections::HashSet::new();
    for t in req.topics {
        let name = t.name.0.to_string();
        let mut r = CreatableTopicResult::default();
        r.name = t.name.clone();
        r.num_partitions = -1;
        r.replication_factor = -1;
        r.configs = None;
        r.error_message = None;
        let result = if !seen.insert(name.clone()) {
            Err(ApiError::new(
                ResponseError::InvalidRequest,
                format!("Topic '{name}' appears more than once in the request"),
            ))
        } else if !t.assignments.is_empty() {
            check_assignments(broker, &t.assignments).and_then(|partitions| {
                let configs = configs(&t.configs)?;
                broker.create_topic(&name, partitions, 1, &configs, req.validate_only)
            })
        } else {
            configs(&t.configs).and_then(|configs| {
                broker.create_topic(
                    &name,
                    t.num_partitions,
                    t.replication_factor,
                    &configs,
                    req.validate_only,
                )
            })
        };
        match result {
            Ok(topic) if ctx.version < 5 => {
                let _ = topic;
            }
            Ok(topic) => {
                if ctx.version >= 7 {
                    r.topic_id = topic.id;
                }
                r.num_partitions = topic.partitions.len() as i32;
                r.replication_factor = 1;
                if let Ok(entries) = super::describe_configs::topic_entries(broker, &topic) {
                    r.configs = Some(
                        entries
                            .into_iter()
                            .map(|e| {
                                let mut c = CreatableTopicConfigs::default();
                                c.name = StrBytes::from_string(e.name);
                                c.value = e.value.map(StrBytes::from_string);
                                c.read_only = e.read_only;
                                c.config_source = e.source;
                                c.is_sensitive = e.sensitive;
                                c
                            })
                            .collect(),
                    );
                }
            }
            Err(e) => {
                r.error_code = e.code.code();
                r.error_message = e.message.map(StrBytes::from_string);
            }
        }
        resp.topics.push(r);
    }
    resp
}

fn configs(
    configs: &[proto_kafka::messages::create_topics_request::CreatableTopicConfig],
) -> Result<Vec<(String, String)>, ApiError> {
    configs
        .iter()
        .map(|c| match &c.value {
            Some(v) => Ok((c.name.to_string(), v.to_string())),
            None => Err(ApiError::new(
                ResponseError::InvalidConfig,
                format!(
                    "Null value not supported for topic config {}",
                    c.name.as_str()
                ),
            )),
        })
        .collect()
}

/// Manual assignments must put every partition on this node, numbered
/// 0..n; returns n.
fn check_assignments(
    broker: &Broker,
    assignments: &[proto_kafka::messages::create_topics_request::CreatableReplicaAssignment],
) -> Result<i32, ApiError> {
    let mut indexes: Vec<i32> = assignments.iter().map(|a| a.partition_index).collect();
    indexes.sort_unstable();
    if indexes.iter().enumerate().any(|(i, &p)| p != i as i32) {
        return Err(ApiError::new(
            ResponseError::InvalidReplicaAssignment,
            "Partitions should be a consecutive 0-based integer sequence",
        ));
    }
    for a in assignments {
        if a.broker_ids.len() != 1 || a.broker_ids[0].0 != broker.node_id {
            return Err(ApiError::new(
                ResponseError::InvalidReplicaAssignment,
                format!(
                    "Replica assignment must be [{}] on this single node",
                    broker.node_id
                ),
            ));
        }
    }
    Ok(assignments.len() as i32)
}
