//! Coordinators as sans-IO state machines: they take requests and timer
//! events and return records to append (to `__consumer_offsets`) and
//! responses to send, so they are tested without sockets and can move with
//! partition leadership (brief, section 3).
//!
//! - `group`: Kafka's classic consumer group protocol (JoinGroup,
//!   SyncGroup, Heartbeat, LeaveGroup; states Empty, PreparingRebalance,
//!   CompletingRebalance, Stable, Dead).
//! - `offsets`: committed offsets and group metadata as records with
//!   Kafka's own key and value schemas.

mod convert;
pub mod error;
pub mod group;
pub mod offsets;

pub use error::CoordinatorError;
