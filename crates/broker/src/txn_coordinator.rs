//! The transaction coordinator runtime: drives the sans-IO
//! `sluice_coordinator::txn::TransactionCoordinator` with real I/O, as the
//! contract of design 012 asks (this module's own decisions: design 014).
//!
//! - One shard per `__transaction_state` partition this node leads (on one
//!   node, all of them), each in its own slot: loading one partition holds
//!   only that slot, so requests for ids of other partitions go on. A shard
//!   is loaded (replayed from the log start) when this node becomes the
//!   partition's leader ([`TxnCoordinator::follow_leadership`], at start
//!   and on every leadership change), else on first use; it holds a
//!   [`Lease`] on the partition and is unloaded when the leadership moves
//!   away (its waiting requests get NOT_COORDINATOR; the new leader loads
//!   the partition and finishes prepared transactions). The topic is
//!   created by the broker on first need (FindCoordinator with key type
//!   TRANSACTION, transactional InitProducerId) with Kafka's configs.
//! - A record is confirmed to the machine only once the partition's high
//!   watermark covers it (Kafka appends transaction records with acks=all):
//!   at once when the ISR is this node alone, else when the background
//!   task sees the followers catch up.
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
    partition_for, AppendId, Effects, ListTransactionsFilter, ListedTxns, MarkerCompletion,
    MarkerOutcome, PendingRecord, RequestToken, TopicPartition, TransactionCoordinator,
    TransactionState, TxnConfig, TxnResponse, TxnResult, WriteMarkers,
};
use sluice_coordinator::KafkaError;
use sluice_protocol::record::codec::decode_batch;
use sluice_protocol::record::{BatchBuilder, Compression, Record};
use sluice_storage::ReplayEvent;
use tokio::sync::{mpsc, oneshot, watch, Notify};

use crate::broker::Broker;
use crate::groups::{lock, now_ms};
use crate::internal_topics::TRANSACTION_STATE_TOPIC;
use crate::partition::{Lease, Partition};
use crate::txn_markers::MarkerWrite;

/// One `__transaction_state` partition's coordinator.
#[derive(Debug)]
pub(crate) struct Shard {
    pub(crate) machine: TransactionCoordinator,
    /// The `__transaction_state` partition, through the partition layer,
    /// while this node leads it in the epoch the shard was loaded in.
    lease: Lease,
}

/// A loaded shard and the lease it was loaded under.
type Loaded = (Lease, Arc<Mutex<Shard>>);

/// A shard's place (see [`crate::partition::LeasedSlot`]).
type Slot = crate::partition::LeasedSlot<Shard>;

