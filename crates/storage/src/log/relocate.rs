//! Copying a partition folder for a move to another data folder
//! (AlterReplicaLogDirs), in two steps:
//!
//! - [`Log::copy_sealed`], while appends go on: the `.log`, `.index` and
//!   `.timeindex` files of the sealed segments (every segment but the
//!   active one). A sealed segment's files do not change while the segment
//!   is in the log: a roll seals (final time index entry, trimmed indexes
//!   and log) before the next segment is added, and retention, the cleaner
//!   and truncation replace or remove the segment object instead (the
//!   cleaner's output and a truncated segment are new objects). What was
//!   copied is remembered by segment object ([`SealedCopy`]).
//! - [`FrozenLog::copy_rest`], under the append lock ([`Log::freeze`]: no
//!   append, roll, truncation, retention or segment swap runs): every other
//!   file, i.e. the active segment, segments sealed or replaced since, all
//!   `.txnindex` files (a truncation's producer-state reload rewrites
//!   them in place), producer snapshots and checkpoints; copies of
//!   segments no longer in the log are removed. The copy is fsynced before
//!   the caller commits the move (see the `manager` module for the commit
//!   protocol).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, MutexGuard};

use super::{Log, LogOpenOptions, WriterState};
use crate::error::{IoContext, Result};
use crate::producer::ProducerStateConfig;
use crate::segment::{segment_path, Segment, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};

/// Bytes read and written at a time by the unfrozen copy (the throttle
/// paces each chunk).
const CHUNK: usize = 64 * 1024;

/// The sealed segments [`Log::copy_sealed`] copied, by base offset.
#[derive(Debug, Default)]
pub(crate) struct SealedCopy {
    copied: BTreeMap<i64, Arc<Segment>>,
}

impl SealedCopy {
    /// How many sealed segments have been copied.
    pub(crate) fn len(&self) -> usize {
        self.copied.len()
    }

    /// Whether the copy of `seg`'s `.log`, `.index` and `.timeindex` is
    /// current: that very segment object was copied.
    fn holds(&self, seg: &Arc<Segment>) -> bool {
        self.copied
            .get(&seg.base_offset)
            .is_some_and(|c| Arc::ptr_eq(c, seg))
    }
}

/// The base offset in a segment's `.log`, `.index` or `.timeindex` file
/// name.
fn segment_file(name: &str) -> Option<i64> {
    let (stem, _) = name.split_once('.')?;
    let suffix = &name[stem.len()..];
    if ![LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX].contains(&suffix) {
        return None;
    }
    stem.parse().ok()
}

/// Copies `from` to `to` (replaced) in chunks, calling `pace` with each
/// chunk's size before writing it; fsyncs `to`.
fn copy_paced(
    from: &Path,
    to: &Path,
    pace: &mut dyn FnMut(u64) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut src = std::fs::File::open(from)?;
    let mut dst = std::fs::File::create(to)?;
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        pace(n as u64)?;
        dst.write_all(&buf[..n])?;
    }
    dst.sync_all()
}

/// A log no writer can change until the guard drops.
#[derive(Debug)]
pub struct FrozenLog<'a> {
    log: &'a Log,
    _writer: MutexGuard<'a, WriterState>,
}

impl Log {
    /// Stops every change to the log (appends wait) and flushes it, so the
    /// folder on disk holds everything the log holds.
    pub fn freeze(&self) -> Result<FrozenLog<'_>> {
        let writer = self.writer();
        self.check_online()?;
        self.flush()?;
        // The epoch checkpoint is written on every change; write it once
        // more so the folder is complete on its own whatever happened.
        super::lock(&self.epochs)
            .flush()
            .map_err(|e| self.go_offline(e))?;
        Ok(FrozenLog {
            log: self,
            _writer: writer,
        })
    }
}

