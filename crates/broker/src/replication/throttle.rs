//! Replication throttles (Kafka's `ReplicationQuotaManager`, KIP-73): the
//! dynamic broker configs `leader.replication.throttled.rate` and
//! `follower.replication.throttled.rate` (bytes per second, default
//! `Long.MAX_VALUE`, set per broker or cluster-wide through
//! AlterConfigs/IncrementalAlterConfigs and kept in the metadata log) bound
//! the replication traffic of the replicas the topic configs
//! `leader.replication.throttled.replicas` and
//! `follower.replication.throttled.replicas` name (`partition:broker,...`,
//! or `*` for all; the broker is the one the throttle applies on).
//!
//! As Kafka: the leader answers a follower's fetch of a throttled partition
//! with no records while the follower is out of the ISR and the leader's
//! measured rate is over its bound; the follower leaves such partitions out
//! of its fetches while it is out of the ISR and its own rate is over its
//! bound. Only the bytes of throttled partitions are counted. The rate is
//! Kafka's windowed rate: `replication.quota.window.num` samples of
//! `replication.quota.window.size.seconds`, over at least all but one
//! sample's length.
//!
//! The third dynamic broker key, `replica.alter.log.dirs.io.max.bytes.per.second`
//! (same default and levels), bounds the copy of a move between this
//! broker's data folders (AlterReplicaLogDirs): the storage layer paces
//! the copy made while appends go on to it, reading the value before every
//! chunk, so a change applies to a move in progress.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use proto_kafka::ResponseError;
use sluice_controller::records::RESOURCE_BROKER;
use sluice_controller::{MetadataImage, MetadataRecord};

use crate::broker::{ApiError, Broker};

/// The leader-side rate key.
pub(crate) const LEADER_RATE: &str = "leader.replication.throttled.rate";
/// The follower-side rate key.
pub(crate) const FOLLOWER_RATE: &str = "follower.replication.throttled.rate";
/// The bound on the copy of a move between data folders.
pub(crate) const ALTER_LOG_DIRS_RATE: &str = "replica.alter.log.dirs.io.max.bytes.per.second";
/// The topic key naming the replicas throttled as leaders.
pub(crate) const LEADER_REPLICAS: &str = "leader.replication.throttled.replicas";
/// The topic key naming the replicas throttled as followers.
pub(crate) const FOLLOWER_REPLICAS: &str = "follower.replication.throttled.replicas";

/// The dynamic broker keys Sluice takes (every other broker key is
/// read-only), with Kafka's documentation.
pub(crate) const DYNAMIC_BROKER_KEYS: &[(&str, &str)] = &[
    (
        LEADER_RATE,
        "A long representing the upper bound (bytes/sec) on replication traffic for leaders enumerated in the property leader.replication.throttled.replicas (for each topic).",
    ),
    (
        FOLLOWER_RATE,
        "A long representing the upper bound (bytes/sec) on replication traffic for followers enumerated in the property follower.replication.throttled.replicas (for each topic).",
    ),
    (
        ALTER_LOG_DIRS_RATE,
        "A long representing the upper bound (bytes/sec) on disk IO used for moving replica between log directories on the same broker.",
    ),
];

/// Whether `key` is a dynamic broker key.
pub(crate) fn is_dynamic_broker_key(key: &str) -> bool {
    DYNAMIC_BROKER_KEYS.iter().any(|(k, _)| *k == key)
}

/// Checks a dynamic broker value as Kafka's ConfigDef does (a LONG, at
/// least 0).
pub(crate) fn check_dynamic_value(key: &str, value: &str) -> Result<(), ApiError> {
    match value.trim().parse::<i64>() {
        Err(_) => Err(ApiError::new(
            ResponseError::InvalidConfig,
            format!("Invalid value {value} for configuration {key}: Not a number of type LONG"),
        )),
        Ok(v) if v < 0 => Err(ApiError::new(
            ResponseError::InvalidConfig,
            format!("Invalid value {v} for configuration {key}: Value must be at least 0"),
        )),
        Ok(_) => Ok(()),
    }
}

/// Whether a `partition:broker,...` / `*` list throttles `partition` on
/// `broker` (Kafka's `parseThrottledPartitions`).
pub(crate) fn lists(list: &str, partition: i32, broker: i32) -> bool {
    let list = list.trim();
    if list == "*" {
        return true;
    }
    list.split(',').any(|e| {
        let mut it = e.trim().splitn(2, ':');
        let p = it.next().and_then(|p| p.trim().parse::<i32>().ok());
        let b = it.next().and_then(|b| b.trim().parse::<i32>().ok());
        p == Some(partition) && b == Some(broker)
    })
}

