//! Compaction tests: latest value per key survives with its offset, in every
//! codec, across reopen, and through a crash at each step of the swap.

use std::collections::BTreeMap;
use std::sync::Arc;

use sluice_protocol::record::codec::decode_batch;
use sluice_protocol::record::{BatchBuilder, BatchIter, Compression, Record};

use super::*;
use crate::clock::{Clock, ManualClock};
use crate::config::{CleanupPolicy, LogConfig};
use crate::log::{LogOpenOptions, ReadLimit};
use crate::TopicPartition;

const T0: i64 = 1_700_000_000_000;
const HOUR: i64 = 3_600_000;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        index_interval_bytes: 256,
        segment_index_bytes: 4096,
        cleanup_policy: CleanupPolicy {
            delete: false,
            compact: true,
        },
        ..LogConfig::default()
    }
}

fn open(dir: &std::path::Path, clock: &Arc<ManualClock>) -> Log {
    Log::open(
        dir,
        TopicPartition::new("c", 0),
        config(),
        LogOpenOptions::default(),
        clock.clone(),
    )
    .expect("open")
}

/// key -> value written, in offset order; `None` value is a tombstone.
type Writes = Vec<(i64, String, Option<String>)>;

/// Appends `rounds` versions of `keys` keys, each batch in a rotating codec;
/// every 7th write is a tombstone.
fn write_versions(log: &Log, keys: usize, rounds: usize, ts: i64) -> Writes {
    let mut writes = Vec::new();
    let mut n = 0usize;
    for round in 0..rounds {
        let codec = Compression::ALL[round % Compression::ALL.len()];
        let mut b = BatchBuilder::new(codec, ts);
        let mut values = Vec::new();
        for k in 0..keys {
            let value = (n % 7 != 3).then(|| format!("k{k}-v{round}"));
            b.push(Record::new(
                Some(format!("k{k}").into_bytes()),
                value.clone().map(String::into_bytes),
                ts,
            ));
            values.push(value);
            n += 1;
        }
        let mut bytes = b.build(0).expect("build");
        let info = log.append_as_leader(&mut bytes, 0).expect("append");
        for (k, v) in values.into_iter().enumerate() {
            writes.push((info.base_offset + k as i64, format!("k{k}"), v));
        }
    }
    writes
}

fn read_all(log: &Log) -> Vec<(i64, String, Option<String>)> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    loop {
        let r = log
            .read(next, 1 << 20, ReadLimit::LogEnd, true)
            .expect("read");
        let Some(region) = r.region else { break };
        let bytes = region.read_to_vec().expect("bytes");
        let mut any = false;
        for b in BatchIter::new(&bytes) {
            let (_, h, raw) = b.expect("batch");
            sluice_protocol::record::batch::validate_crc(raw).expect("crc");
            for r in decode_batch(raw, 1 << 24).expect("decode").records {
                if r.record.offset >= next {
                    out.push((
                        r.record.offset,
                        String::from_utf8(r.record.key.expect("key")).expect("utf8"),
                        r.record.value.map(|v| String::from_utf8(v).expect("utf8")),
                    ));
                }
            }
            next = h.last_offset() + 1;
            any = true;
        }
        if !any {
            break;
        }
    }
    out
}

/// The expected survivors: below `end`, only the last write of each key
/// before `end` (the offset map covers the cleaned range only); everything
/// at or after `end` untouched.
fn expected(
    writes: &Writes,
    end: i64,
    drop_tombstones: bool,
) -> Vec<(i64, String, Option<String>)> {
    let mut latest: BTreeMap<&str, i64> = BTreeMap::new();
    for (o, k, _) in writes.iter().filter(|w| w.0 < end) {
        latest.insert(k, *o);
    }
    writes
        .iter()
        .filter(|(o, k, v)| {
            *o >= end || (latest[k.as_str()] == *o && !(drop_tombstones && v.is_none()))
        })
        .cloned()
        .collect()
}

