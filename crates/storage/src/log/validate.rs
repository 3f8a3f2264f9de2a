//! What an append checks before anything is written: Kafka's
//! `UnifiedLog.analyzeAndValidateRecords` then `LogValidator`, in their order
//! and with their error texts.
//!
//! 1. Every batch (`analyze`): a whole v2 header, the batch inside the
//!    buffer, base offset 0 (client batches), size ≤ `max.message.bytes`,
//!    CRC32C.
//! 2. Every batch (`validate_batch`): a known codec; record count against
//!    `lastOffsetDelta` (Kafka's three "offset range" checks); for client
//!    batches no control batch and no idempotent batch without a sequence.
//! 3. Every record, walked without decoding ([`walk`]): framing, exact
//!    count, offset deltas 0..n-1; then per record, as
//!    `LogValidator.validateRecord`: a key when the topic is compacted, and
//!    (CreateTime topics) a timestamp within `message.timestamp.before.max.ms`
//!    / `after.max.ms` of now. Framing errors fail the batch at once
//!    (INVALID_RECORD); per-record errors are collected over the whole batch
//!    and fail it together ([`StorageError::RecordErrors`], with Kafka's
//!    `record_errors` and summary message).
//! 4. Timestamps as Kafka sets them: CreateTime batches get their max
//!    timestamp set to the largest record timestamp; LogAppendTime batches
//!    get the broker's time. The CRC is recomputed only when a header field
//!    under it changed.
//! 5. Recompression: when the topic's `compression.type` names a codec other
//!    than the batch's, the (validated) records are re-encoded in it, and the
//!    new batch must fit `max.message.bytes`.
//!
//! Uncompressed batches are walked in place; compressed ones through a
//! streaming decompressor bounded by [`decompression_limit`]. Any failure
//! fails the whole append: nothing is written.
//!
//! [`walk`]: sluice_protocol::record::walk

use sluice_protocol::record::batch::{self, BatchHeader, TimestampType as BatchTimestampType};
use sluice_protocol::record::codec::{assemble, BatchFields, ProducerInfo};
use sluice_protocol::record::walk::{walk_records, SliceSource, StreamSource};
use sluice_protocol::record::{Compression, RecordMeta};
use sluice_protocol::ProtocolError;

use crate::config::{LogConfig, TimestampType, TopicCompression};
use crate::error::{RecordError, RecordErrorKind, Result, StorageError};
use crate::TopicPartition;

/// Who is appending (Kafka's `AppendOrigin`). Client batches get the checks
/// Kafka reserves for producers: base offset 0, no control batches, a base
/// sequence when there is a producer id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOrigin {
    /// A producer, through Produce.
    Client,
    /// The broker's own writers: coordinators, the metadata log, tools.
    Coordinator,
}

/// Most per-record errors kept for one append (all are counted). Kafka
/// keeps every one; a hostile batch of millions of keyless records would
/// otherwise cost a string each.
pub const MAX_RECORD_ERRORS: usize = 10_000;

/// How many bytes a compressed batch may decompress to: 64 times the
/// topic's `max.message.bytes`, at least 1 MiB and at most 1 GiB (64 MiB at
/// Kafka's default of 1 MiB). Streaming validation holds far less than this
/// in memory (see `Compression::decompressor`); the bound caps the work a
/// decompression bomb can cause, and the memory of a recompression.
pub fn decompression_limit(config: &LogConfig) -> usize {
    let limit = config.max_message_bytes.saturating_mul(64);
    limit.clamp(1 << 20, 1 << 30) as usize
}

/// The result of validating an append.
#[derive(Debug)]
pub(crate) struct Validated {
    /// `(position, header)` of every batch, in the bytes to write.
    pub batches: Vec<(usize, BatchHeader)>,
    /// The bytes to write instead of the caller's, when a batch was
    /// recompressed (all batches, back to back).
    pub rebuilt: Option<Vec<u8>>,
}

