//! The metadata quorum (design 018): controllers replicate the metadata
//! log with Raft (openraft). openraft's log storage is the metadata log
//! `__cluster_metadata-0` ([`log_store`]), its state machine the
//! [`MetadataImage`] ([`state_machine`]), its snapshots design 004's
//! `.checkpoint` files; RPCs travel over the CONTROLLER listener in a framed
//! protocol of our own ([`network`], encoded by [`codec`]).
//!
//! [`MetadataQuorum`] is one controller: it starts Raft, serves the peers,
//! and takes metadata changes, forwarding them to the quorum leader when it
//! is not the leader; every controller's image follows the committed log.

pub mod backend;
pub mod codec;
pub mod describe;
pub mod log_store;
pub mod network;
pub mod proposer;
pub mod state_machine;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::RaftError;
use openraft::{BasicNode, Config, SnapshotPolicy};
use sluice_storage::Clock;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::{ControllerError, Result};
use crate::image::MetadataImage;
use crate::records::MetadataRecord;
use crate::store::MetadataLogConfig;
use describe::{Describer, QuorumDescription};
use log_store::LogStore;
use network::{CallError, Network, Peer};
use proposer::{ProposeError, Proposer};
use state_machine::{Applied, StateMachine};

/// How long start-up waits for the committed entries to be re-applied.
const STARTUP_APPLY_WAIT: Duration = Duration::from_secs(60);

/// A controller's `node.id`.
pub type NodeId = u64;

/// A normal Raft entry: one metadata change, applied whole (one batch of
/// the metadata log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataChange {
    pub records: Vec<MetadataRecord>,
}

openraft::declare_raft_types!(
    /// openraft's types for the metadata quorum: entries carry metadata
    /// changes, applying one answers with the image after it.
    pub TypeConfig:
        D = MetadataChange,
        R = Arc<MetadataImage>,
);

/// A log entry of the quorum.
pub type Entry = openraft::Entry<TypeConfig>;
/// The Raft handle.
pub type Raft = openraft::Raft<TypeConfig>;

/// One controller's settings.
#[derive(Debug, Clone)]
pub struct QuorumConfig {
    /// `node.id`
    pub node_id: NodeId,
    /// `controller.quorum.voters`: id → `host:port` of its CONTROLLER
    /// listener.
    pub voters: BTreeMap<NodeId, String>,
    /// `controller.quorum.election.timeout.ms` (the randomized timeout
    /// lies between it and twice it, as Kafka).
    pub election_timeout_ms: u64,
    /// Leader heartbeat interval (openraft's; Kafka's followers fetch every
    /// `controller.quorum.fetch.timeout.ms` / 2 at most).
    pub heartbeat_interval_ms: u64,
    /// Time a metadata change may take, forwarding included
    /// (`controller.quorum.request.timeout.ms`).
    pub request_timeout_ms: u64,
    /// A snapshot is built after this many entries since the last one.
    pub snapshot_every_entries: u64,
    /// Entries kept in the log below the newest snapshot (for followers
    /// that are a little behind; beyond, they get the snapshot).
    pub entries_kept_after_snapshot: u64,
    /// `broker.session.timeout.ms`: a registered broker (every voter is
    /// one) that has not answered the leader's heartbeats for this long is
    /// fenced; it is unfenced when it answers again.
    pub broker_session_timeout_ms: u64,
    /// The static `unclean.leader.election.enable`: whether a partition
    /// left without a live ISR member gets a leader out of the ISR, for
    /// topics that do not set it and without a cluster-wide dynamic value
    /// (see [`crate::election::unclean_enabled`]).
    pub unclean_leader_election_enable: bool,
    /// `Some(host)`: this node is an observer (`process.roles=broker`), not
    /// a voter: it receives the committed log as a Raft learner, which the
    /// leader pushes to `host:<port of the listener it is started on>`;
    /// its changes are forwarded to the leader like a follower's.
    pub observer_host: Option<String>,
    pub log: MetadataLogConfig,
}

