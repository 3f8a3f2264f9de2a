//! `Topology::describe()` against Kafka's exact text, and the runtime info.
#![allow(clippy::unwrap_used)]

use sluice_streams::dsl::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use sluice_streams::serde::Serdes;
use sluice_streams::topology::Topology;

fn word_count() -> Topology {
    let b = StreamsBuilder::new();
    let lines = b.stream(
        "streams-plaintext-input",
        Consumed::with(Serdes::nullable(Serdes::string()), Serdes::string()),
    );
    lines
        .flat_map_values(|v: String| {
            v.to_lowercase()
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .group_by(
            |_k, w: &String| w.clone(),
            Grouped::with(Serdes::string(), Serdes::string()),
        )
        .count(Materialized::default())
        .to_stream()
        .to(
            "streams-wordcount-output",
            Produced::with(Serdes::string(), Serdes::nullable(Serdes::i64())),
        );
    b.build().unwrap()
}

/// Expected text derived from Kafka's
/// `streams/src/test/java/org/apache/kafka/streams/kstream/internals/graph/StreamsGraphTest.java`
/// (a group-by + count topology: key selector, generated store
/// `KSTREAM-AGGREGATE-STATE-STORE-<n>`, then `KSTREAM-AGGREGATE-<n+1>`,
/// sink, null-key filter and source of the repartition topic, in that
/// order) and the word-count shape of Kafka's streams tutorial.
const WORD_COUNT: &str = "Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [streams-plaintext-input])
      --> KSTREAM-FLATMAPVALUES-0000000001
    Processor: KSTREAM-FLATMAPVALUES-0000000001 (stores: [])
      --> KSTREAM-KEY-SELECT-0000000002
      <-- KSTREAM-SOURCE-0000000000
    Processor: KSTREAM-KEY-SELECT-0000000002 (stores: [])
      --> KSTREAM-FILTER-0000000006
      <-- KSTREAM-FLATMAPVALUES-0000000001
    Processor: KSTREAM-FILTER-0000000006 (stores: [])
      --> KSTREAM-SINK-0000000005
      <-- KSTREAM-KEY-SELECT-0000000002
    Sink: KSTREAM-SINK-0000000005 (topic: KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition)
      <-- KSTREAM-FILTER-0000000006

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000007 (topics: [KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition])
      --> KSTREAM-AGGREGATE-0000000004
    Processor: KSTREAM-AGGREGATE-0000000004 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000003])
      --> KTABLE-TOSTREAM-0000000008
      <-- KSTREAM-SOURCE-0000000007
    Processor: KTABLE-TOSTREAM-0000000008 (stores: [])
      --> KSTREAM-SINK-0000000009
      <-- KSTREAM-AGGREGATE-0000000004
    Sink: KSTREAM-SINK-0000000009 (topic: streams-wordcount-output)
      <-- KTABLE-TOSTREAM-0000000008

";

#[test]
fn word_count_description_matches_kafka() {
    assert_eq!(word_count().describe().to_string(), WORD_COUNT);
}

#[test]
fn named_store_names_repartition_processors_as_kafka() {
    let b = StreamsBuilder::new();
    b.stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by(
            |_k, v: &String| v.clone(),
            Grouped::with(Serdes::string(), Serdes::string()),
        )
        .count(Materialized::as_("counts-store"));
    let d = b.build().unwrap().describe().to_string();
    assert!(
        d.contains("Processor: counts-store-repartition-filter (stores: [])"),
        "{d}"
    );
    assert!(
        d.contains("Sink: counts-store-repartition-sink (topic: counts-store-repartition)"),
        "{d}"
    );
    assert!(
        d.contains("Source: counts-store-repartition-source (topics: [counts-store-repartition])"),
        "{d}"
    );
    assert!(
        d.contains("Processor: KSTREAM-AGGREGATE-0000000002 (stores: [counts-store])"),
        "{d}"
    );
}

#[test]
fn processor_api_description_and_global_store() {
    use sluice_streams::processor::{Processor, ProcessorContext, Record};
    struct Up;
    impl Processor<String, String> for Up {
        fn process(
            &mut self,
            ctx: &mut ProcessorContext<'_>,
            r: Record<String, String>,
        ) -> sluice_streams::Result<()> {
            let v = r.value.to_uppercase();
            ctx.forward(r.with_value(v))
        }
    }
    let mut t = Topology::new();
    t.add_source("src", &["a", "b"], Serdes::string(), Serdes::string())
        .unwrap()
        .add_processor("up", || Up, &["src"])
        .unwrap()
        .add_sink("out", "c", Serdes::string(), Serdes::string(), &["up"])
        .unwrap();
    assert_eq!(
        t.describe().to_string(),
        "Topologies:\n   Sub-topology: 0\n    Source: src (topics: [a, b])\n      --> up\n    \
         Processor: up (stores: [])\n      --> out\n      <-- src\n    Sink: out (topic: c)\n      <-- up\n\n"
    );
    assert!(t.add_processor("up", || Up, &["src"]).is_err());
    assert!(t.add_processor("x", || Up, &["missing"]).is_err());

    let b = StreamsBuilder::new();
    let g = b.global_table(
        "g",
        Consumed::with(Serdes::string(), Serdes::string()),
        Materialized::default(),
    );
    b.stream("s", Consumed::with(Serdes::string(), Serdes::string()))
        .join_global(&g, |k, _v| k.clone(), |v, gv| format!("{v}{gv}"))
        .to("o", Produced::with(Serdes::string(), Serdes::string()));
    let d = b.build().unwrap().describe().to_string();
    assert!(
        d.starts_with(
            "Topologies:\n   Sub-topology: 0 for global store (will not generate tasks)\n    \
             Source: KSTREAM-SOURCE-0000000001 (topics: [g])\n      --> KTABLE-SOURCE-0000000002\n    \
             Processor: KTABLE-SOURCE-0000000002 (stores: [g-STATE-STORE-0000000000])\n      --> none\n      \
             <-- KSTREAM-SOURCE-0000000001\n  Sub-topology: 1\n"
        ),
        "{d}"
    );
}

