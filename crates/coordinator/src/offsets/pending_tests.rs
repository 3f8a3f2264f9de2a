//! Pending transactional offsets: invisible until the marker, committed or
//! dropped by it, record offsets decide against plain commits, tombstones,
//! require_stable, expiry and deletion, and a store rebuilt by replay.

use super::*;

fn pc(topic: &str, partition: i32, offset: i64) -> PartitionCommit {
    PartitionCommit {
        topic: topic.into(),
        partition,
        offset,
        leader_epoch: -1,
        metadata: None,
    }
}

fn tp(topic: &str, partitions: &[i32]) -> TopicPartitions {
    TopicPartitions {
        topic: topic.into(),
        partitions: partitions.to_vec(),
    }
}

/// A log of `__consumer_offsets` as the broker writes it: (offset,
/// producer id, record) or markers.
#[derive(Default)]
struct LogModel {
    next: i64,
    entries: Vec<(i64, i64, Option<Record>, Option<bool>)>,
}

impl LogModel {
    /// Commits (transactionally when `pid` ≥ 0) and applies as the broker
    /// does after the append.
    fn commit(
        &mut self,
        store: &mut OffsetStore,
        pid: i64,
        group: &str,
        commits: &[PartitionCommit],
    ) {
        let out = store.commit(group, commits, 1_000, None);
        store.apply_at(self.next, pid, &out.records).expect("apply");
        for r in out.records {
            self.entries.push((self.next, pid, Some(r), None));
            self.next += 1;
        }
    }

    fn records(&mut self, store: &mut OffsetStore, records: Vec<Record>) {
        store.apply_at(self.next, -1, &records).expect("apply");
        for r in records {
            self.entries.push((self.next, -1, Some(r), None));
            self.next += 1;
        }
    }

    fn marker(&mut self, store: &mut OffsetStore, pid: i64, commit: bool) -> usize {
        self.entries.push((self.next, pid, None, Some(commit)));
        self.next += 1;
        store.replay_end_txn(pid, commit)
    }

    /// A store rebuilt by replaying the log (the broker's load).
    fn replay(&self) -> OffsetStore {
        let mut s = OffsetStore::default();
        for (offset, pid, record, marker) in &self.entries {
            match (record, marker) {
                (Some(r), _) => {
                    s.replay_at(*offset, *pid, &r.key, r.value.as_deref())
                        .expect("replay");
                }
                (None, Some(commit)) => {
                    s.replay_end_txn(*pid, *commit);
                }
                (None, None) => {}
            }
        }
        s
    }
}

fn offset_of(store: &OffsetStore, group: &str, topic: &str, p: i32) -> i64 {
    store.offset(group, topic, p).map_or(-1, |o| o.offset)
}

#[test]
fn pending_until_the_marker_then_committed_or_dropped() {
    let mut store = OffsetStore::default();
    let mut log = LogModel::default();
    log.commit(&mut store, -1, "g", &[pc("t", 0, 5)]);
    log.commit(&mut store, 7, "g", &[pc("t", 0, 10), pc("t", 1, 20)]);
    log.commit(&mut store, 8, "g", &[pc("u", 0, 30)]);
    assert_eq!(offset_of(&store, "g", "t", 0), 5, "pending is invisible");
    assert_eq!(offset_of(&store, "g", "t", 1), -1);
    assert!(store.has_pending("g", "t", 0));
    assert_eq!(store.open_transactions("g"), vec![7, 8]);
    assert_eq!(
        store.pending_offset(7, "g", "t", 1).map(|o| o.offset),
        Some(20)
    );
    assert_eq!(
        store
            .pending_offset(7, "g", "t", 1)
            .map(|o| o.record_offset),
        Some(2)
    );

    // require_stable: the pending partitions answer unstable, -1.
    let f = store.fetch_stable("g", Some(&[tp("t", &[0, 1, 2])]), true);
    let rows: Vec<(i32, i64, bool)> = f[0]
        .partitions
        .iter()
        .map(|p| (p.partition, p.offset, p.unstable))
        .collect();
    assert_eq!(rows, vec![(0, -1, true), (1, -1, true), (2, -1, false)]);
    let f = store.fetch_stable("g", Some(&[tp("t", &[0])]), false);
    assert_eq!(
        (f[0].partitions[0].offset, f[0].partitions[0].unstable),
        (5, false)
    );
    // All offsets: only committed partitions are listed.
    let f = store.fetch_stable("g", None, true);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].partitions.len(), 1);
    assert!(f[0].partitions[0].unstable);

    assert_eq!(log.marker(&mut store, 7, true), 2);
    assert_eq!(offset_of(&store, "g", "t", 0), 10);
    assert_eq!(offset_of(&store, "g", "t", 1), 20);
    assert!(!store.has_pending("g", "t", 0));
    assert_eq!(log.marker(&mut store, 8, false), 1);
    assert_eq!(offset_of(&store, "g", "u", 0), -1, "aborted: dropped");
    assert!(store.open_transactions("g").is_empty());
    assert_eq!(log.marker(&mut store, 9, true), 0, "no pending: nothing");
    assert_eq!(log.replay(), store);
}

