//! The state directory (Kafka's `StateDirectory`): where tasks keep their
//! local state, `state.dir/<application.id>/<task id>/`.
//!
//! * Each task folder holds a `.lock` file. A thread owns a task's folder
//!   while it holds an OS file lock on it ([`TaskDirLock`]), so two threads
//!   or two instances sharing a `state.dir` can never open the same task's
//!   stores; the lock goes when the lock value is dropped or the process
//!   dies.
//! * Each task folder holds a `.checkpoint` ([`OffsetCheckpoint`]) with the
//!   changelog offsets its persistent stores hold.
//! * Persistent stores live in `<task dir>/fjall/<store>` (Kafka uses
//!   `rocksdb/<store>`), see [`store_dir`](StateDirectory::store_dir).
//! * The application folder holds `kafka-streams-process-metadata` with the
//!   instance's process id, so the id (and with it the assignor's
//!   stickiness) survives restarts, and a `.lock` held while an instance
//!   uses the folder.
//! * [`clean_removed_tasks`](StateDirectory::clean_removed_tasks) deletes
//!   task folders nobody holds and nobody touched for `state.cleanup.delay.ms`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sluice_client::TopicPartition;
use uuid::Uuid;

use super::checkpoint::{OffsetCheckpoint, CHECKPOINT_FILE_NAME};
use crate::error::{Result, StreamsError};
use crate::task_id::TaskId;

/// The lock file of a task folder and of the application folder.
pub const LOCK_FILE_NAME: &str = ".lock";
/// The file holding the process id in the application folder.
pub const PROCESS_FILE_NAME: &str = "kafka-streams-process-metadata";
/// The folder of persistent stores inside a task folder.
pub const STORES_DIR_NAME: &str = "fjall";

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StreamsError {
    let path = path.to_path_buf();
    move |source| StreamsError::StateDir { path, source }
}

/// `state.dir/<application.id>`.
#[derive(Debug)]
pub struct StateDirectory {
    app_dir: PathBuf,
    /// The application folder's lock, once [`initialize_process_id`](Self::initialize_process_id) took it.
    app_lock: std::sync::Mutex<Option<File>>,
}

/// A held lock on one task folder; dropping it releases the lock.
#[derive(Debug)]
pub struct TaskDirLock {
    task: TaskId,
    dir: PathBuf,
    _file: File,
}

impl TaskDirLock {
    /// The task.
    pub fn task(&self) -> TaskId {
        self.task
    }

    /// The task folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Takes an exclusive OS lock on `path` (created if missing); `Ok(None)` if
/// another holder has it.
fn try_lock_file(path: &Path) -> Result<Option<File>> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(io_err(path))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(io_err(path)(e)),
    }
}

impl StateDirectory {
    /// Opens (creating it) `state_dir/<application_id>`.
    pub fn new(state_dir: &Path, application_id: &str) -> Result<Self> {
        if application_id.is_empty() || application_id.contains(['/', '\\']) {
            return Err(StreamsError::Config(format!(
                "application.id {application_id:?} cannot name a folder"
            )));
        }
        let app_dir = state_dir.join(application_id);
        fs::create_dir_all(&app_dir).map_err(io_err(&app_dir))?;
        Ok(Self {
            app_dir,
            app_lock: std::sync::Mutex::new(None),
        })
    }

    /// `state.dir/<application.id>`.
    pub fn app_dir(&self) -> &Path {
        &self.app_dir
    }

    /// Locks the application folder for this instance and returns its
    /// process id, read from `kafka-streams-process-metadata` or created
    /// there. Fails if another instance holds the folder.
    pub fn initialize_process_id(&self) -> Result<Uuid> {
        let mut app_lock = self.app_lock.lock().unwrap_or_else(|e| e.into_inner());
        if app_lock.is_none() {
            let lock_path = self.app_dir.join(LOCK_FILE_NAME);
            match try_lock_file(&lock_path)? {
                Some(f) => *app_lock = Some(f),
                None => {
                    return Err(StreamsError::IllegalState(format!(
                        "unable to initialize state: the state directory {} is locked by \
                         another Kafka Streams instance running in the same state directory",
                        self.app_dir.display()
                    )))
                }
            }
        }
        let path = self.app_dir.join(PROCESS_FILE_NAME);
        if let Ok(text) = fs::read_to_string(&path) {
            if let Some(id) = parse_process_file(&text) {
                return Ok(id);
            }
            tracing::warn!(path = %path.display(), "unreadable process file; creating a new process id");
        }
        let id = Uuid::new_v4();
        let text = format!("{{\"version\":0,\"processId\":\"{id}\"}}\n");
        let tmp = path.with_extension("tmp");
        fs::write(&tmp, text).map_err(io_err(&tmp))?;
        fs::rename(&tmp, &path).map_err(io_err(&path))?;
        Ok(id)
    }

