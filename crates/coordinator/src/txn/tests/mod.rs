//! Unit tests of the transaction coordinator, driven by a manual clock
//! through [`Harness`], which plays the runtime: it keeps the records to
//! append, the log of confirmed records (replayed on reload), the markers
//! in flight and the responses. One file per area: `init.rs`
//! (InitProducerId), `ops.rs` (AddPartitionsToTxn, AddOffsetsToTxn,
//! EndTxn), `markers.rs` (markers and completion), `timers.rs` (timeouts,
//! expiration), `load.rs` (replay, reload, unload), `admin.rs`
//! (DescribeTransactions, ListTransactions) and `model.rs` (random
//! sequences against a model).

#![allow(clippy::unwrap_used)]

mod admin;
mod init;
mod load;
mod markers;
mod model;
mod ops;
mod timers;

use std::collections::BTreeMap;

use super::*;

pub(super) const T: &str = "txn";
pub(super) const TIMEOUT: i32 = 60_000;
pub(super) const START: i64 = 1_000_000;

pub(super) fn cfg() -> TxnConfig {
    TxnConfig {
        num_partitions: 1,
        ..TxnConfig::default()
    }
}

pub(super) fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition::new(topic, partition)
}

pub(super) struct Harness {
    pub c: TransactionCoordinator,
    pub now: i64,
    next_token: u64,
    /// The last producer id handed out by the source.
    pub last_pid: i64,
    /// Makes the producer id source fail.
    pub pid_error: Option<KafkaError>,
    pub responses: BTreeMap<RequestToken, TxnResponse>,
    /// Emitted, not yet confirmed or failed.
    pub records: Vec<PendingRecord>,
    /// Confirmed records, in log order, as bytes.
    pub log: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Emitted markers not yet reported on.
    pub markers: Vec<WriteMarkers>,
    pub epoch: i32,
}

impl Harness {
    /// A loaded, empty shard (one partition).
    pub fn new() -> Self {
        Self::with(cfg())
    }

    pub fn with(cfg: TxnConfig) -> Self {
        let mut h = Harness {
            c: TransactionCoordinator::new(cfg, 0),
            now: START,
            next_token: 0,
            last_pid: 999,
            pid_error: None,
            responses: BTreeMap::new(),
            records: Vec::new(),
            log: Vec::new(),
            markers: Vec::new(),
            epoch: 1,
        };
        let fx = h.c.begin_load(1);
        h.absorb(fx);
        let fx = h.c.complete_load(h.now);
        h.absorb(fx);
        h
    }

    pub fn token(&mut self) -> RequestToken {
        self.next_token += 1;
        RequestToken(self.next_token)
    }

    pub fn absorb(&mut self, fx: Effects) {
        for (t, r) in fx.responses {
            assert!(
                self.responses.insert(t, r).is_none(),
                "token {t:?} answered twice"
            );
        }
        self.records.extend(fx.records);
        self.markers.extend(fx.markers);
    }

    pub fn resp(&self, t: RequestToken) -> Option<TxnResponse> {
        self.responses.get(&t).cloned()
    }

    pub fn advance(&mut self, ms: i64) {
        self.now += ms;
    }

    pub fn tick(&mut self) {
        let fx = self.c.tick(self.now);
        self.absorb(fx);
    }

    // --- requests ---

    pub fn init_req(&mut self, req: InitProducerIdRequest) -> RequestToken {
        let t = self.token();
        let mut pid = self.last_pid;
        let err = self.pid_error;
        let mut source = || match err {
            Some(e) => Err(e),
            None => {
                pid += 1;
                Ok(pid)
            }
        };
        let fx = self.c.init_producer_id(self.now, t, &req, &mut source);
        self.last_pid = pid;
        self.absorb(fx);
        t
    }

    pub fn init_with(&mut self, id: &str, expected: Option<(i64, i16)>) -> RequestToken {
        self.init_req(InitProducerIdRequest {
            transactional_id: id.to_string(),
            transaction_timeout_ms: TIMEOUT,
            producer_id_and_epoch: expected,
        })
    }

    pub fn init(&mut self, id: &str) -> RequestToken {
        self.init_with(id, None)
    }

    pub fn add(
        &mut self,
        id: &str,
        pid_epoch: (i64, i16),
        parts: &[TopicPartition],
    ) -> RequestToken {
        let t = self.token();
        let req = AddPartitionsRequest {
            transactional_id: id.to_string(),
            producer_id: pid_epoch.0,
            producer_epoch: pid_epoch.1,
            partitions: parts.to_vec(),
        };
        let fx = self.c.add_partitions_to_txn(self.now, t, &req);
        self.absorb(fx);
        t
    }

