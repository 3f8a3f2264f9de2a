//! openraft's log storage on the metadata log `__cluster_metadata-0`: one
//! Raft entry is one v2 batch, its term the batch's partition leader epoch
//! (design 018). Normal entries are data batches of metadata records in
//! Kafka's framing; blank entries (one per new leader) are LeaderChange
//! control batches; membership entries are control batches of type
//! [`VOTERS_CONTROL_TYPE`].
//!
//! Raft indexes are consecutive per batch while Kafka offsets count
//! records, so the index → offsets map of the entries kept is held in
//! memory (rebuilt by a scan at open; the metadata log is small, bounded by
//! snapshots). The vote, the committed log id and the purge point live in
//! `quorum-state` (see [`QuorumState`]).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::Write;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{EntryPayload, LogId, RaftLogReader, StorageError, StorageIOError, Vote};
use sluice_protocol::record::codec::decode_batch;
use sluice_protocol::record::{BatchBuilder, Compression, Record};
use sluice_storage::{Clock, Log, LogOpenOptions, ReplayEvent, TopicPartition};

use super::codec::{Reader, Writer};
use super::{Entry, MetadataChange, NodeId, TypeConfig};
use crate::error::{io_at, ControllerError, Result};
use crate::records::MetadataRecord;
use crate::snapshot::{build_control_batch, CONTROL_LEADER_CHANGE};
use crate::store::{MetadataLogConfig, METADATA_TOPIC};

/// Control record type of a membership entry (Sluice's own: Kafka's
/// KRaft voters record, type 6, has another layout).
pub const VOTERS_CONTROL_TYPE: i16 = 1000;
/// Name of the file holding the vote, commit and purge point.
pub const QUORUM_STATE_FILE: &str = "quorum-state";
const QUORUM_STATE_VERSION: u8 = 0;
/// How long a purge waits for the snapshot it follows to be installed.
const PURGE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
/// Largest batch read back from the log.
const READ_LIMIT: usize = 64 * 1024 * 1024;

/// What `quorum-state` holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuorumState {
    pub vote: Option<Vote<NodeId>>,
    pub committed: Option<LogId<NodeId>>,
    /// The last entry removed from the front of the log (in a snapshot).
    pub purged: Option<LogId<NodeId>>,
    /// Kafka offset of the entry after `purged` (0 when nothing was purged).
    pub next_offset: i64,
}

impl QuorumState {
    fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u8(QUORUM_STATE_VERSION);
        match &self.vote {
            Some(v) => {
                w.u8(1);
                w.vote(v);
            }
            None => w.u8(0),
        }
        w.opt_log_id(&self.committed);
        w.opt_log_id(&self.purged);
        w.i64(self.next_offset);
        w.buf
    }

    fn decode(b: &[u8]) -> std::result::Result<Self, super::codec::CodecError> {
        let mut r = Reader::new(b);
        let version = r.u8()?;
        if version != QUORUM_STATE_VERSION {
            return Err(super::codec::CodecError(format!(
                "quorum-state version {version}"
            )));
        }
        let vote = if r.bool()? { Some(r.vote()?) } else { None };
        let s = Self {
            vote,
            committed: r.opt_log_id()?,
            purged: r.opt_log_id()?,
            next_offset: r.i64()?,
        };
        r.finish()?;
        Ok(s)
    }

    /// Reads `dir/quorum-state` (default when absent).
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join(QUORUM_STATE_FILE);
        match std::fs::read(&path) {
            Ok(b) => Self::decode(&b).map_err(|e| ControllerError::Snapshot {
                path,
                reason: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(io_at(&path)(e)),
        }
    }

    /// Writes it durably: temporary file, fsync, rename, fsync of the folder.
    pub fn store(&self, dir: &Path) -> Result<()> {
        let path = dir.join(QUORUM_STATE_FILE);
        let tmp = dir.join(format!("{QUORUM_STATE_FILE}.tmp"));
        {
            let mut f = std::fs::File::create(&tmp).map_err(io_at(&tmp))?;
            f.write_all(&self.encode()).map_err(io_at(&tmp))?;
            f.sync_all().map_err(io_at(&tmp))?;
        }
        std::fs::rename(&tmp, &path).map_err(io_at(&path))?;
        sluice_storage::checkpoint::sync_dir(dir)?;
        Ok(())
    }
}

