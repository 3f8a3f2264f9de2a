//! Kafka's text checkpoint files: a version line (`0`), a count line, then
//! one entry per line. Used for `recovery-point-offset-checkpoint`,
//! `log-start-offset-checkpoint`, `replication-offset-checkpoint`,
//! `cleaner-offset-checkpoint` (entries `topic partition offset`) and each
//! partition's `leader-epoch-checkpoint` (entries `epoch startOffset`).
//!
//! Writes go to a `.tmp` file that is fsynced and renamed over the old one,
//! so a crash leaves either the old or the new checkpoint.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use crate::error::{bad_file, IoContext, Result};
use crate::TopicPartition;

pub const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
pub const LOG_START_OFFSET_CHECKPOINT: &str = "log-start-offset-checkpoint";
pub const REPLICATION_OFFSET_CHECKPOINT: &str = "replication-offset-checkpoint";
pub const CLEANER_OFFSET_CHECKPOINT: &str = "cleaner-offset-checkpoint";
pub const LEADER_EPOCH_CHECKPOINT: &str = "leader-epoch-checkpoint";

const VERSION: &str = "0";

/// Writes `entries` atomically in the checkpoint format.
pub fn write_lines(path: &Path, entries: &[String]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut body = format!("{VERSION}\n{}\n", entries.len());
    for e in entries {
        body.push_str(e);
        body.push('\n');
    }
    {
        let mut f = std::fs::File::create(&tmp).at(&tmp)?;
        f.write_all(body.as_bytes()).at(&tmp)?;
        f.sync_all().at(&tmp)?;
    }
    std::fs::rename(&tmp, path).at(path)?;
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

/// fsync of a directory, so renames and creations in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir).at(dir)?.sync_all().at(dir)
}

/// Reads the entry lines of a checkpoint; `None` when the file is absent.
/// A file that is not a version-0 checkpoint is an error naming it.
pub fn read_lines(path: &Path) -> Result<Option<Vec<String>>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            return Err(bad_file(path, "checkpoint is not text"))
        }
        Err(e) => return Err(e).at(path),
    };
    let mut lines = text.lines();
    match lines.next() {
        Some(VERSION) => {}
        Some(v) => {
            return Err(bad_file(
                path,
                format!("unknown checkpoint version {v:?} (expected 0)"),
            ))
        }
        None => return Err(bad_file(path, "empty checkpoint file")),
    }
    let count: usize = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| bad_file(path, "checkpoint count line is missing or not a number"))?;
    let entries: Vec<String> = lines
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    if entries.len() != count {
        return Err(bad_file(
            path,
            format!(
                "checkpoint says {count} entries but holds {}",
                entries.len()
            ),
        ));
    }
    Ok(Some(entries))
}

/// Writes a `topic partition offset` checkpoint.
pub fn write_offsets(path: &Path, offsets: &BTreeMap<TopicPartition, i64>) -> Result<()> {
    let lines: Vec<String> = offsets
        .iter()
        .map(|(tp, o)| format!("{} {} {o}", tp.topic, tp.partition))
        .collect();
    write_lines(path, &lines)
}

/// Reads a `topic partition offset` checkpoint (empty when absent).
pub fn read_offsets(path: &Path) -> Result<BTreeMap<TopicPartition, i64>> {
    let mut out = BTreeMap::new();
    for line in read_lines(path)?.unwrap_or_default() {
        let mut parts = line.split(' ');
        let (Some(topic), Some(p), Some(o), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad_file(
                path,
                format!("malformed checkpoint entry {line:?}"),
            ));
        };
        let partition = p
            .parse()
            .map_err(|_| bad_file(path, format!("bad partition in entry {line:?}")))?;
        let offset = o
            .parse()
            .map_err(|_| bad_file(path, format!("bad offset in entry {line:?}")))?;
        out.insert(TopicPartition::new(topic, partition), offset);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_roundtrip_in_kafka_text_format() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join(RECOVERY_POINT_CHECKPOINT);
        let mut m = BTreeMap::new();
        m.insert(TopicPartition::new("orders", 3), 1234);
        m.insert(TopicPartition::new("a-b.c", 0), 0);
        write_offsets(&p, &m).expect("write");
        let text = std::fs::read_to_string(&p).expect("read");
        assert_eq!(text, "0\n2\na-b.c 0 0\norders 3 1234\n");
        assert_eq!(read_offsets(&p).expect("read back"), m);
        assert!(read_offsets(&dir.path().join("missing"))
            .expect("absent")
            .is_empty());
    }

    #[test]
    fn bad_checkpoints_name_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join(LOG_START_OFFSET_CHECKPOINT);
        for body in ["1\n0\n", "0\nx\n", "0\n2\nt 0 1\n", "0\n1\nt zero 1\n", ""] {
            std::fs::write(&p, body).expect("write");
            let e = read_offsets(&p).expect_err(body);
            assert!(e.to_string().contains(LOG_START_OFFSET_CHECKPOINT), "{e}");
        }
    }
}
