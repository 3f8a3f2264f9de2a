//! Unit tests of the partition log.

use std::sync::Arc;

use sluice_protocol::record::codec::decode_batch;
use sluice_protocol::record::{BatchBuilder, Compression, Record};

use super::*;
use crate::clock::ManualClock;
use crate::log::{OffsetSpec, ReadLimit};

pub(crate) const T0: i64 = 1_700_000_000_000;

pub(crate) fn batch(n: usize, ts: i64, tag: &str) -> Vec<u8> {
    let mut b = BatchBuilder::new(Compression::None, ts);
    for i in 0..n {
        b.push(Record::new(
            Some(format!("k{i}").into_bytes()),
            Some(format!("{tag}-{i}").into_bytes()),
            ts + i as i64,
        ));
    }
    b.build(0).expect("build")
}

fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 100,
        segment_index_bytes: 4096,
        ..LogConfig::default()
    }
}

pub(crate) fn try_open(
    dir: &std::path::Path,
    config: LogConfig,
    clock: &Arc<ManualClock>,
    opts: LogOpenOptions,
) -> Result<Log> {
    Log::open(
        dir,
        TopicPartition::new("t", 0),
        config,
        opts,
        clock.clone(),
    )
}

pub(crate) fn open(dir: &std::path::Path, config: LogConfig, clock: &Arc<ManualClock>) -> Log {
    try_open(dir, config, clock, LogOpenOptions::default()).expect("open")
}

pub(crate) fn values(log: &Log, from: i64) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut next = from;
    loop {
        let r = log
            .read(next, 1 << 20, ReadLimit::LogEnd, true)
            .expect("read");
        let Some(region) = r.region else { break };
        let bytes = region.read_to_vec().expect("bytes");
        let mut it = sluice_protocol::record::BatchIter::new(&bytes);
        let mut progressed = false;
        for b in it.by_ref() {
            let (_, h, raw) = b.expect("batch");
            for r in decode_batch(raw, 1 << 24).expect("decode").records {
                if r.record.offset >= next {
                    out.push((r.record.offset, r.record.value.clone().unwrap_or_default()));
                }
            }
            next = h.last_offset() + 1;
            progressed = true;
        }
        if !progressed {
            break;
        }
    }
    out
}

#[test]
fn append_assigns_offsets_and_reads_back_across_rolls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open(dir.path(), small_config(), &clock);
    for i in 0..50 {
        let mut b = batch(3, T0 + i, &format!("b{i}"));
        let info = log.append_as_leader(&mut b, 4).expect("append");
        assert_eq!(info.base_offset, i * 3);
        assert_eq!(info.last_offset, i * 3 + 2);
        assert_eq!(info.batches[0].partition_leader_epoch, 4);
    }
    assert_eq!(log.log_end_offset(), 150);
    assert!(log.segment_count() > 3, "segments: {}", log.segment_count());
    let vals = values(&log, 0);
    assert_eq!(vals.len(), 150);
    assert_eq!(vals[31].0, 31);
    assert_eq!(vals[31].1, b"b10-1");
    // Reads starting mid-batch start at the batch holding the offset.
    let r = log.read(31, 10, ReadLimit::LogEnd, true).expect("read");
    let region = r.region.expect("region");
    let bytes = region.read_to_vec().expect("bytes");
    let h = sluice_protocol::record::BatchHeader::parse(&bytes).expect("header");
    assert_eq!(h.base_offset, 30);
    assert_eq!(bytes.len(), h.total_size(), "min one batch returned whole");
    // Out of range.
    assert!(matches!(
        log.read(151, 10, ReadLimit::LogEnd, true),
        Err(StorageError::OffsetOutOfRange { .. })
    ));
    assert!(log
        .read(150, 10, ReadLimit::LogEnd, true)
        .expect("at end")
        .region
        .is_none());
    // The high watermark bounds consumer reads.
    log.set_high_watermark(30);
    assert!(log
        .read(30, 1 << 20, ReadLimit::HighWatermark, true)
        .expect("at hw")
        .region
        .is_none());
    let r = log
        .read(0, 1 << 20, ReadLimit::HighWatermark, true)
        .expect("below hw");
    let bytes = r.region.expect("region").read_to_vec().expect("bytes");
    let last = sluice_protocol::record::BatchIter::new(&bytes)
        .map(|b| b.expect("batch").1.last_offset())
        .max();
    assert!(last.expect("some") < 30);
}

