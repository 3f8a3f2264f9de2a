//! Tests of the committed-offsets state machine: visibility only after
//! apply, fetch, delete, expiry, replay, and a model-based property test.

use super::*;
use proptest::prelude::*;

const MIN: i64 = 60_000;
const DAY: i64 = 24 * 60 * MIN;

fn pc(topic: &str, partition: i32, offset: i64, metadata: Option<&str>) -> PartitionCommit {
    PartitionCommit {
        topic: topic.into(),
        partition,
        offset,
        leader_epoch: 3,
        metadata: metadata.map(str::to_owned),
    }
}

fn tp(topic: &str, partitions: &[i32]) -> TopicPartitions {
    TopicPartitions {
        topic: topic.into(),
        partitions: partitions.to_vec(),
    }
}

/// Commits and applies, as the broker does after a successful append.
fn commit(store: &mut OffsetStore, group: &str, commits: &[PartitionCommit], now: i64) {
    let out = store.commit(group, commits, now, None);
    assert!(out.results.iter().all(|r| r.result.is_ok()));
    assert!(store.apply(&out.records).is_ok());
}

#[test]
fn commit_is_invisible_until_applied() {
    let mut store = OffsetStore::default();
    let out = store.commit("g", &[pc("t", 0, 10, Some("meta"))], 1000, None);
    assert_eq!(out.records.len(), 1);
    assert_eq!(store.offset("g", "t", 0), None);
    let f = store.fetch("g", Some(&[tp("t", &[0])]));
    assert_eq!(f[0].partitions[0].offset, -1);

    assert!(store.apply(&out.records).is_ok());
    let o = store.offset("g", "t", 0).cloned();
    assert_eq!(
        o,
        Some(CommittedOffset {
            offset: 10,
            leader_epoch: Some(3),
            metadata: "meta".into(),
            commit_timestamp_ms: 1000,
            expire_timestamp_ms: None,
            record_offset: -1,
        })
    );
}

#[test]
fn commit_record_has_kafka_bytes() {
    let store = OffsetStore::default();
    let out = store.commit("g", &[pc("t", 1, 5, None)], 9, None);
    let key = OffsetCommitKey {
        group: "g".into(),
        topic: "t".into(),
        partition: 1,
    };
    let value = OffsetCommitValue {
        offset: 5,
        leader_epoch: 3,
        metadata: String::new(),
        commit_timestamp: 9,
        expire_timestamp: -1,
    };
    assert_eq!(
        out.records,
        vec![Record::offset_commit(&key, &value).unwrap_or_else(|_| unreachable!())]
    );
    // v3 value
    assert_eq!(out.records[0].value.as_ref().map(|v| v[1]), Some(3));
}

#[test]
fn retention_time_commit_writes_v1_with_expire_timestamp() {
    let mut store = OffsetStore::default();
    let out = store.commit("g", &[pc("t", 0, 1, None)], 100, Some(5100));
    assert_eq!(out.records[0].value.as_ref().map(|v| v[1]), Some(1));
    assert!(store.apply(&out.records).is_ok());
    let o = store.offset("g", "t", 0);
    assert_eq!(o.and_then(|o| o.expire_timestamp_ms), Some(5100));
    assert_eq!(o.and_then(|o| o.leader_epoch), None); // v1 has no epoch
}

#[test]
fn metadata_round_trips_and_null_becomes_empty() {
    let mut store = OffsetStore::default();
    let meta = "ünïcode ✓ {\"k\":1}";
    commit(
        &mut store,
        "g",
        &[pc("t", 0, 1, Some(meta)), pc("t", 1, 2, None)],
        1,
    );
    let f = store.fetch("g", Some(&[tp("t", &[0, 1])]));
    assert_eq!(f[0].partitions[0].metadata, meta);
    assert_eq!(f[0].partitions[1].metadata, "");
}

#[test]
fn too_large_metadata_is_rejected_per_partition() {
    let store = OffsetStore::default();
    let big = "x".repeat(DEFAULT_OFFSET_METADATA_MAX_BYTES + 1);
    let ok = "y".repeat(DEFAULT_OFFSET_METADATA_MAX_BYTES);
    let out = store.commit(
        "g",
        &[pc("t", 0, 1, Some(&big)), pc("t", 1, 1, Some(&ok))],
        1,
        None,
    );
    assert_eq!(out.records.len(), 1);
    assert!(matches!(
        out.results[0].result,
        Err(CoordinatorError::OffsetMetadataTooLarge {
            len: 4097,
            max: 4096
        })
    ));
    assert_eq!(out.results[1].result, Ok(()));
}

