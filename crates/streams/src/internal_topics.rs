//! Internal topics (Kafka's `InternalTopicManager`, `RepartitionTopics`,
//! `CopartitionedTopicsEnforcer`): the changelog and repartition topics an
//! application owns, named and configured as Kafka Streams does.
//!
//! * Changelogs `<application.id>-<store>-changelog`: `cleanup.policy=compact`,
//!   `message.timestamp.type=CreateTime`, one partition per task of the
//!   store's sub-topology.
//! * Repartition topics `<application.id>-<name>-repartition`:
//!   `cleanup.policy=delete`, `segment.bytes=52428800`, `retention.ms=-1`,
//!   `message.timestamp.type=CreateTime`, with the partition count of the
//!   sources of the sub-topology writing them; after each commit they are
//!   purged (DeleteRecords) up to the committed offsets.
//! * Co-partitioning: topics joined together must have the same partition
//!   count; a violation fails naming every topic and its count.
//!
//! Existing internal topics are accepted when their partition count and
//! cleanup policy are right, and are an error otherwise.

use std::collections::{BTreeMap, BTreeSet};

use sluice_client::admin::NewTopic;
use sluice_client::{Admin, ClientError, TopicPartition};

use crate::assignor::TopologyMetadata;
use crate::error::{Result, StreamsError};

/// `<application.id>-<store>-changelog`.
pub fn changelog_topic_name(application_id: &str, store: &str) -> String {
    format!("{application_id}-{store}-changelog")
}

/// `<application.id>-<name>-repartition`.
pub fn repartition_topic_name(application_id: &str, name: &str) -> String {
    format!("{application_id}-{name}-repartition")
}

/// Which kind of internal topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InternalTopicKind {
    /// A store's changelog (compacted).
    Changelog,
    /// A repartition topic (delete, infinite retention, purged by the app).
    Repartition,
}

/// An internal topic to create or validate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InternalTopicConfig {
    /// Full name.
    pub name: String,
    /// Kind.
    pub kind: InternalTopicKind,
    /// Partition count.
    pub partitions: i32,
    /// Topic configs.
    pub configs: BTreeMap<String, String>,
}

