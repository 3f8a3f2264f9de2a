//! Topic-level log configuration: Kafka's names (`LogConfig.java`), defaults
//! and validation. The broker layers its `log.*` server defaults on top.

use std::collections::BTreeMap;

use sluice_protocol::record::Compression;

use crate::error::{Result, StorageError};

/// `cleanup.policy`: delete, compact, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    pub delete: bool,
    pub compact: bool,
}

/// `message.timestamp.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// `compression.type`: what the broker stores. `Producer` keeps batches as
/// the producer compressed them; a codec (`uncompressed` is
/// [`Compression::None`]) makes the broker recompress batches that use
/// another codec on append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicCompression {
    Producer,
    Codec(Compression),
}

impl TopicCompression {
    /// Kafka's name of the value (`producer`, `uncompressed`, `gzip`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::Producer => "producer",
            Self::Codec(Compression::None) => "uncompressed",
            Self::Codec(c) => c.name(),
        }
    }

    /// Parses Kafka's names (case-insensitive, as Kafka's validator).
    pub fn from_name(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "producer" => Some(Self::Producer),
            "uncompressed" => Some(Self::Codec(Compression::None)),
            "none" => None,
            other => Compression::from_name(other).map(Self::Codec),
        }
    }
}

/// The configuration of one partition log. Field names mirror Kafka's keys.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes`
    pub segment_bytes: u64,
    /// `segment.ms`
    pub segment_ms: i64,
    /// `segment.jitter.ms`
    pub segment_jitter_ms: i64,
    /// `segment.index.bytes`
    pub segment_index_bytes: u64,
    /// `index.interval.bytes`
    pub index_interval_bytes: u64,
    /// `retention.ms` (-1: forever)
    pub retention_ms: i64,
    /// `retention.bytes` (-1: unbounded)
    pub retention_bytes: i64,
    /// `cleanup.policy`
    pub cleanup_policy: CleanupPolicy,
    /// `delete.retention.ms`
    pub delete_retention_ms: i64,
    /// `min.cleanable.dirty.ratio`
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`
    pub max_compaction_lag_ms: i64,
    /// `flush.messages`
    pub flush_messages: i64,
    /// `flush.ms`
    pub flush_ms: i64,
    /// `message.timestamp.type`
    pub message_timestamp_type: TimestampType,
    /// `message.timestamp.before.max.ms`
    pub message_timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`
    pub message_timestamp_after_max_ms: i64,
    /// `max.message.bytes` (largest batch accepted)
    pub max_message_bytes: u64,
    /// `min.insync.replicas` (used by the broker for acks=all)
    pub min_insync_replicas: i32,
    /// `compression.type`
    pub compression_type: TopicCompression,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * 24 * 3600 * 1000,
            segment_jitter_ms: 0,
            segment_index_bytes: 10 * 1024 * 1024,
            index_interval_bytes: 4096,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            cleanup_policy: CleanupPolicy {
                delete: true,
                compact: false,
            },
            delete_retention_ms: 24 * 3600 * 1000,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            message_timestamp_type: TimestampType::CreateTime,
            message_timestamp_before_max_ms: i64::MAX,
            message_timestamp_after_max_ms: 3_600_000,
            max_message_bytes: 1024 * 1024 + 12,
            min_insync_replicas: 1,
            compression_type: TopicCompression::Producer,
        }
    }
}

/// Every topic config key this crate understands.
pub const KEYS: &[&str] = &[
    "cleanup.policy",
    "compression.type",
    "delete.retention.ms",
    "flush.messages",
    "flush.ms",
    "index.interval.bytes",
    "max.compaction.lag.ms",
    "max.message.bytes",
    "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.type",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "min.insync.replicas",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "segment.index.bytes",
    "segment.jitter.ms",
    "segment.ms",
];

