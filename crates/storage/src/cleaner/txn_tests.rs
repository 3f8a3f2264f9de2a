//! Compaction of transactional data: aborted records go, markers go in two
//! passes after `delete.retention.ms` once their transaction left no data,
//! the cleaned segment keeps the transaction index entries it needs, and
//! nothing past the last stable offset is cleaned; then a restart.

use std::sync::Arc;

use sluice_protocol::record::codec::{decode_batch, ProducerInfo};
use sluice_protocol::record::control::EndTxnMarker;
use sluice_protocol::record::{BatchBuilder, BatchHeader, BatchIter, Compression, Record};

use super::*;
use crate::clock::ManualClock;
use crate::config::{CleanupPolicy, LogConfig};
use crate::log::{AppendOrigin, LogOpenOptions, ReadLimit};
use crate::txn_index::AbortedTxn;
use crate::TopicPartition;

const T0: i64 = 1_700_000_000_000;
const RETENTION: i64 = 10_000;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 1 << 20,
        delete_retention_ms: RETENTION,
        cleanup_policy: CleanupPolicy {
            delete: false,
            compact: true,
        },
        ..LogConfig::default()
    }
}

fn open(dir: &std::path::Path, clock: &Arc<ManualClock>, opts: LogOpenOptions) -> Log {
    Log::open(
        dir,
        TopicPartition::new("c", 0),
        config(),
        opts,
        clock.clone(),
    )
    .expect("open")
}

fn records(pid: i64, epoch: i16, seq: i32, keys: &[&str], ts: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new(Compression::None, ts);
    if pid >= 0 {
        b = b.producer(
            ProducerInfo {
                producer_id: pid,
                producer_epoch: epoch,
                base_sequence: seq,
            },
            true,
        );
    }
    for k in keys {
        b.push(Record::new(
            Some(k.as_bytes().to_vec()),
            Some(format!("{k}@{pid}").into_bytes()),
            ts,
        ));
    }
    b.build(0).expect("build")
}

fn append(log: &Log, mut bytes: Vec<u8>, origin: AppendOrigin) -> i64 {
    let info = log
        .append_as_leader_from(&mut bytes, 0, origin)
        .expect("append");
    log.set_high_watermark(log.log_end_offset());
    info.base_offset
}

fn end_txn(log: &Log, pid: i64, commit: bool, ts: i64) -> i64 {
    let m = EndTxnMarker {
        commit,
        coordinator_epoch: 0,
    }
    .batch(pid, 0, ts)
    .expect("marker");
    append(log, m, AppendOrigin::Coordinator)
}

/// What a reader of the whole log sees: data records as (offset, key,
/// producer id), and markers as (offset, "COMMIT"/"ABORT", producer id);
/// plus every batch header.
type Seen = Vec<(i64, String, i64)>;

fn read_all(log: &Log) -> (Seen, Vec<BatchHeader>) {
    let mut seen = Vec::new();
    let mut headers = Vec::new();
    let mut next = log.log_start_offset();
    loop {
        let r = log
            .read(next, 1 << 20, ReadLimit::LogEnd, true)
            .expect("read");
        let Some(region) = r.region else { break };
        let bytes = region.read_to_vec().expect("bytes");
        let mut any = false;
        for b in BatchIter::new(&bytes) {
            let (_, h, raw) = b.expect("batch");
            sluice_protocol::record::batch::validate_crc(raw).expect("crc");
            for r in decode_batch(raw, 1 << 24).expect("decode").records {
                let key = r.record.key.clone().unwrap_or_default();
                let name = if h.is_control() {
                    let m = EndTxnMarker::parse(r.record.key.as_deref(), r.record.value.as_deref())
                        .expect("marker");
                    if m.commit { "COMMIT" } else { "ABORT" }.to_string()
                } else {
                    String::from_utf8(key).expect("utf8")
                };
                seen.push((r.record.offset, name, h.producer_id));
            }
            headers.push(h);
            next = h.last_offset() + 1;
            any = true;
        }
        if !any {
            break;
        }
    }
    (seen, headers)
}

fn s(o: i64, name: &str, pid: i64) -> (i64, String, i64) {
    (o, name.to_string(), pid)
}

