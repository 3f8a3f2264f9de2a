//! Append throughput of the partition log next to a plain `write(2)` loop.
//!
//! Both benchmarks write the same bytes, a 16-record uncompressed v2 batch
//! of 1 KiB values (about 16 KiB), to a fresh folder in the same temporary
//! directory (`$TMPDIR`), without fsync:
//!
//! - `append/log_append_as_leader`: `Log::append_as_leader` (validation,
//!   CRC32C check, offset assignment, `pwrite`, index upkeep);
//! - `append/plain_write`: `File::write_all` of the same buffer, i.e. one
//!   `write(2)` per batch;
//! - `append/crc32c_check_only`: just the CRC32C check of the batch, the
//!   largest part of what an append adds to the write;
//! - `append/record_walk_only`: just the walk over the batch's record
//!   framing (count, lengths, offset deltas, keys), the other part;
//! - `append/lz4_validated`: `append_as_leader` of the same records as an
//!   lz4 batch (text-like values, about 3:1), whose records are validated
//!   through the streaming decompressor;
//! - `append/lz4_recompressed_to_zstd`: the lz4 batch into a topic with
//!   `compression.type=zstd` (decompress, validate, recompress);
//! - `append/idempotent_producer`: the 16 KiB batch from one idempotent
//!   producer as a client appends it (producer id, epoch, sequences
//!   checked and recorded under the append lock), each batch the next
//!   sequence; `append/plain_from_pool` is the same loop with batches
//!   without a producer id, so the two differ only in the producer check.
//!   Both take their batches from a pool built (and re-CRCed) outside the
//!   timed part, 2,048 at a time.
//!
//! Each criterion sample gets a new log (or file) that is deleted after it,
//! so the folder never grows beyond one sample's bytes. Re-appending one
//! buffer is valid: the base offset is patched in place and lies outside the
//! CRC. The group reports bytes per second so both figures sit side by side.
//! The first append of each log (which writes the leader epoch checkpoint
//! with fsync) is not timed.
//!
//! Afterwards the two loops are also run alternately, 25 rounds of 4,000
//! batches each, and the median per-round ratio of append rate to write rate
//! is printed: on a shared machine that ratio is steadier than the quotient
//! of two criterion runs taken seconds apart.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use sluice_protocol::record::codec::ProducerInfo;
use sluice_protocol::record::{BatchBuilder, Compression, Record};
use sluice_storage::{
    AppendOrigin, Clock, Log, LogConfig, LogOpenOptions, SystemClock, TopicCompression,
    TopicPartition,
};

const RECORDS_PER_BATCH: usize = 16;
const VALUE_BYTES: usize = 1024;

/// One uncompressed batch of 16 records with 1 KiB values.
fn batch(now_ms: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new(Compression::None, now_ms);
    for i in 0..RECORDS_PER_BATCH {
        let value = vec![b'v'.wrapping_add(i as u8); VALUE_BYTES];
        b.push(Record::new(
            Some(format!("key-{i}").into_bytes()),
            Some(value),
            now_ms,
        ));
    }
    b.build(0).expect("build batch")
}

/// One batch of the 16 records from `producer` (or none).
fn producer_batch(now_ms: i64, producer: Option<ProducerInfo>) -> Vec<u8> {
    let mut b = BatchBuilder::new(Compression::None, now_ms);
    if let Some(p) = producer {
        b = b.producer(p, false);
    }
    for i in 0..RECORDS_PER_BATCH {
        let value = vec![b'v'.wrapping_add(i as u8); VALUE_BYTES];
        b.push(Record::new(
            Some(format!("key-{i}").into_bytes()),
            Some(value),
            now_ms,
        ));
    }
    b.build(0).expect("build batch")
}

/// Batches per pool refill in the producer benchmarks.
const POOL: u64 = 2048;

