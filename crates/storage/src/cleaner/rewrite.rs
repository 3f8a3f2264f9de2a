//! Rewriting segment groups and swapping them in.
//!
//! Per group of source segments (contiguous, together no larger than
//! `segment.bytes`):
//! 1. write the retained batches to `<base>.log.cleaned` and fsync it;
//! 2. under the append lock, check the sources are still in the log, rename
//!    `.log.cleaned` to `.log.swap` (from here the clean is committed);
//! 3. rename the sources to `.deleted` and unlink them;
//! 4. rename `.log.swap` to `.log`, open it and rebuild its indexes.
//!
//! A crash before 2 leaves a `.cleaned` file that opening deletes; a crash
//! after 2 leaves a `.swap` file that opening completes (it deletes every
//! segment the swap covers, then renames it). Either way the log is valid
//! and holds every latest record.
//!
//! Producer state (Kafka's `isBatchLastRecordOfProducer`): the batch
//! holding the last data offset of each producer the partition still
//! tracks (or, for a producer whose last entry is a marker, that marker)
//! is kept even when none of its records survive, as an empty batch with
//! the same producer id, epoch, sequence and offset range, so the producer
//! state rebuilt from the log still knows the producer's last sequence.
//! Snapshots of segments merged into another go with them.

use std::collections::HashMap;
use std::io::Write;

use crate::producer::LastRecord;
use std::sync::Arc;

use sluice_protocol::record::batch::{validate_crc, HEADER_LEN};
use sluice_protocol::record::codec::{assemble, BatchFields, ProducerInfo};

use super::{read_batch, CleanStats, Cleanable, CleanerConfig};
use crate::checkpoint::sync_dir;
use crate::config::LogConfig;
use crate::error::{IoContext, Result, StorageError};
use crate::log::Log;
use crate::segment::{segment_path, Segment, LOG_SUFFIX};

/// Where a simulated crash stops a clean (tests only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// `.log.cleaned` written and synced.
    AfterCleanedWritten,
    /// Renamed to `.log.swap`, sources untouched.
    AfterSwapCreated,
    /// Sources deleted, swap not yet renamed.
    AfterSourcesDeleted,
}

fn crash(config: &CleanerConfig, at: CrashPoint) -> Result<()> {
    if config.crash_at == Some(at) {
        return Err(StorageError::Io {
            path: format!("<simulated crash {at:?}>").into(),
            source: std::io::Error::other("simulated crash"),
        });
    }
    Ok(())
}

pub(super) fn clean_segments(
    log: &Log,
    range: &Cleanable,
    map: &HashMap<Vec<u8>, i64>,
    config: &CleanerConfig,
) -> Result<CleanStats> {
    let log_config = log.config();
    let now = log.now_ms();
    let delete_horizon = now.saturating_sub(log_config.delete_retention_ms);
    let sources: Vec<Arc<Segment>> = log
        .read_segments()
        .values()
        .filter(|s| s.base_offset < range.end)
        .cloned()
        .collect();
    let mut stats = CleanStats {
        first_dirty: range.first_dirty,
        end: range.end,
        segments_before: sources.len(),
        ..CleanStats::default()
    };
    for group in group_segments(&sources, log_config.segment_bytes) {
        let Some(headers) = group_headers(log, &group) else {
            stats.groups_skipped += 1;
            continue;
        };
        let before = stats.clone();
        stats.bytes_before += group.iter().map(|s| s.size()).sum::<u64>();
        let base = group[0].base_offset;
        // Kafka takes these per group, at the start of its cleaning.
        let last_records = log.last_records_of_active_producers();
        let cleaned = segment_path(log.dir(), base, LOG_SUFFIX, crate::log::CLEANED);
        let mut out = std::io::BufWriter::new(std::fs::File::create(&cleaned).at(&cleaned)?);
        let mut written = 0u64;
        let mut crc_failure = None;
        'segs: for (seg, headers) in group.iter().zip(headers) {
            for (pos, h) in headers {
                let bytes = seg.batch_bytes(pos, &h)?;
                // A batch whose CRC fails cannot go into the cleaned segment
                // (opening it would cut the segment there): the whole group
                // stays as it is.
                if let Err(e) = validate_crc(&bytes) {
                    crc_failure = Some((h, e));
                    break 'segs;
                }
                let kept = filter_batch(
                    log,
                    &log_config,
                    &bytes,
                    map,
                    &last_records,
                    delete_horizon,
                    &mut stats,
                )?;
                if let Some(kept) = kept {
                    out.write_all(&kept).at(&cleaned)?;
                    written += kept.len() as u64;
                }
            }
        }
        if let Some((h, e)) = crc_failure {
            drop(out);
            std::fs::remove_file(&cleaned).at(&cleaned)?;
            tracing::warn!(
                partition = %log.topic_partition(), offset = h.base_offset,
                last_offset = h.last_offset(), reason = %e,
                "cleaner skipped a batch it cannot read (CRC); its segment group is kept as it is"
            );
            stats = CleanStats {
                batches_skipped: before.batches_skipped + 1,
                groups_skipped: before.groups_skipped + 1,
                ..before
            };
            continue;
        }
        let file = out.into_inner().map_err(|e| StorageError::Io {
            path: cleaned.clone(),
            source: e.into_error(),
        })?;
        file.sync_all().at(&cleaned)?;
        drop(file);
        crash(config, CrashPoint::AfterCleanedWritten)?;
        let swapped = if written == 0 {
            // Nothing survives: drop the sources, oldest first, so a crash
            // midway leaves only newer records behind.
            std::fs::remove_file(&cleaned).at(&cleaned)?;
            remove_group(log, &group)?
        } else {
            swap_in(log, &group, base, written, config)?
        };
        if swapped {
            // Kafka's `replaceSegments`: snapshots of the segments that
            // are gone, not of the one now starting at `base`.
            let gone: Vec<i64> = group
                .iter()
                .map(|s| s.base_offset)
                .filter(|&b| written == 0 || b != base)
                .collect();
            log.delete_producer_snapshots(&gone)?;
        }
        if !swapped && written > 0 {
            std::fs::remove_file(&cleaned).at(&cleaned)?;
            tracing::info!(partition = %log.topic_partition(), "log changed during cleaning; group skipped");
        }
        stats.bytes_after += written;
    }
    stats.segments_after = log
        .read_segments()
        .keys()
        .filter(|&&b| b < range.end)
        .count();
    tracing::info!(
        partition = %log.topic_partition(),
        first_dirty = stats.first_dirty, end = stats.end,
        bytes_before = stats.bytes_before, bytes_after = stats.bytes_after,
        removed = stats.records_removed, skipped_batches = stats.batches_skipped,
        skipped_groups = stats.groups_skipped, "cleaned log"
    );
    Ok(stats)
}

