//! LogManager tests: data-folder files, parallel open, clean and unclean
//! restarts, background work.

use super::*;
use crate::clock::ManualClock;
use crate::config::CleanupPolicy;
use crate::log::ReadLimit;
use sluice_protocol::record::{BatchBuilder, Compression, Record};

pub(super) const T0: i64 = 1_700_000_000_000;

pub(super) fn batch(key: &str, value: Option<&str>, ts: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new(Compression::None, ts);
    b.push(Record::new(
        Some(key.as_bytes().to_vec()),
        value.map(|v| v.as_bytes().to_vec()),
        ts,
    ));
    b.build(0).expect("build")
}

fn config(dir: &Path, clock: &Arc<ManualClock>) -> ManagerConfig {
    ManagerConfig {
        clock: clock.clone(),
        default_config: LogConfig {
            segment_bytes: 1024,
            ..LogConfig::default()
        },
        ..ManagerConfig::new(dir)
    }
}

pub(super) fn fill(m: &LogManager, topics: &[&str], partitions: i32, n: usize) {
    for t in topics {
        for p in 0..partitions {
            let log = m
                .get_or_create(&TopicPartition::new(*t, p), m.config.default_config.clone())
                .expect("create");
            for i in 0..n {
                log.append_as_leader(&mut batch(&format!("k{i}"), Some("v"), T0), 0)
                    .expect("append");
            }
            log.set_high_watermark(log.log_end_offset());
        }
    }
}

#[test]
fn clean_restart_keeps_everything_and_writes_kafka_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let m = LogManager::open(config(dir.path(), &clock)).expect("open");
    assert!(!m.had_clean_shutdown());
    fill(&m, &["orders", "a.b-c"], 3, 40);
    m.shutdown().expect("shutdown");
    drop(m);
    for f in [
        CLEAN_SHUTDOWN_FILE,
        META_PROPERTIES,
        RECOVERY_POINT_CHECKPOINT,
        LOG_START_OFFSET_CHECKPOINT,
        REPLICATION_OFFSET_CHECKPOINT,
    ] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
    let rp = std::fs::read_to_string(dir.path().join(RECOVERY_POINT_CHECKPOINT)).expect("read");
    assert!(rp.starts_with("0\n6\n"), "{rp}");
    assert!(rp.contains("a.b-c 2 40\n"), "{rp}");
    assert!(dir
        .path()
        .join("a.b-c-2")
        .join("00000000000000000000.log")
        .exists());

    let m = LogManager::open(config(dir.path(), &clock)).expect("reopen");
    assert!(m.had_clean_shutdown());
    assert!(
        !dir.path().join(CLEAN_SHUTDOWN_FILE).exists(),
        "marker consumed"
    );
    assert_eq!(m.logs().len(), 6);
    for log in m.logs() {
        assert_eq!(log.log_end_offset(), 40);
        assert_eq!(log.high_watermark(), 40);
        assert_eq!(log.recovery_point(), 40);
    }
}

#[test]
fn unclean_restart_recovers_from_the_checkpointed_recovery_point() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let m = LogManager::open(config(dir.path(), &clock)).expect("open");
    fill(&m, &["t"], 2, 30);
    for log in m.logs() {
        log.flush().expect("flush");
    }
    m.checkpoint().expect("checkpoint");
    fill(&m, &["t"], 2, 10);
    drop(m); // crash: no shutdown, no marker
    let m = LogManager::open(config(dir.path(), &clock)).expect("reopen");
    assert!(!m.had_clean_shutdown());
    for log in m.logs() {
        assert_eq!(log.log_end_offset(), 40);
        assert_eq!(log.recovery_point(), 30);
        let r = log.read(0, 1 << 20, ReadLimit::LogEnd, true).expect("read");
        assert!(r.region.is_some());
    }
}

#[test]
fn data_folder_problems_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    std::fs::write(dir.path().join(META_PROPERTIES), "version=7\n").expect("write");
    let e = LogManager::open(config(dir.path(), &clock)).expect_err("version");
    assert!(e.to_string().contains(META_PROPERTIES), "{e}");
    std::fs::write(dir.path().join(META_PROPERTIES), "version=1\nnode.id=1\n").expect("write");
    std::fs::create_dir(dir.path().join("no_partition_number")).expect("mkdir");
    let e = LogManager::open(config(dir.path(), &clock)).expect_err("folder");
    assert!(e.to_string().contains("no_partition_number"), "{e}");
    std::fs::remove_dir(dir.path().join("no_partition_number")).expect("rmdir");
    std::fs::write(dir.path().join(RECOVERY_POINT_CHECKPOINT), "9\n0\n").expect("write");
    let e = LogManager::open(config(dir.path(), &clock)).expect_err("checkpoint");
    assert!(e.to_string().contains(RECOVERY_POINT_CHECKPOINT), "{e}");
    std::fs::remove_file(dir.path().join(RECOVERY_POINT_CHECKPOINT)).expect("rm");
    let m = LogManager::open(config(dir.path(), &clock)).expect("ok now");
    let e = LogManager::open(config(dir.path(), &clock)).expect_err("locked");
    assert!(e.to_string().contains(".lock"), "{e}");
    drop(m);
}

