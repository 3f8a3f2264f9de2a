//! The producer's record accumulator: per topic-partition queues of batches
//! waiting for the sender.
//!
//! This module owns batching (`batch.size`), lingering (`linger.ms`), memory
//! accounting with back-pressure (`buffer.memory`), encoding closed batches
//! with [`BatchBuilder`] and the configured compression, and per-record
//! completion handles ([`RecordHandle`]) that the sender resolves to offsets
//! (`base offset + index`).
//!
//! It is pure: the current time is passed in as milliseconds (a manual
//! clock), there are no threads, timers or I/O. The async producer awaits
//! [`AppendOutcome::WouldBlock`] until [`RecordAccumulator::deallocate`] frees
//! memory, and sleeps until [`RecordAccumulator::next_ready_ms`].
//!
//! Memory model (Java's `BufferPool`): a new batch reserves its whole
//! buffer, `batch.size` bytes (the record's encoded size plus the 61-byte
//! batch header when that is larger), until the sender deallocates the
//! batch; records that fit the open batch reserve nothing more. The buffer
//! is allocated with that capacity, so records are encoded into it once
//! and never moved by a reallocation. Buffers of `batch.size` are reused
//! once the last request holding a batch lets go of it (`accumulator/pool.rs`).
//!
//! Delivery timeouts: [`RecordAccumulator::expire`] removes batches older
//! than `delivery.timeout.ms` (open, closed or waiting for a retry, muted
//! partitions included) so the producer can fail their records, and
//! [`RecordAccumulator::next_expiry_ms`] tells the sender when to look next.
//!
//! Retry backoff: [`RecordAccumulator::reenqueue_with_backoff`] puts a batch
//! back first in line; its partition is not drainable (and newer batches
//! wait behind it) until the backoff has passed.
//!
//! Idempotence: the accumulator does not own sequence numbers. The sender
//! looks at what a partition would drain next ([`RecordAccumulator::front`]:
//! a retry or a new batch), asks the producer's idempotence state whether
//! it may go, and drains it with [`RecordAccumulator::drain_next`], which
//! writes the producer id, epoch and base sequence it is given into a new
//! batch's header (a retry goes out as it was, the sender rewrites it when
//! its sequence was reset). [`RecordAccumulator::drain_partition_max`]
//! drains without producer state (id, epoch and base sequence -1).

use std::collections::{BTreeMap, VecDeque};

use bytes::{Bytes, BytesMut};
use sluice_protocol::record::batch::set_producer_state;
use sluice_protocol::record::codec::{encoded_record_len, ProducerInfo};
use sluice_protocol::record::{BatchBuilder, Compression, Record, RecordRef};

use crate::error::{ClientError, Result};

mod pool;

use pool::BatchPool;

/// Size of a v2 batch header (Kafka's `RECORD_BATCH_OVERHEAD`).
pub const BATCH_HEADER_LEN: usize = 61;

/// Producer settings the accumulator needs (Kafka 4 defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccumulatorConfig {
    /// `batch.size`: a batch is closed once the next record would exceed it.
    pub batch_size: usize,
    /// `linger.ms`: an open batch is sent this long after its creation.
    pub linger_ms: u64,
    /// `buffer.memory`: bytes buffered before appends block.
    pub buffer_memory: usize,
    /// `compression.type`.
    pub compression: Compression,
}

impl Default for AccumulatorConfig {
    fn default() -> Self {
        Self {
            batch_size: 16_384,
            linger_ms: 5,
            buffer_memory: 33_554_432,
            compression: Compression::None,
        }
    }
}

/// A topic and partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
}

