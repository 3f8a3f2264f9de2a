//! Tests of the metadata store: replay, snapshots, prefix truncation,
//! fallback from a corrupt snapshot, skipped records.

use super::*;
use crate::records::RESOURCE_TOPIC;
use sluice_storage::{ManualClock, SystemClock};

const T0: i64 = 1_700_000_000_000;

fn small() -> MetadataLogConfig {
    MetadataLogConfig {
        segment_bytes: 300,
        max_retention_ms: 10_000,
        max_retention_bytes: -1,
        ..MetadataLogConfig::default()
    }
}

fn open(dir: &Path, config: MetadataLogConfig, clock: &Arc<ManualClock>) -> MetadataStore {
    MetadataStore::open(dir, config, clock.clone()).expect("open store")
}

fn create(store: &MetadataStore, name: &str, id: u128, partitions: i32) {
    let topic_id = Uuid::from_u128(id);
    let mut records = vec![
        MetadataRecord::Topic {
            name: name.into(),
            topic_id,
        },
        MetadataRecord::Config {
            resource_type: RESOURCE_TOPIC,
            resource_name: name.into(),
            name: "retention.ms".into(),
            value: Some("-1".into()),
        },
    ];
    records.extend((0..partitions).map(|p| MetadataRecord::Partition {
        partition_id: p,
        topic_id,
        replicas: vec![1],
        isr: vec![1],
        leader: 1,
        leader_epoch: 0,
        partition_epoch: 0,
        removing_replicas: vec![],
        adding_replicas: vec![],
    }));
    let _g = store.lock_for_change();
    store.append(&records).expect("append");
}

fn meta_dir(dir: &Path) -> PathBuf {
    dir.join(format!("{METADATA_TOPIC}-0"))
}

fn names(store: &MetadataStore) -> Vec<String> {
    store.image().topics().map(|t| t.name.clone()).collect()
}

#[test]
fn changes_survive_a_replay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    {
        let store = open(dir.path(), MetadataLogConfig::default(), &clock);
        create(&store, "a", 99, 1);
        assert!(store.image().topic("a").is_some());
        store.shutdown().expect("shutdown");
    }
    let store = open(dir.path(), MetadataLogConfig::default(), &clock);
    let img = store.image();
    let t = img.topic("a").expect("topic after replay");
    assert_eq!(t.id, Uuid::from_u128(99));
    assert_eq!(t.partitions.len(), 1);
    assert!(store.snapshot_ids().is_empty());
}

#[test]
fn the_log_ignores_topic_retention_settings() {
    let c = MetadataLogConfig::default().log_config();
    assert_eq!((c.retention_ms, c.retention_bytes), (-1, -1));
    assert_eq!(c.segment_bytes, 1 << 30);
}

#[test]
fn snapshot_then_truncated_prefix_then_restart_rebuilds_the_same_image() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), small(), &clock);
    let mut ids = Vec::new();
    for round in 0..4u128 {
        for t in 0..3u128 {
            create(&store, &format!("t{round}-{t}"), round * 10 + t + 1, 2);
        }
        clock.advance(20_000);
        ids.push(store.snapshot_now().expect("snapshot").expect("taken"));
        // Nothing new: no second snapshot at the same offset.
        assert_eq!(store.snapshot_now().expect("again"), None);
    }
    // A removal after the last snapshot.
    {
        let _g = store.lock_for_change();
        store
            .append(&[MetadataRecord::RemoveTopic {
                topic_id: Uuid::from_u128(1),
            }])
            .expect("remove");
    }
    let before = store.image();
    let segments_before = store.log().segment_base_offsets();
    assert!(segments_before.len() > 4, "{segments_before:?}");
    assert_eq!(store.snapshot_ids(), ids);

    // Every snapshot but the two newest is past retention.
    assert_eq!(store.clean().expect("clean"), 2);
    assert_eq!(store.snapshot_ids(), ids[2..].to_vec());
    let start = store.log().log_start_offset();
    assert_eq!(start, ids[2].end_offset);
    let first = store.log().segment_base_offsets()[0];
    assert!(
        first > 0 && first <= start,
        "first segment {first}, start {start}"
    );
    assert!(!meta_dir(dir.path())
        .join("00000000000000000000.log")
        .exists());
    for gone in &ids[..2] {
        assert!(!meta_dir(dir.path()).join(gone.file_name()).exists());
    }
    // Two snapshots are always kept, however old.
    clock.advance(1_000_000);
    assert_eq!(store.clean().expect("clean"), 0);
    store.shutdown().expect("shutdown");
    drop(store);

    let store = open(dir.path(), small(), &clock);
    assert_eq!(*store.image(), *before);
    assert_eq!(store.image().topics().count(), 11);
    assert_eq!(store.snapshot_ids(), ids[2..].to_vec());
    assert_eq!(
        store.recorded_removals(),
        &[RecordedRemoval {
            topic_id: Uuid::from_u128(1),
            name: Some("t0-0".into()),
        }]
    );
    // Appends continue after a restart.
    create(&store, "after", 500, 1);
    assert!(store.image().topic("after").is_some());
}

