//! Broker configuration: Kafka's `server.properties` keys and defaults.
//!
//! Sources, later ones winning: defaults, the properties file (`--config`),
//! `SLUICE_`-prefixed environment variables (`SLUICE_LOG_RETENTION_HOURS` →
//! `log.retention.hours`), command-line flags and `--override KEY=VALUE`.
//! Every key is checked against the table below: an unknown key or a value
//! of the wrong type stops start-up with a message naming it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use sluice_storage::LogConfig;

use crate::error::{BrokerError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    Long,
    Bool,
    Str,
    Double,
}

/// `(key, default, kind, meaning)`. `None` default: unset unless given.
const KEYS: &[(&str, Option<&str>, Kind, &str)] = &[
    (
        "listeners",
        Some("PLAINTEXT://127.0.0.1:9092"),
        Kind::Str,
        "listener to bind",
    ),
    (
        "advertised.listeners",
        None,
        Kind::Str,
        "address given to clients (default: listeners)",
    ),
    ("log.dirs", Some("./sluice-data"), Kind::Str, "data folder"),
    (
        "log.dir",
        None,
        Kind::Str,
        "data folder (used when log.dirs is not set)",
    ),
    ("node.id", Some("1"), Kind::Int, "this node's id"),
    (
        "process.roles",
        Some("broker,controller"),
        Kind::Str,
        "single node: broker,controller",
    ),
    (
        "num.partitions",
        Some("1"),
        Kind::Int,
        "partitions of auto-created topics",
    ),
    (
        "default.replication.factor",
        Some("1"),
        Kind::Int,
        "replication factor of auto-created topics",
    ),
    (
        "auto.create.topics.enable",
        Some("true"),
        Kind::Bool,
        "create topics on first use",
    ),
    (
        "delete.topic.enable",
        Some("true"),
        Kind::Bool,
        "allow DeleteTopics",
    ),
    (
        "log.retention.hours",
        Some("168"),
        Kind::Int,
        "retention by time, hours",
    ),
    (
        "log.retention.minutes",
        None,
        Kind::Int,
        "retention by time, minutes (wins over hours)",
    ),
    (
        "log.retention.ms",
        None,
        Kind::Long,
        "retention by time, ms (wins over minutes)",
    ),
    (
        "log.retention.bytes",
        Some("-1"),
        Kind::Long,
        "retention by size per partition",
    ),
    (
        "log.segment.bytes",
        Some("1073741824"),
        Kind::Int,
        "segment size",
    ),
    (
        "log.roll.hours",
        Some("168"),
        Kind::Int,
        "segment age before rolling, hours",
    ),
    (
        "log.roll.ms",
        None,
        Kind::Long,
        "segment age before rolling, ms",
    ),
    (
        "log.index.size.max.bytes",
        Some("10485760"),
        Kind::Int,
        "index file size",
    ),
    (
        "log.index.interval.bytes",
        Some("4096"),
        Kind::Int,
        "bytes between index entries",
    ),
    (
        "log.cleanup.policy",
        Some("delete"),
        Kind::Str,
        "default cleanup.policy",
    ),
    (
        "log.cleaner.enable",
        Some("true"),
        Kind::Bool,
        "run log compaction",
    ),
    (
        "log.cleaner.backoff.ms",
        Some("15000"),
        Kind::Long,
        "cleaner sleep when idle",
    ),
    (
        "log.cleaner.dedupe.buffer.size",
        Some("134217728"),
        Kind::Long,
        "cleaner offset map memory",
    ),
    (
        "log.cleaner.delete.retention.ms",
        Some("86400000"),
        Kind::Long,
        "default delete.retention.ms",
    ),
    (
        "log.cleaner.min.cleanable.ratio",
        Some("0.5"),
        Kind::Double,
        "default min.cleanable.dirty.ratio",
    ),
    (
        "log.cleaner.min.compaction.lag.ms",
        Some("0"),
        Kind::Long,
        "default min.compaction.lag.ms",
    ),
    (
        "log.flush.interval.messages",
        Some("9223372036854775807"),
        Kind::Long,
        "default flush.messages",
    ),
    (
        "log.flush.interval.ms",
        None,
        Kind::Long,
        "default flush.ms",
    ),
    (
        "log.flush.offset.checkpoint.interval.ms",
        Some("60000"),
        Kind::Int,
        "checkpoint interval",
    ),
    (
        "log.retention.check.interval.ms",
        Some("300000"),
        Kind::Long,
        "retention interval",
    ),
    (
        "log.message.timestamp.type",
        Some("CreateTime"),
        Kind::Str,
        "default message.timestamp.type",
    ),
    (
        "num.recovery.threads.per.data.dir",
        Some("2"),
        Kind::Int,
        "threads opening logs at start",
    ),
    (
        "message.max.bytes",
        Some("1048588"),
        Kind::Int,
        "largest record batch",
    ),
    (
        "min.insync.replicas",
        Some("1"),
        Kind::Int,
        "replicas acks=all waits for",
    ),
    (
        "socket.request.max.bytes",
        Some("104857600"),
        Kind::Int,
        "largest request",
    ),
    (
        "connections.max.idle.ms",
        Some("600000"),
        Kind::Long,
        "close idle connections after",
    ),
    (
        "offsets.topic.num.partitions",
        Some("50"),
        Kind::Int,
        "partitions of __consumer_offsets",
    ),
    (
        "offsets.topic.replication.factor",
        Some("1"),
        Kind::Int,
        "replication of __consumer_offsets",
    ),
    (
        "group.min.session.timeout.ms",
        Some("6000"),
        Kind::Int,
        "smallest consumer session timeout",
    ),
    (
        "group.max.session.timeout.ms",
        Some("1800000"),
        Kind::Int,
        "largest consumer session timeout",
    ),
    (
        "group.initial.rebalance.delay.ms",
        Some("3000"),
        Kind::Int,
        "wait for more members before the first rebalance of an empty group",
    ),
    (
        "group.max.size",
        Some("2147483647"),
        Kind::Int,
        "members per consumer group",
    ),
    (
        "offsets.retention.minutes",
        Some("10080"),
        Kind::Int,
        "keep committed offsets of empty groups this long",
    ),
    (
        "offsets.topic.segment.bytes",
        Some("104857600"),
        Kind::Int,
        "segment size of __consumer_offsets",
    ),
    (
        "offsets.retention.check.interval.ms",
        Some("600000"),
        Kind::Long,
        "how often expired offsets of empty groups are removed",
    ),
    (
        "fetch.max.bytes",
        Some("57671680"),
        Kind::Int,
        "largest fetch response",
    ),
    (
        "max.incremental.fetch.session.cache.slots",
        Some("1000"),
        Kind::Int,
        "fetch sessions kept",
    ),
    (
        "queued.max.request.bytes",
        Some("-1"),
        Kind::Long,
        "bytes held by requests being read and handled, all connections (-1: 512 MiB in Sluice)",
    ),
    (
        "max.connections",
        Some("2147483647"),
        Kind::Int,
        "connections broker-wide; at the limit new ones wait",
    ),
    (
        "max.connections.per.ip",
        Some("2147483647"),
        Kind::Int,
        "connections per client address; over it new ones are closed",
    ),
    (
        "max.connections.per.ip.overrides",
        Some(""),
        Kind::Str,
        "per-address limits, host:count,host:count",
    ),
];

