//! A native async (tokio) client for Sluice and any Kafka-compatible
//! broker: producer, consumer and admin. Nothing Sluice-specific goes on the
//! wire.
//!
//! Being built (issue #5).
