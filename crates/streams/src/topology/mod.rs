//! The topology (Kafka's `Topology` and `InternalTopologyBuilder`): named
//! source, processor and sink nodes, state stores connected to processors,
//! internal topics, and the split into sub-topologies.
//!
//! Internal topics are named without the application id here (as
//! `describe()` prints them) and resolved to
//! `<application.id>-<name>` when a task is built or
//! [`Topology::topics_info`] is asked.

mod describe;
mod info;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;

pub use describe::{NodeDescription, SubtopologyDescription, TopologyDescription};
pub use info::{GlobalStoreInfo, RepartitionTopicInfo, StoreInfo, SubtopologyInfo, TopologyInfo};

use crate::error::{Result, StreamsError};
use crate::processor::{
    erase, Data, Dyn, PassThrough, Processor, RawProcessor, RawSupplier, TypedProcessor,
};
use crate::serde::SerdeRef;
use crate::state::{InMemoryKeyValueStore, KeyValueStore};
use crate::task_id::TaskId;

/// Suffix of repartition topics.
pub const REPARTITION_TOPIC_SUFFIX: &str = "-repartition";

/// A topic a node reads or writes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicRef {
    /// The name as the user gave it, or an internal topic's name without
    /// the application id.
    pub name: String,
    /// Whether the topic is internal (prefixed by `<application.id>-`).
    pub internal: bool,
}

impl TopicRef {
    /// The topic's real name in `application_id`.
    pub fn resolve(&self, application_id: &str) -> String {
        if self.internal {
            format!("{application_id}-{}", self.name)
        } else {
            self.name.clone()
        }
    }
}

/// Turns a consumed record's bytes into a key and value.
pub(crate) type RawDeserializer =
    Arc<dyn Fn(&str, Option<&[u8]>, Option<&[u8]>) -> Result<(Dyn, Dyn)> + Send + Sync>;

/// Turns a key and value into bytes for a topic.
pub(crate) type RawSerializer =
    Arc<dyn Fn(&str, &Dyn, &Dyn) -> Result<(Option<Bytes>, Option<Bytes>)> + Send + Sync>;

pub(crate) fn raw_deserializer<K: Data, V: Data>(
    k: SerdeRef<K>,
    v: SerdeRef<V>,
) -> RawDeserializer {
    Arc::new(move |topic, kb, vb| {
        Ok((
            erase(k.deserialize_nullable(topic, kb)?),
            erase(v.deserialize_nullable(topic, vb)?),
        ))
    })
}

pub(crate) fn raw_serializer<K: Data, V: Data>(k: SerdeRef<K>, v: SerdeRef<V>) -> RawSerializer {
    Arc::new(move |topic, kd, vd| {
        let kk = kd.downcast_ref::<K>().ok_or_else(|| {
            StreamsError::Topology(format!("sink to {topic} received a key of another type"))
        })?;
        let vv = vd.downcast_ref::<V>().ok_or_else(|| {
            StreamsError::Topology(format!("sink to {topic} received a value of another type"))
        })?;
        Ok((
            k.serialize_nullable(topic, kk)?,
            v.serialize_nullable(topic, vv)?,
        ))
    })
}

/// What a node is.
#[derive(Clone)]
pub(crate) enum NodeKind {
    Source {
        topics: Vec<TopicRef>,
        deserializer: RawDeserializer,
    },
    Processor {
        supplier: RawSupplier,
    },
    Sink {
        topic: TopicRef,
        serializer: RawSerializer,
    },
}

/// One node of the topology.
#[derive(Clone)]
pub(crate) struct NodeDef {
    pub name: String,
    pub kind: NodeKind,
    /// Indices of the parents, in the order given.
    pub parents: Vec<usize>,
    /// Names of the connected stores, in the order connected.
    pub stores: Vec<String>,
}

/// What a store supplier gets to build one task's instance.
#[derive(Debug, Clone)]
pub struct StoreInit {
    /// The store's name.
    pub name: String,
    /// The task (`None` for a global store).
    pub task_id: Option<TaskId>,
}

/// Which kind of store a DSL store becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreType {
    /// The runtime's default: persistent on disk in `KafkaStreams` (when
    /// it plugs one in), in memory otherwise (Kafka's default is RocksDB).
    Default,
    /// Always in memory.
    InMemory,
}

/// Builds a store instance per task.
pub type StoreSupplier = Arc<dyn Fn(&StoreInit) -> Result<Box<dyn KeyValueStore>> + Send + Sync>;

/// How to build one state store (Kafka's `StoreBuilder`): its name, its
/// supplier, and whether it logs to a changelog and has a cache.
#[derive(Clone)]
pub struct StoreBuilder {
    pub(crate) name: String,
    pub(crate) supplier: Option<StoreSupplier>,
    pub(crate) store_type: StoreType,
    pub(crate) logging: bool,
    pub(crate) caching: bool,
    pub(crate) timestamped: bool,
}

