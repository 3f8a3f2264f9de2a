//! The producer's sender: the loop that drains ready batches into Produce
//! requests (at most `max_in_flight` outstanding per broker, at most
//! [`max_in_flight_per_partition`] batches per partition), one writer task
//! per broker that writes those requests in order on the broker's pipelined
//! connection, per-request tasks that await the responses, completion with
//! retries, delivery-timeout expiry, and the background metadata refresh.
//! For an idempotent producer it also asks for the producer id
//! (InitProducerId, [`init_producer_id`]) and lets the idempotence state
//! (`super::idempotence`) decide what may be drained, which sequences new
//! batches get, and what a failed batch means for the partition.
//! For a transactional producer it drains a partition only once it is in
//! the transaction (AddPartitionsToTxn answered), drops the batches not
//! sent yet when the transaction failed or is aborted, and reports every
//! batch that fails for good to the transaction state (an abortable or
//! fatal error, `super::transaction`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use proto_kafka::error::ResponseError;
use proto_kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use proto_kafka::messages::{
    ApiKey, InitProducerIdRequest, ProduceRequest, ProduceResponse, ProducerId, TopicName,
};
use proto_kafka::protocol::StrBytes;
use sluice_protocol::record::codec::ProducerInfo;
use tokio::sync::{mpsc, oneshot};

use super::delivery::Delivery;
use super::idempotence::Failure;
use super::{partition_info, Inner, ProducerConfig, State, MAX_IN_FLIGHT_IDEMPOTENT};
use crate::accumulator::{BatchId, Front, ReadyBatch, TopicPartition};
use crate::cluster::{BrokerInfo, Metadata};
use crate::connection::PendingResponse;
use crate::error::{ClientError, Result};

/// Highest Produce version this producer speaks (v13 replaces topic names
/// with topic ids).
const PRODUCE_MAX: i16 = 12;

/// Highest InitProducerId version this producer speaks.
const INIT_PRODUCER_ID_MAX: i16 = 5;

/// Batches one partition may have in flight at once.
///
/// `max_in_flight`, as Kafka's producer (whose limit is per connection, one
/// batch per partition in a request). Without idempotence a retried batch
/// may then land after a later batch of its partition, as in Kafka; with
/// `max_in_flight` 1 it cannot. An idempotent producer keeps at most 5:
/// the broker's sequence checks refuse a batch that overtakes a missing
/// one, and retries leave in sequence order, one at a time
/// (`Idempotence::may_drain`).
pub(super) fn max_in_flight_per_partition(config: &ProducerConfig, idempotent: bool) -> usize {
    if idempotent {
        config.max_in_flight.clamp(1, MAX_IN_FLIGHT_IDEMPOTENT)
    } else {
        config.max_in_flight.max(1)
    }
}

/// One Produce request's batches (one per partition) for a broker.
type Outgoing = Vec<ReadyBatch>;

