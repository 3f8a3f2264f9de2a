//! Produce (key 0): validate acks, find (or auto-create) each partition,
//! append the batch through storage (which checks it without decoding
//! records), and answer per partition. On one node the leader is every
//! replica, so acks=all is satisfied at append, unless
//! `min.insync.replicas` asks for more replicas than exist. acks=0 gets no
//! response.

use std::sync::Arc;

use proto_kafka::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use proto_kafka::messages::{ProduceRequest, ProduceResponse};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;
use sluice_protocol::record::BatchIter;

use super::errors::storage_error;
use super::Ctx;
use crate::broker::{ApiError, Broker};

pub(crate) const VERSIONS: (i16, i16) = (3, 12);

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: ProduceRequest,
    ctx: &Ctx,
) -> Option<ProduceResponse> {
    let acks = req.acks;
    let mut resp = ProduceResponse::default();
    for td in req.topic_data {
        let name = td.name.0.to_string();
        let topic = broker.topic_or_auto_create(&name, true);
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
                    Ok(_) => append(broker, &name, pd.index, pd.records, acks),
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
    (acks != 0).then_some(resp)
}

fn append(
    broker: &Broker,
    topic: &str,
    partition: i32,
    records: Option<bytes::Bytes>,
    acks: i16,
) -> Result<sluice_storage::AppendInfo, ApiError> {
    let log = broker
        .log(topic, partition)
        .ok_or_else(|| ApiError::code(ResponseError::UnknownTopicOrPartition))?;
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
    let records = records.unwrap_or_default();
    // Produce v3+ carries exactly one batch per partition.
    let batches = BatchIter::new(&records).take(2).count();
    if batches > 1 {
        return Err(ApiError::new(
            ResponseError::InvalidRecord,
            "Produce requests must contain exactly one record batch per partition",
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
