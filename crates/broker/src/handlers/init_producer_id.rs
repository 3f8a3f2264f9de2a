//! InitProducerId (key 22): a producer id and epoch for an idempotent or
//! transactional producer.
//!
//! As Kafka's `KafkaApis.handleInitProducerIdRequest` and
//! `TransactionCoordinator.handleInitProducerId`:
//! - v3+ carries the producer's current id and epoch (KIP-360): both -1, or
//!   both set; one of them -1 is INVALID_REQUEST.
//! - Without a transactional id the request is always granted a new id at
//!   epoch 0, whether or not the current id and epoch are given: Kafka
//!   keeps no state for idempotent producer ids, so there is nothing to
//!   bump. Idempotent producers bump their epoch themselves (the Java
//!   client's `bumpIdempotentProducerEpoch`) and ask for a new id when the
//!   epoch is exhausted; kafka-python 3 asks with its current id and epoch
//!   and takes whatever id and epoch come back.
//! - An empty transactional id is INVALID_REQUEST. Any other goes to the
//!   transaction coordinator of its `__transaction_state` partition
//!   (created on first need, module `txn_coordinator`): a new id gets a
//!   producer id at epoch 0, a known one its epoch bumped (fencing the
//!   previous producer; an open transaction of it is aborted first and the
//!   caller gets CONCURRENT_TRANSACTIONS until the abort is done),
//!   INVALID_TRANSACTION_TIMEOUT outside 1..=`transaction.max.timeout.ms`
//!   (design 012). The answer is sent once its `__transaction_state` record
//!   is in the log. PRODUCER_FENCED is sent as INVALID_PRODUCER_EPOCH
//!   below v4, which old clients understand.
//! - No block to be had (the metadata log failed): COORDINATOR_LOAD_IN_PROGRESS,
//!   what Kafka answers while its next block has not arrived, so clients
//!   retry. Every id handed out: UNKNOWN_SERVER_ERROR.
//!
//! Errors carry producer id and epoch -1 (`RecordBatch.NO_PRODUCER_ID` /
//! `NO_PRODUCER_EPOCH`). v5 adds TRANSACTION_ABORTABLE, which the
//! coordinator never returns (transaction version 2 is not built).

use std::sync::Arc;

use proto_kafka::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use proto_kafka::ResponseError;
use sluice_coordinator::txn::{self as machine, TxnResponse};
use sluice_coordinator::KafkaError;

use super::Ctx;
use crate::broker::{ApiError, Broker};
use crate::txn_coordinator::{call, next_producer_id};

pub(crate) const VERSIONS: (i16, i16) = (0, 5);

/// `RecordBatch.NO_PRODUCER_ID` / `NO_PRODUCER_EPOCH`.
const NO_PRODUCER_ID: i64 = -1;
const NO_PRODUCER_EPOCH: i16 = -1;

pub(crate) async fn handle(
    broker: &Arc<Broker>,
    req: InitProducerIdRequest,
    ctx: &Ctx,
) -> InitProducerIdResponse {
    let mut resp = InitProducerIdResponse::default();
    let outcome = match req.transactional_id.as_ref().map(|t| t.0.to_string()) {
        None => {
            let b = Arc::clone(broker);
            crate::blocking::on_pool(move || idempotent(&b, &req)).await
        }
        Some(id) => transactional(broker, id, &req, ctx.version).await,
    };
    match outcome {
        Ok((id, epoch)) => {
            tracing::debug!(client = %ctx.client_id, producer_id = id, epoch, "initialized a producer");
            resp.producer_id = ProducerId(id);
            resp.producer_epoch = epoch;
        }
        Err(e) => {
            tracing::debug!(client = %ctx.client_id, code = ?e.code, message = e.message.as_deref().unwrap_or(""), "InitProducerId refused");
            resp.error_code = e.code.code();
            resp.producer_id = ProducerId(NO_PRODUCER_ID);
            resp.producer_epoch = NO_PRODUCER_EPOCH;
        }
    }
    resp
}

/// The producer's current id and epoch (KIP-360), or INVALID_REQUEST when
/// only one of them is given.
fn current(req: &InitProducerIdRequest) -> Result<Option<(i64, i16)>, ApiError> {
    let (id, epoch) = (req.producer_id.0, req.producer_epoch);
    match (id == NO_PRODUCER_ID, epoch == NO_PRODUCER_EPOCH) {
        (true, true) => Ok(None),
        (false, false) => Ok(Some((id, epoch))),
        _ => Err(ApiError::new(
            ResponseError::InvalidRequest,
            format!("producer id {id} and epoch {epoch}: give both or neither"),
        )),
    }
}

fn idempotent(broker: &Broker, req: &InitProducerIdRequest) -> Result<(i64, i16), ApiError> {
    current(req)?;
    next_producer_id(broker)
        .map(|id| (id, 0))
        .map_err(|e| ApiError::new(code(e), e.to_string()))
}

