//! Append validation: every refusal leaves the log untouched; accepted
//! batches are stored with Kafka's timestamps and the topic's codec.

use std::sync::Arc;

use sluice_protocol::record::batch::{self, BatchHeader, RECORDS_COUNT_OFFSET};
use sluice_protocol::record::codec::{
    assemble, decode_batch, encode_record, BatchFields, ProducerInfo, Record,
};
use sluice_protocol::record::{BatchBuilder, BatchIter, Compression};
use sluice_protocol::ProtocolError;

use crate::clock::ManualClock;
use crate::config::{CleanupPolicy, LogConfig, TimestampType, TopicCompression};
use crate::error::{RecordError, RecordErrorKind, StorageError};
use crate::log::{AppendOrigin, Log, LogOpenOptions, ReadLimit};
use crate::TopicPartition;

const T0: i64 = 1_700_000_000_000;

fn open(dir: &std::path::Path, config: LogConfig) -> Log {
    Log::open(
        dir,
        TopicPartition::new("v", 0),
        config,
        LogOpenOptions::default(),
        Arc::new(ManualClock::new(T0)),
    )
    .expect("open")
}

fn compacted() -> LogConfig {
    LogConfig {
        cleanup_policy: CleanupPolicy {
            delete: false,
            compact: true,
        },
        ..LogConfig::default()
    }
}

fn rec(i: usize, key: bool) -> Record {
    Record::new(
        key.then(|| format!("k{i}").into_bytes()),
        Some(format!("value-{i}").into_bytes()),
        T0 + i as i64,
    )
}

/// The encoded records `rec(0..n)` (all keyed) with offset deltas `deltas`.
fn payload(n: usize, deltas: impl Fn(usize) -> i32) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        encode_record(&mut out, &rec(i, true), deltas(i), i as i64);
    }
    out
}

fn fields(count: i32, last_offset_delta: i32) -> BatchFields {
    BatchFields {
        base_offset: 0,
        partition_leader_epoch: -1,
        attributes: 0,
        last_offset_delta,
        base_timestamp: T0,
        max_timestamp: T0,
        producer: ProducerInfo::default(),
        records_count: count,
    }
}

/// A CRC-valid batch around `payload` in `codec` with the given header
/// counts.
fn raw_batch(codec: Compression, payload: &[u8], count: i32, last_offset_delta: i32) -> Vec<u8> {
    let mut f = fields(count, last_offset_delta);
    f.attributes = i16::from(codec.id());
    assemble(&f, codec, payload).expect("assemble")
}

fn good(codec: Compression, n: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new(codec, T0);
    for i in 0..n {
        b.push(rec(i, true));
    }
    b.build(0).expect("build")
}

/// Stored batches: header and decoded records.
fn stored(log: &Log) -> Vec<(BatchHeader, Vec<Record>)> {
    let r = log.read(0, 1 << 24, ReadLimit::LogEnd, true).expect("read");
    let Some(region) = r.region else {
        return Vec::new();
    };
    let bytes = region.read_to_vec().expect("bytes");
    BatchIter::new(&bytes)
        .map(|b| {
            let (_, h, raw) = b.expect("batch");
            batch::validate_crc(raw).expect("stored CRC");
            let records = decode_batch(raw, 1 << 24)
                .expect("decode")
                .records
                .into_iter()
                .map(|d| d.record)
                .collect();
            (h, records)
        })
        .collect()
}

fn assert_untouched(log: &Log) {
    assert_eq!(log.log_end_offset(), 0);
    assert_eq!(log.size_in_bytes(), 0);
}

fn invalid_record(r: crate::Result<crate::AppendInfo>) -> String {
    match r {
        Err(StorageError::InvalidRecord(m)) => m,
        other => panic!("expected InvalidRecord, got {other:?}"),
    }
}

