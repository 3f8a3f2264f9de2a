//! The walker accepts every batch `BatchBuilder` builds, in every codec,
//! and rejects (never panics on) any change to the record framing.

use proptest::prelude::*;

use super::*;
use crate::record::batch::{validate_crc, RECORDS_COUNT_OFFSET};
use crate::record::codec::{
    assemble, encode_record, put_varint, BatchBuilder, BatchFields, Header, ProducerInfo, Record,
};

fn record(i: usize) -> Record {
    let key = (i % 3 != 2).then(|| format!("key-{i}").into_bytes());
    let value = (i % 5 != 4).then(|| vec![b'v'; i * 7 % 50]);
    let mut r = Record::new(key, value, 1_000 + i as i64);
    if i % 2 == 0 {
        r = r.with_header(b"h", Some(b"hv")).with_header(b"", None);
    }
    r
}

fn build(codec: Compression, n: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new(codec, 1_000);
    for i in 0..n {
        b.push(record(i));
    }
    b.build(0).expect("build")
}

fn walk(batch: &[u8]) -> Result<(WalkSummary, Vec<RecordMeta>)> {
    let h = validate_crc(batch)?;
    let mut metas = Vec::new();
    let s = walk_batch(batch, &h, 1 << 20, |m| metas.push(*m))?;
    Ok((s, metas))
}

/// A batch around `payload` (already encoded records) claiming `count`
/// records, compressed with `codec`.
fn batch_of(codec: Compression, payload: &[u8], count: i32) -> Vec<u8> {
    let fields = BatchFields {
        base_offset: 0,
        partition_leader_epoch: -1,
        attributes: i16::from(codec.id()),
        last_offset_delta: count - 1,
        base_timestamp: 1_000,
        max_timestamp: 1_000,
        producer: ProducerInfo::default(),
        records_count: count,
    };
    assemble(&fields, codec, payload).expect("assemble")
}

/// The encoded records of `n` sample records, one `Vec` per record.
fn encoded(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut out = Vec::new();
            encode_record(&mut out, &record(i), i as i32, i as i64);
            out
        })
        .collect()
}

fn varint_at(buf: &[u8], pos: usize) -> (i64, usize) {
    let mut u = 0u64;
    let mut i = 0;
    loop {
        let b = buf[pos + i];
        u |= u64::from(b & 0x7f) << (7 * i);
        i += 1;
        if b & 0x80 == 0 {
            return (((u >> 1) as i64) ^ -((u & 1) as i64), i);
        }
    }
}

/// Replaces the varint at `pos` with `value`.
fn replace_varint(buf: &[u8], pos: usize, value: i64) -> Vec<u8> {
    let (_, n) = varint_at(buf, pos);
    let mut out = buf[..pos].to_vec();
    put_varint(&mut out, value);
    out.extend_from_slice(&buf[pos + n..]);
    out
}

/// Positions of the framing varints of one encoded record: length,
/// timestamp delta, offset delta, key length.
fn framing(rec: &[u8]) -> [usize; 4] {
    let (_, l) = varint_at(rec, 0);
    let ts = l + 1;
    let (_, t) = varint_at(rec, ts);
    let od = ts + t;
    let (_, o) = varint_at(rec, od);
    [0, ts, od, od + o]
}

#[derive(Debug, Clone, Copy)]
enum Mutation {
    /// The record's length varint off by `delta`.
    Length(i64),
    /// The record's offset delta set to this.
    OffsetDelta(i32),
    /// The key length grows by `delta` (runs past the record or shifts the fields).
    KeyLength(i64),
    /// The header count goes negative.
    NegativeHeaders,
}

fn mutate(rec: &[u8], m: Mutation) -> Vec<u8> {
    let [len_at, _, od_at, key_at] = framing(rec);
    match m {
        Mutation::Length(d) => {
            let (len, _) = varint_at(rec, len_at);
            replace_varint(rec, len_at, len + d)
        }
        Mutation::OffsetDelta(v) => {
            // Same encoded width keeps the length right: only the value is wrong.
            let (old, w) = varint_at(rec, od_at);
            let mut probe = Vec::new();
            put_varint(&mut probe, i64::from(v));
            assert_eq!(probe.len(), w, "{old} -> {v} changes width");
            replace_varint(rec, od_at, i64::from(v))
        }
        Mutation::KeyLength(d) => {
            let (klen, _) = varint_at(rec, key_at);
            let new = if klen < 0 { d.abs() } else { klen + d };
            replace_varint(rec, key_at, new)
        }
        Mutation::NegativeHeaders => {
            // The header count is the last varint of a record without headers.
            let mut out = rec.to_vec();
            let last = out.len() - 1;
            assert_eq!(out[last], 0, "record without headers ends with count 0");
            out[last] = 3; // zig-zag -2
            out
        }
    }
}

