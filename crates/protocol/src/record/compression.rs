//! Compression codecs of the v2 record batch (attribute bits 0-2).
//!
//! The compressed payload is everything after the 61-byte header: the
//! concatenated records. Formats follow what Kafka clients write:
//! - gzip: an RFC 1952 stream;
//! - snappy: either a raw snappy block (librdkafka) or the xerial "snappy-java"
//!   framing (Java client, kafka-python); both are read, xerial is written;
//! - lz4: the standard LZ4 frame format (magic ≥ 1 batches);
//! - zstd: a zstd frame.
//!
//! All codecs here are pure Rust.

use std::io::{Read, Write};

use crate::error::{ProtocolError, Result};

/// A batch's compression codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

/// Magic header of the xerial snappy-java framing.
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
const XERIAL_HEADER_LEN: usize = 16;
const XERIAL_BLOCK: usize = 32 * 1024;

impl Compression {
    /// All codecs, for tests and tools that try each.
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// The codec with Kafka's attribute id.
    pub fn from_id(id: u8) -> Result<Self> {
        Ok(match id {
            0 => Self::None,
            1 => Self::Gzip,
            2 => Self::Snappy,
            3 => Self::Lz4,
            4 => Self::Zstd,
            other => return Err(ProtocolError::UnknownCompression(other)),
        })
    }

    /// Kafka's attribute id.
    pub fn id(self) -> u8 {
        match self {
            Self::None => 0,
            Self::Gzip => 1,
            Self::Snappy => 2,
            Self::Lz4 => 3,
            Self::Zstd => 4,
        }
    }

    /// Kafka's config name (`compression.type` values).
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Snappy => "snappy",
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
        }
    }

    /// Parses a `compression.type` value.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }

    fn err(self, e: impl std::fmt::Display) -> ProtocolError {
        ProtocolError::Compression {
            codec: self.name(),
            message: e.to_string(),
        }
    }

    /// Compresses `data`.
    pub fn compress(self, data: &[u8]) -> Result<Vec<u8>> {
        match self {
            Self::None => Ok(data.to_vec()),
            Self::Gzip => {
                let mut enc =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                enc.write_all(data).map_err(|e| self.err(e))?;
                enc.finish().map_err(|e| self.err(e))
            }
            Self::Snappy => {
                let mut out = Vec::with_capacity(data.len() / 2 + XERIAL_HEADER_LEN);
                out.extend_from_slice(&XERIAL_MAGIC);
                out.extend_from_slice(&1i32.to_be_bytes());
                out.extend_from_slice(&1i32.to_be_bytes());
                let mut enc = snap::raw::Encoder::new();
                for chunk in data.chunks(XERIAL_BLOCK) {
                    let block = enc.compress_vec(chunk).map_err(|e| self.err(e))?;
                    let len = i32::try_from(block.len()).map_err(|e| self.err(e))?;
                    out.extend_from_slice(&len.to_be_bytes());
                    out.extend_from_slice(&block);
                }
                Ok(out)
            }
            Self::Lz4 => {
                let mut enc = lz4_flex::frame::FrameEncoder::new(Vec::new());
                enc.write_all(data).map_err(|e| self.err(e))?;
                enc.finish().map_err(|e| self.err(e))
            }
            Self::Zstd => Ok(ruzstd::encoding::compress_to_vec(
                data,
                ruzstd::encoding::CompressionLevel::Fastest,
            )),
        }
    }

    /// Decompresses `data`, refusing to produce more than `limit` bytes (a
    /// guard against decompression bombs).
    pub fn decompress(self, data: &[u8], limit: usize) -> Result<Vec<u8>> {
        let mut dec = self.decompressor(data, limit)?;
        let mut out = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            let n = dec.read(&mut chunk)?;
            if n == 0 {
                return Ok(out);
            }
            out.extend_from_slice(&chunk[..n]);
        }
    }

    /// A streaming reader of the decompressed `data` that fails with
    /// [`ProtocolError::DecompressionLimit`] once it has produced more than
    /// `limit` bytes. Memory stays bounded by the codec's own state (gzip:
    /// its 32 KiB window; lz4: one frame block, at most 4 MiB; zstd: the
    /// frame's window, at most 128 MiB and never more than what was
    /// decoded) and, for snappy, one block at a time (a raw snappy block,
    /// as librdkafka writes it, is the whole payload) whose announced size
    /// is checked against `limit` before anything is allocated.
    pub fn decompressor(self, data: &[u8], limit: usize) -> Result<Decompressor<'_>> {
        let inner = match self {
            Self::None => Inner::None(data),
            Self::Gzip => Inner::Gzip(Box::new(flate2::read::GzDecoder::new(data))),
            Self::Lz4 => Inner::Lz4(Box::new(lz4_flex::frame::FrameDecoder::new(data))),
            Self::Zstd => Inner::Zstd(Box::new(
                ruzstd::decoding::StreamingDecoder::new(data).map_err(|e| self.err(e))?,
            )),
            Self::Snappy => Inner::Snappy(SnappyBlocks::new(data)),
        };
        Ok(Decompressor {
            codec: self,
            inner,
            produced: 0,
            limit,
        })
    }
}

/// A streaming decompressor with an output limit; see
/// [`Compression::decompressor`].
pub struct Decompressor<'a> {
    codec: Compression,
    inner: Inner<'a>,
    produced: usize,
    limit: usize,
}