#[test]
fn aborted_data_then_markers_go_and_the_result_survives_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open(dir.path(), &clock, LogOpenOptions::default());
    let client = AppendOrigin::Client;
    append(&log, records(1, 0, 0, &["a", "b"], T0), client); // 0-1 aborted
    append(&log, records(-1, 0, 0, &["p"], T0), client); // 2
    append(&log, records(2, 0, 0, &["x"], T0), client); // 3 committed
    end_txn(&log, 1, false, T0); // 4
    end_txn(&log, 2, true, T0); // 5
    append(&log, records(2, 0, 1, &["y"], T0), client); // 6
    end_txn(&log, 2, true, T0); // 7
    append(&log, records(-1, 0, 0, &["x"], T0), client); // 8 supersedes 3
    append(&log, records(1, 0, 2, &["c"], T0), client); // 9
    end_txn(&log, 1, true, T0); // 10
    log.roll().expect("roll");
    append(&log, records(-1, 0, 0, &["q"], T0), client); // 11, active
    assert_eq!(log.last_stable_offset(), 12);
    assert_eq!(
        log.collect_aborted_txns(0, i64::MAX),
        vec![AbortedTxn {
            producer_id: 1,
            first_offset: 0,
            last_offset: 4,
            // 2's transaction from 3 was still open.
            last_stable_offset: 3,
        }]
    );
    let cfg = CleanerConfig::default();

    // Pass 1: the aborted records go (they never enter the offset map,
    // so they shadow nothing), 3 is superseded; every marker stays, the
    // ABORT one keeps its index entry in the cleaned segment.
    let st = clean(&log, 0, &cfg).expect("clean").expect("cleaned");
    assert_eq!(st.aborted_records_removed, 2);
    assert_eq!((st.markers_stamped, st.markers_removed), (0, 0));
    let (seen, _) = read_all(&log);
    assert_eq!(
        seen,
        vec![
            s(2, "p", -1),
            s(4, "ABORT", 1),
            s(5, "COMMIT", 2),
            s(6, "y", 2),
            s(7, "COMMIT", 2),
            s(8, "x", -1),
            s(9, "c", 1),
            s(10, "COMMIT", 1),
            s(11, "q", -1),
        ]
    );
    assert_eq!(log.collect_aborted_txns(0, i64::MAX).len(), 1);

    // Pass 2: the markers 4 and 5 have no data left: they get a delete
    // horizon (now + delete.retention.ms) and stay for now.
    let st = clean(&log, 0, &cfg).expect("clean").expect("cleaned");
    assert_eq!((st.markers_stamped, st.markers_removed), (2, 0));
    let (seen, headers) = read_all(&log);
    assert_eq!(seen.len(), 9);
    let stamped: Vec<(i64, i64)> = headers
        .iter()
        .filter(|h| h.has_delete_horizon())
        .map(|h| (h.base_offset, h.base_timestamp))
        .collect();
    assert_eq!(stamped, vec![(4, T0 + RETENTION), (5, T0 + RETENTION)]);
    // The marker record keeps its timestamp under the new base.
    let ts4 = {
        let r = log.read(4, 1 << 20, ReadLimit::LogEnd, true).expect("read");
        let bytes = r.region.expect("region").read_to_vec().expect("bytes");
        let (_, _, raw) = BatchIter::new(&bytes).next().expect("batch").expect("ok");
        decode_batch(raw, 1 << 20).expect("decode").records[0]
            .record
            .timestamp
    };
    assert_eq!(ts4, T0);
    // No data of the aborted transaction is left: its entry is gone too.
    assert!(log.collect_aborted_txns(0, i64::MAX).is_empty());

    // Before the horizon nothing changes; after it, both markers go.
    let st = clean(&log, 0, &cfg).expect("clean").expect("cleaned");
    assert_eq!((st.markers_stamped, st.markers_removed), (0, 0));
    clock.advance(RETENTION + 1);
    let st = clean(&log, 0, &cfg).expect("clean").expect("cleaned");
    assert_eq!(st.markers_removed, 2);
    let want = vec![
        s(2, "p", -1),
        s(6, "y", 2),
        s(7, "COMMIT", 2),
        s(8, "x", -1),
        s(9, "c", 1),
        s(10, "COMMIT", 1),
        s(11, "q", -1),
    ];
    assert_eq!(read_all(&log).0, want);

    // A clean restart, then a crash with the producer state rebuilt from
    // the compacted log: same records, producers known, nothing open.
    log.close().expect("close");
    drop(log);
    let log = open(
        dir.path(),
        &clock,
        LogOpenOptions {
            clean_shutdown: true,
            high_watermark: 12,
            ..LogOpenOptions::default()
        },
    );
    assert_eq!(read_all(&log).0, want);
    drop(log);
    for snap in std::fs::read_dir(dir.path()).expect("dir") {
        let p = snap.expect("entry").path();
        if p.extension().is_some_and(|e| e == "snapshot") {
            std::fs::remove_file(p).expect("rm snapshot");
        }
    }
    let log = open(
        dir.path(),
        &clock,
        LogOpenOptions {
            recovery_point: 0,
            high_watermark: 12,
            ..LogOpenOptions::default()
        },
    );
    assert_eq!(read_all(&log).0, want);
    assert_eq!(log.last_stable_offset(), 12);
    for pid in [1, 2] {
        let e = log.producer_state(pid).expect("producer known");
        assert_eq!(e.current_txn_first_offset, None);
    }
    assert!(log.collect_aborted_txns(0, i64::MAX).is_empty());
}

#[test]
fn nothing_at_or_past_the_last_stable_offset_is_cleaned() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let log = open(dir.path(), &clock, LogOpenOptions::default());
    let client = AppendOrigin::Client;
    append(&log, records(-1, 0, 0, &["a"], T0), client);
    append(&log, records(-1, 0, 0, &["a"], T0), client);
    log.roll().expect("roll");
    let second = log.log_end_offset();
    append(&log, records(5, 0, 0, &["a"], T0), client); // open transaction
    log.roll().expect("roll");
    append(&log, records(-1, 0, 0, &["a"], T0), client);
    log.roll().expect("roll");
    assert_eq!(log.last_stable_offset(), second);
    let c = cleanable(&log, 0).expect("first segment");
    assert_eq!(
        c.end, second,
        "the segment holding the open transaction stays"
    );
    // Once it aborts, everything before the active segment is cleanable,
    // and the aborted record does not supersede the earlier "a".
    end_txn(&log, 5, false, T0);
    log.roll().expect("roll");
    let st = clean(&log, 0, &CleanerConfig::default())
        .expect("clean")
        .expect("cleaned");
    assert_eq!(st.aborted_records_removed, 1);
    let keys: Vec<(i64, String, i64)> = read_all(&log)
        .0
        .into_iter()
        .filter(|(_, k, _)| k == "a")
        .collect();
    assert_eq!(keys, vec![s(second + 1, "a", -1)]);
}
