//! The metadata quorum through [`Admin`] (Kafka's
//! `Admin.describeMetadataQuorum`): DescribeQuorum for
//! `__cluster_metadata` partition 0, answered by any broker with its quorum
//! leader's view. A retriable error (NOT_LEADER_OR_FOLLOWER while the
//! quorum elects) is retried within the client's retry budget.

use std::collections::BTreeMap;

use proto_kafka::messages::describe_quorum_request::{PartitionData, TopicData};
use proto_kafka::messages::describe_quorum_response;
use proto_kafka::messages::DescribeQuorumRequest;

use super::{check, msg, name, Admin};
use crate::error::{ClientError, Result};

const DESCRIBE_QUORUM_MAX: i16 = 2;
/// The metadata log's topic (KRaft's).
pub const METADATA_TOPIC: &str = "__cluster_metadata";

/// One replica of the metadata log (Kafka's `QuorumInfo.ReplicaState`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaState {
    /// The replica's node id.
    pub replica_id: i32,
    /// Log end offset as the leader last saw it (-1 if unknown).
    pub log_end_offset: i64,
    /// Leader wall-clock time (ms) of the replica's last fetch; `None`
    /// when unknown or the broker answers DescribeQuorum v0.
    pub last_fetch_timestamp: Option<i64>,
    /// Leader wall-clock time (ms) at which the replica was last caught up.
    pub last_caught_up_timestamp: Option<i64>,
}

/// An endpoint of a voter (DescribeQuorum v2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumEndpoint {
    /// Listener name, e.g. `CONTROLLER`.
    pub name: String,
    /// Host name.
    pub host: String,
    /// Port.
    pub port: u16,
}

/// The metadata quorum (Kafka's `QuorumInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumInfo {
    /// The quorum leader's node id (-1 when unknown).
    pub leader_id: i32,
    /// The leader's epoch.
    pub leader_epoch: i32,
    /// End offset of what the quorum committed.
    pub high_watermark: i64,
    /// The voters.
    pub voters: Vec<ReplicaState>,
    /// Replicas that fetch without voting.
    pub observers: Vec<ReplicaState>,
    /// Each voter's endpoints, by node id (empty before v2).
    pub nodes: BTreeMap<i32, Vec<QuorumEndpoint>>,
}

fn replica(r: &describe_quorum_response::ReplicaState) -> ReplicaState {
    let known = |t: i64| (t >= 0).then_some(t);
    ReplicaState {
        replica_id: r.replica_id.0,
        log_end_offset: r.log_end_offset,
        last_fetch_timestamp: known(r.last_fetch_timestamp),
        last_caught_up_timestamp: known(r.last_caught_up_timestamp),
    }
}

impl Admin {
    /// Describes the metadata quorum: its leader and epoch, the high
    /// watermark, and each voter's progress.
    pub async fn describe_quorum(&self) -> Result<QuorumInfo> {
        let mut p = PartitionData::default();
        p.partition_index = 0;
        let mut t = TopicData::default();
        t.topic_name = name(METADATA_TOPIC);
        t.partitions = vec![p];
        let mut req = DescribeQuorumRequest::default();
        req.topics = vec![t];
        let req = &req;
        self.cluster
            .with_retries("describe quorum", || async move {
                let (resp, _) = self.cluster.send_any(req, DESCRIBE_QUORUM_MAX).await?;
                check(resp.error_code, msg(&resp.error_message), "describe quorum")?;
                let p = resp
                    .topics
                    .iter()
                    .find(|t| t.topic_name.as_str() == METADATA_TOPIC)
                    .and_then(|t| t.partitions.iter().find(|p| p.partition_index == 0))
                    .ok_or_else(|| {
                        ClientError::Protocol(
                            "DescribeQuorum answer without __cluster_metadata-0".into(),
                        )
                    })?;
                check(p.error_code, msg(&p.error_message), "describe quorum")?;
                Ok(QuorumInfo {
                    leader_id: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    high_watermark: p.high_watermark,
                    voters: p.current_voters.iter().map(replica).collect(),
                    observers: p.observers.iter().map(replica).collect(),
                    nodes: resp
                        .nodes
                        .iter()
                        .map(|n| {
                            let endpoints = n
                                .listeners
                                .iter()
                                .map(|l| QuorumEndpoint {
                                    name: l.name.as_str().to_string(),
                                    host: l.host.as_str().to_string(),
                                    port: l.port,
                                })
                                .collect();
                            (n.node_id.0, endpoints)
                        })
                        .collect(),
                })
            })
            .await
    }
}
