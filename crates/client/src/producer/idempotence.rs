//! The idempotent producer's state (the idempotent half of Kafka's
//! `TransactionManager` with `TxnPartitionMap`/`TxnPartitionEntry`):
//! producer id and epoch, sequence numbers per partition, the batches of
//! each partition that have a sequence and no final outcome yet, and the
//! decisions built on them. Sans-IO: the sender calls it under the
//! producer's lock and does the I/O (InitProducerId, Produce).
//!
//! Rules, as the Java client:
//! - Nothing is drained without a producer id; the sender asks for one
//!   (InitProducerId) when [`Idempotence::needs_producer_id`].
//! - Sequences are assigned when a batch is first drained
//!   ([`Idempotence::assign`]); a retry keeps its sequence. Batches that
//!   have a sequence stay *tracked* until acknowledged or failed for good.
//! - A retried batch goes out again only when it is the partition's first
//!   tracked batch ([`Idempotence::may_drain`]): retries leave one at a
//!   time and in sequence order, so the broker never sees a gap it did
//!   not cause. A new batch waits while batches of an older producer id or
//!   epoch are tracked, or while the partition's sequences are unresolved.
//! - `OUT_OF_ORDER_SEQUENCE_NUMBER` and `UNKNOWN_PRODUCER_ID` are retried
//!   ([`Idempotence::can_retry`]); when they show a real gap the epoch is
//!   bumped locally (`bumpIdempotentEpochAndResetIdIfNeeded`) and the
//!   partition's tracked batches get the new epoch and sequences from 0.
//!   A batch the broker refused for good also bumps the epoch (its
//!   sequences are gone); an epoch at `i16::MAX` asks for a new id instead.
//! - A batch whose outcome is unknown (expired or failed in transport after
//!   it was sent) makes the partition *unresolved*: no new batch is drained
//!   until every tracked batch has an outcome; then either the sequences
//!   add up (the batch was written after all) or the epoch is bumped.
//! - Fatal errors (cluster authorization, fenced producer, unsupported
//!   version, an InitProducerId error that is not retriable) stop the
//!   producer: [`Idempotence::fatal`].
//!
//! A transactional producer ([`Idempotence::new_transactional`]) keeps the
//! sequence rules but never bumps its epoch locally: the producer id comes
//! from the transaction manager (`super::transaction`), a batch that fails
//! for good makes the transaction abortable, and the abort bumps the epoch
//! through the coordinator (InitProducerId with the current id and epoch,
//! KIP-360), which resets every sequence ([`Idempotence::reset_sequences`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use proto_kafka::error::ResponseError;
use sluice_protocol::record::codec::ProducerInfo;

use crate::accumulator::{BatchId, Front, TopicPartition};
use crate::error::ClientError;

/// `TxnPartitionEntry.NO_LAST_ACKED_SEQUENCE_NUMBER`.
const NO_SEQUENCE: i32 = -1;

/// Kafka's `DefaultRecordBatch.incrementSequence`: sequences wrap from
/// `i32::MAX` to 0.
pub(crate) fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

/// The sequence of a batch's last record.
fn last_sequence(info: &ProducerInfo, records: u32) -> i32 {
    increment_sequence(
        info.base_sequence,
        i32::try_from(records.saturating_sub(1)).unwrap_or(i32::MAX),
    )
}

/// A tracked batch's current producer state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Assigned {
    info: ProducerInfo,
    records: u32,
    /// Rewritten by an epoch bump (Kafka's `sequenceHasBeenReset`).
    reset: bool,
}

/// One partition's sequence state (`TxnPartitionEntry`).
#[derive(Debug)]
struct PartitionState {
    /// The producer id and epoch its sequences belong to.
    producer: (i64, i16),
    next_sequence: i32,
    last_acked_sequence: i32,
    last_acked_offset: i64,
    /// Batches with a sequence and no final outcome, in sequence order
    /// (batch ids grow with sequences within a partition).
    tracked: BTreeMap<BatchId, Assigned>,
}

