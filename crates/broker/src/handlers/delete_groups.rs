//! DeleteGroups (key 42): deletes Empty groups and their committed
//! offsets (NON_EMPTY_GROUP while members remain, GROUP_ID_NOT_FOUND for
//! unknown groups). A group known only by its committed offsets (consumers
//! that only assign()) is an Empty group and can be deleted. The group's
//! tombstone and its offsets' tombstones are appended to
//! `__consumer_offsets` before the result is returned.

use std::sync::Arc;

use proto_kafka::messages::delete_groups_response::DeletableGroupResult;
use proto_kafka::messages::{DeleteGroupsRequest, DeleteGroupsResponse};
use sluice_coordinator::group::{error_code, GroupError};

use super::Ctx;
use crate::broker::Broker;
use crate::groups::{lock, now_ms, CommitPoint};

pub(crate) const VERSIONS: (i16, i16) = (0, 2);

pub(crate) async fn handle(
    broker: &Arc<Broker>,
    req: DeleteGroupsRequest,
    _ctx: &Ctx,
) -> DeleteGroupsResponse {
    let mut r = DeleteGroupsResponse::default();
    for id in req.groups_names {
        let group_id = id.0.to_string();
        let mut w = DeletableGroupResult::default();
        // Answered once the deletion is replicated, as Kafka's
        // coordinator answers after its write commits.
        w.error_code = match delete(broker, &group_id) {
            Ok(point) => match broker.groups.wait_committed(point).await {
                Ok(()) => 0,
                Err(e) => e.code(),
            },
            Err(code) => code,
        };
        w.group_id = id;
        r.results.push(w);
    }
    r
}

fn delete(broker: &Arc<Broker>, group_id: &str) -> Result<CommitPoint, i16> {
    if group_id.is_empty() {
        return Err(GroupError::InvalidGroupId.code());
    }
    let shard = broker
        .groups
        .shard(broker, group_id)
        .map_err(|e| e.code.code())?;
    let mut shard = lock(&shard);
    let now = now_ms();
    if shard.offsets.has_offsets(group_id) {
        shard.groups.ensure_simple_group(now, group_id);
    }
    let offsets = shard.offsets.delete_all_offsets(group_id).map_err(|e| {
        tracing::error!(error = %e, group = group_id, "deleting group offsets");
        GroupError::UnknownServerError.code()
    })?;
    let (results, effects) = shard.groups.delete_groups(now, &[group_id.to_string()]);
    let outcome = results
        .first()
        .map_or(Some(GroupError::UnknownServerError), |(_, e)| *e);
    if outcome.is_some() {
        return Err(error_code(outcome));
    }
    broker
        .groups
        .apply(&mut shard, effects)
        .map_err(|e| e.code.code())?;
    broker
        .groups
        .commit_records(&mut shard, &offsets)
        .map_err(|e| e.code.code())?;
    Ok(shard.commit_point())
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::leave_group_request::MemberIdentity;
    use proto_kafka::messages::{ApiKey, GroupId, LeaveGroupRequest};
    use proto_kafka::protocol::StrBytes;

    use super::super::join_group::testing::{join_alone, timers};
    use super::super::test_support::{ctx, open_broker, roundtrip};
    use super::*;

    fn request(groups: &[&str]) -> DeleteGroupsRequest {
        let mut req = DeleteGroupsRequest::default();
        req.groups_names = groups
            .iter()
            .map(|g| GroupId(StrBytes::from_string((*g).to_string())))
            .collect();
        req
    }

    #[tokio::test]
    async fn every_version_deletes_empty_groups_only() {
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
            let c = ctx(ApiKey::DeleteGroups, v);
            let resp = roundtrip(
                &handle(&broker, request(&[&group, "missing", ""]), &c).await,
                v,
            );
            let codes: Vec<i16> = resp.results.iter().map(|r| r.error_code).collect();
            assert_eq!(
                codes,
                [
                    GroupError::NonEmptyGroup.code(),
                    GroupError::GroupIdNotFound.code(),
                    GroupError::InvalidGroupId.code()
                ]
            );
            // Leave, then the group can go.
            let mut m = MemberIdentity::default();
            m.member_id = StrBytes::from_string(member);
            let mut leave = LeaveGroupRequest::default();
            leave.group_id = GroupId(StrBytes::from_string(group.clone()));
            leave.members = vec![m];
            let left =
                super::super::leave_group::handle(&broker, leave, &ctx(ApiKey::LeaveGroup, 5))
                    .await;
            assert_eq!(left.members[0].error_code, 0);
            let resp = roundtrip(&handle(&broker, request(&[&group]), &c).await, v);
            assert_eq!(resp.results[0].error_code, 0, "v{v}");
            assert_eq!(resp.results[0].group_id.0.as_str(), group);
            let shard = broker.groups.shard(&broker, &group).expect("shard");
            assert_eq!(lock(&shard).groups.group_state(&group), None);
            let resp = roundtrip(&handle(&broker, request(&[&group]), &c).await, v);
            assert_eq!(
                resp.results[0].error_code,
                GroupError::GroupIdNotFound.code()
            );
        }
        drop(timers);
        broker.shutdown().expect("shutdown");
    }
}
