//! Partition leadership when a broker's session changes (Kafka's
//! `ReplicationControlManager.handleBrokerFenced` / `handleBrokerUnfenced`
//! and `PartitionChangeBuilder.electAnyLeader`): a fenced broker leaves
//! every ISR it is in (unless it is the last member), and each partition
//! it led gets a new leader, the first replica (in replica order) in the
//! ISR that is registered, not fenced and not in controlled shutdown, with
//! the next leader epoch. With none, the partition has no leader (-1)
//! until an ISR member comes back, unless `unclean.leader.election.enable`
//! is on for its topic ([`unclean_enabled`]): then the first such replica
//! out of the ISR leads, and the ISR becomes just it (an unclean election:
//! what only the old ISR had is lost). An unfenced broker brings the
//! leaderless partitions it is a replica of back: their first usable ISR
//! member leads (it, when it is in the ISR), else, with unclean election
//! on, their first usable replica (it, at the latest).
//!
//! Elections asked for (ElectLeaders) and the automatic preferred-leader
//! rebalance follow Kafka's `PartitionChangeBuilder`: a PREFERRED election
//! makes the first replica leader when it is in the ISR and not fenced; an
//! UNCLEAN one gives a leaderless partition a leader from its ISR, else
//! from any live replica (its ISR then shrinks to that replica).
//!
//! Controlled shutdown (Kafka's `handleBrokerInControlledShutdown`): the
//! broker is marked in controlled shutdown and, in the same change, leaves
//! the ISRs and hands its leaderships over exactly as if it were fenced; a
//! broker in controlled shutdown is never elected and never elected again
//! on its own partitions until it registers anew (a restart).
//!
//! A failed data folder (KIP-858's `handleDirectoriesOffline`, for the
//! partitions the broker leads): [`on_replicas_offline`] moves each
//! leadership of the broker whose replica is offline to another ISR member
//! and takes the broker out of that ISR.

use crate::image::{MetadataImage, PartitionImage, TopicImage};
use crate::reassignment::{self, Target};
use crate::records::MetadataRecord;

/// The topic and broker config key.
pub const UNCLEAN_LEADER_ELECTION_ENABLE: &str = "unclean.leader.election.enable";

/// Whether `unclean.leader.election.enable` is on for topic `t` (Kafka's
/// `ConfigurationControlManager.uncleanLeaderElectionEnabledForTopic`):
/// the topic's config, else the cluster-wide dynamic broker config
/// (resource name ""), else `default`, the controller's static
/// `unclean.leader.election.enable`. A value is true when it reads `true`
/// in any case (Java's `Boolean.parseBoolean`).
pub fn unclean_enabled(image: &MetadataImage, t: &TopicImage, default: bool) -> bool {
    t.configs
        .get(UNCLEAN_LEADER_ELECTION_ENABLE)
        .or_else(|| image.broker_configs().get(UNCLEAN_LEADER_ELECTION_ENABLE))
        .map_or(default, |v| v.trim().eq_ignore_ascii_case("true"))
}

/// A leader for partition `p` whose ISR is to be `isr` (Kafka's
/// `electAnyLeader` without eligible leader replicas): the first replica
/// in `isr` that `usable` accepts, the ISR unchanged; else, if `unclean`,
/// the first replica `usable` accepts, the ISR just it. `None`: no leader.
fn elect_any(
    p: &PartitionImage,
    isr: &[i32],
    usable: impl Fn(i32) -> bool,
    unclean: bool,
) -> Option<(i32, Vec<i32>)> {
    if let Some(&l) = p.replicas.iter().find(|&&r| isr.contains(&r) && usable(r)) {
        return Some((l, isr.to_vec()));
    }
    if !unclean {
        return None;
    }
    let l = p.replicas.iter().copied().find(|&r| usable(r))?;
    Some((l, vec![l]))
}