/// The batch headers of every segment of a group, or `None` (reported)
/// when one segment's batches cannot be walked: that group stays as it is.
fn group_headers(
    log: &Log,
    group: &[Arc<Segment>],
) -> Option<Vec<Vec<(u64, sluice_protocol::record::BatchHeader)>>> {
    let mut out = Vec::with_capacity(group.len());
    for seg in group {
        match seg.batch_headers() {
            Ok(h) => out.push(h),
            Err(e) => {
                tracing::warn!(
                    partition = %log.topic_partition(), segment = seg.base_offset, error = %e,
                    "cleaner cannot walk this segment's batches; its group is left uncleaned"
                );
                return None;
            }
        }
    }
    Some(out)
}

/// Contiguous groups that fit one segment and 32-bit relative offsets.
fn group_segments(segs: &[Arc<Segment>], max_bytes: u64) -> Vec<Vec<Arc<Segment>>> {
    let mut groups: Vec<Vec<Arc<Segment>>> = Vec::new();
    let mut size = 0u64;
    for s in segs {
        let fits = groups.last().is_some_and(|g| {
            size + s.size() <= max_bytes
                && s.next_offset() - g[0].base_offset <= i64::from(i32::MAX)
        });
        if fits {
            if let Some(g) = groups.last_mut() {
                g.push(Arc::clone(s));
            }
            size += s.size();
        } else {
            groups.push(vec![Arc::clone(s)]);
            size = s.size();
        }
    }
    groups
}

/// Whether `h` is the batch the cleaner must keep for its producer.
fn is_last_of_producer(
    h: &sluice_protocol::record::BatchHeader,
    last_records: &HashMap<i64, LastRecord>,
) -> bool {
    if h.producer_id < 0 {
        return false;
    }
    last_records
        .get(&h.producer_id)
        .is_some_and(|r| match r.last_data_offset {
            Some(o) => h.last_offset() == o,
            None => h.is_control() && h.producer_epoch == r.producer_epoch,
        })
}

/// The header of `h` without records (Kafka's `writeEmptyHeader`):
/// uncompressed, no base timestamp, same offsets, producer fields, max
/// timestamp and flags.
fn empty_batch(h: &sluice_protocol::record::BatchHeader) -> Result<Vec<u8>> {
    const KEEP: i16 = 0x08 | 0x10 | 0x20; // timestamp type, transactional, control
    let fields = BatchFields {
        base_offset: h.base_offset,
        partition_leader_epoch: h.partition_leader_epoch,
        attributes: h.attributes & KEEP,
        last_offset_delta: h.last_offset_delta,
        base_timestamp: -1,
        max_timestamp: h.max_timestamp,
        producer: ProducerInfo {
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            base_sequence: h.base_sequence,
        },
        records_count: 0,
    };
    Ok(assemble(
        &fields,
        sluice_protocol::record::Compression::None,
        &[],
    )?)
}

