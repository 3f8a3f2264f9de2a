//! DescribeConfigs (key 32): the effective configs of topics (resource
//! type 2) and of this broker (type 4, named by its node id), optionally
//! filtered by key, with Kafka's config sources and synonyms:
//!
//! - a topic key overridden on the topic is `TOPIC_CONFIG`; otherwise it
//!   comes from its server key (`log.segment.bytes` for `segment.bytes`):
//!   `STATIC_BROKER_CONFIG` when that key was set (file, environment or
//!   flag), else `DEFAULT_CONFIG`;
//! - synonyms list every level that sets the value, most specific first,
//!   as Kafka's `ConfigHelper` does (so `retention.ms` only follows
//!   `log.retention.ms`, not `log.retention.hours`, exactly like Kafka);
//! - broker keys are all read-only (Sluice has no dynamic broker configs);
//!   the cluster-default broker resource (empty name) has no configs.
//!
//! Config types (v3+) use Kafka's types for the same keys; documentation
//! (v3+) is sent when asked for.

use std::sync::Arc;

use proto_kafka::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use proto_kafka::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;
use sluice_controller::records::{RESOURCE_BROKER, RESOURCE_TOPIC};
use sluice_controller::store::METADATA_TOPIC;
use sluice_controller::TopicImage;

use super::errors::broker_error;
use super::Ctx;
use crate::broker::{validate_topic_name, ApiError, Broker};
use crate::config::{server_key_for, BrokerConfig};

pub(crate) const VERSIONS: (i16, i16) = (1, 4);

/// `DescribeConfigsResponse.ConfigSource`.
pub(crate) const SOURCE_TOPIC: i8 = 1;
pub(crate) const SOURCE_STATIC_BROKER: i8 = 4;
pub(crate) const SOURCE_DEFAULT: i8 = 5;

/// `DescribeConfigsResponse.ConfigType`.
const TYPE_UNKNOWN: i8 = 0;
const TYPE_BOOLEAN: i8 = 1;
const TYPE_STRING: i8 = 2;
const TYPE_INT: i8 = 3;
const TYPE_SHORT: i8 = 4;
const TYPE_LONG: i8 = 5;
const TYPE_DOUBLE: i8 = 6;
const TYPE_LIST: i8 = 7;

/// Topic config keys with Kafka's type and a short description.
const TOPIC_KEYS: &[(&str, i8, &str)] = &[
    (
        "cleanup.policy",
        TYPE_LIST,
        "delete, compact, or both: how old segments are cleaned up",
    ),
    (
        "delete.retention.ms",
        TYPE_LONG,
        "how long tombstones are kept on compacted topics",
    ),
    (
        "flush.messages",
        TYPE_LONG,
        "messages appended before an fsync",
    ),
    ("flush.ms", TYPE_LONG, "time between fsyncs"),
    (
        "index.interval.bytes",
        TYPE_INT,
        "bytes between offset index entries",
    ),
    (
        "max.compaction.lag.ms",
        TYPE_LONG,
        "longest time a record stays uncompacted",
    ),
    (
        "max.message.bytes",
        TYPE_INT,
        "largest record batch the topic accepts",
    ),
    (
        "message.timestamp.after.max.ms",
        TYPE_LONG,
        "how far in the future a CreateTime timestamp may be",
    ),
    (
        "message.timestamp.before.max.ms",
        TYPE_LONG,
        "how far in the past a CreateTime timestamp may be",
    ),
    (
        "message.timestamp.type",
        TYPE_STRING,
        "CreateTime or LogAppendTime",
    ),
    (
        "min.cleanable.dirty.ratio",
        TYPE_DOUBLE,
        "dirty share of the log that triggers compaction",
    ),
    (
        "min.compaction.lag.ms",
        TYPE_LONG,
        "shortest time a record stays uncompacted",
    ),
    (
        "min.insync.replicas",
        TYPE_INT,
        "in-sync replicas required for acks=all",
    ),
    (
        "retention.bytes",
        TYPE_LONG,
        "largest partition size before old segments are deleted (-1: unbounded)",
    ),
    (
        "retention.ms",
        TYPE_LONG,
        "longest time a segment is kept (-1: forever)",
    ),
    ("segment.bytes", TYPE_INT, "segment file size"),
    (
        "segment.index.bytes",
        TYPE_INT,
        "offset and time index file size",
    ),
    (
        "segment.jitter.ms",
        TYPE_LONG,
        "random jitter subtracted from segment.ms",
    ),
    ("segment.ms", TYPE_LONG, "segment age before it is rolled"),
];

