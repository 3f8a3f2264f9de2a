//! The transactional producer's API ([`Producer::init_transactions`],
//! [`Producer::begin_transaction`],
//! [`Producer::send_offsets_to_transaction`],
//! [`Producer::commit_transaction`], [`Producer::abort_transaction`]) and
//! the requests behind it: FindCoordinator (key type TRANSACTION),
//! InitProducerId, AddPartitionsToTxn and EndTxn (AddOffsetsToTxn and
//! TxnOffsetCommit are in `super::txn_offsets`), each answered as Kafka's
//! `TransactionManager` handlers answer them.
//!
//! Transactional requests go one at a time (the `txn_io` lock, which also
//! holds the coordinator connection). Coordinator errors
//! (`NOT_COORDINATOR`, `COORDINATOR_NOT_AVAILABLE`, lost connections) look
//! the coordinator up again; retriable ones (`COORDINATOR_LOAD_IN_PROGRESS`,
//! `CONCURRENT_TRANSACTIONS`, ...) are retried after a backoff, until the
//! producer closes; the others move the state machine
//! (`super::transaction`) to an abortable or fatal error.
//!
//! `send` only records that a partition joins the transaction; a
//! background task sends AddPartitionsToTxn for the new partitions, and
//! the sender does not drain a partition's batches before it is added.
//! The API calls run as tasks and wait up to `max.block.ms`: a call that
//! timed out keeps running, and calling it again waits for the same
//! outcome (Kafka's pending state transition).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use proto_kafka::error::ResponseError;
use proto_kafka::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use proto_kafka::messages::{
    AddPartitionsToTxnRequest, ApiKey, EndTxnRequest, InitProducerIdRequest, ProducerId, TopicName,
    TransactionalId,
};
use proto_kafka::protocol::{Request, StrBytes};
use tokio::sync::{watch, Mutex};

use super::transaction::{fenced, PendingOp, TransactionState};
use super::{Inner, Producer};
use crate::accumulator::TopicPartition;
use crate::admin::{Admin, OffsetAndMetadata};
use crate::connection::Connection;
use crate::consumer::ConsumerGroupMetadata;
use crate::error::{ClientError, Result};

const INIT_PRODUCER_ID_MAX: i16 = 5;
/// v4+ batches transactions for broker-side verification (transaction
/// version 2).
const ADD_PARTITIONS_TO_TXN_MAX: i16 = 3;
/// v5 bumps the epoch on every EndTxn (transaction version 2).
const END_TXN_MAX: i16 = 4;
/// Kafka's `ADD_PARTITIONS_RETRY_BACKOFF_MS`: the first AddPartitionsToTxn
/// of a transaction retries CONCURRENT_TRANSACTIONS (the previous
/// transaction's markers) quickly.
const ADD_PARTITIONS_RETRY_BACKOFF: Duration = Duration::from_millis(20);

/// What a transactional request's answer means (Kafka's handlers).
#[derive(Debug)]
pub(super) enum Step<T> {
    Done(T),
    /// Retry after a backoff (`Some`: this one); `refind` looks the
    /// coordinator up again first.
    Retry {
        refind: bool,
        backoff: Option<Duration>,
    },
    Fatal(ClientError),
    Abortable(ClientError),
    /// Abortable with an epoch bump when the coordinator can bump epochs.
    AbortableIfPossible(ClientError),
}

fn retry<T>(refind: bool) -> Step<T> {
    Step::Retry {
        refind,
        backoff: None,
    }
}

/// Kafka's `ProducerFencedException`, for PRODUCER_FENCED and (from older
/// coordinators) INVALID_PRODUCER_EPOCH on transactional APIs.
pub(super) fn fenced_error(api: &str) -> ClientError {
    fenced(format!(
        "{api}: there is a newer producer with the same transactionalId which fences the current one"
    ))
}

