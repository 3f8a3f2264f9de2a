//! The async producer: partitions records, buffers them in a
//! [`RecordAccumulator`] and sends them from a background sender task.
//!
//! [`Producer::send`] waits for buffer space (`buffer.memory` back-pressure,
//! bounded by `max.block.ms`) and returns a [`DeliveryFuture`] that resolves
//! when the broker acknowledged the record's batch (or the batch failed for
//! good). The sender task wakes when a batch is ready (`linger.ms`, a full
//! batch, a flush), drains ready batches, groups them by partition leader and
//! sends one `Produce` request per broker with one batch per partition.
//! Retriable partition errors re-enqueue the batch (after a backoff, within
//! `delivery.timeout.ms` and `retries`); errors that mean stale metadata
//! (`NOT_LEADER_OR_FOLLOWER`, `UNKNOWN_TOPIC_OR_PARTITION`, lost connections)
//! refresh the topic's metadata first.
//!
//! Ordering: at most one batch per partition is in flight (the partition is
//! muted in the accumulator while its batch is out), so retries never
//! reorder records.
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

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use proto_kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use proto_kafka::messages::{ProduceRequest, ProduceResponse, TopicName};
use proto_kafka::protocol::StrBytes;
use sluice_protocol::record::{Compression, Record};
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;

use crate::accumulator::{
    AccumulatorConfig, AppendOutcome, BatchId, ReadyBatch, RecordAccumulator, TopicPartition,
};
use crate::cluster::{ClientConfig, Cluster};
use crate::error::{ClientError, Result};
use crate::partitioner::Partitioner;

/// Highest Produce version this producer speaks (v13 replaces topic names
/// with topic ids).
const PRODUCE_MAX: i16 = 12;

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
    /// requests.
    pub request_timeout: Duration,
    /// `delivery.timeout.ms`: upper bound on the time between `send` and the
    /// delivery outcome, retries included.
    pub delivery_timeout_ms: u64,
    /// `retries`: how often a batch is retried after a retriable error.
    pub retries: u32,
    /// `max.block.ms`: how long `send` waits for buffer memory.
    pub max_block_ms: u64,
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
        }
    }
}

/// A record to produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerRecord {
    /// Destination topic.
    pub topic: String,
    /// Explicit partition; `None` uses the key hash or the sticky partitioner.
    pub partition: Option<i32>,
    /// Optional key.
    pub key: Option<Vec<u8>>,
    /// Optional value (`None` is a tombstone).
    pub value: Option<Vec<u8>>,
    /// Headers, in order.
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Create time in ms since the epoch; `None` means now.
    pub timestamp: Option<i64>,
}

impl ProducerRecord {
    /// A record with a value and nothing else.
    pub fn new(topic: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
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
    pub fn key(mut self, key: impl Into<Vec<u8>>) -> Self {
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

/// Where an acknowledged record was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset (-1 with `acks=0`, which gets no acknowledgement).
    pub offset: i64,
    /// The record's timestamp (the broker's append time for topics with
    /// `LogAppendTime`).
    pub timestamp: i64,
}

/// Resolves to the delivery outcome of one record.
#[derive(Debug)]
pub struct DeliveryFuture {
    rx: oneshot::Receiver<Result<RecordMetadata>>,
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx).poll(cx).map(|r| {
            r.unwrap_or_else(|_| {
                Err(ClientError::InvalidArgument(
                    "producer dropped before the record was delivered".into(),
                ))
            })
        })
    }
}

/// A record waiting for its batch's acknowledgement.
#[derive(Debug)]
struct Pending {
    index: u32,
    timestamp: i64,
    tx: oneshot::Sender<Result<RecordMetadata>>,
}

