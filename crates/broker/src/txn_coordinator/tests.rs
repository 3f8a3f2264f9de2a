//! The runtime against a real data folder: loads after a restart,
//! timeouts and expiration with shortened timers, append failures,
//! skipped markers, and loads that do not block other partitions.

use std::time::Duration;

use proto_kafka::messages::{ApiKey, InitProducerIdResponse};
use sluice_coordinator::txn::ListTransactionsFilter;

use super::testing::{
    add, end, init, init_request, markers, produce, producer, start, state, wait_state,
};
use super::*;
use crate::handlers::test_support::{call, open_broker};

/// A transaction left in PrepareCommit (markers never sent: no
/// background task) gets its markers after a restart, from the load, and
/// completes; the data it committed stays, the producer can go on.
#[tokio::test]
async fn load_after_restart_writes_the_markers_of_prepared_transactions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let overrides = [("transaction.state.log.num.partitions", "2")];
    let broker = open_broker(dir.path(), &overrides);
    broker.create_topic("t", 2, 1, &[], false).expect("topic");
    let (pid, epoch) = init(&broker, "committer", 60_000).await;
    let (apid, aepoch) = init(&broker, "aborter", 60_000).await;
    assert_eq!(
        add(&broker, "committer", pid, epoch, &[("t", &[0, 1])]).await,
        0
    );
    assert_eq!(
        add(&broker, "aborter", apid, aepoch, &[("t", &[1])]).await,
        0
    );
    produce(&broker, "t", 0, pid, epoch, 0, 3)
        .await
        .expect("produce");
    produce(&broker, "t", 1, apid, aepoch, 0, 1)
        .await
        .expect("produce");
    assert_eq!(end(&broker, "committer", pid, epoch, true).await, 0);
    assert_eq!(end(&broker, "aborter", apid, aepoch, false).await, 0);
    assert_eq!(
        state(&broker, "committer"),
        Some(TransactionState::PrepareCommit)
    );
    assert_eq!(
        state(&broker, "aborter"),
        Some(TransactionState::PrepareAbort)
    );
    assert!(markers(&broker, "t", 0).is_empty());
    broker.shutdown().expect("shutdown");
    drop(broker);

    let broker = open_broker(dir.path(), &overrides);
    // Loaded at start: the state is there before any request.
    assert_eq!(
        state(&broker, "committer"),
        Some(TransactionState::PrepareCommit)
    );
    let runner = start(&broker);
    wait_state(&broker, "committer", Some(TransactionState::CompleteCommit)).await;
    wait_state(&broker, "aborter", Some(TransactionState::CompleteAbort)).await;
    assert_eq!(markers(&broker, "t", 0), vec![(pid, epoch, true, 0)]);
    let mut on_1 = markers(&broker, "t", 1);
    on_1.sort();
    let mut want = vec![(pid, epoch, true, 0), (apid, aepoch, false, 0)];
    want.sort();
    assert_eq!(on_1, want);
    // The next transaction of the same producer.
    assert_eq!(
        add(&broker, "committer", pid, epoch, &[("t", &[0])]).await,
        0
    );
    runner.stop().await;
    broker.shutdown().expect("shutdown");
}

/// `transaction.timeout.ms`: an open transaction is aborted with a bumped
/// epoch (the producer is fenced) at the next abort check; after a
/// restart an open transaction still times out.
#[tokio::test]
async fn timed_out_transactions_abort_with_an_epoch_bump_also_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let overrides = [
        ("transaction.state.log.num.partitions", "1"),
        (
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            "20",
        ),
    ];
    let broker = open_broker(dir.path(), &overrides);
    broker.create_topic("t", 1, 1, &[], false).expect("topic");
    let runner = start(&broker);
    let (pid, epoch) = init(&broker, "slow", 100).await;
    assert_eq!(add(&broker, "slow", pid, epoch, &[("t", &[0])]).await, 0);
    produce(&broker, "t", 0, pid, epoch, 0, 1)
        .await
        .expect("produce");
    wait_state(&broker, "slow", Some(TransactionState::CompleteAbort)).await;
    assert_eq!(producer(&broker, "slow"), Some((pid, epoch + 1)));
    assert_eq!(markers(&broker, "t", 0), vec![(pid, epoch + 1, false, 0)]);
    // The old producer is fenced.
    assert_eq!(end(&broker, "slow", pid, epoch, true).await, 90);
    let fenced = produce(&broker, "t", 0, pid, epoch, 1, 1).await;
    assert!(fenced.is_err(), "a zombie's batch after the abort");
    runner.stop().await;

    // An open transaction across a restart (no background task before it).
    let (pid2, epoch2) = init(&broker, "restarted", 100).await;
    assert_eq!(
        add(&broker, "restarted", pid2, epoch2, &[("t", &[0])]).await,
        0
    );
    broker.shutdown().expect("shutdown");
    drop(broker);
    let broker = open_broker(dir.path(), &overrides);
    assert_eq!(state(&broker, "restarted"), Some(TransactionState::Ongoing));
    let runner = start(&broker);
    wait_state(&broker, "restarted", Some(TransactionState::CompleteAbort)).await;
    assert_eq!(producer(&broker, "restarted"), Some((pid2, epoch2 + 1)));
    runner.stop().await;
    broker.shutdown().expect("shutdown");
}

