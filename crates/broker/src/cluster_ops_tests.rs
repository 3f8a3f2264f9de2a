//! Cluster operations on three in-process combined nodes (the harness of
//! `replication::cluster_tests`): DescribeQuorum from every node, and
//! controlled shutdown of a partition leader.

use std::sync::Arc;
use std::time::Duration;

use proto_kafka::messages::describe_quorum_request;
use proto_kafka::messages::{
    ApiKey, BrokerId, DescribeClusterRequest, DescribeClusterResponse, DescribeQuorumRequest,
    DescribeQuorumResponse, TopicName,
};
use proto_kafka::protocol::StrBytes;
use sluice_controller::store::METADATA_TOPIC;

use crate::broker::Broker;
use crate::handlers::test_support::call;
use sluice_storage::AppendOrigin;

use crate::partition::Acks;
use crate::replication::cluster_tests::{batch, create_r, log_of, produce, raw, state_in};
use crate::test_quorum::one_cluster_at_a_time;
use crate::test_quorum::{cluster, cluster_with, eventually, node, start};

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
        (b, now_ms())
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
    // Its controlled shutdown was a metadata change it has too; read its
    // log end only now, when no late append can reach it any more.
    let stopped_end = stopped_at.0.metadata.log().log_end_offset();
    assert!(p.high_watermark > stopped_end);
    let gone = p
        .current_voters
        .iter()
        .find(|v| v.replica_id.0 == follower)
        .expect("still a voter");
    assert!(gone.log_end_offset <= stopped_end);
    assert!(gone.last_fetch_timestamp <= stopped_at.1);
    assert!(gone.last_caught_up_timestamp <= stopped_at.1);
    drop(leader);
    for n in nodes.into_iter().flatten() {
        n.stop().await;
    }
}

/// Every record of `log` by offset: its value (one-record batches).
fn values(log: &sluice_storage::Log) -> std::collections::BTreeMap<i64, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let bytes = raw(log);
    for b in sluice_protocol::record::BatchIter::new(&bytes) {
        let (at, h, _) = b.expect("batch");
        let size = h.total_size();
        let batch = sluice_protocol::record::codec::decode_batch(&bytes[at..at + size], 1 << 20)
            .expect("decode");
        for r in batch.records {
            out.insert(r.record.offset, r.record.value.unwrap_or_default());
        }
    }
    out
}