/// Appends `iters` client batches to a new log: from producer 1 with
/// consecutive sequences when `idempotent`, else without a producer id.
/// Only the appends are timed; the pool of batches (each with its own
/// sequence, so its own CRC) is rebuilt outside the timer.
fn time_producer_appends(
    root: &Path,
    sample: u64,
    now: i64,
    iters: u64,
    idempotent: bool,
) -> Spent {
    let dir = root.join(format!("bench-{sample}"));
    let log = Log::open(
        &dir,
        TopicPartition::new("bench", 0),
        LogConfig::default(),
        LogOpenOptions::default(),
        Arc::new(SystemClock),
    )
    .expect("open log");
    let template = producer_batch(
        now,
        idempotent.then_some(ProducerInfo {
            producer_id: 1,
            producer_epoch: 0,
            base_sequence: 0,
        }),
    );
    let mut seq = 0i32;
    let mut pool: Vec<Vec<u8>> = Vec::with_capacity(POOL as usize);
    let refill = |pool: &mut Vec<Vec<u8>>, n: u64, seq: &mut i32| {
        pool.clear();
        for _ in 0..n {
            let mut b = template.clone();
            if idempotent {
                use sluice_protocol::record::batch::{
                    compute_crc, BASE_SEQUENCE_OFFSET, CRC_OFFSET,
                };
                b[BASE_SEQUENCE_OFFSET..BASE_SEQUENCE_OFFSET + 4]
                    .copy_from_slice(&seq.to_be_bytes());
                let crc = compute_crc(&b);
                b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
                *seq += RECORDS_PER_BATCH as i32;
            }
            pool.push(b);
        }
    };
    refill(&mut pool, 1, &mut seq);
    log.append_as_leader_from(&mut pool[0], 0, AppendOrigin::Client)
        .expect("first append");
    let mut spent = Spent {
        wall: Duration::ZERO,
        user: Duration::ZERO,
        sys: Duration::ZERO,
    };
    let mut left = iters;
    while left > 0 {
        let n = left.min(POOL);
        refill(&mut pool, n, &mut seq);
        let start = Timer::start();
        for b in pool.iter_mut() {
            black_box(
                log.append_as_leader_from(b, 0, AppendOrigin::Client)
                    .expect("append"),
            );
        }
        let s = start.stop();
        spent.wall += s.wall;
        spent.user += s.user;
        spent.sys += s.sys;
        left -= n;
    }
    drop(log);
    std::fs::remove_dir_all(&dir).expect("remove log folder");
    spent
}

/// The same records with text-like values (words from a small vocabulary,
/// compressing about 3:1), compressed with `codec`.
fn text_batch(now_ms: i64, codec: Compression) -> Vec<u8> {
    const WORDS: [&str; 16] = [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
        "juliett", "kilo", "lima", "mike", "november", "oscar", "papa",
    ];
    let mut x: u32 = 0x9e37_79b9;
    let mut b = BatchBuilder::new(codec, now_ms);
    for i in 0..RECORDS_PER_BATCH {
        let mut value = Vec::with_capacity(VALUE_BYTES + 16);
        while value.len() < VALUE_BYTES {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            value.extend_from_slice(WORDS[(x % 16) as usize].as_bytes());
            value.extend_from_slice(format!(" {} ", x % 1000).as_bytes());
        }
        value.truncate(VALUE_BYTES);
        b.push(Record::new(
            Some(format!("key-{i}").into_bytes()),
            Some(value),
            now_ms,
        ));
    }
    b.build(0).expect("build batch")
}

/// Wall-clock time with this thread's user and system CPU time.
#[derive(Debug, Clone, Copy)]
struct Spent {
    wall: Duration,
    user: Duration,
    sys: Duration,
}

/// A running measurement for [`Spent`].
struct Timer {
    wall: Instant,
    user: Duration,
    sys: Duration,
}

impl Timer {
    fn start() -> Self {
        let (user, sys) = thread_cpu();
        Self {
            wall: Instant::now(),
            user,
            sys,
        }
    }

    fn stop(&self) -> Spent {
        let wall = self.wall.elapsed();
        let (user, sys) = thread_cpu();
        Spent {
            wall,
            user: user.saturating_sub(self.user),
            sys: sys.saturating_sub(self.sys),
        }
    }
}

