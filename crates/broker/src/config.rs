//! Broker configuration: every Kafka 4 `server.properties` key, with
//! Kafka's types, defaults and validation (the table is in [`keys`]).
//!
//! Sources, later ones winning: defaults, the properties file (`--config`),
//! `SLUICE_`-prefixed environment variables (`SLUICE_LOG_RETENTION_HOURS` →
//! `log.retention.hours`), command-line flags and `--override KEY=VALUE`.
//!
//! - A bad value of a known key is an error naming the key, in Kafka's
//!   words (`Invalid value x for configuration num.partitions: Not a number
//!   of type INT`); start-up stops.
//! - An unknown key is kept aside and reported once at start with a
//!   warning, as Kafka's `logUnused` does; start-up goes on.
//! - Keys set explicitly that Sluice does not act on yet are named once at
//!   start in one line ([`BrokerConfig::log_start_report`]).
//! - Password keys (TLS and SASL secrets) are accepted and never logged or
//!   described in clear.
//!
//! The broker reads its settings from [`Settings`], typed and parsed once
//! at start; the string accessors (`int`, `long`, `bool`, `str`) serve the
//! parsing here and DescribeConfigs.

mod docs;
mod keys;
mod quorum;
mod roles;
mod settings;

pub use roles::ProcessRoles;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use sluice_storage::LogConfig;

use crate::error::{BrokerError, Result};
pub(crate) use keys::{Area, Check, Key, Kind, BROKER_KEYS};
pub use settings::Settings;

/// The broker keys that give each topic config its default, highest
/// precedence first, with their unit in ms (Kafka's
/// `ServerTopicConfigSynonyms`; `0`: no conversion). Topic configs not
/// listed (remote storage switches, throttled replicas) have no server
/// default.
pub(crate) const TOPIC_SYNONYMS: &[(&str, &[(&str, i64)])] = &[
    ("segment.bytes", &[("log.segment.bytes", 0)]),
    (
        "segment.ms",
        &[("log.roll.ms", 0), ("log.roll.hours", 3_600_000)],
    ),
    (
        "segment.jitter.ms",
        &[
            ("log.roll.jitter.ms", 0),
            ("log.roll.jitter.hours", 3_600_000),
        ],
    ),
    ("segment.index.bytes", &[("log.index.size.max.bytes", 0)]),
    ("flush.messages", &[("log.flush.interval.messages", 0)]),
    (
        "flush.ms",
        &[
            ("log.flush.interval.ms", 0),
            ("log.flush.scheduler.interval.ms", 0),
        ],
    ),
    ("retention.bytes", &[("log.retention.bytes", 0)]),
    (
        "retention.ms",
        &[
            ("log.retention.ms", 0),
            ("log.retention.minutes", 60_000),
            ("log.retention.hours", 3_600_000),
        ],
    ),
    ("max.message.bytes", &[("message.max.bytes", 0)]),
    ("index.interval.bytes", &[("log.index.interval.bytes", 0)]),
    (
        "delete.retention.ms",
        &[("log.cleaner.delete.retention.ms", 0)],
    ),
    (
        "min.compaction.lag.ms",
        &[("log.cleaner.min.compaction.lag.ms", 0)],
    ),
    (
        "max.compaction.lag.ms",
        &[("log.cleaner.max.compaction.lag.ms", 0)],
    ),
    (
        "file.delete.delay.ms",
        &[("log.segment.delete.delay.ms", 0)],
    ),
    (
        "min.cleanable.dirty.ratio",
        &[("log.cleaner.min.cleanable.ratio", 0)],
    ),
    ("cleanup.policy", &[("log.cleanup.policy", 0)]),
    (
        "unclean.leader.election.enable",
        &[("unclean.leader.election.enable", 0)],
    ),
    ("min.insync.replicas", &[("min.insync.replicas", 0)]),
    ("compression.type", &[("compression.type", 0)]),
    ("compression.gzip.level", &[("compression.gzip.level", 0)]),
    ("compression.lz4.level", &[("compression.lz4.level", 0)]),
    ("compression.zstd.level", &[("compression.zstd.level", 0)]),
    ("preallocate", &[("log.preallocate", 0)]),
    (
        "message.timestamp.type",
        &[("log.message.timestamp.type", 0)],
    ),
    (
        "message.timestamp.before.max.ms",
        &[("log.message.timestamp.before.max.ms", 0)],
    ),
    (
        "message.timestamp.after.max.ms",
        &[("log.message.timestamp.after.max.ms", 0)],
    ),
    ("local.retention.ms", &[("log.local.retention.ms", 0)]),
    ("local.retention.bytes", &[("log.local.retention.bytes", 0)]),
];

