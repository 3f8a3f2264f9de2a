//! Record operations of [`Admin`]: list offsets by time (ListOffsets) and
//! delete records below an offset (DeleteRecords).
//!
//! Requests are grouped per partition leader (one request per broker);
//! metadata is refreshed once when a leader is unknown, and partitions
//! failing with a retriable error (`NOT_LEADER_OR_FOLLOWER`,
//! `LEADER_NOT_AVAILABLE`, lost connections, ...) are sent again, after a
//! metadata refresh, within the client's retry budget.

use std::collections::BTreeMap;
use std::future::Future;

use proto_kafka::error::ResponseError;
use proto_kafka::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
use proto_kafka::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use proto_kafka::messages::{BrokerId, DeleteRecordsRequest, ListOffsetsRequest};

use super::{by_topic, name, Admin};
use crate::accumulator::TopicPartition;
use crate::error::{ClientError, Result};

/// Highest ListOffsets version used (the broker's maximum; proto-kafka has 10).
const LIST_OFFSETS_MAX: i16 = 8;
/// Highest DeleteRecords version used.
const DELETE_RECORDS_MAX: i16 = 2;
/// ListOffsets knows the max-timestamp spec from v7 (KIP-734).
const LIST_OFFSETS_MAX_TIMESTAMP_MIN: i16 = 7;

/// Which offset [`Admin::list_offsets`] looks up for a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OffsetSpec {
    /// The log start offset (timestamp -2 on the wire).
    Earliest,
    /// The offset the next record will get: the high watermark, or the last
    /// stable offset with [`IsolationLevel::ReadCommitted`] (timestamp -1).
    Latest,
    /// The first offset whose record timestamp is at or after this
    /// timestamp (milliseconds since the epoch).
    Timestamp(i64),
    /// The offset of the record with the largest timestamp (timestamp -3;
    /// needs ListOffsets v7+).
    MaxTimestamp,
}

impl OffsetSpec {
    /// The `timestamp` sent in ListOffsets.
    pub fn wire_timestamp(self) -> i64 {
        match self {
            OffsetSpec::Earliest => -2,
            OffsetSpec::Latest => -1,
            OffsetSpec::Timestamp(t) => t,
            OffsetSpec::MaxTimestamp => -3,
        }
    }
}

/// Which records are visible when listing or fetching offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum IsolationLevel {
    /// Every record up to the high watermark (`read_uncommitted`, 0).
    #[default]
    ReadUncommitted,
    /// Only records of committed transactions, up to the last stable offset
    /// (`read_committed`, 1).
    ReadCommitted,
}

impl IsolationLevel {
    /// Kafka's wire value: 0 for read_uncommitted, 1 for read_committed.
    pub fn as_i8(self) -> i8 {
        match self {
            IsolationLevel::ReadUncommitted => 0,
            IsolationLevel::ReadCommitted => 1,
        }
    }
}

/// The answer of [`Admin::list_offsets`] for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListOffsetsResultInfo {
    /// The offset found; -1 when a [`OffsetSpec::Timestamp`] is later than
    /// every record.
    pub offset: i64,
    /// The timestamp of the record at `offset` for timestamp specs; -1 for
    /// [`OffsetSpec::Earliest`] and [`OffsetSpec::Latest`].
    pub timestamp: i64,
    /// The leader epoch of the record at `offset`, when the broker knows it
    /// (ListOffsets v4+).
    pub leader_epoch: Option<i32>,
}

/// The results of one per-leader request: one entry per answered partition.
type PartitionResults<T> = Vec<(TopicPartition, Result<T>)>;

impl Admin {
    /// Looks up offsets of partitions (ListOffsets, `read_uncommitted`):
    /// the earliest, the latest, the first at or after a timestamp, or the
    /// one with the largest timestamp. Fails with the first partition error
    /// (e.g. `UNKNOWN_TOPIC_OR_PARTITION`) as [`ClientError::Kafka`].
    pub async fn list_offsets(
        &self,
        partitions: &[(TopicPartition, OffsetSpec)],
    ) -> Result<BTreeMap<TopicPartition, ListOffsetsResultInfo>> {
        self.list_offsets_with_isolation(partitions, IsolationLevel::ReadUncommitted)
            .await
    }

    /// [`Admin::list_offsets`] with an explicit isolation level:
    /// [`IsolationLevel::ReadCommitted`] makes [`OffsetSpec::Latest`] the
    /// last stable offset. When a partition appears twice the last spec wins.
    pub async fn list_offsets_with_isolation(
        &self,
        partitions: &[(TopicPartition, OffsetSpec)],
        isolation: IsolationLevel,
    ) -> Result<BTreeMap<TopicPartition, ListOffsetsResultInfo>> {
        let specs: BTreeMap<TopicPartition, OffsetSpec> = partitions.iter().cloned().collect();
        let specs = &specs;
        let results = self
            .per_leader(
                "ListOffsets",
                specs.keys().cloned().collect(),
                |leader, tps| self.list_offsets_at(leader, tps, specs, isolation),
            )
            .await?;
        results
            .into_iter()
            .map(|(tp, r)| r.map(|info| (tp, info)))
            .collect()
    }