/// The sender loop: expire old batches, drain ready ones into requests per
/// leader, hand them to the broker writer tasks, sleep until something is
/// due.
pub(super) async fn run_sender(inner: Arc<Inner>) {
    let mut writers: HashMap<i32, mpsc::UnboundedSender<Outgoing>> = HashMap::new();
    loop {
        let notified = inner.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let (ready, expired) = {
            let mut st = inner.lock();
            if st.closed {
                // Deliver what is left without lingering.
                st.acc.begin_flush();
                if !st.acc.has_undrained() && st.in_flight == 0 {
                    break;
                }
            }
            let now = inner.now_ms();
            let mut expired = expire_undrained(&inner, &mut st, now);
            let abort = st
                .txn
                .as_ref()
                .and_then(super::transaction::TransactionManager::abort_new_batches_with);
            if let Some(e) = abort {
                expired |= abort_new_batches(&mut st, &e) > 0;
            }
            if let Some(idem) = st.idem.as_mut() {
                if let Some(e) = idem.fatal().cloned() {
                    expired |= abort_all(&mut st, &e);
                } else {
                    idem.before_drain();
                    if idem.needs_producer_id() {
                        tokio::spawn(init_producer_id(inner.clone()));
                    }
                }
            }
            (st.acc.ready(now), expired)
        };
        if expired {
            inner.progress.notify_waiters();
        }
        // Partitions ready but not sendable now (no leader, broker at its
        // in-flight limit): left out of the wake-up time.
        let mut blocked: HashSet<TopicPartition> = HashSet::new();
        let mut leaderless = false;
        let mut requests = Vec::new();
        if !ready.is_empty() {
            let md = inner.cluster.metadata().await;
            let mut st = inner.lock();
            let now = inner.now_ms();
            match plan(&inner, &mut st, &md, ready, now, &mut blocked) {
                Ok((r, l)) => {
                    requests = r;
                    leaderless = l;
                }
                Err(e) => {
                    tracing::error!(%e, "encoding batches failed");
                    if let Some(idem) = st.idem.as_mut() {
                        idem.set_fatal(e.clone());
                    }
                    for id in st.acc.abort_undrained() {
                        fail_batch_records(&mut st, id, &e);
                    }
                    drop(st);
                    inner.progress.notify_waiters();
                    continue;
                }
            }
        }
        if !requests.is_empty() {
            for (leader, batches) in requests {
                dispatch(&inner, &mut writers, leader, batches);
            }
            continue;
        }
        let next = {
            let st = inner.lock();
            let ready = st.acc.next_ready_ms_where(|tp| !blocked.contains(tp));
            let expiry = st.acc.next_expiry_ms(inner.config.delivery_timeout_ms);
            let retry = leaderless
                .then(|| inner.now_ms() + inner.config.client.retry_backoff.as_millis() as u64);
            [ready, expiry, retry].into_iter().flatten().min()
        };
        match next {
            Some(at) => {
                let wait = at.saturating_sub(inner.now_ms());
                let _ = tokio::time::timeout(Duration::from_millis(wait.max(1)), notified).await;
            }
            None => notified.await,
        }
    }
}

/// Drains the ready partitions into requests: per leader, while the broker
/// has fewer than `max_in_flight` requests outstanding, one request with
/// at most one batch of each partition that is below its in-flight limit.
/// Returns the requests and whether some partition had no leader.
fn plan(
    inner: &Arc<Inner>,
    st: &mut State,
    md: &Metadata,
    ready: Vec<TopicPartition>,
    now: u64,
    blocked: &mut HashSet<TopicPartition>,
) -> Result<(Vec<(i32, Outgoing)>, bool)> {
    let per_partition = max_in_flight_per_partition(&inner.config, st.idem.is_some());
    let max_requests = inner.config.max_in_flight.max(1);
    let mut by_leader: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
    let mut leaderless = false;
    for tp in ready {
        match md.leader(&tp.topic, tp.partition) {
            Some(b) => by_leader.entry(b.id).or_default().push(tp),
            None => {
                // Stays in the accumulator until a leader is known or
                // delivery.timeout.ms expires it.
                leaderless = true;
                request_refresh(inner, st, &tp.topic);
                blocked.insert(tp);
            }
        }
    }
    let mut out = Vec::new();
    for (leader, tps) in by_leader {
        loop {
            let outstanding = st.broker_requests.get(&leader).copied().unwrap_or(0);
            if outstanding >= max_requests {
                blocked.extend(tps.iter().cloned());
                break;
            }
            let mut batches = Vec::new();
            for tp in &tps {
                if st.partition_in_flight.get(tp).copied().unwrap_or(0) >= per_partition {
                    continue;
                }
                let Some(b) = drain_one(st, tp, now)? else {
                    if st.acc.front(tp, now).is_some() {
                        // Held back by the idempotence rules: woken when an
                        // outcome or the producer id arrives.
                        blocked.insert(tp.clone());
                    }
                    continue;
                };
                let n = st.partition_in_flight.entry(tp.clone()).or_insert(0);
                *n += 1;
                if *n >= per_partition {
                    st.acc.mute(tp);
                }
                batches.push(b);
            }
            if batches.is_empty() {
                break;
            }
            *st.broker_requests.entry(leader).or_insert(0) += 1;
            st.in_flight += batches.len();
            out.push((leader, batches));
        }
    }
    Ok((out, leaderless))
}

