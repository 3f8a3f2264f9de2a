//! A deterministic simulation of one partition replicated on three
//! brokers: a seeded scheduler interleaves client appends (acks=all,
//! `min.insync.replicas=2`), follower fetches, clock ticks with ISR
//! proposals, the controller committing them, crashes, restarts, and
//! network isolation of a broker from the others and the controller. The
//! leader and follower rules are the real ones ([`super::leader`],
//! [`super::follower`], storage's leader-epoch cache); the logs are in
//! memory. After every step it checks Kafka's guarantees:
//! - an acknowledged record is never lost: every replica of the ISR holds
//!   it at its offset (so any leader elected from the ISR does);
//! - no offset ever holds two different acknowledged records;
//! - two logs that hold a record of the same epoch at the same offset are
//!   identical up to there (log matching, KIP-101);
//! - a leader's high watermark never moves back within its epoch.

use std::collections::{BTreeMap, BTreeSet};

use sluice_storage::epoch::LeaderEpochCache;

use super::follower::{epoch_to_ask, truncation};
use super::leader::LeaderState;

const MIN_ISR: usize = 2;
const LAG_MS: u64 = 1_000;

/// splitmix64: a small seeded generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug)]
enum Role {
    Leader(LeaderState),
    Follower {
        leader: i32,
        epoch: i32,
        truncated: bool,
    },
    None,
}

#[derive(Debug)]
struct Replica {
    id: i32,
    alive: bool,
    /// Cut off from the other brokers and the controller (clients still
    /// reach it).
    isolated: bool,
    /// (leader epoch, value) per offset.
    log: Vec<(i32, u64)>,
    epochs: LeaderEpochCache,
    hw: i64,
    role: Role,
}

impl Replica {
    fn leo(&self) -> i64 {
        self.log.len() as i64
    }
    fn truncate(&mut self, offset: i64) {
        self.log.truncate(offset as usize);
        self.epochs.truncate_from_end(offset);
        self.hw = self.hw.min(offset);
    }
    fn append(&mut self, epoch: i32, value: u64) {
        self.epochs.assign(epoch, self.leo());
        self.log.push((epoch, value));
    }
}

#[derive(Debug, Default)]
struct Controller {
    leader: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    isr: BTreeSet<i32>,
    fenced: BTreeSet<i32>,
}

struct Sim {
    rng: Rng,
    now: u64,
    replicas: Vec<Replica>,
    ctl: Controller,
    next_value: u64,
    /// (leader id, epoch, offset, value) appended, not yet acknowledged.
    pending: Vec<(i32, i32, i64, u64)>,
    /// offset -> (epoch, value) of every acknowledged record.
    acked: BTreeMap<i64, (i32, u64)>,
    /// (leader id, epoch) -> the high watermark last seen.
    hws: BTreeMap<(i32, i32), i64>,
    steps: u64,
}

const IDS: [i32; 3] = [1, 2, 3];

impl Sim {
    fn new(seed: u64) -> Self {
        let replicas = IDS
            .iter()
            .map(|&id| Replica {
                id,
                alive: true,
                isolated: false,
                log: Vec::new(),
                epochs: LeaderEpochCache::in_memory(),
                hw: 0,
                role: Role::None,
            })
            .collect();
        let mut sim = Self {
            rng: Rng(seed),
            now: 0,
            replicas,
            ctl: Controller {
                leader: 1,
                isr: IDS.iter().copied().collect(),
                ..Controller::default()
            },
            next_value: 1,
            pending: Vec::new(),
            acked: BTreeMap::new(),
            hws: BTreeMap::new(),
            steps: 0,
        };
        for id in IDS {
            sim.publish_to(id);
        }
        sim
    }

    fn r(&mut self, id: i32) -> &mut Replica {
        &mut self.replicas[(id - 1) as usize]
    }

    /// Metadata reaches broker `id` (if it is up and reachable): it takes
    /// the role the controller gives it, as KRaft brokers do from the
    /// metadata log.
    fn publish_to(&mut self, id: i32) {
        let (now, ctl_leader, epoch, pe) = (
            self.now,
            self.ctl.leader,
            self.ctl.leader_epoch,
            self.ctl.partition_epoch,
        );
        let isr: Vec<i32> = self.ctl.isr.iter().copied().collect();
        let r = self.r(id);
        if !r.alive || r.isolated {
            return;
        }
        let leo = r.leo();
        if ctl_leader == id {
            match &mut r.role {
                Role::Leader(l) if l.leader_epoch() == epoch => {
                    l.on_isr_committed(Some((isr.iter().copied().collect(), pe)), leo);
                }
                _ => {
                    r.epochs.assign(epoch, leo);
                    let l = LeaderState::new(id, &IDS, &isr, epoch, pe, leo, r.hw, LAG_MS, now);
                    r.role = Role::Leader(l);
                }
            }
        } else if ctl_leader < 0 {
            r.role = Role::None;
        } else {
            match &r.role {
                Role::Follower { epoch: e, .. } if *e == epoch => {}
                _ => {
                    r.role = Role::Follower {
                        leader: ctl_leader,
                        epoch,
                        truncated: false,
                    }
                }
            }
        }
    }

