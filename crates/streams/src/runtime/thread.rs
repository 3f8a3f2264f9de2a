//! A stream thread (Kafka's `StreamThread` with its `TaskManager`): one
//! group consumer using the streams assignor, one producer, the active
//! tasks it was assigned, and the loop that drives them.
//!
//! Each iteration: if the group is about to rebalance, commit first (the
//! eager protocol revokes everything; the consumer's join waits for this,
//! `Consumer::gate_rejoins`) and suspend the tasks: nothing is processed
//! until the new assignment is adopted, since no commit can succeed
//! meanwhile (Kafka suspends revoked tasks the same way); poll; adopt a new
//! assignment (close tasks that left, lock/restore/create new ones, re-seek kept ones to
//! where they were); hand records to their tasks; process until every task
//! is idle; punctuate; send what the tasks produced; commit every
//! `commit.interval.ms`: flush the tasks (caches and stores), flush the
//! producer, commit the processed offsets, write the checkpoints, and purge
//! repartition topics every `repartition.purge.interval.ms`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use sluice_client::admin::OffsetAndMetadata;
use sluice_client::consumer::{Consumer, ConsumerConfig, ConsumerRecord, OffsetReset};
use sluice_client::{Admin, ClientError, Producer, ProducerConfig, ProducerRecord, TopicPartition};
use uuid::Uuid;

use super::state_manager::TaskStateManager;
use super::task::{OutputRecord, RuntimeTask, TaskFactory};
use crate::assignor::{
    HostInfo, StreamsPartitionAssignor, ThreadTaskState, TopologyMetadata, SHUTDOWN_REQUESTED,
};
use crate::config::StreamsConfig;
use crate::error::{Result, StreamsError};
use crate::internal_topics::{changelog_topic_name, InternalTopicManager};
use crate::restore::{RestoreTarget, StoreChangelogReader};
use crate::state::directory::StateDirectory;
use crate::task_id::TaskId;

/// A stream thread's state (Kafka's `StreamThread.State`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ThreadState {
    /// Built, not started.
    Created,
    /// Joining the group for the first time.
    Starting,
    /// Its tasks were revoked; a rebalance runs.
    PartitionsRevoked,
    /// It got an assignment and is restoring or waiting for task folders.
    PartitionsAssigned,
    /// Processing.
    Running,
    /// Asked to stop.
    PendingShutdown,
    /// Stopped.
    Dead,
}