/// Drains `tp`'s next batch if it may go: without idempotence whatever is
/// ready; with it only what `Idempotence::may_drain` allows, new batches
/// stamped with their producer id, epoch and sequence, retries rewritten
/// when an epoch bump reset their sequence.
fn drain_one(st: &mut State, tp: &TopicPartition, now: u64) -> Result<Option<ReadyBatch>> {
    if st.txn.as_ref().is_some_and(|t| !t.is_send_allowed(tp)) {
        // Not in the transaction yet (or the producer failed).
        return Ok(None);
    }
    let Some(idem) = st.idem.as_mut() else {
        return st.acc.drain_next(tp, now, ProducerInfo::default());
    };
    let Some(front) = st.acc.front(tp, now) else {
        return Ok(None);
    };
    if !idem.may_drain(tp, front) {
        return Ok(None);
    }
    match front {
        Front::New { id, records } => {
            let info = idem.assign(tp, id, records);
            st.acc.drain_next(tp, now, info)
        }
        Front::Retry { id } => {
            let current = idem.current(tp, id);
            let mut b = st.acc.drain_next(tp, now, ProducerInfo::default())?;
            if let (Some(b), Some(info)) = (b.as_mut(), current) {
                b.set_producer(info);
            }
            Ok(b)
        }
    }
}

/// Fails every record not delivered yet with the idempotent producer's
/// fatal error `e` (Kafka's `maybeAbortBatches`); batches in flight are
/// released when their responses arrive. Returns whether anything failed.
fn abort_all(st: &mut State, e: &ClientError) -> bool {
    let ids = st.acc.abort_undrained();
    for id in &ids {
        st.failures.remove(id);
    }
    // In creation order, so each partition's records fail in send order.
    let mut pending: Vec<BatchId> = st.pending.keys().copied().collect();
    pending.sort_unstable();
    for id in &pending {
        fail_batch_records(st, *id, e);
    }
    !pending.is_empty()
}

/// Drops the batches of a transactional producer that were never sent
/// (their partitions may not even be in the transaction), failing their
/// records with `e`; retries of sent batches still go out. Returns how
/// many batches were dropped.
pub(super) fn abort_new_batches(st: &mut State, e: &ClientError) -> usize {
    let ids = st.acc.abort_new_batches();
    for id in &ids {
        st.failures.remove(id);
        fail_batch_records(st, *id, e);
    }
    ids.len()
}

/// A batch of a transactional producer failed for good: the transaction
/// fails too (abortable, or fatal for fenced and unauthorized producers).
fn transaction_failed(st: &mut State, e: &ClientError) {
    let Some(t) = st.txn.as_mut() else {
        return;
    };
    t.on_error(e);
    if t.state() == super::TransactionState::FatalError {
        if let Some(i) = st.idem.as_mut() {
            i.set_fatal(e.clone());
        }
    }
}

/// Asks any broker for a producer id (InitProducerId without a
/// transactional id) until it gets one, retrying retriable errors with
/// backoff; a non-retriable error (unsupported version, authorization)
/// stops the producer (Kafka's `InitProducerIdHandler`). Wakes the sender.
async fn init_producer_id(inner: Arc<Inner>) {
    let mut req = InitProducerIdRequest::default();
    req.transactional_id = None;
    req.transaction_timeout_ms = i32::MAX;
    req.producer_id = ProducerId(-1);
    req.producer_epoch = -1;
    let mut backoff = inner.config.client.retry_backoff;
    let outcome = loop {
        let e = match inner.cluster.send_any(&req, INIT_PRODUCER_ID_MAX).await {
            Ok((resp, _)) => {
                match ClientError::from_code(resp.error_code, None, "InitProducerId") {
                    None => break Ok((resp.producer_id.0, resp.producer_epoch)),
                    Some(e) => e,
                }
            }
            Err(e) => e,
        };
        if !e.is_retriable() {
            break Err(e);
        }
        let idle = {
            let st = inner.lock();
            st.closed && !st.acc.has_undrained()
        };
        if idle {
            return;
        }
        tracing::debug!(%e, "InitProducerId failed; retrying");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(inner.config.client.retry_backoff_max);
    };
    {
        let mut st = inner.lock();
        if let Some(idem) = st.idem.as_mut() {
            match outcome {
                Ok((id, epoch)) => idem.set_producer_id(id, epoch),
                Err(ClientError::UnsupportedVersion { api, addr }) => {
                    idem.set_fatal(ClientError::UnsupportedVersion {
                        api: format!(
                            "{api} (the idempotent producer needs InitProducerId; \
                             set enable.idempotence=false for this broker)"
                        ),
                        addr,
                    });
                }
                Err(e) => idem.set_fatal(e),
            }
        }
    }
    inner.wake.notify_one();
    inner.progress.notify_waiters();
}

