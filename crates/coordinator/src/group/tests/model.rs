//! Random operation sequences: nothing panics, every parked request is
//! answered at most once, and the group's invariants hold after every
//! step.

use proptest::prelude::*;

use super::*;

#[derive(Debug, Clone)]
enum Op {
    JoinNew {
        require_id: bool,
        instance: Option<u8>,
    },
    Rejoin {
        who: u8,
        changed: bool,
    },
    Sync {
        who: u8,
        generation_offset: i8,
    },
    Heartbeat {
        who: u8,
    },
    Leave {
        who: u8,
    },
    LeaveInstance {
        instance: u8,
    },
    Advance {
        ms: u16,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (any::<bool>(), proptest::option::of(0u8..3)).prop_map(|(require_id, instance)| {
            Op::JoinNew {
                require_id,
                instance,
            }
        }),
        (any::<u8>(), any::<bool>()).prop_map(|(who, changed)| Op::Rejoin { who, changed }),
        (any::<u8>(), -1i8..2).prop_map(|(who, generation_offset)| Op::Sync {
            who,
            generation_offset
        }),
        any::<u8>().prop_map(|who| Op::Heartbeat { who }),
        any::<u8>().prop_map(|who| Op::Leave { who }),
        (0u8..3).prop_map(|instance| Op::LeaveInstance { instance }),
        (0u16..20_000).prop_map(|ms| Op::Advance { ms }),
    ]
}

fn check_invariants(c: &GroupCoordinator) {
    let Some(g) = c.groups.get(G) else {
        return;
    };
    if let Some(leader) = &g.leader {
        if !g.members.is_empty() {
            assert!(
                g.members.contains_key(leader),
                "leader {leader} is not a member"
            );
        }
    }
    for (instance, id) in &g.static_members {
        let m = g
            .members
            .get(id)
            .expect("static mapping to a missing member");
        assert_eq!(m.group_instance_id.as_deref(), Some(instance.as_str()));
    }
    for id in &g.pending_sync {
        assert!(
            g.members.contains_key(id),
            "pending sync of a missing member"
        );
    }
    match g.state {
        GroupState::Empty => assert!(g.members.is_empty()),
        GroupState::Stable | GroupState::CompletingRebalance => {
            assert!(!g.members.is_empty());
            assert!(g.members.values().all(|m| m.awaiting_join.is_none()));
            assert!(g.protocol_name.is_some());
        }
        GroupState::PreparingRebalance => {
            assert!(g.members.values().all(|m| m.awaiting_sync.is_none()));
            assert!(g.join_timer.is_some());
        }
        GroupState::Dead => {}
    }
}

fn known_ids(h: &Harness) -> Vec<(String, Option<String>)> {
    h.c.groups
        .get(G)
        .map(|g| {
            g.members
                .values()
                .map(|m| (m.member_id.clone(), m.group_instance_id.clone()))
                .collect()
        })
        .unwrap_or_default()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_sequences_keep_invariants(ops in proptest::collection::vec(op(), 1..60)) {
        let mut h = Harness::new();
        for op in ops {
            let ids = known_ids(&h);
            let pick = |who: u8| ids.get(usize::from(who) % ids.len().max(1)).cloned();
            let generation = h.c.generation(G).unwrap_or(0);
            match op {
                Op::JoinNew { require_id, instance } => {
                    let mut req = match instance {
                        Some(i) => static_req("", &format!("i{i}")),
                        None => join_req(""),
                    };
                    req.require_known_member_id = require_id;
                    let t = h.join(req.clone());
                    if let Some(r) = h.join_resp(t) {
                        if r.error == Some(GroupError::MemberIdRequired) {
                            req.member_id = r.member_id;
                            h.join(req);
                        }
                    }
                }
                Op::Rejoin { who, changed } => {
                    if let Some((id, instance)) = pick(who) {
                        let mut req = join_req(&id);
                        req.group_instance_id = instance;
                        if changed {
                            req.protocols[0].metadata = vec![who];
                        }
                        h.join(req);
                    }
                }
                Op::Sync { who, generation_offset } => {
                    if let Some((id, instance)) = pick(who) {
                        let mut req = sync_req(&id, generation + i32::from(generation_offset), &[]);
                        req.group_instance_id = instance;
                        req.assignments = ids.iter().map(|(m, _)| (m.clone(), m.as_bytes().to_vec())).collect();
                        h.sync(req);
                    }
                }
                Op::Heartbeat { who } => {
                    if let Some((id, instance)) = pick(who) {
                        let mut req = hb(&id, generation);
                        req.group_instance_id = instance;
                        let _ = h.c.heartbeat(h.now, &req);
                    }
                }
                Op::Leave { who } => {
                    if let Some((id, _)) = pick(who) {
                        h.leave(vec![leaving(&id, None)]);
                    }
                }
                Op::LeaveInstance { instance } => {
                    h.leave(vec![leaving("", Some(&format!("i{instance}")))]);
                }
                Op::Advance { ms } => h.advance(i64::from(ms)),
            }
            check_invariants(&h.c);
            // After a tick, no timer is left behind the clock.
            let fx = h.c.tick(h.now);
            h.absorb(fx);
            prop_assert!(h.c.next_deadline().is_none_or(|n| n > h.now));
        }
    }
}
