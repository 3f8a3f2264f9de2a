//! Queries, loading and timers of a shard: DescribeTransactions and
//! ListTransactions (Kafka's `handleDescribeTransactions`,
//! `listTransactionStates`); loading from the log (Kafka's
//! `loadTransactionsForTxnTopicPartition`), unloading; and the periodic
//! work `tick` does: aborting transactions past `transaction.timeout.ms`
//! (Kafka's `abortTimedOutTransactions`), removing ids idle longer than
//! `transactional.id.expiration.ms` (`removeExpiredTransactionalIds`),
//! and retries of markers and completion records.

use crate::error::CoordinatorError;
use crate::kafka_error::KafkaError;
use crate::txn::complete::start_markers;
use crate::txn::schema::{TransactionLogValue, TxnRecordKey};
use crate::txn::state::{EndReply, Pending, Step, Then, TransactionState, TxnMetadata};
use crate::txn::types::{
    DescribedTopic, DescribedTxn, Effects, EndTxnResponse, InitProducerIdResponse,
    ListTransactionsFilter, ListedTxn, ListedTxns, ShardStatus, TxnResponse, TxnResult,
};
use crate::txn::TransactionCoordinator;

impl TransactionCoordinator {
    /// DescribeTransactions of ids this shard coordinates (the broker
    /// routes each id to its shard and answers NOT_COORDINATOR for shards
    /// it does not hold).
    pub fn describe_transactions(&self, transactional_ids: &[String]) -> Vec<DescribedTxn> {
        transactional_ids
            .iter()
            .map(|id| self.describe_one(id))
            .collect()
    }

    fn describe_one(&self, id: &str) -> DescribedTxn {
        if id.is_empty() {
            return DescribedTxn::error(id, KafkaError::InvalidRequest);
        }
        if let Err(e) = self.check_serving(id) {
            return DescribedTxn::error(id, e);
        }
        let Some(m) = self.txns.get(id) else {
            return DescribedTxn::error(id, KafkaError::TransactionalIdNotFound);
        };
        if m.state == TransactionState::Dead {
            return DescribedTxn::error(id, KafkaError::TransactionalIdNotFound);
        }
        let mut topics: Vec<DescribedTopic> = Vec::new();
        for tp in &m.partitions {
            match topics.last_mut() {
                Some(t) if t.topic == tp.topic => t.partitions.push(tp.partition),
                _ => topics.push(DescribedTopic {
                    topic: tp.topic.clone(),
                    partitions: vec![tp.partition],
                }),
            }
        }
        DescribedTxn {
            transactional_id: id.to_string(),
            error: None,
            state: m.state.name().to_string(),
            transaction_timeout_ms: m.txn_timeout_ms,
            transaction_start_time_ms: m.txn_start_timestamp,
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
            topics,
        }
    }