#[test]
fn corrupt_batches_are_rejected_and_nothing_is_appended() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open(dir.path(), LogConfig::default(), &clock);
    let mut good = batch(2, T0, "x");
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 1] ^= 1;
    let mut two = good.clone();
    two.extend_from_slice(&bad);
    assert!(matches!(
        log.append_as_leader(&mut two, 0),
        Err(StorageError::Corrupt(_))
    ));
    let mut short = good[..good.len() - 3].to_vec();
    assert!(log.append_as_leader(&mut short, 0).is_err());
    let mut magic1 = good.clone();
    magic1[16] = 1;
    assert!(log.append_as_leader(&mut magic1, 0).is_err());
    assert!(log.append_as_leader(&mut Vec::new(), 0).is_err());
    assert_eq!(log.log_end_offset(), 0);
    assert_eq!(log.size_in_bytes(), 0);
    log.append_as_leader(&mut good, 0).expect("good batch");
    assert_eq!(log.log_end_offset(), 2);
    // Too large for max.message.bytes.
    log.set_config(LogConfig {
        max_message_bytes: 10,
        ..LogConfig::default()
    });
    assert!(matches!(
        log.append_as_leader(&mut batch(1, T0, "y"), 0),
        Err(StorageError::RecordTooLarge { .. })
    ));
    // Timestamps too far in the future.
    log.set_config(LogConfig::default());
    assert!(matches!(
        log.append_as_leader(&mut batch(1, T0 + 2 * 3_600_000, "y"), 0),
        Err(StorageError::RecordErrors {
            kind: crate::error::RecordErrorKind::InvalidTimestamp,
            ..
        })
    ));
}

#[test]
fn log_append_time_is_stamped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let config = LogConfig {
        message_timestamp_type: crate::config::TimestampType::LogAppendTime,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config, &clock);
    let info = log
        .append_as_leader(&mut batch(3, 5, "a"), 0)
        .expect("append");
    assert_eq!(info.log_append_time, T0);
    let r = log.read(0, 1 << 20, ReadLimit::LogEnd, true).expect("read");
    let bytes = r.region.expect("region").read_to_vec().expect("bytes");
    let d = decode_batch(&bytes, 1 << 20).expect("valid crc and records");
    assert!(d.records.iter().all(|r| r.record.timestamp == T0));
}

#[test]
fn list_offsets_by_time_and_max_timestamp() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0 + 1_000_000));
    let log = open(dir.path(), small_config(), &clock);
    for i in 0..40i64 {
        // Batch i holds timestamps T0 + 100 i .. T0 + 100 i + 1.
        log.append_as_leader(&mut batch(2, T0 + 100 * i, "v"), 0)
            .expect("append");
    }
    // A late batch with an older timestamp does not move the max.
    log.append_as_leader(&mut batch(1, T0, "old"), 0)
        .expect("append");
    let at = |ts| {
        log.fetch_offset(OffsetSpec::Timestamp(ts))
            .expect("lookup")
            .map(|t| t.offset)
    };
    assert_eq!(at(T0 - 5), Some(0));
    assert_eq!(at(T0 + 1), Some(1));
    assert_eq!(at(T0 + 2), Some(2));
    assert_eq!(at(T0 + 1_001), Some(21));
    assert_eq!(at(T0 + 3_901), Some(79));
    assert_eq!(at(T0 + 3_902), None);
    let max = log
        .fetch_offset(OffsetSpec::MaxTimestamp)
        .expect("max")
        .expect("some");
    assert_eq!((max.offset, max.timestamp), (79, T0 + 3_901));
    assert_eq!(
        log.fetch_offset(OffsetSpec::Earliest)
            .expect("e")
            .map(|t| t.offset),
        Some(0)
    );
    assert_eq!(
        log.fetch_offset(OffsetSpec::Latest)
            .expect("l")
            .map(|t| t.offset),
        Some(81)
    );
}

