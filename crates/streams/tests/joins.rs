//! Joins run by `KafkaStreams` against a real in-process broker: a
//! stream–table join over co-partitioned topics, the co-partitioning check
//! failing at start, and a stream–global-table join (the global table
//! bootstrapped before processing and kept up to date).

#[path = "../../client/tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use sluice_client::consumer::{Consumer, ConsumerConfig};
use sluice_client::{ProducerRecord, TopicPartition};
use sluice_streams::config::StreamsConfig;
use sluice_streams::dsl::{Consumed, Materialized, Produced, StreamsBuilder};
use sluice_streams::runtime::{KafkaStreams, State};
use sluice_streams::serde::Serdes;
use sluice_streams::topology::Topology;
use sluice_streams::StreamsError;

fn config(server: &common::TestServer, app: &str, dir: &std::path::Path) -> StreamsConfig {
    let mut cfg = StreamsConfig::new(app, server.client_config());
    cfg.set("commit.interval.ms", "100").expect("cfg");
    cfg.set("state.dir", &dir.display().to_string())
        .expect("cfg");
    cfg
}

/// orders (customer -> amount) joined with customers (customer -> name).
fn stream_table() -> Topology {
    let b = StreamsBuilder::new();
    let customers = b.table(
        "customers",
        Consumed::with(Serdes::string(), Serdes::string()),
        Materialized::as_("customers-store"),
    );
    b.stream("orders", Consumed::with(Serdes::string(), Serdes::string()))
        .join(&customers, |amount: &String, name: &String| {
            format!("{name}:{amount}")
        })
        .to(
            "enriched",
            Produced::with(Serdes::string(), Serdes::string()),
        );
    b.build().expect("topology")
}

/// orders (order id -> product id) joined with the global products table.
fn stream_global() -> Topology {
    let b = StreamsBuilder::new();
    let products = b.global_table(
        "products",
        Consumed::with(Serdes::string(), Serdes::string()),
        Materialized::as_("products-store"),
    );
    b.stream("orders", Consumed::with(Serdes::string(), Serdes::string()))
        .join_global(
            &products,
            |_order: &String, product: &String| product.clone(),
            |product: &String, name: &String| format!("{product}={name}"),
        )
        .to(
            "enriched",
            Produced::with(Serdes::string(), Serdes::string()),
        );
    b.build().expect("topology")
}

async fn send(server: &common::TestServer, topic: &str, records: &[(&str, &str)]) {
    let producer = server.producer(|_| {}).await;
    for (k, v) in records {
        producer
            .send(ProducerRecord::new(topic, v.as_bytes().to_vec()).key(k.as_bytes().to_vec()))
            .await
            .expect("send")
            .await
            .expect("ack");
    }
    producer.close().await.expect("close");
}

/// key -> value of everything in `topic` (3 partitions), waiting until
/// `want` entries are there.
async fn read(server: &common::TestServer, topic: &str, want: usize) -> BTreeMap<String, String> {
    let mut consumer = Consumer::new(ConsumerConfig::new(server.client_config()))
        .await
        .expect("consumer");
    let tps: Vec<TopicPartition> = (0..3).map(|p| TopicPartition::new(topic, p)).collect();
    consumer.assign(&tps).expect("assign");
    consumer.seek_to_beginning(&[]).expect("seek");
    let mut out = BTreeMap::new();
    for _ in 0..150 {
        for r in consumer
            .poll(Duration::from_millis(200))
            .await
            .expect("poll")
        {
            out.insert(
                String::from_utf8(r.key.expect("key").to_vec()).expect("utf8"),
                String::from_utf8(r.value.expect("value").to_vec()).expect("utf8"),
            );
        }
        if out.len() >= want {
            break;
        }
    }
    consumer.close().await.expect("close");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stream_table_join_over_copartitioned_topics() {
    let server = common::start_with(|c| {
        c.set("group.initial.rebalance.delay.ms", "0").expect("cfg");
    })
    .await;
    for t in ["customers", "orders", "enriched"] {
        server.create_topic(t, 3).await;
    }
    send(
        &server,
        "customers",
        &[("c1", "ann"), ("c2", "bob"), ("c3", "cy")],
    )
    .await;
    let state = tempfile::tempdir().expect("state");
    let streams =
        KafkaStreams::from_topology(stream_table(), config(&server, "join", state.path()))
            .expect("streams");
    streams.start().await.expect("start");
    assert!(
        streams
            .wait_for_state(State::Running, Duration::from_secs(30))
            .await
    );
    // Let the table side be read before the orders arrive.
    tokio::time::sleep(Duration::from_millis(500)).await;
    send(
        &server,
        "orders",
        &[("c1", "10"), ("c2", "20"), ("c3", "30"), ("c4", "40")],
    )
    .await;
    let out = read(&server, "enriched", 3).await;
    let want: BTreeMap<String, String> = [("c1", "ann:10"), ("c2", "bob:20"), ("c3", "cy:30")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(out, want, "c4 has no customer: an inner join drops it");
    assert!(streams.close(Duration::from_secs(30)).await);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copartitioning_violation_fails_start_naming_topics() {
    let server = common::start().await;
    server.create_topic("customers", 3).await;
    server.create_topic("orders", 4).await;
    let state = tempfile::tempdir().expect("state");
    let streams =
        KafkaStreams::from_topology(stream_table(), config(&server, "badjoin", state.path()))
            .expect("streams");
    let err = streams.start().await.expect_err("not co-partitioned");
    assert!(matches!(err, StreamsError::Copartitioning(_)), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("customers=3") && msg.contains("orders=4"),
        "{msg}"
    );
    assert_eq!(streams.state(), State::Error);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stream_global_table_join() {
    let server = common::start_with(|c| {
        c.set("group.initial.rebalance.delay.ms", "0").expect("cfg");
    })
    .await;
    server.create_topic("products", 2).await;
    server.create_topic("orders", 3).await;
    server.create_topic("enriched", 3).await;
    send(&server, "products", &[("p1", "pen"), ("p2", "ink")]).await;
    let state = tempfile::tempdir().expect("state");
    let streams =
        KafkaStreams::from_topology(stream_global(), config(&server, "global", state.path()))
            .expect("streams");
    streams.start().await.expect("start");
    assert!(
        streams
            .wait_for_state(State::Running, Duration::from_secs(30))
            .await
    );
    // Bootstrapped at start: the first orders already find their products.
    send(
        &server,
        "orders",
        &[("o1", "p1"), ("o2", "p2"), ("o3", "p9")],
    )
    .await;
    let out = read(&server, "enriched", 2).await;
    assert_eq!(out.get("o1").map(String::as_str), Some("p1=pen"));
    assert_eq!(out.get("o2").map(String::as_str), Some("p2=ink"));
    assert!(!out.contains_key("o3"));
    // Updates to the global topic reach the running instance.
    send(&server, "products", &[("p9", "pad")]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    send(&server, "orders", &[("o4", "p9")]).await;
    let out = read(&server, "enriched", 3).await;
    assert_eq!(out.get("o4").map(String::as_str), Some("p9=pad"));
    assert!(streams.close(Duration::from_secs(30)).await);
    server.stop().await;
}
