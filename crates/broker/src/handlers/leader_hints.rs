//! Current-leader hints (KIP-951): a Produce (v10+) or Fetch (v12+) answer
//! that refuses a partition with NOT_LEADER_OR_FOLLOWER or
//! FENCED_LEADER_EPOCH names the partition's leader and leader epoch as
//! this node knows them, and (Produce v10+, Fetch v16+) that leader's
//! endpoint, so the client moves to the new leader without waiting for a
//! metadata refresh (Kafka's `KafkaApis.getCurrentLeader`).

use proto_kafka::ResponseError;

use crate::broker::{Broker, ClusterBroker};

/// Whether `code` is answered with a leader hint.
pub(crate) fn wants_hint(code: i16) -> bool {
    code == ResponseError::NotLeaderOrFollower.code()
        || code == ResponseError::FencedLeaderEpoch.code()
}

/// The partition's leader and leader epoch in this node's metadata, and
/// the leader's endpoint when it is a live broker ((-1, -1) and none when
/// the partition has no leader or is unknown).
pub(crate) fn leader_of(
    broker: &Broker,
    topic: &str,
    partition: i32,
) -> ((i32, i32), Option<ClusterBroker>) {
    let image = broker.image();
    let Some(p) = image
        .topic(topic)
        .and_then(|t| t.partitions.get(&partition))
    else {
        return ((-1, -1), None);
    };
    if p.leader < 0 {
        return ((-1, -1), None);
    }
    let endpoint = broker
        .cluster_brokers()
        .into_iter()
        .find(|b| b.id == p.leader);
    ((p.leader, p.leader_epoch), endpoint)
}
