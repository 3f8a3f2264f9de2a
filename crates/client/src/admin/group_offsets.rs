//! Committed-offset operations of [`Admin`] on consumer groups: list
//! (OffsetFetch), alter (OffsetCommit) and delete (OffsetDelete) a group's
//! committed offsets. Requests go to the group's coordinator, with the
//! coordinator retries described in [`super::groups`].

use std::collections::BTreeMap;

use proto_kafka::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use proto_kafka::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use proto_kafka::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use proto_kafka::messages::{
    GroupId, OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest,
};

use super::groups::is_coordinator_error;
use super::{by_topic, check, msg, name, s, Admin};
use crate::accumulator::TopicPartition;
use crate::error::{ClientError, Result};

const OFFSET_FETCH_MAX: i16 = 9;
const OFFSET_COMMIT_MAX: i16 = 9;
const OFFSET_DELETE_MAX: i16 = 0;

/// A committed offset of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetAndMetadata {
    /// The next offset to consume.
    pub offset: i64,
    /// Free-form metadata stored with the offset.
    pub metadata: Option<String>,
    /// Leader epoch of the last consumed record, if known.
    pub leader_epoch: Option<i32>,
}

impl OffsetAndMetadata {
    /// An offset without metadata or leader epoch.
    pub fn new(offset: i64) -> Self {
        OffsetAndMetadata {
            offset,
            metadata: None,
            leader_epoch: None,
        }
    }
}

/// The first non-zero error code of `(topic, partition, code)` rows as
/// [`ClientError::Kafka`].
fn first_error<'a>(what: &str, codes: impl IntoIterator<Item = (&'a str, i32, i16)>) -> Result<()> {
    for (topic, partition, code) in codes {
        check(code, None, format!("{what} for {topic}-{partition}"))?;
    }
    Ok(())
}

