//! The log's side of producer state (the parts of Kafka's `UnifiedLog`
//! and `LogLoader` that drive its `ProducerStateManager`):
//!
//! - appends: every batch with a producer id is checked under the append
//!   lock before offsets are given out (`analyzeAndValidateProducerState`);
//!   a client batch equal to one of its producer's last five is answered
//!   with the original offsets and nothing is written;
//! - snapshots: taken at the new segment's base on every roll (fsynced by
//!   the next flush) and at the log end on close (fsynced); deleted with
//!   their segments (retention, cleaning) and past a truncation point;
//! - loading: the newest snapshot the shutdown lets us trust (at or below
//!   the log end after a clean one, at or below the recovery point after a
//!   crash), then a replay of the batches after it;
//! - truncation: reload from the newest snapshot at or below the new end
//!   and replay up to it.
//!
//! See docs/design/009-producer-state.md.

use sluice_protocol::record::batch::BatchHeader;
use sluice_protocol::record::codec::decode_batch;

use std::sync::Arc;

use super::{lock, AppendOrigin, Log, LogOpenOptions, ReplayEvent};
use crate::error::{Result, StorageError};
use crate::producer::entry::{increment_sequence, NO_SEQUENCE};
use crate::producer::{
    sync_snapshot_files, ActiveProducer, BatchMetadata, CompletedTxn, EndTxnMarker, LastRecord,
    ProducerAppendInfo, ProducerLoad, ProducerOrigin, ProducerStateEntry, ProducerStateManager,
};
use crate::segment::Segment;
use crate::txn_index::AbortedTxn;

/// What the producer check of an append decided.
#[derive(Debug)]
pub(super) enum ProducerCheck {
    /// A client retried a batch that is already in the log.
    Duplicate(BatchMetadata),
    /// What to apply once the batches are written, and the transactions
    /// the append's markers complete.
    Updates(Vec<ProducerAppendInfo>, Vec<CompletedTxn>),
}

/// The last sequence of a batch (Kafka's `RecordBatch.lastSequence`).
pub(crate) fn last_sequence(h: &BatchHeader) -> i32 {
    if h.base_sequence == NO_SEQUENCE {
        NO_SEQUENCE
    } else {
        increment_sequence(h.base_sequence, h.last_offset_delta)
    }
}

/// The end-transaction marker of a control batch (Kafka's
/// `EndTransactionMarker.deserialize` of its first record): key `(version
/// int16, type int16)` with type 0 = ABORT, 1 = COMMIT; value `(version
/// int16, coordinator epoch int32)`. `None` for a control batch without
/// records (the cleaner removed the transaction), with the marker's
/// timestamp.
fn read_marker(raw: &[u8], h: &BatchHeader) -> Result<Option<(EndTxnMarker, i64)>> {
    let decoded = decode_batch(raw, crate::segment::decode_limit(h))?;
    let Some(first) = decoded.records.first() else {
        return Ok(None);
    };
    let r = &first.record;
    let invalid = |m: &str| StorageError::InvalidRecord(m.to_string());
    let key = r
        .key
        .as_deref()
        .filter(|k| k.len() >= 4)
        .ok_or_else(|| invalid("Invalid control record key for end transaction marker"))?;
    let commit = match i16::from_be_bytes([key[2], key[3]]) {
        0 => false,
        1 => true,
        t => {
            return Err(StorageError::InvalidRecord(format!(
                "Invalid control record type {t} for end transaction marker"
            )))
        }
    };
    let value = r
        .value
        .as_deref()
        .filter(|v| v.len() >= 6)
        .ok_or_else(|| invalid("Invalid end transaction marker value"))?;
    let coordinator_epoch = i32::from_be_bytes([value[2], value[3], value[4], value[5]]);
    Ok(Some((
        EndTxnMarker {
            commit,
            coordinator_epoch,
        },
        r.timestamp,
    )))
}

/// Writes the transaction index entry of `txn` (aborted transactions
/// only) into the segment holding its marker.
fn index_completed(ps: &ProducerStateManager, txn: &CompletedTxn, segment: &Segment) -> Result<()> {
    if !txn.aborted {
        return Ok(());
    }
    segment.txn_index.append(AbortedTxn {
        producer_id: txn.producer_id,
        first_offset: txn.first_offset,
        last_offset: txn.last_offset,
        last_stable_offset: ps.last_stable_offset_after(txn),
    })
}

