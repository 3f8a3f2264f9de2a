//! The v2 record batch header, read and patched in place.
//!
//! Layout (big-endian), as in Kafka's `DefaultRecordBatch`:
//!
//! | offset | size | field                |
//! |-------:|-----:|----------------------|
//! |      0 |    8 | baseOffset           |
//! |      8 |    4 | batchLength          |
//! |     12 |    4 | partitionLeaderEpoch |
//! |     16 |    1 | magic (2)            |
//! |     17 |    4 | crc (CRC32C)         |
//! |     21 |    2 | attributes           |
//! |     23 |    4 | lastOffsetDelta      |
//! |     27 |    8 | baseTimestamp        |
//! |     35 |    8 | maxTimestamp         |
//! |     43 |    8 | producerId           |
//! |     51 |    2 | producerEpoch        |
//! |     53 |    4 | baseSequence         |
//! |     57 |    4 | recordsCount         |
//! |     61 |    … | records              |
//!
//! The CRC covers attributes to the end of the batch, so base offset, batch
//! length and partition leader epoch can be rewritten without recomputing it.

use crate::error::{ProtocolError, Result};

use super::compression::Compression;

/// Bytes before the batch length field counts: base offset and length.
pub const LOG_OVERHEAD: usize = 12;
/// Size of the fixed batch header.
pub const HEADER_LEN: usize = 61;
/// The only magic value Sluice stores.
pub const MAGIC_V2: i8 = 2;

pub const BASE_OFFSET_OFFSET: usize = 0;
pub const LENGTH_OFFSET: usize = 8;
pub const PARTITION_LEADER_EPOCH_OFFSET: usize = 12;
pub const MAGIC_OFFSET: usize = 16;
pub const CRC_OFFSET: usize = 17;
pub const ATTRIBUTES_OFFSET: usize = 21;
pub const LAST_OFFSET_DELTA_OFFSET: usize = 23;
pub const BASE_TIMESTAMP_OFFSET: usize = 27;
pub const MAX_TIMESTAMP_OFFSET: usize = 35;
pub const PRODUCER_ID_OFFSET: usize = 43;
pub const PRODUCER_EPOCH_OFFSET: usize = 51;
pub const BASE_SEQUENCE_OFFSET: usize = 53;
pub const RECORDS_COUNT_OFFSET: usize = 57;

const COMPRESSION_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_FLAG: i16 = 0x08;
const TRANSACTIONAL_FLAG: i16 = 0x10;
const CONTROL_FLAG: i16 = 0x20;
const DELETE_HORIZON_FLAG: i16 = 0x40;

/// Whether record timestamps were set by the producer or by the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// A parsed copy of the fixed header of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// Bytes after the length field (total size minus [`LOG_OVERHEAD`]).
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    i32::from_be_bytes(a)
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

