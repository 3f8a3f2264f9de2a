//! The processor API through the driver and the task core: stores,
//! punctuation on stream and wall-clock time, record metadata and headers,
//! named children, commit requests, the record cache.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use sluice_streams::dsl::{Consumed, Materialized, Produced, StreamsBuilder};
use sluice_streams::processor::{Headers, Processor, ProcessorContext, PunctuationType, Record};
use sluice_streams::serde::{SerdeRef, Serdes};
use sluice_streams::task::{ConsumedRecord, OutputRecord, StreamTask, TaskConfig};
use sluice_streams::test_driver::{DriverConfig, TopologyTestDriver};
use sluice_streams::topology::{StoreBuilder, Topology};
use sluice_streams::{Result, TaskId};

fn s() -> SerdeRef<String> {
    Serdes::string()
}

/// Counts per key in store "counts"; emits every count on punctuation.
struct Counter {
    ty: PunctuationType,
}

impl Processor<String, String> for Counter {
    fn init(&mut self, ctx: &mut ProcessorContext<'_>) -> Result<()> {
        ctx.schedule(
            Duration::from_millis(10),
            self.ty,
            Box::new(|ctx, ts| {
                let all = ctx.typed_store("counts", s(), Serdes::i64())?.all()?;
                for (key, n) in all {
                    ctx.forward(Record::new(key, format!("{n}@{ts}"), ts))?;
                }
                Ok(())
            }),
        )?;
        Ok(())
    }
    fn process(&mut self, ctx: &mut ProcessorContext<'_>, r: Record<String, String>) -> Result<()> {
        let mut store = ctx.typed_store("counts", s(), Serdes::i64())?;
        let n = store.get(&r.key)?.unwrap_or(0) + 1;
        store.put(&r.key, &n)?;
        Ok(())
    }
}

fn counter_topology(ty: PunctuationType) -> Topology {
    let mut t = Topology::new();
    t.add_source("src", &["in"], s(), s())
        .unwrap()
        .add_processor("counter", move || Counter { ty }, &["src"])
        .unwrap()
        .add_state_store(StoreBuilder::in_memory("counts"), &["counter"])
        .unwrap()
        .add_sink("sink", "out", s(), s(), &["counter"])
        .unwrap();
    t
}

#[test]
fn stream_time_punctuation_fires_as_records_advance_time() {
    let d = TopologyTestDriver::new(&counter_topology(PunctuationType::StreamTime)).unwrap();
    let i = d.create_input_topic("in", s(), s());
    let o = d.create_output_topic("out", s(), s());
    i.pipe_input("a".into(), "x".into(), 3).unwrap();
    // First punctuation as soon as there is data, aligned to 0.
    assert_eq!(
        o.read_key_values_to_list().unwrap(),
        vec![("a".to_string(), "1@3".to_string())]
    );
    i.pipe_input("a".into(), "x".into(), 9).unwrap();
    assert!(o.is_empty());
    i.pipe_input("b".into(), "x".into(), 4).unwrap(); // out of order: stream time stays 9
    assert!(o.is_empty());
    i.pipe_input("b".into(), "x".into(), 35).unwrap(); // missed 10, 20, 30: fires once
    assert_eq!(
        o.read_values_to_list().unwrap(),
        vec!["2@35".to_string(), "2@35".to_string()]
    );
    i.pipe_input("b".into(), "x".into(), 39).unwrap();
    assert!(o.is_empty());
    i.pipe_input("b".into(), "x".into(), 40).unwrap();
    assert_eq!(
        o.read_values_to_list().unwrap(),
        vec!["2@40".to_string(), "4@40".to_string()]
    );
    // Wall-clock time does not drive stream-time punctuations.
    d.advance_wall_clock_time(Duration::from_secs(60)).unwrap();
    assert!(o.is_empty());
}

