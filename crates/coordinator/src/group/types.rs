//! Plain Rust inputs and outputs of the group state machine: requests,
//! responses, the `Effects` a call returns, the group-metadata snapshot to
//! persist, and the configuration. No wire types live here.

use super::error::GroupError;
use super::state::GroupState;

/// Identifies a parked request. The caller picks it; JoinGroup and
/// SyncGroup responses come back keyed by it, possibly from a later call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestToken(pub u64);

/// One protocol a member supports, in its order of preference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protocol {
    pub name: String,
    pub metadata: Vec<u8>,
}

impl Protocol {
    pub fn new(name: impl Into<String>, metadata: impl Into<Vec<u8>>) -> Self {
        Protocol {
            name: name.into(),
            metadata: metadata.into(),
        }
    }
}

/// JoinGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinGroupRequest {
    pub group_id: String,
    /// "" for a member that does not have an id yet.
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    /// JoinGroup v0 has none: pass the session timeout, as Kafka does.
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<Protocol>,
    /// JoinGroup v4+ (KIP-394): a dynamic member without id first gets
    /// MEMBER_ID_REQUIRED with an id to rejoin with.
    pub require_known_member_id: bool,
    /// JoinGroup v9+ (KIP-814): a static leader may be told to skip the
    /// assignment when it is replaced in a Stable group.
    pub supports_skip_assignment: bool,
}

/// A member as listed to the leader in its JoinGroup response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinResponseMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    /// The member's metadata for the selected protocol.
    pub metadata: Vec<u8>,
}

/// JoinGroup response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinGroupResponse {
    pub error: Option<GroupError>,
    /// -1 on error, as Kafka.
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// "" when unknown.
    pub leader: String,
    pub skip_assignment: bool,
    pub member_id: String,
    /// Non-empty only for the leader.
    pub members: Vec<JoinResponseMember>,
}

impl JoinGroupResponse {
    pub(crate) fn error(member_id: &str, error: GroupError) -> Self {
        JoinGroupResponse {
            error: Some(error),
            generation_id: -1,
            member_id: member_id.to_string(),
            ..Default::default()
        }
    }
}

/// SyncGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncGroupRequest {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation_id: i32,
    /// v5+; checked against the group's when present.
    pub protocol_type: Option<String>,
    /// v5+; checked against the group's when present.
    pub protocol_name: Option<String>,
    /// The leader's assignment; empty for followers.
    pub assignments: Vec<(String, Vec<u8>)>,
}

/// SyncGroup response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncGroupResponse {
    pub error: Option<GroupError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Vec<u8>,
}

impl SyncGroupResponse {
    pub(crate) fn error(error: GroupError) -> Self {
        SyncGroupResponse {
            error: Some(error),
            ..Default::default()
        }
    }
}

/// Heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatRequest {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation_id: i32,
}

/// One member leaving (LeaveGroup v3+ batches them; v0-2 is one member
/// without instance id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeavingMember {
    /// "" to leave by `group_instance_id` alone.
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

/// LeaveGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaveGroupRequest {
    pub group_id: String,
    pub members: Vec<LeavingMember>,
}

/// LeaveGroup response: a top-level error, or one outcome per member.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaveGroupResponse {
    pub error: Option<GroupError>,
    pub members: Vec<(LeavingMember, Option<GroupError>)>,
}

/// A delayed response, delivered through `Effects`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupResponse {
    Join(JoinGroupResponse),
    Sync(SyncGroupResponse),
}

/// A member as persisted in group metadata (mirrors Kafka's
/// GroupMetadataValue.MemberMetadata).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberSnapshot {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout: i32,
    pub session_timeout: i32,
    /// The member's metadata for the selected protocol.
    pub subscription: Vec<u8>,
    pub assignment: Vec<u8>,
}

/// A group as persisted (mirrors Kafka's GroupMetadataValue; the caller
/// keys it by GroupMetadataKey(group_id)).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupMetadataSnapshot {
    pub group_id: String,
    /// "" when the group has none (Kafka writes "" for None).
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    /// -1 when unknown.
    pub current_state_timestamp: i64,
    pub members: Vec<MemberSnapshot>,
}

/// A record for `__consumer_offsets`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupRecord {
    /// Group metadata changed: append GroupMetadataKey -> value.
    Metadata(GroupMetadataSnapshot),
    /// The group was deleted: append a tombstone for its GroupMetadataKey.
    Tombstone { group_id: String },
}

/// What a call asks the caller to do. Contract: append `records` (in
/// order) before sending `responses`; the state machine has already
/// applied them (see the module docs on append failures).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Effects {
    pub responses: Vec<(RequestToken, GroupResponse)>,
    pub records: Vec<GroupRecord>,
}

impl Effects {
    pub fn is_empty(&self) -> bool {
        self.responses.is_empty() && self.records.is_empty()
    }

    /// Appends another call's effects after these.
    pub fn extend(&mut self, other: Effects) {
        self.responses.extend(other.responses);
        self.records.extend(other.records);
    }

    pub(crate) fn join(&mut self, token: RequestToken, response: JoinGroupResponse) {
        self.responses.push((token, GroupResponse::Join(response)));
    }

    pub(crate) fn sync(&mut self, token: RequestToken, response: SyncGroupResponse) {
        self.responses.push((token, GroupResponse::Sync(response)));
    }
}

/// A member in DescribeGroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Empty unless the group is Stable.
    pub metadata: Vec<u8>,
    /// Empty unless the group is Stable.
    pub assignment: Vec<u8>,
}

/// A group in DescribeGroups. An unknown group is described as Dead with
/// no error, as Kafka does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedGroup {
    pub group_id: String,
    pub error: Option<GroupError>,
    pub state: GroupState,
    pub protocol_type: String,
    /// The selected protocol when Stable, else "".
    pub protocol_data: String,
    pub members: Vec<DescribedMember>,
}

/// A group in ListGroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    pub state: GroupState,
}

/// Configuration (Kafka broker configs of the same names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms`.
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`.
    pub max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms`.
    pub initial_rebalance_delay_ms: i32,
    /// `group.max.size`.
    pub max_size: usize,
    /// How long a new member may wait in JoinGroup before it is dropped
    /// (Kafka's internal 5 minutes).
    pub new_member_join_timeout_ms: i32,
    /// Seeds the member-id generator; vary it per broker start so ids do
    /// not repeat after a restart.
    pub member_id_seed: u64,
    /// The shortest wait for SyncGroup after a rebalance, whatever the
    /// rebalance timeout (0 in the sans-IO model). Kafka's timers fire
    /// from a timing wheel whose clock a reaper thread advances at most
    /// every 200 ms, so a zero-delay pending-sync timer fires somewhere in
    /// the next 0-200 ms and a prompt SyncGroup gets through; the broker
    /// sets this to keep that guarantee deterministic.
    pub min_sync_delay_ms: i32,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 3_000,
            max_size: i32::MAX as usize,
            new_member_join_timeout_ms: 300_000,
            member_id_seed: 0x5EED,
            min_sync_delay_ms: 0,
        }
    }
}