impl BatchHeader {
    /// Reads the header from the first [`HEADER_LEN`] bytes of `buf`.
    ///
    /// Checks only what the header alone can tell: enough bytes, magic 2 and
    /// a batch length that covers at least the header. The CRC is checked by
    /// [`validate_crc`] once the whole batch is at hand.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        if buf.len() < HEADER_LEN {
            // Report the magic first when we can see it: a v0/v1 message set
            // is shorter than a v2 header and deserves the clearer error.
            if buf.len() > MAGIC_OFFSET && buf[MAGIC_OFFSET] as i8 != MAGIC_V2 {
                return Err(ProtocolError::UnsupportedMagic(buf[MAGIC_OFFSET] as i8));
            }
            return Err(ProtocolError::Truncated {
                what: "record batch header",
                need: HEADER_LEN,
                have: buf.len(),
            });
        }
        let magic = buf[MAGIC_OFFSET] as i8;
        if magic != MAGIC_V2 {
            return Err(ProtocolError::UnsupportedMagic(magic));
        }
        let batch_length = be_i32(buf, LENGTH_OFFSET);
        if batch_length < (HEADER_LEN - LOG_OVERHEAD) as i32 {
            return Err(ProtocolError::InvalidBatchLength(batch_length));
        }
        Ok(Self {
            base_offset: be_i64(buf, BASE_OFFSET_OFFSET),
            batch_length,
            partition_leader_epoch: be_i32(buf, PARTITION_LEADER_EPOCH_OFFSET),
            magic,
            crc: be_i32(buf, CRC_OFFSET) as u32,
            attributes: be_i16(buf, ATTRIBUTES_OFFSET),
            last_offset_delta: be_i32(buf, LAST_OFFSET_DELTA_OFFSET),
            base_timestamp: be_i64(buf, BASE_TIMESTAMP_OFFSET),
            max_timestamp: be_i64(buf, MAX_TIMESTAMP_OFFSET),
            producer_id: be_i64(buf, PRODUCER_ID_OFFSET),
            producer_epoch: be_i16(buf, PRODUCER_EPOCH_OFFSET),
            base_sequence: be_i32(buf, BASE_SEQUENCE_OFFSET),
            records_count: be_i32(buf, RECORDS_COUNT_OFFSET),
        })
    }

    /// Total bytes of the batch including base offset and length fields.
    pub fn total_size(&self) -> usize {
        self.batch_length as usize + LOG_OVERHEAD
    }

    /// Offset of the last record (base offset plus last offset delta).
    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }

    /// The compression codec named by the attributes.
    pub fn compression(&self) -> Result<Compression> {
        Compression::from_id((self.attributes & COMPRESSION_MASK) as u8)
    }

    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & TIMESTAMP_TYPE_FLAG != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_FLAG != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_FLAG != 0
    }

    pub fn has_delete_horizon(&self) -> bool {
        self.attributes & DELETE_HORIZON_FLAG != 0
    }

    /// Checks what a producer's batch must satisfy beyond the CRC: a known
    /// codec, at least one record, and a record count that matches
    /// `lastOffsetDelta + 1` (producers never leave offset gaps).
    pub fn validate_as_produced(&self) -> Result<()> {
        self.compression()?;
        if self.records_count < 1 {
            return Err(ProtocolError::InvalidBatch(format!(
                "record count {} is not positive",
                self.records_count
            )));
        }
        if i64::from(self.last_offset_delta) + 1 != i64::from(self.records_count) {
            return Err(ProtocolError::InvalidBatch(format!(
                "record count {} does not match last offset delta {}",
                self.records_count, self.last_offset_delta
            )));
        }
        Ok(())
    }
}

/// CRC32C (Castagnoli), the checksum of v2 batches. Uses the carry-less
/// multiply instructions where the CPU has them.
pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, data) as u32
}

/// CRC32C over data that arrives in pieces.
#[derive(Debug, Clone)]
pub struct Crc32c(crc_fast::Digest);

impl Default for Crc32c {
    fn default() -> Self {
        Self(crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi))
    }
}

impl Crc32c {
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    pub fn finish(&self) -> u32 {
        self.0.finalize() as u32
    }
}

/// Computes the CRC32C of a whole batch (attributes to end).
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc32c(&batch[ATTRIBUTES_OFFSET..])
}

/// Checks that `batch` is exactly one complete batch whose stored CRC32C
/// matches its contents. Returns the parsed header.
pub fn validate_crc(batch: &[u8]) -> Result<BatchHeader> {
    let header = BatchHeader::parse(batch)?;
    if header.total_size() != batch.len() {
        return Err(ProtocolError::InvalidBatch(format!(
            "batch length field says {} bytes, buffer holds {}",
            header.total_size(),
            batch.len()
        )));
    }
    let computed = compute_crc(batch);
    if computed != header.crc {
        return Err(ProtocolError::CrcMismatch {
            stored: header.crc,
            computed,
        });
    }
    Ok(header)
}

