//! The consumer against an in-process broker: every codec, manual
//! assignment, subscriptions with commits and resumption, seeks, pause and
//! resume, auto commit, offset reset policies, pattern subscriptions, and
//! group rebalances with each assignor (members joining and leaving).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::TestServer;
use sluice_client::consumer::assignor::assignor_by_name;
use sluice_client::consumer::{
    Consumer, ConsumerConfig, ConsumerRecord, OffsetAndMetadata, OffsetReset, RebalanceListener,
};
use sluice_client::{ClientError, ProducerRecord, TopicPartition};
use sluice_protocol::record::Compression;
use tokio::sync::watch;

async fn server() -> TestServer {
    common::start_with(|c| {
        c.set("group.initial.rebalance.delay.ms", "0")
            .expect("rebalance delay");
    })
    .await
}

fn config(server: &TestServer, group: Option<&str>) -> ConsumerConfig {
    let mut c = ConsumerConfig::new(server.client_config());
    c.group_id = group.map(str::to_string);
    c.auto_offset_reset = OffsetReset::Earliest;
    c.heartbeat_interval = Duration::from_millis(200);
    c.session_timeout = Duration::from_secs(10);
    c.fetch_max_wait = Duration::from_millis(100);
    c
}

/// Produces `n` records `k{i}`/`v{i}` with a header to `topic` (keys spread
/// them over partitions).
async fn produce(server: &TestServer, topic: &str, n: usize, compression: Compression) {
    let producer = server
        .producer(|c| {
            c.compression = compression;
            c.linger_ms = 1;
        })
        .await;
    let mut futures = Vec::new();
    for i in 0..n {
        let rec = ProducerRecord::new(topic, format!("v{i}").into_bytes())
            .key(format!("k{i}").into_bytes())
            .header(b"h".to_vec(), Some(format!("{i}").into_bytes()));
        futures.push(producer.send(rec).await.expect("send"));
    }
    for f in futures {
        f.await.expect("delivered");
    }
    producer.close().await.expect("close");
}

/// Polls until `n` records arrived (or 30 s passed).
async fn poll_n(consumer: &mut Consumer, n: usize) -> Vec<ConsumerRecord> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = Vec::new();
    while out.len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} records arrived",
            out.len()
        );
        out.extend(
            consumer
                .poll(Duration::from_millis(200))
                .await
                .expect("poll"),
        );
    }
    out
}

fn partitions(topic: &str, n: i32) -> Vec<TopicPartition> {
    (0..n).map(|p| TopicPartition::new(topic, p)).collect()
}

#[tokio::test]
async fn assign_reads_every_codec_with_keys_and_headers() {
    let server = server().await;
    for (i, codec) in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ]
    .into_iter()
    .enumerate()
    {
        let topic = format!("codec-{i}");
        server.create_topic(&topic, 3).await;
        produce(&server, &topic, 300, codec).await;
        let mut consumer = Consumer::new(config(&server, None))
            .await
            .expect("consumer");
        consumer.assign(&partitions(&topic, 3)).expect("assign");
        let records = poll_n(&mut consumer, 300).await;
        let values: BTreeSet<String> = records
            .iter()
            .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
            .collect();
        assert_eq!(values.len(), 300, "{codec:?}: every record exactly once");
        for r in &records {
            let v = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
            let i = v.trim_start_matches('v');
            assert_eq!(r.key.as_deref(), Some(format!("k{i}").as_bytes()));
            assert_eq!(r.headers.len(), 1);
            assert_eq!(r.headers[0].0, "h");
            assert_eq!(r.headers[0].1.as_deref(), Some(i.as_bytes()));
            // Keys land where the Java partitioner puts them.
            let expected =
                sluice_client::partitioner::partition_for_key(format!("k{i}").as_bytes(), 3);
            assert_eq!(r.partition, expected);
        }
        // Offsets per partition are contiguous from 0.
        let mut per: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
        for r in &records {
            per.entry(r.partition).or_default().push(r.offset);
        }
        for offsets in per.values() {
            let expected: Vec<i64> = (0..offsets.len() as i64).collect();
            assert_eq!(offsets, &expected);
        }
        consumer.close().await.expect("close");
    }
    server.stop().await;
}

