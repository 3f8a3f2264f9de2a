//! One log segment: a `.log` file of v2 record batches with its `.index` and
//! `.timeindex`, named by the 20-digit base offset (Kafka's `LogSegment`).
//!
//! Appends come from one writer (the partition's append lock); reads use
//! positioned reads on a shared file handle and only ever look below the
//! published `size`, so they never wait for the writer.
//!
//! With `preallocate` a new `.log` file is created `segment.bytes` long
//! (Kafka's `initFileSize`); the published size, not the file length, says
//! where the data ends, the file is cut to its real size when the segment
//! is sealed, and a recovery scan treats a zero-filled tail as unwritten
//! space, never as data.
//!
//! Without `preallocate`, appends reserve the file's blocks a little ahead
//! of the data (`fallocate(2)` with `FALLOC_FL_KEEP_SIZE`: the file length
//! stays the data's, at most `RESERVE_AHEAD_MAX` (4 MiB) past it): a buffered
//! write into allocated blocks skips ext4's per-block delayed-allocation
//! work (reservation, quota, extent-status entries), which was a quarter of
//! the broker's CPU while ingesting (docs/benchmarks.md). The reserved
//! tail is released when the segment is sealed or cut.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sluice_protocol::record::batch::{self, BatchHeader, HEADER_LEN};

use crate::error::{bad_file, IoContext, Result, StorageError};
use crate::index::{OffsetEntry, OffsetIndex, TimeEntry, TimeIndex};
use crate::txn_index::{txn_index_path, TxnIndex, TXN_INDEX_SUFFIX};

/// Most bytes an append reserves past the data (the segment's size after
/// the append, if smaller): an idle partition holds little unused space.
const RESERVE_AHEAD_MAX: u64 = 4 << 20;

/// Suffixes of segment files.
pub const LOG_SUFFIX: &str = ".log";
pub const INDEX_SUFFIX: &str = ".index";
pub const TIME_INDEX_SUFFIX: &str = ".timeindex";

/// `00000000000000000042` for 42.
pub fn file_stem(base_offset: i64) -> String {
    format!("{base_offset:020}")
}

/// Path of a segment file with the given suffix (and optional extra suffix
/// such as `.cleaned`, `.swap` or `.deleted`).
pub fn segment_path(dir: &Path, base_offset: i64, suffix: &str, extra: &str) -> PathBuf {
    dir.join(format!("{}{suffix}{extra}", file_stem(base_offset)))
}

/// A byte range of a segment file, ready for `sendfile(2)` or a copy.
#[derive(Debug, Clone)]
pub struct FileRegion {
    pub file: Arc<File>,
    pub position: u64,
    pub length: u64,
}

impl FileRegion {
    /// Copies the region into memory (tests, TLS connections, tools).
    pub fn read_to_vec(&self) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0u8; self.length as usize];
        let mut done = 0usize;
        while done < buf.len() {
            let n = self
                .file
                .read_at(&mut buf[done..], self.position + done as u64)?;
            if n == 0 {
                buf.truncate(done);
                break;
            }
            done += n;
        }
        Ok(buf)
    }
}

/// What a segment scan found: a valid prefix and why it stopped.
#[derive(Debug)]
pub(crate) struct ScanOutcome {
    pub truncated_bytes: u64,
    pub problem: Option<String>,
    /// `(epoch, base offset)` of each batch whose partition leader epoch is
    /// larger than every earlier one: where each epoch starts in the valid
    /// prefix (for rebuilding the leader epoch cache).
    pub epoch_starts: Vec<(i32, i64)>,
    /// The scan stopped at zero bytes: space never written (a preallocated
    /// file, or pages a crash left unwritten), not a corrupt batch.
    pub zero_tail: bool,
}

