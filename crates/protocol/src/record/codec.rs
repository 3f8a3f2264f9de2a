//! Individual records of a v2 batch, and building batches from records.
//!
//! A record (Kafka's `DefaultRecord`) is:
//! `length: varint, attributes: int8, timestampDelta: varlong,
//! offsetDelta: varint, keyLength: varint, key, valueLength: varint, value,
//! headerCount: varint, [headerKeyLength: varint, headerKey,
//! headerValueLength: varint, headerValue]`, with zig-zag varints and -1
//! lengths for null.
//!
//! The produce path never comes here; compaction, lookup by timestamp and
//! tests do.

use crate::error::{ProtocolError, Result};

use super::batch::{self, BatchHeader, HEADER_LEN, MAGIC_V2};
use super::compression::Compression;

/// A record header (key is a UTF-8 string in Kafka; kept as bytes here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// One record with absolute offset and timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<Header>,
}

impl Record {
    /// A record for a [`BatchBuilder`] (the offset is assigned by position).
    pub fn new(key: Option<Vec<u8>>, value: Option<Vec<u8>>, timestamp: i64) -> Self {
        Self {
            offset: 0,
            timestamp,
            key,
            value,
            headers: Vec::new(),
        }
    }

    /// The record borrowed, as [`encode_record_ref`] and
    /// [`BatchBuilder::push_record_ref`] take it.
    pub fn to_ref(&self) -> RecordRef<'_> {
        RecordRef {
            timestamp: self.timestamp,
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            headers: &self.headers,
        }
    }

    /// Adds a header.
    pub fn with_header(mut self, key: &[u8], value: Option<&[u8]>) -> Self {
        self.headers.push(Header {
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
        });
        self
    }
}

/// A record to encode, borrowed from whoever owns its bytes (a client's
/// record keeps its key and value as shared buffers; encoding copies them
/// into the batch once).
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [Header],
}

/// A record decoded from a batch plus where its encoded bytes sit in the
/// batch's (decompressed) record payload, so it can be copied unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedRecord {
    pub record: Record,
    pub raw: std::ops::Range<usize>,
}

/// The decompressed record payload of one batch and its records.
#[derive(Debug, Clone)]
pub struct DecodedBatch {
    pub header: BatchHeader,
    pub payload: Vec<u8>,
    pub records: Vec<DecodedRecord>,
}

// ---------------------------------------------------------------- varints

