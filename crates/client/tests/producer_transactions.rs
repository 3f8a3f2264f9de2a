//! The transactional producer and the read_committed consumer against an
//! in-process broker: interleaved commits and aborts over three partitions,
//! offsets sent to a transaction, zombie fencing, the abortable error
//! path, and the state-machine errors Kafka's client gives for misuse.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::TestServer;
use sluice_client::admin::{IsolationLevel, NewTopic, OffsetSpec};
use sluice_client::consumer::{
    Consumer, ConsumerConfig, ConsumerGroupMetadata, ConsumerRecord, OffsetAndMetadata, OffsetReset,
};
use sluice_client::producer::TransactionState;
use sluice_client::{ClientError, Producer, ProducerConfig, ProducerRecord, TopicPartition};

async fn server() -> TestServer {
    common::start_with(|c| {
        c.set("group.initial.rebalance.delay.ms", "0")
            .expect("rebalance delay");
    })
    .await
}

async fn txn_producer(server: &TestServer, id: &str) -> Producer {
    let mut cfg = ProducerConfig::new(server.client_config()).transactional(id);
    cfg.linger_ms = 1;
    cfg.max_block_ms = 30_000;
    Producer::new(cfg).await.expect("transactional producer")
}

fn consumer_config(
    server: &TestServer,
    group: Option<&str>,
    isolation: IsolationLevel,
) -> ConsumerConfig {
    let mut c = ConsumerConfig::new(server.client_config());
    c.group_id = group.map(str::to_string);
    c.auto_offset_reset = OffsetReset::Earliest;
    c.enable_auto_commit = false;
    c.isolation_level = isolation;
    c.heartbeat_interval = Duration::from_millis(200);
    c.session_timeout = Duration::from_secs(10);
    c.fetch_max_wait = Duration::from_millis(100);
    c
}

/// Reads `partitions` from the beginning with `isolation` until every
/// partition's position reached `ends` (the log end offsets); returns the
/// values per partition in offset order.
async fn read_all(
    server: &TestServer,
    isolation: IsolationLevel,
    ends: &BTreeMap<TopicPartition, i64>,
) -> BTreeMap<i32, Vec<String>> {
    let mut consumer = Consumer::new(consumer_config(server, None, isolation))
        .await
        .expect("consumer");
    let tps: Vec<TopicPartition> = ends.keys().cloned().collect();
    consumer.assign(&tps).expect("assign");
    let mut out: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for r in consumer
            .poll(Duration::from_millis(200))
            .await
            .expect("poll")
        {
            out.entry(r.partition).or_default().push(value(&r));
        }
        let mut done = true;
        for (tp, end) in ends {
            if consumer.position(tp).await.expect("position") < *end {
                done = false;
            }
        }
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{isolation:?} did not reach {ends:?}"
        );
    }
    consumer.close().await.expect("close");
    out
}

fn value(r: &ConsumerRecord) -> String {
    String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned()
}

async fn log_ends(
    server: &TestServer,
    topic: &str,
    partitions: i32,
) -> BTreeMap<TopicPartition, i64> {
    let admin = server.admin().await;
    let specs: Vec<(TopicPartition, OffsetSpec)> = (0..partitions)
        .map(|p| (TopicPartition::new(topic, p), OffsetSpec::Latest))
        .collect();
    admin
        .list_offsets(&specs)
        .await
        .expect("list offsets")
        .into_iter()
        .map(|(tp, info)| (tp, info.offset))
        .collect()
}