impl TopicPartition {
    /// Builds a topic-partition.
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl std::fmt::Display for TopicPartition {
    /// `topic-partition`, as Kafka prints it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Identifies one batch for the lifetime of the accumulator.
pub type BatchId = u64;

/// Where an appended record sits: its batch and its index in that batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecordHandle {
    /// The batch the record was appended to.
    pub batch_id: BatchId,
    /// The record's position (offset delta) inside the batch.
    pub index: u32,
}

impl RecordHandle {
    /// The record's offset once its batch was written at `base_offset`.
    pub fn offset(&self, base_offset: i64) -> i64 {
        base_offset + i64::from(self.index)
    }
}

/// Result of [`RecordAccumulator::append`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendOutcome {
    /// The record was buffered.
    Appended {
        /// Resolves to the record's offset when the batch is acknowledged.
        handle: RecordHandle,
        /// Bytes reserved for the record (what the sticky partitioner counts).
        size: usize,
        /// The record's batch is full (the sender can be woken now).
        batch_full: bool,
        /// The record opened a new batch.
        new_batch: bool,
    },
    /// Buffering the record would exceed `buffer.memory`: wait for
    /// [`RecordAccumulator::deallocate`] and retry (within `max.block.ms`).
    WouldBlock {
        /// Bytes the record needs.
        needed: usize,
        /// Bytes currently free.
        available: usize,
    },
}

/// A batch being filled.
#[derive(Debug)]
struct OpenBatch {
    id: BatchId,
    builder: BatchBuilder,
    /// Encoded size of the batch so far (header included).
    size: usize,
    /// Memory reserved for the batch's buffer (at least `size`).
    reserved: usize,
    base_timestamp: i64,
    created_ms: u64,
    closed: bool,
}

/// A batch drained for sending: encoded bytes plus what the sender needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyBatch {
    /// The batch's id (matches [`RecordHandle::batch_id`]).
    pub id: BatchId,
    /// Destination.
    pub tp: TopicPartition,
    /// The encoded v2 batch (base offset 0; the broker assigns offsets),
    /// shared with the Produce requests that carry it (no copy per send).
    pub bytes: Bytes,
    /// Number of records.
    pub record_count: u32,
    /// Memory reserved for the batch, released by
    /// [`RecordAccumulator::deallocate`].
    pub reserved: usize,
    /// When the batch was opened (for `delivery.timeout.ms`).
    pub created_ms: u64,
    /// Producer id, epoch and base sequence written in the header.
    pub producer: ProducerInfo,
    /// How many times the batch was re-enqueued for retry.
    pub attempts: u32,
}

impl ReadyBatch {
    /// Rewrites the producer id, epoch and base sequence in the encoded
    /// header (and its CRC), e.g. after an idempotent producer's epoch bump
    /// reset the partition's sequences.
    pub fn set_producer(&mut self, producer: ProducerInfo) {
        if self.producer == producer || self.bytes.len() < BATCH_HEADER_LEN {
            return;
        }
        // A request still holding the bytes (a send that timed out) keeps
        // its copy; otherwise they are rewritten in place.
        let mut bytes = std::mem::take(&mut self.bytes)
            .try_into_mut()
            .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
        set_producer_state(
            &mut bytes,
            producer.producer_id,
            producer.producer_epoch,
            producer.base_sequence,
        );
        self.bytes = bytes.freeze();
        self.producer = producer;
    }
}

/// A batch dropped by [`RecordAccumulator::expire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredBatch {
    /// The batch's id (matches [`RecordHandle::batch_id`]).
    pub id: BatchId,
    /// Destination.
    pub tp: TopicPartition,
    /// Number of records.
    pub record_count: u32,
    /// When the batch was opened.
    pub created_ms: u64,
    /// Whether it had been sent before (it was waiting for a retry).
    pub retried: bool,
}

/// One partition's queue.
#[derive(Debug, Default)]
struct PartitionQueue {
    /// Batches not drained yet, oldest first; only the last may be open.
    batches: VecDeque<OpenBatch>,
    /// Batches given back by the sender for retry; they go first.
    retries: VecDeque<ReadyBatch>,
    /// The retries are not drained before this time (retry backoff).
    retry_not_before: u64,
    /// Muted partitions (a batch in flight with max in-flight 1) are skipped.
    muted: bool,
}

/// Per topic-partition record batches awaiting the sender.
#[derive(Debug)]
pub struct RecordAccumulator {
    config: AccumulatorConfig,
    queues: BTreeMap<TopicPartition, PartitionQueue>,
    used_memory: usize,
    next_batch_id: BatchId,
    flushing: bool,
    /// Batches are written with the transactional attribute
    /// ([`Self::set_transactional`]).
    transactional: bool,
    /// Buffers of finished batches, for new ones.
    pool: BatchPool,
}