#[test]
fn reopen_after_clean_close_and_after_crash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    {
        let log = open(dir.path(), small_config(), &clock);
        for i in 0..30 {
            log.append_as_leader(&mut batch(2, T0 + i, "a"), 1)
                .expect("append");
        }
        log.close().expect("close");
    }
    let opts = LogOpenOptions {
        clean_shutdown: true,
        recovery_point: 60,
        ..LogOpenOptions::default()
    };
    let log = try_open(dir.path(), small_config(), &clock, opts).expect("reopen clean");
    assert_eq!(log.log_end_offset(), 60);
    assert_eq!(values(&log, 0).len(), 60);
    assert_eq!(log.leader_epochs(), vec![(1, 0)]);
    for i in 0..5 {
        log.append_as_leader(&mut batch(2, T0 + 100 + i, "b"), 2)
            .expect("append");
    }
    let active = log.active_segment().log_path();
    drop(log); // no close: a crash
               // Tear the tail: cut the last batch in half.
    let len = std::fs::metadata(&active).expect("meta").len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&active)
        .expect("open");
    f.set_len(len - 20).expect("tear");
    let log = open(dir.path(), small_config(), &clock);
    assert_eq!(log.log_end_offset(), 68);
    assert_eq!(values(&log, 0).len(), 68);
    assert_eq!(log.leader_epochs(), vec![(1, 0), (2, 60)]);
}

#[test]
fn missing_and_corrupt_indexes_are_rebuilt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    {
        let log = open(dir.path(), small_config(), &clock);
        for i in 0..30 {
            log.append_as_leader(&mut batch(2, T0 + i, "a"), 0)
                .expect("append");
        }
        log.close().expect("close");
    }
    let first_index = dir.path().join("00000000000000000000.index");
    let first_time = dir.path().join("00000000000000000000.timeindex");
    assert!(std::fs::metadata(&first_index).expect("meta").len() > 0);
    std::fs::remove_file(&first_index).expect("rm");
    std::fs::write(&first_time, [1u8; 13]).expect("garble");
    let opts = LogOpenOptions {
        clean_shutdown: true,
        ..LogOpenOptions::default()
    };
    let log = try_open(dir.path(), small_config(), &clock, opts).expect("reopen");
    assert!(std::fs::metadata(&first_index).expect("meta").len() > 0);
    assert_eq!(std::fs::metadata(&first_time).expect("meta").len() % 12, 0);
    assert_eq!(values(&log, 0).len(), 60);
    assert_eq!(
        log.fetch_offset(OffsetSpec::Timestamp(T0 + 5))
            .expect("lookup")
            .map(|t| t.offset),
        Some(9)
    );
}

/// A clean restart trusts sane indexes: no segment is scanned, so a record
/// whose bytes rotted in an old segment (batch CRC no longer matches) is not
/// noticed and nothing is truncated, as in Kafka (only recovery past the
/// recovery point and index rebuilds read batches).
#[test]
fn clean_restart_does_not_scan_segments_with_sane_indexes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    {
        let log = open(dir.path(), small_config(), &clock);
        for i in 0..30 {
            log.append_as_leader(&mut batch(2, T0 + i, "a"), 0)
                .expect("append");
        }
        log.close().expect("close");
    }
    let first = dir.path().join("00000000000000000000.log");
    let first_time = dir.path().join("00000000000000000000.timeindex");
    assert!(
        std::fs::metadata(&first_time).expect("meta").len() > 0,
        "the first segment has time index entries"
    );
    let mut bytes = std::fs::read(&first).expect("read");
    let len = bytes.len();
    bytes[len - 3] ^= 0xff; // a record byte of the segment's last batch
    std::fs::write(&first, &bytes).expect("rot");
    let segments = {
        let opts = LogOpenOptions {
            clean_shutdown: true,
            recovery_point: 60,
            ..LogOpenOptions::default()
        };
        let log = try_open(dir.path(), small_config(), &clock, opts).expect("reopen");
        assert_eq!(log.log_end_offset(), 60);
        assert_eq!(values(&log, 0).len(), 60);
        log.segment_count()
    };
    assert_eq!(std::fs::metadata(&first).expect("meta").len(), len as u64);
    assert!(segments >= 3);
}

