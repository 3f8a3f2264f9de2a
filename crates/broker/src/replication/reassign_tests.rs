//! Partition reassignments across three in-process nodes:
//! AlterPartitionReassignments and ListPartitionReassignments through the
//! request path of any node, the new replica's log created and filled
//! from the leader, completion once it is in sync (the old replica's log
//! deleted by the committed change), cancellation, Kafka's errors, and
//! logs only on the replicas of a partition.

use std::sync::Arc;

use proto_kafka::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use proto_kafka::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use proto_kafka::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;
use sluice_storage::TopicPartition;

use super::cluster_tests::{produce, raw, state_in};
use super::fetcher::PAUSED;
use crate::broker::Broker;
use crate::handlers::test_support::call;
use crate::test_quorum::{cluster, eventually, node, one_cluster_at_a_time, Node};

/// AlterPartitionReassignments v0 of `r-<p>` on `b`: each partition's
/// (index, error code).
pub(crate) async fn alter(
    b: &Arc<Broker>,
    topic: &str,
    moves: &[(i32, Option<&[i32]>)],
) -> Vec<(i32, i16)> {
    let mut t = ReassignableTopic::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partitions = moves
        .iter()
        .map(|(p, replicas)| {
            let mut rp = ReassignablePartition::default();
            rp.partition_index = *p;
            rp.replicas = replicas.map(|r| r.iter().map(|&id| BrokerId(id)).collect());
            rp
        })
        .collect();
    let mut req = AlterPartitionReassignmentsRequest::default();
    req.timeout_ms = 10_000;
    req.topics = vec![t];
    let r: AlterPartitionReassignmentsResponse =
        call(b, ApiKey::AlterPartitionReassignments, 0, &req)
            .await
            .expect("response");
    assert_eq!(r.error_code, 0);
    r.responses
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (p.partition_index, p.error_code))
        })
        .collect()
}

/// ListPartitionReassignments v0 on `b` (all topics, or `r-0`):
/// (topic, partition, replicas, adding, removing).
pub(crate) async fn list(
    b: &Arc<Broker>,
    only_r0: bool,
) -> Vec<(String, i32, Vec<i32>, Vec<i32>, Vec<i32>)> {
    let mut req = ListPartitionReassignmentsRequest::default();
    req.timeout_ms = 10_000;
    if only_r0 {
        let mut t = ListPartitionReassignmentsTopics::default();
        t.name = TopicName(StrBytes::from_static_str("r"));
        t.partition_indexes = vec![0, 7];
        req.topics = Some(vec![t]);
    }
    let r: ListPartitionReassignmentsResponse =
        call(b, ApiKey::ListPartitionReassignments, 0, &req)
            .await
            .expect("response");
    let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<_>>();
    r.topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    t.name.0.to_string(),
                    p.partition_index,
                    ids(&p.replicas),
                    ids(&p.adding_replicas),
                    ids(&p.removing_replicas),
                )
            })
        })
        .collect()
}

fn pause(nodes: &[Option<Node>], id: i32, paused: bool) {
    let port = node(nodes, id).advertised.port;
    let mut set = PAUSED.lock().unwrap_or_else(|p| p.into_inner());
    if paused {
        set.insert(port);
    } else {
        set.remove(&port);
    }
}

fn has_log(b: &Broker) -> bool {
    b.logs.get(&TopicPartition::new("r", 0)).is_some()
}

