//! The glue between the DSL/processor-API [`Topology`] and the runtime:
//! [`topology_metadata`] turns the topology's [`TopologyInfo`] into the
//! assignor's [`TopologyMetadata`], and [`TopologyTaskFactory`] builds a
//! [`StreamTask`] per task, with its `Default` stores persistent (fjall, in
//! the task's state folder) and the instance's global stores, and drives it
//! through [`RuntimeTask`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use sluice_client::consumer::ConsumerRecord;
use sluice_client::TopicPartition;

use super::task::{OutputRecord, RuntimeTask, StoreSpec, TaskFactory};
use crate::assignor::{RepartitionTopicMetadata, SubtopologyMetadata, TopologyMetadata};
use crate::config::StreamsConfig;
use crate::error::{Result, StreamsError};
use crate::processor::{Header, Headers};
use crate::state::directory::StateDirectory;
use crate::state::persistent::PersistentKeyValueStore;
use crate::state::KeyValueStore;
use crate::task::{ConsumedRecord, DeserializationHandler, SharedStore, StreamTask, TaskConfig};
use crate::task_id::TaskId;
use crate::topology::{StoreInit, StoreType, Topology, TopologyInfo};

/// The assignor's and internal topic manager's view of `info`.
pub fn topology_metadata(info: &TopologyInfo) -> TopologyMetadata {
    let mut subtopologies: Vec<SubtopologyMetadata> = info
        .subtopologies
        .iter()
        .map(|s| SubtopologyMetadata {
            id: s.id,
            source_topics: s
                .source_topics
                .iter()
                .filter(|t| !s.repartition_source_topics.contains(*t))
                .cloned()
                .collect(),
            repartition_source_topics: s.repartition_source_topics.iter().cloned().collect(),
            state_stores: s.stores.iter().map(|st| st.name.clone()).collect(),
            changelog_stores: s
                .stores
                .iter()
                .filter(|st| st.changelog_topic.is_some())
                .map(|st| st.name.clone())
                .collect(),
            copartition_groups: Vec::new(),
        })
        .collect();
    for group in &info.copartition_groups {
        let owner = subtopologies
            .iter_mut()
            .find(|s| group.iter().any(|t| s.all_sources().any(|x| x == t)));
        if let Some(s) = owner {
            s.copartition_groups.push(group.iter().cloned().collect());
        }
    }
    TopologyMetadata {
        subtopologies,
        repartition_topics: info
            .repartition_topics
            .iter()
            .map(|r| RepartitionTopicMetadata {
                name: r.topic.clone(),
                partitions: r.partitions,
                written_by: vec![r.written_by],
            })
            .collect(),
    }
}

/// Builds [`StreamTask`]s of a topology for the runtime.
pub struct TopologyTaskFactory {
    topology: Arc<Topology>,
    info: TopologyInfo,
    application_id: String,
    max_task_idle_ms: i64,
    cache_max_bytes: usize,
    deserialization_handler: DeserializationHandler,
    global_stores: HashMap<String, SharedStore>,
}

impl std::fmt::Debug for TopologyTaskFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopologyTaskFactory")
            .field("application_id", &self.application_id)
            .finish_non_exhaustive()
    }
}

impl TopologyTaskFactory {
    /// A factory for `topology` with the task settings of `config`,
    /// `cache_max_bytes` per task, and the instance's global stores.
    pub fn new(
        topology: Arc<Topology>,
        config: &StreamsConfig,
        cache_max_bytes: usize,
        global_stores: HashMap<String, SharedStore>,
    ) -> Self {
        let info = topology.topics_info(&config.application_id);
        Self {
            topology,
            info,
            application_id: config.application_id.clone(),
            max_task_idle_ms: config.max_task_idle_ms,
            cache_max_bytes,
            deserialization_handler: config.deserialization_handler,
            global_stores,
        }
    }

    /// The topology's runtime info.
    pub fn info(&self) -> &TopologyInfo {
        &self.info
    }
}