fn zigzag64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Appends a zig-zag varint.
pub fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut u = zigzag64(v);
    while u >= 0x80 {
        out.push((u as u8) | 0x80);
        u >>= 7;
    }
    out.push(u as u8);
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn bad(what: &str) -> ProtocolError {
        ProtocolError::InvalidRecord(what.to_string())
    }

    fn varlong(&mut self) -> Result<i64> {
        let mut shift = 0u32;
        let mut u: u64 = 0;
        loop {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or_else(|| Self::bad("truncated varint"))?;
            self.pos += 1;
            u |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 63 {
                return Err(Self::bad("varint too long"));
            }
        }
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }

    fn varint(&mut self) -> Result<i32> {
        i32::try_from(self.varlong()?).map_err(|_| Self::bad("varint out of int32 range"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| Self::bad("field runs past the record"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn nullable_slice(&mut self) -> Result<Option<&'a [u8]>> {
        let len = self.varint()?;
        if len < 0 {
            return Ok(None);
        }
        Ok(Some(self.take(len as usize)?))
    }

    fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
}

/// Decodes every record of one complete batch (decompressing as needed,
/// producing at most `limit` bytes of payload).
pub fn decode_batch(batch_bytes: &[u8], limit: usize) -> Result<DecodedBatch> {
    let header = BatchHeader::parse(batch_bytes)?;
    if header.total_size() > batch_bytes.len() {
        return Err(ProtocolError::Truncated {
            what: "record batch",
            need: header.total_size(),
            have: batch_bytes.len(),
        });
    }
    let body = &batch_bytes[HEADER_LEN..header.total_size()];
    let payload = if header.is_control() {
        body.to_vec()
    } else {
        header.compression()?.decompress(body, limit)?
    };
    let count = record_count(&header, payload.len())?;
    let mut records = Vec::with_capacity(count);
    for_each_record(&header, &payload, |v| {
        records.push(DecodedRecord {
            record: Record {
                offset: v.offset,
                timestamp: v.timestamp,
                key: v.key.map(<[u8]>::to_vec),
                value: v.value.map(<[u8]>::to_vec),
                headers: v
                    .headers
                    .iter()
                    .map(|(k, v)| Header {
                        key: k.to_vec(),
                        value: v.map(<[u8]>::to_vec),
                    })
                    .collect(),
            },
            raw: v.raw,
        });
    })?;
    Ok(DecodedBatch {
        header,
        payload,
        records,
    })
}

/// Encodes one record relative to a batch's base offset and timestamp.
pub fn encode_record(out: &mut Vec<u8>, rec: &Record, offset_delta: i32, ts_delta: i64) {
    encode_record_ref(out, rec.to_ref(), offset_delta, ts_delta);
}

/// [`encode_record`] of a borrowed record.
pub fn encode_record_ref(out: &mut Vec<u8>, rec: RecordRef<'_>, offset_delta: i32, ts_delta: i64) {
    // The length prefix is computed first so the fields go straight into
    // `out` (no intermediate buffer, one copy of key and value).
    let body_len = record_body_len(rec, offset_delta, ts_delta);
    out.reserve(body_len + 5);
    put_varint(out, body_len as i64);
    out.push(0); // attributes: unused
    put_varint(out, ts_delta);
    put_varint(out, i64::from(offset_delta));
    put_nullable(out, rec.key);
    put_nullable(out, rec.value);
    put_varint(out, rec.headers.len() as i64);
    for h in rec.headers {
        put_nullable(out, Some(&h.key));
        put_nullable(out, h.value.as_deref());
    }
}

/// Bytes of `rec` encoded at `offset_delta` and `ts_delta`, without its
/// length prefix.
fn record_body_len(rec: RecordRef<'_>, offset_delta: i32, ts_delta: i64) -> usize {
    let mut body_len = 1
        + varint_len(ts_delta)
        + varint_len(i64::from(offset_delta))
        + nullable_len(rec.key)
        + nullable_len(rec.value)
        + varint_len(rec.headers.len() as i64);
    for h in rec.headers {
        body_len += nullable_len(Some(&h.key)) + nullable_len(h.value.as_deref());
    }
    body_len
}

/// The exact size [`encode_record`] writes for `rec` at `offset_delta`
/// and `ts_delta`, length prefix included (Kafka's
/// `DefaultRecord.sizeInBytes`).
pub fn encoded_record_len(rec: RecordRef<'_>, offset_delta: i32, ts_delta: i64) -> usize {
    let body = record_body_len(rec, offset_delta, ts_delta);
    varint_len(body as i64) + body
}

/// Bytes [`put_varint`] writes for `v`.
pub fn varint_len(v: i64) -> usize {
    let bits = 64 - zigzag64(v).leading_zeros() as usize;
    bits.max(1).div_ceil(7)
}

fn nullable_len(v: Option<&[u8]>) -> usize {
    match v {
        None => 1,
        Some(b) => varint_len(b.len() as i64) + b.len(),
    }
}

fn put_nullable(out: &mut Vec<u8>, v: Option<&[u8]>) {
    match v {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i64);
            out.extend_from_slice(b);
        }
    }
}

/// Producer identity written into a batch header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerInfo {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

impl Default for ProducerInfo {
    fn default() -> Self {
        Self {
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
        }
    }
}

/// Builds one v2 batch from records (what a producer does).
#[derive(Debug)]
pub struct BatchBuilder {
    compression: Compression,
    base_timestamp: i64,
    /// A header placeholder, then the records encoded as they are pushed
    /// (offset delta = position).
    payload: Vec<u8>,
    count: usize,
    max_timestamp: i64,
    producer: ProducerInfo,
    transactional: bool,
}

impl BatchBuilder {
    pub fn new(compression: Compression, base_timestamp: i64) -> Self {
        Self::with_capacity(compression, base_timestamp, HEADER_LEN)
    }

