//! Fetch (key 1): read each requested partition from its fetch offset,
//! within `partition_max_bytes` and the response's `max_bytes` (capped by
//! `fetch.max.bytes` for consumers), always returning a whole first batch
//! (KIP-74); long-poll until `min_bytes` are available or `max_wait_ms`
//! passes, woken by appends rather than polling. Consumers read up to the
//! high watermark (read_uncommitted) or the last stable offset
//! (read_committed, with the aborted transactions that overlap the records
//! returned, Kafka's `FetchIsolation.TXN_COMMITTED`), followers to the log
//! end. Every partition answers its last stable offset. A fetch naming a replica id
//! gets follower treatment only from a broker of the cluster that is a
//! replica of the partition (`Broker::is_follower`); otherwise each
//! partition answers Kafka's NOT_LEADER_OR_FOLLOWER (or a leader-epoch
//! error when the fetch names an epoch). A consumer's
//! `current_leader_epoch` is checked too (FENCED_LEADER_EPOCH,
//! UNKNOWN_LEADER_EPOCH). From v12 a fetch's `last_fetched_epoch` is
//! checked against this leader's epoch history: a fetcher whose log
//! diverged gets the diverging epoch and no records (followers truncate
//! on it; Kafka's own consumer does not send the field and validates its
//! position with OffsetForLeaderEpoch instead).
//!
//! Fetch sessions (KIP-227, `crate::fetch_session`) decide which partitions
//! are read (an incremental request reads every partition of its session)
//! and which are answered (only changed ones). From v13 topics are named by
//! id, resolved through the metadata image.
//!
//! Record bytes are not copied: each partition's records go into the
//! response as a region of its segment file, sent with `sendfile(2)` by the
//! connection (small regions are read into memory). The response is encoded
//! with proto-kafka's `SegmentedBuf`, each region standing in as a
//! placeholder slice of one shared zeroed buffer, stored without copying;
//! the encoded segments are then split at the placeholders, which are
//! recognised by their address.

use std::io::IoSlice;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use proto_kafka::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use proto_kafka::messages::{
    BrokerId, FetchRequest, FetchResponse, ProducerId, ResponseHeader, TopicName,
};
use proto_kafka::protocol::{Encodable, SegmentedBuf, StrBytes};
use proto_kafka::ResponseError;
use sluice_controller::MetadataImage;
use sluice_storage::{FileRegion, Log, ReadLimit};

use super::errors::storage_error;
use super::{encode_frame, malformed, Ctx, Reply};
use crate::broker::Broker;
use crate::connection::{Chunk, Response};
use crate::error::Result;
use crate::fetch_session::{
    PartitionKey, PartitionOutcome, PartitionRequest, TopicKey, TOPIC_ID_VERSION,
};
use crate::replication::throttle::Side;

pub(crate) const VERSIONS: (i16, i16) = (4, 18);

const READ_COMMITTED: i8 = 1;

/// First version naming the replica in `replica_state` (KIP-903).
const REPLICA_STATE_VERSION: i16 = 15;

/// Regions shorter than this are read into the response: a separate
/// `sendfile` call is not worth it for a few records.
const SENDFILE_MIN_BYTES: u64 = 4096;

/// Size of the shared placeholder buffer; longer regions are read into
/// memory. Allocated zeroed and never touched, so it costs address space
/// only.
const PLACEHOLDER_BYTES: usize = 64 << 20;

fn placeholder_buffer() -> &'static Bytes {
    static ZEROS: OnceLock<Bytes> = OnceLock::new();
    ZEROS.get_or_init(|| Bytes::from(vec![0u8; PLACEHOLDER_BYTES]))
}

fn is_placeholder(b: &[u8]) -> bool {
    !b.is_empty() && b.as_ptr() == placeholder_buffer().as_ptr()
}

pub(crate) async fn handle(broker: &Arc<Broker>, req: FetchRequest, ctx: &Ctx) -> Reply {
    match fetch(broker, req, ctx).await {
        Ok(response) => Reply::Frame(response),
        Err(e) => Reply::Close(format!("fetch response: {e}")),
    }
}

