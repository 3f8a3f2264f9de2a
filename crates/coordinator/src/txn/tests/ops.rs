//! AddPartitionsToTxn, AddOffsetsToTxn and EndTxn against every state.

use super::*;

#[test]
fn add_partitions_starts_a_transaction_after_its_record() {
    let mut h = Harness::new();
    let pe = h.ready(T);
    h.advance(5);
    let t = h.add(T, pe, &[tp("b", 1), tp("a", 0)]);
    assert_eq!(h.resp(t), None);
    assert_eq!(h.c.state(T), Some(TransactionState::Empty));
    assert_eq!(h.c.pending_state(T), Some(TransactionState::Ongoing));
    let v = h.records[0].record.value.clone().unwrap();
    assert_eq!(v.transaction_status, 1);
    assert_eq!(v.transaction_start_timestamp_ms, START + 5);
    assert_eq!(v.transaction_last_update_timestamp_ms, START + 5);
    assert_eq!(
        v.transaction_partitions,
        Some(vec![
            TxnTopicPartitions {
                topic: "a".into(),
                partition_ids: vec![0]
            },
            TxnTopicPartitions {
                topic: "b".into(),
                partition_ids: vec![1]
            },
        ])
    );
    h.confirm_all();
    assert_eq!(h.resp(t), Some(TxnResponse::AddPartitions(None)));
    assert_eq!(h.c.state(T), Some(TransactionState::Ongoing));
    assert_eq!(h.c.partitions(T), vec![tp("a", 0), tp("b", 1)]);

    // More partitions: the start time stays, the set grows.
    h.advance(5);
    let t = h.add(T, pe, &[tp("a", 0), tp("c", 2)]);
    let v = h.records[0].record.value.clone().unwrap();
    assert_eq!(v.transaction_start_timestamp_ms, START + 5);
    assert_eq!(v.transaction_last_update_timestamp_ms, START + 10);
    h.confirm_all();
    assert_eq!(h.resp(t), Some(TxnResponse::AddPartitions(None)));
    assert_eq!(h.c.partitions(T), vec![tp("a", 0), tp("b", 1), tp("c", 2)]);

    // Partitions already in: answered at once, no record.
    let t = h.add(T, pe, &[tp("c", 2), tp("a", 0)]);
    assert_eq!(h.resp(t), Some(TxnResponse::AddPartitions(None)));
    assert!(h.records.is_empty());
}

#[test]
fn add_partitions_refusals() {
    let mut h = Harness::new();
    let pe = h.ready(T);
    let p = [tp("a", 0)];
    let t = h.add("", pe, &p);
    assert_eq!(h.resp(t), add_err(KafkaError::InvalidRequest));
    let t = h.add("unknown", pe, &p);
    assert_eq!(h.resp(t), add_err(KafkaError::InvalidProducerIdMapping));
    let t = h.add(T, (pe.0 + 1, pe.1), &p);
    assert_eq!(h.resp(t), add_err(KafkaError::InvalidProducerIdMapping));
    let t = h.add(T, (pe.0, pe.1 + 1), &p);
    assert_eq!(h.resp(t), add_err(KafkaError::ProducerFenced));
    let t = h.add(T, (pe.0, pe.1 - 1), &p);
    assert_eq!(h.resp(t), add_err(KafkaError::ProducerFenced));
    // A pending record: CONCURRENT_TRANSACTIONS.
    let first = h.add(T, pe, &p);
    let t = h.add(T, pe, &[tp("b", 0)]);
    assert_eq!(h.resp(t), add_err(KafkaError::ConcurrentTransactions));
    h.confirm_all();
    assert_eq!(h.resp(first), Some(TxnResponse::AddPartitions(None)));
    // Markers being written: CONCURRENT_TRANSACTIONS.
    h.end(T, pe, TxnResult::Commit);
    h.confirm_all();
    assert_eq!(h.c.state(T), Some(TransactionState::PrepareCommit));
    let t = h.add(T, pe, &[tp("b", 0)]);
    assert_eq!(h.resp(t), add_err(KafkaError::ConcurrentTransactions));
    assert!(h.records.is_empty());
}

#[test]
fn add_partitions_after_a_completed_transaction_starts_a_new_one() {
    let mut h = Harness::new();
    let pe = h.ongoing(T, &[tp("a", 0)]);
    h.end(T, pe, TxnResult::Commit);
    h.settle();
    assert_eq!(h.c.state(T), Some(TransactionState::CompleteCommit));
    assert_eq!(h.c.partitions(T), vec![]);
    h.advance(100);
    let t = h.add(T, pe, &[tp("b", 0)]);
    let v = h.records[0].record.value.clone().unwrap();
    assert_eq!(v.transaction_start_timestamp_ms, START + 100);
    h.confirm_all();
    assert_eq!(h.resp(t), Some(TxnResponse::AddPartitions(None)));
    assert_eq!(h.c.partitions(T), vec![tp("b", 0)]);
}

