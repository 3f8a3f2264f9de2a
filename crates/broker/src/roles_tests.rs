//! A split cluster in process (design 025): three controller-only voters
//! (ids 1 to 3) and two broker-only observers (ids 4 and 5). The brokers
//! register through the quorum and are the only ones in the broker
//! lists; an RF 2 topic is replicated between them; a broker fails over
//! and comes back (on another observer port), and the quorum leader fails
//! over while the brokers keep serving and their changes are forwarded
//! to the new leader.

use std::sync::Arc;
use std::time::Duration;

use proto_kafka::messages::describe_quorum_request;
use proto_kafka::messages::{
    ApiKey, DescribeClusterRequest, DescribeClusterResponse, DescribeQuorumRequest,
    DescribeQuorumResponse, TopicName,
};
use proto_kafka::protocol::StrBytes;
use sluice_controller::store::METADATA_TOPIC;

use crate::broker::Broker;
use crate::handlers::test_support::call;
use crate::replication::cluster_tests::{log_of, produce, raw, state_in};
use crate::test_quorum::{
    eventually, one_cluster_at_a_time, split_configs, start, start_controller, ControllerProc, Node,
};

async fn describe_cluster(b: &Arc<Broker>) -> DescribeClusterResponse {
    call(
        b,
        ApiKey::DescribeCluster,
        1,
        &DescribeClusterRequest::default(),
    )
    .await
    .expect("a response")
}

async fn describe_quorum(b: &Arc<Broker>) -> DescribeQuorumResponse {
    let mut p = describe_quorum_request::PartitionData::default();
    p.partition_index = 0;
    let mut t = describe_quorum_request::TopicData::default();
    t.topic_name = TopicName(StrBytes::from_static_str(METADATA_TOPIC));
    t.partitions = vec![p];
    let mut req = DescribeQuorumRequest::default();
    req.topics = vec![t];
    call(b, ApiKey::DescribeQuorum, 2, &req)
        .await
        .expect("a response")
}

fn ids<T>(items: &[T], id: impl Fn(&T) -> i32) -> Vec<i32> {
    let mut v: Vec<i32> = items.iter().map(id).collect();
    v.sort_unstable();
    v
}

/// The running broker with `id` (4 or 5).
fn broker(brokers: &[Option<Node>], id: i32) -> Arc<Broker> {
    Arc::clone(&brokers[(id - 4) as usize].as_ref().expect("running").broker)
}

