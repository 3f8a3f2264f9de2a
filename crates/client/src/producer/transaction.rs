//! The transactional producer's state machine (the transactional half of
//! Kafka's `TransactionManager`), sans-IO: the state, the partitions of
//! the open transaction, the last error and its classification. The
//! producer's API methods and the requests that drive it live in
//! `super::transactional`; the sender asks it which partitions may be
//! drained ([`TransactionManager::is_send_allowed`]).
//!
//! States and transitions are Kafka's (`TransactionManager.State`):
//!
//! | to | from |
//! |---|---|
//! | `UNINITIALIZED` | `READY`, `ABORTABLE_ERROR` |
//! | `INITIALIZING` | `UNINITIALIZED`, `ABORTING_TRANSACTION` (epoch bump) |
//! | `READY` | `INITIALIZING`, `COMMITTING_TRANSACTION`, `ABORTING_TRANSACTION` |
//! | `IN_TRANSACTION` | `READY` |
//! | `COMMITTING_TRANSACTION` | `IN_TRANSACTION` |
//! | `ABORTING_TRANSACTION` | `IN_TRANSACTION`, `ABORTABLE_ERROR` |
//! | `ABORTABLE_ERROR` | `IN_TRANSACTION`, `COMMITTING_TRANSACTION`, `ABORTABLE_ERROR`, `INITIALIZING` |
//! | `FATAL_ERROR` | any |
//!
//! An invalid transition asked for by the application fails with
//! [`ClientError::IllegalState`] and leaves the state alone. Errors are
//! classified as the Java client does ([`is_fatal`]): fenced producers,
//! unauthorized transactional ids and unsupported versions are fatal (only
//! closing the producer is left); anything else that fails a transaction
//! (a batch that could not be written, an offset commit refused) is
//! abortable: only `abort_transaction` is allowed, and the abort bumps the
//! epoch (KIP-360) so that sequences restart cleanly.

use std::collections::BTreeSet;
use std::fmt;

use proto_kafka::error::ResponseError;
use tokio::sync::watch;

use crate::accumulator::TopicPartition;
use crate::error::{ClientError, Result};

/// Where a transactional producer stands (Kafka's
/// `TransactionManager.State`; displayed with Kafka's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionState {
    /// `init_transactions` not called yet.
    Uninitialized,
    /// InitProducerId in progress.
    Initializing,
    /// Initialized, no transaction open.
    Ready,
    /// A transaction is open (`begin_transaction`).
    InTransaction,
    /// `commit_transaction` in progress.
    CommittingTransaction,
    /// `abort_transaction` in progress.
    AbortingTransaction,
    /// The transaction failed; only `abort_transaction` is allowed.
    AbortableError,
    /// The producer can only be closed.
    FatalError,
}

impl fmt::Display for TransactionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TransactionState::Uninitialized => "UNINITIALIZED",
            TransactionState::Initializing => "INITIALIZING",
            TransactionState::Ready => "READY",
            TransactionState::InTransaction => "IN_TRANSACTION",
            TransactionState::CommittingTransaction => "COMMITTING_TRANSACTION",
            TransactionState::AbortingTransaction => "ABORTING_TRANSACTION",
            TransactionState::AbortableError => "ABORTABLE_ERROR",
            TransactionState::FatalError => "FATAL_ERROR",
        })
    }
}

impl TransactionState {
    /// Kafka's `State.isTransitionValid`.
    fn may_become(self, target: TransactionState) -> bool {
        use TransactionState as S;
        match target {
            S::Uninitialized => matches!(self, S::Ready | S::AbortableError),
            S::Initializing => matches!(self, S::Uninitialized | S::AbortingTransaction),
            S::Ready => matches!(
                self,
                S::Initializing | S::CommittingTransaction | S::AbortingTransaction
            ),
            S::InTransaction => self == S::Ready,
            S::CommittingTransaction => self == S::InTransaction,
            S::AbortingTransaction => matches!(self, S::InTransaction | S::AbortableError),
            S::AbortableError => matches!(
                self,
                S::InTransaction | S::CommittingTransaction | S::AbortableError | S::Initializing
            ),
            S::FatalError => true,
        }
    }
}

