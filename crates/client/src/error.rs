//! The client's error type: transport failures, protocol failures, and
//! errors returned by the broker (carrying Kafka's error code and name).

use std::time::Duration;

use proto_kafka::error::ResponseError;

/// Result alias used throughout `sluice-client`.
pub type Result<T> = std::result::Result<T, ClientError>;

/// Everything that can go wrong talking to a Kafka-compatible broker.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The TCP connection failed or was lost.
    #[error("i/o error talking to {addr}: {source}")]
    Io {
        /// The broker address.
        addr: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A request did not complete within the request timeout.
    #[error("request {api} to {addr} timed out after {timeout:?}")]
    Timeout {
        /// The API that timed out (e.g. `Metadata`).
        api: String,
        /// The broker address.
        addr: String,
        /// The configured timeout.
        timeout: Duration,
    },
    /// The broker sent something we could not decode, or encoding failed.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// Neither side supports a common version of the API.
    #[error("broker {addr} supports no common version of {api}")]
    UnsupportedVersion {
        /// The API name.
        api: String,
        /// The broker address.
        addr: String,
    },
    /// The broker answered with a Kafka error code.
    #[error("{context}: {name} (Kafka error code {code}){}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Kafka {
        /// The decoded error.
        error: ResponseError,
        /// Kafka's numeric error code.
        code: i16,
        /// Kafka's error name, e.g. `TopicAlreadyExists`.
        name: String,
        /// The broker's error message, if any.
        message: Option<String>,
        /// What the client was doing (e.g. `create topic orders`).
        context: String,
    },
    /// No bootstrap server or broker could be reached.
    #[error("no broker available: {0}")]
    NoBrokerAvailable(String),
    /// The caller passed something invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A consumer has no position for a partition and `auto.offset.reset`
    /// is `none` (Kafka's `NoOffsetForPartitionException`).
    #[error("no offset for {partition}: {reason} and auto.offset.reset is none")]
    NoOffsetForPartition {
        /// `topic-partition`.
        partition: String,
        /// Why (no committed offset, or the position is out of range).
        reason: String,
    },
    /// An offset commit cannot succeed because this member is not in the
    /// group (Kafka's `CommitFailedException`): poll to rejoin first.
    #[error("commit failed: {0}")]
    CommitFailed(String),
    /// A produced record is larger than `buffer.memory` (or another
    /// producer size limit) and can never be sent.
    #[error("record of {size} bytes exceeds {limit_name} ({limit} bytes)")]
    RecordTooLarge {
        /// The record's estimated encoded size.
        size: usize,
        /// The limit it exceeds.
        limit: usize,
        /// Which setting, e.g. `buffer.memory`.
        limit_name: &'static str,
    },
    /// A call made in a state that does not allow it (Kafka's
    /// `IllegalStateException`), e.g. a transactional method on a producer
    /// without `transactional.id`, or `send` outside a transaction. The
    /// producer's state is unchanged.
    #[error("illegal state: {0}")]
    IllegalState(String),
    /// A transactional producer refuses the call because of an earlier
    /// error (Kafka's `KafkaException: Cannot execute transactional method
    /// because we are in an error state`). After an abortable error only
    /// `abort_transaction` is allowed; after a fatal one nothing is.
    #[error("cannot execute transactional method because we are in an error state ({}): {cause}", if *.fatal { "fatal" } else { "abortable" })]
    TransactionState {
        /// Whether the producer can only be closed.
        fatal: bool,
        /// The error that put the producer in this state.
        cause: Box<ClientError>,
    },
    /// A record that was not sent because its transaction was aborted
    /// (Kafka's `TransactionAbortedException`).
    #[error("failing batch since transaction was aborted")]
    TransactionAborted,
}

impl ClientError {
    /// Builds [`ClientError::Kafka`] from a non-zero error code; `None` for 0.
    pub fn from_code(
        code: i16,
        message: Option<String>,
        context: impl Into<String>,
    ) -> Option<Self> {
        let error = ResponseError::try_from_code(code)?;
        Some(ClientError::Kafka {
            error,
            code,
            name: format!("{error:?}"),
            message,
            context: context.into(),
        })
    }

