//! Kafka's v2 record batch format (magic 2).
//!
//! - [`batch`]: the 61-byte batch header as a view over the bytes, CRC32C
//!   validation and in-place patching of base offset, partition leader epoch
//!   and LogAppendTime; iteration over a buffer of concatenated batches.
//! - [`codec`]: individual records inside a batch (varint layout), decoding for
//!   the few paths that need keys or exact timestamps (compaction, lookup by
//!   timestamp) and building new batches (compaction output, tests, clients).
//! - [`control`]: control records (COMMIT/ABORT transaction markers).
//! - [`compression`]: gzip, snappy (raw and xerial framing), lz4 (frame) and
//!   zstd, selected by the low three attribute bits as in Kafka, and a
//!   streaming decompressor with an output limit.
//! - [`walk`]: the allocation-free walk over a batch's record framing
//!   (counts, lengths, offset deltas) that the produce path validates with.

pub mod batch;
pub mod codec;
pub mod compression;
pub mod control;
pub mod walk;

pub use batch::{BatchHeader, BatchIter, TimestampType};
pub use codec::{BatchBuilder, Header, Record, RecordRef};
pub use compression::{Compression, Decompressor};
pub use walk::{walk_batch, RecordMeta, WalkSummary};
