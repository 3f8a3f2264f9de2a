//! One transactional id's metadata and Kafka's transaction state machine
//! (`TransactionMetadata.scala`): the states and their valid previous
//! states, the `prepare_*` functions that compute a target ([`Transit`],
//! Kafka's `TxnTransitMetadata`) without changing anything, and
//! [`TxnMetadata::complete_transition`], which installs a target once its
//! record is in the log (Kafka's `completeTransitionTo`).
//!
//! Transaction version 2 (epoch bump per transaction, KIP-890 part 2) is
//! not implemented: every transition here has transaction version 0/1
//! semantics, and `client_transaction_version` is kept only so a loaded
//! value is written back unchanged.

use std::collections::BTreeSet;

use crate::kafka_error::KafkaError;
use crate::txn::schema::{TransactionLogValue, TxnTopicPartitions};
use crate::txn::types::{AppendId, RequestToken, TopicPartition, TxnResult, NO_PRODUCER_EPOCH};

/// Kafka's transaction states. `id()` is what the log stores, `name()`
/// what DescribeTransactions and ListTransactions report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TransactionState {
    /// No transaction (after InitProducerId).
    Empty,
    /// Partitions were added; the transaction is open.
    Ongoing,
    /// EndTxn(commit) is in the log; markers are being written.
    PrepareCommit,
    /// EndTxn(abort), a fence or a timeout is in the log; markers are being
    /// written.
    PrepareAbort,
    /// Every partition has its COMMIT marker.
    CompleteCommit,
    /// Every partition has its ABORT marker.
    CompleteAbort,
    /// The id is being removed (expiration); never written to the log.
    Dead,
    /// The epoch is being bumped to fence a producer before aborting its
    /// transaction; a transient pending state, never written to the log.
    PrepareEpochFence,
}

impl TransactionState {
    pub const ALL: [TransactionState; 8] = [
        TransactionState::Empty,
        TransactionState::Ongoing,
        TransactionState::PrepareCommit,
        TransactionState::PrepareAbort,
        TransactionState::CompleteCommit,
        TransactionState::CompleteAbort,
        TransactionState::Dead,
        TransactionState::PrepareEpochFence,
    ];

    /// Kafka's `TransactionState.id` (the log's `transaction_status`).
    pub fn id(self) -> i8 {
        match self {
            TransactionState::Empty => 0,
            TransactionState::Ongoing => 1,
            TransactionState::PrepareCommit => 2,
            TransactionState::PrepareAbort => 3,
            TransactionState::CompleteCommit => 4,
            TransactionState::CompleteAbort => 5,
            TransactionState::Dead => 6,
            TransactionState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.id() == id)
    }

    /// Kafka's state name.
    pub fn name(self) -> &'static str {
        match self {
            TransactionState::Empty => "Empty",
            TransactionState::Ongoing => "Ongoing",
            TransactionState::PrepareCommit => "PrepareCommit",
            TransactionState::PrepareAbort => "PrepareAbort",
            TransactionState::CompleteCommit => "CompleteCommit",
            TransactionState::CompleteAbort => "CompleteAbort",
            TransactionState::Dead => "Dead",
            TransactionState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// The state of a name, case-sensitive as Kafka's `fromName`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The states a transition into `self` may start from.
    pub fn valid_previous_states(self) -> &'static [TransactionState] {
        use TransactionState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[Ongoing, PrepareEpochFence],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteAbort, CompleteCommit],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// Whether an id idle in this state may expire.
    pub fn is_expiration_allowed(self) -> bool {
        matches!(
            self,
            TransactionState::Empty
                | TransactionState::CompleteCommit
                | TransactionState::CompleteAbort
        )
    }
}

/// Kafka's `TransactionMetadata.isEpochExhausted`: epochs stop at
/// `i16::MAX - 1` so the coordinator can always fence with one more bump.
pub fn is_epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

