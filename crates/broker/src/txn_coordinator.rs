//! The transaction coordinator runtime: drives the sans-IO
//! `sluice_coordinator::txn::TransactionCoordinator` with real I/O, as the
//! contract of design 012 asks (this module's own decisions: design 014).
//!
//! - One shard per `__transaction_state` partition this node leads (on one
//!   node, all of them), each in its own slot: loading one partition holds
//!   only that slot, so requests for ids of other partitions go on. A shard
//!   is loaded (replayed from the log start) at start for an existing
//!   topic, else on first use; the topic is created by the broker on first
//!   need (FindCoordinator with key type TRANSACTION, transactional
//!   InitProducerId) with Kafka's configs.
//! - Handlers call [`call`] with an operation on the id's shard. The
//!   operation runs on the blocking pool (producer-id blocks are fsynced
//!   to the metadata log, appends may roll or fsync); its effects are
//!   applied in the contract's order: records appended to the partition
//!   through the partition layer and confirmed to the machine (or failed
//!   with Kafka's mapping of the append error), then responses released to
//!   their parked requests, then markers queued.
//! - The background task [`run`] sends queued markers with
//!   `Broker::write_txn_markers` (one task each, so a slow partition does
//!   not hold up other transactions), feeds the per-partition outcomes back
//!   with `markers_completed`, and ticks the shards at their next deadline
//!   (`transaction.timeout.ms` aborts, `transactional.id.expiration.ms`,
//!   marker and completion retries).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proto_kafka::ResponseError;
use sluice_coordinator::txn::{
    partition_for, Effects, ListTransactionsFilter, ListedTxns, MarkerCompletion, MarkerOutcome,
    PendingRecord, RequestToken, TopicPartition, TransactionCoordinator, TransactionState,
    TxnConfig, TxnResponse, TxnResult, WriteMarkers,
};
use sluice_coordinator::KafkaError;
use sluice_protocol::record::codec::decode_batch;
use sluice_protocol::record::{BatchBuilder, Compression, Record};
use sluice_storage::ReplayEvent;
use tokio::sync::{mpsc, oneshot, watch, Notify};

use crate::broker::Broker;
use crate::groups::{lock, now_ms};
use crate::internal_topics::TRANSACTION_STATE_TOPIC;
use crate::partition::Partition;
use crate::txn_markers::MarkerWrite;

/// One `__transaction_state` partition's coordinator.
#[derive(Debug)]
pub(crate) struct Shard {
    pub(crate) machine: TransactionCoordinator,
    /// The `__transaction_state` partition, through the partition layer.
    partition: Arc<Partition>,
}

/// A shard's place: empty until the partition is loaded (see
/// `groups::Slot`).
type Slot = Arc<Mutex<Option<Arc<Mutex<Shard>>>>>;

/// Markers to send: the shard's partition and the machine's effect.
type QueuedMarkers = (i32, WriteMarkers);

/// All transaction shards, the parked requests, the marker queue and the
/// timer wake-up.
#[derive(Debug)]
pub(crate) struct TxnCoordinator {
    /// The machines' config; `num_partitions` is the configured count,
    /// replaced by the topic's own when a shard is loaded.
    config: TxnConfig,
    shards: Mutex<HashMap<i32, Slot>>,
    /// Partitions being loaded (their slot is held for the whole load;
    /// other holders of a slot hold it only for a moment).
    loading: Mutex<HashSet<i32>>,
    parked: Mutex<HashMap<u64, oneshot::Sender<TxnResponse>>>,
    next_token: AtomicU64,
    /// Wakes the background task when a deadline may have moved earlier.
    wake: Notify,
    markers: mpsc::UnboundedSender<QueuedMarkers>,
    /// Taken by the background task when it starts; markers emitted
    /// before (loads at start) wait in the channel.
    marker_queue: Mutex<Option<mpsc::UnboundedReceiver<QueuedMarkers>>>,
}

