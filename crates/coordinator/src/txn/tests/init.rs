//! InitProducerId: new ids, epoch bumps and fencing, KIP-360 retries,
//! epoch exhaustion, the abort of an Ongoing transaction, errors.

use super::*;

#[test]
fn new_id_gets_a_producer_id_and_epoch_zero_after_its_record() {
    let mut h = Harness::new();
    let t = h.init(T);
    // Nothing answered before the record is confirmed.
    assert_eq!(h.resp(t), None);
    assert_eq!(h.records.len(), 1);
    let rec = &h.records[0].record;
    assert_eq!(rec.transactional_id, T);
    let v = rec.value.clone().unwrap();
    assert_eq!(
        v,
        TransactionLogValue {
            producer_id: 1000,
            previous_producer_id: 1000,
            next_producer_id: -1,
            producer_epoch: 0,
            transaction_timeout_ms: TIMEOUT,
            transaction_status: 0,
            transaction_partitions: None,
            transaction_last_update_timestamp_ms: START,
            transaction_start_timestamp_ms: -1,
            client_transaction_version: 0,
        }
    );
    assert_eq!(h.c.pending_state(T), Some(TransactionState::Empty));
    assert_eq!(h.c.producer_id_and_epoch(T), Some((1000, -1)));
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(1000, 0));
    assert_eq!(h.c.producer_id_and_epoch(T), Some((1000, 0)));
    assert_eq!(h.c.pending_state(T), None);
}

#[test]
fn a_new_producer_bumps_the_epoch_and_fences_the_old_one() {
    let mut h = Harness::new();
    let old = h.ready(T);
    assert_eq!(old, (1000, 0));
    let t = h.init(T);
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(1000, 1));
    // The old producer is fenced everywhere.
    let a = h.add(T, old, &[tp("a", 0)]);
    assert_eq!(h.resp(a), add_err(KafkaError::ProducerFenced));
    let e = h.end(T, old, TxnResult::Commit);
    assert_eq!(h.resp(e), end_err(KafkaError::ProducerFenced));
    assert!(h.records.is_empty());
}

#[test]
fn request_checks_come_first() {
    let mut h = Harness::new();
    let cases = [
        ("", TIMEOUT, KafkaError::InvalidRequest),
        (T, 0, KafkaError::InvalidTransactionTimeout),
        (T, -1, KafkaError::InvalidTransactionTimeout),
        (T, 900_001, KafkaError::InvalidTransactionTimeout),
    ];
    for (id, timeout, e) in cases {
        let t = h.init_req(InitProducerIdRequest {
            transactional_id: id.to_string(),
            transaction_timeout_ms: timeout,
            producer_id_and_epoch: None,
        });
        assert_eq!(h.resp(t), init_err(e), "{id:?} {timeout}");
    }
    assert!(h.records.is_empty());
    assert_eq!(h.c.state(T), None);
    let t = h.init_req(InitProducerIdRequest {
        transactional_id: T.to_string(),
        transaction_timeout_ms: 900_000,
        producer_id_and_epoch: None,
    });
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(1000, 0));
}

#[test]
fn unloaded_loading_and_foreign_ids_are_refused() {
    let mut h = Harness::new();
    h.c = TransactionCoordinator::new(cfg(), 0);
    let t = h.init(T);
    assert_eq!(h.resp(t), init_err(KafkaError::NotCoordinator));
    let fx = h.c.begin_load(3);
    h.absorb(fx);
    let t = h.init(T);
    assert_eq!(h.resp(t), init_err(KafkaError::CoordinatorLoadInProgress));
    // With 50 partitions, shard 0 does not coordinate "txn".
    let mut h = Harness::with(TxnConfig {
        num_partitions: 50,
        ..cfg()
    });
    assert_ne!(partition_for(T, 50), 0);
    let t = h.init(T);
    assert_eq!(h.resp(t), init_err(KafkaError::NotCoordinator));
    // ... but it does coordinate an id that hashes to 0.
    assert_eq!(partition_for("polygenelubricants", 50), 0);
    let t = h.init("polygenelubricants");
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(1000, 0));
    assert_eq!(h.last_pid, 1000);
}

#[test]
fn producer_id_source_errors_are_answered() {
    let mut h = Harness::new();
    h.pid_error = Some(KafkaError::CoordinatorLoadInProgress);
    let t = h.init(T);
    assert_eq!(h.resp(t), init_err(KafkaError::CoordinatorLoadInProgress));
    assert_eq!(h.c.state(T), None);
    assert!(h.records.is_empty());
}

#[test]
fn concurrent_init_while_a_record_is_pending() {
    let mut h = Harness::new();
    let t1 = h.init(T);
    let t2 = h.init(T);
    assert_eq!(h.resp(t2), init_err(KafkaError::ConcurrentTransactions));
    h.confirm_all();
    assert_eq!(h.resp(t1), init_ok(1000, 0));
}

