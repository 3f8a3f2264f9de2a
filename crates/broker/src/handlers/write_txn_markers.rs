//! WriteTxnMarkers (key 27), v1 (Kafka 4 removed v0; v2 adds the
//! transaction version of KIP-890 part 2, not served): a transaction
//! coordinator asks the leader of each partition of a transaction to write
//! its COMMIT or ABORT marker. An inter-broker API; this node answers for
//! the partitions it leads (Kafka's `handleWriteTxnMarkersRequest`):
//!
//! - each marker is written through `Broker::write_txn_markers` (control
//!   batch through the partition layer; on `__consumer_offsets` through the
//!   group coordinator, which commits or drops the pending offsets), with
//!   Kafka's per-partition errors: UNKNOWN_TOPIC_OR_PARTITION (no replica
//!   here), NOT_LEADER_OR_FOLLOWER, INVALID_PRODUCER_EPOCH and
//!   TRANSACTION_COORDINATOR_FENCED from producer state, storage errors;
//! - the response lists, per producer id (markers of the same producer are
//!   merged, as Kafka's map of results does), per topic, each partition's
//!   error code; no markers, an empty response.

use std::sync::Arc;

use proto_kafka::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use proto_kafka::messages::{TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use proto_kafka::protocol::StrBytes;

use super::Ctx;
use crate::broker::Broker;
use crate::txn_markers::MarkerWrite;

pub(crate) const VERSIONS: (i16, i16) = (1, 1);

pub(crate) async fn handle(
    broker: &Arc<Broker>,
    req: WriteTxnMarkersRequest,
    _ctx: &Ctx,
) -> WriteTxnMarkersResponse {
    let mut resp = WriteTxnMarkersResponse::default();
    for m in req.markers {
        let partitions: Vec<(String, i32)> = m
            .topics
            .iter()
            .flat_map(|t| {
                let name = t.name.0.to_string();
                t.partition_indexes.iter().map(move |&p| (name.clone(), p))
            })
            .collect();
        let written = broker
            .write_txn_markers(MarkerWrite {
                producer_id: m.producer_id.0,
                producer_epoch: m.producer_epoch,
                coordinator_epoch: m.coordinator_epoch,
                commit: m.transaction_result,
                partitions,
            })
            .await;
        let i = match resp
            .markers
            .iter()
            .position(|r| r.producer_id == m.producer_id)
        {
            Some(i) => i,
            None => {
                let mut r = WritableTxnMarkerResult::default();
                r.producer_id = m.producer_id;
                resp.markers.push(r);
                resp.markers.len() - 1
            }
        };
        let result = &mut resp.markers[i];
        for ((topic, partition), error) in written {
            let ti = match result
                .topics
                .iter()
                .position(|t| t.name.0.as_str() == topic)
            {
                Some(ti) => ti,
                None => {
                    let mut t = WritableTxnMarkerTopicResult::default();
                    t.name = TopicName(StrBytes::from_string(topic));
                    result.topics.push(t);
                    result.topics.len() - 1
                }
            };
            let parts = &mut result.topics[ti].partitions;
            let code = error.map_or(0, |e| e.code());
            match parts.iter_mut().find(|p| p.partition_index == partition) {
                // Named twice: the later write's result stands, as in
                // Kafka's map.
                Some(p) => p.error_code = code,
                None => {
                    let mut p = WritableTxnMarkerPartitionResult::default();
                    p.partition_index = partition;
                    p.error_code = code;
                    parts.push(p);
                }
            }
        }
    }
    resp
}

#[cfg(test)]
#[path = "write_txn_markers_tests.rs"]
mod tests;
