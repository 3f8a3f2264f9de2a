//! Joining the group: JoinGroup (with `MEMBER_ID_REQUIRED` handling,
//! KIP-394), the leader's assignment through the chosen
//! [`PartitionAssignor`], SyncGroup, and the heartbeat task once the member
//! is stable.
//!
//! A join runs as a background task, so `poll` can wait for it only as long
//! as its timeout allows and pick it up at a later poll (as the Java client
//! keeps its join future across polls). Under the cooperative protocol the
//! consumer keeps fetching the partitions it owns meanwhile.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proto_kafka::messages::join_group_request::JoinGroupRequestProtocol;
use proto_kafka::messages::sync_group_request::SyncGroupRequestAssignment;
use proto_kafka::messages::{GroupId, JoinGroupRequest, JoinGroupResponse, SyncGroupRequest};
use tokio::task::JoinHandle;

use super::coordinator::{
    coordinator_moved, heartbeat_loop, membership_lost, millis, s, Link,
    COORDINATOR_LOAD_IN_PROGRESS, FENCED_INSTANCE_ID, JOIN_GROUP_MAX, MEMBER_ID_REQUIRED,
    REBALANCE_IN_PROGRESS, SUBSCRIPTION_VERSION, SYNC_GROUP_MAX, UNKNOWN_MEMBER_ID,
};
use crate::cluster::Cluster;
use crate::consumer::assignor::{
    decode_assignment, decode_subscription, encode_assignment, encode_subscription,
    PartitionAssignor, Subscription,
};
use crate::consumer::config::ConsumerConfig;
use crate::error::{ClientError, Result};
use crate::TopicPartition;

/// The result of a completed join.
#[derive(Debug)]
pub(crate) struct Joined {
    /// The partitions assigned to this member.
    pub assignment: Vec<TopicPartition>,
    /// Leader only: partition counts the assignment was computed from.
    snapshot: Option<BTreeMap<String, i32>>,
}

/// What a join needs; cloned into the join task.
#[derive(Debug, Clone)]
struct Joiner {
    link: Arc<Link>,
    cluster: Arc<Cluster>,
    assignors: Vec<Arc<dyn PartitionAssignor>>,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    client_rack: Option<String>,
}

/// The consumer's side of the group protocol.
#[derive(Debug)]
pub(crate) struct GroupMember {
    joiner: Joiner,
    heartbeat_interval: Duration,
    heartbeat: Option<JoinHandle<()>>,
    /// The join in progress, if any.
    pending: Option<JoinHandle<Result<Joined>>>,
    /// Leader only: partition counts of every topic the group subscribes to,
    /// as used for the last assignment (a change triggers a rejoin).
    pub leader_snapshot: Option<BTreeMap<String, i32>>,
}

impl Drop for GroupMember {
    fn drop(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
        if let Some(h) = self.pending.take() {
            h.abort();
        }
    }
}

impl GroupMember {
    /// A member of `group_id`.
    pub(crate) fn new(config: &ConsumerConfig, cluster: Arc<Cluster>, group_id: &str) -> Self {
        GroupMember {
            joiner: Joiner {
                link: Link::new(config, cluster.clone(), group_id),
                cluster,
                assignors: config.assignors.clone(),
                session_timeout: config.session_timeout,
                rebalance_timeout: config.max_poll_interval,
                client_rack: config.client_rack.clone(),
            },
            heartbeat_interval: config.heartbeat_interval,
            heartbeat: None,
            pending: None,
            leader_snapshot: None,
        }
    }

    /// The state shared with heartbeats and commits.
    pub(crate) fn link(&self) -> &Arc<Link> {
        &self.joiner.link
    }

    /// Whether a (re)join is needed (or running) before the assignment is
    /// settled.
    pub(crate) fn needs_join(&self) -> bool {
        let st = self.link().state();
        st.fatal.is_none() && (st.rejoin_needed || !st.stable)
    }

    /// Asks for a rejoin at the next poll (subscription or metadata change).
    pub(crate) fn request_rejoin(&self) {
        self.link().state().rejoin_needed = true;
    }

    /// Takes the "partitions lost" flag set when the generation was lost.
    pub(crate) fn take_lost(&self) -> bool {
        std::mem::take(&mut self.link().state().lost)
    }

    /// Records that the application polled (for `max.poll.interval.ms`).
    pub(crate) fn polled(&self) {
        self.link().state().last_poll = std::time::Instant::now();
    }

    /// Current (generation, member id).
    pub(crate) fn generation(&self) -> (i32, String) {
        let st = self.link().state();
        (st.generation, st.member_id.clone())
    }

    fn stop_heartbeat(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
        self.link().state().stable = false;
    }