#[test]
fn topics_info_lists_subtopologies_internal_topics_and_copartitioning() {
    let info = word_count().topics_info("wc");
    assert_eq!(info.subtopologies.len(), 2);
    let s0 = &info.subtopologies[0];
    assert_eq!(
        s0.source_topics.iter().collect::<Vec<_>>(),
        vec!["streams-plaintext-input"]
    );
    assert!(s0
        .sink_topics
        .contains("wc-KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition"));
    let s1 = &info.subtopologies[1];
    assert_eq!(
        s1.repartition_source_topics.iter().collect::<Vec<_>>(),
        vec!["wc-KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition"]
    );
    assert_eq!(
        s1.stores[0].name,
        "KSTREAM-AGGREGATE-STATE-STORE-0000000003"
    );
    assert_eq!(
        s1.stores[0].changelog_topic.as_deref(),
        Some("wc-KSTREAM-AGGREGATE-STATE-STORE-0000000003-changelog")
    );
    assert_eq!(info.repartition_topics[0].written_by, 0);
    assert_eq!(info.repartition_topics[0].read_by, 1);
    assert_eq!(
        info.subtopology_of_topic("streams-plaintext-input"),
        Some(0)
    );

    // A stream–table join co-partitions its two source topics.
    let b = StreamsBuilder::new();
    let t = b.table(
        "t",
        Consumed::with(Serdes::string(), Serdes::string()),
        Materialized::default(),
    );
    b.stream("s", Consumed::with(Serdes::string(), Serdes::string()))
        .join(&t, |a, b| format!("{a}{b}"))
        .to("o", Produced::with(Serdes::string(), Serdes::string()));
    let info = b.build().unwrap().topics_info("app");
    assert_eq!(info.copartition_groups.len(), 1);
    assert_eq!(
        info.copartition_groups[0].iter().collect::<Vec<_>>(),
        vec!["s", "t"]
    );
    let counts = [("s".to_string(), 6), ("t".to_string(), 4)]
        .into_iter()
        .collect();
    let err = info.check_copartitioning(&counts).unwrap_err().to_string();
    assert!(err.contains("s=6") && err.contains("t=4"), "{err}");
    let ok = [("s".to_string(), 4), ("t".to_string(), 4)]
        .into_iter()
        .collect();
    info.check_copartitioning(&ok).unwrap();
}

/// Kafka's `TopologyTest.kGroupedStreamZeroArgCountShouldPreserveTopologyStructure`
/// and `kGroupedStreamNamedMaterializedCountShouldPreserveTopologyStructure`.
#[test]
fn grouped_stream_count_descriptions_match_kafka_topology_test() {
    let b = StreamsBuilder::new();
    b.stream(
        "input-topic",
        Consumed::with(Serdes::string(), Serdes::string()),
    )
    .group_by_key(Grouped::default())
    .count(Materialized::default());
    assert_eq!(
        b.build().unwrap().describe().to_string(),
        "Topologies:\n   Sub-topology: 0\n    Source: KSTREAM-SOURCE-0000000000 (topics: [input-topic])\n      \
         --> KSTREAM-AGGREGATE-0000000002\n    Processor: KSTREAM-AGGREGATE-0000000002 (stores: \
         [KSTREAM-AGGREGATE-STATE-STORE-0000000001])\n      --> none\n      <-- KSTREAM-SOURCE-0000000000\n\n"
    );
    let b = StreamsBuilder::new();
    b.stream(
        "input-topic",
        Consumed::with(Serdes::string(), Serdes::string()),
    )
    .group_by_key(Grouped::default())
    .count(
        Materialized::as_("count-store")
            .with_store_type(sluice_streams::topology::StoreType::InMemory),
    );
    assert_eq!(
        b.build().unwrap().describe().to_string(),
        "Topologies:\n   Sub-topology: 0\n    Source: KSTREAM-SOURCE-0000000000 (topics: [input-topic])\n      \
         --> KSTREAM-AGGREGATE-0000000001\n    Processor: KSTREAM-AGGREGATE-0000000001 (stores: [count-store])\n      \
         --> none\n      <-- KSTREAM-SOURCE-0000000000\n\n"
    );
}

