//! The partition layer: the one owner of each partition's leader state
//! (Kafka's `Partition` and the leader half of `ReplicaManager`).
//!
//! A [`Partition`] holds the partition's log, its leader epoch and
//! in-sync replicas (from the metadata image), advances its high watermark
//! and wakes the fetches parked on it. Every append to a partition this
//! node leads goes through [`Partition::append`] (Produce) or
//! [`Partition::append_for_coordinator`] (the group coordinator runtime), so
//! the leader epoch stamped into batches, the high watermark and the fetch
//! wake-ups are decided here and nowhere else.
//!
//! Replication attaches here (design 019): the partition keeps the
//! leader's view of its followers ([`LeaderState`], the rules of
//! `crate::replication::leader`). Follower fetches report their log end
//! ([`Partition::on_follower_fetch`]); the high watermark is the smallest
//! log end offset over the maximal ISR, so with the leader alone in the ISR
//! it follows the log end at once. acks=all waiters wait on `hw_moved`
//! until the high watermark covers their batch
//! ([`Partition::wait_replicated`]); ISR changes are proposed by
//! [`Partition::propose_isr_change`] and committed through the metadata
//! quorum, and come back with the image ([`Partitions::sync`]).
//!
//! The metadata log (`__cluster_metadata-0`) is not a partition here: it is
//! the controller's log, replicated by Raft rather than by ISR (design 011).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use proto_kafka::ResponseError;
use sluice_controller::{MetadataImage, PartitionImage};
use sluice_storage::{AppendInfo, AppendOrigin, Log, StorageError, TopicPartition};
use tokio::sync::Notify;

use crate::broker::ApiError;
use crate::replication::leader::{IsrProposal, LeaderState};

/// What a client's Produce asks of the append (`acks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acks {
    /// 0 or 1: done once the leader appended.
    Leader,
    /// -1: done once the high watermark covers the batch.
    All,
}

/// Why an append failed: a Kafka error, or what storage said (the handler
/// maps storage errors, which may carry per-record errors).
#[derive(Debug)]
pub(crate) enum AppendError {
    Api(ApiError),
    Storage(StorageError),
}

/// One partition this node leads.
#[derive(Debug)]
pub(crate) struct Partition {
    tp: TopicPartition,
    log: Arc<Log>,
    leader_epoch: AtomicI32,
    /// The leader's view of its followers, the ISR (committed and in
    /// flight) and the high watermark it allows.
    replication: Mutex<LeaderState>,
    /// `replica.lag.time.max.ms`.
    lag_time_max_ms: u64,
    node_id: i32,
    /// Fetches parked on this partition (one `Notify` per parked fetch,
    /// which may wait on many partitions).
    waiters: Mutex<Vec<Weak<Notify>>>,
    /// Woken when the high watermark moves (acks=all waiters), or when
    /// this node stops leading the partition.
    hw_moved: Notify,
    /// Whether this node still leads the partition: cleared when the
    /// metadata moves the leadership away (a coordinator holding a
    /// [`Lease`] on it must stop writing).
    led: AtomicBool,
}

/// A coordinator's hold on a partition it loaded its state from: valid
/// while this node leads the partition in the leader epoch it loaded in.
/// A coordinator whose lease lapsed unloads (Kafka's `onResignation`) and
/// answers NOT_COORDINATOR; a new lease means loading again.
#[derive(Debug, Clone)]
pub(crate) struct Lease {
    partition: Arc<Partition>,
    epoch: i32,
}

impl Lease {
    pub(crate) fn new(partition: Arc<Partition>) -> Self {
        let epoch = partition.leader_epoch();
        Self { partition, epoch }
    }

    pub(crate) fn partition(&self) -> &Arc<Partition> {
        &self.partition
    }

    /// The leader epoch the state was loaded in (the transaction
    /// coordinator's epoch).
    pub(crate) fn epoch(&self) -> i32 {
        self.epoch
    }

