//! With the metadata quorum (design 018), every node's image follows the
//! committed metadata log, whichever node made a change: this task brings
//! the data folder along (Kafka's `BrokerMetadataPublisher`). For each
//! new image: logs of removed topics are deleted, partitions that appeared
//! get their log, changed topic configs reach the logs, and the partitions
//! this node leads are synced. The node that made a change has already
//! done the same under the change lock; redoing it is harmless.

use std::sync::{Arc, Weak};

use sluice_controller::MetadataImage;
use sluice_storage::TopicPartition;

use crate::broker::Broker;

/// Starts following the quorum's applied image (nothing on a single node).
pub(crate) fn spawn(broker: &Arc<Broker>) {
    let Some(quorum) = broker.metadata.quorum() else {
        return;
    };
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        tracing::error!("no async runtime: the data folder will not follow metadata changes");
        return;
    };
    let mut rx = quorum.subscribe();
    let mut last = broker.image();
    let weak: Weak<Broker> = Arc::downgrade(broker);
    handle.spawn(async move {
        while rx.changed().await.is_ok() {
            let next = Arc::clone(&rx.borrow_and_update().image);
            if Arc::ptr_eq(&next, &last) {
                continue;
            }
            let Some(b) = weak.upgrade() else { break };
            let prev = std::mem::replace(&mut last, Arc::clone(&next));
            let done = tokio::task::spawn_blocking(move || b.follow_image(&prev, &next)).await;
            if let Err(e) = done {
                tracing::error!(error = %e, "following a metadata change failed");
            }
        }
    });
}

impl Broker {
    /// Applies the difference between two images to the data folder.
    pub(crate) fn follow_image(&self, prev: &MetadataImage, next: &MetadataImage) {
        let _guard = self.metadata.lock_for_change();
        for t in prev.topics() {
            if next.topic_by_id(&t.id).is_some() {
                continue;
            }
            for &p in t.partitions.keys() {
                let tp = TopicPartition::new(&t.name, p);
                if self.logs.get(&tp).is_none() {
                    continue;
                }
                match self.logs.delete(&tp) {
                    Ok(_) => tracing::info!(partition = %tp, "deleted the log of a removed topic"),
                    Err(e) => {
                        tracing::error!(partition = %tp, error = %e, "cannot delete the log of a removed topic")
                    }
                }
            }
        }
        // The partition layer must let go of removed partitions before
        // new ones of the same name are created.
        self.sync_partitions();
        for t in next.topics() {
            let before = prev.topic_by_id(&t.id);
            let config = match self.log_config(t) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(topic = %t.name, error = %e, "invalid topic config in the metadata");
                    continue;
                }
            };
            for &p in t.partitions.keys() {
                let tp = TopicPartition::new(&t.name, p);
                let new = before.is_none_or(|b| !b.partitions.contains_key(&p));
                if new || self.logs.get(&tp).is_none() {
                    if let Err(e) = self.create_partition_log(&tp, t.id, config.clone()) {
                        tracing::error!(partition = %tp, error = %e, "cannot create a partition's log");
                    }
                } else if before.is_some_and(|b| b.configs != t.configs) {
                    if let Some(log) = self.logs.get(&tp) {
                        log.set_config(config.clone());
                    }
                }
            }
        }
        self.sync_partitions();
    }
}

#[cfg(test)]
mod tests;
