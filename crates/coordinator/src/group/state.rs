//! `GroupState` (Kafka's five classic states and their legal transitions)
//! and `ClassicGroup`: one group's data and the primitive operations on it
//! (add/remove/replace members, protocol vote, leader, snapshots). The
//! protocol logic built on these lives in `rebalance`, `join` and `sync`.

use std::collections::{BTreeMap, BTreeSet};

use super::member::Member;
use super::types::{GroupMetadataSnapshot, JoinResponseMember, MemberSnapshot, Protocol};

/// Kafka's classic group states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupState {
    /// No members; may still hold committed offsets.
    Empty,
    /// Waiting for members to (re)join.
    PreparingRebalance,
    /// Join phase done; waiting for the leader's assignment.
    CompletingRebalance,
    /// Assignment handed out; members heartbeat.
    Stable,
    /// Removed or unloaded.
    Dead,
}

impl GroupState {
    /// Kafka's display name (DescribeGroups, ListGroups).
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }

    /// Parses a ListGroups state filter entry, case-insensitively.
    pub fn parse(name: &str) -> Option<GroupState> {
        [
            GroupState::Empty,
            GroupState::PreparingRebalance,
            GroupState::CompletingRebalance,
            GroupState::Stable,
            GroupState::Dead,
        ]
        .into_iter()
        .find(|s| s.name().eq_ignore_ascii_case(name))
    }

    /// Whether Kafka allows moving from `from` to `self`.
    pub fn valid_from(self, from: GroupState) -> bool {
        use GroupState::*;
        match self {
            PreparingRebalance => matches!(from, Stable | CompletingRebalance | Empty),
            CompletingRebalance => from == PreparingRebalance,
            Stable => from == CompletingRebalance,
            Empty => from == PreparingRebalance,
            Dead => true,
        }
    }
}

/// The join-phase timer: the initial delay of an empty group (extended
/// while new members keep arriving) or the rebalance timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JoinTimer {
    pub deadline: i64,
    /// `Some((delay_ms, remaining_ms))` for the initial delayed join.
    pub initial: Option<(i64, i64)>,
    /// The caller's clock when it was armed (see `fire_one_timer`).
    pub armed_at: i64,
}

/// The deadline for members that got a JoinGroup response to send
/// SyncGroup (`pending_sync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SyncTimer {
    pub deadline: i64,
    /// The generation it belongs to.
    pub generation: i32,
    /// The caller's clock when it was armed (see `fire_one_timer`).
    pub armed_at: i64,
}

#[derive(Debug)]
pub(crate) struct ClassicGroup {
    pub group_id: String,
    pub state: GroupState,
    pub previous_state: GroupState,
    pub state_timestamp: Option<i64>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub generation: i32,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// group.instance.id -> member id.
    pub static_members: BTreeMap<String, String>,
    /// Members given an id with MEMBER_ID_REQUIRED, not joined yet, with
    /// the deadline by which they must rejoin.
    pub pending_members: BTreeMap<String, i64>,
    /// Members that got a JoinGroup response but have not sent SyncGroup.
    pub pending_sync: BTreeSet<String>,
    /// A member joined during the initial delay: extend it.
    pub new_member_added: bool,
    pub join_timer: Option<JoinTimer>,
    /// Deadline for `pending_sync`.
    pub sync_timer: Option<SyncTimer>,
}

impl ClassicGroup {
    pub fn new(group_id: &str, now: i64) -> Self {
        ClassicGroup {
            group_id: group_id.to_string(),
            state: GroupState::Empty,
            previous_state: GroupState::Empty,
            state_timestamp: Some(now),
            protocol_type: None,
            protocol_name: None,
            generation: 0,
            leader: None,
            members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            pending_members: BTreeMap::new(),
            pending_sync: BTreeSet::new(),
            new_member_added: false,
            join_timer: None,
            sync_timer: None,
        }
    }

    pub fn is(&self, state: GroupState) -> bool {
        self.state == state
    }

    pub fn transition(&mut self, to: GroupState, now: i64) {
        if !to.valid_from(self.state) {
            tracing::error!(group = %self.group_id, from = ?self.state, ?to, "illegal group state transition");
            debug_assert!(false, "illegal transition {:?} -> {:?}", self.state, to);
        }
        self.previous_state = self.state;
        self.state = to;
        self.state_timestamp = Some(now);
    }

