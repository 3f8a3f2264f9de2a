//! Cluster operations on three in-process combined nodes (the harness of
//! `replication::cluster_tests`): DescribeQuorum from every node.

use std::sync::Arc;
use std::time::Duration;

use proto_kafka::messages::describe_quorum_request;
use proto_kafka::messages::{
    ApiKey, BrokerId, DescribeQuorumRequest, DescribeQuorumResponse, TopicName,
};
use proto_kafka::protocol::StrBytes;
use sluice_controller::store::METADATA_TOPIC;

use crate::broker::Broker;
use crate::handlers::test_support::call;
use crate::replication::cluster_tests::{cluster, create_r, node};
use crate::test_quorum::one_cluster_at_a_time;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn describe_request() -> DescribeQuorumRequest {
    let mut p = describe_quorum_request::PartitionData::default();
    p.partition_index = 0;
    let mut t = describe_quorum_request::TopicData::default();
    t.topic_name = TopicName(StrBytes::from_static_str(METADATA_TOPIC));
    t.partitions = vec![p];
    let mut req = DescribeQuorumRequest::default();
    req.topics = vec![t];
    req
}

async fn describe(b: &Arc<Broker>) -> DescribeQuorumResponse {
    call(b, ApiKey::DescribeQuorum, 2, &describe_request())
        .await
        .expect("a response")
}

/// Asks `b` until `f` holds for the answer (at most 40 s).
async fn describe_until(
    b: &Arc<Broker>,
    what: &str,
    f: impl Fn(&DescribeQuorumResponse) -> bool,
) -> DescribeQuorumResponse {
    for _ in 0..400 {
        let r = describe(b).await;
        if f(&r) {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}: {:?}", describe(b).await)
}

fn all_caught_up(r: &DescribeQuorumResponse) -> bool {
    let p = &r.topics[0].partitions[0];
    p.error_code == 0
        && p.current_voters.len() == 3
        && p.current_voters
            .iter()
            .all(|v| v.log_end_offset == p.high_watermark)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn describe_quorum_from_any_node_is_the_leaders_view_of_the_voters() {
    let _cluster = one_cluster_at_a_time().await;
    let started = now_ms();
    let (mut nodes, _dirs) = cluster(30_000).await;
    create_r(&nodes).await;
    let leader_id = node(&nodes, 1)
        .metadata
        .quorum()
        .and_then(|q| q.leader())
        .expect("a quorum leader") as i32;
    let leader = node(&nodes, leader_id);
    let term = leader.metadata.quorum().expect("quorum").term() as i32;

    for id in 1..=3 {
        let b = node(&nodes, id);
        let r = describe_until(&b, "every voter caught up", all_caught_up).await;
        let p = &r.topics[0].partitions[0];
        assert_eq!(r.topics[0].topic_name.as_str(), METADATA_TOPIC);
        assert_eq!((p.leader_id, p.leader_epoch), (BrokerId(leader_id), term));
        // The high watermark is the leader's committed end of the
        // metadata log, and every node has applied that far.
        let hw = p.high_watermark;
        assert!(hw > 0);
        assert!(hw <= leader.metadata.log().log_end_offset());
        let ids: Vec<i32> = p.current_voters.iter().map(|v| v.replica_id.0).collect();
        assert_eq!(ids, vec![1, 2, 3]);
        assert!(p.observers.is_empty());
        for v in &p.current_voters {
            // Every voter answered the leader and was caught up since the
            // cluster started.
            assert!(v.last_fetch_timestamp >= started, "{v:?}");
            assert!(v.last_caught_up_timestamp >= started, "{v:?}");
        }
        // v2: every voter's CONTROLLER endpoint.
        assert_eq!(r.nodes.len(), 3);
        for n in &r.nodes {
            let b = node(&nodes, n.node_id.0);
            let l = b
                .config
                .controller_listener()
                .expect("config")
                .expect("listener");
            assert_eq!(n.listeners.len(), 1);
            assert_eq!(n.listeners[0].name.as_str(), "CONTROLLER");
            assert_eq!(n.listeners[0].host.as_str(), "127.0.0.1");
            assert_eq!(n.listeners[0].port, l.port);
        }
    }

    // A follower stops: the quorum still commits; its log end offset and
    // last fetch stay where they were, the others' move on.
    let follower = (1..=3).find(|&i| i != leader_id).expect("a follower");
    let stopped_at = {
        let n = nodes[(follower - 1) as usize].take().expect("running");
        let b = Arc::clone(&n.broker);
        drop(n.stop().await);
        // Its controlled shutdown was a metadata change it has too.
        let end = b.metadata.log().log_end_offset();
        (end, now_ms())
    };
    let creator = Arc::clone(&leader);
    tokio::task::spawn_blocking(move || creator.create_topic("later", 1, 1, &[], false))
        .await
        .expect("task")
        .expect("a metadata change with two of three voters");
    let r = describe_until(&leader, "the running voters caught up", |r| {
        let p = &r.topics[0].partitions[0];
        p.current_voters
            .iter()
            .filter(|v| v.replica_id.0 != follower)
            .all(|v| v.log_end_offset == p.high_watermark)
    })
    .await;
    let p = &r.topics[0].partitions[0];
    assert!(p.high_watermark > stopped_at.0);
    let gone = p
        .current_voters
        .iter()
        .find(|v| v.replica_id.0 == follower)
        .expect("still a voter");
    assert!(gone.log_end_offset <= stopped_at.0);
    assert!(gone.last_fetch_timestamp <= stopped_at.1);
    assert!(gone.last_caught_up_timestamp <= stopped_at.1);
    drop(leader);
    for n in nodes.into_iter().flatten() {
        n.stop().await;
    }
}