/// Hands a request to broker `leader`'s writer task (started on first use,
/// restarted if it ended).
fn dispatch(
    inner: &Arc<Inner>,
    writers: &mut HashMap<i32, mpsc::UnboundedSender<Outgoing>>,
    leader: i32,
    batches: Outgoing,
) {
    let spawn = || {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(broker_writer(inner.clone(), leader, rx));
        tx
    };
    let tx = writers.entry(leader).or_insert_with(spawn);
    if let Err(mpsc::error::SendError(batches)) = tx.send(batches) {
        let tx = spawn();
        let _ = tx.send(batches);
        writers.insert(leader, tx);
    }
}

/// Writes broker `leader`'s requests in order (without waiting for the
/// responses) and spawns a task per request that awaits its response. Ends
/// when the sender loop drops its channel.
///
/// Requests complete in the order they were written ([`Turn`]), as the
/// Java producer's single sender thread completes them, so the outcomes of
/// one partition's batches are delivered in send order.
async fn broker_writer(inner: Arc<Inner>, leader: i32, mut rx: mpsc::UnboundedReceiver<Outgoing>) {
    let mut previous: Option<oneshot::Receiver<()>> = None;
    while let Some(batches) = rx.recv().await {
        let req = produce_request(&inner.config, &batches);
        // Connecting and writing must not outlive the batches' deadline.
        let deadline = earliest_deadline(&inner, &batches);
        let written = tokio::time::timeout_at(deadline.into(), write(&inner, leader, &req)).await;
        let (done, next) = oneshot::channel();
        let mut turn = Turn {
            after: previous.replace(next),
            _done: done,
        };
        let outcome = match written {
            Err(_) => Err(ClientError::Timeout {
                api: "Produce (connect and write)".into(),
                addr: format!("broker {leader}"),
                timeout: Duration::from_millis(inner.config.delivery_timeout_ms),
            }),
            Ok(Err(e)) => Err(e),
            Ok(Ok(None)) => Ok(()),
            Ok(Ok(Some(pending))) => {
                tokio::spawn(await_response(
                    inner.clone(),
                    leader,
                    batches,
                    pending,
                    turn,
                ));
                continue;
            }
        };
        let inner = inner.clone();
        let complete = move || match outcome {
            Err(e) => complete_request(&inner, leader, batches, |_| (Err(e.clone()), -1)),
            Ok(()) => complete_request(&inner, leader, batches, |_| (Ok((-1, -1)), -1)),
        };
        if turn.is_now() {
            complete();
        } else {
            tokio::spawn(async move {
                turn.wait().await;
                complete();
                drop(turn);
            });
        }
    }
}

/// A request's place in its connection's completion order: it completes
/// after the request written before it (`after` resolves, or its sender is
/// dropped, when that one completed) and signals the next one by dropping
/// `_done`.
struct Turn {
    after: Option<oneshot::Receiver<()>>,
    _done: oneshot::Sender<()>,
}

impl Turn {
    /// Whether the previous request already completed.
    fn is_now(&mut self) -> bool {
        match self.after.as_mut() {
            None => true,
            Some(rx) => !matches!(rx.try_recv(), Err(oneshot::error::TryRecvError::Empty)),
        }
    }