/// Writes the base offset (outside the CRC).
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) {
    batch[BASE_OFFSET_OFFSET..BASE_OFFSET_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
}

/// Writes the partition leader epoch (outside the CRC).
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) {
    batch[PARTITION_LEADER_EPOCH_OFFSET..PARTITION_LEADER_EPOCH_OFFSET + 4]
        .copy_from_slice(&epoch.to_be_bytes());
}

/// Rewrites the producer id, epoch and base sequence (inside the CRC) and
/// recomputes the CRC, as Kafka's `ProducerBatch.resetProducerState` does
/// when an idempotent producer re-sends a batch under a bumped epoch.
/// `batch` must hold at least a whole header.
pub fn set_producer_state(
    batch: &mut [u8],
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
) {
    batch[PRODUCER_ID_OFFSET..PRODUCER_ID_OFFSET + 8].copy_from_slice(&producer_id.to_be_bytes());
    batch[PRODUCER_EPOCH_OFFSET..PRODUCER_EPOCH_OFFSET + 2]
        .copy_from_slice(&producer_epoch.to_be_bytes());
    batch[BASE_SEQUENCE_OFFSET..BASE_SEQUENCE_OFFSET + 4]
        .copy_from_slice(&base_sequence.to_be_bytes());
    let crc = compute_crc(batch);
    batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Marks the batch as LogAppendTime with `timestamp` as its max timestamp
/// and recomputes the CRC, as Kafka's `DefaultRecordBatch.setMaxTimestamp`
/// does. Readers take every record's timestamp from the max timestamp.
pub fn set_log_append_time(batch: &mut [u8], timestamp: i64) {
    set_max_timestamp(batch, TimestampType::LogAppendTime, timestamp);
}

/// Kafka's `DefaultRecordBatch.setMaxTimestamp`: writes the timestamp type
/// and max timestamp and recomputes the CRC, unless both are already what
/// they should be (then the batch is left untouched). Returns whether it
/// changed anything.
pub fn set_max_timestamp(batch: &mut [u8], ts_type: TimestampType, timestamp: i64) -> bool {
    let attrs = be_i16(batch, ATTRIBUTES_OFFSET);
    let current = if attrs & TIMESTAMP_TYPE_FLAG != 0 {
        TimestampType::LogAppendTime
    } else {
        TimestampType::CreateTime
    };
    if current == ts_type && be_i64(batch, MAX_TIMESTAMP_OFFSET) == timestamp {
        return false;
    }
    let attrs = match ts_type {
        TimestampType::LogAppendTime => attrs | TIMESTAMP_TYPE_FLAG,
        TimestampType::CreateTime => attrs & !TIMESTAMP_TYPE_FLAG,
    };
    batch[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attrs.to_be_bytes());
    batch[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8].copy_from_slice(&timestamp.to_be_bytes());
    let crc = compute_crc(batch);
    batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    true
}

/// Iterates over complete batches in a buffer of concatenated batches,
/// yielding `(position, header)`. Stops (returning `None`) at a trailing
/// partial batch; [`BatchIter::remainder`] then tells how many bytes were
/// left. A malformed header yields one error and ends the iteration.
#[derive(Debug)]
pub struct BatchIter<'a> {
    buf: &'a [u8],
    pos: usize,
    failed: bool,
}