#[derive(Debug)]
struct State {
    acc: RecordAccumulator,
    partitioner: Partitioner,
    /// Partition count and partitions with a leader, per topic.
    topics: HashMap<String, (u32, Vec<i32>)>,
    /// Records per batch id.
    pending: HashMap<BatchId, Vec<Pending>>,
    /// Drained batches not completed yet.
    in_flight: usize,
    /// Concurrent `flush()` calls.
    flushers: usize,
    /// Failed attempts per batch (re-enqueues for ordering do not count).
    failures: HashMap<BatchId, u32>,
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
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
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
        if !matches!(config.acks, -1..=1) {
            return Err(ClientError::InvalidArgument(format!(
                "acks must be -1, 0 or 1, not {}",
                config.acks
            )));
        }
        let cluster = Cluster::connect(config.client.clone()).await?;
        Ok(Self::with_cluster(config, cluster))
    }

    /// A producer on an existing cluster view (must be called in a tokio
    /// runtime).
    pub fn with_cluster(config: ProducerConfig, cluster: Arc<Cluster>) -> Self {
        let acc = RecordAccumulator::new(AccumulatorConfig {
            batch_size: config.batch_size,
            linger_ms: config.linger_ms,
            buffer_memory: config.buffer_memory,
            compression: config.compression,
        });
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                acc,
                partitioner: Partitioner::new(config.batch_size),
                topics: HashMap::new(),
                pending: HashMap::new(),
                in_flight: 0,
                flushers: 0,
                failures: HashMap::new(),
                closed: false,
            }),
            config,
            cluster,
            start: Instant::now(),
            wake: Notify::new(),
            progress: Notify::new(),
        });
        let sender = tokio::spawn(run_sender(inner.clone()));
        Self {
            inner,
            sender: Mutex::new(Some(sender)),
        }
    }

    /// The cluster view in use.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.inner.cluster
    }

    async fn topic_partitions(&self, topic: &str) -> Result<(u32, Vec<i32>)> {
        if let Some(t) = self.inner.lock().topics.get(topic) {
            return Ok(t.clone());
        }
        let (md, errors) = self
            .inner
            .cluster
            .refresh(Some(&[topic.to_string()]))
            .await?;
        if let Some((_, e)) = errors.into_iter().next() {
            return Err(e);
        }
        let t = md.topics.get(topic).ok_or_else(|| {
            ClientError::from_code(3, None, format!("topic {topic}"))
                .unwrap_or_else(|| ClientError::InvalidArgument(topic.to_string()))
        })?;
        let info = (
            t.partitions.len() as u32,
            t.partitions
                .values()
                .filter(|p| p.leader >= 0)
                .map(|p| p.partition)
                .collect(),
        );
        self.inner
            .lock()
            .topics
            .insert(topic.to_string(), info.clone());
        Ok(info)
    }

    /// Buffers `record` (waiting for memory up to `max.block.ms`) and returns
    /// a future resolving to where it was written.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        let (num_partitions, available) = self.topic_partitions(&record.topic).await?;
        if num_partitions == 0 {
            return Err(ClientError::InvalidArgument(format!(
                "topic {} has no partitions",
                record.topic
            )));
        }
        if let Some(p) = record.partition {
            if p < 0 || p as u32 >= num_partitions {
                return Err(ClientError::InvalidArgument(format!(
                    "partition {p} of topic {} does not exist ({num_partitions} partitions)",
                    record.topic
                )));
            }
        }
        let timestamp = record.timestamp.unwrap_or_else(wall_clock_ms);
        let mut rec = Record::new(record.key.clone(), record.value, timestamp);
        for (k, v) in &record.headers {
            rec = rec.with_header(k, v.as_deref());
        }
        let deadline = Instant::now() + Duration::from_millis(self.inner.config.max_block_ms);
        loop {
            let notified = self.inner.progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.inner.lock();
                if st.closed {
                    return Err(ClientError::InvalidArgument("producer is closed".into()));
                }
                let choice = st.partitioner.partition(
                    &record.topic,
                    record.partition,
                    record.key.as_deref(),
                    num_partitions,
                    &available,
                );
                let tp = TopicPartition::new(record.topic.clone(), choice.partition);
                let now = self.inner.now_ms();
                match st.acc.append(&tp, rec.clone(), now)? {
                    AppendOutcome::Appended {
                        handle,
                        size,
                        batch_full,
                        new_batch,
                    } => {
                        if choice.sticky {
                            st.partitioner
                                .record_appended(&record.topic, choice.partition, size);
                        }
                        let (tx, rx) = oneshot::channel();
                        st.pending
                            .entry(handle.batch_id)
                            .or_default()
                            .push(Pending {
                                index: handle.index,
                                timestamp,
                                tx,
                            });
                        drop(st);
                        if batch_full || new_batch {
                            self.inner.wake.notify_one();
                        }
                        return Ok(DeliveryFuture { rx });
                    }
                    AppendOutcome::WouldBlock { needed, .. } => {
                        if Instant::now() >= deadline {
                            return Err(ClientError::Timeout {
                                api: format!("buffer memory for {needed} bytes"),
                                addr: String::new(),
                                timeout: Duration::from_millis(self.inner.config.max_block_ms),
                            });
                        }
                    }
                }
            }
            self.inner.wake.notify_one();
            let _ = tokio::time::timeout_at(deadline.into(), notified).await;
        }
    }

    /// Sends every buffered record now (ignoring `linger.ms`) and waits until
    /// all records sent before the call completed (acknowledged or failed).
    pub async fn flush(&self) {
        self.inner.lock().flushers += 1;
        {
            let mut st = self.inner.lock();
            st.acc.begin_flush();
        }
        self.inner.wake.notify_one();
        loop {
            let notified = self.inner.progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let st = self.inner.lock();
                if !st.acc.has_undrained() && st.in_flight == 0 {
                    break;
                }
            }
            notified.await;
        }
        let mut st = self.inner.lock();
        st.flushers -= 1;
        if st.flushers == 0 {
            st.acc.end_flush();
        }
    }

    /// Flushes, stops the sender task and rejects further sends.
    pub async fn close(&self) -> Result<()> {
        self.flush().await;
        self.inner.lock().closed = true;
        self.inner.wake.notify_one();
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
        // The sender delivers what is buffered, then exits.
        self.inner.lock().closed = true;
        self.inner.wake.notify_one();
    }
}

