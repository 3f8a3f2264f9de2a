//! OffsetForLeaderEpoch (key 23): for a requested leader epoch, the largest
//! epoch at or below it that this log knows and the offset where that
//! epoch ended (the log end for the current epoch). Consumers use it to
//! detect truncation after a leader change, followers to find where to
//! truncate. Semantics of Kafka's `LeaderEpochFileCache.endOffsetFor`, over
//! the log's epoch cache plus the partition's current epoch starting at the
//! log end when no batch was written in it yet (Kafka records that entry
//! when a replica becomes leader). `current_leader_epoch` (when not -1) is
//! checked against the partition's epoch: older is FENCED_LEADER_EPOCH,
//! newer is UNKNOWN_LEADER_EPOCH.

use std::sync::Arc;

use proto_kafka::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use proto_kafka::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use proto_kafka::ResponseError;
use sluice_storage::Log;

use super::Ctx;
use crate::broker::Broker;

pub(crate) const VERSIONS: (i16, i16) = (2, 4);

/// `RecordBatch.NO_PARTITION_LEADER_EPOCH` / `UNDEFINED_EPOCH`.
const UNDEFINED_EPOCH: i32 = -1;
/// `UNDEFINED_EPOCH_OFFSET`.
const UNDEFINED_OFFSET: i64 = -1;

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: OffsetForLeaderEpochRequest,
    _ctx: &Ctx,
) -> OffsetForLeaderEpochResponse {
    let image = broker.image();
    let mut resp = OffsetForLeaderEpochResponse::default();
    for t in req.topics {
        let name = t.topic.0.to_string();
        let topic = image.topic(&name);
        let mut tr = OffsetForLeaderTopicResult::default();
        tr.topic = t.topic.clone();
        for p in t.partitions {
            let mut out = EpochEndOffset::default();
            out.partition = p.partition;
            let state = topic.and_then(|t| t.partitions.get(&p.partition));
            let log = state.and_then(|_| broker.log(&name, p.partition));
            let result = match (state, log) {
                (Some(state), Some(log)) => {
                    if log.is_offline() {
                        Err(ResponseError::KafkaStorageError)
                    } else {
                        check_current_epoch(p.current_leader_epoch, state.leader_epoch).map(|()| {
                            leader_end_offset_for(&log, state.leader_epoch, p.leader_epoch)
                        })
                    }
                }
                _ => Err(ResponseError::UnknownTopicOrPartition),
            };
            match result {
                Ok((epoch, offset)) => {
                    out.leader_epoch = epoch;
                    out.end_offset = offset;
                }
                Err(code) => {
                    out.error_code = code.code();
                    out.leader_epoch = UNDEFINED_EPOCH;
                    out.end_offset = UNDEFINED_OFFSET;
                }
            }
            tr.partitions.push(out);
        }
        resp.topics.push(tr);
    }
    resp
}

/// Kafka's `Partition.checkCurrentLeaderEpoch`.
pub(super) fn check_current_epoch(requested: i32, current: i32) -> Result<(), ResponseError> {
    if requested == UNDEFINED_EPOCH || requested == current {
        Ok(())
    } else if requested < current {
        Err(ResponseError::FencedLeaderEpoch)
    } else {
        Err(ResponseError::UnknownLeaderEpoch)
    }
}

/// Where epoch `requested` ends in the log of a partition led in
/// `leader_epoch`: the leader's own epoch counts from the log end even
/// before anything was appended in it (Kafka assigns it on becoming
/// leader). `(-1, -1)` when undefined.
pub(super) fn leader_end_offset_for(log: &Log, leader_epoch: i32, requested: i32) -> (i32, i64) {
    let mut entries = log.leader_epochs();
    let end = log.log_end_offset();
    if entries.last().is_none_or(|&(e, _)| e < leader_epoch) {
        entries.push((leader_epoch, end));
    }
    end_offset_for(&entries, requested, end)
}

