//! The metadata log and its snapshots: metadata records appended to the
//! partition log `__cluster_metadata-0` (Kafka's KRaft metadata topic), one
//! batch per change so a change applies whole or not at all, fsynced before
//! it is applied; snapshots of the image (module [`crate::snapshot`]) taken
//! in the background; start-up loads the newest valid snapshot and replays
//! the log after it.
//!
//! The log is opened here, not by the storage `LogManager`, so topic
//! retention, size retention and the cleaner never see it (as in Kafka,
//! whose `KafkaMetadataLog` also disables retention on it). It shrinks only
//! through snapshots: when an old snapshot ages out (`metadata.max.retention.ms`
//! / `.bytes`), the log start moves to the next snapshot and the segments
//! wholly below it are deleted. The two newest snapshots are always kept,
//! so a corrupt newest snapshot falls back to the previous one plus replay.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_protocol::record::codec::decode_batch;
use sluice_protocol::record::{BatchBuilder, Compression, Record};
use sluice_storage::{Clock, Log, LogConfig, LogOpenOptions, ReplayEvent, TopicPartition};
use uuid::Uuid;

use crate::error::{ControllerError, Result};
use crate::image::MetadataImage;
use crate::producer_ids::ProducerIdsBlock;
use crate::quorum::backend::QuorumBackend;
use crate::quorum::{MetadataQuorum, QuorumConfig};
use crate::records::MetadataRecord;
use crate::snapshot::{self, SnapshotFile, SnapshotId};

/// Name of the metadata topic.
pub const METADATA_TOPIC: &str = sluice_storage::CLUSTER_METADATA_TOPIC;

/// The metadata log's leader epoch: the quorum's epoch. A single node is a
/// one-voter quorum whose only leader never changes; with Raft (the cluster
/// work) the epoch comes from the elected leader's term. The metadata log is
/// the controller's and is not replicated by the broker's partition layer
/// (design 011).
pub const QUORUM_LEADER_EPOCH: i32 = 0;

/// How often old snapshots are checked against the retention limits (as
/// Kafka's `RaftMetadataLogCleanerManager`), besides after every snapshot.
const CLEAN_INTERVAL: Duration = Duration::from_secs(60);
/// Largest metadata batch (Kafka's `KafkaRaftClient.MAX_BATCH_SIZE_BYTES`).
const MAX_BATCH_BYTES: u64 = 8 * 1024 * 1024;

/// Settings of the metadata log and its snapshots (Kafka's
/// `metadata.log.*` / `metadata.max.*` server configs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataLogConfig {
    /// `metadata.log.segment.bytes`
    pub segment_bytes: u64,
    /// `metadata.log.segment.ms`
    pub segment_ms: i64,
    /// `metadata.log.max.record.bytes.between.snapshots`
    pub max_bytes_between_snapshots: u64,
    /// `metadata.log.max.snapshot.interval.ms` (0: no time-based snapshots)
    pub max_snapshot_interval_ms: i64,
    /// `metadata.max.retention.ms` (negative: no time limit)
    pub max_retention_ms: i64,
    /// `metadata.max.retention.bytes` (negative: no size limit)
    pub max_retention_bytes: i64,
}

impl Default for MetadataLogConfig {
    /// Kafka's defaults.
    fn default() -> Self {
        Self {
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * 24 * 3600 * 1000,
            max_bytes_between_snapshots: 20 * 1024 * 1024,
            max_snapshot_interval_ms: 3600 * 1000,
            max_retention_ms: 7 * 24 * 3600 * 1000,
            max_retention_bytes: 100 * 1024 * 1024,
        }
    }
}

impl MetadataLogConfig {
    /// The partition log's config: these segment settings, and retention
    /// off whatever the broker's topic defaults say.
    pub fn log_config(&self) -> LogConfig {
        LogConfig {
            segment_bytes: self.segment_bytes,
            segment_ms: self.segment_ms.max(1),
            retention_ms: -1,
            retention_bytes: -1,
            max_message_bytes: MAX_BATCH_BYTES,
            ..LogConfig::default()
        }
    }
}