#[test]
fn wall_clock_punctuation_fires_as_the_driver_clock_advances() {
    let d = TopologyTestDriver::with_config(
        &counter_topology(PunctuationType::WallClockTime),
        DriverConfig {
            initial_wall_clock_ms: 1000,
            ..DriverConfig::default()
        },
    )
    .unwrap();
    let i = d.create_input_topic("in", s(), s());
    let o = d.create_output_topic("out", s(), s());
    i.pipe_input("a".into(), "x".into(), 99_999).unwrap();
    assert!(o.is_empty(), "records do not drive wall-clock punctuations");
    d.advance_wall_clock_time(Duration::from_millis(9)).unwrap();
    assert!(o.is_empty());
    d.advance_wall_clock_time(Duration::from_millis(1)).unwrap();
    assert_eq!(o.read_values_to_list().unwrap(), vec!["1@1010".to_string()]);
    d.advance_wall_clock_time(Duration::from_millis(25))
        .unwrap();
    assert_eq!(o.read_values_to_list().unwrap(), vec!["1@1035".to_string()]);
    d.advance_wall_clock_time(Duration::from_millis(5)).unwrap();
    assert_eq!(o.read_values_to_list().unwrap(), vec!["1@1040".to_string()]);
}

/// Checks metadata and routes by header to a named child.
struct Router {
    seen: Arc<Mutex<Vec<String>>>,
}

impl Processor<String, String> for Router {
    fn process(&mut self, ctx: &mut ProcessorContext<'_>, r: Record<String, String>) -> Result<()> {
        self.seen.lock().unwrap().push(format!(
            "{}/{}/{}/{}",
            ctx.topic().unwrap_or("-"),
            ctx.partition(),
            ctx.offset(),
            ctx.timestamp()
        ));
        let to = ctx
            .headers()
            .last_header("route")
            .and_then(|h| h.value.clone())
            .map(|v| String::from_utf8_lossy(&v).to_string())
            .unwrap_or_else(|| "left".into());
        let mut h = r.headers.clone();
        h.add("via", Some(Bytes::from_static(b"router")));
        let ts = r.timestamp + 1;
        ctx.forward_to(r.with_headers(h).with_timestamp(ts), &to)?;
        if ctx.forward_to(Record::new(1, 2, 0), "nope").is_ok() {
            panic!("unknown child must fail");
        }
        Ok(())
    }
}

#[test]
fn context_metadata_headers_and_forward_to_child() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let mut t = Topology::new();
    t.add_source("src", &["in"], s(), s())
        .unwrap()
        .add_processor(
            "router",
            move || Router {
                seen: seen2.clone(),
            },
            &["src"],
        )
        .unwrap()
        .add_sink("left", "left-out", s(), s(), &["router"])
        .unwrap()
        .add_sink("right", "right-out", s(), s(), &["router"])
        .unwrap();
    let d = TopologyTestDriver::new(&t).unwrap();
    let i = d.create_input_topic("in", s(), s());
    i.pipe_input("a".into(), "1".into(), 10).unwrap();
    let mut h = Headers::new();
    h.add("route", Some(Bytes::from_static(b"right")));
    i.pipe_record(Record::new("b".into(), "2".into(), 20).with_headers(h))
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), vec!["in/0/0/10", "in/0/1/20"]);
    let left = d
        .create_output_topic("left-out", s(), s())
        .read_records_to_list()
        .unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].timestamp, 11);
    assert_eq!(
        left[0].headers.last_header("via").unwrap().value.as_deref(),
        Some(&b"router"[..])
    );
    let right = d
        .create_output_topic("right-out", s(), s())
        .read_records_to_list()
        .unwrap();
    assert_eq!((right[0].key.as_str(), right[0].timestamp), ("b", 21));
    assert!(right[0].headers.last_header("route").is_some());
}

struct Committer;

impl Processor<String, String> for Committer {
    fn process(&mut self, ctx: &mut ProcessorContext<'_>, r: Record<String, String>) -> Result<()> {
        if r.value == "commit" {
            ctx.commit();
        }
        // A store not connected to this processor is refused.
        assert!(ctx.store("counts").is_err());
        Ok(())
    }
}

fn consumed(offset: i64, ts: i64, key: &str, value: &str) -> ConsumedRecord {
    ConsumedRecord {
        offset,
        timestamp: ts,
        key: Some(Bytes::from(key.to_string())),
        value: Some(Bytes::from(value.to_string())),
        headers: Headers::new(),
    }
}

