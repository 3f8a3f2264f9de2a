//! [`ProcessorContext`]: what a processor can do while it runs.

use std::time::Duration;

use bytes::Bytes;

use super::{Data, Headers, RawRecord, Record};
use crate::error::{Result, StreamsError};
use crate::task::core::{Punctuation, TaskCore};
use crate::task::store::TaskStore;
use crate::task_id::TaskId;

/// Which clock drives a punctuation (Kafka's `PunctuationType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PunctuationType {
    /// Fires as stream time (the largest timestamp seen by the task)
    /// advances, aligned to multiples of the interval from 0.
    StreamTime,
    /// Fires as the system clock advances, first one interval after
    /// scheduling.
    WallClockTime,
}

/// A punctuation callback: receives the context and the time it fires at.
pub type Punctuator = Box<dyn FnMut(&mut ProcessorContext<'_>, i64) -> Result<()> + Send>;

/// A scheduled punctuation, to cancel it (Kafka's `Cancellable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cancellable(pub(crate) usize);

/// A processor's view of its task while it runs (Kafka's
/// `api.ProcessorContext`). Valid for one call.
pub struct ProcessorContext<'a> {
    pub(crate) core: &'a mut TaskCore,
    pub(crate) node: usize,
}

impl std::fmt::Debug for ProcessorContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessorContext")
            .field("node", &self.node_name())
            .finish()
    }
}

impl std::fmt::Debug for StoreHandle<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreHandle")
            .field("store", &self.store.name())
            .finish()
    }
}

impl<'a> ProcessorContext<'a> {
    pub(crate) fn new(core: &'a mut TaskCore, node: usize) -> Self {
        Self { core, node }
    }

    /// The running node's name.
    pub fn node_name(&self) -> &str {
        &self.core.nodes[self.node].name
    }

    /// The task this processor instance belongs to.
    pub fn task_id(&self) -> TaskId {
        self.core.task_id
    }

    /// `application.id`.
    pub fn application_id(&self) -> &str {
        &self.core.application_id
    }

    /// The topic of the record being processed (`None` in a punctuation).
    pub fn topic(&self) -> Option<&str> {
        self.core.meta.topic.as_deref()
    }

    /// The partition of the record being processed (`-1` in a punctuation).
    pub fn partition(&self) -> i32 {
        self.core.meta.partition
    }

    /// The offset of the record being processed (`-1` in a punctuation).
    pub fn offset(&self) -> i64 {
        self.core.meta.offset
    }

    /// The timestamp of the record being processed, or the punctuation time.
    pub fn timestamp(&self) -> i64 {
        self.core.meta.timestamp
    }

    /// The headers of the input record being processed.
    pub fn headers(&self) -> &Headers {
        &self.core.meta.headers
    }

    /// The task's stream time: the largest timestamp it has processed.
    pub fn current_stream_time(&self) -> i64 {
        self.core.stream_time
    }

    /// The wall-clock time the task last observed (ms since the epoch).
    pub fn current_system_time(&self) -> i64 {
        self.core.wall_clock
    }

    /// Forwards `record` to every child of this node.
    pub fn forward<K: Data, V: Data>(&mut self, record: Record<K, V>) -> Result<()> {
        self.forward_raw(RawRecord::from_typed(record))
    }

    /// Forwards `record` to the child named `child` only.
    pub fn forward_to<K: Data, V: Data>(
        &mut self,
        record: Record<K, V>,
        child: &str,
    ) -> Result<()> {
        let idx = self.core.nodes[self.node]
            .children
            .iter()
            .copied()
            .find(|&c| self.core.nodes[c].name == child)
            .ok_or_else(|| {
                StreamsError::Topology(format!(
                    "{} has no child named {child}",
                    self.core.nodes[self.node].name
                ))
            })?;
        self.core.run_node(idx, RawRecord::from_typed(record))
    }

    pub(crate) fn forward_raw(&mut self, record: RawRecord) -> Result<()> {
        let children = self.core.nodes[self.node].children.clone();
        for c in children {
            self.core.run_node(c, record.clone())?;
        }
        Ok(())
    }

    /// Schedules `punctuator` every `interval` on the `ty` clock (Kafka's
    /// `schedule`). Stream-time punctuations are aligned to 0 and fire as
    /// soon as data has arrived; wall-clock ones fire first one interval
    /// from now.
    pub fn schedule(
        &mut self,
        interval: Duration,
        ty: PunctuationType,
        punctuator: Punctuator,
    ) -> Result<Cancellable> {
        let interval = i64::try_from(interval.as_millis()).unwrap_or(i64::MAX);
        if interval < 1 {
            return Err(StreamsError::Config(
                "the minimum supported scheduling interval is 1 millisecond".into(),
            ));
        }
        let next = match ty {
            PunctuationType::StreamTime => 0,
            PunctuationType::WallClockTime => self.core.wall_clock.saturating_add(interval),
        };
        let id = self.core.punctuations.len();
        self.core.punctuations.push(Punctuation {
            node: self.node,
            interval,
            ty,
            next,
            punctuator: Some(punctuator),
            cancelled: false,
        });
        Ok(Cancellable(id))
    }

