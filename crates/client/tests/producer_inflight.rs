//! `max.in.flight.requests.per.connection` against a fake broker that
//! answers Produce requests slowly (in order) and counts how many are
//! outstanding at once: the producer pipelines up to the limit, never more,
//! across partitions and within one, as Kafka's: up to the limit batches of
//! one partition (at most 5 with idempotence); with a limit of 1 never two
//! batches of a partition.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use proto_kafka::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use proto_kafka::messages::{
    ApiKey, InitProducerIdResponse, ProduceRequest, ProduceResponse, ProducerId,
};
use proto_kafka::protocol::Decodable;
use sluice_client::{ClientConfig, Producer, ProducerConfig, ProducerRecord};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

mod fake;
use fake::frame;

const PARTITIONS: i32 = 8;
const DELAY: Duration = Duration::from_millis(300);

#[derive(Debug, Default)]
struct Stats {
    outstanding: AtomicUsize,
    max_outstanding: AtomicUsize,
    /// Partitions of the Produce requests currently outstanding.
    partitions: Mutex<Vec<i32>>,
    /// A partition was in two outstanding requests at once.
    overlap: AtomicUsize,
    /// Most batches of one partition outstanding at once.
    max_per_partition: AtomicUsize,
}

/// Serves one connection: requests are read as they come; responses are
/// written in order, Produce responses `DELAY` after their request arrived.
async fn serve(stream: TcpStream, port: u16, stats: Arc<Stats>) {
    let (mut rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<(tokio::time::Instant, Bytes, Vec<i32>)>();
    let writer_stats = stats.clone();
    let writer = tokio::spawn(async move {
        while let Some((at, frame, partitions)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if !partitions.is_empty() {
                let mut out = writer_stats.partitions.lock().expect("lock");
                for p in &partitions {
                    let i = out.iter().position(|x| x == p).expect("outstanding");
                    out.remove(i);
                }
                writer_stats.outstanding.fetch_sub(1, Ordering::SeqCst);
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
                let resp = fake::api_versions(&[
                    (ApiKey::ApiVersions, 0, 3),
                    (ApiKey::Metadata, 0, 12),
                    (ApiKey::Produce, 3, 12),
                    (ApiKey::InitProducerId, 0, 5),
                ]);
                (now, frame(key, version, c, &resp), Vec::new())
            }
            ApiKey::Metadata => {
                let resp = fake::one_broker_metadata(port, "t", PARTITIONS);
                (now, frame(key, version, c, &resp), Vec::new())
            }
            ApiKey::InitProducerId => {
                let mut resp = InitProducerIdResponse::default();
                resp.producer_id = ProducerId(4000);
                resp.producer_epoch = 0;
                (now, frame(key, version, c, &resp), Vec::new())
            }
            ApiKey::Produce => {
                let req = ProduceRequest::decode(&mut body, version).expect("produce");
                let mut resp = ProduceResponse::default();
                let mut partitions = Vec::new();
                for t in &req.topic_data {
                    let mut tr = TopicProduceResponse::default();
                    tr.name = t.name.clone();
                    for p in &t.partition_data {
                        partitions.push(p.index);
                        let mut pr = PartitionProduceResponse::default();
                        pr.index = p.index;
                        pr.base_offset = 0;
                        pr.log_append_time_ms = -1;
                        tr.partition_responses.push(pr);
                    }
                    resp.responses.push(tr);
                }
                {
                    let mut out = stats.partitions.lock().expect("lock");
                    for p in &partitions {
                        if out.contains(p) {
                            stats.overlap.fetch_add(1, Ordering::SeqCst);
                        }
                        out.push(*p);
                        let n = out.iter().filter(|x| *x == p).count();
                        stats.max_per_partition.fetch_max(n, Ordering::SeqCst);
                    }
                }
                let n = stats.outstanding.fetch_add(1, Ordering::SeqCst) + 1;
                stats.max_outstanding.fetch_max(n, Ordering::SeqCst);
                (now + DELAY, frame(key, version, c, &resp), partitions)
            }
            other => panic!("unexpected request {other:?}"),
        };
        if tx.send(reply).is_err() {
            break;
        }
    }
    drop(tx);
    let _ = writer.await;
}

async fn fake_broker() -> (String, Arc<Stats>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let stats = Arc::new(Stats::default());
    let s = stats.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream, port, s.clone()));
        }
    });
    (format!("127.0.0.1:{port}"), stats)
}

/// Sends one record to each partition, 40 ms apart, with `linger.ms` 0, so
/// each partition's batch is ready while earlier requests are outstanding,
/// after six records to partition 0, 5 ms apart.
async fn run(max_in_flight: usize, idempotent: bool) -> Arc<Stats> {
    let (addr, stats) = fake_broker().await;
    let mut cfg = ProducerConfig::new(ClientConfig::new(&addr));
    cfg.linger_ms = 0;
    cfg.max_in_flight = max_in_flight;
    cfg.enable_idempotence = Some(idempotent);
    let p = Producer::new(cfg).await.expect("producer");
    let mut futs = Vec::new();
    for i in 0..6 {
        let rec = ProducerRecord::new("t", format!("p0-{i}").into_bytes()).partition(0);
        futs.push(p.send(rec).await.expect("send"));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for round in 0..2 {
        for i in 0..PARTITIONS {
            let rec = ProducerRecord::new("t", format!("{round}-{i}").into_bytes()).partition(i);
            futs.push(p.send(rec).await.expect("send"));
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    }
    let mut seen = HashSet::new();
    for f in futs {
        let m = tokio::time::timeout(Duration::from_secs(30), f)
            .await
            .expect("in time")
            .expect("delivered");
        seen.insert(m.partition);
    }
    assert_eq!(seen.len(), PARTITIONS as usize);
    tokio::time::timeout(Duration::from_secs(30), p.close())
        .await
        .expect("close in time")
        .expect("close");
    stats
}

#[tokio::test]
async fn produce_requests_pipeline_up_to_max_in_flight() {
    let stats = run(5, false).await;
    assert_eq!(
        stats.max_outstanding.load(Ordering::SeqCst),
        5,
        "five Produce requests outstanding at once"
    );
    assert_eq!(
        stats.max_per_partition.load(Ordering::SeqCst),
        5,
        "as Kafka's: up to five batches of one partition without idempotence"
    );

    let stats = run(1, false).await;
    assert_eq!(stats.max_outstanding.load(Ordering::SeqCst), 1);
    assert_eq!(stats.overlap.load(Ordering::SeqCst), 0);
    assert_eq!(stats.max_per_partition.load(Ordering::SeqCst), 1);
}

/// An idempotent producer keeps up to five batches of one partition in
/// flight (each in its own request), never a sixth; with
/// `max_in_flight` 2, two.
#[tokio::test]
async fn idempotent_producer_keeps_up_to_five_batches_of_a_partition_in_flight() {
    let stats = run(5, true).await;
    assert_eq!(stats.max_outstanding.load(Ordering::SeqCst), 5);
    assert_eq!(stats.max_per_partition.load(Ordering::SeqCst), 5);

    let stats = run(2, true).await;
    assert_eq!(stats.max_outstanding.load(Ordering::SeqCst), 2);
    assert_eq!(stats.max_per_partition.load(Ordering::SeqCst), 2);
}