    /// Whether this node still leads the partition in the same epoch.
    pub(crate) fn valid(&self) -> bool {
        self.partition.led.load(Ordering::Acquire) && self.partition.leader_epoch() == self.epoch
    }
}

/// A coordinator's place for one partition's state: empty until loaded,
/// then the state and the lease it was loaded under. Loading holds only
/// this slot's lock, so loading one partition never blocks the others.
pub(crate) type LeasedSlot<S> = Arc<Mutex<Option<(Lease, Arc<Mutex<S>>)>>>;

/// The states of a coordinator's `slots` whose lease holds, in partition
/// order, and whether a partition in `loading` is being loaded (left out:
/// it has no state yet). A slot held for a moment (a lookup, a leadership
/// check) is waited for, not skipped: skipping it left a partition's
/// groups out of ListGroups now and then.
pub(crate) fn leased_states<S>(
    slots: &Mutex<HashMap<i32, LeasedSlot<S>>>,
    loading: &Mutex<HashSet<i32>>,
) -> (Vec<Arc<Mutex<S>>>, bool) {
    let mut slots: Vec<(i32, LeasedSlot<S>)> = lock(slots)
        .iter()
        .map(|(p, s)| (*p, Arc::clone(s)))
        .collect();
    slots.sort_by_key(|(p, _)| *p);
    let mut any_loading = false;
    let mut out = Vec::new();
    for (partition, slot) in slots {
        let held = match slot.try_lock() {
            Ok(held) => held,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                if lock(loading).contains(&partition) {
                    any_loading = true;
                    continue;
                }
                // Held for a moment, or by a load that started since:
                // wait for it.
                lock(&slot)
            }
        };
        out.extend(
            held.as_ref()
                .filter(|(lease, _)| lease.valid())
                .map(|(_, s)| Arc::clone(s)),
        );
    }
    (out, any_loading)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Wall-clock milliseconds (follower lag is measured in them).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Partition {
    fn new(
        tp: TopicPartition,
        log: Arc<Log>,
        state: &PartitionImage,
        node_id: i32,
        lag_time_max_ms: u64,
    ) -> Self {
        let replication = Mutex::new(Self::leader_state(&log, state, node_id, lag_time_max_ms));
        let p = Self {
            tp,
            log,
            leader_epoch: AtomicI32::new(state.leader_epoch),
            replication,
            lag_time_max_ms,
            node_id,
            waiters: Mutex::new(Vec::new()),
            hw_moved: Notify::new(),
            led: AtomicBool::new(true),
        };
        p.maybe_advance_high_watermark();
        p
    }

    pub(crate) fn topic_partition(&self) -> &TopicPartition {
        &self.tp
    }

    pub(crate) fn log(&self) -> &Arc<Log> {
        &self.log
    }

    /// The leader epoch stamped into appended batches.
    pub(crate) fn leader_epoch(&self) -> i32 {
        self.leader_epoch.load(Ordering::Acquire)
    }

    /// The leader state on becoming leader of `state`'s epoch: followers
    /// in the ISR get a full lag time to show up.
    fn leader_state(
        log: &Log,
        state: &PartitionImage,
        node_id: i32,
        lag_time_max_ms: u64,
    ) -> LeaderState {
        LeaderState::new(
            node_id,
            &state.replicas,
            &state.isr,
            state.leader_epoch,
            state.partition_epoch,
            log.log_end_offset(),
            log.high_watermark(),
            lag_time_max_ms,
            now_ms(),
        )
    }

    /// Follows a change of the metadata image: a new leader epoch starts a
    /// new leader state; a new partition epoch of the same leader epoch is
    /// the controller's answer to an ISR change (ours or not).
    fn update(&self, state: &PartitionImage) {
        {
            let mut r = lock(&self.replication);
            if r.leader_epoch() != state.leader_epoch {
                *r = Self::leader_state(&self.log, state, self.node_id, self.lag_time_max_ms);
            } else if r.partition_epoch() != state.partition_epoch {
                r.set_replicas(&state.replicas);
                let isr = state.isr.iter().copied().collect();
                r.on_isr_committed(
                    Some((isr, state.partition_epoch)),
                    self.log.log_end_offset(),
                );
            }
        }
        self.leader_epoch
            .store(state.leader_epoch, Ordering::Release);
        self.maybe_advance_high_watermark();
    }

    /// How many replicas the controller has in sync (acks=all appends need
    /// `min.insync.replicas` of them).
    pub(crate) fn isr_len(&self) -> usize {
        lock(&self.replication).isr().len()
    }

    /// A follower fetched from `fetch_offset` (its log end): the leader
    /// notes it, and the high watermark may move.
    pub(crate) fn on_follower_fetch(&self, follower: i32, fetch_offset: i64) {
        let leo = self.log.log_end_offset();
        let moved =
            lock(&self.replication).on_follower_fetch(follower, fetch_offset, leo, now_ms());
        if moved {
            self.maybe_advance_high_watermark();
        }
    }

    /// The ISR change to send to the controller now, if any (followers
    /// lagging past `replica.lag.time.max.ms` leave, caught-up ones join).
    pub(crate) fn propose_isr_change(&self) -> Option<IsrProposal> {
        lock(&self.replication).propose_isr_change(now_ms())
    }

    /// The controller refused the ISR change in flight (stale epochs): a
    /// new one may be proposed.
    pub(crate) fn isr_change_refused(&self) {
        let leo = self.log.log_end_offset();
        lock(&self.replication).on_isr_committed(None, leo);
    }

    /// Appends a client's records (Produce). With [`Acks::All`] the ISR
    /// must hold `min.insync.replicas` replicas; the caller then waits for
    /// [`Partition::wait_replicated`] (after appending to all partitions of
    /// its request, so the waits overlap). An append that may block on the
    /// disk (a roll, an fsync) runs on the blocking pool.
    ///
    /// `records` is any buffer the append may patch in place (offsets,
    /// leader epoch): Produce hands over its region of the request frame,
    /// so the bytes are not copied between the socket and the log write.
    pub(crate) async fn append<R>(
        self: &Arc<Self>,
        mut records: R,
        origin: AppendOrigin,
        acks: Acks,
    ) -> Result<AppendInfo, AppendError>
    where
        R: AsMut<[u8]> + Send + 'static,
    {
        let min_isr = self.log.config().min_insync_replicas;
        if acks == Acks::All {
            let isr = self.isr_len();
            if isr < min_isr.max(1) as usize {
                return Err(AppendError::Api(ApiError::new(
                    ResponseError::NotEnoughReplicas,
                    format!(
                        "The size of the current ISR {isr} is insufficient to satisfy the min.isr requirement of {min_isr} for partition {}",
                        self.tp
                    ),
                )));
            }
        }
        let info = if self.log.append_may_block(records.as_mut().len()) {
            let me = Arc::clone(self);
            crate::blocking::on_pool(move || me.append_now(records.as_mut(), origin)).await?
        } else {
            self.append_now(records.as_mut(), origin)?
        };
        Ok(info)
    }

    /// Appends records a coordinator wrote (the caller holds its shard;
    /// the append may block on the disk, which the caller's runtime
    /// accounts for).
    pub(crate) fn append_for_coordinator(
        &self,
        mut records: Vec<u8>,
    ) -> Result<AppendInfo, StorageError> {
        let may_block = self.log.append_may_block(records.len());
        let mut append = || {
            self.log.append_as_leader_from(
                &mut records,
                self.leader_epoch(),
                AppendOrigin::Coordinator,
            )
        };
        let info = if may_block {
            crate::blocking::in_place(append)
        } else {
            append()
        }?;
        self.after_append();
        Ok(info)
    }

    /// Appends a transaction marker (COMMIT or ABORT control batch of the
    /// producer, Kafka's `MemoryRecords.withEndTransactionMarker`) as the
    /// coordinator's write: the partition's producer state checks the
    /// producer and coordinator epochs and completes the transaction (its
    /// transaction index entry, the last stable offset), the high
    /// watermark moves and parked fetches wake.
    pub(crate) fn append_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        marker: sluice_protocol::record::control::EndTxnMarker,
    ) -> Result<AppendInfo, StorageError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let batch = marker.batch(producer_id, producer_epoch, now)?;
        self.append_for_coordinator(batch)
    }

    fn append_now(
        &self,
        records: &mut [u8],
        origin: AppendOrigin,
    ) -> Result<AppendInfo, AppendError> {
        let info = self
            .log
            .append_as_leader_from(records, self.leader_epoch(), origin)
            .map_err(AppendError::Storage)?;
        self.after_append();
        Ok(info)
    }

    fn after_append(&self) {
        self.maybe_advance_high_watermark();
        // Followers' fetches parked here wait for the log end, which moved.
        self.wake_fetches();
    }

    /// Moves the high watermark to the smallest log end offset over the
    /// maximal ISR (with this node the only replica, the log end offset).
    /// Wakes acks=all waiters when it moved, and parked fetches when it or
    /// the last stable offset (read_committed fetches) moved.
    pub(crate) fn maybe_advance_high_watermark(&self) {
        let before = self.log.high_watermark();
        let lso_before = self.log.last_stable_offset();
        let hw = {
            let mut r = lock(&self.replication);
            r.maybe_advance_high_watermark(self.log.log_end_offset());
            r.high_watermark()
        };
        let after = if hw > before {
            self.log.set_high_watermark(hw)
        } else {
            before
        };
        if after > before {
            self.hw_moved.notify_waiters();
        }
        if after > before || self.log.last_stable_offset() != lso_before {
            self.wake_fetches();
        }
    }

    /// Waits until the high watermark reaches `offset`: every in-sync
    /// replica has the records before it (acks=all; at once on one node).
    /// Kafka's `checkEnoughReplicasReachOffset`: reached with fewer than
    /// `min.insync.replicas` in the ISR is NOT_ENOUGH_REPLICAS_AFTER_APPEND;
    /// not reached by `deadline`, REQUEST_TIMED_OUT; the leadership moved
    /// away first, NOT_LEADER_OR_FOLLOWER (the new leader may not have the
    /// records: the client must retry there).
    pub(crate) async fn wait_replicated(
        &self,
        offset: i64,
        deadline: tokio::time::Instant,
    ) -> Result<(), ResponseError> {
        loop {
            let moved = self.hw_moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            if self.log.high_watermark() >= offset {
                let min_isr = self.log.config().min_insync_replicas.max(1) as usize;
                return if self.isr_len() >= min_isr {
                    Ok(())
                } else {
                    Err(ResponseError::NotEnoughReplicasAfterAppend)
                };
            }
            // Kafka's `checkEnoughReplicasReachOffset` on a partition this
            // broker no longer leads (its DelayedProduce is completed when
            // the leadership moves).
            if !self.is_led() {
                return Err(ResponseError::NotLeaderOrFollower);
            }
            tokio::select! {
                () = moved => {}
                () = tokio::time::sleep_until(deadline) => {
                    return Err(ResponseError::RequestTimedOut);
                }
            }
        }
    }

    /// Whether this node still leads the partition.
    pub(crate) fn is_led(&self) -> bool {
        self.led.load(Ordering::Acquire)
    }

    /// The leadership moved away: acks=all waiters wake (and find
    /// [`Partition::wait_replicated`] cannot succeed here any more).
    fn resign(&self) {
        self.led.store(false, Ordering::Release);
        self.hw_moved.notify_waiters();
        self.wake_fetches();
    }

    /// Parks a fetch on this partition: `waker` is notified when data
    /// arrives. Registration lasts as long as the fetch holds `waker`.
    pub(crate) fn park_fetch(&self, waker: &Arc<Notify>) {
        let mut waiters = lock(&self.waiters);
        waiters.retain(|w| w.strong_count() > 0);
        waiters.push(Arc::downgrade(waker));
    }

    fn wake_fetches(&self) {
        let mut waiters = lock(&self.waiters);
        if waiters.is_empty() {
            return;
        }
        waiters.retain(|w| match w.upgrade() {
            Some(n) => {
                n.notify_one();
                true
            }
            None => false,
        });
    }
}