    /// Like [`BatchBuilder::new`], with room for `capacity` bytes of batch
    /// (header included) before the buffer grows: a producer gives its
    /// `batch.size`, so records are never copied by a reallocation.
    pub fn with_capacity(compression: Compression, base_timestamp: i64, capacity: usize) -> Self {
        Self::with_buffer(
            compression,
            base_timestamp,
            Vec::with_capacity(capacity.max(HEADER_LEN)),
        )
    }

    /// Like [`BatchBuilder::with_capacity`], encoding into `buffer` (its
    /// contents are discarded, its capacity kept): a producer hands back a
    /// buffer of an earlier batch instead of allocating a new one.
    pub fn with_buffer(compression: Compression, base_timestamp: i64, buffer: Vec<u8>) -> Self {
        let mut payload = buffer;
        payload.clear();
        // Room for the header, written by `finish`.
        payload.resize(HEADER_LEN, 0);
        Self {
            compression,
            base_timestamp,
            payload,
            count: 0,
            max_timestamp: -1,
            producer: ProducerInfo::default(),
            transactional: false,
        }
    }

    /// Sets producer id, epoch and base sequence.
    pub fn producer(mut self, producer: ProducerInfo, transactional: bool) -> Self {
        self.producer = producer;
        self.transactional = transactional;
        self
    }

    /// Encodes `record` at the next offset delta.
    pub fn push(&mut self, record: Record) {
        self.push_ref(&record);
    }

    /// Encodes `record` (borrowed) at the next offset delta.
    pub fn push_ref(&mut self, record: &Record) {
        self.push_record_ref(record.to_ref());
    }

    /// Encodes a borrowed record at the next offset delta.
    pub fn push_record_ref(&mut self, record: RecordRef<'_>) {
        let delta = i32::try_from(self.count).unwrap_or(i32::MAX);
        encode_record_ref(
            &mut self.payload,
            record,
            delta,
            record.timestamp.wrapping_sub(self.base_timestamp),
        );
        self.max_timestamp = self.max_timestamp.max(record.timestamp);
        self.count += 1;
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Encoded size of the records so far (before compression).
    pub fn payload_len(&self) -> usize {
        self.payload.len() - HEADER_LEN
    }

    fn fields(&self, base_offset: i64) -> Result<BatchFields> {
        let count = i32::try_from(self.count)
            .map_err(|_| ProtocolError::InvalidBatch("too many records".into()))?;
        let mut attributes = i16::from(self.compression.id());
        if self.transactional {
            attributes |= 0x10;
        }
        Ok(BatchFields {
            base_offset,
            partition_leader_epoch: -1,
            attributes,
            last_offset_delta: count - 1,
            base_timestamp: self.base_timestamp,
            max_timestamp: self.max_timestamp,
            producer: self.producer,
            records_count: count,
        })
    }

    /// Encodes the batch with `base_offset`; record offsets are consecutive.
    pub fn build(&self, base_offset: i64) -> Result<Vec<u8>> {
        let fields = self.fields(base_offset)?;
        assemble(&fields, self.compression, &self.payload[HEADER_LEN..])
    }

    /// Like [`BatchBuilder::build`], consuming the builder: an uncompressed
    /// batch reuses the record buffer (no copy of the records).
    pub fn finish(self, base_offset: i64) -> Result<Vec<u8>> {
        Ok(self.finish_with_spare(base_offset)?.0)
    }

    /// Like [`BatchBuilder::finish`], also handing back the record buffer
    /// when the batch did not end up in it (a compressed batch is a new
    /// buffer), for the next batch to reuse.
    pub fn finish_with_spare(mut self, base_offset: i64) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
        let fields = self.fields(base_offset)?;
        if self.compression != Compression::None {
            let batch = assemble(&fields, self.compression, &self.payload[HEADER_LEN..])?;
            return Ok((batch, Some(self.payload)));
        }
        seal(&fields, &mut self.payload)?;
        Ok((self.payload, None))
    }
}

