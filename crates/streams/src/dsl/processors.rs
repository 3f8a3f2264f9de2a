//! The DSL's processors, as closures over typed records, and typed access
//! to byte stores.

use std::sync::Arc;

use crate::error::{Result, StreamsError};
use crate::processor::{
    Data, Processor, ProcessorContext, RawProcessor, RawSupplier, Record, TypedProcessor,
};
use crate::serde::SerdeRef;

/// A processing closure.
pub(crate) type ProcessFn<K, V> =
    Arc<dyn Fn(&mut ProcessorContext<'_>, Record<K, V>) -> Result<()> + Send + Sync>;
/// An init closure.
pub(crate) type InitFn = Arc<dyn Fn(&mut ProcessorContext<'_>) -> Result<()> + Send + Sync>;

/// A processor made of closures (stateless between records: state lives
/// in stores).
pub(crate) struct FnProcessor<K, V> {
    pub init: Option<InitFn>,
    pub process: ProcessFn<K, V>,
}

impl<K: Data, V: Data> Processor<K, V> for FnProcessor<K, V> {
    fn init(&mut self, ctx: &mut ProcessorContext<'_>) -> Result<()> {
        match &self.init {
            Some(f) => f(ctx),
            None => Ok(()),
        }
    }
    fn process(&mut self, ctx: &mut ProcessorContext<'_>, record: Record<K, V>) -> Result<()> {
        (self.process)(ctx, record)
    }
}

/// A supplier of [`FnProcessor`]s.
pub(crate) fn supplier<K: Data, V: Data>(
    init: Option<InitFn>,
    process: ProcessFn<K, V>,
) -> RawSupplier {
    Arc::new(move || {
        Box::new(TypedProcessor::<_, K, V>::new(FnProcessor {
            init: init.clone(),
            process: process.clone(),
        })) as Box<dyn RawProcessor>
    })
}

/// Typed access to a byte store.
pub(crate) struct KvAccess<K, V> {
    pub store: String,
    pub key_serde: SerdeRef<K>,
    pub value_serde: SerdeRef<V>,
}

impl<K, V> Clone for KvAccess<K, V> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            key_serde: self.key_serde.clone(),
            value_serde: self.value_serde.clone(),
        }
    }
}

impl<K: Data, V: Data> KvAccess<K, V> {
    /// Whether `key` serializes to null (a `None` of a nullable serde).
    pub(crate) fn key_is_null(&self, key: &K) -> Result<bool> {
        Ok(self
            .key_serde
            .serialize_nullable(&self.store, key)?
            .is_none())
    }

    /// The value of `key` and its timestamp.
    pub(crate) fn get(&self, ctx: &mut ProcessorContext<'_>, key: &K) -> Result<Option<(V, i64)>> {
        let kb = self.key_serde.serialize(&self.store, key)?;
        let v = ctx.store(&self.store)?.get(&kb)?;
        v.map(|b| self.decode(&b)).transpose()
    }

    /// A stored value: 8 bytes of timestamp (big-endian), then the value
    /// (Kafka's `ValueAndTimestamp` encoding).
    pub(crate) fn decode(&self, b: &[u8]) -> Result<(V, i64)> {
        let (ts, v) = b.split_first_chunk::<8>().ok_or_else(|| {
            StreamsError::Serde(format!("store {}: value without a timestamp", self.store))
        })?;
        Ok((
            self.value_serde.deserialize(&self.store, v)?,
            i64::from_be_bytes(*ts),
        ))
    }

    /// Writes (`None` deletes) with `timestamp`.
    pub(crate) fn put(
        &self,
        ctx: &mut ProcessorContext<'_>,
        key: &K,
        value: Option<&V>,
        timestamp: i64,
    ) -> Result<()> {
        let kb = self.key_serde.serialize(&self.store, key)?;
        let vb = match value {
            Some(v) => {
                let raw = self.value_serde.serialize(&self.store, v)?;
                let mut b = Vec::with_capacity(8 + raw.len());
                b.extend_from_slice(&timestamp.to_be_bytes());
                b.extend_from_slice(&raw);
                Some(bytes::Bytes::from(b))
            }
            None => None,
        };
        ctx.store(&self.store)?.write_at(kb, vb, timestamp)
    }
}
