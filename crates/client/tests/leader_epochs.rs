//! Leader epochs through failover, against two fake brokers (ids 1 and 2)
//! whose metadata views and partition leadership the test scripts: the
//! metadata cache never goes back to an older leader epoch when a lagging
//! broker answers; the consumer sends its leader epoch in Fetch
//! (`current_leader_epoch`), and on NOT_LEADER_OR_FOLLOWER or
//! FENCED_LEADER_EPOCH refreshes metadata and goes on from the new leader
//! without losing or repeating a record; a current-leader hint in a Fetch
//! error (KIP-951) moves it even while every broker's metadata lags, and
//! one in a Produce error (with the leader's endpoint) moves the producer.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use proto_kafka::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use proto_kafka::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use proto_kafka::messages::produce_response::{
    NodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
};
use proto_kafka::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, MetadataResponse, ProduceRequest,
    ProduceResponse, TopicName,
};
use proto_kafka::protocol::{Decodable, StrBytes};
use sluice_client::consumer::{Consumer, ConsumerConfig};
use sluice_client::{
    ClientConfig, Cluster, Producer, ProducerConfig, ProducerRecord, TopicPartition,
};
use sluice_protocol::record::codec::decode_batch;
use sluice_protocol::record::{BatchBuilder, BatchIter, Compression, Record};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

mod fake;
use fake::frame;

const TOPIC: &str = "t";
const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const FENCED_LEADER_EPOCH: i16 = 74;
const UNKNOWN_LEADER_EPOCH: i16 = 75;
/// The fake log's length: offsets 0 to END-1 hold `r{offset}`.
const END: i64 = 60;

/// The scripted cluster.
#[derive(Default)]
struct State {
    /// Broker id → its port.
    ports: HashMap<i32, u16>,
    /// Broker id → the (leader, leader epoch) its Metadata answers report.
    views: HashMap<i32, (i32, i32)>,
    /// The real leader and epoch, which Fetch checks.
    truth: (i32, i32),
    /// Brokers that drop every connection (as if dead).
    down: HashSet<i32>,
    /// Every Fetch: (broker, current_leader_epoch, fetch_offset).
    fetches: Vec<(i32, i32, i64)>,
    /// Whether NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH answers name
    /// the real leader (KIP-951's `current_leader`).
    hints: bool,
    /// Brokers Metadata answers leave out (a lagging view that does not
    /// know a new broker yet).
    unlisted: HashSet<i32>,
    /// Records appended by Produce: (broker, value).
    produced: Vec<(i32, String)>,
}

type Shared = Arc<Mutex<State>>;

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn metadata(state: &State, id: i32) -> MetadataResponse {
    let mut resp = MetadataResponse::default();
    let mut ids: Vec<i32> = state.ports.keys().copied().collect();
    ids.sort_unstable();
    for b in ids.into_iter().filter(|b| !state.unlisted.contains(b)) {
        let mut mb = MetadataResponseBroker::default();
        mb.node_id = BrokerId(b);
        mb.host = StrBytes::from_static_str("127.0.0.1");
        mb.port = i32::from(state.ports[&b]);
        resp.brokers.push(mb);
    }
    resp.controller_id = BrokerId(1);
    let (leader, epoch) = state.views[&id];
    let mut t = MetadataResponseTopic::default();
    t.name = Some(TopicName(StrBytes::from_static_str(TOPIC)));
    let mut p = MetadataResponsePartition::default();
    p.partition_index = 0;
    p.leader_id = BrokerId(leader);
    p.leader_epoch = epoch;
    p.replica_nodes = vec![BrokerId(1), BrokerId(2)];
    p.isr_nodes = vec![BrokerId(1), BrokerId(2)];
    t.partitions.push(p);
    resp.topics.push(t);
    resp
}

fn record_at(offset: i64) -> Bytes {
    let mut b = BatchBuilder::new(Compression::None, 1_000);
    b.push(Record::new(
        None,
        Some(format!("r{offset}").into_bytes()),
        1_000,
    ));
    Bytes::from(b.build(offset).expect("batch"))
}