#[test]
fn keeps_latest_per_key_with_original_offsets_in_every_codec() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open(dir.path(), &clock);
    let writes = write_versions(&log, 10, 40, T0);
    log.set_high_watermark(log.log_end_offset());
    let before = log.size_in_bytes();
    let range = needs_cleaning(&log, 0).expect("dirty enough");
    assert_eq!(range.dirty_ratio(), 1.0);
    let active_base = *log.segment_base_offsets().last().expect("segments");
    let stats = clean(&log, 0, &CleanerConfig::default())
        .expect("clean")
        .expect("something to clean");
    assert_eq!(
        stats.end, active_base,
        "the active segment is never cleaned"
    );
    assert!(stats.records_removed > 0);
    assert!(log.size_in_bytes() < before);
    let got = read_all(&log);
    // Tombstones are younger than delete.retention.ms: they stay.
    assert_eq!(got, expected(&writes, stats.end, false));
    // The result survives a reopen (indexes rebuilt for swapped segments).
    drop(log);
    let log = open(dir.path(), &clock);
    assert_eq!(read_all(&log), expected(&writes, stats.end, false));
    // Nothing dirty now: no second clean until new data arrives.
    assert!(needs_cleaning(&log, stats.end).is_none());
}

#[test]
fn tombstones_go_after_delete_retention() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0 + 48 * HOUR));
    let log = open(dir.path(), &clock);
    let writes = write_versions(&log, 5, 30, T0);
    log.set_high_watermark(log.log_end_offset());
    let stats = clean(&log, 0, &CleanerConfig::default())
        .expect("clean")
        .expect("cleaned");
    assert!(stats.tombstones_removed > 0);
    assert_eq!(read_all(&log), expected(&writes, stats.end, true));
}

#[test]
fn dirty_ratio_lag_and_high_watermark_are_honoured() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open(dir.path(), &clock);
    write_versions(&log, 100, 6, T0);
    log.roll().expect("roll");
    // Nothing below the high watermark yet.
    assert!(cleanable(&log, 0).is_none());
    log.set_high_watermark(log.log_end_offset());
    // Too young for min.compaction.lag.ms.
    log.set_config(LogConfig {
        min_compaction_lag_ms: HOUR,
        ..config()
    });
    assert!(cleanable(&log, 0).is_none());
    clock.advance(2 * HOUR);
    assert!(cleanable(&log, 0).is_some());
    log.set_config(config());
    let stats = clean(&log, 0, &CleanerConfig::default())
        .expect("clean")
        .expect("cleaned");
    // A little new dirty data is below the default 0.5 ratio.
    write_versions(&log, 5, 1, T0 + 2 * HOUR);
    log.roll().expect("roll");
    log.set_high_watermark(log.log_end_offset());
    let c = cleanable(&log, stats.end).expect("some dirty");
    assert!(c.dirty_ratio() < 0.5, "ratio {}", c.dirty_ratio());
    assert!(needs_cleaning(&log, stats.end).is_none());
    // Not for compact-less topics.
    log.set_config(LogConfig::default());
    assert!(cleanable(&log, 0).is_none());
}