async fn fetch(broker: &Arc<Broker>, req: FetchRequest, ctx: &Ctx) -> Result<Response> {
    let version = ctx.version;
    let replica_id = if version >= REPLICA_STATE_VERSION {
        req.replica_state.replica_id.0
    } else {
        req.replica_id.0
    };
    // A fetch naming a replica id is a follower's (Kafka's
    // `isFromFollower`); its privileges (reading to the log end, no
    // fetch.max.bytes cap, a privileged session) go only to a broker of
    // the cluster, and each partition must have it as a follower.
    let claims_replica = replica_id >= 0;
    let follower = claims_replica && replica_id != broker.node_id && broker.is_broker(replica_id);
    if claims_replica && !follower {
        tracing::debug!(
            replica_id,
            client_id = %ctx.client_id,
            "fetch from a replica id that is not a follower of this broker"
        );
    }
    let by_id = version >= TOPIC_ID_VERSION;
    let parts = requested_partitions(&req, by_id);
    let forgotten = forgotten_partitions(&req, by_id);
    let cache = &broker.fetch_sessions;
    let fctx = cache.new_context(
        version,
        req.session_id,
        req.session_epoch,
        follower,
        parts,
        &forgotten,
        cache.now_ms(),
    );
    let mut max_bytes = if req.max_bytes > 0 {
        i64::from(req.max_bytes)
    } else {
        i64::MAX
    };
    if !follower {
        let cap = broker.settings.fetch_max_bytes;
        if cap > 0 {
            max_bytes = max_bytes.min(i64::from(cap));
        }
    }
    // Kafka's `FetchIsolation.of`: followers read to the log end, whatever
    // their isolation level.
    let read_committed = !follower && req.isolation_level == READ_COMMITTED;
    let opts = ReadOptions {
        replica_id: claims_replica.then_some(replica_id),
        limit: if follower {
            ReadLimit::LogEnd
        } else if read_committed {
            ReadLimit::LastStable
        } else {
            ReadLimit::HighWatermark
        },
        max_bytes,
        version,
    };
    let min_bytes = i64::from(req.min_bytes.max(0));
    let wait = Duration::from_millis(req.max_wait_ms.max(0) as u64);
    let deadline = tokio::time::Instant::now() + wait;
    let parts = fctx.partitions();
    if follower {
        wait_until_led(broker, parts, deadline).await;
    }
    // Parked on the requested partitions once a read falls short of
    // min_bytes; their appends wake it (the partition layer's wake-ups).
    let waker = Arc::new(tokio::sync::Notify::new());
    let mut parked = false;
    let reads = loop {
        // Enabled before reading, so a wake-up between the read and the
        // wait is not missed.
        let woken = waker.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let reads = read(broker, parts, &opts);
        let satisfied = parts.is_empty() || reads.bytes >= min_bytes || reads.errors;
        if satisfied || tokio::time::Instant::now() >= deadline {
            break reads;
        }
        if !parked {
            park(broker, parts, &waker);
            parked = true;
            // Read again: data may have arrived before the parking.
            continue;
        }
        tokio::select! {
            () = woken => {}
            () = tokio::time::sleep_until(deadline) => break read(broker, parts, &opts),
        }
    };
    let reads = copy_records(reads).await;
    let outcomes: Vec<PartitionOutcome> = reads.parts.iter().map(|p| p.outcome).collect();
    let done = cache.complete(&fctx, &outcomes, cache.now_ms());
    let mut resp = FetchResponse::default();
    resp.error_code = done.error.map_or(0, |e| e.code());
    resp.session_id = done.session_id;
    let mut regions = Vec::new();
    let mut last_topic: Option<&TopicKey> = None;
    for ((p, read), include) in fctx.partitions().iter().zip(reads.parts).zip(done.include) {
        if !include {
            continue;
        }
        if last_topic != Some(&p.key.topic) {
            let mut tr = FetchableTopicResponse::default();
            match &p.key.topic {
                TopicKey::Name(n) => tr.topic = TopicName(StrBytes::from_string(n.clone())),
                TopicKey::Id(id) => tr.topic_id = *id,
            }
            resp.responses.push(tr);
            last_topic = Some(&p.key.topic);
        }
        let mut pd = read.data;
        if let Some(region) = read.region {
            pd.records = Some(placeholder_buffer().slice(0..region.length as usize));
            regions.push(region);
        }
        if ctx.version >= 12 && super::leader_hints::wants_hint(pd.error_code) {
            add_leader_hint(broker, ctx.version, &mut resp, &p.key.topic, &mut pd);
        }
        if let Some(tr) = resp.responses.last_mut() {
            tr.partitions.push(pd);
        }
    }
    encode(ctx, resp, regions)
}

