//! The idempotent producer against a fake broker that checks sequences as
//! Kafka's `ProducerStateManager` does (duplicates of the last five batches
//! answered with their first offset, gaps refused with
//! OUT_OF_ORDER_SEQUENCE_NUMBER, older epochs with INVALID_PRODUCER_EPOCH)
//! and injects faults: connections dropped before or after a request was
//! written, retriable and non-retriable partition errors,
//! UNKNOWN_PRODUCER_ID, InitProducerId errors. What the fake wrote is
//! compared with what was sent: every acknowledged record exactly once, in
//! send order per partition, at the offset its delivery reported. Last, the
//! headers an idempotent producer writes through an in-process broker.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use proto_kafka::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use proto_kafka::messages::{
    ApiKey, BrokerId, InitProducerIdResponse, ProduceRequest, ProduceResponse, ProducerId,
};
use proto_kafka::protocol::{Decodable, StrBytes};
use sluice_client::{ClientConfig, ClientError, Producer, ProducerConfig, ProducerRecord};
use sluice_protocol::record::codec::decode_batch;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

mod fake;
use fake::frame;

mod common;

const TOPIC: &str = "t";
const PARTITIONS: i32 = 3;
/// Each Produce response leaves this long after its request arrived, so
/// several requests are outstanding at once.
const DELAY: Duration = Duration::from_millis(15);

/// What the fake does with one partition of one Produce request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    /// Close the connection before looking at the request.
    DropBefore,
    /// Write the batch, then close the connection without answering.
    DropAfter,
    /// Answer this error code (with log start offset 0), write nothing.
    Error(i16),
}

type Faults = Box<dyn Fn(usize, i32) -> Fault + Send + Sync>;

/// One producer's state in one partition (Kafka's `ProducerStateEntry`).
#[derive(Debug)]
struct Entry {
    epoch: i16,
    last_seq: i32,
    /// (first seq, last seq, base offset) of the last five batches.
    recent: VecDeque<(i32, i32, i64)>,
}

#[derive(Debug, Default)]
struct PartitionLog {
    /// (value, producer id, epoch) per offset.
    records: Vec<(Vec<u8>, i64, i16)>,
    producers: HashMap<i64, Entry>,
}

/// Kafka's sequence checks; `Ok(base offset)` for an append or a duplicate
/// (counted in `dups`).
fn append(log: &mut PartitionLog, batch: &[u8], dups: &AtomicUsize) -> Result<i64, i16> {
    let d = decode_batch(batch, 1 << 24).expect("decode batch");
    let h = d.header;
    let (pid, epoch, first) = (h.producer_id, h.producer_epoch, h.base_sequence);
    let last = first + h.records_count - 1;
    if pid >= 0 {
        if let Some(e) = log.producers.get(&pid) {
            if epoch < e.epoch {
                return Err(47); // INVALID_PRODUCER_EPOCH
            }
            if epoch == e.epoch {
                if let Some(&(_, _, offset)) =
                    e.recent.iter().find(|(f, l, _)| *f == first && *l == last)
                {
                    dups.fetch_add(1, Ordering::SeqCst);
                    return Ok(offset);
                }
                if first != e.last_seq.wrapping_add(1) {
                    return Err(45); // OUT_OF_ORDER_SEQUENCE_NUMBER
                }
            } else if first != 0 {
                return Err(45);
            }
        }
    }
    let base = log.records.len() as i64;
    for r in d.records {
        log.records
            .push((r.record.value.unwrap_or_default(), pid, epoch));
    }
    if pid >= 0 {
        let e = log.producers.entry(pid).or_insert(Entry {
            epoch,
            last_seq: -1,
            recent: VecDeque::new(),
        });
        if e.epoch != epoch {
            e.recent.clear();
        }
        e.epoch = epoch;
        e.last_seq = last;
        e.recent.push_back((first, last, base));
        if e.recent.len() > 5 {
            e.recent.pop_front();
        }
    }
    Ok(base)
}

struct Fake {
    logs: Mutex<HashMap<i32, PartitionLog>>,
    produce_requests: AtomicUsize,
    faults: Faults,
    /// InitProducerId: `Ok((id, epoch))` or an error code; `None`: the API
    /// is not advertised.
    init: Option<Result<(i64, i16), i16>>,
    init_requests: AtomicUsize,
    /// Most Produce requests outstanding on one connection at once.
    max_outstanding: AtomicUsize,
    /// Batches answered as duplicates.
    duplicates: AtomicUsize,
    /// Batches refused with OUT_OF_ORDER_SEQUENCE_NUMBER.
    out_of_order: AtomicUsize,
}

