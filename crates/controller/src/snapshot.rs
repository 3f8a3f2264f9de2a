//! Metadata snapshots in KRaft's file format (Kafka's `Snapshots`,
//! `RecordsSnapshotWriter`, `RecordsSnapshotReader`).
//!
//! A snapshot is the image at an offset of the metadata log, written as a
//! file `<end offset, 20 digits>-<epoch, 10 digits>.checkpoint` in the
//! metadata log's folder. The end offset is exclusive: the snapshot holds
//! everything in the log below it, and loading resumes the log there.
//!
//! The file is a sequence of v2 record batches, offsets counted from 0:
//!
//! | batch | content |
//! |---|---|
//! | first | control batch, one record: key `(version 0, type 3)`, value SnapshotHeaderRecord v0 (`Version: int16`, `LastContainedLogTimestamp: int64`, tagged fields) |
//! | then | data batches of metadata records in their log framing (the image as TopicRecord, ConfigRecord, PartitionRecord...) |
//! | last | control batch, one record: key `(version 0, type 4)`, value SnapshotFooterRecord v0 (`Version: int16`, tagged fields) |
//!
//! Every batch carries the snapshot's epoch as its partition leader epoch.
//! A snapshot is written to `<name>-<unique>.checkpoint.part`, fsynced,
//! renamed into place and the folder fsynced, so a `.checkpoint` file is
//! always complete; a file that fails any check on reading (CRC, offsets,
//! header first, footer last, nothing after it) is corrupt as a whole.

use std::io::Write;
use std::path::{Path, PathBuf};

use sluice_protocol::record::batch::{self, validate_crc};
use sluice_protocol::record::codec::{
    assemble, decode_batch, encode_record, BatchFields, ProducerInfo,
};
use sluice_protocol::record::{BatchIter, Compression, Record};

use crate::error::{io_at, ControllerError, Result};
use crate::image::MetadataImage;
use crate::records::MetadataRecord;

/// Suffix of complete snapshot files.
pub const SUFFIX: &str = ".checkpoint";
/// Suffix of snapshots being written.
pub const PARTIAL_SUFFIX: &str = ".checkpoint.part";
/// Suffix of snapshots on their way out.
pub const DELETE_SUFFIX: &str = ".checkpoint.deleted";
/// Suffix of snapshots found corrupt and set aside (kept for inspection).
pub const CORRUPT_SUFFIX: &str = ".checkpoint.corrupt";

const CONTROL_FLAG: i16 = 0x20;
const SNAPSHOT_HEADER: i16 = 3;
const SNAPSHOT_FOOTER: i16 = 4;
/// Control record type of Kafka's LeaderChangeMessage (the quorum's blank
/// entries, design 018).
pub(crate) const CONTROL_LEADER_CHANGE: i16 = 2;
/// Record payload bytes per data batch.
const BATCH_BYTES: usize = 1 << 20;
/// Largest decompressed batch accepted when reading.
const READ_LIMIT: usize = 64 << 20;

/// A snapshot's identity: the log offset it ends at (exclusive) and the
/// epoch of the last record it contains (Kafka's `OffsetAndEpoch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SnapshotId {
    pub end_offset: i64,
    pub epoch: i32,
}

impl SnapshotId {
    /// `<offset, 20 digits>-<epoch, 10 digits>`.
    pub fn stem(&self) -> String {
        format!("{:020}-{:010}", self.end_offset, self.epoch)
    }

    /// `<stem>.checkpoint`.
    pub fn file_name(&self) -> String {
        format!("{}{SUFFIX}", self.stem())
    }

    /// Parses a stem (`<20 digits>-<10 digits>`).
    pub fn parse_stem(stem: &str) -> Option<Self> {
        let (o, e) = stem.split_once('-')?;
        let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(o, 20) || !digits(e, 10) {
            return None;
        }
        Some(Self {
            end_offset: o.parse().ok()?,
            epoch: e.parse().ok()?,
        })
    }
}

impl std::fmt::Display for SnapshotId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file_name())
    }
}

/// What a file in the metadata folder is, snapshot-wise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotFile {
    Complete(SnapshotId),
    /// An interrupted write (`.checkpoint.part`).
    Partial,
    /// An interrupted deletion (`.checkpoint.deleted`).
    Deleted,
    /// Set aside as corrupt (`.checkpoint.corrupt`).
    Corrupt,
}

