//! Changelog restoration (Kafka's `StoreChangelogReader`): before a task
//! processes anything, each of its stores is brought up to date from its
//! changelog partition.
//!
//! A restore consumer (no group, manual assignment) reads every changelog
//! partition from the store's checkpoint (the offset after the last
//! record the store holds) or, without a checkpoint, from the log start, up
//! to the end offset captured when restoration began. Each record is
//! applied to the store: a value is a put, a null value (tombstone) a
//! delete; records without a key are skipped. The number of records
//! applied is reported per store, and the offset of the last one becomes
//! the store's new checkpoint.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;

use sluice_client::admin::OffsetSpec;
use sluice_client::consumer::{Consumer, ConsumerConfig, OffsetReset};
use sluice_client::{Admin, ClientConfig, TopicPartition};

use crate::error::{Result, StreamsError};
use crate::state::KeyValueStore;

/// One store to restore.
#[derive(Debug)]
pub struct ChangelogRestore<'a> {
    /// The store.
    pub store: &'a mut dyn KeyValueStore,
    /// Its changelog partition.
    pub changelog: TopicPartition,
    /// The offset of the last changelog record the store already holds
    /// (from the checkpoint); `None` restores from the log start.
    pub checkpoint: Option<i64>,
}

/// One store to restore through [`StoreChangelogReader::restore_with`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreTarget {
    /// The store's name.
    pub store: String,
    /// Its changelog partition.
    pub changelog: TopicPartition,
    /// The offset of the last changelog record the store already holds;
    /// `None` restores from the log start.
    pub checkpoint: Option<i64>,
}

/// What restoring one store did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredChangelog {
    /// The changelog partition.
    pub changelog: TopicPartition,
    /// Where reading started.
    pub start_offset: i64,
    /// The end offset captured at the start.
    pub end_offset: i64,
    /// Records applied to the store.
    pub restored: u64,
    /// The offset of the last record the store now holds: its new
    /// checkpoint (`None` if the changelog had nothing for it).
    pub checkpoint: Option<i64>,
}

/// Reads changelogs into stores with a consumer of its own.
#[derive(Debug)]
pub struct StoreChangelogReader {
    consumer: Consumer,
    /// Looks up offsets (the consumer is not `Sync`, so its own lookups
    /// cannot be awaited from a task that must be `Send`).
    admin: Admin,
    /// Give up when no record arrives for this long while some remain.
    stall_timeout: Duration,
}

impl StoreChangelogReader {
    /// A reader on `client` (the restore consumer has no group).
    pub async fn new(client: ClientConfig) -> Result<Self> {
        let mut cfg = ConsumerConfig::new(client);
        cfg.enable_auto_commit = false;
        cfg.auto_offset_reset = OffsetReset::Earliest;
        cfg.max_poll_records = 1000;
        let consumer = Consumer::new(cfg).await?;
        Ok(Self {
            admin: Admin::from_cluster(consumer.cluster().clone()),
            consumer,
            stall_timeout: Duration::from_secs(60),
        })
    }

    /// Sets how long restoration may go without progress before failing.
    pub fn set_stall_timeout(&mut self, timeout: Duration) {
        self.stall_timeout = timeout;
    }