#[tokio::test]
async fn subscription_commits_and_a_new_member_resumes() {
    let server = server().await;
    server.create_topic("orders", 2).await;
    produce(&server, "orders", 100, Compression::None).await;
    let mut cfg = config(&server, Some("billing"));
    cfg.enable_auto_commit = false;
    let mut consumer = Consumer::new(cfg.clone()).await.expect("consumer");
    consumer.subscribe(&["orders"]).expect("subscribe");
    let first = poll_n(&mut consumer, 100).await;
    assert_eq!(first.len(), 100);
    assert_eq!(consumer.assignment().len(), 2);
    consumer.commit_sync().await.expect("commit");
    let committed = consumer
        .committed(&partitions("orders", 2))
        .await
        .expect("committed");
    let total: i64 = committed
        .values()
        .map(|o| o.as_ref().map_or(0, |o| o.offset))
        .sum();
    assert_eq!(total, 100, "committed positions cover every record");
    consumer.close().await.expect("close");

    produce(&server, "orders", 10, Compression::None).await;
    let mut second = Consumer::new(cfg).await.expect("consumer");
    second.subscribe(&["orders"]).expect("subscribe");
    let rest = poll_n(&mut second, 10).await;
    assert_eq!(rest.len(), 10, "resumes after the committed offsets");
    let extra = second.poll(Duration::from_millis(300)).await.expect("poll");
    assert!(extra.is_empty(), "nothing is read twice");
    second.close().await.expect("close");
    server.stop().await;
}

/// A batch corrupted on disk (its CRC no longer matches): the records before
/// it are returned, then every poll fails with the CRC error and the
/// position stays at the bad batch (the Java consumer's behaviour with
/// `check.crcs`), even though the records after it were fetched too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_batch_stops_the_partition_at_it() {
    use sluice_protocol::record::BatchIter;
    use std::os::unix::fs::FileExt;

    let server = server().await;
    server.create_topic("bad", 1).await;
    let producer = server.producer(|c| c.linger_ms = 0).await;
    for batch in 0..3 {
        let mut futures = Vec::new();
        for i in 0..4 {
            let rec = ProducerRecord::new("bad", format!("{batch}-{i}").into_bytes()).partition(0);
            futures.push(producer.send(rec).await.expect("send"));
        }
        for f in futures {
            f.await.expect("delivered");
        }
    }
    producer.close().await.expect("close");
    // Flip a value byte of the second batch in the segment file.
    let log = server
        .data_dir()
        .join("bad-0")
        .join("00000000000000000000.log");
    let bytes = std::fs::read(&log).expect("read segment");
    let batches: Vec<(usize, i64, i64)> = BatchIter::new(&bytes)
        .map(|b| {
            let (at, h, _) = b.expect("batch");
            (at + h.total_size() - 1, h.base_offset, h.last_offset())
        })
        .collect();
    assert!(batches.len() >= 3, "one batch per send round: {batches:?}");
    let (last_byte, bad_base, _) = batches[1];
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .expect("open segment");
    file.write_all_at(&[bytes[last_byte] ^ 0xff], last_byte as u64)
        .expect("corrupt");

    let tp = TopicPartition::new("bad", 0);
    let mut c = Consumer::new(config(&server, None))
        .await
        .expect("consumer");
    c.assign(std::slice::from_ref(&tp)).expect("assign");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = Vec::new();
    let err = loop {
        assert!(Instant::now() < deadline, "no error; got {}", got.len());
        match c.poll(Duration::from_millis(200)).await {
            Ok(records) => got.extend(records.into_iter().map(|r| r.offset)),
            Err(e) => break e,
        }
    };
    assert!(err.to_string().contains("CRC"), "{err}");
    let before: Vec<i64> = (0..bad_base).collect();
    assert_eq!(got, before, "only the records before the bad batch");
    assert_eq!(c.position(&tp).await.expect("position"), bad_base);
    let again = c.poll(Duration::from_secs(2)).await;
    assert!(
        matches!(&again, Err(e) if e.to_string().contains("CRC")),
        "the next poll fails at the same batch: {again:?}"
    );
    c.close().await.expect("close");
    server.stop().await;
}