impl PartitionState {
    fn new(producer: (i64, i16)) -> Self {
        Self {
            producer,
            next_sequence: 0,
            last_acked_sequence: NO_SEQUENCE,
            last_acked_offset: -1,
            tracked: BTreeMap::new(),
        }
    }

    /// Kafka's `startSequencesAtBeginning`: the tracked batches get
    /// `producer` and sequences from 0, in order.
    fn start_at_beginning(&mut self, producer: (i64, i16)) {
        let mut seq = 0;
        for a in self.tracked.values_mut() {
            a.info = ProducerInfo {
                producer_id: producer.0,
                producer_epoch: producer.1,
                base_sequence: seq,
            };
            a.reset = true;
            seq = increment_sequence(seq, i32::try_from(a.records).unwrap_or(i32::MAX));
        }
        self.producer = producer;
        self.next_sequence = seq;
        self.last_acked_sequence = NO_SEQUENCE;
    }
}

/// How a tracked batch ended without being acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The broker answered with an error (the batch was not written).
    Refused,
    /// No answer: it may or may not have been written (transport failure,
    /// delivery timeout after it was sent).
    Unknown,
}

/// Where the producer id stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Init {
    /// No id; none asked for.
    Needed,
    /// InitProducerId in flight.
    Requesting,
    Ready,
}

/// The idempotent producer's state (see the module docs).
#[derive(Debug)]
pub(crate) struct Idempotence {
    producer: Option<(i64, i16)>,
    init: Init,
    fatal: Option<ClientError>,
    bump_required: bool,
    /// Partitions whose tracked batches are rewritten at the next bump.
    rewrite: BTreeSet<TopicPartition>,
    partitions: HashMap<TopicPartition, PartitionState>,
    /// Partitions with batches of unknown outcome: the sequence expected
    /// after the last of them.
    unresolved: HashMap<TopicPartition, i32>,
    /// Owned by a transactional producer (no local epoch bumps).
    transactional: bool,
}

impl Idempotence {
    pub(crate) fn new() -> Self {
        Self {
            producer: None,
            init: Init::Needed,
            fatal: None,
            bump_required: false,
            rewrite: BTreeSet::new(),
            partitions: HashMap::new(),
            unresolved: HashMap::new(),
            transactional: false,
        }
    }

    /// The state of a transactional producer: the producer id is set by
    /// the transaction manager, never asked for by the sender.
    pub(crate) fn new_transactional() -> Self {
        Self {
            transactional: true,
            ..Self::new()
        }
    }

    /// A new producer id or epoch from the transaction coordinator: every
    /// partition starts over at sequence 0 (Kafka's `resetSequenceNumbers`).
    pub(crate) fn reset_sequences(&mut self, id: i64, epoch: i16) {
        tracing::debug!(
            producer_id = id,
            epoch,
            "producer id and epoch set; sequences reset"
        );
        self.producer = Some((id, epoch));
        self.init = Init::Ready;
        self.bump_required = false;
        self.rewrite.clear();
        self.partitions.clear();
        self.unresolved.clear();
    }

    /// The producer id and epoch new batches get, once known.
    pub(crate) fn producer(&self) -> Option<(i64, i16)> {
        self.producer
    }

    /// The error that stopped the producer, if one did.
    pub(crate) fn fatal(&self) -> Option<&ClientError> {
        self.fatal.as_ref()
    }

    /// Whether the sender should send InitProducerId now (marks it as in
    /// flight when so).
    pub(crate) fn needs_producer_id(&mut self) -> bool {
        if !self.transactional
            && self.fatal.is_none()
            && self.producer.is_none()
            && self.init == Init::Needed
        {
            self.init = Init::Requesting;
            return true;
        }
        false
    }

    /// InitProducerId answered: new batches use `(id, epoch)`. Partitions
    /// waiting for a rewrite (the epoch ran out) are rewritten now.
    pub(crate) fn set_producer_id(&mut self, id: i64, epoch: i16) {
        tracing::debug!(producer_id = id, epoch, "producer id set");
        self.producer = Some((id, epoch));
        self.init = Init::Ready;
        self.apply_rewrites();
    }

