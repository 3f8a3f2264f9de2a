//! Admin client integration tests against an in-process Sluice server:
//! connection negotiation, metadata, and the topic admin operations with
//! their error cases.

use std::time::Duration;

use proto_kafka::error::ResponseError;
use proto_kafka::messages::ApiKey;
use sluice_client::admin::NewTopic;
use sluice_client::connection::{Connection, ConnectionConfig};
use sluice_client::{Admin, ClientConfig, ClientError};

mod common;
use common::{free_port, start};

fn kafka_error(e: &ClientError) -> Option<ResponseError> {
    e.response_error()
}

#[tokio::test]
async fn connection_negotiates_versions() {
    let s = start().await;
    let conn = Connection::connect(&s.addr, ConnectionConfig::default())
        .await
        .expect("connect");
    assert_eq!(conn.broker_versions(ApiKey::Metadata), Some((0, 12)));
    assert_eq!(conn.version_for(ApiKey::Metadata, 9).expect("v"), 9);
    assert_eq!(conn.version_for(ApiKey::Metadata, 99).expect("v"), 12);
    // CreateTopics is 2..=7 on the broker: asking for at most 1 has no overlap.
    assert!(matches!(
        conn.version_for(ApiKey::CreateTopics, 1),
        Err(ClientError::UnsupportedVersion { .. })
    ));
    drop(conn);
    s.stop().await;
}

#[tokio::test]
async fn bootstrap_failure_is_reported() {
    let port = free_port();
    let mut cfg = ClientConfig::new(&format!("127.0.0.1:{port}"));
    cfg.retries = 1;
    cfg.retry_backoff = Duration::from_millis(10);
    let err = Admin::connect(cfg).await.expect_err("nothing listens");
    assert!(matches!(err, ClientError::NoBrokerAvailable(_)), "{err}");
    assert!(matches!(
        Admin::connect(ClientConfig::new("")).await,
        Err(ClientError::InvalidArgument(_))
    ));
}

#[tokio::test]
async fn create_list_describe_delete_topics() {
    let s = start().await;
    let admin = s.admin().await;
    admin
        .create_topic(NewTopic::new("orders", 3, 1).config("retention.ms", "60000"))
        .await
        .expect("create orders");
    let results = admin
        .create_topics(vec![NewTopic::new("a", 1, 1), NewTopic::new("b", 2, 1)])
        .await
        .expect("create a, b");
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|(_, r)| r.is_ok()));

    let topics = admin.list_topics().await.expect("list");
    for t in ["a", "b", "orders"] {
        assert!(topics.contains(&t.to_string()), "{topics:?}");
    }

    let desc = admin
        .describe_topics(&["orders", "b"])
        .await
        .expect("describe");
    assert_eq!(desc[0].name, "orders");
    assert_eq!(desc[0].partitions.len(), 3);
    assert_eq!(desc[1].partitions.len(), 2);
    let md = admin.cluster().metadata().await;
    for p in desc[0].partitions.values() {
        assert!(md.brokers.contains_key(&p.leader), "leader {}", p.leader);
        assert_eq!(p.replicas, vec![p.leader]);
    }
    assert!(md.leader("orders", 2).is_some());

    admin.delete_topic("a").await.expect("delete a");
    let topics = admin.list_topics().await.expect("list");
    assert!(!topics.contains(&"a".to_string()), "{topics:?}");
    s.stop().await;
}

#[tokio::test]
async fn topic_errors_carry_kafka_codes() {
    let s = start().await;
    let admin = s.admin().await;
    admin
        .create_topic(NewTopic::new("t", 1, 1))
        .await
        .expect("create");

    let err = admin
        .create_topic(NewTopic::new("t", 1, 1))
        .await
        .expect_err("exists");
    assert_eq!(
        kafka_error(&err),
        Some(ResponseError::TopicAlreadyExists),
        "{err}"
    );
    assert_eq!(err.code(), Some(36));
    assert!(err.to_string().contains("TopicAlreadyExists"), "{err}");

    let err = admin
        .create_topic(NewTopic::new("bad-config", 1, 1).config("cleanup.policy", "bogus"))
        .await
        .expect_err("invalid config");
    assert_eq!(
        kafka_error(&err),
        Some(ResponseError::InvalidConfig),
        "{err}"
    );

    let err = admin
        .create_topic(NewTopic::new("zero", 0, 1))
        .await
        .expect_err("invalid partitions");
    assert_eq!(
        kafka_error(&err),
        Some(ResponseError::InvalidPartitions),
        "{err}"
    );

    let err = admin.delete_topic("missing").await.expect_err("unknown");
    assert_eq!(
        kafka_error(&err),
        Some(ResponseError::UnknownTopicOrPartition),
        "{err}"
    );

    let err = admin
        .describe_topics(&["missing"])
        .await
        .expect_err("unknown");
    assert_eq!(
        kafka_error(&err),
        Some(ResponseError::UnknownTopicOrPartition),
        "{err}"
    );
    s.stop().await;
}

