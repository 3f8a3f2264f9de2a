//! The task execution core (Kafka's `StreamTask`), free of I/O: the
//! runtime (or the [`crate::test_driver::TopologyTestDriver`]) feeds it
//! consumed records, asks it to process one record at a time, to punctuate
//! and to commit, and ships what it produces through a [`RecordCollector`].
//!
//! A commit is: [`StreamTask::prepare_commit`] (flush caches, which may
//! forward and produce; flush stores), then the runtime flushes its
//! producer and commits the returned offsets.

pub(crate) mod core;
pub mod partition_group;
pub(crate) mod sink;
pub mod store;

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

use self::core::{NodeRt, RecordMeta, TaskCore};
pub use partition_group::PartitionGroup;
pub use store::{SharedStore, TaskStore};

use crate::error::{Result, StreamsError};
use crate::processor::{Headers, PunctuationType, RawRecord};
use crate::state::cache::RecordCache;
use crate::state::logging::{changelog_topic, ChangeLogger};
use crate::task_id::TaskId;
use crate::topology::{NodeKind, RawDeserializer, StoreInit, StoreSupplier, Topology};

/// A record to send: to a sink topic, a repartition topic or a changelog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputRecord {
    /// The topic (internal topics carry the application id).
    pub topic: String,
    /// The partition: set for changelogs (the task's partition); `None`
    /// means the producer's default partitioner (murmur2 of the key).
    pub partition: Option<i32>,
    /// The serialized key.
    pub key: Option<Bytes>,
    /// The serialized value (`None`: a tombstone).
    pub value: Option<Bytes>,
    /// The timestamp.
    pub timestamp: i64,
    /// The headers.
    pub headers: Headers,
}

/// Where a task's output goes (Kafka's `RecordCollector`); the runtime
/// plugs a producer in.
pub trait RecordCollector {
    /// Sends one record (may buffer).
    fn send(&mut self, record: OutputRecord) -> Result<()>;
}

impl RecordCollector for Vec<OutputRecord> {
    fn send(&mut self, record: OutputRecord) -> Result<()> {
        self.push(record);
        Ok(())
    }
}

/// A consumed record handed to a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedRecord {
    /// Its offset.
    pub offset: i64,
    /// Its timestamp (the timestamp extractor is the record's own).
    pub timestamp: i64,
    /// The key bytes.
    pub key: Option<Bytes>,
    /// The value bytes.
    pub value: Option<Bytes>,
    /// The headers.
    pub headers: Headers,
}

/// How tasks are built.
#[derive(Clone, Default)]
pub struct TaskConfig {
    /// `application.id`: prefixes internal topics.
    pub application_id: String,
    /// `max.task.idle.ms` (Kafka's default 0).
    pub max_task_idle_ms: i64,
    /// `statestore.cache.max.bytes` for the task's cached stores (split
    /// evenly among them); 0 disables caching as in Kafka.
    pub cache_max_bytes: usize,
    /// Builds stores of [`crate::topology::StoreType::Default`] (the
    /// runtime plugs the persistent store in); in memory when `None`.
    pub default_store: Option<StoreSupplier>,
    /// Global stores, shared with the global task, by name.
    pub global_stores: HashMap<String, SharedStore>,
    /// `default.deserialization.exception.handler`.
    pub deserialization_handler: DeserializationHandler,
}

/// What to do with a record whose key or value cannot be deserialized
/// (Kafka's `default.deserialization.exception.handler`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DeserializationHandler {
    /// Fail the task (Kafka's default, `LogAndFailExceptionHandler`).
    #[default]
    LogAndFail,
    /// Log and skip the record (`LogAndContinueExceptionHandler`); its
    /// offset still counts as consumed.
    LogAndContinue,
}

impl std::fmt::Debug for TaskConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskConfig")
            .field("application_id", &self.application_id)
            .field("max_task_idle_ms", &self.max_task_idle_ms)
            .field("cache_max_bytes", &self.cache_max_bytes)
            .field("deserialization_handler", &self.deserialization_handler)
            .finish()
    }
}

/// One task: a sub-topology over one partition number of its inputs.
pub struct StreamTask {
    id: TaskId,
    core: TaskCore,
    group: PartitionGroup,
    /// topic → (source node, its deserializer)
    sources: HashMap<String, (usize, RawDeserializer)>,
    /// Next offset to commit per input partition.
    consumed: BTreeMap<(String, i32), i64>,
    commit_needed: bool,
    max_task_idle_ms: i64,
    global: bool,
    deserialization_handler: DeserializationHandler,
}