impl TxnCoordinator {
    pub(crate) fn new(settings: &crate::config::Settings) -> Self {
        let config = TxnConfig {
            max_timeout_ms: settings.transaction_max_timeout_ms,
            transactional_id_expiration_ms: i64::from(settings.transactional_id_expiration_ms),
            abort_timed_out_interval_ms: i64::from(
                settings.transaction_abort_timed_out_interval_ms.max(1),
            ),
            remove_expired_interval_ms: i64::from(
                settings.transaction_remove_expired_interval_ms.max(1),
            ),
            num_partitions: settings.transaction_state_log_num_partitions.max(1),
            ..TxnConfig::default()
        };
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            config,
            shards: Mutex::new(HashMap::new()),
            loading: Mutex::new(HashSet::new()),
            parked: Mutex::new(HashMap::new()),
            next_token: AtomicU64::new(1),
            wake: Notify::new(),
            markers: tx,
            marker_queue: Mutex::new(Some(rx)),
        }
    }

    /// The number of `__transaction_state` partitions: the existing
    /// topic's (a later change of `transaction.state.log.num.partitions`
    /// must not move ids to other partitions), else the configured count.
    pub(crate) fn partition_count(&self, broker: &Broker) -> i32 {
        broker
            .image()
            .topic(TRANSACTION_STATE_TOPIC)
            .map_or(self.config.num_partitions, |t| t.partitions.len() as i32)
            .max(1)
    }

    /// The shard coordinating `transactional_id`, loading its partition on
    /// first use. With `create`, a missing `__transaction_state` is
    /// created first (COORDINATOR_NOT_AVAILABLE if that fails); without,
    /// a missing topic is NOT_COORDINATOR (nothing can be known about the
    /// id).
    pub(crate) fn shard(
        &self,
        broker: &Broker,
        transactional_id: &str,
        create: bool,
    ) -> Result<Arc<Mutex<Shard>>, KafkaError> {
        let partition = partition_for(transactional_id, self.partition_count(broker));
        self.shard_at(broker, partition, create)
    }

    fn slot(&self, partition: i32) -> Slot {
        Arc::clone(lock(&self.shards).entry(partition).or_default())
    }

    fn shard_at(
        &self,
        broker: &Broker,
        partition: i32,
        create: bool,
    ) -> Result<Arc<Mutex<Shard>>, KafkaError> {
        let slot = self.slot(partition);
        if let Ok(loaded) = slot.try_lock() {
            if let Some(shard) = loaded.as_ref() {
                return Ok(Arc::clone(shard));
            }
        }
        // Creating the topic and replaying the partition wait on the disk
        // (and on a concurrent load of the same partition, never of
        // another).
        crate::blocking::in_place(|| {
            let mut loaded = lock(&slot);
            if let Some(shard) = loaded.as_ref() {
                return Ok(Arc::clone(shard));
            }
            if broker.image().topic(TRANSACTION_STATE_TOPIC).is_none() {
                if !create {
                    return Err(KafkaError::NotCoordinator);
                }
                broker.ensure_transaction_state_topic().map_err(|e| {
                    tracing::warn!(code = ?e.code, message = e.message.as_deref().unwrap_or(""),
                        "cannot create __transaction_state");
                    KafkaError::CoordinatorNotAvailable
                })?;
            }
            let part = broker
                .partition(TRANSACTION_STATE_TOPIC, partition)
                .ok_or(KafkaError::NotCoordinator)?;
            lock(&self.loading).insert(partition);
            let loaded_shard = self.load(broker, part);
            lock(&self.loading).remove(&partition);
            let shard = Arc::new(Mutex::new(loaded_shard?));
            *loaded = Some(Arc::clone(&shard));
            Ok(shard)
        })
    }

    /// Loads every partition of an existing `__transaction_state` (at
    /// start), so prepared transactions get their markers and open ones
    /// their timeout without waiting for a request.
    pub(crate) fn load_all(&self, broker: &Broker) -> Result<(), KafkaError> {
        let Some(topic) = broker.image().topic(TRANSACTION_STATE_TOPIC).cloned() else {
            return Ok(());
        };
        if topic.partitions.len() as i32 != self.config.num_partitions {
            tracing::info!(
                partitions = topic.partitions.len(),
                configured = self.config.num_partitions,
                "__transaction_state exists with a partition count other than transaction.state.log.num.partitions; using the topic's"
            );
        }
        for &p in topic.partitions.keys() {
            self.shard_at(broker, p, false)?;
        }
        Ok(())
    }

    /// Replays one partition into a fresh shard (design 012's load steps:
    /// begin at the partition's leader epoch, replay from the log start,
    /// complete; the markers of prepared transactions go to the queue).
    fn load(&self, broker: &Broker, partition: Arc<Partition>) -> Result<Shard, KafkaError> {
        let log = Arc::clone(partition.log());
        let tp = log.topic_partition().clone();
        let cfg = TxnConfig {
            num_partitions: self.partition_count(broker),
            ..self.config.clone()
        };
        let mut machine = TransactionCoordinator::new(cfg, tp.partition);
        let mut effects = machine.begin_load(partition.leader_epoch());
        let from = log.log_start_offset();
        let mut count = 0usize;
        let replayed = log.replay(from, |event| {
            // Damage is logged by the replay.
            let ReplayEvent::Batch { header, raw } = event else {
                return;
            };
            if header.is_control() {
                return;
            }
            let decoded = match decode_batch(raw, 64 << 20) {
                Ok(d) => d,
                Err(e) => {
                    tracing::error!(partition = %tp, offsets = %format!("{}..={}", header.base_offset, header.last_offset()), error = %e, "skipping undecodable __transaction_state batch");
                    return;
                }
            };
            for r in decoded.records {
                let offset = r.record.offset;
                if offset < from {
                    continue;
                }
                let Some(key) = r.record.key else { continue };
                if let Err(e) = machine.replay(&key, r.record.value.as_deref()) {
                    tracing::warn!(partition = %tp, offset, error = %e, "skipping unreadable __transaction_state record");
                }
                count += 1;
            }
        });
        if let Err(e) = replayed {
            tracing::error!(partition = %tp, error = %e, "loading transactions failed");
            return Err(KafkaError::CoordinatorNotAvailable);
        }
        effects.extend(machine.complete_load(now_ms()));
        tracing::debug!(partition = %tp, records = count, epoch = machine.coordinator_epoch(), "loaded transaction coordinator partition");
        let mut shard = Shard { machine, partition };
        self.apply(&mut shard, effects);
        Ok(shard)
    }

    /// Every loaded shard in partition order, and whether a partition is
    /// being loaded.
    fn loaded(&self) -> (Vec<Arc<Mutex<Shard>>>, bool) {
        let mut slots: Vec<(i32, Slot)> = lock(&self.shards)
            .iter()
            .map(|(p, s)| (*p, Arc::clone(s)))
            .collect();
        slots.sort_by_key(|(p, _)| *p);
        let mut loading = false;
        let mut out = Vec::new();
        for (partition, slot) in slots {
            if lock(&self.loading).contains(&partition) {
                loading = true;
                continue;
            }
            // Held for a moment by a lookup, or by a load that started
            // since: wait for it.
            out.extend(lock(&slot).as_ref().map(Arc::clone));
        }
        (out, loading)
    }

    /// A fresh token and the receiver its response will arrive on.
    fn park(&self) -> (RequestToken, oneshot::Receiver<TxnResponse>) {
        let id = self.next_token.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.parked).insert(id, tx);
        (RequestToken(id), rx)
    }

    fn unpark(&self, token: RequestToken) {
        lock(&self.parked).remove(&token.0);
    }

    /// Applies a call's effects and those of the calls they lead to:
    /// records appended (one batch per call) and confirmed or failed, then
    /// responses released, then markers queued.
    pub(crate) fn apply(&self, shard: &mut Shard, effects: Effects) {
        let mut queue = VecDeque::from([effects]);
        while let Some(Effects {
            responses,
            records,
            markers,
        }) = queue.pop_front()
        {
            if !records.is_empty() {
                queue.extend(self.append(shard, &records));
            }
            self.release(responses);
            for m in markers {
                if self.markers.send((shard.machine.partition(), m)).is_err() {
                    tracing::error!("the transaction marker queue is closed");
                }
            }
        }
        self.wake.notify_one();
    }

    /// Appends `records` to the shard's partition as one batch and reports
    /// each to the machine; returns the effects of those reports.
    fn append(&self, shard: &mut Shard, records: &[PendingRecord]) -> Vec<Effects> {
        let now = now_ms();
        let mut out = Vec::new();
        let mut batch = BatchBuilder::new(Compression::None, now);
        let mut ids = Vec::with_capacity(records.len());
        for r in records {
            match shard.machine.encode(&r.record) {
                Ok(rec) => {
                    batch.push(Record::new(Some(rec.key), rec.value, now));
                    ids.push(r.id);
                }
                Err(e) => {
                    tracing::error!(id = %r.record.transactional_id, error = %e, "cannot encode a transaction record");
                    out.push(shard.machine.append_failed(
                        now,
                        r.id,
                        KafkaError::UnknownServerError,
                    ));
                }
            }
        }
        if ids.is_empty() {
            return out;
        }
        let appended = append_batch(&shard.partition, batch);
        let now = now_ms();
        for id in ids {
            out.push(match appended {
                Ok(()) => shard.machine.append_completed(now, id),
                Err(e) => shard.machine.append_failed(now, id, e),
            });
        }
        out
    }

    /// Sends responses to their parked requests.
    fn release(&self, responses: Vec<(RequestToken, TxnResponse)>) {
        if responses.is_empty() {
            return;
        }
        let mut parked = lock(&self.parked);
        for (token, response) in responses {
            if let Some(tx) = parked.remove(&token.0) {
                let _ = tx.send(response);
            }
        }
    }

    /// ListTransactions over every loaded shard: COORDINATOR_LOAD_IN_PROGRESS
    /// while one loads (as Kafka's `listTransactionStates`); unknown state
    /// names come back in `unknown_state_filters` whether or not any shard
    /// is loaded.
    pub(crate) fn list_transactions(
        &self,
        filter: &ListTransactionsFilter,
    ) -> Result<ListedTxns, KafkaError> {
        let (shards, loading) = self.loaded();
        if loading {
            return Err(KafkaError::CoordinatorLoadInProgress);
        }
        let mut out = ListedTxns {
            unknown_state_filters: filter
                .states
                .iter()
                .filter(|s| TransactionState::from_name(s).is_none())
                .cloned()
                .collect(),
            transactions: Vec::new(),
        };
        let now = now_ms();
        for s in shards {
            let listed = lock(&s).machine.list_transactions(now, filter)?;
            out.transactions.extend(listed.transactions);
        }
        Ok(out)
    }

    /// Feeds a marker report to the shard of `partition` (if it is still
    /// loaded; a reloaded shard ignores reports that do not match).
    fn report_markers(&self, partition: i32, report: &MarkerCompletion) {
        let shard = {
            let slot = self.slot(partition);
            let loaded = lock(&slot);
            loaded.as_ref().map(Arc::clone)
        };
        let Some(shard) = shard else {
            tracing::debug!(
                partition,
                "marker report for an unloaded transaction partition dropped"
            );
            return;
        };
        let mut shard = lock(&shard);
        let effects = shard.machine.markers_completed(now_ms(), report);
        self.apply(&mut shard, effects);
    }

    /// Runs the timers of every shard that is due; returns how long to
    /// sleep before the next deadline (at most a second).
    fn tick_all(&self) -> Duration {
        let (shards, _) = self.loaded();
        let now = now_ms();
        let mut next = now + 1_000;
        for s in shards {
            let mut shard = lock(&s);
            if shard.machine.next_deadline().is_some_and(|d| d <= now) {
                let effects = shard.machine.tick(now);
                self.apply(&mut shard, effects);
            }
            if let Some(d) = shard.machine.next_deadline() {
                next = next.min(d);
            }
        }
        Duration::from_millis((next - now).clamp(1, 1_000) as u64)
    }
}

