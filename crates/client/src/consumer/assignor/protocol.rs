//! The `consumer` protocol wire formats: version-prefixed
//! `ConsumerProtocolSubscription` / `ConsumerProtocolAssignment` and the
//! sticky assignors' user data.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use proto_kafka::messages::{
    consumer_protocol_assignment as cpa, consumer_protocol_subscription as cps,
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
};
use proto_kafka::protocol::{Decodable, Encodable, StrBytes};

use super::{Assignment, Subscription};
use crate::error::{ClientError, Result};
use crate::TopicPartition;

/// Highest `ConsumerProtocolSubscription` version we encode and decode
/// (v1 adds owned partitions, v2 the generation, v3 the rack id).
pub const SUBSCRIPTION_MAX_VERSION: i16 = 3;

/// Version [`encode_assignment`] writes. All assignment versions (0-3) share
/// one layout; 0 is the one every client (including kafka-python) reads.
pub const ASSIGNMENT_VERSION: i16 = 0;

/// Groups consecutive partitions of the same topic, keeping their order.
fn group_by_topic(parts: &[TopicPartition]) -> Vec<(String, Vec<i32>)> {
    let mut out: Vec<(String, Vec<i32>)> = Vec::new();
    for tp in parts {
        match out.last_mut() {
            Some((topic, ps)) if *topic == tp.topic => ps.push(tp.partition),
            _ => out.push((tp.topic.clone(), vec![tp.partition])),
        }
    }
    out
}

/// A protocol topic name from a `&str`.
fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

/// Appends `topic`'s `partitions` to `out` as [`TopicPartition`]s.
fn flatten(topic: &str, partitions: &[i32], out: &mut Vec<TopicPartition>) {
    out.extend(partitions.iter().map(|&p| TopicPartition::new(topic, p)));
}

/// Reads the non-negative `i16` version prefix.
fn read_version(buf: &mut Bytes, what: &str) -> Result<i16> {
    if buf.remaining() < 2 {
        return Err(ClientError::Protocol(format!(
            "{what} too short for its version"
        )));
    }
    let version = buf.get_i16();
    if version < 0 {
        return Err(ClientError::Protocol(format!(
            "unsupported {what} version {version}"
        )));
    }
    Ok(version)
}

/// Encodes `sub` as `version: i16` followed by `ConsumerProtocolSubscription`
/// at that version (0..=3). Fields the version lacks are dropped;
/// `group_instance_id` is never encoded.
pub fn encode_subscription(sub: &Subscription, version: i16) -> Result<Bytes> {
    if !(0..=SUBSCRIPTION_MAX_VERSION).contains(&version) {
        return Err(ClientError::InvalidArgument(format!(
            "subscription version {version} is not in 0..={SUBSCRIPTION_MAX_VERSION}"
        )));
    }
    let mut msg = ConsumerProtocolSubscription::default();
    msg.topics = sub
        .topics
        .iter()
        .map(|t| StrBytes::from_string(t.clone()))
        .collect();
    msg.user_data = sub.user_data.clone();
    msg.owned_partitions = group_by_topic(&sub.owned_partitions)
        .into_iter()
        .map(|(topic, partitions)| {
            let mut tp = cps::TopicPartition::default();
            tp.topic = topic_name(&topic);
            tp.partitions = partitions;
            tp
        })
        .collect();
    msg.generation_id = sub.generation_id;
    msg.rack_id = sub.rack_id.clone().map(StrBytes::from_string);
    let mut buf = BytesMut::with_capacity(2 + msg.compute_size(version)?);
    buf.put_i16(version);
    msg.encode(&mut buf, version)?;
    Ok(buf.freeze())
}

/// Decodes a version-prefixed subscription. Versions newer than
/// [`SUBSCRIPTION_MAX_VERSION`] are read as that version (newer versions only
/// append fields); trailing bytes are ignored.
pub fn decode_subscription(data: &[u8]) -> Result<Subscription> {
    let mut buf = Bytes::copy_from_slice(data);
    let version = read_version(&mut buf, "subscription")?.min(SUBSCRIPTION_MAX_VERSION);
    let msg = ConsumerProtocolSubscription::decode(&mut buf, version)?;
    let mut owned_partitions = Vec::new();
    for tp in &msg.owned_partitions {
        flatten(tp.topic.as_str(), &tp.partitions, &mut owned_partitions);
    }
    Ok(Subscription {
        topics: msg.topics.iter().map(|t| t.as_str().to_owned()).collect(),
        user_data: msg.user_data,
        owned_partitions,
        generation_id: msg.generation_id,
        rack_id: msg.rack_id.map(|r| r.as_str().to_owned()),
        group_instance_id: None,
    })
}

