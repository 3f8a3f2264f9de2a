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
//! Snapshots of segments merged into another go with them. The last batch
//! of a cleaning round stays too, empty if need be (Kafka keeps it so the
//! last offset below the uncleaned part is not lost).
//!
//! Transactions (`txn`): batches of aborted transactions go; a marker
//! whose transaction has no data left is stamped with a delete horizon on
//! one clean and removed by a clean after it. The cleaned segment's
//! `.txnindex` holds the entries of the ABORT markers it keeps: written as
//! `<base>.txnindex.cleaned` with the `.log.cleaned` file, renamed in
//! right after the `.log` (a crash in between loses entries whose data
//! this clean already removed, nothing a reader needs).

use std::collections::HashMap;
use std::io::Write;

use crate::producer::LastRecord;
use std::sync::Arc;

use sluice_protocol::record::batch::{validate_crc, HEADER_LEN};
use sluice_protocol::record::codec::{assemble, BatchFields, ProducerInfo};

use super::txn::CleanedTxns;
use super::{read_batch, CleanStats, Cleanable, CleanerConfig};
use crate::checkpoint::sync_dir;
use crate::config::LogConfig;
use crate::error::{IoContext, Result, StorageError};
use crate::log::Log;
use crate::segment::{segment_path, Segment, LOG_SUFFIX};
use crate::txn_index::{txn_index_path, TxnIndex};

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

/// What decides a batch's fate besides the offset map.
struct Filter<'a> {
    config: &'a LogConfig,
    last_records: &'a HashMap<i64, LastRecord>,
    now: i64,
    /// Tombstones older than this go.
    delete_horizon: i64,
    /// The first uncleanable offset of this round (Kafka's
    /// `upperBoundOffsetOfCleaningRound`).
    round_upper: i64,
}

