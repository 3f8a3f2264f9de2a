//! Producer id blocks (Kafka's `ProducerIdsBlock`): the controller hands
//! out producer ids to brokers in blocks of [`BLOCK_SIZE`], recording each
//! block in the metadata log ([`crate::MetadataRecord::ProducerIds`])
//! before any id of it is used, so that ids never repeat, across restarts
//! and crashes too. See `docs/design/010-idempotent-producer.md`.

/// Ids per block (Kafka's `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`).
pub const BLOCK_SIZE: i64 = 1000;

/// A range of producer ids owned by one broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdsBlock {
    /// The broker the block was given to.
    pub broker_id: i32,
    /// First id of the block.
    pub first_id: i64,
    /// Number of ids.
    pub size: i64,
}

impl ProducerIdsBlock {
    /// The last id of the block (inclusive).
    pub fn last_id(&self) -> i64 {
        self.first_id + self.size - 1
    }

    /// The first id of the block after this one.
    pub fn next_block_first_id(&self) -> i64 {
        self.first_id + self.size
    }

    /// The block that follows `next_producer_id` (the image's value; -1
    /// when no block was given out yet, then the first block starts at 0,
    /// as in Kafka), or `None` when the id space is exhausted.
    pub fn following(next_producer_id: i64, broker_id: i32) -> Option<Self> {
        let first_id = next_producer_id.max(0);
        (first_id <= i64::MAX - BLOCK_SIZE).then_some(Self {
            broker_id,
            first_id,
            size: BLOCK_SIZE,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_follow_each_other_from_zero() {
        let b = ProducerIdsBlock::following(-1, 1).expect("first block");
        assert_eq!(
            (b.first_id, b.last_id(), b.next_block_first_id()),
            (0, 999, 1000)
        );
        let c = ProducerIdsBlock::following(b.next_block_first_id(), 1).expect("second");
        assert_eq!((c.first_id, c.last_id()), (1000, 1999));
        assert!(ProducerIdsBlock::following(i64::MAX - BLOCK_SIZE, 1).is_some());
        assert!(ProducerIdsBlock::following(i64::MAX - BLOCK_SIZE + 1, 1).is_none());
    }
}
