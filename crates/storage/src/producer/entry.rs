//! One producer's state in one partition (Kafka's `ProducerStateEntry` and
//! `BatchMetadata`), and the sequence arithmetic of v2 batches.

/// How many of a producer's latest batches are remembered for duplicate
/// detection (Kafka's `NUM_BATCHES_TO_RETAIN`, matching the producer's
/// `max.in.flight.requests.per.connection` limit of 5 with idempotence).
pub const NUM_BATCHES_TO_RETAIN: usize = 5;
/// Kafka's `RecordBatch.NO_SEQUENCE`.
pub const NO_SEQUENCE: i32 = -1;
/// Kafka's `RecordBatch.NO_PRODUCER_EPOCH`.
pub const NO_PRODUCER_EPOCH: i16 = -1;

/// `sequence + increment`, wrapping past `i32::MAX` to 0 (Kafka's
/// `DefaultRecordBatch.incrementSequence`).
pub fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    let (s, i, max) = (
        i64::from(sequence),
        i64::from(increment),
        i64::from(i32::MAX),
    );
    if s > max - i {
        (i - (max - s) - 1) as i32
    } else {
        (s + i) as i32
    }
}

/// `sequence - decrement`, wrapping below 0 to `i32::MAX` (Kafka's
/// `DefaultRecordBatch.decrementSequence`).
pub fn decrement_sequence(sequence: i32, decrement: i32) -> i32 {
    let (s, d, max) = (
        i64::from(sequence),
        i64::from(decrement),
        i64::from(i32::MAX),
    );
    if s < d {
        (max - (d - s) + 1) as i32
    } else {
        (s - d) as i32
    }
}

/// Whether `next` directly follows `last` (Kafka's
/// `ProducerAppendInfo.inSequence`): `last + 1`, or 0 after `i32::MAX`.
pub fn in_sequence(last: i32, next: i32) -> bool {
    i64::from(next) == i64::from(last) + 1 || (next == 0 && last == i32::MAX)
}

/// One appended batch of a producer (Kafka's `BatchMetadata`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchMetadata {
    pub last_seq: i32,
    pub last_offset: i64,
    /// Last offset minus first offset (also the sequence delta).
    pub offset_delta: i32,
    /// The batch's max timestamp.
    pub timestamp: i64,
}

impl BatchMetadata {
    pub fn first_seq(&self) -> i32 {
        decrement_sequence(self.last_seq, self.offset_delta)
    }

    pub fn first_offset(&self) -> i64 {
        self.last_offset - i64::from(self.offset_delta)
    }
}

/// What a partition knows about one producer id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerStateEntry {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// Epoch of the transaction coordinator that wrote the producer's last
    /// marker (-1 before any).
    pub coordinator_epoch: i32,
    /// Max timestamp of the producer's last batch (or its last marker's
    /// timestamp): what expiry compares with `producer.id.expiration.ms`.
    pub last_timestamp: i64,
    /// First offset of the producer's open transaction, if any.
    pub current_txn_first_offset: Option<i64>,
    /// The latest batches, oldest first; only `len` are valid.
    batches: [BatchMetadata; NUM_BATCHES_TO_RETAIN],
    len: u8,
    /// Broker time of the producer's last append here (in memory only):
    /// the least recently used producers are evicted first when a
    /// partition tracks too many.
    pub(crate) last_used_ms: i64,
}

impl ProducerStateEntry {
    /// A producer never seen (Kafka's `ProducerStateEntry.empty`).
    pub fn empty(producer_id: i64) -> Self {
        Self {
            producer_id,
            producer_epoch: NO_PRODUCER_EPOCH,
            coordinator_epoch: -1,
            last_timestamp: -1,
            current_txn_first_offset: None,
            batches: [BatchMetadata::default(); NUM_BATCHES_TO_RETAIN],
            len: 0,
            last_used_ms: -1,
        }
    }

    /// An entry as a snapshot stores it: at most its last batch.
    pub fn new(
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        last_timestamp: i64,
        current_txn_first_offset: Option<i64>,
        last_batch: Option<BatchMetadata>,
    ) -> Self {
        let mut e = Self {
            producer_epoch,
            coordinator_epoch,
            last_timestamp,
            current_txn_first_offset,
            last_used_ms: last_timestamp,
            ..Self::empty(producer_id)
        };
        if let Some(b) = last_batch {
            e.push(b);
        }
        e
    }

