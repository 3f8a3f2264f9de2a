//! LogManager over several data folders (JBOD): placement, restart,
//! duplicate partitions, moves between folders and interrupted moves.

use super::*;
use crate::clock::ManualClock;
use crate::log::tests::values;
use crate::manager::tests::{batch, fill, T0};

fn config2(dirs: &[&Path], clock: &Arc<ManualClock>) -> ManagerConfig {
    ManagerConfig {
        clock: clock.clone(),
        default_config: LogConfig {
            segment_bytes: 1024,
            ..LogConfig::default()
        },
        ..ManagerConfig::with_dirs(dirs.iter().map(|d| d.to_path_buf()).collect())
    }
}

/// Two data folders, a manual clock and a manager opened on both.
fn two_folders() -> (
    tempfile::TempDir,
    tempfile::TempDir,
    Arc<ManualClock>,
    Arc<LogManager>,
) {
    let (a, b) = (
        tempfile::tempdir().expect("a"),
        tempfile::tempdir().expect("b"),
    );
    let clock = Arc::new(ManualClock::new(T0));
    let m = LogManager::open(config2(&[a.path(), b.path()], &clock)).expect("open");
    (a, b, clock, m)
}

fn tp(t: &str, p: i32) -> TopicPartition {
    TopicPartition::new(t, p)
}

/// Partition folder names directly in `dir`.
fn partitions_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .filter_map(|e| {
            let e = e.ok()?;
            e.path()
                .is_dir()
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect();
    names.sort();
    names
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
    }
}

#[test]
fn partitions_spread_over_folders_and_are_found_after_a_restart() {
    let (a, b, clock, m) = two_folders();
    fill(&m, &["t"], 4, 30);
    fill(&m, &["u"], 1, 5);
    // Fewest partitions first, ties to the first folder: t-0 a, t-1 b,
    // t-2 a, t-3 b, u-0 a.
    assert_eq!(partitions_in(a.path()), vec!["t-0", "t-2", "u-0"]);
    assert_eq!(partitions_in(b.path()), vec!["t-1", "t-3"]);
    for d in [a.path(), b.path()] {
        assert!(d.join(META_PROPERTIES).exists());
    }
    m.shutdown().expect("shutdown");
    drop(m);
    // Each folder's checkpoints list only the partitions in it.
    let rp = std::fs::read_to_string(b.path().join(RECOVERY_POINT_CHECKPOINT)).expect("read");
    assert_eq!(rp, "0\n2\nt 1 30\nt 3 30\n");
    for d in [a.path(), b.path()] {
        assert!(d.join(CLEAN_SHUTDOWN_FILE).exists());
    }

    let m = LogManager::open(config2(&[a.path(), b.path()], &clock)).expect("reopen");
    assert!(m.had_clean_shutdown());
    assert_eq!(m.logs().len(), 5);
    for p in 0..4 {
        let log = m.get(&tp("t", p)).expect("log");
        assert_eq!(log.log_end_offset(), 30);
        assert_eq!(log.high_watermark(), 30);
        assert_eq!(values(&log, 0).len(), 30);
        let expected = if p % 2 == 0 { a.path() } else { b.path() };
        assert_eq!(m.dir_index_of(&log), Some(usize::from(p % 2 == 1)));
        assert_eq!(log.dir().parent(), Some(expected));
    }
    // Deletion and retention work in any folder. The deleted folder is
    // renamed at once and removed after file.delete.delay.ms.
    assert!(m.delete(&tp("t", 1)).expect("delete"));
    let pending = m.pending_deletions();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].parent(), Some(b.path()));
    assert!(pending[0].to_string_lossy().ends_with("-delete"));
    assert_eq!(partitions_in(b.path()).len(), 2, "t-3 and t-1 renamed");
    m.delete_expired_files();
    assert!(pending[0].exists(), "kept until the delay passed");
    clock.advance(LogConfig::default().file_delete_delay_ms);
    m.delete_expired_files();
    assert!(m.pending_deletions().is_empty());
    assert_eq!(partitions_in(b.path()), vec!["t-3"]);
    let log = m.get(&tp("t", 3)).expect("log");
    log.advance_log_start_offset(20).expect("delete records");
    assert!(log.segment_count() < 5, "segments below 20 deleted");
    // A new partition goes to the emptier folder.
    m.get_or_create(&tp("v", 0), LogConfig::default())
        .expect("create");
    assert_eq!(partitions_in(b.path()), vec!["t-3", "v-0"]);
    m.shutdown().expect("shutdown");
}