/// One segment of a partition log.
#[derive(Debug)]
pub(crate) struct Segment {
    pub base_offset: i64,
    log_path: Mutex<PathBuf>,
    file: Arc<File>,
    size: AtomicU64,
    pub(crate) offset_index: OffsetIndex,
    pub(crate) time_index: TimeIndex,
    /// Aborted transactions whose ABORT marker is in this segment.
    pub(crate) txn_index: TxnIndex,
    /// Why the `.txnindex` file found at open cannot be trusted (the log
    /// rebuilds it).
    pub(crate) txn_index_problem: Option<String>,
    bytes_since_last_index: AtomicU64,
    max_timestamp: AtomicI64,
    offset_of_max_timestamp: AtomicI64,
    first_batch_timestamp: AtomicI64,
    created_ms: i64,
    next_offset: AtomicI64,
    /// An index file was missing or unreadable when the segment was opened.
    pub(crate) indexes_missing: bool,
    /// Time taken off the roll age of this segment (`segment.jitter.ms`,
    /// drawn when the segment was created or opened, as Kafka does).
    roll_jitter_ms: i64,
    /// The `.log` file is longer than its data (preallocated, not yet cut).
    preallocated: AtomicBool,
    /// End of the file space appends reserved (`FALLOC_FL_KEEP_SIZE`);
    /// `u64::MAX` when appends do not reserve (preallocated, or reserving
    /// failed once).
    reserved: AtomicU64,
    /// Blocks past the data may be allocated (reserved ahead, or left by
    /// a run before a restart): released when the segment is sealed.
    reserved_tail: AtomicBool,
}

/// Settings a segment needs from the log config.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegmentSettings {
    pub index_bytes: u64,
    /// This segment's share of `segment.jitter.ms` (see
    /// `LogConfig::random_segment_jitter`).
    pub roll_jitter_ms: i64,
    /// Length a new `.log` file is created with (`preallocate`), else 0.
    pub init_file_size: u64,
}

impl SegmentSettings {
    /// The settings of a segment of a log with `config` (draws a jitter).
    pub(crate) fn of(config: &crate::config::LogConfig) -> Self {
        Self {
            index_bytes: config.segment_index_bytes,
            roll_jitter_ms: config.random_segment_jitter(),
            init_file_size: config.init_file_size(),
        }
    }
}