/// One entry kept in the log, with its Kafka offsets.
#[derive(Debug, Clone)]
struct Stored {
    entry: Entry,
    base_offset: i64,
    /// Offset after its last record.
    end_offset: i64,
}

#[derive(Debug)]
struct Inner {
    log: Arc<Log>,
    dir: PathBuf,
    clock: Arc<dyn Clock>,
    state: QuorumState,
    entries: BTreeMap<u64, Stored>,
    /// Offset after the last entry of snapshots this node built or
    /// installed, by last index: where the log restarts when a purge goes
    /// past the entries kept (a snapshot installed from the leader).
    snapshot_ends: BTreeMap<u64, i64>,
}

/// The Raft log store; clones share it (one is the log reader).
#[derive(Debug, Clone)]
pub struct LogStore {
    inner: Arc<Mutex<Inner>>,
}

/// The id of the last entry, else of the last purged one.
fn last_log_id(i: &Inner) -> Option<LogId<NodeId>> {
    i.entries
        .last_key_value()
        .map(|(_, s)| s.entry.log_id)
        .or(i.state.purged)
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn write_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::write_logs(&e).into()
}

fn vote_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::write_vote(&e).into()
}

/// The batch an entry is written as (offsets and epoch are set by the
/// append).
fn entry_batch(e: &Entry, now_ms: i64) -> Result<Vec<u8>> {
    match &e.payload {
        EntryPayload::Normal(c) => {
            let mut b = BatchBuilder::new(Compression::None, now_ms);
            for r in &c.records {
                b.push(Record::new(None, Some(r.encode()), now_ms));
            }
            if c.records.is_empty() {
                // A batch holds at least one record: an empty change is a
                // LeaderChange-like no-op. Refused earlier; kept safe here.
                return Err(ControllerError::Record("an empty metadata change".into()));
            }
            Ok(b.build(0)?)
        }
        EntryPayload::Blank => {
            // LeaderChangeMessage v0 (flexible): Version, LeaderId -1
            // (the entry does not name it), empty Voters and
            // GrantingVoters, no tagged fields.
            let mut v = Vec::new();
            v.extend_from_slice(&0i16.to_be_bytes());
            v.extend_from_slice(&(-1i32).to_be_bytes());
            v.extend_from_slice(&[1, 1, 0]);
            build_control_batch(CONTROL_LEADER_CHANGE, v, now_ms)
        }
        EntryPayload::Membership(m) => {
            let mut w = Writer::default();
            w.membership(m);
            build_control_batch(VOTERS_CONTROL_TYPE, w.buf, now_ms)
        }
    }
}

/// The entry a batch of the log holds, given its index.
fn batch_entry(index: u64, epoch: i32, control: bool, raw: &[u8]) -> Result<Entry> {
    let term = u64::try_from(epoch).map_err(|_| {
        ControllerError::Record(format!("negative epoch {epoch} in the quorum log"))
    })?;
    let log_id = LogId::new(openraft::CommittedLeaderId::new(term, 0), index);
    let d = decode_batch(raw, READ_LIMIT)?;
    if control {
        let [rec] = d.records.as_slice() else {
            return Err(ControllerError::Record(
                "control batch without one record".into(),
            ));
        };
        let key = rec.record.key.as_deref().unwrap_or_default();
        if key.len() < 4 {
            return Err(ControllerError::Record(
                "control record with a short key".into(),
            ));
        }
        let kind = i16::from_be_bytes([key[2], key[3]]);
        let payload = match kind {
            CONTROL_LEADER_CHANGE => EntryPayload::Blank,
            VOTERS_CONTROL_TYPE => {
                let v = rec.record.value.as_deref().unwrap_or_default();
                let mut r = Reader::new(v);
                let m = r
                    .membership()
                    .map_err(|e| ControllerError::Record(e.to_string()))?;
                EntryPayload::Membership(m)
            }
            k => {
                return Err(ControllerError::Record(format!(
                    "control record type {k} in the quorum log"
                )))
            }
        };
        return Ok(Entry { log_id, payload });
    }
    let mut records = Vec::with_capacity(d.records.len());
    for r in d.records {
        let v = r
            .record
            .value
            .ok_or_else(|| ControllerError::Record("null metadata record".into()))?;
        records.push(MetadataRecord::decode(&v)?);
    }
    Ok(Entry {
        log_id,
        payload: EntryPayload::Normal(MetadataChange { records }),
    })
}