/// A replication-factor-1 partition with data moves from its broker to
/// another one and back out to a third, with every step checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partition_moves_to_another_broker_with_its_data() {
    let _cluster = one_cluster_at_a_time().await;
    let (nodes, _dirs) = cluster(1500).await;
    let b = node;
    let creator = b(&nodes, 2);
    let topic = tokio::task::spawn_blocking(move || creator.create_topic("r", 1, 1, &[], false))
        .await
        .expect("task")
        .expect("topic");
    let from = topic.partitions[&0].leader;
    let to = from % 3 + 1;
    let other = to % 3 + 1;
    let old = b(&nodes, from);
    eventually("the leader leads", || old.partition("r", 0).is_some()).await;
    // Only the replica holds a log.
    for id in 1..=3 {
        let bb = b(&nodes, id);
        eventually("every node knows the topic", || {
            bb.image().topic("r").is_some()
        })
        .await;
        assert_eq!(has_log(&bb), id == from, "log of r-0 on node {id}");
    }
    let mut end = 0;
    for i in 0..30 {
        end = produce(&old, &format!("v{i}")).await.expect("acks=all");
    }
    let data = raw(&old.logs.get(&TopicPartition::new("r", 0)).expect("log"));

    // The new replica does not fetch yet: the reassignment stays in
    // progress, and every node lists it.
    pause(&nodes, to, true);
    let asked = b(&nodes, other);
    assert_eq!(alter(&asked, "r", &[(0, Some(&[to]))]).await, vec![(0, 0)]);
    let expected = ("r".to_string(), 0, vec![to, from], vec![to], vec![from]);
    for id in 1..=3 {
        let bb = b(&nodes, id);
        eventually("the reassignment reaches every node", || {
            state_in(&bb).is_reassigning()
        })
        .await;
        assert_eq!(list(&bb, false).await, vec![expected.clone()]);
        assert_eq!(list(&bb, true).await, vec![expected.clone()]);
    }
    let new = b(&nodes, to);
    eventually("the new replica has its log", || has_log(&new)).await;
    assert!(!has_log(&b(&nodes, other)), "no log where no replica is");
    assert!(has_log(&old), "the old replica keeps its log until the end");
    // Asking again for the same target changes nothing.
    assert_eq!(alter(&asked, "r", &[(0, Some(&[to]))]).await, vec![(0, 0)]);
    assert_eq!(state_in(&asked).replicas, vec![to, from]);

    // It fetches, joins the ISR, and that completes the move.
    pause(&nodes, to, false);
    for id in 1..=3 {
        let bb = b(&nodes, id);
        eventually("the reassignment completes", || {
            let s = state_in(&bb);
            s.replicas == vec![to] && s.isr == vec![to] && s.leader == to && !s.is_reassigning()
        })
        .await;
        assert!(list(&bb, false).await.is_empty());
    }
    eventually("the new replica leads", || new.partition("r", 0).is_some()).await;
    eventually("the old replica's log is deleted", || !has_log(&old)).await;
    let moved = new.logs.get(&TopicPartition::new("r", 0)).expect("log");
    assert_eq!(moved.log_end_offset(), end);
    assert_eq!(raw(&moved), data, "the same bytes at the same offsets");
    let end2 = produce(&new, "after")
        .await
        .expect("acks=all on the new leader");
    assert_eq!(end2, end + 1);

    // Cancelled: the replica being added leaves, and its log goes.
    pause(&nodes, other, true);
    assert_eq!(
        alter(&asked, "r", &[(0, Some(&[other]))]).await,
        vec![(0, 0)]
    );
    let third = b(&nodes, other);
    eventually("the added replica has its log", || has_log(&third)).await;
    assert_eq!(alter(&asked, "r", &[(0, None)]).await, vec![(0, 0)]);
    for id in 1..=3 {
        let bb = b(&nodes, id);
        eventually("the cancellation reverts", || {
            let s = state_in(&bb);
            s.replicas == vec![to] && !s.is_reassigning()
        })
        .await;
    }
    eventually("the cancelled replica's log is deleted", || {
        !has_log(&third)
    })
    .await;
    assert!(has_log(&new));
    pause(&nodes, other, false);

    // Kafka's errors.
    let no_reassignment = ResponseError::NoReassignmentInProgress.code();
    let invalid = ResponseError::InvalidReplicaAssignment.code();
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    assert_eq!(
        alter(
            &asked,
            "r",
            &[
                (0, None),
                (0, Some(&[to, to])),
                (0, Some(&[to, 9])),
                (0, Some(&[])),
                (4, Some(&[to])),
            ]
        )
        .await,
        vec![
            (0, no_reassignment),
            (0, invalid),
            (0, invalid),
            (0, invalid),
            (4, unknown)
        ]
    );
    assert_eq!(
        alter(&asked, "nope", &[(0, Some(&[to]))]).await,
        vec![(0, unknown)]
    );
    assert_eq!(state_in(&asked).replicas, vec![to], "nothing changed");
    assert_eq!(
        alter(&asked, "__cluster_metadata", &[(0, Some(&[to]))]).await,
        vec![(0, unknown)]
    );
    for n in nodes.into_iter().flatten() {
        n.stop().await;
    }
}