impl QuorumConfig {
    /// A quorum of `voters` as seen from `node_id`, Kafka's default
    /// timeouts (election 1 s, request 2 s).
    pub fn new(node_id: NodeId, voters: BTreeMap<NodeId, String>) -> Self {
        Self {
            node_id,
            voters,
            election_timeout_ms: 1000,
            heartbeat_interval_ms: 200,
            request_timeout_ms: 2000,
            snapshot_every_entries: 1000,
            entries_kept_after_snapshot: 100,
            broker_session_timeout_ms: 9000,
            unclean_leader_election_enable: false,
            observer_host: None,
            log: MetadataLogConfig::default(),
        }
    }

    fn raft_config(&self) -> Result<Config> {
        let c = Config {
            cluster_name: "sluice-metadata".into(),
            election_timeout_min: self.election_timeout_ms,
            election_timeout_max: self.election_timeout_ms * 2,
            heartbeat_interval: self.heartbeat_interval_ms,
            install_snapshot_timeout: self.request_timeout_ms.max(1000),
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_every_entries),
            max_in_snapshot_log_to_keep: self.entries_kept_after_snapshot,
            purge_batch_size: 1,
            ..Config::default()
        };
        c.validate()
            .map_err(|e| ControllerError::Quorum(format!("quorum settings: {e}")))
    }
}

/// One controller of the metadata quorum.
pub struct MetadataQuorum {
    node_id: NodeId,
    raft: Raft,
    sm: StateMachine,
    log: LogStore,
    proposer: Arc<Proposer>,
    describer: Arc<Describer>,
    voters: BTreeMap<NodeId, String>,
    request_timeout: Duration,
    server: JoinHandle<()>,
    jitter: JoinHandle<()>,
    fencer: JoinHandle<()>,
    /// An observer's task asking the leader to replicate to it.
    joiner: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MetadataQuorum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataQuorum")
            .field("node_id", &self.node_id)
            .field("voters", &self.voters)
            .field("leader", &self.leader())
            .finish_non_exhaustive()
    }
}

