//! Group membership for the consumer, speaking the classic group protocol
//! to the group coordinator: FindCoordinator, JoinGroup (with
//! `MEMBER_ID_REQUIRED` handling, KIP-394), the leader's assignment through
//! a [`PartitionAssignor`], SyncGroup, a background heartbeat task, LeaveGroup,
//! and offset commits with the member's generation.
//!
//! The coordinator gets its own connection (as the Java client does), so a
//! long-polling fetch on the same broker never delays a heartbeat or a
//! commit. State shared with the heartbeat task and with asynchronous commits
//! lives in [`Link`]; the heartbeat task never changes the assignment, it
//! only flags that a rejoin is needed and wakes `poll`. Commits are queued
//! to one worker task so they reach the coordinator in call order. Only
//! JoinGroup and SyncGroup wait longer than `request.timeout.ms` (up to the
//! rebalance timeout); a response about an older generation never resets a
//! newer one, and `FENCED_INSTANCE_ID` is fatal.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex as StdMutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use proto_kafka::messages::leave_group_request::MemberIdentity;
use proto_kafka::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use proto_kafka::messages::ApiKey;
use proto_kafka::messages::{
    GroupId, HeartbeatRequest, LeaveGroupRequest, OffsetCommitRequest, TopicName,
};
use proto_kafka::protocol::{Request, StrBytes};
use tokio::sync::{mpsc, oneshot, Mutex, Notify};

use crate::admin::{Admin, OffsetAndMetadata};
use crate::cluster::Cluster;
use crate::connection::{Connection, ConnectionConfig};
use crate::consumer::config::ConsumerConfig;
use crate::error::{ClientError, Result};
use crate::TopicPartition;

pub(super) const JOIN_GROUP_MAX: i16 = 9;
pub(super) const SYNC_GROUP_MAX: i16 = 5;
pub(super) const HEARTBEAT_MAX: i16 = 4;
pub(super) const LEAVE_GROUP_MAX: i16 = 5;
pub(super) const OFFSET_COMMIT_MAX: i16 = 9;
/// ConsumerProtocolSubscription version sent (v3 carries owned partitions,
/// generation and rack; older readers ignore the tail).
pub(super) const SUBSCRIPTION_VERSION: i16 = 3;

pub(super) const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
pub(super) const COORDINATOR_NOT_AVAILABLE: i16 = 15;
pub(super) const NOT_COORDINATOR: i16 = 16;
pub(super) const ILLEGAL_GENERATION: i16 = 22;
pub(super) const UNKNOWN_MEMBER_ID: i16 = 25;
pub(super) const REBALANCE_IN_PROGRESS: i16 = 27;
pub(super) const MEMBER_ID_REQUIRED: i16 = 79;
pub(super) const FENCED_INSTANCE_ID: i16 = 82;

pub(super) fn coordinator_moved(code: i16) -> bool {
    matches!(code, COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR)
}

pub(super) fn membership_lost(code: i16) -> bool {
    matches!(code, UNKNOWN_MEMBER_ID | ILLEGAL_GENERATION)
}

pub(super) fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Membership state shared with the heartbeat task and async commits.
#[derive(Debug)]
pub(crate) struct MemberState {
    /// Member id given by the coordinator ("" before the first join).
    pub member_id: String,
    /// Generation of the last successful join (-1 when none).
    pub generation: i32,
    /// Joined and synced: heartbeats run.
    pub stable: bool,
    /// The coordinator asked for (or an error implies) a rejoin.
    pub rejoin_needed: bool,
    /// The member lost its generation (partitions must be treated as lost).
    pub lost: bool,
    /// Last time the application called `poll`.
    pub last_poll: Instant,
    /// The consumer subscribed (group management); commits then need a
    /// live generation.
    pub subscribed: bool,
    /// A fatal error (`FENCED_INSTANCE_ID`): the member stops for good.
    pub fatal: Option<ClientError>,
}

/// One commit for the in-order commit queue.
#[derive(Debug)]
struct CommitJob {
    offsets: BTreeMap<TopicPartition, OffsetAndMetadata>,
    /// Retry retriable failures (synchronous commits); asynchronous ones
    /// are sent once, as in Kafka.
    retry: bool,
    done: oneshot::Sender<Result<()>>,
}