async fn transactional(
    broker: &Arc<Broker>,
    id: String,
    req: &InitProducerIdRequest,
    version: i16,
) -> Result<(i64, i16), ApiError> {
    let producer_id_and_epoch = current(req)?;
    if id.is_empty() {
        return Err(ApiError::new(
            ResponseError::InvalidRequest,
            "the transactional id is empty",
        ));
    }
    let mreq = machine::InitProducerIdRequest {
        transactional_id: id.clone(),
        transaction_timeout_ms: req.transaction_timeout_ms,
        producer_id_and_epoch,
    };
    let answer = call(broker, id, true, move |b, m, now, token| {
        m.init_producer_id(now, token, &mreq, &mut || next_producer_id(b))
    })
    .await;
    let fenced_as = |e: KafkaError| {
        if version < 4 && e == KafkaError::ProducerFenced {
            KafkaError::InvalidProducerEpoch
        } else {
            e
        }
    };
    match answer {
        Ok(TxnResponse::InitProducerId(r)) => match r.error {
            None => Ok((r.producer_id, r.producer_epoch)),
            Some(e) => Err(ApiError::new(code(fenced_as(e)), e.to_string())),
        },
        Ok(other) => {
            tracing::error!(
                ?other,
                "the transaction coordinator answered InitProducerId with another API's response"
            );
            Err(ApiError::code(ResponseError::UnknownServerError))
        }
        Err(e) => Err(ApiError::new(code(e), e.to_string())),
    }
}