#[test]
fn framing_errors_append_nothing_in_every_codec() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), LogConfig::default());
    for codec in Compression::ALL {
        let p = payload(5, |i| i as i32);
        // Claims more records than it holds (count and last offset delta agree).
        let more = raw_batch(codec, &p, 1_000_000, 999_999);
        let m = invalid_record(log.append_as_leader(&mut more.clone(), 0));
        assert_eq!(
            m, "Incorrect declared batch size, premature EOF reached",
            "{codec:?}"
        );
        let huge = raw_batch(codec, &p, i32::MAX, i32::MAX - 1);
        invalid_record(log.append_as_leader(&mut huge.clone(), 0));
        // Fewer: bytes left over.
        let fewer = raw_batch(codec, &p, 4, 3);
        let m = invalid_record(log.append_as_leader(&mut fewer.clone(), 0));
        assert_eq!(
            m,
            "Incorrect declared batch size, records still remaining in file"
        );
        // Offset deltas that skip.
        let gaps = raw_batch(codec, &payload(5, |i| 2 * i as i32), 5, 4);
        let m = invalid_record(log.append_as_leader(&mut gaps.clone(), 0));
        assert!(m.contains("Record 1 has offset delta 2"), "{m}");
        // A record cut short.
        let cut = raw_batch(codec, &p[..p.len() - 4], 5, 4);
        invalid_record(log.append_as_leader(&mut cut.clone(), 0));
        // Garbage after the last record, inside the batch.
        let mut extra = p.clone();
        extra.extend_from_slice(b"garbage");
        let trailing = raw_batch(codec, &extra, 5, 4);
        let m = invalid_record(log.append_as_leader(&mut trailing.clone(), 0));
        assert_eq!(
            m,
            "Incorrect declared batch size, records still remaining in file"
        );
        // A record length that disagrees with its fields.
        let mut bad_len = p.clone();
        bad_len[0] += 2; // zig-zag: length + 1
        let wrong = raw_batch(codec, &bad_len, 5, 4);
        invalid_record(log.append_as_leader(&mut wrong.clone(), 0));
        assert_untouched(&log);
    }
    log.append_as_leader(&mut good(Compression::None, 3), 0)
        .expect("a good batch still goes in");
    assert_eq!(log.log_end_offset(), 3);
}

#[test]
fn header_counts_follow_kafkas_offset_range_checks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), LogConfig::default());
    let p = payload(3, |i| i as i32);
    let cases = [
        (
            3,
            4,
            "Inconsistent batch offset range [0, 4] and count of records 3 in topic partition v-0",
        ),
        (
            0,
            -1,
            "Batch has an invalid offset range: [0, -1] in topic partition v-0",
        ),
        (
            -5,
            2,
            "Invalid reported count for record batch: -5 in topic partition v-0",
        ),
    ];
    for (count, lod, want) in cases {
        let mut b = raw_batch(Compression::None, &p, count, lod);
        assert_eq!(invalid_record(log.append_as_leader(&mut b, 0)), want);
    }
    assert_untouched(&log);
}

#[test]
fn client_batches_get_kafkas_producer_checks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), LogConfig::default());
    let client = |b: &mut Vec<u8>| log.append_as_leader_from(b, 0, AppendOrigin::Client);

    let mut based = good(Compression::None, 2);
    batch::set_base_offset(&mut based, 7);
    assert_eq!(
        invalid_record(client(&mut based.clone())),
        "The baseOffset of the record batch in the append to v-0 should be 0, but it is 7"
    );

    let p = payload(1, |_| 0);
    let mut f = fields(1, 0);
    f.attributes = 0x20; // control
    let control = assemble(&f, Compression::None, &p).expect("assemble");
    assert_eq!(
        invalid_record(client(&mut control.clone())),
        "Clients are not allowed to write control records in topic partition v-0"
    );

    let mut f = fields(1, 0);
    f.producer = ProducerInfo {
        producer_id: 42,
        producer_epoch: 0,
        base_sequence: -1,
    };
    let no_seq = assemble(&f, Compression::None, &p).expect("assemble");
    assert_eq!(
        invalid_record(client(&mut no_seq.clone())),
        "Invalid sequence number -1 in record batch with producerId 42 in topic partition v-0"
    );
    assert_untouched(&log);

    // The broker's own writers may do all three.
    log.append_as_leader(&mut based, 0).expect("base offset 7");
    log.append_as_leader(&mut control.clone(), 0)
        .expect("control");
    log.append_as_leader(&mut no_seq.clone(), 0)
        .expect("no sequence");
    assert_eq!(log.log_end_offset(), 4);
}

