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

use std::sync::Arc;

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

impl Broker {
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
    ) -> Vec<((String, i32), Option<ResponseError>)> {
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
