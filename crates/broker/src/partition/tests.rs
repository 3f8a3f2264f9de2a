//! The partition layer: leader epochs stamped into batches, the high
//! watermark, acks=all and min.insync.replicas, and fetch wake-ups that
//! reach only the fetches parked on the appended partition.

use std::sync::Arc;
use std::time::Duration;

use sluice_protocol::record::{BatchBuilder, BatchIter, Compression, Record};
use sluice_storage::ReadLimit;
use tokio::sync::Notify;

use super::*;
use crate::broker::CONSUMER_OFFSETS_TOPIC;
use crate::handlers::test_support::open_broker;

fn batch(value: &[u8]) -> Vec<u8> {
    let mut b = BatchBuilder::new(Compression::None, 1);
    b.push(Record::new(Some(b"k".to_vec()), Some(value.to_vec()), 1));
    b.build(0).expect("batch")
}

/// Whether `n` was woken (a stored wake-up counts).
async fn woken(n: &Notify) -> bool {
    tokio::time::timeout(Duration::from_millis(50), n.notified())
        .await
        .is_ok()
}

#[tokio::test]
async fn appends_advance_the_high_watermark_and_stamp_the_leader_epoch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[]);
    broker.create_topic("t", 1, 1, &[], false).expect("topic");
    let p = broker.partition("t", 0).expect("led");
    assert_eq!(p.leader_epoch(), 0);
    let info = p
        .append(batch(b"a"), AppendOrigin::Client, Acks::All)
        .await
        .expect("append");
    let far = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    p.wait_replicated(info.last_offset + 1, far)
        .await
        .expect("replicated");
    assert_eq!(p.log().high_watermark(), 1);
    // A new leader epoch from the metadata is stamped into later batches.
    let mut state = broker.image().topic("t").expect("t").partitions[&0].clone();
    state.leader_epoch = 4;
    p.update(&state);
    p.append(batch(b"b"), AppendOrigin::Client, Acks::Leader)
        .await
        .expect("append");
    let r = p
        .log()
        .read(1, 1 << 20, ReadLimit::HighWatermark, true)
        .expect("read");
    let bytes = r.region.expect("region").read_to_vec().expect("bytes");
    let (_, h, _) = BatchIter::new(&bytes).next().expect("batch").expect("ok");
    assert_eq!(h.partition_leader_epoch, 4);
    assert_eq!(p.log().high_watermark(), 2);
    assert_eq!(p.log().leader_epochs(), vec![(0, 0), (4, 1)]);
    broker.shutdown().expect("shutdown");
}

#[tokio::test]
async fn acks_all_needs_min_insync_replicas() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[]);
    let configs = [("min.insync.replicas".to_string(), "2".to_string())];
    broker
        .create_topic("t", 1, 1, &configs, false)
        .expect("topic");
    let p = broker.partition("t", 0).expect("led");
    match p.append(batch(b"a"), AppendOrigin::Client, Acks::All).await {
        Err(AppendError::Api(e)) => {
            assert_eq!(e.code, ResponseError::NotEnoughReplicas);
            assert!(
                e.message.as_deref().unwrap_or("").contains("min.isr"),
                "{e:?}"
            );
        }
        other => panic!("expected NOT_ENOUGH_REPLICAS, got {other:?}"),
    }
    assert_eq!(p.log().log_end_offset(), 0, "nothing appended");
    // acks=1 does not ask for the ISR.
    p.append(batch(b"a"), AppendOrigin::Client, Acks::Leader)
        .await
        .expect("acks=1");
    broker.shutdown().expect("shutdown");
}

#[tokio::test]
async fn parked_fetches_wake_on_appends_to_their_own_partition_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[("offsets.topic.num.partitions", "2")]);
    broker.create_topic("a", 2, 1, &[], false).expect("topic");
    broker.ensure_offsets_topic(2).expect("offsets");
    let a0 = broker.partition("a", 0).expect("a0");
    let a1 = broker.partition("a", 1).expect("a1");
    let parked_a0 = Arc::new(Notify::new());
    let parked_a1 = Arc::new(Notify::new());
    a0.park_fetch(&parked_a0);
    a1.park_fetch(&parked_a1);

    a1.append(batch(b"x"), AppendOrigin::Client, Acks::Leader)
        .await
        .expect("append");
    assert!(woken(&parked_a1).await, "the fetch on a-1 wakes");
    assert!(!woken(&parked_a0).await, "the fetch on a-0 does not");

    // A group commit to __consumer_offsets wakes the fetches parked on
    // that partition, and only those.
    let shard = broker.groups.shard(&broker, "g").expect("shard");
    let p = broker.groups.partition_for(&broker, "g");
    let parked_this = Arc::new(Notify::new());
    let parked_other = Arc::new(Notify::new());
    broker
        .partition(CONSUMER_OFFSETS_TOPIC, p)
        .expect("offsets partition")
        .park_fetch(&parked_this);
    broker
        .partition(CONSUMER_OFFSETS_TOPIC, 1 - p)
        .expect("other offsets partition")
        .park_fetch(&parked_other);
    {
        let mut s = crate::groups::lock(&shard);
        let records = s
            .offsets
            .commit(
                "g",
                &[sluice_coordinator::offsets::PartitionCommit {
                    topic: "a".into(),
                    partition: 0,
                    offset: 1,
                    leader_epoch: -1,
                    metadata: None,
                }],
                crate::groups::now_ms(),
                None,
            )
            .records;
        broker
            .groups
            .commit_records(&mut s, &records)
            .expect("commit");
    }
    assert!(
        woken(&parked_this).await,
        "the commit wakes its partition's fetches"
    );
    assert!(!woken(&parked_other).await);
    assert!(!woken(&parked_a0).await);
    broker.shutdown().expect("shutdown");
}

