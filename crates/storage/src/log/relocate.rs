//! Copying a partition folder for a move to another data folder
//! (AlterReplicaLogDirs). [`Log::freeze`] holds the append lock, so no
//! append, roll, truncation, retention or segment swap changes the folder
//! while it is copied; the copy is fsynced before the caller commits the
//! move (see the `manager` module for the commit protocol).

use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::MutexGuard;

use super::{Log, LogOpenOptions, WriterState};
use crate::error::{IoContext, Result};
use crate::producer::ProducerStateConfig;

/// A log no writer can change until the guard drops.
#[derive(Debug)]
pub struct FrozenLog<'a> {
    log: &'a Log,
    _writer: MutexGuard<'a, WriterState>,
}

impl Log {
    /// Stops every change to the log (appends wait) and flushes it, so the
    /// folder on disk holds everything the log holds.
    pub fn freeze(&self) -> Result<FrozenLog<'_>> {
        let writer = self.writer();
        self.check_online()?;
        self.flush()?;
        // The epoch checkpoint is written on every change; write it once
        // more so the folder is complete on its own whatever happened.
        super::lock(&self.epochs)
            .flush()
            .map_err(|e| self.go_offline(e))?;
        Ok(FrozenLog {
            log: self,
            _writer: writer,
        })
    }
}

impl FrozenLog<'_> {
    /// Copies every file of the folder into `dest` (created; it must not
    /// exist) and fsyncs the files and `dest`. `copied_to` follows the
    /// progress: the offset below which the copy holds every record.
    /// Files already renamed for deletion and cleaner leftovers are not
    /// copied.
    pub fn copy_to(&self, dest: &Path, copied_to: &AtomicI64) -> Result<()> {
        let src = self.log.dir();
        std::fs::create_dir(dest).at(dest)?;
        let mut files = Vec::new();
        for entry in std::fs::read_dir(src).at(src)? {
            let entry = entry.at(src)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".deleted") || name.ends_with(super::CLEANED) {
                continue;
            }
            if entry.file_type().at(src)?.is_file() {
                files.push(name);
            }
        }
        // Segments in offset order, so the progress moves forward.
        files.sort();
        let bases = self.log.segment_base_offsets();
        for name in &files {
            let from = src.join(name);
            let to = dest.join(name);
            std::fs::copy(&from, &to).at(&from)?;
            std::fs::File::open(&to).at(&to)?.sync_all().at(&to)?;
            if let Some(base) = name
                .strip_suffix(".log")
                .and_then(|b| b.parse::<i64>().ok())
            {
                let next = bases
                    .iter()
                    .copied()
                    .find(|&b| b > base)
                    .unwrap_or_else(|| self.log.log_end_offset());
                copied_to.fetch_max(next, Ordering::AcqRel);
            }
        }
        crate::checkpoint::sync_dir(dest)?;
        copied_to.fetch_max(self.log.log_end_offset(), Ordering::AcqRel);
        Ok(())
    }

    /// How the copy opens: at the log's offsets (everything is flushed, so
    /// nothing needs recovery).
    pub fn open_options(&self, producer_state: ProducerStateConfig) -> LogOpenOptions {
        LogOpenOptions {
            recovery_point: self.log.recovery_point(),
            log_start_offset: self.log.log_start_offset(),
            high_watermark: self.log.high_watermark(),
            clean_shutdown: false,
            producer_state,
        }
    }

    /// The move committed: the log is retired (offline), so a writer that
    /// waited on the freeze fails instead of appending to a folder that is
    /// being deleted.
    pub fn retire(self) {
        self.log.offline.store(true, Ordering::Release);
    }
}
