//! Helpers for the transaction tests of the broker crate: the background
//! task, requests through the whole dispatch path, producing transactional
//! batches, and waiting for a transaction's state.

use std::sync::Arc;
use std::time::Duration;

use proto_kafka::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use proto_kafka::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, EndTxnRequest, EndTxnResponse,
    InitProducerIdRequest, InitProducerIdResponse, ProducerId, TopicName, TransactionalId,
};
use proto_kafka::protocol::StrBytes;
use sluice_coordinator::txn::TransactionState;
use sluice_protocol::record::codec::ProducerInfo;
use sluice_protocol::record::{BatchBuilder, Compression, Record};
use sluice_storage::AppendOrigin;

use crate::broker::Broker;
use crate::groups::{lock, now_ms};
use crate::handlers::test_support::call;
use crate::partition::Acks;

/// The transaction coordinator's background task (markers, timers).
pub(crate) struct Runner {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Runner {
    /// Stops the task and waits for it (it holds the broker).
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(true);
        self.task.await.expect("transaction task");
    }
}

/// Starts the background task.
pub(crate) fn start(broker: &Arc<Broker>) -> Runner {
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(super::run(Arc::clone(broker), rx));
    Runner { stop, task }
}

pub(crate) fn txn_id(id: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(id.to_string()))
}

pub(crate) fn init_request(id: &str, timeout_ms: i32) -> InitProducerIdRequest {
    let mut r = InitProducerIdRequest::default();
    r.transactional_id = Some(txn_id(id));
    r.transaction_timeout_ms = timeout_ms;
    r.producer_id = ProducerId(-1);
    r.producer_epoch = -1;
    r
}

pub(crate) fn add_request(
    id: &str,
    producer_id: i64,
    epoch: i16,
    topics: &[(&str, &[i32])],
) -> AddPartitionsToTxnRequest {
    let mut r = AddPartitionsToTxnRequest::default();
    r.v3_and_below_transactional_id = txn_id(id);
    r.v3_and_below_producer_id = ProducerId(producer_id);
    r.v3_and_below_producer_epoch = epoch;
    r.v3_and_below_topics = topics
        .iter()
        .map(|(t, ps)| {
            let mut at = AddPartitionsToTxnTopic::default();
            at.name = TopicName(StrBytes::from_string((*t).to_string()));
            at.partitions = ps.to_vec();
            at
        })
        .collect();
    r
}

pub(crate) fn end_request(id: &str, producer_id: i64, epoch: i16, commit: bool) -> EndTxnRequest {
    let mut r = EndTxnRequest::default();
    r.transactional_id = txn_id(id);
    r.producer_id = ProducerId(producer_id);
    r.producer_epoch = epoch;
    r.committed = commit;
    r
}

/// InitProducerId v4 for `id`, retried while the coordinator answers
/// CONCURRENT_TRANSACTIONS (an abort of the previous producer under way);
/// returns producer id and epoch.
pub(crate) async fn init(broker: &Arc<Broker>, id: &str, timeout_ms: i32) -> (i64, i16) {
    for _ in 0..1_000 {
        let r: InitProducerIdResponse = call(
            broker,
            ApiKey::InitProducerId,
            4,
            &init_request(id, timeout_ms),
        )
        .await
        .expect("response");
        if r.error_code == 51 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        assert_eq!(r.error_code, 0, "InitProducerId {id}");
        return (r.producer_id.0, r.producer_epoch);
    }
    panic!("InitProducerId {id} kept answering CONCURRENT_TRANSACTIONS");
}

