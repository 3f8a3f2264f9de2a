//! OffsetDelete (key 47): remove committed offsets of a group. As Kafka
//! (`KafkaApis.handleOffsetDeleteRequest`,
//! `OffsetMetadataManager.deleteOffsets`, `ClassicGroup.validateOffsetDelete`):
//!
//! - group-level errors (top level, no topics in the response):
//!   INVALID_GROUP_ID for an empty id, GROUP_ID_NOT_FOUND when the group
//!   does not exist or is Dead, NON_EMPTY_GROUP when the group has members
//!   and does not use the consumer protocol, COORDINATOR_LOAD_IN_PROGRESS;
//! - an Empty group may delete any offset; a consumer group with members
//!   may delete offsets of topics none of its members subscribes to, the
//!   others fail with GROUP_SUBSCRIBED_TO_TOPIC;
//! - topics the broker does not have are UNKNOWN_TOPIC_OR_PARTITION;
//! - partitions without a commit succeed; the others are deleted by
//!   tombstones appended to `__consumer_offsets` before the answer.

use std::sync::Arc;

use proto_kafka::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use proto_kafka::messages::{OffsetDeleteRequest, OffsetDeleteResponse};
use proto_kafka::ResponseError;
use sluice_coordinator::group::GroupState;
use sluice_coordinator::offsets::TopicPartitions;

use super::offset_commit::{append_error, partition_error};
use super::Ctx;
use crate::broker::Broker;
use crate::groups::{lock, now_ms, subscribed_topics, CommitPoint};

pub(crate) const VERSIONS: (i16, i16) = (0, 0);

pub(crate) async fn handle(
    broker: &Arc<Broker>,
    req: OffsetDeleteRequest,
    _ctx: &Ctx,
) -> OffsetDeleteResponse {
    let mut resp = OffsetDeleteResponse::default();
    let group = req.group_id.0.to_string();
    if group.is_empty() {
        resp.error_code = ResponseError::InvalidGroupId.code();
        return resp;
    }
    let image = broker.image();
    let mut unknown = Vec::new();
    let mut known = Vec::new();
    for t in &req.topics {
        let name = t.name.0.to_string();
        let partitions: Vec<i32> = t.partitions.iter().map(|p| p.partition_index).collect();
        if image.topic(&name).is_some() {
            known.push(TopicPartitions {
                topic: name,
                partitions,
            });
        } else {
            unknown.push((t.name.clone(), partitions));
        }
    }
    let (mut results, point) = match delete(broker, &group, &known) {
        Ok(r) => r,
        Err(code) => {
            resp.error_code = code;
            return resp;
        }
    };
    // The deletions are answered once replicated (Kafka's coordinator
    // answers after its write commits).
    let codes = results.iter_mut().map(|(_, _, code)| code);
    broker.groups.answer_when_committed(point, codes).await;
    for (name, partitions) in unknown {
        let mut rt = OffsetDeleteResponseTopic::default();
        rt.name = name;
        rt.partitions = partitions
            .into_iter()
            .map(|p| partition(p, ResponseError::UnknownTopicOrPartition.code()))
            .collect();
        resp.topics.push(rt);
    }
    for (topic, p, code) in results {
        match resp.topics.iter_mut().find(|t| t.name.0.as_str() == topic) {
            Some(rt) => rt.partitions.push(partition(p, code)),
            None => {
                let mut rt = OffsetDeleteResponseTopic::default();
                rt.name = proto_kafka::messages::TopicName(
                    proto_kafka::protocol::StrBytes::from_string(topic),
                );
                rt.partitions.push(partition(p, code));
                resp.topics.push(rt);
            }
        }
    }
    resp
}

fn partition(index: i32, code: i16) -> OffsetDeleteResponsePartition {
    let mut p = OffsetDeleteResponsePartition::default();
    p.partition_index = index;
    p.error_code = code;
    p
}