/// Errors that make a transactional producer unusable: the same as the
/// idempotent producer's (Kafka's `maybeTransitionToErrorState`); the
/// transaction APIs' own fatal cases are classified where they answer.
pub(crate) use super::idempotence::is_fatal;

/// The outcome of an API call running in the background, kept when the
/// caller stopped waiting (`max.block.ms`) so that retrying the same call
/// picks it up (Kafka's `PendingStateTransition`).
#[derive(Debug)]
pub(crate) struct PendingOp {
    /// The API call, e.g. `commitTransaction`.
    pub op: &'static str,
    /// `None` until the call completes.
    pub result: watch::Receiver<Option<Result<()>>>,
}

/// A transactional producer's transaction state (see the module docs).
#[derive(Debug)]
pub(crate) struct TransactionManager {
    /// `transactional.id`.
    pub transactional_id: String,
    /// `transaction.timeout.ms`.
    pub timeout_ms: i32,
    state: TransactionState,
    last_error: Option<ClientError>,
    /// Partitions written to in this transaction, not yet in an
    /// AddPartitionsToTxn request.
    new_partitions: BTreeSet<TopicPartition>,
    /// Partitions of the AddPartitionsToTxn request in flight.
    pending_partitions: BTreeSet<TopicPartition>,
    /// Partitions added to the transaction: their batches may be sent.
    partitions: BTreeSet<TopicPartition>,
    /// Partitions or offsets were added: the transaction needs EndTxn.
    started: bool,
    /// The next abort ends with an epoch bump (KIP-360).
    epoch_bump_required: bool,
    /// The coordinator bumps epochs (InitProducerId v3+).
    pub can_bump_epoch: bool,
    /// An API call that outlived its caller.
    pub pending: Option<PendingOp>,
    /// The error that led to the abort in progress, if any.
    abort_cause: Option<ClientError>,
}

impl TransactionManager {
    pub(crate) fn new(transactional_id: String, timeout_ms: i32) -> Self {
        Self {
            transactional_id,
            timeout_ms,
            state: TransactionState::Uninitialized,
            last_error: None,
            new_partitions: BTreeSet::new(),
            pending_partitions: BTreeSet::new(),
            partitions: BTreeSet::new(),
            started: false,
            epoch_bump_required: false,
            can_bump_epoch: false,
            pending: None,
            abort_cause: None,
        }
    }

    pub(crate) fn state(&self) -> TransactionState {
        self.state
    }

    /// Kafka's `transitionTo`: refuses invalid transitions.
    pub(crate) fn transition(&mut self, target: TransactionState) -> Result<()> {
        if !self.state.may_become(target) {
            return Err(ClientError::IllegalState(format!(
                "TransactionalId {}: Invalid transition attempted from state {} to state {target}",
                self.transactional_id, self.state
            )));
        }
        tracing::debug!(from = %self.state, to = %target, transactional_id = %self.transactional_id, "transaction state");
        self.state = target;
        if !matches!(
            target,
            TransactionState::AbortableError | TransactionState::FatalError
        ) {
            self.last_error = None;
        }
        Ok(())
    }

    /// Whether the producer is in an error state.
    pub(crate) fn has_error(&self) -> bool {
        matches!(
            self.state,
            TransactionState::AbortableError | TransactionState::FatalError
        )
    }

