//! The transaction index of a segment: `<base>.txnindex`, Kafka's
//! `TransactionIndex` file format.
//!
//! One entry per aborted transaction whose ABORT marker lies in the
//! segment, in marker order, 34 bytes each, big-endian:
//!
//! | field | type | |
//! |---|---|---|
//! | version | int16 | 0 |
//! | producer id | int64 | |
//! | first offset | int64 | the transaction's first offset in this partition |
//! | last offset | int64 | the offset of its ABORT marker |
//! | last stable offset | int64 | the partition's LSO once the marker is in: the first offset of the next open transaction, else last offset + 1 |
//!
//! The file is created on the first entry (a segment without aborted
//! transactions has none, as in Kafka). Entries are kept in memory as
//! well (they are few: one per aborted transaction), so read_committed
//! fetches never read the file. A file whose size is not a multiple of 34,
//! or holding an unknown version, non-increasing last offsets or a last
//! offset below the segment's base is reported as corrupt by
//! [`TxnIndex::open`]; the log then rebuilds it from the batches
//! (docs/design/013-transactions-storage.md).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};

use crate::error::{bad_file, IoContext, Result};

/// Suffix of transaction index files.
pub const TXN_INDEX_SUFFIX: &str = ".txnindex";
/// Bytes per entry (Kafka's `AbortedTxn.TOTAL_SIZE`).
pub const ENTRY_SIZE: usize = 34;
/// The entry version written (Kafka's `AbortedTxn.CURRENT_VERSION`).
pub const CURRENT_VERSION: i16 = 0;

