//! Request dispatch: parse the request header, check the API and version
//! against what is implemented, decode the body, call the API's handler,
//! encode the response. One file per Kafka API; each declares `VERSIONS`,
//! the range it implements and is tested with, which is exactly what
//! ApiVersions advertises.

mod add_offsets_to_txn;
mod add_partitions_to_txn;
mod alter_configs;
mod alter_partition_reassignments;
mod alter_replica_log_dirs;
mod api_versions;
mod create_partitions;
mod create_topics;
mod delete_groups;
mod delete_records;
mod delete_topics;
mod describe_cluster;
mod describe_configs;
mod describe_groups;
mod describe_log_dirs;
mod describe_producers;
pub(crate) mod describe_quorum;
mod describe_topic_partitions;
mod describe_transactions;
mod elect_leaders;
mod end_txn;
pub(crate) mod errors;
mod fetch;
mod find_coordinator;
mod heartbeat;
mod incremental_alter_configs;
mod init_producer_id;
mod join_group;
mod leader_hints;
mod leave_group;
mod list_groups;
mod list_offsets;
mod list_partition_reassignments;
mod list_transactions;
mod metadata;
pub(crate) mod offset_commit;
mod offset_delete;
mod offset_fetch;
mod offset_for_leader_epoch;
mod produce;
mod sasl_handshake;
mod sync_group;
mod txn_offset_commit;
mod write_txn_markers;

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use proto_kafka::messages::{ApiKey, RequestHeader, ResponseHeader};
use proto_kafka::protocol::{Decodable, Encodable};

use crate::broker::Broker;
use crate::connection::Response;
use crate::error::{BrokerError, Result};

/// Declares, once, every implemented API: its handler module, request
/// type, and how its handler runs. Generates `SUPPORTED` (what ApiVersions
/// advertises), the decoded-request enum and the dispatch.
///
/// Every handler is `handle(&Arc<Broker>, Request, &Ctx)` returning a
/// response type or a [`Reply`] (through [`IntoReply`]); how it runs:
/// - `inline`: in memory only; runs on the connection's task.
/// - `blocking`: touches the disk (metadata fsyncs, folder changes, segment
///   reads and deletions, statvfs); runs on the blocking pool so a slow
///   disk never stalls the async workers.
/// - `async`: an `async fn` that waits on something (appends through the
///   partition layer, parked fetches, rebalances) and keeps its own disk
///   work off the async workers.
/// - `async_frame`: `async`, and the handler also gets the request frame
///   the request was decoded from (Produce appends its records in place,
///   from the frame, without copying them).
macro_rules! apis {
    ($($key:ident => $module:ident, $req:ident, $mode:ident;)*) => {
        /// Every implemented API with its version range.
        pub(crate) const SUPPORTED: &[(ApiKey, (i16, i16))] =
            &[$((ApiKey::$key, $module::VERSIONS)),*];

        /// A decoded request body.
        #[derive(Debug)]
        pub(crate) enum Request {
            $($key(proto_kafka::messages::$req)),*
        }

        fn decode_body(frame: &mut Bytes, ctx: &Ctx) -> Result<Request> {
            match ctx.api_key {
                $(ApiKey::$key => Ok(Request::$key(decode(frame, ctx)?)),)*
                other => Err(malformed(format!("API {other:?} is not implemented"))),
            }
        }

        /// Runs the request's handler.
        async fn dispatch(
            broker: &Arc<Broker>,
            req: Request,
            ctx: Ctx,
            frame: Option<Bytes>,
        ) -> Result<Reply> {
            match req {
                $(Request::$key(req) => run!($mode, $module, broker, req, ctx, frame),)*
            }
        }
    };
}

/// One handler call, by how it runs (see [`apis!`]).
macro_rules! run {
    (inline, $module:ident, $broker:ident, $req:ident, $ctx:ident, $frame:ident) => {{
        drop($frame);
        $module::handle($broker, $req, &$ctx).into_reply(&$ctx)
    }};
    (blocking, $module:ident, $broker:ident, $req:ident, $ctx:ident, $frame:ident) => {{
        drop($frame);
        let broker = Arc::clone($broker);
        crate::blocking::on_pool(move || $module::handle(&broker, $req, &$ctx).into_reply(&$ctx))
            .await
    }};
    (async, $module:ident, $broker:ident, $req:ident, $ctx:ident, $frame:ident) => {{
        drop($frame);
        $module::handle($broker, $req, &$ctx)
            .await
            .into_reply(&$ctx)
    }};
    (async_frame, $module:ident, $broker:ident, $req:ident, $ctx:ident, $frame:ident) => {
        $module::handle($broker, $req, $frame, &$ctx)
            .await
            .into_reply(&$ctx)
    };
}

