//! Transactions over TCP against a running server, with raw requests at
//! the versions clients send: FindCoordinator (TRANSACTION) →
//! InitProducerId → AddPartitionsToTxn → Produce (transactional batches)
//! → EndTxn, the markers in the log, DescribeTransactions and
//! ListTransactions; a second InitProducerId fencing the first producer;
//! CONCURRENT_TRANSACTIONS while a transaction's markers are pending.
//!
//! Markers are written by `Broker::write_txn_markers` (control batches
//! through the partition layer); these tests read them with isolation level
//! read_uncommitted; read_committed is covered by the fetch handler's and
//! the compat tests.

use std::time::Duration;

use bytes::Bytes;
use proto_kafka::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use proto_kafka::messages::create_topics_request::CreatableTopic;
use proto_kafka::messages::fetch_request::{FetchPartition, FetchTopic};
use proto_kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use proto_kafka::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, BrokerId, CreateTopicsRequest,
    CreateTopicsResponse, DescribeTransactionsRequest, DescribeTransactionsResponse, EndTxnRequest,
    EndTxnResponse, FetchRequest, FetchResponse, FindCoordinatorRequest, FindCoordinatorResponse,
    InitProducerIdRequest, InitProducerIdResponse, ListTransactionsRequest,
    ListTransactionsResponse, ProduceRequest, ProduceResponse, ProducerId, TopicName,
    TransactionalId,
};
use proto_kafka::protocol::StrBytes;
use sluice_protocol::record::codec::{decode_batch, ProducerInfo};
use sluice_protocol::record::{BatchBuilder, BatchIter, Compression, Record};

mod common;
use common::{start, Client};

const INVALID_PRODUCER_EPOCH: i16 = 47;
const CONCURRENT_TRANSACTIONS: i16 = 51;
const PRODUCER_FENCED: i16 = 90;

