//! One partition's log: the ordered set of segments in `<topic>-<partition>`
//! with its offsets (log start, log end, high watermark, recovery point) and
//! leader epoch cache.
//!
//! - `load`: opening a folder, finishing interrupted swaps, recovery.
//! - `validate`: what an append checks first (Kafka's `LogValidator`):
//!   headers, CRC, record framing, keys, timestamps; recompression.
//! - `append`: offset assignment and the write on the produce path.
//! - `read`: reads by offset and lookups by time (ListOffsets).
//! - `replay`: every batch from an offset, for owners rebuilding state.
//! - `producer`: producer state (idempotence) on append, roll, load,
//!   truncation, retention and close; its snapshots.
//! - `retention`: deleting old segments, log start offset, truncation.
//! - `relocate`: freezing and copying the folder for a move to another
//!   data folder.
//!
//! Locking: one append lock per partition serializes writers (append, roll,
//! truncate, retention, segment swaps). Readers take the segment map's read
//! lock just long enough to clone the segments they need, then read files
//! without any lock.

mod append;
mod load;
mod producer;
mod read;
mod relocate;
mod replay;
mod retention;
mod validate;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use crate::clock::Clock;
use crate::config::LogConfig;
use crate::epoch::LeaderEpochCache;
use crate::error::{Result, StorageError};
use crate::producer::{ProducerStateConfig, ProducerStateManager};
use crate::segment::{Segment, SegmentSettings};
use crate::TopicPartition;

pub use append::AppendInfo;
pub(crate) use load::{CLEANED_SUFFIX as CLEANED, SWAP_SUFFIX as SWAP};
pub use read::{OffsetSpec, ReadInfo, ReadLimit, TimestampOffset};
pub use relocate::FrozenLog;
pub(crate) use relocate::SealedCopy;
pub use replay::ReplayEvent;
pub use validate::{decompression_limit, AppendOrigin, MAX_RECORD_ERRORS};

/// Where the last session left this partition (from the data-folder
/// checkpoints).
#[derive(Debug, Clone, Copy, Default)]
pub struct LogOpenOptions {
    pub recovery_point: i64,
    pub log_start_offset: i64,
    pub high_watermark: i64,
    /// The data folder had a clean-shutdown marker: skip the recovery scan
    /// (and trust the producer snapshot at the log end).
    pub clean_shutdown: bool,
    /// Producer-state settings (`producer.id.expiration.ms`, the bound on
    /// producer ids).
    pub producer_state: ProducerStateConfig,
}

/// The append lock's token: holding it makes the holder the only writer.
#[derive(Debug)]
pub(crate) struct WriterState;

/// A partition log.
#[derive(Debug)]
pub struct Log {
    dir: PathBuf,
    tp: TopicPartition,
    config: RwLock<Arc<LogConfig>>,
    clock: Arc<dyn Clock>,
    segments: RwLock<BTreeMap<i64, Arc<Segment>>>,
    writer: Mutex<WriterState>,
    log_end_offset: AtomicI64,
    high_watermark: AtomicI64,
    log_start_offset: AtomicI64,
    recovery_point: AtomicI64,
    last_flush_ms: AtomicI64,
    unflushed_messages: AtomicI64,
    epochs: Mutex<LeaderEpochCache>,
    offline: AtomicBool,
    /// Segments removed from the log and renamed `.deleted`, with the time
    /// their files may go (`file.delete.delay.ms`, Kafka's
    /// `asyncDeleteSegment`). Readers that still hold one keep reading it.
    pending_deletes: Mutex<Vec<(i64, Arc<Segment>)>>,
    /// Producer ids, epochs and sequences (idempotence); changed only by
    /// the holder of the append lock, except for expiry.
    producers: Mutex<ProducerStateManager>,
    /// The producer state's first unstable offset (`i64::MAX`: none),
    /// published for readers of the last stable offset. Stored before the
    /// high watermark that may expose it.
    first_unstable: AtomicI64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Log {
    /// The partition folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn topic_partition(&self) -> &TopicPartition {
        &self.tp
    }

