//! Random sequences of requests (from current and stale producers),
//! record confirmations and failures, marker outcomes, clock advances with
//! ticks, and reloads, checked against a model of what Kafka guarantees:
//!
//! - every confirmed record of an id follows a valid transition from the
//!   id's previous confirmed record (so at most one transaction is open
//!   per id), and producer id/epoch never go backwards in the log (until
//!   a tombstone);
//! - at most one record per id is in flight;
//! - markers are only emitted for a transaction whose PrepareCommit or
//!   PrepareAbort is in the log, with its result, producer epoch and
//!   partitions; when its CompleteCommit/CompleteAbort is confirmed every
//!   partition got its marker of the right kind: exactly once, or at least
//!   once if the shard was reloaded meanwhile (a reload writes the markers
//!   of a prepared transaction again, as Kafka's does);
//! - no response before its record: a successful InitProducerId,
//!   AddPartitionsToTxn or EndTxn is only answered once the id's last
//!   confirmed record says so; epochs handed to producers never go
//!   backwards; nothing is UNKNOWN_SERVER_ERROR;
//! - every request is answered exactly once, and once everything settles
//!   no transaction is left prepared.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

const IDS: [&str; 3] = ["t0", "t1", "t2"];

fn parts() -> [TopicPartition; 4] {
    [tp("a", 0), tp("a", 1), tp("b", 0), tp("b", 1)]
}

#[derive(Debug, Clone)]
enum Op {
    Init {
        id: usize,
        kip360: bool,
    },
    Add {
        id: usize,
        mask: u8,
        stale: bool,
    },
    End {
        id: usize,
        commit: bool,
        stale: bool,
    },
    Confirm {
        how: u8,
    },
    Marker {
        how: u8,
        split: bool,
    },
    Advance {
        ms: u32,
    },
    Reload,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0..3usize, any::<bool>()).prop_map(|(id, kip360)| Op::Init { id, kip360 }),
        4 => (0..3usize, 0..16u8, prop::bool::weighted(0.1))
            .prop_map(|(id, mask, stale)| Op::Add { id, mask, stale }),
        3 => (0..3usize, any::<bool>(), prop::bool::weighted(0.1))
            .prop_map(|(id, commit, stale)| Op::End { id, commit, stale }),
        12 => (0..10u8).prop_map(|how| Op::Confirm { how }),
        6 => (0..20u8, any::<bool>()).prop_map(|(how, split)| Op::Marker { how, split }),
        1 => (0..40_000u32).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Reload),
    ]
}

/// What a request asked, to check its answer.
#[derive(Debug, Clone)]
enum Asked {
    Init(String),
    Add(String, (i64, i16), Vec<TopicPartition>),
    End(String, (i64, i16), TxnResult),
}

/// A transaction whose PrepareCommit/PrepareAbort is in the log.
#[derive(Debug, Clone)]
struct Prepared {
    pid_epoch: (i64, i16),
    result: TxnResult,
    parts: BTreeSet<TopicPartition>,
    written: BTreeMap<TopicPartition, u32>,
    reloaded: bool,
}

struct Model {
    h: Harness,
    /// The last (producer id, epoch) handed to a producer of each id.
    producers: BTreeMap<usize, (i64, i16)>,
    asked: BTreeMap<RequestToken, Asked>,
    seen: BTreeSet<RequestToken>,
    /// The last confirmed value of each id (None after a tombstone).
    last: BTreeMap<String, Option<TransactionLogValue>>,
    prepared: BTreeMap<String, Prepared>,
}

fn result_of(state: TransactionState) -> Option<TxnResult> {
    match state {
        TransactionState::PrepareCommit | TransactionState::CompleteCommit => {
            Some(TxnResult::Commit)
        }
        TransactionState::PrepareAbort | TransactionState::CompleteAbort => Some(TxnResult::Abort),
        _ => None,
    }
}