    /// Waits until the previous request completed.
    async fn wait(&mut self) {
        if let Some(rx) = self.after.as_mut() {
            let _ = rx.await;
        }
    }
}

/// When the first of `batches` reaches `delivery.timeout.ms`.
fn earliest_deadline(inner: &Inner, batches: &[ReadyBatch]) -> std::time::Instant {
    let created = batches.iter().map(|b| b.created_ms).min().unwrap_or(0);
    inner.instant_at(created.saturating_add(inner.config.delivery_timeout_ms))
}

/// Writes one Produce request to broker `leader`; `None` with `acks=0`
/// (no response comes).
async fn write(
    inner: &Inner,
    leader: i32,
    req: &ProduceRequest,
) -> Result<Option<PendingResponse<ProduceResponse>>> {
    let conn = inner.cluster.connection(leader).await?;
    // The lock is only held for the write: responses are awaited outside.
    let mut conn = conn.lock().await;
    let version = conn.version_for(ApiKey::Produce, PRODUCE_MAX)?;
    if inner.config.acks == 0 {
        conn.send_oneway(req, version).await?;
        Ok(None)
    } else {
        let timeout = inner.config.request_timeout;
        Ok(Some(
            conn.send_request_timeout(req, version, timeout).await?,
        ))
    }
}

fn produce_request(cfg: &ProducerConfig, batches: &[ReadyBatch]) -> ProduceRequest {
    let mut req = ProduceRequest::default();
    req.acks = cfg.acks;
    req.timeout_ms = i32::try_from(cfg.request_timeout.as_millis()).unwrap_or(i32::MAX);
    let mut topics: BTreeMap<String, Vec<PartitionProduceData>> = BTreeMap::new();
    for b in batches {
        let mut p = PartitionProduceData::default();
        p.index = b.tp.partition;
        p.records = Some(b.bytes.clone());
        topics.entry(b.tp.topic.clone()).or_default().push(p);
    }
    req.topic_data = topics
        .into_iter()
        .map(|(name, partitions)| {
            let mut t = TopicProduceData::default();
            t.name = TopicName(StrBytes::from_string(name));
            t.partition_data = partitions;
            t
        })
        .collect();
    req
}

/// Awaits a Produce response, failing the records of batches whose
/// delivery timeout passes meanwhile (they stay in flight, their partition
/// muted, until the response or the request timeout), then, in its `turn`,
/// completes the request's batches.
async fn await_response(
    inner: Arc<Inner>,
    leader: i32,
    batches: Vec<ReadyBatch>,
    pending: PendingResponse<ProduceResponse>,
    mut turn: Turn,
) {
    let response = pending.wait();
    tokio::pin!(response);
    let mut expired: HashSet<BatchId> = HashSet::new();
    let result = loop {
        let next = batches
            .iter()
            .filter(|b| !expired.contains(&b.id))
            .min_by_key(|b| b.created_ms);
        let Some(next) = next else {
            break response.await;
        };
        let deadline = earliest_deadline(&inner, std::slice::from_ref(next));
        tokio::select! {
            biased;
            r = &mut response => break r,
            () = tokio::time::sleep_until(deadline.into()) => {
                let now = inner.now_ms();
                let mut st = inner.lock();
                for b in &batches {
                    if !expired.contains(&b.id) && is_expired(&inner.config, b.created_ms, now) {
                        expired.insert(b.id);
                        let e = delivery_timeout(
                            &inner.config,
                            &b.tp,
                            b.record_count,
                            now.saturating_sub(b.created_ms),
                            &format!("broker {leader}"),
                        );
                        fail_batch_records(&mut st, b.id, &e);
                        transaction_failed(&mut st, &e);
                    }
                }
            }
        }
    };
    turn.wait().await;
    match result {
        Err(e) => complete_request(&inner, leader, batches, |_| (Err(e.clone()), -1)),
        Ok(resp) => {
            apply_leader_hints(&inner, &resp).await;
            let mut outcomes: HashMap<TopicPartition, PartitionOutcome> = HashMap::new();
            for t in &resp.responses {
                for p in &t.partition_responses {
                    outcomes.insert(
                        TopicPartition::new(t.name.0.as_str(), p.index),
                        PartitionOutcome {
                            code: p.error_code,
                            base_offset: p.base_offset,
                            log_append_time: p.log_append_time_ms,
                            log_start_offset: p.log_start_offset,
                            message: p.error_message.as_ref().map(|m| m.as_str().to_string()),
                        },
                    );
                }
            }
            complete_request(&inner, leader, batches, |b| match outcomes.remove(&b.tp) {
                None => (
                    Err(ClientError::Protocol(format!(
                        "no produce response for {}-{}",
                        b.tp.topic, b.tp.partition
                    ))),
                    -1,
                ),
                Some(o) => match ClientError::from_code(
                    o.code,
                    o.message,
                    format!("produce to {}-{}", b.tp.topic, b.tp.partition),
                ) {
                    Some(e) => (Err(e), o.log_start_offset),
                    None => (Ok((o.base_offset, o.log_append_time)), o.log_start_offset),
                },
            });
        }
    }
}

