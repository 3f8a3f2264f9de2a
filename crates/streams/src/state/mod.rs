//! State stores: the traits every store implements. Stores hold raw bytes
//! (keys and values already serialized, as Kafka's inner `Bytes` stores do);
//! typed access sits on top. Ordering of `range`/`all` is the byte order of
//! keys.
//!
//! | module | owns |
//! |---|---|
//! | [`checkpoint`] | the `.checkpoint` file (Kafka's `OffsetCheckpoint` format) |
//! | [`directory`] | `state.dir/<application.id>/<task>/`, `.lock` files, process id, cleanup |
//! | [`persistent`] | the persistent key-value store on fjall |

use bytes::Bytes;

use crate::error::Result;

pub mod checkpoint;
pub mod directory;
pub mod persistent;

/// A key-value store (Kafka's `KeyValueStore<Bytes, byte[]>`).
pub trait KeyValueStore: Send + std::fmt::Debug {
    /// The store's name (also names its changelog topic).
    fn name(&self) -> &str;
    /// Whether the store keeps its data on disk across restarts.
    fn persistent(&self) -> bool;
    /// The value of `key`, if any.
    fn get(&self, key: &[u8]) -> Result<Option<Bytes>>;
    /// Sets `key` to `value`.
    fn put(&mut self, key: Bytes, value: Bytes) -> Result<()>;
    /// Removes `key`, returning its old value.
    fn delete(&mut self, key: &[u8]) -> Result<Option<Bytes>>;
    /// Entries with `from <= key < to` (unbounded where `None`), in key order.
    fn range(&self, from: Option<&[u8]>, to: Option<&[u8]>) -> Result<Vec<(Bytes, Bytes)>>;
    /// Every entry, in key order.
    fn all(&self) -> Result<Vec<(Bytes, Bytes)>> {
        self.range(None, None)
    }
    /// The number of entries (may be an estimate for persistent stores).
    fn approximate_num_entries(&self) -> u64;
    /// Makes every write so far durable (no-op in memory).
    fn flush(&mut self) -> Result<()>;
    /// Releases the store's resources.
    fn close(&mut self) -> Result<()>;
}

pub mod cache;
pub mod logging;
pub mod memory;

pub use memory::InMemoryKeyValueStore;