fn name(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn txn(id: &str) -> TransactionalId {
    TransactionalId(name(id))
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

/// What one control batch in the log says.
#[derive(Debug, PartialEq, Eq)]
struct Marker {
    producer_id: i64,
    epoch: i16,
    commit: bool,
}

/// A batch read back: a transactional data batch's producer and values,
/// or a marker.
#[derive(Debug, PartialEq, Eq)]
enum Batch {
    Data {
        producer_id: i64,
        epoch: i16,
        transactional: bool,
        values: Vec<Vec<u8>>,
    },
    Marker(Marker),
}

impl Client {
    async fn create_topic(&mut self, topic: &str, partitions: i32) {
        let mut t = CreatableTopic::default();
        t.name = TopicName(name(topic));
        t.num_partitions = partitions;
        t.replication_factor = 1;
        let mut req = CreateTopicsRequest::default();
        req.topics = vec![t];
        req.timeout_ms = 10_000;
        let resp: CreateTopicsResponse = self.call(ApiKey::CreateTopics, 7, &req).await;
        assert_eq!(resp.topics[0].error_code, 0, "create {topic}");
    }

    async fn find_txn_coordinator(&mut self, id: &str) -> FindCoordinatorResponse {
        let mut req = FindCoordinatorRequest::default();
        req.key = name(id);
        req.key_type = 1;
        self.call(ApiKey::FindCoordinator, 2, &req).await
    }

    /// InitProducerId: (error, producer id, epoch).
    async fn init(&mut self, version: i16, id: &str) -> (i16, i64, i16) {
        let mut req = InitProducerIdRequest::default();
        req.transactional_id = Some(txn(id));
        req.transaction_timeout_ms = 60_000;
        req.producer_id = ProducerId(-1);
        req.producer_epoch = -1;
        let r: InitProducerIdResponse = self.call(ApiKey::InitProducerId, version, &req).await;
        (r.error_code, r.producer_id.0, r.producer_epoch)
    }

    /// AddPartitionsToTxn: every partition's error, in request order.
    async fn add(
        &mut self,
        version: i16,
        id: &str,
        pid: i64,
        epoch: i16,
        topic: &str,
        partitions: &[i32],
    ) -> Vec<(String, i32, i16)> {
        let mut t = AddPartitionsToTxnTopic::default();
        t.name = TopicName(name(topic));
        t.partitions = partitions.to_vec();
        let mut req = AddPartitionsToTxnRequest::default();
        req.v3_and_below_transactional_id = txn(id);
        req.v3_and_below_producer_id = ProducerId(pid);
        req.v3_and_below_producer_epoch = epoch;
        req.v3_and_below_topics = vec![t];
        let r: AddPartitionsToTxnResponse =
            self.call(ApiKey::AddPartitionsToTxn, version, &req).await;
        r.results_by_topic_v3_and_below
            .iter()
            .flat_map(|t| {
                t.results_by_partition.iter().map(|p| {
                    (
                        t.name.0.to_string(),
                        p.partition_index,
                        p.partition_error_code,
                    )
                })
            })
            .collect()
    }

    /// Produce v7 of one batch; `transactional` sets the batch flag and
    /// the request's transactional id. Returns the partition's error.
    #[allow(clippy::too_many_arguments)]
    async fn produce(
        &mut self,
        id: Option<&str>,
        topic: &str,
        partition: i32,
        pid: i64,
        epoch: i16,
        seq: i32,
        values: &[&str],
    ) -> i16 {
        let ts = now();
        let mut b = BatchBuilder::new(Compression::None, ts).producer(
            ProducerInfo {
                producer_id: pid,
                producer_epoch: epoch,
                base_sequence: seq,
            },
            id.is_some(),
        );
        for v in values {
            b.push(Record::new(None, Some(v.as_bytes().to_vec()), ts));
        }
        let mut pd = PartitionProduceData::default();
        pd.index = partition;
        pd.records = Some(Bytes::from(b.build(0).expect("batch")));
        let mut td = TopicProduceData::default();
        td.name = TopicName(name(topic));
        td.partition_data = vec![pd];
        let mut req = ProduceRequest::default();
        req.transactional_id = id.map(txn);
        req.acks = -1;
        req.timeout_ms = 10_000;
        req.topic_data = vec![td];
        let resp: ProduceResponse = self.call(ApiKey::Produce, 7, &req).await;
        resp.responses[0].partition_responses[0].error_code
    }

    async fn end(&mut self, version: i16, id: &str, pid: i64, epoch: i16, commit: bool) -> i16 {
        let mut req = EndTxnRequest::default();
        req.transactional_id = txn(id);
        req.producer_id = ProducerId(pid);
        req.producer_epoch = epoch;
        req.committed = commit;
        let r: EndTxnResponse = self.call(ApiKey::EndTxn, version, &req).await;
        r.error_code
    }

    async fn describe(&mut self, id: &str) -> DescribeTransactionsResponse {
        let mut req = DescribeTransactionsRequest::default();
        req.transactional_ids = vec![txn(id)];
        self.call(ApiKey::DescribeTransactions, 0, &req).await
    }

    /// The transaction's state name once it no longer changes into
    /// `want` (polling DescribeTransactions; panics after 30 s).
    async fn wait_state(&mut self, id: &str, want: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let r = self.describe(id).await;
            let s = &r.transaction_states[0];
            if s.transaction_state.as_str() == want {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{id} still {:?}",
                s.transaction_state
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Every batch of a partition from offset 0 (Fetch v4,
    /// read_uncommitted).
    async fn read(&mut self, topic: &str, partition: i32) -> Vec<Batch> {
        let mut p = FetchPartition::default();
        p.partition = partition;
        p.fetch_offset = 0;
        p.partition_max_bytes = 1 << 20;
        let mut t = FetchTopic::default();
        t.topic = TopicName(name(topic));
        t.partitions = vec![p];
        let mut req = FetchRequest::default();
        req.replica_id = BrokerId(-1);
        req.max_bytes = 1 << 20;
        req.isolation_level = 0;
        req.topics = vec![t];
        let r: FetchResponse = self.call(ApiKey::Fetch, 4, &req).await;
        let pd = &r.responses[0].partitions[0];
        assert_eq!(pd.error_code, 0);
        let bytes = pd.records.clone().unwrap_or_default();
        let mut out = Vec::new();
        for b in BatchIter::new(&bytes) {
            let (_, h, raw) = b.expect("batch");
            let decoded = decode_batch(raw, 1 << 20).expect("decode");
            if h.is_control() {
                let key = decoded.records[0].record.key.clone().expect("key");
                out.push(Batch::Marker(Marker {
                    producer_id: h.producer_id,
                    epoch: h.producer_epoch,
                    commit: key == [0, 0, 0, 1],
                }));
            } else {
                out.push(Batch::Data {
                    producer_id: h.producer_id,
                    epoch: h.producer_epoch,
                    transactional: h.is_transactional(),
                    values: decoded
                        .records
                        .into_iter()
                        .map(|r| r.record.value.unwrap_or_default())
                        .collect(),
                });
            }
        }
        out
    }
}

fn data(pid: i64, epoch: i16, values: &[&str]) -> Batch {
    Batch::Data {
        producer_id: pid,
        epoch,
        transactional: true,
        values: values.iter().map(|v| v.as_bytes().to_vec()).collect(),
    }
}

fn marker(pid: i64, epoch: i16, commit: bool) -> Batch {
    Batch::Marker(Marker {
        producer_id: pid,
        epoch,
        commit,
    })
}

/// A whole transaction at the versions librdkafka and kafkajs send
/// (FindCoordinator v2, InitProducerId v1, AddPartitionsToTxn v0/v1,
/// EndTxn v1), then a second one aborted.
#[tokio::test]
async fn a_transaction_commits_and_the_next_aborts() {
    let server = start(&[("transaction.state.log.num.partitions", "3")]).await;
    let mut c = server.client().await;
    c.create_topic("orders", 2).await;
    let found = c.find_txn_coordinator("app-1").await;
    // (The advertised port is the configured one, 0 here.)
    assert_eq!(
        (found.error_code, found.node_id, found.host.as_str()),
        (0, BrokerId(1), "127.0.0.1")
    );
    let (error, pid, epoch) = c.init(1, "app-1").await;
    assert_eq!((error, epoch), (0, 0));
    assert_eq!(
        c.add(0, "app-1", pid, epoch, "orders", &[0, 1]).await,
        vec![("orders".into(), 0, 0), ("orders".into(), 1, 0)]
    );
    let id = Some("app-1");
    assert_eq!(
        c.produce(id, "orders", 0, pid, epoch, 0, &["a", "b"]).await,
        0
    );
    assert_eq!(c.produce(id, "orders", 1, pid, epoch, 0, &["c"]).await, 0);
    let d = c.describe("app-1").await;
    assert_eq!(
        d.transaction_states[0].transaction_state.as_str(),
        "Ongoing"
    );
    assert_eq!(c.end(1, "app-1", pid, epoch, true).await, 0);
    c.wait_state("app-1", "CompleteCommit").await;
    assert_eq!(
        c.read("orders", 0).await,
        vec![data(pid, epoch, &["a", "b"]), marker(pid, epoch, true)]
    );
    assert_eq!(
        c.read("orders", 1).await,
        vec![data(pid, epoch, &["c"]), marker(pid, epoch, true)]
    );

    // The next transaction, aborted.
    assert_eq!(
        c.add(1, "app-1", pid, epoch, "orders", &[0]).await,
        vec![("orders".into(), 0, 0)]
    );
    assert_eq!(c.produce(id, "orders", 0, pid, epoch, 2, &["x"]).await, 0);
    assert_eq!(c.end(1, "app-1", pid, epoch, false).await, 0);
    c.wait_state("app-1", "CompleteAbort").await;
    assert_eq!(
        c.read("orders", 0).await,
        vec![
            data(pid, epoch, &["a", "b"]),
            marker(pid, epoch, true),
            data(pid, epoch, &["x"]),
            marker(pid, epoch, false)
        ]
    );

    let mut req = ListTransactionsRequest::default();
    req.state_filters = vec![name("CompleteAbort")];
    let listed: ListTransactionsResponse = c.call(ApiKey::ListTransactions, 1, &req).await;
    let got: Vec<(String, i64, String)> = listed
        .transaction_states
        .iter()
        .map(|t| {
            (
                t.transactional_id.0.to_string(),
                t.producer_id.0,
                t.transaction_state.to_string(),
            )
        })
        .collect();
    assert_eq!(got, vec![("app-1".into(), pid, "CompleteAbort".into())]);
    server.stop().await;
}

/// A second producer with the same transactional id fences the first: its
/// InitProducerId aborts the open transaction with a bumped epoch (first
/// answer CONCURRENT_TRANSACTIONS, then the epoch after the fence), and
/// the first producer's EndTxn and Produce are refused.
#[tokio::test]
async fn a_second_init_producer_id_fences_the_first_producer() {
    let server = start(&[("transaction.state.log.num.partitions", "1")]).await;
    let mut first = server.client().await;
    let mut second = server.client().await;
    first.create_topic("t", 1).await;
    let (_, pid, epoch) = first.init(3, "shared").await;
    assert_eq!(
        first.add(3, "shared", pid, epoch, "t", &[0]).await,
        vec![("t".into(), 0, 0)]
    );
    let id = Some("shared");
    assert_eq!(
        first.produce(id, "t", 0, pid, epoch, 0, &["zombie"]).await,
        0
    );

    assert_eq!(
        second.init(3, "shared").await,
        (CONCURRENT_TRANSACTIONS, -1, -1)
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let fresh = loop {
        let got = second.init(3, "shared").await;
        if got.0 != CONCURRENT_TRANSACTIONS {
            break got;
        }
        assert!(tokio::time::Instant::now() < deadline, "still aborting");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(fresh, (0, pid, epoch + 2), "the fence took epoch + 1");
    assert_eq!(
        first.read("t", 0).await,
        vec![data(pid, epoch, &["zombie"]), marker(pid, epoch + 1, false)]
    );

    // The zombie: EndTxn fenced (INVALID_PRODUCER_EPOCH before v2), its
    // batches refused by the partition.
    assert_eq!(
        first.end(1, "shared", pid, epoch, true).await,
        INVALID_PRODUCER_EPOCH
    );
    assert_eq!(
        first.end(3, "shared", pid, epoch, true).await,
        PRODUCER_FENCED
    );
    assert_eq!(
        first.add(1, "shared", pid, epoch, "t", &[0]).await,
        vec![("t".into(), 0, INVALID_PRODUCER_EPOCH)]
    );
    assert_eq!(
        first.produce(id, "t", 0, pid, epoch, 1, &["late"]).await,
        INVALID_PRODUCER_EPOCH
    );
    // The new producer works.
    let epoch = fresh.2;
    assert_eq!(
        second.add(3, "shared", pid, epoch, "t", &[0]).await,
        vec![("t".into(), 0, 0)]
    );
    assert_eq!(second.produce(id, "t", 0, pid, epoch, 0, &["new"]).await, 0);
    assert_eq!(second.end(3, "shared", pid, epoch, true).await, 0);
    second.wait_state("shared", "CompleteCommit").await;
    server.stop().await;
}

/// While a transaction's markers are not all written, requests for the id
/// get CONCURRENT_TRANSACTIONS. Made to last: the partition has seen a
/// later epoch of the same producer id (a raw batch), so it refuses the
/// marker with INVALID_PRODUCER_EPOCH and, as Kafka's coordinator does,
/// the coordinator stops sending markers and keeps the transaction in
/// PrepareCommit.
#[tokio::test]
async fn concurrent_transactions_while_markers_are_pending() {
    let server = start(&[("transaction.state.log.num.partitions", "1")]).await;
    let mut c = server.client().await;
    c.create_topic("t", 2).await;
    let (_, pid, epoch) = c.init(4, "stuck").await;
    assert_eq!(
        c.produce(None, "t", 1, pid, epoch + 3, 0, &["raw"]).await,
        0
    );
    assert_eq!(
        c.add(3, "stuck", pid, epoch, "t", &[0, 1]).await,
        vec![("t".into(), 0, 0), ("t".into(), 1, 0)]
    );
    assert_eq!(c.end(3, "stuck", pid, epoch, true).await, 0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..2 {
        assert_eq!(
            c.add(3, "stuck", pid, epoch, "t", &[0]).await,
            vec![("t".into(), 0, CONCURRENT_TRANSACTIONS)]
        );
        assert_eq!(
            c.end(3, "stuck", pid, epoch, true).await,
            CONCURRENT_TRANSACTIONS
        );
        assert_eq!(c.init(4, "stuck").await, (CONCURRENT_TRANSACTIONS, -1, -1));
    }
    // t-0 got its marker, t-1 did not.
    let d = c.describe("stuck").await;
    let s = &d.transaction_states[0];
    assert_eq!(s.transaction_state.as_str(), "PrepareCommit");
    let pending: Vec<(String, Vec<i32>)> = s
        .topics
        .iter()
        .map(|t| (t.topic.0.to_string(), t.partitions.clone()))
        .collect();
    assert_eq!(pending, vec![("t".to_string(), vec![1])]);
    assert_eq!(c.read("t", 0).await, vec![marker(pid, epoch, true)]);
    server.stop().await;
}