/// How long a follower's fetch waits at most for this node's metadata
/// when it names a partition this node's image does not have: a topic this
/// node has not applied the creation of yet, or one the follower has not
/// seen deleted yet. The other partitions of the fetch wait with it, so it
/// is short.
const UNKNOWN_PARTITION_WAIT: Duration = Duration::from_millis(100);

/// A follower's fetch can reach this node before this node has applied
/// the metadata image that makes it the partition's leader: every node
/// applies the same committed image, each at its own pace (a new topic, a
/// new leader epoch). Refused, the partition would wait out the follower's
/// `replica.fetch.backoff.ms` (a second by default) and hold back the high
/// watermark meanwhile. Instead the fetch waits, within its own
/// `max_wait_ms`, until this node's data folder has followed an image
/// that settles it ([`metadata_pending`]); whatever is still not led then
/// is refused as before.
async fn wait_until_led(
    broker: &Broker,
    parts: &[PartitionRequest],
    deadline: tokio::time::Instant,
) {
    // Nearly every follower fetch finds nothing pending: no subscription.
    if metadata_pending(broker, parts).is_none() {
        return;
    }
    let mut followed = broker.image_followed.subscribe();
    let unknown_until = (tokio::time::Instant::now() + UNKNOWN_PARTITION_WAIT).min(deadline);
    loop {
        let until = match metadata_pending(broker, parts) {
            None => return,
            Some(Pending::Behind) => deadline,
            Some(Pending::Unknown) => unknown_until,
        };
        tokio::select! {
            r = followed.changed() => {
                if r.is_err() {
                    return;
                }
            }
            () = tokio::time::sleep_until(until) => return,
        }
    }
}

/// Why a follower's fetch waits for this node's metadata.
enum Pending {
    /// The fetch names a newer leader epoch than this node's image has, or
    /// the committed image makes this node the leader and its data folder
    /// has not followed that image yet.
    Behind,
    /// A partition this node's image does not have.
    Unknown,
}

fn metadata_pending(broker: &Broker, parts: &[PartitionRequest]) -> Option<Pending> {
    broker.metadata.quorum()?;
    let image = broker.image();
    let followed = broker.image_followed.borrow().clone();
    let mut unknown = false;
    for p in parts {
        let topic = match &p.key.topic {
            TopicKey::Name(n) => image.topic(n),
            TopicKey::Id(id) => image.topic_by_id(id),
        };
        let Some((t, state)) =
            topic.and_then(|t| t.partitions.get(&p.key.partition).map(|s| (t, s)))
        else {
            unknown = true;
            continue;
        };
        // Once the data folder has followed the image, a partition still
        // not led here (its log could not be created, or sits in an
        // offline folder) is not waited for.
        let to_follow = followed.as_ref().is_some_and(|f| {
            f.topic(&t.name)
                .and_then(|ft| ft.partitions.get(&p.key.partition))
                .is_none_or(|fs| {
                    fs.leader != broker.node_id || fs.leader_epoch < state.leader_epoch
                })
        });
        let not_led_yet = state.leader == broker.node_id
            && to_follow
            && broker
                .partitions
                .get(&t.name, p.key.partition)
                .is_none_or(|led| led.leader_epoch() < state.leader_epoch);
        if state.leader_epoch < p.current_leader_epoch || not_led_yet {
            return Some(Pending::Behind);
        }
    }
    unknown.then_some(Pending::Unknown)
}

/// KIP-951: a partition refused as not led here names its leader (v12+),
/// whose endpoint the response carries (v16+).
fn add_leader_hint(
    broker: &Broker,
    version: i16,
    resp: &mut FetchResponse,
    topic: &TopicKey,
    pd: &mut PartitionData,
) {
    use proto_kafka::messages::fetch_response::{LeaderIdAndEpoch, NodeEndpoint};
    let name = match topic {
        TopicKey::Name(n) => Some(n.clone()),
        TopicKey::Id(id) => broker
            .image()
            .topics()
            .find(|t| t.id == *id)
            .map(|t| t.name.clone()),
    };
    let Some(name) = name else { return };
    let ((leader, epoch), endpoint) =
        super::leader_hints::leader_of(broker, &name, pd.partition_index);
    let mut hint = LeaderIdAndEpoch::default();
    hint.leader_id = BrokerId(leader);
    hint.leader_epoch = epoch;
    pd.current_leader = hint;
    if let (true, Some(b)) = (version >= 16, endpoint) {
        if !resp.node_endpoints.iter().any(|e| e.node_id.0 == b.id) {
            let mut e = NodeEndpoint::default();
            e.node_id = BrokerId(b.id);
            e.host = StrBytes::from_string(b.host);
            e.port = b.port;
            e.rack = b.rack.map(StrBytes::from_string);
            resp.node_endpoints.push(e);
        }
    }
}