/// Per-partition (topic, partition, error code) and where the tombstones
/// must be replicated to (none written: `None`), or a group-level error.
#[allow(clippy::type_complexity)]
fn delete(
    broker: &Broker,
    group: &str,
    topics: &[TopicPartitions],
) -> Result<(Vec<(String, i32, i16)>, Option<CommitPoint>), i16> {
    let shard = broker
        .groups
        .shard(broker, group)
        .map_err(|e| e.code.code())?;
    let mut shard = lock(&shard);
    if shard.groups.is_loading() {
        return Err(ResponseError::CoordinatorLoadInProgress.code());
    }
    let (Some(state), Some(snapshot)) = (
        shard.groups.group_state(group),
        shard.groups.snapshot(group),
    ) else {
        return Err(ResponseError::GroupIdNotFound.code());
    };
    match state {
        GroupState::Dead => return Err(ResponseError::GroupIdNotFound.code()),
        GroupState::Empty => {}
        _ if snapshot.protocol_type != "consumer" => {
            return Err(ResponseError::NonEmptyGroup.code())
        }
        _ => {}
    }
    let subscribed = subscribed_topics(&snapshot);
    let outcome = shard.offsets.delete_offsets(group, topics, |t| {
        subscribed.as_ref().is_some_and(|s| s.contains(t))
    });
    let appended = broker
        .groups
        .commit_records(&mut shard, &outcome.records)
        .map_err(|e| append_error(&e));
    if let Err(code) = appended {
        tracing::warn!(group, code, "OffsetDelete append failed");
        return Err(code);
    }
    tracing::debug!(
        group,
        deleted = outcome.records.len(),
        at = now_ms(),
        "OffsetDelete"
    );
    let point = (!outcome.records.is_empty()).then(|| shard.commit_point());
    let results = outcome
        .results
        .into_iter()
        .map(|r| {
            let code = match &r.result {
                Ok(()) => 0,
                Err(e) => partition_error(e),
            };
            (r.topic, r.partition, code)
        })
        .collect();
    Ok((results, point))
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::offset_delete_request::{
        OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
    };
    use proto_kafka::messages::{ApiKey, GroupId, TopicName};
    use proto_kafka::protocol::StrBytes;

    use super::super::offset_commit;
    use super::super::test_support::{block_on, ctx, open_broker, roundtrip};
    use super::*;

    fn request(group: &str, topics: &[(&str, &[i32])]) -> OffsetDeleteRequest {
        let mut req = OffsetDeleteRequest::default();
        req.group_id = GroupId(StrBytes::from_string(group.into()));
        req.topics = topics
            .iter()
            .map(|(t, ps)| {
                let mut rt = OffsetDeleteRequestTopic::default();
                rt.name = TopicName(StrBytes::from_string((*t).into()));
                rt.partitions = ps
                    .iter()
                    .map(|p| {
                        let mut rp = OffsetDeleteRequestPartition::default();
                        rp.partition_index = *p;
                        rp
                    })
                    .collect();
                rt
            })
            .collect();
        req
    }

    fn codes(resp: &OffsetDeleteResponse) -> (i16, Vec<(String, i32, i16)>) {
        let rows = resp
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.name.0.to_string(), p.partition_index, p.error_code))
            })
            .collect();
        (resp.error_code, rows)
    }

    #[test]
    fn deletes_offsets_of_an_empty_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[("offsets.topic.num.partitions", "2")]);
        broker.create_topic("t", 2, 1, &[], false).expect("create");
        let req =
            offset_commit::tests::request("g", -1, "", &[("t", 0, 3, None), ("t", 1, 4, None)]);
        offset_commit::respond(&broker, req, &ctx(ApiKey::OffsetCommit, 9));
        let resp = roundtrip(
            &block_on(handle(
                &broker,
                request("g", &[("t", &[0, 7]), ("nope", &[0])]),
                &ctx(ApiKey::OffsetDelete, 0),
            )),
            0,
        );
        let mut rows = codes(&resp).1;
        rows.sort();
        assert_eq!(codes(&resp).0, 0);
        assert_eq!(
            rows,
            vec![
                (
                    "nope".into(),
                    0,
                    ResponseError::UnknownTopicOrPartition.code()
                ),
                ("t".into(), 0, 0),
                ("t".into(), 7, 0),
            ]
        );
        let shard = broker.groups.shard(&broker, "g").expect("shard");
        let shard = lock(&shard);
        assert!(shard.offsets.offset("g", "t", 0).is_none());
        assert!(shard.offsets.offset("g", "t", 1).is_some());
        drop(shard);
        // Group-level errors.
        let resp = block_on(handle(
            &broker,
            request("missing", &[("t", &[0])]),
            &ctx(ApiKey::OffsetDelete, 0),
        ));
        assert_eq!(
            codes(&resp),
            (ResponseError::GroupIdNotFound.code(), vec![])
        );
        let resp = block_on(handle(
            &broker,
            request("", &[("t", &[0])]),
            &ctx(ApiKey::OffsetDelete, 0),
        ));
        assert_eq!(codes(&resp), (ResponseError::InvalidGroupId.code(), vec![]));
        broker.shutdown().expect("shutdown");
    }

    #[test]
    fn groups_with_members() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(
            dir.path(),
            &[
                ("offsets.topic.num.partitions", "2"),
                ("group.initial.rebalance.delay.ms", "0"),
            ],
        );
        broker.create_topic("t", 1, 1, &[], false).expect("create");
        broker.create_topic("u", 1, 1, &[], false).expect("create");
        let (member, generation) =
            offset_commit::tests::stable_member(&broker, "consumer", None, &["t"]);
        let req = offset_commit::tests::request(
            "consumer",
            generation,
            &member,
            &[("t", 0, 3, None), ("u", 0, 4, None)],
        );
        offset_commit::respond(&broker, req, &ctx(ApiKey::OffsetCommit, 9));
        let resp = block_on(handle(
            &broker,
            request("consumer", &[("t", &[0]), ("u", &[0])]),
            &ctx(ApiKey::OffsetDelete, 0),
        ));
        assert_eq!(
            codes(&resp),
            (
                0,
                vec![
                    ("t".into(), 0, ResponseError::GroupSubscribedToTopic.code()),
                    ("u".into(), 0, 0)
                ]
            )
        );
        let shard = broker.groups.shard(&broker, "consumer").expect("shard");
        let shard = lock(&shard);
        assert!(shard.offsets.offset("consumer", "t", 0).is_some());
        assert!(shard.offsets.offset("consumer", "u", 0).is_none());
        drop(shard);
        // A group with members that does not use the consumer protocol.
        offset_commit::tests::stable_member_of(&broker, "connect", None, "connect", &["t"]);
        let resp = block_on(handle(
            &broker,
            request("connect", &[("t", &[0])]),
            &ctx(ApiKey::OffsetDelete, 0),
        ));
        assert_eq!(codes(&resp), (ResponseError::NonEmptyGroup.code(), vec![]));
        broker.shutdown().expect("shutdown");
    }
}
