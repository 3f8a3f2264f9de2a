//! Opening a partition folder (Kafka's `LogLoader`): clean up leftovers of
//! interrupted deletes and cleanings, finish interrupted segment swaps,
//! open segments, recover whatever lies past the recovery point, then load
//! the producer state (`<offset>.snapshot` files, see `producer`).
//!
//! Corruption past the recovery point (unflushed data) truncates the log
//! there: the rest of that segment and every later segment go. Corruption
//! found below it, while rebuilding a missing or corrupt index, truncates
//! that segment alone and is logged at error level (flushed data changed
//! on disk); later segments are whole and stay, as in Kafka's `LogLoader`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64};
use std::sync::{Arc, Mutex, RwLock};

use super::retention::DELETED_SUFFIX;
use super::{Log, LogOpenOptions, WriterState};
use crate::clock::Clock;
use crate::config::LogConfig;
use crate::epoch::LeaderEpochCache;
use crate::error::{bad_file, IoContext, Result};
use crate::producer::snapshot::{parse_snapshot_name, SNAPSHOT_SUFFIX};
use crate::producer::ProducerStateManager;
use crate::segment::{segment_path, Segment, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use crate::txn_index::TXN_INDEX_SUFFIX;
use crate::TopicPartition;

/// Suffix of segment files written by the cleaner, not yet complete.
pub(crate) const CLEANED_SUFFIX: &str = ".cleaned";
/// Suffix of complete cleaned segments waiting to replace the originals.
pub(crate) const SWAP_SUFFIX: &str = ".swap";

/// Files a partition folder may hold besides segments.
const KNOWN_FILES: &[&str] = &[
    crate::checkpoint::LEADER_EPOCH_CHECKPOINT,
    "partition.metadata",
    // The metadata quorum's vote and commit (Kafka's file name; the
    // controller owns it, design 018).
    "quorum-state",
];

/// Suffixes of KRaft snapshot files (`<offset>-<epoch>.checkpoint`, and
/// partial, deleted and set-aside corrupt ones) that the metadata log's
/// folder holds beside its segments; the controller owns them.
const SNAPSHOT_SUFFIXES: &[&str] = &[
    ".checkpoint",
    // A snapshot's Raft meta beside it (the metadata quorum, design 018).
    ".quorum",
    ".checkpoint.part",
    ".checkpoint.deleted",
    ".checkpoint.corrupt",
];

/// Parses a 20-digit segment file stem.
fn parse_base(stem: &str) -> Option<i64> {
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

/// Splits `name` into (base offset, segment suffix, extra suffix).
/// Producer snapshots (`.snapshot`) are not segment files: they belong to
/// the producer state, which keeps or deletes them by its own rules.
fn classify(name: &str) -> Option<(&str, &'static str, &str)> {
    for suffix in [
        LOG_SUFFIX,
        INDEX_SUFFIX,
        TIME_INDEX_SUFFIX,
        TXN_INDEX_SUFFIX,
    ] {
        if let Some(at) = name.find(suffix) {
            let extra = &name[at + suffix.len()..];
            if extra.is_empty() || [DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX].contains(&extra) {
                return Some((&name[..at], suffix, extra));
            }
        }
    }
    None
}

impl Log {
    /// Opens (or creates) the partition folder `dir`.
    pub fn open(
        dir: &Path,
        tp: TopicPartition,
        config: LogConfig,
        opts: LogOpenOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir).at(dir)?;
        let now = clock.now_ms();
        let settings = crate::segment::SegmentSettings::of(&config);
        let (bases, snapshots) = prepare_folder(dir)?;
        let mut epochs = LeaderEpochCache::load(dir)?;
        let mut epochs_changed = false;

        let mut segments = BTreeMap::new();
        let last = bases.last().copied();
        let mut recovering = false;
        let mut truncated_at: Option<i64> = None;
        for (i, &base) in bases.iter().enumerate() {
            if truncated_at.is_some() {
                // Everything after a torn segment is unreachable garbage.
                let seg = Segment::open(dir, base, settings, false, now)?;
                tracing::warn!(path = %seg.log_path().display(), "deleting segment after a corrupt one");
                seg.delete_files()?;
                continue;
            }
            let is_last = Some(base) == last;
            let next_base = bases.get(i + 1).copied().unwrap_or(i64::MAX);
            if !opts.clean_shutdown && next_base > opts.recovery_point {
                recovering = true;
            }
            let writable = is_last || recovering;
            let mut seg = Segment::open(dir, base, settings, writable, now)?;
            let mut rebuild = seg.indexes_missing || !index_sane(&seg)?;
            if !recovering && !rebuild {
                if let Err(e) = seg.load_without_scan() {
                    tracing::warn!(error = %e, "segment does not match its indexes; scanning it");
                    rebuild = true;
                } else if !seg.time_index_within_log() {
                    tracing::warn!(path = %seg.log_path().display(), "time index names offsets past the segment; scanning it");
                    rebuild = true;
                }
            }
            if rebuild && !writable {
                // Room for the rebuilt entries; trimmed again by `seal`.
                drop(seg);
                seg = Segment::open(dir, base, settings, true, now)?;
            }
            if recovering || rebuild {
                check_not_foreign(&seg)?;
                let outcome = seg.recover(config.index_interval_bytes)?;
                // The checkpoint may lag the log (a crash between the write
                // and its rewrite): the recovered batches name their epochs.
                for &(epoch, offset) in &outcome.epoch_starts {
                    epochs_changed |= epochs.assign(epoch, offset);
                }
                if recovering && !rebuild && outcome.truncated_bytes == 0 && seg.size() > 0 {
                    tracing::debug!(path = %seg.log_path().display(), "recovered segment");
                } else if rebuild && !recovering {
                    tracing::warn!(path = %seg.log_path().display(), "rebuilt missing or corrupt index");
                }
                if outcome.truncated_bytes > 0 && outcome.zero_tail && is_last {
                    // Preallocated space (or pages never written) after the
                    // last batch of the active segment: nothing was lost.
                    tracing::info!(
                        path = %seg.log_path().display(),
                        trimmed_bytes = outcome.truncated_bytes,
                        "trimmed unwritten tail of segment"
                    );
                } else if outcome.truncated_bytes > 0 && recovering {
                    tracing::warn!(
                        path = %seg.log_path().display(),
                        truncated_bytes = outcome.truncated_bytes,
                        problem = outcome.problem.as_deref().unwrap_or("zero-filled tail"),
                        "truncated invalid tail of segment"
                    );
                    truncated_at = Some(base);
                } else if outcome.truncated_bytes > 0 {
                    // Below the recovery point this data had been flushed:
                    // the disk lost or changed it. Kafka's `LogLoader`
                    // recovers this segment alone; later segments are
                    // complete and stay.
                    tracing::error!(
                        path = %seg.log_path().display(),
                        truncated_bytes = outcome.truncated_bytes,
                        problem = outcome.problem.as_deref().unwrap_or(""),
                        recovery_point = opts.recovery_point,
                        "corruption below the recovery point found while rebuilding an index: truncated this segment only"
                    );
                }
                if !is_last && truncated_at.is_none() {
                    seg.seal()?;
                }
            }
            segments.insert(base, Arc::new(seg));
        }
        // A truncated segment that is not the last becomes the active one.
        if let Some(base) = truncated_at {
            if Some(base) != last {
                let seg = Segment::open(dir, base, settings, true, now)?;
                seg.recover(config.index_interval_bytes)?;
                segments.insert(base, Arc::new(seg));
            }
        }
        // An empty active segment left behind by a crash right after a roll,
        // whose base lies beyond the log's data, is fine: Kafka keeps it.
        if segments.is_empty() {
            let start = opts.log_start_offset.max(0);
            segments.insert(start, Arc::new(Segment::create(dir, start, settings, now)?));
        }
        let first_base = *segments.keys().next().unwrap_or(&0);
        let log_end = segments
            .values()
            .next_back()
            .map_or(first_base, |s| s.next_offset());
        let log_start = opts
            .log_start_offset
            .clamp(first_base, log_end.max(first_base));
        let recovery_point = if opts.clean_shutdown {
            log_end
        } else {
            opts.recovery_point.clamp(log_start, log_end)
        };
        if epochs.truncate_from_end(log_end)
            | epochs.truncate_from_start(log_start)
            | epochs_changed
        {
            epochs.flush()?;
        }
        let log = Self {
            dir: dir.to_path_buf(),
            tp,
            config: RwLock::new(Arc::new(config)),
            clock,
            segments: RwLock::new(segments),
            writer: Mutex::new(WriterState),
            log_end_offset: AtomicI64::new(log_end),
            high_watermark: AtomicI64::new(opts.high_watermark.clamp(log_start, log_end)),
            log_start_offset: AtomicI64::new(log_start),
            recovery_point: AtomicI64::new(recovery_point),
            last_flush_ms: AtomicI64::new(now),
            unflushed_messages: AtomicI64::new(0),
            epochs: Mutex::new(epochs),
            offline: AtomicBool::new(false),
            pending_deletes: Mutex::new(Vec::new()),
            producers: Mutex::new(ProducerStateManager::new(opts.producer_state)),
            first_unstable: AtomicI64::new(i64::MAX),
        };
        log.load_producer_state(snapshots, &opts)?;
        tracing::debug!(
            partition = %log.tp, log_start, log_end, segments = log.segment_count(),
            recovered = recovering, "opened log"
        );
        Ok(log)
    }
}

fn index_sane(seg: &Segment) -> Result<bool> {
    if !seg.indexes_sane() {
        return Ok(false);
    }
    // Cheap extra check: the last offset index entry must point at a batch
    // whose last offset it names.
    if let Some(e) = seg.offset_index.last() {
        match seg.header_at(u64::from(e.position), seg.size()) {
            Ok(Some(h)) => {
                return Ok(h.last_offset() == seg.base_offset + i64::from(e.relative_offset))
            }
            _ => return Ok(false),
        }
    }
    Ok(true)
}

/// A `.log` whose very first header is a complete non-v2 batch is not a
/// torn Kafka v2 log but some other format: refuse it by name rather than
/// silently truncating it away.
fn check_not_foreign(seg: &Segment) -> Result<()> {
    let path = seg.log_path();
    let mut head = [0u8; 17];
    let f = std::fs::File::open(&path).at(&path)?;
    use std::os::unix::fs::FileExt;
    let whole = f.read_at(&mut head, 0).at(&path)? == head.len();
    if whole && head[16] != 2 && head.iter().any(|&b| b != 0) {
        return Err(bad_file(
            &path,
            format!("not a Kafka v2 segment (magic byte {})", head[16] as i8),
        ));
    }
    Ok(())
}

/// Removes leftovers, finishes swaps, checks names. Returns the base
/// offsets of the segments to open, in order, and the offsets of the
/// producer snapshots.
fn prepare_folder(dir: &Path) -> Result<(Vec<i64>, Vec<i64>)> {
    let mut logs = Vec::new();
    let mut swaps = Vec::new();
    let mut others: Vec<(PathBuf, i64, &'static str)> = Vec::new();
    let mut snapshots = Vec::new();
    for entry in std::fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if SNAPSHOT_SUFFIXES.iter().any(|s| name.ends_with(s)) {
            continue;
        }
        if let Some(offset) = parse_snapshot_name(&name) {
            snapshots.push(offset);
            continue;
        }
        if name.ends_with(&format!("{SNAPSHOT_SUFFIX}{DELETED_SUFFIX}")) {
            // Kafka renames a snapshot `.deleted` before it goes.
            std::fs::remove_file(&path).at(&path)?;
            continue;
        }
        if KNOWN_FILES.contains(&name.as_str()) || name.ends_with(".tmp") {
            if name.ends_with(".tmp") {
                std::fs::remove_file(&path).at(&path)?;
            }
            continue;
        }
        let Some((stem, suffix, extra)) = classify(&name) else {
            tracing::warn!(path = %path.display(), "ignoring unknown file in partition folder");
            continue;
        };
        let Some(base) = parse_base(stem) else {
            return Err(bad_file(
                &path,
                "segment file name is not a 20-digit base offset",
            ));
        };
        match extra {
            DELETED_SUFFIX | CLEANED_SUFFIX => {
                std::fs::remove_file(&path).at(&path)?;
            }
            SWAP_SUFFIX => swaps.push((path, base, suffix)),
            _ if suffix == LOG_SUFFIX => logs.push(base),
            _ => others.push((path, base, suffix)),
        }
    }
    // Finish swaps: a `.log.swap` replaces every segment it covers.
    swaps.sort_by_key(|(_, b, s)| (*b, *s != LOG_SUFFIX));
    for (path, base, suffix) in &swaps {
        if *suffix != LOG_SUFFIX {
            continue;
        }
        let last = last_offset_of(path)?;
        for &old in logs.iter().filter(|&&b| b >= *base && b <= last) {
            for s in [
                LOG_SUFFIX,
                INDEX_SUFFIX,
                TIME_INDEX_SUFFIX,
                TXN_INDEX_SUFFIX,
            ] {
                let p = segment_path(dir, old, s, "");
                if p.exists() {
                    std::fs::remove_file(&p).at(&p)?;
                }
            }
        }
        logs.retain(|&b| b < *base || b > last);
        others.retain(|(_, b, _)| *b < *base || *b > last);
        logs.push(*base);
    }
    for (path, base, suffix) in &swaps {
        let target = segment_path(dir, *base, suffix, "");
        std::fs::rename(path, &target).at(path)?;
        tracing::info!(path = %target.display(), "completed interrupted segment swap");
    }
    // Index files without a log are orphans.
    logs.sort_unstable();
    logs.dedup();
    for (path, base, _) in others {
        if logs.binary_search(&base).is_err() {
            std::fs::remove_file(&path).at(&path)?;
        }
    }
    Ok((logs, snapshots))
}

/// Last offset of the batches in a (swap) log file.
fn last_offset_of(path: &Path) -> Result<i64> {
    use sluice_protocol::record::batch::{BatchHeader, HEADER_LEN};
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).at(path)?;
    let len = f.metadata().at(path)?.len();
    let mut pos = 0u64;
    let mut last = -1i64;
    let mut buf = [0u8; HEADER_LEN];
    while pos + HEADER_LEN as u64 <= len {
        f.read_exact_at(&mut buf, pos).at(path)?;
        let h = BatchHeader::parse(&buf).map_err(|e| bad_file(path, e.to_string()))?;
        last = h.last_offset();
        pos += h.total_size() as u64;
    }
    Ok(last)
}
