//! OffsetCommit (key 8): store a group's consumed positions in
//! `__consumer_offsets`. As Kafka (`KafkaApis.handleOffsetCommitRequest`,
//! `GroupMetadataManager.validateOffsetCommit`,
//! `OffsetMetadataManager.commitOffset`):
//!
//! - partitions of topics (or partition indexes) the broker does not have
//!   fail with UNKNOWN_TOPIC_OR_PARTITION; the group is only consulted for
//!   the others;
//! - generation -1 with an empty member id is a "simple" consumer
//!   (`assign()` users, admin clients): accepted while the group is Empty
//!   or does not exist (it is then created, Empty, without protocol type);
//! - otherwise member id, group instance id and generation must match the
//!   group (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION;
//!   REBALANCE_IN_PROGRESS while CompletingRebalance; GROUP_ID_NOT_FOUND
//!   from v9 for a missing group with a generation); a group error applies
//!   to every partition;
//! - metadata longer than `offset.metadata.max.bytes` is
//!   OFFSET_METADATA_TOO_LARGE for that partition;
//! - v2-v4 `retention_time_ms` (not -1) sets the offset's expire timestamp
//!   to now + retention;
//! - the commit is acknowledged only after its records are appended to the
//!   group's `__consumer_offsets` partition; append failures are reported
//!   with Kafka's coordinator mapping (NOT_COORDINATOR,
//!   COORDINATOR_NOT_AVAILABLE, UNKNOWN_SERVER_ERROR).
//!
//! proto-kafka 0.22 decodes v2-v9 (Kafka 4 also dropped v0-v1).

use std::sync::Arc;

use proto_kafka::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use proto_kafka::messages::{OffsetCommitRequest, OffsetCommitResponse};
use proto_kafka::ResponseError;
use sluice_coordinator::offsets::PartitionCommit;
use sluice_coordinator::CoordinatorError;

use super::Ctx;
use crate::broker::{ApiError, Broker};
use crate::groups::{lock, now_ms, CommitPoint};

pub(crate) const VERSIONS: (i16, i16) = (2, 9);

/// `OffsetCommitRequest.DEFAULT_RETENTION_TIME`.
const DEFAULT_RETENTION_TIME: i64 = -1;

pub(crate) async fn handle(
    broker: &Arc<Broker>,
    req: OffsetCommitRequest,
    ctx: &Ctx,
) -> OffsetCommitResponse {
    let (mut resp, point) = respond(broker, req, ctx);
    let codes = resp.topics.iter_mut().flat_map(|t| t.partitions.iter_mut());
    broker
        .groups
        .answer_when_committed(point, codes.map(|p| &mut p.error_code))
        .await;
    resp
}

