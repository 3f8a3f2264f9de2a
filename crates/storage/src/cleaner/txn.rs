//! What the cleaner knows about transactions while it walks the log
//! (Kafka's `CleanedTransactionMetadata`): which data batches belong to
//! aborted transactions (dropped, and left out of the offset map), and
//! when a marker may go.
//!
//! - The aborted transactions of the range come from the transaction
//!   indexes ([`Log::collect_aborted_txns`]), ordered by first offset; a
//!   transaction becomes "ongoing aborted" when the walk reaches its first
//!   offset.
//! - A transactional data batch of a producer with an ongoing aborted
//!   transaction is aborted: it can be discarded (the last batch of an
//!   active producer stays as an empty batch, see `rewrite`). Other
//!   transactional batches mark their producer's transaction as an ongoing
//!   committed one.
//! - An ABORT marker is kept, with its transaction index entry written to
//!   the cleaned segment, while the walk saw data batches of its
//!   transaction (they go in this round); once none are left it may go. A
//!   COMMIT marker may go once the walk saw no data of its transaction.
//!   A marker that may go is first stamped with a delete horizon
//!   (`now + delete.retention.ms`, Kafka's KIP-534 batch flag) and removed
//!   by a later clean after that time, so consumers that read the data
//!   before it was removed still meet the marker.
//!
//! [`Log::collect_aborted_txns`]: crate::log::Log::collect_aborted_txns

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};

use sluice_protocol::record::batch::BatchHeader;
use sluice_protocol::record::codec::decode_batch;
use sluice_protocol::record::control::{control_type, ABORT, COMMIT};

use crate::segment::decode_limit;
use crate::txn_index::AbortedTxn;

/// One aborted transaction the walk is inside of.
#[derive(Debug)]
struct OngoingAborted {
    txn: AbortedTxn,
    /// The last data batch of the transaction the walk saw, if any.
    last_observed: Option<i64>,
}

/// Transaction state carried along one clean (across its segment groups).
#[derive(Debug, Default)]
pub(crate) struct CleanedTxns {
    /// Aborted transactions not yet reached, by first offset.
    pending: BinaryHeap<Reverse<(i64, i64, i64, i64)>>,
    ongoing_aborted: HashMap<i64, OngoingAborted>,
    ongoing_committed: HashSet<i64>,
    /// Entries for the transaction index of the segment being written.
    pub cleaned_index: Vec<AbortedTxn>,
}

impl CleanedTxns {
    /// Adds aborted transactions found in the transaction indexes
    /// (duplicates are harmless: a producer has one ongoing transaction).
    pub(crate) fn add_aborted(&mut self, txns: impl IntoIterator<Item = AbortedTxn>) {
        for t in txns {
            self.pending.push(Reverse((
                t.first_offset,
                t.producer_id,
                t.last_offset,
                t.last_stable_offset,
            )));
        }
    }

    fn consume_up_to(&mut self, offset: i64) {
        while let Some(Reverse((first, pid, last, lso))) = self.pending.peek().copied() {
            if first > offset {
                break;
            }
            self.pending.pop();
            self.ongoing_aborted.entry(pid).or_insert(OngoingAborted {
                txn: AbortedTxn {
                    producer_id: pid,
                    first_offset: first,
                    last_offset: last,
                    last_stable_offset: lso,
                },
                last_observed: None,
            });
        }
    }

    /// A data batch (Kafka's `onBatchRead`): whether it belongs to an
    /// aborted transaction.
    pub(crate) fn on_batch(&mut self, h: &BatchHeader) -> bool {
        self.consume_up_to(h.last_offset());
        if !h.is_transactional() {
            return false;
        }
        match self.ongoing_aborted.get_mut(&h.producer_id) {
            Some(a) => {
                a.last_observed = Some(h.last_offset());
                true
            }
            None => {
                self.ongoing_committed.insert(h.producer_id);
                false
            }
        }
    }

    /// A control batch (Kafka's `onControlBatchRead`), `raw` its bytes:
    /// whether the marker may be discarded. A retained ABORT marker whose
    /// transaction had data in this walk gets its index entry in
    /// [`Self::cleaned_index`].
    pub(crate) fn on_control_batch(&mut self, h: &BatchHeader, raw: &[u8]) -> bool {
        self.consume_up_to(h.last_offset());
        let decoded = match decode_batch(raw, decode_limit(h)) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(offset = h.base_offset, error = %e, "cleaner cannot read a control batch; keeping it");
                return false;
            }
        };
        let Some(first) = decoded.records.first() else {
            // An empty control batch was cleaned before: it may go.
            return true;
        };
        match control_type(first.record.key.as_deref()) {
            Ok(ABORT) => match self.ongoing_aborted.remove(&h.producer_id) {
                Some(a) if a.last_observed.is_some() => {
                    self.cleaned_index.push(a.txn);
                    false
                }
                _ => true,
            },
            Ok(COMMIT) => !self.ongoing_committed.remove(&h.producer_id),
            // Other control records (none on data partitions) stay.
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_protocol::record::control::EndTxnMarker;

    fn header(pid: i64, base: i64, n: i32, transactional: bool) -> BatchHeader {
        let mut b = sluice_protocol::record::BatchBuilder::new(
            sluice_protocol::record::Compression::None,
            0,
        )
        .producer(
            sluice_protocol::record::codec::ProducerInfo {
                producer_id: pid,
                producer_epoch: 0,
                base_sequence: 0,
            },
            transactional,
        );
        for _ in 0..n {
            b.push(sluice_protocol::record::Record::new(Some(vec![1]), None, 0));
        }
        BatchHeader::parse(&b.build(base).expect("build")).expect("header")
    }

    fn marker(pid: i64, base: i64, commit: bool) -> (BatchHeader, Vec<u8>) {
        let mut b = EndTxnMarker {
            commit,
            coordinator_epoch: 0,
        }
        .batch(pid, 0, 0)
        .expect("marker");
        sluice_protocol::record::batch::set_base_offset(&mut b, base);
        (BatchHeader::parse(&b).expect("header"), b)
    }

    #[test]
    fn aborted_data_goes_and_markers_go_once_their_data_is_gone() {
        let mut t = CleanedTxns::default();
        let abort = AbortedTxn {
            producer_id: 1,
            first_offset: 10,
            last_offset: 20,
            last_stable_offset: 21,
        };
        t.add_aborted([abort]);
        assert!(
            !t.on_batch(&header(1, 0, 2, true)),
            "before the abort's range"
        );
        assert!(t.on_batch(&header(1, 10, 2, true)), "aborted data");
        assert!(
            !t.on_batch(&header(2, 12, 2, true)),
            "2's transaction commits"
        );
        assert!(!t.on_batch(&header(1, 14, 1, false)), "not transactional");
        let (h, raw) = marker(2, 15, true);
        assert!(!t.on_control_batch(&h, &raw), "commit with data: kept");
        let (h, raw) = marker(1, 20, false);
        assert!(!t.on_control_batch(&h, &raw), "abort with data: kept");
        assert_eq!(t.cleaned_index, vec![abort]);
        // Next clean: the data is gone, so both markers may go.
        let mut t = CleanedTxns::default();
        t.add_aborted([abort]);
        let (h, raw) = marker(2, 15, true);
        assert!(t.on_control_batch(&h, &raw));
        let (h, raw) = marker(1, 20, false);
        assert!(t.on_control_batch(&h, &raw));
        assert!(t.cleaned_index.is_empty());
    }
}
