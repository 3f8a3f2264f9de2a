//! The metadata image: what the metadata records add up to.

use std::collections::{BTreeMap, HashMap};

use uuid::Uuid;

use crate::records::{BrokerEndpoint, MetadataRecord, RESOURCE_BROKER, RESOURCE_TOPIC};

/// A registered broker (its last RegisterBrokerRecord).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistration {
    pub id: i32,
    pub incarnation_id: Uuid,
    pub epoch: i64,
    pub endpoints: Vec<BrokerEndpoint>,
    pub rack: Option<String>,
    pub fenced: bool,
    /// In controlled shutdown (Kafka's `BrokerRegistration.inControlledShutdown`):
    /// it leads nothing new and joins no ISR until it registers again.
    pub in_controlled_shutdown: bool,
}

/// One partition's placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionImage {
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// Replicas an ongoing reassignment removes once it completes
    /// (Kafka's `PartitionRegistration.removingReplicas`); empty when no
    /// reassignment is in progress.
    pub removing_replicas: Vec<i32>,
    /// Replicas an ongoing reassignment adds (they are in `replicas`
    /// already and join the ISR as they catch up).
    pub adding_replicas: Vec<i32>,
}

impl PartitionImage {
    /// Whether a reassignment is in progress (Kafka's
    /// `isReassignmentInProgress`).
    pub fn is_reassigning(&self) -> bool {
        !self.removing_replicas.is_empty() || !self.adding_replicas.is_empty()
    }
}

/// One topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicImage {
    pub name: String,
    pub id: Uuid,
    pub partitions: BTreeMap<i32, PartitionImage>,
    /// Topic config overrides (keys not set use the broker defaults).
    pub configs: BTreeMap<String, String>,
}

/// Topics by name and id, dynamic broker configs, and the producer ids
/// handed out so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataImage {
    topics: BTreeMap<String, TopicImage>,
    names: HashMap<Uuid, String>,
    broker_configs: BTreeMap<String, String>,
    /// Dynamic configs of one broker (ConfigRecords naming its id), by id.
    per_broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Registered brokers by id.
    brokers: BTreeMap<i32, BrokerRegistration>,
    /// The first producer id of the next block (Kafka's
    /// `ProducerIdsImage.nextProducerId`); -1 while no block was given out.
    next_producer_id: i64,
}

impl Default for MetadataImage {
    fn default() -> Self {
        Self {
            topics: BTreeMap::new(),
            names: HashMap::new(),
            broker_configs: BTreeMap::new(),
            per_broker_configs: BTreeMap::new(),
            brokers: BTreeMap::new(),
            next_producer_id: -1,
        }
    }
}