/// The controller that leads the quorum, as the running ones agree.
fn quorum_leader(controllers: &[Option<ControllerProc>]) -> Option<u64> {
    let mut leaders = controllers.iter().flatten().map(|c| c.quorum.leader());
    let first = leaders.next().flatten()?;
    leaders.all(|l| l == Some(first)).then_some(first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_controllers_and_two_brokers_serve_through_broker_and_controller_failovers() {
    let _cluster = one_cluster_at_a_time().await;
    let (controller_configs, broker_configs, _dirs) = split_configs(3, 2, |_| {
        vec![
            ("broker.session.timeout.ms", "2000".into()),
            ("replica.lag.time.max.ms", "1500".into()),
            ("replica.fetch.wait.max.ms", "200".into()),
            ("replica.fetch.backoff.ms", "50".into()),
        ]
    });
    let mut controllers: Vec<Option<ControllerProc>> = Vec::new();
    for c in controller_configs {
        controllers.push(Some(start_controller(c).await));
    }
    let mut brokers: Vec<Option<Node>> = Vec::new();
    for c in broker_configs {
        brokers.push(Some(start(c).await));
    }

    // Only the brokers register; every node's image agrees.
    for id in [4, 5] {
        let b = broker(&brokers, id);
        eventually("both brokers registered", || {
            ids(&b.cluster_brokers(), |c| c.id) == vec![4, 5]
        })
        .await;
    }
    for c in controllers.iter().flatten() {
        let q = Arc::clone(&c.quorum);
        eventually("the controllers see the two brokers", || {
            ids(&q.image().brokers().collect::<Vec<_>>(), |b| b.id) == vec![4, 5]
        })
        .await;
        assert!(!q.is_observer());
    }
    let b4 = broker(&brokers, 4);
    assert!(b4.metadata.quorum().expect("quorum").is_observer());
    // The broker-side controller duties (the preferred-leader rebalance)
    // fall to the lowest-id broker: the quorum leader is no broker.
    eventually("broker 4 has the controller duties", || {
        b4.has_controller_duties()
    })
    .await;
    assert!(!broker(&brokers, 5).has_controller_duties());
    // DescribeCluster: the brokers only; the controller id is a broker
    // (the quorum leader is a controller-only node clients cannot reach).
    let dc = describe_cluster(&b4).await;
    assert_eq!(dc.error_code, 0);
    assert_eq!(ids(&dc.brokers, |b| b.broker_id.0), vec![4, 5]);
    assert!(
        [4, 5].contains(&dc.controller_id.0),
        "{:?}",
        dc.controller_id
    );
    // DescribeQuorum through a broker: the leader's view, three voters and
    // two observers, all caught up.
    let b5 = broker(&brokers, 5);
    let mut caught_up = false;
    for _ in 0..400 {
        let r = describe_quorum(&b5).await;
        let p = &r.topics[0].partitions[0];
        if p.error_code == 0
            && ids(&p.current_voters, |v| v.replica_id.0) == vec![1, 2, 3]
            && ids(&p.observers, |v| v.replica_id.0) == vec![4, 5]
            && p.observers
                .iter()
                .chain(&p.current_voters)
                .all(|v| v.log_end_offset == p.high_watermark)
        {
            assert!([1, 2, 3].contains(&p.leader_id.0));
            caught_up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(caught_up, "{:?}", describe_quorum(&b5).await);

    // An RF 2 topic, created through broker 4 (forwarded to the quorum
    // leader), placed on the two brokers.
    let creator = Arc::clone(&b4);
    tokio::task::spawn_blocking(move || creator.create_topic("r", 1, 2, &[], false))
        .await
        .expect("task")
        .expect("created");
    for id in [4, 5] {
        let b = broker(&brokers, id);
        eventually("both replicas in the ISR", || {
            b.image()
                .topic("r")
                .and_then(|t| t.partitions.get(&0).map(|p| p.isr.len() == 2))
                .unwrap_or(false)
        })
        .await;
    }
    let state = state_in(&b4);
    // No handle may outlive a broker that is stopped below (its folder
    // stays locked while one does).
    drop((b4, b5));
    let mut replicas = state.replicas.clone();
    replicas.sort_unstable();
    assert_eq!(replicas, vec![4, 5]);
    let leader_id = state.leader;
    let follower_id = 9 - leader_id;
    let leader = broker(&brokers, leader_id);
    eventually("the leader leads", || leader.partition("r", 0).is_some()).await;
    produce(&leader, "a").await.expect("acks=all");
    let follower = broker(&brokers, follower_id);
    eventually("the follower has what the leader has", || {
        raw(&log_of(&follower)) == raw(&log_of(&leader))
    })
    .await;
    drop((leader, follower));

    // Broker failover: the leader stops; the quorum leader fences it and
    // the follower leads in the next epoch.
    let stopped_config = brokers[(leader_id - 4) as usize]
        .take()
        .expect("running")
        .stop()
        .await;
    let survivor = broker(&brokers, follower_id);
    eventually("the follower leads", || {
        let s = state_in(&survivor);
        s.leader == follower_id && s.isr == vec![follower_id]
    })
    .await;
    assert!(state_in(&survivor).leader_epoch > state.leader_epoch);
    eventually("the survivor leads", || {
        survivor.partition("r", 0).is_some()
    })
    .await;
    produce(&survivor, "b")
        .await
        .expect("acks=all with the ISR of one");
    // The stopped broker comes back on its folder (and another observer
    // port): it follows, catches up and rejoins the ISR.
    brokers[(leader_id - 4) as usize] = Some(start(stopped_config).await);
    let back = broker(&brokers, leader_id);
    eventually("the restarted broker rejoins the ISR", || {
        let s = state_in(&survivor);
        s.isr.len() == 2 && raw(&log_of(&back)) == raw(&log_of(&survivor))
    })
    .await;
    drop(back);

    // Controller-leader failover: the brokers keep serving the data path,
    // and their metadata changes reach the new leader.
    let mut old = None;
    eventually("an agreed quorum leader", || {
        old = quorum_leader(&controllers);
        old.is_some()
    })
    .await;
    let old = old.expect("leader");
    let old_config = controllers[(old - 1) as usize]
        .take()
        .expect("running")
        .stop()
        .await;
    let end = produce(&survivor, "c")
        .await
        .expect("acks=all while the quorum fails over");
    let creator = broker(&brokers, 9 - follower_id);
    tokio::task::spawn_blocking(move || creator.create_topic("s", 2, 2, &[], false))
        .await
        .expect("task")
        .expect("created through the new quorum leader");
    let new = quorum_leader(&controllers).expect("a new leader");
    assert_ne!(new, old);
    for id in [4, 5] {
        let b = broker(&brokers, id);
        eventually("the new topic everywhere", || {
            b.image().topic("s").is_some()
        })
        .await;
        assert_eq!(ids(&b.cluster_brokers(), |c| c.id), vec![4, 5]);
    }
    let other = broker(&brokers, 9 - follower_id);
    eventually("acknowledged records replicated", || {
        log_of(&other).log_end_offset() == end
    })
    .await;
    // The old leader, back, catches up as a voter.
    controllers[(old - 1) as usize] = Some(start_controller(old_config).await);
    let q = Arc::clone(&controllers[(old - 1) as usize].as_ref().expect("up").quorum);
    eventually("the old leader catches up", || {
        q.image().topic("s").is_some()
    })
    .await;
    drop((q, survivor, other));

    for b in brokers.into_iter().flatten() {
        b.stop().await;
    }
    for c in controllers.into_iter().flatten() {
        c.stop().await;
    }
}
