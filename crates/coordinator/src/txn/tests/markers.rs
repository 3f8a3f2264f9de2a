//! Markers: partial completion, retries with backoff, skipped and fenced
//! partitions, stale reports, the completion record and its failures.

use super::*;

fn report(
    h: &Harness,
    pe: (i64, i16),
    result: TxnResult,
    parts: &[(TopicPartition, MarkerOutcome)],
) -> MarkerCompletion {
    MarkerCompletion {
        transactional_id: T.into(),
        producer_id: pe.0,
        producer_epoch: pe.1,
        coordinator_epoch: h.epoch,
        result,
        partitions: parts.to_vec(),
    }
}

fn committing(parts: &[TopicPartition]) -> (Harness, (i64, i16)) {
    let mut h = Harness::new();
    let pe = h.ongoing(T, parts);
    let t = h.end(T, pe, TxnResult::Commit);
    h.confirm_all();
    assert_eq!(h.resp(t), end_ok(pe.0, pe.1));
    assert_eq!(h.markers.len(), 1);
    h.markers.clear();
    (h, pe)
}

#[test]
fn partitions_leave_the_transaction_as_their_markers_are_written() {
    let parts = [tp("a", 0), tp("a", 1), tp("b", 0)];
    let (mut h, pe) = committing(&parts);
    let r = report(
        &h,
        pe,
        TxnResult::Commit,
        &[(tp("a", 1), MarkerOutcome::Written)],
    );
    let fx = h.c.markers_completed(h.now, &r);
    assert!(fx.is_empty());
    assert_eq!(h.c.partitions(T), vec![tp("a", 0), tp("b", 0)]);
    let d = h.c.describe_transactions(&[T.to_string()]);
    assert_eq!(d[0].state, "PrepareCommit");
    assert_eq!(
        d[0].topics,
        vec![
            DescribedTopic {
                topic: "a".into(),
                partitions: vec![0]
            },
            DescribedTopic {
                topic: "b".into(),
                partitions: vec![0]
            },
        ]
    );
    // A partition gone (deleted topic) counts as done.
    let r = report(
        &h,
        pe,
        TxnResult::Commit,
        &[
            (tp("a", 0), MarkerOutcome::Written),
            (tp("b", 0), MarkerOutcome::Skip),
        ],
    );
    let fx = h.c.markers_completed(h.now, &r);
    h.absorb(fx);
    assert_eq!(h.records.len(), 1);
    assert_eq!(
        h.records[0]
            .record
            .value
            .as_ref()
            .unwrap()
            .transaction_status,
        TransactionState::CompleteCommit.id()
    );
    h.confirm_all();
    assert_eq!(h.c.state(T), Some(TransactionState::CompleteCommit));
}

#[test]
fn retriable_failures_are_sent_again_after_the_backoff() {
    let (mut h, pe) = committing(&[tp("a", 0), tp("b", 0)]);
    let r = report(
        &h,
        pe,
        TxnResult::Commit,
        &[
            (tp("a", 0), MarkerOutcome::Retry),
            (tp("b", 0), MarkerOutcome::Written),
        ],
    );
    let fx = h.c.markers_completed(h.now, &r);
    h.absorb(fx);
    assert!(h.records.is_empty() && h.markers.is_empty());
    let backoff = h.c.config().retry_backoff_ms;
    assert_eq!(h.c.next_deadline(), Some(h.now + backoff));
    h.advance(backoff - 1);
    h.tick();
    assert!(h.markers.is_empty());
    h.advance(1);
    h.tick();
    assert_eq!(h.markers.len(), 1);
    assert_eq!(h.markers[0].partitions, vec![tp("a", 0)]);
    assert_eq!(h.markers[0].result, TxnResult::Commit);
    // A duplicate report of a partition being retried is ignored until the
    // retry's own report.
    h.report_markers(MarkerOutcome::Written);
    assert_eq!(h.records.len(), 1);
    h.confirm_all();
    assert_eq!(h.c.state(T), Some(TransactionState::CompleteCommit));
}

#[test]
fn fenced_markers_stop_the_transaction_until_a_reload() {
    let (mut h, pe) = committing(&[tp("a", 0), tp("b", 0)]);
    let r = report(
        &h,
        pe,
        TxnResult::Commit,
        &[
            (tp("a", 0), MarkerOutcome::Fenced),
            (tp("b", 0), MarkerOutcome::Written),
        ],
    );
    let fx = h.c.markers_completed(h.now, &r);
    assert!(fx.is_empty());
    assert_eq!(h.c.partitions(T), vec![tp("a", 0)]);
    // Nothing more happens: no retry, no completion.
    h.advance(60_000);
    h.tick();
    assert!(h.markers.is_empty() && h.records.is_empty());
    let t = h.init(T);
    assert_eq!(h.resp(t), init_err(KafkaError::ConcurrentTransactions));
    // A reload writes the markers of every partition in the log's
    // PrepareCommit again.
    h.reload();
    assert_eq!(h.markers.len(), 1);
    assert_eq!(h.markers[0].partitions, vec![tp("a", 0), tp("b", 0)]);
    assert_eq!(h.markers[0].coordinator_epoch, 2);
    h.settle();
    assert_eq!(h.c.state(T), Some(TransactionState::CompleteCommit));
}