    /// ListTransactions over this shard. COORDINATOR_LOAD_IN_PROGRESS while
    /// loading (Kafka fails the whole response if any partition loads); an
    /// unloaded shard lists nothing. Dead ids are never listed.
    pub fn list_transactions(
        &self,
        now_ms: i64,
        filter: &ListTransactionsFilter,
    ) -> Result<ListedTxns, KafkaError> {
        if self.status == ShardStatus::Loading {
            return Err(KafkaError::CoordinatorLoadInProgress);
        }
        let mut states = Vec::new();
        let mut unknown_state_filters = Vec::new();
        for name in &filter.states {
            match TransactionState::from_name(name) {
                Some(s) => states.push(s),
                None => unknown_state_filters.push(name.clone()),
            }
        }
        let include = |m: &TxnMetadata| {
            m.state != TransactionState::Dead
                && (filter.producer_ids.is_empty() || filter.producer_ids.contains(&m.producer_id))
                && (filter.states.is_empty() || states.contains(&m.state))
                && !(filter.duration_ms >= 0
                    && now_ms.saturating_sub(m.txn_start_timestamp) <= filter.duration_ms)
        };
        let transactions = if self.status == ShardStatus::Active {
            self.txns
                .values()
                .filter(|m| include(m))
                .map(|m| ListedTxn {
                    transactional_id: m.transactional_id.clone(),
                    producer_id: m.producer_id,
                    state: m.state.name().to_string(),
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(ListedTxns {
            unknown_state_filters,
            transactions,
        })
    }

    /// Starts (re)loading the partition at leader epoch
    /// `coordinator_epoch`: everything held is dropped (parked requests
    /// get NOT_COORDINATOR, as from `unload`) and requests get
    /// COORDINATOR_LOAD_IN_PROGRESS until `complete_load`.
    pub fn begin_load(&mut self, coordinator_epoch: i32) -> Effects {
        let fx = self.unload();
        self.status = ShardStatus::Loading;
        self.coordinator_epoch = coordinator_epoch;
        fx
    }

    /// Applies one record of the partition, in log order (between
    /// `begin_load` and `complete_load`): the last value of an id wins, a
    /// tombstone removes it, a key of an unknown version is skipped (as
    /// Kafka does). A malformed record is an error and changes nothing;
    /// the runtime logs it and goes on with the next record.
    pub fn replay(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), CoordinatorError> {
        if self.status != ShardStatus::Loading {
            tracing::warn!(partition = self.partition, "replay outside a load ignored");
            return Ok(());
        }
        let id = match TxnRecordKey::decode(key)? {
            TxnRecordKey::Unknown(version) => {
                tracing::warn!(
                    partition = self.partition,
                    version,
                    "unknown __transaction_state key version skipped"
                );
                return Ok(());
            }
            TxnRecordKey::Transaction(k) => k.transactional_id,
        };
        match value {
            None => {
                self.txns.remove(&id);
            }
            Some(bytes) => {
                let v = TransactionLogValue::decode(bytes)?;
                let meta =
                    TxnMetadata::from_value(&id, &v).ok_or(CoordinatorError::MalformedRecord {
                        record: "TransactionLogValue",
                        reason: "unknown transaction status",
                    })?;
                self.txns.insert(id, meta);
            }
        }
        Ok(())
    }

    /// The partition is replayed: serve it. Transactions left in
    /// PrepareCommit/PrepareAbort get their markers written again (the
    /// returned effects), Ongoing ones wait for their timeout, and the
    /// timeout and expiration checks are armed.
    pub fn complete_load(&mut self, now_ms: i64) -> Effects {
        let mut fx = Effects::default();
        if self.status != ShardStatus::Loading {
            return fx;
        }
        self.status = ShardStatus::Active;
        let epoch = self.coordinator_epoch;
        for (id, meta) in self.txns.iter_mut() {
            let result = match meta.state {
                TransactionState::PrepareCommit => TxnResult::Commit,
                TransactionState::PrepareAbort => TxnResult::Abort,
                _ => continue,
            };
            tracing::info!(id = %id, state = meta.state.name(),
                "writing the markers of a loaded transaction");
            if start_markers(&mut self.appends, &mut fx, meta, now_ms, result, epoch) {
                self.completing.insert(id.clone());
            }
        }
        self.next_abort_check = Some(now_ms.saturating_add(self.cfg.abort_timed_out_interval_ms));
        self.next_expiration_check =
            Some(now_ms.saturating_add(self.cfg.remove_expired_interval_ms));
        fx
    }

    /// The partition moved away (or is reloaded): requests waiting on a
    /// record get NOT_COORDINATOR, everything is dropped, and later
    /// reports on records or markers of before are ignored.
    pub fn unload(&mut self) -> Effects {
        let mut fx = Effects::default();
        for (_, meta) in std::mem::take(&mut self.txns) {
            let Some(Pending {
                step: Step::Append { then, .. },
                ..
            }) = meta.pending
            else {
                continue;
            };
            let e = KafkaError::NotCoordinator;
            match then {
                Then::InitProducerId(token)
                | Then::EndTxn {
                    reply: EndReply::FenceForInit(token),
                    ..
                } => fx.respond(
                    token,
                    TxnResponse::InitProducerId(InitProducerIdResponse::error(e)),
                ),
                Then::AddPartitions(token) => {
                    fx.respond(token, TxnResponse::AddPartitions(Some(e)))
                }
                Then::AddOffsets(token) => fx.respond(token, TxnResponse::AddOffsets(Some(e))),
                Then::EndTxn {
                    reply: EndReply::Client(token),
                    ..
                } => fx.respond(token, TxnResponse::EndTxn(EndTxnResponse::error(e))),
                _ => {}
            }
        }
        self.appends.in_flight.clear();
        self.completing.clear();
        self.next_abort_check = None;
        self.next_expiration_check = None;
        self.status = ShardStatus::Unloaded;
        fx
    }

    /// The earliest time at which `tick` has work to do.
    pub fn next_deadline(&self) -> Option<i64> {
        if self.status != ShardStatus::Active {
            return None;
        }
        [
            self.next_abort_check,
            self.next_expiration_check,
            self.next_retry(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Does the work due at `now_ms`: retries, then (every
    /// `abort_timed_out_interval_ms`) aborts transactions past their
    /// timeout, then (every `remove_expired_interval_ms`) removes expired
    /// transactional ids.
    pub fn tick(&mut self, now_ms: i64) -> Effects {
        let mut fx = Effects::default();
        if self.status != ShardStatus::Active {
            return fx;
        }
        self.fire_retries(now_ms, &mut fx);
        if self.next_abort_check.is_some_and(|at| at <= now_ms) {
            self.abort_timed_out(now_ms, &mut fx);
            self.next_abort_check =
                Some(now_ms.saturating_add(self.cfg.abort_timed_out_interval_ms.max(1)));
        }
        if self.next_expiration_check.is_some_and(|at| at <= now_ms) {
            self.remove_expired(now_ms, &mut fx);
            self.next_expiration_check =
                Some(now_ms.saturating_add(self.cfg.remove_expired_interval_ms.max(1)));
        }
        fx
    }

    /// Kafka's `timedOutTransactions` + `abortTimedOutTransactions`: an
    /// Ongoing transaction without a pending transition whose start plus
    /// timeout is before now is aborted with a bumped epoch (the producer
    /// is fenced).
    fn abort_timed_out(&mut self, now_ms: i64, fx: &mut Effects) {
        for meta in self.txns.values_mut() {
            let timed_out = meta.pending.is_none()
                && meta.state == TransactionState::Ongoing
                && meta
                    .txn_start_timestamp
                    .saturating_add(i64::from(meta.txn_timeout_ms))
                    < now_ms;
            if !timed_out {
                continue;
            }
            if let Err(e) =
                Self::fence_and_abort(&mut self.appends, fx, meta, now_ms, EndReply::Timeout)
            {
                tracing::warn!(id = %meta.transactional_id, %e,
                    "rollback of a timed out transaction failed");
            }
        }
    }

    /// Kafka's `removeExpiredTransactionalIds`: an id idle for
    /// `transactional.id.expiration.ms` in Empty, CompleteCommit or
    /// CompleteAbort, without a pending transition, goes Dead (pending)
    /// and its tombstone is emitted; it is removed once the tombstone is
    /// in the log.
    fn remove_expired(&mut self, now_ms: i64, fx: &mut Effects) {
        let horizon = now_ms.saturating_sub(self.cfg.transactional_id_expiration_ms);
        for meta in self.txns.values_mut() {
            if meta.pending.is_some()
                || !meta.state.is_expiration_allowed()
                || meta.txn_last_update_timestamp > horizon
            {
                continue;
            }
            match meta.prepare_dead() {
                Ok(transit) => self.appends.start(fx, meta, transit, Then::Dead),
                Err(e) => tracing::warn!(id = %meta.transactional_id, %e,
                    "expiring a transactional id failed"),
            }
        }
    }
}
