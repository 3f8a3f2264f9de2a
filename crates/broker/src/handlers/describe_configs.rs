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
//! - broker keys are read-only except the dynamic replication throttles
//!   (`leader.replication.throttled.rate`,
//!   `follower.replication.throttled.rate`,
//!   `replica.alter.log.dirs.io.max.bytes.per.second`), set for this broker
//!   (DYNAMIC_BROKER_CONFIG) or cluster-wide (DYNAMIC_DEFAULT_BROKER_CONFIG,
//!   the resource with the empty name, which lists only those set).
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
use crate::config::{key_def, server_key_for, BrokerConfig, Kind, BROKER_KEYS};
use sluice_storage::config::{topic_key, ConfigType};

pub(crate) const VERSIONS: (i16, i16) = (1, 4);

/// `DescribeConfigsResponse.ConfigSource`.
pub(crate) const SOURCE_TOPIC: i8 = 1;
pub(crate) const SOURCE_DYNAMIC_BROKER: i8 = 2;
pub(crate) const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
pub(crate) const SOURCE_STATIC_BROKER: i8 = 4;
pub(crate) const SOURCE_DEFAULT: i8 = 5;

/// `DescribeConfigsResponse.ConfigType`.
const TYPE_BOOLEAN: i8 = 1;
const TYPE_STRING: i8 = 2;
const TYPE_INT: i8 = 3;
const TYPE_SHORT: i8 = 4;
const TYPE_LONG: i8 = 5;
const TYPE_DOUBLE: i8 = 6;
const TYPE_LIST: i8 = 7;

const TYPE_CLASS: i8 = 8;
const TYPE_PASSWORD: i8 = 9;

/// Kafka's response type of a topic config.
fn topic_key_type(kind: ConfigType) -> i8 {
    match kind {
        ConfigType::Boolean => TYPE_BOOLEAN,
        ConfigType::String => TYPE_STRING,
        ConfigType::Int => TYPE_INT,
        ConfigType::Long => TYPE_LONG,
        ConfigType::Double => TYPE_DOUBLE,
        ConfigType::List => TYPE_LIST,
    }
}

/// Whether a topic key holds a comma-separated list (IncrementalAlterConfigs
/// APPEND and SUBTRACT).
pub(crate) fn topic_key_is_list(key: &str) -> bool {
    topic_key(key).is_some_and(|k| k.kind == ConfigType::List)
}

