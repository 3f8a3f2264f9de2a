//! Queries and administration over all groups: DescribeGroups, ListGroups
//! (state filter), DeleteGroups; loading from persisted group metadata
//! (replay at start, then arming the session timers) and unloading; and
//! the group checks an OffsetCommit needs (Kafka's validateOffsetCommit),
//! including the Empty "simple" group of consumers that only assign().

use super::error::GroupError;
use super::rebalance::Ctx;
use super::state::{ClassicGroup, GroupState};
use super::types::{
    DescribedGroup, DescribedMember, Effects, GroupRecord, JoinGroupResponse, ListedGroup,
    SyncGroupResponse,
};
use super::GroupCoordinator;

impl GroupCoordinator {
    /// DescribeGroups. An unknown group is reported as Dead without error.
    pub fn describe_groups(&self, group_ids: &[String]) -> Vec<DescribedGroup> {
        group_ids
            .iter()
            .map(|id| {
                let dead = DescribedGroup {
                    group_id: id.clone(),
                    error: None,
                    state: GroupState::Dead,
                    protocol_type: String::new(),
                    protocol_data: String::new(),
                    members: Vec::new(),
                };
                if self.loading {
                    return DescribedGroup {
                        error: Some(GroupError::CoordinatorLoadInProgress),
                        ..dead
                    };
                }
                let Some(g) = self.groups.get(id) else {
                    return dead;
                };
                let stable = g.is(GroupState::Stable);
                let protocol = g.protocol_name.as_deref();
                DescribedGroup {
                    group_id: id.clone(),
                    error: None,
                    state: g.state,
                    protocol_type: g.protocol_type.clone().unwrap_or_default(),
                    protocol_data: if stable {
                        g.protocol_name.clone().unwrap_or_default()
                    } else {
                        String::new()
                    },
                    members: g
                        .members
                        .values()
                        .map(|m| DescribedMember {
                            member_id: m.member_id.clone(),
                            group_instance_id: m.group_instance_id.clone(),
                            client_id: m.client_id.clone(),
                            client_host: m.client_host.clone(),
                            metadata: if stable {
                                m.metadata(protocol)
                            } else {
                                Vec::new()
                            },
                            assignment: if stable {
                                m.assignment.clone()
                            } else {
                                Vec::new()
                            },
                        })
                        .collect(),
                }
            })
            .collect()
    }

    /// ListGroups. `states_filter` holds state names (case-insensitive);
    /// empty means all.
    pub fn list_groups(&self, states_filter: &[String]) -> Result<Vec<ListedGroup>, GroupError> {
        if self.loading {
            return Err(GroupError::CoordinatorLoadInProgress);
        }
        Ok(self
            .groups
            .values()
            .filter(|g| {
                states_filter.is_empty()
                    || states_filter
                        .iter()
                        .any(|s| s.eq_ignore_ascii_case(g.state.name()))
            })
            .map(|g| ListedGroup {
                group_id: g.group_id.clone(),
                protocol_type: g.protocol_type.clone().unwrap_or_default(),
                state: g.state,
            })
            .collect())
    }

    /// DeleteGroups: only Empty groups go; each deletion yields a
    /// tombstone. (The offsets module deletes the group's offsets.)
    pub fn delete_groups(
        &mut self,
        now_ms: i64,
        group_ids: &[String],
    ) -> (Vec<(String, Option<GroupError>)>, Effects) {
        let mut fx = Effects::default();
        let mut results = Vec::with_capacity(group_ids.len());
        for id in group_ids {
            let outcome = if self.loading {
                Some(GroupError::CoordinatorLoadInProgress)
            } else if id.is_empty() {
                Some(GroupError::InvalidGroupId)
            } else {
                match self.groups.get_mut(id) {
                    None => Some(GroupError::GroupIdNotFound),
                    Some(g) if g.is(GroupState::Dead) => Some(GroupError::GroupIdNotFound),
                    Some(g) if !g.is(GroupState::Empty) => Some(GroupError::NonEmptyGroup),
                    Some(g) => {
                        g.transition(GroupState::Dead, now_ms);
                        self.groups.remove(id);
                        fx.records.push(GroupRecord::Tombstone {
                            group_id: id.clone(),
                        });
                        None
                    }
                }
            };
            results.push((id.clone(), outcome));
        }
        (results, fx)
    }

    /// Starts replaying the partition: requests are refused with
    /// COORDINATOR_LOAD_IN_PROGRESS until `complete_load`.
    pub fn begin_load(&mut self) {
        self.loading = true;
        self.groups.clear();
    }