/// A topic removal found in the part of the log replayed at start: the
/// durable evidence that lets start-up delete the topic's folders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRemoval {
    pub topic_id: Uuid,
    /// The topic's name when the removal was replayed (`None` if the topic
    /// was not in the image, e.g. its creation did not decode).
    pub name: Option<String>,
}

#[derive(Debug, Clone, Copy)]
struct SnapshotInfo {
    size: u64,
    /// LastContainedLogTimestamp, once read.
    timestamp: Option<i64>,
}

#[derive(Debug)]
struct SnapState {
    snapshots: BTreeMap<SnapshotId, SnapshotInfo>,
    /// Log bytes appended (or replayed) since the last snapshot.
    bytes_since: u64,
    /// Clock time of the last snapshot (or of loading).
    last_snapshot_ms: i64,
    /// Why snapshots are off, if they are.
    disabled: Option<String>,
    /// Wakes the background thread early.
    kick: bool,
    stop: bool,
}

/// The image with the log position it reflects: always updated together,
/// so a snapshot's content and offset agree whoever appends.
#[derive(Debug, Clone)]
struct Applied {
    image: Arc<MetadataImage>,
    /// Log offset up to which (exclusive) the image has applied records.
    end: i64,
    /// Timestamp of the last batch applied.
    last_timestamp: i64,
}

#[derive(Debug)]
struct Inner {
    log: Arc<Log>,
    dir: PathBuf,
    config: MetadataLogConfig,
    clock: Arc<dyn Clock>,
    image: Mutex<Applied>,
    /// Serializes appends (log append + apply).
    append_lock: Mutex<()>,
    /// The metadata change lock: held by every change from its check to
    /// the end of its folder work, and while a snapshot captures the image.
    write: Mutex<()>,
    /// Serializes snapshot writing and cleaning.
    maint: Mutex<()>,
    snap: Mutex<SnapState>,
    wake: Condvar,
    removals: Vec<RecordedRemoval>,
}