impl Log {
    /// Copies into the existing folder `dest` the `.log`, `.index` and
    /// `.timeindex` files of the sealed segments `done` does not hold yet,
    /// without stopping appends; `pace` is called with each chunk's size
    /// before it is written (the move throttle). A segment that leaves the
    /// log meanwhile (its files renamed or gone) is skipped; the frozen step
    /// settles it. `copied_to` follows the progress. Returns how many
    /// segments this call copied.
    pub(crate) fn copy_sealed(
        &self,
        dest: &Path,
        done: &mut SealedCopy,
        copied_to: &AtomicI64,
        pace: &mut dyn FnMut(u64) -> std::io::Result<()>,
    ) -> Result<usize> {
        self.check_online()?;
        let sealed: Vec<Arc<Segment>> = {
            let segs = self.read_segments();
            let n = segs.len().saturating_sub(1);
            segs.values().take(n).cloned().collect()
        };
        let mut copied = 0;
        'segments: for seg in sealed {
            if done.holds(&seg) {
                continue;
            }
            for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
                let from = segment_path(&self.dir, seg.base_offset, suffix, "");
                let to = segment_path(dest, seg.base_offset, suffix, "");
                match copy_paced(&from, &to, pace) {
                    Ok(()) => {}
                    // Retention or the cleaner took it away meanwhile.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue 'segments,
                    Err(e) => return Err(e).at(&from),
                }
            }
            copied_to.fetch_max(seg.next_offset(), Ordering::AcqRel);
            done.copied.insert(seg.base_offset, seg);
            copied += 1;
        }
        Ok(copied)
    }
}

impl FrozenLog<'_> {
    /// Completes the copy in `dest` (created by the caller, holding what
    /// [`Log::copy_sealed`] copied): copies every file of the folder but
    /// the segment files `done` holds current copies of, removes from
    /// `dest` what the folder no longer has, and fsyncs the files and
    /// `dest`. `copied_to` follows the progress: the offset below which the
    /// copy holds every record. Files already renamed for deletion and
    /// cleaner leftovers are not copied.
    pub(crate) fn copy_rest(
        &self,
        dest: &Path,
        done: &SealedCopy,
        copied_to: &AtomicI64,
    ) -> Result<()> {
        let src = self.log.dir();
        let mut files = Vec::new();
        for entry in std::fs::read_dir(src).at(src)? {
            let entry = entry.at(src)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".deleted") || name.ends_with(super::CLEANED) {
                continue;
            }
            if entry.file_type().at(src)?.is_file() {
                files.push(name);
            }
        }
        // Segments in offset order, so the progress moves forward.
        files.sort();
        let segs: Vec<Arc<Segment>> = self.log.read_segments().values().cloned().collect();
        let bases: Vec<i64> = segs.iter().map(|s| s.base_offset).collect();
        let current: BTreeSet<i64> = segs
            .iter()
            .filter(|s| done.holds(s))
            .map(|s| s.base_offset)
            .collect();
        let wanted: BTreeSet<String> = files.iter().cloned().collect();
        for stale in std::fs::read_dir(dest).at(dest)? {
            let stale = stale.at(dest)?;
            let name = stale.file_name().to_string_lossy().into_owned();
            if !wanted.contains(&name) {
                std::fs::remove_file(stale.path()).at(&stale.path())?;
            }
        }
        for name in &files {
            if segment_file(name).is_some_and(|b| current.contains(&b)) {
                continue;
            }
            let from = src.join(name);
            let to = dest.join(name);
            std::fs::copy(&from, &to).at(&from)?;
            std::fs::File::open(&to).at(&to)?.sync_all().at(&to)?;
            if let Some(base) = name
                .strip_suffix(".log")
                .and_then(|b| b.parse::<i64>().ok())
            {
                let next = bases
                    .iter()
                    .copied()
                    .find(|&b| b > base)
                    .unwrap_or_else(|| self.log.log_end_offset());
                copied_to.fetch_max(next, Ordering::AcqRel);
            }
        }
        crate::checkpoint::sync_dir(dest)?;
        copied_to.fetch_max(self.log.log_end_offset(), Ordering::AcqRel);
        Ok(())
    }

    /// How the copy opens: at the log's offsets (everything is flushed, so
    /// nothing needs recovery).
    pub fn open_options(&self, producer_state: ProducerStateConfig) -> LogOpenOptions {
        LogOpenOptions {
            recovery_point: self.log.recovery_point(),
            log_start_offset: self.log.log_start_offset(),
            high_watermark: self.log.high_watermark(),
            clean_shutdown: false,
            producer_state,
        }
    }

    /// The move committed: the log is retired (offline), so a writer that
    /// waited on the freeze fails instead of appending to a folder that is
    /// being deleted.
    pub fn retire(self) {
        self.log.offline.store(true, Ordering::Release);
    }
}
