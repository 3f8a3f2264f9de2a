//! The streams assignor (Kafka's `StreamsPartitionAssignor`, protocol name
//! `"stream"`): the library's own [`PartitionAssignor`], which assigns
//! *tasks* rather than partitions.
//!
//! * [`TopologyMetadata`] is what the assignor needs to know of a topology:
//!   its sub-topologies, their source and repartition topics, and whether
//!   they have state.
//! * Tasks are sub-topology × partition number; a sub-topology has as many
//!   tasks as the largest partition count among its source topics
//!   (co-partitioned sources share one task per partition number).
//! * Members are grouped by the process id in their [`SubscriptionInfo`]
//!   (one `KafkaStreams` instance = one client, its stream threads = its
//!   members). Tasks are spread over clients in proportion to their thread
//!   count, then over each client's threads, sticky both times (see
//!   [`balance`]).
//! * Each member's [`AssignmentInfo`] carries one task id per assigned
//!   partition, in the order of the partitions.
//!
//! Every stream thread has its own assignor instance; they share the
//! instance's process id, and each exposes a [`ThreadTaskState`] handle the
//! thread updates (tasks it runs, offset sums) and reads (the assignment).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use sluice_client::consumer::assignor::{Assignment, PartitionAssignor, Subscription};
use sluice_client::TopicPartition;
use uuid::Uuid;

use crate::error::{Result, StreamsError};
use crate::task_id::TaskId;

pub mod balance;
pub mod info;

pub use info::{AssignmentInfo, HostInfo, SubscriptionInfo, LATEST_OFFSET, SHUTDOWN_REQUESTED};

/// The protocol name Kafka Streams registers its assignor under.
pub const STREAMS_PROTOCOL: &str = "stream";

/// One sub-topology as the assignor sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubtopologyMetadata {
    /// Its number (the `0` of task `0_3`).
    pub id: u32,
    /// User topics it reads.
    pub source_topics: Vec<String>,
    /// Repartition topics it reads (full names, `<application.id>-<name>-repartition`).
    pub repartition_source_topics: Vec<String>,
    /// Names of its state stores (any store makes its tasks stateful).
    pub state_stores: Vec<String>,
    /// The stores among them with a changelog
    /// `<application.id>-<store>-changelog` (logging enabled).
    pub changelog_stores: Vec<String>,
    /// Groups of its source topics that must be co-partitioned (joins).
    pub copartition_groups: Vec<Vec<String>>,
}

impl SubtopologyMetadata {
    /// Whether its tasks have state (are placed by state and lag).
    pub fn stateful(&self) -> bool {
        !self.state_stores.is_empty()
    }

    /// Every topic it reads.
    pub fn all_sources(&self) -> impl Iterator<Item = &String> {
        self.source_topics
            .iter()
            .chain(&self.repartition_source_topics)
    }
}

/// A repartition topic and where its partition count comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepartitionTopicMetadata {
    /// Full name, `<application.id>-<name>-repartition`.
    pub name: String,
    /// An explicit count (`Repartitioned.withNumberOfPartitions`), if any.
    pub partitions: Option<i32>,
    /// Sub-topologies that write to it: without an explicit count it gets
    /// the largest partition count among their source topics.
    pub written_by: Vec<u32>,
}

/// What the assignor (and the internal topic manager) needs to know of a
/// topology. The runtime builds it from the DSL's `Topology`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopologyMetadata {
    /// Sub-topologies, by id.
    pub subtopologies: Vec<SubtopologyMetadata>,
    /// Repartition topics.
    pub repartition_topics: Vec<RepartitionTopicMetadata>,
}

impl TopologyMetadata {
    /// Every topic the application consumes (the subscription).
    pub fn source_topics(&self) -> BTreeSet<String> {
        self.subtopologies
            .iter()
            .flat_map(|s| s.all_sources().cloned())
            .collect()
    }

    /// The sub-topology `id`.
    pub fn subtopology(&self, id: u32) -> Option<&SubtopologyMetadata> {
        self.subtopologies.iter().find(|s| s.id == id)
    }