/// Validates `records` (patching timestamps in place where Kafka does).
pub(crate) fn validate(
    records: &mut [u8],
    config: &LogConfig,
    now: i64,
    tp: &TopicPartition,
    origin: AppendOrigin,
) -> Result<Validated> {
    let mut batches = analyze(records, config, tp, origin)?;
    let ctx = Ctx {
        config,
        now,
        tp,
        origin,
    };
    // Recompressed batches by index (no allocation when there are none).
    let mut rebuilt: Vec<(usize, Vec<u8>)> = Vec::new();
    for (i, (pos, h)) in batches.iter_mut().enumerate() {
        let bytes = &mut records[*pos..*pos + h.total_size()];
        if let Some(b) = validate_batch(bytes, h, &ctx)? {
            rebuilt.push((i, b));
        }
    }
    if rebuilt.is_empty() {
        return Ok(Validated {
            batches,
            rebuilt: None,
        });
    }
    let mut out = Vec::new();
    let mut positions = Vec::with_capacity(batches.len());
    let mut rebuilt = rebuilt.into_iter().peekable();
    for (i, (pos, h)) in batches.iter().enumerate() {
        let at = out.len();
        match rebuilt.next_if(|(j, _)| *j == i) {
            Some((_, b)) => {
                let h = BatchHeader::parse(&b)?;
                out.extend_from_slice(&b);
                positions.push((at, h));
            }
            None => {
                out.extend_from_slice(&records[*pos..*pos + h.total_size()]);
                positions.push((at, *h));
            }
        }
    }
    Ok(Validated {
        batches: positions,
        rebuilt: Some(out),
    })
}

/// Step 1 over every batch: `(position, header)`s.
fn analyze(
    records: &[u8],
    config: &LogConfig,
    tp: &TopicPartition,
    origin: AppendOrigin,
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
        if origin == AppendOrigin::Client && h.base_offset != 0 {
            return Err(StorageError::InvalidRecord(format!(
                "The baseOffset of the record batch in the append to {tp} should be 0, but it is {}",
                h.base_offset
            )));
        }
        if size as u64 > config.max_message_bytes {
            return Err(StorageError::RecordTooLarge {
                size,
                max: config.max_message_bytes as usize,
            });
        }
        batch::validate_crc(&rest[..size])?;
        out.push((pos, h));
        pos += size;
    }
    if out.is_empty() {
        return Err(ProtocolError::InvalidBatch("no record batch in the request".into()).into());
    }
    Ok(out)
}

struct Ctx<'a> {
    config: &'a LogConfig,
    now: i64,
    tp: &'a TopicPartition,
    origin: AppendOrigin,
}

/// Steps 2-5 for one batch; `Some(bytes)` when it was recompressed.
fn validate_batch(bytes: &mut [u8], h: &mut BatchHeader, ctx: &Ctx<'_>) -> Result<Option<Vec<u8>>> {
    let source = h.compression()?;
    check_header(h, ctx)?;
    let target = match ctx.config.compression_type {
        TopicCompression::Producer => source,
        TopicCompression::Codec(c) => c,
    };
    // Kafka leaves uncompressed control batches uncompressed.
    let recompress = target != source && !(source == Compression::None && h.is_control());
    let count = h.records_count as usize; // checked ≥ 1 by check_header
    let limit = decompression_limit(ctx.config);
    let mut checks = RecordChecks::new(h, ctx);
    let body = &bytes[batch::HEADER_LEN..];

    if !recompress {
        let walked = match source {
            Compression::None => {
                walk_records(&mut SliceSource::new(body), count, |m| checks.visit(m))
            }
            codec => {
                let mut src = StreamSource::new(codec.decompressor(body, limit)?);
                walk_records(&mut src, count, |m| checks.visit(m))
            }
        };
        walked.map_err(framing_error)?;
        checks.finish()?;
        let (ts_type, max_ts) = checks.max_timestamp();
        batch::set_max_timestamp(bytes, ts_type, max_ts);
        h.max_timestamp = max_ts;
        h.attributes = set_timestamp_flag(h.attributes, ts_type);
        return Ok(None);
    }

    let decompressed;
    let payload: &[u8] = match source {
        Compression::None => body,
        codec => {
            decompressed = codec.decompress(body, limit)?;
            &decompressed
        }
    };
    walk_records(&mut SliceSource::new(payload), count, |m| checks.visit(m))
        .map_err(framing_error)?;
    checks.finish()?;
    let (ts_type, max_ts) = checks.max_timestamp();
    let mut attributes = i16::from(target.id());
    if h.is_transactional() {
        attributes |= 0x10;
    }
    if h.is_control() {
        attributes |= 0x20;
    }
    let fields = BatchFields {
        base_offset: h.base_offset,
        partition_leader_epoch: h.partition_leader_epoch,
        attributes: set_timestamp_flag(attributes, ts_type),
        last_offset_delta: h.last_offset_delta,
        base_timestamp: h.base_timestamp,
        max_timestamp: max_ts,
        producer: ProducerInfo {
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            base_sequence: h.base_sequence,
        },
        records_count: h.records_count,
    };
    let out = assemble(&fields, target, payload)?;
    if out.len() as u64 > ctx.config.max_message_bytes {
        return Err(StorageError::RecordTooLarge {
            size: out.len(),
            max: ctx.config.max_message_bytes as usize,
        });
    }
    Ok(Some(out))
}