/// The common part of the EndTxn, AddOffsetsToTxn and AddPartitionsToTxn
/// handlers: how a non-zero error code is handled.
pub(super) fn classify<T>(code: i16, api: &str) -> Step<T> {
    let Some(e) = ClientError::from_code(code, None, api) else {
        return Step::Fatal(ClientError::Protocol(format!(
            "{api}: unknown error code {code}"
        )));
    };
    match e.response_error() {
        Some(ResponseError::NotCoordinator | ResponseError::CoordinatorNotAvailable) => retry(true),
        Some(ResponseError::ConcurrentTransactions) => retry(false),
        _ if e.is_retriable() => retry(false),
        Some(ResponseError::InvalidProducerEpoch | ResponseError::ProducerFenced) => {
            Step::Fatal(fenced_error(api))
        }
        Some(ResponseError::UnknownProducerId | ResponseError::InvalidProducerIdMapping) => {
            Step::AbortableIfPossible(e)
        }
        Some(ResponseError::TransactionAbortable | ResponseError::GroupAuthorizationFailed) => {
            Step::Abortable(e)
        }
        // TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_TXN_STATE and
        // anything unexpected.
        _ => Step::Fatal(e),
    }
}

/// The error for transactional calls on a producer without
/// `transactional.id`.
fn not_transactional() -> ClientError {
    ClientError::IllegalState(
        "Cannot use transactional methods without enabling transactions by setting the \
         transactional.id configuration property"
            .into(),
    )
}

/// Moves the state machine after a failed transactional request and wakes
/// the sender (which drops or fails batches accordingly).
pub(super) fn apply_failure<T>(inner: &Inner, step: Step<T>) -> ClientError {
    let e = {
        let mut st = inner.lock();
        let e = match step {
            Step::Fatal(e) => {
                if let Some(t) = st.txn.as_mut() {
                    t.fatal(e.clone());
                }
                if let Some(i) = st.idem.as_mut() {
                    i.set_fatal(e.clone());
                }
                e
            }
            Step::Abortable(e) => {
                if let Some(t) = st.txn.as_mut() {
                    t.abortable(e.clone());
                }
                e
            }
            Step::AbortableIfPossible(e) => {
                let mut fatal = false;
                if let Some(t) = st.txn.as_mut() {
                    t.abortable_if_possible(e.clone());
                    fatal = t.state() == TransactionState::FatalError;
                }
                if fatal {
                    if let Some(i) = st.idem.as_mut() {
                        i.set_fatal(e.clone());
                    }
                }
                e
            }
            Step::Done(_) | Step::Retry { .. } => ClientError::Protocol("not a failure".into()),
        };
        e
    };
    inner.wake.notify_one();
    inner.progress.notify_waiters();
    e
}

/// The transaction coordinator's connection, found (FindCoordinator with
/// key type TRANSACTION) and opened when there is none or it broke.
async fn coordinator(
    inner: &Inner,
    slot: &mut Option<Arc<Mutex<Connection>>>,
) -> Result<Arc<Mutex<Connection>>> {
    if let Some(c) = slot.as_ref() {
        if !c.lock().await.is_broken() {
            return Ok(c.clone());
        }
    }
    let id = transactional_id(inner)?;
    let broker = Admin::from_cluster(inner.cluster.clone())
        .find_transaction_coordinator(&id)
        .await?;
    let conn =
        Connection::connect(&broker.addr(), inner.cluster.config().connection.clone()).await?;
    // KIP-360: a coordinator speaking InitProducerId v3+ bumps epochs.
    let bump = conn
        .broker_versions(ApiKey::InitProducerId)
        .is_some_and(|(_, max)| max >= 3);
    if let Some(t) = inner.lock().txn.as_mut() {
        t.can_bump_epoch = bump;
    }
    tracing::debug!(coordinator = broker.id, transactional_id = %id, "transaction coordinator found");
    let conn = Arc::new(Mutex::new(conn));
    *slot = Some(conn.clone());
    Ok(conn)
}

pub(super) fn transactional_id(inner: &Inner) -> Result<String> {
    inner
        .lock()
        .txn
        .as_ref()
        .map(|t| t.transactional_id.clone())
        .ok_or_else(not_transactional)
}

/// The producer id and epoch in use.
pub(super) fn producer_of(inner: &Inner) -> (i64, i16) {
    inner
        .lock()
        .idem
        .as_ref()
        .and_then(|i| i.producer())
        .unwrap_or((-1, -1))
}

