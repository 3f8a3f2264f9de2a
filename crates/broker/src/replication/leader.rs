//! The leader's view of its followers (Kafka's `Partition` with its remote
//! `Replica` states): each follower's log end offset and when it was last
//! caught up, the ISR with at most one AlterPartition in flight, and the
//! high watermark over the maximal ISR (KIP-497: a replica being added
//! counts for the high watermark before the controller commits it, a
//! replica being removed still counts until it does).

use std::collections::{BTreeMap, BTreeSet};

/// What the leader knows of one follower.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FollowerState {
    /// The follower's log end offset (its last fetch offset); -1 unknown.
    pub log_end_offset: i64,
    /// The leader's log end offset at the follower's previous fetch.
    last_fetch_leader_leo: i64,
    last_fetch_ms: u64,
    /// `last_fetch_ms` when the follower last left the ISR: it joins again
    /// only after a later fetch.
    left_isr_fetch_ms: u64,
    /// The last time the follower had everything the leader had.
    pub last_caught_up_ms: u64,
}

/// An ISR change for the controller (AlterPartition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IsrProposal {
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: BTreeSet<i32>,
}

/// The leader-side replication state of one partition.
#[derive(Debug)]
pub(crate) struct LeaderState {
    leader: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    /// The ISR the controller committed.
    isr: BTreeSet<i32>,
    /// The AlterPartition in flight, if any.
    pending: Option<IsrProposal>,
    followers: BTreeMap<i32, FollowerState>,
    high_watermark: i64,
    /// The first offset of this leader epoch: a follower joins the ISR only
    /// once it has fetched past it (it then has this leader's history).
    epoch_start_offset: i64,
    lag_time_max_ms: u64,
}