#[tokio::test]
async fn add_partitions() {
    let s = start().await;
    let admin = s.admin().await;
    admin
        .create_topic(NewTopic::new("grow", 1, 1))
        .await
        .expect("create");
    admin.create_partitions("grow", 4).await.expect("grow");
    let d = admin.describe_topics(&["grow"]).await.expect("describe");
    assert_eq!(d[0].partitions.len(), 4);
    let err = admin
        .create_partitions("grow", 2)
        .await
        .expect_err("shrink");
    assert_eq!(
        kafka_error(&err),
        Some(ResponseError::InvalidPartitions),
        "{err}"
    );
    let err = admin
        .create_partitions("nope", 2)
        .await
        .expect_err("unknown");
    assert_eq!(
        kafka_error(&err),
        Some(ResponseError::UnknownTopicOrPartition),
        "{err}"
    );
    s.stop().await;
}

#[tokio::test]
async fn describe_cluster() {
    let s = start().await;
    let admin = s.admin().await;
    let c = admin.describe_cluster().await.expect("describe cluster");
    assert_eq!(c.brokers.len(), 1);
    assert_eq!(c.brokers[0].addr(), s.addr);
    assert_eq!(c.controller_id, c.brokers[0].id);
    assert!(c.cluster_id.is_some());
    s.stop().await;
}

#[tokio::test]
async fn connection_loss_is_a_retriable_error() {
    let s = start().await;
    let mut cfg = ClientConfig::new(&s.addr);
    cfg.retries = 1;
    cfg.retry_backoff = Duration::from_millis(10);
    let admin = Admin::connect(cfg).await.expect("connect");
    let _ = admin.list_topics().await.expect("list");
    let admin2 = s.admin().await;
    admin2
        .create_topic(NewTopic::new("x", 1, 1))
        .await
        .expect("create");
    s.stop().await;
    // The broker is gone: requests fail with a retriable transport error.
    let err = admin.list_topics().await.expect_err("down");
    assert!(err.is_retriable(), "{err}");
}

#[tokio::test]
async fn describe_and_alter_configs() {
    let s = start().await;
    let admin = s.admin().await;
    admin
        .create_topic(NewTopic::new("cfg", 1, 1).config("cleanup.policy", "compact"))
        .await
        .expect("create");
    let overrides = |entries: Vec<sluice_client::admin::ConfigEntry>| -> Vec<(String, String)> {
        entries
            .into_iter()
            .filter(|e| e.is_topic_override())
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect()
    };
    let all = admin.describe_configs("cfg").await.expect("describe");
    assert!(all
        .iter()
        .any(|e| e.name == "retention.ms" && !e.is_topic_override()));
    assert_eq!(
        overrides(all),
        [("cleanup.policy".to_string(), "compact".to_string())]
    );
    admin
        .alter_configs(
            "cfg",
            &[("retention.ms".to_string(), "1234".to_string())],
            &["cleanup.policy".to_string()],
        )
        .await
        .expect("alter");
    let all = admin.describe_configs("cfg").await.expect("describe");
    assert_eq!(
        overrides(all),
        [("retention.ms".to_string(), "1234".to_string())]
    );
    let err = admin.describe_configs("nope").await.expect_err("unknown");
    assert_eq!(
        kafka_error(&err),
        Some(ResponseError::UnknownTopicOrPartition),
        "{err}"
    );
    let err = admin
        .alter_configs("nope", &[("retention.ms".into(), "1".into())], &[])
        .await
        .expect_err("unknown");
    assert_eq!(
        kafka_error(&err),
        Some(ResponseError::UnknownTopicOrPartition),
        "{err}"
    );
    s.stop().await;
}
