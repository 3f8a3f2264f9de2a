//! Kafka's classic consumer group protocol as a sans-IO state machine.
//!
//! [`GroupCoordinator`] owns the groups of one `__consumer_offsets`
//! partition. Every call takes the current time (`now_ms`, a manual clock)
//! and returns [`Effects`]: JoinGroup/SyncGroup responses keyed by the
//! caller's [`RequestToken`] (they may be answered by a later call, e.g.
//! when the rebalance completes) and [`GroupRecord`]s to append. There are
//! no threads and no timers inside: the caller asks [`next_deadline`] and
//! calls [`tick`] then.
//!
//! Records are applied optimistically: the state machine has moved on when
//! it returns them. The caller must append them before sending the
//! responses of the same `Effects`; if an append fails, the caller should
//! unload the partition (`unload`) and reload it from the log, as a
//! coordinator failover would.
//!
//! Files:
//! - `error.rs`: [`GroupError`], Kafka's error codes for group APIs.
//! - `types.rs`: requests, responses, effects, records, configuration.
//! - `member.rs`: one member (protocols, parked requests, session timer).
//! - `state.rs`: [`GroupState`] and one group's data and primitives.
//! - `rebalance.rs`: rebalance start/completion, removals and timers.
//! - `join.rs`: JoinGroup, static membership, max size.
//! - `sync.rs`: SyncGroup, Heartbeat, LeaveGroup.
//! - `admin.rs`: DescribeGroups, ListGroups, DeleteGroups, loading from
//!   persisted metadata, offset-commit validation for the offsets module.
//! - `tests/`: unit tests of every transition with a manual clock.
//!
//! [`next_deadline`]: GroupCoordinator::next_deadline
//! [`tick`]: GroupCoordinator::tick

mod admin;
mod error;
mod join;
mod member;
mod rebalance;
mod state;
mod sync;
mod types;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

pub use error::{error_code, GroupError};
pub use state::GroupState;
pub use types::{
    DescribedGroup, DescribedMember, Effects, GroupConfig, GroupMetadataSnapshot, GroupRecord,
    GroupResponse, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse, JoinResponseMember,
    LeaveGroupRequest, LeaveGroupResponse, LeavingMember, ListedGroup, MemberSnapshot, Protocol,
    RequestToken, SyncGroupRequest, SyncGroupResponse,
};

use rebalance::Ctx;
use state::ClassicGroup;

/// The classic groups of one `__consumer_offsets` partition.
#[derive(Debug)]
pub struct GroupCoordinator {
    cfg: GroupConfig,
    groups: BTreeMap<String, ClassicGroup>,
    /// Replaying the partition: requests get COORDINATOR_LOAD_IN_PROGRESS.
    loading: bool,
    id_state: u64,
}

impl GroupCoordinator {
    /// A coordinator with no groups, ready to serve.
    pub fn new(cfg: GroupConfig) -> Self {
        let id_state = cfg.member_id_seed;
        GroupCoordinator {
            cfg,
            groups: BTreeMap::new(),
            loading: false,
            id_state,
        }
    }

    pub fn config(&self) -> &GroupConfig {
        &self.cfg
    }

    /// Whether the partition is still being replayed.
    pub fn is_loading(&self) -> bool {
        self.loading
    }

    /// State of a group, if it exists.
    pub fn group_state(&self, group_id: &str) -> Option<GroupState> {
        self.groups.get(group_id).map(|g| g.state)
    }

    /// Generation of a group, if it exists.
    pub fn generation(&self, group_id: &str) -> Option<i32> {
        self.groups.get(group_id).map(|g| g.generation)
    }

    /// The group as it would be persisted now.
    pub fn snapshot(&self, group_id: &str) -> Option<GroupMetadataSnapshot> {
        self.groups.get(group_id).map(ClassicGroup::snapshot)
    }

