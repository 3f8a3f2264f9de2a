//! Walking the records of a batch without decoding them: the framing check
//! of the produce path (Kafka's record iteration in `LogValidator`).
//!
//! A record's framing is `length: varint` then, inside those `length`
//! bytes, `attributes: int8, timestampDelta: varlong, offsetDelta: varint,
//! keyLength: varint, key, valueLength: varint, value, headerCount: varint`
//! and per header `keyLength: varint, key, valueLength: varint, value`.
//! The walker reads the varints and skips the bytes they announce, checking
//! that
//! - the batch holds exactly `recordsCount` records, no fewer (the bytes end
//!   early) and no more (bytes are left after the last one);
//! - every record's fields end exactly at its declared length, header
//!   counts and header key lengths are not negative, and varints are
//!   well formed (at most 5 bytes for an int32, 10 for an int64);
//! - record `i` has offset delta `i` (what every v2 producer writes, so a
//!   batch advances offsets by exactly the records it holds).
//!
//! It hands each record's [`RecordMeta`] (lengths, deltas, no bytes) to a
//! visitor, which applies the per-record rules (keys on compacted topics,
//! timestamp bounds). Nothing is allocated for an uncompressed batch; a
//! compressed batch is read through a streaming [`Decompressor`] with a
//! fixed 16 KiB buffer, so key and value bytes are skipped, never
//! collected, and the decompressed size is bounded by the caller's limit.

use crate::error::{ProtocolError, Result};

use super::batch::{BatchHeader, HEADER_LEN};
use super::compression::{Compression, Decompressor};

/// What the walker learned about one record (no bytes are copied).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMeta {
    /// Position of the record in its batch (0-based).
    pub index: usize,
    pub attributes: u8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    /// Key length; negative for a null key.
    pub key_len: i32,
    /// Value length; negative for a null value.
    pub value_len: i32,
    pub header_count: i32,
    /// Encoded size including the length prefix.
    pub size: usize,
}

impl RecordMeta {
    pub fn has_key(&self) -> bool {
        self.key_len >= 0
    }

    /// Kafka's `DefaultRecord.toString` for this record at `offset` with
    /// `timestamp` (used in Kafka's error messages).
    pub fn describe(&self, offset: i64, timestamp: i64) -> String {
        format!(
            "DefaultRecord(offset={offset}, timestamp={timestamp}, key={} bytes, value={} bytes)",
            self.key_len.max(0),
            self.value_len.max(0)
        )
    }
}

/// What a whole walk found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalkSummary {
    pub records: usize,
    /// Bytes of the (decompressed) record payload.
    pub bytes: u64,
}

fn invalid(msg: impl Into<String>) -> ProtocolError {
    ProtocolError::InvalidRecord(msg.into())
}

const PREMATURE_EOF: &str = "Incorrect declared batch size, premature EOF reached";

/// Why a read failed, kept to one byte so the per-field results of the
/// walk stay in registers; turned into a [`ProtocolError`] once, at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bad {
    /// The bytes ended (or the source failed: see [`RecordSource::take_error`]).
    Eof,
    VarintTooLong,
    VarintRange,
    VarlongTooLong,
    VarlongRange,
}

impl Bad {
    fn into_error<S: RecordSource>(self, src: &mut S) -> ProtocolError {
        match self {
            Bad::Eof => src.take_error().unwrap_or_else(|| invalid(PREMATURE_EOF)),
            Bad::VarintTooLong => {
                invalid("Varint is too long, the most significant bit in the 5th byte is set")
            }
            Bad::VarintRange => invalid("Varint is out of the int32 range"),
            Bad::VarlongTooLong => {
                invalid("Varlong is too long, most significant bit in the 10th byte is set")
            }
            Bad::VarlongRange => invalid("Varlong is out of the int64 range"),
        }
    }
}

/// Bytes the walker reads records from.
pub trait RecordSource {
    /// The next byte; `None` at the end of the records (or on a failure of
    /// the source, reported by [`RecordSource::take_error`]).
    fn byte(&mut self) -> Option<u8>;
    /// Skips `n` bytes; false when fewer remain (or the source failed).
    fn skip(&mut self, n: usize) -> bool;
    /// Bytes consumed so far.
    fn position(&self) -> u64;
    /// Whether every byte has been consumed (false also when the source
    /// failed).
    fn at_end(&mut self) -> bool;
    /// An upper bound of the bytes left, when the source knows it.
    fn remaining_hint(&self) -> Option<u64> {
        None
    }
    /// The failure that ended the bytes early, if it was not their end.
    fn take_error(&mut self) -> Option<ProtocolError> {
        None
    }
}

/// Uncompressed records: a slice.
#[derive(Debug)]
pub struct SliceSource<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> SliceSource<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }
}

