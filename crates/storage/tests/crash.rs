//! Crash test of the partition log: a child process appends batches in a
//! loop and is killed with SIGKILL at random moments, over and over on the
//! same folder. After every kill the parent reopens the log (full recovery
//! scan) and proves that
//!
//! - every record from offset 0 to the log end is exactly the deterministic
//!   content the child wrote for that offset (key, value, timestamp, header,
//!   batch size and compression codec, all derived from the offset), with
//!   contiguous offsets and valid CRCs;
//! - nothing acknowledged was lost: the log end is at least the end of the
//!   last append that returned to the child (a killed process leaves its
//!   writes in the page cache) and of the last flush it reported, and at
//!   most one more batch (the append in flight at the kill);
//! - the leader epoch cache matches the epochs stamped in the batches;
//! - the producer state matches the log: every batch is from one
//!   idempotent producer whose sequence is the batch's base offset, so
//!   after each reopen its last sequence is the log end minus one, a retry
//!   of the last batch is answered as a duplicate with its original
//!   offsets, and a gap is refused — and the next child, which appends
//!   the next sequence as a client, would fail if the state were wrong.
//!   Children also retry batches they just appended and check the answer.
//!
//! Opens pass what a LogManager would: the recovery point the last child
//! reported flushed (so producer state loads from a snapshot at or below it
//! and replays the tail), and after a clean close the clean-shutdown flag
//! (the snapshot at the log end is loaded, nothing replayed).
//!
//! Children of odd rounds preallocate their segments (`preallocate=true`),
//! so a kill leaves the active segment ending in zeros.
//!
//! In some rounds the parent also damages the tail of the last segment
//! (cut bytes off, append garbage or zeros, flip a byte in the last batch)
//! and checks that recovery cuts exactly the damaged batches away.
//!
//! The child is this test binary run again (`--exact crash_child`) with
//! `SLUICE_CRASH_DIR` and `SLUICE_CRASH_ROUND` set.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_protocol::record::batch::validate_crc;
use sluice_protocol::record::codec::decode_batch;
use sluice_protocol::record::codec::ProducerInfo;
use sluice_protocol::record::{BatchBuilder, BatchIter, Compression, Record};
use sluice_storage::{
    AppendOrigin, Log, LogConfig, LogOpenOptions, ProducerStateConfig, ReadLimit, StorageError,
    SystemClock, TopicPartition,
};

const DIR_ENV: &str = "SLUICE_CRASH_DIR";
const ROUND_ENV: &str = "SLUICE_CRASH_ROUND";
/// Recovery point and clean-shutdown flag the child opens with.
const RP_ENV: &str = "SLUICE_CRASH_RECOVERY_POINT";
const CLEAN_ENV: &str = "SLUICE_CRASH_CLEAN";
/// The one idempotent producer writing every batch (epoch 0; the base
/// sequence of a batch is its base offset).
const PRODUCER_ID: i64 = 7;
const CHILD_TEST: &str = "crash_child";
const ROUNDS: u64 = 80;
/// Timestamps are derived from offsets, starting here (CreateTime).
const T0: i64 = 1_700_000_000_000;
/// A child never runs longer than this, even if the parent died.
const CHILD_MAX_RUN: Duration = Duration::from_secs(30);

/// Small segments and indexes so the log rolls often and recovery walks
/// many segments. No rolls by time: the record timestamps lie in the past.
fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 32 * 1024,
        segment_ms: i64::MAX,
        index_interval_bytes: 512,
        segment_index_bytes: 4096,
        ..LogConfig::default()
    }
}

/// Where the previous session left the log, as a LogManager's
/// checkpoints and clean-shutdown marker would say.
#[derive(Debug, Clone, Copy, Default)]
struct Durable {
    recovery_point: i64,
    clean: bool,
}

impl Durable {
    fn options(self) -> LogOpenOptions {
        LogOpenOptions {
            recovery_point: self.recovery_point,
            clean_shutdown: self.clean,
            // Expiry compares the batches' timestamps with the clock (as
            // Kafka); these lie in 2023, so it is off here.
            producer_state: ProducerStateConfig {
                producer_id_expiration_ms: i64::MAX,
                ..ProducerStateConfig::default()
            },
            ..LogOpenOptions::default()
        }
    }
}

fn open_log(dir: &Path) -> Log {
    open_log_with(dir, config(), Durable::default())
}

