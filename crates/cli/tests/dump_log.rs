//! `sluice dump-log` on segments written by sluice-storage: batch and record
//! lines, index and time index dumps, torn tails and error exits.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use sluice_protocol::record::{BatchBuilder, Compression, Record};
use sluice_storage::{Log, LogConfig, LogOpenOptions, ManualClock, TopicPartition};

const T0: i64 = 1_700_000_000_000;
const SEGMENT: &str = "00000000000000000000";

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run sluice: {e}"))
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn path_str(p: &Path) -> &str {
    p.to_str()
        .unwrap_or_else(|| panic!("non-UTF-8 path {}", p.display()))
}

/// Writes one segment: a batch of 3 records per codec (offsets 0..15), the
/// first record of each batch with a header, and an index entry for every
/// batch after the first.
fn build_segment(dir: &Path) -> PathBuf {
    let config = LogConfig {
        index_interval_bytes: 0,
        ..LogConfig::default()
    };
    let log = Log::open(
        dir,
        TopicPartition::new("dump", 0),
        config,
        LogOpenOptions::default(),
        Arc::new(ManualClock::new(T0)),
    )
    .unwrap_or_else(|e| panic!("open log: {e}"));
    for (b, codec) in Compression::ALL.into_iter().enumerate() {
        let base_ts = T0 + 100 * b as i64;
        let mut builder = BatchBuilder::new(codec, base_ts);
        for i in 0..3 {
            let mut r = Record::new(
                Some(format!("k{b}-{i}").into_bytes()),
                Some(format!("{}-value-{i}", codec.name()).into_bytes()),
                base_ts + i,
            );
            if i == 0 {
                r = r.with_header(b"h1", Some(b"x")).with_header(b"h2", None);
            }
            builder.push(r);
        }
        let mut bytes = builder
            .build(0)
            .unwrap_or_else(|e| panic!("build {codec:?}: {e}"));
        log.append_as_leader(&mut bytes, 7)
            .unwrap_or_else(|e| panic!("append {codec:?}: {e}"));
    }
    // A record with neither key nor value.
    let mut builder = BatchBuilder::new(Compression::None, T0 + 1000);
    builder.push(Record::new(None, None, T0 + 1000));
    let mut bytes = builder
        .build(0)
        .unwrap_or_else(|e| panic!("build null batch: {e}"));
    log.append_as_leader(&mut bytes, 7)
        .unwrap_or_else(|e| panic!("append null batch: {e}"));
    log.close().unwrap_or_else(|e| panic!("close: {e}"));
    dir.to_path_buf()
}

fn seg(dir: &Path, suffix: &str) -> PathBuf {
    dir.join(format!("{SEGMENT}{suffix}"))
}

#[test]
fn shallow_log_dump_prints_one_line_per_batch() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let dir = build_segment(tmp.path());
    let log = seg(&dir, ".log");
    let o = sluice(&["dump-log", path_str(&log)]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], format!("Dumping {}", log.display()));
    assert_eq!(lines[1], "Log starting offset: 0");
    let batches: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("baseOffset:"))
        .collect();
    assert_eq!(batches.len(), 6, "{out}");
    assert!(
        batches[0].starts_with(
            "baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 lastSequence: -1 \
             producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 7 isTransactional: false \
             isControl: false deleteHorizonMs: OptionalLong.empty position: 0 \
             CreateTime: 1700000000002 size: "
        ),
        "{}",
        batches[0]
    );
    for (line, codec) in batches
        .iter()
        .zip(["none", "gzip", "snappy", "lz4", "zstd", "none"])
    {
        assert!(
            line.contains(&format!(" magic: 2 compresscodec: {codec} crc: ")),
            "{line}"
        );
        assert!(line.ends_with(" isvalid: true"), "{line}");
    }
    assert!(
        batches[4].starts_with("baseOffset: 12 lastOffset: 14 count: 3 "),
        "{}",
        batches[4]
    );
    assert!(
        batches[5].contains(" CreateTime: 1700000001000 "),
        "{}",
        batches[5]
    );
    // Positions add up to the file size.
    let size: u64 = batches
        .iter()
        .map(|l| field(l, "size:"))
        .sum::<i64>()
        .try_into()
        .unwrap_or(0);
    assert_eq!(size, std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0));
    assert!(!out.contains("| offset:"), "shallow by default: {out}");
    assert!(!out.contains("invalid bytes"), "{out}");
}

/// The number after `name` in a dump line.
fn field(line: &str, name: &str) -> i64 {
    let at = line
        .find(name)
        .unwrap_or_else(|| panic!("no {name} in {line}"));
    line[at + name.len()..]
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("bad {name} in {line}"))
}

