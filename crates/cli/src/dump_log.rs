//! `sluice dump-log FILE...`: prints the contents of segment files the way
//! Kafka's `kafka-dump-log.sh` does, for debugging a log on disk.
//!
//! This module owns the subcommand's flags and everything it prints:
//! - `.log`: one line per record batch (`baseOffset: … crc: … isvalid: …`),
//!   with `--deep-iteration` one `| offset: …` line per record, and with
//!   `--print-data-log` the keys and values as text; a torn tail is reported
//!   as `Found N invalid bytes at the end of FILE`;
//! - `.index`: `offset: N position: N`, checked against the `.log` beside it;
//! - `.timeindex`: `timestamp: N offset: N`, checked against the `.log`;
//! - `.txnindex`: one line per aborted transaction (`version: … producerId:
//!   … firstOffset: … lastOffset: … lastStableOffset: …`, Kafka's
//!   `dumpTxnIndex`; 34-byte entries, a torn tail is ignored as Kafka does).
//!
//! Index files are decoded here (the storage crate keeps its index types
//! private): `.index` entries are 8 bytes (relative offset u32, position u32),
//! `.timeindex` entries 12 bytes (timestamp i64, relative offset u32), all
//! big-endian, relative to the base offset in the 20-digit file name.
//!
//! Mismatches found while verifying indexes go to stderr and, as in Kafka, do
//! not change the exit status; unreadable, unknown or corrupt files do.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use sluice_protocol::error::ProtocolError;
use sluice_protocol::record::batch::{compute_crc, BatchHeader, BatchIter, HEADER_LEN};
use sluice_protocol::record::codec::{decode_batch, DecodedBatch};
use sluice_protocol::record::TimestampType;
use sluice_storage::segment::{INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use sluice_storage::txn_index::{ENTRY_SIZE as TXN_ENTRY, TXN_INDEX_SUFFIX};

/// Kafka's default `--max-bytes` (Integer.MAX_VALUE): read the whole file.
const DEFAULT_MAX_BYTES: u64 = i32::MAX as u64;
/// Upper bound on a batch's decompressed records.
const DECOMPRESS_LIMIT: usize = 1 << 30;
const OFFSET_ENTRY: usize = 8;
const TIME_ENTRY: usize = 12;

/// Flags of `sluice dump-log`, named as in `kafka-dump-log.sh`.
#[derive(Debug, clap::Args)]
pub struct DumpLogArgs {
    /// Segment files to dump: `.log`, `.index`, `.timeindex` or `.txnindex`.
    #[arg(value_name = "FILE", required_unless_present = "files_list")]
    pub files: Vec<PathBuf>,
    /// Comma-separated files, as kafka-dump-log.sh takes them.
    #[arg(
        long = "files",
        id = "files_list",
        value_name = "FILE,...",
        value_delimiter = ','
    )]
    pub files_list: Vec<PathBuf>,
    /// Print record keys and values (as UTF-8 text); implies --deep-iteration.
    #[arg(long)]
    pub print_data_log: bool,
    /// Print every record inside each batch, not only the batches.
    #[arg(long)]
    pub deep_iteration: bool,
    /// With --print-data-log, print only keys and values, not record metadata
    /// (control records are skipped).
    #[arg(long)]
    pub skip_record_metadata: bool,
    /// Only check that index files are sane (the check run at broker startup).
    #[arg(long)]
    pub index_sanity_check: bool,
    /// Only verify index entries against the log, without printing them.
    #[arg(long)]
    pub verify_index_only: bool,
    /// Read at most this many bytes of each `.log` file.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_BYTES)]
    pub max_bytes: u64,
    /// Size of the largest batch, when verifying index entries.
    #[arg(long, value_name = "BYTES", default_value_t = 5 * 1024 * 1024)]
    pub max_message_size: usize,
}

/// What a `.log` dump prints, derived from the flags.
#[derive(Debug, Clone, Copy)]
struct LogOpts {
    deep: bool,
    print_data: bool,
    skip_metadata: bool,
    max_bytes: u64,
}