/// The metadata log, its snapshots, and the image they build.
#[derive(Debug)]
pub struct MetadataStore {
    backend: Backend,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// Where the log lives: on this node alone (the single combined node,
/// `controller.quorum.voters` empty), or replicated by the metadata quorum
/// (design 018).
#[derive(Debug)]
enum Backend {
    Local(Arc<Inner>),
    Quorum(QuorumBackend),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a replay of the log found.
#[derive(Debug, Default)]
struct Replayed {
    records: usize,
    skipped: usize,
    bytes: u64,
    last_timestamp: Option<i64>,
}

/// Applies the log's records from `from` to its end onto `image`. A batch
/// or record that does not decode is logged with its offsets and skipped;
/// a header that does not parse skips to the next segment (its length is
/// unknown).
fn replay(
    log: &Log,
    from: i64,
    image: &mut MetadataImage,
    removals: &mut Vec<RecordedRemoval>,
) -> Result<Replayed> {
    let mut out = Replayed::default();
    let from = from.max(log.log_start_offset());
    log.replay(from, |event| {
        // Damage is logged by the replay; it only counts here.
        let ReplayEvent::Batch { header: h, raw } = event else {
            out.skipped += 1;
            return;
        };
        let offsets = format!("{}..={}", h.base_offset, h.last_offset());
        out.bytes += raw.len() as u64;
        out.last_timestamp = Some(h.max_timestamp);
        if h.is_control() {
            return;
        }
        let decoded = match decode_batch(raw, MAX_BATCH_BYTES as usize * 8) {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(offsets, error = %e, "skipping undecodable metadata log batch");
                out.skipped += 1;
                return;
            }
        };
        for r in decoded.records {
            let offset = r.record.offset;
            if offset < from {
                continue;
            }
            let Some(value) = r.record.value else {
                tracing::error!(offset, "skipping null metadata record");
                out.skipped += 1;
                continue;
            };
            match MetadataRecord::decode(&value) {
                Ok(rec) => {
                    if let MetadataRecord::RemoveTopic { topic_id } = &rec {
                        removals.push(RecordedRemoval {
                            topic_id: *topic_id,
                            name: image.topic_by_id(topic_id).map(|t| t.name.clone()),
                        });
                    }
                    image.apply(&rec);
                    out.records += 1;
                }
                Err(e) => {
                    tracing::error!(offset, error = %e, "skipping undecodable metadata record");
                    out.skipped += 1;
                }
            }
        }
    })?;
    Ok(out)
}

impl MetadataStore {
    /// Opens `<data_dir>/__cluster_metadata-0`: the newest valid snapshot
    /// (a corrupt one is set aside and the previous one used), then the log
    /// after it. Refuses to start when the log starts above offset 0 and no
    /// valid snapshot covers what is missing.
    pub fn open(data_dir: &Path, config: MetadataLogConfig, clock: Arc<dyn Clock>) -> Result<Self> {
        let tp = TopicPartition::new(METADATA_TOPIC, 0);
        let dir = data_dir.join(tp.dir_name());
        let log = Arc::new(Log::open(
            &dir,
            tp,
            config.log_config(),
            // Always scanned whole, as Kafka does: it is small.
            LogOpenOptions::default(),
            Arc::clone(&clock),
        )?);
        let log_start = log.log_start_offset();
        let mut ids = Vec::new();
        for (kind, path) in snapshot::scan(&dir)? {
            match kind {
                SnapshotFile::Complete(id) if id.end_offset < log_start => {
                    // Left by a clean-up that moved the log start past it.
                    tracing::info!(path = %path.display(), log_start, "removing metadata snapshot below the log start");
                    std::fs::remove_file(&path).map_err(crate::error::io_at(&path))?;
                }
                SnapshotFile::Complete(id) => ids.push(id),
                SnapshotFile::Partial | SnapshotFile::Deleted => {
                    tracing::info!(path = %path.display(), "removing unfinished metadata snapshot file");
                    std::fs::remove_file(&path).map_err(crate::error::io_at(&path))?;
                }
                SnapshotFile::Corrupt => {
                    tracing::warn!(path = %path.display(), "corrupt metadata snapshot kept aside");
                }
            }
        }
        ids.sort_unstable();
        let mut loaded = None;
        while let Some(id) = ids.pop() {
            match snapshot::read(&dir, id) {
                Ok(s) => {
                    loaded = Some(s);
                    break;
                }
                Err(e) => {
                    let aside = snapshot::set_aside(&dir, id)?;
                    tracing::error!(snapshot = %id, error = %e, aside = %aside.display(), "metadata snapshot is unusable; set aside, falling back to the previous one");
                }
            }
        }
        let mut snapshots: BTreeMap<SnapshotId, SnapshotInfo> = ids
            .iter()
            .map(|&id| {
                let size = std::fs::metadata(dir.join(id.file_name())).map_or(0, |m| m.len());
                (
                    id,
                    SnapshotInfo {
                        size,
                        timestamp: None,
                    },
                )
            })
            .collect();
        let (mut image, from, mut skipped) = match &loaded {
            Some(s) => {
                snapshots.insert(
                    s.id,
                    SnapshotInfo {
                        size: s.size,
                        timestamp: Some(s.last_contained_timestamp),
                    },
                );
                (s.image(), s.id.end_offset, s.skipped)
            }
            None if log_start > 0 => {
                return Err(ControllerError::Inconsistent(format!(
                    "{} starts at offset {log_start} but no valid snapshot covers the offsets \
                     below it, so topics recorded there are unknown. Start-up stops rather \
                     than run without them. To start from an empty image instead (every \
                     partition folder is then kept aside as a stray), move {} away.",
                    dir.display(),
                    dir.display()
                )))
            }
            None => (MetadataImage::default(), log_start, 0),
        };
        if from > log.log_end_offset() {
            tracing::warn!(
                snapshot_end = from,
                log_end = log.log_end_offset(),
                "metadata log ends before its newest snapshot; restarting it at the snapshot"
            );
            log.truncate_fully_and_start_at(from)?;
        }
        let mut removals = Vec::new();
        let replayed = replay(&log, from, &mut image, &mut removals)?;
        log.set_high_watermark(log.log_end_offset());
        skipped += replayed.skipped;
        let disabled = (skipped > 0).then(|| {
            format!("{skipped} metadata records or batches could not be read at start; snapshots would drop them for good")
        });
        if let Some(why) = &disabled {
            tracing::error!(reason = %why, "metadata snapshots are disabled until the next start");
        }
        tracing::info!(
            snapshot = %loaded.as_ref().map_or_else(|| "none".to_string(), |s| s.id.to_string()),
            replayed_from = from,
            records = replayed.records,
            skipped,
            log_start = log.log_start_offset(),
            log_end = log.log_end_offset(),
            topics = image.topics().count(),
            "loaded metadata"
        );
        let now = clock.now_ms();
        let end = log.log_end_offset();
        let last_timestamp = replayed
            .last_timestamp
            .or(loaded.as_ref().map(|s| s.last_contained_timestamp))
            .unwrap_or(now);
        Ok(Self {
            backend: Backend::Local(Arc::new(Inner {
                log,
                dir,
                config,
                clock,
                image: Mutex::new(Applied {
                    image: Arc::new(image),
                    end,
                    last_timestamp,
                }),
                append_lock: Mutex::new(()),
                write: Mutex::new(()),
                maint: Mutex::new(()),
                snap: Mutex::new(SnapState {
                    snapshots,
                    bytes_since: replayed.bytes,
                    last_snapshot_ms: now,
                    disabled,
                    kick: false,
                    stop: false,
                }),
                wake: Condvar::new(),
                removals,
            })),
            thread: Mutex::new(None),
        })
    }