impl RecordSource for SliceSource<'_> {
    #[inline(always)]
    fn byte(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    #[inline(always)]
    fn skip(&mut self, n: usize) -> bool {
        if n > self.buf.len() - self.pos {
            return false;
        }
        self.pos += n;
        true
    }

    #[inline(always)]
    fn position(&self) -> u64 {
        self.pos as u64
    }

    fn at_end(&mut self) -> bool {
        self.pos == self.buf.len()
    }

    #[inline(always)]
    fn remaining_hint(&self) -> Option<u64> {
        Some((self.buf.len() - self.pos) as u64)
    }
}

/// Size of the buffer between a decompressor and the walker.
pub const STREAM_BUFFER: usize = 16 * 1024;

/// Compressed records: a decompressor read through a fixed buffer.
pub struct StreamSource<'a> {
    dec: Decompressor<'a>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    consumed: u64,
    eof: bool,
    error: Option<ProtocolError>,
}

impl std::fmt::Debug for StreamSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSource")
            .field("consumed", &self.consumed)
            .field("eof", &self.eof)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<'a> StreamSource<'a> {
    pub fn new(dec: Decompressor<'a>) -> Self {
        Self {
            dec,
            buf: vec![0; STREAM_BUFFER],
            start: 0,
            end: 0,
            consumed: 0,
            eof: false,
            error: None,
        }
    }

    /// Refills an empty buffer; false at the end of the stream or on a
    /// decompression error (kept for `take_error`).
    #[cold]
    fn fill(&mut self) -> bool {
        debug_assert_eq!(self.start, self.end);
        if self.eof {
            return false;
        }
        match self.dec.read(&mut self.buf) {
            Ok(n) => {
                self.start = 0;
                self.end = n;
                self.eof = n == 0;
                n > 0
            }
            Err(e) => {
                self.eof = true;
                self.error = Some(e);
                false
            }
        }
    }
}

impl RecordSource for StreamSource<'_> {
    #[inline(always)]
    fn byte(&mut self) -> Option<u8> {
        if self.start == self.end && !self.fill() {
            return None;
        }
        let b = self.buf[self.start];
        self.start += 1;
        self.consumed += 1;
        Some(b)
    }

    fn skip(&mut self, mut n: usize) -> bool {
        loop {
            let here = n.min(self.end - self.start);
            self.start += here;
            self.consumed += here as u64;
            n -= here;
            if n == 0 {
                return true;
            }
            if !self.fill() {
                return false;
            }
        }
    }

    fn position(&self) -> u64 {
        self.consumed
    }

    fn at_end(&mut self) -> bool {
        if self.start < self.end {
            return false;
        }
        !self.fill() && self.error.is_none()
    }

    fn take_error(&mut self) -> Option<ProtocolError> {
        self.error.take()
    }
}

/// A zig-zag varint of at most 5 bytes that fits an int32 (Kafka's
/// `ByteUtils.readVarint`).
#[inline(always)]
fn varint<S: RecordSource>(src: &mut S) -> Result<i32, Bad> {
    let b = src.byte().ok_or(Bad::Eof)?;
    if b & 0x80 == 0 {
        // The common case: one byte.
        return Ok(i32::from(b >> 1) ^ -i32::from(b & 1));
    }
    let mut raw = u64::from(b & 0x7f);
    for i in 1..5 {
        let b = src.byte().ok_or(Bad::Eof)?;
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            let raw = u32::try_from(raw).map_err(|_| Bad::VarintRange)?;
            return Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32));
        }
    }
    Err(Bad::VarintTooLong)
}

/// A zig-zag varlong of at most 10 bytes (Kafka's `ByteUtils.readVarlong`).
#[inline(always)]
fn varlong<S: RecordSource>(src: &mut S) -> Result<i64, Bad> {
    let mut raw: u64 = 0;
    for i in 0..10 {
        let b = src.byte().ok_or(Bad::Eof)?;
        if i == 9 && b > 1 {
            return Err(Bad::VarlongRange);
        }
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
    }
    Err(Bad::VarlongTooLong)
}

/// Skips `n` bytes of a field that must end within the record (`left`
/// bytes remain of it).
#[inline(always)]
fn skip_field<S: RecordSource>(src: &mut S, n: i32, left: u64, what: &str) -> Result<(), Fault> {
    if n > 0 {
        if n as u64 > left {
            return Err(Fault::Invalid(format!(
                "Found invalid record structure: {what} runs past the record"
            )));
        }
        if !src.skip(n as usize) {
            return Err(Fault::Read(Bad::Eof));
        }
    }
    Ok(())
}

/// A walk failure: a read that failed, or a rule the record broke.
enum Fault {
    Read(Bad),
    Invalid(String),
    Source(ProtocolError),
}

impl From<Bad> for Fault {
    #[inline(always)]
    fn from(b: Bad) -> Self {
        Fault::Read(b)
    }
}

