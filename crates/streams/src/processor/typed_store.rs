//! Typed access to a processor-API store (Kafka's `KeyValueStore<K, V>`
//! as `context.getStateStore` returns it): keys and values go through
//! serdes; the store underneath holds bytes.

use bytes::Bytes;

use super::StoreHandle;
use crate::error::Result;
use crate::serde::SerdeRef;

/// A store seen through a key serde and a value serde.
pub struct TypedStore<'a, K, V> {
    handle: StoreHandle<'a>,
    key_serde: SerdeRef<K>,
    value_serde: SerdeRef<V>,
}

impl<K, V> std::fmt::Debug for TypedStore<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedStore")
            .field("store", &self.handle.name())
            .finish()
    }
}

impl<'a, K: 'static, V: 'static> TypedStore<'a, K, V> {
    /// Wraps `handle`.
    pub fn new(handle: StoreHandle<'a>, key_serde: SerdeRef<K>, value_serde: SerdeRef<V>) -> Self {
        Self {
            handle,
            key_serde,
            value_serde,
        }
    }

    fn key(&self, key: &K) -> Result<Bytes> {
        self.key_serde.serialize(self.handle.name(), key)
    }

    /// The value of `key`.
    pub fn get(&mut self, key: &K) -> Result<Option<V>> {
        let kb = self.key(key)?;
        let v = self.handle.get(&kb)?;
        v.map(|b| self.value_serde.deserialize(self.handle.name(), &b))
            .transpose()
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: &K, value: &V) -> Result<()> {
        let kb = self.key(key)?;
        let vb = self.value_serde.serialize(self.handle.name(), value)?;
        self.handle.put(kb, vb)
    }

    /// Deletes `key`, returning its old value.
    pub fn delete(&mut self, key: &K) -> Result<Option<V>> {
        let kb = self.key(key)?;
        let old = self.handle.delete(&kb)?;
        old.map(|b| self.value_serde.deserialize(self.handle.name(), &b))
            .transpose()
    }

    /// Every entry, in key-byte order.
    pub fn all(&mut self) -> Result<Vec<(K, V)>> {
        let name = self.handle.name().to_string();
        self.handle
            .all()?
            .into_iter()
            .map(|(k, v)| {
                Ok((
                    self.key_serde.deserialize(&name, &k)?,
                    self.value_serde.deserialize(&name, &v)?,
                ))
            })
            .collect()
    }
}