    /// Releases the application folder's lock (when the instance closes).
    pub fn release(&self) {
        *self.app_lock.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The folder of `task` (not created).
    pub fn task_dir(&self, task: TaskId) -> PathBuf {
        self.app_dir.join(task.to_string())
    }

    /// The folder of `task`, created if missing.
    pub fn get_or_create_task_dir(&self, task: TaskId) -> Result<PathBuf> {
        let dir = self.task_dir(task);
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        Ok(dir)
    }

    /// The folder of persistent store `store` of `task`.
    pub fn store_dir(&self, task: TaskId, store: &str) -> PathBuf {
        self.task_dir(task).join(STORES_DIR_NAME).join(store)
    }

    /// The checkpoint file of `task`.
    pub fn checkpoint(&self, task: TaskId) -> OffsetCheckpoint {
        OffsetCheckpoint::new(self.task_dir(task).join(CHECKPOINT_FILE_NAME))
    }

    /// Locks `task`'s folder (creating it); `Ok(None)` if another thread or
    /// instance holds it.
    pub fn lock(&self, task: TaskId) -> Result<Option<TaskDirLock>> {
        let dir = self.get_or_create_task_dir(task)?;
        Ok(
            try_lock_file(&dir.join(LOCK_FILE_NAME))?.map(|file| TaskDirLock {
                task,
                dir,
                _file: file,
            }),
        )
    }

    /// Every task folder, by task id (folders not named `<n>_<n>` are ignored).
    pub fn list_task_dirs(&self) -> Result<BTreeMap<TaskId, PathBuf>> {
        let mut out = BTreeMap::new();
        for entry in fs::read_dir(&self.app_dir).map_err(io_err(&self.app_dir))? {
            let entry = entry.map_err(io_err(&self.app_dir))?;
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if let Some(task) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<TaskId>().ok())
            {
                out.insert(task, entry.path());
            }
        }
        Ok(out)
    }

    /// For every task folder with a readable checkpoint: the sum of its
    /// changelog offsets (what the assignor weighs state by). Folders with
    /// no or a corrupt checkpoint are left out.
    pub fn task_offset_sums(&self) -> Result<BTreeMap<TaskId, i64>> {
        let mut out = BTreeMap::new();
        for task in self.list_task_dirs()?.into_keys() {
            if let Ok(Some(offsets)) = self.checkpoint(task).read() {
                out.insert(task, offsets.values().map(|o| o + 1).sum());
            }
        }
        Ok(out)
    }

    /// Deletes the folders of tasks not in `keep`, not locked by anyone, and
    /// unmodified for `cleanup_delay` (`state.cleanup.delay.ms`). Returns
    /// the tasks removed.
    pub fn clean_removed_tasks(
        &self,
        keep: &BTreeSet<TaskId>,
        cleanup_delay: Duration,
    ) -> Result<Vec<TaskId>> {
        let mut removed = Vec::new();
        for (task, dir) in self.list_task_dirs()? {
            if keep.contains(&task) {
                continue;
            }
            let Some(lock) = self.lock(task)? else {
                continue;
            };
            let age = fs::metadata(&dir)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| SystemTime::now().duration_since(t).ok())
                .unwrap_or(Duration::ZERO);
            if age >= cleanup_delay {
                tracing::info!(%task, dir = %dir.display(), "deleting obsolete state directory");
                fs::remove_dir_all(&dir).map_err(io_err(&dir))?;
                removed.push(task);
            }
            drop(lock);
        }
        Ok(removed)
    }

    /// Deletes `task`'s persistent store `store` and its checkpoint entry
    /// `changelog` (the store is then restored from scratch). The caller
    /// holds the task's lock.
    pub fn wipe_store(
        &self,
        task: TaskId,
        store: &str,
        changelog: Option<&TopicPartition>,
    ) -> Result<()> {
        let dir = self.store_dir(task, store);
        match fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&dir)(e)),
        }
        let cp = self.checkpoint(task);
        if let (Some(tp), Ok(Some(mut offsets))) = (changelog, cp.read()) {
            if offsets.remove(tp).is_some() {
                cp.write(&offsets)?;
            }
        }
        Ok(())
    }
}

