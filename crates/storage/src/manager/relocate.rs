//! Moving a partition's log to another data folder (AlterReplicaLogDirs;
//! Kafka's future logs).
//!
//! The move, in [`LogManager::move_log`]:
//! 1. while appends go on, the sealed segments (`.log`, `.index`,
//!    `.timeindex`) are copied to `<dest>/<tp>.<id>-future`, paced by the
//!    move throttle (Kafka's `replica.alter.log.dirs.io.max.bytes.per.second`);
//!    then again for the segments sealed meanwhile, at most
//!    [`COPY_ROUNDS`] rounds in all;
//! 2. the log is frozen (appends, truncation, retention and cleaner swaps
//!    wait) and flushed; the rest of its folder is copied (the active
//!    segment, segments sealed or replaced since, transaction indexes,
//!    producer snapshots, checkpoints), copies of segments that left the
//!    log are removed, every file and the folder fsynced;
//! 3. the destination's checkpoints are written listing the copy (so the
//!    log start offset and high watermark are known there after a crash);
//! 4. **commit**: the source folder is renamed `<tp>.<id>-delete` and its
//!    parent fsynced — only a complete, durable copy is ever committed;
//! 5. the copy is renamed `<dest>/<tp>`, opened and takes the log's place;
//!    the old log is retired (a writer that waited fails with
//!    KAFKA_STORAGE_ERROR and retries on the new log) and its folder
//!    removed.
//!
//! Moves are serialized with each other (`copy_lock`), but step 1 holds
//! no lock deletions wait for: a deletion or stray rename of the partition
//! meanwhile (under `move_lock`, which steps 2-5 take) ends the copy, and
//! so does the manager's shutdown, even with the throttle at 0; the future
//! folder is then removed.
//!
//! A crash before 4 leaves the source folder: on start the future folder
//! is removed as an unfinished move. A crash after 4 leaves no source
//! folder (or only its `-delete` folder, removed on start): the future
//! folder is the committed move and becomes the partition's folder.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{lock, parent_of, LogManager, DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX};
use crate::checkpoint;
use crate::error::{IoContext, Result, StorageError};
use crate::log::{Log, SealedCopy};
use crate::TopicPartition;

/// Most rounds of the unfrozen copy: each copies the segments sealed since
/// the previous one; what is left is copied frozen.
pub const COPY_ROUNDS: usize = 4;

/// The longest sleep of the throttle before it reads the limit again (so
/// a changed limit applies soon).
const THROTTLE_TICK: Duration = Duration::from_millis(100);

/// Paces the unfrozen copy to a bytes-per-second limit read before every
/// chunk (`i64::MAX`: no limit; 0: the copy waits until it is raised).
struct Pacer<'a> {
    limit: &'a (dyn Fn() -> i64 + Sync),
    /// Whether the copy must stop (the log was deleted, or shutdown).
    stop: &'a dyn Fn() -> bool,
    rate: i64,
    since: Instant,
    bytes: u64,
}

impl<'a> Pacer<'a> {
    fn new(limit: &'a (dyn Fn() -> i64 + Sync), stop: &'a dyn Fn() -> bool) -> Self {
        Self {
            limit,
            stop,
            rate: i64::MAX,
            since: Instant::now(),
            bytes: 0,
        }
    }

    /// Waits until `n` more bytes keep the copy within the limit; fails
    /// when the copy must stop.
    fn pace(&mut self, n: u64) -> std::io::Result<()> {
        loop {
            if (self.stop)() {
                return Err(std::io::Error::other(
                    "move stopped: the log was deleted or the broker is stopping",
                ));
            }
            let rate = (self.limit)();
            if rate != self.rate {
                // A new limit counts from now.
                self.rate = rate;
                self.since = Instant::now();
                self.bytes = 0;
            }
            if rate == i64::MAX {
                break;
            }
            let need = (self.bytes + n) as f64;
            let wait = if rate <= 0 {
                THROTTLE_TICK
            } else {
                let allowed = rate as f64 * self.since.elapsed().as_secs_f64();
                if need <= allowed {
                    break;
                }
                Duration::from_secs_f64((need - allowed) / rate as f64).min(THROTTLE_TICK)
            };
            std::thread::sleep(wait);
        }
        self.bytes += n;
        Ok(())
    }
}

/// A move in progress.
#[derive(Debug)]
pub(super) struct Move {
    /// Index of the destination folder.
    pub(super) dest: usize,
    /// The future folder.
    pub(super) path: PathBuf,
    /// The log being moved.
    pub(super) source: Arc<Log>,
    /// Offset below which the copy holds every record.
    pub(super) copied_to: Arc<AtomicI64>,
    /// Recovery point, log start offset and high watermark of the copy,
    /// set once it is complete (the destination checkpoints list it).
    pub(super) committing: Option<[i64; 3]>,
}

