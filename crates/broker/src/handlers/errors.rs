//! The one place where broker and storage errors become Kafka error codes.

use proto_kafka::ResponseError;
use sluice_protocol::ProtocolError;
use sluice_storage::{RecordErrorKind, StorageError};

use crate::broker::ApiError;
use crate::error::BrokerError;

/// The Kafka error code for a storage failure on a partition.
pub(crate) fn storage_error(e: &StorageError) -> ApiError {
    let code = match e {
        // Records that decompress past the broker's bound: too large, as a
        // batch over max.message.bytes is.
        StorageError::Corrupt(ProtocolError::DecompressionLimit { .. }) => {
            ResponseError::MessageTooLarge
        }
        StorageError::Corrupt(_) => ResponseError::CorruptMessage,
        StorageError::RecordTooLarge { .. } => ResponseError::MessageTooLarge,
        StorageError::InvalidRecord(_) => ResponseError::InvalidRecord,
        StorageError::RecordErrors { kind, .. } => match kind {
            RecordErrorKind::InvalidRecord => ResponseError::InvalidRecord,
            RecordErrorKind::InvalidTimestamp => ResponseError::InvalidTimestamp,
        },
        StorageError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        // Producer state (Kafka 4 sends neither DUPLICATE_SEQUENCE_NUMBER
        // nor UNKNOWN_PRODUCER_ID on produce: a duplicate is answered with
        // its original offsets, an unknown producer's batch is taken).
        StorageError::OutOfOrderSequence(_) => ResponseError::OutOfOrderSequenceNumber,
        StorageError::InvalidProducerEpoch(_) => ResponseError::InvalidProducerEpoch,
        StorageError::InvalidTxnState(_) => ResponseError::InvalidTxnState,
        StorageError::TransactionCoordinatorFenced(_) => {
            ResponseError::TransactionCoordinatorFenced
        }
        StorageError::Io { .. }
        | StorageError::Offline(_)
        | StorageError::BadFile { .. }
        | StorageError::Layout(_) => {
            tracing::error!(error = %e, "storage failure");
            ResponseError::KafkaStorageError
        }
        StorageError::InvalidConfig { .. } | StorageError::UnknownConfig(_) => {
            ResponseError::InvalidConfig
        }
        StorageError::Closed(_) => ResponseError::NotLeaderOrFollower,
        // A follower's own append; never a client's.
        StorageError::UnexpectedAppendOffset { .. } => ResponseError::UnknownServerError,
    };
    ApiError::new(code, e.to_string())
}

/// The Kafka error code for a broker failure (a storage error inside
/// keeps its storage mapping).
pub(crate) fn broker_error(e: &BrokerError) -> ApiError {
    match e {
        BrokerError::Storage(e) => storage_error(e),
        BrokerError::UnknownConfig(_) | BrokerError::InvalidConfig { .. } => {
            ApiError::new(ResponseError::InvalidConfig, e.to_string())
        }
        BrokerError::Io { .. } => {
            tracing::error!(error = %e, "broker I/O failure");
            ApiError::new(ResponseError::KafkaStorageError, e.to_string())
        }
        BrokerError::Controller(_) | BrokerError::Malformed(_) => {
            tracing::error!(error = %e, "internal error");
            ApiError::new(ResponseError::UnknownServerError, e.to_string())
        }
    }
}
