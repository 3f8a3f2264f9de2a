//! `send_offsets_to_transaction`'s requests: AddOffsetsToTxn to the
//! transaction coordinator, then TxnOffsetCommit to the group coordinator
//! (Kafka's `AddOffsetsToTxnHandler` and `TxnOffsetCommitHandler`), under
//! the same one-request-at-a-time lock as the other transactional
//! requests.

use std::collections::BTreeMap;

use proto_kafka::error::ResponseError;
use proto_kafka::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use proto_kafka::messages::{
    AddOffsetsToTxnRequest, ApiKey, GroupId, ProducerId, TopicName, TransactionalId,
    TxnOffsetCommitRequest,
};
use proto_kafka::protocol::StrBytes;

use super::transactional::{
    apply_failure, classify, coordinator_request, fenced_error, producer_of, transactional_id, Step,
};
use super::Inner;
use crate::accumulator::TopicPartition;
use crate::admin::{Admin, OffsetAndMetadata};
use crate::connection::Connection;
use crate::consumer::ConsumerGroupMetadata;
use crate::error::{ClientError, Result};

const ADD_OFFSETS_TO_TXN_MAX: i16 = 4;
/// v5 implies AddOffsetsToTxn (transaction version 2).
const TXN_OFFSET_COMMIT_MAX: i16 = 4;

/// AddOffsetsToTxn, then TxnOffsetCommit to the group coordinator.
pub(super) async fn send_offsets(
    inner: &Inner,
    offsets: BTreeMap<TopicPartition, OffsetAndMetadata>,
    group: ConsumerGroupMetadata,
) -> Result<()> {
    let id = transactional_id(inner)?;
    let (pid, epoch) = producer_of(inner);
    coordinator_request(
        inner,
        ADD_OFFSETS_TO_TXN_MAX,
        |_| {
            let mut req = AddOffsetsToTxnRequest::default();
            req.transactional_id = TransactionalId(StrBytes::from_string(id.clone()));
            req.producer_id = ProducerId(pid);
            req.producer_epoch = epoch;
            req.group_id = GroupId(StrBytes::from_string(group.group_id.clone()));
            req
        },
        |resp, _| match resp.error_code {
            0 => Step::Done(()),
            code => classify(code, "AddOffsetsToTxn"),
        },
    )
    .await?;
    if let Some(t) = inner.lock().txn.as_mut() {
        t.set_started();
    }
    txn_offset_commit(inner, &id, (pid, epoch), offsets, &group).await
}

