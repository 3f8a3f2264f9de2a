//! InitProducerId with a transactional id (Kafka's
//! `TransactionCoordinator.handleInitProducerId` and
//! `prepareInitProducerIdTransit`):
//!
//! - an unknown id gets a new producer id (from the [`ProducerIdSource`])
//!   and epoch 0;
//! - a known id without an open transaction gets its epoch bumped, which
//!   fences the previous producer; once the epoch is exhausted
//!   (`i16::MAX - 1`) it gets a new producer id at epoch 0;
//! - KIP-360: a producer that sends its current id and epoch may
//!   re-initialize (bump), a retry of a bump that succeeded gets the same
//!   answer, anything older is PRODUCER_FENCED;
//! - an Ongoing transaction of the previous producer is aborted first
//!   with a bumped epoch (PrepareEpochFence, then PrepareAbort and
//!   markers); the client gets CONCURRENT_TRANSACTIONS once the abort is
//!   in the log and retries;
//! - a transaction whose markers are being written answers
//!   CONCURRENT_TRANSACTIONS.

use crate::kafka_error::KafkaError;
use crate::txn::state::{EndReply, Then, TransactionState};
use crate::txn::types::{
    Effects, InitProducerIdRequest, InitProducerIdResponse, ProducerIdSource, RequestToken,
    TxnResponse,
};
use crate::txn::{state::TxnMetadata, TransactionCoordinator};

impl TransactionCoordinator {
    /// InitProducerId. The response arrives in the returned effects (an
    /// error) or in those of the `append_completed` / `append_failed` call
    /// for the record it emits.
    pub fn init_producer_id(
        &mut self,
        now_ms: i64,
        token: RequestToken,
        req: &InitProducerIdRequest,
        ids: &mut dyn ProducerIdSource,
    ) -> Effects {
        let mut fx = Effects::default();
        if let Err(e) = self.try_init_producer_id(now_ms, token, req, ids, &mut fx) {
            fx.respond(
                token,
                TxnResponse::InitProducerId(InitProducerIdResponse::error(e)),
            );
        }
        fx
    }

    fn try_init_producer_id(
        &mut self,
        now_ms: i64,
        token: RequestToken,
        req: &InitProducerIdRequest,
        ids: &mut dyn ProducerIdSource,
        fx: &mut Effects,
    ) -> Result<(), KafkaError> {
        let id = req.transactional_id.as_str();
        let timeout = req.transaction_timeout_ms;
        if id.is_empty() {
            return Err(KafkaError::InvalidRequest);
        }
        if timeout <= 0 || timeout > self.cfg.max_timeout_ms {
            return Err(KafkaError::InvalidTransactionTimeout);
        }
        self.check_serving(id)?;
        if !self.txns.contains_key(id) {
            // As Kafka, the new id is in memory (Empty, no epoch) before its
            // first record; if that append fails it stays so.
            let producer_id = ids.next_producer_id()?;
            self.txns.insert(
                id.to_string(),
                TxnMetadata::new(id, producer_id, timeout, now_ms),
            );
        }
        let Some(meta) = self.txns.get_mut(id) else {
            return Err(KafkaError::UnknownServerError);
        };
        if meta.pending.is_some() {
            return Err(KafkaError::ConcurrentTransactions);
        }
        if let Some((pid, epoch)) = req.producer_id_and_epoch {
            // Fence unless the id was just created (no epoch yet), the id
            // is the current one (the epoch is checked below), or it is the
            // previous one with an exhausted epoch: a retry of a rotation.
            let valid = meta.producer_epoch == -1
                || pid == meta.producer_id
                || (pid == meta.previous_producer_id
                    && crate::txn::state::is_epoch_exhausted(epoch));
            if !valid {
                return Err(KafkaError::ProducerFenced);
            }
        }
        match meta.state {
            TransactionState::PrepareAbort | TransactionState::PrepareCommit => {
                Err(KafkaError::ConcurrentTransactions)
            }
            TransactionState::CompleteAbort
            | TransactionState::CompleteCommit
            | TransactionState::Empty => {
                let expected_epoch = req.producer_id_and_epoch.map(|(_, e)| e);
                let transit = if meta.is_epoch_exhausted()
                    && expected_epoch.is_none_or(|e| e == meta.producer_epoch)
                {
                    let new_producer_id = ids.next_producer_id()?;
                    meta.prepare_producer_id_rotation(
                        new_producer_id,
                        timeout,
                        now_ms,
                        expected_epoch.is_some(),
                    )?
                } else {
                    meta.prepare_increment_producer_epoch(timeout, expected_epoch, now_ms)?
                };
                self.appends
                    .start(fx, meta, transit, Then::InitProducerId(token));
                Ok(())
            }
            TransactionState::Ongoing => {
                // The epoch bumped here is never returned: the client gets
                // CONCURRENT_TRANSACTIONS and retries, which bumps again
                // (or rotates the producer id if this exhausted it).
                Self::fence_and_abort(
                    &mut self.appends,
                    fx,
                    meta,
                    now_ms,
                    EndReply::FenceForInit(token),
                )
            }
            TransactionState::Dead | TransactionState::PrepareEpochFence => {
                tracing::error!(
                    id,
                    state = meta.state.name(),
                    "transactional id in a state it should never be in"
                );
                Err(KafkaError::UnknownServerError)
            }
        }
    }
}
