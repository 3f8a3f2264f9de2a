//! `KafkaError`: the outcomes the coordinators' state machines report to a
//! request, one variant per Kafka error code they can return (design 003).
//! The broker writes `code()` into the response, after any per-version
//! adjustment it owns (e.g. PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH
//! for old transactional requests); this module does not know about wire
//! types. The group module calls it `GroupError`.

/// A Kafka error a coordinator API returns. `code()` is Kafka's numeric
/// code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum KafkaError {
    /// UNKNOWN_SERVER_ERROR (-1): an internal inconsistency; never expected.
    #[error("unknown server error")]
    UnknownServerError,
    /// COORDINATOR_LOAD_IN_PROGRESS (14): the partition is still replaying.
    #[error("the coordinator is loading")]
    CoordinatorLoadInProgress,
    /// COORDINATOR_NOT_AVAILABLE (15): the group is Dead (moving away), or
    /// a transaction record could not be appended (not enough replicas,
    /// timeout, unknown partition).
    #[error("the coordinator is not available")]
    CoordinatorNotAvailable,
    /// NOT_COORDINATOR (16): the partition was unloaded under a parked
    /// request, or is not served by this coordinator.
    #[error("this broker is not the coordinator")]
    NotCoordinator,
    /// ILLEGAL_GENERATION (22).
    #[error("illegal generation")]
    IllegalGeneration,
    /// INCONSISTENT_GROUP_PROTOCOL (23).
    #[error("inconsistent group protocol")]
    InconsistentGroupProtocol,
    /// INVALID_GROUP_ID (24): empty group id.
    #[error("invalid group id")]
    InvalidGroupId,
    /// UNKNOWN_MEMBER_ID (25).
    #[error("unknown member id")]
    UnknownMemberId,
    /// INVALID_SESSION_TIMEOUT (26).
    #[error("invalid session timeout")]
    InvalidSessionTimeout,
    /// REBALANCE_IN_PROGRESS (27).
    #[error("rebalance in progress")]
    RebalanceInProgress,
    /// INVALID_REQUEST (42): e.g. an empty transactional id.
    #[error("invalid request")]
    InvalidRequest,
    /// INVALID_PRODUCER_EPOCH (47): what old clients get instead of
    /// PRODUCER_FENCED (chosen by the broker per request version).
    #[error("invalid producer epoch")]
    InvalidProducerEpoch,
    /// INVALID_TXN_STATE (48): the request does not fit the transaction's
    /// state (e.g. EndTxn commit after the transaction was aborted).
    #[error("invalid transaction state")]
    InvalidTxnState,
    /// INVALID_PRODUCER_ID_MAPPING (49): unknown transactional id, or it
    /// maps to another producer id.
    #[error("invalid producer id mapping")]
    InvalidProducerIdMapping,
    /// INVALID_TRANSACTION_TIMEOUT (50): not in 1..=`transaction.max.timeout.ms`.
    #[error("invalid transaction timeout")]
    InvalidTransactionTimeout,
    /// CONCURRENT_TRANSACTIONS (51): a transition of the transaction is in
    /// flight (record append or markers); the client retries.
    #[error("concurrent transactions")]
    ConcurrentTransactions,
    /// NON_EMPTY_GROUP (68).
    #[error("the group is not empty")]
    NonEmptyGroup,
    /// GROUP_ID_NOT_FOUND (69).
    #[error("group id not found")]
    GroupIdNotFound,
    /// MEMBER_ID_REQUIRED (79): KIP-394, rejoin with the given member id.
    #[error("member id required")]
    MemberIdRequired,
    /// GROUP_MAX_SIZE_REACHED (81).
    #[error("group max size reached")]
    GroupMaxSizeReached,
    /// FENCED_INSTANCE_ID (82): KIP-345, another member owns the instance id.
    #[error("fenced instance id")]
    FencedInstanceId,
    /// PRODUCER_FENCED (90): a newer producer owns the transactional id.
    #[error("producer fenced")]
    ProducerFenced,
    /// TRANSACTIONAL_ID_NOT_FOUND (105): DescribeTransactions of an
    /// unknown (or expiring) transactional id.
    #[error("transactional id not found")]
    TransactionalIdNotFound,
}

impl KafkaError {
    /// Kafka's numeric error code.
    pub fn code(self) -> i16 {
        match self {
            KafkaError::UnknownServerError => -1,
            KafkaError::CoordinatorLoadInProgress => 14,
            KafkaError::CoordinatorNotAvailable => 15,
            KafkaError::NotCoordinator => 16,
            KafkaError::IllegalGeneration => 22,
            KafkaError::InconsistentGroupProtocol => 23,
            KafkaError::InvalidGroupId => 24,
            KafkaError::UnknownMemberId => 25,
            KafkaError::InvalidSessionTimeout => 26,
            KafkaError::RebalanceInProgress => 27,
            KafkaError::InvalidRequest => 42,
            KafkaError::InvalidProducerEpoch => 47,
            KafkaError::InvalidTxnState => 48,
            KafkaError::InvalidProducerIdMapping => 49,
            KafkaError::InvalidTransactionTimeout => 50,
            KafkaError::ConcurrentTransactions => 51,
            KafkaError::NonEmptyGroup => 68,
            KafkaError::GroupIdNotFound => 69,
            KafkaError::MemberIdRequired => 79,
            KafkaError::GroupMaxSizeReached => 81,
            KafkaError::FencedInstanceId => 82,
            KafkaError::ProducerFenced => 90,
            KafkaError::TransactionalIdNotFound => 105,
        }
    }
}

/// Error code of an optional error: 0 (NONE) when absent.
pub fn error_code(error: Option<KafkaError>) -> i16 {
    error.map_or(0, KafkaError::code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_codes_are_kafkas() {
        let expected = [
            (KafkaError::InvalidRequest, 42),
            (KafkaError::InvalidProducerEpoch, 47),
            (KafkaError::InvalidTxnState, 48),
            (KafkaError::InvalidProducerIdMapping, 49),
            (KafkaError::InvalidTransactionTimeout, 50),
            (KafkaError::ConcurrentTransactions, 51),
            (KafkaError::ProducerFenced, 90),
            (KafkaError::TransactionalIdNotFound, 105),
            (KafkaError::CoordinatorLoadInProgress, 14),
            (KafkaError::CoordinatorNotAvailable, 15),
            (KafkaError::NotCoordinator, 16),
        ];
        for (e, code) in expected {
            assert_eq!(e.code(), code, "{e:?}");
        }
        assert_eq!(error_code(None), 0);
        assert_eq!(error_code(Some(KafkaError::UnknownServerError)), -1);
    }
}