/// Whether `dir` holds records or snapshots (written without the quorum).
fn has_single_node_metadata(dir: &Path) -> Result<bool> {
    let entries = std::fs::read_dir(dir).map_err(io_at(dir))?;
    for e in entries {
        let e = e.map_err(io_at(dir))?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        let size = e.metadata().map_or(0, |m| m.len());
        if name.ends_with(crate::snapshot::SUFFIX) || (name.ends_with(".log") && size > 0) {
            return Ok(true);
        }
    }
    Ok(false)
}

impl LogStore {
    /// Opens the metadata log in `<data_dir>/__cluster_metadata-0` and
    /// rebuilds the index → offsets map from `quorum-state`'s purge point.
    pub fn open(
        data_dir: &Path,
        config: &MetadataLogConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self> {
        let tp = TopicPartition::new(METADATA_TOPIC, 0);
        let dir = data_dir.join(tp.dir_name());
        std::fs::create_dir_all(&dir).map_err(io_at(&dir))?;
        let fresh = !dir.join(QUORUM_STATE_FILE).exists();
        let state = QuorumState::load(&dir)?;
        if fresh && has_single_node_metadata(&dir)? {
            return Err(ControllerError::Inconsistent(format!(
                "{} holds the metadata log of a single node (no quorum-state): a quorum \
                 cannot adopt it yet. Start this node without other voters in \
                 controller.quorum.voters, or move the folder away to join the quorum empty.",
                dir.display()
            )));
        }
        if fresh {
            // From now on the folder is the quorum's.
            state.store(&dir)?;
        }
        let log = Arc::new(Log::open(
            &dir,
            tp,
            config.log_config(),
            LogOpenOptions::default(),
            Arc::clone(&clock),
        )?);
        if log.log_end_offset() < state.next_offset {
            // Purged past the log end (a snapshot was installed), or the
            // crash came between quorum-state and the log change.
            log.truncate_fully_and_start_at(state.next_offset)?;
        } else if log.log_start_offset() > state.next_offset {
            return Err(ControllerError::Inconsistent(format!(
                "{} starts at offset {} but quorum-state says the entries from offset {} are kept",
                dir.display(),
                log.log_start_offset(),
                state.next_offset
            )));
        }
        let mut entries = BTreeMap::new();
        let mut next_index = state.purged.map_or(0, |p| p.index + 1);
        let mut failure = None;
        log.replay(state.next_offset, |event| {
            if failure.is_some() {
                return;
            }
            match event {
                ReplayEvent::Batch { header: h, raw } => {
                    if h.base_offset < state.next_offset {
                        return;
                    }
                    match batch_entry(next_index, h.partition_leader_epoch, h.is_control(), raw) {
                        Ok(entry) => {
                            entries.insert(
                                next_index,
                                Stored {
                                    entry,
                                    base_offset: h.base_offset,
                                    end_offset: h.last_offset() + 1,
                                },
                            );
                            next_index += 1;
                        }
                        Err(e) => failure = Some(format!("batch at offset {}: {e}", h.base_offset)),
                    }
                }
                ReplayEvent::Corrupt { header, error } => {
                    failure = Some(format!(
                        "corrupt batch at offset {}: {error}",
                        header.base_offset
                    ));
                }
                ReplayEvent::Unreadable { offset, error, .. } => {
                    failure = Some(format!("unreadable bytes at offset {offset}: {error}"));
                }
            }
        })?;
        if let Some(why) = failure {
            // Kafka's log recovery already cut a torn tail; what is left
            // unreadable is damage inside the log: a Raft log with a hole
            // cannot be served, so start-up stops.
            return Err(ControllerError::Inconsistent(format!(
                "the quorum's metadata log in {} is damaged: {why}",
                dir.display()
            )));
        }
        // The committed entries are the log's high watermark.
        let committed_end = state
            .committed
            .and_then(|c| entries.get(&c.index))
            .map_or(state.next_offset, |s: &Stored| s.end_offset);
        log.set_high_watermark(committed_end.max(state.next_offset));
        tracing::info!(
            entries = entries.len(),
            purged = ?state.purged,
            log_start = log.log_start_offset(),
            log_end = log.log_end_offset(),
            "opened the quorum's metadata log"
        );
        Ok(Self {
            inner: Arc::new(Mutex::new(Inner {
                log,
                dir,
                clock,
                state,
                entries,
                snapshot_ends: BTreeMap::new(),
            })),
        })
    }

    /// The metadata log's folder.
    pub fn dir(&self) -> PathBuf {
        lock(&self.inner).dir.clone()
    }

    /// The metadata partition log.
    pub fn log(&self) -> Arc<Log> {
        Arc::clone(&lock(&self.inner).log)
    }

    /// Kafka offset after the entry at `index`, if it is kept.
    pub fn end_offset_of(&self, index: u64) -> Option<i64> {
        let i = lock(&self.inner);
        i.entries
            .get(&index)
            .map(|s| s.end_offset)
            .or_else(|| i.snapshot_ends.get(&index).copied())
    }

    /// Index of the last entry of the log (kept or purged), if any.
    pub fn last_index(&self) -> Option<u64> {
        let i = lock(&self.inner);
        i.entries
            .last_key_value()
            .map(|(&index, _)| index)
            .or(i.state.purged.map(|p| p.index))
    }

    /// Records that a snapshot ends (exclusively) at `end_offset` after
    /// the entry `index`, for a later purge up to it.
    pub fn note_snapshot_end(&self, index: u64, end_offset: i64) {
        lock(&self.inner).snapshot_ends.insert(index, end_offset);
    }

    /// The id of the last entry (the last purged one when none is left).
    pub fn last_log_id(&self) -> Option<LogId<NodeId>> {
        last_log_id(&lock(&self.inner))
    }

    /// A copy of `quorum-state` as it is now.
    pub fn state(&self) -> QuorumState {
        lock(&self.inner).state.clone()
    }

    fn entries_in(&self, range: impl RangeBounds<u64>) -> Vec<Entry> {
        lock(&self.inner)
            .entries
            .range(range)
            .map(|(_, s)| s.entry.clone())
            .collect()
    }

    fn append_now(&self, entries: Vec<Entry>) -> Result<()> {
        let mut i = lock(&self.inner);
        let now = i.clock.now_ms();
        for e in entries {
            let epoch = i32::try_from(e.log_id.leader_id.term).map_err(|_| {
                ControllerError::Record(format!(
                    "term {} beyond a Kafka epoch",
                    e.log_id.leader_id.term
                ))
            })?;
            if let Some((&last, _)) = i.entries.last_key_value() {
                if e.log_id.index != last + 1 {
                    return Err(ControllerError::Inconsistent(format!(
                        "quorum log append at index {} after {last}",
                        e.log_id.index
                    )));
                }
            }
            let mut bytes = entry_batch(&e, now)?;
            let info = i.log.append_as_leader(&mut bytes, epoch)?;
            i.entries.insert(
                e.log_id.index,
                Stored {
                    entry: e,
                    base_offset: info.base_offset,
                    end_offset: info.last_offset + 1,
                },
            );
        }
        i.log.flush()?;
        Ok(())
    }

    fn truncate_now(&self, log_id: LogId<NodeId>) -> Result<()> {
        let mut i = lock(&self.inner);
        let Some(first) = i.entries.get(&log_id.index).map(|s| s.base_offset) else {
            return Ok(());
        };
        i.log.truncate_to(first)?;
        i.log.flush()?;
        i.entries.split_off(&log_id.index);
        Ok(())
    }

    /// Purges up to `log_id`; `false` when its offset is not known yet
    /// (a snapshot from the leader still being installed).
    fn purge_now(&self, log_id: LogId<NodeId>) -> Result<bool> {
        let mut i = lock(&self.inner);
        let next_offset = match i.entries.get(&log_id.index) {
            Some(s) => s.end_offset,
            None => match i.snapshot_ends.get(&log_id.index) {
                Some(&e) => e,
                None => return Ok(false),
            },
        };
        let mut state = i.state.clone();
        state.purged = Some(log_id);
        state.next_offset = next_offset;
        state.store(&i.dir)?;
        i.state = state;
        let kept = i.entries.split_off(&(log_id.index + 1));
        i.entries = kept;
        // What is purged is in a snapshot, hence committed.
        i.log
            .set_high_watermark(next_offset.max(i.log.high_watermark()));
        if next_offset > i.log.log_end_offset() {
            i.log.truncate_fully_and_start_at(next_offset)?;
        } else {
            i.log.truncate_prefix_to(next_offset)?;
        }
        i.snapshot_ends = i.snapshot_ends.split_off(&log_id.index);
        Ok(true)
    }

    fn update_state(&self, f: impl FnOnce(&mut QuorumState)) -> Result<()> {
        let mut i = lock(&self.inner);
        let mut s = i.state.clone();
        f(&mut s);
        if s != i.state {
            s.store(&i.dir)?;
            i.state = s;
        }
        Ok(())
    }

    /// Sets the metadata log's high watermark to the end of the committed
    /// entries (what DescribeLogDirs and dump tools see).
    fn set_committed_offset(&self, committed: Option<LogId<NodeId>>) {
        let i = lock(&self.inner);
        if let Some(c) = committed {
            if let Some(s) = i.entries.get(&c.index) {
                i.log.set_high_watermark(s.end_offset);
            }
        }
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> std::result::Result<Vec<Entry>, StorageError<NodeId>> {
        Ok(self.entries_in(range))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(
        &mut self,
    ) -> std::result::Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let i = lock(&self.inner);
        Ok(LogState {
            last_purged_log_id: i.state.purged,
            last_log_id: last_log_id(&i),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(
        &mut self,
        vote: &Vote<NodeId>,
    ) -> std::result::Result<(), StorageError<NodeId>> {
        let vote = *vote;
        self.update_state(|s| s.vote = Some(vote)).map_err(vote_err)
    }

    async fn read_vote(
        &mut self,
    ) -> std::result::Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(lock(&self.inner).state.vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> std::result::Result<(), StorageError<NodeId>> {
        self.update_state(|s| s.committed = committed)
            .map_err(write_err)?;
        self.set_committed_offset(committed);
        Ok(())
    }

    async fn read_committed(
        &mut self,
    ) -> std::result::Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(lock(&self.inner).state.committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> std::result::Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        match self.append_now(entries) {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(write_err(e))
            }
        }
    }

    async fn truncate(
        &mut self,
        log_id: LogId<NodeId>,
    ) -> std::result::Result<(), StorageError<NodeId>> {
        self.truncate_now(log_id).map_err(write_err)
    }

    async fn purge(
        &mut self,
        log_id: LogId<NodeId>,
    ) -> std::result::Result<(), StorageError<NodeId>> {
        // openraft issues the purge that follows a snapshot installation
        // without waiting for the state machine to finish installing it:
        // the log's new start offset is the snapshot's end, known once it
        // is written.
        let deadline = std::time::Instant::now() + PURGE_WAIT;
        loop {
            if self.purge_now(log_id).map_err(write_err)? {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(write_err(ControllerError::Inconsistent(format!(
                    "purge up to index {} which is neither kept nor in a snapshot",
                    log_id.index
                ))));
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}