/// Encodes `a` at [`ASSIGNMENT_VERSION`].
pub fn encode_assignment(a: &Assignment) -> Result<Bytes> {
    encode_assignment_version(a, ASSIGNMENT_VERSION)
}

/// Encodes `a` as `version: i16` followed by `ConsumerProtocolAssignment`
/// at that version (0..=3; all share one layout).
pub fn encode_assignment_version(a: &Assignment, version: i16) -> Result<Bytes> {
    if !(0..=3).contains(&version) {
        return Err(ClientError::InvalidArgument(format!(
            "assignment version {version} is not in 0..=3"
        )));
    }
    let mut msg = ConsumerProtocolAssignment::default();
    msg.assigned_partitions = group_by_topic(&a.partitions)
        .into_iter()
        .map(|(topic, partitions)| {
            let mut tp = cpa::TopicPartition::default();
            tp.topic = topic_name(&topic);
            tp.partitions = partitions;
            tp
        })
        .collect();
    msg.user_data = a.user_data.clone();
    let mut buf = BytesMut::with_capacity(2 + msg.compute_size(version)?);
    buf.put_i16(version);
    msg.encode(&mut buf, version)?;
    Ok(buf.freeze())
}

/// Decodes a version-prefixed assignment; empty `data` (what the coordinator
/// hands a member the leader gave nothing) is an empty assignment.
pub fn decode_assignment(data: &[u8]) -> Result<Assignment> {
    if data.is_empty() {
        return Ok(Assignment::default());
    }
    let mut buf = Bytes::copy_from_slice(data);
    let version = read_version(&mut buf, "assignment")?.min(3);
    let msg = ConsumerProtocolAssignment::decode(&mut buf, version)?;
    let mut partitions = Vec::new();
    for tp in &msg.assigned_partitions {
        flatten(tp.topic.as_str(), &tp.partitions, &mut partitions);
    }
    Ok(Assignment {
        partitions,
        user_data: msg.user_data,
    })
}

/// Encodes the eager sticky assignor's user data (Kafka's
/// `StickyAssignorUserData` v1, no version prefix): an array of
/// `(topic: string, partitions: [i32])` followed by the `i32` generation.
pub fn encode_sticky_user_data(owned: &[TopicPartition], generation: i32) -> Bytes {
    let groups = group_by_topic(owned);
    let mut buf = BytesMut::new();
    buf.put_i32(groups.len() as i32);
    for (topic, partitions) in groups {
        buf.put_i16(topic.len() as i16);
        buf.put_slice(topic.as_bytes());
        buf.put_i32(partitions.len() as i32);
        partitions.iter().for_each(|&p| buf.put_i32(p));
    }
    buf.put_i32(generation);
    buf.freeze()
}

