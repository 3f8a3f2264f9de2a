//! Fetch over TCP against a running server: incremental fetch sessions
//! (KIP-227), topic ids (v13+), long polling, size limits, and the
//! zero-copy (`sendfile`) response matching what the encoder produces.

use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use proto_kafka::messages::create_topics_request::CreatableTopic;
use proto_kafka::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use proto_kafka::messages::fetch_response::PartitionData;
use proto_kafka::messages::metadata_request::MetadataRequestTopic;
use proto_kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use proto_kafka::messages::{
    ApiKey, BrokerId, CreateTopicsRequest, CreateTopicsResponse, FetchRequest, FetchResponse,
    MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse, ResponseHeader, TopicName,
};
use proto_kafka::protocol::{Encodable, StrBytes};
use sluice_protocol::record::{BatchBuilder, BatchIter, Compression, Record};
use uuid::Uuid;

const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const UNKNOWN_LEADER_EPOCH: i16 = 75;
const INVALID_FETCH_SESSION_EPOCH: i16 = 71;
const UNKNOWN_TOPIC_ID: i16 = 100;
const FETCH_SESSION_TOPIC_ID_ERROR: i16 = 106;

mod common;
use common::{decode_response, start, Client};

impl Client {
    async fn create_topic(&mut self, name: &str, partitions: i32) -> Uuid {
        let mut t = CreatableTopic::default();
        t.name = topic_name(name);
        t.num_partitions = partitions;
        t.replication_factor = 1;
        let mut req = CreateTopicsRequest::default();
        req.topics = vec![t];
        req.timeout_ms = 10_000;
        let resp: CreateTopicsResponse = self.call(ApiKey::CreateTopics, 7, &req).await;
        assert_eq!(resp.topics[0].error_code, 0, "create {name}");
        resp.topics[0].topic_id
    }

    async fn topic_id(&mut self, name: &str) -> Uuid {
        let mut t = MetadataRequestTopic::default();
        t.name = Some(topic_name(name));
        let mut req = MetadataRequest::default();
        req.topics = Some(vec![t]);
        let resp: MetadataResponse = self.call(ApiKey::Metadata, 12, &req).await;
        assert_eq!(resp.topics[0].error_code, 0);
        resp.topics[0].topic_id
    }

    /// Produces `count` records of `value_len` bytes as one batch; returns
    /// the base offset.
    async fn produce(
        &mut self,
        topic: &str,
        partition: i32,
        count: usize,
        value_len: usize,
    ) -> i64 {
        // Current timestamps: old ones would roll a segment per batch.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as i64;
        let mut b = BatchBuilder::new(Compression::None, now);
        for i in 0..count {
            b.push(Record::new(
                Some(format!("key-{i}").into_bytes()),
                Some(value(partition, i, value_len)),
                now,
            ));
        }
        let mut pd = PartitionProduceData::default();
        pd.index = partition;
        pd.records = Some(Bytes::from(b.build(0).expect("batch")));
        let mut td = TopicProduceData::default();
        td.name = topic_name(topic);
        td.partition_data = vec![pd];
        let mut req = ProduceRequest::default();
        req.acks = -1;
        req.timeout_ms = 10_000;
        req.topic_data = vec![td];
        let resp: ProduceResponse = self.call(ApiKey::Produce, 9, &req).await;
        let pr = &resp.responses[0].partition_responses[0];
        assert_eq!(pr.error_code, 0, "produce to {topic}-{partition}");
        pr.base_offset
    }

    async fn fetch(&mut self, version: i16, req: &FetchRequest) -> FetchResponse {
        self.call(ApiKey::Fetch, version, req).await
    }
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// Deterministic record values, so fetched bytes can be checked.
fn value(partition: i32, i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (j as u32 ^ (i as u32).wrapping_mul(31) ^ (partition as u32 * 7)) as u8)
        .collect()
}