/// User and system CPU time of the calling thread (`getrusage`).
fn thread_cpu() -> (Duration, Duration) {
    // SAFETY: an all-zero rusage is valid; getrusage only writes into it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    assert_eq!(rc, 0, "getrusage: {}", std::io::Error::last_os_error());
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

/// Appends `iters` times to a new log under `root`; returns the time spent
/// appending (opening, the first append and deleting the log are not timed).
fn time_log_appends(root: &Path, sample: u64, buf: &mut [u8], iters: u64) -> Spent {
    time_appends_with(root, sample, buf, iters, LogConfig::default())
}

/// [`time_log_appends`] into a log with `config`.
fn time_appends_with(
    root: &Path,
    sample: u64,
    buf: &mut [u8],
    iters: u64,
    config: LogConfig,
) -> Spent {
    let dir = root.join(format!("bench-{sample}"));
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let log = Log::open(
        &dir,
        TopicPartition::new("bench", 0),
        config,
        LogOpenOptions::default(),
        clock,
    )
    .expect("open log");
    // The first append of a leader epoch writes (and fsyncs) the epoch
    // checkpoint: keep that one-off out of the timed loop.
    log.append_as_leader(buf, 0).expect("first append");
    let start = Timer::start();
    for _ in 0..iters {
        black_box(log.append_as_leader(buf, 0).expect("append"));
    }
    let elapsed = start.stop();
    drop(log);
    std::fs::remove_dir_all(&dir).expect("remove log folder");
    elapsed
}

/// Writes the same buffer `iters` times to a new file under `root` with
/// `write_all` (one `write(2)` per buffer).
fn time_plain_writes(root: &Path, sample: u64, buf: &[u8], iters: u64) -> Spent {
    let path = root.join(format!("plain-{sample}.bin"));
    let mut file = std::fs::File::create(&path).expect("create file");
    let start = Timer::start();
    for _ in 0..iters {
        file.write_all(black_box(buf)).expect("write");
    }
    let elapsed = start.stop();
    drop(file);
    std::fs::remove_file(&path).expect("remove file");
    elapsed
}

fn bench_append(c: &mut Criterion) {
    let root = tempfile::tempdir().expect("tempdir");
    let now = SystemClock.now_ms();
    let mut buf = batch(now);
    let len = buf.len() as u64;

    let mut group = c.benchmark_group("append");
    group.throughput(Throughput::Bytes(len));
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    group.sample_size(30);

    let mut sample = 0u64;
    group.bench_function("log_append_as_leader", |b| {
        b.iter_custom(|iters| {
            sample += 1;
            time_log_appends(root.path(), sample, &mut buf, iters).wall
        });
    });
    let plain = buf.clone();
    group.bench_function("plain_write", |b| {
        b.iter_custom(|iters| {
            sample += 1;
            time_plain_writes(root.path(), sample, &plain, iters).wall
        });
    });
    // What every append spends before its write: the CRC32C check of the
    // batch (Kafka's broker checks it on produce too).
    group.bench_function("crc32c_check_only", |b| {
        b.iter(|| sluice_protocol::record::batch::validate_crc(black_box(&plain)).expect("crc"));
    });
    // The other part: walking the record framing (no allocation).
    let header = sluice_protocol::record::BatchHeader::parse(&plain).expect("header");
    group.bench_function("record_walk_only", |b| {
        b.iter(|| {
            let mut keys = 0usize;
            sluice_protocol::record::walk_batch(black_box(&plain), &header, 1 << 20, |m| {
                keys += usize::from(m.has_key());
            })
            .expect("walk");
            keys
        });
    });
    let mut lz4 = text_batch(now, Compression::Lz4);
    println!(
        "append: lz4 batch of the same records with text values: {} bytes",
        lz4.len()
    );
    group.throughput(Throughput::Bytes(lz4.len() as u64));
    group.bench_function("lz4_validated", |b| {
        b.iter_custom(|iters| {
            sample += 1;
            time_log_appends(root.path(), sample, &mut lz4, iters).wall
        });
    });
    let zstd_topic = LogConfig {
        compression_type: TopicCompression::Codec(Compression::Zstd),
        ..LogConfig::default()
    };
    group.bench_function("lz4_recompressed_to_zstd", |b| {
        b.iter_custom(|iters| {
            sample += 1;
            time_appends_with(root.path(), sample, &mut lz4, iters, zstd_topic.clone()).wall
        });
    });
    group.throughput(Throughput::Bytes(len));
    group.bench_function("plain_from_pool", |b| {
        b.iter_custom(|iters| {
            sample += 1;
            time_producer_appends(root.path(), sample, now, iters, false).wall
        });
    });
    group.bench_function("idempotent_producer", |b| {
        b.iter_custom(|iters| {
            sample += 1;
            time_producer_appends(root.path(), sample, now, iters, true).wall
        });
    });
    group.finish();
    println!("append: batch of {RECORDS_PER_BATCH} records x {VALUE_BYTES} B values = {len} bytes");
    interleaved_ratio(root.path(), &mut buf, &plain, &mut sample);
    interleaved_idempotent(root.path(), now, &mut sample);
}

/// Alternates the pooled loop with and without a producer id, 25 rounds of
/// 4,000 batches, and prints the medians: what the producer check costs.
fn interleaved_idempotent(root: &Path, now: i64, sample: &mut u64) {
    const ROUNDS: usize = 25;
    const BATCHES: u64 = 4000;
    let (mut plain, mut idem, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut plain_user, mut idem_user) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        *sample += 2;
        let (p, i) = if round % 2 == 0 {
            let p = time_producer_appends(root, *sample, now, BATCHES, false);
            (
                p,
                time_producer_appends(root, *sample + 1, now, BATCHES, true),
            )
        } else {
            let i = time_producer_appends(root, *sample + 1, now, BATCHES, true);
            (time_producer_appends(root, *sample, now, BATCHES, false), i)
        };
        let us = |d: Duration| d.as_secs_f64() * 1e6 / BATCHES as f64;
        plain.push(us(p.wall));
        idem.push(us(i.wall));
        plain_user.push(us(p.user));
        idem_user.push(us(i.user));
        ratios.push(p.wall.as_secs_f64() / i.wall.as_secs_f64());
    }
    println!(
        "append: interleaved, {ROUNDS} rounds of {BATCHES} pooled client batches: without producer id \
         {:.2} µs/batch (user {:.2} µs), idempotent {:.2} µs/batch (user {:.2} µs); \
         idempotent/plain rate ratio median {:.3}",
        median(&mut plain),
        median(&mut plain_user),
        median(&mut idem),
        median(&mut idem_user),
        median(&mut ratios),
    );
}