#[test]
fn failed_append_rolls_back_and_answers_the_error() {
    let mut h = Harness::new();
    let pe = h.ready(T);
    for e in [
        KafkaError::CoordinatorNotAvailable,
        KafkaError::NotCoordinator,
        KafkaError::UnknownServerError,
    ] {
        let t = h.init(T);
        h.fail_all(e);
        assert_eq!(h.resp(t), init_err(e));
        assert_eq!(h.c.producer_id_and_epoch(T), Some(pe));
        assert_eq!(h.c.pending_state(T), None);
    }
    let t = h.init(T);
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(1000, 1));
}

#[test]
fn failed_first_append_leaves_the_new_id_without_epoch() {
    let mut h = Harness::new();
    let t = h.init(T);
    h.fail_all(KafkaError::CoordinatorNotAvailable);
    assert_eq!(h.resp(t), init_err(KafkaError::CoordinatorNotAvailable));
    // As Kafka, the id stays in memory with its producer id and no epoch;
    // the retry bumps to epoch 0 of the same producer id.
    assert_eq!(h.c.producer_id_and_epoch(T), Some((1000, -1)));
    let d = h.c.describe_transactions(&[T.to_string()]);
    assert_eq!(
        (d[0].error, d[0].state.as_str(), d[0].producer_epoch),
        (None, "Empty", -1)
    );
    let l =
        h.c.list_transactions(h.now, &ListTransactionsFilter::default())
            .unwrap();
    assert_eq!(l.transactions.len(), 1);
    let t = h.init(T);
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(1000, 0));
}

/// KIP-360: (current epoch, last epoch) of the id, what the producer
/// sends, and the outcome.
#[test]
fn kip360_producer_id_and_epoch_rules() {
    struct Case {
        name: &'static str,
        sent: (i64, i16),
        want: Result<(i64, i16), KafkaError>,
    }
    // The id: producer 1000 at epoch 1 after a bump from 0 (last epoch 0).
    let cases = [
        Case {
            name: "current epoch: bump",
            sent: (1000, 1),
            want: Ok((1000, 2)),
        },
        Case {
            name: "last epoch: retry of a bump that succeeded",
            sent: (1000, 0),
            want: Ok((1000, 1)),
        },
        Case {
            name: "older epoch: fenced",
            sent: (1000, 5),
            want: Err(KafkaError::ProducerFenced),
        },
        Case {
            name: "other producer id: fenced",
            sent: (77, 1),
            want: Err(KafkaError::ProducerFenced),
        },
    ];
    for c in cases {
        let mut h = Harness::new();
        h.ready(T);
        let t = h.init_with(T, Some((1000, 0)));
        h.confirm_all();
        assert_eq!(h.resp(t), init_ok(1000, 1), "{}", c.name);
        let t = h.init_with(T, Some(c.sent));
        h.confirm_all();
        let want = match c.want {
            Ok((p, e)) => init_ok(p, e),
            Err(e) => init_err(e),
        };
        assert_eq!(h.resp(t), want, "{}", c.name);
    }
}

#[test]
fn a_new_producer_forgets_the_last_epoch() {
    let mut h = Harness::new();
    h.ready(T); // epoch 0
    let t = h.init_with(T, Some((1000, 0)));
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(1000, 1)); // last epoch 0
    let t = h.init(T); // a new producer (no id/epoch): last epoch -1
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(1000, 2));
    // The producer that had epoch 0 can no longer pass as a retry.
    let t = h.init_with(T, Some((1000, 0)));
    assert_eq!(h.resp(t), init_err(KafkaError::ProducerFenced));
}

#[test]
fn expected_producer_on_a_fresh_id_is_accepted() {
    // A producer recovering from UNKNOWN_PRODUCER_ID after its id expired:
    // the new id has no epoch yet, so any expected id is fine.
    let mut h = Harness::new();
    let t = h.init_with(T, Some((5, 3)));
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(1000, 0));
}

/// Drives `T` to (producer 1000, `epoch`) through the log, as if loaded.
fn at_epoch(epoch: i16, state: TransactionState) -> Harness {
    let mut h = Harness::new();
    let v = TransactionLogValue {
        producer_id: 1000,
        previous_producer_id: -1,
        next_producer_id: -1,
        producer_epoch: epoch,
        transaction_timeout_ms: TIMEOUT,
        transaction_status: state.id(),
        transaction_partitions: Some(vec![TxnTopicPartitions {
            topic: "a".into(),
            partition_ids: vec![0],
        }]),
        transaction_last_update_timestamp_ms: START,
        transaction_start_timestamp_ms: START,
        client_transaction_version: 0,
    };
    let rec = crate::offsets::Record::transaction(T, &v, 1).unwrap();
    h.log.push((rec.key, rec.value));
    h.reload();
    h
}

