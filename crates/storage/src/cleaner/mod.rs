//! Log compaction for `cleanup.policy=compact` (and `compact,delete`), as
//! Kafka's `LogCleaner`/`Cleaner` does it:
//!
//! 1. Pick the cleanable range: from the first dirty offset (the end of the
//!    previous clean, kept in `cleaner-offset-checkpoint`) to the first
//!    uncleanable offset — the active segment, a segment younger than
//!    `min.compaction.lag.ms`, or one reaching past the last stable offset
//!    (never an undecided transaction).
//!    Clean only when dirty bytes / all cleanable bytes exceed
//!    `min.cleanable.dirty.ratio`, or when a dirty segment's first batch is
//!    older than `max.compaction.lag.ms` (Kafka's `LogCleanerManager`:
//!    such a log is cleaned whatever its ratio).
//! 2. Build an offset map: the latest offset of every key in the dirty
//!    range, leaving out batches of aborted transactions.
//! 3. Rewrite the segments from the log start to the end of the range in
//!    groups that fit one segment, keeping a record only when no later record
//!    has its key; tombstones go once older than `delete.retention.ms`.
//!    Original offsets are kept; batches that lose records are rebuilt with
//!    the same codec; untouched batches are copied byte for byte. Batches
//!    of aborted transactions go; transaction markers go in two passes
//!    once no data of their transaction is left (see [`txn`]), and the
//!    cleaned segment gets the transaction index entries of the ABORT
//!    markers it keeps.
//! 4. Swap each group in atomically (see [`rewrite`]).
//!
//! A batch the cleaner cannot read (CRC mismatch, records that do not
//! decode or decompress) is kept exactly as it is and reported (a warning
//! with partition, offset and reason; counted in
//! [`CleanStats::batches_skipped`]); its keys do not enter the offset map,
//! so it never causes another record to be dropped. A segment whose batch
//! headers cannot be walked stops the offset map before it and leaves its
//! group uncleaned. Data the cleaner cannot read is never dropped.

mod rewrite;
mod txn;

use std::collections::HashMap;
use std::sync::Arc;

use sluice_protocol::record::batch::{validate_crc, BatchHeader};
use sluice_protocol::record::codec::{decode_batch, DecodedBatch};

use crate::config::LogConfig;
use crate::error::Result;
use crate::log::{decompression_limit, Log};
use crate::segment::{decode_limit, Segment};

pub use rewrite::CrashPoint;

/// Cleaner settings (Kafka's `log.cleaner.*` server configs).
#[derive(Debug, Clone)]
pub struct CleanerConfig {
    /// `log.cleaner.dedupe.buffer.size`: memory for the offset map.
    pub dedupe_buffer_bytes: usize,
    /// Test hook: stop (as if the process died) at this point of the swap.
    #[doc(hidden)]
    pub crash_at: Option<CrashPoint>,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        Self {
            dedupe_buffer_bytes: 128 * 1024 * 1024,
            crash_at: None,
        }
    }
}

/// The part of a log a clean would cover.
#[derive(Debug, Clone, PartialEq)]
pub struct Cleanable {
    pub first_dirty: i64,
    /// First offset not cleaned (a segment base).
    pub end: i64,
    pub clean_bytes: u64,
    pub dirty_bytes: u64,
}

impl Cleanable {
    /// Dirty bytes over all cleanable bytes.
    pub fn dirty_ratio(&self) -> f64 {
        let total = self.clean_bytes + self.dirty_bytes;
        if total == 0 {
            0.0
        } else {
            self.dirty_bytes as f64 / total as f64
        }
    }
}

/// What one clean did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanStats {
    pub first_dirty: i64,
    /// The new first dirty offset.
    pub end: i64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub records_read: u64,
    pub records_removed: u64,
    pub tombstones_removed: u64,
    /// Records of aborted transactions removed.
    pub aborted_records_removed: u64,
    /// Transaction markers given a delete horizon (removable by a clean
    /// after it).
    pub markers_stamped: u64,
    /// Transaction markers removed.
    pub markers_removed: u64,
    pub segments_before: usize,
    pub segments_after: usize,
    /// Batches kept as they were because they could not be read.
    pub batches_skipped: u64,
    /// Segment groups left uncleaned because a batch header in them could
    /// not be read.
    pub groups_skipped: u64,
}

/// Checks the CRC and decodes one stored batch; the error is the reason
/// the cleaner gives when it keeps the batch unread.
pub(crate) fn read_batch(
    bytes: &[u8],
    h: &BatchHeader,
    config: &LogConfig,
) -> std::result::Result<DecodedBatch, sluice_protocol::ProtocolError> {
    validate_crc(bytes)?;
    decode_batch(bytes, decode_limit(h).max(decompression_limit(config)))
}