/// KIP-951: partitions refused with NOT_LEADER_OR_FOLLOWER or
/// FENCED_LEADER_EPOCH may name their current leader (and the response its
/// endpoint); the metadata cache takes it when its epoch is newer, so the
/// retry goes there (a metadata refresh is requested anyway).
async fn apply_leader_hints(inner: &Inner, resp: &ProduceResponse) {
    let endpoints: Vec<BrokerInfo> = resp
        .node_endpoints
        .iter()
        .map(|e| BrokerInfo {
            id: e.node_id.0,
            host: e.host.as_str().to_string(),
            port: e.port,
            rack: e.rack.as_ref().map(|r| r.as_str().to_string()),
        })
        .collect();
    for t in &resp.responses {
        for p in &t.partition_responses {
            let hinted = matches!(
                ResponseError::try_from_code(p.error_code),
                Some(ResponseError::NotLeaderOrFollower | ResponseError::FencedLeaderEpoch)
            );
            if hinted {
                inner
                    .cluster
                    .apply_leader_hint(
                        t.name.0.as_str(),
                        p.index,
                        p.current_leader.leader_id.0,
                        p.current_leader.leader_epoch,
                        &endpoints,
                    )
                    .await;
            }
        }
    }
}

/// One partition's answer in a Produce response.
#[derive(Debug)]
struct PartitionOutcome {
    code: i16,
    base_offset: i64,
    log_append_time: i64,
    log_start_offset: i64,
    message: Option<String>,
}

/// Completes one request: releases its slot on broker `leader` and
/// completes each batch with `outcome(batch)`: base offset and append time,
/// or the error; and the partition's log start offset (-1 when unknown).
fn complete_request(
    inner: &Arc<Inner>,
    leader: i32,
    batches: Vec<ReadyBatch>,
    mut outcome: impl FnMut(&ReadyBatch) -> (Result<(i64, i64)>, i64),
) {
    {
        let mut st = inner.lock();
        if let Some(n) = st.broker_requests.get_mut(&leader) {
            *n = n.saturating_sub(1);
        }
        for b in batches {
            let (r, log_start) = outcome(&b);
            complete(inner, &mut st, leader, b, r, log_start);
        }
    }
    inner.progress.notify_waiters();
    inner.wake.notify_one();
}

/// Whether a batch created at `created_ms` reached `delivery.timeout.ms`.
fn is_expired(cfg: &ProducerConfig, created_ms: u64, now_ms: u64) -> bool {
    now_ms.saturating_sub(created_ms) >= cfg.delivery_timeout_ms
}