#[test]
fn keyless_records_in_a_compacted_topic_are_refused_with_their_indexes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), compacted());
    for codec in Compression::ALL {
        let mut b = BatchBuilder::new(codec, T0);
        for i in 0..6 {
            b.push(rec(i, i != 1 && i != 4));
        }
        let mut bytes = b.build(0).expect("build");
        let err = log
            .append_as_leader_from(&mut bytes, 0, AppendOrigin::Client)
            .expect_err("keyless");
        let msg = "Compacted topic cannot accept message without key in topic partition v-0";
        let want_errors = vec![
            RecordError {
                batch_index: 1,
                message: Some(msg.into()),
            },
            RecordError {
                batch_index: 4,
                message: Some(msg.into()),
            },
        ];
        match err {
            StorageError::RecordErrors {
                kind,
                errors,
                total,
                message,
            } => {
                assert_eq!(kind, RecordErrorKind::InvalidRecord);
                assert_eq!(errors, want_errors);
                assert_eq!(total, 2);
                assert_eq!(
                    message,
                    format!(
                        "One or more records have been rejected due to 2 record errors in total, \
                         and only showing the first three errors at most: \
                         [RecordError(batchIndex=1, message='{msg}'), \
                         RecordError(batchIndex=4, message='{msg}')]"
                    )
                );
            }
            other => panic!("{codec:?}: {other:?}"),
        }
        assert_untouched(&log);
    }
    // Keys everywhere: accepted. Tombstones have keys too.
    let mut b = BatchBuilder::new(Compression::None, T0);
    b.push(rec(0, true));
    b.push(Record::new(Some(b"gone".to_vec()), None, T0));
    log.append_as_leader(&mut b.build(0).expect("build"), 0)
        .expect("keyed");
    // The same keyless batch is fine where the topic is not compacted.
    log.set_config(LogConfig::default());
    let mut b = BatchBuilder::new(Compression::None, T0);
    b.push(rec(0, false));
    log.append_as_leader(&mut b.build(0).expect("build"), 0)
        .expect("delete policy takes keyless records");
}

#[test]
fn the_summary_shows_three_errors_and_counts_them_all() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), compacted());
    let mut b = BatchBuilder::new(Compression::Lz4, T0);
    for i in 0..MANY {
        b.push(rec(i, false));
    }
    const MANY: usize = crate::log::MAX_RECORD_ERRORS + 5;
    let err = log
        .append_as_leader(&mut b.build(0).expect("build"), 0)
        .expect_err("keyless");
    let StorageError::RecordErrors {
        errors,
        total,
        message,
        ..
    } = err
    else {
        panic!("{err:?}")
    };
    assert_eq!(total, MANY);
    assert_eq!(errors.len(), crate::log::MAX_RECORD_ERRORS);
    assert_eq!(errors.last().map(|e| e.batch_index), Some(9_999));
    assert!(message.starts_with(&format!(
        "One or more records have been rejected due to {MANY} record errors in total, and only \
         showing the first three errors at most: [RecordError(batchIndex=0, "
    )));
    assert_eq!(message.matches("RecordError(").count(), 3);
}

