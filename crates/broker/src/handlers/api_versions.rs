//! ApiVersions (key 18): exactly the APIs and versions the handlers
//! implement (`handlers::SUPPORTED`), except Produce's advertised floor (0,
//! as in Kafka 4; see `PRODUCE_ADVERTISED_MIN`). A request at a version newer than ours
//! gets UNSUPPORTED_VERSION in the v0 layout, which every client reads,
//! with our ranges so it can retry with a version we speak.

use std::sync::Arc;

use bytes::BytesMut;
use proto_kafka::messages::api_versions_response::ApiVersion;
use proto_kafka::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use proto_kafka::protocol::Encodable;
use proto_kafka::ResponseError;

use super::{encode_frame, Ctx, SUPPORTED};
use crate::broker::Broker;
use crate::error::Result;

pub(crate) const VERSIONS: (i16, i16) = (0, 4);

/// The lowest Produce version advertised, though v0-2 are refused like any
/// unsupported version: Kafka 4 does the same
/// (`ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION`, KAFKA-18659)
/// because librdkafka before 2.11.1 silently stops compressing with gzip,
/// snappy and lz4 when the broker's Produce range does not include v0.
const PRODUCE_ADVERTISED_MIN: i16 = 0;

fn response() -> ApiVersionsResponse {
    let mut resp = ApiVersionsResponse::default();
    resp.api_keys = SUPPORTED
        .iter()
        .map(|(k, (min, max))| {
            let mut v = ApiVersion::default();
            v.api_key = *k as i16;
            v.min_version = if *k == ApiKey::Produce {
                PRODUCE_ADVERTISED_MIN
            } else {
                *min
            };
            v.max_version = *max;
            v
        })
        .collect();
    resp.finalized_features_epoch = -1;
    resp
}

pub(crate) fn handle(
    _broker: &Arc<Broker>,
    req: ApiVersionsRequest,
    ctx: &Ctx,
) -> ApiVersionsResponse {
    tracing::debug!(
        client = %ctx.client_id,
        software = %req.client_software_name.as_str(),
        software_version = %req.client_software_version.as_str(),
        "ApiVersions"
    );
    response()
}

/// The v0-layout UNSUPPORTED_VERSION answer.
pub(crate) fn unsupported_version(correlation_id: i32) -> Result<BytesMut> {
    let mut resp = response();
    resp.error_code = ResponseError::UnsupportedVersion.code();
    encode_frame(correlation_id, 0, |buf| resp.encode(buf, 0))
}