/// The sender loop: drain ready batches, send them per leader, repeat.
async fn run_sender(inner: Arc<Inner>) {
    loop {
        let notified = inner.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let (batches, next) = {
            let mut st = inner.lock();
            if st.closed {
                // Deliver what is left without lingering.
                st.acc.begin_flush();
                if !st.acc.has_undrained() && st.in_flight == 0 {
                    break;
                }
            }
            let now = inner.now_ms();
            let batches = match st.acc.drain(now) {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(%e, "encoding batches failed");
                    let ids = st.acc.abort_undrained();
                    for id in ids {
                        fail_batch_records(&mut st, id, &e);
                    }
                    drop(st);
                    inner.progress.notify_waiters();
                    continue;
                }
            };
            // One batch per partition in flight: give later batches of the
            // same partition back (they keep their order, ahead of newer ones).
            let mut seen = std::collections::HashSet::new();
            let mut send = Vec::with_capacity(batches.len());
            for b in batches {
                if seen.insert(b.tp.clone()) {
                    st.acc.mute(&b.tp);
                    send.push(b);
                } else {
                    st.acc.reenqueue(b);
                }
            }
            let batches = send;
            st.in_flight += batches.len();
            (batches, st.acc.next_ready_ms())
        };
        if batches.is_empty() {
            match next {
                Some(at) => {
                    let wait = at.saturating_sub(inner.now_ms());
                    let _ =
                        tokio::time::timeout(Duration::from_millis(wait.max(1)), notified).await;
                }
                None => notified.await,
            }
            continue;
        }
        // Group by leader.
        let md = inner.cluster.metadata().await;
        let mut by_leader: BTreeMap<i32, Vec<ReadyBatch>> = BTreeMap::new();
        let mut leaderless = Vec::new();
        for b in batches {
            match md.leader(&b.tp.topic, b.tp.partition) {
                Some(broker) => by_leader.entry(broker.id).or_default().push(b),
                None => leaderless.push(b),
            }
        }
        if !leaderless.is_empty() {
            let inner = inner.clone();
            tokio::spawn(async move {
                let e = ClientError::from_code(5, None, "no leader known")
                    .unwrap_or_else(|| ClientError::NoBrokerAvailable("no leader".into()));
                for b in leaderless {
                    complete(&inner, b, Err(clone_error(&e))).await;
                }
            });
        }
        for (leader, batches) in by_leader {
            tokio::spawn(send_to_leader(inner.clone(), leader, batches));
        }
    }
}

