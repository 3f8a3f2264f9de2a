//! The leader epoch cache of a partition (Kafka's `LeaderEpochFileCache`):
//! for each leader epoch, the first offset written in it. Persisted in the
//! partition's `leader-epoch-checkpoint`. Followers use it to find where
//! their log diverges from the leader's (OffsetForLeaderEpoch).

use std::path::{Path, PathBuf};

use crate::checkpoint;
use crate::error::{bad_file, Result};

/// `(epoch, start offset)` entries with both columns increasing.
#[derive(Debug)]
pub struct LeaderEpochCache {
    path: PathBuf,
    entries: Vec<(i32, i64)>,
}

impl LeaderEpochCache {
    /// Loads the partition's `leader-epoch-checkpoint` (empty when absent).
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join(checkpoint::LEADER_EPOCH_CHECKPOINT);
        let mut entries = Vec::new();
        for line in checkpoint::read_lines(&path)?.unwrap_or_default() {
            let mut it = line.split(' ');
            let parsed = match (it.next(), it.next(), it.next()) {
                (Some(e), Some(o), None) => e.parse::<i32>().ok().zip(o.parse::<i64>().ok()),
                _ => None,
            };
            let Some(entry) = parsed else {
                return Err(bad_file(&path, format!("malformed epoch entry {line:?}")));
            };
            entries.push(entry);
        }
        Ok(Self { path, entries })
    }

    /// A cache that lives in memory only (simulations and tests of the
    /// replication rules); [`LeaderEpochCache::flush`] fails on it.
    pub fn in_memory() -> Self {
        Self {
            path: PathBuf::new(),
            entries: Vec::new(),
        }
    }

    pub fn entries(&self) -> &[(i32, i64)] {
        &self.entries
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.0)
    }

    /// Records that `epoch` starts at `offset` (no-op for older epochs).
    /// Returns whether the cache changed.
    pub fn assign(&mut self, epoch: i32, offset: i64) -> bool {
        if epoch < 0 {
            return false;
        }
        match self.entries.last() {
            Some(&(e, _)) if e >= epoch => false,
            _ => {
                self.entries.retain(|&(_, o)| o < offset);
                self.entries.push((epoch, offset));
                true
            }
        }
    }

    /// Drops entries starting at or after `end_offset` (log truncated).
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|&(_, o)| o < end_offset);
        before != self.entries.len()
    }

    /// Log start moved to `start_offset`: entries before it collapse into
    /// one that starts there.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        let keep_from = self.entries.iter().rposition(|&(_, o)| o <= start_offset);
        match keep_from {
            Some(i) if i > 0 || self.entries[0].1 < start_offset => {
                self.entries.drain(..i);
                self.entries[0].1 = start_offset;
                true
            }
            _ => false,
        }
    }

    /// `(epoch, end offset)` for a follower asking about `epoch`: the
    /// largest epoch ≤ the requested one and the start offset of the next
    /// epoch (or `log_end` for the latest). `None` when unknown.
    pub fn end_offset_for(&self, epoch: i32, log_end: i64) -> Option<(i32, i64)> {
        let i = self.entries.iter().rposition(|&(e, _)| e <= epoch)?;
        let end = self.entries.get(i + 1).map_or(log_end, |&(_, o)| o);
        Some((self.entries[i].0, end))
    }

    /// Writes the checkpoint.
    pub fn flush(&self) -> Result<()> {
        let lines: Vec<String> = self
            .entries
            .iter()
            .map(|(e, o)| format!("{e} {o}"))
            .collect();
        checkpoint::write_lines(&self.path, &lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assign_truncate_and_persist() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut c = LeaderEpochCache::load(dir.path()).expect("load");
        assert!(c.assign(0, 0));
        assert!(!c.assign(0, 10));
        assert!(c.assign(2, 10));
        assert!(c.assign(5, 20));
        assert_eq!(c.end_offset_for(1, 30), Some((0, 10)));
        assert_eq!(c.end_offset_for(2, 30), Some((2, 20)));
        assert_eq!(c.end_offset_for(9, 30), Some((5, 30)));
        c.truncate_from_end(15);
        assert_eq!(c.entries(), &[(0, 0), (2, 10)]);
        c.truncate_from_start(12);
        assert_eq!(c.entries(), &[(2, 12)]);
        c.flush().expect("flush");
        let text =
            std::fs::read_to_string(dir.path().join("leader-epoch-checkpoint")).expect("read");
        assert_eq!(text, "0\n1\n2 12\n");
        let c = LeaderEpochCache::load(dir.path()).expect("reload");
        assert_eq!(c.entries(), &[(2, 12)]);
    }
}