/// Sends a request built by `build` (for the negotiated version) to the
/// transaction coordinator until `handle` says it is done or failed;
/// failures move the state machine ([`apply_failure`]).
pub(super) async fn coordinator_request<R: Request, T>(
    inner: &Inner,
    our_max: i16,
    build: impl Fn(i16) -> R,
    mut handle: impl FnMut(&R::Response, i16) -> Step<T>,
) -> Result<T> {
    let key = ApiKey::try_from(R::KEY)
        .map_err(|()| ClientError::Protocol(format!("unknown API key {}", R::KEY)))?;
    let mut backoff = inner.config.client.retry_backoff;
    loop {
        let step = {
            let mut slot = inner.txn_io.lock().await;
            let sent = async {
                let conn = coordinator(inner, &mut slot).await?;
                let mut conn = conn.lock().await;
                let version = conn.version_for(key, our_max)?;
                let resp = conn.send(&build(version), version).await?;
                Ok::<_, ClientError>((resp, version))
            }
            .await;
            let step = match sent {
                Ok((resp, version)) => handle(&resp, version),
                Err(e) if e.is_retriable() => retry(true),
                Err(e) => Step::Fatal(e),
            };
            if matches!(step, Step::Retry { refind: true, .. }) {
                *slot = None;
            }
            step
        };
        match step {
            Step::Done(t) => return Ok(t),
            Step::Retry {
                backoff: custom, ..
            } => {
                {
                    let st = inner.lock();
                    if st.closed {
                        return Err(ClientError::IllegalState(format!(
                            "{key:?} abandoned: the producer is closed"
                        )));
                    }
                    if let Some(t) = st.txn.as_ref() {
                        // A failed producer retries nothing; a failed
                        // transaction adds no more partitions (Kafka's
                        // `maybeTerminateRequestWithError`).
                        let stop = t.state() == TransactionState::FatalError
                            || (matches!(key, ApiKey::AddPartitionsToTxn)
                                && t.state() == TransactionState::AbortableError);
                        if stop {
                            let producer = st.idem.as_ref().and_then(|i| i.producer());
                            return Err(t
                                .maybe_fail(producer)
                                .err()
                                .unwrap_or(ClientError::TransactionAborted));
                        }
                    }
                }
                tracing::debug!(api = ?key, "transactional request retried");
                tokio::time::sleep(custom.unwrap_or(backoff).min(backoff)).await;
                backoff = (backoff * 2).min(inner.config.client.retry_backoff_max);
            }
            failure => return Err(apply_failure(inner, failure)),
        }
    }
}

/// InitProducerId for the transactional id: a new producer id or epoch
/// (fencing older producers of the id), or, with `current`, the epoch
/// bump after an abortable error (KIP-360). Ends in `READY` with every
/// sequence reset.
async fn init_producer_id(inner: &Inner, current: Option<(i64, i16)>) -> Result<()> {
    let (id, timeout) = {
        let st = inner.lock();
        let t = st.txn.as_ref().ok_or_else(not_transactional)?;
        (t.transactional_id.clone(), t.timeout_ms)
    };
    let (pid, epoch) = coordinator_request(
        inner,
        INIT_PRODUCER_ID_MAX,
        |v| {
            let mut req = InitProducerIdRequest::default();
            req.transactional_id = Some(TransactionalId(StrBytes::from_string(id.clone())));
            req.transaction_timeout_ms = timeout;
            let (pid, epoch) = current.filter(|_| v >= 3).unwrap_or((-1, -1));
            if v >= 3 {
                req.producer_id = ProducerId(pid);
                req.producer_epoch = epoch;
            }
            req
        },
        |resp, _| {
            let Some(e) = ClientError::from_code(resp.error_code, None, "InitProducerId") else {
                return Step::Done((resp.producer_id.0, resp.producer_epoch));
            };
            match e.response_error() {
                Some(ResponseError::NotCoordinator | ResponseError::CoordinatorNotAvailable) => {
                    retry(true)
                }
                Some(ResponseError::ConcurrentTransactions) => retry(false),
                _ if e.is_retriable() => retry(false),
                Some(ResponseError::InvalidProducerEpoch | ResponseError::ProducerFenced) => {
                    Step::Fatal(fenced_error("InitProducerId"))
                }
                Some(ResponseError::TransactionAbortable) => Step::Abortable(e),
                _ => Step::Fatal(e),
            }
        },
    )
    .await?;
    let mut st = inner.lock();
    if let Some(i) = st.idem.as_mut() {
        i.reset_sequences(pid, epoch);
    }
    if let Some(t) = st.txn.as_mut() {
        t.transition(TransactionState::Ready)?;
    }
    drop(st);
    inner.wake.notify_one();
    Ok(())
}

