//! DescribeProducers (key 61, v0): the producers each partition's producer
//! state tracks (id, epoch, last sequence, last timestamp, coordinator
//! epoch, open transaction start), from storage's `Log::active_producers`,
//! as Kafka's `KafkaApis.handleDescribeProducersRequest` and
//! `Partition.activeProducerState`. A topic name Kafka would refuse is
//! INVALID_TOPIC_EXCEPTION and an unknown topic UNKNOWN_TOPIC_OR_PARTITION
//! (both with the error's message, on every partition asked for); a
//! partition the topic does not have is UNKNOWN_TOPIC_OR_PARTITION, one
//! whose log is not here NOT_LEADER_OR_FOLLOWER (no message, as Kafka).
//! Hidden topics (the metadata log) are unknown topics.

use std::sync::Arc;

use proto_kafka::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use proto_kafka::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;
use sluice_storage::ActiveProducer;

use super::Ctx;
use crate::broker::{validate_topic_name, ApiError, Broker};

pub(crate) const VERSIONS: (i16, i16) = (0, 0);

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: DescribeProducersRequest,
    _ctx: &Ctx,
) -> DescribeProducersResponse {
    let mut resp = DescribeProducersResponse::default();
    let image = broker.image();
    for t in req.topics {
        let name = t.name.0.to_string();
        let topic_error = validate_topic_name(&name).err().or_else(|| {
            let known = image.topic(&name).is_some() && !crate::internal_topics::is_hidden(&name);
            (!known).then(|| {
                ApiError::new(
                    ResponseError::UnknownTopicOrPartition,
                    "This server does not host this topic-partition.",
                )
            })
        });
        let mut tr = TopicResponse::default();
        tr.name = t.name.clone();
        for partition in t.partition_indexes {
            let outcome = match &topic_error {
                Some(e) => Err(e.clone()),
                None => active_producers(broker, &name, partition),
            };
            tr.partitions.push(partition_response(partition, outcome));
        }
        resp.topics.push(tr);
    }
    resp
}

/// The producers of one partition of a known topic.
fn active_producers(
    broker: &Broker,
    topic: &str,
    partition: i32,
) -> Result<Vec<ActiveProducer>, ApiError> {
    let exists = broker
        .image()
        .topic(topic)
        .is_some_and(|t| t.partitions.contains_key(&partition));
    if !exists {
        return Err(ApiError::code(ResponseError::UnknownTopicOrPartition));
    }
    let log = broker
        .log(topic, partition)
        .ok_or_else(|| ApiError::code(ResponseError::NotLeaderOrFollower))?;
    Ok(log.active_producers())
}