/// `transactional.id.expiration.ms`: an idle id is removed (a tombstone
/// in `__transaction_state`) and stays removed after a restart; the next
/// InitProducerId starts it afresh with a new producer id.
#[tokio::test]
async fn expired_transactional_ids_are_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let overrides = [
        ("transaction.state.log.num.partitions", "1"),
        ("transactional.id.expiration.ms", "50"),
        (
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            "20",
        ),
    ];
    let broker = open_broker(dir.path(), &overrides);
    let runner = start(&broker);
    let (pid, _) = init(&broker, "idle", 60_000).await;
    wait_state(&broker, "idle", None).await;
    let listed = broker
        .txns
        .list_transactions(&ListTransactionsFilter::default())
        .expect("list");
    assert!(listed.transactions.is_empty(), "{listed:?}");
    runner.stop().await;
    broker.shutdown().expect("shutdown");
    drop(broker);
    let broker = open_broker(dir.path(), &overrides);
    assert_eq!(state(&broker, "idle"), None, "the tombstone is replayed");
    let (again, epoch) = init(&broker, "idle", 60_000).await;
    assert_eq!(epoch, 0);
    assert_ne!(again, pid);
    broker.shutdown().expect("shutdown");
}

/// An append to `__transaction_state` that cannot meet
/// `min.insync.replicas` is COORDINATOR_NOT_AVAILABLE (Kafka's mapping of
/// NOT_ENOUGH_REPLICAS), and nothing is written.
#[tokio::test]
async fn appends_below_min_isr_are_coordinator_not_available() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[("transaction.state.log.num.partitions", "1")]);
    // One node: the topic gets one replica and a `min.insync.replicas`
    // capped to it; raising it leaves the ISR short.
    broker.ensure_transaction_state_topic().expect("topic");
    broker
        .edit_topic_configs(TRANSACTION_STATE_TOPIC, false, |current, _| {
            let mut next = current.clone();
            next.insert("min.insync.replicas".into(), "2".into());
            Ok(next)
        })
        .expect("min.insync.replicas");
    let r: InitProducerIdResponse = call(
        &broker,
        ApiKey::InitProducerId,
        4,
        &init_request("tx", 60_000),
    )
    .await
    .expect("response");
    assert_eq!(
        (r.error_code, r.producer_id.0, r.producer_epoch),
        (ResponseError::CoordinatorNotAvailable.code(), -1, -1)
    );
    let log = broker.log(TRANSACTION_STATE_TOPIC, 0).expect("log");
    assert_eq!(log.log_end_offset(), 0);
    broker.shutdown().expect("shutdown");
}

/// Markers for partitions whose topic was deleted are skipped, as Kafka's
/// marker channel drops partitions without a leader; the transaction
/// completes.
#[tokio::test]
async fn markers_of_deleted_topics_are_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[("transaction.state.log.num.partitions", "1")]);
    broker
        .create_topic("gone", 1, 1, &[], false)
        .expect("topic");
    broker
        .create_topic("kept", 1, 1, &[], false)
        .expect("topic");
    let runner = start(&broker);
    let (pid, epoch) = init(&broker, "tx", 60_000).await;
    assert_eq!(
        add(&broker, "tx", pid, epoch, &[("gone", &[0]), ("kept", &[0])]).await,
        0
    );
    broker.delete_topic("gone").expect("delete");
    assert_eq!(end(&broker, "tx", pid, epoch, true).await, 0);
    wait_state(&broker, "tx", Some(TransactionState::CompleteCommit)).await;
    assert_eq!(markers(&broker, "kept", 0), vec![(pid, epoch, true, 0)]);
    runner.stop().await;
    broker.shutdown().expect("shutdown");
}