/// What to fetch from one partition.
#[derive(Clone, Copy)]
struct Want {
    partition: i32,
    offset: i64,
    max: i32,
}

fn want(partition: i32, offset: i64) -> Want {
    Want {
        partition,
        offset,
        max: 1 << 20,
    }
}

/// A fetch request for one topic (by name before v13, by id after).
struct Fetch {
    version: i16,
    topic: String,
    topic_id: Uuid,
    session_id: i32,
    epoch: i32,
    parts: Vec<Want>,
    forget: Vec<i32>,
    max_wait_ms: i32,
    min_bytes: i32,
    max_bytes: i32,
    replica_id: i32,
    /// current_leader_epoch of every partition (v9+).
    leader_epoch: i32,
}

impl Fetch {
    fn new(version: i16, topic: &str, topic_id: Uuid) -> Self {
        Self {
            version,
            topic: topic.to_string(),
            topic_id,
            session_id: 0,
            epoch: 0,
            parts: Vec::new(),
            forget: Vec::new(),
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes: 50 << 20,
            replica_id: -1,
            leader_epoch: -1,
        }
    }

    fn session(mut self, id: i32, epoch: i32) -> Self {
        self.session_id = id;
        self.epoch = epoch;
        self
    }

    fn parts(mut self, parts: &[Want]) -> Self {
        self.parts = parts.to_vec();
        self
    }

    fn build(&self) -> FetchRequest {
        let mut req = FetchRequest::default();
        if self.version >= 15 {
            req.replica_state.replica_id = BrokerId(self.replica_id);
        } else {
            req.replica_id = BrokerId(self.replica_id);
        }
        req.max_wait_ms = self.max_wait_ms;
        req.min_bytes = self.min_bytes;
        req.max_bytes = self.max_bytes;
        req.session_id = self.session_id;
        req.session_epoch = self.epoch;
        let by_id = self.version >= 13;
        if !self.parts.is_empty() {
            let mut t = FetchTopic::default();
            if by_id {
                t.topic_id = self.topic_id;
            } else {
                t.topic = topic_name(&self.topic);
            }
            t.partitions = self
                .parts
                .iter()
                .map(|w| {
                    let mut p = FetchPartition::default();
                    p.partition = w.partition;
                    p.fetch_offset = w.offset;
                    p.partition_max_bytes = w.max;
                    p.current_leader_epoch = self.leader_epoch;
                    p
                })
                .collect();
            req.topics = vec![t];
        }
        if !self.forget.is_empty() {
            let mut f = ForgottenTopic::default();
            if by_id {
                f.topic_id = self.topic_id;
            } else {
                f.topic = topic_name(&self.topic);
            }
            f.partitions = self.forget.clone();
            req.forgotten_topics_data = vec![f];
        }
        req
    }
}

/// `(partition, data)` of every partition in the response, in order.
fn partitions(resp: &FetchResponse) -> Vec<&PartitionData> {
    resp.responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .collect()
}

fn partition_ids(resp: &FetchResponse) -> Vec<i32> {
    partitions(resp).iter().map(|p| p.partition_index).collect()
}

fn records_len(p: &PartitionData) -> usize {
    p.records.as_ref().map_or(0, |r| r.len())
}

/// `(offset, value)` of every record in whole batches of `bytes`.
fn decode_records(bytes: &[u8]) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    for b in BatchIter::new(bytes) {
        let (_, header, batch) = b.expect("batch");
        let decoded =
            sluice_protocol::record::codec::decode_batch(batch, 64 << 20).expect("decode batch");
        assert_eq!(decoded.header.base_offset, header.base_offset);
        for r in decoded.records {
            out.push((r.record.offset, r.record.value.unwrap_or_default()));
        }
    }
    out
}