#[test]
fn a_crash_at_any_step_of_the_swap_loses_nothing() {
    for at in [
        CrashPoint::AfterCleanedWritten,
        CrashPoint::AfterSwapCreated,
        CrashPoint::AfterSourcesDeleted,
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = Arc::new(ManualClock::new(T0));
        let log = open(dir.path(), &clock);
        let writes = write_versions(&log, 8, 40, T0);
        log.set_high_watermark(log.log_end_offset());
        let end = cleanable(&log, 0).expect("cleanable").end;
        let cfg = CleanerConfig {
            crash_at: Some(at),
            ..CleanerConfig::default()
        };
        assert!(clean(&log, 0, &cfg).is_err(), "{at:?}");
        drop(log); // the process "died"
        let log = open(dir.path(), &clock);
        let got = read_all(&log);
        // Either the first group was swapped in or not; both are valid:
        // the latest value of every key is there with its offset, and
        // every record at or after the cleaned range is untouched.
        let latest = expected(&writes, end, false);
        for w in &latest {
            assert!(got.contains(w), "{at:?}: lost {w:?}");
        }
        for g in &got {
            assert!(writes.contains(g), "{at:?}: invented {g:?}");
        }
        let offsets: Vec<i64> = got.iter().map(|g| g.0).collect();
        assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{at:?}: order");
        let leftovers: Vec<String> = std::fs::read_dir(dir.path())
            .expect("ls")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".swap") || n.ends_with(".cleaned") || n.ends_with(".deleted"))
            .collect();
        assert!(leftovers.is_empty(), "{at:?}: {leftovers:?}");
        // A full clean afterwards still gives exactly the latest values.
        log.set_high_watermark(log.log_end_offset());
        let stats = clean(&log, 0, &CleanerConfig::default())
            .expect("clean")
            .expect("cleaned");
        assert_eq!(read_all(&log), expected(&writes, stats.end, false));
    }
}

#[test]
fn max_compaction_lag_forces_a_clean_below_the_dirty_ratio() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open(dir.path(), &clock);
    let first = write_versions(&log, 100, 6, T0);
    log.roll().expect("roll");
    log.set_high_watermark(log.log_end_offset());
    let stats = clean(&log, 0, &CleanerConfig::default())
        .expect("clean")
        .expect("cleaned");
    // A little new dirty data, well below the dirty ratio.
    clock.set(T0 + 10);
    let mut writes = first;
    writes.extend(write_versions(&log, 5, 1, T0 + 10));
    log.roll().expect("roll");
    log.set_high_watermark(log.log_end_offset());
    let lagged = LogConfig {
        max_compaction_lag_ms: HOUR,
        file_delete_delay_ms: 1_000,
        ..config()
    };
    log.set_config(lagged);
    let c = cleanable(&log, stats.end).expect("some dirty");
    assert!(c.dirty_ratio() < 0.5, "ratio {}", c.dirty_ratio());
    assert!(needs_cleaning(&log, stats.end).is_none());
    assert_eq!(max_compaction_delay(&log, stats.end, clock.now_ms()), 0);
    // Once the oldest dirty batch is older than max.compaction.lag.ms the
    // log is cleaned whatever its ratio (Kafka's needCompactionNow).
    clock.set(T0 + 10 + HOUR + 5);
    assert_eq!(max_compaction_delay(&log, stats.end, clock.now_ms()), 5);
    let c = needs_cleaning(&log, stats.end).expect("overdue");
    assert!(c.dirty_ratio() < 0.5);
    let stats2 = clean(&log, stats.end, &CleanerConfig::default())
        .expect("clean")
        .expect("cleaned");
    assert_eq!(stats2.first_dirty, stats.end);
    assert!(stats2.records_removed > 0);
    let got = read_all(&log);
    assert_eq!(got, expected(&writes, stats2.end, false));
    // The replaced segments wait file.delete.delay.ms as `.deleted`.
    let deleted = |dir: &std::path::Path| {
        std::fs::read_dir(dir)
            .expect("ls")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".log.deleted"))
            .count()
    };
    assert!(deleted(dir.path()) > 0);
    clock.advance(1_000);
    log.delete_expired_files().expect("delete");
    assert_eq!(deleted(dir.path()), 0);
    assert_eq!(read_all(&log), got);
    // Nothing overdue any more.
    assert_eq!(max_compaction_delay(&log, stats2.end, clock.now_ms()), 0);
}

/// The `.log` files of the partition, oldest first.
fn segment_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("ls")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    files.sort();
    files
}

