//! The processor API (Kafka's `org.apache.kafka.streams.processor.api`):
//! [`Record`], the [`Processor`] trait and its [`ProcessorContext`]
//! (forwarding, punctuation, commit requests, state stores, the current
//! record's metadata).
//!
//! Keys and values travel between processors type-erased
//! (`Arc<dyn Any + Send + Sync>`); a [`Processor<K, V>`] sees them typed. A
//! processor receiving a type other than the one its parent forwards fails
//! with [`StreamsError::Topology`] naming the node.
//!
//! Differences from Java: the context is passed to every call instead of
//! being kept from `init`, and punctuators are closures that receive the
//! context (state shared with the processor goes through stores or an
//! `Arc<Mutex<_>>`).

mod context;
mod typed_store;

use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;

pub use context::{Cancellable, ProcessorContext, PunctuationType, Punctuator, StoreHandle};
pub use typed_store::TypedStore;

use crate::error::{Result, StreamsError};

/// What keys and values must be to travel through a topology.
pub trait Data: Clone + Send + Sync + 'static {}
impl<T: Clone + Send + Sync + 'static> Data for T {}

/// A type-erased key or value.
pub(crate) type Dyn = Arc<dyn Any + Send + Sync>;

/// Wraps a value for travel.
pub(crate) fn erase<T: Data>(v: T) -> Dyn {
    Arc::new(v)
}

/// Takes a value back out of its travel wrapper (clones it when shared).
pub(crate) fn unerase<T: Data>(d: Dyn, node: &str, what: &str) -> Result<T> {
    match d.downcast::<T>() {
        Ok(a) => Ok(Arc::try_unwrap(a).unwrap_or_else(|a| (*a).clone())),
        Err(_) => Err(StreamsError::Topology(format!(
            "node {node} received a {what} of another type than {}",
            std::any::type_name::<T>()
        ))),
    }
}

/// One record header (Kafka's `Header`: a string key and nullable bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The header's key.
    pub key: String,
    /// The header's value.
    pub value: Option<Bytes>,
}

/// A record's headers, in order (Kafka's `Headers`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(pub Vec<Header>);

impl Headers {
    /// No headers.
    pub fn new() -> Self {
        Self::default()
    }
    /// Appends a header.
    pub fn add(&mut self, key: impl Into<String>, value: Option<Bytes>) -> &mut Self {
        self.0.push(Header {
            key: key.into(),
            value,
        });
        self
    }
    /// The last header named `key`, as Kafka's `lastHeader`.
    pub fn last_header(&self, key: &str) -> Option<&Header> {
        self.0.iter().rev().find(|h| h.key == key)
    }
    /// Removes every header named `key`.
    pub fn remove(&mut self, key: &str) {
        self.0.retain(|h| h.key != key);
    }
}

/// A record flowing through a topology (Kafka's `api.Record`).
#[derive(Debug, Clone, PartialEq)]
pub struct Record<K, V> {
    /// The key.
    pub key: K,
    /// The value.
    pub value: V,
    /// The timestamp (ms).
    pub timestamp: i64,
    /// The headers.
    pub headers: Headers,
}

impl<K, V> Record<K, V> {
    /// A record without headers.
    pub fn new(key: K, value: V, timestamp: i64) -> Self {
        Self {
            key,
            value,
            timestamp,
            headers: Headers::new(),
        }
    }
    /// The same record with another key.
    pub fn with_key<K2>(self, key: K2) -> Record<K2, V> {
        Record {
            key,
            value: self.value,
            timestamp: self.timestamp,
            headers: self.headers,
        }
    }
    /// The same record with another value.
    pub fn with_value<V2>(self, value: V2) -> Record<K, V2> {
        Record {
            key: self.key,
            value,
            timestamp: self.timestamp,
            headers: self.headers,
        }
    }
    /// The same record with another timestamp.
    pub fn with_timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = timestamp;
        self
    }
    /// The same record with other headers.
    pub fn with_headers(mut self, headers: Headers) -> Self {
        self.headers = headers;
        self
    }
}

/// A record with erased key and value.
#[derive(Clone)]
pub(crate) struct RawRecord {
    pub key: Dyn,
    pub value: Dyn,
    pub timestamp: i64,
    pub headers: Headers,
}

impl RawRecord {
    pub(crate) fn from_typed<K: Data, V: Data>(r: Record<K, V>) -> Self {
        Self {
            key: erase(r.key),
            value: erase(r.value),
            timestamp: r.timestamp,
            headers: r.headers,
        }
    }
    pub(crate) fn into_typed<K: Data, V: Data>(self, node: &str) -> Result<Record<K, V>> {
        Ok(Record {
            key: unerase(self.key, node, "key")?,
            value: unerase(self.value, node, "value")?,
            timestamp: self.timestamp,
            headers: self.headers,
        })
    }
}

/// A processor of records with keys `K` and values `V` (Kafka's
/// `api.Processor`). One instance exists per task; it is built by the
/// supplier given to [`crate::topology::Topology::add_processor`].
pub trait Processor<K, V>: Send {
    /// Called once before the first record; may schedule punctuations.
    fn init(&mut self, _ctx: &mut ProcessorContext<'_>) -> Result<()> {
        Ok(())
    }
    /// Processes one record; may forward any number of records.
    fn process(&mut self, ctx: &mut ProcessorContext<'_>, record: Record<K, V>) -> Result<()>;
    /// Called once when the task closes.
    fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

/// The erased processor every node runs.
pub(crate) trait RawProcessor: Send {
    fn init(&mut self, ctx: &mut ProcessorContext<'_>) -> Result<()>;
    fn process(&mut self, ctx: &mut ProcessorContext<'_>, record: RawRecord) -> Result<()>;
    fn close(&mut self) -> Result<()>;
}

/// Adapts a typed [`Processor`] to the erased graph.
pub(crate) struct TypedProcessor<P, K, V> {
    pub inner: P,
    pub _types: PhantomData<fn(K, V)>,
}

impl<P, K, V> TypedProcessor<P, K, V> {
    pub(crate) fn new(inner: P) -> Self {
        Self {
            inner,
            _types: PhantomData,
        }
    }
}

impl<P, K, V> RawProcessor for TypedProcessor<P, K, V>
where
    P: Processor<K, V>,
    K: Data,
    V: Data,
{
    fn init(&mut self, ctx: &mut ProcessorContext<'_>) -> Result<()> {
        self.inner.init(ctx)
    }
    fn process(&mut self, ctx: &mut ProcessorContext<'_>, record: RawRecord) -> Result<()> {
        let typed = record.into_typed::<K, V>(ctx.node_name())?;
        self.inner.process(ctx, typed)
    }
    fn close(&mut self) -> Result<()> {
        self.inner.close()
    }
}

/// Builds one processor instance per task (Kafka's `ProcessorSupplier`).
pub(crate) type RawSupplier = Arc<dyn Fn() -> Box<dyn RawProcessor> + Send + Sync>;

/// Forwards every record unchanged (source nodes and pass-through nodes).
pub(crate) struct PassThrough;

impl RawProcessor for PassThrough {
    fn init(&mut self, _ctx: &mut ProcessorContext<'_>) -> Result<()> {
        Ok(())
    }
    fn process(&mut self, ctx: &mut ProcessorContext<'_>, record: RawRecord) -> Result<()> {
        ctx.forward_raw(record)
    }
    fn close(&mut self) -> Result<()> {
        Ok(())
    }
}
