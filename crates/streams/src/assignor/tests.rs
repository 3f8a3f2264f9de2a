//! Tests of the streams assignor through the `PartitionAssignor` interface,
//! with encoded user data as the group protocol carries it.

use super::*;

/// word count: sub-topology 0 reads the input and writes the repartition
/// topic; sub-topology 1 reads it and counts (stateful).
fn word_count(input: &str) -> Arc<TopologyMetadata> {
    Arc::new(TopologyMetadata {
        subtopologies: vec![
            SubtopologyMetadata {
                id: 0,
                source_topics: vec![input.into()],
                repartition_source_topics: vec![],
                state_stores: vec![],
                changelog_stores: vec![],
                copartition_groups: vec![],
            },
            SubtopologyMetadata {
                id: 1,
                source_topics: vec![],
                repartition_source_topics: vec!["app-counts-repartition".into()],
                state_stores: vec!["counts".into()],
                changelog_stores: vec!["counts".into()],
                copartition_groups: vec![],
            },
        ],
        repartition_topics: vec![RepartitionTopicMetadata {
            name: "app-counts-repartition".into(),
            partitions: None,
            written_by: vec![0],
        }],
    })
}

/// One stateful sub-topology over `input`.
fn single(input: &str) -> Arc<TopologyMetadata> {
    Arc::new(TopologyMetadata {
        subtopologies: vec![SubtopologyMetadata {
            id: 0,
            source_topics: vec![input.into()],
            repartition_source_topics: vec![],
            state_stores: vec!["store".into()],
            changelog_stores: vec!["store".into()],
            copartition_groups: vec![],
        }],
        repartition_topics: vec![],
    })
}

/// A simulated instance: one assignor per thread.
struct Instance {
    threads: Vec<(String, StreamsPartitionAssignor)>,
}

impl Instance {
    fn new(name: &str, topology: &Arc<TopologyMetadata>, threads: usize) -> Self {
        let pid = Uuid::new_v4();
        let n = Arc::new(AtomicI32::new(threads as i32));
        Self {
            threads: (0..threads)
                .map(|i| {
                    (
                        format!("{name}-StreamThread-{}-consumer", i + 1),
                        StreamsPartitionAssignor::new(topology.clone(), pid, n.clone(), None),
                    )
                })
                .collect(),
        }
    }
}

/// One rebalance: every thread subscribes, the first thread's assignor
/// leads, every thread gets `on_assignment` and adopts its active tasks.
/// Returns member id -> active tasks.
fn rebalance(
    instances: &[&Instance],
    counts: &BTreeMap<String, i32>,
    generation: i32,
) -> BTreeMap<String, Vec<TaskId>> {
    let topics: Vec<String> = counts.keys().cloned().collect();
    let mut members = BTreeMap::new();
    for inst in instances {
        for (id, a) in &inst.threads {
            let sub = Subscription {
                user_data: a.subscription_user_data(&topics, &[], generation - 1),
                ..Subscription::new(topics.clone())
            };
            members.insert(id.clone(), sub);
        }
    }
    let leader = &instances[0].threads[0].1;
    let out = leader.assign(counts, &members).expect("assign");
    assert_eq!(out.len(), members.len());
    let mut result = BTreeMap::new();
    for inst in instances {
        for (id, a) in &inst.threads {
            a.on_assignment(&out[id], generation);
            let state = a.state();
            let mut st = state.lock().expect("lock");
            let got = st.assignment.clone().expect("assignment");
            assert_eq!(got.generation, generation);
            let tasks: Vec<TaskId> = got.active_tasks().expect("tasks").into_keys().collect();
            st.active_tasks.clone_from(&tasks);
            result.insert(id.clone(), tasks);
        }
    }
    result
}

fn counts(pairs: &[(&str, i32)]) -> BTreeMap<String, i32> {
    pairs.iter().map(|(t, n)| (t.to_string(), *n)).collect()
}

