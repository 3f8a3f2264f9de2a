//! JoinGroup for one group: new dynamic members (KIP-394 member ids), new
//! and restarted static members (KIP-345 replacement without rebalance),
//! rejoining members by state, and the `group.max.size` check.

use super::error::GroupError;
use super::member::{Member, ParkedJoin};
use super::rebalance::Ctx;
use super::state::{ClassicGroup, GroupState};
use super::types::{
    GroupRecord, JoinGroupRequest, JoinGroupResponse, RequestToken, SyncGroupResponse,
};

impl ClassicGroup {
    /// Kafka's acceptJoiningMember.
    fn accepts_joining_member(&self, member_id: &str, max_size: usize) -> bool {
        match self.state {
            GroupState::Empty | GroupState::Dead => true,
            GroupState::PreparingRebalance => {
                self.members
                    .get(member_id)
                    .is_some_and(|m| m.awaiting_join.is_some())
                    || self.num_awaiting_join() < max_size
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.members.contains_key(member_id) || self.members.len() < max_size
            }
        }
    }

    /// Handles a JoinGroup. `new_member_id` is used when the coordinator
    /// has to assign one.
    pub fn join(
        &mut self,
        ctx: &mut Ctx<'_>,
        req: &JoinGroupRequest,
        token: RequestToken,
        new_member_id: String,
    ) {
        if !self.accepts_joining_member(&req.member_id, ctx.cfg.max_size) {
            // Over capacity: an existing member that is not parked is
            // dropped too (Kafka kicks the last rejoining members).
            if let Some(m) = self.remove(&req.member_id) {
                if let Some(parked) = m.awaiting_join {
                    ctx.fx.join(
                        parked.token,
                        JoinGroupResponse::error(&req.member_id, GroupError::UnknownMemberId),
                    );
                }
            }
            ctx.fx.join(
                token,
                JoinGroupResponse::error("", GroupError::GroupMaxSizeReached),
            );
            return;
        }
        let unknown = req.member_id.is_empty();
        let member_for_error = if unknown { "" } else { req.member_id.as_str() };
        if self.is(GroupState::Dead) {
            ctx.fx.join(
                token,
                JoinGroupResponse::error(member_for_error, GroupError::CoordinatorNotAvailable),
            );
            return;
        }
        if !self.supports_protocols(&req.protocol_type, &req.protocols) {
            ctx.fx.join(
                token,
                JoinGroupResponse::error(member_for_error, GroupError::InconsistentGroupProtocol),
            );
            return;
        }
        if unknown {
            self.join_new_member(ctx, req, token, new_member_id);
        } else {
            self.join_existing_member(ctx, req, token);
        }
    }

    fn join_new_member(
        &mut self,
        ctx: &mut Ctx<'_>,
        req: &JoinGroupRequest,
        token: RequestToken,
        new_id: String,
    ) {
        if let Some(instance) = &req.group_instance_id {
            match self.static_member_id(instance).map(str::to_string) {
                Some(old_id) => self.replace_static_member(ctx, req, token, &old_id, new_id),
                None => self.add_member_and_rebalance(ctx, req, token, new_id),
            }
        } else if req.require_known_member_id {
            // KIP-394: hand out the id; the member must rejoin with it
            // within its session timeout.
            self.pending_members
                .insert(new_id.clone(), ctx.now + i64::from(req.session_timeout_ms));
            ctx.fx.join(
                token,
                JoinGroupResponse::error(&new_id, GroupError::MemberIdRequired),
            );
        } else {
            self.add_member_and_rebalance(ctx, req, token, new_id);
        }
    }

