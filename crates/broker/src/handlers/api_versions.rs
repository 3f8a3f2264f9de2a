//! ApiVersions (key 18): exactly the APIs and versions the handlers
//! implement (`handlers::SUPPORTED`). A request at a version newer than ours
//! gets UNSUPPORTED_VERSION in the v0 layout, which every client reads,
//! with our ranges so it can retry with a version we speak.

use std::sync::Arc;

use bytes::BytesMut;
use proto_kafka::messages::api_versions_response::ApiVersion;
use proto_kafka::messages::{ApiVersionsRequest, ApiVersionsResponse};
use proto_kafka::protocol::Encodable;
use proto_kafka::ResponseError;

use super::{encode_frame, Ctx, SUPPORTED};
use crate::broker::Broker;
use crate::error::Result;

pub(crate) const VERSIONS: (i16, i16) = (0, 4);

fn response() -> ApiVersionsResponse {
    let mut resp = ApiVersionsResponse::default();
    resp.api_keys = SUPPORTED
        .iter()
        .map(|(k, (min, max))| {
            let mut v = ApiVersion::default();
            v.api_key = *k as i16;
            v.min_version = *min;
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