    /// Kafka's `maybeFailWithError`: the error to return from any call
    /// while in an error state. A fenced producer gets
    /// `PRODUCER_FENCED` itself, with Kafka's message.
    pub(crate) fn maybe_fail(&self, producer: Option<(i64, i16)>) -> Result<()> {
        if !self.has_error() {
            return Ok(());
        }
        let fatal = self.state == TransactionState::FatalError;
        let cause = self
            .last_error
            .clone()
            .unwrap_or_else(|| ClientError::IllegalState("unknown error".into()));
        let (id, epoch) = producer.unwrap_or((-1, -1));
        let ids = format!(
            "Producer with transactionalId '{}' and ProducerIdAndEpoch(producerId={id}, epoch={epoch})",
            self.transactional_id
        );
        match cause.response_error() {
            Some(ResponseError::ProducerFenced) => Err(fenced(format!(
                "{ids} has been fenced by another producer with the same transactionalId"
            ))),
            Some(ResponseError::InvalidProducerEpoch) => Err(ClientError::from_code(
                ResponseError::InvalidProducerEpoch.code(),
                Some(format!("{ids} attempted to produce with an old epoch")),
                "transactional producer",
            )
            .unwrap_or(cause)),
            _ => Err(ClientError::TransactionState {
                fatal,
                cause: Box::new(cause),
            }),
        }
    }

    /// Kafka's `throwIfPendingState`: a call that timed out must be
    /// retried before anything else.
    pub(crate) fn check_pending(&mut self, op: &str) -> Result<()> {
        if let Some(p) = &self.pending {
            if p.result.borrow().is_some() {
                self.pending = None;
            } else {
                return Err(pending_error(op, p.op));
            }
        }
        Ok(())
    }

    /// Kafka's `handleCachedTransactionRequestResult`: the outcome of an
    /// earlier call of `op` that timed out, if there is one; an error when
    /// another call is pending.
    pub(crate) fn cached(&mut self, op: &'static str) -> Result<Option<PendingOp>> {
        let Some(p) = self.pending.take() else {
            return Ok(None);
        };
        let done = p.result.borrow().is_some();
        if p.op == op {
            let again = PendingOp {
                op,
                result: p.result.clone(),
            };
            if !done {
                self.pending = Some(p);
            }
            return Ok(Some(again));
        }
        if done {
            return Ok(None);
        }
        let e = pending_error(op, p.op);
        self.pending = Some(p);
        Err(e)
    }

    /// `beginTransaction`.
    pub(crate) fn begin(&mut self, producer: Option<(i64, i16)>) -> Result<()> {
        self.check_pending("beginTransaction")?;
        self.maybe_fail(producer)?;
        self.transition(TransactionState::InTransaction)
    }

    /// `send`'s checks for a record bound for `tp` (Kafka's
    /// `maybeAddPartition`, checked before the record is buffered).
    pub(crate) fn check_send(
        &mut self,
        tp: &TopicPartition,
        producer: Option<(i64, i16)>,
    ) -> Result<()> {
        self.maybe_fail(producer)?;
        self.check_pending("send")?;
        if producer.is_none() {
            return Err(ClientError::IllegalState(format!(
                "Cannot add partition {tp} to transaction before completing a call to initTransactions"
            )));
        }
        if self.state != TransactionState::InTransaction {
            return Err(ClientError::IllegalState(format!(
                "Cannot add partition {tp} to transaction while in state {}",
                self.state
            )));
        }
        Ok(())
    }

    /// A record for `tp` was buffered: `tp` joins the transaction. Returns
    /// whether it is new (an AddPartitionsToTxn must be sent).
    pub(crate) fn maybe_add_partition(&mut self, tp: &TopicPartition) -> bool {
        if self.partitions.contains(tp) || self.pending_partitions.contains(tp) {
            return false;
        }
        self.new_partitions.insert(tp.clone())
    }

    /// Kafka's `isSendToPartitionAllowed`: batches of `tp` may be sent only
    /// once it is in the transaction.
    pub(crate) fn is_send_allowed(&self, tp: &TopicPartition) -> bool {
        self.state != TransactionState::FatalError && self.partitions.contains(tp)
    }