/// On a shared machine the two criterion runs above see different
/// background load. This alternates the two loops round by round and
/// prints the median of the per-round ratios, which such load hardly moves.
fn interleaved_ratio(root: &Path, buf: &mut [u8], plain: &[u8], sample: &mut u64) {
    const ROUNDS: usize = 25;
    const BATCHES: u64 = 4000;
    let mut log_us = Vec::with_capacity(ROUNDS);
    let mut write_us = Vec::with_capacity(ROUNDS);
    let mut ratios = Vec::with_capacity(ROUNDS);
    let mut cpu = [Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS)];
    let mut cpu_w = [Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS)];
    for round in 0..ROUNDS {
        *sample += 2;
        let (log, write) = if round % 2 == 0 {
            let l = time_log_appends(root, *sample, buf, BATCHES);
            (l, time_plain_writes(root, *sample + 1, plain, BATCHES))
        } else {
            let w = time_plain_writes(root, *sample + 1, plain, BATCHES);
            (time_log_appends(root, *sample, buf, BATCHES), w)
        };
        let us = |d: Duration| d.as_secs_f64() * 1e6 / BATCHES as f64;
        log_us.push(us(log.wall));
        write_us.push(us(write.wall));
        ratios.push(write.wall.as_secs_f64() / log.wall.as_secs_f64());
        cpu[0].push(us(log.user));
        cpu[1].push(us(log.sys));
        cpu_w[0].push(us(write.user));
        cpu_w[1].push(us(write.sys));
    }
    let gib_s = |us: f64| buf.len() as f64 / (us * 1e-6) / (1u64 << 30) as f64;
    let (l, w, r) = (
        median(&mut log_us),
        median(&mut write_us),
        median(&mut ratios),
    );
    println!(
        "append: interleaved, {ROUNDS} rounds of {BATCHES} batches: append_as_leader \
         {l:.2} µs/batch ({:.3} GiB/s), write(2) {w:.2} µs/batch ({:.3} GiB/s); \
         append/write rate ratio median {r:.3} (min {:.3}, max {:.3})",
        gib_s(l),
        gib_s(w),
        ratios[0],
        ratios[ROUNDS - 1],
    );
    // The kernel splits a thread's CPU time into user and system time from
    // tick samples: the sum is exact, the split an estimate.
    println!(
        "append: CPU time per batch (medians, getrusage): append_as_leader user {:.2} µs \
         + sys {:.2} µs; write(2) user {:.2} µs + sys {:.2} µs",
        median(&mut cpu[0]),
        median(&mut cpu[1]),
        median(&mut cpu_w[0]),
        median(&mut cpu_w[1]),
    );
}

/// Sorts `v` and returns its median.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

criterion_group!(benches, bench_append);
criterion_main!(benches);