    /// Stops the producer for good.
    pub(crate) fn set_fatal(&mut self, e: ClientError) {
        if self.fatal.is_none() {
            tracing::error!(error = %e, "idempotent producer stopped by a fatal error");
            self.fatal = Some(e);
        }
    }

    fn part(&mut self, tp: &TopicPartition) -> &mut PartitionState {
        let producer = self.producer.unwrap_or((-1, -1));
        self.partitions
            .entry(tp.clone())
            .or_insert_with(|| PartitionState::new(producer))
    }

    /// What the sender does before draining (Kafka's `Sender.runOnce`):
    /// settles unresolved partitions whose batches all have an outcome,
    /// then bumps the epoch if something asked for it.
    pub(crate) fn before_drain(&mut self) {
        self.resolve_sequences();
        if self.bump_required {
            self.bump_required = false;
            match self.producer {
                Some((id, epoch)) if epoch < i16::MAX => {
                    tracing::debug!(producer_id = id, epoch = epoch + 1, partitions = ?self.rewrite, "bumping the producer epoch");
                    self.producer = Some((id, epoch + 1));
                    self.apply_rewrites();
                }
                Some((id, _)) => {
                    tracing::debug!(
                        producer_id = id,
                        "producer epoch exhausted; asking for a new producer id"
                    );
                    self.producer = None;
                    self.init = Init::Needed;
                }
                None => {}
            }
        }
    }

    fn apply_rewrites(&mut self) {
        let Some(producer) = self.producer else {
            return;
        };
        for tp in std::mem::take(&mut self.rewrite) {
            self.unresolved.remove(&tp);
            self.partitions
                .entry(tp)
                .or_insert_with(|| PartitionState::new(producer))
                .start_at_beginning(producer);
        }
    }

    fn request_bump(&mut self, tp: &TopicPartition) {
        if self.transactional {
            // Only the coordinator bumps a transactional producer's epoch.
            return;
        }
        self.bump_required = true;
        self.rewrite.insert(tp.clone());
    }

    /// Kafka's `maybeResolveSequences`.
    fn resolve_sequences(&mut self) {
        let settled: Vec<TopicPartition> = self
            .unresolved
            .keys()
            .filter(|tp| {
                self.partitions
                    .get(*tp)
                    .is_none_or(|p| p.tracked.is_empty())
            })
            .cloned()
            .collect();
        for tp in settled {
            self.unresolved.remove(&tp);
            let Some(p) = self.partitions.get(&tp) else {
                continue;
            };
            if p.next_sequence.wrapping_sub(p.last_acked_sequence) != 1 {
                tracing::debug!(partition = %tp, last_acked = p.last_acked_sequence, next = p.next_sequence, "unacknowledged batches left a gap; bumping the epoch");
                self.request_bump(&tp);
            }
        }
    }

    /// Whether `tp` may drain `front` now (Kafka's
    /// `shouldStopDrainBatchesForPartition`, negated).
    pub(crate) fn may_drain(&mut self, tp: &TopicPartition, front: Front) -> bool {
        if self.fatal.is_some() {
            return false;
        }
        let Some(producer) = self.producer else {
            return false;
        };
        let unresolved = self.unresolved.contains_key(tp);
        let Some(p) = self.partitions.get(tp) else {
            return true;
        };
        match front {
            Front::New { .. } => {
                // Sequence 0 of a new epoch must not overtake batches of
                // the old one; nor may anything follow a batch whose
                // outcome is unknown.
                !(unresolved || (!p.tracked.is_empty() && p.producer != producer))
            }
            Front::Retry { id } => p.tracked.keys().next().is_none_or(|first| *first == id),
        }
    }

