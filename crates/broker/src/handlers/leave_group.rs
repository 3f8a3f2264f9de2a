//! LeaveGroup (key 13): members leave without waiting for their session
//! to time out, which starts a rebalance of the others. v0-2 name one
//! member by id; v3+ batch members, by member id and/or
//! `group.instance.id` (KIP-345), with an outcome each. Before v3 the
//! response's only error is the top-level one, else the member's.

use std::sync::Arc;

use proto_kafka::messages::leave_group_response::MemberResponse;
use proto_kafka::messages::{LeaveGroupRequest, LeaveGroupResponse};
use proto_kafka::protocol::StrBytes;
use sluice_coordinator::group::{self as machine, error_code, GroupError, LeavingMember};

use super::Ctx;
use crate::broker::Broker;
use crate::groups::{lock, now_ms, CommitPoint};

pub(crate) const VERSIONS: (i16, i16) = (0, 5);

pub(crate) async fn handle(
    broker: &Arc<Broker>,
    req: LeaveGroupRequest,
    ctx: &Ctx,
) -> LeaveGroupResponse {
    let members = if ctx.version >= 3 {
        req.members
            .iter()
            .map(|m| LeavingMember {
                member_id: m.member_id.to_string(),
                group_instance_id: m.group_instance_id.as_ref().map(|s| s.to_string()),
            })
            .collect()
    } else {
        vec![LeavingMember {
            member_id: req.member_id.to_string(),
            group_instance_id: None,
        }]
    };
    let mreq = machine::LeaveGroupRequest {
        group_id: req.group_id.0.to_string(),
        members,
    };
    // The group's new state is replicated before the members hear of it
    // (Kafka's coordinator answers once its write is committed).
    let committed = match leave(broker, &mreq) {
        Ok((out, point)) => broker
            .groups
            .wait_committed(point)
            .await
            .map(|()| out)
            .map_err(|e| e.code()),
        Err(code) => Err(code),
    };
    let out = match committed {
        Ok(out) => out,
        Err(code) => {
            let mut r = LeaveGroupResponse::default();
            r.error_code = code;
            return r;
        }
    };
    let mut r = LeaveGroupResponse::default();
    if ctx.version >= 3 {
        r.error_code = error_code(out.error);
        r.members = out
            .members
            .into_iter()
            .map(|(who, error)| {
                let mut m = MemberResponse::default();
                m.member_id = StrBytes::from_string(who.member_id);
                m.group_instance_id = who.group_instance_id.map(StrBytes::from_string);
                m.error_code = error_code(error);
                m
            })
            .collect();
    } else {
        r.error_code = match out.error {
            Some(e) => e.code(),
            None => out.members.first().map_or(0, |(_, e)| error_code(*e)),
        };
    }
    r
}

fn leave(
    broker: &Arc<Broker>,
    mreq: &machine::LeaveGroupRequest,
) -> Result<(machine::LeaveGroupResponse, CommitPoint), i16> {
    if mreq.group_id.is_empty() {
        return Err(GroupError::InvalidGroupId.code());
    }
    let shard = broker
        .groups
        .shard(broker, &mreq.group_id)
        .map_err(|e| e.code.code())?;
    let mut shard = lock(&shard);
    let (resp, effects) = shard.groups.leave_group(now_ms(), mreq);
    broker
        .groups
        .apply(&mut shard, effects)
        .map_err(|e| e.code.code())?;
    Ok((resp, shard.commit_point()))
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::leave_group_request::MemberIdentity;
    use proto_kafka::messages::{ApiKey, GroupId};
    use sluice_coordinator::group::GroupState;

    use super::super::join_group::testing::{join_alone, timers};
    use super::super::test_support::{ctx, open_broker, roundtrip};
    use super::*;

    fn request(v: i16, group: &str, member: &str) -> LeaveGroupRequest {
        let mut req = LeaveGroupRequest::default();
        req.group_id = GroupId(StrBytes::from_string(group.to_string()));
        if v >= 3 {
            let mut m = MemberIdentity::default();
            m.member_id = StrBytes::from_string(member.to_string());
            req.members = vec![m];
        } else {
            req.member_id = StrBytes::from_string(member.to_string());
        }
        req
    }

    #[tokio::test]
    async fn every_version_leaves_and_empties_the_group() {
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
            let (member, _) = join_alone(&broker, &group).await;
            let c = ctx(ApiKey::LeaveGroup, v);
            let resp = roundtrip(&handle(&broker, request(v, &group, &member), &c).await, v);
            assert_eq!(resp.error_code, 0, "v{v}");
            if v >= 3 {
                assert_eq!(resp.members.len(), 1);
                assert_eq!(resp.members[0].member_id.as_str(), member);
                assert_eq!(resp.members[0].error_code, 0);
            }
            let shard = broker.groups.shard(&broker, &group).expect("shard");
            assert_eq!(
                lock(&shard).groups.group_state(&group),
                Some(GroupState::Empty)
            );
            // Leaving again: the member is unknown.
            let resp = roundtrip(&handle(&broker, request(v, &group, &member), &c).await, v);
            if v >= 3 {
                assert_eq!(resp.error_code, 0);
                assert_eq!(
                    resp.members[0].error_code,
                    GroupError::UnknownMemberId.code()
                );
            } else {
                assert_eq!(resp.error_code, GroupError::UnknownMemberId.code());
            }
            let resp = roundtrip(&handle(&broker, request(v, "", "m"), &c).await, v);
            assert_eq!(resp.error_code, GroupError::InvalidGroupId.code());
        }
        drop(timers);
        broker.shutdown().expect("shutdown");
    }
}
