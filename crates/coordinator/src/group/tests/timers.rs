//! Timers: session expiry, rebalance timeout, new-member join timeout,
//! pending-sync timeout, deadlines.

use super::*;

#[test]
fn session_expiry_removes_the_member_and_rebalances() {
    let mut h = Harness::new();
    let (ids, leader) = h.stable_group(2);
    let follower = ids.iter().find(|id| **id != leader).unwrap().clone();
    // Only the leader heartbeats.
    for _ in 0..3 {
        h.advance(4_000);
        if h.state() == Some(GroupState::Stable) {
            assert_eq!(h.heartbeat(&leader, 1), Ok(()));
        }
    }
    // t=12000 > session 10000: the follower expired at t=10000.
    assert_eq!(h.state(), Some(GroupState::PreparingRebalance));
    assert_eq!(h.heartbeat(&follower, 1), Err(GroupError::UnknownMemberId));
    assert_eq!(
        h.heartbeat(&leader, 1),
        Err(GroupError::RebalanceInProgress)
    );
    let t = h.join(join_req(&leader));
    let r = h.join_resp(t).unwrap();
    assert_eq!((r.generation_id, r.members.len()), (2, 1));
}

#[test]
fn heartbeats_keep_a_member_alive_indefinitely() {
    let mut h = Harness::new();
    let (ids, _) = h.stable_group(1);
    for _ in 0..10 {
        h.advance(9_000);
        assert_eq!(h.heartbeat(&ids[0], 1), Ok(()));
    }
    assert_eq!(h.state(), Some(GroupState::Stable));
}

#[test]
fn rebalance_timeout_kicks_members_that_did_not_rejoin() {
    let mut h = Harness::new();
    let (ids, leader) = h.stable_group(2);
    let follower = ids.iter().find(|id| **id != leader).unwrap().clone();
    let lt = h.join(join_req(&leader));
    // The follower keeps heartbeating but never rejoins.
    let mut elapsed = 0;
    while h.join_resp(lt).is_none() {
        h.advance(5_000);
        elapsed += 5_000;
        let _ = h.heartbeat(&follower, 1);
        assert!(
            elapsed <= i64::from(REBALANCE),
            "join not completed by the rebalance timeout"
        );
    }
    assert_eq!(elapsed, i64::from(REBALANCE));
    assert_eq!(h.generation(), 2);
    assert_eq!(h.heartbeat(&follower, 1), Err(GroupError::UnknownMemberId));
    let md = h.c.snapshot(G).unwrap();
    assert_eq!(md.members.len(), 1);
}

#[test]
fn a_parked_join_keeps_an_existing_member_alive() {
    let mut h = Harness::new();
    let (ids, leader) = h.stable_group(2);
    let follower = ids.iter().find(|id| **id != leader).unwrap().clone();
    let lt = h.join(join_req(&leader));
    // The leader's session (10s) passes while it waits for the follower
    // (rebalance timeout 30s); it must not be expired.
    for _ in 0..4 {
        h.advance(5_000);
        assert_eq!(
            h.heartbeat(&follower, 1),
            Err(GroupError::RebalanceInProgress)
        );
    }
    assert!(h.join_resp(lt).is_none());
    let ft = h.join(join_req(&follower));
    let r = h.join_resp(lt).unwrap();
    assert_eq!(r.members.len(), 2);
    assert!(h.join_resp(ft).is_some());
}

#[test]
fn new_member_waiting_too_long_is_dropped() {
    let mut h = Harness::with(GroupConfig {
        new_member_join_timeout_ms: 20_000,
        ..GroupConfig::default()
    });
    let (ids, leader) = h.stable_group(2);
    let follower = ids.iter().find(|id| **id != leader).unwrap().clone();
    let n = h.join(join_req(""));
    // The others heartbeat but do not rejoin yet; the new member gives up
    // after 20s.
    for _ in 0..4 {
        assert!(h.join_resp(n).is_none());
        h.advance(5_000);
        let _ = h.heartbeat(&leader, 1);
        let _ = h.heartbeat(&follower, 1);
    }
    let r = h.join_resp(n).unwrap();
    assert_eq!(r.error, Some(GroupError::UnknownMemberId));
    assert_eq!(h.state(), Some(GroupState::PreparingRebalance));
    let t1 = h.join(join_req(&leader));
    let t2 = h.join(join_req(&follower));
    assert_eq!(h.join_resp(t1).unwrap().members.len(), 2);
    assert!(h.join_resp(t2).is_some());
}

#[test]
fn members_that_never_sync_are_removed_after_the_rebalance_timeout() {
    let mut h = Harness::new();
    let a = h.join(join_req(""));
    let b = h.join(join_req(""));
    let ra = h.await_join(a, 60_000);
    let rb = h.join_resp(b).unwrap();
    let joined_at = h.now;
    let lt = h.sync(sync_req(&ra.member_id, 1, &[(&ra.member_id, b"x")]));
    assert!(h.sync_resp(lt).is_some());
    assert_eq!(h.state(), Some(GroupState::Stable));
    // b heartbeats but never syncs.
    while h.now < joined_at + i64::from(REBALANCE) - 5_000 {
        h.advance(5_000);
        let _ = h.heartbeat(&rb.member_id, 1);
        let _ = h.heartbeat(&ra.member_id, 1);
    }
    assert_eq!(h.state(), Some(GroupState::Stable));
    h.advance(joined_at + i64::from(REBALANCE) - h.now);
    assert_eq!(h.state(), Some(GroupState::PreparingRebalance));
    assert_eq!(
        h.heartbeat(&rb.member_id, 1),
        Err(GroupError::UnknownMemberId)
    );
}

