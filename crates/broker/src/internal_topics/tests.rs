//! Internal and hidden topics through the whole dispatch path, per API.

use proto_kafka::messages::create_topics_request::CreatableTopic;
use proto_kafka::messages::fetch_request::{FetchPartition, FetchTopic};
use proto_kafka::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use proto_kafka::messages::metadata_request::MetadataRequestTopic;
use proto_kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use proto_kafka::messages::*;
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;
use sluice_protocol::record::{BatchBuilder, Compression, Record};

use super::*;
use crate::handlers::test_support::{call, open_broker};

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn batch() -> bytes::Bytes {
    let mut b = BatchBuilder::new(Compression::None, 1);
    b.push(Record::new(Some(b"k".to_vec()), Some(b"v".to_vec()), 1));
    b.build(0).expect("batch").into()
}

fn produce_request(topic: &str) -> ProduceRequest {
    let mut pd = PartitionProduceData::default();
    pd.index = 0;
    pd.records = Some(batch());
    let mut td = TopicProduceData::default();
    td.name = name(topic);
    td.partition_data = vec![pd];
    let mut req = ProduceRequest::default();
    req.acks = 1;
    req.timeout_ms = 1000;
    req.topic_data = vec![td];
    req
}

async fn produce(broker: &std::sync::Arc<crate::Broker>, topic: &str) -> (i16, Option<String>) {
    let resp: ProduceResponse = call(broker, ApiKey::Produce, 9, &produce_request(topic))
        .await
        .expect("response");
    let p = &resp.responses[0].partition_responses[0];
    (
        p.error_code,
        p.error_message.as_ref().map(|m| m.to_string()),
    )
}

async fn metadata(
    broker: &std::sync::Arc<crate::Broker>,
    topics: Option<&[&str]>,
    auto_create: bool,
) -> MetadataResponse {
    let mut req = MetadataRequest::default();
    req.allow_auto_topic_creation = auto_create;
    req.topics = topics.map(|ts| {
        ts.iter()
            .map(|t| {
                let mut r = MetadataRequestTopic::default();
                r.name = Some(name(t));
                r
            })
            .collect()
    });
    call(broker, ApiKey::Metadata, 12, &req)
        .await
        .expect("response")
}

async fn create(broker: &std::sync::Arc<crate::Broker>, topic: &str) -> (i16, Option<String>) {
    let mut t = CreatableTopic::default();
    t.name = name(topic);
    t.num_partitions = 1;
    t.replication_factor = 1;
    let mut req = CreateTopicsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 1000;
    let resp: CreateTopicsResponse = call(broker, ApiKey::CreateTopics, 7, &req)
        .await
        .expect("response");
    let r = &resp.topics[0];
    (
        r.error_code,
        r.error_message.as_ref().map(|m| m.to_string()),
    )
}

#[tokio::test]
async fn produce_never_creates_and_refuses_internal_topics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[("offsets.topic.num.partitions", "2")]);
    let (code, _) = produce(&broker, "missing").await;
    assert_eq!(code, ResponseError::UnknownTopicOrPartition.code());
    assert!(
        broker.image().topic("missing").is_none(),
        "Produce created a topic"
    );

    broker.ensure_offsets_topic(2).expect("offsets topic");
    let meta = std::sync::Arc::clone(broker.metadata.log());
    let meta_end = meta.log_end_offset();
    let (code, _) = produce(&broker, METADATA_TOPIC).await;
    assert_eq!(code, ResponseError::UnknownTopicOrPartition.code());

    let offsets_end = broker
        .log(CONSUMER_OFFSETS_TOPIC, 0)
        .expect("log")
        .log_end_offset();
    let (code, message) = produce(&broker, CONSUMER_OFFSETS_TOPIC).await;
    assert_eq!(code, ResponseError::InvalidTopicException.code());
    // Kafka sends no message with this error (no custom error message).
    assert_eq!(message, None);
    assert_eq!(
        broker
            .log(CONSUMER_OFFSETS_TOPIC, 0)
            .expect("log")
            .log_end_offset(),
        offsets_end
    );
    assert_eq!(meta.log_end_offset(), meta_end, "metadata log untouched");
    broker.shutdown().expect("shutdown");
}

