//! openraft's state machine: the [`MetadataImage`] built by the committed
//! entries, and its snapshots, which are design 004's `.checkpoint` files
//! (built and read by [`crate::snapshot`]) with their Raft meta beside them
//! in `<stem>.quorum`. The two newest snapshots are kept.
//!
//! At start the image is the newest snapshot's (or empty): openraft then
//! applies the committed entries after it, so an entry appended but never
//! committed never reaches an image.

use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, EntryPayload, LogId, RaftSnapshotBuilder, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership,
};
use sluice_storage::Clock;
use tokio::sync::watch;

use super::codec::{Reader, Writer};
use super::log_store::LogStore;
use super::{Entry, NodeId, TypeConfig};
use crate::error::{io_at, ControllerError, Result};
use crate::image::MetadataImage;
use crate::snapshot::{self, SnapshotFile, SnapshotId};

/// Suffix of the file holding a snapshot's Raft meta.
pub const META_SUFFIX: &str = ".quorum";
const META_VERSION: u8 = 0;
/// Snapshots kept (the newest and one before it, as design 004).
const SNAPSHOTS_KEPT: usize = 2;

/// What the state machine has applied, published to followers of the image.
#[derive(Debug, Clone)]
pub struct Applied {
    pub image: Arc<MetadataImage>,
    pub last_applied: Option<LogId<NodeId>>,
    pub membership: StoredMembership<NodeId, BasicNode>,
    /// Kafka offset after the last applied entry.
    pub end_offset: i64,
    /// Time the last entry was applied (the snapshot header's
    /// LastContainedLogTimestamp).
    pub last_timestamp: i64,
}

#[derive(Debug)]
struct Shared {
    dir: PathBuf,
    clock: Arc<dyn Clock>,
    snapshot: Mutex<Option<SnapshotMeta<NodeId, BasicNode>>>,
    applied: watch::Sender<Applied>,
}

/// The state machine; clones share it (one is the snapshot builder).
#[derive(Debug, Clone)]
pub struct StateMachine {
    shared: Arc<Shared>,
    log: LogStore,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn sm_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::write_state_machine(&e).into()
}

fn snap_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::write_snapshot(None, &e).into()
}

fn meta_path(dir: &Path, id: SnapshotId) -> PathBuf {
    dir.join(format!("{}{META_SUFFIX}", id.stem()))
}

fn write_meta(dir: &Path, id: SnapshotId, meta: &SnapshotMeta<NodeId, BasicNode>) -> Result<()> {
    let mut w = Writer::default();
    w.u8(META_VERSION);
    w.snapshot_meta(meta);
    let path = meta_path(dir, id);
    let tmp = dir.join(format!("{}{META_SUFFIX}.tmp", id.stem()));
    {
        let mut f = std::fs::File::create(&tmp).map_err(io_at(&tmp))?;
        f.write_all(&w.buf).map_err(io_at(&tmp))?;
        f.sync_all().map_err(io_at(&tmp))?;
    }
    std::fs::rename(&tmp, &path).map_err(io_at(&path))?;
    Ok(())
}

fn read_meta(dir: &Path, id: SnapshotId) -> Result<SnapshotMeta<NodeId, BasicNode>> {
    let path = meta_path(dir, id);
    let b = std::fs::read(&path).map_err(io_at(&path))?;
    let mut r = Reader::new(&b);
    let parsed = r
        .u8()
        .and_then(|v| {
            if v == META_VERSION {
                Ok(())
            } else {
                Err(super::codec::CodecError(format!("version {v}")))
            }
        })
        .and_then(|()| r.snapshot_meta())
        .and_then(|m| r.finish().map(|()| m));
    parsed.map_err(|e| ControllerError::Snapshot {
        path,
        reason: e.to_string(),
    })
}

impl StateMachine {
    /// Loads the newest snapshot that has its Raft meta and reads whole
    /// (older ones are tried in turn); an empty image without one.
    pub fn open(log: LogStore, clock: Arc<dyn Clock>) -> Result<Self> {
        let dir = log.dir();
        let mut ids = Vec::new();
        for (kind, path) in snapshot::scan(&dir)? {
            match kind {
                SnapshotFile::Complete(id) => ids.push(id),
                SnapshotFile::Partial | SnapshotFile::Deleted => {
                    std::fs::remove_file(&path).map_err(io_at(&path))?;
                }
                SnapshotFile::Corrupt => {}
            }
        }
        ids.sort_unstable();
        let mut applied = Applied {
            image: Arc::new(MetadataImage::default()),
            last_applied: None,
            membership: StoredMembership::default(),
            end_offset: 0,
            last_timestamp: clock.now_ms(),
        };
        let mut current = None;
        while let Some(id) = ids.pop() {
            let loaded = read_meta(&dir, id).and_then(|m| Ok((m, snapshot::read(&dir, id)?)));
            match loaded {
                Ok((meta, snap)) => {
                    if let Some(last) = meta.last_log_id {
                        log.note_snapshot_end(last.index, id.end_offset);
                    }
                    applied = Applied {
                        image: Arc::new(snap.image()),
                        last_applied: meta.last_log_id,
                        membership: meta.last_membership.clone(),
                        end_offset: id.end_offset,
                        last_timestamp: snap.last_contained_timestamp,
                    };
                    current = Some(meta);
                    break;
                }
                Err(e) => {
                    tracing::error!(snapshot = %id, error = %e, "quorum snapshot unusable; trying the previous one");
                }
            }
        }
        tracing::info!(
            snapshot = ?current.as_ref().map(|m| m.snapshot_id.clone()),
            last_applied = ?applied.last_applied,
            topics = applied.image.topics().count(),
            "loaded the quorum's state machine"
        );
        let (tx, _) = watch::channel(applied);
        Ok(Self {
            shared: Arc::new(Shared {
                dir,
                clock,
                snapshot: Mutex::new(current),
                applied: tx,
            }),
            log,
        })
    }