apis! {
    Produce => produce, ProduceRequest, async_frame;
    Fetch => fetch, FetchRequest, async;
    ListOffsets => list_offsets, ListOffsetsRequest, blocking;
    Metadata => metadata, MetadataRequest, blocking;
    SaslHandshake => sasl_handshake, SaslHandshakeRequest, inline;
    ApiVersions => api_versions, ApiVersionsRequest, inline;
    CreateTopics => create_topics, CreateTopicsRequest, blocking;
    DeleteTopics => delete_topics, DeleteTopicsRequest, blocking;
    DeleteRecords => delete_records, DeleteRecordsRequest, blocking;
    OffsetForLeaderEpoch => offset_for_leader_epoch, OffsetForLeaderEpochRequest, inline;
    DescribeConfigs => describe_configs, DescribeConfigsRequest, inline;
    AlterConfigs => alter_configs, AlterConfigsRequest, blocking;
    AlterReplicaLogDirs => alter_replica_log_dirs, AlterReplicaLogDirsRequest, blocking;
    DescribeLogDirs => describe_log_dirs, DescribeLogDirsRequest, blocking;
    ElectLeaders => elect_leaders, ElectLeadersRequest, blocking;
    AlterPartitionReassignments => alter_partition_reassignments, AlterPartitionReassignmentsRequest, blocking;
    ListPartitionReassignments => list_partition_reassignments, ListPartitionReassignmentsRequest, inline;
    CreatePartitions => create_partitions, CreatePartitionsRequest, blocking;
    IncrementalAlterConfigs => incremental_alter_configs, IncrementalAlterConfigsRequest, blocking;
    DescribeCluster => describe_cluster, DescribeClusterRequest, inline;
    DescribeQuorum => describe_quorum, DescribeQuorumRequest, async;
    FindCoordinator => find_coordinator, FindCoordinatorRequest, blocking;
    JoinGroup => join_group, JoinGroupRequest, async;
    SyncGroup => sync_group, SyncGroupRequest, async;
    Heartbeat => heartbeat, HeartbeatRequest, inline;
    LeaveGroup => leave_group, LeaveGroupRequest, async;
    DescribeGroups => describe_groups, DescribeGroupsRequest, inline;
    ListGroups => list_groups, ListGroupsRequest, inline;
    DeleteGroups => delete_groups, DeleteGroupsRequest, async;
    OffsetCommit => offset_commit, OffsetCommitRequest, async;
    OffsetFetch => offset_fetch, OffsetFetchRequest, inline;
    OffsetDelete => offset_delete, OffsetDeleteRequest, async;
    DescribeTopicPartitions => describe_topic_partitions, DescribeTopicPartitionsRequest, inline;
    InitProducerId => init_producer_id, InitProducerIdRequest, async;
    DescribeProducers => describe_producers, DescribeProducersRequest, inline;
    AddPartitionsToTxn => add_partitions_to_txn, AddPartitionsToTxnRequest, async;
    AddOffsetsToTxn => add_offsets_to_txn, AddOffsetsToTxnRequest, async;
    EndTxn => end_txn, EndTxnRequest, async;
    DescribeTransactions => describe_transactions, DescribeTransactionsRequest, inline;
    ListTransactions => list_transactions, ListTransactionsRequest, inline;
    WriteTxnMarkers => write_txn_markers, WriteTxnMarkersRequest, async;
    TxnOffsetCommit => txn_offset_commit, TxnOffsetCommitRequest, async;
}

/// What a handler answers.
#[derive(Debug)]
pub(crate) enum Reply {
    /// A response frame: bytes, and segment file regions sent zero-copy.
    Frame(Response),
    /// No response is due (acks=0).
    Nothing,
    /// Close the connection (the reason is logged).
    Close(String),
}

/// A handler's result as a [`Reply`]: a response type is encoded at the
/// request's version.
pub(crate) trait IntoReply {
    fn into_reply(self, ctx: &Ctx) -> Result<Reply>;
}

impl<R: Encodable> IntoReply for R {
    fn into_reply(self, ctx: &Ctx) -> Result<Reply> {
        ctx.encode(&self).map(Reply::Frame)
    }
}