#[tokio::test]
async fn full_and_incremental_sessions() {
    let server = start(&[]).await;
    let mut c = server.client().await;
    c.create_topic("s", 3).await;
    c.produce("s", 0, 2, 10).await;
    c.produce("s", 1, 3, 10).await;

    // A full request creates a session and answers every partition.
    let full = Fetch::new(12, "s", Uuid::nil()).parts(&[want(0, 0), want(1, 0), want(2, 0)]);
    let resp = c.fetch(12, &full.build()).await;
    assert_eq!(resp.error_code, 0);
    let id = resp.session_id;
    assert!(id > 0, "no session created");
    assert_eq!(partition_ids(&resp), vec![0, 1, 2]);
    let ps = partitions(&resp);
    assert_eq!(
        decode_records(ps[0].records.as_deref().unwrap_or_default()).len(),
        2
    );
    assert_eq!(
        decode_records(ps[1].records.as_deref().unwrap_or_default()).len(),
        3
    );
    assert_eq!(records_len(ps[2]), 0);
    assert_eq!(
        [
            ps[0].high_watermark,
            ps[1].high_watermark,
            ps[2].high_watermark
        ],
        [2, 3, 0]
    );

    // Incremental with the new positions and nothing new: empty answer.
    let inc = Fetch::new(12, "s", Uuid::nil())
        .session(id, 1)
        .parts(&[want(0, 2), want(1, 3)]);
    let resp = c.fetch(12, &inc.build()).await;
    assert_eq!((resp.error_code, resp.session_id), (0, id));
    assert!(resp.responses.is_empty(), "unchanged partitions answered");

    // New data shows up only for the partition that has it.
    c.produce("s", 1, 1, 10).await;
    let resp = c
        .fetch(12, &Fetch::new(12, "s", Uuid::nil()).session(id, 2).build())
        .await;
    assert_eq!((resp.error_code, resp.session_id), (0, id));
    assert_eq!(partition_ids(&resp), vec![1]);
    let p1 = partitions(&resp)[0];
    assert_eq!(p1.high_watermark, 4);
    let recs = decode_records(p1.records.as_deref().unwrap_or_default());
    assert_eq!(recs.first().map(|r| r.0), Some(3));

    // Forget partition 0: new data there is no longer answered; partition
    // 2 (still at offset 0 in the session) is.
    c.produce("s", 0, 1, 10).await;
    c.produce("s", 2, 1, 10).await;
    let mut inc = Fetch::new(12, "s", Uuid::nil())
        .session(id, 3)
        .parts(&[want(1, 4)]);
    inc.forget = vec![0];
    let resp = c.fetch(12, &inc.build()).await;
    assert_eq!(resp.error_code, 0);
    assert_eq!(partition_ids(&resp), vec![2]);
    assert_eq!(partitions(&resp)[0].high_watermark, 1);

    // A wrong epoch: error, no partitions, and the session stays usable.
    let resp = c
        .fetch(12, &Fetch::new(12, "s", Uuid::nil()).session(id, 9).build())
        .await;
    assert_eq!(resp.error_code, INVALID_FETCH_SESSION_EPOCH);
    assert_eq!(resp.session_id, 0);
    assert!(resp.responses.is_empty());
    let resp = c
        .fetch(
            12,
            &Fetch::new(12, "s", Uuid::nil())
                .session(id, 4)
                .parts(&[want(2, 1)])
                .build(),
        )
        .await;
    assert_eq!(resp.error_code, 0);
    assert!(resp.responses.is_empty(), "{:?}", partition_ids(&resp));

    // An unknown session id.
    let other = if id == i32::MAX { 1 } else { id + 1 };
    let resp = c
        .fetch(
            12,
            &Fetch::new(12, "s", Uuid::nil()).session(other, 1).build(),
        )
        .await;
    assert_eq!(resp.error_code, FETCH_SESSION_ID_NOT_FOUND);
    assert_eq!(resp.session_id, 0);

    // A v13 request cannot continue a session that names topics.
    let topic_id = c.topic_id("s").await;
    let resp = c
        .fetch(13, &Fetch::new(13, "s", topic_id).session(id, 5).build())
        .await;
    assert_eq!(resp.error_code, FETCH_SESSION_TOPIC_ID_ERROR);

    // FINAL_EPOCH closes the session and answers without one.
    let close = Fetch::new(12, "s", Uuid::nil())
        .session(id, -1)
        .parts(&[want(0, 0)]);
    let resp = c.fetch(12, &close.build()).await;
    assert_eq!((resp.error_code, resp.session_id), (0, 0));
    assert_eq!(partition_ids(&resp), vec![0]);
    let resp = c
        .fetch(12, &Fetch::new(12, "s", Uuid::nil()).session(id, 5).build())
        .await;
    assert_eq!(resp.error_code, FETCH_SESSION_ID_NOT_FOUND);

    // A full request naming a session replaces it with a new one.
    let resp = c.fetch(12, &full.build()).await;
    let first = resp.session_id;
    let resp = c
        .fetch(
            12,
            &Fetch::new(12, "s", Uuid::nil())
                .session(first, 0)
                .parts(&[want(0, 0)])
                .build(),
        )
        .await;
    assert!(resp.session_id > 0 && resp.session_id != first);
    let resp = c
        .fetch(
            12,
            &Fetch::new(12, "s", Uuid::nil()).session(first, 1).build(),
        )
        .await;
    assert_eq!(resp.error_code, FETCH_SESSION_ID_NOT_FOUND);

    // Sessionless (epoch -1, no id) and pre-session versions.
    let resp = c
        .fetch(
            12,
            &Fetch::new(12, "s", Uuid::nil())
                .session(0, -1)
                .parts(&[want(0, 0)])
                .build(),
        )
        .await;
    assert_eq!(resp.session_id, 0);
    let resp = c
        .fetch(
            4,
            &Fetch::new(4, "s", Uuid::nil()).parts(&[want(0, 0)]).build(),
        )
        .await;
    assert_eq!(
        decode_records(partitions(&resp)[0].records.as_deref().unwrap_or_default()).len(),
        3
    );
    server.stop().await;
}