#[tokio::test]
async fn a_finished_fetch_leaves_no_waiter_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[]);
    broker.create_topic("t", 1, 1, &[], false).expect("topic");
    let p = broker.partition("t", 0).expect("led");
    for _ in 0..100 {
        let w = Arc::new(Notify::new());
        p.park_fetch(&w);
    }
    let kept = Arc::new(Notify::new());
    p.park_fetch(&kept);
    assert_eq!(lock(&p.waiters).len(), 1, "dead registrations are dropped");
    broker.shutdown().expect("shutdown");
}

#[tokio::test]
async fn acks_all_waits_for_the_isr_and_answers_kafkas_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[]);
    broker
        .create_topic(
            "t",
            1,
            1,
            &[("min.insync.replicas".into(), "2".into())],
            false,
        )
        .expect("topic");
    let p = broker.partition("t", 0).expect("led");
    // The metadata makes broker 2 a follower in the ISR (a new leader
    // epoch: a new leader state).
    let me = broker.node_id;
    let mut state = broker.image().topic("t").expect("t").partitions[&0].clone();
    state.replicas = vec![me, 2];
    state.isr = vec![me, 2];
    state.leader_epoch = 1;
    p.update(&state);
    let info = p
        .append(batch(b"a"), AppendOrigin::Client, Acks::All)
        .await
        .expect("an ISR of two");
    // Not replicated: the high watermark waits for the follower.
    let soon = tokio::time::Instant::now() + Duration::from_millis(100);
    assert_eq!(
        p.wait_replicated(info.last_offset + 1, soon).await,
        Err(ResponseError::RequestTimedOut)
    );
    assert_eq!(p.log().high_watermark(), 0);
    // The follower fetches from offset 1: it has the record.
    p.on_follower_fetch(2, 1);
    assert_eq!(p.log().high_watermark(), 1);
    let far = tokio::time::Instant::now() + Duration::from_secs(5);
    assert_eq!(p.wait_replicated(1, far).await, Ok(()));
    // The ISR shrinks to the leader under a waiting batch: covered, but
    // by too few replicas.
    let info = p
        .append(batch(b"b"), AppendOrigin::Client, Acks::All)
        .await
        .expect("an ISR of two");
    state.isr = vec![me];
    state.partition_epoch += 1;
    p.update(&state);
    assert_eq!(p.log().high_watermark(), 2);
    assert_eq!(
        p.wait_replicated(info.last_offset + 1, far).await,
        Err(ResponseError::NotEnoughReplicasAfterAppend)
    );
    // And the next acks=all append is refused before it is written.
    match p.append(batch(b"c"), AppendOrigin::Client, Acks::All).await {
        Err(AppendError::Api(e)) => assert_eq!(e.code, ResponseError::NotEnoughReplicas),
        other => panic!("expected NOT_ENOUGH_REPLICAS, got {other:?}"),
    }
    assert_eq!(p.log().log_end_offset(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_all_waiters_answer_not_leader_when_the_leadership_moves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[]);
    broker.create_topic("t", 1, 1, &[], false).expect("topic");
    let p = broker.partition("t", 0).expect("led");
    let me = broker.node_id;
    let topic = broker.image().topic("t").expect("t").clone();
    let mut state = topic.partitions[&0].clone();
    state.replicas = vec![me, 2];
    state.isr = vec![me, 2];
    state.leader_epoch = 1;
    p.update(&state);
    let info = p
        .append(batch(b"a"), AppendOrigin::Client, Acks::All)
        .await
        .expect("an ISR of two");
    let waiter = {
        let p = Arc::clone(&p);
        tokio::spawn(async move {
            let far = tokio::time::Instant::now() + Duration::from_secs(60);
            p.wait_replicated(info.last_offset + 1, far).await
        })
    };
    // Broker 2 leads now (the image a controlled shutdown or a fencing
    // commits): this node's partition layer drops the partition.
    let mut image = (*broker.image()).clone();
    image.apply(&sluice_controller::MetadataRecord::Partition {
        partition_id: 0,
        topic_id: topic.id,
        replicas: vec![me, 2],
        isr: vec![2],
        leader: 2,
        leader_epoch: 2,
        partition_epoch: state.partition_epoch + 1,
        removing_replicas: vec![],
        adding_replicas: vec![],
    });
    broker
        .partitions
        .sync(&image, me, 30_000, false, |tp| broker.logs.get(tp));
    assert!(broker.partitions.get("t", 0).is_none());
    assert_eq!(
        waiter.await.expect("waiter"),
        Err(ResponseError::NotLeaderOrFollower)
    );
    drop(p);
    broker.shutdown().expect("shutdown");
}