/// The partition changes for `broker` becoming fenced (`fenced`) or
/// unfenced, computed on `image` with the session change applied. Each
/// change bumps the partition epoch. `unclean_default` is the controller's
/// static `unclean.leader.election.enable` (see [`unclean_enabled`]).
pub fn on_broker_session(
    image: &MetadataImage,
    broker: i32,
    fenced: bool,
    unclean_default: bool,
) -> Vec<MetadataRecord> {
    // Who may lead: registered, not fenced, not in controlled shutdown;
    // never the broker being fenced.
    let usable = |id: i32| {
        (id != broker || !fenced)
            && image
                .broker(id)
                .is_some_and(|b| !b.fenced && !b.in_controlled_shutdown)
    };
    let mut out = Vec::new();
    if !fenced
        && image
            .broker(broker)
            .is_some_and(|b| b.in_controlled_shutdown)
    {
        return out;
    }
    for t in image.topics() {
        let unclean = unclean_enabled(image, t, unclean_default);
        for (&partition_id, p) in &t.partitions {
            let (isr, leader, leader_epoch) = if fenced {
                if !p.isr.contains(&broker) && p.leader != broker {
                    continue;
                }
                let mut isr = p.isr.clone();
                if isr.len() > 1 {
                    isr.retain(|&r| r != broker);
                }
                if p.leader == broker || p.leader < 0 {
                    match elect_any(p, &isr, usable, unclean) {
                        Some((l, isr)) => (isr, l, p.leader_epoch + 1),
                        None if p.leader == broker => (isr, -1, p.leader_epoch + 1),
                        None => (isr, -1, p.leader_epoch),
                    }
                } else {
                    (isr, p.leader, p.leader_epoch)
                }
            } else if p.leader < 0 && p.replicas.contains(&broker) {
                match elect_any(p, &p.isr, usable, unclean) {
                    Some((l, isr)) => (isr, l, p.leader_epoch + 1),
                    None => continue,
                }
            } else {
                continue;
            };
            if isr == p.isr && leader == p.leader {
                continue;
            }
            if leader >= 0 && !p.isr.contains(&leader) {
                // Kafka logs these at INFO too: data only the old ISR
                // had is lost.
                tracing::info!(
                    topic = %t.name,
                    partition = partition_id,
                    leader,
                    "unclean leader election: a replica out of the ISR {:?} leads",
                    p.isr
                );
            }
            out.push(MetadataRecord::Partition {
                partition_id,
                topic_id: t.id,
                replicas: p.replicas.clone(),
                isr,
                leader,
                leader_epoch,
                partition_epoch: p.partition_epoch + 1,
                removing_replicas: p.removing_replicas.clone(),
                adding_replicas: p.adding_replicas.clone(),
            });
        }
    }
    out
}

/// Which election ElectLeaders asks for (Kafka's `ElectionType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionType {
    /// 0: the first replica, if it may lead.
    Preferred,
    /// 1: any leader for a partition without one, out of the ISR if need be.
    Unclean,
}

impl ElectionType {
    /// The wire value's type; `None` for an unknown one.
    pub fn from_wire(v: i8) -> Option<Self> {
        match v {
            0 => Some(Self::Preferred),
            1 => Some(Self::Unclean),
            _ => None,
        }
    }
}

/// Why an election changes nothing (Kafka's errors for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoElection {
    /// ELECTION_NOT_NEEDED: the preferred replica leads already, or (unclean)
    /// the partition has a leader.
    NotNeeded,
    /// PREFERRED_LEADER_NOT_AVAILABLE: the first replica is out of the ISR
    /// or fenced.
    PreferredNotAvailable,
    /// ELIGIBLE_LEADERS_NOT_AVAILABLE: no live replica at all.
    EligibleNotAvailable,
}

