//! The broker's shared state: configuration, the data folder's logs, the
//! metadata image, and topic creation and deletion (what CreateTopics,
//! DeleteTopics and auto topic creation share).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use proto_kafka::ResponseError;
use sluice_controller::records::RESOURCE_TOPIC;
use sluice_controller::{MetadataImage, MetadataRecord, MetadataStore, TopicImage};
use sluice_storage::{Log, LogConfig, LogManager, ManagerConfig, TopicPartition};
use uuid::Uuid;

use crate::config::{BrokerConfig, Listener};
use crate::error::{io, BrokerError, Result};

/// A Kafka error code with an optional message, as handlers return it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: ResponseError,
    pub message: Option<String>,
}

impl ApiError {
    pub fn new(code: ResponseError, message: impl Into<String>) -> Self {
        Self {
            code,
            message: Some(message.into()),
        }
    }

    pub fn code(code: ResponseError) -> Self {
        Self {
            code,
            message: None,
        }
    }
}

pub use crate::internal_topics::CONSUMER_OFFSETS_TOPIC;

/// A broker as Metadata and DescribeCluster describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterBroker {
    pub id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    /// Registered but fenced (listed only when asked for).
    pub fenced: bool,
}

/// The running broker (single node: also its own controller).
#[derive(Debug)]
pub struct Broker {
    pub(crate) config: BrokerConfig,
    /// The typed settings, parsed once from `config`.
    pub(crate) settings: crate::config::Settings,
    pub(crate) node_id: i32,
    pub(crate) cluster_id: String,
    pub(crate) advertised: Listener,
    pub(crate) logs: Arc<LogManager>,
    pub(crate) metadata: MetadataStore,
    pub(crate) defaults: LogConfig,
    /// The partitions this node leads (the partition layer).
    pub(crate) partitions: crate::partition::Partitions,
    /// Consumer group coordinators (one shard per `__consumer_offsets`
    /// partition).
    pub(crate) groups: crate::groups::Groups,
    /// Incremental fetch sessions (KIP-227).
    pub(crate) fetch_sessions: crate::fetch_session::FetchSessionCache,
    /// Producer ids for InitProducerId (blocks from the metadata log).
    pub(crate) producer_ids: crate::producer_ids::ProducerIds,
    /// Transaction coordinators (one shard per `__transaction_state`
    /// partition).
    pub(crate) txns: crate::txn_coordinator::TxnCoordinator,
    /// This process's broker registration is in the metadata log (with a
    /// quorum). Until then the replica fetchers wait: a restarted node's
    /// old registration must not let it back into an ISR that its new one
    /// may be fenced out of (Kafka starts its fetchers only after the
    /// broker registered).
    pub(crate) registered: std::sync::atomic::AtomicBool,
    /// The last metadata image the data folder has followed (logs created
    /// and deleted, leadership synced); `None` before the metadata
    /// follower starts (the image the start reconciled the folder with).
    /// The replica fetchers wake on it (and on the registration, which
    /// notifies it too), so a partition this node starts to follow joins
    /// the next fetch at once rather than after a poll interval or an idle
    /// fetch's `replica.fetch.wait.max.ms`.
    pub(crate) image_followed: tokio::sync::watch::Sender<Option<Arc<MetadataImage>>>,
    /// Replication throttles (leader and follower side).
    pub(crate) quotas: crate::replication::throttle::ReplicationQuotas,
}

