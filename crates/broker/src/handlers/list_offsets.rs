//! ListOffsets (key 2): earliest (-2), latest (-1: the high watermark for
//! consumers, the log end for followers), max timestamp (-3), or the first
//! offset at or after a timestamp, found through the time index.

use std::sync::Arc;

use proto_kafka::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use proto_kafka::messages::{ListOffsetsRequest, ListOffsetsResponse};
use proto_kafka::ResponseError;
use sluice_storage::OffsetSpec;

use super::errors::storage_error;
use super::Ctx;
use crate::broker::Broker;

pub(crate) const VERSIONS: (i16, i16) = (1, 8);

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
/// KIP-405: earliest offset on local storage; with no tiered storage it is
/// the earliest offset.
const EARLIEST_LOCAL: i64 = -4;

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: ListOffsetsRequest,
    ctx: &Ctx,
) -> ListOffsetsResponse {
    let follower = req.replica_id.0 >= 0;
    let mut resp = ListOffsetsResponse::default();
    for t in req.topics {
        let name = t.name.0.to_string();
        let mut tr = ListOffsetsTopicResponse::default();
        tr.name = t.name.clone();
        for p in t.partitions {
            let mut pr = ListOffsetsPartitionResponse::default();
            pr.partition_index = p.partition_index;
            pr.timestamp = -1;
            pr.offset = -1;
            if ctx.version >= 4 {
                pr.leader_epoch = 0;
            }
            let Some(log) = broker.log(&name, p.partition_index) else {
                pr.error_code = ResponseError::UnknownTopicOrPartition.code();
                tr.partitions.push(pr);
                continue;
            };
            let spec = match p.timestamp {
                LATEST => None,
                EARLIEST | EARLIEST_LOCAL => Some(OffsetSpec::Earliest),
                MAX_TIMESTAMP => Some(OffsetSpec::MaxTimestamp),
                ts => Some(OffsetSpec::Timestamp(ts)),
            };
            let found = match spec {
                None => Ok(Some(sluice_storage::TimestampOffset {
                    offset: if follower {
                        log.log_end_offset()
                    } else {
                        log.high_watermark()
                    },
                    timestamp: -1,
                })),
                Some(spec) => log.fetch_offset(spec),
            };
            match found {
                Ok(Some(to)) => {
                    pr.offset = to.offset;
                    pr.timestamp = to.timestamp;
                }
                Ok(None) => {}
                Err(e) => pr.error_code = storage_error(&e).code.code(),
            }
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    resp
}