impl std::fmt::Debug for StreamTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamTask").field("id", &self.id).finish()
    }
}

impl StreamTask {
    /// Builds task `id` of `topology`: the processors of sub-topology
    /// `id.subtopology`, its stores (with caches and changelogs as
    /// configured) and a queue per source topic at partition
    /// `id.partition`; then initializes the processors. Stores can be
    /// restored (see [`StreamTask::restore`]) before the first record.
    pub fn new(topology: &Topology, id: TaskId, config: &TaskConfig, now: i64) -> Result<Self> {
        let groups = topology.node_groups();
        let group = groups
            .get(id.subtopology as usize)
            .ok_or_else(|| StreamsError::Topology(format!("no sub-topology {}", id.subtopology)))?;
        let global = topology.is_global_group(group);
        Self::build(topology, id, group, config, global, now)
    }

    /// Builds the task that keeps global stores up to date (Kafka's
    /// `GlobalStateUpdateTask`) for node group `group_id`
    /// ([`crate::topology::GlobalStoreInfo::group_id`]): it takes records of
    /// every partition of the global topic (without waiting for the others)
    /// and writes the shared stores given in `config.global_stores`, which
    /// stream tasks read.
    pub fn new_global(
        topology: &Topology,
        group_id: u32,
        config: &TaskConfig,
        now: i64,
    ) -> Result<Self> {
        let groups = topology.node_groups();
        let group = groups
            .get(group_id as usize)
            .filter(|g| topology.is_global_group(g))
            .ok_or_else(|| StreamsError::Topology(format!("no global node group {group_id}")))?;
        Self::build(
            topology,
            TaskId::new(group_id, -1),
            group,
            config,
            true,
            now,
        )
    }

    fn build(
        topology: &Topology,
        id: TaskId,
        group: &[usize],
        config: &TaskConfig,
        global: bool,
        now: i64,
    ) -> Result<Self> {
        let app = &config.application_id;
        let children = topology.children();
        let local: HashMap<usize, usize> = group.iter().enumerate().map(|(j, &i)| (i, j)).collect();
        let mut nodes = Vec::with_capacity(group.len());
        let mut sources = HashMap::new();
        let mut partitions = Vec::new();
        let mut store_names: Vec<String> = Vec::new();
        for (j, &i) in group.iter().enumerate() {
            let def = &topology.nodes[i];
            let processor = match &def.kind {
                NodeKind::Source {
                    topics,
                    deserializer,
                } => {
                    for t in topics {
                        let name = t.resolve(app);
                        partitions.push((name.clone(), id.partition));
                        sources.insert(name, (j, deserializer.clone()));
                    }
                    Box::new(crate::processor::PassThrough)
                        as Box<dyn crate::processor::RawProcessor>
                }
                NodeKind::Processor { supplier } => supplier(),
                NodeKind::Sink { topic, serializer } => Box::new(sink::SinkProcessor {
                    topic: topic.resolve(app),
                    serializer: serializer.clone(),
                }),
            };
            for s in &def.stores {
                if !store_names.contains(s) {
                    store_names.push(s.clone());
                }
            }
            nodes.push(NodeRt {
                name: def.name.clone(),
                children: children[i]
                    .iter()
                    .filter_map(|c| local.get(c).copied())
                    .collect(),
                stores: def.stores.clone(),
                processor: Some(processor),
            });
        }
        if !global {
            // Global stores are readable from every task (Kafka's
            // `getStateStore` falls back to global stores).
            for d in &topology.stores {
                if d.global_topic.is_some()
                    && config.global_stores.contains_key(&d.builder.name)
                    && !store_names.contains(&d.builder.name)
                {
                    store_names.push(d.builder.name.clone());
                }
            }
        }
        let cached = store_names
            .iter()
            .filter(|s| topology.store_def(s).is_some_and(|d| d.builder.caching))
            .count();
        let mut stores = BTreeMap::new();
        for s in &store_names {
            let def = topology
                .store_def(s)
                .ok_or_else(|| StreamsError::Topology(format!("state store {s} is not added")))?;
            let backend =
                if def.global_topic.is_some() {
                    let shared = config.global_stores.get(s).cloned().ok_or_else(|| {
                        StreamsError::Store {
                            store: s.clone(),
                            message: "global store not provided to the task".into(),
                        }
                    })?;
                    store::Backend::Global(shared)
                } else {
                    let init = StoreInit {
                        name: s.clone(),
                        task_id: Some(id),
                    };
                    store::Backend::Local(def.builder.build(&init, config.default_store.as_ref())?)
                };
            let cache =
                (def.builder.caching && config.cache_max_bytes > 0 && def.global_topic.is_none())
                    .then(|| RecordCache::new(config.cache_max_bytes / cached.max(1)));
            let logger = (def.builder.logging && def.global_topic.is_none())
                .then(|| ChangeLogger::new(changelog_topic(app, s)));
            let writable = def.global_topic.is_none() || global;
            stores.insert(
                s.clone(),
                TaskStore::new(
                    s.clone(),
                    backend,
                    cache,
                    logger,
                    writable,
                    def.builder.timestamped,
                ),
            );
        }
        let mut core = TaskCore {
            task_id: id,
            application_id: app.clone(),
            nodes,
            stores,
            outbox: Vec::new(),
            evicted: Vec::new(),
            punctuations: Vec::new(),
            stream_time: -1,
            wall_clock: now,
            commit_requested: false,
            meta: RecordMeta {
                partition: id.partition,
                offset: -1,
                ..Default::default()
            },
        };
        core.init()?;
        Ok(Self {
            id,
            core,
            group: PartitionGroup::new(partitions),
            sources,
            consumed: BTreeMap::new(),
            commit_needed: false,
            max_task_idle_ms: config.max_task_idle_ms,
            global,
            deserialization_handler: config.deserialization_handler,
        })
    }