/// What heartbeats and commits need: the coordinator connection and the
/// member state.
#[derive(Debug)]
pub(crate) struct Link {
    pub(super) group_id: String,
    pub(super) instance_id: Option<String>,
    admin: Admin,
    connection: ConnectionConfig,
    conn: Mutex<Option<Arc<Mutex<Connection>>>>,
    state: StdMutex<MemberState>,
    /// Woken when the heartbeat task flags a rejoin.
    pub wake: Notify,
    /// `default.api.timeout.ms`: how long a commit retries.
    api_timeout: Duration,
    pub(super) backoff: Duration,
    /// Upper bound of the commit retry backoff.
    backoff_max: Duration,
    /// Commits are sent one at a time, in call order, by one task.
    commits: StdMutex<Option<mpsc::UnboundedSender<CommitJob>>>,
}

impl Link {
    /// The link of a new member of `group_id`.
    pub(super) fn new(config: &ConsumerConfig, cluster: Arc<Cluster>, group_id: &str) -> Arc<Self> {
        Arc::new(Link {
            group_id: group_id.to_string(),
            instance_id: config.group_instance_id.clone(),
            admin: Admin::from_cluster(cluster),
            connection: config.client.connection.clone(),
            conn: Mutex::new(None),
            state: StdMutex::new(MemberState {
                member_id: String::new(),
                generation: -1,
                stable: false,
                rejoin_needed: true,
                lost: false,
                last_poll: Instant::now(),
                subscribed: false,
                fatal: None,
            }),
            wake: Notify::new(),
            api_timeout: config.default_api_timeout,
            backoff_max: config.client.retry_backoff_max,
            backoff: config.client.retry_backoff,
            commits: StdMutex::new(None),
        })
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, MemberState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The coordinator connection, finding the coordinator when unknown.
    async fn connection(&self) -> Result<Arc<Mutex<Connection>>> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            if !c.lock().await.is_broken() {
                return Ok(c.clone());
            }
        }
        let broker = self.admin.find_coordinator(&self.group_id).await?;
        let conn = Connection::connect(&broker.addr(), self.connection.clone()).await?;
        let conn = Arc::new(Mutex::new(conn));
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Forgets the coordinator (it moved or its connection failed).
    pub(super) async fn coordinator_lost(&self) {
        *self.conn.lock().await = None;
    }

    /// Forgets the coordinator when `e` says it moved or its connection
    /// failed, so the next attempt looks it up again.
    pub(super) async fn forget_coordinator_after(&self, e: &ClientError) {
        if matches!(e, ClientError::Io { .. } | ClientError::Timeout { .. })
            || e.code().is_some_and(coordinator_moved)
        {
            self.coordinator_lost().await;
        }
    }

    /// Sends one request to the coordinator: the version is negotiated on
    /// its connection, `build` makes the request for it, and the response
    /// must arrive within `timeout` (the request timeout when `None`). A
    /// transport failure forgets the coordinator.
    pub(super) async fn request<R: Request>(
        &self,
        our_max: i16,
        timeout: Option<Duration>,
        build: impl FnOnce(i16) -> R,
    ) -> Result<R::Response> {
        let conn = self.connection().await?;
        let key = ApiKey::try_from(R::KEY)
            .map_err(|()| ClientError::Protocol(format!("unknown API key {}", R::KEY)))?;
        let pending = {
            let c = conn.lock().await;
            let version = c.version_for(key, our_max)?;
            let req = build(version);
            match timeout {
                Some(t) => c.send_request_timeout(&req, version, t).await,
                None => c.send_request(&req, version).await,
            }
        };
        let r = match pending {
            Ok(p) => p.wait().await,
            Err(e) => Err(e),
        };
        if matches!(r, Err(ClientError::Io { .. } | ClientError::Timeout { .. })) {
            self.coordinator_lost().await;
        }
        r
    }

    /// Another instance took this member's `group.instance.id`: stop for
    /// good (Kafka treats `FENCED_INSTANCE_ID` as fatal).
    pub(super) fn fence(&self, context: &str) -> ClientError {
        let e = ClientError::from_code(
            FENCED_INSTANCE_ID,
            Some(format!(
                "another consumer with group.instance.id {:?} joined group {}",
                self.instance_id.as_deref().unwrap_or_default(),
                self.group_id
            )),
            context,
        )
        .unwrap_or_else(|| ClientError::Protocol("fenced".into()));
        let mut st = self.state();
        st.fatal = Some(e.clone());
        st.stable = false;
        drop(st);
        self.wake.notify_one();
        e
    }