/// Whether a topic key holds a comma-separated list (IncrementalAlterConfigs
/// APPEND and SUBTRACT).
pub(crate) fn topic_key_is_list(key: &str) -> bool {
    TOPIC_KEYS
        .iter()
        .any(|(k, t, _)| *k == key && *t == TYPE_LIST)
}

/// Kafka's type of a broker key.
fn broker_key_type(key: &str) -> i8 {
    match key {
        "listeners"
        | "advertised.listeners"
        | "log.dirs"
        | "log.dir"
        | "log.message.timestamp.type" => TYPE_STRING,
        "process.roles" | "log.cleanup.policy" => TYPE_LIST,
        "auto.create.topics.enable" | "delete.topic.enable" | "log.cleaner.enable" => TYPE_BOOLEAN,
        "offsets.topic.replication.factor" => TYPE_SHORT,
        "log.cleaner.min.cleanable.ratio" => TYPE_DOUBLE,
        "log.retention.ms"
        | "log.retention.bytes"
        | "log.roll.ms"
        | "log.cleaner.backoff.ms"
        | "log.cleaner.dedupe.buffer.size"
        | "log.cleaner.delete.retention.ms"
        | "log.cleaner.min.compaction.lag.ms"
        | "log.flush.interval.messages"
        | "log.flush.interval.ms"
        | "log.retention.check.interval.ms"
        | "connections.max.idle.ms" => TYPE_LONG,
        "node.id"
        | "num.partitions"
        | "default.replication.factor"
        | "log.retention.hours"
        | "log.retention.minutes"
        | "log.segment.bytes"
        | "log.roll.hours"
        | "log.index.size.max.bytes"
        | "log.index.interval.bytes"
        | "log.flush.offset.checkpoint.interval.ms"
        | "num.recovery.threads.per.data.dir"
        | "message.max.bytes"
        | "min.insync.replicas"
        | "socket.request.max.bytes"
        | "offsets.topic.num.partitions"
        | "fetch.max.bytes"
        | "max.incremental.fetch.session.cache.slots" => TYPE_INT,
        _ => TYPE_UNKNOWN,
    }
}

/// One level that sets a config: `(name, value, source)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Synonym {
    pub name: String,
    pub value: Option<String>,
    pub source: i8,
}

/// One described config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConfigEntry {
    pub name: String,
    pub value: Option<String>,
    pub source: i8,
    pub read_only: bool,
    /// Every level that sets it, the effective one first.
    pub synonyms: Vec<Synonym>,
    pub config_type: i8,
    pub documentation: Option<&'static str>,
}

/// The server keys that set one value, in Kafka's precedence order
/// (`DynamicBrokerConfig.brokerConfigSynonyms`).
fn synonym_group(key: &str) -> Vec<&str> {
    match key {
        "log.roll.ms" | "log.roll.hours" => vec!["log.roll.ms", "log.roll.hours"],
        "log.retention.ms" | "log.retention.minutes" | "log.retention.hours" => {
            vec![
                "log.retention.ms",
                "log.retention.minutes",
                "log.retention.hours",
            ]
        }
        k => vec![k],
    }
}

/// The built-in default of a server key, if it has one.
fn server_default(key: &str) -> Option<&'static str> {
    BrokerConfig::describe()
        .into_iter()
        .find(|(k, ..)| *k == key)
        .and_then(|(_, d, _)| d)
}

/// The value of a server key when it was set rather than defaulted.
fn server_static(config: &BrokerConfig, key: &str) -> Option<String> {
    config.explicit_value(key)
}

