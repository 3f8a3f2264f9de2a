//! `process.roles` (Kafka KRaft): `broker`, `controller` or both, and the
//! checks Kafka's `KafkaConfig.validateValues` makes for each (design
//! 025). A combined node (both roles) without voters, or as the only
//! voter, is the single node; a broker-only node is an observer of the
//! quorum of `controller.quorum.voters`; a controller-only node is a voter
//! that serves only its CONTROLLER listener.

use super::{invalid, list_items, parse_endpoint, BrokerConfig};
use crate::error::Result;

/// This node's roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessRoles {
    pub broker: bool,
    pub controller: bool,
}

impl ProcessRoles {
    /// `process.roles=broker`: an observer of the quorum.
    pub fn broker_only(self) -> bool {
        self.broker && !self.controller
    }

    /// `process.roles=controller`: a voter with no broker.
    pub fn controller_only(self) -> bool {
        self.controller && !self.broker
    }
}

impl BrokerConfig {
    /// `process.roles`, with Kafka's messages for unknown, duplicate or
    /// missing roles.
    pub fn process_roles(&self) -> Result<ProcessRoles> {
        let v = self.str("process.roles");
        let items: Vec<&str> = list_items(&v)
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect();
        let mut roles = ProcessRoles {
            broker: false,
            controller: false,
        };
        for item in &items {
            let seen = match *item {
                "broker" => std::mem::replace(&mut roles.broker, true),
                "controller" => std::mem::replace(&mut roles.controller, true),
                role => {
                    return Err(invalid(
                        "process.roles",
                        &v,
                        format!("Unknown process role '{role}' (only 'broker' and 'controller' are allowed roles)"),
                    ))
                }
            };
            if seen {
                return Err(invalid(
                    "process.roles",
                    &v,
                    format!("Duplicate role names found in `process.roles`: {items:?}"),
                ));
            }
        }
        if !roles.broker && !roles.controller {
            return Err(invalid(
                "process.roles",
                &v,
                "must contain broker, controller or both",
            ));
        }
        Ok(roles)
    }

    /// `controller.quorum.bootstrap.servers` (KIP-853's dynamic quorum) is
    /// not supported: without `controller.quorum.voters` it may name only
    /// this node's own controller listener (a single node, as
    /// kafka-python's test fixture sets it); naming other controllers would
    /// silently start a separate single-node cluster, so it is refused.
    fn check_quorum_bootstrap(
        &self,
        voters: &std::collections::BTreeMap<u64, String>,
    ) -> Result<()> {
        let key = "controller.quorum.bootstrap.servers";
        let v = self.str(key);
        let servers: Vec<&str> = list_items(&v)
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect();
        if !voters.is_empty() || servers.is_empty() {
            return Ok(());
        }
        let own = self.controller_listener()?;
        let local =
            |h: &str| matches!(h, "" | "0.0.0.0" | "127.0.0.1" | "localhost" | "::" | "::1");
        let is_own = |s: &str| {
            let Some((host, port)) = s.rsplit_once(':') else {
                return false;
            };
            own.as_ref().is_some_and(|l| {
                port.parse::<u16>().ok() == Some(l.port)
                    && (host == l.host || (local(host) && local(&l.host)))
            })
        };
        if servers.iter().all(|s| is_own(s)) {
            return Ok(());
        }
        Err(invalid(
            key,
            &v,
            "dynamic controller quorums (KIP-853) are not supported: list every voter in controller.quorum.voters (id@host:port,...) instead",
        ))
    }