/// A target of a transition (Kafka's `TxnTransitMetadata`): the whole
/// metadata as it will be once the record carrying it is in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Transit {
    pub producer_id: i64,
    pub prev_producer_id: i64,
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    pub last_producer_epoch: i16,
    pub txn_timeout_ms: i32,
    pub state: TransactionState,
    pub partitions: BTreeSet<TopicPartition>,
    pub txn_start_timestamp: i64,
    pub txn_last_update_timestamp: i64,
    pub client_transaction_version: i16,
}

impl Transit {
    /// The log value of this target (Kafka's `TransactionLog.valueToBytes`
    /// before encoding: partitions are null in the Empty state).
    pub fn to_value(&self) -> TransactionLogValue {
        let partitions = if self.state == TransactionState::Empty {
            None
        } else {
            let mut topics: Vec<TxnTopicPartitions> = Vec::new();
            for tp in &self.partitions {
                match topics.last_mut() {
                    Some(t) if t.topic == tp.topic => t.partition_ids.push(tp.partition),
                    _ => topics.push(TxnTopicPartitions {
                        topic: tp.topic.clone(),
                        partition_ids: vec![tp.partition],
                    }),
                }
            }
            Some(topics)
        };
        TransactionLogValue {
            producer_id: self.producer_id,
            previous_producer_id: self.prev_producer_id,
            next_producer_id: self.next_producer_id,
            producer_epoch: self.producer_epoch,
            transaction_timeout_ms: self.txn_timeout_ms,
            transaction_status: self.state.id(),
            transaction_partitions: partitions,
            transaction_last_update_timestamp_ms: self.txn_last_update_timestamp,
            transaction_start_timestamp_ms: self.txn_start_timestamp,
            client_transaction_version: self.client_transaction_version,
        }
    }
}

/// Who gets answered when an EndTxn-like transition's record is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EndReply {
    /// A client's EndTxn.
    Client(RequestToken),
    /// An InitProducerId that found an Ongoing transaction: it gets
    /// CONCURRENT_TRANSACTIONS once the abort is in the log (the client
    /// retries and gets the bumped epoch when the abort completes).
    FenceForInit(RequestToken),
    /// `transaction.timeout.ms` expired: nobody is waiting.
    Timeout,
}

/// What to do once an appended record is confirmed (or fails).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    InitProducerId(RequestToken),
    AddPartitions(RequestToken),
    AddOffsets(RequestToken),
    /// A PrepareCommit/PrepareAbort record; markers follow.
    EndTxn {
        reply: EndReply,
        result: TxnResult,
        /// The record bumps the epoch to fence the previous producer
        /// (Kafka's `isEpochFence`): on failure the bumped epoch stays in
        /// memory and `has_failed_epoch_fence` is set.
        epoch_fence: bool,
    },
    /// The CompleteCommit/CompleteAbort record after the markers.
    Complete,
    /// The expiration tombstone.
    Dead,
}

/// Progress of the markers of a transaction whose PrepareCommit or
/// PrepareAbort is in the log. The partitions still waiting are the
/// metadata's `partitions` (Kafka removes each once its marker is
/// written); those in `retry` wait for `retry_at`, the others are in
/// flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MarkerProgress {
    pub result: TxnResult,
    pub retry: BTreeSet<TopicPartition>,
    pub retry_at: Option<i64>,
    /// A partition answered Fenced: nothing more is sent (Kafka's
    /// `removeMarkersForTxn`); the transaction waits for a reload.
    pub stopped: bool,
}

/// Where a pending transition is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// The record is being appended.
    Append { id: AppendId, then: Then },
    /// Markers are being written; the completion record follows.
    Markers(MarkerProgress),
    /// The completion record failed with COORDINATOR_NOT_AVAILABLE and is
    /// appended again at `at`.
    RetryComplete { at: i64 },
}

/// A transition in progress (Kafka's `pendingState` plus the transit the
/// callback holds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pending {
    pub transit: Transit,
    pub step: Step,
}