#[test]
fn exhausted_epoch_rotates_the_producer_id() {
    for state in [
        TransactionState::CompleteCommit,
        TransactionState::CompleteAbort,
    ] {
        let mut h = at_epoch(i16::MAX - 1, state);
        h.last_pid = 2999;
        let t = h.init(T);
        h.confirm_all();
        assert_eq!(h.resp(t), init_ok(3000, 0), "{state:?}");
    }
    let mut h = at_epoch(i16::MAX - 1, TransactionState::Empty);
    h.last_pid = 4999;
    let t = h.init(T);
    let v = h.records[0].record.value.clone().unwrap();
    assert_eq!(v.producer_id, 5000);
    assert_eq!(v.previous_producer_id, 1000);
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(5000, 0));
    // Below the threshold the epoch is bumped.
    let mut h = at_epoch(i16::MAX - 2, TransactionState::Empty);
    let t = h.init(T);
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(1000, i16::MAX - 1));
}

#[test]
fn retry_after_producer_id_rotation_gets_the_same_answer() {
    // Kafka's testRetryInitProducerIdAfterProducerIdRotation and
    // testInitProducerIdWithInvalidEpochAfterProducerIdRotation.
    let mut h = at_epoch(i16::MAX - 1, TransactionState::Empty);
    h.last_pid = 1000;
    let t = h.init_with(T, Some((1000, i16::MAX - 1)));
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(1001, 0));
    let t = h.init_with(T, Some((1000, i16::MAX - 1)));
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(1001, 0));
    let t = h.init_with(T, Some((1000, i16::MAX - 2)));
    assert_eq!(h.resp(t), init_err(KafkaError::ProducerFenced));
}

#[test]
fn exhausted_epoch_with_a_mismatching_expected_epoch_is_a_server_error() {
    // Kafka's prepareIncrementProducerEpoch throws once the epoch is
    // exhausted; the request ends with UNKNOWN_SERVER_ERROR.
    let mut h = at_epoch(i16::MAX - 1, TransactionState::Empty);
    let t = h.init_with(T, Some((1000, 3)));
    assert_eq!(h.resp(t), init_err(KafkaError::UnknownServerError));
    assert_eq!(h.c.pending_state(T), None);
}

#[test]
fn ongoing_transaction_is_fenced_and_aborted_before_answering() {
    let mut h = Harness::new();
    let old = h.ongoing(T, &[tp("a", 0), tp("b", 1)]);
    let t = h.init(T);
    // The epoch is bumped in memory at once: the old producer is fenced
    // while the abort is being written.
    assert_eq!(h.c.producer_id_and_epoch(T), Some((1000, 1)));
    assert_eq!(h.c.pending_state(T), Some(TransactionState::PrepareAbort));
    let a = h.add(T, old, &[tp("c", 0)]);
    assert_eq!(h.resp(a), add_err(KafkaError::ProducerFenced));
    let v = h.records[0].record.value.clone().unwrap();
    assert_eq!(v.transaction_status, TransactionState::PrepareAbort.id());
    assert_eq!(v.producer_epoch, 1);
    assert_eq!(h.resp(t), None);
    h.confirm_all();
    // CONCURRENT_TRANSACTIONS once the abort is in the log; markers follow.
    assert_eq!(h.resp(t), init_err(KafkaError::ConcurrentTransactions));
    assert_eq!(h.markers.len(), 1);
    assert_eq!(h.markers[0].result, TxnResult::Abort);
    assert_eq!(h.markers[0].producer_epoch, 1);
    assert_eq!(h.markers[0].partitions, vec![tp("a", 0), tp("b", 1)]);
    // The retry while markers are written is refused again.
    let t = h.init(T);
    assert_eq!(h.resp(t), init_err(KafkaError::ConcurrentTransactions));
    h.settle();
    assert_eq!(h.c.state(T), Some(TransactionState::CompleteAbort));
    let t = h.init(T);
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(1000, 2));
}

#[test]
fn failed_fence_keeps_the_bumped_epoch_and_does_not_bump_twice() {
    let mut h = Harness::new();
    h.ongoing(T, &[tp("a", 0)]);
    let t = h.init(T);
    h.fail_all(KafkaError::NotCoordinator);
    assert_eq!(h.resp(t), init_err(KafkaError::NotCoordinator));
    // As Kafka: the bump stays in memory (never returned to a client).
    assert_eq!(h.c.state(T), Some(TransactionState::Ongoing));
    assert_eq!(h.c.producer_id_and_epoch(T), Some((1000, 1)));
    let t = h.init(T);
    let v = h.records[0].record.value.clone().unwrap();
    assert_eq!(v.producer_epoch, 1, "the failed fence is not bumped again");
    h.settle();
    assert_eq!(h.resp(t), init_err(KafkaError::ConcurrentTransactions));
    let t = h.init(T);
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(1000, 2));
}

#[test]
fn fencing_that_exhausts_the_epoch_rotates_on_the_retry() {
    let mut h = at_epoch(i16::MAX - 2, TransactionState::Ongoing);
    let t = h.init(T);
    h.settle();
    assert_eq!(h.resp(t), init_err(KafkaError::ConcurrentTransactions));
    assert_eq!(h.c.producer_id_and_epoch(T), Some((1000, i16::MAX - 1)));
    h.last_pid = 2000;
    let t = h.init(T);
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(2001, 0));
}
