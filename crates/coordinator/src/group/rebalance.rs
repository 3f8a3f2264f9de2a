//! The rebalance engine of one group: starting a rebalance, completing the
//! join phase (new generation, protocol vote, JoinGroup responses),
//! propagating the leader's assignment, removing members, and the timers
//! (session expiry, pending-member expiry, initial delay / rebalance
//! timeout, pending-sync timeout).

use super::error::GroupError;
use super::state::{ClassicGroup, GroupState, JoinTimer, SyncTimer};
use super::types::{Effects, GroupConfig, GroupRecord, JoinGroupResponse, SyncGroupResponse};

/// What a group operation needs besides the group: config, the clock and
/// where to put effects.
pub(crate) struct Ctx<'a> {
    pub cfg: &'a GroupConfig,
    /// The operation's time: the caller's clock, or a fired timer's
    /// deadline.
    pub now: i64,
    /// The caller's clock when the operation runs (`now` of the public
    /// call, the tick's time for a fired timer). Join and sync timers
    /// remember it: they never fire at the instant they were armed.
    pub clock: i64,
    pub fx: &'a mut Effects,
}

impl<'a> Ctx<'a> {
    pub fn new(cfg: &'a GroupConfig, now: i64, fx: &'a mut Effects) -> Self {
        Ctx {
            cfg,
            now,
            clock: now,
            fx,
        }
    }
}

impl ClassicGroup {
    pub fn reschedule_heartbeat(&mut self, member_id: &str, now: i64) {
        if let Some(m) = self.members.get_mut(member_id) {
            m.heartbeat_deadline = Some(now + i64::from(m.session_timeout_ms));
        }
    }

    /// Answers every parked SyncGroup with `error` and clears the
    /// assignments (a rebalance starts over).
    pub fn reset_and_propagate_assignment_error(&mut self, ctx: &mut Ctx<'_>, error: GroupError) {
        for m in self.members.values_mut() {
            m.assignment.clear();
        }
        self.propagate_sync(ctx, Some(error));
    }

    /// Answers every parked SyncGroup with its assignment (or `error`) and
    /// re-arms the session timers of those members.
    pub fn propagate_sync(&mut self, ctx: &mut Ctx<'_>, error: Option<GroupError>) {
        let protocol_type = self.protocol_type.clone();
        let protocol_name = self.protocol_name.clone();
        for m in self.members.values_mut() {
            if let Some(token) = m.awaiting_sync.take() {
                let response = match error {
                    Some(e) => SyncGroupResponse::error(e),
                    None => SyncGroupResponse {
                        error: None,
                        protocol_type: protocol_type.clone(),
                        protocol_name: protocol_name.clone(),
                        assignment: m.assignment.clone(),
                    },
                };
                ctx.fx.sync(token, response);
                m.heartbeat_deadline = Some(ctx.now + i64::from(m.session_timeout_ms));
            }
        }
    }

    /// Moves to PreparingRebalance and arms the join timer: the initial
    /// delay for an Empty group, else the largest rebalance timeout.
    pub fn prepare_rebalance(&mut self, ctx: &mut Ctx<'_>, reason: &str) {
        if self.is(GroupState::CompletingRebalance) {
            self.reset_and_propagate_assignment_error(ctx, GroupError::RebalanceInProgress);
        }
        self.sync_timer = None;
        self.pending_sync.clear();
        let initial = self.is(GroupState::Empty);
        let delay = i64::from(ctx.cfg.initial_rebalance_delay_ms);
        self.join_timer = Some(if initial {
            JoinTimer {
                deadline: ctx.now + delay,
                initial: Some((delay, (self.rebalance_timeout_ms() - delay).max(0))),
                armed_at: ctx.clock,
            }
        } else {
            JoinTimer {
                deadline: ctx.now + self.rebalance_timeout_ms(),
                initial: None,
                armed_at: ctx.clock,
            }
        });
        tracing::info!(group = %self.group_id, generation = self.generation, reason, "preparing to rebalance");
        self.transition(GroupState::PreparingRebalance, ctx.now);
        if !initial {
            self.maybe_complete_join_phase(ctx);
        }
    }

