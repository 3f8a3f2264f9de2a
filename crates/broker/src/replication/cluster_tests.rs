//! ISR replication between three in-process combined nodes (each a
//! running server on loopback, sharing metadata through the quorum): a
//! topic with replication factor 3 and `min.insync.replicas=2`.

use std::sync::Arc;
use std::time::Duration;

use proto_kafka::ResponseError;
use sluice_protocol::record::{BatchBuilder, Compression, Record};
use sluice_storage::{AppendOrigin, Log, ReadLimit, TopicPartition};

use super::fetcher::PAUSED;
use crate::broker::Broker;
use crate::partition::{Acks, AppendError};
use crate::test_quorum::{
    cluster, cluster_with, eventually, node, one_cluster_at_a_time, start, Node,
};

pub(crate) fn batch(value: &str) -> Vec<u8> {
    let mut b = BatchBuilder::new(Compression::None, 1);
    b.push(Record::new(
        Some(b"k".to_vec()),
        Some(value.as_bytes().to_vec()),
        1,
    ));
    b.build(0).expect("batch")
}

/// Every byte of `log` from its start to its end.
pub(crate) fn raw(log: &Log) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = log.log_start_offset();
    while at < log.log_end_offset() {
        let r = log
            .read(at, 1 << 20, ReadLimit::LogEnd, true)
            .expect("read");
        let Some(region) = r.region else { break };
        let bytes = region.read_to_vec().expect("bytes");
        let mut last = at;
        for b in sluice_protocol::record::BatchIter::new(&bytes) {
            let (_, h, _) = b.expect("batch");
            last = h.last_offset() + 1;
        }
        out.extend_from_slice(&bytes);
        if last == at {
            break;
        }
        at = last;
    }
    out
}

pub(crate) fn log_of(b: &Broker) -> Arc<Log> {
    b.logs.get(&TopicPartition::new("r", 0)).expect("log")
}

pub(crate) fn isr(b: &Broker) -> Vec<i32> {
    b.image()
        .topic("r")
        .and_then(|t| t.partitions.get(&0).map(|p| p.isr.clone()))
        .unwrap_or_default()
}

/// An acks=all produce of one record on the leader: its end offset, or the
/// error code.
pub(crate) async fn produce(leader: &Broker, value: &str) -> Result<i64, ResponseError> {
    let p = leader.partition("r", 0).expect("led");
    let info = match p
        .append(batch(value), AppendOrigin::Client, Acks::All)
        .await
    {
        Ok(info) => info,
        Err(AppendError::Api(e)) => return Err(e.code),
        Err(AppendError::Storage(e)) => panic!("storage: {e}"),
    };
    let end = info.last_offset + 1;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    p.wait_replicated(end, deadline).await.map(|()| end)
}

/// Topic `r`: one partition, replication factor 3, min.insync.replicas 2.
pub(crate) async fn create_r(nodes: &[Option<Node>]) -> sluice_controller::PartitionImage {
    let state = create_rf3(node(nodes, 2), "r").await;
    let leader = node(nodes, state.leader);
    eventually("the leader leads", || leader.partition("r", 0).is_some()).await;
    state
}

/// Creates topic `name` through `creator`: one partition, replication
/// factor 3, min.insync.replicas 2. Returns the partition's state.
pub(crate) async fn create_rf3(
    creator: Arc<Broker>,
    name: &str,
) -> sluice_controller::PartitionImage {
    let name = name.to_string();
    let topic = tokio::task::spawn_blocking(move || {
        creator.create_topic(
            &name,
            1,
            3,
            &[("min.insync.replicas".into(), "2".into())],
            false,
        )
    })
    .await
    .expect("task")
    .expect("topic");
    topic.partitions[&0].clone()
}

/// Pauses or resumes node `id`'s replica fetchers.
fn pause(nodes: &[Option<Node>], id: i32, paused: bool) {
    let port = node(nodes, id).advertised.port;
    let mut set = PAUSED.lock().unwrap_or_else(|p| p.into_inner());
    if paused {
        set.insert(port);
    } else {
        set.remove(&port);
    }
}