impl MetadataQuorum {
    /// Opens the metadata log in `data_dir`, starts Raft and serves peers
    /// on `listener` (the CONTROLLER listener, already bound). On first
    /// start the voter set is written as the log's first entry (the
    /// "format" step Kafka needs a tool for); every voter does the same,
    /// so their first entries agree. An observer (`observer_host` set)
    /// writes nothing: it asks the leader to add it as a learner and
    /// receives the log from it.
    pub async fn start(
        data_dir: &Path,
        config: QuorumConfig,
        listener: TcpListener,
        clock: Arc<dyn Clock>,
    ) -> Result<Self> {
        let observer_addr = match &config.observer_host {
            Some(host) => {
                if config.voters.contains_key(&config.node_id) {
                    return Err(ControllerError::Quorum(format!(
                        "node.id {} is a voter of controller.quorum.voters: it cannot be an observer",
                        config.node_id
                    )));
                }
                let port = listener
                    .local_addr()
                    .map_err(|e| ControllerError::Quorum(format!("observer listener: {e}")))?
                    .port();
                Some(format!("{host}:{port}"))
            }
            None => None,
        };
        if observer_addr.is_none() && !config.voters.contains_key(&config.node_id) {
            return Err(ControllerError::Quorum(format!(
                "node.id {} is not among controller.quorum.voters {:?}",
                config.node_id,
                config.voters.keys().collect::<Vec<_>>()
            )));
        }
        let raft_config = Arc::new(config.raft_config()?);
        let log = LogStore::open(data_dir, &config.log, Arc::clone(&clock))?;
        let sm = StateMachine::open(log.clone(), Arc::clone(&clock))?;
        let network = Network {
            log: Some(log.clone()),
            ..Network::default()
        };
        let liveness = Arc::clone(&network.liveness);
        let raft = Raft::new(
            config.node_id,
            raft_config,
            network,
            log.clone(),
            sm.clone(),
        )
        .await
        .map_err(|e| ControllerError::Quorum(format!("starting Raft: {e}")))?;
        let jitter = tokio::spawn(break_split_votes(raft.clone(), config.election_timeout_ms));
        let proposer = Arc::new(Proposer::new(raft.clone(), sm.clone()));
        let describer = Arc::new(Describer {
            node_id: config.node_id,
            raft: raft.clone(),
            log: log.clone(),
            liveness: Arc::clone(&liveness),
            voters: config.voters.clone(),
            clock,
            election_timeout: Duration::from_millis(config.election_timeout_ms),
        });
        let server = network::serve(
            listener,
            raft.clone(),
            Arc::clone(&proposer),
            Arc::clone(&describer),
        );
        let fencer = tokio::spawn(fence_silent_brokers(
            config.node_id,
            raft.clone(),
            sm.clone(),
            Arc::clone(&proposer),
            liveness,
            Duration::from_millis(config.broker_session_timeout_ms.max(10)),
            config.unclean_leader_election_enable,
        ));
        let initialized = raft
            .is_initialized()
            .await
            .map_err(|e| ControllerError::Quorum(e.to_string()))?;
        if !initialized && observer_addr.is_none() {
            let members: BTreeMap<NodeId, BasicNode> = config
                .voters
                .iter()
                .map(|(id, addr)| (*id, BasicNode::new(addr.clone())))
                .collect();
            match raft.initialize(members).await {
                Ok(()) => {}
                // Another voter's first entry reached us first.
                Err(RaftError::APIError(e)) => {
                    tracing::debug!(error = %e, "quorum already initialized")
                }
                Err(e) => {
                    server.abort();
                    jitter.abort();
                    fencer.abort();
                    let _ = raft.shutdown().await;
                    return Err(ControllerError::Quorum(format!("initializing: {e}")));
                }
            }
        }
        let joiner = observer_addr.map(|addr| {
            tokio::spawn(join_as_observer(
                config.node_id,
                addr,
                config.voters.clone(),
                raft.clone(),
                sm.clone(),
                Duration::from_millis(config.request_timeout_ms.max(100)),
            ))
        });
        tracing::info!(
            node_id = config.node_id,
            voters = ?config.voters,
            observer = joiner.is_some(),
            "metadata quorum started"
        );
        let committed = log.state().committed;
        let quorum = Self {
            node_id: config.node_id,
            raft,
            sm,
            log,
            proposer,
            describer,
            voters: config.voters,
            // A change waits out a failover: followers keep the old
            // leader's lease, then time out (up to twice the election
            // timeout), then elect.
            request_timeout: Duration::from_millis(
                config.request_timeout_ms + 4 * config.election_timeout_ms,
            ),
            server,
            jitter,
            fencer,
            joiner,
        };
        // openraft re-applies what was committed before the restart; the
        // image is complete (for the broker's start-up reconciliation) once
        // it has.
        if let Some(c) = committed {
            if let Err(e) = quorum.wait_applied(c.index, STARTUP_APPLY_WAIT).await {
                let _ = quorum.shutdown().await;
                return Err(e);
            }
        }
        Ok(quorum)
    }

    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// The current image (what the committed log built here).
    pub fn image(&self) -> Arc<MetadataImage> {
        Arc::clone(&self.sm.applied().image)
    }

    /// What has been applied (image, last log id, membership).
    pub fn applied(&self) -> Applied {
        self.sm.applied()
    }

    /// Follows the applied state.
    pub fn subscribe(&self) -> watch::Receiver<Applied> {
        self.sm.subscribe()
    }

    /// The quorum leader this node knows of.
    pub fn leader(&self) -> Option<NodeId> {
        self.raft.metrics().borrow().current_leader
    }

    /// The current term (Kafka's leader epoch of the quorum).
    pub fn term(&self) -> u64 {
        self.raft.metrics().borrow().current_term
    }

    /// Whether this node is an observer (broker-only), not a voter.
    pub fn is_observer(&self) -> bool {
        !self.voters.contains_key(&self.node_id)
    }

    /// The voters' ids.
    pub fn voter_ids(&self) -> BTreeSet<NodeId> {
        self.voters.keys().copied().collect()
    }

    /// The metadata log (for tools and DescribeLogDirs).
    pub fn log(&self) -> Arc<sluice_storage::Log> {
        self.log.log()
    }