impl SnapshotFile {
    /// Classifies a file name; `None` for files that are not snapshots.
    pub fn parse(name: &str) -> Option<Self> {
        if name.ends_with(PARTIAL_SUFFIX) {
            Some(Self::Partial)
        } else if name.ends_with(DELETE_SUFFIX) {
            Some(Self::Deleted)
        } else if name.ends_with(CORRUPT_SUFFIX) {
            Some(Self::Corrupt)
        } else {
            name.strip_suffix(SUFFIX)
                .and_then(SnapshotId::parse_stem)
                .map(Self::Complete)
        }
    }
}

/// Every snapshot-related file in `dir`, with its path.
pub fn scan(dir: &Path) -> Result<Vec<(SnapshotFile, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_at(dir))? {
        let entry = entry.map_err(io_at(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(kind) = SnapshotFile::parse(&name) {
            out.push((kind, entry.path()));
        }
    }
    Ok(out)
}

/// A snapshot read back.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub id: SnapshotId,
    /// SnapshotHeaderRecord.LastContainedLogTimestamp: append time of the
    /// last log record the snapshot contains (what retention ages it by).
    pub last_contained_timestamp: i64,
    /// The metadata records, in order.
    pub records: Vec<MetadataRecord>,
    /// Records that did not decode (logged with their offset and skipped).
    pub skipped: usize,
    /// File size in bytes.
    pub size: u64,
}

impl Snapshot {
    /// The image the records build.
    pub fn image(&self) -> MetadataImage {
        let mut img = MetadataImage::default();
        for r in &self.records {
            img.apply(r);
        }
        img
    }
}

fn control_key(kind: i16) -> Vec<u8> {
    let mut k = Vec::with_capacity(4);
    k.extend_from_slice(&0i16.to_be_bytes());
    k.extend_from_slice(&kind.to_be_bytes());
    k
}

/// One batch of `records` (key, value) at `base_offset`.
fn build_batch(
    base_offset: i64,
    epoch: i32,
    control: bool,
    records: &[(Option<Vec<u8>>, Vec<u8>)],
    now_ms: i64,
) -> Result<Vec<u8>> {
    let mut payload = Vec::new();
    for (i, (k, v)) in records.iter().enumerate() {
        let rec = Record::new(k.clone(), Some(v.clone()), now_ms);
        encode_record(&mut payload, &rec, i32::try_from(i).unwrap_or(i32::MAX), 0);
    }
    let count = i32::try_from(records.len())
        .map_err(|_| ControllerError::Record("too many records for one batch".into()))?;
    let fields = BatchFields {
        base_offset,
        partition_leader_epoch: epoch,
        attributes: if control { CONTROL_FLAG } else { 0 },
        last_offset_delta: count - 1,
        base_timestamp: now_ms,
        max_timestamp: now_ms,
        producer: ProducerInfo::default(),
        records_count: count,
    };
    Ok(assemble(&fields, Compression::None, &payload)?)
}

/// A control batch of one record (`(version 0, kind)`, `value`) at offset
/// 0 with epoch 0 (the metadata quorum's log entries: offsets and epoch are
/// set by the append).
pub(crate) fn build_control_batch(kind: i16, value: Vec<u8>, now_ms: i64) -> Result<Vec<u8>> {
    build_batch(0, 0, true, &[(Some(control_key(kind)), value)], now_ms)
}

/// The whole file: header batch, data batches, footer batch.
pub fn encode(
    id: SnapshotId,
    image: &MetadataImage,
    last_contained_timestamp: i64,
    now_ms: i64,
) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut header = Vec::with_capacity(11);
    header.extend_from_slice(&0i16.to_be_bytes()); // Version
    header.extend_from_slice(&last_contained_timestamp.to_be_bytes());
    header.push(0); // no tagged fields
    out.extend(build_batch(
        0,
        id.epoch,
        true,
        &[(Some(control_key(SNAPSHOT_HEADER)), header)],
        now_ms,
    )?);
    let mut next = 1i64;
    let mut pending: Vec<(Option<Vec<u8>>, Vec<u8>)> = Vec::new();
    let mut pending_bytes = 0usize;
    for r in image.to_records() {
        let v = r.encode();
        pending_bytes += v.len();
        pending.push((None, v));
        if pending_bytes >= BATCH_BYTES {
            out.extend(build_batch(next, id.epoch, false, &pending, now_ms)?);
            next += pending.len() as i64;
            pending.clear();
            pending_bytes = 0;
        }
    }
    if !pending.is_empty() {
        out.extend(build_batch(next, id.epoch, false, &pending, now_ms)?);
        next += pending.len() as i64;
    }
    let mut footer = Vec::with_capacity(3);
    footer.extend_from_slice(&0i16.to_be_bytes());
    footer.push(0);
    out.extend(build_batch(
        next,
        id.epoch,
        true,
        &[(Some(control_key(SNAPSHOT_FOOTER)), footer)],
        now_ms,
    )?);
    Ok(out)
}

