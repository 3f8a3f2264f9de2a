//! What happens after a record is in the log (or failed to get there),
//! and the markers (Kafka: the callbacks of `appendTransactionToLog`,
//! `TransactionMarkerChannelManager`, `TransactionMarkerRequestCompletionHandler`).
//!
//! - A confirmed record installs its transition and answers the request
//!   waiting on it. A PrepareCommit/PrepareAbort then moves to the
//!   markers: the transition to CompleteCommit/CompleteAbort is prepared
//!   (pending, so requests get CONCURRENT_TRANSACTIONS) and a
//!   [`WriteMarkers`] effect is emitted. Each partition whose marker is
//!   written leaves the transaction; when none is left the completion
//!   record is emitted.
//! - A failed record rolls its transition back and answers the waiting
//!   request with the runtime's error (COORDINATOR_NOT_AVAILABLE,
//!   NOT_COORDINATOR, ...). A failed completion record is retried on
//!   COORDINATOR_NOT_AVAILABLE (Kafka's retry queue); after any other
//!   error the transaction stays in PrepareCommit/PrepareAbort until the
//!   partition is reloaded, which writes its markers again.

use crate::kafka_error::KafkaError;
use crate::txn::state::{EndReply, MarkerProgress, Pending, Step, Then, TransactionState};
use crate::txn::types::{
    AppendId, EndTxnResponse, InitProducerIdResponse, MarkerCompletion, MarkerOutcome, ShardStatus,
    TxnResponse, TxnResult, WriteMarkers,
};
use crate::txn::{Appends, Effects, TransactionCoordinator, TxnMetadata};

impl TransactionCoordinator {
    /// The record `id` is in the log (appended and replicated as acks=all
    /// requires). Unknown ids (e.g. from before an unload) are ignored.
    pub fn append_completed(&mut self, now_ms: i64, id: AppendId) -> Effects {
        let mut fx = Effects::default();
        let Some((txn_id, pending, then)) = self.take_pending_append(id) else {
            return fx;
        };
        if then == Then::Dead {
            // The tombstone is in: the id is gone.
            self.txns.remove(&txn_id);
            return fx;
        }
        let Some(meta) = self.txns.get_mut(&txn_id) else {
            return fx;
        };
        if !meta.complete_transition(&pending.transit) {
            meta.pending = None;
            answer_error(&mut fx, then, KafkaError::UnknownServerError);
            self.completing.remove(&txn_id);
            return fx;
        }
        let t = &pending.transit;
        match then {
            Then::InitProducerId(token) => fx.respond(
                token,
                TxnResponse::InitProducerId(InitProducerIdResponse {
                    error: None,
                    producer_id: t.producer_id,
                    producer_epoch: t.producer_epoch,
                }),
            ),
            Then::AddPartitions(token) => fx.respond(token, TxnResponse::AddPartitions(None)),
            Then::AddOffsets(token) => fx.respond(token, TxnResponse::AddOffsets(None)),
            Then::EndTxn { reply, result, .. } => {
                match reply {
                    EndReply::Client(token) => fx.respond(
                        token,
                        TxnResponse::EndTxn(EndTxnResponse {
                            error: None,
                            producer_id: meta.producer_id,
                            producer_epoch: meta.producer_epoch,
                        }),
                    ),
                    EndReply::FenceForInit(token) => fx.respond(
                        token,
                        TxnResponse::InitProducerId(InitProducerIdResponse::error(
                            KafkaError::ConcurrentTransactions,
                        )),
                    ),
                    EndReply::Timeout => {
                        tracing::info!(id = %txn_id, "aborting a transaction that timed out");
                    }
                }
                let epoch = self.coordinator_epoch;
                if start_markers(&mut self.appends, &mut fx, meta, now_ms, result, epoch) {
                    self.completing.insert(txn_id);
                }
            }
            Then::Complete => {
                self.completing.remove(&txn_id);
            }
            Then::Dead => {}
        }
        fx
    }

