//! sluice-streams: a Kafka Streams library in Rust, on [`sluice_client`].
//!
//! It follows Apache Kafka Streams (`org.apache.kafka.streams`) in names and
//! semantics: a topology of processors built with a DSL or the processor
//! API, split into sub-topologies; one task per sub-topology and input
//! partition (the assignment of partitions to tasks never changes); stream
//! threads that run tasks and share no state; local state stores backed by
//! compacted changelog topics; and the library's own partition assignor.
//!
//! | module | owns |
//! |---|---|
//! | [`assignor`] | the streams assignor (`"stream"`): task placement, subscription/assignment user data |
//! | [`internal_topics`] | changelog and repartition topics: names, configs, creation, co-partitioning, purging |
//! | [`restore`] | changelog restoration (`StoreChangelogReader`) |
//! | [`config`] | [`StreamsConfig`](config::StreamsConfig) |
//! | [`runtime`] | `KafkaStreams`, stream threads, task state management |
//! | [`task_id`] | [`TaskId`]: sub-topology × partition, printed `0_1` as Kafka does |
//! | [`state`] | the state store traits every store implements |
//! | [`error`] | [`StreamsError`] |

#![warn(missing_docs)]

pub mod assignor;
pub mod config;
pub mod error;
pub mod internal_topics;
pub mod restore;
pub mod runtime;
pub mod state;
pub mod task_id;

pub use error::{Result, StreamsError};
pub use task_id::TaskId;
