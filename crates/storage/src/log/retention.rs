//! Removing data: retention by time and size (whole segments, never the
//! active one), the log start offset (DeleteRecords), and truncation for
//! followers.
//!
//! Producer state follows Kafka's rules: segments that go take their
//! producer snapshots with them, the in-memory state stays (a producer
//! whose batches were all deleted is still known until it expires); a
//! truncation reloads the state from the newest snapshot below the new end.
//!
//! A segment leaving the log (retention, cleaning, truncation) is taken out
//! of the segment map and renamed `.deleted` at once; its files go
//! `file.delete.delay.ms` later ([`Log::delete_expired_files`], run by the
//! LogManager's scheduler), as Kafka's `asyncDeleteSegment`. A restart in
//! between removes leftover `.deleted` files when the folder is opened.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{lock, Log};
use crate::error::{Result, StorageError};
use crate::segment::Segment;

/// Suffix of segment files on their way out.
pub(crate) const DELETED_SUFFIX: &str = ".deleted";

impl Log {
    /// Deletes the oldest segments that are past `retention.ms`, beyond
    /// `retention.bytes`, or entirely below the log start offset. Never the
    /// active segment. Returns how many were deleted.
    pub fn delete_old_segments(&self) -> Result<usize> {
        let _w = self.writer();
        self.check_online()?;
        let config = self.config();
        let now = self.now_ms();
        let log_start = self.log_start_offset();
        let segs: Vec<Arc<Segment>> = self.read_segments().values().cloned().collect();
        let mut remaining: i64 = segs.iter().map(|s| s.size() as i64).sum();
        let mut doomed = Vec::new();
        for (i, seg) in segs.iter().enumerate() {
            let Some(next) = segs.get(i + 1) else { break }; // the active one
            let below_start = next.base_offset <= log_start;
            let by_time = config.cleanup_policy.delete
                && config.retention_ms >= 0
                && now - seg.largest_timestamp() > config.retention_ms;
            let by_size = config.cleanup_policy.delete
                && config.retention_bytes >= 0
                && remaining - seg.size() as i64 >= config.retention_bytes;
            if !(below_start || by_time || by_size) {
                break;
            }
            remaining -= seg.size() as i64;
            doomed.push(Arc::clone(seg));
        }
        if doomed.is_empty() {
            return Ok(0);
        }
        let new_start = segs[doomed.len()].base_offset;
        self.remove_segments(&doomed)?;
        self.delete_producer_snapshots(&doomed.iter().map(|s| s.base_offset).collect::<Vec<_>>())?;
        if new_start > self.log_start_offset() {
            self.set_log_start_offset(new_start)?;
        }
        tracing::info!(partition = %self.tp, deleted = doomed.len(), new_start, "retention deleted segments");
        Ok(doomed.len())
    }

    /// Moves the log start offset forward to `offset` (DeleteRecords): the
    /// offset must not exceed the high watermark. Whole segments below it
    /// are deleted; reads below it fail with `OffsetOutOfRange`.
    pub fn advance_log_start_offset(&self, offset: i64) -> Result<()> {
        let hw = self.high_watermark();
        if offset > hw {
            return Err(StorageError::OffsetOutOfRange {
                offset,
                log_start: self.log_start_offset(),
                log_end: hw,
            });
        }
        {
            let _w = self.writer();
            if offset <= self.log_start_offset() {
                return Ok(());
            }
            self.set_log_start_offset(offset)?;
        }
        self.delete_old_segments().map(|_| ())
    }

