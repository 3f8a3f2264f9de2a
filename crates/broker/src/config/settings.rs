//! The broker's settings, typed and parsed once at start: every broker key
//! Sluice acts on, as a field of [`Settings`]. Code outside `config` reads
//! these fields, never a key by name, so a misspelt key is a compile error
//! (a field) or a start-up error (the one table below), not a silent 0.
//!
//! Topic config defaults (`log.*`) are parsed into `sluice_storage::LogConfig`
//! by [`BrokerConfig::log_config`](super::BrokerConfig::log_config) and the
//! metadata log's into `MetadataLogConfig`; listeners into
//! [`Listener`](super::Listener). This struct holds the rest.

use std::str::FromStr;

use super::{invalid, key_def, BrokerConfig};
use crate::error::Result;

/// Declares the settings: field, key, type. The parser reads each key
/// through [`read`], which refuses keys missing from the key table.
macro_rules! settings {
    ($($(#[$doc:meta])* $field:ident: $ty:ty = $key:literal;)*) => {
        /// Typed broker settings (see the module docs).
        #[derive(Debug, Clone, PartialEq)]
        pub struct Settings {
            $($(#[$doc])* pub $field: $ty,)*
        }

        impl Settings {
            /// Parses every setting from `config` (already validated key
            /// by key; this adds the types).
            pub fn from_config(config: &BrokerConfig) -> Result<Self> {
                Ok(Self {
                    $($field: read(config, $key)?,)*
                })
            }

            /// The keys behind the fields, for tests and docs.
            pub fn keys() -> &'static [&'static str] {
                &[$($key),*]
            }
        }
    };
}

settings! {
    /// `node.id`
    node_id: i32 = "node.id";
    /// `num.partitions`: partitions of auto-created topics.
    num_partitions: i32 = "num.partitions";
    /// `replica.lag.time.max.ms`: a follower not caught up for this long
    /// leaves the ISR.
    replica_lag_time_max_ms: i64 = "replica.lag.time.max.ms";
    /// `replica.fetch.wait.max.ms`: longest wait of a follower fetch.
    replica_fetch_wait_max_ms: i32 = "replica.fetch.wait.max.ms";
    /// `replica.fetch.max.bytes`: bytes per partition a follower fetches.
    replica_fetch_max_bytes: i32 = "replica.fetch.max.bytes";
    /// `replica.fetch.backoff.ms`: pause after a failed follower fetch.
    replica_fetch_backoff_ms: i32 = "replica.fetch.backoff.ms";
    /// `default.replication.factor`
    default_replication_factor: i32 = "default.replication.factor";
    /// `auto.create.topics.enable`
    auto_create_topics_enable: bool = "auto.create.topics.enable";
    /// `delete.topic.enable`
    delete_topic_enable: bool = "delete.topic.enable";
    /// `socket.request.max.bytes`: the largest request frame.
    socket_request_max_bytes: i32 = "socket.request.max.bytes";
    /// `queued.max.request.bytes` (-1: Sluice's bounded default).
    queued_max_request_bytes: i64 = "queued.max.request.bytes";
    /// `connections.max.idle.ms`
    connections_max_idle_ms: i64 = "connections.max.idle.ms";
    /// `max.connections`
    max_connections: i32 = "max.connections";
    /// `max.connections.per.ip`
    max_connections_per_ip: i32 = "max.connections.per.ip";
    /// `max.connections.per.ip.overrides`: `host:count,...`
    max_connections_per_ip_overrides: String = "max.connections.per.ip.overrides";
    /// `fetch.max.bytes`: cap of a consumer's fetch response.
    fetch_max_bytes: i32 = "fetch.max.bytes";
    /// `max.incremental.fetch.session.cache.slots`
    fetch_session_cache_slots: i32 = "max.incremental.fetch.session.cache.slots";
    /// `max.request.partition.size.limit` (DescribeTopicPartitions)
    max_request_partition_size_limit: i32 = "max.request.partition.size.limit";
    /// `num.recovery.threads.per.data.dir`
    num_recovery_threads_per_data_dir: i32 = "num.recovery.threads.per.data.dir";
    /// `log.retention.check.interval.ms`
    log_retention_check_interval_ms: i64 = "log.retention.check.interval.ms";
    /// `log.flush.offset.checkpoint.interval.ms`
    log_flush_offset_checkpoint_interval_ms: i32 = "log.flush.offset.checkpoint.interval.ms";
    /// `log.cleaner.enable`
    log_cleaner_enable: bool = "log.cleaner.enable";
    /// `log.cleaner.backoff.ms`
    log_cleaner_backoff_ms: i64 = "log.cleaner.backoff.ms";
    /// `log.cleaner.dedupe.buffer.size`
    log_cleaner_dedupe_buffer_size: i64 = "log.cleaner.dedupe.buffer.size";
    /// `auto.leader.rebalance.enable`
    auto_leader_rebalance_enable: bool = "auto.leader.rebalance.enable";
    /// `leader.imbalance.check.interval.seconds`
    leader_imbalance_check_interval_seconds: i64 = "leader.imbalance.check.interval.seconds";
    /// `offsets.topic.num.partitions`
    offsets_topic_num_partitions: i32 = "offsets.topic.num.partitions";
    /// `offsets.topic.replication.factor`
    offsets_topic_replication_factor: i16 = "offsets.topic.replication.factor";
    /// `offsets.topic.segment.bytes`
    offsets_topic_segment_bytes: i32 = "offsets.topic.segment.bytes";
    /// `offsets.commit.timeout.ms`
    offsets_commit_timeout_ms: i32 = "offsets.commit.timeout.ms";
    /// `offsets.retention.minutes`
    offsets_retention_minutes: i64 = "offsets.retention.minutes";
    /// `offsets.retention.check.interval.ms`
    offsets_retention_check_interval_ms: i64 = "offsets.retention.check.interval.ms";
    /// `group.min.session.timeout.ms`
    group_min_session_timeout_ms: i32 = "group.min.session.timeout.ms";
    /// `group.max.session.timeout.ms`
    group_max_session_timeout_ms: i32 = "group.max.session.timeout.ms";
    /// `group.initial.rebalance.delay.ms`
    group_initial_rebalance_delay_ms: i32 = "group.initial.rebalance.delay.ms";
    /// `group.max.size`
    group_max_size: i32 = "group.max.size";
    /// `producer.id.expiration.ms`
    producer_id_expiration_ms: i32 = "producer.id.expiration.ms";
    /// `producer.id.expiration.check.interval.ms`
    producer_id_expiration_check_interval_ms: i32 = "producer.id.expiration.check.interval.ms";
    /// `transaction.max.timeout.ms`: the largest `transaction.timeout.ms`
    /// InitProducerId accepts.
    transaction_max_timeout_ms: i32 = "transaction.max.timeout.ms";
    /// `transactional.id.expiration.ms`
    transactional_id_expiration_ms: i32 = "transactional.id.expiration.ms";
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`
    transaction_abort_timed_out_interval_ms: i32 =
        "transaction.abort.timed.out.transaction.cleanup.interval.ms";
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`
    transaction_remove_expired_interval_ms: i32 =
        "transaction.remove.expired.transaction.cleanup.interval.ms";
    /// `transaction.state.log.num.partitions`
    transaction_state_log_num_partitions: i32 = "transaction.state.log.num.partitions";
    /// `transaction.state.log.replication.factor`
    transaction_state_log_replication_factor: i16 = "transaction.state.log.replication.factor";
    /// `transaction.state.log.segment.bytes`
    transaction_state_log_segment_bytes: i32 = "transaction.state.log.segment.bytes";
    /// `transaction.state.log.min.isr`
    transaction_state_log_min_isr: i32 = "transaction.state.log.min.isr";
}

/// Reads `key` as a `T`. A key missing from the table (a typo in the
/// settings list) or a value that does not parse is an error naming it.
fn read<T: FromStr>(config: &BrokerConfig, key: &str) -> Result<T> {
    if key_def(key).is_none() {
        return Err(invalid(key, "", "not a known broker key (settings table)"));
    }
    let value = config.str(key);
    value
        .trim()
        .parse()
        .map_err(|_| invalid(key, &value, "does not parse as the setting's type"))
}

impl Default for Settings {
    /// The settings of a zero-config single node.
    fn default() -> Self {
        match Self::from_config(&BrokerConfig::default()) {
            Ok(s) => s,
            Err(e) => panic!("the default broker config does not parse: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_names_a_known_key_and_defaults_parse() {
        for key in Settings::keys() {
            assert!(key_def(key).is_some(), "{key} is not in the key table");
        }
        let s = Settings::default();
        assert_eq!(s.num_partitions, 1);
        assert_eq!(s.offsets_topic_num_partitions, 50);
        // Kafka's defaults; a single node creates the topics with one
        // replica (`Broker::internal_topic_replication`).
        assert_eq!(s.offsets_topic_replication_factor, 3);
        assert_eq!(s.transaction_state_log_replication_factor, 3);
        assert_eq!(s.transaction_state_log_min_isr, 2);
        assert_eq!(s.transaction_state_log_num_partitions, 50);
        assert_eq!(s.transaction_max_timeout_ms, 900_000);
        assert_eq!(s.socket_request_max_bytes, 104_857_600);
        assert!(s.auto_create_topics_enable);
    }

    #[test]
    fn values_set_reach_the_fields() {
        let mut c = BrokerConfig::default();
        c.set("num.partitions", "3").expect("set");
        c.set("fetch.max.bytes", "1024").expect("set");
        c.set("auto.create.topics.enable", "false").expect("set");
        let s = Settings::from_config(&c).expect("parse");
        assert_eq!(s.num_partitions, 3);
        assert_eq!(s.fetch_max_bytes, 1024);
        assert!(!s.auto_create_topics_enable);
    }

    #[test]
    fn a_misspelt_key_is_an_error_naming_it() {
        let c = BrokerConfig::default();
        let e = read::<i32>(&c, "num.partitionz").expect_err("typo");
        assert!(e.to_string().contains("num.partitionz"), "{e}");
    }
}
