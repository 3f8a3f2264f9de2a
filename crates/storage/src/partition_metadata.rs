//! `partition.metadata`: which topic (by id) a partition folder belongs to,
//! in Kafka's format (`PartitionMetadataFile`):
//!
//! ```text
//! version: 0
//! topic_id: <topic id, URL-safe base64 without padding>
//! ```
//!
//! The broker writes it when it creates a partition folder, so that at start
//! a folder can be matched with the metadata by id and not only by name: a
//! folder is deleted only when the metadata records the removal of *its*
//! topic, and a folder of an older incarnation of a topic name is never
//! mistaken for the current one.

use std::io::Write;
use std::path::Path;

use crate::error::{bad_file, IoContext, Result};

/// File name inside the partition folder.
pub const PARTITION_METADATA_FILE: &str = "partition.metadata";

const VERSION: &str = "0";

/// Writes the file atomically (temp file, fsync, rename, fsync folder).
pub fn write(dir: &Path, topic_id: [u8; 16]) -> Result<()> {
    let path = dir.join(PARTITION_METADATA_FILE);
    let tmp = dir.join(format!("{PARTITION_METADATA_FILE}.tmp"));
    let body = format!(
        "version: {VERSION}\ntopic_id: {}",
        encode_topic_id(&topic_id)
    );
    {
        let mut f = std::fs::File::create(&tmp).at(&tmp)?;
        f.write_all(body.as_bytes()).at(&tmp)?;
        f.sync_all().at(&tmp)?;
    }
    std::fs::rename(&tmp, &path).at(&path)?;
    crate::checkpoint::sync_dir(dir)
}

/// The topic id in `dir`'s file; `None` when there is no file. A file that
/// is not Kafka's version 0 format is an error naming it.
pub fn read(dir: &Path) -> Result<Option<[u8; 16]>> {
    let path = dir.join(PARTITION_METADATA_FILE);
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).at(&path),
    };
    let text = String::from_utf8(text).map_err(|_| bad_file(&path, "not text"))?;
    let mut version = None;
    let mut id = None;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let Some((k, v)) = line.split_once(':') else {
            return Err(bad_file(&path, format!("malformed line {line:?}")));
        };
        match k.trim() {
            "version" => version = Some(v.trim().to_string()),
            "topic_id" => id = Some(v.trim().to_string()),
            other => return Err(bad_file(&path, format!("unknown field {other:?}"))),
        }
    }
    match version.as_deref() {
        Some(VERSION) => {}
        Some(v) => return Err(bad_file(&path, format!("unknown version {v:?}"))),
        None => return Err(bad_file(&path, "no version line")),
    }
    let id = id.ok_or_else(|| bad_file(&path, "no topic_id line"))?;
    decode_topic_id(&id)
        .map(Some)
        .ok_or_else(|| bad_file(&path, format!("topic_id {id:?} is not a base64 topic id")))
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Kafka's `Uuid.toString`: URL-safe base64 of the 16 bytes, no padding
/// (22 characters).
pub fn encode_topic_id(id: &[u8; 16]) -> String {
    let mut out = String::with_capacity(22);
    for chunk in id.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &b)| acc | (u32::from(b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// Parses [`encode_topic_id`]'s form (padding tolerated).
pub fn decode_topic_id(s: &str) -> Option<[u8; 16]> {
    let s = s.trim_end_matches('=');
    if s.len() != 22 {
        return None;
    }
    let mut bits = 0u32;
    let mut nbits = 0u32;
    let mut out = Vec::with_capacity(16);
    for c in s.bytes() {
        let v = ALPHABET.iter().position(|&a| a == c)? as u32;
        bits = (bits << 6) | v;
        nbits += 6;
        if nbits >= 8 {
            nbits -= 8;
            out.push((bits >> nbits) as u8);
            bits &= (1 << nbits) - 1;
        }
    }
    // 22 characters carry 132 bits: the last 4 must be zero.
    if bits != 0 {
        return None;
    }
    out.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_look_like_kafkas_and_roundtrip() {
        assert_eq!(encode_topic_id(&[0; 16]), "AAAAAAAAAAAAAAAAAAAAAA");
        let id: [u8; 16] = core::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(251));
        let s = encode_topic_id(&id);
        assert_eq!(s.len(), 22);
        assert_eq!(decode_topic_id(&s), Some(id));
        assert_eq!(decode_topic_id(&format!("{s}==")), Some(id));
        assert_eq!(decode_topic_id("short"), None);
        assert_eq!(decode_topic_id("AAAAAAAAAAAAAAAAAAAAA!"), None);
        assert_eq!(decode_topic_id("AAAAAAAAAAAAAAAAAAAAAB"), None);
    }

    #[test]
    fn file_roundtrip_and_kafka_text() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(read(dir.path()).expect("absent"), None);
        let id = [7u8; 16];
        write(dir.path(), id).expect("write");
        let text = std::fs::read_to_string(dir.path().join(PARTITION_METADATA_FILE)).expect("read");
        assert_eq!(
            text,
            format!("version: 0\ntopic_id: {}", encode_topic_id(&id))
        );
        assert_eq!(read(dir.path()).expect("read"), Some(id));
        for bad in [
            "",
            "version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA",
            "version: 0",
            "garbage",
        ] {
            std::fs::write(dir.path().join(PARTITION_METADATA_FILE), bad).expect("write");
            assert!(read(dir.path()).is_err(), "{bad:?}");
        }
    }
}