impl std::fmt::Debug for StoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreBuilder")
            .field("name", &self.name)
            .field("store_type", &self.store_type)
            .field("logging", &self.logging)
            .field("caching", &self.caching)
            .field("timestamped", &self.timestamped)
            .finish()
    }
}

impl StoreBuilder {
    /// An in-memory key-value store (Kafka's
    /// `Stores.keyValueStoreBuilder(Stores.inMemoryKeyValueStore(name))`),
    /// logged, not cached.
    pub fn in_memory(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            supplier: None,
            store_type: StoreType::InMemory,
            logging: true,
            caching: false,
            timestamped: false,
        }
    }
    /// A store of the runtime's default type (see [`StoreType::Default`]).
    pub fn default_type(name: impl Into<String>) -> Self {
        Self {
            store_type: StoreType::Default,
            ..Self::in_memory(name)
        }
    }
    /// A store built by `supplier`.
    pub fn with_supplier(name: impl Into<String>, supplier: StoreSupplier) -> Self {
        Self {
            supplier: Some(supplier),
            ..Self::in_memory(name)
        }
    }
    /// The store's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Whether the store logs to a changelog.
    pub fn logging_enabled(&self) -> bool {
        self.logging
    }
    /// Whether the store has a record cache.
    pub fn caching_enabled(&self) -> bool {
        self.caching
    }
    /// The store's type.
    pub fn store_type(&self) -> StoreType {
        self.store_type
    }
    /// Whether values are stored with their timestamp (Kafka's
    /// `TimestampedKeyValueStore`: 8 bytes big-endian, then the value; the
    /// changelog carries the plain value with the timestamp as the record's).
    pub fn timestamped(&self) -> bool {
        self.timestamped
    }
    /// Stores values with their timestamps (DSL stores do).
    pub fn with_timestamps(mut self) -> Self {
        self.timestamped = true;
        self
    }
    /// Turns the changelog off.
    pub fn with_logging_disabled(mut self) -> Self {
        self.logging = false;
        self
    }
    /// Turns the changelog on (the default).
    pub fn with_logging_enabled(mut self) -> Self {
        self.logging = true;
        self
    }
    /// Puts a record cache in front.
    pub fn with_caching_enabled(mut self) -> Self {
        self.caching = true;
        self
    }
    /// Removes the record cache.
    pub fn with_caching_disabled(mut self) -> Self {
        self.caching = false;
        self
    }
    /// Builds one instance, using `default` for [`StoreType::Default`]
    /// stores when given.
    pub fn build(
        &self,
        init: &StoreInit,
        default: Option<&StoreSupplier>,
    ) -> Result<Box<dyn KeyValueStore>> {
        if let Some(s) = &self.supplier {
            return s(init);
        }
        match (self.store_type, default) {
            (StoreType::Default, Some(d)) => d(init),
            _ => Ok(Box::new(InMemoryKeyValueStore::new(self.name.clone()))),
        }
    }
}

/// A store in the topology.
#[derive(Clone, Debug)]
pub(crate) struct StoreDef {
    pub builder: StoreBuilder,
    /// For a global store: its source topic.
    pub global_topic: Option<String>,
}

/// A processing topology (Kafka's `Topology`): build it with the
/// processor API below or with [`crate::dsl::StreamsBuilder`].
#[derive(Clone, Default)]
pub struct Topology {
    pub(crate) nodes: Vec<NodeDef>,
    pub(crate) by_name: HashMap<String, usize>,
    pub(crate) stores: Vec<StoreDef>,
    /// Topics read by global stores.
    pub(crate) global_topics: BTreeSet<String>,
    /// Internal repartition topics (name without the application id) →
    /// the partition count the user asked for.
    pub(crate) repartition_topics: BTreeMap<String, Option<i32>>,
    /// Groups of source-node names whose topics must be co-partitioned.
    pub(crate) copartition_groups: Vec<BTreeSet<String>>,
}

impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.describe())
    }
}

impl Topology {
    /// An empty topology.
    pub fn new() -> Self {
        Self::default()
    }