/// What a partition would drain next ([`RecordAccumulator::front`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Front {
    /// A batch given back for a retry (it keeps its producer state).
    Retry {
        /// The batch.
        id: BatchId,
    },
    /// A batch never drained (it gets its producer state when drained).
    New {
        /// The batch.
        id: BatchId,
        /// Its records.
        records: u32,
    },
}

impl RecordAccumulator {
    /// An empty accumulator.
    pub fn new(config: AccumulatorConfig) -> Self {
        Self {
            config,
            queues: BTreeMap::new(),
            used_memory: 0,
            next_batch_id: 0,
            flushing: false,
            transactional: false,
            pool: BatchPool::new(config.batch_size, config.buffer_memory),
        }
    }

    /// Marks every batch drained from now on as transactional (the
    /// attribute bit a transactional producer's batches carry).
    pub fn set_transactional(&mut self, transactional: bool) {
        self.transactional = transactional;
    }

    /// The configuration.
    pub fn config(&self) -> &AccumulatorConfig {
        &self.config
    }

    /// Bytes currently reserved by buffered batches.
    pub fn used_memory(&self) -> usize {
        self.used_memory
    }

    /// Bytes free before appends block.
    pub fn available_memory(&self) -> usize {
        self.config.buffer_memory.saturating_sub(self.used_memory)
    }

    /// Appends `record` to `tp`'s open batch (opening a new one when it
    /// would exceed `batch.size`), at time `now_ms`.
    ///
    /// A record larger than `batch.size` gets a batch of its own; one larger
    /// than `buffer.memory` fails with [`ClientError::RecordTooLarge`].
    pub fn append(
        &mut self,
        tp: &TopicPartition,
        record: Record,
        now_ms: u64,
    ) -> Result<AppendOutcome> {
        self.append_at(tp, record.to_ref(), || now_ms)
    }

    /// [`Self::append`], reading the time from `now_ms` only when a new
    /// batch opens (most records join the open batch: no clock read).
    pub fn append_at(
        &mut self,
        tp: &TopicPartition,
        record: RecordRef<'_>,
        now_ms: impl FnOnce() -> u64,
    ) -> Result<AppendOutcome> {
        let batch_size = self.config.batch_size;
        if !self.queues.contains_key(tp) {
            self.queues.insert(tp.clone(), PartitionQueue::default());
        }
        let Some(queue) = self.queues.get_mut(tp) else {
            return Err(ClientError::InvalidArgument("no partition queue".into()));
        };
        // Room in the open batch?
        let fit = match queue.batches.back() {
            Some(b) if !b.closed => {
                let delta = i32::try_from(b.builder.len()).unwrap_or(i32::MAX);
                let size = encoded_record_len(
                    record,
                    delta,
                    record.timestamp.wrapping_sub(b.base_timestamp),
                );
                if b.size + size <= batch_size {
                    Some(size)
                } else {
                    None
                }
            }
            _ => None,
        };
        let (needed, new_batch) = match fit {
            Some(size) => (size, false),
            None => (BATCH_HEADER_LEN + encoded_record_len(record, 0, 0), true),
        };
        if needed > self.config.buffer_memory {
            return Err(ClientError::RecordTooLarge {
                size: needed,
                limit: self.config.buffer_memory,
                limit_name: "buffer.memory",
            });
        }
        // A new batch reserves its whole buffer.
        let reserve = if new_batch {
            needed.max(batch_size.min(self.config.buffer_memory))
        } else {
            0
        };
        let available = self.config.buffer_memory.saturating_sub(self.used_memory);
        if reserve > available {
            return Ok(AppendOutcome::WouldBlock {
                needed: reserve,
                available,
            });
        }
        if new_batch {
            if let Some(b) = queue.batches.back_mut() {
                b.closed = true;
            }
            let id = self.next_batch_id;
            self.next_batch_id += 1;
            queue.batches.push_back(OpenBatch {
                id,
                builder: BatchBuilder::with_buffer(
                    self.config.compression,
                    record.timestamp,
                    self.pool.take(reserve),
                ),
                size: 0,
                reserved: reserve,
                base_timestamp: record.timestamp,
                created_ms: now_ms(),
                closed: false,
            });
        }
        self.used_memory += reserve;
        let Some(b) = queue.batches.back_mut() else {
            return Err(ClientError::InvalidArgument("no open batch".into()));
        };
        let index = b.builder.len() as u32;
        b.builder.push_record_ref(record);
        b.size += needed;
        // Full when even a minimal record (7 bytes) would no longer fit.
        if b.size + 7 > batch_size {
            b.closed = true;
        }
        let (handle, batch_full) = (
            RecordHandle {
                batch_id: b.id,
                index,
            },
            b.closed,
        );
        Ok(AppendOutcome::Appended {
            handle,
            size: needed,
            batch_full,
            new_batch,
        })
    }

