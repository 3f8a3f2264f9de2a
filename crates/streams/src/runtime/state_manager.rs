//! A task's state on this instance (Kafka's `ProcessorStateManager`): its
//! locked folder, its stores opened and restored, the changelog offsets
//! they hold, and the checkpoint written from them.
//!
//! Opening a task: lock `state.dir/<app>/<task>/` (or come back later if
//! another thread or instance holds it); read `.checkpoint` (a corrupt file
//! counts as missing and is deleted); a logged persistent store without a
//! checkpoint entry, or whose folder is gone, is wiped and restored from
//! scratch, one with an entry is restored from it; in-memory stores always restore everything. A
//! checkpoint past the changelog's end ([`StreamsError::TaskCorrupted`])
//! wipes the task's persistent stores and restores them from scratch.

use std::collections::BTreeMap;

use sluice_client::TopicPartition;

use super::task::{StoreSpec, TaskFactory};
use crate::error::{Result, StreamsError};
use crate::internal_topics::changelog_topic_name;
use crate::restore::{ChangelogRestore, StoreChangelogReader};
use crate::state::directory::{StateDirectory, TaskDirLock};
use crate::state::persistent::PersistentKeyValueStore;
use crate::state::KeyValueStore;
use crate::task_id::TaskId;

/// The stores of a task, by name.
pub type Stores = BTreeMap<String, Box<dyn KeyValueStore>>;

/// The state side of one active task.
#[derive(Debug)]
pub struct TaskStateManager {
    task: TaskId,
    _lock: TaskDirLock,
    /// Changelog partition -> (store, persistent).
    changelogs: BTreeMap<TopicPartition, (String, bool)>,
    /// Changelog partition -> offset of the last record the store holds.
    offsets: BTreeMap<TopicPartition, i64>,
    /// Records restored when the task was opened.
    restored: u64,
}