/// Every partition this node leads, by topic name then partition.
#[derive(Debug, Default)]
pub(crate) struct Partitions {
    map: RwLock<HashMap<String, HashMap<i32, Arc<Partition>>>>,
}

impl Partitions {
    /// The partition, when this node leads it.
    pub(crate) fn get(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        self.map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(topic)
            .and_then(|ps| ps.get(&partition))
            .cloned()
    }

    /// Drops the partition (resigned: its waiters answer
    /// NOT_LEADER_OR_FOLLOWER and coordinators holding a lease unload), so
    /// the next [`Self::sync`] leads it again with the log it finds then
    /// (after a move between data folders, design 024).
    pub(crate) fn forget(&self, tp: &TopicPartition) {
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        if let Some(ps) = map.get_mut(&tp.topic) {
            if let Some(p) = ps.remove(&tp.partition) {
                p.resign();
            }
            if ps.is_empty() {
                map.remove(&tp.topic);
            }
        }
    }

    /// Every partition this node leads.
    pub(crate) fn all(&self) -> Vec<Arc<Partition>> {
        self.map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .flat_map(|ps| ps.values().cloned())
            .collect()
    }

    /// Brings the set of led partitions in line with `image`: new ones
    /// (with the log `log_of` gives them) become led, changed ones follow
    /// their new leader epoch and ISR, removed ones are dropped (their acks=all
    /// waiters answer NOT_LEADER_OR_FOLLOWER). A led partition without a
    /// log is an error unless `logs_pending` (the caller creates the logs
    /// of new partitions after this sync, and syncs again).
    pub(crate) fn sync(
        &self,
        image: &MetadataImage,
        node_id: i32,
        lag_time_max_ms: u64,
        logs_pending: bool,
        log_of: impl Fn(&TopicPartition) -> Option<Arc<Log>>,
    ) {
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        let mut next: HashMap<String, HashMap<i32, Arc<Partition>>> = HashMap::new();
        for t in image.topics() {
            let mut old = map.remove(&t.name);
            let mut parts = HashMap::new();
            for (&p, state) in &t.partitions {
                if state.leader != node_id {
                    continue;
                }
                let existing = old.as_mut().and_then(|o| o.remove(&p));
                let partition = match existing {
                    Some(existing) => {
                        existing.update(state);
                        existing
                    }
                    None => {
                        let tp = TopicPartition::new(t.name.clone(), p);
                        let Some(log) = log_of(&tp) else {
                            if !logs_pending {
                                tracing::error!(partition = %tp, "no log for a partition this node leads");
                            }
                            continue;
                        };
                        Arc::new(Partition::new(tp, log, state, node_id, lag_time_max_ms))
                    }
                };
                parts.insert(p, partition);
            }
            for p in old.into_iter().flat_map(|o| o.into_values()) {
                p.resign();
            }
            if !parts.is_empty() {
                next.insert(t.name.clone(), parts);
            }
        }
        // Partitions no longer led (or whose topic is gone) are resigned:
        // waiters wake to find their wait cannot end.
        for p in map.values().flat_map(|ps| ps.values()) {
            p.resign();
        }
        *map = next;
    }
}

#[cfg(test)]
mod tests;
