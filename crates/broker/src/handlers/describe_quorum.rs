//! DescribeQuorum (key 55): the metadata quorum of `__cluster_metadata-0`
//! as its leader sees it (Kafka's `KafkaRaftClient.handleDescribeQuorumRequest`,
//! reached from a broker by forwarding to the active controller): leader
//! id and epoch, high watermark, each voter's log end offset with when it
//! last fetched and was last caught up (v1+), and the voters' CONTROLLER
//! endpoints (v2+). With the metadata quorum a node that does not lead
//! asks the leader over the CONTROLLER listener; the single combined node
//! is a quorum of one voter that leads it (as single-node KRaft is).
//!
//! Errors as Kafka's: a request for anything but `__cluster_metadata`
//! partition 0 gets UNKNOWN_TOPIC_OR_PARTITION for each partition asked;
//! no reachable quorum leader gets NOT_LEADER_OR_FOLLOWER.

use std::sync::Arc;

use proto_kafka::messages::describe_quorum_response::{
    Listener, Node, PartitionData, ReplicaState, TopicData,
};
use proto_kafka::messages::{BrokerId, DescribeQuorumRequest, DescribeQuorumResponse, TopicName};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;
use sluice_controller::quorum::describe::{self, QuorumDescription};
use sluice_controller::store::{METADATA_TOPIC, QUORUM_LEADER_EPOCH};

use super::Ctx;
use crate::broker::Broker;

pub(crate) const VERSIONS: (i16, i16) = (0, 2);

pub(crate) async fn handle(
    broker: &Arc<Broker>,
    req: DescribeQuorumRequest,
    ctx: &Ctx,
) -> DescribeQuorumResponse {
    let valid = req.topics.len() == 1
        && req.topics[0].topic_name.as_str() == METADATA_TOPIC
        && req.topics[0].partitions.len() == 1
        && req.topics[0].partitions[0].partition_index == 0;
    if !valid {
        let mut resp = DescribeQuorumResponse::default();
        resp.topics = req
            .topics
            .iter()
            .map(|t| {
                let mut td = TopicData::default();
                td.topic_name = t.topic_name.clone();
                td.partitions = t
                    .partitions
                    .iter()
                    .map(|p| {
                        partition_error(
                            p.partition_index,
                            ResponseError::UnknownTopicOrPartition,
                            None,
                            ctx.version,
                        )
                    })
                    .collect();
                td
            })
            .collect();
        return resp;
    }
    match describe_quorum(broker).await {
        Ok(d) => response(broker, &d, ctx.version),
        Err(message) => {
            let mut resp = DescribeQuorumResponse::default();
            resp.topics = vec![topic(vec![partition_error(
                0,
                ResponseError::NotLeaderOrFollower,
                Some(message),
                ctx.version,
            )])];
            resp
        }
    }
}