#[test]
fn every_record_timestamp_is_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        message_timestamp_before_max_ms: 1_000,
        message_timestamp_after_max_ms: 500,
        ..compacted()
    };
    let log = open(dir.path(), config);
    // Base and max timestamps are in range; records 1 (too old) and 3 (too
    // new) are not, record 2 has no timestamp (-1) and is not checked,
    // record 4 has no key.
    let stamps = [T0, T0 - 5_000, -1, T0 + 600, T0 + 100];
    let mut out = Vec::new();
    for (i, ts) in stamps.iter().enumerate() {
        let r = Record::new((i != 4).then(|| b"k".to_vec()), Some(b"v".to_vec()), *ts);
        encode_record(&mut out, &r, i as i32, ts.wrapping_sub(T0));
    }
    let mut f = fields(5, 4);
    f.max_timestamp = T0 + 100;
    let mut bytes = assemble(&f, Compression::None, &out).expect("assemble");
    let err = log.append_as_leader(&mut bytes, 0).expect_err("timestamps");
    let StorageError::RecordErrors {
        kind,
        errors,
        message,
        ..
    } = err
    else {
        panic!("{err:?}")
    };
    assert_eq!(kind, RecordErrorKind::InvalidTimestamp);
    assert_eq!(
        message,
        "One or more records have been rejected due to invalid timestamp"
    );
    let range = format!("[{}, {}]", T0 - 1_000, T0 + 500);
    assert_eq!(
        errors,
        vec![
            RecordError {
                batch_index: 1,
                message: Some(format!(
                    "Timestamp {} of message with offset 1 is out of range. The timestamp should be within {range}",
                    T0 - 5_000
                )),
            },
            RecordError {
                batch_index: 3,
                message: Some(format!(
                    "Timestamp {} of message with offset 3 is out of range. The timestamp should be within {range}",
                    T0 + 600
                )),
            },
            RecordError {
                batch_index: 4,
                message: Some(
                    "Compacted topic cannot accept message without key in topic partition v-0"
                        .into()
                ),
            },
        ]
    );
    assert_untouched(&log);

    // LogAppendTime topics do not bound producer timestamps...
    log.set_config(LogConfig {
        message_timestamp_type: TimestampType::LogAppendTime,
        message_timestamp_before_max_ms: 1_000,
        ..LogConfig::default()
    });
    let mut old = BatchBuilder::new(Compression::None, 5);
    old.push(Record::new(None, Some(b"v".to_vec()), 5));
    let mut old = old.build(0).expect("build");
    log.append_as_leader(&mut old.clone(), 0).expect("old ok");
    // ... but refuse batches a producer marked LogAppendTime.
    batch::set_log_append_time(&mut old, T0);
    let err = log
        .append_as_leader(&mut old, 0)
        .expect_err("producer LogAppendTime");
    let StorageError::RecordErrors { kind, errors, .. } = err else {
        panic!("{err:?}")
    };
    assert_eq!(kind, RecordErrorKind::InvalidTimestamp);
    assert_eq!(
        errors[0].message.as_deref(),
        Some(
            "Invalid timestamp type in message DefaultRecord(offset=0, timestamp=1700000000000, \
             key=0 bytes, value=1 bytes). Producer should not set timestamp type to LogAppendTime."
        )
    );
    assert_eq!(log.log_end_offset(), 1);
}

#[test]
fn max_timestamp_is_the_largest_record_timestamp() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), LogConfig::default());
    for codec in [Compression::None, Compression::Zstd] {
        let mut bytes = good(codec, 4);
        // A producer that claims a later max timestamp than its records.
        assert!(batch::set_max_timestamp(
            &mut bytes,
            batch::TimestampType::CreateTime,
            T0 + 3_000_000
        ));
        let info = log.append_as_leader(&mut bytes, 0).expect("append");
        assert_eq!(info.max_timestamp, T0 + 3);
    }
    for (h, records) in stored(&log) {
        assert_eq!(h.max_timestamp, T0 + 3);
        assert_eq!(records.last().map(|r| r.timestamp), Some(T0 + 3));
    }
}