/// Ten transactions over three partitions, every third one aborted: a
/// read_committed consumer sees exactly the committed records, in order
/// per partition (markers and aborted batches skipped), and
/// read_uncommitted sees every record. Control batches take offsets, so
/// the log ends past the record count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_and_abort_interleaved_over_three_partitions() {
    let server = server().await;
    server.create_topic("tx-orders", 3).await;
    let producer = txn_producer(&server, "tx-interleaved").await;
    assert_eq!(
        producer.transaction_state(),
        Some(TransactionState::Uninitialized)
    );
    producer.init_transactions().await.expect("init");
    assert_eq!(producer.transaction_state(), Some(TransactionState::Ready));
    let (pid, epoch) = producer.producer_id_and_epoch().expect("producer id");
    assert!(pid >= 0 && epoch >= 0);

    let mut committed: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    let mut everything: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for txn in 0..10 {
        producer.begin_transaction().expect("begin");
        assert_eq!(
            producer.transaction_state(),
            Some(TransactionState::InTransaction)
        );
        let abort = txn % 3 == 1;
        let mut deliveries = Vec::new();
        for i in 0..9 {
            let partition = i % 3;
            let v = format!("t{txn}-r{i}");
            everything.entry(partition).or_default().push(v.clone());
            if !abort {
                committed.entry(partition).or_default().push(v.clone());
            }
            deliveries.push(
                producer
                    .send(ProducerRecord::new("tx-orders", v.into_bytes()).partition(partition))
                    .await
                    .expect("send"),
            );
        }
        if abort {
            // Make sure the records are written before the abort, so that
            // read_uncommitted sees them.
            producer.flush().await;
            for d in deliveries {
                d.await.expect("written before the abort");
            }
            producer.abort_transaction().await.expect("abort");
        } else {
            producer.commit_transaction().await.expect("commit");
            for d in deliveries {
                d.await.expect("delivered");
            }
        }
        assert_eq!(producer.transaction_state(), Some(TransactionState::Ready));
    }
    assert_eq!(
        producer.producer_id_and_epoch(),
        Some((pid, epoch)),
        "no epoch bump without an error"
    );
    producer.close().await.expect("close");

    // 10 transactions x 3 records + one marker per transaction (the last
    // markers may still be on their way).
    let deadline = Instant::now() + Duration::from_secs(10);
    let ends = loop {
        let ends = log_ends(&server, "tx-orders", 3).await;
        if ends.values().all(|e| *e == 40) {
            break ends;
        }
        assert!(Instant::now() < deadline, "log ends {ends:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let read = read_all(&server, IsolationLevel::ReadCommitted, &ends).await;
    assert_eq!(read, committed);
    let read = read_all(&server, IsolationLevel::ReadUncommitted, &ends).await;
    assert_eq!(read, everything);
    server.stop().await;
}

/// The last stable offset holds read_committed consumers (and ListOffsets
/// latest under read_committed) at the first open transaction; the commit
/// releases it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_stops_at_an_open_transaction() {
    let server = server().await;
    server.create_topic("tx-lso", 1).await;
    let producer = txn_producer(&server, "tx-lso").await;
    producer.init_transactions().await.expect("init");
    producer.begin_transaction().expect("begin");
    for i in 0..5 {
        let d = producer
            .send(ProducerRecord::new(
                "tx-lso",
                format!("open-{i}").into_bytes(),
            ))
            .await
            .expect("send");
        producer.flush().await;
        d.await.expect("written");
    }
    let tp = TopicPartition::new("tx-lso", 0);
    let admin = server.admin().await;
    let latest = |isolation| {
        let admin = admin.clone();
        let tp = tp.clone();
        async move {
            admin
                .list_offsets_with_isolation(&[(tp.clone(), OffsetSpec::Latest)], isolation)
                .await
                .expect("list offsets")[&tp]
                .offset
        }
    };
    assert_eq!(latest(IsolationLevel::ReadUncommitted).await, 5);
    assert_eq!(
        latest(IsolationLevel::ReadCommitted).await,
        0,
        "LSO at the open transaction"
    );

    let mut consumer = Consumer::new(consumer_config(
        &server,
        None,
        IsolationLevel::ReadCommitted,
    ))
    .await
    .expect("consumer");
    consumer.assign(std::slice::from_ref(&tp)).expect("assign");
    let until = Instant::now() + Duration::from_millis(800);
    while Instant::now() < until {
        let got = consumer
            .poll(Duration::from_millis(100))
            .await
            .expect("poll");
        assert!(
            got.is_empty(),
            "read_committed saw an open transaction: {got:?}"
        );
    }
    producer.commit_transaction().await.expect("commit");
    // The markers follow the EndTxn answer: the LSO moves past the marker.
    let deadline = Instant::now() + Duration::from_secs(10);
    while latest(IsolationLevel::ReadCommitted).await != 6 {
        assert!(
            Instant::now() < deadline,
            "the LSO did not move past the marker"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.len() < 5 {
        assert!(Instant::now() < deadline, "saw only {seen:?}");
        seen.extend(
            consumer
                .poll(Duration::from_millis(200))
                .await
                .expect("poll")
                .iter()
                .map(value),
        );
    }
    assert_eq!(
        seen,
        (0..5).map(|i| format!("open-{i}")).collect::<Vec<_>>()
    );
    consumer.close().await.expect("close consumer");
    producer.close().await.expect("close");
    server.stop().await;
}

/// Consume-transform-produce: offsets sent to a transaction become the
/// group's committed offsets only when the transaction commits; an aborted
/// transaction leaves the previous ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_offsets_to_transaction_commits_offsets_only_on_commit() {
    let server = server().await;
    server.create_topic("ctp-in", 1).await;
    server.create_topic("ctp-out", 1).await;
    let plain = server.producer(|c| c.linger_ms = 1).await;
    for i in 0..10 {
        plain
            .send(ProducerRecord::new(
                "ctp-in",
                format!("in-{i}").into_bytes(),
            ))
            .await
            .expect("send")
            .await
            .expect("delivered");
    }
    plain.close().await.expect("close plain");

    let mut consumer = Consumer::new(consumer_config(
        &server,
        Some("ctp-group"),
        IsolationLevel::ReadCommitted,
    ))
    .await
    .expect("consumer");
    consumer.subscribe(&["ctp-in"]).expect("subscribe");
    let mut input = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while input.len() < 10 {
        assert!(Instant::now() < deadline, "input not consumed");
        input.extend(
            consumer
                .poll(Duration::from_millis(200))
                .await
                .expect("poll"),
        );
    }
    let group = consumer.group_metadata().expect("group metadata");
    assert_eq!(group.group_id, "ctp-group");
    assert!(
        group.generation_id >= 1 && !group.member_id.is_empty(),
        "{group:?}"
    );

    let admin = server.admin().await;
    let tp_in = TopicPartition::new("ctp-in", 0);
    let committed = |admin: sluice_client::Admin| async move {
        admin
            .list_consumer_group_offsets("ctp-group", None)
            .await
            .expect("group offsets")
            .get(&TopicPartition::new("ctp-in", 0))
            .map(|o| o.offset)
    };

    let producer = txn_producer(&server, "ctp-app").await;
    producer.init_transactions().await.expect("init");
    // First half: committed with its offsets.
    producer.begin_transaction().expect("begin");
    for r in &input[..5] {
        producer
            .send(ProducerRecord::new(
                "ctp-out",
                format!("out-{}", value(r)).into_bytes(),
            ))
            .await
            .expect("send");
    }
    let mut offsets = BTreeMap::new();
    offsets.insert(tp_in.clone(), OffsetAndMetadata::new(input[4].offset + 1));
    producer
        .send_offsets_to_transaction(&offsets, &group)
        .await
        .expect("send offsets");
    assert_eq!(
        committed(admin.clone()).await,
        None,
        "pending until the commit"
    );
    producer.commit_transaction().await.expect("commit");
    // EndTxn answers once the commit is decided; the markers (and so the
    // offsets) follow right after.
    let eventually = |want: i64| {
        let admin = admin.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let got = committed(admin.clone()).await;
                if got == Some(want) {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "committed offset {got:?}, want {want}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    eventually(5).await;

    // Second half: aborted, offsets and output discarded.
    producer.begin_transaction().expect("begin");
    for r in &input[5..] {
        producer
            .send(ProducerRecord::new(
                "ctp-out",
                format!("out-{}", value(r)).into_bytes(),
            ))
            .await
            .expect("send");
    }
    offsets.insert(tp_in.clone(), OffsetAndMetadata::new(input[9].offset + 1));
    producer
        .send_offsets_to_transaction(&offsets, &group)
        .await
        .expect("send offsets");
    producer.abort_transaction().await.expect("abort");

    // A third transaction's offsets are accepted only once the abort is
    // complete (CONCURRENT_TRANSACTIONS is retried meanwhile): by then the
    // aborted offsets are gone and the committed ones are still 5.
    producer.begin_transaction().expect("begin");
    offsets.insert(tp_in.clone(), OffsetAndMetadata::new(input[7].offset + 1));
    producer
        .send_offsets_to_transaction(&offsets, &group)
        .await
        .expect("send offsets");
    assert_eq!(
        committed(admin.clone()).await,
        Some(5),
        "the abort discarded its offsets"
    );
    producer
        .commit_transaction()
        .await
        .expect("commit offsets only");
    eventually(8).await;
    producer.close().await.expect("close producer");
    consumer.close().await.expect("close consumer");

    let ends = log_ends(&server, "ctp-out", 1).await;
    let read = read_all(&server, IsolationLevel::ReadCommitted, &ends).await;
    assert_eq!(
        read.get(&0).cloned().unwrap_or_default(),
        (0..5).map(|i| format!("out-in-{i}")).collect::<Vec<_>>()
    );
    server.stop().await;
}

/// Zombie fencing: a second producer with the same transactional.id
/// aborts the first one's open transaction and fences it; the first one
/// gets PRODUCER_FENCED, a fatal error, from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_producer_with_the_same_id_fences_the_first() {
    let server = server().await;
    server.create_topic("zombie", 2).await;
    let first = txn_producer(&server, "tx-zombie").await;
    first.init_transactions().await.expect("init first");
    first.begin_transaction().expect("begin");
    let d = first
        .send(ProducerRecord::new("zombie", b"from-the-zombie".to_vec()).partition(0))
        .await
        .expect("send");
    first.flush().await;
    d.await.expect("written, not committed");
    let (pid, epoch) = first.producer_id_and_epoch().expect("id");

    let second = txn_producer(&server, "tx-zombie").await;
    second.init_transactions().await.expect("init second");
    let (pid2, epoch2) = second.producer_id_and_epoch().expect("id");
    assert_eq!(pid2, pid, "same transactional id, same producer id");
    assert!(epoch2 > epoch, "epoch bumped: {epoch} -> {epoch2}");

    // The zombie's next transactional request is refused: fatal.
    let d = first
        .send(ProducerRecord::new("zombie", b"zombie-again".to_vec()).partition(1))
        .await
        .expect("buffered");
    let e = first.commit_transaction().await.expect_err("fenced");
    assert_eq!(
        e.response_error(),
        Some(proto_kafka::ResponseError::ProducerFenced),
        "{e}"
    );
    assert!(e.is_fatal_transaction_error(), "{e}");
    assert!(d.await.is_err(), "the zombie's record failed");
    assert_eq!(
        first.transaction_state(),
        Some(TransactionState::FatalError)
    );
    let e = first.begin_transaction().expect_err("fatal");
    assert_eq!(
        e.response_error(),
        Some(proto_kafka::ResponseError::ProducerFenced),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("has been fenced by another producer"),
        "{e}"
    );
    assert!(
        first.abort_transaction().await.is_err(),
        "not even an abort"
    );
    let e = first
        .send(ProducerRecord::new("zombie", b"x".to_vec()))
        .await
        .expect_err("no sends");
    assert!(e.is_fatal_transaction_error(), "{e}");

    // The new producer works; the zombie's first record was aborted.
    second.begin_transaction().expect("begin");
    second
        .send(ProducerRecord::new("zombie", b"from-the-new-one".to_vec()).partition(0))
        .await
        .expect("send");
    second.commit_transaction().await.expect("commit");
    second.close().await.expect("close second");
    let _ = first.close().await;
    let ends = log_ends(&server, "zombie", 2).await;
    let read = read_all(&server, IsolationLevel::ReadCommitted, &ends).await;
    assert_eq!(
        read.get(&0).cloned().unwrap_or_default(),
        vec!["from-the-new-one".to_string()]
    );
    assert_eq!(read.get(&1), None);
    server.stop().await;
}

/// A batch the broker refuses (larger than the topic's
/// `max.message.bytes`) makes the transaction abortable: commit and send
/// fail, records not sent yet fail too, abort works and bumps the epoch,
/// and the next transaction commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_batch_makes_the_transaction_abortable() {
    let server = server().await;
    server
        .admin()
        .await
        .create_topic(NewTopic::new("small", 2, 1).config("max.message.bytes", "2000"))
        .await
        .expect("create topic");
    let producer = txn_producer(&server, "tx-abortable").await;
    producer.init_transactions().await.expect("init");
    let (pid, epoch) = producer.producer_id_and_epoch().expect("id");

    producer.begin_transaction().expect("begin");
    let ok = producer
        .send(ProducerRecord::new("small", b"fits".to_vec()).partition(0))
        .await
        .expect("send");
    let big = producer
        .send(ProducerRecord::new("small", vec![b'x'; 5000]).partition(1))
        .await
        .expect("buffered");
    let e = big.await.expect_err("refused by the broker");
    assert!(
        matches!(
            e.response_error(),
            Some(
                proto_kafka::ResponseError::MessageTooLarge
                    | proto_kafka::ResponseError::RecordListTooLarge
            )
        ),
        "{e}"
    );
    ok.await.expect("the other partition's record was written");
    assert_eq!(
        producer.transaction_state(),
        Some(TransactionState::AbortableError)
    );
    let e = producer.commit_transaction().await.expect_err("no commit");
    assert!(
        matches!(e, ClientError::TransactionState { fatal: false, .. }),
        "{e}"
    );
    assert!(!e.is_fatal_transaction_error());
    let e = producer
        .send(ProducerRecord::new("small", b"more".to_vec()).partition(0))
        .await
        .expect_err("no sends");
    assert!(
        matches!(e, ClientError::TransactionState { fatal: false, .. }),
        "{e}"
    );
    assert!(producer.begin_transaction().is_err());
    producer.abort_transaction().await.expect("abort");
    assert_eq!(producer.transaction_state(), Some(TransactionState::Ready));
    assert_eq!(
        producer.producer_id_and_epoch(),
        Some((pid, epoch + 1)),
        "the abort bumped the epoch (KIP-360)"
    );

    producer.begin_transaction().expect("begin again");
    for p in 0..2 {
        producer
            .send(ProducerRecord::new("small", format!("after-{p}").into_bytes()).partition(p))
            .await
            .expect("send");
    }
    producer.commit_transaction().await.expect("commit");
    producer.close().await.expect("close");
    let ends = log_ends(&server, "small", 2).await;
    let read = read_all(&server, IsolationLevel::ReadCommitted, &ends).await;
    assert_eq!(
        read.get(&0).cloned().unwrap_or_default(),
        vec!["after-0".to_string()]
    );
    assert_eq!(
        read.get(&1).cloned().unwrap_or_default(),
        vec!["after-1".to_string()]
    );
    server.stop().await;
}

/// Misuse fails with Kafka's IllegalStateException messages and leaves
/// the state alone; conflicting configurations are refused naming the
/// setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misuse_fails_with_kafkas_messages() {
    let server = server().await;
    server.create_topic("misuse", 1).await;

    let plain = server.producer(|_| {}).await;
    let e = plain.begin_transaction().expect_err("not transactional");
    assert!(
        e.to_string()
            .contains("by setting the transactional.id configuration property"),
        "{e}"
    );
    assert!(plain.init_transactions().await.is_err());
    plain.close().await.expect("close plain");

    let producer = txn_producer(&server, "tx-misuse").await;
    let e = producer.begin_transaction().expect_err("before init");
    assert!(
        e.to_string().contains(
            "Invalid transition attempted from state UNINITIALIZED to state IN_TRANSACTION"
        ),
        "{e}"
    );
    let e = producer
        .send(ProducerRecord::new("misuse", b"x".to_vec()))
        .await
        .expect_err("before init");
    assert!(
        e.to_string()
            .contains("Cannot add partition misuse-0 to transaction before completing a call to initTransactions"),
        "{e}"
    );
    producer.init_transactions().await.expect("init");
    let e = producer.init_transactions().await.expect_err("twice");
    assert!(
        e.to_string()
            .contains("from state READY to state INITIALIZING"),
        "{e}"
    );
    let e = producer
        .send(ProducerRecord::new("misuse", b"x".to_vec()))
        .await
        .expect_err("outside a transaction");
    assert!(matches!(e, ClientError::IllegalState(_)), "{e}");
    assert!(
        e.to_string()
            .contains("Cannot add partition misuse-0 to transaction while in state READY"),
        "{e}"
    );
    let e = producer
        .commit_transaction()
        .await
        .expect_err("commit without begin");
    assert!(
        e.to_string().contains(
            "Invalid transition attempted from state READY to state COMMITTING_TRANSACTION"
        ),
        "{e}"
    );
    let e = producer
        .abort_transaction()
        .await
        .expect_err("abort without begin");
    assert!(
        e.to_string()
            .contains("from state READY to state ABORTING_TRANSACTION"),
        "{e}"
    );
    let e = producer
        .send_offsets_to_transaction(
            &BTreeMap::from([(TopicPartition::new("misuse", 0), OffsetAndMetadata::new(1))]),
            &ConsumerGroupMetadata::new("g"),
        )
        .await
        .expect_err("offsets outside a transaction");
    assert!(
        e.to_string().contains(
            "Cannot send offsets if a transaction is not in progress (currentState= READY)"
        ),
        "{e}"
    );
    assert_eq!(
        producer.transaction_state(),
        Some(TransactionState::Ready),
        "unchanged"
    );
    producer.begin_transaction().expect("begin");
    let e = producer.begin_transaction().expect_err("nested");
    assert!(
        e.to_string()
            .contains("from state IN_TRANSACTION to state IN_TRANSACTION"),
        "{e}"
    );
    // An empty transaction commits without EndTxn.
    producer.commit_transaction().await.expect("empty commit");
    producer.close().await.expect("close");

    let with = |f: fn(&mut ProducerConfig)| {
        let mut c = ProducerConfig::new(server.client_config()).transactional("tx-conf");
        f(&mut c);
        c.validate()
    };
    let e = with(|c| c.acks = 1).expect_err("acks");
    assert!(
        e.to_string().contains("acks must be all")
            && e.to_string().contains("transactional.id=tx-conf"),
        "{e}"
    );
    let e = with(|c| c.enable_idempotence = Some(false)).expect_err("idempotence off");
    assert!(
        e.to_string().contains("without also enabling idempotence"),
        "{e}"
    );
    let e = with(|c| c.retries = 0).expect_err("retries");
    assert!(e.to_string().contains("retries must be above 0"), "{e}");
    let e = with(|c| c.max_in_flight = 6).expect_err("in flight");
    assert!(
        e.to_string()
            .contains("max.in.flight.requests.per.connection"),
        "{e}"
    );
    let e = with(|c| c.transaction_timeout_ms = 0).expect_err("timeout");
    assert!(e.to_string().contains("transaction.timeout.ms"), "{e}");
    with(|_| {}).expect("defaults are valid");
    server.stop().await;
}

