//! Kafka's transaction coordinator as a sans-IO state machine (design
//! 012; Kafka: `TransactionCoordinator`, `TransactionStateManager`,
//! `TransactionMetadata`, the marker channel's bookkeeping).
//!
//! [`TransactionCoordinator`] owns the transactional ids of one
//! `__transaction_state` partition (a shard, like a group shard of
//! `__consumer_offsets`). Every call takes the current time (`now_ms`, a
//! manual clock) and returns [`Effects`]:
//!
//! - `records`: [`PendingRecord`]s to append to the shard's partition.
//!   Nothing a record carries takes effect before the runtime reports it
//!   with [`append_completed`](TransactionCoordinator::append_completed);
//!   until then the transactional id has a *pending* transition (Kafka's
//!   `pendingState`) and other requests for it get CONCURRENT_TRANSACTIONS.
//!   [`append_failed`](TransactionCoordinator::append_failed) rolls the
//!   transition back and answers the waiting request with the error.
//! - `responses`: final answers keyed by the caller's [`RequestToken`]. A
//!   response that depends on a record is emitted by the call that
//!   confirms the record, never before.
//! - `markers`: [`WriteMarkers`] to write once a PrepareCommit or
//!   PrepareAbort is in the log. The runtime reports each partition's
//!   outcome with [`markers_completed`](TransactionCoordinator::markers_completed);
//!   when every partition has its marker the coordinator emits the
//!   CompleteCommit/CompleteAbort record.
//!
//! There are no threads and no timers inside: the runtime asks
//! [`next_deadline`](TransactionCoordinator::next_deadline) and calls
//! [`tick`](TransactionCoordinator::tick) then (transaction timeouts,
//! transactional-id expiration, marker and completion retries).
//!
//! Life cycle: [`new`](TransactionCoordinator::new) (Unloaded: requests
//! get NOT_COORDINATOR) → [`begin_load`](TransactionCoordinator::begin_load)
//! (COORDINATOR_LOAD_IN_PROGRESS) → [`replay`](TransactionCoordinator::replay)
//! every record of the partition → [`complete_load`](TransactionCoordinator::complete_load)
//! (serving; markers of transactions left in PrepareCommit/PrepareAbort
//! are re-emitted) → [`unload`](TransactionCoordinator::unload) when the
//! partition moves away.
//!
//! Transaction version 2 (KIP-890 part 2: epoch bump per transaction,
//! EndTxn v5, AddPartitionsToTxn v4+ verification) is not implemented.
//!
//! Files:
//! - `schema.rs`: `__transaction_state` key and value, byte-exact.
//! - `types.rs`: config, requests, responses, effects, events.
//! - `state.rs`: [`TransactionState`] and one id's metadata and transitions.
//! - `init.rs`: InitProducerId (new ids, epoch bumps, KIP-360, fencing).
//! - `ops.rs`: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, the abort
//!   that fences a producer.
//! - `complete.rs`: append confirmations and failures, markers.
//! - `admin.rs`: DescribeTransactions, ListTransactions, load, unload,
//!   timers.
//! - `tests/`: transition tests per API with a manual clock, and a
//!   model-based proptest.

mod admin;
mod complete;
mod init;
mod ops;
pub mod schema;
mod state;
mod types;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use crate::error::CoordinatorError;
use crate::kafka_error::KafkaError;
use crate::offsets::{coordinator_partition, Record};

pub use schema::{TransactionLogKey, TransactionLogValue, TxnRecordKey, TxnTopicPartitions};
pub use state::{is_epoch_exhausted, TransactionState};
pub use types::{
    AddOffsetsRequest, AddPartitionsRequest, AppendId, DescribedTopic, DescribedTxn, Effects,
    EndTxnRequest, EndTxnResponse, InitProducerIdRequest, InitProducerIdResponse,
    ListTransactionsFilter, ListedTxn, ListedTxns, MarkerCompletion, MarkerOutcome, PendingRecord,
    ProducerIdSource, RequestToken, ShardStatus, TopicPartition, TxnConfig, TxnRecord, TxnResponse,
    TxnResult, WriteMarkers, DEFAULT_TRANSACTION_STATE_PARTITIONS, NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
};

use state::{Pending, Step, Then, Transit, TxnMetadata};

/// Name of the transaction state topic.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// The `__transaction_state` partition that coordinates
/// `transactional_id`: Kafka's `Utils.abs(transactionalId.hashCode) %
/// transaction.state.log.num.partitions` (Java's `String.hashCode`).
pub fn partition_for(transactional_id: &str, num_partitions: i32) -> i32 {
    coordinator_partition(transactional_id, num_partitions)
}

/// The records in flight: ids handed out and which transactional id each
/// belongs to.
#[derive(Debug, Default)]
pub(crate) struct Appends {
    next: u64,
    in_flight: BTreeMap<AppendId, String>,
}