#[test]
fn delete_retention_and_cleaning_through_the_manager() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let m = LogManager::open(config(dir.path(), &clock)).expect("open");
    fill(&m, &["gone", "old"], 1, 50);
    assert!(m.delete(&TopicPartition::new("gone", 0)).expect("delete"));
    assert!(!dir.path().join("gone-0").exists());
    assert!(m.get(&TopicPartition::new("gone", 0)).is_none());
    clock.advance(8 * 24 * 3_600_000);
    assert!(m.run_retention() > 0);
    let old = m.get(&TopicPartition::new("old", 0)).expect("old");
    assert_eq!(old.segment_count(), 1);

    let compacted = LogConfig {
        segment_bytes: 1024,
        cleanup_policy: CleanupPolicy {
            delete: false,
            compact: true,
        },
        ..LogConfig::default()
    };
    let log = m
        .get_or_create(&TopicPartition::new("cmp", 0), compacted)
        .expect("create");
    for i in 0..200 {
        log.append_as_leader(
            &mut batch(&format!("k{}", i % 5), Some("v"), clock.now_ms()),
            0,
        )
        .expect("append");
    }
    log.set_high_watermark(log.log_end_offset());
    let before = log.size_in_bytes();
    let (tp, stats) = m.clean_once().expect("clean").expect("cleaned");
    assert_eq!(tp.topic, "cmp");
    assert!(log.size_in_bytes() < before);
    let cp = std::fs::read_to_string(dir.path().join(CLEANER_OFFSET_CHECKPOINT)).expect("read");
    assert_eq!(cp, format!("0\n1\ncmp 0 {}\n", stats.end));
    assert!(
        m.clean_once().expect("clean").is_none(),
        "nothing dirty left"
    );
}

#[test]
fn background_threads_flush_rolled_segments_and_stop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let m = LogManager::open(ManagerConfig {
        flush_check_interval_ms: 10,
        checkpoint_interval_ms: 20,
        cleaner_backoff_ms: 10,
        ..config(dir.path(), &clock)
    })
    .expect("open");
    m.start_background();
    fill(&m, &["bg"], 1, 50);
    let log = m.get(&TopicPartition::new("bg", 0)).expect("log");
    let deadline = Instant::now() + Duration::from_secs(10);
    let active = *log.segment_base_offsets().last().expect("segments");
    while log.recovery_point() < active && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(log.recovery_point() >= active, "rolled segments flushed");
    // Kafka's flush on roll stops at the new segment's base: the active
    // segment, which appends write to, is not fsynced with them.
    assert!(log.log_end_offset() > active, "the active segment has data");
    assert_eq!(log.recovery_point(), active);
    m.shutdown().expect("shutdown");
    assert!(dir.path().join(CLEAN_SHUTDOWN_FILE).exists());
}

/// Writes a metadata-log folder the way the controller does (outside the
/// manager), with batches stamped long ago.
fn write_metadata_log(dir: &Path, clock: &Arc<ManualClock>) -> usize {
    let tp = TopicPartition::new(CLUSTER_METADATA_TOPIC, 0);
    let log = Log::open(
        &dir.join(tp.dir_name()),
        tp,
        LogConfig {
            segment_bytes: 200,
            ..LogConfig::default()
        },
        LogOpenOptions::default(),
        clock.clone(),
    )
    .expect("open metadata log");
    for i in 0..20 {
        log.append_as_leader(&mut batch(&format!("m{i}"), Some("v"), T0), 0)
            .expect("append");
    }
    log.close().expect("close");
    log.segment_count()
}

#[test]
fn the_metadata_log_is_never_managed_whatever_the_retention_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let segments = write_metadata_log(dir.path(), &clock);
    assert!(segments > 2, "{segments}");
    let hostile = ManagerConfig {
        default_config: LogConfig {
            segment_bytes: 200,
            retention_ms: 1,
            retention_bytes: 0,
            cleanup_policy: CleanupPolicy {
                delete: true,
                compact: true,
            },
            ..LogConfig::default()
        },
        ..config(dir.path(), &clock)
    };
    let m = LogManager::open(hostile).expect("open");
    let tp = TopicPartition::new(CLUSTER_METADATA_TOPIC, 0);
    assert!(m.get(&tp).is_none(), "the manager does not load it");
    assert!(m.get_or_create(&tp, LogConfig::default()).is_err());
    clock.advance(30 * 24 * 3_600_000);
    m.run_retention();
    while m.clean_once().expect("clean").is_some() {}
    m.checkpoint().expect("checkpoint");
    m.shutdown().expect("shutdown");
    drop(m);
    let logs = std::fs::read_dir(dir.path().join(tp.dir_name()))
        .expect("ls")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .count();
    assert_eq!(logs, segments, "every metadata segment is still there");
    let log = Log::open(
        &dir.path().join(tp.dir_name()),
        tp,
        LogConfig::default(),
        LogOpenOptions::default(),
        clock.clone(),
    )
    .expect("reopen");
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 20));
}

