//! Produce (key 0): validate acks, find each partition (Produce never
//! creates topics: Kafka creates them on Metadata requests only, so a
//! missing topic gets UNKNOWN_TOPIC_OR_PARTITION; internal topics are
//! refused), check the records as Kafka's `ProduceRequest.validateRecords`
//! does, append the batch through storage (which validates it as Kafka's
//! `LogValidator`: record framing walked, not decoded), and answer per
//! partition. On one node the leader is every replica, so acks=all is
//! satisfied at append, unless `min.insync.replicas` asks for more replicas
//! than exist. acks=0 gets no response.
//!
//! A failed partition is answered as Kafka's `ReplicaManager` does: per-record
//! errors (keyless records in a compacted topic, timestamps out of bounds)
//! carry `record_errors` and the summary `error_message` (v8+); other errors
//! carry no message. The log start offset (v5+) is filled unless the error is
//! one Kafka answers without append info (unknown partition, not leader,
//! too large, corrupt, storage error, or a request-level check).

use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use proto_kafka::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use proto_kafka::messages::{ProduceRequest, ProduceResponse, TopicName};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;
use sluice_protocol::record::{BatchIter, Compression};
use sluice_protocol::ProtocolError;
use sluice_storage::{AppendOrigin, RecordError, StorageError};

use super::errors::storage_error;
use super::Ctx;
use crate::broker::{ApiError, Broker};
use crate::partition::{Acks, AppendError, Partition};

pub(crate) const VERSIONS: (i16, i16) = (3, 12);

/// What the connection does after a produce.
#[derive(Debug)]
pub(crate) enum Outcome {
    Respond(ProduceResponse),
    /// acks=0 and everything appended: no response.
    Silent,
    /// acks=0 and a partition failed: Kafka closes the connection so the
    /// producer notices (it gets no response to read an error from).
    Close(String),
}

impl super::IntoReply for Outcome {
    fn into_reply(self, ctx: &Ctx) -> crate::error::Result<super::Reply> {
        match self {
            Outcome::Respond(resp) => resp.into_reply(ctx),
            Outcome::Silent => Ok(super::Reply::Nothing),
            Outcome::Close(why) => Ok(super::Reply::Close(why)),
        }
    }
}

