//! Kafka 4 API surface over TCP against a running server: what ApiVersions
//! advertises for ListOffsets and DescribeTopicPartitions, both answered
//! at their versions, and a JoinGroup with a zero rebalance timeout
//! followed at once by SyncGroup.

use bytes::Bytes;
use proto_kafka::messages::create_topics_request::CreatableTopic;
use proto_kafka::messages::describe_topic_partitions_request::{Cursor, TopicRequest};
use proto_kafka::messages::join_group_request::JoinGroupRequestProtocol;
use proto_kafka::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use proto_kafka::messages::sync_group_request::SyncGroupRequestAssignment;
use proto_kafka::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, CreateTopicsRequest,
    CreateTopicsResponse, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, GroupId,
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, ListOffsetsRequest,
    ListOffsetsResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use proto_kafka::protocol::StrBytes;

mod common;
use common::{start, Client};

const MEMBER_ID_REQUIRED: i16 = 79;

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

impl Client {
    async fn create_topic(&mut self, name: &str, partitions: i32) {
        let mut t = CreatableTopic::default();
        t.name = topic_name(name);
        t.num_partitions = partitions;
        t.replication_factor = 1;
        let mut req = CreateTopicsRequest::default();
        req.topics = vec![t];
        req.timeout_ms = 10_000;
        let resp: CreateTopicsResponse = self.call(ApiKey::CreateTopics, 7, &req).await;
        assert_eq!(resp.topics[0].error_code, 0, "create {name}");
    }

    async fn describe_topics(
        &mut self,
        topics: &[&str],
        limit: i32,
        cursor: Option<(&str, i32)>,
    ) -> DescribeTopicPartitionsResponse {
        let mut req = DescribeTopicPartitionsRequest::default();
        req.topics = topics
            .iter()
            .map(|n| {
                let mut t = TopicRequest::default();
                t.name = topic_name(n);
                t
            })
            .collect();
        req.response_partition_limit = limit;
        req.cursor = cursor.map(|(t, p)| {
            let mut c = Cursor::default();
            c.topic_name = topic_name(t);
            c.partition_index = p;
            c
        });
        self.call(ApiKey::DescribeTopicPartitions, 0, &req).await
    }

    async fn list_offsets(&mut self, version: i16, topic: &str, target: i64) -> (i16, i64, i32) {
        let mut p = ListOffsetsPartition::default();
        p.partition_index = 0;
        p.timestamp = target;
        p.current_leader_epoch = -1;
        let mut t = ListOffsetsTopic::default();
        t.name = topic_name(topic);
        t.partitions = vec![p];
        let mut req = ListOffsetsRequest::default();
        req.replica_id = BrokerId(-1);
        req.topics = vec![t];
        req.timeout_ms = 1_000;
        let resp: ListOffsetsResponse = self.call(ApiKey::ListOffsets, version, &req).await;
        let p = &resp.topics[0].partitions[0];
        (p.error_code, p.offset, p.leader_epoch)
    }
}