#[test]
fn print_data_log_shows_every_record_in_every_codec() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let dir = build_segment(tmp.path());
    let log = seg(&dir, ".log");
    let o = sluice(&["dump-log", "--print-data-log", path_str(&log)]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    let records: Vec<&str> = out.lines().filter(|l| l.starts_with("| offset:")).collect();
    assert_eq!(records.len(), 16, "{out}");
    assert_eq!(
        records[0],
        "| offset: 0 CreateTime: 1700000000000 keySize: 4 valueSize: 12 sequence: -1 \
         headerKeys: [h1,h2] key: k0-0 payload: none-value-0"
    );
    assert_eq!(
        records[4],
        "| offset: 4 CreateTime: 1700000000101 keySize: 4 valueSize: 12 sequence: -1 \
         headerKeys: [] key: k1-1 payload: gzip-value-1"
    );
    for (i, codec) in ["none", "gzip", "snappy", "lz4", "zstd"].iter().enumerate() {
        for j in 0..3 {
            let want = format!(
                "| offset: {} CreateTime: {} ",
                3 * i + j,
                T0 + 100 * i as i64 + j as i64
            );
            let line = records[3 * i + j];
            assert!(line.starts_with(&want), "{line}");
            assert!(
                line.ends_with(&format!("key: k{i}-{j} payload: {codec}-value-{j}")),
                "{line}"
            );
        }
    }
    assert_eq!(
        records[15],
        "| offset: 15 CreateTime: 1700000001000 keySize: -1 valueSize: -1 sequence: -1 headerKeys: []"
    );
    assert!(
        stderr(&o).trim().is_empty(),
        "no gaps expected: {}",
        stderr(&o)
    );

    // --deep-iteration alone: metadata without contents.
    let o = sluice(&["dump-log", "--deep-iteration", path_str(&log)]);
    let out = stdout(&o);
    assert!(o.status.success());
    assert_eq!(
        out.lines().filter(|l| l.starts_with("| offset:")).count(),
        16
    );
    assert!(!out.contains("payload:"), "{out}");

    // --skip-record-metadata: contents only.
    let o = sluice(&[
        "dump-log",
        "--print-data-log",
        "--skip-record-metadata",
        path_str(&log),
    ]);
    let out = stdout(&o);
    assert!(o.status.success());
    assert!(
        out.contains("\n| key: k0-0 payload: none-value-0\n"),
        "{out}"
    );
    assert!(!out.contains("| offset:"), "{out}");
}

#[test]
fn index_and_time_index_dumps_match_the_log() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let dir = build_segment(tmp.path());
    let log_out = stdout(&sluice(&["dump-log", path_str(&seg(&dir, ".log"))]));
    let positions: Vec<i64> = log_out
        .lines()
        .filter(|l| l.starts_with("baseOffset:"))
        .map(|l| field(l, "position:"))
        .collect();

    let index = seg(&dir, ".index");
    let o = sluice(&["dump-log", path_str(&index)]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    assert!(
        stderr(&o).trim().is_empty(),
        "no mismatches: {}",
        stderr(&o)
    );
    let out = stdout(&o);
    let entries: Vec<&str> = out.lines().filter(|l| l.starts_with("offset:")).collect();
    // Every batch after the first is indexed, by its last offset.
    let want: Vec<String> = [5, 8, 11, 14, 15]
        .iter()
        .zip(&positions[1..])
        .map(|(o, p)| format!("offset: {o} position: {p}"))
        .collect();
    assert_eq!(entries, want, "{out}");

    let time_index = seg(&dir, ".timeindex");
    let o = sluice(&["dump-log", path_str(&time_index)]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    assert!(
        stderr(&o).trim().is_empty(),
        "no mismatches: {}",
        stderr(&o)
    );
    let out = stdout(&o);
    let entries: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("timestamp:"))
        .collect();
    assert!(!entries.is_empty(), "{out}");
    assert!(
        entries.contains(&"timestamp: 1700000000102 offset: 5"),
        "{out}"
    );
    assert_eq!(
        entries.last().copied(),
        Some("timestamp: 1700000001000 offset: 15"),
        "{out}"
    );

    // Several files at once, sanity check and verify-only modes.
    let o = sluice(&[
        "dump-log",
        "--index-sanity-check",
        path_str(&index),
        path_str(&time_index),
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains(&format!("{} passed sanity check.", index.display())),
        "{out}"
    );
    assert!(
        out.contains(&format!("{} passed sanity check.", time_index.display())),
        "{out}"
    );
    let o = sluice(&["dump-log", "--verify-index-only", path_str(&index)]);
    assert!(o.status.success());
    assert!(!stdout(&o).contains("offset:"), "{}", stdout(&o));

    // Kafka's comma-separated --files works too.
    let files = format!("{},{}", path_str(&index), path_str(&time_index));
    let o = sluice(&["dump-log", "--files", &files]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o).matches("Dumping ").count(), 2);
}

