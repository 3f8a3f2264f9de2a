//! DescribeTopicPartitions (key 75, v0; KIP-966): topics and their
//! partitions, paginated, as Kafka 4 clients describe topics (the Java
//! admin's `describeTopics`). Semantics of Kafka's
//! `DescribeTopicPartitionsRequestHandler` and
//! `KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse`:
//! - the requested topics (all topics when the list is empty), deduplicated
//!   and sorted by name, from the cursor's topic on (a cursor naming a
//!   topic missing from a non-empty list, or a negative partition, makes
//!   the whole request INVALID_REQUEST, every requested topic answered with
//!   that error);
//! - at most `min(response_partition_limit,
//!   max.request.partition.size.limit)` partitions (at least one); when the
//!   limit cuts a topic, `next_cursor` names it and the first partition
//!   left out; when it is reached exactly at a topic's end, the cursor names
//!   the next topic at partition 0;
//! - a requested topic that does not exist is answered with
//!   UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an illegal
//!   name), a zero topic id and no partitions; when listing all topics
//!   none are;
//! - eligible leader replicas and last known ELR are empty lists: this node
//!   keeps no ELR (as Kafka answers with ELR disabled, its 4.0 default);
//! - topic authorized operations: every topic operation (no authorizer).

use std::collections::BTreeSet;
use std::sync::Arc;

use proto_kafka::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use proto_kafka::messages::{
    BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, TopicName,
};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;
use sluice_controller::store::METADATA_TOPIC;
use sluice_controller::TopicImage;

use super::Ctx;
use crate::broker::{validate_topic_name, Broker, CONSUMER_OFFSETS_TOPIC};

pub(crate) const VERSIONS: (i16, i16) = (0, 0);

/// The topic resource's operations as `AclOperation` code bits: READ (3),
/// WRITE (4), CREATE (5), DELETE (6), ALTER (7), DESCRIBE (8),
/// DESCRIBE_CONFIGS (10), ALTER_CONFIGS (11).
const TOPIC_OPS: i32 =
    (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11);

/// Kafka's `Topic.isInternal`.
fn is_internal(name: &str) -> bool {
    matches!(
        name,
        CONSUMER_OFFSETS_TOPIC | "__transaction_state" | "__share_group_state"
    )
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: DescribeTopicPartitionsRequest,
    _ctx: &Ctx,
) -> DescribeTopicPartitionsResponse {
    let image = broker.image();
    let all_topics = req.topics.is_empty();
    let (cursor_topic, cursor_partition) = match &req.cursor {
        Some(c) => (c.topic_name.0.to_string(), c.partition_index),
        None => (String::new(), 0),
    };
    let topics: BTreeSet<String> = if all_topics {
        image
            .topics()
            .map(|t| t.name.clone())
            .filter(|n| n != METADATA_TOPIC && *n >= cursor_topic)
            .collect()
    } else {
        req.topics
            .iter()
            .map(|t| t.name.0.to_string())
            .filter(|n| *n >= cursor_topic)
            .collect()
    };
    let invalid = if req.cursor.is_some() && !all_topics && !topics.contains(&cursor_topic) {
        Some(format!(
            "the topic list should contain the cursor topic {cursor_topic}"
        ))
    } else if req.cursor.is_some() && cursor_partition < 0 {
        Some(format!(
            "the cursor partition must be valid, got {cursor_partition}"
        ))
    } else {
        None
    };
    if let Some(why) = invalid {
        tracing::debug!(reason = %why, "invalid DescribeTopicPartitions request");
        return error_response(&req, ResponseError::InvalidRequest);
    }
    let configured = broker.settings.max_request_partition_size_limit;
    let mut remaining = req.response_partition_limit.min(configured).max(1);
    let mut resp = DescribeTopicPartitionsResponse::default();
    for name in &topics {
        if remaining == 0 {
            // The limit was reached exactly at the previous topic's end.
            resp.next_cursor = Some(cursor(name, 0));
            break;
        }
        let start = if *name == cursor_topic {
            cursor_partition
        } else {
            0
        };
        match image.topic(name).filter(|_| name != METADATA_TOPIC) {
            Some(t) => {
                let (partitions, next) = partitions(broker, t, start, remaining);
                remaining -= partitions.len() as i32;
                let mut out = DescribeTopicPartitionsResponseTopic::default();
                out.name = Some(topic_name(name));
                out.topic_id = t.id;
                out.is_internal = is_internal(name);
                out.partitions = partitions;
                out.topic_authorized_operations = TOPIC_OPS;
                resp.topics.push(out);
                if let Some(next) = next {
                    resp.next_cursor = Some(cursor(name, next));
                    break;
                }
            }
            None if !all_topics => {
                let code = match validate_topic_name(name) {
                    Ok(()) => ResponseError::UnknownTopicOrPartition,
                    Err(_) => ResponseError::InvalidTopicException,
                };
                let mut out = DescribeTopicPartitionsResponseTopic::default();
                out.error_code = code.code();
                out.name = Some(topic_name(name));
                out.is_internal = is_internal(name);
                out.topic_authorized_operations = TOPIC_OPS;
                resp.topics.push(out);
            }
            None => {}
        }
    }
    resp
}