impl TaskStateManager {
    /// Opens `task`'s stores and restores them; `Ok(None)` when its folder
    /// is locked by someone else (try again later).
    pub async fn open(
        dir: &StateDirectory,
        application_id: &str,
        factory: &dyn TaskFactory,
        task: TaskId,
        reader: &mut StoreChangelogReader,
    ) -> Result<Option<(Self, Stores)>> {
        let Some(lock) = dir.lock(task)? else {
            return Ok(None);
        };
        let specs = factory.stores(task.subtopology);
        let changelog_of = |s: &StoreSpec| {
            s.logged.then(|| {
                TopicPartition::new(
                    changelog_topic_name(application_id, &s.name),
                    task.partition,
                )
            })
        };
        let checkpoint = match dir.checkpoint(task).read() {
            Ok(c) => c.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(%task, "corrupt checkpoint, restoring from scratch: {e}");
                dir.checkpoint(task).delete()?;
                BTreeMap::new()
            }
        };
        let mut checkpoint = checkpoint;
        let mut changelogs = BTreeMap::new();
        for s in &specs {
            if let Some(tp) = changelog_of(s) {
                // A store folder that is gone holds nothing, whatever the
                // checkpoint says: restore it from scratch.
                if s.persistent && !dir.store_dir(task, &s.name).exists() {
                    checkpoint.remove(&tp);
                }
                changelogs.insert(tp, (s.name.clone(), s.persistent));
            }
        }
        let mut me = Self {
            task,
            _lock: lock,
            changelogs,
            offsets: BTreeMap::new(),
            restored: 0,
        };
        let mut stores = me.open_stores(dir, factory, &specs, &checkpoint)?;
        let starts: BTreeMap<TopicPartition, Option<i64>> = me
            .changelogs
            .iter()
            .map(|(tp, (_, persistent))| {
                (
                    tp.clone(),
                    if *persistent {
                        checkpoint.get(tp).copied()
                    } else {
                        None
                    },
                )
            })
            .collect();
        match me.restore(&mut stores, &starts, reader).await {
            Ok(()) => {}
            Err(StreamsError::TaskCorrupted(why)) => {
                tracing::warn!(%task, "{why}: wiping its stores and restoring from scratch");
                for s in stores.values_mut() {
                    s.close()?;
                }
                drop(stores);
                dir.checkpoint(task).delete()?;
                stores = me.open_stores(dir, factory, &specs, &BTreeMap::new())?;
                let scratch = starts.keys().map(|tp| (tp.clone(), None)).collect();
                me.restore(&mut stores, &scratch, reader).await?;
            }
            Err(e) => return Err(e),
        }
        me.write_checkpoint(dir)?;
        Ok(Some((me, stores)))
    }

    /// Opens every store; logged persistent stores missing from `checkpoint`
    /// are wiped first.
    fn open_stores(
        &self,
        dir: &StateDirectory,
        factory: &dyn TaskFactory,
        specs: &[StoreSpec],
        checkpoint: &BTreeMap<TopicPartition, i64>,
    ) -> Result<Stores> {
        let mut stores: Stores = BTreeMap::new();
        for s in specs {
            let store: Box<dyn KeyValueStore> = if s.persistent {
                let changelog = self
                    .changelogs
                    .iter()
                    .find(|(_, (name, _))| *name == s.name)
                    .map(|(tp, _)| tp);
                if let Some(tp) = changelog {
                    if !checkpoint.contains_key(tp) {
                        dir.wipe_store(self.task, &s.name, None)?;
                    }
                }
                Box::new(PersistentKeyValueStore::open(
                    &s.name,
                    &dir.store_dir(self.task, &s.name),
                )?)
            } else {
                factory.in_memory_store(&s.name)
            };
            stores.insert(s.name.clone(), store);
        }
        Ok(stores)
    }

    async fn restore(
        &mut self,
        stores: &mut Stores,
        starts: &BTreeMap<TopicPartition, Option<i64>>,
        reader: &mut StoreChangelogReader,
    ) -> Result<()> {
        let by_store: BTreeMap<&String, &TopicPartition> = self
            .changelogs
            .iter()
            .map(|(tp, (name, _))| (name, tp))
            .collect();
        let mut targets: Vec<ChangelogRestore<'_>> = stores
            .iter_mut()
            .filter_map(|(name, store)| {
                let tp = by_store.get(name)?;
                Some(ChangelogRestore {
                    store: store.as_mut(),
                    changelog: (*tp).clone(),
                    checkpoint: starts.get(*tp).copied().flatten(),
                })
            })
            .collect();
        let results = reader.restore(&mut targets).await?;
        for r in results {
            self.restored += r.restored;
            if let Some(o) = r.checkpoint {
                self.offsets.insert(r.changelog, o);
            }
        }
        Ok(())
    }

    /// The task.
    pub fn task(&self) -> TaskId {
        self.task
    }

    /// Records restored when the task was opened.
    pub fn restored(&self) -> u64 {
        self.restored
    }

    /// Notes that the changelog record of `partition` at `offset` was
    /// written (from the producer's acknowledgement).
    pub fn changelog_written(&mut self, partition: &TopicPartition, offset: i64) {
        if self.changelogs.contains_key(partition) {
            let e = self.offsets.entry(partition.clone()).or_insert(offset);
            *e = (*e).max(offset);
        }
    }

    /// The changelog partitions of this task.
    pub fn changelog_partitions(&self) -> impl Iterator<Item = &TopicPartition> {
        self.changelogs.keys()
    }

    /// Writes `.checkpoint` with the offsets of the persistent stores. Call
    /// after the stores and the producer were flushed.
    pub fn write_checkpoint(&self, dir: &StateDirectory) -> Result<()> {
        let offsets: BTreeMap<TopicPartition, i64> = self
            .offsets
            .iter()
            .filter(|(tp, _)| self.changelogs.get(*tp).is_some_and(|(_, p)| *p))
            .map(|(tp, o)| (tp.clone(), *o))
            .collect();
        if self.changelogs.values().any(|(_, p)| *p) {
            dir.checkpoint(self.task).write(&offsets)?;
        }
        Ok(())
    }
}
