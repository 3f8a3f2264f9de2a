//! The broker crate's error type. Kafka error codes for clients are chosen
//! in `handlers::errors`, not here.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum BrokerError {
    /// A config key that does not exist.
    #[error("Unknown config name: {0}")]
    UnknownConfig(String),
    /// A config value that does not parse or is out of range (Kafka's
    /// `ConfigException` wording; secrets show as `[hidden]`).
    #[error("Invalid value {value} for configuration {key}: {reason}")]
    InvalidConfig {
        key: String,
        value: String,
        reason: String,
    },
    #[error("I/O error on {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Storage(#[from] sluice_storage::StorageError),
    #[error(transparent)]
    Controller(#[from] sluice_controller::ControllerError),
    /// A request that cannot be decoded.
    #[error("malformed request: {0}")]
    Malformed(String),
}

pub type Result<T, E = BrokerError> = std::result::Result<T, E>;

pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> BrokerError {
    BrokerError::Io {
        what: what.into(),
        source,
    }
}