    pub fn end(&mut self, id: &str, pid_epoch: (i64, i16), result: TxnResult) -> RequestToken {
        let t = self.token();
        let req = EndTxnRequest {
            transactional_id: id.to_string(),
            producer_id: pid_epoch.0,
            producer_epoch: pid_epoch.1,
            result,
        };
        let fx = self.c.end_txn(self.now, t, &req);
        self.absorb(fx);
        t
    }

    // --- the runtime's side ---

    /// Confirms every emitted record, in order (and those their
    /// confirmations emit), without touching markers.
    pub fn confirm_all(&mut self) {
        while !self.records.is_empty() {
            let batch = std::mem::take(&mut self.records);
            for r in batch {
                let rec = self.c.encode(&r.record).unwrap();
                self.log.push((rec.key, rec.value));
                let fx = self.c.append_completed(self.now, r.id);
                self.absorb(fx);
            }
        }
    }

    /// Fails every emitted record with `error`.
    pub fn fail_all(&mut self, error: KafkaError) {
        let batch = std::mem::take(&mut self.records);
        for r in batch {
            let fx = self.c.append_failed(self.now, r.id, error);
            self.absorb(fx);
        }
    }

    /// Reports every marker in flight with `outcome`.
    pub fn report_markers(&mut self, outcome: MarkerOutcome) {
        let batch = std::mem::take(&mut self.markers);
        for m in batch {
            let report = MarkerCompletion {
                transactional_id: m.transactional_id.clone(),
                producer_id: m.producer_id,
                producer_epoch: m.producer_epoch,
                coordinator_epoch: m.coordinator_epoch,
                result: m.result,
                partitions: m.partitions.iter().map(|p| (p.clone(), outcome)).collect(),
            };
            let fx = self.c.markers_completed(self.now, &report);
            self.absorb(fx);
        }
    }

    /// Confirms records and writes markers until nothing is left.
    pub fn settle(&mut self) {
        for _ in 0..100 {
            if self.records.is_empty() && self.markers.is_empty() {
                return;
            }
            self.confirm_all();
            self.report_markers(MarkerOutcome::Written);
        }
        panic!("effects never settle");
    }

    /// A new producer on `id`, settled: its producer id and epoch.
    pub fn ready(&mut self, id: &str) -> (i64, i16) {
        let t = self.init(id);
        self.settle();
        match self.resp(t) {
            Some(TxnResponse::InitProducerId(InitProducerIdResponse {
                error: None,
                producer_id,
                producer_epoch,
            })) => (producer_id, producer_epoch),
            other => panic!("init {id}: {other:?}"),
        }
    }

    /// `id` with an Ongoing transaction over `parts`.
    pub fn ongoing(&mut self, id: &str, parts: &[TopicPartition]) -> (i64, i16) {
        let pe = self.ready(id);
        let t = self.add(id, pe, parts);
        self.confirm_all();
        assert_eq!(self.resp(t), Some(TxnResponse::AddPartitions(None)));
        pe
    }

    /// Unloads and reloads the shard from the confirmed log at the next
    /// coordinator epoch. Unconfirmed records and markers in flight are
    /// lost, as in a coordinator failover.
    pub fn reload(&mut self) {
        self.records.clear();
        self.markers.clear();
        self.epoch += 1;
        let fx = self.c.begin_load(self.epoch);
        self.absorb(fx);
        for (k, v) in self.log.clone() {
            self.c.replay(&k, v.as_deref()).unwrap();
        }
        let fx = self.c.complete_load(self.now);
        self.absorb(fx);
    }
}

pub(super) fn init_ok(pid: i64, epoch: i16) -> Option<TxnResponse> {
    Some(TxnResponse::InitProducerId(InitProducerIdResponse {
        error: None,
        producer_id: pid,
        producer_epoch: epoch,
    }))
}

pub(super) fn init_err(e: KafkaError) -> Option<TxnResponse> {
    Some(TxnResponse::InitProducerId(InitProducerIdResponse::error(
        e,
    )))
}

pub(super) fn end_ok(pid: i64, epoch: i16) -> Option<TxnResponse> {
    Some(TxnResponse::EndTxn(EndTxnResponse {
        error: None,
        producer_id: pid,
        producer_epoch: epoch,
    }))
}

pub(super) fn end_err(e: KafkaError) -> Option<TxnResponse> {
    Some(TxnResponse::EndTxn(EndTxnResponse::error(e)))
}

pub(super) fn add_err(e: KafkaError) -> Option<TxnResponse> {
    Some(TxnResponse::AddPartitions(Some(e)))
}
