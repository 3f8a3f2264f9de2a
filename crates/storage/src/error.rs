//! The storage crate's error type. Kafka error codes are chosen from these at
//! the broker boundary (for example `Corrupt` → CORRUPT_MESSAGE,
//! `RecordTooLarge` → MESSAGE_TOO_LARGE, `InvalidRecord` → INVALID_RECORD,
//! `RecordErrors` → INVALID_RECORD or INVALID_TIMESTAMP with per-record
//! errors, `OffsetOutOfRange` → OFFSET_OUT_OF_RANGE, `Offline` →
//! KAFKA_STORAGE_ERROR, `OutOfOrderSequence` → OUT_OF_ORDER_SEQUENCE_NUMBER,
//! `InvalidProducerEpoch` → INVALID_PRODUCER_EPOCH, `InvalidTxnState` →
//! INVALID_TXN_STATE, `TransactionCoordinatorFenced` →
//! TRANSACTION_COORDINATOR_FENCED).

use std::path::PathBuf;

use thiserror::Error;

/// Everything storage can fail with.
#[derive(Debug, Error)]
pub enum StorageError {
    /// A batch handed to append failed validation; nothing was appended.
    #[error("corrupt record batch: {0}")]
    Corrupt(#[from] sluice_protocol::ProtocolError),
    /// A batch is larger than the topic's `max.message.bytes`.
    #[error("record batch of {size} bytes exceeds max.message.bytes {max}")]
    RecordTooLarge { size: usize, max: usize },
    /// A batch Kafka's validator refuses as a whole (its
    /// `InvalidRecordException`): offset range against record count, record
    /// framing, base offset, control batches from clients; nothing was
    /// appended.
    #[error("{0}")]
    InvalidRecord(String),
    /// Records refused one by one (Kafka's `RecordValidationException`): a
    /// keyless record in a compacted topic, a timestamp out of bounds. The
    /// whole append fails; `errors` holds the first
    /// [`MAX_RECORD_ERRORS`](crate::log::MAX_RECORD_ERRORS) of `total`.
    #[error("{message}")]
    RecordErrors {
        kind: RecordErrorKind,
        errors: Vec<RecordError>,
        total: usize,
        /// Kafka's summary, sent as the partition's `error_message`.
        message: String,
    },
    /// A batch whose sequence does not follow its producer's last one
    /// (Kafka's `OutOfOrderSequenceException`); nothing was appended.
    #[error("{0}")]
    OutOfOrderSequence(String),
    /// A batch from an older epoch than its producer's latest (Kafka's
    /// `InvalidProducerEpochException`); nothing was appended.
    #[error("{0}")]
    InvalidProducerEpoch(String),
    /// A non-transactional batch from a producer with an open transaction
    /// (Kafka's `InvalidTxnStateException`); nothing was appended.
    #[error("{0}")]
    InvalidTxnState(String),
    /// A transaction marker from an older coordinator epoch than the
    /// producer's last one (Kafka's `TransactionCoordinatorFencedException`).
    #[error("{0}")]
    TransactionCoordinatorFenced(String),
    /// A read or truncation offset outside `[log start, log end]`.
    #[error("offset {offset} is out of range [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start: i64,
        log_end: i64,
    },
    /// A follower's append that starts below its log end (Kafka's
    /// `UnexpectedAppendOffsetException`): it must truncate first.
    #[error("unexpected append offset in {partition}: first offset {first} is below the log end offset {log_end}")]
    UnexpectedAppendOffset {
        partition: String,
        first: i64,
        log_end: i64,
    },
    /// An I/O error, with the file it happened on.
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The partition hit an I/O error earlier and refuses appends until it is
    /// reopened.
    #[error("log {0} is offline after an earlier I/O error; reopen it")]
    Offline(String),
    /// A file in the data folder is not what its name says.
    #[error("{path}: {reason}")]
    BadFile { path: PathBuf, reason: String },
    /// A topic config value that is not valid (Kafka's `ConfigException`
    /// wording, which names the key).
    #[error("Invalid value {value} for configuration {key}: {reason}")]
    InvalidConfig {
        key: String,
        value: String,
        reason: String,
    },
    /// A config key that does not exist (Kafka's wording).
    #[error("Unknown topic config name: {0}")]
    UnknownConfig(String),
    /// The data folders cannot be used as they are (no folder; a partition
    /// in two folders, Kafka's duplicate-log error).
    #[error("data folders: {0}")]
    Layout(String),
    /// The log was closed or deleted while in use.
    #[error("log {0} is closed")]
    Closed(String),
}

/// Which Kafka error a [`StorageError::RecordErrors`] carries: any invalid
/// timestamp makes it INVALID_TIMESTAMP, as in Kafka.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordErrorKind {
    InvalidRecord,
    InvalidTimestamp,
}

/// One refused record: its index in the batch and why (Kafka's
/// `ProduceResponse.RecordError`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    pub batch_index: i32,
    pub message: Option<String>,
}

impl std::fmt::Display for RecordError {
    /// Kafka's `RecordError.toString`, which its summary message embeds.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.message {
            Some(m) => write!(
                f,
                "RecordError(batchIndex={}, message='{m}')",
                self.batch_index
            ),
            None => write!(
                f,
                "RecordError(batchIndex={}, message=null)",
                self.batch_index
            ),
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// Attaches a path to an `io::Error`.
pub(crate) trait IoContext<T> {
    fn at(self, path: &std::path::Path) -> Result<T>;
    /// Like `at`, building the path only on error (hot paths).
    fn at_with(self, path: impl FnOnce() -> std::path::PathBuf) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: &std::path::Path) -> Result<T> {
        self.map_err(|source| StorageError::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    fn at_with(self, path: impl FnOnce() -> std::path::PathBuf) -> Result<T> {
        self.map_err(|source| StorageError::Io {
            path: path(),
            source,
        })
    }
}

pub(crate) fn bad_file(path: &std::path::Path, reason: impl Into<String>) -> StorageError {
    StorageError::BadFile {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}
