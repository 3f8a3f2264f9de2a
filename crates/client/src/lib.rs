//! A native async (tokio) client for Sluice and any Kafka-compatible
//! broker: producer, consumer and admin. Nothing Sluice-specific goes on the
//! wire.
//!
//! Being built (issue #5).

pub mod accumulator;
pub mod admin;
pub mod cluster;
pub mod connection;
pub mod error;
pub mod partitioner;
pub mod producer;

pub use admin::Admin;
pub use cluster::{ClientConfig, Cluster};
pub use error::{ClientError, Result};
pub use producer::{Producer, ProducerConfig, ProducerRecord, RecordMetadata};
