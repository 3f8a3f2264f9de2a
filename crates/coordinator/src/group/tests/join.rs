//! JoinGroup: initial delay, member ids, validation, protocol vote, max
//! size, rejoins per state.

use super::*;

#[test]
fn error_codes_match_kafka() {
    let expected = [
        (GroupError::UnknownServerError, -1),
        (GroupError::CoordinatorLoadInProgress, 14),
        (GroupError::CoordinatorNotAvailable, 15),
        (GroupError::NotCoordinator, 16),
        (GroupError::IllegalGeneration, 22),
        (GroupError::InconsistentGroupProtocol, 23),
        (GroupError::InvalidGroupId, 24),
        (GroupError::UnknownMemberId, 25),
        (GroupError::InvalidSessionTimeout, 26),
        (GroupError::RebalanceInProgress, 27),
        (GroupError::NonEmptyGroup, 68),
        (GroupError::GroupIdNotFound, 69),
        (GroupError::MemberIdRequired, 79),
        (GroupError::GroupMaxSizeReached, 81),
        (GroupError::FencedInstanceId, 82),
    ];
    for (e, code) in expected {
        assert_eq!(e.code(), code, "{e:?}");
    }
    assert_eq!(error_code(None), 0);
}

#[test]
fn first_join_waits_for_initial_delay_extended_by_new_members() {
    let mut h = Harness::new();
    let a = h.join(join_req(""));
    assert_eq!(h.state(), Some(GroupState::PreparingRebalance));
    // A new group is persisted right away, Empty at generation 0.
    assert_eq!(h.last_metadata().generation, 0);
    assert!(h.last_metadata().members.is_empty());
    assert_eq!(h.c.next_deadline(), Some(3_000));
    h.advance(1_000);
    let b = h.join(join_req(""));
    h.advance(2_000); // t=3000: a member arrived during the delay: extend.
    assert!(h.join_resp(a).is_none());
    assert_eq!(h.c.next_deadline(), Some(6_000));
    h.advance(2_999);
    assert!(h.join_resp(a).is_none());
    h.advance(1); // t=6000
    let ra = h.join_resp(a).unwrap();
    let rb = h.join_resp(b).unwrap();
    assert_eq!(h.state(), Some(GroupState::CompletingRebalance));
    assert_eq!((ra.generation_id, rb.generation_id), (1, 1));
    assert_eq!(ra.leader, ra.member_id, "first member leads");
    assert_eq!(rb.leader, ra.member_id);
    assert_eq!(ra.members.len(), 2, "the leader gets the member list");
    assert!(rb.members.is_empty());
    assert_eq!(ra.protocol_name.as_deref(), Some("range"));
    assert_eq!(ra.protocol_type.as_deref(), Some("consumer"));
    assert!(ra.member_id.starts_with("client-"));
    assert_ne!(ra.member_id, rb.member_id);
    let listed: Vec<&[u8]> = ra.members.iter().map(|m| m.metadata.as_slice()).collect();
    assert_eq!(
        listed,
        vec![b"sub-range".as_slice(), b"sub-range".as_slice()]
    );
}

#[test]
fn initial_delay_is_bounded_by_rebalance_timeout() {
    let mut h = Harness::new();
    let mut req = join_req("");
    req.rebalance_timeout_ms = 5_000;
    let a = h.join(req.clone());
    let mut others = Vec::new();
    for _ in 0..4 {
        h.advance(1_000);
        others.push(h.join(req.clone()));
    }
    // t=4000: remaining budget was 2000 after the first extension.
    assert!(h.join_resp(a).is_none());
    h.advance(1_000); // t=5000
    assert_eq!(h.join_resp(a).unwrap().generation_id, 1);
    for t in others {
        assert_eq!(h.join_resp(t).unwrap().error, None);
    }
}

#[test]
fn zero_initial_delay_completes_on_the_next_tick() {
    let mut h = Harness::with(GroupConfig {
        initial_rebalance_delay_ms: 0,
        ..GroupConfig::default()
    });
    let a = h.join(join_req(""));
    assert!(
        h.join_resp(a).is_none(),
        "the join is answered by the timer"
    );
    // The timer is a later event: not at the instant it was armed, but on
    // the first tick after it.
    assert_eq!(h.c.next_deadline(), Some(1));
    h.advance(0);
    assert!(h.join_resp(a).is_none());
    h.advance(1);
    assert_eq!(h.join_resp(a).unwrap().generation_id, 1);
}

#[test]
fn member_id_required_then_rejoin() {
    let mut h = Harness::new();
    let mut req = join_req("");
    req.require_known_member_id = true;
    let t = h.join(req.clone());
    let r = h.join_resp(t).unwrap();
    assert_eq!(r.error, Some(GroupError::MemberIdRequired));
    assert!(r.member_id.starts_with("client-"));
    assert_eq!(h.state(), Some(GroupState::Empty), "no rebalance yet");
    assert_eq!(h.records.len(), 1, "the new group is persisted");
    req.member_id = r.member_id.clone();
    let t2 = h.join(req);
    let r2 = h.await_join(t2, 10_000);
    assert_eq!(r2.error, None);
    assert_eq!(r2.member_id, r.member_id);
    assert_eq!(r2.leader, r.member_id);
}

