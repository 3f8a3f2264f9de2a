//! Partition leadership when a broker's session changes (Kafka's
//! `ReplicationControlManager.handleBrokerFenced` / `handleBrokerUnfenced`):
//! a fenced broker leaves every ISR it is in (unless it is the last
//! member), and each partition it led gets a new leader, the first replica
//! in the ISR that is registered and not fenced, with the next leader
//! epoch; with none, the partition has no leader (-1) until an ISR member
//! comes back (`unclean.leader.election.enable` is off). An unfenced broker
//! leads the leaderless partitions whose ISR holds it.

use crate::image::MetadataImage;
use crate::records::MetadataRecord;

/// The partition changes for `broker` becoming fenced (`fenced`) or
/// unfenced, computed on `image` with the session change applied. Each
/// change bumps the partition epoch.
pub fn on_broker_session(image: &MetadataImage, broker: i32, fenced: bool) -> Vec<MetadataRecord> {
    let usable = |id: i32| id != broker && image.broker(id).is_some_and(|b| !b.fenced);
    let mut out = Vec::new();
    for t in image.topics() {
        for (&partition_id, p) in &t.partitions {
            let (isr, leader, leader_epoch) = if fenced {
                if !p.isr.contains(&broker) && p.leader != broker {
                    continue;
                }
                let mut isr = p.isr.clone();
                if isr.len() > 1 {
                    isr.retain(|&r| r != broker);
                }
                if p.leader == broker {
                    let next = p
                        .replicas
                        .iter()
                        .copied()
                        .find(|&r| isr.contains(&r) && usable(r))
                        .unwrap_or(-1);
                    (isr, next, p.leader_epoch + 1)
                } else {
                    (isr, p.leader, p.leader_epoch)
                }
            } else if p.leader < 0 && p.isr.contains(&broker) {
                (p.isr.clone(), broker, p.leader_epoch + 1)
            } else {
                continue;
            };
            if isr == p.isr && leader == p.leader {
                continue;
            }
            out.push(MetadataRecord::Partition {
                partition_id,
                topic_id: t.id,
                replicas: p.replicas.clone(),
                isr,
                leader,
                leader_epoch,
                partition_epoch: p.partition_epoch + 1,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;

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
            });
        }
        img
    }

    fn fence(img: &mut MetadataImage, id: i32, fenced: bool) {
        img.apply(&MetadataRecord::BrokerRegistrationChange {
            broker_id: id,
            broker_epoch: 1,
            fenced: if fenced { 1 } else { -1 },
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
        let changes: Vec<_> = on_broker_session(&img, 1, true).iter().map(state).collect();
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
        let changes: Vec<_> = on_broker_session(&img, 1, true).iter().map(state).collect();
        assert_eq!(changes, vec![(vec![2], -1, 4, 6)]);
        for r in on_broker_session(&img, 1, true) {
            img.apply(&r);
        }
        fence(&mut img, 2, false);
        let changes: Vec<_> = on_broker_session(&img, 2, false)
            .iter()
            .map(state)
            .collect();
        assert_eq!(changes, vec![(vec![2], 2, 5, 7)]);
    }
}
