//! The runtime (KafkaStreams, stream threads, the streams assignor, state
//! directories, restoration, checkpoints) against a real in-process broker,
//! driving a hand-written counting task through the `RuntimeTask` trait
//! (independent of the DSL, so the runtime's behaviour is tested alone):
//! it counts records per key of a 6-partition input in a persistent,
//! logged store and writes each new count (8-byte big-endian, as Kafka's
//! LongSerializer) to an output topic.

#[path = "../../client/tests/common/mod.rs"]
mod common;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use sluice_client::consumer::{Consumer, ConsumerConfig, ConsumerRecord};
use sluice_client::{ProducerRecord, TopicPartition};
use sluice_streams::assignor::{SubtopologyMetadata, TopologyMetadata};
use sluice_streams::config::StreamsConfig;
use sluice_streams::processor::Headers;
use sluice_streams::runtime::StreamThreadExceptionResponse;
use sluice_streams::runtime::{
    KafkaStreams, OutputRecord, RuntimeTask, State, StoreSpec, TaskFactory,
};
use sluice_streams::state::directory::StateDirectory;
use sluice_streams::state::persistent::PersistentKeyValueStore;
use sluice_streams::state::KeyValueStore;
use sluice_streams::{Result, StreamsError, TaskId};

const INPUT: &str = "input";
const OUTPUT: &str = "output";
const PARTITIONS: i32 = 6;

/// The next record with value `boom` fails its task (once).
static BOOM_ARMED: AtomicBool = AtomicBool::new(false);

/// Counts records per key.
struct CountTask {
    id: TaskId,
    store: Box<dyn KeyValueStore>,
    queue: VecDeque<ConsumerRecord>,
    processed: BTreeMap<TopicPartition, i64>,
    out: Vec<OutputRecord>,
    changelog: String,
}

impl RuntimeTask for CountTask {
    fn id(&self) -> TaskId {
        self.id
    }
    fn add_records(&mut self, _: &TopicPartition, records: Vec<ConsumerRecord>) -> Result<()> {
        self.queue.extend(records);
        Ok(())
    }
    fn restore(&mut self, store: &str, key: Bytes, value: Option<Bytes>, _: i64) -> Result<()> {
        assert_eq!(store, "counts");
        match value {
            Some(v) => self.store.put(key, v),
            None => self.store.delete(&key).map(|_| ()),
        }
    }
    fn buffered(&self, _: &TopicPartition) -> usize {
        self.queue.len()
    }
    fn process(&mut self, _: i64) -> Result<bool> {
        let Some(r) = self.queue.pop_front() else {
            return Ok(false);
        };
        if r.value.as_deref() == Some(b"boom") && BOOM_ARMED.swap(false, Ordering::SeqCst) {
            return Err(StreamsError::IllegalState("boom".into()));
        }
        if let Some(key) = r.key.clone() {
            let old = self.store.get(&key)?.map_or(0, |v| {
                i64::from_be_bytes(v[..8].try_into().unwrap_or([0; 8]))
            });
            let count = Bytes::copy_from_slice(&(old + 1).to_be_bytes());
            self.store.put(key.clone(), count.clone())?;
            for (topic, partition) in [
                (self.changelog.clone(), Some(self.id.partition)),
                (OUTPUT.to_string(), None),
            ] {
                self.out.push(OutputRecord {
                    topic,
                    partition,
                    key: Some(key.clone()),
                    value: Some(count.clone()),
                    timestamp: r.timestamp,
                    headers: Headers::default(),
                });
            }
        }
        self.processed
            .insert(TopicPartition::new(&*r.topic, r.partition), r.offset + 1);
        Ok(true)
    }
    fn punctuate(&mut self, _: i64) -> Result<bool> {
        Ok(false)
    }
    fn drain_output(&mut self) -> Vec<OutputRecord> {
        std::mem::take(&mut self.out)
    }
    fn committable_offsets(&self) -> BTreeMap<TopicPartition, i64> {
        self.processed.clone()
    }
    fn flush(&mut self) -> Result<()> {
        self.store.flush()
    }
    fn close(&mut self) -> Result<()> {
        self.store.close()
    }
}

struct CountFactory {
    app: String,
}