    /// The partitions of the next AddPartitionsToTxn request, if one is due
    /// (none in flight, partitions waiting, transaction not in error or
    /// aborting). They stay pending until [`Self::partitions_added`] or
    /// [`Self::add_partitions_failed`].
    pub(crate) fn next_add_partitions(&mut self) -> Option<Vec<TopicPartition>> {
        let open = matches!(
            self.state,
            TransactionState::InTransaction | TransactionState::CommittingTransaction
        );
        if !open || self.new_partitions.is_empty() {
            return None;
        }
        self.pending_partitions.append(&mut self.new_partitions);
        Some(self.pending_partitions.iter().cloned().collect())
    }

    /// Whether an AddPartitionsToTxn request is in flight (or retried).
    pub(crate) fn has_pending_add(&self) -> bool {
        !self.pending_partitions.is_empty()
    }

    /// The pending partitions are in the transaction.
    pub(crate) fn partitions_added(&mut self) {
        self.partitions.append(&mut self.pending_partitions);
        self.started = true;
    }

    /// The AddPartitionsToTxn request failed for good.
    pub(crate) fn add_partitions_failed(&mut self) {
        self.pending_partitions.clear();
    }

    /// Whether the transaction was started on the coordinator (it needs
    /// an EndTxn).
    #[cfg(test)]
    pub(crate) fn started(&self) -> bool {
        self.started
    }

    /// Offsets were added (AddOffsetsToTxn succeeded).
    pub(crate) fn set_started(&mut self) {
        self.started = true;
    }

    /// Whether any partition was added in this transaction (for the
    /// first AddPartitionsToTxn's short CONCURRENT_TRANSACTIONS backoff).
    pub(crate) fn has_added_partitions(&self) -> bool {
        !self.partitions.is_empty()
    }

    /// Kafka's `maybeTransitionToErrorState`: a fatal error stops the
    /// producer; any other ends the transaction in an abortable error
    /// (with an epoch bump at the abort, when the coordinator supports it).
    /// Unlike Kafka, a batch failing while the transaction completes asks
    /// for the bump too: this client does not repair sequences after a
    /// failed batch (`adjustSequencesDueToFailedBatch`), the bump resets
    /// them.
    pub(crate) fn on_error(&mut self, e: &ClientError) {
        if is_fatal(e) {
            self.fatal(e.clone());
            return;
        }
        if self.can_bump_epoch {
            self.epoch_bump_required = true;
        }
        self.abortable(e.clone());
    }

    /// Kafka's `transitionToFatalError`.
    pub(crate) fn fatal(&mut self, e: ClientError) {
        if self.state != TransactionState::FatalError {
            tracing::warn!(error = %e, transactional_id = %self.transactional_id, "transactional producer: fatal error");
        }
        self.state = TransactionState::FatalError;
        self.last_error = Some(e);
    }

    /// Kafka's `transitionToAbortableError` (ignored while aborting, and
    /// where the transition is invalid, e.g. once fatal).
    pub(crate) fn abortable(&mut self, e: ClientError) {
        if self.state == TransactionState::AbortingTransaction
            || !self.state.may_become(TransactionState::AbortableError)
        {
            tracing::debug!(error = %e, state = %self.state, "not an abortable error in this state");
            return;
        }
        tracing::info!(error = %e, transactional_id = %self.transactional_id, "transaction: abortable error");
        self.state = TransactionState::AbortableError;
        self.last_error = Some(e);
    }

    /// Kafka's `abortableErrorIfPossible`: abortable with an epoch bump
    /// when the coordinator can bump epochs, fatal otherwise.
    pub(crate) fn abortable_if_possible(&mut self, e: ClientError) {
        if self.can_bump_epoch {
            self.epoch_bump_required = true;
            self.abortable(e);
        } else {
            self.fatal(e);
        }
    }

    /// `commitTransaction`'s state change (after the checks).
    pub(crate) fn begin_commit(&mut self, producer: Option<(i64, i16)>) -> Result<()> {
        self.maybe_fail(producer)?;
        self.transition(TransactionState::CommittingTransaction)
    }