/// TxnOffsetCommit until every offset is accepted (Kafka's
/// `TxnOffsetCommitHandler`): retriable partition errors are sent again,
/// coordinator errors look the group coordinator up again.
async fn txn_offset_commit(
    inner: &Inner,
    id: &str,
    (pid, epoch): (i64, i16),
    mut pending: BTreeMap<TopicPartition, OffsetAndMetadata>,
    group: &ConsumerGroupMetadata,
) -> Result<()> {
    let admin = Admin::from_cluster(inner.cluster.clone());
    let mut backoff = inner.config.client.retry_backoff;
    let mut conn: Option<Connection> = None;
    loop {
        // Transactional requests go one at a time.
        let io = inner.txn_io.lock().await;
        let sent = async {
            if conn.as_ref().is_none_or(Connection::is_broken) {
                let broker = admin.find_coordinator(&group.group_id).await?;
                conn = Some(
                    Connection::connect(&broker.addr(), inner.cluster.config().connection.clone())
                        .await?,
                );
            }
            let Some(c) = conn.as_mut() else {
                return Err(ClientError::Protocol(
                    "no group coordinator connection".into(),
                ));
            };
            let version = c.version_for(ApiKey::TxnOffsetCommit, TXN_OFFSET_COMMIT_MAX)?;
            let req = txn_offset_commit_request(id, pid, epoch, &pending, group, version);
            c.send(&req, version).await
        }
        .await;
        drop(io);
        let mut step: Option<Step<()>> = None;
        match sent {
            Err(e) if e.is_retriable() => conn = None,
            Err(e) => step = Some(Step::Fatal(e)),
            Ok(resp) => {
                for t in &resp.topics {
                    for p in &t.partitions {
                        let tp = TopicPartition::new(t.name.0.as_str(), p.partition_index);
                        let Some(e) = ClientError::from_code(p.error_code, None, "TxnOffsetCommit")
                        else {
                            pending.remove(&tp);
                            continue;
                        };
                        match e.response_error() {
                            Some(
                                ResponseError::CoordinatorNotAvailable
                                | ResponseError::NotCoordinator
                                | ResponseError::RequestTimedOut,
                            ) => conn = None,
                            _ if e.is_retriable() => {}
                            Some(
                                ResponseError::GroupAuthorizationFailed
                                | ResponseError::FencedInstanceId
                                | ResponseError::TransactionAbortable,
                            ) => step = Some(Step::Abortable(e)),
                            Some(
                                ResponseError::UnknownMemberId | ResponseError::IllegalGeneration,
                            ) => {
                                step = Some(Step::Abortable(ClientError::CommitFailed(format!(
                                    "Transaction offset Commit failed due to consumer group \
                                     metadata mismatch: {e}"
                                ))));
                            }
                            Some(
                                ResponseError::InvalidProducerEpoch | ResponseError::ProducerFenced,
                            ) => {
                                step = Some(Step::Fatal(fenced_error("TxnOffsetCommit")));
                            }
                            _ => step = Some(Step::Fatal(e)),
                        }
                        if step.is_some() {
                            break;
                        }
                    }
                    if step.is_some() {
                        break;
                    }
                }
            }
        }
        if let Some(failure) = step {
            return Err(apply_failure(inner, failure));
        }
        if pending.is_empty() {
            return Ok(());
        }
        if inner.lock().closed {
            return Err(ClientError::IllegalState(
                "TxnOffsetCommit abandoned: the producer is closed".into(),
            ));
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(inner.config.client.retry_backoff_max);
    }
}

fn txn_offset_commit_request(
    id: &str,
    pid: i64,
    epoch: i16,
    offsets: &BTreeMap<TopicPartition, OffsetAndMetadata>,
    group: &ConsumerGroupMetadata,
    version: i16,
) -> TxnOffsetCommitRequest {
    let mut req = TxnOffsetCommitRequest::default();
    req.transactional_id = TransactionalId(StrBytes::from_string(id.to_string()));
    req.group_id = GroupId(StrBytes::from_string(group.group_id.clone()));
    req.producer_id = ProducerId(pid);
    req.producer_epoch = epoch;
    if version >= 3 {
        req.generation_id = group.generation_id;
        req.member_id = StrBytes::from_string(group.member_id.clone());
        req.group_instance_id = group.group_instance_id.clone().map(StrBytes::from_string);
    }
    let mut by_topic: BTreeMap<&str, Vec<TxnOffsetCommitRequestPartition>> = BTreeMap::new();
    for (tp, o) in offsets {
        let mut p = TxnOffsetCommitRequestPartition::default();
        p.partition_index = tp.partition;
        p.committed_offset = o.offset;
        if version >= 2 {
            p.committed_leader_epoch = o.leader_epoch.unwrap_or(-1);
        }
        p.committed_metadata = Some(StrBytes::from_string(
            o.metadata.clone().unwrap_or_default(),
        ));
        by_topic.entry(tp.topic.as_str()).or_default().push(p);
    }
    req.topics = by_topic
        .into_iter()
        .map(|(name, partitions)| {
            let mut t = TxnOffsetCommitRequestTopic::default();
            t.name = TopicName(StrBytes::from_string(name.to_string()));
            t.partitions = partitions;
            t
        })
        .collect();
    req
}