impl<'a> BatchIter<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self {
            buf,
            pos: 0,
            failed: false,
        }
    }

    /// Position just after the last batch yielded.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes after the last complete batch.
    pub fn remainder(&self) -> usize {
        self.buf.len() - self.pos
    }
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = Result<(usize, BatchHeader, &'a [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let rest = &self.buf[self.pos..];
        if rest.len() < HEADER_LEN {
            return None;
        }
        match BatchHeader::parse(rest) {
            Ok(h) => {
                let size = h.total_size();
                if rest.len() < size {
                    return None;
                }
                let at = self.pos;
                self.pos += size;
                Some(Ok((at, h, &rest[..size])))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::codec::{BatchBuilder, Record};

    fn sample() -> Vec<u8> {
        let mut b = BatchBuilder::new(Compression::None, 1_000);
        b.push(Record::new(Some(b"k".to_vec()), Some(b"v".to_vec()), 1_000));
        b.push(Record::new(None, Some(b"v2".to_vec()), 1_005));
        b.build(0).expect("build")
    }

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        // CRC-32C check value of "123456789" (RFC 3720 / iSCSI).
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        let mut c = Crc32c::default();
        c.update(b"1234");
        c.update(b"56789");
        assert_eq!(c.finish(), 0xe306_9283);
    }

    #[test]
    fn header_roundtrip_and_crc() {
        let batch = sample();
        let h = validate_crc(&batch).expect("valid");
        assert_eq!(h.records_count, 2);
        assert_eq!(h.last_offset_delta, 1);
        assert_eq!(h.max_timestamp, 1_005);
        assert_eq!(h.timestamp_type(), TimestampType::CreateTime);
        h.validate_as_produced().expect("produced batch");
    }

    #[test]
    fn producer_state_rewrite_keeps_the_crc_valid() {
        let mut batch = sample();
        set_producer_state(&mut batch, 77, 3, 1234);
        let h = validate_crc(&batch).expect("valid after the rewrite");
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (77, 3, 1234)
        );
        assert_eq!(h.records_count, 2);
    }

    #[test]
    fn patching_outside_crc_keeps_it_valid() {
        let mut batch = sample();
        set_base_offset(&mut batch, 42);
        set_partition_leader_epoch(&mut batch, 7);
        let h = validate_crc(&batch).expect("still valid");
        assert_eq!(h.base_offset, 42);
        assert_eq!(h.last_offset(), 43);
        assert_eq!(h.partition_leader_epoch, 7);
    }

    #[test]
    fn log_append_time_recomputes_crc() {
        let mut batch = sample();
        set_log_append_time(&mut batch, 99_999);
        let h = validate_crc(&batch).expect("valid after recompute");
        assert_eq!(h.max_timestamp, 99_999);
        assert_eq!(h.timestamp_type(), TimestampType::LogAppendTime);
    }

    #[test]
    fn max_timestamp_is_set_only_when_it_changes() {
        let mut batch = sample();
        assert!(!set_max_timestamp(
            &mut batch,
            TimestampType::CreateTime,
            1_005
        ));
        assert_eq!(batch, sample());
        assert!(set_max_timestamp(
            &mut batch,
            TimestampType::CreateTime,
            2_000
        ));
        let h = validate_crc(&batch).expect("valid after recompute");
        assert_eq!(h.max_timestamp, 2_000);
        assert_eq!(h.timestamp_type(), TimestampType::CreateTime);
        set_log_append_time(&mut batch, 5);
        assert!(set_max_timestamp(&mut batch, TimestampType::CreateTime, 5));
        let h = validate_crc(&batch).expect("valid");
        assert_eq!(h.timestamp_type(), TimestampType::CreateTime);
    }

    #[test]
    fn corruption_is_detected() {
        let mut batch = sample();
        let last = batch.len() - 1;
        batch[last] ^= 0xff;
        assert!(matches!(
            validate_crc(&batch),
            Err(ProtocolError::CrcMismatch { .. })
        ));
        let mut batch = sample();
        batch[MAGIC_OFFSET] = 1;
        assert_eq!(
            BatchHeader::parse(&batch),
            Err(ProtocolError::UnsupportedMagic(1))
        );
        assert!(BatchHeader::parse(&batch[..10]).is_err());
    }

    #[test]
    fn iterates_and_stops_at_partial() {
        let mut buf = sample();
        buf.extend_from_slice(&sample());
        let full = buf.len();
        buf.extend_from_slice(&sample()[..30]);
        let mut it = BatchIter::new(&buf);
        assert!(it.next().is_some());
        assert!(it.next().is_some());
        assert!(it.next().is_none());
        assert_eq!(it.position(), full);
        assert_eq!(it.remainder(), 30);
    }
}
