//! SyncGroup, Heartbeat and LeaveGroup.

use super::*;

/// Two members through the join phase, in CompletingRebalance.
fn joined_pair(h: &mut Harness) -> (String, String) {
    let a = h.join(join_req(""));
    let b = h.join(join_req(""));
    let ra = h.await_join(a, 60_000);
    let rb = h.join_resp(b).unwrap();
    assert_eq!(ra.leader, ra.member_id);
    (ra.member_id, rb.member_id)
}

#[test]
fn leader_sync_hands_out_the_assignment_to_parked_followers() {
    let mut h = Harness::new();
    let (leader, follower) = joined_pair(&mut h);
    let ft = h.sync(sync_req(&follower, 1, &[]));
    assert!(
        h.sync_resp(ft).is_none(),
        "the follower waits for the leader"
    );
    assert_eq!(
        h.heartbeat(&follower, 1),
        Ok(()),
        "heartbeats work while completing"
    );
    let records_before = h.records.len();
    let lt = h.sync(sync_req(
        &leader,
        1,
        &[(&leader, b"p0"), (&follower, b"p1")],
    ));
    assert_eq!(h.sync_resp(lt).unwrap().assignment, b"p0");
    let rf = h.sync_resp(ft).unwrap();
    assert_eq!(rf.error, None);
    assert_eq!(rf.assignment, b"p1");
    assert_eq!(rf.protocol_name.as_deref(), Some("range"));
    assert_eq!(h.state(), Some(GroupState::Stable));
    assert_eq!(h.records.len(), records_before + 1);
    let md = h.last_metadata();
    assert_eq!(md.generation, 1);
    assert_eq!(md.leader.as_deref(), Some(leader.as_str()));
    assert_eq!(md.protocol.as_deref(), Some("range"));
    assert_eq!(md.members.len(), 2);
    assert!(md.members.iter().all(|m| m.subscription == b"sub-range"));
    assert!(md
        .members
        .iter()
        .any(|m| m.member_id == follower && m.assignment == b"p1"));
    // Stable: a late follower sync is answered at once.
    let t = h.sync(sync_req(&follower, 1, &[]));
    assert_eq!(h.sync_resp(t).unwrap().assignment, b"p1");
}

#[test]
fn members_left_out_of_the_assignment_get_an_empty_one() {
    let mut h = Harness::new();
    let (leader, follower) = joined_pair(&mut h);
    h.sync(sync_req(&leader, 1, &[(&leader, b"all")]));
    let t = h.sync(sync_req(&follower, 1, &[]));
    let r = h.sync_resp(t).unwrap();
    assert_eq!(r.error, None);
    assert!(r.assignment.is_empty());
}

#[test]
fn sync_errors() {
    let mut h = Harness::new();
    let mut req = sync_req("m", 1, &[]);
    req.group_id = "nope".to_string();
    let t = h.sync(req);
    assert_eq!(
        h.sync_resp(t).unwrap().error,
        Some(GroupError::UnknownMemberId)
    );
    let mut req = sync_req("m", 1, &[]);
    req.group_id = String::new();
    let t = h.sync(req);
    assert_eq!(
        h.sync_resp(t).unwrap().error,
        Some(GroupError::InvalidGroupId)
    );

    let (leader, follower) = joined_pair(&mut h);
    let t = h.sync(sync_req(&follower, 2, &[]));
    assert_eq!(
        h.sync_resp(t).unwrap().error,
        Some(GroupError::IllegalGeneration)
    );
    let t = h.sync(sync_req("ghost", 1, &[]));
    assert_eq!(
        h.sync_resp(t).unwrap().error,
        Some(GroupError::UnknownMemberId)
    );
    let mut wrong_type = sync_req(&follower, 1, &[]);
    wrong_type.protocol_type = Some("connect".to_string());
    let t = h.sync(wrong_type);
    assert_eq!(
        h.sync_resp(t).unwrap().error,
        Some(GroupError::InconsistentGroupProtocol)
    );
    let mut wrong_name = sync_req(&follower, 1, &[]);
    wrong_name.protocol_name = Some("roundrobin".to_string());
    let t = h.sync(wrong_name);
    assert_eq!(
        h.sync_resp(t).unwrap().error,
        Some(GroupError::InconsistentGroupProtocol)
    );
    let mut right_name = sync_req(&follower, 1, &[]);
    right_name.protocol_name = Some("range".to_string());
    let ft = h.sync(right_name);
    assert!(h.sync_resp(ft).is_none());

    // A new member starts a rebalance: the parked follower is told to rejoin.
    let n = h.join(join_req(""));
    assert_eq!(
        h.sync_resp(ft).unwrap().error,
        Some(GroupError::RebalanceInProgress)
    );
    let t = h.sync(sync_req(&leader, 1, &[]));
    assert_eq!(
        h.sync_resp(t).unwrap().error,
        Some(GroupError::RebalanceInProgress)
    );
    assert!(h.join_resp(n).is_none());
}

