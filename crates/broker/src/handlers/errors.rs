//! The one place where broker and storage errors become Kafka error codes.

use proto_kafka::ResponseError;
use sluice_storage::StorageError;

use crate::broker::ApiError;

/// The Kafka error code for a storage failure on a partition.
pub(crate) fn storage_error(e: &StorageError) -> ApiError {
    let code = match e {
        StorageError::Corrupt(_) => ResponseError::CorruptMessage,
        StorageError::RecordTooLarge { .. } => ResponseError::MessageTooLarge,
        StorageError::InvalidTimestamp { .. } => ResponseError::InvalidTimestamp,
        StorageError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        StorageError::Io { .. } | StorageError::Offline(_) | StorageError::BadFile { .. } => {
            tracing::error!(error = %e, "storage failure");
            ResponseError::KafkaStorageError
        }
        StorageError::InvalidConfig { .. } | StorageError::UnknownConfig(_) => {
            ResponseError::InvalidConfig
        }
        StorageError::Closed(_) => ResponseError::NotLeaderOrFollower,
    };
    ApiError::new(code, e.to_string())
}
