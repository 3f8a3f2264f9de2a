//! Controlled shutdown (Kafka's `BrokerLifecycleManager.beginControlledShutdown`
//! and the controller's `handleBrokerInControlledShutdown`): a node of a
//! metadata quorum that is asked to stop (SIGTERM) first commits, through
//! the quorum, the change that marks it in controlled shutdown, moves each
//! leadership it holds to another in-sync replica (next leader epoch) and
//! takes it out of every ISR ([`sluice_controller::election::on_controlled_shutdown`]).
//! It waits until the change is committed and its partition layer leads
//! nothing, then fences itself (Kafka's SHUTDOWN_NOW: it leaves the broker
//! lists) and the server stops. While marked, it is neither elected nor
//! let back into an ISR; it registers anew when it starts again.
//!
//! The wait is bounded by [`CONTROLLED_SHUTDOWN_TIMEOUT`] (Kafka bounds it
//! by the server's shutdown deadline), and ends early when no quorum
//! leader answers within the quorum's request timeout (the last nodes of
//! a cluster stopping); then the node stops anyway and the quorum fences
//! it once its session expires, as after a crash. With
//! `controlled.shutdown.enable=false`, or on the single combined node,
//! nothing happens here.

use std::sync::Arc;
use std::time::Duration;

use sluice_controller::election::on_controlled_shutdown;
use sluice_controller::quorum::MetadataQuorum;
use sluice_controller::{ControllerError, MetadataRecord};
use tokio::time::Instant;

use crate::broker::Broker;

/// The longest a controlled shutdown waits before the node stops anyway.
pub(crate) const CONTROLLED_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// How controlled shutdown ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Not a multi-node quorum, or `controlled.shutdown.enable=false`.
    NotNeeded,
    /// Committed: this node leads nothing and is in no ISR it can leave.
    Done,
    /// The deadline passed first.
    TimedOut,
}

impl Broker {
    /// Runs controlled shutdown, waiting at most `timeout`.
    pub(crate) async fn controlled_shutdown(self: &Arc<Self>, timeout: Duration) -> Outcome {
        let Some(quorum) = self.metadata.quorum().cloned() else {
            return Outcome::NotNeeded;
        };
        if !self.config.bool("controlled.shutdown.enable") {
            return Outcome::NotNeeded;
        }
        let deadline = Instant::now() + timeout;
        // The static default; the topic configs and the cluster-wide
        // dynamic one come from the image.
        let unclean_default = self.config.bool("unclean.leader.election.enable");
        tracing::info!(
            node_id = self.node_id,
            "controlled shutdown: moving leadership away"
        );
        loop {
            // Computed on this node's image; the quorum leader refuses a
            // change made on a stale partition state, then it is redone.
            let records = match on_controlled_shutdown(&self.image(), self.node_id, unclean_default)
            {
                // Never registered: nobody expects anything of it.
                None => return Outcome::NotNeeded,
                Some(r) if r.is_empty() => break,
                Some(r) => r,
            };
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, quorum.write(records)).await {
                Ok(Ok(_)) => continue,
                // No quorum leader answered within the quorum's request
                // timeout (the last nodes of a cluster stopping): nobody
                // can take the leaderships over.
                Ok(Err(e @ ControllerError::NotController(_))) => {
                    tracing::warn!(error = %e, "controlled shutdown not possible without a quorum leader");
                    return Outcome::TimedOut;
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "controlled shutdown change not committed; retrying")
                }
                Err(_) => break,
            }
            if Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The partition layer follows the committed image.
        loop {
            let done = on_controlled_shutdown(&self.image(), self.node_id, unclean_default)
                .is_none_or(|r| r.is_empty())
                && self.partitions.all().is_empty();
            if done {
                self.fence_self(&quorum, deadline).await;
                tracing::info!(node_id = self.node_id, "controlled shutdown complete");
                return Outcome::Done;
            }
            if Instant::now() >= deadline {
                tracing::error!(
                    node_id = self.node_id,
                    "Timed out waiting for the controller to approve controlled shutdown"
                );
                return Outcome::TimedOut;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The last step (Kafka's SHUTDOWN_NOW, where the controller fences
    /// the broker): this node leaves the broker lists before it exits.
    async fn fence_self(&self, quorum: &MetadataQuorum, deadline: Instant) {
        let Some(reg) = self.image().broker(self.node_id).cloned() else {
            return;
        };
        if reg.fenced {
            return;
        }
        let record = MetadataRecord::BrokerRegistrationChange {
            broker_id: self.node_id,
            broker_epoch: reg.epoch,
            fenced: 1,
            in_controlled_shutdown: 0,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, quorum.write(vec![record])).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "fencing at the end of controlled shutdown not committed")
            }
            Err(_) => tracing::warn!("fencing at the end of controlled shutdown timed out"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::test_support::open_broker;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_single_node_has_nothing_to_hand_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        let b = Arc::clone(&broker);
        tokio::task::spawn_blocking(move || b.create_topic("t", 2, 1, &[], false))
            .await
            .expect("task")
            .expect("topic");
        let before = broker.image();
        assert_eq!(
            broker.controlled_shutdown(Duration::from_secs(5)).await,
            Outcome::NotNeeded
        );
        // Unchanged: it still leads its partitions, nothing was written.
        assert_eq!(broker.partitions.all().len(), 2);
        assert_eq!(*broker.image(), *before);
        let b = Arc::clone(&broker);
        tokio::task::spawn_blocking(move || b.shutdown())
            .await
            .expect("task")
            .expect("shutdown");
    }
}