/// A transaction timeout above the broker's `transaction.max.timeout.ms`
/// fails init_transactions with INVALID_TRANSACTION_TIMEOUT (fatal, as
/// Kafka's client treats unexpected InitProducerId errors).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_transactions_refuses_a_timeout_above_the_brokers_maximum() {
    let server = server().await;
    let mut cfg = ProducerConfig::new(server.client_config()).transactional("tx-timeout");
    cfg.transaction_timeout_ms = 3_600_000;
    let producer = Producer::new(cfg).await.expect("producer");
    let e = producer.init_transactions().await.expect_err("too long");
    assert_eq!(
        e.response_error(),
        Some(proto_kafka::ResponseError::InvalidTransactionTimeout),
        "{e}"
    );
    assert_eq!(
        producer.transaction_state(),
        Some(TransactionState::FatalError)
    );
    let _ = producer.close().await;
    server.stop().await;
}

/// Offsets sent with group metadata of an older generation are refused
/// by the group coordinator (ILLEGAL_GENERATION): the transaction becomes
/// abortable (Kafka's CommitFailedException), the abort works, and the
/// next transaction with the consumer's current metadata commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_group_metadata_makes_the_transaction_abortable() {
    let server = server().await;
    server.create_topic("stale-in", 1).await;
    let mut consumer = Consumer::new(consumer_config(
        &server,
        Some("stale-group"),
        IsolationLevel::ReadCommitted,
    ))
    .await
    .expect("consumer");
    consumer.subscribe(&["stale-in"]).expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(30);
    while consumer.assignment().is_empty() {
        assert!(Instant::now() < deadline, "no assignment");
        consumer
            .poll(Duration::from_millis(100))
            .await
            .expect("poll");
    }
    let current = consumer.group_metadata().expect("metadata");
    let stale = ConsumerGroupMetadata {
        generation_id: current.generation_id + 5,
        ..current.clone()
    };
    let offsets = BTreeMap::from([(
        TopicPartition::new("stale-in", 0),
        OffsetAndMetadata::new(3),
    )]);

    let producer = txn_producer(&server, "tx-stale").await;
    producer.init_transactions().await.expect("init");
    producer.begin_transaction().expect("begin");
    let e = producer
        .send_offsets_to_transaction(&offsets, &stale)
        .await
        .expect_err("stale generation");
    assert!(matches!(e, ClientError::CommitFailed(_)), "{e}");
    assert!(
        e.to_string().contains("consumer group metadata mismatch"),
        "{e}"
    );
    assert_eq!(
        producer.transaction_state(),
        Some(TransactionState::AbortableError)
    );
    assert!(producer.commit_transaction().await.is_err());
    producer.abort_transaction().await.expect("abort");

    producer.begin_transaction().expect("begin again");
    producer
        .send_offsets_to_transaction(&offsets, &current)
        .await
        .expect("current metadata");
    producer.commit_transaction().await.expect("commit");
    let admin = server.admin().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = admin
            .list_consumer_group_offsets("stale-group", None)
            .await
            .expect("offsets")
            .get(&TopicPartition::new("stale-in", 0))
            .map(|o| o.offset);
        if got == Some(3) {
            break;
        }
        assert!(Instant::now() < deadline, "committed {got:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    producer.close().await.expect("close");
    consumer.close().await.expect("close consumer");
    server.stop().await;
}

