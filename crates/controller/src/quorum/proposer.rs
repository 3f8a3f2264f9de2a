//! The leader's side of a metadata change: changes are checked against
//! the leader's image and proposed one at a time, so two controllers
//! racing on the same name or the same producer id block cannot both win
//! (the local change lock only orders one node's changes).

use openraft::error::{ClientWriteError, RaftError};
use openraft::BasicNode;

use super::state_machine::StateMachine;
use super::{MetadataChange, NodeId, Raft};
use crate::error::ControllerError;
use crate::image::MetadataImage;
use crate::producer_ids::BLOCK_SIZE;
use crate::records::MetadataRecord;

/// Why a proposal did not commit.
#[derive(Debug)]
pub enum ProposeError {
    /// This node is not the leader; the leader it knows, if any.
    NotLeader(Option<(NodeId, BasicNode)>),
    /// The change does not fit the current image.
    Rejected(ControllerError),
    /// Raft failed.
    Raft(String),
}

/// Proposes metadata changes on the quorum leader.
pub struct Proposer {
    raft: Raft,
    sm: StateMachine,
    lock: tokio::sync::Mutex<()>,
}

/// Checks a change against the image it will apply to.
pub fn check(image: &MetadataImage, records: &[MetadataRecord]) -> Result<(), ControllerError> {
    let mut next = image.clone();
    for r in records {
        match r {
            MetadataRecord::Topic { name, .. } if next.topic(name).is_some() => {
                return Err(ControllerError::TopicExists(format!(
                    "Topic '{name}' already exists."
                )));
            }
            MetadataRecord::RemoveTopic { topic_id } if next.topic_by_id(topic_id).is_none() => {
                return Err(ControllerError::Conflict(format!(
                    "topic {topic_id} does not exist"
                )));
            }
            MetadataRecord::Partition { topic_id, .. } if next.topic_by_id(topic_id).is_none() => {
                return Err(ControllerError::Conflict(format!(
                    "a partition of topic {topic_id}, which does not exist"
                )));
            }
            // A change of an existing partition (an ISR change, a new
            // leader) must be made on its current state (Kafka's
            // AlterPartition checks: INVALID_UPDATE_VERSION,
            // FENCED_LEADER_EPOCH): the next partition epoch, and in the
            // same leader epoch the same leader.
            MetadataRecord::Partition {
                topic_id,
                partition_id,
                leader,
                leader_epoch,
                partition_epoch,
                ..
            } => {
                let current = next
                    .topic_by_id(topic_id)
                    .and_then(|t| t.partitions.get(partition_id));
                if let Some(cur) = current {
                    let stale = *partition_epoch != cur.partition_epoch + 1
                        || *leader_epoch < cur.leader_epoch
                        || (*leader_epoch == cur.leader_epoch && *leader != cur.leader);
                    if stale {
                        return Err(ControllerError::Conflict(format!(
                            "stale change of partition {partition_id} of topic {topic_id}: leader {leader} epoch {leader_epoch}, partition epoch {partition_epoch}; current leader {} epoch {}, partition epoch {}",
                            cur.leader, cur.leader_epoch, cur.partition_epoch
                        )));
                    }
                }
            }
            MetadataRecord::ProducerIds {
                next_producer_id, ..
            } if next_producer_id.saturating_sub(BLOCK_SIZE) != next.next_producer_id().max(0) => {
                return Err(ControllerError::Conflict(format!(
                    "producer id block ending at {next_producer_id} does not follow the last one (next id {})",
                    next.next_producer_id()
                )));
            }
            _ => {}
        }
        next.apply(r);
    }
    Ok(())
}

impl std::fmt::Debug for Proposer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proposer").finish_non_exhaustive()
    }
}

impl Proposer {
    pub fn new(raft: Raft, sm: StateMachine) -> Self {
        Self {
            raft,
            sm,
            lock: tokio::sync::Mutex::new(()),
        }
    }

    /// Checks and commits `records` if this node leads; returns the log
    /// index and the image after it.
    pub async fn propose(
        &self,
        records: Vec<MetadataRecord>,
    ) -> Result<(u64, std::sync::Arc<MetadataImage>), ProposeError> {
        let _one_at_a_time = self.lock.lock().await;
        // Only the leader's image is checked: a follower's may lag.
        if let Err(e) = self.raft.ensure_linearizable().await {
            return Err(match e {
                RaftError::APIError(openraft::error::CheckIsLeaderError::ForwardToLeader(f)) => {
                    ProposeError::NotLeader(f.leader_id.zip(f.leader_node))
                }
                e => ProposeError::Raft(e.to_string()),
            });
        }
        check(&self.sm.applied().image, &records).map_err(ProposeError::Rejected)?;
        match self.raft.client_write(MetadataChange { records }).await {
            Ok(resp) => Ok((resp.log_id.index, resp.data)),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                Err(ProposeError::NotLeader(f.leader_id.zip(f.leader_node)))
            }
            Err(e) => Err(ProposeError::Raft(e.to_string())),
        }
    }
}