fn open_log_with(dir: &Path, config: LogConfig, durable: Durable) -> Log {
    Log::open(
        dir,
        TopicPartition::new("crash", 0),
        config,
        durable.options(),
        Arc::new(SystemClock),
    )
    .unwrap_or_else(|e| panic!("open {}: {e}", dir.display()))
}

// ------------------------------------------------------------------ content

/// splitmix64: deterministic pseudo-random numbers without a dependency.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

fn mix(offset: i64) -> u64 {
    Rng::new(offset as u64 ^ 0x5eed_5eed).next_u64()
}

/// Records in the batch starting at `base` (1..=20).
fn batch_len(base: i64) -> i64 {
    1 + (mix(base) % 20) as i64
}

/// Codec of the batch starting at `base`.
fn batch_codec(base: i64) -> Compression {
    Compression::ALL[((mix(base) >> 8) % Compression::ALL.len() as u64) as usize]
}

fn key(offset: i64) -> Vec<u8> {
    format!("k{offset}").into_bytes()
}

fn value(offset: i64) -> Vec<u8> {
    let pad = (offset % 97) as usize;
    format!("v{offset}-{}", "x".repeat(pad)).into_bytes()
}

fn timestamp(offset: i64) -> i64 {
    T0 + offset
}

/// Every seventh record carries a header.
fn headers(offset: i64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    if offset % 7 == 0 {
        vec![(b"h".to_vec(), Some(format!("{offset}").into_bytes()))]
    } else {
        Vec::new()
    }
}

/// The batch the child appends when the log ends at `base`.
fn build_batch(base: i64) -> Vec<u8> {
    let producer = ProducerInfo {
        producer_id: PRODUCER_ID,
        producer_epoch: 0,
        base_sequence: i32::try_from(base).expect("sequence fits"),
    };
    let mut b = BatchBuilder::new(batch_codec(base), timestamp(base)).producer(producer, false);
    for offset in base..base + batch_len(base) {
        let mut r = Record::new(Some(key(offset)), Some(value(offset)), timestamp(offset));
        for (k, v) in headers(offset) {
            r = r.with_header(&k, v.as_deref());
        }
        b.push(r);
    }
    b.build(0).expect("build batch")
}

// -------------------------------------------------------------------- child