    /// The record `id` could not be appended; `error` is what Kafka maps
    /// the append error to (design 012): COORDINATOR_NOT_AVAILABLE for
    /// UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS(_AFTER_APPEND) and
    /// REQUEST_TIMED_OUT; NOT_COORDINATOR for NOT_LEADER_OR_FOLLOWER and
    /// KAFKA_STORAGE_ERROR; UNKNOWN_SERVER_ERROR for MESSAGE_TOO_LARGE and
    /// RECORD_LIST_TOO_LARGE. The transition is rolled back and the
    /// waiting request gets `error`.
    pub fn append_failed(&mut self, now_ms: i64, id: AppendId, error: KafkaError) -> Effects {
        let mut fx = Effects::default();
        let Some((txn_id, pending, then)) = self.take_pending_append(id) else {
            return fx;
        };
        let Some(meta) = self.txns.get_mut(&txn_id) else {
            return fx;
        };
        tracing::info!(id = %txn_id, to = pending.transit.state.name(), %error,
            "transaction log append failed");
        match then {
            Then::EndTxn {
                epoch_fence: true, ..
            } => meta.has_failed_epoch_fence = true,
            Then::Complete if error == KafkaError::CoordinatorNotAvailable => {
                meta.pending = Some(Pending {
                    transit: pending.transit,
                    step: Step::RetryComplete {
                        at: now_ms.saturating_add(self.cfg.retry_backoff_ms),
                    },
                });
                return fx;
            }
            Then::Complete => {
                // Stays in PrepareCommit/PrepareAbort until a reload.
                self.completing.remove(&txn_id);
            }
            _ => {}
        }
        answer_error(&mut fx, then, error);
        fx
    }

    /// Takes the pending transition whose record is `id`; `None` when the
    /// id is unknown or no longer the id's pending record.
    fn take_pending_append(&mut self, id: AppendId) -> Option<(String, Pending, Then)> {
        let txn_id = self.appends.in_flight.remove(&id)?;
        let meta = self.txns.get_mut(&txn_id)?;
        match &meta.pending {
            Some(Pending {
                step:
                    Step::Append {
                        id: pending_id,
                        then,
                    },
                ..
            }) if *pending_id == id => {
                let then = *then;
                let pending = meta.pending.take()?;
                Some((txn_id, pending, then))
            }
            _ => None,
        }
    }

    /// The runtime's report on markers of one [`WriteMarkers`] effect.
    /// Reports that do not match the transaction's pending markers
    /// (another coordinator epoch, producer epoch or result, a partition
    /// already done) are ignored.
    pub fn markers_completed(&mut self, now_ms: i64, report: &MarkerCompletion) -> Effects {
        let mut fx = Effects::default();
        if self.status != ShardStatus::Active || report.coordinator_epoch != self.coordinator_epoch
        {
            return fx;
        }
        let Some(meta) = self.txns.get_mut(&report.transactional_id) else {
            return fx;
        };
        if meta.producer_id != report.producer_id || meta.producer_epoch != report.producer_epoch {
            return fx;
        }
        let Some(Pending {
            step: Step::Markers(progress),
            ..
        }) = &mut meta.pending
        else {
            return fx;
        };
        if progress.result != report.result {
            return fx;
        }
        for (tp, outcome) in &report.partitions {
            if !meta.partitions.contains(tp) || progress.retry.contains(tp) {
                continue; // a duplicate or stale report
            }
            match outcome {
                MarkerOutcome::Written | MarkerOutcome::Skip => {
                    meta.partitions.remove(tp);
                }
                MarkerOutcome::Retry => {
                    progress.retry.insert(tp.clone());
                    progress
                        .retry_at
                        .get_or_insert(now_ms.saturating_add(self.cfg.retry_backoff_ms));
                }
                MarkerOutcome::Fenced => {
                    tracing::info!(id = %report.transactional_id, partition = %tp,
                        "transaction marker fenced; no more markers are sent for this transaction");
                    progress.stopped = true;
                }
            }
        }
        if progress.stopped {
            progress.retry.clear();
            progress.retry_at = None;
            self.completing.remove(&report.transactional_id);
            return fx;
        }
        if meta.partitions.is_empty() {
            write_completion(&mut self.appends, &mut fx, meta);
        }
        fx
    }

