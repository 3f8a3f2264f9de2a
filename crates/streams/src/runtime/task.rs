//! What a stream thread needs of a task, as traits: the processing logic
//! (the topology's `StreamTask`) stays I/O-free behind [`RuntimeTask`], and
//! a [`TaskFactory`] builds tasks from their id, partitions and restored
//! stores. The runtime owns everything with I/O: the consumer, the
//! producer, the state folders, restoration and checkpoints.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use sluice_client::consumer::ConsumerRecord;
use sluice_client::TopicPartition;

use crate::error::Result;
use crate::state::directory::StateDirectory;
pub use crate::task::OutputRecord;
use crate::task_id::TaskId;

/// A state store a task needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreSpec {
    /// The store's name.
    pub name: String,
    /// On disk (fjall) or in memory.
    pub persistent: bool,
    /// Backed by a changelog `<application.id>-<name>-changelog`.
    pub logged: bool,
}

/// An active task as the stream thread drives it.
pub trait RuntimeTask: Send {
    /// Its id.
    fn id(&self) -> TaskId;
    /// Buffers records fetched from one of its partitions, in offset order.
    fn add_records(
        &mut self,
        partition: &TopicPartition,
        records: Vec<ConsumerRecord>,
    ) -> Result<()>;
    /// Applies one changelog record (with its timestamp) to store `store`
    /// while restoring (no changelog write, no cache, no forwarding);
    /// `None` deletes.
    fn restore(
        &mut self,
        store: &str,
        key: Bytes,
        value: Option<Bytes>,
        timestamp: i64,
    ) -> Result<()>;
    /// Records buffered but not processed yet for `partition`.
    fn buffered(&self, partition: &TopicPartition) -> usize;
    /// Processes at most one record (choosing across partitions by
    /// timestamp); `Ok(false)` when none is ready. `wall_clock_ms` is now.
    fn process(&mut self, wall_clock_ms: i64) -> Result<bool>;
    /// Runs due punctuations (stream time and wall-clock); whether any ran.
    fn punctuate(&mut self, wall_clock_ms: i64) -> Result<bool>;
    /// Takes the records produced since the last call.
    fn drain_output(&mut self) -> Vec<OutputRecord>;
    /// Per input partition, the offset after the last processed record (what
    /// to commit); partitions with nothing processed yet are absent.
    fn committable_offsets(&self) -> BTreeMap<TopicPartition, i64>;
    /// Whether the task asked for a commit (`context.commit()`).
    fn commit_requested(&mut self) -> bool {
        false
    }
    /// Flushes caches (which may produce output: call
    /// [`drain_output`](Self::drain_output) after) and stores.
    fn flush(&mut self) -> Result<()>;
    /// Closes processors and stores.
    fn close(&mut self) -> Result<()>;
}

/// Builds the tasks of one topology.
pub trait TaskFactory: Send + Sync {
    /// The stores of sub-topology `subtopology`.
    fn stores(&self, subtopology: u32) -> Vec<StoreSpec>;
    /// The task `id` over `partitions`. Its persistent stores must be
    /// [`PersistentKeyValueStore`](crate::state::persistent::PersistentKeyValueStore)s
    /// opened in [`StateDirectory::store_dir`] (the runtime wipes those
    /// folders when their state cannot be trusted); the runtime restores
    /// every logged store through [`RuntimeTask::restore`] before the first
    /// record.
    fn create_task(
        &self,
        id: TaskId,
        partitions: Vec<TopicPartition>,
        state_dir: &Arc<StateDirectory>,
    ) -> Result<Box<dyn RuntimeTask>>;
}