/// Feeds one batch at `[first, last]` to its producer's append info.
fn append_batch(
    info: &mut ProducerAppendInfo,
    h: &BatchHeader,
    raw: &[u8],
    first: i64,
    last: i64,
    tp: &crate::TopicPartition,
) -> Result<Option<CompletedTxn>> {
    if h.is_control() {
        return match read_marker(raw, h)? {
            Some((marker, ts)) => {
                info.append_end_txn_marker(marker, h.producer_epoch, first, ts, tp)
            }
            None => Ok(None),
        };
    }
    info.append_data_batch(
        h.producer_epoch,
        h.base_sequence,
        last_sequence(h),
        h.max_timestamp,
        first,
        last,
        h.is_transactional(),
        tp,
    )?;
    Ok(None)
}

impl Log {
    /// Kafka's `analyzeAndValidateProducerState` for `batches` (positions
    /// in `records`) that will be written from `base_offset` on. Duplicates
    /// are looked for only in client appends, against the state before this
    /// append; the first one found answers the whole append. Writer only.
    pub(super) fn check_producers(
        &self,
        records: &[u8],
        batches: &[(usize, BatchHeader)],
        base_offset: i64,
        origin: AppendOrigin,
    ) -> Result<ProducerCheck> {
        let origin = match origin {
            AppendOrigin::Client => ProducerOrigin::Client,
            AppendOrigin::Coordinator => ProducerOrigin::Coordinator,
        };
        let ps = lock(&self.producers);
        let mut updates: Vec<ProducerAppendInfo> = Vec::new();
        let mut completed: Vec<CompletedTxn> = Vec::new();
        let mut next = base_offset;
        for (pos, h) in batches {
            let first = next;
            let last = first + i64::from(h.last_offset_delta);
            next = last + 1;
            if h.producer_id < 0 {
                continue;
            }
            if origin == ProducerOrigin::Client {
                let dup = ps.entry(h.producer_id).and_then(|e| {
                    e.find_duplicate(h.producer_epoch, h.base_sequence, last_sequence(h))
                });
                if let Some(dup) = dup {
                    tracing::debug!(
                        partition = %self.tp, producer_id = h.producer_id,
                        epoch = h.producer_epoch, base_sequence = h.base_sequence,
                        first_offset = dup.first_offset(), "duplicate batch; nothing appended"
                    );
                    return Ok(ProducerCheck::Duplicate(dup));
                }
            }
            let i = match updates
                .iter()
                .position(|u| u.producer_id() == h.producer_id)
            {
                Some(i) => i,
                None => {
                    updates.push(ps.prepare_update(h.producer_id, origin));
                    updates.len() - 1
                }
            };
            let raw = &records[*pos..*pos + h.total_size()];
            if let Some(txn) = append_batch(&mut updates[i], h, raw, first, last, &self.tp)? {
                completed.push(txn);
            }
        }
        Ok(ProducerCheck::Updates(updates, completed))
    }

    /// The producer updates of batches a follower copies from its leader
    /// (Kafka's `AppendOrigin.REPLICATION`): offsets are the batches'
    /// own, nothing is refused (the leader checked), duplicates are not
    /// looked for. Writer only.
    pub(super) fn replica_producer_updates(
        &self,
        records: &[u8],
        batches: &[(usize, BatchHeader)],
    ) -> Result<(Vec<ProducerAppendInfo>, Vec<CompletedTxn>)> {
        let ps = lock(&self.producers);
        let mut updates: Vec<ProducerAppendInfo> = Vec::new();
        let mut completed: Vec<CompletedTxn> = Vec::new();
        for (pos, h) in batches {
            if h.producer_id < 0 {
                continue;
            }
            let i = match updates
                .iter()
                .position(|u| u.producer_id() == h.producer_id)
            {
                Some(i) => i,
                None => {
                    updates.push(ps.prepare_update(h.producer_id, ProducerOrigin::Replication));
                    updates.len() - 1
                }
            };
            let raw = &records[*pos..*pos + h.total_size()];
            let (first, last) = (h.base_offset, h.last_offset());
            if let Some(txn) = append_batch(&mut updates[i], h, raw, first, last, &self.tp)? {
                completed.push(txn);
            }
        }
        Ok((updates, completed))
    }

