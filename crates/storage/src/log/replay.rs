//! Replaying a log: every batch from an offset to the log end, in order,
//! for the owners that rebuild state from a log (the metadata image, the
//! group coordinator, producer state). Damage never stops a replay: a
//! batch whose CRC does not match is reported and passed over, and a header
//! that does not parse (its length is unknown) skips to the next segment.
//! The replay logs each damage itself (partition, offsets, reason); the
//! callback sees it too, to count it.

use sluice_protocol::record::batch::validate_crc;
use sluice_protocol::record::{BatchHeader, BatchIter};

use super::{Log, ReadLimit};
use crate::error::{Result, StorageError};

/// What a replay meets, batch by batch.
#[derive(Debug)]
pub enum ReplayEvent<'a> {
    /// A batch whose CRC matches (control batches included). It may start
    /// before the replay's `from`: records below it are the caller's to skip.
    Batch { header: BatchHeader, raw: &'a [u8] },
    /// A batch whose CRC does not match; the replay goes on after it.
    Corrupt {
        header: BatchHeader,
        error: sluice_protocol::ProtocolError,
    },
    /// Bytes at `offset` that are not a batch header; the replay goes on at
    /// `resume` (the next segment's base offset, or the log end).
    Unreadable {
        offset: i64,
        resume: i64,
        error: sluice_protocol::ProtocolError,
    },
}

/// Bytes read per step.
const CHUNK: u64 = 1 << 20;

impl Log {
    /// Calls `f` for every batch holding an offset at or after `from` (at
    /// least the log start), up to the log end at the call.
    pub fn replay(&self, from: i64, mut f: impl FnMut(ReplayEvent<'_>)) -> Result<()> {
        let mut next = from.max(self.log_start_offset());
        let end = self.log_end_offset();
        let resume_after = |at: i64| {
            self.segment_base_offsets()
                .into_iter()
                .find(|&base| base > at)
                .unwrap_or(end)
        };
        while next < end {
            let r = match self.read(next, CHUNK, ReadLimit::LogEnd, true) {
                Ok(r) => r,
                // The segment's headers do not lead to `next`.
                Err(StorageError::Corrupt(error)) => {
                    let resume = resume_after(next);
                    tracing::error!(partition = %self.tp, offset = next, resume, %error, "unreadable batch; replay skips to the next segment");
                    f(ReplayEvent::Unreadable {
                        offset: next,
                        resume,
                        error,
                    });
                    next = resume;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let Some(region) = r.region else { break };
            let bytes = region.read_to_vec().map_err(|e| StorageError::Io {
                path: self.dir().to_path_buf(),
                source: e,
            })?;
            let before = next;
            for b in BatchIter::new(&bytes) {
                let (_, header, raw) = match b {
                    Ok(b) => b,
                    Err(error) => {
                        let resume = resume_after(next);
                        tracing::error!(partition = %self.tp, offset = next, resume, %error, "unreadable batch; replay skips to the next segment");
                        f(ReplayEvent::Unreadable {
                            offset: next,
                            resume,
                            error,
                        });
                        next = resume;
                        break;
                    }
                };
                if header.last_offset() < next {
                    continue;
                }
                next = header.last_offset() + 1;
                match validate_crc(raw) {
                    Ok(_) => f(ReplayEvent::Batch { header, raw }),
                    Err(error) => {
                        tracing::error!(partition = %self.tp, offsets = %format!("{}..={}", header.base_offset, header.last_offset()), %error, "corrupt batch; replay passes over it");
                        f(ReplayEvent::Corrupt { header, error })
                    }
                }
            }
            if next == before {
                break;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sluice_protocol::record::{BatchBuilder, Compression, Record};

    use super::*;
    use crate::clock::ManualClock;
    use crate::config::LogConfig;

    fn batch(n: usize, tag: &str) -> Vec<u8> {
        let mut b = BatchBuilder::new(Compression::None, 1);
        for i in 0..n {
            b.push(Record::new(
                Some(format!("k{i}").into_bytes()),
                Some(format!("{tag}{i}").into_bytes()),
                1,
            ));
        }
        b.build(0).expect("build")
    }

    fn collect(log: &Log, from: i64) -> Vec<String> {
        let mut out = Vec::new();
        log.replay(from, |e| {
            out.push(match e {
                ReplayEvent::Batch { header, .. } => {
                    format!("batch {}..={}", header.base_offset, header.last_offset())
                }
                ReplayEvent::Corrupt { header, .. } => format!("corrupt {}", header.base_offset),
                ReplayEvent::Unreadable { offset, resume, .. } => {
                    format!("unreadable {offset} -> {resume}")
                }
            })
        })
        .expect("replay");
        out
    }

    #[test]
    fn every_batch_from_an_offset_and_damage_is_reported_not_fatal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = Arc::new(ManualClock::new(1));
        let config = LogConfig {
            segment_bytes: 250,
            ..LogConfig::default()
        };
        let log = crate::log::tests::open(dir.path(), config.clone(), &clock);
        for i in 0..8 {
            log.append_as_leader(&mut batch(3, &format!("b{i}-")), 0)
                .expect("append");
        }
        assert!(log.segment_count() > 2, "{}", log.segment_count());
        let all = collect(&log, 0);
        assert_eq!(all.len(), 8);
        assert_eq!(all[0], "batch 0..=2");
        assert_eq!(collect(&log, 4)[0], "batch 3..=5", "the batch holding 4");
        log.flush().expect("flush");

        // Damage on disk under the open log (reads go to the files): flip a
        // record byte in the first batch (CRC mismatch) and break the
        // header of the first batch of the second segment.
        use std::os::unix::fs::FileExt;
        let bases = log.segment_base_offsets();
        let (second_base, third_base) = (bases[1], bases[2]);
        let path = |base: i64| dir.path().join(format!("{base:020}.log"));
        let poke = |base: i64, at: u64, byte: u8| {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(path(base))
                .expect("open segment");
            f.write_all_at(&[byte], at).expect("poke");
        };
        let first = std::fs::read(path(0)).expect("read");
        poke(0, 70, first[70] ^ 0xff);
        poke(second_base, 16, 9); // magic
        let got = collect(&log, 0);
        assert_eq!(got[0], "corrupt 0");
        assert_eq!(got[1], "batch 3..=5");
        assert!(
            got.contains(&format!("unreadable {second_base} -> {third_base}")),
            "{got:?}"
        );
        assert_eq!(
            got.last().map(String::as_str),
            Some("batch 21..=23"),
            "{got:?}"
        );
    }
}
