//! The group coordinator follows the leadership of `__consumer_offsets`
//! across three in-process nodes: FindCoordinator names the partition's
//! leader, other nodes answer NOT_COORDINATOR, and an acknowledged offset
//! commit survives the loss of the coordinator's node (its new leader
//! loads the partition from its replica).

use std::sync::Arc;

use proto_kafka::messages::offset_fetch_request::OffsetFetchRequestTopic;
use proto_kafka::messages::{
    ApiKey, FindCoordinatorRequest, FindCoordinatorResponse, GroupId, OffsetCommitResponse,
    OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;

use crate::broker::{Broker, CONSUMER_OFFSETS_TOPIC};
use crate::handlers::test_support::call;
use crate::test_quorum::{cluster_with, eventually, node, one_cluster_at_a_time, start, Node};

/// FindCoordinator v3 for group `g` on `b`: (error code, node id).
async fn find(b: &Arc<Broker>, group: &str) -> (i16, i32) {
    let mut req = FindCoordinatorRequest::default();
    req.key = StrBytes::from_string(group.into());
    let r: FindCoordinatorResponse = call(b, ApiKey::FindCoordinator, 3, &req)
        .await
        .expect("response");
    (r.error_code, r.node_id.0)
}

/// A simple-group (assign()) commit of `offset` for t-0; the error code.
async fn commit(b: &Arc<Broker>, group: &str, offset: i64) -> i16 {
    let req =
        crate::handlers::offset_commit::tests::request(group, -1, "", &[("t", 0, offset, None)]);
    let r: OffsetCommitResponse = call(b, ApiKey::OffsetCommit, 8, &req)
        .await
        .expect("response");
    r.topics[0].partitions[0].error_code
}

/// The committed offset of t-0 (OffsetFetch v5): (group error, offset).
async fn fetch(b: &Arc<Broker>, group: &str) -> (i16, i64) {
    let mut req = OffsetFetchRequest::default();
    req.group_id = GroupId(StrBytes::from_string(group.into()));
    let mut t = OffsetFetchRequestTopic::default();
    t.name = TopicName(StrBytes::from_static_str("t"));
    t.partition_indexes = vec![0];
    req.topics = Some(vec![t]);
    let r: OffsetFetchResponse = call(b, ApiKey::OffsetFetch, 5, &req)
        .await
        .expect("response");
    (r.error_code, r.topics[0].partitions[0].committed_offset)
}

/// Error codes a Kafka client retries here: the request timed out
/// waiting for the ISR, the coordinator is loading or not yet known, or
/// the ISR is short while it shrinks.
const RETRIABLE: [ResponseError; 5] = [
    ResponseError::RequestTimedOut,
    ResponseError::CoordinatorLoadInProgress,
    ResponseError::CoordinatorNotAvailable,
    ResponseError::NotEnoughReplicas,
    ResponseError::NotEnoughReplicasAfterAppend,
];

/// Runs `call` until its error code is not retriable (as a client would,
/// for up to 40 s) and returns that code and value.
async fn retrying<T, F, Fut>(what: &str, mut call: F) -> (i16, T)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (i16, T)>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
    loop {
        let (code, value) = call().await;
        let retriable = RETRIABLE.iter().any(|e| e.code() == code);
        if !retriable || std::time::Instant::now() > deadline {
            if retriable {
                eprintln!("{what}: still retriable error {code} after 40 s");
            }
            return (code, value);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The running nodes other than `id`.
fn others(nodes: &[Option<Node>], id: i32) -> Vec<Arc<Broker>> {
    (1..=3)
        .filter(|&n| n != id && nodes[(n - 1) as usize].is_some())
        .map(|n| node(nodes, n))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_group_coordinator_moves_with_its_partition_and_commits_survive() {
    let _cluster = one_cluster_at_a_time().await;
    let (mut nodes, _dirs) = cluster_with(1500, &[("offsets.topic.num.partitions", "3")]).await;
    let first = node(&nodes, 1);
    let creator = Arc::clone(&first);
    tokio::task::spawn_blocking(move || creator.create_topic("t", 1, 3, &[], false))
        .await
        .expect("task")
        .expect("topic");

    // Any node names the leader of the group's partition; the offsets
    // topic has Kafka's three replicas.
    let (code, coordinator) = find(&first, "g").await;
    assert_eq!(code, 0);
    let offsets = first
        .image()
        .topic(CONSUMER_OFFSETS_TOPIC)
        .cloned()
        .expect("offsets topic");
    assert!(offsets.partitions.values().all(|p| p.replicas.len() == 3));
    let p = first.groups.partition_for(&first, "g");
    assert_eq!(offsets.partitions[&p].leader, coordinator);
    for b in others(&nodes, coordinator) {
        // A node whose metadata has not caught up yet answers
        // COORDINATOR_NOT_AVAILABLE.
        let found = retrying("find on another node", || find(&b, "g")).await;
        assert_eq!(found, (0, coordinator), "another node's FindCoordinator");
        assert_eq!(
            commit(&b, "g", 1).await,
            ResponseError::NotCoordinator.code()
        );
    }

    // The coordinator acknowledges a commit once the followers have it.
    let c = node(&nodes, coordinator);
    eventually("the coordinator leads its partition", || {
        c.partition(CONSUMER_OFFSETS_TOPIC, p).is_some()
    })
    .await;
    let (code, ()) = retrying("first commit", || async { (commit(&c, "g", 42).await, ()) }).await;
    assert_eq!(code, 0, "the first commit");
    assert_eq!(fetch(&c, "g").await, (0, 42), "the coordinator's fetch");
    drop(c);

    // Its node stops: a survivor becomes the coordinator and has the
    // commit.
    drop(first);
    let config = nodes[(coordinator - 1) as usize]
        .take()
        .expect("running")
        .stop()
        .await;
    let survivor = others(&nodes, coordinator).remove(0);
    let mut moved = (0, coordinator);
    for _ in 0..400 {
        moved = find(&survivor, "g").await;
        if moved.0 == 0 && moved.1 != coordinator {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        moved.0 == 0 && moved.1 != coordinator,
        "no new coordinator: {moved:?}"
    );
    let next = node(&nodes, moved.1);
    let fetched = retrying("fetch on the new coordinator", || fetch(&next, "g")).await;
    assert_eq!(fetched, (0, 42), "the new coordinator's fetch");
    let (code, ()) = retrying("commit on the new coordinator", || async {
        (commit(&next, "g", 43).await, ())
    })
    .await;
    assert_eq!(code, 0, "the commit on the new coordinator");

    // The old node comes back as a follower: it does not coordinate, and
    // the group's offsets are the new coordinator's.
    nodes[(coordinator - 1) as usize] = Some(start(config).await);
    let back = node(&nodes, coordinator);
    let state = || {
        back.image()
            .topic(CONSUMER_OFFSETS_TOPIC)
            .and_then(|t| t.partitions.get(&p).cloned())
    };
    for _ in 0..400 {
        if state().is_some_and(|s| s.leader == moved.1) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        state().map(|s| s.leader),
        Some(moved.1),
        "the old node's view: {:?}",
        state()
    );
    assert_eq!(
        find(&back, "g").await,
        (0, moved.1),
        "the old node's FindCoordinator"
    );
    assert_eq!(
        commit(&back, "g", 7).await,
        ResponseError::NotCoordinator.code(),
        "a commit on the old node"
    );
    let fetched = retrying("the last fetch", || fetch(&next, "g")).await;
    assert_eq!(fetched, (0, 43), "the new coordinator keeps its offsets");

    drop((survivor, next, back));
    for n in nodes.into_iter().flatten() {
        n.stop().await;
    }
}