    /// The current config.
    pub fn config(&self) -> Arc<LogConfig> {
        Arc::clone(&self.config.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Replaces the config; it applies to the next append, roll, retention
    /// and cleaning pass.
    pub fn set_config(&self, config: LogConfig) {
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
    }

    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset.load(Ordering::Acquire)
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset.load(Ordering::Acquire)
    }

    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.load(Ordering::Acquire)
    }

    /// Everything below this offset has been fsynced.
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point.load(Ordering::Acquire)
    }

    /// Sets the high watermark (clamped to `[log start, log end]`); the
    /// owner (replication, or the broker on one node) drives it.
    /// Transactions whose marker it passes become stable.
    pub fn set_high_watermark(&self, hw: i64) -> i64 {
        let hw = hw.clamp(self.log_start_offset(), self.log_end_offset());
        self.high_watermark.store(hw, Ordering::Release);
        self.producers_on_high_watermark(hw);
        hw
    }

    /// The last stable offset (Kafka's `UnifiedLog.lastStableOffset`):
    /// the first offset of the earliest transaction still open (or decided
    /// with its marker not yet under the high watermark), at least the log
    /// start, at most the high watermark. Without transactions it is the
    /// high watermark. What read_committed consumers may read up to.
    pub fn last_stable_offset(&self) -> i64 {
        self.last_stable_offset_below(self.high_watermark())
    }

    /// The last stable offset given a high watermark just read (the first
    /// unstable offset is read after it, see `first_unstable`).
    pub(crate) fn last_stable_offset_below(&self, hw: i64) -> i64 {
        let first_unstable = self.first_unstable.load(Ordering::Acquire);
        first_unstable.max(self.log_start_offset()).min(hw)
    }

    /// The segment whose offsets include `offset` (the last one starting at
    /// or below it).
    pub(crate) fn segment_holding(&self, offset: i64) -> Option<Arc<Segment>> {
        self.read_segments()
            .range(..=offset)
            .next_back()
            .map(|(_, s)| Arc::clone(s))
    }

    /// Whether an earlier I/O error took this log offline.
    pub fn is_offline(&self) -> bool {
        self.offline.load(Ordering::Acquire)
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.read_segments().len()
    }

    /// Total bytes in all segments.
    pub fn size_in_bytes(&self) -> u64 {
        self.read_segments().values().map(|s| s.size()).sum()
    }

    /// Base offsets of all segments, in order.
    pub fn segment_base_offsets(&self) -> Vec<i64> {
        self.read_segments().keys().copied().collect()
    }

    /// `(epoch, start offset)` entries of the leader epoch cache.
    pub fn leader_epochs(&self) -> Vec<(i32, i64)> {
        lock(&self.epochs).entries().to_vec()
    }

    /// The epoch of the last batch appended (a fetch's `last_fetched_epoch`).
    pub fn latest_epoch(&self) -> Option<i32> {
        lock(&self.epochs).latest_epoch()
    }

    /// For OffsetForLeaderEpoch: the largest epoch ≤ `epoch` and its end.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        lock(&self.epochs).end_offset_for(epoch, self.log_end_offset())
    }

    pub(crate) fn read_segments(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, BTreeMap<i64, Arc<Segment>>> {
        self.segments.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn write_segments(
        &self,
    ) -> std::sync::RwLockWriteGuard<'_, BTreeMap<i64, Arc<Segment>>> {
        self.segments.write().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn writer(&self) -> MutexGuard<'_, WriterState> {
        lock(&self.writer)
    }

    pub(crate) fn active_segment(&self) -> Arc<Segment> {
        let segs = self.read_segments();
        match segs.values().next_back() {
            Some(s) => Arc::clone(s),
            None => unreachable!("a log always has an active segment"),
        }
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Settings for the next segment opened or created (draws its jitter).
    pub(crate) fn settings(&self) -> SegmentSettings {
        SegmentSettings::of(&self.config())
    }

    /// Marks the log offline after an I/O error and returns the error.
    pub(crate) fn go_offline(&self, e: StorageError) -> StorageError {
        if !self.offline.swap(true, Ordering::AcqRel) {
            tracing::error!(partition = %self.tp, error = %e, "log is offline after I/O error");
        }
        e
    }

    pub(crate) fn check_online(&self) -> Result<()> {
        if self.is_offline() {
            return Err(StorageError::Offline(self.tp.to_string()));
        }
        Ok(())
    }

    /// fsyncs every segment holding data past the recovery point and moves
    /// the recovery point to the log end. An fsync failure takes the log
    /// offline (it is not retried: the kernel may have dropped the pages).
    pub fn flush(&self) -> Result<()> {
        self.flush_up_to(self.log_end_offset())
    }

    /// fsyncs the segments holding data between the recovery point and
    /// `end` (exclusive) and moves the recovery point to `end` (Kafka's
    /// `flushUptoOffsetExclusive`). After a roll, `end` is the active
    /// segment's base: the rolled segments go to disk while appends to
    /// the active one are not held up by writeback of their own file.
    pub fn flush_up_to(&self, end: i64) -> Result<()> {
        self.check_online()?;
        let end = end.min(self.log_end_offset());
        let from = self.recovery_point();
        if from >= end {
            return Ok(());
        }
        let segs: Vec<Arc<Segment>> = {
            let segs = self.read_segments();
            let first = segs
                .range(..=from)
                .next_back()
                .map_or(i64::MIN, |(b, _)| *b);
            segs.range(first..end).map(|(_, s)| Arc::clone(s)).collect()
        };
        for s in segs {
            s.flush().map_err(|e| self.go_offline(e))?;
        }
        // Snapshots written on roll are fsynced with the data below them.
        self.sync_producer_snapshots()
            .map_err(|e| self.go_offline(e))?;
        // New segment files must survive a power loss too.
        crate::checkpoint::sync_dir(&self.dir).map_err(|e| self.go_offline(e))?;
        self.recovery_point.fetch_max(end, Ordering::AcqRel);
        self.last_flush_ms.store(self.now_ms(), Ordering::Release);
        if end >= self.log_end_offset() {
            self.unflushed_messages.store(0, Ordering::Release);
        }
        Ok(())
    }

    /// Milliseconds since the last flush (for `flush.ms`).
    pub fn ms_since_last_flush(&self) -> i64 {
        self.now_ms() - self.last_flush_ms.load(Ordering::Acquire)
    }

    /// Flushes, seals the active segment's indexes (trimmed, final time
    /// index entry), writes the leader epoch checkpoint and a producer
    /// snapshot at the log end (fsynced). The log must not be appended to
    /// afterwards.
    pub fn close(&self) -> Result<()> {
        let _w = self.writer();
        if !self.is_offline() {
            self.flush()?;
            let active = self.active_segment();
            active.seal()?;
            active.flush()?;
            lock(&self.epochs).flush()?;
            self.snapshot_producers_at(self.log_end_offset(), true)?;
        }
        Ok(())
    }

    /// Starts a new segment at the log end (no-op when the active segment
    /// is empty).
    pub fn roll(&self) -> Result<()> {
        let _w = self.writer();
        self.check_online()?;
        self.roll_locked().map(|_| ())
    }

    pub(crate) fn roll_locked(&self) -> Result<Arc<Segment>> {
        let active = self.active_segment();
        if active.size() == 0 {
            return Ok(active);
        }
        let base = self.log_end_offset();
        active.seal().map_err(|e| self.go_offline(e))?;
        let seg = Segment::create(&self.dir, base, self.settings(), self.now_ms())
            .map_err(|e| self.go_offline(e))?;
        let seg = Arc::new(seg);
        self.write_segments().insert(base, Arc::clone(&seg));
        // Kafka's roll: the producer state of everything below the new
        // segment, so recovery can start from its base.
        self.snapshot_producers_at(base, false)
            .map_err(|e| self.go_offline(e))?;
        tracing::debug!(partition = %self.tp, base, "rolled new segment");
        Ok(seg)
    }

    /// Header of every batch with a record at or after `from` (producer id,
    /// epoch and base sequence per batch), up to the log end.
    pub fn batch_headers_from(
        &self,
        from: i64,
    ) -> Result<Vec<sluice_protocol::record::BatchHeader>> {
        let segs: Vec<Arc<Segment>> = self.read_segments().values().cloned().collect();
        let mut out = Vec::new();
        for s in segs {
            if s.next_offset() <= from {
                continue;
            }
            for (_, h) in s.batch_headers()? {
                if h.last_offset() >= from {
                    out.push(h);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod config_tests;
#[cfg(test)]
mod producer_tests;
#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod txn_tests;