    /// Applies checked updates once their batches are written to
    /// `segment` (Kafka's `append` after `localLog.append`): producers are
    /// updated, each completed transaction gets its transaction index
    /// entry when aborted (with the last stable offset it leaves) and is
    /// marked decided, and the first unstable offset follows. Writer only.
    pub(super) fn apply_producer_updates(
        &self,
        updates: Vec<ProducerAppendInfo>,
        completed: &[CompletedTxn],
        segment: &Segment,
        now: i64,
    ) -> Result<()> {
        let mut ps = lock(&self.producers);
        for u in updates {
            ps.update(u, now);
        }
        let mut result = Ok(());
        for txn in completed {
            if result.is_ok() {
                result = index_completed(&ps, txn, segment);
            }
            ps.complete_txn(txn);
        }
        self.publish_first_unstable(&ps);
        result
    }

    /// Publishes the first unstable offset readers compute the last stable
    /// offset from (`i64::MAX`: none).
    pub(super) fn publish_first_unstable(&self, ps: &ProducerStateManager) {
        let fuo = ps.first_unstable_offset().unwrap_or(i64::MAX);
        self.first_unstable
            .store(fuo, std::sync::atomic::Ordering::Release);
    }

    /// After the high watermark moved to `hw`: decided transactions whose
    /// marker it passed are stable now (Kafka's `onHighWatermarkUpdated`
    /// then `maybeIncrementFirstUnstableOffset`).
    pub(super) fn producers_on_high_watermark(&self, hw: i64) {
        if self
            .first_unstable
            .load(std::sync::atomic::Ordering::Acquire)
            == i64::MAX
        {
            return;
        }
        let mut ps = lock(&self.producers);
        if ps.on_high_watermark_updated(hw) {
            self.publish_first_unstable(&ps);
        }
    }

    /// Replays every batch from `from` into `ps` (as a follower would:
    /// nothing fails). Snapshots are taken on the way at `snapshot_at`
    /// offsets (segment bases), each with the state of everything below it.
    fn replay_producers(
        &self,
        ps: &mut ProducerStateManager,
        from: i64,
        snapshot_at: &[i64],
    ) -> Result<u64> {
        let now = self.now_ms();
        let mut pending: Vec<i64> = snapshot_at.iter().copied().filter(|&o| o > from).collect();
        pending.sort_unstable();
        pending.reverse();
        let mut replayed = 0u64;
        let mut failure: Option<StorageError> = None;
        let tp = self.tp.clone();
        let dir = self.dir.clone();
        self.replay(from, |event| {
            let (h, raw) = match event {
                ReplayEvent::Batch { header, raw } => (header, raw),
                ReplayEvent::Corrupt { header, error } => {
                    tracing::warn!(
                        partition = %tp, offset = header.base_offset, error = %error,
                        "producer state: skipped a batch whose CRC does not match"
                    );
                    return;
                }
                ReplayEvent::Unreadable {
                    offset,
                    resume,
                    error,
                } => {
                    tracing::warn!(
                        partition = %tp, offset, resume, error = %error,
                        "producer state: skipped unreadable bytes"
                    );
                    return;
                }
            };
            while pending.last().is_some_and(|&o| o <= h.base_offset) {
                if let Some(o) = pending.pop() {
                    if let Err(e) = ps.take_snapshot(&dir, o, false) {
                        failure.get_or_insert(e);
                    }
                }
            }
            replayed += 1;
            if h.producer_id < 0 {
                return;
            }
            let mut info = ps.prepare_update(h.producer_id, ProducerOrigin::Replication);
            match append_batch(&mut info, &h, raw, h.base_offset, h.last_offset(), &tp) {
                Ok(completed) => {
                    ps.update(info, h.max_timestamp.min(now));
                    if let Some(txn) = completed {
                        // The transaction index past the replay's start is
                        // rebuilt from the markers met here.
                        if let Some(seg) = self.segment_holding(h.base_offset) {
                            if let Err(e) = index_completed(ps, &txn, &seg) {
                                failure.get_or_insert(e);
                            }
                        }
                        ps.complete_txn(&txn);
                    }
                }
                Err(e) => tracing::warn!(
                    partition = %tp, offset = h.base_offset, error = %e,
                    "producer state: skipped a batch it cannot read"
                ),
            }
        })?;
        if let Some(e) = failure {
            return Err(e);
        }
        ps.on_high_watermark_updated(self.high_watermark());
        self.publish_first_unstable(ps);
        let end = self.log_end_offset();
        for o in pending.into_iter().rev().filter(|&o| o <= end) {
            ps.take_snapshot(&self.dir, o, false)?;
        }
        Ok(replayed)
    }