impl IntoReply for Reply {
    fn into_reply(self, _ctx: &Ctx) -> Result<Reply> {
        Ok(self)
    }
}

fn supported(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

fn malformed(what: impl std::fmt::Display) -> BrokerError {
    BrokerError::Malformed(what.to_string())
}

/// A request frame after parsing.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// ApiVersions at a version we do not speak: answer in v0 layout.
    UnsupportedApiVersions { correlation_id: i32 },
    /// A decoded request; for an `async_frame` API (Produce) also the
    /// frame its body was decoded from.
    Request(Ctx, Box<Request>, Option<Bytes>),
}

/// Parses a frame: header, API and version checks, body. Everything that
/// reads untrusted bytes before a handler runs is here (and fuzzed).
pub(crate) fn parse(mut frame: Bytes) -> Result<Parsed> {
    if frame.len() < 8 {
        return Err(malformed(format!(
            "request of {} bytes has no header",
            frame.len()
        )));
    }
    let raw_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let api_key =
        ApiKey::try_from(raw_key).map_err(|()| malformed(format!("unknown API key {raw_key}")))?;
    let Some((min, max)) = supported(api_key) else {
        return Err(malformed(format!("API {api_key:?} is not implemented")));
    };
    if version < min || version > max {
        if api_key == ApiKey::ApiVersions {
            return Ok(Parsed::UnsupportedApiVersions { correlation_id });
        }
        return Err(malformed(format!(
            "{api_key:?} v{version} is not supported (supported: {min}-{max})"
        )));
    }
    let header = RequestHeader::decode(&mut frame, api_key.request_header_version(version))
        .map_err(|e| malformed(format!("{api_key:?} request header: {e}")))?;
    let ctx = Ctx {
        api_key,
        version,
        correlation_id,
        client_id: header
            .client_id
            .as_ref()
            .map(|s| s.to_string())
            .unwrap_or_default(),
        peer: None,
    };
    // Produce's records are slices of the body; the handler takes the body
    // over to append them in place (the rest of the frame is dropped here).
    let body = (api_key == ApiKey::Produce).then(|| frame.clone());
    let req = decode_body(&mut frame, &ctx)?;
    Ok(Parsed::Request(ctx, Box::new(req), body))
}

/// Handles one request frame from `peer`; `None` when no response is due
/// (acks=0). An error closes the connection.
pub(crate) async fn handle(
    broker: &Arc<Broker>,
    frame: Bytes,
    peer: Option<std::net::SocketAddr>,
) -> Result<Option<Response>> {
    let (mut ctx, req, body) = match parse(frame)? {
        Parsed::UnsupportedApiVersions { correlation_id } => {
            // Clients probe with their newest ApiVersions; answer in v0
            // layout so any client can read the supported range.
            return api_versions::unsupported_version(correlation_id).map(|b| Some(b.into()));
        }
        Parsed::Request(ctx, req, body) => (ctx, *req, body),
    };
    ctx.peer = peer;
    match dispatch(broker, req, ctx, body).await? {
        Reply::Frame(response) => Ok(Some(response)),
        Reply::Nothing => Ok(None),
        Reply::Close(why) => Err(malformed(why)),
    }
}

/// Decodes a request frame (without its size prefix) the way the broker
/// does before handling it; for fuzzing and tools. Never panics.
pub fn decode_request(frame: &[u8]) -> Result<()> {
    parse(Bytes::copy_from_slice(frame)).map(|_| ())
}

/// What a handler knows about the request it serves.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    pub api_key: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
    pub client_id: String,
    /// The client's address (the connection's peer), when known.
    pub peer: Option<std::net::SocketAddr>,
}

impl Ctx {
    /// The response frame of `resp` at the request's version.
    fn encode<R: Encodable>(&self, resp: &R) -> Result<Response> {
        encode_frame(
            self.correlation_id,
            self.api_key.response_header_version(self.version),
            |buf| resp.encode(buf, self.version),
        )
        .map(Response::from)
    }
}

fn decode<R: Decodable>(frame: &mut Bytes, ctx: &Ctx) -> Result<R> {
    R::decode(frame, ctx.version)
        .map_err(|e| malformed(format!("{:?} v{} body: {e}", ctx.api_key, ctx.version)))
}

