//! Committed offsets of the groups coordinated by one `__consumer_offsets`
//! partition, as a sans-IO state machine (Kafka's `OffsetMetadataManager`).
//! Offsets committed inside a transaction (TxnOffsetCommit) stay pending
//! until the transaction's marker is replayed (see `pending.rs`).
//!
//! Every mutating request is split in two steps so that a commit is
//! acknowledged only after it is in the log:
//!
//! 1. `commit`, `delete_offsets`, `delete_all_offsets` and `expire` take
//!    `&self`, validate, and return the [`Record`]s to append plus the
//!    per-partition results. Nothing is visible yet.
//! 2. After the append succeeded the caller passes the same records to
//!    [`OffsetStore::apply`] (and then answers the client). On failure the
//!    records are simply dropped.
//!
//! At load, [`OffsetStore::replay`] is fed every record of the partition
//! in log order; it keeps the offset records and hands group metadata
//! records back to the caller for the group state machine. `apply` is
//! `replay` over records this module produced, so a store rebuilt from the
//! log equals the store that wrote it.
//!
//! Membership checks (generation, member id, group state for OffsetDelete
//! and DeleteGroups) belong to the group state machine; this module takes
//! their outcome as inputs (`is_subscribed`, [`ExpiryBase`]).

use std::collections::BTreeMap;

use crate::error::CoordinatorError;
use crate::offsets::schema::{
    GroupMetadataValue, OffsetCommitKey, OffsetCommitValue, Record, RecordKey,
};

/// Default `offsets.retention.minutes` (7 days).
pub const DEFAULT_OFFSETS_RETENTION_MINUTES: i64 = 10_080;
/// Default `offset.metadata.max.bytes`.
pub const DEFAULT_OFFSET_METADATA_MAX_BYTES: usize = 4096;

/// Offset-related broker settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetConfig {
    /// `offsets.retention.minutes` in milliseconds.
    pub retention_ms: i64,
    /// `offset.metadata.max.bytes`. Like Kafka, it is compared with the
    /// metadata's length in UTF-16 code units (`String.length()`).
    pub max_metadata_size: usize,
}

impl OffsetConfig {
    pub fn with_retention_minutes(minutes: i64) -> Self {
        Self {
            retention_ms: minutes.saturating_mul(60_000),
            ..Self::default()
        }
    }
}

impl Default for OffsetConfig {
    fn default() -> Self {
        Self {
            retention_ms: DEFAULT_OFFSETS_RETENTION_MINUTES * 60_000,
            max_metadata_size: DEFAULT_OFFSET_METADATA_MAX_BYTES,
        }
    }
}

/// One committed offset as held in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    /// `None` when the client sent -1.
    pub leader_epoch: Option<i32>,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// Only for commits that carried a retention time (value version 1).
    pub expire_timestamp_ms: Option<i64>,
    /// Offset of the record in `__consumer_offsets` (-1 when unknown):
    /// a transactional commit only replaces a later-written offset
    /// (Kafka's `recordOffset`).
    pub record_offset: i64,
}

impl CommittedOffset {
    pub(super) fn from_value(v: OffsetCommitValue, record_offset: i64) -> Self {
        Self {
            offset: v.offset,
            leader_epoch: (v.leader_epoch >= 0).then_some(v.leader_epoch),
            metadata: v.metadata,
            commit_timestamp_ms: v.commit_timestamp,
            expire_timestamp_ms: (v.expire_timestamp != -1).then_some(v.expire_timestamp),
            record_offset,
        }
    }

    /// Kafka's `OffsetExpirationConditionImpl.isOffsetExpired`.
    fn is_expired(&self, base_ms: i64, now_ms: i64, retention_ms: i64) -> bool {
        match self.expire_timestamp_ms {
            Some(expire) => now_ms >= expire,
            None => now_ms.saturating_sub(base_ms) >= retention_ms,
        }
    }
}

/// One partition of an OffsetCommit request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionCommit {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// -1 when unknown.
    pub leader_epoch: i32,
    /// `None` (a null in the request) is stored as "".
    pub metadata: Option<String>,
}