/// Kafka's `TopologyTest.kTableNonMaterializedFilterShouldPreserveTopologyStructure`
/// and `kTableNonMaterializedMapValuesShouldPreserveTopologyStructure`: a
/// source table is not materialized unless something needs its store.
#[test]
fn non_materialized_table_descriptions_match_kafka_topology_test() {
    let b = StreamsBuilder::new();
    let t = b.table(
        "input-topic",
        Consumed::with(Serdes::string(), Serdes::string()),
        Materialized::default(),
    );
    t.filter(|_k, _v| false);
    assert_eq!(
        b.build().unwrap().describe().to_string(),
        "Topologies:\n   Sub-topology: 0\n    Source: KSTREAM-SOURCE-0000000001 (topics: [input-topic])\n      \
         --> KTABLE-SOURCE-0000000002\n    Processor: KTABLE-SOURCE-0000000002 (stores: [])\n      \
         --> KTABLE-FILTER-0000000003\n      <-- KSTREAM-SOURCE-0000000001\n    \
         Processor: KTABLE-FILTER-0000000003 (stores: [])\n      --> none\n      <-- KTABLE-SOURCE-0000000002\n\n"
    );
    let b = StreamsBuilder::new();
    let t = b.table(
        "input-topic",
        Consumed::with(Serdes::string(), Serdes::string()),
        Materialized::default(),
    );
    t.map_values(|_v| 0i64);
    assert_eq!(
        b.build().unwrap().describe().to_string(),
        "Topologies:\n   Sub-topology: 0\n    Source: KSTREAM-SOURCE-0000000001 (topics: [input-topic])\n      \
         --> KTABLE-SOURCE-0000000002\n    Processor: KTABLE-SOURCE-0000000002 (stores: [])\n      \
         --> KTABLE-MAPVALUES-0000000003\n      <-- KSTREAM-SOURCE-0000000001\n    \
         Processor: KTABLE-MAPVALUES-0000000003 (stores: [])\n      --> none\n      <-- KTABLE-SOURCE-0000000002\n\n"
    );
    // A join needs the table's store: it is materialized then.
    let b = StreamsBuilder::new();
    let t = b.table(
        "input-topic",
        Consumed::with(Serdes::string(), Serdes::string()),
        Materialized::default(),
    );
    b.stream("s", Consumed::with(Serdes::string(), Serdes::string()))
        .join(&t, |a, b| format!("{a}{b}"));
    let d = b.build().unwrap().describe().to_string();
    assert!(
        d.contains(
            "Processor: KTABLE-SOURCE-0000000002 (stores: [input-topic-STATE-STORE-0000000000])"
        ),
        "{d}"
    );
    assert!(
        d.contains(
            "Processor: KSTREAM-JOIN-0000000004 (stores: [input-topic-STATE-STORE-0000000000])"
        ),
        "{d}"
    );
}

/// Kafka's `TopologyTest.kTableAnonymousMaterializedFilterShouldPreserveTopologyStructure`
/// and `kTableNamedMaterializedFilterShouldPreserveTopologyStructure`.
#[test]
fn materialized_table_filter_descriptions_match_kafka_topology_test() {
    let head = "Topologies:\n   Sub-topology: 0\n    Source: KSTREAM-SOURCE-0000000001 (topics: [input-topic])\n      \
                --> KTABLE-SOURCE-0000000002\n    Processor: KTABLE-SOURCE-0000000002 (stores: [])\n      --> ";
    let b = StreamsBuilder::new();
    let t = b.table(
        "input-topic",
        Consumed::with(Serdes::string(), Serdes::string()),
        Materialized::default(),
    );
    t.filter_materialized(
        |_k, _v| false,
        Materialized::with(Serdes::string(), Serdes::string()),
    );
    assert_eq!(
        b.build().unwrap().describe().to_string(),
        format!(
            "{head}KTABLE-FILTER-0000000004\n      <-- KSTREAM-SOURCE-0000000001\n    \
             Processor: KTABLE-FILTER-0000000004 (stores: [])\n      --> none\n      <-- KTABLE-SOURCE-0000000002\n\n"
        )
    );
    let b = StreamsBuilder::new();
    let t = b.table(
        "input-topic",
        Consumed::with(Serdes::string(), Serdes::string()),
        Materialized::default(),
    );
    t.filter_materialized(|_k, _v| false, Materialized::as_("store-name"));
    assert_eq!(
        b.build().unwrap().describe().to_string(),
        format!(
            "{head}KTABLE-FILTER-0000000003\n      <-- KSTREAM-SOURCE-0000000001\n    \
             Processor: KTABLE-FILTER-0000000003 (stores: [store-name])\n      --> none\n      <-- KTABLE-SOURCE-0000000002\n\n"
        )
    );
}
