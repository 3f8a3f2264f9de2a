//! Topic, partition, config and cluster operations of [`Admin`]: create,
//! delete, list and describe topics, add partitions, describe and alter
//! topic configs, describe the cluster. Per-topic failures come back as
//! [`ClientError::Kafka`] with Kafka's error code and name.

use std::collections::BTreeMap;

use proto_kafka::messages::create_partitions_request::CreatePartitionsTopic;
use proto_kafka::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use proto_kafka::messages::delete_topics_request::DeleteTopicState;
use proto_kafka::messages::{
    CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, DescribeClusterRequest,
};
use proto_kafka::protocol::StrBytes;

use super::{msg, name, Admin};
use crate::cluster::{BrokerInfo, TopicInfo};
use crate::error::{ClientError, Result};

const CREATE_TOPICS_MAX: i16 = 7;
const DELETE_TOPICS_MAX: i16 = 6;
const CREATE_PARTITIONS_MAX: i16 = 3;
const DESCRIBE_CLUSTER_MAX: i16 = 1;

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    /// Topic name.
    pub name: String,
    /// Number of partitions (-1 for the broker default).
    pub partitions: i32,
    /// Replication factor (-1 for the broker default).
    pub replication_factor: i16,
    /// Topic configs (`retention.ms`, `cleanup.policy`, ...).
    pub configs: BTreeMap<String, String>,
}

impl NewTopic {
    /// A topic with `partitions` partitions and `replication_factor` replicas.
    pub fn new(name: &str, partitions: i32, replication_factor: i16) -> Self {
        NewTopic {
            name: name.to_string(),
            partitions,
            replication_factor,
            configs: BTreeMap::new(),
        }
    }

    /// Adds a topic config.
    #[must_use]
    pub fn config(mut self, key: &str, value: &str) -> Self {
        self.configs.insert(key.to_string(), value.to_string());
        self
    }
}

/// The cluster as reported by `DescribeCluster` (or Metadata as fallback).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDescription {
    /// Cluster id.
    pub cluster_id: Option<String>,
    /// Controller broker id (-1 when unknown).
    pub controller_id: i32,
    /// Brokers.
    pub brokers: Vec<BrokerInfo>,
}

impl Admin {
    /// Creates one topic.
    pub async fn create_topic(&self, topic: NewTopic) -> Result<()> {
        let mut results = self.create_topics(vec![topic]).await?;
        results.pop().map_or(Ok(()), |(_, r)| r)
    }

    /// Creates topics; returns each topic's outcome in request order.
    pub async fn create_topics(&self, topics: Vec<NewTopic>) -> Result<Vec<(String, Result<()>)>> {
        let mut req = CreateTopicsRequest::default();
        req.timeout_ms = self.timeout_ms();
        for t in &topics {
            let mut ct = CreatableTopic::default();
            ct.name = name(&t.name);
            ct.num_partitions = t.partitions;
            ct.replication_factor = t.replication_factor;
            ct.configs = t
                .configs
                .iter()
                .map(|(k, v)| {
                    let mut c = CreatableTopicConfig::default();
                    c.name = StrBytes::from_string(k.clone());
                    c.value = Some(StrBytes::from_string(v.clone()));
                    c
                })
                .collect();
            req.topics.push(ct);
        }
        let (resp, _) = self
            .cluster
            .send_controller(&req, CREATE_TOPICS_MAX)
            .await?;
        let mut by_name: BTreeMap<String, Result<()>> = resp
            .topics
            .iter()
            .map(|r| {
                let n = r.name.0.as_str().to_string();
                let res = match ClientError::from_code(
                    r.error_code,
                    msg(&r.error_message),
                    format!("create topic {n}"),
                ) {
                    Some(e) => Err(e),
                    None => Ok(()),
                };
                (n, res)
            })
            .collect();
        let created: Vec<String> = by_name
            .iter()
            .filter(|(_, r)| r.is_ok())
            .map(|(n, _)| n.clone())
            .collect();
        if !created.is_empty() {
            // Best effort: make the new topics visible in the cache.
            let _ = self.cluster.refresh(Some(&created)).await;
        }
        Ok(topics
            .into_iter()
            .map(|t| {
                let r = by_name.remove(&t.name).unwrap_or_else(|| {
                    Err(ClientError::Protocol(format!(
                        "no CreateTopics result for {}",
                        t.name
                    )))
                });
                (t.name, r)
            })
            .collect())
    }