fn cursor(topic: &str, partition: i32) -> Cursor {
    let mut c = Cursor::default();
    c.topic_name = topic_name(topic);
    c.partition_index = partition;
    c
}

/// Partitions `start..` of a topic, at most `max`; and the first partition
/// left out when the limit cut the topic.
fn partitions(
    broker: &Broker,
    t: &TopicImage,
    start: i32,
    max: i32,
) -> (Vec<DescribeTopicPartitionsResponsePartition>, Option<i32>) {
    let count = t.partitions.len() as i32;
    let upper = count.min(start.saturating_add(max));
    let next = (upper < count).then_some(upper);
    let out = t
        .partitions
        .range(start..upper.max(start))
        .map(|(&index, p)| {
            let mut out = DescribeTopicPartitionsResponsePartition::default();
            out.partition_index = index;
            out.leader_id = BrokerId(p.leader);
            out.leader_epoch = p.leader_epoch;
            out.replica_nodes = p.replicas.iter().map(|&r| BrokerId(r)).collect();
            out.isr_nodes = p.isr.iter().map(|&r| BrokerId(r)).collect();
            out.eligible_leader_replicas = Some(Vec::new());
            out.last_known_elr = Some(Vec::new());
            // A replica whose log is offline (its folder failed) is listed
            // offline; Kafka leaves the partition error at NONE. This node
            // knows its own replica's folder only.
            let online = broker
                .logs
                .get(&sluice_storage::TopicPartition::new(t.name.clone(), index))
                .is_none_or(|l| !l.is_offline());
            if !online {
                out.offline_replicas = vec![BrokerId(broker.node_id)];
            }
            out
        })
        .collect();
    (out, next)
}

