//! Unit tests of producer state: sequence arithmetic, the checks of one
//! append, the snapshot format byte by byte, expiry and the bound.

use super::entry::{decrement_sequence, in_sequence, increment_sequence};
use super::*;
use crate::error::StorageError;

fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

#[test]
fn sequences_wrap_at_i32_max_as_kafka() {
    assert_eq!(increment_sequence(5, 3), 8);
    assert_eq!(increment_sequence(i32::MAX, 1), 0);
    assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
    assert_eq!(increment_sequence(i32::MAX, 0), i32::MAX);
    assert_eq!(decrement_sequence(8, 3), 5);
    assert_eq!(decrement_sequence(0, 1), i32::MAX);
    assert_eq!(decrement_sequence(1, 3), i32::MAX - 1);
    assert!(in_sequence(4, 5));
    assert!(in_sequence(-1, 0));
    assert!(in_sequence(i32::MAX, 0));
    assert!(!in_sequence(4, 6));
    assert!(!in_sequence(4, 4));
    assert!(!in_sequence(i32::MAX - 1, 0));
    // No overflow panics on nonsense from disk.
    let _ = increment_sequence(i32::MAX, -5);
    let _ = decrement_sequence(i32::MIN, i32::MAX);
    let b = BatchMetadata {
        last_seq: 1,
        last_offset: 100,
        offset_delta: 3,
        timestamp: 7,
    };
    assert_eq!(b.first_seq(), i32::MAX - 1);
    assert_eq!(b.first_offset(), 97);
}

/// Appends one data batch of `count` records at `first_offset` through a
/// fresh append info, applying it on success.
#[allow(clippy::too_many_arguments)]
fn append(
    m: &mut ProducerStateManager,
    origin: ProducerOrigin,
    pid: i64,
    epoch: i16,
    first_seq: i32,
    count: i32,
    first_offset: i64,
    ts: i64,
    transactional: bool,
) -> Result<(), StorageError> {
    let mut info = m.prepare_update(pid, origin);
    let last_seq = if first_seq < 0 {
        -1
    } else {
        increment_sequence(first_seq, count - 1)
    };
    info.append_data_batch(
        epoch,
        first_seq,
        last_seq,
        ts,
        first_offset,
        first_offset + i64::from(count) - 1,
        transactional,
        &tp(),
    )?;
    m.update(info, ts);
    Ok(())
}

fn client(
    m: &mut ProducerStateManager,
    pid: i64,
    epoch: i16,
    seq: i32,
    offset: i64,
) -> Result<(), StorageError> {
    append(
        m,
        ProducerOrigin::Client,
        pid,
        epoch,
        seq,
        2,
        offset,
        1_000,
        false,
    )
}

#[test]
fn kafka_sequence_rules_for_client_batches() {
    let mut m = ProducerStateManager::new(ProducerStateConfig::default());
    // An unknown producer may start at any sequence (Kafka 4, KIP-360).
    client(&mut m, 1, 0, 42, 0).expect("first batch at 42");
    assert_eq!(m.entry(1).map(|e| e.last_seq()), Some(43));
    client(&mut m, 1, 0, 44, 2).expect("in sequence");
    // A gap, a repeat that is not a duplicate check here, a step back.
    for bad in [47, 44, 40] {
        match client(&mut m, 1, 0, bad, 4) {
            Err(StorageError::OutOfOrderSequence(msg)) => {
                assert!(
                    msg.contains(&format!(
                        "{bad} (incoming seq. number), 45 (current end sequence number)"
                    )),
                    "{msg}"
                );
            }
            other => panic!("seq {bad}: {other:?}"),
        }
    }
    // A stale epoch is fenced whatever its sequence.
    match client(&mut m, 1, -1, 46, 4) {
        Err(StorageError::InvalidProducerEpoch(msg)) => {
            assert!(
                msg.contains("which is smaller than the last seen epoch 0"),
                "{msg}"
            )
        }
        other => panic!("{other:?}"),
    }
    // A new epoch must start at 0.
    match client(&mut m, 1, 1, 46, 4) {
        Err(StorageError::OutOfOrderSequence(msg)) => {
            assert!(
                msg.contains("Invalid sequence number for new epoch"),
                "{msg}"
            )
        }
        other => panic!("{other:?}"),
    }
    client(&mut m, 1, 1, 0, 4).expect("epoch bump at 0");
    let e = m.entry(1).expect("entry");
    assert_eq!(
        (e.producer_epoch, e.batches().len(), e.last_seq()),
        (1, 1, 1)
    );
    match client(&mut m, 1, 0, 2, 6) {
        Err(StorageError::InvalidProducerEpoch(_)) => {}
        other => panic!("old epoch after the bump: {other:?}"),
    }
}