impl Segment {
    /// Creates a new, empty segment (replacing stale files of that name).
    pub(crate) fn create(
        dir: &Path,
        base_offset: i64,
        s: SegmentSettings,
        now_ms: i64,
    ) -> Result<Self> {
        let log_path = segment_path(dir, base_offset, LOG_SUFFIX, "");
        for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX] {
            let p = segment_path(dir, base_offset, suffix, "");
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).at(&p),
            }
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&log_path)
            .at(&log_path)?;
        if s.init_file_size > 0 {
            preallocate(&file, s.init_file_size).at(&log_path)?;
        }
        let seg = Self::assemble(
            dir,
            base_offset,
            log_path,
            file,
            0,
            Some(s.index_bytes),
            now_ms,
            s.roll_jitter_ms,
        )?;
        seg.preallocated
            .store(s.init_file_size > 0, Ordering::Release);
        if s.init_file_size > 0 {
            seg.reserved.store(u64::MAX, Ordering::Release);
        }
        Ok(seg)
    }

    /// Opens an existing segment. `writable` preallocates the indexes so the
    /// segment can take appends (the active segment).
    pub(crate) fn open(
        dir: &Path,
        base_offset: i64,
        s: SegmentSettings,
        writable: bool,
        now_ms: i64,
    ) -> Result<Self> {
        let log_path = segment_path(dir, base_offset, LOG_SUFFIX, "");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&log_path)
            .at(&log_path)?;
        let size = file.metadata().at(&log_path)?.len();
        let seg = Self::assemble(
            dir,
            base_offset,
            log_path,
            file,
            size,
            writable.then_some(s.index_bytes),
            now_ms,
            s.roll_jitter_ms,
        )?;
        // An earlier run may have reserved blocks past the data.
        seg.reserved_tail.store(writable, Ordering::Release);
        Ok(seg)
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        dir: &Path,
        base_offset: i64,
        log_path: PathBuf,
        file: File,
        size: u64,
        prealloc: Option<u64>,
        now_ms: i64,
        roll_jitter_ms: i64,
    ) -> Result<Self> {
        let index_path = segment_path(dir, base_offset, INDEX_SUFFIX, "");
        let time_path = segment_path(dir, base_offset, TIME_INDEX_SUFFIX, "");
        let missing = !index_path.exists() || !time_path.exists();
        let (offset_index, reset_a) = open_or_reset::<OffsetEntry>(&index_path, prealloc)?;
        let (time_index, reset_b) = open_or_reset::<TimeEntry>(&time_path, prealloc)?;
        let (txn_index, txn_index_problem) =
            TxnIndex::open(txn_index_path(dir, base_offset, ""), base_offset)?;
        Ok(Self {
            base_offset,
            log_path: Mutex::new(log_path),
            file: Arc::new(file),
            size: AtomicU64::new(size),
            offset_index,
            time_index,
            txn_index,
            txn_index_problem,
            bytes_since_last_index: AtomicU64::new(0),
            max_timestamp: AtomicI64::new(-1),
            offset_of_max_timestamp: AtomicI64::new(-1),
            first_batch_timestamp: AtomicI64::new(-1),
            created_ms: now_ms,
            next_offset: AtomicI64::new(base_offset),
            indexes_missing: missing || reset_a || reset_b,
            roll_jitter_ms,
            preallocated: AtomicBool::new(false),
            reserved: AtomicU64::new(size),
            reserved_tail: AtomicBool::new(false),
        })
    }

    /// This segment's jitter: it rolls once it has collected records for
    /// longer than the log's max segment age minus this.
    pub(crate) fn roll_jitter_ms(&self) -> i64 {
        self.roll_jitter_ms
    }

    /// Timestamp of the first batch (Kafka's `rollingBasedTimestamp`), or
    /// -1 when the segment has none.
    pub(crate) fn first_batch_timestamp(&self) -> i64 {
        self.first_batch_timestamp.load(Ordering::Acquire)
    }

    pub(crate) fn log_path(&self) -> PathBuf {
        self.log_path
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Bytes of valid batches (what readers may see).
    pub(crate) fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    /// Offset after the last batch of this segment (base when empty).
    pub(crate) fn next_offset(&self) -> i64 {
        self.next_offset.load(Ordering::Acquire)
    }

    pub(crate) fn max_timestamp(&self) -> i64 {
        self.max_timestamp.load(Ordering::Acquire)
    }

    pub(crate) fn offset_of_max_timestamp(&self) -> i64 {
        self.offset_of_max_timestamp.load(Ordering::Acquire)
    }

    /// Kafka's `largestTimestamp`: the max record timestamp, or the file's
    /// modification time when the segment holds none.
    pub(crate) fn largest_timestamp(&self) -> i64 {
        let ts = self.max_timestamp();
        if ts >= 0 {
            return ts;
        }
        self.file
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as i64)
    }

    /// How long this segment has been collecting records, for `segment.ms`
    /// (Kafka's `timeWaitedForRoll`): the incoming batch's timestamp minus
    /// the first batch's, or wall time since creation when the segment has
    /// no timestamped batch.
    pub(crate) fn time_waited_for_roll(&self, now_ms: i64, message_ts: i64) -> i64 {
        let first = self.first_batch_timestamp.load(Ordering::Acquire);
        if first >= 0 {
            message_ts - first
        } else {
            now_ms - self.created_ms
        }
    }

    /// Whether `[base, last]` fits the 32-bit relative offsets of this segment.
    pub(crate) fn can_hold_offset(&self, last_offset: i64) -> bool {
        let rel = last_offset - self.base_offset;
        (0..=i64::from(i32::MAX)).contains(&rel)
    }

    pub(crate) fn index_full(&self) -> bool {
        self.offset_index.is_full() || self.time_index.is_full()
    }

    /// Appends `bytes`, which hold the batches described by `batches`
    /// (position within `bytes`, header with final offsets). Writer only.
    pub(crate) fn append(
        &self,
        bytes: &[u8],
        batches: &[(usize, BatchHeader)],
        index_interval: u64,
    ) -> Result<()> {
        let start = self.size.load(Ordering::Relaxed);
        self.reserve_for(start + bytes.len() as u64);
        if let Err(e) = self.file.write_all_at(bytes, start) {
            // Best effort: cut off whatever part of the write landed.
            let _ = self.cut(start);
            return Err(e).at_with(|| self.log_path());
        }
        for (pos, h) in batches {
            self.index_batch(start + *pos as u64, h, index_interval);
        }
        if let Some((_, last)) = batches.last() {
            self.next_offset
                .store(last.last_offset() + 1, Ordering::Release);
        }
        self.size
            .store(start + bytes.len() as u64, Ordering::Release);
        Ok(())
    }

    /// Reserves the file's blocks up to `end` and some way past it, unless
    /// they are (see the module doc). A file system that cannot reserve
    /// (or is full) is left to allocate at writeback: the write itself
    /// decides whether the append fails. Writer only.
    fn reserve_for(&self, end: u64) {
        let reserved = self.reserved.load(Ordering::Relaxed);
        if end <= reserved {
            return;
        }
        let to = end.saturating_add(end.min(RESERVE_AHEAD_MAX));
        match reserve(&self.file, reserved, to - reserved) {
            Ok(()) => {
                self.reserved.store(to, Ordering::Relaxed);
                self.reserved_tail.store(true, Ordering::Release);
            }
            Err(e) => {
                tracing::debug!(path = %self.log_path().display(), error = %e,
                    "cannot reserve segment space ahead; appends allocate at writeback");
                self.reserved.store(u64::MAX, Ordering::Relaxed);
            }
        }
    }

    /// End of the space appends reserved (`u64::MAX`: appends do not
    /// reserve).
    #[cfg(test)]
    pub(crate) fn reserved_end(&self) -> u64 {
        self.reserved.load(Ordering::Relaxed)
    }

    /// Cuts the `.log` file to `len` bytes, releasing any reserved tail.
    fn cut(&self, len: u64) -> std::io::Result<()> {
        self.file.set_len(len)?;
        let _ = self
            .reserved
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                (r != u64::MAX).then_some(r.min(len))
            });
        self.reserved_tail.store(false, Ordering::Release);
        Ok(())
    }

    /// Updates indexes and timestamps for one batch at `position`.
    fn index_batch(&self, position: u64, h: &BatchHeader, index_interval: u64) {
        if self.first_batch_timestamp.load(Ordering::Relaxed) < 0 {
            self.first_batch_timestamp
                .store(h.max_timestamp.max(0), Ordering::Release);
        }
        if h.max_timestamp > self.max_timestamp.load(Ordering::Relaxed) {
            self.offset_of_max_timestamp
                .store(h.last_offset(), Ordering::Release);
            self.max_timestamp.store(h.max_timestamp, Ordering::Release);
        }
        if self.bytes_since_last_index.load(Ordering::Relaxed) > index_interval {
            self.offset_index.push(OffsetEntry {
                relative_offset: (h.last_offset() - self.base_offset) as u32,
                position: position as u32,
            });
            self.push_time_entry();
            self.bytes_since_last_index.store(0, Ordering::Relaxed);
        }
        self.bytes_since_last_index
            .fetch_add(h.total_size() as u64, Ordering::Relaxed);
    }

    fn push_time_entry(&self) {
        let ts = self.max_timestamp();
        if ts >= 0 {
            self.time_index.maybe_push(TimeEntry {
                timestamp: ts,
                relative_offset: (self.offset_of_max_timestamp() - self.base_offset) as u32,
            });
        }
    }

    /// Reads the header of the batch at `position`, if a whole header lies
    /// below `limit`.
    pub(crate) fn header_at(&self, position: u64, limit: u64) -> Result<Option<BatchHeader>> {
        if position + HEADER_LEN as u64 > limit {
            return Ok(None);
        }
        let mut buf = [0u8; HEADER_LEN];
        self.file
            .read_exact_at(&mut buf, position)
            .at_with(|| self.log_path())?;
        Ok(Some(BatchHeader::parse(&buf)?))
    }

    /// The first batch whose last offset is ≥ `offset`: its position and
    /// header. `None` when the segment holds no such batch.
    pub(crate) fn translate(&self, offset: i64) -> Result<Option<(u64, BatchHeader)>> {
        let limit = self.size();
        let mut pos = self
            .offset_index
            .lookup(offset - self.base_offset)
            .map_or(0, |e| u64::from(e.position));
        while let Some(h) = self.header_at(pos, limit)? {
            if h.last_offset() >= offset {
                return Ok(Some((pos, h)));
            }
            pos += h.total_size() as u64;
        }
        Ok(None)
    }

    /// A region starting at the batch that holds `offset`, at most
    /// `max_bytes` long and ending before `max_position`; with `min_one`, a
    /// first batch larger than `max_bytes` is returned whole (KIP-74).
    pub(crate) fn read(
        &self,
        offset: i64,
        max_bytes: u64,
        max_position: u64,
        min_one: bool,
    ) -> Result<Option<FileRegion>> {
        let Some((start, first)) = self.translate(offset)? else {
            return Ok(None);
        };
        let max_position = max_position.min(self.size());
        if start >= max_position {
            return Ok(None);
        }
        let mut length = (max_position - start).min(max_bytes);
        if min_one && length < first.total_size() as u64 {
            length = (first.total_size() as u64).min(max_position - start);
        }
        if length == 0 {
            return Ok(None);
        }
        Ok(Some(FileRegion {
            file: Arc::clone(&self.file),
            position: start,
            length,
        }))
    }

    /// Scans every batch from the start, checking CRCs and offsets, and
    /// rebuilds the indexes and timestamps; cuts off an invalid tail.
    pub(crate) fn recover(&self, index_interval: u64) -> Result<ScanOutcome> {
        self.offset_index.truncate_entries(0);
        self.time_index.truncate_entries(0);
        self.bytes_since_last_index.store(0, Ordering::Relaxed);
        self.max_timestamp.store(-1, Ordering::Release);
        self.offset_of_max_timestamp.store(-1, Ordering::Release);
        self.first_batch_timestamp.store(-1, Ordering::Release);
        self.next_offset.store(self.base_offset, Ordering::Release);
        let file_len = self.file.metadata().at_with(|| self.log_path())?.len();
        let mut pos = 0u64;
        let mut buf = Vec::new();
        let mut expect_min = self.base_offset;
        let mut epoch_starts: Vec<(i32, i64)> = Vec::new();
        let mut zero_tail = false;
        let problem = loop {
            if pos == file_len {
                break None;
            }
            if self.zeros_from(pos, file_len)? {
                zero_tail = true;
                break None;
            }
            let h = match self.header_at(pos, file_len) {
                Ok(Some(h)) => h,
                Ok(None) => break Some(format!("torn batch header at position {pos}")),
                Err(e) => break Some(format!("bad batch header at position {pos}: {e}")),
            };
            let size = h.total_size() as u64;
            if pos + size > file_len {
                break Some(format!("torn batch at position {pos}"));
            }
            if h.base_offset < expect_min || !self.can_hold_offset(h.last_offset()) {
                break Some(format!(
                    "batch at position {pos} has offset {} out of order",
                    h.base_offset
                ));
            }
            let crc = self.crc_of(pos, size, &mut buf)?;
            if crc != h.crc {
                break Some(format!(
                    "corrupt batch at position {pos}: CRC {:#010x}, stored {:#010x}",
                    crc, h.crc
                ));
            }
            self.index_batch(pos, &h, index_interval);
            let epoch = h.partition_leader_epoch;
            if epoch >= 0 && epoch_starts.last().is_none_or(|&(e, _)| epoch > e) {
                epoch_starts.push((epoch, h.base_offset));
            }
            self.next_offset
                .store(h.last_offset() + 1, Ordering::Release);
            expect_min = h.last_offset() + 1;
            pos += size;
        };
        let truncated = file_len - pos;
        if truncated > 0 {
            self.cut(pos).at_with(|| self.log_path())?;
        }
        self.size.store(pos, Ordering::Release);
        self.preallocated.store(false, Ordering::Release);
        Ok(ScanOutcome {
            truncated_bytes: truncated,
            problem,
            epoch_starts,
            zero_tail,
        })
    }

    /// Whether the bytes where the next batch header would be are all zero:
    /// no batch was ever written there (a batch's length field is never 0).
    fn zeros_from(&self, pos: u64, file_len: u64) -> Result<bool> {
        let n = (file_len - pos).min(HEADER_LEN as u64) as usize;
        let mut buf = [0u8; HEADER_LEN];
        self.file
            .read_exact_at(&mut buf[..n], pos)
            .at_with(|| self.log_path())?;
        Ok(buf[..n].iter().all(|&b| b == 0))
    }

    /// CRC32C of the batch at `pos` (attributes to end), read in chunks so a
    /// garbage length never allocates more than the chunk.
    fn crc_of(&self, pos: u64, size: u64, buf: &mut Vec<u8>) -> Result<u32> {
        const CHUNK: u64 = 1 << 20;
        let mut crc = batch::Crc32c::default();
        let mut at = pos + batch::ATTRIBUTES_OFFSET as u64;
        let end = pos + size;
        while at < end {
            let n = (end - at).min(CHUNK) as usize;
            buf.resize(n, 0);
            self.file
                .read_exact_at(buf, at)
                .at_with(|| self.log_path())?;
            crc.update(buf);
            at += n as u64;
        }
        Ok(crc.finish())
    }

    /// Restores the state a recovery scan would compute from the indexes
    /// alone (clean shutdown): max timestamp from the last time index entry,
    /// next offset by scanning headers after the last offset index entry.
    pub(crate) fn load_without_scan(&self) -> Result<()> {
        if let Some(t) = self.time_index.last() {
            self.max_timestamp.store(t.timestamp, Ordering::Release);
            self.offset_of_max_timestamp.store(
                self.base_offset + i64::from(t.relative_offset),
                Ordering::Release,
            );
        }
        let limit = self.size();
        if let Some(first) = self.header_at(0, limit)? {
            self.first_batch_timestamp
                .store(first.max_timestamp.max(0), Ordering::Release);
        }
        let mut pos = self
            .offset_index
            .last()
            .map_or(0, |e| u64::from(e.position));
        let mut since = 0u64;
        while let Some(h) = self.header_at(pos, limit)? {
            self.next_offset
                .store(h.last_offset() + 1, Ordering::Release);
            if self.max_timestamp() < h.max_timestamp {
                self.max_timestamp.store(h.max_timestamp, Ordering::Release);
                self.offset_of_max_timestamp
                    .store(h.last_offset(), Ordering::Release);
            }
            pos += h.total_size() as u64;
            since += h.total_size() as u64;
        }
        if pos != limit {
            return Err(bad_file(
                &self.log_path(),
                format!("batches end at {pos} but the file holds {limit} bytes"),
            ));
        }
        self.bytes_since_last_index.store(since, Ordering::Relaxed);
        Ok(())
    }

    /// Checks the indexes against the log (Kafka's `sanityCheck`).
    /// Before the segment's next offset is known (at open) the time index
    /// is checked for its shape only; [`Segment::time_index_within_log`]
    /// checks its last entry against the log once it is.
    pub(crate) fn indexes_sane(&self) -> bool {
        self.offset_index.sane(self.size()) && self.time_index.sane(i64::from(u32::MAX))
    }

    /// Whether the time index names no offset past the segment's last
    /// (call once the next offset is loaded).
    pub(crate) fn time_index_within_log(&self) -> bool {
        self.time_index
            .sane(self.next_offset() - 1 - self.base_offset)
    }

    /// Removes every batch whose last offset is ≥ `offset`; returns the
    /// bytes removed. The indexes are rebuilt by a scan of what remains.
    pub(crate) fn truncate_to(&self, offset: i64, index_interval: u64) -> Result<u64> {
        let Some((pos, _)) = self.translate(offset)? else {
            return Ok(0);
        };
        let before = self.size();
        self.size.store(pos, Ordering::Release);
        self.cut(pos).at_with(|| self.log_path())?;
        self.recover(index_interval)?;
        self.txn_index.truncate_to(self.next_offset())?;
        Ok(before - pos)
    }

    /// The segment stops taking appends: record the final max timestamp in
    /// the time index and trim both index files (Kafka's
    /// `onBecomeInactiveSegment` plus index trimming).
    pub(crate) fn seal(&self) -> Result<()> {
        self.push_time_entry();
        self.offset_index.trim()?;
        self.time_index.trim()?;
        self.trim_log()
    }

    /// Cuts a preallocated `.log` file to the data it holds (Kafka's
    /// `FileRecords.trim`), and releases blocks reserved past the data (a
    /// cut to the same length frees them). Writer only.
    pub(crate) fn trim_log(&self) -> Result<()> {
        let preallocated = self.preallocated.swap(false, Ordering::AcqRel);
        if preallocated || self.reserved_tail.load(Ordering::Acquire) {
            self.cut(self.size()).at_with(|| self.log_path())?;
        }
        Ok(())
    }

    /// `fsync` of the log file and the index pages.
    pub(crate) fn flush(&self) -> Result<()> {
        self.file.sync_data().at_with(|| self.log_path())?;
        self.offset_index.flush()?;
        self.time_index.flush()?;
        self.txn_index.flush()
    }

    /// Renames all its files by appending `extra` (e.g. `.deleted`).
    pub(crate) fn add_suffix(&self, extra: &str) -> Result<()> {
        let mut lp = self.log_path.lock().unwrap_or_else(|p| p.into_inner());
        let to = PathBuf::from(format!("{}{extra}", lp.display()));
        std::fs::rename(&*lp, &to).at(&lp)?;
        *lp = to;
        drop(lp);
        let p = self.offset_index.path();
        if p.exists() {
            self.offset_index
                .rename(&PathBuf::from(format!("{}{extra}", p.display())))?;
        }
        let p = self.time_index.path();
        if p.exists() {
            self.time_index
                .rename(&PathBuf::from(format!("{}{extra}", p.display())))?;
        }
        let p = self.txn_index.path();
        self.txn_index
            .rename(PathBuf::from(format!("{}{extra}", p.display())))?;
        Ok(())
    }

    /// Unlinks all its files (readers holding the file keep reading).
    pub(crate) fn delete_files(&self) -> Result<()> {
        self.txn_index.delete()?;
        for p in [
            self.log_path(),
            self.offset_index.path(),
            self.time_index.path(),
        ] {
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).at(&p),
            }
        }
        Ok(())
    }

    /// Offset of the first record with timestamp ≥ `ts` in this segment,
    /// with that record's timestamp (decodes one batch).
    pub(crate) fn find_offset_by_timestamp(
        &self,
        ts: i64,
        start_offset: i64,
    ) -> Result<Option<(i64, i64)>> {
        let rel = self
            .time_index
            .lookup(ts)
            .map_or(0, |e| i64::from(e.relative_offset));
        let from = (self.base_offset + rel).max(start_offset);
        let limit = self.size();
        let mut pos = match self.translate(from)? {
            Some((p, _)) => p,
            None => return Ok(None),
        };
        while let Some(h) = self.header_at(pos, limit)? {
            if h.max_timestamp >= ts {
                let bytes = self.batch_bytes(pos, &h)?;
                let decoded =
                    sluice_protocol::record::codec::decode_batch(&bytes, decode_limit(&h))?;
                for r in decoded.records {
                    if r.record.timestamp >= ts && r.record.offset >= start_offset {
                        return Ok(Some((r.record.offset, r.record.timestamp)));
                    }
                }
            }
            pos += h.total_size() as u64;
        }
        Ok(None)
    }

    /// The whole batch at `pos`.
    pub(crate) fn batch_bytes(&self, pos: u64, h: &BatchHeader) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; h.total_size()];
        self.file
            .read_exact_at(&mut buf, pos)
            .at_with(|| self.log_path())?;
        Ok(buf)
    }

    /// All batches of the segment in order, as `(position, header)`.
    pub(crate) fn batch_headers(&self) -> Result<Vec<(u64, BatchHeader)>> {
        let limit = self.size();
        let mut out = Vec::new();
        let mut pos = 0u64;
        while let Some(h) = self.header_at(pos, limit)? {
            out.push((pos, h));
            pos += h.total_size() as u64;
        }
        Ok(out)
    }
}

