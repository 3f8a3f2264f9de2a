//! What the runtime needs to know about a topology (Kafka's
//! `InternalTopologyBuilder.topicGroups()` / `TopicsInfo` and
//! `copartitionGroups()`): per sub-topology its source topics (user and
//! repartition), sink topics, stores and their changelogs; global stores;
//! repartition topics to create; topics that must be co-partitioned. All
//! internal names here carry the application id.

use std::collections::{BTreeMap, BTreeSet};

use super::{NodeKind, StoreType, Topology};
use crate::error::{Result, StreamsError};
use crate::state::logging::changelog_topic;

/// A state store of a sub-topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreInfo {
    /// The store's name.
    pub name: String,
    /// Its changelog topic `<application.id>-<store>-changelog`, if logged
    /// (create it compacted, with the sub-topology's partition count).
    pub changelog_topic: Option<String>,
    /// The store's type (the runtime picks the store for `Default`).
    pub store_type: StoreType,
    /// Whether stored values carry an 8-byte timestamp prefix (restore
    /// through `StreamTask::restore`, which adds it).
    pub timestamped: bool,
}

/// One sub-topology: tasks `<id>_<p>` for each partition `p` of its source
/// topics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubtopologyInfo {
    /// The sub-topology id (the task id's first part).
    pub id: u32,
    /// Every topic the sub-topology reads, including repartition topics.
    pub source_topics: BTreeSet<String>,
    /// The repartition topics among `source_topics`.
    pub repartition_source_topics: BTreeSet<String>,
    /// Every topic the sub-topology writes (excluding changelogs),
    /// including repartition topics.
    pub sink_topics: BTreeSet<String>,
    /// Its state stores.
    pub stores: Vec<StoreInfo>,
}

/// A repartition topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepartitionTopicInfo {
    /// The topic `<application.id>-<name>-repartition`.
    pub topic: String,
    /// The partition count asked for (`Repartitioned::with_number_of_partitions`);
    /// `None`: as many as the source topics of the sub-topology writing it
    /// (Kafka takes the maximum over them).
    pub partitions: Option<i32>,
    /// The sub-topology that writes it.
    pub written_by: u32,
    /// The sub-topology that reads it.
    pub read_by: u32,
}

/// A global store and its topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalStoreInfo {
    /// The store's name.
    pub store: String,
    /// The topic it is filled from (its changelog, read from the start).
    pub topic: String,
    /// Its node group, for [`crate::task::StreamTask::new_global`].
    pub group_id: u32,
}

/// Everything the runtime must create, subscribe to and check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyInfo {
    /// Sub-topologies generating tasks, by id.
    pub subtopologies: Vec<SubtopologyInfo>,
    /// Global stores (no tasks; every instance reads the whole topic).
    pub global_stores: Vec<GlobalStoreInfo>,
    /// Repartition topics.
    pub repartition_topics: Vec<RepartitionTopicInfo>,
    /// Sets of topics that must have the same partition count (the sources
    /// of joins, as Kafka's `copartitionGroups()`); check
    /// user topics at start and fail naming them and their counts.
    pub copartition_groups: Vec<BTreeSet<String>>,
}

impl TopologyInfo {
    /// Every topic consumed by tasks (the consumer's subscription).
    pub fn source_topics(&self) -> BTreeSet<String> {
        self.subtopologies
            .iter()
            .flat_map(|s| s.source_topics.iter().cloned())
            .collect()
    }

    /// The sub-topology reading `topic`.
    pub fn subtopology_of_topic(&self, topic: &str) -> Option<u32> {
        self.subtopologies
            .iter()
            .find(|s| s.source_topics.contains(topic))
            .map(|s| s.id)
    }