    /// Resets the member when the coordinator no longer knows it, unless a
    /// newer generation was joined since `generation` was sent.
    fn reset_if_generation(&self, generation: i32) {
        if self.state().generation == generation {
            self.reset_generation();
            self.wake.notify_one();
        }
    }

    /// Queues a commit; commits go out one at a time in call order.
    pub(crate) fn commit_in_order(
        self: &Arc<Self>,
        offsets: BTreeMap<TopicPartition, OffsetAndMetadata>,
        retry: bool,
    ) -> oneshot::Receiver<Result<()>> {
        let (done, rx) = oneshot::channel();
        let mut job = CommitJob {
            offsets,
            retry,
            done,
        };
        let mut queue = self.commits.lock().unwrap_or_else(PoisonError::into_inner);
        for _ in 0..2 {
            let tx = queue.get_or_insert_with(|| {
                let (tx, rx) = mpsc::unbounded_channel();
                tokio::spawn(commit_worker(Arc::downgrade(self), rx));
                tx
            });
            match tx.send(job) {
                Ok(()) => break,
                Err(mpsc::error::SendError(j)) => {
                    job = j;
                    *queue = None;
                }
            }
        }
        rx
    }

    pub(super) fn reset_generation(&self) {
        let mut st = self.state();
        st.generation = -1;
        st.member_id.clear();
        st.stable = false;
        st.rejoin_needed = true;
        st.lost = true;
    }

