//! Transactions through the log: markers completing transactions, the last
//! stable offset, the transaction index (Kafka's bytes, rebuilt after a
//! crash, truncated and deleted with its segment) and read_committed reads.

use std::sync::Arc;

use sluice_protocol::record::codec::ProducerInfo;
use sluice_protocol::record::control::EndTxnMarker;
use sluice_protocol::record::{BatchBuilder, Compression, Record};

use super::tests::{batch, T0};
use super::*;
use crate::clock::ManualClock;
use crate::error::StorageError;
use crate::txn_index::{txn_index_path, AbortedTxn};

/// A transactional batch of `n` records of producer `pid` from `seq`.
pub(crate) fn txn_batch(pid: i64, epoch: i16, seq: i32, n: usize, ts: i64) -> Vec<u8> {
    let producer = ProducerInfo {
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: seq,
    };
    let mut b = BatchBuilder::new(Compression::None, ts).producer(producer, true);
    for i in 0..n {
        b.push(Record::new(
            Some(format!("p{pid}-{seq}-{i}").into_bytes()),
            Some(format!("v{pid}-{seq}-{i}").into_bytes()),
            ts,
        ));
    }
    b.build(0).expect("build")
}

pub(crate) fn marker(pid: i64, epoch: i16, commit: bool, ts: i64) -> Vec<u8> {
    EndTxnMarker {
        commit,
        coordinator_epoch: 0,
    }
    .batch(pid, epoch, ts)
    .expect("marker")
}

fn config(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        index_interval_bytes: 1,
        ..LogConfig::default()
    }
}

/// Appends as a producer, then moves the high watermark to the log end
/// (what the partition layer does on one node).
fn produce(log: &Log, mut bytes: Vec<u8>) -> AppendInfo {
    let info = log
        .append_as_leader_from(&mut bytes, 0, AppendOrigin::Client)
        .expect("produce");
    log.set_high_watermark(log.log_end_offset());
    info
}

/// Appends a marker as the transaction coordinator would.
fn end_txn(log: &Log, pid: i64, epoch: i16, commit: bool) -> i64 {
    let info = log
        .append_as_leader(&mut marker(pid, epoch, commit, T0), 0)
        .expect("marker");
    log.set_high_watermark(log.log_end_offset());
    info.base_offset
}

fn aborted(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
    AbortedTxn {
        producer_id: pid,
        first_offset: first,
        last_offset: last,
        last_stable_offset: lso,
    }
}

fn all_aborted(log: &Log) -> Vec<AbortedTxn> {
    log.collect_aborted_txns(0, i64::MAX)
}

/// The bytes of every `.txnindex` file, by segment base.
fn txn_index_files(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().to_string_lossy().into_owned();
            name.ends_with(".txnindex")
                .then(|| (name, std::fs::read(e.path()).expect("read")))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn markers_complete_transactions_and_move_the_last_stable_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = super::tests::open(dir.path(), config(1 << 20), &clock);
    produce(&log, batch(2, T0, "plain")); // 0-1
    assert_eq!(log.last_stable_offset(), 2, "no transaction: the HW");
    produce(&log, txn_batch(7, 0, 0, 3, T0)); // 2-4
    produce(&log, batch(1, T0, "plain")); // 5
    produce(&log, txn_batch(8, 0, 0, 2, T0)); // 6-7
    assert_eq!(log.high_watermark(), 8);
    assert_eq!(log.last_stable_offset(), 2, "7's transaction starts at 2");
    assert_eq!(
        log.producer_state(7)
            .and_then(|e| e.current_txn_first_offset),
        Some(2)
    );
    // A non-transactional batch of a producer in a transaction: refused.
    let mut plain = super::producer_tests::pbatch(7, 0, 3, 1, T0);
    assert!(matches!(
        log.append_as_leader_from(&mut plain, 0, AppendOrigin::Client),
        Err(StorageError::InvalidTxnState(_))
    ));

    // 8 commits first: 7's transaction still holds the LSO.
    assert_eq!(end_txn(&log, 8, 0, true), 8);
    assert_eq!(log.last_stable_offset(), 2);
    // A marker the high watermark has not passed keeps its transaction
    // unstable (Kafka's unreplicated transactions).
    let m = log
        .append_as_leader(&mut marker(7, 0, false, T0), 0)
        .expect("abort");
    assert_eq!(m.base_offset, 9);
    assert_eq!(log.high_watermark(), 9);
    assert_eq!(log.last_stable_offset(), 2, "marker not replicated yet");
    log.set_high_watermark(10);
    assert_eq!(log.last_stable_offset(), 10);
    assert_eq!(
        log.producer_state(7)
            .and_then(|e| e.current_txn_first_offset),
        None
    );
    // Only the aborted one is indexed; when it completed, 8's transaction
    // was already done, so its LSO is the marker + 1.
    assert_eq!(all_aborted(&log), vec![aborted(7, 2, 9, 10)]);

    // A marker from an older epoch is fenced; one for a producer without
    // an open transaction completes nothing.
    produce(&log, txn_batch(7, 1, 0, 1, T0)); // 10
    assert!(matches!(
        log.append_as_leader(&mut marker(7, 0, true, T0), 0),
        Err(StorageError::InvalidProducerEpoch(_))
    ));
    assert_eq!(log.last_stable_offset(), 10);
    end_txn(&log, 9, 0, false);
    assert_eq!(log.last_stable_offset(), 10);
    assert_eq!(all_aborted(&log).len(), 1);
}