/// The partition's state in `b`'s image.
pub(crate) fn state_in(b: &Broker) -> sluice_controller::PartitionImage {
    b.image()
        .topic("r")
        .and_then(|t| t.partitions.get(&0).cloned())
        .expect("partition")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_follow_the_leader_and_the_isr_follows_them() {
    let _cluster = one_cluster_at_a_time().await;
    let (mut nodes, _dirs) = cluster(1500).await;
    let b = node;
    let state = create_r(&nodes).await;
    let leader_id = state.leader;
    let followers: Vec<i32> = state
        .replicas
        .iter()
        .copied()
        .filter(|&r| r != leader_id)
        .collect();
    assert_eq!(followers.len(), 2);
    let leader = b(&nodes, leader_id);

    // acks=all is answered only once both followers have the records.
    for i in 0..20 {
        let end = produce(&leader, &format!("v{i}")).await.expect("acks=all");
        for &f in &followers {
            assert!(
                log_of(&b(&nodes, f)).log_end_offset() >= end,
                "follower {f} lacks {end}"
            );
        }
    }
    // Every replica holds the same batches at the same offsets, and the
    // followers learn the high watermark.
    let leader_log = log_of(&leader);
    for &f in &followers {
        let fl = log_of(&b(&nodes, f));
        eventually("the follower's high watermark", || {
            fl.high_watermark() == 20
        })
        .await;
        assert_eq!(fl.log_end_offset(), 20);
        assert_eq!(raw(&fl), raw(&leader_log));
        assert_eq!(fl.leader_epochs(), leader_log.leader_epochs());
    }

    // One follower stops fetching: it leaves the ISR after the lag time,
    // and acks=all goes on with two replicas.
    let (f1, f2) = (followers[0], followers[1]);
    pause(&nodes, f2, true);
    eventually("the paused follower out of the ISR", || {
        isr(&leader).len() == 2 && !isr(&leader).contains(&f2)
    })
    .await;
    for id in 1..=3 {
        let n = b(&nodes, id);
        eventually("every node sees the shrunk ISR", || isr(&n).len() == 2).await;
    }
    let end = produce(&leader, "with-two")
        .await
        .expect("acks=all with two");
    assert!(log_of(&b(&nodes, f1)).log_end_offset() >= end);
    assert!(log_of(&b(&nodes, f2)).log_end_offset() < end);

    // The second follower stops too: below min.insync.replicas, acks=all
    // is refused before the append.
    pause(&nodes, f1, true);
    eventually("the leader alone in the ISR", || {
        isr(&leader) == vec![leader_id]
            && leader.partition("r", 0).is_some_and(|p| p.isr_len() == 1)
    })
    .await;
    let before = leader_log.log_end_offset();
    assert_eq!(
        produce(&leader, "refused").await,
        Err(ResponseError::NotEnoughReplicas)
    );
    assert_eq!(leader_log.log_end_offset(), before);

    // Both fetch again: they catch up and rejoin the ISR.
    pause(&nodes, f1, false);
    pause(&nodes, f2, false);
    eventually("both followers back in the ISR", || isr(&leader).len() == 3).await;
    produce(&leader, "all-three").await.expect("acks=all again");

    // A follower node stops and restarts on its folder: it catches up and
    // rejoins the ISR.
    let stopped = nodes[(f2 - 1) as usize].take().expect("running");
    let config = stopped.stop().await;
    eventually("the stopped follower out of the ISR", || {
        !isr(&leader).contains(&f2)
    })
    .await;
    produce(&leader, "while-down")
        .await
        .expect("acks=all with two");
    nodes[(f2 - 1) as usize] = Some(start(config).await);
    eventually("the restarted follower back in the ISR", || {
        isr(&leader).len() == 3
    })
    .await;
    let end = produce(&leader, "last").await.expect("acks=all");
    for &f in &followers {
        let fl = log_of(&b(&nodes, f));
        eventually("caught up", || fl.log_end_offset() == end).await;
        assert_eq!(raw(&fl), raw(&leader_log));
    }

    // The leader's node stops. Once the quorum fences it, a follower of
    // the ISR leads in the next leader epoch, with every acknowledged
    // record, and acks=all goes on there with two replicas.
    let acked = end;
    drop(leader);
    drop(leader_log);
    let config = nodes[(leader_id - 1) as usize]
        .take()
        .expect("running")
        .stop()
        .await;
    let survivor = b(&nodes, f1);
    let new_state = || {
        survivor
            .image()
            .topic("r")
            .and_then(|t| t.partitions.get(&0).cloned())
            .expect("partition")
    };
    eventually("a new leader from the ISR", || {
        let s = new_state();
        s.leader >= 0 && s.leader != leader_id
    })
    .await;
    let elected = new_state();
    assert!(followers.contains(&elected.leader));
    assert_eq!(elected.leader_epoch, state.leader_epoch + 1);
    assert!(!elected.isr.contains(&leader_id));
    let leader = b(&nodes, elected.leader);
    eventually("the new leader leads", || {
        leader.partition("r", 0).is_some()
    })
    .await;
    let leader_log = log_of(&leader);
    assert!(leader_log.log_end_offset() >= acked);
    let end = produce(&leader, "after-failover")
        .await
        .expect("acks=all on the new leader");
    assert_eq!(
        leader_log.leader_epochs().last().copied(),
        Some((elected.leader_epoch, acked))
    );
    // The old leader comes back as a follower: it truncates to where it
    // agrees with the new leader, catches up and rejoins the ISR.
    nodes[(leader_id - 1) as usize] = Some(start(config).await);
    eventually("the old leader back in the ISR", || isr(&leader).len() == 3).await;
    let end = produce(&leader, "final").await.expect("acks=all").max(end);
    for id in 1..=3 {
        let l = log_of(&b(&nodes, id));
        eventually("every replica caught up", || l.log_end_offset() == end).await;
        assert_eq!(raw(&l), raw(&leader_log), "replica {id}");
    }

    drop(leader);
    drop(leader_log);
    for n in nodes.into_iter().flatten() {
        n.stop().await;
    }
}

/// KIP-279 across a failover: records the old leader wrote that no
/// follower has are truncated away when it comes back as a follower of
/// the new leader, which has written other records at those offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deposed_leader_truncates_what_the_new_leader_does_not_have() {
    let _cluster = one_cluster_at_a_time().await;
    // A long lag time: the ISR must not shrink while followers pause.
    let (mut nodes, _dirs) = cluster(30_000).await;
    let state = create_r(&nodes).await;
    let old_id = state.leader;
    let followers: Vec<i32> = state
        .replicas
        .iter()
        .copied()
        .filter(|&r| r != old_id)
        .collect();
    let old = node(&nodes, old_id);
    for i in 0..5 {
        produce(&old, &format!("v{i}")).await.expect("acks=all");
    }
    // Both followers stop fetching; the leader takes three acks=1
    // batches no follower gets.
    for &f in &followers {
        pause(&nodes, f, true);
    }
    // Fetches already parked on the leader end within
    // replica.fetch.wait.max.ms; the paused fetchers send no more.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let p = old.partition("r", 0).expect("led");
    for i in 0..3 {
        p.append(
            batch(&format!("lost{i}")),
            AppendOrigin::Client,
            Acks::Leader,
        )
        .await
        .map_err(|_| "append")
        .expect("acks=1");
    }
    assert_eq!(p.log().log_end_offset(), 8);
    drop(p);
    drop(old);
    let config = nodes[(old_id - 1) as usize]
        .take()
        .expect("running")
        .stop()
        .await;
    for &f in &followers {
        pause(&nodes, f, false);
    }
    // A follower is elected; it writes other records at offsets 5 to 7.
    let survivor = node(&nodes, followers[0]);
    eventually("a new leader", || {
        let s = state_in(&survivor);
        s.leader >= 0 && s.leader != old_id
    })
    .await;
    let elected = state_in(&survivor);
    let leader = node(&nodes, elected.leader);
    eventually("the new leader leads", || {
        leader.partition("r", 0).is_some()
    })
    .await;
    for i in 0..3 {
        produce(&leader, &format!("new{i}"))
            .await
            .expect("acks=all");
    }
    let leader_log = log_of(&leader);
    assert_eq!(leader_log.log_end_offset(), 8);
    // The old leader restarts: it truncates to offset 5 and copies the
    // new leader's records, then rejoins the ISR.
    nodes[(old_id - 1) as usize] = Some(start(config).await);
    let back = node(&nodes, old_id);
    let back_log = log_of(&back);
    eventually("the old leader caught up", || {
        back_log.log_end_offset() == 8 && back_log.leader_epochs() == leader_log.leader_epochs()
    })
    .await;
    assert_eq!(raw(&back_log), raw(&leader_log));
    assert_eq!(
        back_log.leader_epochs(),
        vec![(0, 0), (elected.leader_epoch, 5)]
    );
    eventually("the old leader back in the ISR", || {
        state_in(&leader).isr.len() == 3
    })
    .await;

    drop((leader, leader_log, survivor, back, back_log));
    for n in nodes.into_iter().flatten() {
        n.stop().await;
    }
}

