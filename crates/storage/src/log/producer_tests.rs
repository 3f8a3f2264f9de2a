//! Producer state through the log: duplicates and errors on append,
//! snapshots on roll and close, loading after clean and unclean shutdowns,
//! expiry, retention and truncation.

use std::sync::Arc;

use sluice_protocol::record::codec::{assemble, encode_record, BatchFields, ProducerInfo};
use sluice_protocol::record::{BatchBuilder, Compression, Record};

use super::tests::{batch, T0};
use super::*;
use crate::clock::ManualClock;
use crate::error::StorageError;
use crate::producer::{snapshot, ProducerLoad};

/// A producer's batch of `n` records from sequence `seq`.
pub(crate) fn pbatch(pid: i64, epoch: i16, seq: i32, n: usize, ts: i64) -> Vec<u8> {
    tbatch(pid, epoch, seq, n, ts, false)
}

fn tbatch(pid: i64, epoch: i16, seq: i32, n: usize, ts: i64, txn: bool) -> Vec<u8> {
    let producer = ProducerInfo {
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: seq,
    };
    let mut b = BatchBuilder::new(Compression::None, ts).producer(producer, txn);
    for i in 0..n {
        b.push(Record::new(
            Some(format!("p{pid}-{seq}-{i}").into_bytes()),
            Some(vec![b'v'; 40]),
            ts,
        ));
    }
    b.build(0).expect("build")
}

/// An end-transaction marker batch (control, transactional).
fn marker(pid: i64, epoch: i16, commit: bool, coordinator_epoch: i32, ts: i64) -> Vec<u8> {
    let mut key = 0i16.to_be_bytes().to_vec();
    key.extend_from_slice(&i16::from(commit).to_be_bytes());
    let mut value = 0i16.to_be_bytes().to_vec();
    value.extend_from_slice(&coordinator_epoch.to_be_bytes());
    let mut payload = Vec::new();
    encode_record(&mut payload, &Record::new(Some(key), Some(value), ts), 0, 0);
    let fields = BatchFields {
        base_offset: 0,
        partition_leader_epoch: -1,
        attributes: 0x10 | 0x20,
        last_offset_delta: 0,
        base_timestamp: ts,
        max_timestamp: ts,
        producer: ProducerInfo {
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: -1,
        },
        records_count: 1,
    };
    assemble(&fields, Compression::None, &payload).expect("marker")
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 100_000,
        ..LogConfig::default()
    }
}

fn open_with(dir: &std::path::Path, clock: &Arc<ManualClock>, opts: LogOpenOptions) -> Log {
    super::tests::try_open(dir, config(), clock, opts).expect("open")
}

fn client(log: &Log, bytes: &mut [u8]) -> Result<AppendInfo> {
    log.append_as_leader_from(bytes, 0, AppendOrigin::Client)
}

fn size_on_disk(log: &Log) -> u64 {
    log.size_in_bytes()
}

