//! Topic-level log configuration: every topic config Kafka 4 accepts, with
//! Kafka's names (`LogConfig.java`), defaults, types and validation
//! (`ConfigDef` ranges and Kafka's error messages). The key table with types
//! and descriptions is in [`keys`]; the broker layers its `log.*` server
//! defaults on top.

mod keys;

use std::collections::BTreeMap;

pub use keys::{topic_key, ConfigType, TopicKey, REMOVED_IN_KAFKA_4, TOPIC_KEYS};

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

    /// Parses Kafka's names, in any case (`LogConfig::set` first checks the
    /// exact lower-case name, as Kafka's validator does).
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
    /// `compression.gzip.level` (-1: the codec's default)
    pub compression_gzip_level: i32,
    /// `compression.lz4.level`
    pub compression_lz4_level: i32,
    /// `compression.zstd.level`
    pub compression_zstd_level: i32,
    /// `file.delete.delay.ms`: how long removed segments stay as `.deleted`.
    pub file_delete_delay_ms: i64,
    /// `preallocate`: new segment files are created `segment.bytes` long.
    pub preallocate: bool,
    /// `unclean.leader.election.enable` (replication; stored on one node)
    pub unclean_leader_election_enable: bool,
    /// `leader.replication.throttled.replicas` (`p:b,...` or `*`)
    pub leader_replication_throttled_replicas: String,
    /// `follower.replication.throttled.replicas`
    pub follower_replication_throttled_replicas: String,
    /// `remote.storage.enable` (always false: tiered storage is off)
    pub remote_storage_enable: bool,
    /// `local.retention.ms` (-2: retention.ms)
    pub local_retention_ms: i64,
    /// `local.retention.bytes` (-2: retention.bytes)
    pub local_retention_bytes: i64,
    /// `remote.log.copy.disable`
    pub remote_log_copy_disable: bool,
    /// `remote.log.delete.on.disable`
    pub remote_log_delete_on_disable: bool,
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
            compression_gzip_level: -1,
            compression_lz4_level: 9,
            compression_zstd_level: 3,
            file_delete_delay_ms: 60_000,
            preallocate: false,
            unclean_leader_election_enable: false,
            leader_replication_throttled_replicas: String::new(),
            follower_replication_throttled_replicas: String::new(),
            remote_storage_enable: false,
            local_retention_ms: -2,
            local_retention_bytes: -2,
            remote_log_copy_disable: false,
            remote_log_delete_on_disable: false,
        }
    }
}

/// Every topic config key this crate understands (Kafka 4's list).
pub const KEYS: &[&str] = &[
    "cleanup.policy",
    "compression.gzip.level",
    "compression.lz4.level",
    "compression.type",
    "compression.zstd.level",
    "delete.retention.ms",
    "file.delete.delay.ms",
    "flush.messages",
    "flush.ms",
    "follower.replication.throttled.replicas",
    "index.interval.bytes",
    "leader.replication.throttled.replicas",
    "local.retention.bytes",
    "local.retention.ms",
    "max.compaction.lag.ms",
    "max.message.bytes",
    "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.type",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "min.insync.replicas",
    "preallocate",
    "remote.log.copy.disable",
    "remote.log.delete.on.disable",
    "remote.storage.enable",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "segment.index.bytes",
    "segment.jitter.ms",
    "segment.ms",
    "unclean.leader.election.enable",
];

fn invalid(key: &str, value: &str, reason: impl Into<String>) -> StorageError {
    StorageError::InvalidConfig {
        key: key.to_string(),
        value: value.trim().to_string(),
        reason: reason.into(),
    }
}

/// Kafka's LONG parse, then `min`/`max` as `ConfigDef.Range` checks them.
fn long_in(key: &str, value: &str, min: Option<i64>, max: Option<i64>) -> Result<i64> {
    let v: i64 = value
        .trim()
        .parse()
        .map_err(|_| invalid(key, value, "Not a number of type LONG"))?;
    range(key, value, v, min, max)
}

fn long(key: &str, value: &str, min: i64) -> Result<i64> {
    long_in(key, value, Some(min), None)
}