#[test]
fn task_commit_request_and_offsets() {
    let mut t = Topology::new();
    t.add_source("src", &["in"], s(), s())
        .unwrap()
        .add_processor("p", || Committer, &["src"])
        .unwrap();
    let mut task = StreamTask::new(&t, TaskId::new(0, 2), &TaskConfig::default(), 0).unwrap();
    assert_eq!(task.input_partitions(), vec![("in".to_string(), 2)]);
    task.add_records(
        "in",
        2,
        [consumed(40, 1, "k", "x"), consumed(41, 2, "k", "commit")],
    )
    .unwrap();
    assert!(task.add_records("in", 3, []).is_err());
    let mut out: Vec<OutputRecord> = Vec::new();
    assert!(task.process(0, &mut out).unwrap());
    assert!(!task.commit_requested());
    assert!(task.process(0, &mut out).unwrap());
    assert!(task.commit_requested());
    assert!(!task.process(0, &mut out).unwrap());
    let offsets = task.prepare_commit(&mut out).unwrap();
    assert_eq!(offsets.get(&("in".to_string(), 2)), Some(&42));
    assert!(!task.commit_requested());
    assert!(!task.commit_needed());
    task.close().unwrap();
}

#[test]
fn task_picks_lowest_timestamp_across_partitions_and_logs_changes() {
    // Two topics into one aggregation: the task interleaves them by
    // timestamp, and every store write lands on the changelog partition
    // of the task.
    let b = StreamsBuilder::new();
    let a = b.stream("a", Consumed::with(s(), s()));
    let c = b.stream("c", Consumed::with(s(), s()));
    a.merge(&c)
        .group_by_key(Default::default())
        .reduce(
            |x, y| format!("{x}{y}"),
            Materialized::as_("cat").with_caching_disabled(),
        )
        .to_stream()
        .to("out", Produced::with(s(), Serdes::nullable(s())));
    let t = b.build().unwrap();
    let cfg = TaskConfig {
        application_id: "app".into(),
        max_task_idle_ms: 100,
        ..TaskConfig::default()
    };
    let mut task = StreamTask::new(&t, TaskId::new(0, 1), &cfg, 0).unwrap();
    task.add_records(
        "a",
        1,
        [consumed(0, 1, "k", "a1"), consumed(1, 5, "k", "a5")],
    )
    .unwrap();
    let mut out = Vec::new();
    // "c" is empty: wait up to max.task.idle.ms.
    assert!(!task.process(1000, &mut out).unwrap());
    assert!(!task.process(1050, &mut out).unwrap());
    task.add_records("c", 1, [consumed(0, 3, "k", "c3")])
        .unwrap();
    assert_eq!(task.process_all(1050, &mut out).unwrap(), 2);
    // "c" drained again; after idling, "a" goes on alone.
    assert!(!task.process(1060, &mut out).unwrap());
    assert!(task.process(1160, &mut out).unwrap());
    assert_eq!(task.stream_time(), 5);
    let values: Vec<String> = out
        .iter()
        .filter(|r| r.topic == "out")
        .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap())
        .collect();
    assert_eq!(values, vec!["a1", "a1c3", "a1c3a5"]);
    let changelog: Vec<OutputRecord> = out
        .iter()
        .filter(|r| r.topic == "app-cat-changelog")
        .cloned()
        .collect();
    assert_eq!(changelog.len(), 3);
    assert!(changelog.iter().all(|r| r.partition == Some(1)));
    assert_eq!(changelog[2].timestamp, 5);
    let offsets = task.prepare_commit(&mut out).unwrap();
    assert_eq!(offsets.get(&("a".to_string(), 1)), Some(&2));
    assert_eq!(offsets.get(&("c".to_string(), 1)), Some(&1));

    // Restoration writes the store without logging or forwarding.
    let mut fresh = StreamTask::new(&t, TaskId::new(0, 1), &cfg, 0).unwrap();
    fresh
        .restore(
            "cat",
            changelog
                .iter()
                .map(|r| (r.key.clone().unwrap(), r.value.clone(), r.timestamp)),
        )
        .unwrap();
    // The changelog carries plain values; the timestamped DSL store gets
    // the record timestamp back as its 8-byte prefix.
    assert_eq!(
        changelog[2].value.as_deref(),
        Some(&b"a1c3a5"[..]),
        "changelog values carry no timestamp prefix"
    );
    let store = fresh.store_mut("cat").unwrap();
    assert!(store.is_timestamped());
    let all = store.inner_all().unwrap();
    let mut want = 5i64.to_be_bytes().to_vec();
    want.extend_from_slice(b"a1c3a5");
    assert_eq!(all, vec![(Bytes::from("k"), Bytes::from(want))]);
}

