//! TopologyTestDriver tests of the KStream operators and stream grouping.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sluice_streams::dsl::{
    Branched, Consumed, Grouped, Materialized, Named, Produced, Repartitioned, StreamsBuilder,
};
use sluice_streams::serde::{SerdeRef, Serdes};
use sluice_streams::test_driver::TopologyTestDriver;

fn s() -> SerdeRef<String> {
    Serdes::string()
}

fn strings() -> Consumed<String, String> {
    Consumed::with(s(), s())
}

fn out_strings() -> Produced<String, String> {
    Produced::with(s(), s())
}

fn kv(k: &str, v: &str) -> (String, String) {
    (k.to_string(), v.to_string())
}

#[test]
fn word_count_counts_words() {
    let b = StreamsBuilder::new();
    b.stream("lines", Consumed::with(Serdes::nullable(s()), s()))
        .flat_map_values(|v: String| {
            v.to_lowercase()
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .group_by(|_k, w: &String| w.clone(), Grouped::with(s(), s()))
        .count(Materialized::as_("counts"))
        .to_stream()
        .to(
            "counts-out",
            Produced::with(s(), Serdes::nullable(Serdes::i64())),
        );
    let d = TopologyTestDriver::new(&b.build().unwrap()).unwrap();
    let input = d.create_input_topic("lines", Serdes::nullable(s()), s());
    let output = d.create_output_topic("counts-out", s(), Serdes::i64());
    input
        .pipe_input(None, "Hello Kafka Streams".into(), 1)
        .unwrap();
    input.pipe_input(None, "hello again".into(), 2).unwrap();
    let got = output.read_key_values_to_list().unwrap();
    assert_eq!(
        got,
        vec![
            ("hello".to_string(), 1),
            ("kafka".to_string(), 1),
            ("streams".to_string(), 1),
            ("hello".to_string(), 2),
            ("again".to_string(), 1),
        ]
    );
    // As Kafka's driver commits after every processed record, the cache
    // does not merge the two updates of one line.
    input.pipe_input(None, "again again".into(), 3).unwrap();
    assert_eq!(
        output.read_key_values_to_list().unwrap(),
        vec![("again".to_string(), 2), ("again".to_string(), 3)]
    );
    let store = d
        .key_value_store_all("counts", &s(), &Serdes::i64())
        .unwrap();
    assert_eq!(store.len(), 4);
    assert_eq!(
        d.key_value_store_get("counts", &"hello".to_string(), &s(), &Serdes::i64())
            .unwrap(),
        Some(2)
    );
    // The repartition topic and the changelog carried the records.
    assert_eq!(
        d.produced("test-driver-application-counts-repartition")
            .len(),
        7
    );
    assert_eq!(
        d.produced("test-driver-application-counts-changelog").len(),
        7
    );
}

#[test]
fn filter_filter_not_map_values_and_peek() {
    let b = StreamsBuilder::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let src = b.stream("in", strings());
    src.filter(|_k, v| v.len() > 2)
        .peek(move |k, v| seen2.lock().unwrap().push(format!("{k}={v}")))
        .map_values(|v: String| v.to_uppercase())
        .to("long", out_strings());
    src.filter_not(|_k, v| v.len() > 2)
        .to("short", out_strings());
    let d = TopologyTestDriver::new(&b.build().unwrap()).unwrap();
    let i = d.create_input_topic("in", s(), s());
    for (k, v) in [("a", "xy"), ("b", "abc"), ("c", "defg")] {
        i.pipe_input(k.into(), v.into(), 0).unwrap();
    }
    let long = d
        .create_output_topic("long", s(), s())
        .read_key_values_to_list()
        .unwrap();
    assert_eq!(long, vec![kv("b", "ABC"), kv("c", "DEFG")]);
    let short = d
        .create_output_topic("short", s(), s())
        .read_key_values_to_list()
        .unwrap();
    assert_eq!(short, vec![kv("a", "xy")]);
    assert_eq!(*seen.lock().unwrap(), vec!["b=abc", "c=defg"]);
}

#[test]
fn map_flat_map_flat_map_values_and_timestamps() {
    let b = StreamsBuilder::new();
    let src = b.stream("in", strings());
    src.map(|k: String, v: String| (v, k))
        .to("swapped", out_strings());
    src.flat_map(|k: String, v: String| {
        v.chars()
            .map(move |c| (format!("{k}{c}"), c.len_utf8() as i64))
            .collect::<Vec<_>>()
    })
    .to("chars", Produced::with(s(), Serdes::i64()));
    src.flat_map_values(|v: String| vec![v.clone(), v])
        .to("twice", out_strings());
    let d = TopologyTestDriver::new(&b.build().unwrap()).unwrap();
    let i = d.create_input_topic("in", s(), s());
    i.pipe_input("k".into(), "ab".into(), 42).unwrap();
    let swapped = d
        .create_output_topic("swapped", s(), s())
        .read_records_to_list()
        .unwrap();
    assert_eq!(
        (
            swapped[0].key.as_str(),
            swapped[0].value.as_str(),
            swapped[0].timestamp
        ),
        ("ab", "k", 42)
    );
    let chars = d
        .create_output_topic("chars", s(), Serdes::i64())
        .read_key_values_to_list()
        .unwrap();
    assert_eq!(chars, vec![("ka".to_string(), 1), ("kb".to_string(), 1)]);
    let twice = d
        .create_output_topic("twice", s(), s())
        .read_values_to_list()
        .unwrap();
    assert_eq!(twice, vec!["ab", "ab"]);
}

#[test]
fn foreach_sees_every_record() {
    let b = StreamsBuilder::new();
    let seen = Arc::new(Mutex::new(0usize));
    let seen2 = seen.clone();
    b.stream("in", strings())
        .foreach(move |_k, v| *seen2.lock().unwrap() += v.len());
    let d = TopologyTestDriver::new(&b.build().unwrap()).unwrap();
    let i = d.create_input_topic("in", s(), s());
    i.pipe_input("a".into(), "xyz".into(), 0).unwrap();
    i.pipe_input("b".into(), "zz".into(), 0).unwrap();
    assert_eq!(*seen.lock().unwrap(), 5);
}

#[test]
fn split_routes_to_first_matching_branch_and_names_as_kafka() {
    let b = StreamsBuilder::new();
    let branches = b
        .stream("in", Consumed::with(s(), Serdes::i64()))
        .named(Named::as_("split-"))
        .split()
        .branch(|_k, v| *v < 0, Branched::as_("neg"))
        .branch(|_k, v| *v < 10, Branched::as_("small"))
        .default_branch(Branched::default());
    let names: Vec<&String> = branches.keys().collect();
    assert_eq!(names, vec!["split-0", "split-neg", "split-small"]);
    for (name, st) in &branches {
        st.to(&format!("out-{name}"), Produced::with(s(), Serdes::i64()));
    }
    let d = TopologyTestDriver::new(&b.build().unwrap()).unwrap();
    let i = d.create_input_topic("in", s(), Serdes::i64());
    for (k, v) in [("a", -1), ("b", 5), ("c", 50), ("d", -7)] {
        i.pipe_input(k.into(), v, 0).unwrap();
    }
    let read = |t: &str| {
        d.create_output_topic(t, s(), Serdes::i64())
            .read_values_to_list()
            .unwrap()
    };
    assert_eq!(read("out-split-neg"), vec![-1, -7]);
    assert_eq!(read("out-split-small"), vec![5]);
    assert_eq!(read("out-split-0"), vec![50]);

    // The older `branch` API.
    let b = StreamsBuilder::new();
    let parts = b
        .stream("in", Consumed::with(s(), Serdes::i64()))
        .branch(vec![
            Box::new(|_k: &String, v: &i64| *v % 2 == 0),
            Box::new(|_k: &String, _v: &i64| true),
        ]);
    parts[0].to("even", Produced::with(s(), Serdes::i64()));
    parts[1].to("odd", Produced::with(s(), Serdes::i64()));
    let t = b.build().unwrap();
    assert!(t
        .describe()
        .to_string()
        .contains("KSTREAM-BRANCHCHILD-0000000002"));
    let d = TopologyTestDriver::new(&t).unwrap();
    let i = d.create_input_topic("in", s(), Serdes::i64());
    for v in 1..=4 {
        i.pipe_input("k".into(), v, 0).unwrap();
    }
    assert_eq!(
        d.create_output_topic("even", s(), Serdes::i64())
            .read_values_to_list()
            .unwrap(),
        vec![2, 4]
    );
    assert_eq!(
        d.create_output_topic("odd", s(), Serdes::i64())
            .read_values_to_list()
            .unwrap(),
        vec![1, 3]
    );
}

#[test]
fn merge_combines_streams() {
    let b = StreamsBuilder::new();
    let a = b.stream("a", strings());
    let c = b.stream("c", strings());
    a.merge(&c).to("out", out_strings());
    let d = TopologyTestDriver::new(&b.build().unwrap()).unwrap();
    d.create_input_topic("a", s(), s())
        .pipe_input("1".into(), "x".into(), 0)
        .unwrap();
    d.create_input_topic("c", s(), s())
        .pipe_input("2".into(), "y".into(), 0)
        .unwrap();
    let out = d
        .create_output_topic("out", s(), s())
        .read_key_values_to_list()
        .unwrap();
    assert_eq!(out, vec![kv("1", "x"), kv("2", "y")]);
}

#[test]
fn select_key_then_group_by_key_repartitions() {
    let b = StreamsBuilder::new();
    b.stream("in", strings())
        .select_key(|_k, v: &String| v.chars().next().unwrap_or('_').to_string())
        .group_by_key(Grouped::with(s(), s()))
        .reduce(
            |a, b| format!("{a}+{b}"),
            Materialized::as_("by-initial").with_caching_disabled(),
        )
        .to_stream()
        .to("out", Produced::with(s(), Serdes::nullable(s())));
    let t = b.build().unwrap();
    let info = t.topics_info("app");
    assert_eq!(
        info.repartition_topics[0].topic,
        "app-by-initial-repartition"
    );
    let d = TopologyTestDriver::new(&t).unwrap();
    let i = d.create_input_topic("in", s(), s());
    for v in ["apple", "avocado", "banana"] {
        i.pipe_input("x".into(), v.into(), 0).unwrap();
    }
    let out = d
        .create_output_topic("out", s(), s())
        .read_key_values_to_list()
        .unwrap();
    assert_eq!(
        out,
        vec![
            kv("a", "apple"),
            kv("a", "apple+avocado"),
            kv("b", "banana")
        ]
    );
}

#[test]
fn repartition_goes_through_an_internal_topic() {
    let b = StreamsBuilder::new();
    b.stream("in", strings())
        .map(|k: String, v: String| (v, k))
        .repartition(
            Repartitioned::with(s(), s())
                .with_name("by-value")
                .with_number_of_partitions(3),
        )
        .to("out", out_strings());
    let t = b.build().unwrap();
    let info = t.topics_info("app");
    assert_eq!(info.repartition_topics[0].topic, "app-by-value-repartition");
    assert_eq!(info.repartition_topics[0].partitions, Some(3));
    assert_eq!(info.subtopologies.len(), 2);
    let d = TopologyTestDriver::new(&t).unwrap();
    d.create_input_topic("in", s(), s())
        .pipe_input("k".into(), "v".into(), 5)
        .unwrap();
    assert_eq!(d.produced("app-by-value-repartition").len(), 0);
    assert_eq!(
        d.produced("test-driver-application-by-value-repartition")
            .len(),
        1
    );
    let out = d
        .create_output_topic("out", s(), s())
        .read_key_values_to_list()
        .unwrap();
    assert_eq!(out, vec![kv("v", "k")]);
}

#[test]
fn group_by_key_count_reduce_aggregate() {
    let b = StreamsBuilder::new();
    let grouped = b
        .stream("in", Consumed::with(s(), Serdes::i64()))
        .group_by_key(Grouped::default());
    grouped.count(Materialized::as_("count")).to_stream().to(
        "count",
        Produced::with(s(), Serdes::nullable(Serdes::i64())),
    );
    grouped
        .reduce(|a, b| a.max(b).to_owned(), Materialized::as_("max"))
        .to_stream()
        .to("max", Produced::with(s(), Serdes::nullable(Serdes::i64())));
    grouped
        .aggregate(
            Vec::new,
            |_k, v, mut agg: Vec<i64>| {
                agg.push(*v);
                agg
            },
            Materialized::as_("all").with_value_serde(Serdes::json::<Vec<i64>>()),
        )
        .to_stream()
        .to(
            "all",
            Produced::with(s(), Serdes::nullable(Serdes::json::<Vec<i64>>())),
        );
    let t = b.build().unwrap();
    assert_eq!(
        t.topics_info("a").subtopologies.len(),
        1,
        "no repartition for group_by_key"
    );
    let d = TopologyTestDriver::new(&t).unwrap();
    let i = d.create_input_topic("in", s(), Serdes::i64());
    for (k, v) in [("a", 3), ("b", 1), ("a", 7), ("a", 5)] {
        i.pipe_input(k.into(), v, 0).unwrap();
    }
    let map = |t: &str| -> HashMap<String, i64> {
        d.create_output_topic(t, s(), Serdes::i64())
            .read_key_values_to_map()
            .unwrap()
    };
    assert_eq!(
        map("count"),
        HashMap::from([("a".to_string(), 3), ("b".to_string(), 1)])
    );
    assert_eq!(
        map("max"),
        HashMap::from([("a".to_string(), 7), ("b".to_string(), 1)])
    );
    let all = d
        .create_output_topic("all", s(), Serdes::json::<Vec<i64>>())
        .read_key_values_to_list()
        .unwrap();
    assert_eq!(all.last().unwrap(), &("a".to_string(), vec![3, 7, 5]));
}

#[test]
fn missing_serdes_for_a_repartition_fail_the_build() {
    let b = StreamsBuilder::new();
    b.stream("in", strings())
        .map(|k: String, v: String| (v.len() as i64, k))
        .group_by_key(Grouped::default())
        .count(Materialized::default());
    let err = b.build().unwrap_err().to_string();
    assert!(err.contains("serde"), "{err}");
}

#[test]
fn aggregations_skip_null_keys() {
    let b = StreamsBuilder::new();
    b.stream("in", Consumed::with(Serdes::nullable(s()), s()))
        .group_by_key(Grouped::default())
        .count(Materialized::as_("c").with_caching_disabled())
        .to_stream()
        .to(
            "out",
            Produced::with(Serdes::nullable(s()), Serdes::nullable(Serdes::i64())),
        );
    let d = TopologyTestDriver::new(&b.build().unwrap()).unwrap();
    let i = d.create_input_topic("in", Serdes::nullable(s()), s());
    i.pipe_input(None, "x".into(), 0).unwrap();
    i.pipe_input(Some("k".into()), "x".into(), 0).unwrap();
    let out = d
        .create_output_topic("out", Serdes::nullable(s()), Serdes::i64())
        .read_key_values_to_list()
        .unwrap();
    assert_eq!(out, vec![(Some("k".to_string()), 1)]);
}

#[test]
fn a_named_grouping_shares_its_repartition_topic() {
    let b = StreamsBuilder::new();
    let g = b.stream("in", strings()).group_by(
        |_k, v: &String| v.clone(),
        Grouped::with(s(), s()).with_name("by-value"),
    );
    g.count(Materialized::as_("c1"))
        .to_stream()
        .to("o1", Produced::with(s(), Serdes::nullable(Serdes::i64())));
    g.reduce(|a, b| format!("{a}{b}"), Materialized::as_("r1"))
        .to_stream()
        .to("o2", Produced::with(s(), Serdes::nullable(s())));
    let t = b.build().unwrap();
    let info = t.topics_info("app");
    assert_eq!(info.repartition_topics.len(), 1);
    assert_eq!(info.repartition_topics[0].topic, "app-by-value-repartition");
    assert_eq!(info.subtopologies.len(), 2);
    let d = TopologyTestDriver::new(&t).unwrap();
    d.create_input_topic("in", s(), s())
        .pipe_input("k".into(), "v".into(), 0)
        .unwrap();
    assert_eq!(
        d.create_output_topic("o1", s(), Serdes::i64())
            .read_values_to_list()
            .unwrap(),
        vec![1]
    );
    assert_eq!(
        d.create_output_topic("o2", s(), s())
            .read_values_to_list()
            .unwrap(),
        vec!["v"]
    );
}