fn two_snapshots_and_a_tail(
    dir: &Path,
    clock: &Arc<ManualClock>,
) -> (Arc<MetadataImage>, [SnapshotId; 3]) {
    let store = open(dir, small(), clock);
    let mut ids = Vec::new();
    for round in 0..3u128 {
        create(&store, &format!("r{round}"), round + 1, 3);
        clock.advance(20_000);
        ids.push(store.snapshot_now().expect("snapshot").expect("taken"));
    }
    create(&store, "tail", 100, 1);
    // Drop the oldest so the log really starts at the middle snapshot.
    assert_eq!(store.clean().expect("clean"), 1);
    assert!(store.log().log_start_offset() > 0);
    let image = store.image();
    store.shutdown().expect("shutdown");
    (image, [ids[0], ids[1], ids[2]])
}

#[test]
fn a_corrupt_newest_snapshot_falls_back_to_the_previous_one_plus_replay() {
    type Damage = fn(&Path);
    let damages: [(&str, Damage); 3] = [
        ("flipped bytes", |p| {
            let mut b = std::fs::read(p).expect("read");
            let at = b.len() / 2;
            b[at] ^= 0xff;
            b[at + 1] ^= 0x0f;
            std::fs::write(p, b).expect("write");
        }),
        ("truncated", |p| {
            let b = std::fs::read(p).expect("read");
            std::fs::write(p, &b[..b.len() - 5]).expect("write");
        }),
        ("emptied", |p| std::fs::write(p, b"").expect("write")),
    ];
    for (what, damage) in damages {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = Arc::new(ManualClock::new(T0));
        let (before, ids) = two_snapshots_and_a_tail(dir.path(), &clock);
        let newest = meta_dir(dir.path()).join(ids[2].file_name());
        damage(&newest);
        let store = open(dir.path(), small(), &clock);
        assert_eq!(*store.image(), *before, "{what}");
        assert_eq!(store.snapshot_ids(), vec![ids[1]], "{what}");
        assert!(!newest.exists(), "{what}");
        let aside =
            meta_dir(dir.path()).join(format!("{}{}", ids[2].stem(), snapshot::CORRUPT_SUFFIX));
        assert!(aside.exists(), "{what}: corrupt snapshot kept aside");
        // The log after the previous snapshot was replayed and the next
        // snapshot covers everything again.
        let next = store.snapshot_now().expect("snapshot").expect("taken");
        assert_eq!(next.end_offset, store.log().log_end_offset());
        store.shutdown().expect("shutdown");
        drop(store);
        let store = open(dir.path(), small(), &clock);
        assert_eq!(*store.image(), *before, "{what} after a new snapshot");
    }
}

#[test]
fn start_up_refuses_when_no_snapshot_covers_the_missing_prefix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let (_, ids) = two_snapshots_and_a_tail(dir.path(), &clock);
    for id in &ids[1..] {
        std::fs::write(meta_dir(dir.path()).join(id.file_name()), b"junk").expect("write");
    }
    let e = MetadataStore::open(dir.path(), small(), clock.clone()).expect_err("refused");
    assert!(matches!(e, ControllerError::Inconsistent(_)), "{e}");
    assert!(e.to_string().contains("__cluster_metadata-0"), "{e}");
    // Nothing was deleted: the log is still there.
    assert!(std::fs::read_dir(meta_dir(dir.path()))
        .expect("ls")
        .any(|e| e
            .expect("e")
            .file_name()
            .to_string_lossy()
            .ends_with(".log")));
}