#[test]
fn duplicates_of_the_last_five_batches_return_their_offsets_and_append_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open_with(dir.path(), &clock, LogOpenOptions::default());
    let mut sent = Vec::new();
    for i in 0..7 {
        // Batches of other writers in between.
        log.append_as_leader(&mut batch(2, T0, "plain"), 0)
            .expect("plain");
        let mut b = pbatch(1, 0, i * 3, 3, T0 + i64::from(i));
        let info = client(&log, &mut b).expect("append");
        assert!(!info.duplicate);
        sent.push((i * 3, info.base_offset, info.last_offset));
    }
    let (end, size) = (log.log_end_offset(), size_on_disk(&log));
    for &(seq, base, last) in &sent[2..] {
        let ts = T0 + i64::from(seq / 3);
        let info = client(&log, &mut pbatch(1, 0, seq, 3, ts)).expect("retry");
        assert!(info.duplicate, "retry of seq {seq}");
        assert_eq!((info.base_offset, info.last_offset), (base, last));
        assert_eq!(
            info.log_append_time, ts,
            "Kafka answers the batch's timestamp"
        );
        assert_eq!((info.record_count, info.batches.len()), (0, 0));
        assert_eq!(log.log_end_offset(), end, "nothing appended");
        assert_eq!(size_on_disk(&log), size);
    }
    // The sixth batch from the end is no longer remembered: a gap then.
    match client(&log, &mut pbatch(1, 0, sent[1].0, 3, T0)) {
        Err(StorageError::OutOfOrderSequence(m)) => {
            assert!(
                m.contains("3 (incoming seq. number), 20 (current end sequence number)"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
    // A duplicate anywhere in a multi-batch append answers for all of it.
    let mut two = pbatch(5, 0, 0, 1, T0);
    two.extend_from_slice(&pbatch(1, 0, 18, 3, T0 + 6));
    let info = client(&log, &mut two).expect("dup in a pair");
    assert!(info.duplicate);
    assert_eq!(info.base_offset, sent[6].1);
    assert_eq!(log.log_end_offset(), end);
    assert!(
        log.producer_state(5).is_none(),
        "the first batch was not applied"
    );
    // A coordinator's batches are never taken for duplicates.
    let info = log
        .append_as_leader(&mut pbatch(1, 0, 18, 3, T0), 0)
        .expect("coordinator origin");
    assert!(!info.duplicate);
    assert_eq!(info.base_offset, end);
}

#[test]
fn gaps_and_stale_epochs_get_kafkas_errors_and_append_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open_with(dir.path(), &clock, LogOpenOptions::default());
    client(&log, &mut pbatch(7, 2, 0, 2, T0)).expect("first");
    let (end, size) = (log.log_end_offset(), size_on_disk(&log));
    let check = |r: Result<AppendInfo>| {
        assert!(r.is_err(), "{r:?}");
        assert_eq!(log.log_end_offset(), end);
        assert_eq!(size_on_disk(&log), size);
        r.err()
    };
    assert!(matches!(
        check(client(&log, &mut pbatch(7, 2, 3, 1, T0))),
        Some(StorageError::OutOfOrderSequence(_))
    ));
    assert!(matches!(
        check(client(&log, &mut pbatch(7, 1, 2, 1, T0))),
        Some(StorageError::InvalidProducerEpoch(_))
    ));
    assert!(matches!(
        check(client(&log, &mut pbatch(7, 3, 5, 1, T0))),
        Some(StorageError::OutOfOrderSequence(_))
    ));
    // The coordinator's writes are fenced by epoch too.
    assert!(matches!(
        check(log.append_as_leader(&mut pbatch(7, 1, -1, 1, T0), 0)),
        Some(StorageError::InvalidProducerEpoch(_))
    ));
    // A bad second batch fails the whole append, the good first one too.
    let mut pair = pbatch(8, 0, 0, 1, T0);
    pair.extend_from_slice(&pbatch(7, 2, 9, 1, T0));
    assert!(matches!(
        check(client(&log, &mut pair)),
        Some(StorageError::OutOfOrderSequence(_))
    ));
    assert!(log.producer_state(8).is_none());
    // The right batches go in after all that.
    client(&log, &mut pbatch(7, 2, 2, 1, T0)).expect("in sequence");
    client(&log, &mut pbatch(7, 3, 0, 1, T0)).expect("new epoch at 0");
    let p = log.producer_state(7).expect("tracked");
    assert_eq!((p.producer_epoch, p.last_seq()), (3, 0));
    // An unknown producer may start anywhere (Kafka 4).
    client(&log, &mut pbatch(9, 0, 1_000, 1, T0)).expect("unknown at 1000");
    // Non-idempotent batches are not tracked.
    log.append_as_leader_from(&mut batch(1, T0, "x"), 0, AppendOrigin::Client)
        .expect("plain");
    assert_eq!(log.producer_id_count(), 2);
}

#[test]
fn transactions_are_tracked_and_closed_by_markers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open_with(dir.path(), &clock, LogOpenOptions::default());
    let first = client(&log, &mut tbatch(4, 0, 0, 2, T0, true)).expect("txn");
    client(&log, &mut tbatch(4, 0, 2, 2, T0, true)).expect("txn 2");
    assert!(matches!(
        client(&log, &mut pbatch(4, 0, 4, 1, T0)),
        Err(StorageError::InvalidTxnState(_))
    ));
    let txn = |log: &Log| log.active_producers()[0].current_txn_start_offset;
    assert_eq!(txn(&log), first.base_offset);
    log.append_as_leader(&mut marker(4, 0, true, 3, T0 + 5), 0)
        .expect("commit marker");
    assert_eq!(txn(&log), -1);
    assert_eq!(log.active_producers()[0].coordinator_epoch, 3);
    assert!(matches!(
        log.append_as_leader(&mut marker(4, 0, false, 2, T0 + 6), 0),
        Err(StorageError::TransactionCoordinatorFenced(_))
    ));
    client(&log, &mut pbatch(4, 0, 4, 1, T0)).expect("after the transaction");
    drop(log);
    // Replayed from the log after a crash: the same state.
    let log = open_with(dir.path(), &clock, LogOpenOptions::default());
    let p = log.active_producers();
    assert_eq!(p.len(), 1);
    assert_eq!(
        (
            p[0].current_txn_start_offset,
            p[0].coordinator_epoch,
            p[0].last_sequence
        ),
        (-1, 3, 4)
    );
}

#[test]
fn snapshots_on_roll_and_close_in_kafkas_format_and_a_clean_restart_loads_only_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open_with(dir.path(), &clock, LogOpenOptions::default());
    client(&log, &mut pbatch(1, 0, 0, 2, T0)).expect("a");
    client(&log, &mut pbatch(2, 5, 10, 1, T0 + 1)).expect("b");
    log.roll().expect("roll");
    let base = log.log_end_offset();
    assert_eq!(log.segment_base_offsets(), vec![0, base]);
    assert_eq!(log.producer_snapshot_offsets(), vec![base]);
    let bytes = std::fs::read(dir.path().join(format!("{base:020}.snapshot"))).expect("snapshot");
    let entries = snapshot::decode(&bytes).expect("Kafka format");
    let ids: Vec<(i64, i16, i32, i64)> = entries
        .iter()
        .map(|e| {
            (
                e.producer_id,
                e.producer_epoch,
                e.last_seq(),
                e.last_data_offset(),
            )
        })
        .collect();
    assert_eq!(ids, vec![(1, 0, 1, 1), (2, 5, 10, 2)]);
    client(&log, &mut pbatch(1, 0, 2, 2, T0 + 2)).expect("c");
    client(&log, &mut pbatch(1, 0, 4, 2, T0 + 3)).expect("d");
    let end = log.log_end_offset();
    log.close().expect("close");
    drop(log);
    assert_eq!(
        snapshot::read(&dir.path().join(format!("{end:020}.snapshot")))
            .expect("read")
            .expect("valid")
            .len(),
        2
    );
    let log = open_with(
        dir.path(),
        &clock,
        LogOpenOptions {
            recovery_point: end,
            clean_shutdown: true,
            ..LogOpenOptions::default()
        },
    );
    assert_eq!(
        log.producer_load(),
        ProducerLoad {
            snapshot: Some(end),
            replayed_batches: 0
        }
    );
    assert_eq!(
        log.producer_snapshot_offsets(),
        vec![base, end],
        "not orphans"
    );
    // Only the last batch is in the snapshot (as Kafka): its retry is a
    // duplicate, the one before it is out of order.
    let info = client(&log, &mut pbatch(1, 0, 4, 2, T0 + 3)).expect("retry");
    assert!(info.duplicate);
    assert_eq!(info.base_offset, end - 2);
    assert!(matches!(
        client(&log, &mut pbatch(1, 0, 2, 2, T0 + 2)),
        Err(StorageError::OutOfOrderSequence(_))
    ));
    client(&log, &mut pbatch(1, 0, 6, 1, T0 + 4)).expect("next");
    client(&log, &mut pbatch(2, 5, 11, 1, T0 + 4)).expect("next of 2");
}

