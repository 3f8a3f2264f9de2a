//! The crate's error enum. Kafka error codes are chosen from these at the
//! broker boundary (brief, section 4), not here.

/// Errors of the coordinators and of the `__consumer_offsets` and
/// `__transaction_state` codecs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoordinatorError {
    // --- offsets and txn: record codecs ---
    /// A record key or value read from `__consumer_offsets` or
    /// `__transaction_state` is malformed.
    #[error("malformed {record} record: {reason}")]
    MalformedRecord {
        record: &'static str,
        reason: &'static str,
    },
    /// A record value carries a version this schema does not define.
    #[error("unsupported {record} version {version}")]
    UnsupportedRecordVersion { record: &'static str, version: i16 },
    /// A string or bytes field does not fit its length prefix.
    #[error("a field of the {record} record is too long to encode")]
    FieldTooLong { record: &'static str },

    // --- offsets: per-partition commit/delete outcomes ---
    /// Commit metadata longer than `offset.metadata.max.bytes`
    /// (Kafka: OFFSET_METADATA_TOO_LARGE).
    #[error("offset metadata of {len} exceeds the limit of {max}")]
    OffsetMetadataTooLarge { len: usize, max: usize },
    /// OffsetDelete on a topic the group is still subscribed to
    /// (Kafka: GROUP_SUBSCRIBED_TO_TOPIC).
    #[error("the group is subscribed to topic {topic}")]
    GroupSubscribedToTopic { topic: String },
}