impl MetadataImage {
    /// Applies one record. Records about unknown topics are ignored (a
    /// topic removed earlier in the same log).
    pub fn apply(&mut self, rec: &MetadataRecord) {
        match rec {
            MetadataRecord::RegisterBroker {
                broker_id,
                incarnation_id,
                broker_epoch,
                endpoints,
                rack,
                fenced,
            } => {
                self.brokers.insert(
                    *broker_id,
                    BrokerRegistration {
                        id: *broker_id,
                        incarnation_id: *incarnation_id,
                        epoch: *broker_epoch,
                        endpoints: endpoints.clone(),
                        rack: rack.clone(),
                        fenced: *fenced,
                        in_controlled_shutdown: false,
                    },
                );
            }
            MetadataRecord::BrokerRegistrationChange {
                broker_id,
                broker_epoch,
                fenced,
                in_controlled_shutdown,
            } => {
                // Only for the registration it names (Kafka checks the
                // epoch too).
                if let Some(b) = self
                    .brokers
                    .get_mut(broker_id)
                    .filter(|b| b.epoch == *broker_epoch)
                {
                    match fenced {
                        1 => b.fenced = true,
                        -1 => b.fenced = false,
                        _ => {}
                    }
                    if *in_controlled_shutdown == 1 {
                        b.in_controlled_shutdown = true;
                    }
                }
            }
            MetadataRecord::Topic { name, topic_id } => {
                self.names.insert(*topic_id, name.clone());
                self.topics.insert(
                    name.clone(),
                    TopicImage {
                        name: name.clone(),
                        id: *topic_id,
                        partitions: BTreeMap::new(),
                        configs: BTreeMap::new(),
                    },
                );
            }
            MetadataRecord::Partition {
                partition_id,
                topic_id,
                replicas,
                isr,
                leader,
                leader_epoch,
                partition_epoch,
                removing_replicas,
                adding_replicas,
            } => {
                if let Some(t) = self
                    .names
                    .get(topic_id)
                    .and_then(|n| self.topics.get_mut(n))
                {
                    t.partitions.insert(
                        *partition_id,
                        PartitionImage {
                            replicas: replicas.clone(),
                            isr: isr.clone(),
                            leader: *leader,
                            leader_epoch: *leader_epoch,
                            partition_epoch: *partition_epoch,
                            removing_replicas: removing_replicas.clone(),
                            adding_replicas: adding_replicas.clone(),
                        },
                    );
                }
            }
            MetadataRecord::Config {
                resource_type,
                resource_name,
                name,
                value,
            } => {
                let target = match *resource_type {
                    RESOURCE_TOPIC => self.topics.get_mut(resource_name).map(|t| &mut t.configs),
                    RESOURCE_BROKER if resource_name.is_empty() => Some(&mut self.broker_configs),
                    RESOURCE_BROKER => Some(
                        self.per_broker_configs
                            .entry(resource_name.clone())
                            .or_default(),
                    ),
                    _ => None,
                };
                if let Some(configs) = target {
                    match value {
                        Some(v) => configs.insert(name.clone(), v.clone()),
                        None => configs.remove(name),
                    };
                }
            }
            MetadataRecord::RemoveTopic { topic_id } => {
                if let Some(name) = self.names.remove(topic_id) {
                    self.topics.remove(&name);
                }
            }
            MetadataRecord::ProducerIds {
                broker_id,
                next_producer_id,
                ..
            } => {
                // Never backwards: ids below the highest recorded value
                // may have been given out (Kafka's controller refuses such
                // a record; replay keeps going and logs it).
                if *next_producer_id <= self.next_producer_id {
                    tracing::error!(
                        next_producer_id,
                        current = self.next_producer_id,
                        broker_id,
                        "ignoring a ProducerIdsRecord that does not move the next producer id forward"
                    );
                } else {
                    self.next_producer_id = *next_producer_id;
                }
            }
        }
    }

    /// The first producer id not handed out yet (-1 while none was).
    pub fn next_producer_id(&self) -> i64 {
        self.next_producer_id
    }

