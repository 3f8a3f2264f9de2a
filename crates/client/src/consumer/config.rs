//! Consumer settings, named and defaulted like the Java consumer's
//! (`group.id`, `enable.auto.commit`, `auto.offset.reset`, ...).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::admin::IsolationLevel;
use crate::cluster::ClientConfig;
use crate::consumer::assignor::{
    CooperativeStickyAssignor, PartitionAssignor, RangeAssignor, RebalanceProtocol,
};
use crate::error::{ClientError, Result};

/// `auto.offset.reset`: where to start when a partition has no committed
/// offset or its position is out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    /// The log start offset.
    Earliest,
    /// The log end offset (the default).
    Latest,
    /// Fail `poll` with `OFFSET_OUT_OF_RANGE` / no-offset errors.
    None,
}

impl FromStr for OffsetReset {
    type Err = ClientError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "earliest" => Ok(OffsetReset::Earliest),
            "latest" => Ok(OffsetReset::Latest),
            "none" => Ok(OffsetReset::None),
            other => Err(ClientError::InvalidArgument(format!(
                "auto.offset.reset must be earliest, latest or none, not {other:?}"
            ))),
        }
    }
}

impl fmt::Display for OffsetReset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OffsetReset::Earliest => "earliest",
            OffsetReset::Latest => "latest",
            OffsetReset::None => "none",
        })
    }
}

/// Consumer settings (Kafka 4 defaults).
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// Cluster connection settings.
    pub client: ClientConfig,
    /// `group.id`: required for `subscribe` and for commits.
    pub group_id: Option<String>,
    /// `group.instance.id`: static membership (KIP-345) when set.
    pub group_instance_id: Option<String>,
    /// `enable.auto.commit` (only with a `group.id`).
    pub enable_auto_commit: bool,
    /// `auto.commit.interval.ms`.
    pub auto_commit_interval: Duration,
    /// `auto.offset.reset`.
    pub auto_offset_reset: OffsetReset,
    /// `isolation.level`.
    pub isolation_level: IsolationLevel,
    /// `session.timeout.ms`.
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms`.
    pub heartbeat_interval: Duration,
    /// `max.poll.interval.ms`: also the rebalance timeout sent in JoinGroup.
    pub max_poll_interval: Duration,
    /// `max.poll.records`.
    pub max_poll_records: usize,
    /// `fetch.min.bytes`.
    pub fetch_min_bytes: i32,
    /// `fetch.max.bytes`.
    pub fetch_max_bytes: i32,
    /// `fetch.max.wait.ms`.
    pub fetch_max_wait: Duration,
    /// `max.partition.fetch.bytes`.
    pub max_partition_fetch_bytes: i32,
    /// `check.crcs`: verify every fetched batch's CRC32C.
    pub check_crcs: bool,
    /// `metadata.max.age.ms`: how often metadata is refreshed to notice new
    /// topics (pattern subscriptions) and partitions.
    pub metadata_max_age: Duration,
    /// `partition.assignment.strategy`, in preference order. Default:
    /// range, then cooperative-sticky (as Kafka 4).
    pub assignors: Vec<Arc<dyn PartitionAssignor>>,
    /// `client.rack`, sent in subscriptions (v3).
    pub client_rack: Option<String>,
    /// `default.api.timeout.ms`: how long a synchronous offset commit
    /// keeps retrying retriable errors (the coordinator moved, is not
    /// available, or its connection was lost) before it fails.
    pub default_api_timeout: Duration,
}

impl ConsumerConfig {
    /// Defaults for the given client configuration, without a group.
    pub fn new(client: ClientConfig) -> Self {
        ConsumerConfig {
            client,
            group_id: None,
            group_instance_id: None,
            enable_auto_commit: true,
            auto_commit_interval: Duration::from_secs(5),
            auto_offset_reset: OffsetReset::Latest,
            isolation_level: IsolationLevel::ReadUncommitted,
            session_timeout: Duration::from_secs(45),
            heartbeat_interval: Duration::from_secs(3),
            max_poll_interval: Duration::from_secs(300),
            max_poll_records: 500,
            fetch_min_bytes: 1,
            fetch_max_bytes: 52_428_800,
            fetch_max_wait: Duration::from_millis(500),
            max_partition_fetch_bytes: 1_048_576,
            check_crcs: true,
            metadata_max_age: Duration::from_secs(300),
            assignors: vec![
                Arc::new(RangeAssignor) as Arc<dyn PartitionAssignor>,
                Arc::new(CooperativeStickyAssignor),
            ],
            client_rack: None,
            default_api_timeout: Duration::from_secs(60),
        }
    }

    /// Sets `group.id`.
    #[must_use]
    pub fn group(mut self, group_id: &str) -> Self {
        self.group_id = Some(group_id.to_string());
        self
    }

    /// Checks the rules the Java consumer enforces.
    pub fn validate(&self) -> Result<()> {
        if self.heartbeat_interval >= self.session_timeout {
            return Err(ClientError::InvalidArgument(
                "heartbeat.interval.ms must be lower than session.timeout.ms".into(),
            ));
        }
        if self.max_poll_records == 0 {
            return Err(ClientError::InvalidArgument(
                "max.poll.records must be at least 1".into(),
            ));
        }
        if self.assignors.is_empty() {
            return Err(ClientError::InvalidArgument(
                "partition.assignment.strategy must name at least one assignor".into(),
            ));
        }
        if self.group_instance_id.is_some() && self.group_id.is_none() {
            return Err(ClientError::InvalidArgument(
                "group.instance.id needs a group.id".into(),
            ));
        }
        Ok(())
    }

    /// The rebalance protocol: cooperative only when every configured
    /// assignor supports it (Kafka's rule), eager otherwise.
    pub fn rebalance_protocol(&self) -> RebalanceProtocol {
        if self.assignors.iter().all(|a| {
            a.supported_protocols()
                .contains(&RebalanceProtocol::Cooperative)
        }) {
            RebalanceProtocol::Cooperative
        } else {
            RebalanceProtocol::Eager
        }
    }

    /// Whether offsets are committed automatically.
    pub fn auto_commit(&self) -> bool {
        self.enable_auto_commit && self.group_id.is_some()
    }
}