/// Kafka's `TimeoutException: Expiring N record(s) for T-P: X ms has
/// passed since batch creation`, as a [`ClientError::Timeout`].
fn delivery_timeout(
    cfg: &ProducerConfig,
    tp: &TopicPartition,
    records: u32,
    elapsed_ms: u64,
    addr: &str,
) -> ClientError {
    ClientError::Timeout {
        api: format!(
            "Produce (expiring {records} record(s) for {}-{}: {elapsed_ms} ms has passed since \
             batch creation, delivery.timeout.ms)",
            tp.topic, tp.partition
        ),
        addr: addr.to_string(),
        timeout: Duration::from_millis(cfg.delivery_timeout_ms),
    }
}

/// Fails the records of undrained batches older than `delivery.timeout.ms`;
/// returns whether any expired (memory was freed).
fn expire_undrained(inner: &Inner, st: &mut State, now: u64) -> bool {
    let expired = st.acc.expire(now, inner.config.delivery_timeout_ms);
    for b in &expired {
        let e = delivery_timeout(
            &inner.config,
            &b.tp,
            b.record_count,
            now.saturating_sub(b.created_ms),
            if b.retried {
                "(awaiting retry)"
            } else {
                "(never sent)"
            },
        );
        tracing::debug!(%e, "expiring batch");
        fail_batch_records(st, b.id, &e);
        transaction_failed(st, &e);
        st.failures.remove(&b.id);
        if let Some(idem) = st.idem.as_mut() {
            // A retry that expired may have been written by an earlier
            // attempt (a batch never sent has no sequence: a no-op).
            idem.on_failed(&b.tp, b.id, &e, Failure::Unknown);
        }
    }
    !expired.is_empty()
}

/// Queues the failure of batch `id`'s records with `e` (delivered once
/// the state is unlocked).
fn fail_batch_records(st: &mut State, id: BatchId, e: &ClientError) {
    if let Some(records) = st.pending.remove(&id) {
        st.deliveries.push_back(Delivery::Failed {
            records,
            error: e.clone(),
        });
    }
}

/// Completes a drained batch: resolves its records, or re-enqueues it
/// (first in its partition's line, after a backoff) when the error is
/// retriable and retries and time remain. An idempotent producer decides
/// "retriable" by its sequence rules (`Idempotence::can_retry`), counts a
/// DUPLICATE_SEQUENCE_NUMBER as delivered (offset unknown, as Kafka's
/// client), and tells its idempotence state every outcome.
fn complete(
    inner: &Arc<Inner>,
    st: &mut State,
    leader: i32,
    batch: ReadyBatch,
    outcome: Result<(i64, i64)>,
    log_start_offset: i64,
) {
    let cfg = &inner.config;
    let outcome = match outcome {
        Err(e)
            if st.idem.is_some()
                && e.response_error() == Some(ResponseError::DuplicateSequenceNumber) =>
        {
            Ok((-1, -1))
        }
        other => other,
    };
    if !st.pending.contains_key(&batch.id) {
        // Expired while in flight (or aborted): its records failed already.
        if let Some(idem) = st.idem.as_mut() {
            match &outcome {
                Ok((base, _)) => idem.on_success(
                    &batch.tp,
                    batch.id,
                    batch.producer,
                    batch.record_count,
                    *base,
                ),
                Err(e) => idem.on_failed(&batch.tp, batch.id, e, failure_kind(e)),
            }
        }
        finish(st, &batch);
        return;
    }
    match outcome {
        Ok((base, append_time)) => {
            if let Some(idem) = st.idem.as_mut() {
                idem.on_success(
                    &batch.tp,
                    batch.id,
                    batch.producer,
                    batch.record_count,
                    base,
                );
            }
            if let Some(records) = st.pending.remove(&batch.id) {
                st.deliveries.push_back(Delivery::Written {
                    tp: batch.tp.clone(),
                    records,
                    base,
                    append_time,
                });
            }
            finish(st, &batch);
        }
        Err(e) => {
            let now = inner.now_ms();
            if e.invalidates_metadata() {
                request_refresh(inner, st, &batch.tp.topic);
            }
            let failures = {
                let n = st.failures.entry(batch.id).or_insert(0);
                *n += 1;
                *n
            };
            let expired = is_expired(cfg, batch.created_ms, now);
            // As Kafka's `Sender.canRetry`: time and attempts first, then
            // the error (for an idempotent producer: its sequence rules).
            let retry = !expired
                && failures <= cfg.retries
                && match st.idem.as_mut() {
                    None => e.is_retriable(),
                    Some(idem) => {
                        idem.fatal().is_none()
                            && idem.can_retry(&batch.tp, batch.id, &e, log_start_offset)
                    }
                };
            if retry {
                tracing::debug!(%e, failures, "retrying produce batch");
                let backoff = cfg
                    .client
                    .retry_backoff
                    .saturating_mul(1 << (failures - 1).min(10))
                    .min(cfg.client.retry_backoff_max);
                release_partition(st, &batch.tp);
                st.in_flight -= 1;
                st.acc
                    .reenqueue_with_backoff(batch, now + backoff.as_millis() as u64);
                return;
            }
            let sequence_error = matches!(
                e.response_error(),
                Some(ResponseError::OutOfOrderSequenceNumber | ResponseError::UnknownProducerId)
            );
            let reported = if expired && (e.is_retriable() || sequence_error) {
                tracing::debug!(%e, "batch failed after its delivery timeout");
                delivery_timeout(
                    cfg,
                    &batch.tp,
                    batch.record_count,
                    now.saturating_sub(batch.created_ms),
                    &format!("broker {leader}"),
                )
            } else {
                e.clone()
            };
            fail_batch_records(st, batch.id, &reported);
            transaction_failed(st, &reported);
            if let Some(idem) = st.idem.as_mut() {
                idem.on_failed(&batch.tp, batch.id, &e, failure_kind(&e));
            }
            finish(st, &batch);
        }
    }
}