/// Runs the subcommand, printing to stdout and stderr. Stops at the first
/// file that cannot be dumped; the error names it.
pub fn run(args: &DumpLogArgs) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let stderr = std::io::stderr();
    let mut err = stderr.lock();
    let result = run_to(args, &mut out, &mut err);
    let flushed = out.flush().context("cannot write to stdout");
    result.and(flushed)
}

fn run_to(args: &DumpLogArgs, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<()> {
    let opts = LogOpts {
        deep: args.deep_iteration || args.print_data_log,
        print_data: args.print_data_log,
        skip_metadata: args.skip_record_metadata,
        max_bytes: args.max_bytes,
    };
    for path in args.files.iter().chain(&args.files_list) {
        let kind = FileKind::of(path)?;
        let base = base_offset(path)?;
        if !path.is_file() {
            // Say "not found" before "Dumping", so the error is the last line.
            std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
            bail!("{}: not a regular file", path.display());
        }
        writeln!(out, "Dumping {}", path.display())?;
        match kind {
            FileKind::Log => dump_log(path, base, opts, out, err)?,
            FileKind::Index => dump_index(path, base, args, out, err)?,
            FileKind::TimeIndex => dump_time_index(path, base, args, out, err)?,
            FileKind::TxnIndex => dump_txn_index(path, out)?,
        }
        out.flush()?;
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileKind {
    Log,
    Index,
    TimeIndex,
    TxnIndex,
}

impl FileKind {
    /// Picks the decoder by the suffix after the last dot, as Kafka does.
    fn of(path: &Path) -> anyhow::Result<Self> {
        let name = file_name(path);
        let suffix = name.rfind('.').map(|at| &name[at..]).unwrap_or("");
        match suffix {
            s if s == LOG_SUFFIX => Ok(Self::Log),
            s if s == INDEX_SUFFIX => Ok(Self::Index),
            s if s == TIME_INDEX_SUFFIX => Ok(Self::TimeIndex),
            s if s == TXN_INDEX_SUFFIX => Ok(Self::TxnIndex),
            _ => bail!(
                "{}: unknown file type (expected a .log, .index, .timeindex or .txnindex file)",
                path.display()
            ),
        }
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The base offset from the file name (`00000000000000000042.log` → 42).
fn base_offset(path: &Path) -> anyhow::Result<i64> {
    let name = file_name(path);
    let stem = name.split('.').next().unwrap_or("");
    stem.parse::<i64>().map_err(|_| {
        anyhow!(
            "{}: file name does not start with a base offset (like 00000000000000000000.log)",
            path.display()
        )
    })
}

fn read_file(path: &Path, limit: u64) -> anyhow::Result<Vec<u8>> {
    let file = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    let mut buf = Vec::new();
    file.take(limit)
        .read_to_end(&mut buf)
        .with_context(|| format!("{}: read failed", path.display()))?;
    Ok(buf)
}

// ---------------------------------------------------------------- .log

fn timestamp_type_name(t: TimestampType) -> &'static str {
    match t {
        TimestampType::CreateTime => "CreateTime",
        TimestampType::LogAppendTime => "LogAppendTime",
    }
}

/// Kafka's `DefaultRecordBatch.incrementSequence`: wraps at `i32::MAX` to 0.
fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

fn sequence_at(h: &BatchHeader, delta: i32) -> i32 {
    if h.base_sequence < 0 {
        -1
    } else {
        increment_sequence(h.base_sequence, delta)
    }
}

fn print_batch(
    out: &mut dyn Write,
    pos: usize,
    h: &BatchHeader,
    bytes: &[u8],
) -> std::io::Result<()> {
    let horizon = if h.has_delete_horizon() {
        format!("OptionalLong[{}]", h.base_timestamp)
    } else {
        "OptionalLong.empty".to_string()
    };
    let codec = match h.compression() {
        Ok(c) => c.name().to_string(),
        Err(_) => format!("unknown({})", h.attributes & 0x07),
    };
    writeln!(
        out,
        "baseOffset: {} lastOffset: {} count: {} baseSequence: {} lastSequence: {} \
         producerId: {} producerEpoch: {} partitionLeaderEpoch: {} isTransactional: {} \
         isControl: {} deleteHorizonMs: {horizon} position: {pos} {}: {} size: {} magic: {} \
         compresscodec: {codec} crc: {} isvalid: {}",
        h.base_offset,
        h.last_offset(),
        h.records_count,
        h.base_sequence,
        sequence_at(h, h.last_offset_delta),
        h.producer_id,
        h.producer_epoch,
        h.partition_leader_epoch,
        h.is_transactional(),
        h.is_control(),
        timestamp_type_name(h.timestamp_type()),
        h.max_timestamp,
        h.total_size(),
        h.magic,
        h.crc,
        compute_crc(bytes) == h.crc,
    )
}

/// ` endTxnMarker: COMMIT coordinatorEpoch: 3` for a transaction marker,
/// ` controlType: UNKNOWN(n)` for anything else.
fn control_description(key: Option<&[u8]>, value: Option<&[u8]>) -> String {
    let kind = key
        .filter(|k| k.len() >= 4)
        .map(|k| i16::from_be_bytes([k[2], k[3]]));
    let epoch = value
        .filter(|v| v.len() >= 6)
        .map(|v| i32::from_be_bytes([v[2], v[3], v[4], v[5]]));
    match (kind, epoch) {
        (Some(0), Some(e)) => format!(" endTxnMarker: ABORT coordinatorEpoch: {e}"),
        (Some(1), Some(e)) => format!(" endTxnMarker: COMMIT coordinatorEpoch: {e}"),
        (Some(t), _) => format!(" controlType: UNKNOWN({t})"),
        (None, _) => " controlType: UNKNOWN(-1)".to_string(),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn print_records(
    out: &mut dyn Write,
    decoded: &DecodedBatch,
    opts: LogOpts,
    last_offset: &mut i64,
    gaps: &mut Vec<(i64, i64)>,
) -> std::io::Result<()> {
    let h = &decoded.header;
    let ts_type = timestamp_type_name(h.timestamp_type());
    for d in &decoded.records {
        let r = &d.record;
        if r.offset != *last_offset + 1 {
            gaps.push((*last_offset, r.offset));
        }
        *last_offset = r.offset;
        if opts.skip_metadata && h.is_control() {
            continue;
        }
        if !opts.skip_metadata {
            let keys: Vec<String> = r.headers.iter().map(|hd| text(&hd.key)).collect();
            write!(
                out,
                "| offset: {} {ts_type}: {} keySize: {} valueSize: {} sequence: {} headerKeys: [{}]",
                r.offset,
                r.timestamp,
                r.key.as_ref().map_or(-1, |k| k.len() as i64),
                r.value.as_ref().map_or(-1, |v| v.len() as i64),
                sequence_at(h, (r.offset - h.base_offset) as i32),
                keys.join(","),
            )?;
            if h.is_control() {
                let desc = control_description(r.key.as_deref(), r.value.as_deref());
                write!(out, "{desc}")?;
            }
        }
        if opts.print_data && !h.is_control() {
            let mut prefix = if opts.skip_metadata { "| " } else { " " };
            if let Some(k) = &r.key {
                write!(out, "{prefix}key: {}", text(k))?;
                prefix = " ";
            }
            if let Some(v) = &r.value {
                write!(out, "{prefix}payload: {}", text(v))?;
            }
        }
        writeln!(out)?;
    }
    Ok(())
}

/// Whether the bytes after the last whole batch look like a torn write (a
/// batch cut short, or zeros) rather than something that is not a batch.
fn is_torn_tail(rest: &[u8]) -> bool {
    if rest.iter().all(|&b| b == 0) {
        return true;
    }
    match BatchHeader::parse(rest) {
        Ok(h) => h.total_size() > rest.len(),
        Err(ProtocolError::Truncated { .. }) => true,
        Err(_) => false,
    }
}

fn dump_log(
    path: &Path,
    base: i64,
    opts: LogOpts,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<()> {
    writeln!(out, "Log starting offset: {base}")?;
    let buf = read_file(path, opts.max_bytes)?;
    let mut iter = BatchIter::new(&buf);
    let mut last_offset = base - 1;
    let mut gaps = Vec::new();
    let mut outcome = Ok(());
    for item in iter.by_ref() {
        let (pos, header, bytes) = match item {
            Ok(b) => b,
            Err(e) => {
                outcome = Err(e);
                break;
            }
        };
        print_batch(out, pos, &header, bytes)?;
        if opts.deep {
            let decoded = decode_batch(bytes, DECOMPRESS_LIMIT).map_err(|e| {
                anyhow!(
                    "{}: cannot decode the records of the batch at position {pos}: {e}",
                    path.display()
                )
            })?;
            print_records(out, &decoded, opts, &mut last_offset, &mut gaps)?;
        }
    }
    let valid = iter.position();
    let rest = &buf[valid..];
    if let Err(e) = outcome {
        if !is_torn_tail(rest) {
            out.flush()?;
            bail!("{}: corrupt batch at position {valid}: {e}", path.display());
        }
    } else if !rest.is_empty() && opts.max_bytes == DEFAULT_MAX_BYTES && !is_torn_tail(rest) {
        out.flush()?;
        let e = BatchHeader::parse(rest)
            .err()
            .map_or_else(String::new, |e| format!(": {e}"));
        bail!("{}: corrupt batch at position {valid}{e}", path.display());
    }
    if !rest.is_empty() && opts.max_bytes == DEFAULT_MAX_BYTES {
        writeln!(
            out,
            "Found {} invalid bytes at the end of {}",
            rest.len(),
            file_name(path)
        )?;
    }
    if !gaps.is_empty() {
        out.flush()?;
        writeln!(err, "Non-consecutive offsets in {}", path.display())?;
        for (a, b) in gaps {
            writeln!(err, "  {a} is followed by {b}")?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- indexes

/// The batches of the `.log` beside an index file, by position.
#[derive(Debug)]
struct LogView {
    bytes: Vec<u8>,
    batches: Vec<(usize, BatchHeader)>,
}

impl LogView {
    /// Reads `<stem>.log` next to `index`; `None` if there is none.
    fn beside(index: &Path) -> anyhow::Result<Option<Self>> {
        let name = file_name(index);
        let stem = name.split('.').next().unwrap_or("");
        let log = index.with_file_name(format!("{stem}{LOG_SUFFIX}"));
        if !log.is_file() {
            return Ok(None);
        }
        let bytes = read_file(&log, u64::MAX)?;
        let batches = BatchIter::new(&bytes)
            .map_while(|b| b.ok())
            .map(|(pos, h, _)| (pos, h))
            .collect();
        Ok(Some(Self { bytes, batches }))
    }

    /// The header of the batch starting exactly at `position`.
    fn batch_at(&self, position: usize) -> Option<&BatchHeader> {
        let i = self.batches.binary_search_by_key(&position, |b| b.0).ok()?;
        Some(&self.batches[i].1)
    }

    /// The first batch whose last offset is at least `offset`.
    fn batch_containing(&self, offset: i64) -> Option<(usize, &BatchHeader)> {
        let i = self.batches.partition_point(|b| b.1.last_offset() < offset);
        self.batches.get(i).map(|(p, h)| (*p, h))
    }

    /// The largest record timestamp of the batch at `position`.
    fn max_record_timestamp(&self, position: usize, h: &BatchHeader) -> i64 {
        let bytes = &self.bytes[position..position + h.total_size()];
        match decode_batch(bytes, DECOMPRESS_LIMIT) {
            Ok(d) => d
                .records
                .iter()
                .map(|r| r.record.timestamp)
                .max()
                .unwrap_or(-1),
            Err(_) => h.max_timestamp,
        }
    }
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be_i64(b: &[u8]) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    i64::from_be_bytes(a)
}

/// Entries up to the first zero entry after the first (the unused part of a
/// preallocated index file), as Kafka's dump stops there.
fn live_entries(rel_offsets: impl Iterator<Item = u32>) -> usize {
    let mut n = 0;
    for (i, rel) in rel_offsets.enumerate() {
        if rel == 0 && i > 0 {
            break;
        }
        n += 1;
    }
    n
}

fn dump_index(
    path: &Path,
    base: i64,
    args: &DumpLogArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<()> {
    let buf = read_file(path, u64::MAX)?;
    let entries: Vec<(i64, u32)> = buf
        .chunks_exact(OFFSET_ENTRY)
        .map(|e| (base + i64::from(be_u32(&e[0..4])), be_u32(&e[4..8])))
        .collect();
    if entries.is_empty() {
        if !buf.is_empty() {
            bail!(
                "{}: corrupt index: {} bytes is not a whole number of {OFFSET_ENTRY}-byte entries",
                path.display(),
                buf.len()
            );
        }
        writeln!(out, "{} is empty.", path.display())?;
        return Ok(());
    }
    let live = live_entries(entries.iter().map(|e| (e.0 - base) as u32));
    if args.index_sanity_check {
        if buf.len() % OFFSET_ENTRY != 0 {
            bail!(
                "{}: index sanity check failed: {} bytes is not a whole number of \
                 {OFFSET_ENTRY}-byte entries",
                path.display(),
                buf.len()
            );
        }
        for w in entries[..live].windows(2) {
            if w[1].0 <= w[0].0 || w[1].1 <= w[0].1 {
                bail!(
                    "{}: index sanity check failed: entry (offset {}, position {}) follows \
                     (offset {}, position {})",
                    path.display(),
                    w[1].0,
                    w[1].1,
                    w[0].0,
                    w[0].1
                );
            }
        }
        writeln!(out, "{} passed sanity check.", path.display())?;
        return Ok(());
    }
    let log = LogView::beside(path)?;
    let mut mismatches = BTreeMap::new();
    for &(offset, position) in &entries[..live] {
        if let Some(log) = &log {
            let found = log
                .batch_at(position as usize)
                .filter(|h| h.total_size() <= args.max_message_size.max(HEADER_LEN))
                .map_or(-1, |h| h.last_offset());
            if found != offset {
                mismatches.insert(offset, found);
            }
        }
        if !args.verify_index_only {
            writeln!(out, "offset: {offset} position: {position}")?;
        }
    }
    if !mismatches.is_empty() {
        out.flush()?;
        writeln!(err, "Mismatches in :{}", path.display())?;
        for (index_offset, log_offset) in mismatches.iter().rev() {
            writeln!(
                err,
                "  Index offset: {index_offset}, log offset: {log_offset}"
            )?;
        }
    }
    Ok(())
}

/// Kafka's `dumpTxnIndex`: every whole 34-byte entry of the file.
fn dump_txn_index(path: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    let buf = read_file(path, u64::MAX)?;
    for e in buf.chunks_exact(TXN_ENTRY) {
        writeln!(
            out,
            "version: {} producerId: {} firstOffset: {} lastOffset: {} lastStableOffset: {}",
            i16::from_be_bytes([e[0], e[1]]),
            be_i64(&e[2..10]),
            be_i64(&e[10..18]),
            be_i64(&e[18..26]),
            be_i64(&e[26..34])
        )?;
    }
    Ok(())
}

fn dump_time_index(
    path: &Path,
    base: i64,
    args: &DumpLogArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<()> {
    let buf = read_file(path, u64::MAX)?;
    let entries: Vec<(i64, i64)> = buf
        .chunks_exact(TIME_ENTRY)
        .map(|e| (be_i64(&e[0..8]), base + i64::from(be_u32(&e[8..12]))))
        .collect();
    let live = live_entries(entries.iter().map(|e| (e.1 - base) as u32));
    if args.index_sanity_check {
        if buf.len() % TIME_ENTRY != 0 {
            bail!(
                "{}: time index sanity check failed: {} bytes is not a whole number of \
                 {TIME_ENTRY}-byte entries",
                path.display(),
                buf.len()
            );
        }
        for w in entries[..live].windows(2) {
            if w[1].0 < w[0].0 || w[1].1 < w[0].1 {
                bail!(
                    "{}: time index sanity check failed: entry (timestamp {}, offset {}) \
                     follows (timestamp {}, offset {})",
                    path.display(),
                    w[1].0,
                    w[1].1,
                    w[0].0,
                    w[0].1
                );
            }
        }
        writeln!(out, "{} passed sanity check.", path.display())?;
        return Ok(());
    }
    if buf.len() % TIME_ENTRY != 0 && entries.is_empty() {
        bail!(
            "{}: corrupt time index: {} bytes is not a whole number of {TIME_ENTRY}-byte entries",
            path.display(),
            buf.len()
        );
    }
    let log = LogView::beside(path)?;
    let mut mismatched = Vec::new();
    let mut out_of_order = Vec::new();
    let mut not_found = Vec::new();
    let mut prev_ts = -1i64;
    for &(timestamp, offset) in &entries[..live] {
        if let Some(log) = &log {
            match log.batch_containing(offset) {
                None => not_found.push((offset, -1)),
                Some((_, h)) if h.last_offset() != offset => {
                    not_found.push((offset, h.last_offset()));
                }
                Some((pos, h)) => {
                    let max = log.max_record_timestamp(pos, h);
                    if max != timestamp {
                        mismatched.push((timestamp, max));
                    }
                    if prev_ts >= timestamp {
                        out_of_order.push((timestamp, prev_ts));
                    }
                }
            }
        }
        if !args.verify_index_only {
            writeln!(out, "timestamp: {timestamp} offset: {offset}")?;
        }
        prev_ts = timestamp;
    }
    if !(mismatched.is_empty() && out_of_order.is_empty() && not_found.is_empty()) {
        out.flush()?;
    }
    if !mismatched.is_empty() {
        writeln!(err, "Found timestamp mismatch in :{}", path.display())?;
        for (i, l) in mismatched {
            writeln!(err, "  Index timestamp: {i}, log timestamp: {l}")?;
        }
    }
    if !out_of_order.is_empty() {
        writeln!(err, "Found out of order timestamp in :{}", path.display())?;
        for (i, p) in out_of_order {
            writeln!(
                err,
                "  Index timestamp: {i}, Previously indexed timestamp: {p}"
            )?;
        }
    }
    if !not_found.is_empty() {
        writeln!(
            err,
            "The following indexed offsets are not found in the log."
        )?;
        for (i, l) in not_found {
            writeln!(err, "Indexed offset: {i}, found log offset: {l}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_wrap_like_kafka() {
        assert_eq!(increment_sequence(5, 3), 8);
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
    }

    #[test]
    fn base_offset_and_kind_from_name() {
        let p = Path::new("/x/00000000000000000042.timeindex");
        assert_eq!(base_offset(p).ok(), Some(42));
        assert_eq!(FileKind::of(p).ok(), Some(FileKind::TimeIndex));
        assert!(FileKind::of(Path::new("00000000000000000000.txt")).is_err());
        assert!(base_offset(Path::new("abc.log")).is_err());
    }

    #[test]
    fn txn_index_entries_as_kafka_prints_them() {
        use sluice_storage::txn_index::AbortedTxn;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("00000000000000000010.txnindex");
        let mut bytes = Vec::new();
        for (pid, first, last, lso) in [(7, 10, 14, 15), (9, 12, 20, 16)] {
            bytes.extend_from_slice(
                &AbortedTxn {
                    producer_id: pid,
                    first_offset: first,
                    last_offset: last,
                    last_stable_offset: lso,
                }
                .encode(),
            );
        }
        bytes.extend_from_slice(&[0; 5]); // torn tail: ignored
        std::fs::write(&path, &bytes).expect("write");
        assert_eq!(FileKind::of(&path).ok(), Some(FileKind::TxnIndex));
        let mut out = Vec::new();
        dump_txn_index(&path, &mut out).expect("dump");
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            "version: 0 producerId: 7 firstOffset: 10 lastOffset: 14 lastStableOffset: 15\n\
             version: 0 producerId: 9 firstOffset: 12 lastOffset: 20 lastStableOffset: 16\n"
        );
    }

    #[test]
    fn control_markers() {
        let key = [0, 0, 0, 1];
        let value = [0, 0, 0, 0, 0, 7];
        assert_eq!(
            control_description(Some(&key), Some(&value)),
            " endTxnMarker: COMMIT coordinatorEpoch: 7"
        );
        assert_eq!(
            control_description(Some(&[0, 0, 0, 9]), None),
            " controlType: UNKNOWN(9)"
        );
    }
}