/// Records appended but not yet covered by the high watermark: confirmed
/// to the machine (or failed) when the followers catch up.
#[derive(Debug)]
struct Unreplicated {
    partition: i32,
    lease: Lease,
    end: i64,
    ids: Vec<AppendId>,
}

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
    /// Appends waiting for their replication, for the background task.
    unreplicated: mpsc::UnboundedSender<Unreplicated>,
    unreplicated_queue: Mutex<Option<mpsc::UnboundedReceiver<Unreplicated>>>,
    /// Set when the metadata moved leaderships: the background task
    /// follows.
    leadership_moved: std::sync::atomic::AtomicBool,
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
        let (acks_tx, acks_rx) = mpsc::unbounded_channel();
        Self {
            config,
            shards: Mutex::new(HashMap::new()),
            loading: Mutex::new(HashSet::new()),
            parked: Mutex::new(HashMap::new()),
            next_token: AtomicU64::new(1),
            wake: Notify::new(),
            markers: tx,
            marker_queue: Mutex::new(Some(rx)),
            unreplicated: acks_tx,
            unreplicated_queue: Mutex::new(Some(acks_rx)),
            leadership_moved: std::sync::atomic::AtomicBool::new(false),
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
        if let Ok(mut loaded) = slot.try_lock() {
            match loaded.as_ref() {
                Some((lease, shard)) if lease.valid() => return Ok(Arc::clone(shard)),
                Some(_) => self.unload(&mut loaded),
                None => {}
            }
        }
        // Creating the topic and replaying the partition wait on the disk
        // (and on a concurrent load of the same partition, never of
        // another).
        crate::blocking::in_place(|| {
            let mut loaded = lock(&slot);
            match loaded.as_ref() {
                Some((lease, shard)) if lease.valid() => return Ok(Arc::clone(shard)),
                Some(_) => self.unload(&mut loaded),
                None => {}
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
            let lease = Lease::new(part);
            lock(&self.loading).insert(partition);
            let loaded_shard = self.load(broker, lease.clone());
            lock(&self.loading).remove(&partition);
            let shard = Arc::new(Mutex::new(loaded_shard?));
            *loaded = Some((lease, Arc::clone(&shard)));
            Ok(shard)
        })
    }

    /// Unloads a shard whose lease lapsed (Kafka's
    /// `onResignation`): requests waiting on its records get
    /// NOT_COORDINATOR; its markers in flight are reported to nobody.
    fn unload(&self, loaded: &mut Option<Loaded>) {
        let Some((lease, shard)) = loaded.take() else {
            return;
        };
        let mut shard = lock(&shard);
        let effects = shard.machine.unload();
        self.release(effects.responses);
        tracing::info!(partition = %lease.partition().topic_partition(), epoch = lease.epoch(),
            "unloaded transaction coordinator partition: this node no longer leads it");
    }

    /// The metadata moved leaderships: the background task calls
    /// [`TxnCoordinator::follow_leadership`].
    pub(crate) fn leadership_moved(&self) {
        self.leadership_moved
            .store(true, std::sync::atomic::Ordering::Release);
        self.wake.notify_one();
    }

    /// Follows the leadership of `__transaction_state`: shards of
    /// partitions this node no longer leads (or leads in a new epoch) are
    /// unloaded; partitions it leads are loaded, so prepared transactions
    /// get their markers and open ones their timeout without waiting for a
    /// request (at start, and whenever leaderships move).
    pub(crate) fn follow_leadership(&self, broker: &Broker) -> Result<(), KafkaError> {
        let slots: Vec<Slot> = lock(&self.shards).values().cloned().collect();
        for slot in slots {
            let mut loaded = lock(&slot);
            if loaded.as_ref().is_some_and(|(lease, _)| !lease.valid()) {
                self.unload(&mut loaded);
            }
        }
        let Some(topic) = broker.image().topic(TRANSACTION_STATE_TOPIC).cloned() else {
            return Ok(());
        };
        if topic.partitions.len() as i32 != self.config.num_partitions {
            tracing::debug!(
                partitions = topic.partitions.len(),
                configured = self.config.num_partitions,
                "__transaction_state exists with a partition count other than transaction.state.log.num.partitions; using the topic's"
            );
        }
        for (&p, state) in &topic.partitions {
            if state.leader == broker.node_id {
                match self.shard_at(broker, p, false) {
                    Ok(_) | Err(KafkaError::NotCoordinator) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Replays one partition into a fresh shard (design 012's load steps:
    /// begin at the partition's leader epoch, replay from the log start,
    /// complete; the markers of prepared transactions go to the queue).
    fn load(&self, broker: &Broker, lease: Lease) -> Result<Shard, KafkaError> {
        let log = Arc::clone(lease.partition().log());
        let tp = log.topic_partition().clone();
        let cfg = TxnConfig {
            num_partitions: self.partition_count(broker),
            ..self.config.clone()
        };
        let mut machine = TransactionCoordinator::new(cfg, tp.partition);
        let mut effects = machine.begin_load(lease.epoch());
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
        let mut shard = Shard { machine, lease };
        self.apply(&mut shard, effects);
        Ok(shard)
    }

    /// Every loaded shard in partition order, and whether a partition is
    /// being loaded.
    fn loaded(&self) -> (Vec<Arc<Mutex<Shard>>>, bool) {
        crate::partition::leased_states(&self.shards, &self.loading)
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
        let appended = append_batch(&shard.lease, batch);
        let now = now_ms();
        match appended {
            Ok(end) if !replicated(shard.lease.partition(), end) => {
                // Confirmed when the followers catch up (the background
                // task); until then the ids stay pending.
                let waiting = Unreplicated {
                    partition: shard.machine.partition(),
                    lease: shard.lease.clone(),
                    end,
                    ids,
                };
                if let Err(e) = self.unreplicated.send(waiting) {
                    let now = now_ms();
                    for id in e.0.ids {
                        out.push(shard.machine.append_failed(
                            now,
                            id,
                            KafkaError::CoordinatorNotAvailable,
                        ));
                    }
                }
            }
            Ok(_) => out.extend(
                ids.into_iter()
                    .map(|id| shard.machine.append_completed(now, id)),
            ),
            Err(e) => out.extend(
                ids.into_iter()
                    .map(|id| shard.machine.append_failed(now, id, e)),
            ),
        }
        out
    }

    /// The outcome of waiting for an append's replication, fed to its
    /// shard if that is still the one that appended.
    fn replication_done(&self, w: Unreplicated, outcome: Result<(), ResponseError>) {
        let shard = {
            let slot = self.slot(w.partition);
            let loaded = lock(&slot);
            loaded.as_ref().map(|(_, s)| Arc::clone(s))
        };
        let Some(shard) = shard else { return };
        let mut shard = lock(&shard);
        if !Arc::ptr_eq(shard.lease.partition(), w.lease.partition())
            || shard.lease.epoch() != w.lease.epoch()
        {
            // Unloaded since: its requests were answered NOT_COORDINATOR.
            return;
        }
        let now = now_ms();
        for id in w.ids {
            let effects = match outcome {
                Ok(()) => shard.machine.append_completed(now, id),
                Err(code) => shard.machine.append_failed(now, id, append_error(code)),
            };
            self.apply(&mut shard, effects);
        }
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
            loaded
                .as_ref()
                .filter(|(lease, _)| lease.valid())
                .map(|(_, s)| Arc::clone(s))
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
    let Some(mut unreplicated) = lock(&broker.txns.unreplicated_queue).take() else {
        tracing::error!("the transaction coordinator task runs twice");
        return;
    };
    let mut writes = tokio::task::JoinSet::new();
    let mut next_tick = tokio::time::Instant::now();
    loop {
        if broker
            .txns
            .leadership_moved
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            let b = Arc::clone(&broker);
            if let Err(e) = crate::blocking::on_pool(move || b.txns.follow_leadership(&b)).await {
                tracing::error!(error = %e, "loading transaction coordinator partitions failed");
            }
        }
        if tokio::time::Instant::now() >= next_tick {
            let b = Arc::clone(&broker);
            let sleep = crate::blocking::on_pool(move || b.txns.tick_all()).await;
            next_tick = tokio::time::Instant::now() + sleep;
        }
        tokio::select! {
            Some((partition, markers)) = queue.recv() => {
                writes.spawn(send_markers(Arc::clone(&broker), partition, markers));
            }
            Some(waiting) = unreplicated.recv() => {
                writes.spawn(await_replication(Arc::clone(&broker), waiting));
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

/// Waits until the followers have an append (at most the request
/// timeout Kafka's transaction log appends use) and confirms it to the
/// machine, or fails it as Kafka maps the error.
async fn await_replication(broker: Arc<Broker>, waiting: Unreplicated) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(REPLICATION_TIMEOUT_MS);
    let outcome = waiting
        .lease
        .partition()
        .wait_replicated(waiting.end, deadline)
        .await;
    let b = Arc::clone(&broker);
    crate::blocking::on_pool(move || b.txns.replication_done(waiting, outcome)).await;
}

/// How long a `__transaction_state` append waits for the ISR
/// (`transaction.state.log` appends in Kafka use the request timeout of
/// the inter-broker path, 30 s).
const REPLICATION_TIMEOUT_MS: u64 = 30_000;

/// Writes one marker effect and reports the outcome per partition.
/// Partitions whose topic is gone need no marker (Kafka's marker channel
/// drops them: "likely deleted already"); offline ones are retried.
async fn send_markers(broker: Arc<Broker>, partition: i32, m: WriteMarkers) {
    crate::failpoint::pause("txn.before.markers").await;
    let image = broker.image();
    let mut outcomes = Vec::with_capacity(m.partitions.len());
    let mut to_write = Vec::new();
    for tp in &m.partitions {
        let leader = image
            .topic(&tp.topic)
            .and_then(|t| t.partitions.get(&tp.partition))
            .map(|p| p.leader);
        match leader {
            Some(l) if l >= 0 => to_write.push((tp.topic.clone(), tp.partition)),
            Some(_) => {
                // Offline (its ISR is down): the marker waits for a leader.
                tracing::info!(id = %m.transactional_id, partition = %tp, "no leader for a partition of the transaction; its marker will be retried");
                outcomes.push((tp.clone(), MarkerOutcome::Retry));
            }
            None => {
                tracing::info!(id = %m.transactional_id, partition = %tp, "a partition of the transaction is gone; its marker is skipped");
                outcomes.push((tp.clone(), MarkerOutcome::Skip));
            }
        }
    }
    if !to_write.is_empty() {
        let written = broker
            .send_txn_markers(MarkerWrite {
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
fn append_batch(lease: &Lease, batch: BatchBuilder) -> Result<i64, KafkaError> {
    if !lease.valid() {
        return Err(KafkaError::NotCoordinator);
    }
    let partition = lease.partition();
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
    partition.append_for_coordinator(bytes).map(|info| info.last_offset + 1).map_err(|e| {
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
    match crate::groups::coordinator_write_error(code) {
        ResponseError::CoordinatorNotAvailable => KafkaError::CoordinatorNotAvailable,
        ResponseError::NotCoordinator => KafkaError::NotCoordinator,
        _ => KafkaError::UnknownServerError,
    }
}

/// Whether the ISR has the partition's records before `end` and holds
/// `min.insync.replicas` (Kafka's `checkEnoughReplicasReachOffset`).
fn replicated(partition: &Partition, end: i64) -> bool {
    let min_isr = partition.log().config().min_insync_replicas.max(1) as usize;
    partition.log().high_watermark() >= end && partition.isr_len() >= min_isr
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
