//! A native async (tokio) client for Sluice and any Kafka-compatible
//! broker: [`Producer`], [`Consumer`](consumer::Consumer) and [`Admin`].
//! Nothing Sluice-specific goes on the wire: versions are negotiated with
//! `ApiVersions`, so the same code works against Apache Kafka.
//!
//! | module | owns |
//! |---|---|
//! | [`connection`] | one TCP connection: framing, version negotiation, timeouts |
//! | [`cluster`] | bootstrap, metadata cache, per-broker connections, retries |
//! | [`admin`] | topics, configs, groups, offsets, delete records, cluster |
//! | [`producer`], [`accumulator`], [`partitioner`] | batching, the sender task, the idempotent producer (on by default), the transactional producer (`transactional.id`: the state machine in `producer/transaction.rs`, its requests in `producer/transactional.rs` and `producer/txn_offsets.rs`, design 015), murmur2 and sticky partitioning |
//! | [`consumer`] | group membership, assignors, fetching (`read_committed` drops aborted transactions), commits, the group metadata a transactional producer commits offsets with |
//! | [`error`] | [`ClientError`], carrying Kafka's error code and name |
//!
//! The example runs for real (`cargo test --doc`): the hidden lines start an
//! in-process Sluice broker on a free port.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
//! # let mut broker = sluice_broker::BrokerConfig::default();
//! # broker.set("log.dirs", &dir.path().display().to_string())?;
//! # broker.set("listeners", &format!("PLAINTEXT://127.0.0.1:{port}"))?;
//! # broker.set("group.initial.rebalance.delay.ms", "0")?;
//! # let server = sluice_broker::Server::bind(broker).await?;
//! # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! # let running = tokio::spawn(server.run(async { let _ = stopped.await; }));
//! # let bootstrap = format!("127.0.0.1:{port}");
//! use std::time::Duration;
//! use sluice_client::admin::NewTopic;
//! use sluice_client::consumer::{Consumer, ConsumerConfig, OffsetReset};
//! use sluice_client::{Admin, ClientConfig, Producer, ProducerConfig, ProducerRecord};
//!
//! let client = ClientConfig::new(&bootstrap); // e.g. "127.0.0.1:9092"
//!
//! // Admin: create a topic with three partitions.
//! let admin = Admin::connect(client.clone()).await?;
//! admin.create_topic(NewTopic::new("orders", 3, 1)).await?;
//!
//! // Producer: records with the same key land on the same partition.
//! let producer = Producer::new(ProducerConfig::new(client.clone())).await?;
//! for i in 0..10 {
//!     let record = ProducerRecord::new("orders", format!("order {i}").into_bytes())
//!         .key(format!("customer-{}", i % 3).into_bytes());
//!     let delivery = producer.send(record).await?; // buffered
//!     let meta = delivery.await?;                   // acknowledged
//!     assert_eq!(&*meta.topic, "orders");
//! }
//! producer.close().await?;
//!
//! // Consumer: join group "billing", read everything, commit.
//! let mut config = ConsumerConfig::new(client).group("billing");
//! config.auto_offset_reset = OffsetReset::Earliest;
//! config.enable_auto_commit = false;
//! let mut consumer = Consumer::new(config).await?;
//! consumer.subscribe(&["orders"])?;
//! let mut seen = 0;
//! while seen < 10 {
//!     for record in consumer.poll(Duration::from_millis(500)).await? {
//!         println!("{}-{}@{} {:?}", record.topic, record.partition, record.offset, record.value);
//!         seen += 1;
//!     }
//! }
//! consumer.commit_sync().await?;
//! consumer.close().await?;
//!
//! // Admin again: the group's committed offsets cover all ten records.
//! let committed = admin.list_consumer_group_offsets("billing", None).await?;
//! assert_eq!(committed.values().map(|o| o.offset).sum::<i64>(), 10);
//! # let _ = stop.send(());
//! # running.await??;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod accumulator;
pub mod admin;
pub mod cluster;
pub mod connection;
pub mod consumer;
pub mod error;
pub mod partitioner;
pub mod producer;

pub use accumulator::TopicPartition;
pub use admin::Admin;
pub use cluster::{ClientConfig, Cluster};
pub use error::{ClientError, Result};
pub use producer::{Producer, ProducerConfig, ProducerRecord, RecordMetadata};