/// Writes the snapshot of `image` as `id` into `dir`: a temporary
/// `.checkpoint.part` file, fsync, rename, fsync of the folder. Returns the
/// file's size.
pub fn write(
    dir: &Path,
    id: SnapshotId,
    image: &MetadataImage,
    last_contained_timestamp: i64,
    now_ms: i64,
) -> Result<u64> {
    let bytes = encode(id, image, last_contained_timestamp, now_ms)?;
    write_encoded(dir, id, &bytes)
}

/// Writes the file `id` holding `bytes` (an encoded snapshot, e.g. one
/// received from the quorum leader) in `dir` as [`write`] does. Returns
/// its size.
pub fn write_encoded(dir: &Path, id: SnapshotId, bytes: &[u8]) -> Result<u64> {
    let unique = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let tmp = dir.join(format!("{}-{unique:x}{PARTIAL_SUFFIX}", id.stem()));
    let path = dir.join(id.file_name());
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(io_at(&tmp))?;
        f.write_all(bytes).map_err(io_at(&tmp))?;
        f.sync_all().map_err(io_at(&tmp))?;
    }
    std::fs::rename(&tmp, &path).map_err(io_at(&path))?;
    sluice_storage::checkpoint::sync_dir(dir)?;
    Ok(bytes.len() as u64)
}