/// The child: appends forever (until killed). Reports `opened <end>` once,
/// `acked <end>` after every append and `flushed <end>` after every flush.
#[test]
#[ignore = "run by `crash_kill_and_recover` as a child process"]
fn crash_child() {
    let (Ok(dir), Ok(round)) = (std::env::var(DIR_ENV), std::env::var(ROUND_ENV)) else {
        return;
    };
    let round: i32 = round.parse().expect("round number");
    let durable = Durable {
        recovery_point: std::env::var(RP_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        clean: std::env::var(CLEAN_ENV).is_ok_and(|v| v == "1"),
    };
    let started = Instant::now();
    // Every other child preallocates its new segments (`preallocate`): the
    // kill then leaves a zero-filled tail that recovery must not take for
    // data.
    let log = open_log_with(
        Path::new(&dir),
        LogConfig {
            preallocate: round % 2 == 1,
            ..config()
        },
        durable,
    );
    let mut out = std::io::stdout().lock();
    let mut say = |what: &str, end: i64| {
        writeln!(out, "{what} {end}").expect("stdout");
        out.flush().expect("stdout flush");
    };
    say("opened", log.log_end_offset());
    let mut rng = Rng::new(round as u64);
    let flush_every = rng.range(1, 8);
    let retry_every = rng.range(2, 6);
    let mut appended = 0u64;
    while started.elapsed() < CHILD_MAX_RUN {
        let base = log.log_end_offset();
        let mut batch = build_batch(base);
        let info = log
            .append_as_leader_from(&mut batch, round, AppendOrigin::Client)
            .expect("append the next sequence");
        assert_eq!(info.base_offset, base);
        assert!(!info.duplicate);
        say("acked", info.last_offset + 1);
        appended += 1;
        if appended % retry_every == 0 {
            // A producer's retry of what it just sent: nothing appended.
            let again = log
                .append_as_leader_from(&mut build_batch(base), round, AppendOrigin::Client)
                .expect("retry");
            assert!(again.duplicate);
            assert_eq!(
                (again.base_offset, again.last_offset),
                (base, info.last_offset)
            );
            assert_eq!(log.log_end_offset(), info.last_offset + 1);
        }
        if appended % flush_every == 0 {
            log.flush().expect("flush");
            say("flushed", log.log_end_offset());
        }
    }
    panic!("child was not killed within {CHILD_MAX_RUN:?}");
}

// ------------------------------------------------------------------- parent

/// What a child reported before it died.
#[derive(Debug, Default, Clone, Copy)]
struct Reported {
    opened: Option<i64>,
    acked: Option<i64>,
    flushed: Option<i64>,
}

/// Kills the child if the parent panics before it does.
struct ChildGuard(Option<Child>);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One batch as found by the verifier.
#[derive(Debug, Clone, Copy)]
struct Found {
    base: i64,
    epoch: i32,
}

/// Decodes one batch starting at `base` and checks every record of it.
fn check_records(base: i64, raw: &[u8]) {
    let decoded = decode_batch(raw, 16 << 20).unwrap_or_else(|e| panic!("decode {base}: {e}"));
    assert_eq!(
        decoded.records.len() as i64,
        batch_len(base),
        "batch at {base}"
    );
    for (i, r) in decoded.records.iter().enumerate() {
        let r = &r.record;
        let o = base + i as i64;
        assert_eq!(r.offset, o);
        assert_eq!(r.key.as_deref(), Some(&key(o)[..]), "key at {o}");
        assert_eq!(r.value.as_deref(), Some(&value(o)[..]), "value at {o}");
        assert_eq!(r.timestamp, timestamp(o), "timestamp at {o}");
        let hs: Vec<(Vec<u8>, Option<Vec<u8>>)> = r
            .headers
            .iter()
            .map(|h| (h.key.clone(), h.value.clone()))
            .collect();
        assert_eq!(hs, headers(o), "headers at {o}");
    }
}

/// Base offset → CRC of the batches whose records were already checked.
type Known = HashMap<i64, u32>;

/// Reopens the log, checks every record against the deterministic content
/// (records of batches in `known` by their CRC), the leader epoch cache
/// and the producer state against the batches; returns the log end and the
/// batches in order. Closes the log cleanly when `close` is set, else drops
/// it as a crash would.
fn verify(dir: &Path, durable: Durable, close: bool, known: &mut Known) -> (i64, Vec<Found>) {
    let log = open_log_with(dir, config(), durable);
    assert_eq!(log.log_start_offset(), 0);
    let end = log.log_end_offset();
    let mut found = Vec::new();
    let mut next = 0i64;
    while next < end {
        let info = log
            .read(next, 256 * 1024, ReadLimit::LogEnd, true)
            .unwrap_or_else(|e| panic!("read at {next}: {e}"));
        let region = info
            .region
            .unwrap_or_else(|| panic!("nothing to read at {next} below log end {end}"));
        let bytes = region.read_to_vec().expect("read region");
        let mut progressed = false;
        for b in BatchIter::new(&bytes) {
            let (_, h, raw) = b.unwrap_or_else(|e| panic!("batch header after {next}: {e}"));
            validate_crc(raw).unwrap_or_else(|e| panic!("batch at {}: {e}", h.base_offset));
            assert_eq!(h.base_offset, next, "offsets are contiguous");
            assert_eq!(
                i64::from(h.records_count),
                batch_len(next),
                "batch at {next}"
            );
            assert_eq!(
                h.compression().expect("codec"),
                batch_codec(next),
                "batch at {next}"
            );
            // A batch decoded in an earlier round is known by its CRC: the
            // CRC just checked proves the bytes are still those.
            if known.get(&next) != Some(&h.crc) {
                check_records(next, raw);
                known.insert(next, h.crc);
            }
            found.push(Found {
                base: next,
                epoch: h.partition_leader_epoch,
            });
            next = h.last_offset() + 1;
            progressed = true;
        }
        assert!(progressed, "no whole batch in the region read at {next}");
    }
    assert_eq!(next, end, "batches end at the log end");
    // Epochs never go backwards; the cache names where each one starts.
    let mut epochs: Vec<(i32, i64)> = Vec::new();
    for f in &found {
        match epochs.last() {
            Some(&(e, _)) if e > f.epoch => panic!("epoch {} after {e} at {}", f.epoch, f.base),
            Some(&(e, _)) if e == f.epoch => {}
            _ => epochs.push((f.epoch, f.base)),
        }
    }
    assert_eq!(log.leader_epochs(), epochs, "leader epoch cache");
    check_producer_state(&log, &found);
    if close {
        log.close().expect("close");
    }
    (end, found)
}

/// Reopens whose producer state came from a snapshot (plus the tail), from
/// the log start, and the batches they replayed.
static FROM_SNAPSHOT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static FROM_LOG_START: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static REPLAYED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The producer state after a reopen is what the log says: the last
/// sequence is the log end minus one, the last batch's retry is a
/// duplicate with its offsets, a gap is refused; nothing is appended.
fn check_producer_state(log: &Log, found: &[Found]) {
    let end = log.log_end_offset();
    let load = log.producer_load();
    let counter = if load.snapshot.is_some() {
        &FROM_SNAPSHOT
    } else {
        &FROM_LOG_START
    };
    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    REPLAYED.fetch_add(load.replayed_batches, std::sync::atomic::Ordering::Relaxed);
    let Some(last) = found.last() else {
        assert_eq!(log.producer_id_count(), 0, "an empty log has no producers");
        return;
    };
    let state = log.producer_state(PRODUCER_ID).unwrap_or_else(|| {
        panic!(
            "producer unknown after reopen at log end {end} ({:?})",
            log.producer_load()
        )
    });
    assert_eq!(i64::from(state.last_seq()), end - 1, "last sequence");
    let info = log
        .append_as_leader_from(&mut build_batch(last.base), 0, AppendOrigin::Client)
        .expect("retry of the last batch");
    assert!(
        info.duplicate,
        "retry of the batch at {} appended",
        last.base
    );
    assert_eq!((info.base_offset, info.last_offset), (last.base, end - 1));
    match log.append_as_leader_from(&mut build_batch(end + 1), 0, AppendOrigin::Client) {
        Err(StorageError::OutOfOrderSequence(_)) => {}
        other => panic!("a sequence gap at {end}: {other:?}"),
    }
    assert_eq!(log.log_end_offset(), end, "checks appended nothing");
}

/// The binary children run: this test binary itself. A private copy of it
/// (beside it, so it may be executed) when possible, because a `cargo build`
/// running meanwhile in the same target folder may replace or briefly remove
/// the original; `/proc/self/exe` still reaches the running binary then.
fn child_exe() -> (PathBuf, Option<tempfile::TempDir>) {
    let exe = std::env::current_exe().expect("current exe");
    let copy = exe.parent().and_then(|parent| {
        let holder = tempfile::Builder::new()
            .prefix("crash-child-")
            .tempdir_in(parent)
            .ok()?;
        let to = holder.path().join("crash-child");
        std::fs::copy("/proc/self/exe", &to).ok()?;
        Some((to, holder))
    });
    match copy {
        Some((to, holder)) => (to, Some(holder)),
        None => (exe, None),
    }
}

fn spawn_child(exe: &Path, dir: &Path, round: u64, durable: Durable) -> Child {
    Command::new(exe)
        .args(["--exact", CHILD_TEST, "--ignored", "--nocapture"])
        .env(DIR_ENV, dir)
        .env(ROUND_ENV, round.to_string())
        .env(RP_ENV, durable.recovery_point.to_string())
        .env(CLEAN_ENV, if durable.clean { "1" } else { "0" })
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child")
}

/// Runs one child, kills it after a random delay and returns what it said.
fn run_child(exe: &Path, dir: &Path, round: u64, durable: Durable, rng: &mut Rng) -> Reported {
    let mut guard = ChildGuard(Some(spawn_child(exe, dir, round, durable)));
    let child = guard.0.as_mut().expect("child");
    let pid = libc::pid_t::try_from(child.id()).expect("pid");
    let stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let (opened_tx, opened_rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut rep = Reported::default();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let Some((what, n)) = line.split_once(' ') else {
                continue;
            };
            let Ok(n) = n.trim().parse::<i64>() else {
                continue;
            };
            match what {
                "opened" => {
                    rep.opened = Some(n);
                    let _ = opened_tx.send(());
                }
                "acked" => rep.acked = Some(n),
                "flushed" => rep.flushed = Some(n),
                _ => {}
            }
        }
        rep
    });
    let errs = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    // Mostly kill while appending, counting from the child's first report.
    let delay = if rng.range(0, 3) != 0 {
        let _ = opened_rx.recv_timeout(Duration::from_secs(20));
        rng.range(5, 150)
    } else {
        // Soon after the spawn: the kill may land in startup or recovery.
        rng.range(0, 20)
    };
    std::thread::sleep(Duration::from_millis(delay));
    // SAFETY: kill(2) on the PID of our own child, which has not been waited
    // for yet, so the PID cannot have been reused.
    let rc = unsafe { libc::kill(pid, libc::SIGKILL) };
    assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
    let mut child = guard.0.take().expect("child");
    let status = child.wait().expect("wait for child");
    let rep = reader.join().expect("stdout reader");
    let errs = errs.join().expect("stderr reader");
    use std::os::unix::process::ExitStatusExt;
    if status.signal() != Some(libc::SIGKILL) {
        panic!("round {round}: child ended by itself ({status}) before the kill:\n{errs}");
    }
    rep
}