/// Kafka's INT parse (32-bit) and range.
fn int_in(key: &str, value: &str, min: Option<i64>, max: Option<i64>) -> Result<i64> {
    let v: i32 = value
        .trim()
        .parse()
        .map_err(|_| invalid(key, value, "Not a number of type INT"))?;
    range(key, value, i64::from(v), min, max)
}

fn int(key: &str, value: &str, min: i64) -> Result<u64> {
    Ok(int_in(key, value, Some(min), None)?.max(0) as u64)
}

fn range(key: &str, value: &str, v: i64, min: Option<i64>, max: Option<i64>) -> Result<i64> {
    if let Some(min) = min.filter(|&m| v < m) {
        return Err(invalid(key, value, format!("Value must be at least {min}")));
    }
    if let Some(max) = max.filter(|&m| v > m) {
        return Err(invalid(
            key,
            value,
            format!("Value must be no more than {max}"),
        ));
    }
    Ok(v)
}

/// Kafka's BOOLEAN parse: `true`/`false`, any case.
fn boolean(key: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid(
            key,
            value,
            "Expected value to be either true or false",
        )),
    }
}

/// `ConfigDef.ValidString.in(...)`: an exact (case-sensitive) member.
fn one_of<'a>(key: &str, value: &'a str, valid: &[&str]) -> Result<&'a str> {
    let v = value.trim();
    if valid.contains(&v) {
        Ok(v)
    } else {
        Err(invalid(
            key,
            value,
            format!("String must be one of: {}", valid.join(", ")),
        ))
    }
}

/// Kafka's LIST parse: empty is the empty list, else items split at commas
/// (whitespace around them dropped).
fn list(value: &str) -> Vec<&str> {
    let v = value.trim();
    if v.is_empty() {
        Vec::new()
    } else {
        v.split(',').map(str::trim).collect()
    }
}

/// Kafka's `ThrottledReplicaListValidator`: `*` or `partition:broker` items.
fn throttled_replicas(key: &str, value: &str) -> Result<String> {
    let items = list(value);
    let pair = |s: &str| {
        s.is_empty()
            || s.split_once(':').is_some_and(|(p, b)| {
                !p.is_empty()
                    && !b.is_empty()
                    && p.bytes().all(|c| c.is_ascii_digit())
                    && b.bytes().all(|c| c.is_ascii_digit())
            })
    };
    if items.iter().all(|s| pair(s)) || items.concat() == "*" {
        Ok(items.join(","))
    } else {
        Err(invalid(
            key,
            value,
            format!("{key} must be the literal '*' or a list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."),
        ))
    }
}

/// A double as Java's `Double.toString` writes the usual ones (`1.0`, `0.5`).
fn java_double(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e7 {
        format!("{v:.1}")
    } else {
        v.to_string()
    }
}

impl LogConfig {
    /// This config with `props` applied on top, then checked as a whole
    /// (Kafka's `LogConfig.validate`). Unknown keys and bad values are
    /// errors that name the key.
    pub fn with_overrides<'a>(
        &self,
        props: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self> {
        let mut c = self.clone();
        for (k, v) in props {
            c.set(k, v)?;
        }
        c.validate()?;
        Ok(c)
    }

    /// Checks that need several keys (Kafka's `LogConfig.validateValues`
    /// and its remote-storage checks with tiered storage off).
    pub fn validate(&self) -> Result<()> {
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms {
            return Err(invalid(
                "min.compaction.lag.ms",
                &self.min_compaction_lag_ms.to_string(),
                format!(
                    "conflict topic config setting min.compaction.lag.ms ({}) > max.compaction.lag.ms ({})",
                    self.min_compaction_lag_ms, self.max_compaction_lag_ms
                ),
            ));
        }
        if self.remote_storage_enable {
            return Err(invalid(
                "remote.storage.enable",
                "true",
                "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage.",
            ));
        }
        Ok(())
    }

