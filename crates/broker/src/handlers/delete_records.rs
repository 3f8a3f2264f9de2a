//! DeleteRecords (key 21): move each partition's log start offset forward
//! (offset -1 means the high watermark), deleting whole segments below it;
//! reads below the new start fail with OFFSET_OUT_OF_RANGE. Answers the
//! new low watermark (the log start offset). As in Kafka: an offset past
//! the high watermark or negative is OFFSET_OUT_OF_RANGE, a topic whose
//! `cleanup.policy` lacks `delete` is POLICY_VIOLATION, and internal topics
//! are refused with INVALID_TOPIC_EXCEPTION. On one node every replica is
//! the leader, so the request completes without waiting (`timeout_ms`).

use std::sync::Arc;

use proto_kafka::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use proto_kafka::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use proto_kafka::ResponseError;

use super::errors::storage_error;
use super::Ctx;
use crate::broker::{ApiError, Broker, CONSUMER_OFFSETS_TOPIC};

pub(crate) const VERSIONS: (i16, i16) = (0, 2);

/// `DeleteRecordsRequest.HIGH_WATERMARK`.
const HIGH_WATERMARK: i64 = -1;

/// Kafka's internal topics.
const INTERNAL_TOPICS: &[&str] = &[CONSUMER_OFFSETS_TOPIC, "__transaction_state"];

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: DeleteRecordsRequest,
    _ctx: &Ctx,
) -> DeleteRecordsResponse {
    let mut resp = DeleteRecordsResponse::default();
    for t in req.topics {
        let name = t.name.0.to_string();
        let mut tr = DeleteRecordsTopicResult::default();
        tr.name = t.name.clone();
        for p in t.partitions {
            let mut pr = DeleteRecordsPartitionResult::default();
            pr.partition_index = p.partition_index;
            match delete(broker, &name, p.partition_index, p.offset) {
                Ok(low) => pr.low_watermark = low,
                Err(e) => {
                    tracing::debug!(topic = %name, partition = p.partition_index, error = ?e, "DeleteRecords");
                    pr.low_watermark = -1;
                    pr.error_code = e.code.code();
                }
            }
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    resp
}

/// Returns the partition's low watermark after the deletion.
fn delete(broker: &Broker, topic: &str, partition: i32, offset: i64) -> Result<i64, ApiError> {
    if INTERNAL_TOPICS.contains(&topic) {
        return Err(ApiError::new(
            ResponseError::InvalidTopicException,
            format!("Cannot delete records of internal topic {topic}"),
        ));
    }
    let log = broker
        .image()
        .topic(topic)
        .filter(|t| t.partitions.contains_key(&partition))
        .and_then(|_| broker.log(topic, partition))
        .ok_or_else(|| ApiError::code(ResponseError::UnknownTopicOrPartition))?;
    if !log.config().cleanup_policy.delete {
        return Err(ApiError::new(
            ResponseError::PolicyViolation,
            format!("Records of partition {topic}-{partition} can not be deleted due to the configured policy"),
        ));
    }
    let target = if offset == HIGH_WATERMARK {
        log.high_watermark()
    } else {
        offset
    };
    if target < 0 {
        return Err(ApiError::new(
            ResponseError::OffsetOutOfRange,
            format!("The offset {target} for partition {topic}-{partition} is not valid"),
        ));
    }
    log.advance_log_start_offset(target)
        .map_err(|e| storage_error(&e))?;
    Ok(log.log_start_offset())
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use proto_kafka::messages::{ApiKey, TopicName};
    use proto_kafka::protocol::StrBytes;

    use super::super::test_support::{append, ctx, open_broker, roundtrip};
    use super::*;

    fn request(topic: &str, offsets: &[(i32, i64)]) -> DeleteRecordsRequest {
        let mut t = DeleteRecordsTopic::default();
        t.name = TopicName(StrBytes::from_string(topic.to_string()));
        t.partitions = offsets
            .iter()
            .map(|&(p, o)| {
                let mut x = DeleteRecordsPartition::default();
                x.partition_index = p;
                x.offset = o;
                x
            })
            .collect();
        let mut req = DeleteRecordsRequest::default();
        req.topics = vec![t];
        req
    }

    fn results(resp: &DeleteRecordsResponse) -> Vec<(i16, i64)> {
        resp.topics[0]
            .partitions
            .iter()
            .map(|p| (p.error_code, p.low_watermark))
            .collect()
    }

    #[test]
    fn moves_the_log_start_in_every_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        for v in VERSIONS.0..=VERSIONS.1 {
            let name = format!("t{v}");
            broker
                .create_topic(&name, 3, 1, &[], false)
                .expect("create");
            append(&broker, &name, 0, 10);
            append(&broker, &name, 1, 10);
            let req = request(&name, &[(0, 4), (1, -1), (2, 1), (7, 0)]);
            let resp = roundtrip(&handle(&broker, req, &ctx(ApiKey::DeleteRecords, v)), v);
            assert_eq!(
                results(&resp),
                vec![
                    (0, 4),
                    (0, 10),
                    (ResponseError::OffsetOutOfRange.code(), -1),
                    (ResponseError::UnknownTopicOrPartition.code(), -1)
                ]
            );
            let log = broker.log(&name, 0).expect("log");
            assert_eq!(log.log_start_offset(), 4);
            // Going backwards keeps the start; negative offsets are refused.
            let req = request(&name, &[(0, 2), (0, -5)]);
            let resp = handle(&broker, req, &ctx(ApiKey::DeleteRecords, v));
            assert_eq!(
                results(&resp),
                vec![(0, 4), (ResponseError::OffsetOutOfRange.code(), -1)]
            );
        }
        broker.shutdown().expect("shutdown");
    }

    #[test]
    fn compacted_and_internal_topics_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        broker
            .create_topic(
                "c",
                1,
                1,
                &[("cleanup.policy".into(), "compact".into())],
                false,
            )
            .expect("create");
        let resp = handle(
            &broker,
            request("c", &[(0, -1)]),
            &ctx(ApiKey::DeleteRecords, 2),
        );
        assert_eq!(
            results(&resp),
            vec![(ResponseError::PolicyViolation.code(), -1)]
        );
        let resp = handle(
            &broker,
            request(CONSUMER_OFFSETS_TOPIC, &[(0, -1)]),
            &ctx(ApiKey::DeleteRecords, 2),
        );
        assert_eq!(
            results(&resp),
            vec![(ResponseError::InvalidTopicException.code(), -1)]
        );
        broker.shutdown().expect("shutdown");
    }
}
