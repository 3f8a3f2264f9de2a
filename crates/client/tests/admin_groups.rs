//! Admin client integration tests for consumer groups, committed offsets
//! and records against an in-process Sluice server: ListOffsets,
//! DeleteRecords, FindCoordinator, ListGroups, DescribeGroups (with a
//! member joined over raw JoinGroup/SyncGroup), DeleteGroups, OffsetFetch,
//! OffsetCommit and OffsetDelete.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use proto_kafka::error::ResponseError;
use proto_kafka::messages::consumer_protocol_assignment::TopicPartition as AssignedPartitions;
use proto_kafka::messages::join_group_request::JoinGroupRequestProtocol;
use proto_kafka::messages::leave_group_request::MemberIdentity;
use proto_kafka::messages::sync_group_request::SyncGroupRequestAssignment;
use proto_kafka::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, GroupId, JoinGroupRequest,
    LeaveGroupRequest, SyncGroupRequest, TopicName,
};
use proto_kafka::protocol::{Encodable, StrBytes};
use sluice_client::admin::{IsolationLevel, OffsetAndMetadata, OffsetSpec};
use sluice_client::connection::{Connection, ConnectionConfig};
use sluice_client::{ClientError, ProducerRecord, TopicPartition};

mod common;
use common::{start, start_with, TestServer};

fn code(e: &ClientError) -> Option<ResponseError> {
    e.response_error()
}

fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition::new(topic, partition)
}

fn now_ms() -> i64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(d.as_millis()).expect("ms fit i64")
}

/// Produces `n` records to `topic`/`partition` with timestamps `base`,
/// `base + 10`, ...
async fn produce(s: &TestServer, topic: &str, partition: i32, n: i64, base: i64) {
    let p = s.producer(|_| {}).await;
    let mut futs = Vec::new();
    for i in 0..n {
        let rec = ProducerRecord::new(topic, format!("v{i}").into_bytes())
            .partition(partition)
            .timestamp(base + i * 10);
        futs.push(p.send(rec).await.expect("send"));
    }
    p.flush().await;
    for f in futs {
        f.await.expect("delivered");
    }
}

#[tokio::test]
async fn list_offsets_earliest_latest_and_timestamp() {
    let s = start().await;
    s.create_topic("lo", 2).await;
    let base = now_ms() - 100_000;
    produce(&s, "lo", 0, 10, base).await;
    let admin = s.admin().await;
    let r = admin
        .list_offsets(&[
            (tp("lo", 0), OffsetSpec::Earliest),
            (tp("lo", 1), OffsetSpec::Latest),
        ])
        .await
        .expect("list offsets");
    assert_eq!(r.len(), 2);
    assert_eq!(r[&tp("lo", 0)].offset, 0);
    assert_eq!(r[&tp("lo", 1)].offset, 0);

    let one = |spec| {
        let admin = admin.clone();
        async move {
            admin
                .list_offsets(&[(tp("lo", 0), spec)])
                .await
                .expect("list offsets")[&tp("lo", 0)]
        }
    };
    assert_eq!(one(OffsetSpec::Latest).await.offset, 10);
    // The first record at or after base + 45 is offset 5 (base + 50).
    let at = one(OffsetSpec::Timestamp(base + 45)).await;
    assert_eq!((at.offset, at.timestamp), (5, base + 50));
    let exact = one(OffsetSpec::Timestamp(base + 30)).await;
    assert_eq!((exact.offset, exact.timestamp), (3, base + 30));
    assert_eq!(
        one(OffsetSpec::Timestamp(now_ms() + 60_000)).await.offset,
        -1
    );
    let max = one(OffsetSpec::MaxTimestamp).await;
    assert_eq!((max.offset, max.timestamp), (9, base + 90));

    let committed = admin
        .list_offsets_with_isolation(
            &[(tp("lo", 0), OffsetSpec::Latest)],
            IsolationLevel::ReadCommitted,
        )
        .await
        .expect("read committed");
    assert_eq!(committed[&tp("lo", 0)].offset, 10);

    let err = admin
        .list_offsets(&[(tp("missing", 0), OffsetSpec::Latest)])
        .await
        .expect_err("unknown topic");
    assert_eq!(
        code(&err),
        Some(ResponseError::UnknownTopicOrPartition),
        "{err}"
    );
    let err = admin
        .list_offsets(&[(tp("lo", 7), OffsetSpec::Latest)])
        .await
        .expect_err("unknown partition");
    assert_eq!(
        code(&err),
        Some(ResponseError::UnknownTopicOrPartition),
        "{err}"
    );
    s.stop().await;
}

