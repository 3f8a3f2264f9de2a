//! The group state machine's outcomes are the crate's [`KafkaError`]
//! (design 003); `GroupError` is the name the group API has used since
//! before the transaction coordinator shared the enum.

pub use crate::kafka_error::{error_code, KafkaError as GroupError};
