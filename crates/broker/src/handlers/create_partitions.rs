//! CreatePartitions (key 37): raise a topic's partition count. The new
//! partitions are recorded in the metadata log and their logs created with
//! the topic's config. Errors as Kafka's controller gives them: a count that
//! is not an increase is INVALID_PARTITIONS, a manual assignment that does
//! not place exactly one replica on this node per new partition is
//! INVALID_REPLICA_ASSIGNMENT, a topic named twice is INVALID_REQUEST.
//! `validate_only` checks without creating.
//!
//! A request that would add more than 10,000 partitions in all is refused
//! whole with POLICY_VIOLATION before anything is built (design 007: the
//! limit KRaft applies to CreateTopics; Kafka 4.x lets such a
//! CreatePartitions overflow its controller batch, answering
//! UNKNOWN_SERVER_ERROR).

use std::collections::HashMap;
use std::sync::Arc;

use proto_kafka::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsTopic,
};
use proto_kafka::messages::create_partitions_response::CreatePartitionsTopicResult;
use proto_kafka::messages::{CreatePartitionsRequest, CreatePartitionsResponse};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;

use super::Ctx;
use crate::broker::{ApiError, Broker};
use crate::limits::{MAX_PARTITIONS_PER_REQUEST, TOO_MANY_PARTITIONS};

pub(crate) const VERSIONS: (i16, i16) = (0, 3);

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: CreatePartitionsRequest,
    _ctx: &Ctx,
) -> CreatePartitionsResponse {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for t in &req.topics {
        *seen.entry(t.name.0.to_string()).or_default() += 1;
    }
    if new_partitions(broker, &req.topics, &seen) > MAX_PARTITIONS_PER_REQUEST {
        return refuse_all(&req);
    }
    let mut resp = CreatePartitionsResponse::default();
    let mut reported_dupes = Vec::new();
    for t in &req.topics {
        let name = t.name.0.to_string();
        let result = if seen.get(&name).copied().unwrap_or(0) > 1 {
            if reported_dupes.contains(&name) {
                continue;
            }
            reported_dupes.push(name.clone());
            Err(ApiError::new(
                ResponseError::InvalidRequest,
                "Duplicate topic in request.",
            ))
        } else {
            create(broker, t, req.validate_only)
        };
        let mut r = CreatePartitionsTopicResult::default();
        r.name = t.name.clone();
        r.error_message = None;
        if let Err(e) = result {
            r.error_code = e.code.code();
            r.error_message = e.message.map(StrBytes::from_string);
        }
        resp.results.push(r);
    }
    resp
}

/// Partitions the request would add: for each topic named once that
/// exists, the increase it asks for.
fn new_partitions(
    broker: &Broker,
    topics: &[CreatePartitionsTopic],
    seen: &HashMap<String, usize>,
) -> i64 {
    let image = broker.image();
    topics
        .iter()
        .filter(|t| seen.get(t.name.0.as_str()) == Some(&1))
        .filter_map(|t| {
            let current = image.topic(t.name.0.as_str())?.partitions.len() as i64;
            Some((i64::from(t.count) - current).max(0))
        })
        .sum()
}

/// Every topic named gets POLICY_VIOLATION (the whole request is refused,
/// as KRaft refuses an oversized CreateTopics).
fn refuse_all(req: &CreatePartitionsRequest) -> CreatePartitionsResponse {
    tracing::info!(
        topics = req.topics.len(),
        validate_only = req.validate_only,
        "refusing CreatePartitions: {TOO_MANY_PARTITIONS}"
    );
    let mut resp = CreatePartitionsResponse::default();
    resp.results = req
        .topics
        .iter()
        .map(|t| {
            let mut r = CreatePartitionsTopicResult::default();
            r.name = t.name.clone();
            r.error_code = ResponseError::PolicyViolation.code();
            r.error_message = Some(StrBytes::from_static_str(TOO_MANY_PARTITIONS));
            r
        })
        .collect();
    resp
}