fn set_timestamp_flag(attributes: i16, ts_type: BatchTimestampType) -> i16 {
    match ts_type {
        BatchTimestampType::LogAppendTime => attributes | 0x08,
        BatchTimestampType::CreateTime => attributes & !0x08,
    }
}

/// A framing error found by the walker: Kafka's `InvalidRecordException`
/// (INVALID_RECORD); decompression failures keep their own errors.
fn framing_error(e: ProtocolError) -> StorageError {
    match e {
        ProtocolError::InvalidRecord(m) => StorageError::InvalidRecord(m),
        other => other.into(),
    }
}

/// Kafka's `LogValidator.validateBatch` (v2).
fn check_header(h: &BatchHeader, ctx: &Ctx<'_>) -> Result<()> {
    let tp = ctx.tp;
    let invalid = |m: String| Err(StorageError::InvalidRecord(m));
    let count_from_offsets = i64::from(h.last_offset_delta) + 1;
    if count_from_offsets <= 0 {
        return invalid(format!(
            "Batch has an invalid offset range: [{}, {}] in topic partition {tp}",
            h.base_offset,
            h.last_offset()
        ));
    }
    if h.records_count <= 0 {
        return invalid(format!(
            "Invalid reported count for record batch: {} in topic partition {tp}",
            h.records_count
        ));
    }
    if count_from_offsets != i64::from(h.records_count) {
        return invalid(format!(
            "Inconsistent batch offset range [{}, {}] and count of records {} in topic partition {tp}",
            h.base_offset,
            h.last_offset(),
            h.records_count
        ));
    }
    if ctx.origin == AppendOrigin::Client {
        if h.is_control() {
            return invalid(format!(
                "Clients are not allowed to write control records in topic partition {tp}"
            ));
        }
        if h.producer_id >= 0 && h.base_sequence < 0 {
            return invalid(format!(
                "Invalid sequence number {} in record batch with producerId {} in topic partition {tp}",
                h.base_sequence, h.producer_id
            ));
        }
    }
    Ok(())
}

/// Kafka's `LogValidator.validateRecord` for every record of one batch,
/// and the batch's max timestamp.
struct RecordChecks<'a> {
    header: BatchHeader,
    ctx: &'a Ctx<'a>,
    compacted: bool,
    log_append_batch: bool,
    /// CreateTime topic: record timestamps must lie in `[lowest, highest]`.
    create_time: bool,
    lowest: i64,
    highest: i64,
    max_timestamp: i64,
    errors: Vec<RecordError>,
    total_errors: usize,
    timestamp_error: bool,
}

