//! Offset lookup cost: `Log::read` of a random offset with a small
//! `max_bytes`, which resolves the offset to a `FileRegion` (segment map,
//! sparse offset index, then a few batch headers) without reading data.
//!
//! Three logs, all with `index.interval.bytes` at its default (4096) and
//! batches of 10 records with 100-byte values (about 1.2 KiB each):
//!
//! - `lookup/1_segment_100_batches`: one segment of 100 batches;
//! - `lookup/1_segment_100k_batches`: 100,000 batches in one segment;
//! - `lookup/1000_segments_100k_batches`: the same 100,000 batches in 1,000
//!   segments of 100 batches each (`segment.bytes` = 100 batches).
//!
//! A logarithmic lookup keeps all three close together.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use sluice_protocol::record::{BatchBuilder, Compression, Record};
use sluice_storage::{
    Clock, Log, LogConfig, LogOpenOptions, ReadLimit, SystemClock, TopicPartition,
};

const RECORDS_PER_BATCH: usize = 10;
const VALUE_BYTES: usize = 100;
const BATCHES_PER_SEGMENT: u64 = 100;
const LOOKUPS: usize = 4096;

fn batch(now_ms: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new(Compression::None, now_ms);
    for i in 0..RECORDS_PER_BATCH {
        b.push(Record::new(
            Some(format!("key-{i}").into_bytes()),
            Some(vec![b'v'; VALUE_BYTES]),
            now_ms,
        ));
    }
    b.build(0).expect("build batch")
}

/// A log in `dir` holding `batches` copies of `buf`, rolled every
/// `segment_bytes`.
fn build_log(dir: &Path, buf: &mut [u8], batches: u64, segment_bytes: u64) -> Log {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let config = LogConfig {
        segment_bytes,
        ..LogConfig::default()
    };
    let log = Log::open(
        dir,
        TopicPartition::new("bench", 0),
        config,
        LogOpenOptions::default(),
        clock,
    )
    .expect("open log");
    for _ in 0..batches {
        log.append_as_leader(buf, 0).expect("append");
    }
    log
}

/// Random offsets in `[0, end)` (xorshift64*, fixed seed).
fn random_offsets(end: i64) -> Vec<i64> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..LOOKUPS)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) % end as u64) as i64
        })
        .collect()
}

fn bench_lookup(c: &mut Criterion) {
    let root = tempfile::tempdir().expect("tempdir");
    let mut buf = batch(SystemClock.now_ms());
    let per_segment = buf.len() as u64 * BATCHES_PER_SEGMENT;
    let logs = [
        (
            "1_segment_100_batches",
            build_log(&root.path().join("a-0"), &mut buf, 100, 1 << 30),
        ),
        (
            "1_segment_100k_batches",
            build_log(&root.path().join("b-0"), &mut buf, 100_000, 1 << 30),
        ),
        (
            "1000_segments_100k_batches",
            build_log(&root.path().join("c-0"), &mut buf, 100_000, per_segment),
        ),
    ];

    let mut group = c.benchmark_group("lookup");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    for (name, log) in &logs {
        println!(
            "lookup/{name}: {} segments, log end offset {}, {} bytes",
            log.segment_count(),
            log.log_end_offset(),
            log.size_in_bytes()
        );
        let offsets = random_offsets(log.log_end_offset());
        let mut i = 0usize;
        group.bench_function(*name, |b| {
            b.iter(|| {
                let offset = offsets[i % LOOKUPS];
                i += 1;
                let info = log
                    .read(black_box(offset), 1, ReadLimit::LogEnd, true)
                    .expect("read");
                black_box(info.region.expect("region").position)
            });
        });
    }
    group.finish();
    for (_, log) in logs {
        log.close().expect("close");
    }
}

criterion_group!(benches, bench_lookup);
criterion_main!(benches);