/// Result for one topic-partition of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionResult {
    pub topic: String,
    pub partition: i32,
    pub result: Result<(), CoordinatorError>,
}

/// Records to append and per-partition results of a request. Append the
/// records, then [`OffsetStore::apply`] them, then answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    pub records: Vec<Record>,
    pub results: Vec<PartitionResult>,
}

/// A topic and partitions of an OffsetFetch or OffsetDelete request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPartitions {
    pub topic: String,
    pub partitions: Vec<i32>,
}

/// One partition of an OffsetFetch response; -1/-1/"" when nothing is
/// committed, as Kafka answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedPartition {
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    /// A transactional commit for this partition is pending and the
    /// request asked for stable offsets (`require_stable`): Kafka answers
    /// UNSTABLE_OFFSET_COMMIT with offset -1.
    pub unstable: bool,
}

/// One topic of an OffsetFetch response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedTopic {
    pub topic: String,
    pub partitions: Vec<FetchedPartition>,
}

/// From when a group's offsets age: the group state machine's answer to
/// Kafka's `Group.offsetExpirationCondition()`. "No expiry now" (a group
/// with members that is not a stable consumer group with known
/// subscriptions) is expressed by not calling [`OffsetStore::expire`] or
/// passing `None` to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpiryBase {
    /// The group has a protocol type and is Empty: offsets expire
    /// `retention` after the group became empty (its current state
    /// timestamp), or after their commit when that is unknown (group
    /// metadata written before value version 2).
    EmptySince(Option<i64>),
    /// A group without protocol type (consumers that only `assign()` and
    /// commit), or a Stable consumer group for topics it does not
    /// subscribe to: offsets expire `retention` after their last commit.
    LastCommit,
}

/// Result of [`OffsetStore::expire`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExpireOutcome {
    /// Tombstones of the expired offsets.
    pub records: Vec<Record>,
    /// True when the group has no offsets left after these tombstones
    /// (Kafka then deletes an Empty group).
    pub all_expired: bool,
}

/// What [`OffsetStore::replay`] did with a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replayed {
    /// An offset was stored.
    OffsetCommitted(OffsetCommitKey),
    /// A tombstone removed an offset (or nothing, if none was stored).
    OffsetDeleted(OffsetCommitKey),
    /// Group metadata, for the group state machine; `None` is a tombstone.
    GroupMetadata {
        group: String,
        value: Option<GroupMetadataValue>,
    },
    /// A record type the classic coordinator does not use (KIP-848
    /// consumer groups, share and streams groups); ignored as Kafka's
    /// loader ignores unknown types.
    Skipped(i16),
}

/// topic -> partition -> offset.
pub type TopicOffsets = BTreeMap<String, BTreeMap<i32, CommittedOffset>>;

/// Committed offsets of every group of one coordinator partition.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetStore {
    config: OffsetConfig,
    /// group -> topic -> partition -> offset
    pub(super) groups: BTreeMap<String, TopicOffsets>,
    /// Transactional commits not yet decided: producer id -> group ->
    /// topic -> partition -> offset (Kafka's
    /// `pendingTransactionalOffsets`).
    pub(super) pending: BTreeMap<i64, BTreeMap<String, TopicOffsets>>,
    /// group -> producer ids with pending commits for it (Kafka's
    /// `openTransactionsByGroup`).
    pub(super) open_txns: BTreeMap<String, std::collections::BTreeSet<i64>>,
}