/// The `.log` files of the folder, in offset order.
fn log_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("ls")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    v.sort();
    v
}

/// Damages the tail of the last non-empty segment; returns the log end
/// recovery must arrive at.
fn damage_tail(dir: &Path, end: i64, rng: &mut Rng) -> (i64, String) {
    let Some(path) = log_files(dir)
        .into_iter()
        .rev()
        .find(|p| std::fs::metadata(p).expect("meta").len() > 0)
    else {
        return (end, "nothing to damage".into());
    };
    let bytes = std::fs::read(&path).expect("read segment");
    // (position, size, base offset) of each batch of the file.
    let batches: Vec<(u64, u64, i64)> = BatchIter::new(&bytes)
        .map(|b| {
            let (pos, h, _) = b.expect("recovered segment is valid");
            (pos as u64, h.total_size() as u64, h.base_offset)
        })
        .collect();
    let len = bytes.len() as u64;
    let &(last_pos, last_size, last_base) = batches.last().expect("non-empty segment");
    assert_eq!(
        last_pos + last_size,
        len,
        "recovered segment ends on a batch"
    );
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open segment for damage");
    use std::os::unix::fs::FileExt;
    match rng.range(0, 3) {
        0 => {
            // Cut into the last few batches: the batch holding the cut and
            // everything after it go. At least a byte stays, so the torn
            // segment is noticed even when empty segments follow it.
            let cut = rng.range(1, (3 * last_size).min(len - 1));
            let keep = len - cut;
            f.set_len(keep).expect("truncate");
            let first_torn = batches
                .iter()
                .find(|&&(p, s, _)| p + s > keep)
                .expect("a torn batch");
            (
                first_torn.2,
                format!("cut {cut} bytes off {}", path.display()),
            )
        }
        1 => {
            let n = rng.range(1, 300) as usize;
            let garbage: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            f.write_all_at(&garbage, len).expect("append garbage");
            (
                end,
                format!("appended {n} garbage bytes to {}", path.display()),
            )
        }
        2 => {
            let n = rng.range(1, 8192) as usize;
            f.write_all_at(&vec![0u8; n], len).expect("append zeros");
            (
                end,
                format!("appended {n} zero bytes to {}", path.display()),
            )
        }
        _ => {
            // From the magic byte on: the CRC covers everything after it
            // (by design not base offset, length and leader epoch).
            let at = last_pos + rng.range(16, last_size - 1);
            let mut b = [0u8; 1];
            b[0] = bytes[at as usize] ^ (1 << rng.range(0, 7));
            f.write_all_at(&b, at).expect("flip a byte");
            (
                last_base,
                format!("flipped byte {at} of {}", path.display()),
            )
        }
    }
}