fn all_tasks(out: &BTreeMap<String, Vec<TaskId>>) -> Vec<TaskId> {
    let mut v: Vec<TaskId> = out.values().flatten().copied().collect();
    v.sort();
    v
}

#[test]
fn tasks_follow_the_largest_source() {
    let t = TopologyMetadata {
        subtopologies: vec![SubtopologyMetadata {
            id: 0,
            source_topics: vec!["a".into(), "b".into()],
            repartition_source_topics: vec![],
            state_stores: vec![],
            changelog_stores: vec![],
            copartition_groups: vec![],
        }],
        repartition_topics: vec![],
    };
    let tasks = t.tasks(&counts(&[("a", 2), ("b", 3)]));
    assert_eq!(tasks.len(), 3);
    assert_eq!(
        tasks[&TaskId::new(0, 1)],
        vec![TopicPartition::new("a", 1), TopicPartition::new("b", 1)]
    );
    assert_eq!(tasks[&TaskId::new(0, 2)], vec![TopicPartition::new("b", 2)]);
}

#[test]
fn repartition_counts_come_from_the_writers() {
    let t = word_count("input");
    let rc = t
        .repartition_counts(&counts(&[("input", 6)]))
        .expect("counts");
    assert_eq!(rc.get("app-counts-repartition"), Some(&6));
    assert!(t.repartition_counts(&BTreeMap::new()).is_err());
}

#[test]
fn one_instance_then_two_then_one() {
    let topo = single("input");
    let c = counts(&[("input", 6)]);
    let a = Instance::new("a", &topo, 1);
    let b = Instance::new("b", &topo, 1);

    let g1 = rebalance(&[&a], &c, 1);
    assert_eq!(g1["a-StreamThread-1-consumer"].len(), 6);

    let g2 = rebalance(&[&a, &b], &c, 2);
    let (ta, tb) = (
        &g2["a-StreamThread-1-consumer"],
        &g2["b-StreamThread-1-consumer"],
    );
    assert_eq!((ta.len(), tb.len()), (3, 3));
    assert_eq!(all_tasks(&g2).len(), 6);
    // b leads this time: the result must not depend on who leads.
    let g2b = rebalance(&[&b, &a], &c, 3);
    assert_eq!(g2b, g2, "stable across rebalances and leaders");

    let survivor_tasks = tb.clone();
    let g3 = rebalance(&[&b], &c, 4);
    let tb3 = &g3["b-StreamThread-1-consumer"];
    assert_eq!(tb3.len(), 6);
    assert!(survivor_tasks.iter().all(|t| tb3.contains(t)));
}

#[test]
fn threads_share_their_instance_quota() {
    let topo = word_count("input");
    let c = counts(&[("input", 6), ("app-counts-repartition", 6)]);
    let a = Instance::new("a", &topo, 2);
    let b = Instance::new("b", &topo, 1);
    let out = rebalance(&[&a, &b], &c, 1);
    assert_eq!(all_tasks(&out).len(), 12);
    let a_total = out["a-StreamThread-1-consumer"].len() + out["a-StreamThread-2-consumer"].len();
    assert_eq!(a_total, 8, "two threads of three: 2/3 of 12 tasks");
    for tasks in out.values() {
        assert_eq!(tasks.len(), 4);
        // Stateful (sub-topology 1) tasks are spread too.
        assert_eq!(tasks.iter().filter(|t| t.subtopology == 1).count(), 2);
    }
    // Stickiness within the instance: same members, same tasks per thread.
    let again = rebalance(&[&a, &b], &c, 2);
    assert_eq!(again, out);
}

