//! `Topology::describe()`: Kafka's `TopologyDescription`, printed exactly
//! as Kafka prints it (`InternalTopologyBuilder.TopologyDescription`).
//! Within a sub-topology, nodes are ordered by the size of their
//! downstream sub-tree (largest first), then by name, as Kafka's
//! `NodeComparator` does; successors and predecessors likewise.

use std::fmt;

use super::{NodeKind, Topology};

/// One node as described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeDescription {
    /// A source node.
    Source {
        /// The node's name.
        name: String,
        /// Topics read.
        topics: Vec<String>,
        /// Children.
        successors: Vec<String>,
    },
    /// A processor node.
    Processor {
        /// The node's name.
        name: String,
        /// Connected stores.
        stores: Vec<String>,
        /// Children.
        successors: Vec<String>,
        /// Parents.
        predecessors: Vec<String>,
    },
    /// A sink node.
    Sink {
        /// The node's name.
        name: String,
        /// The topic written.
        topic: String,
        /// Parents.
        predecessors: Vec<String>,
    },
}

fn names(v: &[String]) -> String {
    if v.is_empty() {
        "none".to_string()
    } else {
        v.join(", ")
    }
}

impl fmt::Display for NodeDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeDescription::Source {
                name,
                topics,
                successors,
            } => write!(
                f,
                "Source: {name} (topics: [{}])\n      --> {}",
                topics.join(", "),
                names(successors)
            ),
            NodeDescription::Processor {
                name,
                stores,
                successors,
                predecessors,
            } => write!(
                f,
                "Processor: {name} (stores: [{}])\n      --> {}\n      <-- {}",
                stores.join(", "),
                names(successors),
                names(predecessors)
            ),
            NodeDescription::Sink {
                name,
                topic,
                predecessors,
            } => write!(
                f,
                "Sink: {name} (topic: {topic})\n      <-- {}",
                names(predecessors)
            ),
        }
    }
}

/// A sub-topology, or a global store's node group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubtopologyDescription {
    /// The id (global stores share the numbering).
    pub id: u32,
    /// Whether this is a global store's group (generates no tasks).
    pub global_store: bool,
    /// The nodes in Kafka's order.
    pub nodes: Vec<NodeDescription>,
}

impl fmt::Display for SubtopologyDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.global_store {
            writeln!(
                f,
                "Sub-topology: {} for global store (will not generate tasks)",
                self.id
            )?;
            for n in &self.nodes {
                writeln!(f, "    {n}")?;
            }
            Ok(())
        } else {
            writeln!(f, "Sub-topology: {}", self.id)?;
            for n in &self.nodes {
                writeln!(f, "    {n}")?;
            }
            writeln!(f)
        }
    }
}

/// The description of a whole topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyDescription {
    /// Sub-topologies and global stores, by id.
    pub subtopologies: Vec<SubtopologyDescription>,
}

impl fmt::Display for TopologyDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Topologies:\n ")?;
        for s in &self.subtopologies {
            write!(f, "  {s}")?;
        }
        Ok(())
    }
}

impl Topology {
    /// Describes the topology as Kafka's `Topology.describe()` does.
    pub fn describe(&self) -> TopologyDescription {
        let children = self.children();
        let mut out = Vec::new();
        for (id, group) in self.node_groups().into_iter().enumerate() {
            let in_group = |i: &usize| group.contains(i);
            // Sub-tree sizes within the group.
            let mut size = vec![0usize; self.nodes.len()];
            fn sz(i: usize, ch: &[Vec<usize>], size: &mut Vec<usize>) -> usize {
                if size[i] == 0 {
                    let s = 1 + ch[i].iter().map(|&c| sz(c, ch, size)).sum::<usize>();
                    size[i] = s;
                }
                size[i]
            }
            for &i in &group {
                sz(i, &children, &mut size);
            }
            let order = |v: &mut Vec<usize>| {
                v.sort_by(|&a, &b| {
                    size[b]
                        .cmp(&size[a])
                        .then_with(|| self.nodes[a].name.cmp(&self.nodes[b].name))
                });
            };
            let mut nodes = group.clone();
            order(&mut nodes);
            let node_names = |mut v: Vec<usize>| {
                v.retain(in_group);
                order(&mut v);
                v.dedup();
                v.into_iter()
                    .map(|i| self.nodes[i].name.clone())
                    .collect::<Vec<_>>()
            };
            let descs = nodes
                .iter()
                .map(|&i| {
                    let n = &self.nodes[i];
                    match &n.kind {
                        NodeKind::Source { topics, .. } => NodeDescription::Source {
                            name: n.name.clone(),
                            topics: topics.iter().map(|t| t.name.clone()).collect(),
                            successors: node_names(children[i].clone()),
                        },
                        NodeKind::Processor { .. } => {
                            let mut stores = n.stores.clone();
                            stores.sort();
                            NodeDescription::Processor {
                                name: n.name.clone(),
                                stores,
                                successors: node_names(children[i].clone()),
                                predecessors: node_names(n.parents.clone()),
                            }
                        }
                        NodeKind::Sink { topic, .. } => NodeDescription::Sink {
                            name: n.name.clone(),
                            topic: topic.name.clone(),
                            predecessors: node_names(n.parents.clone()),
                        },
                    }
                })
                .collect();
            out.push(SubtopologyDescription {
                id: id as u32,
                global_store: self.is_global_group(&group),
                nodes: descs,
            });
        }
        TopologyDescription { subtopologies: out }
    }
}