impl Broker {
    /// Opens the data folder: identity, logs, metadata replay, then brings
    /// the logs in line with the metadata.
    pub fn open(config: BrokerConfig) -> Result<Arc<Self>> {
        config.validate()?;
        config.log_start_report();
        let unserved = config.unserved_listeners();
        if !unserved.is_empty() {
            tracing::warn!(listeners = ?unserved, "Sluice serves one broker listener; these are not served");
        }
        let log_dirs = config.log_dirs();
        let dir = config.metadata_log_dir();
        let mut formatted = log_dirs.clone();
        if !formatted.contains(&dir) {
            formatted.push(dir.clone());
        }
        let node_id = config.node_id();
        let cluster_id = format_dirs(&formatted, node_id, &config.quorum_voters()?)?;
        tracing::info!(log_dirs = ?log_dirs, metadata_log_dir = %dir.display(), %cluster_id, node_id, "data folders ready");
        let settings = crate::config::Settings::from_config(&config)?;
        let defaults = config.log_config()?;
        let mut mc = ManagerConfig::with_dirs(log_dirs);
        mc.default_config = defaults.clone();
        mc.recovery_threads = settings.num_recovery_threads_per_data_dir.max(1) as usize;
        mc.retention_check_interval_ms = settings.log_retention_check_interval_ms.max(1) as u64;
        mc.checkpoint_interval_ms = settings.log_flush_offset_checkpoint_interval_ms.max(1) as u64;
        mc.cleaner_enable = settings.log_cleaner_enable;
        mc.cleaner_backoff_ms = settings.log_cleaner_backoff_ms.max(1) as u64;
        mc.cleaner.dedupe_buffer_bytes =
            settings.log_cleaner_dedupe_buffer_size.max(1 << 20) as usize;
        mc.producer_state.producer_id_expiration_ms = i64::from(settings.producer_id_expiration_ms);
        mc.producer_id_expiration_check_interval_ms =
            settings.producer_id_expiration_check_interval_ms.max(1) as u64;
        let logs = LogManager::open(mc)?;
        tracing::info!(partitions = logs.logs().len(), "logs loaded");
        // The metadata log lives beside the partitions but outside the log
        // manager: no retention or cleaner ever sees it.
        let metadata = match config.quorum_config()? {
            None => MetadataStore::open(
                &dir,
                config.metadata_log_config()?,
                Arc::new(sluice_storage::SystemClock),
            )?,
            // A voter of the metadata quorum (design 018): the log is the
            // quorum's, its controller serves the CONTROLLER listener.
            Some((qc, l)) => {
                let handle = tokio::runtime::Handle::try_current().map_err(|_| {
                    BrokerError::Malformed(
                        "the metadata quorum needs the server's async runtime".into(),
                    )
                })?;
                let addr = format!("{}:{}", l.host, l.port);
                let listener = std::net::TcpListener::bind(&addr)
                    .map_err(|e| io(format!("controller listener {addr}"), e))?;
                tracing::info!(listener = %addr, node_id = qc.node_id, voters = ?qc.voters, "starting the metadata quorum");
                MetadataStore::open_quorum(
                    &dir,
                    qc,
                    listener,
                    handle,
                    Arc::new(sluice_storage::SystemClock),
                )?
            }
        };
        let advertised = config.advertised_listener()?;
        let fetch_sessions = crate::fetch_session::FetchSessionCache::from_settings(&settings);
        let groups = crate::groups::Groups::new(&settings, node_id);
        let txns = crate::txn_coordinator::TxnCoordinator::new(&settings);
        let quotas = crate::replication::throttle::ReplicationQuotas::new(
            config.int("replication.quota.window.num").max(1) as u64,
            config.int("replication.quota.window.size.seconds").max(1) as u64 * 1000,
        );
        let broker = Arc::new(Self {
            config,
            settings,
            node_id,
            cluster_id,
            advertised,
            logs,
            metadata,
            defaults,
            partitions: crate::partition::Partitions::default(),
            fetch_sessions,
            groups,
            producer_ids: Default::default(),
            txns,
            registered: std::sync::atomic::AtomicBool::new(false),
            image_followed: tokio::sync::watch::Sender::new(None),
            quotas,
        });
        broker.reconcile_logs()?;
        broker.sync_partitions();
        broker
            .groups
            .follow_leadership(&broker)
            .map_err(|e| BrokerError::Malformed(format!("loading consumer groups: {e:?}")))?;
        broker
            .txns
            .follow_leadership(&broker)
            .map_err(|e| BrokerError::Malformed(format!("loading transactions: {e:?}")))?;
        broker.logs.start_background();
        crate::metadata_follower::spawn(&broker);
        crate::metadata_follower::register(&broker);
        // Only now: a snapshot must not be taken before the folders were
        // reconciled with the removals the log tail records.
        broker.metadata.start_background();
        Ok(broker)
    }

    /// The topic's effective log config: broker defaults plus overrides.
    pub(crate) fn log_config(&self, t: &TopicImage) -> Result<LogConfig> {
        Ok(self
            .defaults
            .with_overrides(t.configs.iter().map(|(k, v)| (k.as_str(), v.as_str())))?)
    }

    pub(crate) fn image(&self) -> Arc<MetadataImage> {
        self.metadata.image()
    }

    /// Whether `id` is a broker of the cluster. The one place that says
    /// so: this node's `node.id`, and with the metadata quorum the brokers
    /// registered in the metadata.
    pub(crate) fn is_broker(&self, id: i32) -> bool {
        id == self.node_id || self.image().broker(id).is_some_and(|b| !b.fenced)
    }

    /// `broker.rack`, if set.
    pub(crate) fn rack(&self) -> Option<String> {
        Some(self.config.str("broker.rack")).filter(|r| !r.is_empty())
    }

    /// The brokers clients are told about (Metadata, DescribeCluster,
    /// FindCoordinator): on the single node without a quorum, this node;
    /// with the metadata quorum, every registered broker that is not
    /// fenced, this node included only once its own registration is in
    /// the image — Kafka's alive brokers, so a client that sees N brokers
    /// can create a topic with N replicas at any node. Each at its
    /// listener named like the one this node serves.
    pub(crate) fn cluster_brokers(&self) -> Vec<ClusterBroker> {
        self.registered_brokers(false)
    }