    /// Moves the log start offset forward to `offset` and deletes the
    /// segments that lie wholly below it — nothing else: no time or size
    /// retention applies, whatever the config says. This is how the metadata
    /// log shrinks after a snapshot covering everything below `offset`.
    /// `offset` must not exceed the high watermark. Returns the number of
    /// segments deleted.
    pub fn truncate_prefix_to(&self, offset: i64) -> Result<usize> {
        let hw = self.high_watermark();
        if offset > hw {
            return Err(StorageError::OffsetOutOfRange {
                offset,
                log_start: self.log_start_offset(),
                log_end: hw,
            });
        }
        let _w = self.writer();
        self.check_online()?;
        if offset > self.log_start_offset() {
            self.set_log_start_offset(offset)?;
        }
        let log_start = self.log_start_offset();
        let segs: Vec<Arc<Segment>> = self.read_segments().values().cloned().collect();
        let doomed: Vec<Arc<Segment>> = segs
            .windows(2)
            .take_while(|w| w[1].base_offset <= log_start)
            .map(|w| Arc::clone(&w[0]))
            .collect();
        if doomed.is_empty() {
            return Ok(0);
        }
        self.remove_segments(&doomed)?;
        self.delete_producer_snapshots(&doomed.iter().map(|s| s.base_offset).collect::<Vec<_>>())?;
        tracing::info!(partition = %self.tp, deleted = doomed.len(), log_start, "deleted segments below the log start offset");
        Ok(doomed.len())
    }

    fn set_log_start_offset(&self, offset: i64) -> Result<()> {
        self.log_start_offset.fetch_max(offset, Ordering::AcqRel);
        self.high_watermark.fetch_max(offset, Ordering::AcqRel);
        self.recovery_point.fetch_max(offset, Ordering::AcqRel);
        let mut epochs = lock(&self.epochs);
        if epochs.truncate_from_start(offset) {
            epochs.flush().map_err(|e| self.go_offline(e))?;
        }
        Ok(())
    }

    /// Removes segments from the map and renames their files `.deleted`;
    /// the files are unlinked after `file.delete.delay.ms` (at once when it
    /// is 0). Readers that already hold a segment keep reading it. Writer
    /// only.
    pub(crate) fn remove_segments(&self, doomed: &[Arc<Segment>]) -> Result<()> {
        {
            let mut segs = self.write_segments();
            for s in doomed {
                segs.remove(&s.base_offset);
            }
        }
        let delay = self.config().file_delete_delay_ms;
        let due = self.now_ms().saturating_add(delay);
        for s in doomed {
            s.add_suffix(DELETED_SUFFIX)
                .map_err(|e| self.go_offline(e))?;
            if delay <= 0 {
                s.delete_files().map_err(|e| self.go_offline(e))?;
            } else {
                lock(&self.pending_deletes).push((due, Arc::clone(s)));
            }
        }
        Ok(())
    }

    /// Unlinks the `.deleted` files whose `file.delete.delay.ms` has passed;
    /// returns how many segments went. Kafka runs this on its scheduler
    /// thread; Sluice's LogManager calls it on every scheduler tick.
    pub fn delete_expired_files(&self) -> Result<usize> {
        let now = self.now_ms();
        let due: Vec<Arc<Segment>> = {
            let mut pending = lock(&self.pending_deletes);
            let (due, keep): (Vec<_>, Vec<_>) = pending.drain(..).partition(|(at, _)| *at <= now);
            *pending = keep;
            due.into_iter().map(|(_, s)| s).collect()
        };
        for (i, s) in due.iter().enumerate() {
            if let Err(e) = s.delete_files() {
                // Put back what is left so a later pass retries it.
                let mut pending = lock(&self.pending_deletes);
                pending.extend(due[i..].iter().map(|s| (now, Arc::clone(s))));
                return Err(e);
            }
        }
        if !due.is_empty() {
            tracing::debug!(partition = %self.tp, segments = due.len(), "deleted segment files");
        }
        Ok(due.len())
    }

    /// Segments renamed `.deleted` and waiting for `file.delete.delay.ms`.
    pub fn pending_file_deletions(&self) -> usize {
        lock(&self.pending_deletes).len()
    }

