//! Model-based property test of the partition log: random sequences of
//! append, read, roll, truncate, retention (size, time and log start) and
//! reopen (clean and crash) run against both a `Log` and an in-memory model;
//! every read and every offset is checked against the model.

use std::sync::Arc;

use proptest::prelude::*;
use sluice_protocol::record::codec::decode_batch;
use sluice_protocol::record::{BatchBuilder, BatchIter, Compression, Record};
use sluice_storage::{
    Clock, Log, LogConfig, LogOpenOptions, ManualClock, ReadLimit, StorageError, TopicPartition,
};

const T0: i64 = 1_700_000_000_000;

#[derive(Debug, Clone)]
enum Op {
    Append { records: u8, size: u16, codec: u8 },
    Read { at: u16, max_bytes: u16 },
    Roll,
    Truncate { at: u16 },
    AdvanceStart { at: u16 },
    SizeRetention { keep: u16 },
    TimeRetention,
    Reopen { clean: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1u8..6, 0u16..300, 0u8..5).prop_map(|(records, size, codec)| Op::Append { records, size, codec }),
        4 => (any::<u16>(), 1u16..2000).prop_map(|(at, max_bytes)| Op::Read { at, max_bytes }),
        1 => Just(Op::Roll),
        1 => any::<u16>().prop_map(|at| Op::Truncate { at }),
        1 => any::<u16>().prop_map(|at| Op::AdvanceStart { at }),
        1 => (0u16..3000).prop_map(|keep| Op::SizeRetention { keep }),
        1 => Just(Op::TimeRetention),
        1 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
    ]
}

/// What the log should hold: batches as `(base, last, values)`.
#[derive(Debug, Default)]
struct Model {
    batches: Vec<(i64, i64, Vec<Vec<u8>>)>,
    log_start: i64,
    log_end: i64,
}

impl Model {
    fn value(&self, offset: i64) -> Option<&Vec<u8>> {
        self.batches
            .iter()
            .find(|(b, l, _)| *b <= offset && offset <= *l)
            .map(|(b, _, v)| &v[(offset - b) as usize])
    }

    /// Picks an offset in `[log_start, log_end]` from a random number.
    fn pick(&self, r: u16) -> i64 {
        self.log_start + i64::from(r) % (self.log_end - self.log_start + 1)
    }
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 700,
        index_interval_bytes: 64,
        segment_index_bytes: 96,
        retention_bytes: -1,
        ..LogConfig::default()
    }
}

fn open(dir: &std::path::Path, clock: &Arc<ManualClock>, opts: LogOpenOptions) -> Log {
    Log::open(
        dir,
        TopicPartition::new("model", 0),
        config(),
        opts,
        clock.clone(),
    )
    .expect("open")
}