    /// Like [`cluster_brokers`](Self::cluster_brokers), with the fenced
    /// brokers too when `include_fenced` (DescribeCluster v2's
    /// `IncludeFencedBrokers`).
    pub(crate) fn registered_brokers(&self, include_fenced: bool) -> Vec<ClusterBroker> {
        let image = self.image();
        let mut out = Vec::new();
        let own = image.broker(self.node_id);
        if self.lists_itself(&image, include_fenced) {
            out.push(ClusterBroker {
                id: self.node_id,
                host: self.advertised.host.clone(),
                port: i32::from(self.advertised.port),
                rack: self.rack(),
                fenced: own.is_some_and(|b| b.fenced),
            });
        }
        for b in image.brokers() {
            if b.id == self.node_id || (b.fenced && !include_fenced) {
                continue;
            }
            let endpoint = b
                .endpoints
                .iter()
                .find(|e| e.name == self.advertised.name)
                .or_else(|| b.endpoints.first());
            if let Some(e) = endpoint {
                out.push(ClusterBroker {
                    id: b.id,
                    host: e.host.clone(),
                    port: i32::from(e.port),
                    rack: b.rack.clone(),
                    fenced: b.fenced,
                });
            }
        }
        out.sort_by_key(|b| b.id);
        out
    }

    /// Whether this node is among the brokers it lists: always without a
    /// quorum; with one, once its registration is in the image and (unless
    /// `include_fenced`) not fenced.
    fn lists_itself(&self, image: &MetadataImage, include_fenced: bool) -> bool {
        match image.broker(self.node_id) {
            None => self.metadata.quorum().is_none(),
            Some(b) => include_fenced || !b.fenced,
        }
    }

    /// The controller id clients are given: the metadata quorum's leader
    /// when it is a broker too (a combined node), else this node — a
    /// controller-only leader is not reachable by clients, and Kafka's
    /// KRaft brokers name a live broker then, which forwards — or -1
    /// (Kafka's no controller) while this node is not a listed broker.
    pub(crate) fn controller_id(&self) -> i32 {
        self.metadata
            .quorum()
            .and_then(|q| q.leader())
            .and_then(|l| i32::try_from(l).ok())
            .filter(|&l| l != self.node_id && self.is_broker(l))
            .or_else(|| {
                self.lists_itself(&self.image(), false)
                    .then_some(self.node_id)
            })
            .unwrap_or(-1)
    }

    /// Whether this node does the cluster-wide duties Kafka's active
    /// controller does from the broker side (the automatic preferred
    /// leader rebalance): the quorum leader when it is a broker (a
    /// combined node); when the leader is a controller-only node, the
    /// registered, unfenced broker with the lowest id (design 025).
    pub(crate) fn has_controller_duties(&self) -> bool {
        let Some(q) = self.metadata.quorum() else {
            return true;
        };
        let leader = q.leader().and_then(|l| i32::try_from(l).ok());
        match leader {
            None => false,
            Some(l) if self.is_broker(l) => l == self.node_id,
            Some(_) => {
                let lowest = self
                    .image()
                    .brokers()
                    .filter(|b| !b.fenced)
                    .map(|b| b.id)
                    .min();
                lowest == Some(self.node_id)
            }
        }
    }

    /// Whether `replica_id` may fetch `partition` as a follower: a broker
    /// of the cluster other than this node (a leader does not fetch from
    /// itself) and one of the partition's replicas (Kafka's
    /// `Partition.getReplica`, which holds the remote replicas only).
    pub(crate) fn is_follower(
        &self,
        partition: &sluice_controller::PartitionImage,
        replica_id: i32,
    ) -> bool {
        replica_id != self.node_id
            && self.is_broker(replica_id)
            && partition.replicas.contains(&replica_id)
    }

    /// A partition this node leads; never the metadata log, which is not
    /// a topic clients can name.
    pub(crate) fn partition(
        &self,
        topic: &str,
        partition: i32,
    ) -> Option<Arc<crate::partition::Partition>> {
        if crate::internal_topics::is_hidden(topic) {
            return None;
        }
        self.partitions.get(topic, partition)
    }

    /// The log of a partition this node leads.
    pub(crate) fn log(&self, topic: &str, partition: i32) -> Option<Arc<Log>> {
        self.partition(topic, partition)
            .map(|p| Arc::clone(p.log()))
    }

    /// `replica.lag.time.max.ms`.
    pub(crate) fn lag_time_max_ms(&self) -> u64 {
        self.settings.replica_lag_time_max_ms.max(0) as u64
    }

    /// Leads what the metadata image says this node leads; the group and
    /// transaction coordinators' background tasks are woken to follow
    /// (load the internal partitions now led, unload the others).
    pub(crate) fn sync_partitions(&self) {
        self.sync_partitions_with(false);
    }

    /// [`Broker::sync_partitions`] before the logs of new partitions are
    /// created (the metadata follower lets go of removed partitions first,
    /// then creates logs and syncs again): a led partition whose log does
    /// not exist yet is left for that second sync, not reported.
    pub(crate) fn sync_partitions_before_new_logs(&self) {
        self.sync_partitions_with(true);
    }

    fn sync_partitions_with(&self, logs_pending: bool) {
        let image = self.image();
        self.partitions.sync(
            &image,
            self.node_id,
            self.lag_time_max_ms(),
            logs_pending,
            |tp| self.logs.get(tp),
        );
        self.groups.leadership_moved();
        self.txns.leadership_moved();
    }