#[test]
fn recompression_to_each_codec_reads_back_the_same_records() {
    for target in Compression::ALL {
        for source in Compression::ALL {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(
                dir.path(),
                LogConfig {
                    compression_type: TopicCompression::Codec(target),
                    ..LogConfig::default()
                },
            );
            let producer = ProducerInfo {
                producer_id: 9,
                producer_epoch: 2,
                base_sequence: 0,
            };
            let mut b = BatchBuilder::new(source, T0).producer(producer, true);
            let sent: Vec<Record> = (0..20)
                .map(|i| rec(i, i % 3 != 0).with_header(b"h", Some(format!("{i}").as_bytes())))
                .collect();
            for r in &sent {
                b.push_ref(r);
            }
            let mut bytes = b.build(0).expect("build");
            log.append_as_leader_from(&mut bytes, 0, AppendOrigin::Client)
                .expect("append");
            // The same records as the producer's next batch (the same
            // sequence again would be a duplicate).
            let mut next = BatchBuilder::new(source, T0).producer(
                ProducerInfo {
                    base_sequence: 20,
                    ..producer
                },
                true,
            );
            for r in &sent {
                next.push_ref(r);
            }
            log.append_as_leader_from(&mut next.build(0).expect("build"), 0, AppendOrigin::Client)
                .expect("append the next batch");
            let batches = stored(&log);
            assert_eq!(batches.len(), 2);
            for (n, (h, records)) in batches.iter().enumerate() {
                assert_eq!(h.compression(), Ok(target), "{source:?} -> {target:?}");
                assert_eq!(h.base_offset, 20 * n as i64);
                assert_eq!(h.records_count, 20);
                assert_eq!(h.max_timestamp, T0 + 19);
                assert!(h.is_transactional());
                assert_eq!(
                    (h.producer_id, h.producer_epoch, h.base_sequence),
                    (9, 2, 20 * n as i32)
                );
                for (i, (got, want)) in records.iter().zip(&sent).enumerate() {
                    assert_eq!(got.offset, h.base_offset + i as i64);
                    assert_eq!(
                        (&got.key, &got.value, &got.headers, got.timestamp),
                        (&want.key, &want.value, &want.headers, want.timestamp)
                    );
                }
            }
        }
    }
}

#[test]
fn recompression_with_log_append_time_and_producer_keeps_the_codec() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(
        dir.path(),
        LogConfig {
            compression_type: TopicCompression::Codec(Compression::Gzip),
            message_timestamp_type: TimestampType::LogAppendTime,
            ..LogConfig::default()
        },
    );
    log.append_as_leader(&mut good(Compression::Snappy, 3), 0)
        .expect("append");
    let [(h, records)] = &stored(&log)[..] else {
        panic!("one batch")
    };
    assert_eq!(h.compression(), Ok(Compression::Gzip));
    assert_eq!(h.timestamp_type(), batch::TimestampType::LogAppendTime);
    assert_eq!(h.max_timestamp, T0);
    assert!(records.iter().all(|r| r.timestamp == T0));

    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), LogConfig::default()); // compression.type=producer
    for codec in Compression::ALL {
        let mut sent = good(codec, 2);
        let before = sent.clone();
        log.append_as_leader(&mut sent, 0).expect("append");
        // Only base offset and leader epoch changed: the bytes are as sent.
        assert_eq!(sent[batch::MAGIC_OFFSET..], before[batch::MAGIC_OFFSET..]);
    }
    let codecs: Vec<_> = stored(&log).iter().map(|(h, _)| h.compression()).collect();
    assert_eq!(codecs, Compression::ALL.map(Ok).to_vec());
}