/// A marker refused with INVALID_PRODUCER_EPOCH (the partition saw a
/// newer epoch of the producer) stops the transaction's markers: it stays
/// PrepareCommit and requests get CONCURRENT_TRANSACTIONS, as Kafka
/// does, until the partition is reloaded.
#[tokio::test]
async fn fenced_markers_leave_the_transaction_prepared() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[("transaction.state.log.num.partitions", "1")]);
    broker.create_topic("t", 1, 1, &[], false).expect("topic");
    let runner = start(&broker);
    let (pid, epoch) = init(&broker, "tx", 60_000).await;
    assert_eq!(add(&broker, "tx", pid, epoch, &[("t", &[0])]).await, 0);
    // A batch of the same producer id at a later epoch (a raw client).
    let part = broker.partition("t", 0).expect("partition");
    let now = now_ms();
    let mut b = BatchBuilder::new(Compression::None, now).producer(
        sluice_protocol::record::codec::ProducerInfo {
            producer_id: pid,
            producer_epoch: epoch + 5,
            base_sequence: 0,
        },
        false,
    );
    b.push(Record::new(None, Some(b"v".to_vec()), now));
    part.append_for_coordinator(b.build(0).expect("batch"))
        .expect("append");
    assert_eq!(end(&broker, "tx", pid, epoch, true).await, 0);
    // The marker is refused at once; give the task time to have tried
    // (and, were it retrying, to have retried several times).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(add(&broker, "tx", pid, epoch, &[("t", &[0])]).await, 51);
    assert_eq!(state(&broker, "tx"), Some(TransactionState::PrepareCommit));
    assert_eq!(end(&broker, "tx", pid, epoch, true).await, 51);
    assert!(markers(&broker, "t", 0).is_empty());
    runner.stop().await;
    broker.shutdown().expect("shutdown");
}

/// Loading one partition holds only its own slot: while partition A's
/// slot is held (a load under way), ids of partition B are served,
/// ListTransactions answers COORDINATOR_LOAD_IN_PROGRESS, and A's request
/// completes once the slot is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_does_not_block_other_partitions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[("transaction.state.log.num.partitions", "4")]);
    broker.ensure_transaction_state_topic().expect("topic");
    let (a, b) = (0..100)
        .map(|i| format!("id-{i}"))
        .fold((None, None), |(a, b), id| match partition_for(&id, 4) {
            0 if a.is_none() => (Some(id), b),
            1 if b.is_none() => (a, Some(id)),
            _ => (a, b),
        });
    let (a, b) = (
        a.expect("an id of partition 0"),
        b.expect("an id of partition 1"),
    );
    // A thread holds partition 0's slot, as its load would.
    let slot = broker.txns.slot(0);
    lock(&broker.txns.loading).insert(0);
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let loaded = lock(&slot);
        held_tx.send(loaded.is_none()).expect("send");
        let _ = release_rx.recv();
    });
    assert!(held_rx.recv().expect("held"), "partition 0 not loaded yet");
    // B loads and answers while A's slot is held.
    let (pid, epoch) = init(&broker, &b, 60_000).await;
    assert_eq!((pid, epoch), (0, 0));
    assert_eq!(
        broker
            .txns
            .list_transactions(&ListTransactionsFilter::default()),
        Err(KafkaError::CoordinatorLoadInProgress)
    );
    // A waits for the slot.
    let waiting = {
        let broker = Arc::clone(&broker);
        let a = a.clone();
        tokio::spawn(async move { init(&broker, &a, 60_000).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished(), "A was served without its partition");
    lock(&broker.txns.loading).remove(&0);
    release_tx.send(()).expect("release");
    holder.join().expect("holder");
    assert_eq!(waiting.await.expect("task"), (1, 0));
    let listed = broker
        .txns
        .list_transactions(&ListTransactionsFilter::default())
        .expect("list");
    assert_eq!(listed.transactions.len(), 2);
    broker.shutdown().expect("shutdown");
}