    /// Applies one persisted record (the last one of a group wins; a
    /// tombstone removes the group).
    pub fn replay(&mut self, record: &GroupRecord) {
        match record {
            GroupRecord::Metadata(s) => {
                self.groups
                    .insert(s.group_id.clone(), ClassicGroup::from_snapshot(s));
            }
            GroupRecord::Tombstone { group_id } => {
                self.groups.remove(group_id);
            }
        }
    }

    /// Loading is done: arm every member's session timer and rebalance
    /// groups that exceed `group.max.size`.
    pub fn complete_load(&mut self, now_ms: i64) -> Effects {
        let mut fx = Effects::default();
        self.loading = false;
        for g in self.groups.values_mut() {
            let ids: Vec<String> = g.members.keys().cloned().collect();
            for id in &ids {
                g.reschedule_heartbeat(id, now_ms);
            }
            if g.members.len() > self.cfg.max_size {
                let mut ctx = Ctx::new(&self.cfg, now_ms, &mut fx);
                g.prepare_rebalance(&mut ctx, "loaded group is over group.max.size");
            }
        }
        fx
    }

    /// The partition moved away: every group goes Dead and parked requests
    /// get NOT_COORDINATOR. The coordinator is empty afterwards.
    pub fn unload(&mut self, now_ms: i64) -> Effects {
        let mut fx = Effects::default();
        for (_, mut g) in std::mem::take(&mut self.groups) {
            g.transition(GroupState::Dead, now_ms);
            for m in g.members.values_mut() {
                if let Some(p) = m.awaiting_join.take() {
                    fx.join(
                        p.token,
                        JoinGroupResponse::error(&m.member_id, GroupError::NotCoordinator),
                    );
                }
                if let Some(t) = m.awaiting_sync.take() {
                    fx.sync(t, SyncGroupResponse::error(GroupError::NotCoordinator));
                }
            }
        }
        fx
    }

    /// Creates an Empty group without protocol type if none exists, as an
    /// OffsetCommit with generation -1 does for consumers that only use
    /// assign() (and as replaying such commits must). Returns whether it
    /// was created.
    pub fn ensure_simple_group(&mut self, now_ms: i64, group_id: &str) -> bool {
        if self.groups.contains_key(group_id) {
            return false;
        }
        self.groups
            .insert(group_id.to_string(), ClassicGroup::new(group_id, now_ms));
        true
    }

    /// Kafka's validateOffsetCommit for a classic group. `generation_id`
    /// is -1 for simple consumers and admin clients; `member_id` is "" for
    /// them. A missing group is created (Empty) when the generation is
    /// negative, else GROUP_ID_NOT_FOUND (OffsetCommit v9+) or
    /// ILLEGAL_GENERATION (older).
    pub fn validate_offset_commit(
        &mut self,
        now_ms: i64,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        request_version: i16,
    ) -> Result<(), GroupError> {
        let missing = if request_version >= 9 {
            GroupError::GroupIdNotFound
        } else {
            GroupError::IllegalGeneration
        };
        self.validate_commit(
            now_ms,
            group_id,
            member_id,
            group_instance_id,
            generation_id,
            false,
            missing,
        )
    }

    /// Kafka's `validateTransactionalOffsetCommit` for a classic group
    /// (TxnOffsetCommit; v0-v2 carry no member, generation -1): as
    /// OffsetCommit, but a request without member is accepted whatever
    /// the group's state, a rebalance does not refuse it, and a missing
    /// group with a generation is ILLEGAL_GENERATION.
    pub fn validate_txn_offset_commit(
        &mut self,
        now_ms: i64,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
    ) -> Result<(), GroupError> {
        self.validate_commit(
            now_ms,
            group_id,
            member_id,
            group_instance_id,
            generation_id,
            true,
            GroupError::IllegalGeneration,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn validate_commit(
        &mut self,
        now_ms: i64,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        transactional: bool,
        missing: GroupError,
    ) -> Result<(), GroupError> {
        if self.loading {
            return Err(GroupError::CoordinatorLoadInProgress);
        }
        if group_id.is_empty() {
            return Err(GroupError::InvalidGroupId);
        }
        let Some(g) = self.groups.get(group_id) else {
            if generation_id < 0 {
                self.ensure_simple_group(now_ms, group_id);
                return Ok(());
            }
            return Err(missing);
        };
        if g.is(GroupState::Dead) {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        if generation_id < 0 && g.is(GroupState::Empty) {
            return Ok(());
        }
        if generation_id >= 0 || !member_id.is_empty() || group_instance_id.is_some() {
            g.validate_member(member_id, group_instance_id)?;
            if generation_id != g.generation {
                return Err(GroupError::IllegalGeneration);
            }
        } else if !transactional && !g.is(GroupState::Empty) {
            return Err(GroupError::UnknownMemberId);
        }
        if !transactional && g.is(GroupState::CompletingRebalance) {
            return Err(GroupError::RebalanceInProgress);
        }
        Ok(())
    }
}