    fn add_node(&mut self, name: &str, kind: NodeKind, parents: &[&str]) -> Result<usize> {
        if name.is_empty() {
            return Err(StreamsError::Topology(
                "node names must not be empty".into(),
            ));
        }
        if self.by_name.contains_key(name) {
            return Err(StreamsError::Topology(format!(
                "processor {name} is already added"
            )));
        }
        let mut p = Vec::with_capacity(parents.len());
        for parent in parents {
            let i = *self.by_name.get(*parent).ok_or_else(|| {
                StreamsError::Topology(format!(
                    "parent processor {parent} is not added yet for {name}"
                ))
            })?;
            if matches!(self.nodes[i].kind, NodeKind::Sink { .. }) {
                return Err(StreamsError::Topology(format!(
                    "sink {parent} cannot be used as a parent of {name}"
                )));
            }
            p.push(i);
        }
        if matches!(kind, NodeKind::Processor { .. } | NodeKind::Sink { .. }) && p.is_empty() {
            return Err(StreamsError::Topology(format!(
                "{name} must have at least one parent"
            )));
        }
        let idx = self.nodes.len();
        self.nodes.push(NodeDef {
            name: name.to_string(),
            kind,
            parents: p,
            stores: Vec::new(),
        });
        self.by_name.insert(name.to_string(), idx);
        Ok(idx)
    }

    fn check_topics_unused(&self, topics: &[TopicRef]) -> Result<()> {
        for n in &self.nodes {
            if let NodeKind::Source { topics: t, .. } = &n.kind {
                if let Some(dup) = t.iter().find(|x| topics.contains(x)) {
                    return Err(StreamsError::Topology(format!(
                        "topic {} has already been registered by another source",
                        dup.name
                    )));
                }
            }
        }
        Ok(())
    }

    /// Adds a source node reading `topics` with the given serdes.
    pub fn add_source<K: Data, V: Data>(
        &mut self,
        name: &str,
        topics: &[&str],
        key_serde: SerdeRef<K>,
        value_serde: SerdeRef<V>,
    ) -> Result<&mut Self> {
        let topics: Vec<TopicRef> = topics
            .iter()
            .map(|t| TopicRef {
                name: t.to_string(),
                internal: false,
            })
            .collect();
        self.add_source_refs(name, topics, raw_deserializer(key_serde, value_serde))?;
        Ok(self)
    }

    pub(crate) fn add_source_refs(
        &mut self,
        name: &str,
        topics: Vec<TopicRef>,
        deserializer: RawDeserializer,
    ) -> Result<usize> {
        if topics.is_empty() {
            return Err(StreamsError::Topology(format!(
                "source {name} needs at least one topic"
            )));
        }
        self.check_topics_unused(&topics)?;
        self.add_node(
            name,
            NodeKind::Source {
                topics,
                deserializer,
            },
            &[],
        )
    }

    /// Adds a processor node built per task by `supplier`, child of
    /// `parents`.
    pub fn add_processor<K, V, P, F>(
        &mut self,
        name: &str,
        supplier: F,
        parents: &[&str],
    ) -> Result<&mut Self>
    where
        K: Data,
        V: Data,
        P: Processor<K, V> + 'static,
        F: Fn() -> P + Send + Sync + 'static,
    {
        let raw: RawSupplier = Arc::new(move || {
            Box::new(TypedProcessor::<P, K, V>::new(supplier())) as Box<dyn RawProcessor>
        });
        self.add_node(name, NodeKind::Processor { supplier: raw }, parents)?;
        Ok(self)
    }

    pub(crate) fn add_raw_processor(
        &mut self,
        name: &str,
        supplier: RawSupplier,
        parents: &[&str],
    ) -> Result<usize> {
        self.add_node(name, NodeKind::Processor { supplier }, parents)
    }

    /// Adds a sink node writing to `topic` with the given serdes.
    pub fn add_sink<K: Data, V: Data>(
        &mut self,
        name: &str,
        topic: &str,
        key_serde: SerdeRef<K>,
        value_serde: SerdeRef<V>,
        parents: &[&str],
    ) -> Result<&mut Self> {
        let topic = TopicRef {
            name: topic.to_string(),
            internal: false,
        };
        self.add_sink_ref(name, topic, raw_serializer(key_serde, value_serde), parents)?;
        Ok(self)
    }

    pub(crate) fn add_sink_ref(
        &mut self,
        name: &str,
        topic: TopicRef,
        serializer: RawSerializer,
        parents: &[&str],
    ) -> Result<usize> {
        self.add_node(name, NodeKind::Sink { topic, serializer }, parents)
    }

    /// Adds a state store and connects it to `processors`.
    pub fn add_state_store(
        &mut self,
        builder: StoreBuilder,
        processors: &[&str],
    ) -> Result<&mut Self> {
        if self.stores.iter().any(|s| s.builder.name == builder.name) {
            return Err(StreamsError::Topology(format!(
                "state store {} is already added",
                builder.name
            )));
        }
        let name = builder.name.clone();
        self.stores.push(StoreDef {
            builder,
            global_topic: None,
        });
        self.connect_processor_and_state_stores_each(processors, &[name.as_str()])?;
        Ok(self)
    }

    /// Connects `processor` to already added `stores`.
    pub fn connect_processor_and_state_stores(
        &mut self,
        processor: &str,
        stores: &[&str],
    ) -> Result<&mut Self> {
        self.connect_processor_and_state_stores_each(&[processor], stores)?;
        Ok(self)
    }