#[test]
fn add_partitions_with_no_partitions_opens_an_empty_transaction() {
    // Kafka accepts it (Ongoing with no partitions); its EndTxn completes
    // without markers.
    let mut h = Harness::new();
    let pe = h.ready(T);
    let t = h.add(T, pe, &[]);
    h.confirm_all();
    assert_eq!(h.resp(t), Some(TxnResponse::AddPartitions(None)));
    assert_eq!(h.c.state(T), Some(TransactionState::Ongoing));
    let e = h.end(T, pe, TxnResult::Commit);
    h.confirm_all();
    assert_eq!(h.resp(e), end_ok(pe.0, pe.1));
    assert!(h.markers.is_empty());
    assert_eq!(h.c.state(T), Some(TransactionState::CompleteCommit));
}

#[test]
fn add_offsets_adds_the_groups_consumer_offsets_partition() {
    let mut h = Harness::new();
    let pe = h.ready(T);
    let t = h.token();
    let req = AddOffsetsRequest {
        transactional_id: T.into(),
        producer_id: pe.0,
        producer_epoch: pe.1,
        group_id: "my-group".into(),
    };
    let fx = h.c.add_offsets_to_txn(h.now, t, &req, 50);
    h.absorb(fx);
    h.confirm_all();
    assert_eq!(h.resp(t), Some(TxnResponse::AddOffsets(None)));
    // abs("my-group".hashCode()) % 50 == 12 (offsets::partition tests)
    assert_eq!(h.c.partitions(T), vec![tp("__consumer_offsets", 12)]);
    // Errors come back as AddOffsets responses.
    let t = h.token();
    let bad = AddOffsetsRequest {
        producer_epoch: pe.1 + 1,
        ..req
    };
    let fx = h.c.add_offsets_to_txn(h.now, t, &bad, 50);
    h.absorb(fx);
    assert_eq!(
        h.resp(t),
        Some(TxnResponse::AddOffsets(Some(KafkaError::ProducerFenced)))
    );
}

#[test]
fn end_txn_commit_answers_after_prepare_commit_then_writes_markers() {
    let mut h = Harness::new();
    let pe = h.ongoing(T, &[tp("a", 0), tp("a", 1)]);
    h.advance(7);
    let t = h.end(T, pe, TxnResult::Commit);
    assert_eq!(h.resp(t), None);
    assert!(h.markers.is_empty(), "no marker before PrepareCommit is in");
    let v = h.records[0].record.value.clone().unwrap();
    assert_eq!(v.transaction_status, TransactionState::PrepareCommit.id());
    assert_eq!(v.transaction_start_timestamp_ms, START);
    assert_eq!(v.transaction_last_update_timestamp_ms, START + 7);
    h.confirm_all();
    assert_eq!(h.resp(t), end_ok(pe.0, pe.1));
    assert_eq!(
        h.markers,
        vec![WriteMarkers {
            transactional_id: T.into(),
            producer_id: pe.0,
            producer_epoch: pe.1,
            coordinator_epoch: 1,
            result: TxnResult::Commit,
            partitions: vec![tp("a", 0), tp("a", 1)],
        }]
    );
    assert_eq!(h.c.state(T), Some(TransactionState::PrepareCommit));
    assert_eq!(h.c.pending_state(T), Some(TransactionState::CompleteCommit));
    h.report_markers(MarkerOutcome::Written);
    let v = h.records[0].record.value.clone().unwrap();
    assert_eq!(v.transaction_status, TransactionState::CompleteCommit.id());
    assert_eq!(v.transaction_partitions, Some(vec![]));
    assert_eq!(v.transaction_start_timestamp_ms, START);
    h.confirm_all();
    assert_eq!(h.c.state(T), Some(TransactionState::CompleteCommit));
    assert_eq!(h.c.pending_state(T), None);
}

