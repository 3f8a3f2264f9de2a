//! Replica placement for new partitions (Kafka's
//! `assignReplicasToBrokersRackUnaware` / `...RackAware`): the first replica
//! of partition `p` is broker `(start + p) % n`, the others follow it at a
//! shift that grows by one every `n` partitions, so leaders and followers
//! spread evenly. The first replica is the preferred leader.
//!
//! With `broker.rack` set on any broker, the brokers are first listed rack
//! by rack in turn (`getRackAlternatedBrokerList`; brokers without a rack
//! form a rack of their own, as KRaft's placer treats them), and each
//! follower is the next broker at the shift whose rack holds no replica of
//! the partition yet, until every rack has one: a partition's replicas are
//! on as many racks as it can have.

/// Replicas of `partitions` partitions (numbered from `first_partition`)
/// over `brokers` (sorted, distinct), `rf` each. `start` and `shift` are
/// the placer's random start offsets. `None` when there are fewer brokers
/// than `rf`, or none.
pub(crate) fn place(
    brokers: &[i32],
    first_partition: i32,
    partitions: i32,
    rf: usize,
    start: usize,
    shift: usize,
) -> Option<Vec<Vec<i32>>> {
    let n = brokers.len();
    if n == 0 || rf == 0 || rf > n {
        return None;
    }
    let mut out = Vec::with_capacity(partitions.max(0) as usize);
    for p in first_partition..first_partition + partitions {
        let p = p as usize;
        let first = (p + start) % n;
        // The shift moves by one after every full round of leaders.
        let shift = shift + p / n;
        let mut replicas = vec![brokers[first]];
        for j in 0..rf - 1 {
            let step = 1 + (shift + j) % (n - 1).max(1);
            replicas.push(brokers[(first + step) % n]);
        }
        out.push(replicas);
    }
    Some(out)
}

/// [`place`] over brokers with their racks: rack-aware when any broker
/// has a rack. `brokers` sorted by id, distinct.
pub(crate) fn place_with_racks(
    brokers: &[(i32, Option<String>)],
    first_partition: i32,
    partitions: i32,
    rf: usize,
    start: usize,
    shift: usize,
) -> Option<Vec<Vec<i32>>> {
    let ids: Vec<i32> = brokers.iter().map(|(id, _)| *id).collect();
    if brokers.iter().all(|(_, rack)| rack.is_none()) {
        return place(&ids, first_partition, partitions, rf, start, shift);
    }
    let n = brokers.len();
    if n == 0 || rf == 0 || rf > n {
        return None;
    }
    // Rack by rack in turn: r1's first, r2's first, ..., r1's second, ...
    let mut racks: std::collections::BTreeMap<&str, Vec<i32>> = Default::default();
    for (id, rack) in brokers {
        racks
            .entry(rack.as_deref().unwrap_or(""))
            .or_default()
            .push(*id);
    }
    let rack_of: std::collections::HashMap<i32, &str> = brokers
        .iter()
        .map(|(id, rack)| (*id, rack.as_deref().unwrap_or("")))
        .collect();
    let num_racks = racks.len();
    let mut arranged = Vec::with_capacity(n);
    for i in 0.. {
        let before = arranged.len();
        arranged.extend(racks.values().filter_map(|ids| ids.get(i).copied()));
        if arranged.len() == before {
            break;
        }
    }
    let mut out = Vec::with_capacity(partitions.max(0) as usize);
    for p in first_partition..first_partition + partitions {
        let p = p as usize;
        let first = (p + start) % n;
        let shift = shift + p / n;
        let leader = arranged[first];
        let mut replicas = vec![leader];
        let mut used_racks = vec![rack_of[&leader]];
        let mut k = 0;
        while replicas.len() < rf {
            let step = 1 + (shift * num_racks + k) % (n - 1).max(1);
            let b = arranged[(first + step) % n];
            k += 1;
            let rack = rack_of[&b];
            let rack_ok = !used_racks.contains(&rack) || used_racks.len() == num_racks;
            if rack_ok && !replicas.contains(&b) {
                replicas.push(b);
                if !used_racks.contains(&rack) {
                    used_racks.push(rack);
                }
            }
            if k > 4 * n * n {
                return None; // not reachable: every broker is tried
            }
        }
        out.push(replicas);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_are_distinct_and_leaders_spread_evenly() {
        let brokers = [1, 2, 3];
        let placed = place(&brokers, 0, 6, 3, 1, 0).expect("placed");
        for r in &placed {
            let mut s = r.clone();
            s.sort_unstable();
            s.dedup();
            assert_eq!(s, vec![1, 2, 3], "{r:?}");
        }
        let leaders: Vec<i32> = placed.iter().map(|r| r[0]).collect();
        assert_eq!(leaders, vec![2, 3, 1, 2, 3, 1]);
        // The second round of leaders uses the next shift.
        assert_ne!(placed[0], placed[3]);
    }

    #[test]
    fn rf_one_and_too_few_brokers() {
        assert_eq!(place(&[7], 0, 2, 1, 0, 0), Some(vec![vec![7], vec![7]]));
        assert_eq!(place(&[1, 2], 0, 1, 3, 0, 0), None);
        assert_eq!(place(&[], 0, 1, 1, 0, 0), None);
    }

    #[test]
    fn added_partitions_continue_the_stripe() {
        let all = place(&[1, 2, 3, 4], 0, 8, 2, 3, 1).expect("all");
        let tail = place(&[1, 2, 3, 4], 5, 3, 2, 3, 1).expect("tail");
        assert_eq!(&all[5..], &tail[..]);
        for r in &all {
            assert_ne!(r[0], r[1]);
        }
    }

    #[test]
    fn replicas_spread_over_racks() {
        let b = |id: i32, rack: &str| (id, Some(rack.to_string()));
        // Six brokers on three racks, listed unevenly by id.
        let brokers = [
            b(1, "a"),
            b(2, "a"),
            b(3, "b"),
            b(4, "b"),
            b(5, "c"),
            b(6, "c"),
        ];
        for start in 0..6 {
            for shift in 0..5 {
                let placed = place_with_racks(&brokers, 0, 12, 3, start, shift).expect("placed");
                for r in &placed {
                    let mut racks: Vec<&str> = r
                        .iter()
                        .map(|id| {
                            brokers
                                .iter()
                                .find(|(b, _)| b == id)
                                .expect("broker")
                                .1
                                .as_deref()
                                .expect("rack")
                        })
                        .collect();
                    racks.sort_unstable();
                    racks.dedup();
                    assert_eq!(racks.len(), 3, "{r:?} on {racks:?}");
                }
                // Leaders spread over every broker.
                let mut leaders: Vec<i32> = placed.iter().map(|r| r[0]).collect();
                leaders.sort_unstable();
                leaders.dedup();
                assert_eq!(leaders.len(), 6);
            }
        }
        // Two racks, replication factor 3: both racks, then any broker.
        let two = [b(1, "a"), b(2, "a"), b(3, "b")];
        for r in place_with_racks(&two, 0, 6, 3, 0, 0).expect("placed") {
            let mut s = r.clone();
            s.sort_unstable();
            assert_eq!(s, vec![1, 2, 3]);
        }
        // No racks: the rack-unaware placement.
        let none = [(1, None), (2, None), (3, None)];
        assert_eq!(
            place_with_racks(&none, 0, 6, 2, 1, 1),
            place(&[1, 2, 3], 0, 6, 2, 1, 1)
        );
        assert_eq!(place_with_racks(&two, 0, 1, 4, 0, 0), None);
    }
}