/// A partition a node starts to follow while its fetch from that leader
/// waits at the leader (idle partitions, a long
/// `replica.fetch.wait.max.ms`) joins a fetch at once: acks=all on a new
/// topic does not wait for the idle fetch to run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_partition_does_not_wait_for_an_idle_replica_fetch() {
    let _cluster = one_cluster_at_a_time().await;
    // The idle fetches would wait a minute; the produce below gives up
    // after 10 s.
    let (nodes, _dirs) = cluster_with(120_000, &[("replica.fetch.wait.max.ms", "60000")]).await;
    // Every node leads a partition of `idle` and follows the other two:
    // each node fetches from both others, and those fetches wait.
    let creator = node(&nodes, 1);
    let idle = tokio::task::spawn_blocking(move || creator.create_topic("idle", 3, 3, &[], false))
        .await
        .expect("task")
        .expect("topic");
    let mut leaders: Vec<i32> = idle.partitions.values().map(|p| p.leader).collect();
    leaders.sort_unstable();
    assert_eq!(leaders, vec![1, 2, 3], "one partition led by each node");
    for id in 1..=3 {
        let n = node(&nodes, id);
        eventually("the idle topic's logs", || {
            (0..3).all(|p| n.logs.get(&TopicPartition::new("idle", p)).is_some())
        })
        .await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let state = create_r(&nodes).await;
    let leader = node(&nodes, state.leader);
    let end = produce(&leader, "first")
        .await
        .expect("acks=all without waiting for the idle fetches");
    for f in state.replicas.iter().filter(|&&r| r != state.leader) {
        assert!(log_of(&node(&nodes, *f)).log_end_offset() >= end);
    }
}