/// A copy of `e` for a second batch (errors are not `Clone`).
fn clone_error(e: &ClientError) -> ClientError {
    match e {
        ClientError::Kafka {
            error,
            code,
            name,
            message,
            context,
        } => ClientError::Kafka {
            error: *error,
            code: *code,
            name: name.clone(),
            message: message.clone(),
            context: context.clone(),
        },
        ClientError::Io { addr, source } => ClientError::Io {
            addr: addr.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        ClientError::Timeout { api, addr, timeout } => ClientError::Timeout {
            api: api.clone(),
            addr: addr.clone(),
            timeout: *timeout,
        },
        ClientError::NoBrokerAvailable(s) => ClientError::NoBrokerAvailable(s.clone()),
        ClientError::Protocol(s) => ClientError::Protocol(s.clone()),
        ClientError::InvalidArgument(s) => ClientError::InvalidArgument(s.clone()),
        ClientError::UnsupportedVersion { api, addr } => ClientError::UnsupportedVersion {
            api: api.clone(),
            addr: addr.clone(),
        },
        ClientError::RecordTooLarge {
            size,
            limit,
            limit_name,
        } => ClientError::RecordTooLarge {
            size: *size,
            limit: *limit,
            limit_name,
        },
    }
}

/// Sends one Produce request with `batches` (one per partition) to broker
/// `leader` and completes each batch from its partition response.
async fn send_to_leader(inner: Arc<Inner>, leader: i32, batches: Vec<ReadyBatch>) {
    let cfg = &inner.config;
    let mut req = ProduceRequest::default();
    req.acks = cfg.acks;
    req.timeout_ms = i32::try_from(cfg.request_timeout.as_millis()).unwrap_or(i32::MAX);
    let mut topics: BTreeMap<String, Vec<PartitionProduceData>> = BTreeMap::new();
    for b in &batches {
        let mut p = PartitionProduceData::default();
        p.index = b.tp.partition;
        p.records = Some(Bytes::from(b.bytes.clone()));
        topics.entry(b.tp.topic.clone()).or_default().push(p);
    }
    req.topic_data = topics
        .into_iter()
        .map(|(name, partitions)| {
            let mut t = TopicProduceData::default();
            t.name = TopicName(StrBytes::from_string(name));
            t.partition_data = partitions;
            t
        })
        .collect();
    let result: Result<Option<ProduceResponse>> = async {
        let conn = inner.cluster.connection(leader).await?;
        let mut conn = conn.lock().await;
        let version = conn.version_for(proto_kafka::messages::ApiKey::Produce, PRODUCE_MAX)?;
        if cfg.acks == 0 {
            conn.send_oneway(&req, version).await?;
            Ok(None)
        } else {
            Ok(Some(conn.send(&req, version).await?))
        }
    }
    .await;
    match result {
        Err(e) => {
            for b in batches {
                complete(&inner, b, Err(clone_error(&e))).await;
            }
        }
        Ok(None) => {
            for b in batches {
                complete(&inner, b, Ok((-1, -1))).await;
            }
        }
        Ok(Some(resp)) => {
            let mut outcomes: HashMap<TopicPartition, (i16, i64, i64, Option<String>)> =
                HashMap::new();
            for t in &resp.responses {
                for p in &t.partition_responses {
                    outcomes.insert(
                        TopicPartition::new(t.name.0.as_str(), p.index),
                        (
                            p.error_code,
                            p.base_offset,
                            p.log_append_time_ms,
                            p.error_message.as_ref().map(|m| m.as_str().to_string()),
                        ),
                    );
                }
            }
            for b in batches {
                let r = match outcomes.remove(&b.tp) {
                    None => Err(ClientError::Protocol(format!(
                        "no produce response for {}-{}",
                        b.tp.topic, b.tp.partition
                    ))),
                    Some((code, base, append_time, msg)) => {
                        match ClientError::from_code(
                            code,
                            msg,
                            format!("produce to {}-{}", b.tp.topic, b.tp.partition),
                        ) {
                            Some(e) => Err(e),
                            None => Ok((base, append_time)),
                        }
                    }
                };
                complete(&inner, b, r).await;
            }
        }
    }
}

fn fail_batch_records(st: &mut State, id: BatchId, e: &ClientError) {
    for p in st.pending.remove(&id).unwrap_or_default() {
        let _ = p.tx.send(Err(clone_error(e)));
    }
}

/// Completes a drained batch: resolves its records, or re-enqueues it for a
/// retry when the error is retriable and time and retries remain.
async fn complete(inner: &Arc<Inner>, batch: ReadyBatch, outcome: Result<(i64, i64)>) {
    let cfg = &inner.config;
    match outcome {
        Ok((base, append_time)) => {
            let mut st = inner.lock();
            for p in st.pending.remove(&batch.id).unwrap_or_default() {
                let offset = if base < 0 {
                    -1
                } else {
                    base + i64::from(p.index)
                };
                let timestamp = if append_time >= 0 {
                    append_time
                } else {
                    p.timestamp
                };
                let _ = p.tx.send(Ok(RecordMetadata {
                    topic: batch.tp.topic.clone(),
                    partition: batch.tp.partition,
                    offset,
                    timestamp,
                }));
            }
            finish(&mut st, &batch);
        }
        Err(e) => {
            let elapsed = inner.now_ms().saturating_sub(batch.created_ms);
            let failures = {
                let mut st = inner.lock();
                let n = st.failures.entry(batch.id).or_insert(0);
                *n += 1;
                *n
            };
            let retry =
                e.is_retriable() && failures <= cfg.retries && elapsed < cfg.delivery_timeout_ms;
            if retry {
                tracing::debug!(%e, failures, "retrying produce batch");
                if e.invalidates_metadata() {
                    inner.lock().topics.remove(&batch.tp.topic);
                    let _ = inner
                        .cluster
                        .refresh(Some(std::slice::from_ref(&batch.tp.topic)))
                        .await;
                }
                let base = cfg.client.retry_backoff;
                let backoff = base
                    .saturating_mul(1 << (failures - 1).min(10))
                    .min(cfg.client.retry_backoff_max);
                tokio::time::sleep(backoff).await;
                let mut st = inner.lock();
                st.in_flight -= 1;
                st.acc.unmute(&batch.tp);
                st.acc.reenqueue(batch);
                drop(st);
                inner.wake.notify_one();
            } else {
                let mut st = inner.lock();
                fail_batch_records(&mut st, batch.id, &e);
                finish(&mut st, &batch);
            }
        }
    }
    inner.progress.notify_waiters();
    inner.wake.notify_one();
}

/// Releases a finished batch's memory and unmutes its partition.
fn finish(st: &mut State, batch: &ReadyBatch) {
    st.failures.remove(&batch.id);
    st.acc.deallocate(batch);
    st.acc.unmute(&batch.tp);
    st.in_flight -= 1;
}
