//! AddPartitionsToTxn (key 24) v0-v3: a producer adds partitions to its
//! open transaction before producing to them (Kafka's
//! `KafkaApis.handleAddPartitionsToTxnRequest` for client versions and
//! `TransactionCoordinator.handleAddPartitionsToTransaction`).
//!
//! The broker checks the partitions first: an internal topic is
//! TOPIC_AUTHORIZATION_FAILED (Kafka leaves internal topics out of the
//! authorized set of a client request), a partition the metadata does not
//! have is UNKNOWN_TOPIC_OR_PARTITION; if any fails, the others are
//! OPERATION_NOT_ATTEMPTED and nothing is added. Otherwise the coordinator
//! answers one error for every partition of the request (design 012:
//! INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS,
//! NOT_COORDINATOR, ...), once the transaction's new partitions are in
//! `__transaction_state`. PRODUCER_FENCED is sent as
//! INVALID_PRODUCER_EPOCH below v2.
//!
//! v4+ (batches of transactions, `verify_only`: the broker-to-broker
//! verification of transaction version 2) is not served.

use std::sync::Arc;

use proto_kafka::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use proto_kafka::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse};
use proto_kafka::ResponseError;
use sluice_coordinator::txn::{AddPartitionsRequest, TopicPartition, TxnResponse};
use sluice_coordinator::KafkaError;

use super::Ctx;
use crate::broker::Broker;
use crate::txn_coordinator::call;

pub(crate) const VERSIONS: (i16, i16) = (0, 3);

pub(crate) async fn handle(
    broker: &Arc<Broker>,
    req: AddPartitionsToTxnRequest,
    ctx: &Ctx,
) -> AddPartitionsToTxnResponse {
    let requested: Vec<TopicPartition> = req
        .v3_and_below_topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|&p| TopicPartition::new(t.name.0.to_string(), p))
        })
        .collect();
    let checks: Vec<Option<ResponseError>> = requested.iter().map(|tp| check(broker, tp)).collect();
    let errors: Vec<i16> = if checks.iter().any(Option::is_some) {
        checks
            .iter()
            .map(|c| c.unwrap_or(ResponseError::OperationNotAttempted).code())
            .collect()
    } else {
        let code = add(broker, &req, requested.clone(), ctx.version).await;
        vec![code; requested.len()]
    };
    let mut resp = AddPartitionsToTxnResponse::default();
    let mut errors = errors.into_iter();
    for t in &req.v3_and_below_topics {
        let mut tr = AddPartitionsToTxnTopicResult::default();
        tr.name = t.name.clone();
        for &p in &t.partitions {
            let mut pr = AddPartitionsToTxnPartitionResult::default();
            pr.partition_index = p;
            pr.partition_error_code = errors.next().unwrap_or(0);
            tr.results_by_partition.push(pr);
        }
        resp.results_by_topic_v3_and_below.push(tr);
    }
    resp
}

/// The broker's own check of one partition (before the coordinator).
fn check(broker: &Broker, tp: &TopicPartition) -> Option<ResponseError> {
    if crate::internal_topics::is_internal(&tp.topic) {
        return Some(ResponseError::TopicAuthorizationFailed);
    }
    let known = !crate::internal_topics::is_hidden(&tp.topic)
        && broker
            .image()
            .topic(&tp.topic)
            .is_some_and(|t| t.partitions.contains_key(&tp.partition));
    (!known).then_some(ResponseError::UnknownTopicOrPartition)
}

/// The coordinator's answer for all the partitions.
async fn add(
    broker: &Arc<Broker>,
    req: &AddPartitionsToTxnRequest,
    partitions: Vec<TopicPartition>,
    version: i16,
) -> i16 {
    let id = req.v3_and_below_transactional_id.0.to_string();
    let mreq = AddPartitionsRequest {
        transactional_id: id.clone(),
        producer_id: req.v3_and_below_producer_id.0,
        producer_epoch: req.v3_and_below_producer_epoch,
        partitions,
    };
    let answer = call(broker, id, false, move |_, m, now, token| {
        m.add_partitions_to_txn(now, token, &mreq)
    })
    .await;
    let error = match answer {
        Ok(TxnResponse::AddPartitions(e)) => e,
        Ok(other) => {
            tracing::error!(?other, "the transaction coordinator answered AddPartitionsToTxn with another API's response");
            Some(KafkaError::UnknownServerError)
        }
        Err(e) => Some(e),
    };
    match error {
        None => 0,
        Some(KafkaError::ProducerFenced) if version < 2 => KafkaError::InvalidProducerEpoch.code(),
        Some(e) => e.code(),
    }
}

#[cfg(test)]
mod tests;
