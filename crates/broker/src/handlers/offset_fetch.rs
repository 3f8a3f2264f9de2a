//! OffsetFetch (key 9): a group's committed offsets. As Kafka's group
//! coordinator (`OffsetMetadataManager.fetchOffsets` / `fetchAllOffsets`):
//!
//! - v8+ carries several groups, each answered on its own; v1-v7 one;
//! - `topics` null (v2+) asks for every committed offset of the group;
//!   requested partitions without a commit (also of unknown groups and
//!   unknown topics) answer offset -1, leader epoch -1, metadata "" and no
//!   error — Kafka reports no GROUP_ID_NOT_FOUND for classic groups;
//! - group-level errors: INVALID_GROUP_ID for an empty group id,
//!   COORDINATOR_LOAD_IN_PROGRESS while the coordinator partition is being
//!   replayed, coordinator errors when the partition is unavailable. v1 has
//!   no error field for the group, so (as Kafka) the error goes into every
//!   requested partition; v2-v7 put it at the top level, v8+ per group;
//! - `require_stable` (v7+, Kafka's `OffsetMetadataManager.fetchOffsets`):
//!   a partition with a pending transactional commit (TxnOffsetCommit
//!   whose marker is not written yet) answers UNSTABLE_OFFSET_COMMIT with
//!   offset -1, leader epoch -1 and metadata "" (the consumer retries);
//!   without it the last committed offset is answered;
//! - `member_id` / `member_epoch` (v9) only concern KIP-848 consumer
//!   groups; classic groups ignore them, as Kafka does.
//!
//! proto-kafka 0.22 decodes v1-v9 (Kafka 4 also dropped v0).

use std::sync::Arc;

use proto_kafka::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use proto_kafka::messages::{OffsetFetchRequest, OffsetFetchResponse, TopicName};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;
use sluice_coordinator::offsets::{FetchedTopic, TopicPartitions};

use super::Ctx;
use crate::broker::Broker;
use crate::groups::lock;

pub(crate) const VERSIONS: (i16, i16) = (1, 9);

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: OffsetFetchRequest,
    ctx: &Ctx,
) -> OffsetFetchResponse {
    let mut resp = OffsetFetchResponse::default();
    if ctx.version >= 8 {
        for g in req.groups {
            let topics = g.topics.map(|ts| {
                ts.into_iter()
                    .map(|t| TopicPartitions {
                        topic: t.name.0.to_string(),
                        partitions: t.partition_indexes,
                    })
                    .collect::<Vec<_>>()
            });
            let mut rg = OffsetFetchResponseGroup::default();
            match fetch(broker, &g.group_id.0, topics.as_deref(), req.require_stable) {
                Ok(fetched) => rg.topics = fetched.into_iter().map(topics_v8).collect(),
                Err(code) => rg.error_code = code,
            }
            rg.group_id = g.group_id;
            resp.groups.push(rg);
        }
        return resp;
    }
    let topics = req.topics.map(|ts| {
        ts.into_iter()
            .map(|t| TopicPartitions {
                topic: t.name.0.to_string(),
                partitions: t.partition_indexes,
            })
            .collect::<Vec<_>>()
    });
    let require_stable = ctx.version >= 7 && req.require_stable;
    match fetch(broker, &req.group_id.0, topics.as_deref(), require_stable) {
        Ok(fetched) => {
            resp.topics = fetched
                .into_iter()
                .map(|t| topic_v1(t, ctx.version, 0))
                .collect();
        }
        Err(code) if ctx.version < 2 => {
            // No group-level error before v2: every requested partition
            // carries it (Kafka's OffsetFetchRequest.getErrorResponse).
            resp.topics = topics
                .unwrap_or_default()
                .into_iter()
                .map(|t| {
                    let unknown = FetchedTopic {
                        topic: t.topic,
                        partitions: t
                            .partitions
                            .into_iter()
                            .map(|p| sluice_coordinator::offsets::FetchedPartition {
                                partition: p,
                                offset: -1,
                                leader_epoch: -1,
                                metadata: String::new(),
                                unstable: false,
                            })
                            .collect(),
                    };
                    topic_v1(unknown, ctx.version, code)
                })
                .collect();
        }
        Err(code) => resp.error_code = code,
    }
    resp
}

/// The group's offsets, or a group-level error code.
fn fetch(
    broker: &Broker,
    group: &str,
    topics: Option<&[TopicPartitions]>,
    require_stable: bool,
) -> Result<Vec<FetchedTopic>, i16> {
    if group.is_empty() {
        return Err(ResponseError::InvalidGroupId.code());
    }
    let shard = broker
        .groups
        .shard(broker, group)
        .map_err(|e| e.code.code())?;
    let shard = lock(&shard);
    if shard.groups.is_loading() {
        return Err(ResponseError::CoordinatorLoadInProgress.code());
    }
    Ok(shard.offsets.fetch_stable(group, topics, require_stable))
}