/// A follower's fetch that reaches the new leader before that node has
/// applied the image making it the leader waits there (within the fetch's
/// max wait) rather than being refused: a refusal would hold the partition
/// back for `replica.fetch.backoff.ms` on the follower, and acks=all with
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fetch_reaching_a_leader_behind_on_metadata_waits_instead_of_backing_off() {
    use crate::metadata_follower::HELD;
    let _cluster = one_cluster_at_a_time().await;
    // A refused partition would wait a minute; the produce below gives up
    // after 10 s.
    let (nodes, _dirs) = cluster_with(
        120_000,
        &[
            ("replica.fetch.wait.max.ms", "5000"),
            ("replica.fetch.backoff.ms", "60000"),
        ],
    )
    .await;
    let port = |id: i32| node(&nodes, id).advertised.port;
    /// Releases the nodes when the test ends, a panic included.
    struct Release(Vec<u16>);
    impl Drop for Release {
        fn drop(&mut self) {
            let mut set = HELD.lock().unwrap_or_else(|p| p.into_inner());
            for p in &self.0 {
                set.remove(p);
            }
        }
    }
    let _release = Release((1..=3).map(port).collect());
    let hold = |ids: &[i32], held: bool| {
        let mut set = HELD.lock().unwrap_or_else(|p| p.into_inner());
        for &id in ids {
            if held {
                set.insert(port(id));
            } else {
                set.remove(&port(id));
            }
        }
    };
    // Every node holds the image that creates the topic; the followers
    // then apply it and fetch while the leader still holds it. The
    // creating node (2) applies its own creation at once, so it must not
    // lead: topics are created until one is led by another node.
    let creator = 2;
    let mut created = None;
    for i in 0..20 {
        let name = format!("r{i}");
        hold(&[1, 2, 3], true);
        let state = create_rf3(node(&nodes, creator), &name).await;
        if state.leader != creator {
            created = Some((name, state));
            break;
        }
        hold(&[1, 2, 3], false);
    }
    let (name, state) = created.expect("a topic led by another node than its creator");
    let tp = TopicPartition::new(&name, 0);
    let leader = node(&nodes, state.leader);
    let followers: Vec<i32> = state
        .replicas
        .iter()
        .copied()
        .filter(|&r| r != state.leader)
        .collect();
    hold(&followers, false);
    for &f in &followers {
        let n = node(&nodes, f);
        eventually("the follower's log", || n.logs.get(&tp).is_some()).await;
    }
    // Their fetches reach the leader before it leads.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        leader.partition(&name, 0).is_none(),
        "the leader still holds the image"
    );
    hold(&[state.leader], false);
    eventually("the leader leads", || leader.partition(&name, 0).is_some()).await;
    let p = leader.partition(&name, 0).expect("led");
    let info = p
        .append(batch("first"), AppendOrigin::Client, Acks::All)
        .await
        .unwrap_or_else(|_| panic!("append"));
    let end = info.last_offset + 1;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    p.wait_replicated(end, deadline)
        .await
        .expect("acks=all without a follower backing off");
    for &f in &followers {
        let log = node(&nodes, f).logs.get(&tp).expect("log");
        assert!(log.log_end_offset() >= end);
    }
}