#[tokio::test]
async fn delete_records_moves_the_log_start() {
    let s = start().await;
    s.create_topic("dr", 2).await;
    produce(&s, "dr", 0, 10, now_ms()).await;
    produce(&s, "dr", 1, 3, now_ms()).await;
    let admin = s.admin().await;

    let mut before = BTreeMap::new();
    before.insert(tp("dr", 0), 4);
    before.insert(tp("dr", 1), 100);
    before.insert(tp("gone", 0), 1);
    let r = admin.delete_records(&before).await.expect("delete records");
    assert_eq!(r.len(), 3);
    assert_eq!(*r[&tp("dr", 0)].as_ref().expect("dr-0"), 4);
    let err = r[&tp("dr", 1)]
        .as_ref()
        .expect_err("past the high watermark");
    assert_eq!(code(err), Some(ResponseError::OffsetOutOfRange), "{err}");
    let err = r[&tp("gone", 0)].as_ref().expect_err("unknown topic");
    assert_eq!(
        code(err),
        Some(ResponseError::UnknownTopicOrPartition),
        "{err}"
    );

    let starts = admin
        .list_offsets(&[
            (tp("dr", 0), OffsetSpec::Earliest),
            (tp("dr", 1), OffsetSpec::Earliest),
        ])
        .await
        .expect("earliest");
    assert_eq!(starts[&tp("dr", 0)].offset, 4);
    assert_eq!(starts[&tp("dr", 1)].offset, 0);

    // -1: everything up to the high watermark.
    let r = admin
        .delete_records(&BTreeMap::from([(tp("dr", 1), -1)]))
        .await
        .expect("delete all");
    assert_eq!(*r[&tp("dr", 1)].as_ref().expect("dr-1"), 3);
    let starts = admin
        .list_offsets(&[(tp("dr", 1), OffsetSpec::Earliest)])
        .await
        .expect("earliest");
    assert_eq!(starts[&tp("dr", 1)].offset, 3);
    s.stop().await;
}

#[tokio::test]
async fn alter_list_and_delete_group_offsets() {
    let s = start().await;
    s.create_topic("go", 3).await;
    let admin = s.admin().await;
    let coordinator = admin.find_coordinator("g1").await.expect("coordinator");
    let md = admin.cluster().metadata().await;
    assert_eq!(md.brokers.get(&coordinator.id), Some(&coordinator));

    // Nothing committed yet: no offsets, no error.
    let none = admin
        .list_consumer_group_offsets("g1", None)
        .await
        .expect("list");
    assert!(none.is_empty(), "{none:?}");

    let mut offsets = BTreeMap::new();
    offsets.insert(
        tp("go", 0),
        OffsetAndMetadata {
            offset: 5,
            metadata: Some("m0".into()),
            leader_epoch: Some(0),
        },
    );
    offsets.insert(tp("go", 1), OffsetAndMetadata::new(7));
    admin
        .alter_consumer_group_offsets("g1", &offsets)
        .await
        .expect("alter");

    let all = admin
        .list_consumer_group_offsets("g1", None)
        .await
        .expect("list all");
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[&tp("go", 0)], offsets[&tp("go", 0)]);
    assert_eq!(all[&tp("go", 1)].offset, 7);
    assert_eq!(all[&tp("go", 1)].leader_epoch, None);
    assert!(
        all[&tp("go", 1)]
            .metadata
            .as_deref()
            .unwrap_or("")
            .is_empty(),
        "{all:?}"
    );
    // A subset: go-2 has no commit and is left out.
    let some = admin
        .list_consumer_group_offsets("g1", Some(&[tp("go", 1), tp("go", 2)]))
        .await
        .expect("list subset");
    assert_eq!(some.keys().collect::<Vec<_>>(), [&tp("go", 1)]);

    let groups = admin.list_groups().await.expect("list groups");
    let g1 = groups
        .iter()
        .find(|g| g.group_id == "g1")
        .expect("g1 listed");
    assert_eq!(g1.protocol_type, "");
    assert_eq!(g1.state.as_deref(), Some("Empty"));

    let d = admin
        .describe_groups(&["g1", "unknown-group"])
        .await
        .expect("describe");
    assert_eq!(d.len(), 2);
    assert_eq!(d[0].group_id, "g1");
    assert_eq!(d[0].state, "Empty");
    assert!(d[0].protocol_type.is_empty() || d[0].protocol_type == "consumer");
    assert!(d[0].members.is_empty());
    assert_eq!(d[0].error_code, 0);
    assert!(d[0].error().is_none());
    // DescribeGroups v6: unknown groups are GROUP_ID_NOT_FOUND.
    assert_eq!(d[1].group_id, "unknown-group");
    let err = d[1].error().expect("unknown group error");
    assert_eq!(code(&err), Some(ResponseError::GroupIdNotFound), "{err}");

    let err = admin
        .alter_consumer_group_offsets(
            "g1",
            &BTreeMap::from([(tp("nope", 0), OffsetAndMetadata::new(1))]),
        )
        .await
        .expect_err("unknown topic");
    assert_eq!(
        code(&err),
        Some(ResponseError::UnknownTopicOrPartition),
        "{err}"
    );

    admin
        .delete_consumer_group_offsets("g1", &[tp("go", 0)])
        .await
        .expect("delete offsets");
    let all = admin
        .list_consumer_group_offsets("g1", None)
        .await
        .expect("list all");
    assert_eq!(all.keys().collect::<Vec<_>>(), [&tp("go", 1)]);
    let err = admin
        .delete_consumer_group_offsets("no-such-group", &[tp("go", 0)])
        .await
        .expect_err("unknown group");
    assert_eq!(code(&err), Some(ResponseError::GroupIdNotFound), "{err}");

    let results = admin
        .delete_groups(&["g1", "no-such-group"])
        .await
        .expect("delete groups");
    assert_eq!(results[0].0, "g1");
    assert!(results[0].1.is_ok(), "{results:?}");
    let err = results[1].1.as_ref().expect_err("unknown group");
    assert_eq!(code(err), Some(ResponseError::GroupIdNotFound), "{err}");
    let groups = admin.list_groups().await.expect("list groups");
    assert!(!groups.iter().any(|g| g.group_id == "g1"), "{groups:?}");
    let gone = admin
        .list_consumer_group_offsets("g1", None)
        .await
        .expect("list");
    assert!(gone.is_empty(), "{gone:?}");
    s.stop().await;
}