#[test]
fn crash_kill_and_recover() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("crash-0");
    let (exe, _exe_holder) = child_exe();
    let mut rng = Rng::new(0xc0ff_ee00);
    let mut known = Known::new();
    let mut end = 0i64;
    let mut durable = Durable::default();
    let (mut damaged, mut before_open, mut unreported) = (0, 0, 0);
    for round in 1..=ROUNDS {
        let rep = run_child(&exe, &dir, round, durable, &mut rng);
        // What the child leaves on disk for sure: its recovery point at
        // open (the log end after a clean shutdown), raised by its flushes.
        let opened_at = if durable.clean {
            end
        } else {
            durable.recovery_point
        };
        durable = Durable {
            recovery_point: rep.flushed.unwrap_or(0).max(opened_at),
            clean: false,
        };
        if !dir.exists() {
            // Killed before it even created the folder.
            before_open += 1;
            continue;
        }
        // The last round decodes every record again.
        if round == ROUNDS {
            known.clear();
        }
        let close = round % 2 == 0;
        let (new_end, found) = verify(&dir, durable, close, &mut known);
        assert!(
            new_end >= end,
            "round {round}: log end went back from {end} to {new_end}"
        );
        if let Some(opened) = rep.opened {
            assert_eq!(
                opened, end,
                "round {round}: the child opened what the parent left"
            );
        }
        let acked = rep.acked.or(rep.opened).unwrap_or(end);
        assert!(
            new_end >= acked,
            "round {round}: acknowledged appends up to {acked} lost, log end {new_end}"
        );
        if let Some(flushed) = rep.flushed {
            assert!(
                new_end >= flushed,
                "round {round}: flushed {flushed} > log end {new_end}"
            );
        }
        if rep.opened.is_some() {
            // At most the one append in flight went through unreported.
            let in_flight = acked + batch_len(acked);
            assert!(
                new_end == acked || new_end == in_flight,
                "round {round}: log end {new_end}, last ack {acked}"
            );
            if new_end == in_flight {
                unreported += 1;
            }
        } else {
            // Killed while opening: recovery alone adds nothing.
            assert_eq!(new_end, end, "round {round}: killed before appending");
            before_open += 1;
        }
        if let Some(f) = found.iter().find(|f| f.base >= end) {
            assert_eq!(f.epoch, round as i32, "round {round}: epoch of new batches");
        }
        end = new_end;
        if close {
            durable = Durable {
                recovery_point: end,
                clean: true,
            };
        }
        if round % 5 == 3 {
            let (expect, what) = damage_tail(&dir, end, &mut rng);
            // Damage may reach below the recovery point: scan everything.
            let (after, _) = verify(&dir, Durable::default(), false, &mut known);
            assert_eq!(after, expect, "round {round}: after damage ({what})");
            end = after;
            durable = Durable {
                recovery_point: durable.recovery_point.min(after),
                clean: false,
            };
            damaged += 1;
        }
    }
    assert!(end > 0, "the children appended something");
    use std::sync::atomic::Ordering::Relaxed;
    let (snap, start) = (FROM_SNAPSHOT.load(Relaxed), FROM_LOG_START.load(Relaxed));
    assert!(snap > 0, "some reopens loaded a producer snapshot");
    eprintln!(
        "crash test: {ROUNDS} rounds ({before_open} killed before appending, \
         {unreported} with an unreported append, {damaged} with a damaged tail), \
         final log end {end} in {} segments, {:?}; producer state from a snapshot \
         {snap} times, from the log start {start} times, {} batches replayed",
        log_files(&dir).len(),
        started.elapsed(),
        REPLAYED.load(Relaxed)
    );
}

