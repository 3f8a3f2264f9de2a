//! The async admin client.
//!
//! - topics, partitions, configs and the cluster ([`topics`]): create,
//!   delete, list and describe topics, add partitions, describe and alter
//!   topic configs, describe the cluster;
//! - consumer groups ([`groups`]): find a group's coordinator, list,
//!   describe and delete groups;
//! - committed offsets of groups ([`group_offsets`]): list, alter and
//!   delete them;
//! - records ([`records`]): list offsets by time (earliest, latest, a
//!   timestamp, the max timestamp) and delete records below an offset;
//! - the metadata quorum ([`quorum`]): its leader, epoch, high watermark
//!   and voters;
//! - partition reassignments ([`reassignments`]): move partitions to new
//!   replicas, cancel a move, list the moves in progress.
//!
//! Requests go at the highest version both this client and the broker
//! support (ApiVersions negotiation). Failures reported by the broker come
//! back as [`ClientError::Kafka`] with Kafka's error code and name; errors
//! Kafka marks retriable (leader moves, coordinator loading or moving,
//! lost connections) are retried with backoff, refreshing metadata or
//! looking the group coordinator up again.
//!
//! ```no_run
//! # async fn demo() -> sluice_client::Result<()> {
//! use std::collections::BTreeMap;
//! use sluice_client::{Admin, ClientConfig, TopicPartition};
//! use sluice_client::admin::{NewTopic, OffsetAndMetadata, OffsetSpec};
//! let admin = Admin::connect(ClientConfig::new("127.0.0.1:9092")).await?;
//! admin.create_topic(NewTopic::new("orders", 3, 1).config("cleanup.policy", "compact")).await?;
//! let topics = admin.list_topics().await?;
//! assert!(topics.contains(&"orders".to_string()));
//!
//! let tp = TopicPartition::new("orders", 0);
//! let end = admin.list_offsets(&[(tp.clone(), OffsetSpec::Latest)]).await?;
//! let mut offsets = BTreeMap::new();
//! offsets.insert(tp, OffsetAndMetadata::new(end.values().next().map_or(0, |i| i.offset)));
//! admin.alter_consumer_group_offsets("billing", &offsets).await?;
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use proto_kafka::messages::{ApiKey, TopicName};
use proto_kafka::protocol::{Request, StrBytes};

use crate::accumulator::TopicPartition;
use crate::cluster::{ClientConfig, Cluster};
use crate::error::{ClientError, Result};

pub mod group_offsets;
pub mod groups;
pub mod quorum;
pub mod reassignments;
pub mod records;
pub mod topics;

pub use group_offsets::OffsetAndMetadata;
pub use groups::{GroupDescription, GroupListing, MemberDescription};
pub use quorum::{QuorumEndpoint, QuorumInfo, ReplicaState};
pub use reassignments::PartitionReassignment;
pub use records::{IsolationLevel, ListOffsetsResultInfo, OffsetSpec};
pub use topics::{ClusterDescription, ConfigEntry, NewTopic};

/// Async admin client. Cheap to clone: clones share the cluster view and
/// its connections.
#[derive(Debug, Clone)]
pub struct Admin {
    cluster: Arc<Cluster>,
    timeout: Duration,
}

/// A topic name as the protocol wants it.
fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// A string as the protocol wants it.
fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// An optional protocol string as an owned one.
fn msg(m: &Option<StrBytes>) -> Option<String> {
    m.as_ref().map(|s| s.as_str().to_string())
}

/// Partitions grouped by topic, in order.
fn by_topic<'a>(tps: impl IntoIterator<Item = &'a TopicPartition>) -> BTreeMap<&'a str, Vec<i32>> {
    let mut out: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in tps {
        out.entry(tp.topic.as_str()).or_default().push(tp.partition);
    }
    out
}

/// `Err(ClientError::Kafka)` for a non-zero error code.
fn check(code: i16, message: Option<String>, context: impl Into<String>) -> Result<()> {
    match ClientError::from_code(code, message, context) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

impl Admin {
    /// Connects to the cluster.
    pub async fn connect(config: ClientConfig) -> Result<Self> {
        Ok(Self::from_cluster(Cluster::connect(config).await?))
    }

    /// An admin client sharing an existing cluster view.
    pub fn from_cluster(cluster: Arc<Cluster>) -> Self {
        let timeout = cluster.config().connection.request_timeout;
        Admin { cluster, timeout }
    }

    /// The underlying cluster view.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    fn timeout_ms(&self) -> i32 {
        i32::try_from(self.timeout.as_millis()).unwrap_or(i32::MAX)
    }

    /// Sends one request, once (no retries), to broker `broker` (any broker
    /// when `None`). `build` makes the request for the negotiated version,
    /// so fields that only exist in some versions can be gated on it.
    /// Returns the response and the version used.
    async fn send_once<R: Request>(
        &self,
        broker: Option<i32>,
        our_max: i16,
        build: impl FnOnce(i16) -> Result<R>,
    ) -> Result<(R::Response, i16)> {
        let key = ApiKey::try_from(R::KEY)
            .map_err(|()| ClientError::Protocol(format!("unknown API key {}", R::KEY)))?;
        let conn = match broker {
            Some(id) => {
                if !self.cluster.metadata().await.brokers.contains_key(&id) {
                    // A broker we have not heard of yet: learn its address.
                    self.cluster.refresh(Some(&[])).await?;
                }
                self.cluster.connection(id).await?
            }
            None => self.cluster.any_connection().await?,
        };
        let mut conn = conn.lock().await;
        let version = conn.version_for(key, our_max)?;
        let req = build(version)?;
        let resp = conn.send(&req, version).await?;
        Ok((resp, version))
    }
}
