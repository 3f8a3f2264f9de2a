//! The quorum's storage adapter (log store and state machine on the
//! metadata log) and three controllers on loopback.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use openraft::network::{RPCOption, RaftNetwork};
use openraft::raft::VoteRequest;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{
    BasicNode, CommittedLeaderId, EntryPayload, LogId, Membership, RaftLogReader,
    RaftSnapshotBuilder, SnapshotMeta, StoredMembership, Vote,
};
use sluice_storage::SystemClock;
use tokio::net::TcpListener;
use uuid::Uuid;

use super::log_store::LogStore;
use super::state_machine::StateMachine;
use super::*;
use crate::snapshot::SnapshotId;
use crate::store::METADATA_TOPIC;

fn clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

fn log_id(term: u64, index: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(term, 0), index)
}

fn members(n: u64) -> Membership<NodeId, BasicNode> {
    let nodes: BTreeMap<NodeId, BasicNode> = (1..=n)
        .map(|i| (i, BasicNode::new(format!("127.0.0.1:{}", 9000 + i))))
        .collect();
    Membership::new(vec![nodes.keys().copied().collect()], nodes)
}

fn topic_records(name: &str, partitions: i32) -> Vec<MetadataRecord> {
    let topic_id = Uuid::from_u128(name.bytes().fold(0x9e37_79b9_u128, |h, b| {
        h.wrapping_mul(31).wrapping_add(u128::from(b))
    }));
    let mut v = vec![MetadataRecord::Topic {
        name: name.into(),
        topic_id,
    }];
    v.extend((0..partitions).map(|p| MetadataRecord::Partition {
        partition_id: p,
        topic_id,
        replicas: vec![1],
        isr: vec![1],
        leader: 1,
        leader_epoch: 0,
        partition_epoch: 0,
        removing_replicas: vec![],
        adding_replicas: vec![],
    }));
    v
}

fn normal(term: u64, index: u64, topic: &str) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(MetadataChange {
            records: topic_records(topic, 2),
        }),
    }
}

/// Membership at 0 (term 0), a blank at 1 and three topics at 2..=4 (term 1).
fn first_entries() -> Vec<Entry> {
    vec![
        Entry {
            log_id: log_id(0, 0),
            payload: EntryPayload::Membership(members(3)),
        },
        Entry {
            log_id: log_id(1, 1),
            payload: EntryPayload::Blank,
        },
        normal(1, 2, "a"),
        normal(1, 3, "b"),
        normal(1, 4, "c"),
    ]
}

fn open_log(dir: &Path) -> LogStore {
    LogStore::open(dir, &MetadataLogConfig::default(), clock()).expect("open log store")
}

async fn all_entries(store: &mut LogStore) -> Vec<Entry> {
    store.try_get_log_entries(0..u64::MAX).await.expect("read")
}

fn ids(entries: &[Entry]) -> Vec<(u64, u64)> {
    entries
        .iter()
        .map(|e| (e.log_id.leader_id.term, e.log_id.index))
        .collect()
}

#[tokio::test]
async fn log_store_appends_batches_with_terms_as_epochs_and_reopens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open_log(dir.path());
    store
        .blocking_append(first_entries())
        .await
        .expect("append");
    let log = store.log();
    // Membership, blank: one offset each; topics: 3 records each.
    assert_eq!(log.log_end_offset(), 2 + 3 * 3);
    assert_eq!(log.leader_epochs(), vec![(0, 0), (1, 1)]);
    assert_eq!(store.end_offset_of(2), Some(5));
    store
        .save_vote(&Vote::new_committed(1, 2))
        .await
        .expect("vote");
    store
        .save_committed(Some(log_id(1, 3)))
        .await
        .expect("committed");
    log.close().expect("close");
    drop((store, log));

    let mut store = open_log(dir.path());
    let entries = all_entries(&mut store).await;
    assert_eq!(ids(&entries), vec![(0, 0), (1, 1), (1, 2), (1, 3), (1, 4)]);
    assert_eq!(format!("{:?}", entries), format!("{:?}", first_entries()));
    assert_eq!(
        store.read_vote().await.expect("vote"),
        Some(Vote::new_committed(1, 2))
    );
    assert_eq!(store.read_committed().await.expect("c"), Some(log_id(1, 3)));
    let state = store.get_log_state().await.expect("state");
    assert_eq!(state.last_log_id, Some(log_id(1, 4)));
    assert_eq!(state.last_purged_log_id, None);
}