#[tokio::test]
async fn topic_ids_from_v13() {
    let server = start(&[]).await;
    let mut c = server.client().await;
    for version in [13, 15, 16, 17, 18] {
        let topic = format!("ids-{version}");
        let topic = topic.as_str();
        let created = c.create_topic(topic, 2).await;
        let topic_id = c.topic_id(topic).await;
        assert_eq!(created, topic_id);
        c.produce(topic, 0, 4, 100).await;
        let full = Fetch::new(version, topic, topic_id).parts(&[want(0, 0), want(1, 0)]);
        let resp = c.fetch(version, &full.build()).await;
        assert_eq!(resp.error_code, 0, "v{version}");
        assert!(resp.session_id > 0, "v{version}");
        assert_eq!(resp.responses.len(), 1);
        assert_eq!(resp.responses[0].topic_id, topic_id);
        let recs = decode_records(partitions(&resp)[0].records.as_deref().unwrap_or_default());
        assert_eq!(recs.len(), 4, "v{version}");
        assert_eq!(recs[2].1, value(0, 2, 100));
        // Incremental by id: forget partition 1, new data on 0 answered.
        let id = resp.session_id;
        c.produce(topic, 0, 1, 100).await;
        let mut inc = Fetch::new(version, topic, topic_id)
            .session(id, 1)
            .parts(&[want(0, 4)]);
        inc.forget = vec![1];
        let resp = c.fetch(version, &inc.build()).await;
        assert_eq!((resp.error_code, resp.session_id), (0, id));
        assert_eq!(partition_ids(&resp), vec![0]);
        assert_eq!(resp.responses[0].topic_id, topic_id);
        let recs = decode_records(partitions(&resp)[0].records.as_deref().unwrap_or_default());
        assert_eq!(recs.first().map(|r| r.0), Some(4));
        // Back at offset 5 with nothing new: empty.
        let resp = c
            .fetch(
                version,
                &Fetch::new(version, topic, topic_id)
                    .session(id, 2)
                    .parts(&[want(0, 5)])
                    .build(),
            )
            .await;
        assert!(resp.responses.is_empty(), "v{version}");
        // A v12 request cannot continue a session that uses ids.
        let resp = c
            .fetch(12, &Fetch::new(12, topic, topic_id).session(id, 3).build())
            .await;
        assert_eq!(resp.error_code, FETCH_SESSION_TOPIC_ID_ERROR);
    }
    // An unknown topic id is a partition error.
    let unknown = Uuid::new_v4();
    let resp = c
        .fetch(
            13,
            &Fetch::new(13, "?", unknown).parts(&[want(0, 0)]).build(),
        )
        .await;
    assert_eq!(resp.responses[0].topic_id, unknown);
    assert_eq!(partitions(&resp)[0].error_code, UNKNOWN_TOPIC_ID);
    server.stop().await;
}

