//! Static membership (KIP-345).

use super::*;

/// A Stable group of static members "i0".."i<n>" with assignments "a<i>".
fn static_group(h: &mut Harness, n: usize) -> Vec<String> {
    let tokens: Vec<_> = (0..n)
        .map(|i| h.join(static_req("", &format!("i{i}"))))
        .collect();
    let mut ids = Vec::new();
    let mut leader = String::new();
    for t in tokens {
        let r = h.await_join(t, 60_000);
        leader = r.leader.clone();
        ids.push(r.member_id);
    }
    let assignments: Vec<(String, Vec<u8>)> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.clone(), format!("a{i}").into_bytes()))
        .collect();
    let mut req = sync_req(&leader, 1, &[]);
    req.assignments = assignments;
    let t = h.sync(req);
    assert!(h.sync_resp(t).is_some());
    assert_eq!(h.state(), Some(GroupState::Stable));
    ids
}

fn static_sync(member_id: &str, instance: &str, generation: i32) -> SyncGroupRequest {
    SyncGroupRequest {
        group_instance_id: Some(instance.to_string()),
        ..sync_req(member_id, generation, &[])
    }
}

#[test]
fn static_member_ids_use_the_instance_id() {
    let mut h = Harness::new();
    let ids = static_group(&mut h, 1);
    assert!(ids[0].starts_with("i0-"));
}

#[test]
fn restarted_static_member_gets_its_assignment_back_without_rebalance() {
    let mut h = Harness::new();
    let ids = static_group(&mut h, 3);
    let records = h.records.len();
    // i1 restarts: it joins again without member id.
    let t = h.join(static_req("", "i1"));
    let r = h.join_resp(t).unwrap();
    assert_eq!(r.error, None);
    assert_ne!(r.member_id, ids[1]);
    assert_eq!(r.generation_id, 1, "same generation");
    assert!(r.members.is_empty());
    assert_eq!(h.state(), Some(GroupState::Stable), "no rebalance");
    assert_eq!(
        h.records.len(),
        records + 1,
        "the new member id is persisted"
    );
    assert!(h
        .last_metadata()
        .members
        .iter()
        .any(|m| m.member_id == r.member_id));
    // The others keep heartbeating without seeing a rebalance.
    assert_eq!(h.heartbeat(&ids[0], 1), Ok(()));
    assert_eq!(h.heartbeat(&ids[2], 1), Ok(()));
    // The new id syncs and gets the old assignment.
    let st = h.sync(static_sync(&r.member_id, "i1", 1));
    assert_eq!(h.sync_resp(st).unwrap().assignment, b"a1");
    // The old incarnation is fenced.
    let mut old = hb(&ids[1], 1);
    old.group_instance_id = Some("i1".to_string());
    assert_eq!(
        h.c.heartbeat(h.now, &old),
        Err(GroupError::FencedInstanceId)
    );
    let t = h.sync(static_sync(&ids[1], "i1", 1));
    assert_eq!(
        h.sync_resp(t).unwrap().error,
        Some(GroupError::FencedInstanceId)
    );
    let t = h.join(static_req(&ids[1], "i1"));
    assert_eq!(
        h.join_resp(t).unwrap().error,
        Some(GroupError::FencedInstanceId)
    );
    let resp = h.leave(vec![leaving(&ids[1], Some("i1"))]);
    assert_eq!(resp.members[0].1, Some(GroupError::FencedInstanceId));
    assert_eq!(h.state(), Some(GroupState::Stable));
}

#[test]
fn restarted_static_leader_without_skip_assignment_sees_the_old_leader_id() {
    let mut h = Harness::new();
    let ids = static_group(&mut h, 2);
    let t = h.join(static_req("", "i0"));
    let r = h.join_resp(t).unwrap();
    assert_eq!(r.leader, ids[0], "old leader id: do not assign");
    assert!(!r.skip_assignment);
    assert!(r.members.is_empty());
    assert_eq!(
        h.c.snapshot(G).unwrap().leader.as_deref(),
        Some(r.member_id.as_str())
    );
}

#[test]
fn restarted_static_leader_with_skip_assignment_gets_the_members() {
    let mut h = Harness::new();
    static_group(&mut h, 2);
    let mut req = static_req("", "i0");
    req.supports_skip_assignment = true;
    let t = h.join(req);
    let r = h.join_resp(t).unwrap();
    assert_eq!(r.leader, r.member_id);
    assert!(r.skip_assignment);
    assert_eq!(r.members.len(), 2);
    assert_eq!(h.state(), Some(GroupState::Stable));
}