#[test]
fn a_single_node_metadata_log_is_not_adopted_by_a_quorum() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = crate::MetadataStore::open(dir.path(), MetadataLogConfig::default(), clock())
            .expect("single node");
        store.append(&topic_records("a", 1)).expect("append");
        store.shutdown().expect("shutdown");
    }
    let err =
        LogStore::open(dir.path(), &MetadataLogConfig::default(), clock()).expect_err("refused");
    assert!(err.to_string().contains("single node"), "{err}");
    // A fresh folder becomes the quorum's at once (and reopens).
    let fresh = tempfile::tempdir().expect("tempdir");
    drop(open_log(fresh.path()));
    drop(open_log(fresh.path()));
}

#[tokio::test]
async fn log_store_truncates_a_conflicting_suffix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open_log(dir.path());
    store
        .blocking_append(first_entries())
        .await
        .expect("append");
    // A new leader of term 2 overwrites from index 3.
    store.truncate(log_id(1, 3)).await.expect("truncate");
    assert_eq!(store.log().log_end_offset(), 5);
    store
        .blocking_append(vec![normal(2, 3, "x")])
        .await
        .expect("append after truncation");
    store.log().close().expect("close");
    drop(store);

    let mut store = open_log(dir.path());
    let entries = all_entries(&mut store).await;
    assert_eq!(ids(&entries), vec![(0, 0), (1, 1), (1, 2), (2, 3)]);
    let EntryPayload::Normal(c) = &entries[3].payload else {
        panic!("a normal entry")
    };
    assert_eq!(c.records, topic_records("x", 2));
    assert_eq!(store.log().leader_epochs(), vec![(0, 0), (1, 1), (2, 5)]);
    // Appending out of order is refused.
    assert!(store
        .blocking_append(vec![normal(2, 9, "y")])
        .await
        .is_err());
}

#[tokio::test]
async fn state_machine_snapshots_purge_and_restart_from_the_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open_log(dir.path());
    store
        .blocking_append(first_entries())
        .await
        .expect("append");
    let mut sm = StateMachine::open(store.clone(), clock()).expect("sm");
    let images = sm.apply(first_entries()).await.expect("apply");
    assert_eq!(images.len(), 5);
    assert_eq!(images[2].topics().count(), 1);
    assert_eq!(images[4].topics().count(), 3);
    let snap = sm.build_snapshot().await.expect("snapshot");
    // The snapshot is a design 004 checkpoint named by end offset and term.
    assert_eq!(
        snap.meta.snapshot_id,
        SnapshotId {
            end_offset: 11,
            epoch: 1
        }
        .stem()
    );
    assert_eq!(snap.meta.last_log_id, Some(log_id(1, 4)));
    let dir_meta = dir.path().join(format!("{METADATA_TOPIC}-0"));
    assert!(dir_meta
        .join(
            SnapshotId {
                end_offset: 11,
                epoch: 1
            }
            .file_name()
        )
        .exists());
    // Purge everything the snapshot holds, then one more entry.
    store.purge(log_id(1, 4)).await.expect("purge");
    store
        .blocking_append(vec![normal(1, 5, "d")])
        .await
        .expect("append");
    sm.apply(vec![normal(1, 5, "d")]).await.expect("apply");
    store.log().close().expect("close");
    drop((store, sm));

    let mut store = open_log(dir.path());
    let state = store.get_log_state().await.expect("state");
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 4)));
    assert_eq!(state.last_log_id, Some(log_id(1, 5)));
    assert_eq!(ids(&all_entries(&mut store).await), vec![(1, 5)]);
    assert_eq!(store.end_offset_of(5), Some(14));
    let mut sm = StateMachine::open(store.clone(), clock()).expect("sm");
    // The state machine restarts from the snapshot; openraft re-applies
    // the committed entries after it.
    let (applied, membership) = sm.applied_state().await.expect("applied");
    assert_eq!(applied, Some(log_id(1, 4)));
    assert_eq!(membership.membership(), &members(3));
    assert_eq!(sm.applied().image.topics().count(), 3);
    let current = sm.get_current_snapshot().await.expect("get").expect("some");
    assert_eq!(current.meta.last_log_id, Some(log_id(1, 4)));
}