#[test]
fn a_partition_in_two_folders_stops_the_start() {
    let (a, b, clock, m) = two_folders();
    fill(&m, &["t"], 1, 3);
    m.shutdown().expect("shutdown");
    drop(m);
    copy_dir(&a.path().join("t-0"), &b.path().join("t-0"));
    let e = LogManager::open(config2(&[a.path(), b.path()], &clock)).expect_err("duplicate");
    let msg = e.to_string();
    assert!(msg.contains("duplicate log directories for t-0"), "{msg}");
    assert!(
        msg.contains(&a.path().join("t-0").display().to_string()),
        "{msg}"
    );
    assert!(
        msg.contains(&b.path().join("t-0").display().to_string()),
        "{msg}"
    );
}

#[test]
fn a_move_keeps_the_data_and_survives_a_restart() {
    let (a, b, clock, m) = two_folders();
    fill(&m, &["t"], 1, 40);
    let old = m.get(&tp("t", 0)).expect("log");
    old.advance_log_start_offset(10).expect("delete records");
    let before = values(&old, 10);
    assert_eq!(m.dir_index_of(&old), Some(0));
    assert!(matches!(
        m.move_log(&tp("t", 0), 0).expect("same"),
        MoveOutcome::AlreadyThere
    ));
    assert!(matches!(
        m.move_log(&tp("x", 0), 1).expect("none"),
        MoveOutcome::NoSuchLog
    ));
    let MoveOutcome::Moved(new) = m.move_log(&tp("t", 0), 1).expect("move") else {
        panic!("not moved");
    };
    assert!(m.moves().is_empty());
    assert_eq!(m.dir_index_of(&new), Some(1));
    assert!(Arc::ptr_eq(&new, &m.get(&tp("t", 0)).expect("log")));
    // The old folder goes after file.delete.delay.ms.
    assert_eq!(m.pending_deletions().len(), 1);
    clock.advance(LogConfig::default().file_delete_delay_ms);
    m.delete_expired_files();
    assert_eq!(partitions_in(a.path()), Vec::<String>::new());
    assert_eq!(partitions_in(b.path()), vec!["t-0"]);
    assert_eq!(new.log_start_offset(), 10);
    assert_eq!(new.high_watermark(), 40);
    assert_eq!(values(&new, 10), before);
    // The old log is retired: a late writer fails instead of writing into
    // a folder that is gone.
    assert!(old
        .append_as_leader(&mut batch("late", Some("v"), T0), 0)
        .is_err());
    new.append_as_leader(&mut batch("k", Some("after"), T0), 0)
        .expect("append");
    new.set_high_watermark(new.log_end_offset());
    // The copy's checkpoints are in its new folder.
    let starts = std::fs::read_to_string(b.path().join(LOG_START_OFFSET_CHECKPOINT)).expect("read");
    assert!(starts.contains("t 0 10\n"), "{starts}");
    drop((old, new));
    drop(m); // crash
    let m = LogManager::open(config2(&[a.path(), b.path()], &clock)).expect("reopen");
    let log = m.get(&tp("t", 0)).expect("log");
    assert_eq!(m.dir_index_of(&log), Some(1));
    assert_eq!(log.log_start_offset(), 10);
    assert_eq!(log.log_end_offset(), 41);
    assert_eq!(values(&log, 10).len(), 31);
    // And back.
    assert!(matches!(
        m.move_log(&tp("t", 0), 0).expect("move back"),
        MoveOutcome::Moved(_)
    ));
    m.shutdown().expect("shutdown");
    drop(m);
    assert_eq!(partitions_in(a.path()), vec!["t-0"]);
    // The old folder was still waiting for file.delete.delay.ms: the next
    // start removes it.
    let left = partitions_in(b.path());
    assert!(left.len() == 1 && left[0].ends_with("-delete"), "{left:?}");
    let m = LogManager::open(config2(&[a.path(), b.path()], &clock)).expect("reopen");
    assert_eq!(partitions_in(b.path()), Vec::<String>::new());
    assert_eq!(m.get(&tp("t", 0)).expect("log").log_end_offset(), 41);
}