/// The background task that adds new partitions to the open transaction
/// (AddPartitionsToTxn) and wakes the sender once they are added. Ends
/// when the producer closes.
pub(super) async fn add_partitions_task(inner: Arc<Inner>) {
    loop {
        let notified = inner.txn_wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let (next, closed) = {
            let mut st = inner.lock();
            let closed = st.closed;
            (
                st.txn.as_mut().and_then(|t| t.next_add_partitions()),
                closed,
            )
        };
        match next {
            Some(partitions) => add_partitions(&inner, partitions).await,
            None if closed => return,
            None => notified.await,
        }
    }
}

async fn add_partitions(inner: &Inner, partitions: Vec<TopicPartition>) {
    let id = match transactional_id(inner) {
        Ok(id) => id,
        Err(_) => return,
    };
    let (pid, epoch) = producer_of(inner);
    let first = inner
        .lock()
        .txn
        .as_ref()
        .is_some_and(|t| !t.has_added_partitions());
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in &partitions {
        by_topic
            .entry(tp.topic.as_str())
            .or_default()
            .push(tp.partition);
    }
    let outcome = coordinator_request(
        inner,
        ADD_PARTITIONS_TO_TXN_MAX,
        |_| {
            let mut req = AddPartitionsToTxnRequest::default();
            req.v3_and_below_transactional_id = TransactionalId(StrBytes::from_string(id.clone()));
            req.v3_and_below_producer_id = ProducerId(pid);
            req.v3_and_below_producer_epoch = epoch;
            req.v3_and_below_topics = by_topic
                .iter()
                .map(|(topic, parts)| {
                    let mut t = AddPartitionsToTxnTopic::default();
                    t.name = TopicName(StrBytes::from_string((*topic).to_string()));
                    t.partitions = parts.clone();
                    t
                })
                .collect();
            req
        },
        |resp, _| {
            let mut failed: Vec<(String, ResponseError)> = Vec::new();
            let mut unauthorized = None;
            for t in &resp.results_by_topic_v3_and_below {
                for p in &t.results_by_partition {
                    let code = p.partition_error_code;
                    let Some(e) = ClientError::from_code(code, None, "AddPartitionsToTxn") else {
                        continue;
                    };
                    let tp = format!("{}-{}", t.name.0.as_str(), p.partition_index);
                    match e.response_error() {
                        Some(ResponseError::ConcurrentTransactions) => {
                            return Step::Retry {
                                refind: false,
                                backoff: first.then_some(ADD_PARTITIONS_RETRY_BACKOFF),
                            };
                        }
                        Some(ResponseError::TopicAuthorizationFailed) => {
                            unauthorized.get_or_insert(e);
                        }
                        Some(error @ ResponseError::OperationNotAttempted) => {
                            failed.push((tp, error));
                        }
                        Some(error) if !error.is_retriable() && !is_txn_level(error) => {
                            failed.push((tp, error));
                        }
                        _ => return classify(code, "AddPartitionsToTxn"),
                    }
                }
            }
            if let Some(e) = unauthorized {
                return Step::Abortable(e);
            }
            match failed
                .iter()
                .find(|(_, e)| *e != ResponseError::OperationNotAttempted)
            {
                None if failed.is_empty() => Step::Done(()),
                first => {
                    let code = first
                        .map_or(ResponseError::OperationNotAttempted, |f| f.1)
                        .code();
                    let list: Vec<String> =
                        failed.iter().map(|(tp, e)| format!("{tp}={e:?}")).collect();
                    Step::Abortable(
                        ClientError::from_code(
                            code,
                            Some(format!(
                                "Could not add partitions to transaction due to errors: {}",
                                list.join(", ")
                            )),
                            "AddPartitionsToTxn",
                        )
                        .unwrap_or(ClientError::TransactionAborted),
                    )
                }
            }
        },
    )
    .await;
    {
        let mut st = inner.lock();
        if let Some(t) = st.txn.as_mut() {
            match &outcome {
                Ok(()) => {
                    tracing::debug!(?partitions, "partitions added to the transaction");
                    t.partitions_added();
                }
                Err(_) => t.add_partitions_failed(),
            }
        }
    }
    inner.wake.notify_one();
    inner.progress.notify_waiters();
}

