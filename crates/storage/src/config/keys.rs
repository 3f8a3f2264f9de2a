//! Every topic config Kafka 4 accepts (`LogConfig.CONFIG` in Kafka's
//! `storage` module): name, Kafka's type, Kafka's default and a short
//! description. Validation lives in [`super::LogConfig::set`].

/// Kafka's `ConfigDef.Type` of a topic config (what DescribeConfigs v3+
/// reports as `config_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    Boolean,
    String,
    Int,
    Long,
    Double,
    List,
}

/// One topic config.
#[derive(Debug, Clone, Copy)]
pub struct TopicKey {
    pub name: &'static str,
    pub kind: ConfigType,
    /// Kafka's default, as DescribeConfigs renders it.
    pub default: &'static str,
    /// Sluice acts on it on one node (else it is stored and described for
    /// the replication or tiered-storage work to come).
    pub used: bool,
    pub doc: &'static str,
}

const USED: bool = true;
const NO_EFFECT: bool = false;

const fn key(
    name: &'static str,
    kind: ConfigType,
    default: &'static str,
    used: bool,
    doc: &'static str,
) -> TopicKey {
    TopicKey {
        name,
        kind,
        default,
        used,
        doc,
    }
}

use ConfigType::{Boolean, Double, Int, List, Long, String as Str};

/// Kafka 4's topic configs, in name order.
#[rustfmt::skip]
pub const TOPIC_KEYS: &[TopicKey] = &[
    key("cleanup.policy", List, "delete", USED,
        "delete, compact, or both: how old data is removed"),
    key("compression.gzip.level", Int, "-1", NO_EFFECT,
        "gzip level when compression.type is gzip (1-9, -1: the codec's default)"),
    key("compression.lz4.level", Int, "9", NO_EFFECT,
        "lz4 level when compression.type is lz4 (1-17)"),
    key("compression.type", Str, "producer", USED,
        "codec batches are stored with: producer keeps the producer's; uncompressed, gzip, snappy, lz4 or zstd recompresses other batches on append"),
    key("compression.zstd.level", Int, "3", NO_EFFECT,
        "zstd level when compression.type is zstd (-131072 to 22)"),
    key("delete.retention.ms", Long, "86400000", USED,
        "how long compaction keeps tombstones"),
    key("file.delete.delay.ms", Long, "60000", USED,
        "how long a segment removed from the log stays on disk as .deleted"),
    key("flush.messages", Long, "9223372036854775807", USED,
        "records appended before an fsync"),
    key("flush.ms", Long, "9223372036854775807", USED,
        "longest time between fsyncs"),
    key("follower.replication.throttled.replicas", List, "", NO_EFFECT,
        "replicas throttled as followers: partition:broker,... or *"),
    key("index.interval.bytes", Int, "4096", USED,
        "bytes appended between two offset index entries"),
    key("leader.replication.throttled.replicas", List, "", NO_EFFECT,
        "replicas throttled as leaders: partition:broker,... or *"),
    key("local.retention.bytes", Long, "-2", NO_EFFECT,
        "local size kept with tiered storage (-2: retention.bytes)"),
    key("local.retention.ms", Long, "-2", NO_EFFECT,
        "local age kept with tiered storage (-2: retention.ms)"),
    key("max.compaction.lag.ms", Long, "9223372036854775807", USED,
        "dirty data older than this is compacted whatever the dirty ratio"),
    key("max.message.bytes", Int, "1048588", USED,
        "largest record batch the topic accepts (as sent; records may decompress to 64x this, 1 MiB-1 GiB)"),
    key("message.timestamp.after.max.ms", Long, "3600000", USED,
        "how far ahead of the broker's clock a CreateTime record timestamp may be (checked per record)"),
    key("message.timestamp.before.max.ms", Long, "9223372036854775807", USED,
        "how far behind the broker's clock a CreateTime record timestamp may be (checked per record)"),
    key("message.timestamp.type", Str, "CreateTime", USED,
        "CreateTime keeps the producer's timestamps, LogAppendTime stamps the broker's"),
    key("min.cleanable.dirty.ratio", Double, "0.5", USED,
        "dirty share of the log that triggers compaction"),
    key("min.compaction.lag.ms", Long, "0", USED,
        "records younger than this are never compacted"),
    key("min.insync.replicas", Int, "1", USED,
        "in-sync replicas required for acks=all"),
    key("preallocate", Boolean, "false", USED,
        "create segment files at full segment.bytes size"),
    key("remote.log.copy.disable", Boolean, "false", NO_EFFECT,
        "stop copying segments to tiered storage"),
    key("remote.log.delete.on.disable", Boolean, "false", NO_EFFECT,
        "delete remote data when tiered storage is turned off"),
    key("remote.storage.enable", Boolean, "false", NO_EFFECT,
        "keep old segments in tiered storage (refused: tiered storage is off)"),
    key("retention.bytes", Long, "-1", USED,
        "largest partition size before old segments go (-1: no limit)"),
    key("retention.ms", Long, "604800000", USED,
        "age at which a segment goes (-1: never)"),
    key("segment.bytes", Int, "1073741824", USED,
        "size at which the active segment rolls"),
    key("segment.index.bytes", Int, "10485760", USED,
        "size of each offset and time index file"),
    key("segment.jitter.ms", Long, "0", USED,
        "random time, up to this, taken off segment.ms per segment"),
    key("segment.ms", Long, "604800000", USED,
        "age at which the active segment rolls"),
    key("unclean.leader.election.enable", Boolean, "false", USED,
        "let an out-of-sync replica become leader when no in-sync one is left (its ISR then is just it; what only the old ISR had is lost)"),
];

/// Topic configs Kafka 4.0 removed: refused as unknown, as Kafka 4 does.
pub const REMOVED_IN_KAFKA_4: &[&str] = &[
    "message.downconversion.enable",
    "message.format.version",
    "message.timestamp.difference.max.ms",
];

/// The entry of `name`.
pub fn topic_key(name: &str) -> Option<&'static TopicKey> {
    TOPIC_KEYS.iter().find(|k| k.name == name)
}