/// The wire error of a coordinator outcome.
pub(crate) fn code(e: KafkaError) -> ResponseError {
    ResponseError::try_from_code(e.code()).unwrap_or(ResponseError::UnknownServerError)
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::{ApiKey, TransactionalId};
    use proto_kafka::protocol::StrBytes;

    use super::super::test_support::{call, open_broker};
    use super::*;

    fn request(txn: Option<&str>, id: i64, epoch: i16) -> InitProducerIdRequest {
        let mut r = InitProducerIdRequest::default();
        r.transactional_id = txn.map(|t| TransactionalId(StrBytes::from_string(t.into())));
        r.transaction_timeout_ms = 60_000;
        r.producer_id = ProducerId(id);
        r.producer_epoch = epoch;
        r
    }

    async fn init_at(
        broker: &Arc<Broker>,
        v: i16,
        req: &InitProducerIdRequest,
    ) -> InitProducerIdResponse {
        call(broker, ApiKey::InitProducerId, v, req)
            .await
            .expect("a response")
    }

    fn answer(r: &InitProducerIdResponse) -> (i16, i64, i16) {
        (r.error_code, r.producer_id.0, r.producer_epoch)
    }

    /// Every version hands out the next id at epoch 0; v3+ with a current
    /// id and epoch still gets a new id (no state is kept for idempotent
    /// producers), never one handed out before, also after a restart.
    #[tokio::test]
    async fn every_version_hands_out_new_ids_at_epoch_zero() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        let mut expected = 0;
        for v in VERSIONS.0..=VERSIONS.1 {
            let r = init_at(&broker, v, &request(None, -1, -1)).await;
            assert_eq!(answer(&r), (0, expected, 0), "v{v}");
            assert_eq!(r.throttle_time_ms, 0);
            expected += 1;
            if v >= 3 {
                let r = init_at(&broker, v, &request(None, expected - 1, 0)).await;
                assert_eq!(answer(&r), (0, expected, 0), "v{v} with the current id");
                expected += 1;
            }
        }
        broker.shutdown().expect("shutdown");
        drop(broker);
        let broker = open_broker(dir.path(), &[]);
        let r = init_at(&broker, 4, &request(None, -1, -1)).await;
        assert_eq!(answer(&r), (0, 1000, 0), "the next block after a restart");
        broker.shutdown().expect("shutdown");
    }

    #[tokio::test]
    async fn half_given_ids_and_empty_transactional_ids_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        let invalid = ResponseError::InvalidRequest.code();
        for v in VERSIONS.0..=VERSIONS.1 {
            for txn in [None, Some("tx-1")] {
                if v >= 3 {
                    for (id, epoch) in [(-1, 0), (5, -1)] {
                        let r = init_at(&broker, v, &request(txn, id, epoch)).await;
                        assert_eq!(
                            answer(&r),
                            (invalid, -1, -1),
                            "v{v} {txn:?} id {id} epoch {epoch}"
                        );
                    }
                }
            }
            let r = init_at(&broker, v, &request(Some(""), -1, -1)).await;
            assert_eq!(answer(&r), (invalid, -1, -1), "v{v} empty transactional id");
        }
        // None of that used an id or created __transaction_state.
        let r = init_at(&broker, 2, &request(None, -1, -1)).await;
        assert_eq!(answer(&r), (0, 0, 0));
        assert!(broker
            .image()
            .topic(crate::internal_topics::TRANSACTION_STATE_TOPIC)
            .is_none());
        broker.shutdown().expect("shutdown");
    }

    /// The transactional path at every version: a new id gets a fresh
    /// producer id at epoch 0 (creating `__transaction_state`), the next
    /// call bumps the epoch; a timeout above `transaction.max.timeout.ms`
    /// or not positive is INVALID_TRANSACTION_TIMEOUT; v3+ with a producer
    /// id and epoch that are not the id's current ones is PRODUCER_FENCED,
    /// sent as INVALID_PRODUCER_EPOCH to v3.
    #[tokio::test]
    async fn transactional_ids_get_epochs_of_their_own_producer_id() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(
            dir.path(),
            &[
                ("transaction.state.log.num.partitions", "2"),
                ("transaction.max.timeout.ms", "60000"),
            ],
        );
        let mut next_id = 0;
        for v in VERSIONS.0..=VERSIONS.1 {
            let txn = format!("tx-v{v}");
            let r = init_at(&broker, v, &request(Some(&txn), -1, -1)).await;
            assert_eq!(
                r,
                InitProducerIdResponse::default()
                    .with_producer_id(ProducerId(next_id))
                    .with_producer_epoch(0),
                "v{v} new id"
            );
            let r = init_at(&broker, v, &request(Some(&txn), -1, -1)).await;
            assert_eq!(answer(&r), (0, next_id, 1), "v{v} again: epoch bumped");
            for timeout in [60_001, 0, -5] {
                let mut req = request(Some(&txn), -1, -1);
                req.transaction_timeout_ms = timeout;
                let r = init_at(&broker, v, &req).await;
                let code = ResponseError::InvalidTransactionTimeout.code();
                assert_eq!(answer(&r), (code, -1, -1), "v{v} timeout {timeout}");
            }
            if v >= 3 {
                // KIP-360: the current id and epoch re-initialize.
                let r = init_at(&broker, v, &request(Some(&txn), next_id, 1)).await;
                assert_eq!(answer(&r), (0, next_id, 2), "v{v} KIP-360 bump");
                let fenced = if v >= 4 {
                    ResponseError::ProducerFenced
                } else {
                    ResponseError::InvalidProducerEpoch
                };
                let r = init_at(&broker, v, &request(Some(&txn), next_id + 500, 0)).await;
                assert_eq!(
                    answer(&r),
                    (fenced.code(), -1, -1),
                    "v{v} other producer id"
                );
            }
            next_id += 1;
        }
        let topic = broker
            .image()
            .topic(crate::internal_topics::TRANSACTION_STATE_TOPIC)
            .cloned()
            .expect("created");
        assert_eq!(topic.partitions.len(), 2);
        // Idempotent producers draw from the same allocator.
        let r = init_at(&broker, 4, &request(None, -1, -1)).await;
        assert_eq!(answer(&r), (0, next_id, 0));
        broker.shutdown().expect("shutdown");
        drop(broker);
        // After a restart the ids keep their producer id and epoch.
        let broker = open_broker(dir.path(), &[("transaction.max.timeout.ms", "60000")]);
        let r = init_at(&broker, 4, &request(Some("tx-v0"), -1, -1)).await;
        assert_eq!(answer(&r), (0, 0, 2), "tx-v0 after a restart");
        broker.shutdown().expect("shutdown");
    }

    /// InitProducerId over an open transaction fences the producer: the
    /// transaction is aborted with a bumped epoch, the caller gets
    /// CONCURRENT_TRANSACTIONS until the abort is written, then the next
    /// epoch.
    #[tokio::test]
    async fn init_over_an_open_transaction_aborts_it_first() {
        use crate::txn_coordinator::testing::{add, start, wait_state};
        use sluice_coordinator::txn::TransactionState;
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[("transaction.state.log.num.partitions", "1")]);
        broker.create_topic("t", 1, 1, &[], false).expect("topic");
        let r = init_at(&broker, 1, &request(Some("tx"), -1, -1)).await;
        assert_eq!(answer(&r), (0, 0, 0));
        assert_eq!(add(&broker, "tx", 0, 0, &[("t", &[0])]).await, 0);
        // Markers are not sent yet (no background task): the abort waits.
        let r = init_at(&broker, 1, &request(Some("tx"), -1, -1)).await;
        let concurrent = ResponseError::ConcurrentTransactions.code();
        assert_eq!(answer(&r), (concurrent, -1, -1));
        let r = init_at(&broker, 1, &request(Some("tx"), -1, -1)).await;
        assert_eq!(answer(&r), (concurrent, -1, -1), "still aborting");
        let runner = start(&broker);
        wait_state(&broker, "tx", Some(TransactionState::CompleteAbort)).await;
        let r = init_at(&broker, 1, &request(Some("tx"), -1, -1)).await;
        assert_eq!(answer(&r), (0, 0, 2), "the fence took epoch 1");
        runner.stop().await;
        broker.shutdown().expect("shutdown");
    }
}