    /// Producer state for a new batch of `records` records drained for
    /// `tp` (Kafka: `maybeUpdateProducerIdAndEpoch`, then the partition's
    /// next sequence); the batch is tracked from now on.
    pub(crate) fn assign(
        &mut self,
        tp: &TopicPartition,
        id: BatchId,
        records: u32,
    ) -> ProducerInfo {
        let Some(producer) = self.producer else {
            return ProducerInfo::default();
        };
        let p = self.part(tp);
        if p.producer != producer && p.tracked.is_empty() {
            *p = PartitionState {
                last_acked_offset: p.last_acked_offset,
                ..PartitionState::new(producer)
            };
        }
        let info = ProducerInfo {
            producer_id: producer.0,
            producer_epoch: producer.1,
            base_sequence: p.next_sequence,
        };
        p.next_sequence =
            increment_sequence(p.next_sequence, i32::try_from(records).unwrap_or(i32::MAX));
        p.tracked.insert(
            id,
            Assigned {
                info,
                records,
                reset: false,
            },
        );
        info
    }

    /// The producer state a tracked batch must be sent with now (changed
    /// by an epoch bump); `None` for batches not tracked.
    pub(crate) fn current(&self, tp: &TopicPartition, id: BatchId) -> Option<ProducerInfo> {
        self.partitions.get(tp)?.tracked.get(&id).map(|a| a.info)
    }

    /// A batch was acknowledged at `base_offset` (-1 when unknown).
    pub(crate) fn on_success(
        &mut self,
        tp: &TopicPartition,
        id: BatchId,
        sent: ProducerInfo,
        records: u32,
        base_offset: i64,
    ) {
        let p = self.part(tp);
        let info = match p.tracked.remove(&id) {
            Some(a) => a.info,
            None => sent,
        };
        if (info.producer_id, info.producer_epoch) == p.producer {
            let last = last_sequence(&info, records);
            if last > p.last_acked_sequence {
                p.last_acked_sequence = last;
            }
        }
        if base_offset >= 0 {
            let last = base_offset + i64::from(records) - 1;
            p.last_acked_offset = p.last_acked_offset.max(last);
        }
    }

    fn is_next_sequence(&self, tp: &TopicPartition, sequence: i32) -> bool {
        let last = self
            .partitions
            .get(tp)
            .map_or(NO_SEQUENCE, |p| p.last_acked_sequence);
        sequence.wrapping_sub(last) == 1
    }

    /// Kafka's `TransactionManager.canRetry` for an idempotent producer:
    /// whether a batch that failed with `e` may be retried (the sender
    /// checks attempts and the delivery timeout first). May ask for an
    /// epoch bump. `log_start_offset` is the Produce response's (-1 when
    /// unknown).
    pub(crate) fn can_retry(
        &mut self,
        tp: &TopicPartition,
        id: BatchId,
        e: &ClientError,
        log_start_offset: i64,
    ) -> bool {
        let tracked = self
            .partitions
            .get(tp)
            .and_then(|p| p.tracked.get(&id))
            .copied();
        if self.transactional {
            return self.can_retry_transactional(tp, tracked, e, log_start_offset);
        }
        match e.response_error() {
            Some(ResponseError::UnknownProducerId) => {
                if log_start_offset == -1 || tracked.is_some_and(|a| a.reset) {
                    return true;
                }
                // Either the log start moved past everything acknowledged
                // (retention took the producer's state), or the broker lost
                // it: a new epoch makes sequence 0 acceptable again.
                self.request_bump(tp);
                true
            }
            Some(ResponseError::OutOfOrderSequenceNumber) => {
                let Some(a) = tracked else {
                    return true;
                };
                let unresolved = self.unresolved.get(tp).copied();
                if unresolved.is_none()
                    && (a.reset || !self.is_next_sequence(tp, a.info.base_sequence))
                {
                    // An earlier batch is missing (failed or in flight):
                    // this one fails until that one lands.
                    return true;
                }
                if unresolved.is_none_or(|next| next == a.info.base_sequence) {
                    // A real gap right before this batch.
                    self.request_bump(tp);
                }
                true
            }
            _ => e.is_retriable(),
        }
    }

