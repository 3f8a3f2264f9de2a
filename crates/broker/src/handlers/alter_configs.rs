//! AlterConfigs (key 33), the legacy whole-set form: a topic resource's
//! configs replace all of the topic's overrides (keys left out go back to
//! the broker defaults), validated together and applied to the topic's logs
//! at once; `validate_only` checks without changing. Checks as Kafka's
//! `ConfigAdminManager`: a resource named twice, a key named twice or a
//! null value is INVALID_REQUEST; a bad key or value is INVALID_CONFIG.
//! Broker resources (this node or the cluster default) are accepted only
//! when they change nothing: Sluice has no dynamic broker configs, so any
//! key is INVALID_REQUEST, as Kafka answers for read-only broker keys.

use std::collections::HashMap;
use std::sync::Arc;

use proto_kafka::messages::alter_configs_response::AlterConfigsResourceResponse;
use proto_kafka::messages::{AlterConfigsRequest, AlterConfigsResponse};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;
use sluice_controller::records::{RESOURCE_BROKER, RESOURCE_TOPIC};

use super::describe_configs::{check_broker_name, resource_topic};
use super::Ctx;
use crate::broker::{ApiError, Broker};

pub(crate) const VERSIONS: (i16, i16) = (0, 2);

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: AlterConfigsRequest,
    _ctx: &Ctx,
) -> AlterConfigsResponse {
    let counts = count_resources(
        req.resources
            .iter()
            .map(|r| (r.resource_type, r.resource_name.as_str())),
    );
    let mut resp = AlterConfigsResponse::default();
    for r in &req.resources {
        let name = r.resource_name.as_str();
        let configs: Vec<(&str, Option<&str>)> = r
            .configs
            .iter()
            .map(|c| (c.name.as_str(), c.value.as_ref().map(|v| v.as_str())))
            .collect();
        let result = if counts[&(r.resource_type, name)] > 1 {
            Err(duplicate_resource())
        } else {
            check_keys(configs.iter().map(|(k, _)| *k)).and_then(|()| {
                check_nulls(configs.iter().filter(|(_, v)| v.is_none()).map(|(k, _)| *k))
            })
        }
        .and_then(|()| match r.resource_type {
            RESOURCE_TOPIC => {
                alterable_topic(broker, name)?;
                let changes: Vec<(String, Option<String>)> = configs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
                    .collect();
                broker.alter_topic_configs(name, &changes, true, req.validate_only)
            }
            RESOURCE_BROKER => {
                check_broker_name(broker, name)?;
                // The whole set of the resource's dynamic configs.
                let next: std::collections::BTreeMap<String, String> = configs
                    .iter()
                    .filter_map(|(k, v)| Some((k.to_string(), (*v)?.to_string())))
                    .collect();
                broker.edit_broker_configs(name, req.validate_only, |_| Ok(next))
            }
            other => Err(unknown_resource_type(other)),
        });
        let mut out = AlterConfigsResourceResponse::default();
        out.resource_type = r.resource_type;
        out.resource_name = r.resource_name.clone();
        out.error_message = None;
        if let Err(e) = result {
            tracing::debug!(resource = %name, error = ?e, "AlterConfigs");
            out.error_code = e.code.code();
            out.error_message = e.message.map(StrBytes::from_string);
        }
        resp.responses.push(out);
    }
    resp
}

/// A topic resource that may be altered: Kafka's errors for the default
/// (empty) resource, bad names and missing topics.
pub(crate) fn alterable_topic(broker: &Broker, name: &str) -> Result<(), ApiError> {
    if name.is_empty() {
        return Err(ApiError::new(
            ResponseError::InvalidRequest,
            "Default topic resources are not allowed.",
        ));
    }
    match resource_topic(broker, name) {
        Ok(_) => Ok(()),
        Err(e) if e.code == ResponseError::UnknownTopicOrPartition => Err(ApiError::new(
            e.code,
            format!("The topic '{name}' does not exist."),
        )),
        Err(e) => Err(e),
    }
}

/// How often each `(type, name)` resource appears.
pub(crate) fn count_resources<'a>(
    resources: impl Iterator<Item = (i8, &'a str)>,
) -> HashMap<(i8, &'a str), usize> {
    let mut counts = HashMap::new();
    for r in resources {
        *counts.entry(r).or_insert(0) += 1;
    }
    counts
}

pub(crate) fn duplicate_resource() -> ApiError {
    ApiError::new(
        ResponseError::InvalidRequest,
        "Each resource must appear at most once.",
    )
}

pub(crate) fn unknown_resource_type(t: i8) -> ApiError {
    ApiError::new(
        ResponseError::InvalidRequest,
        format!("Unknown resource type {t}"),
    )
}