    /// Restores every store in `stores` (see the module docs). A checkpoint
    /// at or past the changelog's end offset means the store holds data the
    /// changelog does not: that is [`StreamsError::TaskCorrupted`], and the
    /// caller wipes the store and restores it from scratch.
    pub async fn restore(
        &mut self,
        stores: &mut [ChangelogRestore<'_>],
    ) -> Result<Vec<RestoredChangelog>> {
        let targets: Vec<RestoreTarget> = stores
            .iter()
            .map(|s| RestoreTarget {
                store: s.store.name().to_string(),
                changelog: s.changelog.clone(),
                checkpoint: s.checkpoint,
            })
            .collect();
        let results = self
            .restore_with(&targets, &mut |i, key, value, _timestamp| {
                let store = &mut *stores[i].store;
                match value {
                    Some(v) => store.put(key, v),
                    None => store.delete(&key).map(|_| ()),
                }
            })
            .await?;
        for (s, res) in stores.iter_mut().zip(&results) {
            if res.restored > 0 {
                s.store.flush()?;
            }
        }
        Ok(results)
    }

    /// The indexes of `targets` whose checkpoint is at or past their
    /// changelog's end offset: their state is newer than the changelog
    /// (`TaskCorrupted`), so they must be wiped and restored from scratch.
    pub async fn corrupted(&mut self, targets: &[RestoreTarget]) -> Result<Vec<usize>> {
        let tps: Vec<TopicPartition> = targets
            .iter()
            .filter(|t| t.checkpoint.is_some())
            .map(|t| t.changelog.clone())
            .collect();
        if tps.is_empty() {
            return Ok(Vec::new());
        }
        let ends = Self::offsets(&self.admin, &tps, OffsetSpec::Latest).await?;
        Ok(targets
            .iter()
            .enumerate()
            .filter(|(_, t)| {
                t.checkpoint
                    .is_some_and(|c| ends.get(&t.changelog).is_some_and(|e| c + 1 > *e))
            })
            .map(|(i, _)| i)
            .collect())
    }

    /// [`restore`](Self::restore) for stores the caller applies records to
    /// itself (Kafka's `StateRestoreCallback`): `apply(i, key, value,
    /// timestamp)` puts (`Some`) or deletes (`None`) `key` in the store of
    /// `targets[i]`; `timestamp` is the changelog record's.
    pub async fn restore_with(
        &mut self,
        targets: &[RestoreTarget],
        apply: &mut (dyn FnMut(usize, Bytes, Option<Bytes>, i64) -> Result<()> + Send),
    ) -> Result<Vec<RestoredChangelog>> {
        let tps: Vec<TopicPartition> = targets.iter().map(|s| s.changelog.clone()).collect();
        if tps.is_empty() {
            return Ok(Vec::new());
        }
        let ends = Self::offsets(&self.admin, &tps, OffsetSpec::Latest).await?;
        let starts = Self::offsets(&self.admin, &tps, OffsetSpec::Earliest).await?;
        let mut results = Vec::with_capacity(targets.len());
        let mut index: BTreeMap<TopicPartition, usize> = BTreeMap::new();
        let mut remaining: Vec<TopicPartition> = Vec::new();
        for (i, s) in targets.iter().enumerate() {
            let tp = &s.changelog;
            let end = *ends.get(tp).ok_or_else(|| StreamsError::InternalTopic {
                topic: tp.topic.clone(),
                message: format!("no end offset for changelog partition {tp}"),
            })?;
            let log_start = starts.get(tp).copied().unwrap_or(0);
            let start = match s.checkpoint {
                Some(c) if c + 1 > end => {
                    return Err(StreamsError::TaskCorrupted(format!(
                        "store {} checkpointed offset {c} of {tp}, past the changelog end {end}",
                        s.store
                    )))
                }
                Some(c) => (c + 1).max(log_start),
                None => log_start,
            };
            results.push(RestoredChangelog {
                changelog: tp.clone(),
                start_offset: start,
                end_offset: end,
                restored: 0,
                checkpoint: s.checkpoint,
            });
            index.insert(tp.clone(), i);
            if start < end {
                remaining.push(tp.clone());
            }
        }
        self.consumer.assign(&remaining)?;
        for tp in &remaining {
            let start = results[index[tp]].start_offset;
            self.consumer.seek(tp, start)?;
        }
        let mut last_progress = Instant::now();
        while !remaining.is_empty() {
            let records = self.consumer.poll(Duration::from_millis(200)).await?;
            if !records.is_empty() {
                last_progress = Instant::now();
            }
            for r in records {
                let tp = TopicPartition::new(&*r.topic, r.partition);
                let Some(&i) = index.get(&tp) else { continue };
                if let Some(key) = r.key {
                    apply(i, key, r.value, r.timestamp)?;
                }
                let res = &mut results[i];
                res.restored += 1;
                res.checkpoint = Some(res.checkpoint.map_or(r.offset, |c| c.max(r.offset)));
            }
            let mut done = Vec::new();
            for tp in &remaining {
                if self.consumer.position(tp).await? >= results[index[tp]].end_offset {
                    done.push(tp.clone());
                }
            }
            if !done.is_empty() {
                remaining.retain(|tp| !done.contains(tp));
                self.consumer.assign(&remaining)?;
            } else if last_progress.elapsed() > self.stall_timeout {
                return Err(StreamsError::TaskCorrupted(format!(
                    "restoring {remaining:?} made no progress for {:?}",
                    self.stall_timeout
                )));
            }
        }
        for res in &results {
            tracing::debug!(changelog = %res.changelog, restored = res.restored, "restored");
        }
        Ok(results)
    }

    async fn offsets(
        admin: &Admin,
        tps: &[TopicPartition],
        spec: OffsetSpec,
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        let req: Vec<(TopicPartition, OffsetSpec)> =
            tps.iter().map(|tp| (tp.clone(), spec)).collect();
        Ok(admin
            .list_offsets(&req)
            .await?
            .into_iter()
            .map(|(tp, i)| (tp, i.offset))
            .collect())
    }

    /// Closes the restore consumer.
    pub async fn close(mut self) -> Result<()> {
        self.consumer.close().await?;
        Ok(())
    }
}
