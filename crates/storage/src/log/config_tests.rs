//! Tests of the topic configs that change how segments live and die:
//! `segment.jitter.ms`, `file.delete.delay.ms`, `preallocate`.

use std::path::Path;
use std::sync::Arc;

use super::tests::{batch, open, try_open, values, T0};
use super::*;
use crate::clock::ManualClock;

fn files_ending(dir: &Path, suffix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("ls")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(suffix))
        .collect();
    v.sort();
    v
}

/// The metadata of segment `base`'s `.log` file.
fn log_file(dir: &Path, base: i64) -> std::fs::Metadata {
    std::fs::metadata(crate::segment::segment_path(
        dir,
        base,
        crate::segment::LOG_SUFFIX,
        "",
    ))
    .expect("stat")
}

fn file_len(dir: &Path, base: i64) -> u64 {
    log_file(dir, base).len()
}

fn append(log: &Log, clock: &ManualClock, ts: i64, tag: &str) -> AppendInfo {
    clock.set(ts);
    let mut b = batch(1, ts, tag);
    log.append_as_leader(&mut b, 0).expect("append")
}

#[test]
fn segment_jitter_rolls_each_segment_within_its_own_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let config = LogConfig {
        segment_ms: 1000,
        segment_jitter_ms: 600,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config, &clock);
    let mut t = T0;
    append(&log, &clock, t, "first");
    let mut jitters = Vec::new();
    for round in 0..25 {
        let j = log.active_segment().roll_jitter_ms();
        assert!((0..600).contains(&j), "round {round}: jitter {j}");
        jitters.push(j);
        let segments = log.segment_count();
        // Exactly segment.ms - jitter after the first batch: not yet.
        append(&log, &clock, t + 1000 - j, "same");
        assert_eq!(log.segment_count(), segments, "round {round}: rolled early");
        // One millisecond later: the segment rolls.
        t += 1000 - j + 1;
        append(&log, &clock, t, "next");
        assert_eq!(log.segment_count(), segments + 1, "round {round}: no roll");
    }
    jitters.sort_unstable();
    jitters.dedup();
    assert!(jitters.len() > 1, "the jitter is drawn per segment");
    // Without jitter a segment rolls at segment.ms exactly; on a compacted
    // topic max.compaction.lag.ms bounds the age too.
    log.set_config(LogConfig {
        segment_ms: 1000,
        ..LogConfig::default()
    });
    log.roll().expect("roll");
    append(&log, &clock, t + 10, "a");
    let n = log.segment_count();
    assert_eq!(log.active_segment().roll_jitter_ms(), 0);
    append(&log, &clock, t + 1010, "b");
    assert_eq!(log.segment_count(), n);
    append(&log, &clock, t + 1011, "c");
    assert_eq!(log.segment_count(), n + 1);
    log.set_config(LogConfig {
        segment_ms: 1000,
        max_compaction_lag_ms: 100,
        cleanup_policy: crate::config::CleanupPolicy {
            delete: false,
            compact: true,
        },
        ..LogConfig::default()
    });
    append(&log, &clock, t + 1111, "d");
    assert_eq!(log.segment_count(), n + 1);
    append(&log, &clock, t + 1112, "e");
    assert_eq!(log.segment_count(), n + 2);
    // Every record is still there, in order.
    assert_eq!(values(&log, 0).len() as i64, log.log_end_offset());
}

fn delayed_config(delay_ms: i64) -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 100,
        segment_index_bytes: 4096,
        file_delete_delay_ms: delay_ms,
        ..LogConfig::default()
    }
}

fn fill(log: &Log, clock: &ManualClock, batches: usize) {
    for i in 0..batches {
        let mut b = batch(4, clock.now_ms(), &format!("b{i}"));
        log.append_as_leader(&mut b, 0).expect("append");
    }
    log.set_high_watermark(log.log_end_offset());
}

#[test]
fn deleted_segments_wait_for_file_delete_delay_and_a_restart_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open(dir.path(), delayed_config(10_000), &clock);
    fill(&log, &clock, 100);
    let segments = log.segment_count();
    assert!(segments > 4, "{segments} segments");
    let start = log.segment_base_offsets()[3];
    log.advance_log_start_offset(start).expect("delete records");
    assert_eq!(log.segment_count(), segments - 3);
    // Renamed, not gone: three segments' .log, .index and .timeindex.
    assert_eq!(files_ending(dir.path(), ".log.deleted").len(), 3);
    assert_eq!(files_ending(dir.path(), ".index.deleted").len(), 3);
    assert_eq!(log.pending_file_deletions(), 3);
    let readable = values(&log, start);
    assert_eq!(readable.len() as i64, log.log_end_offset() - start);
    // Before the delay nothing goes.
    clock.advance(9_999);
    assert_eq!(log.delete_expired_files().expect("delete"), 0);
    assert_eq!(files_ending(dir.path(), ".deleted").len(), 9);
    // A crash and restart in between: the leftovers are removed at open
    // and everything readable before is readable after.
    drop(log);
    let opts = LogOpenOptions {
        log_start_offset: start,
        ..LogOpenOptions::default()
    };
    let log = try_open(dir.path(), delayed_config(10_000), &clock, opts).expect("reopen");
    assert!(files_ending(dir.path(), ".deleted").is_empty());
    assert_eq!(log.log_start_offset(), start);
    assert_eq!(values(&log, start), readable);
    // Past the delay the files go; a clean (delay 0) removal is immediate.
    log.set_high_watermark(log.log_end_offset());
    let start2 = log.segment_base_offsets()[2];
    log.advance_log_start_offset(start2)
        .expect("delete records");
    assert_eq!(files_ending(dir.path(), ".log.deleted").len(), 2);
    clock.advance(10_000);
    assert_eq!(log.delete_expired_files().expect("delete"), 2);
    assert!(files_ending(dir.path(), ".deleted").is_empty());
    assert_eq!(log.pending_file_deletions(), 0);
    log.set_config(delayed_config(0));
    let start3 = log.segment_base_offsets()[1];
    log.advance_log_start_offset(start3)
        .expect("delete records");
    assert!(files_ending(dir.path(), ".deleted").is_empty());
    assert_eq!(
        values(&log, start3).len() as i64,
        log.log_end_offset() - start3
    );
}

