//! The LogManager: every partition log of the broker's data folders
//! (`log.dirs`, JBOD; Kafka's `LogManager`).
//!
//! It owns, in each data folder, the data-folder files — `meta.properties` (format version),
//! `.lock` (one process per folder), the clean-shutdown marker
//! `.kafka_cleanshutdown`, and the checkpoints `recovery-point-offset-checkpoint`,
//! `log-start-offset-checkpoint`, `replication-offset-checkpoint`,
//! `cleaner-offset-checkpoint` — opens all partitions in parallel at start,
//! and runs retention, time-based flushing, checkpointing, producer-id
//! expiry and the cleaner on background threads.
//!
//! Two kinds of folders are never opened as logs: the KRaft metadata log
//! `__cluster_metadata-0` (owned by the controller, which shrinks it only
//! through metadata snapshots: no retention, no cleaner can ever see it, as
//! Kafka's `LogManager` skips it), and stray folders `<tp>.<id>-stray` (a
//! partition the metadata did not know at start, moved aside by
//! [`LogManager::rename_stray`] and kept for an operator to look at).
//!
//! Several folders (design 024): each has its own lock, marker and
//! checkpoints, which list the partitions in that folder. A new partition
//! goes to the folder holding the fewest partitions (Kafka's
//! `nextLogDirs`); at start every folder is scanned and a partition found
//! in two folders stops the start (Kafka's duplicate-log error). A replica
//! moves between folders with [`LogManager::move_log`] (module
//! `relocate`): a `<tp>.<id>-future` copy, committed by renaming the source
//! folder `-delete`; on start a future folder whose partition still has its
//! folder is an unfinished move and is removed, one whose partition has
//! none is a committed move and becomes the partition's folder.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::checkpoint::{
    self, CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
};
use crate::cleaner::{self, CleanStats, CleanerConfig};
use crate::clock::{Clock, SystemClock};
use crate::config::LogConfig;
use crate::error::{bad_file, IoContext, Result, StorageError};
use crate::log::{Log, LogOpenOptions};
use crate::producer::ProducerStateConfig;
use crate::{TopicPartition, CLUSTER_METADATA_TOPIC};

/// Name of the clean-shutdown marker in the data folder.
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";
/// Name of the format file in the data folder.
pub const META_PROPERTIES: &str = "meta.properties";
/// Suffix of partition folders being deleted.
pub(crate) const DELETE_DIR_SUFFIX: &str = "-delete";
/// Suffix of partition folders set aside because the metadata does not know
/// them (Kafka's stray logs, `<topic>-<partition>.<id>-stray`).
pub const STRAY_DIR_SUFFIX: &str = "-stray";
/// Suffix of the copy of a partition being moved to another data folder
/// (Kafka's future logs, `<topic>-<partition>.<id>-future`).
pub const FUTURE_DIR_SUFFIX: &str = "-future";
/// Data-folder format versions this build reads (`version=` in
/// meta.properties, as Kafka: 0 for ZooKeeper-era folders, 1 for KRaft).
const SUPPORTED_VERSIONS: &[&str] = &["0", "1"];

/// Settings of a LogManager (Kafka's `log.*` server configs).
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// The data folders (`log.dirs`), at least one; partitions are spread
    /// over them.
    pub log_dirs: Vec<PathBuf>,
    /// Topic config defaults for logs without overrides.
    pub default_config: LogConfig,
    /// `num.recovery.threads.per.data.dir`
    pub recovery_threads: usize,
    /// `log.retention.check.interval.ms`
    pub retention_check_interval_ms: u64,
    /// `log.flush.scheduler.interval.ms` (how often `flush.ms` is checked)
    pub flush_check_interval_ms: u64,
    /// `log.flush.offset.checkpoint.interval.ms`
    pub checkpoint_interval_ms: u64,
    /// `log.cleaner.enable`
    pub cleaner_enable: bool,
    /// `log.cleaner.backoff.ms`
    pub cleaner_backoff_ms: u64,
    pub cleaner: CleanerConfig,
    /// `producer.id.expiration.ms` and the bound on producer ids per
    /// partition.
    pub producer_state: ProducerStateConfig,
    /// `producer.id.expiration.check.interval.ms`
    pub producer_id_expiration_check_interval_ms: u64,
    pub clock: Arc<dyn Clock>,
}

