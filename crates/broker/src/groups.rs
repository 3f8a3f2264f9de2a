//! The group coordinator runtime: drives the sans-IO state machines of
//! `sluice-coordinator` with real I/O.
//!
//! One shard per `__consumer_offsets` partition this node leads (the
//! coordinator of a group is the leader of partition
//! `abs(hash(group)) % offsets.topic.num.partitions`; on one node this node
//! leads them all). A shard holds the group state machine and the
//! committed-offsets store, rebuilt by replaying the partition's log when
//! this node becomes its leader ([`Groups::follow_leadership`], at start and
//! on every leadership change) or when the shard is first needed. A shard
//! holds a [`Lease`] on its partition: when the leadership moves away (or
//! to a new leader epoch) the shard is unloaded, its parked requests get
//! NOT_COORDINATOR, and requests for its groups get NOT_COORDINATOR here
//! (FindCoordinator names the new leader).
//!
//! Effects are applied in the contract's order: records are appended to the
//! partition (and the store updated) before any response is released.
//! JoinGroup and SyncGroup responses that wait for a rebalance are parked
//! under a request token and released by a later call or by the timer task.
//! As Kafka writes them with acks=all, the handlers answer a write only once
//! the partition's high watermark covers it ([`Groups::wait_committed`]), so
//! an acknowledged offset commit survives the loss of the leader.
//!
//! Transactional offsets (TxnOffsetCommit) are appended as a transactional
//! batch of their producer and stay pending in the offset store; the
//! transaction's marker on the same partition is written through the shard
//! ([`Groups::complete_txn`], called by `Broker::write_txn_markers`), which
//! then commits or drops them. Loading replays markers the same way.

use std::collections::BTreeSet;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use proto_kafka::ResponseError;
use sluice_coordinator::group::{
    Effects, GroupConfig, GroupCoordinator, GroupRecord, GroupResponse, RequestToken,
};
use sluice_coordinator::group::{GroupMetadataSnapshot, GroupState};
use sluice_coordinator::offsets::ExpiryBase;
use sluice_coordinator::offsets::{
    coordinator_partition, OffsetConfig, OffsetStore, Record as OffsetsRecord, Replayed,
};
use sluice_protocol::record::codec::{decode_batch, ProducerInfo};
use sluice_protocol::record::control::EndTxnMarker;
use sluice_protocol::record::{BatchBuilder, Compression, Record};
use sluice_storage::ReplayEvent;
use tokio::sync::oneshot;

use crate::broker::{ApiError, Broker, CONSUMER_OFFSETS_TOPIC};
use crate::partition::{Lease, Partition};

/// One `__consumer_offsets` partition's coordinator state.
#[derive(Debug)]
pub(crate) struct Shard {
    pub groups: GroupCoordinator,
    pub offsets: OffsetStore,
    /// The `__consumer_offsets` partition, through the partition layer,
    /// while this node leads it in the epoch the shard was loaded in.
    lease: Lease,
}

/// A loaded shard and the lease it was loaded under.
type Loaded = (Lease, Arc<Mutex<Shard>>);

/// A shard's place (see [`crate::partition::LeasedSlot`]).
type Slot = crate::partition::LeasedSlot<Shard>;

/// Where a write must be replicated to before its response goes out: the
/// partition and its log end offset right after the write.
pub(crate) type CommitPoint = (Arc<Partition>, i64);

/// All shards, the parked responses and the timer wake-up.
#[derive(Debug)]
pub(crate) struct Groups {
    partitions: i32,
    shards: Mutex<HashMap<i32, Slot>>,
    /// The partitions being created or replayed into a fresh shard (their
    /// slot's lock is held for the whole load).
    loading: Mutex<HashSet<i32>>,
    parked: Mutex<HashMap<u64, oneshot::Sender<GroupResponse>>>,
    next_token: AtomicU64,
    /// Wakes the timer task when a deadline may have moved earlier.
    pub(crate) wake: tokio::sync::Notify,
    config: GroupConfig,
    offset_config: OffsetConfig,
    /// `offsets.retention.check.interval.ms`.
    pub(crate) retention_check_interval_ms: i64,
    /// `offsets.commit.timeout.ms`: how long a write waits for the ISR.
    commit_timeout: Duration,
    /// Set when the metadata moved leaderships: the timer task follows.
    leadership_moved: AtomicBool,
}