#[test]
fn fetch_unknown_group_and_partitions_give_minus_one() {
    let mut store = OffsetStore::default();
    commit(&mut store, "g", &[pc("t", 0, 7, None)], 1);
    let f = store.fetch("nope", Some(&[tp("t", &[0])]));
    assert_eq!(
        (f[0].partitions[0].offset, f[0].partitions[0].leader_epoch),
        (-1, -1)
    );
    let f = store.fetch("g", Some(&[tp("t", &[0, 9]), tp("u", &[0])]));
    assert_eq!(f.len(), 2);
    assert_eq!(f[0].partitions[0].offset, 7);
    assert_eq!(f[0].partitions[0].leader_epoch, 3);
    assert_eq!(f[0].partitions[1].offset, -1);
    assert_eq!(f[1].partitions[0].offset, -1);
    assert!(store.fetch("nope", None).is_empty());
}

#[test]
fn fetch_all_lists_every_commit_in_order() {
    let mut store = OffsetStore::default();
    commit(
        &mut store,
        "g",
        &[
            pc("b", 1, 4, None),
            pc("a", 2, 3, None),
            pc("a", 0, 1, None),
        ],
        1,
    );
    let f = store.fetch("g", None);
    let flat: Vec<_> = f
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.topic.as_str(), p.partition, p.offset))
        })
        .collect();
    assert_eq!(flat, vec![("a", 0, 1), ("a", 2, 3), ("b", 1, 4)]);
}

#[test]
fn later_commit_overwrites() {
    let mut store = OffsetStore::default();
    commit(&mut store, "g", &[pc("t", 0, 1, None)], 1);
    commit(&mut store, "g", &[pc("t", 0, 2, Some("x"))], 2);
    assert_eq!(store.offset("g", "t", 0).map(|o| o.offset), Some(2));
    assert_eq!(store.len(), 1);
}

#[test]
fn offset_delete_tombstones_and_subscribed_topics() {
    let mut store = OffsetStore::default();
    commit(
        &mut store,
        "g",
        &[
            pc("t", 0, 1, None),
            pc("t", 1, 1, None),
            pc("s", 0, 1, None),
        ],
        1,
    );
    let out = store.delete_offsets("g", &[tp("t", &[0, 5]), tp("s", &[0])], |t| t == "s");
    // tombstone only for t-0 (t-5 has no offset, s is subscribed)
    assert_eq!(out.records.len(), 1);
    assert!(out.records[0].is_tombstone());
    let results: Vec<_> = out
        .results
        .iter()
        .map(|r| (r.topic.as_str(), r.partition, r.result.is_ok()))
        .collect();
    assert_eq!(
        results,
        vec![("t", 0, true), ("t", 5, true), ("s", 0, false)]
    );
    assert!(store.apply(&out.records).is_ok());
    assert_eq!(store.offset("g", "t", 0), None);
    assert!(store.offset("g", "t", 1).is_some());
}

#[test]
fn delete_all_offsets_of_a_group() {
    let mut store = OffsetStore::default();
    commit(
        &mut store,
        "g",
        &[pc("t", 0, 1, None), pc("u", 3, 1, None)],
        1,
    );
    commit(&mut store, "h", &[pc("t", 0, 1, None)], 1);
    let records = store.delete_all_offsets("g").unwrap_or_default();
    assert_eq!(records.len(), 2);
    assert!(store.apply(&records).is_ok());
    assert!(!store.has_offsets("g"));
    assert!(store.has_offsets("h"));
    assert_eq!(store.delete_all_offsets("nope").map(|r| r.len()), Ok(0));
}

#[test]
fn expiry_of_an_empty_group_counts_from_when_it_became_empty() {
    let mut store = OffsetStore::default();
    commit(&mut store, "g", &[pc("t", 0, 1, None)], 0);
    let empty_since = 3 * DAY;
    let base = Some(ExpiryBase::EmptySince(Some(empty_since)));
    // 7 days after the commit, but only 4 after becoming empty: kept
    let out = store.expire("g", 7 * DAY, base, |_| false);
    assert_eq!(
        out.as_ref().map(|o| (o.records.len(), o.all_expired)),
        Ok((0, false))
    );
    // 7 days after becoming empty: expired
    let out = store.expire("g", empty_since + 7 * DAY, base, |_| false);
    assert_eq!(
        out.as_ref().map(|o| (o.records.len(), o.all_expired)),
        Ok((1, true))
    );
    assert!(store
        .apply(&out.map(|o| o.records).unwrap_or_default())
        .is_ok());
    assert!(!store.has_offsets("g"));
}

