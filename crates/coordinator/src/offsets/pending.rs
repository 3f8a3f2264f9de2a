//! Pending transactional offsets (Kafka's `pendingTransactionalOffsets`
//! and `openTransactionsByGroup` in `OffsetMetadataManager`).
//!
//! TxnOffsetCommit writes ordinary offset commit records, in a
//! transactional batch of the producer. Replaying such a record (at load,
//! or after the append) keeps the offset pending under its producer id;
//! the COMMIT or ABORT marker of that producer on this `__consumer_offsets`
//! partition ([`OffsetStore::replay_end_txn`]) moves the producer's pending
//! offsets into the committed ones, or drops them. A committed
//! transactional offset only replaces an offset whose record lies earlier
//! in the log (Kafka compares record offsets, so compaction of
//! `__consumer_offsets` cannot change which commit wins). A tombstone of a
//! partition also drops the group's pending offsets for it.
//!
//! While an offset is pending, OffsetFetch with `require_stable` answers
//! UNSTABLE_OFFSET_COMMIT for the partition, expiry leaves the partition
//! alone, and OffsetDelete / DeleteGroups write a tombstone for it.

use std::collections::BTreeMap;

use super::schema::OffsetCommitKey;
use super::store::{insert, remove, CommittedOffset, OffsetStore, TopicOffsets};

impl OffsetStore {
    pub(super) fn add_pending(
        &mut self,
        producer_id: i64,
        k: &OffsetCommitKey,
        v: CommittedOffset,
    ) {
        insert(self.pending.entry(producer_id).or_default(), k, v);
        self.open_txns
            .entry(k.group.clone())
            .or_default()
            .insert(producer_id);
    }

    /// A tombstone for `k`: the group's pending offsets for that
    /// partition go as well (the open transactions stay open).
    pub(super) fn remove_pending_of_group(&mut self, k: &OffsetCommitKey) {
        let Some(pids) = self.open_txns.get(&k.group) else {
            return;
        };
        for pid in pids {
            if let Some(groups) = self.pending.get_mut(pid) {
                remove(groups, k);
            }
        }
    }

    /// The COMMIT (`commit`) or ABORT marker of `producer_id` was written
    /// to (or replayed from) this partition (Kafka's
    /// `replayEndTransactionMarker`): its pending offsets are committed or
    /// dropped. Returns how many offsets it had pending.
    pub fn replay_end_txn(&mut self, producer_id: i64, commit: bool) -> usize {
        let Some(groups) = self.pending.remove(&producer_id) else {
            return 0;
        };
        for group in groups.keys() {
            if let Some(pids) = self.open_txns.get_mut(group) {
                pids.remove(&producer_id);
                if pids.is_empty() {
                    self.open_txns.remove(group);
                }
            }
        }
        let mut count = 0;
        for (group, topics) in groups {
            for (topic, parts) in topics {
                for (partition, offset) in parts {
                    count += 1;
                    if !commit {
                        continue;
                    }
                    let key = super::store::offset_key(&group, &topic, partition);
                    let newer = self
                        .offset(&group, &topic, partition)
                        .is_none_or(|current| offset.record_offset > current.record_offset);
                    if newer {
                        insert(&mut self.groups, &key, offset);
                    } else {
                        tracing::info!(
                            group, topic, partition, producer_id,
                            "transactional offset commit written before the last committed offset; not applied"
                        );
                    }
                }
            }
        }
        count
    }

    /// Whether a transactional commit for this partition is pending.
    pub fn has_pending(&self, group: &str, topic: &str, partition: i32) -> bool {
        let Some(pids) = self.open_txns.get(group) else {
            return false;
        };
        pids.iter().any(|pid| {
            self.pending
                .get(pid)
                .and_then(|g| g.get(group))
                .and_then(|t| t.get(topic))
                .is_some_and(|p| p.contains_key(&partition))
        })
    }

    /// The pending offset of one producer for one partition, if any.
    pub fn pending_offset(
        &self,
        producer_id: i64,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> Option<&CommittedOffset> {
        self.pending
            .get(&producer_id)?
            .get(group)?
            .get(topic)?
            .get(&partition)
    }

    /// Producer ids with pending offsets for `group`, ascending.
    pub fn open_transactions(&self, group: &str) -> Vec<i64> {
        self.open_txns
            .get(group)
            .map(|p| p.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Partitions of `group` with a pending offset, with duplicates.
    pub(super) fn pending_partitions_of<'a>(
        &'a self,
        group: &'a str,
    ) -> impl Iterator<Item = (&'a str, i32)> + 'a {
        let pids: Vec<i64> = self.open_transactions(group);
        pids.into_iter()
            .filter_map(move |pid| self.pending.get(&pid)?.get(group))
            .flat_map(|topics: &TopicOffsets| {
                topics
                    .iter()
                    .flat_map(|(t, parts)| parts.keys().map(move |p| (t.as_str(), *p)))
            })
    }

    /// Every pending offset, for checks: producer id -> group -> topic ->
    /// partition -> offset.
    pub fn pending(&self) -> &BTreeMap<i64, BTreeMap<String, TopicOffsets>> {
        &self.pending
    }
}