    /// `canRetry` for a transactional producer: a lost producer state after
    /// the log start moved past everything acknowledged restarts the
    /// partition's sequences (the transaction goes on); an
    /// `OUT_OF_ORDER_SEQUENCE_NUMBER` behind a missing batch is retried; any
    /// other sequence error fails the batch (and so the transaction).
    fn can_retry_transactional(
        &mut self,
        tp: &TopicPartition,
        tracked: Option<Assigned>,
        e: &ClientError,
        log_start_offset: i64,
    ) -> bool {
        match e.response_error() {
            Some(ResponseError::UnknownProducerId) => {
                if log_start_offset == -1 || tracked.is_some_and(|a| a.reset) {
                    return true;
                }
                let producer = self.producer.unwrap_or((-1, -1));
                let Some(p) = self.partitions.get_mut(tp) else {
                    return false;
                };
                if p.last_acked_offset < log_start_offset {
                    p.start_at_beginning(producer);
                    return true;
                }
                false
            }
            Some(ResponseError::OutOfOrderSequenceNumber) => {
                let Some(a) = tracked else {
                    return false;
                };
                !self.unresolved.contains_key(tp)
                    && (a.reset || !self.is_next_sequence(tp, a.info.base_sequence))
            }
            _ => e.is_retriable(),
        }
    }

    /// A tracked batch ended without acknowledgement (`handleFailedBatch`;
    /// expiries included): fatal errors stop the producer; otherwise the
    /// partition's sequences are repaired (epoch bump, reset, or marked
    /// unresolved when the outcome is unknown).
    pub(crate) fn on_failed(
        &mut self,
        tp: &TopicPartition,
        id: BatchId,
        e: &ClientError,
        failure: Failure,
    ) {
        if is_fatal(e) {
            self.set_fatal(e.clone());
        }
        let assigned = self
            .partitions
            .get_mut(tp)
            .and_then(|p| p.tracked.remove(&id));
        if self.fatal.is_some() {
            return;
        }
        let Some(a) = assigned else {
            return;
        };
        if self.transactional {
            // The transaction becomes abortable; its abort resets the
            // sequences with the bumped epoch.
            if e.response_error() == Some(ResponseError::UnknownProducerId) {
                self.partitions.remove(tp);
            }
            return;
        }
        match (e.response_error(), failure) {
            (Some(ResponseError::OutOfOrderSequenceNumber), _) => self.request_bump(tp),
            (Some(ResponseError::UnknownProducerId), _) => {
                // The broker has no state for us: start the partition over
                // at sequence 0 (Kafka's `resetSequenceForPartition`).
                self.partitions.remove(tp);
                self.unresolved.remove(tp);
            }
            (_, Failure::Unknown) => {
                let next = increment_sequence(last_sequence(&a.info, a.records), 1);
                let entry = self.unresolved.entry(tp.clone()).or_insert(next);
                if next > *entry {
                    *entry = next;
                }
            }
            (_, Failure::Refused) => self.request_bump(tp),
        }
    }

    /// Whether `tp` has tracked batches (for tests and diagnostics).
    #[cfg(test)]
    fn tracked(&self, tp: &TopicPartition) -> Vec<(BatchId, ProducerInfo)> {
        self.partitions
            .get(tp)
            .map(|p| p.tracked.iter().map(|(id, a)| (*id, a.info)).collect())
            .unwrap_or_default()
    }
}

