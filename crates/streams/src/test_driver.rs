//! `TopologyTestDriver` (Kafka's test-utils): runs a topology in one
//! thread without a broker, deterministically. Every topic has one
//! partition, so there is one task per sub-topology (`<id>_0`); records
//! written to a topic the topology reads (repartition topics, or user
//! topics read back) are fed to the reading task at once; everything
//! written is kept per topic for [`TestOutputTopic`]s, changelogs included.
//!
//! As Kafka's driver, it processes the queued record with the lowest
//! timestamp next, whichever task holds it, and commits after every
//! processed record (flushing record caches), unless
//! [`DriverConfig::commit_every_record`] is off; then
//! [`TopologyTestDriver::commit`] commits.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::Hash;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

use crate::error::{Result, StreamsError};
use crate::processor::{Data, Headers, Record};
use crate::serde::SerdeRef;
use crate::state::KeyValueStore;
use crate::task::{ConsumedRecord, OutputRecord, SharedStore, StreamTask, TaskConfig};
use crate::task_id::TaskId;
use crate::topology::{StoreInit, Topology, TopologyInfo};

/// Driver settings.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// `application.id` (prefixes internal topics).
    pub application_id: String,
    /// `statestore.cache.max.bytes` (Kafka's default 10 MiB).
    pub cache_max_bytes: usize,
    /// Commit after each processed record, as Kafka's driver does.
    pub commit_every_record: bool,
    /// The initial wall-clock time (ms).
    pub initial_wall_clock_ms: i64,
    /// `default.deserialization.exception.handler`.
    pub deserialization_handler: crate::task::DeserializationHandler,
}

impl Default for DriverConfig {
    fn default() -> Self {
        Self {
            application_id: "test-driver-application".into(),
            cache_max_bytes: 10 * 1024 * 1024,
            commit_every_record: true,
            initial_wall_clock_ms: 0,
            deserialization_handler: Default::default(),
        }
    }
}

struct Inner {
    app: String,
    info: TopologyInfo,
    tasks: BTreeMap<u32, StreamTask>,
    global_tasks: Vec<StreamTask>,
    global_stores: HashMap<String, SharedStore>,
    /// topic → (global?, index: sub-topology id or global task index)
    readers: HashMap<String, (bool, u32)>,
    outputs: HashMap<String, VecDeque<OutputRecord>>,
    next_offset: HashMap<String, i64>,
    wall_clock: i64,
    commit_every_record: bool,
    /// Global stores whose values carry timestamps.
    timestamped: std::collections::HashSet<String>,
}

/// Runs a topology without a broker.
pub struct TopologyTestDriver {
    inner: Rc<RefCell<Inner>>,
}

impl std::fmt::Debug for TopologyTestDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopologyTestDriver")
            .field("app", &self.inner.borrow().app)
            .finish()
    }
}

impl TopologyTestDriver {
    /// A driver with default settings.
    pub fn new(topology: &Topology) -> Result<Self> {
        Self::with_config(topology, DriverConfig::default())
    }

    /// A driver with `config`.
    pub fn with_config(topology: &Topology, config: DriverConfig) -> Result<Self> {
        let app = config.application_id.clone();
        let info = topology.topics_info(&app);
        let mut global_stores = HashMap::new();
        let mut timestamped = std::collections::HashSet::new();
        for g in &info.global_stores {
            let def = topology
                .store_def(&g.store)
                .ok_or_else(|| StreamsError::Topology(format!("no store {}", g.store)))?;
            let init = StoreInit {
                name: g.store.clone(),
                task_id: None,
            };
            let store: Box<dyn KeyValueStore> = def.builder.build(&init, None)?;
            global_stores.insert(g.store.clone(), Arc::new(Mutex::new(store)));
            if def.builder.timestamped {
                timestamped.insert(g.store.clone());
            }
        }
        let task_config = TaskConfig {
            application_id: app.clone(),
            max_task_idle_ms: 0,
            cache_max_bytes: config.cache_max_bytes,
            default_store: None,
            global_stores: global_stores.clone(),
            deserialization_handler: config.deserialization_handler,
        };
        let mut readers = HashMap::new();
        let mut global_tasks = Vec::new();
        for (id, group) in topology.node_groups().iter().enumerate() {
            if topology.is_global_group(group) {
                let t = StreamTask::new_global(
                    topology,
                    id as u32,
                    &task_config,
                    config.initial_wall_clock_ms,
                )?;
                for (topic, _) in t.input_partitions() {
                    readers.insert(topic, (true, global_tasks.len() as u32));
                }
                global_tasks.push(t);
            }
        }
        let mut tasks = BTreeMap::new();
        for s in &info.subtopologies {
            let t = StreamTask::new(
                topology,
                TaskId::new(s.id, 0),
                &task_config,
                config.initial_wall_clock_ms,
            )?;
            for topic in &s.source_topics {
                readers.insert(topic.clone(), (false, s.id));
            }
            tasks.insert(s.id, t);
        }
        Ok(Self {
            inner: Rc::new(RefCell::new(Inner {
                app,
                info,
                tasks,
                global_tasks,
                global_stores,
                readers,
                outputs: HashMap::new(),
                next_offset: HashMap::new(),
                wall_clock: config.initial_wall_clock_ms,
                commit_every_record: config.commit_every_record,
                timestamped,
            })),
        })
    }