/// The broker keys setting `topic_key`'s default, highest precedence first.
pub(crate) fn topic_synonyms(topic_key: &str) -> &'static [(&'static str, i64)] {
    TOPIC_SYNONYMS
        .iter()
        .find(|(k, _)| *k == topic_key)
        .map_or(&[], |(_, s)| *s)
}

/// The server key that sets a topic config's default (the first synonym),
/// or `""` when it has none.
pub fn server_key_for(topic_key: &str) -> &'static str {
    topic_synonyms(topic_key).first().map_or("", |(k, _)| *k)
}

/// The table entry of a broker key.
pub(crate) fn key_def(name: &str) -> Option<&'static Key> {
    BROKER_KEYS.iter().find(|k| k.name == name)
}

/// `listener.name.<listener>.[<mechanism>.]<key>`: a per-listener override
/// of `<key>` (Kafka's `ListenerConfigRegex`), validated as that key.
fn listener_override(name: &str) -> Option<&'static Key> {
    let rest = name.strip_prefix("listener.name.")?;
    let (_, base) = rest.split_once('.')?;
    key_def(base).or_else(|| base.split_once('.').and_then(|(_, b)| key_def(b)))
}

/// A validated broker configuration.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    values: BTreeMap<String, String>,
    /// Keys set by the file, environment or flags (not defaulted).
    explicit: BTreeSet<String>,
    /// Keys given that Kafka 4 does not know (names only: values are never
    /// kept, they may be secrets).
    unknown: BTreeSet<String>,
}

const HIDDEN: &str = "[hidden]";

fn invalid(key: &str, value: &str, reason: impl Into<String>) -> BrokerError {
    let secret = key_def(key)
        .or_else(|| listener_override(key))
        .is_some_and(|k| k.kind == Kind::Password);
    BrokerError::InvalidConfig {
        key: key.to_string(),
        value: if secret { HIDDEN } else { value }.to_string(),
        reason: reason.into(),
    }
}

/// Checks `value` against a key's Kafka type and validator; returns the
/// value to store (booleans in lower case, as Kafka renders them).
fn check_value(def: &Key, key: &str, value: &str) -> Result<String> {
    let v = value.trim();
    let number = |kind: &str| invalid(key, value, format!("Not a number of type {kind}"));
    let int_value: Option<i64> = match def.kind {
        Kind::Int => Some(i64::from(v.parse::<i32>().map_err(|_| number("INT"))?)),
        Kind::Short => Some(i64::from(v.parse::<i16>().map_err(|_| number("SHORT"))?)),
        Kind::Long => Some(v.parse::<i64>().map_err(|_| number("LONG"))?),
        _ => None,
    };
    let stored = match def.kind {
        Kind::Bool => match v.to_ascii_lowercase().as_str() {
            b @ ("true" | "false") => b.to_string(),
            _ => {
                return Err(invalid(
                    key,
                    value,
                    "Expected value to be either true or false",
                ))
            }
        },
        Kind::Double => {
            v.parse::<f64>().map_err(|_| number("DOUBLE"))?;
            v.to_string()
        }
        _ => v.to_string(),
    };
    match def.check {
        Check::Any => {}
        Check::AtLeast(min) => {
            if int_value.is_some_and(|n| n < min) {
                return Err(invalid(key, value, format!("Value must be at least {min}")));
            }
        }
        Check::Between(min, max) => {
            if int_value.is_some_and(|n| n < min) {
                return Err(invalid(key, value, format!("Value must be at least {min}")));
            }
            if int_value.is_some_and(|n| n > max) {
                return Err(invalid(
                    key,
                    value,
                    format!("Value must be no more than {max}"),
                ));
            }
        }
        Check::RatioBetween(min, max) => {
            let d: f64 = v.parse().map_err(|_| number("DOUBLE"))?;
            if d < min {
                return Err(invalid(key, value, format!("Value must be at least {min}")));
            }
            if d > max {
                return Err(invalid(
                    key,
                    value,
                    format!("Value must be no more than {max}"),
                ));
            }
        }
        Check::OneOf(valid) => {
            if !valid.contains(&v) {
                return Err(invalid(
                    key,
                    value,
                    format!("String must be one of: {}", valid.join(", ")),
                ));
            }
        }
        Check::OneOfIgnoreCase(valid) => {
            if !valid.iter().any(|s| s.eq_ignore_ascii_case(v)) {
                return Err(invalid(
                    key,
                    value,
                    format!(
                        "String must be one of (case insensitive): {}",
                        valid.join(", ")
                    ),
                ));
            }
        }
        Check::ListOf(valid) => {
            for item in list_items(v) {
                if !valid.contains(&item) {
                    return Err(invalid(
                        key,
                        item,
                        format!("String must be one of: {}", valid.join(", ")),
                    ));
                }
            }
        }
        Check::NonEmpty => {
            if v.is_empty() {
                return Err(invalid(key, value, "String must be non-empty"));
            }
        }
        Check::Custom(f, _) => f(v).map_err(|reason| invalid(key, value, reason))?,
    }
    Ok(stored)
}

