//! Produce (key 0): validate acks, find each partition (Produce never
//! creates topics: Kafka creates them on Metadata requests only, so a
//! missing topic gets UNKNOWN_TOPIC_OR_PARTITION; internal topics are
//! refused), append the batch through storage (which checks it without
//! decoding records), and answer per partition. On one node the leader is every
//! replica, so acks=all is satisfied at append, unless
//! `min.insync.replicas` asks for more replicas than exist. acks=0 gets no
//! response.

use std::sync::Arc;

use proto_kafka::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use proto_kafka::messages::{ProduceRequest, ProduceResponse};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;
use sluice_protocol::record::{BatchIter, Compression};
use sluice_protocol::ProtocolError;

use super::errors::storage_error;
use super::Ctx;
use crate::broker::{ApiError, Broker};

pub(crate) const VERSIONS: (i16, i16) = (3, 12);

/// What the connection does after a produce.
#[derive(Debug)]
pub(crate) enum Outcome {
    Respond(ProduceResponse),
    /// acks=0 and everything appended: no response.
    Silent,
    /// acks=0 and a partition failed: Kafka closes the connection so the
    /// producer notices (it gets no response to read an error from).
    Close(String),
}

pub(crate) fn handle(broker: &Arc<Broker>, req: ProduceRequest, ctx: &Ctx) -> Outcome {
    let acks = req.acks;
    let mut first_error: Option<String> = None;
    let mut resp = ProduceResponse::default();
    for td in req.topic_data {
        let name = td.name.0.to_string();
        let topic = crate::internal_topics::check_client_may_produce(&name).and_then(|()| {
            match broker.image().topic(&name) {
                Some(_) => Ok(()),
                None => Err(ApiError::code(ResponseError::UnknownTopicOrPartition)),
            }
        });
        let mut tr = TopicProduceResponse::default();
        tr.name = td.name.clone();
        for pd in td.partition_data {
            let mut pr = PartitionProduceResponse::default();
            pr.index = pd.index;
            pr.base_offset = -1;
            pr.log_append_time_ms = -1;
            pr.log_start_offset = -1;
            let result = if !matches!(acks, -1..=1) {
                Err(ApiError::code(ResponseError::InvalidRequiredAcks))
            } else {
                match &topic {
                    Err(e) => Err(e.clone()),
                    Ok(_) => append(broker, &name, pd.index, pd.records, acks, ctx.version),
                }
            };
            match result {
                Ok(info) => {
                    pr.base_offset = info.base_offset;
                    pr.log_append_time_ms = info.log_append_time;
                    if ctx.version >= 5 {
                        pr.log_start_offset = info.log_start_offset;
                    }
                }
                Err(e) => {
                    if first_error.is_none() {
                        first_error = Some(format!("{name}-{}: {:?}", pd.index, e.code));
                    }
                    pr.error_code = e.code.code();
                    if ctx.version >= 8 {
                        pr.error_message = e.message.map(StrBytes::from_string);
                    }
                }
            }
            tr.partition_responses.push(pr);
        }
        resp.responses.push(tr);
    }
    match (acks, first_error) {
        (0, None) => Outcome::Silent,
        (0, Some(e)) => Outcome::Close(format!("acks=0 produce failed for {e}")),
        _ => Outcome::Respond(resp),
    }
}

fn append(
    broker: &Broker,
    topic: &str,
    partition: i32,
    records: Option<bytes::Bytes>,
    acks: i16,
    version: i16,
) -> Result<sluice_storage::AppendInfo, ApiError> {
    let log = broker
        .log(topic, partition)
        .ok_or_else(|| ApiError::code(ResponseError::UnknownTopicOrPartition))?;
    let records = records.unwrap_or_default();
    check_records(&records, version)?;
    let config = log.config();
    if acks == -1 && config.min_insync_replicas > 1 {
        return Err(ApiError::new(
            ResponseError::NotEnoughReplicas,
            format!(
                "min.insync.replicas is {} but the partition has 1 in-sync replica",
                config.min_insync_replicas
            ),
        ));
    }
    let mut bytes = records.to_vec();
    let info = log
        .append_as_leader(&mut bytes, 0)
        .map_err(|e| storage_error(&e))?;
    log.set_high_watermark(log.log_end_offset());
    broker.appended.notify_waiters();
    Ok(info)
}

/// Kafka's `ProduceRequest.validateRecords` (v3+), before the append:
/// exactly one complete batch, of magic 2, and no zstd before v7. A partial
/// batch does not count as one (Kafka's batch iterator stops there too).
fn check_records(records: &[u8], version: i16) -> Result<(), ApiError> {
    let mut batches = BatchIter::new(records);
    let first = match batches.next() {
        None => {
            return Err(ApiError::new(
                ResponseError::InvalidRecord,
                format!(
                    "Produce requests with version {version} must have at least one record batch per partition"
                ),
            ))
        }
        Some(Err(ProtocolError::UnsupportedMagic(_))) => {
            return Err(ApiError::new(
                ResponseError::InvalidRecord,
                format!(
                    "Produce requests with version {version} are only allowed to contain record batches with magic version 2"
                ),
            ))
        }
        Some(Err(e)) => return Err(ApiError::new(ResponseError::CorruptMessage, e.to_string())),
        Some(Ok((_, header, _))) => header,
    };
    if version < 7 && matches!(first.compression(), Ok(Compression::Zstd)) {
        return Err(ApiError::new(
            ResponseError::UnsupportedCompressionType,
            format!("Produce requests with version {version} cannot contain zstd-compressed batches (needs version 7)"),
        ));
    }
    if batches.next().is_some() {
        return Err(ApiError::new(
            ResponseError::InvalidRecord,
            format!(
                "Produce requests with version {version} are only allowed to contain exactly one record batch per partition"
            ),
        ));
    }
    Ok(())
}