/// Serves one connection; responses leave in order, Produce ones `DELAY`
/// after their request came. Dropping the connection also drops the
/// responses still queued.
async fn serve(stream: TcpStream, port: u16, fake: Arc<Fake>) {
    let (mut rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<(tokio::time::Instant, Bytes, bool)>();
    let outstanding = Arc::new(AtomicUsize::new(0));
    let out = outstanding.clone();
    let writer = tokio::spawn(async move {
        while let Some((at, frame, produce)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if produce {
                out.fetch_sub(1, Ordering::SeqCst);
            }
            if wr.write_all(&frame).await.is_err() {
                return;
            }
        }
    });
    while let Some(req) = fake::read_request(&mut rd).await {
        let fake::Request {
            key,
            version,
            correlation: c,
            mut body,
        } = req;
        let now = tokio::time::Instant::now();
        let reply = match key {
            ApiKey::ApiVersions => {
                let mut apis = vec![
                    (ApiKey::ApiVersions, 0, 3),
                    (ApiKey::Metadata, 0, 12),
                    (ApiKey::Produce, 3, 12),
                ];
                if fake.init.is_some() {
                    apis.push((ApiKey::InitProducerId, 0, 5));
                }
                let resp = fake::api_versions(&apis);
                (now, frame(key, version, c, &resp), false)
            }
            ApiKey::Metadata => {
                let resp = fake::one_broker_metadata(port, TOPIC, PARTITIONS);
                (now, frame(key, version, c, &resp), false)
            }
            ApiKey::InitProducerId => {
                fake.init_requests.fetch_add(1, Ordering::SeqCst);
                let mut resp = InitProducerIdResponse::default();
                match fake.init.expect("advertised") {
                    Ok((id, epoch)) => {
                        resp.producer_id = ProducerId(id);
                        resp.producer_epoch = epoch;
                    }
                    Err(code) => {
                        resp.error_code = code;
                        resp.producer_id = ProducerId(-1);
                        resp.producer_epoch = -1;
                    }
                }
                (now, frame(key, version, c, &resp), false)
            }
            ApiKey::Produce => {
                let n = fake.produce_requests.fetch_add(1, Ordering::SeqCst);
                let req = ProduceRequest::decode(&mut body, version).expect("produce");
                let faults: Vec<Fault> = req
                    .topic_data
                    .iter()
                    .flat_map(|t| t.partition_data.iter().map(|p| (fake.faults)(n, p.index)))
                    .collect();
                if faults.contains(&Fault::DropBefore) {
                    break;
                }
                let mut resp = ProduceResponse::default();
                for t in &req.topic_data {
                    let mut tr = TopicProduceResponse::default();
                    tr.name = t.name.clone();
                    for p in &t.partition_data {
                        let mut pr = PartitionProduceResponse::default();
                        pr.index = p.index;
                        pr.log_append_time_ms = -1;
                        pr.log_start_offset = 0;
                        let outcome = match (fake.faults)(n, p.index) {
                            Fault::Error(code) => Err(code),
                            _ => {
                                let mut logs = fake.logs.lock().expect("lock");
                                let log = logs.entry(p.index).or_default();
                                append(
                                    log,
                                    p.records.as_deref().expect("records"),
                                    &fake.duplicates,
                                )
                            }
                        };
                        if outcome == Err(45) {
                            fake.out_of_order.fetch_add(1, Ordering::SeqCst);
                        }
                        match outcome {
                            Ok(base) => pr.base_offset = base,
                            Err(code) => {
                                pr.error_code = code;
                                pr.base_offset = -1;
                            }
                        }
                        tr.partition_responses.push(pr);
                    }
                    resp.responses.push(tr);
                }
                if faults.contains(&Fault::DropAfter) {
                    break;
                }
                let n = outstanding.fetch_add(1, Ordering::SeqCst) + 1;
                fake.max_outstanding.fetch_max(n, Ordering::SeqCst);
                (now + DELAY, frame(key, version, c, &resp), true)
            }
            other => panic!("unexpected request {other:?}"),
        };
        if tx.send(reply).is_err() {
            break;
        }
    }
    // A drop loses the responses not written yet, as a broker crash does.
    writer.abort();
}

async fn fake_broker(
    init: Option<Result<(i64, i16), i16>>,
    faults: impl Fn(usize, i32) -> Fault + Send + Sync + 'static,
) -> (String, Arc<Fake>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let fake = Arc::new(Fake {
        logs: Mutex::new(HashMap::new()),
        produce_requests: AtomicUsize::new(0),
        faults: Box::new(faults),
        init,
        init_requests: AtomicUsize::new(0),
        max_outstanding: AtomicUsize::new(0),
        duplicates: AtomicUsize::new(0),
        out_of_order: AtomicUsize::new(0),
    });
    let f = fake.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream, port, f.clone()));
        }
    });
    (format!("127.0.0.1:{port}"), fake)
}