/// The response as the coordinator decides it, and where its records
/// must be replicated to before it goes out.
pub(crate) fn respond(
    broker: &Arc<Broker>,
    req: OffsetCommitRequest,
    ctx: &Ctx,
) -> (OffsetCommitResponse, Option<CommitPoint>) {
    let group = req.group_id.0.to_string();
    let image = broker.image();
    // One error slot per requested partition, in request order; `None`
    // while the partition waits for the coordinator.
    let mut slots: Vec<(usize, i32, Option<i16>)> = Vec::new();
    let mut commits: Vec<PartitionCommit> = Vec::new();
    let mut pending: Vec<usize> = Vec::new();
    for (ti, t) in req.topics.iter().enumerate() {
        let name = t.name.0.to_string();
        let topic = image.topic(&name);
        for p in &t.partitions {
            if topic.is_some_and(|tp| tp.partitions.contains_key(&p.partition_index)) {
                pending.push(slots.len());
                slots.push((ti, p.partition_index, None));
                commits.push(PartitionCommit {
                    topic: name.clone(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: if ctx.version >= 6 {
                        p.committed_leader_epoch
                    } else {
                        -1
                    },
                    metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                });
            } else {
                slots.push((
                    ti,
                    p.partition_index,
                    Some(ResponseError::UnknownTopicOrPartition.code()),
                ));
            }
        }
    }
    let mut point = None;
    if !commits.is_empty() {
        let retention = if ctx.version <= 4 {
            req.retention_time_ms
        } else {
            DEFAULT_RETENTION_TIME
        };
        let (results, written) = commit(broker, &req, &group, &commits, retention, ctx.version);
        point = written;
        for (slot, code) in pending.into_iter().zip(results) {
            slots[slot].2 = Some(code);
        }
    }
    let mut resp = OffsetCommitResponse::default();
    for (ti, t) in req.topics.iter().enumerate() {
        let mut rt = OffsetCommitResponseTopic::default();
        rt.name = t.name.clone();
        rt.partitions = slots
            .iter()
            .filter(|s| s.0 == ti)
            .map(|&(_, partition, code)| {
                let mut rp = OffsetCommitResponsePartition::default();
                rp.partition_index = partition;
                rp.error_code = code.unwrap_or(0);
                rp
            })
            .collect();
        resp.topics.push(rt);
    }
    (resp, point)
}

/// Validates the membership, appends the records and applies them;
/// returns one error code per commit, in order.
fn commit(
    broker: &Broker,
    req: &OffsetCommitRequest,
    group: &str,
    commits: &[PartitionCommit],
    retention_time_ms: i64,
    version: i16,
) -> (Vec<i16>, Option<CommitPoint>) {
    let all = |code: i16| (vec![code; commits.len()], None);
    let shard = match broker.groups.shard(broker, group) {
        Ok(s) => s,
        Err(e) => return all(e.code.code()),
    };
    let mut shard = lock(&shard);
    let now = now_ms();
    let member_id = req.member_id.to_string();
    let instance_id = req.group_instance_id.as_ref().map(|s| s.to_string());
    if let Err(e) = shard.groups.validate_offset_commit(
        now,
        group,
        &member_id,
        instance_id.as_deref(),
        req.generation_id_or_member_epoch,
        version,
    ) {
        tracing::debug!(group, error = ?e, "OffsetCommit refused");
        return all(e.code());
    }
    let expire = (retention_time_ms != DEFAULT_RETENTION_TIME)
        .then(|| now.saturating_add(retention_time_ms));
    let outcome = shard.offsets.commit(group, commits, now, expire);
    let appended = broker
        .groups
        .commit_records(&mut shard, &outcome.records)
        .map_err(|e| append_error(&e));
    let codes = outcome
        .results
        .iter()
        .map(|r| match (&r.result, &appended) {
            (Err(e), _) => partition_error(e),
            (Ok(()), Err(code)) => *code,
            (Ok(()), Ok(())) => 0,
        })
        .collect();
    let point = (appended.is_ok() && !outcome.records.is_empty()).then(|| shard.commit_point());
    (codes, point)
}

/// The error code of a per-partition commit failure.
pub(crate) fn partition_error(e: &CoordinatorError) -> i16 {
    match e {
        CoordinatorError::OffsetMetadataTooLarge { .. } => {
            ResponseError::OffsetMetadataTooLarge.code()
        }
        CoordinatorError::GroupSubscribedToTopic { .. } => {
            ResponseError::GroupSubscribedToTopic.code()
        }
        other => {
            tracing::error!(error = %other, "offset commit failed");
            ResponseError::UnknownServerError.code()
        }
    }
}

/// Kafka's `CoordinatorRuntime` normalization of a failed append of
/// coordinator records.
pub(crate) fn append_error(e: &ApiError) -> i16 {
    match e.code {
        ResponseError::UnknownTopicOrPartition
        | ResponseError::NotEnoughReplicas
        | ResponseError::RequestTimedOut => ResponseError::CoordinatorNotAvailable,
        ResponseError::NotLeaderOrFollower | ResponseError::KafkaStorageError => {
            ResponseError::NotCoordinator
        }
        ResponseError::MessageTooLarge
        | ResponseError::RecordListTooLarge
        | ResponseError::InvalidFetchSize => ResponseError::UnknownServerError,
        other => other,
    }
    .code()
}

#[cfg(test)]
pub(crate) mod tests {
    use proto_kafka::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use proto_kafka::messages::{ApiKey, GroupId, TopicName};
    use proto_kafka::protocol::StrBytes;

    use super::super::test_support::{ctx, open_broker, roundtrip};
    use super::*;

    /// The coordinator's answer (on one node the high watermark covers a
    /// write at once: nothing to wait for).
    fn handle(broker: &Arc<Broker>, req: OffsetCommitRequest, ctx: &Ctx) -> OffsetCommitResponse {
        respond(broker, req, ctx).0
    }

    pub(crate) fn request(
        group: &str,
        generation: i32,
        member: &str,
        commits: &[(&str, i32, i64, Option<&str>)],
    ) -> OffsetCommitRequest {
        let mut req = OffsetCommitRequest::default();
        req.group_id = GroupId(StrBytes::from_string(group.into()));
        req.generation_id_or_member_epoch = generation;
        req.member_id = StrBytes::from_string(member.into());
        req.retention_time_ms = -1;
        let mut topics: Vec<OffsetCommitRequestTopic> = Vec::new();
        for &(topic, partition, offset, metadata) in commits {
            let mut p = OffsetCommitRequestPartition::default();
            p.partition_index = partition;
            p.committed_offset = offset;
            p.committed_leader_epoch = -1;
            p.committed_metadata = metadata.map(|m| StrBytes::from_string(m.into()));
            match topics.iter_mut().find(|t| t.name.0.as_str() == topic) {
                Some(t) => t.partitions.push(p),
                None => {
                    let mut t = OffsetCommitRequestTopic::default();
                    t.name = TopicName(StrBytes::from_string(topic.into()));
                    t.partitions.push(p);
                    topics.push(t);
                }
            }
        }
        req.topics = topics;
        req
    }

    fn codes(resp: &OffsetCommitResponse) -> Vec<(String, i32, i16)> {
        resp.topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.name.0.to_string(), p.partition_index, p.error_code))
            })
            .collect()
    }

    #[test]
    fn simple_consumer_commits_in_every_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[("offsets.topic.num.partitions", "3")]);
        broker.create_topic("t", 2, 1, &[], false).expect("create");
        for v in VERSIONS.0..=VERSIONS.1 {
            let group = format!("g{v}");
            let req = request(
                &group,
                -1,
                "",
                &[
                    ("t", 0, 10 + i64::from(v), Some("meta")),
                    ("t", 1, 20, None),
                    ("t", 9, 1, None),
                    ("nope", 0, 1, None),
                ],
            );
            let resp = roundtrip(&handle(&broker, req, &ctx(ApiKey::OffsetCommit, v)), v);
            let unknown = ResponseError::UnknownTopicOrPartition.code();
            assert_eq!(
                codes(&resp),
                vec![
                    ("t".into(), 0, 0),
                    ("t".into(), 1, 0),
                    ("t".into(), 9, unknown),
                    ("nope".into(), 0, unknown)
                ],
                "v{v}"
            );
            let shard = broker.groups.shard(&broker, &group).expect("shard");
            let shard = lock(&shard);
            let o = shard.offsets.offset(&group, "t", 0).expect("committed");
            assert_eq!(o.offset, 10 + i64::from(v));
            assert_eq!(o.metadata, "meta");
            assert_eq!(o.expire_timestamp_ms, None);
            assert_eq!(
                shard
                    .offsets
                    .offset(&group, "t", 1)
                    .map(|o| o.metadata.as_str()),
                Some("")
            );
            assert!(shard.offsets.offset(&group, "t", 9).is_none());
        }
        broker.shutdown().expect("shutdown");
    }

    #[test]
    fn retention_time_sets_the_expire_timestamp_in_v2_to_v4() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[("offsets.topic.num.partitions", "1")]);
        broker.create_topic("t", 1, 1, &[], false).expect("create");
        for v in 2..=4 {
            let mut req = request("g", -1, "", &[("t", 0, 5, None)]);
            req.retention_time_ms = 60_000;
            let before = now_ms();
            let resp = handle(&broker, req, &ctx(ApiKey::OffsetCommit, v));
            assert_eq!(codes(&resp), vec![("t".into(), 0, 0)]);
            let shard = broker.groups.shard(&broker, "g").expect("shard");
            let shard = lock(&shard);
            let o = shard.offsets.offset("g", "t", 0).expect("committed");
            let expire = o.expire_timestamp_ms.expect("expire timestamp");
            assert!(expire >= before + 60_000 && expire <= now_ms() + 60_000);
        }
        broker.shutdown().expect("shutdown");
    }

    #[test]
    fn errors_of_group_and_metadata() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[("offsets.topic.num.partitions", "1")]);
        broker.create_topic("t", 1, 1, &[], false).expect("create");
        // A generation for a group that does not exist.
        let resp = handle(
            &broker,
            request("g", 3, "m", &[("t", 0, 1, None)]),
            &ctx(ApiKey::OffsetCommit, 8),
        );
        assert_eq!(
            codes(&resp),
            vec![("t".into(), 0, ResponseError::IllegalGeneration.code())]
        );
        let resp = handle(
            &broker,
            request("g", 3, "m", &[("t", 0, 1, None)]),
            &ctx(ApiKey::OffsetCommit, 9),
        );
        assert_eq!(
            codes(&resp),
            vec![("t".into(), 0, ResponseError::GroupIdNotFound.code())]
        );
        // Empty group id.
        let resp = handle(
            &broker,
            request("", -1, "", &[("t", 0, 1, None)]),
            &ctx(ApiKey::OffsetCommit, 9),
        );
        assert_eq!(
            codes(&resp),
            vec![("t".into(), 0, ResponseError::InvalidGroupId.code())]
        );
        // Metadata over offset.metadata.max.bytes (4096).
        let big = "x".repeat(4097);
        let resp = handle(
            &broker,
            request(
                "g",
                -1,
                "",
                &[("t", 0, 1, Some(&big)), ("t", 0, 2, Some("ok"))],
            ),
            &ctx(ApiKey::OffsetCommit, 9),
        );
        assert_eq!(
            codes(&resp),
            vec![
                ("t".into(), 0, ResponseError::OffsetMetadataTooLarge.code()),
                ("t".into(), 0, 0)
            ]
        );
        broker.shutdown().expect("shutdown");
    }

    /// A `ConsumerProtocolSubscription` v0 of `topics`.
    fn subscription(topics: &[&str]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&0i16.to_be_bytes());
        b.extend_from_slice(&(topics.len() as i32).to_be_bytes());
        for t in topics {
            b.extend_from_slice(&(t.len() as i16).to_be_bytes());
            b.extend_from_slice(t.as_bytes());
        }
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b
    }

    /// Forms a Stable consumer group of one member through the state
    /// machine (the broker needs `group.initial.rebalance.delay.ms=0`).
    /// Returns the member id and generation.
    pub(crate) fn stable_member(
        broker: &Arc<Broker>,
        group: &str,
        instance: Option<&str>,
        topics: &[&str],
    ) -> (String, i32) {
        stable_member_of(broker, group, instance, "consumer", topics)
    }

    /// [`stable_member`] with another protocol type.
    pub(crate) fn stable_member_of(
        broker: &Arc<Broker>,
        group: &str,
        instance: Option<&str>,
        protocol_type: &str,
        topics: &[&str],
    ) -> (String, i32) {
        use sluice_coordinator::group::{
            GroupResponse, JoinGroupRequest, Protocol, SyncGroupRequest,
        };
        let shard = broker.groups.shard(broker, group).expect("shard");
        let mut shard = lock(&shard);
        let (token, mut rx) = broker.groups.park();
        let req = JoinGroupRequest {
            group_id: group.into(),
            member_id: String::new(),
            group_instance_id: instance.map(str::to_owned),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 30_000,
            rebalance_timeout_ms: 30_000,
            protocol_type: protocol_type.into(),
            protocols: vec![Protocol::new("range", subscription(topics))],
            require_known_member_id: false,
            supports_skip_assignment: false,
        };
        let fx = shard.groups.join_group(now_ms(), token, &req);
        broker.groups.apply(&mut shard, fx).expect("apply join");
        let fx = shard.groups.tick(now_ms() + 1);
        broker.groups.apply(&mut shard, fx).expect("apply tick");
        let Ok(GroupResponse::Join(join)) = rx.try_recv() else {
            panic!("no join response")
        };
        assert_eq!(join.error, None);
        let (token, mut rx) = broker.groups.park();
        let req = SyncGroupRequest {
            group_id: group.into(),
            member_id: join.member_id.clone(),
            group_instance_id: instance.map(str::to_owned),
            generation_id: join.generation_id,
            protocol_type: Some(protocol_type.into()),
            protocol_name: Some("range".into()),
            assignments: vec![(join.member_id.clone(), Vec::new())],
        };
        let fx = shard.groups.sync_group(now_ms(), token, &req);
        broker.groups.apply(&mut shard, fx).expect("apply sync");
        let Ok(GroupResponse::Sync(sync)) = rx.try_recv() else {
            panic!("no sync response")
        };
        assert_eq!(sync.error, None);
        assert_eq!(
            shard.groups.group_state(group),
            Some(sluice_coordinator::group::GroupState::Stable)
        );
        (join.member_id, join.generation_id)
    }

    fn member_commit(
        broker: &Arc<Broker>,
        v: i16,
        group: &str,
        generation: i32,
        member: &str,
        instance: Option<&str>,
    ) -> i16 {
        let mut req = request(group, generation, member, &[("t", 0, 7, Some("m"))]);
        if v >= 7 {
            req.group_instance_id = instance.map(|i| StrBytes::from_string(i.into()));
        }
        let resp = roundtrip(&handle(broker, req, &ctx(ApiKey::OffsetCommit, v)), v);
        resp.topics[0].partitions[0].error_code
    }

    #[test]
    fn member_commits_are_checked_against_the_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(
            dir.path(),
            &[
                ("offsets.topic.num.partitions", "2"),
                ("group.initial.rebalance.delay.ms", "0"),
            ],
        );
        broker.create_topic("t", 1, 1, &[], false).expect("create");
        for v in VERSIONS.0..=VERSIONS.1 {
            let group = format!("g{v}");
            let (member, generation) = stable_member(&broker, &group, None, &["t"]);
            assert_eq!(
                member_commit(&broker, v, &group, generation, &member, None),
                0
            );
            assert_eq!(
                member_commit(&broker, v, &group, generation + 1, &member, None),
                ResponseError::IllegalGeneration.code(),
                "v{v}"
            );
            assert_eq!(
                member_commit(&broker, v, &group, generation, "stranger", None),
                ResponseError::UnknownMemberId.code(),
                "v{v}"
            );
            // A simple consumer may not commit for a group with members.
            assert_eq!(
                member_commit(&broker, v, &group, -1, "", None),
                ResponseError::UnknownMemberId.code(),
                "v{v}"
            );
        }
        // Static members (v7+): another member id with the instance id is fenced.
        let (member, generation) = stable_member(&broker, "static", Some("i1"), &["t"]);
        assert_eq!(
            member_commit(&broker, 9, "static", generation, &member, Some("i1")),
            0
        );
        assert_eq!(
            member_commit(&broker, 9, "static", generation, "other", Some("i1")),
            ResponseError::FencedInstanceId.code()
        );
        broker.shutdown().expect("shutdown");
    }

    #[test]
    fn expiry_follows_kafkas_conditions() {
        use sluice_coordinator::group::{LeaveGroupRequest, LeavingMember};
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(
            dir.path(),
            &[
                ("offsets.topic.num.partitions", "1"),
                ("group.initial.rebalance.delay.ms", "0"),
                ("offsets.retention.minutes", "10"),
            ],
        );
        let retention = 10 * 60_000;
        broker.create_topic("t", 1, 1, &[], false).expect("create");
        broker.create_topic("u", 1, 1, &[], false).expect("create");
        let commit = |group: &str, generation: i32, member: &str, topic: &str| {
            let req = request(group, generation, member, &[(topic, 0, 1, None)]);
            let resp = handle(&broker, req, &ctx(ApiKey::OffsetCommit, 9));
            assert_eq!(resp.topics[0].partitions[0].error_code, 0);
        };
        // A simple group; a Stable consumer group subscribed to "t" with
        // offsets of "t" and "u"; one with a v2 retention time.
        let start = now_ms();
        commit("simple", -1, "", "t");
        let (member, generation) = stable_member(&broker, "consumer", None, &["t"]);
        commit("consumer", generation, &member, "t");
        commit("consumer", generation, &member, "u");
        let mut req = request("short", -1, "", &[("t", 0, 1, None)]);
        req.retention_time_ms = 1_000;
        handle(&broker, req, &ctx(ApiKey::OffsetCommit, 2));

        let shard = broker.groups.shard(&broker, "simple").expect("shard");
        let mut shard = lock(&shard);
        assert_eq!(shard.offsets.len(), 4);
        // Nothing is due before its time.
        assert_eq!(
            broker
                .groups
                .expire_shard(&mut shard, start)
                .expect("expire"),
            0
        );
        // The explicit retention time applies first.
        assert_eq!(
            broker
                .groups
                .expire_shard(&mut shard, now_ms() + 1_000)
                .expect("expire"),
            1
        );
        assert!(shard.offsets.offset("short", "t", 0).is_none());
        assert_eq!(
            shard.groups.group_state("short"),
            None,
            "empty group deleted"
        );
        // After the retention: the simple group's offset and the Stable
        // group's offset of a topic it does not subscribe to.
        let later = now_ms() + retention + 1;
        assert_eq!(
            broker
                .groups
                .expire_shard(&mut shard, later)
                .expect("expire"),
            2
        );
        assert!(shard.offsets.offset("simple", "t", 0).is_none());
        assert_eq!(shard.groups.group_state("simple"), None);
        assert!(shard.offsets.offset("consumer", "u", 0).is_none());
        assert!(shard.offsets.offset("consumer", "t", 0).is_some());
        // Once Empty, the rest expires `retention` after the group emptied.
        let (_, fx) = shard.groups.leave_group(
            now_ms(),
            &LeaveGroupRequest {
                group_id: "consumer".into(),
                members: vec![LeavingMember {
                    member_id: member.clone(),
                    group_instance_id: None,
                }],
            },
        );
        broker.groups.apply(&mut shard, fx).expect("apply leave");
        let emptied = now_ms();
        assert_eq!(
            shard.groups.group_state("consumer"),
            Some(sluice_coordinator::group::GroupState::Empty)
        );
        assert_eq!(
            broker
                .groups
                .expire_shard(&mut shard, emptied + retention - 1_000)
                .expect("expire"),
            0
        );
        assert_eq!(
            broker
                .groups
                .expire_shard(&mut shard, emptied + retention + 1_000)
                .expect("expire"),
            1
        );
        assert!(shard.offsets.is_empty());
        assert_eq!(shard.groups.group_state("consumer"), None);
        drop(shard);
        // The tombstones are in the log: a reopened broker has nothing.
        broker.shutdown().expect("shutdown");
        drop(broker);
        let broker = open_broker(dir.path(), &[("offsets.topic.num.partitions", "1")]);
        let shard = broker.groups.shard(&broker, "simple").expect("shard");
        assert!(lock(&shard).offsets.is_empty());
        drop(shard);
        broker.shutdown().expect("shutdown");
    }
}