fn check_read(log: &Log, model: &Model, at: i64, max_bytes: u64) {
    let r = log
        .read(at, max_bytes, ReadLimit::LogEnd, true)
        .expect("read in range");
    let Some(region) = r.region else {
        assert!(
            (at..model.log_end).all(|o| model.value(o).is_none()),
            "read at {at} returned nothing but the model has records"
        );
        return;
    };
    let bytes = region.read_to_vec().expect("region bytes");
    let mut first = true;
    let mut expect_next = at;
    for b in BatchIter::new(&bytes) {
        let (_, h, raw) = b.expect("valid batch header");
        let decoded = decode_batch(raw, 1 << 24).expect("decodable batch");
        if first {
            assert!(h.last_offset() >= at, "first batch ends before {at}");
            first = false;
        }
        for rec in decoded.records {
            let o = rec.record.offset;
            if o < at {
                continue;
            }
            // Offsets without records (removed by truncation mid-batch)
            // are skipped; the rest must match the model exactly.
            while expect_next < o {
                assert!(
                    model.value(expect_next).is_none(),
                    "missing offset {expect_next}"
                );
                expect_next += 1;
            }
            let want = model
                .value(o)
                .unwrap_or_else(|| panic!("unexpected offset {o}"));
            assert_eq!(rec.record.value.as_ref(), Some(want), "value at {o}");
            expect_next = o + 1;
        }
    }
    assert!(
        !first,
        "region of {} bytes held no whole batch",
        bytes.len()
    );
}

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let mut log = open(dir.path(), &clock, LogOpenOptions::default());
    let mut model = Model::default();
    let mut seq = 0u64;
    for op in ops {
        match op {
            Op::Append {
                records,
                size,
                codec,
            } => {
                let codec = Compression::from_id(codec).expect("codec");
                let mut b = BatchBuilder::new(codec, clock.now_ms());
                let mut values = Vec::new();
                for i in 0..records {
                    seq += 1;
                    let mut v = format!("{seq}:").into_bytes();
                    v.resize(v.len() + usize::from(size) / (usize::from(i) + 1), b'x');
                    b.push(Record::new(
                        Some(seq.to_be_bytes().to_vec()),
                        Some(v.clone()),
                        clock.now_ms(),
                    ));
                    values.push(v);
                }
                let mut bytes = b.build(0).expect("build");
                let info = log.append_as_leader(&mut bytes, 0).expect("append");
                assert_eq!(info.base_offset, model.log_end);
                let last = model.log_end + i64::from(records) - 1;
                assert_eq!(info.last_offset, last);
                model.batches.push((model.log_end, last, values));
                model.log_end = last + 1;
                clock.advance(1_000);
            }
            Op::Read { at, max_bytes } => {
                let offset = model.pick(at);
                check_read(&log, &model, offset, u64::from(max_bytes));
                let past = model.log_end + 1;
                assert!(matches!(
                    log.read(past, 100, ReadLimit::LogEnd, true),
                    Err(StorageError::OffsetOutOfRange { .. })
                ));
                if model.log_start > 0 {
                    assert!(log
                        .read(model.log_start - 1, 100, ReadLimit::LogEnd, true)
                        .is_err());
                }
            }
            Op::Roll => log.roll().expect("roll"),
            Op::Truncate { at } => {
                let t = model.pick(at);
                log.truncate_to(t).expect("truncate");
                if t < model.log_end {
                    let straddling = model.batches.iter().find(|(b, l, _)| *b < t && *l >= t);
                    match straddling.map(|(b, _, _)| *b) {
                        Some(b) if b < model.log_start => {
                            // Nothing readable would remain: restart at t.
                            model.batches.clear();
                            model.log_start = t;
                            model.log_end = t;
                        }
                        other => {
                            model.log_end = other.unwrap_or(t);
                            model.batches.retain(|(_, l, _)| *l < t);
                        }
                    }
                }
            }
            Op::AdvanceStart { at } => {
                let t = model.pick(at);
                log.set_high_watermark(model.log_end);
                log.advance_log_start_offset(t).expect("advance");
                // Advancing also runs retention, which may go further.
                let start = log.log_start_offset();
                assert!(start >= t.max(model.log_start), "start {start} < {t}");
                model.log_start = start;
            }
            Op::SizeRetention { keep } => {
                log.set_config(LogConfig {
                    retention_bytes: i64::from(keep),
                    ..config()
                });
                log.delete_old_segments().expect("retention");
                log.set_config(config());
                let start = log.log_start_offset();
                assert!(start >= model.log_start);
                model.log_start = start;
            }
            Op::TimeRetention => {
                clock.advance(config().retention_ms + 1);
                log.delete_old_segments().expect("retention");
                // Only the active segment may remain.
                assert_eq!(log.segment_count(), 1);
                model.log_start = log.log_start_offset();
            }
            Op::Reopen { clean } => {
                let hw = log.high_watermark();
                if clean {
                    log.close().expect("close");
                }
                drop(log);
                log = open(
                    dir.path(),
                    &clock,
                    LogOpenOptions {
                        recovery_point: if clean { model.log_end } else { 0 },
                        log_start_offset: model.log_start,
                        high_watermark: hw,
                        clean_shutdown: clean,
                        ..LogOpenOptions::default()
                    },
                );
            }
        }
        assert_eq!(log.log_end_offset(), model.log_end, "log end");
        assert_eq!(log.log_start_offset(), model.log_start, "log start");
    }
    // Finally every offset still present reads back.
    if model.log_start < model.log_end {
        check_read(&log, &model, model.log_start, u64::MAX >> 1);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn log_matches_model(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops);
    }
}