    fn publish_all(&mut self) {
        for id in IDS {
            self.publish_to(id);
        }
    }

    /// The controller fences `id` (missed heartbeats): out of the ISR
    /// unless it is the last member, and a new leader from the ISR when
    /// it led.
    fn fence(&mut self, id: i32) {
        self.ctl.fenced.insert(id);
        if self.ctl.isr.len() > 1 {
            self.ctl.isr.remove(&id);
        }
        if self.ctl.leader == id {
            self.elect();
        }
        self.ctl.partition_epoch += 1;
        self.publish_all();
    }

    fn elect(&mut self) {
        let fenced = &self.ctl.fenced;
        let next = self.ctl.isr.iter().copied().find(|r| !fenced.contains(r));
        self.ctl.leader = next.unwrap_or(-1);
        self.ctl.leader_epoch += 1;
    }

    fn unfence(&mut self, id: i32) {
        self.ctl.fenced.remove(&id);
        if self.ctl.leader < 0 && self.ctl.isr.contains(&id) {
            // The last in-sync replica is back: it leads (no unclean
            // election ever picks a replica outside the ISR).
            self.elect();
            self.ctl.partition_epoch += 1;
        }
        self.publish_all();
    }

    fn client_append(&mut self) {
        let alive: Vec<i32> = IDS.iter().copied().filter(|&i| self.r(i).alive).collect();
        if alive.is_empty() {
            return;
        }
        let id = alive[self.rng.below(alive.len() as u64) as usize];
        let value = self.next_value;
        let r = self.r(id);
        let Role::Leader(l) = &r.role else { return };
        if l.isr().len() < MIN_ISR {
            return; // NOT_ENOUGH_REPLICAS
        }
        let epoch = l.leader_epoch();
        let offset = r.leo();
        r.append(epoch, value);
        let leo = r.leo();
        if let Role::Leader(l) = &mut r.role {
            l.maybe_advance_high_watermark(leo);
        }
        self.pending.push((id, epoch, offset, value));
        self.next_value += 1;
    }

    fn follower_fetch(&mut self, id: i32) {
        let f = &self.replicas[(id - 1) as usize];
        let Role::Follower {
            leader,
            epoch,
            truncated,
        } = f.role
        else {
            return;
        };
        if !f.alive || f.isolated {
            return;
        }
        let lr = &self.replicas[(leader - 1) as usize];
        if !lr.alive || lr.isolated {
            return;
        }
        match &lr.role {
            Role::Leader(l) if l.leader_epoch() == epoch => {}
            _ => return, // NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH
        }
        if !truncated {
            // OffsetForLeaderEpoch rounds until the logs agree.
            loop {
                let f = &self.replicas[(id - 1) as usize];
                let lr = &self.replicas[(leader - 1) as usize];
                let Some(asked) = epoch_to_ask(&f.epochs) else {
                    break;
                };
                let (le, lend) = lr
                    .epochs
                    .end_offset_for(asked, lr.leo())
                    .unwrap_or((-1, -1));
                let t = truncation(&f.epochs, f.leo(), f.hw, le, lend);
                self.r(id).truncate(t.offset);
                if t.complete {
                    break;
                }
            }
            if let Role::Follower { truncated, .. } = &mut self.r(id).role {
                *truncated = true;
            }
        }
        let fetch_offset = self.r(id).leo();
        let max = 1 + self.rng.below(8) as i64;
        let now = self.now;
        let lr = self.r(leader);
        let leader_leo = lr.leo();
        let Role::Leader(l) = &mut lr.role else {
            return;
        };
        l.on_follower_fetch(id, fetch_offset, leader_leo, now);
        let hw = l.high_watermark();
        lr.hw = hw;
        let end = leader_leo.min(fetch_offset + max);
        let batch: Vec<(i32, u64)> = lr.log[fetch_offset as usize..end as usize].to_vec();
        let f = self.r(id);
        for (e, v) in batch {
            f.append(e, v);
        }
        f.hw = hw.min(f.leo());
    }

    fn tick(&mut self) {
        self.now += self.rng.below(400);
        let now = self.now;
        for id in IDS {
            let r = self.r(id);
            if !r.alive {
                continue;
            }
            let isolated = r.isolated;
            let leo = r.leo();
            let Role::Leader(l) = &mut r.role else {
                continue;
            };
            let Some(p) = l.propose_isr_change(now) else {
                continue;
            };
            if isolated {
                l.on_isr_committed(None, leo); // the request times out
                continue;
            }
            // The controller (KRaft's AlterPartition checks): current
            // leader and epochs, and no fenced broker joins the ISR.
            let ok = self.ctl.leader == id
                && p.leader_epoch == self.ctl.leader_epoch
                && p.partition_epoch == self.ctl.partition_epoch
                && p.isr
                    .iter()
                    .all(|r| !self.ctl.fenced.contains(r) || self.ctl.isr.contains(r));
            if ok {
                self.ctl.isr = p.isr;
                self.ctl.partition_epoch += 1;
                self.publish_to(id);
            } else if let Role::Leader(l) = &mut self.r(id).role {
                l.on_isr_committed(None, leo);
            }
        }
    }