/// Errors the whole AddPartitionsToTxn request shares (handled by
/// [`classify`]), as opposed to per-partition problems.
fn is_txn_level(e: ResponseError) -> bool {
    matches!(
        e,
        ResponseError::InvalidProducerEpoch
            | ResponseError::ProducerFenced
            | ResponseError::TransactionalIdAuthorizationFailed
            | ResponseError::InvalidTxnState
            | ResponseError::UnknownProducerId
            | ResponseError::InvalidProducerIdMapping
            | ResponseError::TransactionAbortable
            | ResponseError::NotCoordinator
            | ResponseError::CoordinatorNotAvailable
    )
}

/// Ends the transaction: waits for its batches (a commit flushes them; an
/// abort drops those not sent yet), then sends EndTxn unless nothing was
/// added, then bumps the epoch if an abortable error asked for it.
async fn end_transaction(inner: Arc<Inner>, commit: bool) -> Result<()> {
    if !commit {
        let dropped = {
            let mut st = inner.lock();
            let reason = st
                .txn
                .as_ref()
                .and_then(super::transaction::TransactionManager::abort_new_batches_with);
            reason.map(|e| super::sender::abort_new_batches(&mut st, &e))
        };
        if dropped.is_some_and(|n| n > 0) {
            inner.progress.notify_waiters();
        }
    }
    inner.flush().await;
    // An AddPartitionsToTxn in flight (or being retried) decides whether
    // EndTxn is due: wait for its outcome.
    loop {
        let notified = inner.progress.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if !inner
            .lock()
            .txn
            .as_ref()
            .is_some_and(super::transaction::TransactionManager::has_pending_add)
        {
            break;
        }
        notified.await;
    }
    let skipped = {
        let _io = inner.txn_io.lock().await;
        let mut st = inner.lock();
        let producer = st.idem.as_ref().and_then(|i| i.producer());
        let Some(t) = st.txn.as_mut() else {
            return Err(not_transactional());
        };
        t.maybe_fail(producer)?;
        if t.skip_end_txn() {
            Some((t.complete()?, producer))
        } else {
            None
        }
    };
    if let Some((bump, producer)) = skipped {
        if bump {
            return init_producer_id(&inner, producer).await;
        }
        return Ok(());
    }
    let id = transactional_id(&inner)?;
    let (pid, epoch) = producer_of(&inner);
    let api = if commit {
        "EndTxn(commit)"
    } else {
        "EndTxn(abort)"
    };
    coordinator_request(
        &inner,
        END_TXN_MAX,
        |_| {
            let mut req = EndTxnRequest::default();
            req.transactional_id = TransactionalId(StrBytes::from_string(id.clone()));
            req.producer_id = ProducerId(pid);
            req.producer_epoch = epoch;
            req.committed = commit;
            req
        },
        |resp, _| match resp.error_code {
            0 => Step::Done(()),
            code => classify(code, api),
        },
    )
    .await?;
    let bump = {
        let mut st = inner.lock();
        match st.txn.as_mut() {
            Some(t) => t.complete()?,
            None => false,
        }
    };
    if bump {
        init_producer_id(&inner, Some((pid, epoch))).await?;
    }
    Ok(())
}

/// Runs `fut` as a task; its outcome goes to the returned receiver.
fn spawn_op(
    fut: impl Future<Output = Result<()>> + Send + 'static,
) -> watch::Receiver<Option<Result<()>>> {
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let r = fut.await;
        let _ = tx.send(Some(r));
    });
    rx
}

impl Producer {
    fn max_block(&self) -> Duration {
        Duration::from_millis(self.inner.config.max_block_ms)
    }