    /// One ListOffsets request to `leader` for `tps`.
    async fn list_offsets_at(
        &self,
        leader: i32,
        tps: Vec<TopicPartition>,
        specs: &BTreeMap<TopicPartition, OffsetSpec>,
        isolation: IsolationLevel,
    ) -> Result<PartitionResults<ListOffsetsResultInfo>> {
        let (resp, version) = self
            .send_once(Some(leader), LIST_OFFSETS_MAX, |v| {
                let mut req = ListOffsetsRequest::default();
                req.replica_id = BrokerId(-1);
                if v >= 2 {
                    req.isolation_level = isolation.as_i8();
                } else if isolation == IsolationLevel::ReadCommitted {
                    return Err(ClientError::InvalidArgument(format!(
                        "ListOffsets v{v} has no isolation level"
                    )));
                }
                for (topic, parts) in by_topic(&tps) {
                    let mut t = ListOffsetsTopic::default();
                    t.name = name(topic);
                    for p in parts {
                        let spec = specs
                            .get(&TopicPartition::new(topic, p))
                            .copied()
                            .unwrap_or(OffsetSpec::Latest);
                        if spec == OffsetSpec::MaxTimestamp && v < LIST_OFFSETS_MAX_TIMESTAMP_MIN {
                            return Err(ClientError::InvalidArgument(format!(
                                "ListOffsets v{v} cannot look up the max timestamp"
                            )));
                        }
                        let mut lp = ListOffsetsPartition::default();
                        lp.partition_index = p;
                        lp.timestamp = spec.wire_timestamp();
                        t.partitions.push(lp);
                    }
                    req.topics.push(t);
                }
                Ok(req)
            })
            .await?;
        let mut out = Vec::new();
        for t in &resp.topics {
            let topic = t.name.0.as_str();
            for p in &t.partitions {
                let tp = TopicPartition::new(topic, p.partition_index);
                let r = match ClientError::from_code(
                    p.error_code,
                    None,
                    format!("list offsets of {topic}-{}", p.partition_index),
                ) {
                    Some(e) => Err(e),
                    None => Ok(ListOffsetsResultInfo {
                        offset: p.offset,
                        timestamp: p.timestamp,
                        leader_epoch: (version >= 4 && p.leader_epoch >= 0)
                            .then_some(p.leader_epoch),
                    }),
                };
                out.push((tp, r));
            }
        }
        Ok(out)
    }

    /// Deletes the records of each partition below the given offset
    /// (DeleteRecords; -1 means the high watermark, i.e. everything), moving
    /// the log start offset forward. Returns, per partition, the new low
    /// watermark or the partition's error — `OFFSET_OUT_OF_RANGE` for an
    /// offset past the high watermark, `POLICY_VIOLATION` for a compacted
    /// topic, `UNKNOWN_TOPIC_OR_PARTITION`, ... Fails as a whole only when
    /// the brokers cannot be reached.
    pub async fn delete_records(
        &self,
        before: &BTreeMap<TopicPartition, i64>,
    ) -> Result<BTreeMap<TopicPartition, Result<i64>>> {
        self.per_leader(
            "DeleteRecords",
            before.keys().cloned().collect(),
            |leader, tps| self.delete_records_at(leader, tps, before),
        )
        .await
    }

    /// One DeleteRecords request to `leader` for `tps`.
    async fn delete_records_at(
        &self,
        leader: i32,
        tps: Vec<TopicPartition>,
        before: &BTreeMap<TopicPartition, i64>,
    ) -> Result<PartitionResults<i64>> {
        let timeout_ms = self.timeout_ms();
        let (resp, _) = self
            .send_once(Some(leader), DELETE_RECORDS_MAX, |_| {
                let mut req = DeleteRecordsRequest::default();
                req.timeout_ms = timeout_ms;
                for (topic, parts) in by_topic(&tps) {
                    let mut t = DeleteRecordsTopic::default();
                    t.name = name(topic);
                    for p in parts {
                        let mut dp = DeleteRecordsPartition::default();
                        dp.partition_index = p;
                        dp.offset = before
                            .get(&TopicPartition::new(topic, p))
                            .copied()
                            .unwrap_or(-1);
                        t.partitions.push(dp);
                    }
                    req.topics.push(t);
                }
                Ok(req)
            })
            .await?;
        let mut out = Vec::new();
        for t in &resp.topics {
            let topic = t.name.0.as_str();
            for p in &t.partitions {
                let tp = TopicPartition::new(topic, p.partition_index);
                let r = match ClientError::from_code(
                    p.error_code,
                    None,
                    format!("delete records of {topic}-{}", p.partition_index),
                ) {
                    Some(e) => Err(e),
                    None => Ok(p.low_watermark),
                };
                out.push((tp, r));
            }
        }
        Ok(out)
    }