impl TaskFactory for TopologyTaskFactory {
    fn stores(&self, subtopology: u32) -> Vec<StoreSpec> {
        self.info
            .subtopologies
            .iter()
            .find(|s| s.id == subtopology)
            .map(|s| {
                s.stores
                    .iter()
                    .map(|st| StoreSpec {
                        name: st.name.clone(),
                        persistent: st.store_type == StoreType::Default,
                        logged: st.changelog_topic.is_some(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn create_task(
        &self,
        id: TaskId,
        _partitions: Vec<TopicPartition>,
        state_dir: &Arc<StateDirectory>,
    ) -> Result<Box<dyn RuntimeTask>> {
        let dir = state_dir.clone();
        let config = TaskConfig {
            application_id: self.application_id.clone(),
            max_task_idle_ms: self.max_task_idle_ms,
            cache_max_bytes: self.cache_max_bytes,
            default_store: Some(Arc::new(move |init: &StoreInit| {
                let task = init.task_id.ok_or_else(|| StreamsError::Store {
                    store: init.name.clone(),
                    message: "a persistent store needs a task".into(),
                })?;
                Ok(Box::new(PersistentKeyValueStore::open(
                    &init.name,
                    &dir.store_dir(task, &init.name),
                )?) as Box<dyn KeyValueStore>)
            })),
            global_stores: self.global_stores.clone(),
            deserialization_handler: self.deserialization_handler,
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        Ok(Box::new(StreamTaskAdapter {
            task: StreamTask::new(&self.topology, id, &config, now)?,
            out: Vec::new(),
            committable: BTreeMap::new(),
        }))
    }
}

/// A [`StreamTask`] as a [`RuntimeTask`].
struct StreamTaskAdapter {
    task: StreamTask,
    out: Vec<OutputRecord>,
    committable: BTreeMap<TopicPartition, i64>,
}

impl RuntimeTask for StreamTaskAdapter {
    fn id(&self) -> TaskId {
        self.task.id()
    }

    fn add_records(
        &mut self,
        partition: &TopicPartition,
        records: Vec<ConsumerRecord>,
    ) -> Result<()> {
        let records = records.into_iter().map(|r| ConsumedRecord {
            offset: r.offset,
            timestamp: r.timestamp,
            key: r.key,
            value: r.value,
            headers: Headers(
                r.headers
                    .into_iter()
                    .map(|(key, value)| Header { key, value })
                    .collect(),
            ),
        });
        self.task
            .add_records(&partition.topic, partition.partition, records)?;
        Ok(())
    }

    fn restore(
        &mut self,
        store: &str,
        key: Bytes,
        value: Option<Bytes>,
        timestamp: i64,
    ) -> Result<()> {
        self.task.restore(store, [(key, value, timestamp)])
    }

    fn buffered(&self, partition: &TopicPartition) -> usize {
        self.task.buffered(&partition.topic, partition.partition)
    }

    fn process(&mut self, wall_clock_ms: i64) -> Result<bool> {
        self.task.process(wall_clock_ms, &mut self.out)
    }

    fn punctuate(&mut self, wall_clock_ms: i64) -> Result<bool> {
        self.task.punctuate_wall_clock(wall_clock_ms, &mut self.out)
    }

    fn drain_output(&mut self) -> Vec<OutputRecord> {
        std::mem::take(&mut self.out)
    }

    fn committable_offsets(&self) -> BTreeMap<TopicPartition, i64> {
        self.committable.clone()
    }

    fn commit_requested(&mut self) -> bool {
        self.task.commit_requested()
    }

    fn flush(&mut self) -> Result<()> {
        self.committable = self
            .task
            .prepare_commit(&mut self.out)?
            .into_iter()
            .map(|((t, p), o)| (TopicPartition::new(&t, p), o))
            .collect();
        Ok(())
    }

    fn close(&mut self) -> Result<()> {
        self.task.close()
    }
}