pub(super) fn clean_segments(
    log: &Log,
    range: &Cleanable,
    round_upper: i64,
    map: &HashMap<Vec<u8>, i64>,
    config: &CleanerConfig,
) -> Result<CleanStats> {
    let log_config = log.config();
    let now = log.now_ms();
    let delete_horizon = now.saturating_sub(log_config.delete_retention_ms);
    let mut txns = CleanedTxns::default();
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
        let cleaned_txn_index = txn_index_path(log.dir(), base, crate::log::CLEANED);
        let mut out = std::io::BufWriter::new(std::fs::File::create(&cleaned).at(&cleaned)?);
        let mut written = 0u64;
        let mut crc_failure = None;
        let filter = Filter {
            config: &log_config,
            last_records: &last_records,
            now,
            delete_horizon,
            round_upper,
        };
        txns.cleaned_index.clear();
        'segs: for (i, (seg, headers)) in group.iter().zip(headers).enumerate() {
            // The whole segment's aborted transactions, so the cleaned
            // index is complete (Kafka's `cleanSegments`).
            let upper = group
                .get(i + 1)
                .map_or_else(|| seg.next_offset(), |s| s.base_offset);
            txns.add_aborted(log.collect_aborted_txns(seg.base_offset, upper));
            for (pos, h) in headers {
                let bytes = seg.batch_bytes(pos, &h)?;
                // A batch whose CRC fails cannot go into the cleaned segment
                // (opening it would cut the segment there): the whole group
                // stays as it is.
                if let Err(e) = validate_crc(&bytes) {
                    crc_failure = Some((h, e));
                    break 'segs;
                }
                let kept = filter_batch(log, &filter, &bytes, map, &mut txns, &mut stats)?;
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
        if written > 0 {
            TxnIndex::write_new(&cleaned_txn_index, &txns.cleaned_index)?;
        }
        crash(config, CrashPoint::AfterCleanedWritten)?;
        let swapped = if written == 0 {
            // Nothing survives: drop the sources, oldest first, so a crash
            // midway leaves only newer records behind.
            std::fs::remove_file(&cleaned).at(&cleaned)?;
            remove_group(log, &group)?
        } else {
            swap_in(log, &group, base, written, config)?
        };
        remove_if_exists(&cleaned_txn_index)?;
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
/// some go, `None` when all go — unless it is a producer's last batch or
/// the round's last, which stays as an empty batch. Batches of aborted
/// transactions go; markers go in two passes (see `txn`). A batch that
/// cannot be read is kept as it is and reported.
fn filter_batch(
    log: &Log,
    f: &Filter<'_>,
    bytes: &[u8],
    map: &HashMap<Vec<u8>, i64>,
    txns: &mut CleanedTxns,
    stats: &mut CleanStats,
) -> Result<Option<Vec<u8>>> {
    let h = sluice_protocol::record::BatchHeader::parse(bytes)?;
    // Kafka's RETAIN_EMPTY: the batch stays even without records.
    let retain_empty =
        is_last_of_producer(&h, f.last_records) || h.last_offset() + 1 == f.round_upper;
    if h.is_control() {
        return filter_control(f, &h, bytes, retain_empty, txns, stats);
    }
    if txns.on_batch(&h) {
        // Aborted: its records never count.
        stats.records_read += u64::try_from(h.records_count).unwrap_or(0);
        stats.records_removed += u64::try_from(h.records_count).unwrap_or(0);
        stats.aborted_records_removed += u64::try_from(h.records_count).unwrap_or(0);
        return if retain_empty && h.records_count > 0 {
            empty_batch(&h).map(Some)
        } else if retain_empty {
            Ok(Some(bytes.to_vec()))
        } else {
            Ok(None)
        };
    }
    let decoded = match read_batch(bytes, &h, f.config) {
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
        if rec.value.is_none() && h.max_timestamp < f.delete_horizon {
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
        // sequence or ends the round (Kafka's RETAIN_EMPTY / DELETE_EMPTY).
        if !retain_empty {
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

/// A control batch (Kafka's `checkBatchRetention` for markers): one whose
/// transaction left no data may go — first it is stamped with a delete
/// horizon (`now + delete.retention.ms`), and a clean after that time
/// removes it (an empty batch when it must stay).
fn filter_control(
    f: &Filter<'_>,
    h: &sluice_protocol::record::BatchHeader,
    bytes: &[u8],
    retain_empty: bool,
    txns: &mut CleanedTxns,
    stats: &mut CleanStats,
) -> Result<Option<Vec<u8>>> {
    let can_discard = txns.on_control_batch(h, bytes);
    let horizon = h.has_delete_horizon().then_some(h.base_timestamp);
    if can_discard && horizon.is_some_and(|dh| dh <= f.now) {
        if h.records_count > 0 {
            stats.markers_removed += 1;
        }
        return if !retain_empty {
            Ok(None)
        } else if h.records_count > 0 {
            empty_batch(h).map(Some)
        } else {
            Ok(Some(bytes.to_vec()))
        };
    }
    if h.records_count == 0 {
        // A marker emptied by an earlier clean.
        return Ok(retain_empty.then(|| bytes.to_vec()));
    }
    if can_discard && horizon.is_none() {
        stats.markers_stamped += 1;
        let at = f.now.saturating_add(f.config.delete_retention_ms);
        return with_delete_horizon(h, bytes, at).map(Some);
    }
    Ok(Some(bytes.to_vec()))
}

/// The same batch with Kafka's delete horizon flag (0x40) and the horizon
/// as its base timestamp; record timestamps are kept (their deltas are
/// rewritten against the new base).
fn with_delete_horizon(
    h: &sluice_protocol::record::BatchHeader,
    bytes: &[u8],
    horizon: i64,
) -> Result<Vec<u8>> {
    const DELETE_HORIZON_FLAG: i16 = 0x40;
    let decoded =
        sluice_protocol::record::codec::decode_batch(bytes, crate::segment::decode_limit(h))?;
    let mut payload = Vec::with_capacity(decoded.payload.len());
    for r in &decoded.records {
        let delta = i32::try_from(r.record.offset - h.base_offset).unwrap_or(i32::MAX);
        sluice_protocol::record::codec::encode_record(
            &mut payload,
            &r.record,
            delta,
            r.record.timestamp.wrapping_sub(horizon),
        );
    }
    let fields = BatchFields {
        base_offset: h.base_offset,
        partition_leader_epoch: h.partition_leader_epoch,
        attributes: h.attributes | DELETE_HORIZON_FLAG,
        last_offset_delta: h.last_offset_delta,
        base_timestamp: horizon,
        max_timestamp: h.max_timestamp,
        producer: ProducerInfo {
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            base_sequence: h.base_sequence,
        },
        records_count: h.records_count,
    };
    Ok(assemble(&fields, h.compression()?, &payload)?)
}

fn remove_if_exists(path: &std::path::Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).at(path),
    }
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
    let cleaned_txn_index = txn_index_path(&dir, base, crate::log::CLEANED);
    if cleaned_txn_index.exists() {
        let to = txn_index_path(&dir, base, "");
        std::fs::rename(&cleaned_txn_index, &to).at(&to)?;
    }
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