/// One aborted transaction (Kafka's `AbortedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// Offset of the ABORT marker.
    pub last_offset: i64,
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    /// The 34 bytes of the entry.
    pub fn encode(&self) -> [u8; ENTRY_SIZE] {
        let mut b = [0u8; ENTRY_SIZE];
        b[0..2].copy_from_slice(&CURRENT_VERSION.to_be_bytes());
        b[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        b[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        b[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        b[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        b
    }

    /// Reads one entry; `Err` with the reason for an unknown version.
    pub fn decode(b: &[u8; ENTRY_SIZE]) -> std::result::Result<Self, String> {
        let version = i16::from_be_bytes([b[0], b[1]]);
        if version != CURRENT_VERSION {
            return Err(format!(
                "unexpected aborted transaction version {version}, current version is {CURRENT_VERSION}"
            ));
        }
        let long = |at: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[at..at + 8]);
            i64::from_be_bytes(x)
        };
        Ok(Self {
            producer_id: long(2),
            first_offset: long(10),
            last_offset: long(18),
            last_stable_offset: long(26),
        })
    }
}

/// The aborted transactions found for a fetch range in one segment, and
/// whether the search may stop there (Kafka's `TxnIndexSearchResult`).
#[derive(Debug, Default)]
pub(crate) struct TxnSearch {
    pub aborted: Vec<AbortedTxn>,
    pub complete: bool,
}

/// Path of a segment's transaction index (with an optional extra suffix).
pub fn txn_index_path(dir: &Path, base_offset: i64, extra: &str) -> PathBuf {
    crate::segment::segment_path(dir, base_offset, TXN_INDEX_SUFFIX, extra)
}

/// One segment's transaction index.
#[derive(Debug)]
pub(crate) struct TxnIndex {
    path: Mutex<PathBuf>,
    entries: RwLock<Vec<AbortedTxn>>,
    /// Open once the file exists; appends go to its end.
    file: Mutex<Option<File>>,
}

fn read_lock<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write_lock<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl TxnIndex {
    /// An index without a file (a new segment).
    pub(crate) fn empty(path: PathBuf) -> Self {
        Self {
            path: Mutex::new(path),
            entries: RwLock::new(Vec::new()),
            file: Mutex::new(None),
        }
    }

    /// Opens the index at `path` if the file exists. Returns the index
    /// and, when the file cannot be trusted, why: the caller rebuilds it
    /// (the entries read before the first problem are kept meanwhile).
    pub(crate) fn open(path: PathBuf, base_offset: i64) -> Result<(Self, Option<String>)> {
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok((Self::empty(path), None));
            }
            Err(e) => return Err(e).at(&path),
        };
        let len = file.metadata().at(&path)?.len();
        let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(0)];
        file.read_exact_at(&mut bytes, 0).at(&path)?;
        let mut entries = Vec::with_capacity(bytes.len() / ENTRY_SIZE);
        let mut problem = None;
        let mut chunks = bytes.chunks_exact(ENTRY_SIZE);
        for chunk in &mut chunks {
            let mut b = [0u8; ENTRY_SIZE];
            b.copy_from_slice(chunk);
            let e = match AbortedTxn::decode(&b) {
                Ok(e) => e,
                Err(why) => {
                    problem = Some(why);
                    break;
                }
            };
            if e.last_offset < base_offset {
                problem = Some(format!(
                    "last offset of aborted transaction {e:?} is less than start offset {base_offset}"
                ));
                break;
            }
            if entries
                .last()
                .is_some_and(|p: &AbortedTxn| p.last_offset >= e.last_offset)
            {
                problem = Some(format!(
                    "last offsets of aborted transactions do not increase at {e:?}"
                ));
                break;
            }
            entries.push(e);
        }
        if problem.is_none() && !chunks.remainder().is_empty() {
            problem = Some(format!(
                "{} bytes is not a whole number of {ENTRY_SIZE}-byte entries",
                bytes.len()
            ));
        }
        let index = Self {
            path: Mutex::new(path),
            entries: RwLock::new(entries),
            file: Mutex::new(Some(file)),
        };
        if problem.is_some() {
            // Keep the good prefix on disk too, so appends stay aligned.
            let keep = read_lock(&index.entries).len();
            index.truncate_entries(keep)?;
        }
        Ok((index, problem))
    }

    pub(crate) fn path(&self) -> PathBuf {
        lock(&self.path).clone()
    }

    /// Every entry, in order.
    #[cfg(test)]
    pub(crate) fn all(&self) -> Vec<AbortedTxn> {
        read_lock(&self.entries).clone()
    }

    pub(crate) fn is_empty(&self) -> bool {
        read_lock(&self.entries).is_empty()
    }

    /// Appends an entry (Kafka's `append`): last offsets must increase.
    /// Writer only.
    pub(crate) fn append(&self, txn: AbortedTxn) -> Result<()> {
        let mut entries = write_lock(&self.entries);
        if let Some(last) = entries.last() {
            if last.last_offset >= txn.last_offset {
                return Err(bad_file(
                    &self.path(),
                    format!(
                        "the last offset of appended transactions must increase, but {} is not greater than {}",
                        txn.last_offset, last.last_offset
                    ),
                ));
            }
        }
        let mut file = lock(&self.file);
        let path = self.path();
        if file.is_none() {
            *file = Some(
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&path)
                    .at(&path)?,
            );
        }
        let Some(f) = file.as_ref() else {
            unreachable!("opened above")
        };
        let at = (entries.len() * ENTRY_SIZE) as u64;
        f.write_all_at(&txn.encode(), at).at(&path)?;
        entries.push(txn);
        Ok(())
    }

    /// The entries overlapping `[fetch_offset, upper)` (Kafka's
    /// `collectAbortedTxns`); complete once an entry's last stable offset
    /// reaches `upper` (no later segment can hold one that overlaps).
    pub(crate) fn collect(&self, fetch_offset: i64, upper: i64) -> TxnSearch {
        let mut out = TxnSearch::default();
        for e in read_lock(&self.entries).iter() {
            if e.last_offset >= fetch_offset && e.first_offset < upper {
                out.aborted.push(*e);
            }
            if e.last_stable_offset >= upper {
                out.complete = true;
                return out;
            }
        }
        out
    }

    /// Drops every entry whose marker is at or after `offset` (Kafka's
    /// `truncateTo`). Writer only.
    pub(crate) fn truncate_to(&self, offset: i64) -> Result<()> {
        let keep = read_lock(&self.entries)
            .iter()
            .take_while(|e| e.last_offset < offset)
            .count();
        self.truncate_entries(keep)
    }

    fn truncate_entries(&self, keep: usize) -> Result<()> {
        let mut entries = write_lock(&self.entries);
        let file = lock(&self.file);
        if let Some(f) = file.as_ref() {
            let len = (keep * ENTRY_SIZE) as u64;
            if f.metadata().at_with(|| self.path())?.len() != len {
                f.set_len(len).at_with(|| self.path())?;
            }
        }
        entries.truncate(keep);
        Ok(())
    }

    /// fsyncs the file, if there is one.
    pub(crate) fn flush(&self) -> Result<()> {
        if let Some(f) = lock(&self.file).as_ref() {
            f.sync_data().at_with(|| self.path())?;
        }
        Ok(())
    }

    /// Renames the file (if any) to `to`; later appends go to the new name.
    pub(crate) fn rename(&self, to: PathBuf) -> Result<()> {
        let mut path = lock(&self.path);
        if lock(&self.file).is_some() || path.exists() {
            match std::fs::rename(&*path, &to) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).at(&path),
            }
        }
        *path = to;
        Ok(())
    }

    /// Unlinks the file (if any).
    pub(crate) fn delete(&self) -> Result<()> {
        let path = self.path();
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).at(&path),
        }
    }

    /// Writes `entries` as a new file at `path` (the cleaner's output),
    /// fsynced; nothing is written when there are none.
    pub(crate) fn write_new(path: &Path, entries: &[AbortedTxn]) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut bytes = Vec::with_capacity(entries.len() * ENTRY_SIZE);
        for e in entries {
            bytes.extend_from_slice(&e.encode());
        }
        let f = File::create(path).at(path)?;
        f.write_all_at(&bytes, 0).at(path)?;
        f.sync_all().at(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: lso,
        }
    }

    /// The bytes Kafka's `AbortedTxn(producerId, firstOffset, lastOffset,
    /// lastStableOffset)` writes, assembled by hand from its layout.
    #[test]
    fn entry_bytes_match_kafkas_aborted_txn() {
        let e = txn(0x0102_0304_0506_0708, 5, 0x1_0000_0000, 7);
        let mut want = vec![0u8, 0];
        want.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 5]);
        want.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0]);
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 7]);
        assert_eq!(e.encode().to_vec(), want);
        assert_eq!(AbortedTxn::decode(&e.encode()), Ok(e));
        let mut v1 = e.encode();
        v1[1] = 1;
        assert!(AbortedTxn::decode(&v1).is_err());
    }

    #[test]
    fn file_round_trip_truncation_and_search() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = txn_index_path(dir.path(), 100, "");
        let (idx, problem) = TxnIndex::open(path.clone(), 100).expect("open");
        assert!(problem.is_none() && idx.is_empty());
        assert!(!path.exists(), "no file until the first entry");
        let entries = [
            txn(1, 90, 110, 111),
            txn(2, 105, 120, 115),
            txn(3, 115, 130, 131),
        ];
        for e in entries {
            idx.append(e).expect("append");
        }
        assert!(idx.append(txn(4, 1, 130, 131)).is_err(), "must increase");
        idx.flush().expect("flush");
        let bytes = std::fs::read(&path).expect("read");
        let want: Vec<u8> = entries.iter().flat_map(|e| e.encode()).collect();
        assert_eq!(bytes, want, "three 34-byte entries in order");
        let (again, problem) = TxnIndex::open(path.clone(), 100).expect("reopen");
        assert!(problem.is_none());
        assert_eq!(again.all(), entries);

        // Kafka's collectAbortedTxns: overlap with [112, 118); the second
        // entry's LSO 115 < 118 does not end the search, the third's does.
        let s = again.collect(112, 118);
        assert_eq!(s.aborted, vec![entries[1], entries[2]]);
        assert!(s.complete);
        let s = again.collect(0, 200);
        assert_eq!(s.aborted.len(), 3);
        assert!(!s.complete);

        again.truncate_to(120).expect("truncate");
        assert_eq!(again.all(), vec![entries[0]]);
        assert_eq!(std::fs::metadata(&path).expect("meta").len(), 34);
        again.append(entries[2]).expect("append after truncation");
        let (third, _) = TxnIndex::open(path, 100).expect("reopen");
        assert_eq!(third.all(), vec![entries[0], entries[2]]);
    }

    #[test]
    fn damaged_files_are_reported_and_cut_to_their_good_prefix() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = txn_index_path(dir.path(), 100, "");
        let good = txn(1, 90, 110, 111);
        let mut bytes = good.encode().to_vec();
        bytes.extend_from_slice(&[0u8; 10]); // a torn entry
        std::fs::write(&path, &bytes).expect("write");
        let (idx, problem) = TxnIndex::open(path.clone(), 100).expect("open");
        assert!(problem.is_some());
        assert_eq!(idx.all(), vec![good]);
        assert_eq!(std::fs::metadata(&path).expect("meta").len(), 34);

        // An entry below the segment's base, and decreasing entries.
        for bad in [txn(1, 1, 99, 100), txn(2, 1, 105, 106)] {
            let mut bytes = good.encode().to_vec();
            bytes.extend_from_slice(&bad.encode());
            std::fs::write(&path, &bytes).expect("write");
            let (idx, problem) = TxnIndex::open(path.clone(), 100).expect("open");
            assert!(problem.is_some(), "{bad:?}");
            assert_eq!(idx.all(), vec![good]);
        }
    }
}