#[tokio::test]
async fn full_cache_refuses_consumers_and_claimed_replicas_are_not_privileged() {
    let server = start(&[("max.incremental.fetch.session.cache.slots", "2")]).await;
    let mut c = server.client().await;
    c.create_topic("e", 3).await;
    c.produce("e", 0, 1, 10).await;
    let small = c
        .fetch(
            12,
            &Fetch::new(12, "e", Uuid::nil())
                .parts(&[want(0, 0)])
                .build(),
        )
        .await
        .session_id;
    let large = c
        .fetch(
            12,
            &Fetch::new(12, "e", Uuid::nil())
                .parts(&[want(0, 0), want(1, 0), want(2, 0)])
                .build(),
        )
        .await
        .session_id;
    assert!(small > 0 && large > 0 && small != large);
    // Full: a consumer gets its data but no session (young sessions are
    // not evicted for consumers).
    let resp = c
        .fetch(
            12,
            &Fetch::new(12, "e", Uuid::nil())
                .parts(&[want(0, 0), want(1, 0), want(2, 0)])
                .build(),
        )
        .await;
    assert_eq!((resp.error_code, resp.session_id), (0, 0));
    assert_eq!(
        decode_records(partitions(&resp)[0].records.as_deref().unwrap_or_default()).len(),
        1
    );
    // A follower's session would be privileged and evict the smallest
    // consumer session (fetch_session's unit tests); a fetch merely
    // claiming a replica id that is no broker of the cluster gets no such
    // privilege: no session, NOT_LEADER_OR_FOLLOWER, nobody evicted.
    let mut claimed = Fetch::new(12, "e", Uuid::nil()).parts(&[want(0, 0)]);
    claimed.replica_id = 2;
    let resp = c.fetch(12, &claimed.build()).await;
    assert_eq!((resp.error_code, resp.session_id), (0, 0));
    assert_eq!(partitions(&resp)[0].error_code, NOT_LEADER_OR_FOLLOWER);
    for (id, epoch) in [(small, 1), (large, 1)] {
        let resp = c
            .fetch(
                12,
                &Fetch::new(12, "e", Uuid::nil()).session(id, epoch).build(),
            )
            .await;
        assert_eq!((resp.error_code, resp.session_id), (0, id));
    }
    server.stop().await;
}

