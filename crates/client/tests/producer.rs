//! Producer integration tests against an in-process Sluice server: every
//! codec and acks setting, explicit / keyed / keyless partitioning,
//! consecutive offsets, flush, and key placement identical to kafka-python's
//! default partitioner.

use std::path::Path;
use std::time::Duration;

use proto_kafka::messages::fetch_request::{FetchPartition, FetchTopic};
use proto_kafka::messages::{ApiKey, BrokerId, FetchRequest, TopicName};
use proto_kafka::protocol::StrBytes;
use sluice_client::connection::{Connection, ConnectionConfig};
use sluice_client::ProducerRecord;
use sluice_protocol::record::codec::decode_batch;
use sluice_protocol::record::{Compression, Record};

mod common;
use common::{start, start_with, TestServer};

impl TestServer {
    /// Every record of `topic`/`partition` from offset 0.
    async fn fetch_all(&self, topic: &str, partition: i32) -> Vec<Record> {
        let mut conn = Connection::connect(&self.addr, ConnectionConfig::default())
            .await
            .expect("connect");
        let version = conn.version_for(ApiKey::Fetch, 12).expect("fetch version");
        let mut out = Vec::new();
        loop {
            let mut p = FetchPartition::default();
            p.partition = partition;
            p.fetch_offset = out.len() as i64;
            p.partition_max_bytes = 1 << 20;
            let mut t = FetchTopic::default();
            t.topic = TopicName(StrBytes::from_string(topic.to_string()));
            t.partitions = vec![p];
            let mut req = FetchRequest::default();
            req.replica_id = BrokerId(-1);
            req.max_wait_ms = 0;
            req.max_bytes = 1 << 20;
            req.topics = vec![t];
            let resp = conn.send(&req, version).await.expect("fetch");
            let pd = &resp.responses[0].partitions[0];
            assert_eq!(pd.error_code, 0, "fetch error");
            let records = pd.records.clone().unwrap_or_default();
            let before = out.len();
            split_batches(&records, &mut out);
            if out.len() == before || out.len() as i64 >= pd.high_watermark {
                return out;
            }
        }
    }
}

fn split_batches(mut buf: &[u8], out: &mut Vec<Record>) {
    while buf.len() >= 12 {
        let len = i32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize + 12;
        if buf.len() < len {
            break;
        }
        let b = decode_batch(&buf[..len], 1 << 24).expect("decode batch");
        for r in b.records {
            if r.record.offset >= out.len() as i64 {
                assert_eq!(r.record.offset, out.len() as i64, "offsets consecutive");
                out.push(r.record);
            }
        }
        buf = &buf[len..];
    }
}