    /// What has been applied, as a watch (the image and its log id).
    pub fn subscribe(&self) -> watch::Receiver<Applied> {
        self.shared.applied.subscribe()
    }

    /// What has been applied now.
    pub fn applied(&self) -> Applied {
        self.shared.applied.borrow().clone()
    }

    /// The newest snapshot's meta.
    pub fn current_snapshot(&self) -> Option<SnapshotMeta<NodeId, BasicNode>> {
        lock(&self.shared.snapshot).clone()
    }

    fn build(&self) -> Result<Snapshot<TypeConfig>> {
        let a = self.applied();
        let epoch = a.last_applied.map_or(0, |l| l.leader_id.term);
        let id = SnapshotId {
            end_offset: a.end_offset,
            epoch: i32::try_from(epoch).unwrap_or(i32::MAX),
        };
        let bytes = snapshot::encode(id, &a.image, a.last_timestamp, self.shared.clock.now_ms())?;
        let meta = SnapshotMeta {
            last_log_id: a.last_applied,
            last_membership: a.membership.clone(),
            snapshot_id: id.stem(),
        };
        self.store(id, &meta, &bytes)?;
        tracing::info!(snapshot = %id, last = ?a.last_applied, bytes = bytes.len(), "built a quorum snapshot");
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }

    /// Writes a snapshot's meta then its checkpoint, makes it current and
    /// deletes the ones beyond the newest two.
    fn store(
        &self,
        id: SnapshotId,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        bytes: &[u8],
    ) -> Result<()> {
        let dir = &self.shared.dir;
        write_meta(dir, id, meta)?;
        snapshot::write_encoded(dir, id, bytes)?;
        if let Some(last) = meta.last_log_id {
            self.log.note_snapshot_end(last.index, id.end_offset);
        }
        *lock(&self.shared.snapshot) = Some(meta.clone());
        let mut ids: Vec<SnapshotId> = snapshot::scan(dir)?
            .into_iter()
            .filter_map(|(k, _)| match k {
                SnapshotFile::Complete(i) => Some(i),
                _ => None,
            })
            .collect();
        ids.sort_unstable();
        let excess = ids.len().saturating_sub(SNAPSHOTS_KEPT);
        for old in ids.into_iter().take(excess) {
            snapshot::delete(dir, old)?;
            let p = meta_path(dir, old);
            if let Err(e) = std::fs::remove_file(&p) {
                tracing::warn!(path = %p.display(), error = %e, "cannot remove an old snapshot's meta");
            }
        }
        Ok(())
    }

    fn install(&self, meta: &SnapshotMeta<NodeId, BasicNode>, bytes: &[u8]) -> Result<()> {
        let id = SnapshotId::parse_stem(&meta.snapshot_id).ok_or_else(|| {
            ControllerError::Record(format!(
                "snapshot id {:?} is not a checkpoint stem",
                meta.snapshot_id
            ))
        })?;
        self.store(id, meta, bytes)?;
        let snap = snapshot::read(&self.shared.dir, id)?;
        let applied = Applied {
            image: Arc::new(snap.image()),
            last_applied: meta.last_log_id,
            membership: meta.last_membership.clone(),
            end_offset: id.end_offset,
            last_timestamp: snap.last_contained_timestamp,
        };
        tracing::info!(snapshot = %id, last = ?meta.last_log_id, topics = applied.image.topics().count(), "installed a quorum snapshot from the leader");
        self.shared.applied.send_replace(applied);
        Ok(())
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(
        &mut self,
    ) -> std::result::Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        self.build().map_err(snap_err)
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> std::result::Result<
        (Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>),
        StorageError<NodeId>,
    > {
        let a = self.applied();
        Ok((a.last_applied, a.membership))
    }

    async fn apply<I>(
        &mut self,
        entries: I,
    ) -> std::result::Result<Vec<Arc<MetadataImage>>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut a = self.applied();
        let mut out = Vec::new();
        let now = self.shared.clock.now_ms();
        for e in entries {
            match e.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(change) => {
                    let mut next = (*a.image).clone();
                    for r in &change.records {
                        next.apply(r);
                    }
                    a.image = Arc::new(next);
                }
                EntryPayload::Membership(m) => {
                    a.membership = StoredMembership::new(Some(e.log_id), m);
                }
            }
            a.last_applied = Some(e.log_id);
            match self.log.end_offset_of(e.log_id.index) {
                Some(end) => a.end_offset = end,
                None => {
                    return Err(sm_err(ControllerError::Inconsistent(format!(
                        "applying entry {} that the log does not hold",
                        e.log_id
                    ))))
                }
            }
            a.last_timestamp = now;
            out.push(Arc::clone(&a.image));
        }
        self.shared.applied.send_replace(a);
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> std::result::Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> std::result::Result<(), StorageError<NodeId>> {
        self.install(meta, snapshot.get_ref()).map_err(snap_err)
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> std::result::Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let Some(meta) = self.current_snapshot() else {
            return Ok(None);
        };
        let Some(id) = SnapshotId::parse_stem(&meta.snapshot_id) else {
            return Ok(None);
        };
        let path = self.shared.dir.join(id.file_name());
        let bytes = std::fs::read(&path)
            .map_err(|e| StorageError::from(StorageIOError::read_snapshot(None, &e)))?;
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        }))
    }
}
