//! DescribeGroups, ListGroups, DeleteGroups, loading, unloading and the
//! offset-commit checks.

use super::*;

#[test]
fn describe_groups() {
    let mut h = Harness::new();
    let (ids, leader) = h.stable_group(2);
    let d = h.c.describe_groups(&[G.to_string(), "nope".to_string()]);
    assert_eq!(d[0].state, GroupState::Stable);
    assert_eq!(d[0].protocol_type, "consumer");
    assert_eq!(d[0].protocol_data, "range");
    assert_eq!(d[0].members.len(), 2);
    let m = d[0].members.iter().find(|m| m.member_id == ids[0]).unwrap();
    assert_eq!(m.metadata, b"sub-range");
    assert_eq!(m.assignment, b"a-0");
    assert_eq!(m.client_id, "client");
    assert_eq!(m.client_host, "/127.0.0.1");
    assert_eq!((d[1].state, d[1].error), (GroupState::Dead, None));
    // Not Stable: no protocol, no metadata or assignment.
    h.join(join_req(&leader));
    let d = h.c.describe_groups(&[G.to_string()]);
    assert_eq!(d[0].state, GroupState::PreparingRebalance);
    assert_eq!(d[0].protocol_data, "");
    assert!(d[0]
        .members
        .iter()
        .all(|m| m.metadata.is_empty() && m.assignment.is_empty()));
    assert_eq!(GroupState::PreparingRebalance.name(), "PreparingRebalance");
}

#[test]
fn list_groups_with_state_filter() {
    let mut h = Harness::new();
    h.stable_group(1);
    assert!(h.c.ensure_simple_group(0, "simple"));
    assert!(!h.c.ensure_simple_group(0, "simple"));
    let all = h.c.list_groups(&[]).unwrap();
    assert_eq!(all.len(), 2);
    let stable = h.c.list_groups(&["STABLE".to_string()]).unwrap();
    assert_eq!(stable.len(), 1);
    assert_eq!(stable[0].group_id, G);
    assert_eq!(stable[0].protocol_type, "consumer");
    let empty =
        h.c.list_groups(&["empty".to_string(), "Dead".to_string()])
            .unwrap();
    assert_eq!(empty.len(), 1);
    assert_eq!(empty[0].group_id, "simple");
    assert_eq!(empty[0].protocol_type, "");
    assert_eq!(
        GroupState::parse("completingrebalance"),
        Some(GroupState::CompletingRebalance)
    );
    assert_eq!(GroupState::parse("bogus"), None);
}

#[test]
fn delete_groups() {
    let mut h = Harness::new();
    let (ids, _) = h.stable_group(1);
    h.c.ensure_simple_group(0, "simple");
    let (res, fx) = h.c.delete_groups(
        h.now,
        &[
            G.to_string(),
            "simple".to_string(),
            "nope".to_string(),
            String::new(),
        ],
    );
    assert_eq!(res[0].1, Some(GroupError::NonEmptyGroup));
    assert_eq!(res[1].1, None);
    assert_eq!(res[2].1, Some(GroupError::GroupIdNotFound));
    assert_eq!(res[3].1, Some(GroupError::InvalidGroupId));
    assert_eq!(
        fx.records,
        vec![GroupRecord::Tombstone {
            group_id: "simple".to_string()
        }]
    );
    assert_eq!(h.c.group_state("simple"), None);
    h.leave(vec![leaving(&ids[0], None)]);
    let (res, fx) = h.c.delete_groups(h.now, &[G.to_string()]);
    assert_eq!(res[0].1, None);
    assert_eq!(fx.records.len(), 1);
    assert_eq!(h.state(), None);
    // The group can be created again from scratch.
    let t = h.join(join_req(""));
    assert_eq!(h.await_join(t, 60_000).generation_id, 1);
}