    fn is_ready(&self, q: &PartitionQueue, now_ms: u64) -> bool {
        if q.muted {
            return false;
        }
        if !q.retries.is_empty() {
            // Newer batches wait behind the retries.
            return now_ms >= q.retry_not_before;
        }
        match q.batches.front() {
            None => false,
            Some(b) => {
                b.closed
                    || self.flushing
                    || now_ms.saturating_sub(b.created_ms) >= self.config.linger_ms
            }
        }
    }

    /// Partitions with a batch ready to send at `now_ms` (full, lingered long
    /// enough, being flushed, or a retry), unmuted ones only.
    pub fn ready(&self, now_ms: u64) -> Vec<TopicPartition> {
        self.queues
            .iter()
            .filter(|(_, q)| self.is_ready(q, now_ms))
            .map(|(tp, _)| tp.clone())
            .collect()
    }

    /// When the next open batch's linger expires (the sender's wake-up
    /// time), or `None` without pending batches. A time `<= now` means some
    /// batch is ready already.
    pub fn next_ready_ms(&self) -> Option<u64> {
        self.next_ready_ms_where(|_| true)
    }

    /// [`Self::next_ready_ms`] over the partitions `include` accepts (the
    /// sender leaves out partitions it cannot send to right now).
    pub fn next_ready_ms_where(&self, include: impl Fn(&TopicPartition) -> bool) -> Option<u64> {
        self.queues
            .iter()
            .filter(|(tp, q)| !q.muted && include(tp))
            .filter_map(|(_, q)| {
                if !q.retries.is_empty() {
                    return Some(q.retry_not_before);
                }
                q.batches.front().map(|b| {
                    if b.closed || self.flushing {
                        0
                    } else {
                        b.created_ms.saturating_add(self.config.linger_ms)
                    }
                })
            })
            .min()
    }

    /// Drains every ready batch of every unmuted partition, oldest first per
    /// partition (retries before new batches), encoded with the configured
    /// compression. Memory stays reserved until [`Self::deallocate`].
    pub fn drain(&mut self, now_ms: u64) -> Result<Vec<ReadyBatch>> {
        let tps = self.ready(now_ms);
        let mut out = Vec::new();
        for tp in tps {
            out.extend(self.drain_partition(&tp, now_ms)?);
        }
        Ok(out)
    }

    /// Drains the ready batches of one partition (see [`Self::drain`]).
    pub fn drain_partition(&mut self, tp: &TopicPartition, now_ms: u64) -> Result<Vec<ReadyBatch>> {
        self.drain_partition_max(tp, now_ms, usize::MAX)
    }

    /// Drains at most `max` ready batches of one partition, oldest first
    /// (retries before new batches), new ones without producer state.
    pub fn drain_partition_max(
        &mut self,
        tp: &TopicPartition,
        now_ms: u64,
        max: usize,
    ) -> Result<Vec<ReadyBatch>> {
        let mut out = Vec::new();
        while out.len() < max {
            match self.drain_next(tp, now_ms, ProducerInfo::default())? {
                Some(b) => out.push(b),
                None => break,
            }
        }
        Ok(out)
    }

