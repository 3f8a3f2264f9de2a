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

fn premature_eof() -> ProtocolError {
    invalid("Incorrect declared batch size, premature EOF reached")
}

/// Bytes the walker reads records from.
pub trait RecordSource {
    /// The next byte; an error at the end of the records.
    fn byte(&mut self) -> Result<u8>;
    /// Skips `n` bytes; an error when fewer remain.
    fn skip(&mut self, n: usize) -> Result<()>;
    /// Bytes consumed so far.
    fn position(&self) -> u64;
    /// Whether every byte has been consumed.
    fn at_end(&mut self) -> Result<bool>;
    /// An upper bound of the bytes left, when the source knows it.
    fn remaining_hint(&self) -> Option<u64> {
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
    #[inline]
    fn byte(&mut self) -> Result<u8> {
        let b = *self.buf.get(self.pos).ok_or_else(premature_eof)?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    fn skip(&mut self, n: usize) -> Result<()> {
        if n > self.buf.len() - self.pos {
            return Err(premature_eof());
        }
        self.pos += n;
        Ok(())
    }

    #[inline]
    fn position(&self) -> u64 {
        self.pos as u64
    }

    fn at_end(&mut self) -> Result<bool> {
        Ok(self.pos == self.buf.len())
    }

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
}

impl std::fmt::Debug for StreamSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSource")
            .field("consumed", &self.consumed)
            .field("eof", &self.eof)
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
        }
    }

    /// Refills an empty buffer; false at the end of the stream.
    fn fill(&mut self) -> Result<bool> {
        debug_assert_eq!(self.start, self.end);
        if self.eof {
            return Ok(false);
        }
        let n = self.dec.read(&mut self.buf)?;
        self.start = 0;
        self.end = n;
        if n == 0 {
            self.eof = true;
        }
        Ok(n > 0)
    }
}

impl RecordSource for StreamSource<'_> {
    #[inline]
    fn byte(&mut self) -> Result<u8> {
        if self.start == self.end && !self.fill()? {
            return Err(premature_eof());
        }
        let b = self.buf[self.start];
        self.start += 1;
        self.consumed += 1;
        Ok(b)
    }

    fn skip(&mut self, mut n: usize) -> Result<()> {
        loop {
            let here = n.min(self.end - self.start);
            self.start += here;
            self.consumed += here as u64;
            n -= here;
            if n == 0 {
                return Ok(());
            }
            if !self.fill()? {
                return Err(premature_eof());
            }
        }
    }

    fn position(&self) -> u64 {
        self.consumed
    }

    fn at_end(&mut self) -> Result<bool> {
        if self.start < self.end {
            return Ok(false);
        }
        Ok(!self.fill()?)
    }
}

/// A zig-zag varint of at most 5 bytes that fits an int32 (Kafka's
/// `ByteUtils.readVarint`).
#[inline]
fn varint<S: RecordSource>(src: &mut S) -> Result<i32> {
    let mut raw: u64 = 0;
    for i in 0..5 {
        let b = src.byte()?;
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            let raw =
                u32::try_from(raw).map_err(|_| invalid("Varint is out of the int32 range"))?;
            return Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32));
        }
    }
    Err(invalid(
        "Varint is too long, the most significant bit in the 5th byte is set",
    ))
}

/// A zig-zag varlong of at most 10 bytes (Kafka's `ByteUtils.readVarlong`).
#[inline]
fn varlong<S: RecordSource>(src: &mut S) -> Result<i64> {
    let mut raw: u64 = 0;
    for i in 0..10 {
        let b = src.byte()?;
        if i == 9 && b > 1 {
            return Err(invalid("Varlong is out of the int64 range"));
        }
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
    }
    Err(invalid(
        "Varlong is too long, most significant bit in the 10th byte is set",
    ))
}

/// Walks exactly `count` records from `src` and checks that nothing follows.
/// `visit` sees every record in order (and is not called again after an
/// error).
pub fn walk_records<S: RecordSource, F: FnMut(&RecordMeta)>(
    src: &mut S,
    count: usize,
    mut visit: F,
) -> Result<WalkSummary> {
    // Every record takes at least 7 bytes: refuse counts the bytes cannot
    // hold before walking (a slice knows its size; a stream stops at its
    // decompression limit).
    if let Some(left) = src.remaining_hint() {
        if count as u64 > left / 7 {
            return Err(premature_eof());
        }
    }
    for index in 0..count {
        let start = src.position();
        let len = varint(src)?;
        if len < 0 {
            return Err(invalid(format!("Invalid record size {len}")));
        }
        let len = len as u64;
        if let Some(left) = src.remaining_hint() {
            if left < len {
                return Err(invalid(format!(
                    "Invalid record size: expected {len} bytes in record payload, but instead \
                     the buffer has only {left} remaining bytes."
                )));
            }
        }
        let body = src.position();
        let left = |src: &S| len.saturating_sub(src.position() - body);
        let attributes = src.byte()?;
        let timestamp_delta = varlong(src)?;
        let offset_delta = varint(src)?;
        let key_len = varint(src)?;
        if key_len > 0 {
            if key_len as u64 > left(src) {
                return Err(invalid(
                    "Found invalid record structure: key runs past the record",
                ));
            }
            src.skip(key_len as usize)?;
        }
        let value_len = varint(src)?;
        if value_len > 0 {
            if value_len as u64 > left(src) {
                return Err(invalid(
                    "Found invalid record structure: value runs past the record",
                ));
            }
            src.skip(value_len as usize)?;
        }
        let header_count = varint(src)?;
        if header_count < 0 {
            return Err(invalid(format!(
                "Found invalid number of record headers {header_count}"
            )));
        }
        if header_count as u64 > left(src) {
            return Err(invalid(format!(
                "Found invalid number of record headers. {header_count} is larger than the \
                 remaining size of the buffer"
            )));
        }
        for _ in 0..header_count {
            let klen = varint(src)?;
            if klen < 0 {
                return Err(invalid(format!("Invalid negative header key size {klen}")));
            }
            if klen as u64 > left(src) {
                return Err(invalid(
                    "Found invalid record structure: header key runs past the record",
                ));
            }
            src.skip(klen as usize)?;
            let vlen = varint(src)?;
            if vlen > 0 {
                if vlen as u64 > left(src) {
                    return Err(invalid(
                        "Found invalid record structure: header value runs past the record",
                    ));
                }
                src.skip(vlen as usize)?;
            }
        }
        let read = src.position() - body;
        if read != len {
            return Err(invalid(format!(
                "Invalid record size: expected to read {len} bytes in record payload, but \
                 instead read {read}"
            )));
        }
        if i64::from(offset_delta) != index as i64 {
            return Err(invalid(format!(
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
    if !src.at_end()? {
        return Err(invalid(
            "Incorrect declared batch size, records still remaining in file",
        ));
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
