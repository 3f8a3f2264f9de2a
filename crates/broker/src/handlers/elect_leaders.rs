//! ElectLeaders (key 43): elect the preferred replica (election type 0) or,
//! for partitions without a leader, any live replica (type 1, unclean), as
//! Kafka's controller does (`ReplicationControlManager.electLeaders`, the
//! rules in `sluice_controller::election::elect`). The changes are
//! committed through the metadata quorum (forwarded to its leader) in one
//! batch, with the next leader epoch each; every node follows.
//!
//! Per partition: NONE when elected; ELECTION_NOT_NEEDED (the preferred
//! replica leads, or unclean and there is a leader);
//! PREFERRED_LEADER_NOT_AVAILABLE; ELIGIBLE_LEADERS_NOT_AVAILABLE;
//! UNKNOWN_TOPIC_OR_PARTITION. Null `topic_partitions` means every
//! partition, and then those that need no election are left out of the
//! answer (as Kafka does). v0 has no election type (preferred); an unknown
//! type is INVALID_REQUEST. More than 10,000 partitions in one request are
//! POLICY_VIOLATION, before anything is elected.

use std::sync::Arc;

use proto_kafka::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use proto_kafka::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;
use sluice_controller::election::{elect, ElectionType, NoElection};
use sluice_controller::MetadataRecord;

use super::Ctx;
use crate::broker::Broker;
use crate::limits::MAX_PARTITIONS_PER_REQUEST;

pub(crate) const VERSIONS: (i16, i16) = (0, 2);

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: ElectLeadersRequest,
    ctx: &Ctx,
) -> ElectLeadersResponse {
    let mut resp = ElectLeadersResponse::default();
    let wire_type = if ctx.version >= 1 {
        req.election_type
    } else {
        0
    };
    let Some(kind) = ElectionType::from_wire(wire_type) else {
        resp.error_code = ResponseError::InvalidRequest.code();
        return resp;
    };
    let all = req.topic_partitions.is_none();
    let wanted: Vec<(String, Vec<i32>)> = match req.topic_partitions {
        Some(topics) => topics
            .into_iter()
            .map(|t| (t.topic.0.to_string(), t.partitions))
            .collect(),
        None => broker
            .image()
            .topics()
            .filter(|t| !crate::internal_topics::is_hidden(&t.name))
            .map(|t| (t.name.clone(), t.partitions.keys().copied().collect()))
            .collect(),
    };
    let count: usize = wanted.iter().map(|(_, ps)| ps.len()).sum();
    if count as i64 > MAX_PARTITIONS_PER_REQUEST {
        resp.replica_election_results = wanted
            .into_iter()
            .map(|(topic, ps)| {
                result(
                    topic,
                    ps.into_iter()
                        .map(|p| {
                            (
                                p,
                                ResponseError::PolicyViolation.code(),
                                Some(format!(
                                    "More than {MAX_PARTITIONS_PER_REQUEST} partitions in one request."
                                )),
                            )
                        })
                        .collect(),
                )
            })
            .collect();
        return resp;
    }
    // Decided and committed under the change lock, so no other change
    // slips in between.
    let _guard = broker.metadata.lock_for_change();
    let image = broker.image();
    let mut records: Vec<MetadataRecord> = Vec::new();
    let mut outcomes: Vec<(String, Vec<(i32, Outcome)>)> = Vec::new();
    for (topic, partitions) in wanted {
        let hidden = crate::internal_topics::is_hidden(&topic);
        let per = partitions
            .into_iter()
            .map(|p| {
                let outcome = match elect(&image, &topic, p, kind).filter(|_| !hidden) {
                    None => Outcome::Unknown,
                    Some(Ok(r)) => {
                        records.push(r);
                        Outcome::Elected
                    }
                    Some(Err(e)) => Outcome::Refused(e),
                };
                (p, outcome)
            })
            .collect();
        outcomes.push((topic, per));
    }
    let committed = if records.is_empty() {
        Ok(())
    } else {
        broker.metadata.append(&records).map(|_| ())
    };
    if let Err(e) = &committed {
        tracing::warn!(error = %e, "leader elections not committed");
    } else if !records.is_empty() {
        tracing::info!(partitions = records.len(), kind = ?kind, "leaders elected");
    }
    drop(_guard);
    if committed.is_ok() && !records.is_empty() {
        broker.sync_partitions();
    }
    let failed_commit = committed.err().map(|e| {
        let code = match e {
            sluice_controller::ControllerError::NotController(_) => ResponseError::NotController,
            _ => ResponseError::UnknownServerError,
        };
        (code.code(), e.to_string())
    });
    let topic_known =
        |topic: &str| !crate::internal_topics::is_hidden(topic) && image.topic(topic).is_some();
    resp.replica_election_results = outcomes
        .into_iter()
        .map(|(topic, per)| {
            let rows = per
                .into_iter()
                .filter_map(|(p, outcome)| {
                    let (code, message) = match outcome {
                        Outcome::Elected => match &failed_commit {
                            Some((code, m)) => (*code, Some(m.clone())),
                            None => (0, None),
                        },
                        // Kafka's messages (`ReplicationControlManager.
                        // electLeader`; the error's own text otherwise).
                        Outcome::Unknown if !topic_known(&topic) => (
                            ResponseError::UnknownTopicOrPartition.code(),
                            Some(format!("No such topic as {topic}")),
                        ),
                        Outcome::Unknown => (
                            ResponseError::UnknownTopicOrPartition.code(),
                            Some(format!("No such partition as {topic}-{p}")),
                        ),
                        Outcome::Refused(NoElection::NotNeeded) if all => return None,
                        Outcome::Refused(NoElection::NotNeeded) => (
                            ResponseError::ElectionNotNeeded.code(),
                            Some("Leader election not needed for topic partition.".into()),
                        ),
                        Outcome::Refused(NoElection::PreferredNotAvailable) => (
                            ResponseError::PreferredLeaderNotAvailable.code(),
                            Some("The preferred leader was not available.".into()),
                        ),
                        Outcome::Refused(NoElection::EligibleNotAvailable) => (
                            ResponseError::EligibleLeadersNotAvailable.code(),
                            Some("Eligible topic partition leaders are not available.".into()),
                        ),
                    };
                    Some((p, code, message))
                })
                .collect();
            result(topic, rows)
        })
        .collect();
    resp
}

