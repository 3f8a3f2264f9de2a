//! Writing transaction markers (COMMIT/ABORT control batches) to the
//! partitions of a transaction, as their leader: the one path used by the
//! WriteTxnMarkers handler and by the transaction coordinator runtime
//! (Kafka's `KafkaApis.handleWriteTxnMarkersRequest` over
//! `ReplicaManager.appendRecords` and the group coordinator's
//! `completeTransaction`).
//!
//! Per partition:
//! - not led here: NOT_LEADER_OR_FOLLOWER when this node is a replica of
//!   it, else UNKNOWN_TOPIC_OR_PARTITION (Kafka answers that when the
//!   broker has no log for the partition);
//! - `__consumer_offsets`: through the group coordinator's shard, which
//!   appends the marker and then commits or drops the producer's pending
//!   offsets; its "coordinator not ready" errors become
//!   NOT_LEADER_OR_FOLLOWER, which the transaction coordinator retries;
//! - any other partition: the marker is appended through the partition
//!   layer (producer state checks the producer and coordinator epochs:
//!   INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED), then, as
//!   Kafka appends markers with acks=-1, the call waits until the high
//!   watermark covers it.
//!
//! The transaction coordinator sends its markers with
//! [`Broker::send_txn_markers`]: partitions this node leads are written
//! here, the others go to their leader in a WriteTxnMarkers request (Kafka's
//! `TransactionMarkerChannelManager`); a leader that cannot be reached is
//! NOT_LEADER_OR_FOLLOWER for its partitions, which the coordinator retries
//! after refreshing its view of the leaders.

use std::sync::Arc;

use std::collections::BTreeMap;

use proto_kafka::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use proto_kafka::messages::{
    ApiKey, ProducerId, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;
use sluice_protocol::record::control::EndTxnMarker;

use crate::broker::{Broker, CONSUMER_OFFSETS_TOPIC};
use crate::partition::Partition;

/// One marker to write: a transaction's result for some of its
/// partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MarkerWrite {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// Epoch of the transaction coordinator writing it (its
    /// `__transaction_state` partition's leader epoch).
    pub coordinator_epoch: i32,
    pub commit: bool,
    pub partitions: Vec<(String, i32)>,
}

/// The WriteTxnMarkers version sent to other brokers.
const WRITE_TXN_MARKERS_VERSION: i16 = 1;

/// One partition's marker outcome: `None` when written.
type MarkerResult = ((String, i32), Option<ResponseError>);

impl Broker {
    /// Writes a transaction's markers wherever their partitions are led:
    /// here through [`Broker::write_txn_markers`], on other brokers with
    /// one WriteTxnMarkers request per leader (sent together). Partitions
    /// whose leader is unknown or unreachable are NOT_LEADER_OR_FOLLOWER.
    pub(crate) async fn send_txn_markers(
        self: &Arc<Self>,
        write: MarkerWrite,
    ) -> Vec<MarkerResult> {
        let image = self.image();
        let mut by_leader: BTreeMap<i32, Vec<(String, i32)>> = BTreeMap::new();
        for (topic, partition) in &write.partitions {
            let leader = image
                .topic(topic)
                .and_then(|t| t.partitions.get(partition))
                .map_or(-1, |p| p.leader);
            by_leader
                .entry(leader)
                .or_default()
                .push((topic.clone(), *partition));
        }
        let mut out = Vec::with_capacity(write.partitions.len());
        let mut remote = tokio::task::JoinSet::new();
        for (leader, partitions) in by_leader {
            let part = MarkerWrite {
                partitions,
                ..write.clone()
            };
            if leader == self.node_id || leader < 0 {
                // Not led anywhere: the local write answers as Kafka does.
                out.extend(self.write_txn_markers(part).await);
            } else {
                let me = Arc::clone(self);
                let image = Arc::clone(&image);
                remote.spawn(async move { me.remote_txn_markers(&image, leader, part).await });
            }
        }
        while let Some(done) = remote.join_next().await {
            match done {
                Ok(results) => out.extend(results),
                Err(e) => tracing::error!(error = %e, "a transaction marker request failed"),
            }
        }
        out
    }