#[test]
fn pending_member_blocks_join_phase_until_it_expires() {
    let mut h = Harness::new();
    let (ids, leader) = h.stable_group(1);
    let mut req = join_req("");
    req.require_known_member_id = true;
    let t = h.join(req);
    assert_eq!(
        h.join_resp(t).unwrap().error,
        Some(GroupError::MemberIdRequired)
    );
    assert_eq!(h.state(), Some(GroupState::Stable));
    // The leader rejoins: everybody joined except the pending member.
    let lt = h.join(join_req(&leader));
    assert_eq!(h.state(), Some(GroupState::PreparingRebalance));
    assert!(h.join_resp(lt).is_none());
    h.heartbeat(&ids[0], 1).unwrap_err();
    h.advance(i64::from(SESSION)); // the pending member expires
    let r = h.join_resp(lt).unwrap();
    assert_eq!(r.generation_id, 2);
    assert_eq!(r.members.len(), 1);
}

#[test]
fn join_validation_errors() {
    let mut h = Harness::new();
    for (timeout, ok) in [
        (5_999, false),
        (6_000, true),
        (1_800_000, true),
        (1_800_001, false),
    ] {
        let mut req = join_req("");
        req.session_timeout_ms = timeout;
        req.require_known_member_id = true;
        let t = h.join(req);
        let e = h.join_resp(t).unwrap().error;
        if ok {
            assert_eq!(e, Some(GroupError::MemberIdRequired));
        } else {
            assert_eq!(e, Some(GroupError::InvalidSessionTimeout));
        }
    }
    let mut req = join_req("");
    req.group_id = String::new();
    let t = h.join(req);
    assert_eq!(
        h.join_resp(t).unwrap().error,
        Some(GroupError::InvalidGroupId)
    );
    // A member id for a group that does not exist.
    let mut req = join_req("ghost");
    req.group_id = "other".to_string();
    let t = h.join(req);
    let r = h.join_resp(t).unwrap();
    assert_eq!(r.error, Some(GroupError::UnknownMemberId));
    assert_eq!(r.generation_id, -1);
    assert_eq!(h.c.group_state("other"), None);
    // An unknown member id for an existing group.
    let t = h.join(join_req("ghost"));
    assert_eq!(
        h.join_resp(t).unwrap().error,
        Some(GroupError::UnknownMemberId)
    );
}

#[test]
fn inconsistent_group_protocol() {
    let mut h = Harness::new();
    let mut bad = join_req("");
    bad.protocols.clear();
    let t = h.join(bad);
    assert_eq!(
        h.join_resp(t).unwrap().error,
        Some(GroupError::InconsistentGroupProtocol)
    );
    let mut bad = join_req("");
    bad.protocol_type = String::new();
    let t = h.join(bad);
    assert_eq!(
        h.join_resp(t).unwrap().error,
        Some(GroupError::InconsistentGroupProtocol)
    );

    h.stable_group(1);
    let mut other_type = join_req("");
    other_type.protocol_type = "connect".to_string();
    let t = h.join(other_type);
    assert_eq!(
        h.join_resp(t).unwrap().error,
        Some(GroupError::InconsistentGroupProtocol)
    );
    let mut no_common = join_req("");
    no_common.protocols = vec![Protocol::new("sticky", b"s".to_vec())];
    let t = h.join(no_common);
    assert_eq!(
        h.join_resp(t).unwrap().error,
        Some(GroupError::InconsistentGroupProtocol)
    );
    assert_eq!(
        h.state(),
        Some(GroupState::Stable),
        "rejections do not rebalance"
    );
}

fn with_protocols(names: &[&str]) -> JoinGroupRequest {
    JoinGroupRequest {
        protocols: names
            .iter()
            .map(|n| Protocol::new(*n, n.as_bytes().to_vec()))
            .collect(),
        ..join_req("")
    }
}

fn elect(preferences: &[&[&str]]) -> String {
    let mut h = Harness::new();
    let tokens: Vec<_> = preferences
        .iter()
        .map(|p| h.join(with_protocols(p)))
        .collect();
    let r = h.await_join(tokens[0], 60_000);
    r.protocol_name.unwrap()
}

#[test]
fn protocol_selection_is_a_vote_among_common_protocols() {
    // Only "range" is supported by everybody.
    assert_eq!(
        elect(&[
            &["roundrobin", "range"],
            &["range", "roundrobin"],
            &["range"]
        ]),
        "range"
    );
    // Two of three prefer roundrobin.
    assert_eq!(
        elect(&[
            &["roundrobin", "range"],
            &["roundrobin", "range"],
            &["range", "roundrobin"]
        ]),
        "roundrobin"
    );
    // A tie goes to the leader's preference.
    assert_eq!(
        elect(&[&["sticky", "range"], &["range", "sticky"]]),
        "sticky"
    );
    // cooperative-sticky (KIP-429) is a protocol like any other.
    assert_eq!(
        elect(&[
            &["cooperative-sticky", "range"],
            &["cooperative-sticky", "range"]
        ]),
        "cooperative-sticky"
    );
}

