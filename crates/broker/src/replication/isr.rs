//! ISR changes (Kafka's `AlterPartition`): the leader of each partition
//! asks, every quarter of `replica.lag.time.max.ms` (at most each second),
//! whether its rules ([`crate::replication::leader`]) want a follower out
//! of the ISR (not caught up within the lag time) or in (caught up to the
//! high watermark and this leader epoch's start). A change is written to
//! the metadata quorum as the partition's new state: the new ISR and the
//! next partition epoch, only if the image still holds the leader epoch
//! and partition epoch the proposal was made in (Kafka's
//! FENCED_LEADER_EPOCH / INVALID_UPDATE_VERSION checks). Every node then
//! follows the image; the leader's partition learns the committed ISR from
//! it (`Partition::update`).
//!
//! The epochs are checked on the proposing node's image under the change
//! lock, and again by the quorum leader when it commits the record
//! (`sluice_controller::quorum::proposer::check`: a partition record whose
//! partition epoch is not the next one is refused), so a proposal made on
//! a stale image, racing an election, never lands.

use std::sync::{Arc, Weak};
use std::time::Duration;

use sluice_controller::reassignment;
use tokio::sync::watch;

use super::leader::IsrProposal;
use crate::broker::Broker;
use crate::partition::Partition;

/// Checks every led partition for an ISR change until `stop` turns true.
pub(crate) async fn run(broker: Weak<Broker>, mut stop: watch::Receiver<bool>) {
    loop {
        let Some(b) = broker.upgrade() else { return };
        let period = Duration::from_millis((b.lag_time_max_ms() / 4).clamp(10, 1000));
        if b.metadata.quorum().is_some() {
            for p in b.partitions.all() {
                if let Some(proposal) = p.propose_isr_change() {
                    let b2 = Arc::clone(&b);
                    let done =
                        tokio::task::spawn_blocking(move || b2.alter_partition(&p, &proposal))
                            .await;
                    if let Err(e) = done {
                        tracing::error!(error = %e, "ISR change task failed");
                    }
                }
            }
        }
        drop(b);
        tokio::select! {
            _ = stop.changed() => {}
            () = tokio::time::sleep(period) => {}
        }
        if *stop.borrow() {
            return;
        }
    }
}

impl Broker {
    /// Commits `proposal` for `p` through the metadata quorum, or tells the
    /// partition it was refused.
    fn alter_partition(&self, p: &Arc<Partition>, proposal: &IsrProposal) {
        let tp = p.topic_partition().clone();
        let record = {
            let _guard = self.metadata.lock_for_change();
            let image = self.image();
            let current = image
                .topic(&tp.topic)
                .and_then(|t| Some((t.id, t.partitions.get(&tp.partition)?.clone())));
            match current {
                Some((topic_id, state))
                    if state.leader == self.node_id
                        && state.leader_epoch == proposal.leader_epoch
                        && state.partition_epoch == proposal.partition_epoch
                        // A fenced broker, or one in controlled
                        // shutdown, never joins (Kafka's
                        // INELIGIBLE_REPLICA).
                        && proposal.isr.iter().all(|r| {
                            state.isr.contains(r)
                                || (self.is_broker(*r)
                                    && !image.broker(*r).is_some_and(|b| b.in_controlled_shutdown))
                        }) =>
                {
                    // The ISR in replica order; the change completes an
                    // ongoing reassignment once every target replica is
                    // in it (Kafka's PartitionChangeBuilder), electing a
                    // new leader if this one was removed.
                    let isr: Vec<i32> = state
                        .replicas
                        .iter()
                        .copied()
                        .filter(|r| proposal.isr.contains(r))
                        .collect();
                    let mut target = reassignment::Target::of(&state);
                    target.isr = isr.clone();
                    // This leader proposes the change: it stays leader while
                    // it is in the ISR (as before reassignments); only a
                    // completed reassignment that removes it elects another.
                    let Some(next) = reassignment::build(&state, target, |id| {
                        id == self.node_id || reassignment::may_lead(&image, id)
                    }) else {
                        return p.isr_change_refused();
                    };
                    let record = reassignment::record(topic_id, tp.partition, &next);
                    match self.metadata.append(std::slice::from_ref(&record)) {
                        Ok(_) => {
                            tracing::info!(
                                partition = %tp, from = ?state.isr, to = ?next.isr,
                                partition_epoch = next.partition_epoch, "ISR changed"
                            );
                            if state.is_reassigning() && !next.is_reassigning() {
                                tracing::info!(partition = %tp, replicas = ?next.replicas, leader = next.leader, "reassignment completed");
                            }
                            Some(())
                        }
                        Err(e) => {
                            tracing::warn!(partition = %tp, error = %e, "ISR change not committed");
                            None
                        }
                    }
                }
                _ => {
                    tracing::info!(partition = %tp, "ISR change refused: stale leader or partition epoch, or a fenced replica");
                    None
                }
            }
        };
        match record {
            Some(()) => self.sync_partitions(),
            None => p.isr_change_refused(),
        }
    }
}