/// Walks exactly `count` records from `src` and checks that nothing follows.
/// `visit` sees every record in order (and is not called again after an
/// error).
pub fn walk_records<S: RecordSource, F: FnMut(&RecordMeta)>(
    src: &mut S,
    count: usize,
    visit: F,
) -> Result<WalkSummary> {
    match walk_inner(src, count, visit) {
        Ok(s) => Ok(s),
        Err(Fault::Read(b)) => Err(b.into_error(src)),
        Err(Fault::Invalid(m)) => Err(invalid(m)),
        Err(Fault::Source(e)) => Err(e),
    }
}

#[inline(always)]
fn walk_inner<S: RecordSource, F: FnMut(&RecordMeta)>(
    src: &mut S,
    count: usize,
    mut visit: F,
) -> std::result::Result<WalkSummary, Fault> {
    // Every record takes at least 7 bytes: refuse counts the bytes cannot
    // hold before walking (a slice knows its size; a stream stops at its
    // decompression limit).
    if let Some(left) = src.remaining_hint() {
        if count as u64 > left / 7 {
            return Err(Fault::Read(Bad::Eof));
        }
    }
    for index in 0..count {
        let start = src.position();
        let len = varint(src)?;
        if len < 0 {
            return Err(Fault::Invalid(format!("Invalid record size {len}")));
        }
        let len = len as u64;
        if let Some(left) = src.remaining_hint() {
            if left < len {
                return Err(Fault::Invalid(format!(
                    "Invalid record size: expected {len} bytes in record payload, but instead \
                     the buffer has only {left} remaining bytes."
                )));
            }
        }
        let body = src.position();
        let left = |src: &S| len.saturating_sub(src.position() - body);
        let attributes = src.byte().ok_or(Bad::Eof)?;
        let timestamp_delta = varlong(src)?;
        let offset_delta = varint(src)?;
        let key_len = varint(src)?;
        skip_field(src, key_len, left(src), "key")?;
        let value_len = varint(src)?;
        skip_field(src, value_len, left(src), "value")?;
        let header_count = varint(src)?;
        if header_count < 0 {
            return Err(Fault::Invalid(format!(
                "Found invalid number of record headers {header_count}"
            )));
        }
        if header_count as u64 > left(src) {
            return Err(Fault::Invalid(format!(
                "Found invalid number of record headers. {header_count} is larger than the \
                 remaining size of the buffer"
            )));
        }
        for _ in 0..header_count {
            let klen = varint(src)?;
            if klen < 0 {
                return Err(Fault::Invalid(format!(
                    "Invalid negative header key size {klen}"
                )));
            }
            skip_field(src, klen, left(src), "header key")?;
            let vlen = varint(src)?;
            skip_field(src, vlen, left(src), "header value")?;
        }
        let read = src.position() - body;
        if read != len {
            return Err(Fault::Invalid(format!(
                "Invalid record size: expected to read {len} bytes in record payload, but \
                 instead read {read}"
            )));
        }
        if i64::from(offset_delta) != index as i64 {
            return Err(Fault::Invalid(format!(
                "Record {index} has offset delta {offset_delta}; the offset deltas of a batch \
                 must run from 0 to lastOffsetDelta"
            )));
        }
        visit(&RecordMeta {
            index,
            attributes,
            timestamp_delta,
            offset_delta,
            key_len,
            value_len,
            header_count,
            size: (src.position() - start) as usize,
        });
    }
    if !src.at_end() {
        // A source that failed while looking for more bytes reports its
        // own error.
        return Err(match src.take_error() {
            Some(e) => Fault::Source(e),
            None => Fault::Invalid(
                "Incorrect declared batch size, records still remaining in file".into(),
            ),
        });
    }
    Ok(WalkSummary {
        records: count,
        bytes: src.position(),
    })
}

/// Walks the records of one complete batch: the bytes after the header
/// directly when uncompressed, else through a [`Decompressor`] that refuses
/// to produce more than `limit` bytes. The caller has checked the header
/// and CRC; the record count must not be negative.
pub fn walk_batch<F: FnMut(&RecordMeta)>(
    batch: &[u8],
    header: &BatchHeader,
    limit: usize,
    visit: F,
) -> Result<WalkSummary> {
    let count = usize::try_from(header.records_count).map_err(|_| {
        invalid(format!(
            "Found invalid record count {} in magic v2 batch",
            header.records_count
        ))
    })?;
    let end = header.total_size().min(batch.len());
    let body = batch.get(HEADER_LEN..end).ok_or(ProtocolError::Truncated {
        what: "record batch",
        need: HEADER_LEN,
        have: batch.len(),
    })?;
    match header.compression()? {
        Compression::None => walk_records(&mut SliceSource::new(body), count, visit),
        codec => {
            let mut src = StreamSource::new(codec.decompressor(body, limit)?);
            walk_records(&mut src, count, visit)
        }
    }
}

#[cfg(test)]
mod tests;
