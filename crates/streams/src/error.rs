//! The one error type of sluice-streams.

use sluice_client::ClientError;

/// Everything that can go wrong in sluice-streams.
#[derive(Debug, thiserror::Error)]
pub enum StreamsError {
    /// A call to the broker failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A file under `state.dir` could not be read or written.
    #[error("state directory {path}: {source}")]
    StateDir {
        /// The file or folder.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A topology that cannot run (names, co-partitioning, missing stores).
    #[error("invalid topology: {0}")]
    Topology(String),
    /// A configuration value that is missing or invalid; the message names it.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A key or value that a serde could not (de)serialize.
    #[error("serialization: {0}")]
    Serde(String),
    /// A state store failed or was used wrongly.
    #[error("state store {store}: {message}")]
    Store {
        /// The store's name.
        store: String,
        /// What went wrong.
        message: String,
    },
    /// The streams assignor met user data it cannot read, or a member got
    /// an assignment it cannot use.
    #[error("streams assignment: {0}")]
    Assignment(String),
    /// An internal (changelog or repartition) topic exists with the wrong
    /// shape, or could not be created.
    #[error("internal topic {topic}: {message}")]
    InternalTopic {
        /// The topic.
        topic: String,
        /// What is wrong.
        message: String,
    },
    /// Topics that must be co-partitioned have different partition counts;
    /// the message names every topic with its count.
    #[error("{0}")]
    Copartitioning(String),
    /// A task's local state cannot be trusted (Kafka's
    /// `TaskCorruptedException`): its stores are wiped and restored from
    /// scratch.
    #[error("task corrupted: {0}")]
    TaskCorrupted(String),
    /// The operation is not allowed in the client's current state.
    #[error("illegal state: {0}")]
    IllegalState(String),
}

/// `Result` with [`StreamsError`].
pub type Result<T, E = StreamsError> = std::result::Result<T, E>;
