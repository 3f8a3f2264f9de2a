//! DescribeGroups (key 15): state, protocol and members of each group.
//! Member metadata and assignments are returned only while the group is
//! Stable, as Kafka does. An unknown group is described as Dead without
//! error up to v5; v6 (KIP-1043) answers GROUP_ID_NOT_FOUND for it. v3+
//! return the authorized operations when asked (every group operation:
//! there is no authorizer); v4+ return members' `group.instance.id`.

use std::sync::Arc;

use proto_kafka::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use proto_kafka::messages::{DescribeGroupsRequest, DescribeGroupsResponse};
use proto_kafka::protocol::StrBytes;
use sluice_coordinator::group::{error_code, GroupError, GroupState};

use super::Ctx;
use crate::broker::Broker;
use crate::groups::lock;

pub(crate) const VERSIONS: (i16, i16) = (0, 6);

/// Kafka's "authorized operations not requested" marker.
const OPS_NOT_REQUESTED: i32 = i32::MIN;

/// The group resource's operations as `AclOperation` code bits: READ (3),
/// DELETE (6), DESCRIBE (8).
const GROUP_OPS: i32 = (1 << 3) | (1 << 6) | (1 << 8);

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: DescribeGroupsRequest,
    ctx: &Ctx,
) -> DescribeGroupsResponse {
    let mut r = DescribeGroupsResponse::default();
    let ops = if ctx.version >= 3 && req.include_authorized_operations {
        GROUP_OPS
    } else {
        OPS_NOT_REQUESTED
    };
    for id in &req.groups {
        let group_id = id.0.to_string();
        let mut w = DescribedGroup::default();
        w.group_id = id.clone();
        w.authorized_operations = ops;
        let described = broker.groups.shard(broker, &group_id).map(|s| {
            lock(&s)
                .groups
                .describe_groups(std::slice::from_ref(&group_id))
        });
        let g = match described {
            Ok(mut v) if !v.is_empty() => v.swap_remove(0),
            Ok(_) => {
                w.error_code = GroupError::UnknownServerError.code();
                w.group_state = StrBytes::from_static_str(GroupState::Dead.name());
                r.groups.push(w);
                continue;
            }
            Err(e) => {
                w.error_code = e.code.code();
                if ctx.version >= 6 {
                    w.error_message = e.message.map(StrBytes::from_string);
                }
                w.group_state = StrBytes::from_static_str(GroupState::Dead.name());
                r.groups.push(w);
                continue;
            }
        };
        w.error_code = error_code(g.error);
        w.group_state = StrBytes::from_static_str(g.state.name());
        if ctx.version >= 6 && g.error.is_none() && g.state == GroupState::Dead {
            w.error_code = GroupError::GroupIdNotFound.code();
            w.error_message = Some(StrBytes::from_string(format!(
                "Group {group_id} not found."
            )));
        }
        w.protocol_type = StrBytes::from_string(g.protocol_type);
        w.protocol_data = StrBytes::from_string(g.protocol_data);
        w.members = g
            .members
            .into_iter()
            .map(|m| {
                let mut wm = DescribedGroupMember::default();
                wm.member_id = StrBytes::from_string(m.member_id);
                if ctx.version >= 4 {
                    wm.group_instance_id = m.group_instance_id.map(StrBytes::from_string);
                }
                wm.client_id = StrBytes::from_string(m.client_id);
                wm.client_host = StrBytes::from_string(m.client_host);
                wm.member_metadata = m.metadata.into();
                wm.member_assignment = m.assignment.into();
                wm
            })
            .collect();
        r.groups.push(w);
    }
    r
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::{ApiKey, GroupId};

    use super::super::join_group::testing::{join_alone, timers};
    use super::super::test_support::{ctx, open_broker, roundtrip};
    use super::*;

    fn request(groups: &[&str]) -> DescribeGroupsRequest {
        let mut req = DescribeGroupsRequest::default();
        req.groups = groups
            .iter()
            .map(|g| GroupId(StrBytes::from_string((*g).to_string())))
            .collect();
        req
    }

    #[tokio::test]
    async fn every_version_describes_known_and_unknown_groups() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(
            dir.path(),
            &[
                ("offsets.topic.num.partitions", "2"),
                ("group.initial.rebalance.delay.ms", "0"),
            ],
        );
        let timers = timers(&broker);
        let (member, _) = join_alone(&broker, "g").await;
        for v in VERSIONS.0..=VERSIONS.1 {
            let c = ctx(ApiKey::DescribeGroups, v);
            let mut req = request(&["g", "missing"]);
            if v >= 3 {
                req.include_authorized_operations = true;
            }
            let resp = roundtrip(&handle(&broker, req, &c), v);
            assert_eq!(resp.groups.len(), 2);
            let g = &resp.groups[0];
            assert_eq!(g.error_code, 0, "v{v}");
            assert_eq!(g.group_id.0.as_str(), "g");
            assert_eq!(g.group_state.as_str(), "CompletingRebalance");
            assert_eq!(g.protocol_type.as_str(), "consumer");
            assert_eq!(g.members.len(), 1);
            assert_eq!(g.members[0].member_id.as_str(), member);
            assert_eq!(g.members[0].client_id.as_str(), "test");
            if v >= 3 {
                assert_eq!(g.authorized_operations, GROUP_OPS);
            }
            let missing = &resp.groups[1];
            assert_eq!(missing.group_state.as_str(), "Dead");
            if v >= 6 {
                assert_eq!(missing.error_code, GroupError::GroupIdNotFound.code());
                assert_eq!(
                    missing.error_message.as_deref(),
                    Some("Group missing not found.")
                );
            } else {
                assert_eq!(missing.error_code, 0);
            }
        }
        assert_eq!(GROUP_OPS, 328);
        drop(timers);
        broker.shutdown().expect("shutdown");
    }
}
