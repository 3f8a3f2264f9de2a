//! Kafka's `roundrobin` assignor.

use std::collections::{BTreeMap, BTreeSet};

use super::{check_counts, empty_parts, known_topics, member_order, to_assignments};
use super::{Assignment, PartitionAssignor, Subscription};
use crate::error::Result;
use crate::TopicPartition;

/// Kafka's `roundrobin` assignor: all partitions of all subscribed topics in
/// (topic, partition) order are dealt to the members (in Kafka's member
/// order) in a circle, skipping members not subscribed to the topic.
#[derive(Debug, Clone, Copy, Default)]
pub struct RoundRobinAssignor;

impl PartitionAssignor for RoundRobinAssignor {
    fn name(&self) -> &str {
        "roundrobin"
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        members: &BTreeMap<String, Subscription>,
    ) -> Result<BTreeMap<String, Assignment>> {
        check_counts(partitions_per_topic)?;
        let mut ring: Vec<_> = members
            .iter()
            .map(|(id, sub)| {
                (
                    member_order(id, sub),
                    known_topics(sub, partitions_per_topic),
                )
            })
            .collect();
        ring.sort_by(|a, b| a.0.cmp(&b.0));
        let topics: BTreeSet<&str> = ring.iter().flat_map(|(_, t)| t.iter().copied()).collect();
        let mut out = empty_parts(members);
        let mut next = 0;
        for topic in topics {
            for p in 0..partitions_per_topic[topic] {
                // Some member subscribes to `topic`, so this terminates.
                while !ring[next].1.contains(topic) {
                    next = (next + 1) % ring.len();
                }
                let id = ring[next].0 .2;
                out.entry(id.to_owned())
                    .or_default()
                    .push(TopicPartition::new(topic, p));
                next = (next + 1) % ring.len();
            }
        }
        Ok(to_assignments(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::assignor::test_support::*;

    #[test]
    fn roundrobin_layouts() -> Result<()> {
        let ppt = counts(&[("t1", 3), ("t2", 3)]);
        let members: Members = ["c0", "c1"]
            .iter()
            .map(|id| (id.to_string(), member(&["t1", "t2"], vec![], -1)))
            .collect();
        let out = RoundRobinAssignor.assign(&ppt, &members)?;
        assert_eq!(
            parts(&out, "c0"),
            vec![tp("t1", 0), tp("t1", 2), tp("t2", 1)]
        );
        assert_eq!(
            parts(&out, "c1"),
            vec![tp("t1", 1), tp("t2", 0), tp("t2", 2)]
        );

        // Skips members not subscribed to the topic.
        let ppt = counts(&[("t1", 1), ("t2", 2), ("t3", 3)]);
        let mut members: Members = BTreeMap::new();
        members.insert("c0".into(), member(&["t1"], vec![], -1));
        members.insert("c1".into(), member(&["t1", "t2"], vec![], -1));
        members.insert("c2".into(), member(&["t1", "t2", "t3"], vec![], -1));
        members.insert("c3".into(), member(&[], vec![], -1));
        let out = RoundRobinAssignor.assign(&ppt, &members)?;
        assert_eq!(parts(&out, "c0"), vec![tp("t1", 0)]);
        assert_eq!(parts(&out, "c1"), vec![tp("t2", 0)]);
        let mut c2 = vec![tp("t2", 1)];
        c2.extend(tps("t3", &[0, 1, 2]));
        assert_eq!(parts(&out, "c2"), c2);
        assert_eq!(parts(&out, "c3"), vec![]);
        Ok(())
    }
}