    /// Waits up to `max.block.ms` for a call's outcome; a call that timed
    /// out stays pending (the same call picks it up again).
    async fn await_op(
        &self,
        op: &'static str,
        mut rx: watch::Receiver<Option<Result<()>>>,
    ) -> Result<()> {
        let waited = tokio::time::timeout(self.max_block(), rx.wait_for(Option::is_some)).await;
        let outcome = match waited {
            Err(_) => {
                return Err(ClientError::Timeout {
                    api: format!("{op} (max.block.ms; call it again to keep waiting)"),
                    addr: "transaction coordinator".into(),
                    timeout: self.max_block(),
                })
            }
            Ok(Err(_)) => Err(ClientError::Protocol(format!(
                "{op}: the producer task stopped"
            ))),
            Ok(Ok(r)) => r.clone().unwrap_or(Ok(())),
        };
        let mut st = self.inner.lock();
        if let Some(t) = st.txn.as_mut() {
            if t.pending.as_ref().is_some_and(|p| p.op == op) {
                t.pending = None;
            }
        }
        outcome
    }

    /// Starts `op` unless an earlier call of it is still pending: `start`
    /// checks and changes the state, then returns the work to run.
    async fn run_op<F>(
        &self,
        op: &'static str,
        start: impl FnOnce(&mut super::State) -> Result<F>,
    ) -> Result<()>
    where
        F: Future<Output = Result<()>> + Send + 'static,
    {
        let rx = {
            let mut st = self.inner.lock();
            let cached = st.txn.as_mut().ok_or_else(not_transactional)?.cached(op)?;
            match cached {
                Some(p) => p.result,
                None => {
                    let fut = start(&mut st)?;
                    let rx = spawn_op(fut);
                    if let Some(t) = st.txn.as_mut() {
                        t.pending = Some(PendingOp {
                            op,
                            result: rx.clone(),
                        });
                    }
                    rx
                }
            }
        };
        self.inner.wake.notify_one();
        self.await_op(op, rx).await
    }

    /// Whether the producer is transactional (`transactional.id`).
    pub fn is_transactional(&self) -> bool {
        self.inner.lock().txn.is_some()
    }

    /// The transaction state (`None` without `transactional.id`).
    pub fn transaction_state(&self) -> Option<TransactionState> {
        self.inner.lock().txn.as_ref().map(|t| t.state())
    }

    /// Kafka's `initTransactions`: finds the transaction coordinator and
    /// gets the producer id and epoch for `transactional.id`, which fences
    /// older producers with the same id and completes (aborts) their open
    /// transaction. Call once, before the first transaction; waits up to
    /// `max.block.ms` (calling it again after a timeout keeps waiting).
    pub async fn init_transactions(&self) -> Result<()> {
        let inner = self.inner.clone();
        self.run_op("initTransactions", |st| {
            let producer = st.idem.as_ref().and_then(|i| i.producer());
            let t = st.txn.as_mut().ok_or_else(not_transactional)?;
            t.maybe_fail(producer)?;
            t.transition(TransactionState::Initializing)?;
            Ok(async move { init_producer_id(&inner, None).await })
        })
        .await
    }

    /// Kafka's `beginTransaction`: opens a transaction (after
    /// [`init_transactions`](Self::init_transactions); one at a time).
    pub fn begin_transaction(&self) -> Result<()> {
        let mut st = self.inner.lock();
        let producer = st.idem.as_ref().and_then(|i| i.producer());
        st.txn
            .as_mut()
            .ok_or_else(not_transactional)?
            .begin(producer)
    }

    /// Kafka's `sendOffsetsToTransaction`: makes the consumer offsets
    /// `offsets` (the next offset to read, per partition) part of the open
    /// transaction, committed for the group of `group_metadata` (from
    /// [`Consumer::group_metadata`](crate::consumer::Consumer::group_metadata))
    /// only if the transaction commits. Waits until the group coordinator
    /// accepted them (up to `max.block.ms`).
    pub async fn send_offsets_to_transaction(
        &self,
        offsets: &BTreeMap<TopicPartition, OffsetAndMetadata>,
        group_metadata: &ConsumerGroupMetadata,
    ) -> Result<()> {
        if group_metadata.generation_id > 0 && group_metadata.member_id.is_empty() {
            return Err(ClientError::InvalidArgument(format!(
                "Passed in group metadata {group_metadata:?} has generationId > 0 but member.id "
            )));
        }
        {
            let mut st = self.inner.lock();
            let producer = st.idem.as_ref().and_then(|i| i.producer());
            let t = st.txn.as_mut().ok_or_else(not_transactional)?;
            t.check_pending("sendOffsetsToTransaction")?;
            t.maybe_fail(producer)?;
            if t.state() != TransactionState::InTransaction {
                return Err(ClientError::IllegalState(format!(
                    "Cannot send offsets if a transaction is not in progress (currentState= {})",
                    t.state()
                )));
            }
        }
        if offsets.is_empty() {
            return Ok(());
        }
        let inner = self.inner.clone();
        let (offsets, group) = (offsets.clone(), group_metadata.clone());
        let rx =
            spawn_op(async move { super::txn_offsets::send_offsets(&inner, offsets, group).await });
        self.await_op("sendOffsetsToTransaction", rx).await
    }