/// A windowed byte rate with a bound (Kafka's quota `Rate` over
/// `SampledStat`).
#[derive(Debug)]
pub(crate) struct Quota {
    /// Samples: (start ms, bytes).
    samples: Mutex<VecDeque<(u64, u64)>>,
    windows: u64,
    window_ms: u64,
}

impl Quota {
    pub(crate) fn new(windows: u64, window_ms: u64) -> Self {
        Self {
            samples: Mutex::new(VecDeque::new()),
            windows: windows.max(1),
            window_ms: window_ms.max(1),
        }
    }

    fn purge(&self, s: &mut VecDeque<(u64, u64)>, now_ms: u64) {
        let horizon = self.windows * self.window_ms;
        while s
            .front()
            .is_some_and(|(start, _)| now_ms.saturating_sub(*start) >= horizon)
        {
            s.pop_front();
        }
    }

    /// Counts `bytes` at `now_ms`.
    pub(crate) fn record(&self, bytes: u64, now_ms: u64) {
        let mut s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        self.purge(&mut s, now_ms);
        match s.back_mut() {
            Some((start, b)) if now_ms.saturating_sub(*start) < self.window_ms => *b += bytes,
            _ => s.push_back((now_ms, bytes)),
        }
    }

    /// The measured rate in bytes per second at `now_ms`.
    pub(crate) fn rate(&self, now_ms: u64) -> f64 {
        let mut s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        self.purge(&mut s, now_ms);
        let Some(&(oldest, _)) = s.front() else {
            return 0.0;
        };
        let total: u64 = s.iter().map(|(_, b)| b).sum();
        // At least all samples but one (Kafka's `Rate.windowSize`).
        let elapsed = now_ms
            .saturating_sub(oldest)
            .max((self.windows - 1) * self.window_ms)
            .max(1);
        total as f64 * 1000.0 / elapsed as f64
    }

    /// Whether the rate is over `bound` bytes/s (never for `i64::MAX`).
    pub(crate) fn exceeded(&self, bound: i64, now_ms: u64) -> bool {
        bound != i64::MAX && self.rate(now_ms) > bound as f64
    }
}

/// This node's leader-side and follower-side replication quotas.
#[derive(Debug)]
pub(crate) struct ReplicationQuotas {
    pub(crate) leader: Quota,
    pub(crate) follower: Quota,
}

impl ReplicationQuotas {
    pub(crate) fn new(windows: u64, window_ms: u64) -> Self {
        Self {
            leader: Quota::new(windows, window_ms),
            follower: Quota::new(windows, window_ms),
        }
    }
}

/// Which side of replication a throttle applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Leader,
    Follower,
}

impl Side {
    fn keys(self) -> (&'static str, &'static str) {
        match self {
            Side::Leader => (LEADER_RATE, LEADER_REPLICAS),
            Side::Follower => (FOLLOWER_RATE, FOLLOWER_REPLICAS),
        }
    }
}

impl Broker {
    /// The effective dynamic broker value of `key` on this node: its own,
    /// else the cluster-wide one; with its source (DescribeConfigs).
    pub(crate) fn dynamic_broker_value(
        &self,
        image: &MetadataImage,
        key: &str,
    ) -> Option<(String, bool)> {
        if let Some(v) = image
            .broker_configs_of(self.node_id)
            .and_then(|c| c.get(key))
        {
            return Some((v.clone(), true));
        }
        image.broker_configs().get(key).map(|v| (v.clone(), false))
    }

    /// The bound of `side`'s quota (bytes/s; `i64::MAX` when unset).
    pub(crate) fn throttle_rate(&self, image: &MetadataImage, side: Side) -> i64 {
        self.dynamic_broker_value(image, side.keys().0)
            .and_then(|(v, _)| v.trim().parse().ok())
            .unwrap_or(i64::MAX)
    }

    /// Whether `side`'s quota holds back partition `partition` of `topic`
    /// on this node now: the topic lists it for this broker, and the
    /// quota's rate is over its bound.
    /// The move throttle in force (`replica.alter.log.dirs.io.max.bytes.per.second`):
    /// this broker's value, else the cluster-wide one, else no limit.
    pub(crate) fn alter_log_dirs_rate(&self) -> i64 {
        self.dynamic_broker_value(&self.image(), ALTER_LOG_DIRS_RATE)
            .and_then(|(v, _)| v.trim().parse().ok())
            .unwrap_or(i64::MAX)
    }