    /// Checks co-partitioning given each topic's partition count; the error
    /// names the topics and their counts. Topics without a count are
    /// ignored (repartition topics not yet created).
    pub fn check_copartitioning(&self, partitions: &BTreeMap<String, i32>) -> Result<()> {
        for g in &self.copartition_groups {
            let counts: BTreeMap<&String, i32> = g
                .iter()
                .filter_map(|t| partitions.get(t).map(|&n| (t, n)))
                .collect();
            let distinct: BTreeSet<i32> = counts.values().copied().collect();
            if distinct.len() > 1 {
                let list: Vec<String> = counts.iter().map(|(t, n)| format!("{t}={n}")).collect();
                return Err(StreamsError::Topology(format!(
                    "topics not co-partitioned: [{}] must have the same number of partitions",
                    list.join(", ")
                )));
            }
        }
        Ok(())
    }
}

impl Topology {
    /// The runtime's view of this topology in `application_id`.
    pub fn topics_info(&self, application_id: &str) -> TopologyInfo {
        let groups = self.node_groups();
        let mut subtopologies = Vec::new();
        let mut global_stores = Vec::new();
        let mut writers: BTreeMap<String, u32> = BTreeMap::new();
        let mut readers: BTreeMap<String, u32> = BTreeMap::new();
        let mut source_node_topics: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut copartition_groups = Vec::new();
        for (id, group) in groups.iter().enumerate() {
            let id = id as u32;
            if self.is_global_group(group) {
                for &i in group {
                    let n = &self.nodes[i];
                    for s in &n.stores {
                        if let Some(d) = self.store_def(s) {
                            if let Some(t) = &d.global_topic {
                                global_stores.push(GlobalStoreInfo {
                                    store: s.clone(),
                                    topic: t.clone(),
                                    group_id: id,
                                });
                            }
                        }
                    }
                }
                continue;
            }
            let mut info = SubtopologyInfo {
                id,
                source_topics: BTreeSet::new(),
                repartition_source_topics: BTreeSet::new(),
                sink_topics: BTreeSet::new(),
                stores: Vec::new(),
            };
            for &i in group {
                let n = &self.nodes[i];
                match &n.kind {
                    NodeKind::Source { topics, .. } => {
                        let resolved: Vec<String> =
                            topics.iter().map(|t| t.resolve(application_id)).collect();
                        for (t, r) in topics.iter().zip(&resolved) {
                            info.source_topics.insert(r.clone());
                            if t.internal {
                                info.repartition_source_topics.insert(r.clone());
                                readers.insert(r.clone(), id);
                            }
                        }
                        source_node_topics.insert(n.name.clone(), resolved);
                    }
                    NodeKind::Sink { topic, .. } => {
                        let r = topic.resolve(application_id);
                        if topic.internal {
                            writers.insert(r.clone(), id);
                        }
                        info.sink_topics.insert(r);
                    }
                    NodeKind::Processor { .. } => {}
                }
                for s in &n.stores {
                    if info.stores.iter().any(|x| &x.name == s) {
                        continue;
                    }
                    if let Some(d) = self.store_def(s) {
                        info.stores.push(StoreInfo {
                            name: s.clone(),
                            changelog_topic: d
                                .builder
                                .logging
                                .then(|| changelog_topic(application_id, s)),
                            store_type: d.builder.store_type,
                            timestamped: d.builder.timestamped,
                        });
                    }
                }
            }
            subtopologies.push(info);
        }
        for g in &self.copartition_groups {
            let topics: BTreeSet<String> = g
                .iter()
                .flat_map(|s| source_node_topics.get(s).cloned().unwrap_or_default())
                .collect();
            if topics.len() > 1 && !copartition_groups.contains(&topics) {
                copartition_groups.push(topics);
            }
        }
        let repartition_topics = self
            .repartition_topics
            .iter()
            .map(|(name, partitions)| {
                let topic = format!("{application_id}-{name}");
                RepartitionTopicInfo {
                    written_by: writers.get(&topic).copied().unwrap_or(0),
                    read_by: readers.get(&topic).copied().unwrap_or(0),
                    topic,
                    partitions: *partitions,
                }
            })
            .collect();
        TopologyInfo {
            subtopologies,
            global_stores,
            repartition_topics,
            copartition_groups,
        }
    }
}
