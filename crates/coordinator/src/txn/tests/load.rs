//! Loading from the log, reloading after a failover, unloading.

use super::*;
use crate::offsets::Record;

#[test]
fn reload_rebuilds_every_id() {
    let mut h = Harness::new();
    let a = h.ready("a");
    let b = h.ongoing("b", &[tp("x", 0), tp("y", 3)]);
    let c = h.ongoing("c", &[tp("x", 1)]);
    h.end("c", c, TxnResult::Commit);
    h.settle();
    let before: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|id| {
            (
                h.c.state(id),
                h.c.producer_id_and_epoch(id),
                h.c.partitions(id),
            )
        })
        .collect();
    h.reload();
    assert!(h.records.is_empty() && h.markers.is_empty());
    let after: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|id| {
            (
                h.c.state(id),
                h.c.producer_id_and_epoch(id),
                h.c.partitions(id),
            )
        })
        .collect();
    assert_eq!(before, after);
    assert_eq!(h.c.state("b"), Some(TransactionState::Ongoing));
    assert_eq!(h.c.coordinator_epoch(), 2);
    // The producers carry on.
    let t = h.add("b", b, &[tp("z", 0)]);
    h.confirm_all();
    assert_eq!(h.resp(t), Some(TxnResponse::AddPartitions(None)));
    let t = h.init_with("a", Some(a));
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(a.0, a.1 + 1));
}

#[test]
fn prepared_transactions_get_their_markers_after_a_load() {
    let mut h = Harness::new();
    let pe = h.ongoing(T, &[tp("a", 0), tp("b", 0)]);
    h.ongoing("other", &[tp("a", 1)]);
    h.end(T, pe, TxnResult::Commit);
    h.confirm_all(); // PrepareCommit in the log
                     // Half the markers were written before the coordinator moved.
    let m = h.markers.remove(0);
    let fx = h.c.markers_completed(
        h.now,
        &MarkerCompletion {
            transactional_id: m.transactional_id,
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
            coordinator_epoch: m.coordinator_epoch,
            result: m.result,
            partitions: vec![(tp("a", 0), MarkerOutcome::Written)],
        },
    );
    h.absorb(fx);
    h.reload();
    // Every partition of the PrepareCommit record gets its marker again,
    // under the new coordinator epoch; the Ongoing one waits.
    assert_eq!(
        h.markers,
        vec![WriteMarkers {
            transactional_id: T.into(),
            producer_id: pe.0,
            producer_epoch: pe.1,
            coordinator_epoch: 2,
            result: TxnResult::Commit,
            partitions: vec![tp("a", 0), tp("b", 0)],
        }]
    );
    assert_eq!(h.c.pending_state(T), Some(TransactionState::CompleteCommit));
    assert_eq!(h.c.state("other"), Some(TransactionState::Ongoing));
    let t = h.end(T, pe, TxnResult::Commit);
    assert_eq!(h.resp(t), end_err(KafkaError::ConcurrentTransactions));
    h.settle();
    assert_eq!(h.c.state(T), Some(TransactionState::CompleteCommit));
    let t = h.end(T, pe, TxnResult::Commit);
    assert_eq!(h.resp(t), end_ok(pe.0, pe.1));
}

#[test]
fn ongoing_transactions_abort_on_timeout_after_a_load() {
    let mut h = Harness::with(TxnConfig {
        abort_timed_out_interval_ms: 1_000,
        ..cfg()
    });
    let pe = h.ongoing(T, &[tp("a", 0)]);
    h.advance(i64::from(TIMEOUT) + 1);
    h.reload();
    assert!(h.records.is_empty());
    h.advance(1_000);
    h.tick();
    assert_eq!(h.c.pending_state(T), Some(TransactionState::PrepareAbort));
    h.settle();
    assert_eq!(h.c.state(T), Some(TransactionState::CompleteAbort));
    assert_eq!(h.c.producer_id_and_epoch(T), Some((pe.0, pe.1 + 1)));
}