    fn join_existing_member(
        &mut self,
        ctx: &mut Ctx<'_>,
        req: &JoinGroupRequest,
        token: RequestToken,
    ) {
        let member_id = req.member_id.as_str();
        if self.pending_members.contains_key(member_id) {
            if req.group_instance_id.is_some() {
                // Kafka: a pending member is never static.
                ctx.fx.join(
                    token,
                    JoinGroupResponse::error(member_id, GroupError::UnknownServerError),
                );
                return;
            }
            self.add_member_and_rebalance(ctx, req, token, member_id.to_string());
            return;
        }
        if let Err(e) = self.validate_member(member_id, req.group_instance_id.as_deref()) {
            ctx.fx.join(token, JoinGroupResponse::error(member_id, e));
            return;
        }
        let (is_leader, matches) = match self.members.get(member_id) {
            Some(m) => (self.is_leader(member_id), m.matches(&req.protocols)),
            None => (false, false),
        };
        match self.state {
            GroupState::PreparingRebalance => self.update_member_and_rebalance(ctx, req, token),
            GroupState::CompletingRebalance if matches => {
                // Probably lost the JoinGroup response: send it again.
                let response = self.current_generation_response(member_id, is_leader, false);
                ctx.fx.join(token, response);
            }
            GroupState::CompletingRebalance => self.update_member_and_rebalance(ctx, req, token),
            GroupState::Stable if is_leader || !matches => {
                // The leader rejoining forces a rebalance (e.g. topic
                // metadata changed); so do changed protocols.
                self.update_member_and_rebalance(ctx, req, token);
            }
            GroupState::Stable => {
                let response = self.current_generation_response(member_id, false, false);
                ctx.fx.join(token, response);
            }
            GroupState::Empty | GroupState::Dead => {
                ctx.fx.join(
                    token,
                    JoinGroupResponse::error(member_id, GroupError::UnknownMemberId),
                );
            }
        }
    }

    /// The JoinGroup response of the current generation.
    fn current_generation_response(
        &self,
        member_id: &str,
        with_members: bool,
        skip_assignment: bool,
    ) -> JoinGroupResponse {
        JoinGroupResponse {
            error: None,
            generation_id: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            skip_assignment,
            member_id: member_id.to_string(),
            members: if with_members {
                self.join_response_members()
            } else {
                Vec::new()
            },
        }
    }