/// `version` (i16) followed by `msg` encoded at that version: the consumer
/// protocol's framing of subscriptions and assignments.
fn versioned<M: Encodable>(msg: &M, version: i16) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    msg.encode(&mut buf, version).expect("encode");
    buf.freeze()
}

/// Joins `group` as the only member over raw JoinGroup/SyncGroup v5
/// (consumer protocol, assignor "range"), assigning it `partitions` of
/// `topic`. Returns the connection and the member id.
async fn join_member(
    s: &TestServer,
    group: &str,
    topic: &str,
    partitions: &[i32],
) -> (Connection, String) {
    let cfg = ConnectionConfig {
        client_id: "raw-member".into(),
        ..ConnectionConfig::default()
    };
    let mut conn = Connection::connect(&s.addr, cfg).await.expect("connect");
    let mut sub = ConsumerProtocolSubscription::default();
    sub.topics = vec![StrBytes::from_string(topic.to_string())];
    let mut protocol = JoinGroupRequestProtocol::default();
    protocol.name = StrBytes::from_static_str("range");
    protocol.metadata = versioned(&sub, 0);
    let mut join = JoinGroupRequest::default();
    join.group_id = GroupId(StrBytes::from_string(group.to_string()));
    join.session_timeout_ms = 30_000;
    join.rebalance_timeout_ms = 30_000;
    join.protocol_type = StrBytes::from_static_str("consumer");
    join.protocols = vec![protocol];
    // v4+: the first join only hands out a member id (MEMBER_ID_REQUIRED).
    let first = conn.send(&join, 5).await.expect("join");
    assert_eq!(first.error_code, ResponseError::MemberIdRequired.code());
    join.member_id = first.member_id.clone();
    let joined = conn.send(&join, 5).await.expect("rejoin");
    assert_eq!(joined.error_code, 0, "join error");
    assert_eq!(joined.leader, joined.member_id);

    let mut assigned = AssignedPartitions::default();
    assigned.topic = TopicName(StrBytes::from_string(topic.to_string()));
    assigned.partitions = partitions.to_vec();
    let mut assignment = ConsumerProtocolAssignment::default();
    assignment.assigned_partitions = vec![assigned];
    let mut a = SyncGroupRequestAssignment::default();
    a.member_id = joined.member_id.clone();
    a.assignment = versioned(&assignment, 1);
    let mut sync = SyncGroupRequest::default();
    sync.group_id = join.group_id.clone();
    sync.generation_id = joined.generation_id;
    sync.member_id = joined.member_id.clone();
    sync.protocol_type = Some(StrBytes::from_static_str("consumer"));
    sync.protocol_name = Some(StrBytes::from_static_str("range"));
    sync.assignments = vec![a];
    let synced = conn.send(&sync, 5).await.expect("sync");
    assert_eq!(synced.error_code, 0, "sync error");
    (conn, joined.member_id.as_str().to_string())
}