    /// Runs `send(leader, partitions)` once per partition leader, then again
    /// for partitions that failed with a retriable error (after backoff and
    /// a metadata refresh) until the retry budget is spent. Partitions
    /// without a known leader after a refresh fail with
    /// `UNKNOWN_TOPIC_OR_PARTITION` (topic or partition missing) or
    /// `LEADER_NOT_AVAILABLE` (retried). A transport failure still failing
    /// after the last retry fails the whole call.
    async fn per_leader<T, F, Fut>(
        &self,
        what: &str,
        partitions: Vec<TopicPartition>,
        send: F,
    ) -> Result<BTreeMap<TopicPartition, Result<T>>>
    where
        F: Fn(i32, Vec<TopicPartition>) -> Fut,
        Fut: Future<Output = Result<PartitionResults<T>>>,
    {
        let config = self.cluster.config().clone();
        let mut backoff = config.retry_backoff;
        let mut attempt = 0;
        let mut results = BTreeMap::new();
        let mut pending = partitions;
        loop {
            let last = attempt >= config.retries;
            let mut retry: Vec<(TopicPartition, ClientError)> = Vec::new();
            let (buckets, leaderless) = self.leaders(&pending).await?;
            for (tp, e) in leaderless {
                // A topic or partition missing from fresh metadata does not
                // exist: fail it now (as Kafka's admin client does).
                let missing = e.response_error() == Some(ResponseError::UnknownTopicOrPartition);
                if e.is_retriable() && !last && !missing {
                    retry.push((tp, e));
                } else {
                    results.insert(tp, Err(e));
                }
            }
            for (leader, tps) in buckets {
                match send(leader, tps.clone()).await {
                    Ok(answered) => {
                        for (tp, r) in answered {
                            if !tps.contains(&tp) || results.contains_key(&tp) {
                                continue;
                            }
                            match r {
                                Err(e) if e.is_retriable() && !last => retry.push((tp, e)),
                                r => {
                                    results.insert(tp, r);
                                }
                            }
                        }
                        for tp in tps {
                            if !results.contains_key(&tp) && !retry.iter().any(|(t, _)| *t == tp) {
                                let e = ClientError::Protocol(format!(
                                    "no {what} result for {}-{}",
                                    tp.topic, tp.partition
                                ));
                                results.insert(tp, Err(e));
                            }
                        }
                    }
                    Err(e) if e.is_retriable() && !last => {
                        tracing::debug!(%e, leader, what, "request failed, will retry");
                        retry.extend(tps.into_iter().map(|tp| {
                            let e = ClientError::NoBrokerAvailable(format!("broker {leader}"));
                            (tp, e)
                        }));
                    }
                    Err(e) => return Err(e),
                }
            }
            if retry.is_empty() {
                return Ok(results);
            }
            attempt += 1;
            tracing::debug!(
                what,
                attempt,
                partitions = retry.len(),
                "retrying partitions"
            );
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(config.retry_backoff_max);
            let mut topics: Vec<String> = retry.iter().map(|(tp, _)| tp.topic.clone()).collect();
            topics.sort();
            topics.dedup();
            // Best effort: a failed refresh shows up on the next try.
            let _ = self.cluster.refresh(Some(&topics)).await;
            pending = retry.into_iter().map(|(tp, _)| tp).collect();
        }
    }

    /// Groups `partitions` by leader from the cached metadata, refreshing
    /// it once when a leader is unknown. Partitions still without a leader
    /// come back with their error.
    #[allow(clippy::type_complexity)]
    async fn leaders(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<(
        BTreeMap<i32, Vec<TopicPartition>>,
        Vec<(TopicPartition, ClientError)>,
    )> {
        let mut md = self.cluster.metadata().await;
        let unknown: Vec<String> = partitions
            .iter()
            .filter(|tp| md.leader(&tp.topic, tp.partition).is_none())
            .map(|tp| tp.topic.clone())
            .collect();
        if !unknown.is_empty() {
            let mut topics = unknown;
            topics.sort();
            topics.dedup();
            self.cluster.refresh(Some(&topics)).await?;
            md = self.cluster.metadata().await;
        }
        let mut buckets: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
        let mut leaderless = Vec::new();
        for tp in partitions {
            if let Some(b) = md.leader(&tp.topic, tp.partition) {
                buckets.entry(b.id).or_default().push(tp.clone());
                continue;
            }
            let exists = md
                .topics
                .get(&tp.topic)
                .is_some_and(|t| t.partitions.contains_key(&tp.partition));
            let error = if exists {
                ResponseError::LeaderNotAvailable
            } else {
                ResponseError::UnknownTopicOrPartition
            };
            let e = ClientError::from_code(
                error.code(),
                None,
                format!("leader of {}-{}", tp.topic, tp.partition),
            )
            .unwrap_or_else(|| ClientError::NoBrokerAvailable(tp.topic.clone()));
            leaderless.push((tp.clone(), e));
        }
        Ok((buckets, leaderless))
    }
}