/// Runs `op` on the shard of `transactional_id` and waits for its response
/// (which may come after the record it emits is appended). The operation
/// gets the broker (for producer ids, partition counts), the machine, the
/// time and the request's token.
pub(crate) async fn call(
    broker: &Arc<Broker>,
    transactional_id: String,
    create: bool,
    op: impl FnOnce(&Broker, &mut TransactionCoordinator, i64, RequestToken) -> Effects + Send + 'static,
) -> Result<TxnResponse, KafkaError> {
    let b = Arc::clone(broker);
    let rx = crate::blocking::on_pool(move || {
        let txns = &b.txns;
        let shard = txns.shard(&b, &transactional_id, create)?;
        let (token, rx) = txns.park();
        let mut shard = lock(&shard);
        let effects = op(&b, &mut shard.machine, now_ms(), token);
        txns.apply(&mut shard, effects);
        Ok::<_, KafkaError>((token, rx))
    })
    .await?;
    let (token, rx) = rx;
    rx.await.map_err(|_| {
        broker.txns.unpark(token);
        tracing::error!("a transaction request was never answered");
        KafkaError::UnknownServerError
    })
}

/// The producer ids of new transactional ids, from the broker's allocator
/// (design 010): no block to be had is COORDINATOR_LOAD_IN_PROGRESS (the
/// client retries), every id handed out UNKNOWN_SERVER_ERROR.
pub(crate) fn next_producer_id(broker: &Broker) -> Result<i64, KafkaError> {
    match broker.producer_ids.next(&broker.metadata, broker.node_id) {
        Ok(id) => Ok(id),
        Err(e @ sluice_controller::ControllerError::ProducerIdsExhausted(_)) => {
            tracing::error!(error = %e, "cannot hand out a producer id");
            Err(KafkaError::UnknownServerError)
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot allocate a producer id block");
            Err(KafkaError::CoordinatorLoadInProgress)
        }
    }
}