    /// Builds the producer state at open (Kafka's `rebuildProducerState`
    /// from `LogLoader`). `snapshots` are the snapshot files found in the
    /// folder.
    ///
    /// The transaction indexes are rebuilt from the same replay: every
    /// entry whose marker lies at or after the replay's start is dropped,
    /// and the replay writes them again from the markers it meets (with
    /// the producer state of the snapshot, the open transactions and
    /// last stable offsets come out as they were written). A segment
    /// whose `.txnindex` cannot be trusted moves the start of the replay
    /// to its base (a snapshot at or below it, else the log start).
    pub(super) fn load_producer_state(
        &self,
        snapshots: Vec<i64>,
        opts: &LogOpenOptions,
    ) -> Result<ProducerLoad> {
        let start = self.log_start_offset();
        let end = self.log_end_offset();
        let bases = self.segment_base_offsets();
        let txn_rebuild = self.untrusted_txn_indexes();
        let mut ps = lock(&self.producers);
        ps.set_snapshot_files(snapshots);
        ps.remove_stray_snapshots(&self.dir, &bases)?;
        // After a crash only what lies below the recovery point is known to
        // be on disk as it was written; snapshots past it may describe data
        // that was cut off or rewritten, so they go (docs/design/009).
        let trusted = if opts.clean_shutdown {
            end
        } else {
            self.recovery_point()
        };
        ps.delete_snapshots(&self.dir, |o| o > trusted || o <= start)?;
        // The last two segment bases and the log end get a snapshot, so a
        // later truncation or restart starts near them (as Kafka).
        let mut targets: Vec<i64> = bases.iter().rev().take(2).copied().collect();
        targets.retain(|&o| o > start);
        if opts.clean_shutdown && ps.snapshot_offsets().is_empty() && txn_rebuild.is_none() {
            // Kafka's rule: a clean shutdown without any snapshot is a
            // folder written before producer state existed; there is
            // nothing to replay, and snapshots start now.
            ps.reset_snapshot_offset(start);
            targets.sort_unstable();
            for o in targets {
                ps.take_snapshot(&self.dir, o, false)?;
            }
            ps.take_snapshot(&self.dir, end, false)?;
            ps.last_load = ProducerLoad::default();
            self.trim_txn_indexes(end)?;
            return Ok(ProducerLoad::default());
        }
        let at_most = txn_rebuild.map_or(trusted, |b| b.min(trusted));
        let snapshot = ps.load_latest_snapshot(&self.dir, &self.tp, at_most, self.now_ms())?;
        let from = snapshot.unwrap_or(start);
        if snapshot.is_none() {
            ps.reset_snapshot_offset(start);
        }
        self.trim_txn_indexes(from)?;
        let replayed_batches = self.replay_producers(&mut ps, from, &targets)?;
        ps.take_snapshot(&self.dir, end, false)?;
        let load = ProducerLoad {
            snapshot,
            replayed_batches,
        };
        ps.last_load = load;
        if replayed_batches > 0 || !ps.is_empty() {
            tracing::info!(
                partition = %self.tp, snapshot = ?snapshot, replayed_batches,
                producers = ps.producer_id_count(), "loaded producer state"
            );
        }
        Ok(load)
    }

    /// The lowest base of a segment whose transaction index file failed
    /// its checks at open (logged), if any.
    fn untrusted_txn_indexes(&self) -> Option<i64> {
        let segs = self.read_segments();
        let mut lowest = None;
        for seg in segs.values() {
            if let Some(why) = &seg.txn_index_problem {
                tracing::warn!(
                    partition = %self.tp, path = %seg.txn_index.path().display(), problem = %why,
                    "transaction index cannot be trusted; rebuilding it from the log"
                );
                lowest = Some(lowest.map_or(seg.base_offset, |l: i64| l.min(seg.base_offset)));
            }
        }
        lowest
    }

    /// Drops the transaction index entries whose marker is at or after
    /// `from` (a replay from there writes them again) or past the data of
    /// their segment. Writer only (or at open).
    fn trim_txn_indexes(&self, from: i64) -> Result<()> {
        let segs: Vec<Arc<Segment>> = self.read_segments().values().cloned().collect();
        for seg in segs {
            seg.txn_index.truncate_to(from.min(seg.next_offset()))?;
        }
        Ok(())
    }

