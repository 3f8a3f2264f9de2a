//! The async consumer: `subscribe` (topic names or a regex) with group
//! membership, or `assign` for manual partition assignment; `poll` with
//! fetches pipelined ahead of the application; automatic and manual offset
//! commits; `seek`, `position`, `pause`/`resume`; a rebalance listener.
//!
//! Modules: [`config`] (settings and their Kafka names), [`assignor`] (the
//! [`PartitionAssignor`] trait and the range,
//! roundrobin, sticky and cooperative-sticky assignors), `coordinator`
//! (JoinGroup/SyncGroup/Heartbeat/LeaveGroup/OffsetCommit), `fetcher`
//! (Fetch requests), `decode` (fetched batches into records),
//! `buffer` (per-partition positions and fetched records, fetch
//! scheduling).
//!
//! How `poll` works: it (re)joins the group when needed (running the
//! rebalance listener), initialises positions that are unknown (committed
//! offset, else `auto.offset.reset`), starts an auto commit when due, hands
//! out up to `max.poll.records` buffered records, and before returning sends
//! the next fetch to every leader with fewer than four in flight (for
//! partitions not in flight), so the broker works while the application
//! processes and has the next fetch queued while it sends an answer.
//! Fetches run as background tasks on connections owned by the consumer (one
//! per fetch in flight); a partition whose buffer already holds
//! `max.poll.records` records is not fetched again until it drains, and a
//! fetch of only caught-up partitions (which would wait
//! `fetch.max.wait.ms` on the broker and hold one of its four fetch slots)
//! waits until nothing is buffered. The fetch task decodes its answer, so
//! the records of one answer are decoded while `poll` hands out another's.
//! Fetched keys and values are slices of the response frame.
//!
//! Commits (sync, async and automatic) go through one queue per consumer
//! and reach the coordinator one at a time in call order; asynchronous ones
//! are not retried (a retry could land after a newer commit). A member that
//! was removed from the group gets [`ClientError::CommitFailed`]; a static
//! member fenced by another instance with its `group.instance.id` gets
//! `FENCED_INSTANCE_ID` from every later call.
//!
//! A rebalance runs as a background join task (the broker holds JoinGroup
//! until every member joined): under the eager protocol `poll` waits for it
//! up to its timeout and returns nothing meanwhile (the member owns
//! nothing); under the cooperative protocol `poll` keeps returning records
//! of the partitions the member keeps, as the Java client does.
//!
//! ```no_run
//! # async fn demo() -> sluice_client::Result<()> {
//! use std::time::Duration;
//! use sluice_client::consumer::{Consumer, ConsumerConfig, OffsetReset};
//! use sluice_client::ClientConfig;
//!
//! let mut config = ConsumerConfig::new(ClientConfig::new("127.0.0.1:9092")).group("billing");
//! config.auto_offset_reset = OffsetReset::Earliest;
//! let mut consumer = Consumer::new(config).await?;
//! consumer.subscribe(&["orders"])?;
//! for _ in 0..10 {
//!     for record in consumer.poll(Duration::from_millis(500)).await? {
//!         println!("{}-{}@{}: {:?}", record.topic, record.partition, record.offset, record.value);
//!     }
//! }
//! consumer.close().await?;
//! # Ok(()) }
//! ```

pub mod assignor;
mod buffer;
mod commit_future;
pub use commit_future::CommitFuture;
pub mod config;
mod coordinator;
mod decode;
mod fetcher;
mod group_metadata;
mod membership;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;

use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::sync::oneshot;

pub use crate::admin::{IsolationLevel, OffsetAndMetadata};
pub use assignor::{PartitionAssignor, RebalanceProtocol};
pub use config::{ConsumerConfig, OffsetReset};
pub use group_metadata::ConsumerGroupMetadata;

use crate::admin::{Admin, OffsetSpec};
use crate::cluster::Cluster;
use crate::connection::Connection;
use crate::error::{ClientError, Result};
use crate::TopicPartition;
use buffer::PartitionState;
use coordinator::Link;
use fetcher::{FetchOutcome, FetchSettings};
use membership::GroupMember;