#[tokio::test]
async fn produce_every_codec_and_acks() {
    let s = start().await;
    let codecs = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    for (ci, codec) in codecs.into_iter().enumerate() {
        for acks in [-1i16, 1, 0] {
            let topic = format!("codec-{ci}-acks{}", acks + 1);
            s.create_topic(&topic, 1).await;
            let p = s
                .producer(|c| {
                    c.compression = codec;
                    c.acks = acks;
                })
                .await;
            let mut futs = Vec::new();
            for i in 0..50 {
                let rec = ProducerRecord::new(topic.clone(), format!("value-{i}").into_bytes())
                    .key(format!("k{i}").into_bytes())
                    .header("h", Some(format!("{i}").into_bytes()))
                    .timestamp(1_000 + i);
                futs.push(p.send(rec).await.expect("send"));
            }
            for (i, f) in futs.into_iter().enumerate() {
                let m = f.await.expect("delivered");
                assert_eq!((&*m.topic, m.partition), (topic.as_str(), 0));
                if acks == 0 {
                    assert_eq!(m.offset, -1);
                } else {
                    assert_eq!(m.offset, i as i64, "{codec:?} acks {acks}");
                }
                assert_eq!(m.timestamp, 1_000 + i as i64);
            }
            p.close().await.expect("close");
            // acks=0 gets no response: wait until the broker wrote them.
            let mut got = Vec::new();
            for _ in 0..50 {
                got = s.fetch_all(&topic, 0).await;
                if got.len() == 50 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert_eq!(got.len(), 50, "{codec:?} acks {acks}");
            for (i, r) in got.iter().enumerate() {
                assert_eq!(r.value.as_deref(), Some(format!("value-{i}").as_bytes()));
                assert_eq!(r.key.as_deref(), Some(format!("k{i}").as_bytes()));
                assert_eq!(r.timestamp, 1_000 + i as i64);
                assert_eq!(r.headers.len(), 1);
                assert_eq!(r.headers[0].key, b"h");
                assert_eq!(
                    r.headers[0].value.as_deref(),
                    Some(format!("{i}").as_bytes())
                );
            }
        }
    }
    s.stop().await;
}

#[tokio::test]
async fn explicit_keyed_and_keyless_partitioning() {
    let s = start().await;
    s.create_topic("parts", 4).await;
    let p = s.producer(|c| c.batch_size = 1024).await;
    // Explicit partition wins over the key.
    let m = p
        .send(
            ProducerRecord::new("parts", b"x".to_vec())
                .partition(3)
                .key(b"a".to_vec()),
        )
        .await
        .expect("send")
        .await
        .expect("delivered");
    assert_eq!(m.partition, 3);
    // Keyless records: sticky, then spread over partitions after batch.size.
    let mut futs = Vec::new();
    for i in 0..200 {
        futs.push(
            p.send(ProducerRecord::new("parts", vec![b'v'; 100 + i % 3]))
                .await
                .expect("send"),
        );
    }
    let mut seen = std::collections::BTreeSet::new();
    for f in futs {
        let m = f.await.expect("delivered");
        assert!((0..4).contains(&m.partition));
        seen.insert(m.partition);
    }
    assert!(seen.len() > 1, "sticky partitioner switched: {seen:?}");
    // Invalid explicit partition is refused up front.
    assert!(p
        .send(ProducerRecord::new("parts", b"x".to_vec()).partition(4))
        .await
        .is_err());
    // A missing topic is created by the producer's metadata request (the
    // broker allows auto-creation by default), with the broker's defaults.
    let m = p
        .send(ProducerRecord::new("no-such-topic", b"x".to_vec()))
        .await
        .expect("send")
        .await
        .expect("delivered");
    assert_eq!((m.partition, m.offset), (0, 0));
    // Plain metadata requests (consumers, admin) never create topics.
    let (md, errors) = p
        .cluster()
        .refresh(Some(&["not-created".to_string()]))
        .await
        .expect("metadata");
    assert!(md.topics.is_empty());
    assert_eq!(errors[0].1.code(), Some(3));
    // A topic name the broker cannot create fails.
    assert!(p
        .send(ProducerRecord::new("bad/name", b"x".to_vec()))
        .await
        .is_err());
    p.close().await.expect("close");
    s.stop().await;
}

#[tokio::test]
async fn offsets_are_consecutive_per_partition_and_flush_delivers() {
    let s = start().await;
    s.create_topic("seq", 3).await;
    // A long linger: only flush sends.
    let p = s
        .producer(|c| {
            c.linger_ms = 60_000;
            c.batch_size = 512;
        })
        .await;
    let mut futs = Vec::new();
    for i in 0..300 {
        let key = format!("key-{}", i % 10);
        futs.push(
            p.send(ProducerRecord::new("seq", format!("{i}").into_bytes()).key(key.into_bytes()))
                .await
                .expect("send"),
        );
    }
    tokio::time::timeout(Duration::from_secs(20), p.flush())
        .await
        .expect("flush in time");
    let mut next = [0i64; 3];
    let mut by_key = std::collections::HashMap::new();
    for (i, f) in futs.into_iter().enumerate() {
        // Already resolved after flush (a zero timeout polls once).
        let m = tokio::time::timeout(Duration::ZERO, f)
            .await
            .expect("resolved by flush")
            .expect("ok");
        assert_eq!(m.offset, next[m.partition as usize], "record {i}");
        next[m.partition as usize] += 1;
        let key = i % 10;
        let prev = by_key.insert(key, m.partition);
        assert!(
            prev.is_none() || prev == Some(m.partition),
            "same key, same partition"
        );
    }
    for part in 0..3 {
        let recs = s.fetch_all("seq", part).await;
        assert_eq!(recs.len() as i64, next[part as usize]);
    }
    p.close().await.expect("close");
    assert!(p
        .send(ProducerRecord::new("seq", b"late".to_vec()))
        .await
        .is_err());
    s.stop().await;
}

#[tokio::test]
async fn callbacks_run_in_send_order_without_the_lock_and_before_flush_returns() {
    let s = start().await;
    s.create_topic("cb", 2).await;
    // Small batches, sent only by flush: many batches per partition complete
    // at once.
    let p = std::sync::Arc::new(
        s.producer(|c| {
            c.linger_ms = 60_000;
            c.batch_size = 512;
        })
        .await,
    );
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    for i in 0..400 {
        let (p2, seen) = (p.clone(), seen.clone());
        let record = ProducerRecord::new("cb", format!("{i}").into_bytes()).partition(i % 2);
        p.send_with_callback(record, move |r| {
            // Locks the producer's state: a callback run under that lock
            // would deadlock here.
            let _ = p2.producer_id_and_epoch();
            let m = r.expect("delivered");
            seen.lock().expect("lock").push((i, m.partition, m.offset));
        })
        .await
        .expect("send");
    }
    tokio::time::timeout(Duration::from_secs(20), p.flush())
        .await
        .expect("flush in time");
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 400, "every callback ran before flush returned");
    let mut next = [0i64; 2];
    for (i, part, offset) in seen {
        assert_eq!(part, i % 2);
        assert_eq!(
            offset, next[part as usize],
            "record {i}: callbacks in send order"
        );
        next[part as usize] += 1;
    }
    p.close().await.expect("close");
    s.stop().await;
}

