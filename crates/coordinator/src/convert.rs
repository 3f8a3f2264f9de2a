//! Between the group state machine's records and the `__consumer_offsets`
//! record schemas (the two halves meet here, not in the broker).

use crate::error::CoordinatorError;
use crate::group::{GroupMetadataSnapshot, GroupRecord, MemberSnapshot};
use crate::offsets::{GroupMetadataValue, MemberMetadata, Record};

impl GroupRecord {
    /// The `__consumer_offsets` record for this change.
    pub fn to_record(&self) -> Result<Record, CoordinatorError> {
        match self {
            GroupRecord::Metadata(s) => Record::group_metadata(&s.group_id, &value_of(s)),
            GroupRecord::Tombstone { group_id } => Record::group_metadata_tombstone(group_id),
        }
    }

    /// The group record a replayed `GroupMetadataKey` record stands for.
    pub fn from_replayed(group: String, value: Option<GroupMetadataValue>) -> Self {
        match value {
            None => GroupRecord::Tombstone { group_id: group },
            Some(v) => GroupRecord::Metadata(GroupMetadataSnapshot {
                group_id: group,
                protocol_type: v.protocol_type,
                generation: v.generation,
                protocol: v.protocol,
                leader: v.leader,
                current_state_timestamp: v.current_state_timestamp,
                members: v
                    .members
                    .into_iter()
                    .map(|m| MemberSnapshot {
                        member_id: m.member_id,
                        group_instance_id: m.group_instance_id,
                        client_id: m.client_id,
                        client_host: m.client_host,
                        rebalance_timeout: m.rebalance_timeout,
                        session_timeout: m.session_timeout,
                        subscription: m.subscription,
                        assignment: m.assignment,
                    })
                    .collect(),
            }),
        }
    }
}

fn value_of(s: &GroupMetadataSnapshot) -> GroupMetadataValue {
    GroupMetadataValue {
        protocol_type: s.protocol_type.clone(),
        generation: s.generation,
        protocol: s.protocol.clone(),
        leader: s.leader.clone(),
        current_state_timestamp: s.current_state_timestamp,
        members: s
            .members
            .iter()
            .map(|m| MemberMetadata {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                rebalance_timeout: m.rebalance_timeout,
                session_timeout: m.session_timeout,
                subscription: m.subscription.clone(),
                assignment: m.assignment.clone(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offsets::{OffsetConfig, OffsetStore, Replayed};

    #[test]
    fn group_records_roundtrip_through_the_offsets_schema() {
        let snap = GroupMetadataSnapshot {
            group_id: "g".into(),
            protocol_type: "consumer".into(),
            generation: 3,
            protocol: Some("range".into()),
            leader: Some("m1".into()),
            current_state_timestamp: 42,
            members: vec![MemberSnapshot {
                member_id: "m1".into(),
                group_instance_id: Some("i1".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout: 300_000,
                session_timeout: 45_000,
                subscription: vec![1, 2],
                assignment: vec![3],
            }],
        };
        for rec in [
            GroupRecord::Metadata(snap.clone()),
            GroupRecord::Tombstone {
                group_id: "g".into(),
            },
        ] {
            let r = rec.to_record().expect("encode");
            let mut store = OffsetStore::new(OffsetConfig::default());
            match store.replay(&r.key, r.value.as_deref()).expect("replay") {
                Replayed::GroupMetadata { group, value } => {
                    assert_eq!(GroupRecord::from_replayed(group, value), rec);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}