#[tokio::test]
async fn installing_a_snapshot_past_the_log_end_restarts_the_log_there() {
    // The leader's snapshot.
    let leader_dir = tempfile::tempdir().expect("tempdir");
    let mut leader = open_log(leader_dir.path());
    leader
        .blocking_append(first_entries())
        .await
        .expect("append");
    let mut leader_sm = StateMachine::open(leader.clone(), clock()).expect("sm");
    leader_sm.apply(first_entries()).await.expect("apply");
    let snap = leader_sm.build_snapshot().await.expect("build");
    let bytes = snap.snapshot.into_inner();

    // A follower with only the first two entries.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open_log(dir.path());
    store
        .blocking_append(first_entries().into_iter().take(2))
        .await
        .expect("append");
    let mut sm = StateMachine::open(store.clone(), clock()).expect("sm");
    sm.install_snapshot(&snap.meta, Box::new(Cursor::new(bytes.clone())))
        .await
        .expect("install");
    store.purge(log_id(1, 4)).await.expect("purge past the end");
    assert_eq!(store.log().log_end_offset(), 11);
    assert_eq!(store.log().log_start_offset(), 11);
    assert_eq!(sm.applied().image.topics().count(), 3);
    // The next entry lands at the leader's offset.
    store
        .blocking_append(vec![normal(1, 5, "d")])
        .await
        .expect("append");
    assert_eq!(store.end_offset_of(5), Some(14));
    store.log().close().expect("close");
    drop((store, sm));

    let store = open_log(dir.path());
    assert_eq!(store.log().log_start_offset(), 11);
    let sm = StateMachine::open(store.clone(), clock()).expect("sm");
    assert_eq!(sm.applied().last_applied, Some(log_id(1, 4)));

    // A snapshot whose bytes are not a checkpoint is refused.
    let dir2 = tempfile::tempdir().expect("tempdir");
    let mut sm2 = StateMachine::open(open_log(dir2.path()), clock()).expect("sm");
    let mut broken = bytes;
    broken.truncate(broken.len() - 3);
    let meta = SnapshotMeta {
        last_log_id: Some(log_id(1, 4)),
        last_membership: StoredMembership::new(Some(log_id(0, 0)), members(3)),
        snapshot_id: SnapshotId {
            end_offset: 11,
            epoch: 1,
        }
        .stem(),
    };
    assert!(sm2
        .install_snapshot(&meta, Box::new(Cursor::new(broken)))
        .await
        .is_err());
}

#[test]
fn the_leader_refuses_changes_that_do_not_fit_its_image() {
    let mut image = MetadataImage::default();
    for r in topic_records("a", 1) {
        image.apply(&r);
    }
    let a = image.topic("a").expect("a").id;
    assert!(proposer::check(&image, &topic_records("b", 2)).is_ok());
    assert!(matches!(
        proposer::check(&image, &topic_records("a", 1)),
        Err(ControllerError::TopicExists(_))
    ));
    let gone = Uuid::from_u128(7);
    assert!(proposer::check(&image, &[MetadataRecord::RemoveTopic { topic_id: gone }]).is_err());
    assert!(proposer::check(&image, &[MetadataRecord::RemoveTopic { topic_id: a }]).is_ok());
    // Remove then recreate in one change is fine; removing twice is not.
    let twice = [
        MetadataRecord::RemoveTopic { topic_id: a },
        MetadataRecord::RemoveTopic { topic_id: a },
    ];
    assert!(proposer::check(&image, &twice).is_err());
    let block = |next| MetadataRecord::ProducerIds {
        broker_id: 1,
        broker_epoch: -1,
        next_producer_id: next,
    };
    assert!(proposer::check(&image, &[block(1000)]).is_ok());
    assert!(proposer::check(&image, &[block(1000), block(1000)]).is_err());
    assert!(proposer::check(&image, &[block(1000), block(2000)]).is_ok());
}

