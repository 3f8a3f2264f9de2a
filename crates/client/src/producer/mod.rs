//! The async producer: partitions records, buffers them in a
//! [`RecordAccumulator`] and sends them from a background sender task.
//!
//! [`Producer::send`] waits for buffer space (`buffer.memory` back-pressure,
//! bounded by `max.block.ms`) and returns a [`DeliveryFuture`] that resolves
//! when the broker acknowledged the record's batch (or the batch failed for
//! good).
//!
//! The sender task wakes when a batch is ready (`linger.ms`, a full batch, a
//! flush), groups ready partitions by leader and builds `Produce` requests
//! with one batch per partition. Each broker has a writer task that writes
//! its requests in order on the broker's pipelined
//! [`Connection`] and does not wait for a
//! response before writing the next request: up to
//! `max.in.flight.requests.per.connection` ([`ProducerConfig::max_in_flight`],
//! default 5) Produce requests may be outstanding per broker. Retriable
//! partition errors re-enqueue the batch first in its partition's line,
//! after a backoff (within `delivery.timeout.ms` and `retries`); errors that
//! mean stale metadata (`NOT_LEADER_OR_FOLLOWER`,
//! `UNKNOWN_TOPIC_OR_PARTITION`, lost connections) also trigger a background
//! metadata refresh. Partitions without a known leader keep their batches in
//! the accumulator while the metadata is refreshed. The producer's metadata
//! requests ask the broker to create a missing topic
//! (`allow_auto_topic_creation`, as the Java producer's do): where the
//! broker allows auto-creation, producing to a new topic creates it.
//!
//! # Idempotence and ordering
//!
//! `enable.idempotence` defaults to on, as in Kafka 3.0 and later
//! ([`ProducerConfig::enable_idempotence`], [`ProducerConfig::idempotence`]
//! for the rules: it needs `acks` all). An idempotent producer asks a
//! broker for a producer id (InitProducerId) before it sends anything,
//! gives every batch a sequence number per partition when the batch is
//! first drained, and keeps up to `max_in_flight` (at most 5) batches of a
//! partition in flight. The broker refuses a batch whose sequence does not
//! follow the last one it wrote (`OUT_OF_ORDER_SEQUENCE_NUMBER`) and
//! recognizes a re-sent one, so retries neither duplicate nor reorder
//! records. Retried batches go out again in sequence order, one at a time;
//! when the broker shows a real gap or has lost the producer
//! (`UNKNOWN_PRODUCER_ID`), the producer bumps its epoch and restarts the
//! partition's sequences at 0, as the Java client does; fatal errors
//! (authorization, unsupported version, a fenced producer) fail every
//! pending record and every later send ([`Producer::fatal_error`]). The
//! rules live in `idempotence.rs` (Kafka's `TransactionManager`).
//!
//! Without idempotence a partition may have up to `max_in_flight` batches
//! in flight, as in Kafka: a failed batch goes back first in its
//! partition's line (retries in append order), but a later batch may
//! already have been written, so a retry can reorder (or duplicate) records,
//! as Kafka warns for `enable.idempotence=false` with
//! `max.in.flight.requests.per.connection > 1`. With `max_in_flight = 1`
//! only one Produce request is outstanding per broker, so retries never
//! reorder a partition's records.
//!
//! # Transactions
//!
//! With `transactional.id` ([`ProducerConfig::transactional_id`]) the
//! producer is transactional, as Kafka's: [`Producer::init_transactions`]
//! once (it fences older producers with the same id), then
//! [`Producer::begin_transaction`], sends,
//! [`Producer::send_offsets_to_transaction`] for consume-transform-produce,
//! and [`Producer::commit_transaction`] or
//! [`Producer::abort_transaction`]. A partition's batches are sent only
//! once AddPartitionsToTxn added it to the transaction. Errors are fatal
//! (fenced, unauthorized: only closing is left) or abortable (a failed
//! batch: only the abort is allowed, and it bumps the epoch), as Kafka's
//! `TransactionManager` classifies them ([`TransactionState`]; design 015).
//!
//! ```no_run
//! # async fn demo() -> sluice_client::Result<()> {
//! use sluice_client::{ClientConfig, Producer, ProducerConfig, ProducerRecord};
//!
//! let config = ProducerConfig::new(ClientConfig::new("127.0.0.1:9092")).transactional("payments-1");
//! let producer = Producer::new(config).await?;
//! producer.init_transactions().await?;
//! producer.begin_transaction()?;
//! producer.send(ProducerRecord::new("debits", b"100".to_vec())).await?;
//! producer.send(ProducerRecord::new("credits", b"100".to_vec())).await?;
//! match producer.commit_transaction().await {
//!     Ok(()) => {}
//!     Err(e) if e.is_fatal_transaction_error() => return Err(e),
//!     Err(_) => producer.abort_transaction().await?,
//! }
//! producer.close().await?;
//! # Ok(()) }
//! ```
//!
//! # Delivery timeout
//!
//! `delivery.timeout.ms` bounds the time from a batch's creation to its
//! outcome. Batches still in the accumulator (never sent, e.g. no leader or
//! an unreachable broker, or waiting for a retry) are expired by the sender
//! once it has passed; batches in flight are failed when their request
//! outlives it (their in-flight slot, and for an idempotent producer their
//! sequence numbers, stay taken until that request completes, so ordering
//! is kept; an idempotent producer then waits for every batch of the
//! partition to settle before it sends new ones, and bumps its epoch if the
//! expired batch turns out not to have been written). Their records fail with [`ClientError::Timeout`]
//! naming the topic-partition, like Kafka's `Expiring N record(s) for T-P: X
//! ms has passed since batch creation`. As Kafka does, [`Producer::new`]
//! rejects `delivery.timeout.ms < linger.ms + request.timeout.ms`.
//!
//! ```no_run
//! # async fn demo() -> sluice_client::Result<()> {
//! use sluice_client::producer::{Producer, ProducerConfig, ProducerRecord};
//! use sluice_client::ClientConfig;
//!
//! let producer = Producer::new(ProducerConfig::new(ClientConfig::new("127.0.0.1:9092"))).await?;
//! let delivery = producer
//!     .send(ProducerRecord::new("orders", b"hello".to_vec()).key(b"k1".to_vec()))
//!     .await?;
//! let meta = delivery.await?;
//! println!("{}-{}@{}", meta.topic, meta.partition, meta.offset);
//! producer.close().await?;
//! # Ok(()) }
//! ```