/// Every record of every batch that decodes; the raw bytes of those that do not.
fn read_tolerant(log: &Log) -> (Writes, Vec<Vec<u8>>) {
    let mut good = Vec::new();
    let mut bad = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let r = log
            .read(next, 1 << 24, ReadLimit::LogEnd, true)
            .expect("read");
        let bytes = r.region.expect("region").read_to_vec().expect("bytes");
        for b in BatchIter::new(&bytes) {
            let (_, h, raw) = b.expect("batch header");
            next = h.last_offset() + 1;
            match decode_batch(raw, 1 << 24) {
                Ok(d) if sluice_protocol::record::batch::validate_crc(raw).is_ok() => {
                    for r in d.records {
                        good.push((
                            r.record.offset,
                            String::from_utf8(r.record.key.expect("key")).expect("utf8"),
                            r.record.value.map(|v| String::from_utf8(v).expect("utf8")),
                        ));
                    }
                }
                _ => bad.push(raw.to_vec()),
            }
        }
    }
    (good, bad)
}

#[test]
fn an_undecodable_batch_is_kept_as_it_is_and_the_rest_compacted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open(dir.path(), &clock);
    let mut writes = write_versions(&log, 6, 12, T0);
    let at = log.log_end_offset();
    log.close().expect("close");
    drop(log);
    // A batch with a valid CRC whose records do not decode (it claims three
    // records and holds two), written straight into the last segment: the
    // produce path would refuse it, recovery only checks the CRC.
    let mut b = BatchBuilder::new(Compression::None, T0);
    b.push(Record::new(
        Some(b"k0".to_vec()),
        Some(b"lost?".to_vec()),
        T0,
    ));
    b.push(Record::new(
        Some(b"k1".to_vec()),
        Some(b"lost?".to_vec()),
        T0,
    ));
    let mut bad = b.build(at).expect("build");
    bad[23..27].copy_from_slice(&2i32.to_be_bytes()); // lastOffsetDelta
    bad[57..61].copy_from_slice(&3i32.to_be_bytes()); // recordsCount
    let crc = sluice_protocol::record::batch::compute_crc(&bad);
    bad[17..21].copy_from_slice(&crc.to_be_bytes());
    let last = segment_files(dir.path()).pop().expect("a segment");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&last)
        .expect("open segment");
    std::io::Write::write_all(&mut f, &bad).expect("write");
    drop(f);

    let log = open(dir.path(), &clock);
    assert_eq!(
        log.log_end_offset(),
        at + 3,
        "recovery keeps a CRC-valid batch"
    );
    for (o, k, v) in write_versions(&log, 6, 12, T0) {
        writes.push((o, k, v));
    }
    log.roll().expect("roll");
    log.set_high_watermark(log.log_end_offset());
    let stats = clean(&log, 0, &CleanerConfig::default())
        .expect("the pass survives the bad batch")
        .expect("cleaned");
    assert_eq!(stats.batches_skipped, 1);
    assert_eq!(stats.groups_skipped, 0);
    assert!(stats.records_removed > 0);
    assert_eq!(stats.end, log.log_end_offset());
    let (good, kept) = read_tolerant(&log);
    assert_eq!(kept, vec![bad.clone()], "kept byte for byte");
    assert_eq!(good, expected(&writes, stats.end, false));
    // And again after a reopen, and on the next pass.
    drop(log);
    let log = open(dir.path(), &clock);
    log.set_high_watermark(log.log_end_offset());
    clean(&log, 0, &CleanerConfig::default())
        .expect("second pass")
        .expect("cleaned");
    let (good, kept) = read_tolerant(&log);
    assert_eq!(kept, vec![bad]);
    assert_eq!(good, expected(&writes, stats.end, false));
}