impl Admin {
    /// The committed offsets of `group` (OffsetFetch to its coordinator):
    /// of every partition with a commit when `partitions` is `None`, else of
    /// those partitions. Partitions without a committed offset (offset -1)
    /// are left out, as are partitions the broker answers with an error.
    /// Fails with the group's error (e.g. `GROUP_AUTHORIZATION_FAILED`).
    pub async fn list_consumer_group_offsets(
        &self,
        group: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<BTreeMap<TopicPartition, OffsetAndMetadata>> {
        self.group_offsets(group, partitions, false).await
    }

    /// The committed offsets a consumer starts from: like
    /// [`Admin::list_consumer_group_offsets`], but with `require_stable`
    /// (KIP-447: wait for pending transactional commits) and failing on any
    /// partition error instead of skipping the partition
    /// (`UNSTABLE_OFFSET_COMMIT` is retriable).
    pub(crate) async fn consumer_group_offsets(
        &self,
        group: &str,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, OffsetAndMetadata>> {
        self.group_offsets(group, Some(partitions), true).await
    }

    async fn group_offsets(
        &self,
        group: &str,
        partitions: Option<&[TopicPartition]>,
        strict: bool,
    ) -> Result<BTreeMap<TopicPartition, OffsetAndMetadata>> {
        let wanted = partitions.map(by_topic);
        let wanted = &wanted;
        let (resp, version) = self
            .coordinator_request(
                group,
                "list group offsets",
                OFFSET_FETCH_MAX,
                |v| {
                    let mut req = OffsetFetchRequest::default();
                    if v >= 7 {
                        req.require_stable = strict;
                    }
                    if v >= 8 {
                        let mut g = OffsetFetchRequestGroup::default();
                        g.group_id = GroupId(s(group));
                        g.topics = wanted.as_ref().map(|w| {
                            w.iter()
                                .map(|(t, ps)| {
                                    let mut rt = OffsetFetchRequestTopics::default();
                                    rt.name = name(t);
                                    rt.partition_indexes.clone_from(ps);
                                    rt
                                })
                                .collect()
                        });
                        req.groups = vec![g];
                    } else {
                        if v < 2 && wanted.is_none() {
                            return Err(ClientError::InvalidArgument(format!(
                                "OffsetFetch v{v} cannot list every partition"
                            )));
                        }
                        req.group_id = GroupId(s(group));
                        req.topics = wanted.as_ref().map(|w| {
                            w.iter()
                                .map(|(t, ps)| {
                                    let mut rt = OffsetFetchRequestTopic::default();
                                    rt.name = name(t);
                                    rt.partition_indexes.clone_from(ps);
                                    rt
                                })
                                .collect()
                        });
                    }
                    Ok(req)
                },
                |resp, v| match v {
                    8.. => resp.groups.first().map_or(0, |g| g.error_code),
                    2..=7 => resp.error_code,
                    // v1 reports group errors in every partition.
                    _ => resp
                        .topics
                        .iter()
                        .flat_map(|t| &t.partitions)
                        .map(|p| p.error_code)
                        .find(|c| is_coordinator_error(*c))
                        .unwrap_or(0),
                },
            )
            .await?;
        let context = format!("list offsets of group {group}");
        // One row per answered partition: where, what, and its error code.
        let row = |topic: &str, partition, offset, epoch: i32, metadata, code: i16| {
            let o = OffsetAndMetadata {
                offset,
                metadata,
                leader_epoch: (epoch >= 0).then_some(epoch),
            };
            (TopicPartition::new(topic, partition), o, code)
        };
        let mut rows = Vec::new();
        if version >= 8 {
            let g = resp
                .groups
                .iter()
                .find(|g| g.group_id.0.as_str() == group)
                .ok_or_else(|| ClientError::Protocol(format!("{context}: no answer")))?;
            check(g.error_code, None, context.clone())?;
            for t in &g.topics {
                for p in &t.partitions {
                    let (offset, epoch) = (p.committed_offset, p.committed_leader_epoch);
                    let metadata = msg(&p.metadata);
                    let name = t.name.0.as_str();
                    rows.push(row(
                        name,
                        p.partition_index,
                        offset,
                        epoch,
                        metadata,
                        p.error_code,
                    ));
                }
            }
        } else {
            if version >= 2 {
                check(resp.error_code, None, context.clone())?;
            }
            for t in &resp.topics {
                for p in &t.partitions {
                    let epoch = if version >= 5 {
                        p.committed_leader_epoch
                    } else {
                        -1
                    };
                    let (offset, metadata) = (p.committed_offset, msg(&p.metadata));
                    let name = t.name.0.as_str();
                    rows.push(row(
                        name,
                        p.partition_index,
                        offset,
                        epoch,
                        metadata,
                        p.error_code,
                    ));
                }
            }
        }
        let mut out = BTreeMap::new();
        for (tp, offset, code) in rows {
            if code != 0 {
                if strict {
                    let (topic, partition) = (&tp.topic, tp.partition);
                    check(code, None, format!("{context}: {topic}-{partition}"))?;
                }
                if version < 2 {
                    // v1 has no group error field: this is the group's error.
                    check(code, None, context.clone())?;
                }
                let (topic, partition) = (&tp.topic, tp.partition);
                tracing::warn!(group, topic, partition, code, "skipping offset with error");
                continue;
            }
            // -1: nothing committed for this partition.
            if offset.offset >= 0 {
                out.insert(tp, offset);
            }
        }
        Ok(out)
    }

    /// Sets committed offsets of `group` (OffsetCommit to its coordinator
    /// with generation -1 and an empty member id, as Kafka's admin client
    /// does). Only allowed while the group has no members: an active group
    /// answers `UNKNOWN_MEMBER_ID` (or `REBALANCE_IN_PROGRESS`), returned as
    /// the error. Fails with the first partition error, e.g.
    /// `UNKNOWN_TOPIC_OR_PARTITION`.
    pub async fn alter_consumer_group_offsets(
        &self,
        group: &str,
        offsets: &BTreeMap<TopicPartition, OffsetAndMetadata>,
    ) -> Result<()> {
        let topics = by_topic(offsets.keys());
        let topics = &topics;
        let (resp, _) = self
            .coordinator_request(
                group,
                "alter group offsets",
                OFFSET_COMMIT_MAX,
                |v| {
                    let mut req = OffsetCommitRequest::default();
                    req.group_id = GroupId(s(group));
                    req.generation_id_or_member_epoch = -1;
                    req.member_id = s("");
                    for (topic, parts) in topics {
                        let mut t = OffsetCommitRequestTopic::default();
                        t.name = name(topic);
                        for p in parts {
                            let o = &offsets[&TopicPartition::new(*topic, *p)];
                            let mut cp = OffsetCommitRequestPartition::default();
                            cp.partition_index = *p;
                            cp.committed_offset = o.offset;
                            if v >= 6 {
                                cp.committed_leader_epoch = o.leader_epoch.unwrap_or(-1);
                            }
                            cp.committed_metadata = o.metadata.as_deref().map(s);
                            t.partitions.push(cp);
                        }
                        req.topics.push(t);
                    }
                    Ok(req)
                },
                |resp, _| {
                    resp.topics
                        .iter()
                        .flat_map(|t| &t.partitions)
                        .map(|p| p.error_code)
                        .find(|c| is_coordinator_error(*c))
                        .unwrap_or(0)
                },
            )
            .await?;
        first_error(
            &format!("commit offset of group {group}"),
            resp.topics.iter().flat_map(|t| {
                let topic = t.name.0.as_str();
                t.partitions
                    .iter()
                    .map(move |p| (topic, p.partition_index, p.error_code))
            }),
        )
    }

    /// Deletes committed offsets of `group` (OffsetDelete to its
    /// coordinator). Fails with the group's error (`GROUP_ID_NOT_FOUND`,
    /// `NON_EMPTY_GROUP`) or the first partition error
    /// (`GROUP_SUBSCRIBED_TO_TOPIC` while a member consumes the topic,
    /// `UNKNOWN_TOPIC_OR_PARTITION`).
    pub async fn delete_consumer_group_offsets(
        &self,
        group: &str,
        partitions: &[TopicPartition],
    ) -> Result<()> {
        let topics = by_topic(partitions);
        let topics = &topics;
        let (resp, _) = self
            .coordinator_request(
                group,
                "delete group offsets",
                OFFSET_DELETE_MAX,
                |_| {
                    let mut req = OffsetDeleteRequest::default();
                    req.group_id = GroupId(s(group));
                    for (topic, parts) in topics {
                        let mut t = OffsetDeleteRequestTopic::default();
                        t.name = name(topic);
                        for p in parts {
                            let mut dp = OffsetDeleteRequestPartition::default();
                            dp.partition_index = *p;
                            t.partitions.push(dp);
                        }
                        req.topics.push(t);
                    }
                    Ok(req)
                },
                |resp, _| resp.error_code,
            )
            .await?;
        check(
            resp.error_code,
            None,
            format!("delete offsets of group {group}"),
        )?;
        first_error(
            &format!("delete offset of group {group}"),
            resp.topics.iter().flat_map(|t| {
                let topic = t.name.0.as_str();
                t.partitions
                    .iter()
                    .map(move |p| (topic, p.partition_index, p.error_code))
            }),
        )
    }
}