    /// Names of the snapshots kept (`<offset>-<epoch>`), and the log start.
    pub fn snapshot_state(&self) -> (Option<String>, i64) {
        (
            self.sm.current_snapshot().map(|m| m.snapshot_id),
            self.log.log().log_start_offset(),
        )
    }

    /// Waits until some node is known as the leader.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<NodeId> {
        let mut rx = self.raft.metrics();
        let r = tokio::time::timeout(timeout, async {
            loop {
                if let Some(l) = rx.borrow_and_update().current_leader {
                    return Ok(l);
                }
                if rx.changed().await.is_err() {
                    return Err(ControllerError::Quorum("Raft stopped".into()));
                }
            }
        })
        .await;
        r.unwrap_or_else(|_| {
            Err(ControllerError::NotController(format!(
                "no quorum leader within {timeout:?}"
            )))
        })
    }

    /// Waits until this node has applied the entry at `index`.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> Result<Arc<MetadataImage>> {
        let mut rx = self.sm.subscribe();
        let r = tokio::time::timeout(timeout, async {
            loop {
                {
                    let a = rx.borrow_and_update();
                    if a.last_applied.is_some_and(|l| l.index >= index) {
                        return Ok(Arc::clone(&a.image));
                    }
                }
                if rx.changed().await.is_err() {
                    return Err(ControllerError::Quorum("state machine stopped".into()));
                }
            }
        })
        .await;
        r.unwrap_or_else(|_| {
            Err(ControllerError::Quorum(format!(
                "entry {index} not applied within {timeout:?}"
            )))
        })
    }

    /// Commits `records` as one change through the quorum leader (this
    /// node, or the leader it forwards to) and returns this node's image
    /// once it includes the change. Fails with
    /// [`ControllerError::NotController`] when no leader answers within
    /// the request timeout plus four election timeouts (time for a
    /// failover).
    pub async fn write(&self, records: Vec<MetadataRecord>) -> Result<Arc<MetadataImage>> {
        if records.is_empty() {
            return Ok(self.image());
        }
        let deadline = Instant::now() + self.request_timeout;
        let mut last_error = String::from("no quorum leader");
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ControllerError::NotController(last_error));
            }
            let index = match self.proposer.propose(records.clone()).await {
                Ok((_, image)) => return Ok(image),
                Err(ProposeError::Rejected(e)) => return Err(e),
                Err(ProposeError::Raft(e)) => {
                    last_error = e;
                    None
                }
                Err(ProposeError::NotLeader(leader)) => match leader {
                    Some((id, node)) if id != self.node_id => {
                        let mut peer = Peer::new(id, node.addr);
                        match peer.forward(&records, left).await {
                            Ok(index) => Some(index),
                            Err(CallError::Rejected { error, .. }) => return Err(error),
                            Err(e) => {
                                last_error = e.to_string();
                                None
                            }
                        }
                    }
                    _ => None,
                },
            };
            match index {
                Some(index) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    return self
                        .wait_applied(index, left.max(Duration::from_millis(100)))
                        .await;
                }
                None => tokio::time::sleep(Duration::from_millis(50).min(left)).await,
            }
        }
    }

    /// The quorum as its leader describes it (DescribeQuorum): this node's
    /// own view when it leads, else the leader's, asked over the
    /// CONTROLLER listener. Fails with [`ControllerError::NotController`]
    /// when no leader answers within the request timeout plus four
    /// election timeouts.
    pub async fn describe(&self) -> Result<QuorumDescription> {
        let deadline = Instant::now() + self.request_timeout;
        let mut last_error = String::from("no quorum leader");
        loop {
            let leader = match self.describer.describe() {
                Ok(d) => return Ok(d),
                Err(leader) => leader,
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ControllerError::NotController(last_error));
            }
            if let Some(addr) = leader.and_then(|id| self.voters.get(&id).map(|a| (id, a))) {
                let mut peer = Peer::new(addr.0, addr.1.clone());
                match peer.describe(left).await {
                    Ok(d) => return Ok(d),
                    Err(e) => last_error = e.to_string(),
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep(Duration::from_millis(50).min(left)).await;
        }
    }

    /// Builds a snapshot now (openraft purges the log below it, keeping
    /// `entries_kept_after_snapshot` entries).
    pub async fn snapshot_now(&self) -> Result<()> {
        self.raft
            .trigger()
            .snapshot()
            .await
            .map_err(|e| ControllerError::Quorum(e.to_string()))
    }

    /// Stops serving peers and stops Raft; the log is closed.
    pub async fn shutdown(&self) -> Result<()> {
        self.server.abort();
        self.jitter.abort();
        self.fencer.abort();
        if let Some(j) = &self.joiner {
            j.abort();
        }
        self.raft
            .shutdown()
            .await
            .map_err(|e| ControllerError::Quorum(format!("stopping Raft: {e}")))?;
        self.log.log().close()?;
        Ok(())
    }
}