#[test]
fn the_index_entry_names_the_next_open_transaction_as_its_lso() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = super::tests::open(dir.path(), config(1 << 20), &clock);
    produce(&log, txn_batch(1, 0, 0, 2, T0)); // 0-1
    produce(&log, txn_batch(2, 0, 0, 2, T0)); // 2-3
    produce(&log, txn_batch(3, 0, 0, 1, T0)); // 4
    end_txn(&log, 2, 0, false); // 5: 1's transaction (0) is still open
    assert_eq!(log.last_stable_offset(), 0);
    end_txn(&log, 1, 0, false); // 6: 3's transaction (4) is still open
    assert_eq!(log.last_stable_offset(), 4);
    end_txn(&log, 3, 0, true); // 7
    assert_eq!(log.last_stable_offset(), 8);
    let want = vec![aborted(2, 2, 5, 0), aborted(1, 0, 6, 4)];
    assert_eq!(all_aborted(&log), want);
    log.flush().expect("flush");
    // The file holds Kafka's 34-byte entries, in marker order.
    let mut bytes = Vec::new();
    for (pid, first, last, lso) in [(2i64, 2i64, 5i64, 0i64), (1, 0, 6, 4)] {
        bytes.extend_from_slice(&0i16.to_be_bytes());
        for x in [pid, first, last, lso] {
            bytes.extend_from_slice(&x.to_be_bytes());
        }
    }
    assert_eq!(
        txn_index_files(dir.path()),
        vec![("00000000000000000000.txnindex".to_string(), bytes)]
    );
}

/// Reads everything from `from` with `limit`, returning the record
/// offsets seen and the aborted transactions reported with each read.
fn read_all(log: &Log, from: i64, max_bytes: u64) -> (Vec<i64>, Vec<Vec<(i64, i64)>>) {
    let mut offsets = Vec::new();
    let mut aborted = Vec::new();
    let mut next = from;
    loop {
        let r = log
            .read(next, max_bytes, ReadLimit::LastStable, true)
            .expect("read");
        assert!(r.last_stable_offset <= r.high_watermark);
        aborted.push(
            r.aborted_transactions
                .expect("read_committed reports aborted transactions")
                .iter()
                .map(|a| (a.producer_id, a.first_offset))
                .collect(),
        );
        let Some(region) = r.region else { break };
        let bytes = region.read_to_vec().expect("bytes");
        let mut progressed = false;
        for b in sluice_protocol::record::BatchIter::new(&bytes) {
            let Ok((_, h, _)) = b else { break };
            for o in h.base_offset..=h.last_offset() {
                if o >= next {
                    offsets.push(o);
                }
            }
            next = h.last_offset() + 1;
            progressed = true;
        }
        if !progressed {
            break;
        }
    }
    (offsets, aborted)
}

#[test]
fn read_committed_stops_at_the_lso_and_reports_overlapping_aborts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    // Small segments: transactions span segments.
    let log = super::tests::open(dir.path(), config(200), &clock);
    produce(&log, txn_batch(1, 0, 0, 2, T0)); // 0-1
    produce(&log, batch(1, T0, "x")); // 2
    produce(&log, txn_batch(1, 0, 2, 2, T0)); // 3-4
    end_txn(&log, 1, 0, false); // 5
    produce(&log, txn_batch(2, 0, 0, 2, T0)); // 6-7
    end_txn(&log, 2, 0, true); // 8
    produce(&log, txn_batch(3, 0, 0, 2, T0)); // 9-10 (open)
    produce(&log, batch(1, T0, "y")); // 11
    assert!(log.segment_count() > 2, "{}", log.segment_count());
    assert_eq!(log.last_stable_offset(), 9);
    // read_uncommitted sees everything up to the HW, no aborted list.
    let r = log
        .read(0, 1 << 20, ReadLimit::HighWatermark, true)
        .expect("read");
    assert!(r.aborted_transactions.is_none());
    assert_eq!(r.last_stable_offset, 9);
    // read_committed: up to 9, and producer 1's transaction from 0.
    let (offsets, reported) = read_all(&log, 0, 1 << 20);
    assert_eq!(offsets, (0..9).collect::<Vec<_>>());
    assert!(reported.iter().all(|r| r.is_empty() || r == &vec![(1, 0)]));
    assert_eq!(reported[0], vec![(1, 0)], "first read overlaps the abort");
    // A read starting after the aborted transaction does not report it.
    let r = log
        .read(6, 1 << 20, ReadLimit::LastStable, true)
        .expect("read");
    assert_eq!(r.aborted_transactions, Some(vec![]));
    // At the LSO: nothing to read, an empty list.
    let r = log
        .read(9, 1 << 20, ReadLimit::LastStable, true)
        .expect("read");
    assert!(r.region.is_none());
    assert_eq!(r.aborted_transactions, Some(vec![]));
    // Abort 3's transaction: the LSO reaches the HW, reads report it.
    end_txn(&log, 3, 0, false); // 12
    assert_eq!(log.last_stable_offset(), 13);
    let (offsets, reported) = read_all(&log, 6, 1 << 20);
    assert_eq!(offsets, (6..13).collect::<Vec<_>>());
    assert!(reported.iter().any(|r| r.contains(&(3, 9))));
    assert!(reported.iter().all(|r| !r.contains(&(1, 0))));
    // One batch per read: each read reports the aborts its range overlaps.
    let (_, reported) = read_all(&log, 0, 1);
    assert_eq!(reported[0], vec![(1, 0)]);
}