/// Answers a Fetch as broker `id`: Kafka's leader checks, then one record.
fn fetch(state: &mut State, id: i32, req: &FetchRequest) -> FetchResponse {
    let mut resp = FetchResponse::default();
    for t in &req.topics {
        let mut tr = FetchableTopicResponse::default();
        tr.topic = t.topic.clone();
        for p in &t.partitions {
            state
                .fetches
                .push((id, p.current_leader_epoch, p.fetch_offset));
            let (leader, epoch) = state.truth;
            let mut pd = PartitionData::default();
            pd.partition_index = p.partition;
            pd.high_watermark = END;
            pd.last_stable_offset = END;
            pd.log_start_offset = 0;
            pd.preferred_read_replica = BrokerId(-1);
            let requested = p.current_leader_epoch;
            if leader != id {
                pd.error_code = NOT_LEADER_OR_FOLLOWER;
            } else if requested >= 0 && requested < epoch {
                pd.error_code = FENCED_LEADER_EPOCH;
            } else if requested > epoch {
                pd.error_code = UNKNOWN_LEADER_EPOCH;
            } else if p.fetch_offset < END {
                pd.records = Some(record_at(p.fetch_offset));
            } else {
                pd.records = Some(Bytes::new());
            }
            if pd.error_code != 0 {
                pd.high_watermark = -1;
                pd.last_stable_offset = -1;
            }
            if state.hints && [NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH].contains(&pd.error_code)
            {
                pd.current_leader.leader_id = BrokerId(leader);
                pd.current_leader.leader_epoch = epoch;
            }
            tr.partitions.push(pd);
        }
        resp.responses.push(tr);
    }
    resp
}

/// Answers a Produce as broker `id`: appended when it leads, else
/// NOT_LEADER_OR_FOLLOWER (with the leader and its endpoint when hinting).
fn produce(state: &mut State, id: i32, req: &ProduceRequest) -> ProduceResponse {
    let mut resp = ProduceResponse::default();
    let (leader, epoch) = state.truth;
    for t in &req.topic_data {
        let mut tr = TopicProduceResponse::default();
        tr.name = t.name.clone();
        for p in &t.partition_data {
            let mut pr = PartitionProduceResponse::default();
            pr.index = p.index;
            pr.log_append_time_ms = -1;
            if leader == id {
                pr.base_offset = state.produced.len() as i64;
                for b in BatchIter::new(p.records.as_deref().unwrap_or_default()) {
                    let (_, _, raw) = b.expect("batch");
                    for r in decode_batch(raw, 1 << 20).expect("decode").records {
                        let v = String::from_utf8_lossy(&r.record.value.unwrap_or_default())
                            .into_owned();
                        state.produced.push((id, v));
                    }
                }
            } else {
                pr.error_code = NOT_LEADER_OR_FOLLOWER;
                pr.base_offset = -1;
                if state.hints {
                    pr.current_leader.leader_id = BrokerId(leader);
                    pr.current_leader.leader_epoch = epoch;
                    let mut e = NodeEndpoint::default();
                    e.node_id = BrokerId(leader);
                    e.host = StrBytes::from_static_str("127.0.0.1");
                    e.port = i32::from(state.ports[&leader]);
                    resp.node_endpoints = vec![e];
                }
            }
            tr.partition_responses.push(pr);
        }
        resp.responses.push(tr);
    }
    resp
}

async fn serve(stream: TcpStream, id: i32, state: Shared) {
    let (mut rd, mut wr) = stream.into_split();
    while let Some(req) = fake::read_request(&mut rd).await {
        if lock(&state).down.contains(&id) {
            return;
        }
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
                    (ApiKey::Produce, 3, 12),
                ]);
                frame(key, version, c, &resp)
            }
            ApiKey::Metadata => frame(key, version, c, &metadata(&lock(&state), id)),
            ApiKey::Produce => {
                let req = ProduceRequest::decode(&mut body, version).expect("produce");
                let resp = produce(&mut lock(&state), id, &req);
                frame(key, version, c, &resp)
            }
            ApiKey::Fetch => {
                let req = FetchRequest::decode(&mut body, version).expect("fetch");
                let resp = fetch(&mut lock(&state), id, &req);
                frame(key, version, c, &resp)
            }
            other => panic!("unexpected request {other:?}"),
        };
        if wr.write_all(&reply).await.is_err() {
            return;
        }
    }
}

/// Starts brokers 1 and 2, both reporting broker 1 as leader at `epoch`.
async fn fake_cluster(epoch: i32) -> Shared {
    let state: Shared = Arc::new(Mutex::new(State {
        truth: (1, epoch),
        ..State::default()
    }));
    for id in [1, 2] {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        {
            let mut st = lock(&state);
            st.ports.insert(id, port);
            st.views.insert(id, (1, epoch));
        }
        let s = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, id, s.clone()));
            }
        });
    }
    state
}

fn addr(state: &Shared, id: i32) -> String {
    format!("127.0.0.1:{}", lock(state).ports[&id])
}

