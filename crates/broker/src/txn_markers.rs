//! PLACEHOLDER (txnrt branch): a minimal marker write path so the
//! transaction coordinator runtime (`txn_coordinator`) can be tested
//! before the txnstore branch lands. The txnstore branch owns this file
//! (`MarkerWrite`, `Broker::write_txn_markers` with this signature); the
//! lead replaces this version with it at merge.
//!
//! What it does: for each partition this node leads, append one
//! COMMIT/ABORT control batch (Kafka's `EndTransactionMarker`: key
//! `(version 0, type)`, value `(version 0, coordinator epoch)`) through the
//! partition layer, so producer state completes the transaction. What it
//! does not: the last stable offset, the `.txnindex`, applying or dropping
//! pending offsets on `__consumer_offsets`, WriteTxnMarkers to remote
//! leaders.

use std::sync::Arc;

use proto_kafka::ResponseError;
use sluice_protocol::record::codec::{assemble, encode_record, BatchFields, ProducerInfo};
use sluice_protocol::record::{Compression, Record};

use crate::broker::Broker;

/// A COMMIT or ABORT marker for one producer on some partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MarkerWrite {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub commit: bool,
    pub partitions: Vec<(String, i32)>,
}

/// Attributes of a transactional control batch, uncompressed.
const CONTROL_ATTRIBUTES: i16 = 0x10 | 0x20;

impl Broker {
    /// PLACEHOLDER (see the module docs): appends the marker to each
    /// partition this node leads and answers per partition: `None` when
    /// written, else Kafka's error. (The issue writes `ResponseError::None`,
    /// which proto-kafka does not have: no error is `None` here.)
    pub(crate) async fn write_txn_markers(
        self: &Arc<Self>,
        write: MarkerWrite,
    ) -> Vec<((String, i32), Option<ResponseError>)> {
        let me = Arc::clone(self);
        crate::blocking::on_pool(move || {
            write
                .partitions
                .iter()
                .map(|(topic, p)| {
                    let code = me.write_one_marker(&write, topic, *p);
                    ((topic.clone(), *p), code)
                })
                .collect()
        })
        .await
    }

    fn write_one_marker(&self, w: &MarkerWrite, topic: &str, p: i32) -> Option<ResponseError> {
        let Some(part) = self.partition(topic, p) else {
            let known = self
                .image()
                .topic(topic)
                .is_some_and(|t| t.partitions.contains_key(&p));
            return Some(if known {
                ResponseError::NotLeaderOrFollower
            } else {
                ResponseError::UnknownTopicOrPartition
            });
        };
        let now = crate::groups::now_ms();
        let batch = match control_batch(w, now) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %e, "building a transaction marker failed");
                return Some(ResponseError::UnknownServerError);
            }
        };
        match part.append_for_coordinator(batch) {
            Ok(_) => None,
            Err(e) => Some(crate::handlers::errors::storage_error(&e).code),
        }
    }
}

/// One control batch holding the end-transaction marker.
fn control_batch(w: &MarkerWrite, now: i64) -> sluice_protocol::Result<Vec<u8>> {
    let mut key = Vec::with_capacity(4);
    key.extend_from_slice(&0i16.to_be_bytes());
    key.extend_from_slice(&i16::from(w.commit).to_be_bytes());
    let mut value = Vec::with_capacity(6);
    value.extend_from_slice(&0i16.to_be_bytes());
    value.extend_from_slice(&w.coordinator_epoch.to_be_bytes());
    let mut payload = Vec::new();
    encode_record(
        &mut payload,
        &Record::new(Some(key), Some(value), now),
        0,
        0,
    );
    let fields = BatchFields {
        base_offset: 0,
        partition_leader_epoch: -1,
        attributes: CONTROL_ATTRIBUTES,
        last_offset_delta: 0,
        base_timestamp: now,
        max_timestamp: now,
        producer: ProducerInfo {
            producer_id: w.producer_id,
            producer_epoch: w.producer_epoch,
            base_sequence: -1,
        },
        records_count: 1,
    };
    assemble(&fields, Compression::None, &payload)
}