/// A move in progress, as DescribeLogDirs reports it.
#[derive(Debug, Clone)]
pub struct MoveState {
    pub topic_partition: TopicPartition,
    /// The destination data folder.
    pub dest_dir: PathBuf,
    /// Bytes copied so far.
    pub size_bytes: u64,
    /// The source's log end offset minus the copy's (Kafka's offset lag
    /// of a future replica).
    pub offset_lag: i64,
}

/// What [`LogManager::move_log`] did.
#[derive(Debug)]
pub enum MoveOutcome {
    /// The partition has no log here.
    NoSuchLog,
    /// The log is in that folder already.
    AlreadyThere,
    /// The log moved; the new one.
    Moved(Arc<Log>),
}

/// At start: a future folder of a partition that still has its folder is
/// an unfinished move (removed); one whose partition has none is a
/// committed move (it becomes the partition's folder).
pub(super) fn settle_future(
    tp: &TopicPartition,
    i: usize,
    path: &Path,
    dirs: &[PathBuf],
    found: &mut BTreeMap<TopicPartition, (usize, PathBuf)>,
) -> Result<()> {
    if found.contains_key(tp) {
        tracing::warn!(path = %path.display(), "removing the copy of an unfinished move between data folders");
        std::fs::remove_dir_all(path).at(path)?;
        return Ok(());
    }
    let dir = &dirs[i];
    let target = dir.join(tp.dir_name());
    tracing::info!(path = %path.display(), "finishing a committed move between data folders");
    std::fs::rename(path, &target).at(path)?;
    checkpoint::sync_dir(dir)?;
    found.insert(tp.clone(), (i, target));
    Ok(())
}

fn unique_id() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn discard(future: &Path) {
    if let Err(e) = std::fs::remove_dir_all(future) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %future.display(), error = %e, "removing an abandoned move copy failed (it goes at the next start)");
        }
    }
}

impl LogManager {
    /// Moves the log of `tp` into data folder `dest` (an index into
    /// [`Self::dirs`]) without a throttle; see [`Self::move_log_limited`].
    pub fn move_log(&self, tp: &TopicPartition, dest: usize) -> Result<MoveOutcome> {
        self.move_log_limited(tp, dest, &|| i64::MAX)
    }

    /// Moves the log of `tp` into data folder `dest` (an index into
    /// [`Self::dirs`]); returns once the move committed or failed (a
    /// failure before the commit leaves the log where it was). The copy of
    /// the sealed segments, done while appends go on, reads `io_limit`
    /// (bytes per second, Kafka's
    /// `replica.alter.log.dirs.io.max.bytes.per.second`; `i64::MAX`: no
    /// limit, 0: the copy waits until it is raised) before every chunk;
    /// the frozen copy of the rest is not throttled.
    pub fn move_log_limited(
        &self,
        tp: &TopicPartition,
        dest: usize,
        io_limit: &(dyn Fn() -> i64 + Sync),
    ) -> Result<MoveOutcome> {
        let _copies = lock(&self.copy_lock);
        let dest_dir = self
            .dirs
            .get(dest)
            .ok_or_else(|| StorageError::Layout(format!("no data folder number {dest}")))?
            .path
            .clone();
        let Some(old) = self.get(tp) else {
            return Ok(MoveOutcome::NoSuchLog);
        };
        if self.offline_dirs().contains(&dest) {
            return Err(StorageError::Offline(format!(
                "{tp}: data folder {} is offline",
                dest_dir.display()
            )));
        }
        if self.dir_index_of(&old) == Some(dest) {
            return Ok(MoveOutcome::AlreadyThere);
        }
        let id = unique_id();
        let future = dest_dir.join(format!("{}.{id:x}{FUTURE_DIR_SUFFIX}", tp.dir_name()));
        let copied_to = Arc::new(AtomicI64::new(old.log_start_offset()));
        lock(&self.moving).insert(
            tp.clone(),
            Move {
                dest,
                path: future.clone(),
                source: Arc::clone(&old),
                copied_to: Arc::clone(&copied_to),
                committing: None,
            },
        );
        let stop = || *lock(&self.stop.0) || !self.get(tp).is_some_and(|l| Arc::ptr_eq(&l, &old));
        let r = self
            .copy_sealed(&old, &future, &copied_to, io_limit, &stop)
            .and_then(|done| {
                self.move_frozen(tp, &old, dest, &dest_dir, &future, &done, &copied_to, id)
            });
        lock(&self.moving).remove(tp);
        r.map(MoveOutcome::Moved)
    }

