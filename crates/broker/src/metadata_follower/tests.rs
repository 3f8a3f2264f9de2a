//! Three combined nodes (`process.roles=broker,controller`) of one
//! metadata quorum, in process on loopback: changes made through any node
//! reach every node's image and data folder.

use std::sync::Arc;
use std::time::Duration;

use proto_kafka::ResponseError;
use sluice_storage::TopicPartition;

use crate::broker::Broker;
use crate::test_quorum::{eventually_within, one_cluster_at_a_time, three_node_configs};

async fn eventually(what: &str, f: impl FnMut() -> bool) {
    eventually_within(30_000, what, f).await
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_share_metadata_through_the_quorum() {
    let _cluster = one_cluster_at_a_time().await;
    let (configs, dirs) = three_node_configs(|i| {
        vec![
            ("broker.rack", format!("rack-{}", i % 2)),
            ("broker.session.timeout.ms", "1000".into()),
        ]
    });
    let mut brokers: Vec<Arc<Broker>> = Vec::new();
    for c in configs {
        brokers.push(blocking(move || Broker::open(c)).await.expect("open"));
    }
    let leader = brokers[0]
        .metadata
        .quorum()
        .expect("a quorum")
        .wait_for_leader(Duration::from_secs(10))
        .await
        .expect("a leader");
    assert!((1..=3).contains(&leader));

    // Every node registers; Metadata and DescribeCluster then name all
    // three brokers, and the quorum leader as controller.
    for b in &brokers {
        eventually("three registered brokers", || {
            let listed = b.cluster_brokers();
            listed.len() == 3
                && listed
                    .iter()
                    .zip(&brokers)
                    .all(|(c, o)| c.id == o.node_id && c.port == i32::from(o.advertised.port))
        })
        .await;
        // The quorum's current leader: on a loaded machine an election
        // may have moved it since `leader` was read.
        eventually("the quorum leader as controller id", || {
            let current = brokers[0].metadata.quorum().and_then(|q| q.leader());
            current.is_some_and(|l| i64::from(b.controller_id()) == l as i64)
        })
        .await;
        assert!(b.is_broker(1) && b.is_broker(2) && b.is_broker(3) && !b.is_broker(4));
    }

    // Created through node 2: every node's image has it, and the data
    // folder of each partition's replica (only there) its log.
    let b2 = Arc::clone(&brokers[1]);
    let t = blocking(move || b2.create_topic("orders", 3, 1, &[], false))
        .await
        .expect("created through node 2");
    assert_eq!(t.partitions.len(), 3);
    for b in &brokers {
        eventually("orders on every node, logs on its replicas", || {
            b.image().topic("orders").map(|t| t.id) == Some(t.id)
                && (0..3).all(|p| {
                    b.logs.get(&TopicPartition::new("orders", p)).is_some()
                        == t.partitions[&p].replicas.contains(&b.node_id)
                })
        })
        .await;
    }

    // Replication factor 3 over the three registered brokers: each
    // partition on all three, in sync, the first replica leading, the
    // leaderships striped evenly; 4 is more than there are brokers.
    let b2 = Arc::clone(&brokers[1]);
    let spread = blocking(move || b2.create_topic("spread", 6, 3, &[], false))
        .await
        .expect("replication factor 3");
    let mut led = [0; 3];
    for p in spread.partitions.values() {
        let mut replicas = p.replicas.clone();
        replicas.sort_unstable();
        assert_eq!(replicas, vec![1, 2, 3], "{p:?}");
        assert_eq!(p.isr, p.replicas);
        assert_eq!(p.leader, p.replicas[0]);
        led[(p.leader - 1) as usize] += 1;
    }
    assert_eq!(led, [2, 2, 2]);
    let b3 = Arc::clone(&brokers[2]);
    let four = blocking(move || b3.create_topic("four", 1, 4, &[], false)).await;
    assert_eq!(
        four.map(|_| ()).map_err(|e| e.code),
        Err(ResponseError::InvalidReplicationFactor)
    );
    // Partitions added later keep the topic's replication factor.
    let b1 = Arc::clone(&brokers[0]);
    blocking(move || b1.add_partitions("spread", 8, false))
        .await
        .expect("more partitions");
    for b in &brokers {
        eventually("spread with 8 partitions of 3 replicas everywhere", || {
            b.image().topic("spread").is_some_and(|t| {
                t.partitions.len() == 8 && t.partitions.values().all(|p| p.replicas.len() == 3)
            }) && (0..8).all(|p| b.logs.get(&TopicPartition::new("spread", p)).is_some())
        })
        .await;
    }

    // The same name through node 3 is refused by the quorum leader.
    let b3 = Arc::clone(&brokers[2]);
    let again = blocking(move || b3.create_topic("orders", 1, 1, &[], false)).await;
    assert_eq!(
        again.map(|_| ()).map_err(|e| e.code),
        Err(ResponseError::TopicAlreadyExists)
    );

    // Config changes and deletion through node 1 reach the others' logs.
    let b1 = Arc::clone(&brokers[0]);
    blocking(move || {
        b1.alter_topic_configs(
            "orders",
            &[("retention.ms".into(), Some("12345".into()))],
            false,
            false,
        )
    })
    .await
    .expect("configs");
    for b in &brokers {
        eventually("the config on every replica", || {
            (0..3).all(|p| {
                b.logs
                    .get(&TopicPartition::new("orders", p))
                    .is_none_or(|l| l.config().retention_ms == 12345)
            }) && b
                .image()
                .topic("orders")
                .is_some_and(|t| t.configs.get("retention.ms").map(String::as_str) == Some("12345"))
        })
        .await;
    }
    let b1 = Arc::clone(&brokers[0]);
    blocking(move || b1.delete_topic("orders"))
        .await
        .expect("deleted through node 1");
    for b in &brokers {
        eventually("orders gone everywhere", || {
            b.image().topic("orders").is_none()
                && (0..3).all(|p| b.logs.get(&TopicPartition::new("orders", p)).is_none())
        })
        .await;
    }

    // Producer id blocks taken through different nodes never overlap.
    let mut firsts = Vec::new();
    for b in &brokers {
        let b = Arc::clone(b);
        let block = blocking(move || b.metadata.allocate_producer_ids(b.node_id, -1))
            .await
            .expect("a block");
        firsts.push(block.first_id);
    }
    firsts.sort_unstable();
    firsts.dedup();
    assert_eq!(firsts.len(), 3, "{firsts:?}");

    // A topic with data on the quorum leader's node (as it is now); the
    // leader stops.
    let leader = brokers[0]
        .metadata
        .quorum()
        .and_then(|q| q.leader())
        .expect("a leader");
    let li = brokers
        .iter()
        .position(|b| i64::from(b.node_id) == leader as i64)
        .expect("the leader's broker");
    let bl = Arc::clone(&brokers[li]);
    let kept = blocking(move || bl.create_topic("kept", 1, 3, &[], false))
        .await
        .expect("kept");
    let stopped = brokers.remove(li);
    let stopped_config = stopped.config.clone();
    blocking(move || stopped.shutdown())
        .await
        .expect("shutdown");
    // The two others elect a leader, which fences the silent broker: it
    // leaves the broker lists.
    let stopped_id = i32::try_from(leader).expect("id");
    for b in &brokers {
        eventually("the stopped broker fenced", || {
            b.cluster_brokers().len() == 2 && !b.is_broker(stopped_id)
        })
        .await;
    }
    // Only two brokers are left to place replicas on.
    let b0 = Arc::clone(&brokers[0]);
    let three = blocking(move || b0.create_topic("three", 1, 3, &[], false)).await;
    assert_eq!(
        three.map(|_| ()).map_err(|e| e.code),
        Err(ResponseError::InvalidReplicationFactor)
    );
    // And they take changes.
    let b0 = Arc::clone(&brokers[0]);
    blocking(move || b0.create_topic("while-down", 2, 1, &[], false))
        .await
        .expect("created with two of three nodes");
    // The stopped node restarts on its folder: its own topic's folder is
    // kept (not set aside as a stray), and it catches up with the change
    // made while it was down.
    let back = blocking(move || Broker::open(stopped_config))
        .await
        .expect("reopen");
    assert_eq!(back.image().topic("kept").map(|t| t.id), Some(kept.id));
    assert!(back.logs.get(&TopicPartition::new("kept", 0)).is_some());
    // It was fenced when the topic was placed: no replica there, no log.
    eventually("the restarted node catches up", || {
        back.image().topic("while-down").is_some()
    })
    .await;
    assert!((0..2).all(|p| {
        back.logs
            .get(&TopicPartition::new("while-down", p))
            .is_none()
    }));
    // Registered again, it is listed again everywhere.
    for b in brokers.iter().chain(std::iter::once(&back)) {
        eventually("the restarted broker listed", || {
            b.cluster_brokers().len() == 3
        })
        .await;
    }
    let strays = std::fs::read_dir(dirs[li].path())
        .expect("data folder")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with("-stray"))
        .count();
    assert_eq!(strays, 0);
    brokers.push(back);

    for b in brokers {
        blocking(move || b.shutdown()).await.expect("shutdown");
    }
}