/// The batch's record count, refused when negative or more than
/// `payload_len` bytes can hold (every record takes at least 7 bytes).
fn record_count(header: &BatchHeader, payload_len: usize) -> Result<usize> {
    let count = usize::try_from(header.records_count)
        .map_err(|_| ProtocolError::InvalidBatch("negative record count".into()))?;
    if count > payload_len / 7 + 1 {
        return Err(ProtocolError::InvalidBatch(format!(
            "record count {count} exceeds what {payload_len} payload bytes can hold"
        )));
    }
    Ok(count)
}

/// One record of a batch, borrowed from the batch's record payload (the
/// decompressed bytes, or the batch body itself when uncompressed): what a
/// reader slices its keys and values from without copying them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// Header keys and values, in order.
    pub headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
    /// The record's bytes in the payload.
    pub raw: std::ops::Range<usize>,
}

/// Decodes the `header.records_count` records of `payload` (a batch's
/// uncompressed record bytes) in order, calling `f` with each. Fails on a
/// count the payload cannot hold, a malformed record, or bytes after the
/// last record.
pub fn for_each_record<'a>(
    header: &BatchHeader,
    payload: &'a [u8],
    mut f: impl FnMut(RecordView<'a>),
) -> Result<()> {
    let count = record_count(header, payload.len())?;
    let log_append = header.timestamp_type() == batch::TimestampType::LogAppendTime;
    let mut r = Reader {
        buf: payload,
        pos: 0,
    };
    for _ in 0..count {
        let start = r.pos;
        let len = r.varint()?;
        if len < 0 {
            return Err(Reader::bad("negative record length"));
        }
        let body = r.take(len as usize)?;
        let mut rr = Reader { buf: body, pos: 0 };
        let _attributes = rr.byte()?;
        let ts_delta = rr.varlong()?;
        let offset_delta = rr.varint()?;
        let key = rr.nullable_slice()?;
        let value = rr.nullable_slice()?;
        let n_headers = rr.varint()?;
        if n_headers < 0 || n_headers as usize > body.len() {
            return Err(Reader::bad("invalid header count"));
        }
        let mut headers = Vec::with_capacity(n_headers as usize);
        for _ in 0..n_headers {
            let klen = rr.varint()?;
            if klen < 0 {
                return Err(Reader::bad("null header key"));
            }
            let key = rr.take(klen as usize)?;
            headers.push((key, rr.nullable_slice()?));
        }
        if rr.pos != body.len() {
            return Err(Reader::bad("record length does not match its fields"));
        }
        let timestamp = if log_append {
            header.max_timestamp
        } else {
            header.base_timestamp.wrapping_add(ts_delta)
        };
        f(RecordView {
            offset: header.base_offset + i64::from(offset_delta),
            timestamp,
            key,
            value,
            headers,
            raw: start..r.pos,
        });
    }
    if r.pos != payload.len() {
        return Err(ProtocolError::InvalidBatch(format!(
            "{} bytes after the last record",
            payload.len() - r.pos
        )));
    }
    Ok(())
}

/// Header fields for [`assemble`].
#[derive(Debug, Clone, Copy)]
pub struct BatchFields {
    pub base_offset: i64,
    pub partition_leader_epoch: i32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer: ProducerInfo,
    pub records_count: i32,
}

/// Writes a complete batch: header fields, the `payload` (encoded records)
/// compressed with `compression`, and a fresh CRC.
pub fn assemble(f: &BatchFields, compression: Compression, payload: &[u8]) -> Result<Vec<u8>> {
    let compressed;
    let body: &[u8] = if compression == Compression::None {
        payload
    } else {
        compressed = compression.compress(payload)?;
        &compressed
    };
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.resize(HEADER_LEN, 0);
    out.extend_from_slice(body);
    seal(f, &mut out)?;
    Ok(out)
}