/// A validated broker configuration.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    values: BTreeMap<String, String>,
    /// Keys set by the file, environment or flags (not defaulted).
    explicit: std::collections::BTreeSet<String>,
}

fn invalid(key: &str, value: &str, reason: impl Into<String>) -> BrokerError {
    BrokerError::InvalidConfig {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// A `NAME://host:port` listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl Listener {
    fn parse(key: &str, s: &str) -> Result<Self> {
        let (name, rest) = s
            .split_once("://")
            .ok_or_else(|| invalid(key, s, "expected NAME://host:port"))?;
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| invalid(key, s, "expected NAME://host:port"))?;
        let port = port
            .parse()
            .map_err(|_| invalid(key, s, "port is not a number 0-65535"))?;
        if name != "PLAINTEXT" {
            return Err(invalid(
                key,
                s,
                "only PLAINTEXT listeners are supported (no TLS or SASL yet)",
            ));
        }
        let host = host.trim_start_matches('[').trim_end_matches(']');
        Ok(Self {
            name: name.to_string(),
            host: if host.is_empty() { "0.0.0.0" } else { host }.to_string(),
            port,
        })
    }
}

impl Default for BrokerConfig {
    fn default() -> Self {
        let values = KEYS
            .iter()
            .filter_map(|(k, d, _, _)| d.map(|d| (k.to_string(), d.to_string())))
            .collect();
        Self {
            values,
            explicit: Default::default(),
        }
    }
}

