//! The requests of a producer inside a transaction (Kafka's
//! `handleAddPartitionsToTransaction` and `endTransaction`, transaction
//! version 0/1): AddPartitionsToTxn v0-v3, AddOffsetsToTxn, EndTxn, and
//! the coordinator's own abort that fences a producer (InitProducerId
//! over an Ongoing transaction, `transaction.timeout.ms`).

use crate::kafka_error::KafkaError;
use crate::offsets::coordinator_partition;
use crate::txn::state::{EndReply, Then, TransactionState, TxnMetadata};
use crate::txn::types::{
    AddOffsetsRequest, AddPartitionsRequest, Effects, EndTxnRequest, EndTxnResponse, RequestToken,
    TopicPartition, TxnResponse, TxnResult,
};
use crate::txn::{Appends, TransactionCoordinator};

/// Name of the consumer offsets topic (AddOffsetsToTxn adds one of its
/// partitions).
const CONSUMER_OFFSETS_TOPIC: &str = "__consumer_offsets";

impl TransactionCoordinator {
    /// AddPartitionsToTxn (v0-v3): one outcome for all the partitions.
    pub fn add_partitions_to_txn(
        &mut self,
        now_ms: i64,
        token: RequestToken,
        req: &AddPartitionsRequest,
    ) -> Effects {
        let mut fx = Effects::default();
        let then = Then::AddPartitions(token);
        if let Err(e) = self.add_partitions(
            now_ms,
            &mut fx,
            then,
            &req.transactional_id,
            req.producer_id,
            req.producer_epoch,
            &req.partitions,
        ) {
            fx.respond(token, TxnResponse::AddPartitions(e));
        }
        fx
    }

    /// AddOffsetsToTxn: adds partition `abs(hash(group)) %
    /// offsets_partitions` of `__consumer_offsets` (the group
    /// coordinator's partition count: the existing topic's).
    pub fn add_offsets_to_txn(
        &mut self,
        now_ms: i64,
        token: RequestToken,
        req: &AddOffsetsRequest,
        offsets_partitions: i32,
    ) -> Effects {
        let mut fx = Effects::default();
        let tp = TopicPartition::new(
            CONSUMER_OFFSETS_TOPIC,
            coordinator_partition(&req.group_id, offsets_partitions),
        );
        if let Err(e) = self.add_partitions(
            now_ms,
            &mut fx,
            Then::AddOffsets(token),
            &req.transactional_id,
            req.producer_id,
            req.producer_epoch,
            std::slice::from_ref(&tp),
        ) {
            fx.respond(token, TxnResponse::AddOffsets(e));
        }
        fx
    }

    /// Adds partitions: `Ok(())` when a record was emitted or the answer
    /// (NONE, already added) was; `Err(Some(e))` to answer `e`.
    #[allow(clippy::too_many_arguments)]
    fn add_partitions(
        &mut self,
        now_ms: i64,
        fx: &mut Effects,
        then: Then,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
    ) -> Result<(), Option<KafkaError>> {
        if id.is_empty() {
            return Err(Some(KafkaError::InvalidRequest));
        }
        self.check_serving(id).map_err(Some)?;
        let Some(meta) = self.txns.get_mut(id) else {
            return Err(Some(KafkaError::InvalidProducerIdMapping));
        };
        if meta.producer_id != producer_id {
            return Err(Some(KafkaError::InvalidProducerIdMapping));
        }
        if meta.producer_epoch != producer_epoch {
            return Err(Some(KafkaError::ProducerFenced));
        }
        if meta.pending.is_some()
            || matches!(
                meta.state,
                TransactionState::PrepareCommit | TransactionState::PrepareAbort
            )
        {
            return Err(Some(KafkaError::ConcurrentTransactions));
        }
        if meta.state == TransactionState::Ongoing
            && partitions.iter().all(|tp| meta.partitions.contains(tp))
        {
            // Already in the transaction: answer at once, no record.
            return Err(None);
        }
        let transit = meta
            .prepare_add_partitions(partitions, now_ms)
            .map_err(Some)?;
        self.appends.start(fx, meta, transit, then);
        Ok(())
    }

