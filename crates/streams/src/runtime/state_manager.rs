//! A task's state on this instance (Kafka's `ProcessorStateManager`): its
//! locked folder, where restoration of each logged store starts, the
//! changelog offsets the stores hold, and the checkpoint written from them.
//!
//! Opening a task: lock `state.dir/<app>/<task>/` (or come back later if
//! another thread or instance holds it); read `.checkpoint` (a corrupt file
//! counts as missing and is deleted); a logged persistent store without a
//! checkpoint entry, or whose folder is gone, is wiped and restored from
//! scratch, one with an entry is restored from it; in-memory stores always
//! restore everything. A checkpoint past the changelog's end
//! ([`StreamsError::TaskCorrupted`](crate::StreamsError::TaskCorrupted))
//! makes the caller close the task, [`wipe`](TaskStateManager::wipe) its
//! persistent stores and restore them from scratch.

use std::collections::BTreeMap;

use sluice_client::TopicPartition;

use super::task::{RuntimeTask, StoreSpec};
use crate::error::Result;
use crate::internal_topics::changelog_topic_name;
use crate::restore::{RestoreTarget, RestoredChangelog, StoreChangelogReader};
use crate::state::directory::{StateDirectory, TaskDirLock};
use crate::task_id::TaskId;

/// A logged store of the task.
#[derive(Debug, Clone)]
struct Logged {
    store: String,
    persistent: bool,
    /// Where restoration starts: the offset of the last record the store holds.
    start: Option<i64>,
}

/// The state side of one active task.
#[derive(Debug)]
pub struct TaskStateManager {
    task: TaskId,
    _lock: TaskDirLock,
    /// Changelog partition -> its store.
    changelogs: BTreeMap<TopicPartition, Logged>,
    /// Changelog partition -> offset of the last record the store holds.
    offsets: BTreeMap<TopicPartition, i64>,
    /// Records restored so far.
    restored: u64,
}

impl TaskStateManager {
    /// Locks `task`'s folder and works out where each store's restoration
    /// starts, wiping persistent stores that must start from scratch;
    /// `Ok(None)` when the folder is locked by someone else.
    pub fn open(
        dir: &StateDirectory,
        application_id: &str,
        specs: &[StoreSpec],
        task: TaskId,
    ) -> Result<Option<Self>> {
        let Some(lock) = dir.lock(task)? else {
            return Ok(None);
        };
        let checkpoint = match dir.checkpoint(task).read() {
            Ok(c) => c.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(%task, "corrupt checkpoint, restoring from scratch: {e}");
                dir.checkpoint(task).delete()?;
                BTreeMap::new()
            }
        };
        let mut changelogs = BTreeMap::new();
        for s in specs.iter().filter(|s| s.logged) {
            let tp = TopicPartition::new(
                changelog_topic_name(application_id, &s.name),
                task.partition,
            );
            let start = if s.persistent {
                // A store folder that is gone holds nothing, whatever the
                // checkpoint says.
                let start = checkpoint
                    .get(&tp)
                    .copied()
                    .filter(|_| dir.store_dir(task, &s.name).exists());
                if start.is_none() {
                    dir.wipe_store(task, &s.name, None)?;
                }
                start
            } else {
                None
            };
            changelogs.insert(
                tp,
                Logged {
                    store: s.name.clone(),
                    persistent: s.persistent,
                    start,
                },
            );
        }
        Ok(Some(Self {
            task,
            _lock: lock,
            changelogs,
            offsets: BTreeMap::new(),
            restored: 0,
        }))
    }

    /// What to restore: each logged store with its changelog partition and
    /// start point.
    pub fn targets(&self) -> Vec<RestoreTarget> {
        self.changelogs
            .iter()
            .map(|(tp, l)| RestoreTarget {
                store: l.store.clone(),
                changelog: tp.clone(),
                checkpoint: l.start,
            })
            .collect()
    }

    /// Takes in the outcome of restoring [`targets`](Self::targets).
    pub fn restored_from(&mut self, results: &[RestoredChangelog]) {
        for r in results {
            self.restored += r.restored;
            if let Some(o) = r.checkpoint {
                self.offsets.insert(r.changelog.clone(), o);
            }
        }
    }

    /// Restores every logged store of `task` from its changelog.
    pub async fn restore(
        &mut self,
        task: &mut dyn RuntimeTask,
        reader: &mut StoreChangelogReader,
    ) -> Result<()> {
        let targets = self.targets();
        let stores: Vec<String> = targets.iter().map(|t| t.store.clone()).collect();
        let results = reader
            .restore_with(&targets, &mut |i, key, value, ts| {
                task.restore(&stores[i], key, value, ts)
            })
            .await?;
        self.restored_from(&results);
        Ok(())
    }

    /// Forgets the task's persistent state: deletes the checkpoint and the
    /// persistent stores' folders (the task's stores must be closed), so the
    /// next [`restore`](Self::restore) starts from scratch.
    pub fn wipe(&mut self, dir: &StateDirectory) -> Result<()> {
        dir.checkpoint(self.task).delete()?;
        for l in self.changelogs.values_mut() {
            if l.persistent {
                dir.wipe_store(self.task, &l.store, None)?;
            }
            l.start = None;
        }
        self.offsets.clear();
        Ok(())
    }

    /// The task.
    pub fn task(&self) -> TaskId {
        self.task
    }

    /// Records restored so far.
    pub fn restored(&self) -> u64 {
        self.restored
    }

    /// Whether `partition` is one of this task's changelog partitions.
    pub fn is_changelog(&self, partition: &TopicPartition) -> bool {
        self.changelogs.contains_key(partition)
    }

    /// Notes that the changelog record of `partition` at `offset` was
    /// written (from the producer's acknowledgement).
    pub fn changelog_written(&mut self, partition: &TopicPartition, offset: i64) {
        if self.changelogs.contains_key(partition) {
            let e = self.offsets.entry(partition.clone()).or_insert(offset);
            *e = (*e).max(offset);
        }
    }

    /// Writes `.checkpoint` with the offsets of the persistent stores. Call
    /// after the stores and the producer were flushed.
    pub fn write_checkpoint(&self, dir: &StateDirectory) -> Result<()> {
        if !self.changelogs.values().any(|l| l.persistent) {
            return Ok(());
        }
        let offsets: BTreeMap<TopicPartition, i64> = self
            .offsets
            .iter()
            .filter(|(tp, _)| self.changelogs.get(*tp).is_some_and(|l| l.persistent))
            .map(|(tp, o)| (tp.clone(), *o))
            .collect();
        dir.checkpoint(self.task).write(&offsets)
    }
}