#[test]
fn sync_on_empty_group_is_unknown_member() {
    let mut h = Harness::new();
    let (ids, _) = h.stable_group(1);
    h.leave(vec![leaving(&ids[0], None)]);
    assert_eq!(h.state(), Some(GroupState::Empty));
    let t = h.sync(sync_req(&ids[0], 2, &[]));
    assert_eq!(
        h.sync_resp(t).unwrap().error,
        Some(GroupError::UnknownMemberId)
    );
}

#[test]
fn heartbeat_by_state_and_errors() {
    let mut h = Harness::new();
    assert_eq!(
        h.heartbeat("m", 0),
        Err(GroupError::UnknownMemberId),
        "unknown group"
    );
    let mut bad = hb("m", 0);
    bad.group_id = String::new();
    assert_eq!(h.c.heartbeat(0, &bad), Err(GroupError::InvalidGroupId));
    let (ids, leader) = h.stable_group(2);
    assert_eq!(h.heartbeat(&ids[0], 1), Ok(()));
    assert_eq!(h.heartbeat(&ids[0], 0), Err(GroupError::IllegalGeneration));
    assert_eq!(h.heartbeat("ghost", 1), Err(GroupError::UnknownMemberId));
    h.join(join_req(&leader));
    assert_eq!(h.state(), Some(GroupState::PreparingRebalance));
    assert_eq!(
        h.heartbeat(&ids[1], 1),
        Err(GroupError::RebalanceInProgress)
    );
}

#[test]
fn leave_from_stable_rebalances_and_last_leave_empties_the_group() {
    let mut h = Harness::new();
    let (ids, leader) = h.stable_group(3);
    let others: Vec<&String> = ids.iter().filter(|id| **id != leader).collect();
    let resp = h.leave(vec![leaving(others[0], None), leaving("ghost", None)]);
    assert_eq!(resp.error, None);
    assert_eq!(resp.members[0].1, None);
    assert_eq!(resp.members[1].1, Some(GroupError::UnknownMemberId));
    assert_eq!(h.state(), Some(GroupState::PreparingRebalance));
    let t1 = h.join(join_req(&leader));
    let t2 = h.join(join_req(others[1]));
    let r = h.join_resp(t1).unwrap();
    assert_eq!(r.generation_id, 2);
    assert_eq!(r.members.len(), 2);
    assert!(h.join_resp(t2).is_some());
    // Batched leave of everyone: Empty at the next generation, persisted.
    let resp = h.leave(vec![leaving(&leader, None), leaving(others[1], None)]);
    assert!(resp.members.iter().all(|(_, e)| e.is_none()));
    assert_eq!(h.state(), Some(GroupState::Empty));
    assert_eq!(h.generation(), 3);
    let md = h.last_metadata();
    assert_eq!((md.generation, md.members.len()), (3, 0));
    assert_eq!(md.protocol, None);
    assert_eq!(
        md.protocol_type, "consumer",
        "an Empty group keeps its type"
    );
}

