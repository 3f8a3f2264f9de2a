//! sluice-client through leader failover in a three-process cluster
//! (`sluice server --config server-N.properties`, combined broker and
//! controller nodes): an idempotent acks=all producer runs the whole time
//! while the leader of a partition is SIGKILLed and restarted, and a
//! follower is SIGSTOPped beyond `replica.lag.time.max.ms` and resumed.
//! Afterwards everything is read back from the beginning (twice, by
//! manually assigned consumers) and checked like Jepsen's Kafka workload:
//! every acknowledged record is where its acknowledgement said, no offset
//! holds two different records, no record is there twice, and the offsets
//! each poll returns per partition only grow.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::Cluster3;
use sluice_client::admin::NewTopic;
use sluice_client::consumer::{Consumer, ConsumerConfig, OffsetReset, RebalanceListener};
use sluice_client::{
    Admin, ClientConfig, Cluster, Producer, ProducerConfig, ProducerRecord, TopicPartition,
};

const TOPIC: &str = "failover";
const GROUP: &str = "failover-group";
const PARTITIONS: i32 = 3;
/// `replica.lag.time.max.ms` of the nodes: long enough that a busy
/// two-core machine does not drop an active follower too often (it would
/// only slow the test), short enough to wait out.
const LAG_MS: u64 = 2_000;
/// `broker.session.timeout.ms`: a killed node is fenced (and loses its
/// leaderships) after this long.
const SESSION_MS: u64 = 3_000;

/// Client settings for the test: short timeouts so a dead or paused node
/// costs seconds, not the defaults' 30 s.
fn client_config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new(bootstrap);
    c.connection.connect_timeout = Duration::from_secs(3);
    c.connection.request_timeout = Duration::from_secs(5);
    c.retries = 10;
    c
}

/// One node's view of the topic: per partition (leader, leader epoch, ISR).
/// `None` when the node does not answer or does not know the topic.
async fn view(addr: &str) -> Option<BTreeMap<i32, (i32, i32, Vec<i32>)>> {
    let mut c = client_config(addr);
    c.retries = 0;
    let cluster = tokio::time::timeout(Duration::from_secs(5), Cluster::connect(c))
        .await
        .ok()?
        .ok()?;
    // Cluster::connect loaded this node's metadata through the bootstrap
    // address; no other node was asked.
    let md = cluster.metadata().await;
    let t = md.topics.get(TOPIC)?;
    Some(
        t.partitions
            .values()
            .map(|p| {
                let mut isr = p.isr.clone();
                isr.sort_unstable();
                (p.partition, (p.leader, p.leader_epoch, isr))
            })
            .collect(),
    )
}

