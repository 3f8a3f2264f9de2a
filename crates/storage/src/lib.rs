//! Sluice's storage engine: a partition's log on disk in Apache Kafka's own
//! layout, so Kafka's documentation and tools apply to it.
//!
//! - [`Log`] (module [`log`]) owns one partition folder `<topic>-<partition>`:
//!   append (validate, assign offsets, write without decoding records), read
//!   (file regions for sendfile), offset lookup by offset and by time, roll,
//!   retention, truncation, flush and recovery on open.
//! - [`segment`] owns one `.log` file and its [`index`] files.
//! - [`producer`] keeps each partition's producer state (idempotence:
//!   epochs, sequences, duplicates) and its snapshot files.
//! - [`cleaner`] compacts `cleanup.policy=compact` logs in the background.
//! - [`LogManager`] (module [`manager`]) owns every partition of a data
//!   folder, the data-folder checkpoints and the background work.
//! - [`checkpoint`] and [`epoch`] keep Kafka's text checkpoint files;
//!   [`partition_metadata`] the topic id of a partition folder.
//! - [`config`] holds Kafka's topic config names and defaults.

pub mod checkpoint;
pub mod cleaner;
pub mod clock;
pub mod config;
pub mod epoch;
pub mod error;
pub(crate) mod index;
pub mod log;
pub mod manager;
pub mod partition_metadata;
pub mod producer;
pub mod segment;
pub mod txn_index;

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{CleanupPolicy, LogConfig, TimestampType, TopicCompression};
pub use error::{RecordError, RecordErrorKind, Result, StorageError};
pub use log::{
    AppendInfo, AppendOrigin, Log, LogOpenOptions, OffsetSpec, ReadInfo, ReadLimit, ReplayEvent,
    TimestampOffset,
};
pub use manager::{LogManager, ManagerConfig, MoveOutcome, MoveState};
pub use producer::{ActiveProducer, ProducerLoad, ProducerStateConfig, ProducerStateEntry};
pub use segment::FileRegion;

/// The KRaft metadata log's topic (Kafka's `Topic.CLUSTER_METADATA_TOPIC_NAME`).
/// Its folder `__cluster_metadata-0` belongs to the controller: the
/// [`LogManager`] never opens it, so topic retention, size retention and the
/// cleaner can never touch it whatever the broker's defaults say.
pub const CLUSTER_METADATA_TOPIC: &str = "__cluster_metadata";

/// A topic name and partition number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }

    /// The partition folder name, `<topic>-<partition>`.
    pub fn dir_name(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }

    /// Parses a partition folder name (the partition follows the last `-`).
    pub fn from_dir_name(name: &str) -> Option<Self> {
        let (topic, p) = name.rsplit_once('-')?;
        if topic.is_empty() || p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(Self::new(topic, p.parse().ok()?))
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}