impl<'a> RecordChecks<'a> {
    fn new(header: &BatchHeader, ctx: &'a Ctx<'a>) -> Self {
        Self {
            header: *header,
            ctx,
            compacted: ctx.config.cleanup_policy.compact,
            log_append_batch: header.timestamp_type() == BatchTimestampType::LogAppendTime,
            create_time: ctx.config.message_timestamp_type == TimestampType::CreateTime,
            lowest: ctx
                .now
                .saturating_sub(ctx.config.message_timestamp_before_max_ms),
            highest: ctx
                .now
                .saturating_add(ctx.config.message_timestamp_after_max_ms),
            max_timestamp: -1,
            errors: Vec::new(),
            total_errors: 0,
            timestamp_error: false,
        }
    }

    /// The record's timestamp as Kafka's `DefaultRecord` reports it.
    fn timestamp(&self, m: &RecordMeta) -> i64 {
        if self.log_append_batch {
            self.header.max_timestamp
        } else {
            self.header.base_timestamp.wrapping_add(m.timestamp_delta)
        }
    }

    #[inline]
    fn visit(&mut self, m: &RecordMeta) {
        let ts = self.timestamp(m);
        if let Some((kind, message)) = self.check(m, ts) {
            self.total_errors += 1;
            self.timestamp_error |= kind == RecordErrorKind::InvalidTimestamp;
            if self.errors.len() < MAX_RECORD_ERRORS {
                self.errors.push(RecordError {
                    batch_index: m.index as i32,
                    message: Some(message),
                });
            }
        } else if ts > self.max_timestamp {
            self.max_timestamp = ts;
        }
    }

    /// Kafka's `validateKey` then `validateTimestamp`: the first error.
    #[inline]
    fn check(&self, m: &RecordMeta, ts: i64) -> Option<(RecordErrorKind, String)> {
        if self.compacted && !m.has_key() {
            return Some((
                RecordErrorKind::InvalidRecord,
                format!(
                    "Compacted topic cannot accept message without key in topic partition {}",
                    self.ctx.tp
                ),
            ));
        }
        let offset = self.header.base_offset + i64::from(m.offset_delta);
        if self.create_time && ts != -1 {
            // Kafka: now - ts > before.max.ms, or ts - now > after.max.ms.
            if ts < self.lowest || ts > self.highest {
                return Some((
                    RecordErrorKind::InvalidTimestamp,
                    format!(
                        "Timestamp {ts} of message with offset {offset} is out of range. The \
                         timestamp should be within [{}, {}]",
                        self.lowest, self.highest
                    ),
                ));
            }
        } else if self.log_append_batch {
            return Some((
                RecordErrorKind::InvalidTimestamp,
                format!(
                    "Invalid timestamp type in message {}. Producer should not set timestamp \
                     type to LogAppendTime.",
                    m.describe(offset, ts)
                ),
            ));
        }
        None
    }

    /// Kafka's `processRecordErrors`: any per-record error fails the batch.
    fn finish(&mut self) -> Result<()> {
        if self.total_errors == 0 {
            return Ok(());
        }
        let errors = std::mem::take(&mut self.errors);
        let (kind, message) = if self.timestamp_error {
            (
                RecordErrorKind::InvalidTimestamp,
                "One or more records have been rejected due to invalid timestamp".to_string(),
            )
        } else {
            let shown: Vec<String> = errors.iter().take(3).map(RecordError::to_string).collect();
            (
                RecordErrorKind::InvalidRecord,
                format!(
                    "One or more records have been rejected due to {} record errors in total, \
                     and only showing the first three errors at most: [{}]",
                    self.total_errors,
                    shown.join(", ")
                ),
            )
        };
        Err(StorageError::RecordErrors {
            kind,
            errors,
            total: self.total_errors,
            message,
        })
    }

    /// The timestamp type and max timestamp the stored batch gets.
    fn max_timestamp(&self) -> (BatchTimestampType, i64) {
        match self.ctx.config.message_timestamp_type {
            TimestampType::LogAppendTime => (BatchTimestampType::LogAppendTime, self.ctx.now),
            TimestampType::CreateTime => (BatchTimestampType::CreateTime, self.max_timestamp),
        }
    }
}

#[cfg(test)]
mod tests;