/// A key named twice in one resource is INVALID_REQUEST.
pub(crate) fn check_keys<'a>(keys: impl Iterator<Item = &'a str>) -> Result<(), ApiError> {
    let mut seen = std::collections::HashSet::new();
    for k in keys {
        if !seen.insert(k) {
            return Err(ApiError::new(
                ResponseError::InvalidRequest,
                "Error due to duplicate config keys",
            ));
        }
    }
    Ok(())
}

/// Keys given a null value where one is needed: INVALID_REQUEST.
pub(crate) fn check_nulls<'a>(keys: impl Iterator<Item = &'a str>) -> Result<(), ApiError> {
    let nulls: Vec<&str> = keys.collect();
    if nulls.is_empty() {
        return Ok(());
    }
    Err(ApiError::new(
        ResponseError::InvalidRequest,
        format!("Null value not supported for : {}", nulls.join(", ")),
    ))
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
    use proto_kafka::messages::ApiKey;

    use super::super::test_support::{ctx, open_broker, roundtrip};
    use super::*;

    fn resource(t: i8, name: &str, configs: &[(&str, Option<&str>)]) -> AlterConfigsResource {
        let mut r = AlterConfigsResource::default();
        r.resource_type = t;
        r.resource_name = StrBytes::from_string(name.to_string());
        r.configs = configs
            .iter()
            .map(|(k, v)| {
                let mut c = AlterableConfig::default();
                c.name = StrBytes::from_string(k.to_string());
                c.value = v.map(|v| StrBytes::from_string(v.to_string()));
                c
            })
            .collect();
        r
    }

    fn codes(resp: &AlterConfigsResponse) -> Vec<i16> {
        resp.responses.iter().map(|r| r.error_code).collect()
    }

    #[test]
    fn replaces_the_whole_set_in_every_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        for v in VERSIONS.0..=VERSIONS.1 {
            let name = format!("t{v}");
            broker
                .create_topic(
                    &name,
                    2,
                    1,
                    &[("retention.ms".into(), "1000".into())],
                    false,
                )
                .expect("create");
            let mut req = AlterConfigsRequest::default();
            req.resources = vec![
                resource(RESOURCE_TOPIC, &name, &[("segment.bytes", Some("65536"))]),
                resource(RESOURCE_TOPIC, "missing", &[]),
                resource(RESOURCE_BROKER, "1", &[]),
                resource(RESOURCE_BROKER, "1", &[]),
                resource(RESOURCE_BROKER, "", &[("log.retention.hours", Some("1"))]),
                resource(8, "1", &[]),
            ];
            let resp = roundtrip(&handle(&broker, req, &ctx(ApiKey::AlterConfigs, v)), v);
            let r = ResponseError::InvalidRequest.code();
            assert_eq!(
                codes(&resp),
                vec![0, ResponseError::UnknownTopicOrPartition.code(), r, r, r, r]
            );
            let t = broker.image().topic(&name).cloned().expect("topic");
            assert_eq!(
                t.configs.len(),
                1,
                "retention.ms was dropped: {:?}",
                t.configs
            );
            assert_eq!(t.configs["segment.bytes"], "65536");
            for p in 0..2 {
                let c = broker.log(&name, p).expect("log").config();
                assert_eq!(c.segment_bytes, 65536);
                assert_eq!(c.retention_ms, 604_800_000);
            }

            let mut req = AlterConfigsRequest::default();
            req.validate_only = true;
            req.resources = vec![
                resource(RESOURCE_TOPIC, &name, &[("segment.bytes", Some("x"))]),
                resource(RESOURCE_TOPIC, "a", &[("k", Some("1")), ("k", Some("2"))]),
                resource(RESOURCE_TOPIC, "b", &[("k", None)]),
                resource(RESOURCE_TOPIC, &format!("{name}x"), &[]),
            ];
            let resp = handle(&broker, req, &ctx(ApiKey::AlterConfigs, v));
            assert_eq!(
                codes(&resp),
                vec![
                    ResponseError::InvalidConfig.code(),
                    r,
                    r,
                    ResponseError::UnknownTopicOrPartition.code()
                ]
            );
            let mut req = AlterConfigsRequest::default();
            req.validate_only = true;
            req.resources = vec![resource(RESOURCE_TOPIC, &name, &[])];
            let resp = handle(&broker, req, &ctx(ApiKey::AlterConfigs, v));
            assert_eq!(codes(&resp), vec![0]);
            // validate_only changed nothing.
            assert_eq!(broker.image().topic(&name).expect("t").configs.len(), 1);
        }
        broker.shutdown().expect("shutdown");
    }
}
