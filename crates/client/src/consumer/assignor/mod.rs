//! Consumer-group partition assignment: the [`PartitionAssignor`] trait the
//! group leader runs during a rebalance, the built-in assignors that match
//! Apache Kafka's Java client (`range`, `roundrobin`, `sticky`,
//! `cooperative-sticky`), and the `consumer` protocol encoding of member
//! subscriptions and assignments (`ConsumerProtocolSubscription` /
//! `ConsumerProtocolAssignment`, each preceded by an `i16` version) plus the
//! sticky assignors' user data.
//!
//! This module owns only the pure, leader-side logic; joining the group and
//! exchanging these bytes with the coordinator lives elsewhere in
//! [`crate::consumer`].
//!
//! Layout: the wire encodings live in `protocol.rs`, the assignors in
//! `range.rs`, `roundrobin.rs` and `sticky.rs`; everything public is
//! re-exported from here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;

use crate::error::{ClientError, Result};
use crate::TopicPartition;

mod protocol;
mod range;
mod roundrobin;
mod sticky;

pub use protocol::{
    decode_assignment, decode_sticky_user_data, decode_subscription, encode_assignment,
    encode_assignment_version, encode_sticky_user_data, encode_subscription, ASSIGNMENT_VERSION,
    SUBSCRIPTION_MAX_VERSION,
};
pub use range::RangeAssignor;
pub use roundrobin::RoundRobinAssignor;
pub use sticky::{CooperativeStickyAssignor, StickyAssignor};

/// Rebalance protocol an assignor supports (KIP-429).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RebalanceProtocol {
    /// Every member revokes all its partitions before rejoining.
    Eager,
    /// Members keep their partitions across a rebalance and revoke only those
    /// that move, which takes a second rebalance to hand them over.
    Cooperative,
}

/// One member's subscription as seen by the group leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// Topics the member wants to consume.
    pub topics: Vec<String>,
    /// Assignor-specific data (see [`PartitionAssignor::subscription_user_data`]).
    pub user_data: Option<Bytes>,
    /// Partitions the member currently owns (subscription v1+).
    pub owned_partitions: Vec<TopicPartition>,
    /// Generation of the member's current assignment (v2+); -1 when unknown.
    pub generation_id: i32,
    /// The member's rack (v3+).
    pub rack_id: Option<String>,
    /// Static membership id, filled in by the leader from the JoinGroup
    /// response; never encoded.
    pub group_instance_id: Option<String>,
}

impl Default for Subscription {
    /// An empty subscription with an unknown (-1) generation.
    fn default() -> Self {
        Self {
            topics: Vec::new(),
            user_data: None,
            owned_partitions: Vec::new(),
            generation_id: -1,
            rack_id: None,
            group_instance_id: None,
        }
    }
}

impl Subscription {
    /// A subscription to `topics` with nothing else set.
    pub fn new<I, S>(topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            topics: topics.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }
}

/// The partitions given to one member.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assignment {
    /// Assigned partitions, sorted by (topic, partition) for built-in assignors.
    pub partitions: Vec<TopicPartition>,
    /// Assignor-specific data handed back to the member.
    pub user_data: Option<Bytes>,
}

/// A consumer-group partition assignment strategy. The group leader runs
/// [`assign`](PartitionAssignor::assign) for the protocol the coordinator
/// picked; other libraries (e.g. stream processing) can plug in their own.
pub trait PartitionAssignor: Send + Sync + std::fmt::Debug {
    /// Protocol name sent in JoinGroup ("range", "roundrobin", "sticky", "cooperative-sticky").
    fn name(&self) -> &str;

    /// Rebalance protocols supported; default [Eager].
    ///
    /// [Eager]: RebalanceProtocol::Eager
    fn supported_protocols(&self) -> Vec<RebalanceProtocol> {
        vec![RebalanceProtocol::Eager]
    }

    /// user_data for this member's subscription (sticky sends its current
    /// assignment); default None. `owned` and `generation` describe the
    /// member's current assignment (-1 when it has none).
    fn subscription_user_data(
        &self,
        _topics: &[String],
        _owned: &[TopicPartition],
        _generation: i32,
    ) -> Option<Bytes> {
        None
    }

    /// Called on every member (leader or not) with the assignment it
    /// received from this assignor in generation `generation`, before the
    /// rebalance listener runs (Kafka's `ConsumerPartitionAssignor.onAssignment`);
    /// assignors that hand out `user_data` read it here. Default: nothing.
    fn on_assignment(&self, _assignment: &Assignment, _generation: i32) {}

    /// Leader-side assignment. `partitions_per_topic`: partition count of
    /// every subscribed topic known in metadata (topics missing from the map
    /// are skipped). `members`: member id -> subscription. Must return an
    /// entry for every member.
    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        members: &BTreeMap<String, Subscription>,
    ) -> Result<BTreeMap<String, Assignment>>;
}

