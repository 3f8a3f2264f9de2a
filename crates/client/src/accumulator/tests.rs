//! Unit tests of the record accumulator.
use super::*;
use sluice_protocol::record::codec::decode_batch;
use sluice_protocol::record::BatchHeader;

fn tp(p: i32) -> TopicPartition {
    TopicPartition::new("t", p)
}

fn rec(value_len: usize, ts: i64) -> Record {
    Record::new(Some(b"k".to_vec()), Some(vec![b'v'; value_len]), ts)
}

/// Decodes a drained batch (records of up to 1 MiB).
fn decode(bytes: &[u8]) -> Result<sluice_protocol::record::codec::DecodedBatch> {
    decode_batch(bytes, 1 << 20).map_err(|e| ClientError::Protocol(e.to_string()))
}

fn appended(o: AppendOutcome) -> (RecordHandle, usize, bool, bool) {
    match o {
        AppendOutcome::Appended {
            handle,
            size,
            batch_full,
            new_batch,
        } => (handle, size, batch_full, new_batch),
        AppendOutcome::WouldBlock { .. } => panic!("unexpected would-block"),
    }
}

#[test]
fn record_size_matches_encoding() {
    let r = Record::new(Some(b"key".to_vec()), None, 1000)
        .with_header(b"h", Some(b"vv"))
        .with_header(b"n", None);
    for (d, ts) in [(0, 0i64), (5, 300), (200, -70_000)] {
        let mut out = Vec::new();
        sluice_protocol::record::codec::encode_record(&mut out, &r, d, ts);
        assert_eq!(encoded_record_len(r.to_ref(), d, ts), out.len());
    }
}

#[test]
fn records_share_a_batch_until_linger() -> Result<()> {
    let mut acc = RecordAccumulator::new(AccumulatorConfig::default());
    let (h0, _, full, new) = appended(acc.append(&tp(0), rec(10, 100), 1000)?);
    assert!(new && !full);
    let (h1, _, _, new) = appended(acc.append(&tp(0), rec(10, 101), 1002)?);
    assert!(!new);
    assert_eq!(h0.batch_id, h1.batch_id);
    assert_eq!((h0.index, h1.index), (0, 1));
    assert!(acc.ready(1004).is_empty());
    assert_eq!(acc.next_ready_ms(), Some(1005));
    assert!(acc.drain(1004)?.is_empty());
    assert_eq!(acc.ready(1005), vec![tp(0)]);
    let batches = acc.drain(1005)?;
    assert_eq!(batches.len(), 1);
    let b = &batches[0];
    assert_eq!((b.id, b.record_count, b.attempts), (h0.batch_id, 2, 0));
    assert_eq!(b.reserved, acc.used_memory());
    assert_eq!(b.reserved, 16_384, "a batch reserves batch.size");
    assert_eq!(
        b.bytes.len(),
        97,
        "two records of 18 bytes after the 61-byte header"
    );
    let header = BatchHeader::parse(&b.bytes).map_err(|e| ClientError::Protocol(e.to_string()))?;
    assert_eq!(header.producer_id, -1);
    assert_eq!(header.producer_epoch, -1);
    assert_eq!(header.base_sequence, -1);
    assert_eq!(header.records_count, 2);
    assert_eq!(h1.offset(500), 501);
    acc.deallocate(b);
    assert_eq!(acc.used_memory(), 0);
    assert!(!acc.has_undrained());
    assert_eq!(acc.next_ready_ms(), None);
    Ok(())
}

