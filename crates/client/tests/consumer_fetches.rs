//! Fetches in flight, against a fake broker that answers Fetch requests
//! slowly and counts how many are outstanding at once: the consumer keeps
//! up to four fetches in flight to one broker, each on its own connection
//! and for partitions no other outstanding fetch holds, never more; and
//! every partition's records still arrive once each, in offset order.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use proto_kafka::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use proto_kafka::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse};
use proto_kafka::protocol::Decodable;
use sluice_client::consumer::{Consumer, ConsumerConfig};
use sluice_client::{ClientConfig, TopicPartition};
use sluice_protocol::record::{BatchBuilder, Compression, Record};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

mod fake;
use fake::frame;

const TOPIC: &str = "t";
const PARTITIONS: i32 = 8;
/// Each partition's log holds offsets 0 to END-1.
const END: i64 = 40;
/// Records per fetched partition.
const PER_FETCH: i64 = 10;
/// How long the broker holds each Fetch answer.
const DELAY: Duration = Duration::from_millis(300);
/// The consumer's limit per broker.
const SLOTS: usize = 4;

#[derive(Debug, Default)]
struct Stats {
    outstanding: AtomicUsize,
    max_outstanding: AtomicUsize,
    /// Partitions of the fetches outstanding now.
    partitions: Mutex<Vec<i32>>,
    /// A partition was in two outstanding fetches at once.
    overlap: AtomicUsize,
    /// Connections that sent a Fetch.
    fetch_conns: Mutex<HashSet<usize>>,
    fetches: AtomicUsize,
}

/// One batch of the records from `offset` (at most `PER_FETCH`, values
/// `p{partition}-{offset}`).
fn batch(partition: i32, offset: i64) -> Bytes {
    let mut b = BatchBuilder::new(Compression::None, 1_000);
    for o in offset..(offset + PER_FETCH).min(END) {
        b.push(Record::new(
            None,
            Some(format!("p{partition}-{o}").into_bytes()),
            1_000,
        ));
    }
    Bytes::from(b.build(offset).expect("batch"))
}

/// Answers a Fetch; returns the answer and the partitions it holds.
fn fetch(req: &FetchRequest) -> (FetchResponse, Vec<i32>) {
    let mut resp = FetchResponse::default();
    let mut partitions = Vec::new();
    for t in &req.topics {
        let mut tr = FetchableTopicResponse::default();
        tr.topic = t.topic.clone();
        for p in &t.partitions {
            partitions.push(p.partition);
            let mut pd = PartitionData::default();
            pd.partition_index = p.partition;
            pd.high_watermark = END;
            pd.last_stable_offset = END;
            pd.log_start_offset = 0;
            pd.preferred_read_replica = BrokerId(-1);
            pd.records = Some(if p.fetch_offset < END {
                batch(p.partition, p.fetch_offset)
            } else {
                Bytes::new()
            });
            tr.partitions.push(pd);
        }
        resp.responses.push(tr);
    }
    (resp, partitions)
}

async fn serve(stream: TcpStream, conn: usize, port: u16, stats: Arc<Stats>) {
    let (mut rd, mut wr) = stream.into_split();
    while let Some(req) = fake::read_request(&mut rd).await {
        let fake::Request {
            key,
            version,
            correlation: c,
            mut body,
        } = req;
        let reply = match key {
            ApiKey::ApiVersions => {
                let resp = fake::api_versions(&[
                    (ApiKey::ApiVersions, 0, 3),
                    (ApiKey::Metadata, 0, 12),
                    (ApiKey::Fetch, 4, 12),
                ]);
                frame(key, version, c, &resp)
            }
            ApiKey::Metadata => frame(
                key,
                version,
                c,
                &fake::one_broker_metadata(port, TOPIC, PARTITIONS),
            ),
            ApiKey::Fetch => {
                let req = FetchRequest::decode(&mut body, version).expect("fetch");
                let (resp, partitions) = fetch(&req);
                stats.fetches.fetch_add(1, Ordering::SeqCst);
                stats.fetch_conns.lock().expect("lock").insert(conn);
                {
                    let mut out = stats.partitions.lock().expect("lock");
                    for p in &partitions {
                        if out.contains(p) {
                            stats.overlap.fetch_add(1, Ordering::SeqCst);
                        }
                        out.push(*p);
                    }
                }
                let n = stats.outstanding.fetch_add(1, Ordering::SeqCst) + 1;
                stats.max_outstanding.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(DELAY).await;
                {
                    let mut out = stats.partitions.lock().expect("lock");
                    for p in &partitions {
                        let i = out.iter().position(|x| x == p).expect("outstanding");
                        out.remove(i);
                    }
                }
                stats.outstanding.fetch_sub(1, Ordering::SeqCst);
                frame(key, version, c, &resp)
            }
            other => panic!("unexpected request {other:?}"),
        };
        if wr.write_all(&reply).await.is_err() {
            return;
        }
    }
}

async fn fake_broker() -> (String, Arc<Stats>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let stats = Arc::new(Stats::default());
    let s = stats.clone();
    tokio::spawn(async move {
        let mut conn = 0;
        while let Ok((stream, _)) = listener.accept().await {
            conn += 1;
            tokio::spawn(serve(stream, conn, port, s.clone()));
        }
    });
    (format!("127.0.0.1:{port}"), stats)
}

/// Eight partitions of 40 records, fetched ten records per partition per
/// answer and polled ten at a time: once the first answer is buffered,
/// each `poll` drains one partition, which is fetched again alone while
/// earlier such fetches are outstanding.
#[tokio::test]
async fn up_to_four_fetches_in_flight_for_disjoint_partitions_and_records_in_order() {
    let (addr, stats) = fake_broker().await;
    let mut config = ConsumerConfig::new(ClientConfig::new(&addr));
    config.enable_auto_commit = false;
    config.max_poll_records = PER_FETCH as usize;
    config.fetch_max_wait = Duration::from_millis(20);
    let mut consumer = Consumer::new(config).await.expect("consumer");
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(TOPIC, p))
        .collect();
    consumer.assign(&tps).expect("assign");
    for tp in &tps {
        consumer.seek(tp, 0).expect("seek");
    }
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    let total = i64::from(PARTITIONS) * END;
    let mut received = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while received < total {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {received} of {total} records in 30 s"
        );
        for r in consumer
            .poll(Duration::from_millis(100))
            .await
            .expect("poll")
        {
            let expected = next.entry(r.partition).or_insert(0);
            assert_eq!(r.offset, *expected, "partition {} in order", r.partition);
            assert_eq!(
                r.value.as_deref(),
                Some(format!("p{}-{}", r.partition, r.offset).as_bytes())
            );
            *expected += 1;
            received += 1;
        }
    }
    assert!(next.values().all(|n| *n == END), "{next:?}");
    assert_eq!(
        stats.max_outstanding.load(Ordering::SeqCst),
        SLOTS,
        "fetches pipelined up to the limit, never past it"
    );
    assert_eq!(
        stats.overlap.load(Ordering::SeqCst),
        0,
        "a partition is in one outstanding fetch at most"
    );
    let conns = stats.fetch_conns.lock().expect("lock").len();
    assert!(
        conns <= SLOTS,
        "{conns} connections fetched, reused across {} fetches",
        stats.fetches.load(Ordering::SeqCst)
    );
    consumer.close().await.expect("close");
}