    /// Kafka's error code when the broker returned one.
    pub fn code(&self) -> Option<i16> {
        match self {
            ClientError::Kafka { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The decoded [`ResponseError`] when the broker returned one (for
    /// [`ClientError::TransactionState`], its cause's).
    pub fn response_error(&self) -> Option<ResponseError> {
        match self {
            ClientError::Kafka { error, .. } => Some(*error),
            ClientError::TransactionState { cause, .. } => cause.response_error(),
            _ => None,
        }
    }

    /// Whether a transactional producer that returned this error can only
    /// be closed (Kafka's fatal errors: fenced, unauthorized transactional
    /// id, unsupported version, or a fatal error state).
    pub fn is_fatal_transaction_error(&self) -> bool {
        match self {
            ClientError::TransactionState { fatal, .. } => *fatal,
            ClientError::UnsupportedVersion { .. } => true,
            ClientError::Kafka { error, .. } => matches!(
                error,
                ResponseError::ProducerFenced
                    | ResponseError::TransactionalIdAuthorizationFailed
                    | ResponseError::ClusterAuthorizationFailed
                    | ResponseError::UnsupportedVersion
            ),
            _ => false,
        }
    }

    /// Whether retrying (possibly after a metadata refresh) may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::Io { .. } | ClientError::Timeout { .. } => true,
            ClientError::NoBrokerAvailable(_) => true,
            ClientError::Kafka { error, .. } => error.is_retriable(),
            _ => false,
        }
    }

    /// Whether the error means our cached metadata is stale (Kafka's
    /// `InvalidMetadataException` family, plus lost connections): the
    /// partition's leader may have moved.
    pub fn invalidates_metadata(&self) -> bool {
        matches!(
            self,
            ClientError::Io { .. }
                | ClientError::Timeout { .. }
                | ClientError::Kafka {
                    error: ResponseError::NotLeaderOrFollower
                        | ResponseError::UnknownTopicOrPartition
                        | ResponseError::LeaderNotAvailable
                        | ResponseError::NotController
                        | ResponseError::FencedLeaderEpoch
                        | ResponseError::UnknownLeaderEpoch
                        | ResponseError::ReplicaNotAvailable
                        | ResponseError::KafkaStorageError
                        | ResponseError::NetworkException
                        | ResponseError::PreferredLeaderNotAvailable
                        | ResponseError::UnknownTopicId
                        | ResponseError::InconsistentTopicId,
                    ..
                }
        )
    }
}

impl Clone for ClientError {
    /// A copy (an I/O error is copied as its kind and message).
    fn clone(&self) -> Self {
        match self {
            ClientError::Kafka {
                error,
                code,
                name,
                message,
                context,
            } => ClientError::Kafka {
                error: *error,
                code: *code,
                name: name.clone(),
                message: message.clone(),
                context: context.clone(),
            },
            ClientError::Io { addr, source } => ClientError::Io {
                addr: addr.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            ClientError::Timeout { api, addr, timeout } => ClientError::Timeout {
                api: api.clone(),
                addr: addr.clone(),
                timeout: *timeout,
            },
            ClientError::NoBrokerAvailable(s) => ClientError::NoBrokerAvailable(s.clone()),
            ClientError::Protocol(s) => ClientError::Protocol(s.clone()),
            ClientError::InvalidArgument(s) => ClientError::InvalidArgument(s.clone()),
            ClientError::CommitFailed(s) => ClientError::CommitFailed(s.clone()),
            ClientError::UnsupportedVersion { api, addr } => ClientError::UnsupportedVersion {
                api: api.clone(),
                addr: addr.clone(),
            },
            ClientError::NoOffsetForPartition { partition, reason } => {
                ClientError::NoOffsetForPartition {
                    partition: partition.clone(),
                    reason: reason.clone(),
                }
            }
            ClientError::RecordTooLarge {
                size,
                limit,
                limit_name,
            } => ClientError::RecordTooLarge {
                size: *size,
                limit: *limit,
                limit_name,
            },
            ClientError::IllegalState(s) => ClientError::IllegalState(s.clone()),
            ClientError::TransactionState { fatal, cause } => ClientError::TransactionState {
                fatal: *fatal,
                cause: cause.clone(),
            },
            ClientError::TransactionAborted => ClientError::TransactionAborted,
        }
    }
}

impl From<proto_kafka::error::ProtoError> for ClientError {
    fn from(e: proto_kafka::error::ProtoError) -> Self {
        ClientError::Protocol(e.to_string())
    }
}