#[test]
fn a_plain_commit_written_after_the_transactional_one_wins() {
    let mut store = OffsetStore::default();
    let mut log = LogModel::default();
    log.commit(&mut store, 7, "g", &[pc("t", 0, 10)]); // record 0
    log.commit(&mut store, -1, "g", &[pc("t", 0, 12)]); // record 1
    log.marker(&mut store, 7, true);
    assert_eq!(
        offset_of(&store, "g", "t", 0),
        12,
        "Kafka keeps the later record"
    );
    // The other way round the transactional one wins.
    log.commit(&mut store, -1, "g", &[pc("t", 1, 1)]);
    log.commit(&mut store, 8, "g", &[pc("t", 1, 2)]);
    log.marker(&mut store, 8, true);
    assert_eq!(offset_of(&store, "g", "t", 1), 2);
    assert_eq!(log.replay(), store);
}

#[test]
fn tombstones_expiry_and_deletion_respect_pending_offsets() {
    let mut store = OffsetStore::default();
    let mut log = LogModel::default();
    log.commit(&mut store, -1, "g", &[pc("t", 0, 1), pc("t", 1, 1)]);
    log.commit(&mut store, 7, "g", &[pc("t", 0, 2), pc("t", 2, 2)]);
    // Expiry skips the partition with a pending commit and keeps the group.
    let out = store
        .expire(
            "g",
            1_000 + 365 * 86_400_000,
            Some(ExpiryBase::LastCommit),
            |_| false,
        )
        .expect("expire");
    assert_eq!(out.records.len(), 1, "only t-1 expires");
    assert!(!out.all_expired);
    // OffsetDelete of a pending-only partition writes a tombstone.
    let del = store.delete_offsets("g", &[tp("t", &[2, 3])], |_| false);
    assert_eq!(del.records.len(), 1);
    // DeleteGroups: one tombstone per committed or pending partition.
    let all = store.delete_all_offsets("g").expect("delete all");
    assert_eq!(all.len(), 3, "t-0, t-1, t-2");
    // A tombstone drops the pending offset; the marker then commits the
    // rest only.
    log.records(&mut store, del.records);
    assert!(!store.has_pending("g", "t", 2));
    assert!(store.has_pending("g", "t", 0));
    assert!(store.groups().any(|g| g == "g"));
    log.marker(&mut store, 7, true);
    assert_eq!(offset_of(&store, "g", "t", 0), 2);
    assert_eq!(offset_of(&store, "g", "t", 2), -1);
    assert_eq!(log.replay(), store);

    // A group with only pending offsets exists for the coordinator.
    let mut store = OffsetStore::default();
    let mut log = LogModel::default();
    log.commit(&mut store, 3, "h", &[pc("t", 0, 1)]);
    assert!(store.has_offsets("h"));
    assert_eq!(store.groups().collect::<Vec<_>>(), vec!["h"]);
    log.marker(&mut store, 3, false);
    assert!(!store.has_offsets("h"));
}