/// Writes the header fields of `f` into the first [`HEADER_LEN`] bytes of
/// `batch` (header placeholder followed by the body), then its CRC.
fn seal(f: &BatchFields, batch: &mut [u8]) -> Result<()> {
    let batch_length = i32::try_from(batch.len() - batch::LOG_OVERHEAD)
        .map_err(|_| ProtocolError::InvalidBatch("batch too large".into()))?;
    let mut h = Vec::with_capacity(HEADER_LEN);
    h.extend_from_slice(&f.base_offset.to_be_bytes());
    h.extend_from_slice(&batch_length.to_be_bytes());
    h.extend_from_slice(&f.partition_leader_epoch.to_be_bytes());
    h.push(MAGIC_V2 as u8);
    h.extend_from_slice(&[0; 4]); // crc, filled below
    h.extend_from_slice(&f.attributes.to_be_bytes());
    h.extend_from_slice(&f.last_offset_delta.to_be_bytes());
    h.extend_from_slice(&f.base_timestamp.to_be_bytes());
    h.extend_from_slice(&f.max_timestamp.to_be_bytes());
    h.extend_from_slice(&f.producer.producer_id.to_be_bytes());
    h.extend_from_slice(&f.producer.producer_epoch.to_be_bytes());
    h.extend_from_slice(&f.producer.base_sequence.to_be_bytes());
    h.extend_from_slice(&f.records_count.to_be_bytes());
    batch[..HEADER_LEN].copy_from_slice(&h);
    let crc = batch::compute_crc(batch);
    batch[batch::CRC_OFFSET..batch::CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_and_build_agree_for_every_codec() {
        for c in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut b = BatchBuilder::new(c, 1_000);
            for i in 0..50i64 {
                b.push(
                    Record::new(Some(vec![i as u8; 3]), Some(vec![7; 200]), 1_000 + i)
                        .with_header(b"h", Some(b"v")),
                );
            }
            let built = b.build(42).unwrap_or_else(|e| panic!("build: {e}"));
            let finished = b.finish(42).unwrap_or_else(|e| panic!("finish: {e}"));
            assert_eq!(built, finished, "{c:?}");
            batch::validate_crc(&finished).unwrap_or_else(|e| panic!("crc: {e}"));
            let decoded =
                decode_batch(&finished, 1 << 20).unwrap_or_else(|e| panic!("decode: {e}"));
            assert_eq!(decoded.records.len(), 50);
            assert_eq!(decoded.records[49].record.offset, 91);
        }
    }

    #[test]
    fn varint_len_matches_put_varint() {
        for v in [
            0i64,
            1,
            -1,
            63,
            64,
            -64,
            -65,
            8191,
            8192,
            i64::from(i32::MAX),
            i64::MIN,
            i64::MAX,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(varint_len(v), out.len(), "{v}");
        }
    }
    use proptest::prelude::*;

    fn arb_record() -> impl Strategy<Value = Record> {
        (
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..200)),
            0i64..1_000_000,
            proptest::collection::vec(
                (
                    proptest::collection::vec(any::<u8>(), 0..10),
                    proptest::option::of(proptest::collection::vec(any::<u8>(), 0..10)),
                ),
                0..3,
            ),
        )
            .prop_map(|(key, value, ts, hs)| Record {
                offset: 0,
                timestamp: ts,
                key,
                value,
                headers: hs
                    .into_iter()
                    .map(|(key, value)| Header { key, value })
                    .collect(),
            })
    }

    proptest! {
        #[test]
        fn batches_roundtrip(records in proptest::collection::vec(arb_record(), 1..20),
                             codec in 0u8..5, base in 0i64..1_000_000) {
            let compression = Compression::from_id(codec).expect("codec");
            let mut b = BatchBuilder::new(compression, 500);
            for r in &records { b.push(r.clone()); }
            let bytes = b.build(base).expect("build");
            let h = batch::validate_crc(&bytes).expect("crc");
            h.validate_as_produced().expect("valid");
            let decoded = decode_batch(&bytes, 1 << 24).expect("decode");
            prop_assert_eq!(decoded.records.len(), records.len());
            for (i, (d, r)) in decoded.records.iter().zip(&records).enumerate() {
                prop_assert_eq!(d.record.offset, base + i as i64);
                prop_assert_eq!(d.record.timestamp, r.timestamp);
                prop_assert_eq!(&d.record.key, &r.key);
                prop_assert_eq!(&d.record.value, &r.value);
                prop_assert_eq!(&d.record.headers, &r.headers);
            }
        }

        #[test]
        fn decoding_garbage_never_panics(mut bytes in proptest::collection::vec(any::<u8>(), 61..400)) {
            bytes[16] = 2;
            let _ = decode_batch(&bytes, 1 << 20);
        }
    }
}