mod delivery;
mod idempotence;
mod sender;
mod transaction;
mod transactional;
mod txn_offsets;

use delivery::{Completion, Pending};
pub use delivery::{DeliveryFuture, RecordMetadata};
pub use transaction::TransactionState;

use std::collections::{BTreeSet, HashMap, VecDeque};

use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use sluice_protocol::record::{Compression, Header, RecordRef};
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;

use crate::accumulator::{
    AccumulatorConfig, AppendOutcome, BatchId, RecordAccumulator, TopicPartition,
};
use crate::cluster::{ClientConfig, Cluster, TopicInfo};
use crate::connection::Connection;
use crate::error::{ClientError, Result};
use crate::partitioner::Partitioner;

/// Producer settings (Kafka 4 defaults).
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// Cluster connection settings.
    pub client: ClientConfig,
    /// `acks`: -1 (all in-sync replicas), 0 (no response) or 1 (leader).
    pub acks: i16,
    /// `batch.size` in bytes.
    pub batch_size: usize,
    /// `linger.ms`.
    pub linger_ms: u64,
    /// `buffer.memory` in bytes.
    pub buffer_memory: usize,
    /// `compression.type`.
    pub compression: Compression,
    /// `request.timeout.ms`: the broker-side `timeout_ms` of Produce
    /// requests and how long the producer waits for a Produce response
    /// (a timeout breaks the connection, failing its other outstanding
    /// requests, which are retried). Connecting and metadata requests use
    /// the connection's own timeouts in [`ClientConfig::connection`].
    pub request_timeout: Duration,
    /// `delivery.timeout.ms`: upper bound on the time between a batch's
    /// creation and its delivery outcome, retries included; must be at
    /// least `linger.ms + request.timeout.ms`.
    pub delivery_timeout_ms: u64,
    /// `retries`: how often a batch is retried after a retriable error.
    pub retries: u32,
    /// `max.block.ms`: how long `send` waits for buffer memory.
    pub max_block_ms: u64,
    /// `max.in.flight.requests.per.connection`: Produce requests that may
    /// be outstanding per broker connection (at least 1; at most 5 with
    /// idempotence); a partition may have that many batches in flight (see
    /// the module docs on ordering).
    pub max_in_flight: usize,
    /// `enable.idempotence`. `None` is Kafka's default: on, unless `acks`
    /// is not all or `retries` is 0, which turn it off. `Some(true)` with
    /// either of those is a configuration error, as is idempotence (set or
    /// default) with `max_in_flight` above 5.
    pub enable_idempotence: Option<bool>,
    /// `transactional.id`: makes the producer transactional (see
    /// [`Producer::init_transactions`]). Implies idempotence, so it needs
    /// `acks` all, `retries` above 0, at most 5 in flight and
    /// `enable.idempotence` not false.
    pub transactional_id: Option<String>,
    /// `transaction.timeout.ms`: how long the coordinator lets a
    /// transaction stay open before aborting it (default 60000; the
    /// broker refuses more than its `transaction.max.timeout.ms`).
    pub transaction_timeout_ms: u64,
}