/// Kafka's `ConfigHelper.configSynonyms`: the set values of `key`'s
/// synonym group, then their defaults, from `key` on.
fn server_synonyms(config: &BrokerConfig, key: &str) -> Vec<Synonym> {
    let group = synonym_group(key);
    let set = group.iter().filter_map(|s| {
        server_static(config, s).map(|v| Synonym {
            name: s.to_string(),
            value: Some(v),
            source: SOURCE_STATIC_BROKER,
        })
    });
    let defaults = group.iter().filter_map(|s| {
        server_default(s).map(|d| Synonym {
            name: s.to_string(),
            value: Some(d.to_string()),
            source: SOURCE_DEFAULT,
        })
    });
    set.chain(defaults).skip_while(|s| s.name != key).collect()
}

/// The effective configs of a topic.
pub(crate) fn topic_entries(broker: &Broker, t: &TopicImage) -> Result<Vec<ConfigEntry>, ApiError> {
    let effective = broker.log_config(t).map_err(|e| broker_error(&e))?;
    Ok(effective
        .to_props()
        .into_iter()
        .map(|(name, value)| {
            let server_key = server_key_for(name);
            let mut synonyms = if server_key.is_empty() {
                Vec::new()
            } else {
                server_synonyms(&broker.config, server_key)
            };
            if t.configs.contains_key(name) {
                synonyms.insert(
                    0,
                    Synonym {
                        name: name.to_string(),
                        value: Some(value.clone()),
                        source: SOURCE_TOPIC,
                    },
                );
            }
            let (config_type, doc) = TOPIC_KEYS
                .iter()
                .find(|(k, ..)| *k == name)
                .map_or((TYPE_UNKNOWN, None), |(_, t, d)| (*t, Some(*d)));
            ConfigEntry {
                name: name.to_string(),
                value: Some(value),
                source: synonyms.first().map_or(SOURCE_DEFAULT, |s| s.source),
                read_only: false,
                synonyms,
                config_type,
                documentation: doc,
            }
        })
        .collect())
}

/// This broker's configs: every server key, set or defaulted (`None` when
/// neither), all read-only.
pub(crate) fn broker_entries(config: &BrokerConfig) -> Vec<ConfigEntry> {
    BrokerConfig::describe()
        .into_iter()
        .map(|(name, default, doc)| {
            let value = config.str(name);
            let value = (default.is_some() || !value.is_empty()).then_some(value);
            let synonyms = server_synonyms(config, name);
            ConfigEntry {
                name: name.to_string(),
                value,
                source: synonyms.first().map_or(SOURCE_DEFAULT, |s| s.source),
                read_only: true,
                synonyms,
                config_type: broker_key_type(name),
                documentation: Some(doc),
            }
        })
        .collect()
}

/// Checks a broker resource name: empty (cluster defaults) or this node.
pub(crate) fn check_broker_name(broker: &Broker, name: &str) -> Result<(), ApiError> {
    if name.is_empty() {
        return Ok(());
    }
    match name.parse::<i32>() {
        Err(_) => Err(ApiError::new(
            ResponseError::InvalidRequest,
            format!("Broker id must be an integer, but it is: {name}"),
        )),
        Ok(id) if id != broker.node_id => Err(ApiError::new(
            ResponseError::InvalidRequest,
            format!(
                "Unexpected broker id, expected {} or empty string, but received {name}",
                broker.node_id
            ),
        )),
        Ok(_) => Ok(()),
    }
}

/// The topic a topic resource names; Kafka's errors for bad or unknown
/// names (`__cluster_metadata` is not a topic clients can see).
pub(crate) fn resource_topic(broker: &Broker, name: &str) -> Result<TopicImage, ApiError> {
    if name == METADATA_TOPIC {
        return Err(ApiError::code(ResponseError::UnknownTopicOrPartition));
    }
    validate_topic_name(name)?;
    broker
        .image()
        .topic(name)
        .cloned()
        .ok_or_else(|| ApiError::code(ResponseError::UnknownTopicOrPartition))
}

fn entries(broker: &Broker, resource_type: i8, name: &str) -> Result<Vec<ConfigEntry>, ApiError> {
    match resource_type {
        RESOURCE_TOPIC => topic_entries(broker, &resource_topic(broker, name)?),
        RESOURCE_BROKER => {
            check_broker_name(broker, name)?;
            if name.is_empty() {
                // Cluster-wide dynamic defaults: Sluice has none.
                Ok(Vec::new())
            } else {
                Ok(broker_entries(&broker.config))
            }
        }
        other => Err(ApiError::new(
            ResponseError::InvalidRequest,
            format!("Unsupported resource type: {other}"),
        )),
    }
}