/// The background task: sends queued markers, each on a task of its own,
/// and runs the shards' timers. Stops when `stop` changes, after the
/// marker writes under way finish.
pub(crate) async fn run(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let Some(mut queue) = lock(&broker.txns.marker_queue).take() else {
        tracing::error!("the transaction coordinator task runs twice");
        return;
    };
    let mut writes = tokio::task::JoinSet::new();
    let mut next_tick = tokio::time::Instant::now();
    loop {
        if tokio::time::Instant::now() >= next_tick {
            let b = Arc::clone(&broker);
            let sleep = crate::blocking::on_pool(move || b.txns.tick_all()).await;
            next_tick = tokio::time::Instant::now() + sleep;
        }
        tokio::select! {
            Some((partition, markers)) = queue.recv() => {
                writes.spawn(send_markers(Arc::clone(&broker), partition, markers));
            }
            Some(done) = writes.join_next(), if !writes.is_empty() => {
                if let Err(e) = done {
                    tracing::error!(error = %e, "a transaction marker task failed");
                }
            }
            () = tokio::time::sleep_until(next_tick) => {}
            () = broker.txns.wake.notified() => next_tick = tokio::time::Instant::now(),
            _ = stop.changed() => break,
        }
    }
    while writes.join_next().await.is_some() {}
}

