//! Group coordinator failover, against two fake brokers (ids 1 and 2)
//! whose FindCoordinator answers and OffsetCommit outcomes the test
//! scripts: a commit answered NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE,
//! or whose coordinator connection is lost, forgets the coordinator, looks
//! it up again (FindCoordinator) and is retried there.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proto_kafka::messages::metadata_response::MetadataResponseBroker;
use proto_kafka::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use proto_kafka::messages::{
    ApiKey, BrokerId, FindCoordinatorResponse, MetadataResponse, OffsetCommitRequest,
    OffsetCommitResponse,
};
use proto_kafka::protocol::{Decodable, StrBytes};
use sluice_client::consumer::{Consumer, ConsumerConfig, OffsetAndMetadata};
use sluice_client::{ClientConfig, TopicPartition};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

mod fake;
use fake::frame;

const NOT_COORDINATOR: i16 = 16;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;

#[derive(Default)]
struct State {
    ports: HashMap<i32, u16>,
    /// The broker FindCoordinator names.
    coordinator: i32,
    /// Broker id → the error its OffsetCommit answers (none: success).
    commit_errors: HashMap<i32, i16>,
    /// Broker id → how many more commits get its error before it clears.
    transient: HashMap<i32, usize>,
    /// Brokers that drop every connection at its next request.
    down: HashSet<i32>,
    /// FindCoordinator requests answered.
    lookups: usize,
    /// Commits accepted: (broker, offset).
    commits: Vec<(i32, i64)>,
}

type Shared = Arc<Mutex<State>>;

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
                    (ApiKey::FindCoordinator, 0, 3),
                    (ApiKey::OffsetCommit, 2, 8),
                ]);
                frame(key, version, c, &resp)
            }
            ApiKey::Metadata => {
                let st = lock(&state);
                let mut resp = MetadataResponse::default();
                for b in [1, 2] {
                    let mut mb = MetadataResponseBroker::default();
                    mb.node_id = BrokerId(b);
                    mb.host = StrBytes::from_static_str("127.0.0.1");
                    mb.port = i32::from(st.ports[&b]);
                    resp.brokers.push(mb);
                }
                resp.controller_id = BrokerId(1);
                frame(key, version, c, &resp)
            }
            ApiKey::FindCoordinator => {
                let mut st = lock(&state);
                st.lookups += 1;
                let mut resp = FindCoordinatorResponse::default();
                resp.node_id = BrokerId(st.coordinator);
                resp.host = StrBytes::from_static_str("127.0.0.1");
                resp.port = i32::from(st.ports[&st.coordinator]);
                frame(key, version, c, &resp)
            }
            ApiKey::OffsetCommit => {
                let req = OffsetCommitRequest::decode(&mut body, version).expect("commit");
                let mut st = lock(&state);
                let code = st.commit_errors.get(&id).copied().unwrap_or(0);
                if let Some(n) = st.transient.get_mut(&id) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        st.commit_errors.remove(&id);
                    }
                }
                let mut resp = OffsetCommitResponse::default();
                for t in &req.topics {
                    let mut tr = OffsetCommitResponseTopic::default();
                    tr.name = t.name.clone();
                    for p in &t.partitions {
                        if code == 0 {
                            st.commits.push((id, p.committed_offset));
                        }
                        let mut pr = OffsetCommitResponsePartition::default();
                        pr.partition_index = p.partition_index;
                        pr.error_code = code;
                        tr.partitions.push(pr);
                    }
                    resp.topics.push(tr);
                }
                frame(key, version, c, &resp)
            }
            other => panic!("unexpected request {other:?}"),
        };
        if wr.write_all(&reply).await.is_err() {
            return;
        }
    }
}

async fn fake_cluster() -> Shared {
    let state: Shared = Arc::new(Mutex::new(State {
        coordinator: 1,
        ..State::default()
    }));
    for id in [1, 2] {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        lock(&state).ports.insert(id, port);
        let s = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, id, s.clone()));
            }
        });
    }
    state
}

async fn consumer(state: &Shared) -> Consumer {
    let mut client = ClientConfig::new(&format!("127.0.0.1:{}", lock(state).ports[&1]));
    client.retry_backoff = Duration::from_millis(10);
    client.retry_backoff_max = Duration::from_millis(50);
    client.reconnect_backoff = Duration::from_millis(10);
    client.reconnect_backoff_max = Duration::from_millis(50);
    client.connection.request_timeout = Duration::from_secs(5);
    let mut config = ConsumerConfig::new(client).group("g");
    config.enable_auto_commit = false;
    let mut consumer = Consumer::new(config).await.expect("consumer");
    consumer
        .assign(&[TopicPartition::new("t", 0)])
        .expect("assign");
    consumer
}

async fn commit(consumer: &mut Consumer, offset: i64) -> sluice_client::Result<()> {
    let mut offsets = std::collections::BTreeMap::new();
    offsets.insert(
        TopicPartition::new("t", 0),
        OffsetAndMetadata {
            offset,
            leader_epoch: None,
            metadata: None,
        },
    );
    consumer.commit_offsets(&offsets).await
}

#[tokio::test]
async fn a_commit_follows_the_coordinator_when_it_moves() {
    let state = fake_cluster().await;
    let mut consumer = consumer(&state).await;
    commit(&mut consumer, 10).await.expect("commit at broker 1");
    assert_eq!(lock(&state).commits, vec![(1, 10)]);
    assert_eq!(lock(&state).lookups, 1);

    // The group moves to broker 2; broker 1 answers NOT_COORDINATOR.
    {
        let mut st = lock(&state);
        st.coordinator = 2;
        st.commit_errors.insert(1, NOT_COORDINATOR);
    }
    commit(&mut consumer, 20).await.expect("commit at broker 2");
    assert_eq!(lock(&state).commits, vec![(1, 10), (2, 20)]);
    assert_eq!(lock(&state).lookups, 2, "looked up again once");

    // Broker 2 is not available as coordinator for a while
    // (COORDINATOR_NOT_AVAILABLE to its next 12 commits, more than
    // `retries`): the commit keeps retrying within default.api.timeout.ms,
    // looking the coordinator up again after each error.
    {
        let mut st = lock(&state);
        st.commit_errors.insert(2, COORDINATOR_NOT_AVAILABLE);
        st.transient.insert(2, 12);
    }
    commit(&mut consumer, 30)
        .await
        .expect("commit once available");
    assert_eq!(lock(&state).commits.last(), Some(&(2, 30)));
    assert_eq!(
        lock(&state).lookups,
        2 + 12,
        "looked up again after each error"
    );

    // Broker 2 dies and the group moves back to broker 1: the lost
    // connection forgets the coordinator too.
    {
        let mut st = lock(&state);
        st.down.insert(2);
        st.coordinator = 1;
        st.commit_errors.clear();
    }
    commit(&mut consumer, 40)
        .await
        .expect("commit at broker 1 again");
    assert_eq!(lock(&state).commits.last(), Some(&(1, 40)));
}