    /// Partition counts of the repartition topics, computed from `counts`
    /// (which must hold every user source topic): an explicit count, else
    /// the largest count among the sources of the sub-topologies writing the
    /// topic, following chains of repartition topics (Kafka's
    /// `RepartitionTopics.setRepartitionSourceTopicPartitionCount`).
    pub fn repartition_counts(
        &self,
        counts: &BTreeMap<String, i32>,
    ) -> Result<BTreeMap<String, i32>> {
        let mut known: BTreeMap<String, i32> = counts.clone();
        let mut out = BTreeMap::new();
        let mut pending: Vec<&RepartitionTopicMetadata> = self.repartition_topics.iter().collect();
        while !pending.is_empty() {
            let before = pending.len();
            pending.retain(|r| {
                let n = r.partitions.or_else(|| {
                    let mut best: Option<i32> = None;
                    for id in &r.written_by {
                        let sub = self.subtopology(*id)?;
                        for t in sub.all_sources() {
                            best = Some(best.unwrap_or(0).max(*known.get(t)?));
                        }
                    }
                    best
                });
                match n {
                    Some(n) => {
                        known.insert(r.name.clone(), n);
                        out.insert(r.name.clone(), n);
                        false
                    }
                    None => true,
                }
            });
            if pending.len() == before {
                let names: Vec<&str> = pending.iter().map(|r| r.name.as_str()).collect();
                return Err(StreamsError::Topology(format!(
                    "cannot compute the partition count of repartition topics {names:?}: \
                     a source topic of the sub-topologies writing them does not exist"
                )));
            }
        }
        Ok(out)
    }

    /// The tasks of this topology given partition counts of every source
    /// topic, with each task's partitions. Topics missing from `counts` are
    /// left out (as Kafka skips topics without metadata).
    pub fn tasks(&self, counts: &BTreeMap<String, i32>) -> BTreeMap<TaskId, Vec<TopicPartition>> {
        let mut out = BTreeMap::new();
        for sub in &self.subtopologies {
            let n = sub
                .all_sources()
                .filter_map(|t| counts.get(t))
                .copied()
                .max()
                .unwrap_or(0);
            for p in 0..n {
                let mut parts: Vec<TopicPartition> = sub
                    .all_sources()
                    .filter(|t| counts.get(*t).is_some_and(|c| p < *c))
                    .map(|t| TopicPartition::new(t, p))
                    .collect();
                parts.sort();
                parts.dedup();
                out.insert(TaskId::new(sub.id, p), parts);
            }
        }
        out
    }
}

/// What a stream thread shares with its assignor: what it runs (for the
/// next subscription) and what it was given (from the last assignment).
#[derive(Debug, Clone, Default)]
pub struct ThreadTaskState {
    /// Active tasks the thread runs now.
    pub active_tasks: Vec<TaskId>,
    /// Standby tasks the thread runs now.
    pub standby_tasks: Vec<TaskId>,
    /// Changelog offset sums of tasks with state on this instance.
    pub task_offset_sums: BTreeMap<TaskId, i64>,
    /// The last assignment received: generation, its info and partitions.
    pub assignment: Option<ReceivedAssignment>,
    /// Non-zero asks the whole group to shut down (sent in the
    /// subscription; Kafka's `AssignorError.SHUTDOWN_REQUESTED`).
    pub error_code: i32,
}

/// An assignment as a member received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedAssignment {
    /// Group generation.
    pub generation: i32,
    /// Partitions, in the order the leader sent them.
    pub partitions: Vec<TopicPartition>,
    /// The decoded user data (empty when it could not be decoded).
    pub info: AssignmentInfo,
    /// Why the user data could not be decoded, if it could not.
    pub error: Option<String>,
}

impl ReceivedAssignment {
    /// Active task → its partitions.
    pub fn active_tasks(&self) -> Result<BTreeMap<TaskId, Vec<TopicPartition>>> {
        if let Some(e) = &self.error {
            return Err(StreamsError::Assignment(e.clone()));
        }
        self.info.tasks_to_partitions(&self.partitions)
    }
}

/// Kafka Streams' partition assignor, one per stream thread.
#[derive(Debug, Clone)]
pub struct StreamsPartitionAssignor {
    topology: Arc<TopologyMetadata>,
    process_id: Uuid,
    num_threads: Arc<AtomicI32>,
    user_endpoint: Option<HostInfo>,
    state: Arc<Mutex<ThreadTaskState>>,
}