/// Kafka's response type of a broker key.
fn broker_key_type(kind: Kind) -> i8 {
    match kind {
        Kind::Bool => TYPE_BOOLEAN,
        Kind::Str => TYPE_STRING,
        Kind::Int => TYPE_INT,
        Kind::Short => TYPE_SHORT,
        Kind::Long => TYPE_LONG,
        Kind::Double => TYPE_DOUBLE,
        Kind::List => TYPE_LIST,
        Kind::Class => TYPE_CLASS,
        Kind::Password => TYPE_PASSWORD,
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
    /// A secret (Kafka's PASSWORD type): value and synonym values are null.
    pub sensitive: bool,
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
        "log.roll.jitter.ms" | "log.roll.jitter.hours" => {
            vec!["log.roll.jitter.ms", "log.roll.jitter.hours"]
        }
        // log.flush.scheduler.interval.ms is log.flush.interval.ms's default.
        "log.flush.interval.ms" => vec!["log.flush.interval.ms", "log.flush.scheduler.interval.ms"],
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
    key_def(key).and_then(|k| k.default)
}

/// The value of a server key when it was set rather than defaulted.
fn server_static(config: &BrokerConfig, key: &str) -> Option<String> {
    config.explicit_value(key)
}

/// Kafka's `ConfigHelper.configSynonyms`: the set values of `key`'s
/// synonym group, then their defaults, from `key` on (so a key described
/// by itself never lists a higher-precedence synonym, and an unset key
/// whose default is null lists nothing). Secrets have null values.
fn server_synonyms(config: &BrokerConfig, key: &str) -> Vec<Synonym> {
    let group = synonym_group(key);
    let secret = |s: &str| key_def(s).is_some_and(|k| k.kind == Kind::Password);
    let set = group.iter().filter_map(|s| {
        server_static(config, s).map(|v| Synonym {
            name: s.to_string(),
            value: (!secret(s)).then_some(v),
            source: SOURCE_STATIC_BROKER,
        })
    });
    let defaults = group.iter().filter_map(|s| {
        server_default(s).map(|d| Synonym {
            name: s.to_string(),
            value: (!secret(s)).then(|| d.to_string()),
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
            let def = topic_key(name);
            ConfigEntry {
                name: name.to_string(),
                value: Some(value),
                source: synonyms.first().map_or(SOURCE_DEFAULT, |s| s.source),
                read_only: false,
                sensitive: false,
                synonyms,
                config_type: def.map_or(0, |d| topic_key_type(d.kind)),
                documentation: def.map(|d| d.doc),
            }
        })
        .collect())
}

/// This broker's configs: every public Kafka 4 broker key, set or
/// defaulted (`None` when neither), all read-only (Sluice has no dynamic
/// broker configs). Secrets are described without their value.
pub(crate) fn broker_entries(config: &BrokerConfig) -> Vec<ConfigEntry> {
    BROKER_KEYS
        .iter()
        .filter(|k| !k.internal)
        .map(|k| {
            let sensitive = k.kind == Kind::Password;
            let set = config.explicit_value(k.name).is_some();
            let value = (!sensitive && (set || k.default.is_some() || k.name == "broker.id"))
                .then(|| config.str(k.name));
            let synonyms = server_synonyms(config, k.name);
            ConfigEntry {
                name: k.name.to_string(),
                value,
                source: synonyms.first().map_or(SOURCE_DEFAULT, |s| s.source),
                read_only: true,
                sensitive,
                synonyms,
                config_type: broker_key_type(k.kind),
                documentation: Some(k.doc),
            }
        })
        .collect()
}

/// The dynamic broker keys (the replication throttles): for this broker
/// its own value (DYNAMIC_BROKER_CONFIG), else the cluster-wide one
/// (DYNAMIC_DEFAULT_BROKER_CONFIG), else Kafka's default `Long.MAX_VALUE`;
/// for the cluster-wide resource (`cluster_wide`) only the keys set there.
fn dynamic_entries(broker: &Broker, cluster_wide: bool) -> Vec<ConfigEntry> {
    use crate::replication::throttle::DYNAMIC_BROKER_KEYS;
    let image = broker.image();
    DYNAMIC_BROKER_KEYS
        .iter()
        .filter_map(|(key, doc)| {
            let mut synonyms = Vec::new();
            if !cluster_wide {
                if let Some(v) = image
                    .broker_configs_of(broker.node_id)
                    .and_then(|c| c.get(*key))
                {
                    synonyms.push(Synonym {
                        name: key.to_string(),
                        value: Some(v.clone()),
                        source: SOURCE_DYNAMIC_BROKER,
                    });
                }
            }
            if let Some(v) = image.broker_configs().get(*key) {
                synonyms.push(Synonym {
                    name: key.to_string(),
                    value: Some(v.clone()),
                    source: SOURCE_DYNAMIC_DEFAULT_BROKER,
                });
            }
            if cluster_wide && synonyms.is_empty() {
                return None;
            }
            let (value, source) = synonyms.first().map_or_else(
                || (i64::MAX.to_string(), SOURCE_DEFAULT),
                |s| (s.value.clone().unwrap_or_default(), s.source),
            );
            Some(ConfigEntry {
                name: key.to_string(),
                value: Some(value),
                source,
                read_only: false,
                sensitive: false,
                synonyms,
                config_type: broker_key_type(Kind::Long),
                documentation: Some(*doc),
            })
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
            let mut out = if name.is_empty() {
                Vec::new()
            } else {
                broker_entries(&broker.config)
            };
            out.extend(dynamic_entries(broker, name.is_empty()));
            Ok(out)
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
    r.is_sensitive = e.sensitive;
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
        c.set("log.segment.bytes", "2097152").expect("set");
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

    fn synonyms_of(r: &DescribeConfigsResourceResult) -> Vec<(String, Option<String>, i8)> {
        r.synonyms
            .iter()
            .map(|s| {
                (
                    s.name.to_string(),
                    s.value.as_ref().map(|v| v.to_string()),
                    s.source,
                )
            })
            .collect()
    }

    fn syn(name: &str, value: &str, source: i8) -> (String, Option<String>, i8) {
        (name.to_string(), Some(value.to_string()), source)
    }

    /// Every Kafka 4 topic config is described, with Kafka's sources and
    /// synonyms, with and without topic overrides, in every version.
    #[test]
    fn every_topic_config_with_kafkas_sources_and_synonyms() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(
            dir.path(),
            &[
                ("log.retention.hours", "2"),
                ("log.roll.jitter.ms", "500"),
                ("log.segment.delete.delay.ms", "1000"),
                ("compression.type", "gzip"),
                ("ssl.keystore.password", "s3cret"),
            ],
        );
        let overrides: Vec<(String, String)> = [
            ("preallocate", "true"),
            ("file.delete.delay.ms", "5"),
            ("unclean.leader.election.enable", "true"),
            ("retention.ms", "1000"),
            ("compression.type", "zstd"),
            ("leader.replication.throttled.replicas", "*"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        broker
            .create_topic("over", 1, 1, &overrides, false)
            .expect("create");
        broker
            .create_topic("plain", 1, 1, &[], false)
            .expect("create");
        for v in VERSIONS.0..=VERSIONS.1 {
            let req = request(vec![
                (RESOURCE_TOPIC, "over", None),
                (RESOURCE_TOPIC, "plain", None),
                (RESOURCE_BROKER, "1", None),
            ]);
            let resp = roundtrip(&handle(&broker, req, &ctx(ApiKey::DescribeConfigs, v)), v);
            let (over, plain, node) = (&resp.results[0], &resp.results[1], &resp.results[2]);
            for r in [over, plain] {
                assert_eq!(r.error_code, 0);
                let names: Vec<&str> = r.configs.iter().map(|c| c.name.as_str()).collect();
                assert_eq!(names, sluice_storage::config::KEYS, "v{v}");
                for c in &r.configs {
                    assert!(!c.read_only && !c.is_sensitive, "{}", c.name.as_str());
                    if v >= 3 {
                        assert_ne!(c.config_type, 0, "{}", c.name.as_str());
                        assert!(c.documentation.is_some());
                    }
                }
            }
            // An override: the topic level first, then the broker levels.
            let c = find(over, "file.delete.delay.ms");
            assert_eq!(c.value.as_deref(), Some("5"));
            assert_eq!(c.config_source, SOURCE_TOPIC);
            assert_eq!(
                synonyms_of(c),
                vec![
                    syn("file.delete.delay.ms", "5", SOURCE_TOPIC),
                    syn("log.segment.delete.delay.ms", "1000", SOURCE_STATIC_BROKER),
                    syn("log.segment.delete.delay.ms", "60000", SOURCE_DEFAULT),
                ]
            );
            let c = find(plain, "file.delete.delay.ms");
            assert_eq!(c.value.as_deref(), Some("1000"));
            assert_eq!(c.config_source, SOURCE_STATIC_BROKER);
            // retention.ms with log.retention.hours set: Kafka describes the
            // value but lists only log.retention.ms's own levels (none set,
            // no default) — the source is DEFAULT_CONFIG.
            let c = find(plain, "retention.ms");
            assert_eq!(c.value.as_deref(), Some("7200000"));
            assert_eq!(c.config_source, SOURCE_DEFAULT);
            assert!(c.synonyms.is_empty());
            let c = find(over, "retention.ms");
            assert_eq!(
                synonyms_of(c),
                vec![syn("retention.ms", "1000", SOURCE_TOPIC)]
            );
            // segment.jitter.ms: log.roll.jitter.ms set, then the hours default.
            let c = find(plain, "segment.jitter.ms");
            assert_eq!(c.value.as_deref(), Some("500"));
            assert_eq!(
                synonyms_of(c),
                vec![
                    syn("log.roll.jitter.ms", "500", SOURCE_STATIC_BROKER),
                    syn("log.roll.jitter.hours", "0", SOURCE_DEFAULT),
                ]
            );
            // compression.type: same name at topic and broker level.
            let c = find(over, "compression.type");
            assert_eq!(
                synonyms_of(c),
                vec![
                    syn("compression.type", "zstd", SOURCE_TOPIC),
                    syn("compression.type", "gzip", SOURCE_STATIC_BROKER),
                    syn("compression.type", "producer", SOURCE_DEFAULT),
                ]
            );
            assert_eq!(
                find(plain, "compression.type").value.as_deref(),
                Some("gzip")
            );
            // preallocate: override vs the log.preallocate default.
            let c = find(over, "preallocate");
            assert_eq!(
                (c.value.as_deref(), c.config_source),
                (Some("true"), SOURCE_TOPIC)
            );
            let c = find(plain, "preallocate");
            assert_eq!(
                (c.value.as_deref(), c.config_source),
                (Some("false"), SOURCE_DEFAULT)
            );
            assert_eq!(
                synonyms_of(c),
                vec![syn("log.preallocate", "false", SOURCE_DEFAULT)]
            );
            if v >= 3 {
                assert_eq!(c.config_type, TYPE_BOOLEAN);
                assert_eq!(find(plain, "cleanup.policy").config_type, TYPE_LIST);
                assert_eq!(
                    find(plain, "min.cleanable.dirty.ratio").config_type,
                    TYPE_DOUBLE
                );
                assert_eq!(find(plain, "retention.ms").config_type, TYPE_LONG);
                assert_eq!(find(plain, "segment.bytes").config_type, TYPE_INT);
                assert_eq!(
                    find(plain, "message.timestamp.type").config_type,
                    TYPE_STRING
                );
            }
            // Configs with no broker default: only the topic level.
            let c = find(plain, "leader.replication.throttled.replicas");
            assert_eq!(
                (c.value.as_deref(), c.config_source),
                (Some(""), SOURCE_DEFAULT)
            );
            assert!(c.synonyms.is_empty());
            let c = find(over, "leader.replication.throttled.replicas");
            assert_eq!(
                synonyms_of(c),
                vec![syn(
                    "leader.replication.throttled.replicas",
                    "*",
                    SOURCE_TOPIC
                )]
            );
            assert_eq!(
                find(over, "unclean.leader.election.enable")
                    .value
                    .as_deref(),
                Some("true")
            );
            // The broker: every public key, read-only, secrets hidden,
            // and the dynamic replication throttles (not set: Kafka's
            // default, alterable).
            assert_eq!(node.error_code, 0);
            assert_eq!(
                node.configs.len(),
                BrokerConfig::describe().len()
                    + crate::replication::throttle::DYNAMIC_BROKER_KEYS.len()
            );
            let c = find(node, "leader.replication.throttled.rate");
            assert_eq!(
                (c.value.as_deref(), c.config_source, c.read_only),
                (Some("9223372036854775807"), SOURCE_DEFAULT, false)
            );
            let pw = find(node, "ssl.keystore.password");
            assert!(pw.is_sensitive && pw.value.is_none());
            assert_eq!(pw.config_source, SOURCE_STATIC_BROKER);
            assert!(pw.synonyms.iter().all(|s| s.value.is_none()));
            if v >= 3 {
                assert_eq!(pw.config_type, TYPE_PASSWORD);
            }
            let c = find(node, "transaction.state.log.min.isr");
            assert_eq!(
                (c.value.as_deref(), c.config_source),
                (Some("2"), SOURCE_DEFAULT)
            );
            assert!(node.configs.iter().all(|c| c.read_only
                || crate::replication::throttle::is_dynamic_broker_key(c.name.as_str())));
            let hours = find(node, "log.retention.hours");
            assert_eq!(
                synonyms_of(hours),
                vec![
                    syn("log.retention.hours", "2", SOURCE_STATIC_BROKER),
                    syn("log.retention.hours", "168", SOURCE_DEFAULT),
                ]
            );
        }
        broker.shutdown().expect("shutdown");
    }

    /// CreateTopics v5+ answers with every topic config, sources included;
    /// a bad config is INVALID_CONFIG naming the key.
    #[test]
    fn create_topics_v5_plus_returns_every_config() {
        use proto_kafka::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
        use proto_kafka::messages::{CreateTopicsRequest, TopicName};

        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(
            dir.path(),
            &[
                ("log.preallocate", "true"),
                ("log.segment.bytes", "1048576"),
            ],
        );
        for v in 5..=super::super::create_topics::VERSIONS.1 {
            let topic = |name: &str, configs: &[(&str, &str)]| {
                let mut t = CreatableTopic::default();
                t.name = TopicName(StrBytes::from_string(name.to_string()));
                t.num_partitions = 1;
                t.replication_factor = 1;
                t.configs = configs
                    .iter()
                    .map(|(k, v)| {
                        let mut c = CreatableTopicConfig::default();
                        c.name = StrBytes::from_string(k.to_string());
                        c.value = Some(StrBytes::from_string(v.to_string()));
                        c
                    })
                    .collect();
                t
            };
            let mut req = CreateTopicsRequest::default();
            req.timeout_ms = 5000;
            req.topics = vec![
                topic(&format!("ct{v}"), &[("file.delete.delay.ms", "7")]),
                topic(&format!("bad{v}"), &[("preallocate", "sometimes")]),
            ];
            let resp =
                super::super::create_topics::handle(&broker, req, &ctx(ApiKey::CreateTopics, v));
            let resp = roundtrip(&resp, v);
            let ok = &resp.topics[0];
            assert_eq!(ok.error_code, 0, "v{v}");
            let configs = ok.configs.as_ref().expect("configs");
            let names: Vec<&str> = configs.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(names, sluice_storage::config::KEYS, "v{v}");
            let by = |k: &str| {
                configs
                    .iter()
                    .find(|c| c.name.as_str() == k)
                    .map(|c| {
                        (
                            c.value.as_ref().map(|s| s.to_string()),
                            c.config_source,
                            c.is_sensitive,
                        )
                    })
                    .expect("config")
            };
            assert_eq!(
                by("file.delete.delay.ms"),
                (Some("7".into()), SOURCE_TOPIC, false)
            );
            assert_eq!(
                by("preallocate"),
                (Some("true".into()), SOURCE_STATIC_BROKER, false)
            );
            assert_eq!(
                by("segment.jitter.ms"),
                (Some("0".into()), SOURCE_DEFAULT, false)
            );
            let bad = &resp.topics[1];
            assert_eq!(bad.error_code, ResponseError::InvalidConfig.code());
            let msg = bad
                .error_message
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_default();
            assert_eq!(
                msg,
                "Invalid value sometimes for configuration preallocate: Expected value to be either true or false"
            );
        }
        broker.shutdown().expect("shutdown");
    }
}