    /// What `tp` would drain next at `now_ms`, if anything: its first
    /// retry once the retry backoff has passed, else its oldest batch when
    /// it is ready (full, lingered, flushing). Muted partitions drain
    /// nothing.
    pub fn front(&self, tp: &TopicPartition, now_ms: u64) -> Option<Front> {
        let q = self.queues.get(tp)?;
        if q.muted {
            return None;
        }
        if let Some(r) = q.retries.front() {
            return (now_ms >= q.retry_not_before).then_some(Front::Retry { id: r.id });
        }
        let b = q.batches.front()?;
        let ready = b.closed
            || self.flushing
            || now_ms.saturating_sub(b.created_ms) >= self.config.linger_ms;
        ready.then_some(Front::New {
            id: b.id,
            records: b.builder.len() as u32,
        })
    }

    /// Drains what [`Self::front`] names: a retry unchanged, or a new batch
    /// encoded with the configured compression and `producer` written into
    /// its header. Memory stays reserved until [`Self::deallocate`].
    pub fn drain_next(
        &mut self,
        tp: &TopicPartition,
        now_ms: u64,
        producer: ProducerInfo,
    ) -> Result<Option<ReadyBatch>> {
        match self.front(tp, now_ms) {
            None => Ok(None),
            Some(Front::Retry { .. }) => {
                let Some(q) = self.queues.get_mut(tp) else {
                    return Ok(None);
                };
                let r = q.retries.pop_front();
                if q.retries.is_empty() {
                    q.retry_not_before = 0;
                }
                Ok(r)
            }
            Some(Front::New { .. }) => {
                let Some(b) = self.queues.get_mut(tp).and_then(|q| q.batches.pop_front()) else {
                    return Ok(None);
                };
                let count = b.builder.len() as u32;
                let (bytes, spare) = b
                    .builder
                    .producer(producer, self.transactional)
                    .finish_with_spare(0)
                    .map_err(|e| ClientError::Protocol(e.to_string()))?;
                // A compressed batch leaves its record buffer behind.
                if let Some(buffer) = spare {
                    self.pool.give_back(buffer);
                }
                Ok(Some(ReadyBatch {
                    id: b.id,
                    tp: tp.clone(),
                    bytes: self.pool.seal(bytes),
                    record_count: count,
                    reserved: b.reserved,
                    created_ms: b.created_ms,
                    producer,
                    attempts: 0,
                }))
            }
        }
    }

    /// Releases the memory of a batch the sender finished with (acknowledged
    /// or failed for good), unblocking waiting appends.
    pub fn deallocate(&mut self, batch: &ReadyBatch) {
        self.used_memory = self.used_memory.saturating_sub(batch.reserved);
    }

    /// Gives a drained batch back for a retry; it is drained again before
    /// newer batches of its partition, unchanged (same sequence numbers).
    pub fn reenqueue(&mut self, batch: ReadyBatch) {
        self.reenqueue_with_backoff(batch, 0);
    }

    /// [`Self::reenqueue`], but the partition's retries (and so its newer
    /// batches) are not drained before `not_before_ms`.
    pub fn reenqueue_with_backoff(&mut self, mut batch: ReadyBatch, not_before_ms: u64) {
        batch.attempts += 1;
        let q = self.queues.entry(batch.tp.clone()).or_default();
        q.retry_not_before = q.retry_not_before.max(not_before_ms);
        // Keep retries ordered by batch id (i.e. by append order).
        let pos = q
            .retries
            .iter()
            .position(|r| r.id > batch.id)
            .unwrap_or(q.retries.len());
        q.retries.insert(pos, batch);
    }

    /// Mutes a partition (its batches are not drained) while a batch is in
    /// flight, for `max.in.flight.requests.per.connection = 1` ordering.
    pub fn mute(&mut self, tp: &TopicPartition) {
        self.queues.entry(tp.clone()).or_default().muted = true;
    }

    /// Unmutes a partition.
    pub fn unmute(&mut self, tp: &TopicPartition) {
        if let Some(q) = self.queues.get_mut(tp) {
            q.muted = false;
        }
    }