#[test]
fn truncation_also_waits_and_the_manager_scheduler_deletes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let mut mc = crate::manager::ManagerConfig::new(dir.path());
    mc.clock = clock.clone();
    mc.default_config = delayed_config(5_000);
    let manager = crate::manager::LogManager::open(mc).expect("manager");
    let log = manager
        .get_or_create(&crate::TopicPartition::new("t", 0), delayed_config(5_000))
        .expect("log");
    fill(&log, &clock, 30);
    let keep = log.segment_base_offsets()[1];
    log.truncate_to(keep).expect("truncate");
    assert_eq!(log.log_end_offset(), keep);
    let pending = log.pending_file_deletions();
    assert!(pending > 0);
    manager.delete_expired_files();
    assert_eq!(log.pending_file_deletions(), pending);
    clock.advance(5_000);
    manager.delete_expired_files();
    assert_eq!(log.pending_file_deletions(), 0);
    assert!(files_ending(log.dir(), ".deleted").is_empty());
    assert_eq!(values(&log, 0).len() as i64, keep);
    manager.shutdown().expect("shutdown");
}

fn prealloc_config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 100,
        segment_index_bytes: 4096,
        preallocate: true,
        ..LogConfig::default()
    }
}

#[test]
fn preallocated_segments_read_roll_and_trim() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open(dir.path(), prealloc_config(), &clock);
    // A new log's first segment is created at full size.
    assert_eq!(file_len(dir.path(), 0), 4096);
    let mut b = batch(3, T0, "x");
    log.append_as_leader(&mut b, 0).expect("append");
    assert_eq!(file_len(dir.path(), 0), 4096);
    assert_eq!(log.size_in_bytes(), b.len() as u64);
    assert_eq!(values(&log, 0).len(), 3);
    // Fill past one segment: the sealed one is cut to its data, the new
    // active one is preallocated.
    fill(&log, &clock, 150);
    let bases = log.segment_base_offsets();
    assert!(bases.len() > 2);
    for w in bases.windows(2) {
        let (base, next) = (w[0], w[1]);
        let seg_size = log.read_segments()[&base].size();
        assert_eq!(file_len(dir.path(), base), seg_size, "sealed {base}");
        assert!(seg_size <= 4096);
        assert!(next > base);
    }
    let active = *bases.last().expect("active");
    assert_eq!(file_len(dir.path(), active), 4096);
    let all = values(&log, 0);
    assert_eq!(all.len() as i64, log.log_end_offset());
    // A clean close cuts the active segment too; reopening after a clean
    // shutdown needs no scan and finds the same records.
    log.flush().expect("flush");
    log.close().expect("close");
    assert_eq!(
        file_len(dir.path(), active),
        log.read_segments()[&active].size()
    );
    drop(log);
    let opts = LogOpenOptions {
        clean_shutdown: true,
        ..LogOpenOptions::default()
    };
    let log = try_open(dir.path(), prealloc_config(), &clock, opts).expect("reopen");
    assert_eq!(values(&log, 0), all);
    // Appends continue, and rolling preallocates the next segment again.
    fill(&log, &clock, 30);
    assert_eq!(values(&log, 0).len() as i64, log.log_end_offset());
    let last = *log.segment_base_offsets().last().expect("active");
    assert!(last > active);
    assert_eq!(file_len(dir.path(), last), 4096);
}