#[test]
fn batch_size_closes_batches() -> Result<()> {
    let cfg = AccumulatorConfig {
        batch_size: 1000,
        ..Default::default()
    };
    let mut acc = RecordAccumulator::new(cfg);
    let mut ids = Vec::new();
    for i in 0..20 {
        let (h, _, _, _) = appended(acc.append(&tp(0), rec(100, i), 0)?);
        ids.push(h);
    }
    // Closed batches are ready before linger; the open one is not.
    let drained = acc.drain(0)?;
    assert!(drained.len() >= 2);
    for b in &drained {
        assert!(b.bytes.len() <= 1000, "batch of {}", b.bytes.len());
    }
    // In order, ids ascending, indexes consecutive.
    let mut total = 0;
    for w in drained.windows(2) {
        assert!(w[0].id < w[1].id);
    }
    for b in &drained {
        let decoded = decode(&b.bytes)?;
        for (i, r) in decoded.records.iter().enumerate() {
            let h = ids[total + i];
            assert_eq!((h.batch_id, h.index as usize), (b.id, i));
            assert_eq!(r.record.timestamp, (total + i) as i64);
        }
        total += decoded.records.len();
    }
    assert!(total < 20);
    let rest = acc.drain(5)?;
    assert_eq!(rest.len(), 1);
    assert_eq!(total + rest[0].record_count as usize, 20);
    Ok(())
}

#[test]
fn oversized_record_gets_own_batch() -> Result<()> {
    let cfg = AccumulatorConfig {
        batch_size: 100,
        ..Default::default()
    };
    let mut acc = RecordAccumulator::new(cfg);
    appended(acc.append(&tp(0), rec(1, 0), 0)?);
    let (h, size, full, new) = appended(acc.append(&tp(0), rec(500, 0), 0)?);
    assert!(new && full && size > 500);
    assert_eq!(h.index, 0);
    let b = acc.drain(0)?;
    assert_eq!(b.len(), 2);
    assert_eq!(b[1].record_count, 1);
    Ok(())
}

#[test]
fn buffer_memory_back_pressure() -> Result<()> {
    let cfg = AccumulatorConfig {
        batch_size: 200,
        buffer_memory: 1000,
        ..Default::default()
    };
    let mut acc = RecordAccumulator::new(cfg);
    let mut blocked = None;
    for i in 0..100 {
        match acc.append(&tp(i % 3), rec(50, 0), 0)? {
            AppendOutcome::Appended { .. } => {}
            AppendOutcome::WouldBlock {
                needed, available, ..
            } => {
                assert!(needed > available);
                blocked = Some(i);
                break;
            }
        }
    }
    assert!(blocked.is_some());
    assert!(acc.used_memory() <= 1000);
    let drained = acc.drain(10)?;
    assert!(!drained.is_empty());
    // Still blocked until the sender deallocates.
    assert!(matches!(
        acc.append(&tp(0), rec(50, 0), 10)?,
        AppendOutcome::WouldBlock { .. }
    ));
    for b in &drained {
        acc.deallocate(b);
    }
    assert_eq!(acc.used_memory(), 0);
    appended(acc.append(&tp(0), rec(50, 0), 10)?);
    // A record that can never fit is an error, not a block.
    let err = acc.append(&tp(0), rec(5000, 0), 10);
    assert!(matches!(err, Err(ClientError::RecordTooLarge { .. })));
    Ok(())
}

#[test]
fn every_codec_round_trips() -> Result<()> {
    for c in Compression::ALL {
        let cfg = AccumulatorConfig {
            compression: c,
            ..Default::default()
        };
        let mut acc = RecordAccumulator::new(cfg);
        let r = Record::new(None, Some(b"hello hello hello".to_vec()), 77)
            .with_header(b"h", Some(b"x"));
        appended(acc.append(&tp(1), r.clone(), 0)?);
        appended(acc.append(&tp(1), rec(3, 78), 0)?);
        let b = acc.drain(5)?;
        assert_eq!(b.len(), 1);
        let d = decode(&b[0].bytes)?;
        assert_eq!(d.header.compression().ok(), Some(c));
        assert_eq!(d.records.len(), 2);
        assert_eq!(d.records[0].record.value, r.value);
        assert_eq!(d.records[0].record.headers, r.headers);
        assert_eq!(d.records[0].record.timestamp, 77);
        assert_eq!(d.records[1].record.timestamp, 78);
        assert_eq!(d.records[1].record.offset, 1);
    }
    Ok(())
}