// ------------------------------------------------------- three controllers

struct Node {
    id: NodeId,
    dir: tempfile::TempDir,
    quorum: Option<MetadataQuorum>,
}

fn config(id: NodeId, voters: &BTreeMap<NodeId, String>) -> QuorumConfig {
    let mut c = QuorumConfig::new(id, voters.clone());
    c.election_timeout_ms = 300;
    c.heartbeat_interval_ms = 60;
    c.request_timeout_ms = 5000;
    c.snapshot_every_entries = 4;
    c.entries_kept_after_snapshot = 0;
    c
}

async fn start(id: NodeId, dir: &Path, voters: &BTreeMap<NodeId, String>) -> MetadataQuorum {
    let listener = TcpListener::bind(&voters[&id]).await.expect("bind");
    MetadataQuorum::start(dir, config(id, voters), listener, clock())
        .await
        .expect("start")
}

/// Three controllers on free loopback ports (bound, noted, released),
/// each in its own folder: the voters and the running nodes.
async fn start_three() -> (BTreeMap<NodeId, String>, Vec<Node>) {
    let mut voters = BTreeMap::new();
    for id in 1..=3u64 {
        voters.insert(id, format!("127.0.0.1:{}", sluice_testkit::free_port()));
    }
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        let dir = tempfile::tempdir().expect("tempdir");
        let quorum = start(id, dir.path(), &voters).await;
        nodes.push(Node {
            id,
            dir,
            quorum: Some(quorum),
        });
    }
    (voters, nodes)
}

async fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..400 {
        if let Some(v) = f() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}")
}

