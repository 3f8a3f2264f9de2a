//! The follower side of replication (Kafka's `ReplicaFetcherManager` and
//! `ReplicaFetcherThread`): for every other broker that leads partitions
//! this node is a replica of, one task fetches them with the Fetch API as a
//! replica (its broker id, each partition's current leader epoch), appends
//! what comes back as follower ([`sluice_storage::Log::append_as_follower`]:
//! the leader's offsets, epochs and bytes), and takes the high watermark
//! the leader answers. Each fetch names the epoch of the follower's last
//! batch (`last_fetched_epoch`, Fetch v12+); a leader whose log disagrees
//! answers a diverging epoch instead of records, and the follower
//! truncates where `follower::truncation` says (Kafka's truncation on
//! fetch, KAFKA-10554). When one answer is not enough to find where the
//! logs agree, or the leader says the fetch offset is out of range, the
//! partition is truncated with OffsetForLeaderEpoch round after round
//! (KIP-101/279) before it is fetched again.
//!
//! A partition whose log is offline (its data folder failed) is not
//! fetched. Fetching starts once this process's broker registration is in the
//! metadata log. The tasks follow the metadata image: a task whose leader leads nothing
//! this node follows any more ends; the manager starts one for each new
//! leader. Connections are plain Kafka connections to the leader's
//! listener named like this node's (inter-broker traffic shares the client
//! listener, as `inter.broker.listener.name` defaults to).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;

use proto_kafka::messages::fetch_request::{FetchPartition, FetchTopic};
use proto_kafka::messages::fetch_response::EpochEndOffset;
use proto_kafka::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use proto_kafka::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse, TopicName,
};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;
use sluice_controller::MetadataImage;
use sluice_storage::epoch::LeaderEpochCache;
use sluice_storage::{Log, TopicPartition};
use tokio::sync::watch;

use super::follower;
use super::throttle::Side;
use crate::broker::Broker;
use crate::inter_broker::Conn;

/// Fetch v12: topics by name, `replica_id` at the top level, diverging
/// epochs.
const FETCH_VERSION: i16 = 12;
/// OffsetForLeaderEpoch v3: names the replica, not flexible.
const OFFSET_FOR_LEADER_EPOCH_VERSION: i16 = 3;
/// Rounds of OffsetForLeaderEpoch before giving up for this attempt.
const MAX_TRUNCATION_ROUNDS: usize = 16;

