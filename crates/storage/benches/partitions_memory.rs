//! Resident memory per open partition.
//!
//! Creates 10,000 partition folders in `$TMPDIR`, each with three small
//! batches (`Log::open`, appends, `close`), then starts itself again as a
//! fresh process that reopens all of them after a clean shutdown
//! (`LogOpenOptions { clean_shutdown: true, .. }`), keeps them in a `Vec`,
//! and prints `(VmRSS after - VmRSS before) / 10,000` from
//! `/proc/self/status`, with the anonymous/file split, page tables, mappings
//! and the machine's page cache growth. Target: at most 16 KiB per partition.
//!
//! The reopen is measured twice: with the partitions' files still in the
//! page cache (warm), and after dropping them from it with
//! `posix_fadvise(DONTNEED)` (cold, as after a reboot).
//!
//! Each open partition keeps its active segment's `.log` descriptor open, so
//! the soft `RLIMIT_NOFILE` is raised to the hard limit first.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use sluice_protocol::record::{BatchBuilder, Compression, Record};
use sluice_storage::{Clock, Log, LogConfig, LogOpenOptions, SystemClock, TopicPartition};

const PARTITIONS: i32 = 10_000;
const BATCHES: usize = 3;
const CHILD_ENV: &str = "SLUICE_PARTITIONS_MEMORY_DIR";
const NAME: &str = "partitions_memory";

/// Raises the soft open-file limit to the hard limit.
fn raise_nofile_limit() -> libc::rlim_t {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            panic!("getrlimit: {}", std::io::Error::last_os_error());
        }
        lim.rlim_cur = lim.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
            panic!("setrlimit: {}", std::io::Error::last_os_error());
        }
    }
    lim.rlim_cur
}

/// Selected `/proc/self/status` fields in KiB, plus the mapping count.
#[derive(Debug, Clone, Copy, Default)]
struct Mem {
    rss: u64,
    anon: u64,
    file: u64,
    pte: u64,
    maps: u64,
}

fn mem() -> Mem {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    let maps = std::fs::read_to_string("/proc/self/maps")
        .expect("read /proc/self/maps")
        .lines()
        .count() as u64;
    Mem {
        rss: field("VmRSS:"),
        anon: field("RssAnon:"),
        file: field("RssFile:"),
        pte: field("VmPTE:"),
        maps,
    }
}

fn partition_dir(root: &Path, p: i32) -> PathBuf {
    root.join(format!("topic-{p}"))
}

fn batch(now_ms: i64, n: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new(Compression::None, now_ms);
    for i in 0..5 {
        b.push(Record::new(
            Some(format!("key-{n}-{i}").into_bytes()),
            Some(vec![b'v'; 100]),
            now_ms,
        ));
    }
    b.build(0).expect("build batch")
}

/// Phase 1: 10,000 partitions with a few small batches, closed cleanly.
fn create(root: &Path) {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let now = clock.now_ms();
    let start = Instant::now();
    for p in 0..PARTITIONS {
        let log = Log::open(
            &partition_dir(root, p),
            TopicPartition::new("topic", p),
            LogConfig::default(),
            LogOpenOptions::default(),
            Arc::clone(&clock),
        )
        .expect("open new partition");
        for n in 0..BATCHES {
            log.append_as_leader(&mut batch(now, n), 0).expect("append");
        }
        log.close().expect("close");
    }
    println!(
        "{NAME}: created {PARTITIONS} partitions ({BATCHES} batches each) in {:.1} s",
        start.elapsed().as_secs_f64()
    );
}

/// Phase 2 (fresh process): reopen every partition and measure.
fn measure(root: &Path) {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let opts = LogOpenOptions {
        clean_shutdown: true,
        ..LogOpenOptions::default()
    };
    let mut logs = Vec::with_capacity(PARTITIONS as usize);
    let cached_before = page_cache_kib();
    let before = mem();
    let start = Instant::now();
    for p in 0..PARTITIONS {
        let log = Log::open(
            &partition_dir(root, p),
            TopicPartition::new("topic", p),
            LogConfig::default(),
            opts,
            Arc::clone(&clock),
        )
        .expect("reopen partition");
        assert_eq!(log.log_end_offset(), (BATCHES * 5) as i64);
        logs.push(log);
    }
    let took = start.elapsed();
    let after = mem();
    let cached_after = page_cache_kib();
    let n = u64::from(PARTITIONS.unsigned_abs());
    let per = |a: u64, b: u64| (a.saturating_sub(b)) as f64 * 1024.0 / n as f64;
    let fds = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0);
    println!(
        "{NAME}: reopened {PARTITIONS} partitions in {:.2} s; open fds {fds}",
        took.as_secs_f64()
    );
    println!(
        "{NAME}: VmRSS before {} KiB, after {} KiB",
        before.rss, after.rss
    );
    println!(
        "{NAME}: RSS per partition {:.0} bytes ({:.2} KiB): anon {:.0} B, file {:.0} B; \
         page tables {:.0} B; mappings {:.2}",
        per(after.rss, before.rss),
        per(after.rss, before.rss) / 1024.0,
        per(after.anon, before.anon),
        per(after.file, before.file),
        per(after.pte, before.pte),
        (after.maps - before.maps) as f64 / n as f64,
    );
    println!(
        "{NAME}: page cache (system-wide Cached, other processes included) grew by {} MiB",
        (cached_after - cached_before) / 1024
    );
    drop(logs);
}

/// `Cached:` of `/proc/meminfo` in KiB (the whole machine's page cache).
fn page_cache_kib() -> i64 {
    std::fs::read_to_string("/proc/meminfo")
        .expect("read /proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("Cached:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    // `cargo bench -- FILTER` passes the filter to every bench binary, as
    // it does criterion's options (numbers such as `--measurement-time 3`
    // are option values, not filters).
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-') && a.parse::<f64>().is_err())
        .collect();
    if !filters.is_empty() && !filters.iter().any(|f| NAME.contains(f.as_str())) {
        return;
    }
    let limit = raise_nofile_limit();
    assert!(
        limit > PARTITIONS as libc::rlim_t + 100,
        "{NAME} needs more than {PARTITIONS} open files; the hard limit is {limit}"
    );
    if let Some(root) = std::env::var_os(CHILD_ENV) {
        measure(Path::new(&root));
        return;
    }
    println!("{NAME}: open-file limit {limit}");
    let root = tempfile::tempdir().expect("tempdir");
    create(root.path());
    let exe = std::env::current_exe().expect("current exe");
    for cache in ["warm", "cold"] {
        if cache == "cold" {
            evict_from_page_cache(root.path());
        }
        println!("{NAME}: reopening with a {cache} page cache");
        let status = Command::new(&exe)
            .env(CHILD_ENV, root.path())
            .status()
            .expect("start measuring process");
        assert!(status.success(), "measuring process failed: {status}");
    }
}

/// Drops the partitions' (clean, fsynced) file pages from the page cache,
/// as after a reboot, with `posix_fadvise(POSIX_FADV_DONTNEED)`.
fn evict_from_page_cache(root: &Path) {
    use std::os::fd::AsRawFd;
    for dir in std::fs::read_dir(root).expect("read root") {
        let dir = dir.expect("dir entry").path();
        for file in std::fs::read_dir(&dir).expect("read partition") {
            let path = file.expect("file entry").path();
            let f = std::fs::File::open(&path).expect("open file");
            f.sync_all().expect("fsync");
            // SAFETY: a plain advice call on an open descriptor.
            let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            assert_eq!(rc, 0, "posix_fadvise {}", path.display());
        }
    }
}
