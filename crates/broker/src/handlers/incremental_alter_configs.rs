//! IncrementalAlterConfigs (key 44): per-key changes to a topic's config
//! overrides: SET (0), DELETE (1, back to the broker default), and for list
//! keys (`cleanup.policy`) APPEND (2) and SUBTRACT (3), which start from the
//! topic's effective value. The changes are computed under the metadata
//! change lock, validated as a whole (INVALID_CONFIG naming the bad key)
//! and applied to the topic's logs at once; `validate_only` checks without
//! changing. Request checks as Kafka's: a resource or key named twice, a
//! null value for anything but DELETE, or an unknown operation is
//! INVALID_REQUEST. Broker resources accept only empty change lists (no
//! dynamic broker configs yet), like the legacy AlterConfigs.

use std::collections::BTreeMap;
use std::sync::Arc;

use proto_kafka::messages::incremental_alter_configs_request::AlterableConfig;
use proto_kafka::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use proto_kafka::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;
use sluice_controller::records::{RESOURCE_BROKER, RESOURCE_TOPIC};
use sluice_storage::LogConfig;

use super::alter_configs::{
    alterable_topic, check_keys, check_nulls, count_resources, duplicate_resource,
    unknown_resource_type,
};
use super::describe_configs::{check_broker_name, topic_key_is_list};
use super::Ctx;
use crate::broker::{ApiError, Broker};

pub(crate) const VERSIONS: (i16, i16) = (0, 1);

/// `AlterConfigOp.OpType`.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// One requested change: key, operation, value.
type Op = (String, i8, Option<String>);

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: IncrementalAlterConfigsRequest,
    _ctx: &Ctx,
) -> IncrementalAlterConfigsResponse {
    let counts = count_resources(
        req.resources
            .iter()
            .map(|r| (r.resource_type, r.resource_name.as_str())),
    );
    let mut resp = IncrementalAlterConfigsResponse::default();
    for r in &req.resources {
        let name = r.resource_name.as_str();
        let result = if counts[&(r.resource_type, name)] > 1 {
            Err(duplicate_resource())
        } else {
            check_request(&r.configs).and_then(|ops| match r.resource_type {
                RESOURCE_TOPIC => {
                    check_list_ops(&ops)?;
                    alterable_topic(broker, name)?;
                    broker.edit_topic_configs(name, req.validate_only, |current, defaults| {
                        Ok(apply_ops(current, defaults, &ops))
                    })
                }
                RESOURCE_BROKER => {
                    check_broker_name(broker, name)?;
                    check_list_ops(&ops)?;
                    broker.edit_broker_configs(name, req.validate_only, |current| {
                        let mut next = current.clone();
                        for (k, op, v) in &ops {
                            match (*op, v) {
                                (OP_SET, Some(v)) => {
                                    next.insert(k.clone(), v.clone());
                                }
                                _ => {
                                    next.remove(k);
                                }
                            }
                        }
                        Ok(next)
                    })
                }
                other => Err(unknown_resource_type(other)),
            })
        };
        let mut out = AlterConfigsResourceResponse::default();
        out.resource_type = r.resource_type;
        out.resource_name = r.resource_name.clone();
        out.error_message = None;
        if let Err(e) = result {
            tracing::debug!(resource = %name, error = ?e, "IncrementalAlterConfigs");
            out.error_code = e.code.code();
            out.error_message = e.message.map(StrBytes::from_string);
        }
        resp.responses.push(out);
    }
    resp
}

/// Duplicate keys, null values and unknown operations; the checked ops.
fn check_request(configs: &[AlterableConfig]) -> Result<Vec<Op>, ApiError> {
    check_keys(configs.iter().map(|c| c.name.as_str()))?;
    check_nulls(
        configs
            .iter()
            .filter(|c| c.config_operation != OP_DELETE && c.value.is_none())
            .map(|c| c.name.as_str()),
    )?;
    configs
        .iter()
        .map(|c| {
            if !(OP_SET..=OP_SUBTRACT).contains(&c.config_operation) {
                return Err(ApiError::new(
                    ResponseError::InvalidRequest,
                    format!("Unknown operations type {}", c.config_operation),
                ));
            }
            Ok((
                c.name.to_string(),
                c.config_operation,
                c.value.as_ref().map(|v| v.to_string()),
            ))
        })
        .collect()
}

