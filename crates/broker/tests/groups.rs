//! Consumer groups over TCP against a running server: FindCoordinator,
//! then two members through join → sync → heartbeat → rebalance → leave,
//! DescribeGroups, ListGroups and DeleteGroups, with the wire encoders of
//! proto-kafka at the versions clients use.

use bytes::Bytes;
use proto_kafka::messages::join_group_request::JoinGroupRequestProtocol;
use proto_kafka::messages::leave_group_request::MemberIdentity;
use proto_kafka::messages::sync_group_request::SyncGroupRequestAssignment;
use proto_kafka::messages::{
    ApiKey, BrokerId, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse, SyncGroupRequest, SyncGroupResponse,
};
use proto_kafka::protocol::StrBytes;

const REBALANCE_IN_PROGRESS: i16 = 27;
const MEMBER_ID_REQUIRED: i16 = 79;
const UNKNOWN_MEMBER_ID: i16 = 25;

mod common;
use common::{start, Client};

impl Client {
    /// JoinGroup v`version`; v4+ first get MEMBER_ID_REQUIRED and rejoin.
    async fn join(&mut self, version: i16, group: &str, member: &str) -> JoinGroupResponse {
        let mut p = JoinGroupRequestProtocol::default();
        p.name = StrBytes::from_static_str("range");
        p.metadata = Bytes::from_static(b"subscription");
        let mut req = JoinGroupRequest::default();
        req.group_id = group_id(group);
        req.member_id = StrBytes::from_string(member.to_string());
        req.session_timeout_ms = 10_000;
        req.rebalance_timeout_ms = 10_000;
        req.protocol_type = StrBytes::from_static_str("consumer");
        req.protocols = vec![p];
        let resp: JoinGroupResponse = self.call(ApiKey::JoinGroup, version, &req).await;
        if resp.error_code == MEMBER_ID_REQUIRED {
            req.member_id = resp.member_id;
            return self.call(ApiKey::JoinGroup, version, &req).await;
        }
        resp
    }

    async fn sync(
        &mut self,
        version: i16,
        group: &str,
        member: &str,
        generation: i32,
        assignments: &[(&str, &[u8])],
    ) -> SyncGroupResponse {
        let mut req = SyncGroupRequest::default();
        req.group_id = group_id(group);
        req.member_id = StrBytes::from_string(member.to_string());
        req.generation_id = generation;
        if version >= 5 {
            req.protocol_type = Some(StrBytes::from_static_str("consumer"));
            req.protocol_name = Some(StrBytes::from_static_str("range"));
        }
        req.assignments = assignments
            .iter()
            .map(|(m, a)| {
                let mut s = SyncGroupRequestAssignment::default();
                s.member_id = StrBytes::from_string((*m).to_string());
                s.assignment = Bytes::copy_from_slice(a);
                s
            })
            .collect();
        self.call(ApiKey::SyncGroup, version, &req).await
    }

    async fn heartbeat(&mut self, version: i16, group: &str, member: &str, generation: i32) -> i16 {
        let mut req = HeartbeatRequest::default();
        req.group_id = group_id(group);
        req.member_id = StrBytes::from_string(member.to_string());
        req.generation_id = generation;
        let resp: HeartbeatResponse = self.call(ApiKey::Heartbeat, version, &req).await;
        resp.error_code
    }

    async fn describe(&mut self, group: &str) -> DescribeGroupsResponse {
        let mut req = DescribeGroupsRequest::default();
        req.groups = vec![group_id(group)];
        self.call(ApiKey::DescribeGroups, 5, &req).await
    }
}

fn group_id(name: &str) -> GroupId {
    GroupId(StrBytes::from_string(name.to_string()))
}

