//! FindCoordinator (key 10): the coordinator of a consumer group is the
//! leader of its `__consumer_offsets` partition (on one node, this node).
//! Looking a group up creates `__consumer_offsets` (compacted,
//! `offsets.topic.num.partitions`) on first use, as Kafka does, and answers
//! the partition's leader; when that is this node the partition is loaded
//! first. A partition without a leader (or a leader not registered) is
//! COORDINATOR_NOT_AVAILABLE, as is a topic that cannot be created yet
//! (fewer brokers than its replication factor). v4+ batches keys
//! (`coordinator_keys`), one result each; older versions look up `key`.
//!
//! Any group id is answered, the empty one included (Kafka hashes it like
//! any other; JoinGroup and the other group APIs reject it). A
//! transactional id (key type 1, v1+) is coordinated by the leader of its
//! `__transaction_state` partition: looking it up creates the topic (Kafka's
//! transaction topic configs, `transaction.state.log.*`) and loads the id's
//! partition on first use; COORDINATOR_NOT_AVAILABLE when the topic cannot
//! be created (Kafka's answer while it is missing). Other key types get
//! INVALID_REQUEST (share groups, key type 2, are not built).

use std::sync::Arc;

use proto_kafka::messages::find_coordinator_response::Coordinator;
use proto_kafka::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;

use super::Ctx;
use crate::broker::{ApiError, Broker, CONSUMER_OFFSETS_TOPIC};
use crate::internal_topics::TRANSACTION_STATE_TOPIC;

pub(crate) const VERSIONS: (i16, i16) = (0, 6);

const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

/// Where one key's coordinator is, or why not: node id, host, port.
type Found = Result<(i32, String, i32), ApiError>;

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: FindCoordinatorRequest,
    ctx: &Ctx,
) -> FindCoordinatorResponse {
    let mut resp = FindCoordinatorResponse::default();
    let key_type = if ctx.version >= 1 {
        req.key_type
    } else {
        KEY_TYPE_GROUP
    };
    if ctx.version >= 4 {
        resp.coordinators = req
            .coordinator_keys
            .iter()
            .map(|key| {
                let mut c = Coordinator::default();
                c.key = key.clone();
                let (code, message, (node, host, port)) = outcome(find(broker, key_type, key));
                c.error_code = code;
                c.error_message = Some(StrBytes::from_string(message));
                c.node_id = BrokerId(node);
                c.host = StrBytes::from_string(host);
                c.port = port;
                c
            })
            .collect();
        return resp;
    }
    let (code, message, (node, host, port)) = outcome(find(broker, key_type, &req.key));
    resp.error_code = code;
    if ctx.version >= 1 {
        resp.error_message = Some(StrBytes::from_string(message));
    }
    resp.node_id = BrokerId(node);
    resp.host = StrBytes::from_string(host);
    resp.port = port;
    resp
}

/// Error code, message (Kafka writes "NONE" on success) and node
/// (`Node.noNode()`: -1, "", -1 on error).
fn outcome(found: Found) -> (i16, String, (i32, String, i32)) {
    match found {
        Ok(node) => (0, "NONE".to_string(), node),
        Err(e) => {
            let message = e.message.unwrap_or_else(|| format!("{:?}", e.code));
            (e.code.code(), message, (-1, String::new(), -1))
        }
    }
}