    /// Removes every record at or after `offset` (a follower diverged from
    /// its leader). A batch holding `offset` goes whole, so the log end
    /// becomes `offset` or, if a batch straddled it, that batch's base.
    /// Below the log start, the log is emptied and restarts at `offset`.
    pub fn truncate_to(&self, offset: i64) -> Result<()> {
        let _w = self.writer();
        self.check_online()?;
        if offset >= self.log_end_offset() {
            return Ok(());
        }
        let start = self.log_start_offset();
        if offset < start || self.straddler_base(offset)?.is_some_and(|b| b < start) {
            // Nothing readable would remain: restart the log at `offset`.
            return self.truncate_fully_locked(offset);
        }
        let segs: Vec<Arc<Segment>> = self.read_segments().values().cloned().collect();
        let doomed: Vec<Arc<Segment>> = segs
            .iter()
            .filter(|s| s.base_offset > offset)
            .cloned()
            .collect();
        self.remove_segments(&doomed)?;
        // The segment holding `offset` becomes the active one: reopen it
        // with writable (preallocated) indexes, then cut it.
        let Some(base) = self.read_segments().keys().next_back().copied() else {
            unreachable!("segments at or below the truncation offset remain")
        };
        let config = self.config();
        let seg = Segment::open(&self.dir, base, self.settings(), true, self.now_ms())
            .and_then(|s| {
                s.recover(config.index_interval_bytes)?;
                s.truncate_to(offset, config.index_interval_bytes)?;
                Ok(s)
            })
            .map_err(|e| self.go_offline(e))?;
        // Batches are atomic: a batch that straddles `offset` goes whole,
        // and the log then ends where that batch began.
        let end = seg.next_offset().min(offset);
        self.write_segments().insert(base, Arc::new(seg));
        self.after_truncation(end)?;
        self.reload_producer_state()
            .map(|_| ())
            .map_err(|e| self.go_offline(e))
    }

    /// Base offset of the batch holding `offset`, if it starts before it.
    fn straddler_base(&self, offset: i64) -> Result<Option<i64>> {
        let seg = self
            .read_segments()
            .range(..=offset)
            .next_back()
            .map(|(_, s)| Arc::clone(s));
        let Some(seg) = seg else { return Ok(None) };
        Ok(seg
            .translate(offset)?
            .map(|(_, h)| h.base_offset)
            .filter(|&b| b < offset))
    }

    /// Deletes everything and restarts the log at `offset`.
    pub fn truncate_fully_and_start_at(&self, offset: i64) -> Result<()> {
        let _w = self.writer();
        self.check_online()?;
        self.truncate_fully_locked(offset)
    }

    fn truncate_fully_locked(&self, offset: i64) -> Result<()> {
        let segs: Vec<Arc<Segment>> = self.read_segments().values().cloned().collect();
        self.remove_segments(&segs)?;
        let seg = Segment::create(&self.dir, offset, self.settings(), self.now_ms())
            .map_err(|e| self.go_offline(e))?;
        self.write_segments().insert(offset, Arc::new(seg));
        self.log_start_offset.store(offset, Ordering::Release);
        self.log_end_offset.store(offset, Ordering::Release);
        self.high_watermark.store(offset, Ordering::Release);
        self.recovery_point.store(offset, Ordering::Release);
        {
            let mut epochs = lock(&self.epochs);
            epochs.truncate_from_end(i64::MIN);
            epochs.flush().map_err(|e| self.go_offline(e))?;
        }
        self.reset_producer_state(offset)
            .map_err(|e| self.go_offline(e))
    }

    fn after_truncation(&self, offset: i64) -> Result<()> {
        self.log_end_offset.store(offset, Ordering::Release);
        self.high_watermark.fetch_min(offset, Ordering::AcqRel);
        self.recovery_point.fetch_min(offset, Ordering::AcqRel);
        let mut epochs = lock(&self.epochs);
        if epochs.truncate_from_end(offset) {
            epochs.flush().map_err(|e| self.go_offline(e))?;
        }
        Ok(())
    }
}
