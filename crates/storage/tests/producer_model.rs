//! Model-based property test of sequence validation: random interleavings
//! of three idempotent producers (one starting just below `i32::MAX`, so
//! its sequences wrap), with in-sequence batches, retries of any of the
//! last five batches, retries of forgotten ones, gaps, stale epochs, epoch
//! bumps (at sequence 0 or not), rolls, and restarts (clean: the snapshot
//! keeps each producer's last batch; crash with recovery point 0: the whole
//! log is replayed). Every append's outcome — appended at the log end, a
//! duplicate with the original offsets, OUT_OF_ORDER_SEQUENCE_NUMBER or
//! INVALID_PRODUCER_EPOCH — is checked against a model that states Kafka
//! 4's rules on its own.

use std::collections::VecDeque;
use std::sync::Arc;

use proptest::prelude::*;
use sluice_protocol::record::codec::ProducerInfo;
use sluice_protocol::record::{BatchBuilder, Compression, Record};
use sluice_storage::{
    AppendOrigin, Log, LogConfig, LogOpenOptions, ManualClock, StorageError, TopicPartition,
};

const T0: i64 = 1_700_000_000_000;
const PRODUCERS: usize = 3;
/// Where each producer's first batch starts (any sequence is accepted from
/// a producer the partition does not know).
const START: [i32; PRODUCERS] = [0, i32::MAX - 6, 1_000];

#[derive(Debug, Clone)]
enum Kind {
    Next,
    /// One of the remembered batches (index from the newest).
    Retry(u8),
    /// A batch of the current epoch older than the remembered ones.
    Forgotten(u8),
    /// Skips this many sequences.
    Gap(u8),
    StaleEpoch,
    Bump {
        at_zero: bool,
    },
}

#[derive(Debug, Clone)]
enum Op {
    Append { p: usize, kind: Kind, count: i32 },
    Roll,
    Reopen { clean: bool },
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        8 => Just(Kind::Next),
        4 => any::<u8>().prop_map(Kind::Retry),
        1 => any::<u8>().prop_map(Kind::Forgotten),
        1 => (1u8..4).prop_map(Kind::Gap),
        1 => Just(Kind::StaleEpoch),
        1 => any::<bool>().prop_map(|at_zero| Kind::Bump { at_zero }),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        20 => (0..PRODUCERS, kind(), 1i32..5).prop_map(|(p, kind, count)| Op::Append { p, kind, count }),
        1 => Just(Op::Roll),
        2 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
    ]
}