pub(crate) async fn handle(
    broker: &Arc<Broker>,
    req: ProduceRequest,
    frame: Option<Bytes>,
    ctx: &Ctx,
) -> Outcome {
    let acks = req.acks;
    let timeout_ms = req.timeout_ms;
    let mut first_error: Option<String> = None;
    let mut resp = ProduceResponse::default();
    // acks=all: the partitions appended to and the offset the high
    // watermark must reach, waited for once every partition is appended.
    let mut replicated: Vec<(Arc<Partition>, i64, usize, usize)> = Vec::new();
    for td in take_records(req, frame) {
        let name = td.name;
        let topic = crate::internal_topics::check_client_may_produce(&name).and_then(|()| {
            match broker.image().topic(&name) {
                Some(_) => Ok(()),
                None => Err(ApiError::code(ResponseError::UnknownTopicOrPartition)),
            }
        });
        let mut tr = TopicProduceResponse::default();
        tr.name = TopicName(StrBytes::from_string(name.clone()));
        for (index, records) in td.partitions {
            let mut pr = PartitionProduceResponse::default();
            pr.index = index;
            pr.base_offset = -1;
            pr.log_append_time_ms = -1;
            pr.log_start_offset = -1;
            let result = if !matches!(acks, -1..=1) {
                Err(Failure::request(ApiError::code(
                    ResponseError::InvalidRequiredAcks,
                )))
            } else {
                match &topic {
                    Err(e) => Err(Failure::request(e.clone())),
                    Ok(_) => append(broker, &name, index, records, acks, ctx.version).await,
                }
            };
            match result {
                Ok((partition, info)) => {
                    if acks == -1 {
                        let at = (resp.responses.len(), tr.partition_responses.len());
                        replicated.push((partition, info.last_offset + 1, at.0, at.1));
                    }
                    pr.base_offset = info.base_offset;
                    pr.log_append_time_ms = info.log_append_time;
                    if ctx.version >= 5 {
                        pr.log_start_offset = info.log_start_offset;
                    }
                }
                Err(f) => {
                    tracing::debug!(
                        partition = %format!("{name}-{index}"), error = ?f.error.code,
                        message = f.error.message.as_deref().unwrap_or(""), "produce refused"
                    );
                    if first_error.is_none() {
                        first_error = Some(format!("{name}-{index}: {:?}", f.error.code));
                    }
                    pr.error_code = f.error.code.code();
                    if ctx.version >= 5 {
                        pr.log_start_offset = f.log_start_offset;
                    }
                    if ctx.version >= 8 {
                        pr.record_errors = f
                            .record_errors
                            .into_iter()
                            .map(|r| {
                                let mut e = BatchIndexAndErrorMessage::default();
                                e.batch_index = r.batch_index;
                                e.batch_index_error_message = r.message.map(StrBytes::from_string);
                                e
                            })
                            .collect();
                        pr.error_message = f.error_message.map(StrBytes::from_string);
                    }
                }
            }
            tr.partition_responses.push(pr);
        }
        resp.responses.push(tr);
    }
    let deadline =
        tokio::time::Instant::now() + std::time::Duration::from_millis(timeout_ms.max(0) as u64);
    for (partition, offset, t, p) in replicated {
        if let Err(code) = partition.wait_replicated(offset, deadline).await {
            let pr = &mut resp.responses[t].partition_responses[p];
            pr.error_code = code.code();
            pr.base_offset = -1;
            pr.log_append_time_ms = -1;
        }
    }
    if ctx.version >= 10 {
        add_leader_hints(broker, &mut resp);
    }
    match (acks, first_error) {
        (0, None) => Outcome::Silent,
        (0, Some(e)) => Outcome::Close(format!("acks=0 produce failed for {e}")),
        _ => Outcome::Respond(resp),
    }
}

/// One topic of a Produce request, each partition's records taken out of
/// the request.
struct TopicRecords {
    name: String,
    partitions: Vec<(i32, Option<BytesMut>)>,
}

/// Takes each partition's records out of `req` as buffers the append may
/// patch in place. When `frame`, the body the request was decoded from, is
/// held by nothing else once the request is dropped (the usual case), the
/// records are disjoint regions of it: no copy between the socket and the
/// log write. Otherwise (records not in the frame, or the frame shared)
/// they are copied.
fn take_records(mut req: ProduceRequest, frame: Option<Bytes>) -> Vec<TopicRecords> {
    let topic_data = std::mem::take(&mut req.topic_data);
    drop(req);
    let body = frame
        .as_ref()
        .map(|f| f.as_ptr() as usize..f.as_ptr() as usize + f.len());
    let mut topics = Vec::with_capacity(topic_data.len());
    // (topic, partition, range in the frame) of records inside the frame.
    let mut regions: Vec<(usize, usize, std::ops::Range<usize>)> = Vec::new();
    for (t, td) in topic_data.into_iter().enumerate() {
        let mut partitions = Vec::with_capacity(td.partition_data.len());
        for (p, pd) in td.partition_data.into_iter().enumerate() {
            let records = pd.records.and_then(|r| {
                let at = r.as_ptr() as usize;
                match &body {
                    Some(b) if b.start <= at && at + r.len() <= b.end => {
                        regions.push((t, p, at - b.start..at - b.start + r.len()));
                        None
                    }
                    _ => Some(BytesMut::from(&r[..])),
                }
            });
            partitions.push((pd.index, records));
        }
        topics.push(TopicRecords {
            name: td.name.0.to_string(),
            partitions,
        });
    }
    let Some(frame) = frame else {
        return topics;
    };
    regions.sort_by_key(|(_, _, r)| r.start);
    let disjoint = regions.windows(2).all(|w| w[0].2.end <= w[1].2.start);
    match frame.try_into_mut() {
        Ok(mut rest) if disjoint => {
            let mut pos = 0;
            for (t, p, range) in regions {
                rest.advance(range.start - pos);
                topics[t].partitions[p].1 = Some(rest.split_to(range.len()));
                pos = range.end;
            }
        }
        whole => {
            let bytes: &[u8] = match &whole {
                Ok(unique) => unique,
                Err(shared) => shared,
            };
            for (t, p, range) in regions {
                topics[t].partitions[p].1 = Some(BytesMut::from(&bytes[range]));
            }
        }
    }
    topics
}

