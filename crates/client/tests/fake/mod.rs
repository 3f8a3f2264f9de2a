//! Pieces shared by the client tests that script fake brokers: reading a
//! request (key, version, correlation id, body), framing a response, an
//! ApiVersions answer and a one-broker Metadata answer.

// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use bytes::{BufMut, Bytes, BytesMut};
use proto_kafka::messages::api_versions_response::ApiVersion;
use proto_kafka::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use proto_kafka::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, MetadataResponse, RequestHeader, ResponseHeader,
    TopicName,
};
use proto_kafka::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::AsyncReadExt;
use tokio::net::tcp::OwnedReadHalf;

/// One request, its header read.
pub struct Request {
    pub key: ApiKey,
    pub version: i16,
    pub correlation: i32,
    /// The body, after the header.
    pub body: Bytes,
}

/// Reads the next request; `None` once the connection ends.
pub async fn read_request(rd: &mut OwnedReadHalf) -> Option<Request> {
    let len = rd.read_i32().await.ok()?;
    let mut buf = vec![0u8; usize::try_from(len).ok()?];
    rd.read_exact(&mut buf).await.ok()?;
    let key = ApiKey::try_from(i16::from_be_bytes([buf[0], buf[1]])).expect("key");
    let version = i16::from_be_bytes([buf[2], buf[3]]);
    let mut body = Bytes::from(buf);
    let header =
        RequestHeader::decode(&mut body, key.request_header_version(version)).expect("hdr");
    Some(Request {
        key,
        version,
        correlation: header.correlation_id,
        body,
    })
}

/// A size-prefixed response frame answering `correlation`.
pub fn frame<E: Encodable>(key: ApiKey, version: i16, correlation: i32, body: &E) -> Bytes {
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation;
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    header
        .encode(&mut buf, key.response_header_version(version))
        .expect("header");
    body.encode(&mut buf, version).expect("body");
    let len = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    buf.freeze()
}

/// An ApiVersions answer offering `apis` (key, min version, max version).
pub fn api_versions(apis: &[(ApiKey, i16, i16)]) -> ApiVersionsResponse {
    let mut resp = ApiVersionsResponse::default();
    for &(k, min, max) in apis {
        let mut v = ApiVersion::default();
        v.api_key = k as i16;
        v.min_version = min;
        v.max_version = max;
        resp.api_keys.push(v);
    }
    resp
}

/// A Metadata answer naming one broker (id 1 at 127.0.0.1:`port`, also the
/// controller) and `topic` with `partitions` partitions, all led by it.
pub fn one_broker_metadata(port: u16, topic: &'static str, partitions: i32) -> MetadataResponse {
    let mut resp = MetadataResponse::default();
    let mut b = MetadataResponseBroker::default();
    b.node_id = BrokerId(1);
    b.host = StrBytes::from_static_str("127.0.0.1");
    b.port = i32::from(port);
    resp.brokers.push(b);
    resp.controller_id = BrokerId(1);
    let mut t = MetadataResponseTopic::default();
    t.name = Some(TopicName(StrBytes::from_static_str(topic)));
    for i in 0..partitions {
        let mut p = MetadataResponsePartition::default();
        p.partition_index = i;
        p.leader_id = BrokerId(1);
        p.replica_nodes = vec![BrokerId(1)];
        p.isr_nodes = vec![BrokerId(1)];
        t.partitions.push(p);
    }
    resp.topics.push(t);
    resp
}
