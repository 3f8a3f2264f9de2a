//! A state store as a task holds it: the inner store (in memory, on disk,
//! or a shared global store), an optional record cache in front, and
//! optional change logging behind (Kafka's `MeteredKeyValueStore` →
//! `CachingKeyValueStore` → `ChangeLoggingKeyValueBytesStore` → inner).

use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::error::{Result, StreamsError};
use crate::state::cache::{DirtyEntry, RecordCache};
use crate::state::logging::ChangeLogger;
use crate::state::KeyValueStore;
use crate::task::OutputRecord;

/// A global store shared by every task of an instance (read-only for stream
/// tasks; written by the global task).
pub type SharedStore = Arc<Mutex<Box<dyn KeyValueStore>>>;

/// Where a task store's data lives.
pub(crate) enum Backend {
    Local(Box<dyn KeyValueStore>),
    Global(SharedStore),
}

/// Converts a flushed cache entry into a forward from the owning node.
pub(crate) type FlushListener = Arc<
    dyn Fn(&mut crate::processor::ProcessorContext<'_>, &DirtyEntry, Option<Bytes>) -> Result<()>
        + Send
        + Sync,
>;

/// One store in a task.
pub struct TaskStore {
    name: String,
    backend: Backend,
    cache: Option<RecordCache>,
    logger: Option<ChangeLogger>,
    writable: bool,
    timestamped: bool,
    /// The node whose children receive cache flushes, and how.
    pub(crate) listener: Option<(usize, FlushListener)>,
}

impl std::fmt::Debug for TaskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskStore")
            .field("name", &self.name)
            .finish()
    }
}

impl TaskStore {
    pub(crate) fn new(
        name: String,
        backend: Backend,
        cache: Option<RecordCache>,
        logger: Option<ChangeLogger>,
        writable: bool,
        timestamped: bool,
    ) -> Self {
        Self {
            name,
            backend,
            cache,
            logger,
            writable,
            timestamped,
            listener: None,
        }
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether values carry an 8-byte timestamp prefix.
    pub fn is_timestamped(&self) -> bool {
        self.timestamped
    }

    pub(crate) fn is_global(&self) -> bool {
        matches!(self.backend, Backend::Global(_))
    }

    pub(crate) fn cached(&self) -> bool {
        self.cache.is_some()
    }

    fn with_inner<T>(&mut self, f: impl FnOnce(&mut dyn KeyValueStore) -> Result<T>) -> Result<T> {
        match &mut self.backend {
            Backend::Local(s) => f(s.as_mut()),
            Backend::Global(s) => {
                let mut g = s.lock().map_err(|_| StreamsError::Store {
                    store: self.name.clone(),
                    message: "global store lock poisoned".into(),
                })?;
                f(g.as_mut())
            }
        }
    }

    /// Reads through the cache.
    pub(crate) fn get(&mut self, key: &[u8]) -> Result<Option<Bytes>> {
        if let Some(c) = &mut self.cache {
            if let Some(v) = c.get(key) {
                return Ok(v);
            }
        }
        self.with_inner(|s| s.get(key))
    }

    /// A range read merging the cache over the inner store.
    pub(crate) fn range(
        &mut self,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
    ) -> Result<Vec<(Bytes, Bytes)>> {
        let base = self.with_inner(|s| s.range(from, to))?;
        match &self.cache {
            None => Ok(base),
            Some(c) => Ok(c.overlay(base, from, to)),
        }
    }

    /// Writes `key` (`None` deletes). Returns whether the cache went over
    /// its budget and must be flushed.
    pub(crate) fn write(
        &mut self,
        key: Bytes,
        value: Option<Bytes>,
        timestamp: i64,
        partition: i32,
        outbox: &mut Vec<OutputRecord>,
    ) -> Result<bool> {
        if !self.writable {
            return Err(StreamsError::Store {
                store: self.name.clone(),
                message: "a global store is read-only for stream processors".into(),
            });
        }
        if let Some(c) = &mut self.cache {
            return Ok(c.put(key, value, timestamp));
        }
        self.write_through(key, value, timestamp, partition, outbox)
            .map(|_| false)
    }

    fn write_through(
        &mut self,
        key: Bytes,
        value: Option<Bytes>,
        timestamp: i64,
        partition: i32,
        outbox: &mut Vec<OutputRecord>,
    ) -> Result<Option<Bytes>> {
        let (k2, v2) = (key.clone(), value.clone());
        let old = self.with_inner(move |s| match v2 {
            Some(v) => {
                let old = s.get(&k2)?;
                s.put(k2, v)?;
                Ok(old)
            }
            None => s.delete(&k2),
        })?;
        if let Some(l) = &self.logger {
            let value = match value {
                Some(v) if self.timestamped && v.len() >= 8 => Some(v.slice(8..)),
                v => v,
            };
            outbox.push(l.record(partition, key, value, timestamp));
        }
        Ok(old)
    }

    /// Writes every dirty cache entry to the inner store (and changelog),
    /// returning each with the inner store's previous value, in the order
    /// they were last updated. Then trims the cache to its budget.
    pub(crate) fn flush_cache(
        &mut self,
        partition: i32,
        outbox: &mut Vec<OutputRecord>,
    ) -> Result<Vec<(DirtyEntry, Option<Bytes>)>> {
        let Some(c) = &mut self.cache else {
            return Ok(Vec::new());
        };
        let dirty = c.take_dirty();
        let mut out = Vec::with_capacity(dirty.len());
        for e in dirty {
            let old = self.write_through(
                e.key.clone(),
                e.value.clone(),
                e.timestamp,
                partition,
                outbox,
            )?;
            out.push((e, old));
        }
        if let Some(c) = &mut self.cache {
            c.evict_clean();
        }
        Ok(out)
    }

    /// Applies a restored changelog record (with its timestamp) to the
    /// inner store.
    pub(crate) fn restore(
        &mut self,
        key: Bytes,
        value: Option<Bytes>,
        timestamp: i64,
    ) -> Result<()> {
        let value = match value {
            Some(v) if self.timestamped => {
                let mut b = Vec::with_capacity(8 + v.len());
                b.extend_from_slice(&timestamp.to_be_bytes());
                b.extend_from_slice(&v);
                Some(Bytes::from(b))
            }
            v => v,
        };
        self.with_inner(move |s| match value {
            Some(v) => s.put(key, v),
            None => s.delete(&key).map(|_| ()),
        })
    }

    /// Flushes the inner store.
    pub(crate) fn flush_inner(&mut self) -> Result<()> {
        if self.is_global() {
            return Ok(());
        }
        self.with_inner(|s| s.flush())
    }

    /// Closes the inner store (not a shared global one).
    pub(crate) fn close(&mut self) -> Result<()> {
        match &mut self.backend {
            Backend::Local(s) => s.close(),
            Backend::Global(_) => Ok(()),
        }
    }

    /// Reads the inner store directly (for tests and interactive queries).
    pub fn inner_all(&mut self) -> Result<Vec<(Bytes, Bytes)>> {
        self.range(None, None)
    }
}
