//! Committed offsets and the `__consumer_offsets` records they live in.
//!
//! - [`schema`]: byte-exact Kafka record keys and values (offset commits
//!   and classic group metadata), tombstones.
//! - [`store`]: the committed-offsets state machine of one coordinator
//!   partition: commit / fetch / delete / expire return records to append;
//!   offsets become visible when the appended records are applied;
//!   replay rebuilds the state from the topic. Transactional commits stay
//!   pending until their producer's marker (`pending.rs`).
//! - [`partition`]: which `__consumer_offsets` partition coordinates a
//!   group (Kafka's hash).
//!
//! Sans-IO: no log access here; the broker appends the returned records
//! and feeds them back.

pub mod partition;
mod pending;
pub mod schema;
pub mod store;
pub(crate) mod wire;

pub use partition::{coordinator_partition, DEFAULT_OFFSETS_TOPIC_PARTITIONS};
pub use schema::{
    GroupMetadataKey, GroupMetadataValue, MemberMetadata, OffsetCommitKey, OffsetCommitValue,
    Record, RecordKey,
};
pub use store::{
    CommittedOffset, ExpireOutcome, ExpiryBase, FetchedPartition, FetchedTopic, OffsetConfig,
    OffsetStore, Outcome, PartitionCommit, PartitionResult, Replayed, TopicOffsets,
    TopicPartitions,
};