fn find(broker: &Arc<Broker>, key_type: i8, key: &str) -> Found {
    match key_type {
        KEY_TYPE_GROUP => {
            let partitions = broker.groups.partition_count(broker);
            broker
                .ensure_offsets_topic(partitions)
                .map_err(not_available)?;
            let partition = broker.groups.partition_for(broker, key);
            let leader = leader_of(broker, CONSUMER_OFFSETS_TOPIC, partition)?;
            if leader.0 == broker.node_id {
                broker.groups.shard(broker, key).map_err(not_available)?;
            }
            Ok(leader)
        }
        KEY_TYPE_TRANSACTION => {
            broker
                .ensure_transaction_state_topic()
                .map_err(not_available)?;
            let partition =
                sluice_coordinator::txn::partition_for(key, broker.txns.partition_count(broker));
            let leader = leader_of(broker, TRANSACTION_STATE_TOPIC, partition)?;
            if leader.0 == broker.node_id {
                if let Err(e) = broker.txns.shard(broker, key, true) {
                    return Err(ApiError::new(
                        ResponseError::try_from_code(e.code())
                            .unwrap_or(ResponseError::CoordinatorNotAvailable),
                        e.to_string(),
                    ));
                }
            }
            Ok(leader)
        }
        other => Err(ApiError::new(
            ResponseError::InvalidRequest,
            format!("Unknown coordinator type {other} in FindCoordinator request"),
        )),
    }
}

/// The leader of an internal topic's partition, with its endpoint.
fn leader_of(broker: &Broker, topic: &str, partition: i32) -> Found {
    let image = broker.image();
    let leader = image
        .topic(topic)
        .and_then(|t| t.partitions.get(&partition))
        .map_or(-1, |p| p.leader);
    broker
        .cluster_brokers()
        .into_iter()
        .find(|b| b.id == leader)
        .map(|b| (b.id, b.host, b.port))
        .ok_or_else(|| {
            ApiError::new(
                ResponseError::CoordinatorNotAvailable,
                format!("{topic}-{partition} has no available leader."),
            )
        })
}