#[test]
fn restarted_static_member_with_new_protocol_rebalances() {
    let mut h = Harness::new();
    let ids = static_group(&mut h, 2);
    let mut req = static_req("", "i1");
    req.protocols = vec![
        Protocol::new("roundrobin", b"x".to_vec()),
        Protocol::new("range", b"y".to_vec()),
    ];
    // Votes: i0 range, i1 roundrobin: tie, the leader's choice (range)
    // stays, so no rebalance.
    let t = h.join(req.clone());
    assert_eq!(h.join_resp(t).unwrap().error, None);
    assert_eq!(h.state(), Some(GroupState::Stable));
    // Now the only common protocol changes: rebalance.
    req.protocols = vec![Protocol::new("roundrobin", b"x".to_vec())];
    let t = h.join(req);
    assert!(h.join_resp(t).is_none());
    assert_eq!(h.state(), Some(GroupState::PreparingRebalance));
    let lt = h.join(static_req(&ids[0], "i0"));
    let r = h.join_resp(lt).unwrap();
    assert_eq!(r.protocol_name.as_deref(), Some("roundrobin"));
    assert!(h.join_resp(t).is_some());
}

#[test]
fn static_replacement_during_completing_rebalance_rebalances_and_fences() {
    let mut h = Harness::new();
    let a = h.join(static_req("", "i0"));
    let b = h.join(static_req("", "i1"));
    let ra = h.await_join(a, 60_000);
    let rb = h.join_resp(b).unwrap();
    let parked = h.sync(static_sync(&rb.member_id, "i1", 1));
    assert!(h.sync_resp(parked).is_none());
    let t = h.join(static_req("", "i1"));
    assert_eq!(
        h.sync_resp(parked).unwrap().error,
        Some(GroupError::FencedInstanceId)
    );
    assert_eq!(h.state(), Some(GroupState::PreparingRebalance));
    let lt = h.join(static_req(&ra.member_id, "i0"));
    let r = h.join_resp(lt).unwrap();
    assert_eq!(r.generation_id, 2);
    let new_b = h.join_resp(t).unwrap();
    assert_ne!(new_b.member_id, rb.member_id);
    assert!(r.members.iter().any(|m| m.member_id == new_b.member_id));
}

#[test]
fn static_replacement_while_parked_in_join_fences_the_old_request() {
    let mut h = Harness::new();
    let ids = static_group(&mut h, 3);
    // The leader rejoins (rebalance); i1 rejoins and parks; i2 has not yet.
    let lt = h.join(static_req(&ids[0], "i0"));
    let old = h.join(static_req(&ids[1], "i1"));
    assert_eq!(h.state(), Some(GroupState::PreparingRebalance));
    assert!(h.join_resp(old).is_none());
    // i1 restarts: its old parked JoinGroup is fenced.
    let new = h.join(static_req("", "i1"));
    let fenced = h.join_resp(old).unwrap();
    assert_eq!(fenced.error, Some(GroupError::FencedInstanceId));
    assert_eq!(fenced.member_id, ids[1]);
    assert!(
        h.join_resp(new).is_none(),
        "parked in the ongoing rebalance"
    );
    let t2 = h.join(static_req(&ids[2], "i2"));
    let r = h.join_resp(lt).unwrap();
    let rn = h.join_resp(new).unwrap();
    assert!(h.join_resp(t2).is_some());
    assert_eq!(r.generation_id, 2);
    assert_ne!(rn.member_id, ids[1]);
    let listed: Vec<&str> = r.members.iter().map(|m| m.member_id.as_str()).collect();
    assert!(listed.contains(&rn.member_id.as_str()));
    assert!(!listed.contains(&ids[1].as_str()));
}

#[test]
fn static_member_validation_and_leave_by_instance_id() {
    let mut h = Harness::new();
    let ids = static_group(&mut h, 2);
    // Unknown instance id with a member id.
    let t = h.join(static_req(&ids[0], "nobody"));
    assert_eq!(
        h.join_resp(t).unwrap().error,
        Some(GroupError::UnknownMemberId)
    );
    let mut req = hb(&ids[0], 1);
    req.group_instance_id = Some("i1".to_string());
    assert_eq!(
        h.c.heartbeat(h.now, &req),
        Err(GroupError::FencedInstanceId)
    );
    // Leave by instance id alone.
    let resp = h.leave(vec![leaving("", Some("i1")), leaving("", Some("nobody"))]);
    assert_eq!(resp.members[0].1, None);
    assert_eq!(resp.members[1].1, Some(GroupError::UnknownMemberId));
    assert_eq!(h.state(), Some(GroupState::PreparingRebalance));
    assert_eq!(h.c.snapshot(G).unwrap().members.len(), 1);
}

#[test]
fn static_member_session_expiry_removes_it() {
    let mut h = Harness::new();
    let ids = static_group(&mut h, 2);
    for _ in 0..3 {
        h.advance(4_000);
        let mut req = hb(&ids[0], 1);
        req.group_instance_id = Some("i0".to_string());
        let _ = h.c.heartbeat(h.now, &req);
    }
    assert_eq!(h.state(), Some(GroupState::PreparingRebalance));
    let t = h.join(static_req("", "i1"));
    // i1 is new again: it joins the ongoing rebalance.
    let lt = h.join(static_req(&ids[0], "i0"));
    let r = h.join_resp(lt).unwrap();
    assert_eq!(r.members.len(), 2);
    assert!(h.join_resp(t).is_some());
}