#[test]
fn flush_makes_everything_ready() -> Result<()> {
    let mut acc = RecordAccumulator::new(AccumulatorConfig {
        linger_ms: 1_000_000,
        ..Default::default()
    });
    appended(acc.append(&tp(0), rec(1, 0), 0)?);
    appended(acc.append(&tp(2), rec(1, 0), 0)?);
    assert!(acc.ready(10).is_empty());
    acc.begin_flush();
    assert!(acc.is_flushing());
    assert_eq!(acc.next_ready_ms(), Some(0));
    assert_eq!(acc.ready(10), vec![tp(0), tp(2)]);
    assert_eq!(acc.drain(10)?.len(), 2);
    acc.end_flush();
    assert!(!acc.has_undrained());
    Ok(())
}

#[test]
fn mute_retry_and_producer_state() -> Result<()> {
    let mut acc = RecordAccumulator::new(AccumulatorConfig::default());
    for _ in 0..3 {
        appended(acc.append(&tp(0), rec(1, 0), 0)?);
    }
    assert_eq!(acc.front(&tp(0), 4), None, "lingering");
    let Some(Front::New { id, records: 3 }) = acc.front(&tp(0), 5) else {
        panic!("a new batch of 3 records is ready");
    };
    let info = ProducerInfo {
        producer_id: 42,
        producer_epoch: 3,
        base_sequence: 7,
    };
    let first = acc.drain_next(&tp(0), 5, info)?.expect("drained");
    assert_eq!((first.id, first.producer), (id, info));
    let h = BatchHeader::parse(&first.bytes).map_err(|e| ClientError::Protocol(e.to_string()))?;
    assert_eq!(
        (h.producer_id, h.producer_epoch, h.base_sequence),
        (42, 3, 7)
    );
    appended(acc.append(&tp(0), rec(1, 0), 6)?);
    acc.mute(&tp(0));
    assert!(acc.ready(100).is_empty());
    assert_eq!(acc.front(&tp(0), 100), None);
    assert!(acc.drain(100)?.is_empty());
    // The first batch failed retriably: it goes back, first in line.
    acc.reenqueue(first.clone());
    assert!(acc.ready(100).is_empty(), "still muted");
    acc.unmute(&tp(0));
    assert_eq!(acc.front(&tp(0), 100), Some(Front::Retry { id }));
    let mut again = acc
        .drain_next(&tp(0), 100, ProducerInfo::default())?
        .expect("retry");
    assert_eq!((again.id, again.attempts, again.producer), (id, 1, info));
    assert_eq!(again.bytes, first.bytes, "a retry goes out unchanged");
    // An epoch bump resets its sequence: header and CRC rewritten.
    let bumped = ProducerInfo {
        producer_epoch: 4,
        base_sequence: 0,
        ..info
    };
    again.set_producer(bumped);
    let h = sluice_protocol::record::batch::validate_crc(&again.bytes)
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
    assert_eq!(
        (h.producer_id, h.producer_epoch, h.base_sequence),
        (42, 4, 0)
    );
    assert_eq!(again.producer, bumped);
    let rest = acc.drain(100)?;
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].producer, ProducerInfo::default());
    Ok(())
}