/// APPEND and SUBTRACT only apply to list keys.
fn check_list_ops(ops: &[Op]) -> Result<(), ApiError> {
    for (key, op, _) in ops {
        if (*op == OP_APPEND || *op == OP_SUBTRACT) && !topic_key_is_list(key) {
            let name = if *op == OP_APPEND {
                "APPEND"
            } else {
                "SUBTRACT"
            };
            return Err(ApiError::new(
                ResponseError::InvalidConfig,
                format!("Can't {name} to key {key} because its type is not LIST."),
            ));
        }
    }
    Ok(())
}

/// The overrides after `ops`. APPEND and SUBTRACT work on the topic's
/// effective value (its override, else the broker default).
fn apply_ops(
    current: &BTreeMap<String, String>,
    defaults: &LogConfig,
    ops: &[Op],
) -> BTreeMap<String, String> {
    let mut next = current.clone();
    for (key, op, value) in ops {
        let value = value.clone().unwrap_or_default();
        match *op {
            OP_SET => {
                next.insert(key.clone(), value);
            }
            OP_DELETE => {
                next.remove(key);
            }
            _ => {
                let base = next
                    .get(key)
                    .cloned()
                    .or_else(|| defaults.to_props().get(key.as_str()).cloned())
                    .unwrap_or_default();
                let mut parts: Vec<&str> = base.split(',').filter(|s| !s.is_empty()).collect();
                for v in value.split(',').filter(|s| !s.is_empty()) {
                    if *op == OP_APPEND {
                        if !parts.contains(&v) {
                            parts.push(v);
                        }
                    } else {
                        parts.retain(|p| *p != v);
                    }
                }
                next.insert(key.clone(), parts.join(","));
            }
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::incremental_alter_configs_request::AlterConfigsResource;
    use proto_kafka::messages::ApiKey;

    use super::super::test_support::{ctx, open_broker, roundtrip};
    use super::*;

    fn op(k: &str, op: i8, v: Option<&str>) -> Op {
        (k.to_string(), op, v.map(str::to_string))
    }

    #[test]
    fn list_operations_start_from_the_effective_value() {
        let defaults = LogConfig::default();
        let empty = BTreeMap::new();
        let next = apply_ops(
            &empty,
            &defaults,
            &[op("cleanup.policy", OP_APPEND, Some("compact"))],
        );
        assert_eq!(next["cleanup.policy"], "delete,compact");
        let next = apply_ops(
            &next,
            &defaults,
            &[op("cleanup.policy", OP_SUBTRACT, Some("delete,nothing"))],
        );
        assert_eq!(next["cleanup.policy"], "compact");
        let next = apply_ops(
            &next,
            &defaults,
            &[op("cleanup.policy", OP_APPEND, Some("compact"))],
        );
        assert_eq!(next["cleanup.policy"], "compact");
        let next = apply_ops(
            &next,
            &defaults,
            &[
                op("retention.ms", OP_SET, Some("5")),
                op("cleanup.policy", OP_DELETE, None),
            ],
        );
        assert_eq!(next.len(), 1);
        assert_eq!(next["retention.ms"], "5");
        assert!(check_list_ops(&[op("retention.ms", OP_APPEND, Some("1"))]).is_err());
        assert!(check_list_ops(&[op("cleanup.policy", OP_SUBTRACT, Some("delete"))]).is_ok());
    }

    fn resource(t: i8, name: &str, configs: &[(&str, i8, Option<&str>)]) -> AlterConfigsResource {
        let mut r = AlterConfigsResource::default();
        r.resource_type = t;
        r.resource_name = StrBytes::from_string(name.to_string());
        r.configs = configs
            .iter()
            .map(|(k, op, v)| {
                let mut c = AlterableConfig::default();
                c.name = StrBytes::from_string(k.to_string());
                c.config_operation = *op;
                c.value = v.map(|v| StrBytes::from_string(v.to_string()));
                c
            })
            .collect();
        r
    }

    fn codes(resp: &IncrementalAlterConfigsResponse) -> Vec<i16> {
        resp.responses.iter().map(|r| r.error_code).collect()
    }

    #[test]
    fn changes_apply_to_the_logs_in_every_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        let bad_req = ResponseError::InvalidRequest.code();
        let bad_config = ResponseError::InvalidConfig.code();
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
            let mut req = IncrementalAlterConfigsRequest::default();
            req.resources = vec![
                resource(
                    RESOURCE_TOPIC,
                    &name,
                    &[
                        ("segment.bytes", OP_SET, Some("65536")),
                        ("retention.ms", OP_DELETE, None),
                        ("cleanup.policy", OP_APPEND, Some("compact")),
                    ],
                ),
                resource(
                    RESOURCE_TOPIC,
                    "missing",
                    &[("retention.ms", OP_DELETE, None)],
                ),
                resource(RESOURCE_TOPIC, "", &[]),
                resource(
                    RESOURCE_BROKER,
                    "1",
                    &[("log.retention.hours", OP_SET, Some("1"))],
                ),
                resource(RESOURCE_BROKER, "1", &[]),
            ];
            let resp = roundtrip(
                &handle(&broker, req, &ctx(ApiKey::IncrementalAlterConfigs, v)),
                v,
            );
            assert_eq!(
                codes(&resp),
                vec![
                    0,
                    ResponseError::UnknownTopicOrPartition.code(),
                    bad_req,
                    bad_req,
                    bad_req
                ]
            );
            let t = broker.image().topic(&name).cloned().expect("topic");
            assert_eq!(t.configs.len(), 2, "{:?}", t.configs);
            assert_eq!(t.configs["cleanup.policy"], "delete,compact");
            for p in 0..2 {
                let c = broker.log(&name, p).expect("log").config();
                assert_eq!(c.segment_bytes, 65536);
                assert_eq!(c.retention_ms, 604_800_000);
                assert!(c.cleanup_policy.compact && c.cleanup_policy.delete);
            }

            let mut req = IncrementalAlterConfigsRequest::default();
            req.validate_only = true;
            req.resources = vec![
                resource(
                    RESOURCE_TOPIC,
                    &name,
                    &[("segment.bytes", OP_SET, Some("x"))],
                ),
                resource(RESOURCE_TOPIC, "a", &[("no.such.key", OP_SET, Some("1"))]),
                resource(
                    RESOURCE_TOPIC,
                    &name,
                    &[("segment.ms", OP_APPEND, Some("1"))],
                ),
                resource(RESOURCE_BROKER, "", &[]),
                resource(RESOURCE_BROKER, "", &[]),
                resource(RESOURCE_BROKER, "1", &[("k", OP_SET, None)]),
                resource(RESOURCE_BROKER, "2", &[("k", 9, Some("1"))]),
                resource(RESOURCE_BROKER, "x", &[]),
            ];
            let resp = handle(&broker, req, &ctx(ApiKey::IncrementalAlterConfigs, v));
            assert_eq!(
                codes(&resp),
                vec![
                    // The topic appears twice.
                    bad_req,
                    ResponseError::UnknownTopicOrPartition.code(),
                    bad_req,
                    bad_req,
                    bad_req,
                    bad_req,
                    bad_req,
                    bad_req
                ]
            );
            let mut req = IncrementalAlterConfigsRequest::default();
            req.validate_only = true;
            req.resources = vec![resource(
                RESOURCE_TOPIC,
                &name,
                &[
                    ("segment.bytes", OP_SET, Some("x")),
                    ("segment.ms", OP_APPEND, Some("1")),
                ],
            )];
            let resp = handle(
                &broker,
                req.clone(),
                &ctx(ApiKey::IncrementalAlterConfigs, v),
            );
            assert_eq!(codes(&resp), vec![bad_config]);
            req.resources[0].configs.truncate(1);
            let resp = handle(&broker, req, &ctx(ApiKey::IncrementalAlterConfigs, v));
            assert_eq!(codes(&resp), vec![bad_config]);
            let msg = resp.responses[0].error_message.as_ref().expect("message");
            assert!(msg.contains("segment.bytes"), "{msg}");
            // validate_only left the topic alone.
            assert_eq!(broker.image().topic(&name).expect("t").configs.len(), 2);
        }
        broker.shutdown().expect("shutdown");
    }
}
