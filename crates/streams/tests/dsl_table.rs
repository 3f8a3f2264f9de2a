//! TopologyTestDriver tests of KTable operators, table re-aggregation with
//! subtractors, and every join kind.
#![allow(clippy::unwrap_used)]

use sluice_streams::dsl::{Change, Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use sluice_streams::serde::{SerdeRef, Serdes};
use sluice_streams::test_driver::TopologyTestDriver;

fn s() -> SerdeRef<String> {
    Serdes::string()
}

fn ns() -> SerdeRef<Option<String>> {
    Serdes::nullable(Serdes::string())
}

fn kvo(k: &str, v: Option<&str>) -> (String, Option<String>) {
    (k.to_string(), v.map(str::to_string))
}

#[test]
fn table_filter_map_values_to_stream_and_tombstones() {
    let b = StreamsBuilder::new();
    let t = b.table(
        "t",
        Consumed::with(s(), Serdes::i64()),
        Materialized::as_("t-store").with_caching_disabled(),
    );
    t.filter(|_k, v| *v >= 10)
        .map_values(|v| format!("big:{v}"))
        .to_stream()
        .to("out", Produced::with(s(), ns()));
    t.filter_not(|_k, v| *v >= 10).to_stream().to(
        "small",
        Produced::with(s(), Serdes::nullable(Serdes::i64())),
    );
    let d = TopologyTestDriver::new(&b.build().unwrap()).unwrap();
    let i = d.create_input_topic("t", s(), Serdes::i64());
    i.pipe_input("a".into(), 20, 0).unwrap();
    i.pipe_input("b".into(), 5, 0).unwrap();
    i.pipe_input("a".into(), 3, 0).unwrap();
    i.pipe_tombstone("b".into(), 0).unwrap();
    let out = d
        .create_output_topic("out", s(), ns())
        .read_key_values_to_list()
        .unwrap();
    // Kafka's KTableFilter without old values forwards a delete for every
    // record that fails the predicate.
    assert_eq!(
        out,
        vec![
            kvo("a", Some("big:20")),
            kvo("b", None),
            kvo("a", None),
            kvo("b", None)
        ]
    );
    let small = d
        .create_output_topic("small", s(), Serdes::nullable(Serdes::i64()))
        .read_key_values_to_list()
        .unwrap();
    assert_eq!(
        small,
        vec![
            ("a".into(), None),
            ("b".into(), Some(5)),
            ("a".into(), Some(3)),
            ("b".into(), None)
        ]
    );
    assert_eq!(
        d.key_value_store_all("t-store", &s(), &Serdes::i64())
            .unwrap(),
        vec![("a".to_string(), 3)]
    );
}

/// Kafka's classic re-aggregation: users → region, count users per region
/// and sum their scores; a user moving region is subtracted from the old
/// one and added to the new.
#[test]
fn table_group_by_reaggregates_with_subtractor() {
    let b = StreamsBuilder::new();
    let users = b.table(
        "user-regions",
        Consumed::with(s(), s()),
        Materialized::as_("users").with_caching_disabled(),
    );
    let by_region = users.group_by(
        |_user, region: &String| (region.clone(), 1i64),
        Grouped::with(s(), Serdes::i64()),
    );
    by_region
        .count(Materialized::as_("region-counts").with_caching_disabled())
        .to_stream()
        .to(
            "counts",
            Produced::with(s(), Serdes::nullable(Serdes::i64())),
        );
    by_region
        .reduce(
            |a, b| a + b,
            |a, b| a - b,
            Materialized::as_("region-sums").with_caching_disabled(),
        )
        .to_stream()
        .to("sums", Produced::with(s(), Serdes::nullable(Serdes::i64())));
    by_region
        .aggregate(
            || 0i64,
            |_k, v, agg| agg + v * 10,
            |_k, v, agg| agg - v * 10,
            Materialized::with(s(), Serdes::i64()).with_caching_disabled(),
        )
        .to_stream()
        .to("aggs", Produced::with(s(), Serdes::nullable(Serdes::i64())));
    let t = b.build().unwrap();
    let d = TopologyTestDriver::new(&t).unwrap();
    let i = d.create_input_topic("user-regions", s(), s());
    i.pipe_input("alice".into(), "asia".into(), 1).unwrap();
    i.pipe_input("bob".into(), "asia".into(), 2).unwrap();
    i.pipe_input("alice".into(), "europe".into(), 3).unwrap();
    i.pipe_tombstone("bob".into(), 4).unwrap();
    let counts = d
        .create_output_topic("counts", s(), Serdes::nullable(Serdes::i64()))
        .read_key_values_to_list()
        .unwrap();
    let c = |k: &str, v: i64| (k.to_string(), Some(v));
    assert_eq!(
        counts,
        vec![
            c("asia", 1),
            c("asia", 2),
            c("asia", 1),
            c("europe", 1),
            c("asia", 0)
        ]
    );
    let sums = d
        .create_output_topic("sums", s(), Serdes::nullable(Serdes::i64()))
        .read_key_values_to_list()
        .unwrap();
    assert_eq!(
        sums,
        vec![
            c("asia", 1),
            c("asia", 2),
            c("asia", 1),
            c("europe", 1),
            c("asia", 0)
        ]
    );
    let aggs = d
        .create_output_topic("aggs", s(), Serdes::nullable(Serdes::i64()))
        .read_key_values_to_list()
        .unwrap();
    assert_eq!(aggs.last().unwrap(), &c("asia", 0));
    assert_eq!(
        d.key_value_store_all("region-counts", &s(), &Serdes::i64())
            .unwrap(),
        vec![("asia".to_string(), 0), ("europe".to_string(), 1)]
    );
    // Each aggregation has its own repartition topic of changes (as in
    // Kafka without a `Grouped` name), each splitting off a sub-topology.
    assert_eq!(t.topics_info("app").subtopologies.len(), 4);
    assert_eq!(t.topics_info("app").repartition_topics.len(), 3);
}

#[test]
fn stream_table_inner_and_left_join() {
    let b = StreamsBuilder::new();
    let table = b.table("names", Consumed::with(s(), s()), Materialized::default());
    let clicks = b.stream("clicks", Consumed::with(s(), Serdes::i64()));
    clicks
        .join(&table, |clicks, name: &String| format!("{name}:{clicks}"))
        .to("inner", Produced::with(s(), s()));
    clicks
        .left_join(&table, |clicks, name: Option<&String>| {
            format!("{}:{clicks}", name.map_or("?", |n| n.as_str()))
        })
        .to("left", Produced::with(s(), s()));
    let d = TopologyTestDriver::new(&b.build().unwrap()).unwrap();
    let names = d.create_input_topic("names", s(), s());
    let clicks = d.create_input_topic("clicks", s(), Serdes::i64());
    clicks.pipe_input("u1".into(), 1, 0).unwrap();
    names.pipe_input("u1".into(), "ann".into(), 1).unwrap();
    clicks.pipe_input("u1".into(), 2, 2).unwrap();
    names.pipe_tombstone("u1".into(), 3).unwrap();
    clicks.pipe_input("u1".into(), 3, 4).unwrap();
    let inner = d
        .create_output_topic("inner", s(), s())
        .read_values_to_list()
        .unwrap();
    assert_eq!(inner, vec!["ann:2"]);
    let left = d
        .create_output_topic("left", s(), s())
        .read_values_to_list()
        .unwrap();
    assert_eq!(left, vec!["?:1", "ann:2", "?:3"]);
}

#[test]
fn stream_table_join_after_rekey_repartitions() {
    let b = StreamsBuilder::new();
    let table = b.table("names", Consumed::with(s(), s()), Materialized::default());
    b.stream("orders", Consumed::with(s(), s()))
        .select_key(|_order, user: &String| user.clone())
        .join(&table, |user, name: &String| format!("{user}->{name}"))
        .to("out", Produced::with(s(), s()));
    let t = b.build().unwrap();
    let info = t.topics_info("app");
    assert_eq!(info.repartition_topics.len(), 1);
    assert!(info.repartition_topics[0].topic.ends_with("-repartition"));
    let d = TopologyTestDriver::new(&t).unwrap();
    d.create_input_topic("names", s(), s())
        .pipe_input("u7".into(), "zoe".into(), 0)
        .unwrap();
    d.create_input_topic("orders", s(), s())
        .pipe_input("o1".into(), "u7".into(), 1)
        .unwrap();
    let out = d
        .create_output_topic("out", s(), s())
        .read_key_values_to_list()
        .unwrap();
    assert_eq!(out, vec![("u7".to_string(), "u7->zoe".to_string())]);
}

fn table_join_driver(
    kind: &str,
) -> (
    TopologyTestDriver,
    Vec<(&'static str, Option<&'static str>)>,
) {
    let b = StreamsBuilder::new();
    let l = b.table(
        "l",
        Consumed::with(s(), s()),
        Materialized::default().with_caching_disabled(),
    );
    let r = b.table(
        "r",
        Consumed::with(s(), s()),
        Materialized::default().with_caching_disabled(),
    );
    let joined = match kind {
        "inner" => l.join(&r, |a, b| format!("{a}|{b}")),
        "left" => l.left_join(&r, |a, b: Option<&String>| {
            format!("{a}|{}", b.map_or("-", |x| x.as_str()))
        }),
        _ => l.outer_join(&r, |a: Option<&String>, b: Option<&String>| {
            format!(
                "{}|{}",
                a.map_or("-", |x| x.as_str()),
                b.map_or("-", |x| x.as_str())
            )
        }),
    };
    joined.to_stream().to("out", Produced::with(s(), ns()));
    let d = TopologyTestDriver::new(&b.build().unwrap()).unwrap();
    let expected = match kind {
        "inner" => vec![("k", Some("a1|b1")), ("k", Some("a2|b1")), ("k", None)],
        "left" => vec![
            ("k", Some("a1|-")),
            ("k", Some("a1|b1")),
            ("k", Some("a2|b1")),
            ("k", Some("a2|-")),
            ("k", None),
        ],
        _ => vec![
            ("k", Some("a1|-")),
            ("k", Some("a1|b1")),
            ("k", Some("a2|b1")),
            ("k", Some("a2|-")),
            ("k", None),
        ],
    };
    (d, expected)
}

#[test]
fn table_table_inner_left_outer_joins() {
    for kind in ["inner", "left", "outer"] {
        let (d, expected) = table_join_driver(kind);
        let l = d.create_input_topic("l", s(), s());
        let r = d.create_input_topic("r", s(), s());
        l.pipe_input("k".into(), "a1".into(), 0).unwrap();
        r.pipe_input("k".into(), "b1".into(), 1).unwrap();
        l.pipe_input("k".into(), "a2".into(), 2).unwrap();
        r.pipe_tombstone("k".into(), 3).unwrap();
        l.pipe_tombstone("k".into(), 4).unwrap();
        let out = d
            .create_output_topic("out", s(), ns())
            .read_key_values_to_list()
            .unwrap();
        let want: Vec<(String, Option<String>)> =
            expected.iter().map(|(k, v)| kvo(k, *v)).collect();
        assert_eq!(out, want, "{kind} join");
    }
    // Outer join: a key only on the right side.
    let (d, _) = table_join_driver("outer");
    d.create_input_topic("r", s(), s())
        .pipe_input("z".into(), "b".into(), 0)
        .unwrap();
    let out = d
        .create_output_topic("out", s(), ns())
        .read_key_values_to_list()
        .unwrap();
    assert_eq!(out, vec![kvo("z", Some("-|b"))]);
}

#[test]
fn stream_global_table_joins() {
    let b = StreamsBuilder::new();
    let products = b.global_table(
        "products",
        Consumed::with(s(), s()),
        Materialized::as_("products-store"),
    );
    let orders = b.stream("orders", Consumed::with(s(), s()));
    orders
        .join_global(
            &products,
            |_order, product: &String| product.clone(),
            |product, name: &String| format!("{product}={name}"),
        )
        .to("inner", Produced::with(s(), s()));
    orders
        .left_join_global(
            &products,
            |_o, p: &String| p.clone(),
            |p, name: Option<&String>| format!("{p}={}", name.map_or("?", |n| n.as_str())),
        )
        .to("left", Produced::with(s(), s()));
    let t = b.build().unwrap();
    assert_eq!(t.topics_info("app").global_stores[0].topic, "products");
    let d = TopologyTestDriver::new(&t).unwrap();
    d.create_input_topic("products", s(), s())
        .pipe_input("p1".into(), "lamp".into(), 0)
        .unwrap();
    let o = d.create_input_topic("orders", s(), s());
    o.pipe_input("o1".into(), "p1".into(), 1).unwrap();
    o.pipe_input("o2".into(), "p2".into(), 2).unwrap();
    assert_eq!(
        d.create_output_topic("inner", s(), s())
            .read_values_to_list()
            .unwrap(),
        vec!["p1=lamp"]
    );
    assert_eq!(
        d.create_output_topic("left", s(), s())
            .read_values_to_list()
            .unwrap(),
        vec!["p1=lamp", "p2=?"]
    );
    assert_eq!(
        d.key_value_store_all("products-store", &s(), &s()).unwrap(),
        vec![("p1".to_string(), "lamp".to_string())]
    );
}

#[test]
fn stream_to_table() {
    let b = StreamsBuilder::new();
    b.stream("in", Consumed::with(s(), s()))
        .to_table(Materialized::as_("latest").with_caching_disabled())
        .to_stream()
        .to("out", Produced::with(s(), ns()));
    let d = TopologyTestDriver::new(&b.build().unwrap()).unwrap();
    let i = d.create_input_topic("in", s(), s());
    i.pipe_input("a".into(), "1".into(), 0).unwrap();
    i.pipe_input("a".into(), "2".into(), 0).unwrap();
    assert_eq!(
        d.key_value_store_all("latest", &s(), &s()).unwrap(),
        vec![("a".to_string(), "2".to_string())]
    );
    assert_eq!(d.create_output_topic("out", s(), ns()).queue_size(), 2);
    let _ = Change::<String> {
        new_value: None,
        old_value: None,
    };
}

/// Kafka's timestamp semantics: an aggregate carries the largest timestamp
/// of its inputs; a table–table join result the larger of both sides'; a
/// stream–table join result the stream record's.
#[test]
fn result_timestamps_follow_kafka() {
    let b = StreamsBuilder::new();
    b.stream("in", Consumed::with(s(), Serdes::i64()))
        .group_by_key(Grouped::default())
        .reduce(
            |a, b| a + b,
            Materialized::as_("sum").with_caching_disabled(),
        )
        .to_stream()
        .to("sums", Produced::with(s(), Serdes::nullable(Serdes::i64())));
    let l = b.table("l", Consumed::with(s(), s()), Materialized::default());
    let r = b.table("r", Consumed::with(s(), s()), Materialized::default());
    l.join(&r, |a, b| format!("{a}{b}"))
        .to_stream()
        .to("joined", Produced::with(s(), ns()));
    b.stream("st", Consumed::with(s(), s()))
        .join(&r, |a, b| format!("{a}{b}"))
        .to("st-joined", Produced::with(s(), s()));
    let d = TopologyTestDriver::new(&b.build().unwrap()).unwrap();
    let i = d.create_input_topic("in", s(), Serdes::i64());
    i.pipe_input("k".into(), 1, 50).unwrap();
    i.pipe_input("k".into(), 2, 20).unwrap();
    let sums = d
        .create_output_topic("sums", s(), Serdes::i64())
        .read_records_to_list()
        .unwrap();
    assert_eq!(
        sums.iter()
            .map(|r| (r.value, r.timestamp))
            .collect::<Vec<_>>(),
        vec![(1, 50), (3, 50)]
    );
    let stored = d
        .key_value_store_all_with_timestamps("sum", &s(), &Serdes::i64())
        .unwrap();
    assert_eq!(stored, vec![("k".to_string(), 3, Some(50))]);
    d.create_input_topic("r", s(), s())
        .pipe_input("x".into(), "R".into(), 100)
        .unwrap();
    d.create_input_topic("l", s(), s())
        .pipe_input("x".into(), "L".into(), 40)
        .unwrap();
    let joined = d
        .create_output_topic("joined", s(), ns())
        .read_records_to_list()
        .unwrap();
    assert_eq!(
        (joined[0].value.as_deref(), joined[0].timestamp),
        (Some("LR"), 100)
    );
    d.create_input_topic("st", s(), s())
        .pipe_input("x".into(), "S".into(), 7)
        .unwrap();
    let st = d
        .create_output_topic("st-joined", s(), s())
        .read_records_to_list()
        .unwrap();
    assert_eq!((st[0].value.as_str(), st[0].timestamp), ("SR", 7));
}

#[test]
fn materialized_filter_and_map_values_are_queryable_and_joinable() {
    let b = StreamsBuilder::new();
    let t = b.table(
        "t",
        Consumed::with(s(), Serdes::i64()),
        Materialized::default(),
    );
    let big = t.filter_materialized(
        |_k, v| *v >= 10,
        Materialized::as_("big").with_caching_disabled(),
    );
    let labels = big.map_values_materialized(
        |v| format!("#{v}"),
        Materialized::as_("labels")
            .with_value_serde(s())
            .with_caching_disabled(),
    );
    assert_eq!(labels.queryable_store_name(), Some("labels"));
    b.stream("q", Consumed::with(s(), s()))
        .left_join(&labels, |q, l: Option<&String>| {
            format!("{q}:{}", l.map_or("none", |x| x.as_str()))
        })
        .to("answers", Produced::with(s(), s()));
    labels
        .to_stream()
        .to("labels-out", Produced::with(s(), ns()));
    let d = TopologyTestDriver::new(&b.build().unwrap()).unwrap();
    let i = d.create_input_topic("t", s(), Serdes::i64());
    i.pipe_input("a".into(), 12, 0).unwrap();
    i.pipe_input("b".into(), 3, 0).unwrap();
    i.pipe_input("a".into(), 4, 0).unwrap();
    i.pipe_input("b".into(), 30, 0).unwrap();
    assert_eq!(
        d.key_value_store_all("big", &s(), &Serdes::i64()).unwrap(),
        vec![("b".to_string(), 30)]
    );
    assert_eq!(
        d.key_value_store_all("labels", &s(), &s()).unwrap(),
        vec![("b".to_string(), "#30".to_string())]
    );
    let out = d
        .create_output_topic("labels-out", s(), ns())
        .read_key_values_to_list()
        .unwrap();
    assert_eq!(
        out,
        vec![
            kvo("a", Some("#12")),
            kvo("b", None),
            kvo("a", None),
            kvo("b", Some("#30"))
        ]
    );
    let q = d.create_input_topic("q", s(), s());
    q.pipe_input("a".into(), "qa".into(), 1).unwrap();
    q.pipe_input("b".into(), "qb".into(), 1).unwrap();
    assert_eq!(
        d.create_output_topic("answers", s(), s())
            .read_values_to_list()
            .unwrap(),
        vec!["qa:none", "qb:#30"]
    );
}