    pub(crate) fn throttled(
        &self,
        image: &MetadataImage,
        side: Side,
        topic: &str,
        partition: i32,
    ) -> bool {
        self.is_throttled_replica(image, side, topic, partition)
            && self
                .quota(side)
                .exceeded(self.throttle_rate(image, side), crate::partition::now_ms())
    }

    /// Whether the topic config lists partition `partition` for this
    /// broker on `side`.
    pub(crate) fn is_throttled_replica(
        &self,
        image: &MetadataImage,
        side: Side,
        topic: &str,
        partition: i32,
    ) -> bool {
        image
            .topic(topic)
            .and_then(|t| t.configs.get(side.keys().1))
            .is_some_and(|l| lists(l, partition, self.node_id))
    }

    pub(crate) fn quota(&self, side: Side) -> &Quota {
        match side {
            Side::Leader => &self.quotas.leader,
            Side::Follower => &self.quotas.follower,
        }
    }

    /// Changes the dynamic configs of broker resource `name` ("" for the
    /// cluster-wide ones) to what `edit` makes of the current ones, through
    /// the metadata log. Only [`DYNAMIC_BROKER_KEYS`] may be set.
    pub(crate) fn edit_broker_configs(
        &self,
        name: &str,
        validate_only: bool,
        edit: impl FnOnce(&BTreeMap<String, String>) -> Result<BTreeMap<String, String>, ApiError>,
    ) -> Result<(), ApiError> {
        let _guard = self.metadata.lock_for_change();
        let image = self.image();
        let current = if name.is_empty() {
            image.broker_configs().clone()
        } else {
            image
                .broker_configs_of(self.node_id)
                .cloned()
                .unwrap_or_default()
        };
        let next = edit(&current)?;
        let refused: Vec<&str> = next
            .keys()
            .filter(|k| !is_dynamic_broker_key(k) && current.get(*k) != next.get(*k))
            .map(String::as_str)
            .collect();
        if !refused.is_empty() {
            return Err(ApiError::new(
                ResponseError::InvalidRequest,
                format!(
                    "Dynamic broker configs are not supported for {}: only {} can be updated without a restart (set the others in server.properties)",
                    refused.join(", "),
                    DYNAMIC_BROKER_KEYS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        for (k, v) in &next {
            if current.get(k) != Some(v) {
                check_dynamic_value(k, v)?;
            }
        }
        if validate_only {
            return Ok(());
        }
        let keys: std::collections::BTreeSet<&String> = current.keys().chain(next.keys()).collect();
        let records: Vec<MetadataRecord> = keys
            .into_iter()
            .filter(|k| current.get(*k) != next.get(*k))
            .map(|k| MetadataRecord::Config {
                resource_type: RESOURCE_BROKER,
                resource_name: name.to_string(),
                name: k.clone(),
                value: next.get(k).cloned(),
            })
            .collect();
        if records.is_empty() {
            return Ok(());
        }
        self.metadata.append(&records).map_err(|e| match e {
            sluice_controller::ControllerError::NotController(m) => {
                ApiError::new(ResponseError::NotController, m)
            }
            e => ApiError::new(ResponseError::UnknownServerError, e.to_string()),
        })?;
        tracing::info!(
            resource = name,
            changed = records.len(),
            "altered dynamic broker configs"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttled_replica_lists_follow_kafka() {
        assert!(lists("*", 3, 1));
        assert!(lists("0:1, 3:2", 3, 2));
        assert!(!lists("0:1,3:2", 3, 1));
        assert!(!lists("", 0, 1));
    }

    #[test]
    fn the_rate_is_measured_over_the_windows() {
        let q = Quota::new(11, 1000);
        assert!(!q.exceeded(1, 0));
        q.record(100, 0);
        // 100 bytes over at least 10 s: 10 bytes/s.
        assert!((q.rate(500) - 10.0).abs() < 1e-9);
        assert!(q.exceeded(9, 500));
        assert!(!q.exceeded(10, 500));
        assert!(!q.exceeded(i64::MAX, 500));
        // Once its sample ages out, nothing is counted.
        assert_eq!(q.rate(11_000), 0.0);
        assert!(check_dynamic_value(LEADER_RATE, "-1").is_err());
        assert!(check_dynamic_value(LEADER_RATE, "x").is_err());
        assert!(check_dynamic_value(LEADER_RATE, "0").is_ok());
    }
}