#[test]
fn an_unfinished_move_is_discarded_and_a_committed_one_finished_at_start() {
    let (a, b, clock, m) = two_folders();
    fill(&m, &["t"], 1, 25);
    m.shutdown().expect("shutdown");
    drop(m);
    // Crash during the copy: the source is there, a (partial) copy too.
    let future = b.path().join("t-0.1f-future");
    copy_dir(&a.path().join("t-0"), &future);
    std::fs::remove_file(future.join("00000000000000000000.log")).expect("partial");
    let m = LogManager::open(config2(&[a.path(), b.path()], &clock)).expect("reopen");
    assert!(!future.exists(), "the unfinished copy is removed");
    let log = m.get(&tp("t", 0)).expect("log");
    assert_eq!(m.dir_index_of(&log), Some(0));
    assert_eq!(values(&log, 0).len(), 25);
    m.shutdown().expect("shutdown");
    drop((log, m));

    // Crash after the commit: the source folder renamed -delete, the
    // complete copy not yet renamed.
    copy_dir(&a.path().join("t-0"), &future);
    std::fs::rename(a.path().join("t-0"), a.path().join("t-0.1f-delete")).expect("commit");
    let m = LogManager::open(config2(&[a.path(), b.path()], &clock)).expect("reopen");
    assert_eq!(partitions_in(a.path()), Vec::<String>::new());
    assert_eq!(partitions_in(b.path()), vec!["t-0"]);
    let log = m.get(&tp("t", 0)).expect("log");
    assert_eq!(m.dir_index_of(&log), Some(1));
    assert_eq!(values(&log, 0).len(), 25);
    m.shutdown().expect("shutdown");
}

#[test]
fn a_folder_with_a_failed_log_goes_offline() {
    let (a, _b, _clock, m) = two_folders();
    fill(&m, &["t"], 4, 3);
    assert!(m.offline_dirs().is_empty());
    let failed = m.get(&tp("t", 1)).expect("log");
    failed.go_offline(StorageError::Offline("t-1".into()));
    assert_eq!(m.offline_dirs(), BTreeSet::from([1]));
    assert!(m.get(&tp("t", 3)).expect("log").is_offline());
    assert!(!m.get(&tp("t", 0)).expect("log").is_offline());
    // Nothing is placed or moved there any more.
    m.get_or_create(&tp("u", 0), LogConfig::default())
        .expect("create");
    m.get_or_create(&tp("u", 1), LogConfig::default())
        .expect("create");
    assert_eq!(partitions_in(a.path()), vec!["t-0", "t-2", "u-0", "u-1"]);
    assert!(matches!(
        m.move_log(&tp("t", 0), 1),
        Err(StorageError::Offline(_))
    ));
    // The working folder's checkpoints are still written.
    m.checkpoint().expect("checkpoint");
    let rp = std::fs::read_to_string(a.path().join(RECOVERY_POINT_CHECKPOINT)).expect("read");
    assert!(rp.contains("u 1 0\n"), "{rp}");
}