#[tokio::test]
async fn long_poll_is_woken_by_produce() {
    let server = start(&[]).await;
    let mut c = server.client().await;
    c.create_topic("lp", 2).await;

    // Nothing arrives: the fetch waits max_wait_ms and answers empty.
    let mut idle = Fetch::new(12, "lp", Uuid::nil()).parts(&[want(0, 0), want(1, 0)]);
    idle.max_wait_ms = 400;
    idle.min_bytes = 1;
    let t = Instant::now();
    let resp = c.fetch(12, &idle.build()).await;
    let waited = t.elapsed();
    assert!(waited >= Duration::from_millis(380), "{waited:?}");
    assert!(partitions(&resp).iter().all(|p| records_len(p) == 0));
    let id = resp.session_id;
    assert!(id > 0);

    // An incremental fetch parked for 10 s returns soon after a produce on
    // another connection, with only that partition.
    let mut producer = server.client().await;
    let produce = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        producer.produce("lp", 1, 5, 50).await
    });
    let mut inc = Fetch::new(12, "lp", Uuid::nil()).session(id, 1);
    inc.max_wait_ms = 10_000;
    inc.min_bytes = 1;
    let t = Instant::now();
    let resp = c.fetch(12, &inc.build()).await;
    let waited = t.elapsed();
    assert_eq!(produce.await.expect("producer"), 0);
    assert!(
        waited >= Duration::from_millis(250),
        "returned before the produce: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(5),
        "not woken by the produce: {waited:?}"
    );
    assert_eq!(partition_ids(&resp), vec![1]);
    assert_eq!(
        decode_records(partitions(&resp)[0].records.as_deref().unwrap_or_default()).len(),
        5
    );

    // min_bytes above what arrives keeps waiting until the deadline.
    let mut big = Fetch::new(12, "lp", Uuid::nil())
        .session(id, 2)
        .parts(&[want(1, 5)]);
    big.max_wait_ms = 700;
    big.min_bytes = 1 << 20;
    let mut producer = server.client().await;
    let produce = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        producer.produce("lp", 0, 1, 10).await
    });
    let t = Instant::now();
    let resp = c.fetch(12, &big.build()).await;
    let waited = t.elapsed();
    produce.await.expect("producer");
    assert!(waited >= Duration::from_millis(650), "{waited:?}");
    assert_eq!(partition_ids(&resp), vec![0]);
    server.stop().await;
}