/// Reads the process id from `{"version":0,"processId":"<uuid>"}`.
fn parse_process_file(text: &str) -> Option<Uuid> {
    let start = text.find("\"processId\"")? + "\"processId\"".len();
    let rest = text[start..].trim_start().strip_prefix(':')?.trim_start();
    let rest = rest.strip_prefix('"')?;
    let end = rest.find('"')?;
    Uuid::parse_str(&rest[..end]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_folders_are_locked_exclusively() {
        let root = tempfile::tempdir().expect("tempdir");
        let sd = StateDirectory::new(root.path(), "app").expect("state dir");
        let t = TaskId::new(0, 3);
        let held = sd.lock(t).expect("lock").expect("free");
        assert_eq!(held.dir(), root.path().join("app").join("0_3"));
        assert!(held.dir().join(LOCK_FILE_NAME).exists());
        // A second instance on the same state.dir cannot take it.
        let other = StateDirectory::new(root.path(), "app").expect("state dir");
        assert!(other.lock(t).expect("lock").is_none());
        drop(held);
        assert!(other.lock(t).expect("lock").is_some());
    }

    #[test]
    fn process_id_is_stable_and_the_app_folder_exclusive() {
        let root = tempfile::tempdir().expect("tempdir");
        let id = {
            let sd = StateDirectory::new(root.path(), "app").expect("state dir");
            let id = sd.initialize_process_id().expect("id");
            let other = StateDirectory::new(root.path(), "app").expect("state dir");
            let err = other.initialize_process_id().expect_err("locked");
            assert!(err.to_string().contains("same state directory"), "{err}");
            id
        };
        let again = StateDirectory::new(root.path(), "app").expect("state dir");
        assert_eq!(again.initialize_process_id().expect("id"), id);
        let text =
            fs::read_to_string(root.path().join("app").join(PROCESS_FILE_NAME)).expect("file");
        assert!(text.contains(&id.to_string()));
    }

    #[test]
    fn offset_sums_wipe_and_cleanup() {
        let root = tempfile::tempdir().expect("tempdir");
        let sd = StateDirectory::new(root.path(), "app").expect("state dir");
        let (a, b, c) = (TaskId::new(0, 0), TaskId::new(0, 1), TaskId::new(1, 0));
        let tp = TopicPartition::new("app-s-changelog", 0);
        for t in [a, b, c] {
            sd.get_or_create_task_dir(t).expect("dir");
        }
        sd.checkpoint(a)
            .write(&BTreeMap::from([(tp.clone(), 99)]))
            .expect("checkpoint");
        fs::write(sd.checkpoint(b).path(), "garbage").expect("corrupt");
        let sums = sd.task_offset_sums().expect("sums");
        assert_eq!(sums, BTreeMap::from([(a, 100)]));

        let store = sd.store_dir(a, "s");
        fs::create_dir_all(&store).expect("store dir");
        fs::write(store.join("data"), b"x").expect("data");
        sd.wipe_store(a, "s", Some(&tp)).expect("wipe");
        assert!(!store.exists());
        assert_eq!(
            sd.checkpoint(a).read().expect("read"),
            Some(BTreeMap::new())
        );

        // c is held: never cleaned; a is kept; b goes.
        let held = sd.lock(c).expect("lock").expect("free");
        let removed = sd
            .clean_removed_tasks(&BTreeSet::from([a]), Duration::ZERO)
            .expect("clean");
        assert_eq!(removed, vec![b]);
        assert!(sd.task_dir(a).exists() && sd.task_dir(c).exists());
        assert!(!sd.task_dir(b).exists());
        drop(held);
        // Not old enough yet.
        let removed = sd
            .clean_removed_tasks(&BTreeSet::new(), Duration::from_secs(3600))
            .expect("clean");
        assert!(removed.is_empty());
    }
}
