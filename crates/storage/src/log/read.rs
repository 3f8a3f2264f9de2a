//! Reads by offset (Fetch) and lookups by time (ListOffsets).

use std::sync::Arc;

use super::Log;
use crate::error::{Result, StorageError};
use crate::segment::{decode_limit, FileRegion, Segment};
use crate::txn_index::AbortedTxn;

/// How far a read may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadLimit {
    /// Up to the log end (followers, tools).
    LogEnd,
    /// Up to the high watermark (consumers, read_uncommitted).
    HighWatermark,
    /// Up to the last stable offset, with the aborted transactions the
    /// returned range overlaps (consumers, read_committed).
    LastStable,
    /// Up to (excluding) a given offset, e.g. the last stable offset.
    Offset(i64),
}

/// The result of a read.
#[derive(Debug, Clone)]
pub struct ReadInfo {
    /// Bytes starting at the batch holding the requested offset; `None`
    /// when there is nothing to return yet.
    pub region: Option<FileRegion>,
    pub high_watermark: i64,
    /// The last stable offset at the time of the read (at most
    /// `high_watermark`).
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// With [`ReadLimit::LastStable`]: the aborted transactions that
    /// overlap the returned range (Kafka's `collectAbortedTransactions`);
    /// `None` for other limits.
    pub aborted_transactions: Option<Vec<AbortedTxn>>,
}

/// What ListOffsets asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// -2: the log start offset.
    Earliest,
    /// -1: the log end offset.
    Latest,
    /// -1 under read_committed: the last stable offset.
    LastStable,
    /// -3: the record with the largest timestamp.
    MaxTimestamp,
    /// The first record with a timestamp at or after this one.
    Timestamp(i64),
}

/// An offset with the timestamp found there (-1 when not applicable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    pub offset: i64,
    pub timestamp: i64,
}

