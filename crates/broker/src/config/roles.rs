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
