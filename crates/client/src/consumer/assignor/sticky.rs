//! Kafka's `sticky` and `cooperative-sticky` assignors and the balancing
//! algorithm they share.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::{Buf, Bytes};

use super::protocol::{decode_sticky_user_data, encode_sticky_user_data};
use super::{check_counts, known_topics, to_assignments};
use super::{Assignment, PartitionAssignor, RebalanceProtocol, Subscription};
use crate::error::Result;
use crate::TopicPartition;

/// Kafka's eager `sticky` assignor: a balanced assignment that keeps as many
/// previously owned partitions as possible. Members advertise their current
/// assignment in their subscription's user data
/// ([`encode_sticky_user_data`]); `owned_partitions` takes precedence when
/// present.
#[derive(Debug, Clone, Copy, Default)]
pub struct StickyAssignor;

/// Kafka's `cooperative-sticky` assignor: the sticky assignment, minus any
/// partition that another member still owns and must revoke first; it is
/// handed over in the follow-up rebalance. Supports both protocols.
#[derive(Debug, Clone, Copy, Default)]
pub struct CooperativeStickyAssignor;

impl PartitionAssignor for StickyAssignor {
    fn name(&self) -> &str {
        "sticky"
    }

    fn subscription_user_data(
        &self,
        _topics: &[String],
        owned: &[TopicPartition],
        generation: i32,
    ) -> Option<Bytes> {
        if owned.is_empty() && generation < 0 {
            return None;
        }
        let mut owned = owned.to_vec();
        owned.sort();
        Some(encode_sticky_user_data(&owned, generation))
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        members: &BTreeMap<String, Subscription>,
    ) -> Result<BTreeMap<String, Assignment>> {
        check_counts(partitions_per_topic)?;
        let claims = members.values().map(|sub| {
            if !sub.owned_partitions.is_empty() {
                return (sub.owned_partitions.clone(), sub.generation_id);
            }
            match sub.user_data.as_deref().and_then(decode_sticky_user_data) {
                Some((parts, generation)) => (parts, generation.unwrap_or(-1)),
                None => (Vec::new(), -1),
            }
        });
        let claims = claims.collect();
        Ok(to_assignments(sticky_assign(
            partitions_per_topic,
            members,
            claims,
        )))
    }
}

impl PartitionAssignor for CooperativeStickyAssignor {
    fn name(&self) -> &str {
        "cooperative-sticky"
    }

    fn supported_protocols(&self) -> Vec<RebalanceProtocol> {
        vec![RebalanceProtocol::Eager, RebalanceProtocol::Cooperative]
    }

    /// Like Kafka's: only the generation, as a bare `i32` (for subscription
    /// versions before 2, which lack the generation field).
    fn subscription_user_data(
        &self,
        _topics: &[String],
        _owned: &[TopicPartition],
        generation: i32,
    ) -> Option<Bytes> {
        Some(Bytes::copy_from_slice(&generation.to_be_bytes()))
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        members: &BTreeMap<String, Subscription>,
    ) -> Result<BTreeMap<String, Assignment>> {
        check_counts(partitions_per_topic)?;
        let claims = members.values().map(|sub| {
            let user_data = sub.user_data.as_deref().unwrap_or_default();
            let generation = match sub.generation_id {
                g if g >= 0 => g,
                _ if user_data.len() == 4 => (&user_data[..]).get_i32(),
                _ => -1,
            };
            if sub.owned_partitions.is_empty() && user_data.len() != 4 {
                // An eager-era member may still carry sticky user data.
                if let Some((parts, g)) = decode_sticky_user_data(user_data) {
                    return (parts, g.unwrap_or(generation));
                }
            }
            (sub.owned_partitions.clone(), generation)
        });
        let claims = claims.collect();
        let mut parts = sticky_assign(partitions_per_topic, members, claims);
        // Two-phase handover: a partition some member still owns but no longer
        // gets cannot go to its new owner until it has been revoked.
        let mut added: BTreeMap<TopicPartition, String> = BTreeMap::new();
        let mut revoked: BTreeSet<TopicPartition> = BTreeSet::new();
        for (id, assigned) in &parts {
            let owned: BTreeSet<_> = members[id].owned_partitions.iter().collect();
            let assigned_set: BTreeSet<_> = assigned.iter().collect();
            for tp in assigned.iter().filter(|tp| !owned.contains(tp)) {
                added.insert(tp.clone(), id.clone());
            }
            revoked.extend(
                owned
                    .into_iter()
                    .filter(|tp| !assigned_set.contains(tp))
                    .cloned(),
            );
        }
        for (tp, id) in added.into_iter().filter(|(tp, _)| revoked.contains(tp)) {
            if let Some(list) = parts.get_mut(&id) {
                list.retain(|p| *p != tp);
            }
        }
        Ok(to_assignments(parts))
    }
}

