//! Metadata (key 3): this node as the only broker and controller, and the
//! requested topics (all when the list is null) with their partitions.
//! Unknown topics are created when the client and
//! `auto.create.topics.enable` allow it.

use std::sync::Arc;

use proto_kafka::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use proto_kafka::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;
use sluice_controller::TopicImage;

use super::Ctx;
use crate::broker::Broker;

pub(crate) const VERSIONS: (i16, i16) = (0, 12);

/// Kafka's "authorized operations not requested" marker.
const OPS_NOT_REQUESTED: i32 = i32::MIN;

pub(crate) fn handle(broker: &Arc<Broker>, req: MetadataRequest, ctx: &Ctx) -> MetadataResponse {
    // Before v4 the flag did not exist and creation was always allowed.
    let allow_create = ctx.version < 4 || req.allow_auto_topic_creation;
    let image = broker.image();
    let topics: Vec<MetadataResponseTopic> = match req.topics {
        // All topics: a null list, or in v0 (where the list is not
        // nullable) an empty one (Kafka's `MetadataRequest.isAllTopics`).
        None => all_topics(broker, &image, ctx.version),
        Some(wanted) if wanted.is_empty() && ctx.version == 0 => {
            all_topics(broker, &image, ctx.version)
        }
        Some(wanted) => wanted
            .into_iter()
            .map(|w| {
                let name = w.name.as_ref().map(|n| n.0.to_string());
                let found = match &name {
                    Some(n) => broker.topic_or_auto_create(n, allow_create),
                    None => image
                        .topic_by_id(&w.topic_id)
                        .cloned()
                        .ok_or(crate::broker::ApiError::code(ResponseError::UnknownTopicId)),
                };
                match found {
                    Ok(t) => topic(broker, &t, ctx.version),
                    Err(e) => {
                        let mut t = MetadataResponseTopic::default();
                        t.error_code = e.code.code();
                        t.name = name.map(|n| TopicName(StrBytes::from_string(n)));
                        if ctx.version >= 10 {
                            t.topic_id = w.topic_id;
                        }
                        t.topic_authorized_operations = OPS_NOT_REQUESTED;
                        t
                    }
                }
            })
            .collect(),
    };
    let mut resp = MetadataResponse::default();
    resp.brokers = broker
        .cluster_brokers()
        .into_iter()
        .map(|c| {
            let mut b = MetadataResponseBroker::default();
            b.node_id = BrokerId(c.id);
            b.host = StrBytes::from_string(c.host);
            b.port = c.port;
            b.rack = c.rack.map(StrBytes::from_string);
            b
        })
        .collect();
    resp.cluster_id = Some(StrBytes::from_string(broker.cluster_id.clone()));
    resp.controller_id = BrokerId(broker.controller_id());
    resp.topics = topics;
    resp.cluster_authorized_operations = OPS_NOT_REQUESTED;
    resp
}

fn all_topics(
    broker: &Broker,
    image: &sluice_controller::MetadataImage,
    version: i16,
) -> Vec<MetadataResponseTopic> {
    image
        .topics()
        .filter(|t| !crate::internal_topics::is_hidden(&t.name))
        .map(|t| topic(broker, t, version))
        .collect()
}

fn topic(broker: &Broker, t: &TopicImage, version: i16) -> MetadataResponseTopic {
    let mut out = MetadataResponseTopic::default();
    out.name = Some(TopicName(StrBytes::from_string(t.name.clone())));
    if version >= 10 {
        out.topic_id = t.id;
    }
    out.is_internal = crate::internal_topics::is_internal(&t.name);
    out.topic_authorized_operations = OPS_NOT_REQUESTED;
    out.partitions = t
        .partitions
        .iter()
        .map(|(&index, p)| {
            let mut mp = MetadataResponsePartition::default();
            mp.partition_index = index;
            mp.leader_id = BrokerId(p.leader);
            if version >= 7 {
                mp.leader_epoch = p.leader_epoch;
            }
            mp.replica_nodes = p.replicas.iter().map(|&r| BrokerId(r)).collect();
            mp.isr_nodes = p.isr.iter().map(|&r| BrokerId(r)).collect();
            // This node answers for its own replica only: a partition led
            // elsewhere is that leader's to report; one without a leader
            // (every ISR member fenced) is LEADER_NOT_AVAILABLE.
            let online = p.leader != broker.node_id
                || broker.log(&t.name, index).is_some_and(|l| !l.is_offline());
            if p.leader < 0 {
                mp.error_code = ResponseError::LeaderNotAvailable.code();
            } else if !online {
                mp.error_code = ResponseError::KafkaStorageError.code();
                if version >= 5 {
                    mp.offline_replicas = vec![BrokerId(broker.node_id)];
                }
            }
            mp
        })
        .collect();
    out
}