    /// Retries due at `now_ms`: markers that failed with a retriable
    /// error, completion records that failed with
    /// COORDINATOR_NOT_AVAILABLE.
    pub(crate) fn fire_retries(&mut self, now_ms: i64, fx: &mut Effects) {
        let ids: Vec<String> = self.completing.iter().cloned().collect();
        for id in ids {
            let Some(meta) = self.txns.get_mut(&id) else {
                self.completing.remove(&id);
                continue;
            };
            match &mut meta.pending {
                Some(Pending {
                    step: Step::Markers(p),
                    ..
                }) if !p.stopped && p.retry_at.is_some_and(|at| at <= now_ms) => {
                    let partitions: Vec<_> = std::mem::take(&mut p.retry).into_iter().collect();
                    p.retry_at = None;
                    fx.markers.push(WriteMarkers {
                        transactional_id: id.clone(),
                        producer_id: meta.producer_id,
                        producer_epoch: meta.producer_epoch,
                        coordinator_epoch: self.coordinator_epoch,
                        result: p.result,
                        partitions,
                    });
                }
                Some(Pending {
                    step: Step::RetryComplete { at },
                    ..
                }) if *at <= now_ms => write_completion(&mut self.appends, fx, meta),
                _ => {}
            }
        }
    }

    /// The earliest retry due.
    pub(crate) fn next_retry(&self) -> Option<i64> {
        self.completing
            .iter()
            .filter_map(|id| match &self.txns.get(id)?.pending {
                Some(Pending {
                    step: Step::Markers(p),
                    ..
                }) if !p.stopped => p.retry_at,
                Some(Pending {
                    step: Step::RetryComplete { at },
                    ..
                }) => Some(*at),
                _ => None,
            })
            .min()
    }
}

/// Answers the request waiting on a failed (or inconsistent) transition.
fn answer_error(fx: &mut Effects, then: Then, error: KafkaError) {
    match then {
        Then::InitProducerId(token)
        | Then::EndTxn {
            reply: EndReply::FenceForInit(token),
            ..
        } => fx.respond(
            token,
            TxnResponse::InitProducerId(InitProducerIdResponse::error(error)),
        ),
        Then::AddPartitions(token) => fx.respond(token, TxnResponse::AddPartitions(Some(error))),
        Then::AddOffsets(token) => fx.respond(token, TxnResponse::AddOffsets(Some(error))),
        Then::EndTxn {
            reply: EndReply::Client(token),
            ..
        } => fx.respond(token, TxnResponse::EndTxn(EndTxnResponse::error(error))),
        Then::EndTxn {
            reply: EndReply::Timeout,
            ..
        }
        | Then::Complete
        | Then::Dead => {}
    }
}

/// Moves a transaction whose PrepareCommit/PrepareAbort is in the log to
/// its markers: prepares the completion (pending) and emits the markers,
/// or the completion record at once when there is no partition. Returns
/// whether the transaction is now completing (false when the completion
/// could not be prepared, which only a broken invariant causes).
pub(crate) fn start_markers(
    appends: &mut Appends,
    fx: &mut Effects,
    meta: &mut TxnMetadata,
    now_ms: i64,
    result: TxnResult,
    coordinator_epoch: i32,
) -> bool {
    let transit = match meta.prepare_complete(now_ms) {
        Ok(t) => t,
        Err(_) => return false,
    };
    meta.pending = Some(Pending {
        transit,
        step: Step::Markers(MarkerProgress {
            result,
            retry: Default::default(),
            retry_at: None,
            stopped: false,
        }),
    });
    if meta.partitions.is_empty() {
        write_completion(appends, fx, meta);
    } else {
        fx.markers.push(WriteMarkers {
            transactional_id: meta.transactional_id.clone(),
            producer_id: meta.producer_id,
            producer_epoch: meta.producer_epoch,
            coordinator_epoch,
            result,
            partitions: meta.partitions.iter().cloned().collect(),
        });
    }
    true
}

/// Emits the CompleteCommit/CompleteAbort record of a transaction whose
/// markers are all written.
fn write_completion(appends: &mut Appends, fx: &mut Effects, meta: &mut TxnMetadata) {
    let Some(pending) = meta.pending.take() else {
        return;
    };
    if !matches!(
        pending.transit.state,
        TransactionState::CompleteCommit | TransactionState::CompleteAbort
    ) {
        tracing::error!(id = %meta.transactional_id, to = pending.transit.state.name(),
            "completion of a transaction that is not completing");
        return;
    }
    appends.start(fx, meta, pending.transit, Then::Complete);
}