impl Model {
    fn new() -> Self {
        Model {
            h: Harness::with(TxnConfig {
                abort_timed_out_interval_ms: 5_000,
                remove_expired_interval_ms: 20_000,
                transactional_id_expiration_ms: 120_000,
                log_value_version: 1,
                ..cfg()
            }),
            producers: BTreeMap::new(),
            asked: BTreeMap::new(),
            seen: BTreeSet::new(),
            last: BTreeMap::new(),
            prepared: BTreeMap::new(),
        }
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Init { id, kip360 } => {
                let expected = if *kip360 {
                    self.producers.get(id).copied()
                } else {
                    None
                };
                let t = self.h.init_req(InitProducerIdRequest {
                    transactional_id: IDS[*id].into(),
                    transaction_timeout_ms: 30_000,
                    producer_id_and_epoch: expected,
                });
                self.asked.insert(t, Asked::Init(IDS[*id].into()));
            }
            Op::Add { id, mask, stale } => {
                let Some(pe) = self.producer(*id, *stale) else {
                    return self.apply(&Op::Init {
                        id: *id,
                        kip360: false,
                    });
                };
                let ps: Vec<_> = parts()
                    .into_iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .map(|(_, p)| p)
                    .collect();
                let t = self.h.add(IDS[*id], pe, &ps);
                self.asked.insert(t, Asked::Add(IDS[*id].into(), pe, ps));
            }
            Op::End { id, commit, stale } => {
                let Some(pe) = self.producer(*id, *stale) else {
                    return self.apply(&Op::Init {
                        id: *id,
                        kip360: false,
                    });
                };
                let r = if *commit {
                    TxnResult::Commit
                } else {
                    TxnResult::Abort
                };
                let t = self.h.end(IDS[*id], pe, r);
                self.asked.insert(t, Asked::End(IDS[*id].into(), pe, r));
            }
            Op::Confirm { how } => self.confirm_one(*how),
            Op::Marker { how, split } => self.report_one(*how, *split),
            Op::Advance { ms } => {
                self.h.advance(i64::from(*ms));
                self.h.tick();
            }
            Op::Reload => {
                for p in self.prepared.values_mut() {
                    p.reloaded = true;
                }
                self.h.reload();
            }
        }
        self.check();
    }

    fn producer(&self, id: usize, stale: bool) -> Option<(i64, i16)> {
        let (pid, epoch) = *self.producers.get(&id)?;
        Some(if stale {
            (pid, epoch - 1)
        } else {
            (pid, epoch)
        })
    }

    /// Confirms (how < 8) or fails the oldest record in flight.
    fn confirm_one(&mut self, how: u8) {
        if self.h.records.is_empty() {
            return;
        }
        let r = self.h.records.remove(0);
        if how >= 8 {
            let e = if how == 8 {
                KafkaError::CoordinatorNotAvailable
            } else {
                KafkaError::NotCoordinator
            };
            let fx = self.h.c.append_failed(self.h.now, r.id, e);
            self.h.absorb(fx);
            return;
        }
        let bytes = r.record.to_record(1).unwrap();
        self.h.log.push((bytes.key.clone(), bytes.value.clone()));
        let id = r.record.transactional_id.clone();
        let value = bytes
            .value
            .as_deref()
            .map(|v| TransactionLogValue::decode(v).unwrap());
        assert_eq!(value, r.record.value, "codec round trip");
        self.check_log_transition(&id, value.as_ref());
        self.last.insert(id, value);
        let fx = self.h.c.append_completed(self.h.now, r.id);
        self.h.absorb(fx);
    }

    fn check_log_transition(&mut self, id: &str, value: Option<&TransactionLogValue>) {
        let prev = self.last.get(id).cloned().flatten();
        let prev_state = prev
            .as_ref()
            .map(|v| TransactionState::from_id(v.transaction_status).unwrap());
        let Some(v) = value else {
            // A tombstone: the id was idle, no transaction open. (It may
            // have no record at all: an id whose first record failed stays
            // in memory, as in Kafka, and expires.)
            assert!(
                prev_state
                    .is_none_or(|s| TransactionState::Dead.valid_previous_states().contains(&s)),
                "{id}: tombstone after {prev_state:?}"
            );
            assert!(!self.prepared.contains_key(id));
            return;
        };
        let state = TransactionState::from_id(v.transaction_status).unwrap();
        let from = prev_state.unwrap_or(TransactionState::Empty);
        assert!(
            state.valid_previous_states().contains(&from),
            "{id}: {from:?} -> {state:?} in the log"
        );
        if let Some(p) = &prev {
            assert!(
                (v.producer_id, v.producer_epoch) >= (p.producer_id, p.producer_epoch),
                "{id}: producer went backwards: {:?} after {:?}",
                (v.producer_id, v.producer_epoch),
                (p.producer_id, p.producer_epoch)
            );
        }
        let pe = (v.producer_id, v.producer_epoch);
        match state {
            TransactionState::PrepareCommit | TransactionState::PrepareAbort => {
                let parts: BTreeSet<_> = v
                    .transaction_partitions
                    .iter()
                    .flatten()
                    .flat_map(|t| t.partition_ids.iter().map(|p| tp(&t.topic, *p)))
                    .collect();
                let old = self.prepared.insert(
                    id.to_string(),
                    Prepared {
                        pid_epoch: pe,
                        result: result_of(state).unwrap(),
                        parts,
                        written: BTreeMap::new(),
                        reloaded: false,
                    },
                );
                assert!(old.is_none(), "{id}: prepared twice");
            }
            TransactionState::CompleteCommit | TransactionState::CompleteAbort => {
                let p = self
                    .prepared
                    .remove(id)
                    .unwrap_or_else(|| panic!("{id}: completed without prepare"));
                assert_eq!(p.pid_epoch, pe, "{id}");
                assert_eq!(Some(p.result), result_of(state), "{id}");
                for part in &p.parts {
                    let n = p.written.get(part).copied().unwrap_or(0);
                    if p.reloaded {
                        assert!(n >= 1, "{id}: {part} has no marker");
                    } else {
                        assert_eq!(n, 1, "{id}: {part} markers");
                    }
                }
            }
            _ => {}
        }
    }

    /// Reports the first marker in flight (or only its first partition).
    fn report_one(&mut self, how: u8, split: bool) {
        if self.h.markers.is_empty() {
            return;
        }
        let outcome = match how {
            0..=13 => MarkerOutcome::Written,
            14..=16 => MarkerOutcome::Retry,
            17..=18 => MarkerOutcome::Skip,
            _ => MarkerOutcome::Fenced,
        };
        let m = &mut self.h.markers[0];
        let reported: Vec<TopicPartition> = if split && m.partitions.len() > 1 {
            vec![m.partitions.remove(0)]
        } else {
            std::mem::take(&mut m.partitions)
        };
        let m = m.clone();
        if m.partitions.is_empty() {
            self.h.markers.remove(0);
        }
        if matches!(outcome, MarkerOutcome::Written | MarkerOutcome::Skip) {
            let p = self
                .prepared
                .get_mut(&m.transactional_id)
                .expect("marker of a prepared transaction");
            for part in &reported {
                *p.written.entry(part.clone()).or_default() += 1;
            }
        }
        let report = MarkerCompletion {
            transactional_id: m.transactional_id.clone(),
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
            coordinator_epoch: m.coordinator_epoch,
            result: m.result,
            partitions: reported.into_iter().map(|p| (p, outcome)).collect(),
        };
        let fx = self.h.c.markers_completed(self.h.now, &report);
        self.h.absorb(fx);
    }

    fn check(&mut self) {
        // At most one record in flight per id.
        let mut in_flight = BTreeSet::new();
        for r in &self.h.records {
            assert!(
                in_flight.insert(r.record.transactional_id.clone()),
                "two records in flight for {}",
                r.record.transactional_id
            );
        }
        // Markers only for prepared transactions, with their data.
        for m in &self.h.markers {
            let p = self
                .prepared
                .get(&m.transactional_id)
                .unwrap_or_else(|| panic!("markers before prepare: {m:?}"));
            assert_eq!((m.producer_id, m.producer_epoch), p.pid_epoch);
            assert_eq!(m.result, p.result);
            assert_eq!(m.coordinator_epoch, self.h.epoch);
            assert!(m.partitions.iter().all(|x| p.parts.contains(x)), "{m:?}");
        }
        // New responses: consistent with the log.
        let fresh: Vec<_> = self
            .h
            .responses
            .iter()
            .filter(|(t, _)| !self.seen.contains(t))
            .map(|(t, r)| (*t, r.clone()))
            .collect();
        for (t, r) in fresh {
            self.seen.insert(t);
            assert_ne!(r.error(), Some(KafkaError::UnknownServerError), "{r:?}");
            let asked = self.asked.get(&t).cloned().expect("answer to a request");
            if r.error().is_some() {
                continue;
            }
            let last = |id: &str| self.last.get(id).cloned().flatten();
            match (asked, r) {
                (Asked::Init(id), TxnResponse::InitProducerId(resp)) => {
                    let v = last(&id).expect("init answered before its record");
                    assert_eq!(v.transaction_status, TransactionState::Empty.id());
                    let pe = (resp.producer_id, resp.producer_epoch);
                    assert_eq!((v.producer_id, v.producer_epoch), pe);
                    let idx = IDS.iter().position(|x| *x == id).unwrap();
                    if let Some(old) = self.producers.get(&idx) {
                        assert!(pe >= *old, "{id}: epoch handed out went backwards");
                    }
                    self.producers.insert(idx, pe);
                }
                (Asked::Add(id, pe, ps), TxnResponse::AddPartitions(None)) => {
                    let v = last(&id).expect("add answered before its record");
                    assert_eq!(v.transaction_status, TransactionState::Ongoing.id());
                    assert_eq!((v.producer_id, v.producer_epoch), pe);
                    let have: BTreeSet<_> = v
                        .transaction_partitions
                        .iter()
                        .flatten()
                        .flat_map(|t| t.partition_ids.iter().map(|p| tp(&t.topic, *p)))
                        .collect();
                    assert!(
                        ps.iter().all(|p| have.contains(p)),
                        "{id}: {ps:?} not in log"
                    );
                }
                (Asked::End(id, pe, result), TxnResponse::EndTxn(resp)) => {
                    let v = last(&id).expect("end answered before its record");
                    let state = TransactionState::from_id(v.transaction_status).unwrap();
                    assert_eq!(result_of(state), Some(result), "{id}: {state:?}");
                    assert_eq!((v.producer_id, v.producer_epoch), pe);
                    assert_eq!((resp.producer_id, resp.producer_epoch), pe);
                }
                (asked, r) => panic!("{asked:?} answered with {r:?}"),
            }
        }
    }

    /// Lets everything finish (reloading once if a transaction is stuck
    /// after a fenced marker or a failed completion record).
    fn settle(&mut self) {
        for round in 0..3 {
            for _ in 0..100 {
                while !self.h.records.is_empty() {
                    self.confirm_one(0);
                    self.check();
                }
                while !self.h.markers.is_empty() {
                    self.report_one(0, false);
                    self.check();
                }
                // Retries and timers.
                self.h.advance(1_000);
                self.h.tick();
                self.check();
                if self.h.records.is_empty() && self.h.markers.is_empty() {
                    break;
                }
            }
            let stuck = IDS.iter().any(|id| {
                matches!(
                    self.h.c.state(id),
                    Some(TransactionState::PrepareCommit | TransactionState::PrepareAbort)
                )
            });
            if !stuck {
                return;
            }
            assert!(round < 2, "transactions stay prepared after a reload");
            self.apply(&Op::Reload);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_keep_kafkas_guarantees(ops in proptest::collection::vec(op(), 1..150)) {
        let mut m = Model::new();
        for op in &ops {
            m.apply(op);
        }
        m.settle();
        for t in m.asked.keys() {
            prop_assert!(m.h.responses.contains_key(t), "request {:?} never answered", t);
        }
        for id in IDS {
            prop_assert_eq!(m.h.c.pending_state(id), None);
        }
        prop_assert!(m.prepared.is_empty());
    }
}