    /// Applies one key, with Kafka's types and ranges.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        match key {
            "segment.bytes" => self.segment_bytes = int(key, value, 14)?,
            "segment.ms" => self.segment_ms = long(key, value, 1)?,
            "segment.jitter.ms" => self.segment_jitter_ms = long(key, value, 0)?,
            "segment.index.bytes" => self.segment_index_bytes = int(key, value, 4)?,
            "index.interval.bytes" => self.index_interval_bytes = int(key, value, 0)?,
            "retention.ms" => self.retention_ms = long(key, value, -1)?,
            "retention.bytes" => self.retention_bytes = long_in(key, value, None, None)?,
            "delete.retention.ms" => self.delete_retention_ms = long(key, value, 0)?,
            "min.compaction.lag.ms" => self.min_compaction_lag_ms = long(key, value, 0)?,
            "max.compaction.lag.ms" => self.max_compaction_lag_ms = long(key, value, 1)?,
            "file.delete.delay.ms" => self.file_delete_delay_ms = long(key, value, 0)?,
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
                    .ok()
                    .filter(|r: &f64| r.is_finite())
                    .ok_or_else(|| invalid(key, value, "Not a number of type DOUBLE"))?;
                if r < 0.0 {
                    return Err(invalid(key, value, "Value must be at least 0"));
                }
                if r > 1.0 {
                    return Err(invalid(key, value, "Value must be no more than 1"));
                }
                self.min_cleanable_dirty_ratio = r;
            }
            "compression.type" => {
                let name = one_of(
                    key,
                    value,
                    &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"],
                )?;
                self.compression_type = TopicCompression::from_name(name)
                    .ok_or_else(|| invalid(key, value, "unknown codec"))?;
            }
            "compression.gzip.level" => {
                let v = int_in(key, value, None, None)?;
                if v != -1 && !(1..=9).contains(&v) {
                    return Err(invalid(
                        key,
                        value,
                        "Value must be between 1 and 9 or equal to -1",
                    ));
                }
                self.compression_gzip_level = v as i32;
            }
            "compression.lz4.level" => {
                self.compression_lz4_level = int_in(key, value, Some(1), Some(17))? as i32
            }
            "compression.zstd.level" => {
                self.compression_zstd_level = int_in(key, value, Some(-131_072), Some(22))? as i32
            }
            "message.timestamp.type" => {
                self.message_timestamp_type =
                    match one_of(key, value, &["CreateTime", "LogAppendTime"])? {
                        "LogAppendTime" => TimestampType::LogAppendTime,
                        _ => TimestampType::CreateTime,
                    }
            }
            "cleanup.policy" => {
                let mut p = CleanupPolicy {
                    delete: false,
                    compact: false,
                };
                for part in list(value) {
                    match one_of(key, part, &["compact", "delete"])? {
                        "delete" => p.delete = true,
                        _ => p.compact = true,
                    }
                }
                self.cleanup_policy = p;
            }
            "preallocate" => self.preallocate = boolean(key, value)?,
            "unclean.leader.election.enable" => {
                self.unclean_leader_election_enable = boolean(key, value)?
            }
            "leader.replication.throttled.replicas" => {
                self.leader_replication_throttled_replicas = throttled_replicas(key, value)?
            }
            "follower.replication.throttled.replicas" => {
                self.follower_replication_throttled_replicas = throttled_replicas(key, value)?
            }
            "remote.storage.enable" => self.remote_storage_enable = boolean(key, value)?,
            "local.retention.ms" => self.local_retention_ms = long(key, value, -2)?,
            "local.retention.bytes" => self.local_retention_bytes = long(key, value, -2)?,
            "remote.log.copy.disable" => self.remote_log_copy_disable = boolean(key, value)?,
            "remote.log.delete.on.disable" => {
                self.remote_log_delete_on_disable = boolean(key, value)?
            }
            _ => return Err(StorageError::UnknownConfig(key.to_string())),
        }
        Ok(())
    }

    /// Kafka's `maxSegmentMs`: on compacted topics `max.compaction.lag.ms`
    /// also bounds a segment's age, so dirty data can be cleaned in time.
    pub fn max_segment_ms(&self) -> i64 {
        if self.cleanup_policy.compact && self.max_compaction_lag_ms > 0 {
            self.max_compaction_lag_ms.min(self.segment_ms)
        } else {
            self.segment_ms
        }
    }

    /// Kafka's `randomSegmentJitter`: a random time in
    /// `[0, min(segment.jitter.ms, segment.ms))`, drawn once per segment.
    pub fn random_segment_jitter(&self) -> i64 {
        let bound = self.segment_jitter_ms.min(self.segment_ms);
        if self.segment_jitter_ms <= 0 || bound <= 0 {
            return 0;
        }
        (random_u64() % bound as u64) as i64
    }

    /// Size a new segment file is created with (Kafka's `initFileSize`).
    pub fn init_file_size(&self) -> u64 {
        if self.preallocate {
            self.segment_bytes
        } else {
            0
        }
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
        let values: [(&'static str, String); 33] = [
            ("cleanup.policy", policy.to_string()),
            (
                "compression.gzip.level",
                self.compression_gzip_level.to_string(),
            ),
            (
                "compression.lz4.level",
                self.compression_lz4_level.to_string(),
            ),
            ("compression.type", self.compression_type.name().to_string()),
            (
                "compression.zstd.level",
                self.compression_zstd_level.to_string(),
            ),
            ("delete.retention.ms", self.delete_retention_ms.to_string()),
            (
                "file.delete.delay.ms",
                self.file_delete_delay_ms.to_string(),
            ),
            ("flush.messages", self.flush_messages.to_string()),
            ("flush.ms", self.flush_ms.to_string()),
            (
                "follower.replication.throttled.replicas",
                self.follower_replication_throttled_replicas.clone(),
            ),
            (
                "index.interval.bytes",
                self.index_interval_bytes.to_string(),
            ),
            (
                "leader.replication.throttled.replicas",
                self.leader_replication_throttled_replicas.clone(),
            ),
            (
                "local.retention.bytes",
                self.local_retention_bytes.to_string(),
            ),
            ("local.retention.ms", self.local_retention_ms.to_string()),
            (
                "max.compaction.lag.ms",
                self.max_compaction_lag_ms.to_string(),
            ),
            ("max.message.bytes", self.max_message_bytes.to_string()),
            (
                "message.timestamp.after.max.ms",
                self.message_timestamp_after_max_ms.to_string(),
            ),
            (
                "message.timestamp.before.max.ms",
                self.message_timestamp_before_max_ms.to_string(),
            ),
            ("message.timestamp.type", ts_type.to_string()),
            (
                "min.cleanable.dirty.ratio",
                java_double(self.min_cleanable_dirty_ratio),
            ),
            (
                "min.compaction.lag.ms",
                self.min_compaction_lag_ms.to_string(),
            ),
            ("min.insync.replicas", self.min_insync_replicas.to_string()),
            ("preallocate", self.preallocate.to_string()),
            (
                "remote.log.copy.disable",
                self.remote_log_copy_disable.to_string(),
            ),
            (
                "remote.log.delete.on.disable",
                self.remote_log_delete_on_disable.to_string(),
            ),
            (
                "remote.storage.enable",
                self.remote_storage_enable.to_string(),
            ),
            ("retention.bytes", self.retention_bytes.to_string()),
            ("retention.ms", self.retention_ms.to_string()),
            ("segment.bytes", self.segment_bytes.to_string()),
            ("segment.index.bytes", self.segment_index_bytes.to_string()),
            ("segment.jitter.ms", self.segment_jitter_ms.to_string()),
            ("segment.ms", self.segment_ms.to_string()),
            (
                "unclean.leader.election.enable",
                self.unclean_leader_election_enable.to_string(),
            ),
        ];
        values.into_iter().collect()
    }
}

