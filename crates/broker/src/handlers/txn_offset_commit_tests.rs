//! TxnOffsetCommit per version: pending offsets invisible until the marker
//! on the group's `__consumer_offsets` partition (commit applies, abort
//! drops), OffsetFetch `require_stable`, group and topic errors, a fenced
//! producer, and a reload that replays pending offsets and markers.

use proto_kafka::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use proto_kafka::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use proto_kafka::messages::{
    ApiKey, GroupId, OffsetFetchRequest, OffsetFetchResponse, ProducerId, TopicName,
    TransactionalId,
};
use proto_kafka::protocol::StrBytes;

use super::super::offset_commit::tests::stable_member;
use super::super::test_support::{call, open_broker};
use super::*;
use crate::broker::CONSUMER_OFFSETS_TOPIC;
use crate::txn_markers::tests::write;

fn request(
    group: &str,
    (pid, epoch): (i64, i16),
    member: Option<(&str, i32)>,
    commits: &[(&str, i32, i64, Option<&str>)],
) -> TxnOffsetCommitRequest {
    let mut req = TxnOffsetCommitRequest::default();
    req.transactional_id = TransactionalId(StrBytes::from_string("tx".into()));
    req.group_id = GroupId(StrBytes::from_string(group.into()));
    req.producer_id = ProducerId(pid);
    req.producer_epoch = epoch;
    req.generation_id = -1;
    if let Some((m, g)) = member {
        req.member_id = StrBytes::from_string(m.into());
        req.generation_id = g;
    }
    let mut topics: Vec<TxnOffsetCommitRequestTopic> = Vec::new();
    for &(topic, partition, offset, metadata) in commits {
        let mut p = TxnOffsetCommitRequestPartition::default();
        p.partition_index = partition;
        p.committed_offset = offset;
        p.committed_leader_epoch = 4;
        p.committed_metadata = metadata.map(|m| StrBytes::from_string(m.into()));
        match topics.iter_mut().find(|t| t.name.0.as_str() == topic) {
            Some(t) => t.partitions.push(p),
            None => {
                let mut t = TxnOffsetCommitRequestTopic::default();
                t.name = TopicName(StrBytes::from_string(topic.into()));
                t.partitions.push(p);
                topics.push(t);
            }
        }
    }
    req.topics = topics;
    req
}

fn codes(resp: &TxnOffsetCommitResponse) -> Vec<(String, i32, i16)> {
    resp.topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.0.to_string(), p.partition_index, p.error_code))
        })
        .collect()
}

async fn txn_commit(
    broker: &Arc<Broker>,
    version: i16,
    req: &TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    call(broker, ApiKey::TxnOffsetCommit, version, req)
        .await
        .expect("response")
}

/// OffsetFetch v8 of one partition: (offset, leader epoch, error).
async fn fetch(broker: &Arc<Broker>, group: &str, partition: i32, stable: bool) -> (i64, i32, i16) {
    let mut t = OffsetFetchRequestTopics::default();
    t.name = TopicName(StrBytes::from_string("t".into()));
    t.partition_indexes = vec![partition];
    let mut g = OffsetFetchRequestGroup::default();
    g.group_id = GroupId(StrBytes::from_string(group.into()));
    g.topics = Some(vec![t]);
    let mut req = OffsetFetchRequest::default();
    req.groups = vec![g];
    req.require_stable = stable;
    let resp: OffsetFetchResponse = call(broker, ApiKey::OffsetFetch, 8, &req)
        .await
        .expect("response");
    let p = &resp.groups[0].topics[0].partitions[0];
    (p.committed_offset, p.committed_leader_epoch, p.error_code)
}