fn topic_v1(t: FetchedTopic, version: i16, error_code: i16) -> OffsetFetchResponseTopic {
    let mut rt = OffsetFetchResponseTopic::default();
    rt.name = TopicName(StrBytes::from_string(t.topic));
    rt.partitions = t
        .partitions
        .into_iter()
        .map(|p| {
            let mut rp = OffsetFetchResponsePartition::default();
            rp.partition_index = p.partition;
            rp.committed_offset = p.offset;
            if version >= 5 {
                rp.committed_leader_epoch = p.leader_epoch;
            }
            rp.metadata = Some(StrBytes::from_string(p.metadata));
            rp.error_code = if p.unstable {
                ResponseError::UnstableOffsetCommit.code()
            } else {
                error_code
            };
            rp
        })
        .collect();
    rt
}

fn topics_v8(t: FetchedTopic) -> OffsetFetchResponseTopics {
    let mut rt = OffsetFetchResponseTopics::default();
    rt.name = TopicName(StrBytes::from_string(t.topic));
    rt.partitions = t
        .partitions
        .into_iter()
        .map(|p| {
            let mut rp = OffsetFetchResponsePartitions::default();
            rp.partition_index = p.partition;
            rp.committed_offset = p.offset;
            rp.committed_leader_epoch = p.leader_epoch;
            rp.metadata = Some(StrBytes::from_string(p.metadata));
            if p.unstable {
                rp.error_code = ResponseError::UnstableOffsetCommit.code();
            }
            rp
        })
        .collect();
    rt
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
    };
    use proto_kafka::messages::{ApiKey, GroupId};

    use super::super::offset_commit;
    use super::super::test_support::{ctx, open_broker, roundtrip};
    use super::*;

    type Wanted<'a> = Option<&'a [(&'a str, &'a [i32])]>;

    /// (topic, partition, offset, leader epoch, metadata, error)
    type Row = (String, i32, i64, i32, Option<String>, i16);

    fn request(version: i16, groups: &[(&str, Wanted<'_>)]) -> OffsetFetchRequest {
        let mut req = OffsetFetchRequest::default();
        if version >= 8 {
            for (g, topics) in groups {
                let mut rg = OffsetFetchRequestGroup::default();
                rg.group_id = GroupId(StrBytes::from_string((*g).into()));
                if version >= 9 {
                    rg.member_epoch = -1;
                }
                rg.topics = topics.map(|ts| {
                    ts.iter()
                        .map(|(t, ps)| {
                            let mut rt = OffsetFetchRequestTopics::default();
                            rt.name = TopicName(StrBytes::from_string((*t).into()));
                            rt.partition_indexes = ps.to_vec();
                            rt
                        })
                        .collect()
                });
                req.groups.push(rg);
            }
        } else {
            let (g, topics) = groups[0];
            req.group_id = GroupId(StrBytes::from_string(g.into()));
            req.topics = Some(
                topics
                    .unwrap_or_default()
                    .iter()
                    .map(|(t, ps)| {
                        let mut rt = OffsetFetchRequestTopic::default();
                        rt.name = TopicName(StrBytes::from_string((*t).into()));
                        rt.partition_indexes = ps.to_vec();
                        rt
                    })
                    .collect(),
            );
            if topics.is_none() {
                req.topics = None;
            }
            req.require_stable = version >= 7;
        }
        req
    }

    /// Rows of each group (one group below v8) and its error code.
    fn rows(resp: &OffsetFetchResponse, version: i16) -> Vec<(Vec<Row>, i16)> {
        if version >= 8 {
            return resp
                .groups
                .iter()
                .map(|g| {
                    let rows = g
                        .topics
                        .iter()
                        .flat_map(|t| {
                            t.partitions.iter().map(|p| {
                                (
                                    t.name.0.to_string(),
                                    p.partition_index,
                                    p.committed_offset,
                                    p.committed_leader_epoch,
                                    p.metadata.as_ref().map(|m| m.to_string()),
                                    p.error_code,
                                )
                            })
                        })
                        .collect();
                    (rows, g.error_code)
                })
                .collect();
        }
        let rows = resp
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| {
                    (
                        t.name.0.to_string(),
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.metadata.as_ref().map(|m| m.to_string()),
                        p.error_code,
                    )
                })
            })
            .collect();
        vec![(rows, resp.error_code)]
    }

    fn row(t: &str, p: i32, offset: i64, epoch: i32, meta: &str) -> Row {
        (t.into(), p, offset, epoch, Some(meta.into()), 0)
    }

    #[test]
    fn fetches_specific_and_all_offsets_in_every_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[("offsets.topic.num.partitions", "4")]);
        broker.create_topic("a", 2, 1, &[], false).expect("create");
        broker.create_topic("b", 1, 1, &[], false).expect("create");
        let mut commit = offset_commit::tests::request(
            "g",
            -1,
            "",
            &[
                ("a", 0, 5, Some("m-a0")),
                ("a", 1, 7, None),
                ("b", 0, 9, Some("ünïcödé")),
            ],
        );
        commit.topics[0].partitions[0].committed_leader_epoch = 3;
        let resp = offset_commit::respond(&broker, commit, &ctx(ApiKey::OffsetCommit, 9)).0;
        assert!(resp
            .topics
            .iter()
            .all(|t| t.partitions.iter().all(|p| p.error_code == 0)));
        for v in VERSIONS.0..=VERSIONS.1 {
            let epoch = if v >= 5 { 3 } else { -1 };
            let none = -1;
            // Specific partitions, with ones that have no commit.
            let wanted: &[(&str, &[i32])] = &[("a", &[1, 0, 4]), ("zz", &[0])];
            let req = request(v, &[("g", Some(wanted))]);
            let resp = roundtrip(&handle(&broker, req, &ctx(ApiKey::OffsetFetch, v)), v);
            assert_eq!(
                rows(&resp, v),
                vec![(
                    vec![
                        row("a", 1, 7, none, ""),
                        row("a", 0, 5, epoch, "m-a0"),
                        row("a", 4, -1, none, ""),
                        row("zz", 0, -1, none, ""),
                    ],
                    0
                )],
                "v{v}"
            );
            if v >= 2 {
                // All offsets of the group.
                let resp = roundtrip(
                    &handle(
                        &broker,
                        request(v, &[("g", None)]),
                        &ctx(ApiKey::OffsetFetch, v),
                    ),
                    v,
                );
                assert_eq!(
                    rows(&resp, v),
                    vec![(
                        vec![
                            row("a", 0, 5, epoch, "m-a0"),
                            row("a", 1, 7, none, ""),
                            row("b", 0, 9, none, "ünïcödé"),
                        ],
                        0
                    )],
                    "v{v}"
                );
                // An unknown group has no offsets and no error.
                let resp = roundtrip(
                    &handle(
                        &broker,
                        request(v, &[("other", None)]),
                        &ctx(ApiKey::OffsetFetch, v),
                    ),
                    v,
                );
                assert_eq!(rows(&resp, v), vec![(vec![], 0)], "v{v}");
            }
            // Empty group id.
            let wanted: &[(&str, &[i32])] = &[("a", &[0])];
            let resp = roundtrip(
                &handle(
                    &broker,
                    request(v, &[("", Some(wanted))]),
                    &ctx(ApiKey::OffsetFetch, v),
                ),
                v,
            );
            let invalid = ResponseError::InvalidGroupId.code();
            let expected = if v < 2 {
                vec![(
                    vec![("a".into(), 0, -1, -1, Some(String::new()), invalid)],
                    0,
                )]
            } else {
                vec![(vec![], invalid)]
            };
            assert_eq!(rows(&resp, v), expected, "v{v}");
        }
        broker.shutdown().expect("shutdown");
    }

    #[test]
    fn several_groups_per_request() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[("offsets.topic.num.partitions", "5")]);
        broker.create_topic("t", 1, 1, &[], false).expect("create");
        for (g, o) in [("g1", 11), ("g2", 22)] {
            let req = offset_commit::tests::request(g, -1, "", &[("t", 0, o, Some(g))]);
            offset_commit::respond(&broker, req, &ctx(ApiKey::OffsetCommit, 8));
        }
        for v in 8..=VERSIONS.1 {
            let wanted: &[(&str, &[i32])] = &[("t", &[0])];
            let req = request(
                v,
                &[
                    ("g1", None),
                    ("g2", Some(wanted)),
                    ("g3", Some(wanted)),
                    ("", None),
                ],
            );
            let resp = roundtrip(&handle(&broker, req, &ctx(ApiKey::OffsetFetch, v)), v);
            let ids: Vec<String> = resp
                .groups
                .iter()
                .map(|g| g.group_id.0.to_string())
                .collect();
            assert_eq!(ids, vec!["g1", "g2", "g3", ""]);
            assert_eq!(
                rows(&resp, v),
                vec![
                    (vec![row("t", 0, 11, -1, "g1")], 0),
                    (vec![row("t", 0, 22, -1, "g2")], 0),
                    (vec![row("t", 0, -1, -1, "")], 0),
                    (vec![], ResponseError::InvalidGroupId.code()),
                ]
            );
        }
        broker.shutdown().expect("shutdown");
    }
}