impl Pending {
    /// Kafka's `pendingState`.
    pub fn state(&self) -> TransactionState {
        self.transit.state
    }
}

/// One transactional id (Kafka's `TransactionMetadata`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TxnMetadata {
    pub transactional_id: String,
    pub producer_id: i64,
    /// The producer id before the last InitProducerId (for KIP-360 retries
    /// after a producer id rotation).
    pub previous_producer_id: i64,
    /// Transaction version 2 only; kept from the log.
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last InitProducerId, for KIP-360 retries; not
    /// in the log (-1 after a load), as in Kafka.
    pub last_producer_epoch: i16,
    pub txn_timeout_ms: i32,
    pub state: TransactionState,
    pub partitions: BTreeSet<TopicPartition>,
    /// When the first partition was added; -1 when none yet.
    pub txn_start_timestamp: i64,
    pub txn_last_update_timestamp: i64,
    pub client_transaction_version: i16,
    pub pending: Option<Pending>,
    /// A fence's record failed after the epoch was bumped in memory: the
    /// next fence does not bump again.
    pub has_failed_epoch_fence: bool,
}

impl TxnMetadata {
    /// A new id (InitProducerId of an unknown transactional id), Empty with
    /// no epoch yet; not in the log until its first record.
    pub fn new(transactional_id: &str, producer_id: i64, timeout_ms: i32, now_ms: i64) -> Self {
        TxnMetadata {
            transactional_id: transactional_id.to_string(),
            producer_id,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: NO_PRODUCER_EPOCH,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            txn_timeout_ms: timeout_ms,
            state: TransactionState::Empty,
            partitions: BTreeSet::new(),
            txn_start_timestamp: -1,
            txn_last_update_timestamp: now_ms,
            client_transaction_version: 0,
            pending: None,
            has_failed_epoch_fence: false,
        }
    }

    /// The metadata a replayed value stands for (Kafka's
    /// `readTxnRecordValue`): partitions are ignored in the Empty state;
    /// the last epoch is unknown. `None` for a status id that is not a
    /// state.
    pub fn from_value(transactional_id: &str, v: &TransactionLogValue) -> Option<Self> {
        let state = TransactionState::from_id(v.transaction_status)?;
        let mut partitions = BTreeSet::new();
        if state != TransactionState::Empty {
            for t in v.transaction_partitions.iter().flatten() {
                for p in &t.partition_ids {
                    partitions.insert(TopicPartition::new(t.topic.clone(), *p));
                }
            }
        }
        Some(TxnMetadata {
            transactional_id: transactional_id.to_string(),
            producer_id: v.producer_id,
            previous_producer_id: v.previous_producer_id,
            next_producer_id: v.next_producer_id,
            producer_epoch: v.producer_epoch,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            txn_timeout_ms: v.transaction_timeout_ms,
            state,
            partitions,
            txn_start_timestamp: v.transaction_start_timestamp_ms,
            txn_last_update_timestamp: v.transaction_last_update_timestamp_ms,
            client_transaction_version: v.client_transaction_version,
            pending: None,
            has_failed_epoch_fence: false,
        })
    }

    pub fn pending_state(&self) -> Option<TransactionState> {
        self.pending.as_ref().map(Pending::state)
    }

    pub fn is_epoch_exhausted(&self) -> bool {
        is_epoch_exhausted(self.producer_epoch)
    }