/// What a thread shares with its `KafkaStreams`.
pub struct ThreadShared {
    /// `<client id>-StreamThread-<n>`.
    pub name: String,
    state: Mutex<ThreadState>,
    shutdown: AtomicBool,
    /// Records restored from changelogs by this thread.
    pub restored: AtomicU64,
    /// Records processed by this thread.
    pub processed: AtomicU64,
    /// Commits completed by this thread.
    pub commits: AtomicU64,
    /// The active tasks the thread runs now.
    pub tasks: Mutex<BTreeSet<TaskId>>,
    /// Set before start: the thread joins asking the group to shut the
    /// application down.
    pub(crate) request_app_shutdown: AtomicBool,
    /// Set by the thread: the group leader asked every instance to shut down.
    pub(crate) app_shutdown: AtomicBool,
    on_change: Box<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for ThreadShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadShared")
            .field("name", &self.name)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl ThreadShared {
    pub(crate) fn new(name: String, on_change: Box<dyn Fn() + Send + Sync>) -> Self {
        Self {
            name,
            state: Mutex::new(ThreadState::Created),
            shutdown: AtomicBool::new(false),
            restored: AtomicU64::new(0),
            processed: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            tasks: Mutex::new(BTreeSet::new()),
            request_app_shutdown: AtomicBool::new(false),
            app_shutdown: AtomicBool::new(false),
            on_change,
        }
    }

    /// The thread's state.
    pub fn state(&self) -> ThreadState {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn set_state(&self, s: ThreadState) {
        let changed = {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let changed = *st != s && *st != ThreadState::Dead;
            if changed {
                *st = s;
            }
            changed
        };
        if changed {
            (self.on_change)();
        }
    }

    /// Asks the thread to stop after its current iteration.
    pub(crate) fn request_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
    }

    fn shutdown_requested(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }
}

/// Everything a thread is built from.
pub(crate) struct ThreadContext {
    pub config: Arc<StreamsConfig>,
    pub topology: Arc<TopologyMetadata>,
    pub factory: Arc<dyn TaskFactory>,
    pub state_dir: Arc<StateDirectory>,
    pub process_id: Uuid,
    pub num_threads: Arc<AtomicI32>,
}

/// One running task.
struct Active {
    task: Box<dyn RuntimeTask>,
    state: TaskStateManager,
    partitions: Vec<TopicPartition>,
}

/// Offsets acknowledged for changelog records, and the first send error.
#[derive(Debug, Default)]
struct Deliveries {
    changelog: BTreeMap<TopicPartition, i64>,
    error: Option<ClientError>,
}

/// The thread itself.
pub(crate) struct StreamThread {
    ctx: ThreadContext,
    shared: Arc<ThreadShared>,
    consumer: Consumer,
    producer: Producer,
    assignor: Arc<Mutex<ThreadTaskState>>,
    reader: StoreChangelogReader,
    internal: InternalTopicManager,
    deliveries: Arc<Mutex<Deliveries>>,
    tasks: BTreeMap<TaskId, Active>,
    /// Assigned tasks whose folder is still locked elsewhere.
    pending: BTreeMap<TaskId, Vec<TopicPartition>>,
    partition_task: BTreeMap<TopicPartition, TaskId>,
    /// Offset after the last record handed to a task, per partition.
    fetched: BTreeMap<TopicPartition, i64>,
    generation: i32,
    /// A rebalance is running: the tasks were committed when it began and
    /// are not processed until it ends.
    suspended: bool,
    last_commit: Instant,
    last_purge: Instant,
    repartition_topics: BTreeSet<String>,
    changelog_topics: BTreeSet<String>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl StreamThread {
    /// Connects the thread's clients.
    pub(crate) async fn new(ctx: ThreadContext, shared: Arc<ThreadShared>) -> Result<Self> {
        let endpoint = ctx
            .config
            .application_server
            .as_deref()
            .map(HostInfo::parse)
            .transpose()?;
        let assignor = StreamsPartitionAssignor::new(
            ctx.topology.clone(),
            ctx.process_id,
            ctx.num_threads.clone(),
            endpoint,
        );
        let assignor_state = assignor.state();
        let mut client = ctx.config.client.clone();
        client.connection.client_id = format!("{}-consumer", shared.name);
        let mut cc = ConsumerConfig::new(client.clone()).group(&ctx.config.application_id);
        cc.enable_auto_commit = false;
        cc.auto_offset_reset = OffsetReset::Earliest;
        cc.max_poll_records = ctx.config.max_poll_records;
        cc.session_timeout = ctx.config.session_timeout;
        cc.heartbeat_interval = ctx.config.heartbeat_interval;
        cc.assignors = vec![Arc::new(assignor)];
        let mut consumer = Consumer::new(cc).await?;
        let topics: Vec<String> = ctx.topology.source_topics().into_iter().collect();
        let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
        consumer.subscribe(&refs)?;
        // A join waits until this thread committed its tasks (run_once).
        consumer.gate_rejoins();
        let mut pc = ProducerConfig::new(client.clone());
        pc.client.connection.client_id = format!("{}-producer", shared.name);
        let producer = Producer::new(pc).await?;
        let mut restore_client = client.clone();
        restore_client.connection.client_id = format!("{}-restore-consumer", shared.name);
        let reader = StoreChangelogReader::new(restore_client).await?;
        let internal = InternalTopicManager::new(
            Admin::from_cluster(producer.cluster().clone()),
            ctx.config.replication_factor,
        );
        let repartition_topics = ctx
            .topology
            .repartition_topics
            .iter()
            .map(|r| r.name.clone())
            .collect();
        let changelog_topics = ctx
            .topology
            .subtopologies
            .iter()
            .flat_map(|s| s.changelog_stores.iter())
            .map(|store| changelog_topic_name(&ctx.config.application_id, store))
            .collect();
        {
            let mut st = assignor_state.lock().unwrap_or_else(|e| e.into_inner());
            if let Ok(sums) = ctx.state_dir.task_offset_sums() {
                st.task_offset_sums = sums;
            }
            if shared.request_app_shutdown.load(Ordering::SeqCst) {
                st.error_code = SHUTDOWN_REQUESTED;
            }
        }
        Ok(Self {
            ctx,
            shared,
            consumer,
            producer,
            assignor: assignor_state,
            reader,
            internal,
            deliveries: Arc::default(),
            tasks: BTreeMap::new(),
            pending: BTreeMap::new(),
            partition_task: BTreeMap::new(),
            fetched: BTreeMap::new(),
            generation: -1,
            suspended: false,
            last_commit: Instant::now(),
            last_purge: Instant::now(),
            repartition_topics,
            changelog_topics,
        })
    }

    /// Runs until shut down or an error; always closes its clients.
    pub(crate) async fn run(mut self) -> Result<()> {
        self.shared.set_state(ThreadState::Starting);
        let result = self.run_loop().await;
        self.shared.set_state(ThreadState::PendingShutdown);
        let closed = self.shutdown(result.is_ok()).await;
        self.shared.set_state(ThreadState::Dead);
        result.and(closed)
    }

    async fn run_loop(&mut self) -> Result<()> {
        while !self.shared.shutdown_requested() {
            self.run_once().await?;
        }
        Ok(())
    }

    async fn run_once(&mut self) -> Result<()> {
        if self.consumer.rebalance_pending() && !self.suspended {
            // Once per rebalance, while the member still holds its
            // generation: a commit during the join is refused
            // (REBALANCE_IN_PROGRESS), so work done after this one would
            // never be committed if its task moved or the thread stopped.
            if !self.tasks.is_empty() {
                self.commit().await?;
            }
            self.suspended = true;
            self.consumer.allow_rejoin();
            if let Ok(sums) = self.ctx.state_dir.task_offset_sums() {
                self.assignor_state().task_offset_sums = sums;
            }
            if self.generation >= 0 {
                self.shared.set_state(ThreadState::PartitionsRevoked);
            }
        }
        let records = self.consumer.poll(self.ctx.config.poll).await?;
        self.maybe_adopt_assignment().await?;
        if self.suspended && !self.consumer.rebalance_pending() {
            self.suspended = false;
        }
        self.init_pending().await?;
        self.route(records)?;
        if self.suspended {
            return Ok(());
        }
        self.process_all().await?;
        self.update_pauses()?;
        let commit_requested = self.tasks.values_mut().any(|a| a.task.commit_requested());
        if commit_requested || self.last_commit.elapsed() >= self.ctx.config.commit_interval {
            self.commit().await?;
        }
        if self.pending.is_empty() && self.generation >= 0 && !self.consumer.rebalance_pending() {
            self.shared.set_state(ThreadState::Running);
        }
        Ok(())
    }

    fn assignor_state(&self) -> std::sync::MutexGuard<'_, ThreadTaskState> {
        self.assignor.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adopts an assignment received in the last poll.
    async fn maybe_adopt_assignment(&mut self) -> Result<()> {
        let received = self.assignor_state().assignment.clone();
        let Some(received) = received else {
            return Ok(());
        };
        if received.generation == self.generation {
            return Ok(());
        }
        self.generation = received.generation;
        if received.info.error_code != 0 {
            tracing::warn!(
                thread = %self.shared.name,
                code = received.info.error_code,
                "the group leader asked every instance to shut down"
            );
            self.shared.app_shutdown.store(true, Ordering::SeqCst);
            self.shared.request_shutdown();
            return Ok(());
        }
        let new_tasks = received.active_tasks()?;
        self.shared.set_state(ThreadState::PartitionsAssigned);
        let gone: Vec<TaskId> = self
            .tasks
            .keys()
            .chain(self.pending.keys())
            .filter(|t| !new_tasks.contains_key(t))
            .copied()
            .collect();
        for id in gone {
            self.pending.remove(&id);
            if let Some(active) = self.tasks.remove(&id) {
                self.close_task(active).await?;
            }
        }
        self.partition_task.clear();
        for (id, parts) in &new_tasks {
            for tp in parts {
                self.partition_task.insert(tp.clone(), *id);
            }
            match self.tasks.get_mut(id) {
                // The eager protocol reset positions to the committed
                // offsets: go back to where this task was.
                Some(active) => {
                    active.partitions.clone_from(parts);
                    for tp in parts {
                        if let Some(&o) = self.fetched.get(tp) {
                            self.consumer.seek(tp, o)?;
                        }
                    }
                }
                None => {
                    self.pending.insert(*id, parts.clone());
                }
            }
        }
        self.fetched
            .retain(|tp, _| self.partition_task.contains_key(tp));
        self.assignor_state().active_tasks = new_tasks.keys().copied().collect();
        *self.shared.tasks.lock().unwrap_or_else(|e| e.into_inner()) =
            new_tasks.keys().copied().collect();
        tracing::info!(
            thread = %self.shared.name,
            generation = self.generation,
            tasks = ?new_tasks.keys().map(ToString::to_string).collect::<Vec<_>>(),
            "assigned"
        );
        Ok(())
    }

    /// Locks, creates and restores the pending tasks whose folders are
    /// free, reading all their changelogs in one pass.
    async fn init_pending(&mut self) -> Result<()> {
        struct Opening {
            id: TaskId,
            partitions: Vec<TopicPartition>,
            state: TaskStateManager,
            task: Box<dyn RuntimeTask>,
        }
        let dir = self.ctx.state_dir.clone();
        let factory = self.ctx.factory.clone();
        let mut opening: Vec<Opening> = Vec::new();
        let ids: Vec<TaskId> = self.pending.keys().copied().collect();
        for id in ids {
            let specs = factory.stores(id.subtopology);
            let Some(state) =
                TaskStateManager::open(&dir, &self.ctx.config.application_id, &specs, id)?
            else {
                continue;
            };
            let partitions = self.pending.remove(&id).unwrap_or_default();
            let task = factory.create_task(id, partitions.clone(), &dir)?;
            opening.push(Opening {
                id,
                partitions,
                state,
                task,
            });
        }
        if opening.is_empty() {
            return Ok(());
        }
        // (task index, target) of every logged store.
        let collect = |opening: &[Opening]| -> Vec<(usize, RestoreTarget)> {
            opening
                .iter()
                .enumerate()
                .flat_map(|(i, o)| o.state.targets().into_iter().map(move |t| (i, t)))
                .collect()
        };
        let mut targets = collect(&opening);
        let flat: Vec<RestoreTarget> = targets.iter().map(|(_, t)| t.clone()).collect();
        let corrupted: BTreeSet<usize> = self
            .reader
            .corrupted(&flat)
            .await?
            .into_iter()
            .map(|j| targets[j].0)
            .collect();
        for i in corrupted {
            let o = &mut opening[i];
            tracing::warn!(task = %o.id, "checkpoint past the changelog's end: wiping its state and restoring from scratch");
            o.task.close()?;
            o.state.wipe(&dir)?;
            o.task = factory.create_task(o.id, o.partitions.clone(), &dir)?;
            targets = collect(&opening);
        }
        let flat: Vec<RestoreTarget> = targets.iter().map(|(_, t)| t.clone()).collect();
        let results = self
            .reader
            .restore_with(&flat, &mut |j, key, value, ts| {
                let (i, target) = &targets[j];
                opening[*i].task.restore(&target.store, key, value, ts)
            })
            .await?;
        for (i, mut o) in opening.into_iter().enumerate() {
            let mine: Vec<_> = results
                .iter()
                .zip(&targets)
                .filter(|(_, (owner, _))| *owner == i)
                .map(|(r, _)| r.clone())
                .collect();
            o.state.restored_from(&mine);
            o.state.write_checkpoint(&dir)?;
            self.shared
                .restored
                .fetch_add(o.state.restored(), Ordering::Relaxed);
            tracing::info!(thread = %self.shared.name, task = %o.id, restored = o.state.restored(), "task ready");
            self.tasks.insert(
                o.id,
                Active {
                    task: o.task,
                    state: o.state,
                    partitions: o.partitions,
                },
            );
        }
        Ok(())
    }

    /// Hands records to their tasks; records of partitions without a ready
    /// task are given back (seek) and their partitions paused.
    fn route(&mut self, records: Vec<ConsumerRecord>) -> Result<()> {
        let mut by_tp: BTreeMap<TopicPartition, Vec<ConsumerRecord>> = BTreeMap::new();
        for r in records {
            by_tp
                .entry(TopicPartition::new(&*r.topic, r.partition))
                .or_default()
                .push(r);
        }
        for (tp, recs) in by_tp {
            let task = self.partition_task.get(&tp).copied();
            match task.and_then(|t| self.tasks.get_mut(&t)) {
                Some(active) => {
                    if let Some(last) = recs.last() {
                        self.fetched.insert(tp.clone(), last.offset + 1);
                    }
                    active.task.add_records(&tp, recs)?;
                }
                None => {
                    if let Some(first) = recs.first() {
                        if self.consumer.assignment().contains(&tp) {
                            self.consumer.seek(&tp, first.offset)?;
                            self.consumer.pause(std::slice::from_ref(&tp))?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Processes until every task is idle, sending output as it goes.
    async fn process_all(&mut self) -> Result<()> {
        const BATCH: usize = 100;
        loop {
            let now = now_ms();
            let mut any = false;
            let mut out = Vec::new();
            for active in self.tasks.values_mut() {
                let mut n = 0;
                while n < BATCH && active.task.process(now)? {
                    n += 1;
                }
                if n > 0 {
                    any = true;
                    self.shared.processed.fetch_add(n as u64, Ordering::Relaxed);
                }
                out.extend(active.task.drain_output());
            }
            self.send(out).await?;
            if !any {
                break;
            }
        }
        let now = now_ms();
        let mut out = Vec::new();
        for active in self.tasks.values_mut() {
            active.task.punctuate(now)?;
            out.extend(active.task.drain_output());
        }
        self.send(out).await
    }

    async fn send(&mut self, records: Vec<OutputRecord>) -> Result<()> {
        for r in records {
            let changelog = self.changelog_topics.contains(&r.topic);
            let record = ProducerRecord {
                topic: r.topic.into(),
                partition: r.partition,
                key: r.key,
                value: r.value,
                timestamp: Some(r.timestamp),
                headers: r
                    .headers
                    .0
                    .into_iter()
                    .map(|h| (h.key.into_bytes(), h.value.map(|v| v.to_vec())))
                    .collect(),
            };
            let deliveries = self.deliveries.clone();
            self.producer
                .send_with_callback(record, move |outcome| {
                    let mut d = deliveries.lock().unwrap_or_else(|e| e.into_inner());
                    match outcome {
                        Ok(md) if changelog => {
                            let e = d
                                .changelog
                                .entry(TopicPartition::new(&*md.topic, md.partition))
                                .or_insert(md.offset);
                            *e = (*e).max(md.offset);
                        }
                        Ok(_) => {}
                        Err(e) => {
                            d.error.get_or_insert(e);
                        }
                    }
                })
                .await?;
        }
        Ok(())
    }

    /// Pauses partitions of pending tasks and of tasks with full buffers;
    /// resumes the others.
    fn update_pauses(&mut self) -> Result<()> {
        let paused = self.consumer.paused();
        let limit = self.ctx.config.buffered_records_per_partition;
        let mut pause = Vec::new();
        let mut resume = Vec::new();
        for tp in self.consumer.assignment() {
            let should_pause = match self.partition_task.get(&tp) {
                Some(id) => match self.tasks.get(id) {
                    Some(a) => a.task.buffered(&tp) >= limit,
                    None => true,
                },
                None => false,
            };
            match (should_pause, paused.contains(&tp)) {
                (true, false) => pause.push(tp),
                (false, true) => resume.push(tp),
                _ => {}
            }
        }
        self.consumer.pause(&pause)?;
        self.consumer.resume(&resume)?;
        Ok(())
    }

    /// Kafka's commit: flush tasks (caches, stores), flush the producer,
    /// commit offsets, write checkpoints; purge repartition topics.
    async fn commit(&mut self) -> Result<()> {
        let mut out = Vec::new();
        for active in self.tasks.values_mut() {
            active.task.flush()?;
            out.extend(active.task.drain_output());
        }
        self.send(out).await?;
        self.producer.flush().await;
        let (changelog, error) = {
            let mut d = self.deliveries.lock().unwrap_or_else(|e| e.into_inner());
            (std::mem::take(&mut d.changelog), d.error.take())
        };
        if let Some(e) = error {
            return Err(StreamsError::Client(e));
        }
        let mut offsets = BTreeMap::new();
        for active in self.tasks.values_mut() {
            for (tp, o) in &changelog {
                active.state.changelog_written(tp, *o);
            }
            for (tp, o) in active.task.committable_offsets() {
                offsets.insert(tp, OffsetAndMetadata::new(o));
            }
        }
        if !offsets.is_empty() {
            if let Err(e) = self.consumer.commit_offsets(&offsets).await {
                // A rebalance fenced the commit: the new owner reprocesses
                // from the last commit (at-least-once).
                tracing::warn!(thread = %self.shared.name, "commit failed: {e}");
            }
        }
        for active in self.tasks.values() {
            active.state.write_checkpoint(&self.ctx.state_dir)?;
        }
        self.last_commit = Instant::now();
        self.shared.commits.fetch_add(1, Ordering::Relaxed);
        if self.last_purge.elapsed() >= self.ctx.config.repartition_purge_interval {
            let purge: BTreeMap<TopicPartition, i64> = offsets
                .iter()
                .filter(|(tp, _)| self.repartition_topics.contains(&tp.topic))
                .map(|(tp, o)| (tp.clone(), o.offset))
                .collect();
            if let Err(e) = self.internal.purge(&purge).await {
                tracing::debug!("purging repartition topics failed: {e}");
            }
            self.last_purge = Instant::now();
        }
        Ok(())
    }

    /// Closes a task leaving this thread (its work was committed before the
    /// rebalance): flush, checkpoint, close, unlock.
    async fn close_task(&mut self, mut active: Active) -> Result<()> {
        active.task.flush()?;
        let out = active.task.drain_output();
        self.send(out).await?;
        self.producer.flush().await;
        let changelog = std::mem::take(
            &mut self
                .deliveries
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .changelog,
        );
        for (tp, o) in &changelog {
            active.state.changelog_written(tp, *o);
        }
        // Other tasks' offsets go back for the next commit.
        {
            let mut d = self.deliveries.lock().unwrap_or_else(|e| e.into_inner());
            for (tp, o) in changelog {
                if !active.state.is_changelog(&tp) {
                    let e = d.changelog.entry(tp).or_insert(o);
                    *e = (*e).max(o);
                }
            }
        }
        active.state.write_checkpoint(&self.ctx.state_dir)?;
        active.task.close()?;
        for tp in &active.partitions {
            self.fetched.remove(tp);
        }
        tracing::info!(thread = %self.shared.name, task = %active.state.task(), "task closed");
        Ok(())
    }

    /// Commits (on a clean stop), closes every task and the clients.
    async fn shutdown(&mut self, clean: bool) -> Result<()> {
        let mut result = Ok(());
        // Suspended tasks were committed when the rebalance began (a commit
        // now would be refused).
        if clean && !self.tasks.is_empty() && !self.suspended {
            result = self.commit().await;
        }
        let ids: Vec<TaskId> = self.tasks.keys().copied().collect();
        for id in ids {
            if let Some(active) = self.tasks.remove(&id) {
                let r = self.close_task(active).await;
                result = result.and(r);
            }
        }
        self.shared
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        let _ = self.consumer.close().await;
        let _ = self.producer.close().await;
        result
    }
}
