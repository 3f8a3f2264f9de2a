//! The metadata quorum's settings (design 018), from Kafka's keys:
//! `controller.quorum.voters` (`id@host:port,...`), `process.roles`,
//! `node.id`, the CONTROLLER listener of `listeners` named by
//! `controller.listener.names`, `controller.quorum.election.timeout.ms`
//! and `controller.quorum.request.timeout.ms`. No voters, or this node as
//! the only voter: the single combined node of before, with no controller
//! traffic.

use std::collections::BTreeMap;

use sluice_controller::quorum::QuorumConfig;

use super::{invalid, list_items, parse_endpoint, BrokerConfig, Listener};
use crate::error::Result;

impl BrokerConfig {
    /// `controller.quorum.voters` as id → `host:port` (empty: no quorum).
    pub fn quorum_voters(&self) -> Result<BTreeMap<u64, String>> {
        let v = self.str("controller.quorum.voters");
        let mut voters = BTreeMap::new();
        for item in list_items(&v).into_iter().filter(|s| !s.is_empty()) {
            let (id, addr) = item
                .split_once('@')
                .ok_or_else(|| invalid("controller.quorum.voters", &v, "expected id@host:port"))?;
            let id: u64 = id
                .trim()
                .parse()
                .map_err(|_| invalid("controller.quorum.voters", &v, format!("voter id {id}")))?;
            if voters.insert(id, addr.trim().to_string()).is_some() {
                return Err(invalid(
                    "controller.quorum.voters",
                    &v,
                    format!("voter {id} is named twice"),
                ));
            }
        }
        Ok(voters)
    }

    /// The listener the controller serves: the first of `listeners` named
    /// in `controller.listener.names`.
    pub fn controller_listener(&self) -> Result<Option<Listener>> {
        let v = self.str("listeners");
        let names = self.controller_listeners();
        for item in list_items(&v).into_iter().filter(|s| !s.is_empty()) {
            let (name, host, port) =
                parse_endpoint(item).map_err(|e| invalid("listeners", &v, e))?;
            if names.contains(&name) {
                return Ok(Some(Listener {
                    name,
                    host: if host.is_empty() {
                        "0.0.0.0".into()
                    } else {
                        host
                    },
                    port,
                }));
            }
        }
        Ok(None)
    }

    /// The quorum this node is a voter of, with its CONTROLLER listener;
    /// `None` without `controller.quorum.voters` or when this node, a
    /// combined one, is the only voter (single node). A broker-only node
    /// is the quorum's observer: its listener is where the leader pushes
    /// the log to, on the broker listener's host and a port of the
    /// system's choosing (port 0).
    pub fn quorum_config(&self) -> Result<Option<(QuorumConfig, Listener)>> {
        let roles = self.validate_roles()?;
        let voters = self.quorum_voters()?;
        if voters.is_empty() {
            return Ok(None);
        }
        let node_id = self.node_id();
        let id = u64::try_from(node_id).map_err(|_| {
            invalid(
                "node.id",
                &node_id.to_string(),
                "a node of a metadata quorum needs a node.id of at least 0",
            )
        })?;
        let is_voter = voters.contains_key(&id);
        // A quorum of this node alone is the single combined node: the
        // local metadata log of design 004, no controller traffic, as
        // before (and as data folders written by it expect). A
        // controller-only node always runs the quorum (brokers join it).
        if roles.broker && roles.controller && voters.len() == 1 && is_voter {
            return Ok(None);
        }
        let (id, listener, observer_host) = if roles.broker_only() {
            let served = self.listener()?;
            let advertised = self.advertised_listener()?;
            let listener = Listener {
                name: "OBSERVER".into(),
                host: served.host,
                port: 0,
            };
            (id, listener, Some(advertised.host))
        } else {
            // validate_roles: a controller is one of the voters and has
            // its listener.
            let listener = self.controller_listener()?.ok_or_else(|| {
                invalid(
                    "controller.listener.names",
                    &self.str("controller.listener.names"),
                    "a controller needs its listener in listeners (e.g. CONTROLLER://127.0.0.1:9093 with controller.listener.names=CONTROLLER)",
                )
            })?;
            (id, listener, None)
        };
        let mut c = QuorumConfig::new(id, voters);
        let election = self.int("controller.quorum.election.timeout.ms").max(10) as u64;
        c.election_timeout_ms = election;
        c.heartbeat_interval_ms = (election / 5).max(5);
        c.request_timeout_ms = self.int("controller.quorum.request.timeout.ms").max(1) as u64;
        c.broker_session_timeout_ms = self.int("broker.session.timeout.ms").max(10) as u64;
        c.unclean_leader_election_enable = self.bool("unclean.leader.election.enable");
        c.log = self.metadata_log_config()?;
        c.observer_host = observer_host;
        Ok(Some((c, listener)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> BrokerConfig {
        let mut c = BrokerConfig::default();
        for (k, v) in pairs {
            c.set(k, v).expect(k);
        }
        c
    }

    const THREE: &str = "1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097";

    #[test]
    fn voters_listener_and_roles_make_a_quorum() {
        let c = config(&[
            ("node.id", "2"),
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9095",
            ),
            ("controller.listener.names", "CONTROLLER"),
            ("controller.quorum.voters", THREE),
            ("controller.quorum.election.timeout.ms", "500"),
            ("unclean.leader.election.enable", "true"),
        ]);
        c.validate().expect("valid");
        let (q, l) = c.quorum_config().expect("parses").expect("a quorum");
        assert_eq!(q.node_id, 2);
        assert!(q.unclean_leader_election_enable);
        assert_eq!(q.voters.get(&3).map(String::as_str), Some("127.0.0.1:9097"));
        assert_eq!(q.election_timeout_ms, 500);
        assert_eq!((l.name.as_str(), l.port), ("CONTROLLER", 9095));
        // The broker listener is still the PLAINTEXT one.
        assert_eq!(c.listener().expect("listener").port, 9094);
    }

    #[test]
    fn no_voters_or_this_node_alone_is_a_single_node() {
        assert!(config(&[]).quorum_config().expect("ok").is_none());
        let alone = config(&[
            ("node.id", "1"),
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            ),
            ("controller.listener.names", "CONTROLLER"),
            ("controller.quorum.voters", "1@127.0.0.1:9093"),
        ]);
        assert!(alone.quorum_config().expect("ok").is_none());
    }

    #[test]
    fn a_voter_needs_its_id_listener_and_role() {
        let base = [
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9095",
            ),
            ("controller.listener.names", "CONTROLLER"),
            ("controller.quorum.voters", THREE),
        ];
        let mut not_a_voter = base.to_vec();
        not_a_voter.push(("node.id", "7"));
        assert!(config(&not_a_voter).validate().is_err());
        let mut broker_only = base.to_vec();
        broker_only.extend([("node.id", "1"), ("process.roles", "broker")]);
        assert!(config(&broker_only).validate().is_err());
        let no_listener = config(&[
            ("node.id", "1"),
            ("listeners", "PLAINTEXT://127.0.0.1:9094"),
            ("controller.listener.names", "CONTROLLER"),
            ("controller.quorum.voters", THREE),
        ]);
        assert!(no_listener.validate().is_err());
        let twice = config(&[("controller.quorum.voters", "1@a:1,1@b:2")]);
        assert!(twice.quorum_voters().is_err());
    }
}