/// The quorum's description from its leader; with no metadata quorum this
/// node is its only voter and leader, and what its metadata log holds is
/// committed (appended and fsynced before it is applied).
pub(crate) async fn describe_quorum(broker: &Broker) -> Result<QuorumDescription, String> {
    match broker.metadata.quorum() {
        Some(q) => q.describe().await.map_err(|e| e.to_string()),
        None => Ok(describe::QuorumDescription::single_node(
            broker.node_id,
            QUORUM_LEADER_EPOCH,
            broker.metadata.log().log_end_offset(),
            now_ms(),
        )),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn topic(partitions: Vec<PartitionData>) -> TopicData {
    let mut td = TopicData::default();
    td.topic_name = TopicName(StrBytes::from_static_str(METADATA_TOPIC));
    td.partitions = partitions;
    td
}

fn partition_error(
    index: i32,
    code: ResponseError,
    message: Option<String>,
    version: i16,
) -> PartitionData {
    let mut p = PartitionData::default();
    p.partition_index = index;
    p.error_code = code.code();
    if version >= 2 {
        p.error_message = message.map(StrBytes::from_string);
    }
    p.leader_id = BrokerId(-1);
    p.leader_epoch = -1;
    p.high_watermark = -1;
    p
}

fn replica(r: &describe::ReplicaState) -> ReplicaState {
    let mut s = ReplicaState::default();
    s.replica_id = BrokerId(r.replica_id);
    s.log_end_offset = r.log_end_offset;
    s.last_fetch_timestamp = r.last_fetch_timestamp;
    s.last_caught_up_timestamp = r.last_caught_up_timestamp;
    s
}

fn response(broker: &Broker, d: &QuorumDescription, version: i16) -> DescribeQuorumResponse {
    let mut p = PartitionData::default();
    p.partition_index = 0;
    p.leader_id = BrokerId(d.leader_id);
    p.leader_epoch = d.leader_epoch;
    p.high_watermark = d.high_watermark;
    p.current_voters = d.voters.iter().map(replica).collect();
    p.observers = d.observers.iter().map(replica).collect();
    let mut resp = DescribeQuorumResponse::default();
    resp.topics = vec![topic(vec![p])];
    if version >= 2 {
        let name = broker
            .config
            .controller_listeners()
            .into_iter()
            .next()
            .unwrap_or_else(|| "CONTROLLER".into());
        resp.nodes = d
            .voters
            .iter()
            .map(|v| {
                let mut n = Node::default();
                n.node_id = BrokerId(v.replica_id);
                n.listeners = d
                    .endpoints
                    .get(&v.replica_id)
                    .and_then(|a| a.rsplit_once(':'))
                    .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
                    .map(|(host, port)| {
                        let mut l = Listener::default();
                        l.name = StrBytes::from_string(name.clone());
                        l.host = StrBytes::from_string(host.to_string());
                        l.port = port;
                        l
                    })
                    .into_iter()
                    .collect();
                n
            })
            .collect();
    }
    resp
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::describe_quorum_request;
    use proto_kafka::messages::ApiKey;

    use super::super::test_support::{block_on, ctx, open_broker, roundtrip};
    use super::*;

    fn request(topic: &str, partition: i32) -> DescribeQuorumRequest {
        let mut p = describe_quorum_request::PartitionData::default();
        p.partition_index = partition;
        let mut t = describe_quorum_request::TopicData::default();
        t.topic_name = TopicName(StrBytes::from_string(topic.into()));
        t.partitions = vec![p];
        let mut req = DescribeQuorumRequest::default();
        req.topics = vec![t];
        req
    }

    #[test]
    fn a_single_node_is_the_sole_voter_and_leader() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[("node.id", "4")]);
        broker
            .create_topic("t", 1, 1, &[], false)
            .expect("a metadata change");
        let end = broker.metadata.log().log_end_offset();
        assert!(end > 0);
        for v in VERSIONS.0..=VERSIONS.1 {
            let before = now_ms();
            let resp = block_on(handle(
                &broker,
                request(METADATA_TOPIC, 0),
                &ctx(ApiKey::DescribeQuorum, v),
            ));
            let resp = roundtrip(&resp, v);
            assert_eq!(resp.error_code, 0);
            let p = &resp.topics[0].partitions[0];
            assert_eq!(resp.topics[0].topic_name.as_str(), METADATA_TOPIC);
            assert_eq!(
                (p.error_code, p.leader_id, p.leader_epoch),
                (0, BrokerId(4), 0)
            );
            assert_eq!(p.high_watermark, end);
            assert_eq!(p.current_voters.len(), 1);
            let me = &p.current_voters[0];
            assert_eq!((me.replica_id, me.log_end_offset), (BrokerId(4), end));
            if v >= 1 {
                assert!(me.last_fetch_timestamp >= before);
                assert!(me.last_caught_up_timestamp >= before);
            }
            assert!(p.observers.is_empty());
            if v >= 2 {
                // No controller listener is served by the single node.
                assert_eq!(resp.nodes.len(), 1);
                assert_eq!(resp.nodes[0].node_id, BrokerId(4));
                assert!(resp.nodes[0].listeners.is_empty());
            }
        }
        broker.shutdown().expect("shutdown");
    }

    #[test]
    fn another_topic_or_partition_is_unknown() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        for (topic, partition) in [("t", 0), (METADATA_TOPIC, 1)] {
            let resp = block_on(handle(
                &broker,
                request(topic, partition),
                &ctx(ApiKey::DescribeQuorum, 2),
            ));
            let p = &resp.topics[0].partitions[0];
            assert_eq!(resp.topics[0].topic_name.as_str(), topic);
            assert_eq!(p.partition_index, partition);
            assert_eq!(p.error_code, ResponseError::UnknownTopicOrPartition.code());
        }
        broker.shutdown().expect("shutdown");
    }
}
