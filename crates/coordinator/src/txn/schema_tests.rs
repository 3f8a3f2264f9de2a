//! Byte-level tests against encodings built by hand from Kafka's
//! `TransactionLogKey.json` / `TransactionLogValue.json`, and round trips.

#![allow(clippy::unwrap_used)]

use proptest::prelude::*;

use super::*;

/// Concatenates big-endian pieces, for hand-built expected encodings.
#[derive(Default)]
struct Bytes(Vec<u8>);

impl Bytes {
    fn i8(mut self, v: i8) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i16(mut self, v: i16) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i32(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn raw(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
}

fn ongoing_value() -> TransactionLogValue {
    TransactionLogValue {
        producer_id: 1000,
        previous_producer_id: -1,
        next_producer_id: -1,
        producer_epoch: 5,
        transaction_timeout_ms: 60_000,
        transaction_status: 1,
        transaction_partitions: Some(vec![
            TxnTopicPartitions {
                topic: "a".into(),
                partition_ids: vec![0, 2],
            },
            TxnTopicPartitions {
                topic: "bc".into(),
                partition_ids: vec![7],
            },
        ]),
        transaction_last_update_timestamp_ms: 1_700_000_000_123,
        transaction_start_timestamp_ms: 1_700_000_000_000,
        client_transaction_version: 0,
    }
}

#[test]
fn key_bytes() {
    let key = TransactionLogKey {
        transactional_id: "txn-1".into(),
    };
    let expected = Bytes::default().i16(0).i16(5).raw(b"txn-1").0;
    assert_eq!(key.encode().unwrap(), expected);
    assert_eq!(
        TxnRecordKey::decode(&expected).unwrap(),
        TxnRecordKey::Transaction(key)
    );
}

#[test]
fn unknown_key_versions_are_reported_not_failed() {
    let bytes = Bytes::default().i16(1).i16(1).raw(b"x").0;
    assert_eq!(
        TxnRecordKey::decode(&bytes).unwrap(),
        TxnRecordKey::Unknown(1)
    );
    let bytes = Bytes::default().i16(-3).0;
    assert_eq!(
        TxnRecordKey::decode(&bytes).unwrap(),
        TxnRecordKey::Unknown(-3)
    );
    assert!(TxnRecordKey::decode(&[0]).is_err());
    // version 0 with a truncated id
    assert!(TxnRecordKey::decode(&Bytes::default().i16(0).i16(4).raw(b"ab").0).is_err());
}

#[test]
fn value_v0_bytes() {
    let v = ongoing_value();
    let expected = Bytes::default()
        .i16(0) // version
        .i64(1000) // producer id
        .i16(5) // epoch
        .i32(60_000) // timeout
        .i8(1) // Ongoing
        .i32(2) // two topics
        .i16(1)
        .raw(b"a")
        .i32(2)
        .i32(0)
        .i32(2)
        .i16(2)
        .raw(b"bc")
        .i32(1)
        .i32(7)
        .i64(1_700_000_000_123)
        .i64(1_700_000_000_000)
        .0;
    assert_eq!(v.encode(0).unwrap(), expected);
    assert_eq!(TransactionLogValue::decode(&expected).unwrap(), v);
}

#[test]
fn value_v0_null_partitions_and_dropped_tagged_fields() {
    let v = TransactionLogValue {
        transaction_status: 0,
        transaction_partitions: None,
        previous_producer_id: 999,
        client_transaction_version: 1,
        transaction_start_timestamp_ms: -1,
        ..ongoing_value()
    };
    let expected = Bytes::default()
        .i16(0)
        .i64(1000)
        .i16(5)
        .i32(60_000)
        .i8(0)
        .i32(-1) // null array
        .i64(1_700_000_000_123)
        .i64(-1)
        .0;
    assert_eq!(v.encode(0).unwrap(), expected);
    let back = TransactionLogValue::decode(&expected).unwrap();
    assert_eq!(back.transaction_partitions, None);
    assert_eq!(back.previous_producer_id, -1);
    assert_eq!(back.client_transaction_version, 0);
}

#[test]
fn value_v1_bytes_without_tagged_fields() {
    let v = ongoing_value();
    let expected = Bytes::default()
        .i16(1)
        .i64(1000)
        .i16(5)
        .i32(60_000)
        .i8(1)
        .raw(&[3]) // compact array: 2 topics + 1
        .raw(&[2])
        .raw(b"a")
        .raw(&[3])
        .i32(0)
        .i32(2)
        .raw(&[0]) // topic's tagged fields
        .raw(&[3])
        .raw(b"bc")
        .raw(&[2])
        .i32(7)
        .raw(&[0])
        .i64(1_700_000_000_123)
        .i64(1_700_000_000_000)
        .raw(&[0]) // no tagged fields
        .0;
    assert_eq!(v.encode(1).unwrap(), expected);
    assert_eq!(TransactionLogValue::decode(&expected).unwrap(), v);
}

#[test]
fn value_v1_bytes_with_tagged_fields() {
    let v = TransactionLogValue {
        transaction_status: 4, // CompleteCommit
        transaction_partitions: Some(Vec::new()),
        previous_producer_id: 77,
        next_producer_id: 1001,
        client_transaction_version: 2,
        ..ongoing_value()
    };
    let expected = Bytes::default()
        .i16(1)
        .i64(1000)
        .i16(5)
        .i32(60_000)
        .i8(4)
        .raw(&[1]) // empty compact array
        .i64(1_700_000_000_123)
        .i64(1_700_000_000_000)
        .raw(&[3]) // three tagged fields, in tag order
        .raw(&[0, 8])
        .i64(77)
        .raw(&[1, 8])
        .i64(1001)
        .raw(&[2, 2])
        .i16(2)
        .0;
    assert_eq!(v.encode(1).unwrap(), expected);
    assert_eq!(TransactionLogValue::decode(&expected).unwrap(), v);
}

#[test]
fn value_v1_null_partitions_and_unknown_tags() {
    let bytes = Bytes::default()
        .i16(1)
        .i64(5)
        .i16(0)
        .i32(1000)
        .i8(0)
        .raw(&[0]) // null compact array
        .i64(10)
        .i64(-1)
        .raw(&[2])
        .raw(&[9, 3, 1, 2, 3]) // unknown tag 9, 3 bytes: skipped
        .raw(&[1, 8])
        .i64(6)
        .0;
    let v = TransactionLogValue::decode(&bytes).unwrap();
    assert_eq!(v.transaction_partitions, None);
    assert_eq!(v.next_producer_id, 6);
    assert_eq!(v.previous_producer_id, -1);
}

#[test]
fn malformed_values_are_errors() {
    let good = ongoing_value().encode(1).unwrap();
    for cut in 0..good.len() {
        assert!(
            TransactionLogValue::decode(&good[..cut]).is_err(),
            "truncated at {cut}"
        );
    }
    let mut v2 = good.clone();
    v2[1] = 2;
    assert_eq!(
        TransactionLogValue::decode(&v2),
        Err(CoordinatorError::UnsupportedRecordVersion {
            record: "TransactionLogValue",
            version: 2
        })
    );
    // a known tag with the wrong size
    let bad = Bytes::default()
        .i16(1)
        .i64(5)
        .i16(0)
        .i32(1000)
        .i8(0)
        .raw(&[0])
        .i64(10)
        .i64(-1)
        .raw(&[1, 0, 4])
        .i32(6)
        .0;
    assert!(TransactionLogValue::decode(&bad).is_err());
    // a huge partition count does not allocate
    let huge = Bytes::default()
        .i16(0)
        .i64(5)
        .i16(0)
        .i32(1000)
        .i8(1)
        .i32(i32::MAX)
        .0;
    assert!(TransactionLogValue::decode(&huge).is_err());
}

#[test]
fn records_and_tombstones() {
    let r = Record::transaction("t", &ongoing_value(), 0).unwrap();
    assert_eq!(r.key, Bytes::default().i16(0).i16(1).raw(b"t").0);
    assert_eq!(r.value, Some(ongoing_value().encode(0).unwrap()));
    let t = Record::transaction_tombstone("t").unwrap();
    assert_eq!(t.key, r.key);
    assert!(t.is_tombstone());
}

fn value_strategy() -> impl Strategy<Value = TransactionLogValue> {
    let topics = proptest::collection::vec(
        (
            "[a-z.\\-_é]{1,12}",
            proptest::collection::vec(any::<i32>(), 0..4),
        )
            .prop_map(|(topic, partition_ids)| TxnTopicPartitions {
                topic,
                partition_ids,
            }),
        0..4,
    );
    (
        (any::<i64>(), any::<i64>(), any::<i64>(), any::<i16>()),
        (any::<i32>(), any::<i8>(), proptest::option::of(topics)),
        (any::<i64>(), any::<i64>(), any::<i16>()),
    )
        .prop_map(
            |((pid, prev, next, epoch), (timeout, status, parts), (upd, start, tv))| {
                TransactionLogValue {
                    producer_id: pid,
                    previous_producer_id: prev,
                    next_producer_id: next,
                    producer_epoch: epoch,
                    transaction_timeout_ms: timeout,
                    transaction_status: status,
                    transaction_partitions: parts,
                    transaction_last_update_timestamp_ms: upd,
                    transaction_start_timestamp_ms: start,
                    client_transaction_version: tv,
                }
            },
        )
}

proptest! {
    #[test]
    fn v1_round_trips(v in value_strategy()) {
        let bytes = v.encode(1).unwrap();
        prop_assert_eq!(TransactionLogValue::decode(&bytes).unwrap(), v);
    }

    #[test]
    fn v0_round_trips_without_tagged_fields(v in value_strategy()) {
        let bytes = v.encode(0).unwrap();
        let expected = TransactionLogValue {
            previous_producer_id: -1,
            next_producer_id: -1,
            client_transaction_version: 0,
            ..v
        };
        prop_assert_eq!(TransactionLogValue::decode(&bytes).unwrap(), expected);
    }

    #[test]
    fn key_round_trips(id in "\\PC{0,40}") {
        let key = TransactionLogKey { transactional_id: id };
        let bytes = key.encode().unwrap();
        prop_assert_eq!(TxnRecordKey::decode(&bytes).unwrap(), TxnRecordKey::Transaction(key));
    }

    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = TxnRecordKey::decode(&bytes);
        let _ = TransactionLogValue::decode(&bytes);
    }
}
