//! EndTxn (key 26) v0-v4: a producer commits or aborts its transaction
//! (Kafka's `KafkaApis.handleEndTxnRequest` and
//! `TransactionCoordinator.handleEndTransaction`, transaction version
//! 0/1). The answer comes once PrepareCommit/PrepareAbort is in
//! `__transaction_state`; the markers are written after it (until they
//! are, further requests for the id get CONCURRENT_TRANSACTIONS). A retry
//! of a completed commit or abort is NONE; a mismatch is
//! INVALID_TXN_STATE; unknown id or producer INVALID_PRODUCER_ID_MAPPING;
//! an old epoch PRODUCER_FENCED, sent as INVALID_PRODUCER_EPOCH below v2
//! (design 012).
//!
//! v5 (transaction version 2: the epoch bumped on every EndTxn, returned
//! in `producer_id`/`producer_epoch`) is not served.

use std::sync::Arc;

use proto_kafka::messages::{EndTxnRequest, EndTxnResponse};
use sluice_coordinator::txn::{self as machine, TxnResponse, TxnResult};
use sluice_coordinator::KafkaError;

use super::Ctx;
use crate::broker::Broker;
use crate::txn_coordinator::call;

pub(crate) const VERSIONS: (i16, i16) = (0, 4);

pub(crate) async fn handle(broker: &Arc<Broker>, req: EndTxnRequest, ctx: &Ctx) -> EndTxnResponse {
    let id = req.transactional_id.0.to_string();
    let mreq = machine::EndTxnRequest {
        transactional_id: id.clone(),
        producer_id: req.producer_id.0,
        producer_epoch: req.producer_epoch,
        result: if req.committed {
            TxnResult::Commit
        } else {
            TxnResult::Abort
        },
    };
    let answer = call(broker, id, false, move |_, m, now, token| {
        m.end_txn(now, token, &mreq)
    })
    .await;
    let error = match answer {
        Ok(TxnResponse::EndTxn(r)) => r.error,
        Ok(other) => {
            tracing::error!(
                ?other,
                "the transaction coordinator answered EndTxn with another API's response"
            );
            Some(KafkaError::UnknownServerError)
        }
        Err(e) => Some(e),
    };
    let mut resp = EndTxnResponse::default();
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