    /// Stable, CompletingRebalance and Empty may start a rebalance.
    pub fn can_rebalance(&self) -> bool {
        GroupState::PreparingRebalance.valid_from(self.state)
    }

    pub fn is_leader(&self, member_id: &str) -> bool {
        self.leader.as_deref() == Some(member_id)
    }

    pub fn static_member_id(&self, instance_id: &str) -> Option<&str> {
        self.static_members.get(instance_id).map(String::as_str)
    }

    pub fn num_awaiting_join(&self) -> usize {
        self.members
            .values()
            .filter(|m| m.awaiting_join.is_some())
            .count()
    }

    pub fn all_members_joined(&self) -> bool {
        self.num_awaiting_join() == self.members.len() && self.pending_members.is_empty()
    }

    /// The largest rebalance timeout of the members (0 when empty).
    pub fn rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|m| i64::from(m.rebalance_timeout_ms))
            .max()
            .unwrap_or(0)
    }

    /// Protocols every member supports.
    fn candidate_protocols(&self) -> BTreeSet<&str> {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            let mut seen = BTreeSet::new();
            for p in &m.protocols {
                if seen.insert(p.name.as_str()) {
                    *counts.entry(p.name.as_str()).or_default() += 1;
                }
            }
        }
        counts
            .into_iter()
            .filter(|(_, n)| *n == self.members.len())
            .map(|(name, _)| name)
            .collect()
    }

    /// Whether a member with this protocol type and these protocols may
    /// join: anything non-empty for an Empty group, else the same type and
    /// at least one protocol all members support.
    pub fn supports_protocols(&self, protocol_type: &str, protocols: &[Protocol]) -> bool {
        if self.is(GroupState::Empty) || self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return false;
        }
        let candidates = self.candidate_protocols();
        protocols
            .iter()
            .any(|p| candidates.contains(p.name.as_str()))
    }

    /// Kafka's vote: every member votes for its most preferred protocol
    /// that all members support; the most votes wins. Ties go to the
    /// protocol the leader (then the first member) prefers, so the result
    /// is deterministic.
    pub fn select_protocol(&self) -> Option<String> {
        let candidates = self.candidate_protocols();
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(v) = m.vote(&candidates) {
                *votes.entry(v).or_default() += 1;
            }
        }
        let best = votes.values().copied().max()?;
        let tie_breaker = self
            .leader
            .as_ref()
            .and_then(|l| self.members.get(l))
            .or_else(|| self.members.values().next());
        if let Some(m) = tie_breaker {
            if let Some(p) = m
                .protocols
                .iter()
                .find(|p| votes.get(p.name.as_str()) == Some(&best))
            {
                return Some(p.name.clone());
            }
        }
        votes
            .into_iter()
            .find(|(_, n)| *n == best)
            .map(|(name, _)| name.to_string())
    }

    /// Adds a member; the first member sets the protocol type and the
    /// leader.
    pub fn add(&mut self, member: Member) {
        if self.members.is_empty() {
            self.protocol_type = Some(member.protocol_type.clone());
        }
        if self.leader.is_none() {
            self.leader = Some(member.member_id.clone());
        }
        if let Some(instance) = &member.group_instance_id {
            self.static_members
                .insert(instance.clone(), member.member_id.clone());
        }
        self.pending_members.remove(&member.member_id);
        self.members.insert(member.member_id.clone(), member);
    }

    /// Removes a member (no responses, no rebalance); a new leader is
    /// picked if it led.
    pub fn remove(&mut self, member_id: &str) -> Option<Member> {
        let member = self.members.remove(member_id)?;
        if let Some(instance) = &member.group_instance_id {
            if self.static_member_id(instance) == Some(member_id) {
                self.static_members.remove(instance);
            }
        }
        self.pending_sync.remove(member_id);
        if self.is_leader(member_id) {
            self.leader = self.members.keys().next().cloned();
        }
        Some(member)
    }

    /// The join phase is over: elect a leader among members that rejoined
    /// if the current one did not. False when nobody rejoined.
    pub fn maybe_elect_new_joined_leader(&mut self) -> bool {
        let Some(leader) = self.leader.clone() else {
            return false;
        };
        if self
            .members
            .get(&leader)
            .is_some_and(|m| m.awaiting_join.is_some())
        {
            return true;
        }
        match self
            .members
            .values()
            .find(|m| m.awaiting_join.is_some())
            .map(|m| m.member_id.clone())
        {
            Some(id) => {
                self.leader = Some(id);
                true
            }
            None => false,
        }
    }

    /// The member list the leader gets in its JoinGroup response.
    pub fn join_response_members(&self) -> Vec<JoinResponseMember> {
        let protocol = self.protocol_name.as_deref();
        self.members
            .values()
            .map(|m| JoinResponseMember {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                metadata: m.metadata(protocol),
            })
            .collect()
    }

    /// The group as persisted, with the members' current assignments.
    pub fn snapshot(&self) -> GroupMetadataSnapshot {
        let protocol = self.protocol_name.as_deref();
        GroupMetadataSnapshot {
            group_id: self.group_id.clone(),
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: self.protocol_name.clone(),
            leader: self.leader.clone(),
            current_state_timestamp: self.state_timestamp.unwrap_or(-1),
            members: self
                .members
                .values()
                .map(|m| MemberSnapshot {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout: m.rebalance_timeout_ms,
                    session_timeout: m.session_timeout_ms,
                    subscription: m.metadata(protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    /// Rebuilds a group from persisted metadata: Empty without members,
    /// Stable with them (heartbeats are armed when loading completes).
    pub fn from_snapshot(s: &GroupMetadataSnapshot) -> Self {
        let mut g = ClassicGroup::new(&s.group_id, s.current_state_timestamp);
        g.state_timestamp = (s.current_state_timestamp >= 0).then_some(s.current_state_timestamp);
        g.protocol_type = (!s.protocol_type.is_empty()).then(|| s.protocol_type.clone());
        g.protocol_name = s.protocol.clone();
        g.generation = s.generation;
        g.leader = s.leader.clone();
        for m in &s.members {
            let member = Member {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                rebalance_timeout_ms: m.rebalance_timeout,
                session_timeout_ms: m.session_timeout,
                protocol_type: s.protocol_type.clone(),
                protocols: vec![Protocol::new(
                    s.protocol.clone().unwrap_or_default(),
                    m.subscription.clone(),
                )],
                assignment: m.assignment.clone(),
                awaiting_join: None,
                awaiting_sync: None,
                is_new: false,
                heartbeat_deadline: None,
            };
            if let Some(instance) = &m.group_instance_id {
                g.static_members
                    .insert(instance.clone(), m.member_id.clone());
            }
            g.members.insert(m.member_id.clone(), member);
        }
        if g.leader
            .as_ref()
            .is_some_and(|l| !g.members.contains_key(l))
        {
            g.leader = g.members.keys().next().cloned();
        }
        if !g.members.is_empty() {
            g.state = GroupState::Stable;
            g.previous_state = GroupState::CompletingRebalance;
        }
        g
    }

    /// When this group's timers need the caller next: the earliest
    /// deadline, but a join or sync timer not before the millisecond after
    /// it was armed.
    pub fn next_deadline(&self) -> Option<i64> {
        let members = self.members.values().filter_map(|m| m.heartbeat_deadline);
        let pending = self.pending_members.values().copied();
        let join = self.join_timer.map(|t| t.deadline.max(t.armed_at + 1));
        let sync = self.sync_timer.map(|t| t.deadline.max(t.armed_at + 1));
        members.chain(pending).chain(join).chain(sync).min()
    }

    /// The earliest deadline that may fire in a tick at `until`: due, and
    /// for join and sync timers armed before `until`.
    pub fn next_due_deadline(&self, until: i64) -> Option<i64> {
        let members = self.members.values().filter_map(|m| m.heartbeat_deadline);
        let pending = self.pending_members.values().copied();
        let join = self
            .join_timer
            .filter(|t| t.armed_at < until)
            .map(|t| t.deadline);
        let sync = self
            .sync_timer
            .filter(|t| t.armed_at < until)
            .map(|t| t.deadline);
        members
            .chain(pending)
            .chain(join)
            .chain(sync)
            .filter(|d| *d <= until)
            .min()
    }
}
