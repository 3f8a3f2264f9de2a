//! The record cache in front of a store (Kafka's `NamedCache` under
//! `statestore.cache.max.bytes`). Writes land in the cache as dirty entries;
//! several updates of one key between flushes collapse into one, so only
//! the last reaches the inner store, the changelog and downstream
//! processors. The cache flushes on commit and when it grows past its
//! budget (then every dirty entry is flushed, as Kafka does when it must
//! evict a dirty entry, and clean entries are evicted least recently used
//! first).

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

/// Bytes counted per entry besides key and value (Kafka counts object
/// overhead too).
const ENTRY_OVERHEAD: usize = 64;

/// A dirty entry handed out by a flush.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirtyEntry {
    /// The key.
    pub key: Bytes,
    /// The new value (`None`: deleted).
    pub value: Option<Bytes>,
    /// The timestamp of the last write.
    pub timestamp: i64,
}

#[derive(Debug)]
struct Entry {
    value: Option<Bytes>,
    timestamp: i64,
    dirty: bool,
    /// Position in the recency order.
    seq: u64,
}

/// One store's cache.
#[derive(Debug)]
pub struct RecordCache {
    max_bytes: usize,
    bytes: usize,
    next_seq: u64,
    entries: HashMap<Bytes, Entry>,
    /// seq → key, oldest first.
    order: BTreeMap<u64, Bytes>,
}

fn size(key: &[u8], value: &Option<Bytes>) -> usize {
    key.len() + value.as_ref().map_or(0, |v| v.len()) + ENTRY_OVERHEAD
}

impl RecordCache {
    /// An empty cache of at most `max_bytes`.
    pub fn new(max_bytes: usize) -> Self {
        Self {
            max_bytes,
            bytes: 0,
            next_seq: 0,
            entries: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    /// The bytes in use.
    pub fn size_bytes(&self) -> usize {
        self.bytes
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn touch(&mut self, key: &Bytes) {
        if let Some(e) = self.entries.get_mut(key) {
            self.order.remove(&e.seq);
            e.seq = self.next_seq;
            self.next_seq += 1;
            self.order.insert(e.seq, key.clone());
        }
    }

    /// The cached value: `Some(None)` is a cached delete, `None` a miss.
    pub fn get(&mut self, key: &[u8]) -> Option<Option<Bytes>> {
        let k = Bytes::copy_from_slice(key);
        let v = self.entries.get(&k).map(|e| e.value.clone())?;
        self.touch(&k);
        Some(v)
    }

    /// Caches a dirty write. Returns whether the cache is over budget.
    pub fn put(&mut self, key: Bytes, value: Option<Bytes>, timestamp: i64) -> bool {
        let added = size(&key, &value);
        let seq = self.next_seq;
        self.next_seq += 1;
        if let Some(old) = self.entries.insert(
            key.clone(),
            Entry {
                value,
                timestamp,
                dirty: true,
                seq,
            },
        ) {
            self.order.remove(&old.seq);
            self.bytes -= size(&key, &old.value);
        }
        self.order.insert(seq, key);
        self.bytes += added;
        self.bytes > self.max_bytes
    }

    /// Takes every dirty entry, least recently written first, and marks
    /// them clean.
    pub fn take_dirty(&mut self) -> Vec<DirtyEntry> {
        let mut out = Vec::new();
        for key in self.order.values() {
            if let Some(e) = self.entries.get_mut(key) {
                if e.dirty {
                    e.dirty = false;
                    out.push(DirtyEntry {
                        key: key.clone(),
                        value: e.value.clone(),
                        timestamp: e.timestamp,
                    });
                }
            }
        }
        out
    }

    /// Evicts clean entries, least recently used first, until within budget.
    pub fn evict_clean(&mut self) {
        while self.bytes > self.max_bytes {
            let victim = self
                .order
                .iter()
                .find(|(_, k)| self.entries.get(*k).is_some_and(|e| !e.dirty))
                .map(|(s, k)| (*s, k.clone()));
            let Some((seq, key)) = victim else { break };
            self.order.remove(&seq);
            if let Some(e) = self.entries.remove(&key) {
                self.bytes -= size(&key, &e.value);
            }
        }
    }

    /// `base` (an inner store's range in key order) with cached entries in
    /// `[from, to)` laid over it.
    pub fn overlay(
        &self,
        base: Vec<(Bytes, Bytes)>,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
    ) -> Vec<(Bytes, Bytes)> {
        let mut merged: BTreeMap<Bytes, Bytes> = base.into_iter().collect();
        for (k, e) in &self.entries {
            if from.is_some_and(|f| &k[..] < f) || to.is_some_and(|t| &k[..] >= t) {
                continue;
            }
            match &e.value {
                Some(v) => {
                    merged.insert(k.clone(), v.clone());
                }
                None => {
                    merged.remove(k);
                }
            }
        }
        merged.into_iter().collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn dedups_and_flushes_in_write_order() {
        let mut c = RecordCache::new(10_000);
        c.put(b("a"), Some(b("1")), 1);
        c.put(b("b"), Some(b("1")), 2);
        c.put(b("a"), Some(b("2")), 3);
        assert_eq!(c.get(b"a"), Some(Some(b("2"))));
        let d = c.take_dirty();
        assert_eq!(
            d,
            vec![
                DirtyEntry {
                    key: b("b"),
                    value: Some(b("1")),
                    timestamp: 2
                },
                DirtyEntry {
                    key: b("a"),
                    value: Some(b("2")),
                    timestamp: 3
                },
            ]
        );
        assert!(c.take_dirty().is_empty());
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn over_budget_is_reported_and_clean_entries_evicted() {
        let mut c = RecordCache::new(2 * (ENTRY_OVERHEAD + 2));
        assert!(!c.put(b("a"), Some(b("1")), 0));
        assert!(!c.put(b("b"), Some(b("1")), 0));
        assert!(c.put(b("c"), Some(b("1")), 0));
        c.take_dirty();
        c.evict_clean();
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(b"a"), None);
        let o = c.overlay(vec![(b("a"), b("0")), (b("z"), b("9"))], None, None);
        assert_eq!(
            o,
            vec![
                (b("a"), b("0")),
                (b("b"), b("1")),
                (b("c"), b("1")),
                (b("z"), b("9"))
            ]
        );
        // Only cached entries inside the range are laid over.
        let o = c.overlay(vec![(b("a"), b("0"))], None, Some(b"c"));
        assert_eq!(o, vec![(b("a"), b("0")), (b("b"), b("1"))]);
        c.put(b("b"), None, 1);
        assert_eq!(
            c.overlay(vec![(b("b"), b("0"))], None, None),
            vec![(b("c"), b("1"))]
        );
    }
}