#[test]
fn unload_answers_waiting_requests_and_ignores_late_reports() {
    let mut h = Harness::new();
    let pe = h.ongoing(T, &[tp("a", 0)]);
    let pe2 = h.ongoing("u", &[tp("a", 0)]);
    h.ready("v");
    h.ongoing("w", &[tp("a", 0)]);
    let end = h.end(T, pe, TxnResult::Commit);
    let add = h.add("u", pe2, &[tp("b", 0)]);
    let init = h.init("v");
    let fence = h.init("w"); // fences w's producer: waits on the abort
    assert_eq!(h.c.pending_state("w"), Some(TransactionState::PrepareAbort));
    let records = std::mem::take(&mut h.records);
    let fx = h.c.unload();
    h.absorb(fx);
    assert_eq!(h.resp(end), end_err(KafkaError::NotCoordinator));
    assert_eq!(h.resp(add), add_err(KafkaError::NotCoordinator));
    assert_eq!(h.resp(init), init_err(KafkaError::NotCoordinator));
    assert_eq!(h.resp(fence), init_err(KafkaError::NotCoordinator));
    assert_eq!(h.c.status(), ShardStatus::Unloaded);
    assert_eq!(h.c.state(T), None);
    for r in records {
        assert!(h.c.append_completed(h.now, r.id).is_empty());
    }
    let t = h.init(T);
    assert_eq!(h.resp(t), init_err(KafkaError::NotCoordinator));
    let d = h.c.describe_transactions(&[T.to_string()]);
    assert_eq!(d[0].error, Some(KafkaError::NotCoordinator));
    assert_eq!(
        h.c.list_transactions(h.now, &ListTransactionsFilter::default()),
        Ok(ListedTxns::default())
    );
}

#[test]
fn records_of_a_previous_load_are_ignored_after_a_reload() {
    let mut h = Harness::new();
    let pe = h.ready(T);
    let t = h.add(T, pe, &[tp("a", 0)]);
    let old = std::mem::take(&mut h.records);
    h.reload();
    assert_eq!(h.resp(t), add_err(KafkaError::NotCoordinator));
    for r in old {
        assert!(h.c.append_completed(h.now, r.id).is_empty());
        assert!(h
            .c
            .append_failed(h.now, r.id, KafkaError::CoordinatorNotAvailable)
            .is_empty());
    }
    assert_eq!(h.c.state(T), Some(TransactionState::Empty));
}

#[test]
fn requests_during_a_load_are_told_to_wait() {
    let mut h = Harness::new();
    let pe = h.ongoing(T, &[tp("a", 0)]);
    let fx = h.c.begin_load(5);
    h.absorb(fx);
    assert_eq!(h.c.status(), ShardStatus::Loading);
    let t = h.add(T, pe, &[tp("b", 0)]);
    assert_eq!(h.resp(t), add_err(KafkaError::CoordinatorLoadInProgress));
    let t = h.end(T, pe, TxnResult::Commit);
    assert_eq!(h.resp(t), end_err(KafkaError::CoordinatorLoadInProgress));
    let d = h.c.describe_transactions(&[T.to_string()]);
    assert_eq!(d[0].error, Some(KafkaError::CoordinatorLoadInProgress));
    assert_eq!(
        h.c.list_transactions(h.now, &ListTransactionsFilter::default()),
        Err(KafkaError::CoordinatorLoadInProgress)
    );
}

