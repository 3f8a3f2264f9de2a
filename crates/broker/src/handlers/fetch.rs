//! Fetch (key 1): read each requested partition from its fetch offset,
//! within `partition_max_bytes` and the response's `max_bytes`, always
//! returning a whole first batch (KIP-74); long-poll until `min_bytes` are
//! available or `max_wait_ms` passes, woken by appends rather than polling.
//! Consumers read up to the high watermark, followers to the log end.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use proto_kafka::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use proto_kafka::messages::{BrokerId, FetchRequest, FetchResponse};
use proto_kafka::ResponseError;
use sluice_storage::ReadLimit;

use super::errors::storage_error;
use super::Ctx;
use crate::broker::Broker;

pub(crate) const VERSIONS: (i16, i16) = (4, 12);

const READ_COMMITTED: i8 = 1;

pub(crate) async fn handle(broker: &Arc<Broker>, req: FetchRequest, ctx: &Ctx) -> FetchResponse {
    let wait = Duration::from_millis(req.max_wait_ms.max(0) as u64);
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        // Register for the wake-up before reading, so an append between the
        // read and the wait is not missed.
        let appended = broker.appended.notified();
        tokio::pin!(appended);
        appended.as_mut().enable();
        let (resp, bytes, errors) = read(broker, &req, ctx.version);
        let satisfied = bytes >= i64::from(req.min_bytes.max(0)) || errors;
        if satisfied || tokio::time::Instant::now() >= deadline || req.session_id != 0 {
            return resp;
        }
        tokio::select! {
            () = appended => {}
            () = tokio::time::sleep_until(deadline) => return read(broker, &req, ctx.version).0,
        }
    }
}

/// One pass over the requested partitions: the response, the record bytes
/// in it, and whether any partition had an error.
fn read(broker: &Broker, req: &FetchRequest, version: i16) -> (FetchResponse, i64, bool) {
    let mut resp = FetchResponse::default();
    if req.session_id != 0 {
        // No session was ever handed out (session_id 0 in every response).
        resp.error_code = ResponseError::FetchSessionIdNotFound.code();
        return (resp, 0, true);
    }
    let follower = req.replica_id.0 >= 0 || req.replica_state.replica_id.0 >= 0;
    let limit = if follower {
        ReadLimit::LogEnd
    } else {
        ReadLimit::HighWatermark
    };
    let mut budget = if req.max_bytes > 0 {
        i64::from(req.max_bytes)
    } else {
        i64::MAX
    };
    let mut total = 0i64;
    let mut errors = false;
    for t in &req.topics {
        let name = t.topic.0.to_string();
        let mut tr = FetchableTopicResponse::default();
        tr.topic = t.topic.clone();
        tr.topic_id = t.topic_id;
        for p in &t.partitions {
            let mut pd = PartitionData::default();
            pd.partition_index = p.partition;
            pd.high_watermark = -1;
            pd.last_stable_offset = -1;
            pd.log_start_offset = -1;
            pd.preferred_read_replica = BrokerId(-1);
            pd.aborted_transactions = (req.isolation_level == READ_COMMITTED).then(Vec::new);
            match broker.log(&name, p.partition) {
                None => {
                    pd.error_code = ResponseError::UnknownTopicOrPartition.code();
                    errors = true;
                }
                Some(log) => {
                    let max = i64::from(p.partition_max_bytes.max(0)).min(budget.max(0));
                    let first = total == 0;
                    match log.read(p.fetch_offset, max as u64, limit, first) {
                        Ok(info) => {
                            pd.high_watermark = info.high_watermark;
                            pd.last_stable_offset = info.high_watermark;
                            if version >= 5 {
                                pd.log_start_offset = info.log_start_offset;
                            }
                            let bytes = match info.region.map(|r| r.read_to_vec()) {
                                None => Bytes::new(),
                                Some(Ok(v)) => Bytes::from(v),
                                Some(Err(e)) => {
                                    tracing::error!(partition = %log.topic_partition(), error = %e, "fetch read failed");
                                    pd.error_code = ResponseError::KafkaStorageError.code();
                                    errors = true;
                                    Bytes::new()
                                }
                            };
                            total += bytes.len() as i64;
                            budget -= bytes.len() as i64;
                            pd.records = Some(bytes);
                        }
                        Err(e) => {
                            pd.error_code = storage_error(&e).code.code();
                            pd.high_watermark = log.high_watermark();
                            pd.last_stable_offset = log.high_watermark();
                            if version >= 5 {
                                pd.log_start_offset = log.log_start_offset();
                            }
                            errors = true;
                        }
                    }
                }
            }
            if pd.records.is_none() {
                pd.records = Some(Bytes::new());
            }
            tr.partitions.push(pd);
        }
        resp.responses.push(tr);
    }
    (resp, total, errors)
}
