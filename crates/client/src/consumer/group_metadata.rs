//! [`ConsumerGroupMetadata`]: what a transactional producer needs from a
//! consumer to commit its offsets inside a transaction (Kafka's
//! `ConsumerGroupMetadata`, from `KafkaConsumer.groupMetadata()`).

/// A consumer's group membership as TxnOffsetCommit carries it: the
/// coordinator fences commits from members of an older generation (or a
/// static member replaced by another instance).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupMetadata {
    /// `group.id`.
    pub group_id: String,
    /// The generation of the member's last join (-1 when none).
    pub generation_id: i32,
    /// The member id the coordinator gave (`""` when none).
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub group_instance_id: Option<String>,
}

impl ConsumerGroupMetadata {
    /// Metadata naming only the group (no generation checks), as Kafka's
    /// `new ConsumerGroupMetadata(groupId)`.
    pub fn new(group_id: impl Into<String>) -> Self {
        Self {
            group_id: group_id.into(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
        }
    }
}
