//! InitProducerId (key 22) for idempotent producers: a producer id never
//! handed out before (blocks recorded in the metadata log, module
//! `producer_ids`) with epoch 0.
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
//! - An empty transactional id is INVALID_REQUEST. Any other transactional
//!   id needs a transaction coordinator, which Sluice does not have yet:
//!   COORDINATOR_NOT_AVAILABLE, as FindCoordinator answers for it (a Kafka
//!   broker that does not coordinate the id answers NOT_COORDINATOR; clients
//!   treat both alike: look the coordinator up again and retry).
//! - No block to be had (the metadata log failed): COORDINATOR_LOAD_IN_PROGRESS,
//!   what Kafka answers while its next block has not arrived, so clients
//!   retry. Every id handed out: UNKNOWN_SERVER_ERROR.
//!
//! Errors carry producer id and epoch -1 (`RecordBatch.NO_PRODUCER_ID` /
//! `NO_PRODUCER_EPOCH`). v4 adds PRODUCER_FENCED and v5 TRANSACTION_ABORTABLE,
//! both transactional errors never returned here.

use std::sync::Arc;

use proto_kafka::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use proto_kafka::ResponseError;
use sluice_controller::ControllerError;

use super::Ctx;
use crate::broker::{ApiError, Broker};

pub(crate) const VERSIONS: (i16, i16) = (0, 5);

/// `RecordBatch.NO_PRODUCER_ID` / `NO_PRODUCER_EPOCH`.
const NO_PRODUCER_ID: i64 = -1;
const NO_PRODUCER_EPOCH: i16 = -1;

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: InitProducerIdRequest,
    ctx: &Ctx,
) -> InitProducerIdResponse {
    let mut resp = InitProducerIdResponse::default();
    match init(broker, &req) {
        Ok((id, epoch)) => {
            tracing::debug!(client = %ctx.client_id, producer_id = id, "initialized an idempotent producer");
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

fn init(broker: &Broker, req: &InitProducerIdRequest) -> Result<(i64, i16), ApiError> {
    let (id, epoch) = (req.producer_id.0, req.producer_epoch);
    if (id == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH) {
        return Err(ApiError::new(
            ResponseError::InvalidRequest,
            format!("producer id {id} and epoch {epoch}: give both or neither"),
        ));
    }
    match req.transactional_id.as_ref().map(|t| t.0.as_str()) {
        None => {}
        Some("") => {
            return Err(ApiError::new(
                ResponseError::InvalidRequest,
                "the transactional id is empty",
            ))
        }
        Some(_) => {
            return Err(ApiError::new(
                ResponseError::CoordinatorNotAvailable,
                "The coordinator is not available: Sluice has no transaction coordinator.",
            ))
        }
    }
    match broker.producer_ids.next(&broker.metadata, broker.node_id) {
        Ok(id) => Ok((id, 0)),
        Err(e @ ControllerError::ProducerIdsExhausted(_)) => {
            tracing::error!(error = %e, "cannot hand out a producer id");
            Err(ApiError::new(
                ResponseError::UnknownServerError,
                e.to_string(),
            ))
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot allocate a producer id block");
            Err(ApiError::new(
                ResponseError::CoordinatorLoadInProgress,
                format!("Producer ID block is not available: {e}"),
            ))
        }
    }
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
    async fn half_given_ids_and_transactional_ids_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        let invalid = ResponseError::InvalidRequest.code();
        let unavailable = ResponseError::CoordinatorNotAvailable.code();
        for v in VERSIONS.0..=VERSIONS.1 {
            if v >= 3 {
                for (id, epoch) in [(-1, 0), (5, -1)] {
                    let r = init_at(&broker, v, &request(None, id, epoch)).await;
                    assert_eq!(answer(&r), (invalid, -1, -1), "v{v} id {id} epoch {epoch}");
                }
            }
            let r = init_at(&broker, v, &request(Some(""), -1, -1)).await;
            assert_eq!(answer(&r), (invalid, -1, -1), "v{v} empty transactional id");
            let r = init_at(&broker, v, &request(Some("tx-1"), -1, -1)).await;
            assert_eq!(answer(&r), (unavailable, -1, -1), "v{v} transactional id");
        }
        // None of that used an id.
        let r = init_at(&broker, 2, &request(None, -1, -1)).await;
        assert_eq!(answer(&r), (0, 0, 0));
        broker.shutdown().expect("shutdown");
    }
}