/// A crash after an append reached the `.log` but before the leader epoch
/// checkpoint was rewritten leaves a checkpoint without the new epoch; the
/// recovery scan must put it back from the batches (as Kafka's does).
#[test]
fn recovery_restores_epochs_missing_from_the_checkpoint() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("epochs-0");
    let checkpoint = dir.join("leader-epoch-checkpoint");
    {
        let log = open_log(&dir);
        log.append_as_leader(&mut build_batch(0), 1)
            .expect("append");
        log.close().expect("close");
    }
    let before = std::fs::read(&checkpoint).expect("checkpoint");
    let second = {
        let log = open_log(&dir);
        let base = log.log_end_offset();
        log.append_as_leader(&mut build_batch(base), 2)
            .expect("append");
        log.flush().expect("flush");
        base
    };
    // The crash: the new epoch never made it into the checkpoint.
    std::fs::write(&checkpoint, before).expect("restore old checkpoint");
    let (end, _) = verify(&dir, Durable::default(), false, &mut Known::new());
    let log = open_log(&dir);
    assert_eq!(log.leader_epochs(), vec![(1, 0), (2, second)]);
    assert_eq!(log.end_offset_for_epoch(1), Some((1, second)));
    assert_eq!(log.end_offset_for_epoch(2), Some((2, end)));
}
