//! Cluster metadata, KRaft style: the controller owns an append-only log of
//! metadata records (`__cluster_metadata-0`), and every broker holds the
//! image those records build. On a single node the log is local and the
//! broker is its own controller; for clusters the same record stream will be
//! replicated by a Raft quorum.
//!
//! - [`records`]: Kafka's metadata record types and framing.
//! - [`image`]: the in-memory picture the records build (topics, partitions,
//!   configs).
//! - [`store`]: the metadata log on disk and its snapshots: the newest valid
//!   snapshot plus the log after it are loaded at start; snapshots are taken
//!   in the background and are the only way the log ever shrinks.
//! - [`snapshot`]: the snapshot file format (KRaft's `.checkpoint` files).
//! - [`quorum`]: the metadata quorum (design 018): the same log replicated
//!   by Raft (openraft) between controllers.
//! - [`election`]: partition leaders and ISRs when a broker is fenced or
//!   unfenced, and when its replicas in a failed data folder go offline.
//! - [`reassignment`]: partition reassignments (the target replicas, their
//!   completion once in sync, cancellation).
//! - [`producer_ids`]: blocks of producer ids, allocated through the
//!   metadata log ([`MetadataStore::allocate_producer_ids`]).

pub mod election;
pub mod error;
pub mod image;
pub mod producer_ids;
pub mod quorum;
pub mod reassignment;
pub mod records;
pub mod snapshot;
pub mod store;

pub use error::{ControllerError, Result};
pub use image::{BrokerRegistration, MetadataImage, PartitionImage, TopicImage};
pub use producer_ids::ProducerIdsBlock;
pub use records::MetadataRecord;
pub use snapshot::SnapshotId;
pub use store::{MetadataLogConfig, MetadataStore, RecordedRemoval};