#[test]
fn expiry_by_last_commit_and_by_old_schema_state() {
    let mut store = OffsetStore::new(OffsetConfig::with_retention_minutes(10));
    commit(&mut store, "g", &[pc("t", 0, 1, None)], 0);
    commit(&mut store, "g", &[pc("t", 1, 1, None)], 5 * MIN);
    for base in [ExpiryBase::LastCommit, ExpiryBase::EmptySince(None)] {
        let out = store.expire("g", 10 * MIN, Some(base), |_| false);
        assert_eq!(
            out.map(|o| (o.records.len(), o.all_expired)),
            Ok((1, false))
        );
    }
    // no expiry condition (group with members): nothing expires
    let out = store.expire("g", 100 * DAY, None, |_| false);
    assert_eq!(
        out.map(|o| (o.records.len(), o.all_expired)),
        Ok((0, false))
    );
    // subscribed topics never expire
    let out = store.expire("g", 100 * DAY, Some(ExpiryBase::LastCommit), |t| t == "t");
    assert_eq!(
        out.map(|o| (o.records.len(), o.all_expired)),
        Ok((0, false))
    );
    // a group without offsets counts as fully expired
    let out = store.expire("none", 0, None, |_| false);
    assert_eq!(out.map(|o| o.all_expired), Ok(true));
}

#[test]
fn explicit_expire_timestamp_wins_over_retention() {
    let mut store = OffsetStore::default();
    let out = store.commit("g", &[pc("t", 0, 1, None)], 0, Some(MIN));
    assert!(store.apply(&out.records).is_ok());
    let e = store.expire("g", MIN - 1, Some(ExpiryBase::LastCommit), |_| false);
    assert_eq!(e.map(|o| o.records.len()), Ok(0));
    let e = store.expire("g", MIN, Some(ExpiryBase::LastCommit), |_| false);
    assert_eq!(e.map(|o| o.records.len()), Ok(1));
}

#[test]
fn default_retention_is_seven_days() {
    assert_eq!(OffsetConfig::default().retention_ms, 7 * DAY);
}

#[test]
fn replay_hands_back_group_metadata_and_skips_other_types() {
    let mut store = OffsetStore::default();
    let g = GroupMetadataValue {
        protocol_type: "consumer".into(),
        generation: 2,
        ..GroupMetadataValue::default()
    };
    let r = Record::group_metadata("g", &g).unwrap_or_else(|_| unreachable!());
    assert_eq!(
        store.replay(&r.key, r.value.as_deref()),
        Ok(Replayed::GroupMetadata {
            group: "g".into(),
            value: Some(g)
        })
    );
    let t = Record::group_metadata_tombstone("g").unwrap_or_else(|_| unreachable!());
    assert_eq!(
        store.replay(&t.key, None),
        Ok(Replayed::GroupMetadata {
            group: "g".into(),
            value: None
        })
    );
    assert_eq!(
        store.replay(&[0, 5, 1, 2, 3], Some(&[9])),
        Ok(Replayed::Skipped(5))
    );
    assert!(store.replay(&[0, 1, 0], Some(&[])).is_err());
    assert!(store.is_empty());
}

#[test]
fn restart_rebuilds_the_same_state_from_the_log() {
    let mut store = OffsetStore::default();
    let mut log: Vec<Record> = Vec::new();
    let mut step = |store: &mut OffsetStore, records: Vec<Record>| {
        assert!(store.apply(&records).is_ok());
        log.extend(records);
    };
    let out = store.commit(
        "g",
        &[pc("t", 0, 1, Some("a")), pc("t", 1, 2, None)],
        1,
        None,
    );
    step(&mut store, out.records);
    let out = store.commit("g", &[pc("t", 0, 5, Some("b"))], 2, None);
    step(&mut store, out.records);
    let out = store.delete_offsets("g", &[tp("t", &[1])], |_| false);
    step(&mut store, out.records);

    let mut rebuilt = OffsetStore::default();
    for r in &log {
        assert!(rebuilt.replay(&r.key, r.value.as_deref()).is_ok());
    }
    assert_eq!(rebuilt, store);
    assert_eq!(
        rebuilt.offset("g", "t", 0).map(|o| o.metadata.as_str()),
        Some("b")
    );
}