/// Why an internal topic cannot serve yet, as FindCoordinator answers it.
fn not_available(e: ApiError) -> ApiError {
    match e.code {
        ResponseError::CoordinatorNotAvailable
        | ResponseError::CoordinatorLoadInProgress
        | ResponseError::NotCoordinator => e,
        code => ApiError::new(
            ResponseError::CoordinatorNotAvailable,
            e.message.unwrap_or_else(|| format!("{code:?}")),
        ),
    }
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::ApiKey;

    use super::super::test_support::{ctx, open_broker, roundtrip};
    use super::*;
    use crate::broker::CONSUMER_OFFSETS_TOPIC;

    #[test]
    fn every_version_answers_this_node_and_creates_the_offsets_topic() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(
            dir.path(),
            &[
                ("listeners", "PLAINTEXT://127.0.0.1:19092"),
                ("offsets.topic.num.partitions", "3"),
            ],
        );
        assert!(broker.image().topic(CONSUMER_OFFSETS_TOPIC).is_none());
        for v in VERSIONS.0..=VERSIONS.1 {
            let mut req = FindCoordinatorRequest::default();
            if v >= 4 {
                req.coordinator_keys = vec![
                    StrBytes::from_static_str("g1"),
                    StrBytes::from_static_str(""),
                ];
            } else {
                req.key = StrBytes::from_static_str("g1");
            }
            let resp = roundtrip(&handle(&broker, req, &ctx(ApiKey::FindCoordinator, v)), v);
            if v >= 4 {
                assert_eq!(resp.coordinators.len(), 2);
                for (c, key) in resp.coordinators.iter().zip(["g1", ""]) {
                    assert_eq!(c.key.as_str(), key);
                    assert_eq!(c.error_code, 0);
                    assert_eq!(c.node_id, BrokerId(1));
                    assert_eq!(c.host.as_str(), "127.0.0.1");
                    assert_eq!(c.port, 19092);
                }
            } else {
                assert_eq!(resp.error_code, 0, "v{v}");
                assert_eq!(resp.node_id, BrokerId(1));
                assert_eq!(resp.host.as_str(), "127.0.0.1");
                assert_eq!(resp.port, 19092);
                if v >= 1 {
                    assert_eq!(resp.error_message.as_deref(), Some("NONE"));
                }
            }
        }
        let topic = broker.image().topic(CONSUMER_OFFSETS_TOPIC).cloned();
        assert!(topic.is_some(), "__consumer_offsets created on first use");
        broker.shutdown().expect("shutdown");
    }

    /// Key type TRANSACTION (v1+) answers this node and creates
    /// `__transaction_state` with Kafka's transaction topic configs.
    #[test]
    fn transactional_ids_answer_this_node_and_create_the_transaction_topic() {
        use crate::internal_topics::TRANSACTION_STATE_TOPIC;
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(
            dir.path(),
            &[
                ("listeners", "PLAINTEXT://127.0.0.1:19093"),
                ("transaction.state.log.num.partitions", "3"),
                ("transaction.state.log.segment.bytes", "1048576"),
            ],
        );
        assert!(broker.image().topic(TRANSACTION_STATE_TOPIC).is_none());
        for v in 1..=VERSIONS.1 {
            let mut req = FindCoordinatorRequest::default();
            req.key_type = KEY_TYPE_TRANSACTION;
            if v >= 4 {
                req.coordinator_keys = vec![
                    StrBytes::from_static_str("tx-1"),
                    StrBytes::from_static_str("tx-2"),
                ];
            } else {
                req.key = StrBytes::from_static_str("tx-1");
            }
            let resp = roundtrip(&handle(&broker, req, &ctx(ApiKey::FindCoordinator, v)), v);
            let mut want = FindCoordinatorResponse::default();
            if v >= 4 {
                want.coordinators = ["tx-1", "tx-2"]
                    .iter()
                    .map(|k| {
                        let mut c = Coordinator::default();
                        c.key = StrBytes::from_static_str(k);
                        c.error_message = Some(StrBytes::from_static_str("NONE"));
                        c.node_id = BrokerId(1);
                        c.host = StrBytes::from_static_str("127.0.0.1");
                        c.port = 19093;
                        c
                    })
                    .collect();
            } else {
                want.error_message = Some(StrBytes::from_static_str("NONE"));
                want.node_id = BrokerId(1);
                want.host = StrBytes::from_static_str("127.0.0.1");
                want.port = 19093;
            }
            assert_eq!(resp, want, "v{v}");
        }
        let topic = broker
            .image()
            .topic(TRANSACTION_STATE_TOPIC)
            .cloned()
            .expect("__transaction_state created on first use");
        assert_eq!(topic.partitions.len(), 3);
        let configs: Vec<(&str, &str)> = topic
            .configs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            configs,
            vec![
                ("cleanup.policy", "compact"),
                ("compression.type", "uncompressed"),
                ("min.insync.replicas", "1"),
                ("segment.bytes", "1048576"),
                ("unclean.leader.election.enable", "false"),
            ]
        );
        assert!(crate::internal_topics::is_internal(TRANSACTION_STATE_TOPIC));
        broker.shutdown().expect("shutdown");
    }

    /// A topic that cannot be created (a segment size topics refuse) is
    /// COORDINATOR_NOT_AVAILABLE, as Kafka answers while it is missing;
    /// unknown key types are INVALID_REQUEST.
    #[test]
    fn uncreatable_transaction_topic_and_unknown_key_types() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(
            dir.path(),
            &[
                ("offsets.topic.num.partitions", "1"),
                ("transaction.state.log.segment.bytes", "13"),
            ],
        );
        for v in 1..=VERSIONS.1 {
            for (key_type, code) in [
                (KEY_TYPE_TRANSACTION, ResponseError::CoordinatorNotAvailable),
                (7, ResponseError::InvalidRequest),
            ] {
                let mut req = FindCoordinatorRequest::default();
                req.key_type = key_type;
                if v >= 4 {
                    req.coordinator_keys = vec![StrBytes::from_static_str("tx")];
                } else {
                    req.key = StrBytes::from_static_str("tx");
                }
                let resp = roundtrip(&handle(&broker, req, &ctx(ApiKey::FindCoordinator, v)), v);
                let (got, node) = if v >= 4 {
                    (
                        resp.coordinators[0].error_code,
                        resp.coordinators[0].node_id,
                    )
                } else {
                    (resp.error_code, resp.node_id)
                };
                assert_eq!(got, code.code(), "v{v} key type {key_type}");
                assert_eq!(node, BrokerId(-1));
            }
        }
        broker.shutdown().expect("shutdown");
    }
}