#[test]
fn partitions_and_task_ids_line_up() {
    let topo = word_count("input");
    let c = counts(&[("input", 2), ("app-counts-repartition", 2)]);
    let a = Instance::new("a", &topo, 1);
    let members: BTreeMap<String, Subscription> = a
        .threads
        .iter()
        .map(|(id, s)| {
            (
                id.clone(),
                Subscription {
                    user_data: s.subscription_user_data(&[], &[], -1),
                    ..Subscription::new(["input", "app-counts-repartition"])
                },
            )
        })
        .collect();
    let out = a.threads[0].1.assign(&c, &members).expect("assign");
    let asg = &out["a-StreamThread-1-consumer"];
    let info = AssignmentInfo::decode(asg.user_data.as_deref().expect("user data")).expect("info");
    assert_eq!(info.active_tasks.len(), asg.partitions.len());
    for (tp, t) in asg.partitions.iter().zip(&info.active_tasks) {
        let want = if tp.topic == "input" { 0 } else { 1 };
        assert_eq!((t.subtopology, t.partition), (want, tp.partition));
    }
}

#[test]
fn state_on_disk_attracts_a_task_after_restart() {
    let topo = single("input");
    let c = counts(&[("input", 4)]);
    let a = Instance::new("a", &topo, 1);
    let b = Instance::new("b", &topo, 1);
    // Both restarted (no active tasks); b has state for 0_0 and 0_1, a for 0_2 and 0_3.
    for (inst, tasks) in [(&a, [0, 1]), (&b, [2, 3])] {
        let st = inst.threads[0].1.state();
        let mut st = st.lock().expect("lock");
        for p in tasks {
            st.task_offset_sums.insert(TaskId::new(0, p), 500);
        }
    }
    let out = rebalance(&[&a, &b], &c, 1);
    assert_eq!(
        out["a-StreamThread-1-consumer"],
        vec![TaskId::new(0, 0), TaskId::new(0, 1)]
    );
    assert_eq!(
        out["b-StreamThread-1-consumer"],
        vec![TaskId::new(0, 2), TaskId::new(0, 3)]
    );
}

#[test]
fn undecodable_members_still_get_an_assignment() {
    let topo = single("input");
    let a = Instance::new("a", &topo, 1);
    let mut members = BTreeMap::new();
    members.insert(
        "a-StreamThread-1-consumer".to_string(),
        Subscription {
            user_data: a.threads[0].1.subscription_user_data(&[], &[], -1),
            ..Subscription::new(["input"])
        },
    );
    members.insert(
        "odd".to_string(),
        Subscription {
            user_data: Some(Bytes::from_static(b"junk")),
            ..Subscription::new(["input"])
        },
    );
    let out = a.threads[0]
        .1
        .assign(&counts(&[("input", 4)]), &members)
        .expect("assign");
    assert_eq!(out["odd"].partitions.len(), 2);
    assert_eq!(out["a-StreamThread-1-consumer"].partitions.len(), 2);
}

#[test]
fn a_shutdown_request_reaches_every_member() {
    let topo = single("input");
    let c = counts(&[("input", 4)]);
    let a = Instance::new("a", &topo, 1);
    let b = Instance::new("b", &topo, 2);
    a.threads[0].1.state().lock().expect("lock").error_code = info::SHUTDOWN_REQUESTED;
    let topics = vec!["input".to_string()];
    let members: BTreeMap<String, Subscription> = a
        .threads
        .iter()
        .chain(&b.threads)
        .map(|(id, s)| {
            (
                id.clone(),
                Subscription {
                    user_data: s.subscription_user_data(&topics, &[], -1),
                    ..Subscription::new(topics.clone())
                },
            )
        })
        .collect();
    // b leads: it still tells everybody, itself included, to stop.
    let out = b.threads[0].1.assign(&c, &members).expect("assign");
    assert_eq!(out.len(), 3);
    for asg in out.values() {
        assert!(asg.partitions.is_empty());
        let info = AssignmentInfo::decode(asg.user_data.as_deref().expect("data")).expect("info");
        assert_eq!(info.error_code, info::SHUTDOWN_REQUESTED);
    }
}
