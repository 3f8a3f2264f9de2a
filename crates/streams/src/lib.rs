//! sluice-streams: a Kafka Streams library in Rust, on [`sluice_client`].
//!
//! It follows Apache Kafka Streams (`org.apache.kafka.streams`) in names and
//! semantics: a topology of processors built with a DSL or the processor
//! API, split into sub-topologies; one task per sub-topology and input
//! partition (the assignment of partitions to tasks never changes); stream
//! threads that run tasks and share no state; local state stores backed by
//! compacted changelog topics; and the library's own partition assignor.
//!
//! ```
//! use sluice_streams::dsl::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
//! use sluice_streams::serde::Serdes;
//! use sluice_streams::test_driver::TopologyTestDriver;
//!
//! # fn main() -> sluice_streams::Result<()> {
//! let builder = StreamsBuilder::new();
//! builder
//!     .stream("streams-plaintext-input", Consumed::with(Serdes::nullable(Serdes::string()), Serdes::string()))
//!     .flat_map_values(|line: String| {
//!         line.to_lowercase().split_whitespace().map(str::to_string).collect::<Vec<_>>()
//!     })
//!     .group_by(|_key, word: &String| word.clone(), Grouped::with(Serdes::string(), Serdes::string()))
//!     .count(Materialized::default())
//!     .to_stream()
//!     .to("streams-wordcount-output", Produced::with(Serdes::string(), Serdes::nullable(Serdes::i64())));
//! let topology = builder.build()?;
//! assert!(topology.describe().to_string().starts_with("Topologies:\n   Sub-topology: 0\n"));
//!
//! let driver = TopologyTestDriver::new(&topology)?;
//! let input = driver.create_input_topic("streams-plaintext-input", Serdes::nullable(Serdes::string()), Serdes::string());
//! let output = driver.create_output_topic("streams-wordcount-output", Serdes::string(), Serdes::i64());
//! input.pipe_input(None, "all streams lead to kafka".into(), 0)?;
//! input.pipe_input(None, "hello kafka streams".into(), 1)?;
//! let counts = output.read_key_values_to_map()?;
//! assert_eq!(counts["kafka"], 2);
//! assert_eq!(counts["hello"], 1);
//! # Ok(())
//! # }
//! ```
//!
//! The runtime drives the same [`task::StreamTask`] core the driver uses:
//! [`topology::Topology::topics_info`] lists sub-topologies, topics, stores
//! and changelogs; [`task::StreamTask`] processes, punctuates and prepares
//! commits; output goes through a [`task::RecordCollector`].
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
