//! TxnOffsetCommit (key 28), v0-v4: a transactional producer commits a
//! consumer group's offsets inside its transaction
//! (`send_offsets_to_transaction`). As Kafka 4
//! (`KafkaApis.handleTxnOffsetCommitRequest`,
//! `GroupCoordinatorService.commitTransactionalOffsets`,
//! `OffsetMetadataManager.commitTransactionalOffset`):
//!
//! - an empty group id is INVALID_GROUP_ID for every partition;
//! - partitions of unknown topics (or partition indexes) are
//!   UNKNOWN_TOPIC_OR_PARTITION; the group is consulted for the others;
//! - the group's checks (`validate_txn_offset_commit`): a request without
//!   member (v0-v2, or generation -1 and no member id) is accepted in any
//!   state and creates a missing group; from v3 a member id, group
//!   instance id and generation are checked as OffsetCommit does
//!   (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION; a missing
//!   group with a generation is ILLEGAL_GENERATION), but a rebalance in
//!   progress does not refuse it; a group error applies to every
//!   partition the group was asked about;
//! - metadata over `offset.metadata.max.bytes` is OFFSET_METADATA_TOO_LARGE
//!   for that partition;
//! - the records (ordinary offset commit records, no expire timestamp) are
//!   appended to the group's `__consumer_offsets` partition as one
//!   transactional batch of the producer: that partition's producer state
//!   refuses a fenced epoch (INVALID_PRODUCER_EPOCH). The offsets stay
//!   pending until the transaction's marker is written there (commit
//!   applies them, abort drops them); append failures use the
//!   coordinators' error mapping;
//! - v0-v1 get COORDINATOR_NOT_AVAILABLE for COORDINATOR_LOAD_IN_PROGRESS
//!   (clients before Kafka 2.0 did not expect it).
//!
//! v4 only adds TRANSACTION_ABORTABLE, which Sluice never returns; v5 is
//! transaction version 2 (not served). The transaction verification of
//! KIP-890 (AddPartitionsToTxn v4+ verify-only) is not built: the producer
//! epoch is checked by the partition's producer state only.

use std::sync::Arc;

use proto_kafka::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use proto_kafka::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};
use proto_kafka::ResponseError;
use sluice_coordinator::offsets::PartitionCommit;

use super::offset_commit::{append_error, partition_error};
use super::Ctx;
use crate::broker::Broker;
use crate::groups::{lock, now_ms, CommitPoint};

pub(crate) const VERSIONS: (i16, i16) = (0, 4);

pub(crate) async fn handle(
    broker: &Arc<Broker>,
    req: TxnOffsetCommitRequest,
    ctx: &Ctx,
) -> TxnOffsetCommitResponse {
    let (mut resp, point) = respond(broker, req, ctx);
    let codes = resp.topics.iter_mut().flat_map(|t| t.partitions.iter_mut());
    broker
        .groups
        .answer_when_committed(point, codes.map(|p| &mut p.error_code))
        .await;
    resp
}

/// The response as the coordinator decides it, and where its records
/// must be replicated to before it goes out.
pub(crate) fn respond(
    broker: &Arc<Broker>,
    req: TxnOffsetCommitRequest,
    ctx: &Ctx,
) -> (TxnOffsetCommitResponse, Option<CommitPoint>) {
    let group = req.group_id.0.to_string();
    let image = broker.image();
    // (topic index, partition, code): `None` while waiting for the group.
    let mut slots: Vec<(usize, i32, Option<i16>)> = Vec::new();
    let mut commits: Vec<PartitionCommit> = Vec::new();
    let mut pending: Vec<usize> = Vec::new();
    for (ti, t) in req.topics.iter().enumerate() {
        let name = t.name.0.to_string();
        let topic = image.topic(&name);
        for p in &t.partitions {
            let known = topic.is_some_and(|tp| tp.partitions.contains_key(&p.partition_index));
            if group.is_empty() {
                let code = ResponseError::InvalidGroupId.code();
                slots.push((ti, p.partition_index, Some(code)));
            } else if known {
                pending.push(slots.len());
                slots.push((ti, p.partition_index, None));
                commits.push(PartitionCommit {
                    topic: name.clone(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: if ctx.version >= 2 {
                        p.committed_leader_epoch
                    } else {
                        -1
                    },
                    metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                });
            } else {
                let code = ResponseError::UnknownTopicOrPartition.code();
                slots.push((ti, p.partition_index, Some(code)));
            }
        }
    }
    let mut point = None;
    if !commits.is_empty() {
        let (results, written) = commit(broker, &req, &group, &commits);
        point = written;
        for (slot, code) in pending.into_iter().zip(results) {
            slots[slot].2 = Some(code);
        }
    }
    let mut resp = TxnOffsetCommitResponse::default();
    for (ti, t) in req.topics.iter().enumerate() {
        let mut rt = TxnOffsetCommitResponseTopic::default();
        rt.name = t.name.clone();
        rt.partitions = slots
            .iter()
            .filter(|s| s.0 == ti)
            .map(|&(_, partition, code)| {
                let mut rp = TxnOffsetCommitResponsePartition::default();
                rp.partition_index = partition;
                let mut code = code.unwrap_or(0);
                if ctx.version < 2 && code == ResponseError::CoordinatorLoadInProgress.code() {
                    code = ResponseError::CoordinatorNotAvailable.code();
                }
                rp.error_code = code;
                rp
            })
            .collect();
        resp.topics.push(rt);
    }
    (resp, point)
}

/// Checks the group, appends the records as the producer's transactional
/// batch and keeps them pending; one error code per commit, in order.
fn commit(
    broker: &Broker,
    req: &TxnOffsetCommitRequest,
    group: &str,
    commits: &[PartitionCommit],
) -> (Vec<i16>, Option<CommitPoint>) {
    let all = |code: i16| (vec![code; commits.len()], None);
    let shard = match broker.groups.shard(broker, group) {
        Ok(s) => s,
        Err(e) => return all(e.code.code()),
    };
    let mut shard = lock(&shard);
    let now = now_ms();
    let member_id = req.member_id.to_string();
    let instance_id = req.group_instance_id.as_ref().map(|s| s.to_string());
    if let Err(e) = shard.groups.validate_txn_offset_commit(
        now,
        group,
        &member_id,
        instance_id.as_deref(),
        req.generation_id,
    ) {
        tracing::debug!(group, error = ?e, "TxnOffsetCommit refused");
        return all(e.code());
    }
    let outcome = shard.offsets.commit(group, commits, now, None);
    let appended = broker
        .groups
        .commit_txn_records(
            &mut shard,
            req.producer_id.0,
            req.producer_epoch,
            &outcome.records,
        )
        .map_err(|e| {
            tracing::debug!(group, producer_id = req.producer_id.0, error = ?e, "TxnOffsetCommit append failed");
            append_error(&e)
        });
    let codes = outcome
        .results
        .iter()
        .map(|r| match (&r.result, &appended) {
            (Err(e), _) => partition_error(e),
            (Ok(()), Err(code)) => *code,
            (Ok(()), Ok(())) => 0,
        })
        .collect();
    let point = (appended.is_ok() && !outcome.records.is_empty()).then(|| shard.commit_point());
    (codes, point)
}

#[cfg(test)]
#[path = "txn_offset_commit_tests.rs"]
mod tests;