#[test]
fn the_cleaner_works_in_any_folder_and_checkpoints_there() {
    let (a, b, _clock, m) = two_folders();
    fill(&m, &["first"], 1, 3);
    let compacted = LogConfig {
        segment_bytes: 1024,
        cleanup_policy: crate::config::CleanupPolicy {
            delete: false,
            compact: true,
        },
        ..LogConfig::default()
    };
    let log = m.get_or_create(&tp("cmp", 0), compacted).expect("create");
    assert_eq!(m.dir_index_of(&log), Some(1));
    for i in 0..200 {
        log.append_as_leader(&mut batch(&format!("k{}", i % 5), Some("v"), T0), 0)
            .expect("append");
    }
    log.set_high_watermark(log.log_end_offset());
    let before = log.size_in_bytes();
    let (cleaned, stats) = m.clean_once().expect("clean").expect("cleaned");
    assert_eq!(cleaned, tp("cmp", 0));
    assert!(log.size_in_bytes() < before);
    let cp = std::fs::read_to_string(b.path().join(CLEANER_OFFSET_CHECKPOINT)).expect("read");
    assert_eq!(cp, format!("0\n1\ncmp 0 {}\n", stats.end));
    assert!(!a.path().join(CLEANER_OFFSET_CHECKPOINT).exists());
    m.shutdown().expect("shutdown");
}

/// Appends one record per value to `log` (leader epoch 0).
fn append_values(log: &Log, prefix: &str, n: usize) {
    for i in 0..n {
        log.append_as_leader(
            &mut batch(&format!("k{i}"), Some(&format!("{prefix}{i}")), T0),
            0,
        )
        .expect("append");
    }
    log.set_high_watermark(log.log_end_offset());
}

/// Moves `tp` into folder `dest` on another thread whose copy of the
/// sealed segments stops at its first chunk (the throttle callback waits)
/// until `during` has run here. Returns the new log, the old log's segment
/// bases when the move committed, and whether `during` finished before
/// the move did.
fn move_pausing(
    m: &LogManager,
    tp: &TopicPartition,
    dest: usize,
    during: impl FnOnce(),
) -> (Arc<Log>, Vec<i64>, bool) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    let old = m.get(tp).expect("log");
    let (started_tx, started_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let started_tx = Mutex::new(Some(started_tx));
    let go_rx = Mutex::new(go_rx);
    let done = AtomicBool::new(false);
    let limit = || {
        if let Some(tx) = lock(&started_tx).take() {
            tx.send(()).expect("signal");
            // A regression that copied under the freeze would hold the
            // appends of `during` back until this gives up.
            let _ = lock(&go_rx).recv_timeout(Duration::from_secs(30));
        }
        i64::MAX
    };
    std::thread::scope(|s| {
        let mover = s.spawn(|| {
            let r = m.move_log_limited(tp, dest, &limit);
            done.store(true, Ordering::SeqCst);
            r
        });
        started_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the copy of the sealed segments started");
        during();
        let first = !done.load(Ordering::SeqCst);
        go_tx.send(()).expect("go");
        let MoveOutcome::Moved(new) = mover.join().expect("join").expect("move") else {
            panic!("not moved");
        };
        (new, old.segment_base_offsets(), first)
    })
}

/// Files directly in `dir`, sorted.
fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
        .collect();
    names.sort();
    names
}

#[test]
fn a_move_copies_sealed_segments_while_appends_and_retention_go_on() {
    let (a, b, clock, m) = two_folders();
    let t0 = tp("t", 0);
    let old = m
        .get_or_create(&t0, m.config.default_config.clone())
        .expect("create");
    append_values(&old, "before", 60);
    let sealed_before = old.segment_count() - 1;
    assert!(
        sealed_before >= 3,
        "several sealed segments: {sealed_before}"
    );
    let (new, bases, appends_first) = move_pausing(&m, &t0, 1, || {
        // The copy holds the first segment open; retention takes it away.
        old.advance_log_start_offset(20).expect("delete records");
        // Appends go on (rolling new segments) while the copy waits.
        append_values(&old, "during", 40);
        assert_eq!(m.moves().len(), 1, "the move is in progress");
    });
    assert!(appends_first, "the appends finished before the move");
    assert!(m.moves().is_empty());
    assert_eq!(m.dir_index_of(&new), Some(1));
    assert!(old.is_offline(), "the old log is retired");
    assert_eq!(new.segment_base_offsets(), bases);
    assert_eq!(new.log_start_offset(), 20);
    assert!(bases[0] > 0 && bases[0] <= 20, "{bases:?}");
    assert_eq!(new.log_end_offset(), 100);
    assert_eq!(new.high_watermark(), 100);
    // The copy of the segment retention removed was dropped.
    let files = files_in(&b.path().join("t-0"));
    assert!(
        !files.contains(&"00000000000000000000.log".to_string()),
        "{files:?}"
    );
    append_values(&new, "after", 5);
    let expect: Vec<(i64, Vec<u8>)> = (20..60)
        .map(|i| (i, format!("before{i}")))
        .chain((0..40).map(|i| (60 + i, format!("during{i}"))))
        .chain((0..5).map(|i| (100 + i, format!("after{i}"))))
        .map(|(o, v)| (o, v.into_bytes()))
        .collect();
    assert_eq!(values(&new, 20), expect);
    drop((old, new));
    drop(m); // crash
    let m = LogManager::open(config2(&[a.path(), b.path()], &clock)).expect("reopen");
    let log = m.get(&t0).expect("log");
    assert_eq!(m.dir_index_of(&log), Some(1));
    assert_eq!(values(&log, 20), expect);
    assert_eq!(partitions_in(a.path()), Vec::<String>::new());
    m.shutdown().expect("shutdown");
}