#[tokio::test]
async fn seek_position_pause_and_resume() {
    let server = server().await;
    server.create_topic("s", 2).await;
    let producer = server.producer(|_| {}).await;
    for p in 0..2 {
        for i in 0..20 {
            producer
                .send(ProducerRecord::new("s", format!("{p}-{i}").into_bytes()).partition(p))
                .await
                .expect("send")
                .await
                .expect("delivered");
        }
    }
    let tp0 = TopicPartition::new("s", 0);
    let tp1 = TopicPartition::new("s", 1);
    let mut c = Consumer::new(config(&server, None))
        .await
        .expect("consumer");
    c.assign(&[tp0.clone(), tp1.clone()]).expect("assign");
    assert_eq!(c.position(&tp0).await.expect("position"), 0);
    c.seek_to_end(std::slice::from_ref(&tp1))
        .expect("seek_to_end");
    assert_eq!(c.position(&tp1).await.expect("position"), 20);
    c.seek(&tp0, 15).expect("seek");
    let got = poll_n(&mut c, 5).await;
    assert!(got.iter().all(|r| r.partition == 0 && r.offset >= 15));
    assert_eq!(c.position(&tp0).await.expect("position"), 20);

    c.seek_to_beginning(&[]).expect("seek_to_beginning");
    c.pause(std::slice::from_ref(&tp0)).expect("pause");
    assert_eq!(c.paused(), BTreeSet::from([tp0.clone()]));
    let got = poll_n(&mut c, 20).await;
    assert!(
        got.iter().all(|r| r.partition == 1),
        "paused partition returns nothing"
    );
    let none = c.poll(Duration::from_millis(300)).await.expect("poll");
    assert!(none.is_empty());
    c.resume(std::slice::from_ref(&tp0)).expect("resume");
    let got = poll_n(&mut c, 20).await;
    assert!(got.iter().all(|r| r.partition == 0));
    assert_eq!(got[0].offset, 0);

    assert!(matches!(
        c.seek(&TopicPartition::new("s", 7), 0),
        Err(ClientError::InvalidArgument(_))
    ));
    c.close().await.expect("close");
    server.stop().await;
}

#[tokio::test]
async fn auto_commit_and_reset_policies() {
    let server = server().await;
    server.create_topic("a", 1).await;
    produce(&server, "a", 30, Compression::None).await;
    let tp = TopicPartition::new("a", 0);

    // none: no committed offset is an error.
    let mut cfg = config(&server, Some("strict"));
    cfg.auto_offset_reset = OffsetReset::None;
    let mut c = Consumer::new(cfg).await.expect("consumer");
    c.subscribe(&["a"]).expect("subscribe");
    let mut failed = false;
    for _ in 0..50 {
        match c.poll(Duration::from_millis(200)).await {
            Err(ClientError::NoOffsetForPartition { .. }) => {
                failed = true;
                break;
            }
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => {}
        }
    }
    assert!(
        failed,
        "auto.offset.reset=none fails without a committed offset"
    );
    c.close().await.expect("close");

    // latest: only records produced after the assignment.
    let mut cfg = config(&server, Some("late"));
    cfg.auto_offset_reset = OffsetReset::Latest;
    let mut c = Consumer::new(cfg).await.expect("consumer");
    c.subscribe(&["a"]).expect("subscribe");
    while c.assignment().is_empty() {
        c.poll(Duration::from_millis(100)).await.expect("poll");
    }
    assert_eq!(c.position(&tp).await.expect("position"), 30);
    produce(&server, "a", 5, Compression::None).await;
    let got = poll_n(&mut c, 5).await;
    assert_eq!(got[0].offset, 30);
    c.close().await.expect("close");

    // auto commit: positions are committed at the interval and on close.
    let mut cfg = config(&server, Some("auto"));
    cfg.auto_commit_interval = Duration::from_millis(100);
    let mut c = Consumer::new(cfg).await.expect("consumer");
    c.subscribe(&["a"]).expect("subscribe");
    poll_n(&mut c, 35).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        c.poll(Duration::from_millis(150)).await.expect("poll");
        let committed = c
            .committed(std::slice::from_ref(&tp))
            .await
            .expect("committed");
        if committed[&tp].as_ref().map(|o| o.offset) == Some(35) {
            break;
        }
        assert!(Instant::now() < deadline, "auto commit never happened");
    }
    c.close().await.expect("close");

    // Manual commits with metadata, async.
    let mut cfg = config(&server, Some("manual"));
    cfg.enable_auto_commit = false;
    let mut c = Consumer::new(cfg).await.expect("consumer");
    c.assign(std::slice::from_ref(&tp)).expect("assign");
    poll_n(&mut c, 35).await;
    c.commit_async()
        .expect("commit_async")
        .await
        .expect("async commit");
    assert_eq!(
        c.committed(std::slice::from_ref(&tp))
            .await
            .expect("committed")[&tp]
            .as_ref()
            .map(|o| o.offset),
        Some(35)
    );
    let mut offsets = BTreeMap::new();
    offsets.insert(
        tp.clone(),
        OffsetAndMetadata {
            offset: 7,
            metadata: Some("note".into()),
            leader_epoch: None,
        },
    );
    c.commit_offsets(&offsets).await.expect("commit");
    let got = c
        .committed(std::slice::from_ref(&tp))
        .await
        .expect("committed");
    let om = got[&tp].clone().expect("committed offset");
    assert_eq!((om.offset, om.metadata.as_deref()), (7, Some("note")));
    c.close().await.expect("close");
    server.stop().await;
}