    /// A fresh member id: `<client id or instance id>-<uuid-shaped hex>`,
    /// as Kafka builds them.
    fn next_member_id(&mut self, prefix: &str) -> String {
        let mut word = || {
            // splitmix64
            self.id_state = self.id_state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.id_state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let (a, b) = (word(), word());
        format!(
            "{prefix}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xffff,
            b >> 48,
            b & 0xffff_ffff_ffff
        )
    }

    /// JoinGroup. The response arrives in the returned effects or in a
    /// later call's, keyed by `token`.
    pub fn join_group(
        &mut self,
        now_ms: i64,
        token: RequestToken,
        req: &JoinGroupRequest,
    ) -> Effects {
        let mut fx = Effects::default();
        let error = if self.loading {
            Some(GroupError::CoordinatorLoadInProgress)
        } else if req.group_id.is_empty() {
            Some(GroupError::InvalidGroupId)
        } else if req.session_timeout_ms < self.cfg.min_session_timeout_ms
            || req.session_timeout_ms > self.cfg.max_session_timeout_ms
        {
            Some(GroupError::InvalidSessionTimeout)
        } else if !req.member_id.is_empty() && !self.groups.contains_key(&req.group_id) {
            Some(GroupError::UnknownMemberId)
        } else {
            None
        };
        if let Some(e) = error {
            fx.join(token, JoinGroupResponse::error(&req.member_id, e));
            return fx;
        }
        let prefix = req
            .group_instance_id
            .clone()
            .unwrap_or_else(|| req.client_id.clone());
        let new_member_id = self.next_member_id(&prefix);
        let is_new_group = !self.groups.contains_key(&req.group_id);
        let group = self
            .groups
            .entry(req.group_id.clone())
            .or_insert_with(|| ClassicGroup::new(&req.group_id, now_ms));
        let mut ctx = Ctx::new(&self.cfg, now_ms, &mut fx);
        group.join(&mut ctx, req, token, new_member_id);
        if is_new_group && fx.records.is_empty() {
            // Kafka persists a newly created group right away, without
            // members (they are persisted when the rebalance completes).
            let mut empty = group.snapshot();
            empty.members.clear();
            empty.leader = None;
            empty.protocol = None;
            fx.records.push(GroupRecord::Metadata(empty));
        }
        fx
    }

    /// SyncGroup. The response arrives in the returned effects or, for a
    /// follower that syncs before the leader, in a later call's.
    pub fn sync_group(
        &mut self,
        now_ms: i64,
        token: RequestToken,
        req: &SyncGroupRequest,
    ) -> Effects {
        let mut fx = Effects::default();
        let error = if self.loading {
            Some(GroupError::CoordinatorLoadInProgress)
        } else if req.group_id.is_empty() {
            Some(GroupError::InvalidGroupId)
        } else {
            match self.groups.get(&req.group_id) {
                None => Some(GroupError::UnknownMemberId),
                Some(g) if g.is(GroupState::Empty) => Some(GroupError::UnknownMemberId),
                Some(_) => None,
            }
        };
        if let Some(e) = error {
            fx.sync(token, SyncGroupResponse::error(e));
            return fx;
        }
        if let Some(group) = self.groups.get_mut(&req.group_id) {
            let mut ctx = Ctx::new(&self.cfg, now_ms, &mut fx);
            group.sync(&mut ctx, req, token);
        }
        fx
    }

    /// Heartbeat. While loading, Kafka answers NONE blindly.
    pub fn heartbeat(&mut self, now_ms: i64, req: &HeartbeatRequest) -> Result<(), GroupError> {
        if self.loading {
            return Ok(());
        }
        if req.group_id.is_empty() {
            return Err(GroupError::InvalidGroupId);
        }
        match self.groups.get_mut(&req.group_id) {
            None => Err(GroupError::UnknownMemberId),
            Some(g) => g.heartbeat(now_ms, req),
        }
    }

    /// LeaveGroup (batched). Leaving may complete a rebalance, hence the
    /// effects.
    pub fn leave_group(
        &mut self,
        now_ms: i64,
        req: &LeaveGroupRequest,
    ) -> (LeaveGroupResponse, Effects) {
        let mut fx = Effects::default();
        let top = if self.loading {
            Some(GroupError::CoordinatorLoadInProgress)
        } else if req.group_id.is_empty() {
            Some(GroupError::InvalidGroupId)
        } else {
            match self.groups.get(&req.group_id) {
                Some(g) if g.is(GroupState::Dead) => Some(GroupError::CoordinatorNotAvailable),
                _ => None,
            }
        };
        if top.is_some() {
            return (
                LeaveGroupResponse {
                    error: top,
                    members: Vec::new(),
                },
                fx,
            );
        }
        let mut members = Vec::with_capacity(req.members.len());
        match self.groups.get_mut(&req.group_id) {
            // Kafka answers an unknown group with UNKNOWN_MEMBER_ID per member.
            None => {
                for who in &req.members {
                    members.push((who.clone(), Some(GroupError::UnknownMemberId)));
                }
            }
            Some(group) => {
                let mut ctx = Ctx::new(&self.cfg, now_ms, &mut fx);
                for who in &req.members {
                    let outcome = group.leave_one(&mut ctx, who).err();
                    members.push((who.clone(), outcome));
                }
            }
        }
        (
            LeaveGroupResponse {
                error: None,
                members,
            },
            fx,
        )
    }

    /// The earliest time at which `tick` has work to do.
    pub fn next_deadline(&self) -> Option<i64> {
        if self.loading {
            return None;
        }
        self.groups
            .values()
            .filter_map(ClassicGroup::next_deadline)
            .min()
    }

    /// Fires every timer due at or before `now_ms`, in deadline order per
    /// group (each at its own deadline).
    pub fn tick(&mut self, now_ms: i64) -> Effects {
        let mut fx = Effects::default();
        if self.loading {
            return fx;
        }
        for group in self.groups.values_mut() {
            // Bounded: each firing removes or pushes back a timer.
            let mut budget = 10_000 + 4 * group.members.len();
            while budget > 0 && group.fire_one_timer(&self.cfg, now_ms, &mut fx) {
                budget -= 1;
            }
        }
        fx
    }
}