/// Kafka's LIST parse: empty is the empty list, else the comma-separated
/// items with surrounding whitespace dropped.
fn list_items(v: &str) -> Vec<&str> {
    let v = v.trim();
    if v.is_empty() {
        Vec::new()
    } else {
        v.split(',').map(str::trim).collect()
    }
}

/// One `NAME://host:port` listener (Kafka's `SocketServerConfigs` regex:
/// the host may be empty or a bracketed IPv6 address).
fn parse_endpoint(s: &str) -> std::result::Result<(String, String, u16), String> {
    let bad = || format!("Unable to parse {s} to a broker endpoint");
    let (name, rest) = s.split_once("://").ok_or_else(bad)?;
    let (host, port) = rest.rsplit_once(':').ok_or_else(bad)?;
    if name.is_empty() {
        return Err(bad());
    }
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok((name.to_ascii_uppercase(), host.to_string(), port))
}

/// `listeners` / `advertised.listeners`: endpoints with distinct names.
pub(crate) fn check_listeners(v: &str) -> std::result::Result<(), String> {
    let mut names = BTreeSet::new();
    for item in list_items(v).into_iter().filter(|s| !s.is_empty()) {
        let (name, _, _) = parse_endpoint(item)?;
        if !names.insert(name) {
            return Err(format!(
                "Each listener must have a different name, listeners: {v}"
            ));
        }
    }
    Ok(())
}

const PROTOCOLS: &[&str] = &["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"];

/// `listener.security.protocol.map`: `NAME:PROTOCOL,...`.
pub(crate) fn check_protocol_map(v: &str) -> std::result::Result<(), String> {
    protocol_map(v).map(|_| ())
}

fn protocol_map(v: &str) -> std::result::Result<BTreeMap<String, String>, String> {
    let mut m = BTreeMap::new();
    for item in list_items(v).into_iter().filter(|s| !s.is_empty()) {
        let (name, proto) = item
            .split_once(':')
            .ok_or_else(|| format!("Malformed map entry {item}: expected NAME:PROTOCOL"))?;
        let proto = proto.trim().to_ascii_uppercase();
        if !PROTOCOLS.contains(&proto.as_str()) {
            return Err(format!(
                "Invalid security protocol `{proto}` defined in listener.security.protocol.map"
            ));
        }
        m.insert(name.trim().to_ascii_uppercase(), proto);
    }
    Ok(m)
}

/// `controller.quorum.voters`: `id@host:port,...`.
pub(crate) fn check_quorum_voters(v: &str) -> std::result::Result<(), String> {
    for item in list_items(v).into_iter().filter(|s| !s.is_empty()) {
        let (id, addr) = item
            .split_once('@')
            .ok_or_else(|| format!("Unable to parse voter {item}: expected id@host:port"))?;
        id.parse::<i32>()
            .map_err(|_| format!("Unable to parse voter id in {item}"))?;
        host_port(addr)?;
    }
    Ok(())
}

/// `controller.quorum.bootstrap.servers`: `host:port,...`.
pub(crate) fn check_host_ports(v: &str) -> std::result::Result<(), String> {
    list_items(v)
        .into_iter()
        .filter(|s| !s.is_empty())
        .try_for_each(host_port)
}

fn host_port(s: &str) -> std::result::Result<(), String> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("Invalid address {s}: expected host:port"))?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(format!("Invalid address {s}: expected host:port"));
    }
    Ok(())
}