#[test]
fn an_unclean_restart_loads_the_snapshot_below_the_recovery_point_and_replays_the_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open_with(dir.path(), &clock, LogOpenOptions::default());
    for i in 0..4 {
        client(&log, &mut pbatch(1, 0, i, 1, T0)).expect("before the roll");
    }
    log.roll().expect("roll");
    let base = log.log_end_offset();
    log.flush().expect("flush");
    let recovery_point = log.recovery_point();
    assert_eq!(recovery_point, base);
    let mut tail = Vec::new();
    for i in 4..9 {
        let info = client(&log, &mut pbatch(1, 0, i, 1, T0)).expect("tail");
        tail.push(info.base_offset);
    }
    // A second roll leaves a snapshot past the recovery point.
    log.roll().expect("roll again");
    let later = log.log_end_offset();
    client(&log, &mut pbatch(1, 0, 9, 1, T0)).expect("last");
    drop(log); // a crash: no close, no snapshot at the end
    assert!(dir.path().join(format!("{later:020}.snapshot")).exists());

    let log = open_with(
        dir.path(),
        &clock,
        LogOpenOptions {
            recovery_point,
            ..LogOpenOptions::default()
        },
    );
    assert_eq!(
        log.producer_load(),
        ProducerLoad {
            snapshot: Some(base),
            replayed_batches: 6
        },
        "the snapshot at the recovery point, then the six batches after it"
    );
    let end = log.log_end_offset();
    // The untrusted snapshots went; the one at the last segment's base was
    // written again from the replay, and one at the log end.
    assert_eq!(log.producer_snapshot_offsets(), vec![base, later, end]);
    let at_later = snapshot::read(&dir.path().join(format!("{later:020}.snapshot")))
        .expect("read")
        .expect("valid");
    assert_eq!(at_later[0].last_seq(), 8, "state below {later}");
    // Replayed batches are remembered like appended ones: the last five.
    for (i, &offset) in tail.iter().enumerate().skip(1) {
        let seq = 4 + i as i32;
        let info = client(&log, &mut pbatch(1, 0, seq, 1, T0)).expect("retry");
        assert!(info.duplicate, "seq {seq}");
        assert_eq!(info.base_offset, offset);
    }
    client(&log, &mut pbatch(1, 0, 10, 1, T0)).expect("continues");
}