const OK: i16 = 0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_until_the_marker_in_every_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[("offsets.topic.num.partitions", "2")]);
    broker.create_topic("t", 2, 1, &[], false).expect("create");
    for v in VERSIONS.0..=VERSIONS.1 {
        let group = format!("g{v}");
        let pid = 100 + i64::from(v);
        let coordinator = broker.groups.partition_for(&broker, &group);
        let req = request(
            &group,
            (pid, 0),
            None,
            &[
                ("t", 0, 10, Some("m")),
                ("t", 9, 1, None),
                ("nope", 0, 1, None),
            ],
        );
        let resp = txn_commit(&broker, v, &req).await;
        let unknown = ResponseError::UnknownTopicOrPartition.code();
        assert_eq!(
            codes(&resp),
            vec![
                ("t".into(), 0, OK),
                ("t".into(), 9, unknown),
                ("nope".into(), 0, unknown)
            ],
            "v{v}"
        );
        // Pending: not committed; require_stable answers unstable.
        let unstable = ResponseError::UnstableOffsetCommit.code();
        assert_eq!(fetch(&broker, &group, 0, false).await, (-1, -1, OK));
        assert_eq!(fetch(&broker, &group, 0, true).await, (-1, -1, unstable));
        // The COMMIT marker on the group's partition applies it.
        let got = broker
            .write_txn_markers(write(
                pid,
                0,
                0,
                true,
                &[(CONSUMER_OFFSETS_TOPIC, coordinator)],
            ))
            .await;
        assert_eq!(got[0].1, None, "v{v}");
        let epoch = if v >= 2 { 4 } else { -1 };
        assert_eq!(
            fetch(&broker, &group, 0, true).await,
            (10, epoch, OK),
            "v{v}"
        );
        // A second transaction that aborts leaves the offset as it was.
        let req = request(
            &group,
            (pid, 0),
            None,
            &[("t", 0, 20, None), ("t", 1, 5, None)],
        );
        assert_eq!(
            codes(&txn_commit(&broker, v, &req).await),
            vec![("t".into(), 0, OK), ("t".into(), 1, OK)]
        );
        assert_eq!(fetch(&broker, &group, 1, true).await, (-1, -1, unstable));
        broker
            .write_txn_markers(write(
                pid,
                0,
                0,
                false,
                &[(CONSUMER_OFFSETS_TOPIC, coordinator)],
            ))
            .await;
        assert_eq!(
            fetch(&broker, &group, 0, true).await,
            (10, epoch, OK),
            "v{v}"
        );
        assert_eq!(fetch(&broker, &group, 1, true).await, (-1, -1, OK), "v{v}");
    }
    broker.shutdown().expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_errors_members_and_fenced_producers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(
        dir.path(),
        &[
            ("offsets.topic.num.partitions", "1"),
            ("group.initial.rebalance.delay.ms", "0"),
        ],
    );
    broker.create_topic("t", 1, 1, &[], false).expect("create");
    let one = [("t", 0, 1, None)];
    // Empty group id: every partition, unknown topics included.
    let req = request("", (1, 0), None, &[("t", 0, 1, None), ("nope", 0, 1, None)]);
    let invalid = ResponseError::InvalidGroupId.code();
    assert_eq!(
        codes(&txn_commit(&broker, 0, &req).await),
        vec![("t".into(), 0, invalid), ("nope".into(), 0, invalid)]
    );
    // v3+: a generation for a missing group.
    let req = request("missing", (1, 0), Some(("m", 2)), &one);
    assert_eq!(
        codes(&txn_commit(&broker, 3, &req).await),
        vec![("t".into(), 0, ResponseError::IllegalGeneration.code())]
    );
    // A Stable group: its member at its generation, or no member at all
    // (v0-v2 style), commit; an unknown member or old generation does not.
    let (member, generation) = stable_member(&broker, "g", None, &["t"]);
    for (m, v, want) in [
        (Some((member.as_str(), generation)), 3, OK),
        (None, 2, OK),
        (None, 4, OK),
        (
            Some(("ghost", generation)),
            4,
            ResponseError::UnknownMemberId.code(),
        ),
        (
            Some((member.as_str(), generation + 1)),
            4,
            ResponseError::IllegalGeneration.code(),
        ),
    ] {
        let req = request("g", (5, 0), m, &one);
        assert_eq!(
            codes(&txn_commit(&broker, v, &req).await),
            vec![("t".into(), 0, want)],
            "{m:?} v{v}"
        );
    }
    // Metadata too large: that partition only.
    let big = "x".repeat(4097);
    let req = request("g", (5, 0), None, &[("t", 0, 1, Some(&big))]);
    assert_eq!(
        codes(&txn_commit(&broker, 3, &req).await),
        vec![("t".into(), 0, ResponseError::OffsetMetadataTooLarge.code())]
    );
    // The coordinator aborts producer 5 with a bumped epoch (a fence): a
    // zombie's commit at the old epoch is refused by producer state.
    broker
        .write_txn_markers(write(5, 1, 0, false, &[(CONSUMER_OFFSETS_TOPIC, 0)]))
        .await;
    let req = request("g", (5, 0), None, &one);
    assert_eq!(
        codes(&txn_commit(&broker, 3, &req).await),
        vec![("t".into(), 0, ResponseError::InvalidProducerEpoch.code())]
    );
    assert_eq!(fetch(&broker, "g", 0, true).await, (-1, -1, OK));
    broker.shutdown().expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_replays_pending_offsets_and_markers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let overrides = [("offsets.topic.num.partitions", "1")];
    let broker = open_broker(dir.path(), &overrides);
    broker.create_topic("t", 3, 1, &[], false).expect("create");
    let c = (CONSUMER_OFFSETS_TOPIC, 0);
    // 1 commits, 2 aborts, 3 stays open; a plain commit written after 4's
    // transactional one wins when 4 commits.
    for (pid, p, o) in [(1, 0, 10), (2, 1, 20), (3, 2, 30), (4, 1, 40)] {
        let req = request("g", (pid, 0), None, &[("t", p, o, None)]);
        assert_eq!(codes(&txn_commit(&broker, 3, &req).await)[0].2, OK);
    }
    let plain = super::super::offset_commit::tests::request("g", -1, "", &[("t", 1, 41, None)]);
    let _ = super::super::offset_commit::respond(
        &broker,
        plain,
        &super::super::test_support::ctx(ApiKey::OffsetCommit, 8),
    );
    broker.write_txn_markers(write(1, 0, 0, true, &[c])).await;
    broker.write_txn_markers(write(2, 0, 0, false, &[c])).await;
    broker.write_txn_markers(write(4, 0, 0, true, &[c])).await;
    let before: Vec<(i64, i32, i16)> = vec![
        fetch(&broker, "g", 0, true).await,
        fetch(&broker, "g", 1, true).await,
        fetch(&broker, "g", 2, true).await,
    ];
    let unstable = ResponseError::UnstableOffsetCommit.code();
    assert_eq!(before, vec![(10, 4, OK), (41, -1, OK), (-1, -1, unstable)]);
    broker.shutdown().expect("shutdown");
    drop(broker);

    let broker = open_broker(dir.path(), &overrides);
    let after = vec![
        fetch(&broker, "g", 0, true).await,
        fetch(&broker, "g", 1, true).await,
        fetch(&broker, "g", 2, true).await,
    ];
    assert_eq!(after, before);
    {
        let shard = broker.groups.shard(&broker, "g").expect("shard");
        let shard = lock(&shard);
        assert_eq!(shard.offsets.open_transactions("g"), vec![3]);
    }
    // The open transaction completes after the reload.
    broker.write_txn_markers(write(3, 0, 0, true, &[c])).await;
    assert_eq!(fetch(&broker, "g", 2, true).await, (30, 4, OK));
    broker.shutdown().expect("shutdown");
}
