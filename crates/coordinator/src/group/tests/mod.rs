//! Unit tests of the classic group state machine, driven by a manual
//! clock through `Harness`. One file per area: `join.rs`, `sync.rs`
//! (SyncGroup, Heartbeat, LeaveGroup), `timers.rs`, `static_members.rs`,
//! `admin.rs` (describe/list/delete, load, offset-commit checks) and
//! `model.rs` (random operation sequences checked against invariants).

#![allow(clippy::unwrap_used)]

mod admin;
mod join;
mod model;
mod static_members;
mod sync;
mod timers;

use std::collections::BTreeMap;

use super::*;

pub(super) const G: &str = "g";
pub(super) const SESSION: i32 = 10_000;
pub(super) const REBALANCE: i32 = 30_000;

pub(super) struct Harness {
    pub c: GroupCoordinator,
    pub now: i64,
    next_token: u64,
    pub responses: BTreeMap<RequestToken, GroupResponse>,
    pub records: Vec<GroupRecord>,
}

pub(super) fn join_req(member_id: &str) -> JoinGroupRequest {
    JoinGroupRequest {
        group_id: G.to_string(),
        member_id: member_id.to_string(),
        group_instance_id: None,
        client_id: "client".to_string(),
        client_host: "/127.0.0.1".to_string(),
        session_timeout_ms: SESSION,
        rebalance_timeout_ms: REBALANCE,
        protocol_type: "consumer".to_string(),
        protocols: vec![
            Protocol::new("range", b"sub-range".to_vec()),
            Protocol::new("roundrobin", b"sub-rr".to_vec()),
        ],
        require_known_member_id: false,
        supports_skip_assignment: false,
    }
}

pub(super) fn static_req(member_id: &str, instance: &str) -> JoinGroupRequest {
    JoinGroupRequest {
        group_instance_id: Some(instance.to_string()),
        ..join_req(member_id)
    }
}

pub(super) fn sync_req(
    member_id: &str,
    generation: i32,
    assignments: &[(&str, &[u8])],
) -> SyncGroupRequest {
    SyncGroupRequest {
        group_id: G.to_string(),
        member_id: member_id.to_string(),
        group_instance_id: None,
        generation_id: generation,
        protocol_type: Some("consumer".to_string()),
        protocol_name: None,
        assignments: assignments
            .iter()
            .map(|(m, a)| (m.to_string(), a.to_vec()))
            .collect(),
    }
}

pub(super) fn hb(member_id: &str, generation: i32) -> HeartbeatRequest {
    HeartbeatRequest {
        group_id: G.to_string(),
        member_id: member_id.to_string(),
        group_instance_id: None,
        generation_id: generation,
    }
}

pub(super) fn leaving(member_id: &str, instance: Option<&str>) -> LeavingMember {
    LeavingMember {
        member_id: member_id.to_string(),
        group_instance_id: instance.map(str::to_string),
    }
}

impl Harness {
    pub fn new() -> Self {
        Harness::with(GroupConfig::default())
    }

    pub fn with(cfg: GroupConfig) -> Self {
        Harness {
            c: GroupCoordinator::new(cfg),
            now: 0,
            next_token: 0,
            responses: BTreeMap::new(),
            records: Vec::new(),
        }
    }

    pub fn absorb(&mut self, fx: Effects) {
        for (token, response) in fx.responses {
            let previous = self.responses.insert(token, response);
            assert!(previous.is_none(), "token {token:?} answered twice");
        }
        self.records.extend(fx.records);
    }

    fn token(&mut self) -> RequestToken {
        self.next_token += 1;
        RequestToken(self.next_token)
    }

    pub fn join(&mut self, req: JoinGroupRequest) -> RequestToken {
        let t = self.token();
        let fx = self.c.join_group(self.now, t, &req);
        self.absorb(fx);
        t
    }

    pub fn sync(&mut self, req: SyncGroupRequest) -> RequestToken {
        let t = self.token();
        let fx = self.c.sync_group(self.now, t, &req);
        self.absorb(fx);
        t
    }

    pub fn heartbeat(&mut self, member_id: &str, generation: i32) -> Result<(), GroupError> {
        self.c.heartbeat(self.now, &hb(member_id, generation))
    }

    pub fn leave(&mut self, members: Vec<LeavingMember>) -> LeaveGroupResponse {
        let (resp, fx) = self.c.leave_group(
            self.now,
            &LeaveGroupRequest {
                group_id: G.to_string(),
                members,
            },
        );
        self.absorb(fx);
        resp
    }

    /// Moves the clock and fires due timers.
    pub fn advance(&mut self, ms: i64) {
        self.now += ms;
        let fx = self.c.tick(self.now);
        self.absorb(fx);
    }

    /// Takes a JoinGroup response if it has arrived.
    pub fn join_resp(&mut self, t: RequestToken) -> Option<JoinGroupResponse> {
        match self.responses.remove(&t) {
            Some(GroupResponse::Join(r)) => Some(r),
            Some(other) => panic!("expected a join response, got {other:?}"),
            None => None,
        }
    }

    pub fn sync_resp(&mut self, t: RequestToken) -> Option<SyncGroupResponse> {
        match self.responses.remove(&t) {
            Some(GroupResponse::Sync(r)) => Some(r),
            Some(other) => panic!("expected a sync response, got {other:?}"),
            None => None,
        }
    }

    pub fn state(&self) -> Option<GroupState> {
        self.c.group_state(G)
    }

    pub fn generation(&self) -> i32 {
        self.c.generation(G).unwrap()
    }

    /// Advances to the next deadline (at most `limit` ms) until `t` is
    /// answered.
    pub fn await_join(&mut self, t: RequestToken, limit: i64) -> JoinGroupResponse {
        let end = self.now + limit;
        loop {
            if let Some(r) = self.join_resp(t) {
                return r;
            }
            let next = self.c.next_deadline().expect("nothing pending").min(end);
            assert!(next > self.now || next == end, "clock stuck");
            assert!(self.now < end, "join not answered within {limit} ms");
            let step = (next - self.now).max(1);
            self.advance(step);
        }
    }

    /// Forms a Stable group of `n` dynamic members (each gets assignment
    /// `a-<index>`). Returns member ids in join order and the leader.
    pub fn stable_group(&mut self, n: usize) -> (Vec<String>, String) {
        let tokens: Vec<RequestToken> = (0..n).map(|_| self.join(join_req(""))).collect();
        let mut ids = Vec::new();
        let mut leader = String::new();
        let mut generation = 0;
        for t in tokens {
            let r = self.await_join(t, 120_000);
            assert_eq!(r.error, None);
            leader = r.leader.clone();
            generation = r.generation_id;
            ids.push(r.member_id);
        }
        let assignments: Vec<(String, Vec<u8>)> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.clone(), format!("a-{i}").into_bytes()))
            .collect();
        let mut req = sync_req(&leader, generation, &[]);
        req.assignments = assignments;
        let lt = self.sync(req);
        assert_eq!(self.sync_resp(lt).unwrap().error, None);
        for id in ids.iter().filter(|id| **id != leader) {
            let t = self.sync(sync_req(id, generation, &[]));
            assert_eq!(self.sync_resp(t).unwrap().error, None);
        }
        assert_eq!(self.state(), Some(GroupState::Stable));
        (ids, leader)
    }

    /// Last persisted metadata of the group.
    pub fn last_metadata(&self) -> GroupMetadataSnapshot {
        self.records
            .iter()
            .rev()
            .find_map(|r| match r {
                GroupRecord::Metadata(s) if s.group_id == G => Some(s.clone()),
                _ => None,
            })
            .expect("no metadata record")
    }
}
