//! The DSL (Kafka's `StreamsBuilder`, `KStream`, `KTable`,
//! `KGroupedStream`, `KGroupedTable`): typed operations that add named
//! nodes to a [`Topology`].
//!
//! Naming follows Kafka: each operation without a user name gets
//! `<PREFIX><10-digit index>` from one counter shared by processors and
//! stores (`KSTREAM-FILTER-0000000003`,
//! `KSTREAM-AGGREGATE-STATE-STORE-0000000002`); a user name comes from
//! `.named(Named::as_("..."))` on the stream or table (applies to the next
//! operation) and from `Materialized::as_("store")`.
//!
//! Tables propagate [`Change`]s (new and old value) as Kafka's KTable
//! processors do; old values are sent only where a downstream operation
//! needs them (re-aggregation), as Kafka's `enableSendingOldValues`.
//!
//! Differences from Java: builder-scoped state is shared through `Rc`, so
//! streams and tables are `!Send` (the built [`Topology`] is `Send`);
//! `KTable::to_stream` yields `Option<V>` values (tombstones are `None`);
//! `builder.table` always materializes its store.

mod change_serde;
mod config;
mod grouped;
mod kstream;
mod ktable;
mod processors;
mod table_join;

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::Arc;

pub use config::{Branched, Consumed, Grouped, Materialized, Named, Produced, Repartitioned};
pub use grouped::{KGroupedStream, KGroupedTable};
pub use kstream::{BranchedKStream, KStream};
pub use ktable::{Change, GlobalKTable, KTable};

use crate::error::{Result, StreamsError};
use crate::processor::{Data, ProcessorContext};
use crate::topology::Topology;

/// Builder state shared by the streams and tables it created.
pub(crate) struct Inner {
    pub topology: Topology,
    pub index: u32,
    /// The first error met while building (reported by `build`).
    pub error: Option<StreamsError>,
}

pub(crate) type Shared = Rc<RefCell<Inner>>;

impl Inner {
    /// `<prefix><index>` (Kafka's `newProcessorName`).
    pub(crate) fn new_processor_name(&mut self, prefix: &str) -> String {
        let n = format!("{prefix}{:010}", self.index);
        self.index += 1;
        n
    }
    /// `<prefix>STATE-STORE-<index>` (Kafka's `newStoreName`).
    pub(crate) fn new_store_name(&mut self, prefix: &str) -> String {
        let n = format!("{prefix}STATE-STORE-{:010}", self.index);
        self.index += 1;
        n
    }
    /// Records the first error.
    pub(crate) fn check<T>(&mut self, r: Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                if self.error.is_none() {
                    self.error = Some(e);
                }
                None
            }
        }
    }
}

/// A value getter's function: the current value and its timestamp.
pub(crate) type GetFn<K, V> =
    Arc<dyn Fn(&mut ProcessorContext<'_>, &K) -> Result<Option<(V, i64)>> + Send + Sync>;

/// Reads a table's current value for a key (Kafka's `KTableValueGetter`),
/// with the stores it reads.
pub(crate) struct ValueGetter<K, V> {
    pub stores: Vec<String>,
    pub get: GetFn<K, V>,
}

impl<K, V> Clone for ValueGetter<K, V> {
    fn clone(&self) -> Self {
        Self {
            stores: self.stores.clone(),
            get: self.get.clone(),
        }
    }
}

/// Builds topologies with the DSL (Kafka's `StreamsBuilder`).
pub struct StreamsBuilder {
    inner: Shared,
}

impl std::fmt::Debug for StreamsBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamsBuilder")
            .field("index", &self.inner.borrow().index)
            .finish()
    }
}

impl Default for StreamsBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamsBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self {
            inner: Rc::new(RefCell::new(Inner {
                topology: Topology::new(),
                index: 0,
                error: None,
            })),
        }
    }

    /// A stream of `topic` (Kafka's `stream`).
    pub fn stream<K: Data, V: Data>(&self, topic: &str, consumed: Consumed<K, V>) -> KStream<K, V> {
        self.stream_topics(&[topic], consumed)
    }

    /// A stream of several topics.
    pub fn stream_topics<K: Data, V: Data>(
        &self,
        topics: &[&str],
        consumed: Consumed<K, V>,
    ) -> KStream<K, V> {
        kstream::source(&self.inner, topics, consumed)
    }

    /// A table of `topic` (Kafka's `table`), materialized in a store named
    /// by `materialized` or `<topic>-STATE-STORE-<index>`.
    pub fn table<K: Data, V: Data>(
        &self,
        topic: &str,
        consumed: Consumed<K, V>,
        materialized: Materialized<K, V>,
    ) -> KTable<K, V> {
        ktable::source(&self.inner, topic, consumed, materialized)
    }

    /// A global table of `topic` (Kafka's `globalTable`): every instance
    /// holds all of it.
    pub fn global_table<K: Data, V: Data>(
        &self,
        topic: &str,
        consumed: Consumed<K, V>,
        materialized: Materialized<K, V>,
    ) -> GlobalKTable<K, V> {
        ktable::global_source(&self.inner, topic, consumed, materialized)
    }

    /// The topology built so far, or the first error met while building.
    pub fn build(&self) -> Result<Topology> {
        let mut inner = self.inner.borrow_mut();
        if let Some(e) = inner.error.take() {
            return Err(e);
        }
        Ok(inner.topology.clone())
    }
}

/// Source-node names of a stream or table's sub-topology (for
/// co-partitioning).
pub(crate) type Sources = BTreeSet<String>;

impl StreamsBuilder {
    /// Adds a store for processor-API processors (`KStream::process`).
    pub fn add_state_store(&self, builder: crate::topology::StoreBuilder) {
        let mut inner = self.inner.borrow_mut();
        let r = inner.topology.add_state_store(builder, &[]).map(|_| ());
        inner.check(r);
    }
}