impl TaskFactory for CountFactory {
    fn stores(&self, _: u32) -> Vec<StoreSpec> {
        vec![StoreSpec {
            name: "counts".into(),
            persistent: true,
            logged: true,
        }]
    }
    fn create_task(
        &self,
        id: TaskId,
        _: Vec<TopicPartition>,
        state_dir: &Arc<StateDirectory>,
    ) -> Result<Box<dyn RuntimeTask>> {
        Ok(Box::new(CountTask {
            id,
            store: Box::new(PersistentKeyValueStore::open(
                "counts",
                &state_dir.store_dir(id, "counts"),
            )?),
            queue: VecDeque::new(),
            processed: BTreeMap::new(),
            out: Vec::new(),
            changelog: format!("{}-counts-changelog", self.app),
        }))
    }
}

fn topology() -> TopologyMetadata {
    TopologyMetadata {
        subtopologies: vec![SubtopologyMetadata {
            id: 0,
            source_topics: vec![INPUT.into()],
            repartition_source_topics: vec![],
            state_stores: vec!["counts".into()],
            changelog_stores: vec!["counts".into()],
            copartition_groups: vec![],
        }],
        repartition_topics: vec![],
    }
}

fn instance(server: &common::TestServer, app: &str, state_dir: &std::path::Path) -> KafkaStreams {
    instance_with(server, app, state_dir, |_| {})
}

fn instance_with(
    server: &common::TestServer,
    app: &str,
    state_dir: &std::path::Path,
    f: impl FnOnce(&mut StreamsConfig),
) -> KafkaStreams {
    let mut cfg = StreamsConfig::new(app, server.client_config());
    cfg.set("commit.interval.ms", "100").expect("cfg");
    cfg.set("state.dir", &state_dir.display().to_string())
        .expect("cfg");
    cfg.set("session.timeout.ms", "6000").expect("cfg");
    cfg.set("heartbeat.interval.ms", "200").expect("cfg");
    f(&mut cfg);
    KafkaStreams::new(topology(), Arc::new(CountFactory { app: app.into() }), cfg).expect("streams")
}

async fn start_server() -> common::TestServer {
    let server = common::start_with(|c| {
        c.set("group.initial.rebalance.delay.ms", "0").expect("cfg");
    })
    .await;
    server.create_topic(INPUT, PARTITIONS).await;
    server.create_topic(OUTPUT, PARTITIONS).await;
    server
}

/// Produces `n` records keyed `w<i % keys>` starting at `from`; adds them
/// to `reference`.
async fn produce(
    server: &common::TestServer,
    from: usize,
    n: usize,
    keys: usize,
    reference: &mut BTreeMap<String, i64>,
) {
    let producer = server.producer(|_| {}).await;
    let mut acks = Vec::new();
    for i in from..from + n {
        let key = format!("w{}", i % keys);
        *reference.entry(key.clone()).or_default() += 1;
        acks.push(
            producer
                .send(ProducerRecord::new(INPUT, format!("{i}")).key(key.into_bytes()))
                .await
                .expect("send"),
        );
    }
    for a in acks {
        a.await.expect("ack");
    }
    producer.close().await.expect("close");
}

/// The last count written to the output topic per key.
async fn output_counts(server: &common::TestServer) -> BTreeMap<String, i64> {
    let mut consumer = Consumer::new(ConsumerConfig::new(server.client_config()))
        .await
        .expect("consumer");
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(OUTPUT, p))
        .collect();
    let ends = consumer.end_offsets(&tps).await.expect("ends");
    consumer.assign(&tps).expect("assign");
    consumer.seek_to_beginning(&[]).expect("seek");
    let mut out = BTreeMap::new();
    loop {
        let mut done = true;
        for tp in &tps {
            if consumer.position(tp).await.expect("position") < ends[tp] {
                done = false;
            }
        }
        if done {
            break;
        }
        for r in consumer
            .poll(Duration::from_millis(200))
            .await
            .expect("poll")
        {
            let key = String::from_utf8(r.key.expect("key").to_vec()).expect("utf8");
            let v = r.value.expect("value");
            out.insert(key, i64::from_be_bytes(v[..8].try_into().expect("8 bytes")));
        }
    }
    consumer.close().await.expect("close");
    out
}

