//! Partition reassignments (Kafka's `ReplicationControlManager`
//! `alterPartitionReassignments`, `PartitionReassignmentReplicas`,
//! `PartitionReassignmentRevert` and the reassignment steps of
//! `PartitionChangeBuilder`), as pure functions of the metadata image.
//!
//! A reassignment to `target` makes the partition's replicas `target`
//! followed by the current replicas it drops (`removing_replicas`), and
//! records the replicas it brings (`adding_replicas`); both lists live in
//! the PartitionRecord, so the quorum log and its snapshots carry an
//! ongoing reassignment. The new replicas fetch from the leader and join
//! the ISR as any follower; the change that brings the ISR to hold every
//! target replica (an ISR change, or the reassignment itself when it only
//! reorders) also completes it: replicas become `target`, the removed ones
//! leave the ISR, both lists are emptied, and a removed leader is replaced
//! by the first target replica in the ISR that may lead (next leader
//! epoch; the leader epoch also moves whenever a replica leaves the
//! replica set). Cancelling (null target) reverts: the adding replicas
//! leave the replica set and the ISR.

use crate::image::{MetadataImage, PartitionImage};
use crate::records::MetadataRecord;

/// Why a reassignment of one partition was refused (Kafka's error for
/// it, with Kafka's message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReassignError {
    /// UNKNOWN_TOPIC_OR_PARTITION.
    UnknownTopicOrPartition(String),
    /// INVALID_REPLICA_ASSIGNMENT.
    InvalidReplicaAssignment(String),
    /// NO_REASSIGNMENT_IN_PROGRESS (a cancellation of nothing).
    NoReassignmentInProgress,
}

/// The change a partition's state is asked to make: Kafka's
/// `PartitionChangeBuilder` targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub removing: Vec<i32>,
    pub adding: Vec<i32>,
}

impl Target {
    /// No change yet: the partition's current state.
    pub fn of(p: &PartitionImage) -> Self {
        Self {
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
            removing: p.removing_replicas.clone(),
            adding: p.adding_replicas.clone(),
        }
    }
}

/// Whether a broker may lead: registered, unfenced, not in controlled
/// shutdown (Kafka's `LeaderAcceptor`).
pub fn may_lead(image: &MetadataImage, id: i32) -> bool {
    image
        .broker(id)
        .is_some_and(|b| !b.fenced && !b.in_controlled_shutdown)
}

/// The partition state `target` leads to from `current` (Kafka's
/// `PartitionChangeBuilder.build` with an ONLINE election): the
/// reassignment completed if the target ISR allows it, the current leader
/// kept if it is still in the ISR and may lead, else the first target
/// replica that is; the next partition epoch, and the next leader epoch
/// when the leader changes or a replica leaves the replica set. `None`
/// when nothing changes.
pub fn build(
    current: &PartitionImage,
    target: Target,
    may_lead: impl Fn(i32) -> bool,
) -> Option<PartitionImage> {
    let mut t = target;
    // Complete the reassignment when the ISR holds every target replica
    // (`PartitionReassignmentReplicas.maybeCompleteReassignment`).
    if !t.removing.is_empty() || !t.adding.is_empty() {
        let isr: Vec<i32> = t
            .isr
            .iter()
            .copied()
            .filter(|r| !t.removing.contains(r))
            .collect();
        let replicas: Vec<i32> = t
            .replicas
            .iter()
            .copied()
            .filter(|r| !t.removing.contains(r))
            .collect();
        if !isr.is_empty() && !replicas.is_empty() && replicas.iter().all(|r| isr.contains(r)) {
            t.isr = isr;
            t.replicas = replicas;
            t.removing.clear();
            t.adding.clear();
        }
    }
    let valid = |r: i32| t.isr.contains(&r) && may_lead(r);
    let leader = if current.leader >= 0 && valid(current.leader) {
        current.leader
    } else {
        t.replicas.iter().copied().find(|&r| valid(r)).unwrap_or(-1)
    };
    let leader_changed = leader != current.leader;
    // A replica leaving the replica set bumps the leader epoch
    // (`triggerLeaderEpochBumpForReplicaReassignmentIfNeeded`).
    let bump = leader_changed || !current.replicas.iter().all(|r| t.replicas.contains(r));
    // An ISR is never emptied (ELR is not implemented).
    let isr = if t.isr.is_empty() {
        current.isr.clone()
    } else {
        t.isr
    };
    let next = PartitionImage {
        replicas: t.replicas,
        isr,
        leader,
        leader_epoch: current.leader_epoch + i32::from(bump),
        partition_epoch: current.partition_epoch,
        removing_replicas: t.removing,
        adding_replicas: t.adding,
    };
    if next == *current {
        return None;
    }
    Some(PartitionImage {
        partition_epoch: current.partition_epoch + 1,
        ..next
    })
}

/// The PartitionRecord of `state` for partition `partition_id` of topic
/// `topic_id`.
pub fn record(topic_id: uuid::Uuid, partition_id: i32, state: &PartitionImage) -> MetadataRecord {
    MetadataRecord::Partition {
        partition_id,
        topic_id,
        replicas: state.replicas.clone(),
        isr: state.isr.clone(),
        leader: state.leader,
        leader_epoch: state.leader_epoch,
        partition_epoch: state.partition_epoch,
        removing_replicas: state.removing_replicas.clone(),
        adding_replicas: state.adding_replicas.clone(),
    }
}