/// Partitions kafka-python's `DefaultPartitioner` picks for `keys` over
/// `n` partitions, or `None` when the test venv is missing.
fn kafka_python_partitions(keys: &[&str], n: usize) -> Option<Vec<i32>> {
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-venv/bin/python");
    if !py.exists() {
        return None;
    }
    let script = format!(
        "import sys\nfrom kafka.partitioner.default import DefaultPartitioner\n\
         ps=list(range({n}))\n\
         for k in sys.argv[1:]: print(DefaultPartitioner()(k.encode(), ps, ps))\n"
    );
    let out = std::process::Command::new(py)
        .arg("-c")
        .arg(script)
        .args(keys)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout)
        .ok()?
        .lines()
        .map(|l| l.trim().parse().ok())
        .collect()
}

#[tokio::test]
async fn keys_land_where_kafka_python_puts_them() {
    let keys = [
        "a",
        "hello",
        "kafka",
        "key-0",
        "key-1",
        "key-42",
        "user-12345",
        "sluice",
        "order:9999",
        "foobar",
    ];
    // Hard-coded from kafka-python (same vectors as partitioner.rs), used
    // when the test venv is missing.
    let fallback = vec![5, 4, 3, 0, 5, 3, 1, 0, 2, 0];
    let expected = kafka_python_partitions(&keys, 7).unwrap_or(fallback);
    let s = start().await;
    s.create_topic("interop", 7).await;
    let p = s.producer(|_| {}).await;
    for (k, want) in keys.iter().zip(&expected) {
        let m = p
            .send(ProducerRecord::new("interop", b"v".to_vec()).key(k.as_bytes().to_vec()))
            .await
            .expect("send")
            .await
            .expect("delivered");
        assert_eq!(m.partition, *want, "key {k}");
    }
    p.close().await.expect("close");
    s.stop().await;
}

#[tokio::test]
async fn tiny_buffer_memory_applies_back_pressure() {
    let s = start().await;
    s.create_topic("bp", 1).await;
    let p = s
        .producer(|c| {
            c.buffer_memory = 4096;
            c.batch_size = 1024;
        })
        .await;
    let mut futs = Vec::new();
    for i in 0..200 {
        futs.push(
            p.send(ProducerRecord::new("bp", vec![b'x'; 200]).key(format!("{i}").into_bytes()))
                .await
                .expect("send"),
        );
    }
    for (i, f) in futs.into_iter().enumerate() {
        assert_eq!(f.await.expect("delivered").offset, i as i64);
    }
    // A record larger than buffer.memory can never be sent.
    assert!(p
        .send(ProducerRecord::new("bp", vec![0u8; 8192]))
        .await
        .is_err());
    p.close().await.expect("close");
    s.stop().await;
}