/// The built-in assignor called `name` ("range", "roundrobin", "sticky",
/// "cooperative-sticky"), or `None`.
pub fn assignor_by_name(name: &str) -> Option<Arc<dyn PartitionAssignor>> {
    match name {
        "range" => Some(Arc::new(RangeAssignor)),
        "roundrobin" => Some(Arc::new(RoundRobinAssignor)),
        "sticky" => Some(Arc::new(StickyAssignor)),
        "cooperative-sticky" => Some(Arc::new(CooperativeStickyAssignor)),
        _ => None,
    }
}

/// Rejects negative partition counts.
fn check_counts(partitions_per_topic: &BTreeMap<String, i32>) -> Result<()> {
    match partitions_per_topic.iter().find(|(_, &n)| n < 0) {
        Some((topic, n)) => Err(ClientError::InvalidArgument(format!(
            "topic {topic} has a negative partition count {n}"
        ))),
        None => Ok(()),
    }
}

/// Sort key giving Kafka's member order (see [`member_order`]).
type MemberKey<'a> = (bool, Option<&'a str>, &'a str);

/// Kafka's member order: static members first by instance id, then dynamic
/// members by member id.
fn member_order<'a>(id: &'a str, sub: &'a Subscription) -> MemberKey<'a> {
    (
        sub.group_instance_id.is_none(),
        sub.group_instance_id.as_deref(),
        id,
    )
}

/// Topics `sub` subscribes to that exist in metadata, deduplicated.
fn known_topics<'a>(sub: &'a Subscription, ppt: &BTreeMap<String, i32>) -> BTreeSet<&'a str> {
    sub.topics
        .iter()
        .map(String::as_str)
        .filter(|t| ppt.contains_key(*t))
        .collect()
}

/// Wraps per-member partition lists (sorted here) as [`Assignment`]s.
fn to_assignments(parts: BTreeMap<String, Vec<TopicPartition>>) -> BTreeMap<String, Assignment> {
    parts
        .into_iter()
        .map(|(id, mut partitions)| {
            partitions.sort();
            (
                id,
                Assignment {
                    partitions,
                    user_data: None,
                },
            )
        })
        .collect()
}

/// An empty partition list for every member.
fn empty_parts(members: &BTreeMap<String, Subscription>) -> BTreeMap<String, Vec<TopicPartition>> {
    members.keys().map(|m| (m.clone(), Vec::new())).collect()
}

/// Shared helpers for the assignor tests.
#[cfg(test)]
mod test_support {
    use super::*;

    pub(super) type Members = BTreeMap<String, Subscription>;

    pub(super) fn tp(t: &str, p: i32) -> TopicPartition {
        TopicPartition::new(t, p)
    }

    pub(super) fn tps(t: &str, ps: &[i32]) -> Vec<TopicPartition> {
        ps.iter().map(|&p| tp(t, p)).collect()
    }

