//! SyncGroup (key 14): the leader hands in the assignment, every member
//! gets its own. A follower that syncs before the leader waits (parked
//! token, no shard lock held) until the leader's SyncGroup, a rebalance or
//! the session timeout answers it. v3+ carries `group.instance.id`; v5
//! checks and returns the protocol type and name.

use std::sync::Arc;

use proto_kafka::messages::{SyncGroupRequest, SyncGroupResponse};
use proto_kafka::protocol::StrBytes;
use sluice_coordinator::group::{self as machine, error_code, GroupError, GroupResponse};

use super::Ctx;
use crate::broker::Broker;
use crate::groups::now_ms;

pub(crate) const VERSIONS: (i16, i16) = (0, 5);

pub(crate) async fn handle(
    broker: &Arc<Broker>,
    req: SyncGroupRequest,
    ctx: &Ctx,
) -> SyncGroupResponse {
    let mut r = SyncGroupResponse::default();
    match sync(broker, req, ctx).await {
        Ok(out) => {
            r.error_code = error_code(out.error);
            if ctx.version >= 5 {
                r.protocol_type = out.protocol_type.map(StrBytes::from_string);
                r.protocol_name = out.protocol_name.map(StrBytes::from_string);
            }
            r.assignment = out.assignment.into();
        }
        Err(code) => r.error_code = code,
    }
    r
}

async fn sync(
    broker: &Arc<Broker>,
    req: SyncGroupRequest,
    ctx: &Ctx,
) -> Result<machine::SyncGroupResponse, i16> {
    let group_id = req.group_id.0.to_string();
    if group_id.is_empty() {
        return Err(GroupError::InvalidGroupId.code());
    }
    let v5 = ctx.version >= 5;
    let mreq = machine::SyncGroupRequest {
        group_id: group_id.clone(),
        member_id: req.member_id.to_string(),
        group_instance_id: if ctx.version >= 3 {
            req.group_instance_id.map(|s| s.to_string())
        } else {
            None
        },
        generation_id: req.generation_id,
        protocol_type: req.protocol_type.filter(|_| v5).map(|s| s.to_string()),
        protocol_name: req.protocol_name.filter(|_| v5).map(|s| s.to_string()),
        assignments: req
            .assignments
            .into_iter()
            .map(|a| (a.member_id.to_string(), a.assignment.to_vec()))
            .collect(),
    };
    let response = broker
        .groups
        .call_delayed(broker, &group_id, |groups, token| {
            groups.sync_group(now_ms(), token, &mreq)
        })
        .await
        .map_err(|e| e.code.code())?;
    match response {
        GroupResponse::Sync(r) => Ok(r),
        GroupResponse::Join(_) => Err(GroupError::UnknownServerError.code()),
    }
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::sync_group_request::SyncGroupRequestAssignment;
    use proto_kafka::messages::{ApiKey, GroupId};

    use super::super::join_group::testing::{join_alone, timers};
    use super::super::test_support::{ctx, open_broker, roundtrip};
    use super::*;

    fn request(group: &str, member: &str, generation: i32) -> SyncGroupRequest {
        let mut a = SyncGroupRequestAssignment::default();
        a.member_id = StrBytes::from_string(member.to_string());
        a.assignment = bytes::Bytes::from_static(b"assigned");
        let mut req = SyncGroupRequest::default();
        req.group_id = GroupId(StrBytes::from_string(group.to_string()));
        req.member_id = StrBytes::from_string(member.to_string());
        req.generation_id = generation;
        req.assignments = vec![a];
        req
    }

    #[tokio::test]
    async fn every_version_syncs_the_leader() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(
            dir.path(),
            &[
                ("offsets.topic.num.partitions", "2"),
                ("group.initial.rebalance.delay.ms", "0"),
            ],
        );
        let timers = timers(&broker);
        for v in VERSIONS.0..=VERSIONS.1 {
            let group = format!("g{v}");
            let (member, generation) = join_alone(&broker, &group).await;
            let c = ctx(ApiKey::SyncGroup, v);
            let mut req = request(&group, &member, generation);
            if v >= 5 {
                req.protocol_type = Some(StrBytes::from_static_str("consumer"));
                req.protocol_name = Some(StrBytes::from_static_str("range"));
            }
            let resp = roundtrip(&handle(&broker, req, &c).await, v);
            assert_eq!(resp.error_code, 0, "v{v}");
            assert_eq!(resp.assignment.as_ref(), b"assigned");
            if v >= 5 {
                assert_eq!(resp.protocol_name.as_deref(), Some("range"));
                assert_eq!(resp.protocol_type.as_deref(), Some("consumer"));
            }
            // A wrong generation is refused.
            let resp = roundtrip(
                &handle(&broker, request(&group, &member, generation + 5), &c).await,
                v,
            );
            assert_eq!(resp.error_code, GroupError::IllegalGeneration.code());
            // An unknown group or member.
            let resp = roundtrip(&handle(&broker, request("nope", "m", 1), &c).await, v);
            assert_eq!(resp.error_code, GroupError::UnknownMemberId.code());
            let resp = roundtrip(&handle(&broker, request("", "m", 1), &c).await, v);
            assert_eq!(resp.error_code, GroupError::InvalidGroupId.code());
        }
        drop(timers);
        broker.shutdown().expect("shutdown");
    }
}
