//! Record key and value of `__transaction_state`, byte-compatible with
//! Kafka (transaction-coordinator `TransactionLogKey` and
//! `TransactionLogValue` message schemas, `TransactionLog.scala`), so Kafka
//! tooling can read what Sluice writes and Sluice can replay a topic Kafka
//! wrote.
//!
//! Layout, as Kafka's `MessageUtil.toVersionPrefixedBytes`: an `int16`
//! version, then the fields of that version.
//!
//! - Key version 0: `transactional_id` (`int16`-length string). A key of
//!   any other version is [`TxnRecordKey::Unknown`]; Kafka's loader skips
//!   those with a warning.
//! - Value version 0: `producer_id` int64, `producer_epoch` int16,
//!   `transaction_timeout_ms` int32, `transaction_status` int8,
//!   `transaction_partitions` nullable array of (topic string,
//!   partition_ids int32 array), `transaction_last_update_timestamp_ms`
//!   int64, `transaction_start_timestamp_ms` int64.
//! - Value version 1 (first flexible one; transaction.version 1, KIP-890):
//!   the same fields in compact form, then a tagged-field section with
//!   tag 0 `previous_producer_id` int64 (default -1), tag 1
//!   `next_producer_id` int64 (default -1) and tag 2
//!   `client_transaction_version` int16 (default 0); a tagged field is
//!   written only when it differs from its default, as Kafka's generated
//!   writers do. Unknown tags are skipped.
//! - A null value is a tombstone: the transactional id was removed
//!   (`transactional.id.expiration.ms`).
//!
//! The partitions are `null` in the Empty state and an array otherwise
//! (empty in CompleteCommit/CompleteAbort); a reader ignores them in the
//! Empty state, as Kafka's `readTxnRecordValue` does. Sluice writes topics
//! and partitions in sorted order (Kafka's order is a hash map's; readers
//! do not depend on it).

use crate::error::CoordinatorError;
use crate::offsets::wire::{Reader, Writer};
use crate::offsets::Record;

/// The only `TransactionLogKey` version.
pub const TRANSACTION_LOG_KEY_VERSION: i16 = 0;
/// Highest `TransactionLogValue` version (the first flexible one).
pub const TRANSACTION_LOG_VALUE_MAX_VERSION: i16 = 1;

const TAG_PREVIOUS_PRODUCER_ID: u32 = 0;
const TAG_NEXT_PRODUCER_ID: u32 = 1;
const TAG_CLIENT_TRANSACTION_VERSION: u32 = 2;

/// Key of a transactional id's record.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TransactionLogKey {
    pub transactional_id: String,
}

impl TransactionLogKey {
    /// Encodes as key version 0.
    pub fn encode(&self) -> Result<Vec<u8>, CoordinatorError> {
        let mut w = Writer::new("TransactionLogKey");
        w.i16(TRANSACTION_LOG_KEY_VERSION);
        w.string(&self.transactional_id, false)?;
        Ok(w.buf)
    }
}

/// A decoded `__transaction_state` key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnRecordKey {
    Transaction(TransactionLogKey),
    /// A key version this schema does not define; skipped on replay, as
    /// Kafka's loader does ("a left over from an aborted upgrade").
    Unknown(i16),
}

impl TxnRecordKey {
    /// Decodes a key. Trailing bytes after the fields are ignored, as
    /// Kafka's readers do.
    pub fn decode(bytes: &[u8]) -> Result<Self, CoordinatorError> {
        let mut r = Reader::new(bytes, "TransactionLogKey");
        let version = r.i16()?;
        if version != TRANSACTION_LOG_KEY_VERSION {
            return Ok(Self::Unknown(version));
        }
        Ok(Self::Transaction(TransactionLogKey {
            transactional_id: r.string(false)?,
        }))
    }
}

/// The partitions of one topic in a transaction (Kafka's
/// `PartitionsSchema`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxnTopicPartitions {
    pub topic: String,
    pub partition_ids: Vec<i32>,
}

/// Value of a transactional id's record: its whole metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionLogValue {
    pub producer_id: i64,
    /// Version 1 only (tag 0); -1 when absent.
    pub previous_producer_id: i64,
    /// Version 1 only (tag 1); -1 when absent. Used by transaction
    /// version 2, which Sluice does not implement.
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    pub transaction_timeout_ms: i32,
    /// Kafka's `TransactionState.id` (0 Empty .. 7 PrepareEpochFence).
    pub transaction_status: i8,
    /// `None` is written as null (Kafka writes null in the Empty state).
    pub transaction_partitions: Option<Vec<TxnTopicPartitions>>,
    pub transaction_last_update_timestamp_ms: i64,
    pub transaction_start_timestamp_ms: i64,
    /// Version 1 only (tag 2); 0 when absent.
    pub client_transaction_version: i16,
}