/// Reserves `len` bytes for a new segment file: `fallocate(2)` where the
/// file system supports it, else a sparse `set_len` as Kafka's
/// `RandomAccessFile.setLength`. Either way the file reads as zeros past
/// the data.
fn preallocate(file: &File, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let Ok(n) = libc::off_t::try_from(len) else {
        return file.set_len(len);
    };
    // SAFETY: fallocate on a file descriptor we own, mode 0 (allocate and
    // extend the size).
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, n) };
    if rc == 0 {
        Ok(())
    } else {
        file.set_len(len)
    }
}

/// Allocates `len` bytes of `file` from `offset` without changing its
/// length (`FALLOC_FL_KEEP_SIZE`): reads past the data still end there.
fn reserve(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
    };
    // SAFETY: fallocate on a file descriptor we own; KEEP_SIZE allocates
    // blocks and changes neither the length nor the data.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, offset, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Decompression limit for a batch: generous, but bounded.
pub(crate) fn decode_limit(h: &BatchHeader) -> usize {
    (h.total_size() * 255).clamp(1 << 20, 256 << 20)
}

/// Opens an index; a file that cannot be an index (odd size) is replaced by
/// an empty one, to be rebuilt by a scan.
fn open_or_reset<E: crate::index::Entry>(
    path: &Path,
    prealloc: Option<u64>,
) -> Result<(crate::index::IndexFile<E>, bool)> {
    match crate::index::IndexFile::<E>::open(path, prealloc) {
        Ok(i) => Ok((i, false)),
        Err(StorageError::BadFile { path, reason }) => {
            tracing::warn!(path = %path.display(), %reason, "replacing corrupt index");
            std::fs::remove_file(&path).at(&path)?;
            Ok((crate::index::IndexFile::<E>::open(&path, prealloc)?, true))
        }
        Err(e) => Err(e),
    }
}