/// The request's partitions, topics named by id from v13.
fn requested_partitions(req: &FetchRequest, by_id: bool) -> Vec<PartitionRequest> {
    let mut out = Vec::new();
    for t in &req.topics {
        let topic = if by_id {
            TopicKey::Id(t.topic_id)
        } else {
            TopicKey::Name(t.topic.0.to_string())
        };
        for p in &t.partitions {
            out.push(PartitionRequest {
                key: PartitionKey {
                    topic: topic.clone(),
                    partition: p.partition,
                },
                fetch_offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes,
                current_leader_epoch: p.current_leader_epoch,
                last_fetched_epoch: p.last_fetched_epoch,
            });
        }
    }
    out
}

fn forgotten_partitions(req: &FetchRequest, by_id: bool) -> Vec<PartitionKey> {
    let mut out = Vec::new();
    for t in &req.forgotten_topics_data {
        let topic = if by_id {
            TopicKey::Id(t.topic_id)
        } else {
            TopicKey::Name(t.topic.0.to_string())
        };
        for &partition in &t.partitions {
            out.push(PartitionKey {
                topic: topic.clone(),
                partition,
            });
        }
    }
    out
}

struct ReadOptions {
    /// The replica id a follower fetch names.
    replica_id: Option<i32>,
    limit: ReadLimit,
    max_bytes: i64,
    version: i16,
}

/// One partition's answer: its data without records, and the records as
/// a file region still to be sent (or already in `data.records`).
struct PartitionRead {
    data: PartitionData,
    /// Records sent from the segment file (zero-copy).
    region: Option<FileRegion>,
    /// Records to read into `data.records` (a small region, or one too
    /// large for a placeholder): copied by [`copy_records`] off the async
    /// workers.
    copy: Option<FileRegion>,
    outcome: PartitionOutcome,
}

struct Reads {
    parts: Vec<PartitionRead>,
    /// Record bytes found.
    bytes: i64,
    /// Whether any partition had an error.
    errors: bool,
}

/// Registers `waker` with every requested partition this node leads.
fn park(broker: &Broker, parts: &[PartitionRequest], waker: &Arc<tokio::sync::Notify>) {
    let image = broker.image();
    for p in parts {
        let name = match &p.key.topic {
            TopicKey::Name(n) => Some(n.as_str()),
            TopicKey::Id(id) => image.topic_by_id(id).map(|t| t.name.as_str()),
        };
        if let Some(partition) = name.and_then(|n| broker.partition(n, p.key.partition)) {
            partition.park_fetch(waker);
        }
    }
}

/// Reads the records of regions that are copied rather than sent with
/// `sendfile` into the response, on the blocking pool (file reads may wait
/// on the disk). A failed read is that partition's KAFKA_STORAGE_ERROR.
async fn copy_records(mut reads: Reads) -> Reads {
    if reads.parts.iter().all(|p| p.copy.is_none()) {
        return reads;
    }
    crate::blocking::on_pool(move || {
        for p in &mut reads.parts {
            let Some(r) = p.copy.take() else { continue };
            match r.read_to_vec() {
                Ok(v) => p.data.records = Some(Bytes::from(v)),
                Err(e) => {
                    tracing::error!(partition = p.data.partition_index, error = %e, "fetch read failed");
                    p.data.error_code = ResponseError::KafkaStorageError.code();
                    p.outcome.error = true;
                    p.outcome.has_records = false;
                    reads.errors = true;
                }
            }
        }
        reads
    })
    .await
}

/// One pass over the partitions, in order, sharing the response budget.
fn read(broker: &Broker, parts: &[PartitionRequest], opts: &ReadOptions) -> Reads {
    let image = broker.image();
    let mut out = Reads {
        parts: Vec::with_capacity(parts.len()),
        bytes: 0,
        errors: false,
    };
    for p in parts {
        let budget = (opts.max_bytes - out.bytes).max(0);
        let r = read_partition(broker, &image, p, opts, budget, out.bytes == 0);
        out.bytes += r.region.as_ref().map_or(0, |r| r.length as i64)
            + r.copy.as_ref().map_or(0, |r| r.length as i64)
            + r.data.records.as_ref().map_or(0, |b| b.len() as i64);
        out.errors |= r.outcome.error;
        out.parts.push(r);
    }
    out
}