    /// Deletes one topic.
    pub async fn delete_topic(&self, topic: &str) -> Result<()> {
        let mut results = self.delete_topics(&[topic]).await?;
        results.pop().map_or(Ok(()), |(_, r)| r)
    }

    /// Deletes topics by name; returns each topic's outcome in request order.
    pub async fn delete_topics(&self, topics: &[&str]) -> Result<Vec<(String, Result<()>)>> {
        let mut req = DeleteTopicsRequest::default();
        req.timeout_ms = self.timeout_ms();
        // v0-5 carry `topic_names`, v6+ `topics`; encoding ignores the other.
        req.topic_names = topics.iter().map(|t| name(t)).collect();
        req.topics = topics
            .iter()
            .map(|t| {
                let mut s = DeleteTopicState::default();
                s.name = Some(name(t));
                s
            })
            .collect();
        let (resp, _) = self
            .cluster
            .send_controller(&req, DELETE_TOPICS_MAX)
            .await?;
        let mut by_name: BTreeMap<String, Result<()>> = resp
            .responses
            .iter()
            .filter_map(|r| {
                let n = r.name.as_ref()?.0.as_str().to_string();
                let res = match ClientError::from_code(
                    r.error_code,
                    msg(&r.error_message),
                    format!("delete topic {n}"),
                ) {
                    Some(e) => Err(e),
                    None => Ok(()),
                };
                Some((n, res))
            })
            .collect();
        let _ = self.cluster.refresh(None).await;
        Ok(topics
            .iter()
            .map(|t| {
                let r = by_name.remove(*t).unwrap_or_else(|| {
                    Err(ClientError::Protocol(format!(
                        "no DeleteTopics result for {t}"
                    )))
                });
                (t.to_string(), r)
            })
            .collect())
    }

    /// Names of all non-internal topics, sorted.
    pub async fn list_topics(&self) -> Result<Vec<String>> {
        let (md, _) = self.cluster.refresh(None).await?;
        Ok(md
            .topics
            .values()
            .filter(|t| !t.is_internal)
            .map(|t| t.name.clone())
            .collect())
    }

    /// Describes topics (partitions, leaders, replicas, ISR). Fails with
    /// `UNKNOWN_TOPIC_OR_PARTITION` if any topic does not exist.
    pub async fn describe_topics(&self, topics: &[&str]) -> Result<Vec<TopicInfo>> {
        let names: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
        let (mut md, mut errors) = self.cluster.refresh(Some(&names)).await?;
        if !errors.is_empty() {
            return Err(errors.swap_remove(0).1);
        }
        names
            .iter()
            .map(|n| {
                md.topics.remove(n).ok_or_else(|| {
                    ClientError::from_code(3, None, format!("describe topic {n}"))
                        .unwrap_or_else(|| ClientError::Protocol(n.clone()))
                })
            })
            .collect()
    }

    /// Grows `topic` to `total_partitions` partitions.
    pub async fn create_partitions(&self, topic: &str, total_partitions: i32) -> Result<()> {
        let mut req = CreatePartitionsRequest::default();
        req.timeout_ms = self.timeout_ms();
        let mut t = CreatePartitionsTopic::default();
        t.name = name(topic);
        t.count = total_partitions;
        t.assignments = None;
        req.topics.push(t);
        let (resp, _) = self
            .cluster
            .send_controller(&req, CREATE_PARTITIONS_MAX)
            .await?;
        for r in &resp.results {
            if let Some(e) = ClientError::from_code(
                r.error_code,
                msg(&r.error_message),
                format!("create partitions for {topic}"),
            ) {
                return Err(e);
            }
        }
        let _ = self.cluster.refresh(Some(&[topic.to_string()])).await;
        Ok(())
    }

