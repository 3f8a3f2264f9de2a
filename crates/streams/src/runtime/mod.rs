//! The runtime: what runs a topology against a cluster.
//!
//! | module | owns |
//! |---|---|
//! | [`task`] | the [`RuntimeTask`] / [`TaskFactory`] traits the topology's tasks are driven through |
//! | [`state_manager`] | a task's locked folder, stores, restoration and checkpoint (`ProcessorStateManager`) |
//! | [`thread`] | `StreamThread`: consumer + producer + tasks, the poll/process/commit loop |
//! | [`kafka_streams`] | [`KafkaStreams`]: threads, states, listener, error handler |
//! | `global` | global stores: bootstrap and the global thread (`GlobalStreamThread`) |
//! | [`topology_tasks`] | the glue to the DSL's `Topology`: `StreamTask`s as runtime tasks |

mod global;
pub mod kafka_streams;
pub mod state_manager;
pub mod task;
pub mod thread;
pub mod topology_tasks;

pub use kafka_streams::{KafkaStreams, State, StreamThreadExceptionResponse};
pub use task::{OutputRecord, RuntimeTask, StoreSpec, TaskFactory};