fn corrupt(path: &Path, reason: impl Into<String>) -> ControllerError {
    ControllerError::Snapshot {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// `(type, value)` of a control batch's single record.
fn control_record(path: &Path, raw: &[u8]) -> Result<(i16, Vec<u8>)> {
    let d = decode_batch(raw, READ_LIMIT).map_err(|e| corrupt(path, e.to_string()))?;
    let [rec] = d.records.as_slice() else {
        return Err(corrupt(path, "control batch without exactly one record"));
    };
    let key = rec.record.key.as_deref().unwrap_or_default();
    if key.len() < 4 || i16::from_be_bytes([key[0], key[1]]) < 0 {
        return Err(corrupt(path, "control record with an invalid key"));
    }
    Ok((
        i16::from_be_bytes([key[2], key[3]]),
        rec.record.value.clone().unwrap_or_default(),
    ))
}

/// Reads and checks the snapshot `id` in `dir`.
pub fn read(dir: &Path, id: SnapshotId) -> Result<Snapshot> {
    let path = dir.join(id.file_name());
    let bytes = std::fs::read(&path).map_err(io_at(&path))?;
    let mut iter = BatchIter::new(&bytes);
    let mut expected = 0i64;
    let mut header_ts = None;
    let mut footer = false;
    let mut records = Vec::new();
    let mut skipped = 0usize;
    let mut at = 0usize;
    for b in iter.by_ref() {
        let (pos, h, raw) = b.map_err(|e| corrupt(&path, format!("batch at byte {at}: {e}")))?;
        at = pos + raw.len();
        validate_crc(raw).map_err(|e| corrupt(&path, format!("batch at byte {pos}: {e}")))?;
        if footer {
            return Err(corrupt(&path, "data after the footer"));
        }
        if h.base_offset != expected {
            return Err(corrupt(
                &path,
                format!(
                    "batch at offset {} where {expected} was expected",
                    h.base_offset
                ),
            ));
        }
        expected = h.last_offset() + 1;
        if h.is_control() {
            let (kind, value) = control_record(&path, raw)?;
            match (kind, header_ts.is_some()) {
                (SNAPSHOT_HEADER, false) => {
                    if value.len() < 10 {
                        return Err(corrupt(&path, "short snapshot header record"));
                    }
                    let mut ts = [0u8; 8];
                    ts.copy_from_slice(&value[2..10]);
                    header_ts = Some(i64::from_be_bytes(ts));
                }
                (SNAPSHOT_HEADER, true) => return Err(corrupt(&path, "a second header")),
                (_, false) => return Err(corrupt(&path, "does not start with a header")),
                (SNAPSHOT_FOOTER, true) => footer = true,
                // KRaft version / voters records: nothing for this image.
                (_, true) => {}
            }
            continue;
        }
        if header_ts.is_none() {
            return Err(corrupt(&path, "does not start with a header"));
        }
        let d = decode_batch(raw, READ_LIMIT).map_err(|e| corrupt(&path, e.to_string()))?;
        for r in d.records {
            match r.record.value.as_deref().map(MetadataRecord::decode) {
                Some(Ok(rec)) => records.push(rec),
                Some(Err(e)) => {
                    tracing::warn!(snapshot = %id, offset = r.record.offset, error = %e, "skipping undecodable record in metadata snapshot");
                    skipped += 1;
                }
                None => {
                    tracing::warn!(snapshot = %id, offset = r.record.offset, "skipping null record in metadata snapshot");
                    skipped += 1;
                }
            }
        }
    }
    if iter.remainder() != 0 {
        return Err(corrupt(
            &path,
            format!(
                "{} bytes of an incomplete batch at the end",
                iter.remainder()
            ),
        ));
    }
    let Some(last_contained_timestamp) = header_ts else {
        return Err(corrupt(&path, "no snapshot header"));
    };
    if !footer {
        return Err(corrupt(&path, "no snapshot footer (incomplete)"));
    }
    Ok(Snapshot {
        id,
        last_contained_timestamp,
        records,
        skipped,
        size: bytes.len() as u64,
    })
}

/// Deletes a snapshot: renamed `.checkpoint.deleted` first (so a crash in
/// between is finished at the next start), then removed.
pub fn delete(dir: &Path, id: SnapshotId) -> Result<()> {
    let path = dir.join(id.file_name());
    let doomed = dir.join(format!("{}{DELETE_SUFFIX}", id.stem()));
    std::fs::rename(&path, &doomed).map_err(io_at(&path))?;
    std::fs::remove_file(&doomed).map_err(io_at(&doomed))?;
    sluice_storage::checkpoint::sync_dir(dir)?;
    Ok(())
}

/// Moves a corrupt snapshot out of the way (`.checkpoint.corrupt`), keeping
/// its bytes for inspection.
pub fn set_aside(dir: &Path, id: SnapshotId) -> Result<PathBuf> {
    let path = dir.join(id.file_name());
    let aside = dir.join(format!("{}{CORRUPT_SUFFIX}", id.stem()));
    std::fs::rename(&path, &aside).map_err(io_at(&path))?;
    sluice_storage::checkpoint::sync_dir(dir)?;
    Ok(aside)
}

/// Header length of a batch, for tests that damage files.
#[doc(hidden)]
pub const BATCH_HEADER_LEN: usize = batch::HEADER_LEN;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::RESOURCE_TOPIC;
    use uuid::Uuid;

    fn image(topics: usize) -> MetadataImage {
        let mut img = MetadataImage::default();
        for t in 0..topics {
            let id = Uuid::from_u128(t as u128 + 100);
            img.apply(&MetadataRecord::Topic {
                name: format!("topic-{t}"),
                topic_id: id,
            });
            img.apply(&MetadataRecord::Config {
                resource_type: RESOURCE_TOPIC,
                resource_name: format!("topic-{t}"),
                name: "retention.ms".into(),
                value: Some("-1".into()),
            });
            for p in 0..3 {
                img.apply(&MetadataRecord::Partition {
                    partition_id: p,
                    topic_id: id,
                    replicas: vec![1],
                    isr: vec![1],
                    leader: 1,
                    leader_epoch: 0,
                    partition_epoch: 0,
                    removing_replicas: vec![],
                    adding_replicas: vec![],
                });
            }
        }
        img
    }

    #[test]
    fn names_follow_kafka() {
        let id = SnapshotId {
            end_offset: 1234,
            epoch: 7,
        };
        assert_eq!(id.file_name(), "00000000000000001234-0000000007.checkpoint");
        assert_eq!(
            SnapshotFile::parse(&id.file_name()),
            Some(SnapshotFile::Complete(id))
        );
        assert_eq!(
            SnapshotFile::parse("00000000000000001234-0000000007-1f.checkpoint.part"),
            Some(SnapshotFile::Partial)
        );
        assert_eq!(
            SnapshotFile::parse("00000000000000001234-0000000007.checkpoint.deleted"),
            Some(SnapshotFile::Deleted)
        );
        assert_eq!(SnapshotFile::parse("leader-epoch-checkpoint"), None);
        assert_eq!(SnapshotFile::parse("1234-7.checkpoint"), None);
        assert_eq!(SnapshotFile::parse("00000000000000000000.log"), None);
    }

    #[test]
    fn write_read_roundtrip_in_kafka_layout() {
        let dir = tempfile::tempdir().expect("tempdir");
        let img = image(5);
        let id = SnapshotId {
            end_offset: 42,
            epoch: 3,
        };
        let size =
            write(dir.path(), id, &img, 1_700_000_000_123, 1_700_000_000_500).expect("write");
        let files: Vec<_> = std::fs::read_dir(dir.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(files, vec![id.file_name()], "no temp file left");
        let s = read(dir.path(), id).expect("read");
        assert_eq!(s.size, size);
        assert_eq!(s.last_contained_timestamp, 1_700_000_000_123);
        assert_eq!(s.skipped, 0);
        assert_eq!(s.image(), img);
        assert_eq!(s.records, img.to_records());

        // Kafka's layout: header control batch at offset 0, data, footer.
        let bytes = std::fs::read(dir.path().join(id.file_name())).expect("read");
        let batches: Vec<_> = BatchIter::new(&bytes).map(|b| b.expect("batch")).collect();
        assert_eq!(batches.len(), 3);
        let (_, first, raw) = &batches[0];
        assert!(first.is_control());
        assert_eq!(first.base_offset, 0);
        assert_eq!(first.partition_leader_epoch, 3);
        let d = decode_batch(raw, READ_LIMIT).expect("decode");
        assert_eq!(
            d.records[0].record.key.as_deref(),
            Some(&[0u8, 0, 0, 3][..])
        );
        let mut want = vec![0u8, 0];
        want.extend_from_slice(&1_700_000_000_123i64.to_be_bytes());
        want.push(0);
        assert_eq!(d.records[0].record.value.as_deref(), Some(&want[..]));
        let (_, data, _) = &batches[1];
        assert!(!data.is_control());
        assert_eq!(data.base_offset, 1);
        assert_eq!(data.records_count as usize, img.to_records().len());
        let (_, last, raw) = &batches[2];
        assert!(last.is_control());
        assert_eq!(last.base_offset, 1 + i64::from(data.records_count));
        let d = decode_batch(raw, READ_LIMIT).expect("decode");
        assert_eq!(
            d.records[0].record.key.as_deref(),
            Some(&[0u8, 0, 0, 4][..])
        );
        assert_eq!(d.records[0].record.value.as_deref(), Some(&[0u8, 0, 0][..]));
    }

    #[test]
    fn an_empty_image_is_header_and_footer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let id = SnapshotId {
            end_offset: 0,
            epoch: 0,
        };
        write(dir.path(), id, &MetadataImage::default(), 0, 0).expect("write");
        let s = read(dir.path(), id).expect("read");
        assert!(s.records.is_empty());
    }

    #[test]
    fn damaged_files_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let id = SnapshotId {
            end_offset: 9,
            epoch: 0,
        };
        let good = encode(id, &image(3), 5, 5).expect("encode");
        let path = dir.path().join(id.file_name());
        let mut cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", Vec::new()),
            ("truncated", good[..good.len() - 7].to_vec()),
            ("no footer", {
                let batches: Vec<_> = BatchIter::new(&good).map(|b| b.expect("b")).collect();
                good[..batches[2].0].to_vec()
            }),
            ("trailing garbage", {
                let mut v = good.clone();
                v.extend_from_slice(&[1, 2, 3]);
                v
            }),
        ];
        for at in [30, BATCH_HEADER_LEN + 90, good.len() - 2] {
            let mut v = good.clone();
            v[at] ^= 0x55;
            cases.push(("flipped byte", v));
        }
        for (what, bytes) in cases {
            std::fs::write(&path, &bytes).expect("write");
            let e = read(dir.path(), id).expect_err(what);
            assert!(e.to_string().contains(&id.file_name()), "{what}: {e}");
        }
        std::fs::write(&path, &good).expect("write");
        read(dir.path(), id).expect("intact");
        set_aside(dir.path(), id).expect("aside");
        assert!(!path.exists());
        assert!(dir
            .path()
            .join(format!("{}{CORRUPT_SUFFIX}", id.stem()))
            .exists());
    }
}