impl StreamsPartitionAssignor {
    /// An assignor for one thread of instance `process_id`, whose thread
    /// count is `num_threads` (shared by all its threads, updated when
    /// threads are added or removed).
    pub fn new(
        topology: Arc<TopologyMetadata>,
        process_id: Uuid,
        num_threads: Arc<AtomicI32>,
        user_endpoint: Option<HostInfo>,
    ) -> Self {
        Self {
            topology,
            process_id,
            num_threads,
            user_endpoint,
            state: Arc::default(),
        }
    }

    /// The state shared with the thread.
    pub fn state(&self) -> Arc<Mutex<ThreadTaskState>> {
        self.state.clone()
    }

    fn lock(&self) -> MutexGuard<'_, ThreadTaskState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This member's subscription info.
    pub fn subscription_info(&self) -> SubscriptionInfo {
        let st = self.lock();
        let mut info =
            SubscriptionInfo::new(self.process_id, self.num_threads.load(Ordering::Relaxed));
        info.prev_active_tasks.clone_from(&st.active_tasks);
        info.standby_tasks.clone_from(&st.standby_tasks);
        info.task_offset_sums.clone_from(&st.task_offset_sums);
        for t in &st.active_tasks {
            info.task_offset_sums.insert(*t, LATEST_OFFSET);
        }
        info.user_endpoint.clone_from(&self.user_endpoint);
        info.error_code = st.error_code;
        info
    }

    /// The leader's work, on decoded input: member id → subscription info
    /// (`None` if undecodable). Returns member id → (partitions, info).
    fn assign_tasks(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        members: &BTreeMap<String, Option<SubscriptionInfo>>,
    ) -> BTreeMap<String, (Vec<TopicPartition>, AssignmentInfo)> {
        // A member asked the application to shut down: nobody gets
        // anything, everybody gets the error code.
        if let Some(code) = members
            .values()
            .flatten()
            .map(|i| i.error_code)
            .find(|c| *c != 0)
        {
            return members
                .keys()
                .map(|m| {
                    let info = AssignmentInfo {
                        version: info::LATEST_SUPPORTED_VERSION,
                        latest_supported_version: info::LATEST_SUPPORTED_VERSION,
                        error_code: code,
                        ..AssignmentInfo::default()
                    };
                    (m.clone(), (Vec::new(), info))
                })
                .collect();
        }
        let tasks = self.topology.tasks(partitions_per_topic);
        let stateful_ids: BTreeSet<u32> = self
            .topology
            .subtopologies
            .iter()
            .filter(|s| s.stateful())
            .map(|s| s.id)
            .collect();
        let (stateful, stateless): (Vec<TaskId>, Vec<TaskId>) = tasks
            .keys()
            .partition(|t| stateful_ids.contains(&t.subtopology));

        // Clients: process id -> members (sorted). Members without readable
        // user data are clients of their own.
        let mut clients: BTreeMap<String, Vec<&String>> = BTreeMap::new();
        for (id, info) in members {
            let key = match info {
                Some(i) => i.process_id.to_string(),
                None => format!("member:{id}"),
            };
            clients.entry(key).or_default().push(id);
        }
        let client_keys: Vec<&String> = clients.keys().collect();
        let bins: Vec<balance::Bin> = client_keys
            .iter()
            .map(|k| {
                let mut bin = balance::Bin {
                    capacity: clients[*k].len(),
                    ..balance::Bin::default()
                };
                for m in &clients[*k] {
                    if let Some(info) = &members[*m] {
                        bin.prev_active
                            .extend(info.prev_active_tasks.iter().copied());
                        for (t, s) in &info.task_offset_sums {
                            let e = bin.offset_sums.entry(*t).or_insert(*s);
                            *e = if *s == LATEST_OFFSET || *e == LATEST_OFFSET {
                                LATEST_OFFSET
                            } else {
                                (*e).max(*s)
                            };
                        }
                    }
                }
                bin
            })
            .collect();
        let per_client = balance::distribute(&stateful, &stateless, &bins);

        let mut out = BTreeMap::new();
        let mut by_host: BTreeMap<HostInfo, Vec<TopicPartition>> = BTreeMap::new();
        let mut member_parts: BTreeMap<String, Vec<(TopicPartition, TaskId)>> = BTreeMap::new();
        for (ci, key) in client_keys.iter().enumerate() {
            let ms = &clients[*key];
            let client_tasks = &per_client[ci];
            let client_stateful: Vec<TaskId> = client_tasks
                .iter()
                .copied()
                .filter(|t| stateful_ids.contains(&t.subtopology))
                .collect();
            let client_stateless: Vec<TaskId> = client_tasks
                .iter()
                .copied()
                .filter(|t| !stateful_ids.contains(&t.subtopology))
                .collect();
            let member_bins: Vec<balance::Bin> = ms
                .iter()
                .map(|m| balance::Bin {
                    capacity: 1,
                    prev_active: members[*m]
                        .as_ref()
                        .map(|i| i.prev_active_tasks.iter().copied().collect())
                        .unwrap_or_default(),
                    offset_sums: BTreeMap::new(),
                })
                .collect();
            let per_member = balance::distribute(&client_stateful, &client_stateless, &member_bins);
            for (mi, m) in ms.iter().enumerate() {
                let mut parts: Vec<(TopicPartition, TaskId)> = per_member[mi]
                    .iter()
                    .flat_map(|t| tasks[t].iter().map(move |tp| (tp.clone(), *t)))
                    .collect();
                parts.sort();
                if let Some(Some(ep)) = members[*m].as_ref().map(|i| i.user_endpoint.clone()) {
                    by_host
                        .entry(ep)
                        .or_default()
                        .extend(parts.iter().map(|(tp, _)| tp.clone()));
                }
                member_parts.insert((*m).clone(), parts);
            }
        }
        for tps in by_host.values_mut() {
            tps.sort();
        }
        for (m, parts) in member_parts {
            let info = AssignmentInfo {
                version: info::LATEST_SUPPORTED_VERSION,
                latest_supported_version: info::LATEST_SUPPORTED_VERSION,
                active_tasks: parts.iter().map(|(_, t)| *t).collect(),
                standby_tasks: Vec::new(),
                partitions_by_host: by_host.clone(),
                error_code: 0,
            };
            out.insert(m, (parts.into_iter().map(|(tp, _)| tp).collect(), info));
        }
        out
    }
}

