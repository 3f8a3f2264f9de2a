//! DescribeQuorum's view of the metadata quorum (Kafka's
//! `KafkaRaftClient.handleDescribeQuorumRequest` and `LeaderState`): the
//! leader id and epoch (Raft's term), the high watermark (the committed
//! end offset of `__cluster_metadata-0`), and per voter its log end offset,
//! when it last answered the leader and when it last held everything the
//! leader had. Only the quorum leader knows its followers' progress, so it
//! alone describes the quorum; another controller asks it (the Describe
//! request of the controller protocol), as a Kafka broker forwards
//! DescribeQuorum to the active controller.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use sluice_storage::Clock;

use super::codec::{CodecError, Reader, Writer};
use super::log_store::LogStore;
use super::network::Liveness;
use super::{NodeId, Raft};

/// One replica of the metadata log as the leader sees it (Kafka's
/// `DescribeQuorumResponseData.ReplicaState`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaState {
    pub replica_id: i32,
    /// The replica's log end offset (exclusive), -1 if unknown.
    pub log_end_offset: i64,
    /// Leader wall-clock time (ms) of the replica's last answer; the
    /// current time for the leader, -1 if never.
    pub last_fetch_timestamp: i64,
    /// Leader wall-clock time (ms) at which the replica last held every
    /// entry the leader had; the current time for the leader, -1 if never.
    pub last_caught_up_timestamp: i64,
}

/// The quorum as its leader describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumDescription {
    pub leader_id: i32,
    pub leader_epoch: i32,
    /// End offset (exclusive) of what the quorum committed.
    pub high_watermark: i64,
    pub voters: Vec<ReplicaState>,
    /// Replicas that receive the log without voting: the broker-only
    /// nodes (Raft learners).
    pub observers: Vec<ReplicaState>,
    /// Each voter's CONTROLLER endpoint (`host:port`); none for a single
    /// node, which serves no controller listener.
    pub endpoints: BTreeMap<i32, String>,
}

impl QuorumDescription {
    /// A single combined node: a quorum of one voter that leads in its
    /// only epoch; everything it appended is committed.
    pub fn single_node(node_id: i32, leader_epoch: i32, log_end_offset: i64, now_ms: i64) -> Self {
        Self {
            leader_id: node_id,
            leader_epoch,
            high_watermark: log_end_offset,
            voters: vec![ReplicaState {
                replica_id: node_id,
                log_end_offset,
                last_fetch_timestamp: now_ms,
                last_caught_up_timestamp: now_ms,
            }],
            observers: Vec::new(),
            endpoints: BTreeMap::new(),
        }
    }

    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u32(self.leader_id as u32);
        w.u32(self.leader_epoch as u32);
        w.i64(self.high_watermark);
        for list in [&self.voters, &self.observers] {
            w.u32(list.len() as u32);
            for r in list {
                w.u32(r.replica_id as u32);
                w.i64(r.log_end_offset);
                w.i64(r.last_fetch_timestamp);
                w.i64(r.last_caught_up_timestamp);
            }
        }
        w.u32(self.endpoints.len() as u32);
        for (id, addr) in &self.endpoints {
            w.u32(*id as u32);
            w.str(addr);
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, CodecError> {
        let leader_id = r.u32()? as i32;
        let leader_epoch = r.u32()? as i32;
        let high_watermark = r.i64()?;
        let mut lists = Vec::with_capacity(2);
        for _ in 0..2 {
            let n = r.count(28)?;
            let mut list = Vec::with_capacity(n);
            for _ in 0..n {
                list.push(ReplicaState {
                    replica_id: r.u32()? as i32,
                    log_end_offset: r.i64()?,
                    last_fetch_timestamp: r.i64()?,
                    last_caught_up_timestamp: r.i64()?,
                });
            }
            lists.push(list);
        }
        let observers = lists.pop().unwrap_or_default();
        let voters = lists.pop().unwrap_or_default();
        let n = r.count(8)?;
        let mut endpoints = BTreeMap::new();
        for _ in 0..n {
            let id = r.u32()? as i32;
            endpoints.insert(id, r.string()?);
        }
        Ok(Self {
            leader_id,
            leader_epoch,
            high_watermark,
            voters,
            observers,
            endpoints,
        })
    }
}

/// Builds the description on the quorum leader.
pub struct Describer {
    pub(crate) node_id: NodeId,
    pub(crate) raft: Raft,
    pub(crate) log: LogStore,
    pub(crate) liveness: Arc<Liveness>,
    pub(crate) voters: BTreeMap<NodeId, String>,
    pub(crate) clock: Arc<dyn Clock>,
    /// How recently a voter must have answered to count as heard from
    /// (the election timeout).
    pub(crate) election_timeout: std::time::Duration,
}

impl std::fmt::Debug for Describer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Describer")
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

impl Describer {
    /// The answer to a vote request when this node leads and heard from a
    /// majority of the voters (itself included) within the election
    /// timeout: refused, with this leader's vote and last log id. Else
    /// `None` (openraft decides).
    ///
    /// Raft's rule against disruptive servers (Ongaro's thesis §4.2.3;
    /// Kafka's check-quorum and pre-vote, KIP-996): openraft 0.9 keeps a
    /// follower's leader lease but grants a leader's own vote to a higher
    /// term once it has led for the lease. A voter that stops hearing the
    /// leader while it can still call out (its inbound links cut) would
    /// then win an election with the old leader's vote and take over a
    /// quorum it cannot be reached by, so it would never be fenced.
    pub(crate) fn refuse_disruptive_vote(
        &self,
        req: &openraft::raft::VoteRequest<NodeId>,
    ) -> Option<openraft::raft::VoteResponse<NodeId>> {
        let (vote, voters) = {
            let m = self.raft.metrics();
            let m = m.borrow();
            if m.state != openraft::ServerState::Leader
                || req.vote.leader_id().voted_for == Some(self.node_id)
            {
                return None;
            }
            let voters: Vec<NodeId> = m.membership_config.membership().voter_ids().collect();
            (m.vote, voters)
        };
        let heard = voters
            .iter()
            .filter(|&&id| {
                id == self.node_id
                    || self
                        .liveness
                        .last_ack(id)
                        .is_some_and(|t| t.elapsed() < self.election_timeout)
            })
            .count();
        if heard * 2 <= voters.len() {
            return None;
        }
        tracing::info!(candidate = ?req.vote, "vote refused: this leader hears a majority of the voters");
        Some(openraft::raft::VoteResponse {
            vote,
            vote_granted: false,
            last_log_id: self.log.last_log_id(),
        })
    }