fn client(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new(bootstrap);
    c.retry_backoff = Duration::from_millis(10);
    c.retry_backoff_max = Duration::from_millis(50);
    c.reconnect_backoff = Duration::from_millis(10);
    c.reconnect_backoff_max = Duration::from_millis(50);
    c.connection.request_timeout = Duration::from_secs(5);
    c.retries = 50;
    c
}

#[tokio::test]
async fn a_lagging_broker_does_not_move_a_partition_back_to_an_older_leader() {
    let state = fake_cluster(5).await;
    let cluster = Cluster::connect(client(&addr(&state, 2)))
        .await
        .expect("connect");
    let md = cluster.metadata().await;
    assert_eq!(md.leader(TOPIC, 0).map(|b| b.id), Some(1));
    assert_eq!(md.leader_epoch(TOPIC, 0), 5);

    // Broker 2 is elected (epoch 6) and knows it; broker 1 lags, and is
    // unreachable for now.
    {
        let mut st = lock(&state);
        st.truth = (2, 6);
        st.views.insert(2, (2, 6));
        st.down.insert(1);
    }
    let fresh = cluster.refresh(None).await.expect("refresh").0;
    assert_eq!(fresh.leader(TOPIC, 0).map(|b| b.id), Some(2));
    assert_eq!(cluster.metadata().await.leader_epoch(TOPIC, 0), 6);

    // Now only the lagging broker 1 answers: its epoch 5 view is older
    // than the cached one and is not taken.
    {
        let mut st = lock(&state);
        st.down.insert(2);
        st.down.remove(&1);
    }
    let stale = cluster
        .refresh(None)
        .await
        .expect("refresh from broker 1")
        .0;
    let md = cluster.metadata().await;
    assert_eq!(md.leader(TOPIC, 0).map(|b| b.id), Some(2), "{md:?}");
    assert_eq!(md.leader_epoch(TOPIC, 0), 6);
    assert_eq!(
        stale.leader_epoch(TOPIC, 0),
        6,
        "the merged view is returned"
    );

    // A newer epoch from broker 1 is taken (it caught up and leads again).
    lock(&state).views.insert(1, (1, 7));
    cluster.refresh(None).await.expect("refresh");
    let md = cluster.metadata().await;
    assert_eq!(md.leader(TOPIC, 0).map(|b| b.id), Some(1));
    assert_eq!(md.leader_epoch(TOPIC, 0), 7);
}

/// Polls until the consumer returned records up to offset `to` (exclusive);
/// checks they are `r{offset}` in order, no gap, no repeat.
async fn read_until(consumer: &mut Consumer, next: &mut i64, to: i64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while *next < to {
        assert!(Instant::now() < deadline, "stuck at offset {next}");
        for r in consumer
            .poll(Duration::from_millis(100))
            .await
            .expect("poll")
        {
            assert_eq!(r.offset, *next, "offsets in order, no gap, no repeat");
            assert_eq!(r.value.as_deref(), Some(format!("r{next}").as_bytes()));
            *next += 1;
        }
    }
}

#[tokio::test]
async fn the_consumer_fetches_with_its_leader_epoch_and_follows_leader_changes() {
    let state = fake_cluster(5).await;
    let mut config = ConsumerConfig::new(client(&addr(&state, 1)));
    config.enable_auto_commit = false;
    config.fetch_max_wait = Duration::from_millis(20);
    let mut consumer = Consumer::new(config).await.expect("consumer");
    let tp = TopicPartition::new(TOPIC, 0);
    consumer.assign(std::slice::from_ref(&tp)).expect("assign");
    consumer.seek(&tp, 0).expect("seek");
    let mut next = 0;
    read_until(&mut consumer, &mut next, 10).await;
    assert!(
        lock(&state).fetches.iter().all(|f| *f == (1, 5, f.2)),
        "every fetch went to broker 1 with current_leader_epoch 5: {:?}",
        lock(&state).fetches
    );

    // Broker 1 is re-elected at epoch 6 (an epoch bump without a move):
    // its fetches at epoch 5 are fenced until the consumer's metadata
    // catches up.
    {
        let mut st = lock(&state);
        st.truth = (1, 6);
        st.views.insert(1, (1, 6));
        st.views.insert(2, (1, 6));
        st.fetches.clear();
    }
    read_until(&mut consumer, &mut next, 20).await;
    {
        let st = lock(&state);
        let last = st.fetches.last().copied().expect("fetched");
        assert_eq!((last.0, last.1), (1, 6), "{:?}", st.fetches);
        assert!(
            st.fetches.iter().all(|f| f.1 == 5 || f.1 == 6),
            "{:?}",
            st.fetches
        );
    }

    // Broker 2 takes over at epoch 7 and broker 1 dies; the consumer's
    // fetches to broker 1 fail, it refreshes (from broker 2) and reads on
    // from broker 2 at epoch 7, from where it stopped.
    {
        let mut st = lock(&state);
        st.truth = (2, 7);
        st.views.insert(1, (2, 7));
        st.views.insert(2, (2, 7));
        st.down.insert(1);
        st.fetches.clear();
    }
    read_until(&mut consumer, &mut next, 30).await;
    {
        let st = lock(&state);
        let from_2: Vec<_> = st.fetches.iter().filter(|f| f.0 == 2).collect();
        assert!(!from_2.is_empty(), "{:?}", st.fetches);
        assert!(from_2.iter().all(|f| f.1 == 7), "{:?}", st.fetches);
    }

    // Broker 1 comes back lagging (it still thinks it leads at epoch 6)
    // and is the only one answering metadata for a while: the consumer
    // keeps reading from broker 2 at epoch 7.
    {
        let mut st = lock(&state);
        st.down.remove(&1);
        st.views.insert(1, (1, 6));
    }
    consumer
        .cluster()
        .refresh(None)
        .await
        .expect("refresh, maybe from the lagging broker");
    lock(&state).fetches.clear();
    read_until(&mut consumer, &mut next, END).await;
    let st = lock(&state);
    assert!(
        st.fetches.iter().all(|f| f.0 == 2 && f.1 == 7),
        "{:?}",
        st.fetches
    );
}