#[test]
fn snapshots_are_due_by_bytes_or_by_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let config = MetadataLogConfig {
        max_bytes_between_snapshots: 400,
        max_snapshot_interval_ms: 60_000,
        ..small()
    };
    let store = open(dir.path(), config.clone(), &clock);
    assert_eq!(store.maybe_snapshot().expect("nothing"), None);
    create(&store, "a", 1, 1);
    assert_eq!(store.maybe_snapshot().expect("not due"), None);
    clock.advance(60_000);
    let by_time = store.maybe_snapshot().expect("by time").expect("taken");
    assert_eq!(by_time.end_offset, store.log().log_end_offset());
    clock.advance(30_000);
    assert_eq!(store.maybe_snapshot().expect("no new records"), None);
    create(&store, "b", 2, 1);
    assert_eq!(store.maybe_snapshot().expect("not yet"), None);
    for i in 0..10 {
        create(&store, &format!("c{i}"), 10 + i, 3);
    }
    let by_bytes = store.maybe_snapshot().expect("by bytes").expect("taken");
    assert!(by_bytes > by_time);
    // Time-based snapshots off (0): only bytes count.
    drop(store);
    let store = open(
        dir.path(),
        MetadataLogConfig {
            max_snapshot_interval_ms: 0,
            max_bytes_between_snapshots: u64::MAX,
            ..config
        },
        &clock,
    );
    create(&store, "d", 99, 1);
    clock.advance(10 * 3_600_000);
    assert_eq!(store.maybe_snapshot().expect("never"), None);
}

#[test]
fn retention_by_size_keeps_the_two_newest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(
        dir.path(),
        MetadataLogConfig {
            max_retention_ms: -1,
            max_retention_bytes: 0,
            ..small()
        },
        &clock,
    );
    for i in 0..5 {
        create(&store, &format!("t{i}"), i + 1, 1);
        store.snapshot_now().expect("snapshot");
    }
    assert_eq!(store.clean().expect("clean"), 3);
    assert_eq!(store.snapshot_ids().len(), 2);
}

#[test]
fn undecodable_records_are_skipped_with_their_offset_and_snapshots_stop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    {
        let store = open(dir.path(), small(), &clock);
        create(&store, "before", 1, 1);
        // A batch with one good record between two that do not decode (an
        // unknown record type, then garbage).
        let good = MetadataRecord::Topic {
            name: "middle".into(),
            topic_id: Uuid::from_u128(2),
        };
        let mut b = BatchBuilder::new(Compression::None, T0);
        b.push(Record::new(None, Some(vec![1, 77, 0, 0]), T0));
        b.push(Record::new(None, Some(good.encode()), T0));
        b.push(Record::new(None, Some(vec![0xff; 5]), T0));
        b.push(Record::new(None, None, T0));
        let mut bytes = b.build(0).expect("build");
        store.log().append_as_leader(&mut bytes, 0).expect("append");
        // A batch whose records do not decode at all (bad record framing,
        // valid CRC).
        // Appends validate record framing, so the batch is written valid
        // and damaged on disk afterwards, its CRC recomputed.
        const MARK: &[u8] = b"undecodable-batch-marker";
        let mut bad = BatchBuilder::new(Compression::None, T0);
        bad.push(Record::new(None, Some(MARK.to_vec()), T0));
        let mut bytes = bad.build(0).expect("build");
        store.log().append_as_leader(&mut bytes, 0).expect("append");
        create(&store, "after", 3, 1);
        let dir_path = store.log().dir().to_path_buf();
        store.shutdown().expect("shutdown");
        damage_batch_holding(&dir_path, MARK);
    }
    let store = open(dir.path(), small(), &clock);
    assert_eq!(names(&store), vec!["after", "before", "middle"]);
    // Snapshots would make the skipped records disappear for good.
    assert_eq!(store.snapshot_now().expect("disabled"), None);
    assert!(store.snapshot_ids().is_empty());
}

#[test]
fn the_background_thread_takes_snapshots_and_cleans() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = MetadataStore::open(
        dir.path(),
        MetadataLogConfig {
            max_snapshot_interval_ms: 20,
            max_retention_ms: 0,
            ..small()
        },
        Arc::new(SystemClock),
    )
    .expect("open");
    store.start_background();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut i = 0u128;
    while store.log().log_start_offset() == 0 && Instant::now() < deadline {
        create(&store, &format!("t{i}"), i + 1, 1);
        i += 1;
        std::thread::sleep(Duration::from_millis(30));
    }
    assert!(store.log().log_start_offset() > 0, "the prefix was dropped");
    let ids = store.snapshot_ids();
    assert!(ids.len() >= 2);
    store.shutdown().expect("shutdown");
    let before = store.image();
    drop(store);
    let store = MetadataStore::open(dir.path(), small(), Arc::new(SystemClock)).expect("reopen");
    assert_eq!(*store.image(), *before);
    assert_eq!(store.image().topics().count(), i as usize);
}