/// Corruption found while rebuilding the index of a segment below the
/// recovery point truncates that segment only (Kafka's `LogLoader`): the
/// segments after it and their records stay, after a clean shutdown and
/// after a crash whose recovery point lies past the corrupt segment.
#[test]
fn corrupt_flushed_segment_truncates_only_itself() {
    for clean_shutdown in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = Arc::new(ManualClock::new(T0));
        {
            let log = open(dir.path(), small_config(), &clock);
            for i in 0..30 {
                log.append_as_leader(&mut batch(2, T0 + i, "a"), 0)
                    .expect("append");
            }
            log.close().expect("close");
        }
        let mut bases: Vec<i64> = std::fs::read_dir(dir.path())
            .expect("ls")
            .filter_map(|e| {
                let name = e.expect("entry").file_name().to_string_lossy().into_owned();
                name.strip_suffix(".log").and_then(|b| b.parse().ok())
            })
            .collect();
        bases.sort_unstable();
        assert!(bases.len() >= 3, "{bases:?}");
        // The second segment: drop its index (so it is rebuilt) and flip a
        // byte in the payload of its last batch (so the rebuild finds a
        // CRC mismatch there).
        let victim = bases[1];
        let next = bases[2];
        let seg_log = dir.path().join(format!("{victim:020}.log"));
        std::fs::remove_file(dir.path().join(format!("{victim:020}.index"))).expect("rm index");
        let mut bytes = std::fs::read(&seg_log).expect("read");
        let len = bytes.len();
        bytes[len - 3] ^= 0xff;
        std::fs::write(&seg_log, &bytes).expect("corrupt");
        let opts = LogOpenOptions {
            clean_shutdown,
            recovery_point: 60,
            ..LogOpenOptions::default()
        };
        let log = try_open(dir.path(), small_config(), &clock, opts).expect("reopen");
        // Every segment is still there, the log end did not move.
        assert_eq!(log.segment_count(), bases.len(), "clean={clean_shutdown}");
        assert_eq!(log.log_end_offset(), 60);
        let got = values(&log, 0);
        let offsets: Vec<i64> = got.iter().map(|(o, _)| *o).collect();
        // The victim lost its last batch (two records), nothing else did.
        let lost: Vec<i64> = (next - 2..next).collect();
        let expected: Vec<i64> = (0..60).filter(|o| !lost.contains(o)).collect();
        assert_eq!(offsets, expected, "clean={clean_shutdown}");
        assert!(std::fs::metadata(&seg_log).expect("meta").len() < len as u64);
        // Reads across the gap continue in the next segment.
        let r = log
            .read(next - 2, 1 << 20, ReadLimit::LogEnd, true)
            .expect("read in the gap");
        assert!(r.region.is_some());
        // Appends continue at the log end.
        log.append_as_leader(&mut batch(1, T0 + 100, "b"), 0)
            .expect("append");
        assert_eq!(log.log_end_offset(), 61);
    }
}

