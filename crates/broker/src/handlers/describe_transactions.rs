//! DescribeTransactions (key 65) v0: the state of transactional ids this
//! node coordinates (Kafka's `TransactionCoordinator.handleDescribeTransactions`):
//! state name, timeout, start time, producer id and epoch, and the
//! partitions of the transaction (while markers are written, those still
//! without one). An empty id is INVALID_REQUEST; an unknown or expiring one
//! TRANSACTIONAL_ID_NOT_FOUND; an id whose `__transaction_state` partition
//! this node does not coordinate (or the topic does not exist yet)
//! NOT_COORDINATOR; COORDINATOR_LOAD_IN_PROGRESS while it loads. On error
//! only the id and the code are set, the rest keeps the schema's defaults.

use std::sync::Arc;

use proto_kafka::messages::describe_transactions_response::{TopicData, TransactionState};
use proto_kafka::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId, TopicName,
};
use proto_kafka::protocol::StrBytes;
use sluice_coordinator::txn::DescribedTxn;
use sluice_coordinator::{error_code, KafkaError};

use super::Ctx;
use crate::broker::Broker;
use crate::groups::lock;

pub(crate) const VERSIONS: (i16, i16) = (0, 0);

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: DescribeTransactionsRequest,
    _ctx: &Ctx,
) -> DescribeTransactionsResponse {
    let mut resp = DescribeTransactionsResponse::default();
    for id in req.transactional_ids {
        let mut state = TransactionState::default();
        state.transactional_id = id.clone();
        match describe(broker, &id.0) {
            Ok(d) if d.error.is_none() => {
                state.transaction_state = StrBytes::from_string(d.state);
                state.transaction_timeout_ms = d.transaction_timeout_ms;
                state.transaction_start_time_ms = d.transaction_start_time_ms;
                state.producer_id = ProducerId(d.producer_id);
                state.producer_epoch = d.producer_epoch;
                state.topics = d
                    .topics
                    .into_iter()
                    .map(|t| {
                        let mut td = TopicData::default();
                        td.topic = TopicName(StrBytes::from_string(t.topic));
                        td.partitions = t.partitions;
                        td
                    })
                    .collect();
            }
            Ok(d) => state.error_code = error_code(d.error),
            Err(e) => state.error_code = e.code(),
        }
        resp.transaction_states.push(state);
    }
    resp
}

fn describe(broker: &Broker, id: &str) -> Result<DescribedTxn, KafkaError> {
    if id.is_empty() {
        return Err(KafkaError::InvalidRequest);
    }
    let shard = broker.txns.shard(broker, id, false)?;
    let shard = lock(&shard);
    shard
        .machine
        .describe_transactions(&[id.to_string()])
        .pop()
        .ok_or(KafkaError::UnknownServerError)
}

#[cfg(test)]
mod tests;
