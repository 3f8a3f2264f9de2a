//! AlterPartitionReassignments (key 45, `kafka-reassign-partitions.sh
//! --execute`, `Admin.alterPartitionReassignments`): moves partitions to
//! new replica sets, or cancels a move (null replicas), as Kafka's
//! controller does (`ReplicationControlManager.alterPartitionReassignments`;
//! the rules in `sluice_controller::reassignment`). The changes of one
//! request are committed through the metadata quorum (forwarded to its
//! leader) in one batch; every node follows: a new replica creates its
//! log and fetches from the leader, and once every target replica is in
//! the ISR the leader's ISR change completes the reassignment (removed
//! replicas leave, a removed leader hands over, their logs are deleted by
//! the committed change).
//!
//! Per partition: NONE; UNKNOWN_TOPIC_OR_PARTITION; INVALID_REPLICA_ASSIGNMENT
//! (empty list, a broker twice, an unregistered broker, a cancellation that
//! needs an unclean election); NO_REASSIGNMENT_IN_PROGRESS (a cancellation
//! of nothing). A failed commit answers NOT_CONTROLLER (no quorum leader)
//! or UNKNOWN_SERVER_ERROR for every partition that had none. More than
//! 10,000 partitions in one request: POLICY_VIOLATION at the top level,
//! before anything is looked at. `timeout_ms` is not waited on: the answer
//! comes once the change is committed, as Kafka's controller answers.

use std::sync::Arc;

use proto_kafka::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use proto_kafka::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse,
};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;
use sluice_controller::reassignment::{self, ReassignError};
use sluice_controller::{ControllerError, MetadataRecord};

use super::Ctx;
use crate::broker::Broker;
use crate::limits::MAX_PARTITIONS_PER_REQUEST;

pub(crate) const VERSIONS: (i16, i16) = (0, 0);

/// Attempts when the quorum refuses the batch because a partition moved on
/// meanwhile (an ISR change committed between reading and proposing).
const ATTEMPTS: usize = 5;

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: AlterPartitionReassignmentsRequest,
    _ctx: &Ctx,
) -> AlterPartitionReassignmentsResponse {
    let mut resp = AlterPartitionReassignmentsResponse::default();
    let count: usize = req.topics.iter().map(|t| t.partitions.len()).sum();
    if count as i64 > MAX_PARTITIONS_PER_REQUEST {
        resp.error_code = ResponseError::PolicyViolation.code();
        resp.error_message = Some(StrBytes::from_string(format!(
            "More than {MAX_PARTITIONS_PER_REQUEST} partitions in one request."
        )));
        return resp;
    }
    let wanted: Vec<Wanted> = req
        .topics
        .into_iter()
        .map(|t| {
            (
                t.name.0.to_string(),
                t.partitions
                    .into_iter()
                    .map(|p| {
                        (
                            p.partition_index,
                            p.replicas.map(|r| r.into_iter().map(|b| b.0).collect()),
                        )
                    })
                    .collect(),
            )
        })
        .collect();
    let mut attempt = 0;
    let (outcomes, failed) = loop {
        attempt += 1;
        let (outcomes, records, committed) = decide_and_commit(broker, &wanted);
        match committed {
            Err(ControllerError::Conflict(m)) if attempt < ATTEMPTS => {
                tracing::debug!(error = %m, "reassignment raced another change; retrying");
            }
            Err(e) => {
                tracing::warn!(error = %e, "reassignments not committed");
                let code = match e {
                    ControllerError::NotController(_) => ResponseError::NotController,
                    _ => ResponseError::UnknownServerError,
                };
                break (outcomes, Some((code.code(), e.to_string())));
            }
            Ok(()) => {
                if !records.is_empty() {
                    tracing::info!(
                        partitions = records.len(),
                        "partition reassignments committed"
                    );
                    broker.sync_partitions();
                }
                break (outcomes, None);
            }
        }
    };
    resp.responses = outcomes
        .into_iter()
        .map(|(topic, per)| {
            let mut t = ReassignableTopicResponse::default();
            t.name = proto_kafka::messages::TopicName(StrBytes::from_string(topic));
            t.partitions = per
                .into_iter()
                .map(|(p, outcome)| {
                    let (code, message) = match outcome {
                        Ok(()) => match &failed {
                            Some((code, m)) => (*code, Some(m.clone())),
                            None => (0, None),
                        },
                        Err(ReassignError::UnknownTopicOrPartition(m)) => {
                            (ResponseError::UnknownTopicOrPartition.code(), Some(m))
                        }
                        Err(ReassignError::InvalidReplicaAssignment(m)) => {
                            (ResponseError::InvalidReplicaAssignment.code(), Some(m))
                        }
                        Err(ReassignError::NoReassignmentInProgress) => (
                            ResponseError::NoReassignmentInProgress.code(),
                            Some("No partition reassignment is in progress for this topic-partition.".to_string()),
                        ),
                    };
                    let mut r = ReassignablePartitionResponse::default();
                    r.partition_index = p;
                    r.error_code = code;
                    r.error_message = message.map(StrBytes::from_string);
                    r
                })
                .collect();
            t
        })
        .collect();
    resp
}

/// One topic of the request: its partitions and their target replicas
/// (`None`: cancel).
type Wanted = (String, Vec<(i32, Option<Vec<i32>>)>);

type Outcomes = Vec<(String, Vec<(i32, Result<(), ReassignError>)>)>;

/// Decides every partition's change on the current image (each one seeing
/// the ones before it) and commits them in one batch, under the change
/// lock so no change of this node slips in between.
fn decide_and_commit(
    broker: &Arc<Broker>,
    wanted: &[Wanted],
) -> (Outcomes, Vec<MetadataRecord>, Result<(), ControllerError>) {
    let _guard = broker.metadata.lock_for_change();
    let mut image = (*broker.image()).clone();
    let node_id = broker.node_id;
    let mut records = Vec::new();
    let mut outcomes = Vec::new();
    for (topic, partitions) in wanted {
        let hidden = crate::internal_topics::is_hidden(topic);
        // As the quorum leader's elections decide it: the topic config,
        // the cluster-wide dynamic default, the static one.
        let unclean = image.topic(topic).is_some_and(|t| {
            sluice_controller::election::unclean_enabled(
                &image,
                t,
                broker.config.bool("unclean.leader.election.enable"),
            )
        });
        let per = partitions
            .iter()
            .map(|(p, target)| {
                if hidden {
                    return (
                        *p,
                        Err(ReassignError::UnknownTopicOrPartition(format!(
                            "Unable to find a topic named {topic}."
                        ))),
                    );
                }
                let registered = |id: i32| id == node_id || image.broker(id).is_some();
                let lead = |id: i32| {
                    reassignment::may_lead(&image, id)
                        || (id == node_id && image.broker(id).is_none())
                };
                let change = reassignment::alter(
                    &image,
                    topic,
                    *p,
                    target.as_deref(),
                    registered,
                    lead,
                    unclean,
                );
                let outcome = match change {
                    Ok(Some(r)) => {
                        image.apply(&r);
                        records.push(r);
                        Ok(())
                    }
                    Ok(None) => Ok(()),
                    Err(e) => Err(e),
                };
                (*p, outcome)
            })
            .collect();
        outcomes.push((topic.clone(), per));
    }
    let committed = if records.is_empty() {
        Ok(())
    } else {
        broker.metadata.append(&records).map(|_| ())
    };
    (outcomes, records, committed)
}