#[test]
fn segments_truncated_during_the_copy_are_copied_again() {
    let (a, b, clock, m) = two_folders();
    let t0 = tp("t", 0);
    let old = m
        .get_or_create(&t0, m.config.default_config.clone())
        .expect("create");
    append_values(&old, "first", 60);
    let (new, bases, appends_first) = move_pausing(&m, &t0, 1, || {
        // A follower's truncation cuts into the first segment, whose data
        // the copy has read already; the log then takes other records at
        // those offsets.
        old.truncate_to(5).expect("truncate");
        append_values(&old, "second", 30);
    });
    assert!(appends_first, "the truncation and appends finished first");
    assert_eq!(new.segment_base_offsets(), bases);
    assert_eq!(new.log_end_offset(), 35);
    let expect: Vec<(i64, Vec<u8>)> = (0..5)
        .map(|i| (i, format!("first{i}")))
        .chain((0..30).map(|i| (5 + i, format!("second{i}"))))
        .map(|(o, v)| (o, v.into_bytes()))
        .collect();
    assert_eq!(values(&new, 0), expect);
    drop(m); // crash
    let m = LogManager::open(config2(&[a.path(), b.path()], &clock)).expect("reopen");
    let log = m.get(&t0).expect("log");
    assert_eq!(values(&log, 0), expect);
    m.shutdown().expect("shutdown");
}

