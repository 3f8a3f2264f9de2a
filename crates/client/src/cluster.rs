//! Cluster view: bootstrap servers, a metadata cache (brokers, topics,
//! partitions and leaders), one connection per broker id, and retries with
//! backoff that refresh metadata when an error says it is stale
//! (`NOT_LEADER_OR_FOLLOWER`, `UNKNOWN_TOPIC_OR_PARTITION`, lost connections).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use proto_kafka::messages::metadata_request::MetadataRequestTopic;
use proto_kafka::messages::{ApiKey, MetadataRequest, MetadataResponse, TopicName};
use proto_kafka::protocol::{Request, StrBytes};
use tokio::sync::Mutex;

use crate::connection::{Connection, ConnectionConfig};
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
        let p = self.topics.get(topic)?.partitions.get(&partition)?;
        self.brokers.get(&p.leader)
    }
}

/// Shared cluster state: metadata cache and per-broker connections.
#[derive(Debug)]
pub struct Cluster {
    config: ClientConfig,
    metadata: Mutex<Metadata>,
    connections: Mutex<HashMap<i32, Arc<Mutex<Connection>>>>,
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
            metadata: Mutex::new(Metadata::default()),
            connections: Mutex::new(HashMap::new()),
        });
        cluster.refresh(None).await?;
        Ok(cluster)
    }

    /// The configuration in use.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// A copy of the cached metadata.
    pub async fn metadata(&self) -> Metadata {
        self.metadata.lock().await.clone()
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
        let mut cache = self.metadata.lock().await;
        cache.cluster_id.clone_from(&fresh.cluster_id);
        cache.controller_id = fresh.controller_id;
        cache.brokers.clone_from(&fresh.brokers);
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
    /// previous one broke).
    pub async fn connection(&self, id: i32) -> Result<Arc<Mutex<Connection>>> {
        {
            let conns = self.connections.lock().await;
            if let Some(c) = conns.get(&id) {
                if !c.lock().await.is_broken() {
                    return Ok(c.clone());
                }
            }
        }
        let addr = {
            let md = self.metadata.lock().await;
            md.brokers
                .get(&id)
                .map(BrokerInfo::addr)
                .ok_or_else(|| ClientError::NoBrokerAvailable(format!("unknown broker id {id}")))?
        };
        let conn = Connection::connect(&addr, self.config.connection.clone()).await?;
        let conn = Arc::new(Mutex::new(conn));
        self.connections.lock().await.insert(id, conn.clone());
        Ok(conn)
    }

    /// A connection to any live broker: a known broker first, then the
    /// bootstrap servers.
    pub async fn any_connection(&self) -> Result<Arc<Mutex<Connection>>> {
        let ids: Vec<i32> = self.metadata.lock().await.brokers.keys().copied().collect();
        let mut last = None;
        for id in ids {
            match self.connection(id).await {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        for addr in &self.config.bootstrap_servers {
            match Connection::connect(addr, self.config.connection.clone()).await {
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
            let mut conns = self.connections.lock().await;
            let mut dead = Vec::new();
            for (id, c) in conns.iter() {
                if let Ok(c) = c.try_lock() {
                    if c.is_broken() {
                        dead.push(*id);
                    }
                }
            }
            for id in dead {
                conns.remove(&id);
            }
        }
        r
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