    /// `abortTransaction`'s state change: allowed after an abortable
    /// error; partitions not yet added are forgotten.
    pub(crate) fn begin_abort(&mut self, producer: Option<(i64, i16)>) -> Result<()> {
        if self.state != TransactionState::AbortableError {
            self.maybe_fail(producer)?;
        }
        let cause = self.last_error.clone();
        self.transition(TransactionState::AbortingTransaction)?;
        self.abort_cause = cause;
        self.new_partitions.clear();
        Ok(())
    }

    /// Whether the batches not drained yet must be dropped (the
    /// transaction failed or is being aborted), and with which error.
    pub(crate) fn abort_new_batches_with(&self) -> Option<ClientError> {
        match self.state {
            TransactionState::AbortableError => Some(
                self.last_error
                    .clone()
                    .unwrap_or(ClientError::TransactionAborted),
            ),
            TransactionState::AbortingTransaction => Some(
                self.abort_cause
                    .clone()
                    .unwrap_or(ClientError::TransactionAborted),
            ),
            _ => None,
        }
    }

    /// Whether EndTxn must be skipped: the coordinator does not know the
    /// producer id any more (`INVALID_PRODUCER_ID_MAPPING`), so only the
    /// epoch bump is left.
    pub(crate) fn skip_end_txn(&self) -> bool {
        !self.started
            || self
                .abort_cause
                .as_ref()
                .and_then(ClientError::response_error)
                == Some(ResponseError::InvalidProducerIdMapping)
    }

    /// Kafka's `completeTransaction`: `READY`, or `INITIALIZING` when the
    /// epoch must be bumped first. Returns whether a bump is due.
    pub(crate) fn complete(&mut self) -> Result<bool> {
        let bump = self.epoch_bump_required;
        self.transition(if bump {
            TransactionState::Initializing
        } else {
            TransactionState::Ready
        })?;
        self.epoch_bump_required = false;
        self.abort_cause = None;
        self.started = false;
        self.new_partitions.clear();
        self.pending_partitions.clear();
        self.partitions.clear();
        Ok(bump)
    }
}

fn pending_error(op: &str, pending: &str) -> ClientError {
    ClientError::IllegalState(format!(
        "Cannot attempt operation `{op}` because the previous call to `{pending}` timed out and must be retried"
    ))
}

