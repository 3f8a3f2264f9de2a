//! Kafka's transaction coordinator (design 012). So far: the
//! `__transaction_state` record schemas.

pub mod schema;

pub use schema::{TransactionLogKey, TransactionLogValue, TxnRecordKey, TxnTopicPartitions};

/// Name of the transaction state topic.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// The `__transaction_state` partition that coordinates
/// `transactional_id`: Kafka's `Utils.abs(transactionalId.hashCode) %
/// transaction.state.log.num.partitions` (Java's `String.hashCode`).
pub fn partition_for(transactional_id: &str, num_partitions: i32) -> i32 {
    crate::offsets::coordinator_partition(transactional_id, num_partitions)
}