    fn step(&mut self) {
        self.steps += 1;
        let id = IDS[self.rng.below(3) as usize];
        match self.rng.below(100) {
            0..=34 => self.client_append(),
            35..=74 => self.follower_fetch(id),
            75..=92 => self.tick(),
            93 => {
                if self.r(id).alive && !self.r(id).isolated {
                    self.r(id).alive = false;
                    self.fence(id);
                }
            }
            94..=96 => {
                if !self.r(id).alive {
                    let r = self.r(id);
                    r.alive = true;
                    r.role = Role::None;
                    self.unfence(id);
                }
            }
            97 => {
                if self.r(id).alive && !self.r(id).isolated {
                    self.r(id).isolated = true;
                    self.fence(id);
                }
            }
            _ => {
                if self.r(id).isolated {
                    self.r(id).isolated = false;
                    self.unfence(id);
                }
            }
        }
        self.settle_acks();
        self.check();
    }

    /// A pending append is acknowledged once its leader, still leading in
    /// the same epoch, has a high watermark past it.
    fn settle_acks(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        for (id, epoch, offset, value) in pending {
            let r = &self.replicas[(id - 1) as usize];
            let still_there = r.log.get(offset as usize) == Some(&(epoch, value));
            let leading = matches!(&r.role, Role::Leader(l) if l.leader_epoch() == epoch);
            if !still_there || !leading {
                continue; // the producer gets an error and retries
            }
            let Role::Leader(l) = &r.role else { continue };
            if r.alive && l.high_watermark() > offset {
                let before = self.acked.insert(offset, (epoch, value));
                assert!(
                    before.is_none_or(|b| b == (epoch, value)),
                    "offset {offset} acknowledged twice: {before:?} and {:?} (step {})",
                    (epoch, value),
                    self.steps
                );
            } else {
                self.pending.push((id, epoch, offset, value));
            }
        }
    }

    fn check(&mut self) {
        let steps = self.steps;
        for &id in &self.ctl.isr {
            let r = &self.replicas[(id - 1) as usize];
            for (&o, rec) in &self.acked {
                assert_eq!(
                    r.log.get(o as usize),
                    Some(rec),
                    "replica {id} of the ISR {:?} lost acknowledged offset {o} (step {steps})",
                    self.ctl.isr
                );
            }
        }
        for a in 0..3 {
            for b in a + 1..3 {
                let (la, lb) = (&self.replicas[a].log, &self.replicas[b].log);
                let common = la.len().min(lb.len());
                if let Some(o) = (0..common).rev().find(|&o| la[o].0 == lb[o].0) {
                    assert_eq!(
                        la[..=o],
                        lb[..=o],
                        "replicas {} and {} diverge before offset {o} (step {steps})",
                        a + 1,
                        b + 1
                    );
                }
            }
        }
        for r in &self.replicas {
            if let Role::Leader(l) = &r.role {
                let key = (r.id, l.leader_epoch());
                let last = self.hws.entry(key).or_insert(l.high_watermark());
                assert!(
                    l.high_watermark() >= *last,
                    "high watermark moved back (step {steps})"
                );
                *last = l.high_watermark();
            }
        }
    }

    /// Everyone back and connected; fetch and tick until quiet.
    fn heal_all(&mut self) {
        for id in IDS {
            let r = self.r(id);
            if !r.alive || r.isolated {
                r.alive = true;
                r.isolated = false;
                r.role = Role::None;
                self.unfence(id);
            }
        }
        for _ in 0..400 {
            for id in IDS {
                self.follower_fetch(id);
            }
            self.tick();
            self.settle_acks();
            self.check();
        }
    }
}

#[test]
fn replication_keeps_every_acknowledged_record_under_crashes_and_isolation() {
    let mut total_acked = 0;
    let mut elections = 0;
    for seed in 0..40 {
        let mut sim = Sim::new(seed);
        for _ in 0..1500 {
            sim.step();
        }
        sim.heal_all();
        elections += sim.ctl.leader_epoch;
        total_acked += sim.acked.len();
        // Healed: one leader, every replica in sync and identical up to
        // the high watermark, which covers every acknowledged record.
        let leader = sim.ctl.leader;
        assert!(leader > 0, "seed {seed}: no leader after healing");
        assert_eq!(sim.ctl.isr.len(), 3, "seed {seed}: ISR {:?}", sim.ctl.isr);
        let lr = &sim.replicas[(leader - 1) as usize];
        let hw = lr.hw as usize;
        for r in &sim.replicas {
            assert_eq!(r.log[..hw], lr.log[..hw], "seed {seed}: replica {}", r.id);
        }
        if let Some((&last, _)) = sim.acked.last_key_value() {
            assert!(hw as i64 > last, "seed {seed}");
        }
    }
    // The schedule is not vacuous: records were acknowledged and leaders
    // changed many times.
    eprintln!("{total_acked} records acknowledged, {elections} leader epochs");
    assert!(total_acked > 1_000, "{total_acked} records acknowledged");
    assert!(elections > 100, "{elections} leader elections");
}