#[test]
fn retention_by_size_time_and_log_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open(dir.path(), small_config(), &clock);
    for i in 0..40 {
        log.append_as_leader(&mut batch(2, T0 + i, "a"), 0)
            .expect("append");
    }
    let segs = log.segment_count();
    assert!(segs >= 3, "segments: {segs}");
    // Nothing expires yet.
    assert_eq!(log.delete_old_segments().expect("retention"), 0);
    // Size: keep at most ~2 KiB.
    log.set_config(LogConfig {
        retention_bytes: 2048,
        ..small_config()
    });
    let deleted = log.delete_old_segments().expect("retention");
    assert!(deleted > 0);
    assert!(log.size_in_bytes() <= 2048 + 1024);
    let start = log.log_start_offset();
    assert_eq!(start, log.segment_base_offsets()[0]);
    assert!(log.read(start - 1, 100, ReadLimit::LogEnd, true).is_err());
    // Time: everything but the active segment.
    log.set_config(small_config());
    clock.advance(8 * 24 * 3600 * 1000);
    log.delete_old_segments().expect("retention");
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.log_end_offset(), 80);
    // DeleteRecords.
    log.set_high_watermark(80);
    log.advance_log_start_offset(79).expect("advance");
    assert_eq!(log.log_start_offset(), 79);
    assert!(log.advance_log_start_offset(81).is_err());
    assert_eq!(values(&log, 79).len(), 1);
    // Deleted segment files are gone.
    let logs = std::fs::read_dir(dir.path())
        .expect("ls")
        .filter(|e| {
            e.as_ref()
                .map(|e| e.file_name().to_string_lossy().ends_with(".log"))
                .unwrap_or(false)
        })
        .count();
    assert_eq!(logs, 1);
}

#[test]
fn truncate_to_removes_the_tail_and_appends_continue() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open(dir.path(), small_config(), &clock);
    for i in 0..30 {
        log.append_as_leader(&mut batch(2, T0 + i, "a"), i as i32 / 10)
            .expect("append");
    }
    log.set_high_watermark(60);
    log.truncate_to(24).expect("truncate");
    assert_eq!(log.log_end_offset(), 24);
    assert_eq!(log.high_watermark(), 24);
    assert_eq!(log.leader_epochs(), vec![(0, 0), (1, 20)]);
    assert_eq!(values(&log, 0).len(), 24);
    let info = log
        .append_as_leader(&mut batch(2, T0, "b"), 3)
        .expect("append");
    assert_eq!(info.base_offset, 24);
    assert_eq!(values(&log, 0).len(), 26);
    // Offset 5 sits inside the batch [4, 5]: the batch goes whole.
    log.truncate_to(5).expect("truncate into first segment");
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.log_end_offset(), 4);
    log.truncate_fully_and_start_at(100).expect("full");
    assert_eq!(log.log_start_offset(), 100);
    assert_eq!(log.log_end_offset(), 100);
    let info = log
        .append_as_leader(&mut batch(1, T0, "c"), 3)
        .expect("append");
    assert_eq!(info.base_offset, 100);
}

#[test]
fn roll_on_segment_ms_and_explicit_roll() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let config = LogConfig {
        segment_ms: 1000,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config, &clock);
    log.append_as_leader(&mut batch(1, T0, "a"), 0)
        .expect("append");
    clock.advance(500);
    log.append_as_leader(&mut batch(1, T0 + 500, "a"), 0)
        .expect("append");
    assert_eq!(log.segment_count(), 1);
    clock.advance(600);
    log.append_as_leader(&mut batch(1, T0 + 1100, "a"), 0)
        .expect("append");
    assert_eq!(log.segment_base_offsets(), vec![0, 2]);
    log.roll().expect("roll");
    log.roll().expect("roll of empty active is a no-op");
    assert_eq!(log.segment_base_offsets(), vec![0, 2, 3]);
}

#[test]
fn foreign_files_are_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    std::fs::write(dir.path().join("junk.log"), b"hello").expect("write");
    let e = try_open(
        dir.path(),
        LogConfig::default(),
        &clock,
        LogOpenOptions::default(),
    )
    .expect_err("bad name");
    assert!(e.to_string().contains("junk.log"), "{e}");
    std::fs::remove_file(dir.path().join("junk.log")).expect("rm");
    let p = dir.path().join("00000000000000000000.log");
    std::fs::write(&p, b"this is not a kafka segment at all, it is text").expect("write");
    let e = try_open(
        dir.path(),
        LogConfig::default(),
        &clock,
        LogOpenOptions::default(),
    )
    .expect_err("foreign content");
    assert!(e.to_string().contains("00000000000000000000.log"), "{e}");
}

