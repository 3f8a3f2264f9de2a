//! Checking one producer's batches of an append against what the partition
//! knows of it (Kafka's `ProducerAppendInfo`): epoch fencing, sequence
//! continuity, transactions started and ended. Nothing here touches the
//! partition's state: the caller applies [`ProducerAppendInfo::entry`] once
//! the batches are written.

use super::entry::{in_sequence, ProducerStateEntry, NO_PRODUCER_EPOCH, NO_SEQUENCE};
use crate::error::{Result, StorageError};
use crate::TopicPartition;

/// Who wrote the batches, which decides how much is checked (Kafka's
/// `AppendOrigin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProducerOrigin {
    /// A producer: epoch and sequence are checked.
    Client,
    /// The broker's coordinators: the epoch is checked, sequences are not
    /// (their batches carry none).
    Coordinator,
    /// Batches already in the log (replay at start-up and after
    /// truncation; a follower later): nothing fails, a stale epoch is
    /// logged.
    Replication,
}

/// A transaction marker (Kafka's `EndTransactionMarker`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndTxnMarker {
    pub commit: bool,
    pub coordinator_epoch: i32,
}

/// A transaction a marker closed (Kafka's `CompletedTxn`): for the
/// transaction index and the last stable offset, which the transactions
/// work builds on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub aborted: bool,
}

/// The state of one producer while the batches of one append are checked.
#[derive(Debug)]
pub struct ProducerAppendInfo {
    producer_id: i64,
    origin: ProducerOrigin,
    /// Epoch and last sequence of the entry before this append.
    current_epoch: i16,
    current_last_seq: i32,
    /// The entry as it will be: the current one without its batches, plus
    /// the batches of this append.
    updated: ProducerStateEntry,
    /// First offsets of the transactions this append started.
    started_txns: Vec<i64>,
}

impl ProducerAppendInfo {
    pub fn new(
        producer_id: i64,
        current: Option<&ProducerStateEntry>,
        origin: ProducerOrigin,
    ) -> Self {
        let (current_epoch, current_last_seq, updated) = match current {
            Some(e) => (e.producer_epoch, e.last_seq(), e.without_batches()),
            None => (
                NO_PRODUCER_EPOCH,
                NO_SEQUENCE,
                ProducerStateEntry::empty(producer_id),
            ),
        };
        Self {
            producer_id,
            origin,
            current_epoch,
            current_last_seq,
            updated,
            started_txns: Vec::new(),
        }
    }

    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }

    /// The entry after this append's batches.
    pub fn entry(&self) -> &ProducerStateEntry {
        &self.updated
    }

    pub(crate) fn into_entry(self) -> ProducerStateEntry {
        self.updated
    }

    /// First offsets of the transactions this append opened.
    pub fn started_transactions(&self) -> &[i64] {
        &self.started_txns
    }

    /// Kafka's `checkProducerEpoch`.
    fn check_epoch(&self, epoch: i16, offset: i64, tp: &TopicPartition) -> Result<()> {
        if epoch >= self.updated.producer_epoch {
            return Ok(());
        }
        let message = format!(
            "Epoch of producer {} at offset {offset} in {tp} is {epoch}, which is smaller than the \
             last seen epoch {}",
            self.producer_id, self.updated.producer_epoch
        );
        if self.origin == ProducerOrigin::Replication {
            tracing::warn!(partition = %tp, "{message}");
            return Ok(());
        }
        Err(StorageError::InvalidProducerEpoch(message))
    }

    /// Kafka's `checkSequence` (4.x, without the transaction verification
    /// guard): a new epoch must start at sequence 0; within an epoch the
    /// first sequence must follow the last one; a producer without a known
    /// epoch (never seen, expired, or evicted) may start anywhere.
    fn check_sequence(
        &self,
        epoch: i16,
        first_seq: i32,
        offset: i64,
        tp: &TopicPartition,
    ) -> Result<()> {
        if epoch != self.updated.producer_epoch {
            if first_seq != 0 && self.updated.producer_epoch != NO_PRODUCER_EPOCH {
                return Err(StorageError::OutOfOrderSequence(format!(
                    "Invalid sequence number for new epoch of producer {} at offset {offset} in \
                     partition {tp}: {epoch} (request epoch), {first_seq} (seq. number), {} \
                     (current producer epoch)",
                    self.producer_id, self.updated.producer_epoch
                )));
            }
            return Ok(());
        }
        let current_last_seq = if !self.updated.is_empty() {
            self.updated.last_seq()
        } else if epoch == self.current_epoch {
            self.current_last_seq
        } else {
            NO_SEQUENCE
        };
        if self.current_epoch == NO_PRODUCER_EPOCH || in_sequence(current_last_seq, first_seq) {
            return Ok(());
        }
        Err(StorageError::OutOfOrderSequence(format!(
            "Out of order sequence number for producer {} at offset {offset} in partition {tp}: \
             {first_seq} (incoming seq. number), {current_last_seq} (current end sequence number)",
            self.producer_id
        )))
    }

    /// Checks and records one data batch (Kafka's `appendDataBatch`).
    /// Returns the first offset of a transaction it opens.
    #[allow(clippy::too_many_arguments)]
    pub fn append_data_batch(
        &mut self,
        epoch: i16,
        first_seq: i32,
        last_seq: i32,
        last_timestamp: i64,
        first_offset: i64,
        last_offset: i64,
        transactional: bool,
        tp: &TopicPartition,
    ) -> Result<Option<i64>> {
        self.check_epoch(epoch, first_offset, tp)?;
        if self.origin == ProducerOrigin::Client {
            self.check_sequence(epoch, first_seq, first_offset, tp)?;
        }
        let delta = i32::try_from(last_offset - first_offset).unwrap_or(i32::MAX);
        self.updated
            .add_batch(epoch, last_seq, last_offset, delta, last_timestamp);
        match (self.updated.current_txn_first_offset, transactional) {
            (Some(_), false) => Err(StorageError::InvalidTxnState(format!(
                "Expected transactional write from producer {} at offset {first_offset} in \
                 partition {tp}",
                self.producer_id
            ))),
            (None, true) => {
                self.updated.current_txn_first_offset = Some(first_offset);
                self.started_txns.push(first_offset);
                Ok(Some(first_offset))
            }
            _ => Ok(None),
        }
    }

    /// Checks and records a transaction marker (Kafka's
    /// `appendEndTxnMarker`). Returns the transaction it closes, if the
    /// producer had written anything in it.
    pub fn append_end_txn_marker(
        &mut self,
        marker: EndTxnMarker,
        epoch: i16,
        offset: i64,
        timestamp: i64,
        tp: &TopicPartition,
    ) -> Result<Option<CompletedTxn>> {
        self.check_epoch(epoch, offset, tp)?;
        if self.updated.coordinator_epoch > marker.coordinator_epoch {
            let message = format!(
                "Invalid coordinator epoch for producerId {} at offset {offset} in partition \
                 {tp}: {} (zombie), {} (current)",
                self.producer_id, marker.coordinator_epoch, self.updated.coordinator_epoch
            );
            if self.origin == ProducerOrigin::Replication {
                tracing::info!(partition = %tp, "{message}");
            } else {
                return Err(StorageError::TransactionCoordinatorFenced(message));
            }
        }
        let completed = self
            .updated
            .current_txn_first_offset
            .map(|first| CompletedTxn {
                producer_id: self.producer_id,
                first_offset: first,
                last_offset: offset,
                aborted: !marker.commit,
            });
        self.updated
            .end_transaction(epoch, marker.coordinator_epoch, timestamp);
        Ok(completed)
    }
}
