//! The sparse `.index` and `.timeindex` files of a segment, memory-mapped as
//! in Kafka (`AbstractIndex`, `OffsetIndex`, `TimeIndex`).
//!
//! - `.index`: 8-byte entries `(relative offset u32, file position u32)`,
//!   big-endian, one per `index.interval.bytes` appended.
//! - `.timeindex`: 12-byte entries `(timestamp i64, relative offset u32)`.
//!
//! The active segment's index files are preallocated to
//! `segment.index.bytes` (sparse: untouched pages cost neither disk nor
//! memory) and trimmed to their entries when the segment is rolled or closed.
//!
//! Concurrency: one writer (the partition's append lock) and any number of
//! readers without a lock. The writer fills an entry, then publishes it by
//! bumping `entries` with release ordering; readers load `entries` with
//! acquire ordering and only look below it.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use memmap2::{Advice, MmapOptions, MmapRaw};

use crate::error::{bad_file, IoContext, Result};

/// An entry codec: how many bytes an entry takes.
pub(crate) trait Entry: Copy {
    const SIZE: usize;
    fn decode(b: &[u8]) -> Self;
    fn encode(&self, b: &mut [u8]);
}

/// `.index` entry: offset relative to the segment base and byte position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetEntry {
    pub relative_offset: u32,
    pub position: u32,
}

/// `.timeindex` entry: a timestamp and the relative offset reached by then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeEntry {
    pub timestamp: i64,
    pub relative_offset: u32,
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

impl Entry for OffsetEntry {
    const SIZE: usize = 8;
    fn decode(b: &[u8]) -> Self {
        Self {
            relative_offset: be_u32(&b[0..4]),
            position: be_u32(&b[4..8]),
        }
    }
    fn encode(&self, b: &mut [u8]) {
        b[0..4].copy_from_slice(&self.relative_offset.to_be_bytes());
        b[4..8].copy_from_slice(&self.position.to_be_bytes());
    }
}

impl Entry for TimeEntry {
    const SIZE: usize = 12;
    fn decode(b: &[u8]) -> Self {
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&b[0..8]);
        Self {
            timestamp: i64::from_be_bytes(ts),
            relative_offset: be_u32(&b[8..12]),
        }
    }
    fn encode(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.timestamp.to_be_bytes());
        b[8..12].copy_from_slice(&self.relative_offset.to_be_bytes());
    }
}

/// A memory-mapped index file of fixed-size entries.
#[derive(Debug)]
pub(crate) struct IndexFile<E: Entry> {
    path: Mutex<PathBuf>,
    map: Option<MmapRaw>,
    /// Entries the mapping (and the file) can hold.
    capacity: AtomicUsize,
    entries: AtomicUsize,
    _entry: std::marker::PhantomData<E>,
}

// SAFETY: the mapping is only written by the single writer (serialized by the
// partition's append lock, which `&mut`-free methods document) below the
// capacity and above the published entry count; readers only read below the
// published count.
unsafe impl<E: Entry> Sync for IndexFile<E> {}
unsafe impl<E: Entry> Send for IndexFile<E> {}

