//! Cluster view: bootstrap servers, a metadata cache (brokers, topics,
//! partitions, leaders and leader epochs), one connection per broker id,
//! and retries with backoff that refresh metadata when an error says it is
//! stale (`NOT_LEADER_OR_FOLLOWER`, `UNKNOWN_TOPIC_OR_PARTITION`, lost
//! connections).
//!
//! Failover rules, as the Java client's `Metadata` and `NetworkClient`:
//! - A refresh never moves a partition back to an older leader epoch: a
//!   broker whose metadata lags (just restarted, or paused) may answer with
//!   the leader before an election; such a partition keeps its cached
//!   leader (Kafka's "leader epoch is stale" rule in
//!   `Metadata.updateLatestMetadata`).
//! - A broker address whose connection attempt failed, or whose connection
//!   broke, is not dialled again for `reconnect.backoff.ms`, doubling per
//!   consecutive failure up to `reconnect.backoff.max.ms`; requests for
//!   any broker (metadata) go to the least busy open connection first, then
//!   to brokers not backing off, then to the bootstrap servers, so one dead
//!   or paused node does not wedge the client.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::{Duration, Instant};

use proto_kafka::messages::metadata_request::MetadataRequestTopic;
use proto_kafka::messages::{ApiKey, MetadataRequest, MetadataResponse, TopicName};
use proto_kafka::protocol::{Request, StrBytes};
use tokio::sync::Mutex;

use crate::connection::{Connection, ConnectionConfig, ConnectionHealth};
use crate::error::{ClientError, Result};

/// Highest Metadata version this client speaks.
const METADATA_MAX: i16 = 12;

/// Client-wide settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `host:port` addresses used to discover the cluster.
    pub bootstrap_servers: Vec<String>,
    /// Per-connection settings (client id, timeouts).
    pub connection: ConnectionConfig,
    /// How many times a retriable failure is retried.
    pub retries: u32,
    /// Initial wait between retries; doubles each attempt up to `retry_backoff_max`.
    pub retry_backoff: Duration,
    /// Upper bound of the retry backoff.
    pub retry_backoff_max: Duration,
    /// `reconnect.backoff.ms`: how long an address whose connection failed
    /// is left alone before the next attempt; doubles per consecutive
    /// failure up to `reconnect_backoff_max`.
    pub reconnect_backoff: Duration,
    /// `reconnect.backoff.max.ms`.
    pub reconnect_backoff_max: Duration,
}

impl ClientConfig {
    /// A configuration with defaults for the given bootstrap servers
    /// (comma-separated `host:port` list).
    pub fn new(bootstrap_servers: &str) -> Self {
        ClientConfig {
            bootstrap_servers: bootstrap_servers
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            connection: ConnectionConfig::default(),
            retries: 5,
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            reconnect_backoff: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_secs(1),
        }
    }
}

/// A broker as advertised in metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    /// Broker id.
    pub id: i32,
    /// Advertised host.
    pub host: String,
    /// Advertised port.
    pub port: i32,
    /// Rack, if configured.
    pub rack: Option<String>,
}

impl BrokerInfo {
    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// One partition of a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Partition index.
    pub partition: i32,
    /// Leader broker id (-1 when there is none).
    pub leader: i32,
    /// Leader epoch (-1 when unknown).
    pub leader_epoch: i32,
    /// Replica broker ids.
    pub replicas: Vec<i32>,
    /// In-sync replica broker ids.
    pub isr: Vec<i32>,
    /// Offline replica broker ids.
    pub offline_replicas: Vec<i32>,
    /// Partition-level error code (0 when none).
    pub error_code: i16,
}

/// One topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    /// Topic name.
    pub name: String,
    /// Topic id (all zero when the broker does not send one).
    pub topic_id: [u8; 16],
    /// Whether it is an internal topic (e.g. `__consumer_offsets`).
    pub is_internal: bool,
    /// Partitions by index.
    pub partitions: BTreeMap<i32, PartitionInfo>,
}

