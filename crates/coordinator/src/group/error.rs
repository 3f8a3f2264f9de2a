//! `GroupError`: the outcomes the classic group state machine reports, one
//! per Kafka error code it can return. The broker writes `code()` into the
//! response; this module does not know about wire types.

/// A Kafka error a group API returns. `code()` is Kafka's numeric code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum GroupError {
    /// UNKNOWN_SERVER_ERROR (-1): an internal inconsistency; never expected.
    #[error("unknown server error")]
    UnknownServerError,
    /// COORDINATOR_LOAD_IN_PROGRESS (14): the partition is still replaying.
    #[error("the coordinator is loading")]
    CoordinatorLoadInProgress,
    /// COORDINATOR_NOT_AVAILABLE (15): the group is Dead (moving away).
    #[error("the coordinator is not available")]
    CoordinatorNotAvailable,
    /// NOT_COORDINATOR (16): the partition was unloaded under a parked request.
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
}

impl GroupError {
    /// Kafka's numeric error code.
    pub fn code(self) -> i16 {
        match self {
            GroupError::UnknownServerError => -1,
            GroupError::CoordinatorLoadInProgress => 14,
            GroupError::CoordinatorNotAvailable => 15,
            GroupError::NotCoordinator => 16,
            GroupError::IllegalGeneration => 22,
            GroupError::InconsistentGroupProtocol => 23,
            GroupError::InvalidGroupId => 24,
            GroupError::UnknownMemberId => 25,
            GroupError::InvalidSessionTimeout => 26,
            GroupError::RebalanceInProgress => 27,
            GroupError::NonEmptyGroup => 68,
            GroupError::GroupIdNotFound => 69,
            GroupError::MemberIdRequired => 79,
            GroupError::GroupMaxSizeReached => 81,
            GroupError::FencedInstanceId => 82,
        }
    }
}

/// Error code of an optional error: 0 (NONE) when absent.
pub fn error_code(error: Option<GroupError>) -> i16 {
    error.map_or(0, GroupError::code)
}
