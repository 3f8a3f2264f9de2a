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
//! Replication attaches here: today the ISR is this node alone, so the high
//! watermark follows the log end at once and acks=all completes as soon as
//! the append does. With followers, [`Partition::maybe_advance_high_watermark`]
//! takes the minimum log end offset over the ISR (follower fetches report
//! theirs), and acks=all waiters in [`Partition::append`] keep waiting on
//! `hw_moved` until the high watermark covers their batch. Handlers do not
//! change.
//!
//! The metadata log (`__cluster_metadata-0`) is not a partition here: it is
//! the controller's log, replicated by Raft rather than by ISR (design 011).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use proto_kafka::ResponseError;
use sluice_controller::{MetadataImage, PartitionImage};
use sluice_storage::{AppendInfo, AppendOrigin, Log, StorageError, TopicPartition};
use tokio::sync::Notify;

use crate::broker::ApiError;

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
    /// The in-sync replicas, from the metadata image.
    isr: RwLock<Vec<i32>>,
    /// Fetches parked on this partition (one `Notify` per parked fetch,
    /// which may wait on many partitions).
    waiters: Mutex<Vec<Weak<Notify>>>,
    /// Woken when the high watermark moves (acks=all waiters).
    hw_moved: Notify,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Partition {
    fn new(tp: TopicPartition, log: Arc<Log>, state: &PartitionImage) -> Self {
        let p = Self {
            tp,
            log,
            leader_epoch: AtomicI32::new(state.leader_epoch),
            isr: RwLock::new(state.isr.clone()),
            waiters: Mutex::new(Vec::new()),
            hw_moved: Notify::new(),
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

    /// Follows a change of the metadata image (leader epoch, ISR).
    fn update(&self, state: &PartitionImage) {
        self.leader_epoch
            .store(state.leader_epoch, Ordering::Release);
        *self.isr.write().unwrap_or_else(|p| p.into_inner()) = state.isr.clone();
        self.maybe_advance_high_watermark();
    }

    /// How many replicas are in sync (acks=all appends need
    /// `min.insync.replicas` of them).
    pub(crate) fn isr_len(&self) -> usize {
        self.isr.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Appends a client's records (Produce). With [`Acks::All`] the ISR
    /// must hold `min.insync.replicas` replicas; the caller then waits for
    /// [`Partition::wait_replicated`] (after appending to all partitions of
    /// its request, so the waits overlap). An append that may block on the
    /// disk (a roll, an fsync) runs on the blocking pool.
    pub(crate) async fn append(
        self: &Arc<Self>,
        records: Vec<u8>,
        origin: AppendOrigin,
        acks: Acks,
    ) -> Result<AppendInfo, AppendError> {
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
        let info = if self.log.append_may_block(records.len()) {
            let me = Arc::clone(self);
            crate::blocking::on_pool(move || me.append_now(records, origin)).await?
        } else {
            self.append_now(records, origin)?
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
        mut records: Vec<u8>,
        origin: AppendOrigin,
    ) -> Result<AppendInfo, AppendError> {
        let info = self
            .log
            .append_as_leader_from(&mut records, self.leader_epoch(), origin)
            .map_err(AppendError::Storage)?;
        self.after_append();
        Ok(info)
    }

    fn after_append(&self) {
        // Followers (none yet) would be woken by the log end moving.
        self.maybe_advance_high_watermark();
    }

    /// Moves the high watermark to the smallest log end offset over the
    /// ISR. With this node the only replica that is the log end offset.
    /// Wakes acks=all waiters when it moved, and parked fetches when it or
    /// the last stable offset (read_committed fetches) moved.
    pub(crate) fn maybe_advance_high_watermark(&self) {
        let before = self.log.high_watermark();
        let lso_before = self.log.last_stable_offset();
        let after = self.log.set_high_watermark(self.log.log_end_offset());
        if after > before {
            self.hw_moved.notify_waiters();
        }
        if after > before || self.log.last_stable_offset() != lso_before {
            self.wake_fetches();
        }
    }

    /// Returns once the high watermark reaches `offset`: every in-sync
    /// replica has the records before it (acks=all). At once on one node.
    pub(crate) async fn wait_replicated(&self, offset: i64) {
        loop {
            let moved = self.hw_moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            if self.log.high_watermark() >= offset {
                return;
            }
            moved.await;
        }
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

    /// Brings the set of led partitions in line with `image`: new ones
    /// (with the log `log_of` gives them) become led, changed ones follow
    /// their new leader epoch and ISR, removed ones are dropped.
    pub(crate) fn sync(
        &self,
        image: &MetadataImage,
        node_id: i32,
        log_of: impl Fn(&TopicPartition) -> Option<Arc<Log>>,
    ) {
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        let mut next: HashMap<String, HashMap<i32, Arc<Partition>>> = HashMap::new();
        for t in image.topics() {
            let old = map.remove(&t.name);
            let mut parts = HashMap::new();
            for (&p, state) in &t.partitions {
                if state.leader != node_id {
                    continue;
                }
                let existing = old.as_ref().and_then(|o| o.get(&p)).cloned();
                let partition = match existing {
                    Some(existing) => {
                        existing.update(state);
                        existing
                    }
                    None => {
                        let tp = TopicPartition::new(t.name.clone(), p);
                        let Some(log) = log_of(&tp) else {
                            tracing::error!(partition = %tp, "no log for a partition this node leads");
                            continue;
                        };
                        Arc::new(Partition::new(tp, log, state))
                    }
                };
                parts.insert(p, partition);
            }
            if !parts.is_empty() {
                next.insert(t.name.clone(), parts);
            }
        }
        *map = next;
    }
}

#[cfg(test)]
mod tests;