    /// Describes the cluster: id, controller and brokers. Uses
    /// `DescribeCluster` when the broker supports it, else Metadata.
    pub async fn describe_cluster(&self) -> Result<ClusterDescription> {
        let req = DescribeClusterRequest::default();
        match self.cluster.send_any(&req, DESCRIBE_CLUSTER_MAX).await {
            Ok((resp, _)) => {
                if let Some(e) = ClientError::from_code(
                    resp.error_code,
                    msg(&resp.error_message),
                    "describe cluster",
                ) {
                    return Err(e);
                }
                Ok(ClusterDescription {
                    cluster_id: Some(resp.cluster_id.as_str().to_string()),
                    controller_id: resp.controller_id.0,
                    brokers: resp
                        .brokers
                        .iter()
                        .map(|b| BrokerInfo {
                            id: b.broker_id.0,
                            host: b.host.as_str().to_string(),
                            port: b.port,
                            rack: msg(&b.rack),
                        })
                        .collect(),
                })
            }
            Err(ClientError::UnsupportedVersion { .. }) => {
                let (md, _) = self.cluster.refresh(Some(&[])).await?;
                Ok(ClusterDescription {
                    cluster_id: md.cluster_id,
                    controller_id: md.controller_id,
                    brokers: md.brokers.into_values().collect(),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Describes the configs of `topic`: every key the broker reports, with
    /// its value and whether it was set on the topic (vs. a default).
    /// Fails with `UNKNOWN_TOPIC_OR_PARTITION` if the topic does not exist.
    pub async fn describe_configs(&self, topic: &str) -> Result<Vec<ConfigEntry>> {
        use proto_kafka::messages::describe_configs_request::DescribeConfigsResource;
        use proto_kafka::messages::DescribeConfigsRequest;
        let mut res = DescribeConfigsResource::default();
        res.resource_type = 2; // TOPIC
        res.resource_name = StrBytes::from_string(topic.to_string());
        res.configuration_keys = None;
        let mut req = DescribeConfigsRequest::default();
        req.resources.push(res);
        let (resp, _) = self.cluster.send_any(&req, 4).await?;
        let mut out = Vec::new();
        for r in &resp.results {
            if let Some(e) = ClientError::from_code(
                r.error_code,
                msg(&r.error_message),
                format!("describe configs for {topic}"),
            ) {
                return Err(e);
            }
            for c in &r.configs {
                out.push(ConfigEntry {
                    name: c.name.as_str().to_string(),
                    value: msg(&c.value),
                    source: c.config_source,
                    read_only: c.read_only,
                    sensitive: c.is_sensitive,
                });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Changes the configs of `topic` with IncrementalAlterConfigs: sets each
    /// `(key, value)` in `set` and removes each key in `delete` (back to the
    /// default). Other configs are left as they are.
    pub async fn alter_configs(
        &self,
        topic: &str,
        set: &[(String, String)],
        delete: &[String],
    ) -> Result<()> {
        use proto_kafka::messages::incremental_alter_configs_request::{
            AlterConfigsResource, AlterableConfig,
        };
        use proto_kafka::messages::IncrementalAlterConfigsRequest;
        let mut res = AlterConfigsResource::default();
        res.resource_type = 2; // TOPIC
        res.resource_name = StrBytes::from_string(topic.to_string());
        for (k, v) in set {
            let mut c = AlterableConfig::default();
            c.name = StrBytes::from_string(k.clone());
            c.config_operation = 0; // SET
            c.value = Some(StrBytes::from_string(v.clone()));
            res.configs.push(c);
        }
        for k in delete {
            let mut c = AlterableConfig::default();
            c.name = StrBytes::from_string(k.clone());
            c.config_operation = 1; // DELETE
            c.value = None;
            res.configs.push(c);
        }
        let mut req = IncrementalAlterConfigsRequest::default();
        req.resources.push(res);
        let (resp, _) = self.cluster.send_any(&req, 1).await?;
        for r in &resp.responses {
            if let Some(e) = ClientError::from_code(
                r.error_code,
                msg(&r.error_message),
                format!("alter configs for {topic}"),
            ) {
                return Err(e);
            }
        }
        Ok(())
    }
}

/// One config of a resource, as returned by [`Admin::describe_configs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    /// Config key, e.g. `retention.ms`.
    pub name: String,
    /// Current value (`None` when unset or sensitive).
    pub value: Option<String>,
    /// Kafka's `ConfigSource`: 1 = set on the topic, 5 = default, ...
    pub source: i8,
    /// Whether the config cannot be altered.
    pub read_only: bool,
    /// Whether the value is hidden (passwords).
    pub sensitive: bool,
}

impl ConfigEntry {
    /// Whether the value was set on the topic itself (`DYNAMIC_TOPIC_CONFIG`).
    pub fn is_topic_override(&self) -> bool {
        self.source == 1
    }
}
