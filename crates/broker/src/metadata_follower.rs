//! With the metadata quorum (design 018), every node's image follows the
//! committed metadata log, whichever node made a change: this task brings
//! the data folder along (Kafka's `BrokerMetadataPublisher`). For each
//! new image: logs of removed topics are deleted, partitions that appeared
//! get their log on the nodes that are their replicas (and only there; a
//! node a reassignment adds creates it then), a node a committed
//! reassignment removed deletes its log, changed topic configs reach the
//! logs, and the partitions this node leads are synced. The node that made a change has already
//! done the same under the change lock; redoing it is harmless.

use std::sync::{Arc, Weak};

use sluice_controller::MetadataImage;
use sluice_storage::TopicPartition;

use crate::broker::Broker;

/// Brokers (by advertised port, unique in a test process) whose data
/// folders do not follow new images until released (tests: a node that
/// applies a committed image later than the others).
#[cfg(test)]
pub(crate) static HELD: std::sync::Mutex<std::collections::BTreeSet<u16>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

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
    broker.image_followed.send_replace(Some(Arc::clone(&last)));
    let weak: Weak<Broker> = Arc::downgrade(broker);
    handle.spawn(async move {
        while rx.changed().await.is_ok() {
            let next = Arc::clone(&rx.borrow_and_update().image);
            if Arc::ptr_eq(&next, &last) {
                continue;
            }
            let Some(b) = weak.upgrade() else { break };
            #[cfg(test)]
            while HELD
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&b.advertised.port)
            {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            let prev = std::mem::replace(&mut last, Arc::clone(&next));
            let done = tokio::task::spawn_blocking(move || {
                b.follow_image(&prev, &next);
                b.image_followed.send_replace(Some(next));
            })
            .await;
            if let Err(e) = done {
                tracing::error!(error = %e, "following a metadata change failed");
            }
        }
    });
}

/// Registers this node as a broker of the quorum's cluster (Kafka's
/// BrokerRegistration: a RegisterBrokerRecord with its listener and
/// `broker.rack`), retrying in the background until a quorum leader takes
/// it (the first voters to start have no majority yet). The broker epoch is
/// the registration time in ms, so a restart registers a newer one.
pub(crate) fn register(broker: &Arc<Broker>) {
    if broker.metadata.quorum().is_none() {
        return;
    }
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let record = sluice_controller::MetadataRecord::RegisterBroker {
        broker_id: broker.node_id,
        incarnation_id: uuid::Uuid::new_v4(),
        broker_epoch: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64),
        endpoints: vec![sluice_controller::records::BrokerEndpoint {
            name: broker.advertised.name.clone(),
            host: broker.advertised.host.clone(),
            port: broker.advertised.port,
            security_protocol: 0,
        }],
        rack: broker.rack(),
        fenced: false,
    };
    let weak = Arc::downgrade(broker);
    handle.spawn(async move {
        loop {
            let Some(b) = weak.upgrade() else { return };
            let rec = record.clone();
            let b2 = Arc::clone(&b);
            let done =
                tokio::task::spawn_blocking(move || b2.metadata.append(std::slice::from_ref(&rec)))
                    .await;
            match done {
                Ok(Ok(_)) => {
                    b.registered
                        .store(true, std::sync::atomic::Ordering::Release);
                    // The replica fetchers wait for the registration.
                    b.image_followed.send_modify(|_| {});
                    tracing::info!("registered with the metadata quorum");
                    return;
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "broker registration not taken yet; retrying")
                }
                Err(e) => tracing::error!(error = %e, "broker registration task failed"),
            }
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
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
        // new ones of the same name are created, and of partitions this
        // node no longer leads before their logs go. New partitions get
        // their logs below, and the last sync makes them led.
        self.sync_partitions_before_new_logs();
        for t in next.topics() {
            let before = prev.topic_by_id(&t.id);
            let config = match self.log_config(t) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(topic = %t.name, error = %e, "invalid topic config in the metadata");
                    continue;
                }
            };
            for (&p, state) in &t.partitions {
                let tp = TopicPartition::new(&t.name, p);
                let was_replica = before
                    .and_then(|b| b.partitions.get(&p))
                    .is_some_and(|s| s.replicas.contains(&self.node_id));
                if !state.replicas.contains(&self.node_id) {
                    // Only the committed change that takes this node out
                    // of the replicas (a completed or cancelled
                    // reassignment) deletes its log.
                    if was_replica && self.logs.get(&tp).is_some() {
                        match self.logs.delete(&tp) {
                            Ok(_) => {
                                tracing::info!(partition = %tp, replicas = ?state.replicas, "deleted the log of a partition this node is no longer a replica of")
                            }
                            Err(e) => {
                                tracing::error!(partition = %tp, error = %e, "cannot delete the log of a removed replica")
                            }
                        }
                    }
                    continue;
                }
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