/// Closing a producer with an open transaction aborts it (as Kafka's
/// close does), so read_committed consumers move on without waiting for
/// the transaction timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_aborts_the_open_transaction() {
    let server = server().await;
    server.create_topic("tx-close", 1).await;
    let producer = txn_producer(&server, "tx-close").await;
    producer.init_transactions().await.expect("init");
    producer.begin_transaction().expect("begin");
    let d = producer
        .send(ProducerRecord::new("tx-close", b"never committed".to_vec()))
        .await
        .expect("send");
    producer.flush().await;
    d.await.expect("written");
    producer.close().await.expect("close");

    // A committed record after it is visible at once: the LSO moved past
    // the aborted transaction (well before its 60 s timeout).
    let next = txn_producer(&server, "tx-close-2").await;
    next.init_transactions().await.expect("init");
    next.begin_transaction().expect("begin");
    next.send(ProducerRecord::new("tx-close", b"committed".to_vec()))
        .await
        .expect("send");
    next.commit_transaction().await.expect("commit");
    next.close().await.expect("close");
    let started = Instant::now();
    let ends = log_ends(&server, "tx-close", 1).await;
    let read = read_all(&server, IsolationLevel::ReadCommitted, &ends).await;
    assert_eq!(
        read.get(&0).cloned().unwrap_or_default(),
        vec!["committed".to_string()]
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "waited for the timeout"
    );
    server.stop().await;
}