/// The change `kind` of election makes to partition `partition_id` of
/// topic `topic` (by name), or why it makes none.
pub fn elect(
    image: &MetadataImage,
    topic: &str,
    partition_id: i32,
    kind: ElectionType,
) -> Option<Result<MetadataRecord, NoElection>> {
    let t = image.topic(topic)?;
    let p = t.partitions.get(&partition_id)?;
    let live = |id: i32| {
        image
            .broker(id)
            .is_some_and(|b| !b.fenced && !b.in_controlled_shutdown)
    };
    let change = |leader: i32, isr: Vec<i32>| MetadataRecord::Partition {
        partition_id,
        topic_id: t.id,
        replicas: p.replicas.clone(),
        isr,
        leader,
        leader_epoch: p.leader_epoch + 1,
        partition_epoch: p.partition_epoch + 1,
        removing_replicas: p.removing_replicas.clone(),
        adding_replicas: p.adding_replicas.clone(),
    };
    let preferred = p.replicas.first().copied().unwrap_or(-1);
    Some(match kind {
        ElectionType::Preferred if p.leader == preferred => Err(NoElection::NotNeeded),
        ElectionType::Preferred if p.isr.contains(&preferred) && live(preferred) => {
            Ok(change(preferred, p.isr.clone()))
        }
        ElectionType::Preferred => Err(NoElection::PreferredNotAvailable),
        ElectionType::Unclean if p.leader >= 0 => Err(NoElection::NotNeeded),
        ElectionType::Unclean => match elect_any(p, &p.isr, live, true) {
            Some((l, isr)) => Ok(change(l, isr)),
            None => Err(NoElection::EligibleNotAvailable),
        },
    })
}

/// Preferred-leader elections for every partition led by another replica
/// than its first while the first may lead (`auto.leader.rebalance.enable`,
/// Kafka's `maybeBalancePartitionLeaders`), at most `max` of them.
pub fn rebalance(image: &MetadataImage, max: usize) -> Vec<MetadataRecord> {
    let mut out = Vec::new();
    for t in image.topics() {
        for &p in t.partitions.keys() {
            if out.len() >= max {
                return out;
            }
            if let Some(Ok(r)) = elect(image, &t.name, p, ElectionType::Preferred) {
                out.push(r);
            }
        }
    }
    out
}

/// The change that puts registered `broker` into controlled shutdown:
/// the mark (unless already there), then its ISR and leadership moves
/// (those of [`on_broker_session`] for a fenced broker). Empty once there
/// is nothing left to do; `None` if `broker` is not registered.
/// `unclean_default` as for [`on_broker_session`].
pub fn on_controlled_shutdown(
    image: &MetadataImage,
    broker: i32,
    unclean_default: bool,
) -> Option<Vec<MetadataRecord>> {
    let b = image.broker(broker)?;
    let mut records = Vec::new();
    let mut next;
    let image = if b.in_controlled_shutdown {
        image
    } else {
        let mark = MetadataRecord::BrokerRegistrationChange {
            broker_id: broker,
            broker_epoch: b.epoch,
            fenced: 0,
            in_controlled_shutdown: 1,
        };
        next = image.clone();
        next.apply(&mark);
        records.push(mark);
        &next
    };
    records.extend(on_broker_session(image, broker, true, unclean_default));
    Some(records)
}