/// See `GroupConfig::min_sync_delay_ms`.
const MIN_SYNC_DELAY_MS: i32 = 100;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Groups {
    pub(crate) fn new(settings: &crate::config::Settings, node_id: i32) -> Self {
        let gc = GroupConfig {
            min_session_timeout_ms: settings.group_min_session_timeout_ms,
            max_session_timeout_ms: settings.group_max_session_timeout_ms,
            initial_rebalance_delay_ms: settings.group_initial_rebalance_delay_ms,
            max_size: settings.group_max_size.max(1) as usize,
            member_id_seed: (now_ms() as u64) ^ (u64::from(node_id as u32) << 32),
            // Kafka's timing wheel fires a zero-delay timer within its
            // reaper's 200 ms tick; take the middle of that, so a member
            // answering its JoinGroup promptly is not expired.
            min_sync_delay_ms: MIN_SYNC_DELAY_MS,
            ..GroupConfig::default()
        };
        let offset_config =
            OffsetConfig::with_retention_minutes(settings.offsets_retention_minutes);
        Self {
            partitions: settings.offsets_topic_num_partitions.max(1),
            shards: Mutex::new(HashMap::new()),
            loading: Mutex::new(HashSet::new()),
            parked: Mutex::new(HashMap::new()),
            next_token: AtomicU64::new(1),
            wake: tokio::sync::Notify::new(),
            config: gc,
            offset_config,
            retention_check_interval_ms: settings.offsets_retention_check_interval_ms.max(1),
            commit_timeout: Duration::from_millis(settings.offsets_commit_timeout_ms.max(1) as u64),
            leadership_moved: AtomicBool::new(false),
        }
    }

    /// The number of `__consumer_offsets` partitions: the existing topic's
    /// (a later change of `offsets.topic.num.partitions` must not move
    /// groups to other partitions, as in Kafka's
    /// `GroupCoordinator.partitionFor`), else the configured count the
    /// topic will be created with.
    pub(crate) fn partition_count(&self, broker: &Broker) -> i32 {
        broker
            .image()
            .topic(CONSUMER_OFFSETS_TOPIC)
            .map_or(self.partitions, |t| t.partitions.len() as i32)
            .max(1)
    }

    /// The `__consumer_offsets` partition coordinating `group`.
    pub(crate) fn partition_for(&self, broker: &Broker, group: &str) -> i32 {
        coordinator_partition(group, self.partition_count(broker))
    }

    /// The shard of `group`, creating `__consumer_offsets` and loading the
    /// partition as needed.
    pub(crate) fn shard(
        &self,
        broker: &Broker,
        group: &str,
    ) -> Result<Arc<Mutex<Shard>>, ApiError> {
        self.shard_at(broker, self.partition_for(broker, group))
    }

    fn shard_at(&self, broker: &Broker, partition: i32) -> Result<Arc<Mutex<Shard>>, ApiError> {
        let slot = Arc::clone(lock(&self.shards).entry(partition).or_default());
        if let Ok(mut loaded) = slot.try_lock() {
            match loaded.as_ref() {
                Some((lease, shard)) if lease.valid() => return Ok(Arc::clone(shard)),
                Some(_) => self.unload(&mut loaded),
                None => {}
            }
        }
        // Creating the topic and replaying the partition wait on the disk
        // (and on a concurrent load of the same partition).
        crate::blocking::in_place(|| {
            let mut loaded = lock(&slot);
            match loaded.as_ref() {
                Some((lease, shard)) if lease.valid() => return Ok(Arc::clone(shard)),
                Some(_) => self.unload(&mut loaded),
                None => {}
            }
            // Creating the topic (through the quorum) and the replay may
            // take a while: listed as loading meanwhile, so the loaded
            // shards do not wait for this slot.
            lock(&self.loading).insert(partition);
            let created = self.create_and_load(broker, partition);
            lock(&self.loading).remove(&partition);
            let (lease, shard) = created?;
            let shard = Arc::new(Mutex::new(shard));
            *loaded = Some((lease, Arc::clone(&shard)));
            Ok(shard)
        })
    }

    /// Creates `__consumer_offsets` if needed and replays `partition`
    /// into a fresh shard, under the lease it is led in.
    fn create_and_load(&self, broker: &Broker, partition: i32) -> Result<(Lease, Shard), ApiError> {
        broker.ensure_offsets_topic(self.partitions)?;
        let Some(part) = broker.partition(CONSUMER_OFFSETS_TOPIC, partition) else {
            return Err(ApiError::new(
                ResponseError::NotCoordinator,
                format!("This node does not lead {CONSUMER_OFFSETS_TOPIC}-{partition}."),
            ));
        };
        let lease = Lease::new(part);
        let shard = self.load(lease.clone())?;
        Ok((lease, shard))
    }

    /// Unloads a shard whose lease lapsed (Kafka's `onResignation`): its
    /// parked JoinGroup and SyncGroup requests get NOT_COORDINATOR.
    fn unload(&self, loaded: &mut Option<Loaded>) {
        let Some((lease, shard)) = loaded.take() else {
            return;
        };
        let mut shard = lock(&shard);
        let effects = shard.groups.unload(now_ms());
        self.release(effects.responses);
        tracing::info!(partition = %lease.partition().topic_partition(), epoch = lease.epoch(),
            "unloaded group coordinator partition: this node no longer leads it");
    }

    /// Every loaded shard whose lease holds, in partition order, and
    /// whether a partition is being loaded.
    fn loaded(&self) -> (Vec<Arc<Mutex<Shard>>>, bool) {
        crate::partition::leased_states(&self.shards, &self.loading)
    }

    /// Follows the leadership of `__consumer_offsets`: shards of partitions
    /// this node no longer leads (or leads in a new epoch) are unloaded,
    /// and partitions it leads are loaded (at start, and whenever the
    /// metadata moves leaderships; Kafka's `onElection`/`onResignation`).
    pub(crate) fn follow_leadership(&self, broker: &Broker) -> Result<(), ApiError> {
        let slots: Vec<Slot> = lock(&self.shards).values().cloned().collect();
        for slot in slots {
            let mut loaded = lock(&slot);
            if loaded.as_ref().is_some_and(|(lease, _)| !lease.valid()) {
                self.unload(&mut loaded);
            }
        }
        let Some(topic) = broker.image().topic(CONSUMER_OFFSETS_TOPIC).cloned() else {
            return Ok(());
        };
        if topic.partitions.len() as i32 != self.partitions {
            tracing::debug!(
                partitions = topic.partitions.len(),
                configured = self.partitions,
                "__consumer_offsets exists with a partition count other than offsets.topic.num.partitions; using the topic's"
            );
        }
        for (&p, state) in &topic.partitions {
            if state.leader == broker.node_id {
                match self.shard_at(broker, p) {
                    Ok(_) => {}
                    // Moved away again since the image was read.
                    Err(e) if e.code == ResponseError::NotCoordinator => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// The metadata moved leaderships: the timer task calls
    /// [`Groups::follow_leadership`] (off the caller, which may hold the
    /// metadata change lock).
    pub(crate) fn leadership_moved(&self) {
        self.leadership_moved.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Replays one partition into a fresh shard.
    fn load(&self, lease: Lease) -> Result<Shard, ApiError> {
        let partition = Arc::clone(lease.partition());
        let log = Arc::clone(partition.log());
        let mut groups = GroupCoordinator::new(self.config.clone());
        let mut offsets = OffsetStore::new(self.offset_config);
        groups.begin_load();
        let mut count = 0usize;
        let tp = log.topic_partition().clone();
        let from = log.log_start_offset();
        let replayed = log.replay(from, |event| {
            // Damage is logged by the replay.
            let ReplayEvent::Batch { header, raw } = event else {
                return;
            };
            let decoded = match decode_batch(raw, 64 << 20) {
                Ok(d) => d,
                Err(e) => {
                    tracing::error!(partition = %tp, offsets = %format!("{}..={}", header.base_offset, header.last_offset()), error = %e, "skipping undecodable __consumer_offsets batch");
                    return;
                }
            };
            if header.is_control() {
                // A transaction marker commits or drops its producer's
                // pending offsets (Kafka's replayEndTransactionMarker).
                let Some(first) = decoded.records.first() else {
                    return;
                };
                match EndTxnMarker::parse(first.record.key.as_deref(), first.record.value.as_deref()) {
                    Ok(m) => {
                        offsets.replay_end_txn(header.producer_id, m.commit);
                    }
                    Err(e) => {
                        tracing::warn!(partition = %tp, offset = header.base_offset, error = %e, "skipping unreadable control record")
                    }
                }
                return;
            }
            // Offsets of a transactional batch stay pending until its
            // producer's marker.
            let producer_id = if header.is_transactional() {
                header.producer_id
            } else {
                -1
            };
            for r in decoded.records {
                let offset = r.record.offset;
                if offset < from {
                    continue;
                }
                let Some(key) = r.record.key else { continue };
                match offsets.replay_at(offset, producer_id, &key, r.record.value.as_deref()) {
                    Ok(Replayed::GroupMetadata { group, value }) => {
                        groups.replay(&GroupRecord::from_replayed(group, value));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(partition = %tp, offset, error = %e, "skipping unreadable __consumer_offsets record")
                    }
                }
                count += 1;
            }
        });
        replayed.map_err(|e| crate::handlers::errors::storage_error(&e))?;
        // Groups with committed offsets but no metadata record (consumers
        // that only assign()) exist as Empty groups, as Kafka loads them.
        let load_time = now_ms();
        for group in offsets.groups() {
            groups.ensure_simple_group(load_time, group);
        }
        let mut shard = Shard {
            groups,
            offsets,
            lease,
        };
        let effects = shard.groups.complete_load(now_ms());
        tracing::debug!(partition = %partition.topic_partition(), epoch = shard.lease.epoch(), records = count, "loaded group coordinator partition");
        self.apply(&mut shard, effects)?;
        Ok(shard)
    }

    /// A fresh token and the receiver its response will arrive on.
    pub(crate) fn park(&self) -> (RequestToken, oneshot::Receiver<GroupResponse>) {
        let id = self.next_token.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.parked).insert(id, tx);
        (RequestToken(id), rx)
    }

    /// Runs a request whose response may wait for a rebalance (JoinGroup,
    /// SyncGroup): parks a token, lets `call` hand it to the group's state
    /// machine, applies the effects, and awaits the response without
    /// holding the shard lock.
    pub(crate) async fn call_delayed(
        &self,
        broker: &Broker,
        group: &str,
        call: impl FnOnce(&mut GroupCoordinator, RequestToken) -> Effects,
    ) -> Result<GroupResponse, ApiError> {
        let shard = self.shard(broker, group)?;
        let (token, rx) = self.park();
        let point = {
            let mut shard = lock(&shard);
            let effects = call(&mut shard.groups, token);
            if let Err(e) = self.apply(&mut shard, effects) {
                self.unpark(token);
                return Err(e);
            }
            shard.commit_point()
        };
        let response = rx
            .await
            .map_err(|_| ApiError::code(ResponseError::UnknownServerError))?;
        // The group's records (a new generation, its assignment) are
        // replicated before the member hears of them.
        self.wait_committed(point).await.map_err(ApiError::code)?;
        Ok(response)
    }

    /// An offset commit's answer: once the ISR has its records (Kafka
    /// appends them with acks=all); a write that does not get there fails
    /// every partition it would have committed (the `codes` still 0).
    pub(crate) async fn answer_when_committed<'a>(
        &self,
        point: Option<CommitPoint>,
        codes: impl Iterator<Item = &'a mut i16>,
    ) {
        let Some(point) = point else { return };
        if let Err(code) = self.wait_committed(point).await {
            codes.filter(|c| **c == 0).for_each(|c| *c = code.code());
        }
    }

    /// Waits until the ISR has everything the shard wrote up to `point`
    /// (Kafka appends coordinator records with acks=all and answers once
    /// they are committed), for at most `offsets.commit.timeout.ms`. Errors
    /// are mapped as Kafka's coordinator runtime does: a lost leadership is
    /// NOT_COORDINATOR, too few replicas or a timeout
    /// COORDINATOR_NOT_AVAILABLE.
    pub(crate) async fn wait_committed(&self, point: CommitPoint) -> Result<(), ResponseError> {
        let (partition, offset) = point;
        let deadline = tokio::time::Instant::now() + self.commit_timeout;
        partition
            .wait_replicated(offset, deadline)
            .await
            .map_err(coordinator_write_error)
    }

    /// Drops a parked token whose request was never handed to the machine.
    pub(crate) fn unpark(&self, token: RequestToken) {
        lock(&self.parked).remove(&token.0);
    }

    /// Appends the effects' records, then releases their responses. On an
    /// append failure the shard is reloaded from the log (the state machine
    /// already moved on) and waiting requests get an error.
    pub(crate) fn apply(&self, shard: &mut Shard, effects: Effects) -> Result<(), ApiError> {
        let Effects { responses, records } = effects;
        let records: Result<Vec<OffsetsRecord>, _> =
            records.iter().map(|r| r.to_record()).collect();
        let appended = records
            .map_err(internal)
            .and_then(|records| append(&shard.lease, &records));
        if let Err(e) = appended {
            tracing::warn!(error = ?e, "appending group records failed; reloading the partition");
            let unloaded = shard.groups.unload(now_ms());
            // Requests parked in the old state get NOT_COORDINATOR instead
            // of waiting forever; so do those of these effects.
            self.release(unloaded.responses);
            self.release(
                responses
                    .into_iter()
                    .map(|(t, r)| (t, not_coordinator(r)))
                    .collect(),
            );
            if shard.lease.valid() {
                *shard = self.load(shard.lease.clone())?;
            }
            return Err(e);
        }
        self.wake.notify_one();
        self.release(responses);
        Ok(())
    }

    /// Sends responses to their parked requests.
    fn release(&self, responses: Vec<(RequestToken, GroupResponse)>) {
        let mut parked = lock(&self.parked);
        for (token, response) in responses {
            if let Some(tx) = parked.remove(&token.0) {
                let _ = tx.send(response);
            }
        }
    }

    /// Every loaded shard (ListGroups), in partition order, and whether
    /// a partition is being loaded.
    pub(crate) fn loaded_shards(&self) -> (Vec<Arc<Mutex<Shard>>>, bool) {
        self.loaded()
    }

    /// Appends offset records, then applies them to the store.
    pub(crate) fn commit_records(
        &self,
        shard: &mut Shard,
        records: &[OffsetsRecord],
    ) -> Result<(), ApiError> {
        let Some(base) = append_batch(&shard.lease, records, None)? else {
            return Ok(());
        };
        shard.offsets.apply_at(base, -1, records).map_err(internal)
    }

    /// Appends TxnOffsetCommit records as one transactional batch of the
    /// producer (the partition's producer state checks its epoch); the
    /// offsets stay pending until the producer's marker.
    pub(crate) fn commit_txn_records(
        &self,
        shard: &mut Shard,
        producer_id: i64,
        producer_epoch: i16,
        records: &[OffsetsRecord],
    ) -> Result<(), ApiError> {
        let Some(base) = append_batch(&shard.lease, records, Some((producer_id, producer_epoch)))?
        else {
            return Ok(());
        };
        shard
            .offsets
            .apply_at(base, producer_id, records)
            .map_err(internal)
    }

    /// Writes a transaction marker to `__consumer_offsets` partition
    /// `partition` through its shard (Kafka's `completeTransaction` in the
    /// coordinator runtime): the marker is appended, then the producer's
    /// pending offsets there are committed or dropped.
    pub(crate) fn complete_txn(
        &self,
        broker: &Broker,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        marker: EndTxnMarker,
    ) -> Result<(), ApiError> {
        let shard = self.shard_at(broker, partition)?;
        let mut shard = lock(&shard);
        if shard.groups.is_loading() {
            return Err(ApiError::code(ResponseError::CoordinatorLoadInProgress));
        }
        if !shard.lease.valid() {
            return Err(ApiError::code(ResponseError::NotCoordinator));
        }
        shard
            .lease
            .partition()
            .append_marker(producer_id, producer_epoch, marker)
            .map_err(|e| crate::handlers::errors::storage_error(&e))?;
        let n = shard.offsets.replay_end_txn(producer_id, marker.commit);
        tracing::debug!(
            partition,
            producer_id,
            commit = marker.commit,
            offsets = n,
            "transaction completed on __consumer_offsets"
        );
        Ok(())
    }

    /// Offset expiry over every loaded shard (Kafka's
    /// `cleanupGroupMetadata`, run every
    /// `offsets.retention.check.interval.ms`); returns how many offsets
    /// expired.
    pub(crate) fn expire_offsets(&self, now: i64) -> usize {
        let (shards, _) = self.loaded();
        let mut expired = 0;
        for s in shards {
            let mut shard = lock(&s);
            match self.expire_shard(&mut shard, now) {
                Ok(n) => expired += n,
                Err(e) => tracing::error!(error = ?e, "offset expiry failed"),
            }
        }
        if expired > 0 {
            tracing::info!(expired, "removed expired committed offsets");
        }
        expired
    }

    /// Expires the offsets of one shard's groups as Kafka's
    /// `ClassicGroup.offsetExpirationCondition`: an Empty group's offsets
    /// `offsets.retention.minutes` after it became empty; a group without
    /// protocol type (assign() users) and a Stable consumer group (topics
    /// it does not subscribe to) after the last commit; other groups not
    /// at all. Tombstones are appended before the store forgets the
    /// offsets; an Empty group left without offsets is deleted.
    pub(crate) fn expire_shard(&self, shard: &mut Shard, now: i64) -> Result<usize, ApiError> {
        if shard.groups.is_loading() {
            return Ok(0);
        }
        let mut ids: BTreeSet<String> = shard.offsets.groups().map(str::to_owned).collect();
        if let Ok(listed) = shard.groups.list_groups(&[]) {
            ids.extend(listed.into_iter().map(|g| g.group_id));
        }
        let mut expired = 0;
        for id in ids {
            let snapshot = shard.groups.snapshot(&id);
            let state = shard.groups.group_state(&id);
            let subscribed = snapshot.as_ref().and_then(subscribed_topics);
            let base = match (&snapshot, state) {
                (None, _) => Some(ExpiryBase::LastCommit),
                (Some(s), _) if s.protocol_type.is_empty() => Some(ExpiryBase::LastCommit),
                (Some(s), Some(GroupState::Empty)) => Some(ExpiryBase::EmptySince(
                    (s.current_state_timestamp >= 0).then_some(s.current_state_timestamp),
                )),
                (Some(s), Some(GroupState::Stable))
                    if s.protocol_type == "consumer" && subscribed.is_some() =>
                {
                    Some(ExpiryBase::LastCommit)
                }
                _ => None,
            };
            let out = shard
                .offsets
                .expire(&id, now, base, |t| {
                    subscribed.as_ref().is_some_and(|s| s.contains(t))
                })
                .map_err(internal)?;
            expired += out.records.len();
            self.commit_records(shard, &out.records)?;
            if out.all_expired && state == Some(GroupState::Empty) {
                tracing::debug!(group = %id, "deleting empty group without offsets");
                let (_, fx) = shard.groups.delete_groups(now, std::slice::from_ref(&id));
                self.apply(shard, fx)?;
            }
        }
        Ok(expired)
    }

    /// Runs the timers of every shard that is due; returns how long to
    /// sleep before the next deadline.
    ///
    /// Deadlines are whole milliseconds and one fires once its millisecond
    /// is over: the machines are ticked with the clock one millisecond
    /// behind. With their rule that a join or sync timer never fires in the
    /// millisecond it was armed, a zero rebalance timeout leaves a member at
    /// least a full millisecond after its JoinGroup response to send
    /// SyncGroup, whatever else wakes this task.
    fn tick_all(&self) -> Duration {
        let (shards, _) = self.loaded();
        let now = now_ms() - 1;
        let mut next = now + 1_000;
        for s in shards {
            let mut shard = lock(&s);
            if shard.groups.next_deadline().is_some_and(|d| d <= now) {
                let effects = shard.groups.tick(now);
                if let Err(e) = self.apply(&mut shard, effects) {
                    tracing::error!(error = ?e, "group timer effects failed");
                }
            }
            if let Some(d) = shard.groups.next_deadline() {
                next = next.min(d);
            }
        }
        Duration::from_millis((next - now).clamp(1, 1_000) as u64)
    }
}

/// The timer task: sleeps until the earliest group deadline (at most 1 s),
/// or until woken because a call may have moved it.
pub(crate) async fn run_timers(broker: Arc<Broker>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let expiry_interval =
        Duration::from_millis(broker.groups.retention_check_interval_ms.max(1) as u64);
    let mut next_expiry = tokio::time::Instant::now() + expiry_interval;
    loop {
        if broker.groups.leadership_moved.swap(false, Ordering::AcqRel) {
            let b = Arc::clone(&broker);
            match tokio::task::spawn_blocking(move || b.groups.follow_leadership(&b)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::error!(error = ?e, "loading group coordinator partitions failed");
                }
                Err(e) => tracing::error!(error = %e, "group leadership task failed"),
            }
        }
        if tokio::time::Instant::now() >= next_expiry {
            let b = Arc::clone(&broker);
            if let Err(e) =
                tokio::task::spawn_blocking(move || b.groups.expire_offsets(now_ms())).await
            {
                tracing::error!(error = %e, "offset expiry task failed");
            }
            next_expiry = tokio::time::Instant::now() + expiry_interval;
        }
        let b = Arc::clone(&broker);
        let sleep = match tokio::task::spawn_blocking(move || b.groups.tick_all()).await {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(error = %e, "group timer task failed");
                Duration::from_secs(1)
            }
        };
        tokio::select! {
            () = tokio::time::sleep(sleep) => {}
            () = broker.groups.wake.notified() => {}
            _ = stop.changed() => return,
        }
    }
}

/// Appends `records` to a `__consumer_offsets` partition as one batch,
/// through the partition layer (leader epoch, high watermark, wake-ups).
fn append(lease: &Lease, records: &[OffsetsRecord]) -> Result<(), ApiError> {
    append_batch(lease, records, None).map(|_| ())
}

/// [`append`], with a producer: as its transactional batch (base sequence 0, as
/// Kafka's coordinator runtime writes them). Returns the first record's
/// offset (`None` when there was nothing to append).
fn append_batch(
    lease: &Lease,
    records: &[OffsetsRecord],
    producer: Option<(i64, i16)>,
) -> Result<Option<i64>, ApiError> {
    if records.is_empty() {
        return Ok(None);
    }
    if !lease.valid() {
        return Err(ApiError::code(ResponseError::NotCoordinator));
    }
    let partition = lease.partition();
    let now = now_ms();
    let mut b = BatchBuilder::new(Compression::None, now);
    if let Some((producer_id, producer_epoch)) = producer {
        b = b.producer(
            ProducerInfo {
                producer_id,
                producer_epoch,
                base_sequence: 0,
            },
            true,
        );
    }
    for r in records {
        b.push(Record::new(Some(r.key.clone()), r.value.clone(), now));
    }
    let bytes = b.build(0).map_err(internal)?;
    let info = partition
        .append_for_coordinator(bytes)
        .map_err(|e| crate::handlers::errors::storage_error(&e))?;
    Ok(Some(info.base_offset))
}

/// Kafka's mapping of a failed coordinator write (the coordinator
/// runtime's `normalizeException`, the transaction log's
/// `appendTransactionToLog`): UNKNOWN_TOPIC_OR_PARTITION, too few replicas
/// and timeouts are COORDINATOR_NOT_AVAILABLE; a lost leadership or a
/// storage error NOT_COORDINATOR; anything else passes through.
pub(crate) fn coordinator_write_error(code: ResponseError) -> ResponseError {
    use ResponseError as E;
    match code {
        E::UnknownTopicOrPartition
        | E::NotEnoughReplicas
        | E::NotEnoughReplicasAfterAppend
        | E::RequestTimedOut => E::CoordinatorNotAvailable,
        E::NotLeaderOrFollower | E::KafkaStorageError => E::NotCoordinator,
        other => other,
    }
}

impl Shard {
    /// Where this shard's writes so far must be replicated to.
    pub(crate) fn commit_point(&self) -> CommitPoint {
        let partition = Arc::clone(self.lease.partition());
        let end = partition.log().log_end_offset();
        (partition, end)
    }
}

/// The same kind of response, answering NOT_COORDINATOR.
fn not_coordinator(r: GroupResponse) -> GroupResponse {
    use sluice_coordinator::group::{GroupError, JoinGroupResponse, SyncGroupResponse};
    match r {
        GroupResponse::Join(j) => GroupResponse::Join(JoinGroupResponse {
            error: Some(GroupError::NotCoordinator),
            generation_id: -1,
            member_id: j.member_id,
            ..Default::default()
        }),
        GroupResponse::Sync(_) => GroupResponse::Sync(SyncGroupResponse {
            error: Some(GroupError::NotCoordinator),
            ..Default::default()
        }),
    }
}

/// The topics a consumer group subscribes to, as Kafka's
/// `ClassicGroup.computeSubscribedTopics`: `None` unless the protocol type
/// is "consumer" and every member's subscription parses; empty for a group
/// without members.
pub(crate) fn subscribed_topics(s: &GroupMetadataSnapshot) -> Option<BTreeSet<String>> {
    if s.protocol_type != "consumer" {
        return None;
    }
    if s.members.is_empty() {
        return Some(BTreeSet::new());
    }
    s.protocol.as_ref()?;
    let mut topics = BTreeSet::new();
    for m in &s.members {
        topics.extend(subscription_topics(&m.subscription)?);
    }
    Some(topics)
}

/// The topics of a `ConsumerProtocolSubscription` (any version: a version
/// header, then the topic array comes first in all of them).
fn subscription_topics(b: &[u8]) -> Option<Vec<String>> {
    let mut rest = b.get(2..)?;
    let count = i32::from_be_bytes(rest.get(..4)?.try_into().ok()?);
    rest = rest.get(4..)?;
    let mut topics = Vec::new();
    for _ in 0..count.max(0) {
        let len = usize::try_from(i16::from_be_bytes(rest.get(..2)?.try_into().ok()?)).ok()?;
        let name = std::str::from_utf8(rest.get(2..2 + len)?).ok()?;
        topics.push(name.to_owned());
        rest = rest.get(2 + len..)?;
    }
    Some(topics)
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "group coordinator internal error");
    ApiError::new(ResponseError::UnknownServerError, e.to_string())
}

#[cfg(test)]
mod load_tests;

#[cfg(test)]
mod failover_tests;