/// A `PRODUCER_FENCED` error with `message`.
pub(crate) fn fenced(message: String) -> ClientError {
    ClientError::from_code(
        ResponseError::ProducerFenced.code(),
        Some(message),
        "transactional producer",
    )
    .unwrap_or_else(|| ClientError::IllegalState("producer fenced".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tm() -> TransactionManager {
        TransactionManager::new("tx".into(), 60_000)
    }

    fn kafka(code: i16) -> ClientError {
        ClientError::from_code(code, None, "test").expect("an error code")
    }

    const PID: Option<(i64, i16)> = Some((7, 0));

    fn in_transaction() -> TransactionManager {
        let mut t = tm();
        t.transition(TransactionState::Initializing).expect("init");
        t.transition(TransactionState::Ready).expect("ready");
        t.begin(PID).expect("begin");
        t
    }

    #[test]
    fn transitions_follow_kafkas_table() {
        let mut t = tm();
        let e = t.begin(None).expect_err("not initialized");
        assert_eq!(
            e.to_string(),
            "illegal state: TransactionalId tx: Invalid transition attempted from state \
             UNINITIALIZED to state IN_TRANSACTION"
        );
        assert_eq!(t.state(), TransactionState::Uninitialized, "unchanged");
        let tp = TopicPartition::new("t", 0);
        let e = t.check_send(&tp, None).expect_err("no producer id");
        assert!(
            e.to_string()
                .contains("before completing a call to initTransactions"),
            "{e}"
        );
        let mut t = in_transaction();
        assert!(t.begin(PID).is_err(), "no nested transactions");
        t.begin_commit(PID).expect("commit");
        assert!(!t.complete().expect("complete"));
        assert_eq!(t.state(), TransactionState::Ready);
        let e = t.begin_commit(PID).expect_err("commit without begin");
        assert!(
            e.to_string()
                .contains("from state READY to state COMMITTING_TRANSACTION"),
            "{e}"
        );
        let e = t
            .check_send(&tp, PID)
            .expect_err("send outside a transaction");
        assert!(
            e.to_string()
                .contains("Cannot add partition t-0 to transaction while in state READY"),
            "{e}"
        );
    }

    #[test]
    fn partitions_are_sendable_only_once_added() {
        let mut t = in_transaction();
        let tp = TopicPartition::new("t", 1);
        assert!(t.maybe_add_partition(&tp));
        assert!(!t.maybe_add_partition(&tp), "added once");
        assert!(!t.is_send_allowed(&tp));
        assert_eq!(t.next_add_partitions(), Some(vec![tp.clone()]));
        assert!(!t.maybe_add_partition(&tp), "pending");
        assert_eq!(t.next_add_partitions(), None);
        assert!(!t.is_send_allowed(&tp));
        t.partitions_added();
        assert!(t.is_send_allowed(&tp) && t.started());
        t.begin_commit(PID).expect("commit");
        t.complete().expect("complete");
        assert!(!t.is_send_allowed(&tp), "a new transaction adds it again");
    }

    #[test]
    fn abortable_errors_allow_only_abort_and_bump_the_epoch() {
        let mut t = in_transaction();
        t.can_bump_epoch = true;
        t.on_error(&kafka(10)); // MESSAGE_TOO_LARGE
        assert_eq!(t.state(), TransactionState::AbortableError);
        let e = t.begin_commit(PID).expect_err("no commit");
        assert!(
            matches!(e, ClientError::TransactionState { fatal: false, .. }),
            "{e}"
        );
        assert!(!e.is_fatal_transaction_error());
        assert!(t.check_send(&TopicPartition::new("t", 0), PID).is_err());
        assert!(matches!(
            t.abort_new_batches_with(),
            Some(ClientError::Kafka { .. })
        ));
        t.begin_abort(PID).expect("abort allowed");
        assert!(t.complete().expect("complete"), "epoch bump due");
        assert_eq!(t.state(), TransactionState::Initializing);
        t.transition(TransactionState::Ready).expect("bumped");
    }

    #[test]
    fn fenced_and_unauthorized_are_fatal() {
        for code in [90, 53, 35] {
            let mut t = in_transaction();
            t.on_error(&kafka(code));
            assert_eq!(t.state(), TransactionState::FatalError, "code {code}");
            assert!(t.begin_abort(PID).is_err());
            assert!(t.begin_commit(PID).is_err());
        }
        let mut t = in_transaction();
        t.fatal(fenced("x".into()));
        let e = t.begin(PID).expect_err("fenced");
        assert_eq!(e.response_error(), Some(ResponseError::ProducerFenced));
        assert!(
            e.to_string()
                .contains("has been fenced by another producer"),
            "{e}"
        );
        assert!(e.is_fatal_transaction_error());
    }

    #[test]
    fn a_timed_out_call_must_be_retried_first() {
        let mut t = in_transaction();
        let (tx, rx) = watch::channel(None);
        t.pending = Some(PendingOp {
            op: "commitTransaction",
            result: rx,
        });
        let e = t.cached("abortTransaction").expect_err("other op");
        assert!(
            e.to_string()
                .contains("previous call to `commitTransaction` timed out"),
            "{e}"
        );
        assert!(t.cached("commitTransaction").expect("same op").is_some());
        tx.send(Some(Ok(()))).expect("send");
        assert!(t.cached("commitTransaction").expect("same op").is_some());
        assert!(t.pending.is_none(), "consumed");
        assert!(t.cached("abortTransaction").expect("none").is_none());
    }
}