/// KIP-951: partitions refused as not led here name their leader, whose
/// endpoint the response carries.
fn add_leader_hints(broker: &Broker, resp: &mut ProduceResponse) {
    use proto_kafka::messages::produce_response::{LeaderIdAndEpoch, NodeEndpoint};
    use proto_kafka::messages::BrokerId;
    for t in &mut resp.responses {
        let topic = t.name.0.to_string();
        for p in &mut t.partition_responses {
            if !super::leader_hints::wants_hint(p.error_code) {
                continue;
            }
            let ((leader, epoch), endpoint) =
                super::leader_hints::leader_of(broker, &topic, p.index);
            let mut hint = LeaderIdAndEpoch::default();
            hint.leader_id = BrokerId(leader);
            hint.leader_epoch = epoch;
            p.current_leader = hint;
            if let Some(b) = endpoint {
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
    }
}

/// How one partition failed, with what Kafka puts in its response.
#[derive(Debug)]
struct Failure {
    /// The error code (and, for the broker's log, why).
    error: ApiError,
    /// The log start offset, or -1 where Kafka reports none.
    log_start_offset: i64,
    /// Per-record errors (v8+).
    record_errors: Vec<RecordError>,
    /// The partition's `error_message` (v8+): Kafka sends one only with
    /// per-record errors.
    error_message: Option<String>,
}

impl Failure {
    /// A failure before the log was reached (Kafka answers these from
    /// `KafkaApis` with a bare error code).
    fn request(error: ApiError) -> Self {
        Self {
            error,
            log_start_offset: -1,
            record_errors: Vec::new(),
            error_message: None,
        }
    }

    /// A failure from the partition's log; `log_start_offset` is reported
    /// unless Kafka answers this error without append info.
    fn from_log(error: ApiError, log_start_offset: i64) -> Self {
        let bare = matches!(
            error.code,
            ResponseError::UnknownTopicOrPartition
                | ResponseError::NotLeaderOrFollower
                | ResponseError::MessageTooLarge
                | ResponseError::RecordListTooLarge
                | ResponseError::CorruptMessage
                | ResponseError::KafkaStorageError
        );
        Self {
            log_start_offset: if bare { -1 } else { log_start_offset },
            ..Self::request(error)
        }
    }
}

/// Appends one partition's records through the partition layer.
async fn append(
    broker: &Broker,
    topic: &str,
    partition: i32,
    records: Option<BytesMut>,
    acks: i16,
    version: i16,
) -> Result<(Arc<Partition>, sluice_storage::AppendInfo), Failure> {
    let part = broker
        .partition(topic, partition)
        .ok_or_else(|| Failure::request(ApiError::code(broker.not_led_error(topic, partition))))?;
    let log = Arc::clone(part.log());
    let records = records.unwrap_or_default();
    check_records(&records, version).map_err(Failure::request)?;
    let acks = if acks == -1 { Acks::All } else { Acks::Leader };
    let info = match part.append(records, AppendOrigin::Client, acks).await {
        Ok(info) => info,
        Err(AppendError::Api(e)) => return Err(Failure::from_log(e, log.log_start_offset())),
        Err(AppendError::Storage(StorageError::RecordErrors {
            kind,
            errors,
            total,
            message,
        })) => {
            let e = StorageError::RecordErrors {
                kind,
                errors: Vec::new(),
                total,
                message: message.clone(),
            };
            return Err(Failure {
                error: storage_error(&e),
                log_start_offset: log.log_start_offset(),
                record_errors: errors,
                error_message: Some(message),
            });
        }
        Err(AppendError::Storage(e)) => {
            return Err(Failure::from_log(storage_error(&e), log.log_start_offset()))
        }
    };
    Ok((part, info))
}

/// Kafka's `ProduceRequest.validateRecords` (v3+), before the append:
/// exactly one complete batch, of magic 2, and no zstd before v7. A partial
/// batch does not count as one (Kafka's batch iterator stops there too).
fn check_records(records: &[u8], version: i16) -> Result<(), ApiError> {
    let mut batches = BatchIter::new(records);
    let first = match batches.next() {
        None => {
            return Err(ApiError::new(
                ResponseError::InvalidRecord,
                format!(
                    "Produce requests with version {version} must have at least one record batch per partition"
                ),
            ))
        }
        Some(Err(ProtocolError::UnsupportedMagic(_))) => {
            return Err(ApiError::new(
                ResponseError::InvalidRecord,
                format!(
                    "Produce requests with version {version} are only allowed to contain record batches with magic version 2"
                ),
            ))
        }
        Some(Err(e)) => return Err(ApiError::new(ResponseError::CorruptMessage, e.to_string())),
        Some(Ok((_, header, _))) => header,
    };
    if version < 7 && matches!(first.compression(), Ok(Compression::Zstd)) {
        return Err(ApiError::new(
            ResponseError::UnsupportedCompressionType,
            format!("Produce requests with version {version} cannot contain zstd-compressed batches (needs version 7)"),
        ));
    }
    if batches.next().is_some() {
        return Err(ApiError::new(
            ResponseError::InvalidRecord,
            format!(
                "Produce requests with version {version} are only allowed to contain exactly one record batch per partition"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use proto_kafka::messages::{ApiKey, TopicName};
    use sluice_protocol::record::batch;
    use sluice_protocol::record::codec::{assemble, encode_record, BatchFields, ProducerInfo};
    use sluice_protocol::record::{BatchBuilder, Record};

    use super::super::test_support::{block_on, ctx, open_broker, roundtrip};
    use super::*;

    fn now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }

    /// Records `keys[i]` (None: keyless) at timestamps `ts[i]`.
    fn batch_of(keys: &[Option<&str>], ts: &[i64]) -> Vec<u8> {
        let mut b = BatchBuilder::new(Compression::None, ts[0]);
        for (k, t) in keys.iter().zip(ts) {
            b.push(Record::new(
                k.map(|k| k.as_bytes().to_vec()),
                Some(b"v".to_vec()),
                *t,
            ));
        }
        b.build(0).expect("build")
    }

    fn produce(broker: &Arc<Broker>, topic: &str, records: Vec<u8>, v: i16) -> ProduceResponse {
        let mut pd = PartitionProduceData::default();
        pd.index = 0;
        pd.records = Some(records.into());
        let mut td = TopicProduceData::default();
        td.name = TopicName(StrBytes::from_string(topic.to_string()));
        td.partition_data = vec![pd];
        let mut req = ProduceRequest::default();
        req.acks = -1;
        req.timeout_ms = 1_000;
        req.topic_data = vec![td];
        match block_on(handle(broker, req, None, &ctx(ApiKey::Produce, v))) {
            Outcome::Respond(r) => roundtrip(&r, v),
            other => panic!("v{v}: {other:?}"),
        }
    }

    /// A Produce request of two topics with two partitions each, framed
    /// at `v` with a request header and parsed as the connection does:
    /// (request, its body, the frame's address span, the batches in order).
    fn parsed_from_frame(
        v: i16,
    ) -> (
        ProduceRequest,
        Option<Bytes>,
        std::ops::Range<usize>,
        Vec<Vec<u8>>,
    ) {
        use proto_kafka::messages::RequestHeader;
        use proto_kafka::protocol::Encodable;
        let mut req = ProduceRequest::default();
        req.acks = 1;
        let mut batches = Vec::new();
        for t in 0..2 {
            let mut td = TopicProduceData::default();
            td.name = TopicName(StrBytes::from_string(format!("t{t}")));
            for p in 0..2 {
                let key = format!("{t}-{p}");
                let b = batch_of(&[Some(key.as_str())], &[now()]);
                let mut pd = PartitionProduceData::default();
                pd.index = p;
                pd.records = Some(b.clone().into());
                td.partition_data.push(pd);
                batches.push(b);
            }
            req.topic_data.push(td);
        }
        let mut buf = BytesMut::new();
        let mut header = RequestHeader::default();
        header.request_api_key = ApiKey::Produce as i16;
        header.request_api_version = v;
        header.client_id = Some(StrBytes::from_static_str("test"));
        header
            .encode(&mut buf, ApiKey::Produce.request_header_version(v))
            .expect("encode header");
        req.encode(&mut buf, v).expect("encode");
        let frame = Bytes::from(buf.to_vec());
        let span = frame.as_ptr() as usize..frame.as_ptr() as usize + frame.len();
        match super::super::parse(frame).expect("parse") {
            super::super::Parsed::Request(_, req, body) => match *req {
                super::super::Request::Produce(req) => (req, body, span, batches),
                other => panic!("{other:?}"),
            },
            super::super::Parsed::UnsupportedApiVersions { .. } => panic!("not produce"),
        }
    }

    #[test]
    fn records_are_regions_of_the_frame_when_nothing_else_holds_it() {
        for v in [3, 9, 12] {
            let (req, body, span, batches) = parsed_from_frame(v);
            assert!(body.is_some(), "v{v}: parse hands Produce its body");
            let topics = take_records(req, body);
            let got: Vec<(String, i32, Vec<u8>, bool)> = topics
                .into_iter()
                .flat_map(|t| {
                    let (name, span) = (t.name, span.clone());
                    t.partitions.into_iter().map(move |(i, r)| {
                        let r = r.expect("records");
                        let in_frame = span.contains(&(r.as_ptr() as usize));
                        (name.clone(), i, r.to_vec(), in_frame)
                    })
                })
                .collect();
            let want: Vec<(String, i32, Vec<u8>, bool)> = (0..4)
                .map(|n| {
                    (
                        format!("t{}", n / 2),
                        n % 2,
                        batches[n as usize].clone(),
                        true,
                    )
                })
                .collect();
            assert_eq!(
                got, want,
                "v{v}: every partition is its region of the frame, not a copy"
            );
        }
    }

    #[test]
    fn records_are_copied_when_the_frame_is_shared() {
        let (req, body, span, batches) = parsed_from_frame(9);
        let held = body.clone().expect("body");
        let topics = take_records(req, body);
        let got: Vec<(Vec<u8>, bool)> = topics
            .into_iter()
            .flat_map(|t| t.partitions)
            .map(|(_, r)| {
                let r = r.expect("records");
                (r.to_vec(), span.contains(&(r.as_ptr() as usize)))
            })
            .collect();
        let want: Vec<(Vec<u8>, bool)> = batches.into_iter().map(|b| (b, false)).collect();
        assert_eq!(got, want);
        assert!(
            span.contains(&(held.as_ptr() as usize)),
            "the shared frame is left as it was"
        );
    }

    /// The whole response for one partition of `topic`.
    fn expect(topic: &str, p: PartitionProduceResponse) -> ProduceResponse {
        let mut t = TopicProduceResponse::default();
        t.name = TopicName(StrBytes::from_string(topic.to_string()));
        t.partition_responses = vec![p];
        let mut r = ProduceResponse::default();
        r.responses = vec![t];
        r
    }

    fn partition(
        error: Option<ResponseError>,
        base_offset: i64,
        log_start: i64,
        v: i16,
    ) -> PartitionProduceResponse {
        let mut p = PartitionProduceResponse::default();
        p.index = 0;
        p.error_code = error.map_or(0, |e| e.code());
        p.base_offset = base_offset;
        p.log_append_time_ms = -1;
        p.log_start_offset = if v >= 5 { log_start } else { -1 };
        p
    }

    fn record_errors(indexes: &[i32], message: &str) -> Vec<BatchIndexAndErrorMessage> {
        indexes
            .iter()
            .map(|&i| {
                let mut e = BatchIndexAndErrorMessage::default();
                e.batch_index = i;
                e.batch_index_error_message = Some(StrBytes::from_string(message.to_string()));
                e
            })
            .collect()
    }

    #[test]
    fn keyless_records_in_a_compacted_topic_in_every_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        for v in VERSIONS.0..=VERSIONS.1 {
            let name = format!("compacted{v}");
            broker
                .create_topic(
                    &name,
                    1,
                    1,
                    &[("cleanup.policy".into(), "compact".into())],
                    false,
                )
                .expect("create");
            let t = now();
            let resp = produce(
                &broker,
                &name,
                batch_of(&[Some("a"), None, Some("b"), None], &[t; 4]),
                v,
            );
            let msg = format!(
                "Compacted topic cannot accept message without key in topic partition {name}-0"
            );
            let mut want = partition(Some(ResponseError::InvalidRecord), -1, 0, v);
            if v >= 8 {
                want.record_errors = record_errors(&[1, 3], &msg);
                want.error_message = Some(StrBytes::from_string(format!(
                    "One or more records have been rejected due to 2 record errors in total, and \
                     only showing the first three errors at most: \
                     [RecordError(batchIndex=1, message='{msg}'), \
                     RecordError(batchIndex=3, message='{msg}')]"
                )));
            }
            assert_eq!(resp, expect(&name, want), "v{v}");
            let log = broker.log(&name, 0).expect("log");
            assert_eq!(log.log_end_offset(), 0, "v{v}: nothing appended");

            // Keys everywhere: appended.
            let resp = produce(
                &broker,
                &name,
                batch_of(&[Some("a"), Some("b")], &[t; 2]),
                v,
            );
            assert_eq!(resp, expect(&name, partition(None, 0, 0, v)), "v{v}");
            assert_eq!(log.log_end_offset(), 2);
        }
        broker.shutdown().expect("shutdown");
    }

    #[test]
    fn timestamps_out_of_bounds_in_every_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        for v in VERSIONS.0..=VERSIONS.1 {
            let name = format!("ts{v}");
            broker
                .create_topic(
                    &name,
                    1,
                    1,
                    &[("message.timestamp.before.max.ms".into(), "60000".into())],
                    false,
                )
                .expect("create");
            // The first record is fine; the second is a day old.
            let t = now();
            let resp = produce(
                &broker,
                &name,
                batch_of(&[Some("a"), Some("b")], &[t, t - 86_400_000]),
                v,
            );
            let resp_p = &resp.responses[0].partition_responses[0];
            let mut want = partition(Some(ResponseError::InvalidTimestamp), -1, 0, v);
            if v >= 8 {
                // The bounds in the message depend on the broker's clock.
                let m = resp_p.record_errors[0]
                    .batch_index_error_message
                    .as_ref()
                    .expect("message")
                    .to_string();
                assert!(
                    m.starts_with(&format!(
                        "Timestamp {} of message with offset 1 is out of range. The timestamp \
                         should be within [",
                        t - 86_400_000
                    )),
                    "{m}"
                );
                want.record_errors = record_errors(&[1], &m);
                want.error_message = Some(StrBytes::from_static_str(
                    "One or more records have been rejected due to invalid timestamp",
                ));
            }
            assert_eq!(resp, expect(&name, want), "v{v}");
            assert_eq!(broker.log(&name, 0).expect("log").log_end_offset(), 0);
        }
        broker.shutdown().expect("shutdown");
    }

    #[test]
    fn corrupt_and_invalid_batches_carry_no_message() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        broker
            .create_topic("bad", 1, 1, &[], false)
            .expect("create");
        let t = now();
        let good = batch_of(&[Some("a"), Some("b"), Some("c")], &[t; 3]);
        let mut crc = good.clone();
        let last = crc.len() - 1;
        crc[last] ^= 0xff;
        // Claims four records and holds three (count and offsets agree).
        let mut payload = Vec::new();
        for i in 0..3 {
            let r = Record::new(Some(vec![b'k', i as u8]), Some(b"v".to_vec()), t);
            encode_record(&mut payload, &r, i, 0);
        }
        let fields = BatchFields {
            base_offset: 0,
            partition_leader_epoch: -1,
            attributes: 0,
            last_offset_delta: 3,
            base_timestamp: t,
            max_timestamp: t,
            producer: ProducerInfo::default(),
            records_count: 4,
        };
        let more = assemble(&fields, Compression::None, &payload).expect("assemble");
        let mut based = good.clone();
        batch::set_base_offset(&mut based, 5);
        for v in VERSIONS.0..=VERSIONS.1 {
            let cases = [
                (crc.clone(), Some(ResponseError::CorruptMessage), -1),
                (more.clone(), Some(ResponseError::InvalidRecord), 0),
                (based.clone(), Some(ResponseError::InvalidRecord), 0),
                (
                    good[..good.len() - 1].to_vec(),
                    Some(ResponseError::InvalidRecord),
                    -1,
                ),
            ];
            for (i, (records, error, log_start)) in cases.into_iter().enumerate() {
                let resp = produce(&broker, "bad", records, v);
                assert_eq!(
                    resp,
                    expect("bad", partition(error, -1, log_start, v)),
                    "v{v} case {i}"
                );
            }
        }
        assert_eq!(broker.log("bad", 0).expect("log").log_end_offset(), 0);
        let resp = produce(&broker, "bad", good, 8);
        assert_eq!(resp, expect("bad", partition(None, 0, 0, 8)));
        broker.shutdown().expect("shutdown");
    }

    /// An idempotent producer's batch of one record.
    fn idempotent(pid: i64, epoch: i16, seq: i32, ts: i64) -> Vec<u8> {
        let producer = ProducerInfo {
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
        };
        let mut b = BatchBuilder::new(Compression::None, ts).producer(producer, false);
        b.push(Record::new(Some(b"k".to_vec()), Some(b"v".to_vec()), ts));
        b.build(0).expect("build")
    }

    #[test]
    fn idempotent_duplicates_and_sequence_errors_in_every_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        broker
            .create_topic("idem", 1, 1, &[], false)
            .expect("create");
        let ts = now();
        let mut end = 0;
        for v in VERSIONS.0..=VERSIONS.1 {
            let pid = i64::from(v);
            let resp = produce(&broker, "idem", idempotent(pid, 0, 0, ts), v);
            assert_eq!(resp, expect("idem", partition(None, end, 0, v)), "v{v}");
            // The retry: no error, the first offset, the batch's timestamp
            // as log_append_time (Kafka answers a duplicate so).
            let resp = produce(&broker, "idem", idempotent(pid, 0, 0, ts), v);
            let mut dup = partition(None, end, 0, v);
            dup.log_append_time_ms = ts;
            assert_eq!(resp, expect("idem", dup), "v{v} duplicate");
            end += 1;
            let resp = produce(&broker, "idem", idempotent(pid, 0, 5, ts), v);
            assert_eq!(
                resp,
                expect(
                    "idem",
                    partition(Some(ResponseError::OutOfOrderSequenceNumber), -1, 0, v)
                ),
                "v{v} gap"
            );
            let resp = produce(&broker, "idem", idempotent(pid, 1, 0, ts), v);
            assert_eq!(
                resp,
                expect("idem", partition(None, end, 0, v)),
                "v{v} bump"
            );
            end += 1;
            let resp = produce(&broker, "idem", idempotent(pid, 0, 1, ts), v);
            assert_eq!(
                resp,
                expect(
                    "idem",
                    partition(Some(ResponseError::InvalidProducerEpoch), -1, 0, v)
                ),
                "v{v} stale epoch"
            );
        }
        let log = broker.log("idem", 0).expect("log");
        assert_eq!(
            log.log_end_offset(),
            end,
            "retries and refusals appended nothing"
        );
        broker.shutdown().expect("shutdown");
    }

    #[test]
    fn not_enough_replicas_reports_the_log_start_offset_without_a_message() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        broker
            .create_topic(
                "isr",
                1,
                1,
                &[("min.insync.replicas".into(), "2".into())],
                false,
            )
            .expect("create");
        for v in VERSIONS.0..=VERSIONS.1 {
            let resp = produce(&broker, "isr", batch_of(&[Some("a")], &[now()]), v);
            assert_eq!(
                resp,
                expect(
                    "isr",
                    partition(Some(ResponseError::NotEnoughReplicas), -1, 0, v)
                ),
                "v{v}"
            );
        }
        broker.shutdown().expect("shutdown");
    }
}
