//! The automatic preferred-leader rebalance (`auto.leader.rebalance.enable`,
//! Kafka's `QuorumController.maybeBalancePartitionLeaders`): every
//! `leader.imbalance.check.interval.seconds`, the node that leads the
//! metadata quorum (when that is a controller-only node: the lowest-id
//! live broker, `Broker::has_controller_duties`) elects the first replica of each partition led by
//! another replica, when the first is in the ISR and not fenced
//! (`sluice_controller::election::rebalance`), at most 1,000 partitions a
//! round. Leaderships that moved on a failure so come back once the
//! preferred broker has caught up. A single node has nothing to balance.

use std::sync::Weak;
use std::time::Duration;

use tokio::sync::watch;

use crate::broker::Broker;

/// Kafka's `maxElectionsPerImbalance`.
const MAX_ELECTIONS_PER_ROUND: usize = 1_000;

/// Rebalances every check interval until `stop` turns true.
pub(crate) async fn run(broker: Weak<Broker>, mut stop: watch::Receiver<bool>) {
    loop {
        let Some(b) = broker.upgrade() else { return };
        let period = Duration::from_secs(
            u64::try_from(b.settings.leader_imbalance_check_interval_seconds.max(1)).unwrap_or(300),
        );
        drop(b);
        tokio::select! {
            _ = stop.changed() => {}
            () = tokio::time::sleep(period) => {}
        }
        if *stop.borrow() {
            return;
        }
        let Some(b) = broker.upgrade() else { return };
        if b.settings.auto_leader_rebalance_enable
            && b.metadata.quorum().is_some()
            && b.has_controller_duties()
        {
            let done = tokio::task::spawn_blocking(move || b.rebalance_leaders()).await;
            if let Err(e) = done {
                tracing::error!(error = %e, "leader rebalance task failed");
            }
        }
    }
}

impl Broker {
    /// One rebalance round; returns how many leaderships moved.
    pub(crate) fn rebalance_leaders(&self) -> usize {
        let records = {
            let _guard = self.metadata.lock_for_change();
            let image = self.image();
            let records = sluice_controller::election::rebalance(&image, MAX_ELECTIONS_PER_ROUND);
            if records.is_empty() {
                return 0;
            }
            if let Err(e) = self.metadata.append(&records) {
                tracing::warn!(error = %e, "preferred leader elections not committed");
                return 0;
            }
            records
        };
        tracing::info!(
            partitions = records.len(),
            "preferred replicas lead again (auto.leader.rebalance.enable)"
        );
        self.sync_partitions();
        records.len()
    }
}