#[test]
fn stale_reports_are_ignored() {
    let (mut h, pe) = committing(&[tp("a", 0)]);
    let written = [(tp("a", 0), MarkerOutcome::Written)];
    let mut stale = vec![
        MarkerCompletion {
            coordinator_epoch: 0,
            ..report(&h, pe, TxnResult::Commit, &written)
        },
        report(&h, (pe.0, pe.1 + 1), TxnResult::Commit, &written),
        report(&h, (pe.0 + 1, pe.1), TxnResult::Commit, &written),
        report(&h, pe, TxnResult::Abort, &written),
        report(
            &h,
            pe,
            TxnResult::Commit,
            &[(tp("zz", 0), MarkerOutcome::Written)],
        ),
    ];
    stale.push(MarkerCompletion {
        transactional_id: "other".into(),
        ..report(&h, pe, TxnResult::Commit, &written)
    });
    for r in &stale {
        let fx = h.c.markers_completed(h.now, r);
        assert!(fx.is_empty(), "{r:?}");
        assert_eq!(h.c.partitions(T), vec![tp("a", 0)]);
    }
    let fx =
        h.c.markers_completed(h.now, &report(&h, pe, TxnResult::Commit, &written));
    assert_eq!(fx.records.len(), 1);
}

#[test]
fn completion_record_retries_on_coordinator_not_available() {
    let (mut h, pe) = committing(&[tp("a", 0)]);
    let fx = h.c.markers_completed(
        h.now,
        &report(
            &h,
            pe,
            TxnResult::Commit,
            &[(tp("a", 0), MarkerOutcome::Written)],
        ),
    );
    h.absorb(fx);
    h.fail_all(KafkaError::CoordinatorNotAvailable);
    assert!(h.responses.values().all(|r| r.error().is_none()));
    assert_eq!(h.c.pending_state(T), Some(TransactionState::CompleteCommit));
    let backoff = h.c.config().retry_backoff_ms;
    assert_eq!(h.c.next_deadline(), Some(h.now + backoff));
    h.advance(backoff);
    h.tick();
    assert_eq!(h.records.len(), 1);
    h.confirm_all();
    assert_eq!(h.c.state(T), Some(TransactionState::CompleteCommit));
    assert_eq!(h.c.pending_state(T), None);
}

#[test]
fn completion_record_failing_otherwise_waits_for_a_reload() {
    let (mut h, pe) = committing(&[tp("a", 0)]);
    let fx = h.c.markers_completed(
        h.now,
        &report(
            &h,
            pe,
            TxnResult::Commit,
            &[(tp("a", 0), MarkerOutcome::Written)],
        ),
    );
    h.absorb(fx);
    h.fail_all(KafkaError::NotCoordinator);
    assert_eq!(h.c.state(T), Some(TransactionState::PrepareCommit));
    assert_eq!(h.c.pending_state(T), None);
    h.advance(1_000);
    h.tick();
    assert!(h.records.is_empty() && h.markers.is_empty());
    // The client's retries: CONCURRENT_TRANSACTIONS.
    let t = h.end(T, pe, TxnResult::Commit);
    assert_eq!(h.resp(t), end_err(KafkaError::ConcurrentTransactions));
    let t = h.init(T);
    assert_eq!(h.resp(t), init_err(KafkaError::ConcurrentTransactions));
    h.reload();
    h.settle();
    assert_eq!(h.c.state(T), Some(TransactionState::CompleteCommit));
}

#[test]
fn abort_markers_carry_abort() {
    let mut h = Harness::new();
    let pe = h.ongoing(T, &[tp("a", 0)]);
    let t = h.end(T, pe, TxnResult::Abort);
    h.confirm_all();
    assert_eq!(h.resp(t), end_ok(pe.0, pe.1));
    assert_eq!(h.markers[0].result, TxnResult::Abort);
    h.settle();
    assert_eq!(h.c.state(T), Some(TransactionState::CompleteAbort));
    // The completed EndTxn's retry is answered NONE, a commit is refused.
    let t = h.end(T, pe, TxnResult::Abort);
    assert_eq!(h.resp(t), end_ok(pe.0, pe.1));
    let t = h.end(T, pe, TxnResult::Commit);
    assert_eq!(h.resp(t), end_err(KafkaError::InvalidTxnState));
}