impl TransactionLogValue {
    /// Encodes at `version` 0 or 1. Version 0 has no tagged fields: the
    /// version-1-only fields are dropped.
    pub fn encode(&self, version: i16) -> Result<Vec<u8>, CoordinatorError> {
        check_version(version)?;
        let flexible = version >= 1;
        let mut w = Writer::new("TransactionLogValue");
        w.i16(version);
        w.i64(self.producer_id);
        w.i16(self.producer_epoch);
        w.i32(self.transaction_timeout_ms);
        w.i8(self.transaction_status);
        match &self.transaction_partitions {
            None => w.null_array(flexible),
            Some(topics) => {
                w.array_len(topics.len(), flexible)?;
                for t in topics {
                    w.string(&t.topic, flexible)?;
                    w.array_len(t.partition_ids.len(), flexible)?;
                    for p in &t.partition_ids {
                        w.i32(*p);
                    }
                    if flexible {
                        w.no_tagged_fields();
                    }
                }
            }
        }
        w.i64(self.transaction_last_update_timestamp_ms);
        w.i64(self.transaction_start_timestamp_ms);
        if flexible {
            let previous = self.previous_producer_id != -1;
            let next = self.next_producer_id != -1;
            let tv = self.client_transaction_version != 0;
            w.uvarint(u32::from(previous) + u32::from(next) + u32::from(tv));
            if previous {
                w.uvarint(TAG_PREVIOUS_PRODUCER_ID);
                w.uvarint(8);
                w.i64(self.previous_producer_id);
            }
            if next {
                w.uvarint(TAG_NEXT_PRODUCER_ID);
                w.uvarint(8);
                w.i64(self.next_producer_id);
            }
            if tv {
                w.uvarint(TAG_CLIENT_TRANSACTION_VERSION);
                w.uvarint(2);
                w.i16(self.client_transaction_version);
            }
        }
        Ok(w.buf)
    }

    /// Decodes version 0 or 1; another version is
    /// [`CoordinatorError::UnsupportedRecordVersion`] (Kafka's loader fails
    /// on it).
    pub fn decode(bytes: &[u8]) -> Result<Self, CoordinatorError> {
        let mut r = Reader::new(bytes, "TransactionLogValue");
        let version = r.i16()?;
        check_version(version)?;
        let flexible = version >= 1;
        let producer_id = r.i64()?;
        let producer_epoch = r.i16()?;
        let transaction_timeout_ms = r.i32()?;
        let transaction_status = r.i8()?;
        let transaction_partitions = match r.nullable_array_len(flexible)? {
            None => None,
            Some(count) => {
                let mut topics = Vec::with_capacity(count);
                for _ in 0..count {
                    let topic = r.string(flexible)?;
                    let n = r.array_len(flexible)?;
                    let mut partition_ids = Vec::with_capacity(n);
                    for _ in 0..n {
                        partition_ids.push(r.i32()?);
                    }
                    if flexible {
                        r.skip_tagged_fields()?;
                    }
                    topics.push(TxnTopicPartitions {
                        topic,
                        partition_ids,
                    });
                }
                Some(topics)
            }
        };
        let mut value = Self {
            producer_id,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch,
            transaction_timeout_ms,
            transaction_status,
            transaction_partitions,
            transaction_last_update_timestamp_ms: r.i64()?,
            transaction_start_timestamp_ms: r.i64()?,
            client_transaction_version: 0,
        };
        if flexible {
            let count = r.uvarint()?;
            for _ in 0..count {
                let tag = r.uvarint()?;
                let size = r.uvarint()? as usize;
                let field = r.take(size)?;
                let mut f = Reader::new(field, "TransactionLogValue");
                match (tag, size) {
                    (TAG_PREVIOUS_PRODUCER_ID, 8) => value.previous_producer_id = f.i64()?,
                    (TAG_NEXT_PRODUCER_ID, 8) => value.next_producer_id = f.i64()?,
                    (TAG_CLIENT_TRANSACTION_VERSION, 2) => {
                        value.client_transaction_version = f.i16()?;
                    }
                    (
                        TAG_PREVIOUS_PRODUCER_ID
                        | TAG_NEXT_PRODUCER_ID
                        | TAG_CLIENT_TRANSACTION_VERSION,
                        _,
                    ) => return Err(r.malformed("tagged field of the wrong size")),
                    _ => {} // unknown tag: skipped
                }
            }
        }
        Ok(value)
    }
}

fn check_version(version: i16) -> Result<(), CoordinatorError> {
    if (0..=TRANSACTION_LOG_VALUE_MAX_VERSION).contains(&version) {
        Ok(())
    } else {
        Err(CoordinatorError::UnsupportedRecordVersion {
            record: "TransactionLogValue",
            version,
        })
    }
}

impl Record {
    /// A transactional id's metadata, value encoded at `version` (0 or 1).
    pub fn transaction(
        transactional_id: &str,
        value: &TransactionLogValue,
        version: i16,
    ) -> Result<Self, CoordinatorError> {
        Ok(Self {
            key: TransactionLogKey {
                transactional_id: transactional_id.to_owned(),
            }
            .encode()?,
            value: Some(value.encode(version)?),
        })
    }

    /// Removes a transactional id (expiration).
    pub fn transaction_tombstone(transactional_id: &str) -> Result<Self, CoordinatorError> {
        Ok(Self {
            key: TransactionLogKey {
                transactional_id: transactional_id.to_owned(),
            }
            .encode()?,
            value: None,
        })
    }
}

#[cfg(test)]
#[path = "schema_tests.rs"]
mod tests;