    /// The topology's runtime information (as the driver named it).
    pub fn topics_info(&self) -> TopologyInfo {
        self.inner.borrow().info.clone()
    }

    /// An input topic handle.
    pub fn create_input_topic<K: Data, V: Data>(
        &self,
        topic: &str,
        key_serde: SerdeRef<K>,
        value_serde: SerdeRef<V>,
    ) -> TestInputTopic<K, V> {
        TestInputTopic {
            inner: self.inner.clone(),
            topic: topic.to_string(),
            key_serde,
            value_serde,
        }
    }

    /// An output topic handle.
    pub fn create_output_topic<K: Data, V: Data>(
        &self,
        topic: &str,
        key_serde: SerdeRef<K>,
        value_serde: SerdeRef<V>,
    ) -> TestOutputTopic<K, V> {
        TestOutputTopic {
            inner: self.inner.clone(),
            topic: topic.to_string(),
            key_serde,
            value_serde,
        }
    }

    /// Pipes a raw record into `topic`.
    pub fn pipe_raw(
        &self,
        topic: &str,
        key: Option<Bytes>,
        value: Option<Bytes>,
        timestamp: i64,
        headers: Headers,
    ) -> Result<()> {
        self.inner
            .borrow_mut()
            .pipe(topic, key, value, timestamp, headers)
    }

    /// Advances the wall clock by `d`, running wall-clock punctuations.
    pub fn advance_wall_clock_time(&self, d: Duration) -> Result<()> {
        let mut inner = self.inner.borrow_mut();
        inner.wall_clock += i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let now = inner.wall_clock;
        let mut out = Vec::new();
        for t in inner.tasks.values_mut() {
            t.punctuate_wall_clock(now, &mut out)?;
        }
        inner.route(out)?;
        inner.run()?;
        if inner.commit_every_record {
            inner.commit()?;
        }
        Ok(())
    }

    /// Commits every task (flushes caches and stores).
    pub fn commit(&self) -> Result<()> {
        self.inner.borrow_mut().commit()
    }

    /// Every entry of store `name`, typed, in key-byte order, with the
    /// entry's timestamp for timestamped (DSL) stores.
    pub fn key_value_store_all_with_timestamps<K: Data, V: Data>(
        &self,
        name: &str,
        key_serde: &SerdeRef<K>,
        value_serde: &SerdeRef<V>,
    ) -> Result<Vec<(K, V, Option<i64>)>> {
        let (raw, timestamped) = self.inner.borrow_mut().store_all(name)?;
        raw.into_iter()
            .map(|(k, v)| {
                let (ts, v) = match (timestamped, v.split_first_chunk::<8>()) {
                    (true, Some((ts, rest))) => (Some(i64::from_be_bytes(*ts)), rest),
                    _ => (None, &v[..]),
                };
                Ok((
                    key_serde.deserialize(name, &k)?,
                    value_serde.deserialize(name, v)?,
                    ts,
                ))
            })
            .collect()
    }

    /// Every entry of store `name`, typed, in key-byte order.
    pub fn key_value_store_all<K: Data, V: Data>(
        &self,
        name: &str,
        key_serde: &SerdeRef<K>,
        value_serde: &SerdeRef<V>,
    ) -> Result<Vec<(K, V)>> {
        Ok(self
            .key_value_store_all_with_timestamps(name, key_serde, value_serde)?
            .into_iter()
            .map(|(k, v, _)| (k, v))
            .collect())
    }