impl LeaderState {
    /// State on becoming leader of `replicas` in `leader_epoch`. Followers
    /// in the ISR get a full lag time from `now_ms` to show up.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        leader: i32,
        replicas: &[i32],
        isr: &[i32],
        leader_epoch: i32,
        partition_epoch: i32,
        log_end_offset: i64,
        high_watermark: i64,
        lag_time_max_ms: u64,
        now_ms: u64,
    ) -> Self {
        let isr: BTreeSet<i32> = isr.iter().copied().collect();
        let followers = replicas
            .iter()
            .filter(|&&r| r != leader)
            .map(|&r| {
                let caught_up = if isr.contains(&r) { now_ms } else { 0 };
                let state = FollowerState {
                    log_end_offset: -1,
                    last_fetch_leader_leo: -1,
                    last_fetch_ms: 0,
                    left_isr_fetch_ms: 0,
                    last_caught_up_ms: caught_up,
                };
                (r, state)
            })
            .collect();
        Self {
            leader,
            leader_epoch,
            partition_epoch,
            isr,
            pending: None,
            followers,
            high_watermark,
            epoch_start_offset: log_end_offset,
            lag_time_max_ms,
        }
    }

    pub(crate) fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    pub(crate) fn partition_epoch(&self) -> i32 {
        self.partition_epoch
    }

    pub(crate) fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// The ISR the controller committed.
    pub(crate) fn isr(&self) -> &BTreeSet<i32> {
        &self.isr
    }

    /// The replicas the high watermark waits for: the committed ISR plus
    /// a replica being added (a replica being removed stays until the
    /// controller commits the removal).
    pub(crate) fn maximal_isr(&self) -> BTreeSet<i32> {
        let mut isr = self.isr.clone();
        if let Some(p) = &self.pending {
            isr.extend(p.isr.iter().copied());
        }
        isr
    }

    /// A follower fetched from `fetch_offset` at `now_ms` while the
    /// leader's log ended at `leader_leo` (Kafka's
    /// `Replica.updateFetchStateOrThrow`). Returns whether the high
    /// watermark moved. Fetches from non-replicas are ignored.
    pub(crate) fn on_follower_fetch(
        &mut self,
        follower: i32,
        fetch_offset: i64,
        leader_leo: i64,
        now_ms: u64,
    ) -> bool {
        let Some(f) = self.followers.get_mut(&follower) else {
            return false;
        };
        if fetch_offset >= leader_leo {
            f.last_caught_up_ms = f.last_caught_up_ms.max(now_ms);
        } else if fetch_offset >= f.last_fetch_leader_leo {
            f.last_caught_up_ms = f.last_caught_up_ms.max(f.last_fetch_ms);
        }
        f.log_end_offset = fetch_offset;
        f.last_fetch_leader_leo = leader_leo;
        f.last_fetch_ms = now_ms;
        self.maybe_advance_high_watermark(leader_leo)
    }

    /// Moves the high watermark up to the smallest log end offset over the
    /// maximal ISR (the leader's own is `leader_leo`). It never moves back
    /// while this leader leads. Returns whether it moved.
    pub(crate) fn maybe_advance_high_watermark(&mut self, leader_leo: i64) -> bool {
        let mut hw = leader_leo;
        for id in self.maximal_isr() {
            if id == self.leader {
                continue;
            }
            let leo = self.followers.get(&id).map_or(-1, |f| f.log_end_offset);
            hw = hw.min(leo);
        }
        if hw > self.high_watermark {
            self.high_watermark = hw;
            true
        } else {
            false
        }
    }

    /// The ISR change to propose now, if any (none while one is in
    /// flight): followers of the ISR not caught up within
    /// `replica.lag.time.max.ms` leave it (never the leader); a follower
    /// outside it that fetched within that time and reached the high
    /// watermark and this epoch's start joins it.
    pub(crate) fn propose_isr_change(&mut self, now_ms: u64) -> Option<IsrProposal> {
        if self.pending.is_some() {
            return None;
        }
        let lagging: Vec<i32> = self
            .isr
            .iter()
            .copied()
            .filter(|id| *id != self.leader)
            .filter(|id| {
                self.followers.get(id).is_none_or(|f| {
                    now_ms.saturating_sub(f.last_caught_up_ms) > self.lag_time_max_ms
                })
            })
            .collect();
        let mut isr = self.isr.clone();
        if !lagging.is_empty() {
            for id in &lagging {
                isr.remove(id);
            }
        } else {
            // Only a follower fetching now joins (Kafka expands the ISR
            // on a fetch): one that stopped (its folder failed, it hangs)
            // stays out rather than rejoining on its last fetch offset,
            // and one that left the ISR (its leader or its own broker
            // took it out) fetches again first.
            let joining = self.followers.iter().find(|(id, f)| {
                !self.isr.contains(id)
                    && now_ms.saturating_sub(f.last_fetch_ms) <= self.lag_time_max_ms
                    && f.last_fetch_ms > f.left_isr_fetch_ms
                    && f.log_end_offset >= self.high_watermark
                    && f.log_end_offset >= self.epoch_start_offset
            });
            isr.insert(*joining?.0);
        }
        let proposal = IsrProposal {
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            isr,
        };
        self.pending = Some(proposal.clone());
        Some(proposal)
    }

    /// The replica set changed within this leader epoch (a reassignment
    /// adds replicas; removals come with a new leader epoch): new
    /// followers start unknown and out of sync, followers no longer
    /// replicas are forgotten.
    pub(crate) fn set_replicas(&mut self, replicas: &[i32]) {
        self.followers.retain(|id, _| replicas.contains(id));
        for &r in replicas {
            if r != self.leader {
                self.followers.entry(r).or_insert(FollowerState {
                    log_end_offset: -1,
                    last_fetch_leader_leo: -1,
                    last_fetch_ms: 0,
                    left_isr_fetch_ms: 0,
                    last_caught_up_ms: 0,
                });
            }
        }
    }

    /// The controller's answer to the proposal in flight: the committed
    /// ISR and partition epoch, or `None` when it refused it (stale
    /// epochs); either way a new proposal may follow.
    pub(crate) fn on_isr_committed(
        &mut self,
        committed: Option<(BTreeSet<i32>, i32)>,
        leader_leo: i64,
    ) {
        self.pending = None;
        if let Some((isr, partition_epoch)) = committed {
            for (id, f) in &mut self.followers {
                if self.isr.contains(id) && !isr.contains(id) {
                    f.left_isr_fetch_ms = f.last_fetch_ms;
                }
            }
            self.isr = isr;
            self.partition_epoch = partition_epoch;
        }
        self.maybe_advance_high_watermark(leader_leo);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader() -> LeaderState {
        // Leader 1 of replicas 1, 2, 3, all in sync, log end 10.
        LeaderState::new(1, &[1, 2, 3], &[1, 2, 3], 5, 7, 10, 10, 1000, 0)
    }

    #[test]
    fn high_watermark_is_the_smallest_isr_log_end_and_never_moves_back() {
        let mut l = leader();
        assert!(!l.on_follower_fetch(2, 12, 15, 10));
        assert!(l.on_follower_fetch(3, 11, 15, 10));
        assert_eq!(l.high_watermark(), 11);
        assert!(l.on_follower_fetch(3, 15, 15, 20));
        assert_eq!(l.high_watermark(), 12);
        // A follower fetching from an older offset does not pull it back.
        assert!(!l.on_follower_fetch(2, 8, 15, 30));
        assert_eq!(l.high_watermark(), 12);
    }

    #[test]
    fn lagging_followers_leave_and_caught_up_ones_join() {
        let mut l = leader();
        l.on_follower_fetch(2, 10, 10, 500);
        // 3 never fetched: out after the lag time, 2 stays.
        assert_eq!(l.propose_isr_change(900), None);
        let p = l.propose_isr_change(1001).expect("shrink");
        assert_eq!(p.isr, BTreeSet::from([1, 2]));
        assert_eq!((p.leader_epoch, p.partition_epoch), (5, 7));
        assert_eq!(l.propose_isr_change(1002), None, "one change in flight");
        // Until committed, 3 still holds the high watermark back.
        assert!(!l.on_follower_fetch(2, 10, 12, 1003));
        assert_eq!(l.high_watermark(), 10);
        l.on_isr_committed(Some((p.isr, 8)), 12);
        assert!(l.on_follower_fetch(2, 12, 12, 1004));
        assert_eq!(l.high_watermark(), 12);
        // 3 catches up to the high watermark: it joins.
        l.on_follower_fetch(3, 12, 12, 1005);
        let p = l.propose_isr_change(1006).expect("expand");
        assert_eq!(p.isr, BTreeSet::from([1, 2, 3]));
        assert_eq!(p.partition_epoch, 8);
    }

    #[test]
    fn a_follower_that_stopped_fetching_does_not_rejoin() {
        let mut l = leader();
        l.on_follower_fetch(2, 10, 10, 100);
        l.on_follower_fetch(3, 10, 10, 100);
        // 3 stops fetching while caught up: out after the lag time.
        l.on_follower_fetch(2, 10, 10, 1050);
        let p = l.propose_isr_change(1101).expect("shrink");
        assert_eq!(p.isr, BTreeSet::from([1, 2]));
        l.on_isr_committed(Some((p.isr, 8)), 10);
        // Its last fetch offset is still the high watermark, but it does
        // not fetch any more: it stays out.
        assert_eq!(l.propose_isr_change(1102), None);
        l.on_follower_fetch(2, 10, 10, 4999);
        assert_eq!(l.propose_isr_change(5000), None);
        // Fetching again, it joins.
        l.on_follower_fetch(3, 10, 10, 5001);
        assert_eq!(
            l.propose_isr_change(5002).map(|p| p.isr),
            Some(BTreeSet::from([1, 2, 3]))
        );
    }

    #[test]
    fn a_follower_taken_out_of_the_isr_rejoins_only_after_fetching_again() {
        let mut l = leader();
        l.on_follower_fetch(2, 10, 10, 100);
        l.on_follower_fetch(3, 10, 10, 100);
        // Its own broker takes 3 out (its data folder failed): a change
        // committed by someone else, in the same leader epoch.
        l.on_isr_committed(Some((BTreeSet::from([1, 2]), 8)), 10);
        // Caught up at its last fetch, and within the lag time: still out.
        assert_eq!(l.propose_isr_change(200), None);
        l.on_follower_fetch(3, 10, 10, 300);
        assert_eq!(
            l.propose_isr_change(301).map(|p| p.isr),
            Some(BTreeSet::from([1, 2, 3]))
        );
    }

    #[test]
    fn a_follower_joins_only_past_the_epoch_start() {
        let mut l = LeaderState::new(1, &[1, 2], &[1], 3, 0, 20, 20, 1000, 0);
        l.on_follower_fetch(2, 15, 20, 1);
        assert_eq!(l.high_watermark(), 20);
        assert_eq!(l.propose_isr_change(2), None);
        l.on_follower_fetch(2, 20, 20, 3);
        assert_eq!(
            l.propose_isr_change(4).map(|p| p.isr),
            Some(BTreeSet::from([1, 2]))
        );
    }
}