    /// Commits `offsets` with the current generation (or as a simple
    /// consumer group, generation -1, when not a member), retrying
    /// retriable errors (the coordinator moved or is not available, a lost
    /// connection: each looks the coordinator up again) with backoff until
    /// `default.api.timeout.ms` has passed, as Kafka's `commitSync`.
    pub(crate) async fn commit(
        &self,
        offsets: &BTreeMap<TopicPartition, OffsetAndMetadata>,
    ) -> Result<()> {
        let deadline = Instant::now() + self.api_timeout;
        let mut backoff = self.backoff;
        loop {
            match self.commit_once(offsets).await {
                Err(e) if e.is_retriable() && Instant::now() + backoff < deadline => {
                    tracing::debug!(%e, group = %self.group_id, "retrying offset commit");
                    self.forget_coordinator_after(&e).await;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.backoff_max);
                }
                other => return other,
            }
        }
    }

    async fn commit_once(
        &self,
        offsets: &BTreeMap<TopicPartition, OffsetAndMetadata>,
    ) -> Result<()> {
        if offsets.is_empty() {
            return Ok(());
        }
        let (generation, member_id) = {
            let st = self.state();
            if let Some(e) = &st.fatal {
                return Err(e.clone());
            }
            if st.stable {
                (st.generation, st.member_id.clone())
            } else if st.generation >= 0 {
                return Err(ClientError::from_code(
                    REBALANCE_IN_PROGRESS,
                    Some("the group is rebalancing; poll again, then commit".into()),
                    format!("commit offsets of group {}", self.group_id),
                )
                .unwrap_or_else(|| ClientError::Protocol("rebalance".into())));
            } else if st.subscribed {
                return Err(ClientError::CommitFailed(format!(
                    "group {}: this member is not in the group (it was removed or has not \
                     joined yet); poll to rejoin, then commit",
                    self.group_id
                )));
            } else {
                (-1, String::new())
            }
        };
        let mut req = OffsetCommitRequest::default();
        req.group_id = GroupId(s(&self.group_id));
        req.generation_id_or_member_epoch = generation;
        req.member_id = s(&member_id);
        if generation >= 0 {
            req.group_instance_id = self.instance_id.as_deref().map(s);
        }
        req.retention_time_ms = -1;
        let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
        for (tp, om) in offsets {
            let mut p = OffsetCommitRequestPartition::default();
            p.partition_index = tp.partition;
            p.committed_offset = om.offset;
            p.committed_leader_epoch = om.leader_epoch.unwrap_or(-1);
            p.committed_metadata = Some(s(om.metadata.as_deref().unwrap_or("")));
            by_topic.entry(tp.topic.as_str()).or_default().push(p);
        }
        for (topic, partitions) in by_topic {
            let mut t = OffsetCommitRequestTopic::default();
            t.name = TopicName(s(topic));
            t.partitions = partitions;
            req.topics.push(t);
        }
        let resp = self.request(OFFSET_COMMIT_MAX, None, |_| req).await?;
        for t in &resp.topics {
            for p in &t.partitions {
                if p.error_code == 0 {
                    continue;
                }
                if p.error_code == FENCED_INSTANCE_ID {
                    return Err(self.fence("commit offsets"));
                }
                if membership_lost(p.error_code) {
                    self.reset_if_generation(generation);
                } else if p.error_code == REBALANCE_IN_PROGRESS {
                    self.state().rejoin_needed = true;
                    self.wake.notify_one();
                }
                let context = format!(
                    "commit offset of {}-{} for group {}",
                    t.name.0.as_str(),
                    p.partition_index,
                    self.group_id
                );
                if let Some(e) = ClientError::from_code(p.error_code, None, context) {
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Sends LeaveGroup for this member (dynamic members only; a static
    /// member keeps its slot until its session times out, as in Kafka).
    pub(super) async fn leave(&self, reason: &str) {
        let member_id = {
            let st = self.state();
            if st.member_id.is_empty() {
                return;
            }
            st.member_id.clone()
        };
        if self.instance_id.is_some() {
            return;
        }
        let group_id = GroupId(s(&self.group_id));
        let r = self
            .request(LEAVE_GROUP_MAX, None, |version| {
                let mut req = LeaveGroupRequest::default();
                req.group_id = group_id;
                if version >= 3 {
                    let mut m = MemberIdentity::default();
                    m.member_id = s(&member_id);
                    if version >= 5 {
                        m.reason = Some(s(reason));
                    }
                    req.members.push(m);
                } else {
                    req.member_id = s(&member_id);
                }
                req
            })
            .await;
        if let Err(e) = r {
            tracing::debug!(error = %e, group = %self.group_id, "LeaveGroup failed");
        }
    }
}

/// Sends queued commits one at a time (so they land in call order) until
/// the consumer is gone.
async fn commit_worker(link: Weak<Link>, mut jobs: mpsc::UnboundedReceiver<CommitJob>) {
    while let Some(job) = jobs.recv().await {
        let Some(link) = link.upgrade() else {
            let _ = job.done.send(Err(ClientError::InvalidArgument(
                "consumer is closed".into(),
            )));
            continue;
        };
        let r = if job.retry {
            link.commit(&job.offsets).await
        } else {
            link.commit_once(&job.offsets).await
        };
        drop(link);
        let _ = job.done.send(r);
    }
}

pub(super) fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

/// Heartbeats every `interval` while the member is stable; flags a rejoin
/// on `REBALANCE_IN_PROGRESS`, resets the member when the coordinator no
/// longer knows it, and leaves the group when the application stopped
/// polling for longer than `max.poll.interval.ms` (as the Java client's
/// heartbeat thread does).
pub(super) async fn heartbeat_loop(
    link: Arc<Link>,
    interval: Duration,
    max_poll_interval: Duration,
) {
    loop {
        tokio::time::sleep(interval).await;
        let (generation, member_id, last_poll) = {
            let st = link.state();
            if !st.stable {
                return;
            }
            (st.generation, st.member_id.clone(), st.last_poll)
        };
        if last_poll.elapsed() > max_poll_interval {
            tracing::warn!(
                group = %link.group_id,
                "poll not called within max.poll.interval.ms; leaving the group"
            );
            link.leave("consumer poll timeout has expired").await;
            link.reset_generation();
            link.wake.notify_one();
            return;
        }
        let mut req = HeartbeatRequest::default();
        req.group_id = GroupId(s(&link.group_id));
        req.generation_id = generation;
        req.member_id = s(&member_id);
        req.group_instance_id = link.instance_id.as_deref().map(s);
        match link.request(HEARTBEAT_MAX, None, |_| req).await {
            Ok(r) => match r.error_code {
                0 => {}
                REBALANCE_IN_PROGRESS => {
                    link.state().rejoin_needed = true;
                    link.wake.notify_one();
                }
                FENCED_INSTANCE_ID => {
                    link.fence("heartbeat");
                    return;
                }
                code if membership_lost(code) => {
                    link.reset_if_generation(generation);
                    return;
                }
                code if coordinator_moved(code) => link.coordinator_lost().await,
                code => tracing::warn!(code, group = %link.group_id, "heartbeat error"),
            },
            Err(e) => tracing::debug!(error = %e, "heartbeat failed"),
        }
    }
}