#[test]
fn full_index_and_offset_overflow_roll_the_segment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    // Room for 3 offset entries and 2 time entries; an entry per batch.
    let config = LogConfig {
        segment_index_bytes: 24,
        index_interval_bytes: 0,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config, &clock);
    for i in 0..12 {
        log.append_as_leader(&mut batch(1, T0 + i, "x"), 0)
            .expect("append");
    }
    assert!(log.segment_count() >= 3, "{:?}", log.segment_base_offsets());
    assert_eq!(values(&log, 0).len(), 12);
    let seg = log.active_segment();
    assert!(seg.can_hold_offset(seg.base_offset + i64::from(i32::MAX)));
    assert!(!seg.can_hold_offset(seg.base_offset + i64::from(i32::MAX) + 1));
}

#[test]
fn flush_messages_moves_the_recovery_point() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let config = LogConfig {
        flush_messages: 4,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config, &clock);
    log.append_as_leader(&mut batch(3, T0, "x"), 0)
        .expect("append");
    assert_eq!(log.recovery_point(), 0, "below flush.messages: OS decides");
    log.append_as_leader(&mut batch(3, T0, "x"), 0)
        .expect("append");
    assert_eq!(log.recovery_point(), 6);
    log.append_as_leader(&mut batch(1, T0, "x"), 0)
        .expect("append");
    log.flush().expect("explicit flush");
    assert_eq!(log.recovery_point(), 7);
}

#[test]
fn segment_ms_compares_record_time_not_wall_time() {
    // Records stamped a year ago, appended now: Kafka measures segment age
    // from the first batch's timestamp to the incoming batch's, so these do
    // not roll a segment per batch.
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let config = LogConfig {
        segment_ms: 1000,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config, &clock);
    let old = T0 - 365 * 24 * 3_600_000;
    for i in 0..5 {
        log.append_as_leader(&mut batch(1, old + i * 100, "a"), 0)
            .expect("append");
    }
    assert_eq!(log.segment_count(), 1);
    log.append_as_leader(&mut batch(1, old + 1_500, "a"), 0)
        .expect("append");
    assert_eq!(
        log.segment_count(),
        2,
        "rolled once the batches span segment.ms"
    );
}

#[test]
fn truncate_prefix_moves_the_start_and_ignores_retention() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open(dir.path(), small_config(), &clock);
    for i in 0..40 {
        log.append_as_leader(&mut batch(2, T0 + i, "a"), 0)
            .expect("append");
    }
    log.set_high_watermark(log.log_end_offset());
    let bases = log.segment_base_offsets();
    assert!(bases.len() >= 4, "{bases:?}");
    // Far past retention.ms, but truncate_prefix_to never applies it.
    clock.advance(30 * 24 * 3600 * 1000);
    let cut = bases[2] + 1;
    assert_eq!(log.truncate_prefix_to(cut).expect("truncate"), 2);
    assert_eq!(log.log_start_offset(), cut);
    assert_eq!(log.segment_base_offsets(), bases[2..].to_vec());
    assert_eq!(values(&log, cut).len() as i64, 80 - cut);
    assert!(log.read(cut - 1, 100, ReadLimit::LogEnd, true).is_err());
    // Never backwards, never past the high watermark, never the active one.
    assert_eq!(log.truncate_prefix_to(1).expect("no-op"), 0);
    assert_eq!(log.log_start_offset(), cut);
    assert!(log.truncate_prefix_to(81).is_err());
    log.truncate_prefix_to(80).expect("to the end");
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.log_end_offset(), 80);
}