#[test]
fn record_cache_deduplicates_until_commit() {
    let b = StreamsBuilder::new();
    b.stream("in", Consumed::with(s(), s()))
        .group_by_key(Default::default())
        .count(Materialized::as_("cnt"))
        .to_stream()
        .to("out", Produced::with(s(), Serdes::nullable(Serdes::i64())));
    let t = b.build().unwrap();
    let d = TopologyTestDriver::with_config(
        &t,
        DriverConfig {
            commit_every_record: false,
            ..DriverConfig::default()
        },
    )
    .unwrap();
    let i = d.create_input_topic("in", s(), s());
    let o = d.create_output_topic("out", s(), Serdes::i64());
    for k in ["a", "b", "a", "a", "b"] {
        i.pipe_input(k.into(), "x".into(), 0).unwrap();
    }
    assert!(o.is_empty(), "the cache holds updates until a commit");
    assert!(d
        .produced("test-driver-application-cnt-changelog")
        .is_empty());
    // Reads see the cache.
    assert_eq!(
        d.key_value_store_get("cnt", &"a".to_string(), &s(), &Serdes::i64())
            .unwrap(),
        Some(3)
    );
    d.commit().unwrap();
    // One record per key, in the order of their last update.
    assert_eq!(
        o.read_key_values_to_list().unwrap(),
        vec![("a".to_string(), 3), ("b".to_string(), 2)]
    );
    assert_eq!(d.produced("test-driver-application-cnt-changelog").len(), 2);
    i.pipe_input("a".into(), "x".into(), 0).unwrap();
    d.commit().unwrap();
    assert_eq!(
        o.read_key_values_to_list().unwrap(),
        vec![("a".to_string(), 4)]
    );

    // Without a cache every update goes through.
    let b = StreamsBuilder::new();
    b.stream("in", Consumed::with(s(), s()))
        .group_by_key(Default::default())
        .count(Materialized::as_("cnt").with_caching_disabled())
        .to_stream()
        .to("out", Produced::with(s(), Serdes::nullable(Serdes::i64())));
    let d = TopologyTestDriver::with_config(
        &b.build().unwrap(),
        DriverConfig {
            commit_every_record: false,
            ..DriverConfig::default()
        },
    )
    .unwrap();
    let i = d.create_input_topic("in", s(), s());
    for _ in 0..3 {
        i.pipe_input("a".into(), "x".into(), 0).unwrap();
    }
    assert_eq!(
        d.create_output_topic("out", s(), Serdes::i64())
            .queue_size(),
        3
    );
}

#[test]
fn a_small_cache_flushes_when_full() {
    let b = StreamsBuilder::new();
    b.stream("in", Consumed::with(s(), s()))
        .group_by_key(Default::default())
        .count(Materialized::as_("cnt"))
        .to_stream()
        .to("out", Produced::with(s(), Serdes::nullable(Serdes::i64())));
    let d = TopologyTestDriver::with_config(
        &b.build().unwrap(),
        DriverConfig {
            commit_every_record: false,
            cache_max_bytes: 200, // about two entries
            ..DriverConfig::default()
        },
    )
    .unwrap();
    let i = d.create_input_topic("in", s(), s());
    let o = d.create_output_topic("out", s(), Serdes::i64());
    i.pipe_input("a".into(), "x".into(), 0).unwrap();
    i.pipe_input("a".into(), "x".into(), 0).unwrap();
    i.pipe_input("b".into(), "x".into(), 0).unwrap();
    assert!(o.is_empty());
    i.pipe_input("c".into(), "x".into(), 0).unwrap();
    // Over budget: every dirty entry is flushed, deduplicated.
    assert_eq!(
        o.read_key_values_to_list().unwrap(),
        vec![
            ("a".to_string(), 2),
            ("b".to_string(), 1),
            ("c".to_string(), 1)
        ]
    );
}