#[test]
fn a_batch_with_a_bad_crc_keeps_its_group_and_the_rest_is_compacted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open(dir.path(), &clock);
    let mut writes = write_versions(&log, 6, 80, T0);
    // Flip the last byte of the first batch of the second segment, in
    // place while the log is open (bit rot below the recovery point:
    // nothing rescans it).
    let files = segment_files(dir.path());
    assert!(files.len() > 3, "{files:?}");
    let victim = files[1].clone();
    let mut data = std::fs::read(&victim).expect("read");
    let first = sluice_protocol::record::BatchHeader::parse(&data).expect("header");
    let at = first.total_size() - 1;
    data[at] ^= 0xff;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&victim)
        .expect("open segment");
    std::os::unix::fs::FileExt::write_all_at(&f, &data[at..=at], at as u64).expect("write");
    drop(f);

    writes.extend(write_versions(&log, 6, 1, T0));
    log.roll().expect("roll");
    log.set_high_watermark(log.log_end_offset());
    let before = log.size_in_bytes();
    let contents: Vec<(std::path::PathBuf, Vec<u8>)> = segment_files(dir.path())
        .into_iter()
        .map(|p| (p.clone(), std::fs::read(&p).expect("read")))
        .collect();
    let stats = clean(&log, 0, &CleanerConfig::default())
        .expect("the pass survives the bad batch")
        .expect("cleaned");
    assert_eq!((stats.batches_skipped, stats.groups_skipped), (1, 1));
    assert!(stats.records_removed > 0);
    assert!(log.size_in_bytes() < before);
    assert_eq!(std::fs::read(&victim).expect("still there"), data);
    let (good, kept) = read_tolerant(&log);
    assert_eq!(kept.len(), 1);
    // Outside the kept segment only the latest of each key is left; inside
    // it everything that was there still is.
    // The kept group: the victim and the segments after it left untouched
    // (a group holds contiguous segments that fit segment.bytes together).
    let untouched: Vec<bool> = contents
        .iter()
        .map(|(p, c)| std::fs::read(p).is_ok_and(|now| &now == c))
        .collect();
    let v = contents
        .iter()
        .position(|(p, _)| *p == victim)
        .expect("victim");
    let end_of_group = (v..contents.len())
        .find(|&i| !untouched[i])
        .map_or(i64::MAX, |i| {
            let name = contents[i]
                .0
                .file_stem()
                .expect("stem")
                .to_string_lossy()
                .into_owned();
            name.parse::<i64>().expect("base")
        });
    let kept_range = first.base_offset..end_of_group;
    let survivors = expected(&writes, stats.end, false);
    for g in &good {
        assert!(writes.contains(g), "invented {g:?}");
        assert!(
            survivors.contains(g) || kept_range.contains(&g.0),
            "not compacted: {g:?}"
        );
    }
    for s in &survivors {
        let in_bad_batch = (first.base_offset..=first.last_offset()).contains(&s.0);
        assert!(in_bad_batch || good.contains(s), "lost {s:?}");
    }
    for w in writes.iter().filter(|w| kept_range.contains(&w.0)) {
        let in_bad_batch = (first.base_offset..=first.last_offset()).contains(&w.0);
        assert!(in_bad_batch || good.contains(w), "kept group lost {w:?}");
    }
}

/// An idempotent producer's batch of `keys` records, sequence from `seq`.
fn producer_batch(pid: i64, seq: i32, keys: &[&str], value: &str) -> Vec<u8> {
    let producer = sluice_protocol::record::codec::ProducerInfo {
        producer_id: pid,
        producer_epoch: 2,
        base_sequence: seq,
    };
    let mut b = BatchBuilder::new(Compression::Lz4, T0).producer(producer, false);
    for k in keys {
        b.push(Record::new(
            Some(k.as_bytes().to_vec()),
            Some(value.as_bytes().to_vec()),
            T0,
        ));
    }
    b.build(0).expect("build")
}

