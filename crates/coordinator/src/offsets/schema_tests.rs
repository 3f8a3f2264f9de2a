//! Tests of the `__consumer_offsets` codecs: byte vectors derived by hand
//! from Kafka's JSON schemas, every-version round trips, and garbage input.

use super::*;
use proptest::prelude::*;

fn be64(v: i64) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

#[test]
fn offset_commit_key_vector() {
    let key = OffsetCommitKey {
        group: "g1".into(),
        topic: "t".into(),
        partition: 5,
    };
    // int16 type 1, string "g1", string "t", int32 5
    let expected = vec![0, 1, 0, 2, b'g', b'1', 0, 1, b't', 0, 0, 0, 5];
    assert_eq!(key.encode().ok(), Some(expected.clone()));
    assert_eq!(
        RecordKey::decode(&expected).ok(),
        Some(RecordKey::OffsetCommit(key.clone()))
    );
    // key type 0 (pre-0.10) has the same fields
    let mut v0 = expected;
    v0[1] = 0;
    assert_eq!(
        RecordKey::decode(&v0).ok(),
        Some(RecordKey::OffsetCommit(key))
    );
}

#[test]
fn group_metadata_key_vector() {
    let key = GroupMetadataKey {
        group: "grp".into(),
    };
    let expected = vec![0, 2, 0, 3, b'g', b'r', b'p'];
    assert_eq!(key.encode().ok(), Some(expected.clone()));
    assert_eq!(
        RecordKey::decode(&expected).ok(),
        Some(RecordKey::GroupMetadata(key))
    );
}

#[test]
fn other_record_types_are_reported_not_rejected() {
    // type 3 = ConsumerGroupMetadataKey (KIP-848); payload not parsed
    assert_eq!(
        RecordKey::decode(&[0, 3, 0, 1, b'g']).ok(),
        Some(RecordKey::Other(3))
    );
    assert!(RecordKey::decode(&[0xff, 0xff]).is_err());
    assert!(RecordKey::decode(&[0]).is_err());
}

fn sample_offset_value() -> OffsetCommitValue {
    OffsetCommitValue {
        offset: 42,
        leader_epoch: 7,
        metadata: "m".into(),
        commit_timestamp: 1000,
        expire_timestamp: -1,
    }
}

#[test]
fn offset_commit_value_v3_vector() {
    let v = sample_offset_value();
    let mut expected = vec![0, 3];
    expected.extend(be64(42));
    expected.extend([0, 0, 0, 7]);
    expected.extend([0, 1, b'm']);
    expected.extend(be64(1000));
    assert_eq!(v.version_to_write(), 3);
    assert_eq!(v.encode().ok(), Some(expected.clone()));
    assert_eq!(OffsetCommitValue::decode(&expected).ok(), Some(v));
}

#[test]
fn offset_commit_value_v1_vector_when_expire_timestamp_is_set() {
    let v = OffsetCommitValue {
        expire_timestamp: 2000,
        ..sample_offset_value()
    };
    let mut expected = vec![0, 1];
    expected.extend(be64(42));
    expected.extend([0, 1, b'm']);
    expected.extend(be64(1000));
    expected.extend(be64(2000));
    assert_eq!(v.encode().ok(), Some(expected.clone()));
    // v1 has no leader epoch: decodes as -1
    let back = OffsetCommitValue::decode(&expected).ok();
    assert_eq!(
        back.map(|b| (b.leader_epoch, b.expire_timestamp)),
        Some((-1, 2000))
    );
}

#[test]
fn offset_commit_value_v4_flexible_vector() {
    let v = sample_offset_value();
    let mut expected = vec![0, 4];
    expected.extend(be64(42));
    expected.extend([0, 0, 0, 7]);
    expected.extend([2, b'm']); // compact string: len + 1
    expected.extend(be64(1000));
    expected.push(0); // no tagged fields
    assert_eq!(v.encode_version(4).ok(), Some(expected.clone()));
    assert_eq!(OffsetCommitValue::decode(&expected).ok(), Some(v.clone()));

    // unknown tagged fields are skipped: 1 field, tag 0, 3 bytes
    let mut tagged = expected;
    tagged.pop();
    tagged.extend([1, 0, 3, 9, 9, 9]);
    assert_eq!(OffsetCommitValue::decode(&tagged).ok(), Some(v));
}

#[test]
fn offset_commit_value_v0_vector() {
    let mut bytes = vec![0, 0];
    bytes.extend(be64(5));
    bytes.extend([0, 0]); // empty metadata
    bytes.extend(be64(77));
    let v = OffsetCommitValue::decode(&bytes).ok();
    assert_eq!(
        v,
        Some(OffsetCommitValue {
            offset: 5,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp: 77,
            expire_timestamp: -1,
        })
    );
}