#[test]
fn snapshot_files_in_a_partition_folder_are_left_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    {
        let log = open(dir.path(), small_config(), &clock);
        log.append_as_leader(&mut batch(2, T0, "a"), 0)
            .expect("append");
        log.close().expect("close");
    }
    let names = [
        "00000000000000000002-0000000000.checkpoint",
        "00000000000000000002-0000000000.checkpoint.part",
        "00000000000000000001-0000000000.checkpoint.deleted",
        "00000000000000000001-0000000000.checkpoint.corrupt",
    ];
    for n in names {
        std::fs::write(dir.path().join(n), b"snapshot").expect("write");
    }
    let log = open(dir.path(), small_config(), &clock);
    assert_eq!(log.log_end_offset(), 2);
    for n in names {
        assert!(dir.path().join(n).exists(), "{n}");
    }
}

/// The raw batches of `log` from `from` to its end, as a fetch reads them.
fn raw_from(log: &Log, from: i64) -> Vec<u8> {
    let r = log
        .read(from, 1 << 20, ReadLimit::LogEnd, true)
        .expect("read");
    r.region
        .map(|region| region.read_to_vec().expect("bytes"))
        .unwrap_or_default()
}

#[test]
fn a_follower_keeps_the_leaders_offsets_epochs_and_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let leader = open(&dir.path().join("leader"), small_config(), &clock);
    let follower = open(&dir.path().join("follower"), small_config(), &clock);
    for i in 0..12 {
        leader
            .append_as_leader(&mut batch(2, T0 + i, "a"), i as i32 / 5)
            .expect("append");
    }
    // Fetched in two pieces (the second after a roll on the leader).
    let first = raw_from(&leader, 0);
    let info = follower.append_as_follower(&first).expect("follow");
    assert_eq!(info.base_offset, 0);
    let mut at = follower.log_end_offset();
    while at < leader.log_end_offset() {
        follower
            .append_as_follower(&raw_from(&leader, at))
            .expect("follow more");
        at = follower.log_end_offset();
    }
    assert_eq!(follower.log_end_offset(), 24);
    assert_eq!(follower.leader_epochs(), leader.leader_epochs());
    assert_eq!(follower.leader_epochs(), vec![(0, 0), (1, 10), (2, 20)]);
    assert_eq!(values(&follower, 0), values(&leader, 0));
    assert_eq!(raw_from(&follower, 0), raw_from(&leader, 0));

    // Records it already has are refused: it must truncate first.
    match follower.append_as_follower(&raw_from(&leader, 20)) {
        Err(StorageError::UnexpectedAppendOffset { first, log_end, .. }) => {
            assert_eq!((first, log_end), (20, 24));
        }
        other => panic!("expected UnexpectedAppendOffset, got {other:?}"),
    }
    // A damaged batch is refused whole.
    leader
        .append_as_leader(&mut batch(2, T0, "b"), 3)
        .expect("append");
    let mut damaged = raw_from(&leader, 24);
    let last = damaged.len() - 1;
    damaged[last] ^= 0xff;
    assert!(matches!(
        follower.append_as_follower(&damaged),
        Err(StorageError::Corrupt(_))
    ));
    assert_eq!(follower.log_end_offset(), 24);
    // After truncating, the follower takes the leader's tail again; the
    // epoch cache loses the truncated epochs and learns the new one.
    follower.truncate_to(16).expect("truncate");
    assert_eq!(follower.leader_epochs(), vec![(0, 0), (1, 10)]);
    while follower.log_end_offset() < leader.log_end_offset() {
        let at = follower.log_end_offset();
        follower
            .append_as_follower(&raw_from(&leader, at))
            .expect("catch up");
    }
    assert_eq!(
        follower.leader_epochs(),
        vec![(0, 0), (1, 10), (2, 20), (3, 24)]
    );
    assert_eq!(values(&follower, 0), values(&leader, 0));
    // Nothing fetched, nothing appended.
    let empty = follower.append_as_follower(&[]).expect("empty");
    assert_eq!(empty.record_count, 0);
    assert_eq!(follower.log_end_offset(), 26);
}
