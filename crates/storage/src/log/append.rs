//! The produce path: validate batches (see `validate`: record framing is
//! walked, records are not decoded), check producer ids, epochs and
//! sequences (see `producer`; batches without a producer id skip it),
//! assign offsets by patching headers in place, roll when needed, write.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use sluice_protocol::record::batch::{self, BatchHeader};

use super::producer::ProducerCheck;
use super::validate::{validate, AppendOrigin};
use super::{lock, Log};
use crate::config::{LogConfig, TimestampType};
use crate::error::{Result, StorageError};
use crate::producer::{CompletedTxn, ProducerAppendInfo};
use crate::segment::Segment;

/// What [`Log::write_batches`] writes: checked batches with final offsets.
struct Written<'a> {
    config: &'a LogConfig,
    records: &'a [u8],
    batches: Vec<(usize, BatchHeader)>,
    producer_updates: Option<(Vec<ProducerAppendInfo>, Vec<CompletedTxn>)>,
    base_offset: i64,
    last_offset: i64,
    log_append_time: i64,
    max_timestamp: i64,
    record_count: i64,
    now: i64,
}

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
    /// The append repeated a batch its producer already wrote (same
    /// producer id, epoch and sequence range as one of its last five):
    /// nothing was written; `base_offset` and `last_offset` are the original
    /// batch's, `log_append_time` its timestamp (as Kafka answers),
    /// `record_count` is 0 and `batches` empty.
    pub duplicate: bool,
}

impl Log {
    /// Appends batches written by the broker itself (coordinators, the
    /// metadata log, tools): [`Log::append_as_leader_from`] with
    /// [`AppendOrigin::Coordinator`].
    pub fn append_as_leader(&self, records: &mut [u8], leader_epoch: i32) -> Result<AppendInfo> {
        self.append_as_leader_from(records, leader_epoch, AppendOrigin::Coordinator)
    }

    /// Appends one or more v2 batches, back to back, as the leader.
    ///
    /// Every batch is validated first as Kafka's `LogValidator` does (see
    /// `validate`: header, CRC32C, `max.message.bytes`, record count and
    /// framing, keys on compacted topics, per-record timestamp bounds; more
    /// for [`AppendOrigin::Client`]), its max timestamp set (LogAppendTime:
    /// the broker's time) and, when the topic's `compression.type` names
    /// another codec, its records recompressed. Then base offsets and the
    /// partition leader epoch are patched in place and the bytes written as
    /// they are. A failed check appends nothing.
    ///
    /// Batches with a producer id are checked against the partition's
    /// producer state under the append lock (Kafka's
    /// `analyzeAndValidateProducerState`): a stale epoch fails with
    /// [`StorageError::InvalidProducerEpoch`], a sequence gap (client
    /// batches) with [`StorageError::OutOfOrderSequence`]; a client batch
    /// equal to one of its producer's last five is answered with
    /// [`AppendInfo::duplicate`] and the original offsets.
    ///
    /// [`StorageError::InvalidProducerEpoch`]: crate::StorageError::InvalidProducerEpoch
    /// [`StorageError::OutOfOrderSequence`]: crate::StorageError::OutOfOrderSequence
    pub fn append_as_leader_from(
        &self,
        records: &mut [u8],
        leader_epoch: i32,
        origin: AppendOrigin,
    ) -> Result<AppendInfo> {
        let config = self.config();
        let now = self.now_ms();
        let mut validated = validate(records, &config, now, &self.tp, origin)?;
        let mut batches = validated.batches;
        let records: &mut [u8] = match validated.rebuilt.as_mut() {
            Some(rebuilt) => rebuilt,
            None => records,
        };

        let _w = self.writer();
        self.check_online()?;
        let base_offset = self.log_end_offset();
        let append_time = match config.message_timestamp_type {
            TimestampType::LogAppendTime => now,
            TimestampType::CreateTime => -1,
        };
        let producer_updates = if batches.iter().any(|(_, h)| h.producer_id >= 0) {
            match self.check_producers(records, &batches, base_offset, origin)? {
                ProducerCheck::Duplicate(dup) => {
                    return Ok(AppendInfo {
                        base_offset: dup.first_offset(),
                        last_offset: dup.last_offset,
                        log_append_time: dup.timestamp,
                        log_start_offset: self.log_start_offset(),
                        max_timestamp: dup.timestamp,
                        record_count: 0,
                        batches: Vec::new(),
                        duplicate: true,
                    });
                }
                ProducerCheck::Updates(u, completed) => Some((u, completed)),
            }
        } else {
            None
        };
        let mut next = base_offset;
        let mut max_timestamp = -1;
        let mut record_count = 0i64;
        for (pos, h) in &mut batches {
            let bytes = &mut records[*pos..*pos + h.total_size()];
            // Outside the CRC; timestamps were set by `validate`.
            batch::set_base_offset(bytes, next);
            batch::set_partition_leader_epoch(bytes, leader_epoch);
            h.base_offset = next;
            h.partition_leader_epoch = leader_epoch;
            next = h.last_offset() + 1;
            max_timestamp = max_timestamp.max(h.max_timestamp);
            record_count += i64::from(h.records_count);
        }
        self.write_batches(Written {
            config: &config,
            records,
            batches,
            producer_updates,
            base_offset,
            last_offset: next - 1,
            log_append_time: append_time,
            max_timestamp,
            record_count,
            now,
        })
    }