impl InternalTopicConfig {
    /// A changelog topic with Kafka's configs.
    pub fn changelog(name: &str, partitions: i32) -> Self {
        Self {
            name: name.to_string(),
            kind: InternalTopicKind::Changelog,
            partitions,
            configs: [
                ("cleanup.policy", "compact"),
                ("message.timestamp.type", "CreateTime"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        }
    }

    /// A repartition topic with Kafka's configs.
    pub fn repartition(name: &str, partitions: i32) -> Self {
        Self {
            name: name.to_string(),
            kind: InternalTopicKind::Repartition,
            partitions,
            configs: [
                ("cleanup.policy", "delete"),
                ("segment.bytes", "52428800"),
                ("retention.ms", "-1"),
                ("message.timestamp.type", "CreateTime"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        }
    }
}

/// Creates and validates internal topics through an [`Admin`].
#[derive(Debug, Clone)]
pub struct InternalTopicManager {
    admin: Admin,
    /// `replication.factor` (-1: the broker default).
    replication_factor: i16,
}

impl InternalTopicManager {
    /// A manager creating topics with `replication_factor` replicas.
    pub fn new(admin: Admin, replication_factor: i16) -> Self {
        Self {
            admin,
            replication_factor,
        }
    }

    /// Partition counts of those `topics` that exist.
    pub async fn partition_counts(&self, topics: &[String]) -> Result<BTreeMap<String, i32>> {
        if topics.is_empty() {
            return Ok(BTreeMap::new());
        }
        let (md, _) = self.admin.cluster().refresh(Some(topics)).await?;
        Ok(md
            .topics
            .iter()
            .filter(|(n, t)| topics.contains(n) && !t.partitions.is_empty())
            .map(|(n, t)| (n.clone(), t.partitions.len() as i32))
            .collect())
    }

    /// Creates the missing topics of `topics` and validates the existing
    /// ones (partition count, cleanup policy). Returns the names created.
    pub async fn make_ready(&self, topics: &[InternalTopicConfig]) -> Result<Vec<String>> {
        let names: Vec<String> = topics.iter().map(|t| t.name.clone()).collect();
        let existing = self.partition_counts(&names).await?;
        let mut to_create = Vec::new();
        for t in topics {
            match existing.get(&t.name) {
                Some(&n) => self.validate(t, n).await?,
                None => to_create.push(t),
            }
        }
        let mut created = Vec::new();
        if to_create.is_empty() {
            return Ok(created);
        }
        let requests = to_create
            .iter()
            .map(|t| {
                t.configs.iter().fold(
                    NewTopic::new(&t.name, t.partitions, self.replication_factor),
                    |nt, (k, v)| nt.config(k, v),
                )
            })
            .collect();
        let results = self.admin.create_topics(requests).await?;
        for ((name, result), t) in results.into_iter().zip(to_create) {
            match result {
                Ok(()) => {
                    tracing::info!(topic = %name, partitions = t.partitions, "created internal topic");
                    created.push(name);
                }
                Err(ClientError::Kafka { name: err, .. }) if err == "TopicAlreadyExists" => {
                    // Another instance created it meanwhile: validate theirs.
                    let counts = self.partition_counts(std::slice::from_ref(&name)).await?;
                    let n = counts.get(&name).copied().unwrap_or(-1);
                    self.validate(t, n).await?;
                }
                Err(e) => {
                    return Err(StreamsError::InternalTopic {
                        topic: name,
                        message: format!("could not be created: {e}"),
                    })
                }
            }
        }
        Ok(created)
    }

    /// Checks an existing topic against what the application needs.
    async fn validate(&self, t: &InternalTopicConfig, partitions: i32) -> Result<()> {
        if partitions != t.partitions {
            return Err(StreamsError::InternalTopic {
                topic: t.name.clone(),
                message: format!(
                    "existing internal topic has invalid partitions: expected: {}; actual: {partitions}. \
                     Delete it (or reset the application) before processing",
                    t.partitions
                ),
            });
        }
        let configs = self.admin.describe_configs(&t.name).await?;
        let policy = configs
            .iter()
            .find(|c| c.name == "cleanup.policy")
            .and_then(|c| c.value.clone())
            .unwrap_or_default();
        let ok = match t.kind {
            InternalTopicKind::Changelog => policy.split(',').any(|p| p.trim() == "compact"),
            InternalTopicKind::Repartition => policy.split(',').all(|p| p.trim() == "delete"),
        };
        if !ok {
            return Err(StreamsError::InternalTopic {
                topic: t.name.clone(),
                message: format!(
                    "existing internal topic has cleanup.policy={policy}, expected {}",
                    t.configs.get("cleanup.policy").map_or("", String::as_str)
                ),
            });
        }
        Ok(())
    }

    /// Purges repartition topics: deletes their records below the committed
    /// offsets (Kafka does this after each commit, at most every
    /// `repartition.purge.interval.ms`). Per-partition failures are logged
    /// and skipped; they are retried at the next purge.
    pub async fn purge(&self, committed: &BTreeMap<TopicPartition, i64>) -> Result<()> {
        if committed.is_empty() {
            return Ok(());
        }
        let results = self.admin.delete_records(committed).await?;
        for (tp, r) in results {
            if let Err(e) = r {
                tracing::debug!(partition = %tp, "purging repartition topic failed: {e}");
            }
        }
        Ok(())
    }

    /// Prepares everything `topology` needs before the application joins
    /// its group (Kafka does this in the leader's assignment; here every
    /// instance does it at start, which is idempotent): checks that the
    /// user source topics exist, computes repartition topic partition
    /// counts, enforces co-partitioning, creates or validates every
    /// repartition and changelog topic. Returns the partition count of
    /// every source and internal topic.
    pub async fn prepare(
        &self,
        application_id: &str,
        topology: &TopologyMetadata,
    ) -> Result<BTreeMap<String, i32>> {
        let repartition: BTreeSet<String> = topology
            .repartition_topics
            .iter()
            .map(|r| r.name.clone())
            .collect();
        let user_sources: Vec<String> = topology
            .source_topics()
            .into_iter()
            .filter(|t| !repartition.contains(t))
            .collect();
        let mut counts = self.partition_counts(&user_sources).await?;
        let missing: Vec<&String> = user_sources
            .iter()
            .filter(|t| !counts.contains_key(*t))
            .collect();
        if !missing.is_empty() {
            return Err(StreamsError::Topology(format!(
                "missing source topics {missing:?}: create them before starting the application"
            )));
        }
        let fixed: BTreeSet<String> = topology
            .repartition_topics
            .iter()
            .filter(|r| r.partitions.is_some())
            .map(|r| r.name.clone())
            .collect();
        counts.extend(topology.repartition_counts(&counts)?);
        let groups: Vec<Vec<String>> = topology
            .subtopologies
            .iter()
            .flat_map(|s| s.copartition_groups.iter().cloned())
            .collect();
        enforce_copartitioning(&groups, &repartition, &fixed, &mut counts)?;

        let mut internal: Vec<InternalTopicConfig> = topology
            .repartition_topics
            .iter()
            .map(|r| InternalTopicConfig::repartition(&r.name, counts[&r.name]))
            .collect();
        for sub in &topology.subtopologies {
            let tasks = sub
                .all_sources()
                .filter_map(|t| counts.get(t))
                .copied()
                .max()
                .unwrap_or(0);
            for store in &sub.changelog_stores {
                let name = changelog_topic_name(application_id, store);
                internal.push(InternalTopicConfig::changelog(&name, tasks));
            }
        }
        self.make_ready(&internal).await?;
        for t in &internal {
            counts.insert(t.name.clone(), t.partitions);
        }
        Ok(counts)
    }
}

/// Kafka's `CopartitionedTopicsEnforcer`: within each group, user topics
/// must have one partition count (else an error naming every topic and its
/// count); repartition topics without a fixed count take it; repartition
/// topics with a fixed count must match it.
pub fn enforce_copartitioning(
    groups: &[Vec<String>],
    repartition_topics: &BTreeSet<String>,
    fixed_counts: &BTreeSet<String>,
    counts: &mut BTreeMap<String, i32>,
) -> Result<()> {
    for group in groups {
        let describe = |counts: &BTreeMap<String, i32>, topics: &[&String]| {
            topics
                .iter()
                .map(|t| format!("{t}={}", counts.get(*t).copied().unwrap_or(-1)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let user: Vec<&String> = group
            .iter()
            .filter(|t| !repartition_topics.contains(*t))
            .collect();
        let user_counts: BTreeSet<i32> = user
            .iter()
            .filter_map(|t| counts.get(*t))
            .copied()
            .collect();
        if user_counts.len() > 1 {
            return Err(StreamsError::Copartitioning(format!(
                "Invalid topology: topics not co-partitioned: following topics do not have the \
                 same number of partitions: [{}]",
                describe(counts, &user)
            )));
        }
        let fixed: Vec<&String> = group.iter().filter(|t| fixed_counts.contains(*t)).collect();
        let fixed_set: BTreeSet<i32> = fixed
            .iter()
            .filter_map(|t| counts.get(*t))
            .copied()
            .collect();
        let target = match (user_counts.iter().next(), fixed_set.iter().next()) {
            (Some(&u), _) => {
                if fixed_set.iter().any(|&f| f != u) {
                    let all: Vec<&String> = user.iter().chain(&fixed).copied().collect();
                    return Err(StreamsError::Copartitioning(format!(
                        "Invalid topology: number of partitions of repartition topics [{}] does \
                         not match the co-partitioned source topics",
                        describe(counts, &all)
                    )));
                }
                u
            }
            (None, Some(&f)) => {
                if fixed_set.len() > 1 {
                    return Err(StreamsError::Copartitioning(format!(
                        "Invalid topology: repartition topics with fixed partition counts \
                         [{}] are joined but differ",
                        describe(counts, &fixed)
                    )));
                }
                f
            }
            (None, None) => group
                .iter()
                .filter_map(|t| counts.get(t))
                .copied()
                .max()
                .unwrap_or(0),
        };
        for t in group {
            if repartition_topics.contains(t) && !fixed_counts.contains(t) {
                counts.insert(t.clone(), target);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pairs: &[(&str, i32)]) -> BTreeMap<String, i32> {
        pairs.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn names_and_configs_as_kafka() {
        assert_eq!(changelog_topic_name("wc", "counts"), "wc-counts-changelog");
        assert_eq!(
            repartition_topic_name("wc", "counts"),
            "wc-counts-repartition"
        );
        let c = InternalTopicConfig::changelog("wc-counts-changelog", 6);
        assert_eq!(c.configs["cleanup.policy"], "compact");
        let r = InternalTopicConfig::repartition("wc-counts-repartition", 6);
        assert_eq!(r.configs["cleanup.policy"], "delete");
        assert_eq!(r.configs["retention.ms"], "-1");
        assert_eq!(r.configs["segment.bytes"], "52428800");
    }

    #[test]
    fn copartitioning_violation_names_topics() {
        let mut c = counts(&[("orders", 3), ("customers", 4)]);
        let err = enforce_copartitioning(
            &[strings(&["orders", "customers"])],
            &BTreeSet::new(),
            &BTreeSet::new(),
            &mut c,
        )
        .expect_err("violation");
        let msg = err.to_string();
        assert!(
            msg.contains("orders=3") && msg.contains("customers=4"),
            "{msg}"
        );
    }

    #[test]
    fn repartition_topics_take_the_group_count() {
        let mut c = counts(&[("orders", 3), ("app-x-repartition", 6)]);
        let rep = BTreeSet::from(["app-x-repartition".to_string()]);
        enforce_copartitioning(
            &[strings(&["orders", "app-x-repartition"])],
            &rep,
            &BTreeSet::new(),
            &mut c,
        )
        .expect("ok");
        assert_eq!(c["app-x-repartition"], 3);
        // A fixed count that disagrees is an error.
        let err = enforce_copartitioning(
            &[strings(&["orders", "app-x-repartition"])],
            &rep,
            &rep.clone(),
            &mut counts(&[("orders", 3), ("app-x-repartition", 6)]),
        );
        assert!(err.is_err());
    }
}