    /// The quorum as this node, its leader, sees it; `Err` with the leader
    /// this node knows of when it does not lead.
    pub fn describe(&self) -> Result<QuorumDescription, Option<NodeId>> {
        let m = self.raft.metrics().borrow().clone();
        if m.state != openraft::ServerState::Leader {
            return Err(m.current_leader.filter(|&l| l != self.node_id));
        }
        let now = Instant::now();
        let now_ms = self.clock.now_ms();
        let wall = |t: Option<Instant>| {
            t.map_or(-1, |t| {
                now_ms - i64::try_from(now.duration_since(t).as_millis()).unwrap_or(i64::MAX)
            })
        };
        let log = self.log.log();
        let leader_end = log.log_end_offset();
        let leader_last = self.log.last_index();
        let matched = m.replication.clone().unwrap_or_default();
        let membership = m.membership_config.membership();
        let voter_ids: Vec<NodeId> = membership.voter_ids().collect();
        let state = |id: NodeId| {
            if id == self.node_id {
                return ReplicaState {
                    replica_id: id as i32,
                    log_end_offset: leader_end,
                    last_fetch_timestamp: now_ms,
                    last_caught_up_timestamp: now_ms,
                };
            }
            let index = matched.get(&id).copied().flatten().map(|l| l.index);
            let log_end_offset = match index {
                Some(i) if Some(i) == leader_last => leader_end,
                Some(i) => self.log.end_offset_of(i).unwrap_or(-1),
                None => -1,
            };
            ReplicaState {
                replica_id: id as i32,
                log_end_offset,
                last_fetch_timestamp: wall(self.liveness.last_ack(id)),
                last_caught_up_timestamp: wall(self.liveness.last_caught_up(id)),
            }
        };
        let voters = voter_ids.iter().map(|&id| state(id)).collect();
        // Learners: the broker-only nodes the leader replicates to.
        let observers = membership.learner_ids().map(state).collect();
        Ok(QuorumDescription {
            leader_id: self.node_id as i32,
            leader_epoch: i32::try_from(m.current_term).unwrap_or(i32::MAX),
            high_watermark: log.high_watermark(),
            voters,
            observers,
            endpoints: self
                .voters
                .iter()
                .filter(|(id, _)| voter_ids.contains(id))
                .map(|(&id, addr)| (id as i32, addr.clone()))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_description_survives_the_controller_protocol() {
        let mut d = QuorumDescription::single_node(3, 7, 42, 1_000);
        d.voters.push(ReplicaState {
            replica_id: 1,
            log_end_offset: -1,
            last_fetch_timestamp: -1,
            last_caught_up_timestamp: 900,
        });
        d.endpoints.insert(1, "127.0.0.1:9093".into());
        let mut w = Writer::default();
        d.encode(&mut w);
        let mut r = Reader::new(&w.buf);
        assert_eq!(QuorumDescription::decode(&mut r).expect("decode"), d);
        r.finish().expect("all read");
        // Cut anywhere, it does not decode.
        for cut in 0..w.buf.len() {
            let mut r = Reader::new(&w.buf[..cut]);
            assert!(QuorumDescription::decode(&mut r).is_err(), "cut at {cut}");
        }
    }
}
