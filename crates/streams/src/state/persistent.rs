//! The persistent key-value store (Kafka's RocksDB store), on fjall, a pure
//! Rust LSM tree. One fjall keyspace per store, in
//! `<state.dir>/<application.id>/<task id>/fjall/<store>/`
//! ([`StateDirectory::store_dir`](super::directory::StateDirectory::store_dir)),
//! with one partition, `default`, holding the entries. Writes reach fjall's
//! journal at once; [`flush`](KeyValueStore::flush) fsyncs it, which the
//! runtime does before writing the task's checkpoint.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use fjall::{Config, Keyspace, PartitionCreateOptions, PartitionHandle, PersistMode};

use super::KeyValueStore;
use crate::error::{Result, StreamsError};

/// The block cache of each store (fjall's default is 32 MiB).
const CACHE_BYTES: u64 = 8 * 1024 * 1024;
/// Memtables of each store before a flush to disk (fjall's default 64 MiB);
/// an instance holds one store per task and stateful sub-topology.
const WRITE_BUFFER_BYTES: u64 = 16 * 1024 * 1024;
/// Journal size of each store before memtables are forced to disk (fjall's
/// default 512 MiB; its minimum is 24 MiB).
const JOURNAL_BYTES: u64 = 64 * 1024 * 1024;

/// A key-value store on disk.
pub struct PersistentKeyValueStore {
    name: String,
    path: PathBuf,
    open: Option<(Keyspace, PartitionHandle)>,
}

impl std::fmt::Debug for PersistentKeyValueStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentKeyValueStore")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("open", &self.open.is_some())
            .finish()
    }
}

impl PersistentKeyValueStore {
    /// Opens (creating it) store `name` in folder `path`.
    pub fn open(name: &str, path: &Path) -> Result<Self> {
        let err = |e: fjall::Error| StreamsError::Store {
            store: name.to_string(),
            message: format!("cannot open {}: {e}", path.display()),
        };
        std::fs::create_dir_all(path).map_err(|source| StreamsError::StateDir {
            path: path.to_path_buf(),
            source,
        })?;
        let keyspace = Config::new(path)
            .flush_workers(1)
            .compaction_workers(1)
            .cache_size(CACHE_BYTES)
            .max_write_buffer_size(WRITE_BUFFER_BYTES)
            .max_journaling_size(JOURNAL_BYTES)
            .open()
            .map_err(err)?;
        let partition = keyspace
            .open_partition("default", PartitionCreateOptions::default())
            .map_err(err)?;
        Ok(Self {
            name: name.to_string(),
            path: path.to_path_buf(),
            open: Some((keyspace, partition)),
        })
    }

    /// The store's folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn fail(&self, what: &str, e: impl std::fmt::Display) -> StreamsError {
        StreamsError::Store {
            store: self.name.clone(),
            message: format!("{what}: {e}"),
        }
    }

    fn handle(&self) -> Result<&(Keyspace, PartitionHandle)> {
        self.open
            .as_ref()
            .ok_or_else(|| self.fail("closed", "the store is closed"))
    }
}

impl KeyValueStore for PersistentKeyValueStore {
    fn name(&self) -> &str {
        &self.name
    }

    fn persistent(&self) -> bool {
        true
    }

    fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        let (_, p) = self.handle()?;
        Ok(p.get(key)
            .map_err(|e| self.fail("get", e))?
            .map(|v| Bytes::copy_from_slice(&v)))
    }

    fn put(&mut self, key: Bytes, value: Bytes) -> Result<()> {
        let (_, p) = self.handle()?;
        p.insert(key.as_ref(), value.as_ref())
            .map_err(|e| self.fail("put", e))
    }

    fn delete(&mut self, key: &[u8]) -> Result<Option<Bytes>> {
        let old = self.get(key)?;
        if old.is_some() {
            let (_, p) = self.handle()?;
            p.remove(key).map_err(|e| self.fail("delete", e))?;
        }
        Ok(old)
    }

    fn range(&self, from: Option<&[u8]>, to: Option<&[u8]>) -> Result<Vec<(Bytes, Bytes)>> {
        use std::ops::Bound;
        let (_, p) = self.handle()?;
        let lo = from.map_or(Bound::Unbounded, |k| Bound::Included(k.to_vec()));
        let hi = to.map_or(Bound::Unbounded, |k| Bound::Excluded(k.to_vec()));
        if let (Some(f), Some(t)) = (from, to) {
            if f >= t {
                return Ok(Vec::new());
            }
        }
        p.range::<Vec<u8>, _>((lo, hi))
            .map(|kv| {
                kv.map(|(k, v)| (Bytes::copy_from_slice(&k), Bytes::copy_from_slice(&v)))
                    .map_err(|e| self.fail("range", e))
            })
            .collect()
    }

    fn approximate_num_entries(&self) -> u64 {
        self.open
            .as_ref()
            .map_or(0, |(_, p)| p.approximate_len() as u64)
    }

    fn flush(&mut self) -> Result<()> {
        let (ks, _) = self.handle()?;
        ks.persist(PersistMode::SyncAll)
            .map_err(|e| self.fail("flush", e))
    }

    fn close(&mut self) -> Result<()> {
        if self.open.is_some() {
            self.flush()?;
        }
        self.open = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn crud_range_and_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("0_0").join("fjall").join("counts");
        {
            let mut s = PersistentKeyValueStore::open("counts", &path).expect("open");
            assert!(s.persistent());
            for k in ["b", "a", "d", "c"] {
                s.put(b(k), b(&k.to_uppercase())).expect("put");
            }
            assert_eq!(s.get(b"a").expect("get"), Some(b("A")));
            assert_eq!(s.delete(b"d").expect("delete"), Some(b("D")));
            assert_eq!(s.delete(b"zz").expect("delete"), None);
            let keys: Vec<Bytes> = s
                .range(Some(b"a"), Some(b"c"))
                .expect("range")
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            assert_eq!(keys, vec![b("a"), b("b")]);
            assert_eq!(s.all().expect("all").len(), 3);
            assert!(s.range(Some(b"c"), Some(b"a")).expect("range").is_empty());
            s.close().expect("close");
            assert!(s.get(b"a").is_err());
        }
        let s = PersistentKeyValueStore::open("counts", &path).expect("reopen");
        let all = s.all().expect("all");
        assert_eq!(
            all,
            vec![(b("a"), b("A")), (b("b"), b("B")), (b("c"), b("C"))]
        );
    }
}
