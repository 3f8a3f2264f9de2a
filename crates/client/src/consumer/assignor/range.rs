//! Kafka's `range` assignor.

use std::collections::BTreeMap;

use super::{check_counts, empty_parts, known_topics, member_order, to_assignments, MemberKey};
use super::{Assignment, PartitionAssignor, Subscription};
use crate::error::Result;
use crate::TopicPartition;

/// Kafka's `range` assignor: per topic, the subscribed members (in Kafka's
/// member order) get contiguous ranges; the first `partitions % members`
/// members get one extra partition.
#[derive(Debug, Clone, Copy, Default)]
pub struct RangeAssignor;

impl PartitionAssignor for RangeAssignor {
    fn name(&self) -> &str {
        "range"
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        members: &BTreeMap<String, Subscription>,
    ) -> Result<BTreeMap<String, Assignment>> {
        check_counts(partitions_per_topic)?;
        let mut subscribers: BTreeMap<&str, Vec<MemberKey<'_>>> = BTreeMap::new();
        for (id, sub) in members {
            for topic in known_topics(sub, partitions_per_topic) {
                subscribers
                    .entry(topic)
                    .or_default()
                    .push(member_order(id, sub));
            }
        }
        let mut out = empty_parts(members);
        for (topic, mut consumers) in subscribers {
            consumers.sort();
            let n = partitions_per_topic[topic];
            let c = consumers.len() as i32;
            let (per, extra) = (n / c, n % c);
            for (i, (_, _, id)) in consumers.into_iter().enumerate() {
                let i = i as i32;
                let start = per * i + i.min(extra);
                let len = per + i32::from(i < extra);
                let parts = out.entry(id.to_owned()).or_default();
                parts.extend((start..start + len).map(|p| TopicPartition::new(topic, p)));
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
    fn range_two_members_three_topics() -> Result<()> {
        let ppt = counts(&[("t1", 3), ("t2", 5), ("t3", 3)]);
        let all = ["t1", "t2", "t3"];
        let members: Members = [
            ("c1", member(&all, vec![], -1)),
            ("c2", member(&all, vec![], -1)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let out = RangeAssignor.assign(&ppt, &members)?;
        let mut c1 = tps("t1", &[0, 1]);
        c1.extend(tps("t2", &[0, 1, 2]));
        c1.extend(tps("t3", &[0, 1]));
        let mut c2 = tps("t1", &[2]);
        c2.extend(tps("t2", &[3, 4]));
        c2.extend(tps("t3", &[2]));
        assert_eq!(parts(&out, "c1"), c1);
        assert_eq!(parts(&out, "c2"), c2);
        Ok(())
    }

    #[test]
    fn range_uneven_subscriptions_and_static_order() -> Result<()> {
        let ppt = counts(&[("t1", 3), ("t2", 2)]);
        let mut members: Members = BTreeMap::new();
        members.insert("c1".into(), member(&["t1"], vec![], -1));
        members.insert("c2".into(), member(&["t1", "t2", "missing"], vec![], -1));
        members.insert("c3".into(), member(&["t2"], vec![], -1));
        let out = RangeAssignor.assign(&ppt, &members)?;
        assert_eq!(parts(&out, "c1"), tps("t1", &[0, 1]));
        let mut c2 = tps("t1", &[2]);
        c2.extend(tps("t2", &[0]));
        assert_eq!(parts(&out, "c2"), c2);
        assert_eq!(parts(&out, "c3"), tps("t2", &[1]));

        // Static members sort before dynamic ones, by instance id.
        if let Some(s) = members.get_mut("c3") {
            s.group_instance_id = Some("a".into());
        }
        let out = RangeAssignor.assign(&ppt, &members)?;
        assert_eq!(parts(&out, "c3"), tps("t2", &[0]));
        assert_eq!(parts(&out, "c2"), vec![tp("t1", 2), tp("t2", 1)]);
        assert!(RangeAssignor
            .assign(&counts(&[("t1", -1)]), &members)
            .is_err());
        Ok(())
    }
}