/// The changes for the partitions whose replica on `broker` is offline
/// (`offline(topic, partition)`: its log is in a failed data folder) and
/// which `broker` leads or is in the ISR of: `broker` leaves the ISR; a
/// partition it led gets the first replica of the ISR left that may lead
/// (registered, unfenced, not in controlled shutdown), with the next
/// leader and partition epochs (Kafka's `handleDirectoriesOffline`:
/// `PartitionChangeBuilder` with the broker excluded from the target ISR
/// and from the leaders it accepts); with none, the partition has no
/// leader (-1) until an ISR member comes back. A partition it follows
/// keeps its leader, so `broker` can no longer be elected there. A
/// partition whose ISR is `broker` alone is left as it is: no other
/// replica has all its records, so it stays offline here. Empty once there
/// is nothing left to do.
pub fn on_replicas_offline(
    image: &MetadataImage,
    broker: i32,
    offline: impl Fn(&str, i32) -> bool,
) -> Vec<MetadataRecord> {
    let mut out = Vec::new();
    for t in image.topics() {
        for (&partition_id, p) in &t.partitions {
            let involved = p.leader == broker || p.isr.contains(&broker);
            if !involved || p.isr.iter().all(|&r| r == broker) {
                continue;
            }
            if !offline(&t.name, partition_id) {
                continue;
            }
            let mut target = Target::of(p);
            target.isr.retain(|&r| r != broker);
            let next = reassignment::build(p, target, |id| {
                id != broker && reassignment::may_lead(image, id)
            });
            if let Some(next) = next {
                out.push(reassignment::record(t.id, partition_id, &next));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;
    use crate::records::{RESOURCE_BROKER, RESOURCE_TOPIC};

    fn image(parts: &[(&[i32], &[i32], i32)]) -> MetadataImage {
        let mut img = MetadataImage::default();
        let topic_id = Uuid::from_u128(7);
        img.apply(&MetadataRecord::Topic {
            name: "t".into(),
            topic_id,
        });
        for id in 1..=3 {
            img.apply(&MetadataRecord::RegisterBroker {
                broker_id: id,
                incarnation_id: Uuid::from_u128(id as u128),
                broker_epoch: 1,
                endpoints: Vec::new(),
                rack: None,
                fenced: false,
            });
        }
        for (i, (replicas, isr, leader)) in parts.iter().enumerate() {
            img.apply(&MetadataRecord::Partition {
                partition_id: i as i32,
                topic_id,
                replicas: replicas.to_vec(),
                isr: isr.to_vec(),
                leader: *leader,
                leader_epoch: 3,
                partition_epoch: 5,
                removing_replicas: vec![],
                adding_replicas: vec![],
            });
        }
        img
    }

    fn fence(img: &mut MetadataImage, id: i32, fenced: bool) {
        img.apply(&MetadataRecord::BrokerRegistrationChange {
            broker_id: id,
            broker_epoch: 1,
            fenced: if fenced { 1 } else { -1 },
            in_controlled_shutdown: 0,
        });
    }

    fn state(r: &MetadataRecord) -> (Vec<i32>, i32, i32, i32) {
        match r {
            MetadataRecord::Partition {
                isr,
                leader,
                leader_epoch,
                partition_epoch,
                ..
            } => (isr.clone(), *leader, *leader_epoch, *partition_epoch),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_fenced_leader_is_replaced_from_the_isr_and_leaves_isrs() {
        let mut img = image(&[
            (&[1, 2, 3], &[1, 2, 3], 1),
            (&[2, 1, 3], &[2, 3, 1], 2),
            (&[2, 3], &[2, 3], 2),
            (&[1, 3], &[1], 1),
        ]);
        fence(&mut img, 1, true);
        let changes: Vec<_> = on_broker_session(&img, 1, true, false)
            .iter()
            .map(state)
            .collect();
        assert_eq!(
            changes,
            vec![
                // Led by 1: the next ISR member in replica order leads.
                (vec![2, 3], 2, 4, 6),
                // Followed by 1: it leaves the ISR, the leader stays.
                (vec![2, 3], 2, 3, 6),
                // 1 was the last ISR member: no leader, the ISR stays.
                (vec![1], -1, 4, 6),
            ]
        );
    }

    #[test]
    fn a_fenced_isr_member_is_not_elected_and_an_unfenced_one_leads_again() {
        let mut img = image(&[(&[1, 2, 3], &[1, 2], 1)]);
        fence(&mut img, 2, true);
        fence(&mut img, 1, true);
        let changes: Vec<_> = on_broker_session(&img, 1, true, false)
            .iter()
            .map(state)
            .collect();
        assert_eq!(changes, vec![(vec![2], -1, 4, 6)]);
        for r in on_broker_session(&img, 1, true, false) {
            img.apply(&r);
        }
        fence(&mut img, 2, false);
        let changes: Vec<_> = on_broker_session(&img, 2, false, false)
            .iter()
            .map(state)
            .collect();
        assert_eq!(changes, vec![(vec![2], 2, 5, 7)]);
    }

    #[test]
    fn preferred_and_unclean_elections() {
        // Led by 2 with 1 (preferred) in the ISR; led by 2 with 1 out of
        // it; led by 1 already; leaderless with an empty-of-live ISR.
        let mut img = image(&[
            (&[1, 2, 3], &[1, 2, 3], 2),
            (&[1, 2, 3], &[2, 3], 2),
            (&[1, 2, 3], &[1, 2], 1),
            (&[3, 2, 1], &[3], -1),
        ]);
        let kind = ElectionType::Preferred;
        let r = elect(&img, "t", 0, kind)
            .expect("partition")
            .expect("elected");
        assert_eq!(state(&r), (vec![1, 2, 3], 1, 4, 6));
        assert_eq!(
            elect(&img, "t", 1, kind),
            Some(Err(NoElection::PreferredNotAvailable))
        );
        assert_eq!(elect(&img, "t", 2, kind), Some(Err(NoElection::NotNeeded)));
        assert_eq!(elect(&img, "t", 9, kind), None);
        // Partitions 0 and 3 (leaderless, its first replica in the ISR).
        assert_eq!(rebalance(&img, 10).len(), 2);
        assert_eq!(rebalance(&img, 1).len(), 1);
        // Unclean: a leader from outside the ISR when the ISR is down.
        let kind = ElectionType::Unclean;
        assert_eq!(elect(&img, "t", 0, kind), Some(Err(NoElection::NotNeeded)));
        fence(&mut img, 3, true);
        let r = elect(&img, "t", 3, kind)
            .expect("partition")
            .expect("elected");
        assert_eq!(state(&r), (vec![2], 2, 4, 6));
        for id in 1..=2 {
            fence(&mut img, id, true);
        }
        assert_eq!(
            elect(&img, "t", 3, kind),
            Some(Err(NoElection::EligibleNotAvailable))
        );
        // A fenced preferred replica is not available.
        assert_eq!(
            elect(&img, "t", 0, ElectionType::Preferred),
            Some(Err(NoElection::PreferredNotAvailable))
        );
    }

    #[test]
    fn controlled_shutdown_marks_the_broker_and_moves_what_it_leads() {
        let mut img = image(&[
            (&[1, 2, 3], &[1, 2, 3], 1),
            (&[2, 1, 3], &[2, 1, 3], 2),
            (&[1], &[1], 1),
            (&[2, 3], &[2, 3], 2),
        ]);
        let records = on_controlled_shutdown(&img, 1, false).expect("registered");
        assert_eq!(
            records[0],
            MetadataRecord::BrokerRegistrationChange {
                broker_id: 1,
                broker_epoch: 1,
                fenced: 0,
                in_controlled_shutdown: 1,
            }
        );
        let changes: Vec<_> = records[1..].iter().map(state).collect();
        assert_eq!(
            changes,
            vec![
                // Led by 1: the next ISR member leads, 1 leaves the ISR.
                (vec![2, 3], 2, 4, 6),
                // Followed by 1: it leaves the ISR.
                (vec![2, 3], 2, 3, 6),
                // 1 is its only replica: no leader while 1 is away.
                (vec![1], -1, 4, 6),
            ]
        );
        for r in &records {
            img.apply(r);
        }
        assert!(img.broker(1).expect("1").in_controlled_shutdown);
        // Done: nothing more to change; and 1 is not elected again.
        assert_eq!(on_controlled_shutdown(&img, 1, false), Some(Vec::new()));
        fence(&mut img, 2, true);
        let changes: Vec<_> = on_broker_session(&img, 2, true, false)
            .iter()
            .map(state)
            .collect();
        assert_eq!(
            changes,
            vec![(vec![3], 3, 5, 7), (vec![3], 3, 4, 7), (vec![3], 3, 4, 6)]
        );
        // Still in controlled shutdown: not elected for its own partition;
        // registered again (a restart), it leads it.
        assert!(on_broker_session(&img, 1, false, false).is_empty());
        img.apply(&MetadataRecord::RegisterBroker {
            broker_id: 1,
            incarnation_id: Uuid::from_u128(11),
            broker_epoch: 2,
            endpoints: Vec::new(),
            rack: None,
            fenced: false,
        });
        let changes: Vec<_> = on_broker_session(&img, 1, false, false)
            .iter()
            .map(state)
            .collect();
        assert_eq!(changes, vec![(vec![1], 1, 5, 7)]);
        assert_eq!(on_controlled_shutdown(&img, 9, false), None);
    }

    fn set_config(img: &mut MetadataImage, resource_type: i8, resource: &str, value: Option<&str>) {
        img.apply(&MetadataRecord::Config {
            resource_type,
            resource_name: resource.into(),
            name: UNCLEAN_LEADER_ELECTION_ENABLE.into(),
            value: value.map(str::to_string),
        });
    }

    /// Fences 1 (the only ISR member of the partitions it leads): the
    /// changes that makes with static default `default`.
    fn lose_the_isr(img: &mut MetadataImage, default: bool) -> Vec<(Vec<i32>, i32, i32, i32)> {
        fence(img, 1, true);
        on_broker_session(img, 1, true, default)
            .iter()
            .map(state)
            .collect()
    }

    #[test]
    fn with_unclean_election_off_a_partition_without_a_live_isr_member_stays_leaderless() {
        let mut img = image(&[(&[1, 2, 3], &[1], 1)]);
        assert_eq!(lose_the_isr(&mut img, false), vec![(vec![1], -1, 4, 6)]);
        for r in on_broker_session(&img, 1, true, false) {
            img.apply(&r);
        }
        // 2 and 3 are live but out of sync: unfencing one elects nobody.
        fence(&mut img, 3, true);
        fence(&mut img, 3, false);
        assert!(on_broker_session(&img, 3, false, false).is_empty());
    }

    #[test]
    fn the_topic_config_elects_the_first_live_replica_out_of_the_isr() {
        let mut img = image(&[(&[1, 3, 2], &[1], 1), (&[1, 2, 3], &[1, 2], 1)]);
        set_config(&mut img, RESOURCE_TOPIC, "t", Some("true"));
        // 3 comes first in replica order; its ISR is just it; next epochs.
        // The partition with 2 in its ISR has a clean election.
        assert_eq!(
            lose_the_isr(&mut img, false),
            vec![(vec![3], 3, 4, 6), (vec![2], 2, 4, 6)]
        );
        // Controlled shutdown of the only ISR member hands over the same way.
        let mut img = image(&[(&[1, 2, 3], &[1], 1)]);
        set_config(&mut img, RESOURCE_TOPIC, "t", Some("TRUE"));
        let records = on_controlled_shutdown(&img, 1, false).expect("registered");
        assert_eq!(state(&records[1]), (vec![2], 2, 4, 6));
    }

    #[test]
    fn the_broker_default_applies_to_topics_without_the_config() {
        let mut img = image(&[(&[1, 2, 3], &[1], 1)]);
        assert_eq!(lose_the_isr(&mut img, true), vec![(vec![2], 2, 4, 6)]);
        // The cluster-wide dynamic broker config overrides the static one,
        // both ways.
        let mut img = image(&[(&[1, 2, 3], &[1], 1)]);
        set_config(&mut img, RESOURCE_BROKER, "", Some("true"));
        assert_eq!(lose_the_isr(&mut img, false), vec![(vec![2], 2, 4, 6)]);
        let mut img = image(&[(&[1, 2, 3], &[1], 1)]);
        set_config(&mut img, RESOURCE_BROKER, "", Some("false"));
        assert_eq!(lose_the_isr(&mut img, true), vec![(vec![1], -1, 4, 6)]);
    }

    #[test]
    fn a_topic_config_false_overrides_a_true_default() {
        let mut img = image(&[(&[1, 2, 3], &[1], 1)]);
        set_config(&mut img, RESOURCE_TOPIC, "t", Some("false"));
        set_config(&mut img, RESOURCE_BROKER, "", Some("true"));
        assert_eq!(lose_the_isr(&mut img, true), vec![(vec![1], -1, 4, 6)]);
        // Removing the topic config lets the default apply again.
        set_config(&mut img, RESOURCE_TOPIC, "t", None);
        let t = img.topic("t").expect("t");
        assert!(unclean_enabled(&img, t, false));
    }

    #[test]
    fn an_unfenced_replica_of_a_leaderless_unclean_topic_leads() {
        // Leaderless: its only ISR member 1 is fenced, and so are 2 and 3
        // (nobody could lead when 1 went).
        let mut img = image(&[(&[1, 2, 3], &[1], -1), (&[1, 2], &[1], -1)]);
        for id in 1..=3 {
            fence(&mut img, id, true);
        }
        set_config(&mut img, RESOURCE_TOPIC, "t", Some("true"));
        fence(&mut img, 3, false);
        let changes: Vec<_> = on_broker_session(&img, 3, false, false)
            .iter()
            .map(state)
            .collect();
        // Only the partition 3 is a replica of.
        assert_eq!(changes, vec![(vec![3], 3, 4, 6)]);
        // With 2 back as well, the first live replica in replica order.
        fence(&mut img, 2, false);
        let changes: Vec<_> = on_broker_session(&img, 2, false, false)
            .iter()
            .map(state)
            .collect();
        assert_eq!(changes, vec![(vec![2], 2, 4, 6), (vec![2], 2, 4, 6)]);
    }

    #[test]
    fn offline_replicas_hand_their_leaderships_over_and_leave_the_isr() {
        let mut img = image(&[
            // Led by 1, offline: 2 leads (first of the ISR left).
            (&[1, 2, 3], &[1, 2], 1),
            // Led by 1, offline, ISR 1 alone: stays.
            (&[1, 2], &[1], 1),
            // Led by 1, in a folder that works: untouched.
            (&[1, 2, 3], &[1, 2, 3], 1),
            // Followed by 1, offline: it leaves the ISR, the leader stays.
            (&[2, 1, 3], &[2, 1, 3], 2),
            // Led by 1, offline, the other ISR member is fenced: no leader.
            (&[1, 3], &[1, 3], 1),
        ]);
        fence(&mut img, 3, true);
        let offline = |topic: &str, p: i32| topic == "t" && p != 2;
        let records = on_replicas_offline(&img, 1, offline);
        let changes: Vec<_> = records.iter().map(state).collect();
        assert_eq!(
            changes,
            vec![
                (vec![2], 2, 4, 6),
                (vec![2, 3], 2, 3, 6),
                (vec![3], -1, 4, 6)
            ]
        );
        for r in &records {
            img.apply(r);
        }
        // Done: nothing more; and neither a session change nor a preferred
        // election brings 1 back, it is out of those ISRs.
        assert!(on_replicas_offline(&img, 1, offline).is_empty());
        fence(&mut img, 3, false);
        let records = on_broker_session(&img, 3, false, false);
        let changes: Vec<_> = records.iter().map(state).collect();
        assert_eq!(changes, vec![(vec![3], 3, 5, 7)]);
        for r in &records {
            img.apply(r);
        }
        assert!(on_broker_session(&img, 1, false, false).is_empty());
        assert_eq!(
            elect(&img, "t", 0, ElectionType::Preferred),
            Some(Err(NoElection::PreferredNotAvailable))
        );
    }
}