    /// Starts this node's controller of the metadata quorum (design 018)
    /// on `listener`, its CONTROLLER listener, in the runtime of `handle`:
    /// the metadata log in `data_dir` is then the quorum's Raft log.
    /// Call from a blocking thread.
    pub fn open_quorum(
        data_dir: &Path,
        config: QuorumConfig,
        listener: std::net::TcpListener,
        handle: tokio::runtime::Handle,
        clock: Arc<dyn Clock>,
    ) -> Result<Self> {
        Ok(Self {
            backend: Backend::Quorum(QuorumBackend::start(
                data_dir, config, listener, handle, clock,
            )?),
            thread: Mutex::new(None),
        })
    }

    /// The quorum controller, when the log is replicated.
    pub fn quorum(&self) -> Option<&Arc<MetadataQuorum>> {
        match &self.backend {
            Backend::Local(_) => None,
            Backend::Quorum(q) => Some(q.quorum()),
        }
    }

    fn local(&self) -> Option<&Arc<Inner>> {
        match &self.backend {
            Backend::Local(i) => Some(i),
            Backend::Quorum(_) => None,
        }
    }

    /// The current image (cheap: shared until the next change).
    pub fn image(&self) -> Arc<MetadataImage> {
        match &self.backend {
            Backend::Local(i) => i.image(),
            Backend::Quorum(q) => q.image(),
        }
    }

    /// Serializes changes: hold the guard while checking the image,
    /// appending and changing the data folder, so two changes never race on
    /// the same names and a snapshot never captures a change half done.
    pub fn lock_for_change(&self) -> MutexGuard<'_, ()> {
        match &self.backend {
            Backend::Local(i) => lock(&i.write),
            Backend::Quorum(q) => q.lock_for_change(),
        }
    }

    /// Appends `records` as one batch, fsyncs, then applies them.
    /// With the quorum: committed through the quorum leader (forwarded
    /// when this node does not lead), then this node's image includes them.
    pub fn append(&self, records: &[MetadataRecord]) -> Result<Arc<MetadataImage>> {
        match &self.backend {
            Backend::Local(i) => i.append(records),
            Backend::Quorum(q) => q.append(records),
        }
    }

