//! Consumer-group operations of [`Admin`]: find a group's coordinator,
//! list, describe and delete groups. (A group's committed offsets are in
//! [`super::group_offsets`].)
//!
//! Group requests go to the group's coordinator, looked up with
//! FindCoordinator before each request. When the coordinator answers
//! `COORDINATOR_LOAD_IN_PROGRESS`, `COORDINATOR_NOT_AVAILABLE` or
//! `NOT_COORDINATOR` (all retriable), the coordinator is looked up again
//! and the request retried with backoff, within the client's retry budget.

use std::collections::BTreeMap;

use bytes::Buf;
use proto_kafka::error::ResponseError;
use proto_kafka::messages::describe_groups_response::DescribedGroup;
use proto_kafka::messages::{
    ConsumerProtocolAssignment, DeleteGroupsRequest, DescribeGroupsRequest, FindCoordinatorRequest,
    GroupId, ListGroupsRequest,
};
use proto_kafka::protocol::{Decodable, Request};

use super::{check, msg, s, Admin};
use crate::accumulator::TopicPartition;
use crate::cluster::BrokerInfo;
use crate::error::{ClientError, Result};

pub use super::group_offsets::OffsetAndMetadata;

const FIND_COORDINATOR_MAX: i16 = 6;
const LIST_GROUPS_MAX: i16 = 5;
const DESCRIBE_GROUPS_MAX: i16 = 6;
const DELETE_GROUPS_MAX: i16 = 2;
/// FindCoordinator key type of consumer groups.
const KEY_TYPE_GROUP: i8 = 0;
/// FindCoordinator key type of transactional ids.
const KEY_TYPE_TRANSACTION: i8 = 1;
/// Highest `ConsumerProtocolAssignment` version proto-kafka decodes; newer
/// versions only append fields, so they are read with this layout.
const ASSIGNMENT_MAX: i16 = 3;

/// A group as listed by [`Admin::list_groups`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// Group id.
    pub group_id: String,
    /// Protocol type: `consumer` for consumer groups, `""` for groups that
    /// only hold committed offsets.
    pub protocol_type: String,
    /// Group state (`Empty`, `Stable`, ...), when the broker reports it
    /// (ListGroups v4+).
    pub state: Option<String>,
}

/// A group member as described by [`Admin::describe_groups`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    /// Member id given by the coordinator.
    pub member_id: String,
    /// `group.instance.id` of a static member (DescribeGroups v4+).
    pub group_instance_id: Option<String>,
    /// The member's `client.id`.
    pub client_id: String,
    /// The member's host as the broker saw it (e.g. `/127.0.0.1`).
    pub client_host: String,
    /// Partitions assigned to the member, decoded with the consumer
    /// protocol for `consumer` groups; empty otherwise, while the group is
    /// not Stable, or when the assignment cannot be decoded.
    pub assignment: Vec<TopicPartition>,
}

/// A group as described by [`Admin::describe_groups`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    /// Group id.
    pub group_id: String,
    /// Group state: `Empty`, `PreparingRebalance`, `CompletingRebalance`,
    /// `Stable` or `Dead` (unknown groups, before DescribeGroups v6).
    pub state: String,
    /// Protocol type (`consumer`, or `""` for offset-only groups).
    pub protocol_type: String,
    /// The chosen protocol: the partition assignor name for consumer groups.
    pub protocol: String,
    /// Current members.
    pub members: Vec<MemberDescription>,
    /// Kafka error code for this group (0 when none), e.g.
    /// `GROUP_ID_NOT_FOUND` (69) from DescribeGroups v6 for unknown groups.
    pub error_code: i16,
    /// The broker's error message, if any.
    pub error_message: Option<String>,
}

impl GroupDescription {
    /// This group's error as [`ClientError::Kafka`], if any.
    pub fn error(&self) -> Option<ClientError> {
        ClientError::from_code(
            self.error_code,
            self.error_message.clone(),
            format!("describe group {}", self.group_id),
        )
    }
}

/// Whether `code` says the group coordinator is loading, unavailable or
/// elsewhere: look it up again and retry.
pub(super) fn is_coordinator_error(code: i16) -> bool {
    code == ResponseError::CoordinatorLoadInProgress.code()
        || code == ResponseError::CoordinatorNotAvailable.code()
        || code == ResponseError::NotCoordinator.code()
}