    /// Step 1: creates the future folder and copies the sealed segments
    /// into it while appends go on, round after round until a round finds
    /// nothing new or [`COPY_ROUNDS`] ran.
    fn copy_sealed(
        &self,
        old: &Log,
        future: &Path,
        copied_to: &AtomicI64,
        io_limit: &(dyn Fn() -> i64 + Sync),
        stop: &dyn Fn() -> bool,
    ) -> Result<SealedCopy> {
        std::fs::create_dir(future).at(future)?;
        let mut done = SealedCopy::default();
        let mut pacer = Pacer::new(io_limit, stop);
        for _ in 0..COPY_ROUNDS {
            match old.copy_sealed(future, &mut done, copied_to, &mut |n| pacer.pace(n)) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    discard(future);
                    return Err(e);
                }
            }
        }
        tracing::debug!(partition = %old.topic_partition(), segments = done.len(), "copied the sealed segments of a move");
        Ok(done)
    }

    #[allow(clippy::too_many_arguments)]
    fn move_frozen(
        &self,
        tp: &TopicPartition,
        old: &Arc<Log>,
        dest: usize,
        dest_dir: &Path,
        future: &Path,
        done: &SealedCopy,
        copied_to: &AtomicI64,
        id: u128,
    ) -> Result<Arc<Log>> {
        // From here on a deletion or stray rename of the partition waits.
        let _moves = lock(&self.move_lock);
        let frozen = match old.freeze() {
            Ok(f) => f,
            Err(e) => {
                discard(future);
                return Err(e);
            }
        };
        if let Err(e) = frozen
            .copy_rest(future, done, copied_to)
            .and_then(|()| checkpoint::sync_dir(dest_dir))
        {
            discard(future);
            return Err(e);
        }
        let opts = frozen.open_options(self.config.producer_state);
        {
            let _c = lock(&self.checkpoint_lock);
            if let Some(m) = lock(&self.moving).get_mut(tp) {
                m.committing = Some([
                    opts.recovery_point,
                    opts.log_start_offset,
                    opts.high_watermark,
                ]);
            }
            if let Err(e) = self.checkpoint_dir(dest, &self.logs()) {
                discard(future);
                return Err(e);
            }
        }
        let mut logs = self.logs.write().unwrap_or_else(|p| p.into_inner());
        if !logs.get(tp).is_some_and(|l| Arc::ptr_eq(l, old)) {
            drop(logs);
            discard(future);
            return Err(StorageError::Closed(tp.to_string()));
        }
        let src_parent = parent_of(old)?;
        let doomed = src_parent.join(format!("{}.{id:x}{DELETE_DIR_SUFFIX}", tp.dir_name()));
        if let Err(e) = std::fs::rename(old.dir(), &doomed) {
            drop(logs);
            discard(future);
            return Err(StorageError::Io {
                path: old.dir().to_path_buf(),
                source: e,
            });
        }
        // From here on the source folder is gone from its name: the log
        // is retired whatever happens next, and a restart settles the
        // move from what is on disk.
        logs.remove(tp);
        frozen.retire();
        checkpoint::sync_dir(&src_parent)?;
        // Committed.
        let target = dest_dir.join(tp.dir_name());
        std::fs::rename(future, &target).at(future)?;
        checkpoint::sync_dir(dest_dir)?;
        let new = Arc::new(Log::open(
            &target,
            tp.clone(),
            (*old.config()).clone(),
            opts,
            Arc::clone(&self.config.clock),
        )?);
        logs.insert(tp.clone(), Arc::clone(&new));
        drop(logs);
        tracing::info!(partition = %tp, from = %src_parent.display(), to = %dest_dir.display(), "moved a partition between data folders");
        if let Err(e) = self.doom(doomed) {
            tracing::warn!(error = %e, "removing the moved partition's old folder failed (it goes at the next start)");
        }
        Ok(new)
    }

    /// The moves in progress.
    pub fn moves(&self) -> Vec<MoveState> {
        lock(&self.moving)
            .iter()
            .map(|(tp, m)| MoveState {
                topic_partition: tp.clone(),
                dest_dir: self.dirs[m.dest].path.clone(),
                size_bytes: folder_size(&m.path),
                offset_lag: (m.source.log_end_offset() - m.copied_to.load(Ordering::Acquire))
                    .max(0),
            })
            .collect()
    }
}

/// Bytes in the files of `dir` (0 when it cannot be read).
fn folder_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}
