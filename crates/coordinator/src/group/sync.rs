//! SyncGroup, Heartbeat and LeaveGroup for one group: generation and
//! member checks, parking followers until the leader's assignment arrives,
//! persisting and handing out that assignment, session keep-alive, and
//! (batched) departures.

use std::collections::BTreeMap;

use super::error::GroupError;
use super::rebalance::Ctx;
use super::state::{ClassicGroup, GroupState};
use super::types::{
    GroupRecord, HeartbeatRequest, LeavingMember, RequestToken, SyncGroupRequest, SyncGroupResponse,
};

fn inconsistent(requested: Option<&str>, current: Option<&str>) -> bool {
    matches!((requested, current), (Some(a), Some(b)) if a != b)
}

impl ClassicGroup {
    /// Handles a SyncGroup for an existing, non-Empty group.
    pub fn sync(&mut self, ctx: &mut Ctx<'_>, req: &SyncGroupRequest, token: RequestToken) {
        let member_id = req.member_id.as_str();
        let check = if self.is(GroupState::Dead) {
            Err(GroupError::CoordinatorNotAvailable)
        } else {
            self.validate_member(member_id, req.group_instance_id.as_deref())
                .and_then(|()| {
                    if req.generation_id != self.generation {
                        Err(GroupError::IllegalGeneration)
                    } else if inconsistent(
                        req.protocol_type.as_deref(),
                        self.protocol_type.as_deref(),
                    ) || inconsistent(
                        req.protocol_name.as_deref(),
                        self.protocol_name.as_deref(),
                    ) {
                        Err(GroupError::InconsistentGroupProtocol)
                    } else {
                        Ok(())
                    }
                })
        };
        if let Err(e) = check {
            ctx.fx.sync(token, SyncGroupResponse::error(e));
            return;
        }
        match self.state {
            GroupState::PreparingRebalance => {
                ctx.fx.sync(
                    token,
                    SyncGroupResponse::error(GroupError::RebalanceInProgress),
                );
            }
            GroupState::CompletingRebalance => {
                if let Some(m) = self.members.get_mut(member_id) {
                    if let Some(old) = m.awaiting_sync.replace(token) {
                        ctx.fx.sync(
                            old,
                            SyncGroupResponse::error(GroupError::RebalanceInProgress),
                        );
                    }
                }
                self.remove_pending_sync(member_id);
                if self.is_leader(member_id) {
                    self.apply_leader_assignment(ctx, &req.assignments);
                }
            }
            GroupState::Stable => {
                self.remove_pending_sync(member_id);
                let assignment = self
                    .members
                    .get(member_id)
                    .map(|m| m.assignment.clone())
                    .unwrap_or_default();
                ctx.fx.sync(
                    token,
                    SyncGroupResponse {
                        error: None,
                        protocol_type: self.protocol_type.clone(),
                        protocol_name: self.protocol_name.clone(),
                        assignment,
                    },
                );
            }
            GroupState::Empty | GroupState::Dead => {
                ctx.fx
                    .sync(token, SyncGroupResponse::error(GroupError::UnknownMemberId));
            }
        }
    }

    fn remove_pending_sync(&mut self, member_id: &str) {
        self.pending_sync.remove(member_id);
        if self.pending_sync.is_empty() {
            self.sync_timer = None;
        }
    }

    /// The leader's assignment: members it left out get an empty one. The
    /// group is persisted, every parked SyncGroup answered, and the group
    /// becomes Stable.
    fn apply_leader_assignment(&mut self, ctx: &mut Ctx<'_>, assignments: &[(String, Vec<u8>)]) {
        let given: BTreeMap<&str, &Vec<u8>> =
            assignments.iter().map(|(id, a)| (id.as_str(), a)).collect();
        for (id, m) in self.members.iter_mut() {
            m.assignment = given
                .get(id.as_str())
                .map(|a| (*a).clone())
                .unwrap_or_default();
        }
        let missing = self
            .members
            .keys()
            .filter(|id| !given.contains_key(id.as_str()))
            .count();
        if missing > 0 {
            tracing::warn!(group = %self.group_id, generation = self.generation, missing, "leader left members without assignment; giving them an empty one");
        }
        self.transition(GroupState::Stable, ctx.now);
        ctx.fx.records.push(GroupRecord::Metadata(self.snapshot()));
        self.propagate_sync(ctx, None);
    }

    /// Handles a Heartbeat for an existing group.
    pub fn heartbeat(&mut self, now: i64, req: &HeartbeatRequest) -> Result<(), GroupError> {
        if self.is(GroupState::Dead) {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        self.validate_member(&req.member_id, req.group_instance_id.as_deref())?;
        if req.generation_id != self.generation {
            return Err(GroupError::IllegalGeneration);
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => Err(GroupError::UnknownMemberId),
            GroupState::PreparingRebalance => {
                self.reschedule_heartbeat(&req.member_id, now);
                Err(GroupError::RebalanceInProgress)
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.reschedule_heartbeat(&req.member_id, now);
                Ok(())
            }
        }
    }

    /// Handles one member of a LeaveGroup.
    pub fn leave_one(&mut self, ctx: &mut Ctx<'_>, who: &LeavingMember) -> Result<(), GroupError> {
        let target = match &who.group_instance_id {
            Some(instance) => match self.static_member_id(instance) {
                None => return Err(GroupError::UnknownMemberId),
                Some(existing) if !who.member_id.is_empty() && existing != who.member_id => {
                    return Err(GroupError::FencedInstanceId)
                }
                Some(existing) => existing.to_string(),
            },
            None => {
                if self.pending_members.contains_key(&who.member_id) {
                    self.remove_pending_member_and_update(ctx, &who.member_id);
                    return Ok(());
                }
                if !self.members.contains_key(&who.member_id) {
                    return Err(GroupError::UnknownMemberId);
                }
                who.member_id.clone()
            }
        };
        self.remove_member_and_update(ctx, &target, "member left the group");
        Ok(())
    }
}