/// Writes one marker effect and reports the outcome per partition.
/// Partitions whose topic or leader is gone need no marker (Kafka's
/// marker channel drops them: "likely deleted already").
async fn send_markers(broker: Arc<Broker>, partition: i32, m: WriteMarkers) {
    crate::failpoint::pause("txn.before.markers").await;
    let image = broker.image();
    let mut outcomes = Vec::with_capacity(m.partitions.len());
    let mut to_write = Vec::new();
    for tp in &m.partitions {
        let led = image
            .topic(&tp.topic)
            .and_then(|t| t.partitions.get(&tp.partition))
            .is_some_and(|p| p.leader >= 0);
        if led {
            to_write.push((tp.topic.clone(), tp.partition));
        } else {
            tracing::info!(id = %m.transactional_id, partition = %tp, "no leader for a partition of the transaction; its marker is skipped");
            outcomes.push((tp.clone(), MarkerOutcome::Skip));
        }
    }
    if !to_write.is_empty() {
        let written = broker
            .write_txn_markers(MarkerWrite {
                producer_id: m.producer_id,
                producer_epoch: m.producer_epoch,
                coordinator_epoch: m.coordinator_epoch,
                commit: m.result == TxnResult::Commit,
                partitions: to_write,
            })
            .await;
        for ((topic, p), code) in written {
            let tp = TopicPartition::new(topic, p);
            let outcome = marker_outcome(&m, &tp, code);
            outcomes.push((tp, outcome));
        }
    }
    let report = MarkerCompletion {
        transactional_id: m.transactional_id,
        producer_id: m.producer_id,
        producer_epoch: m.producer_epoch,
        coordinator_epoch: m.coordinator_epoch,
        result: m.result,
        partitions: outcomes,
    };
    let b = Arc::clone(&broker);
    crate::blocking::on_pool(move || b.txns.report_markers(partition, &report)).await;
}