    /// Hands the next block of producer ids to `broker_id` (Kafka's
    /// `ProducerIdControlManager.generateNextProducerId`): the block's
    /// `ProducerIdsRecord` is appended and fsynced before it is returned,
    /// so no id of it is ever handed out again, whatever happens after.
    /// Takes the change lock: do not call it while holding
    /// [`Self::lock_for_change`].
    pub fn allocate_producer_ids(
        &self,
        broker_id: i32,
        broker_epoch: i64,
    ) -> Result<ProducerIdsBlock> {
        let _guard = self.lock_for_change();
        // With the quorum another controller may take the same block first
        // (the leader refuses the second): then the next one is tried.
        let mut attempts = 0;
        let block = loop {
            let next = self.image().next_producer_id();
            let block = ProducerIdsBlock::following(next, broker_id).ok_or_else(|| {
                ControllerError::ProducerIdsExhausted(format!(
                    "the next block would start at {next} and end past the int64 range"
                ))
            })?;
            match self.append(&[MetadataRecord::ProducerIds {
                broker_id,
                broker_epoch,
                next_producer_id: block.next_block_first_id(),
            }]) {
                Ok(_) => break block,
                Err(ControllerError::Conflict(why)) if attempts < 5 => {
                    attempts += 1;
                    tracing::debug!(reason = %why, "producer id block taken meanwhile; retrying");
                }
                Err(e) => return Err(e),
            }
        };
        tracing::info!(
            broker_id,
            first = block.first_id,
            last = block.last_id(),
            "allocated a producer id block"
        );
        Ok(block)
    }

    /// The metadata partition log.
    pub fn log(&self) -> &Arc<Log> {
        match &self.backend {
            Backend::Local(i) => &i.log,
            Backend::Quorum(q) => q.log(),
        }
    }

    /// Topic removals replayed from the log at start (after the snapshot
    /// loaded): folders of these topics may still exist after a crash.
    /// (None with the quorum: its image is built from committed entries
    /// only, and each node's folders follow the image as it changes.)
    pub fn recorded_removals(&self) -> &[RecordedRemoval] {
        self.local().map_or(&[], |i| &i.removals)
    }

    /// The snapshots kept, oldest first.
    pub fn snapshot_ids(&self) -> Vec<SnapshotId> {
        match &self.backend {
            Backend::Local(i) => lock(&i.snap).snapshots.keys().copied().collect(),
            Backend::Quorum(q) => q
                .quorum()
                .snapshot_state()
                .0
                .and_then(|s| SnapshotId::parse_stem(&s))
                .into_iter()
                .collect(),
        }
    }

    /// Takes a snapshot now if the log has records the newest snapshot
    /// lacks (and snapshots are enabled).
    pub fn snapshot_now(&self) -> Result<Option<SnapshotId>> {
        match &self.backend {
            Backend::Local(i) => i.snapshot("requested"),
            Backend::Quorum(q) => {
                q.snapshot_now()?;
                Ok(None)
            }
        }
    }

    /// Takes a snapshot if `metadata.log.max.record.bytes.between.snapshots`
    /// or `metadata.log.max.snapshot.interval.ms` says it is due.
    /// (With the quorum, openraft's snapshot policy decides.)
    pub fn maybe_snapshot(&self) -> Result<Option<SnapshotId>> {
        self.local().map_or(Ok(None), |i| i.maybe_snapshot())
    }

    /// Deletes snapshots (oldest first, keeping the two newest) while they
    /// exceed `metadata.max.retention.ms` / `.bytes`, moving the log start
    /// to the next snapshot and deleting the segments below it. Returns the
    /// number of snapshots deleted.
    pub fn clean(&self) -> Result<usize> {
        self.local().map_or(Ok(0), |i| i.clean())
    }

    /// Starts the background thread that takes snapshots and cleans.
    pub fn start_background(&self) {
        let mut t = lock(&self.thread);
        if t.is_some() {
            return;
        }
        let Some(inner) = self.local().map(Arc::clone) else {
            return;
        };
        match std::thread::Builder::new()
            .name("sluice-metadata-snapshots".into())
            .spawn(move || inner.run())
        {
            Ok(h) => *t = Some(h),
            Err(e) => tracing::error!(error = %e, "cannot start the metadata snapshot thread"),
        }
    }