#[test]
fn a_damaged_snapshot_is_deleted_and_an_older_one_used() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open_with(dir.path(), &clock, LogOpenOptions::default());
    client(&log, &mut pbatch(1, 0, 0, 1, T0)).expect("a");
    log.roll().expect("roll");
    let base = log.log_end_offset();
    client(&log, &mut pbatch(1, 0, 1, 1, T0)).expect("b");
    log.close().expect("close");
    let end = log.log_end_offset();
    drop(log);
    let newest = dir.path().join(format!("{end:020}.snapshot"));
    let mut bytes = std::fs::read(&newest).expect("read");
    bytes[12] ^= 0xff;
    std::fs::write(&newest, bytes).expect("damage");
    let log = open_with(
        dir.path(),
        &clock,
        LogOpenOptions {
            recovery_point: end,
            clean_shutdown: true,
            ..LogOpenOptions::default()
        },
    );
    assert_eq!(
        log.producer_load(),
        ProducerLoad {
            snapshot: Some(base),
            replayed_batches: 1
        }
    );
    assert_eq!(log.producer_state(1).map(|p| p.last_seq()), Some(1));
    // The replacement at the log end is valid.
    snapshot::read(&newest).expect("read").expect("rewritten");
}

#[test]
fn stray_snapshots_follow_kafkas_rules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open_with(dir.path(), &clock, LogOpenOptions::default());
    for i in 0..3 {
        client(&log, &mut pbatch(1, 0, i * 3, 3, T0)).expect("append");
        log.roll().expect("roll");
    }
    client(&log, &mut pbatch(1, 0, 9, 3, T0)).expect("append");
    log.close().expect("close");
    let end = log.log_end_offset();
    let bases = log.segment_base_offsets();
    assert_eq!(bases, vec![0, 3, 6, 9]);
    drop(log);
    // A snapshot matching no segment below the last base, an older stray
    // past it than the one at the log end, and one Kafka had renamed for
    // deletion.
    let empty = snapshot::encode([].iter());
    for o in [1, end - 1] {
        std::fs::write(dir.path().join(format!("{o:020}.snapshot")), &empty).expect("stray");
    }
    let deleted = dir.path().join(format!("{:020}.snapshot.deleted", 2));
    std::fs::write(&deleted, &empty).expect("deleted");
    let log = open_with(
        dir.path(),
        &clock,
        LogOpenOptions {
            recovery_point: end,
            clean_shutdown: true,
            ..LogOpenOptions::default()
        },
    );
    // The roll snapshots (3, 6, 9) and the newest stray (the close's).
    assert_eq!(log.producer_snapshot_offsets(), vec![3, 6, 9, end]);
    assert!(!deleted.exists());
    assert!(!dir.path().join(format!("{:020}.snapshot", 1)).exists());
    assert!(!dir
        .path()
        .join(format!("{:020}.snapshot", end - 1))
        .exists());
    assert_eq!(log.producer_load().snapshot, Some(end));
}