    /// The task's id.
    pub fn id(&self) -> TaskId {
        self.id
    }

    /// The input partitions (topic, partition) of this task.
    pub fn input_partitions(&self) -> Vec<(String, i32)> {
        self.group.partitions().cloned().collect()
    }

    /// Keeps only the input partitions in `keep` (Kafka creates a
    /// sub-topology's tasks for the largest partition count among its
    /// source topics; task `p` reads only the topics that have partition
    /// `p`). Returns an error if `keep` names a partition the task lacks.
    pub fn restrict_inputs(&mut self, keep: &[(String, i32)]) -> Result<()> {
        for k in keep {
            if !self.group.contains(&k.0, k.1) {
                return Err(StreamsError::IllegalState(format!(
                    "task {} does not read {}-{}",
                    self.id, k.0, k.1
                )));
            }
        }
        self.group.retain(|p| keep.contains(p));
        Ok(())
    }

    /// The names of the task's stores.
    pub fn store_names(&self) -> Vec<String> {
        self.core.stores.keys().cloned().collect()
    }

    /// A store of the task.
    pub fn store_mut(&mut self, name: &str) -> Option<&mut TaskStore> {
        self.core.stores.get_mut(name)
    }

    /// Applies changelog records `(key, value, timestamp)` to a store
    /// during restoration (no changelog writes, no cache, no forwarding);
    /// `None` deletes. Timestamped stores get the record timestamp back as
    /// their value prefix.
    pub fn restore(
        &mut self,
        store: &str,
        records: impl IntoIterator<Item = (Bytes, Option<Bytes>, i64)>,
    ) -> Result<()> {
        let s = self
            .core
            .stores
            .get_mut(store)
            .ok_or_else(|| StreamsError::Store {
                store: store.to_string(),
                message: "no such store in this task".into(),
            })?;
        for (k, v, ts) in records {
            s.restore(k, v, ts)?;
        }
        Ok(())
    }

    /// Buffers consumed records of (topic, partition); returns how many
    /// that partition now buffers (pause it beyond
    /// `buffered.records.per.partition`).
    pub fn add_records(
        &mut self,
        topic: &str,
        partition: i32,
        records: impl IntoIterator<Item = ConsumedRecord>,
    ) -> Result<usize> {
        if !(self.group.contains(topic, partition)
            || self.global && self.sources.contains_key(topic))
        {
            return Err(StreamsError::IllegalState(format!(
                "task {} does not read {topic}-{partition}",
                self.id
            )));
        }
        Ok(self.group.add(topic, partition, records))
    }

    /// The lowest timestamp among the heads of the input queues.
    pub fn head_timestamp(&self) -> Option<i64> {
        self.group.head_timestamp()
    }

    /// Records buffered for (topic, partition).
    pub fn buffered(&self, topic: &str, partition: i32) -> usize {
        self.group.buffered(topic, partition)
    }