    /// Kafka's validateMember: a static member must present the member id
    /// currently bound to its instance id.
    pub fn validate_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), GroupError> {
        match instance_id {
            Some(instance) => match self.static_member_id(instance) {
                None => Err(GroupError::UnknownMemberId),
                Some(existing) if existing != member_id => Err(GroupError::FencedInstanceId),
                Some(_) => Ok(()),
            },
            None if self.members.contains_key(member_id) => Ok(()),
            None => Err(GroupError::UnknownMemberId),
        }
    }

    fn park_join(&mut self, ctx: &mut Ctx<'_>, member_id: &str, parked: ParkedJoin) {
        if let Some(m) = self.members.get_mut(member_id) {
            if let Some(old) = m.awaiting_join.replace(parked) {
                // A second JoinGroup supersedes the first (its connection
                // is most likely gone); answer the old one so it is not
                // leaked.
                ctx.fx.join(
                    old.token,
                    JoinGroupResponse::error(member_id, GroupError::RebalanceInProgress),
                );
            }
        }
    }

    fn add_member_and_rebalance(
        &mut self,
        ctx: &mut Ctx<'_>,
        req: &JoinGroupRequest,
        token: RequestToken,
        member_id: String,
    ) {
        let member = Member {
            member_id: member_id.clone(),
            group_instance_id: req.group_instance_id.clone(),
            client_id: req.client_id.clone(),
            client_host: req.client_host.clone(),
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            session_timeout_ms: req.session_timeout_ms,
            protocol_type: req.protocol_type.clone(),
            protocols: req.protocols.clone(),
            assignment: Vec::new(),
            awaiting_join: Some(ParkedJoin {
                token,
                supports_skip_assignment: req.supports_skip_assignment,
            }),
            awaiting_sync: None,
            is_new: true,
            // New members cannot heartbeat while parked; bound their wait.
            heartbeat_deadline: Some(ctx.now + i64::from(ctx.cfg.new_member_join_timeout_ms)),
        };
        if self.is(GroupState::PreparingRebalance) && self.generation == 0 {
            self.new_member_added = true;
        }
        self.add(member);
        self.maybe_prepare_rebalance_or_complete_join(ctx, "adding new member");
    }

    fn update_member_and_rebalance(
        &mut self,
        ctx: &mut Ctx<'_>,
        req: &JoinGroupRequest,
        token: RequestToken,
    ) {
        let member_id = req.member_id.as_str();
        if let Some(m) = self.members.get_mut(member_id) {
            m.protocols = req.protocols.clone();
            m.rebalance_timeout_ms = req.rebalance_timeout_ms;
            m.session_timeout_ms = req.session_timeout_ms;
        }
        self.park_join(
            ctx,
            member_id,
            ParkedJoin {
                token,
                supports_skip_assignment: req.supports_skip_assignment,
            },
        );
        self.maybe_prepare_rebalance_or_complete_join(ctx, "updating metadata of a member");
    }

    /// KIP-345: a static member rejoined without member id (it restarted).
    /// The old member id is fenced and the member gets a new id; in a
    /// Stable group whose selected protocol does not change, the others do
    /// not rebalance and the member keeps its assignment.
    fn replace_static_member(
        &mut self,
        ctx: &mut Ctx<'_>,
        req: &JoinGroupRequest,
        token: RequestToken,
        old_id: &str,
        new_id: String,
    ) {
        let old_leader = self.leader.clone().unwrap_or_default();
        let Some(mut member) = self.members.remove(old_id) else {
            ctx.fx.join(
                token,
                JoinGroupResponse::error("", GroupError::UnknownServerError),
            );
            return;
        };
        if let Some(parked) = member.awaiting_join.take() {
            ctx.fx.join(
                parked.token,
                JoinGroupResponse::error(old_id, GroupError::FencedInstanceId),
            );
        }
        if let Some(t) = member.awaiting_sync.take() {
            ctx.fx
                .sync(t, SyncGroupResponse::error(GroupError::FencedInstanceId));
        }
        member.protocols = req.protocols.clone();
        member.member_id = new_id.clone();
        member.rebalance_timeout_ms = req.rebalance_timeout_ms;
        member.session_timeout_ms = req.session_timeout_ms;
        member.client_id = req.client_id.clone();
        member.client_host = req.client_host.clone();
        member.is_new = false;
        member.awaiting_join = Some(ParkedJoin {
            token,
            supports_skip_assignment: req.supports_skip_assignment,
        });
        self.members.insert(new_id.clone(), member);
        if self.is_leader(old_id) {
            self.leader = Some(new_id.clone());
        }
        if self.pending_sync.remove(old_id) {
            self.pending_sync.insert(new_id.clone());
        }
        if let Some(instance) = &req.group_instance_id {
            self.static_members.insert(instance.clone(), new_id.clone());
        }
        self.reschedule_heartbeat(&new_id, ctx.now);

        match self.state {
            GroupState::Stable => {
                let next = self.select_protocol();
                if next.is_some() && next == self.protocol_name {
                    // Persist the new member id with the old assignment and
                    // answer at once; the group stays Stable.
                    ctx.fx.records.push(GroupRecord::Metadata(self.snapshot()));
                    let is_leader = self.is_leader(&new_id);
                    let skip = req.supports_skip_assignment && is_leader;
                    let mut response = self.current_generation_response(&new_id, skip, skip);
                    if !req.supports_skip_assignment {
                        // Report the old leader id so that a restarted
                        // leader does not compute an assignment a Stable
                        // group would never hand out.
                        response.leader = old_leader;
                    }
                    if let Some(m) = self.members.get_mut(&new_id) {
                        m.awaiting_join = None;
                    }
                    ctx.fx.join(token, response);
                } else {
                    self.maybe_prepare_rebalance_or_complete_join(
                        ctx,
                        "static member rejoined with protocols that change the selected protocol",
                    );
                }
            }
            GroupState::CompletingRebalance => {
                // The leader may already be assigning to the old member id.
                self.prepare_rebalance(ctx, "static member replaced during CompletingRebalance");
            }
            GroupState::PreparingRebalance => self.maybe_complete_join_phase(ctx),
            GroupState::Empty | GroupState::Dead => {}
        }
    }
}