#[test]
fn producers_expire_after_producer_id_expiration_ms_and_stay_expired_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let opts = LogOpenOptions {
        producer_state: crate::producer::ProducerStateConfig {
            producer_id_expiration_ms: 60_000,
            ..Default::default()
        },
        ..LogOpenOptions::default()
    };
    let log = open_with(dir.path(), &clock, opts);
    client(&log, &mut pbatch(1, 0, 0, 1, T0)).expect("1");
    client(&log, &mut tbatch(2, 0, 0, 1, T0, true)).expect("2 opens a transaction");
    clock.advance(30_000);
    client(&log, &mut pbatch(3, 0, 0, 1, T0 + 30_000)).expect("3");
    clock.advance(30_000);
    assert_eq!(log.remove_expired_producers(), 1, "1 is 60 s idle");
    assert!(log.producer_state(1).is_none());
    assert!(log.producer_state(2).is_some(), "open transaction");
    // Expired means unknown: Kafka 4 takes any sequence.
    client(&log, &mut pbatch(1, 0, 50, 1, T0 + 60_000)).expect("back at 50");
    log.close().expect("close");
    let end = log.log_end_offset();
    drop(log);
    clock.advance(40_000);
    // Loading the snapshot leaves out 3 (70 s idle now), keeps 1 and 2.
    let log = open_with(
        dir.path(),
        &clock,
        LogOpenOptions {
            recovery_point: end,
            clean_shutdown: true,
            ..opts
        },
    );
    let ids: Vec<i64> = log
        .active_producers()
        .iter()
        .map(|p| p.producer_id)
        .collect();
    assert_eq!(ids, vec![1, 2]);
}

#[test]
fn retention_deletes_the_snapshots_of_deleted_segments_and_keeps_the_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open_with(dir.path(), &clock, LogOpenOptions::default());
    // Producer 3 writes only into the first segment.
    client(&log, &mut pbatch(3, 0, 0, 1, T0)).expect("append");
    for i in 0..3 {
        client(&log, &mut pbatch(1, 0, i, 1, T0)).expect("append");
        log.roll().expect("roll");
    }
    client(&log, &mut pbatch(2, 0, 0, 1, T0)).expect("append");
    let bases = log.segment_base_offsets();
    assert_eq!(log.producer_snapshot_offsets(), bases[1..].to_vec());
    log.set_high_watermark(log.log_end_offset());
    log.advance_log_start_offset(bases[2])
        .expect("delete records");
    assert_eq!(log.segment_base_offsets(), bases[2..].to_vec());
    assert_eq!(log.producer_snapshot_offsets(), bases[2..].to_vec());
    let info = client(&log, &mut pbatch(1, 0, 2, 1, T0)).expect("retry of a kept batch");
    assert!(info.duplicate);
    // Kafka keeps the state of producers whose batches are all gone.
    assert_eq!(log.producer_id_count(), 3);
    let info = client(&log, &mut pbatch(3, 0, 0, 1, T0)).expect("retry of a deleted batch");
    assert!(info.duplicate);
    assert_eq!(info.base_offset, 0);
    assert!(!dir
        .path()
        .join(format!("{:020}.snapshot", bases[1]))
        .exists());
}

#[test]
fn truncation_rebuilds_the_state_below_the_new_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open_with(dir.path(), &clock, LogOpenOptions::default());
    let mut offsets = Vec::new();
    for i in 0..6 {
        offsets.push(
            client(&log, &mut pbatch(1, 0, i * 2, 2, T0))
                .expect("append")
                .base_offset,
        );
        if i == 2 {
            log.roll().expect("roll");
        }
    }
    client(&log, &mut pbatch(2, 0, 0, 1, T0)).expect("2");
    log.roll().expect("roll");
    let late = log.log_end_offset();
    assert!(log.producer_snapshot_offsets().contains(&late));
    log.truncate_to(offsets[4]).expect("truncate");
    assert_eq!(log.log_end_offset(), offsets[4]);
    assert!(log
        .producer_snapshot_offsets()
        .iter()
        .all(|&o| o <= offsets[4]));
    assert!(!dir.path().join(format!("{late:020}.snapshot")).exists());
    assert!(log.producer_state(2).is_none(), "its batch was cut off");
    let p = log.producer_state(1).expect("1");
    assert_eq!(p.last_seq(), 7);
    // The cut batch is new again; an older one is still a duplicate.
    assert!(
        client(&log, &mut pbatch(1, 0, 6, 2, T0))
            .expect("dup")
            .duplicate
    );
    let info = client(&log, &mut pbatch(1, 0, 8, 2, T0)).expect("appended again");
    assert!(!info.duplicate);
    assert_eq!(info.base_offset, offsets[4]);
    // Emptied and restarted: nothing known, a snapshot at the new start.
    log.truncate_fully_and_start_at(100)
        .expect("truncate fully");
    assert_eq!(log.producer_id_count(), 0);
    assert_eq!(log.producer_snapshot_offsets(), vec![100]);
    client(&log, &mut pbatch(1, 0, 33, 1, T0)).expect("unknown again");
}