/// A producer with small batches (a few records each), no linger, quick
/// retries.
async fn producer(addr: &str) -> Producer {
    let mut client = ClientConfig::new(addr);
    client.retry_backoff = Duration::from_millis(5);
    client.retry_backoff_max = Duration::from_millis(20);
    let mut cfg = ProducerConfig::new(client);
    cfg.batch_size = 300;
    cfg.linger_ms = 0;
    cfg.request_timeout = Duration::from_secs(5);
    cfg.delivery_timeout_ms = 60_000;
    Producer::new(cfg).await.expect("producer")
}

/// Sends `n` records round-robin over the partitions; returns the
/// delivery outcome of each, with (partition, value).
async fn send_all(p: &Producer, n: usize) -> Vec<(i32, Vec<u8>, sluice_client::Result<i64>)> {
    let mut futs = Vec::new();
    for i in 0..n {
        let partition = (i % PARTITIONS as usize) as i32;
        let value = format!("value-{i:06}").into_bytes();
        let f = p
            .send(ProducerRecord::new(TOPIC, value.clone()).partition(partition))
            .await
            .expect("send");
        futs.push((partition, value, f));
        if i % 50 == 0 {
            tokio::task::yield_now().await;
        }
    }
    let mut out = Vec::new();
    for (partition, value, f) in futs {
        let r = tokio::time::timeout(Duration::from_secs(60), f)
            .await
            .expect("delivered in time")
            .map(|m| m.offset);
        out.push((partition, value, r));
    }
    out
}

/// Every acknowledged record is in the fake's log exactly once, in send
/// order per partition, at the offset its delivery reported (or -1 for a
/// duplicate whose offset is unknown); nothing else is there.
fn assert_exactly_once_in_order(fake: &Fake, sent: &[(i32, Vec<u8>, sluice_client::Result<i64>)]) {
    let logs = fake.logs.lock().expect("lock");
    for partition in 0..PARTITIONS {
        let want: Vec<(&Vec<u8>, i64)> = sent
            .iter()
            .filter(|(p, _, r)| *p == partition && r.is_ok())
            .map(|(_, v, r)| (v, *r.as_ref().expect("ok")))
            .collect();
        let got: Vec<&Vec<u8>> = logs
            .get(&partition)
            .map(|l| l.records.iter().map(|(v, _, _)| v).collect())
            .unwrap_or_default();
        assert_eq!(
            got,
            want.iter().map(|(v, _)| *v).collect::<Vec<_>>(),
            "partition {partition}: every acknowledged record once, in send order"
        );
        for (i, (_, offset)) in want.iter().enumerate() {
            assert!(
                *offset == i as i64 || *offset == -1,
                "partition {partition} record {i} reported at offset {offset}"
            );
        }
    }
}