/// Polls every 200 ms until `f` holds for the views of all `nodes` (each
/// asked separately), for at most `max`; panics naming `what`.
async fn until_views(
    cluster: &Cluster3,
    nodes: &[i32],
    what: &str,
    max: Duration,
    f: impl Fn(&BTreeMap<i32, (i32, i32, Vec<i32>)>) -> bool,
) -> BTreeMap<i32, (i32, i32, Vec<i32>)> {
    let deadline = Instant::now() + max;
    let mut last = None;
    loop {
        let mut all = true;
        for id in nodes {
            match view(&cluster.node(*id).addr).await {
                Some(v) if v.len() == PARTITIONS as usize && f(&v) => last = Some(v),
                other => {
                    if other.is_some() {
                        last = other;
                    }
                    all = false;
                    break;
                }
            }
        }
        if all {
            return last.unwrap_or_default();
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {max:?} waiting for {what}; last view: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What the producer task saw.
#[derive(Default)]
struct Produced {
    /// Value → (partition, offset) of every acknowledged record.
    acked: HashMap<String, (i32, i64)>,
    /// Value → error of every record whose delivery failed.
    failed: HashMap<String, String>,
}

/// Runs the producer: unique values, round robin over the partitions,
/// until `stop`; at most 500 records unacknowledged at a time.
async fn produce(
    producer: Arc<Producer>,
    produced: Arc<Mutex<Produced>>,
    done: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> u64 {
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        while sent - done.load(Ordering::Relaxed) >= 500 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let value = format!("v{sent}");
        let partition = (sent % PARTITIONS as u64) as i32;
        let record = ProducerRecord::new(TOPIC, value.clone().into_bytes()).partition(partition);
        let (p, d) = (produced.clone(), done.clone());
        producer
            .send_with_callback(record, move |r| {
                let mut p = p.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                match r {
                    Ok(m) => {
                        p.acked.insert(value, (m.partition, m.offset));
                    }
                    Err(e) => {
                        p.failed.insert(value, e.to_string());
                    }
                }
                d.fetch_add(1, Ordering::Relaxed);
            })
            .await
            .unwrap_or_else(|e| panic!("send: {e}"));
        sent += 1;
        if sent % 20 == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    sent
}

fn acked_count(produced: &Mutex<Produced>) -> usize {
    produced
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .acked
        .len()
}

/// Waits (at most `max`) until `n` more records than now are acknowledged.
async fn until_more_acks(produced: &Mutex<Produced>, n: usize, what: &str, max: Duration) {
    let start = acked_count(produced);
    let deadline = Instant::now() + max;
    while acked_count(produced) < start + n {
        assert!(
            Instant::now() < deadline,
            "no progress {what}: {} acknowledged in {max:?} (wanted {n})",
            acked_count(produced) - start
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Per partition, the (offset, value) pairs a consumer polled, in order.
type Polled = BTreeMap<i32, Vec<(i64, String)>>;

/// A consumer assigned every partition, positioned at the beginning.
async fn reader(bootstrap: &str) -> Consumer {
    let mut config = ConsumerConfig::new(client_config(bootstrap));
    config.auto_offset_reset = OffsetReset::Earliest;
    config.enable_auto_commit = false;
    let mut consumer = Consumer::new(config)
        .await
        .unwrap_or_else(|e| panic!("consumer: {e}"));
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(TOPIC, p))
        .collect();
    consumer
        .assign(&tps)
        .unwrap_or_else(|e| panic!("assign: {e}"));
    consumer
        .seek_to_beginning(&tps)
        .unwrap_or_else(|e| panic!("seek: {e}"));
    consumer
}

/// One poll into `out`, checking that each partition's offsets only grow
/// (a poll error fails the test: the consumer must ride out failover).
async fn poll_into(consumer: &mut Consumer, out: &mut Polled) {
    let records = consumer
        .poll(Duration::from_millis(300))
        .await
        .unwrap_or_else(|e| panic!("poll: {e}"));
    for r in records {
        let value = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
        let polled = out.entry(r.partition).or_default();
        if let Some((last, _)) = polled.last() {
            assert!(
                r.offset > *last,
                "partition {}: offset {} polled after {last}",
                r.partition,
                r.offset
            );
        }
        polled.push((r.offset, value));
    }
}

/// Whether `out` reached `ends` in every partition.
fn caught_up(out: &Polled, ends: &BTreeMap<TopicPartition, i64>) -> bool {
    ends.iter().all(|(tp, end)| {
        out.get(&tp.partition)
            .and_then(|v| v.last())
            .map_or(*end == 0, |(o, _)| *o + 1 >= *end)
    })
}

/// Polls `consumer` until it reached `ends` (at most 30 s).
async fn read_to(
    mut consumer: Consumer,
    mut out: Polled,
    ends: &BTreeMap<TopicPartition, i64>,
) -> Polled {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !caught_up(&out, ends) {
        assert!(Instant::now() < deadline, "reading back timed out");
        poll_into(&mut consumer, &mut out).await;
    }
    let _ = consumer.close().await;
    out
}

/// A consumer that reads from the beginning while the faults happen,
/// until `stop`; hands back the consumer and what it polled.
async fn tail(bootstrap: String, stop: Arc<AtomicBool>) -> (Consumer, Polled) {
    let mut consumer = reader(&bootstrap).await;
    let mut out = Polled::new();
    while !stop.load(Ordering::Relaxed) {
        poll_into(&mut consumer, &mut out).await;
    }
    (consumer, out)
}

/// What the group member saw.
#[derive(Default)]
struct GroupOutcome {
    /// (partition, offset, value) of every record polled.
    polled: Vec<(i32, i64, String)>,
    /// Per partition, the highest offset a successful commit covered.
    acked: BTreeMap<i32, i64>,
    /// Per partition, the committed offset read back at the end.
    committed: BTreeMap<i32, i64>,
    /// Polls that went back within one assignment: (partition, after, at).
    backwards: Vec<(i32, i64, i64)>,
    /// Errors from poll (none expected) and failed commits (retried).
    poll_errors: Vec<String>,
    commit_errors: usize,
}

/// Notes the partitions each rebalance assigns: polls may rewind to the
/// committed offset then.
struct Reassigned(Arc<Mutex<HashSet<i32>>>);

impl RebalanceListener for Reassigned {
    fn on_partitions_assigned(&mut self, partitions: &[TopicPartition]) {
        let mut r = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        r.extend(partitions.iter().map(|tp| tp.partition));
    }
}

/// A consumer group member (subscribe, manual commits every 100 records)
/// that runs until `stop`, then reads its committed offsets back.
async fn group_member(
    bootstrap: String,
    stop: Arc<AtomicBool>,
    polled: Arc<AtomicU64>,
) -> GroupOutcome {
    let mut config = ConsumerConfig::new(client_config(&bootstrap)).group(GROUP);
    config.auto_offset_reset = OffsetReset::Earliest;
    config.enable_auto_commit = false;
    config.session_timeout = Duration::from_secs(10);
    config.heartbeat_interval = Duration::from_secs(1);
    let mut consumer = Consumer::new(config)
        .await
        .unwrap_or_else(|e| panic!("group consumer: {e}"));
    let reassigned = Arc::new(Mutex::new(HashSet::new()));
    consumer.set_rebalance_listener(Box::new(Reassigned(reassigned.clone())));
    consumer
        .subscribe(&[TOPIC])
        .unwrap_or_else(|e| panic!("subscribe: {e}"));
    let mut out = GroupOutcome::default();
    let mut last: HashMap<i32, i64> = HashMap::new();
    let mut since_commit = 0;
    while !stop.load(Ordering::Relaxed) {
        let records = match consumer.poll(Duration::from_millis(300)).await {
            Ok(r) => r,
            Err(e) => {
                out.poll_errors.push(e.to_string());
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        for p in std::mem::take(
            &mut *reassigned
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        ) {
            last.remove(&p);
        }
        for r in records {
            if let Some(l) = last.get(&r.partition) {
                if r.offset <= *l {
                    out.backwards.push((r.partition, *l, r.offset));
                }
            }
            last.insert(r.partition, r.offset);
            let value =
                String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
            out.polled.push((r.partition, r.offset, value));
            polled.fetch_add(1, Ordering::Relaxed);
            since_commit += 1;
        }
        if since_commit >= 100 {
            since_commit = 0;
            let positions: Vec<(i32, i64)> = last.iter().map(|(p, o)| (*p, o + 1)).collect();
            match consumer.commit_sync().await {
                Ok(()) => {
                    for (p, o) in positions {
                        let a = out.acked.entry(p).or_insert(0);
                        *a = (*a).max(o);
                    }
                }
                Err(_) => out.commit_errors += 1,
            }
        }
    }
    eprintln!(
        "group member at the end: assignment {:?}, rebalance pending {}",
        consumer.assignment(),
        consumer.rebalance_pending()
    );
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(TOPIC, p))
        .collect();
    let committed = consumer
        .committed(&tps)
        .await
        .unwrap_or_else(|e| panic!("committed offsets: {e}"));
    for (tp, om) in committed {
        if let Some(om) = om {
            out.committed.insert(tp.partition, om.offset);
        }
    }
    let _ = consumer.close().await;
    out
}

/// The nodes, the producer and the tailing consumer of one test.
struct Run {
    cluster: Cluster3,
    bootstrap: String,
    started: Instant,
    producer: Arc<Producer>,
    produced: Arc<Mutex<Produced>>,
    stop: Arc<AtomicBool>,
    producing: tokio::task::JoinHandle<u64>,
    tailing: tokio::task::JoinHandle<(Consumer, Polled)>,
    grouped: tokio::task::JoinHandle<GroupOutcome>,
    /// Records the group member polled so far.
    group_polled: Arc<AtomicU64>,
}

/// How long a condition may take to appear (generous: a loaded two-core
/// machine runs three nodes, the test and other builds).
const WAIT: Duration = Duration::from_secs(20);
const ALL: [i32; 3] = [1, 2, 3];

/// The three-node clusters of this file run one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl Run {
    /// Starts the cluster, creates the topic (three replicas,
    /// min.insync.replicas=2), waits for full ISRs, then starts the
    /// producer and the tailing consumer and waits for some acks.
    async fn start() -> Run {
        if let Ok(filter) = std::env::var("SLUICE_TEST_CLIENT_LOG") {
            // Debugging aid: the clients' own logs, e.g. sluice_client=debug.
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(std::io::stderr)
                .try_init();
        }
        let started = Instant::now();
        let session = format!("broker.session.timeout.ms={SESSION_MS}");
        let lag = format!("replica.lag.time.max.ms={LAG_MS}");
        let cluster = Cluster3::start(&[
            "controller.quorum.election.timeout.ms=1000",
            &session,
            &lag,
            "default.replication.factor=3",
        ]);
        let bootstrap = cluster.bootstrap();

        // Every node registered, then the topic, replicated three ways.
        let admin = {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if let Ok(a) = Admin::connect(client_config(&bootstrap)).await {
                    let md = a.cluster().refresh(None).await.ok().map(|(md, _)| md);
                    if md.is_some_and(|m| m.brokers.len() == 3) {
                        break a;
                    }
                }
                assert!(Instant::now() < deadline, "three brokers never registered");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        };
        let created = admin
            .create_topics(vec![
                NewTopic::new(TOPIC, PARTITIONS, 3).config("min.insync.replicas", "2")
            ])
            .await
            .unwrap_or_else(|e| panic!("create topics: {e}"));
        for (name, r) in created {
            r.unwrap_or_else(|e| panic!("create {name}: {e}"));
        }
        until_views(&cluster, &ALL, "a full ISR everywhere", WAIT, |v| {
            v.values().all(|(l, _, isr)| *l > 0 && isr.len() == 3)
        })
        .await;
        // The group's coordinator (and so __consumer_offsets) exists before
        // the clients start, so the faults hit a settled group. (Creating
        // it from a FindCoordinator on an async worker while another
        // metadata change waited for the quorum could hang a node; main's
        // 12c5689 moves FindCoordinator to the blocking pool.)
        let deadline = Instant::now() + WAIT;
        while let Err(e) = admin.find_coordinator(GROUP).await {
            assert!(Instant::now() < deadline, "no coordinator for {GROUP}: {e}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        // The producer runs for the whole test.
        let mut pconfig = ProducerConfig::new(client_config(&bootstrap));
        pconfig.acks = -1;
        pconfig.enable_idempotence = Some(true);
        pconfig.request_timeout = Duration::from_secs(5);
        pconfig.delivery_timeout_ms = 120_000;
        pconfig.linger_ms = 5;
        let producer = Arc::new(
            Producer::new(pconfig)
                .await
                .unwrap_or_else(|e| panic!("producer: {e}")),
        );
        assert!(producer.is_idempotent());
        let produced = Arc::new(Mutex::new(Produced::default()));
        let done = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let producing = tokio::spawn(produce(
            producer.clone(),
            produced.clone(),
            done,
            stop.clone(),
        ));
        // So does a consumer, reading everything from the beginning.
        let tailing = tokio::spawn(tail(bootstrap.clone(), stop.clone()));
        // And a consumer group member, committing as it goes.
        let group_polled = Arc::new(AtomicU64::new(0));
        let grouped = tokio::spawn(group_member(
            bootstrap.clone(),
            stop.clone(),
            group_polled.clone(),
        ));
        let run = Run {
            cluster,
            bootstrap,
            started,
            producer,
            produced,
            stop,
            producing,
            tailing,
            grouped,
            group_polled,
        };
        run.progress("before the faults").await;
        run
    }

    /// Waits until 300 more records are acknowledged.
    async fn progress(&self, what: &str) {
        until_more_acks(&self.produced, 300, what, WAIT).await;
    }

    /// Waits until the views of `nodes` satisfy `f`.
    async fn views(
        &self,
        nodes: &[i32],
        what: &str,
        f: impl Fn(&BTreeMap<i32, (i32, i32, Vec<i32>)>) -> bool,
    ) -> BTreeMap<i32, (i32, i32, Vec<i32>)> {
        until_views(&self.cluster, nodes, what, WAIT, f).await
    }

    /// Waits until every node is back in every ISR.
    async fn full_isr(&self, what: &str) {
        self.views(&ALL, what, |v| {
            v.values().all(|(l, _, isr)| *l > 0 && isr.len() == 3)
        })
        .await;
    }

    /// Stops producing, reads everything back and checks Jepsen's Kafka
    /// workload properties.
    async fn finish_and_check(self) {
        let Run {
            cluster,
            bootstrap,
            started,
            producer,
            produced,
            stop,
            producing,
            tailing,
            grouped,
            group_polled,
        } = self;
        // After the last fault the group settles and its member polls on
        // (a rebalance may have been cut short by the faults).
        let from = group_polled.load(Ordering::Relaxed);
        let deadline = Instant::now() + Duration::from_secs(30);
        while group_polled.load(Ordering::Relaxed) < from + 300 {
            assert!(
                Instant::now() < deadline,
                "the group member polled {} records in 30 s after the faults",
                group_polled.load(Ordering::Relaxed) - from
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Stop producing; every record gets its outcome.
        stop.store(true, Ordering::Relaxed);
        let sent = producing
            .await
            .unwrap_or_else(|e| panic!("producer task: {e}"));
        tokio::time::timeout(Duration::from_secs(30), producer.flush())
            .await
            .unwrap_or_else(|_| panic!("flush timed out"));
        let produced = std::mem::take(
            &mut *produced
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        assert_eq!(
            produced.acked.len() + produced.failed.len(),
            sent as usize,
            "every record has an outcome"
        );
        assert!(
            produced.failed.is_empty(),
            "an idempotent producer with a 120 s delivery timeout retries through failover; \
             failed: {:?}",
            produced.failed.iter().take(5).collect::<Vec<_>>()
        );
        let _ = producer.close().await;
        eprintln!(
            "{sent} records sent, {} acknowledged, {:?} so far",
            produced.acked.len(),
            started.elapsed()
        );

        // The consumer that read during the faults reads on to the end;
        // two more read everything (the bootstrap order reversed the
        // second time). Then the checks.
        let tps: Vec<TopicPartition> = (0..PARTITIONS)
            .map(|p| TopicPartition::new(TOPIC, p))
            .collect();
        let ends = {
            let mut c = ConsumerConfig::new(client_config(&bootstrap));
            c.enable_auto_commit = false;
            let consumer = Consumer::new(c)
                .await
                .unwrap_or_else(|e| panic!("consumer: {e}"));
            consumer
                .end_offsets(&tps)
                .await
                .unwrap_or_else(|e| panic!("end offsets: {e}"))
        };
        let (consumer, polled) = tailing
            .await
            .unwrap_or_else(|e| panic!("tailing consumer: {e}"));
        let during: usize = polled.values().map(Vec::len).sum();
        eprintln!("the tailing consumer read {during} records during the faults");
        let live = read_to(consumer, polled, &ends).await;
        let first = read_to(reader(&bootstrap).await, Polled::new(), &ends).await;
        let reversed: Vec<&str> = bootstrap.split(',').rev().collect();
        let second = read_to(reader(&reversed.join(",")).await, Polled::new(), &ends).await;

        let mut at: HashMap<(i32, i64), String> = HashMap::new();
        let mut seen: HashMap<String, (i32, i64)> = HashMap::new();
        for read in [&live, &first, &second] {
            for (p, records) in read {
                for (offset, value) in records {
                    if let Some(other) = at.insert((*p, *offset), value.clone()) {
                        assert_eq!(
                            &other, value,
                            "partition {p} offset {offset} read as two different records"
                        );
                    }
                    if let Some(there) = seen.insert(value.clone(), (*p, *offset)) {
                        assert_eq!(
                            there,
                            (*p, *offset),
                            "{value} is in the log twice (idempotence)"
                        );
                    }
                }
            }
        }
        let mut lost = Vec::new();
        for (value, (p, offset)) in &produced.acked {
            match seen.get(value) {
                None => lost.push(value.clone()),
                Some(found) => assert_eq!(
                    found,
                    &(*p, *offset),
                    "{value} acknowledged at {p}/{offset} but read at {found:?}"
                ),
            }
        }
        lost.sort();
        assert!(
            lost.is_empty(),
            "{} acknowledged records lost, e.g. {:?}",
            lost.len(),
            &lost[..lost.len().min(10)]
        );
        for v in seen.keys() {
            assert!(
                produced.acked.contains_key(v),
                "{v} in the log but never acknowledged (every record was)"
            );
        }
        // The group member: what it polled is what the log holds, its
        // polls moved forward within each assignment, and every
        // acknowledged commit survived.
        let group = grouped
            .await
            .unwrap_or_else(|e| panic!("group member: {e}"));
        eprintln!(
            "the group member polled {} records, {} commits failed and were retried later, \
             poll errors: {:?}",
            group.polled.len(),
            group.commit_errors,
            group.poll_errors
        );
        for (p, o, v) in &group.polled {
            assert_eq!(
                at.get(&(*p, *o)),
                Some(v),
                "the group polled {v} at {p}/{o}, not what the log holds"
            );
        }
        assert!(
            group.backwards.is_empty(),
            "group polls went back: {:?}",
            group.backwards
        );
        for (p, acked) in &group.acked {
            let committed = group.committed.get(p).copied().unwrap_or(-1);
            assert!(
                committed >= *acked,
                "partition {p}: committed {committed} below the acknowledged commit {acked}"
            );
        }
        assert!(
            group.poll_errors.is_empty(),
            "poll failed: {:?}",
            group.poll_errors
        );
        eprintln!("checked {} records in {:?}", seen.len(), started.elapsed());
        drop(cluster);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idempotent_producer_survives_leader_kill_and_follower_pause() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut run = Run::start().await;

    // SIGKILL the leader of partition 0: a new leader (from the ISR, next
    // epoch) takes over once the controller fences the silent node, and
    // acks=all writes go on (two of three replicas meet
    // min.insync.replicas=2).
    let before = run
        .views(&ALL, "a leader for partition 0", |v| v[&0].0 > 0)
        .await;
    let (victim, epoch, _) = before[&0].clone();
    eprintln!("killing node {victim}, leader of partition 0 at epoch {epoch}");
    run.cluster.kill(victim);
    let others: Vec<i32> = ALL.iter().copied().filter(|i| *i != victim).collect();
    run.views(&others, "a new leader for partition 0", |v| {
        v.values().all(|(l, _, _)| *l > 0 && *l != victim) && v[&0].1 > epoch
    })
    .await;
    run.progress("after the leader was killed").await;

    // The killed node comes back on its folder, catches up and rejoins
    // every ISR.
    run.cluster.restart(victim);
    run.full_isr("the restarted node back in every ISR").await;
    run.progress("after the restart").await;

    // SIGSTOP a follower of partition 0 beyond the lag time: it leaves the
    // ISRs (and, silent, is fenced), writes go on with the other two; once
    // resumed it rejoins.
    let v = run
        .views(&ALL, "leaders", |v| v.values().all(|(l, _, _)| *l > 0))
        .await;
    let leader0 = v[&0].0;
    // Prefer a node that leads nothing (a pure follower).
    let follower = ALL
        .iter()
        .copied()
        .filter(|i| *i != leader0)
        .min_by_key(|i| v.values().filter(|(l, _, _)| l == i).count())
        .unwrap_or_else(|| panic!("no follower"));
    eprintln!("pausing node {follower} (partition 0 led by {leader0})");
    run.cluster.pause(follower);
    let others: Vec<i32> = ALL.iter().copied().filter(|i| *i != follower).collect();
    run.views(&others, "the paused node out of every ISR", |v| {
        v.values()
            .all(|(l, _, isr)| *l > 0 && *l != follower && !isr.contains(&follower))
    })
    .await;
    run.progress("while a follower is paused").await;
    run.cluster.resume(follower);
    run.full_isr("the resumed node back in every ISR").await;
    run.progress("after the resume").await;

    run.finish_and_check().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clients_ride_out_a_paused_leader_and_a_killed_controller_leader() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut run = Run::start().await;

    // SIGSTOP the leader of partition 0 beyond the session timeout: its
    // connections stay open but nothing answers (requests time out); the
    // controller fences it and elects a new leader. Resumed, the old
    // leader learns it was deposed, truncates what the new leader does
    // not have (nothing acknowledged) and follows.
    let before = run
        .views(&ALL, "a leader for partition 0", |v| v[&0].0 > 0)
        .await;
    let (paused, epoch, _) = before[&0].clone();
    eprintln!("pausing node {paused}, leader of partition 0 at epoch {epoch}");
    run.cluster.pause(paused);
    let others: Vec<i32> = ALL.iter().copied().filter(|i| *i != paused).collect();
    run.views(&others, "a new leader for partition 0", |v| {
        v.values()
            .all(|(l, _, isr)| *l > 0 && *l != paused && !isr.contains(&paused))
            && v[&0].1 > epoch
    })
    .await;
    run.progress("while the old leader is paused").await;
    run.cluster.resume(paused);
    run.full_isr("the resumed old leader back in every ISR")
        .await;
    run.progress("after the resume").await;

    // SIGKILL the metadata quorum's leader (the controller the brokers
    // name): the other two elect a new one; produce and fetch go on; the
    // killed node restarts and rejoins every ISR.
    let controller = {
        let deadline = Instant::now() + WAIT;
        loop {
            let mut c = client_config(&run.bootstrap);
            c.retries = 0;
            if let Ok(cl) = Cluster::connect(c).await {
                let id = cl.metadata().await.controller_id;
                if id > 0 {
                    break id;
                }
            }
            assert!(Instant::now() < deadline, "no controller named");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    eprintln!("killing node {controller}, the quorum leader");
    run.cluster.kill(controller);
    let others: Vec<i32> = ALL.iter().copied().filter(|i| *i != controller).collect();
    run.views(&others, "leaders away from the killed controller", |v| {
        v.values().all(|(l, _, _)| *l > 0 && *l != controller)
    })
    .await;
    run.progress("after the controller leader was killed").await;
    run.cluster.restart(controller);
    run.full_isr("the restarted controller back in every ISR")
        .await;
    run.progress("after the controller restart").await;

    // SIGKILL the node of the group's coordinator: the coordinator moves
    // with the leadership of its __consumer_offsets partition; the member
    // finds it again and its commits go on.
    let admin = Admin::connect(client_config(&run.bootstrap))
        .await
        .unwrap_or_else(|e| panic!("admin: {e}"));
    let coordinator = admin
        .find_coordinator(GROUP)
        .await
        .unwrap_or_else(|e| panic!("find coordinator: {e}"))
        .id;
    eprintln!("killing node {coordinator}, the group's coordinator");
    run.cluster.kill(coordinator);
    let others: Vec<i32> = ALL.iter().copied().filter(|i| *i != coordinator).collect();
    run.views(&others, "leaders away from the killed coordinator", |v| {
        v.values().all(|(l, _, _)| *l > 0 && *l != coordinator)
    })
    .await;
    run.progress("after the coordinator's node was killed")
        .await;
    run.cluster.restart(coordinator);
    run.full_isr("the restarted coordinator's node back in every ISR")
        .await;
    run.progress("after the coordinator's node restarted").await;

    run.finish_and_check().await;
}