#[tokio::test]
async fn the_metadata_topic_does_not_exist_for_clients() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[]);
    broker
        .create_topic("visible", 1, 1, &[], false)
        .expect("topic");

    // Metadata: not listed, and by name unknown (never created).
    let all = metadata(&broker, None, true).await;
    let names: Vec<String> = all
        .topics
        .iter()
        .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
        .collect();
    assert_eq!(names, vec!["visible".to_string()]);
    let one = metadata(&broker, Some(&[METADATA_TOPIC]), true).await;
    assert_eq!(
        one.topics[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );

    // Fetch.
    let mut fp = FetchPartition::default();
    fp.partition = 0;
    fp.fetch_offset = 0;
    fp.partition_max_bytes = 1 << 20;
    let mut ft = FetchTopic::default();
    ft.topic = name(METADATA_TOPIC);
    ft.partitions = vec![fp];
    let mut req = FetchRequest::default();
    req.replica_id = BrokerId(-1);
    req.max_bytes = 1 << 20;
    req.topics = vec![ft];
    let resp: FetchResponse = call(&broker, ApiKey::Fetch, 12, &req)
        .await
        .expect("response");
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, ResponseError::UnknownTopicOrPartition.code());
    assert_eq!(p.records.as_ref().map_or(0, |r| r.len()), 0);

    // ListOffsets.
    let mut lp = ListOffsetsPartition::default();
    lp.partition_index = 0;
    lp.timestamp = -2;
    let mut lt = ListOffsetsTopic::default();
    lt.name = name(METADATA_TOPIC);
    lt.partitions = vec![lp];
    let mut req = ListOffsetsRequest::default();
    req.replica_id = BrokerId(-1);
    req.topics = vec![lt];
    let resp: ListOffsetsResponse = call(&broker, ApiKey::ListOffsets, 7, &req)
        .await
        .expect("response");
    assert_eq!(
        resp.topics[0].partitions[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );

    // DescribeConfigs.
    let mut res = describe_configs_request::DescribeConfigsResource::default();
    res.resource_type = 2;
    res.resource_name = StrBytes::from_static_str(METADATA_TOPIC);
    let mut req = DescribeConfigsRequest::default();
    req.resources = vec![res];
    let resp: DescribeConfigsResponse = call(&broker, ApiKey::DescribeConfigs, 4, &req)
        .await
        .expect("response");
    assert_eq!(
        resp.results[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );

    // CreateTopics: Kafka's exact refusal.
    let (code, message) = create(&broker, METADATA_TOPIC).await;
    assert_eq!(code, ResponseError::InvalidRequest.code());
    assert_eq!(
        message.as_deref(),
        Some("Creation of internal topic __cluster_metadata is prohibited.")
    );

    // DeleteTopics: as if it did not exist.
    let mut req = DeleteTopicsRequest::default();
    req.topic_names = vec![name(METADATA_TOPIC)];
    req.timeout_ms = 1000;
    let resp: DeleteTopicsResponse = call(&broker, ApiKey::DeleteTopics, 5, &req)
        .await
        .expect("response");
    assert_eq!(
        resp.responses[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
    broker.shutdown().expect("shutdown");
}

#[tokio::test]
async fn internal_topics_are_created_only_by_the_broker() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(
        dir.path(),
        &[
            ("offsets.topic.num.partitions", "3"),
            ("num.partitions", "1"),
        ],
    );
    // Neither Metadata nor CreateTopics creates them.
    for topic in INTERNAL_TOPICS {
        let resp = metadata(&broker, Some(&[topic]), true).await;
        assert_eq!(
            resp.topics[0].error_code,
            ResponseError::UnknownTopicOrPartition.code(),
            "{topic}"
        );
        let (code, message) = create(&broker, topic).await;
        assert_eq!(code, ResponseError::InvalidRequest.code(), "{topic}");
        assert_eq!(
            message,
            Some(format!("Creation of internal topic {topic} is prohibited."))
        );
        assert!(broker.image().topic(topic).is_none(), "{topic} created");
    }
    // The group coordinator creates __consumer_offsets with its own configs.
    broker.groups.shard(&broker, "g").expect("shard");
    let t = broker
        .image()
        .topic(CONSUMER_OFFSETS_TOPIC)
        .cloned()
        .expect("created");
    assert_eq!(t.partitions.len(), 3);
    assert_eq!(
        t.configs.get("cleanup.policy").map(String::as_str),
        Some("compact")
    );
    assert_eq!(
        t.configs.get("segment.bytes").map(String::as_str),
        Some("104857600")
    );
    let resp = metadata(&broker, Some(&[CONSUMER_OFFSETS_TOPIC]), false).await;
    assert_eq!(resp.topics[0].error_code, 0);
    assert!(resp.topics[0].is_internal);
    assert_eq!(resp.topics[0].partitions.len(), 3);

    // Clients may neither delete it nor add partitions.
    let mut req = DeleteTopicsRequest::default();
    req.topic_names = vec![name(CONSUMER_OFFSETS_TOPIC)];
    req.timeout_ms = 1000;
    let resp: DeleteTopicsResponse = call(&broker, ApiKey::DeleteTopics, 5, &req)
        .await
        .expect("response");
    assert_eq!(
        resp.responses[0].error_code,
        ResponseError::TopicAuthorizationFailed.code()
    );
    let mut t = create_partitions_request::CreatePartitionsTopic::default();
    t.name = name(CONSUMER_OFFSETS_TOPIC);
    t.count = 10;
    t.assignments = None;
    let mut req = CreatePartitionsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 1000;
    let resp: CreatePartitionsResponse = call(&broker, ApiKey::CreatePartitions, 3, &req)
        .await
        .expect("response");
    assert_eq!(
        resp.results[0].error_code,
        ResponseError::TopicAuthorizationFailed.code()
    );
    assert_eq!(
        broker
            .image()
            .topic(CONSUMER_OFFSETS_TOPIC)
            .map(|t| t.partitions.len()),
        Some(3)
    );
    broker.shutdown().expect("shutdown");
}

#[tokio::test]
async fn the_coordinator_uses_the_existing_partition_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let broker = open_broker(dir.path(), &[("offsets.topic.num.partitions", "3")]);
        broker.groups.shard(&broker, "g").expect("shard");
        broker.shutdown().expect("shutdown");
    }
    // A later config change must not move groups to other partitions.
    let broker = open_broker(dir.path(), &[("offsets.topic.num.partitions", "7")]);
    for group in ["g", "orders", "billing", "x"] {
        assert_eq!(
            broker.groups.partition_for(&broker, group),
            sluice_coordinator::offsets::coordinator_partition(group, 3),
            "{group}"
        );
    }
    assert_eq!(
        broker
            .image()
            .topic(CONSUMER_OFFSETS_TOPIC)
            .map(|t| t.partitions.len()),
        Some(3)
    );
    broker.shutdown().expect("shutdown");
}

#[test]
fn kafkas_internal_topics() {
    for t in [
        "__consumer_offsets",
        "__transaction_state",
        "__share_group_state",
    ] {
        assert!(is_internal(t), "{t}");
        assert_eq!(
            check_client_may_produce(t).map_err(|e| e.code),
            Err(ResponseError::InvalidTopicException)
        );
        assert_eq!(
            check_client_may_create(t).map_err(|e| e.code),
            Err(ResponseError::InvalidRequest)
        );
    }
    assert!(!is_internal("__cluster_metadata"));
    assert!(is_hidden("__cluster_metadata"));
    assert_eq!(
        check_client_may_produce("__cluster_metadata").map_err(|e| e.code),
        Err(ResponseError::UnknownTopicOrPartition)
    );
    assert!(check_client_may_produce("orders").is_ok());
    assert!(check_client_may_create("_consumer_offsets").is_ok());
}
