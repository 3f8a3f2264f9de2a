//! AddOffsetsToTxn (key 25) v0-v4: a transactional producer that will
//! commit a consumer group's offsets in its transaction (TxnOffsetCommit)
//! adds the group's `__consumer_offsets` partition to the transaction, so
//! the COMMIT/ABORT marker reaches it (Kafka's
//! `KafkaApis.handleAddOffsetsToTxnRequest`). The partition is
//! `abs(hash(group)) % partitions` with the partition count the group
//! coordinator uses (the existing topic's, else
//! `offsets.topic.num.partitions`).
//!
//! Errors as AddPartitionsToTxn (design 012); PRODUCER_FENCED is sent as
//! INVALID_PRODUCER_EPOCH below v2. v4 only adds TRANSACTION_ABORTABLE,
//! which this coordinator never returns.

use std::sync::Arc;

use proto_kafka::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse};
use sluice_coordinator::txn::{AddOffsetsRequest, TxnResponse};
use sluice_coordinator::KafkaError;

use super::Ctx;
use crate::broker::Broker;
use crate::txn_coordinator::call;

pub(crate) const VERSIONS: (i16, i16) = (0, 4);

pub(crate) async fn handle(
    broker: &Arc<Broker>,
    req: AddOffsetsToTxnRequest,
    ctx: &Ctx,
) -> AddOffsetsToTxnResponse {
    let id = req.transactional_id.0.to_string();
    let offsets_partitions = broker.groups.partition_count(broker);
    let mreq = AddOffsetsRequest {
        transactional_id: id.clone(),
        producer_id: req.producer_id.0,
        producer_epoch: req.producer_epoch,
        group_id: req.group_id.0.to_string(),
    };
    let answer = call(broker, id, false, move |_, m, now, token| {
        m.add_offsets_to_txn(now, token, &mreq, offsets_partitions)
    })
    .await;
    let error = match answer {
        Ok(TxnResponse::AddOffsets(e)) => e,
        Ok(other) => {
            tracing::error!(
                ?other,
                "the transaction coordinator answered AddOffsetsToTxn with another API's response"
            );
            Some(KafkaError::UnknownServerError)
        }
        Err(e) => Some(e),
    };
    let mut resp = AddOffsetsToTxnResponse::default();
    resp.error_code = match error {
        None => 0,
        Some(KafkaError::ProducerFenced) if ctx.version < 2 => {
            KafkaError::InvalidProducerEpoch.code()
        }
        Some(e) => e.code(),
    };
    resp
}

#[cfg(test)]
mod tests;