/// Kafka's broker sessions, with Raft's heartbeats as the broker
/// heartbeats (every broker is a voter or a learner of the quorum, and
/// the leader replicates to both): while this node leads, a
/// registered broker that has not answered its AppendEntries for the
/// session timeout is fenced (BrokerRegistrationChangeRecord, fenced 1) —
/// Metadata and DescribeCluster then leave it out — and unfenced (-1) when
/// it answers again. For a session timeout after becoming leader nobody is
/// fenced (the new leader has not heard from anyone yet). The leader's own
/// registration counts as alive (a node fenced while paused, that became
/// leader since, unfences itself).
///
/// Each round also gives the leaderless partitions of every live broker a
/// leader where one may be elected (an ISR member that came back, or, for
/// topics with `unclean.leader.election.enable` on, any live replica; the
/// static default of that is `unclean_default`): Kafka's periodic unclean
/// election check, run every `broker.session.timeout.ms` / 4 here rather
/// than every `unclean.leader.election.interval.ms`.
async fn fence_silent_brokers(
    node_id: NodeId,
    raft: Raft,
    sm: StateMachine,
    proposer: Arc<Proposer>,
    liveness: Arc<network::Liveness>,
    session: Duration,
    unclean_default: bool,
) {
    let mut led_since: Option<(u64, Instant)> = None;
    // When this leader first saw each registration (broker id and epoch):
    // a broker gets a whole session from its registration to answer
    // (Kafka's heartbeat manager starts its session there), so one that
    // just registered is not fenced before its first acknowledgement.
    let mut registered_at: std::collections::HashMap<(i32, i64), Instant> =
        std::collections::HashMap::new();
    loop {
        tokio::time::sleep((session / 4).max(Duration::from_millis(20))).await;
        let (leader, term) = {
            let m = raft.metrics();
            let m = m.borrow();
            (m.state == openraft::ServerState::Leader, m.current_term)
        };
        if !leader {
            led_since = None;
            continue;
        }
        let since = match led_since {
            Some((t, at)) if t == term => at,
            _ => {
                led_since = Some((term, Instant::now()));
                continue;
            }
        };
        if since.elapsed() < session {
            continue;
        }
        let image = sm.applied().image;
        registered_at.retain(|(id, epoch), _| image.broker(*id).is_some_and(|b| b.epoch == *epoch));
        for b in image.brokers() {
            let Ok(id) = NodeId::try_from(b.id) else {
                continue;
            };
            let first_seen = *registered_at
                .entry((b.id, b.epoch))
                .or_insert_with(Instant::now);
            // The leader is alive by leading: fenced by a former leader
            // while it was paused, it unfences itself.
            let alive = id == node_id
                || liveness.last_ack(id).is_some_and(|t| t.elapsed() < session)
                || (!b.fenced && first_seen.elapsed() < session);
            let fenced = match (b.fenced, alive) {
                (false, false) => 1,
                // Fenced at the end of its controlled shutdown: it stays
                // fenced until it registers again.
                (true, true) if !b.in_controlled_shutdown => -1,
                (false, true) => {
                    // Registered again unfenced (a restart), or a topic's
                    // unclean election turned on: the leaderless partitions
                    // it is a replica of get a leader if one may lead.
                    let records =
                        crate::election::on_broker_session(&image, b.id, false, unclean_default);
                    if !records.is_empty() {
                        if let Err(e) = proposer.propose(records).await {
                            tracing::debug!(broker = b.id, error = ?e, "leader election not committed");
                        }
                    }
                    continue;
                }
                _ => continue,
            };
            let change = MetadataRecord::BrokerRegistrationChange {
                broker_id: b.id,
                broker_epoch: b.epoch,
                fenced,
                in_controlled_shutdown: 0,
            };
            // With it, in the same batch: partitions it led get new
            // leaders, it leaves the ISRs (or leads leaderless ones again).
            let mut next = (*image).clone();
            next.apply(&change);
            let mut records = vec![change];
            records.extend(crate::election::on_broker_session(
                &next,
                b.id,
                fenced == 1,
                unclean_default,
            ));
            match proposer.propose(records).await {
                Ok(_) => tracing::info!(
                    broker = b.id,
                    fenced = fenced == 1,
                    "broker {} after its heartbeats {}",
                    if fenced == 1 { "fenced" } else { "unfenced" },
                    if fenced == 1 { "stopped" } else { "resumed" }
                ),
                Err(e) => {
                    tracing::debug!(broker = b.id, error = ?e, "broker session change not committed")
                }
            }
        }
    }
}