fn invalid(key: &str, value: &str, reason: impl Into<String>) -> StorageError {
    StorageError::InvalidConfig {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

fn long(key: &str, value: &str, min: i64) -> Result<i64> {
    let v: i64 = value
        .trim()
        .parse()
        .map_err(|_| invalid(key, value, "not a 64-bit integer"))?;
    if v < min {
        return Err(invalid(key, value, format!("must be at least {min}")));
    }
    Ok(v)
}

fn int(key: &str, value: &str, min: i64) -> Result<u64> {
    let v = long(key, value, min)?;
    if v > i64::from(i32::MAX) {
        return Err(invalid(key, value, "must be at most 2147483647"));
    }
    Ok(v as u64)
}

impl LogConfig {
    /// This config with `props` applied on top. Unknown keys and bad values
    /// are errors that name the key.
    pub fn with_overrides<'a>(
        &self,
        props: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self> {
        let mut c = self.clone();
        for (k, v) in props {
            c.set(k, v)?;
        }
        Ok(c)
    }

    /// Applies one key.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        match key {
            "segment.bytes" => self.segment_bytes = int(key, value, 14)?,
            "segment.ms" => self.segment_ms = long(key, value, 1)?,
            "segment.jitter.ms" => self.segment_jitter_ms = long(key, value, 0)?,
            "segment.index.bytes" => self.segment_index_bytes = int(key, value, 12)?,
            "index.interval.bytes" => self.index_interval_bytes = int(key, value, 0)?,
            "retention.ms" => self.retention_ms = long(key, value, -1)?,
            "retention.bytes" => self.retention_bytes = long(key, value, -1)?,
            "delete.retention.ms" => self.delete_retention_ms = long(key, value, 0)?,
            "min.compaction.lag.ms" => self.min_compaction_lag_ms = long(key, value, 0)?,
            "max.compaction.lag.ms" => self.max_compaction_lag_ms = long(key, value, 1)?,
            "flush.messages" => self.flush_messages = long(key, value, 1)?,
            "flush.ms" => self.flush_ms = long(key, value, 0)?,
            "message.timestamp.before.max.ms" => {
                self.message_timestamp_before_max_ms = long(key, value, 0)?
            }
            "message.timestamp.after.max.ms" => {
                self.message_timestamp_after_max_ms = long(key, value, 0)?
            }
            "max.message.bytes" => self.max_message_bytes = int(key, value, 0)?,
            "min.insync.replicas" => self.min_insync_replicas = int(key, value, 1)? as i32,
            "min.cleanable.dirty.ratio" => {
                let r: f64 = value
                    .trim()
                    .parse()
                    .map_err(|_| invalid(key, value, "not a number"))?;
                if !(0.0..=1.0).contains(&r) {
                    return Err(invalid(key, value, "must be between 0 and 1"));
                }
                self.min_cleanable_dirty_ratio = r;
            }
            "compression.type" => {
                self.compression_type = TopicCompression::from_name(value).ok_or_else(|| {
                    invalid(
                        key,
                        value,
                        "must be one of uncompressed, zstd, lz4, snappy, gzip, producer",
                    )
                })?
            }
            "message.timestamp.type" => {
                self.message_timestamp_type = match value.trim() {
                    "CreateTime" => TimestampType::CreateTime,
                    "LogAppendTime" => TimestampType::LogAppendTime,
                    _ => return Err(invalid(key, value, "must be CreateTime or LogAppendTime")),
                }
            }
            "cleanup.policy" => {
                let mut p = CleanupPolicy {
                    delete: false,
                    compact: false,
                };
                for part in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    match part {
                        "delete" => p.delete = true,
                        "compact" => p.compact = true,
                        _ => return Err(invalid(key, value, "must be delete, compact or both")),
                    }
                }
                self.cleanup_policy = p;
            }
            _ => return Err(StorageError::UnknownConfig(key.to_string())),
        }
        Ok(())
    }

    /// The value of every key, as Kafka's DescribeConfigs would show it.
    pub fn to_props(&self) -> BTreeMap<&'static str, String> {
        let policy = match (self.cleanup_policy.delete, self.cleanup_policy.compact) {
            (true, true) => "compact,delete",
            (false, true) => "compact",
            (true, false) => "delete",
            (false, false) => "",
        };
        let ts_type = match self.message_timestamp_type {
            TimestampType::CreateTime => "CreateTime",
            TimestampType::LogAppendTime => "LogAppendTime",
        };
        let mut m = BTreeMap::new();
        m.insert("cleanup.policy", policy.to_string());
        m.insert("compression.type", self.compression_type.name().to_string());
        m.insert("delete.retention.ms", self.delete_retention_ms.to_string());
        m.insert("flush.messages", self.flush_messages.to_string());
        m.insert("flush.ms", self.flush_ms.to_string());
        m.insert(
            "index.interval.bytes",
            self.index_interval_bytes.to_string(),
        );
        m.insert(
            "max.compaction.lag.ms",
            self.max_compaction_lag_ms.to_string(),
        );
        m.insert("max.message.bytes", self.max_message_bytes.to_string());
        m.insert(
            "message.timestamp.after.max.ms",
            self.message_timestamp_after_max_ms.to_string(),
        );
        m.insert(
            "message.timestamp.before.max.ms",
            self.message_timestamp_before_max_ms.to_string(),
        );
        m.insert("message.timestamp.type", ts_type.to_string());
        m.insert(
            "min.cleanable.dirty.ratio",
            self.min_cleanable_dirty_ratio.to_string(),
        );
        m.insert(
            "min.compaction.lag.ms",
            self.min_compaction_lag_ms.to_string(),
        );
        m.insert("min.insync.replicas", self.min_insync_replicas.to_string());
        m.insert("retention.bytes", self.retention_bytes.to_string());
        m.insert("retention.ms", self.retention_ms.to_string());
        m.insert("segment.bytes", self.segment_bytes.to_string());
        m.insert("segment.index.bytes", self.segment_index_bytes.to_string());
        m.insert("segment.jitter.ms", self.segment_jitter_ms.to_string());
        m.insert("segment.ms", self.segment_ms.to_string());
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_kafka() {
        let c = LogConfig::default();
        assert_eq!(c.segment_bytes, 1_073_741_824);
        assert_eq!(c.retention_ms, 604_800_000);
        assert_eq!(c.retention_bytes, -1);
        assert_eq!(c.index_interval_bytes, 4096);
        assert_eq!(c.segment_index_bytes, 10_485_760);
        assert_eq!(c.max_message_bytes, 1_048_588);
        assert_eq!(c.to_props().len(), KEYS.len());
    }

    #[test]
    fn overrides_and_errors_name_the_key() {
        let c = LogConfig::default()
            .with_overrides([
                ("cleanup.policy", "compact,delete"),
                ("retention.ms", "-1"),
                ("message.timestamp.type", "LogAppendTime"),
            ])
            .expect("valid");
        assert!(c.cleanup_policy.compact && c.cleanup_policy.delete);
        assert_eq!(c.retention_ms, -1);
        let e = LogConfig::default()
            .with_overrides([("segment.bytes", "abc")])
            .expect_err("invalid");
        assert!(e.to_string().contains("segment.bytes"), "{e}");
        let e = LogConfig::default()
            .with_overrides([("no.such.key", "1")])
            .expect_err("unknown");
        assert!(e.to_string().contains("no.such.key"), "{e}");
        assert!(LogConfig::default()
            .with_overrides([("min.cleanable.dirty.ratio", "1.5")])
            .is_err());
        for k in KEYS {
            let v = LogConfig::default().to_props()[k].clone();
            LogConfig::default()
                .with_overrides([(*k, v.as_str())])
                .unwrap_or_else(|e| panic!("{k}={v}: {e}"));
        }
    }
}