/// Waits until `cond` holds (up to 60 s).
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..600 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counts_six_partitions_and_reports_states() {
    let server = start_server().await;
    let state = tempfile::tempdir().expect("state");
    let mut reference = BTreeMap::new();
    produce(&server, 0, 3000, 50, &mut reference).await;

    let streams = instance(&server, "count", state.path());
    let seen: Arc<Mutex<Vec<(State, State)>>> = Arc::default();
    let log = seen.clone();
    streams
        .set_state_listener(move |new, old| log.lock().expect("lock").push((new, old)))
        .expect("listener");
    streams.start().await.expect("start");
    assert!(
        streams
            .wait_for_state(State::Running, Duration::from_secs(30))
            .await
    );
    eventually("all records processed", || {
        streams.processed_records() >= 3000
    })
    .await;
    assert_eq!(streams.active_tasks().len(), 6);
    assert!(streams.close(Duration::from_secs(30)).await);
    assert_eq!(streams.state(), State::NotRunning);
    let transitions = seen.lock().expect("lock").clone();
    assert_eq!(
        transitions.first(),
        Some(&(State::Rebalancing, State::Created))
    );
    assert!(transitions.contains(&(State::Running, State::Rebalancing)));
    assert_eq!(
        transitions.last(),
        Some(&(State::NotRunning, State::PendingShutdown))
    );

    assert_eq!(output_counts(&server).await, reference);
    // Every task folder has a lock file and a checkpoint in Kafka's format.
    for p in 0..PARTITIONS {
        let dir = state.path().join("count").join(format!("0_{p}"));
        assert!(dir.join(".lock").exists());
        let cp = std::fs::read_to_string(dir.join(".checkpoint")).expect("checkpoint");
        assert!(cp.starts_with("0\n1\ncount-counts-changelog "), "{cp}");
        assert!(dir.join("fjall").join("counts").is_dir());
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tasks_migrate_between_instances_and_state_follows() {
    let server = start_server().await;
    let (sa, sb) = (
        tempfile::tempdir().expect("state"),
        tempfile::tempdir().expect("state"),
    );
    let mut reference = BTreeMap::new();
    let a = instance_with(&server, "mig", sa.path(), |c| {
        c.set("state.cleanup.delay.ms", "300").expect("cfg");
    });
    a.start().await.expect("start a");
    assert!(
        a.wait_for_state(State::Running, Duration::from_secs(30))
            .await
    );
    assert_eq!(a.active_tasks().len(), 6);
    produce(&server, 0, 1200, 30, &mut reference).await;
    eventually("a processed batch 1", || a.processed_records() >= 1200).await;

    // A second instance joins: 3 + 3.
    let b = instance(&server, "mig", sb.path());
    b.start().await.expect("start b");
    eventually("3 + 3", || {
        a.active_tasks().len() == 3
            && b.active_tasks().len() == 3
            && a.state() == State::Running
            && b.state() == State::Running
    })
    .await;
    let b_tasks = b.active_tasks();
    assert!(a.active_tasks().is_disjoint(&b_tasks));
    // a's cleaner deletes the folders of the tasks it gave away.
    let a_dir = sa.path().join("mig");
    eventually("a's obsolete task folders deleted", || {
        let folders: Vec<String> = std::fs::read_dir(&a_dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.path().is_dir())
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        folders.len() == 3 && b_tasks.iter().all(|t| !folders.contains(&t.to_string()))
    })
    .await;
    produce(&server, 1200, 1200, 30, &mut reference).await;
    eventually("batch 2 processed", || {
        a.processed_records() + b.processed_records() >= 2400
    })
    .await;
    // b restored its three tasks' state from their changelogs.
    assert!(b.restored_records() > 0);

    // a stops: b owns all 6, restoring a's tasks from the changelog.
    assert!(a.close(Duration::from_secs(30)).await);
    eventually("b owns 6", || {
        b.active_tasks().len() == 6 && b.state() == State::Running
    })
    .await;
    assert!(
        b_tasks.iter().all(|t| b.active_tasks().contains(t)),
        "sticky"
    );
    let before = b.processed_records();
    produce(&server, 2400, 600, 30, &mut reference).await;
    eventually("batch 3 processed", || {
        b.processed_records() >= before + 600
    })
    .await;
    assert!(b.close(Duration::from_secs(30)).await);

    // Clean hand-overs commit before every rebalance: the counts continue
    // from the changelogs with no double counting.
    assert_eq!(output_counts(&server).await, reference);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clean_restart_restores_from_the_checkpoint() {
    let server = start_server().await;
    let state = tempfile::tempdir().expect("state");
    let mut reference = BTreeMap::new();
    produce(&server, 0, 3000, 100, &mut reference).await;

    let first = instance(&server, "rs", state.path());
    first.start().await.expect("start");
    eventually("processed", || first.processed_records() >= 3000).await;
    assert!(first.close(Duration::from_secs(30)).await);
    assert_eq!(first.restored_records(), 0);
    let changelog_records = 3000u64;

    // Clean restart: the checkpoints cover everything.
    let second = instance(&server, "rs", state.path());
    second.start().await.expect("start");
    assert!(
        second
            .wait_for_state(State::Running, Duration::from_secs(30))
            .await
    );
    assert!(
        second.restored_records() * 100 < changelog_records,
        "restored {} of {changelog_records}",
        second.restored_records()
    );
    produce(&server, 3000, 300, 100, &mut reference).await;
    eventually("processed", || second.processed_records() >= 300).await;
    assert!(second.close(Duration::from_secs(30)).await);
    assert_eq!(
        first.process_id(),
        second.process_id(),
        "process id kept in the state dir"
    );

    // Delete the store folders: a full restore, and identical results.
    for p in 0..PARTITIONS {
        let fjall = state.path().join("rs").join(format!("0_{p}")).join("fjall");
        std::fs::remove_dir_all(&fjall).expect("remove store");
    }
    let third = instance(&server, "rs", state.path());
    third.start().await.expect("start");
    assert!(
        third
            .wait_for_state(State::Running, Duration::from_secs(30))
            .await
    );
    assert_eq!(third.restored_records(), changelog_records + 300);
    produce(&server, 3300, 300, 100, &mut reference).await;
    eventually("processed", || third.processed_records() >= 300).await;
    assert!(third.close(Duration::from_secs(30)).await);
    assert_eq!(output_counts(&server).await, reference);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn threads_can_be_added_and_removed_at_run_time() {
    let server = start_server().await;
    let state = tempfile::tempdir().expect("state");
    let mut reference = BTreeMap::new();
    let streams = instance(&server, "threads", state.path());
    streams.start().await.expect("start");
    assert!(
        streams
            .wait_for_state(State::Running, Duration::from_secs(30))
            .await
    );
    assert_eq!(streams.thread_tasks().len(), 1);
    produce(&server, 0, 600, 20, &mut reference).await;

    let added = streams.add_stream_thread().expect("add");
    assert_eq!(added, "threads-StreamThread-2");
    eventually("3 + 3 over two threads", || {
        let t = streams.thread_tasks();
        t.len() == 2
            && t.values().all(|tasks| tasks.len() == 3)
            && streams.state() == State::Running
    })
    .await;
    produce(&server, 600, 600, 20, &mut reference).await;
    let removed = streams
        .remove_stream_thread(Duration::from_secs(30))
        .await
        .expect("remove");
    assert_eq!(removed.as_deref(), Some("threads-StreamThread-2"));
    eventually("one thread with 6 tasks", || {
        let t = streams.thread_tasks();
        t.len() == 1
            && t.values().all(|tasks| tasks.len() == 6)
            && streams.state() == State::Running
    })
    .await;
    produce(&server, 1200, 600, 20, &mut reference).await;
    eventually("all processed", || streams.processed_records() >= 1800).await;
    assert!(streams.close(Duration::from_secs(30)).await);
    assert_eq!(output_counts(&server).await, reference);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_thread_is_replaced_or_stops_the_client() {
    let server = start_server().await;
    let state = tempfile::tempdir().expect("state");
    let mut reference = BTreeMap::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let streams = instance(&server, "replace", state.path());
    streams
        .set_uncaught_exception_handler(move |e| {
            assert!(e.to_string().contains("boom"), "{e}");
            seen.fetch_add(1, Ordering::SeqCst);
            StreamThreadExceptionResponse::ReplaceThread
        })
        .expect("handler");
    streams.start().await.expect("start");
    assert!(
        streams
            .wait_for_state(State::Running, Duration::from_secs(30))
            .await
    );
    BOOM_ARMED.store(true, Ordering::SeqCst);
    let producer = server.producer(|_| {}).await;
    producer
        .send(ProducerRecord::new(INPUT, "boom").key(b"w0".to_vec()))
        .await
        .expect("send")
        .await
        .expect("ack");
    producer.close().await.expect("close");
    *reference.entry("w0".to_string()).or_default() += 1;
    produce(&server, 0, 300, 10, &mut reference).await;
    eventually("a replacement thread", || calls.load(Ordering::SeqCst) == 1).await;
    eventually("running again", || {
        streams.state() == State::Running && streams.active_tasks().len() == 6
    })
    .await;
    assert!(streams
        .thread_tasks()
        .contains_key("replace-StreamThread-2"));
    assert_eq!(streams.errors().len(), 1);
    assert!(streams.close(Duration::from_secs(30)).await);
    // At least once: every record is counted, some maybe twice.
    let out = output_counts(&server).await;
    for (k, n) in &reference {
        assert!(
            out.get(k).is_some_and(|c| c >= n),
            "{k}: {:?} < {n}",
            out.get(k)
        );
    }

    // The default handler shuts the client down: ERROR.
    let failing = instance(&server, "shutdown", state.path());
    let states: Arc<Mutex<Vec<State>>> = Arc::default();
    let log = states.clone();
    failing
        .set_state_listener(move |new, _| log.lock().expect("lock").push(new))
        .expect("listener");
    BOOM_ARMED.store(true, Ordering::SeqCst);
    failing.start().await.expect("start");
    assert!(
        failing
            .wait_for_state(State::Error, Duration::from_secs(30))
            .await
    );
    let states = states.lock().expect("lock").clone();
    assert_eq!(
        &states[states.len() - 2..],
        &[State::PendingError, State::Error]
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_application_stops_every_instance() {
    let server = start_server().await;
    let (sa, sb) = (
        tempfile::tempdir().expect("state"),
        tempfile::tempdir().expect("state"),
    );
    let a = instance(&server, "app-stop", sa.path());
    a.set_uncaught_exception_handler(|_| StreamThreadExceptionResponse::ShutdownApplication)
        .expect("handler");
    let b = instance(&server, "app-stop", sb.path());
    a.start().await.expect("start a");
    b.start().await.expect("start b");
    eventually("3 + 3", || {
        a.active_tasks().len() == 3 && b.active_tasks().len() == 3
    })
    .await;
    // A record for one of a's tasks fails it.
    let a_partition = a.active_tasks().iter().next().expect("a task").partition;
    BOOM_ARMED.store(true, Ordering::SeqCst);
    let producer = server.producer(|_| {}).await;
    producer
        .send(ProducerRecord::new(INPUT, "boom").partition(a_partition))
        .await
        .expect("send")
        .await
        .expect("ack");
    producer.close().await.expect("close");
    assert!(
        a.wait_for_state(State::Error, Duration::from_secs(30))
            .await,
        "a: {:?}",
        a.state()
    );
    assert!(
        b.wait_for_state(State::Error, Duration::from_secs(30))
            .await,
        "b: {:?}",
        b.state()
    );
    assert!(
        b.errors().is_empty(),
        "b itself did not fail: {:?}",
        b.errors()
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn corrupt_missing_or_impossible_checkpoints_restore_from_scratch() {
    let server = start_server().await;
    let state = tempfile::tempdir().expect("state");
    let mut reference = BTreeMap::new();
    produce(&server, 0, 1200, 40, &mut reference).await;
    let first = instance(&server, "cp", state.path());
    first.start().await.expect("start");
    eventually("processed", || first.processed_records() >= 1200).await;
    assert!(first.close(Duration::from_secs(30)).await);

    let app = state.path().join("cp");
    let checkpoint = |p: i32| app.join(format!("0_{p}")).join(".checkpoint");
    // 0_0: garbage; 0_1: missing; 0_2: past the changelog's end.
    std::fs::write(checkpoint(0), "not a checkpoint").expect("corrupt");
    std::fs::remove_file(checkpoint(1)).expect("remove");
    std::fs::write(checkpoint(2), "0\n1\ncp-counts-changelog 2 999999\n").expect("future");
    let cl = |p: i32| -> u64 {
        std::fs::read_to_string(checkpoint(p))
            .ok()
            .and_then(|t| t.lines().nth(2).map(str::to_string))
            .and_then(|l| l.split(' ').nth(2).and_then(|o| o.parse::<u64>().ok()))
            .map_or(0, |o| o + 1)
    };
    // Changelog records of the untouched tasks (restored: none of them).
    let untouched: u64 = (3..PARTITIONS).map(cl).sum();
    assert!(untouched > 0);

    let second = instance(&server, "cp", state.path());
    second.start().await.expect("start");
    assert!(
        second
            .wait_for_state(State::Running, Duration::from_secs(30))
            .await
    );
    // Exactly the three damaged tasks were restored from scratch: every
    // changelog record is restored except those of the untouched tasks.
    assert_eq!(second.restored_records(), 1200 - untouched);
    // Their checkpoints are valid again.
    for p in 0..3 {
        let text = std::fs::read_to_string(checkpoint(p)).expect("checkpoint");
        assert!(text.starts_with("0\n1\ncp-counts-changelog "), "{text}");
        assert!(!text.contains("999999"));
    }
    produce(&server, 1200, 300, 40, &mut reference).await;
    eventually("processed", || second.processed_records() >= 300).await;
    assert!(second.close(Duration::from_secs(30)).await);
    assert_eq!(output_counts(&server).await, reference);
    server.stop().await;
}