    /// Starts a join (unless one is running) and waits for it until
    /// `deadline`: `Some` when it completed, `None` when it is still
    /// running (a later call picks it up).
    pub(crate) async fn join(
        &mut self,
        topics: &[String],
        owned: &[TopicPartition],
        deadline: Instant,
    ) -> Result<Option<Joined>> {
        if self.pending.is_none() {
            self.stop_heartbeat();
            let joiner = self.joiner.clone();
            let (topics, owned) = (topics.to_vec(), owned.to_vec());
            self.pending = Some(tokio::spawn(async move {
                let r = joiner.run(&topics, &owned).await;
                joiner.link.wake.notify_one();
                r
            }));
        }
        let Some(task) = self.pending.as_mut() else {
            return Ok(None);
        };
        let outcome = match tokio::time::timeout_at(deadline.into(), task).await {
            Err(_) => return Ok(None),
            Ok(r) => r,
        };
        self.pending = None;
        let joined =
            outcome.map_err(|e| ClientError::Protocol(format!("join task failed: {e}")))??;
        {
            let mut st = self.link().state();
            st.stable = true;
            st.rejoin_needed = false;
            // A loss during this join is settled by the new assignment (the
            // caller diffs it with what it owns).
            st.lost = false;
            st.last_poll = Instant::now();
        }
        if joined.snapshot.is_some() {
            self.leader_snapshot.clone_from(&joined.snapshot);
        }
        self.heartbeat = Some(tokio::spawn(heartbeat_loop(
            self.link().clone(),
            self.heartbeat_interval,
            self.joiner.rebalance_timeout,
        )));
        Ok(Some(joined))
    }

    /// Partition counts of `topics` (topics that do not exist are left out).
    pub(crate) async fn partition_counts(
        &self,
        topics: &[String],
    ) -> Result<BTreeMap<String, i32>> {
        self.joiner.partition_counts(topics).await
    }

    /// Leaves the group (when a member) and stops heartbeating and joining.
    pub(crate) async fn leave(&mut self, reason: &str) {
        if let Some(h) = self.pending.take() {
            h.abort();
        }
        self.stop_heartbeat();
        self.link().leave(reason).await;
        let mut st = self.link().state();
        st.generation = -1;
        st.member_id.clear();
        st.rejoin_needed = true;
        st.lost = false;
    }
}

