//! ListPartitionReassignments (key 46, `kafka-reassign-partitions.sh
//! --list`, `Admin.listPartitionReassignments`): the partitions with a
//! reassignment in progress, from this node's metadata image (Kafka's
//! `ReplicationControlManager.listPartitionReassignments`): each with its
//! replicas (target first, then the ones being removed), adding and
//! removing replicas. Null `topics` lists every reassigning partition;
//! otherwise the named partitions that are reassigning (unknown topics
//! and partitions, or ones not reassigning, are left out, as Kafka does).
//! More than 10,000 partitions named: POLICY_VIOLATION.

use std::sync::Arc;

use proto_kafka::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use proto_kafka::messages::{
    BrokerId, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;
use sluice_controller::{PartitionImage, TopicImage};

use super::Ctx;
use crate::broker::Broker;
use crate::limits::MAX_PARTITIONS_PER_REQUEST;

pub(crate) const VERSIONS: (i16, i16) = (0, 0);

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: ListPartitionReassignmentsRequest,
    _ctx: &Ctx,
) -> ListPartitionReassignmentsResponse {
    let mut resp = ListPartitionReassignmentsResponse::default();
    let image = broker.image();
    let visible = |t: &&TopicImage| !crate::internal_topics::is_hidden(&t.name);
    match req.topics {
        None => {
            for t in image.topics().filter(visible) {
                let ps: Vec<i32> = t.partitions.keys().copied().collect();
                push_topic(&mut resp, t, &ps);
            }
        }
        Some(topics) => {
            let count: usize = topics.iter().map(|t| t.partition_indexes.len()).sum();
            if count as i64 > MAX_PARTITIONS_PER_REQUEST {
                resp.error_code = ResponseError::PolicyViolation.code();
                resp.error_message = Some(StrBytes::from_string(format!(
                    "More than {MAX_PARTITIONS_PER_REQUEST} partitions in one request."
                )));
                return resp;
            }
            for wanted in topics {
                if let Some(t) = image.topic(wanted.name.0.as_str()).filter(|t| visible(t)) {
                    push_topic(&mut resp, t, &wanted.partition_indexes);
                }
            }
        }
    }
    resp
}

/// Adds `t`'s reassigning partitions among `partitions`, if any.
fn push_topic(resp: &mut ListPartitionReassignmentsResponse, t: &TopicImage, partitions: &[i32]) {
    let ongoing: Vec<OngoingPartitionReassignment> = partitions
        .iter()
        .filter_map(|p| Some((*p, t.partitions.get(p).filter(|s| s.is_reassigning())?)))
        .map(|(p, s)| ongoing(p, s))
        .collect();
    if ongoing.is_empty() {
        return;
    }
    let mut topic = OngoingTopicReassignment::default();
    topic.name = TopicName(StrBytes::from_string(t.name.clone()));
    topic.partitions = ongoing;
    resp.topics.push(topic);
}

fn ongoing(p: i32, s: &PartitionImage) -> OngoingPartitionReassignment {
    let ids = |v: &[i32]| v.iter().map(|&b| BrokerId(b)).collect::<Vec<_>>();
    let mut o = OngoingPartitionReassignment::default();
    o.partition_index = p;
    o.replicas = ids(&s.replicas);
    o.adding_replicas = ids(&s.adding_replicas);
    o.removing_replicas = ids(&s.removing_replicas);
    o
}
