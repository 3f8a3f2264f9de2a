//! SaslHandshake (key 17): no SASL mechanism is enabled until security
//! lands, so every mechanism gets UNSUPPORTED_SASL_MECHANISM with the (empty)
//! list of enabled ones, as Kafka answers on a listener without SASL.

use std::sync::Arc;

use proto_kafka::messages::{SaslHandshakeRequest, SaslHandshakeResponse};
use proto_kafka::ResponseError;

use super::Ctx;
use crate::broker::Broker;

pub(crate) const VERSIONS: (i16, i16) = (0, 1);

pub(crate) fn handle(
    _broker: &Arc<Broker>,
    req: SaslHandshakeRequest,
    _ctx: &Ctx,
) -> SaslHandshakeResponse {
    tracing::debug!(mechanism = %req.mechanism.as_str(), "SASL requested but not enabled");
    let mut resp = SaslHandshakeResponse::default();
    resp.error_code = ResponseError::UnsupportedSaslMechanism.code();
    resp.mechanisms = Vec::new();
    resp
}