/// A call that outlives `max.block.ms` fails with a timeout but keeps
/// running: calling it again waits for the same outcome (Kafka's pending
/// state transition), after which the producer works normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_init_transactions_is_retried_to_completion() {
    let server = server().await;
    server.create_topic("tx-block", 1).await;
    let mut cfg = ProducerConfig::new(server.client_config()).transactional("tx-block");
    cfg.max_block_ms = 1;
    let producer = Producer::new(cfg).await.expect("producer");
    let mut timeouts = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match producer.init_transactions().await {
            Ok(()) => break,
            Err(ClientError::Timeout { api, .. }) => {
                assert!(api.contains("initTransactions"), "{api}");
                timeouts += 1;
            }
            Err(e) => panic!("init_transactions: {e}"),
        }
        assert!(Instant::now() < deadline, "init never completed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(producer.transaction_state(), Some(TransactionState::Ready));
    let id = producer.producer_id_and_epoch().expect("producer id");
    // Calling init again now is a new call, refused in READY.
    assert!(matches!(
        producer.init_transactions().await,
        Err(ClientError::IllegalState(_))
    ));
    assert_eq!(
        producer.producer_id_and_epoch(),
        Some(id),
        "one InitProducerId"
    );
    println!("init_transactions timed out {timeouts} time(s) before completing");
    producer.close().await.expect("close");
    server.stop().await;
}