/// An observer's way in (Kafka's brokers fetch the metadata log from the
/// active controller; openraft's leader pushes it to learners): until its
/// applied membership names it as a learner at `addr`, ask the quorum
/// leader (the one it knows, else each voter in turn, following "not the
/// leader" answers) to add it, or to update its address after a restart
/// on another port.
async fn join_as_observer(
    node_id: NodeId,
    addr: String,
    voters: BTreeMap<NodeId, String>,
    raft: Raft,
    sm: StateMachine,
    ttl: Duration,
) {
    let joined = |sm: &StateMachine| {
        sm.applied()
            .membership
            .membership()
            .get_node(&node_id)
            .is_some_and(|n| n.addr == addr)
    };
    if voters.is_empty() {
        return;
    }
    let mut next_hint: Option<NodeId> = None;
    let mut turn = 0usize;
    loop {
        if joined(&sm) {
            tracing::info!(node_id, %addr, "receiving the metadata log as an observer");
            return;
        }
        let known = raft.metrics().borrow().current_leader;
        let ids: Vec<NodeId> = voters.keys().copied().collect();
        let target = next_hint
            .take()
            .or(known)
            .filter(|id| voters.contains_key(id))
            .unwrap_or_else(|| {
                turn += 1;
                ids[turn % ids.len()]
            });
        if let Some(vaddr) = voters.get(&target) {
            let mut peer = Peer::new(target, vaddr.clone());
            match peer.join(node_id, &addr, ttl).await {
                Ok(()) => {
                    // Added: wait for the membership entry to arrive.
                    let _ = tokio::time::timeout(ttl, async {
                        let mut rx = sm.subscribe();
                        while !joined(&sm) {
                            if rx.changed().await.is_err() {
                                return;
                            }
                        }
                    })
                    .await;
                    continue;
                }
                Err(CallError::NotLeader { leader, .. }) => next_hint = leader,
                Err(e) => tracing::debug!(error = %e, "observer join not taken yet; retrying"),
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A random duration in `[lo, hi)` (jitter; not for anything secret).
fn jitter(lo: u64, hi: u64) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    Duration::from_millis(lo + h.finish() % hi.saturating_sub(lo).max(1))
}

/// openraft draws each node's election timeout once, at start; two
/// candidates whose timers line up (the old leader gone, both timing out
/// together under load) can split the vote round after round. A candidate
/// that still sees no leader after a random pause starts the next election
/// itself, so the two fall out of step (Kafka's randomized
/// `controller.quorum.election.backoff.max.ms` plays this part).
async fn break_split_votes(raft: Raft, election_timeout_ms: u64) {
    loop {
        tokio::time::sleep(jitter(election_timeout_ms, election_timeout_ms * 3)).await;
        let (candidate, leaderless) = {
            let m = raft.metrics();
            let m = m.borrow();
            (
                m.state == openraft::ServerState::Candidate,
                m.current_leader.is_none(),
            )
        };
        if candidate && leaderless {
            tracing::debug!("no leader after an election; starting another");
            if raft.trigger().elect().await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests;