#[test]
fn protocol_change_to_uncommon_subset_is_rejected_but_common_is_accepted() {
    let mut h = Harness::new();
    let a = h.join(with_protocols(&["range", "roundrobin"]));
    // Joins while the group is still forming must share a protocol.
    let b = h.join(with_protocols(&["roundrobin"]));
    let c = h.join(with_protocols(&["sticky"]));
    assert_eq!(
        h.join_resp(c).unwrap().error,
        Some(GroupError::InconsistentGroupProtocol)
    );
    let r = h.await_join(a, 60_000);
    assert_eq!(r.protocol_name.as_deref(), Some("roundrobin"));
    assert_eq!(h.join_resp(b).unwrap().error, None);
}

#[test]
fn group_max_size() {
    let mut h = Harness::with(GroupConfig {
        max_size: 2,
        ..GroupConfig::default()
    });
    let a = h.join(join_req(""));
    let b = h.join(join_req(""));
    let c = h.join(join_req(""));
    let rc = h.join_resp(c).unwrap();
    assert_eq!(rc.error, Some(GroupError::GroupMaxSizeReached));
    assert_eq!(rc.member_id, "");
    h.await_join(a, 60_000);
    let ra = h.join_resp(a);
    assert!(ra.is_none(), "already taken by await_join");
    assert_eq!(h.join_resp(b).unwrap().error, None);
    // Stable/CompletingRebalance: new members are refused at the limit.
    let d = h.join(join_req(""));
    assert_eq!(
        h.join_resp(d).unwrap().error,
        Some(GroupError::GroupMaxSizeReached)
    );
    assert_eq!(h.state(), Some(GroupState::CompletingRebalance));
}

#[test]
fn rejoin_by_state() {
    let mut h = Harness::new();
    let (ids, leader) = h.stable_group(2);
    let follower = ids.iter().find(|id| **id != leader).unwrap().clone();

    // Stable, follower with unchanged metadata: current generation, no
    // rebalance.
    let t = h.join(join_req(&follower));
    let r = h.join_resp(t).unwrap();
    assert_eq!((r.error, r.generation_id), (None, 1));
    assert!(r.members.is_empty());
    assert_eq!(r.leader, leader);
    assert_eq!(h.state(), Some(GroupState::Stable));

    // Stable, follower with changed metadata: rebalance.
    let mut changed = join_req(&follower);
    changed.protocols[0].metadata = b"new-subscription".to_vec();
    let ft = h.join(changed);
    assert_eq!(h.state(), Some(GroupState::PreparingRebalance));
    assert_eq!(
        h.heartbeat(&leader, 1),
        Err(GroupError::RebalanceInProgress)
    );
    let lt = h.join(join_req(&leader));
    // Everybody rejoined: the join phase completes without waiting.
    let rl = h.join_resp(lt).unwrap();
    let rf = h.join_resp(ft).unwrap();
    assert_eq!((rl.generation_id, rf.generation_id), (2, 2));
    assert_eq!(h.state(), Some(GroupState::CompletingRebalance));
    let follower_meta = rl
        .members
        .iter()
        .find(|m| m.member_id == follower)
        .unwrap()
        .metadata
        .clone();
    assert_eq!(follower_meta, b"new-subscription");

    // CompletingRebalance, same metadata (a lost response): answered again.
    let t = h.join(join_req(&leader));
    let again = h.join_resp(t).unwrap();
    assert_eq!(again.generation_id, 2);
    assert_eq!(again.members.len(), 2);
    assert_eq!(h.state(), Some(GroupState::CompletingRebalance));

    // Stable, the leader rejoins: rebalance (e.g. topic metadata changed).
    let lt = h.sync(sync_req(&leader, 2, &[]));
    assert_eq!(h.sync_resp(lt).unwrap().error, None);
    let t = h.join(join_req(&leader));
    assert!(h.join_resp(t).is_none());
    assert_eq!(h.state(), Some(GroupState::PreparingRebalance));
}

#[test]
fn new_member_joining_stable_group_rebalances_everyone() {
    let mut h = Harness::new();
    let (ids, leader) = h.stable_group(2);
    let n = h.join(join_req(""));
    assert_eq!(h.state(), Some(GroupState::PreparingRebalance));
    for id in &ids {
        assert_eq!(h.heartbeat(id, 1), Err(GroupError::RebalanceInProgress));
    }
    let ts: Vec<_> = ids.iter().map(|id| h.join(join_req(id))).collect();
    let rn = h.join_resp(n).unwrap();
    assert_eq!(rn.generation_id, 2);
    assert_eq!(rn.leader, leader, "the leader stays when it rejoined");
    for t in ts {
        assert_eq!(h.join_resp(t).unwrap().generation_id, 2);
    }
}
