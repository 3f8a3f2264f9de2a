//! Producer-state snapshot files, `<offset, 20 digits>.snapshot` in the
//! partition folder, byte for byte Kafka's format (its
//! `ProducerSnapshot.json`, version 1, written by
//! `ProducerStateManager.writeSnapshot`):
//!
//! ```text
//! Version               int16   1
//! Crc                   uint32  CRC32C of every byte after this field
//! ProducerEntries       int32 count, then per producer (46 bytes):
//!   ProducerId            int64
//!   Epoch                 int16
//!   LastSequence          int32   -1 without a batch
//!   LastOffset            int64   last offset of the last batch, -1 without
//!   OffsetDelta           int32   last offset - first offset of that batch
//!   Timestamp             int64   the producer's last timestamp
//!   CoordinatorEpoch      int32
//!   CurrentTxnFirstOffset int64   -1 without an open transaction
//! ```
//!
//! The offset in the name is exclusive: the file holds the state of every
//! batch below it. Only each producer's last batch is stored (as Kafka), so
//! after a load only that one is recognized as a duplicate until the
//! producer appends again. Files are written to `<name>.tmp` and renamed,
//! so a complete name never holds a partial file; a damaged one fails its
//! CRC and is set aside by the loader.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::entry::{BatchMetadata, ProducerStateEntry};
use crate::error::{IoContext, Result};

/// Suffix of snapshot files (Kafka's `PRODUCER_SNAPSHOT_FILE_SUFFIX`).
pub const SNAPSHOT_SUFFIX: &str = ".snapshot";
/// The only version Kafka 4 reads and writes.
pub const SNAPSHOT_VERSION: i16 = 1;
const CRC_AT: usize = 2;
const ENTRIES_AT: usize = 6;
/// Bytes per producer entry.
pub const ENTRY_LEN: usize = 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8;

/// `<dir>/<offset, 20 digits>.snapshot`
pub fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(format!("{offset:020}{SNAPSHOT_SUFFIX}"))
}

/// The offset a snapshot file name stands for.
pub fn parse_snapshot_name(name: &str) -> Option<i64> {
    let stem = name.strip_suffix(SNAPSHOT_SUFFIX)?;
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

/// Why a snapshot file cannot be used (Kafka's `CorruptSnapshotException`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptSnapshot(pub String);

impl std::fmt::Display for CorruptSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The file's bytes for `entries` (in the order given).
pub fn encode<'a>(entries: impl ExactSizeIterator<Item = &'a ProducerStateEntry>) -> Vec<u8> {
    let count = entries.len();
    let mut out = Vec::with_capacity(ENTRIES_AT + 4 + count * ENTRY_LEN);
    out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&i32::try_from(count).unwrap_or(i32::MAX).to_be_bytes());
    for e in entries {
        out.extend_from_slice(&e.producer_id.to_be_bytes());
        out.extend_from_slice(&e.producer_epoch.to_be_bytes());
        out.extend_from_slice(&e.last_seq().to_be_bytes());
        out.extend_from_slice(&e.last_data_offset().to_be_bytes());
        out.extend_from_slice(&e.last_offset_delta().to_be_bytes());
        out.extend_from_slice(&e.last_timestamp.to_be_bytes());
        out.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
        out.extend_from_slice(&e.current_txn_first_offset.unwrap_or(-1).to_be_bytes());
    }
    let crc = sluice_protocol::record::batch::crc32c(&out[ENTRIES_AT..]);
    out[CRC_AT..ENTRIES_AT].copy_from_slice(&crc.to_be_bytes());
    out
}

/// Parses a snapshot file's bytes (Kafka's `readSnapshot`), checking the
/// version, the CRC, and that the entries fill the file exactly.
pub fn decode(bytes: &[u8]) -> Result<Vec<ProducerStateEntry>, CorruptSnapshot> {
    let bad = |m: String| Err(CorruptSnapshot(m));
    if bytes.len() < ENTRIES_AT + 4 {
        return bad(format!(
            "Snapshot failed schema validation: {} bytes",
            bytes.len()
        ));
    }
    let version = i16::from_be_bytes([bytes[0], bytes[1]]);
    if version != SNAPSHOT_VERSION {
        return bad(format!(
            "Snapshot contained an unknown file version {version}"
        ));
    }
    let stored = u32::from_be_bytes(take(bytes, CRC_AT));
    let computed = sluice_protocol::record::batch::crc32c(&bytes[ENTRIES_AT..]);
    if stored != computed {
        return bad(format!(
            "Snapshot is corrupt (CRC is no longer valid). Stored crc: {stored}. Computed crc: \
             {computed}"
        ));
    }
    let count = i32::from_be_bytes(take(bytes, ENTRIES_AT));
    let body = &bytes[ENTRIES_AT + 4..];
    let Ok(count) = usize::try_from(count) else {
        return bad(format!(
            "Snapshot failed schema validation: {count} entries"
        ));
    };
    if count.checked_mul(ENTRY_LEN) != Some(body.len()) {
        return bad(format!(
            "Snapshot failed schema validation: {count} entries in {} bytes",
            body.len()
        ));
    }
    let mut out = Vec::with_capacity(count);
    for e in body.chunks_exact(ENTRY_LEN) {
        let producer_id = i64::from_be_bytes(take(e, 0));
        let epoch = i16::from_be_bytes(take(e, 8));
        let last_seq = i32::from_be_bytes(take(e, 10));
        let last_offset = i64::from_be_bytes(take(e, 14));
        let offset_delta = i32::from_be_bytes(take(e, 22));
        let timestamp = i64::from_be_bytes(take(e, 26));
        let coordinator_epoch = i32::from_be_bytes(take(e, 34));
        let txn_first = i64::from_be_bytes(take(e, 38));
        let batch = (last_offset >= 0).then_some(BatchMetadata {
            last_seq,
            last_offset,
            offset_delta,
            timestamp,
        });
        out.push(ProducerStateEntry::new(
            producer_id,
            epoch,
            coordinator_epoch,
            timestamp,
            (txn_first >= 0).then_some(txn_first),
            batch,
        ));
    }
    Ok(out)
}

/// `N` bytes of `b` from `at` (the caller checked the length).
fn take<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

/// Writes `bytes` as the snapshot at `offset`: a `.tmp` file renamed into
/// place; with `sync` the file and the folder are fsynced.
pub fn write(dir: &Path, offset: i64, bytes: &[u8], sync: bool) -> Result<PathBuf> {
    let path = snapshot_path(dir, offset);
    let tmp = path.with_extension("snapshot.tmp");
    {
        let mut f = std::fs::File::create(&tmp).at(&tmp)?;
        f.write_all(bytes).at(&tmp)?;
        if sync {
            f.sync_all().at(&tmp)?;
        }
    }
    std::fs::rename(&tmp, &path).at(&path)?;
    if sync {
        crate::checkpoint::sync_dir(dir)?;
    }
    Ok(path)
}

/// Reads and parses the snapshot at `path`; the outer error is I/O.
pub fn read(path: &Path) -> Result<Result<Vec<ProducerStateEntry>, CorruptSnapshot>> {
    let bytes = std::fs::read(path).at(path)?;
    Ok(decode(&bytes))
}
