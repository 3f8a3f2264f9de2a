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
//! Status: the single-node partition layer ([`crate::partition`]) has an
//! ISR of one and does not use this module yet; the cluster work wires it
//! in there (design 017).

#![allow(dead_code)] // Wired into the partition layer by the cluster work.

pub(crate) mod follower;
pub(crate) mod leader;
pub(crate) mod placement;

#[cfg(test)]
mod sim_tests;