    /// Makes every batch ready regardless of `linger.ms` (`flush()`), until
    /// [`Self::end_flush`].
    pub fn begin_flush(&mut self) {
        self.flushing = true;
    }

    /// Ends a flush.
    pub fn end_flush(&mut self) {
        self.flushing = false;
    }

    /// Whether a flush is in progress.
    pub fn is_flushing(&self) -> bool {
        self.flushing
    }

    /// Whether any record is still buffered (not drained).
    pub fn has_undrained(&self) -> bool {
        self.queues
            .values()
            .any(|q| !q.batches.is_empty() || !q.retries.is_empty())
    }

    /// Removes every undrained batch created at least `delivery_timeout_ms`
    /// before `now_ms` (including open batches, retries and batches of
    /// muted partitions), frees their memory and returns them so that their
    /// records can be failed. Batches are checked oldest first per
    /// partition; the first younger one stops the scan.
    pub fn expire(&mut self, now_ms: u64, delivery_timeout_ms: u64) -> Vec<ExpiredBatch> {
        let expired = |created: u64| now_ms.saturating_sub(created) >= delivery_timeout_ms;
        let mut out = Vec::new();
        let mut freed = 0;
        for (tp, q) in &mut self.queues {
            while q.retries.front().is_some_and(|r| expired(r.created_ms)) {
                let Some(r) = q.retries.pop_front() else {
                    break;
                };
                freed += r.reserved;
                out.push(ExpiredBatch {
                    id: r.id,
                    tp: tp.clone(),
                    record_count: r.record_count,
                    created_ms: r.created_ms,
                    retried: true,
                });
            }
            if q.retries.is_empty() {
                q.retry_not_before = 0;
            } else {
                continue;
            }
            while q.batches.front().is_some_and(|b| expired(b.created_ms)) {
                let Some(b) = q.batches.pop_front() else {
                    break;
                };
                freed += b.reserved;
                out.push(ExpiredBatch {
                    id: b.id,
                    tp: tp.clone(),
                    record_count: b.builder.len() as u32,
                    created_ms: b.created_ms,
                    retried: false,
                });
            }
        }
        self.used_memory = self.used_memory.saturating_sub(freed);
        out
    }

    /// When the oldest undrained batch reaches `delivery_timeout_ms` (the
    /// sender's next [`Self::expire`] call), or `None` without batches.
    pub fn next_expiry_ms(&self, delivery_timeout_ms: u64) -> Option<u64> {
        self.queues
            .values()
            .filter_map(|q| {
                let retry = q.retries.iter().map(|r| r.created_ms).min();
                let open = q.batches.front().map(|b| b.created_ms);
                retry.into_iter().chain(open).min()
            })
            .min()
            .map(|c| c.saturating_add(delivery_timeout_ms))
    }

    /// Drops the batches never drained (they have no sequence number yet),
    /// keeping batches waiting for a retry, and frees their memory: a
    /// transactional producer's abort (Kafka's `abortUndrainedBatches`).
    /// Returns the ids whose records must fail.
    pub fn abort_new_batches(&mut self) -> Vec<BatchId> {
        let mut ids = Vec::new();
        let mut freed = 0;
        for q in self.queues.values_mut() {
            for b in q.batches.drain(..) {
                freed += b.reserved;
                ids.push(b.id);
            }
        }
        self.used_memory = self.used_memory.saturating_sub(freed);
        ids
    }

    /// Drops every undrained batch (producer close with a zero timeout),
    /// returning the ids whose records must fail, and frees their memory.
    pub fn abort_undrained(&mut self) -> Vec<BatchId> {
        let mut ids = Vec::new();
        let mut freed = 0;
        for q in self.queues.values_mut() {
            for b in q.batches.drain(..) {
                freed += b.reserved;
                ids.push(b.id);
            }
            for r in q.retries.drain(..) {
                freed += r.reserved;
                ids.push(r.id);
            }
            q.retry_not_before = 0;
        }
        self.used_memory = self.used_memory.saturating_sub(freed);
        ids
    }
}

#[cfg(test)]
mod tests;
