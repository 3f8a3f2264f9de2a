//! Start-up reconciliation of the data folder with the metadata, and the
//! creation of partition folders.
//!
//! Nothing is deleted at start on absence of evidence: a partition folder
//! is deleted only when the metadata log replayed at start records the
//! removal of its topic (matched by the topic id in `partition.metadata`,
//! or by name for folders written before that file existed). A folder the
//! metadata does not know, or of a partition this node is not a replica
//! of, is renamed aside (`<topic>-<partition>.<id>-stray`, Kafka's stray
//! logs) and kept. Logs are created only for the partitions this node is a
//! replica of.

use std::sync::Arc;

use sluice_storage::{partition_metadata, Log, LogConfig, TopicPartition};
use uuid::Uuid;

use crate::broker::Broker;
use crate::error::Result;

/// What start-up does with a partition folder.
enum Folder {
    Keep,
    /// Its topic's deletion is recorded.
    Delete(String),
    /// Unknown to the metadata: renamed aside, kept.
    Stray(String),
}

impl Broker {
    /// Brings the data folder in line with the metadata. Data is deleted
    /// only on a recorded deletion: a folder whose topic's removal the
    /// replayed metadata log records (a crash between the metadata change
    /// and the folder change). A folder the metadata does not know is
    /// renamed aside as a stray (`<tp>.<id>-stray`) and kept. Partitions the
    /// metadata names get their log (created if missing), their topic
    /// config, and `partition.metadata`.
    pub(crate) fn reconcile_logs(&self) -> Result<()> {
        let image = self.metadata.image();
        let removals = self.metadata.recorded_removals();
        for log in self.logs.logs() {
            let tp = log.topic_partition().clone();
            let on_disk = partition_metadata::read(log.dir());
            if let Err(e) = &on_disk {
                tracing::warn!(partition = %tp, error = %e, "unreadable partition.metadata");
            }
            let folder_id = on_disk
                .as_ref()
                .ok()
                .copied()
                .flatten()
                .map(Uuid::from_bytes);
            let current = image
                .topic(&tp.topic)
                .filter(|t| t.partitions.contains_key(&tp.partition));
            let removed = |id: &Uuid| removals.iter().any(|r| r.topic_id == *id);
            let verdict = match (current, folder_id) {
                (Some(t), Some(id)) if id != t.id && removed(&id) => Folder::Delete(format!(
                    "the metadata log records the deletion of topic id {id}, an earlier topic of this name"
                )),
                (Some(t), Some(id)) if id != t.id => Folder::Stray(format!(
                    "it belongs to topic id {id}, but the metadata's topic {} has id {}",
                    t.name, t.id
                )),
                (Some(t), _)
                    if !t.partitions[&tp.partition]
                        .replicas
                        .contains(&self.node_id) =>
                {
                    Folder::Stray(format!(
                        "this node is not a replica of the partition (replicas {:?})",
                        t.partitions[&tp.partition].replicas
                    ))
                }
                (Some(_), _) => Folder::Keep,
                (None, Some(id)) if removed(&id) => Folder::Delete(format!(
                    "the metadata log records the deletion of its topic (id {id})"
                )),
                (None, None)
                    if matches!(on_disk, Ok(None))
                        && image.topic(&tp.topic).is_none()
                        && removals
                            .iter()
                            .any(|r| r.name.as_deref() == Some(tp.topic.as_str())) =>
                {
                    Folder::Delete(
                        "the metadata log records the deletion of a topic of this name (folder without partition.metadata)"
                            .to_string(),
                    )
                }
                (None, _) => Folder::Stray("the metadata does not have this partition".into()),
            };
            match verdict {
                Folder::Keep => {}
                Folder::Delete(reason) => {
                    tracing::info!(partition = %tp, reason = %reason, "deleting partition folder of a deleted topic");
                    self.logs.delete(&tp)?;
                }
                Folder::Stray(reason) => {
                    if let Some(aside) = self.logs.rename_stray(&tp)? {
                        tracing::warn!(partition = %tp, reason = %reason, moved_to = %aside.display(), "stray partition folder renamed aside and kept (nothing deleted)");
                    }
                }
            }
        }
        for t in image.topics() {
            let config = self.log_config(t)?;
            for (&p, state) in &t.partitions {
                if !state.replicas.contains(&self.node_id) {
                    continue;
                }
                let tp = TopicPartition::new(t.name.clone(), p);
                let log = match self.logs.get(&tp) {
                    Some(log) => {
                        log.set_config(config.clone());
                        log
                    }
                    None => self.logs.get_or_create(&tp, config.clone())?,
                };
                if !matches!(partition_metadata::read(log.dir()), Ok(Some(id)) if id == *t.id.as_bytes())
                {
                    partition_metadata::write(log.dir(), *t.id.as_bytes())?;
                }
            }
        }
        Ok(())
    }

    /// The log of a new partition of topic `topic_id`, with its
    /// `partition.metadata`. A leftover folder of another topic id under
    /// the same name is moved aside as a stray rather than adopted.
    pub(crate) fn create_partition_log(
        &self,
        tp: &TopicPartition,
        topic_id: Uuid,
        config: LogConfig,
    ) -> Result<Arc<Log>> {
        let mut log = self.logs.get_or_create(tp, config.clone())?;
        if let Ok(Some(other)) = partition_metadata::read(log.dir()) {
            if other != *topic_id.as_bytes() {
                if let Some(aside) = self.logs.rename_stray(tp)? {
                    tracing::warn!(partition = %tp, other_topic_id = %Uuid::from_bytes(other), moved_to = %aside.display(), "folder of another topic id renamed aside");
                }
                log = self.logs.get_or_create(tp, config)?;
            }
        }
        partition_metadata::write(log.dir(), *topic_id.as_bytes())?;
        Ok(log)
    }
}

#[cfg(test)]
mod tests;