#[test]
fn transaction_index_is_rebuilt_after_a_crash_and_when_damaged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let write = |log: &Log| {
        for round in 0..6i64 {
            let pid = 10 + round;
            produce(log, txn_batch(pid, 0, 0, 3, T0));
            produce(log, txn_batch(100, round as i16, 0, 1, T0)); // interleaved
            end_txn(log, pid, 0, round % 2 == 1);
            end_txn(log, 100, round as i16, false);
        }
        produce(log, txn_batch(99, 0, 0, 1, T0)); // left open
    };
    let log = super::tests::open(dir.path(), config(300), &clock);
    write(&log);
    let expected = all_aborted(&log);
    assert_eq!(expected.len(), 9, "{expected:?}");
    let lso = log.last_stable_offset();
    assert!(lso < log.log_end_offset());
    log.flush().expect("flush");
    let files = txn_index_files(dir.path());
    assert!(files.len() > 1, "entries in several segments: {files:?}");
    drop(log); // crash: no clean close

    // Reopened from the log start (recovery point 0): every segment's
    // index comes back byte for byte, and the LSO with the open
    // transaction.
    let opts = LogOpenOptions {
        recovery_point: 0,
        high_watermark: i64::MAX,
        ..LogOpenOptions::default()
    };
    let reopen = |opts: LogOpenOptions| {
        super::tests::try_open(dir.path(), config(300), &clock, opts).expect("reopen")
    };
    let log = reopen(opts);
    assert_eq!(all_aborted(&log), expected);
    assert_eq!(log.last_stable_offset(), lso);
    assert_eq!(txn_index_files(dir.path()), files);
    drop(log);

    // Deleted and damaged index files are rebuilt from the log.
    let bases: Vec<i64> = files
        .iter()
        .map(|(n, _)| n[..20].parse().expect("base"))
        .collect();
    std::fs::remove_file(txn_index_path(dir.path(), bases[bases.len() - 1], "")).expect("rm");
    std::fs::write(txn_index_path(dir.path(), bases[0], ""), [1u8; 40]).expect("damage");
    let log = reopen(LogOpenOptions {
        clean_shutdown: true,
        high_watermark: i64::MAX,
        ..LogOpenOptions::default()
    });
    // A deleted file after a clean shutdown is not noticed (Kafka: an
    // absent index is an empty one), the damaged one forces a rebuild
    // from its base, which rebuilds everything after it too.
    assert_eq!(all_aborted(&log), expected);
    assert_eq!(txn_index_files(dir.path()), files);
    assert_eq!(log.last_stable_offset(), lso);
    log.close().expect("close");
}

#[test]
fn truncation_and_retention_take_index_entries_with_their_markers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = super::tests::open(dir.path(), config(300), &clock);
    produce(&log, txn_batch(1, 0, 0, 2, T0)); // 0-1
    end_txn(&log, 1, 0, false); // 2
    for _ in 0..4 {
        produce(&log, batch(2, T0, "fill"));
    }
    produce(&log, txn_batch(2, 0, 0, 2, T0));
    let m = end_txn(&log, 2, 0, false);
    produce(&log, txn_batch(3, 0, 0, 1, T0));
    let open_first = log.log_end_offset() - 1;
    assert_eq!(all_aborted(&log).len(), 2);
    assert_eq!(log.last_stable_offset(), open_first);

    // Truncating below the second marker drops its entry; the producer
    // state reloaded from the log has 2's transaction open again.
    log.truncate_to(m).expect("truncate");
    assert_eq!(all_aborted(&log), vec![aborted(1, 0, 2, 3)]);
    let first2 = log
        .producer_state(2)
        .and_then(|e| e.current_txn_first_offset);
    assert!(first2.is_some());
    assert_eq!(log.last_stable_offset(), first2.expect("open"));
    assert!(log.producer_state(3).is_none());
    end_txn(&log, 2, 0, false);
    assert_eq!(all_aborted(&log).len(), 2);

    // Retention of the first segments removes their index files.
    log.roll().expect("roll");
    let before = txn_index_files(dir.path()).len();
    log.advance_log_start_offset(log.high_watermark())
        .expect("delete records");
    assert_eq!(all_aborted(&log), vec![]);
    assert!(txn_index_files(dir.path()).len() < before);
    assert_eq!(log.last_stable_offset(), log.high_watermark());
}