#[test]
fn stray_folders_are_renamed_aside_and_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let m = LogManager::open(config(dir.path(), &clock)).expect("open");
    fill(&m, &["lost", "kept"], 1, 30);
    let lost = TopicPartition::new("lost", 0);
    let end = m.get(&lost).expect("log").log_end_offset();
    let aside = m.rename_stray(&lost).expect("stray").expect("renamed");
    assert!(m.rename_stray(&lost).expect("again").is_none());
    let name = aside
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    assert!(
        name.starts_with("lost-0.") && name.ends_with(STRAY_DIR_SUFFIX),
        "{name}"
    );
    assert!(!dir.path().join("lost-0").exists());
    assert!(m.get(&lost).is_none());
    m.shutdown().expect("shutdown");
    drop(m);
    // Reopening keeps the stray folder, does not load it, and its data is
    // intact.
    let m = LogManager::open(config(dir.path(), &clock)).expect("reopen");
    assert!(aside.exists());
    assert!(m.get(&lost).is_none());
    assert!(m.get(&TopicPartition::new("kept", 0)).is_some());
    drop(m);
    let log = Log::open(
        &aside,
        lost,
        LogConfig::default(),
        LogOpenOptions::default(),
        clock.clone(),
    )
    .expect("open stray");
    assert_eq!(log.log_end_offset(), end);
    // Long topic names are shortened to fit 255 bytes.
    let long = TopicPartition::new("x".repeat(249), 7);
    let n = stray_dir_name(&long);
    assert!(n.len() <= 255 && n.ends_with(STRAY_DIR_SUFFIX), "{n}");
    assert!(n.contains("-7."), "{n}");
}

fn producer_batch(pid: i64, seq: i32, ts: i64) -> Vec<u8> {
    let producer = sluice_protocol::record::codec::ProducerInfo {
        producer_id: pid,
        producer_epoch: 0,
        base_sequence: seq,
    };
    let mut b = BatchBuilder::new(Compression::None, ts).producer(producer, false);
    b.push(Record::new(Some(b"k".to_vec()), Some(b"v".to_vec()), ts));
    b.build(0).expect("build")
}

/// The scheduler forgets producer ids idle for `producer.id.expiration.ms`
/// every `producer.id.expiration.check.interval.ms`; restarts, clean or
/// not, keep what was left.
#[test]
fn producer_ids_expire_in_the_background_and_the_state_survives_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let mc = ManagerConfig {
        producer_state: ProducerStateConfig {
            producer_id_expiration_ms: 60_000,
            max_producer_ids: 1_000,
        },
        producer_id_expiration_check_interval_ms: 20,
        ..config(dir.path(), &clock)
    };
    let m = LogManager::open(mc.clone()).expect("open");
    let tp = TopicPartition::new("idem", 0);
    let log = m
        .get_or_create(&tp, mc.default_config.clone())
        .expect("create");
    log.append_as_leader_from(
        &mut producer_batch(1, 0, T0),
        0,
        crate::AppendOrigin::Client,
    )
    .expect("1");
    log.append_as_leader_from(
        &mut producer_batch(2, 0, T0 + 50_000),
        0,
        crate::AppendOrigin::Client,
    )
    .expect("2");
    m.start_background();
    clock.advance(60_000);
    let deadline = Instant::now() + Duration::from_secs(10);
    while log.producer_id_count() > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        log.active_producers()
            .iter()
            .map(|p| p.producer_id)
            .collect::<Vec<_>>(),
        vec![2],
        "producer 1 expired, 2 is 10 s idle"
    );
    m.shutdown().expect("shutdown");
    drop((log, m));

    // Clean restart: the snapshot written at close holds producer 2 only.
    let m = LogManager::open(mc.clone()).expect("reopen");
    let log = m.get(&tp).expect("log");
    assert_eq!(log.producer_load().replayed_batches, 0);
    assert_eq!(log.producer_id_count(), 1);
    let dup = log
        .append_as_leader_from(
            &mut producer_batch(2, 0, T0 + 50_000),
            0,
            crate::AppendOrigin::Client,
        )
        .expect("retry");
    assert!(dup.duplicate);
    log.append_as_leader_from(
        &mut producer_batch(2, 1, T0 + 61_000),
        0,
        crate::AppendOrigin::Client,
    )
    .expect("next");
    drop((log, m)); // a crash: no snapshot at the end, no clean marker

    // Unclean restart: the snapshot the clean shutdown left at offset 2 lies
    // at the checkpointed recovery point, so it is loaded and only the
    // batch after it replayed; producer 1 stays forgotten.
    let m = LogManager::open(mc).expect("reopen after crash");
    let log = m.get(&tp).expect("log");
    assert_eq!(
        log.producer_load(),
        crate::ProducerLoad {
            snapshot: Some(2),
            replayed_batches: 1
        }
    );
    assert_eq!(log.producer_state(2).map(|p| p.last_seq()), Some(1));
    assert!(log.producer_state(1).is_none());
}
