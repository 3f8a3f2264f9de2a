//! Preferred and unclean leader elections across three in-process nodes:
//! ElectLeaders on any node, and the automatic rebalance that gives a
//! failed-over partition back to its preferred replica.

use std::sync::Arc;

use proto_kafka::messages::elect_leaders_request::TopicPartitions;
use proto_kafka::messages::{ApiKey, ElectLeadersRequest, ElectLeadersResponse, TopicName};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;

use super::cluster_tests::{create_r, isr, produce, state_in};
use crate::broker::Broker;
use crate::handlers::test_support::call;
use crate::test_quorum::{cluster_with, eventually, node, one_cluster_at_a_time, start, Node};

/// ElectLeaders v2 on `b`: (partition, error code) per result.
async fn elect(b: &Arc<Broker>, kind: i8, partitions: Option<&[i32]>) -> Vec<(i32, i16)> {
    let mut req = ElectLeadersRequest::default();
    req.election_type = kind;
    req.timeout_ms = 10_000;
    req.topic_partitions = partitions.map(|ps| {
        let mut t = TopicPartitions::default();
        t.topic = TopicName(StrBytes::from_static_str("r"));
        t.partitions = ps.to_vec();
        vec![t]
    });
    let r: ElectLeadersResponse = call(b, ApiKey::ElectLeaders, 2, &req)
        .await
        .expect("response");
    assert_eq!(r.error_code, 0);
    r.replica_election_results
        .iter()
        .filter(|t| t.topic.0.as_str() == "r")
        .flat_map(|t| {
            t.partition_result
                .iter()
                .map(|p| (p.partition_id, p.error_code))
        })
        .collect()
}

/// Stops the preferred leader until another replica leads, then restarts
/// it until it is back in the ISR; returns the running nodes.
async fn fail_over(mut nodes: Vec<Option<Node>>, preferred: i32) -> Vec<Option<Node>> {
    let config = nodes[(preferred - 1) as usize]
        .take()
        .expect("running")
        .stop()
        .await;
    let other = node(&nodes, if preferred == 1 { 2 } else { 1 });
    eventually("another leader", || {
        let s = state_in(&other);
        s.leader >= 0 && s.leader != preferred
    })
    .await;
    nodes[(preferred - 1) as usize] = Some(start(config).await);
    eventually("the preferred replica back in the ISR", || {
        isr(&other).len() == 3
    })
    .await;
    nodes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn elect_leaders_moves_leadership_back_to_the_preferred_replica() {
    let _cluster = one_cluster_at_a_time().await;
    let (nodes, _dirs) = cluster_with(1500, &[("auto.leader.rebalance.enable", "false")]).await;
    let state = create_r(&nodes).await;
    let preferred = state.replicas[0];
    assert_eq!(state.leader, preferred);
    let any = node(&nodes, 1);
    let not_needed = ResponseError::ElectionNotNeeded.code();
    assert_eq!(elect(&any, 0, Some(&[0])).await, vec![(0, not_needed)]);
    // Every partition: those that need nothing are left out.
    assert_eq!(elect(&any, 0, None).await, vec![]);
    assert_eq!(
        elect(&any, 0, Some(&[7])).await,
        vec![(7, ResponseError::UnknownTopicOrPartition.code())]
    );
    drop(any);

    let nodes = fail_over(nodes, preferred).await;
    let any = node(&nodes, 1 + preferred % 3);
    let moved = state_in(&any);
    assert_ne!(moved.leader, preferred);
    // Unclean: the partition has a leader.
    assert_eq!(elect(&any, 1, Some(&[0])).await, vec![(0, not_needed)]);
    // Preferred: the first replica leads again, in the next epoch (once
    // this node's metadata has it back in the ISR).
    let mut got = Vec::new();
    for _ in 0..200 {
        got = elect(&any, 0, Some(&[0])).await;
        if got == vec![(0, 0)] {
            break;
        }
        assert_eq!(
            got,
            vec![(0, ResponseError::PreferredLeaderNotAvailable.code())]
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(got, vec![(0, 0)]);
    let back = node(&nodes, preferred);
    eventually("the preferred replica leads", || {
        back.partition("r", 0).is_some()
    })
    .await;
    let s = state_in(&back);
    assert_eq!(
        (s.leader, s.leader_epoch),
        (preferred, moved.leader_epoch + 1)
    );
    produce(&back, "after-election").await.expect("acks=all");

    drop((any, back));
    for n in nodes.into_iter().flatten() {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_automatic_rebalance_gives_leadership_back() {
    let _cluster = one_cluster_at_a_time().await;
    let (nodes, _dirs) =
        cluster_with(1500, &[("leader.imbalance.check.interval.seconds", "1")]).await;
    let state = create_r(&nodes).await;
    let preferred = state.replicas[0];
    let nodes = fail_over(nodes, preferred).await;
    let back = node(&nodes, preferred);
    eventually("the preferred replica leads again by itself", || {
        state_in(&back).leader == preferred && back.partition("r", 0).is_some()
    })
    .await;
    produce(&back, "rebalanced").await.expect("acks=all");
    drop(back);
    for n in nodes.into_iter().flatten() {
        n.stop().await;
    }
}