fn read_partition(
    broker: &Broker,
    image: &MetadataImage,
    p: &PartitionRequest,
    opts: &ReadOptions,
    budget: i64,
    first: bool,
) -> PartitionRead {
    let mut pd = PartitionData::default();
    pd.partition_index = p.key.partition;
    pd.high_watermark = -1;
    pd.last_stable_offset = -1;
    pd.log_start_offset = -1;
    pd.preferred_read_replica = BrokerId(-1);
    // Null for read_uncommitted and errors (Kafka's empty Optional).
    pd.aborted_transactions = None;
    pd.records = Some(Bytes::new());
    let mut region = None;
    let mut copy = None;
    let name = match &p.key.topic {
        TopicKey::Name(n) => Ok(n.as_str()),
        TopicKey::Id(id) => image
            .topic_by_id(id)
            .map(|t| t.name.as_str())
            .ok_or(ResponseError::UnknownTopicId),
    };
    let mut throttled = false;
    let mut held_back = false;
    let log = name.and_then(|n| {
        let partition = broker
            .partition(n, p.key.partition)
            .ok_or_else(|| broker.not_led_error(n, p.key.partition))?;
        let log = Arc::clone(partition.log());
        match (
            opts.replica_id,
            image
                .topic(n)
                .and_then(|t| t.partitions.get(&p.key.partition)),
        ) {
            (Some(id), Some(part)) if !broker.is_follower(part, id) => {
                Err(not_a_follower(p.current_leader_epoch, part.leader_epoch))
            }
            (Some(id), Some(part)) => {
                // Kafka's `localLogWithEpochOrThrow` for the follower's
                // epoch, then `updateFollowerFetchState` with its offset
                // (its log end): the high watermark may move.
                let epoch = p.current_leader_epoch;
                if epoch >= 0 && epoch < part.leader_epoch {
                    return Err(ResponseError::FencedLeaderEpoch);
                }
                if epoch > part.leader_epoch {
                    return Err(ResponseError::UnknownLeaderEpoch);
                }
                let diverging = diverging_epoch(&log, part.leader_epoch, p)?;
                // A diverging follower's log end says nothing about what
                // it holds of this leader's log (Kafka skips
                // `updateFollowerFetchState` then).
                if diverging.is_none() {
                    partition.on_follower_fetch(id, p.fetch_offset);
                    // A follower out of the ISR of a partition throttled on
                    // this leader is counted against the leader quota, and
                    // gets nothing while it is exceeded (Kafka's
                    // `shouldLeaderThrottle`).
                    if !part.isr.contains(&id)
                        && broker.is_throttled_replica(image, Side::Leader, n, p.key.partition)
                    {
                        throttled = true;
                        if broker.throttled(image, Side::Leader, n, p.key.partition) {
                            held_back = true;
                        }
                    }
                }
                Ok((log, diverging))
            }
            // A consumer's `current_leader_epoch` (v9+, KIP-320) is
            // checked against this leader's epoch as Kafka's
            // `Partition.localLogWithEpochOrThrow` does: an older one means
            // its metadata is stale, a newer one that this node's is.
            _ => match p.current_leader_epoch {
                e if e >= 0 && e < partition.leader_epoch() => {
                    Err(ResponseError::FencedLeaderEpoch)
                }
                e if e > partition.leader_epoch() => Err(ResponseError::UnknownLeaderEpoch),
                _ => {
                    let diverging = diverging_epoch(&log, partition.leader_epoch(), p)?;
                    Ok((log, diverging))
                }
            },
        }
    });
    match log {
        Err(e) => pd.error_code = e.code(),
        Ok((log, Some((epoch, end_offset)))) => {
            pd.diverging_epoch.epoch = epoch;
            pd.diverging_epoch.end_offset = end_offset;
            pd.high_watermark = log.high_watermark();
            pd.last_stable_offset = log.last_stable_offset();
            if opts.version >= 5 {
                pd.log_start_offset = log.log_start_offset();
            }
        }
        Ok((log, None)) if held_back => {
            pd.high_watermark = log.high_watermark();
            pd.last_stable_offset = log.last_stable_offset();
            if opts.version >= 5 {
                pd.log_start_offset = log.log_start_offset();
            }
        }
        Ok((log, None)) => {
            let max = i64::from(p.max_bytes.max(0)).min(budget);
            match log.read(p.fetch_offset, max as u64, opts.limit, first) {
                Ok(info) => {
                    pd.high_watermark = info.high_watermark;
                    pd.last_stable_offset = info.last_stable_offset;
                    pd.aborted_transactions = info.aborted_transactions.map(|txns| {
                        txns.iter()
                            .map(|t| {
                                let mut a = AbortedTransaction::default();
                                a.producer_id = ProducerId(t.producer_id);
                                a.first_offset = t.first_offset;
                                a
                            })
                            .collect()
                    });
                    if opts.version >= 5 {
                        pd.log_start_offset = info.log_start_offset;
                    }
                    // A region cut inside its first batch holds no whole
                    // record: Kafka (v3+) answers no records then, and the
                    // partition gets its turn as the response's first.
                    let region_found = info
                        .region
                        .filter(|r| first || r.length < max as u64 || !first_batch_cut(r));
                    match region_found {
                        Some(r)
                            if r.length < SENDFILE_MIN_BYTES
                                || r.length > PLACEHOLDER_BYTES as u64 =>
                        {
                            copy = Some(r);
                        }
                        other => region = other,
                    }
                }
                Err(e) => {
                    pd.error_code = storage_error(&e).code.code();
                    pd.high_watermark = log.high_watermark();
                    pd.last_stable_offset = log.last_stable_offset();
                    if opts.version >= 5 {
                        pd.log_start_offset = log.log_start_offset();
                    }
                }
            }
        }
    }
    if throttled {
        let bytes = region.as_ref().map_or(0, |r| r.length) + copy.as_ref().map_or(0, |r| r.length);
        if bytes > 0 {
            broker
                .quota(Side::Leader)
                .record(bytes, crate::partition::now_ms());
        }
    }
    let outcome = PartitionOutcome {
        diverging: pd.diverging_epoch.epoch >= 0,
        has_records: region.is_some()
            || copy.is_some()
            || pd.records.as_ref().is_some_and(|b| !b.is_empty()),
        high_watermark: pd.high_watermark,
        log_start_offset: pd.log_start_offset,
        error: pd.error_code != 0,
    };
    PartitionRead {
        data: pd,
        region,
        copy,
        outcome,
    }
}

