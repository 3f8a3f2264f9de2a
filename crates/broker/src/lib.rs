//! The Kafka-compatible broker.
//!
//! - [`config`]: `server.properties` keys, defaults, layering.
//! - [`broker`]: shared state (logs, metadata image) and topic changes.
//! - [`server`]: the listener, start-up and graceful shutdown.
//! - `reconcile`: the data folder brought in line with the metadata at
//!   start (recorded deletions, stray folders, `partition.metadata`).
//! - `connection`: framing, request header, in-order dispatch per
//!   connection, limits (`socket.request.max.bytes`, idle timeout, body
//!   deadline).
//! - [`ServerAllocator`]: the allocator `sluice server` registers, so a
//!   hostile array count cannot make a reservation the kernel refuses.
//! - `limits`: bytes held by requests across connections
//!   (`queued.max.request.bytes`), `max.connections`,
//!   `max.connections.per.ip`.
//! - `partition`: the partition layer, the one owner of each led
//!   partition's leader state (log, leader epoch, ISR, high watermark,
//!   parked fetches); every append goes through it.
//! - `groups`: the group coordinator runtime over `sluice-coordinator`.
//! - `txn_coordinator`: the transaction coordinator runtime over
//!   `sluice-coordinator` (shards per `__transaction_state` partition,
//!   markers, timers); `txn_markers`: the marker write path.
//! - `metadata_follower`: with the metadata quorum (design 018), the data
//!   folder follows every committed metadata change, whoever made it.
//! - `log_dir_failure`: with the metadata quorum, a data folder gone
//!   offline hands the leaderships of its partitions to other replicas.
//! - `blocking`: disk work kept off the async workers.
//! - `producer_ids`: producer ids for InitProducerId, in blocks recorded
//!   in the metadata log.
//! - `handlers`: one file per Kafka API (decode, delegate, respond), each
//!   declaring the versions it implements; `handlers::errors` maps storage
//!   and broker errors to Kafka error codes in one place.

mod alloc;
mod blocking;
pub mod broker;
#[cfg(test)]
mod cluster_ops_tests;
pub mod config;
mod connection;
mod controlled_shutdown;
pub mod controller_node;
pub mod error;
mod failpoint;
mod fetch_session;
mod groups;
mod handlers;
mod inter_broker;
pub mod internal_topics;
mod limits;
mod log_dir_failure;
#[cfg(test)]
mod log_dir_failure_tests;
mod metadata_follower;
mod partition;
mod producer_ids;
mod reconcile;
mod replication;
#[cfg(test)]
mod roles_tests;
pub mod server;
#[cfg(test)]
mod test_quorum;
mod txn_coordinator;
mod txn_markers;

pub use alloc::ServerAllocator;
pub use broker::Broker;
pub use config::BrokerConfig;
pub use controller_node::ControllerNode;
pub use error::{BrokerError, Result};
pub use handlers::decode_request;
pub use server::Server;

/// The lib's own tests run with the server's allocator.
#[cfg(test)]
#[global_allocator]
static TEST_ALLOCATOR: ServerAllocator = ServerAllocator;