impl OffsetStore {
    pub fn new(config: OffsetConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    pub fn config(&self) -> &OffsetConfig {
        &self.config
    }

    /// Validates an OffsetCommit and returns the records to append; the
    /// offsets become visible only through [`Self::apply`]. Membership
    /// (generation, member id) must have been validated by the group
    /// state machine. `expire_timestamp_ms` is `now + retention_time_ms`
    /// when the request (v2-v4) carried a retention time, else `None`.
    pub fn commit(
        &self,
        group: &str,
        commits: &[PartitionCommit],
        now_ms: i64,
        expire_timestamp_ms: Option<i64>,
    ) -> Outcome {
        let mut out = Outcome::default();
        for c in commits {
            let metadata = c.metadata.clone().unwrap_or_default();
            let len = metadata.encode_utf16().count();
            let result = if len > self.config.max_metadata_size {
                Err(CoordinatorError::OffsetMetadataTooLarge {
                    len,
                    max: self.config.max_metadata_size,
                })
            } else {
                let key = offset_key(group, &c.topic, c.partition);
                let value = OffsetCommitValue {
                    offset: c.offset,
                    leader_epoch: c.leader_epoch.max(-1),
                    metadata,
                    commit_timestamp: now_ms,
                    expire_timestamp: expire_timestamp_ms.unwrap_or(-1),
                };
                Record::offset_commit(&key, &value).map(|r| out.records.push(r))
            };
            out.results.push(PartitionResult {
                topic: c.topic.clone(),
                partition: c.partition,
                result,
            });
        }
        out
    }

    /// Applies records this store produced, after they were appended
    /// (record offsets unknown; see [`Self::apply_at`]).
    pub fn apply(&mut self, records: &[Record]) -> Result<(), CoordinatorError> {
        for r in records {
            self.replay(&r.key, r.value.as_deref())?;
        }
        Ok(())
    }

    /// Applies records this store produced once they were appended from
    /// log offset `first_offset` on, one record per offset, in a batch of
    /// `producer_id` (-1 outside a transaction: commits of a transaction
    /// stay pending until its marker).
    pub fn apply_at(
        &mut self,
        first_offset: i64,
        producer_id: i64,
        records: &[Record],
    ) -> Result<(), CoordinatorError> {
        for (i, r) in records.iter().enumerate() {
            self.replay_at(
                first_offset + i as i64,
                producer_id,
                &r.key,
                r.value.as_deref(),
            )?;
        }
        Ok(())
    }

    /// Replays one record outside a transaction with an unknown record
    /// offset (tests, tools); see [`Self::replay_at`].
    pub fn replay(
        &mut self,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<Replayed, CoordinatorError> {
        self.replay_at(-1, -1, key, value)
    }

    /// Replays one record of `__consumer_offsets` at log offset
    /// `record_offset` from a batch of `producer_id` (load at start, or
    /// [`Self::apply_at`]), as Kafka's `OffsetMetadataManager.replay`:
    /// an offset commit is stored, or kept pending for its producer's
    /// transaction when `producer_id` ≥ 0; a tombstone removes the offset
    /// and the group's pending ones for that partition. Group metadata is
    /// decoded and handed back.
    pub fn replay_at(
        &mut self,
        record_offset: i64,
        producer_id: i64,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<Replayed, CoordinatorError> {
        match RecordKey::decode(key)? {
            RecordKey::OffsetCommit(k) => match value {
                Some(bytes) => {
                    let v = CommittedOffset::from_value(
                        OffsetCommitValue::decode(bytes)?,
                        record_offset,
                    );
                    if producer_id >= 0 {
                        self.add_pending(producer_id, &k, v);
                    } else {
                        insert(&mut self.groups, &k, v);
                    }
                    Ok(Replayed::OffsetCommitted(k))
                }
                None => {
                    self.remove(&k);
                    self.remove_pending_of_group(&k);
                    Ok(Replayed::OffsetDeleted(k))
                }
            },
            RecordKey::GroupMetadata(k) => Ok(Replayed::GroupMetadata {
                group: k.group,
                value: value.map(GroupMetadataValue::decode).transpose()?,
            }),
            RecordKey::Other(kind) => Ok(Replayed::Skipped(kind)),
        }
    }

    fn remove(&mut self, k: &OffsetCommitKey) {
        remove(&mut self.groups, k);
    }

    /// The committed offset of one partition, if any.
    pub fn offset(&self, group: &str, topic: &str, partition: i32) -> Option<&CommittedOffset> {
        self.groups.get(group)?.get(topic)?.get(&partition)
    }

    /// OffsetFetch. With `Some(topics)`, answers exactly the requested
    /// partitions in request order (-1 for those without a commit, also
    /// for an unknown group); with `None`, every committed offset of the
    /// group, topics and partitions in ascending order.
    pub fn fetch(&self, group: &str, topics: Option<&[TopicPartitions]>) -> Vec<FetchedTopic> {
        self.fetch_stable(group, topics, false)
    }

    /// [`Self::fetch`] for OffsetFetch v7+: with `require_stable`, a
    /// partition with a pending transactional commit answers
    /// `unstable` with offset -1 (Kafka's UNSTABLE_OFFSET_COMMIT).
    pub fn fetch_stable(
        &self,
        group: &str,
        topics: Option<&[TopicPartitions]>,
        require_stable: bool,
    ) -> Vec<FetchedTopic> {
        let offsets = self.groups.get(group);
        let answer = |topic: &str, p: i32, o: Option<&CommittedOffset>| {
            if require_stable && self.has_pending(group, topic, p) {
                FetchedPartition {
                    unstable: true,
                    ..fetched(p, None)
                }
            } else {
                fetched(p, o)
            }
        };
        match topics {
            Some(topics) => topics
                .iter()
                .map(|t| {
                    let stored = offsets.and_then(|o| o.get(&t.topic));
                    FetchedTopic {
                        topic: t.topic.clone(),
                        partitions: t
                            .partitions
                            .iter()
                            .map(|p| answer(&t.topic, *p, stored.and_then(|s| s.get(p))))
                            .collect(),
                    }
                })
                .collect(),
            None => offsets
                .into_iter()
                .flatten()
                .map(|(topic, parts)| FetchedTopic {
                    topic: topic.clone(),
                    partitions: parts
                        .iter()
                        .map(|(p, o)| answer(topic, *p, Some(o)))
                        .collect(),
                })
                .collect(),
        }
    }

    /// OffsetDelete, after the group state machine accepted the request
    /// for this group. Topics the group is subscribed to fail with
    /// [`CoordinatorError::GroupSubscribedToTopic`]; other partitions
    /// succeed, with a tombstone where an offset exists.
    pub fn delete_offsets(
        &self,
        group: &str,
        topics: &[TopicPartitions],
        is_subscribed: impl Fn(&str) -> bool,
    ) -> Outcome {
        let mut out = Outcome::default();
        for t in topics {
            let subscribed = is_subscribed(&t.topic);
            for &partition in &t.partitions {
                let result = if subscribed {
                    Err(CoordinatorError::GroupSubscribedToTopic {
                        topic: t.topic.clone(),
                    })
                } else if self.offset(group, &t.topic, partition).is_some()
                    || self.has_pending(group, &t.topic, partition)
                {
                    // A pending transactional commit gets a tombstone too.
                    Record::offset_commit_tombstone(&offset_key(group, &t.topic, partition))
                        .map(|r| out.records.push(r))
                } else {
                    Ok(())
                };
                out.results.push(PartitionResult {
                    topic: t.topic.clone(),
                    partition,
                    result,
                });
            }
        }
        out
    }

    /// DeleteGroups: tombstones for every offset of the group (the group
    /// metadata tombstone comes from the group state machine).
    pub fn delete_all_offsets(&self, group: &str) -> Result<Vec<Record>, CoordinatorError> {
        // Partitions with only a pending transactional commit get one too
        // (one tombstone per partition).
        let mut partitions: std::collections::BTreeSet<(&str, i32)> =
            self.partitions_of(group).collect();
        partitions.extend(self.pending_partitions_of(group));
        partitions
            .into_iter()
            .map(|(topic, partition)| {
                Record::offset_commit_tombstone(&offset_key(group, topic, partition))
            })
            .collect()
    }

    /// Offset expiry for one group (`offsets.retention.minutes`), as
    /// Kafka's `cleanupExpiredOffsets`: offsets of subscribed topics never
    /// expire; commits with an explicit expire timestamp expire at it.
    /// `base` is `None` when the group's state allows no expiry.
    pub fn expire(
        &self,
        group: &str,
        now_ms: i64,
        base: Option<ExpiryBase>,
        is_subscribed: impl Fn(&str) -> bool,
    ) -> Result<ExpireOutcome, CoordinatorError> {
        let Some(topics) = self.groups.get(group) else {
            return Ok(ExpireOutcome {
                records: Vec::new(),
                all_expired: true,
            });
        };
        let Some(base) = base else {
            return Ok(ExpireOutcome::default());
        };
        let mut out = ExpireOutcome {
            records: Vec::new(),
            all_expired: true,
        };
        for (topic, parts) in topics {
            if is_subscribed(topic) {
                out.all_expired = false;
                continue;
            }
            for (&partition, o) in parts {
                let base_ms = match base {
                    ExpiryBase::EmptySince(Some(ts)) => ts,
                    ExpiryBase::EmptySince(None) | ExpiryBase::LastCommit => o.commit_timestamp_ms,
                };
                // Not while a transactional commit for it is pending.
                if o.is_expired(base_ms, now_ms, self.config.retention_ms)
                    && !self.has_pending(group, topic, partition)
                {
                    tracing::debug!(group, topic, partition, "offset expired");
                    out.records
                        .push(Record::offset_commit_tombstone(&offset_key(
                            group, topic, partition,
                        ))?);
                } else {
                    out.all_expired = false;
                }
            }
        }
        // A group with open transactions is never left for deletion.
        out.all_expired &= !self.open_txns.contains_key(group);
        Ok(out)
    }

    /// Groups that have at least one committed or pending offset,
    /// ascending.
    pub fn groups(&self) -> impl Iterator<Item = &str> + '_ {
        let all: std::collections::BTreeSet<&str> = self
            .groups
            .keys()
            .chain(self.open_txns.keys())
            .map(String::as_str)
            .collect();
        all.into_iter()
    }

    pub fn has_offsets(&self, group: &str) -> bool {
        self.groups.contains_key(group) || self.open_txns.contains_key(group)
    }

    /// Number of committed offsets across all groups.
    pub fn len(&self) -> usize {
        self.groups
            .values()
            .flat_map(|t| t.values())
            .map(BTreeMap::len)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    fn partitions_of<'a>(&'a self, group: &str) -> impl Iterator<Item = (&'a str, i32)> + 'a {
        self.groups.get(group).into_iter().flat_map(|topics| {
            topics
                .iter()
                .flat_map(|(t, parts)| parts.keys().map(move |p| (t.as_str(), *p)))
        })
    }
}

/// Stores `v` under `k` in a group -> topic -> partition map.
pub(super) fn insert(
    groups: &mut BTreeMap<String, TopicOffsets>,
    k: &OffsetCommitKey,
    v: CommittedOffset,
) {
    groups
        .entry(k.group.clone())
        .or_default()
        .entry(k.topic.clone())
        .or_default()
        .insert(k.partition, v);
}

/// Removes `k` from a group -> topic -> partition map, dropping emptied
/// levels.
pub(super) fn remove(groups: &mut BTreeMap<String, TopicOffsets>, k: &OffsetCommitKey) {
    let Some(topics) = groups.get_mut(&k.group) else {
        return;
    };
    if let Some(parts) = topics.get_mut(&k.topic) {
        parts.remove(&k.partition);
        if parts.is_empty() {
            topics.remove(&k.topic);
        }
    }
    if topics.is_empty() {
        groups.remove(&k.group);
    }
}

pub(super) fn offset_key(group: &str, topic: &str, partition: i32) -> OffsetCommitKey {
    OffsetCommitKey {
        group: group.to_owned(),
        topic: topic.to_owned(),
        partition,
    }
}

pub(super) fn fetched(partition: i32, o: Option<&CommittedOffset>) -> FetchedPartition {
    match o {
        Some(o) => FetchedPartition {
            partition,
            offset: o.offset,
            leader_epoch: o.leader_epoch.unwrap_or(-1),
            metadata: o.metadata.clone(),
            unstable: false,
        },
        None => FetchedPartition {
            partition,
            offset: -1,
            leader_epoch: -1,
            metadata: String::new(),
            unstable: false,
        },
    }
}

#[cfg(test)]
#[path = "pending_tests.rs"]
mod pending_tests;
#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