/// Kafka's `Partition.readRecords` check of a fetch's `last_fetched_epoch`
/// (v12+, truncation on fetch, KAFKA-10554; any fetcher that sends it):
/// when the fetcher's last epoch ends earlier in this leader's log than
/// the fetch offset, or this log knows only older epochs, the answer is
/// that epoch and where it ends here (the diverging epoch) and no records.
/// An epoch this log cannot place, or an offset below the log start, is
/// OFFSET_OUT_OF_RANGE.
fn diverging_epoch(
    log: &Log,
    leader_epoch: i32,
    p: &PartitionRequest,
) -> Result<Option<(i32, i64)>, ResponseError> {
    if p.last_fetched_epoch < 0 {
        return Ok(None);
    }
    let (epoch, end) = super::offset_for_leader_epoch::leader_end_offset_for(
        log,
        leader_epoch,
        p.last_fetched_epoch,
    );
    if epoch < 0 || end < 0 || p.fetch_offset < log.log_start_offset() {
        return Err(ResponseError::OffsetOutOfRange);
    }
    Ok((epoch < p.last_fetched_epoch || end < p.fetch_offset).then_some((epoch, end)))
}

/// Kafka's answer to a follower fetch from a replica the partition does
/// not have (`Partition.fetchRecords`): the leader epoch is checked first
/// (`localLogWithEpochOrThrow`), then the replica
/// (`followerReplicaOrThrow`): UNKNOWN_LEADER_EPOCH when the fetch names an
/// epoch, NOT_LEADER_OR_FOLLOWER when it does not.
fn not_a_follower(requested_epoch: i32, leader_epoch: i32) -> ResponseError {
    if requested_epoch < 0 {
        ResponseError::NotLeaderOrFollower
    } else if requested_epoch < leader_epoch {
        ResponseError::FencedLeaderEpoch
    } else {
        ResponseError::UnknownLeaderEpoch
    }
}