    /// The value of `key` in store `name`.
    pub fn key_value_store_get<K: Data + PartialEq, V: Data>(
        &self,
        name: &str,
        key: &K,
        key_serde: &SerdeRef<K>,
        value_serde: &SerdeRef<V>,
    ) -> Result<Option<V>> {
        Ok(self
            .key_value_store_all(name, key_serde, value_serde)?
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v))
    }

    /// Every record written to `topic` so far and not yet read (raw).
    pub fn produced(&self, topic: &str) -> Vec<OutputRecord> {
        self.inner
            .borrow()
            .outputs
            .get(topic)
            .map(|q| q.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Closes every task.
    pub fn close(&self) -> Result<()> {
        let mut inner = self.inner.borrow_mut();
        inner.commit()?;
        for t in inner.tasks.values_mut() {
            t.close()?;
        }
        for t in &mut inner.global_tasks {
            t.close()?;
        }
        Ok(())
    }
}

impl Inner {
    fn pipe(
        &mut self,
        topic: &str,
        key: Option<Bytes>,
        value: Option<Bytes>,
        timestamp: i64,
        headers: Headers,
    ) -> Result<()> {
        let offset = {
            let o = self.next_offset.entry(topic.to_string()).or_insert(0);
            *o += 1;
            *o - 1
        };
        let rec = ConsumedRecord {
            offset,
            timestamp,
            key,
            value,
            headers,
        };
        let Some(&(global, id)) = self.readers.get(topic) else {
            return Err(StreamsError::IllegalState(format!(
                "unknown topic {topic}: the topology does not read it"
            )));
        };
        let now = self.wall_clock;
        if global {
            let t = &mut self.global_tasks[id as usize];
            t.add_records(topic, 0, [rec])?;
            let mut sink = Vec::new();
            t.process_all(now, &mut sink)?;
            t.prepare_commit(&mut sink)?;
            return Ok(());
        }
        if let Some(t) = self.tasks.get_mut(&id) {
            t.add_records(topic, 0, [rec])?;
        }
        self.run()?;
        if self.commit_every_record {
            self.commit()?;
        }
        Ok(())
    }

    /// Processes until no task has work, routing output between tasks.
    fn run(&mut self) -> Result<()> {
        let now = self.wall_clock;
        loop {
            // As Kafka's driver (one task over every partition): the record
            // with the lowest timestamp goes next, whichever task holds it;
            // with `commit_every_record`, a commit follows each record.
            let next = self
                .tasks
                .iter_mut()
                .filter_map(|(id, t)| {
                    let ts = t.head_timestamp()?;
                    t.is_processable(now).then_some((ts, *id))
                })
                .min();
            let Some((_, id)) = next else {
                return Ok(());
            };
            let mut out = Vec::new();
            if let Some(t) = self.tasks.get_mut(&id) {
                t.process(now, &mut out)?;
                if self.commit_every_record {
                    t.prepare_commit(&mut out)?;
                }
            }
            self.route(out)?;
        }
    }

    fn commit(&mut self) -> Result<()> {
        loop {
            let ids: Vec<u32> = self.tasks.keys().copied().collect();
            let mut produced = false;
            for id in ids {
                let mut out = Vec::new();
                if let Some(t) = self.tasks.get_mut(&id) {
                    t.prepare_commit(&mut out)?;
                }
                produced |= out.iter().any(|r| self.readers.contains_key(&r.topic));
                self.route(out)?;
            }
            self.run()?;
            if !produced {
                return Ok(());
            }
        }
    }

    fn route(&mut self, out: Vec<OutputRecord>) -> Result<()> {
        for r in out {
            if let Some(&(global, id)) = self.readers.get(&r.topic) {
                if !global {
                    let offset = {
                        let o = self.next_offset.entry(r.topic.clone()).or_insert(0);
                        *o += 1;
                        *o - 1
                    };
                    if let Some(t) = self.tasks.get_mut(&id) {
                        t.add_records(
                            &r.topic,
                            0,
                            [ConsumedRecord {
                                offset,
                                timestamp: r.timestamp,
                                key: r.key.clone(),
                                value: r.value.clone(),
                                headers: r.headers.clone(),
                            }],
                        )?;
                    }
                }
            }
            self.outputs
                .entry(r.topic.clone())
                .or_default()
                .push_back(r);
        }
        Ok(())
    }

    /// A store's entries and whether its values carry timestamps.
    fn store_all(&mut self, name: &str) -> Result<(Vec<(Bytes, Bytes)>, bool)> {
        if let Some(s) = self.global_stores.get(name) {
            let g = s
                .lock()
                .map_err(|_| StreamsError::IllegalState("store lock poisoned".into()))?;
            return Ok((g.all()?, self.timestamped.contains(name)));
        }
        for t in self.tasks.values_mut() {
            if let Some(s) = t.store_mut(name) {
                return Ok((s.inner_all()?, s.is_timestamped()));
            }
        }
        Err(StreamsError::Store {
            store: name.to_string(),
            message: "no such store".into(),
        })
    }
}

/// A typed input topic (Kafka's `TestInputTopic`).
pub struct TestInputTopic<K, V> {
    inner: Rc<RefCell<Inner>>,
    topic: String,
    key_serde: SerdeRef<K>,
    value_serde: SerdeRef<V>,
}

impl<K, V> std::fmt::Debug for TestInputTopic<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestInputTopic")
            .field("topic", &self.topic)
            .finish()
    }
}

