//! Producer state per partition, for the idempotent (and later the
//! transactional) producer: Kafka's `ProducerStateManager`.
//!
//! For every producer id that wrote to the partition it keeps the epoch,
//! the last [`NUM_BATCHES_TO_RETAIN`] batches (sequence range, offsets,
//! timestamp), the last timestamp, the coordinator epoch of the last
//! transaction marker and the first offset of an open transaction
//! ([`entry`]). An append is checked against it ([`append`]: duplicates,
//! epochs, sequences), and it is written to and read from Kafka's snapshot
//! files ([`snapshot`]). Which batches of the log feed it, and when
//! snapshots are taken or deleted, is the log's business
//! (`log/producer.rs`); this module owns the state and the files.
//!
//! Bounds: producers idle for `producer.id.expiration.ms` (and without an
//! open transaction) are removed by [`ProducerStateManager::remove_expired`];
//! a partition never tracks more than [`ProducerStateConfig::max_producer_ids`]
//! producers: past that, the least recently used ones without an open
//! transaction are evicted (docs/design/009-producer-state.md). An expired
//! or evicted producer is unknown again, and Kafka 4 accepts an unknown
//! producer's next batch whatever its sequence (KIP-360).

pub mod append;
pub mod entry;
pub mod snapshot;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

pub use append::{CompletedTxn, EndTxnMarker, ProducerAppendInfo, ProducerOrigin};
pub use entry::{BatchMetadata, ProducerStateEntry, NUM_BATCHES_TO_RETAIN};

use crate::error::{IoContext, Result};
use crate::TopicPartition;

/// Kafka's default `producer.id.expiration.ms` (1 day).
pub const DEFAULT_PRODUCER_ID_EXPIRATION_MS: i64 = 86_400_000;
/// How many producer ids one partition tracks at most (Sluice's bound;
/// Kafka has none).
pub const DEFAULT_MAX_PRODUCER_IDS: usize = 10_000;

/// Producer-state settings of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerStateConfig {
    /// `producer.id.expiration.ms`: a producer whose last timestamp is this
    /// old, without an open transaction, is forgotten.
    pub producer_id_expiration_ms: i64,
    /// Most producer ids tracked; the least recently used idle ones go
    /// first when more arrive.
    pub max_producer_ids: usize,
}

impl Default for ProducerStateConfig {
    fn default() -> Self {
        Self {
            producer_id_expiration_ms: DEFAULT_PRODUCER_ID_EXPIRATION_MS,
            max_producer_ids: DEFAULT_MAX_PRODUCER_IDS,
        }
    }
}

/// One producer as DescribeProducers reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveProducer {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// -1 when the producer has no batch in its current epoch.
    pub last_sequence: i32,
    pub last_timestamp: i64,
    pub coordinator_epoch: i32,
    /// -1 without an open transaction.
    pub current_txn_start_offset: i64,
}

/// What the cleaner must keep of a producer (Kafka's `LastRecord`): the
/// batch ending at its last data offset, or, without one, its last marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastRecord {
    pub last_data_offset: Option<i64>,
    pub producer_epoch: i16,
}

/// How a (re)load of producer state went, for logs and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProducerLoad {
    /// Offset of the snapshot loaded, if any.
    pub snapshot: Option<i64>,
    /// Batches read after it.
    pub replayed_batches: u64,
}

/// The producer state of one partition and its snapshot files.
#[derive(Debug, Default)]
pub struct ProducerStateManager {
    config: ProducerStateConfig,
    producers: HashMap<i64, ProducerStateEntry>,
    /// Offsets of the snapshot files in the folder.
    snapshots: BTreeSet<i64>,
    /// Snapshots written without fsync (on roll); the next flush syncs them.
    unsynced: Vec<i64>,
    /// Offset of the last snapshot taken or loaded.
    last_snap_offset: i64,
    /// How the state was last loaded.
    pub(crate) last_load: ProducerLoad,
    /// Open transactions: first offset -> producer id (Kafka's
    /// `ongoingTxns`).
    ongoing: BTreeMap<i64, i64>,
    /// Transactions whose marker is written but not yet below the high
    /// watermark: first offset -> (producer id, marker offset) (Kafka's
    /// `unreplicatedTxns`).
    unreplicated: BTreeMap<i64, (i64, i64)>,
}

