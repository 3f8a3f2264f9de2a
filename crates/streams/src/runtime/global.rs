//! Global stores (Kafka's `GlobalStreamThread` + `GlobalStateManager`):
//! every instance holds all of each global table. At start, before the
//! stream threads run, a consumer without a group reads every partition of
//! each global topic from the beginning up to the end offsets captured
//! then (bootstrap), feeding the topology's global tasks, which fill the
//! shared stores; afterwards it keeps reading new records until the
//! instance closes. Stream tasks read the same stores (read-only).
//!
//! The stores are built as the topology declares them with no default
//! supplier (in memory), so each start bootstraps from the beginning of the
//! topic; Kafka keeps them on disk with a checkpoint.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_client::admin::OffsetSpec;
use sluice_client::consumer::{Consumer, ConsumerConfig, OffsetReset};
use sluice_client::{Admin, ClientConfig, TopicPartition};

use crate::error::{Result, StreamsError};
use crate::processor::{Header, Headers};
use crate::task::{
    ConsumedRecord, DeserializationHandler, OutputRecord, SharedStore, StreamTask, TaskConfig,
};
use crate::topology::{StoreInit, Topology};

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The global part of a topology: its shared stores and global node groups.
#[derive(Clone)]
pub(crate) struct GlobalSetup {
    topology: Arc<Topology>,
    /// Store name → the store every task shares.
    pub stores: HashMap<String, SharedStore>,
    /// Global node groups (for `StreamTask::new_global`).
    groups: Vec<u32>,
    /// Topics feeding them.
    topics: Vec<String>,
    application_id: String,
    deserialization_handler: DeserializationHandler,
}

impl std::fmt::Debug for GlobalSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlobalSetup")
            .field("stores", &self.stores.keys().collect::<Vec<_>>())
            .field("topics", &self.topics)
            .finish_non_exhaustive()
    }
}

impl GlobalSetup {
    /// The global stores of `topology`, or `None` if it has none.
    pub(crate) fn new(
        topology: &Arc<Topology>,
        application_id: &str,
        deserialization_handler: DeserializationHandler,
    ) -> Result<Option<Self>> {
        let info = topology.topics_info(application_id);
        if info.global_stores.is_empty() {
            return Ok(None);
        }
        let mut stores = HashMap::new();
        let mut groups = Vec::new();
        let mut topics = Vec::new();
        for g in &info.global_stores {
            let def = topology
                .store_def(&g.store)
                .ok_or_else(|| StreamsError::Topology(format!("no store {}", g.store)))?;
            let init = StoreInit {
                name: g.store.clone(),
                task_id: None,
            };
            let store = def.builder.build(&init, None)?;
            stores.insert(g.store.clone(), Arc::new(Mutex::new(store)));
            if !groups.contains(&g.group_id) {
                groups.push(g.group_id);
            }
            if !topics.contains(&g.topic) {
                topics.push(g.topic.clone());
            }
        }
        Ok(Some(Self {
            topology: topology.clone(),
            stores,
            groups,
            topics,
            application_id: application_id.to_string(),
            deserialization_handler,
        }))
    }
}

/// The running global thread.
pub(crate) struct GlobalStreamThread {
    consumer: Consumer,
    tasks: Vec<StreamTask>,
    /// topic → index in `tasks`.
    readers: BTreeMap<String, usize>,
    partitions: Vec<TopicPartition>,
    admin: Admin,
}

impl GlobalStreamThread {
    /// Builds the global tasks and the consumer over every partition of
    /// the global topics (which must exist).
    pub(crate) async fn new(setup: &GlobalSetup, client: ClientConfig) -> Result<Self> {
        let config = TaskConfig {
            application_id: setup.application_id.clone(),
            max_task_idle_ms: 0,
            cache_max_bytes: 0,
            default_store: None,
            global_stores: setup.stores.clone(),
            deserialization_handler: setup.deserialization_handler,
        };
        let mut tasks = Vec::new();
        let mut readers = BTreeMap::new();
        for g in &setup.groups {
            let t = StreamTask::new_global(&setup.topology, *g, &config, now_ms())?;
            for (topic, _) in t.input_partitions() {
                readers.insert(topic, tasks.len());
            }
            tasks.push(t);
        }
        let mut cc = ConsumerConfig::new(client);
        cc.enable_auto_commit = false;
        cc.auto_offset_reset = OffsetReset::Earliest;
        let mut consumer = Consumer::new(cc).await?;
        let admin = Admin::from_cluster(consumer.cluster().clone());
        let (md, _) = consumer.cluster().refresh(Some(&setup.topics)).await?;
        let mut partitions = Vec::new();
        for t in &setup.topics {
            let n = md.topics.get(t).map_or(0, |i| i.partitions.len() as i32);
            if n == 0 {
                return Err(StreamsError::Topology(format!(
                    "missing source topic [{t}] of a global table: create it before starting the application"
                )));
            }
            partitions.extend((0..n).map(|p| TopicPartition::new(t, p)));
        }
        consumer.assign(&partitions)?;
        consumer.seek_to_beginning(&[])?;
        Ok(Self {
            consumer,
            tasks,
            readers,
            partitions,
            admin,
        })
    }

    /// Reads until every partition reached the end offset captured now;
    /// returns the records applied.
    pub(crate) async fn bootstrap(&mut self) -> Result<u64> {
        let req: Vec<(TopicPartition, OffsetSpec)> = self
            .partitions
            .iter()
            .map(|tp| (tp.clone(), OffsetSpec::Latest))
            .collect();
        let ends: BTreeMap<TopicPartition, i64> = self
            .admin
            .list_offsets(&req)
            .await?
            .into_iter()
            .map(|(tp, i)| (tp, i.offset))
            .collect();
        let mut applied = 0;
        loop {
            let mut behind = false;
            for tp in &self.partitions {
                if self.consumer.position(tp).await? < ends.get(tp).copied().unwrap_or(0) {
                    behind = true;
                }
            }
            if !behind {
                return Ok(applied);
            }
            applied += self.poll_once(Duration::from_millis(200)).await?;
        }
    }

    /// One poll: hands records to the global tasks and processes them.
    async fn poll_once(&mut self, timeout: Duration) -> Result<u64> {
        let records = self.consumer.poll(timeout).await?;
        let n = records.len() as u64;
        let mut by_tp: BTreeMap<(String, i32), Vec<ConsumedRecord>> = BTreeMap::new();
        for r in records {
            by_tp
                .entry((r.topic.to_string(), r.partition))
                .or_default()
                .push(ConsumedRecord {
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
        }
        for ((topic, partition), recs) in by_tp {
            if let Some(&i) = self.readers.get(&topic) {
                self.tasks[i].add_records(&topic, partition, recs)?;
            }
        }
        let mut out: Vec<OutputRecord> = Vec::new();
        let now = now_ms();
        for t in &mut self.tasks {
            t.process_all(now, &mut out)?;
        }
        Ok(n)
    }

    /// Keeps the global stores up to date until `stop` is set.
    pub(crate) async fn run(mut self, stop: Arc<AtomicBool>) -> Result<()> {
        while !stop.load(Ordering::SeqCst) {
            self.poll_once(Duration::from_millis(100)).await?;
        }
        for t in &mut self.tasks {
            t.close()?;
        }
        self.consumer.close().await?;
        Ok(())
    }
}