#[test]
fn replay_skips_unknown_keys_and_reports_bad_records() {
    let mut c = TransactionCoordinator::new(cfg(), 0);
    let _ = c.begin_load(1);
    let good = TransactionLogValue {
        producer_id: 7,
        previous_producer_id: -1,
        next_producer_id: -1,
        producer_epoch: 3,
        transaction_timeout_ms: 1000,
        transaction_status: TransactionState::Ongoing.id(),
        transaction_partitions: Some(vec![TxnTopicPartitions {
            topic: "t".into(),
            partition_ids: vec![1, 2],
        }]),
        transaction_last_update_timestamp_ms: 5,
        transaction_start_timestamp_ms: 4,
        client_transaction_version: 0,
    };
    let rec = Record::transaction("id", &good, 1).unwrap();
    c.replay(&rec.key, rec.value.as_deref()).unwrap();
    // Unknown key version: skipped.
    c.replay(&[0, 9, 0, 0], Some(&[1, 2, 3])).unwrap();
    // Bad records are errors and change nothing.
    assert!(c.replay(&[0], None).is_err());
    assert!(c.replay(&rec.key, Some(&[0, 7])).is_err());
    let bad_status = TransactionLogValue {
        transaction_status: 9,
        ..good.clone()
    };
    assert_eq!(
        c.replay(&rec.key, Some(&bad_status.encode(0).unwrap())),
        Err(crate::CoordinatorError::MalformedRecord {
            record: "TransactionLogValue",
            reason: "unknown transaction status"
        })
    );
    let fx = c.complete_load(10);
    assert!(fx.is_empty());
    assert_eq!(c.state("id"), Some(TransactionState::Ongoing));
    assert_eq!(c.producer_id_and_epoch("id"), Some((7, 3)));
    assert_eq!(c.partitions("id"), vec![tp("t", 1), tp("t", 2)]);
    assert_eq!(c.snapshot("id"), Some(good));
    // A tombstone removes the id on the next load.
    let _ = c.begin_load(2);
    c.replay(&rec.key, rec.value.as_deref()).unwrap();
    c.replay(&rec.key, None).unwrap();
    let _ = c.complete_load(10);
    assert_eq!(c.state("id"), None);
    // Replay outside a load is ignored.
    c.replay(&rec.key, rec.value.as_deref()).unwrap();
    assert_eq!(c.state("id"), None);
}

#[test]
fn empty_state_ignores_stored_partitions() {
    // Kafka's reader drops partitions of an Empty value.
    let mut c = TransactionCoordinator::new(cfg(), 0);
    let _ = c.begin_load(1);
    let v = TransactionLogValue {
        producer_id: 7,
        previous_producer_id: 6,
        next_producer_id: -1,
        producer_epoch: 0,
        transaction_timeout_ms: 1000,
        transaction_status: 0,
        transaction_partitions: Some(vec![TxnTopicPartitions {
            topic: "t".into(),
            partition_ids: vec![1],
        }]),
        transaction_last_update_timestamp_ms: 5,
        transaction_start_timestamp_ms: -1,
        client_transaction_version: 0,
    };
    let rec = Record::transaction("id", &v, 1).unwrap();
    c.replay(&rec.key, rec.value.as_deref()).unwrap();
    let _ = c.complete_load(10);
    assert_eq!(c.partitions("id"), vec![]);
}

#[test]
fn records_written_are_what_replay_reads() {
    // Both value versions: the log written by one configuration replays.
    for version in [0, 1] {
        let mut h = Harness::with(TxnConfig {
            log_value_version: version,
            ..cfg()
        });
        let pe = h.ongoing(T, &[tp("a", 0)]);
        h.end(T, pe, TxnResult::Abort);
        h.confirm_all();
        // Crash before the markers: PrepareAbort in the log.
        h.reload();
        assert_eq!(h.c.state(T), Some(TransactionState::PrepareAbort));
        assert_eq!(h.markers.len(), 1);
        for (_, v) in &h.log {
            assert_eq!(v.as_ref().unwrap()[..2], version.to_be_bytes());
        }
    }
}

#[test]
fn kip360_retries_do_not_survive_a_reload() {
    // The last epoch is not in the log (Kafka's schema has no field for
    // it): a retry of a bump that succeeded before the coordinator moved
    // is fenced.
    let mut h = Harness::new();
    h.ready(T);
    let t = h.init_with(T, Some((1000, 0)));
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(1000, 1));
    let t = h.init_with(T, Some((1000, 0)));
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(1000, 1), "a retry before the reload");
    h.reload();
    let t = h.init_with(T, Some((1000, 0)));
    assert_eq!(h.resp(t), init_err(KafkaError::ProducerFenced));
    // The current epoch still re-initializes.
    let t = h.init_with(T, Some((1000, 1)));
    h.confirm_all();
    assert_eq!(h.resp(t), init_ok(1000, 2));
}