    /// After a truncation to the current log end: forget what lay past it,
    /// reload the newest snapshot at or below it and replay up to it
    /// (Kafka's `truncateAndReload` then `rebuildProducerState`). Writer only.
    pub(super) fn reload_producer_state(&self) -> Result<ProducerLoad> {
        let start = self.log_start_offset();
        let end = self.log_end_offset();
        let mut ps = lock(&self.producers);
        if ps.delete_snapshots(&self.dir, |o| o > end || o <= start)? > 0 {
            crate::checkpoint::sync_dir(&self.dir)?;
        }
        let snapshot = ps.load_latest_snapshot(&self.dir, &self.tp, end, self.now_ms())?;
        if snapshot.is_none() {
            ps.reset_snapshot_offset(start);
        }
        self.trim_txn_indexes(snapshot.unwrap_or(start))?;
        let replayed_batches = self.replay_producers(&mut ps, snapshot.unwrap_or(start), &[])?;
        ps.take_snapshot(&self.dir, end, true)?;
        ps.last_load = ProducerLoad {
            snapshot,
            replayed_batches,
        };
        Ok(ps.last_load)
    }

    /// After the log was emptied and restarted at `offset`: no producer,
    /// no snapshot but one at `offset`. Writer only.
    pub(super) fn reset_producer_state(&self, offset: i64) -> Result<()> {
        let mut ps = lock(&self.producers);
        ps.clear();
        self.publish_first_unstable(&ps);
        ps.delete_snapshots(&self.dir, |_| true)?;
        crate::checkpoint::sync_dir(&self.dir)?;
        ps.reset_snapshot_offset(0);
        ps.take_snapshot(&self.dir, offset, true)?;
        Ok(())
    }

    /// Takes the snapshot at the new segment's base on a roll (no fsync:
    /// the next flush syncs it). Writer only.
    pub(super) fn snapshot_producers_at(&self, offset: i64, sync: bool) -> Result<()> {
        lock(&self.producers)
            .take_snapshot(&self.dir, offset, sync)
            .map(|_| ())
    }

    /// fsyncs the snapshots written since the last flush.
    pub(super) fn sync_producer_snapshots(&self) -> Result<()> {
        let pending = lock(&self.producers).take_unsynced();
        sync_snapshot_files(&self.dir, &pending)
    }

    /// Deletes the snapshots at `offsets` (segments that left the log).
    pub(crate) fn delete_producer_snapshots(&self, offsets: &[i64]) -> Result<()> {
        if offsets.is_empty() {
            return Ok(());
        }
        lock(&self.producers)
            .delete_snapshots(&self.dir, |o| offsets.contains(&o))
            .map(|_| ())
            .map_err(|e| self.go_offline(e))
    }

    /// Removes producers idle for `producer.id.expiration.ms` and without
    /// an open transaction; returns how many (the LogManager runs this every
    /// `producer.id.expiration.check.interval.ms`).
    pub fn remove_expired_producers(&self) -> usize {
        let n = lock(&self.producers).remove_expired(self.now_ms());
        if n > 0 {
            tracing::debug!(partition = %self.tp, expired = n, "expired producer ids");
        }
        n
    }

    /// Every producer this partition tracks (for DescribeProducers).
    pub fn active_producers(&self) -> Vec<ActiveProducer> {
        lock(&self.producers).active_producers()
    }

    /// The state of one producer, if tracked.
    pub fn producer_state(&self, producer_id: i64) -> Option<ProducerStateEntry> {
        lock(&self.producers).entry(producer_id).cloned()
    }

    /// Number of producer ids tracked.
    pub fn producer_id_count(&self) -> usize {
        lock(&self.producers).producer_id_count()
    }

    /// Offsets of the producer-state snapshot files, oldest first.
    pub fn producer_snapshot_offsets(&self) -> Vec<i64> {
        lock(&self.producers).snapshot_offsets()
    }

    /// How producer state was last loaded (at open, or after a
    /// truncation).
    pub fn producer_load(&self) -> ProducerLoad {
        lock(&self.producers).last_load
    }

    /// Per producer, the batch the cleaner must keep.
    pub(crate) fn last_records_of_active_producers(
        &self,
    ) -> std::collections::HashMap<i64, LastRecord> {
        lock(&self.producers).last_records()
    }
}