#[test]
fn drain_max_and_retry_backoff() -> Result<()> {
    let cfg = AccumulatorConfig {
        batch_size: 100,
        ..Default::default()
    };
    let mut acc = RecordAccumulator::new(cfg);
    for i in 0..4 {
        appended(acc.append(&tp(0), rec(60, i), 0)?);
    }
    let first = acc.drain_partition_max(&tp(0), 10, 1)?;
    assert_eq!(first.len(), 1);
    let second = acc.drain_partition_max(&tp(0), 10, 1)?;
    assert!(second[0].id > first[0].id);
    // The first batch fails: back first in line, after a backoff.
    acc.reenqueue_with_backoff(first[0].clone(), 50);
    assert!(acc.ready(49).is_empty(), "newer batches wait too");
    assert_eq!(acc.next_ready_ms(), Some(50));
    assert_eq!(acc.next_ready_ms_where(|t| t != &tp(0)), None);
    assert!(acc.drain_partition_max(&tp(0), 49, 5)?.is_empty());
    let again = acc.drain_partition_max(&tp(0), 50, 5)?;
    assert_eq!(again[0].id, first[0].id);
    assert_eq!(again[0].attempts, 1);
    assert_eq!(again.len(), 3, "then the rest, in order");
    assert!(again.windows(2).all(|w| w[0].id < w[1].id));
    Ok(())
}

#[test]
fn expire_old_batches() -> Result<()> {
    let mut acc = RecordAccumulator::new(AccumulatorConfig::default());
    let (a, _, _, _) = appended(acc.append(&tp(0), rec(1, 0), 100)?);
    let drained = acc.drain(200)?;
    acc.reenqueue_with_backoff(drained[0].clone(), 10_000);
    let (b, _, _, _) = appended(acc.append(&tp(1), rec(1, 0), 300)?);
    let (c, _, _, _) = appended(acc.append(&tp(1), rec(1, 0), 300)?);
    assert_eq!(b.batch_id, c.batch_id);
    acc.mute(&tp(1));
    assert_eq!(acc.next_expiry_ms(1000), Some(1100));
    assert!(acc.expire(1099, 1000).is_empty());
    let e = acc.expire(1100, 1000);
    assert_eq!(e.len(), 1);
    assert_eq!(
        (e[0].id, e[0].retried, e[0].record_count),
        (a.batch_id, true, 1)
    );
    assert_eq!(acc.next_expiry_ms(1000), Some(1300));
    // Muted partitions expire too, open batches included.
    let e = acc.expire(1300, 1000);
    assert_eq!(e.len(), 1);
    assert_eq!((e[0].tp.clone(), e[0].record_count), (tp(1), 2));
    assert_eq!(acc.used_memory(), 0);
    assert!(!acc.has_undrained());
    assert_eq!(acc.next_expiry_ms(1000), None);
    Ok(())
}

#[test]
fn abort_frees_memory() -> Result<()> {
    let mut acc = RecordAccumulator::new(AccumulatorConfig::default());
    let (h, _, _, _) = appended(acc.append(&tp(0), rec(1, 0), 0)?);
    assert!(acc.used_memory() > 0);
    assert_eq!(acc.abort_undrained(), vec![h.batch_id]);
    assert_eq!(acc.used_memory(), 0);
    Ok(())
}

/// Drains every batch of `tp` at a time past any linger.
fn drain_all(acc: &mut RecordAccumulator, tp: &TopicPartition) -> Result<Vec<ReadyBatch>> {
    acc.drain_partition(tp, u64::MAX / 2)
}