impl ProducerConfig {
    /// Defaults for the given client configuration.
    pub fn new(client: ClientConfig) -> Self {
        Self {
            client,
            acks: -1,
            batch_size: 16_384,
            linger_ms: 5,
            buffer_memory: 33_554_432,
            compression: Compression::None,
            request_timeout: Duration::from_secs(30),
            delivery_timeout_ms: 120_000,
            retries: i32::MAX as u32,
            max_block_ms: 60_000,
            max_in_flight: 5,
            enable_idempotence: None,
            transactional_id: None,
            transaction_timeout_ms: 60_000,
        }
    }

    /// Sets `transactional.id`.
    #[must_use]
    pub fn transactional(mut self, transactional_id: &str) -> Self {
        self.transactional_id = Some(transactional_id.to_string());
        self
    }

    /// Whether the producer is idempotent, by Kafka's rules
    /// (`ProducerConfig.postProcessAndValidateIdempotenceConfigs`, Kafka 4):
    /// explicitly enabled, it requires `acks` all (-1), `retries` above 0
    /// and `max_in_flight` at most 5; by default it is on unless `acks` or
    /// `retries` say otherwise, and then too `max_in_flight` must be at
    /// most 5.
    /// A `transactional.id` counts as explicitly enabling idempotence.
    pub fn idempotence(&self) -> Result<bool> {
        let explicit = match self.enable_idempotence {
            Some(false) => return Ok(false),
            Some(true) => true,
            None => self.transactional_id.is_some(),
        };
        let why = match &self.transactional_id {
            Some(id) => format!("transactional.id={id}"),
            None => "enable.idempotence=true".to_string(),
        };
        if self.acks != -1 {
            if explicit {
                return Err(ClientError::InvalidArgument(format!(
                    "acks must be all (-1) to use the idempotent producer, not {} ({why})",
                    self.acks
                )));
            }
            return Ok(false);
        }
        if self.retries == 0 {
            if explicit {
                return Err(ClientError::InvalidArgument(format!(
                    "retries must be above 0 to use the idempotent producer ({why})"
                )));
            }
            return Ok(false);
        }
        if self.max_in_flight > MAX_IN_FLIGHT_IDEMPOTENT {
            return Err(ClientError::InvalidArgument(format!(
                "max.in.flight.requests.per.connection must be at most \
                 {MAX_IN_FLIGHT_IDEMPOTENT} to use the idempotent producer, not {} \
                 (set enable.idempotence=false for more)",
                self.max_in_flight
            )));
        }
        Ok(true)
    }