#[test]
fn builder_batches_walk_in_every_codec() {
    for codec in Compression::ALL {
        for n in [1, 2, 17, 300] {
            let batch = build(codec, n);
            let (summary, metas) = walk(&batch).unwrap_or_else(|e| panic!("{codec:?} {n}: {e}"));
            assert_eq!(summary.records, n);
            assert_eq!(metas.len(), n);
            let mut size = 0u64;
            for (i, m) in metas.iter().enumerate() {
                let r = record(i);
                assert_eq!(m.index, i);
                assert_eq!(m.offset_delta, i as i32);
                assert_eq!(m.timestamp_delta, i as i64);
                assert_eq!(m.has_key(), r.key.is_some());
                assert_eq!(m.key_len, r.key.as_ref().map_or(-1, |k| k.len() as i32));
                assert_eq!(m.value_len, r.value.as_ref().map_or(-1, |v| v.len() as i32));
                assert_eq!(m.header_count, r.headers.len() as i32);
                size += m.size as u64;
            }
            assert_eq!(summary.bytes, size, "{codec:?}");
        }
    }
}

#[test]
fn count_must_match_the_records() {
    for codec in Compression::ALL {
        let recs = encoded(5);
        let payload = recs.concat();
        assert!(walk(&batch_of(codec, &payload, 5)).is_ok());
        for count in [4, 6, 1_000, i32::MAX] {
            let err = walk(&batch_of(codec, &payload, count)).expect_err("wrong count");
            assert!(
                matches!(err, ProtocolError::InvalidRecord(_)),
                "{codec:?} {count}: {err}"
            );
        }
        let err = walk(&batch_of(codec, &payload, -1)).expect_err("negative");
        assert!(err.to_string().contains("invalid record count"), "{err}");
    }
}

#[test]
fn premature_end_and_trailing_bytes_are_rejected() {
    let payload = encoded(4).concat();
    for codec in Compression::ALL {
        for cut in 1..payload.len() {
            let err =
                walk(&batch_of(codec, &payload[..payload.len() - cut], 4)).expect_err("truncated");
            assert!(matches!(err, ProtocolError::InvalidRecord(_)), "{err}");
        }
        for extra in [&[0u8][..], &[1, 2, 3], &encoded(1)[0]] {
            let mut p = payload.clone();
            p.extend_from_slice(extra);
            let err = walk(&batch_of(codec, &p, 4)).expect_err("trailing");
            assert_eq!(
                err,
                ProtocolError::InvalidRecord(
                    "Incorrect declared batch size, records still remaining in file".into()
                ),
                "{codec:?}"
            );
        }
    }
}

#[test]
fn framing_mutations_are_rejected() {
    let recs = encoded(6);
    let mutations = [
        Mutation::Length(1),
        Mutation::Length(-1),
        Mutation::Length(1_000),
        Mutation::Length(-1_000),
        Mutation::OffsetDelta(9),
        Mutation::KeyLength(1),
        Mutation::KeyLength(-1),
        Mutation::KeyLength(100_000),
    ];
    for codec in Compression::ALL {
        for target in 0..recs.len() {
            for m in mutations {
                let mut rs = recs.clone();
                rs[target] = mutate(&rs[target], m);
                let batch = batch_of(codec, &rs.concat(), 6);
                let err = walk(&batch).expect_err("mutated");
                assert!(
                    matches!(err, ProtocolError::InvalidRecord(_)),
                    "{codec:?} record {target} {m:?}: {err}"
                );
            }
        }
        // Records 1, 3 and 5 carry no headers.
        let mut rs = recs.clone();
        rs[3] = mutate(&rs[3], Mutation::NegativeHeaders);
        let err = walk(&batch_of(codec, &rs.concat(), 6)).expect_err("headers");
        assert!(err.to_string().contains("headers"), "{err}");
    }
}

#[test]
fn offset_deltas_must_run_from_zero() {
    let mut payload = Vec::new();
    for (i, delta) in [0, 2, 1].into_iter().enumerate() {
        encode_record(&mut payload, &record(i), delta, 0);
    }
    for codec in Compression::ALL {
        let err = walk(&batch_of(codec, &payload, 3)).expect_err("deltas");
        assert!(err.to_string().contains("offset delta 2"), "{err}");
    }
}

