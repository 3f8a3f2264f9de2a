//! The controller crate's error type.

use std::path::PathBuf;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ControllerError {
    /// A metadata record that does not decode.
    #[error("invalid metadata record: {0}")]
    Record(String),
    /// The metadata log failed.
    #[error(transparent)]
    Storage(#[from] sluice_storage::StorageError),
    /// A record batch of the metadata log failed to decode.
    #[error(transparent)]
    Protocol(#[from] sluice_protocol::ProtocolError),
    /// A snapshot file that is not a complete, valid snapshot.
    #[error("metadata snapshot {path}: {reason}")]
    Snapshot { path: PathBuf, reason: String },
    /// File system trouble with a snapshot file or the metadata folder.
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The metadata log and its snapshots do not add up to a complete
    /// image (start-up refuses rather than run with topics missing).
    #[error("metadata is incomplete: {0}")]
    Inconsistent(String),
    /// The metadata quorum failed (Raft, its settings, its transport).
    #[error("metadata quorum: {0}")]
    Quorum(String),
    /// The quorum leader refused a change that would create a topic whose
    /// name exists (TOPIC_ALREADY_EXISTS).
    #[error("{0}")]
    TopicExists(String),
    /// The quorum leader refused a change made against an outdated image
    /// (a topic already removed, a producer id block already handed out).
    #[error("metadata change conflicts with the current image: {0}")]
    Conflict(String),
    /// No quorum leader could take a change (Kafka's NOT_CONTROLLER).
    #[error("not the controller: {0}")]
    NotController(String),
    /// Every producer id has been handed out.
    #[error("producer ids exhausted: {0}")]
    ProducerIdsExhausted(String),
}

pub type Result<T, E = ControllerError> = std::result::Result<T, E>;

pub(crate) fn io_at(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> ControllerError + '_ {
    move |source| ControllerError::Io {
        path: path.to_path_buf(),
        source,
    }
}