#[tokio::test]
async fn kafka_4_versions_are_advertised_and_answered() {
    let server = start(&[]).await;
    let mut c = server.client().await;
    let versions: ApiVersionsResponse = c
        .call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .await;
    let range = |key: ApiKey| {
        versions
            .api_keys
            .iter()
            .find(|k| k.api_key == key as i16)
            .map(|k| (k.min_version, k.max_version))
    };
    // Kafka 4.0's ranges.
    assert_eq!(range(ApiKey::ListOffsets), Some((1, 10)));
    assert_eq!(range(ApiKey::DescribeTopicPartitions), Some((0, 0)));

    c.create_topic("a", 3).await;
    c.create_topic("b", 2).await;
    // Every version of ListOffsets on an empty partition.
    for v in 1..=10 {
        let epoch = if v >= 4 { 0 } else { -1 };
        assert_eq!(c.list_offsets(v, "a", -1).await, (0, 0, epoch), "v{v}");
        // No batch yet: no epoch for the log start.
        assert_eq!(c.list_offsets(v, "a", -2).await, (0, 0, -1), "v{v}");
    }
    assert_eq!(c.list_offsets(10, "a", -5).await, (0, -1, -1));
    assert_eq!(c.list_offsets(8, "a", -5).await, (35, -1, -1));

    // DescribeTopicPartitions pages through a and b two partitions at a
    // time, following the cursor.
    let mut pages = Vec::new();
    let mut cursor: Option<(String, i32)> = None;
    loop {
        let resp = c
            .describe_topics(&[], 2, cursor.as_ref().map(|(t, p)| (t.as_str(), *p)))
            .await;
        let page: Vec<(String, Vec<i32>)> = resp
            .topics
            .iter()
            .map(|t| {
                (
                    t.name.as_ref().expect("name").0.to_string(),
                    t.partitions.iter().map(|p| p.partition_index).collect(),
                )
            })
            .collect();
        pages.push(page);
        match resp.next_cursor {
            Some(next) => cursor = Some((next.topic_name.0.to_string(), next.partition_index)),
            None => break,
        }
    }
    let s = |t: &str, p: &[i32]| (t.to_string(), p.to_vec());
    assert_eq!(
        pages,
        vec![
            vec![s("a", &[0, 1])],
            vec![s("a", &[2]), s("b", &[0])],
            vec![s("b", &[1])],
        ]
    );
    let resp = c.describe_topics(&["nope", "a"], 2000, None).await;
    assert_eq!(resp.topics.len(), 2);
    assert_eq!(resp.topics[1].name, Some(topic_name("nope")));
    assert_eq!(resp.topics[1].error_code, 3, "UNKNOWN_TOPIC_OR_PARTITION");
    server.stop().await;
}

fn group_id(name: &str) -> GroupId {
    GroupId(StrBytes::from_string(name.to_string()))
}

/// JoinGroup with `rebalance_timeout_ms = 0`, SyncGroup sent as soon as the
/// JoinGroup response arrives: the member is not expired in between, and
/// stays in the group; the rebalance after a rejoin does the same.
#[tokio::test]
async fn zero_rebalance_timeout_then_prompt_sync() {
    let server = start(&[("group.initial.rebalance.delay.ms", "0")]).await;
    let mut c = server.client().await;
    let mut p = JoinGroupRequestProtocol::default();
    p.name = StrBytes::from_static_str("range");
    p.metadata = Bytes::from_static(b"subscription");
    let mut join = JoinGroupRequest::default();
    join.group_id = group_id("zero");
    join.session_timeout_ms = 10_000;
    join.rebalance_timeout_ms = 0;
    join.protocol_type = StrBytes::from_static_str("consumer");
    join.protocols = vec![p];
    let first: JoinGroupResponse = c.call(ApiKey::JoinGroup, 9, &join).await;
    assert_eq!(first.error_code, MEMBER_ID_REQUIRED);
    join.member_id = first.member_id.clone();
    let member = first.member_id.to_string();
    for generation in 1..=3 {
        let joined: JoinGroupResponse = c.call(ApiKey::JoinGroup, 9, &join).await;
        assert_eq!(
            (joined.error_code, joined.generation_id),
            (0, generation),
            "join of generation {generation}"
        );
        let mut a = SyncGroupRequestAssignment::default();
        a.member_id = StrBytes::from_string(member.clone());
        a.assignment = Bytes::from(format!("gen-{generation}"));
        let mut sync = SyncGroupRequest::default();
        sync.group_id = group_id("zero");
        sync.member_id = StrBytes::from_string(member.clone());
        sync.generation_id = generation;
        sync.protocol_type = Some(StrBytes::from_static_str("consumer"));
        sync.protocol_name = Some(StrBytes::from_static_str("range"));
        sync.assignments = vec![a];
        let synced: SyncGroupResponse = c.call(ApiKey::SyncGroup, 5, &sync).await;
        assert_eq!(synced.error_code, 0, "sync of generation {generation}");
        assert_eq!(
            synced.assignment.as_ref(),
            format!("gen-{generation}").as_bytes()
        );
        // Still a member well after the zero sync deadline.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let mut hb = HeartbeatRequest::default();
        hb.group_id = group_id("zero");
        hb.member_id = StrBytes::from_string(member.clone());
        hb.generation_id = generation;
        let beat: HeartbeatResponse = c.call(ApiKey::Heartbeat, 4, &hb).await;
        assert_eq!(beat.error_code, 0, "heartbeat in generation {generation}");
    }
    server.stop().await;
}