impl BrokerConfig {
    /// Sets one key, checking name and type.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let key = key.trim();
        let value = value.trim();
        let Some((_, _, kind, _)) = KEYS.iter().find(|(k, ..)| *k == key) else {
            return Err(BrokerError::UnknownConfig(key.to_string()));
        };
        let ok = match kind {
            Kind::Int => value.parse::<i32>().is_ok(),
            Kind::Long => value.parse::<i64>().is_ok(),
            Kind::Bool => value == "true" || value == "false",
            Kind::Double => value.parse::<f64>().is_ok(),
            Kind::Str => true,
        };
        if !ok {
            return Err(invalid(
                key,
                value,
                format!("expected {kind:?}").to_lowercase(),
            ));
        }
        self.values.insert(key.to_string(), value.to_string());
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

    /// Applies a `server.properties` text (`key=value`, `#`/`!` comments).
    pub fn apply_properties(&mut self, text: &str, source: &str) -> Result<()> {
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            let Some((k, v)) = line.split_once(['=', ':']) else {
                return Err(invalid(
                    line,
                    "",
                    format!("{source}:{}: expected key=value", n + 1),
                ));
            };
            self.set(k, v)?;
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

    /// Checks what single keys cannot: listeners parse, roles, ranges.
    pub fn validate(&self) -> Result<()> {
        self.listener()?;
        self.advertised_listener()?;
        let roles = self.str("process.roles");
        if !roles.split(',').any(|r| r.trim() == "broker") {
            return Err(invalid(
                "process.roles",
                &roles,
                "a single node must include broker",
            ));
        }
        for key in ["num.partitions", "offsets.topic.num.partitions"] {
            if self.int(key) < 1 {
                return Err(invalid(key, &self.str(key), "must be at least 1"));
            }
        }
        if self.int("socket.request.max.bytes") < 1 {
            return Err(invalid(
                "socket.request.max.bytes",
                &self.str("socket.request.max.bytes"),
                "must be positive",
            ));
        }
        self.log_config()?;
        crate::limits::validate(self)?;
        Ok(())
    }

    pub fn str(&self, key: &str) -> String {
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

    pub fn listener(&self) -> Result<Listener> {
        let v = self.str("listeners");
        let first = v.split(',').next().unwrap_or_default().trim().to_string();
        if v.contains(',') {
            return Err(invalid("listeners", &v, "only one listener is supported"));
        }
        Listener::parse("listeners", &first)
    }

    pub fn advertised_listener(&self) -> Result<Listener> {
        match self.get("advertised.listeners") {
            Some(v) => Listener::parse("advertised.listeners", v),
            None => {
                let mut l = self.listener()?;
                if l.host == "0.0.0.0" {
                    l.host = "127.0.0.1".into();
                }
                Ok(l)
            }
        }
    }

    pub fn data_dir(&self) -> PathBuf {
        let dirs = self
            .get("log.dirs")
            .or_else(|| self.get("log.dir"))
            .cloned()
            .unwrap_or_else(|| "./sluice-data".into());
        PathBuf::from(dirs.split(',').next().unwrap_or("./sluice-data").trim())
    }

    pub fn node_id(&self) -> i32 {
        self.int("node.id")
    }

    /// The topic config defaults from the `log.*` keys.
    pub fn log_config(&self) -> Result<LogConfig> {
        let retention_ms = match (
            self.get("log.retention.ms"),
            self.get("log.retention.minutes"),
        ) {
            (Some(ms), _) => ms.parse().unwrap_or(0),
            (None, Some(m)) => m.parse::<i64>().unwrap_or(0) * 60_000,
            (None, None) => i64::from(self.int("log.retention.hours")) * 3_600_000,
        };
        let segment_ms = match self.get("log.roll.ms") {
            Some(ms) => ms.parse().unwrap_or(0),
            None => i64::from(self.int("log.roll.hours")) * 3_600_000,
        };
        let mut pairs = vec![
            ("retention.ms", retention_ms.to_string()),
            ("retention.bytes", self.str("log.retention.bytes")),
            ("segment.bytes", self.str("log.segment.bytes")),
            ("segment.ms", segment_ms.to_string()),
            ("segment.index.bytes", self.str("log.index.size.max.bytes")),
            ("index.interval.bytes", self.str("log.index.interval.bytes")),
            ("cleanup.policy", self.str("log.cleanup.policy")),
            (
                "delete.retention.ms",
                self.str("log.cleaner.delete.retention.ms"),
            ),
            (
                "min.cleanable.dirty.ratio",
                self.str("log.cleaner.min.cleanable.ratio"),
            ),
            (
                "min.compaction.lag.ms",
                self.str("log.cleaner.min.compaction.lag.ms"),
            ),
            ("flush.messages", self.str("log.flush.interval.messages")),
            (
                "message.timestamp.type",
                self.str("log.message.timestamp.type"),
            ),
            ("max.message.bytes", self.str("message.max.bytes")),
            ("min.insync.replicas", self.str("min.insync.replicas")),
        ];
        if let Some(ms) = self.get("log.flush.interval.ms") {
            pairs.push(("flush.ms", ms.clone()));
        }
        let mut c = LogConfig::default();
        for (k, v) in &pairs {
            c.set(k, v).map_err(|e| {
                let server_key = server_key_for(k);
                invalid(server_key, v, e.to_string())
            })?;
        }
        Ok(c)
    }

    /// Every key with its value (set or default) and meaning, for docs.
    pub fn describe() -> Vec<(&'static str, Option<&'static str>, &'static str)> {
        KEYS.iter().map(|(k, d, _, m)| (*k, *d, *m)).collect()
    }
}

/// The server key that sets a topic config's default.
pub fn server_key_for(topic_key: &str) -> &'static str {
    match topic_key {
        "retention.ms" => "log.retention.ms",
        "retention.bytes" => "log.retention.bytes",
        "segment.bytes" => "log.segment.bytes",
        "segment.ms" => "log.roll.ms",
        "segment.index.bytes" => "log.index.size.max.bytes",
        "index.interval.bytes" => "log.index.interval.bytes",
        "cleanup.policy" => "log.cleanup.policy",
        "delete.retention.ms" => "log.cleaner.delete.retention.ms",
        "min.cleanable.dirty.ratio" => "log.cleaner.min.cleanable.ratio",
        "min.compaction.lag.ms" => "log.cleaner.min.compaction.lag.ms",
        "flush.messages" => "log.flush.interval.messages",
        "flush.ms" => "log.flush.interval.ms",
        "message.timestamp.type" => "log.message.timestamp.type",
        "max.message.bytes" => "message.max.bytes",
        "min.insync.replicas" => "min.insync.replicas",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_a_zero_config_single_node() {
        let c = BrokerConfig::default();
        c.validate().expect("valid");
        assert_eq!(
            c.listener().expect("listener"),
            Listener {
                name: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 9092
            }
        );
        assert_eq!(c.data_dir(), PathBuf::from("./sluice-data"));
        assert_eq!(c.node_id(), 1);
        assert_eq!(c.log_config().expect("log").retention_ms, 604_800_000);
    }

    #[test]
    fn file_env_and_overrides_layer_and_errors_name_the_key() {
        let mut c = BrokerConfig::default();
        c.apply_properties(
            "# comment\nlog.retention.hours=1\nnum.partitions = 3\nlog.segment.bytes=2048\n",
            "server.properties",
        )
        .expect("file");
        c.apply_env([("SLUICE_LOG_RETENTION_MS".to_string(), "5000".to_string())])
            .expect("env");
        let lc = c.log_config().expect("log");
        assert_eq!(lc.retention_ms, 5000);
        assert_eq!(lc.segment_bytes, 2048);
        assert_eq!(c.int("num.partitions"), 3);
        let e = c.set("no.such.key", "1").expect_err("unknown");
        assert!(e.to_string().contains("no.such.key"));
        let e = c.set("num.partitions", "many").expect_err("type");
        assert!(e.to_string().contains("num.partitions"));
        c.set("listeners", "SSL://x:1").expect("string");
        let e = c.validate().expect_err("ssl");
        assert!(e.to_string().contains("listeners"));
        let mut c = BrokerConfig::default();
        c.set("log.segment.bytes", "3").expect("int");
        let e = c.validate().expect_err("range");
        assert!(e.to_string().contains("log.segment.bytes"), "{e}");
    }
}

#[cfg(test)]
mod doc_tests {
    /// docs/configuration.md lists every broker key.
    #[test]
    fn configuration_reference_lists_every_key() {
        let doc = include_str!("../../../docs/configuration.md");
        for (key, _, _) in super::BrokerConfig::describe() {
            assert!(
                doc.contains(&format!("`{key}`")),
                "docs/configuration.md misses {key}"
            );
        }
    }
}