#[test]
fn wrap_around_at_i32_max() {
    let mut m = ProducerStateManager::new(ProducerStateConfig::default());
    client(&mut m, 9, 3, i32::MAX - 3, 0).expect("near the top");
    client(&mut m, 9, 3, i32::MAX - 1, 2).expect("up to MAX");
    assert_eq!(m.entry(9).map(|e| e.last_seq()), Some(i32::MAX));
    client(&mut m, 9, 3, 0, 4).expect("0 follows MAX");
    // A batch straddling the wrap: MAX-1, MAX, 0.
    let mut m = ProducerStateManager::new(ProducerStateConfig::default());
    append(
        &mut m,
        ProducerOrigin::Client,
        9,
        0,
        i32::MAX - 1,
        3,
        0,
        1,
        false,
    )
    .expect("straddle");
    let e = m.entry(9).expect("entry");
    assert_eq!(e.last_seq(), 0);
    assert_eq!(e.first_seq(), i32::MAX - 1);
    assert_eq!(
        e.find_duplicate(0, i32::MAX - 1, 0).map(|b| b.last_offset),
        Some(2)
    );
    client(&mut m, 9, 0, 1, 3).expect("1 follows 0");
    match client(&mut m, 9, 0, 0, 5) {
        Err(StorageError::OutOfOrderSequence(_)) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn last_five_batches_are_remembered_for_duplicates() {
    let mut m = ProducerStateManager::new(ProducerStateConfig::default());
    for i in 0..7 {
        client(&mut m, 5, 0, i * 2, i64::from(i) * 10).expect("append");
    }
    let e = m.entry(5).expect("entry");
    assert_eq!(e.batches().len(), NUM_BATCHES_TO_RETAIN);
    for i in 2..7 {
        let b = e.find_duplicate(0, i * 2, i * 2 + 1).expect("remembered");
        assert_eq!(b.first_offset(), i64::from(i) * 10);
        assert_eq!(b.last_offset, i64::from(i) * 10 + 1);
    }
    assert_eq!(
        e.find_duplicate(0, 2, 3),
        None,
        "sixth from last is forgotten"
    );
    assert_eq!(
        e.find_duplicate(0, 12, 12),
        None,
        "range must match exactly"
    );
    assert_eq!(e.find_duplicate(1, 12, 13), None, "epoch must match");
}

#[test]
fn coordinator_and_replication_origins() {
    let mut m = ProducerStateManager::new(ProducerStateConfig::default());
    // Coordinator batches carry no sequence: only the epoch is checked.
    append(&mut m, ProducerOrigin::Coordinator, 3, 2, -1, 1, 0, 5, true).expect("coordinator");
    append(&mut m, ProducerOrigin::Coordinator, 3, 2, -1, 1, 1, 5, true).expect("again");
    match append(&mut m, ProducerOrigin::Coordinator, 3, 1, -1, 1, 2, 5, true) {
        Err(StorageError::InvalidProducerEpoch(_)) => {}
        other => panic!("{other:?}"),
    }
    // Replication never fails: a stale epoch is logged and taken.
    append(&mut m, ProducerOrigin::Replication, 3, 1, 7, 1, 2, 5, true).expect("replica");
    assert_eq!(m.entry(3).map(|e| e.producer_epoch), Some(1));
}

#[test]
fn transactions_open_and_close() {
    let mut m = ProducerStateManager::new(ProducerStateConfig::default());
    append(&mut m, ProducerOrigin::Client, 4, 0, 0, 2, 10, 5, true).expect("txn batch");
    assert_eq!(
        m.entry(4).and_then(|e| e.current_txn_first_offset),
        Some(10)
    );
    append(&mut m, ProducerOrigin::Client, 4, 0, 2, 2, 12, 5, true).expect("same txn");
    assert_eq!(
        m.entry(4).and_then(|e| e.current_txn_first_offset),
        Some(10)
    );
    match append(&mut m, ProducerOrigin::Client, 4, 0, 4, 1, 14, 5, false) {
        Err(StorageError::InvalidTxnState(msg)) => {
            assert!(
                msg.contains("Expected transactional write from producer 4"),
                "{msg}"
            )
        }
        other => panic!("{other:?}"),
    }
    let mut info = m.prepare_update(4, ProducerOrigin::Coordinator);
    let done = info
        .append_end_txn_marker(
            EndTxnMarker {
                commit: false,
                coordinator_epoch: 7,
            },
            0,
            14,
            6,
            &tp(),
        )
        .expect("marker");
    assert_eq!(
        done,
        Some(CompletedTxn {
            producer_id: 4,
            first_offset: 10,
            last_offset: 14,
            aborted: true
        })
    );
    m.update(info, 6);
    let e = m.entry(4).expect("entry");
    assert_eq!((e.current_txn_first_offset, e.coordinator_epoch), (None, 7));
    // A marker from an older coordinator is fenced.
    let mut info = m.prepare_update(4, ProducerOrigin::Coordinator);
    let old = EndTxnMarker {
        commit: true,
        coordinator_epoch: 6,
    };
    match info.append_end_txn_marker(old, 0, 15, 7, &tp()) {
        Err(StorageError::TransactionCoordinatorFenced(_)) => {}
        other => panic!("{other:?}"),
    }
}

/// Reads a big-endian field of `N` bytes at `at`.
fn field<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    b[at..at + N].try_into().expect("field")
}

#[test]
fn snapshot_bytes_follow_kafkas_schema_field_by_field() {
    let entries = [
        ProducerStateEntry::new(
            7,
            3,
            -1,
            1_700_000_000_123,
            None,
            Some(BatchMetadata {
                last_seq: 41,
                last_offset: 1_000,
                offset_delta: 9,
                timestamp: 1_700_000_000_123,
            }),
        ),
        // A producer whose last entry is a marker: no batch, open txn none.
        ProducerStateEntry::new(-5 + 1_000_000, 0, 12, 99, Some(500), None),
    ];
    let bytes = snapshot::encode(entries.iter());
    assert_eq!(bytes.len(), 2 + 4 + 4 + 2 * 46);
    assert_eq!(i16::from_be_bytes(field(&bytes, 0)), 1, "Version");
    let crc = u32::from_be_bytes(field(&bytes, 2));
    assert_eq!(
        crc,
        sluice_protocol::record::batch::crc32c(&bytes[6..]),
        "Crc: CRC32C of everything after it"
    );
    assert_eq!(i32::from_be_bytes(field(&bytes, 6)), 2, "entry count");
    let e = &bytes[10..56];
    assert_eq!(i64::from_be_bytes(field(e, 0)), 7, "ProducerId");
    assert_eq!(i16::from_be_bytes(field(e, 8)), 3, "Epoch");
    assert_eq!(i32::from_be_bytes(field(e, 10)), 41, "LastSequence");
    assert_eq!(i64::from_be_bytes(field(e, 14)), 1_000, "LastOffset");
    assert_eq!(i32::from_be_bytes(field(e, 22)), 9, "OffsetDelta");
    assert_eq!(
        i64::from_be_bytes(field(e, 26)),
        1_700_000_000_123,
        "Timestamp"
    );
    assert_eq!(i32::from_be_bytes(field(e, 34)), -1, "CoordinatorEpoch");
    assert_eq!(
        i64::from_be_bytes(field(e, 38)),
        -1,
        "CurrentTxnFirstOffset"
    );
    let e = &bytes[56..];
    assert_eq!(i64::from_be_bytes(field(e, 0)), 999_995);
    assert_eq!(
        i32::from_be_bytes(field(e, 10)),
        -1,
        "no batch: LastSequence -1"
    );
    assert_eq!(
        i64::from_be_bytes(field(e, 14)),
        -1,
        "no batch: LastOffset -1"
    );
    assert_eq!(
        i32::from_be_bytes(field(e, 22)),
        0,
        "no batch: OffsetDelta 0"
    );
    assert_eq!(i32::from_be_bytes(field(e, 34)), 12);
    assert_eq!(i64::from_be_bytes(field(e, 38)), 500);
    // And back.
    let back = snapshot::decode(&bytes).expect("decode");
    assert_eq!(back.len(), 2);
    assert_eq!(back[0].batches(), entries[0].batches());
    assert_eq!(back[0].producer_epoch, 3);
    assert_eq!(back[1].current_txn_first_offset, Some(500));
    assert!(back[1].is_empty());
}

/// A snapshot assembled by hand from Kafka's schema (what a Kafka broker
/// leaves in a partition folder) reads as the entries it describes.
#[test]
fn reads_a_snapshot_built_by_hand_from_the_schema() {
    let mut body = Vec::new();
    body.extend_from_slice(&1i32.to_be_bytes()); // one entry
    body.extend_from_slice(&123_456i64.to_be_bytes()); // ProducerId
    body.extend_from_slice(&2i16.to_be_bytes()); // Epoch
    body.extend_from_slice(&4i32.to_be_bytes()); // LastSequence
    body.extend_from_slice(&77i64.to_be_bytes()); // LastOffset
    body.extend_from_slice(&4i32.to_be_bytes()); // OffsetDelta
    body.extend_from_slice(&1_600_000_000_000i64.to_be_bytes()); // Timestamp
    body.extend_from_slice(&(-1i32).to_be_bytes()); // CoordinatorEpoch
    body.extend_from_slice(&(-1i64).to_be_bytes()); // CurrentTxnFirstOffset
    let mut file = Vec::new();
    file.extend_from_slice(&1i16.to_be_bytes());
    file.extend_from_slice(&sluice_protocol::record::batch::crc32c(&body).to_be_bytes());
    file.extend_from_slice(&body);
    let entries = snapshot::decode(&file).expect("decode");
    assert_eq!(entries.len(), 1);
    let e = &entries[0];
    assert_eq!((e.producer_id, e.producer_epoch), (123_456, 2));
    assert_eq!((e.first_seq(), e.last_seq()), (0, 4));
    assert_eq!(e.last_data_offset(), 77);
    assert_eq!(
        e.find_duplicate(2, 0, 4).map(|b| b.first_offset()),
        Some(73)
    );
    assert_eq!(e.last_timestamp, 1_600_000_000_000);
    assert_eq!(e.current_txn_first_offset, None);
    // Our encoder writes exactly these bytes back.
    assert_eq!(snapshot::encode(entries.iter()), file);

    // Damage of every kind is refused.
    let mut bad_crc = file.clone();
    bad_crc[20] ^= 1;
    let err = snapshot::decode(&bad_crc).expect_err("crc");
    assert!(err.0.contains("CRC is no longer valid"), "{err}");
    let mut version = file.clone();
    version[1] = 2;
    let err = snapshot::decode(&version).expect_err("version");
    assert!(err.0.contains("unknown file version 2"), "{err}");
    for cut in [0, 5, 9, file.len() - 1] {
        snapshot::decode(&file[..cut]).expect_err("truncated");
    }
    let mut count = file.clone();
    count[6..10].copy_from_slice(&2i32.to_be_bytes());
    let crc = sluice_protocol::record::batch::crc32c(&count[6..]);
    count[2..6].copy_from_slice(&crc.to_be_bytes());
    snapshot::decode(&count).expect_err("count beyond the entries");
    assert_eq!(
        snapshot::decode(&snapshot::encode([].iter())).expect("empty"),
        vec![]
    );
}

#[test]
fn snapshot_names_are_twenty_digits() {
    let dir = std::path::Path::new("/x");
    assert_eq!(
        snapshot::snapshot_path(dir, 42),
        std::path::PathBuf::from("/x/00000000000000000042.snapshot")
    );
    assert_eq!(
        snapshot::parse_snapshot_name("00000000000000000042.snapshot"),
        Some(42)
    );
    assert_eq!(snapshot::parse_snapshot_name("42.snapshot"), None);
    assert_eq!(
        snapshot::parse_snapshot_name("00000000000000000042.snapshot.deleted"),
        None
    );
}

#[test]
fn expiry_spares_open_transactions() {
    let config = ProducerStateConfig {
        producer_id_expiration_ms: 1_000,
        max_producer_ids: 100,
    };
    let mut m = ProducerStateManager::new(config);
    append(&mut m, ProducerOrigin::Client, 1, 0, 0, 1, 0, 10_000, false).expect("1");
    append(&mut m, ProducerOrigin::Client, 2, 0, 0, 1, 1, 10_500, false).expect("2");
    append(&mut m, ProducerOrigin::Client, 3, 0, 0, 1, 2, 10_000, true).expect("3 txn");
    assert_eq!(m.remove_expired(10_999), 0);
    assert_eq!(m.remove_expired(11_000), 1, "exactly expiration.ms idle");
    assert!(m.entry(1).is_none());
    assert_eq!(m.remove_expired(50_000), 1);
    assert_eq!(
        m.producer_id_count(),
        1,
        "an open transaction never expires"
    );
    // An expired producer is unknown: any sequence goes again.
    client(&mut m, 1, 0, 77, 3).expect("after expiry");
}

#[test]
fn bound_evicts_least_recently_used_idle_producers() {
    let config = ProducerStateConfig {
        producer_id_expiration_ms: i64::MAX,
        max_producer_ids: 32,
    };
    let mut m = ProducerStateManager::new(config);
    // Producer 0 holds an open transaction; it is never evicted.
    append(&mut m, ProducerOrigin::Client, 0, 0, 0, 1, 0, 1, true).expect("txn");
    for pid in 1..=32 {
        append(
            &mut m,
            ProducerOrigin::Client,
            pid,
            0,
            0,
            1,
            pid,
            100 + pid,
            false,
        )
        .expect("append");
    }
    // 33 > 32: evicted down to 30 (32 - 32/16), the oldest idle first.
    assert_eq!(m.producer_id_count(), 30);
    assert!(m.entry(0).is_some(), "open transaction kept");
    for pid in 1..=3 {
        assert!(m.entry(pid).is_none(), "{pid} was least recently used");
    }
    for pid in 4..=32 {
        assert!(m.entry(pid).is_some(), "{pid} kept");
    }
    // Using a producer again makes it recent.
    client(&mut m, 4, 0, 1, 100).expect("4 again");
    for pid in 33..=35 {
        append(
            &mut m,
            ProducerOrigin::Client,
            pid,
            0,
            0,
            1,
            pid,
            100 + pid,
            false,
        )
        .expect("append");
    }
    assert_eq!(m.producer_id_count(), 30);
    assert!(m.entry(4).is_some(), "recently used");
    assert!(m.entry(5).is_none() && m.entry(6).is_none() && m.entry(7).is_none());
}

/// The bound's memory estimate (docs/design/009) rests on this size.
#[test]
fn an_entry_stays_small() {
    let size = std::mem::size_of::<ProducerStateEntry>();
    eprintln!("ProducerStateEntry: {size} bytes");
    assert!(size <= 176, "{size}");
}