#[test]
fn loading_refuses_requests_then_replays_groups() {
    let mut h = Harness::new();
    let (ids, _) = h.stable_group(2);
    let persisted = h.records.clone();

    let mut c = GroupCoordinator::new(GroupConfig::default());
    c.begin_load();
    assert!(c.is_loading());
    let fx = c.join_group(0, RequestToken(1), &join_req(""));
    match &fx.responses[0].1 {
        GroupResponse::Join(r) => assert_eq!(r.error, Some(GroupError::CoordinatorLoadInProgress)),
        other => panic!("{other:?}"),
    }
    let fx = c.sync_group(0, RequestToken(2), &sync_req(&ids[0], 1, &[]));
    assert_eq!(
        fx.responses[0].1,
        GroupResponse::Sync(SyncGroupResponse::error(
            GroupError::CoordinatorLoadInProgress
        ))
    );
    assert_eq!(
        c.heartbeat(0, &hb(&ids[0], 1)),
        Ok(()),
        "blind NONE while loading"
    );
    assert_eq!(
        c.list_groups(&[]),
        Err(GroupError::CoordinatorLoadInProgress)
    );
    assert_eq!(
        c.describe_groups(&[G.to_string()])[0].error,
        Some(GroupError::CoordinatorLoadInProgress)
    );
    assert_eq!(c.next_deadline(), None);
    for r in &persisted {
        c.replay(r);
    }
    c.replay(&GroupRecord::Metadata(GroupMetadataSnapshot {
        group_id: "gone".to_string(),
        ..Default::default()
    }));
    c.replay(&GroupRecord::Tombstone {
        group_id: "gone".to_string(),
    });
    let fx = c.complete_load(100_000);
    assert!(fx.is_empty());
    assert_eq!(c.group_state(G), Some(GroupState::Stable));
    assert_eq!(c.group_state("gone"), None);
    assert_eq!(c.generation(G), Some(1));
    assert_eq!(c.next_deadline(), Some(100_000 + i64::from(SESSION)));
    // Members carry on: heartbeat and re-sync get their assignment.
    assert_eq!(c.heartbeat(101_000, &hb(&ids[0], 1)), Ok(()));
    let fx = c.sync_group(101_000, RequestToken(3), &sync_req(&ids[1], 1, &[]));
    match &fx.responses[0].1 {
        GroupResponse::Sync(r) => assert_eq!(r.assignment, b"a-1"),
        other => panic!("{other:?}"),
    }
    // A member that does not heartbeat expires after its session.
    let fx = c.tick(110_000);
    assert!(fx.is_empty());
    assert_eq!(c.group_state(G), Some(GroupState::PreparingRebalance));
    assert_eq!(
        c.heartbeat(110_000, &hb(&ids[0], 1)),
        Err(GroupError::RebalanceInProgress)
    );
}

#[test]
fn loaded_group_over_max_size_rebalances() {
    let mut h = Harness::new();
    h.stable_group(3);
    let persisted = h.records.clone();
    let mut c = GroupCoordinator::new(GroupConfig {
        max_size: 2,
        ..GroupConfig::default()
    });
    c.begin_load();
    for r in &persisted {
        c.replay(r);
    }
    c.complete_load(0);
    assert_eq!(c.group_state(G), Some(GroupState::PreparingRebalance));
}

#[test]
fn unload_answers_parked_requests_with_not_coordinator() {
    let mut h = Harness::new();
    let t = h.join(join_req(""));
    let fx = h.c.unload(h.now);
    h.absorb(fx);
    assert_eq!(
        h.join_resp(t).unwrap().error,
        Some(GroupError::NotCoordinator)
    );
    assert_eq!(h.state(), None);
}