    /// Kafka's `prepareTransitionTo`: checks the target and builds it.
    /// Broken preconditions are Kafka's IllegalStateException /
    /// IllegalArgumentException, answered as UNKNOWN_SERVER_ERROR.
    #[allow(clippy::too_many_arguments)]
    fn prepare_transition_to(
        &self,
        state: TransactionState,
        producer_id: i64,
        next_producer_id: i64,
        epoch: i16,
        last_epoch: i16,
        timeout_ms: i32,
        partitions: BTreeSet<TopicPartition>,
        start_ms: i64,
        update_ms: i64,
    ) -> Result<Transit, KafkaError> {
        if self.pending.is_some() {
            tracing::error!(id = %self.transactional_id, to = state.name(),
                "transition while another is pending");
            return Err(KafkaError::UnknownServerError);
        }
        if producer_id < 0 || (state != TransactionState::Dead && epoch < 0) {
            tracing::error!(id = %self.transactional_id, producer_id, epoch,
                "illegal producer id or epoch in a transition");
            return Err(KafkaError::UnknownServerError);
        }
        if !state.valid_previous_states().contains(&self.state) {
            tracing::error!(id = %self.transactional_id, from = self.state.name(),
                to = state.name(), "invalid transaction state transition");
            return Err(KafkaError::UnknownServerError);
        }
        Ok(Transit {
            producer_id,
            prev_producer_id: self.producer_id,
            next_producer_id,
            producer_epoch: epoch,
            last_producer_epoch: last_epoch,
            txn_timeout_ms: timeout_ms,
            state,
            partitions,
            txn_start_timestamp: start_ms,
            txn_last_update_timestamp: update_ms,
            client_transaction_version: 0,
        })
    }

    /// InitProducerId on an id without a transaction: bump the epoch
    /// (Kafka's `prepareIncrementProducerEpoch`). `expected_epoch` is the
    /// KIP-360 epoch the producer sent.
    pub fn prepare_increment_producer_epoch(
        &self,
        timeout_ms: i32,
        expected_epoch: Option<i16>,
        now_ms: i64,
    ) -> Result<Transit, KafkaError> {
        if self.is_epoch_exhausted() {
            tracing::error!(id = %self.transactional_id, producer_id = self.producer_id,
                "cannot allocate any more producer epochs");
            return Err(KafkaError::UnknownServerError);
        }
        let bumped = self.producer_epoch + 1;
        let (epoch, last_epoch) = match expected_epoch {
            // A new producer: bump and forget the last epoch.
            None => (bumped, NO_PRODUCER_EPOCH),
            // The producer continues after an error and nobody else
            // initialized since (or the id is new): bump, remember.
            Some(e) if self.producer_epoch == NO_PRODUCER_EPOCH || e == self.producer_epoch => {
                (bumped, self.producer_epoch)
            }
            // A retry of a bump that succeeded: same answer again.
            Some(e) if e == self.last_producer_epoch => {
                (self.producer_epoch, self.last_producer_epoch)
            }
            Some(_) => return Err(KafkaError::ProducerFenced),
        };
        self.prepare_transition_to(
            TransactionState::Empty,
            self.producer_id,
            -1,
            epoch,
            last_epoch,
            timeout_ms,
            BTreeSet::new(),
            -1,
            now_ms,
        )
    }

    /// InitProducerId once the epoch is exhausted: a new producer id at
    /// epoch 0 (Kafka's `prepareProducerIdRotation`).
    pub fn prepare_producer_id_rotation(
        &self,
        new_producer_id: i64,
        timeout_ms: i32,
        now_ms: i64,
        record_last_epoch: bool,
    ) -> Result<Transit, KafkaError> {
        if matches!(
            self.state,
            TransactionState::Ongoing
                | TransactionState::PrepareAbort
                | TransactionState::PrepareCommit
        ) {
            tracing::error!(id = %self.transactional_id, "producer id rotation with a transaction open");
            return Err(KafkaError::UnknownServerError);
        }
        let last_epoch = if record_last_epoch {
            self.producer_epoch
        } else {
            NO_PRODUCER_EPOCH
        };
        self.prepare_transition_to(
            TransactionState::Empty,
            new_producer_id,
            -1,
            0,
            last_epoch,
            timeout_ms,
            BTreeSet::new(),
            -1,
            now_ms,
        )
    }