/// Connections dropped before and after requests were written (responses
/// lost), retriable partition errors: with five batches of a partition in
/// flight, the retries keep every record once and in order.
#[tokio::test]
async fn retries_after_lost_connections_keep_records_once_and_in_order() {
    let (addr, fake) = fake_broker(Some(Ok((1000, 0))), |n, partition| match n % 29 {
        7 => Fault::DropAfter,
        13 => Fault::DropBefore,
        19 if partition == 1 => Fault::Error(6), // NOT_LEADER_OR_FOLLOWER
        23 if partition == 2 => Fault::Error(19), // NOT_ENOUGH_REPLICAS
        _ => Fault::None,
    })
    .await;
    let p = producer(&addr).await;
    let sent = send_all(&p, 3000).await;
    assert!(
        sent.iter().all(|(_, _, r)| r.is_ok()),
        "every record delivered: {:?}",
        sent.iter().find(|(_, _, r)| r.is_err())
    );
    assert_exactly_once_in_order(&fake, &sent);
    assert!(fake.produce_requests.load(Ordering::SeqCst) > 100);
    assert!(
        fake.max_outstanding.load(Ordering::SeqCst) > 1,
        "requests were pipelined"
    );
    assert!(
        fake.duplicates.load(Ordering::SeqCst) > 0,
        "re-sent batches the fake had written were recognized"
    );
    let one_epoch = fake
        .logs
        .lock()
        .expect("lock")
        .values()
        .flat_map(|l| l.records.iter())
        .all(|(_, pid, epoch)| (*pid, *epoch) == (1000, 0));
    assert!(
        one_epoch,
        "one producer id and epoch: nothing needed a bump"
    );
    assert_eq!(p.producer_id_and_epoch(), Some((1000, 0)));
    p.close().await.expect("close");
}