    /// Kafka's per-role checks of the listeners, the voters and the node
    /// id (`KafkaConfig.validateValues`, KRaft branches).
    pub(crate) fn validate_roles(&self) -> Result<ProcessRoles> {
        let roles = self.process_roles()?;
        let voters = self.quorum_voters()?;
        let node_id = self.node_id();
        let voter_ids: Vec<u64> = voters.keys().copied().collect();
        let is_voter = u64::try_from(node_id).is_ok_and(|id| voters.contains_key(&id));
        let names = self.controller_listeners();
        let listeners_v = self.str("listeners");
        let mut listener_names = Vec::new();
        for item in list_items(&listeners_v)
            .into_iter()
            .filter(|s| !s.is_empty())
        {
            let (name, _, _) =
                parse_endpoint(item).map_err(|e| invalid("listeners", &listeners_v, e))?;
            listener_names.push(name);
        }
        self.check_quorum_bootstrap(&voters)?;
        let no_voters = || {
            invalid(
                "controller.quorum.voters",
                &self.str("controller.quorum.voters"),
                "If using process.roles, either controller.quorum.bootstrap.servers must contain the set of bootstrap controllers or controller.quorum.voters must contain a parseable set of controllers.",
            )
        };
        if roles.broker_only() {
            if voters.is_empty() {
                return Err(no_voters());
            }
            if is_voter {
                return Err(invalid(
                    "node.id",
                    &node_id.to_string(),
                    format!("If process.roles contains just the 'broker' role, the node id {node_id} must not be included in the set of voters controller.quorum.voters={voter_ids:?}"),
                ));
            }
            if names.is_empty() {
                return Err(invalid(
                    "controller.listener.names",
                    "",
                    "controller.listener.names must contain at least one value when running KRaft with just the broker role",
                ));
            }
            if listener_names.iter().any(|n| names.contains(n)) {
                return Err(invalid(
                    "controller.listener.names",
                    &self.str("controller.listener.names"),
                    "controller.listener.names must not contain a value appearing in the 'listeners' configuration when running KRaft with just the broker role",
                ));
            }
        }
        if roles.controller {
            let controller_listener = listener_names.iter().any(|n| names.contains(n));
            if roles.controller_only() {
                if voters.is_empty() {
                    return Err(no_voters());
                }
                if listener_names.iter().any(|n| !names.contains(n)) {
                    return Err(invalid(
                        "listeners",
                        &listeners_v,
                        "The listeners config must only contain KRaft controller listeners from controller.listener.names when process.roles=controller",
                    ));
                }
            }
            // A combined node without voters (or with itself alone) is
            // the single node, which serves no controller listener.
            let single = roles.broker && (voters.is_empty() || (voters.len() == 1 && is_voter));
            if !single {
                if !voters.is_empty() && !is_voter {
                    return Err(invalid(
                        "node.id",
                        &node_id.to_string(),
                        format!("If process.roles contains the 'controller' role, the node id {node_id} must be included in the set of voters controller.quorum.voters={voter_ids:?}"),
                    ));
                }
                if !controller_listener {
                    return Err(invalid(
                        "controller.listener.names",
                        &self.str("controller.listener.names"),
                        "controller.listener.names must contain at least one value appearing in the 'listeners' configuration when running the KRaft controller role",
                    ));
                }
                if names.iter().any(|n| !listener_names.contains(n)) {
                    return Err(invalid(
                        "controller.listener.names",
                        &self.str("controller.listener.names"),
                        "controller.listener.names must only contain values appearing in the 'listeners' configuration when running the KRaft controller role",
                    ));
                }
            }
        }
        Ok(roles)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::BrokerError;

    const VOTERS: &str = "1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097";

    fn config(pairs: &[(&str, &str)]) -> BrokerConfig {
        let mut c = BrokerConfig::default();
        for (k, v) in pairs {
            c.set(k, v).expect(k);
        }
        c
    }

    /// The key a validation failure names, and its reason.
    fn refused(pairs: &[(&str, &str)]) -> (String, String) {
        match config(pairs).validate() {
            Err(BrokerError::InvalidConfig { key, reason, .. }) => (key, reason),
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    fn controller(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
        let mut v = vec![
            ("process.roles", "controller"),
            ("node.id", "1"),
            ("listeners", "CONTROLLER://127.0.0.1:9093"),
            ("controller.listener.names", "CONTROLLER"),
            ("controller.quorum.voters", VOTERS),
        ];
        v.extend_from_slice(extra);
        v
    }

    fn broker(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
        let mut v = vec![
            ("process.roles", "broker"),
            ("node.id", "4"),
            ("listeners", "PLAINTEXT://127.0.0.1:9092"),
            ("controller.listener.names", "CONTROLLER"),
            ("controller.quorum.voters", VOTERS),
        ];
        v.extend_from_slice(extra);
        v
    }

    #[test]
    fn quorum_bootstrap_servers_may_name_only_this_node() {
        let own = [
            ("controller.quorum.bootstrap.servers", "localhost:19093"),
            (
                "listeners",
                "PLAINTEXT://localhost:19092,CONTROLLER://localhost:19093",
            ),
            ("controller.listener.names", "CONTROLLER"),
        ];
        config(&own).validate_roles().expect("its own listener");
        let (key, _) = refused(&[
            (
                "controller.quorum.bootstrap.servers",
                "127.0.0.1:19093,127.0.0.1:29093",
            ),
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093",
            ),
            ("controller.listener.names", "CONTROLLER"),
        ]);
        assert_eq!(key, "controller.quorum.bootstrap.servers");
    }

    #[test]
    fn no_arguments_is_the_single_combined_node() {
        let c = BrokerConfig::default();
        c.validate().expect("valid");
        assert_eq!(
            c.process_roles().expect("roles"),
            ProcessRoles {
                broker: true,
                controller: true
            }
        );
        assert!(c.quorum_config().expect("ok").is_none());
    }

    #[test]
    fn unknown_duplicate_and_missing_roles_are_refused() {
        let mut c = BrokerConfig::default();
        // The key's own check already refuses an unknown role.
        assert!(c.set("process.roles", "broker,zookeeper").is_err());
        c.set("process.roles", "broker,broker").expect("set");
        let e = c.process_roles().expect_err("duplicate");
        assert!(
            e.to_string()
                .contains("Duplicate role names found in `process.roles`"),
            "{e}"
        );
        c.set("process.roles", "").expect("set");
        assert!(c.process_roles().is_err());
    }

    #[test]
    fn a_controller_only_node_serves_only_its_controller_listener() {
        let c = config(&controller(&[]));
        c.validate().expect("valid");
        let roles = c.process_roles().expect("roles");
        assert!(roles.controller_only() && !roles.broker_only());
        let (q, l) = c.quorum_config().expect("ok").expect("a voter");
        assert_eq!((q.node_id, q.observer_host.clone()), (1, None));
        assert_eq!((l.name.as_str(), l.port), ("CONTROLLER", 9093));
        // A broker listener beside it.
        let (key, reason) = refused(&controller(&[(
            "listeners",
            "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        )]));
        assert_eq!(key, "listeners");
        assert!(
            reason.contains("must only contain KRaft controller listeners"),
            "{reason}"
        );
        // Not a voter.
        let (key, reason) = refused(&controller(&[("node.id", "7")]));
        assert_eq!(key, "node.id");
        assert!(
            reason.contains("must be included in the set of voters"),
            "{reason}"
        );
        // No voters.
        let (key, _) = refused(&controller(&[("controller.quorum.voters", "")]));
        assert_eq!(key, "controller.quorum.voters");
        // Its listener not named in controller.listener.names.
        let (key, _) = refused(&controller(&[("controller.listener.names", "OTHER")]));
        assert_eq!(key, "listeners");
        // A single controller-only voter still runs the quorum (brokers
        // join it).
        let alone = config(&controller(&[(
            "controller.quorum.voters",
            "1@127.0.0.1:9093",
        )]));
        alone.validate().expect("valid");
        assert!(alone.quorum_config().expect("ok").is_some());
    }

    #[test]
    fn a_broker_only_node_is_an_observer_of_the_voters() {
        let c = config(&broker(&[(
            "advertised.listeners",
            "PLAINTEXT://node4.example:9092",
        )]));
        c.validate().expect("valid");
        assert!(c.process_roles().expect("roles").broker_only());
        let (q, l) = c.quorum_config().expect("ok").expect("an observer");
        assert_eq!(q.node_id, 4);
        assert_eq!(q.voters.len(), 3);
        // The leader pushes the log to the advertised host, on a port
        // chosen at bind.
        assert_eq!(q.observer_host.as_deref(), Some("node4.example"));
        assert_eq!((l.host.as_str(), l.port), ("127.0.0.1", 0));
        // A voter's id.
        let (key, reason) = refused(&broker(&[("node.id", "2")]));
        assert_eq!(key, "node.id");
        assert!(
            reason.contains("must not be included in the set of voters"),
            "{reason}"
        );
        // No voters.
        let (key, _) = refused(&broker(&[("controller.quorum.voters", "")]));
        assert_eq!(key, "controller.quorum.voters");
        // No controller.listener.names.
        let (key, reason) = refused(&broker(&[("controller.listener.names", "")]));
        assert_eq!(key, "controller.listener.names");
        assert!(
            reason.contains("must contain at least one value"),
            "{reason}"
        );
        // A controller listener of its own.
        let (key, reason) = refused(&broker(&[(
            "listeners",
            "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        )]));
        assert_eq!(key, "controller.listener.names");
        assert!(
            reason.contains("must not contain a value appearing in the 'listeners'"),
            "{reason}"
        );
    }

    #[test]
    fn a_combined_voter_needs_its_id_and_controller_listener() {
        let base = [
            ("process.roles", "broker,controller"),
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9095",
            ),
            ("controller.listener.names", "CONTROLLER"),
            ("controller.quorum.voters", VOTERS),
        ];
        let mut ok = base.to_vec();
        ok.push(("node.id", "2"));
        config(&ok).validate().expect("valid");
        let mut stranger = base.to_vec();
        stranger.push(("node.id", "9"));
        assert_eq!(refused(&stranger).0, "node.id");
        let mut no_listener = base.to_vec();
        no_listener.extend([
            ("node.id", "2"),
            ("listeners", "PLAINTEXT://127.0.0.1:9094"),
        ]);
        assert_eq!(refused(&no_listener).0, "controller.listener.names");
    }
}