    fn connect_processor_and_state_stores_each(
        &mut self,
        processors: &[&str],
        stores: &[&str],
    ) -> Result<()> {
        for p in processors {
            let i = *self
                .by_name
                .get(*p)
                .ok_or_else(|| StreamsError::Topology(format!("processor {p} is not added yet")))?;
            if !matches!(self.nodes[i].kind, NodeKind::Processor { .. }) {
                return Err(StreamsError::Topology(format!("{p} is not a processor")));
            }
            for s in stores {
                if !self.stores.iter().any(|d| d.builder.name == *s) {
                    return Err(StreamsError::Topology(format!(
                        "state store {s} is not added yet"
                    )));
                }
                if !self.nodes[i].stores.iter().any(|x| x == s) {
                    self.nodes[i].stores.push(s.to_string());
                }
            }
        }
        Ok(())
    }

    /// Adds a global store filled from `topic` by a processor (Kafka's
    /// `addGlobalStore`); the store's changelog is the topic itself.
    pub(crate) fn add_global_store(
        &mut self,
        builder: StoreBuilder,
        source_name: &str,
        topic: &str,
        deserializer: RawDeserializer,
        processor_name: &str,
        supplier: RawSupplier,
    ) -> Result<()> {
        let store = builder.name.clone();
        self.add_source_refs(
            source_name,
            vec![TopicRef {
                name: topic.to_string(),
                internal: false,
            }],
            deserializer,
        )?;
        self.add_raw_processor(processor_name, supplier, &[source_name])?;
        self.stores.push(StoreDef {
            builder: builder.with_logging_disabled(),
            global_topic: Some(topic.to_string()),
        });
        self.global_topics.insert(topic.to_string());
        let i = self.by_name[processor_name];
        self.nodes[i].stores.push(store);
        Ok(())
    }

    /// Declares that the topics of these source nodes must be
    /// co-partitioned (joins).
    pub(crate) fn copartition(&mut self, sources: BTreeSet<String>) {
        if sources.len() > 1 {
            self.copartition_groups.push(sources);
        }
    }

    pub(crate) fn store_def(&self, name: &str) -> Option<&StoreDef> {
        self.stores.iter().find(|s| s.builder.name == name)
    }

    pub(crate) fn is_global_source(&self, idx: usize) -> bool {
        match &self.nodes[idx].kind {
            NodeKind::Source { topics, .. } => {
                topics.len() == 1 && self.global_topics.contains(&topics[0].name)
            }
            _ => false,
        }
    }

    /// Node groups (Kafka's `makeNodeGroups`): connected components of the
    /// node graph, where processors sharing a store are connected too,
    /// numbered in the order their first node was added. Each group is a
    /// list of node indices in insertion order.
    pub(crate) fn node_groups(&self) -> Vec<Vec<usize>> {
        let n = self.nodes.len();
        let mut parent: Vec<usize> = (0..n).collect();
        fn find(p: &mut [usize], mut x: usize) -> usize {
            while p[x] != x {
                p[x] = p[p[x]];
                x = p[x];
            }
            x
        }
        let unite = |p: &mut Vec<usize>, a: usize, b: usize| {
            let (ra, rb) = (find(p, a), find(p, b));
            if ra != rb {
                p[rb] = ra;
            }
        };
        for (i, node) in self.nodes.iter().enumerate() {
            for &q in &node.parents {
                unite(&mut parent, i, q);
            }
        }
        let mut by_store: HashMap<&str, usize> = HashMap::new();
        for (i, node) in self.nodes.iter().enumerate() {
            for s in &node.stores {
                match by_store.get(s.as_str()) {
                    Some(&j) => unite(&mut parent, i, j),
                    None => {
                        by_store.insert(s, i);
                    }
                }
            }
        }
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut root_to_group: HashMap<usize, usize> = HashMap::new();
        for i in 0..n {
            let r = find(&mut parent, i);
            let g = *root_to_group.entry(r).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[g].push(i);
        }
        groups
    }

    /// Whether a node group is a global store's (source + processor).
    pub(crate) fn is_global_group(&self, group: &[usize]) -> bool {
        group.iter().any(|&i| self.is_global_source(i))
    }

    /// The children of every node, in insertion order.
    pub(crate) fn children(&self) -> Vec<Vec<usize>> {
        let mut c = vec![Vec::new(); self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            for &p in &n.parents {
                c[p].push(i);
            }
        }
        c
    }
}

/// A supplier of processors forwarding every record as is (DSL merge and
/// branch nodes).
pub(crate) fn pass_through() -> RawSupplier {
    Arc::new(|| Box::new(PassThrough) as Box<dyn RawProcessor>)
}
