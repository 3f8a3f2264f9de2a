//! Reads by offset (Fetch) and lookups by time (ListOffsets).

use std::sync::Arc;

use super::Log;
use crate::error::{Result, StorageError};
use crate::segment::{decode_limit, FileRegion, Segment};

/// How far a read may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadLimit {
    /// Up to the log end (followers, tools).
    LogEnd,
    /// Up to the high watermark (consumers).
    HighWatermark,
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
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}

/// What ListOffsets asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// -2: the log start offset.
    Earliest,
    /// -1: the log end offset.
    Latest,
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
        let start = self.log_start_offset();
        let end = self.log_end_offset();
        let info = |region| ReadInfo {
            region,
            high_watermark: hw,
            log_start_offset: start,
            log_end_offset: end,
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
            ReadLimit::Offset(o) => o.min(end),
        };
        if offset >= upper {
            return Ok(info(None));
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
                    return Ok(info(Some(region)));
                }
            }
            next = self.segment_after(seg.base_offset, upper);
        }
        Ok(info(None))
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
