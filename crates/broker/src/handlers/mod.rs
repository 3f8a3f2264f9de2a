//! Request dispatch: parse the request header, check the API and version
//! against what is implemented, decode the body, call the API's handler,
//! encode the response. One file per Kafka API; each declares `VERSIONS`,
//! the range it implements and is tested with, which is exactly what
//! ApiVersions advertises.

mod api_versions;
mod create_topics;
mod delete_topics;
pub(crate) mod errors;
mod fetch;
mod list_offsets;
mod metadata;
mod produce;
mod sasl_handshake;

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use proto_kafka::messages::{ApiKey, RequestHeader, ResponseHeader};
use proto_kafka::protocol::{Decodable, Encodable};

use crate::broker::Broker;
use crate::error::{BrokerError, Result};

/// Every implemented API with its version range.
pub(crate) const SUPPORTED: &[(ApiKey, (i16, i16))] = &[
    (ApiKey::Produce, produce::VERSIONS),
    (ApiKey::Fetch, fetch::VERSIONS),
    (ApiKey::ListOffsets, list_offsets::VERSIONS),
    (ApiKey::Metadata, metadata::VERSIONS),
    (ApiKey::SaslHandshake, sasl_handshake::VERSIONS),
    (ApiKey::ApiVersions, api_versions::VERSIONS),
    (ApiKey::CreateTopics, create_topics::VERSIONS),
    (ApiKey::DeleteTopics, delete_topics::VERSIONS),
];

fn supported(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

fn malformed(what: impl std::fmt::Display) -> BrokerError {
    BrokerError::Malformed(what.to_string())
}

/// Handles one request frame; `None` when no response is due (acks=0).
pub(crate) async fn handle(broker: &Arc<Broker>, mut frame: Bytes) -> Result<Option<BytesMut>> {
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
            // Clients probe with their newest ApiVersions; answer in v0
            // layout so any client can read the supported range.
            return api_versions::unsupported_version(correlation_id).map(Some);
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
    };
    match api_key {
        ApiKey::ApiVersions => {
            let req = decode(&mut frame, &ctx)?;
            ctx.respond(&api_versions::handle(broker, req, &ctx))
        }
        ApiKey::Metadata => {
            let req = decode(&mut frame, &ctx)?;
            ctx.respond(&metadata::handle(broker, req, &ctx))
        }
        ApiKey::Produce => {
            let req = decode(&mut frame, &ctx)?;
            match produce::handle(broker, req, &ctx) {
                Some(resp) => ctx.respond(&resp),
                None => Ok(None),
            }
        }
        ApiKey::Fetch => {
            let req = decode(&mut frame, &ctx)?;
            let resp = fetch::handle(broker, req, &ctx).await;
            ctx.respond(&resp)
        }
        ApiKey::ListOffsets => {
            let req = decode(&mut frame, &ctx)?;
            ctx.respond(&list_offsets::handle(broker, req, &ctx))
        }
        ApiKey::CreateTopics => {
            let req = decode(&mut frame, &ctx)?;
            ctx.respond(&create_topics::handle(broker, req, &ctx))
        }
        ApiKey::DeleteTopics => {
            let req = decode(&mut frame, &ctx)?;
            ctx.respond(&delete_topics::handle(broker, req, &ctx))
        }
        ApiKey::SaslHandshake => {
            let req = decode(&mut frame, &ctx)?;
            ctx.respond(&sasl_handshake::handle(req))
        }
        other => Err(malformed(format!("API {other:?} is not implemented"))),
    }
}

/// What a handler knows about the request it serves.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub api_key: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
    pub client_id: String,
}

impl Ctx {
    fn respond<R: Encodable>(&self, resp: &R) -> Result<Option<BytesMut>> {
        encode_frame(
            self.correlation_id,
            self.api_key.response_header_version(self.version),
            |buf| resp.encode(buf, self.version),
        )
        .map(Some)
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
