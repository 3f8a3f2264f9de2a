//! The group coordinator runtime: drives the sans-IO state machines of
//! `sluice-coordinator` with real I/O.
//!
//! One shard per `__consumer_offsets` partition (the coordinator of a group
//! is the leader of partition `abs(hash(group)) % offsets.topic.num.partitions`;
//! on one node this node leads them all). A shard holds the group state
//! machine and the committed-offsets store, rebuilt by replaying the
//! partition's log when the shard is first needed or at start.
//!
//! Effects are applied in the contract's order: records are appended to the
//! partition (and the store updated) before any response is released.
//! JoinGroup and SyncGroup responses that wait for a rebalance are parked
//! under a request token and released by a later call or by the timer task.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use proto_kafka::ResponseError;
use sluice_coordinator::group::{
    Effects, GroupConfig, GroupCoordinator, GroupRecord, GroupResponse, RequestToken,
};
use sluice_coordinator::offsets::{
    coordinator_partition, OffsetConfig, OffsetStore, Record as OffsetsRecord, Replayed,
};
use sluice_protocol::record::codec::decode_batch;
use sluice_protocol::record::{BatchBuilder, BatchIter, Compression, Record};
use sluice_storage::{Log, ReadLimit};
use tokio::sync::oneshot;

use crate::broker::{ApiError, Broker, CONSUMER_OFFSETS_TOPIC};

/// One `__consumer_offsets` partition's coordinator state.
#[derive(Debug)]
pub(crate) struct Shard {
    pub groups: GroupCoordinator,
    pub offsets: OffsetStore,
    log: Arc<Log>,
}