    pub fn topic(&self, name: &str) -> Option<&TopicImage> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: &Uuid) -> Option<&TopicImage> {
        self.names.get(id).and_then(|n| self.topics.get(n))
    }

    pub fn topics(&self) -> impl Iterator<Item = &TopicImage> {
        self.topics.values()
    }

    /// Registered brokers, by id.
    pub fn brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values()
    }

    pub fn broker(&self, id: i32) -> Option<&BrokerRegistration> {
        self.brokers.get(&id)
    }

    /// The cluster-wide dynamic broker configs (resource name "").
    pub fn broker_configs(&self) -> &BTreeMap<String, String> {
        &self.broker_configs
    }

    /// The dynamic configs set for broker `id` alone (resource name = id).
    pub fn broker_configs_of(&self, id: i32) -> Option<&BTreeMap<String, String>> {
        self.per_broker_configs.get(&id.to_string())
    }

    /// The records that rebuild this image from nothing (what a snapshot
    /// holds): the broker registrations, per topic its TopicRecord, ConfigRecords and
    /// PartitionRecords, then the broker configs (cluster default, resource
    /// name ""), then the next producer id once one was handed out (broker
    /// id and epoch -1, as Kafka's `ProducerIdsImage.write`).
    pub fn to_records(&self) -> Vec<MetadataRecord> {
        let mut out: Vec<MetadataRecord> = Vec::new();
        for b in self.brokers.values() {
            out.push(MetadataRecord::RegisterBroker {
                broker_id: b.id,
                incarnation_id: b.incarnation_id,
                broker_epoch: b.epoch,
                endpoints: b.endpoints.clone(),
                rack: b.rack.clone(),
                fenced: b.fenced,
            });
            if b.in_controlled_shutdown {
                out.push(MetadataRecord::BrokerRegistrationChange {
                    broker_id: b.id,
                    broker_epoch: b.epoch,
                    fenced: 0,
                    in_controlled_shutdown: 1,
                });
            }
        }
        for t in self.topics.values() {
            out.push(MetadataRecord::Topic {
                name: t.name.clone(),
                topic_id: t.id,
            });
            out.extend(t.configs.iter().map(|(k, v)| MetadataRecord::Config {
                resource_type: RESOURCE_TOPIC,
                resource_name: t.name.clone(),
                name: k.clone(),
                value: Some(v.clone()),
            }));
            out.extend(
                t.partitions
                    .iter()
                    .map(|(&p, pi)| MetadataRecord::Partition {
                        partition_id: p,
                        topic_id: t.id,
                        replicas: pi.replicas.clone(),
                        isr: pi.isr.clone(),
                        leader: pi.leader,
                        leader_epoch: pi.leader_epoch,
                        partition_epoch: pi.partition_epoch,
                        removing_replicas: pi.removing_replicas.clone(),
                        adding_replicas: pi.adding_replicas.clone(),
                    }),
            );
        }
        out.extend(
            self.broker_configs
                .iter()
                .map(|(k, v)| MetadataRecord::Config {
                    resource_type: RESOURCE_BROKER,
                    resource_name: String::new(),
                    name: k.clone(),
                    value: Some(v.clone()),
                }),
        );
        for (id, configs) in &self.per_broker_configs {
            out.extend(configs.iter().map(|(k, v)| MetadataRecord::Config {
                resource_type: RESOURCE_BROKER,
                resource_name: id.clone(),
                name: k.clone(),
                value: Some(v.clone()),
            }));
        }
        if self.next_producer_id >= 0 {
            out.push(MetadataRecord::ProducerIds {
                broker_id: -1,
                broker_epoch: -1,
                next_producer_id: self.next_producer_id,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_build_the_image() {
        let id = Uuid::from_u128(7);
        let mut img = MetadataImage::default();
        img.apply(&MetadataRecord::Topic {
            name: "t".into(),
            topic_id: id,
        });
        for p in 0..3 {
            img.apply(&MetadataRecord::Partition {
                partition_id: p,
                topic_id: id,
                replicas: vec![1],
                isr: vec![1],
                leader: 1,
                leader_epoch: 0,
                partition_epoch: 0,
                removing_replicas: vec![],
                adding_replicas: vec![],
            });
        }
        img.apply(&MetadataRecord::Config {
            resource_type: RESOURCE_TOPIC,
            resource_name: "t".into(),
            name: "retention.ms".into(),
            value: Some("5".into()),
        });
        let t = img.topic("t").expect("topic");
        assert_eq!(t.partitions.len(), 3);
        assert_eq!(t.configs["retention.ms"], "5");
        assert_eq!(img.topic_by_id(&id).map(|t| t.name.as_str()), Some("t"));
        img.apply(&MetadataRecord::Config {
            resource_type: RESOURCE_TOPIC,
            resource_name: "t".into(),
            name: "retention.ms".into(),
            value: None,
        });
        assert!(img.topic("t").expect("topic").configs.is_empty());
        img.apply(&MetadataRecord::RemoveTopic { topic_id: id });
        assert!(img.topic("t").is_none());
        assert_eq!(img.topics().count(), 0);
    }

    #[test]
    fn to_records_rebuilds_the_same_image() {
        let mut img = MetadataImage::default();
        for (i, name) in ["a", "b", "gone"].iter().enumerate() {
            let id = Uuid::from_u128(i as u128 + 1);
            img.apply(&MetadataRecord::Topic {
                name: (*name).into(),
                topic_id: id,
            });
            for p in 0..=i as i32 {
                img.apply(&MetadataRecord::Partition {
                    partition_id: p,
                    topic_id: id,
                    replicas: vec![1],
                    isr: vec![1],
                    leader: 1,
                    leader_epoch: p,
                    partition_epoch: 0,
                    removing_replicas: vec![],
                    adding_replicas: vec![],
                });
            }
            img.apply(&MetadataRecord::Config {
                resource_type: RESOURCE_TOPIC,
                resource_name: (*name).into(),
                name: "retention.ms".into(),
                value: Some(format!("{i}")),
            });
        }
        img.apply(&MetadataRecord::RemoveTopic {
            topic_id: Uuid::from_u128(3),
        });
        for id in [1, 2] {
            img.apply(&MetadataRecord::RegisterBroker {
                broker_id: id,
                incarnation_id: Uuid::from_u128(100 + id as u128),
                broker_epoch: 5,
                endpoints: vec![crate::records::BrokerEndpoint {
                    name: "PLAINTEXT".into(),
                    host: "127.0.0.1".into(),
                    port: 9090 + id as u16,
                    security_protocol: 0,
                }],
                rack: None,
                fenced: false,
            });
        }
        assert_eq!(img.brokers().count(), 2);
        // Fencing names the registration's epoch; another epoch is ignored.
        let change = |epoch, fenced| MetadataRecord::BrokerRegistrationChange {
            broker_id: 2,
            broker_epoch: epoch,
            fenced,
            in_controlled_shutdown: 0,
        };
        img.apply(&change(4, 1));
        assert!(!img.broker(2).expect("2").fenced);
        img.apply(&change(5, 1));
        assert!(img.broker(2).expect("2").fenced);
        img.apply(&change(5, 0));
        assert!(img.broker(2).expect("2").fenced);
        // Controlled shutdown is kept (snapshots too) until the broker
        // registers again.
        img.apply(&MetadataRecord::BrokerRegistrationChange {
            broker_id: 1,
            broker_epoch: 5,
            fenced: 0,
            in_controlled_shutdown: 1,
        });
        assert!(img.broker(1).expect("1").in_controlled_shutdown);
        img.apply(&MetadataRecord::Config {
            resource_type: RESOURCE_BROKER,
            resource_name: String::new(),
            name: "log.retention.ms".into(),
            value: Some("5".into()),
        });
        img.apply(&MetadataRecord::Config {
            resource_type: RESOURCE_BROKER,
            resource_name: "2".into(),
            name: "leader.replication.throttled.rate".into(),
            value: Some("100".into()),
        });
        assert_eq!(
            img.broker_configs_of(2)
                .map(|c| c["leader.replication.throttled.rate"].as_str()),
            Some("100")
        );
        assert!(!img
            .broker_configs()
            .contains_key("leader.replication.throttled.rate"));
        img.apply(&MetadataRecord::ProducerIds {
            broker_id: 1,
            broker_epoch: -1,
            next_producer_id: 2000,
        });
        let mut rebuilt = MetadataImage::default();
        for r in img.to_records() {
            rebuilt.apply(&r);
        }
        assert_eq!(rebuilt, img);
        assert_eq!(rebuilt.topics().count(), 2);
        assert_eq!(rebuilt.next_producer_id(), 2000);
    }

    #[test]
    fn the_next_producer_id_only_moves_forward() {
        let mut img = MetadataImage::default();
        assert_eq!(img.next_producer_id(), -1);
        assert!(
            img.to_records().is_empty(),
            "nothing to write before a block"
        );
        let ids = |next| MetadataRecord::ProducerIds {
            broker_id: 1,
            broker_epoch: -1,
            next_producer_id: next,
        };
        img.apply(&ids(1000));
        img.apply(&ids(2000));
        img.apply(&ids(1000));
        img.apply(&ids(2000));
        assert_eq!(img.next_producer_id(), 2000);
        assert_eq!(
            img.to_records(),
            vec![MetadataRecord::ProducerIds {
                broker_id: -1,
                broker_epoch: -1,
                next_producer_id: 2000,
            }]
        );
    }
}
