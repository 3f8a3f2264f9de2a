//! `transaction.timeout.ms` and `transactional.id.expiration.ms` with a
//! manual clock, and the deadlines `tick` runs at.

use super::*;

fn short() -> TxnConfig {
    TxnConfig {
        abort_timed_out_interval_ms: 1_000,
        remove_expired_interval_ms: 5_000,
        transactional_id_expiration_ms: 60_000,
        ..cfg()
    }
}

#[test]
fn deadlines_follow_the_check_intervals() {
    let mut h = Harness::with(short());
    assert_eq!(h.c.next_deadline(), Some(START + 1_000));
    h.advance(1_000);
    h.tick();
    assert_eq!(h.c.next_deadline(), Some(START + 2_000));
    h.advance(4_000);
    h.tick();
    assert_eq!(h.c.next_deadline(), Some(START + 6_000));
    let unloaded = TransactionCoordinator::new(short(), 0);
    assert_eq!(unloaded.next_deadline(), None);
}

#[test]
fn timed_out_transaction_is_aborted_with_a_bumped_epoch() {
    let mut h = Harness::with(short());
    let pe = h.ongoing(T, &[tp("a", 0)]);
    // The timeout is strict: start + timeout < now.
    h.advance(i64::from(TIMEOUT));
    h.tick();
    assert!(h.records.is_empty(), "not yet timed out");
    h.advance(1_000);
    h.tick();
    assert_eq!(h.records.len(), 1);
    let v = h.records[0].record.value.clone().unwrap();
    assert_eq!(v.transaction_status, TransactionState::PrepareAbort.id());
    assert_eq!(v.producer_epoch, pe.1 + 1);
    // The producer is fenced at once.
    let t = h.end(T, pe, TxnResult::Commit);
    assert_eq!(h.resp(t), end_err(KafkaError::ProducerFenced));
    h.confirm_all();
    assert_eq!(h.markers.len(), 1);
    assert_eq!(h.markers[0].result, TxnResult::Abort);
    assert_eq!(h.markers[0].producer_epoch, pe.1 + 1);
    h.settle();
    assert_eq!(h.c.state(T), Some(TransactionState::CompleteAbort));
    assert_eq!(h.c.producer_id_and_epoch(T), Some((pe.0, pe.1 + 1)));
    // No response was produced by the timer.
    assert!(h
        .responses
        .values()
        .all(|r| !matches!(r, TxnResponse::EndTxn(e) if e.error.is_none())));
    // The next producer gets the next epoch.
    let t = h.init(T);
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(pe.0, pe.1 + 2));
}

#[test]
fn the_timeout_counts_from_the_first_partition() {
    let mut h = Harness::with(short());
    let pe = h.ongoing(T, &[tp("a", 0)]);
    h.advance(30_000);
    // Adding partitions later does not move the start.
    let t = h.add(T, pe, &[tp("b", 0)]);
    h.confirm_all();
    assert_eq!(h.resp(t), Some(TxnResponse::AddPartitions(None)));
    h.advance(31_000);
    h.tick();
    assert_eq!(h.c.pending_state(T), Some(TransactionState::PrepareAbort));
}

#[test]
fn a_transaction_with_a_pending_transition_is_not_aborted() {
    let mut h = Harness::with(short());
    let pe = h.ongoing(T, &[tp("a", 0)]);
    let t = h.add(T, pe, &[tp("b", 0)]); // pending, not confirmed
    h.advance(i64::from(TIMEOUT) + 1_000);
    h.tick();
    assert_eq!(h.records.len(), 1, "only the AddPartitions record");
    h.confirm_all();
    assert_eq!(h.resp(t), Some(TxnResponse::AddPartitions(None)));
    h.advance(1_000);
    h.tick();
    assert_eq!(h.c.pending_state(T), Some(TransactionState::PrepareAbort));
}

#[test]
fn idle_ids_expire_with_a_tombstone() {
    let mut h = Harness::with(short());
    let pe = h.ready(T);
    h.ongoing("busy", &[tp("a", 0)]);
    h.advance(59_000);
    h.tick();
    assert!(h.records.is_empty());
    h.advance(6_000);
    h.tick(); // the check at +65s; T idle since START
              // "busy" is Ongoing: it is aborted (timeout), never expired.
    let tombstones: Vec<_> = h
        .records
        .iter()
        .filter(|r| r.record.value.is_none())
        .map(|r| r.record.transactional_id.clone())
        .collect();
    assert_eq!(tombstones, vec![T.to_string()]);
    assert_eq!(h.c.pending_state(T), Some(TransactionState::Dead));
    // While expiring: requests see the pending transition.
    let t = h.init(T);
    assert_eq!(h.resp(t), init_err(KafkaError::ConcurrentTransactions));
    let d = h.c.describe_transactions(&[T.to_string()]);
    assert_eq!(d[0].state, "Empty");
    h.confirm_all();
    assert_eq!(h.c.state(T), None);
    let d = h.c.describe_transactions(&[T.to_string()]);
    assert_eq!(d[0].error, Some(KafkaError::TransactionalIdNotFound));
    // The old producer is unknown now; a new one starts over.
    let t = h.add(T, pe, &[tp("a", 0)]);
    assert_eq!(h.resp(t), add_err(KafkaError::InvalidProducerIdMapping));
    let t = h.init(T);
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(h.last_pid, 0));
    // The tombstone is in the log: a reload does not bring the old id back.
    h.settle();
    h.reload();
    assert_eq!(h.c.producer_id_and_epoch(T), Some((h.last_pid, 0)));
}

#[test]
fn completed_transactions_expire_after_their_last_update() {
    let mut h = Harness::with(short());
    let pe = h.ongoing(T, &[tp("a", 0)]);
    h.advance(10_000);
    h.end(T, pe, TxnResult::Commit);
    h.settle(); // CompleteCommit, last update START + 10s
    h.advance(54_000); // START + 64s: idle 54s
    h.tick();
    h.advance(1_000);
    h.tick(); // START + 65s: idle 55s < 60s
    assert!(h.records.iter().all(|r| r.record.value.is_some()));
    h.advance(5_000);
    h.tick(); // START + 70s: idle 60s
    assert_eq!(h.records.len(), 1);
    assert!(h.records[0].record.value.is_none());
}

#[test]
fn failed_tombstone_keeps_the_id() {
    let mut h = Harness::with(short());
    h.ready(T);
    h.advance(65_000);
    h.tick();
    assert_eq!(h.c.pending_state(T), Some(TransactionState::Dead));
    h.fail_all(KafkaError::CoordinatorNotAvailable);
    assert_eq!(h.c.state(T), Some(TransactionState::Empty));
    assert_eq!(h.c.pending_state(T), None);
    // The next check tries again.
    h.advance(5_000);
    h.tick();
    assert_eq!(h.c.pending_state(T), Some(TransactionState::Dead));
    h.confirm_all();
    assert_eq!(h.c.state(T), None);
}

#[test]
fn ticks_do_nothing_while_loading_or_unloaded() {
    let mut h = Harness::with(short());
    h.ongoing(T, &[tp("a", 0)]);
    let fx = h.c.begin_load(2);
    h.absorb(fx);
    h.advance(1_000_000);
    h.tick();
    assert!(h.records.is_empty() && h.markers.is_empty());
    assert_eq!(h.c.next_deadline(), None);
}