/// A node of a quorum lists only registered, unfenced brokers, itself
/// included only once its own registration is in its image (Kafka's alive
/// brokers): a client that sees N brokers anywhere can create a topic with
/// N replicas. Before, a node listed itself from the start, so a client
/// could see three brokers while the controller placed on two.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_lists_itself_only_once_registered() {
    let _cluster = one_cluster_at_a_time().await;
    let (configs, _dirs) = three_node_configs(|_| Vec::new());
    let mut configs = configs.into_iter();
    let first = configs.next().expect("node 1");
    let alone = blocking(move || Broker::open(first)).await.expect("open");
    // Alone it has no majority: its registration cannot commit.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(alone.image().broker(alone.node_id).is_none());
    assert!(alone.cluster_brokers().is_empty());
    assert!(alone.registered_brokers(true).is_empty());
    // Nor a controller to name (Kafka's -1).
    assert_eq!(alone.controller_id(), -1);

    let mut brokers = vec![alone];
    for c in configs {
        brokers.push(blocking(move || Broker::open(c)).await.expect("open"));
    }
    for b in &brokers {
        eventually("three registered brokers", || {
            let listed = b.cluster_brokers();
            listed.len() == 3 && listed.iter().any(|c| c.id == b.node_id)
        })
        .await;
    }
    // Whichever node is asked, three listed means three replicas placed.
    let b0 = Arc::clone(&brokers[0]);
    blocking(move || b0.create_topic("everywhere", 1, 3, &[], false))
        .await
        .expect("three replicas");
    for b in brokers {
        blocking(move || b.shutdown()).await.expect("shutdown");
    }
}