/// Kafka's `isBatchLastRecordOfProducer`: the last batch of every tracked
/// producer stays (empty if all its records were superseded), earlier ones
/// go; the producer state rebuilt from the cleaned log is the same.
#[test]
fn compaction_keeps_each_producers_last_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open(dir.path(), &clock);
    let append = |b: &mut Vec<u8>| {
        log.append_as_leader_from(b, 0, crate::log::AppendOrigin::Client)
            .expect("append")
    };
    // Producer 1: two batches, both superseded later. Producer 2: one
    // batch whose second record survives.
    let p1_first = append(&mut producer_batch(1, 0, &["a", "b"], "p1"));
    let p1_last = append(&mut producer_batch(1, 2, &["a", "b", "c"], "p1"));
    let p2 = append(&mut producer_batch(2, 7, &["a", "z"], "p2"));
    for round in 0..30 {
        let mut b = BatchBuilder::new(Compression::None, T0);
        for k in ["a", "b", "c"] {
            b.push(Record::new(
                Some(k.as_bytes().to_vec()),
                Some(format!("plain-{round}-{}", "x".repeat(60)).into_bytes()),
                T0,
            ));
        }
        log.append_as_leader(&mut b.build(0).expect("build"), 0)
            .expect("plain");
    }
    log.set_high_watermark(log.log_end_offset());
    let before = log.producer_snapshot_offsets();
    let stats = clean(&log, 0, &CleanerConfig::default())
        .expect("clean")
        .expect("cleaned");
    assert!(stats.end > p2.last_offset);

    // The producers' batches as they are on disk now.
    let mut found = Vec::new();
    let mut next = 0;
    while next < stats.end {
        let r = log
            .read(next, 1 << 20, ReadLimit::LogEnd, true)
            .expect("read");
        let bytes = r.region.expect("region").read_to_vec().expect("bytes");
        for b in BatchIter::new(&bytes) {
            let (_, h, raw) = b.expect("batch");
            sluice_protocol::record::batch::validate_crc(raw).expect("crc");
            if h.producer_id >= 0 && h.last_offset() >= next {
                let keys: Vec<String> = decode_batch(raw, 1 << 20)
                    .expect("decode")
                    .records
                    .into_iter()
                    .map(|r| String::from_utf8(r.record.key.expect("key")).expect("utf8"))
                    .collect();
                found.push((
                    h.producer_id,
                    h.base_offset,
                    h.last_offset(),
                    h.base_sequence,
                    h.records_count,
                    keys,
                ));
            }
            next = next.max(h.last_offset() + 1);
        }
    }
    assert_eq!(
        found,
        vec![
            // All records superseded, kept empty: offsets and sequences stay.
            (1, p1_last.base_offset, p1_last.last_offset, 2, 0, vec![]),
            (
                2,
                p2.base_offset,
                p2.last_offset,
                7,
                1,
                vec!["z".to_string()]
            ),
        ],
        "producer 1's first batch ({}) is gone",
        p1_first.base_offset
    );
    // Snapshots of merged segments went with them.
    let after = log.producer_snapshot_offsets();
    let bases = log.segment_base_offsets();
    assert!(
        after.iter().all(|o| bases.contains(o) || *o > stats.end),
        "{after:?} {bases:?}"
    );
    assert!(after.len() <= before.len());

    // Rebuilt from the cleaned log alone (a crash, recovery point 0): the
    // same producer state; retries of the last batches are duplicates.
    drop(log);
    let log = open(dir.path(), &clock);
    assert_eq!(log.producer_load().snapshot, None);
    let p = log.producer_state(1).expect("producer 1");
    assert_eq!(
        (p.producer_epoch, p.last_seq(), p.last_data_offset()),
        (2, 4, p1_last.last_offset)
    );
    let info = log
        .append_as_leader_from(
            &mut producer_batch(1, 2, &["a", "b", "c"], "p1"),
            0,
            crate::log::AppendOrigin::Client,
        )
        .expect("retry");
    assert!(info.duplicate);
    assert_eq!(info.base_offset, p1_last.base_offset);
    assert_eq!(log.producer_state(2).map(|p| p.last_seq()), Some(8));
}
