//! Preferred and unclean leader elections across in-process nodes:
//! ElectLeaders on any node, the automatic rebalance that gives a
//! failed-over partition back to its preferred replica, and the unclean
//! election `unclean.leader.election.enable` makes when the whole ISR is
//! gone.

use std::sync::Arc;

use proto_kafka::messages::elect_leaders_request::TopicPartitions;
use proto_kafka::messages::{ApiKey, ElectLeadersRequest, ElectLeadersResponse, TopicName};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;

use super::cluster_tests::{batch, create_r, isr, log_of, produce, raw, state_in};
use crate::broker::Broker;
use crate::handlers::test_support::call;
use crate::test_quorum::{
    cluster_with, eventually, node, one_cluster_at_a_time, split_configs, start, start_controller,
    Node,
};

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

/// Produce v12 (acks=all) of one record to r-0 on `b`, and Fetch v12 of
/// r-0 there: each partition's error code and current-leader hint, and the
/// endpoints the Produce answer carries.
async fn ask_not_leader(b: &Arc<Broker>) -> ((i16, i32, i32), Vec<i32>, (i16, i32, i32)) {
    use proto_kafka::messages::fetch_request::{FetchPartition, FetchTopic};
    use proto_kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use proto_kafka::messages::{FetchRequest, FetchResponse, ProduceRequest, ProduceResponse};
    let mut pd = PartitionProduceData::default();
    pd.index = 0;
    pd.records = Some(bytes::Bytes::from(batch("misdirected")));
    let mut td = TopicProduceData::default();
    td.name = TopicName(StrBytes::from_static_str("r"));
    td.partition_data = vec![pd];
    let mut req = ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = 5_000;
    req.topic_data = vec![td];
    let r: ProduceResponse = call(b, ApiKey::Produce, 12, &req).await.expect("response");
    let p = &r.responses[0].partition_responses[0];
    let produced = (
        p.error_code,
        p.current_leader.leader_id.0,
        p.current_leader.leader_epoch,
    );
    let endpoints = r.node_endpoints.iter().map(|e| e.node_id.0).collect();
    let mut fp = FetchPartition::default();
    fp.partition = 0;
    fp.partition_max_bytes = 1 << 20;
    let mut ft = FetchTopic::default();
    ft.topic = TopicName(StrBytes::from_static_str("r"));
    ft.partitions = vec![fp];
    let mut req = FetchRequest::default();
    req.max_wait_ms = 0;
    req.max_bytes = 1 << 20;
    req.topics = vec![ft];
    let r: FetchResponse = call(b, ApiKey::Fetch, 12, &req).await.expect("response");
    let p = &r.responses[0].partitions[0];
    let fetched = (
        p.error_code,
        p.current_leader.leader_id.0,
        p.current_leader.leader_epoch,
    );
    (produced, endpoints, fetched)
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
    // A follower refuses produce and fetch, naming the leader (KIP-951).
    let follower = node(&nodes, state.replicas[1]);
    let not_leader = ResponseError::NotLeaderOrFollower.code();
    let hint = (not_leader, preferred, state.leader_epoch);
    assert_eq!(
        ask_not_leader(&follower).await,
        (hint, vec![preferred], hint)
    );
    drop(follower);
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

/// A split cluster (one controller, id 1; brokers 2 and 3) so both
/// replicas can be down while the quorum runs. With the topic config off,
/// the partition whose ISR's last member is gone stays leaderless though
/// another replica is back; turned on, that replica leads at the quorum
/// leader's next broker-session round: records only the old ISR member had
/// are lost, and it truncates them when back.
/// (Each broker's stop is a controlled shutdown: the follower leaves the
/// ISR at once; the stopping leader finds nobody to hand over to.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_out_of_sync_replica_leads_when_unclean_election_is_enabled() {
    let _cluster = one_cluster_at_a_time().await;
    let (controller_configs, broker_configs, _dirs) = split_configs(1, 2, |_| {
        vec![
            ("broker.session.timeout.ms", "2000".into()),
            ("replica.lag.time.max.ms", "1500".into()),
            ("replica.fetch.wait.max.ms", "200".into()),
            ("replica.fetch.backoff.ms", "50".into()),
        ]
    });
    let controller = start_controller(controller_configs[0].clone()).await;
    let mut brokers: Vec<Option<Node>> = Vec::new();
    for c in broker_configs {
        brokers.push(Some(start(c).await));
    }
    let broker = |brokers: &[Option<Node>], id: i32| {
        Arc::clone(&brokers[(id - 2) as usize].as_ref().expect("running").broker)
    };
    let b2 = broker(&brokers, 2);
    eventually("both brokers registered", || {
        b2.cluster_brokers().len() == 2
    })
    .await;
    let creator = Arc::clone(&b2);
    tokio::task::spawn_blocking(move || {
        let unclean = [("unclean.leader.election.enable".into(), "false".into())];
        creator.create_topic("r", 1, 2, &unclean, false)
    })
    .await
    .expect("task")
    .expect("created");
    eventually("both replicas in the ISR", || {
        b2.image().topic("r").is_some() && isr(&b2).len() == 2
    })
    .await;
    let state = state_in(&b2);
    drop(b2);
    let (l, f) = (state.leader, 5 - state.leader);

    // The follower stops: it leaves the ISR; the leader takes a record it
    // never gets, then stops too. Nobody may lead.
    let follower_config = brokers[(f - 2) as usize]
        .take()
        .expect("running")
        .stop()
        .await;
    let leader = broker(&brokers, l);
    eventually("the follower out of the ISR", || isr(&leader) == vec![l]).await;
    eventually("the leader leads", || leader.partition("r", 0).is_some()).await;
    produce(&leader, "only on the old leader")
        .await
        .expect("acks=all with the ISR of one");
    let lost = log_of(&leader).log_end_offset();
    assert_eq!(lost, 1);
    drop(leader);
    let leader_config = brokers[(l - 2) as usize]
        .take()
        .expect("running")
        .stop()
        .await;
    let quorum = Arc::clone(&controller.quorum);
    let partition = || {
        quorum
            .image()
            .topic("r")
            .and_then(|t| t.partitions.get(&0).cloned())
            .expect("partition")
    };
    eventually("no leader", || partition().leader == -1).await;
    let leaderless = partition();
    assert_eq!(leaderless.isr, vec![l]);

    // The out-of-sync follower comes back: registered and unfenced, it
    // may not lead. With the topic config turned on, unclean election
    // makes it the leader, its ISR just it, in the next leader epoch.
    brokers[(f - 2) as usize] = Some(start(follower_config).await);
    let new_leader = broker(&brokers, f);
    eventually("the follower registered and unfenced", || {
        quorum
            .image()
            .broker(f)
            .is_some_and(|b| !b.fenced && !b.in_controlled_shutdown)
    })
    .await;
    assert_eq!(partition().leader, -1);
    let editor = Arc::clone(&new_leader);
    tokio::task::spawn_blocking(move || {
        editor.edit_topic_configs("r", false, |current, _| {
            let mut next = current.clone();
            next.insert("unclean.leader.election.enable".into(), "true".into());
            Ok(next)
        })
    })
    .await
    .expect("task")
    .expect("altered");
    eventually("the out-of-sync replica leads", || {
        let s = state_in(&new_leader);
        s.leader == f && s.isr == vec![f]
    })
    .await;
    let elected = state_in(&new_leader);
    assert_eq!(elected.leader_epoch, leaderless.leader_epoch + 1);
    assert!(elected.partition_epoch > leaderless.partition_epoch);
    eventually("it serves the partition", || {
        new_leader.partition("r", 0).is_some()
    })
    .await;
    produce(&new_leader, "after the unclean election")
        .await
        .expect("acks=all on the new leader");
    assert_eq!(log_of(&new_leader).log_end_offset(), 1);

    // The old leader, back, truncates the record only it had and rejoins.
    brokers[(l - 2) as usize] = Some(start(leader_config).await);
    let old = broker(&brokers, l);
    eventually("the old leader follows and rejoins the ISR", || {
        isr(&new_leader).len() == 2 && raw(&log_of(&old)) == raw(&log_of(&new_leader))
    })
    .await;
    assert_eq!(log_of(&old).log_end_offset(), 1);
    drop((quorum, new_leader, old));
    for b in brokers.into_iter().flatten() {
        b.stop().await;
    }
    controller.stop().await;
}