/// Working state of the sticky algorithm; members are indexed in member-id order.
struct StickyState<'a> {
    /// topic -> indices of members subscribed to it.
    subscribers: BTreeMap<&'a str, Vec<usize>>,
    /// Current assignment per member.
    held: Vec<BTreeSet<TopicPartition>>,
    /// Valid previous owner of each partition.
    prior: HashMap<TopicPartition, usize>,
}

/// The balanced, sticky assignment. `claims[i]` is member `i`'s (in id order)
/// previously owned partitions and their generation.
///
/// 1. Each existing partition keeps its previous owner if that owner still
///    subscribes to the topic; of conflicting claims the highest generation
///    wins, and a tie at the highest generation voids the claim.
/// 2. Unowned partitions (fewest candidates first) go to the least-loaded
///    subscribed member.
/// 3. While some member can pass partitions along a chain of subscribed
///    members to a member with at least two fewer partitions, the shortest
///    such chain is applied. At the end no chain can lower the spread, so
///    the assignment is as balanced as the subscriptions allow (counts differ
///    by at most one between members with identical subscriptions), and each
///    step moves as few partitions as possible.
fn sticky_assign(
    ppt: &BTreeMap<String, i32>,
    members: &BTreeMap<String, Subscription>,
    claims: Vec<(Vec<TopicPartition>, i32)>,
) -> BTreeMap<String, Vec<TopicPartition>> {
    let ids: Vec<&String> = members.keys().collect();
    let subs: Vec<BTreeSet<&str>> = members.values().map(|s| known_topics(s, ppt)).collect();
    let mut subscribers: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, topics) in subs.iter().enumerate() {
        for &t in topics {
            subscribers.entry(t).or_default().push(i);
        }
    }

    // 1. Resolve previous ownership.
    let mut best: HashMap<TopicPartition, (i32, Option<usize>)> = HashMap::new();
    for (i, (parts, generation)) in claims.into_iter().enumerate() {
        let parts: BTreeSet<TopicPartition> = parts.into_iter().collect();
        for tp in parts {
            let valid = subs[i].contains(tp.topic.as_str())
                && tp.partition >= 0
                && tp.partition < ppt[&tp.topic];
            if !valid {
                continue;
            }
            match best.get_mut(&tp) {
                Some((g, owner)) if *g == generation => *owner = None,
                Some((g, _)) if *g > generation => {}
                _ => {
                    best.insert(tp, (generation, Some(i)));
                }
            }
        }
    }
    let prior: HashMap<TopicPartition, usize> = best
        .into_iter()
        .filter_map(|(tp, (_, o))| o.map(|o| (tp, o)))
        .collect();
    let mut held = vec![BTreeSet::new(); ids.len()];
    for (tp, &owner) in &prior {
        held[owner].insert(tp.clone());
    }

    // 2. Place unowned partitions.
    let mut unowned: Vec<(usize, TopicPartition)> = Vec::new();
    for (&topic, candidates) in &subscribers {
        for p in 0..ppt[topic] {
            let tp = TopicPartition::new(topic, p);
            if !prior.contains_key(&tp) {
                unowned.push((candidates.len(), tp));
            }
        }
    }
    unowned.sort();
    for (_, tp) in unowned {
        let candidates = &subscribers[tp.topic.as_str()];
        if let Some(&m) = candidates.iter().min_by_key(|&&m| (held[m].len(), m)) {
            held[m].insert(tp);
        }
    }

    // 3. Balance along shortest chains, most-loaded members first.
    let mut st = StickyState {
        subscribers,
        held,
        prior,
    };
    loop {
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&m| (Reverse(st.held[m].len()), m));
        // Only members at least two above the least loaded can be sources.
        let min = order.last().map_or(0, |&m| st.held[m].len());
        let path = order
            .into_iter()
            .take_while(|&m| st.held[m].len() >= min + 2)
            .find_map(|m| st.find_chain(m));
        let Some(path) = path else { break };
        for (from, to, tp) in path {
            st.held[from].remove(&tp);
            st.held[to].insert(tp);
        }
    }
    ids.into_iter()
        .zip(st.held)
        .map(|(id, parts)| (id.clone(), parts.into_iter().collect()))
        .collect()
}

