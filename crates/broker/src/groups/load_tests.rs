//! Loading a `__consumer_offsets` partition never stops on data that does
//! not decode: such a batch or record is logged with its offsets and
//! skipped, and everything around it loads.

use sluice_coordinator::offsets::PartitionCommit;

use super::*;
use crate::handlers::test_support::open_broker;

fn commit_records(group: &str, offset: i64) -> Vec<OffsetsRecord> {
    let store = OffsetStore::new(OffsetConfig::with_retention_minutes(10_080));
    let out = store.commit(
        group,
        &[PartitionCommit {
            topic: "t".into(),
            partition: 0,
            offset,
            leader_epoch: -1,
            metadata: None,
        }],
        now_ms(),
        None,
    );
    out.records
}

#[test]
fn undecodable_batches_and_records_are_skipped_and_the_rest_loads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let overrides = [("offsets.topic.num.partitions", "1")];
    let broker = open_broker(dir.path(), &overrides);
    broker.create_topic("t", 1, 1, &[], false).expect("create");
    broker.ensure_offsets_topic(1).expect("offsets topic");
    let part = Lease::new(
        broker
            .partition(CONSUMER_OFFSETS_TOPIC, 0)
            .expect("partition"),
    );
    let log = Arc::clone(part.partition().log());
    append(&part, &commit_records("before", 5)).expect("append");
    // A record whose key is no known schema.
    append(
        &part,
        &[OffsetsRecord {
            key: vec![0, 99, 1, 2],
            value: Some(vec![1]),
        }],
    )
    .expect("append");
    // A batch with a valid CRC whose records do not decode. Appends
    // validate records now, so it is written as a valid batch and then
    // damaged on disk, its CRC recomputed (data written by another tool or
    // an older build).
    let mut b = BatchBuilder::new(Compression::None, now_ms());
    b.push(Record::new(
        Some(b"k".to_vec()),
        Some(vec![1, 2, 3]),
        now_ms(),
    ));
    let mut bytes = b.build(0).expect("build");
    let n = bytes.len();
    assert_eq!(log.segment_count(), 1);
    let pos = log.size_in_bytes() as usize;
    log.append_as_leader(&mut bytes, 0).expect("append");
    append(&part, &commit_records("after", 7)).expect("append");
    broker.shutdown().expect("shutdown");
    let segment = log.dir().join("00000000000000000000.log");
    let mut file = std::fs::read(&segment).expect("read segment");
    let stored = &mut file[pos..pos + n];
    stored[n - 5] = 0x40; // value length past the end of the record
    let crc = sluice_protocol::record::batch::compute_crc(stored);
    stored[17..21].copy_from_slice(&crc.to_be_bytes());
    assert!(decode_batch(stored, 1 << 20).is_err());
    std::fs::write(&segment, &file).expect("write segment");
    drop((log, part, broker));

    let broker = open_broker(dir.path(), &overrides);
    let shard = broker.groups.shard(&broker, "before").expect("shard");
    let shard = lock(&shard);
    let offset = |g: &str| shard.offsets.offset(g, "t", 0).map(|o| o.offset);
    assert_eq!(offset("before"), Some(5));
    assert_eq!(offset("after"), Some(7));
    drop(shard);
    broker.shutdown().expect("shutdown");
}

/// The loaded shards (ListGroups, the timers, offset expiry) wait for a
/// slot held for a moment, as the timer task's leadership check holds
/// each one, instead of leaving its groups out; a partition being loaded
/// is left out and said to be loading (ListGroups answers
/// COORDINATOR_LOAD_IN_PROGRESS then).
#[test]
fn a_briefly_held_slot_is_listed_and_a_loading_one_is_said() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[("offsets.topic.num.partitions", "1")]);
    let shard = broker.groups.shard(&broker, "alpha").expect("shard");
    assert!(lock(&shard).groups.ensure_simple_group(now_ms(), "alpha"));
    let slot = Arc::clone(lock(&broker.groups.shards).get(&0).expect("slot"));

    let hold = |slot: Slot| {
        let (held, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let _held = lock(&slot);
            held.send(()).expect("send");
            std::thread::sleep(Duration::from_millis(300));
        });
        rx.recv().expect("held");
        t
    };
    let holder = hold(Arc::clone(&slot));
    let (shards, loading) = broker.groups.loaded_shards();
    assert!(!loading);
    assert_eq!(shards.len(), 1, "a slot held for a moment is waited for");
    let listed = lock(&shards[0]).groups.list_groups(&[]).expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].group_id, "alpha");
    holder.join().expect("holder");

    lock(&broker.groups.loading).insert(0);
    let holder = hold(slot);
    let (shards, loading) = broker.groups.loaded_shards();
    assert!(loading);
    assert!(shards.is_empty());
    holder.join().expect("holder");
    lock(&broker.groups.loading).remove(&0);
    assert_eq!(broker.groups.loaded_shards().0.len(), 1);
}