fn str_opt(s: Option<String>) -> Option<StrBytes> {
    s.map(StrBytes::from_string)
}

fn to_result(
    e: ConfigEntry,
    synonyms: bool,
    documentation: bool,
    version: i16,
) -> DescribeConfigsResourceResult {
    let mut r = DescribeConfigsResourceResult::default();
    r.name = StrBytes::from_string(e.name);
    r.value = str_opt(e.value);
    r.read_only = e.read_only;
    r.config_source = e.source;
    r.is_sensitive = false;
    if synonyms {
        r.synonyms = e
            .synonyms
            .into_iter()
            .map(|s| {
                let mut out = DescribeConfigsSynonym::default();
                out.name = StrBytes::from_string(s.name);
                out.value = str_opt(s.value);
                out.source = s.source;
                out
            })
            .collect();
    }
    if version >= 3 {
        r.config_type = e.config_type;
    }
    r.documentation = if documentation && version >= 3 {
        e.documentation.map(StrBytes::from_static_str)
    } else {
        None
    };
    r
}

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: DescribeConfigsRequest,
    ctx: &Ctx,
) -> DescribeConfigsResponse {
    let include_docs = ctx.version >= 3 && req.include_documentation;
    let mut resp = DescribeConfigsResponse::default();
    for r in req.resources {
        let mut out = DescribeConfigsResult::default();
        out.resource_type = r.resource_type;
        out.resource_name = r.resource_name.clone();
        out.error_message = None;
        let wanted: Option<Vec<String>> = r
            .configuration_keys
            .filter(|k| !k.is_empty())
            .map(|k| k.iter().map(|s| s.to_string()).collect());
        match entries(broker, r.resource_type, r.resource_name.as_str()) {
            Ok(entries) => {
                out.configs = entries
                    .into_iter()
                    .filter(|e| wanted.as_ref().is_none_or(|w| w.contains(&e.name)))
                    .map(|e| to_result(e, req.include_synonyms, include_docs, ctx.version))
                    .collect();
            }
            Err(e) => {
                tracing::debug!(resource = %r.resource_name.as_str(), error = ?e, "DescribeConfigs");
                out.error_code = e.code.code();
                out.error_message = e.message.map(StrBytes::from_string);
            }
        }
        resp.results.push(out);
    }
    resp
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::describe_configs_request::DescribeConfigsResource;
    use proto_kafka::messages::ApiKey;

    use super::super::test_support::{ctx, open_broker, roundtrip};
    use super::*;

    fn request(resources: Vec<(i8, &str, Option<Vec<&str>>)>) -> DescribeConfigsRequest {
        let mut req = DescribeConfigsRequest::default();
        req.include_synonyms = true;
        req.include_documentation = true;
        req.resources = resources
            .into_iter()
            .map(|(t, n, keys)| {
                let mut r = DescribeConfigsResource::default();
                r.resource_type = t;
                r.resource_name = StrBytes::from_string(n.to_string());
                r.configuration_keys = keys.map(|k| {
                    k.into_iter()
                        .map(|s| StrBytes::from_string(s.to_string()))
                        .collect()
                });
                r
            })
            .collect();
        req
    }

    fn find<'a>(r: &'a DescribeConfigsResult, key: &str) -> &'a DescribeConfigsResourceResult {
        r.configs
            .iter()
            .find(|c| c.name.as_str() == key)
            .unwrap_or_else(|| panic!("{key} missing"))
    }

    #[test]
    fn synonyms_follow_kafkas_precedence() {
        let mut c = BrokerConfig::default();
        let names = |s: Vec<Synonym>| {
            s.into_iter()
                .map(|s| (s.name, s.source))
                .collect::<Vec<_>>()
        };
        // Unset log.retention.ms: hours' default is dropped (Kafka drops
        // synonyms before the described key).
        assert!(server_synonyms(&c, "log.retention.ms").is_empty());
        assert_eq!(
            names(server_synonyms(&c, "log.retention.hours")),
            vec![("log.retention.hours".to_string(), SOURCE_DEFAULT)]
        );
        c.set("log.retention.ms", "1000").expect("set");
        c.set("log.segment.bytes", "4096").expect("set");
        assert_eq!(
            names(server_synonyms(&c, "log.retention.ms")),
            vec![
                ("log.retention.ms".to_string(), SOURCE_STATIC_BROKER),
                ("log.retention.hours".to_string(), SOURCE_DEFAULT)
            ]
        );
        assert_eq!(
            names(server_synonyms(&c, "log.segment.bytes")),
            vec![
                ("log.segment.bytes".to_string(), SOURCE_STATIC_BROKER),
                ("log.segment.bytes".to_string(), SOURCE_DEFAULT)
            ]
        );
    }

    #[test]
    fn topic_sources_and_filters_in_every_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[("log.segment.bytes", "1048576")]);
        broker
            .create_topic("t", 1, 1, &[("retention.ms".into(), "1000".into())], false)
            .expect("create");
        for v in VERSIONS.0..=VERSIONS.1 {
            let req = request(vec![
                (RESOURCE_TOPIC, "t", None),
                (RESOURCE_TOPIC, "t", Some(vec!["segment.bytes", "nope"])),
                (RESOURCE_TOPIC, "missing", None),
                (RESOURCE_TOPIC, "bad name", None),
                (RESOURCE_BROKER, "1", Some(vec!["log.segment.bytes"])),
                (RESOURCE_BROKER, "", None),
                (RESOURCE_BROKER, "7", None),
                (8, "1", None),
            ]);
            let resp = handle(&broker, req, &ctx(ApiKey::DescribeConfigs, v));
            let resp = roundtrip(&resp, v);
            let r = &resp.results;
            assert_eq!(r.len(), 8);
            assert_eq!(r[0].error_code, 0);
            let retention = find(&r[0], "retention.ms");
            assert_eq!(retention.value.as_deref(), Some("1000"));
            assert_eq!(retention.config_source, SOURCE_TOPIC);
            assert_eq!(retention.synonyms.len(), 1);
            let seg = find(&r[0], "segment.bytes");
            assert_eq!(seg.value.as_deref(), Some("1048576"));
            assert_eq!(seg.config_source, SOURCE_STATIC_BROKER);
            assert_eq!(seg.synonyms.len(), 2);
            assert_eq!(find(&r[0], "cleanup.policy").config_source, SOURCE_DEFAULT);
            if v >= 3 {
                assert_eq!(seg.config_type, TYPE_INT);
                assert!(seg.documentation.is_some());
            }
            assert_eq!(r[1].configs.len(), 1);
            assert_eq!(
                r[2].error_code,
                ResponseError::UnknownTopicOrPartition.code()
            );
            assert_eq!(r[3].error_code, ResponseError::InvalidTopicException.code());
            assert_eq!(r[4].error_code, 0);
            let b = find(&r[4], "log.segment.bytes");
            assert!(b.read_only);
            assert_eq!(b.config_source, SOURCE_STATIC_BROKER);
            assert_eq!(r[4].configs.len(), 1);
            assert_eq!(r[5].error_code, 0);
            assert!(r[5].configs.is_empty());
            assert_eq!(r[6].error_code, ResponseError::InvalidRequest.code());
            assert_eq!(r[7].error_code, ResponseError::InvalidRequest.code());
        }
        broker.shutdown().expect("shutdown");
    }

    #[test]
    fn unset_broker_keys_have_no_value() {
        let entries = broker_entries(&BrokerConfig::default());
        let ms = entries
            .iter()
            .find(|e| e.name == "log.retention.ms")
            .expect("key");
        assert_eq!(ms.value, None);
        assert_eq!(ms.source, SOURCE_DEFAULT);
        let hours = entries
            .iter()
            .find(|e| e.name == "log.retention.hours")
            .expect("key");
        assert_eq!(hours.value.as_deref(), Some("168"));
        assert_eq!(hours.config_type, TYPE_INT);
    }
}