/// A snapshot of cluster metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    /// Cluster id, if the broker sends one.
    pub cluster_id: Option<String>,
    /// Controller broker id (-1 when unknown).
    pub controller_id: i32,
    /// Brokers by id.
    pub brokers: BTreeMap<i32, BrokerInfo>,
    /// Topics by name.
    pub topics: BTreeMap<String, TopicInfo>,
}

impl Metadata {
    /// The leader of `topic`/`partition`, if known.
    pub fn leader(&self, topic: &str, partition: i32) -> Option<&BrokerInfo> {
        let p = self.partition(topic, partition)?;
        self.brokers.get(&p.leader)
    }

    /// `topic`/`partition`, if known.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionInfo> {
        self.topics.get(topic)?.partitions.get(&partition)
    }

    /// The leader epoch of `topic`/`partition` (-1 when unknown).
    pub fn leader_epoch(&self, topic: &str, partition: i32) -> i32 {
        self.partition(topic, partition)
            .map_or(-1, |p| p.leader_epoch)
    }
}

/// `fresh` (from a metadata response) merged with the `cached` view of the
/// same topic: a partition whose fresh leader epoch is older than the
/// cached one keeps its cached state (the answering broker's metadata
/// lags). A topic recreated under a new id takes the fresh view whole.
fn merge_topic(cached: Option<&TopicInfo>, mut fresh: TopicInfo) -> TopicInfo {
    let Some(cached) = cached else {
        return fresh;
    };
    let zero = [0u8; 16];
    if cached.topic_id != fresh.topic_id && cached.topic_id != zero && fresh.topic_id != zero {
        return fresh;
    }
    for (index, p) in &mut fresh.partitions {
        let Some(old) = cached.partitions.get(index) else {
            continue;
        };
        if p.leader_epoch >= 0 && old.leader_epoch > p.leader_epoch {
            tracing::debug!(
                topic = %fresh.name,
                partition = index,
                cached = old.leader_epoch,
                received = p.leader_epoch,
                "not replacing the cached leader epoch with a stale one"
            );
            *p = old.clone();
        }
    }
    fresh
}

/// The reconnect backoff after `failures` consecutive failures:
/// `reconnect.backoff.ms` doubled per failure after the first, at most
/// `reconnect.backoff.max.ms`.
fn reconnect_wait(config: &ClientConfig, failures: u32) -> Duration {
    config
        .reconnect_backoff
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(config.reconnect_backoff_max)
}

/// A pooled connection and its lock-free health view.
#[derive(Debug, Clone)]
struct Pooled {
    conn: Arc<Mutex<Connection>>,
    health: ConnectionHealth,
}

/// Reconnect backoff of one address.
#[derive(Debug, Clone, Copy)]
struct Backoff {
    /// No new connection before this instant.
    until: Instant,
    /// Consecutive failures.
    failures: u32,
}

/// Shared cluster state: metadata cache and per-broker connections.
#[derive(Debug)]
pub struct Cluster {
    config: ClientConfig,
    /// Replaced or changed copy-on-write, so that [`Cluster::metadata`]
    /// hands out a snapshot without copying it (the producer's sender
    /// reads it on every pass).
    metadata: Mutex<Arc<Metadata>>,
    connections: Mutex<HashMap<i32, Pooled>>,
    /// Addresses in reconnect backoff.
    backoff: StdMutex<HashMap<String, Backoff>>,
}

impl Cluster {
    /// Connects to the bootstrap servers and loads metadata for all topics.
    pub async fn connect(config: ClientConfig) -> Result<Arc<Self>> {
        if config.bootstrap_servers.is_empty() {
            return Err(ClientError::InvalidArgument(
                "no bootstrap servers given".into(),
            ));
        }
        let cluster = Arc::new(Cluster {
            config,
            metadata: Mutex::new(Arc::new(Metadata::default())),
            connections: Mutex::new(HashMap::new()),
            backoff: StdMutex::new(HashMap::new()),
        });
        cluster.refresh(None).await?;
        Ok(cluster)
    }