/// A record returned by [`Consumer::poll`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// Topic (shared by the records of one fetch: no copy per record).
    pub topic: Arc<str>,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Timestamp in ms (create time, or log append time when
    /// `log_append_time`).
    pub timestamp: i64,
    /// Whether `timestamp` is the broker's log append time.
    pub log_append_time: bool,
    /// Leader epoch of the batch (-1 when unknown).
    pub leader_epoch: i32,
    /// Key.
    pub key: Option<Bytes>,
    /// Value (`None` for a tombstone).
    pub value: Option<Bytes>,
    /// Headers in order.
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// Callbacks run inside [`Consumer::poll`] when the group rebalances (Kafka's
/// `ConsumerRebalanceListener`). With `enable.auto.commit`, positions are
/// committed before partitions are revoked.
pub trait RebalanceListener: Send {
    /// Partitions taken away from this member (after their offsets were
    /// auto-committed).
    fn on_partitions_revoked(&mut self, partitions: &[TopicPartition]) {
        let _ = partitions;
    }
    /// Partitions newly given to this member (cooperative: only the added
    /// ones; eager: the whole assignment).
    fn on_partitions_assigned(&mut self, partitions: &[TopicPartition]) {
        let _ = partitions;
    }
    /// Partitions lost without a clean revocation (the member fell out of
    /// the group); their offsets may already belong to someone else.
    fn on_partitions_lost(&mut self, partitions: &[TopicPartition]) {
        self.on_partitions_revoked(partitions);
    }
}

#[derive(Debug)]
enum Subscription {
    None,
    Topics,
    Pattern(regex::Regex),
    Manual,
}

/// An async Kafka consumer (see the module docs).
pub struct Consumer {
    config: ConsumerConfig,
    cluster: Arc<Cluster>,
    admin: Admin,
    subscription: Subscription,
    /// Topics this member subscribes to (patterns resolved).
    topics: BTreeSet<String>,
    partitions: BTreeMap<TopicPartition, PartitionState>,
    group: Option<GroupMember>,
    /// In an (uncontended) mutex so the consumer is `Sync` with a listener
    /// that is only `Send`.
    listener: Option<std::sync::Mutex<Box<dyn RebalanceListener>>>,
    fetch_tx: mpsc::UnboundedSender<FetchOutcome>,
    fetch_rx: mpsc::UnboundedReceiver<FetchOutcome>,
    idle_conns: HashMap<i32, Vec<Connection>>,
    /// Fetches in flight per broker.
    brokers_in_flight: HashMap<i32, usize>,
    settings: FetchSettings,
    next_auto_commit: Instant,
    /// The outstanding auto commit, if any.
    auto_commit: Option<oneshot::Receiver<Result<()>>>,
    /// Commit (with auto commit) before the next join: set when a join
    /// completes, so a join spanning several polls commits once.
    join_prepare: bool,
    /// `Some(open)` once [`Consumer::gate_rejoins`] was called: a join
    /// starts only while open; it closes when a join completes.
    rejoin_gate: Option<bool>,
    last_metadata: Instant,
    metadata_stale: bool,
    /// Current-leader hints from fetch errors (KIP-951), not applied yet.
    leader_hints: Vec<(TopicPartition, i32, i32)>,
    /// Rotates which partition `poll` drains first.
    drain_start: usize,
    pending_error: Option<ClientError>,
    closed: bool,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("group_id", &self.config.group_id)
            .field("subscription", &self.subscription)
            .field("assignment", &self.partitions.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Consumer {
    /// Connects to the cluster. Nothing is consumed until
    /// [`subscribe`](Self::subscribe) or [`assign`](Self::assign).
    pub async fn new(config: ConsumerConfig) -> Result<Self> {
        config.validate()?;
        let cluster = Cluster::connect(config.client.clone()).await?;
        Ok(Self::with_cluster(config, cluster))
    }

    /// A consumer on an existing cluster view (config must be valid).
    pub fn with_cluster(config: ConsumerConfig, cluster: Arc<Cluster>) -> Self {
        let group = config
            .group_id
            .clone()
            .map(|g| GroupMember::new(&config, cluster.clone(), &g));
        let (fetch_tx, fetch_rx) = mpsc::unbounded_channel();
        let mut connection = config.client.connection.clone();
        connection.request_timeout += config.fetch_max_wait;
        let settings = FetchSettings {
            connection,
            max_wait: config.fetch_max_wait,
            min_bytes: config.fetch_min_bytes,
            max_bytes: config.fetch_max_bytes,
            partition_max_bytes: config.max_partition_fetch_bytes,
            isolation: config.isolation_level,
            check_crcs: config.check_crcs,
        };
        Consumer {
            next_auto_commit: Instant::now() + config.auto_commit_interval,
            admin: Admin::from_cluster(cluster.clone()),
            config,
            cluster,
            subscription: Subscription::None,
            topics: BTreeSet::new(),
            partitions: BTreeMap::new(),
            group,
            listener: None,
            fetch_tx,
            fetch_rx,
            idle_conns: HashMap::new(),
            brokers_in_flight: HashMap::new(),
            settings,
            auto_commit: None,
            join_prepare: true,
            rejoin_gate: None,
            last_metadata: Instant::now(),
            metadata_stale: false,
            leader_hints: Vec::new(),
            drain_start: 0,
            pending_error: None,
            closed: false,
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    /// The cluster view in use.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Sets the rebalance listener (replacing any previous one).
    pub fn set_rebalance_listener(&mut self, listener: Box<dyn RebalanceListener>) {
        self.listener = Some(std::sync::Mutex::new(listener));
    }

    fn group_required(&self, what: &str) -> Result<()> {
        if self.group.is_none() {
            return Err(ClientError::InvalidArgument(format!(
                "{what} needs a group.id"
            )));
        }
        Ok(())
    }

    fn check_open(&self) -> Result<()> {
        if self.closed {
            return Err(ClientError::InvalidArgument("consumer is closed".into()));
        }
        Ok(())
    }

    /// Subscribes to `topics` with group membership (replaces any previous
    /// subscription; the group rebalances at the next poll).
    pub fn subscribe(&mut self, topics: &[&str]) -> Result<()> {
        self.check_open()?;
        self.group_required("subscribe")?;
        if topics.iter().any(|t| t.trim().is_empty()) {
            return Err(ClientError::InvalidArgument(
                "topic names in a subscription must not be empty".into(),
            ));
        }
        if matches!(self.subscription, Subscription::Manual) {
            return Err(ClientError::InvalidArgument(
                "subscribe and assign cannot be mixed; unsubscribe first".into(),
            ));
        }
        self.topics = topics.iter().map(|t| (*t).to_string()).collect();
        self.subscription = Subscription::Topics;
        if let Some(g) = &self.group {
            g.link().state().subscribed = true;
            g.request_rejoin();
        }
        Ok(())
    }

    /// Subscribes to every topic whose whole name matches `pattern` (a
    /// regex); new matching topics are picked up at metadata refreshes
    /// (`metadata.max.age.ms`). Internal topics never match.
    pub fn subscribe_pattern(&mut self, pattern: &str) -> Result<()> {
        self.check_open()?;
        self.group_required("subscribe")?;
        if matches!(self.subscription, Subscription::Manual) {
            return Err(ClientError::InvalidArgument(
                "subscribe and assign cannot be mixed; unsubscribe first".into(),
            ));
        }
        let re = regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| {
            ClientError::InvalidArgument(format!("bad subscription pattern {pattern:?}: {e}"))
        })?;
        self.subscription = Subscription::Pattern(re);
        self.topics.clear();
        // Resolve at the next poll.
        self.metadata_stale = true;
        self.last_metadata = Instant::now() - self.config.metadata_max_age;
        if let Some(g) = &self.group {
            g.link().state().subscribed = true;
            g.request_rejoin();
        }
        Ok(())
    }

    /// Manually assigns `partitions` (no group membership; commits still
    /// go to `group.id` when set). Positions of partitions kept across
    /// calls are kept.
    pub fn assign(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.check_open()?;
        if matches!(
            self.subscription,
            Subscription::Topics | Subscription::Pattern(_)
        ) {
            return Err(ClientError::InvalidArgument(
                "subscribe and assign cannot be mixed; unsubscribe first".into(),
            ));
        }
        let wanted: BTreeSet<TopicPartition> = partitions.iter().cloned().collect();
        self.partitions.retain(|tp, _| wanted.contains(tp));
        for tp in wanted {
            self.partitions.entry(tp).or_default();
        }
        self.topics = self.partitions.keys().map(|tp| tp.topic.clone()).collect();
        self.subscription = if partitions.is_empty() {
            Subscription::None
        } else {
            Subscription::Manual
        };
        Ok(())
    }

    /// Drops the subscription or manual assignment; a group member commits
    /// (with auto commit), runs the revocation callback and leaves the group.
    pub async fn unsubscribe(&mut self) -> Result<()> {
        if matches!(
            self.subscription,
            Subscription::Topics | Subscription::Pattern(_)
        ) {
            self.leave_group("the consumer unsubscribed").await;
        }
        self.subscription = Subscription::None;
        self.topics.clear();
        self.partitions.clear();
        if let Some(g) = &self.group {
            g.link().state().subscribed = false;
        }
        Ok(())
    }

    /// From now on a rebalance waits for [`allow_rejoin`](Self::allow_rejoin):
    /// `poll` returns no records instead of starting a join the
    /// application has not allowed. For an application that must commit
    /// (asynchronously) before its partitions are revoked, as Kafka
    /// Streams does in `onPartitionsRevoked` inside the poll that joins:
    /// the group can decide to rebalance between the application's
    /// [`rebalance_pending`](Self::rebalance_pending) check and its poll.
    pub fn gate_rejoins(&mut self) {
        self.rejoin_gate = Some(false);
    }

    /// Lets the next poll start the pending join (see
    /// [`gate_rejoins`](Self::gate_rejoins)); the gate closes again when
    /// the join completes.
    pub fn allow_rejoin(&mut self) {
        if self.rejoin_gate.is_some() {
            self.rejoin_gate = Some(true);
        }
    }

    /// Whether the group needs a rebalance that the next [`poll`](Self::poll)
    /// will run (Kafka's `rejoinNeededOrPending`): with the eager protocol
    /// every partition is revoked then, so an application that commits by
    /// hand (stream processing) commits its work before that poll.
    pub fn rebalance_pending(&self) -> bool {
        self.group.as_ref().is_some_and(GroupMember::needs_join)
    }

    /// The partitions currently assigned.
    pub fn assignment(&self) -> BTreeSet<TopicPartition> {
        self.partitions.keys().cloned().collect()
    }

    /// The subscribed topics (a pattern's current matches).
    pub fn subscription(&self) -> BTreeSet<String> {
        match self.subscription {
            Subscription::Topics | Subscription::Pattern(_) => self.topics.clone(),
            _ => BTreeSet::new(),
        }
    }

    fn state_mut(&mut self, tp: &TopicPartition) -> Result<&mut PartitionState> {
        self.partitions.get_mut(tp).ok_or_else(|| {
            ClientError::InvalidArgument(format!("partition {tp} is not assigned to this consumer"))
        })
    }

    fn targets(&self, partitions: &[TopicPartition]) -> Vec<TopicPartition> {
        if partitions.is_empty() {
            self.partitions.keys().cloned().collect()
        } else {
            partitions.to_vec()
        }
    }

    /// Makes the next poll return records from `offset` on.
    pub fn seek(&mut self, tp: &TopicPartition, offset: i64) -> Result<()> {
        if offset < 0 {
            return Err(ClientError::InvalidArgument(format!(
                "seek offset must not be negative, got {offset}"
            )));
        }
        self.state_mut(tp)?.set_position(offset);
        Ok(())
    }

    /// Seeks to the log start of `partitions` (all assigned when empty);
    /// evaluated lazily at the next poll or position call.
    pub fn seek_to_beginning(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        for tp in self.targets(partitions) {
            self.state_mut(&tp)?.request_reset(OffsetReset::Earliest);
        }
        Ok(())
    }

    /// Seeks to the log end of `partitions` (all assigned when empty).
    pub fn seek_to_end(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        for tp in self.targets(partitions) {
            self.state_mut(&tp)?.request_reset(OffsetReset::Latest);
        }
        Ok(())
    }

    /// The offset of the next record `poll` returns for `tp` (initialising
    /// it from the committed offset or `auto.offset.reset` when unknown).
    pub async fn position(&mut self, tp: &TopicPartition) -> Result<i64> {
        self.state_mut(tp)?;
        self.update_positions().await?;
        self.state_mut(tp)?
            .position
            .ok_or_else(|| ClientError::NoOffsetForPartition {
                partition: tp.to_string(),
                reason: "position unknown".into(),
            })
    }

    /// Stops returning and fetching records of `partitions` until resumed.
    pub fn pause(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        for tp in partitions {
            self.state_mut(tp)?.paused = true;
        }
        Ok(())
    }

    /// Resumes paused partitions.
    pub fn resume(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        for tp in partitions {
            self.state_mut(tp)?.paused = false;
        }
        Ok(())
    }

    /// The paused partitions.
    pub fn paused(&self) -> BTreeSet<TopicPartition> {
        self.partitions
            .iter()
            .filter(|(_, s)| s.paused)
            .map(|(tp, _)| tp.clone())
            .collect()
    }

    /// The last committed offsets of `partitions` for this group (`None`
    /// where nothing is committed).
    pub async fn committed(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, Option<OffsetAndMetadata>>> {
        self.group_required("committed")?;
        let group = self.config.group_id.as_deref().unwrap_or_default();
        let found = self
            .admin
            .list_consumer_group_offsets(group, Some(partitions))
            .await?;
        Ok(partitions
            .iter()
            .map(|tp| (tp.clone(), found.get(tp).cloned()))
            .collect())
    }

    /// The high watermark last seen for `tp` by a fetch (-1 when none yet).
    pub fn high_watermark(&self, tp: &TopicPartition) -> Option<i64> {
        self.partitions.get(tp).map(|s| s.high_watermark)
    }

    fn positions(&self) -> BTreeMap<TopicPartition, OffsetAndMetadata> {
        self.partitions
            .iter()
            .filter_map(|(tp, s)| {
                s.position.map(|offset| {
                    (
                        tp.clone(),
                        OffsetAndMetadata {
                            offset,
                            metadata: None,
                            leader_epoch: s.leader_epoch,
                        },
                    )
                })
            })
            .collect()
    }

    /// Kafka's `groupMetadata()`: the group id, generation, member id and
    /// group instance id, for
    /// [`Producer::send_offsets_to_transaction`](crate::Producer::send_offsets_to_transaction).
    /// Fails without a `group.id`.
    pub fn group_metadata(&self) -> Result<ConsumerGroupMetadata> {
        let link = self.link()?;
        let st = link.state();
        Ok(ConsumerGroupMetadata {
            group_id: link.group_id.clone(),
            generation_id: st.generation,
            member_id: st.member_id.clone(),
            group_instance_id: link.instance_id.clone(),
        })
    }

    fn link(&self) -> Result<Arc<Link>> {
        self.group
            .as_ref()
            .map(|g| g.link().clone())
            .ok_or_else(|| ClientError::InvalidArgument("commit needs a group.id".into()))
    }

    /// Commits the current positions of all assigned partitions and waits.
    pub async fn commit_sync(&mut self) -> Result<()> {
        let offsets = self.positions();
        self.commit_offsets(&offsets).await
    }

    /// Commits the given offsets (the offset of the next record to read)
    /// and waits.
    pub async fn commit_offsets(
        &mut self,
        offsets: &BTreeMap<TopicPartition, OffsetAndMetadata>,
    ) -> Result<()> {
        self.commit_ordered(offsets.clone(), true).await
    }

    /// Queues a commit behind earlier ones; the future gives its outcome.
    /// (Not an `async fn`: the consumer is not borrowed while it waits.)
    fn commit_ordered(
        &self,
        offsets: BTreeMap<TopicPartition, OffsetAndMetadata>,
        retry: bool,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let rx = self.link().map(|l| l.commit_in_order(offsets, retry));
        async move {
            match rx {
                Ok(rx) => CommitFuture { rx: Some(rx) }.await,
                Err(e) => Err(e),
            }
        }
    }

    /// Starts committing the current positions; the returned future gives
    /// the result (dropping it does not cancel the commit). Commits are sent
    /// in call order, one at a time; an asynchronous commit is not retried
    /// (as in Kafka: a retry could overwrite a newer commit).
    pub fn commit_async(&mut self) -> Result<CommitFuture> {
        let link = self.link()?;
        Ok(CommitFuture {
            rx: Some(link.commit_in_order(self.positions(), false)),
        })
    }

    /// Earliest offsets of `partitions`.
    pub async fn beginning_offsets(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        self.list_offsets(partitions, OffsetSpec::Earliest).await
    }

    /// End offsets of `partitions` (the last stable offset under
    /// `read_committed`).
    pub async fn end_offsets(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        self.list_offsets(partitions, OffsetSpec::Latest).await
    }

    async fn list_offsets(
        &self,
        partitions: &[TopicPartition],
        spec: OffsetSpec,
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        let req: Vec<(TopicPartition, OffsetSpec)> =
            partitions.iter().map(|tp| (tp.clone(), spec)).collect();
        let found = self
            .admin
            .list_offsets_with_isolation(&req, self.config.isolation_level)
            .await?;
        Ok(found.into_iter().map(|(tp, i)| (tp, i.offset)).collect())
    }

    /// Returns the next records (at most `max.poll.records`), waiting up to
    /// `timeout` for some to arrive. Runs group rebalances and the
    /// rebalance listener, and auto commits, as needed.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        self.check_open()?;
        if matches!(self.subscription, Subscription::None) {
            return Err(ClientError::InvalidArgument(
                "poll needs a subscription or an assignment".into(),
            ));
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.pending_error.take() {
                return Err(e);
            }
            if let Some(e) = self
                .group
                .as_ref()
                .and_then(|g| g.link().state().fatal.clone())
            {
                return Err(e);
            }
            if let Some(g) = &self.group {
                g.polled();
            }
            self.maybe_refresh_metadata().await?;
            if !self.ensure_group(deadline).await? {
                return Ok(Vec::new());
            }
            self.maybe_auto_commit();
            self.update_positions().await?;
            while let Ok(outcome) = self.fetch_rx.try_recv() {
                self.handle_fetch(outcome);
            }
            for (tp, leader, epoch) in std::mem::take(&mut self.leader_hints) {
                self.cluster
                    .apply_leader_hint(&tp.topic, tp.partition, leader, epoch, &[])
                    .await;
            }
            // No await between taking records and returning them: a poll
            // cancelled here must not lose records.
            let metadata = self.cluster.metadata().await;
            let records = self.drain();
            self.send_fetches(&metadata);
            if !records.is_empty() {
                return Ok(records);
            }
            if let Some(e) = self.pending_error.take() {
                return Err(e);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            let mut wake_at = deadline;
            if self.config.auto_commit() {
                wake_at = wake_at.min(self.next_auto_commit);
            }
            if let Some(retry) = self
                .partitions
                .values()
                .filter(|s| !s.paused && !s.in_flight)
                .filter_map(|s| s.retry_after)
                .filter(|t| *t > now)
                .min()
            {
                wake_at = wake_at.min(retry);
            }
            let link = self.group.as_ref().map(|g| g.link().clone());
            let rejoin = async {
                match &link {
                    Some(l) => l.wake.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                outcome = self.fetch_rx.recv() => {
                    if let Some(outcome) = outcome {
                        self.handle_fetch(outcome);
                    }
                }
                () = rejoin => {}
                () = tokio::time::sleep_until(wake_at.into()) => {}
            }
        }
    }

    /// Refreshes metadata when stale or every `metadata.max.age.ms`; for a
    /// pattern, re-resolves the matched topics; for a group leader, notices
    /// partition-count changes. Either asks for a rejoin.
    async fn maybe_refresh_metadata(&mut self) -> Result<()> {
        let due = self.last_metadata.elapsed() >= self.config.metadata_max_age;
        if !due && !self.metadata_stale {
            return Ok(());
        }
        self.last_metadata = Instant::now();
        self.metadata_stale = false;
        if let Subscription::Pattern(re) = &self.subscription {
            let (md, _) = self.cluster.refresh(None).await?;
            let matched: BTreeSet<String> = md
                .topics
                .values()
                .filter(|t| !t.is_internal && re.is_match(&t.name))
                .map(|t| t.name.clone())
                .collect();
            if matched != self.topics {
                self.topics = matched;
                if let Some(g) = &self.group {
                    g.request_rejoin();
                }
            }
        } else if !self.topics.is_empty() {
            let topics: Vec<String> = self.topics.iter().cloned().collect();
            // Best effort: errors show up again on the next fetch.
            let _ = self.cluster.refresh(Some(&topics)).await;
        }
        if let Some(g) = &self.group {
            if let Some(snapshot) = &g.leader_snapshot {
                let topics: Vec<String> = snapshot.keys().cloned().collect();
                let mut all: BTreeSet<String> = topics.into_iter().collect();
                all.extend(self.topics.iter().cloned());
                let all: Vec<String> = all.into_iter().collect();
                if let Ok(counts) = g.partition_counts(&all).await {
                    let known: BTreeMap<String, i32> = counts
                        .into_iter()
                        .filter(|(t, _)| snapshot.contains_key(t) || self.topics.contains(t))
                        .collect();
                    if &known != snapshot {
                        g.request_rejoin();
                    }
                }
            }
        }
        Ok(())
    }

    fn notify_listener(&mut self, what: ListenerCall, partitions: &[TopicPartition]) {
        if let Some(l) = self.listener.as_mut() {
            let l = l
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match what {
                ListenerCall::Revoked => l.on_partitions_revoked(partitions),
                ListenerCall::Assigned => l.on_partitions_assigned(partitions),
                ListenerCall::Lost => l.on_partitions_lost(partitions),
            }
        }
    }

    /// Joins the group when needed; `false` when the deadline passed first.
    async fn ensure_group(&mut self, deadline: Instant) -> Result<bool> {
        if !matches!(
            self.subscription,
            Subscription::Topics | Subscription::Pattern(_)
        ) {
            return Ok(true);
        }
        let Some(group) = &self.group else {
            return Ok(true);
        };
        if group.take_lost() && !self.partitions.is_empty() {
            let lost: Vec<TopicPartition> = self.partitions.keys().cloned().collect();
            self.partitions.clear();
            self.notify_listener(ListenerCall::Lost, &lost);
        }
        if !self.group.as_ref().is_some_and(GroupMember::needs_join) {
            return Ok(true);
        }
        // No join runs yet (`join_prepare`), and the application has not
        // allowed one: it gets the chance to commit first.
        if self.join_prepare && self.rejoin_gate == Some(false) {
            return Ok(false);
        }
        // onJoinPrepare: commit, then revoke (everything when eager; only
        // unsubscribed topics when cooperative).
        if std::mem::take(&mut self.join_prepare)
            && self.config.auto_commit()
            && !self.partitions.is_empty()
        {
            if let Err(e) = self.commit_ordered(self.positions(), true).await {
                tracing::warn!(error = %e, "auto commit before rebalance failed");
            }
        }
        let cooperative = self.config.rebalance_protocol() == RebalanceProtocol::Cooperative;
        let revoked: Vec<TopicPartition> = self
            .partitions
            .keys()
            .filter(|tp| !cooperative || !self.topics.contains(&tp.topic))
            .cloned()
            .collect();
        if !revoked.is_empty() {
            for tp in &revoked {
                self.partitions.remove(tp);
            }
            self.notify_listener(ListenerCall::Revoked, &revoked);
        }
        let topics: Vec<String> = self.topics.iter().cloned().collect();
        let owned: Vec<TopicPartition> = self.partitions.keys().cloned().collect();
        let Some(group) = self.group.as_mut() else {
            return Ok(true);
        };
        // Cooperative: keep consuming the partitions this member owns while
        // the join runs in the background; eager: nothing is owned, wait.
        let keep_consuming = cooperative && !owned.is_empty();
        let wait_until = if keep_consuming {
            Instant::now()
        } else {
            deadline
        };
        let Some(joined) = group.join(&topics, &owned, wait_until).await? else {
            return Ok(keep_consuming);
        };
        self.join_prepare = true;
        if self.rejoin_gate.is_some() {
            self.rejoin_gate = Some(false);
        }
        let new: BTreeSet<TopicPartition> = joined.assignment.into_iter().collect();
        let old: BTreeSet<TopicPartition> = self.partitions.keys().cloned().collect();
        let revoked: Vec<TopicPartition> = old.difference(&new).cloned().collect();
        let added: Vec<TopicPartition> = new.difference(&old).cloned().collect();
        if !revoked.is_empty() {
            for tp in &revoked {
                self.partitions.remove(tp);
            }
            self.notify_listener(ListenerCall::Revoked, &revoked);
            // Cooperative: the revoked partitions go to others in a
            // follow-up rebalance.
            if let Some(g) = &self.group {
                g.request_rejoin();
            }
        }
        for tp in &added {
            self.partitions.entry(tp.clone()).or_default();
        }
        self.notify_listener(ListenerCall::Assigned, &added);
        Ok(true)
    }

    fn maybe_auto_commit(&mut self) {
        if !self.config.auto_commit() || Instant::now() < self.next_auto_commit {
            return;
        }
        self.next_auto_commit = Instant::now() + self.config.auto_commit_interval;
        if let Some(rx) = self.auto_commit.as_mut() {
            match rx.try_recv() {
                Err(oneshot::error::TryRecvError::Empty) => return,
                Ok(Err(e)) => tracing::warn!(error = %e, "auto commit failed"),
                _ => {}
            }
        }
        let offsets = self.positions();
        if offsets.is_empty() {
            return;
        }
        if let Ok(link) = self.link() {
            self.auto_commit = Some(link.commit_in_order(offsets, false));
        }
    }

    /// Initialises unknown positions: the committed offset (with a group),
    /// else the reset policy through ListOffsets.
    async fn update_positions(&mut self) -> Result<()> {
        let unknown: Vec<TopicPartition> = self
            .partitions
            .iter()
            .filter(|(_, s)| s.position.is_none() && s.reset.is_none())
            .map(|(tp, _)| tp.clone())
            .collect();
        if !unknown.is_empty() {
            let committed = match &self.config.group_id {
                Some(group) => match self.admin.consumer_group_offsets(group, &unknown).await {
                    Ok(c) => c,
                    // UNSTABLE_OFFSET_COMMIT, a moving coordinator: the
                    // positions stay unknown and the next round retries.
                    Err(e) if e.is_retriable() => {
                        tracing::debug!(error = %e, "committed offsets not available yet");
                        tokio::time::sleep(self.config.client.retry_backoff).await;
                        return Ok(());
                    }
                    Err(e) => return Err(e),
                },
                None => BTreeMap::new(),
            };
            for tp in unknown {
                let reset = self.config.auto_offset_reset;
                if let Some(s) = self.partitions.get_mut(&tp) {
                    match committed.get(&tp) {
                        Some(om) if om.offset >= 0 => {
                            s.set_position(om.offset);
                            s.leader_epoch = om.leader_epoch;
                        }
                        _ if reset == OffsetReset::None => {
                            return Err(ClientError::NoOffsetForPartition {
                                partition: tp.to_string(),
                                reason: "no committed offset".into(),
                            })
                        }
                        _ => s.reset = Some(reset),
                    }
                }
            }
        }
        let mut by_spec: Vec<(TopicPartition, OffsetSpec)> = Vec::new();
        for (tp, s) in &self.partitions {
            match s.reset {
                Some(OffsetReset::Earliest) => by_spec.push((tp.clone(), OffsetSpec::Earliest)),
                Some(OffsetReset::Latest) => by_spec.push((tp.clone(), OffsetSpec::Latest)),
                Some(OffsetReset::None) => {
                    return Err(ClientError::NoOffsetForPartition {
                        partition: tp.to_string(),
                        reason: "the position is out of range".into(),
                    })
                }
                None => {}
            }
        }
        if by_spec.is_empty() {
            return Ok(());
        }
        let found = self
            .admin
            .list_offsets_with_isolation(&by_spec, self.config.isolation_level)
            .await?;
        for (tp, info) in found {
            if let Some(s) = self.partitions.get_mut(&tp) {
                if s.reset.is_some() {
                    s.set_position(info.offset);
                }
            }
        }
        Ok(())
    }

    async fn leave_group(&mut self, reason: &str) {
        let Some(group) = &self.group else {
            return;
        };
        // Out of the group already (removed, or never joined): the
        // partitions are lost, and committing would fail.
        let member = group.generation().0 >= 0;
        if member && self.config.auto_commit() && !self.partitions.is_empty() {
            if let Err(e) = self.commit_ordered(self.positions(), true).await {
                tracing::warn!(error = %e, "final auto commit failed");
            }
        }
        let owned: Vec<TopicPartition> = self.partitions.keys().cloned().collect();
        if !owned.is_empty() {
            let call = if member {
                ListenerCall::Revoked
            } else {
                ListenerCall::Lost
            };
            self.notify_listener(call, &owned);
        }
        if let Some(g) = self.group.as_mut() {
            g.leave(reason).await;
            g.link().state().subscribed = false;
        }
    }

    /// Commits (with auto commit), revokes, leaves the group and stops.
    pub async fn close(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        if let Some(rx) = self.auto_commit.take() {
            let _ = rx.await;
        }
        if matches!(
            self.subscription,
            Subscription::Topics | Subscription::Pattern(_)
        ) {
            self.leave_group("the consumer is being closed").await;
        } else if self.config.auto_commit() && !self.partitions.is_empty() {
            self.commit_ordered(self.positions(), true).await?;
        }
        self.closed = true;
        self.partitions.clear();
        self.idle_conns.clear();
        Ok(())
    }
}

#[derive(Debug, Clone, Copy)]
enum ListenerCall {
    Revoked,
    Assigned,
    Lost,
}