/// Kafka's `LeaderEpochFileCache.endOffsetFor` over `(epoch, start offset)`
/// entries in ascending order: the latest epoch ends at the log end; an
/// earlier one ends where the next starts, answered with the largest known
/// epoch at or below the request (or the requested epoch itself when it
/// predates every entry); an unknown or newer epoch is undefined.
fn end_offset_for(entries: &[(i32, i64)], requested: i32, log_end: i64) -> (i32, i64) {
    if requested == UNDEFINED_EPOCH {
        return (UNDEFINED_EPOCH, UNDEFINED_OFFSET);
    }
    if entries.last().is_some_and(|&(e, _)| e == requested) {
        return (requested, log_end);
    }
    let Some(&(_, next_start)) = entries.iter().find(|&&(e, _)| e > requested) else {
        return (UNDEFINED_EPOCH, UNDEFINED_OFFSET);
    };
    match entries.iter().rev().find(|&&(e, _)| e <= requested) {
        Some(&(e, _)) => (e, next_start),
        None => (requested, next_start),
    }
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use proto_kafka::messages::{ApiKey, TopicName};
    use proto_kafka::protocol::StrBytes;

    use super::super::test_support::{append, ctx, open_broker, roundtrip};
    use super::*;

    #[test]
    fn end_offsets_follow_kafkas_cache() {
        let entries = [(1, 0), (3, 10), (5, 20)];
        assert_eq!(end_offset_for(&entries, 5, 30), (5, 30));
        assert_eq!(end_offset_for(&entries, 3, 30), (3, 20));
        assert_eq!(end_offset_for(&entries, 4, 30), (3, 20));
        assert_eq!(end_offset_for(&entries, 1, 30), (1, 10));
        assert_eq!(end_offset_for(&entries, 0, 30), (0, 0));
        assert_eq!(end_offset_for(&entries, 6, 30), (-1, -1));
        assert_eq!(end_offset_for(&entries, -1, 30), (-1, -1));
        assert_eq!(end_offset_for(&[], 0, 0), (-1, -1));
        assert_eq!(check_current_epoch(-1, 4), Ok(()));
        assert_eq!(check_current_epoch(4, 4), Ok(()));
        assert_eq!(
            check_current_epoch(3, 4),
            Err(ResponseError::FencedLeaderEpoch)
        );
        assert_eq!(
            check_current_epoch(5, 4),
            Err(ResponseError::UnknownLeaderEpoch)
        );
    }

    fn request(topic: &str, parts: &[(i32, i32, i32)]) -> OffsetForLeaderEpochRequest {
        let mut t = OffsetForLeaderTopic::default();
        t.topic = TopicName(StrBytes::from_string(topic.to_string()));
        t.partitions = parts
            .iter()
            .map(|&(p, current, epoch)| {
                let mut x = OffsetForLeaderPartition::default();
                x.partition = p;
                x.current_leader_epoch = current;
                x.leader_epoch = epoch;
                x
            })
            .collect();
        let mut req = OffsetForLeaderEpochRequest::default();
        req.topics = vec![t];
        req
    }

    #[test]
    fn answers_for_epoch_zero_in_every_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        broker.create_topic("t", 2, 1, &[], false).expect("create");
        append(&broker, "t", 0, 5);
        for v in VERSIONS.0..=VERSIONS.1 {
            let mut req = request(
                "t",
                &[
                    (0, 0, 0),
                    (1, -1, 0),
                    (0, 1, 0),
                    (0, -1, 1),
                    (0, -1, -1),
                    (9, -1, 0),
                ],
            );
            if v >= 3 {
                req.replica_id = proto_kafka::messages::BrokerId(-1);
            }
            let resp = roundtrip(
                &handle(&broker, req, &ctx(ApiKey::OffsetForLeaderEpoch, v)),
                v,
            );
            let got: Vec<(i16, i32, i64)> = resp.topics[0]
                .partitions
                .iter()
                .map(|p| (p.error_code, p.leader_epoch, p.end_offset))
                .collect();
            assert_eq!(
                got,
                vec![
                    (0, 0, 5),
                    // Empty log: epoch 0 starts (and ends) at 0.
                    (0, 0, 0),
                    (ResponseError::UnknownLeaderEpoch.code(), -1, -1),
                    (0, -1, -1),
                    (0, -1, -1),
                    (ResponseError::UnknownTopicOrPartition.code(), -1, -1),
                ]
            );
        }
        let resp = handle(
            &broker,
            request("nope", &[(0, -1, 0)]),
            &ctx(ApiKey::OffsetForLeaderEpoch, 4),
        );
        assert_eq!(
            resp.topics[0].partitions[0].error_code,
            ResponseError::UnknownTopicOrPartition.code()
        );
        broker.shutdown().expect("shutdown");
    }
}