/// All shards, the parked responses and the timer wake-up.
#[derive(Debug)]
pub(crate) struct Groups {
    partitions: i32,
    shards: Mutex<HashMap<i32, Arc<Mutex<Shard>>>>,
    parked: Mutex<HashMap<u64, oneshot::Sender<GroupResponse>>>,
    next_token: AtomicU64,
    /// Wakes the timer task when a deadline may have moved earlier.
    pub(crate) wake: tokio::sync::Notify,
    config: GroupConfig,
    offset_config: OffsetConfig,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Groups {
    pub(crate) fn new(config: &crate::config::BrokerConfig, node_id: i32) -> Self {
        let mut gc = GroupConfig::default();
        gc.min_session_timeout_ms = config.int("group.min.session.timeout.ms");
        gc.max_session_timeout_ms = config.int("group.max.session.timeout.ms");
        gc.initial_rebalance_delay_ms = config.int("group.initial.rebalance.delay.ms");
        gc.max_size = config.int("group.max.size").max(1) as usize;
        gc.member_id_seed = (now_ms() as u64) ^ (u64::from(node_id as u32) << 32);
        let offset_config =
            OffsetConfig::with_retention_minutes(config.long("offsets.retention.minutes"));
        Self {
            partitions: config.int("offsets.topic.num.partitions").max(1),
            shards: Mutex::new(HashMap::new()),
            parked: Mutex::new(HashMap::new()),
            next_token: AtomicU64::new(1),
            wake: tokio::sync::Notify::new(),
            config: gc,
            offset_config,
        }
    }

    /// The `__consumer_offsets` partition coordinating `group`.
    pub(crate) fn partition_for(&self, group: &str) -> i32 {
        coordinator_partition(group, self.partitions)
    }

    pub(crate) fn num_partitions(&self) -> i32 {
        self.partitions
    }

    /// The shard of `group`, creating `__consumer_offsets` and loading the
    /// partition as needed.
    pub(crate) fn shard(
        &self,
        broker: &Broker,
        group: &str,
    ) -> Result<Arc<Mutex<Shard>>, ApiError> {
        self.shard_at(broker, self.partition_for(group))
    }

    fn shard_at(&self, broker: &Broker, partition: i32) -> Result<Arc<Mutex<Shard>>, ApiError> {
        if let Some(s) = lock(&self.shards).get(&partition) {
            return Ok(Arc::clone(s));
        }
        broker.ensure_offsets_topic(self.partitions)?;
        let log = broker
            .log(CONSUMER_OFFSETS_TOPIC, partition)
            .ok_or_else(|| ApiError::code(ResponseError::CoordinatorNotAvailable))?;
        let mut shards = lock(&self.shards);
        if let Some(s) = shards.get(&partition) {
            return Ok(Arc::clone(s));
        }
        let shard = Arc::new(Mutex::new(self.load(log)?));
        shards.insert(partition, Arc::clone(&shard));
        Ok(shard)
    }

    /// Loads every existing partition (at start, when the topic exists).
    pub(crate) fn load_all(&self, broker: &Broker) -> Result<(), ApiError> {
        if broker.image().topic(CONSUMER_OFFSETS_TOPIC).is_none() {
            return Ok(());
        }
        for p in 0..self.partitions {
            self.shard_at(broker, p)?;
        }
        Ok(())
    }

    /// Replays one partition into a fresh shard.
    fn load(&self, log: Arc<Log>) -> Result<Shard, ApiError> {
        let mut groups = GroupCoordinator::new(self.config.clone());
        let mut offsets = OffsetStore::new(self.offset_config.clone());
        groups.begin_load();
        let mut next = log.log_start_offset();
        let end = log.log_end_offset();
        let mut count = 0usize;
        while next < end {
            let r = log
                .read(next, 1 << 20, ReadLimit::LogEnd, true)
                .map_err(|e| crate::handlers::errors::storage_error(&e))?;
            let Some(region) = r.region else { break };
            let bytes = region.read_to_vec().map_err(internal)?;
            let before = next;
            for b in BatchIter::new(&bytes) {
                let (_, h, raw) = b.map_err(internal)?;
                if !h.is_control() {
                    for r in decode_batch(raw, 64 << 20).map_err(internal)?.records {
                        if r.record.offset < next {
                            continue;
                        }
                        let Some(key) = r.record.key else { continue };
                        match offsets.replay(&key, r.record.value.as_deref()) {
                            Ok(Replayed::GroupMetadata { group, value }) => {
                                groups.replay(&GroupRecord::from_replayed(group, value));
                            }
                            Ok(_) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "skipping unreadable __consumer_offsets record")
                            }
                        }
                        count += 1;
                    }
                }
                next = h.last_offset() + 1;
            }
            if next == before {
                break;
            }
        }
        let mut shard = Shard {
            groups,
            offsets,
            log,
        };
        let effects = shard.groups.complete_load(now_ms());
        tracing::debug!(partition = %shard.log.topic_partition(), records = count, "loaded group coordinator partition");
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
            .and_then(|records| append(&shard.log, &records));
        if let Err(e) = appended {
            tracing::error!(error = ?e, "appending group records failed; reloading the partition");
            let log = Arc::clone(&shard.log);
            let unloaded = shard.groups.unload(now_ms());
            drop(unloaded);
            *shard = self.load(log)?;
            return Err(e);
        }
        self.wake.notify_one();
        let mut parked = lock(&self.parked);
        for (token, response) in responses {
            if let Some(tx) = parked.remove(&token.0) {
                let _ = tx.send(response);
            }
        }
        Ok(())
    }

    /// Appends offset records, then applies them to the store.
    pub(crate) fn commit_records(
        &self,
        shard: &mut Shard,
        records: &[OffsetsRecord],
    ) -> Result<(), ApiError> {
        append(&shard.log, records)?;
        shard.offsets.apply(records).map_err(internal)
    }

    /// Runs the timers of every shard that is due; returns how long to
    /// sleep before the next deadline.
    fn tick_all(&self) -> Duration {
        let shards: Vec<Arc<Mutex<Shard>>> = lock(&self.shards).values().cloned().collect();
        let now = now_ms();
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
    loop {
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

/// Appends `records` to a `__consumer_offsets` partition as one batch.
fn append(log: &Log, records: &[OffsetsRecord]) -> Result<(), ApiError> {
    if records.is_empty() {
        return Ok(());
    }
    let now = now_ms();
    let mut b = BatchBuilder::new(Compression::None, now);
    for r in records {
        b.push(Record::new(Some(r.key.clone()), r.value.clone(), now));
    }
    let mut bytes = b.build(0).map_err(internal)?;
    log.append_as_leader(&mut bytes, 0)
        .map_err(|e| crate::handlers::errors::storage_error(&e))?;
    log.set_high_watermark(log.log_end_offset());
    Ok(())
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "group coordinator internal error");
    ApiError::new(ResponseError::UnknownServerError, e.to_string())
}