#[test]
fn offset_commit_checks() {
    let mut h = Harness::new();
    // Simple consumers (assign() + commit) create an Empty group.
    assert_eq!(
        h.c.validate_offset_commit(0, "simple", "", None, -1, 9),
        Ok(())
    );
    assert_eq!(h.c.group_state("simple"), Some(GroupState::Empty));
    assert_eq!(
        h.c.validate_offset_commit(0, "simple", "", None, -1, 9),
        Ok(())
    );
    assert_eq!(
        h.c.validate_offset_commit(0, "missing", "m", None, 1, 9),
        Err(GroupError::GroupIdNotFound)
    );
    assert_eq!(
        h.c.validate_offset_commit(0, "missing", "m", None, 1, 8),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(
        h.c.validate_offset_commit(0, "", "", None, -1, 9),
        Err(GroupError::InvalidGroupId)
    );
    // A JoinGroup on the simple group's id works: it is an ordinary Empty
    // group.
    let (ids, leader) = h.stable_group(2);
    assert_eq!(
        h.c.validate_offset_commit(h.now, G, &ids[0], None, 1, 9),
        Ok(())
    );
    assert_eq!(
        h.c.validate_offset_commit(h.now, G, &ids[0], None, 0, 9),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(
        h.c.validate_offset_commit(h.now, G, "ghost", None, 1, 9),
        Err(GroupError::UnknownMemberId)
    );
    assert_eq!(
        h.c.validate_offset_commit(h.now, G, "", None, -1, 9),
        Err(GroupError::UnknownMemberId),
        "generation -1 only for Empty groups"
    );
    // CompletingRebalance: REBALANCE_IN_PROGRESS.
    let follower = ids.iter().find(|id| **id != leader).unwrap().clone();
    let lt = h.join(join_req(&leader));
    let ft = h.join(join_req(&follower));
    assert!(h.join_resp(lt).is_some() && h.join_resp(ft).is_some());
    assert_eq!(
        h.c.validate_offset_commit(h.now, G, &follower, None, 2, 9),
        Err(GroupError::RebalanceInProgress)
    );
}

/// Kafka's `validateTransactionalOffsetCommit`: TxnOffsetCommit v0-v2 carry
/// no member (generation -1), which is accepted whatever the group's
/// state; members are checked as for OffsetCommit, but a rebalance does
/// not refuse the commit; a missing group with a generation is
/// ILLEGAL_GENERATION at every version.
#[test]
fn txn_offset_commit_checks() {
    let mut h = Harness::new();
    assert_eq!(
        h.c.validate_txn_offset_commit(0, "simple", "", None, -1),
        Ok(())
    );
    assert_eq!(h.c.group_state("simple"), Some(GroupState::Empty));
    assert_eq!(
        h.c.validate_txn_offset_commit(0, "missing", "m", None, 1),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(
        h.c.validate_txn_offset_commit(0, "", "", None, -1),
        Err(GroupError::InvalidGroupId)
    );
    let (ids, leader) = h.stable_group(2);
    assert_eq!(
        h.c.validate_txn_offset_commit(h.now, G, "", None, -1),
        Ok(())
    );
    assert_eq!(
        h.c.validate_txn_offset_commit(h.now, G, &ids[0], None, 1),
        Ok(())
    );
    assert_eq!(
        h.c.validate_txn_offset_commit(h.now, G, &ids[0], None, 0),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(
        h.c.validate_txn_offset_commit(h.now, G, "ghost", None, 1),
        Err(GroupError::UnknownMemberId)
    );
    // CompletingRebalance: accepted at the new generation.
    let follower = ids.iter().find(|id| **id != leader).unwrap().clone();
    let lt = h.join(join_req(&leader));
    let ft = h.join(join_req(&follower));
    assert!(h.join_resp(lt).is_some() && h.join_resp(ft).is_some());
    assert_eq!(h.c.group_state(G), Some(GroupState::CompletingRebalance));
    assert_eq!(
        h.c.validate_txn_offset_commit(h.now, G, &follower, None, 2),
        Ok(())
    );
    assert_eq!(
        h.c.validate_txn_offset_commit(h.now, G, "", None, -1),
        Ok(())
    );
}