#[test]
fn unknown_value_versions_are_errors() {
    let mut bytes = vec![0, 5];
    bytes.extend([0u8; 32]);
    assert!(matches!(
        OffsetCommitValue::decode(&bytes),
        Err(CoordinatorError::UnsupportedRecordVersion { version: 5, .. })
    ));
    assert!(GroupMetadataValue::decode(&bytes).is_err());
    assert!(sample_offset_value().encode_version(-1).is_err());
}

fn sample_group() -> GroupMetadataValue {
    GroupMetadataValue {
        protocol_type: "consumer".into(),
        generation: 1,
        protocol: Some("range".into()),
        leader: Some("m1".into()),
        current_state_timestamp: 1000,
        members: vec![MemberMetadata {
            member_id: "m1".into(),
            group_instance_id: None,
            client_id: "c".into(),
            client_host: "/h".into(),
            rebalance_timeout: 300_000,
            session_timeout: 10_000,
            subscription: vec![1, 2],
            assignment: vec![3],
        }],
    }
}

fn push_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as i16).to_be_bytes());
    out.extend(s.as_bytes());
}

#[test]
fn group_metadata_value_v3_vector() {
    let g = sample_group();
    let mut e = vec![0, 3];
    push_str(&mut e, "consumer");
    e.extend([0, 0, 0, 1]);
    push_str(&mut e, "range");
    push_str(&mut e, "m1");
    e.extend(be64(1000));
    e.extend([0, 0, 0, 1]); // one member
    push_str(&mut e, "m1");
    e.extend([0xff, 0xff]); // group instance id: null
    push_str(&mut e, "c");
    push_str(&mut e, "/h");
    e.extend([0x00, 0x04, 0x93, 0xe0]); // 300000
    e.extend([0x00, 0x00, 0x27, 0x10]); // 10000
    e.extend([0, 0, 0, 2, 1, 2]);
    e.extend([0, 0, 0, 1, 3]);
    assert_eq!(g.encode().ok(), Some(e.clone()));
    assert_eq!(GroupMetadataValue::decode(&e).ok(), Some(g));
}

#[test]
fn empty_group_metadata_vector() {
    // What Kafka writes for a group that became Empty: protocol type "",
    // generation 0, null protocol and leader, no members.
    let g = GroupMetadataValue {
        current_state_timestamp: 5,
        ..GroupMetadataValue::default()
    };
    let mut e = vec![0, 3, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff];
    e.extend(be64(5));
    e.extend([0, 0, 0, 0]);
    assert_eq!(g.encode().ok(), Some(e.clone()));
    assert_eq!(GroupMetadataValue::decode(&e).ok(), Some(g));
}

#[test]
fn group_metadata_value_v4_flexible_vector() {
    let g = sample_group();
    let mut e = vec![0, 4, 9];
    e.extend(b"consumer");
    e.extend([0, 0, 0, 1, 6]);
    e.extend(b"range");
    e.extend([3, b'm', b'1']);
    e.extend(be64(1000));
    e.push(2); // compact array of one
    e.extend([3, b'm', b'1', 0, 2, b'c', 3, b'/', b'h']);
    e.extend([0x00, 0x04, 0x93, 0xe0, 0x00, 0x00, 0x27, 0x10]);
    e.extend([3, 1, 2, 2, 3]);
    e.push(0); // member tagged fields
    e.push(0); // top-level tagged fields
    assert_eq!(g.encode_version(4).ok(), Some(e.clone()));
    assert_eq!(GroupMetadataValue::decode(&e).ok(), Some(g));
}

#[test]
fn records_and_tombstones() {
    let key = OffsetCommitKey {
        group: "g".into(),
        topic: "t".into(),
        partition: 0,
    };
    let r = Record::offset_commit(&key, &sample_offset_value()).ok();
    assert_eq!(r.as_ref().map(Record::is_tombstone), Some(false));
    let t = Record::offset_commit_tombstone(&key).ok();
    assert_eq!(t.as_ref().map(Record::is_tombstone), Some(true));
    assert_eq!(r.map(|r| r.key), t.map(|t| t.key));
    let g = Record::group_metadata_tombstone("g").ok();
    assert_eq!(g.map(|g| g.key), Some(vec![0, 2, 0, 1, b'g']));
}

// ---- property tests ----