#[tokio::test]
async fn active_group_is_described_and_protected() {
    let s = start_with(|c| {
        c.set("group.initial.rebalance.delay.ms", "0")
            .expect("rebalance delay");
    })
    .await;
    s.create_topic("act", 3).await;
    s.create_topic("other", 1).await;
    let admin = s.admin().await;
    admin
        .alter_consumer_group_offsets(
            "active",
            &BTreeMap::from([
                (tp("act", 0), OffsetAndMetadata::new(1)),
                (tp("other", 0), OffsetAndMetadata::new(2)),
            ]),
        )
        .await
        .expect("commit while empty");
    let (mut conn, member_id) = join_member(&s, "active", "act", &[0, 2]).await;

    let d = admin.describe_groups(&["active"]).await.expect("describe");
    let g = &d[0];
    assert_eq!(g.error_code, 0);
    assert_eq!(g.state, "Stable");
    assert_eq!(g.protocol_type, "consumer");
    assert_eq!(g.protocol, "range");
    assert_eq!(g.members.len(), 1, "{g:?}");
    let m = &g.members[0];
    assert_eq!(m.member_id, member_id);
    assert_eq!(m.client_id, "raw-member");
    assert!(m.client_host.contains("127.0.0.1"), "{}", m.client_host);
    assert_eq!(m.group_instance_id, None);
    assert_eq!(m.assignment, [tp("act", 0), tp("act", 2)]);

    let groups = admin.list_groups().await.expect("list groups");
    let listed = groups
        .iter()
        .find(|g| g.group_id == "active")
        .expect("listed");
    assert_eq!(listed.protocol_type, "consumer");
    assert_eq!(listed.state.as_deref(), Some("Stable"));

    // Generation -1 / no member id on a group with members: Kafka's
    // ClassicGroup.validateOffsetCommit answers UNKNOWN_MEMBER_ID.
    let err = admin
        .alter_consumer_group_offsets(
            "active",
            &BTreeMap::from([(tp("act", 1), OffsetAndMetadata::new(3))]),
        )
        .await
        .expect_err("active group");
    assert!(
        matches!(
            code(&err),
            Some(ResponseError::UnknownMemberId | ResponseError::RebalanceInProgress)
        ),
        "{err}"
    );
    // Offsets of a subscribed topic cannot be deleted; others can.
    let err = admin
        .delete_consumer_group_offsets("active", &[tp("act", 0)])
        .await
        .expect_err("subscribed topic");
    assert_eq!(
        code(&err),
        Some(ResponseError::GroupSubscribedToTopic),
        "{err}"
    );
    admin
        .delete_consumer_group_offsets("active", &[tp("other", 0)])
        .await
        .expect("unsubscribed topic");
    let left = admin
        .list_consumer_group_offsets("active", None)
        .await
        .expect("list");
    assert_eq!(left.keys().collect::<Vec<_>>(), [&tp("act", 0)]);

    let r = admin.delete_groups(&["active"]).await.expect("delete");
    let err = r[0].1.as_ref().expect_err("non-empty group");
    assert_eq!(code(err), Some(ResponseError::NonEmptyGroup), "{err}");

    // Once the member leaves the group is Empty and can be deleted.
    let mut leave = LeaveGroupRequest::default();
    leave.group_id = GroupId(StrBytes::from_static_str("active"));
    let mut who = MemberIdentity::default();
    who.member_id = StrBytes::from_string(member_id);
    leave.members = vec![who];
    let resp = conn.send(&leave, 3).await.expect("leave");
    assert_eq!(resp.error_code, 0);
    let d = admin.describe_groups(&["active"]).await.expect("describe");
    assert_eq!(d[0].state, "Empty");
    assert!(d[0].members.is_empty());
    let r = admin.delete_groups(&["active"]).await.expect("delete");
    assert!(r[0].1.is_ok(), "{r:?}");
    s.stop().await;
}
