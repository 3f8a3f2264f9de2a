//! The task placement algorithm, pure and deterministic: spread tasks over
//! "bins" (instances, then the threads of one instance) in proportion to
//! their capacity, sticky to where each task ran or has state.
//!
//! Stateful tasks are placed first (balanced among themselves, so state is
//! spread evenly), then stateless tasks fill up to the overall balance.
//! Within each pass a task goes, in order of preference, to
//! 1. the bin that ran it as active last generation, if under its quota;
//! 2. (stateful only) the bin with the most state for it — the largest
//!    changelog offset sum, i.e. the smallest lag — if under its quota;
//! 3. the least loaded bin (assigned / capacity) under its quota.
//!
//! This is the balance-and-stickiness core of Kafka's
//! `HighAvailabilityTaskAssignor` without warm-up replicas and probing
//! rebalances: a task moves at once to the bin the balance wants.

use std::collections::{BTreeMap, BTreeSet};

use super::info::LATEST_OFFSET;
use crate::task_id::TaskId;

/// One place tasks can go (an instance, or a thread of one).
#[derive(Debug, Clone, Default)]
pub struct Bin {
    /// Relative capacity (threads); at least 1 is assumed.
    pub capacity: usize,
    /// Tasks this bin ran as active in the previous generation.
    pub prev_active: BTreeSet<TaskId>,
    /// Changelog offset sums of tasks with local state ([`LATEST_OFFSET`]
    /// means caught up).
    pub offset_sums: BTreeMap<TaskId, i64>,
}

/// Places `stateful` then `stateless` tasks on `bins`; returns the tasks of
/// each bin (same index), sorted. Empty `bins` gives an empty result.
pub fn distribute(stateful: &[TaskId], stateless: &[TaskId], bins: &[Bin]) -> Vec<Vec<TaskId>> {
    let mut out: Vec<Vec<TaskId>> = vec![Vec::new(); bins.len()];
    if bins.is_empty() {
        return out;
    }
    let stateful_quota = quotas(stateful.len(), bins, &[]);
    place(stateful, &stateful_quota, bins, true, &mut out);
    let total_quota = quotas(stateful.len() + stateless.len(), bins, &out);
    let rest: Vec<usize> = total_quota
        .iter()
        .zip(&out)
        .map(|(q, have)| q.saturating_sub(have.len()))
        .collect();
    place(stateless, &rest, bins, false, &mut out);
    for tasks in &mut out {
        tasks.sort();
    }
    out
}

/// How many of `n` tasks each bin should get: proportional to capacity,
/// remainders to the largest fractional shares, ties to the bins already
/// holding more (`have`), then to lower indexes.
fn quotas(n: usize, bins: &[Bin], have: &[Vec<TaskId>]) -> Vec<usize> {
    let caps: Vec<usize> = bins.iter().map(|b| b.capacity.max(1)).collect();
    let total: usize = caps.iter().sum();
    let mut q: Vec<usize> = caps.iter().map(|c| n * c / total).collect();
    let mut left = n - q.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..bins.len()).collect();
    order.sort_by_key(|&i| {
        let frac = n * caps[i] % total;
        let held = have.get(i).map_or(0, Vec::len);
        (
            std::cmp::Reverse(frac),
            std::cmp::Reverse(held),
            std::cmp::Reverse(bins[i].prev_active.len()),
            i,
        )
    });
    for i in order {
        if left == 0 {
            break;
        }
        q[i] += 1;
        left -= 1;
    }
    q
}