#[test]
fn varints_that_are_too_long_are_rejected() {
    // A record length written in 6 bytes.
    let mut payload = vec![0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
    payload.extend_from_slice(&[0; 20]);
    let err = walk(&batch_of(Compression::None, &payload, 1)).expect_err("varint");
    assert!(err.to_string().contains("Varint is too long"), "{err}");
}

#[test]
fn decompression_bombs_stop_at_the_limit() {
    // 20 MB of one record's worth of zeros compresses to a few KiB.
    let mut payload = Vec::new();
    let rec = Record::new(Some(b"k".to_vec()), Some(vec![0; 20 << 20]), 1_000);
    encode_record(&mut payload, &rec, 0, 0);
    for codec in Compression::ALL {
        if codec == Compression::None {
            continue;
        }
        let batch = batch_of(codec, &payload, 1);
        assert!(batch.len() < 2 << 20, "{codec:?}: {}", batch.len());
        let h = validate_crc(&batch).expect("crc");
        let err = walk_batch(&batch, &h, 1 << 20, |_| ()).expect_err("bomb");
        assert_eq!(
            err,
            ProtocolError::DecompressionLimit {
                codec: codec.name(),
                limit: 1 << 20
            }
        );
        assert!(
            walk_batch(&batch, &h, 21 << 20, |_| ()).is_ok(),
            "{codec:?}"
        );
    }
}

#[test]
fn raw_snappy_payloads_walk() {
    let payload = encoded(10).concat();
    let raw = snap::raw::Encoder::new()
        .compress_vec(&payload)
        .expect("compress");
    let fields = BatchFields {
        base_offset: 0,
        partition_leader_epoch: -1,
        attributes: i16::from(Compression::Snappy.id()),
        last_offset_delta: 9,
        base_timestamp: 1_000,
        max_timestamp: 1_000,
        producer: ProducerInfo::default(),
        records_count: 10,
    };
    // `assemble` would compress again: build around the raw block.
    let mut batch = assemble(&fields, Compression::None, &raw).expect("assemble");
    batch[22] = Compression::Snappy.id();
    let crc = crate::record::batch::compute_crc(&batch);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    let (s, _) = walk(&batch).expect("raw snappy");
    assert_eq!(s.records, 10);
    assert_eq!(s.bytes, payload.len() as u64);
}

fn arb_record() -> impl Strategy<Value = Record> {
    (
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..30)),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
        -1_000i64..1_000_000,
        proptest::collection::vec(
            (
                proptest::collection::vec(any::<u8>(), 0..8),
                proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
            ),
            0..3,
        ),
    )
        .prop_map(|(key, value, ts, hs)| Record {
            offset: 0,
            timestamp: ts,
            key,
            value,
            headers: hs
                .into_iter()
                .map(|(key, value)| Header { key, value })
                .collect(),
        })
}

proptest! {
    #[test]
    fn built_batches_walk_to_their_count(
        records in proptest::collection::vec(arb_record(), 1..40),
        codec in 0u8..5,
    ) {
        let codec = Compression::from_id(codec).expect("codec");
        let mut b = BatchBuilder::new(codec, 500);
        for r in &records { b.push_ref(r); }
        let batch = b.build(0).expect("build");
        let (summary, metas) = walk(&batch).expect("walk");
        prop_assert_eq!(summary.records, records.len());
        for (m, r) in metas.iter().zip(&records) {
            prop_assert_eq!(m.has_key(), r.key.is_some());
            prop_assert_eq!(m.timestamp_delta, r.timestamp - 500);
            prop_assert_eq!(m.header_count as usize, r.headers.len());
        }
    }

    #[test]
    fn framing_mutations_never_pass(
        n in 1usize..8,
        target in 0usize..8,
        kind in 0u8..4,
        delta in 1i64..5_000,
        codec in 0u8..5,
    ) {
        let codec = Compression::from_id(codec).expect("codec");
        let mut recs = encoded(n);
        let target = target % n;
        let m = match kind {
            0 => Mutation::Length(delta),
            1 => Mutation::Length(-delta),
            2 => Mutation::KeyLength(delta),
            _ => Mutation::KeyLength(-delta),
        };
        recs[target] = mutate(&recs[target], m);
        let batch = batch_of(codec, &recs.concat(), n as i32);
        prop_assert!(walk(&batch).is_err(), "{:?} accepted", m);
    }

    #[test]
    fn random_bytes_never_panic(
        payload in proptest::collection::vec(any::<u8>(), 0..600),
        count in -2i32..200,
        codec in 0u8..5,
    ) {
        let codec = Compression::from_id(codec).expect("codec");
        // Raw garbage as the (compressed) body, and the same garbage
        // compressed properly so the record walk itself sees it.
        for batch in [
            {
                let mut b = batch_of(Compression::None, &payload, count);
                b[22] = codec.id();
                let crc = crate::record::batch::compute_crc(&b);
                b[17..21].copy_from_slice(&crc.to_be_bytes());
                b
            },
            batch_of(codec, &payload, count),
        ] {
            let _ = walk(&batch);
        }
    }

    #[test]
    fn byte_flips_never_panic(
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        codec in 0u8..5,
    ) {
        let codec = Compression::from_id(codec).expect("codec");
        let mut payload = encoded(5).concat();
        for (at, x) in flips {
            let i = at % payload.len();
            payload[i] ^= x | 1;
        }
        let batch = batch_of(codec, &payload, 5);
        if let Ok((s, _)) = walk(&batch) {
            prop_assert_eq!(s.records, 5);
        }
        let mut b = batch.clone();
        b[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4].copy_from_slice(&6i32.to_be_bytes());
        let crc = crate::record::batch::compute_crc(&b);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        let _ = walk(&b);
    }
}