impl PartitionAssignor for StreamsPartitionAssignor {
    fn name(&self) -> &str {
        STREAMS_PROTOCOL
    }

    fn subscription_user_data(
        &self,
        _topics: &[String],
        _owned: &[TopicPartition],
        _generation: i32,
    ) -> Option<Bytes> {
        Some(self.subscription_info().encode())
    }

    fn on_assignment(&self, assignment: &Assignment, generation: i32) {
        let (info, error) = match assignment
            .user_data
            .as_deref()
            .map(AssignmentInfo::decode)
            .unwrap_or_else(|| {
                Err(StreamsError::Assignment(
                    "assignment without streams user data".into(),
                ))
            }) {
            Ok(info) => (info, None),
            Err(e) => (AssignmentInfo::default(), Some(e.to_string())),
        };
        self.lock().assignment = Some(ReceivedAssignment {
            generation,
            partitions: assignment.partitions.clone(),
            info,
            error,
        });
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        members: &BTreeMap<String, Subscription>,
    ) -> sluice_client::Result<BTreeMap<String, Assignment>> {
        let decoded: BTreeMap<String, Option<SubscriptionInfo>> = members
            .iter()
            .map(|(id, s)| {
                let info = s.user_data.as_deref().and_then(|d| {
                    SubscriptionInfo::decode(d)
                        .map_err(|e| tracing::warn!(member = %id, "{e}"))
                        .ok()
                });
                (id.clone(), info)
            })
            .collect();
        Ok(self
            .assign_tasks(partitions_per_topic, &decoded)
            .into_iter()
            .map(|(m, (partitions, info))| {
                (
                    m,
                    Assignment {
                        partitions,
                        user_data: Some(info.encode()),
                    },
                )
            })
            .collect())
    }
}

#[cfg(test)]
mod tests;