/// Whether `r` ends inside the batch it starts with (its length field
/// says the batch is longer than the region).
fn first_batch_cut(r: &FileRegion) -> bool {
    use std::os::unix::fs::FileExt;
    const LENGTH_END: usize = 12; // base offset (8) + batch length (4)
    let mut head = [0u8; LENGTH_END];
    match r.file.read_exact_at(&mut head, r.position) {
        Ok(()) => {
            let len = i32::from_be_bytes([head[8], head[9], head[10], head[11]]);
            LENGTH_END as u64 + u64::try_from(len).unwrap_or(0) > r.length
        }
        Err(e) => {
            tracing::warn!(error = %e, "reading a batch header for fetch");
            true
        }
    }
}

/// Encodes the response frame as chunks: bytes, and the file regions
/// behind the placeholders (in response order).
fn encode(ctx: &Ctx, mut resp: FetchResponse, regions: Vec<FileRegion>) -> Result<Response> {
    if regions.is_empty() {
        return respond_copied(ctx, &resp);
    }
    match split_at_placeholders(ctx, &resp, &regions) {
        Ok(chunks) => Ok(Response::from_chunks(chunks)),
        Err(why) => {
            // Never expected; the copy path gives the same bytes.
            tracing::warn!(%why, "zero-copy fetch encoding failed; copying records");
            let mut regions = regions.into_iter();
            for pd in resp
                .responses
                .iter_mut()
                .flat_map(|t| t.partitions.iter_mut())
            {
                if pd.records.as_deref().is_some_and(is_placeholder) {
                    let region = regions
                        .next()
                        .ok_or_else(|| malformed("fetch placeholders outnumber regions"))?;
                    let bytes = region
                        .read_to_vec()
                        .map_err(|e| malformed(format!("reading fetch region: {e}")))?;
                    pd.records = Some(Bytes::from(bytes));
                }
            }
            respond_copied(ctx, &resp)
        }
    }
}

fn respond_copied(ctx: &Ctx, resp: &FetchResponse) -> Result<Response> {
    let buf = encode_frame(
        ctx.correlation_id,
        ctx.api_key.response_header_version(ctx.version),
        |buf| resp.encode(buf, ctx.version),
    )?;
    Ok(Response::from(buf))
}