/// Sorted `a` minus `b` (Kafka's `calculateDifference`, a TreeSet).
fn difference(a: &[i32], b: &[i32]) -> Vec<i32> {
    let mut out: Vec<i32> = a.iter().copied().filter(|r| !b.contains(r)).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Checks a manual assignment (Kafka's `validateManualPartitionAssignment`):
/// not empty, every broker registered, none twice.
pub fn validate_assignment(
    target: &[i32],
    registered: impl Fn(i32) -> bool,
) -> Result<(), ReassignError> {
    if target.is_empty() {
        return Err(ReassignError::InvalidReplicaAssignment(
            "The manual partition assignment includes an empty replica list.".into(),
        ));
    }
    let mut sorted = target.to_vec();
    sorted.sort_unstable();
    let mut prev = None;
    for id in sorted {
        if !registered(id) {
            return Err(ReassignError::InvalidReplicaAssignment(format!(
                "The manual partition assignment includes broker {id}, but no such broker is registered."
            )));
        }
        if prev == Some(id) {
            return Err(ReassignError::InvalidReplicaAssignment(format!(
                "The manual partition assignment includes the broker {id} more than once."
            )));
        }
        prev = Some(id);
    }
    Ok(())
}

/// The change reassigning partition `partition_id` of `topic` to `target`
/// (`None`: cancel the ongoing reassignment). `Ok(None)` when nothing
/// changes. `registered` says which broker ids exist;
/// `may_lead` which may lead (see [`may_lead`]);
/// `unclean_allowed` is the topic's `unclean.leader.election.enable`
/// (a cancellation that leaves no ISR member needs it).
pub fn alter(
    image: &MetadataImage,
    topic: &str,
    partition_id: i32,
    target: Option<&[i32]>,
    registered: impl Fn(i32) -> bool,
    may_lead: impl Fn(i32) -> bool,
    unclean_allowed: bool,
) -> Result<Option<MetadataRecord>, ReassignError> {
    let t = image.topic(topic).ok_or_else(|| {
        ReassignError::UnknownTopicOrPartition(format!("Unable to find a topic named {topic}."))
    })?;
    let p = t.partitions.get(&partition_id).ok_or_else(|| {
        ReassignError::UnknownTopicOrPartition(format!(
            "Unable to find partition {topic}:{partition_id}."
        ))
    })?;
    let lead = may_lead;
    let next = match target {
        None => {
            if !p.is_reassigning() {
                return Err(ReassignError::NoReassignmentInProgress);
            }
            // PartitionReassignmentRevert: the original replicas, the ISR
            // without the replicas being added.
            let replicas = difference_keep_order(&p.replicas, &p.adding_replicas);
            let mut isr = difference_keep_order(&p.isr, &p.adding_replicas);
            if isr.is_empty() {
                let Some(&first) = replicas.first() else {
                    return Err(ReassignError::InvalidReplicaAssignment(
                        "Invalid replica assignment: addingReplicas contains all replicas.".into(),
                    ));
                };
                if !unclean_allowed {
                    return Err(ReassignError::InvalidReplicaAssignment(format!(
                        "Unable to revert partition assignment for {topic}:{partition_id} because it would require an unclean leader election."
                    )));
                }
                isr.push(first);
            }
            build(
                p,
                Target {
                    replicas,
                    isr,
                    removing: Vec::new(),
                    adding: Vec::new(),
                },
                lead,
            )
        }
        Some(target) => {
            validate_assignment(target, registered)?;
            let removing = difference(&p.replicas, target);
            let adding = difference(target, &p.replicas);
            let mut replicas = target.to_vec();
            replicas.extend(removing.iter().copied());
            let mut change = Target::of(p);
            change.replicas = replicas;
            // As Kafka's builder: empty lists leave the current ones.
            if !removing.is_empty() {
                change.removing = removing;
            }
            if !adding.is_empty() {
                change.adding = adding;
            }
            build(p, change, lead)
        }
    };
    Ok(next.map(|n| record(t.id, partition_id, &n)))
}

/// `a` without the members of `b`, in `a`'s order.
fn difference_keep_order(a: &[i32], b: &[i32]) -> Vec<i32> {
    a.iter().copied().filter(|r| !b.contains(r)).collect()
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;
    use crate::records::BrokerEndpoint;

    fn image(replicas: &[i32], isr: &[i32], leader: i32) -> MetadataImage {
        let mut img = MetadataImage::default();
        for id in 1..=4 {
            img.apply(&MetadataRecord::RegisterBroker {
                broker_id: id,
                incarnation_id: Uuid::from_u128(id as u128),
                broker_epoch: 1,
                endpoints: vec![BrokerEndpoint {
                    name: "PLAINTEXT".into(),
                    host: "h".into(),
                    port: 1,
                    security_protocol: 0,
                }],
                rack: None,
                fenced: false,
            });
        }
        let id = Uuid::from_u128(9);
        img.apply(&MetadataRecord::Topic {
            name: "t".into(),
            topic_id: id,
        });
        img.apply(&MetadataRecord::Partition {
            partition_id: 0,
            topic_id: id,
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            leader,
            leader_epoch: 3,
            partition_epoch: 5,
            removing_replicas: vec![],
            adding_replicas: vec![],
        });
        img
    }

    fn state(img: &MetadataImage) -> PartitionImage {
        img.topic("t").expect("t").partitions[&0].clone()
    }

    fn reassign(img: &mut MetadataImage, target: Option<&[i32]>) -> Result<bool, ReassignError> {
        let registered = |id| (1..=4).contains(&id);
        let r = alter(
            img,
            "t",
            0,
            target,
            registered,
            |id| may_lead(img, id),
            false,
        )?;
        let changed = r.is_some();
        if let Some(r) = r {
            img.apply(&r);
        }
        Ok(changed)
    }

    /// ISR change as the leader would propose it.
    fn isr(img: &mut MetadataImage, isr: &[i32]) {
        let cur = state(img);
        let mut t = Target::of(&cur);
        t.isr = isr.to_vec();
        let next = build(&cur, t, |id| may_lead(img, id)).expect("a change");
        let topic_id = img.topic("t").expect("t").id;
        img.apply(&record(topic_id, 0, &next));
    }

    #[test]
    fn moving_a_single_replica_completes_once_the_new_one_is_in_sync() {
        let mut img = image(&[1], &[1], 1);
        assert!(reassign(&mut img, Some(&[2])).expect("ok"));
        let s = state(&img);
        assert_eq!(s.replicas, vec![2, 1]);
        assert_eq!(
            (s.adding_replicas.clone(), s.removing_replicas.clone()),
            (vec![2], vec![1])
        );
        assert_eq!((s.leader, s.leader_epoch, s.partition_epoch), (1, 3, 6));
        isr(&mut img, &[1, 2]);
        let s = state(&img);
        assert_eq!(s.replicas, vec![2]);
        assert_eq!(s.isr, vec![2]);
        assert!(!s.is_reassigning());
        assert_eq!((s.leader, s.leader_epoch, s.partition_epoch), (2, 4, 7));
    }

    #[test]
    fn a_reorder_completes_at_once_and_keeps_the_leader() {
        let mut img = image(&[1, 2, 3], &[1, 2, 3], 1);
        assert!(reassign(&mut img, Some(&[3, 2, 1])).expect("ok"));
        let s = state(&img);
        assert_eq!(s.replicas, vec![3, 2, 1]);
        assert!(!s.is_reassigning());
        assert_eq!((s.leader, s.leader_epoch), (1, 3));
        // The same assignment again changes nothing.
        assert!(!reassign(&mut img, Some(&[3, 2, 1])).expect("ok"));
    }

    #[test]
    fn cancelling_reverts_and_needs_a_reassignment() {
        let mut img = image(&[1, 2], &[1, 2], 1);
        assert_eq!(
            reassign(&mut img, None),
            Err(ReassignError::NoReassignmentInProgress)
        );
        assert!(reassign(&mut img, Some(&[3, 4])).expect("ok"));
        let s = state(&img);
        assert_eq!(s.replicas, vec![3, 4, 1, 2]);
        isr(&mut img, &[1, 2, 3]);
        assert_eq!(
            state(&img).adding_replicas,
            vec![3, 4],
            "4 is not in sync yet"
        );
        assert!(reassign(&mut img, None).expect("ok"));
        let s = state(&img);
        assert_eq!(
            (s.replicas.clone(), s.isr.clone()),
            (vec![1, 2], vec![1, 2])
        );
        assert!(!s.is_reassigning());
        assert_eq!(s.leader, 1);
    }

    #[test]
    fn invalid_assignments_are_refused() {
        let mut img = image(&[1], &[1], 1);
        for bad in [&[][..], &[2, 2][..], &[1, 7][..]] {
            assert!(matches!(
                reassign(&mut img, Some(bad)),
                Err(ReassignError::InvalidReplicaAssignment(_))
            ));
        }
        let registered = |id| id == 1;
        assert!(matches!(
            alter(&img, "nope", 0, Some(&[1]), registered, registered, false),
            Err(ReassignError::UnknownTopicOrPartition(_))
        ));
        assert!(matches!(
            alter(&img, "t", 3, Some(&[1]), registered, registered, false),
            Err(ReassignError::UnknownTopicOrPartition(_))
        ));
    }

    #[test]
    fn a_removed_leader_hands_over_when_the_reassignment_completes() {
        let mut img = image(&[1, 2], &[1, 2], 1);
        assert!(reassign(&mut img, Some(&[2, 3])).expect("ok"));
        assert_eq!(state(&img).leader, 1);
        isr(&mut img, &[1, 2, 3]);
        let s = state(&img);
        assert_eq!(
            (s.replicas.clone(), s.isr.clone()),
            (vec![2, 3], vec![2, 3])
        );
        assert_eq!((s.leader, s.leader_epoch), (2, 4));
    }
}