    pub fn maybe_prepare_rebalance_or_complete_join(&mut self, ctx: &mut Ctx<'_>, reason: &str) {
        if self.can_rebalance() {
            self.prepare_rebalance(ctx, reason);
        } else {
            self.maybe_complete_join_phase(ctx);
        }
    }

    /// Completes the join phase early once everybody rejoined, except
    /// during the initial delay of a formerly empty group.
    pub fn maybe_complete_join_phase(&mut self, ctx: &mut Ctx<'_>) {
        if self.is(GroupState::PreparingRebalance)
            && self.all_members_joined()
            && self.previous_state != GroupState::Empty
        {
            self.complete_join(ctx);
        }
    }

    /// Ends the join phase: drops members that did not rejoin, starts the
    /// next generation and answers every parked JoinGroup (the member list
    /// to the leader only).
    pub fn complete_join(&mut self, ctx: &mut Ctx<'_>) {
        self.join_timer = None;
        let not_rejoined: Vec<String> = self
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none())
            .map(|m| m.member_id.clone())
            .collect();
        for id in not_rejoined {
            tracing::info!(group = %self.group_id, member = %id, "member did not rejoin in time; removing");
            if let Some(m) = self.remove(&id) {
                if let Some(token) = m.awaiting_sync {
                    ctx.fx
                        .sync(token, SyncGroupResponse::error(GroupError::UnknownMemberId));
                }
            }
        }
        if self.is(GroupState::Dead) {
            return;
        }
        if !self.maybe_elect_new_joined_leader() && !self.members.is_empty() {
            // Nobody rejoined yet: wait another rebalance timeout.
            self.join_timer = Some(JoinTimer {
                deadline: ctx.now + self.rebalance_timeout_ms(),
                initial: None,
                armed_at: ctx.clock,
            });
            return;
        }
        self.generation += 1;
        self.pending_sync.clear();
        if self.members.is_empty() {
            self.protocol_name = None;
            self.transition(GroupState::Empty, ctx.now);
            tracing::info!(group = %self.group_id, generation = self.generation, "group is empty");
            ctx.fx.records.push(GroupRecord::Metadata(self.snapshot()));
            return;
        }
        self.protocol_name = self.select_protocol();
        self.transition(GroupState::CompletingRebalance, ctx.now);
        tracing::info!(group = %self.group_id, generation = self.generation, members = self.members.len(), "join phase complete");
        let leader_members = self.join_response_members();
        let leader = self.leader.clone().unwrap_or_default();
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let is_leader = self.is_leader(&id);
            let response = JoinGroupResponse {
                error: None,
                generation_id: self.generation,
                protocol_type: self.protocol_type.clone(),
                protocol_name: self.protocol_name.clone(),
                leader: leader.clone(),
                skip_assignment: false,
                member_id: id.clone(),
                members: if is_leader {
                    leader_members.clone()
                } else {
                    Vec::new()
                },
            };
            if let Some(m) = self.members.get_mut(&id) {
                if let Some(parked) = m.awaiting_join.take() {
                    ctx.fx.join(parked.token, response);
                }
                m.is_new = false;
            }
            self.reschedule_heartbeat(&id, ctx.now);
            self.pending_sync.insert(id);
        }
        self.sync_timer = Some(SyncTimer {
            deadline: ctx.now
                + self
                    .rebalance_timeout_ms()
                    .max(i64::from(ctx.cfg.min_sync_delay_ms)),
            generation: self.generation,
            armed_at: ctx.clock,
        });
    }

    /// Removes a member that left or expired and lets the group react: a
    /// rebalance from Stable/CompletingRebalance, maybe the end of the join
    /// phase from PreparingRebalance.
    pub fn remove_member_and_update(&mut self, ctx: &mut Ctx<'_>, member_id: &str, reason: &str) {
        let Some(member) = self.remove(member_id) else {
            return;
        };
        if let Some(parked) = member.awaiting_join {
            ctx.fx.join(
                parked.token,
                JoinGroupResponse::error(member_id, GroupError::UnknownMemberId),
            );
        }
        if let Some(token) = member.awaiting_sync {
            ctx.fx
                .sync(token, SyncGroupResponse::error(GroupError::UnknownMemberId));
        }
        tracing::info!(group = %self.group_id, member = %member_id, reason, "member removed");
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(ctx, reason);
            }
            GroupState::PreparingRebalance => self.maybe_complete_join_phase(ctx),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    /// Removes a member that was given an id but never joined with it.
    pub fn remove_pending_member_and_update(&mut self, ctx: &mut Ctx<'_>, member_id: &str) {
        if self.pending_members.remove(member_id).is_some() {
            self.maybe_complete_join_phase(ctx);
        }
    }

    /// Fires the earliest timer due at or before `until`, as of its own
    /// deadline. Returns false when none is due.
    ///
    /// As in Kafka, where an expired timer is a separate event queued
    /// behind the operation that armed it, a join or sync timer never fires
    /// at the instant it was armed, however short its delay: not in the
    /// call (or tick) that armed it, and not before the clock moved on. A
    /// JoinGroup answered with a zero rebalance timeout is thus always
    /// released before its sync deadline can pass, and a SyncGroup arriving
    /// at the same instant is served first.
    pub fn fire_one_timer(&mut self, cfg: &GroupConfig, until: i64, fx: &mut Effects) -> bool {
        let Some(deadline) = self.next_due_deadline(until) else {
            return false;
        };
        let mut ctx = Ctx {
            cfg,
            now: deadline,
            clock: until,
            fx,
        };
        // Join and sync timers first: their outcome may answer parked
        // requests that also keep members alive.
        if let Some(t) = self
            .join_timer
            .filter(|t| t.deadline == deadline && t.armed_at < until)
        {
            self.on_join_timer(&mut ctx, t);
            return true;
        }
        if let Some(t) = self
            .sync_timer
            .filter(|t| t.deadline == deadline && t.armed_at < until)
        {
            self.on_sync_timer(&mut ctx, t.generation);
            return true;
        }
        if let Some(id) = self
            .pending_members
            .iter()
            .find(|(_, d)| **d == deadline)
            .map(|(id, _)| id.clone())
        {
            tracing::info!(group = %self.group_id, member = %id, "pending member expired");
            self.remove_pending_member_and_update(&mut ctx, &id);
            return true;
        }
        if let Some(id) = self
            .members
            .values()
            .find(|m| m.heartbeat_deadline == Some(deadline))
            .map(|m| m.member_id.clone())
        {
            self.on_heartbeat_expired(&mut ctx, &id);
            return true;
        }
        false
    }

    fn on_join_timer(&mut self, ctx: &mut Ctx<'_>, timer: JoinTimer) {
        match timer.initial {
            Some((delay, remaining)) if self.new_member_added && remaining != 0 => {
                // New members keep arriving: wait a little longer, bounded
                // by the rebalance timeout.
                self.new_member_added = false;
                let next_delay = i64::from(ctx.cfg.initial_rebalance_delay_ms).min(remaining);
                let next_remaining = (remaining - delay).max(0);
                self.join_timer = Some(JoinTimer {
                    deadline: ctx.now + next_delay,
                    initial: Some((next_delay, next_remaining)),
                    armed_at: ctx.clock,
                });
            }
            _ => self.complete_join(ctx),
        }
    }

    fn on_sync_timer(&mut self, ctx: &mut Ctx<'_>, generation: i32) {
        self.sync_timer = None;
        if generation != self.generation
            || !matches!(
                self.state,
                GroupState::CompletingRebalance | GroupState::Stable
            )
            || self.pending_sync.is_empty()
        {
            return;
        }
        let late: Vec<String> = self.pending_sync.iter().cloned().collect();
        for id in &late {
            tracing::info!(group = %self.group_id, member = %id, "member did not sync in time; removing");
            self.remove(id);
        }
        self.prepare_rebalance(ctx, "members failed to sync within the rebalance timeout");
    }

    fn on_heartbeat_expired(&mut self, ctx: &mut Ctx<'_>, member_id: &str) {
        let Some(m) = self.members.get_mut(member_id) else {
            return;
        };
        if m.kept_alive_by_parked_request() {
            // A parked JoinGroup/SyncGroup counts as liveness; check again
            // one session later (answering it re-arms the timer anyway).
            m.heartbeat_deadline = Some(ctx.now + i64::from(m.session_timeout_ms));
            return;
        }
        m.heartbeat_deadline = None;
        self.remove_member_and_update(ctx, member_id, "session timeout expired");
    }
}