    /// The replication factor an internal topic is created with: the
    /// configured one (Kafka's default 3), at most the number of voters of
    /// the metadata quorum, so a single node (one voter) creates it with
    /// one replica. With more voters, creation waits (COORDINATOR_NOT_AVAILABLE)
    /// until that many brokers are registered, as Kafka's does.
    pub(crate) fn internal_topic_replication(&self, configured: i16) -> i16 {
        let voters = match self.metadata.quorum() {
            None => 1,
            // A broker-only node: Kafka's rule, the configured factor
            // (creation waits until that many brokers are registered).
            Some(q) if q.is_observer() => return configured.max(1),
            Some(q) => q.voter_ids().len().max(1),
        };
        configured
            .min(i16::try_from(voters).unwrap_or(i16::MAX))
            .max(1)
    }

    /// Validates and creates a topic for a client (CreateTopics, auto
    /// creation): internal topics are refused. `configs` are topic config
    /// overrides.
    pub(crate) fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &[(String, String)],
        validate_only: bool,
    ) -> std::result::Result<TopicImage, ApiError> {
        validate_topic_name(name)?;
        crate::internal_topics::check_client_may_create(name)?;
        self.create_topic_unchecked(name, partitions, replication_factor, configs, validate_only)
    }

    /// Creates a topic, internal ones included (the broker's own path).
    fn create_topic_unchecked(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &[(String, String)],
        validate_only: bool,
    ) -> std::result::Result<TopicImage, ApiError> {
        validate_topic_name(name)?;
        let partitions = if partitions == -1 {
            self.settings.num_partitions
        } else {
            partitions
        };
        if partitions < 1 {
            return Err(ApiError::new(
                ResponseError::InvalidPartitions,
                "Number of partitions must be larger than 0.",
            ));
        }
        let rf = if replication_factor == -1 {
            self.settings.default_replication_factor as i16
        } else {
            replication_factor
        };
        if rf < 1 {
            return Err(ApiError::new(
                ResponseError::InvalidReplicationFactor,
                "Replication factor must be larger than 0.",
            ));
        }
        let assignment = self.place_replicas(0, partitions, rf as usize)?;
        let log_config = self
            .defaults
            .with_overrides(configs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map_err(|e| ApiError::new(ResponseError::InvalidConfig, e.to_string()))?;
        let _guard = self.metadata.lock_for_change();
        if self.image().topic(name).is_some() {
            return Err(ApiError::new(
                ResponseError::TopicAlreadyExists,
                format!("Topic '{name}' already exists."),
            ));
        }
        let topic_id = Uuid::new_v4();
        let mut records = vec![MetadataRecord::Topic {
            name: name.to_string(),
            topic_id,
        }];
        records.extend(configs.iter().map(|(k, v)| MetadataRecord::Config {
            resource_type: RESOURCE_TOPIC,
            resource_name: name.to_string(),
            name: k.clone(),
            value: Some(v.clone()),
        }));
        // This node holds logs only for the partitions it is a replica of.
        let here: Vec<i32> = (0..)
            .zip(&assignment)
            .filter(|(_, r)| r.contains(&self.node_id))
            .map(|(p, _)| p)
            .collect();
        records.extend(
            assignment
                .into_iter()
                .zip(0..)
                .map(|(replicas, p)| Self::partition_record(topic_id, p, replicas)),
        );
        if validate_only {
            let mut img = MetadataImage::default();
            records.iter().for_each(|r| img.apply(r));
            return img
                .topic(name)
                .cloned()
                .ok_or_else(|| ApiError::code(ResponseError::UnknownServerError));
        }
        let image = self.metadata.append(&records).map_err(metadata_error)?;
        for p in here {
            let tp = TopicPartition::new(name, p);
            self.create_partition_log(&tp, topic_id, log_config.clone())
                .map_err(internal)?;
        }
        self.sync_partitions();
        tracing::info!(topic = name, partitions, "created topic");
        image
            .topic(name)
            .cloned()
            .ok_or_else(|| ApiError::code(ResponseError::UnknownServerError))
    }

    /// The topic, created with the defaults when it does not exist and
    /// `auto.create.topics.enable` (and the client) allow it. Internal
    /// topics are never auto-created: the broker creates them when a
    /// coordinator needs them.
    pub(crate) fn topic_or_auto_create(
        &self,
        name: &str,
        client_allows: bool,
    ) -> std::result::Result<TopicImage, ApiError> {
        if let Some(t) = self.image().topic(name) {
            return Ok(t.clone());
        }
        if !(client_allows && self.settings.auto_create_topics_enable)
            || crate::internal_topics::check_client_may_create(name).is_err()
        {
            return Err(ApiError::code(ResponseError::UnknownTopicOrPartition));
        }
        match self.create_topic(name, -1, -1, &[], false) {
            Ok(t) => Ok(t),
            // Created concurrently by another request: fine.
            Err(e) if e.code == ResponseError::TopicAlreadyExists => self
                .image()
                .topic(name)
                .cloned()
                .ok_or_else(|| ApiError::code(ResponseError::UnknownTopicOrPartition)),
            Err(e) => Err(e),
        }
    }

    /// A new partition: every replica in sync, the first one leads.
    fn partition_record(topic_id: Uuid, partition_id: i32, replicas: Vec<i32>) -> MetadataRecord {
        MetadataRecord::Partition {
            partition_id,
            topic_id,
            isr: replicas.clone(),
            leader: replicas[0],
            replicas,
            leader_epoch: 0,
            partition_epoch: 0,
            removing_replicas: vec![],
            adding_replicas: vec![],
        }
    }

    /// The brokers new replicas may go to: this node and every registered
    /// broker that is not fenced, by id.
    fn placeable_brokers(&self) -> Vec<(i32, Option<String>)> {
        let image = self.image();
        let mut brokers: Vec<(i32, Option<String>)> = image
            .brokers()
            .filter(|b| !b.fenced && !b.in_controlled_shutdown)
            .map(|b| (b.id, b.rack.clone()))
            .collect();
        if image.broker(self.node_id).is_none() {
            brokers.push((self.node_id, self.rack()));
        }
        brokers.sort_unstable();
        brokers.dedup_by_key(|b| b.0);
        brokers
    }

    /// Replicas for partitions `first..first + count`, `rf` each, striped
    /// over the placeable brokers (registered, not fenced, not in
    /// controlled shutdown) from a random start, over as many racks as
    /// possible when brokers have `broker.rack` (Kafka's placers);
    /// INVALID_REPLICATION_FACTOR when there are fewer brokers than `rf`.
    fn place_replicas(
        &self,
        first: i32,
        count: i32,
        rf: usize,
    ) -> std::result::Result<Vec<Vec<i32>>, ApiError> {
        let brokers = self.placeable_brokers();
        // One broker: every replica here, as before the cluster existed.
        let random = Uuid::new_v4().as_u128();
        let (start, shift) = if brokers.len() <= 1 {
            (0, 0)
        } else {
            (
                (random % brokers.len() as u128) as usize,
                ((random >> 64) % (brokers.len() as u128 - 1)) as usize,
            )
        };
        crate::replication::placement::place_with_racks(&brokers, first, count, rf, start, shift).ok_or_else(
            || {
                ApiError::new(
                    ResponseError::InvalidReplicationFactor,
                    format!(
                        "Unable to replicate the partition {rf} time(s): The target replication factor of {rf} cannot be reached because only {} broker(s) are registered.",
                        brokers.len()
                    ),
                )
            },
        )
    }

    /// Adds partitions to a topic (CreatePartitions).
    pub(crate) fn add_partitions(
        &self,
        name: &str,
        count: i32,
        validate_only: bool,
    ) -> std::result::Result<(), ApiError> {
        crate::internal_topics::check_client_may_alter(name)?;
        let _guard = self.metadata.lock_for_change();
        let image = self.image();
        let Some(t) = image.topic(name) else {
            return Err(ApiError::code(ResponseError::UnknownTopicOrPartition));
        };
        let current = t.partitions.len() as i32;
        if count <= current {
            return Err(ApiError::new(
                ResponseError::InvalidPartitions,
                format!("Topic currently has {current} partitions, which is higher than the requested {count}."),
            ));
        }
        let rf = t.partitions.values().next().map_or(1, |p| p.replicas.len());
        let assignment = self.place_replicas(current, count - current, rf)?;
        if validate_only {
            return Ok(());
        }
        let here: Vec<i32> = (current..)
            .zip(&assignment)
            .filter(|(_, r)| r.contains(&self.node_id))
            .map(|(p, _)| p)
            .collect();
        let records: Vec<_> = assignment
            .into_iter()
            .zip(current..)
            .map(|(replicas, p)| Self::partition_record(t.id, p, replicas))
            .collect();
        let config = self.log_config(t).map_err(internal)?;
        self.metadata.append(&records).map_err(metadata_error)?;
        for p in here {
            self.create_partition_log(&TopicPartition::new(name, p), t.id, config.clone())
                .map_err(internal)?;
        }
        self.sync_partitions();
        Ok(())
    }

    /// Deletes a topic: metadata first, then its logs.
    pub(crate) fn delete_topic(&self, name: &str) -> std::result::Result<Uuid, ApiError> {
        if !self.settings.delete_topic_enable {
            return Err(ApiError::new(
                ResponseError::TopicDeletionDisabled,
                "Topic deletion is disabled.",
            ));
        }
        let _guard = self.metadata.lock_for_change();
        let image = self.image();
        let Some(t) = image.topic(name) else {
            return Err(ApiError::code(ResponseError::UnknownTopicOrPartition));
        };
        self.metadata
            .append(&[MetadataRecord::RemoveTopic { topic_id: t.id }])
            .map_err(metadata_error)?;
        self.sync_partitions();
        for &p in t.partitions.keys() {
            self.logs
                .delete(&TopicPartition::new(name, p))
                .map_err(internal)?;
        }
        tracing::info!(topic = name, "deleted topic");
        Ok(t.id)
    }

    /// Sets (`Some`) or removes (`None`) topic config overrides, validated
    /// together, and applies them to the topic's logs at once. With
    /// `replace_all`, overrides not named are removed (AlterConfigs).
    pub(crate) fn alter_topic_configs(
        &self,
        name: &str,
        changes: &[(String, Option<String>)],
        replace_all: bool,
        validate_only: bool,
    ) -> std::result::Result<(), ApiError> {
        self.edit_topic_configs(name, validate_only, |current, _| {
            let mut next = if replace_all {
                Default::default()
            } else {
                current.clone()
            };
            for (k, v) in changes {
                match v {
                    Some(v) => next.insert(k.clone(), v.clone()),
                    None => next.remove(k),
                };
            }
            Ok(next)
        })
    }

    /// Creates `__consumer_offsets` (compacted, `partitions` partitions)
    /// when it does not exist yet, as Kafka does on first use.
    pub(crate) fn ensure_offsets_topic(
        &self,
        partitions: i32,
    ) -> std::result::Result<(), ApiError> {
        if self.image().topic(CONSUMER_OFFSETS_TOPIC).is_some() {
            return Ok(());
        }
        let configs = vec![
            ("cleanup.policy".to_string(), "compact".to_string()),
            ("compression.type".to_string(), "producer".to_string()),
            (
                "segment.bytes".to_string(),
                self.settings.offsets_topic_segment_bytes.to_string(),
            ),
        ];
        let rf = self.internal_topic_replication(self.settings.offsets_topic_replication_factor);
        match self.create_topic_unchecked(CONSUMER_OFFSETS_TOPIC, partitions, rf, &configs, false) {
            Ok(_) => Ok(()),
            Err(e) if e.code == ResponseError::TopicAlreadyExists => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Creates `__transaction_state` when it does not exist yet, as Kafka's
    /// `AutoTopicCreationManager` does on first need, with
    /// `TransactionStateManager.transactionTopicConfigs`: compacted,
    /// uncompressed, no unclean leader election, `min.insync.replicas` from
    /// `transaction.state.log.min.isr`, `segment.bytes` from
    /// `transaction.state.log.segment.bytes`, replication
    /// `transaction.state.log.replication.factor`.
    pub(crate) fn ensure_transaction_state_topic(&self) -> std::result::Result<(), ApiError> {
        let name = crate::internal_topics::TRANSACTION_STATE_TOPIC;
        if self.image().topic(name).is_some() {
            return Ok(());
        }
        let s = &self.settings;
        let rf = self.internal_topic_replication(s.transaction_state_log_replication_factor);
        let min_isr = s.transaction_state_log_min_isr.min(i32::from(rf));
        let configs = vec![
            (
                "unclean.leader.election.enable".to_string(),
                "false".to_string(),
            ),
            ("compression.type".to_string(), "uncompressed".to_string()),
            ("cleanup.policy".to_string(), "compact".to_string()),
            ("min.insync.replicas".to_string(), min_isr.to_string()),
            (
                "segment.bytes".to_string(),
                s.transaction_state_log_segment_bytes.to_string(),
            ),
        ];
        let partitions = s.transaction_state_log_num_partitions;
        match self.create_topic_unchecked(name, partitions, rf, &configs, false) {
            Ok(_) => Ok(()),
            Err(e) if e.code == ResponseError::TopicAlreadyExists => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Stops background work and closes the data folder cleanly.
    pub fn shutdown(&self) -> Result<()> {
        let metadata = self.metadata.shutdown();
        self.logs.shutdown()?;
        metadata?;
        Ok(())
    }

    /// Replaces a topic's config overrides with what `edit` makes of the
    /// current ones (given with the broker defaults). `edit` runs under the
    /// metadata change lock, so read-modify-write changes
    /// (IncrementalAlterConfigs' APPEND and SUBTRACT) never lose a
    /// concurrent change. The result is validated as a whole, recorded in
    /// the metadata log and applied to the topic's logs at once.
    pub(crate) fn edit_topic_configs(
        &self,
        name: &str,
        validate_only: bool,
        edit: impl FnOnce(
            &std::collections::BTreeMap<String, String>,
            &LogConfig,
        )
            -> std::result::Result<std::collections::BTreeMap<String, String>, ApiError>,
    ) -> std::result::Result<(), ApiError> {
        let _guard = self.metadata.lock_for_change();
        let image = self.image();
        let Some(t) = image.topic(name) else {
            return Err(ApiError::new(
                ResponseError::UnknownTopicOrPartition,
                format!("The topic '{name}' does not exist."),
            ));
        };
        let next = edit(&t.configs, &self.defaults)?;
        let config = self
            .defaults
            .with_overrides(next.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map_err(|e| crate::handlers::errors::storage_error(&e))?;
        if validate_only {
            return Ok(());
        }
        let keys: std::collections::BTreeSet<&String> =
            t.configs.keys().chain(next.keys()).collect();
        let records: Vec<MetadataRecord> = keys
            .into_iter()
            .filter(|k| t.configs.get(*k) != next.get(*k))
            .map(|k| MetadataRecord::Config {
                resource_type: RESOURCE_TOPIC,
                resource_name: name.to_string(),
                name: k.clone(),
                value: next.get(k).cloned(),
            })
            .collect();
        self.metadata.append(&records).map_err(metadata_error)?;
        for &p in t.partitions.keys() {
            if let Some(log) = self.log(name, p) {
                log.set_config(config.clone());
            }
        }
        if !records.is_empty() {
            tracing::info!(
                topic = name,
                changed = records.len(),
                "altered topic configs"
            );
        }
        Ok(())
    }
}

/// A failed metadata change as Kafka answers it: with the quorum, the
/// leader's checks (a name taken, a topic gone meanwhile) and the absence
/// of a leader (NOT_CONTROLLER) have codes of their own.
fn metadata_error(e: sluice_controller::ControllerError) -> ApiError {
    use sluice_controller::ControllerError as E;
    match e {
        E::TopicExists(m) => ApiError::new(ResponseError::TopicAlreadyExists, m),
        E::Conflict(m) => ApiError::new(ResponseError::UnknownTopicOrPartition, m),
        E::NotController(m) => ApiError::new(ResponseError::NotController, m),
        e => internal(e),
    }
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "internal error");
    ApiError::new(ResponseError::UnknownServerError, e.to_string())
}

/// Kafka's topic name rules (`Topic.validate`).
pub(crate) fn validate_topic_name(name: &str) -> std::result::Result<(), ApiError> {
    let bad = |why: String| Err(ApiError::new(ResponseError::InvalidTopicException, why));
    if name.is_empty() {
        return bad("Topic name is illegal, it can't be empty".into());
    }
    if name == "." || name == ".." {
        return bad("Topic name cannot be \".\" or \"..\"".into());
    }
    if name.len() > 249 {
        return bad(format!(
            "Topic name is illegal, it can't be longer than 249 characters, topic name: {name}"
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return bad(format!("Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"));
    }
    Ok(())
}

/// Formats the data folders and the metadata log folder (Kafka's
/// `meta.properties`, KIP-858): every folder carries the same `cluster.id`
/// and `node.id` and its own `directory.id`. Folders formatted before keep
/// theirs; a new folder joins with the cluster id of the others. When no
/// folder has one, the node is new: a node of a metadata quorum takes the
/// id of its `controller.quorum.voters` ([`cluster_id_of_voters`]), which
/// every node of the cluster computes alike, so all format with one id
/// without a separate format step; a node without voters (single node)
/// takes a random one. Folders of different clusters or nodes, or two
/// folders with one `directory.id`, stop the start. Returns the cluster id.
pub(crate) fn format_dirs(
    dirs: &[PathBuf],
    node_id: i32,
    voters: &BTreeMap<u64, String>,
) -> Result<String> {
    let invalid = |path: &Path, reason: String| BrokerError::InvalidConfig {
        key: "log.dirs".into(),
        value: path.display().to_string(),
        reason,
    };
    let mut found: Vec<(PathBuf, Vec<(String, String)>)> = Vec::new();
    for dir in dirs {
        std::fs::create_dir_all(dir).map_err(|e| io(dir.display().to_string(), e))?;
        let path = dir.join("meta.properties");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(io(path.display().to_string(), e)),
        };
        let props: Vec<(String, String)> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        found.push((dir.clone(), props));
    }
    let get = |props: &[(String, String)], k: &str| {
        props
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    let mut cluster: Option<(String, PathBuf)> = None;
    for (dir, props) in &found {
        let path = dir.join("meta.properties");
        if let Some(id) = get(props, "node.id") {
            if id != node_id.to_string() {
                return Err(BrokerError::InvalidConfig {
                    key: "node.id".into(),
                    value: node_id.to_string(),
                    reason: format!("{} belongs to node.id {id}", path.display()),
                });
            }
        }
        if let Some(c) = get(props, "cluster.id") {
            match &cluster {
                Some((first, at)) if *first != c => {
                    return Err(invalid(
                        dir,
                        format!(
                            "{} has cluster.id {c} but {} has {first}: the folders belong to different clusters",
                            path.display(),
                            at.join("meta.properties").display()
                        ),
                    ))
                }
                Some(_) => {}
                None => cluster = Some((c, dir.clone())),
            }
        }
    }
    let cluster = cluster.map_or_else(
        || {
            if voters.is_empty() {
                random_id()
            } else {
                cluster_id_of_voters(voters)
            }
        },
        |(c, _)| c,
    );
    let mut seen: Vec<(String, PathBuf)> = Vec::new();
    for (dir, props) in &found {
        let directory = match get(props, "directory.id") {
            Some(d) => d,
            None => {
                // New folder, or one formatted before directory ids.
                let d = random_id();
                let mut body = String::from("#\n#Written by sluice\n");
                let mut keys = vec![
                    ("cluster.id".to_string(), cluster.clone()),
                    ("directory.id".to_string(), d.clone()),
                    ("node.id".to_string(), node_id.to_string()),
                    ("version".to_string(), "1".to_string()),
                ];
                for (k, v) in props {
                    if !keys.iter().any(|(key, _)| key == k) {
                        keys.push((k.clone(), v.clone()));
                    }
                }
                keys.sort();
                for (k, v) in keys {
                    body.push_str(&format!("{k}={v}\n"));
                }
                let tmp = dir.join("meta.properties.tmp");
                let path = dir.join("meta.properties");
                std::fs::write(&tmp, body).map_err(|e| io(tmp.display().to_string(), e))?;
                std::fs::File::open(&tmp)
                    .and_then(|f| f.sync_all())
                    .map_err(|e| io(tmp.display().to_string(), e))?;
                std::fs::rename(&tmp, &path).map_err(|e| io(path.display().to_string(), e))?;
                std::fs::File::open(dir)
                    .and_then(|f| f.sync_all())
                    .map_err(|e| io(dir.display().to_string(), e))?;
                d
            }
        };
        if let Some((_, other)) = seen.iter().find(|(id, _)| *id == directory) {
            return Err(invalid(
                dir,
                format!(
                    "duplicate directory.id {directory} in {} and {}",
                    other.display(),
                    dir.display()
                ),
            ));
        }
        seen.push((directory, dir.clone()));
    }
    Ok(cluster)
}

/// A random id as Kafka makes them (`Uuid.randomUuid`): URL-safe base64
/// of a v4 UUID, never starting with `-` (it would read as a command-line
/// flag).
fn random_id() -> String {
    loop {
        let id = base64url(Uuid::new_v4().as_bytes());
        if !id.starts_with('-') {
            return id;
        }
    }
}

/// The cluster id the nodes of one metadata quorum format with: a 128-bit
/// XXH3 hash of the voter set written as `id@host:port` items in id order
/// (hosts lower-cased), in Kafka's format (URL-safe base64, never starting
/// with `-`). Kafka has the operator pass one id to every node's
/// `kafka-storage format`; Sluice formats on first start, so the id comes
/// from what every node's configuration shares.
pub(crate) fn cluster_id_of_voters(voters: &BTreeMap<u64, String>) -> String {
    let mut text = voters
        .iter()
        .map(|(id, addr)| format!("{id}@{}", addr.to_ascii_lowercase()))
        .collect::<Vec<_>>()
        .join(",");
    loop {
        let hash = xxhash_rust::xxh3::xxh3_128(text.as_bytes());
        let id = base64url(&hash.to_be_bytes());
        if !id.starts_with('-') {
            return id;
        }
        text.push('+');
    }
}

/// URL-safe base64 without padding (Kafka's cluster id format).
fn base64url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &b)| acc | (u32::from(b) << (16 - 8 * i)));
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafka() {
        for ok in ["a", "orders.v1", "my_topic-2", &"x".repeat(249)] {
            assert!(validate_topic_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", "a b", "ä", "a/b", &"x".repeat(250)] {
            assert!(validate_topic_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cluster_ids_look_like_kafkas() {
        assert_eq!(base64url(&[0; 16]).len(), 22);
        assert_eq!(base64url(b"\xfb\xff"), "-_8");
    }

    #[test]
    fn the_nodes_of_one_quorum_format_with_one_cluster_id() {
        let voters = |items: &[(u64, &str)]| -> BTreeMap<u64, String> {
            items.iter().map(|(i, a)| (*i, (*a).to_string())).collect()
        };
        let a = voters(&[
            (1, "127.0.0.1:9093"),
            (2, "127.0.0.1:9094"),
            (3, "Host3:9095"),
        ]);
        let b = voters(&[
            (3, "host3:9095"),
            (2, "127.0.0.1:9094"),
            (1, "127.0.0.1:9093"),
        ]);
        let id = cluster_id_of_voters(&a);
        assert_eq!(
            id,
            cluster_id_of_voters(&b),
            "order and host case do not matter"
        );
        assert_eq!(id.len(), 22);
        assert!(!id.starts_with('-'));
        let other = voters(&[
            (1, "127.0.0.1:9093"),
            (2, "127.0.0.1:9094"),
            (3, "host3:9096"),
        ]);
        assert_ne!(id, cluster_id_of_voters(&other));

        // Three nodes' folders, formatted apart, share it; a folder
        // formatted before keeps its own id.
        let tmp = tempfile::tempdir().expect("tempdir");
        let ids: Vec<String> = (1..=3)
            .map(|n| format_dirs(&[tmp.path().join(format!("n{n}"))], n, &a).expect("format"))
            .collect();
        assert!(ids.iter().all(|i| *i == id), "{ids:?}");
        let single = tmp.path().join("single");
        let random =
            format_dirs(std::slice::from_ref(&single), 1, &BTreeMap::new()).expect("format");
        assert_ne!(random, id);
        assert_eq!(
            format_dirs(&[single], 1, &a).expect("format"),
            random,
            "an existing id stays"
        );
    }
}