/// Kafka's `TransactionMarkerRequestCompletionHandler` mapping of a
/// partition's marker error (design 012).
fn marker_outcome(
    m: &WriteMarkers,
    tp: &TopicPartition,
    error: Option<ResponseError>,
) -> MarkerOutcome {
    use ResponseError as E;
    let Some(code) = error else {
        return MarkerOutcome::Written;
    };
    match code {
        E::UnknownTopicOrPartition
        | E::NotLeaderOrFollower
        | E::NotEnoughReplicas
        | E::NotEnoughReplicasAfterAppend
        | E::RequestTimedOut
        | E::KafkaStorageError => MarkerOutcome::Retry,
        E::UnsupportedForMessageFormat | E::UnsupportedVersion => MarkerOutcome::Skip,
        E::InvalidProducerEpoch | E::TransactionCoordinatorFenced => MarkerOutcome::Fenced,
        other => {
            tracing::error!(id = %m.transactional_id, partition = %tp, code = ?other,
                "unexpected error writing a transaction marker; retrying");
            MarkerOutcome::Retry
        }
    }
}

/// Appends one batch of `__transaction_state` records through the
/// partition layer with acks=all semantics (the ISR must hold
/// `min.insync.replicas`; on one node the high watermark covers the batch
/// once it is appended). Errors are mapped as Kafka's
/// `appendTransactionToLog` does.
fn append_batch(partition: &Partition, batch: BatchBuilder) -> Result<(), KafkaError> {
    let min_isr = partition.log().config().min_insync_replicas.max(1) as usize;
    if partition.isr_len() < min_isr {
        tracing::warn!(partition = %partition.topic_partition(), isr = partition.isr_len(), min_isr,
            "not enough in-sync replicas for __transaction_state");
        return Err(append_error(ResponseError::NotEnoughReplicas));
    }
    let bytes = batch.finish(0).map_err(|e| {
        tracing::error!(error = %e, "building a __transaction_state batch failed");
        KafkaError::UnknownServerError
    })?;
    partition.append_for_coordinator(bytes).map(|_| ()).map_err(|e| {
        let code = crate::handlers::errors::storage_error(&e).code;
        tracing::warn!(partition = %partition.topic_partition(), error = %e, "__transaction_state append failed");
        append_error(code)
    })
}

/// Kafka's mapping of a transaction log append error to the coordinator
/// error the request gets. Kafka passes other errors through; the ones
/// an append of well-formed records can still meet (CORRUPT_MESSAGE,
/// INVALID_RECORD) are a broker bug here, UNKNOWN_SERVER_ERROR.
fn append_error(code: ResponseError) -> KafkaError {
    use ResponseError as E;
    match code {
        E::UnknownTopicOrPartition
        | E::NotEnoughReplicas
        | E::NotEnoughReplicasAfterAppend
        | E::RequestTimedOut => KafkaError::CoordinatorNotAvailable,
        E::NotLeaderOrFollower | E::KafkaStorageError => KafkaError::NotCoordinator,
        _ => KafkaError::UnknownServerError,
    }
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