/// A random number for segment jitter (std's per-process random hasher
/// keys, so no extra dependency).
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish()
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
        assert_eq!(c.file_delete_delay_ms, 60_000);
        let props = c.to_props();
        assert_eq!(props.len(), KEYS.len());
        assert_eq!(TOPIC_KEYS.len(), KEYS.len());
        // The table, KEYS and to_props name the same keys, and the table's
        // defaults are what a default LogConfig describes.
        for (k, t) in KEYS.iter().zip(TOPIC_KEYS) {
            assert_eq!(*k, t.name);
            assert_eq!(props[k], t.default, "{k}");
        }
    }

    /// Kafka's valid values per key, and values Kafka refuses.
    #[rustfmt::skip]
    const CASES: &[(&str, &[&str], &[&str])] = &[
        ("cleanup.policy", &["delete", "compact", "compact,delete", "delete, compact", ""], &["Delete", "remove", "compact,,delete"]),
        ("compression.gzip.level", &["-1", "1", "9"], &["0", "10", "-2", "x"]),
        ("compression.lz4.level", &["1", "9", "17"], &["0", "18", "-1"]),
        ("compression.type", &["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"], &["GZIP", "none", "brotli", ""]),
        ("compression.zstd.level", &["-131072", "3", "22"], &["-131073", "23"]),
        ("delete.retention.ms", &["0", "86400000"], &["-1", "1.5"]),
        ("file.delete.delay.ms", &["0", "60000"], &["-1", "soon"]),
        ("flush.messages", &["1", "9223372036854775807"], &["0", "9223372036854775808"]),
        ("flush.ms", &["0", "1000"], &["-1"]),
        ("follower.replication.throttled.replicas", &["", "*", "0:1", "0:1, 1:1"], &["0", "a:b", "*,0:1", "0:1:2"]),
        ("index.interval.bytes", &["0", "4096", "2147483647"], &["-1", "2147483648"]),
        ("leader.replication.throttled.replicas", &["", "*", "1:1,2:1"], &["all", "1-1"]),
        ("local.retention.bytes", &["-2", "-1", "0"], &["-3"]),
        ("local.retention.ms", &["-2", "-1", "1000"], &["-3"]),
        ("max.compaction.lag.ms", &["1", "9223372036854775807"], &["0", "-1"]),
        ("max.message.bytes", &["0", "1048588", "2147483647"], &["-1", "2147483648"]),
        ("message.timestamp.after.max.ms", &["0", "3600000"], &["-1"]),
        ("message.timestamp.before.max.ms", &["0", "9223372036854775807"], &["-1"]),
        ("message.timestamp.type", &["CreateTime", "LogAppendTime"], &["createtime", "NoTime"]),
        ("min.cleanable.dirty.ratio", &["0", "0.5", "1", "1.0"], &["-0.1", "1.01", "NaN", "half"]),
        ("min.compaction.lag.ms", &["0", "1000"], &["-1"]),
        ("min.insync.replicas", &["1", "3"], &["0", "-1"]),
        ("preallocate", &["true", "false", "TRUE", "False"], &["yes", "1", ""]),
        ("remote.log.copy.disable", &["true", "false"], &["on"]),
        ("remote.log.delete.on.disable", &["true", "false"], &["off"]),
        ("remote.storage.enable", &["false"], &["true", "maybe"]),
        ("retention.bytes", &["-1", "-5", "0", "1073741824"], &["1GB"]),
        ("retention.ms", &["-1", "0", "604800000"], &["-2"]),
        ("segment.bytes", &["14", "1048576", "2147483647"], &["13", "0", "2147483648"]),
        ("segment.index.bytes", &["4", "10485760"], &["3", "0"]),
        ("segment.jitter.ms", &["0", "1000"], &["-1"]),
        ("segment.ms", &["1", "604800000"], &["0", "-1"]),
        ("unclean.leader.election.enable", &["true", "false"], &["sometimes"]),
    ];

    #[test]
    fn every_key_takes_kafkas_values_and_refuses_others_naming_the_key() {
        assert_eq!(CASES.len(), KEYS.len());
        for (key, good, bad) in CASES {
            assert!(KEYS.contains(key), "{key}");
            for v in *good {
                LogConfig::default()
                    .with_overrides([(*key, *v)])
                    .unwrap_or_else(|e| panic!("{key}={v}: {e}"));
            }
            for v in *bad {
                let e = LogConfig::default()
                    .with_overrides([(*key, *v)])
                    .expect_err(&format!("{key}={v} must be refused"));
                let msg = e.to_string();
                assert!(
                    msg.contains(&format!("for configuration {key}")),
                    "{key}={v}: {msg}"
                );
            }
        }
    }

    #[test]
    fn messages_are_kafkas() {
        let msg = |k: &str, v: &str| {
            LogConfig::default()
                .with_overrides([(k, v)])
                .expect_err("invalid")
                .to_string()
        };
        assert_eq!(
            msg("segment.bytes", "abc"),
            "Invalid value abc for configuration segment.bytes: Not a number of type INT"
        );
        assert_eq!(
            msg("segment.bytes", "13"),
            "Invalid value 13 for configuration segment.bytes: Value must be at least 14"
        );
        assert_eq!(
            msg("min.cleanable.dirty.ratio", "2"),
            "Invalid value 2 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"
        );
        assert_eq!(
            msg("compression.type", "GZIP"),
            "Invalid value GZIP for configuration compression.type: String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"
        );
        assert_eq!(
            msg("cleanup.policy", "compact,remove"),
            "Invalid value remove for configuration cleanup.policy: String must be one of: compact, delete"
        );
        assert_eq!(
            msg("preallocate", "yes"),
            "Invalid value yes for configuration preallocate: Expected value to be either true or false"
        );
        assert_eq!(
            msg("no.such.key", "1"),
            "Unknown topic config name: no.such.key"
        );
        for removed in REMOVED_IN_KAFKA_4 {
            assert_eq!(
                msg(removed, "1"),
                format!("Unknown topic config name: {removed}")
            );
        }
        let e = LogConfig::default()
            .with_overrides([
                ("min.compaction.lag.ms", "5000"),
                ("max.compaction.lag.ms", "1000"),
            ])
            .expect_err("min > max");
        assert!(
            e.to_string()
                .contains("min.compaction.lag.ms (5000) > max.compaction.lag.ms (1000)"),
            "{e}"
        );
    }

    #[test]
    fn overrides_apply_and_describe_back() {
        let c = LogConfig::default()
            .with_overrides([
                ("cleanup.policy", "compact,delete"),
                ("retention.ms", "-1"),
                ("message.timestamp.type", "LogAppendTime"),
                ("preallocate", "TRUE"),
                ("file.delete.delay.ms", "5"),
                ("unclean.leader.election.enable", "true"),
                ("leader.replication.throttled.replicas", "0:1 , 1:1"),
                ("min.cleanable.dirty.ratio", "1"),
                ("compression.type", "zstd"),
                ("compression.zstd.level", "-5"),
            ])
            .expect("valid");
        assert!(c.cleanup_policy.compact && c.cleanup_policy.delete);
        assert_eq!(c.retention_ms, -1);
        assert!(c.preallocate && c.unclean_leader_election_enable);
        assert_eq!(c.file_delete_delay_ms, 5);
        let p = c.to_props();
        assert_eq!(p["preallocate"], "true");
        assert_eq!(p["leader.replication.throttled.replicas"], "0:1,1:1");
        assert_eq!(p["min.cleanable.dirty.ratio"], "1.0");
        assert_eq!(p["compression.type"], "zstd");
        assert_eq!(p["compression.zstd.level"], "-5");
        // Every described value is accepted back.
        for (k, v) in &p {
            LogConfig::default()
                .with_overrides([(*k, v.as_str())])
                .unwrap_or_else(|e| panic!("{k}={v}: {e}"));
        }
    }

    #[test]
    fn jitter_and_segment_age_follow_kafka() {
        let mut c = LogConfig {
            segment_ms: 1000,
            segment_jitter_ms: 5000,
            ..LogConfig::default()
        };
        for _ in 0..200 {
            let j = c.random_segment_jitter();
            assert!((0..1000).contains(&j), "{j}");
        }
        c.segment_jitter_ms = 0;
        assert_eq!(c.random_segment_jitter(), 0);
        assert_eq!(c.max_segment_ms(), 1000);
        c.cleanup_policy.compact = true;
        c.max_compaction_lag_ms = 300;
        assert_eq!(c.max_segment_ms(), 300);
        assert_eq!(c.init_file_size(), 0);
        c.preallocate = true;
        assert_eq!(c.init_file_size(), c.segment_bytes);
    }
}