impl ManagerConfig {
    /// Kafka's defaults for one data folder.
    pub fn new(log_dir: impl Into<PathBuf>) -> Self {
        Self::with_dirs(vec![log_dir.into()])
    }

    /// Kafka's defaults for several data folders (JBOD).
    pub fn with_dirs(log_dirs: Vec<PathBuf>) -> Self {
        Self {
            log_dirs,
            default_config: LogConfig::default(),
            recovery_threads: 2,
            retention_check_interval_ms: 300_000,
            flush_check_interval_ms: 1_000,
            checkpoint_interval_ms: 60_000,
            cleaner_enable: true,
            cleaner_backoff_ms: 15_000,
            cleaner: CleanerConfig::default(),
            producer_state: ProducerStateConfig::default(),
            producer_id_expiration_check_interval_ms: 600_000,
            clock: Arc::new(SystemClock),
        }
    }
}

/// One data folder: its path and the `.lock` held while it is open.
#[derive(Debug)]
struct DataDir {
    path: PathBuf,
    _lock: std::fs::File,
}

/// All partition logs of the data folders.
#[derive(Debug)]
pub struct LogManager {
    config: ManagerConfig,
    dirs: Vec<DataDir>,
    logs: RwLock<BTreeMap<TopicPartition, Arc<Log>>>,
    first_dirty: Mutex<BTreeMap<TopicPartition, i64>>,
    /// Moves in progress (at most one at a time: `copy_lock`).
    moving: Mutex<BTreeMap<TopicPartition, relocate::Move>>,
    /// Serializes moves with each other, for their whole length.
    copy_lock: Mutex<()>,
    /// Serializes the frozen steps and commits of moves, deletions and
    /// stray renames of partitions.
    move_lock: Mutex<()>,
    /// Serializes checkpoint writes (the scheduler's and a move's).
    checkpoint_lock: Mutex<()>,
    stop: Arc<(Mutex<bool>, Condvar)>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    clean_start: bool,
    /// Folders asked for partitions not created yet (AlterReplicaLogDirs;
    /// Kafka's preferred log dirs), used once when the log is created.
    preferred: Mutex<BTreeMap<TopicPartition, usize>>,
    /// Folders that failed I/O (Kafka's offline log dirs).
    offline_dirs: Mutex<BTreeSet<usize>>,
    /// Folders of deleted (or moved) partitions, renamed `<tp>.<id>-delete`,
    /// waiting out the default `file.delete.delay.ms` before the scheduler
    /// removes them (Kafka's logs to be deleted), with the time they are
    /// due. Removing a large folder frees its page cache and blocks (a
    /// GiB takes 0.1-0.3 s here): the caller (a topic deletion, the
    /// metadata follower) does not wait for it. The rename is the durable
    /// record: a restart removes what is left (`scan_dir`).
    doomed: Mutex<Vec<(i64, PathBuf)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl LogManager {
    /// Opens the data folder with the default topic config for every log.
    pub fn open(config: ManagerConfig) -> Result<Arc<Self>> {
        let defaults = config.default_config.clone();
        Self::open_with(config, &move |_| defaults.clone())
    }

    /// Opens the data folders; `config_for` gives each partition's config.
    pub fn open_with(
        config: ManagerConfig,
        config_for: &(dyn Fn(&TopicPartition) -> LogConfig + Sync),
    ) -> Result<Arc<Self>> {
        if config.log_dirs.is_empty() {
            return Err(StorageError::Layout(
                "no data folder (log.dirs is empty)".into(),
            ));
        }
        let mut dirs = Vec::new();
        let mut clean = true;
        // Per folder: its checkpoints; the folder holding each partition.
        let mut checkpoints = Vec::new();
        let mut found: BTreeMap<TopicPartition, (usize, PathBuf)> = BTreeMap::new();
        let mut futures: Vec<(TopicPartition, usize, PathBuf)> = Vec::new();
        let mut first_dirty = BTreeMap::new();
        for (i, dir) in config.log_dirs.iter().enumerate() {
            std::fs::create_dir_all(dir).at(dir)?;
            let lock_file = lock_folder(dir)?;
            check_meta_properties(dir)?;
            clean &= dir.join(CLEAN_SHUTDOWN_FILE).exists();
            checkpoints.push(DirCheckpoints {
                recovery: checkpoint::read_offsets(&dir.join(RECOVERY_POINT_CHECKPOINT))?,
                starts: checkpoint::read_offsets(&dir.join(LOG_START_OFFSET_CHECKPOINT))?,
                hws: checkpoint::read_offsets(&dir.join(REPLICATION_OFFSET_CHECKPOINT))?,
            });
            let dirty = checkpoint::read_offsets(&dir.join(CLEANER_OFFSET_CHECKPOINT))?;
            scan_dir(i, dir, &mut found, &mut futures)?;
            first_dirty.extend(dirty);
            dirs.push(DataDir {
                path: dir.clone(),
                _lock: lock_file,
            });
        }
        for (tp, i, path) in futures {
            relocate::settle_future(&tp, i, &path, &config.log_dirs, &mut found)?;
        }
        let todo: Vec<(TopicPartition, PathBuf)> = found
            .iter()
            .map(|(tp, (_, p))| (tp.clone(), p.clone()))
            .collect();
        let started = Instant::now();
        let opened = open_parallel(&todo, config.recovery_threads.max(1), |tp, path| {
            let c = found
                .get(tp)
                .and_then(|(i, _)| checkpoints.get(*i))
                .ok_or_else(|| bad_file(path, "partition folder outside the data folders"))?;
            let opts = LogOpenOptions {
                recovery_point: c.recovery.get(tp).copied().unwrap_or(0),
                log_start_offset: c.starts.get(tp).copied().unwrap_or(0),
                high_watermark: c.hws.get(tp).copied().unwrap_or(0),
                clean_shutdown: clean,
                producer_state: config.producer_state,
            };
            Log::open(
                path,
                tp.clone(),
                config_for(tp),
                opts,
                Arc::clone(&config.clock),
            )
        })?;
        tracing::info!(
            dirs = ?config.log_dirs, partitions = opened.len(), clean_shutdown = clean,
            elapsed_ms = started.elapsed().as_millis() as u64, "loaded logs"
        );
        // From here on a crash is an unclean shutdown.
        for dir in &config.log_dirs {
            let marker = dir.join(CLEAN_SHUTDOWN_FILE);
            if marker.exists() {
                std::fs::remove_file(&marker).at(&marker)?;
                checkpoint::sync_dir(dir)?;
            }
        }
        let logs = opened
            .into_iter()
            .map(|l| (l.topic_partition().clone(), Arc::new(l)))
            .collect();
        Ok(Arc::new(Self {
            config,
            dirs,
            logs: RwLock::new(logs),
            first_dirty: Mutex::new(first_dirty),
            moving: Mutex::new(BTreeMap::new()),
            copy_lock: Mutex::new(()),
            move_lock: Mutex::new(()),
            checkpoint_lock: Mutex::new(()),
            stop: Arc::new((Mutex::new(false), Condvar::new())),
            threads: Mutex::new(Vec::new()),
            clean_start: clean,
            offline_dirs: Mutex::new(BTreeSet::new()),
            doomed: Mutex::new(Vec::new()),
            preferred: Mutex::new(BTreeMap::new()),
        }))
    }

    /// The first data folder.
    pub fn dir(&self) -> &Path {
        &self.dirs[0].path
    }

    /// Every data folder, in `log.dirs` order.
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.path.clone()).collect()
    }

    /// The index (in [`Self::dirs`]) of the folder holding `log`.
    pub fn dir_index_of(&self, log: &Log) -> Option<usize> {
        let parent = log.dir().parent()?;
        self.dirs.iter().position(|d| d.path == parent)
    }

    /// The folder a new partition goes to: the one holding the fewest
    /// partitions (moves in progress count for their destination), the
    /// first such in `log.dirs` order (Kafka's `nextLogDirs`).
    fn next_dir(&self, logs: &BTreeMap<TopicPartition, Arc<Log>>) -> Option<usize> {
        let mut counts = vec![0usize; self.dirs.len()];
        for log in logs.values() {
            if let Some(i) = self.dir_index_of(log) {
                counts[i] += 1;
            }
        }
        for m in lock(&self.moving).values() {
            if let Some(c) = counts.get_mut(m.dest) {
                *c += 1;
            }
        }
        let offline = lock(&self.offline_dirs).clone();
        (0..counts.len())
            .filter(|i| !offline.contains(i))
            .min_by_key(|&i| (counts[i], i))
    }

    /// Remembers folder `dir` for `tp` when it has no log here yet: the
    /// log is created there (Kafka's `maybeUpdatePreferredLogDir`).
    /// Returns whether it was remembered (false: the log exists).
    pub fn prefer_dir(&self, tp: &TopicPartition, dir: usize) -> bool {
        let logs = self.logs.read().unwrap_or_else(|p| p.into_inner());
        if logs.contains_key(tp) || dir >= self.dirs.len() {
            return false;
        }
        lock(&self.preferred).insert(tp.clone(), dir);
        true
    }

    /// Kafka's log dir failure: a folder where any log hit an I/O error
    /// (and went offline) is offline as a whole: every log in it goes
    /// offline (KAFKA_STORAGE_ERROR), no partition is placed or moved
    /// there, its checkpoints are no longer written. Checked by the
    /// scheduler on every tick and before the folders are reported.
    /// Returns the offline folders.
    pub fn offline_dirs(&self) -> BTreeSet<usize> {
        let logs = self.logs();
        let failed: BTreeSet<usize> = logs
            .iter()
            .filter(|l| l.is_offline())
            .filter_map(|l| self.dir_index_of(l))
            .collect();
        let mut offline = lock(&self.offline_dirs);
        for i in failed {
            if offline.insert(i) {
                let dir = &self.dirs[i].path;
                tracing::error!(dir = %dir.display(), "data folder failed: its partitions are offline");
                for l in logs.iter().filter(|l| self.dir_index_of(l) == Some(i)) {
                    l.go_offline(StorageError::Offline(format!(
                        "{} (data folder {} failed)",
                        l.topic_partition(),
                        dir.display()
                    )));
                }
            }
        }
        offline.clone()
    }

    /// Whether the folder was shut down cleanly last time.
    pub fn had_clean_shutdown(&self) -> bool {
        self.clean_start
    }

    pub fn get(&self, tp: &TopicPartition) -> Option<Arc<Log>> {
        self.logs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(tp)
            .cloned()
    }

    /// Every log, in topic-partition order.
    pub fn logs(&self) -> Vec<Arc<Log>> {
        self.logs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// The log of `tp`, created with `config` if it does not exist. The
    /// metadata log is refused: it is never a managed log.
    pub fn get_or_create(&self, tp: &TopicPartition, config: LogConfig) -> Result<Arc<Log>> {
        if tp.topic == CLUSTER_METADATA_TOPIC {
            return Err(bad_file(
                &self.dir().join(tp.dir_name()),
                "the metadata log is owned by the controller, not the log manager",
            ));
        }
        if let Some(l) = self.get(tp) {
            return Ok(l);
        }
        let mut logs = self.logs.write().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = logs.get(tp) {
            return Ok(Arc::clone(l));
        }
        let preferred = lock(&self.preferred)
            .remove(tp)
            .filter(|i| !lock(&self.offline_dirs).contains(i));
        let Some(i) = preferred.or_else(|| self.next_dir(&logs)) else {
            return Err(StorageError::Offline(format!(
                "{tp}: every data folder is offline"
            )));
        };
        let dir = &self.dirs[i].path;
        let path = dir.join(tp.dir_name());
        let log = Arc::new(Log::open(
            &path,
            tp.clone(),
            config,
            LogOpenOptions {
                producer_state: self.config.producer_state,
                ..LogOpenOptions::default()
            },
            Arc::clone(&self.config.clock),
        )?);
        checkpoint::sync_dir(dir)?;
        logs.insert(tp.clone(), Arc::clone(&log));
        Ok(log)
    }

    /// Deletes a partition: its folder is renamed `<tp>.<id>-delete` (so a
    /// crash finishes the job at the next start) and removed after the
    /// default `file.delete.delay.ms`, by the scheduler.
    pub fn delete(&self, tp: &TopicPartition) -> Result<bool> {
        let _moves = lock(&self.move_lock);
        let Some(log) = self
            .logs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(tp)
        else {
            return Ok(false);
        };
        lock(&self.first_dirty).remove(tp);
        let id = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let parent = parent_of(&log)?;
        let doomed = parent.join(format!("{}.{id:x}{DELETE_DIR_SUFFIX}", tp.dir_name()));
        std::fs::rename(log.dir(), &doomed).at(log.dir())?;
        checkpoint::sync_dir(&parent)?;
        self.doom(doomed)?;
        Ok(true)
    }

    /// Removes the renamed folder `path` of a deleted or moved partition
    /// once the default `file.delete.delay.ms` has passed (at once when it
    /// is 0).
    fn doom(&self, path: PathBuf) -> Result<()> {
        let delay = self.config.default_config.file_delete_delay_ms;
        if delay <= 0 {
            return std::fs::remove_dir_all(&path).at(&path);
        }
        let due = self.config.clock.now_ms().saturating_add(delay);
        lock(&self.doomed).push((due, path));
        Ok(())
    }

    /// Removes the doomed folders that are due.
    fn remove_doomed_due(&self) {
        let now = self.config.clock.now_ms();
        let due: Vec<PathBuf> = {
            let mut doomed = lock(&self.doomed);
            let (due, later): (Vec<_>, Vec<_>) = doomed.drain(..).partition(|(at, _)| *at <= now);
            *doomed = later;
            due.into_iter().map(|(_, p)| p).collect()
        };
        for path in &due {
            match std::fs::remove_dir_all(path) {
                Ok(()) => {
                    tracing::debug!(path = %path.display(), "removed a deleted partition folder")
                }
                Err(e) => {
                    tracing::error!(path = %path.display(), error = %e, "cannot remove a deleted partition folder (it goes at the next start)")
                }
            }
        }
    }

    /// Folders of deleted or moved partitions not removed yet.
    pub fn pending_deletions(&self) -> Vec<PathBuf> {
        lock(&self.doomed).iter().map(|(_, p)| p.clone()).collect()
    }

    /// Moves a partition the metadata does not know out of the way without
    /// deleting anything: its folder is renamed `<tp>.<id>-stray` (Kafka's
    /// stray logs; the topic part is shortened so the name stays within 255
    /// bytes) and the log leaves the manager. Returns the new folder.
    pub fn rename_stray(&self, tp: &TopicPartition) -> Result<Option<PathBuf>> {
        let _moves = lock(&self.move_lock);
        let Some(log) = self
            .logs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(tp)
        else {
            return Ok(None);
        };
        lock(&self.first_dirty).remove(tp);
        // Flush and seal what is there so the folder is complete on its own.
        if let Err(e) = log.close() {
            tracing::warn!(partition = %tp, error = %e, "closing stray log failed; renaming it anyway");
        }
        let parent = parent_of(&log)?;
        let aside = parent.join(stray_dir_name(tp));
        std::fs::rename(log.dir(), &aside).at(log.dir())?;
        checkpoint::sync_dir(&parent)?;
        Ok(Some(aside))
    }

    /// One retention pass over every log; returns segments deleted.
    pub fn run_retention(&self) -> usize {
        let mut deleted = 0;
        for log in self.logs() {
            if log.topic_partition().topic == CLUSTER_METADATA_TOPIC {
                continue; // never managed; belt and braces
            }
            match log.delete_old_segments() {
                Ok(n) => deleted += n,
                Err(e) => {
                    tracing::error!(partition = %log.topic_partition(), error = %e, "retention failed")
                }
            }
        }
        deleted
    }

    /// Forgets producer ids idle for `producer.id.expiration.ms` in every
    /// log; returns how many went.
    pub fn remove_expired_producers(&self) -> usize {
        self.logs()
            .iter()
            .map(|log| log.remove_expired_producers())
            .sum()
    }

    /// Unlinks segment files whose `file.delete.delay.ms` has passed.
    pub fn delete_expired_files(&self) {
        for log in self.logs() {
            if let Err(e) = log.delete_expired_files() {
                tracing::error!(partition = %log.topic_partition(), error = %e, "deleting segment files failed");
            }
        }
        self.remove_doomed_due();
    }

    /// Flushes logs whose `flush.ms` elapsed, and logs whose rolled
    /// segments are not yet on disk (Kafka flushes a segment when it rolls).
    pub fn flush_due(&self) {
        for log in self.logs() {
            if log.is_offline() {
                continue;
            }
            let config = log.config();
            let by_time =
                config.flush_ms < i64::MAX && log.ms_since_last_flush() >= config.flush_ms;
            let rolled = log
                .segment_base_offsets()
                .last()
                .copied()
                .filter(|&active| log.recovery_point() < active);
            // Kafka flushes a roll up to the new segment's base, not the
            // active segment that appends are writing to.
            let flushed = match (by_time, rolled) {
                (true, _) => log.flush(),
                (false, Some(base)) => log.flush_up_to(base),
                (false, None) => Ok(()),
            };
            if let Err(e) = flushed {
                tracing::error!(partition = %log.topic_partition(), error = %e, "flush failed");
            }
        }
    }

    /// Writes the recovery point, log start offset and high watermark
    /// checkpoints of every folder (each lists the partitions in it).
    pub fn checkpoint(&self) -> Result<()> {
        let _c = lock(&self.checkpoint_lock);
        let logs = self.logs();
        let mut first_err = None;
        let offline = self.offline_dirs();
        for i in (0..self.dirs.len()).filter(|i| !offline.contains(i)) {
            if let Err(e) = self.checkpoint_dir(i, &logs) {
                tracing::error!(dir = %self.dirs[i].path.display(), error = %e, "writing checkpoints failed");
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// The checkpoints of folder `i`: its logs, and the copies being moved
    /// into it whose move is about to commit. The caller holds
    /// `checkpoint_lock`.
    fn checkpoint_dir(&self, i: usize, logs: &[Arc<Log>]) -> Result<()> {
        let mut rows: Vec<(TopicPartition, [i64; 3])> = logs
            .iter()
            .filter(|l| self.dir_index_of(l) == Some(i))
            .map(|l| {
                (
                    l.topic_partition().clone(),
                    [l.recovery_point(), l.log_start_offset(), l.high_watermark()],
                )
            })
            .collect();
        for (tp, m) in lock(&self.moving).iter() {
            if let (true, Some(offsets)) = (m.dest == i, m.committing) {
                rows.push((tp.clone(), offsets));
            }
        }
        let column = |k: usize| -> BTreeMap<TopicPartition, i64> {
            rows.iter().map(|(tp, o)| (tp.clone(), o[k])).collect()
        };
        let dir = &self.dirs[i].path;
        checkpoint::write_offsets(&dir.join(RECOVERY_POINT_CHECKPOINT), &column(0))?;
        checkpoint::write_offsets(&dir.join(LOG_START_OFFSET_CHECKPOINT), &column(1))?;
        checkpoint::write_offsets(&dir.join(REPLICATION_OFFSET_CHECKPOINT), &column(2))?;
        Ok(())
    }

    /// Cleans the dirtiest compacted log that needs it; returns what was done.
    pub fn clean_once(&self) -> Result<Option<(TopicPartition, CleanStats)>> {
        let dirty = lock(&self.first_dirty).clone();
        let mut best: Option<(f64, Arc<Log>, i64)> = None;
        for log in self.logs() {
            if log.is_offline() || log.topic_partition().topic == CLUSTER_METADATA_TOPIC {
                continue;
            }
            let first = dirty.get(log.topic_partition()).copied().unwrap_or(0);
            if let Some(c) = cleaner::needs_cleaning(&log, first) {
                if best.as_ref().is_none_or(|(r, _, _)| c.dirty_ratio() > *r) {
                    best = Some((c.dirty_ratio(), log, first));
                }
            }
        }
        let Some((_, log, first)) = best else {
            return Ok(None);
        };
        let Some(stats) = cleaner::clean(&log, first, &self.config.cleaner)? else {
            return Ok(None);
        };
        let tp = log.topic_partition().clone();
        let snapshot = {
            let mut d = lock(&self.first_dirty);
            d.insert(tp.clone(), stats.end);
            d.clone()
        };
        // Each folder's cleaner checkpoint lists the partitions in it.
        if let Some(i) = self.dir_index_of(&log) {
            let here: BTreeMap<TopicPartition, i64> = snapshot
                .into_iter()
                .filter(|(t, _)| {
                    self.get(t)
                        .is_some_and(|l| self.dir_index_of(&l) == Some(i))
                })
                .collect();
            checkpoint::write_offsets(&self.dirs[i].path.join(CLEANER_OFFSET_CHECKPOINT), &here)?;
        }
        Ok(Some((tp, stats)))
    }

    /// Starts the scheduler (retention, flush, checkpoints) and, when
    /// enabled, the cleaner thread.
    pub fn start_background(self: &Arc<Self>) {
        let mut threads = lock(&self.threads);
        let me = Arc::clone(self);
        threads.push(spawn("sluice-log-scheduler", move || me.scheduler_loop()));
        if self.config.cleaner_enable {
            let me = Arc::clone(self);
            threads.push(spawn("sluice-log-cleaner", move || me.cleaner_loop()));
        }
    }

    /// Waits up to `ms`; true when shutdown was requested.
    fn wait_stop(&self, ms: u64) -> bool {
        let (m, cv) = &*self.stop;
        let guard = lock(m);
        let (guard, _) = cv
            .wait_timeout_while(guard, Duration::from_millis(ms), |stop| !*stop)
            .unwrap_or_else(|p| p.into_inner());
        *guard
    }

    fn scheduler_loop(&self) {
        let c = &self.config;
        let tick = c
            .flush_check_interval_ms
            .min(c.retention_check_interval_ms)
            .min(c.producer_id_expiration_check_interval_ms)
            .max(10);
        let mut next_retention =
            Instant::now() + Duration::from_millis(c.retention_check_interval_ms);
        let mut next_expiry =
            Instant::now() + Duration::from_millis(c.producer_id_expiration_check_interval_ms);
        let mut next_checkpoint = Instant::now() + Duration::from_millis(c.checkpoint_interval_ms);
        while !self.wait_stop(tick) {
            self.flush_due();
            self.offline_dirs();
            self.delete_expired_files();
            let now = Instant::now();
            if now >= next_retention {
                self.run_retention();
                next_retention = now + Duration::from_millis(c.retention_check_interval_ms);
            }
            if now >= next_expiry {
                self.remove_expired_producers();
                next_expiry =
                    now + Duration::from_millis(c.producer_id_expiration_check_interval_ms);
            }
            if now >= next_checkpoint {
                if let Err(e) = self.checkpoint() {
                    tracing::error!(error = %e, "writing checkpoints failed");
                }
                next_checkpoint = now + Duration::from_millis(c.checkpoint_interval_ms);
            }
        }
    }

    fn cleaner_loop(&self) {
        loop {
            let backoff = match self.clean_once() {
                Ok(Some(_)) => 0,
                Ok(None) => self.config.cleaner_backoff_ms,
                Err(e) => {
                    tracing::error!(error = %e, "log cleaning failed");
                    self.config.cleaner_backoff_ms
                }
            };
            if self.wait_stop(backoff.max(1)) {
                return;
            }
        }
    }

    /// Stops background work, closes every log (flush, trim indexes),
    /// writes the checkpoints and the clean-shutdown marker.
    pub fn shutdown(&self) -> Result<()> {
        {
            let (m, cv) = &*self.stop;
            *lock(m) = true;
            cv.notify_all();
        }
        for t in lock(&self.threads).drain(..) {
            let _ = t.join();
        }
        let mut clean = true;
        for log in self.logs() {
            if log.is_offline() {
                clean = false;
                continue;
            }
            if let Err(e) = log.close() {
                tracing::error!(partition = %log.topic_partition(), error = %e, "closing log failed");
                clean = false;
            }
        }
        self.checkpoint()?;
        if clean {
            for d in &self.dirs {
                let marker = d.path.join(CLEAN_SHUTDOWN_FILE);
                std::fs::write(&marker, b"{\"version\":0,\"brokerEpoch\":-1}").at(&marker)?;
                checkpoint::sync_dir(&d.path)?;
            }
        }
        tracing::info!(dirs = ?self.config.log_dirs, clean, "log manager shut down");
        Ok(())
    }
}

/// Where the last session left the partitions of one folder.
struct DirCheckpoints {
    recovery: BTreeMap<TopicPartition, i64>,
    starts: BTreeMap<TopicPartition, i64>,
    hws: BTreeMap<TopicPartition, i64>,
}

/// The data folder holding a log's folder.
fn parent_of(log: &Log) -> Result<PathBuf> {
    log.dir()
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| bad_file(log.dir(), "partition folder has no parent folder"))
}

/// Scans folder `i`: removes folders of deleted partitions, keeps stray
/// ones aside, collects partition folders into `found` (a partition
/// already found in another folder is Kafka's duplicate-log error) and
/// future folders (moves) into `futures`.
fn scan_dir(
    i: usize,
    dir: &Path,
    found: &mut BTreeMap<TopicPartition, (usize, PathBuf)>,
    futures: &mut Vec<(TopicPartition, usize, PathBuf)>,
) -> Result<()> {
    for entry in std::fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(DELETE_DIR_SUFFIX) {
            // Renamed by `delete` (or a committed move) first.
            tracing::info!(path = %path.display(), "removing a deleted partition folder");
            std::fs::remove_dir_all(&path).at(&path)?;
            continue;
        }
        if name.ends_with(STRAY_DIR_SUFFIX) {
            tracing::warn!(path = %path.display(), "keeping stray partition folder (not loaded; remove it by hand once inspected)");
            continue;
        }
        if let Some(stem) = name.strip_suffix(FUTURE_DIR_SUFFIX) {
            let tp = stem
                .rsplit_once('.')
                .and_then(|(tp, _id)| TopicPartition::from_dir_name(tp))
                .ok_or_else(|| {
                    bad_file(&path, "folder name is not <topic>-<partition>.<id>-future")
                })?;
            futures.push((tp, i, path));
            continue;
        }
        let Some(tp) = TopicPartition::from_dir_name(&name) else {
            return Err(bad_file(&path, "folder name is not <topic>-<partition>"));
        };
        if tp.topic == CLUSTER_METADATA_TOPIC {
            // The controller opens it with its own settings.
            continue;
        }
        if let Some((_, other)) = found.get(&tp) {
            return Err(StorageError::Layout(format!(
                "duplicate log directories for {tp} are found in both {} and {}: \
                 recover by deleting one of the two folders (the one in the \
                 data folder that failed recently, if any) before starting",
                other.display(),
                path.display()
            )));
        }
        found.insert(tp, (i, path));
    }
    Ok(())
}

/// `<topic>-<partition>.<unique id>-stray`, the topic shortened so the
/// name fits in 255 bytes (Kafka's `logDirNameWithSuffixCappedLength`).
fn stray_dir_name(tp: &TopicPartition) -> String {
    let id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let suffix = format!("-{}.{id:032x}{STRAY_DIR_SUFFIX}", tp.partition);
    let keep = tp.topic.len().min(255usize.saturating_sub(suffix.len()));
    // Topic names are ASCII (Kafka's rules), so any byte index is a boundary.
    let topic = tp.topic.get(..keep).unwrap_or(&tp.topic);
    format!("{topic}{suffix}")
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    match std::thread::Builder::new().name(name.to_string()).spawn(f) {
        Ok(h) => h,
        Err(e) => panic!("cannot start thread {name}: {e}"),
    }
}

/// Opens partitions on `threads` threads; the first error wins.
fn open_parallel(
    todo: &[(TopicPartition, PathBuf)],
    threads: usize,
    open: impl Fn(&TopicPartition, &Path) -> Result<Log> + Sync,
) -> Result<Vec<Log>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Mutex<Vec<Result<Log>>> = Mutex::new(Vec::with_capacity(todo.len()));
    std::thread::scope(|s| {
        for _ in 0..threads.min(todo.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((tp, path)) = todo.get(i) else { break };
                let r = open(tp, path);
                lock(&results).push(r);
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .collect()
}

/// Takes an exclusive `flock` on `<dir>/.lock` so two processes never share
/// a data folder.
fn lock_folder(dir: &Path) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let path = dir.join(".lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .at(&path)?;
    // SAFETY: flock on a file descriptor we own.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(bad_file(&path, "data folder is in use by another process"));
    }
    Ok(f)
}

/// Checks `meta.properties` (when present) names a format this build reads;
/// writes `version=1` when the folder has none.
fn check_meta_properties(dir: &Path) -> Result<()> {
    let path = dir.join(META_PROPERTIES);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::write(&path, "version=1\n").at(&path)?;
            return Ok(());
        }
        Err(e) => return Err(StorageError::Io { path, source: e }),
    };
    let version = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix("version="))
        .ok_or_else(|| bad_file(&path, "no version= line"))?;
    if !SUPPORTED_VERSIONS.contains(&version.trim()) {
        return Err(bad_file(
            &path,
            format!("unknown data folder format version {version} (supported: 0, 1)"),
        ));
    }
    Ok(())
}

mod relocate;

pub use relocate::{MoveOutcome, MoveState};

#[cfg(test)]
mod jbod_tests;
#[cfg(test)]
mod tests;