/// Errors that stop an idempotent producer (Kafka's
/// `maybeTransitionToErrorState`).
pub(crate) fn is_fatal(e: &ClientError) -> bool {
    match e {
        ClientError::UnsupportedVersion { .. } => true,
        ClientError::Kafka { error, .. } => matches!(
            error,
            ResponseError::ClusterAuthorizationFailed
                | ResponseError::TransactionalIdAuthorizationFailed
                | ResponseError::ProducerFenced
                | ResponseError::UnsupportedVersion
        ),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp() -> TopicPartition {
        TopicPartition::new("t", 0)
    }

    fn kafka(code: i16) -> ClientError {
        ClientError::from_code(code, None, "produce").expect("an error code")
    }

    const OUT_OF_ORDER: i16 = 45;
    const UNKNOWN_PRODUCER_ID: i16 = 59;
    const NOT_LEADER: i16 = 6;
    const INVALID_RECORD: i16 = 87;

    fn ready(id: i64, epoch: i16) -> Idempotence {
        let mut s = Idempotence::new();
        assert!(s.needs_producer_id());
        assert!(!s.needs_producer_id(), "asked once");
        s.set_producer_id(id, epoch);
        s
    }

    fn new(id: BatchId, records: u32) -> Front {
        Front::New { id, records }
    }

    #[test]
    fn sequences_wrap_as_kafkas() {
        assert_eq!(increment_sequence(5, 3), 8);
        assert_eq!(increment_sequence(i32::MAX - 1, 1), i32::MAX);
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
    }

    #[test]
    fn nothing_drains_without_a_producer_id() {
        let mut s = Idempotence::new();
        assert!(!s.may_drain(&tp(), new(0, 1)));
        assert!(s.needs_producer_id());
        assert!(!s.may_drain(&tp(), new(0, 1)));
        s.set_producer_id(7, 0);
        assert!(s.may_drain(&tp(), new(0, 1)));
    }

    #[test]
    fn sequences_are_assigned_at_drain_and_retries_go_first_in_order() {
        let mut s = ready(7, 0);
        let a = s.assign(&tp(), 1, 10);
        let b = s.assign(&tp(), 2, 5);
        let c = s.assign(&tp(), 3, 1);
        assert_eq!(
            (a.producer_id, a.producer_epoch, a.base_sequence),
            (7, 0, 0)
        );
        assert_eq!((b.base_sequence, c.base_sequence), (10, 15));
        // All three failed in transport; the retries go one at a time.
        for id in [1, 2, 3] {
            assert!(s.can_retry(&tp(), id, &kafka(NOT_LEADER), -1));
        }
        assert!(s.may_drain(&tp(), Front::Retry { id: 1 }));
        assert!(!s.may_drain(&tp(), Front::Retry { id: 2 }), "2 waits for 1");
        s.on_success(&tp(), 1, a, 10, 100);
        assert!(s.may_drain(&tp(), Front::Retry { id: 2 }));
        assert_eq!(s.current(&tp(), 2), Some(b));
        s.on_success(&tp(), 2, b, 5, 110);
        s.on_success(&tp(), 3, c, 1, 115);
        assert!(s.tracked(&tp()).is_empty());
        assert_eq!(s.assign(&tp(), 4, 1).base_sequence, 16);
    }

    #[test]
    fn out_of_order_behind_a_missing_batch_is_retried_without_a_bump() {
        let mut s = ready(7, 0);
        let a = s.assign(&tp(), 1, 10);
        s.assign(&tp(), 2, 10);
        // 2 fails out of order while 1 is still in flight: just retry.
        assert!(s.can_retry(&tp(), 2, &kafka(OUT_OF_ORDER), 0));
        s.before_drain();
        assert_eq!(s.producer(), Some((7, 0)));
        s.on_success(&tp(), 1, a, 10, 0);
        assert!(s.may_drain(&tp(), Front::Retry { id: 2 }));
    }

    #[test]
    fn a_real_gap_bumps_the_epoch_and_rewrites_the_tracked_batches() {
        let mut s = ready(7, 0);
        let a = s.assign(&tp(), 1, 10);
        s.assign(&tp(), 2, 10);
        s.assign(&tp(), 3, 10);
        s.on_success(&tp(), 1, a, 10, 0);
        // 2 is the next sequence, yet out of order: the broker lost it.
        assert!(s.can_retry(&tp(), 2, &kafka(OUT_OF_ORDER), 0));
        s.before_drain();
        assert_eq!(s.producer(), Some((7, 1)));
        let rewritten = s.tracked(&tp());
        assert_eq!(
            rewritten
                .iter()
                .map(|(id, i)| (*id, i.producer_epoch, i.base_sequence))
                .collect::<Vec<_>>(),
            vec![(2, 1, 0), (3, 1, 10)]
        );
        // 3's answer (also out of order, sent under epoch 0) is a retry of
        // a reset batch: no second bump.
        assert!(s.can_retry(&tp(), 3, &kafka(OUT_OF_ORDER), 0));
        s.before_drain();
        assert_eq!(s.producer(), Some((7, 1)));
        assert_eq!(s.assign(&tp(), 4, 1).base_sequence, 20);
    }

    #[test]
    fn a_new_epoch_waits_for_old_batches_of_other_partitions() {
        let mut s = ready(7, 0);
        let other = TopicPartition::new("t", 1);
        let o = s.assign(&other, 10, 3);
        let a = s.assign(&tp(), 1, 1);
        s.on_success(&tp(), 1, a, 1, 0);
        s.assign(&tp(), 2, 1);
        assert!(s.can_retry(&tp(), 2, &kafka(UNKNOWN_PRODUCER_ID), 0));
        s.before_drain();
        assert_eq!(s.producer(), Some((7, 1)));
        // The other partition still has an epoch-0 batch out.
        assert!(!s.may_drain(&other, new(11, 1)));
        s.on_success(&other, 10, o, 3, 0);
        assert!(s.may_drain(&other, new(11, 1)));
        let next = s.assign(&other, 11, 1);
        assert_eq!((next.producer_epoch, next.base_sequence), (1, 0));
    }

    #[test]
    fn a_refused_batch_bumps_the_epoch_and_an_exhausted_epoch_gets_a_new_id() {
        let mut s = ready(7, i16::MAX - 1);
        s.assign(&tp(), 1, 2);
        s.assign(&tp(), 2, 2);
        assert!(!s.can_retry(&tp(), 1, &kafka(INVALID_RECORD), 0));
        s.on_failed(&tp(), 1, &kafka(INVALID_RECORD), Failure::Refused);
        s.before_drain();
        assert_eq!(s.producer(), Some((7, i16::MAX)));
        assert_eq!(s.current(&tp(), 2).map(|i| i.base_sequence), Some(0));
        s.on_failed(&tp(), 2, &kafka(INVALID_RECORD), Failure::Refused);
        s.before_drain();
        assert_eq!(s.producer(), None);
        assert!(s.needs_producer_id());
        s.set_producer_id(8, 0);
        let next = s.assign(&tp(), 3, 1);
        assert_eq!(
            (next.producer_id, next.producer_epoch, next.base_sequence),
            (8, 0, 0)
        );
    }

    #[test]
    fn unknown_outcomes_block_new_batches_until_resolved() {
        let mut s = ready(7, 0);
        let a = s.assign(&tp(), 1, 5);
        let b = s.assign(&tp(), 2, 5);
        // 1 expired after it was sent; 2 is still out.
        s.on_failed(
            &tp(),
            1,
            &ClientError::Protocol("timeout".into()),
            Failure::Unknown,
        );
        s.before_drain();
        assert!(!s.may_drain(&tp(), new(3, 1)), "unresolved");
        // 2 was written, so 1 was too: resolved, no bump.
        s.on_success(&tp(), 2, b, 5, 5);
        s.before_drain();
        assert_eq!(s.producer(), Some((7, 0)));
        assert!(s.may_drain(&tp(), new(3, 1)));
        assert_eq!(s.assign(&tp(), 3, 1).base_sequence, 10);
        let _ = a;

        // Now the last batch's outcome stays unknown: a gap, so a bump.
        s.on_failed(
            &tp(),
            3,
            &ClientError::Protocol("timeout".into()),
            Failure::Unknown,
        );
        s.before_drain();
        assert_eq!(s.producer(), Some((7, 1)));
        assert!(s.may_drain(&tp(), new(4, 1)));
        assert_eq!(s.assign(&tp(), 4, 1).base_sequence, 0);
    }

    #[test]
    fn fatal_errors_stop_everything() {
        let mut s = ready(7, 0);
        s.assign(&tp(), 1, 1);
        s.on_failed(&tp(), 1, &kafka(31), Failure::Refused); // CLUSTER_AUTHORIZATION_FAILED
        assert!(s.fatal().is_some());
        assert!(!s.may_drain(&tp(), new(2, 1)));
        assert!(!s.needs_producer_id());
        assert!(is_fatal(&kafka(35)));
        assert!(!is_fatal(&kafka(NOT_LEADER)));
    }
}