/// Decodes sticky user data: v1 (with generation) when the bytes hold it,
/// else v0 (generation `None`). `None` when the data cannot be parsed (Kafka
/// then ignores the member's previous assignment).
pub fn decode_sticky_user_data(data: &[u8]) -> Option<(Vec<TopicPartition>, Option<i32>)> {
    /// Reads a non-negative `i16` (`bytes == 2`) or `i32` length.
    fn len(buf: &mut &[u8], bytes: usize) -> Option<usize> {
        if buf.remaining() < bytes {
            return None;
        }
        let n = if bytes == 2 {
            i64::from(buf.get_i16())
        } else {
            i64::from(buf.get_i32())
        };
        usize::try_from(n).ok()
    }
    let mut buf = data;
    let mut out = Vec::new();
    for _ in 0..len(&mut buf, 4)? {
        let n = len(&mut buf, 2)?;
        if buf.remaining() < n {
            return None;
        }
        let topic = std::str::from_utf8(&buf[..n]).ok()?.to_owned();
        buf.advance(n);
        let count = len(&mut buf, 4)?;
        if buf.remaining() < count.checked_mul(4)? {
            return None;
        }
        out.extend((0..count).map(|_| TopicPartition::new(topic.clone(), buf.get_i32())));
    }
    let generation = (buf.remaining() >= 4).then(|| buf.get_i32());
    Some((out, generation))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::assignor::test_support::*;
    use crate::consumer::assignor::{PartitionAssignor, StickyAssignor};

    #[test]
    fn subscription_round_trips_every_version() -> Result<()> {
        let full = Subscription {
            topics: vec!["b".into(), "a".into()],
            user_data: Some(Bytes::from_static(b"xyz")),
            owned_partitions: vec![tp("b", 2), tp("b", 0), tp("a", 1)],
            generation_id: 42,
            rack_id: Some("rack-1".into()),
            group_instance_id: Some("not-encoded".into()),
        };
        for version in 0..=3 {
            let bytes = encode_subscription(&full, version)?;
            assert_eq!(&bytes[..2], &version.to_be_bytes());
            let back = decode_subscription(&bytes)?;
            let mut expect = Subscription {
                group_instance_id: None,
                ..full.clone()
            };
            if version < 1 {
                expect.owned_partitions.clear();
            }
            if version < 2 {
                expect.generation_id = -1;
            }
            if version < 3 {
                expect.rack_id = None;
            }
            assert_eq!(back, expect, "version {version}");
        }
        assert!(encode_subscription(&full, 4).is_err());
        // A future version decodes as the newest known one, ignoring extra bytes.
        let mut future = encode_subscription(&full, 3)?.to_vec();
        future[..2].copy_from_slice(&9i16.to_be_bytes());
        future.extend_from_slice(&[1, 2, 3]);
        assert_eq!(
            decode_subscription(&future)?.rack_id.as_deref(),
            Some("rack-1")
        );
        assert!(decode_subscription(&[0, 0, 0]).is_err());
        assert!(decode_subscription(&[0xff, 0xff]).is_err());
        Ok(())
    }

    #[test]
    fn decodes_kafka_python_v0_subscription() -> Result<()> {
        let mut raw = vec![0u8, 0]; // version 0
        raw.extend_from_slice(&2i32.to_be_bytes());
        for topic in ["orders", "pay"] {
            raw.extend_from_slice(&(topic.len() as i16).to_be_bytes());
            raw.extend_from_slice(topic.as_bytes());
        }
        raw.extend_from_slice(&(-1i32).to_be_bytes()); // null user data
        let sub = decode_subscription(&raw)?;
        assert_eq!(sub, Subscription::new(["orders", "pay"]));
        assert_eq!(sub.generation_id, -1);
        Ok(())
    }

    #[test]
    fn assignment_and_user_data_round_trips() -> Result<()> {
        let a = Assignment {
            partitions: vec![tp("a", 0), tp("a", 3), tp("b", 1)],
            user_data: Some(Bytes::from_static(b"u")),
        };
        let bytes = encode_assignment(&a)?;
        assert_eq!(&bytes[..2], &[0, 0]);
        assert_eq!(decode_assignment(&bytes)?, a);
        for version in 0..=3 {
            assert_eq!(
                decode_assignment(&encode_assignment_version(&a, version)?)?,
                a
            );
        }
        assert_eq!(decode_assignment(&[])?, Assignment::default());
        assert!(decode_assignment(&[0, 0, 0, 0, 0, 5]).is_err());

        let owned = vec![tp("a", 1), tp("a", 2), tp("b", 0)];
        let ud = encode_sticky_user_data(&owned, 9);
        assert_eq!(decode_sticky_user_data(&ud), Some((owned.clone(), Some(9))));
        // v0 has no generation.
        assert_eq!(
            decode_sticky_user_data(&ud[..ud.len() - 4]),
            Some((owned, None))
        );
        assert_eq!(decode_sticky_user_data(&[0, 0, 0, 1, 0]), None);
        assert_eq!(StickyAssignor.subscription_user_data(&[], &[], -1), None);
        Ok(())
    }
}
