//! The metadata log: metadata records appended to the partition log
//! `__cluster_metadata-0` (Kafka's KRaft metadata topic), one batch per
//! change so a change applies whole or not at all, fsynced before it is
//! applied. Replayed at start to rebuild the image.

use std::sync::{Arc, Mutex, MutexGuard};

use sluice_protocol::record::codec::decode_batch;
use sluice_protocol::record::{BatchBuilder, BatchIter, Compression, Record};
use sluice_storage::{Log, ReadLimit};

use crate::error::{ControllerError, Result};
use crate::image::MetadataImage;
use crate::records::MetadataRecord;

/// Name of the metadata topic.
pub const METADATA_TOPIC: &str = "__cluster_metadata";

/// The metadata log and the image it builds.
#[derive(Debug)]
pub struct MetadataStore {
    log: Arc<Log>,
    image: Mutex<Arc<MetadataImage>>,
    write: Mutex<()>,
}

impl MetadataStore {
    /// Replays `log` into an image.
    pub fn open(log: Arc<Log>) -> Result<Self> {
        let mut image = MetadataImage::default();
        let mut next = log.log_start_offset();
        let end = log.log_end_offset();
        let mut count = 0usize;
        while next < end {
            let r = log.read(next, 1 << 20, ReadLimit::LogEnd, true)?;
            let Some(region) = r.region else { break };
            let bytes = region
                .read_to_vec()
                .map_err(|e| sluice_storage::StorageError::Io {
                    path: log.dir().to_path_buf(),
                    source: e,
                })?;
            let before = next;
            for b in BatchIter::new(&bytes) {
                let (_, h, raw) = b?;
                for r in decode_batch(raw, 64 << 20)?.records {
                    if r.record.offset < next {
                        continue;
                    }
                    let value = r
                        .record
                        .value
                        .ok_or_else(|| ControllerError::Record("null metadata record".into()))?;
                    image.apply(&MetadataRecord::decode(&value)?);
                    count += 1;
                }
                next = h.last_offset() + 1;
            }
            if next == before {
                break;
            }
        }
        log.set_high_watermark(log.log_end_offset());
        tracing::info!(
            records = count,
            topics = image.topics().count(),
            "replayed metadata log"
        );
        Ok(Self {
            log,
            image: Mutex::new(Arc::new(image)),
            write: Mutex::new(()),
        })
    }

    /// The current image (cheap: shared until the next change).
    pub fn image(&self) -> Arc<MetadataImage> {
        Arc::clone(&lock(&self.image))
    }

    /// Serializes changes: hold the guard while checking the image and
    /// appending, so two changes never race on the same names.
    pub fn lock_for_change(&self) -> MutexGuard<'_, ()> {
        lock(&self.write)
    }

    /// Appends `records` as one batch, fsyncs, then applies them.
    pub fn append(&self, records: &[MetadataRecord]) -> Result<Arc<MetadataImage>> {
        if records.is_empty() {
            return Ok(self.image());
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut b = BatchBuilder::new(Compression::None, now);
        for r in records {
            b.push(Record::new(None, Some(r.encode()), now));
        }
        let mut bytes = b.build(0)?;
        self.log.append_as_leader(&mut bytes, 0)?;
        self.log.flush()?;
        self.log.set_high_watermark(self.log.log_end_offset());
        let mut guard = lock(&self.image);
        let mut next = (**guard).clone();
        for r in records {
            next.apply(r);
        }
        *guard = Arc::new(next);
        Ok(Arc::clone(&guard))
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_storage::{LogConfig, LogOpenOptions, SystemClock, TopicPartition};
    use uuid::Uuid;

    fn open(dir: &std::path::Path) -> Arc<Log> {
        Arc::new(
            Log::open(
                dir,
                TopicPartition::new(METADATA_TOPIC, 0),
                LogConfig::default(),
                LogOpenOptions::default(),
                Arc::new(SystemClock),
            )
            .expect("open"),
        )
    }

    #[test]
    fn changes_survive_a_replay() {
        let dir = tempfile::tempdir().expect("tempdir");
        let id = Uuid::from_u128(99);
        {
            let store = MetadataStore::open(open(dir.path())).expect("store");
            store
                .append(&[
                    MetadataRecord::Topic {
                        name: "a".into(),
                        topic_id: id,
                    },
                    MetadataRecord::Partition {
                        partition_id: 0,
                        topic_id: id,
                        replicas: vec![1],
                        isr: vec![1],
                        leader: 1,
                        leader_epoch: 0,
                        partition_epoch: 0,
                    },
                ])
                .expect("append");
            assert!(store.image().topic("a").is_some());
        }
        let store = MetadataStore::open(open(dir.path())).expect("replay");
        let img = store.image();
        let t = img.topic("a").expect("topic after replay");
        assert_eq!(t.id, id);
        assert_eq!(t.partitions.len(), 1);
    }
}
