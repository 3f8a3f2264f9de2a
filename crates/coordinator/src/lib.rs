//! Coordinators as sans-IO state machines: they take requests and timer
//! events and return records to append (to `__consumer_offsets` or
//! `__transaction_state`) and responses to send, so they are tested
//! without sockets and can move with partition leadership (brief,
//! section 3).
//!
//! - `group`: Kafka's classic consumer group protocol (JoinGroup,
//!   SyncGroup, Heartbeat, LeaveGroup; states Empty, PreparingRebalance,
//!   CompletingRebalance, Stable, Dead).
//! - `offsets`: committed offsets and group metadata as records with
//!   Kafka's own key and value schemas.
//! - `txn`: Kafka's transaction coordinator (InitProducerId with a
//!   transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, the
//!   commit/abort markers, timeouts and expiration, DescribeTransactions,
//!   ListTransactions) and the `__transaction_state` schemas (design 012).
//!
//! Errors (design 003): [`CoordinatorError`] for the crate's own failures
//! (malformed records, refused commits) and [`KafkaError`] for the Kafka
//! error a state machine answers a request with.

mod convert;
pub mod error;
pub mod group;
mod kafka_error;
pub mod offsets;
pub mod txn;

pub use error::CoordinatorError;
pub use kafka_error::{error_code, KafkaError};