#[test]
fn syncing_everyone_cancels_the_sync_timer() {
    let mut h = Harness::new();
    let (ids, _) = h.stable_group(2);
    for _ in 0..8 {
        h.advance(5_000);
        for id in &ids {
            assert_eq!(h.heartbeat(id, 1), Ok(()));
        }
    }
    assert_eq!(h.state(), Some(GroupState::Stable));
    assert_eq!(h.generation(), 1);
}

#[test]
fn next_deadline_tracks_the_earliest_timer() {
    let mut h = Harness::new();
    assert_eq!(h.c.next_deadline(), None);
    h.join(join_req(""));
    assert_eq!(h.c.next_deadline(), Some(3_000), "initial delay");
    let (ids, _) = {
        h.advance(3_000);
        let t = h.responses.keys().next().copied().unwrap();
        let r = h.join_resp(t).unwrap();
        (vec![r.member_id], ())
    };
    // Session and sync deadlines of generation 1.
    assert_eq!(h.c.next_deadline(), Some(3_000 + i64::from(SESSION)));
    let t = h.sync(sync_req(&ids[0], 1, &[]));
    assert!(h.sync_resp(t).is_some());
    h.advance(1_000);
    h.heartbeat(&ids[0], 1).unwrap();
    assert_eq!(h.c.next_deadline(), Some(4_000 + i64::from(SESSION)));
    // A tick before any deadline does nothing.
    let fx = h.c.tick(5_000);
    assert!(fx.is_empty());
}

/// A member with `rebalance_timeout_ms = 0`: its sync deadline is the
/// instant the join completes. As in Kafka, where the expiry is a later
/// event, the JoinGroup response is released first and a SyncGroup at that
/// same instant is served; only when the clock has moved on does the
/// expiry remove a member that did not sync.
#[test]
fn zero_rebalance_timeout_lets_a_prompt_sync_through() {
    let zero = || JoinGroupRequest {
        rebalance_timeout_ms: 0,
        ..join_req("")
    };
    let mut h = Harness::with(GroupConfig {
        initial_rebalance_delay_ms: 0,
        ..GroupConfig::default()
    });
    let t = h.join(zero());
    // The join timer (initial delay 0) fires on the next tick; the sync
    // timer it arms (deadline = that tick's deadline + 0) does not fire in
    // the same tick.
    h.advance(1);
    let r = h.join_resp(t).expect("join answered");
    assert_eq!((r.error, r.generation_id), (None, 1));
    assert_eq!(h.state(), Some(GroupState::CompletingRebalance));
    let fx = h.c.tick(h.now);
    assert!(fx.is_empty(), "no expiry at the instant the join completed");
    let st = h.sync(sync_req(&r.member_id, 1, &[(&r.member_id, b"a-0")]));
    let s = h.sync_resp(st).expect("sync answered");
    assert_eq!((s.error, s.assignment), (None, b"a-0".to_vec()));
    assert_eq!(h.state(), Some(GroupState::Stable));

    // A rejoin completes the join inside the JoinGroup call: the same.
    let t = h.join(JoinGroupRequest {
        member_id: r.member_id.clone(),
        ..zero()
    });
    let r2 = h.join_resp(t).expect("rejoin answered at once");
    assert_eq!(r2.generation_id, 2);
    assert!(h.c.tick(h.now).is_empty());
    let st = h.sync(sync_req(&r.member_id, 2, &[(&r.member_id, b"a-1")]));
    assert_eq!(h.sync_resp(st).expect("sync").error, None);

    // A member that does not sync is removed once the clock moves on.
    let t = h.join(JoinGroupRequest {
        member_id: r.member_id.clone(),
        ..zero()
    });
    assert_eq!(h.join_resp(t).expect("rejoin").generation_id, 3);
    h.advance(1);
    assert_eq!(
        h.heartbeat(&r.member_id, 3),
        Err(GroupError::UnknownMemberId)
    );
}

#[test]
fn min_sync_delay_gives_a_zero_rebalance_timeout_a_window() {
    let zero = || JoinGroupRequest {
        rebalance_timeout_ms: 0,
        ..join_req("")
    };
    let mut h = Harness::with(GroupConfig {
        initial_rebalance_delay_ms: 0,
        min_sync_delay_ms: 100,
        ..GroupConfig::default()
    });
    let t = h.join(zero());
    h.advance(1);
    let r = h.join_resp(t).expect("join answered");
    // The window counts from the join's completion (its timer's deadline,
    // one tick before this answer): 98 ms later the member may still sync...
    h.advance(98);
    let st = h.sync(sync_req(&r.member_id, 1, &[(&r.member_id, b"a-0")]));
    assert_eq!(h.sync_resp(st).expect("sync").error, None);
    // ...but one that never syncs is removed once the window is over.
    let t = h.join(JoinGroupRequest {
        member_id: r.member_id.clone(),
        ..zero()
    });
    assert_eq!(h.join_resp(t).expect("rejoin").generation_id, 2);
    h.advance(99);
    assert_eq!(h.heartbeat(&r.member_id, 2), Ok(()));
    h.advance(2);
    assert_eq!(
        h.heartbeat(&r.member_id, 2),
        Err(GroupError::UnknownMemberId)
    );
}