enum Inner<'a> {
    None(&'a [u8]),
    Gzip(Box<flate2::read::GzDecoder<&'a [u8]>>),
    Lz4(Box<lz4_flex::frame::FrameDecoder<&'a [u8]>>),
    Zstd(Box<ruzstd::decoding::StreamingDecoder<&'a [u8], ruzstd::decoding::FrameDecoder>>),
    Snappy(SnappyBlocks<'a>),
}

impl std::fmt::Debug for Decompressor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decompressor")
            .field("codec", &self.codec)
            .field("produced", &self.produced)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl Decompressor<'_> {
    /// Bytes produced so far.
    pub fn produced(&self) -> usize {
        self.produced
    }

    /// Reads decompressed bytes into `buf`; 0 at the end of the stream.
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        let codec = self.codec;
        let room = self.limit - self.produced;
        let n = match &mut self.inner {
            Inner::None(rest) => {
                let n = buf.len().min(rest.len());
                buf[..n].copy_from_slice(&rest[..n]);
                *rest = &rest[n..];
                n
            }
            Inner::Gzip(r) => read_retrying(r.as_mut(), buf).map_err(|e| codec.err(e))?,
            Inner::Lz4(r) => read_retrying(r.as_mut(), buf).map_err(|e| codec.err(e))?,
            Inner::Zstd(r) => read_retrying(r.as_mut(), buf).map_err(|e| codec.err(e))?,
            Inner::Snappy(s) => s.read(buf, room).map_err(|e| match e {
                SnappyError::TooBig => self.too_big(),
                SnappyError::Other(m) => codec.err(m),
            })?,
        };
        if n > room {
            return Err(self.too_big());
        }
        self.produced += n;
        Ok(n)
    }

    fn too_big(&self) -> ProtocolError {
        ProtocolError::DecompressionLimit {
            codec: self.codec.name(),
            limit: self.limit,
        }
    }
}

fn read_retrying(r: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match r.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

enum SnappyError {
    TooBig,
    Other(String),
}

/// Snappy payloads block by block: xerial framing (a 16-byte header, then
/// `length: int32, raw block` pairs) or one raw block.
struct SnappyBlocks<'a> {
    rest: &'a [u8],
    xerial: bool,
    block: Vec<u8>,
    pos: usize,
    dec: snap::raw::Decoder,
}

impl<'a> SnappyBlocks<'a> {
    fn new(data: &'a [u8]) -> Self {
        let xerial = data.len() >= XERIAL_HEADER_LEN && data[..8] == XERIAL_MAGIC;
        Self {
            rest: if xerial {
                &data[XERIAL_HEADER_LEN..]
            } else {
                data
            },
            xerial,
            block: Vec::new(),
            pos: 0,
            dec: snap::raw::Decoder::new(),
        }
    }

    /// Decodes the next block; false when none is left. `room` is what
    /// the output limit still allows.
    fn next_block(&mut self, room: usize) -> Result<bool, SnappyError> {
        if self.rest.is_empty() {
            return Ok(false);
        }
        let raw = if self.xerial {
            if self.rest.len() < 4 {
                return Err(SnappyError::Other("truncated xerial block length".into()));
            }
            let len = i32::from_be_bytes([self.rest[0], self.rest[1], self.rest[2], self.rest[3]]);
            let len = usize::try_from(len)
                .map_err(|_| SnappyError::Other(format!("negative xerial block length {len}")))?;
            if self.rest.len() - 4 < len {
                return Err(SnappyError::Other("truncated xerial block".into()));
            }
            let raw = &self.rest[4..4 + len];
            self.rest = &self.rest[4 + len..];
            raw
        } else {
            std::mem::take(&mut self.rest)
        };
        let n = snap::raw::decompress_len(raw).map_err(|e| SnappyError::Other(e.to_string()))?;
        if n > room {
            return Err(SnappyError::TooBig);
        }
        self.block.clear();
        self.block.resize(n, 0);
        self.dec
            .decompress(raw, &mut self.block)
            .map_err(|e| SnappyError::Other(e.to_string()))?;
        self.pos = 0;
        Ok(true)
    }

    fn read(&mut self, buf: &mut [u8], room: usize) -> Result<usize, SnappyError> {
        while self.pos == self.block.len() {
            if !self.next_block(room)? {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.block.len() - self.pos);
        buf[..n].copy_from_slice(&self.block[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ids_and_names() {
        for c in Compression::ALL {
            assert_eq!(Compression::from_id(c.id()), Ok(c));
            assert_eq!(Compression::from_name(c.name()), Some(c));
        }
        assert!(Compression::from_id(5).is_err());
    }

    #[test]
    fn raw_snappy_is_read() {
        let data = b"hello hello hello hello".repeat(50);
        let raw = snap::raw::Encoder::new()
            .compress_vec(&data)
            .expect("compress");
        let back = Compression::Snappy
            .decompress(&raw, 1 << 20)
            .expect("decompress");
        assert_eq!(back, data);
    }

    #[test]
    fn limit_is_enforced() {
        let data = vec![0u8; 100_000];
        for c in Compression::ALL {
            let z = c.compress(&data).expect("compress");
            assert!(c.decompress(&z, 1_000).is_err(), "{c:?}");
            assert_eq!(c.decompress(&z, 100_000).expect("fits"), data);
        }
    }

    proptest! {
        #[test]
        fn roundtrip(data in proptest::collection::vec(any::<u8>(), 0..70_000)) {
            for c in Compression::ALL {
                let z = c.compress(&data).expect("compress");
                prop_assert_eq!(c.decompress(&z, 1 << 20).expect("decompress"), data.clone());
            }
        }

        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..2_000)) {
            for c in Compression::ALL {
                let _ = c.decompress(&data, 1 << 20);
            }
        }
    }
}