/// Starts and stops the fetcher tasks until `stop` turns true.
pub(crate) async fn run(broker: Weak<Broker>, mut stop: watch::Receiver<bool>) {
    let mut tasks: HashMap<i32, tokio::task::JoinHandle<()>> = HashMap::new();
    let Some(mut followed) = broker.upgrade().map(|b| b.image_followed.subscribe()) else {
        return;
    };
    loop {
        if *stop.borrow() {
            break;
        }
        let Some(b) = broker.upgrade() else { break };
        if b.metadata.quorum().is_some() && b.registered.load(std::sync::atomic::Ordering::Acquire)
        {
            let image = b.image();
            tasks.retain(|_, t| !t.is_finished());
            for leader in leaders_followed(&image, b.node_id) {
                tasks.entry(leader).or_insert_with(|| {
                    tracing::info!(leader, "starting the replica fetcher");
                    tokio::spawn(fetch_from(Weak::clone(&broker), leader, stop.clone()))
                });
            }
        }
        drop(b);
        // A new leader to follow usually comes with a followed image (or
        // the registration); the poll is the fallback.
        tokio::select! {
            _ = stop.changed() => {}
            () = image_followed(&mut followed) => {}
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
    for (_, t) in tasks {
        let _ = t.await;
    }
}

/// The brokers leading partitions this node is a follower of.
fn leaders_followed(image: &MetadataImage, node_id: i32) -> Vec<i32> {
    let mut out: Vec<i32> = image
        .topics()
        .flat_map(|t| t.partitions.values())
        .filter(|p| p.leader >= 0 && p.leader != node_id && p.replicas.contains(&node_id))
        .map(|p| p.leader)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// A partition by topic name and index.
type PartitionKey = (String, i32);

/// One partition this node follows: name, index, the leader epoch.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Followed {
    topic: String,
    partition: i32,
    leader_epoch: i32,
    /// This node is not in the partition's ISR (replication throttles
    /// apply only then).
    out_of_isr: bool,
}

fn followed_from(image: &MetadataImage, node_id: i32, leader: i32) -> Vec<Followed> {
    let mut out = Vec::new();
    for t in image.topics() {
        for (&p, state) in &t.partitions {
            if state.leader == leader && state.replicas.contains(&node_id) {
                out.push(Followed {
                    topic: t.name.clone(),
                    partition: p,
                    leader_epoch: state.leader_epoch,
                    out_of_isr: !state.isr.contains(&node_id),
                });
            }
        }
    }
    out
}

/// Brokers (by advertised port, unique in a test process) whose fetchers
/// are paused (tests: a follower that stops fetching, as a SIGSTOPped one,
/// while its node keeps its quorum vote).
#[cfg(test)]
pub(crate) static PAUSED: std::sync::Mutex<std::collections::BTreeSet<u16>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

fn paused(b: &Broker) -> bool {
    #[cfg(test)]
    {
        PAUSED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&b.advertised.port)
    }
    #[cfg(not(test))]
    {
        let _ = b;
        false
    }
}

/// Fetches from `leader` for as long as it leads partitions this node
/// follows.
async fn fetch_from(broker: Weak<Broker>, leader: i32, stop: watch::Receiver<bool>) {
    let Some(mut followed) = broker.upgrade().map(|b| b.image_followed.subscribe()) else {
        return;
    };
    let mut conn: Option<Conn> = None;
    // The leader epoch each partition is fetched in.
    let mut truncated: BTreeMap<(String, i32), i32> = BTreeMap::new();
    // Partitions to truncate with OffsetForLeaderEpoch before fetching
    // again (a diverging epoch that did not settle it, an offset out of
    // range).
    let mut must_ask: BTreeSet<(String, i32)> = BTreeSet::new();
    // Partitions the leader refused, left out of fetches until then
    // (`replica.fetch.backoff.ms`, Kafka's delayed partitions).
    let mut delayed: HashMap<(String, i32), tokio::time::Instant> = HashMap::new();
    loop {
        if *stop.borrow() {
            return;
        }
        let Some(b) = broker.upgrade() else { return };
        let backoff = Duration::from_millis(b.settings.replica_fetch_backoff_ms.max(10) as u64);
        if paused(&b) {
            drop(b);
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let image = b.image();
        let Some((parts, offline)) = fetchable(&b, &image, leader) else {
            tracing::info!(
                leader,
                "no partitions left to follow; replica fetcher stops"
            );
            return;
        };
        if parts.is_empty() {
            drop(b);
            let wait = if offline > 0 {
                backoff
            } else {
                Duration::from_millis(20)
            };
            tokio::time::sleep(wait).await;
            continue;
        }
        let result = async {
            if conn.is_none() {
                conn = Some(Conn::connect(&b, &image, leader, "fetcher").await?);
            }
            let Some(c) = conn.as_mut() else {
                return Err("no connection".to_string());
            };
            let pending: Vec<&Followed> = parts
                .iter()
                .filter(|p| truncated.get(&(p.topic.clone(), p.partition)) != Some(&p.leader_epoch))
                .collect();
            for p in pending {
                let key = (p.topic.clone(), p.partition);
                // A new leader epoch needs no round trip of its own: the
                // first fetch's `last_fetched_epoch` finds any divergence.
                if !must_ask.contains(&key) || truncate(&b, c, p).await? {
                    must_ask.remove(&key);
                    truncated.insert(key, p.leader_epoch);
                }
            }
            let now = tokio::time::Instant::now();
            delayed.retain(|_, until| *until > now);
            // Out of the ISR and throttled on this follower while its
            // quota is exceeded: left out (Kafka's `shouldFollowerThrottle`).
            let ready: Vec<&Followed> = parts
                .iter()
                .filter(|p| {
                    let key = (p.topic.clone(), p.partition);
                    truncated.get(&key) == Some(&p.leader_epoch) && !delayed.contains_key(&key)
                })
                .filter(|p| {
                    !(p.out_of_isr && b.throttled(&image, Side::Follower, &p.topic, p.partition))
                })
                .collect();
            if ready.is_empty() {
                // Nothing to fetch now (truncation pending, partitions the
                // leader refused, or every partition held back by the
                // follower throttle): back off rather than spin.
                return Ok(Step::BackOff);
            }
            // A fetch of partitions without traffic waits at the leader
            // for up to `replica.fetch.wait.max.ms`; a partition this node
            // starts to follow meanwhile (a new topic, a new leader epoch)
            // must not wait for it. Until its answer starts to arrive, the
            // fetch is abandoned with its connection (the answer would
            // come on it) and sent again; nothing was applied from it.
            // Partitions left out of this fetch (refused, to truncate,
            // throttled) are looked at again after the backoff: the fetch
            // waits no longer than that at the leader.
            let mut max_wait_ms = b.settings.replica_fetch_wait_max_ms.max(0);
            if ready.len() < parts.len() {
                max_wait_ms =
                    max_wait_ms.min(i32::try_from(backoff.as_millis()).unwrap_or(i32::MAX));
            }
            let more = fetchable_added(&b, &mut followed, leader, &parts);
            let Some(resp) = fetch(&b, c, &ready, max_wait_ms, more).await? else {
                return Ok(Step::Refetch);
            };
            let b2 = Arc::clone(&b);
            let (redo, refused) = tokio::task::spawn_blocking(move || apply(&b2, resp))
                .await
                .map_err(|e| e.to_string())??;
            for key in &redo {
                truncated.remove(key);
                must_ask.insert(key.clone());
            }
            let until = tokio::time::Instant::now() + backoff;
            for key in refused {
                delayed.insert(key, until);
            }
            Ok(if redo.is_empty() {
                Step::Fetched
            } else {
                Step::BackOff
            })
        };
        let outcome = tokio::select! {
            r = result => r,
            () = wait_stop(stop.clone()) => return,
        };
        drop(b);
        match outcome {
            Ok(Step::Fetched) => {}
            Ok(Step::Refetch) => {
                tracing::debug!(leader, "the partitions to fetch changed; fetching again");
                conn = None;
            }
            Ok(Step::BackOff) => tokio::time::sleep(backoff.min(Duration::from_millis(100))).await,
            Err(e) => {
                tracing::debug!(leader, error = %e, "replica fetch failed; retrying");
                conn = None;
                tokio::time::sleep(backoff).await;
            }
        }
    }
}

/// What one round of `fetch_from` ended with.
enum Step {
    /// A fetch answered and was applied.
    Fetched,
    /// Nothing could be fetched, or partitions must be truncated first:
    /// wait a little.
    BackOff,
    /// The partitions to fetch changed while a fetch waited: send a new
    /// one now.
    Refetch,
}

/// The partitions led by `leader` that this node follows and can fetch,
/// and how many more it follows in an offline folder; `None` when it
/// follows none of `leader`'s partitions any more.
///
/// A replica a reassignment just added gets its log from the metadata
/// follower; until then it is not fetched. A log in an offline folder is
/// not fetched at all (Kafka removes its fetcher): it cannot append, and
/// its fetch offset would tell the leader it is still caught up, keeping
/// it in (or bringing it back into) the ISR.
fn fetchable(b: &Broker, image: &MetadataImage, leader: i32) -> Option<(Vec<Followed>, usize)> {
    let mut parts = followed_from(image, b.node_id, leader);
    if parts.is_empty() {
        return None;
    }
    let mut offline = 0usize;
    parts.retain(|p| match log_of(b, &p.topic, p.partition) {
        Ok(log) if log.is_offline() => {
            offline += 1;
            false
        }
        Ok(_) => true,
        Err(_) => false,
    });
    Some((parts, offline))
}

/// Resolves once the data folder has followed a metadata image in which
/// this node can fetch a partition of `leader` (or a leader epoch of one)
/// that `fetching` lacks. Partitions that went away do not count: the
/// fetch in flight may as well finish.
async fn fetchable_added(
    b: &Broker,
    followed: &mut watch::Receiver<Option<Arc<MetadataImage>>>,
    leader: i32,
    fetching: &[Followed],
) {
    let key = |p: &Followed| (p.topic.clone(), p.partition, p.leader_epoch);
    let before: BTreeSet<_> = fetching.iter().map(key).collect();
    loop {
        image_followed(followed).await;
        let added = fetchable(b, &b.image(), leader)
            .is_some_and(|(parts, _)| parts.iter().any(|p| !before.contains(&key(p))));
        if added {
            return;
        }
    }
}

/// Resolves when the data folder has followed another metadata image;
/// never once the broker is gone.
async fn image_followed(followed: &mut watch::Receiver<Option<Arc<MetadataImage>>>) {
    if followed.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

async fn wait_stop(mut stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

/// The follower's log of `p`.
fn log_of(b: &Broker, topic: &str, partition: i32) -> Result<Arc<Log>, String> {
    b.logs
        .get(&TopicPartition::new(topic, partition))
        .ok_or_else(|| format!("no log for {topic}-{partition}"))
}

/// Truncates `p`'s log to where it agrees with the leader (KIP-279).
/// `Ok(false)`: the leader cannot answer yet (it does not know the epoch
/// yet, or is not the leader any more); try again later.
async fn truncate(b: &Arc<Broker>, c: &mut Conn, p: &Followed) -> Result<bool, String> {
    let log = log_of(b, &p.topic, p.partition)?;
    for _ in 0..MAX_TRUNCATION_ROUNDS {
        let entries = log.leader_epochs();
        let mut cache = LeaderEpochCache::in_memory();
        for &(e, o) in &entries {
            cache.assign(e, o);
        }
        let Some(epoch) = follower::epoch_to_ask(&cache) else {
            // An empty history has nothing to disagree on.
            return Ok(true);
        };
        let mut req = OffsetForLeaderEpochRequest::default();
        req.replica_id = BrokerId(b.node_id);
        let mut t = OffsetForLeaderTopic::default();
        t.topic = TopicName(StrBytes::from_string(p.topic.clone()));
        let mut part = OffsetForLeaderPartition::default();
        part.partition = p.partition;
        part.current_leader_epoch = p.leader_epoch;
        part.leader_epoch = epoch;
        t.partitions.push(part);
        req.topics.push(t);
        let resp: OffsetForLeaderEpochResponse = c
            .call(
                ApiKey::OffsetForLeaderEpoch,
                OFFSET_FOR_LEADER_EPOCH_VERSION,
                &req,
            )
            .await?;
        let Some(r) = resp
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .find(|r| r.partition == p.partition)
        else {
            return Err("OffsetForLeaderEpoch answered without the partition".into());
        };
        if r.error_code != 0 {
            tracing::debug!(partition = %format!("{}-{}", p.topic, p.partition), error = r.error_code, "OffsetForLeaderEpoch refused");
            return Ok(false);
        }
        let leo = log.log_end_offset();
        let hw = log.high_watermark();
        let t = follower::truncation(&cache, leo, hw, r.leader_epoch, r.end_offset);
        if t.offset < leo {
            tracing::info!(
                partition = %format!("{}-{}", p.topic, p.partition),
                from = leo, to = t.offset, leader_epoch = p.leader_epoch,
                "truncating the follower's log to where it agrees with the leader"
            );
            let l = Arc::clone(&log);
            tokio::task::spawn_blocking(move || l.truncate_to(t.offset))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
        }
        if t.complete {
            return Ok(true);
        }
    }
    Ok(false)
}

/// One Fetch for the `ready` partitions, from each one's log end, waiting
/// at most `max_wait_ms` at the leader for records; `Ok(None)` when
/// `interrupt` came first (see [`Conn::call_unless`]).
async fn fetch(
    b: &Broker,
    c: &mut Conn,
    ready: &[&Followed],
    max_wait_ms: i32,
    interrupt: impl std::future::Future<Output = ()>,
) -> Result<Option<FetchResponse>, String> {
    let s = &b.settings;
    let mut req = FetchRequest::default();
    req.replica_id = BrokerId(b.node_id);
    req.max_wait_ms = max_wait_ms;
    req.min_bytes = 1;
    req.max_bytes = i32::MAX;
    req.isolation_level = 0;
    req.session_id = 0;
    req.session_epoch = -1;
    let mut topics: Vec<FetchTopic> = Vec::new();
    for p in ready {
        let log = log_of(b, &p.topic, p.partition)?;
        let mut fp = FetchPartition::default();
        fp.partition = p.partition;
        fp.current_leader_epoch = p.leader_epoch;
        fp.fetch_offset = log.log_end_offset();
        fp.last_fetched_epoch = log.latest_epoch().unwrap_or(-1);
        fp.log_start_offset = log.log_start_offset();
        fp.partition_max_bytes = s.replica_fetch_max_bytes.max(1);
        match topics.last_mut() {
            Some(t) if t.topic.0.as_str() == p.topic => t.partitions.push(fp),
            _ => {
                let mut t = FetchTopic::default();
                t.topic = TopicName(StrBytes::from_string(p.topic.clone()));
                t.partitions.push(fp);
                topics.push(t);
            }
        }
    }
    req.topics = topics;
    c.call_unless(ApiKey::Fetch, FETCH_VERSION, &req, interrupt)
        .await
}

/// Appends what a Fetch brought and takes the leader's high watermark,
/// or truncates where a diverging epoch says. Returns the partitions to
/// truncate with OffsetForLeaderEpoch (the leader said the fetch offset is
/// out of range, or a diverging epoch did not settle where the logs agree),
/// and the partitions the leader refused (they wait
/// `replica.fetch.backoff.ms`, as Kafka delays partitions with errors).
/// A refused fetch is an error.
fn apply(
    b: &Broker,
    resp: FetchResponse,
) -> Result<(Vec<PartitionKey>, Vec<PartitionKey>), String> {
    let mut redo = Vec::new();
    let mut refused = Vec::new();
    if resp.error_code != 0 {
        return Err(format!("replica fetch refused: error {}", resp.error_code));
    }
    for t in resp.responses {
        let topic = t.topic.0.to_string();
        for pd in t.partitions {
            let name = format!("{topic}-{}", pd.partition_index);
            let Ok(log) = log_of(b, &topic, pd.partition_index) else {
                continue;
            };
            match ResponseError::try_from_code(pd.error_code) {
                None => {}
                Some(ResponseError::OffsetOutOfRange) => {
                    // Behind the leader's log start: start over there.
                    // Ahead of its log end: truncate again.
                    let start = pd.log_start_offset;
                    if start >= 0 && log.log_end_offset() < start {
                        if let Err(e) = log.truncate_fully_and_start_at(start) {
                            tracing::error!(partition = %name, error = %e, "cannot restart the follower's log");
                        }
                    } else {
                        redo.push((topic.clone(), pd.partition_index));
                    }
                    continue;
                }
                Some(e) => {
                    tracing::debug!(partition = %name, error = ?e, "replica fetch refused for a partition");
                    refused.push((topic.clone(), pd.partition_index));
                    continue;
                }
            }
            if pd.diverging_epoch.epoch >= 0 {
                if !truncate_diverging(&log, &name, &pd.diverging_epoch) {
                    redo.push((topic.clone(), pd.partition_index));
                }
                continue;
            }
            if let Some(records) = pd.records.as_ref().filter(|r| !r.is_empty()) {
                let image = b.image();
                let out_of_isr = image
                    .topic(&topic)
                    .and_then(|t| t.partitions.get(&pd.partition_index))
                    .is_some_and(|s| !s.isr.contains(&b.node_id));
                if out_of_isr
                    && b.is_throttled_replica(&image, Side::Follower, &topic, pd.partition_index)
                {
                    b.quota(Side::Follower)
                        .record(records.len() as u64, crate::partition::now_ms());
                }
                let whole = whole_batches(records);
                if !whole.is_empty() {
                    if let Err(e) = log.append_as_follower(whole) {
                        tracing::warn!(partition = %name, error = %e, "follower append failed");
                        if matches!(
                            e,
                            sluice_storage::StorageError::UnexpectedAppendOffset { .. }
                        ) {
                            redo.push((topic.clone(), pd.partition_index));
                        }
                        continue;
                    }
                }
            }
            if pd.high_watermark >= 0 {
                let hw = pd.high_watermark.min(log.log_end_offset());
                if hw > log.high_watermark() {
                    log.set_high_watermark(hw);
                }
            }
        }
    }
    Ok((redo, refused))
}

/// Truncates `log` where the leader's diverging epoch says (Kafka's
/// `truncateOnFetchResponse`). `false`: where the logs agree is not known
/// yet (or the truncation failed); ask with OffsetForLeaderEpoch.
fn truncate_diverging(log: &Log, name: &str, diverging: &EpochEndOffset) -> bool {
    let mut cache = LeaderEpochCache::in_memory();
    for (e, o) in log.leader_epochs() {
        cache.assign(e, o);
    }
    let leo = log.log_end_offset();
    let t = follower::truncation(
        &cache,
        leo,
        log.high_watermark(),
        diverging.epoch,
        diverging.end_offset,
    );
    if t.offset < leo {
        tracing::info!(
            partition = %name, from = leo, to = t.offset,
            diverging_epoch = diverging.epoch, diverging_end = diverging.end_offset,
            "truncating the follower's log at the leader's diverging epoch"
        );
        if let Err(e) = log.truncate_to(t.offset) {
            tracing::error!(partition = %name, error = %e, "cannot truncate the follower's log");
            return false;
        }
    }
    t.complete
}

/// The whole batches at the front of `records` (a fetch may end inside a
/// batch).
fn whole_batches(records: &[u8]) -> &[u8] {
    const LENGTH_END: usize = 12;
    let mut pos = 0usize;
    while records.len() >= pos + LENGTH_END {
        let len = i32::from_be_bytes([
            records[pos + 8],
            records[pos + 9],
            records[pos + 10],
            records[pos + 11],
        ]);
        let Ok(len) = usize::try_from(len) else { break };
        let end = pos + LENGTH_END + len;
        if end > records.len() {
            break;
        }
        pos = end;
    }
    &records[..pos]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_batches_stop_before_a_cut_batch() {
        let mut b = vec![0u8; 8];
        b.extend_from_slice(&4i32.to_be_bytes());
        b.extend_from_slice(&[1, 2, 3, 4]);
        let one = b.len();
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&100i32.to_be_bytes());
        b.extend_from_slice(&[9; 10]);
        assert_eq!(whole_batches(&b).len(), one);
        assert!(whole_batches(&b[..5]).is_empty());
    }
}