#[test]
fn index_mismatches_are_reported() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let dir = build_segment(tmp.path());
    let index = seg(&dir, ".index");
    let mut bytes = std::fs::read(&index).unwrap_or_default();
    // Entry 0 claims offset 6 instead of 5.
    bytes[0..4].copy_from_slice(&6u32.to_be_bytes());
    std::fs::write(&index, &bytes).unwrap_or_else(|e| panic!("write: {e}"));
    let o = sluice(&["dump-log", "--verify-index-only", path_str(&index)]);
    assert!(o.status.success());
    let err = stderr(&o);
    assert!(err.contains("Mismatches in :"), "{err}");
    assert!(err.contains("  Index offset: 6, log offset: 5"), "{err}");
}

#[test]
fn torn_tail_is_reported_not_fatal() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let dir = build_segment(tmp.path());
    let log = seg(&dir, ".log");
    let mut bytes = std::fs::read(&log).unwrap_or_default();
    let whole = bytes.clone();
    // Half of a copy of the first batch.
    let first = i32::from_be_bytes([whole[8], whole[9], whole[10], whole[11]]) as usize + 12;
    bytes.extend_from_slice(&whole[..first / 2]);
    std::fs::write(&log, &bytes).unwrap_or_else(|e| panic!("write: {e}"));
    let o = sluice(&["dump-log", "--print-data-log", path_str(&log)]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(
        out.lines().filter(|l| l.starts_with("baseOffset:")).count(),
        6
    );
    assert!(
        out.contains(&format!(
            "Found {} invalid bytes at the end of {SEGMENT}.log",
            first / 2
        )),
        "{out}"
    );

    // --max-bytes stops early without the trailing-bytes report.
    let o = sluice(&[
        "dump-log",
        "--max-bytes",
        &first.to_string(),
        path_str(&log),
    ]);
    assert!(o.status.success());
    let out = stdout(&o);
    assert_eq!(
        out.lines().filter(|l| l.starts_with("baseOffset:")).count(),
        1,
        "{out}"
    );
    assert!(!out.contains("invalid bytes"), "{out}");
}

#[test]
fn corrupt_crc_is_shown_as_invalid() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let dir = build_segment(tmp.path());
    let log = seg(&dir, ".log");
    let mut bytes = std::fs::read(&log).unwrap_or_default();
    // Flip a byte of the first record's value (batch 0 is uncompressed).
    let last = bytes.len();
    let first = i32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize + 12;
    assert!(first < last);
    bytes[first - 3] ^= 0x01;
    std::fs::write(&log, &bytes).unwrap_or_else(|e| panic!("write: {e}"));
    let o = sluice(&["dump-log", path_str(&log)]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    let batches: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("baseOffset:"))
        .collect();
    assert!(batches[0].ends_with("isvalid: false"), "{}", batches[0]);
    assert!(batches[1].ends_with("isvalid: true"), "{}", batches[1]);
}

#[test]
fn bad_input_fails_with_one_line_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let dir = tmp.path();

    let missing = dir.join(format!("{SEGMENT}.log"));
    let o = sluice(&["dump-log", path_str(&missing)]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(path_str(&missing)), "{err}");

    let wrong = dir.join(format!("{SEGMENT}.txt"));
    std::fs::write(&wrong, b"hello").unwrap_or_else(|e| panic!("write: {e}"));
    let o = sluice(&["dump-log", path_str(&wrong)]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(path_str(&wrong)) && err.contains("unknown file type"),
        "{err}"
    );

    let garbage = dir.join(format!("{SEGMENT}.log"));
    std::fs::write(&garbage, vec![0xA5u8; 500]).unwrap_or_else(|e| panic!("write: {e}"));
    let o = sluice(&["dump-log", path_str(&garbage)]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(path_str(&garbage)) && err.contains("corrupt"),
        "{err}"
    );

    let bad_index = dir.join(format!("{SEGMENT}.index"));
    std::fs::write(&bad_index, [1u8, 2, 3]).unwrap_or_else(|e| panic!("write: {e}"));
    let o = sluice(&["dump-log", path_str(&bad_index)]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains(path_str(&bad_index)) && err.contains("corrupt"),
        "{err}"
    );

    let no_base = dir.join("segment.log");
    std::fs::write(&no_base, b"").unwrap_or_else(|e| panic!("write: {e}"));
    let o = sluice(&["dump-log", path_str(&no_base)]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("base offset"), "{}", stderr(&o));

    // No file at all, and an unknown flag.
    assert!(!sluice(&["dump-log"]).status.success());
    assert!(!sluice(&["dump-log", "--no-such-flag", path_str(&garbage)])
        .status
        .success());
}

#[test]
fn help_describes_the_flags() {
    let o = sluice(&["dump-log", "--help"]);
    assert!(o.status.success());
    let out = stdout(&o);
    for flag in [
        "--print-data-log",
        "--deep-iteration",
        "--index-sanity-check",
        "--verify-index-only",
        "--max-bytes",
    ] {
        assert!(out.contains(flag), "{flag} missing from {out}");
    }
    assert!(stdout(&sluice(&["--help"])).contains("dump-log"));
}