/// `compression.gzip.level`: 1-9, or -1 for the codec's default.
pub(crate) fn check_gzip_level(v: &str) -> std::result::Result<(), String> {
    match v.parse::<i32>() {
        Ok(-1) | Ok(1..=9) => Ok(()),
        _ => Err("Value must be between 1 and 9 or equal to -1".into()),
    }
}

/// `max.connections.per.ip.overrides`: `host:count,...`.
pub(crate) fn check_ip_overrides(v: &str) -> std::result::Result<(), String> {
    for item in list_items(v).into_iter().filter(|s| !s.is_empty()) {
        let (host, n) = item
            .rsplit_once(':')
            .ok_or_else(|| format!("Malformed entry {item}: expected host:count"))?;
        if host.is_empty() || n.trim().parse::<i32>().map_or(true, |n| n < 0) {
            return Err(format!("Malformed entry {item}: expected host:count"));
        }
    }
    Ok(())
}

/// A `NAME://host:port` listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        let values = BROKER_KEYS
            .iter()
            .filter_map(|k| k.default.map(|d| (k.name.to_string(), d.to_string())))
            .collect();
        Self {
            values,
            explicit: BTreeSet::new(),
            unknown: BTreeSet::new(),
        }
    }
}

impl BrokerConfig {
    /// Sets one key. A known key's value is checked against Kafka's type
    /// and validator (error naming the key); an unknown key is noted for
    /// the start-up warning and otherwise ignored.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let key = key.trim();
        let Some(def) = key_def(key).or_else(|| listener_override(key)) else {
            self.unknown.insert(key.to_string());
            return Ok(());
        };
        let stored = check_value(def, key, value)?;
        self.values.insert(key.to_string(), stored);
        self.explicit.insert(key.to_string());
        Ok(())
    }

    /// The value of `key` if it was set rather than defaulted (Kafka's
    /// STATIC_BROKER_CONFIG source).
    pub fn explicit_value(&self, key: &str) -> Option<String> {
        self.explicit
            .contains(key)
            .then(|| self.values.get(key).cloned())
            .flatten()
    }

    /// Keys given that Kafka 4 does not know.
    pub fn unknown_keys(&self) -> Vec<String> {
        self.unknown.iter().cloned().collect()
    }

    /// Keys set explicitly that Sluice accepts but does not act on yet.
    pub fn keys_without_effect(&self) -> Vec<String> {
        self.explicit
            .iter()
            .filter(|k| {
                key_def(k)
                    .or_else(|| listener_override(k))
                    .is_some_and(|d| !d.used || k.starts_with("listener.name."))
            })
            .cloned()
            .collect()
    }

    /// Logs, once at start, the unknown keys (a warning, Kafka's
    /// `logUnused` wording) and the keys set that have no effect yet. Only
    /// names are logged, never values.
    pub fn log_start_report(&self) {
        if !self.unknown.is_empty() {
            let names: Vec<&str> = self.unknown.iter().map(String::as_str).collect();
            tracing::warn!(
                "These configurations '[{}]' were supplied but are not used yet.",
                names.join(", ")
            );
        }
        let idle = self.keys_without_effect();
        if !idle.is_empty() {
            tracing::info!(
                "These configurations are accepted but have no effect in Sluice yet: {}",
                idle.join(", ")
            );
        }
    }

    /// Applies a `server.properties` text in Java's properties format:
    /// `key=value`, `key: value` or `key value`, `#`/`!` comments, lines
    /// continued with a trailing `\`, and `\` escapes.
    pub fn apply_properties(&mut self, text: &str, source: &str) -> Result<()> {
        for (line_no, (k, v)) in parse_properties(text) {
            self.set(&k, &v).map_err(|e| match e {
                BrokerError::InvalidConfig { key, value, reason } => BrokerError::InvalidConfig {
                    key,
                    value,
                    reason: format!("{reason} ({source}, line {line_no})"),
                },
                other => other,
            })?;
        }
        Ok(())
    }

    /// Applies `SLUICE_*` environment variables: `SLUICE_LOG_DIRS=/x` sets
    /// `log.dirs`.
    pub fn apply_env(&mut self, vars: impl IntoIterator<Item = (String, String)>) -> Result<()> {
        for (k, v) in vars {
            if let Some(rest) = k.strip_prefix("SLUICE_") {
                let key = rest.to_ascii_lowercase().replace('_', ".");
                self.set(&key, &v)?;
            }
        }
        Ok(())
    }

    /// Checks what single keys cannot: the listener set, roles, ids, and
    /// the topic defaults as a whole.
    pub fn validate(&self) -> Result<()> {
        let roles = self.validate_roles()?;
        if roles.broker {
            self.listener()?;
            self.advertised_listener()?;
        }
        if let (Some(b), Some(n)) = (
            self.explicit_value("broker.id"),
            self.explicit_value("node.id"),
        ) {
            if b != n {
                return Err(invalid(
                    "node.id",
                    &n,
                    "You must set `node.id` to the same value as `broker.id`.",
                ));
            }
        }
        self.log_config()?;
        self.metadata_log_config()?;
        self.quorum_config()?;
        crate::limits::validate(&Settings::from_config(self)?)?;
        Ok(())
    }

    /// The metadata log's settings from the `metadata.*` keys, with
    /// Kafka's ranges.
    pub fn metadata_log_config(&self) -> Result<sluice_controller::MetadataLogConfig> {
        let at_least = |key: &str, min: i64| -> Result<i64> {
            let v = self.long(key);
            if v < min {
                return Err(invalid(
                    key,
                    &self.str(key),
                    format!("must be at least {min}"),
                ));
            }
            Ok(v)
        };
        Ok(sluice_controller::MetadataLogConfig {
            // Kafka: atLeast(Records.LOG_OVERHEAD).
            segment_bytes: at_least("metadata.log.segment.bytes", 12)? as u64,
            segment_ms: self.long("metadata.log.segment.ms"),
            max_bytes_between_snapshots: at_least(
                "metadata.log.max.record.bytes.between.snapshots",
                1,
            )? as u64,
            max_snapshot_interval_ms: at_least("metadata.log.max.snapshot.interval.ms", 0)?,
            max_retention_ms: self.long("metadata.max.retention.ms"),
            max_retention_bytes: self.long("metadata.max.retention.bytes"),
        })
    }

    pub fn str(&self, key: &str) -> String {
        if key == "broker.id" && !self.explicit.contains(key) {
            return self.node_id().to_string();
        }
        self.values.get(key).cloned().unwrap_or_default()
    }

    fn get(&self, key: &str) -> Option<&String> {
        self.values.get(key)
    }

    pub fn int(&self, key: &str) -> i32 {
        self.get(key).and_then(|v| v.parse().ok()).unwrap_or(0)
    }

    pub fn long(&self, key: &str) -> i64 {
        self.get(key).and_then(|v| v.parse().ok()).unwrap_or(0)
    }

    pub fn bool(&self, key: &str) -> bool {
        self.get(key).is_some_and(|v| v == "true")
    }

    /// Security protocol of each listener name: `listener.security.protocol.map`
    /// (a listener named like a protocol uses that protocol).
    fn protocols(&self) -> Result<BTreeMap<String, String>> {
        let v = self.str("listener.security.protocol.map");
        protocol_map(&v).map_err(|e| invalid("listener.security.protocol.map", &v, e))
    }

    /// Names of the controller's listeners (`controller.listener.names`).
    pub(crate) fn controller_listeners(&self) -> BTreeSet<String> {
        list_items(&self.str("controller.listener.names"))
            .into_iter()
            .map(str::to_ascii_uppercase)
            .collect()
    }

    /// The listener Sluice serves: the first of `listeners` that is not a
    /// controller listener (Sluice's embedded controller has no network
    /// listener). It must be PLAINTEXT (no TLS or SASL yet). Further
    /// broker listeners are reported at start and not served.
    pub fn listener(&self) -> Result<Listener> {
        let v = self.str("listeners");
        let controllers = self.controller_listeners();
        let protocols = self.protocols()?;
        let mut served = None;
        for item in list_items(&v).into_iter().filter(|s| !s.is_empty()) {
            let (name, host, port) =
                parse_endpoint(item).map_err(|e| invalid("listeners", &v, e))?;
            if controllers.contains(&name) {
                continue;
            }
            let protocol = protocols
                .get(&name)
                .cloned()
                .or_else(|| PROTOCOLS.contains(&name.as_str()).then(|| name.clone()))
                .ok_or_else(|| {
                    invalid(
                        "listeners",
                        &v,
                        format!("No security protocol defined for listener {name}"),
                    )
                })?;
            if served.is_none() {
                if protocol != "PLAINTEXT" {
                    return Err(invalid(
                        "listeners",
                        &v,
                        format!("listener {name} uses {protocol}: only PLAINTEXT listeners are supported (no TLS or SASL yet)"),
                    ));
                }
                served = Some(Listener {
                    name,
                    host: if host.is_empty() {
                        "0.0.0.0".into()
                    } else {
                        host
                    },
                    port,
                });
            }
        }
        served.ok_or_else(|| invalid("listeners", &v, "no broker listener to serve"))
    }

    /// Broker listeners of `listeners` that Sluice does not serve (all but
    /// the first broker listener).
    pub fn unserved_listeners(&self) -> Vec<String> {
        let controllers = self.controller_listeners();
        let served = self.listener().map(|l| l.name).unwrap_or_default();
        list_items(&self.str("listeners"))
            .into_iter()
            .filter_map(|s| parse_endpoint(s).ok())
            .filter(|(n, _, _)| !controllers.contains(n) && *n != served)
            .map(|(n, _, _)| n)
            .collect()
    }

    /// The address given to clients: the `advertised.listeners` entry named
    /// like the served listener, else the served listener itself (a
    /// wildcard host becomes 127.0.0.1).
    pub fn advertised_listener(&self) -> Result<Listener> {
        let served = self.listener()?;
        if let Some(v) = self.get("advertised.listeners").filter(|v| !v.is_empty()) {
            for item in list_items(v) {
                let (name, host, port) =
                    parse_endpoint(item).map_err(|e| invalid("advertised.listeners", v, e))?;
                if name == served.name {
                    if host.is_empty() || host == "0.0.0.0" {
                        return Err(invalid(
                            "advertised.listeners",
                            v,
                            "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. Use a routable IP address.",
                        ));
                    }
                    return Ok(Listener { name, host, port });
                }
            }
        }
        let mut l = served;
        if l.host == "0.0.0.0" {
            l.host = "127.0.0.1".into();
        }
        Ok(l)
    }

    /// The first data folder: the first of `log.dirs`, else `log.dir`.
    pub fn data_dir(&self) -> PathBuf {
        self.log_dirs()
            .into_iter()
            .next()
            .unwrap_or_else(|| PathBuf::from("./sluice-data"))
    }

    /// The data folders (JBOD): `log.dirs` (comma-separated), else
    /// `log.dir`; empty items and repeats are dropped.
    pub fn log_dirs(&self) -> Vec<PathBuf> {
        let v = self
            .get("log.dirs")
            .filter(|v| !v.trim().is_empty())
            .or_else(|| self.get("log.dir"))
            .cloned()
            .unwrap_or_else(|| "./sluice-data".into());
        let mut dirs: Vec<PathBuf> = Vec::new();
        for item in v.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let d = PathBuf::from(item);
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
        if dirs.is_empty() {
            dirs.push(PathBuf::from("./sluice-data"));
        }
        dirs
    }

    /// The folder of the metadata log: `metadata.log.dir`, else the first
    /// data folder (as Kafka).
    pub fn metadata_log_dir(&self) -> PathBuf {
        self.get("metadata.log.dir")
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
            .map_or_else(|| self.data_dir(), PathBuf::from)
    }

    /// `node.id`, or `broker.id` when only that was set (Kafka treats them
    /// as synonyms).
    pub fn node_id(&self) -> i32 {
        match (
            self.explicit.contains("node.id"),
            self.explicit.contains("broker.id"),
        ) {
            (false, true) => self.int("broker.id"),
            _ => self.int("node.id"),
        }
    }

    /// The value a topic config gets from the broker keys (Kafka's
    /// `extractLogConfigMap`): the first synonym with a value, set or
    /// defaulted, converted to ms where it counts hours or minutes.
    pub(crate) fn topic_default(&self, topic_key: &str) -> Option<String> {
        for (server_key, unit_ms) in topic_synonyms(topic_key) {
            let Some(v) = self.get(server_key) else {
                continue;
            };
            if topic_key == "retention.ms" {
                // Kafka's logRetentionTimeMillis: any negative value means
                // forever (-1).
                let n: i64 = v.parse().ok()?;
                let ms = if *unit_ms == 0 {
                    n
                } else {
                    n.saturating_mul(*unit_ms)
                };
                return Some(if ms < 0 { -1 } else { ms }.to_string());
            }
            if *unit_ms == 0 {
                return Some(v.clone());
            }
            let n: i64 = v.parse().ok()?;
            return Some(n.saturating_mul(*unit_ms).to_string());
        }
        None
    }

    /// The topic config defaults from the broker keys.
    pub fn log_config(&self) -> Result<LogConfig> {
        let mut c = LogConfig::default();
        for (topic_key, synonyms) in TOPIC_SYNONYMS {
            let Some(v) = self.topic_default(topic_key) else {
                continue;
            };
            c.set(topic_key, &v).map_err(|e| {
                let server_key = synonyms
                    .iter()
                    .find(|(k, _)| self.get(k).is_some())
                    .map_or(*topic_key, |(k, _)| *k);
                let reason = match e {
                    sluice_storage::StorageError::InvalidConfig { reason, .. } => reason,
                    other => other.to_string(),
                };
                invalid(server_key, &v, reason)
            })?;
        }
        c.validate().map_err(|e| {
            let reason = match e {
                sluice_storage::StorageError::InvalidConfig { reason, .. } => reason,
                other => other.to_string(),
            };
            invalid(
                "log.cleaner.min.compaction.lag.ms",
                &self.str("log.cleaner.min.compaction.lag.ms"),
                reason,
            )
        })?;
        Ok(c)
    }

    /// Every public key with its default and meaning, for docs.
    pub fn describe() -> Vec<(&'static str, Option<&'static str>, &'static str)> {
        BROKER_KEYS
            .iter()
            .filter(|k| !k.internal)
            .map(|k| (k.name, k.default, k.doc))
            .collect()
    }
}