#[tokio::test]
async fn two_members_join_sync_heartbeat_rebalance_and_leave() {
    let server = start(&[
        ("offsets.topic.num.partitions", "4"),
        ("group.initial.rebalance.delay.ms", "0"),
    ])
    .await;
    let mut a = server.client().await;
    let mut b = server.client().await;
    a.client_id = "groups-test";
    b.client_id = "groups-test";
    let group = "flow";

    // FindCoordinator, batched (v4) and single (v3): this node.
    let mut req = FindCoordinatorRequest::default();
    req.coordinator_keys = vec![StrBytes::from_static_str("flow")];
    let resp: FindCoordinatorResponse = a.call(ApiKey::FindCoordinator, 4, &req).await;
    let c = &resp.coordinators[0];
    assert_eq!((c.error_code, c.node_id), (0, BrokerId(1)));
    assert_eq!(c.host.as_str(), "127.0.0.1");
    // The advertised port (the configured one: 0 in these tests, as
    // Metadata reports it).
    let port = c.port;
    let mut req = FindCoordinatorRequest::default();
    req.key = StrBytes::from_static_str("flow");
    let resp: FindCoordinatorResponse = b.call(ApiKey::FindCoordinator, 3, &req).await;
    assert_eq!((resp.error_code, resp.port), (0, port));

    // A alone: generation 1, A leads and assigns itself.
    let ja = a.join(9, group, "").await;
    assert_eq!(ja.error_code, 0);
    assert_eq!(ja.generation_id, 1);
    assert_eq!(ja.leader, ja.member_id);
    let member_a = ja.member_id.to_string();
    let sa = a
        .sync(5, group, &member_a, 1, &[(&member_a, b"a-all")])
        .await;
    assert_eq!(sa.error_code, 0);
    assert_eq!(sa.assignment.as_ref(), b"a-all");
    assert_eq!(a.heartbeat(4, group, &member_a, 1).await, 0);

    // B joins (JoinGroup v3: no member id round trip); it waits for A.
    let b_join = tokio::spawn(async move {
        let r = b.join(3, group, "").await;
        (b, r)
    });
    let mut rebalancing = false;
    for _ in 0..100 {
        match a.heartbeat(4, group, &member_a, 1).await {
            REBALANCE_IN_PROGRESS => {
                rebalancing = true;
                break;
            }
            0 => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            other => panic!("heartbeat error {other}"),
        }
    }
    assert!(rebalancing, "A is told to rejoin");
    let ja = a.join(9, group, &member_a).await;
    let (mut b, jb) = b_join.await.expect("b join");
    assert_eq!((ja.error_code, jb.error_code), (0, 0));
    assert_eq!(ja.generation_id, 2);
    assert_eq!(jb.generation_id, 2);
    let member_b = jb.member_id.to_string();
    assert_eq!(ja.leader.as_str(), member_a, "A stays leader");
    assert_eq!(jb.leader.as_str(), member_a);
    assert_eq!(ja.members.len(), 2);
    assert!(jb.members.is_empty(), "followers get no member list");

    // B syncs first and waits for the leader's assignment.
    let b_sync = tokio::spawn(async move {
        let r = b.sync(3, group, &member_b, 2, &[]).await;
        (b, member_b, r)
    });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let member_b_id = jb.member_id.to_string();
    let sa = a
        .sync(
            5,
            group,
            &member_a,
            2,
            &[(&member_a, b"a-half"), (&member_b_id, b"b-half")],
        )
        .await;
    assert_eq!(sa.error_code, 0);
    assert_eq!(sa.assignment.as_ref(), b"a-half");
    let (mut b, member_b, sb) = b_sync.await.expect("b sync");
    assert_eq!(sb.error_code, 0);
    assert_eq!(sb.assignment.as_ref(), b"b-half");
    assert_eq!(a.heartbeat(4, group, &member_a, 2).await, 0);
    assert_eq!(b.heartbeat(0, group, &member_b, 2).await, 0);

    // DescribeGroups and ListGroups see the Stable group.
    let d = a.describe(group).await;
    let g = &d.groups[0];
    assert_eq!(g.error_code, 0);
    assert_eq!(g.group_state.as_str(), "Stable");
    assert_eq!(g.protocol_data.as_str(), "range");
    assert_eq!(g.members.len(), 2);
    for m in &g.members {
        assert_eq!(m.client_host.as_str(), "/127.0.0.1");
        assert_eq!(m.client_id.as_str(), "groups-test");
        assert_eq!(m.member_metadata.as_ref(), b"subscription");
    }
    let mut req = ListGroupsRequest::default();
    req.states_filter = vec![StrBytes::from_static_str("Stable")];
    let l: ListGroupsResponse = a.call(ApiKey::ListGroups, 4, &req).await;
    assert_eq!(l.groups.len(), 1);
    assert_eq!(l.groups[0].group_id.0.as_str(), group);

    // B leaves (batched, v5): A must rejoin, alone in generation 3.
    let mut req = LeaveGroupRequest::default();
    req.group_id = group_id(group);
    let mut who = MemberIdentity::default();
    who.member_id = StrBytes::from_string(member_b.clone());
    req.members = vec![who];
    let left: LeaveGroupResponse = b.call(ApiKey::LeaveGroup, 5, &req).await;
    assert_eq!(left.error_code, 0);
    assert_eq!(left.members[0].error_code, 0);
    assert_eq!(b.heartbeat(4, group, &member_b, 2).await, UNKNOWN_MEMBER_ID);
    assert_eq!(
        a.heartbeat(4, group, &member_a, 2).await,
        REBALANCE_IN_PROGRESS
    );
    let ja = a.join(9, group, &member_a).await;
    assert_eq!((ja.error_code, ja.generation_id), (0, 3));
    assert_eq!(ja.members.len(), 1);
    let sa = a
        .sync(5, group, &member_a, 3, &[(&member_a, b"a-all")])
        .await;
    assert_eq!(sa.error_code, 0);

    // A leaves (v0: one member), the group is Empty and can be deleted.
    let mut req = LeaveGroupRequest::default();
    req.group_id = group_id(group);
    req.member_id = StrBytes::from_string(member_a.clone());
    let left: LeaveGroupResponse = a.call(ApiKey::LeaveGroup, 0, &req).await;
    assert_eq!(left.error_code, 0);
    assert_eq!(
        a.describe(group).await.groups[0].group_state.as_str(),
        "Empty"
    );
    let mut req = DeleteGroupsRequest::default();
    req.groups_names = vec![group_id(group)];
    let del: DeleteGroupsResponse = a.call(ApiKey::DeleteGroups, 2, &req).await;
    assert_eq!(del.results[0].error_code, 0);
    assert_eq!(
        a.describe(group).await.groups[0].group_state.as_str(),
        "Dead"
    );
    server.stop().await;
}

#[tokio::test]
async fn group_metadata_survives_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data").display().to_string();
    let overrides = [
        ("log.dirs", data.as_str()),
        ("offsets.topic.num.partitions", "2"),
        ("group.initial.rebalance.delay.ms", "0"),
    ];
    let server = start(&overrides).await;
    let mut a = server.client().await;
    let ja = a.join(9, "kept", "").await;
    let member = ja.member_id.to_string();
    let sa = a.sync(5, "kept", &member, 1, &[(&member, b"mine")]).await;
    assert_eq!(sa.error_code, 0);
    drop(a);
    server.stop().await;

    let server = start(&overrides).await;
    let mut a = server.client().await;
    let d = a.describe("kept").await;
    assert_eq!(d.groups[0].group_state.as_str(), "Stable");
    assert_eq!(d.groups[0].members.len(), 1);
    assert_eq!(d.groups[0].members[0].member_assignment.as_ref(), b"mine");
    assert_eq!(a.heartbeat(4, "kept", &member, 1).await, 0);
    server.stop().await;
}
