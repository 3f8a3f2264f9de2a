//! The in-memory key-value store (Kafka's `InMemoryKeyValueStore`): a
//! sorted map of bytes, lost on restart (restored from its changelog).

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;

use super::KeyValueStore;
use crate::error::Result;

/// A key-value store in a `BTreeMap`.
#[derive(Debug, Default)]
pub struct InMemoryKeyValueStore {
    name: String,
    map: BTreeMap<Bytes, Bytes>,
}

impl InMemoryKeyValueStore {
    /// An empty store named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            map: BTreeMap::new(),
        }
    }
}

impl KeyValueStore for InMemoryKeyValueStore {
    fn name(&self) -> &str {
        &self.name
    }
    fn persistent(&self) -> bool {
        false
    }
    fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        Ok(self.map.get(key).cloned())
    }
    fn put(&mut self, key: Bytes, value: Bytes) -> Result<()> {
        self.map.insert(key, value);
        Ok(())
    }
    fn delete(&mut self, key: &[u8]) -> Result<Option<Bytes>> {
        Ok(self.map.remove(key))
    }
    fn range(&self, from: Option<&[u8]>, to: Option<&[u8]>) -> Result<Vec<(Bytes, Bytes)>> {
        let lo = from.map_or(Bound::Unbounded, Bound::Included);
        let hi = to.map_or(Bound::Unbounded, Bound::Excluded);
        if let (Some(f), Some(t)) = (from, to) {
            if f >= t {
                return Ok(Vec::new());
            }
        }
        Ok(self
            .map
            .range::<[u8], _>((lo, hi))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }
    fn approximate_num_entries(&self) -> u64 {
        self.map.len() as u64
    }
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
    fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn put_get_delete_range() {
        let mut s = InMemoryKeyValueStore::new("s");
        for k in ["b", "a", "c"] {
            s.put(Bytes::from(k), Bytes::from("v")).unwrap();
        }
        assert_eq!(s.get(b"a").unwrap(), Some(Bytes::from("v")));
        let r = s.range(Some(b"b"), None).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(s.delete(b"b").unwrap(), Some(Bytes::from("v")));
        assert_eq!(s.all().unwrap().len(), 2);
        assert_eq!(s.approximate_num_entries(), 2);
    }
}