fn topic_names(q: &MetadataQuorum) -> Vec<String> {
    q.image().topics().map(|t| t.name.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_controllers_elect_replicate_fail_over_and_catch_up() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let (voters, mut nodes) = start_three().await;
    let q = |nodes: &[Node], id: NodeId| -> usize {
        nodes.iter().position(|n| n.id == id).expect("node")
    };
    let leader = nodes[0]
        .quorum
        .as_ref()
        .expect("up")
        .wait_for_leader(Duration::from_secs(10))
        .await
        .expect("a leader");
    for n in &nodes {
        let l = eventually("every node knows the leader", || {
            n.quorum.as_ref().and_then(MetadataQuorum::leader)
        })
        .await;
        assert_eq!(l, leader);
    }

    // A topic created through a follower (forwarded to the leader)
    // appears in every image.
    let follower = nodes.iter().find(|n| n.id != leader).expect("a follower");
    let image = follower
        .quorum
        .as_ref()
        .expect("up")
        .write(topic_records("t1", 3))
        .await
        .expect("write through a follower");
    assert!(
        image.topic("t1").is_some(),
        "the writer's image has it at once"
    );
    for n in &nodes {
        let quorum = n.quorum.as_ref().expect("up");
        eventually("t1 everywhere", || quorum.image().topic("t1").map(|_| ())).await;
        assert_eq!(
            quorum.image().topic("t1").map(|t| t.partitions.len()),
            Some(3)
        );
    }
    // The leader checks changes against its image: the same name again,
    // through any node, is refused.
    for n in &nodes {
        let again = n
            .quorum
            .as_ref()
            .expect("up")
            .write(topic_records("t1", 1))
            .await;
        assert!(
            matches!(again, Err(ControllerError::TopicExists(_))),
            "node {}: {again:?}",
            n.id
        );
    }
    let first_term = nodes[0].quorum.as_ref().expect("up").term();

    // The leader stops; another one is elected in a later term.
    let li = q(&nodes, leader);
    nodes[li]
        .quorum
        .take()
        .expect("up")
        .shutdown()
        .await
        .expect("shutdown");
    let survivor = nodes
        .iter()
        .find(|n| n.quorum.is_some())
        .expect("a survivor");
    let new_leader = eventually("a new leader", || {
        survivor
            .quorum
            .as_ref()
            .and_then(MetadataQuorum::leader)
            .filter(|&l| l != leader)
    })
    .await;
    assert_ne!(new_leader, leader);
    assert!(survivor.quorum.as_ref().expect("up").term() > first_term);

    // Committed records survived; more are written, enough for snapshots
    // and purges on the two running nodes (a snapshot every 4 entries).
    for i in 2..=10 {
        survivor
            .quorum
            .as_ref()
            .expect("up")
            .write(topic_records(&format!("t{i}"), 1))
            .await
            .expect("write with two of three voters");
    }
    let nl = &nodes[q(&nodes, new_leader)];
    let nlq = nl.quorum.as_ref().expect("up");
    let (snapshot, log_start) = eventually("a snapshot and a purged log", || {
        let (s, start) = nlq.snapshot_state();
        s.filter(|_| start > 0).map(|s| (s, start))
    })
    .await;
    assert!(log_start > 0, "the leader's log was compacted ({snapshot})");
    for n in nodes.iter().filter(|n| n.quorum.is_some()) {
        let quorum = n.quorum.as_ref().expect("up");
        eventually("all topics on the survivors", || {
            (quorum.image().topics().count() == 10).then_some(())
        })
        .await;
    }

    // The old leader restarts, behind the leader's log start: it catches
    // up from the snapshot and then the log.
    let oi = q(&nodes, leader);
    let restarted = start(leader, nodes[oi].dir.path(), &voters).await;
    assert_eq!(
        restarted.snapshot_state(),
        (None, 0),
        "it stopped before any snapshot"
    );
    eventually("the restarted node catches up", || {
        (restarted.image().topics().count() == 10).then_some(())
    })
    .await;
    // It got there through the leader's snapshot: its log now starts past 0.
    let (installed, start_offset) = restarted.snapshot_state();
    assert!(
        installed.is_some() && start_offset > 0,
        "{installed:?} {start_offset}"
    );
    let mut names = topic_names(&restarted);
    names.sort();
    let mut expected = topic_names(nlq);
    expected.sort();
    assert_eq!(names, expected);
    nodes[oi].quorum = Some(restarted);

    // Writes through the restarted node work too.
    nodes[oi]
        .quorum
        .as_ref()
        .expect("up")
        .write(topic_records("t11", 1))
        .await
        .expect("write");
    for n in &nodes {
        let quorum = n.quorum.as_ref().expect("up");
        eventually("t11 everywhere", || quorum.image().topic("t11").map(|_| ())).await;
    }
    for n in &mut nodes {
        if let Some(quorum) = n.quorum.take() {
            quorum.shutdown().await.expect("shutdown");
        }
    }
}

/// Starts observer `id` of the quorum of `voters` (a broker-only node).
async fn start_observer(
    id: NodeId,
    dir: &Path,
    voters: &BTreeMap<NodeId, String>,
) -> MetadataQuorum {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let mut c = config(id, voters);
    c.observer_host = Some("127.0.0.1".into());
    MetadataQuorum::start(dir, c, listener, clock())
        .await
        .expect("start an observer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_observer_joins_as_a_learner_follows_the_log_and_forwards_its_writes() {
    let mut voters = BTreeMap::new();
    for id in 1..=3u64 {
        voters.insert(id, format!("127.0.0.1:{}", sluice_testkit::free_port()));
    }
    let dirs: Vec<_> = (0..5)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        nodes.push(start(id, dirs[id as usize - 1].path(), &voters).await);
    }
    // A voter's id is refused as an observer before anything starts.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let mut bad = config(2, &voters);
    bad.observer_host = Some("127.0.0.1".into());
    assert!(
        MetadataQuorum::start(dirs[4].path(), bad, listener, clock())
            .await
            .is_err()
    );

    let observer = start_observer(4, dirs[3].path(), &voters).await;
    assert!(observer.is_observer() && !nodes[0].is_observer());
    let leader = eventually("the observer knows the leader", || observer.leader()).await;
    assert!(voters.contains_key(&leader));
    // A write through the observer is forwarded to the leader and seen by
    // every voter and by the observer.
    let image = observer
        .write(topic_records("t1", 2))
        .await
        .expect("write through the observer");
    assert!(image.topic("t1").is_some());
    for q in &nodes {
        eventually("t1 on the voters", || q.image().topic("t1").map(|_| ())).await;
    }
    // The leader describes it as an observer, not a voter, caught up.
    let mut described = None;
    for _ in 0..400 {
        if let Ok(d) = nodes[0].describe().await {
            if d.observers
                .iter()
                .any(|o| o.replica_id == 4 && o.log_end_offset == d.high_watermark)
            {
                described = Some(d);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let d = described.expect("the observer described and caught up");
    assert_eq!(
        d.voters.iter().map(|v| v.replica_id).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    // A Join naming a voter's id is refused by the leader.
    let mut peer = network::Peer::new(leader, voters[&leader].clone());
    let refused = peer
        .join(1, "127.0.0.1:1", Duration::from_secs(5))
        .await
        .expect_err("a voter's id");
    assert!(refused.to_string().contains("is a voter"), "{refused}");
    // Restarted on another port, the observer has its address replaced
    // and keeps receiving the log.
    observer.shutdown().await.expect("stop");
    drop(observer);
    nodes[0].write(topic_records("t2", 1)).await.expect("t2");
    let observer = start_observer(4, dirs[3].path(), &voters).await;
    eventually("t2 reaches the restarted observer", || {
        observer.image().topic("t2").map(|_| ())
    })
    .await;
    assert!(observer.image().topic("t1").is_some());
    observer.shutdown().await.expect("stop");
    for q in nodes {
        q.shutdown().await.expect("stop");
    }
}

/// A voter that stops hearing the leader but can still call out (its
/// inbound links cut) asks for votes in a higher term with a log as long
/// as the leader's: the leader, which hears the other voter, refuses, even
/// after leading for longer than openraft's leader lease, and stays leader
/// in its term.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_that_hears_a_majority_refuses_a_disruptive_candidate() {
    let (voters, mut nodes) = start_three().await;
    let leader = nodes[0]
        .quorum
        .as_ref()
        .expect("up")
        .wait_for_leader(Duration::from_secs(10))
        .await
        .expect("a leader");
    let quorum = nodes
        .iter()
        .find(|n| n.id == leader)
        .and_then(|n| n.quorum.as_ref())
        .expect("the leader node");
    // Past the lease openraft keeps after an election (its election
    // timeout's maximum, 600 ms here).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let term = quorum.raft.metrics().borrow().current_term;
    let candidate = voters
        .keys()
        .copied()
        .find(|&id| id != leader)
        .expect("a follower");
    let mut peer = Peer::new(leader, voters[&leader].clone());
    let answer = peer
        .vote(
            VoteRequest::new(Vote::new(term + 1, candidate), quorum.log.last_log_id()),
            RPCOption::new(Duration::from_secs(2)),
        )
        .await
        .expect("an answer");
    assert!(!answer.vote_granted, "{answer:?}");
    assert_eq!(answer.last_log_id, quorum.log.last_log_id());
    let m = quorum.raft.metrics().borrow().clone();
    assert_eq!(
        (m.state, m.current_term),
        (openraft::ServerState::Leader, term)
    );
    for n in &mut nodes {
        if let Some(q) = n.quorum.take() {
            q.shutdown().await.expect("shutdown");
        }
    }
}