    /// Sends one WriteTxnMarkers request to broker `leader` and reads each
    /// partition's outcome from its response.
    async fn remote_txn_markers(
        &self,
        image: &sluice_controller::MetadataImage,
        leader: i32,
        write: MarkerWrite,
    ) -> Vec<MarkerResult> {
        let mut req = WriteTxnMarkersRequest::default();
        let mut marker = WritableTxnMarker::default();
        marker.producer_id = ProducerId(write.producer_id);
        marker.producer_epoch = write.producer_epoch;
        marker.transaction_result = write.commit;
        marker.coordinator_epoch = write.coordinator_epoch;
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in &write.partitions {
            topics.entry(t.as_str()).or_default().push(*p);
        }
        marker.topics = topics
            .into_iter()
            .map(|(t, ps)| {
                let mut topic = WritableTxnMarkerTopic::default();
                topic.name = TopicName(StrBytes::from_string(t.to_string()));
                topic.partition_indexes = ps;
                topic
            })
            .collect();
        req.markers = vec![marker];
        let sent = async {
            let mut conn =
                crate::inter_broker::Conn::connect(self, image, leader, "txn-markers").await?;
            conn.call::<_, WriteTxnMarkersResponse>(
                ApiKey::WriteTxnMarkers,
                WRITE_TXN_MARKERS_VERSION,
                &req,
            )
            .await
        }
        .await;
        let resp = match sent {
            Ok(resp) => resp,
            Err(e) => {
                tracing::info!(leader, error = %e, "cannot send transaction markers; they will be retried");
                return write
                    .partitions
                    .into_iter()
                    .map(|tp| (tp, Some(ResponseError::NotLeaderOrFollower)))
                    .collect();
            }
        };
        write
            .partitions
            .into_iter()
            .map(|(topic, partition)| {
                let code = resp
                    .markers
                    .iter()
                    .filter(|m| m.producer_id.0 == write.producer_id)
                    .flat_map(|m| m.topics.iter())
                    .filter(|t| t.name.0.as_str() == topic)
                    .flat_map(|t| t.partitions.iter())
                    .find(|p| p.partition_index == partition)
                    .map_or(Some(ResponseError::UnknownServerError), |p| {
                        (p.error_code != 0).then(|| {
                            ResponseError::try_from_code(p.error_code)
                                .unwrap_or(ResponseError::UnknownServerError)
                        })
                    });
                ((topic, partition), code)
            })
            .collect()
    }

    /// Appends the marker to each partition this node leads through the
    /// partition layer (control batch; producer state completes the
    /// transaction; the LSO moves; for `__consumer_offsets` partitions the
    /// group coordinator applies or drops the pending offsets), and
    /// answers per partition: `None` when written (the issue's
    /// `ResponseError::None`, which proto-kafka does not have: it has no
    /// variant for code 0) or Kafka's error (NOT_LEADER_OR_FOLLOWER,
    /// UNKNOWN_TOPIC_OR_PARTITION, the storage's).
    pub(crate) async fn write_txn_markers(
        self: &Arc<Self>,
        write: MarkerWrite,
    ) -> Vec<MarkerResult> {
        let marker = EndTxnMarker {
            commit: write.commit,
            coordinator_epoch: write.coordinator_epoch,
        };
        let mut out = Vec::with_capacity(write.partitions.len());
        // Appended partitions wait for the high watermark together.
        let mut waits: Vec<(Arc<Partition>, i64)> = Vec::new();
        for (topic, partition) in write.partitions {
            let me = Arc::clone(self);
            let t = topic.clone();
            let (pid, epoch) = (write.producer_id, write.producer_epoch);
            // Appends may roll or fsync: off the async workers.
            let result = crate::blocking::on_pool(move || {
                me.write_one_marker(&t, partition, pid, epoch, marker)
            })
            .await;
            let code = match result {
                Ok(Some((p, end))) => {
                    waits.push((p, end));
                    None
                }
                Ok(None) => None,
                Err(code) => Some(code),
            };
            if let Some(code) = code {
                tracing::debug!(
                    topic, partition, producer_id = write.producer_id, commit = write.commit,
                    error = ?code, "transaction marker not written"
                );
            }
            out.push(((topic, partition), code));
        }
        // Kafka writes markers with acks=all and the request timeout.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        for (p, end) in waits {
            if let Err(code) = p.wait_replicated(end, deadline).await {
                let tp = p.topic_partition();
                if let Some(e) = out
                    .iter_mut()
                    .find(|((t, part), _)| *t == tp.topic && *part == tp.partition)
                {
                    e.1 = Some(code);
                }
            }
        }
        out
    }

    /// Writes one marker; `Some((partition, end))` when the caller must
    /// wait for the high watermark to reach `end`.
    fn write_one_marker(
        &self,
        topic: &str,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        marker: EndTxnMarker,
    ) -> Result<Option<(Arc<Partition>, i64)>, ResponseError> {
        let Some(part) = self.partition(topic, partition) else {
            return Err(self.not_led_error(topic, partition));
        };
        if topic == CONSUMER_OFFSETS_TOPIC {
            return self
                .groups
                .complete_txn(self, partition, producer_id, producer_epoch, marker)
                .map(|()| None)
                .map_err(|e| match e.code {
                    ResponseError::CoordinatorNotAvailable
                    | ResponseError::CoordinatorLoadInProgress
                    | ResponseError::NotCoordinator => ResponseError::NotLeaderOrFollower,
                    other => other,
                });
        }
        match part.append_marker(producer_id, producer_epoch, marker) {
            Ok(info) => Ok(Some((Arc::clone(&part), info.last_offset + 1))),
            Err(e) => Err(crate::handlers::errors::storage_error(&e).code),
        }
    }

    /// The error for a partition this node does not lead.
    pub(crate) fn not_led_error(&self, topic: &str, partition: i32) -> ResponseError {
        let image = self.image();
        let replica = image
            .topic(topic)
            .and_then(|t| t.partitions.get(&partition))
            .is_some_and(|p| p.replicas.contains(&self.node_id));
        if replica {
            ResponseError::NotLeaderOrFollower
        } else {
            ResponseError::UnknownTopicOrPartition
        }
    }
}

#[cfg(test)]
#[path = "txn_markers_tests.rs"]
pub(crate) mod tests;
