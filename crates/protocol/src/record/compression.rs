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
        let too_big = || self.err(format!("decompressed size exceeds {limit} bytes"));
        let read_limited = |r: &mut dyn Read| -> Result<Vec<u8>> {
            let mut out = Vec::new();
            let n = r
                .take((limit as u64).saturating_add(1))
                .read_to_end(&mut out)
                .map_err(|e| self.err(e))?;
            if n > limit {
                return Err(too_big());
            }
            Ok(out)
        };
        match self {
            Self::None => {
                if data.len() > limit {
                    return Err(too_big());
                }
                Ok(data.to_vec())
            }
            Self::Gzip => read_limited(&mut flate2::read::GzDecoder::new(data)),
            Self::Lz4 => read_limited(&mut lz4_flex::frame::FrameDecoder::new(data)),
            Self::Zstd => {
                let mut src = data;
                let mut dec =
                    ruzstd::decoding::StreamingDecoder::new(&mut src).map_err(|e| self.err(e))?;
                read_limited(&mut dec)
            }
            Self::Snappy => self.snappy_decompress(data, limit),
        }
    }

    fn snappy_decompress(self, data: &[u8], limit: usize) -> Result<Vec<u8>> {
        let mut dec = snap::raw::Decoder::new();
        let mut raw_block = |block: &[u8], out: &mut Vec<u8>| -> Result<()> {
            let n = snap::raw::decompress_len(block).map_err(|e| self.err(e))?;
            if out.len() + n > limit {
                return Err(self.err(format!("decompressed size exceeds {limit} bytes")));
            }
            let at = out.len();
            out.resize(at + n, 0);
            dec.decompress(block, &mut out[at..])
                .map_err(|e| self.err(e))?;
            Ok(())
        };
        let mut out = Vec::new();
        if data.len() >= XERIAL_HEADER_LEN && data[..8] == XERIAL_MAGIC {
            let mut rest = &data[XERIAL_HEADER_LEN..];
            while !rest.is_empty() {
                if rest.len() < 4 {
                    return Err(self.err("truncated xerial block length"));
                }
                let len = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
                let len = usize::try_from(len).map_err(|e| self.err(e))?;
                if rest.len() < 4 + len {
                    return Err(self.err("truncated xerial block"));
                }
                raw_block(&rest[4..4 + len], &mut out)?;
                rest = &rest[4 + len..];
            }
        } else {
            raw_block(data, &mut out)?;
        }
        Ok(out)
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