/// SIGTERM on a node of a quorum (the server's shutdown future, which
/// `sluice server` resolves on SIGTERM): before the node exits, the
/// quorum has moved its leadership to another in-sync replica in the next
/// leader epoch and taken it out of the ISR, without waiting for its
/// session to expire; every acks=all record it acknowledged is on the new
/// leader at the same offset, and acks=all goes on there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopping_leader_hands_its_partitions_over_before_it_exits() {
    let _cluster = one_cluster_at_a_time().await;
    // A long session: only controlled shutdown can move the leadership
    // within this test.
    let (mut nodes, _dirs) = cluster_with(30_000, &[("broker.session.timeout.ms", "60000")]).await;
    let state = create_r(&nodes).await;
    let old_id = state.leader;
    let old = node(&nodes, old_id);
    let mut acked = Vec::new();
    for i in 0..10 {
        let v = format!("before-{i}");
        let end = produce(&old, &v).await.expect("acks=all");
        acked.push((end - 1, v));
    }
    // A producer keeps writing to the old leader while it stops.
    let writer = {
        let old = Arc::clone(&old);
        tokio::spawn(async move {
            let mut acked = Vec::new();
            for i in 0.. {
                let v = format!("during-{i}");
                let Some(p) = old.partition("r", 0) else {
                    break;
                };
                let Ok(info) = p.append(batch(&v), AppendOrigin::Client, Acks::All).await else {
                    break;
                };
                let end = info.last_offset + 1;
                let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                match p.wait_replicated(end, deadline).await {
                    Ok(()) => acked.push((end - 1, v)),
                    Err(_) => break,
                }
            }
            acked
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let config = nodes[(old_id - 1) as usize]
        .take()
        .expect("running")
        .stop()
        .await;
    // As it exited, the node's own image already held the committed move,
    // and its partition layer led nothing.
    let at_exit = state_in(&old);
    assert_ne!(at_exit.leader, old_id);
    assert!(at_exit.leader >= 0);
    assert_eq!(at_exit.leader_epoch, state.leader_epoch + 1);
    assert!(!at_exit.isr.contains(&old_id));
    assert!(old.partitions.all().is_empty());
    // Marked in controlled shutdown, then fenced: it left the broker list.
    let reg = old.image().broker(old_id).cloned().expect("registered");
    assert!(reg.in_controlled_shutdown && reg.fenced);
    acked.extend(writer.await.expect("writer"));
    drop(old);

    let new_leader = node(&nodes, at_exit.leader);
    // The others no longer list it (well before its 60 s session ends).
    eventually("the stopped node out of the broker list", || {
        !new_leader.cluster_brokers().iter().any(|b| b.id == old_id)
    })
    .await;
    // DescribeCluster v2 lists it, fenced, only when asked to.
    for include in [false, true] {
        let mut req = DescribeClusterRequest::default();
        req.include_fenced_brokers = include;
        let resp: DescribeClusterResponse = call(&new_leader, ApiKey::DescribeCluster, 2, &req)
            .await
            .expect("a DescribeCluster response");
        let listed: Vec<(i32, bool)> = resp
            .brokers
            .iter()
            .map(|b| (b.broker_id.0, b.is_fenced))
            .collect();
        assert_eq!(
            listed.iter().find(|(id, _)| *id == old_id).copied(),
            include.then_some((old_id, true)),
            "include_fenced_brokers {include}: {listed:?}"
        );
        assert_eq!(listed.len(), if include { 3 } else { 2 });
    }
    eventually("the new leader leads", || {
        new_leader.partition("r", 0).is_some()
    })
    .await;
    let held = values(&log_of(&new_leader));
    for (offset, v) in &acked {
        assert_eq!(
            held.get(offset)
                .map(|b| String::from_utf8_lossy(b).into_owned()),
            Some(v.clone()),
            "acknowledged record at {offset}"
        );
    }
    produce(&new_leader, "after")
        .await
        .expect("acks=all with two replicas");

    // Back, it registers anew (out of controlled shutdown) and rejoins
    // the ISR as a follower.
    nodes[(old_id - 1) as usize] = Some(start(config).await);
    eventually("the restarted node back in the ISR", || {
        state_in(&new_leader).isr.contains(&old_id)
    })
    .await;
    let reg = new_leader
        .image()
        .broker(old_id)
        .cloned()
        .expect("registered");
    assert!(!reg.in_controlled_shutdown && !reg.fenced);
    drop(new_leader);
    for n in nodes.into_iter().flatten() {
        n.stop().await;
    }
}

/// A broker in controlled shutdown is an ineligible replica (Kafka's
/// INELIGIBLE_REPLICA): caught up, it is still not let back into the ISR;
/// registered again (what a restart does), it rejoins.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_in_controlled_shutdown_rejoins_no_isr_until_it_registers_again() {
    let _cluster = one_cluster_at_a_time().await;
    let (nodes, _dirs) = cluster_with(1500, &[("broker.session.timeout.ms", "60000")]).await;
    let state = create_r(&nodes).await;
    let leader = node(&nodes, state.leader);
    let f = *state
        .replicas
        .iter()
        .find(|&&r| r != state.leader)
        .expect("a follower");
    let follower = node(&nodes, f);
    produce(&leader, "a").await.expect("acks=all");
    // Only the mark and the ISR change: the node keeps running and
    // fetching.
    let records = sluice_controller::election::on_controlled_shutdown(&leader.image(), f, false)
        .expect("registered");
    leader
        .metadata
        .quorum()
        .expect("quorum")
        .write(records)
        .await
        .expect("committed");
    eventually("the follower out of the ISR", || {
        !state_in(&leader).isr.contains(&f)
    })
    .await;
    let end = produce(&leader, "b").await.expect("acks=all with two");
    let flog = log_of(&follower);
    eventually("the follower caught up", || flog.log_end_offset() == end).await;
    // Several ISR checks (every lag time / 4) later it is still out.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(!state_in(&leader).isr.contains(&f));
    assert!(leader
        .image()
        .broker(f)
        .is_some_and(|b| b.in_controlled_shutdown));
    crate::metadata_follower::register(&follower);
    eventually("the follower back in the ISR", || {
        state_in(&leader).isr.contains(&f)
    })
    .await;
    drop((leader, follower, flog));
    for n in nodes.into_iter().flatten() {
        n.stop().await;
    }
}