/// Java `Properties.load`: `(line number, key, value)` per entry.
fn parse_properties(text: &str) -> Vec<(usize, (String, String))> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        let start = n + 1;
        let mut logical = line.trim_start().to_string();
        if logical.is_empty() || logical.starts_with('#') || logical.starts_with('!') {
            continue;
        }
        // An odd number of trailing backslashes continues the line.
        while logical.chars().rev().take_while(|&c| c == '\\').count() % 2 == 1 {
            logical.pop();
            match lines.next() {
                Some((_, next)) => logical.push_str(next.trim_start()),
                None => break,
            }
        }
        out.push((start, split_entry(&logical)));
    }
    out
}

/// Splits one logical line at the first unescaped `=`, `:` or whitespace,
/// unescaping both sides.
fn split_entry(line: &str) -> (String, String) {
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let mut key = String::new();
    while i < chars.len() {
        match chars[i] {
            '\\' if i + 1 < chars.len() => {
                key.push(chars[i + 1]);
                i += 2;
                continue;
            }
            '=' | ':' | ' ' | '\t' | '\x0c' => break,
            c => key.push(c),
        }
        i += 1;
    }
    // Skip whitespace, then at most one separator, then whitespace.
    while i < chars.len() && matches!(chars[i], ' ' | '\t' | '\x0c') {
        i += 1;
    }
    if i < chars.len() && matches!(chars[i], '=' | ':') {
        i += 1;
    }
    while i < chars.len() && matches!(chars[i], ' ' | '\t' | '\x0c') {
        i += 1;
    }
    (
        unescape(&key),
        unescape(&chars[i..].iter().collect::<String>()),
    )
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\x0c'),
            Some('u') => {
                let hex: String = it.by_ref().take(4).collect();
                if let Some(ch) = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    out.push(ch);
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod metadata_config_tests {
    use super::*;

    #[test]
    fn metadata_log_keys_have_kafkas_defaults_and_ranges() {
        let c = BrokerConfig::default();
        assert_eq!(
            c.metadata_log_config().expect("defaults"),
            sluice_controller::MetadataLogConfig::default()
        );
        let mut c = BrokerConfig::default();
        c.set("metadata.log.max.snapshot.interval.ms", "0")
            .expect("set");
        c.set("metadata.max.retention.ms", "-1").expect("set");
        let m = c.metadata_log_config().expect("valid");
        assert_eq!((m.max_snapshot_interval_ms, m.max_retention_ms), (0, -1));
        for (key, bad) in [
            ("metadata.log.segment.bytes", "11"),
            ("metadata.log.max.record.bytes.between.snapshots", "0"),
            ("metadata.log.max.snapshot.interval.ms", "-1"),
        ] {
            let mut c = BrokerConfig::default();
            let e = c.set(key, bad).expect_err(key);
            assert!(e.to_string().contains(key), "{e}");
        }
    }
}