    /// The configuration in use.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// A snapshot of the cached metadata (later changes do not show in it).
    pub async fn metadata(&self) -> Arc<Metadata> {
        Arc::clone(&*self.metadata.lock().await)
    }

    /// Fetches metadata (all topics when `topics` is `None`) and merges it
    /// into the cache; returns the raw response's topics as a [`Metadata`].
    /// Topics reported with an error are dropped from the cache; their errors
    /// are returned in the second element.
    ///
    /// The request does not ask the broker to create missing topics (what
    /// consumers and admin clients send); producers use
    /// [`refresh_creating`](Self::refresh_creating).
    pub async fn refresh(
        &self,
        topics: Option<&[String]>,
    ) -> Result<(Metadata, Vec<(String, ClientError)>)> {
        self.refresh_inner(topics, false).await
    }

    /// [`refresh`](Self::refresh) for the named topics, asking the broker
    /// to create the missing ones where it allows auto-creation
    /// (`allow_auto_topic_creation`, as the Java producer's metadata
    /// requests do). A topic the broker does not create comes back in the
    /// errors (UNKNOWN_TOPIC_OR_PARTITION).
    pub async fn refresh_creating(
        &self,
        topics: &[String],
    ) -> Result<(Metadata, Vec<(String, ClientError)>)> {
        self.refresh_inner(Some(topics), true).await
    }

