//! Replica placement for new partitions (Kafka's rack-unaware
//! `StripedReplicaPlacer` / `assignReplicasToBrokersRackUnaware`): the
//! first replica of partition `p` is broker `(start + p) % n`, the others
//! follow it at a shift that grows by one every `n` partitions, so leaders
//! and followers spread evenly. The first replica is the preferred leader.

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
}