#[tokio::test]
async fn pattern_subscription_picks_up_new_topics() {
    let server = server().await;
    server.create_topic("metrics-a", 1).await;
    server.create_topic("other", 1).await;
    produce(&server, "metrics-a", 5, Compression::None).await;
    produce(&server, "other", 5, Compression::None).await;
    let mut cfg = config(&server, Some("pattern"));
    cfg.metadata_max_age = Duration::from_millis(300);
    let mut c = Consumer::new(cfg).await.expect("consumer");
    c.subscribe_pattern("metrics-.*").expect("subscribe");
    let got = poll_n(&mut c, 5).await;
    assert!(got.iter().all(|r| &*r.topic == "metrics-a"));
    server.create_topic("metrics-b", 2).await;
    produce(&server, "metrics-b", 6, Compression::None).await;
    let got = poll_n(&mut c, 6).await;
    assert!(got.iter().all(|r| &*r.topic == "metrics-b"));
    assert_eq!(
        c.subscription(),
        BTreeSet::from(["metrics-a".to_string(), "metrics-b".to_string()])
    );
    assert!(c.subscribe_pattern("(").is_err(), "a bad regex is refused");
    c.close().await.expect("close");
    server.stop().await;
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Assigned(Vec<TopicPartition>),
    Revoked(Vec<TopicPartition>),
    Lost(Vec<TopicPartition>),
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Event>>>);

impl RebalanceListener for Recorder {
    fn on_partitions_revoked(&mut self, p: &[TopicPartition]) {
        self.0
            .lock()
            .expect("lock")
            .push(Event::Revoked(p.to_vec()));
    }
    fn on_partitions_assigned(&mut self, p: &[TopicPartition]) {
        self.0
            .lock()
            .expect("lock")
            .push(Event::Assigned(p.to_vec()));
    }
    fn on_partitions_lost(&mut self, p: &[TopicPartition]) {
        self.0.lock().expect("lock").push(Event::Lost(p.to_vec()));
    }
}

/// A consumer polling in its own task, publishing its assignment.
struct Member {
    assignment: watch::Receiver<BTreeSet<TopicPartition>>,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<usize>,
    events: Recorder,
}

