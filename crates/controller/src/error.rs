//! The controller crate's error type.

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
}

pub type Result<T, E = ControllerError> = std::result::Result<T, E>;