fn any_offset_value() -> impl Strategy<Value = OffsetCommitValue> {
    (
        any::<i64>(),
        any::<i32>(),
        ".{0,40}",
        any::<i64>(),
        any::<i64>(),
    )
        .prop_map(
            |(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)| {
                OffsetCommitValue {
                    offset,
                    leader_epoch,
                    metadata,
                    commit_timestamp,
                    expire_timestamp,
                }
            },
        )
}

fn any_member() -> impl Strategy<Value = MemberMetadata> {
    (
        ".{0,12}",
        proptest::option::of(".{0,12}"),
        ".{0,12}",
        ".{0,12}",
        any::<i32>(),
        any::<i32>(),
        proptest::collection::vec(any::<u8>(), 0..24),
        proptest::collection::vec(any::<u8>(), 0..24),
    )
        .prop_map(
            |(member_id, group_instance_id, client_id, client_host, rt, st, sub, asg)| {
                MemberMetadata {
                    member_id,
                    group_instance_id,
                    client_id,
                    client_host,
                    rebalance_timeout: rt,
                    session_timeout: st,
                    subscription: sub,
                    assignment: asg,
                }
            },
        )
}

fn any_group() -> impl Strategy<Value = GroupMetadataValue> {
    (
        ".{0,12}",
        any::<i32>(),
        proptest::option::of(".{0,12}"),
        proptest::option::of(".{0,12}"),
        any::<i64>(),
        proptest::collection::vec(any_member(), 0..4),
    )
        .prop_map(
            |(protocol_type, generation, protocol, leader, ts, members)| GroupMetadataValue {
                protocol_type,
                generation,
                protocol,
                leader,
                current_state_timestamp: ts,
                members,
            },
        )
}

/// What a value looks like after a trip through `version`.
fn offset_at_version(mut v: OffsetCommitValue, version: i16) -> OffsetCommitValue {
    if version < 3 {
        v.leader_epoch = -1;
    }
    if version != 1 {
        v.expire_timestamp = -1;
    }
    v
}

fn group_at_version(mut g: GroupMetadataValue, version: i16) -> GroupMetadataValue {
    if version < 2 {
        g.current_state_timestamp = -1;
    }
    for m in &mut g.members {
        if version < 3 {
            m.group_instance_id = None;
        }
        if version < 1 {
            m.rebalance_timeout = 0;
        }
    }
    g
}

proptest! {
    #[test]
    fn offset_value_roundtrips_every_version(v in any_offset_value(), version in 0i16..=4) {
        let bytes = v.encode_version(version);
        prop_assert!(bytes.is_ok());
        let back = OffsetCommitValue::decode(&bytes.unwrap_or_default());
        prop_assert_eq!(back.ok(), Some(offset_at_version(v, version)));
    }

    #[test]
    fn offset_value_default_encoding_is_lossless(v in any_offset_value()) {
        let back = v.encode().and_then(|b| OffsetCommitValue::decode(&b));
        let expected = if v.expire_timestamp == -1 { v.clone() } else { offset_at_version(v.clone(), 1) };
        prop_assert_eq!(back.ok(), Some(expected));
    }

    #[test]
    fn group_value_roundtrips_every_version(g in any_group(), version in 0i16..=4) {
        let back = g.encode_version(version).and_then(|b| GroupMetadataValue::decode(&b));
        prop_assert_eq!(back.ok(), Some(group_at_version(g, version)));
    }

    #[test]
    fn offset_key_roundtrips(group in ".{0,20}", topic in ".{0,20}", partition in any::<i32>()) {
        let key = OffsetCommitKey { group, topic, partition };
        let back = key.encode().and_then(|b| RecordKey::decode(&b));
        prop_assert_eq!(back.ok(), Some(RecordKey::OffsetCommit(key)));
    }

    #[test]
    fn group_key_roundtrips(group in ".{0,20}") {
        let key = GroupMetadataKey { group };
        let back = key.encode().and_then(|b| RecordKey::decode(&b));
        prop_assert_eq!(back.ok(), Some(RecordKey::GroupMetadata(key)));
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
        let _ = RecordKey::decode(&bytes);
        let _ = OffsetCommitValue::decode(&bytes);
        let _ = GroupMetadataValue::decode(&bytes);
    }

    #[test]
    fn corrupted_values_never_panic(
        g in any_group(),
        version in 0i16..=4,
        pos in any::<usize>(),
        byte in any::<u8>(),
        cut in any::<usize>(),
    ) {
        let mut bytes = g.encode_version(version).unwrap_or_default();
        if !bytes.is_empty() {
            let i = pos % bytes.len();
            bytes[i] = byte;
            bytes.truncate(cut % (bytes.len() + 1));
        }
        let _ = GroupMetadataValue::decode(&bytes);
        let _ = OffsetCommitValue::decode(&bytes);
    }
}
