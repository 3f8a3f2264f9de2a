//! Disk full on append. With `RLIMIT_FSIZE` lowered (and `SIGXFSZ`
//! ignored), writes that would grow a file past the limit fail with `EFBIG`,
//! as they would on a full disk. This proves that the append hitting the
//! limit
//!
//! - fails with `StorageError::Io` naming the segment's `.log` file, and the
//!   partial write is cut off (the file holds only whole batches);
//! - takes the log offline: later appends and flushes fail with
//!   `StorageError::Offline`;
//! - leaves reads working, returning only complete batches with valid CRCs,
//!   up to the last acknowledged offset;
//!
//! and that reopening the folder (first while the disk is still full, then
//! after space is back) yields a valid log holding exactly the acknowledged
//! appends, which takes appends again.
//!
//! Resource limits are per process, so this file holds a single test.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_protocol::record::batch::validate_crc;
use sluice_protocol::record::codec::decode_batch;
use sluice_protocol::record::{BatchBuilder, BatchIter, Compression, Record};
use sluice_storage::{
    Log, LogConfig, LogOpenOptions, ReadLimit, StorageError, SystemClock, TopicPartition,
};

/// The largest file the process may write while the disk is "full".
const LIMIT: u64 = 256 * 1024;
const T0: i64 = 1_700_000_000_000;

/// Indexes far below the limit, so even a segment opened while the disk is
/// full can preallocate them; segments far above it, so the `.log` write
/// is what fails.
fn config() -> LogConfig {
    LogConfig {
        segment_index_bytes: 4096,
        index_interval_bytes: 1024,
        segment_ms: i64::MAX,
        ..LogConfig::default()
    }
}

fn open_log(dir: &Path) -> Log {
    Log::open(
        dir,
        TopicPartition::new("full", 0),
        config(),
        LogOpenOptions::default(),
        Arc::new(SystemClock),
    )
    .unwrap_or_else(|e| panic!("open {}: {e}", dir.display()))
}

fn value(offset: i64) -> Vec<u8> {
    format!("v{offset}-{}", "y".repeat(100 + (offset % 50) as usize)).into_bytes()
}

/// The batch appended when the log ends at `base`: its content follows from
/// the offsets.
fn build_batch(base: i64) -> Vec<u8> {
    let n = 1 + base % 17;
    let codec = Compression::ALL[(base % 5) as usize];
    let mut b = BatchBuilder::new(codec, T0 + base);
    for o in base..base + n {
        b.push(Record::new(
            Some(format!("k{o}").into_bytes()),
            Some(value(o)),
            T0 + o,
        ));
    }
    b.build(0).expect("build batch")
}

/// Sets the soft `RLIMIT_FSIZE`; returns the previous limits.
fn set_file_size_limit(soft: libc::rlim_t) -> libc::rlimit {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with valid pointers to rlimit structs.
    unsafe {
        assert_eq!(
            libc::getrlimit(libc::RLIMIT_FSIZE, &mut old),
            0,
            "getrlimit"
        );
        let new = libc::rlimit {
            rlim_cur: soft.min(old.rlim_max),
            rlim_max: old.rlim_max,
        };
        assert_eq!(
            libc::setrlimit(libc::RLIMIT_FSIZE, &new),
            0,
            "setrlimit: {}",
            std::io::Error::last_os_error()
        );
    }
    old
}

/// Restores the file size limit, also when the test fails.
struct LimitGuard(libc::rlim_t);

impl Drop for LimitGuard {
    fn drop(&mut self) {
        set_file_size_limit(self.0);
    }
}

