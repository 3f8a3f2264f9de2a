//! The protocol crate's error type.

use thiserror::Error;

/// Everything that can be wrong with bytes this crate is asked to interpret.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    /// Fewer bytes than the structure needs.
    #[error("truncated {what}: need {need} bytes, have {have}")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    /// A record batch with a magic byte other than 2.
    #[error("unsupported record batch magic {0} (only v2 batches are supported)")]
    UnsupportedMagic(i8),
    /// The batch length field is out of range.
    #[error("invalid record batch length {0}")]
    InvalidBatchLength(i32),
    /// Stored and computed CRC32C differ.
    #[error("record batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    /// Header fields that contradict each other or the records.
    #[error("invalid record batch: {0}")]
    InvalidBatch(String),
    /// A record inside a batch that does not decode.
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    /// Compression attribute bits that name no codec.
    #[error("unknown compression type {0}")]
    UnknownCompression(u8),
    /// A codec failed to compress or decompress.
    #[error("{codec} codec error: {message}")]
    Compression {
        codec: &'static str,
        message: String,
    },
    /// Decompressing a batch would produce more than the caller allows (a
    /// decompression bomb, or a batch too large for the broker's bound).
    #[error("{codec} records decompress to more than {limit} bytes")]
    DecompressionLimit { codec: &'static str, limit: usize },
}

/// Result alias for this crate.
pub type Result<T, E = ProtocolError> = std::result::Result<T, E>;