    /// EndTxn (v0-v4). The response arrives in the returned effects, or
    /// once the PrepareCommit/PrepareAbort record is confirmed; the markers
    /// are written after that.
    pub fn end_txn(&mut self, now_ms: i64, token: RequestToken, req: &EndTxnRequest) -> Effects {
        let mut fx = Effects::default();
        match self.try_end_txn(now_ms, token, req, &mut fx) {
            Ok(None) => {}
            Ok(Some(answer)) => fx.respond(token, TxnResponse::EndTxn(answer)),
            Err(e) => fx.respond(token, TxnResponse::EndTxn(EndTxnResponse::error(e))),
        }
        fx
    }

    fn try_end_txn(
        &mut self,
        now_ms: i64,
        token: RequestToken,
        req: &EndTxnRequest,
        fx: &mut Effects,
    ) -> Result<Option<EndTxnResponse>, KafkaError> {
        let id = req.transactional_id.as_str();
        if id.is_empty() {
            return Err(KafkaError::InvalidRequest);
        }
        self.check_serving(id)?;
        let Some(meta) = self.txns.get_mut(id) else {
            return Err(KafkaError::InvalidProducerIdMapping);
        };
        if meta.producer_id != req.producer_id {
            return Err(KafkaError::InvalidProducerIdMapping);
        }
        // From a client (transaction version 0/1) the epoch must match.
        if req.producer_epoch != meta.producer_epoch {
            return Err(KafkaError::ProducerFenced);
        }
        if meta.pending.is_some() {
            return Err(KafkaError::ConcurrentTransactions);
        }
        let done = EndTxnResponse {
            error: None,
            producer_id: meta.producer_id,
            producer_epoch: meta.producer_epoch,
        };
        use TransactionState::*;
        match (meta.state, req.result) {
            (Ongoing, result) => {
                let transit = meta.prepare_abort_or_commit(result, now_ms)?;
                self.appends.start(
                    fx,
                    meta,
                    transit,
                    Then::EndTxn {
                        reply: EndReply::Client(token),
                        result,
                        epoch_fence: false,
                    },
                );
                Ok(None)
            }
            // A retry of an EndTxn that completed: NONE again.
            (CompleteCommit, TxnResult::Commit) | (CompleteAbort, TxnResult::Abort) => {
                Ok(Some(done))
            }
            // A retry while the markers are written.
            (PrepareCommit, TxnResult::Commit) | (PrepareAbort, TxnResult::Abort) => {
                Err(KafkaError::ConcurrentTransactions)
            }
            (CompleteCommit | CompleteAbort | PrepareCommit | PrepareAbort | Empty, _) => {
                tracing::debug!(id, state = meta.state.name(), result = ?req.result,
                    "EndTxn does not fit the transaction's state");
                Err(KafkaError::InvalidTxnState)
            }
            (Dead | PrepareEpochFence, _) => {
                tracing::error!(
                    id,
                    state = meta.state.name(),
                    "transactional id in a state it should never be in"
                );
                Err(KafkaError::UnknownServerError)
            }
        }
    }

    /// Aborts `meta`'s Ongoing transaction with a bumped epoch, fencing
    /// its producer (Kafka's `prepareFenceProducerEpoch` followed by
    /// `endTransaction(ABORT, isFromClient = false)`). The bumped epoch is
    /// set in memory before the record is appended, as Kafka does, so the
    /// old producer is fenced at once; if the append fails it stays
    /// bumped and `has_failed_epoch_fence` keeps the next fence from
    /// bumping again.
    pub(crate) fn fence_and_abort(
        appends: &mut Appends,
        fx: &mut Effects,
        meta: &mut TxnMetadata,
        now_ms: i64,
        reply: EndReply,
    ) -> Result<(), KafkaError> {
        if meta.pending.is_some() || meta.state != TransactionState::Ongoing {
            return Err(KafkaError::ConcurrentTransactions);
        }
        let bumped = meta.fence_epoch()?;
        // PrepareEpochFence is only a pending state: it gives way to
        // PrepareAbort with the bumped epoch in the same step.
        meta.producer_epoch = bumped;
        meta.last_producer_epoch = crate::txn::types::NO_PRODUCER_EPOCH;
        let transit = meta.prepare_abort_or_commit(TxnResult::Abort, now_ms)?;
        appends.start(
            fx,
            meta,
            transit,
            Then::EndTxn {
                reply,
                result: TxnResult::Abort,
                epoch_fence: true,
            },
        );
        Ok(())
    }
}