impl Appends {
    /// Emits `transit`'s record (a tombstone for Dead) and makes it the
    /// id's pending transition.
    fn start(&mut self, fx: &mut Effects, meta: &mut TxnMetadata, transit: Transit, then: Then) {
        let id = AppendId(self.next);
        self.next += 1;
        let value = (transit.state != TransactionState::Dead).then(|| transit.to_value());
        fx.records.push(PendingRecord {
            id,
            record: TxnRecord {
                transactional_id: meta.transactional_id.clone(),
                value,
            },
        });
        self.in_flight.insert(id, meta.transactional_id.clone());
        meta.pending = Some(Pending {
            transit,
            step: Step::Append { id, then },
        });
    }
}

/// The transactional ids of one `__transaction_state` partition.
#[derive(Debug)]
pub struct TransactionCoordinator {
    cfg: TxnConfig,
    /// The `__transaction_state` partition this shard serves.
    partition: i32,
    status: ShardStatus,
    /// The partition's leader epoch when it was loaded (Kafka's coordinator
    /// epoch): carried by markers.
    coordinator_epoch: i32,
    txns: BTreeMap<String, TxnMetadata>,
    appends: Appends,
    /// Ids whose markers or completion record are under way (the ones
    /// `tick` may have to retry).
    completing: BTreeSet<String>,
    next_abort_check: Option<i64>,
    next_expiration_check: Option<i64>,
}

impl TransactionCoordinator {
    /// A shard for `partition`, Unloaded: it serves after `begin_load`,
    /// `replay` and `complete_load`.
    pub fn new(cfg: TxnConfig, partition: i32) -> Self {
        TransactionCoordinator {
            cfg,
            partition,
            status: ShardStatus::Unloaded,
            coordinator_epoch: -1,
            txns: BTreeMap::new(),
            appends: Appends::default(),
            completing: BTreeSet::new(),
            next_abort_check: None,
            next_expiration_check: None,
        }
    }

    pub fn config(&self) -> &TxnConfig {
        &self.cfg
    }

    pub fn partition(&self) -> i32 {
        self.partition
    }

    pub fn status(&self) -> ShardStatus {
        self.status
    }

    /// The leader epoch given to the last `begin_load`.
    pub fn coordinator_epoch(&self) -> i32 {
        self.coordinator_epoch
    }

    /// The (confirmed) state of a transactional id.
    pub fn state(&self, transactional_id: &str) -> Option<TransactionState> {
        self.txns.get(transactional_id).map(|m| m.state)
    }

    /// The state a pending transition is moving the id to.
    pub fn pending_state(&self, transactional_id: &str) -> Option<TransactionState> {
        self.txns.get(transactional_id)?.pending_state()
    }

    /// The (confirmed) producer id and epoch of a transactional id.
    pub fn producer_id_and_epoch(&self, transactional_id: &str) -> Option<(i64, i16)> {
        self.txns
            .get(transactional_id)
            .map(|m| (m.producer_id, m.producer_epoch))
    }

    /// The partitions of the id's transaction (while markers are written,
    /// those still without one).
    pub fn partitions(&self, transactional_id: &str) -> Vec<TopicPartition> {
        self.txns
            .get(transactional_id)
            .map(|m| m.partitions.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The transactional ids held, in order.
    pub fn transactional_ids(&self) -> impl Iterator<Item = &str> {
        self.txns.keys().map(String::as_str)
    }

    /// The id's value as it would be written now (its confirmed state).
    pub fn snapshot(&self, transactional_id: &str) -> Option<TransactionLogValue> {
        let m = self.txns.get(transactional_id)?;
        Some(
            Transit {
                producer_id: m.producer_id,
                prev_producer_id: m.previous_producer_id,
                next_producer_id: m.next_producer_id,
                producer_epoch: m.producer_epoch,
                last_producer_epoch: m.last_producer_epoch,
                txn_timeout_ms: m.txn_timeout_ms,
                state: m.state,
                partitions: m.partitions.clone(),
                txn_start_timestamp: m.txn_start_timestamp,
                txn_last_update_timestamp: m.txn_last_update_timestamp,
                client_transaction_version: m.client_transaction_version,
            }
            .to_value(),
        )
    }

    /// The key and value bytes of a record this shard emitted, the value
    /// at the configured `log_value_version`.
    pub fn encode(&self, record: &TxnRecord) -> Result<Record, CoordinatorError> {
        record.to_record(self.cfg.log_value_version)
    }

    /// Whether this shard serves `transactional_id` now: NOT_COORDINATOR
    /// when unloaded or when the id hashes to another partition,
    /// COORDINATOR_LOAD_IN_PROGRESS while loading.
    fn check_serving(&self, transactional_id: &str) -> Result<(), KafkaError> {
        match self.status {
            ShardStatus::Unloaded => Err(KafkaError::NotCoordinator),
            ShardStatus::Loading => Err(KafkaError::CoordinatorLoadInProgress),
            ShardStatus::Active => {
                if partition_for(transactional_id, self.cfg.num_partitions) == self.partition {
                    Ok(())
                } else {
                    Err(KafkaError::NotCoordinator)
                }
            }
        }
    }
}