// ---- model-based property test ----

#[derive(Debug, Clone)]
enum Op {
    Commit {
        g: u8,
        t: u8,
        p: i32,
        offset: i64,
        meta: Option<String>,
    },
    Delete {
        g: u8,
        t: u8,
        p: i32,
    },
    DeleteAll {
        g: u8,
    },
    Expire {
        g: u8,
        now: i64,
    },
    DroppedCommit {
        g: u8,
        t: u8,
        p: i32,
        offset: i64,
    },
}

fn any_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, 0u8..3, 0i32..3, any::<i64>(), proptest::option::of("[a-z]{0,4}"))
            .prop_map(|(g, t, p, offset, meta)| Op::Commit { g, t, p, offset, meta }),
        1 => (0u8..3, 0u8..3, 0i32..3).prop_map(|(g, t, p)| Op::Delete { g, t, p }),
        1 => (0u8..3).prop_map(|g| Op::DeleteAll { g }),
        1 => (0u8..3, 0i64..20).prop_map(|(g, now)| Op::Expire { g, now }),
        1 => (0u8..3, 0u8..3, 0i32..3, any::<i64>())
            .prop_map(|(g, t, p, offset)| Op::DroppedCommit { g, t, p, offset }),
    ]
}

proptest! {
    /// Random operations against a map model; the log of appended records,
    /// replayed into a fresh store, reproduces the live store.
    #[test]
    fn store_matches_model_and_log_replay(ops in proptest::collection::vec(any_op(), 0..40)) {
        let config = OffsetConfig { retention_ms: 10, ..OffsetConfig::default() };
        let mut store = OffsetStore::new(config);
        let mut model: BTreeMap<(String, String, i32), (i64, String, i64)> = BTreeMap::new();
        let mut log: Vec<Record> = Vec::new();
        let name = |prefix: &str, i: u8| format!("{prefix}{i}");
        for (clock, op) in ops.into_iter().enumerate() {
            let now = clock as i64;
            let records = match op {
                Op::Commit { g, t, p, offset, meta } => {
                    let (g, t) = (name("g", g), name("t", t));
                    let c = PartitionCommit { topic: t.clone(), partition: p, offset, leader_epoch: -1, metadata: meta.clone() };
                    model.insert((g.clone(), t, p), (offset, meta.unwrap_or_default(), now));
                    store.commit(&g, &[c], now, None).records
                }
                Op::DroppedCommit { g, t, p, offset } => {
                    // the append failed: records are never applied
                    let c = PartitionCommit { topic: name("t", t), partition: p, offset, leader_epoch: -1, metadata: None };
                    let _ = store.commit(&name("g", g), &[c], now, None);
                    Vec::new()
                }
                Op::Delete { g, t, p } => {
                    let (g, t) = (name("g", g), name("t", t));
                    model.remove(&(g.clone(), t.clone(), p));
                    store.delete_offsets(&g, &[TopicPartitions { topic: t, partitions: vec![p] }], |_| false).records
                }
                Op::DeleteAll { g } => {
                    let g = name("g", g);
                    model.retain(|k, _| k.0 != g);
                    store.delete_all_offsets(&g).unwrap_or_default()
                }
                Op::Expire { g, now: at } => {
                    let g = name("g", g);
                    let at = now + at;
                    model.retain(|k, v| k.0 != g || at - v.2 < 10);
                    store.expire(&g, at, Some(ExpiryBase::LastCommit), |_| false)
                        .map(|o| o.records)
                        .unwrap_or_default()
                }
            };
            prop_assert!(store.apply(&records).is_ok());
            log.extend(records);
        }
        let live: BTreeMap<_, _> = model.keys().map(|(g, t, p)| {
            let o = store.offset(g, t, *p).map(|o| (o.offset, o.metadata.clone(), o.commit_timestamp_ms));
            ((g.clone(), t.clone(), *p), o)
        }).collect();
        let expected: BTreeMap<_, _> = model.iter().map(|(k, v)| (k.clone(), Some(v.clone()))).collect();
        prop_assert_eq!(live, expected);
        prop_assert_eq!(store.len(), model.len());

        let mut rebuilt = OffsetStore::new(config);
        for r in &log {
            prop_assert!(rebuilt.replay(&r.key, r.value.as_deref()).is_ok());
        }
        prop_assert_eq!(rebuilt, store);
    }
}
