//! CreatePartitions (key 37): raise a topic's partition count. The new
//! partitions are recorded in the metadata log and their logs created with
//! the topic's config. Errors as Kafka's controller gives them: a count that
//! is not an increase is INVALID_PARTITIONS, a manual assignment that does
//! not place exactly one replica on this node per new partition is
//! INVALID_REPLICA_ASSIGNMENT, a topic named twice is INVALID_REQUEST.
//! `validate_only` checks without creating.

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
}
