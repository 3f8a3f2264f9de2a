//! Replication rules, sans I/O: what a partition leader decides from its
//! followers' fetches (log end offsets, ISR shrink and expand proposals,
//! the high watermark) and where a follower truncates when its leader
//! changes (leader epochs, KIP-101/279). Kafka keeps these in `Partition`,
//! `Replica` and `AbstractFetcherThread`.
//!
//! Nothing here does I/O or reads a clock: callers pass the time and the
//! log end offsets, and carry out what comes back (an AlterPartition to the
//! controller, a truncation of the log). The deterministic simulation in
//! `sim_tests` drives these rules with a seeded scheduler over replicas,
//! a controller and crashes, and checks Kafka's guarantees after every
//! step.
//!
//! Wired in (design 019): the partition layer ([`crate::partition`]) keeps
//! a [`leader::LeaderState`] per led partition, `fetcher` is the follower
//! side (Fetch as a replica, truncation with OffsetForLeaderEpoch), `isr`
//! sends the leader's ISR changes through the metadata quorum,
//! `placement` places new replicas, `rebalance` moves leaderships back
//! to preferred replicas, and `throttle` holds the replication throttles
//! (design 023; reassignments themselves are
//! `sluice_controller::reassignment`).

pub(crate) mod fetcher;
pub(crate) mod follower;
pub(crate) mod isr;
pub(crate) mod leader;
pub(crate) mod placement;
pub(crate) mod rebalance;
pub(crate) mod throttle;

#[cfg(test)]
pub(crate) mod cluster_tests;
#[cfg(test)]
mod election_tests;
#[cfg(test)]
mod reassign_tests;
#[cfg(test)]
mod sim_tests;