fn split_at_placeholders(
    ctx: &Ctx,
    resp: &FetchResponse,
    regions: &[FileRegion],
) -> std::result::Result<Vec<Chunk>, String> {
    let mut buf = SegmentedBuf::new();
    buf.put_i32(0);
    ResponseHeader::default()
        .with_correlation_id(ctx.correlation_id)
        .encode(&mut buf, ctx.api_key.response_header_version(ctx.version))
        .map_err(|e| format!("encoding response header: {e}"))?;
    resp.encode(&mut buf, ctx.version)
        .map_err(|e| format!("encoding response: {e}"))?;
    let size = i32::try_from(buf.remaining() - 4).map_err(|_| "response over 2 GiB".to_string())?;
    buf.patch_i32(0, size).map_err(|e| e.to_string())?;
    let mut chunks = Vec::with_capacity(2 * regions.len() + 1);
    let mut pending = BytesMut::new();
    let mut next = regions.iter();
    while buf.has_remaining() {
        let consumed = {
            let mut slices = [IoSlice::new(&[]); 64];
            let n = buf.chunks_vectored(&mut slices);
            if n == 0 {
                return Err("encoded buffer stopped short".into());
            }
            let mut consumed = 0;
            for s in &slices[..n] {
                consumed += s.len();
                if is_placeholder(s) {
                    let region = next.next().ok_or("more placeholders than regions")?;
                    if region.length != s.len() as u64 {
                        return Err("placeholder and region lengths differ".into());
                    }
                    if !pending.is_empty() {
                        chunks.push(Chunk::Bytes(pending.split().freeze()));
                    }
                    chunks.push(Chunk::File(region.clone()));
                } else {
                    pending.extend_from_slice(s);
                }
            }
            consumed
        };
        buf.advance(consumed);
    }
    if next.next().is_some() {
        return Err("fewer placeholders than regions".into());
    }
    if !pending.is_empty() {
        chunks.push(Chunk::Bytes(pending.freeze()));
    }
    Ok(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_that_is_not_a_follower_gets_kafkas_errors() {
        // No epoch in the request (v4-v8, or -1): NOT_LEADER_OR_FOLLOWER.
        assert_eq!(not_a_follower(-1, 3), ResponseError::NotLeaderOrFollower);
        // An older epoch is fenced before the replica is looked at.
        assert_eq!(not_a_follower(2, 3), ResponseError::FencedLeaderEpoch);
        // The current or a newer epoch: the replica is not recognised.
        assert_eq!(not_a_follower(3, 3), ResponseError::UnknownLeaderEpoch);
        assert_eq!(not_a_follower(9, 3), ResponseError::UnknownLeaderEpoch);
    }

    use proto_kafka::messages::fetch_request::{FetchPartition, FetchTopic};
    use proto_kafka::messages::fetch_response::PartitionData;
    use proto_kafka::messages::ApiKey;

    use super::super::test_support::{append, call, open_broker};

    /// A broker with topic `t` (one partition, two records) and its
    /// leader epoch.
    fn broker_with_two_records(dir: &std::path::Path) -> (Arc<Broker>, i32) {
        let broker = open_broker(dir, &[]);
        broker.create_topic("t", 1, 1, &[], false).expect("create");
        append(&broker, "t", 0, 2);
        let epoch = broker.partition("t", 0).expect("led").leader_epoch();
        (broker, epoch)
    }

    /// A consumer's fetch of `t`-0 as `p` asks, at `version`.
    async fn fetch_one(broker: &Arc<Broker>, version: i16, mut p: FetchPartition) -> PartitionData {
        p.partition = 0;
        p.partition_max_bytes = 1 << 20;
        let mut t = FetchTopic::default();
        t.topic = TopicName(StrBytes::from_static_str("t"));
        t.partitions = vec![p];
        let mut req = FetchRequest::default();
        req.replica_id = BrokerId(-1);
        req.max_bytes = 1 << 20;
        req.session_epoch = -1;
        req.topics = vec![t];
        let resp: FetchResponse = call(broker, ApiKey::Fetch, version, &req)
            .await
            .expect("response");
        resp.responses[0].partitions[0].clone()
    }

    #[tokio::test]
    async fn a_consumer_fetch_is_checked_against_the_leader_epoch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (broker, epoch) = broker_with_two_records(dir.path());
        let fetch = |current_leader_epoch: i32| {
            let broker = Arc::clone(&broker);
            async move {
                let mut p = FetchPartition::default();
                p.current_leader_epoch = current_leader_epoch;
                let p = fetch_one(&broker, 12, p).await;
                (p.error_code, p.high_watermark)
            }
        };
        // No epoch (-1) or the leader's: served.
        assert_eq!(fetch(-1).await, (0, 2));
        assert_eq!(fetch(epoch).await, (0, 2));
        // A newer one: this leader's metadata is behind the consumer's.
        assert_eq!(
            fetch(epoch + 1).await,
            (ResponseError::UnknownLeaderEpoch.code(), -1)
        );
        if epoch > 0 {
            assert_eq!(
                fetch(epoch - 1).await,
                (ResponseError::FencedLeaderEpoch.code(), -1)
            );
        }
    }

    #[tokio::test]
    async fn a_fetch_whose_last_epoch_diverged_gets_the_diverging_epoch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (broker, epoch) = broker_with_two_records(dir.path());
        let fetch = |version: i16, fetch_offset: i64, last_fetched_epoch: i32| {
            let mut p = FetchPartition::default();
            p.fetch_offset = fetch_offset;
            p.last_fetched_epoch = last_fetched_epoch;
            fetch_one(&broker, version, p)
        };
        // The fetcher's last epoch is this log's latest and ends past the
        // fetch offset: records.
        let p = fetch(12, 0, epoch).await;
        assert_eq!(p.error_code, 0);
        assert_eq!(p.diverging_epoch.epoch, -1);
        assert!(p.records.is_some_and(|r| !r.is_empty()));
        // The fetcher has records of that epoch past where it ends here:
        // the epoch and its end here, no records, the high watermark.
        let p = fetch(12, 5, epoch).await;
        assert_eq!(p.error_code, 0);
        assert_eq!(
            (p.diverging_epoch.epoch, p.diverging_epoch.end_offset),
            (epoch, 2)
        );
        assert!(p.records.is_none_or(|r| r.is_empty()));
        assert_eq!(p.high_watermark, 2);
        // An epoch this log has never seen cannot be placed.
        let p = fetch(12, 2, epoch + 1).await;
        assert_eq!(p.error_code, ResponseError::OffsetOutOfRange.code());
        // Before v12 there is no last fetched epoch: the offset decides.
        let p = fetch(11, 5, -1).await;
        assert_eq!(p.error_code, ResponseError::OffsetOutOfRange.code());
    }
}

#[cfg(test)]
#[path = "fetch_txn_tests.rs"]
mod txn_tests;