#[test]
fn the_move_throttle_holds_the_unfrozen_copy_back_until_raised() {
    use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
    let (_a, _b, _clock, m) = two_folders();
    let t0 = tp("t", 0);
    let old = m
        .get_or_create(&t0, m.config.default_config.clone())
        .expect("create");
    append_values(&old, "before", 40);
    // 10 bytes a second: the first segment alone takes minutes.
    let rate = AtomicI64::new(10);
    let done = AtomicBool::new(false);
    let limit = || rate.load(Ordering::SeqCst);
    std::thread::scope(|s| {
        let mover = s.spawn(|| {
            let r = m.move_log_limited(&t0, 1, &limit);
            done.store(true, Ordering::SeqCst);
            r
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        while m.moves().is_empty() {
            assert!(Instant::now() < deadline, "the move did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
        append_values(&old, "during", 20);
        assert!(
            !done.load(Ordering::SeqCst),
            "the throttled copy is still going"
        );
        assert_eq!(m.moves().len(), 1);
        // Kafka's default, Long.MAX_VALUE: no limit; the move finishes.
        rate.store(i64::MAX, Ordering::SeqCst);
        let MoveOutcome::Moved(new) = mover.join().expect("join").expect("move") else {
            panic!("not moved");
        };
        assert_eq!(m.dir_index_of(&new), Some(1));
        let expect: Vec<(i64, Vec<u8>)> = (0..40)
            .map(|i| (i, format!("before{i}")))
            .chain((0..20).map(|i| (40 + i, format!("during{i}"))))
            .map(|(o, v)| (o, v.into_bytes()))
            .collect();
        assert_eq!(values(&new, 0), expect);
    });
    m.shutdown().expect("shutdown");
}

/// A move held back by the throttle (0: no copying at all) keeps no
/// deletion waiting: the deletion goes ahead, the move stops and its
/// future folder is removed; so does a shutdown.
#[test]
fn a_deletion_or_shutdown_stops_a_move_held_back_by_the_throttle() {
    use std::sync::atomic::{AtomicI64, Ordering};
    let (a, b, _clock, m) = two_folders();
    let (t0, t1) = (tp("t", 0), tp("t", 1));
    for t in [&t0, &t1] {
        let log = m
            .get_or_create(t, m.config.default_config.clone())
            .expect("create");
        append_values(&log, "v", 40);
    }
    let zero = AtomicI64::new(0);
    let limit = || zero.load(Ordering::SeqCst);
    let wait_started = |m: &LogManager| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while m.moves().is_empty() {
            assert!(Instant::now() < deadline, "the move did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    // Each moves to the folder it is not in.
    let dest =
        |t: &TopicPartition| 1 - m.get(t).and_then(|l| m.dir_index_of(&l)).expect("a folder");
    let (d0, d1) = (dest(&t0), dest(&t1));
    std::thread::scope(|s| {
        let mover = s.spawn(|| m.move_log_limited(&t0, d0, &limit));
        wait_started(&m);
        assert!(
            m.delete(&t0).expect("delete"),
            "deleted while the move waits"
        );
        assert!(mover.join().expect("join").is_err(), "the move stopped");
    });
    assert!(m.moves().is_empty());
    assert!(m.get(&t0).is_none());
    std::thread::scope(|s| {
        let mover = s.spawn(|| m.move_log_limited(&t1, d1, &limit));
        wait_started(&m);
        m.shutdown().expect("shutdown");
        assert!(mover.join().expect("join").is_err(), "the move stopped");
    });
    let futures: Vec<String> = partitions_in(b.path())
        .into_iter()
        .chain(partitions_in(a.path()))
        .filter(|n| n.ends_with("-future"))
        .collect();
    assert!(futures.is_empty(), "future folders left: {futures:?}");
}

#[test]
fn segments_the_cleaner_replaces_during_the_copy_are_copied_again() {
    let (a, b, clock, m) = two_folders();
    let compacted = LogConfig {
        segment_bytes: 1024,
        cleanup_policy: crate::config::CleanupPolicy {
            delete: false,
            compact: true,
        },
        ..LogConfig::default()
    };
    let t0 = tp("cmp", 0);
    let old = m.get_or_create(&t0, compacted).expect("create");
    // A key written once keeps the cleaned first segment at base 0, the
    // segment whose data the paused copy has read already.
    old.append_as_leader(&mut batch("once", Some("kept"), T0), 0)
        .expect("append");
    for i in 1..200 {
        old.append_as_leader(
            &mut batch(&format!("k{}", i % 5), Some(&format!("v{i}")), T0),
            0,
        )
        .expect("append");
    }
    old.set_high_watermark(old.log_end_offset());
    let mut at_commit = Vec::new();
    let (new, bases, first) = move_pausing(&m, &t0, 1, || {
        let before = old.size_in_bytes();
        let (cleaned, _) = m.clean_once().expect("clean").expect("cleaned");
        assert_eq!(cleaned, t0);
        assert!(old.size_in_bytes() < before, "the cleaner swapped segments");
        append_values(&old, "during", 10);
        at_commit = values(&old, 0);
    });
    assert!(first, "the cleaning and appends finished before the move");
    assert_eq!(new.segment_base_offsets(), bases);
    assert_eq!(new.log_end_offset(), 210);
    assert_eq!(bases[0], 0);
    assert_eq!(at_commit[0], (0, b"kept".to_vec()));
    assert!(at_commit.len() < 50, "compacted: {}", at_commit.len());
    assert_eq!(values(&new, 0), at_commit);
    drop(m); // crash
    let m = LogManager::open(config2(&[a.path(), b.path()], &clock)).expect("reopen");
    assert_eq!(values(&m.get(&t0).expect("log"), 0), at_commit);
    m.shutdown().expect("shutdown");
}
