//! JoinGroup (key 11): hands the request to the group's state machine
//! under a parked token and waits (without holding the shard lock) for the
//! response, which arrives when the rebalance completes — possibly from
//! another member's request or from the timer task.
//!
//! Version mapping: v0 has no rebalance timeout (the session timeout is
//! used, as Kafka does); v4+ requires a known member id (KIP-394,
//! MEMBER_ID_REQUIRED); v5+ carries `group.instance.id`; v9+ may be told to
//! skip the assignment (KIP-814). Before v7 the protocol name is not
//! nullable ("" when unknown) and no protocol type is returned. The client
//! host is the peer address as Kafka prints it ("/127.0.0.1").

use std::sync::Arc;

use proto_kafka::messages::join_group_response::JoinGroupResponseMember;
use proto_kafka::messages::{JoinGroupRequest, JoinGroupResponse};
use proto_kafka::protocol::StrBytes;
use sluice_coordinator::group::{self as machine, error_code, GroupError, GroupResponse, Protocol};

use super::Ctx;
use crate::broker::Broker;
use crate::groups::now_ms;

pub(crate) const VERSIONS: (i16, i16) = (0, 9);

pub(crate) async fn handle(
    broker: &Arc<Broker>,
    req: JoinGroupRequest,
    ctx: &Ctx,
) -> JoinGroupResponse {
    let member_id = req.member_id.to_string();
    let out = match join(broker, req, ctx).await {
        Ok(r) => r,
        Err(code) => {
            let mut r = JoinGroupResponse::default();
            r.error_code = code;
            r.generation_id = -1;
            r.member_id = StrBytes::from_string(member_id);
            return finish(r, ctx.version);
        }
    };
    let mut r = JoinGroupResponse::default();
    r.error_code = error_code(out.error);
    r.generation_id = out.generation_id;
    r.protocol_type = out.protocol_type.map(StrBytes::from_string);
    r.protocol_name = out.protocol_name.map(StrBytes::from_string);
    r.leader = StrBytes::from_string(out.leader);
    r.skip_assignment = out.skip_assignment;
    r.member_id = StrBytes::from_string(out.member_id);
    r.members = out
        .members
        .into_iter()
        .map(|m| {
            let mut w = JoinGroupResponseMember::default();
            w.member_id = StrBytes::from_string(m.member_id);
            if ctx.version >= 5 {
                w.group_instance_id = m.group_instance_id.map(StrBytes::from_string);
            }
            w.metadata = m.metadata.into();
            w
        })
        .collect();
    finish(r, ctx.version)
}

/// Drops what `version` cannot carry.
fn finish(mut r: JoinGroupResponse, version: i16) -> JoinGroupResponse {
    if version < 7 {
        r.protocol_type = None;
        if r.protocol_name.is_none() {
            r.protocol_name = Some(StrBytes::default());
        }
    }
    if version < 9 {
        r.skip_assignment = false;
    }
    r
}

/// The Kafka style client host: "/" + IP.
pub(crate) fn client_host(ctx: &Ctx) -> String {
    ctx.peer.map(|p| format!("/{}", p.ip())).unwrap_or_default()
}

async fn join(
    broker: &Arc<Broker>,
    req: JoinGroupRequest,
    ctx: &Ctx,
) -> Result<machine::JoinGroupResponse, i16> {
    let group_id = req.group_id.0.to_string();
    if group_id.is_empty() {
        return Err(GroupError::InvalidGroupId.code());
    }
    let mreq = machine::JoinGroupRequest {
        group_id: group_id.clone(),
        member_id: req.member_id.to_string(),
        group_instance_id: if ctx.version >= 5 {
            req.group_instance_id.map(|s| s.to_string())
        } else {
            None
        },
        client_id: ctx.client_id.clone(),
        client_host: client_host(ctx),
        session_timeout_ms: req.session_timeout_ms,
        rebalance_timeout_ms: if ctx.version >= 1 {
            req.rebalance_timeout_ms
        } else {
            req.session_timeout_ms
        },
        protocol_type: req.protocol_type.to_string(),
        protocols: req
            .protocols
            .into_iter()
            .map(|p| Protocol::new(p.name.to_string(), p.metadata.to_vec()))
            .collect(),
        require_known_member_id: ctx.version >= 4,
        supports_skip_assignment: ctx.version >= 9,
    };
    let response = broker
        .groups
        .call_delayed(broker, &group_id, |groups, token| {
            groups.join_group(now_ms(), token, &mreq)
        })
        .await
        .map_err(|e| e.code.code())?;
    match response {
        GroupResponse::Join(r) => Ok(r),
        GroupResponse::Sync(_) => Err(GroupError::UnknownServerError.code()),
    }
}