#[tokio::test]
async fn a_leader_hint_in_a_fetch_error_moves_the_consumer_before_metadata_does() {
    let state = fake_cluster(5).await;
    let mut config = ConsumerConfig::new(client(&addr(&state, 1)));
    config.enable_auto_commit = false;
    config.fetch_max_wait = Duration::from_millis(20);
    let mut consumer = Consumer::new(config).await.expect("consumer");
    let tp = TopicPartition::new(TOPIC, 0);
    consumer.assign(std::slice::from_ref(&tp)).expect("assign");
    consumer.seek(&tp, 0).expect("seek");
    let mut next = 0;
    read_until(&mut consumer, &mut next, 10).await;

    // Broker 2 leads at epoch 6, but every broker's metadata still says
    // broker 1 at epoch 5: only broker 1's hint tells where to go.
    {
        let mut st = lock(&state);
        st.truth = (2, 6);
        st.hints = true;
        st.fetches.clear();
    }
    read_until(&mut consumer, &mut next, 30).await;
    let md = consumer.cluster().metadata().await;
    assert_eq!(md.leader(TOPIC, 0).map(|b| b.id), Some(2));
    assert_eq!(md.leader_epoch(TOPIC, 0), 6);
    let st = lock(&state);
    let last = st.fetches.last().copied().expect("fetched");
    assert_eq!((last.0, last.1), (2, 6), "{:?}", st.fetches);
}

#[tokio::test]
async fn a_leader_hint_in_a_produce_error_moves_the_producer_to_an_unlisted_leader() {
    let state = fake_cluster(5).await;
    // Every metadata answer is stale (broker 1 leads at epoch 5) and does
    // not even list broker 2, the real leader at epoch 6: only broker 1's
    // hint, with broker 2's endpoint, tells the producer where to go.
    {
        let mut st = lock(&state);
        st.truth = (2, 6);
        st.hints = true;
        st.unlisted.insert(2);
    }
    let mut config = ProducerConfig::new(client(&addr(&state, 1)));
    config.enable_idempotence = Some(false);
    config.linger_ms = 0;
    config.delivery_timeout_ms = 10_000;
    config.request_timeout = Duration::from_secs(5);
    let producer = Producer::new(config).await.expect("producer");
    let mut pending = Vec::new();
    for i in 0..5 {
        let record = ProducerRecord::new(TOPIC, format!("p{i}").into_bytes()).partition(0);
        pending.push(producer.send(record).await.expect("send"));
    }
    for d in pending {
        d.await.expect("delivered");
    }
    let md = producer.cluster().metadata().await;
    assert_eq!(md.leader(TOPIC, 0).map(|b| b.id), Some(2));
    assert_eq!(md.leader_epoch(TOPIC, 0), 6);
    let st = lock(&state);
    let values: Vec<&str> = st.produced.iter().map(|(_, v)| v.as_str()).collect();
    assert_eq!(values, ["p0", "p1", "p2", "p3", "p4"]);
    assert!(st.produced.iter().all(|(b, _)| *b == 2));
}