/// The cleanable range of `log` given the first dirty offset, or `None` when
/// no whole segment is dirty.
pub fn cleanable(log: &Log, first_dirty: i64) -> Option<Cleanable> {
    let config = log.config();
    if !config.cleanup_policy.compact {
        return None;
    }
    let now = log.now_ms();
    // Kafka's firstUncleanableDirtyOffset: never past the last stable
    // offset (an open transaction may still abort).
    let lso = log.last_stable_offset();
    let start = log.log_start_offset();
    let first_dirty = first_dirty.max(start);
    let segs: Vec<Arc<Segment>> = log.read_segments().values().cloned().collect();
    let mut end = None;
    for (i, s) in segs.iter().enumerate() {
        let active = i + 1 == segs.len();
        let too_young = now - s.largest_timestamp() < config.min_compaction_lag_ms;
        if active || too_young || s.next_offset() > lso {
            end = Some(s.base_offset);
            break;
        }
    }
    let end = end?;
    let mut c = Cleanable {
        first_dirty,
        end,
        clean_bytes: 0,
        dirty_bytes: 0,
    };
    for s in segs
        .iter()
        .filter(|s| s.base_offset < end && s.next_offset() > start)
    {
        if s.next_offset() <= first_dirty {
            c.clean_bytes += s.size();
        } else {
            c.dirty_bytes += s.size();
        }
    }
    (c.dirty_bytes > 0).then_some(c)
}

/// Whether `log` should be cleaned now: dirty ratio above
/// `min.cleanable.dirty.ratio`, or dirty data older than
/// `max.compaction.lag.ms` (see [`max_compaction_delay`]).
pub fn needs_cleaning(log: &Log, first_dirty: i64) -> Option<Cleanable> {
    let c = cleanable(log, first_dirty)?;
    let config = log.config();
    if c.dirty_ratio() > config.min_cleanable_dirty_ratio {
        return Some(c);
    }
    (max_compaction_delay(log, c.first_dirty, log.now_ms()) > 0).then_some(c)
}

/// Kafka's `maxCompactionDelay`: how far past `max.compaction.lag.ms` the
/// oldest dirty data is — the earliest first-batch timestamp of the dirty
/// segments before the active one, against `now - max.compaction.lag.ms`.
/// 0 when nothing is overdue.
pub fn max_compaction_delay(log: &Log, first_dirty: i64, now: i64) -> i64 {
    let lag = log.config().max_compaction_lag_ms.max(0);
    let segs: Vec<Arc<Segment>> = log.read_segments().values().cloned().collect();
    let Some((_, non_active)) = segs.split_last() else {
        return 0;
    };
    let earliest = non_active
        .iter()
        .filter(|s| s.next_offset() > first_dirty)
        .map(|s| s.first_batch_timestamp())
        .filter(|&ts| ts > 0)
        .min()
        .unwrap_or(i64::MAX);
    let clean_until = now.saturating_sub(lag);
    if earliest < clean_until {
        clean_until - earliest
    } else {
        0
    }
}

/// Cleans `log` from `first_dirty` if anything is cleanable (ignoring the
/// dirty ratio: the caller decided). Returns `None` when there was nothing.
pub fn clean(log: &Log, first_dirty: i64, config: &CleanerConfig) -> Result<Option<CleanStats>> {
    let Some(range) = cleanable(log, first_dirty) else {
        return Ok(None);
    };
    let round_upper = range.end;
    let (map, end) = build_offset_map(log, &range, config.dedupe_buffer_bytes)?;
    let range = Cleanable { end, ..range };
    rewrite::clean_segments(log, &range, round_upper, &map, config).map(Some)
}

/// Latest offset per key over the dirty range. When the map would outgrow
/// `budget`, it stops at a segment boundary and returns a smaller end.
fn build_offset_map(
    log: &Log,
    range: &Cleanable,
    budget: usize,
) -> Result<(HashMap<Vec<u8>, i64>, i64)> {
    let segs: Vec<Arc<Segment>> = log
        .read_segments()
        .values()
        .filter(|s| s.next_offset() > range.first_dirty && s.base_offset < range.end)
        .cloned()
        .collect();
    let config = log.config();
    let mut map: HashMap<Vec<u8>, i64> = HashMap::new();
    let mut used = 0usize;
    let mut txns = txn::CleanedTxns::default();
    txns.add_aborted(log.collect_aborted_txns(range.first_dirty, range.end));
    for (i, seg) in segs.iter().enumerate() {
        if i > 0 && used >= budget {
            return Ok((map, seg.base_offset));
        }
        let headers = match seg.batch_headers() {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(
                    partition = %log.topic_partition(), segment = seg.base_offset, error = %e,
                    "cleaner cannot walk this segment's batches; cleaning stops before it"
                );
                return Ok((map, seg.base_offset.max(range.first_dirty)));
            }
        };
        for (pos, h) in headers {
            if h.is_control() {
                let bytes = seg.batch_bytes(pos, &h)?;
                txns.on_control_batch(&h, &bytes);
                continue;
            }
            // Records of aborted transactions never shadow others.
            if txns.on_batch(&h) || h.last_offset() < range.first_dirty {
                continue;
            }
            let bytes = seg.batch_bytes(pos, &h)?;
            let decoded = match read_batch(&bytes, &h, &config) {
                Ok(d) => d,
                Err(e) => {
                    // Reported (and counted) by the rewrite, which keeps it.
                    tracing::debug!(
                        partition = %log.topic_partition(), offset = h.base_offset, error = %e,
                        "unreadable batch left out of the offset map"
                    );
                    continue;
                }
            };
            for r in decoded.records {
                if r.record.offset < range.first_dirty {
                    continue;
                }
                if let Some(k) = r.record.key {
                    let len = k.len();
                    if map.insert(k, r.record.offset).is_none() {
                        used += len + 48;
                    }
                }
            }
        }
    }
    Ok((map, range.end))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod txn_tests;