#[test]
fn preallocated_active_segment_recovers_after_a_crash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open(dir.path(), prealloc_config(), &clock);
    fill(&log, &clock, 25);
    let end = log.log_end_offset();
    let all = values(&log, 0);
    let active = *log.segment_base_offsets().last().expect("active");
    let data = log.read_segments()[&active].size();
    assert!(data > 0 && data < 4096);
    log.flush().expect("flush");
    let recovery_point = log.recovery_point();
    // The process dies: no close, no clean-shutdown marker. The active
    // file still ends in preallocated zeros.
    drop(log);
    assert_eq!(file_len(dir.path(), active), 4096);
    for opts in [
        LogOpenOptions {
            recovery_point,
            ..LogOpenOptions::default()
        },
        LogOpenOptions::default(),
    ] {
        let log = try_open(dir.path(), prealloc_config(), &clock, opts).expect("reopen");
        // The zeros were never taken for data: same records, same end, the
        // file cut to its data.
        assert_eq!(log.log_end_offset(), end);
        assert_eq!(values(&log, 0), all);
        assert_eq!(file_len(dir.path(), active), data);
        // Appends continue where the data ended.
        let mut b = batch(2, T0, "after");
        let info = log.append_as_leader(&mut b, 0).expect("append");
        assert_eq!(info.base_offset, end);
        let got = values(&log, end);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].1, b"after-0".to_vec());
        log.truncate_to(end).expect("undo");
        drop(log);
    }
}

#[test]
fn index_interval_bytes_spaces_the_offset_index() {
    for (interval, expect) in [(0u64, 19usize), (1_000, 3), (1 << 30, 0)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = Arc::new(ManualClock::new(T0));
        let config = LogConfig {
            index_interval_bytes: interval,
            ..LogConfig::default()
        };
        let log = open(dir.path(), config, &clock);
        let mut sizes = 0u64;
        for i in 0..20 {
            let mut b = batch(1, T0, &format!("{i:0>100}"));
            sizes += b.len() as u64;
            log.append_as_leader(&mut b, 0).expect("append");
        }
        let seg = log.active_segment();
        // An entry whenever more than `interval` bytes went by since the
        // last one (Kafka's LogSegment.append), never for the first batch.
        assert_eq!(
            seg.offset_index.len(),
            expect,
            "interval {interval}, {sizes} bytes"
        );
        // Lookups land on the right batch whatever the spacing.
        for offset in 0..20 {
            let got = values(&log, offset);
            assert_eq!(got[0].0, offset);
        }
    }
}

/// Bytes the file system allocated to segment `base`'s `.log` file.
fn allocated(dir: &Path, base: i64) -> u64 {
    use std::os::unix::fs::MetadataExt;
    log_file(dir, base).blocks() * 512
}

/// One batch of `n` records with 2 KiB values.
fn big_batch(n: usize, ts: i64) -> Vec<u8> {
    let mut b =
        sluice_protocol::record::BatchBuilder::new(sluice_protocol::record::Compression::None, ts);
    for i in 0..n {
        b.push(sluice_protocol::record::Record::new(
            None,
            Some(vec![b'a' + (i % 26) as u8; 2048]),
            ts,
        ));
    }
    b.build(0).expect("build")
}

/// Without `preallocate`, an append reserves blocks past the data (as far
/// again as the segment's size) while the file length stays the data's,
/// so readers and a recovery scan see no tail; sealing gives the reserved
/// blocks back, and so does sealing a segment that was active when the
/// process died, after the restart. (Where the file system cannot
/// reserve, only the lengths are checked.)
#[test]
fn appends_reserve_space_ahead_without_changing_the_file_length() {
    const SLACK: u64 = 16 * 1024;
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open(dir.path(), LogConfig::default(), &clock);
    let mut b = big_batch(50, T0);
    log.append_as_leader(&mut b, 0).expect("append");
    let data = b.len() as u64;
    assert_eq!(file_len(dir.path(), 0), data);
    let reserved = log.read_segments()[&0].reserved_end();
    let reserves = reserved != u64::MAX;
    if reserves {
        assert_eq!(reserved, 2 * data);
        assert!(allocated(dir.path(), 0) >= reserved / 4096 * 4096);
    }
    let first = values(&log, 0);
    assert_eq!(first.len(), 50);
    // Sealed by a roll: the blocks past the data go back.
    log.roll().expect("roll");
    assert_eq!(file_len(dir.path(), 0), data);
    assert!(allocated(dir.path(), 0) <= data + SLACK);
    // The process dies with blocks reserved past the active segment.
    let active = log.log_end_offset();
    let mut b = big_batch(50, T0);
    log.append_as_leader(&mut b, 0).expect("append");
    if reserves {
        assert!(allocated(dir.path(), active) >= 2 * data / 4096 * 4096);
    }
    let all = values(&log, 0);
    log.flush().expect("flush");
    let recovery_point = log.recovery_point();
    drop(log);
    let opts = LogOpenOptions {
        recovery_point,
        ..LogOpenOptions::default()
    };
    let log = try_open(dir.path(), LogConfig::default(), &clock, opts).expect("reopen");
    assert_eq!(values(&log, 0), all);
    assert_eq!(file_len(dir.path(), active), data);
    // Appends continue; sealing releases what the earlier run reserved.
    let mut b = big_batch(10, T0);
    log.append_as_leader(&mut b, 0).expect("append");
    let size = data + b.len() as u64;
    log.roll().expect("roll");
    assert_eq!(file_len(dir.path(), active), size);
    assert!(allocated(dir.path(), active) <= size + SLACK);
    assert_eq!(values(&log, 0).len(), 110);
}