/// `size, header, body` with the size filled in.
fn encode_frame(
    correlation_id: i32,
    header_version: i16,
    body: impl FnOnce(&mut BytesMut) -> proto_kafka::error::Result<()>,
) -> Result<BytesMut> {
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    header
        .encode(&mut buf, header_version)
        .map_err(|e| malformed(format!("encoding response header: {e}")))?;
    body(&mut buf).map_err(|e| malformed(format!("encoding response: {e}")))?;
    let size = (buf.len() - 4) as i32;
    buf[0..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf)
}

/// Helpers for the handlers' unit tests: a broker in a temporary folder,
/// request contexts, and encode/decode round trips.
#[cfg(test)]
pub(crate) mod test_support {
    use std::path::Path;
    use std::sync::Arc;

    use bytes::BytesMut;
    use proto_kafka::messages::ApiKey;
    use proto_kafka::protocol::{Decodable, Encodable};
    use sluice_protocol::record::{BatchBuilder, Compression, Record};

    use super::Ctx;
    use crate::broker::Broker;
    use crate::config::BrokerConfig;

    /// A broker on `dir` with server-key overrides.
    pub(crate) fn open_broker(dir: &Path, overrides: &[(&str, &str)]) -> Arc<Broker> {
        let mut c = BrokerConfig::default();
        c.set("log.dirs", &dir.display().to_string())
            .expect("log.dirs");
        for (k, v) in overrides {
            c.set(k, v).expect("override");
        }
        Broker::open(c).expect("open broker")
    }

    /// Runs a handler future to completion on a current-thread runtime
    /// (for handler tests written as plain `#[test]`s).
    pub(crate) fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    pub(crate) fn ctx(api_key: ApiKey, version: i16) -> Ctx {
        Ctx {
            api_key,
            version,
            correlation_id: 1,
            client_id: "test".into(),
            peer: None,
        }
    }

    /// Encodes at `version` (failing on fields the version cannot carry)
    /// and decodes the bytes back.
    pub(crate) fn roundtrip<R: Encodable + Decodable>(r: &R, version: i16) -> R {
        let mut buf = BytesMut::new();
        r.encode(&mut buf, version)
            .unwrap_or_else(|e| panic!("encode v{version}: {e}"));
        let mut bytes = buf.freeze();
        let out =
            R::decode(&mut bytes, version).unwrap_or_else(|e| panic!("decode v{version}: {e}"));
        assert!(bytes.is_empty(), "v{version}: trailing bytes");
        out
    }

    /// Sends one request through the whole dispatch path (`handle`: frame
    /// parsing, version checks, the handler) and decodes the response;
    /// `None` when no response is due (acks=0).
    pub(crate) async fn call<Req: Encodable, Resp: Decodable>(
        broker: &Arc<Broker>,
        api_key: ApiKey,
        version: i16,
        req: &Req,
    ) -> Option<Resp> {
        use bytes::Buf;
        use proto_kafka::messages::{RequestHeader, ResponseHeader};
        use proto_kafka::protocol::StrBytes;
        let mut buf = BytesMut::new();
        let mut header = RequestHeader::default();
        header.request_api_key = api_key as i16;
        header.request_api_version = version;
        header.correlation_id = 7;
        header.client_id = Some(StrBytes::from_static_str("test"));
        header
            .encode(&mut buf, api_key.request_header_version(version))
            .expect("encode header");
        req.encode(&mut buf, version).expect("encode request");
        let resp = super::handle(broker, buf.freeze(), None)
            .await
            .expect("handled")?;
        let mut frame = resp.to_bytes().expect("response bytes");
        let size = frame.get_i32();
        assert_eq!(size as usize, frame.len(), "response size prefix");
        let header = ResponseHeader::decode(&mut frame, api_key.response_header_version(version))
            .expect("response header");
        assert_eq!(header.correlation_id, 7);
        let out = Resp::decode(&mut frame, version).expect("decode response");
        assert!(!frame.has_remaining(), "trailing bytes in the response");
        Some(out)
    }

    /// Appends `count` one-record batches to a partition through the
    /// partition layer (its leader epoch; the high watermark follows).
    pub(crate) fn append(broker: &Broker, topic: &str, partition: i32, count: usize) {
        let part = broker.partition(topic, partition).expect("partition");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        for i in 0..count {
            let mut b = BatchBuilder::new(Compression::None, now);
            b.push(Record::new(
                Some(format!("k{i}").into_bytes()),
                Some(vec![b'v'; 100]),
                now,
            ));
            let bytes = b.build(0).expect("batch");
            part.append_for_coordinator(bytes).expect("append");
        }
    }
}