/// Test helpers shared by the group handlers' unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::Arc;

    use proto_kafka::messages::join_group_request::JoinGroupRequestProtocol;
    use proto_kafka::messages::{ApiKey, GroupId, JoinGroupRequest};
    use proto_kafka::protocol::StrBytes;

    use super::super::test_support::ctx;
    use crate::broker::Broker;

    /// Runs the group timer task until the sender is dropped or set.
    pub(crate) fn timers(broker: &Arc<Broker>) -> tokio::sync::watch::Sender<bool> {
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(crate::groups::run_timers(Arc::clone(broker), rx));
        tx
    }

    pub(crate) fn request(group: &str, member: &str) -> JoinGroupRequest {
        let mut p = JoinGroupRequestProtocol::default();
        p.name = StrBytes::from_static_str("range");
        p.metadata = bytes::Bytes::from_static(b"meta");
        let mut req = JoinGroupRequest::default();
        req.group_id = GroupId(StrBytes::from_string(group.to_string()));
        req.member_id = StrBytes::from_string(member.to_string());
        req.session_timeout_ms = 10_000;
        req.rebalance_timeout_ms = 10_000;
        req.protocol_type = StrBytes::from_static_str("consumer");
        req.protocols = vec![p];
        req
    }

    /// Joins `group` as its only member (JoinGroup v9, twice for the
    /// member id); returns the member id and generation. Needs `timers`.
    pub(crate) async fn join_alone(broker: &Arc<Broker>, group: &str) -> (String, i32) {
        let c = ctx(ApiKey::JoinGroup, 9);
        let first = super::handle(broker, request(group, ""), &c).await;
        let again = request(group, first.member_id.as_str());
        let resp = super::handle(broker, again, &c).await;
        assert_eq!(resp.error_code, 0, "join {group}");
        (resp.member_id.to_string(), resp.generation_id)
    }
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::ApiKey;

    use super::super::test_support::{ctx, open_broker, roundtrip};
    use super::testing::{request, timers};
    use super::*;
    use crate::groups::lock;

    #[tokio::test]
    async fn every_version_joins_a_single_member_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(
            dir.path(),
            &[
                ("offsets.topic.num.partitions", "2"),
                ("group.initial.rebalance.delay.ms", "0"),
            ],
        );
        let _timers = timers(&broker);
        for v in VERSIONS.0..=VERSIONS.1 {
            let group = format!("g{v}");
            let mut c = ctx(ApiKey::JoinGroup, v);
            c.peer = Some("127.0.0.1:5555".parse().expect("addr"));
            let mut resp = roundtrip(&handle(&broker, request(&group, ""), &c).await, v);
            if v >= 4 {
                assert_eq!(resp.error_code, GroupError::MemberIdRequired.code(), "v{v}");
                assert!(!resp.member_id.is_empty());
                let again = request(&group, resp.member_id.as_str());
                resp = roundtrip(&handle(&broker, again, &c).await, v);
            }
            assert_eq!(resp.error_code, 0, "v{v}");
            assert_eq!(resp.generation_id, 1);
            assert_eq!(resp.leader, resp.member_id);
            assert_eq!(resp.protocol_name.as_deref(), Some("range"));
            if v >= 7 {
                assert_eq!(resp.protocol_type.as_deref(), Some("consumer"));
            }
            assert_eq!(resp.members.len(), 1);
            assert_eq!(resp.members[0].metadata.as_ref(), b"meta");
            let shard = broker.groups.shard(&broker, &group).expect("shard");
            let described = lock(&shard)
                .groups
                .describe_groups(std::slice::from_ref(&group));
            assert_eq!(described[0].members[0].client_host, "/127.0.0.1");
        }
        broker.shutdown().expect("shutdown");
    }

    #[tokio::test]
    async fn errors_keep_the_version_layout() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[("offsets.topic.num.partitions", "1")]);
        for v in VERSIONS.0..=VERSIONS.1 {
            let c = ctx(ApiKey::JoinGroup, v);
            let resp = roundtrip(&handle(&broker, request("", ""), &c).await, v);
            assert_eq!(resp.error_code, GroupError::InvalidGroupId.code());
            assert_eq!(resp.generation_id, -1);
            let mut bad = request("g", "");
            bad.session_timeout_ms = 1;
            let resp = roundtrip(&handle(&broker, bad, &c).await, v);
            assert_eq!(resp.error_code, GroupError::InvalidSessionTimeout.code());
            let resp = roundtrip(&handle(&broker, request("g", "nobody"), &c).await, v);
            assert_eq!(resp.error_code, GroupError::UnknownMemberId.code());
            assert_eq!(resp.member_id.as_str(), "nobody");
        }
        broker.shutdown().expect("shutdown");
    }
}