/// Whether a failed batch was refused by the broker (not written) or its
/// fate is unknown: no answer, or an answer that says it may have been
/// written (the broker timed out waiting for replicas).
fn failure_kind(e: &ClientError) -> Failure {
    match e.response_error() {
        Some(
            ResponseError::RequestTimedOut
            | ResponseError::NotEnoughReplicasAfterAppend
            | ResponseError::NetworkException,
        )
        | None => Failure::Unknown,
        Some(_) => Failure::Refused,
    }
}

/// One fewer batch of `tp` in flight: unmutes it.
fn release_partition(st: &mut State, tp: &TopicPartition) {
    if let Some(n) = st.partition_in_flight.get_mut(tp) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            st.partition_in_flight.remove(tp);
        }
    }
    st.acc.unmute(tp);
}

/// Releases a finished batch's memory and its partition's in-flight slot.
fn finish(st: &mut State, batch: &ReadyBatch) {
    st.failures.remove(&batch.id);
    st.acc.deallocate(batch);
    release_partition(st, &batch.tp);
    st.in_flight -= 1;
}

/// Queues `topic` for the background metadata refresh (started if idle).
fn request_refresh(inner: &Arc<Inner>, st: &mut State, topic: &str) {
    st.refresh_topics.insert(topic.to_string());
    if !st.refreshing {
        st.refreshing = true;
        tokio::spawn(refresh_metadata(inner.clone()));
    }
}

/// Reloads the queued topics' metadata (the cluster retries with backoff)
/// and the producer's partition cache, then wakes the sender; ends when
/// nothing is queued.
async fn refresh_metadata(inner: Arc<Inner>) {
    loop {
        let topics: Vec<String> = {
            let mut st = inner.lock();
            if st.refresh_topics.is_empty() {
                st.refreshing = false;
                return;
            }
            std::mem::take(&mut st.refresh_topics).into_iter().collect()
        };
        match inner.cluster.refresh_creating(&topics).await {
            Ok((md, _)) => {
                let mut st = inner.lock();
                for (name, t) in &md.topics {
                    st.topics.insert(name.clone(), partition_info(t));
                }
            }
            Err(e) => {
                tracing::debug!(%e, ?topics, "metadata refresh failed");
                tokio::time::sleep(inner.config.client.retry_backoff).await;
            }
        }
        inner.wake.notify_one();
    }
}