/// AddPartitionsToTxn v3; the one error code of all partitions.
pub(crate) async fn add(
    broker: &Arc<Broker>,
    id: &str,
    pid: i64,
    epoch: i16,
    topics: &[(&str, &[i32])],
) -> i16 {
    let r: AddPartitionsToTxnResponse = call(
        broker,
        ApiKey::AddPartitionsToTxn,
        3,
        &add_request(id, pid, epoch, topics),
    )
    .await
    .expect("response");
    let codes: Vec<i16> = r
        .results_by_topic_v3_and_below
        .iter()
        .flat_map(|t| {
            t.results_by_partition
                .iter()
                .map(|p| p.partition_error_code)
        })
        .collect();
    assert!(codes.windows(2).all(|w| w[0] == w[1]), "{codes:?}");
    codes.first().copied().unwrap_or(0)
}

/// EndTxn v3; the error code.
pub(crate) async fn end(broker: &Arc<Broker>, id: &str, pid: i64, epoch: i16, commit: bool) -> i16 {
    let r: EndTxnResponse = call(
        broker,
        ApiKey::EndTxn,
        3,
        &end_request(id, pid, epoch, commit),
    )
    .await
    .expect("response");
    r.error_code
}

/// Appends one transactional batch of `records` records (sequence from
/// `seq`) to a partition as a producer's Produce would.
pub(crate) async fn produce(
    broker: &Broker,
    topic: &str,
    partition: i32,
    pid: i64,
    epoch: i16,
    seq: i32,
    records: usize,
) -> Result<i64, crate::partition::AppendError> {
    let part = broker.partition(topic, partition).expect("partition");
    let now = now_ms();
    let mut b = BatchBuilder::new(Compression::None, now).producer(
        ProducerInfo {
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
        },
        true,
    );
    for i in 0..records {
        b.push(Record::new(
            Some(format!("k{i}").into_bytes()),
            Some(b"v".to_vec()),
            now,
        ));
    }
    let bytes = b.build(0).expect("batch");
    part.append(bytes, AppendOrigin::Client, Acks::All)
        .await
        .map(|info| info.base_offset)
}

/// The confirmed state of `id` (None: unknown or not loaded).
pub(crate) fn state(broker: &Broker, id: &str) -> Option<TransactionState> {
    let shard = broker.txns.shard(broker, id, false).ok()?;
    let shard = lock(&shard);
    shard.machine.state(id)
}

/// The confirmed producer id and epoch of `id`.
pub(crate) fn producer(broker: &Broker, id: &str) -> Option<(i64, i16)> {
    let shard = broker.txns.shard(broker, id, false).ok()?;
    let shard = lock(&shard);
    shard.machine.producer_id_and_epoch(id)
}

/// Waits until `id` is in `want` with no transition pending (markers
/// written and the completion record in), or panics after 30 s (a hang,
/// not a speed check).
pub(crate) async fn wait_state(broker: &Arc<Broker>, id: &str, want: Option<TransactionState>) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (now, pending) = {
            match broker.txns.shard(broker, id, false) {
                Ok(shard) => {
                    let shard = lock(&shard);
                    (shard.machine.state(id), shard.machine.pending_state(id))
                }
                Err(_) => (None, None),
            }
        };
        if now == want && pending.is_none() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{id}: still {now:?} (pending {pending:?}), waiting for {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The control batches of a partition: (producer id, epoch, commit,
/// coordinator epoch) of each marker, in log order.
pub(crate) fn markers(broker: &Broker, topic: &str, partition: i32) -> Vec<(i64, i16, bool, i32)> {
    let log = broker.log(topic, partition).expect("log");
    let mut out = Vec::new();
    log.replay(0, |event| {
        let sluice_storage::ReplayEvent::Batch { header, raw } = event else {
            return;
        };
        if !header.is_control() {
            return;
        }
        let decoded =
            sluice_protocol::record::codec::decode_batch(raw, 1 << 20).expect("control batch");
        let r = &decoded.records[0].record;
        let key = r.key.as_deref().expect("key");
        let value = r.value.as_deref().expect("value");
        out.push((
            header.producer_id,
            header.producer_epoch,
            key == [0, 0, 0, 1],
            i32::from_be_bytes([value[2], value[3], value[4], value[5]]),
        ));
    })
    .expect("replay");
    out
}