async fn member(server: &TestServer, group: &str, assignor: &str, topics: &[&str]) -> Member {
    let mut cfg = config(server, Some(group));
    cfg.assignors = vec![assignor_by_name(assignor).expect("assignor")];
    let mut c = Consumer::new(cfg).await.expect("consumer");
    let events = Recorder::default();
    c.set_rebalance_listener(Box::new(events.clone()));
    let topics: Vec<String> = topics.iter().map(|t| (*t).to_string()).collect();
    let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    c.subscribe(&refs).expect("subscribe");
    let (tx, rx) = watch::channel(BTreeSet::new());
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut seen = 0;
        loop {
            if stop_rx.try_recv().is_ok() {
                break;
            }
            seen += c
                .poll(Duration::from_millis(100))
                .await
                .expect("poll")
                .len();
            let _ = tx.send(c.assignment());
        }
        c.close().await.expect("close");
        seen
    });
    Member {
        assignment: rx,
        stop: stop_tx,
        task,
        events,
    }
}

async fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(40);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn rebalance_with(assignor: &str) {
    let server = server().await;
    server.create_topic("r1", 6).await;
    server.create_topic("r2", 3).await;
    let all: BTreeSet<TopicPartition> = partitions("r1", 6)
        .into_iter()
        .chain(partitions("r2", 3))
        .collect();
    let group = format!("g-{assignor}");
    let a = member(&server, &group, assignor, &["r1", "r2"]).await;
    wait_for("the first member to own everything", || {
        *a.assignment.borrow() == all
    })
    .await;
    let b = member(&server, &group, assignor, &["r1", "r2"]).await;
    wait_for("a split between two members", || {
        let (x, y) = (a.assignment.borrow().clone(), b.assignment.borrow().clone());
        !x.is_empty()
            && !y.is_empty()
            && x.is_disjoint(&y)
            && x.union(&y).cloned().collect::<BTreeSet<_>>() == all
            && x.len().abs_diff(y.len()) <= 1
    })
    .await;
    let kept = a.assignment.borrow().clone();
    let events = a.events.0.lock().expect("lock").clone();
    if assignor == "cooperative-sticky" {
        // Cooperative: the first member only ever gave up what moved.
        for e in &events {
            if let Event::Revoked(p) = e {
                assert!(
                    p.iter().all(|tp| !kept.contains(tp)),
                    "revoked a partition it kept: {events:?}"
                );
            }
        }
    } else {
        assert!(
            events.contains(&Event::Revoked(all.iter().cloned().collect())),
            "eager members revoke everything: {events:?}"
        );
    }
    let _ = b.stop.send(());
    b.task.await.expect("member b");
    wait_for("the survivor to own everything again", || {
        *a.assignment.borrow() == all
    })
    .await;
    let _ = a.stop.send(());
    a.task.await.expect("member a");
    assert!(!events.iter().any(|e| matches!(e, Event::Lost(_))));
    server.stop().await;
}

#[tokio::test]
async fn rebalance_range() {
    rebalance_with("range").await;
}

#[tokio::test]
async fn rebalance_roundrobin() {
    rebalance_with("roundrobin").await;
}

#[tokio::test]
async fn rebalance_sticky() {
    rebalance_with("sticky").await;
}

#[tokio::test]
async fn rebalance_cooperative_sticky() {
    rebalance_with("cooperative-sticky").await;
}

#[tokio::test]
async fn group_members_share_the_records_exactly_once() {
    let server = server().await;
    server.create_topic("shared", 4).await;
    let a = member(&server, "sharers", "range", &["shared"]).await;
    let b = member(&server, "sharers", "range", &["shared"]).await;
    wait_for("both members assigned", || {
        a.assignment.borrow().len() == 2 && b.assignment.borrow().len() == 2
    })
    .await;
    produce(&server, "shared", 400, Compression::Lz4).await;
    // Each member counts what it saw; together exactly 400.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _ = a.stop.send(());
    let _ = b.stop.send(());
    let seen = a.task.await.expect("a") + b.task.await.expect("b");
    assert_eq!(seen, 400);
    server.stop().await;
}

#[tokio::test]
async fn bad_usage_is_refused() {
    let server = server().await;
    let mut c = Consumer::new(config(&server, None))
        .await
        .expect("consumer");
    assert!(c.subscribe(&["t"]).is_err(), "subscribe needs a group.id");
    assert!(
        c.poll(Duration::from_millis(10)).await.is_err(),
        "nothing to poll"
    );
    assert!(c.commit_sync().await.is_err(), "commit needs a group.id");
    let mut cfg = config(&server, Some("g"));
    cfg.heartbeat_interval = cfg.session_timeout;
    assert!(matches!(
        Consumer::new(cfg).await,
        Err(ClientError::InvalidArgument(_))
    ));
    server.stop().await;
}

