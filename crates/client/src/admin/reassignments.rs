//! Partition reassignments through [`Admin`] (Kafka's
//! `Admin.alterPartitionReassignments` and
//! `Admin.listPartitionReassignments`): AlterPartitionReassignments moves
//! partitions to new replica sets or cancels a move (no replicas);
//! ListPartitionReassignments lists the moves in progress. Any broker of a
//! Sluice cluster answers (it commits through the metadata quorum).

use std::collections::BTreeMap;

use proto_kafka::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use proto_kafka::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use proto_kafka::messages::{
    AlterPartitionReassignmentsRequest, BrokerId, ListPartitionReassignmentsRequest,
};

use super::{by_topic, check, msg, name, Admin};
use crate::accumulator::TopicPartition;
use crate::error::Result;

const ALTER_MAX: i16 = 0;
const LIST_MAX: i16 = 0;

/// A reassignment in progress (Kafka's `PartitionReassignment`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionReassignment {
    /// Every replica now: the target ones first, then those being removed.
    pub replicas: Vec<i32>,
    /// Replicas being added.
    pub adding_replicas: Vec<i32>,
    /// Replicas being removed.
    pub removing_replicas: Vec<i32>,
}

impl Admin {
    /// Reassigns each partition to its replicas (the first one preferred
    /// leader), or cancels its reassignment (`None`). Returns each
    /// partition's outcome; a request-level failure is the error.
    pub async fn alter_partition_reassignments(
        &self,
        moves: &[(TopicPartition, Option<Vec<i32>>)],
    ) -> Result<Vec<(TopicPartition, Result<()>)>> {
        let mut topics: BTreeMap<&str, Vec<ReassignablePartition>> = BTreeMap::new();
        for (tp, replicas) in moves {
            let mut p = ReassignablePartition::default();
            p.partition_index = tp.partition;
            p.replicas = replicas
                .as_ref()
                .map(|r| r.iter().map(|&id| BrokerId(id)).collect());
            topics.entry(tp.topic.as_str()).or_default().push(p);
        }
        let mut req = AlterPartitionReassignmentsRequest::default();
        req.timeout_ms = self.timeout_ms();
        req.topics = topics
            .into_iter()
            .map(|(t, partitions)| {
                let mut rt = ReassignableTopic::default();
                rt.name = name(t);
                rt.partitions = partitions;
                rt
            })
            .collect();
        let (resp, _) = self.cluster.send_any(&req, ALTER_MAX).await?;
        check(
            resp.error_code,
            msg(&resp.error_message),
            "alter partition reassignments",
        )?;
        Ok(resp
            .responses
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    let tp = TopicPartition::new(t.name.0.as_str(), p.partition_index);
                    let outcome = check(
                        p.error_code,
                        msg(&p.error_message),
                        format!("reassign {}-{}", t.name.0.as_str(), p.partition_index),
                    );
                    (tp, outcome)
                })
            })
            .collect())
    }

    /// The reassignments in progress: of every partition (`None`), or of
    /// the partitions named.
    pub async fn list_partition_reassignments(
        &self,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<BTreeMap<TopicPartition, PartitionReassignment>> {
        let mut req = ListPartitionReassignmentsRequest::default();
        req.timeout_ms = self.timeout_ms();
        req.topics = partitions.map(|ps| {
            by_topic(ps)
                .into_iter()
                .map(|(t, indexes)| {
                    let mut lt = ListPartitionReassignmentsTopics::default();
                    lt.name = name(t);
                    lt.partition_indexes = indexes;
                    lt
                })
                .collect()
        });
        let (resp, _) = self.cluster.send_any(&req, LIST_MAX).await?;
        check(
            resp.error_code,
            msg(&resp.error_message),
            "list partition reassignments",
        )?;
        let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<_>>();
        Ok(resp
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    (
                        TopicPartition::new(t.name.0.as_str(), p.partition_index),
                        PartitionReassignment {
                            replicas: ids(&p.replicas),
                            adding_replicas: ids(&p.adding_replicas),
                            removing_replicas: ids(&p.removing_replicas),
                        },
                    )
                })
            })
            .collect())
    }
}