    fn stop_background(&self) {
        {
            let Some(inner) = self.local() else { return };
            let mut s = lock(&inner.snap);
            s.stop = true;
            inner.wake.notify_all();
        }
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
    }

    /// Stops the background thread and closes the log.
    pub fn shutdown(&self) -> Result<()> {
        self.stop_background();
        match &self.backend {
            Backend::Local(i) => i.log.close()?,
            Backend::Quorum(q) => q.shutdown()?,
        }
        Ok(())
    }
}

impl Drop for MetadataStore {
    fn drop(&mut self) {
        self.stop_background();
    }
}

impl Inner {
    fn image(&self) -> Arc<MetadataImage> {
        Arc::clone(&lock(&self.image).image)
    }

    fn append(&self, records: &[MetadataRecord]) -> Result<Arc<MetadataImage>> {
        if records.is_empty() {
            return Ok(self.image());
        }
        let now = self.clock.now_ms();
        let mut b = BatchBuilder::new(Compression::None, now);
        for r in records {
            b.push(Record::new(None, Some(r.encode()), now));
        }
        let mut bytes = b.build(0)?;
        let size = bytes.len() as u64;
        let _a = lock(&self.append_lock);
        let info = self.log.append_as_leader(&mut bytes, QUORUM_LEADER_EPOCH)?;
        self.log.flush()?;
        // Committed: on a one-voter quorum a record is committed once it
        // is on this voter's disk.
        self.log.set_high_watermark(self.log.log_end_offset());
        let image = {
            let mut applied = lock(&self.image);
            let mut next = (*applied.image).clone();
            for r in records {
                next.apply(r);
            }
            *applied = Applied {
                image: Arc::new(next),
                end: info.last_offset + 1,
                last_timestamp: now,
            };
            Arc::clone(&applied.image)
        };
        let mut s = lock(&self.snap);
        s.bytes_since += size;
        s.kick = true;
        self.wake.notify_all();
        Ok(image)
    }

    /// Whether the log holds records the newest snapshot does not.
    fn has_new_records(&self, s: &SnapState) -> bool {
        let covered = s.snapshots.keys().next_back().map_or(0, |id| id.end_offset);
        self.log.log_end_offset() > covered
    }

    fn maybe_snapshot(&self) -> Result<Option<SnapshotId>> {
        let reason = {
            let s = lock(&self.snap);
            if s.disabled.is_some() || !self.has_new_records(&s) {
                return Ok(None);
            }
            let interval = self.config.max_snapshot_interval_ms;
            if s.bytes_since >= self.config.max_bytes_between_snapshots {
                format!("{} bytes were appended since the last one", s.bytes_since)
            } else if interval > 0
                && self.clock.now_ms().saturating_sub(s.last_snapshot_ms) >= interval
            {
                format!("{interval} ms passed since the last one")
            } else {
                return Ok(None);
            }
        };
        self.snapshot(&reason)
    }

    /// Captures the image and log end under the change lock, then writes
    /// the snapshot without it.
    fn snapshot(&self, reason: &str) -> Result<Option<SnapshotId>> {
        let _m = lock(&self.maint);
        let (image, end, last_timestamp) = {
            let _w = lock(&self.write);
            let mut s = lock(&self.snap);
            if let Some(why) = &s.disabled {
                tracing::debug!(reason = %why, "not taking a metadata snapshot");
                return Ok(None);
            }
            if !self.has_new_records(&s) {
                return Ok(None);
            }
            s.bytes_since = 0;
            s.last_snapshot_ms = self.clock.now_ms();
            let applied = lock(&self.image).clone();
            (applied.image, applied.end, applied.last_timestamp)
        };
        let epoch = self
            .log
            .leader_epochs()
            .iter()
            .rev()
            .find(|(_, start)| *start < end)
            .map_or(0, |(e, _)| *e);
        let id = SnapshotId {
            end_offset: end,
            epoch,
        };
        let size = snapshot::write(&self.dir, id, &image, last_timestamp, self.clock.now_ms())?;
        lock(&self.snap).snapshots.insert(
            id,
            SnapshotInfo {
                size,
                timestamp: Some(last_timestamp),
            },
        );
        tracing::info!(snapshot = %id, bytes = size, topics = image.topics().count(), reason, "created metadata snapshot");
        Ok(Some(id))
    }