#[tokio::test]
async fn a_member_that_stops_polling_leaves_and_loses_its_partitions() {
    let server = server().await;
    server.create_topic("slow", 2).await;
    let mut cfg = config(&server, Some("slowpoke"));
    cfg.max_poll_interval = Duration::from_millis(1500);
    let mut c = Consumer::new(cfg).await.expect("consumer");
    let events = Recorder::default();
    c.set_rebalance_listener(Box::new(events.clone()));
    c.subscribe(&["slow"]).expect("subscribe");
    while c.assignment().len() < 2 {
        c.poll(Duration::from_millis(100)).await.expect("poll");
    }
    // No poll for longer than max.poll.interval.ms: the heartbeat task
    // leaves the group, as the Java client does.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let admin = server.admin().await;
    let described = admin
        .describe_groups(&["slowpoke"])
        .await
        .expect("describe");
    assert!(
        described[0].members.is_empty(),
        "the member left: {described:?}"
    );
    // Out of the group: a commit fails instead of writing stale offsets.
    assert!(
        matches!(c.commit_sync().await, Err(ClientError::CommitFailed(_))),
        "commit after removal must fail"
    );
    // The next poll reports the partitions lost and rejoins.
    c.poll(Duration::from_millis(100)).await.expect("poll");
    while c.assignment().len() < 2 {
        c.poll(Duration::from_millis(100)).await.expect("poll");
    }
    let events = events.0.lock().expect("lock").clone();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Lost(p) if p.len() == 2)),
        "{events:?}"
    );
    c.close().await.expect("close");
    server.stop().await;
}

#[tokio::test]
async fn poll_with_a_zero_timeout_still_joins() {
    let server = server().await;
    server.create_topic("zero", 1).await;
    let mut c = Consumer::new(config(&server, Some("zero-wait")))
        .await
        .expect("consumer");
    c.subscribe(&["zero"]).expect("subscribe");
    for _ in 0..100 {
        c.poll(Duration::ZERO).await.expect("poll");
        if !c.assignment().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(c.assignment().len(), 1);
    c.close().await.expect("close");
    server.stop().await;
}

#[tokio::test]
async fn a_fenced_static_member_stops_with_an_error() {
    let server = server().await;
    server.create_topic("static", 2).await;
    let mut cfg = config(&server, Some("statics"));
    cfg.group_instance_id = Some("instance-1".into());
    let mut first = Consumer::new(cfg.clone()).await.expect("consumer");
    first.subscribe(&["static"]).expect("subscribe");
    while first.assignment().len() < 2 {
        first.poll(Duration::from_millis(100)).await.expect("poll");
    }
    // A second process with the same group.instance.id takes the slot.
    let mut second = Consumer::new(cfg).await.expect("consumer");
    second.subscribe(&["static"]).expect("subscribe");
    while second.assignment().len() < 2 {
        second.poll(Duration::from_millis(100)).await.expect("poll");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let error = loop {
        assert!(
            Instant::now() < deadline,
            "the first member was never fenced"
        );
        if let Err(e) = first.poll(Duration::from_millis(100)).await {
            break e;
        }
    };
    assert_eq!(error.code(), Some(82), "FENCED_INSTANCE_ID: {error}");
    // Fatal: it stays fenced and does not fight for the slot.
    let again = first.poll(Duration::from_millis(10)).await;
    assert_eq!(again.err().and_then(|e| e.code()), Some(82));
    second.poll(Duration::from_millis(300)).await.expect("poll");
    assert_eq!(second.assignment().len(), 2);
    second.close().await.expect("close");
    server.stop().await;
}

/// A consumer, even with a rebalance listener (which need only be `Send`),
/// can live in a spawned task and lend itself to futures that are `Send`.
#[test]
fn a_consumer_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Consumer>();
}
