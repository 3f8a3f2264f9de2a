//! DescribeCluster (key 60): the cluster id, the registered brokers that
//! are not fenced (v2 with `include_fenced_brokers`: the fenced ones too,
//! marked `is_fenced`) and the controller id clients are given. Sluice's
//! listener is a broker endpoint, so a v1+
//! request for the controllers endpoint type gets UNSUPPORTED_ENDPOINT_TYPE,
//! as a Kafka broker answers. Authorized operations, when asked for, are
//! every cluster operation (there is no authorizer).

use std::sync::Arc;

use proto_kafka::messages::describe_cluster_response::DescribeClusterBroker;
use proto_kafka::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;

use super::Ctx;
use crate::broker::Broker;

pub(crate) const VERSIONS: (i16, i16) = (0, 2);

/// `EndpointType.BROKER`.
const ENDPOINT_BROKER: i8 = 1;

/// Kafka's "authorized operations not requested" marker.
const OPS_NOT_REQUESTED: i32 = i32::MIN;

/// The cluster resource's operations (Kafka's `AclEntry.supportedOperations`
/// for CLUSTER) as the `AclOperation` code bit field: CREATE (5), ALTER (7),
/// DESCRIBE (8), CLUSTER_ACTION (9), DESCRIBE_CONFIGS (10),
/// ALTER_CONFIGS (11), IDEMPOTENT_WRITE (12).
const CLUSTER_OPS: i32 =
    (1 << 5) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12);

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: DescribeClusterRequest,
    ctx: &Ctx,
) -> DescribeClusterResponse {
    let mut resp = DescribeClusterResponse::default();
    resp.error_message = None;
    resp.cluster_id = StrBytes::from_string(broker.cluster_id.clone());
    if ctx.version >= 1 && req.endpoint_type != ENDPOINT_BROKER {
        resp.error_code = ResponseError::UnsupportedEndpointType.code();
        resp.error_message = Some(StrBytes::from_string(format!(
            "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type {}",
            endpoint_name(req.endpoint_type)
        )));
        return resp;
    }
    resp.controller_id = BrokerId(broker.controller_id());
    resp.brokers = broker
        .registered_brokers(ctx.version >= 2 && req.include_fenced_brokers)
        .into_iter()
        .map(|c| {
            let mut b = DescribeClusterBroker::default();
            b.broker_id = BrokerId(c.id);
            b.host = StrBytes::from_string(c.host);
            b.port = c.port;
            b.rack = c.rack.map(StrBytes::from_string);
            b.is_fenced = c.fenced;
            b
        })
        .collect();
    resp.cluster_authorized_operations = if req.include_cluster_authorized_operations {
        CLUSTER_OPS
    } else {
        OPS_NOT_REQUESTED
    };
    resp
}

fn endpoint_name(t: i8) -> String {
    match t {
        1 => "BROKER".into(),
        2 => "CONTROLLER".into(),
        other => format!("UNKNOWN({other})"),
    }
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::ApiKey;

    use super::super::test_support::{ctx, open_broker, roundtrip};
    use super::*;

    #[test]
    fn this_node_in_every_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[("listeners", "PLAINTEXT://127.0.0.1:19092")]);
        for v in VERSIONS.0..=VERSIONS.1 {
            let mut req = DescribeClusterRequest::default();
            req.include_cluster_authorized_operations = v == 1;
            if v >= 2 {
                req.include_fenced_brokers = true;
            }
            let resp = roundtrip(&handle(&broker, req, &ctx(ApiKey::DescribeCluster, v)), v);
            assert_eq!(resp.error_code, 0);
            assert_eq!(resp.cluster_id.as_str(), broker.cluster_id);
            assert_eq!(resp.controller_id, BrokerId(1));
            assert_eq!(resp.brokers.len(), 1);
            assert_eq!(resp.brokers[0].port, 19092);
            assert_eq!(resp.brokers[0].host.as_str(), "127.0.0.1");
            let ops = if v == 1 {
                CLUSTER_OPS
            } else {
                OPS_NOT_REQUESTED
            };
            assert_eq!(resp.cluster_authorized_operations, ops);
            if v >= 1 {
                let mut req = DescribeClusterRequest::default();
                req.endpoint_type = 2;
                let resp = roundtrip(&handle(&broker, req, &ctx(ApiKey::DescribeCluster, v)), v);
                assert_eq!(
                    resp.error_code,
                    ResponseError::UnsupportedEndpointType.code()
                );
            }
        }
        assert_eq!(CLUSTER_OPS, 8096);
        broker.shutdown().expect("shutdown");
    }
}