    pub(super) fn counts(pairs: &[(&str, i32)]) -> BTreeMap<String, i32> {
        pairs.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    pub(super) fn member(
        topics: &[&str],
        owned: Vec<TopicPartition>,
        generation: i32,
    ) -> Subscription {
        Subscription {
            owned_partitions: owned,
            generation_id: generation,
            ..Subscription::new(topics.iter().copied())
        }
    }

    pub(super) fn parts(out: &BTreeMap<String, Assignment>, id: &str) -> Vec<TopicPartition> {
        out.get(id)
            .map(|a| a.partitions.clone())
            .unwrap_or_default()
    }

    /// Members whose `owned_partitions` are `out`'s assignment, at `generation`.
    pub(super) fn next_round(
        members: &Members,
        out: &BTreeMap<String, Assignment>,
        generation: i32,
    ) -> Members {
        members
            .iter()
            .map(|(id, s)| {
                let owned = parts(out, id);
                (
                    id.clone(),
                    Subscription {
                        owned_partitions: owned,
                        generation_id: generation,
                        ..s.clone()
                    },
                )
            })
            .collect()
    }

    /// Partitions whose owner differs between `before` and `after` (ignoring
    /// partitions that had no owner before).
    pub(super) fn moved(
        before: &BTreeMap<String, Assignment>,
        after: &BTreeMap<String, Assignment>,
    ) -> usize {
        let owner = |m: &BTreeMap<String, Assignment>| -> BTreeMap<TopicPartition, String> {
            m.iter()
                .flat_map(|(id, a)| a.partitions.iter().map(move |p| (p.clone(), id.clone())))
                .collect()
        };
        let (b, a) = (owner(before), owner(after));
        b.iter()
            .filter(|(p, id)| a.get(*p).is_some_and(|new| new != *id))
            .count()
    }

    pub(super) fn sizes(out: &BTreeMap<String, Assignment>) -> Vec<usize> {
        out.values().map(|a| a.partitions.len()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_and_lookup() {
        for name in ["range", "roundrobin", "sticky", "cooperative-sticky"] {
            assert_eq!(
                assignor_by_name(name).map(|a| a.name().to_owned()),
                Some(name.to_owned())
            );
        }
        assert!(assignor_by_name("uniform").is_none());
        assert_eq!(
            StickyAssignor.supported_protocols(),
            vec![RebalanceProtocol::Eager]
        );
    }

    /// A member: topic bitmask, owned partition claims `(topic, partition)`, generation.
    type Spec = (u8, Vec<(usize, i32)>, i32);

    /// Topic partition counts, and per member a topic bitmask plus owned
    /// partition claims with a generation.
    fn scenario() -> impl Strategy<Value = (Vec<i32>, Vec<Spec>)> {
        (
            prop::collection::vec(0..7i32, 1..4),
            prop::collection::vec(
                (
                    0u8..16,
                    prop::collection::vec((0..4usize, 0..8i32), 0..6),
                    -1..3i32,
                ),
                1..6,
            ),
        )
    }

    fn build(counts_: &[i32], specs: &[Spec], same_subs: bool) -> (BTreeMap<String, i32>, Members) {
        let topic = |i: usize| format!("t{i}");
        let ppt = counts_
            .iter()
            .enumerate()
            .map(|(i, &n)| (topic(i), n))
            .collect();
        let members = specs
            .iter()
            .enumerate()
            .map(|(i, (mask, claims, generation))| {
                let topics: Vec<String> = (0..4)
                    .filter(|b| same_subs || mask & (1 << b) != 0)
                    .map(topic)
                    .collect();
                let owned = claims.iter().map(|(t, p)| tp(&topic(*t), *p)).collect();
                let sub = Subscription {
                    owned_partitions: owned,
                    generation_id: *generation,
                    ..Subscription::new(topics)
                };
                (format!("m{i}"), sub)
            })
            .collect();
        (ppt, members)
    }

    /// Every partition of a subscribed topic goes to exactly one subscribed
    /// member (`at_most_once`: to at most one).
    fn check_valid(
        ppt: &BTreeMap<String, i32>,
        members: &Members,
        out: &BTreeMap<String, Assignment>,
        at_most_once: bool,
    ) -> std::result::Result<(), TestCaseError> {
        prop_assert_eq!(
            out.keys().collect::<Vec<_>>(),
            members.keys().collect::<Vec<_>>()
        );
        let mut seen = BTreeSet::new();
        for (id, a) in out {
            for p in &a.partitions {
                prop_assert!(
                    members[id].topics.contains(&p.topic),
                    "{} not subscribed to {:?}",
                    id,
                    p
                );
                prop_assert!(seen.insert(p.clone()), "{:?} assigned twice", p);
            }
        }
        for (t, &n) in ppt {
            if members.values().any(|s| s.topics.contains(t)) {
                for p in 0..n {
                    let owned_elsewhere = members
                        .values()
                        .any(|s| s.owned_partitions.contains(&tp(t, p)));
                    prop_assert!(
                        seen.contains(&tp(t, p)) || (at_most_once && owned_elsewhere),
                        "{}-{} unassigned",
                        t,
                        p
                    );
                }
            }
        }
        Ok(())
    }

    fn run(
        a: &dyn PartitionAssignor,
        ppt: &BTreeMap<String, i32>,
        members: &Members,
    ) -> std::result::Result<BTreeMap<String, Assignment>, TestCaseError> {
        a.assign(ppt, members)
            .map_err(|e| TestCaseError::fail(e.to_string()))
    }

    fn spread(out: &BTreeMap<String, Assignment>) -> usize {
        let s = sizes(out);
        s.iter().max().unwrap_or(&0) - s.iter().min().unwrap_or(&0)
    }

    proptest! {
        #[test]
        fn assignors_are_valid((counts_, specs) in scenario(), same_subs in any::<bool>()) {
            let (ppt, members) = build(&counts_, &specs, same_subs);
            for a in [&RangeAssignor as &dyn PartitionAssignor, &RoundRobinAssignor, &StickyAssignor] {
                let out = run(a, &ppt, &members)?;
                check_valid(&ppt, &members, &out, false)?;
                prop_assert_eq!(&run(a, &ppt, &members)?, &out, "not deterministic");
                if same_subs && a.name() != "range" {
                    prop_assert!(spread(&out) <= 1, "{} unbalanced: {:?}", a.name(), sizes(&out));
                }
            }
            let coop = &CooperativeStickyAssignor;
            let round1 = run(coop, &ppt, &members)?;
            check_valid(&ppt, &members, &round1, true)?;
            if same_subs {
                // The follow-up rebalance completes the handover, balanced.
                let next = next_round(&members, &round1, 5);
                let round2 = run(coop, &ppt, &next)?;
                check_valid(&ppt, &next, &round2, false)?;
                prop_assert!(spread(&round2) <= 1, "unbalanced: {:?}", sizes(&round2));
            }
        }
    }
}