impl ProducerStateManager {
    pub fn new(config: ProducerStateConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    pub fn config(&self) -> ProducerStateConfig {
        self.config
    }

    /// Number of producer ids tracked.
    pub fn producer_id_count(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    pub fn entry(&self, producer_id: i64) -> Option<&ProducerStateEntry> {
        self.producers.get(&producer_id)
    }

    /// Starts checking an append of `producer_id`'s batches.
    pub fn prepare_update(&self, producer_id: i64, origin: ProducerOrigin) -> ProducerAppendInfo {
        ProducerAppendInfo::new(producer_id, self.producers.get(&producer_id), origin)
    }

    /// Applies a checked append (Kafka's `update`); `now_ms` marks the
    /// producer as just used. Transactions the append opened become
    /// ongoing; those it closed are completed by [`Self::complete_txn`].
    pub fn update(&mut self, info: ProducerAppendInfo, now_ms: i64) {
        let pid = info.producer_id();
        for &first in info.started_transactions() {
            self.ongoing.insert(first, pid);
        }
        let mut next = info.into_entry();
        next.last_used_ms = now_ms;
        match self.producers.get_mut(&pid) {
            Some(current) => current.update(&next),
            None => {
                self.producers.insert(pid, next);
                self.enforce_bound();
            }
        }
    }

    /// Adds an entry read from a snapshot (Kafka's `loadProducerEntry`):
    /// its open transaction is ongoing.
    fn load_entry(&mut self, entry: ProducerStateEntry) {
        if let Some(first) = entry.current_txn_first_offset {
            self.ongoing.insert(first, entry.producer_id);
        }
        self.producers.insert(entry.producer_id, entry);
    }

    /// Forgets every producer and transaction.
    pub fn clear(&mut self) {
        self.producers.clear();
        self.ongoing.clear();
        self.unreplicated.clear();
    }

    // --------------------------------------------------------- transactions

    /// The partition's last stable offset right after `txn` completes,
    /// for its transaction index entry (Kafka's `lastStableOffset(
    /// completedTxn)`): the first offset of the earliest transaction of
    /// another producer still open, else the marker's offset + 1.
    pub fn last_stable_offset_after(&self, txn: &CompletedTxn) -> i64 {
        self.ongoing
            .iter()
            .find(|(_, &pid)| pid != txn.producer_id)
            .map_or(txn.last_offset + 1, |(&first, _)| first)
    }

    /// Marks `txn` decided (Kafka's `completeTxn`); it stays unstable
    /// until the high watermark passes its marker
    /// ([`Self::on_high_watermark_updated`]).
    pub fn complete_txn(&mut self, txn: &CompletedTxn) {
        if self.ongoing.remove(&txn.first_offset).is_none() {
            // Kafka throws here; the producer entry said the transaction
            // was open, so the two views disagree. Nothing waits on it.
            tracing::warn!(
                producer_id = txn.producer_id,
                first_offset = txn.first_offset,
                "completed a transaction that was not ongoing"
            );
            return;
        }
        self.unreplicated
            .insert(txn.first_offset, (txn.producer_id, txn.last_offset));
    }

    /// Forgets the decided transactions whose marker is below `hw` (Kafka's
    /// `onHighWatermarkUpdated`); returns whether any went.
    pub fn on_high_watermark_updated(&mut self, hw: i64) -> bool {
        let before = self.unreplicated.len();
        self.unreplicated.retain(|_, (_, last)| *last >= hw);
        before != self.unreplicated.len()
    }

    /// Whether decided transactions wait for the high watermark.
    pub fn has_unreplicated_txns(&self) -> bool {
        !self.unreplicated.is_empty()
    }

    /// The first offset of the earliest transaction that is open, or
    /// decided with its marker not yet under the high watermark (Kafka's
    /// `firstUnstableOffset`).
    pub fn first_unstable_offset(&self) -> Option<i64> {
        let ongoing = self.ongoing.keys().next().copied();
        let unreplicated = self.unreplicated.keys().next().copied();
        match (ongoing, unreplicated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Open transactions, `(first offset, producer id)` in offset order.
    pub fn ongoing_txns(&self) -> Vec<(i64, i64)> {
        self.ongoing.iter().map(|(&f, &p)| (f, p)).collect()
    }

    fn is_expired(&self, now_ms: i64, e: &ProducerStateEntry) -> bool {
        e.current_txn_first_offset.is_none()
            && now_ms.saturating_sub(e.last_timestamp) >= self.config.producer_id_expiration_ms
    }

    /// Removes producers idle for `producer.id.expiration.ms` without an
    /// open transaction (Kafka's `removeExpiredProducers`); returns how many.
    pub fn remove_expired(&mut self, now_ms: i64) -> usize {
        let before = self.producers.len();
        let expiration = self.config.producer_id_expiration_ms;
        self.producers.retain(|_, e| {
            e.current_txn_first_offset.is_some()
                || now_ms.saturating_sub(e.last_timestamp) < expiration
        });
        before - self.producers.len()
    }

    /// Past `max_producer_ids`, evicts the least recently used producers
    /// without an open transaction down to 15/16 of the bound (so the O(n)
    /// selection runs once per n/16 new producers).
    fn enforce_bound(&mut self) {
        let max = self.config.max_producer_ids.max(1);
        if self.producers.len() <= max {
            return;
        }
        let target = max - max / 16;
        let excess = self.producers.len() - target;
        let mut idle: Vec<(i64, i64)> = self
            .producers
            .values()
            .filter(|e| e.current_txn_first_offset.is_none())
            .map(|e| (e.last_used_ms, e.producer_id))
            .collect();
        let n = excess.min(idle.len());
        if n == 0 {
            return;
        }
        if n < idle.len() {
            idle.select_nth_unstable(n);
        }
        let newest_evicted = idle[..n].iter().map(|(t, _)| *t).max().unwrap_or(-1);
        for (_, pid) in &idle[..n] {
            self.producers.remove(pid);
        }
        tracing::warn!(
            evicted = n,
            tracked = self.producers.len(),
            max,
            newest_evicted_last_used_ms = newest_evicted,
            "too many producer ids on one partition: evicted the least recently used"
        );
    }

    /// Every tracked producer, by id.
    pub fn active_producers(&self) -> Vec<ActiveProducer> {
        let mut v: Vec<ActiveProducer> = self
            .producers
            .values()
            .map(|e| ActiveProducer {
                producer_id: e.producer_id,
                producer_epoch: e.producer_epoch,
                last_sequence: e.last_seq(),
                last_timestamp: e.last_timestamp,
                coordinator_epoch: e.coordinator_epoch,
                current_txn_start_offset: e.current_txn_first_offset.unwrap_or(-1),
            })
            .collect();
        v.sort_by_key(|p| p.producer_id);
        v
    }

    /// Per producer, the batch the cleaner must keep.
    pub fn last_records(&self) -> HashMap<i64, LastRecord> {
        self.producers
            .values()
            .map(|e| {
                let o = e.last_data_offset();
                (
                    e.producer_id,
                    LastRecord {
                        last_data_offset: (o >= 0).then_some(o),
                        producer_epoch: e.producer_epoch,
                    },
                )
            })
            .collect()
    }

    // ------------------------------------------------------------ snapshots

    /// Offsets of the snapshot files, oldest first.
    pub fn snapshot_offsets(&self) -> Vec<i64> {
        self.snapshots.iter().copied().collect()
    }

    /// The snapshot files found when the folder was opened.
    pub(crate) fn set_snapshot_files(&mut self, offsets: impl IntoIterator<Item = i64>) {
        self.snapshots = offsets.into_iter().collect();
    }

    /// Writes the state as the snapshot at `offset` unless one was taken or
    /// loaded at or past it (Kafka's `takeSnapshot`). Without `sync` the
    /// file is fsynced by the next [`sync_snapshots`](Self::sync_snapshots).
    pub fn take_snapshot(&mut self, dir: &Path, offset: i64, sync: bool) -> Result<bool> {
        if offset <= self.last_snap_offset {
            return Ok(false);
        }
        let mut entries: Vec<&ProducerStateEntry> = self.producers.values().collect();
        entries.sort_by_key(|e| e.producer_id);
        let bytes = snapshot::encode(entries.into_iter());
        snapshot::write(dir, offset, &bytes, sync)?;
        self.snapshots.insert(offset);
        if !sync {
            self.unsynced.push(offset);
        }
        self.last_snap_offset = offset;
        tracing::debug!(
            offset,
            producers = self.producers.len(),
            bytes = bytes.len(),
            "wrote producer snapshot"
        );
        Ok(true)
    }

    /// The snapshots written without fsync since the last call; the caller
    /// syncs them (outside any lock) with [`sync_snapshot_files`].
    pub(crate) fn take_unsynced(&mut self) -> Vec<i64> {
        std::mem::take(&mut self.unsynced)
    }

    /// Deletes the snapshot files whose offsets match `doomed`; returns how
    /// many went. The caller syncs the folder when that matters.
    pub fn delete_snapshots(&mut self, dir: &Path, doomed: impl Fn(i64) -> bool) -> Result<usize> {
        let gone: Vec<i64> = self
            .snapshots
            .iter()
            .copied()
            .filter(|&o| doomed(o))
            .collect();
        for &o in &gone {
            self.snapshots.remove(&o);
            self.unsynced.retain(|&u| u != o);
            remove_if_exists(&snapshot::snapshot_path(dir, o))?;
        }
        if !gone.is_empty() {
            tracing::debug!(snapshots = ?gone, "deleted producer snapshots");
        }
        Ok(gone.len())
    }

    /// Deletes snapshots that belong to no segment, except the newest one
    /// when it lies past the last segment's base (the one a clean shutdown
    /// wrote at the log end): Kafka's `removeStraySnapshots`.
    pub fn remove_stray_snapshots(&mut self, dir: &Path, segment_bases: &[i64]) -> Result<()> {
        let bases: BTreeSet<i64> = segment_bases.iter().copied().collect();
        let strays: Vec<i64> = self
            .snapshots
            .iter()
            .copied()
            .filter(|o| !bases.contains(o))
            .collect();
        let Some((&newest, older)) = strays.split_last() else {
            return Ok(());
        };
        let keep_newest = bases.last().is_none_or(|&max| newest >= max);
        let older: BTreeSet<i64> = older.iter().copied().collect();
        self.delete_snapshots(dir, |o| older.contains(&o) || (o == newest && !keep_newest))?;
        Ok(())
    }

    /// Forgets every producer and loads the newest snapshot at or below
    /// `at_most`; a snapshot that cannot be read is deleted and the one
    /// before it tried (Kafka's `loadFromSnapshot`). Producers already
    /// expired at `now_ms` are left out. Returns the loaded snapshot's
    /// offset: the log is to be replayed from there.
    pub fn load_latest_snapshot(
        &mut self,
        dir: &Path,
        tp: &TopicPartition,
        at_most: i64,
        now_ms: i64,
    ) -> Result<Option<i64>> {
        self.clear();
        while let Some(&offset) = self.snapshots.range(..=at_most).next_back() {
            let path = snapshot::snapshot_path(dir, offset);
            match snapshot::read(&path)? {
                Ok(entries) => {
                    let total = entries.len();
                    for e in entries {
                        if !self.is_expired(now_ms, &e) {
                            self.load_entry(e);
                        }
                    }
                    self.enforce_bound();
                    self.last_snap_offset = offset;
                    tracing::debug!(
                        partition = %tp, offset, producers = self.producers.len(),
                        expired = total - self.producers.len(), "loaded producer snapshot"
                    );
                    return Ok(Some(offset));
                }
                Err(e) => {
                    tracing::warn!(
                        partition = %tp, path = %path.display(), error = %e,
                        "cannot load producer snapshot; deleting it and trying an older one"
                    );
                    self.delete_snapshots(dir, |o| o == offset)?;
                }
            }
        }
        self.last_snap_offset = 0;
        Ok(None)
    }

    /// Restarts the state at `offset` with no snapshot behind it.
    pub(crate) fn reset_snapshot_offset(&mut self, offset: i64) {
        self.last_snap_offset = offset;
    }
}

/// fsyncs the snapshot files at `offsets` (those deleted meanwhile are
/// skipped).
pub(crate) fn sync_snapshot_files(dir: &Path, offsets: &[i64]) -> Result<()> {
    for &o in offsets {
        let path = snapshot::snapshot_path(dir, o);
        match std::fs::File::open(&path) {
            Ok(f) => f.sync_all().at(&path)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).at(&path),
        }
    }
    Ok(())
}

fn remove_if_exists(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).at(path),
    }
}

#[cfg(test)]
mod tests;