/// `seq + n` wrapping after `i32::MAX` (the model's own arithmetic).
fn add(seq: i32, n: i32) -> i32 {
    ((i64::from(seq) + i64::from(n)) % (i64::from(i32::MAX) + 1)) as i32
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Batch {
    epoch: i16,
    first_seq: i32,
    last_seq: i32,
    first_offset: i64,
    last_offset: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    Appended,
    Duplicate(i64, i64),
    OutOfOrder,
    StaleEpoch,
}

#[derive(Debug, Default, Clone)]
struct Producer {
    epoch: i16,
    /// What the partition remembers for duplicates, oldest first.
    remembered: VecDeque<Batch>,
    /// Every batch of the current epoch, oldest first.
    epoch_batches: Vec<Batch>,
}

#[derive(Debug, Default)]
struct Model {
    producers: [Option<Producer>; PRODUCERS],
    /// Every appended batch of every producer, in log order.
    history: Vec<(usize, Batch)>,
    log_end: i64,
}

impl Model {
    /// Kafka 4's rules for one client batch.
    fn expect(&self, p: usize, epoch: i16, first_seq: i32, last_seq: i32) -> Expect {
        let Some(st) = &self.producers[p] else {
            return Expect::Appended;
        };
        if epoch == st.epoch {
            if let Some(b) = st
                .remembered
                .iter()
                .find(|b| b.first_seq == first_seq && b.last_seq == last_seq)
            {
                return Expect::Duplicate(b.first_offset, b.last_offset);
            }
        }
        if epoch < st.epoch {
            return Expect::StaleEpoch;
        }
        if epoch > st.epoch {
            return if first_seq == 0 {
                Expect::Appended
            } else {
                Expect::OutOfOrder
            };
        }
        // The next sequence after the last one; 0 after i32::MAX or none.
        let last = st.remembered.back().map_or(-1, |b| b.last_seq);
        if add(last, 1) == first_seq {
            Expect::Appended
        } else {
            Expect::OutOfOrder
        }
    }

    fn appended(&mut self, p: usize, b: Batch) {
        let st = self.producers[p].get_or_insert_with(Producer::default);
        if st.epoch != b.epoch || st.remembered.is_empty() {
            st.remembered.clear();
            st.epoch_batches.clear();
            st.epoch = b.epoch;
        }
        st.remembered.push_back(b);
        if st.remembered.len() > 5 {
            st.remembered.pop_front();
        }
        st.epoch_batches.push(b);
        self.history.push((p, b));
        self.log_end = b.last_offset + 1;
    }

    /// A clean restart: the snapshot holds each producer's last batch.
    fn reopen_clean(&mut self) {
        for st in self.producers.iter_mut().flatten() {
            while st.remembered.len() > 1 {
                st.remembered.pop_front();
            }
        }
    }

    /// A crash with recovery point 0: everything replayed from the log.
    fn reopen_replayed(&mut self) {
        let history = std::mem::take(&mut self.history);
        let end = self.log_end;
        let epoch_batches: Vec<Vec<Batch>> = self
            .producers
            .iter()
            .map(|p| {
                p.as_ref()
                    .map(|p| p.epoch_batches.clone())
                    .unwrap_or_default()
            })
            .collect();
        self.producers = Default::default();
        for (p, b) in history {
            self.appended(p, b);
        }
        self.log_end = end;
        // The replay rebuilds the same epoch history.
        for (st, e) in self.producers.iter_mut().zip(epoch_batches) {
            if let Some(st) = st {
                st.epoch_batches = e;
            }
        }
    }
}

fn build(pid: i64, epoch: i16, seq: i32, count: i32) -> Vec<u8> {
    let producer = ProducerInfo {
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: seq,
    };
    let mut b = BatchBuilder::new(Compression::None, T0).producer(producer, false);
    for i in 0..count {
        b.push(Record::new(
            Some(format!("{pid}-{seq}-{i}").into_bytes()),
            Some(b"v".to_vec()),
            T0,
        ));
    }
    b.build(0).expect("build")
}

fn open(dir: &std::path::Path, clock: &Arc<ManualClock>, opts: LogOpenOptions) -> Log {
    Log::open(
        dir,
        TopicPartition::new("pm", 0),
        LogConfig::default(),
        opts,
        clock.clone(),
    )
    .expect("open")
}

/// The batch an op sends: (epoch, first sequence, count).
fn batch_for(model: &Model, p: usize, kind: &Kind, count: i32) -> (i16, i32, i32) {
    let Some(st) = &model.producers[p] else {
        return (0, START[p], count);
    };
    let last = st.remembered.back().map_or(-1, |b| b.last_seq);
    let next = add(last, 1);
    match kind {
        Kind::Next => (st.epoch, next, count),
        Kind::Retry(k) => {
            let b = st.remembered[st.remembered.len() - 1 - usize::from(*k) % st.remembered.len()];
            (
                b.epoch,
                b.first_seq,
                (b.last_offset - b.first_offset) as i32 + 1,
            )
        }
        Kind::Forgotten(k) => {
            let old = st.epoch_batches.len().saturating_sub(st.remembered.len());
            if old == 0 {
                (st.epoch, next, count)
            } else {
                let b = st.epoch_batches[usize::from(*k) % old];
                (
                    b.epoch,
                    b.first_seq,
                    (b.last_offset - b.first_offset) as i32 + 1,
                )
            }
        }
        Kind::Gap(g) => (st.epoch, add(next, i32::from(*g)), count),
        Kind::StaleEpoch if st.epoch > 0 => (st.epoch - 1, next, count),
        Kind::StaleEpoch => (st.epoch, next, count),
        Kind::Bump { at_zero: true } => (st.epoch + 1, 0, count),
        Kind::Bump { at_zero: false } => (st.epoch + 1, next, count),
    }
}

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let mut log = open(dir.path(), &clock, LogOpenOptions::default());
    let mut model = Model::default();
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Append { p, kind, count } => {
                let (epoch, first_seq, count) = batch_for(&model, *p, kind, *count);
                let last_seq = add(first_seq, count - 1);
                let want = model.expect(*p, epoch, first_seq, last_seq);
                let mut bytes = build(*p as i64 + 1, epoch, first_seq, count);
                let got = log.append_as_leader_from(&mut bytes, 0, AppendOrigin::Client);
                let ctx = format!("op {i} {op:?}: p{p} epoch {epoch} seq {first_seq}..={last_seq}");
                match (&want, got) {
                    (Expect::Appended, Ok(info)) => {
                        assert!(!info.duplicate, "{ctx}");
                        assert_eq!(info.base_offset, model.log_end, "{ctx}");
                        model.appended(
                            *p,
                            Batch {
                                epoch,
                                first_seq,
                                last_seq,
                                first_offset: info.base_offset,
                                last_offset: info.last_offset,
                            },
                        );
                    }
                    (Expect::Duplicate(first, last), Ok(info)) => {
                        assert!(info.duplicate, "{ctx}");
                        assert_eq!(
                            (info.base_offset, info.last_offset),
                            (*first, *last),
                            "{ctx}"
                        );
                    }
                    (Expect::OutOfOrder, Err(StorageError::OutOfOrderSequence(_)))
                    | (Expect::StaleEpoch, Err(StorageError::InvalidProducerEpoch(_))) => {}
                    (want, got) => panic!("{ctx}: expected {want:?}, got {got:?}"),
                }
                assert_eq!(log.log_end_offset(), model.log_end, "{ctx}");
            }
            Op::Roll => log.roll().expect("roll"),
            Op::Reopen { clean } => {
                if *clean {
                    log.close().expect("close");
                }
                let end = log.log_end_offset();
                drop(log);
                let opts = LogOpenOptions {
                    recovery_point: if *clean { end } else { 0 },
                    clean_shutdown: *clean,
                    ..LogOpenOptions::default()
                };
                log = open(dir.path(), &clock, opts);
                if *clean {
                    model.reopen_clean();
                } else {
                    model.reopen_replayed();
                }
            }
        }
    }
    let got: Vec<(i64, i16, i32)> = log
        .active_producers()
        .iter()
        .map(|a| (a.producer_id, a.producer_epoch, a.last_sequence))
        .collect();
    let want: Vec<(i64, i16, i32)> = model
        .producers
        .iter()
        .enumerate()
        .filter_map(|(p, st)| {
            let st = st.as_ref()?;
            Some((p as i64 + 1, st.epoch, st.remembered.back()?.last_seq))
        })
        .collect();
    assert_eq!(got, want, "producer state at the end");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn sequence_validation_matches_the_model(ops in proptest::collection::vec(op(), 1..120)) {
        run(ops);
    }
}

/// A fixed run through the wrap-around: the producer starting at
/// `i32::MAX - 6` crosses it, retries across it, and continues.
#[test]
fn wrap_around_run() {
    let mut ops = Vec::new();
    for _ in 0..6 {
        ops.push(Op::Append {
            p: 1,
            kind: Kind::Next,
            count: 3,
        });
        ops.push(Op::Append {
            p: 1,
            kind: Kind::Retry(1),
            count: 1,
        });
    }
    ops.push(Op::Reopen { clean: false });
    ops.push(Op::Append {
        p: 1,
        kind: Kind::Retry(3),
        count: 1,
    });
    ops.push(Op::Reopen { clean: true });
    ops.push(Op::Append {
        p: 1,
        kind: Kind::Next,
        count: 2,
    });
    run(ops);
}