/// What became of one partition.
enum Outcome {
    Elected,
    Refused(NoElection),
    Unknown,
}

/// One topic's results.
fn result(topic: String, rows: Vec<(i32, i16, Option<String>)>) -> ReplicaElectionResult {
    let mut r = ReplicaElectionResult::default();
    r.topic = TopicName(StrBytes::from_string(topic));
    r.partition_result = rows
        .into_iter()
        .map(|(p, code, message)| {
            let mut pr = PartitionResult::default();
            pr.partition_id = p;
            pr.error_code = code;
            pr.error_message = message.map(StrBytes::from_string);
            pr
        })
        .collect();
    r
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::elect_leaders_request::TopicPartitions;
    use proto_kafka::messages::ApiKey;

    use super::super::test_support::{ctx, open_broker, roundtrip};
    use super::*;

    fn request(kind: i8, topic: &str, partitions: &[i32]) -> ElectLeadersRequest {
        let mut req = ElectLeadersRequest::default();
        req.election_type = kind;
        let mut t = TopicPartitions::default();
        t.topic = TopicName(StrBytes::from_string(topic.into()));
        t.partitions = partitions.to_vec();
        req.topic_partitions = Some(vec![t]);
        req
    }

    fn codes(r: &ElectLeadersResponse) -> Vec<(String, i32, i16)> {
        r.replica_election_results
            .iter()
            .flat_map(|t| {
                t.partition_result
                    .iter()
                    .map(|p| (t.topic.0.to_string(), p.partition_id, p.error_code))
            })
            .collect()
    }

    /// One node leads every partition as its only (preferred) replica:
    /// nothing to elect; unknown partitions, the hidden metadata topic and
    /// unknown election types get Kafka's errors.
    #[test]
    fn a_single_node_needs_no_election() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        broker.create_topic("t", 2, 1, &[], false).expect("create");
        for v in VERSIONS.0..=VERSIONS.1 {
            let c = ctx(ApiKey::ElectLeaders, v);
            let r = roundtrip(&handle(&broker, request(0, "t", &[0, 1, 5]), &c), v);
            let not_needed = ResponseError::ElectionNotNeeded.code();
            let unknown = ResponseError::UnknownTopicOrPartition.code();
            assert_eq!(
                codes(&r),
                vec![
                    ("t".into(), 0, not_needed),
                    ("t".into(), 1, not_needed),
                    ("t".into(), 5, unknown)
                ]
            );
            let r = roundtrip(
                &handle(&broker, request(0, "__cluster_metadata", &[0]), &c),
                v,
            );
            assert_eq!(codes(&r), vec![("__cluster_metadata".into(), 0, unknown)]);
            if v >= 1 {
                // Kafka's messages for each outcome.
                let r = roundtrip(&handle(&broker, request(0, "t", &[0, 5]), &c), v);
                let messages: Vec<Option<String>> = r.replica_election_results[0]
                    .partition_result
                    .iter()
                    .map(|p| p.error_message.as_ref().map(ToString::to_string))
                    .collect();
                assert_eq!(
                    messages,
                    vec![
                        Some("Leader election not needed for topic partition.".into()),
                        Some("No such partition as t-5".into())
                    ]
                );
                let r = roundtrip(&handle(&broker, request(0, "nope", &[0]), &c), v);
                assert_eq!(
                    r.replica_election_results[0].partition_result[0]
                        .error_message
                        .as_ref()
                        .map(ToString::to_string),
                    Some("No such topic as nope".into())
                );
                let r = roundtrip(&handle(&broker, request(1, "t", &[0]), &c), v);
                assert_eq!(codes(&r), vec![("t".into(), 0, not_needed)]);
                let r = handle(&broker, request(5, "t", &[0]), &c);
                assert_eq!(r.error_code, ResponseError::InvalidRequest.code());
            }
        }
        broker.shutdown().expect("shutdown");
    }
}
