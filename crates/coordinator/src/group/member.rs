//! `Member`: one member of a classic group — identity, timeouts, supported
//! protocols, assignment, parked JoinGroup/SyncGroup requests and its
//! heartbeat deadline.

use std::collections::BTreeSet;

use super::types::{Protocol, RequestToken};

/// A JoinGroup parked until the join phase completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ParkedJoin {
    pub token: RequestToken,
    pub supports_skip_assignment: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<Protocol>,
    pub assignment: Vec<u8>,
    pub awaiting_join: Option<ParkedJoin>,
    pub awaiting_sync: Option<RequestToken>,
    /// Added by a JoinGroup whose join phase has not completed yet; such a
    /// member expires after the new-member join timeout even while parked.
    pub is_new: bool,
    /// When the session expires unless a heartbeat (or a parked request)
    /// keeps it alive.
    pub heartbeat_deadline: Option<i64>,
}

impl Member {
    /// Metadata of the given protocol, empty when unsupported.
    pub fn metadata(&self, protocol: Option<&str>) -> Vec<u8> {
        protocol
            .and_then(|name| self.protocols.iter().find(|p| p.name == name))
            .map(|p| p.metadata.clone())
            .unwrap_or_default()
    }

    /// The member's vote: its most preferred protocol among `candidates`.
    pub fn vote<'a>(&'a self, candidates: &BTreeSet<&str>) -> Option<&'a str> {
        self.protocols
            .iter()
            .map(|p| p.name.as_str())
            .find(|name| candidates.contains(name))
    }

    /// Same protocols, same metadata, same order.
    pub fn matches(&self, protocols: &[Protocol]) -> bool {
        self.protocols == protocols
    }

    /// A parked request counts as liveness, except for new members.
    pub fn kept_alive_by_parked_request(&self) -> bool {
        !self.is_new && (self.awaiting_join.is_some() || self.awaiting_sync.is_some())
    }
}