    /// The same producer without its batches (Kafka's
    /// `withProducerIdAndBatchMetadata(id, empty)`): where an append starts.
    pub(crate) fn without_batches(&self) -> Self {
        Self {
            batches: [BatchMetadata::default(); NUM_BATCHES_TO_RETAIN],
            len: 0,
            ..self.clone()
        }
    }

    /// The remembered batches, oldest first.
    pub fn batches(&self) -> &[BatchMetadata] {
        &self.batches[..usize::from(self.len)]
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn last(&self) -> Option<&BatchMetadata> {
        self.batches().last()
    }

    pub fn first_seq(&self) -> i32 {
        self.batches()
            .first()
            .map_or(NO_SEQUENCE, |b| b.first_seq())
    }

    pub fn last_seq(&self) -> i32 {
        self.last().map_or(NO_SEQUENCE, |b| b.last_seq)
    }

    /// Last offset of the producer's last data batch, -1 when none.
    pub fn last_data_offset(&self) -> i64 {
        self.last().map_or(-1, |b| b.last_offset)
    }

    pub fn last_offset_delta(&self) -> i32 {
        self.last().map_or(0, |b| b.offset_delta)
    }

    fn push(&mut self, b: BatchMetadata) {
        let len = usize::from(self.len);
        if len == NUM_BATCHES_TO_RETAIN {
            self.batches.rotate_left(1);
            self.batches[NUM_BATCHES_TO_RETAIN - 1] = b;
        } else {
            self.batches[len] = b;
            self.len += 1;
        }
    }

    /// Records a batch (Kafka's `addBatch`): a new epoch forgets the old
    /// epoch's batches.
    pub(crate) fn add_batch(
        &mut self,
        producer_epoch: i16,
        last_seq: i32,
        last_offset: i64,
        offset_delta: i32,
        timestamp: i64,
    ) {
        self.maybe_update_epoch(producer_epoch);
        self.push(BatchMetadata {
            last_seq,
            last_offset,
            offset_delta,
            timestamp,
        });
        self.last_timestamp = timestamp;
    }

    /// Moves to `producer_epoch`, dropping the batches of the old one.
    pub(crate) fn maybe_update_epoch(&mut self, producer_epoch: i16) -> bool {
        if self.producer_epoch == producer_epoch {
            return false;
        }
        self.len = 0;
        self.producer_epoch = producer_epoch;
        true
    }

    /// Takes over what an append produced (Kafka's `update(nextEntry)`):
    /// its epoch, its batches after ours, its transaction and timestamps.
    pub(crate) fn update(&mut self, next: &Self) {
        self.maybe_update_epoch(next.producer_epoch);
        for b in next.batches() {
            self.push(*b);
        }
        self.coordinator_epoch = next.coordinator_epoch;
        self.current_txn_first_offset = next.current_txn_first_offset;
        self.last_timestamp = next.last_timestamp;
        self.last_used_ms = self.last_used_ms.max(next.last_used_ms);
    }

    /// After a transaction marker (Kafka's `update(epoch, coordinatorEpoch,
    /// timestamp)`): no open transaction any more.
    pub(crate) fn end_transaction(
        &mut self,
        producer_epoch: i16,
        coordinator_epoch: i32,
        timestamp: i64,
    ) {
        self.maybe_update_epoch(producer_epoch);
        self.coordinator_epoch = coordinator_epoch;
        self.current_txn_first_offset = None;
        self.last_timestamp = timestamp;
    }

    /// The remembered batch with exactly this epoch and sequence range
    /// (Kafka's `findDuplicateBatch`).
    pub fn find_duplicate(
        &self,
        producer_epoch: i16,
        first_seq: i32,
        last_seq: i32,
    ) -> Option<BatchMetadata> {
        if producer_epoch != self.producer_epoch {
            return None;
        }
        self.batches()
            .iter()
            .find(|b| b.first_seq() == first_seq && b.last_seq == last_seq)
            .copied()
    }
}