impl Joiner {
    /// Joins until accepted or a non-retriable error.
    async fn run(&self, topics: &[String], owned: &[TopicPartition]) -> Result<Joined> {
        let mut backoff = self.link.backoff;
        loop {
            match self.join_once(topics, owned).await {
                Ok(Some(joined)) => return Ok(joined),
                Ok(None) => {}
                Err(e) if e.is_retriable() => {
                    tracing::debug!(error = %e, "join failed; retrying");
                    self.link.forget_coordinator_after(&e).await;
                }
                Err(e) => return Err(e),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// One JoinGroup + SyncGroup round. `Ok(None)` means "try again".
    async fn join_once(
        &self,
        topics: &[String],
        owned: &[TopicPartition],
    ) -> Result<Option<Joined>> {
        let link = &self.link;
        let (generation, member_id) = {
            let st = link.state();
            (st.generation, st.member_id.clone())
        };
        let mut req = JoinGroupRequest::default();
        req.group_id = GroupId(s(&link.group_id));
        req.session_timeout_ms = millis(self.session_timeout);
        req.rebalance_timeout_ms = millis(self.rebalance_timeout);
        req.member_id = s(&member_id);
        req.group_instance_id = link.instance_id.as_deref().map(s);
        req.protocol_type = s("consumer");
        req.reason = Some(s("sluice-client joining"));
        for a in &self.assignors {
            let sub = Subscription {
                topics: topics.to_vec(),
                user_data: a.subscription_user_data(topics, owned, generation),
                owned_partitions: owned.to_vec(),
                generation_id: generation,
                rack_id: self.client_rack.clone(),
                group_instance_id: None,
            };
            let mut p = JoinGroupRequestProtocol::default();
            p.name = s(a.name());
            p.metadata = encode_subscription(&sub, SUBSCRIPTION_VERSION)?;
            req.protocols.push(p);
        }
        // The coordinator holds JoinGroup and SyncGroup for up to the
        // rebalance timeout.
        let join_timeout = self.rebalance_timeout + Duration::from_secs(5);
        let resp: JoinGroupResponse = link
            .request(JOIN_GROUP_MAX, Some(join_timeout), |_| req)
            .await?;
        let group = link.group_id.clone();
        match resp.error_code {
            0 => {}
            FENCED_INSTANCE_ID => return Err(link.fence("join group")),
            MEMBER_ID_REQUIRED => {
                link.state().member_id = resp.member_id.as_str().to_string();
                return Ok(None);
            }
            UNKNOWN_MEMBER_ID => {
                link.state().member_id.clear();
                return Ok(None);
            }
            COORDINATOR_LOAD_IN_PROGRESS | REBALANCE_IN_PROGRESS => return Ok(None),
            code if coordinator_moved(code) => {
                link.coordinator_lost().await;
                return Ok(None);
            }
            code => {
                return Err(
                    ClientError::from_code(code, None, format!("join group {group}"))
                        .unwrap_or_else(|| ClientError::Protocol(format!("join error {code}"))),
                )
            }
        }
        let member_id = resp.member_id.as_str().to_string();
        let generation = resp.generation_id;
        {
            let mut st = link.state();
            st.member_id.clone_from(&member_id);
            st.generation = generation;
        }
        let protocol = resp
            .protocol_name
            .as_ref()
            .map(|p| p.as_str().to_string())
            .unwrap_or_default();
        let (assignments, snapshot) = if resp.leader.as_str() == member_id {
            let (a, counts) = self.assign(&protocol, &resp).await?;
            (a, Some(counts))
        } else {
            (Vec::new(), None)
        };
        let mut sync = SyncGroupRequest::default();
        sync.group_id = GroupId(s(&group));
        sync.generation_id = generation;
        sync.member_id = s(&member_id);
        sync.group_instance_id = link.instance_id.as_deref().map(s);
        sync.protocol_type = Some(s("consumer"));
        sync.protocol_name = Some(s(&protocol));
        sync.assignments = assignments;
        let sresp = link
            .request(SYNC_GROUP_MAX, Some(join_timeout), |_| sync)
            .await?;
        match sresp.error_code {
            0 => {}
            FENCED_INSTANCE_ID => return Err(link.fence("sync group")),
            REBALANCE_IN_PROGRESS => return Ok(None),
            code if membership_lost(code) => {
                link.reset_generation();
                return Ok(None);
            }
            code if coordinator_moved(code) => {
                link.coordinator_lost().await;
                return Ok(None);
            }
            code => {
                return Err(
                    ClientError::from_code(code, None, format!("sync group {group}"))
                        .unwrap_or_else(|| ClientError::Protocol(format!("sync error {code}"))),
                )
            }
        }
        let assignment = decode_assignment(&sresp.assignment)?;
        if let Some(a) = self.assignors.iter().find(|a| a.name() == protocol) {
            a.on_assignment(&assignment, generation);
        }
        Ok(Some(Joined {
            assignment: assignment.partitions,
            snapshot,
        }))
    }

    /// The leader's part: decode subscriptions, read partition counts, run
    /// the chosen assignor and encode every member's assignment.
    async fn assign(
        &self,
        protocol: &str,
        resp: &JoinGroupResponse,
    ) -> Result<(Vec<SyncGroupRequestAssignment>, BTreeMap<String, i32>)> {
        let assignor = self
            .assignors
            .iter()
            .find(|a| a.name() == protocol)
            .cloned()
            .ok_or_else(|| {
                ClientError::InvalidArgument(format!(
                    "the group chose assignor {protocol:?}, which this consumer does not have"
                ))
            })?;
        let mut members = BTreeMap::new();
        let mut all_topics = BTreeSet::new();
        for m in &resp.members {
            let mut sub = decode_subscription(&m.metadata)?;
            sub.group_instance_id = m.group_instance_id.as_ref().map(|i| i.as_str().to_string());
            all_topics.extend(sub.topics.iter().cloned());
            members.insert(m.member_id.as_str().to_string(), sub);
        }
        let topics: Vec<String> = all_topics.into_iter().collect();
        let counts = self.partition_counts(&topics).await?;
        let assignment = assignor.assign(&counts, &members)?;
        let mut out = Vec::new();
        for member in members.keys() {
            let a = assignment.get(member).cloned().unwrap_or_default();
            let mut sa = SyncGroupRequestAssignment::default();
            sa.member_id = s(member);
            sa.assignment = encode_assignment(&a)?;
            out.push(sa);
        }
        Ok((out, counts))
    }

    /// Partition counts of `topics` (topics that do not exist are left out).
    async fn partition_counts(&self, topics: &[String]) -> Result<BTreeMap<String, i32>> {
        if topics.is_empty() {
            return Ok(BTreeMap::new());
        }
        let (md, _) = self.cluster.refresh(Some(topics)).await?;
        Ok(md
            .topics
            .iter()
            .filter(|(_, t)| !t.partitions.is_empty())
            .map(|(n, t)| (n.clone(), t.partitions.len() as i32))
            .collect())
    }
}
