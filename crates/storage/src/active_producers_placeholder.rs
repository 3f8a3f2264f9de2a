//! PLACEHOLDER until the producer-state branch (`pstate`) is merged: the
//! shape of its `Log::active_producers()` and `ActiveProducer`, so the
//! broker's DescribeProducers handler builds against the API it will use.
//! This branch keeps no producer state, so the list is always empty. At
//! the merge this file and its two lines in `lib.rs` are deleted; pstate's
//! definitions (same names, same fields) take over.

use crate::log::Log;

/// One producer as DescribeProducers reports it (pstate's `ActiveProducer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveProducer {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// -1 when the producer has no batch in its current epoch.
    pub last_sequence: i32,
    pub last_timestamp: i64,
    pub coordinator_epoch: i32,
    /// -1 without an open transaction.
    pub current_txn_start_offset: i64,
}

impl Log {
    /// Every producer this partition tracks (PLACEHOLDER: none without
    /// pstate's producer state).
    pub fn active_producers(&self) -> Vec<ActiveProducer> {
        Vec::new()
    }
}