#[cfg(test)]
mod parse_tests {
    use super::decode_request;

    /// Request header v1 (v2 with `flexible`: empty tagged fields).
    fn header(key: i16, version: i16, flexible: bool) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend_from_slice(&key.to_be_bytes());
        h.extend_from_slice(&version.to_be_bytes());
        h.extend_from_slice(&7i32.to_be_bytes());
        h.extend_from_slice(&1i16.to_be_bytes());
        h.push(b'c');
        if flexible {
            h.push(0);
        }
        h
    }

    /// Frames whose array counts claim 2^31 - 1 elements (Int32 or compact
    /// varint counts) are refused before anything is allocated for the
    /// elements: proto-kafka checks a count against the bytes left in the
    /// frame before `Vec::with_capacity` (each element takes at least one
    /// byte). Top-level and nested arrays, old and flexible versions.
    #[test]
    fn array_counts_claiming_billions_are_refused_before_allocating() {
        const I32_MAX: [u8; 4] = [0x7f, 0xff, 0xff, 0xff];
        // 2^31 as an unsigned varint: a compact array of 2^31 - 1.
        const COMPACT_2_31: [u8; 5] = [0x80, 0x80, 0x80, 0x80, 0x08];
        let pad = [0u8; 64];
        let cases: Vec<(&str, Vec<u8>)> = vec![
            // CreateTopics v4: topics[]
            (
                "CreateTopics v4 topics",
                [header(19, 4, false), I32_MAX.to_vec(), pad.to_vec()].concat(),
            ),
            // CreateTopics v5 (flexible): topics[]
            (
                "CreateTopics v5 topics",
                [header(19, 5, true), COMPACT_2_31.to_vec(), pad.to_vec()].concat(),
            ),
            // CreateTopics v4: one topic "t", 1 partition, rf 1,
            // assignments[] claiming 2^31 - 1.
            (
                "CreateTopics v4 assignments",
                [
                    header(19, 4, false),
                    vec![0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 1, 0, 1],
                    I32_MAX.to_vec(),
                    pad.to_vec(),
                ]
                .concat(),
            ),
            // Metadata v4: topics[]
            (
                "Metadata v4 topics",
                [header(3, 4, false), I32_MAX.to_vec(), pad.to_vec()].concat(),
            ),
            // Metadata v12 (flexible): topics[]
            (
                "Metadata v12 topics",
                [header(3, 12, true), COMPACT_2_31.to_vec(), pad.to_vec()].concat(),
            ),
            // Produce v3: transactional_id null, acks, timeout, topic_data[]
            (
                "Produce v3 topic_data",
                [
                    header(0, 3, false),
                    vec![0xff, 0xff, 0, 1, 0, 0, 0x27, 0x10],
                    I32_MAX.to_vec(),
                    pad.to_vec(),
                ]
                .concat(),
            ),
            // Fetch v4: replica_id, max_wait, min_bytes, max_bytes,
            // isolation, topics[]
            (
                "Fetch v4 topics",
                [
                    header(1, 4, false),
                    vec![0xff; 4],
                    vec![0; 12],
                    vec![0],
                    I32_MAX.to_vec(),
                    pad.to_vec(),
                ]
                .concat(),
            ),
            // DeleteTopics v1: topic_names[]
            (
                "DeleteTopics v1 names",
                [header(20, 1, false), I32_MAX.to_vec(), pad.to_vec()].concat(),
            ),
        ];
        for (what, frame) in cases {
            let e = decode_request(&frame).expect_err(what);
            let text = e.to_string();
            assert!(
                text.contains("elements but only") && text.contains("bytes remain"),
                "{what}: {text}"
            );
        }
    }

    /// A small in-CI version of the fuzz target: random frames, and random
    /// bodies behind valid headers of every API and version, never panic.
    #[test]
    fn random_frames_never_panic() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for n in 0..20_000usize {
            let len = (next() % 256) as usize;
            let mut frame: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if frame.len() >= 8 && n % 2 == 0 {
                let (key, (lo, hi)) = super::SUPPORTED[n % super::SUPPORTED.len()];
                let version = lo + (next() % (hi - lo + 1) as u64) as i16;
                frame[0..2].copy_from_slice(&(key as i16).to_be_bytes());
                frame[2..4].copy_from_slice(&version.to_be_bytes());
            }
            let _ = decode_request(&frame);
        }
    }
}