    /// Kafka's `commitTransaction`: flushes the transaction's records and
    /// commits it (EndTxn). Fails, leaving only
    /// [`abort_transaction`](Self::abort_transaction), if any record of
    /// the transaction failed. Waits up to `max.block.ms` (calling it again
    /// after a timeout keeps waiting).
    pub async fn commit_transaction(&self) -> Result<()> {
        let inner = self.inner.clone();
        self.run_op("commitTransaction", |st| {
            let producer = st.idem.as_ref().and_then(|i| i.producer());
            let t = st.txn.as_mut().ok_or_else(not_transactional)?;
            t.begin_commit(producer)?;
            Ok(end_transaction(inner, true))
        })
        .await
    }

    /// Kafka's `abortTransaction`: records not sent yet fail with
    /// [`ClientError::TransactionAborted`], records in flight complete,
    /// then the transaction is aborted (EndTxn); after an abortable error
    /// the epoch is bumped too. The only call allowed after an abortable
    /// error. Waits up to `max.block.ms`.
    pub async fn abort_transaction(&self) -> Result<()> {
        let inner = self.inner.clone();
        self.run_op("abortTransaction", |st| {
            let producer = st.idem.as_ref().and_then(|i| i.producer());
            let t = st.txn.as_mut().ok_or_else(not_transactional)?;
            t.begin_abort(producer)?;
            Ok(end_transaction(inner, false))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(step: Step<()>) -> String {
        match step {
            Step::Done(()) => "done".into(),
            Step::Retry { refind: true, .. } => "refind".into(),
            Step::Retry { refind: false, .. } => "retry".into(),
            Step::Fatal(e) => format!("fatal {:?}", e.response_error()),
            Step::Abortable(e) => format!("abortable {:?}", e.response_error()),
            Step::AbortableIfPossible(e) => format!("bump {:?}", e.response_error()),
        }
    }

    /// EndTxn, AddOffsetsToTxn and AddPartitionsToTxn errors as Kafka's
    /// handlers treat them.
    #[test]
    fn transactional_errors_are_classified_as_kafkas_client_does() {
        let cases = [
            (16, "refind"),                     // NOT_COORDINATOR
            (15, "refind"),                     // COORDINATOR_NOT_AVAILABLE
            (14, "retry"),                      // COORDINATOR_LOAD_IN_PROGRESS
            (51, "retry"),                      // CONCURRENT_TRANSACTIONS
            (47, "fatal Some(ProducerFenced)"), // INVALID_PRODUCER_EPOCH
            (90, "fatal Some(ProducerFenced)"), // PRODUCER_FENCED
            (53, "fatal Some(TransactionalIdAuthorizationFailed)"),
            (48, "fatal Some(InvalidTxnState)"),
            (49, "bump Some(InvalidProducerIdMapping)"),
            (59, "bump Some(UnknownProducerId)"),
            (120, "abortable Some(TransactionAbortable)"),
            (30, "abortable Some(GroupAuthorizationFailed)"),
            (42, "fatal Some(InvalidRequest)"),
        ];
        for (code, want) in cases {
            assert_eq!(kind(classify(code, "EndTxn")), want, "code {code}");
        }
        let e = match classify::<()>(47, "EndTxn") {
            Step::Fatal(e) => e,
            other => panic!("{}", kind(other)),
        };
        assert!(e.to_string().contains("fences the current one"), "{e}");
    }
}
