//! The produce path: validate batches without decoding records, assign
//! offsets by patching headers in place, roll when needed, write.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use sluice_protocol::record::batch::{self, BatchHeader};
use sluice_protocol::ProtocolError;

use super::{lock, Log};
use crate::config::TimestampType;
use crate::error::{Result, StorageError};
use crate::segment::Segment;

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The broker time stamped into the batches (LogAppendTime), else -1.
    pub log_append_time: i64,
    pub log_start_offset: i64,
    pub max_timestamp: i64,
    pub record_count: i64,
    /// The appended batch headers with their final offsets: producer id,
    /// epoch and base sequence per batch.
    pub batches: Vec<BatchHeader>,
}

impl Log {
    /// Appends a producer's batches (one or more v2 batches, back to back).
    ///
    /// Each batch is checked (length, magic, CRC32C, record count against
    /// `lastOffsetDelta`, `max.message.bytes`, timestamp bounds); then base
    /// offsets and the partition leader epoch are patched in place (with
    /// LogAppendTime also the timestamp, and the CRC recomputed) and the
    /// bytes are written as they are. A failed check appends nothing.
    pub fn append_as_leader(&self, records: &mut [u8], leader_epoch: i32) -> Result<AppendInfo> {
        let config = self.config();
        let now = self.now_ms();
        let mut batches = validate(records, &config, now)?;

        let _w = self.writer();
        self.check_online()?;
        let base_offset = self.log_end_offset();
        let append_time = match config.message_timestamp_type {
            TimestampType::LogAppendTime => now,
            TimestampType::CreateTime => -1,
        };
        let mut next = base_offset;
        let mut max_timestamp = -1;
        let mut record_count = 0i64;
        for (pos, h) in &mut batches {
            let bytes = &mut records[*pos..*pos + h.total_size()];
            batch::set_base_offset(bytes, next);
            batch::set_partition_leader_epoch(bytes, leader_epoch);
            if append_time >= 0 {
                batch::set_log_append_time(bytes, append_time);
                h.max_timestamp = append_time;
                h.attributes |= 0x08;
            }
            h.base_offset = next;
            h.partition_leader_epoch = leader_epoch;
            next = h.last_offset() + 1;
            max_timestamp = max_timestamp.max(h.max_timestamp);
            record_count += i64::from(h.records_count);
        }
        let last_offset = next - 1;

        let segment = self.maybe_roll(
            &config,
            records.len() as u64,
            last_offset,
            now,
            max_timestamp,
        )?;
        segment
            .append(records, &batches, config.index_interval_bytes)
            .map_err(|e| self.go_offline(e))?;
        self.log_end_offset.store(next, Ordering::Release);
        {
            let mut epochs = lock(&self.epochs);
            if epochs.assign(leader_epoch, base_offset) {
                epochs.flush().map_err(|e| self.go_offline(e))?;
            }
        }
        let unflushed = self
            .unflushed_messages
            .fetch_add(record_count, Ordering::AcqRel)
            + record_count;
        let info = AppendInfo {
            base_offset,
            last_offset,
            log_append_time: append_time,
            log_start_offset: self.log_start_offset(),
            max_timestamp,
            record_count,
            batches: batches.into_iter().map(|(_, h)| h).collect(),
        };
        if unflushed >= config.flush_messages {
            self.flush()?;
        }
        Ok(info)
    }

    /// Rolls when the active segment cannot take `size` more bytes, has
    /// aged past `segment.ms` (less its jitter; on compacted topics at most
    /// `max.compaction.lag.ms`), has a full index, or cannot express
    /// `last_offset` as a 32-bit relative offset. Writer only.
    fn maybe_roll(
        &self,
        config: &crate::config::LogConfig,
        size: u64,
        last_offset: i64,
        now: i64,
        max_timestamp: i64,
    ) -> Result<Arc<Segment>> {
        let active = self.active_segment();
        let non_empty = active.size() > 0;
        let full = non_empty && active.size() + size > config.segment_bytes;
        let aged = non_empty
            && active.time_waited_for_roll(now, max_timestamp)
                > config.max_segment_ms() - active.roll_jitter_ms();
        let index_full = active.index_full();
        let overflow = !active.can_hold_offset(last_offset);
        if full || aged || index_full || overflow {
            tracing::debug!(
                partition = %self.tp, full, aged, index_full, overflow, "rolling segment"
            );
            return self.roll_locked();
        }
        Ok(active)
    }
}

/// Checks every batch of a produce request; returns `(position, header)`s.
fn validate(
    records: &[u8],
    config: &crate::config::LogConfig,
    now: i64,
) -> Result<Vec<(usize, BatchHeader)>> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < records.len() {
        let rest = &records[pos..];
        let h = BatchHeader::parse(rest)?;
        let size = h.total_size();
        if size > rest.len() {
            return Err(ProtocolError::Truncated {
                what: "record batch",
                need: size,
                have: rest.len(),
            }
            .into());
        }
        if size as u64 > config.max_message_bytes {
            return Err(StorageError::RecordTooLarge {
                size,
                max: config.max_message_bytes as usize,
            });
        }
        batch::validate_crc(&rest[..size])?;
        h.validate_as_produced()?;
        if config.message_timestamp_type == TimestampType::CreateTime {
            check_timestamp(h.base_timestamp, config, now)?;
            check_timestamp(h.max_timestamp, config, now)?;
        }
        out.push((pos, h));
        pos += size;
    }
    if out.is_empty() {
        return Err(ProtocolError::InvalidBatch("no record batch in the request".into()).into());
    }
    Ok(out)
}

fn check_timestamp(ts: i64, config: &crate::config::LogConfig, now: i64) -> Result<()> {
    if ts < 0 {
        return Ok(()); // no timestamp (-1): nothing to bound
    }
    if now.saturating_sub(ts) > config.message_timestamp_before_max_ms {
        return Err(StorageError::InvalidTimestamp {
            timestamp: ts,
            reason: format!(
                "older than message.timestamp.before.max.ms ({})",
                config.message_timestamp_before_max_ms
            ),
        });
    }
    if ts.saturating_sub(now) > config.message_timestamp_after_max_ms {
        return Err(StorageError::InvalidTimestamp {
            timestamp: ts,
            reason: format!(
                "newer than message.timestamp.after.max.ms ({})",
                config.message_timestamp_after_max_ms
            ),
        });
    }
    Ok(())
}