    async fn refresh_inner(
        &self,
        topics: Option<&[String]>,
        allow_auto_create: bool,
    ) -> Result<(Metadata, Vec<(String, ClientError)>)> {
        let mut backoff = self.config.retry_backoff;
        let mut attempt = 0;
        let resp: MetadataResponse = loop {
            match self.fetch_metadata(topics, allow_auto_create).await {
                Ok(r) => break r,
                Err(e) if e.is_retriable() && attempt < self.config.retries => {
                    attempt += 1;
                    tracing::debug!(%e, attempt, "retrying Metadata");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.config.retry_backoff_max);
                }
                Err(e) => return Err(e),
            }
        };
        let mut fresh = Metadata {
            cluster_id: resp.cluster_id.as_ref().map(|s| s.as_str().to_string()),
            controller_id: resp.controller_id.0,
            ..Metadata::default()
        };
        for b in &resp.brokers {
            fresh.brokers.insert(
                b.node_id.0,
                BrokerInfo {
                    id: b.node_id.0,
                    host: b.host.as_str().to_string(),
                    port: b.port,
                    rack: b.rack.as_ref().map(|r| r.as_str().to_string()),
                },
            );
        }
        let mut errors = Vec::new();
        for t in &resp.topics {
            let Some(name) = t.name.as_ref().map(|n| n.0.as_str().to_string()) else {
                continue;
            };
            if let Some(e) = ClientError::from_code(t.error_code, None, format!("topic {name}")) {
                errors.push((name, e));
                continue;
            }
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    (
                        p.partition_index,
                        PartitionInfo {
                            partition: p.partition_index,
                            leader: p.leader_id.0,
                            leader_epoch: p.leader_epoch,
                            replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                            isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                            offline_replicas: p.offline_replicas.iter().map(|b| b.0).collect(),
                            error_code: p.error_code,
                        },
                    )
                })
                .collect();
            fresh.topics.insert(
                name.clone(),
                TopicInfo {
                    name,
                    topic_id: *t.topic_id.as_bytes(),
                    is_internal: t.is_internal,
                    partitions,
                },
            );
        }
        let mut guard = self.metadata.lock().await;
        let cache = Arc::make_mut(&mut guard);
        fresh.topics = std::mem::take(&mut fresh.topics)
            .into_iter()
            .map(|(name, t)| {
                let merged = merge_topic(cache.topics.get(&name), t);
                (name, merged)
            })
            .collect();
        // Leaders kept from the cache stay reachable even if this
        // (lagging) broker does not list them.
        let mut brokers = fresh.brokers.clone();
        for t in fresh.topics.values() {
            for p in t.partitions.values() {
                if let Some(b) = cache.brokers.get(&p.leader) {
                    brokers.entry(p.leader).or_insert_with(|| b.clone());
                }
            }
        }
        fresh.brokers.clone_from(&brokers);
        cache.cluster_id.clone_from(&fresh.cluster_id);
        cache.controller_id = fresh.controller_id;
        cache.brokers = brokers;
        match topics {
            None => cache.topics.clone_from(&fresh.topics),
            Some(_) => {
                for (name, _) in &errors {
                    cache.topics.remove(name);
                }
                for (name, t) in &fresh.topics {
                    cache.topics.insert(name.clone(), t.clone());
                }
            }
        }
        Ok((fresh, errors))
    }

    /// Applies a KIP-951 current-leader hint from a Produce or Fetch
    /// response (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH): when
    /// `epoch` is newer than the cached one and the leader's address is
    /// known (cached, or among `endpoints`), the partition's leader moves
    /// there without waiting for a metadata refresh (Kafka's
    /// `Metadata.updatePartitionLeadership`). Returns whether it did.
    pub async fn apply_leader_hint(
        &self,
        topic: &str,
        partition: i32,
        leader: i32,
        epoch: i32,
        endpoints: &[BrokerInfo],
    ) -> bool {
        if leader < 0 || epoch < 0 {
            return false;
        }
        let mut guard = self.metadata.lock().await;
        let md = Arc::make_mut(&mut guard);
        if let std::collections::btree_map::Entry::Vacant(e) = md.brokers.entry(leader) {
            match endpoints.iter().find(|b| b.id == leader) {
                Some(b) => {
                    e.insert(b.clone());
                }
                None => return false,
            }
        }
        let Some(p) = md
            .topics
            .get_mut(topic)
            .and_then(|t| t.partitions.get_mut(&partition))
        else {
            return false;
        };
        if p.leader_epoch >= epoch {
            return false;
        }
        tracing::debug!(
            topic,
            partition,
            leader,
            epoch,
            "leader moved (hint in the response)"
        );
        p.leader = leader;
        p.leader_epoch = epoch;
        true
    }

    async fn fetch_metadata(
        &self,
        topics: Option<&[String]>,
        allow_auto_create: bool,
    ) -> Result<MetadataResponse> {
        let conn = self.any_connection().await?;
        let mut conn = conn.lock().await;
        let version = conn.version_for(ApiKey::Metadata, METADATA_MAX)?;
        let mut req = MetadataRequest::default();
        req.allow_auto_topic_creation = allow_auto_create;
        req.topics = match topics {
            None if version == 0 => Some(Vec::new()),
            None => None,
            Some(ts) => Some(
                ts.iter()
                    .map(|t| {
                        let mut mt = MetadataRequestTopic::default();
                        mt.name = Some(TopicName(StrBytes::from_string(t.clone())));
                        mt
                    })
                    .collect(),
            ),
        };
        let r = conn.send(&req, version).await;
        drop(conn);
        self.after_failure(r).await
    }

    /// The connection to broker `id`, opened on first use (or after the
    /// previous one broke). While `id`'s address is in reconnect backoff
    /// this fails at once (a retriable I/O error).
    pub async fn connection(&self, id: i32) -> Result<Arc<Mutex<Connection>>> {
        if let Some(p) = self.connections.lock().await.get(&id) {
            if !p.health.is_broken() {
                return Ok(p.conn.clone());
            }
        }
        let addr = {
            let md = self.metadata.lock().await;
            md.brokers
                .get(&id)
                .map(BrokerInfo::addr)
                .ok_or_else(|| ClientError::NoBrokerAvailable(format!("unknown broker id {id}")))?
        };
        let conn = self.dial(&addr).await?;
        let mut pool = self.connections.lock().await;
        // Another caller may have dialed the broker meanwhile: everyone
        // uses one connection per broker (requests to a broker stay in
        // order on it, as an idempotent producer needs; a connection
        // replaced here would be dropped under its own outstanding
        // requests). Ours, still unused, is closed.
        if let Some(p) = pool.get(&id) {
            if !p.health.is_broken() {
                return Ok(p.conn.clone());
            }
        }
        let pooled = Pooled {
            health: conn.health(),
            conn: Arc::new(Mutex::new(conn)),
        };
        let conn = pooled.conn.clone();
        pool.insert(id, pooled);
        Ok(conn)
    }

    /// Opens a connection to `addr` unless it is in reconnect backoff;
    /// records the outcome for the backoff.
    async fn dial(&self, addr: &str) -> Result<Connection> {
        if let Some(wait) = self.backing_off(addr) {
            return Err(ClientError::Io {
                addr: addr.to_string(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    format!(
                        "not reconnecting for another {} ms after a failed connection \
                         (reconnect.backoff.ms)",
                        wait.as_millis()
                    ),
                ),
            });
        }
        match Connection::connect(addr, self.config.connection.clone()).await {
            Ok(c) => {
                self.backoff_lock().remove(addr);
                Ok(c)
            }
            Err(e) => {
                self.connection_failed(addr);
                Err(e)
            }
        }
    }

    fn backoff_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Backoff>> {
        self.backoff.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How long `addr` is still in reconnect backoff, if it is.
    fn backing_off(&self, addr: &str) -> Option<Duration> {
        let b = self.backoff_lock().get(addr).copied()?;
        b.until.checked_duration_since(Instant::now())
    }

    /// A connection attempt to `addr` failed, or its connection broke: no
    /// new one for the next backoff step.
    fn connection_failed(&self, addr: &str) {
        let mut all = self.backoff_lock();
        let failures = all.get(addr).map_or(0, |b| b.failures) + 1;
        let wait = reconnect_wait(&self.config, failures);
        tracing::debug!(addr, failures, ?wait, "connection failed; backing off");
        all.insert(
            addr.to_string(),
            Backoff {
                until: Instant::now() + wait,
                failures,
            },
        );
    }

    /// A connection to any live broker: the open connection with the fewest
    /// requests outstanding, else a known broker not in reconnect backoff,
    /// else a bootstrap server.
    pub async fn any_connection(&self) -> Result<Arc<Mutex<Connection>>> {
        let open = {
            let conns = self.connections.lock().await;
            conns
                .values()
                .filter(|p| !p.health.is_broken())
                .min_by_key(|p| p.health.in_flight())
                .map(|p| p.conn.clone())
        };
        if let Some(c) = open {
            return Ok(c);
        }
        let brokers: Vec<(i32, String)> = {
            let md = self.metadata.lock().await;
            md.brokers.values().map(|b| (b.id, b.addr())).collect()
        };
        let mut last = None;
        for (id, addr) in &brokers {
            if self.backing_off(addr).is_some() {
                continue;
            }
            match self.connection(*id).await {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        for addr in &self.config.bootstrap_servers {
            match self.dial(addr).await {
                Ok(c) => return Ok(Arc::new(Mutex::new(c))),
                Err(e) => last = Some(e),
            }
        }
        Err(ClientError::NoBrokerAvailable(last.map_or_else(
            || "no brokers known".to_string(),
            |e| e.to_string(),
        )))
    }

    /// A connection to the controller (any broker when unknown).
    pub async fn controller_connection(&self) -> Result<Arc<Mutex<Connection>>> {
        let id = self.metadata.lock().await.controller_id;
        if id >= 0 {
            if let Ok(c) = self.connection(id).await {
                return Ok(c);
            }
        }
        self.any_connection().await
    }

    /// The connection to the leader of `topic`/`partition`, refreshing
    /// metadata once if the leader is unknown.
    pub async fn leader_connection(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Arc<Mutex<Connection>>> {
        let leader = |md: &Metadata| md.leader(topic, partition).map(|b| b.id);
        let mut id = leader(&*self.metadata.lock().await);
        if id.is_none() {
            self.refresh(Some(&[topic.to_string()])).await?;
            id = leader(&*self.metadata.lock().await);
        }
        let id = id.ok_or_else(|| {
            ClientError::from_code(3, None, format!("leader of {topic}-{partition}"))
                .unwrap_or_else(|| ClientError::NoBrokerAvailable(topic.to_string()))
        })?;
        self.connection(id).await
    }

    /// Sends `req` to the controller at the best common version (≤ `our_max`)
    /// with retries; returns the response and the version used.
    pub async fn send_controller<R: Request>(
        &self,
        req: &R,
        our_max: i16,
    ) -> Result<(R::Response, i16)> {
        self.with_retries("controller request", || async move {
            let conn = self.controller_connection().await?;
            let mut conn = conn.lock().await;
            let r = conn.send_negotiated(req, our_max).await;
            drop(conn);
            self.after_failure(r).await
        })
        .await
    }

    /// Sends `req` to any broker at the best common version (≤ `our_max`)
    /// with retries.
    pub async fn send_any<R: Request>(&self, req: &R, our_max: i16) -> Result<(R::Response, i16)> {
        self.with_retries("request", || async move {
            let conn = self.any_connection().await?;
            let mut conn = conn.lock().await;
            let r = conn.send_negotiated(req, our_max).await;
            drop(conn);
            self.after_failure(r).await
        })
        .await
    }

    /// Sends `req` to broker `id` with retries.
    pub async fn send_to<R: Request>(
        &self,
        id: i32,
        req: &R,
        our_max: i16,
    ) -> Result<(R::Response, i16)> {
        self.with_retries("request", || async move {
            let conn = self.connection(id).await?;
            let mut conn = conn.lock().await;
            let r = conn.send_negotiated(req, our_max).await;
            drop(conn);
            self.after_failure(r).await
        })
        .await
    }

    /// On a transport failure, drops broken connections so the next attempt
    /// reconnects.
    async fn after_failure<T>(&self, r: Result<T>) -> Result<T> {
        if matches!(r, Err(ClientError::Io { .. } | ClientError::Timeout { .. })) {
            self.drop_broken().await;
        }
        r
    }

    /// Drops broken connections from the pool, putting their brokers in
    /// reconnect backoff.
    pub async fn drop_broken(&self) {
        let dead: Vec<(i32, Pooled)> = {
            let mut conns = self.connections.lock().await;
            let ids: Vec<i32> = conns
                .iter()
                .filter(|(_, p)| p.health.is_broken())
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter()
                .filter_map(|id| conns.remove(&id).map(|p| (id, p)))
                .collect()
        };
        if dead.is_empty() {
            return;
        }
        let md = self.metadata.lock().await;
        for (id, _) in dead {
            if let Some(b) = md.brokers.get(&id) {
                self.connection_failed(&b.addr());
            }
        }
    }

    /// Runs `op` until it succeeds, fails with a non-retriable error, or the
    /// retry budget is spent; waits with exponential backoff between tries
    /// and refreshes metadata when the error says it is stale.
    pub async fn with_retries<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut backoff = self.config.retry_backoff;
        let mut attempt = 0;
        loop {
            match op().await {
                Ok(v) => return Ok(v),
                Err(e) if e.is_retriable() && attempt < self.config.retries => {
                    attempt += 1;
                    tracing::debug!(%e, attempt, what, "retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.config.retry_backoff_max);
                    if e.invalidates_metadata() {
                        // Best effort: a failed refresh shows up on the next try.
                        let _ = self.refresh(None).await;
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(index: i32, leader: i32, epoch: i32) -> PartitionInfo {
        PartitionInfo {
            partition: index,
            leader,
            leader_epoch: epoch,
            replicas: vec![1, 2, 3],
            isr: vec![1, 2, 3],
            offline_replicas: Vec::new(),
            error_code: 0,
        }
    }

    fn topic(id: u8, parts: &[(i32, i32, i32)]) -> TopicInfo {
        TopicInfo {
            name: "t".into(),
            topic_id: [id; 16],
            is_internal: false,
            partitions: parts
                .iter()
                .map(|&(i, l, e)| (i, partition(i, l, e)))
                .collect(),
        }
    }

    #[test]
    fn a_refresh_never_goes_back_to_an_older_leader_epoch() {
        let cached = topic(1, &[(0, 2, 5), (1, 3, 2)]);
        // A lagging broker still names the old leaders of partition 0
        // (epoch 4) while partition 1 moved on (epoch 3).
        let fresh = topic(1, &[(0, 1, 4), (1, 1, 3)]);
        let merged = merge_topic(Some(&cached), fresh);
        assert_eq!(
            merged.partitions[&0],
            partition(0, 2, 5),
            "stale epoch kept out"
        );
        assert_eq!(
            merged.partitions[&1],
            partition(1, 1, 3),
            "newer epoch taken"
        );
    }

    #[test]
    fn an_equal_or_unknown_epoch_and_a_recreated_topic_take_the_response() {
        let cached = topic(1, &[(0, 2, 5)]);
        let mut same = topic(1, &[(0, 2, 5)]);
        same.partitions.get_mut(&0).expect("p0").isr = vec![2, 3];
        assert_eq!(merge_topic(Some(&cached), same.clone()), same);
        let unknown = topic(1, &[(0, 3, -1)]);
        assert_eq!(merge_topic(Some(&cached), unknown.clone()), unknown);
        let recreated = topic(2, &[(0, 1, 0)]);
        assert_eq!(merge_topic(Some(&cached), recreated.clone()), recreated);
        let fresh = topic(1, &[(0, 1, 0)]);
        assert_eq!(merge_topic(None, fresh.clone()), fresh);
    }

    fn offline_cluster(addr: &str) -> Cluster {
        let mut config = ClientConfig::new(addr);
        config.reconnect_backoff = Duration::from_secs(60);
        config.reconnect_backoff_max = Duration::from_secs(60);
        let mut md = Metadata::default();
        let (host, port) = addr.rsplit_once(':').expect("host:port");
        md.brokers.insert(
            1,
            BrokerInfo {
                id: 1,
                host: host.into(),
                port: port.parse().expect("port"),
                rack: None,
            },
        );
        Cluster {
            config,
            metadata: Mutex::new(Arc::new(md)),
            connections: Mutex::new(HashMap::new()),
            backoff: StdMutex::new(HashMap::new()),
        }
    }

    #[tokio::test]
    async fn a_refused_address_is_left_alone_for_the_reconnect_backoff() {
        // A port nothing listens on: connecting is refused.
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").to_string()
        };
        let cluster = offline_cluster(&addr);
        let first = cluster.connection(1).await.expect_err("refused");
        assert!(first.is_retriable(), "{first}");
        assert!(
            !first.to_string().contains("reconnect.backoff.ms"),
            "{first}"
        );
        // Now something listens there, but the address is backing off: no
        // connection is attempted until the backoff ends.
        let _listener = std::net::TcpListener::bind(&addr).expect("rebind");
        let second = cluster.connection(1).await.expect_err("backing off");
        assert!(second.is_retriable(), "{second}");
        assert!(
            second.to_string().contains("reconnect.backoff.ms"),
            "{second}"
        );
        assert!(cluster.backing_off(&addr).is_some());
        // Requests for any broker skip it and fall back to the bootstrap
        // servers (the same address here: also backing off).
        let any = cluster.any_connection().await.expect_err("nothing to use");
        assert!(matches!(any, ClientError::NoBrokerAvailable(_)), "{any}");
    }

    #[test]
    fn the_reconnect_backoff_doubles_up_to_its_maximum() {
        let mut config = ClientConfig::new("127.0.0.1:1");
        config.reconnect_backoff = Duration::from_millis(100);
        config.reconnect_backoff_max = Duration::from_millis(350);
        let waits: Vec<u128> = (1..=4)
            .map(|n| reconnect_wait(&config, n).as_millis())
            .collect();
        assert_eq!(waits, vec![100, 200, 350, 350]);
        let cluster = offline_cluster("127.0.0.1:1");
        for n in 1..=3 {
            cluster.connection_failed("127.0.0.1:1");
            assert_eq!(cluster.backoff_lock()["127.0.0.1:1"].failures, n);
        }
    }
}
