//! Heartbeat (key 12): keeps a member's session alive and tells it when a
//! rebalance is in progress (REBALANCE_IN_PROGRESS: rejoin). v3+ carries
//! `group.instance.id`. While the coordinator loads, Kafka answers NONE.

use std::sync::Arc;

use proto_kafka::messages::{HeartbeatRequest, HeartbeatResponse};
use sluice_coordinator::group::{self as machine, GroupError};

use super::Ctx;
use crate::broker::Broker;
use crate::groups::{lock, now_ms};

pub(crate) const VERSIONS: (i16, i16) = (0, 4);

pub(crate) fn handle(broker: &Arc<Broker>, req: HeartbeatRequest, ctx: &Ctx) -> HeartbeatResponse {
    let mut r = HeartbeatResponse::default();
    r.error_code = match heartbeat(broker, req, ctx) {
        Ok(()) => 0,
        Err(code) => code,
    };
    r
}

fn heartbeat(broker: &Arc<Broker>, req: HeartbeatRequest, ctx: &Ctx) -> Result<(), i16> {
    let group_id = req.group_id.0.to_string();
    if group_id.is_empty() {
        return Err(GroupError::InvalidGroupId.code());
    }
    let mreq = machine::HeartbeatRequest {
        group_id: group_id.clone(),
        member_id: req.member_id.to_string(),
        group_instance_id: if ctx.version >= 3 {
            req.group_instance_id.map(|s| s.to_string())
        } else {
            None
        },
        generation_id: req.generation_id,
    };
    let shard = broker
        .groups
        .shard(broker, &group_id)
        .map_err(|e| e.code.code())?;
    let outcome = lock(&shard).groups.heartbeat(now_ms(), &mreq);
    // The session deadline moved: let the timer task re-plan.
    broker.groups.wake.notify_one();
    outcome.map_err(GroupError::code)
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::{ApiKey, GroupId};
    use proto_kafka::protocol::StrBytes;

    use super::super::join_group::testing::{join_alone, timers};
    use super::super::test_support::{ctx, open_broker, roundtrip};
    use super::*;

    fn request(group: &str, member: &str, generation: i32) -> HeartbeatRequest {
        let mut req = HeartbeatRequest::default();
        req.group_id = GroupId(StrBytes::from_string(group.to_string()));
        req.member_id = StrBytes::from_string(member.to_string());
        req.generation_id = generation;
        req
    }

    #[tokio::test]
    async fn every_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(
            dir.path(),
            &[
                ("offsets.topic.num.partitions", "2"),
                ("group.initial.rebalance.delay.ms", "0"),
            ],
        );
        let timers = timers(&broker);
        let (member, generation) = join_alone(&broker, "g").await;
        for v in VERSIONS.0..=VERSIONS.1 {
            let c = ctx(ApiKey::Heartbeat, v);
            // Joined, not synced yet (CompletingRebalance): Kafka answers
            // NONE and resets the session timer.
            let resp = roundtrip(&handle(&broker, request("g", &member, generation), &c), v);
            assert_eq!(resp.error_code, 0, "v{v}");
            let resp = roundtrip(
                &handle(&broker, request("g", &member, generation + 1), &c),
                v,
            );
            assert_eq!(resp.error_code, GroupError::IllegalGeneration.code());
            let resp = roundtrip(&handle(&broker, request("g", "who", generation), &c), v);
            assert_eq!(resp.error_code, GroupError::UnknownMemberId.code());
            let resp = roundtrip(&handle(&broker, request("none", "who", 1), &c), v);
            assert_eq!(resp.error_code, GroupError::UnknownMemberId.code());
            let resp = roundtrip(&handle(&broker, request("", "who", 1), &c), v);
            assert_eq!(resp.error_code, GroupError::InvalidGroupId.code());
        }
        drop(timers);
        broker.shutdown().expect("shutdown");
    }
}