/// Decodes a member's assignment with the consumer protocol (i16 version,
/// then `ConsumerProtocolAssignment`); empty when there is none or it does
/// not decode.
fn decode_assignment(bytes: &bytes::Bytes) -> Vec<TopicPartition> {
    let mut buf = bytes.clone();
    if buf.remaining() < 2 {
        return Vec::new();
    }
    let version = buf.get_i16();
    if version < 0 {
        return Vec::new();
    }
    let Ok(a) = ConsumerProtocolAssignment::decode(&mut buf, version.min(ASSIGNMENT_MAX)) else {
        return Vec::new();
    };
    let mut out: Vec<TopicPartition> = a
        .assigned_partitions
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| TopicPartition::new(t.topic.0.as_str(), *p))
        })
        .collect();
    out.sort();
    out
}

fn describe(g: DescribedGroup, version: i16) -> GroupDescription {
    let consumer = g.protocol_type.as_str() == "consumer";
    GroupDescription {
        group_id: g.group_id.0.as_str().to_string(),
        state: g.group_state.as_str().to_string(),
        protocol_type: g.protocol_type.as_str().to_string(),
        protocol: g.protocol_data.as_str().to_string(),
        members: g
            .members
            .iter()
            .map(|m| MemberDescription {
                member_id: m.member_id.as_str().to_string(),
                group_instance_id: if version >= 4 {
                    msg(&m.group_instance_id)
                } else {
                    None
                },
                client_id: m.client_id.as_str().to_string(),
                client_host: m.client_host.as_str().to_string(),
                assignment: if consumer {
                    decode_assignment(&m.member_assignment)
                } else {
                    Vec::new()
                },
            })
            .collect(),
        error_code: g.error_code,
        error_message: if version >= 6 {
            msg(&g.error_message)
        } else {
            None
        },
    }
}

impl Admin {
    /// The coordinator of consumer group `group` (FindCoordinator, key type
    /// 0; batched `coordinator_keys` from v4, `key` before). Retries while
    /// the coordinator is not available.
    pub async fn find_coordinator(&self, group: &str) -> Result<BrokerInfo> {
        self.cluster
            .with_retries("find coordinator", || self.lookup_coordinator(group))
            .await
    }

    /// The transaction coordinator of `transactional_id` (FindCoordinator,
    /// key type 1; needs FindCoordinator v1+). Retries while the
    /// coordinator is not available.
    pub async fn find_transaction_coordinator(&self, transactional_id: &str) -> Result<BrokerInfo> {
        self.cluster
            .with_retries("find transaction coordinator", || {
                self.lookup(KEY_TYPE_TRANSACTION, transactional_id)
            })
            .await
    }

    /// One FindCoordinator round trip for a group, no retries.
    async fn lookup_coordinator(&self, group: &str) -> Result<BrokerInfo> {
        self.lookup(KEY_TYPE_GROUP, group).await
    }

    /// One FindCoordinator round trip, no retries.
    async fn lookup(&self, key_type: i8, key: &str) -> Result<BrokerInfo> {
        let (resp, version) = self
            .send_once(None, FIND_COORDINATOR_MAX, |v| {
                if v == 0 && key_type != KEY_TYPE_GROUP {
                    return Err(ClientError::UnsupportedVersion {
                        api: "FindCoordinator v1+ (key type TRANSACTION)".into(),
                        addr: String::new(),
                    });
                }
                let mut req = FindCoordinatorRequest::default();
                if v >= 1 {
                    req.key_type = key_type;
                }
                if v >= 4 {
                    req.coordinator_keys = vec![s(key)];
                } else {
                    req.key = s(key);
                }
                Ok(req)
            })
            .await?;
        let context = if key_type == KEY_TYPE_GROUP {
            format!("find coordinator of group {key}")
        } else {
            format!("find coordinator of transactional id {key}")
        };
        if version >= 4 {
            let c = resp
                .coordinators
                .iter()
                .find(|c| c.key.as_str() == key)
                .ok_or_else(|| ClientError::Protocol(format!("{context}: no answer")))?;
            check(c.error_code, msg(&c.error_message), context)?;
            Ok(BrokerInfo {
                id: c.node_id.0,
                host: c.host.as_str().to_string(),
                port: c.port,
                rack: None,
            })
        } else {
            check(resp.error_code, msg(&resp.error_message), context)?;
            Ok(BrokerInfo {
                id: resp.node_id.0,
                host: resp.host.as_str().to_string(),
                port: resp.port,
                rack: None,
            })
        }
    }