/// The retained part of one batch: the same bytes when every record stays,
/// a rebuilt batch (same base offset, last offset delta and codec) when
/// some go, `None` when all go — unless it is a producer's last batch,
/// which stays as an empty batch. A batch that cannot be read is kept as it
/// is and reported.
fn filter_batch(
    log: &Log,
    config: &LogConfig,
    bytes: &[u8],
    map: &HashMap<Vec<u8>, i64>,
    last_records: &HashMap<i64, LastRecord>,
    delete_horizon: i64,
    stats: &mut CleanStats,
) -> Result<Option<Vec<u8>>> {
    let h = sluice_protocol::record::BatchHeader::parse(bytes)?;
    if h.is_control() {
        return Ok(Some(bytes.to_vec()));
    }
    let decoded = match read_batch(bytes, &h, config) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(
                partition = %log.topic_partition(), offset = h.base_offset,
                last_offset = h.last_offset(), reason = %e,
                "cleaner skipped a batch it cannot read; kept as it is"
            );
            stats.batches_skipped += 1;
            return Ok(Some(bytes.to_vec()));
        }
    };
    let total = decoded.records.len();
    stats.records_read += total as u64;
    let mut kept_raw = Vec::with_capacity(decoded.payload.len());
    let mut kept = 0i32;
    let mut max_ts = -1i64;
    for r in &decoded.records {
        let rec = &r.record;
        let Some(key) = &rec.key else {
            // A compacted topic cannot hold keyless records; Kafka drops them.
            stats.records_removed += 1;
            continue;
        };
        if map.get(key).is_some_and(|&latest| latest > rec.offset) {
            stats.records_removed += 1;
            continue;
        }
        if rec.value.is_none() && h.max_timestamp < delete_horizon {
            stats.records_removed += 1;
            stats.tombstones_removed += 1;
            continue;
        }
        kept_raw.extend_from_slice(&decoded.payload[r.raw.clone()]);
        kept += 1;
        max_ts = max_ts.max(rec.timestamp);
    }
    if kept == 0 {
        // An empty batch goes too, unless it holds a producer's last
        // sequence (Kafka's RETAIN_EMPTY / DELETE_EMPTY).
        if !is_last_of_producer(&h, last_records) {
            return Ok(None);
        }
        if total > 0 {
            return empty_batch(&h).map(Some);
        }
    }
    if kept as usize == total {
        return Ok(Some(bytes.to_vec()));
    }
    let max_timestamp = match h.timestamp_type() {
        sluice_protocol::record::TimestampType::LogAppendTime => h.max_timestamp,
        sluice_protocol::record::TimestampType::CreateTime => max_ts,
    };
    let fields = BatchFields {
        base_offset: h.base_offset,
        partition_leader_epoch: h.partition_leader_epoch,
        attributes: h.attributes,
        last_offset_delta: h.last_offset_delta,
        base_timestamp: h.base_timestamp,
        max_timestamp,
        producer: ProducerInfo {
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            base_sequence: h.base_sequence,
        },
        records_count: kept,
    };
    let rebuilt = assemble(&fields, h.compression()?, &kept_raw)?;
    debug_assert!(rebuilt.len() >= HEADER_LEN);
    Ok(Some(rebuilt))
}

fn still_there(log: &Log, group: &[Arc<Segment>]) -> bool {
    let segs = log.read_segments();
    group
        .iter()
        .all(|s| segs.get(&s.base_offset).is_some_and(|c| Arc::ptr_eq(c, s)))
}

fn remove_group(log: &Log, group: &[Arc<Segment>]) -> Result<bool> {
    let _w = log.writer();
    log.check_online()?;
    if !still_there(log, group) {
        return Ok(false);
    }
    log.remove_segments(group)?;
    Ok(true)
}

/// Steps 2-4 under the append lock. False when the sources are no longer
/// all in the log (retention or truncation got there first).
fn swap_in(
    log: &Log,
    group: &[Arc<Segment>],
    base: i64,
    written: u64,
    config: &CleanerConfig,
) -> Result<bool> {
    let _w = log.writer();
    log.check_online()?;
    if !still_there(log, group) {
        return Ok(false);
    }
    let dir = log.dir().to_path_buf();
    let cleaned = segment_path(&dir, base, LOG_SUFFIX, crate::log::CLEANED);
    let swap = segment_path(&dir, base, LOG_SUFFIX, crate::log::SWAP);
    std::fs::rename(&cleaned, &swap).at(&swap)?;
    sync_dir(&dir)?;
    crash(config, CrashPoint::AfterSwapCreated)?;
    log.remove_segments(group)?;
    crash(config, CrashPoint::AfterSourcesDeleted)?;
    let target = segment_path(&dir, base, LOG_SUFFIX, "");
    std::fs::rename(&swap, &target).at(&target)?;
    sync_dir(&dir)?;
    let settings = log.settings();
    let seg = Segment::open(&dir, base, settings, true, log.now_ms())
        .and_then(|s| {
            let c = log.config();
            s.recover(c.index_interval_bytes)?;
            s.seal()?;
            Ok(s)
        })
        .map_err(|e| log.go_offline(e))?;
    debug_assert_eq!(seg.size(), written);
    log.write_segments().insert(base, Arc::new(seg));
    Ok(true)
}