impl<K: Data, V: Data> TestInputTopic<K, V> {
    /// Pipes a record and processes everything it causes.
    pub fn pipe_input(&self, key: K, value: V, timestamp: i64) -> Result<()> {
        self.pipe_record(Record::new(key, value, timestamp))
    }

    /// Pipes a record with headers.
    pub fn pipe_record(&self, r: Record<K, V>) -> Result<()> {
        let k = self.key_serde.serialize_nullable(&self.topic, &r.key)?;
        let v = self.value_serde.serialize_nullable(&self.topic, &r.value)?;
        self.inner
            .borrow_mut()
            .pipe(&self.topic, k, v, r.timestamp, r.headers)
    }

    /// Pipes a tombstone (null value) for `key`.
    pub fn pipe_tombstone(&self, key: K, timestamp: i64) -> Result<()> {
        let k = self.key_serde.serialize_nullable(&self.topic, &key)?;
        self.inner
            .borrow_mut()
            .pipe(&self.topic, k, None, timestamp, Headers::new())
    }
}

/// A typed output topic (Kafka's `TestOutputTopic`).
pub struct TestOutputTopic<K, V> {
    inner: Rc<RefCell<Inner>>,
    topic: String,
    key_serde: SerdeRef<K>,
    value_serde: SerdeRef<V>,
}

impl<K, V> std::fmt::Debug for TestOutputTopic<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestOutputTopic")
            .field("topic", &self.topic)
            .finish()
    }
}

impl<K: Data, V: Data> TestOutputTopic<K, V> {
    /// Reads the next record, if any.
    pub fn read_record(&self) -> Result<Option<Record<K, V>>> {
        let r = self
            .inner
            .borrow_mut()
            .outputs
            .get_mut(&self.topic)
            .and_then(|q| q.pop_front());
        r.map(|r| {
            Ok(Record {
                key: self
                    .key_serde
                    .deserialize_nullable(&self.topic, r.key.as_deref())?,
                value: self
                    .value_serde
                    .deserialize_nullable(&self.topic, r.value.as_deref())?,
                timestamp: r.timestamp,
                headers: r.headers,
            })
        })
        .transpose()
    }

    /// Reads the next key and value; an error if the topic is empty.
    pub fn read_key_value(&self) -> Result<(K, V)> {
        self.read_record()?
            .map(|r| (r.key, r.value))
            .ok_or_else(|| StreamsError::IllegalState(format!("no more records in {}", self.topic)))
    }

    /// Reads every remaining record.
    pub fn read_records_to_list(&self) -> Result<Vec<Record<K, V>>> {
        std::iter::from_fn(|| self.read_record().transpose()).collect()
    }

    /// Reads every remaining key and value.
    pub fn read_key_values_to_list(&self) -> Result<Vec<(K, V)>> {
        Ok(self
            .read_records_to_list()?
            .into_iter()
            .map(|r| (r.key, r.value))
            .collect())
    }

    /// Reads every remaining value.
    pub fn read_values_to_list(&self) -> Result<Vec<V>> {
        Ok(self
            .read_records_to_list()?
            .into_iter()
            .map(|r| r.value)
            .collect())
    }

    /// Reads every remaining record into a map (latest value per key).
    pub fn read_key_values_to_map(&self) -> Result<HashMap<K, V>>
    where
        K: Hash + Eq,
    {
        Ok(self.read_key_values_to_list()?.into_iter().collect())
    }

    /// Whether nothing is left to read.
    pub fn is_empty(&self) -> bool {
        self.queue_size() == 0
    }

    /// How many records are left to read.
    pub fn queue_size(&self) -> usize {
        self.inner
            .borrow()
            .outputs
            .get(&self.topic)
            .map_or(0, |q| q.len())
    }
}