    /// Sends a request built by `build` (for the negotiated version) to the
    /// coordinator of `group`. `group_error` extracts the group-level error
    /// code of a response; coordinator errors (loading, not available, not
    /// coordinator) are retried after looking the coordinator up again.
    pub(super) async fn coordinator_request<R, B, E>(
        &self,
        group: &str,
        what: &str,
        our_max: i16,
        build: B,
        group_error: E,
    ) -> Result<(R::Response, i16)>
    where
        R: Request,
        B: Fn(i16) -> Result<R>,
        E: Fn(&R::Response, i16) -> i16,
    {
        let (build, group_error) = (&build, &group_error);
        self.cluster
            .with_retries(what, || async move {
                let coordinator = self.lookup_coordinator(group).await?;
                let (resp, v) = self.send_once(Some(coordinator.id), our_max, build).await?;
                let code = group_error(&resp, v);
                if is_coordinator_error(code) {
                    check(
                        code,
                        None,
                        format!("{what} (coordinator {})", coordinator.id),
                    )?;
                }
                Ok((resp, v))
            })
            .await
    }

    /// Every group of the cluster (ListGroups sent to every broker, results
    /// merged), sorted by group id. Fails if a broker answers with an error
    /// (coordinator errors are retried first).
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>> {
        let (md, _) = self.cluster.refresh(Some(&[])).await?;
        let mut out: BTreeMap<String, GroupListing> = BTreeMap::new();
        for id in md.brokers.keys().copied() {
            let (resp, version) = self
                .cluster
                .with_retries("list groups", || async move {
                    let (resp, v) = self
                        .send_once(Some(id), LIST_GROUPS_MAX, |_| {
                            Ok(ListGroupsRequest::default())
                        })
                        .await?;
                    check(resp.error_code, None, format!("list groups on broker {id}"))?;
                    Ok((resp, v))
                })
                .await?;
            for g in resp.groups {
                let group_id = g.group_id.0.as_str().to_string();
                out.insert(
                    group_id.clone(),
                    GroupListing {
                        group_id,
                        protocol_type: g.protocol_type.as_str().to_string(),
                        state: (version >= 4).then(|| g.group_state.as_str().to_string()),
                    },
                );
            }
        }
        Ok(out.into_values().collect())
    }

    /// Describes groups (DescribeGroups to each group's coordinator), in
    /// request order: state, protocol type, assignor and members with their
    /// decoded assignments. A group-level error is reported in
    /// [`GroupDescription::error_code`]; the call fails only when a
    /// coordinator cannot be reached.
    pub async fn describe_groups(&self, groups: &[&str]) -> Result<Vec<GroupDescription>> {
        let mut out = Vec::with_capacity(groups.len());
        for group in groups {
            let (resp, version) = self
                .coordinator_request(
                    group,
                    "describe group",
                    DESCRIBE_GROUPS_MAX,
                    |_| {
                        let mut req = DescribeGroupsRequest::default();
                        req.groups = vec![GroupId(s(group))];
                        Ok(req)
                    },
                    |resp, _| resp.groups.first().map_or(0, |g| g.error_code),
                )
                .await?;
            let g = resp
                .groups
                .into_iter()
                .find(|g| g.group_id.0.as_str() == *group)
                .ok_or_else(|| {
                    ClientError::Protocol(format!("no DescribeGroups result for {group}"))
                })?;
            out.push(describe(g, version));
        }
        Ok(out)
    }

    /// Deletes groups and their committed offsets (DeleteGroups to each
    /// group's coordinator); returns each group's outcome in request order:
    /// `NON_EMPTY_GROUP` while it has members, `GROUP_ID_NOT_FOUND` when it
    /// does not exist.
    pub async fn delete_groups(&self, groups: &[&str]) -> Result<Vec<(String, Result<()>)>> {
        let mut out = Vec::with_capacity(groups.len());
        for group in groups {
            let result_code = |resp: &proto_kafka::messages::DeleteGroupsResponse| {
                resp.results
                    .iter()
                    .find(|r| r.group_id.0.as_str() == *group)
                    .map(|r| r.error_code)
            };
            let (resp, _) = self
                .coordinator_request(
                    group,
                    "delete group",
                    DELETE_GROUPS_MAX,
                    |_| {
                        let mut req = DeleteGroupsRequest::default();
                        req.groups_names = vec![GroupId(s(group))];
                        Ok(req)
                    },
                    |resp, _| result_code(resp).unwrap_or(0),
                )
                .await?;
            let r = match result_code(&resp) {
                Some(code) => check(code, None, format!("delete group {group}")),
                None => Err(ClientError::Protocol(format!(
                    "no DeleteGroups result for {group}"
                ))),
            };
            out.push((group.to_string(), r));
        }
        Ok(out)
    }
}