/// 20,000 keyed records over 6 partitions with one and with five Produce
/// requests in flight per connection: every partition's offsets follow
/// send order, and per key the values read back increase.
#[tokio::test]
async fn max_in_flight_1_and_5_keep_send_order_per_partition() {
    let s = start().await;
    for max_in_flight in [1usize, 5] {
        let topic = format!("inflight-{max_in_flight}");
        s.create_topic(&topic, 6).await;
        let p = s
            .producer(|c| {
                c.max_in_flight = max_in_flight;
                c.batch_size = 2048;
                c.linger_ms = 1;
            })
            .await;
        const N: usize = 20_000;
        let mut futs = Vec::with_capacity(N);
        for i in 0..N {
            let rec = ProducerRecord::new(topic.clone(), format!("{i}").into_bytes())
                .key(format!("key-{}", i % 97).into_bytes());
            futs.push(p.send(rec).await.expect("send"));
        }
        let mut next = [0i64; 6];
        for (i, f) in futs.into_iter().enumerate() {
            let m = tokio::time::timeout(Duration::from_secs(60), f)
                .await
                .expect("delivered in time")
                .expect("delivered");
            let part = m.partition as usize;
            assert_eq!(
                m.offset, next[part],
                "max_in_flight {max_in_flight}: record {i} out of send order"
            );
            next[part] += 1;
        }
        p.close().await.expect("close");
        assert_eq!(next.iter().sum::<i64>(), N as i64);
        assert!(next.iter().all(|n| *n > 0), "all partitions used: {next:?}");
        let mut total = 0;
        for part in 0..6 {
            let recs = s.fetch_all(&topic, part).await;
            assert_eq!(recs.len() as i64, next[part as usize]);
            total += recs.len();
            let mut last: std::collections::HashMap<Vec<u8>, u64> = Default::default();
            for r in recs {
                let key = r.key.clone().expect("key");
                let v: u64 = std::str::from_utf8(r.value.as_deref().expect("value"))
                    .expect("utf8")
                    .parse()
                    .expect("number");
                if let Some(prev) = last.insert(key, v) {
                    assert!(prev < v, "max_in_flight {max_in_flight}: {prev} before {v}");
                }
            }
        }
        assert_eq!(total, N);
    }
    s.stop().await;
}

/// A record whose leader becomes unreachable is failed once
/// `delivery.timeout.ms` passed since its batch was created, with a timeout
/// error naming the topic-partition.
#[tokio::test]
async fn delivery_timeout_expires_records_for_an_unreachable_leader() {
    let s = start().await;
    s.create_topic("dt", 2).await;
    let p = s
        .producer(|c| {
            c.delivery_timeout_ms = 1500;
            c.linger_ms = 0;
            c.request_timeout = Duration::from_millis(1000);
        })
        .await;
    // Warm the producer's metadata while the broker is up.
    p.send(ProducerRecord::new("dt", b"before".to_vec()).partition(1))
        .await
        .expect("send")
        .await
        .expect("delivered while the broker is up");
    s.stop().await;
    let started = std::time::Instant::now();
    let fut = p
        .send(ProducerRecord::new("dt", b"lost".to_vec()).partition(1))
        .await
        .expect("buffered from cached metadata");
    let err = tokio::time::timeout(Duration::from_secs(20), fut)
        .await
        .expect("delivery outcome within 20 s")
        .expect_err("the leader is gone");
    let msg = err.to_string();
    assert!(
        matches!(err, sluice_client::ClientError::Timeout { .. }),
        "{msg}"
    );
    assert!(msg.contains("dt-1"), "names the partition: {msg}");
    assert!(msg.contains("since batch creation"), "{msg}");
    assert!(started.elapsed() >= Duration::from_millis(1400), "{msg}");
    tokio::time::timeout(Duration::from_secs(20), p.close())
        .await
        .expect("close in time")
        .expect("close");
}

/// Kafka's rule `delivery.timeout.ms >= linger.ms + request.timeout.ms`.
#[tokio::test]
async fn delivery_timeout_must_cover_linger_and_request_timeout() {
    // Checked before connecting: nothing listens on this address.
    let client = sluice_client::ClientConfig::new("127.0.0.1:1");
    let mut cfg = sluice_client::ProducerConfig::new(client);
    cfg.linger_ms = 100;
    cfg.request_timeout = Duration::from_millis(1000);
    cfg.delivery_timeout_ms = 1099;
    let err = sluice_client::Producer::new(cfg.clone())
        .await
        .expect_err("delivery.timeout.ms too small");
    let msg = err.to_string();
    assert!(
        matches!(err, sluice_client::ClientError::InvalidArgument(_)),
        "{msg}"
    );
    for key in ["delivery.timeout.ms", "linger.ms", "request.timeout.ms"] {
        assert!(msg.contains(key), "{msg} names {key}");
    }
    cfg.delivery_timeout_ms = 1100;
    cfg.validate().expect("the boundary is allowed");
    cfg.max_in_flight = 0;
    assert!(cfg.validate().is_err(), "max.in.flight must be at least 1");
}

#[tokio::test]
async fn missing_topic_fails_when_the_broker_does_not_create_it() {
    let s = start_with(|c| {
        c.set("auto.create.topics.enable", "false")
            .expect("auto.create.topics.enable");
    })
    .await;
    let p = s.producer(|_| {}).await;
    let e = p
        .send(ProducerRecord::new("absent", b"x".to_vec()))
        .await
        .expect_err("no topic, no auto-creation");
    assert_eq!(e.code(), Some(3), "UNKNOWN_TOPIC_OR_PARTITION: {e}");
    p.close().await.expect("close");
    s.stop().await;
}
