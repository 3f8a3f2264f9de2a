//! Which topics belong to the broker rather than to clients, and the rules
//! that keep them so (Kafka's `Topic.isInternal` and the checks around it
//! in `KafkaApis`, `ReplicaManager` and `ControllerApis`):
//!
//! - `__cluster_metadata` is not a topic at all to clients: every API that
//!   names it answers as if it did not exist (its log is the metadata log,
//!   owned by the controller side).
//! - Kafka's internal topics (`__consumer_offsets`, `__transaction_state`,
//!   `__share_group_state`) are created only by the broker, with their own
//!   configs, when a coordinator first needs them: never by auto-creation,
//!   never by a client's CreateTopics, and clients may neither delete them,
//!   add partitions to them, nor produce to them.

use proto_kafka::ResponseError;
use sluice_controller::store::METADATA_TOPIC;

use crate::broker::ApiError;

/// The consumer offsets topic (group coordinator state).
pub const CONSUMER_OFFSETS_TOPIC: &str = "__consumer_offsets";
/// The transaction coordinator's state topic.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";
/// The share-group state topic (Kafka 4 share groups).
pub const SHARE_GROUP_STATE_TOPIC: &str = "__share_group_state";

/// Kafka's internal topics (`Topic.INTERNAL_TOPICS`).
pub const INTERNAL_TOPICS: &[&str] = &[
    CONSUMER_OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    SHARE_GROUP_STATE_TOPIC,
];

/// Whether `name` is one of Kafka's internal topics (`is_internal` in
/// Metadata responses).
pub fn is_internal(name: &str) -> bool {
    INTERNAL_TOPICS.contains(&name)
}

/// Whether clients must not see `name` at all.
pub fn is_hidden(name: &str) -> bool {
    name == METADATA_TOPIC
}

/// Whether a client request may create `name` (CreateTopics or
/// auto-creation); Kafka's error otherwise.
pub(crate) fn check_client_may_create(name: &str) -> Result<(), ApiError> {
    if is_hidden(name) || is_internal(name) {
        return Err(ApiError::new(
            ResponseError::InvalidRequest,
            format!("Creation of internal topic {name} is prohibited."),
        ));
    }
    Ok(())
}

/// Whether a client request may delete `name` or add partitions to it.
pub(crate) fn check_client_may_alter(name: &str) -> Result<(), ApiError> {
    if is_hidden(name) {
        return Err(ApiError::code(ResponseError::UnknownTopicOrPartition));
    }
    if is_internal(name) {
        return Err(ApiError::new(
            ResponseError::TopicAuthorizationFailed,
            format!("Internal topic {name} is managed by the broker."),
        ));
    }
    Ok(())
}

/// Whether a client's Produce may append to `name` (Kafka's
/// `ReplicaManager.appendToLocalLog` with `internalTopicsAllowed = false`).
pub(crate) fn check_client_may_produce(name: &str) -> Result<(), ApiError> {
    if is_hidden(name) {
        return Err(ApiError::code(ResponseError::UnknownTopicOrPartition));
    }
    if is_internal(name) {
        return Err(ApiError::new(
            ResponseError::InvalidTopicException,
            format!("Cannot append to internal topic {name}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