/// Kafka's `DescribeTopicPartitionsRequest.getErrorResponse`: every
/// requested topic with `error`, nothing else.
fn error_response(
    req: &DescribeTopicPartitionsRequest,
    error: ResponseError,
) -> DescribeTopicPartitionsResponse {
    let mut resp = DescribeTopicPartitionsResponse::default();
    resp.topics = req
        .topics
        .iter()
        .map(|t| {
            let mut out = DescribeTopicPartitionsResponseTopic::default();
            out.error_code = error.code();
            out.name = Some(t.name.clone());
            out
        })
        .collect();
    resp
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::describe_topic_partitions_request::{
        Cursor as RequestCursor, TopicRequest,
    };
    use proto_kafka::messages::ApiKey;

    use super::*;
    use crate::handlers::test_support::{ctx, open_broker, roundtrip};

    fn request(
        topics: &[&str],
        limit: i32,
        cursor: Option<(&str, i32)>,
    ) -> DescribeTopicPartitionsRequest {
        let mut r = DescribeTopicPartitionsRequest::default();
        r.topics = topics
            .iter()
            .map(|n| {
                let mut t = TopicRequest::default();
                t.name = topic_name(n);
                t
            })
            .collect();
        r.response_partition_limit = limit;
        r.cursor = cursor.map(|(t, p)| {
            let mut c = RequestCursor::default();
            c.topic_name = topic_name(t);
            c.partition_index = p;
            c
        });
        r
    }

    fn call(
        broker: &Arc<Broker>,
        req: DescribeTopicPartitionsRequest,
    ) -> DescribeTopicPartitionsResponse {
        let req = roundtrip(&req, 0);
        roundtrip(
            &handle(broker, req, &ctx(ApiKey::DescribeTopicPartitions, 0)),
            0,
        )
    }

    /// `(name, error, partition indexes)` per topic, and the cursor.
    type Summary = (Vec<(String, i16, Vec<i32>)>, Option<(String, i32)>);

    fn summary(resp: &DescribeTopicPartitionsResponse) -> Summary {
        (
            resp.topics
                .iter()
                .map(|t| {
                    (
                        t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default(),
                        t.error_code,
                        t.partitions.iter().map(|p| p.partition_index).collect(),
                    )
                })
                .collect(),
            resp.next_cursor
                .as_ref()
                .map(|c| (c.topic_name.0.to_string(), c.partition_index)),
        )
    }

    fn s(name: &str, error: i16, parts: &[i32]) -> (String, i16, Vec<i32>) {
        (name.to_string(), error, parts.to_vec())
    }

    fn broker_with_topics(dir: &std::path::Path, overrides: &[(&str, &str)]) -> Arc<Broker> {
        let broker = open_broker(dir, overrides);
        broker
            .create_topic("b", 3, 1, &[], false)
            .expect("create b");
        broker
            .create_topic("a", 2, 1, &[], false)
            .expect("create a");
        broker
            .create_topic("c", 1, 1, &[], false)
            .expect("create c");
        broker
    }

    #[test]
    fn whole_response_for_one_topic() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = broker_with_topics(dir.path(), &[]);
        let id = broker.image().topic("a").expect("a").id;
        let resp = call(&broker, request(&["a"], 2000, None));
        let mut expected = DescribeTopicPartitionsResponse::default();
        let mut t = DescribeTopicPartitionsResponseTopic::default();
        t.name = Some(topic_name("a"));
        t.topic_id = id;
        t.topic_authorized_operations = 3576;
        t.partitions = (0..2)
            .map(|i| {
                let mut p = DescribeTopicPartitionsResponsePartition::default();
                p.partition_index = i;
                p.leader_id = BrokerId(1);
                p.leader_epoch = 0;
                p.replica_nodes = vec![BrokerId(1)];
                p.isr_nodes = vec![BrokerId(1)];
                p.eligible_leader_replicas = Some(vec![]);
                p.last_known_elr = Some(vec![]);
                p
            })
            .collect();
        expected.topics = vec![t];
        assert_eq!(resp, expected);
    }

    #[test]
    fn sorted_deduplicated_with_errors_for_unknown_and_illegal_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = broker_with_topics(dir.path(), &[]);
        let resp = call(
            &broker,
            request(&["c", "zz", "a", "c", "bad/name"], 2000, None),
        );
        let unknown = ResponseError::UnknownTopicOrPartition.code();
        let illegal = ResponseError::InvalidTopicException.code();
        assert_eq!(
            summary(&resp),
            (
                vec![
                    s("a", 0, &[0, 1]),
                    s("bad/name", illegal, &[]),
                    s("c", 0, &[0]),
                    s("zz", unknown, &[])
                ],
                None
            )
        );
        let zz = &resp.topics[3];
        assert_eq!(zz.topic_id, uuid::Uuid::nil());
        // Listing all topics (an empty list) answers only existing ones,
        // internal ones flagged.
        broker.ensure_offsets_topic(1).expect("offsets topic");
        let resp = call(&broker, request(&[], 2000, None));
        let names: Vec<(String, bool)> = resp
            .topics
            .iter()
            .map(|t| (t.name.as_ref().expect("name").0.to_string(), t.is_internal))
            .collect();
        assert_eq!(
            names,
            vec![
                ("__consumer_offsets".to_string(), true),
                ("a".to_string(), false),
                ("b".to_string(), false),
                ("c".to_string(), false),
            ]
        );
    }

    #[test]
    fn pagination_with_cursors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = broker_with_topics(dir.path(), &[]);
        // a: 0-1, b: 0-2, c: 0. Two partitions a page.
        let page = |cursor: Option<(&str, i32)>| summary(&call(&broker, request(&[], 2, cursor)));
        assert_eq!(
            page(None),
            (vec![s("a", 0, &[0, 1])], Some(("b".into(), 0)))
        );
        assert_eq!(
            page(Some(("b", 0))),
            (vec![s("b", 0, &[0, 1])], Some(("b".into(), 2)))
        );
        assert_eq!(
            page(Some(("b", 2))),
            (vec![s("b", 0, &[2]), s("c", 0, &[0])], None)
        );
        // Three a page: the limit cuts b after one partition.
        let resp = summary(&call(&broker, request(&["a", "b", "c"], 3, None)));
        assert_eq!(
            resp,
            (
                vec![s("a", 0, &[0, 1]), s("b", 0, &[0])],
                Some(("b".into(), 1))
            )
        );
        // A cursor past a topic's partitions answers it without partitions.
        let resp = summary(&call(&broker, request(&["a", "c"], 10, Some(("a", 5)))));
        assert_eq!(resp, (vec![s("a", 0, &[]), s("c", 0, &[0])], None));
        // A limit below one counts as one.
        let resp = summary(&call(&broker, request(&["c", "a"], 0, None)));
        assert_eq!(resp, (vec![s("a", 0, &[0])], Some(("a".into(), 1))));
        // An unknown topic still takes its turn but no partitions.
        let resp = summary(&call(&broker, request(&["a", "aa", "c"], 2, None)));
        let unknown = ResponseError::UnknownTopicOrPartition.code();
        assert_eq!(resp, (vec![s("a", 0, &[0, 1])], Some(("aa".into(), 0))));
        let resp = summary(&call(
            &broker,
            request(&["a", "aa", "c"], 2, Some(("aa", 0))),
        ));
        assert_eq!(resp, (vec![s("aa", unknown, &[]), s("c", 0, &[0])], None));
    }

    #[test]
    fn broker_limit_caps_the_request_limit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = broker_with_topics(dir.path(), &[("max.request.partition.size.limit", "1")]);
        let resp = summary(&call(&broker, request(&["b"], 2000, None)));
        assert_eq!(resp, (vec![s("b", 0, &[0])], Some(("b".into(), 1))));
    }

    #[test]
    fn bad_cursors_fail_the_whole_request() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = broker_with_topics(dir.path(), &[]);
        let invalid = ResponseError::InvalidRequest.code();
        // The cursor's topic is not in the list.
        let resp = call(&broker, request(&["a", "c"], 10, Some(("b", 0))));
        let mut expected = DescribeTopicPartitionsResponse::default();
        expected.topics = ["a", "c"]
            .iter()
            .map(|n| {
                let mut t = DescribeTopicPartitionsResponseTopic::default();
                t.error_code = invalid;
                t.name = Some(topic_name(n));
                t
            })
            .collect();
        assert_eq!(resp, expected);
        // A negative cursor partition.
        let resp = summary(&call(&broker, request(&["a"], 10, Some(("a", -1)))));
        assert_eq!(resp, (vec![s("a", invalid, &[])], None));
        // With an empty list the error response has no topics.
        let resp = summary(&call(&broker, request(&[], 10, Some(("a", -1)))));
        assert_eq!(resp, (vec![], None));
    }
}