/// Places `tasks` given per-bin `quota` (how many more each may take).
fn place(tasks: &[TaskId], quota: &[usize], bins: &[Bin], stateful: bool, out: &mut [Vec<TaskId>]) {
    let mut taken = vec![0usize; bins.len()];
    let mut left: Vec<TaskId> = Vec::new();
    let mut sorted: Vec<TaskId> = tasks.to_vec();
    sorted.sort();
    sorted.dedup();
    // 1. Sticky to the previous active owner.
    for t in sorted {
        match bins.iter().position(|b| b.prev_active.contains(&t)) {
            Some(i) if taken[i] < quota[i] => {
                taken[i] += 1;
                out[i].push(t);
            }
            _ => left.push(t),
        }
    }
    // 2. Stateful: to the bin with the most state.
    let mut rest = Vec::new();
    for t in left {
        let best = if stateful {
            bins.iter()
                .enumerate()
                .filter(|(i, _)| taken[*i] < quota[*i])
                .filter_map(|(i, b)| b.offset_sums.get(&t).map(|s| (i, *s)))
                .max_by_key(|(i, s)| (rank(*s), std::cmp::Reverse(*i)))
                .map(|(i, _)| i)
        } else {
            None
        };
        match best {
            Some(i) => {
                taken[i] += 1;
                out[i].push(t);
            }
            None => rest.push(t),
        }
    }
    // 3. The least loaded bin with room (or, when the quotas are used up,
    //    the least loaded bin).
    for t in rest {
        let load = |i: usize, out: &[Vec<TaskId>]| {
            // Compare out[i].len() / capacity without floats.
            (out[i].len() * 1_000_000) / bins[i].capacity.max(1)
        };
        let with_room = (0..bins.len())
            .filter(|&i| taken[i] < quota[i])
            .min_by_key(|&i| (load(i, out), i));
        let i = with_room.unwrap_or_else(|| {
            (0..bins.len())
                .min_by_key(|&i| (load(i, out), i))
                .unwrap_or(0)
        });
        taken[i] += 1;
        out[i].push(t);
    }
}

/// Orders offset sums: caught-up ([`LATEST_OFFSET`]) above everything,
/// then larger sums (less lag).
fn rank(sum: i64) -> i64 {
    if sum == LATEST_OFFSET {
        i64::MAX
    } else {
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tasks(n: i32) -> Vec<TaskId> {
        (0..n).map(|p| TaskId::new(0, p)).collect()
    }

    fn bin(cap: usize, prev: &[TaskId]) -> Bin {
        Bin {
            capacity: cap,
            prev_active: prev.iter().copied().collect(),
            offset_sums: BTreeMap::new(),
        }
    }

    #[test]
    fn proportional_to_capacity() {
        let out = distribute(&tasks(9), &[], &[bin(1, &[]), bin(2, &[])]);
        assert_eq!(out[0].len(), 3);
        assert_eq!(out[1].len(), 6);
        let out = distribute(&tasks(7), &[], &[bin(1, &[]), bin(1, &[]), bin(1, &[])]);
        let mut sizes: Vec<usize> = out.iter().map(Vec::len).collect();
        sizes.sort();
        assert_eq!(sizes, vec![2, 2, 3]);
    }

    #[test]
    fn sticky_join_and_leave() {
        let all = tasks(6);
        let one = distribute(&all, &[], &[bin(1, &[])]);
        assert_eq!(one[0], all);
        // A second bin joins: the first keeps three of its own, gives three.
        let two = distribute(&all, &[], &[bin(1, &one[0]), bin(1, &[])]);
        assert_eq!((two[0].len(), two[1].len()), (3, 3));
        assert!(two[0].iter().all(|t| one[0].contains(t)));
        // Same members again: nothing moves.
        let again = distribute(&all, &[], &[bin(1, &two[0]), bin(1, &two[1])]);
        assert_eq!(again, two);
        // The first leaves: the survivor keeps its three and takes the rest.
        let left = distribute(&all, &[], &[bin(1, &two[1])]);
        assert_eq!(left[0], all);
    }

    #[test]
    fn state_attracts_tasks() {
        let all = tasks(4);
        let mut a = bin(1, &[]);
        let mut b = bin(1, &[]);
        // b has (stale) state for 0_0 and 0_1, a for 0_2 with more data.
        b.offset_sums.insert(TaskId::new(0, 0), 10);
        b.offset_sums.insert(TaskId::new(0, 1), 10);
        a.offset_sums.insert(TaskId::new(0, 1), 5);
        a.offset_sums.insert(TaskId::new(0, 2), 100);
        let out = distribute(&all, &[], &[a, b]);
        assert!(out[1].contains(&TaskId::new(0, 0)));
        assert!(out[1].contains(&TaskId::new(0, 1)));
        assert!(out[0].contains(&TaskId::new(0, 2)));
    }

    #[test]
    fn stateful_and_stateless_each_spread() {
        let stateful: Vec<TaskId> = (0..4).map(|p| TaskId::new(0, p)).collect();
        let stateless: Vec<TaskId> = (0..4).map(|p| TaskId::new(1, p)).collect();
        let out = distribute(&stateful, &stateless, &[bin(1, &[]), bin(1, &[])]);
        for tasks in &out {
            assert_eq!(tasks.iter().filter(|t| t.subtopology == 0).count(), 2);
            assert_eq!(tasks.len(), 4);
        }
    }
}