impl<E: Entry> IndexFile<E> {
    /// Opens (creating if missing) an index file. Existing entries are taken
    /// from the file length. With `preallocate = Some(bytes)` the file is
    /// grown (sparse) to hold `bytes / E::SIZE` entries and becomes writable.
    pub(crate) fn open(path: &Path, preallocate: Option<u64>) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .at(path)?;
        let len = file.metadata().at(path)?.len();
        if len % E::SIZE as u64 != 0 && preallocate.is_none() {
            return Err(bad_file(
                path,
                format!("index size {len} is not a multiple of {}", E::SIZE),
            ));
        }
        let entries = (len / E::SIZE as u64) as usize;
        let map_len = match preallocate {
            Some(max) => {
                let max = (max / E::SIZE as u64) * E::SIZE as u64;
                let target = max.max(entries as u64 * E::SIZE as u64);
                if target != len {
                    file.set_len(target).at(path)?;
                }
                target
            }
            None => entries as u64 * E::SIZE as u64,
        };
        Self::from_file(path, &file, map_len, entries, preallocate.is_some())
    }

    fn from_file(
        path: &Path,
        file: &File,
        map_len: u64,
        entries: usize,
        preallocated: bool,
    ) -> Result<Self> {
        let map = if map_len == 0 {
            None
        } else {
            let map = MmapOptions::new()
                .len(map_len as usize)
                .map_raw(file)
                .at(path)?;
            if preallocated {
                // A page fault on a file mapping normally reads around it
                // (`read_ahead_kb`, often MiBs). Past the entries a
                // preallocated index is one sparse hole, so that read-around
                // fills the page cache with zero pages: on a cold open, MiBs
                // per active segment; on append, a stall per new page.
                // Advice only: a failure changes nothing else.
                if let Err(e) = map.advise(Advice::Random) {
                    tracing::debug!(path = %path.display(), error = %e, "madvise(MADV_RANDOM) failed");
                }
            }
            Some(map)
        };
        Ok(Self {
            path: Mutex::new(path.to_path_buf()),
            map,
            capacity: AtomicUsize::new((map_len as usize) / E::SIZE),
            entries: AtomicUsize::new(entries),
            _entry: std::marker::PhantomData,
        })
    }

    pub(crate) fn path(&self) -> PathBuf {
        self.path.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.load(Ordering::Acquire)
    }

    pub(crate) fn is_full(&self) -> bool {
        self.len() >= self.capacity.load(Ordering::Acquire)
    }

    #[cfg(test)]
    pub(crate) fn max_entries(&self) -> usize {
        self.capacity.load(Ordering::Acquire)
    }

    /// Entry `i` (must be below `len()`).
    pub(crate) fn get(&self, i: usize) -> E {
        debug_assert!(i < self.len());
        let Some(map) = &self.map else {
            unreachable!("entry read from an empty index")
        };
        // SAFETY: i < published entries <= capacity, so the range is inside
        // the mapping and fully written before it was published.
        let bytes = unsafe { std::slice::from_raw_parts(map.as_ptr().add(i * E::SIZE), E::SIZE) };
        E::decode(bytes)
    }

    pub(crate) fn last(&self) -> Option<E> {
        let n = self.len();
        (n > 0).then(|| self.get(n - 1))
    }

    /// Appends an entry; false when the index is full. Writer only.
    pub(crate) fn push(&self, e: E) -> bool {
        let n = self.entries.load(Ordering::Relaxed);
        if n >= self.capacity.load(Ordering::Relaxed) {
            return false;
        }
        let Some(map) = &self.map else { return false };
        // SAFETY: n < capacity, inside the mapping; readers never look at
        // index n until the store below publishes it.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(map.as_mut_ptr().add(n * E::SIZE), E::SIZE) };
        e.encode(bytes);
        self.entries.store(n + 1, Ordering::Release);
        true
    }

    /// Keeps the first `n` entries. Writer only.
    pub(crate) fn truncate_entries(&self, n: usize) {
        if n < self.len() {
            self.entries.store(n, Ordering::Release);
        }
    }

    /// Largest `i` with `key(entry i) <= target`, by binary search.
    pub(crate) fn floor_by(&self, target: i64, key: impl Fn(&E) -> i64) -> Option<(usize, E)> {
        let n = self.len();
        if n == 0 || key(&self.get(0)) > target {
            return None;
        }
        let (mut lo, mut hi) = (0usize, n - 1);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if key(&self.get(mid)) <= target {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Some((lo, self.get(lo)))
    }

    /// Shrinks the file to its entries and stops further appends (segment
    /// rolled or closed). The mapping stays as it is: nothing past the
    /// entries is ever touched again.
    pub(crate) fn trim(&self) -> Result<()> {
        let n = self.len();
        self.capacity.store(n, Ordering::Release);
        let path = self.path();
        let file = OpenOptions::new().write(true).open(&path).at(&path)?;
        file.set_len((n * E::SIZE) as u64).at(&path)?;
        Ok(())
    }

    /// Writes dirty pages to disk.
    pub(crate) fn flush(&self) -> Result<()> {
        if let Some(map) = &self.map {
            let bytes = self.len() * E::SIZE;
            if bytes > 0 {
                map.flush_range(0, bytes).at(&self.path())?;
            }
        }
        Ok(())
    }

    /// Renames the file (e.g. to `.deleted` or from `.swap`).
    pub(crate) fn rename(&self, to: &Path) -> Result<()> {
        let mut p = self.path.lock().unwrap_or_else(|p| p.into_inner());
        std::fs::rename(&*p, to).at(&p)?;
        *p = to.to_path_buf();
        Ok(())
    }
}

pub(crate) type OffsetIndex = IndexFile<OffsetEntry>;
pub(crate) type TimeIndex = IndexFile<TimeEntry>;

impl OffsetIndex {
    /// The entry with the largest relative offset ≤ `relative`.
    pub(crate) fn lookup(&self, relative: i64) -> Option<OffsetEntry> {
        self.floor_by(relative, |e| i64::from(e.relative_offset))
            .map(|(_, e)| e)
    }