/// Reads the whole log, checking every batch (CRC, contiguous offsets,
/// content); returns the offset after the last record read. Reads are not
/// capped by `max_bytes`, so each region must end on a batch boundary.
fn check_contents(log: &Log) -> i64 {
    let end = log.log_end_offset();
    let mut next = log.log_start_offset();
    while next < end {
        let info = log
            .read(next, 1 << 30, ReadLimit::LogEnd, true)
            .unwrap_or_else(|e| panic!("read at {next}: {e}"));
        let Some(region) = info.region else {
            panic!("nothing to read at {next} below log end {end}")
        };
        let bytes = region.read_to_vec().expect("read region");
        let mut it = BatchIter::new(&bytes);
        for b in it.by_ref() {
            let (_, h, raw) = b.unwrap_or_else(|e| panic!("batch header after {next}: {e}"));
            validate_crc(raw).unwrap_or_else(|e| panic!("batch at {}: {e}", h.base_offset));
            assert_eq!(h.base_offset, next, "offsets are contiguous");
            let d = decode_batch(raw, 16 << 20).unwrap_or_else(|e| panic!("decode {next}: {e}"));
            for r in &d.records {
                assert_eq!(r.record.value, Some(value(r.record.offset)));
            }
            next = h.last_offset() + 1;
        }
        assert_eq!(it.remainder(), 0, "the region holds whole batches only");
    }
    assert_eq!(next, end, "the last offset read is the log end - 1");
    next
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

#[test]
fn append_on_a_full_disk_fails_cleanly_and_recovers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("full-0");

    // SAFETY: ignoring SIGXFSZ (so writes past the limit fail with EFBIG
    // instead of killing the process) installs no handler code.
    let prev = unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    assert_ne!(prev, libc::SIG_ERR, "signal(SIGXFSZ)");
    let old = set_file_size_limit(LIMIT as libc::rlim_t);
    let guard = LimitGuard(old.rlim_cur);

    // Fill the disk.
    let log = open_log(&dir);
    let mut acked_end = 0i64;
    let err = loop {
        let base = log.log_end_offset();
        let mut batch = build_batch(base);
        match log.append_as_leader(&mut batch, 0) {
            Ok(info) => {
                assert_eq!(info.base_offset, acked_end);
                acked_end = info.last_offset + 1;
                assert!(
                    log.size_in_bytes() <= LIMIT,
                    "the limit holds: {}",
                    log.size_in_bytes()
                );
            }
            Err(e) => break e,
        }
    };
    assert!(acked_end > 0, "some appends fit below the limit");
    let active = log_files(&dir).pop().expect("a segment");
    match &err {
        StorageError::Io { path, source } => {
            assert_eq!(path, &active, "the error names the .log file");
            assert_eq!(source.raw_os_error(), Some(libc::EFBIG), "{source}");
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }
    assert!(
        err.to_string().contains(&*active.to_string_lossy()),
        "{err}"
    );

    // Offline: nothing more is taken, nothing moved.
    assert!(log.is_offline());
    assert_eq!(log.log_end_offset(), acked_end);
    let again = log.append_as_leader(&mut build_batch(acked_end), 0);
    assert!(
        matches!(again, Err(StorageError::Offline(_))),
        "append after the error: {again:?}"
    );
    assert!(
        matches!(log.flush(), Err(StorageError::Offline(_))),
        "flush while offline"
    );
    // The partial write was cut off: the file holds whole batches only.
    let file_len = std::fs::metadata(&active).expect("meta").len();
    assert_eq!(file_len, log.size_in_bytes(), "no torn batch on disk");
    // Reads still work and see exactly the acknowledged batches.
    assert_eq!(check_contents(&log), acked_end);
    log.close().expect("close of an offline log");
    drop(log);

    // A restart while the disk is still full: the log opens, holds every
    // acknowledged record, and refuses the append that does not fit.
    let log = open_log(&dir);
    assert_eq!(log.log_end_offset(), acked_end);
    assert_eq!(check_contents(&log), acked_end);
    // The very batch that failed (content follows from the offset).
    match log.append_as_leader(&mut build_batch(acked_end), 0) {
        Err(StorageError::Io { path, source }) => {
            assert_eq!(path, active);
            assert_eq!(source.raw_os_error(), Some(libc::EFBIG), "{source}");
        }
        other => panic!("expected EFBIG again, got {other:?}"),
    }
    assert!(log.is_offline());
    assert_eq!(log.log_end_offset(), acked_end);
    drop(log);

    // Space is back.
    drop(guard);
    let log = open_log(&dir);
    assert!(!log.is_offline());
    assert_eq!(
        log.log_end_offset(),
        acked_end,
        "exactly the acknowledged appends"
    );
    assert_eq!(check_contents(&log), acked_end);
    for _ in 0..20 {
        let base = log.log_end_offset();
        let info = log
            .append_as_leader(&mut build_batch(base), 1)
            .expect("append after space is back");
        assert_eq!(info.base_offset, base);
    }
    assert!(log.size_in_bytes() > LIMIT, "past the old limit now");
    let end = check_contents(&log);
    log.close().expect("close");
    drop(log);
    let log = open_log(&dir);
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(check_contents(&log), end);
    assert_eq!(log.leader_epochs(), vec![(0, 0), (1, acked_end)]);
    drop(log);

    roll_on_a_full_disk(&tmp.path().join("full-1"));
}

/// The disk fills up while a roll preallocates the new segment's index:
/// the append fails naming that file, the log goes offline without losing
/// anything, and a reopen continues in the new segment.
fn roll_on_a_full_disk(dir: &Path) {
    let log = open_log(dir);
    let mut end = 0;
    for _ in 0..10 {
        end = log
            .append_as_leader(&mut build_batch(end), 0)
            .expect("append")
            .last_offset
            + 1;
    }
    let guard = LimitGuard(set_file_size_limit(LIMIT as libc::rlim_t).rlim_cur);
    // The next append rolls, and the new index does not fit.
    log.set_config(LogConfig {
        segment_bytes: 1,
        segment_index_bytes: 2 * LIMIT,
        ..config()
    });
    let index = dir.join(format!("{end:020}.index"));
    match log.append_as_leader(&mut build_batch(end), 0) {
        Err(StorageError::Io { path, source }) => {
            assert_eq!(path, index, "the error names the new index");
            assert_eq!(source.raw_os_error(), Some(libc::EFBIG), "{source}");
        }
        other => panic!("expected EFBIG on roll, got {other:?}"),
    }
    assert!(log.is_offline());
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(check_contents(&log), end);
    assert!(matches!(
        log.append_as_leader(&mut build_batch(end), 0),
        Err(StorageError::Offline(_))
    ));
    drop(log);

    // Reopened (with the usual config, still under the limit): nothing lost,
    // and appends go on.
    let log = open_log(dir);
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(check_contents(&log), end);
    let info = log
        .append_as_leader(&mut build_batch(end), 0)
        .expect("append after reopen");
    assert_eq!(info.base_offset, end);
    assert_eq!(check_contents(&log), info.last_offset + 1);
    drop(log);
    drop(guard);
}