#[test]
fn leave_during_preparing_rebalance_completes_the_join() {
    let mut h = Harness::new();
    let (ids, leader) = h.stable_group(2);
    let follower = ids.iter().find(|id| **id != leader).unwrap().clone();
    let lt = h.join(join_req(&leader));
    assert!(h.join_resp(lt).is_none(), "waiting for the follower");
    h.leave(vec![leaving(&follower, None)]);
    let r = h.join_resp(lt).unwrap();
    assert_eq!((r.generation_id, r.members.len()), (2, 1));
}

#[test]
fn leave_of_a_parked_member_answers_its_join() {
    let mut h = Harness::new();
    let a = h.join(join_req(""));
    let b = h.join(join_req(""));
    let ra = h.await_join(a, 60_000);
    let rb = h.join_resp(b).unwrap();
    // A new rebalance; b rejoins and parks, then leaves.
    let mut changed = join_req(&rb.member_id);
    changed.protocols[0].metadata = b"changed".to_vec();
    let bt = h.join(changed);
    assert!(h.join_resp(bt).is_none(), "parked in PreparingRebalance");
    h.leave(vec![leaving(&rb.member_id, None)]);
    let r = h.join_resp(bt).unwrap();
    assert_eq!(r.error, Some(GroupError::UnknownMemberId));
    let _ = ra;
}

#[test]
fn leave_of_a_pending_member_and_unknown_group() {
    let mut h = Harness::new();
    let mut req = join_req("");
    req.require_known_member_id = true;
    let t = h.join(req);
    let id = h.join_resp(t).unwrap().member_id;
    let resp = h.leave(vec![leaving(&id, None)]);
    assert_eq!(resp.members[0].1, None);
    let resp = h.leave(vec![leaving(&id, None)]);
    assert_eq!(resp.members[0].1, Some(GroupError::UnknownMemberId));

    let (resp, _) = h.c.leave_group(
        0,
        &LeaveGroupRequest {
            group_id: "nope".to_string(),
            members: vec![leaving("x", None)],
        },
    );
    assert_eq!(resp.error, None);
    assert_eq!(resp.members[0].1, Some(GroupError::UnknownMemberId));
    let (resp, _) = h.c.leave_group(
        0,
        &LeaveGroupRequest {
            group_id: String::new(),
            members: vec![],
        },
    );
    assert_eq!(resp.error, Some(GroupError::InvalidGroupId));
}

#[test]
fn cooperative_rebalance_is_just_another_rejoin() {
    // KIP-429: members revoke, commit during PreparingRebalance and rejoin.
    let mut h = Harness::new();
    let mut coop = join_req("");
    coop.protocols = vec![Protocol::new("cooperative-sticky", b"owned:p0".to_vec())];
    let a = h.join(coop.clone());
    let ra = h.await_join(a, 60_000);
    let st = h.sync(sync_req(&ra.member_id, 1, &[(&ra.member_id, b"p0,p1")]));
    assert_eq!(h.sync_resp(st).unwrap().assignment, b"p0,p1");
    let b = h.join(coop.clone());
    assert_eq!(h.state(), Some(GroupState::PreparingRebalance));
    // The existing member may still commit for generation 1 while it
    // revokes.
    assert_eq!(
        h.c.validate_offset_commit(h.now, G, &ra.member_id, None, 1, 9),
        Ok(())
    );
    let mut rejoin = coop;
    rejoin.member_id = ra.member_id.clone();
    let t = h.join(rejoin);
    let r = h.join_resp(t).unwrap();
    assert_eq!(r.generation_id, 2);
    assert_eq!(r.protocol_name.as_deref(), Some("cooperative-sticky"));
    assert!(h.join_resp(b).is_some());
}
