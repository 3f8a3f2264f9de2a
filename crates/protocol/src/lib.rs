//! Kafka wire formats shared by every Sluice crate.
//!
//! This crate owns the byte layouts Sluice reproduces from Apache Kafka:
//! - [`record`]: the v2 record batch (magic 2) as it travels on the wire and
//!   sits in a segment file — a zero-copy header view with CRC32C checking and
//!   in-place patching of the fields outside the CRC, the per-record codec, and
//!   the four compression codecs (gzip, snappy, lz4, zstd).
//!
//! Request/response framing and the API message codecs arrive with the broker.

pub mod error;
pub mod record;

pub use error::{ProtocolError, Result};