/// The wire form of one partition's answer.
fn partition_response(
    partition: i32,
    outcome: Result<Vec<ActiveProducer>, ApiError>,
) -> PartitionResponse {
    let mut pr = PartitionResponse::default();
    pr.partition_index = partition;
    match outcome {
        Ok(producers) => {
            pr.active_producers = producers
                .into_iter()
                .map(|p| {
                    let mut s = ProducerState::default();
                    s.producer_id = ProducerId(p.producer_id);
                    s.producer_epoch = i32::from(p.producer_epoch);
                    s.last_sequence = p.last_sequence;
                    s.last_timestamp = p.last_timestamp;
                    s.coordinator_epoch = p.coordinator_epoch;
                    s.current_txn_start_offset = p.current_txn_start_offset;
                    s
                })
                .collect();
        }
        Err(e) => {
            pr.error_code = e.code.code();
            pr.error_message = e.message.map(StrBytes::from_string);
        }
    }
    pr
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::describe_producers_request::TopicRequest;
    use proto_kafka::messages::{ApiKey, TopicName};
    use sluice_protocol::record::codec::ProducerInfo;
    use sluice_protocol::record::{BatchBuilder, Compression, Record};

    use super::super::test_support::{call, open_broker};
    use super::*;

    fn request(topics: &[(&str, &[i32])]) -> DescribeProducersRequest {
        let mut r = DescribeProducersRequest::default();
        r.topics = topics
            .iter()
            .map(|(name, parts)| {
                let mut t = TopicRequest::default();
                t.name = TopicName(StrBytes::from_string((*name).to_string()));
                t.partition_indexes = parts.to_vec();
                t
            })
            .collect();
        r
    }

    /// (partition, error code, message, producers as (id, epoch, last seq)).
    type Answer = (i32, i16, Option<String>, Vec<(i64, i32, i32)>);

    fn answers(resp: &DescribeProducersResponse) -> Vec<(String, Vec<Answer>)> {
        resp.topics
            .iter()
            .map(|t| {
                (
                    t.name.0.to_string(),
                    t.partitions
                        .iter()
                        .map(|p| {
                            (
                                p.partition_index,
                                p.error_code,
                                p.error_message.as_ref().map(|m| m.to_string()),
                                p.active_producers
                                    .iter()
                                    .map(|s| (s.producer_id.0, s.producer_epoch, s.last_sequence))
                                    .collect(),
                            )
                        })
                        .collect(),
                )
            })
            .collect()
    }

    #[test]
    fn producer_state_maps_field_by_field() {
        let p = ActiveProducer {
            producer_id: 1234,
            producer_epoch: 7,
            last_sequence: 99,
            last_timestamp: 1_700_000_000_000,
            coordinator_epoch: -1,
            current_txn_start_offset: -1,
        };
        let pr = partition_response(3, Ok(vec![p]));
        assert_eq!(
            (pr.partition_index, pr.error_code, pr.error_message.clone()),
            (3, 0, None)
        );
        let s = &pr.active_producers[0];
        assert_eq!(
            (
                s.producer_id.0,
                s.producer_epoch,
                s.last_sequence,
                s.last_timestamp,
                s.coordinator_epoch,
                s.current_txn_start_offset
            ),
            (1234, 7, 99, 1_700_000_000_000, -1, -1)
        );
    }

    #[tokio::test]
    async fn unknown_and_invalid_topics_and_partitions() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        broker
            .create_topic("t", 2, 1, &[], false)
            .expect("create topic");
        let resp: DescribeProducersResponse = call(
            &broker,
            ApiKey::DescribeProducers,
            0,
            &request(&[
                ("t", &[0, 1, 5]),
                ("missing", &[0]),
                ("bad name!", &[0, 1]),
                ("__cluster_metadata", &[0]),
            ]),
        )
        .await
        .expect("a response");
        let unknown = ResponseError::UnknownTopicOrPartition.code();
        let host = Some("This server does not host this topic-partition.".to_string());
        let got = answers(&resp);
        assert_eq!(
            got[0],
            (
                "t".to_string(),
                vec![
                    (0, 0, None, vec![]),
                    (1, 0, None, vec![]),
                    (5, unknown, None, vec![])
                ]
            )
        );
        assert_eq!(
            got[1],
            (
                "missing".to_string(),
                vec![(0, unknown, host.clone(), vec![])]
            )
        );
        assert_eq!(got[2].1.len(), 2);
        for p in &got[2].1 {
            assert_eq!(p.1, ResponseError::InvalidTopicException.code());
            assert!(
                p.2.as_deref().is_some_and(|m| m.contains("illegal")),
                "{p:?}"
            );
        }
        assert_eq!(
            got[3],
            (
                "__cluster_metadata".to_string(),
                vec![(0, unknown, host, vec![])]
            )
        );
        broker.shutdown().expect("shutdown");
    }

    /// The producers a partition's producer state tracks after idempotent
    /// appends: id, epoch and last sequence of each. Needs the producer
    /// state of the `pstate` branch (storage's `Log::active_producers`);
    /// with the placeholder of this branch the list is empty.
    #[tokio::test]
    async fn producers_appear_after_idempotent_appends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        broker
            .create_topic("idem", 1, 1, &[], false)
            .expect("create topic");
        let log = broker.log("idem", 0).expect("log");
        for (producer_id, epoch, base_sequence, records) in
            [(40, 0, 0, 3), (40, 0, 3, 2), (41, 2, 0, 1)]
        {
            let mut b = BatchBuilder::new(Compression::None, 1_000).producer(
                ProducerInfo {
                    producer_id,
                    producer_epoch: epoch,
                    base_sequence,
                },
                false,
            );
            for i in 0..records {
                b.push(Record::new(None, Some(vec![b'v'; 10]), 1_000 + i));
            }
            let mut bytes = b.build(0).expect("batch");
            log.append_as_leader(&mut bytes, 0).expect("append");
        }
        let resp: DescribeProducersResponse = call(
            &broker,
            ApiKey::DescribeProducers,
            0,
            &request(&[("idem", &[0])]),
        )
        .await
        .expect("a response");
        let mut producers = answers(&resp)[0].1[0].3.clone();
        producers.sort_unstable();
        assert_eq!(producers, vec![(40, 0, 4), (41, 2, 0)]);
        broker.shutdown().expect("shutdown");
    }
}