impl StickyState<'_> {
    /// Breadth-first search for the shortest chain of moves from `src` to a
    /// member holding at most `|src| - 2` partitions; among the nearest such
    /// members the least loaded wins. Returns the moves `(from, to, partition)`.
    fn find_chain(&self, src: usize) -> Option<Vec<(usize, usize, TopicPartition)>> {
        let limit = self.held[src].len().checked_sub(2)?;
        let mut prev: Vec<Option<(usize, TopicPartition)>> = vec![None; self.held.len()];
        let mut seen = vec![false; self.held.len()];
        seen[src] = true;
        let mut frontier = vec![src];
        while !frontier.is_empty() {
            let mut next = Vec::new();
            for &x in &frontier {
                // Per topic, the partition `x` gives up most cheaply: one it
                // did not own before this rebalance, else its highest.
                let mut give: BTreeMap<&str, &TopicPartition> = BTreeMap::new();
                for tp in &self.held[x] {
                    let fresh = self.prior.get(tp) != Some(&x);
                    let better = match give.get(tp.topic.as_str()) {
                        Some(cur) => fresh || self.prior.get(*cur) == Some(&x),
                        None => true,
                    };
                    if better {
                        give.insert(tp.topic.as_str(), tp);
                    }
                }
                for (topic, tp) in give {
                    for &y in self.subscribers.get(topic).into_iter().flatten() {
                        if !seen[y] {
                            seen[y] = true;
                            prev[y] = Some((x, tp.clone()));
                            next.push(y);
                        }
                    }
                }
            }
            let sink = next
                .iter()
                .copied()
                .filter(|&y| self.held[y].len() <= limit)
                .min_by_key(|&y| (self.held[y].len(), y));
            if let Some(mut cur) = sink {
                let mut path = Vec::new();
                while let Some((from, tp)) = prev[cur].take() {
                    path.push((from, cur, tp));
                    cur = from;
                }
                return Some(path);
            }
            frontier = next;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::assignor::test_support::*;

    #[test]
    fn sticky_balance_and_stickiness_on_join_and_leave() -> Result<()> {
        let ppt = counts(&[("a", 5), ("b", 7)]);
        let mut members: Members = ["m1", "m2", "m3"]
            .iter()
            .map(|id| (id.to_string(), member(&["a", "b"], vec![], -1)))
            .collect();
        let first = StickyAssignor.assign(&ppt, &members)?;
        assert_eq!(sizes(&first), vec![4, 4, 4]);

        // A member joins: exactly 3 partitions move, all to it.
        let mut round2 = next_round(&members, &first, 1);
        round2.insert("m4".into(), member(&["a", "b"], vec![], -1));
        let second = StickyAssignor.assign(&ppt, &round2)?;
        assert_eq!(sizes(&second), vec![3, 3, 3, 3]);
        assert_eq!(moved(&first, &second), 3);

        // A member leaves: nobody else loses a partition.
        let mut round3 = next_round(&round2, &second, 2);
        round3.remove("m2");
        let third = StickyAssignor.assign(&ppt, &round3)?;
        assert_eq!(sizes(&third), vec![4, 4, 4]);
        let survivors: BTreeMap<_, _> = second
            .iter()
            .filter(|(id, _)| *id != "m2")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(moved(&survivors, &third), 0);

        // The same works through eager sticky user data instead of owned partitions.
        members = next_round(&members, &first, 1);
        for (id, sub) in members.iter_mut() {
            sub.user_data =
                StickyAssignor.subscription_user_data(&sub.topics, &parts(&first, id), 1);
            sub.owned_partitions.clear();
            sub.generation_id = -1;
        }
        members.insert("m4".into(), member(&["a", "b"], vec![], -1));
        assert_eq!(StickyAssignor.assign(&ppt, &members)?, second);
        Ok(())
    }

    #[test]
    fn sticky_differing_subscriptions_uses_chains() -> Result<()> {
        // m1 can only take t1, m3 only t2; m2 bridges. Single moves cannot
        // improve 3/2/1, a chain m1 -> m2 -> m3 can.
        let ppt = counts(&[("t1", 3), ("t2", 3)]);
        let mut members: Members = BTreeMap::new();
        members.insert("m1".into(), member(&["t1"], tps("t1", &[0, 1, 2]), 3));
        members.insert("m2".into(), member(&["t1", "t2"], tps("t2", &[0, 1]), 3));
        members.insert("m3".into(), member(&["t2"], tps("t2", &[2]), 3));
        let out = StickyAssignor.assign(&ppt, &members)?;
        assert_eq!(sizes(&out), vec![2, 2, 2]);
        assert!(parts(&out, "m1").iter().all(|p| p.topic == "t1"));
        assert!(parts(&out, "m3").iter().all(|p| p.topic == "t2"));
        assert_eq!(parts(&out, "m3").len(), 2);
        assert!(parts(&out, "m3").contains(&tp("t2", 2)));
        Ok(())
    }

    #[test]
    fn generation_conflicts_and_stale_claims() -> Result<()> {
        let ppt = counts(&[("t", 4)]);
        let mut members: Members = BTreeMap::new();
        // m1 (gen 5) and m2 (gen 3) both claim t-0: the newer generation wins.
        members.insert("m1".into(), member(&["t"], tps("t", &[0, 1]), 5));
        members.insert("m2".into(), member(&["t"], tps("t", &[0, 2, 9]), 3));
        // m3 claims a partition of a topic it no longer subscribes to.
        members.insert("m3".into(), member(&["u"], tps("t", &[3]), 5));
        let out = StickyAssignor.assign(&ppt, &members)?;
        assert_eq!(parts(&out, "m1"), tps("t", &[0, 1]));
        assert!(parts(&out, "m2").contains(&tp("t", 2)));
        assert_eq!(parts(&out, "m2").len(), 2);
        assert_eq!(parts(&out, "m3"), vec![]);
        Ok(())
    }

    #[test]
    fn cooperative_two_phase_handover() -> Result<()> {
        let a = CooperativeStickyAssignor;
        assert_eq!(
            a.supported_protocols(),
            vec![RebalanceProtocol::Eager, RebalanceProtocol::Cooperative]
        );
        let ppt = counts(&[("t", 6)]);
        let mut members: Members = BTreeMap::new();
        members.insert("a".into(), member(&["t"], tps("t", &[0, 1, 2]), 1));
        members.insert("b".into(), member(&["t"], tps("t", &[3, 4, 5]), 1));
        members.insert("c".into(), member(&["t"], vec![], -1));
        let round1 = a.assign(&ppt, &members)?;
        // c would take one partition from each; both must be revoked first.
        assert_eq!(sizes(&round1), vec![2, 2, 0]);
        let round2 = a.assign(&ppt, &next_round(&members, &round1, 2))?;
        assert_eq!(sizes(&round2), vec![2, 2, 2]);
        assert_eq!(parts(&round2, "a"), parts(&round1, "a"));
        assert_eq!(parts(&round2, "b"), parts(&round1, "b"));
        // Generation travels in user data for old subscription versions.
        let ud = a.subscription_user_data(&[], &[], 7);
        assert_eq!(ud.as_deref(), Some(&[0u8, 0, 0, 7][..]));
        Ok(())
    }
}