    /// Checks the settings the way Kafka's `ProducerConfig` does.
    pub fn validate(&self) -> Result<()> {
        if !matches!(self.acks, -1..=1) {
            return Err(ClientError::InvalidArgument(format!(
                "acks must be -1, 0 or 1, not {}",
                self.acks
            )));
        }
        if self.max_in_flight == 0 {
            return Err(ClientError::InvalidArgument(
                "max.in.flight.requests.per.connection must be at least 1".into(),
            ));
        }
        if let Some(id) = &self.transactional_id {
            if self.enable_idempotence == Some(false) {
                return Err(ClientError::InvalidArgument(format!(
                    "Cannot set a transactional.id ({id}) without also enabling idempotence \
                     (enable.idempotence=false)"
                )));
            }
            if id.is_empty() {
                return Err(ClientError::InvalidArgument(
                    "transactional.id must not be empty".into(),
                ));
            }
            if self.transaction_timeout_ms == 0 || self.transaction_timeout_ms > i32::MAX as u64 {
                return Err(ClientError::InvalidArgument(format!(
                    "transaction.timeout.ms must be between 1 and {}, not {}",
                    i32::MAX,
                    self.transaction_timeout_ms
                )));
            }
        }
        self.idempotence()?;
        let request_ms = u64::try_from(self.request_timeout.as_millis()).unwrap_or(u64::MAX);
        if self.delivery_timeout_ms < self.linger_ms.saturating_add(request_ms) {
            return Err(ClientError::InvalidArgument(format!(
                "delivery.timeout.ms ({}) must be at least linger.ms ({}) + \
                 request.timeout.ms ({request_ms})",
                self.delivery_timeout_ms, self.linger_ms
            )));
        }
        Ok(())
    }
}

/// Most Produce requests an idempotent producer keeps outstanding per
/// connection (Kafka's `MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION_FOR_IDEMPOTENCE`:
/// the broker remembers the last five batches of each producer).
pub const MAX_IN_FLIGHT_IDEMPOTENT: usize = 5;

/// A record to produce.
///
/// The topic, key and value are shared buffers: a caller sending the same
/// topic name or payload many times clones an `Arc<str>` or a [`Bytes`]
/// (a reference count), not the bytes. The producer copies key and value
/// into the batch once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerRecord {
    /// Destination topic.
    pub topic: Arc<str>,
    /// Explicit partition; `None` uses the key hash or the sticky partitioner.
    pub partition: Option<i32>,
    /// Optional key.
    pub key: Option<Bytes>,
    /// Optional value (`None` is a tombstone).
    pub value: Option<Bytes>,
    /// Headers, in order.
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Create time in ms since the epoch; `None` means now.
    pub timestamp: Option<i64>,
}

impl ProducerRecord {
    /// A record with a value and nothing else.
    pub fn new(topic: impl Into<Arc<str>>, value: impl Into<Bytes>) -> Self {
        Self {
            topic: topic.into(),
            partition: None,
            key: None,
            value: Some(value.into()),
            headers: Vec::new(),
            timestamp: None,
        }
    }

    /// Sets the key.
    pub fn key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets an explicit partition.
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Adds a header.
    pub fn header(mut self, key: impl Into<Vec<u8>>, value: Option<Vec<u8>>) -> Self {
        self.headers.push((key.into(), value));
        self
    }

    /// Sets the create timestamp.
    pub fn timestamp(mut self, ts: i64) -> Self {
        self.timestamp = Some(ts);
        self
    }
}

/// What one [`Producer::try_append`] did.
enum Attempt {
    Appended,
    /// The topic's partitions are not loaded yet.
    UnknownTopic,
    /// `buffer.memory` has no room for `needed` bytes.
    WouldBlock {
        needed: usize,
    },
}

#[derive(Debug)]
struct State {
    acc: RecordAccumulator,
    partitioner: Partitioner,
    /// Partition count and partitions with a leader, per topic.
    topics: FxHashMap<String, Arc<TopicPartitions>>,
    /// Records per batch id.
    pending: FxHashMap<BatchId, Vec<Pending>>,
    /// Batch outcomes decided and not delivered yet, in order (`delivery`).
    deliveries: VecDeque<delivery::Delivery>,
    /// Whether a thread is delivering them.
    delivering: bool,
    /// Drained batches not completed yet (queued for a broker, being
    /// written, or awaiting their response).
    in_flight: usize,
    /// Produce requests outstanding per broker id (at most
    /// `max_in_flight`).
    broker_requests: HashMap<i32, usize>,
    /// Batches in flight per partition (at most
    /// `sender::max_in_flight_per_partition`).
    partition_in_flight: HashMap<TopicPartition, usize>,
    /// Topics whose metadata the background refresh should reload.
    refresh_topics: BTreeSet<String>,
    /// Whether the background metadata refresh task runs.
    refreshing: bool,
    /// Concurrent `flush()` calls.
    flushers: usize,
    /// Failed attempts per batch (re-enqueues for ordering do not count).
    failures: HashMap<BatchId, u32>,
    /// Producer id, epoch and sequences when idempotent.
    idem: Option<idempotence::Idempotence>,
    /// Transaction state when transactional.
    txn: Option<transaction::TransactionManager>,
    closed: bool,
}

