//! Internal topics against a real in-process broker: Kafka's names and
//! configs, tolerance of existing topics, wrong partition counts, the
//! co-partitioning check, and purging repartition topics.

#[path = "../../client/tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;

use sluice_client::admin::OffsetSpec;
use sluice_client::{ProducerRecord, TopicPartition};
use sluice_streams::assignor::{RepartitionTopicMetadata, SubtopologyMetadata, TopologyMetadata};
use sluice_streams::internal_topics::InternalTopicManager;
use sluice_streams::StreamsError;

/// Word count's shape: input -> repartition -> counts store.
fn word_count() -> TopologyMetadata {
    TopologyMetadata {
        subtopologies: vec![
            SubtopologyMetadata {
                id: 0,
                source_topics: vec!["input".into()],
                repartition_source_topics: vec![],
                state_stores: vec![],
                changelog_stores: vec![],
                copartition_groups: vec![],
            },
            SubtopologyMetadata {
                id: 1,
                source_topics: vec![],
                repartition_source_topics: vec!["wc-counts-repartition".into()],
                state_stores: vec!["counts".into()],
                changelog_stores: vec!["counts".into()],
                copartition_groups: vec![],
            },
        ],
        repartition_topics: vec![RepartitionTopicMetadata {
            name: "wc-counts-repartition".into(),
            partitions: None,
            written_by: vec![0],
        }],
    }
}

fn config(entries: &[sluice_client::admin::ConfigEntry], key: &str) -> Option<String> {
    entries
        .iter()
        .find(|c| c.name == key)
        .and_then(|c| c.value.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_changelog_and_repartition_topics_as_kafka() {
    let server = common::start().await;
    server.create_topic("input", 6).await;
    let admin = server.admin().await;
    let manager = InternalTopicManager::new(admin.clone(), 1);
    let counts = manager.prepare("wc", &word_count()).await.expect("prepare");
    assert_eq!(counts["wc-counts-repartition"], 6);
    assert_eq!(counts["wc-counts-changelog"], 6);

    let changelog = admin
        .describe_configs("wc-counts-changelog")
        .await
        .expect("configs");
    assert_eq!(
        config(&changelog, "cleanup.policy").as_deref(),
        Some("compact")
    );
    assert_eq!(
        config(&changelog, "message.timestamp.type").as_deref(),
        Some("CreateTime")
    );
    let repartition = admin
        .describe_configs("wc-counts-repartition")
        .await
        .expect("configs");
    assert_eq!(
        config(&repartition, "cleanup.policy").as_deref(),
        Some("delete")
    );
    assert_eq!(config(&repartition, "retention.ms").as_deref(), Some("-1"));
    assert_eq!(
        config(&repartition, "segment.bytes").as_deref(),
        Some("52428800")
    );
    let described = admin
        .describe_topics(&["wc-counts-changelog", "wc-counts-repartition"])
        .await
        .expect("describe");
    assert!(described.iter().all(|t| t.partitions.len() == 6));

    // A second start (or a second instance) accepts the existing topics.
    let again = manager.prepare("wc", &word_count()).await.expect("again");
    assert_eq!(again, counts);

    // An existing internal topic with the wrong partition count is an error.
    admin
        .delete_topic("wc-counts-changelog")
        .await
        .expect("delete");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    server.create_topic("wc-counts-changelog", 2).await;
    let err = manager
        .prepare("wc", &word_count())
        .await
        .expect_err("bad count");
    assert!(
        matches!(&err, StreamsError::InternalTopic { topic, .. } if topic == "wc-counts-changelog"),
        "{err}"
    );
    assert!(err.to_string().contains("expected: 6; actual: 2"), "{err}");

    // A missing source topic is reported by name.
    let mut missing = word_count();
    missing.subtopologies[0].source_topics = vec!["nope".into()];
    let err = manager.prepare("wc2", &missing).await.expect_err("missing");
    assert!(err.to_string().contains("nope"), "{err}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copartitioning_violation_fails_at_start() {
    let server = common::start().await;
    server.create_topic("orders", 3).await;
    server.create_topic("customers", 4).await;
    let topology = TopologyMetadata {
        subtopologies: vec![SubtopologyMetadata {
            id: 0,
            source_topics: vec!["orders".into(), "customers".into()],
            repartition_source_topics: vec![],
            state_stores: vec!["customers-store".into()],
            changelog_stores: vec!["customers-store".into()],
            copartition_groups: vec![vec!["orders".into(), "customers".into()]],
        }],
        repartition_topics: vec![],
    };
    let manager = InternalTopicManager::new(server.admin().await, 1);
    let err = manager
        .prepare("join", &topology)
        .await
        .expect_err("violation");
    assert!(matches!(err, StreamsError::Copartitioning(_)), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("orders=3") && msg.contains("customers=4"),
        "{msg}"
    );
    // Nothing was created.
    let topics = server.admin().await.list_topics().await.expect("list");
    assert!(!topics.iter().any(|t| t.starts_with("join-")), "{topics:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_moves_the_repartition_log_start() {
    let server = common::start().await;
    server.create_topic("input", 1).await;
    let admin = server.admin().await;
    let mut topology = word_count();
    topology.repartition_topics[0].name = "p-counts-repartition".into();
    topology.subtopologies[1].repartition_source_topics = vec!["p-counts-repartition".into()];
    let manager = InternalTopicManager::new(admin.clone(), 1);
    manager.prepare("p", &topology).await.expect("prepare");
    let producer = server.producer(|_| {}).await;
    for i in 0..10 {
        producer
            .send(ProducerRecord::new("p-counts-repartition", format!("{i}")).partition(0))
            .await
            .expect("send")
            .await
            .expect("ack");
    }
    let tp = TopicPartition::new("p-counts-repartition", 0);
    manager
        .purge(&BTreeMap::from([(tp.clone(), 7)]))
        .await
        .expect("purge");
    let start = admin
        .list_offsets(&[(tp.clone(), OffsetSpec::Earliest)])
        .await
        .expect("offsets");
    assert_eq!(start[&tp].offset, 7);
    producer.close().await.expect("close");
    server.stop().await;
}
