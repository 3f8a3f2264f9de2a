//! A failed data folder, cluster side (Kafka's `ReplicaManager.handleLogDirFailure`
//! with KIP-858's `handleDirectoriesOffline` on the controller): when the
//! log manager takes one of this node's `log.dirs` offline
//! ([`sluice_storage::LogManager::offline_dirs`]), the partitions this
//! node leads whose log is in it would answer KAFKA_STORAGE_ERROR for as
//! long as the node runs. With the metadata quorum, this node therefore
//! writes, through the quorum and as one change, the moves
//! [`sluice_controller::election::on_replicas_offline`] computes on its
//! image: each such leadership goes to the first other ISR member that
//! may lead (next leader epoch) and this node leaves the ISR. A partition
//! whose ISR is this node alone keeps it (nobody else has its records;
//! no unclean election). The quorum leader refuses a change made on a
//! stale partition state; a change not committed (that, or no quorum
//! leader) is computed again on the next round. The folders are looked at
//! again every round while offline, so a leadership this node gets back
//! in the meantime (an election while it was still in an ISR it follows)
//! is handed over again; once handed over, a round finds nothing to do.
//!
//! Nothing brings this node back for those partitions while the folder is
//! offline: it is out of their ISR, every election (a fenced leader, an
//! unfenced broker, the preferred-leader rebalance, ElectLeaders) picks
//! from the ISR, and its replica fetcher leaves offline logs alone
//! ([`crate::replication::fetcher`]), so no leader sees it catch up. A
//! partition it follows needs nothing here: it stops fetching, and its
//! leader takes it out of the ISR after `replica.lag.time.max.ms`.
//!
//! The single combined node (no quorum) has no other replica: its
//! partitions in the folder stay offline.

use std::sync::Weak;
use std::time::Duration;

use sluice_controller::election::on_replicas_offline;
use sluice_controller::MetadataRecord;
use sluice_storage::TopicPartition;
use tokio::sync::watch;

use crate::broker::Broker;

/// How often the folders are looked at.
const CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// Hands over the leaderships of every offline folder, until `stop`
/// turns true.
pub(crate) async fn run(broker: Weak<Broker>, mut stop: watch::Receiver<bool>) {
    loop {
        let Some(b) = broker.upgrade() else { return };
        if b.metadata.quorum().is_some() {
            let done = tokio::task::spawn_blocking(move || {
                for dir in b.logs.offline_dirs() {
                    b.hand_over_offline_dir(dir);
                }
            })
            .await;
            if let Err(e) = done {
                tracing::error!(error = %e, "offline folder task failed");
            }
        }
        tokio::select! {
            _ = stop.changed() => {}
            () = tokio::time::sleep(CHECK_INTERVAL) => {}
        }
        if *stop.borrow() {
            return;
        }
    }
}

impl Broker {
    /// Moves the leaderships of the partitions whose log is in offline
    /// folder `dir` (index in `log.dirs`) to other ISR members and takes
    /// this node out of their ISR. `false`: the change was not committed;
    /// try again.
    pub(crate) fn hand_over_offline_dir(&self, dir: usize) -> bool {
        let in_dir = |topic: &str, partition: i32| {
            self.logs
                .get(&TopicPartition::new(topic, partition))
                .is_some_and(|log| self.logs.dir_index_of(&log) == Some(dir))
        };
        // Nothing to do (every round once handed over): no lock taken.
        if on_replicas_offline(&self.image(), self.node_id, in_dir).is_empty() {
            return true;
        }
        let (records, image) = {
            let _guard = self.metadata.lock_for_change();
            let image = self.image();
            let records = on_replicas_offline(&image, self.node_id, in_dir);
            if records.is_empty() {
                return true;
            }
            if let Err(e) = self.metadata.append(&records) {
                tracing::warn!(error = %e, "leaderships of an offline folder not handed over; retrying");
                return false;
            }
            (records, image)
        };
        let folder = self.logs.dirs().get(dir).cloned().unwrap_or_default();
        for r in &records {
            let MetadataRecord::Partition {
                topic_id,
                partition_id,
                isr,
                leader,
                leader_epoch,
                ..
            } = r
            else {
                continue;
            };
            let topic = image
                .topic_by_id(topic_id)
                .map_or_else(|| topic_id.to_string(), |t| t.name.clone());
            tracing::warn!(
                partition = %format!("{topic}-{partition_id}"),
                dir = %folder.display(), leader, leader_epoch, ?isr,
                "the partition's log is in an offline folder: leadership handed over, this broker left the ISR"
            );
        }
        self.sync_partitions();
        true
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use crate::handlers::test_support::{append, open_broker};

    /// The single combined node: every replica is alone in its ISR, so a
    /// failed folder changes nothing in the metadata; its partitions stay
    /// offline here.
    #[test]
    fn a_single_node_keeps_its_offline_partitions() {
        let root = tempfile::tempdir().expect("tempdir");
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        let dirs = format!("{},{}", a.display(), b.display());
        let broker = open_broker(&a, &[("log.dirs", dirs.as_str())]);
        broker.create_topic("t", 2, 1, &[], false).expect("create");
        append(&broker, "t", 1, 2);
        let log = broker.log("t", 1).expect("log");
        assert_eq!(broker.logs.dir_index_of(&log), Some(1));
        std::fs::remove_dir_all(b.join("t-1")).expect("rm");
        assert!(log.flush().is_err());
        assert_eq!(broker.logs.offline_dirs(), BTreeSet::from([1]));
        let before = broker.image();
        assert!(broker.hand_over_offline_dir(1));
        assert_eq!(*broker.image(), *before);
        assert!(broker.partition("t", 1).is_some());
        broker.shutdown().expect("shutdown");
    }
}
