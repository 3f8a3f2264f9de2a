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

/// IncrementalAlterConfigs v1 on `b`: SET `key` to `value`, or DELETE it
/// (None); the resource's error code.
async fn set_config(
    b: &Arc<Broker>,
    resource_type: i8,
    name: &str,
    key: &str,
    value: Option<&str>,
) -> i16 {
    use proto_kafka::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    use proto_kafka::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
    let mut c = AlterableConfig::default();
    c.name = StrBytes::from_string(key.to_string());
    c.config_operation = if value.is_some() { 0 } else { 1 };
    c.value = value.map(|v| StrBytes::from_string(v.to_string()));
    let mut r = AlterConfigsResource::default();
    r.resource_type = resource_type;
    r.resource_name = StrBytes::from_string(name.to_string());
    r.configs = vec![c];
    let mut req = IncrementalAlterConfigsRequest::default();
    req.resources = vec![r];
    let resp: IncrementalAlterConfigsResponse = call(b, ApiKey::IncrementalAlterConfigs, 1, &req)
        .await
        .expect("response");
    resp.responses[0].error_code
}

/// DescribeConfigs v1 of broker `b` itself: (value, source) of `key`.
async fn describe_broker(b: &Arc<Broker>, key: &str) -> (Option<String>, i8) {
    use proto_kafka::messages::describe_configs_request::DescribeConfigsResource;
    use proto_kafka::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
    let mut r = DescribeConfigsResource::default();
    r.resource_type = 4;
    r.resource_name = StrBytes::from_string(b.node_id.to_string());
    r.configuration_keys = Some(vec![StrBytes::from_string(key.to_string())]);
    let mut req = DescribeConfigsRequest::default();
    req.resources = vec![r];
    let resp: DescribeConfigsResponse = call(b, ApiKey::DescribeConfigs, 1, &req)
        .await
        .expect("response");
    let c = &resp.results[0].configs[0];
    (c.value.as_ref().map(|v| v.to_string()), c.config_source)
}

fn log_end(b: &Broker) -> i64 {
    b.logs
        .get(&TopicPartition::new("r", 0))
        .map_or(-1, |l| l.log_end_offset())
}

/// The follower-side and then the leader-side throttle hold a moving
/// replica back (by bytes: with 1 byte/s it stays behind the leader and
/// the reassignment does not complete), and it catches up and completes
/// once the throttle is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replication_throttles_hold_a_moving_replica_back() {
    let _cluster = one_cluster_at_a_time().await;
    let (nodes, _dirs) =
        crate::test_quorum::cluster_with(1500, &[("replica.fetch.max.bytes", "1024")]).await;
    let b = node;
    let creator = b(&nodes, 1);
    let topic = tokio::task::spawn_blocking(move || creator.create_topic("r", 1, 1, &[], false))
        .await
        .expect("task")
        .expect("topic");
    let from = topic.partitions[&0].leader;
    let to = from % 3 + 1;
    let leader = b(&nodes, from);
    eventually("the leader leads", || leader.partition("r", 0).is_some()).await;
    let mut end = 0;
    for i in 0..100 {
        end = produce(&leader, &format!("value-{i:04}"))
            .await
            .expect("acks=all");
    }
    let dest = b(&nodes, to);
    let follower_rate = "follower.replication.throttled.rate";
    let leader_rate = "leader.replication.throttled.rate";
    let invalid = ResponseError::InvalidConfig.code();
    assert_eq!(
        set_config(&dest, 4, &to.to_string(), follower_rate, Some("-1")).await,
        invalid
    );
    assert_eq!(
        set_config(&dest, 4, &to.to_string(), follower_rate, Some("x")).await,
        invalid
    );
    assert_eq!(
        set_config(&dest, 4, "", "log.retention.ms", Some("1")).await,
        ResponseError::InvalidRequest.code(),
        "other broker keys stay read-only"
    );
    assert_eq!(
        describe_broker(&dest, follower_rate).await,
        (Some(i64::MAX.to_string()), 5)
    );

    // Follower side: node `to` throttles its fetches of r-0.
    assert_eq!(
        set_config(
            &dest,
            2,
            "r",
            "follower.replication.throttled.replicas",
            Some(&format!("0:{to}"))
        )
        .await,
        0
    );
    assert_eq!(
        set_config(&dest, 4, &to.to_string(), follower_rate, Some("1")).await,
        0
    );
    assert_eq!(
        describe_broker(&dest, follower_rate).await,
        (Some("1".into()), 2)
    );
    assert_eq!(alter(&dest, "r", &[(0, Some(&[to]))]).await, vec![(0, 0)]);
    eventually("the new replica starts fetching", || log_end(&dest) > 0).await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let held = log_end(&dest);
    assert!(held < end, "throttled at 1 byte/s: {held} of {end}");
    assert!(state_in(&dest).is_reassigning());
    assert_eq!(
        set_config(&dest, 4, &to.to_string(), follower_rate, None).await,
        0
    );
    eventually("the reassignment completes once unthrottled", || {
        let s = state_in(&dest);
        s.replicas == vec![to] && s.leader == to
    })
    .await;
    assert_eq!(log_end(&dest), end);

    // Leader side: the new leader `to`, cluster-wide rate, moves it back.
    assert_eq!(
        set_config(
            &dest,
            2,
            "r",
            "leader.replication.throttled.replicas",
            Some("*")
        )
        .await,
        0
    );
    assert_eq!(set_config(&dest, 4, "", leader_rate, Some("1")).await, 0);
    assert_eq!(
        describe_broker(&dest, leader_rate).await,
        (Some("1".into()), 3)
    );
    eventually("the old replica's log is gone", || log_end(&leader) < 0).await;
    assert_eq!(alter(&dest, "r", &[(0, Some(&[from]))]).await, vec![(0, 0)]);
    eventually("the returning replica starts fetching", || {
        log_end(&leader) > 0
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let held = log_end(&leader);
    assert!(held < end, "throttled at 1 byte/s: {held} of {end}");
    assert!(state_in(&leader).is_reassigning());
    assert_eq!(set_config(&dest, 4, "", leader_rate, None).await, 0);
    eventually("the reassignment completes once unthrottled", || {
        let s = state_in(&leader);
        s.replicas == vec![from] && s.leader == from
    })
    .await;
    assert_eq!(log_end(&leader), end);
    for n in nodes.into_iter().flatten() {
        n.stop().await;
    }
}
