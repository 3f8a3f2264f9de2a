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
//! | [`serde`] | [`Serde`](serde::Serde) and the usual serdes (bytes, string, i64, i32, JSON) |
//! | [`processor`] | the processor API: [`Record`](processor::Record), [`Processor`](processor::Processor), [`ProcessorContext`](processor::ProcessorContext), punctuation |
//! | [`topology`] | [`Topology`](topology::Topology): nodes, stores, sub-topologies, `describe()`, the runtime's [`TopologyInfo`](topology::TopologyInfo) |
//! | [`dsl`] | [`StreamsBuilder`](dsl::StreamsBuilder), `KStream`, `KTable`, grouped streams and tables, joins |
//! | [`state`] | the store trait, the in-memory store, the record cache, change logging |
//! | [`task`] | [`StreamTask`](task::StreamTask): the I/O-free task core (queues, stream time, punctuation, commit) |
//! | [`test_driver`] | [`TopologyTestDriver`](test_driver::TopologyTestDriver): runs a topology without a broker |
//! | [`task_id`] | [`TaskId`]: sub-topology × partition, printed `0_1` as Kafka does |
//! | [`error`] | [`StreamsError`] |

#![warn(missing_docs)]

pub mod assignor;
pub mod config;
pub mod dsl;
pub mod error;
pub mod internal_topics;
pub mod processor;
pub mod restore;
pub mod runtime;
pub mod serde;
pub mod state;
pub mod task;
pub mod task_id;
pub mod test_driver;
pub mod topology;

pub use error::{Result, StreamsError};
pub use task_id::TaskId;
