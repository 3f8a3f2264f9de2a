//! ListTransactions (key 66) v0-v1: the transactions of every
//! `__transaction_state` partition this node coordinates (Kafka's
//! `TransactionStateManager.listTransactionStates`), filtered by state
//! names and producer ids (v0) and by running longer than a duration (v1;
//! an Empty id has no start time and always passes, as in Kafka). Names
//! that are no state (case-sensitive) come back in
//! `unknown_state_filters`; Dead ids are never listed; while a partition
//! loads the answer is COORDINATOR_LOAD_IN_PROGRESS alone.
//!
//! v2 (a transactional-id pattern, KIP-1152) is not served.

use std::sync::Arc;

use proto_kafka::messages::list_transactions_response::TransactionState;
use proto_kafka::messages::{
    ListTransactionsRequest, ListTransactionsResponse, ProducerId, TransactionalId,
};
use proto_kafka::protocol::StrBytes;
use sluice_coordinator::txn::ListTransactionsFilter;

use super::Ctx;
use crate::broker::Broker;

pub(crate) const VERSIONS: (i16, i16) = (0, 1);

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: ListTransactionsRequest,
    ctx: &Ctx,
) -> ListTransactionsResponse {
    let filter = ListTransactionsFilter {
        states: req.state_filters.iter().map(|s| s.to_string()).collect(),
        producer_ids: req.producer_id_filters.iter().map(|p| p.0).collect(),
        duration_ms: if ctx.version >= 1 {
            req.duration_filter
        } else {
            -1
        },
    };
    let mut resp = ListTransactionsResponse::default();
    match broker.txns.list_transactions(&filter) {
        Ok(listed) => {
            resp.unknown_state_filters = listed
                .unknown_state_filters
                .into_iter()
                .map(StrBytes::from_string)
                .collect();
            resp.transaction_states = listed
                .transactions
                .into_iter()
                .map(|t| {
                    let mut s = TransactionState::default();
                    s.transactional_id = TransactionalId(StrBytes::from_string(t.transactional_id));
                    s.producer_id = ProducerId(t.producer_id);
                    s.transaction_state = StrBytes::from_string(t.state);
                    s
                })
                .collect();
        }
        Err(e) => resp.error_code = e.code(),
    }
    resp
}

#[cfg(test)]
mod tests;