    /// The first entry at or after file position `position` (Kafka's
    /// `fetchUpperBoundOffset`): its offset bounds what a read ending at
    /// `position` returned.
    pub(crate) fn first_at_or_after_position(&self, position: u64) -> Option<OffsetEntry> {
        let target = i64::try_from(position).ok()?;
        let next = match self.floor_by(target - 1, |e| i64::from(e.position)) {
            Some((i, _)) => i + 1,
            None => 0,
        };
        (next < self.len()).then(|| self.get(next))
    }

    /// Entries must grow strictly in both offset and position.
    pub(crate) fn sane(&self, log_size: u64) -> bool {
        let n = self.len();
        if n == 0 {
            return true;
        }
        let last = self.get(n - 1);
        if u64::from(last.position) >= log_size.max(1) {
            return false;
        }
        if n >= 2 {
            let prev = self.get(n - 2);
            if prev.relative_offset >= last.relative_offset || prev.position >= last.position {
                return false;
            }
        }
        true
    }
}

impl TimeIndex {
    /// The entry with the largest timestamp ≤ `timestamp`.
    pub(crate) fn lookup(&self, timestamp: i64) -> Option<TimeEntry> {
        self.floor_by(timestamp, |e| e.timestamp).map(|(_, e)| e)
    }

    /// Appends unless the timestamp does not grow (Kafka's `maybeAppend`).
    pub(crate) fn maybe_push(&self, e: TimeEntry) -> bool {
        match self.last() {
            Some(last) if last.timestamp >= e.timestamp => false,
            Some(last) if last.relative_offset > e.relative_offset => false,
            _ => self.push(e),
        }
    }

    /// Timestamps and offsets must not go backwards.
    pub(crate) fn sane(&self, max_relative_offset: i64) -> bool {
        let n = self.len();
        if n == 0 {
            return true;
        }
        let last = self.get(n - 1);
        if i64::from(last.relative_offset) > max_relative_offset {
            return false;
        }
        if n >= 2 {
            let prev = self.get(n - 2);
            if prev.timestamp >= last.timestamp || prev.relative_offset > last.relative_offset {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preallocates_appends_looks_up_and_trims() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("00000000000000000000.index");
        let idx = OffsetIndex::open(&p, Some(80)).expect("open");
        assert_eq!(std::fs::metadata(&p).expect("meta").len(), 80);
        assert_eq!(idx.max_entries(), 10);
        for i in 0..10u32 {
            assert!(idx.push(OffsetEntry {
                relative_offset: i * 10,
                position: i * 100
            }));
        }
        assert!(idx.is_full());
        assert!(!idx.push(OffsetEntry {
            relative_offset: 1000,
            position: 5000
        }));
        assert_eq!(idx.lookup(55).map(|e| e.relative_offset), Some(50));
        assert_eq!(idx.lookup(90).map(|e| e.position), Some(900));
        assert_eq!(idx.lookup(-1), None);
        assert!(idx.sane(10_000));
        idx.truncate_entries(4);
        idx.trim().expect("trim");
        assert_eq!(std::fs::metadata(&p).expect("meta").len(), 32);
        drop(idx);
        let idx = OffsetIndex::open(&p, None).expect("reopen");
        assert_eq!(idx.len(), 4);
        assert_eq!(idx.lookup(1000).map(|e| e.relative_offset), Some(30));
    }

    #[test]
    fn untrimmed_preallocated_index_is_not_sane() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("00000000000000000000.index");
        let idx = OffsetIndex::open(&p, Some(800)).expect("open");
        idx.push(OffsetEntry {
            relative_offset: 5,
            position: 4100,
        });
        drop(idx);
        let idx = OffsetIndex::open(&p, None).expect("reopen");
        assert_eq!(idx.len(), 100);
        assert!(!idx.sane(1 << 20));
    }

    #[test]
    fn time_index_only_grows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("00000000000000000000.timeindex");
        let idx = TimeIndex::open(&p, Some(120)).expect("open");
        assert!(idx.maybe_push(TimeEntry {
            timestamp: 100,
            relative_offset: 1
        }));
        assert!(!idx.maybe_push(TimeEntry {
            timestamp: 100,
            relative_offset: 2
        }));
        assert!(idx.maybe_push(TimeEntry {
            timestamp: 200,
            relative_offset: 5
        }));
        assert_eq!(idx.lookup(150).map(|e| e.relative_offset), Some(1));
        assert_eq!(idx.lookup(99), None);
        assert!(idx.sane(5));
        assert!(!idx.sane(4));
    }

    #[test]
    fn odd_sized_file_is_rejected_with_its_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("00000000000000000000.index");
        std::fs::write(&p, [0u8; 7]).expect("write");
        let e = OffsetIndex::open(&p, None).expect_err("bad size");
        assert!(e.to_string().contains("00000000000000000000.index"), "{e}");
    }
}