#[test]
fn end_txn_against_every_state() {
    use TransactionState::*;
    use TxnResult::*;
    // (state reached, result, expected response, record emitted)
    let cases: [(TransactionState, TxnResult, Option<KafkaError>, bool); 12] = [
        (Empty, Commit, Some(KafkaError::InvalidTxnState), false),
        (Empty, Abort, Some(KafkaError::InvalidTxnState), false),
        (Ongoing, Commit, None, true),
        (Ongoing, Abort, None, true),
        (
            PrepareCommit,
            Commit,
            Some(KafkaError::ConcurrentTransactions),
            false,
        ),
        (
            PrepareCommit,
            Abort,
            Some(KafkaError::InvalidTxnState),
            false,
        ),
        (
            PrepareAbort,
            Abort,
            Some(KafkaError::ConcurrentTransactions),
            false,
        ),
        (
            PrepareAbort,
            Commit,
            Some(KafkaError::InvalidTxnState),
            false,
        ),
        (CompleteCommit, Commit, None, false),
        (
            CompleteCommit,
            Abort,
            Some(KafkaError::InvalidTxnState),
            false,
        ),
        (CompleteAbort, Abort, None, false),
        (
            CompleteAbort,
            Commit,
            Some(KafkaError::InvalidTxnState),
            false,
        ),
    ];
    for (state, result, want, record) in cases {
        let mut h = Harness::new();
        let pe = h.ready(T);
        if state != Empty {
            h.add(T, pe, &[tp("a", 0)]);
            h.confirm_all();
        }
        match state {
            PrepareCommit | CompleteCommit => {
                h.end(T, pe, Commit);
            }
            PrepareAbort | CompleteAbort => {
                h.end(T, pe, Abort);
            }
            _ => {}
        }
        if matches!(state, PrepareCommit | PrepareAbort) {
            h.confirm_all(); // PrepareX in the log, markers emitted
                             // While the completion is pending the answer is
                             // CONCURRENT_TRANSACTIONS whatever the result (Kafka checks
                             // the pending state first) ...
            let t = h.end(T, pe, result);
            assert_eq!(
                h.resp(t),
                end_err(KafkaError::ConcurrentTransactions),
                "{state:?} pending {result:?}"
            );
            // ... then a completion record failing with NOT_COORDINATOR
            // leaves PrepareX without a pending transition.
            h.report_markers(MarkerOutcome::Written);
            h.fail_all(KafkaError::NotCoordinator);
            assert_eq!(h.c.pending_state(T), None);
        } else {
            h.settle();
        }
        assert_eq!(h.c.state(T), Some(state));
        let t = h.end(T, pe, result);
        assert_eq!(h.records.is_empty(), !record, "{state:?} {result:?}");
        h.confirm_all();
        let got = h.resp(t);
        let expected = match want {
            None => end_ok(pe.0, pe.1),
            Some(e) => end_err(e),
        };
        assert_eq!(got, expected, "{state:?} {result:?}");
    }
}

#[test]
fn end_txn_refusals() {
    let mut h = Harness::new();
    let pe = h.ongoing(T, &[tp("a", 0)]);
    let t = h.end("", pe, TxnResult::Commit);
    assert_eq!(h.resp(t), end_err(KafkaError::InvalidRequest));
    let t = h.end("nope", pe, TxnResult::Commit);
    assert_eq!(h.resp(t), end_err(KafkaError::InvalidProducerIdMapping));
    let t = h.end(T, (pe.0 + 1, pe.1), TxnResult::Commit);
    assert_eq!(h.resp(t), end_err(KafkaError::InvalidProducerIdMapping));
    let t = h.end(T, (pe.0, pe.1 + 1), TxnResult::Commit);
    assert_eq!(h.resp(t), end_err(KafkaError::ProducerFenced));
    let first = h.end(T, pe, TxnResult::Commit);
    let t = h.end(T, pe, TxnResult::Commit);
    assert_eq!(h.resp(t), end_err(KafkaError::ConcurrentTransactions));
    let t = h.end(T, pe, TxnResult::Abort);
    assert_eq!(h.resp(t), end_err(KafkaError::ConcurrentTransactions));
    h.confirm_all();
    assert_eq!(h.resp(first), end_ok(pe.0, pe.1));
    // Markers pending: CONCURRENT_TRANSACTIONS for either result.
    let t = h.end(T, pe, TxnResult::Abort);
    assert_eq!(h.resp(t), end_err(KafkaError::ConcurrentTransactions));
    let t = h.end(T, pe, TxnResult::Commit);
    assert_eq!(h.resp(t), end_err(KafkaError::ConcurrentTransactions));
}

#[test]
fn end_txn_append_failure_leaves_the_transaction_ongoing() {
    let mut h = Harness::new();
    let pe = h.ongoing(T, &[tp("a", 0)]);
    let t = h.end(T, pe, TxnResult::Commit);
    h.fail_all(KafkaError::CoordinatorNotAvailable);
    assert_eq!(h.resp(t), end_err(KafkaError::CoordinatorNotAvailable));
    assert_eq!(h.c.state(T), Some(TransactionState::Ongoing));
    assert_eq!(h.c.pending_state(T), None);
    assert!(h.markers.is_empty());
    let t = h.end(T, pe, TxnResult::Abort);
    h.settle();
    assert_eq!(h.resp(t), end_ok(pe.0, pe.1));
    assert_eq!(h.c.state(T), Some(TransactionState::CompleteAbort));
}

#[test]
fn add_partitions_append_failure_keeps_the_old_set() {
    let mut h = Harness::new();
    let pe = h.ongoing(T, &[tp("a", 0)]);
    let t = h.add(T, pe, &[tp("b", 0)]);
    h.fail_all(KafkaError::NotCoordinator);
    assert_eq!(h.resp(t), add_err(KafkaError::NotCoordinator));
    assert_eq!(h.c.partitions(T), vec![tp("a", 0)]);
    assert_eq!(h.c.pending_state(T), None);
}