    /// Appends batches a follower fetched from its partition leader
    /// (Kafka's `appendAsFollower`): they keep the leader's offsets,
    /// partition leader epochs and timestamps, byte for byte. Each batch's
    /// header and CRC32C are checked (the bytes crossed the network); the
    /// first batch must start at or after the log end
    /// ([`StorageError::UnexpectedAppendOffset`] otherwise, a follower
    /// that did not truncate) and offsets must grow. Producer state follows
    /// without checks (the leader made them), and each batch's epoch is
    /// assigned in the leader epoch cache at its base offset. An empty
    /// `records` appends nothing.
    ///
    /// [`StorageError::UnexpectedAppendOffset`]: crate::StorageError::UnexpectedAppendOffset
    pub fn append_as_follower(&self, records: &[u8]) -> Result<AppendInfo> {
        let mut batches: Vec<(usize, BatchHeader)> = Vec::new();
        let mut pos = 0usize;
        while pos < records.len() {
            let rest = &records[pos..];
            let h = BatchHeader::parse(rest)?;
            let size = h.total_size();
            if size > rest.len() {
                return Err(sluice_protocol::ProtocolError::Truncated {
                    what: "record batch",
                    need: size,
                    have: rest.len(),
                }
                .into());
            }
            batch::validate_crc(&rest[..size])?;
            if let Some((_, prev)) = batches.last() {
                if h.base_offset <= prev.last_offset() {
                    return Err(StorageError::InvalidRecord(format!(
                        "Out of order offsets in the records fetched for {}: {} after {}",
                        self.tp,
                        h.base_offset,
                        prev.last_offset()
                    )));
                }
            }
            batches.push((pos, h));
            pos += size;
        }
        let _w = self.writer();
        self.check_online()?;
        let log_end = self.log_end_offset();
        let (Some((_, first)), Some((_, last))) = (batches.first(), batches.last()) else {
            return Ok(AppendInfo {
                base_offset: log_end,
                last_offset: log_end - 1,
                log_append_time: -1,
                log_start_offset: self.log_start_offset(),
                max_timestamp: -1,
                record_count: 0,
                batches: Vec::new(),
                duplicate: false,
            });
        };
        if first.base_offset < log_end {
            return Err(StorageError::UnexpectedAppendOffset {
                partition: self.tp.to_string(),
                first: first.base_offset,
                log_end,
            });
        }
        let (base_offset, last_offset) = (first.base_offset, last.last_offset());
        let config = self.config();
        let now = self.now_ms();
        let max_timestamp = batches
            .iter()
            .map(|(_, h)| h.max_timestamp)
            .max()
            .unwrap_or(-1);
        let record_count: i64 = batches
            .iter()
            .map(|(_, h)| i64::from(h.records_count))
            .sum();
        let producer_updates = if batches.iter().any(|(_, h)| h.producer_id >= 0) {
            Some(self.replica_producer_updates(records, &batches)?)
        } else {
            None
        };
        self.write_batches(Written {
            config: &config,
            records,
            batches,
            producer_updates,
            base_offset,
            last_offset,
            log_append_time: -1,
            max_timestamp,
            record_count,
            now,
        })
    }

    /// The part of an append that both leaders and followers do once the
    /// batches are checked and their offsets final: roll if needed, write
    /// the segment and its indexes, move the log end, apply producer
    /// state, record each batch's leader epoch in the epoch cache, and
    /// flush by `flush.messages`.
    fn write_batches(&self, w: Written<'_>) -> Result<AppendInfo> {
        let Written {
            config,
            records,
            batches,
            producer_updates,
            base_offset,
            last_offset,
            log_append_time,
            max_timestamp,
            record_count,
            now,
        } = w;
        let segment = self.maybe_roll(
            config,
            records.len() as u64,
            last_offset,
            now,
            max_timestamp,
        )?;
        segment
            .append(records, &batches, config.index_interval_bytes)
            .map_err(|e| self.go_offline(e))?;
        self.log_end_offset
            .store(last_offset + 1, Ordering::Release);
        if let Some((updates, completed)) = producer_updates {
            // A failed transaction index write leaves the index behind the
            // log: the log goes offline and recovery rebuilds the index.
            self.apply_producer_updates(updates, &completed, &segment, now)
                .map_err(|e| self.go_offline(e))?;
        }
        {
            let mut epochs = lock(&self.epochs);
            let mut changed = false;
            for (_, h) in &batches {
                changed |= epochs.assign(h.partition_leader_epoch, h.base_offset);
            }
            if changed {
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
            log_append_time,
            log_start_offset: self.log_start_offset(),
            max_timestamp,
            record_count,
            batches: batches.into_iter().map(|(_, h)| h).collect(),
            duplicate: false,
        };
        if unflushed >= config.flush_messages {
            self.flush()?;
        }
        Ok(info)
    }

    /// Whether appending `bytes` more would likely wait on the disk: a roll
    /// (full, aged or index-full active segment: seal, fsync, new files) or
    /// an fsync due by `flush.messages`. Cheap and advisory, for callers
    /// that move such appends off latency-sensitive threads; a plain append
    /// only writes into the page cache.
    pub fn append_may_block(&self, bytes: usize) -> bool {
        let config = self.config();
        let active = self.active_segment();
        let non_empty = active.size() > 0;
        let now = self.now_ms();
        let full = non_empty && active.size() + bytes as u64 > config.segment_bytes;
        let aged = non_empty
            && active.time_waited_for_roll(now, now)
                > config.max_segment_ms() - active.roll_jitter_ms();
        let flush_due = config.flush_messages < i64::MAX
            && self.unflushed_messages.load(Ordering::Acquire) + bytes as i64
                >= config.flush_messages;
        full || aged || flush_due || active.index_full()
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