    /// Whether a record can be processed at wall-clock `now`.
    pub fn is_processable(&mut self, now: i64) -> bool {
        if self.global {
            // The global task reads all partitions as they come.
            return self.group.total_buffered() > 0;
        }
        self.group.processable(now, self.max_task_idle_ms)
    }

    /// Processes one record if one is processable at wall-clock `now`,
    /// then runs due stream-time punctuations; sends the output to
    /// `collector`. Returns whether a record was processed.
    pub fn process(&mut self, now: i64, collector: &mut dyn RecordCollector) -> Result<bool> {
        self.core.wall_clock = now;
        if !self.is_processable(now) {
            return Ok(false);
        }
        let Some(((topic, partition), rec)) = self.group.next_record() else {
            return Ok(false);
        };
        self.consumed
            .insert((topic.clone(), partition), rec.offset + 1);
        self.commit_needed = true;
        if rec.timestamp < 0 {
            tracing::warn!(task = %self.id, %topic, partition, offset = rec.offset, "skipping record with invalid timestamp {}", rec.timestamp);
            return Ok(true);
        }
        let (node, de) = self
            .sources
            .get(&topic)
            .cloned()
            .ok_or_else(|| StreamsError::IllegalState(format!("no source for {topic}")))?;
        let (key, value) = match de(&topic, rec.key.as_deref(), rec.value.as_deref()) {
            Ok(kv) => kv,
            Err(e) if self.deserialization_handler == DeserializationHandler::LogAndContinue => {
                tracing::warn!(task = %self.id, %topic, partition, offset = rec.offset, error = %e,
                    "skipping a record that cannot be deserialized");
                return Ok(true);
            }
            Err(e) => {
                return Err(StreamsError::Serde(format!(
                    "task {} {topic}-{partition} offset {}: {e}",
                    self.id, rec.offset
                )))
            }
        };
        self.core.stream_time = self.core.stream_time.max(rec.timestamp);
        self.core.meta = RecordMeta {
            topic: Some(topic),
            partition,
            offset: rec.offset,
            timestamp: rec.timestamp,
            headers: rec.headers.clone(),
        };
        let r = self.core.run_node(
            node,
            RawRecord {
                key,
                value,
                timestamp: rec.timestamp,
                headers: rec.headers,
            },
        );
        r?;
        self.core.flush_evicted()?;
        self.drain(collector)?;
        let st = self.core.stream_time;
        self.core.punctuate(PunctuationType::StreamTime, st)?;
        self.drain(collector)?;
        Ok(true)
    }

    /// Processes every processable record.
    pub fn process_all(&mut self, now: i64, collector: &mut dyn RecordCollector) -> Result<usize> {
        let mut n = 0;
        while self.process(now, collector)? {
            n += 1;
        }
        Ok(n)
    }

    /// Runs wall-clock punctuations due at `now`.
    pub fn punctuate_wall_clock(
        &mut self,
        now: i64,
        collector: &mut dyn RecordCollector,
    ) -> Result<bool> {
        self.core.wall_clock = now;
        let ran = self.core.punctuate(PunctuationType::WallClockTime, now)?;
        self.drain(collector)?;
        Ok(ran)
    }

    /// The task's stream time (-1 before any record).
    pub fn stream_time(&self) -> i64 {
        self.core.stream_time
    }

    /// Whether a processor asked for a commit since the last one.
    pub fn commit_requested(&self) -> bool {
        self.core.commit_requested
    }

    /// Whether anything was processed since the last commit.
    pub fn commit_needed(&self) -> bool {
        self.commit_needed || self.core.commit_requested
    }

    /// Prepares a commit: flushes caches (forwarding and producing what
    /// they held) and stores, sends the output to `collector`, and returns
    /// the offsets to commit (next offset per input partition). The runtime
    /// must flush its producer before committing them.
    pub fn prepare_commit(
        &mut self,
        collector: &mut dyn RecordCollector,
    ) -> Result<BTreeMap<(String, i32), i64>> {
        self.core.flush_all()?;
        self.drain(collector)?;
        self.commit_needed = false;
        self.core.commit_requested = false;
        Ok(self.consumed.clone())
    }

    /// Closes processors and stores (after a final commit, if clean).
    pub fn close(&mut self) -> Result<()> {
        self.group.clear();
        self.core.close()
    }

    fn drain(&mut self, collector: &mut dyn RecordCollector) -> Result<()> {
        for r in self.core.outbox.drain(..) {
            collector.send(r)?;
        }
        Ok(())
    }
}