#[derive(Debug)]
struct Inner {
    config: ProducerConfig,
    cluster: Arc<Cluster>,
    state: Mutex<State>,
    start: Instant,
    /// Wakes the sender (new data, flush, close, retry enqueued).
    wake: Notify,
    /// Signalled when memory is freed or a batch completes.
    progress: Notify,
    /// Transactional requests go one at a time, to the transaction
    /// coordinator's connection kept here (found on first use).
    txn_io: tokio::sync::Mutex<Option<Arc<tokio::sync::Mutex<Connection>>>>,
    /// Wakes the AddPartitionsToTxn task (partitions to add, close).
    txn_wake: Notify,
}

impl Inner {
    /// Locks the state; outcomes decided under the lock are delivered
    /// when it is released (`delivery`).
    fn lock(&self) -> delivery::StateGuard<'_> {
        delivery::StateGuard::new(self)
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// The instant `ms` milliseconds after the producer started.
    fn instant_at(&self, ms: u64) -> Instant {
        self.start + Duration::from_millis(ms)
    }

    /// Sends every buffered record now (ignoring `linger.ms`) and waits
    /// until none is buffered or in flight.
    async fn flush(&self) {
        {
            let mut st = self.lock();
            st.flushers += 1;
            st.acc.begin_flush();
        }
        self.wake.notify_one();
        loop {
            let notified = self.progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let st = self.lock();
                if !st.acc.has_undrained()
                    && st.in_flight == 0
                    && st.deliveries.is_empty()
                    && !st.delivering
                {
                    break;
                }
            }
            notified.await;
        }
        let mut st = self.lock();
        st.flushers -= 1;
        if st.flushers == 0 {
            st.acc.end_flush();
        }
    }
}

/// A topic's partitions as the producer needs them.
#[derive(Debug)]
struct TopicPartitions {
    /// Partition count.
    count: u32,
    /// Partitions with a leader.
    available: Vec<i32>,
    /// One key per partition (so appends need no allocation).
    keys: Vec<TopicPartition>,
}

fn partition_info(t: &TopicInfo) -> Arc<TopicPartitions> {
    let count = t.partitions.len() as u32;
    Arc::new(TopicPartitions {
        count,
        available: t
            .partitions
            .values()
            .filter(|p| p.leader >= 0)
            .map(|p| p.partition)
            .collect(),
        keys: (0..count as i32)
            .map(|p| TopicPartition::new(t.name.clone(), p))
            .collect(),
    })
}

/// An async Kafka producer (see the module docs).
#[derive(Debug)]
pub struct Producer {
    inner: Arc<Inner>,
    sender: Mutex<Option<JoinHandle<()>>>,
}

fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Producer {
    /// Connects to the cluster and starts the sender task.
    pub async fn new(config: ProducerConfig) -> Result<Self> {
        config.validate()?;
        let cluster = Cluster::connect(config.client.clone()).await?;
        Ok(Self::with_cluster(config, cluster))
    }

    /// A producer on an existing cluster view (must be called in a tokio
    /// runtime). The configuration is not validated (see
    /// [`ProducerConfig::validate`]); `max_in_flight` 0 counts as 1, and
    /// idempotence is on when [`ProducerConfig::idempotence`] says so (an
    /// invalid combination turns it off).
    pub fn with_cluster(mut config: ProducerConfig, cluster: Arc<Cluster>) -> Self {
        config.max_in_flight = config.max_in_flight.max(1);
        let idempotent = config.idempotence().unwrap_or(false);
        let mut acc = RecordAccumulator::new(AccumulatorConfig {
            batch_size: config.batch_size,
            linger_ms: config.linger_ms,
            buffer_memory: config.buffer_memory,
            compression: config.compression,
        });
        let txn = config
            .transactional_id
            .clone()
            .filter(|_| idempotent)
            .map(|id| {
                let timeout = i32::try_from(config.transaction_timeout_ms).unwrap_or(i32::MAX);
                transaction::TransactionManager::new(id, timeout)
            });
        acc.set_transactional(txn.is_some());
        let idem = match (&txn, idempotent) {
            (Some(_), _) => Some(idempotence::Idempotence::new_transactional()),
            (None, true) => Some(idempotence::Idempotence::new()),
            (None, false) => None,
        };
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                acc,
                partitioner: Partitioner::new(config.batch_size),
                topics: FxHashMap::default(),
                pending: FxHashMap::default(),
                deliveries: VecDeque::new(),
                delivering: false,
                in_flight: 0,
                broker_requests: HashMap::new(),
                partition_in_flight: HashMap::new(),
                refresh_topics: BTreeSet::new(),
                refreshing: false,
                flushers: 0,
                failures: HashMap::new(),
                idem,
                txn,
                closed: false,
            }),
            config,
            cluster,
            start: Instant::now(),
            wake: Notify::new(),
            progress: Notify::new(),
            txn_io: tokio::sync::Mutex::new(None),
            txn_wake: Notify::new(),
        });
        if inner.lock().txn.is_some() {
            tokio::spawn(transactional::add_partitions_task(inner.clone()));
        }
        let sender = tokio::spawn(sender::run_sender(inner.clone()));
        Self {
            inner,
            sender: Mutex::new(Some(sender)),
        }
    }

    /// The cluster view in use.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.inner.cluster
    }

    /// Whether this producer is idempotent.
    pub fn is_idempotent(&self) -> bool {
        self.inner.lock().idem.is_some()
    }

    /// The producer id and epoch new batches are written with (`None`
    /// when not idempotent or before InitProducerId answered).
    pub fn producer_id_and_epoch(&self) -> Option<(i64, i16)> {
        self.inner.lock().idem.as_ref().and_then(|i| i.producer())
    }

    /// The error that stopped this idempotent producer, if one did: every
    /// send fails with it from then on (Kafka's fatal error state).
    pub fn fatal_error(&self) -> Option<ClientError> {
        self.inner
            .lock()
            .idem
            .as_ref()
            .and_then(|i| i.fatal().cloned())
    }

    async fn topic_partitions(&self, topic: &str) -> Result<Arc<TopicPartitions>> {
        if let Some(t) = self.inner.lock().topics.get(topic) {
            return Ok(t.clone());
        }
        let (md, errors) = self
            .inner
            .cluster
            .refresh_creating(&[topic.to_string()])
            .await?;
        if let Some((_, e)) = errors.into_iter().next() {
            return Err(e);
        }
        let t = md.topics.get(topic).ok_or_else(|| {
            ClientError::from_code(3, None, format!("topic {topic}"))
                .unwrap_or_else(|| ClientError::InvalidArgument(topic.to_string()))
        })?;
        let info = partition_info(t);
        self.inner
            .lock()
            .topics
            .insert(topic.to_string(), info.clone());
        Ok(info)
    }

    /// Buffers `record` (waiting for memory up to `max.block.ms`) and returns
    /// a future resolving to where it was written.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        let (tx, rx) = oneshot::channel();
        self.append(record, Completion::Future(tx)).await?;
        Ok(DeliveryFuture { rx })
    }

    /// Like [`send`](Self::send), but runs `callback` with the outcome
    /// instead of returning a future (Kafka's `send(record, callback)`):
    /// no channel and no task per record. The callback runs on one of the
    /// producer's tasks, after its state is unlocked, one callback at a
    /// time and in send order within a partition, as Kafka's; it must be
    /// short and must not block (hand work off through a channel), since
    /// the outcomes after it wait. It may call the producer.
    pub async fn send_with_callback(
        &self,
        record: ProducerRecord,
        callback: impl FnOnce(Result<RecordMetadata>) + Send + 'static,
    ) -> Result<()> {
        self.append(record, Completion::Callback(Box::new(callback)))
            .await
    }

    async fn append(&self, record: ProducerRecord, completion: Completion) -> Result<()> {
        let timestamp = record.timestamp.unwrap_or_else(wall_clock_ms);
        // Headers in the protocol's form (no allocation without headers).
        let headers: Vec<Header> = record
            .headers
            .iter()
            .map(|(k, v)| Header {
                key: k.clone(),
                value: v.clone(),
            })
            .collect();
        let rec = RecordRef {
            timestamp,
            key: record.key.as_deref(),
            value: record.value.as_deref(),
            headers: &headers,
        };
        let mut completion = Some(completion);
        let mut deadline = None;
        'wait: loop {
            // Fast path first; on a full buffer, register for a wake-up and
            // try once more before waiting (no lost wake-ups).
            let notified = self.inner.progress.notified();
            tokio::pin!(notified);
            for attempt in 0..2 {
                if attempt == 1 {
                    notified.as_mut().enable();
                }
                match self.try_append(&record, rec, &mut completion)? {
                    Attempt::Appended => return Ok(()),
                    Attempt::UnknownTopic => {
                        self.topic_partitions(&record.topic).await?;
                        continue 'wait;
                    }
                    Attempt::WouldBlock { needed } => {
                        let max_block = Duration::from_millis(self.inner.config.max_block_ms);
                        let limit = *deadline.get_or_insert_with(|| Instant::now() + max_block);
                        if Instant::now() >= limit {
                            return Err(ClientError::Timeout {
                                api: format!("buffer memory for {needed} bytes"),
                                addr: String::new(),
                                timeout: max_block,
                            });
                        }
                    }
                }
            }
            self.inner.wake.notify_one();
            if let Some(limit) = deadline {
                let _ = tokio::time::timeout_at(limit.into(), notified).await;
            }
        }
    }

    /// One try at appending `rec` (of `record`) under one lock of the
    /// state: the topic's partitions are looked up under it too.
    fn try_append(
        &self,
        record: &ProducerRecord,
        rec: RecordRef<'_>,
        completion: &mut Option<Completion>,
    ) -> Result<Attempt> {
        let topic = &*record.topic;
        let mut guard = self.inner.lock();
        let st = &mut *guard;
        if st.closed {
            return Err(ClientError::InvalidArgument("producer is closed".into()));
        }
        let Some(partitions) = st.topics.get(topic) else {
            return Ok(Attempt::UnknownTopic);
        };
        let num_partitions = partitions.count;
        if num_partitions == 0 {
            return Err(ClientError::InvalidArgument(format!(
                "topic {topic} has no partitions"
            )));
        }
        if let Some(p) = record.partition {
            if p < 0 || p as u32 >= num_partitions {
                return Err(ClientError::InvalidArgument(format!(
                    "partition {p} of topic {topic} does not exist ({num_partitions} partitions)"
                )));
            }
        }
        if let Some(txn) = st.txn.as_ref() {
            // Fatal and abortable errors first, as Kafka's send.
            txn.maybe_fail(st.idem.as_ref().and_then(|i| i.producer()))?;
        }
        if let Some(e) = st.idem.as_ref().and_then(|i| i.fatal()) {
            return Err(e.clone());
        }
        let choice = st.partitioner.partition(
            topic,
            record.partition,
            rec.key,
            num_partitions,
            &partitions.available,
        );
        let Some(tp) = partitions.keys.get(choice.partition as usize) else {
            return Err(ClientError::Protocol(format!(
                "partitioner chose partition {} of {num_partitions}",
                choice.partition
            )));
        };
        let producer = st.idem.as_ref().and_then(|i| i.producer());
        if let Some(txn) = st.txn.as_mut() {
            txn.check_send(tp, producer)?;
        }
        let appended = match st.acc.append_at(tp, rec, || self.inner.now_ms()) {
            Ok(a) => a,
            Err(e) => {
                // Kafka: a record the producer refuses fails the
                // transaction too.
                if let Some(txn) = st.txn.as_mut() {
                    txn.on_error(&e);
                }
                return Err(e);
            }
        };
        if st.txn.as_mut().is_some_and(|t| t.maybe_add_partition(tp)) {
            self.inner.txn_wake.notify_one();
        }
        match appended {
            AppendOutcome::Appended {
                handle,
                size,
                batch_full,
                new_batch,
            } => {
                if choice.sticky {
                    st.partitioner
                        .record_appended(topic, choice.partition, size);
                }
                let Some(completion) = completion.take() else {
                    return Err(ClientError::Protocol("record completed twice".into()));
                };
                st.pending
                    .entry(handle.batch_id)
                    .or_default()
                    .push(Pending {
                        index: handle.index,
                        timestamp: rec.timestamp,
                        completion,
                    });
                drop(guard);
                if batch_full || new_batch {
                    self.inner.wake.notify_one();
                }
                Ok(Attempt::Appended)
            }
            AppendOutcome::WouldBlock { needed, .. } => Ok(Attempt::WouldBlock { needed }),
        }
    }

    /// Sends every buffered record now (ignoring `linger.ms`) and waits until
    /// all records sent before the call completed (acknowledged or failed).
    pub async fn flush(&self) {
        self.inner.flush().await;
    }

    /// Flushes, stops the sender task and rejects further sends. A
    /// transactional producer first aborts its open transaction, as
    /// Kafka's does.
    pub async fn close(&self) -> Result<()> {
        let ongoing = self.inner.lock().txn.as_ref().is_some_and(|t| {
            matches!(
                t.state(),
                TransactionState::InTransaction | TransactionState::AbortableError
            )
        });
        if ongoing {
            if let Err(e) = self.abort_transaction().await {
                tracing::warn!(%e, "aborting the open transaction at close failed");
            }
        }
        self.flush().await;
        self.inner.lock().closed = true;
        self.inner.wake.notify_one();
        self.inner.txn_wake.notify_one();
        let task = self
            .sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            task.await
                .map_err(|e| ClientError::Protocol(format!("sender task failed: {e}")))?;
        }
        Ok(())
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        // The sender delivers what is buffered, then exits. A transaction
        // left open is not committed: its records not sent yet are dropped
        // (their partitions may never be added) and the coordinator aborts
        // it after `transaction.timeout.ms` (`close` aborts it at once).
        {
            let mut st = self.inner.lock();
            st.closed = true;
            let open = st.txn.as_ref().is_some_and(|t| {
                !matches!(
                    t.state(),
                    TransactionState::Uninitialized | TransactionState::Ready
                )
            });
            if open {
                let e = ClientError::IllegalState(
                    "the producer was dropped with its transaction open".into(),
                );
                sender::abort_new_batches(&mut st, &e);
            }
        }
        self.inner.progress.notify_waiters();
        self.inner.wake.notify_one();
        self.inner.txn_wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(f: impl FnOnce(&mut ProducerConfig)) -> ProducerConfig {
        let mut c = ProducerConfig::new(ClientConfig::new("127.0.0.1:9092"));
        f(&mut c);
        c
    }

    /// Kafka 4's rules: on by default with acks=all; acks 0/1 or retries 0
    /// turn the default off but make an explicit `true` an error; more
    /// than 5 in flight is an error whenever idempotence is on.
    #[test]
    fn idempotence_follows_kafkas_config_rules() {
        assert!(config(|_| {}).idempotence().expect("default"));
        for acks in [0, 1] {
            assert!(!config(|c| c.acks = acks).idempotence().expect("off"));
            let e = config(|c| {
                c.acks = acks;
                c.enable_idempotence = Some(true);
            })
            .validate()
            .expect_err("conflict");
            assert!(e.to_string().contains("acks must be all"), "{e}");
        }
        assert!(!config(|c| c.retries = 0).idempotence().expect("off"));
        assert!(config(|c| {
            c.retries = 0;
            c.enable_idempotence = Some(true);
        })
        .validate()
        .is_err());
        assert!(config(|c| c.max_in_flight = 6).validate().is_err());
        assert!(config(|c| {
            c.max_in_flight = 6;
            c.enable_idempotence = Some(false);
        })
        .validate()
        .is_ok());
        assert!(!config(|c| {
            c.acks = 1;
            c.enable_idempotence = Some(false);
        })
        .idempotence()
        .expect("off"));
    }
}