#[test]
fn a_batch_buffer_is_reused_once_the_last_request_lets_go_of_it() -> Result<()> {
    let mut acc = RecordAccumulator::new(AccumulatorConfig {
        batch_size: 4_096,
        ..AccumulatorConfig::default()
    });
    appended(acc.append(&tp(0), rec(100, 1), 0)?);
    let first = drain_all(&mut acc, &tp(0))?.remove(0);
    let first_ptr = first.bytes.as_ptr();
    let first_bytes = first.bytes.to_vec();
    // A request still holds the batch: the next batch gets a new buffer
    // and the held bytes do not change.
    let in_request = first.bytes.clone();
    acc.deallocate(&first);
    drop(first);
    appended(acc.append(&tp(0), rec(200, 2), 0)?);
    let second = drain_all(&mut acc, &tp(0))?.remove(0);
    assert_ne!(second.bytes.as_ptr(), first_ptr);
    assert_eq!(in_request.to_vec(), first_bytes);
    assert_eq!(acc.pool.free(), 0);
    // The request lets go: the buffer is free and the next batch reuses it,
    // encoded from scratch (the old records are gone).
    drop(in_request);
    assert_eq!(acc.pool.free(), 1);
    appended(acc.append(&tp(0), rec(50, 3), 0)?);
    let third = drain_all(&mut acc, &tp(0))?.remove(0);
    assert_eq!(third.bytes.as_ptr(), first_ptr);
    assert_eq!(acc.pool.free(), 0);
    let decoded = decode(&third.bytes)?;
    assert_eq!(decoded.header.records_count, 1);
    assert_eq!(
        decoded.records[0].record.value.as_deref(),
        Some(&[b'v'; 50][..])
    );
    drop(second);
    assert_eq!(acc.pool.free(), 1);
    Ok(())
}

#[test]
fn only_batch_size_buffers_are_kept_and_at_most_buffer_memory_of_them() -> Result<()> {
    let mut acc = RecordAccumulator::new(AccumulatorConfig {
        batch_size: 1_024,
        buffer_memory: 4 * 1_024,
        ..AccumulatorConfig::default()
    });
    // A record larger than batch.size gets a batch of its own size: freed,
    // not kept.
    appended(acc.append(&tp(0), rec(2_000, 1), 0)?);
    let big = drain_all(&mut acc, &tp(0))?;
    acc.deallocate(&big[0]);
    drop(big);
    assert_eq!(acc.pool.free(), 0);
    // Four batches in memory at once (all buffer.memory allows), then a
    // fifth buffer from a batch whose request outlived the others: four
    // are kept.
    let mut held = Vec::new();
    for p in 0..4 {
        appended(acc.append(&tp(p), rec(10, 1), 0)?);
        held.extend(drain_all(&mut acc, &tp(p))?);
    }
    let extra = acc.pool.seal(Vec::with_capacity(1_024));
    for b in &held {
        acc.deallocate(b);
    }
    drop(held);
    assert_eq!(acc.pool.free(), 4);
    drop(extra);
    assert_eq!(acc.pool.free(), 4);
    Ok(())
}

#[test]
fn a_batch_outliving_its_producer_is_freed() -> Result<()> {
    let mut acc = RecordAccumulator::new(AccumulatorConfig {
        batch_size: 1_024,
        ..AccumulatorConfig::default()
    });
    appended(acc.append(&tp(0), rec(10, 1), 0)?);
    let batch = drain_all(&mut acc, &tp(0))?.remove(0);
    let expected = batch.bytes.to_vec();
    drop(acc);
    assert_eq!(batch.bytes.to_vec(), expected);
    drop(batch);
    Ok(())
}

#[test]
fn a_compressed_batch_gives_its_record_buffer_back_at_once() -> Result<()> {
    let mut acc = RecordAccumulator::new(AccumulatorConfig {
        batch_size: 4_096,
        compression: Compression::Lz4,
        ..AccumulatorConfig::default()
    });
    appended(acc.append(&tp(0), rec(500, 1), 0)?);
    let batch = drain_all(&mut acc, &tp(0))?.remove(0);
    // The batch is compressed into a buffer of its own; the record buffer
    // is free while the batch is still held.
    assert!(batch.bytes.len() < 500);
    assert_eq!(acc.pool.free(), 1);
    appended(acc.append(&tp(0), rec(500, 2), 0)?);
    assert_eq!(acc.pool.free(), 0, "the next batch reuses it");
    let decoded = decode(&batch.bytes)?;
    assert_eq!(decoded.records.len(), 1);
    assert_eq!(
        decoded.records[0].record.value.as_deref(),
        Some(&[b'v'; 500][..])
    );
    Ok(())
}