#[tokio::test]
async fn zero_copy_response_equals_encoder_output() {
    let server = start(&[]).await;
    let mut c = server.client().await;
    let topic_id = c.create_topic("zc", 3).await;
    // Several batches per partition, well over the in-memory threshold.
    for p in 0..3 {
        for _ in 0..4 {
            c.produce("zc", p, 50, 1000 + p as usize * 300).await;
        }
    }
    for version in [4, 11, 12, 13, 16, 18] {
        let f = Fetch::new(version, "zc", topic_id).parts(&[want(0, 0), want(1, 50), want(2, 0)]);
        let frame = c.call_raw(ApiKey::Fetch, version, &f.build()).await;
        let resp: FetchResponse =
            decode_response(ApiKey::Fetch, version, c.correlation, frame.clone());
        // The copy path: the same response encoded in memory.
        let mut copied = BytesMut::new();
        copied.put_i32(0);
        let mut header = ResponseHeader::default();
        header.correlation_id = c.correlation;
        header
            .encode(&mut copied, ApiKey::Fetch.response_header_version(version))
            .expect("header");
        resp.encode(&mut copied, version).expect("encode");
        let size = (copied.len() - 4) as i32;
        copied[..4].copy_from_slice(&size.to_be_bytes());
        assert!(
            copied.freeze() == frame,
            "v{version}: sent frame differs from the encoder's"
        );
        let ps = partitions(&resp);
        for (p, from) in [(0, 0), (1, 50), (2, 0)] {
            let recs = decode_records(ps[p].records.as_deref().unwrap_or_default());
            assert_eq!(recs.len(), 200 - from, "v{version} partition {p}");
            for (offset, v) in &recs {
                let i = (*offset % 50) as usize;
                assert_eq!(
                    v,
                    &value(p as i32, i, 1000 + p * 300),
                    "v{version} p{p} @{offset}"
                );
            }
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn size_limits_and_kip74() {
    let server = start(&[]).await;
    let mut c = server.client().await;
    c.create_topic("lim", 2).await;
    for p in 0..2 {
        for _ in 0..3 {
            c.produce("lim", p, 10, 2000).await; // ~20 KB per batch
        }
    }
    // partition_max_bytes smaller than one batch: the whole first batch.
    let f = Fetch::new(12, "lim", Uuid::nil()).parts(&[Want {
        partition: 0,
        offset: 0,
        max: 100,
    }]);
    let resp = c.fetch(12, &f.build()).await;
    let recs = decode_records(partitions(&resp)[0].records.as_deref().unwrap_or_default());
    assert_eq!(recs.len(), 10);

    // The response limit: the first partition fills it, the second gets
    // nothing (but its high watermark).
    let mut f = Fetch::new(12, "lim", Uuid::nil()).parts(&[want(0, 0), want(1, 0)]);
    f.max_bytes = 30_000;
    let resp = c.fetch(12, &f.build()).await;
    let ps = partitions(&resp);
    assert!(records_len(ps[0]) <= 30_000 && records_len(ps[0]) > 20_000);
    assert_eq!(records_len(ps[1]), 0);
    assert_eq!(ps[1].high_watermark, 30);
    // A later partition whose first batch does not fit its limit gets no
    // records rather than a partial batch (Kafka drops an incomplete first
    // entry for v3+); only the response's first data may exceed a limit.
    c.create_topic("cut", 2).await;
    c.produce("cut", 0, 1, 10).await;
    c.produce("cut", 1, 10, 2000).await;
    let cut = |p: i32| Want {
        partition: p,
        offset: 0,
        max: 10_000,
    };
    let resp = c
        .fetch(
            12,
            &Fetch::new(12, "cut", Uuid::nil())
                .parts(&[cut(0), cut(1)])
                .build(),
        )
        .await;
    let ps = partitions(&resp);
    assert_eq!(
        decode_records(ps[0].records.as_deref().unwrap_or_default()).len(),
        1
    );
    assert_eq!(records_len(ps[1]), 0, "partial batch sent");
    assert_eq!(ps[1].high_watermark, 10);
    let resp = c
        .fetch(
            12,
            &Fetch::new(12, "cut", Uuid::nil())
                .parts(&[cut(1), cut(0)])
                .build(),
        )
        .await;
    let ps = partitions(&resp);
    assert_eq!(
        decode_records(ps[0].records.as_deref().unwrap_or_default()).len(),
        10
    );
    assert_eq!(
        decode_records(ps[1].records.as_deref().unwrap_or_default()).len(),
        1
    );

    // Tiny max_bytes still gets one whole batch (KIP-74), from the first
    // partition only.
    f.max_bytes = 1;
    let resp = c.fetch(12, &f.build()).await;
    let ps = partitions(&resp);
    assert_eq!(
        decode_records(ps[0].records.as_deref().unwrap_or_default()).len(),
        10
    );
    assert_eq!(records_len(ps[1]), 0);
    server.stop().await;
}

/// A consumer loop like a client's: a session, positions advanced by what
/// arrives, small response limit so partitions take turns.
#[tokio::test]
async fn consuming_many_records_through_a_session() {
    let server = start(&[]).await;
    let mut c = server.client().await;
    const PARTS: i32 = 4;
    const BATCHES: usize = 30;
    const PER_BATCH: usize = 40;
    c.create_topic("many", PARTS).await;
    for b in 0..BATCHES {
        for p in 0..PARTS {
            let base = c.produce("many", p, PER_BATCH, 200).await;
            assert_eq!(base, (b * PER_BATCH) as i64);
        }
    }
    let total = BATCHES * PER_BATCH;
    let mut pos = [0i64; PARTS as usize];
    let mut got = vec![Vec::new(); PARTS as usize];
    let mut session = (0, 0);
    let mut changed: Vec<i32> = (0..PARTS).collect();
    let mut rounds = 0;
    while pos.iter().any(|&p| p < total as i64) {
        if rounds == 3 {
            // Partitions that returned data move to the back of the
            // session: with a 100 KB limit and 64 KB per partition, every
            // partition has had a turn by now.
            assert!(pos.iter().all(|&p| p > 0), "a partition starved: {pos:?}");
        }
        rounds += 1;
        assert!(rounds < 500, "not making progress: {pos:?}");
        let wants: Vec<Want> = changed
            .iter()
            .map(|&p| Want {
                partition: p,
                offset: pos[p as usize],
                max: 64 << 10,
            })
            .collect();
        let mut f = Fetch::new(12, "many", Uuid::nil())
            .session(session.0, session.1)
            .parts(&wants);
        f.max_bytes = 100 << 10;
        f.max_wait_ms = 100;
        f.min_bytes = 1;
        let resp = c.fetch(12, &f.build()).await;
        assert_eq!(resp.error_code, 0);
        if session.0 == 0 {
            session.0 = resp.session_id;
            assert!(session.0 > 0);
        }
        session.1 += 1;
        changed.clear();
        for pd in partitions(&resp) {
            assert_eq!(pd.error_code, 0);
            let p = pd.partition_index as usize;
            for (offset, v) in decode_records(pd.records.as_deref().unwrap_or_default()) {
                if offset < pos[p] {
                    continue; // earlier records of the first batch
                }
                assert_eq!(offset, pos[p], "partition {p}");
                assert_eq!(v, value(p as i32, offset as usize % PER_BATCH, 200));
                got[p].push(offset);
                pos[p] = offset + 1;
                if !changed.contains(&(p as i32)) {
                    changed.push(p as i32);
                }
            }
        }
    }
    for g in &got {
        assert_eq!(g.len(), total);
    }
    server.stop().await;
}

/// A fetch naming a replica id (v4-v14 `replica_id`, v15+ `replica_state`)
/// that is not a follower of the partition (another id, or this node's
/// own: a leader does not fetch from itself) gets Kafka's per-partition
/// error and no records, in every version; the same connection and a
/// consumer keep being served.
#[tokio::test]
async fn fetch_claiming_a_replica_id_gets_kafkas_error_in_every_version() {
    let server = start(&[]).await;
    let mut c = server.client().await;
    let id = c.create_topic("claimed", 1).await;
    c.produce("claimed", 0, 3, 10).await;
    for version in 4..=18 {
        for replica_id in [7, 1] {
            let epochs: &[(i32, i16)] = if version >= 9 {
                &[
                    (-1, NOT_LEADER_OR_FOLLOWER),
                    (0, UNKNOWN_LEADER_EPOCH),
                    (5, UNKNOWN_LEADER_EPOCH),
                ]
            } else {
                &[(-1, NOT_LEADER_OR_FOLLOWER)]
            };
            for &(epoch, want_error) in epochs {
                let mut f = Fetch::new(version, "claimed", id).parts(&[want(0, 0)]);
                f.replica_id = replica_id;
                f.leader_epoch = epoch;
                let resp = c.fetch(version, &f.build()).await;
                assert_eq!(resp.error_code, 0, "v{version}");
                let p = partitions(&resp);
                assert_eq!(p.len(), 1, "v{version}");
                assert_eq!(
                    (p[0].error_code, p[0].high_watermark, records_len(p[0])),
                    (want_error, -1, 0),
                    "v{version} replica {replica_id} epoch {epoch}"
                );
            }
        }
        // A consumer on the same connection reads everything.
        let resp = c
            .fetch(
                version,
                &Fetch::new(version, "claimed", id)
                    .parts(&[want(0, 0)])
                    .build(),
            )
            .await;
        let p = partitions(&resp);
        assert_eq!((p[0].error_code, p[0].high_watermark), (0, 3), "v{version}");
        assert_eq!(
            decode_records(p[0].records.as_deref().unwrap_or_default()).len(),
            3
        );
    }
    server.stop().await;
}