fn create(broker: &Broker, t: &CreatePartitionsTopic, validate_only: bool) -> Result<(), ApiError> {
    let name = t.name.0.as_str();
    let Some(topic) = broker.image().topic(name).cloned() else {
        return Err(ApiError::code(ResponseError::UnknownTopicOrPartition));
    };
    let current = topic.partitions.len() as i32;
    if t.count == current {
        return Err(ApiError::new(
            ResponseError::InvalidPartitions,
            format!("Topic already has {current} partition(s)."),
        ));
    }
    if t.count < current {
        return Err(ApiError::new(
            ResponseError::InvalidPartitions,
            format!(
                "The topic {name} currently has {current} partition(s); {} would not be an increase.",
                t.count
            ),
        ));
    }
    if let Some(assignments) = &t.assignments {
        check_assignments(broker.node_id, i64::from(t.count - current), assignments)?;
    }
    broker.add_partitions(name, t.count, validate_only)
}

/// A manual assignment: one replica list per new partition, each naming
/// only this node, once (the topic's replication factor is 1).
fn check_assignments(
    node_id: i32,
    adding: i64,
    assignments: &[CreatePartitionsAssignment],
) -> Result<(), ApiError> {
    let bad = |m: String| Err(ApiError::new(ResponseError::InvalidReplicaAssignment, m));
    if assignments.len() as i64 != adding {
        return bad(format!(
            "Attempted to add {adding} additional partition(s), but only {} assignment(s) were specified.",
            assignments.len()
        ));
    }
    for a in assignments {
        if a.broker_ids.is_empty() {
            return bad("The manual partition assignment includes an empty replica list.".into());
        }
        let mut seen = Vec::new();
        for id in &a.broker_ids {
            if id.0 != node_id {
                return bad(format!(
                    "The manual partition assignment includes broker {}, but no such broker is registered.",
                    id.0
                ));
            }
            if seen.contains(&id.0) {
                return bad(format!(
                    "The manual partition assignment includes the broker {} more than once.",
                    id.0
                ));
            }
            seen.push(id.0);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::{ApiKey, BrokerId, TopicName};

    use super::super::test_support::{ctx, open_broker, roundtrip};
    use super::*;

    fn topic(name: &str, count: i32, assignments: Option<Vec<Vec<i32>>>) -> CreatePartitionsTopic {
        let mut t = CreatePartitionsTopic::default();
        t.name = TopicName(StrBytes::from_string(name.to_string()));
        t.count = count;
        t.assignments = assignments.map(|a| {
            a.into_iter()
                .map(|ids| {
                    let mut x = CreatePartitionsAssignment::default();
                    x.broker_ids = ids.into_iter().map(BrokerId).collect();
                    x
                })
                .collect()
        });
        t
    }

    #[test]
    fn increases_and_kafkas_errors_in_every_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        for v in VERSIONS.0..=VERSIONS.1 {
            let name = format!("t{v}");
            broker
                .create_topic(&name, 2, 1, &[], false)
                .expect("create");
            let mut req = CreatePartitionsRequest::default();
            req.topics = vec![
                topic(&name, 4, None),
                topic("dup", 3, None),
                topic("dup", 3, None),
                topic("missing", 3, None),
            ];
            let resp = roundtrip(&handle(&broker, req, &ctx(ApiKey::CreatePartitions, v)), v);
            let codes: Vec<i16> = resp.results.iter().map(|r| r.error_code).collect();
            assert_eq!(
                codes,
                vec![
                    0,
                    ResponseError::InvalidRequest.code(),
                    ResponseError::UnknownTopicOrPartition.code()
                ]
            );
            assert_eq!(broker.image().topic(&name).expect("t").partitions.len(), 4);
            assert!(broker.log(&name, 3).is_some());

            let mut req = CreatePartitionsRequest::default();
            req.validate_only = true;
            req.topics = vec![
                topic(&name, 4, None),
                topic(&name, 3, None),
                topic(&name, 6, Some(vec![vec![1]])),
                topic(&name, 5, Some(vec![vec![2]])),
                topic(&name, 5, Some(vec![vec![1, 1]])),
                topic(&name, 6, Some(vec![vec![1], vec![1]])),
            ];
            // Duplicates are refused whole; ask one by one.
            let mut got = Vec::new();
            for t in req.topics.clone() {
                let mut one = CreatePartitionsRequest::default();
                one.validate_only = true;
                one.topics = vec![t];
                let r = handle(&broker, one, &ctx(ApiKey::CreatePartitions, v));
                got.push((
                    r.results[0].error_code,
                    r.results[0].error_message.as_ref().map(|m| m.to_string()),
                ));
            }
            assert_eq!(got[0].0, ResponseError::InvalidPartitions.code());
            assert_eq!(
                got[0].1.as_deref(),
                Some("Topic already has 4 partition(s).")
            );
            assert_eq!(
                got[1].1.as_deref(),
                Some(format!("The topic {name} currently has 4 partition(s); 3 would not be an increase.").as_str())
            );
            assert_eq!(got[2].0, ResponseError::InvalidReplicaAssignment.code());
            assert_eq!(got[3].0, ResponseError::InvalidReplicaAssignment.code());
            assert_eq!(got[4].0, ResponseError::InvalidReplicaAssignment.code());
            assert_eq!(got[5].0, 0);
            // validate_only created nothing.
            assert_eq!(broker.image().topic(&name).expect("t").partitions.len(), 4);
        }
        broker.shutdown().expect("shutdown");
    }

    #[test]
    fn more_than_10000_new_partitions_are_refused_whole_in_every_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        broker.create_topic("a", 1, 1, &[], false).expect("create");
        broker.create_topic("b", 1, 1, &[], false).expect("create");
        let policy = (
            ResponseError::PolicyViolation.code(),
            Some(TOO_MANY_PARTITIONS.to_string()),
        );
        for v in VERSIONS.0..=VERSIONS.1 {
            for validate_only in [false, true] {
                for topics in [
                    vec![topic("a", 10_002, None)],
                    vec![topic("a", 20_000, None), topic("missing", 3, None)],
                    vec![topic("a", i32::MAX, None), topic("b", i32::MAX, None)],
                    vec![topic("a", 5_002, None), topic("b", 5_001, None)],
                ] {
                    let n = topics.len();
                    let mut req = CreatePartitionsRequest::default();
                    req.validate_only = validate_only;
                    req.topics = topics;
                    let resp =
                        roundtrip(&handle(&broker, req, &ctx(ApiKey::CreatePartitions, v)), v);
                    let got: Vec<_> = resp
                        .results
                        .iter()
                        .map(|r| {
                            (
                                r.error_code,
                                r.error_message.as_ref().map(|m| m.to_string()),
                            )
                        })
                        .collect();
                    assert_eq!(got, vec![policy.clone(); n], "v{v}");
                }
                // A topic named twice is refused by name, not counted.
                let mut req = CreatePartitionsRequest::default();
                req.validate_only = validate_only;
                req.topics = vec![topic("b", 20_000, None), topic("b", 20_000, None)];
                let resp = handle(&broker, req, &ctx(ApiKey::CreatePartitions, v));
                assert_eq!(resp.results.len(), 1);
                assert_eq!(
                    resp.results[0].error_code,
                    ResponseError::InvalidRequest.code()
                );
            }
            // Exactly 10,000 new partitions may be added (validated only).
            let mut req = CreatePartitionsRequest::default();
            req.validate_only = true;
            req.topics = vec![topic("a", 10_001, None)];
            let resp = handle(&broker, req, &ctx(ApiKey::CreatePartitions, v));
            assert_eq!(resp.results[0].error_code, 0, "v{v}");
        }
        for name in ["a", "b"] {
            assert_eq!(broker.image().topic(name).expect("t").partitions.len(), 1);
            assert!(broker.log(name, 1).is_none());
        }
        broker.shutdown().expect("shutdown");
    }
}