    fn clean(&self) -> Result<usize> {
        let _m = lock(&self.maint);
        let mut deleted = 0;
        loop {
            let (oldest, next, why) = {
                let mut s = lock(&self.snap);
                if s.snapshots.len() <= 2 {
                    break;
                }
                let mut it = s.snapshots.keys().copied();
                let (Some(oldest), Some(next)) = (it.next(), it.next()) else {
                    break;
                };
                let total: u64 = s.snapshots.values().map(|i| i.size).sum();
                let log_size = self.log.size_in_bytes();
                let max_bytes = self.config.max_retention_bytes;
                let max_ms = self.config.max_retention_ms;
                let info = s.snapshots.get_mut(&oldest).copied();
                let timestamp = match info.and_then(|i| i.timestamp) {
                    Some(t) => Some(t),
                    None => {
                        let t = snapshot::read(&self.dir, oldest)
                            .map(|r| r.last_contained_timestamp)
                            .map_err(|e| tracing::warn!(snapshot = %oldest, error = %e, "cannot read an old metadata snapshot's timestamp"))
                            .ok();
                        if let (Some(t), Some(i)) = (t, s.snapshots.get_mut(&oldest)) {
                            i.timestamp = Some(t);
                        }
                        t
                    }
                };
                let now = self.clock.now_ms();
                let why = if max_bytes >= 0 && log_size + total > max_bytes as u64 {
                    format!("log and snapshots take {} bytes, over metadata.max.retention.bytes {max_bytes}", log_size + total)
                } else if let Some(t) =
                    timestamp.filter(|t| max_ms >= 0 && now.saturating_sub(*t) > max_ms)
                {
                    format!(
                        "its newest record is {} ms old, over metadata.max.retention.ms {max_ms}",
                        now.saturating_sub(t)
                    )
                } else {
                    break;
                };
                (oldest, next, why)
            };
            // Everything below `next` is in `next` (and the newer snapshots).
            let segments = self.log.truncate_prefix_to(next.end_offset)?;
            snapshot::delete(&self.dir, oldest)?;
            lock(&self.snap).snapshots.remove(&oldest);
            deleted += 1;
            tracing::info!(snapshot = %oldest, reason = %why, log_start = self.log.log_start_offset(), deleted_segments = segments, "deleted metadata snapshot and the log below the next one");
        }
        Ok(deleted)
    }

    fn run(&self) {
        let mut next_clean = Instant::now() + CLEAN_INTERVAL;
        loop {
            let wait = {
                let s = lock(&self.snap);
                let interval = self.config.max_snapshot_interval_ms;
                let mut wait = next_clean.saturating_duration_since(Instant::now());
                if s.disabled.is_none() && interval > 0 && self.has_new_records(&s) {
                    let left = s
                        .last_snapshot_ms
                        .saturating_add(interval)
                        .saturating_sub(self.clock.now_ms())
                        .max(1);
                    wait = wait.min(Duration::from_millis(left as u64));
                }
                wait
            };
            {
                let s = lock(&self.snap);
                let (mut s, _) = self
                    .wake
                    .wait_timeout_while(s, wait, |s| !s.stop && !s.kick)
                    .unwrap_or_else(|p| p.into_inner());
                if s.stop {
                    return;
                }
                s.kick = false;
            }
            let snapped = match self.maybe_snapshot() {
                Ok(s) => s.is_some(),
                Err(e) => {
                    tracing::error!(error = %e, "taking a metadata snapshot failed");
                    false
                }
            };
            if snapped || Instant::now() >= next_clean {
                if let Err(e) = self.clean() {
                    tracing::error!(error = %e, "cleaning metadata snapshots failed");
                }
                next_clean = Instant::now() + CLEAN_INTERVAL;
            }
        }
    }
}

#[cfg(test)]
mod tests;