impl Log {
    /// Reads from `offset`, at most `max_bytes` (but with `min_one_batch`,
    /// always a whole first batch), never past `limit`. The region lies
    /// within one segment. An offset outside `[log start, log end]` is
    /// `OffsetOutOfRange`.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: u64,
        limit: ReadLimit,
        min_one_batch: bool,
    ) -> Result<ReadInfo> {
        let hw = self.high_watermark();
        let lso = self.last_stable_offset_below(hw);
        let start = self.log_start_offset();
        let end = self.log_end_offset();
        let committed = limit == ReadLimit::LastStable;
        let info = |region, aborted: Vec<AbortedTxn>| ReadInfo {
            region,
            high_watermark: hw,
            last_stable_offset: lso,
            log_start_offset: start,
            log_end_offset: end,
            aborted_transactions: committed.then_some(aborted),
        };
        if offset < start || offset > end {
            return Err(StorageError::OffsetOutOfRange {
                offset,
                log_start: start,
                log_end: end,
            });
        }
        let upper = match limit {
            ReadLimit::LogEnd => end,
            ReadLimit::HighWatermark => hw,
            ReadLimit::LastStable => lso,
            ReadLimit::Offset(o) => o.min(end),
        };
        if offset >= upper {
            return Ok(info(None, Vec::new()));
        }
        // The segment holding `offset`, then (only if it has nothing at or
        // after `offset`, e.g. after compaction) the following ones, one at
        // a time: cloning every later segment up front made a read cost
        // linear in the segment count.
        let mut next = {
            let segs = self.read_segments();
            let first = segs
                .range(..=offset)
                .next_back()
                .map_or(i64::MIN, |(b, _)| *b);
            segs.range(first..upper).next().map(|(_, s)| Arc::clone(s))
        };
        while let Some(seg) = next {
            if seg.next_offset() > offset {
                let max_position = if upper < seg.next_offset() {
                    match seg.translate(upper)? {
                        Some((pos, _)) => pos,
                        None => seg.size(),
                    }
                } else {
                    seg.size()
                };
                if let Some(region) = seg.read(offset, max_bytes, max_position, min_one_batch)? {
                    let aborted = if committed {
                        self.aborted_in_read(&seg, offset, &region)
                    } else {
                        Vec::new()
                    };
                    return Ok(info(Some(region), aborted));
                }
            }
            next = self.segment_after(seg.base_offset, upper);
        }
        Ok(info(None, Vec::new()))
    }

    /// The aborted transactions overlapping a read of `region` from
    /// `offset` in `seg` (Kafka's `LocalLog.addAbortedTransactions`): the
    /// range ends at the first indexed batch at or after the region's end
    /// (an upper bound), else at the next segment's base or the log end.
    fn aborted_in_read(&self, seg: &Segment, offset: i64, region: &FileRegion) -> Vec<AbortedTxn> {
        let end_position = region.position + region.length;
        let upper = match seg.offset_index.first_at_or_after_position(end_position) {
            Some(e) => seg.base_offset + i64::from(e.relative_offset),
            None => self
                .segment_after(seg.base_offset, i64::MAX)
                .map_or_else(|| self.log_end_offset(), |s| s.base_offset),
        };
        self.collect_aborted_txns(offset, upper)
    }

    /// Every aborted transaction overlapping `[from, upper)`, from the
    /// transaction indexes of the segment holding `from` and the following
    /// ones, until an entry's last stable offset reaches `upper` (Kafka's
    /// `collectAbortedTransactions`).
    pub fn collect_aborted_txns(&self, from: i64, upper: i64) -> Vec<AbortedTxn> {
        let segs: Vec<Arc<Segment>> = {
            let segs = self.read_segments();
            let first = segs
                .range(..=from)
                .next_back()
                .map_or(i64::MIN, |(b, _)| *b);
            segs.range(first..).map(|(_, s)| Arc::clone(s)).collect()
        };
        let mut out = Vec::new();
        for seg in segs {
            if seg.txn_index.is_empty() {
                continue;
            }
            let found = seg.txn_index.collect(from, upper);
            out.extend(found.aborted);
            if found.complete {
                break;
            }
        }
        out
    }

    /// The first segment with a base offset in `(base, upper)`.
    fn segment_after(&self, base: i64, upper: i64) -> Option<Arc<Segment>> {
        use std::ops::Bound::Excluded;
        if base >= upper {
            return None;
        }
        self.read_segments()
            .range((Excluded(base), Excluded(upper)))
            .next()
            .map(|(_, s)| Arc::clone(s))
    }

    /// ListOffsets for one partition. `None` when no record matches (a
    /// timestamp after every record, or an empty log for max timestamp).
    pub fn fetch_offset(&self, spec: OffsetSpec) -> Result<Option<TimestampOffset>> {
        match spec {
            OffsetSpec::Earliest => Ok(Some(TimestampOffset {
                offset: self.log_start_offset(),
                timestamp: -1,
            })),
            OffsetSpec::Latest => Ok(Some(TimestampOffset {
                offset: self.log_end_offset(),
                timestamp: -1,
            })),
            OffsetSpec::LastStable => Ok(Some(TimestampOffset {
                offset: self.last_stable_offset(),
                timestamp: -1,
            })),
            OffsetSpec::MaxTimestamp => self.max_timestamp_offset(),
            OffsetSpec::Timestamp(ts) => self.offset_for_timestamp(ts),
        }
    }

    fn offset_for_timestamp(&self, ts: i64) -> Result<Option<TimestampOffset>> {
        let start = self.log_start_offset();
        let segs: Vec<Arc<Segment>> = self.read_segments().values().cloned().collect();
        for seg in segs {
            if seg.next_offset() <= start || seg.max_timestamp() < ts {
                continue;
            }
            if let Some((offset, timestamp)) = seg.find_offset_by_timestamp(ts, start)? {
                return Ok(Some(TimestampOffset { offset, timestamp }));
            }
        }
        Ok(None)
    }

    fn max_timestamp_offset(&self) -> Result<Option<TimestampOffset>> {
        let start = self.log_start_offset();
        let best = self
            .read_segments()
            .values()
            .filter(|s| s.next_offset() > start && s.max_timestamp() >= 0)
            .max_by_key(|s| (s.max_timestamp(), -s.base_offset))
            .cloned();
        let Some(seg) = best else { return Ok(None) };
        let ts = seg.max_timestamp();
        let Some((pos, h)) = seg.translate(seg.offset_of_max_timestamp())? else {
            return Ok(None);
        };
        // The segment remembers the batch; the record is found by decoding it.
        let bytes = seg.batch_bytes(pos, &h)?;
        let decoded = sluice_protocol::record::codec::decode_batch(&bytes, decode_limit(&h))?;
        let offset = decoded
            .records
            .iter()
            .find(|r| r.record.timestamp == ts)
            .map_or(h.last_offset(), |r| r.record.offset);
        Ok(Some(TimestampOffset {
            offset: offset.max(start),
            timestamp: ts,
        }))
    }
}
