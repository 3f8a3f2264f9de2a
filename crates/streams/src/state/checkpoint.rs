//! The `.checkpoint` file of a task folder, in Kafka's `OffsetCheckpoint`
//! text format: the version (`0`), the number of entries, then one
//! `topic partition offset` line per changelog partition:
//!
//! ```text
//! 0
//! 2
//! app-counts-changelog 3 1041
//! app-other-changelog 3 17
//! ```
//!
//! The offset is that of the last changelog record the store holds (Kafka's
//! convention; restoration resumes at offset + 1). Writes go to a temporary
//! file that is fsynced and renamed over the old one, so a crash leaves
//! either the old or the new checkpoint, never half of one.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use sluice_client::TopicPartition;

use crate::error::{Result, StreamsError};

/// The name of the checkpoint file in a task folder.
pub const CHECKPOINT_FILE_NAME: &str = ".checkpoint";

/// The only version of the format.
const VERSION: i32 = 0;

/// One checkpoint file.
#[derive(Debug, Clone)]
pub struct OffsetCheckpoint {
    path: PathBuf,
}

impl OffsetCheckpoint {
    /// The checkpoint at `path` (it need not exist).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the file's contents with `offsets` atomically (temporary
    /// file, fsync, rename, fsync of the folder). Negative offsets are not
    /// written.
    pub fn write(&self, offsets: &BTreeMap<TopicPartition, i64>) -> Result<()> {
        let valid: Vec<(&TopicPartition, i64)> = offsets
            .iter()
            .filter(|(_, o)| **o >= 0)
            .map(|(tp, o)| (tp, *o))
            .collect();
        let mut text = format!("{VERSION}\n{}\n", valid.len());
        for (tp, o) in valid {
            text.push_str(&format!("{} {} {o}\n", tp.topic, tp.partition));
        }
        let tmp = self.path.with_extension("tmp");
        let err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StreamsError::StateDir { path, source }
        };
        {
            let mut f = File::create(&tmp).map_err(err(&tmp))?;
            f.write_all(text.as_bytes()).map_err(err(&tmp))?;
            f.sync_all().map_err(err(&tmp))?;
        }
        fs::rename(&tmp, &self.path).map_err(err(&self.path))?;
        if let Some(dir) = self.path.parent() {
            // Make the rename durable; not every platform can open a folder.
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }

    /// The offsets in the file; `Ok(None)` when there is no file, an error
    /// (`StreamsError::StateDir` with `InvalidData`) when it is corrupt.
    pub fn read(&self) -> Result<Option<BTreeMap<TopicPartition, i64>>> {
        let text = match fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(StreamsError::StateDir {
                    path: self.path.clone(),
                    source,
                })
            }
        };
        parse(&text)
            .map(Some)
            .map_err(|why| StreamsError::StateDir {
                path: self.path.clone(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, why),
            })
    }

    /// Removes the file (no error if it is absent).
    pub fn delete(&self) -> Result<()> {
        match fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StreamsError::StateDir {
                path: self.path.clone(),
                source,
            }),
        }
    }
}

/// Parses the format, with Kafka's checks (version, entry count, line shape).
fn parse(text: &str) -> std::result::Result<BTreeMap<TopicPartition, i64>, String> {
    let mut lines = text.lines();
    let version: i32 = lines
        .next()
        .ok_or("empty checkpoint file")?
        .trim()
        .parse()
        .map_err(|_| "malformed version line")?;
    if version != VERSION {
        return Err(format!("unknown offset checkpoint version {version}"));
    }
    let expected: usize = lines
        .next()
        .ok_or("missing entry count")?
        .trim()
        .parse()
        .map_err(|_| "malformed entry count")?;
    let mut out = BTreeMap::new();
    for line in lines {
        if line.trim().is_empty() {
            continue;
        }
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [topic, partition, offset] = parts[..] else {
            return Err(format!("malformed line {line:?}"));
        };
        let partition: i32 = partition
            .parse()
            .map_err(|_| format!("malformed partition in {line:?}"))?;
        let offset: i64 = offset
            .parse()
            .map_err(|_| format!("malformed offset in {line:?}"))?;
        out.insert(TopicPartition::new(topic, partition), offset);
    }
    if out.len() != expected {
        return Err(format!(
            "expected {expected} entries but found {}",
            out.len()
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_kafka_text() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cp = OffsetCheckpoint::new(dir.path().join(CHECKPOINT_FILE_NAME));
        assert_eq!(cp.read().expect("read"), None);
        let mut offsets = BTreeMap::new();
        offsets.insert(TopicPartition::new("app-counts-changelog", 3), 1041);
        offsets.insert(TopicPartition::new("app-b-changelog", 0), 7);
        offsets.insert(TopicPartition::new("skipped", 0), -1);
        cp.write(&offsets).expect("write");
        let text = fs::read_to_string(cp.path()).expect("text");
        assert_eq!(
            text,
            "0\n2\napp-b-changelog 0 7\napp-counts-changelog 3 1041\n"
        );
        offsets.remove(&TopicPartition::new("skipped", 0));
        assert_eq!(cp.read().expect("read"), Some(offsets));
        assert!(!dir.path().join(".checkpoint.tmp").exists());
        cp.delete().expect("delete");
        assert_eq!(cp.read().expect("read"), None);
    }

    #[test]
    fn corrupt_files_are_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cp = OffsetCheckpoint::new(dir.path().join(CHECKPOINT_FILE_NAME));
        for bad in [
            "",
            "1\n0\n",
            "0\n2\nt 0 5\n",
            "0\n1\nt x 5\n",
            "0\n1\nt 0\n",
            "zero\n",
        ] {
            fs::write(cp.path(), bad).expect("write");
            assert!(cp.read().is_err(), "{bad:?} accepted");
        }
    }
}