/// UNKNOWN_PRODUCER_ID (the broker lost the producer's state): the
/// producer bumps its epoch locally and restarts the partition's sequences
/// at 0; the batches in flight behind it are re-sent under the new epoch,
/// still once and in order.
#[tokio::test]
async fn unknown_producer_id_bumps_the_epoch_and_restarts_sequences() {
    let (addr, fake) = fake_broker(Some(Ok((7, 0))), |n, partition| {
        if n == 20 && partition == 0 {
            Fault::Error(59) // UNKNOWN_PRODUCER_ID
        } else {
            Fault::None
        }
    })
    .await;
    let p = producer(&addr).await;
    let sent = send_all(&p, 1500).await;
    assert!(sent.iter().all(|(_, _, r)| r.is_ok()));
    assert_exactly_once_in_order(&fake, &sent);
    assert_eq!(p.producer_id_and_epoch(), Some((7, 1)), "one bump");
    let epochs: Vec<i16> = fake.logs.lock().expect("lock")[&0]
        .records
        .iter()
        .map(|(_, _, e)| *e)
        .collect();
    assert!(epochs.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(epochs.first(), Some(&0));
    assert_eq!(epochs.last(), Some(&1));
    assert_eq!(
        fake.init_requests.load(Ordering::SeqCst),
        1,
        "bumped locally"
    );
    assert!(
        fake.out_of_order.load(Ordering::SeqCst) > 0,
        "the batches behind it met the gap"
    );
    p.close().await.expect("close");
}

/// A batch refused for good (INVALID_RECORD) fails its records; the
/// batches behind it meet a gap (OUT_OF_ORDER_SEQUENCE_NUMBER), so the
/// producer bumps the epoch and they go through under it, once and in
/// order.
#[tokio::test]
async fn a_refused_batch_fails_alone_and_the_gap_behind_it_is_repaired() {
    let (addr, fake) = fake_broker(Some(Ok((9, 0))), |n, partition| {
        if n == 15 && partition == 2 {
            Fault::Error(87) // INVALID_RECORD
        } else {
            Fault::None
        }
    })
    .await;
    let p = producer(&addr).await;
    let sent = send_all(&p, 1500).await;
    let failed: Vec<_> = sent.iter().filter(|(_, _, r)| r.is_err()).collect();
    assert!(!failed.is_empty(), "the refused batch's records fail");
    for (partition, _, r) in &failed {
        assert_eq!(*partition, 2);
        let e = r.as_ref().expect_err("failed");
        assert_eq!(e.code(), Some(87), "{e}");
    }
    assert_exactly_once_in_order(&fake, &sent);
    let (_, epoch) = p.producer_id_and_epoch().expect("producer id");
    assert!(epoch >= 1, "the gap bumped the epoch");
    p.close().await.expect("close");
}

/// Fatal errors stop the producer: an InitProducerId it is not authorized
/// for, or a broker without InitProducerId. Pending records fail with the
/// error, later sends fail at once.
#[tokio::test]
async fn fatal_errors_fail_pending_and_later_sends() {
    for (init, want) in [
        (Some(Err(31)), "ClusterAuthorizationFailed"),
        (None, "InitProducerId"),
    ] {
        let (addr, fake) = fake_broker(init, |_, _| Fault::None).await;
        let p = producer(&addr).await;
        let f = p
            .send(ProducerRecord::new(TOPIC, b"x".to_vec()).partition(0))
            .await;
        let outcome = match f {
            Ok(f) => tokio::time::timeout(Duration::from_secs(20), f)
                .await
                .expect("in time"),
            Err(e) => Err(e),
        };
        let e = outcome.expect_err("fails");
        assert!(e.to_string().contains(want), "{e}");
        let fatal = p.fatal_error().expect("fatal");
        assert!(fatal.to_string().contains(want), "{fatal}");
        let again = p
            .send(ProducerRecord::new(TOPIC, b"y".to_vec()).partition(0))
            .await
            .expect_err("later sends fail at once");
        assert!(again.to_string().contains(want), "{again}");
        assert!(!matches!(again, ClientError::Timeout { .. }));
        assert_eq!(fake.produce_requests.load(Ordering::SeqCst), 0);
        tokio::time::timeout(Duration::from_secs(20), p.close())
            .await
            .expect("close in time")
            .expect("close");
    }
}

/// Every batch header of `topic`/`partition`, from offset 0.
async fn batch_headers(
    server: &common::TestServer,
    topic: &str,
    partition: i32,
) -> Vec<sluice_protocol::record::BatchHeader> {
    use proto_kafka::messages::fetch_request::{FetchPartition, FetchTopic};
    use proto_kafka::messages::FetchRequest;
    use sluice_client::connection::{Connection, ConnectionConfig};
    let mut conn = Connection::connect(&server.addr, ConnectionConfig::default())
        .await
        .expect("connect");
    let version = conn.version_for(ApiKey::Fetch, 12).expect("fetch version");
    let mut out: Vec<sluice_protocol::record::BatchHeader> = Vec::new();
    loop {
        let next = out.last().map_or(0, |h| h.last_offset() + 1);
        let mut p = FetchPartition::default();
        p.partition = partition;
        p.fetch_offset = next;
        p.partition_max_bytes = 1 << 20;
        let mut t = FetchTopic::default();
        t.topic = proto_kafka::messages::TopicName(StrBytes::from_string(topic.to_string()));
        t.partitions = vec![p];
        let mut req = FetchRequest::default();
        req.replica_id = BrokerId(-1);
        req.max_bytes = 1 << 20;
        req.topics = vec![t];
        let resp = conn.send(&req, version).await.expect("fetch");
        let pd = &resp.responses[0].partitions[0];
        assert_eq!(pd.error_code, 0);
        let records = pd.records.clone().unwrap_or_default();
        let before = out.len();
        for item in sluice_protocol::record::BatchIter::new(&records) {
            let (_, h, _) = item.expect("batch header");
            if h.base_offset >= next {
                out.push(h);
            }
        }
        if out.len() == before || next >= pd.high_watermark {
            return out;
        }
    }
}

/// Against an in-process broker: each producer gets its own id (epoch 0)
/// from InitProducerId, and every batch it writes carries that id and the
/// partition's sequences, consecutive from 0.
#[tokio::test]
async fn batches_in_the_log_carry_the_producer_id_and_consecutive_sequences() {
    let server = common::start().await;
    server.create_topic("idem", 2).await;
    let mut ids = Vec::new();
    for round in 0..2 {
        let p = server
            .producer(|c| {
                c.batch_size = 500;
                c.linger_ms = 0;
            })
            .await;
        assert!(p.is_idempotent(), "on by default with acks=all");
        let mut futs = Vec::new();
        for i in 0..400 {
            let rec = ProducerRecord::new("idem", format!("r{round}-{i:04}").into_bytes())
                .partition(i % 2);
            futs.push(p.send(rec).await.expect("send"));
        }
        for f in futs {
            f.await.expect("delivered");
        }
        ids.push(p.producer_id_and_epoch().expect("producer id"));
        p.close().await.expect("close");
    }
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0].0, ids[1].0, "a new id per producer");
    assert!(ids.iter().all(|(_, epoch)| *epoch == 0));
    for partition in 0..2 {
        let headers = batch_headers(&server, "idem", partition).await;
        assert!(headers.len() > 10, "many small batches");
        for (id, _) in &ids {
            let mine: Vec<_> = headers.iter().filter(|h| h.producer_id == *id).collect();
            let mut next = 0;
            for h in &mine {
                assert_eq!((h.producer_epoch, h.base_sequence), (0, next));
                next += h.records_count;
            }
            assert_eq!(
                next, 200,
                "partition {partition}: 200 records of producer {id}"
            );
        }
    }
    server.stop().await;
}