    /// The epoch a fence moves to (Kafka's `prepareFenceProducerEpoch`):
    /// one more, unless a previous fence failed after bumping it in memory.
    pub fn fence_epoch(&self) -> Result<i16, KafkaError> {
        if self.producer_epoch == i16::MAX {
            tracing::error!(id = %self.transactional_id,
                "cannot fence a producer whose epoch is i16::MAX");
            return Err(KafkaError::UnknownServerError);
        }
        if !TransactionState::PrepareEpochFence
            .valid_previous_states()
            .contains(&self.state)
        {
            tracing::error!(id = %self.transactional_id, from = self.state.name(),
                "fence outside an ongoing transaction");
            return Err(KafkaError::UnknownServerError);
        }
        Ok(if self.has_failed_epoch_fence {
            self.producer_epoch
        } else {
            self.producer_epoch + 1
        })
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn (Kafka's `prepareAddPartitions`):
    /// Ongoing with the union of partitions; a new transaction starts now.
    pub fn prepare_add_partitions(
        &self,
        added: &[TopicPartition],
        now_ms: i64,
    ) -> Result<Transit, KafkaError> {
        let start = match self.state {
            TransactionState::Empty
            | TransactionState::CompleteAbort
            | TransactionState::CompleteCommit => now_ms,
            _ => self.txn_start_timestamp,
        };
        let mut partitions = self.partitions.clone();
        partitions.extend(added.iter().cloned());
        self.prepare_transition_to(
            TransactionState::Ongoing,
            self.producer_id,
            -1,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            partitions,
            start,
            now_ms,
        )
    }

    /// EndTxn (Kafka's `prepareAbortOrCommit`, transaction version 0/1: no
    /// epoch bump).
    pub fn prepare_abort_or_commit(
        &self,
        result: TxnResult,
        now_ms: i64,
    ) -> Result<Transit, KafkaError> {
        let state = match result {
            TxnResult::Commit => TransactionState::PrepareCommit,
            TxnResult::Abort => TransactionState::PrepareAbort,
        };
        self.prepare_transition_to(
            state,
            self.producer_id,
            -1,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            self.partitions.clone(),
            self.txn_start_timestamp,
            now_ms,
        )
    }

    /// The record after the markers (Kafka's `prepareComplete`): no
    /// partitions, same producer id and epoch. Clears a failed fence.
    pub fn prepare_complete(&mut self, now_ms: i64) -> Result<Transit, KafkaError> {
        let state = if self.state == TransactionState::PrepareCommit {
            TransactionState::CompleteCommit
        } else {
            TransactionState::CompleteAbort
        };
        self.has_failed_epoch_fence = false;
        self.prepare_transition_to(
            state,
            self.producer_id,
            -1,
            self.producer_epoch,
            self.producer_epoch,
            self.txn_timeout_ms,
            BTreeSet::new(),
            self.txn_start_timestamp,
            now_ms,
        )
    }

    /// Expiration (Kafka's `prepareDead`).
    pub fn prepare_dead(&self) -> Result<Transit, KafkaError> {
        self.prepare_transition_to(
            TransactionState::Dead,
            self.producer_id,
            -1,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            BTreeSet::new(),
            self.txn_start_timestamp,
            self.txn_last_update_timestamp,
        )
    }

    /// Installs `t` now that its record is in the log (Kafka's
    /// `completeTransitionTo`, transaction version 0/1), after the same
    /// consistency checks. Returns false, changing nothing, when a check
    /// fails (Kafka: a fatal IllegalStateException; here the caller
    /// answers UNKNOWN_SERVER_ERROR).
    pub fn complete_transition(&mut self, t: &Transit) -> bool {
        use TransactionState::*;
        let same_epoch =
            t.producer_epoch == self.producer_epoch && t.producer_id == self.producer_id;
        let ok = match t.state {
            Empty => {
                let bump = i32::from(t.producer_epoch) == i32::from(self.producer_epoch) + 1
                    || (t.producer_epoch == 0 && t.producer_id != self.producer_id);
                (self.producer_epoch == t.producer_epoch || bump)
                    && t.partitions.is_empty()
                    && t.txn_start_timestamp == -1
            }
            Ongoing => {
                same_epoch
                    && self.partitions.is_subset(&t.partitions)
                    && self.txn_timeout_ms == t.txn_timeout_ms
            }
            PrepareAbort | PrepareCommit => {
                same_epoch
                    && self.partitions == t.partitions
                    && self.txn_timeout_ms == t.txn_timeout_ms
                    && self.txn_start_timestamp == t.txn_start_timestamp
            }
            CompleteAbort | CompleteCommit => {
                same_epoch && self.txn_timeout_ms == t.txn_timeout_ms && t.txn_start_timestamp != -1
            }
            // Never completed: Dead removes the id, PrepareEpochFence is
            // replaced by PrepareAbort before any record.
            PrepareEpochFence | Dead => false,
        };
        if !ok {
            tracing::error!(id = %self.transactional_id, from = self.state.name(),
                to = t.state.name(), "transaction transition failed its consistency checks");
            return false;
        }
        match t.state {
            Empty => {
                self.txn_timeout_ms = t.txn_timeout_ms;
                self.producer_epoch = t.producer_epoch;
                self.last_producer_epoch = t.last_producer_epoch;
                self.producer_id = t.producer_id;
                self.previous_producer_id = t.prev_producer_id;
            }
            Ongoing => {
                self.txn_start_timestamp = t.txn_start_timestamp;
                self.partitions.extend(t.partitions.iter().cloned());
            }
            CompleteAbort | CompleteCommit => {
                self.txn_start_timestamp = t.txn_start_timestamp;
                self.partitions.clear();
            }
            _ => {}
        }
        self.client_transaction_version = t.client_transaction_version;
        self.txn_last_update_timestamp = t.txn_last_update_timestamp;
        self.pending = None;
        self.state = t.state;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_ids_and_names_are_kafkas() {
        let expected = [
            (0, "Empty"),
            (1, "Ongoing"),
            (2, "PrepareCommit"),
            (3, "PrepareAbort"),
            (4, "CompleteCommit"),
            (5, "CompleteAbort"),
            (6, "Dead"),
            (7, "PrepareEpochFence"),
        ];
        for (s, (id, name)) in TransactionState::ALL.into_iter().zip(expected) {
            assert_eq!((s.id(), s.name()), (id, name));
            assert_eq!(TransactionState::from_id(id), Some(s));
            assert_eq!(TransactionState::from_name(name), Some(s));
        }
        assert_eq!(TransactionState::from_id(8), None);
        assert_eq!(TransactionState::from_id(-1), None);
        assert_eq!(TransactionState::from_name("ongoing"), None);
    }

    #[test]
    fn epoch_exhaustion_threshold() {
        assert!(!is_epoch_exhausted(32_765));
        assert!(is_epoch_exhausted(32_766));
        assert!(is_epoch_exhausted(i16::MAX));
    }

    #[test]
    fn values_group_partitions_by_topic_and_null_them_when_empty() {
        let mut m = TxnMetadata::new("t", 7, 1000, 5);
        m.producer_epoch = 0;
        let t = m
            .prepare_add_partitions(
                &[
                    TopicPartition::new("b", 1),
                    TopicPartition::new("a", 3),
                    TopicPartition::new("a", 0),
                ],
                10,
            )
            .expect("add");
        let v = t.to_value();
        assert_eq!(v.transaction_status, 1);
        assert_eq!(
            v.transaction_partitions,
            Some(vec![
                TxnTopicPartitions {
                    topic: "a".into(),
                    partition_ids: vec![0, 3]
                },
                TxnTopicPartitions {
                    topic: "b".into(),
                    partition_ids: vec![1]
                },
            ])
        );
        assert_eq!(v.transaction_start_timestamp_ms, 10);
        let back = TxnMetadata::from_value("t", &v).expect("state");
        assert_eq!(back.partitions, t.partitions);
        let empty = m
            .prepare_increment_producer_epoch(1000, None, 11)
            .expect("bump");
        assert_eq!(empty.to_value().transaction_partitions, None);
    }
}