    /// Cancels a punctuation scheduled by [`ProcessorContext::schedule`].
    pub fn cancel(&mut self, c: Cancellable) {
        if let Some(p) = self.core.punctuations.get_mut(c.0) {
            p.cancelled = true;
        }
    }

    /// Asks for a commit as soon as possible (Kafka's `commit()`).
    pub fn commit(&mut self) {
        self.core.commit_requested = true;
    }

    /// The state store `name`, which must be connected to this processor
    /// (or be a global store).
    pub fn store(&mut self, name: &str) -> Result<StoreHandle<'_>> {
        let node_name = &self.core.nodes[self.node].name;
        let allowed = self.core.nodes[self.node].stores.iter().any(|s| s == name)
            || self.core.stores.get(name).is_some_and(|s| s.is_global());
        if !allowed {
            return Err(StreamsError::Store {
                store: name.to_string(),
                message: format!("processor {node_name} has no access to this store"),
            });
        }
        let store = self
            .core
            .stores
            .get_mut(name)
            .ok_or_else(|| StreamsError::Store {
                store: name.to_string(),
                message: "no such store in this task".into(),
            })?;
        Ok(StoreHandle {
            store,
            outbox: &mut self.core.outbox,
            evicted: &mut self.core.evicted,
            partition: self.core.task_id.partition,
            timestamp: self.core.meta.timestamp,
        })
    }

    /// Registers how flushed cache entries of store `name` are forwarded
    /// from this node (Kafka's `CacheFlushListener`).
    pub(crate) fn set_flush_listener(
        &mut self,
        name: &str,
        listener: crate::task::store::FlushListener,
    ) {
        let node = self.node;
        if let Some(s) = self.core.stores.get_mut(name) {
            s.listener = Some((node, listener));
        }
    }

    /// The store `name` seen through serdes (for processor-API stores;
    /// DSL stores hold timestamped values).
    pub fn typed_store<K: 'static, V: 'static>(
        &mut self,
        name: &str,
        key_serde: crate::serde::SerdeRef<K>,
        value_serde: crate::serde::SerdeRef<V>,
    ) -> Result<super::TypedStore<'_, K, V>> {
        Ok(super::TypedStore::new(
            self.store(name)?,
            key_serde,
            value_serde,
        ))
    }

    /// Whether store `name` is connected to this processor.
    pub fn has_store(&self, name: &str) -> bool {
        self.core.nodes[self.node].stores.iter().any(|s| s == name)
    }

    /// Whether the store `name` has a record cache in front (its updates
    /// are forwarded when the cache flushes rather than at once).
    pub fn store_is_cached(&self, name: &str) -> bool {
        self.core.stores.get(name).is_some_and(|s| s.cached())
    }
}

/// A state store as seen from a processor: reads see the cache, writes go
/// through the cache (if any) and the changelog (if logging is enabled).
pub struct StoreHandle<'a> {
    pub(crate) store: &'a mut TaskStore,
    pub(crate) outbox: &'a mut Vec<crate::task::OutputRecord>,
    pub(crate) evicted: &'a mut Vec<String>,
    pub(crate) partition: i32,
    pub(crate) timestamp: i64,
}

impl StoreHandle<'_> {
    /// The store's name.
    pub fn name(&self) -> &str {
        self.store.name()
    }
    /// The value of `key`.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Bytes>> {
        self.store.get(key)
    }
    /// Sets `key` to `value`.
    pub fn put(&mut self, key: Bytes, value: Bytes) -> Result<()> {
        self.write(key, Some(value))
    }
    /// Deletes `key`, returning its old value.
    pub fn delete(&mut self, key: &[u8]) -> Result<Option<Bytes>> {
        let old = self.store.get(key)?;
        self.write(Bytes::copy_from_slice(key), None)?;
        Ok(old)
    }
    /// Entries with `from <= key < to`, in key order.
    pub fn range(&mut self, from: Option<&[u8]>, to: Option<&[u8]>) -> Result<Vec<(Bytes, Bytes)>> {
        self.store.range(from, to)
    }
    /// Every entry, in key order.
    pub fn all(&mut self) -> Result<Vec<(Bytes, Bytes)>> {
        self.store.range(None, None)
    }
    /// Writes at a given timestamp (the changelog record's timestamp).
    pub fn write_at(&mut self, key: Bytes, value: Option<Bytes>, timestamp: i64) -> Result<()> {
        let evict = self
            .store
            .write(key, value, timestamp, self.partition, self.outbox)?;
        if evict {
            self.evicted.push(self.store.name().to_string());
        }
        Ok(())
    }
    fn write(&mut self, key: Bytes, value: Option<Bytes>) -> Result<()> {
        self.write_at(key, value, self.timestamp)
    }
}