#[test]
fn recompressed_batches_must_fit_max_message_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(
        dir.path(),
        LogConfig {
            compression_type: TopicCompression::Codec(Compression::None),
            max_message_bytes: 4_000,
            ..LogConfig::default()
        },
    );
    let mut b = BatchBuilder::new(Compression::Zstd, T0);
    b.push(Record::new(
        Some(b"k".to_vec()),
        Some(vec![b'x'; 10_000]),
        T0,
    ));
    let mut bytes = b.build(0).expect("build");
    assert!(bytes.len() < 4_000);
    match log.append_as_leader(&mut bytes, 0) {
        Err(StorageError::RecordTooLarge { size, max: 4_000 }) => assert!(size > 10_000),
        other => panic!("{other:?}"),
    }
    assert_untouched(&log);
}

#[test]
fn decompression_is_bounded_and_garbage_is_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), LogConfig::default());
    let limit = crate::log::decompression_limit(&log.config());
    assert_eq!(limit, 64 * 1_048_588);
    // One record whose value is 80 MB of zeros: a few KiB compressed.
    let mut out = Vec::new();
    let r = Record::new(Some(b"k".to_vec()), Some(vec![0; 80 << 20]), T0);
    encode_record(&mut out, &r, 0, 0);
    for codec in [Compression::Gzip, Compression::Lz4, Compression::Zstd] {
        let mut bomb = raw_batch(codec, &out, 1, 0);
        assert!(bomb.len() < 1_048_588, "{codec:?} {}", bomb.len());
        match log.append_as_leader(&mut bomb, 0) {
            Err(StorageError::Corrupt(ProtocolError::DecompressionLimit {
                codec: c,
                limit: l,
            })) => {
                assert_eq!((c, l), (codec.name(), limit));
            }
            other => panic!("{codec:?}: {other:?}"),
        }
    }
    // Snappy expands at most about 21 times, so a batch within
    // max.message.bytes cannot reach the limit by its data; but a raw
    // snappy block announces its size up front, and a lie is refused
    // before anything is allocated.
    let mut lie = Vec::new();
    let mut n = 1u64 << 31; // announced: 2 GiB (unsigned LEB128, not zig-zag)
    while n >= 0x80 {
        lie.push((n as u8) | 0x80);
        n >>= 7;
    }
    lie.push(n as u8);
    lie.extend_from_slice(&[0u8; 64]);
    let mut b = raw_batch(Compression::None, &lie, 1, 0);
    b[batch::ATTRIBUTES_OFFSET + 1] = Compression::Snappy.id();
    let crc = batch::compute_crc(&b);
    b[batch::CRC_OFFSET..batch::CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    match log.append_as_leader(&mut b, 0) {
        Err(StorageError::Corrupt(ProtocolError::DecompressionLimit {
            codec: "snappy",
            limit: l,
        })) => {
            assert_eq!(l, limit);
        }
        other => panic!("snappy: {other:?}"),
    }
    log.set_config(LogConfig::default());
    // A compressed body that is not the codec's format.
    for codec in [
        Compression::Gzip,
        Compression::Lz4,
        Compression::Zstd,
        Compression::Snappy,
    ] {
        let mut b = raw_batch(Compression::None, b"definitely not compressed", 1, 0);
        b[batch::ATTRIBUTES_OFFSET + 1] = codec.id();
        let crc = batch::compute_crc(&b);
        b[batch::CRC_OFFSET..batch::CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        match log.append_as_leader(&mut b, 0) {
            Err(StorageError::Corrupt(ProtocolError::Compression { .. })) => {}
            other => panic!("{codec:?}: {other:?}"),
        }
    }
    assert_untouched(&log);
}

#[test]
fn corrupt_headers_are_still_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), LogConfig::default());
    let mut b = good(Compression::None, 3);
    // Changing the count without fixing the CRC is a CRC error first.
    b[RECORDS_COUNT_OFFSET + 3] = 9;
    assert!(matches!(
        log.append_as_leader(&mut b, 0),
        Err(StorageError::Corrupt(ProtocolError::CrcMismatch { .. }))
    ));
    assert_untouched(&log);
}