#[test]
fn a_snapshot_waits_for_a_change_in_progress() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let store = Arc::new(open(dir.path(), small(), &clock));
    create(&store, "doomed", 1, 2);
    let guard = store.lock_for_change();
    // A deletion: the removal is recorded, the folders are not renamed yet.
    store
        .append(&[MetadataRecord::RemoveTopic {
            topic_id: Uuid::from_u128(1),
        }])
        .expect("append");
    let s2 = Arc::clone(&store);
    let snapper = std::thread::spawn(move || s2.snapshot_now().expect("snapshot"));
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        store.snapshot_ids().is_empty(),
        "no snapshot while the change holds the lock"
    );
    drop(guard);
    let id = snapper.join().expect("join").expect("taken");
    assert_eq!(id.end_offset, store.log().log_end_offset());
    let s = snapshot::read(&meta_dir(dir.path()), id).expect("read");
    assert!(s.image().topic("doomed").is_none());
}

/// Finds the batch whose bytes hold `mark` in the partition folder's
/// segments and makes its last record's value length run past the record,
/// recomputing the CRC so only record decoding can notice.
fn damage_batch_holding(dir: &std::path::Path, mark: &[u8]) {
    for entry in std::fs::read_dir(dir).expect("ls") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "log") {
            continue;
        }
        let mut file = std::fs::read(&path).expect("read segment");
        let mut pos = 0;
        while pos + 61 <= file.len() {
            let h = sluice_protocol::record::BatchHeader::parse(&file[pos..]).expect("header");
            let n = h.total_size();
            let batch = &mut file[pos..pos + n];
            if batch.windows(mark.len()).any(|w| w == mark) {
                // Last record: ... value length (varint), value, header
                // count (0): the value length sits before the value.
                let at = n - 1 - mark.len() - 1;
                batch[at] = 0x7e; // 63 bytes: past the end of the record
                let crc = sluice_protocol::record::batch::compute_crc(batch);
                batch[17..21].copy_from_slice(&crc.to_be_bytes());
                assert!(decode_batch(batch, 1 << 20).is_err());
                std::fs::write(&path, &file).expect("write segment");
                return;
            }
            pos += n;
        }
    }
    panic!("no batch holds the mark");
}

/// Producer id blocks follow each other from 0, survive a restart without
/// a clean shutdown (the record is fsynced before the block is returned),
/// and survive a snapshot that replaced the log they were recorded in.
#[test]
fn producer_id_blocks_never_repeat_across_restarts_and_snapshots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let mut firsts = Vec::new();
    {
        let store = open(dir.path(), small(), &clock);
        assert_eq!(store.image().next_producer_id(), -1);
        for _ in 0..3 {
            let b = store.allocate_producer_ids(1, -1).expect("block");
            assert_eq!((b.broker_id, b.size), (1, crate::producer_ids::BLOCK_SIZE));
            firsts.push(b.first_id);
        }
        assert_eq!(firsts, vec![0, 1000, 2000]);
        assert_eq!(store.image().next_producer_id(), 3000);
        // No shutdown: dropped as a crash would leave it.
    }
    let store = open(dir.path(), small(), &clock);
    assert_eq!(store.image().next_producer_id(), 3000);
    let b = store
        .allocate_producer_ids(1, -1)
        .expect("block after restart");
    assert_eq!(b.first_id, 3000);
    // Snapshot twice, drop the log below the newest snapshot: the block
    // lives on in the snapshot's ProducerIdsRecord.
    create(&store, "pad", 7, 1);
    clock.advance(20_000);
    store.snapshot_now().expect("snapshot").expect("taken");
    create(&store, "pad2", 8, 1);
    clock.advance(20_000);
    store.snapshot_now().expect("snapshot").expect("taken");
    create(&store, "pad3", 9, 1);
    clock.advance(20_000);
    store.snapshot_now().expect("snapshot").expect("taken");
    assert_eq!(store.clean().expect("clean"), 1);
    assert!(store.log().log_start_offset() > 0);
    store.shutdown().expect("shutdown");
    drop(store);
    let store = open(dir.path(), small(), &clock);
    assert_eq!(store.image().next_producer_id(), 4000);
    assert_eq!(
        store.allocate_producer_ids(1, -1).expect("block").first_id,
        4000
    );
}