#[test]
fn dsl_process_with_a_custom_store() {
    struct Dedup;
    impl Processor<String, String> for Dedup {
        fn process(
            &mut self,
            ctx: &mut ProcessorContext<'_>,
            r: Record<String, String>,
        ) -> Result<()> {
            let kb = Bytes::from(r.value.clone().into_bytes());
            let mut store = ctx.store("seen")?;
            if store.get(&kb)?.is_some() {
                return Ok(());
            }
            store.put(kb, Bytes::new())?;
            ctx.forward(r)
        }
    }
    let b = StreamsBuilder::new();
    b.add_state_store(StoreBuilder::in_memory("seen").with_logging_disabled());
    b.stream("in", Consumed::with(s(), s()))
        .process::<String, String, _, _>(|| Dedup, &["seen"])
        .to("out", Produced::with(s(), s()));
    let t = b.build().unwrap();
    let d = t.describe().to_string();
    assert!(
        d.contains("Processor: KSTREAM-PROCESSOR-0000000001 (stores: [seen])"),
        "{d}"
    );
    assert_eq!(
        t.topics_info("app").subtopologies[0].stores[0].changelog_topic,
        None
    );
    let drv = TopologyTestDriver::new(&t).unwrap();
    let i = drv.create_input_topic("in", s(), s());
    for v in ["x", "y", "x", "z", "y"] {
        i.pipe_input("k".into(), v.into(), 0).unwrap();
    }
    assert_eq!(
        drv.create_output_topic("out", s(), s())
            .read_values_to_list()
            .unwrap(),
        vec!["x", "y", "z"]
    );
}

#[test]
fn restricted_inputs_do_not_wait_for_missing_partitions() {
    let mut t = Topology::new();
    t.add_source("src", &["a", "b"], s(), s())
        .unwrap()
        .add_sink("out", "o", s(), s(), &["src"])
        .unwrap();
    let cfg = TaskConfig {
        max_task_idle_ms: 1_000_000,
        ..TaskConfig::default()
    };
    let mut task = StreamTask::new(&t, TaskId::new(0, 5), &cfg, 0).unwrap();
    task.add_records("a", 5, [consumed(0, 1, "k", "v")])
        .unwrap();
    let mut out = Vec::new();
    assert!(!task.process(0, &mut out).unwrap(), "waits for b-5");
    // Topic b has fewer partitions: task 0_5 reads only a-5.
    task.restrict_inputs(&[("a".to_string(), 5)]).unwrap();
    assert!(task.process(0, &mut out).unwrap());
    assert!(task.restrict_inputs(&[("c".to_string(), 5)]).is_err());
}

#[test]
fn topologies_and_tasks_can_move_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Topology>();
    send::<StreamTask>();
}

#[test]
fn deserialization_errors_fail_or_skip_per_handler() {
    use sluice_streams::task::DeserializationHandler;
    let mut t = Topology::new();
    t.add_source("src", &["in"], s(), Serdes::i64())
        .unwrap()
        .add_sink("out", "o", s(), Serdes::i64(), &["src"])
        .unwrap();
    let bad = consumed(0, 1, "k", "not eight bytes");
    let mut good = consumed(1, 2, "k", "");
    good.value = Some(Bytes::from(7i64.to_be_bytes().to_vec()));
    let mut out = Vec::new();
    let mut fail = StreamTask::new(&t, TaskId::new(0, 0), &TaskConfig::default(), 0).unwrap();
    fail.add_records("in", 0, [bad.clone()]).unwrap();
    let err = fail.process(0, &mut out).unwrap_err().to_string();
    assert!(err.contains("in-0 offset 0"), "{err}");
    let cfg = TaskConfig {
        deserialization_handler: DeserializationHandler::LogAndContinue,
        ..TaskConfig::default()
    };
    let mut skip = StreamTask::new(&t, TaskId::new(0, 0), &cfg, 0).unwrap();
    skip.add_records("in", 0, [bad, good]).unwrap();
    assert_eq!(skip.process_all(0, &mut out).unwrap(), 2);
    assert_eq!(out.len(), 1);
    assert_eq!(
        skip.prepare_commit(&mut out)
            .unwrap()
            .get(&("in".to_string(), 0)),
        Some(&2)
    );
}
