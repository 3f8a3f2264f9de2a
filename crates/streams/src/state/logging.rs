//! Change logging (Kafka's `ChangeLoggingKeyValueBytesStore`): every write
//! that reaches a store becomes a record on its changelog topic
//! `<application.id>-<store>-changelog`, on the task's partition, with the
//! writing record's timestamp; a delete is a tombstone.

use bytes::Bytes;

use crate::processor::Headers;
use crate::task::OutputRecord;

/// Makes changelog records for one store.
#[derive(Debug, Clone)]
pub struct ChangeLogger {
    /// The changelog topic (with the application id prefix).
    pub topic: String,
}

impl ChangeLogger {
    /// A logger writing to `topic`.
    pub fn new(topic: String) -> Self {
        Self { topic }
    }

    /// The changelog record for a write of `key` (`None` deletes).
    pub fn record(
        &self,
        partition: i32,
        key: Bytes,
        value: Option<Bytes>,
        timestamp: i64,
    ) -> OutputRecord {
        OutputRecord {
            topic: self.topic.clone(),
            partition: Some(partition),
            key: Some(key),
            value,
            timestamp,
            headers: Headers::new(),
        }
    }
}

/// The changelog topic of `store` in `application_id`.
pub fn changelog_topic(application_id: &str, store: &str) -> String {
    format!("{application_id}-{store}-changelog")
}
