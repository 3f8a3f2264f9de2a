//! The consumer's per-partition state and fetch buffer: applying fetch
//! results (stale ones dropped after a seek, out-of-range resets, errors
//! with a retry backoff), handing out buffered records to `poll`, and
//! sending the next fetches (at most four in flight per leader).

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use super::fetcher::{self, FetchOutcome, FetchPlan, FetchedData};
use super::{Consumer, ConsumerRecord, OffsetReset};
use crate::cluster::Metadata;
use crate::error::ClientError;
use crate::TopicPartition;

/// Per-partition fetch state.
#[derive(Debug, Default)]
pub(super) struct PartitionState {
    /// Next offset handed to the application (`None` until initialised).
    pub(super) position: Option<i64>,
    /// Where the next fetch starts (past buffered data).
    pub(super) fetch_position: i64,
    /// Leader epoch of the last record returned.
    pub(super) leader_epoch: Option<i32>,
    /// Fetched, not yet returned.
    pub(super) buffered: VecDeque<FetchedData>,
    pub(super) buffered_records: usize,
    pub(super) paused: bool,
    /// Reset requested by seek_to_beginning/end or out of range.
    pub(super) reset: Option<OffsetReset>,
    pub(super) in_flight: bool,
    /// No fetch before this instant (after an error).
    pub(super) retry_after: Option<Instant>,
    pub(super) high_watermark: i64,
    /// `high_watermark` came from a fetch answer (it is 0 until then).
    pub(super) high_watermark_known: bool,
}

impl PartitionState {
    /// The last answer said there is nothing past where the next fetch
    /// starts: a fetch of it alone would wait `fetch.max.wait.ms`.
    fn caught_up(&self) -> bool {
        self.high_watermark_known && self.fetch_position >= self.high_watermark
    }

    pub(super) fn set_position(&mut self, offset: i64) {
        self.position = Some(offset);
        self.fetch_position = offset;
        self.buffered.clear();
        self.buffered_records = 0;
        self.reset = None;
    }

    pub(super) fn request_reset(&mut self, reset: OffsetReset) {
        self.position = None;
        self.buffered.clear();
        self.buffered_records = 0;
        self.reset = Some(reset);
    }
}

/// Fetches in flight to one broker at most, for disjoint partitions and
/// each on its own connection: the next fetches are queued on the broker
/// while an answer is on the wire, so the broker does not idle between
/// fetches while this consumer takes an answer in. (The Java consumer
/// keeps one.) Once the first answers are buffered, a partition is fetched
/// again as `poll` drains it, often alone: four slots keep that many
/// partitions' answers coming (9-27 % faster than two; eight were 7-11 %
/// faster still, for twice the connections; docs/benchmarks.md). The
/// memory held does not grow with the slots: the partitions in flight are
/// disjoint, and a partition with `max.poll.records` buffered records is
/// not fetched.
const FETCHES_PER_BROKER: usize = 4;

/// The partition's oldest fetched answer is used up.
fn front_done(s: &PartitionState) -> bool {
    s.buffered.front().is_some_and(|f| f.records.is_done())
}

impl Consumer {
    /// Applies one fetch result to the partitions it still concerns.
    pub(super) fn handle_fetch(&mut self, outcome: FetchOutcome) {
        if let Some(n) = self.brokers_in_flight.get_mut(&outcome.broker) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.brokers_in_flight.remove(&outcome.broker);
            }
        }
        if let Some(conn) = outcome.conn {
            let idle = self.idle_conns.entry(outcome.broker).or_default();
            if idle.len() < FETCHES_PER_BROKER {
                idle.push(conn);
            }
        }
        for (tp, _) in &outcome.partitions {
            if let Some(s) = self.partitions.get_mut(tp) {
                s.in_flight = false;
            }
        }
        let backoff = Instant::now() + self.config.client.retry_backoff;
        let results = match outcome.result {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(error = %e, broker = outcome.broker, "fetch failed");
                self.metadata_stale = true;
                for (tp, _) in &outcome.partitions {
                    if let Some(s) = self.partitions.get_mut(tp) {
                        s.retry_after = Some(backoff);
                    }
                }
                return;
            }
        };
        let reset = self.config.auto_offset_reset;
        for pf in results {
            let Some(s) = self.partitions.get_mut(&pf.tp) else {
                continue;
            };
            // A seek since the fetch was sent makes its data stale.
            if s.position.is_none() || s.fetch_position != pf.fetch_offset {
                continue;
            }
            match pf.result {
                Ok(data) => {
                    s.high_watermark = data.high_watermark;
                    s.high_watermark_known = true;
                    s.retry_after = None;
                    s.fetch_position = data.next_offset.max(s.fetch_position);
                    s.buffered_records += data.records.remaining();
                    s.buffered.push_back(data);
                }
                Err(e) if e.code() == Some(1) => {
                    if reset == OffsetReset::None {
                        self.pending_error = Some(ClientError::NoOffsetForPartition {
                            partition: pf.tp.to_string(),
                            reason: format!("offset {} is out of range", pf.fetch_offset),
                        });
                        s.retry_after = Some(backoff);
                    } else {
                        tracing::info!(partition = %pf.tp, offset = pf.fetch_offset, %reset, "offset out of range; resetting");
                        s.request_reset(reset);
                    }
                }
                Err(e) if e.invalidates_metadata() || e.is_retriable() => {
                    // NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
                    // UNKNOWN_LEADER_EPOCH, OFFSET_NOT_AVAILABLE,
                    // REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR,
                    // UNKNOWN_TOPIC_OR_PARTITION...: the leader may have
                    // moved (the hint, if any, says where); refresh and
                    // retry after the backoff (Kafka's FetchCollector).
                    if let Some((leader, epoch)) = pf.current_leader {
                        self.leader_hints.push((pf.tp.clone(), leader, epoch));
                    }
                    self.metadata_stale = true;
                    s.retry_after = Some(backoff);
                }
                Err(e) => {
                    s.retry_after = Some(backoff);
                    self.pending_error = Some(e);
                }
            }
        }
    }

    /// Takes up to `max.poll.records` buffered records, rotating the
    /// starting partition for fairness.
    pub(super) fn drain(&mut self) -> Vec<ConsumerRecord> {
        let max = self.config.max_poll_records;
        let backoff = Instant::now() + self.config.client.retry_backoff;
        let mut out = Vec::new();
        let keys: Vec<TopicPartition> = self.partitions.keys().cloned().collect();
        if keys.is_empty() {
            return out;
        }
        let start = self.drain_start % keys.len();
        self.drain_start = self.drain_start.wrapping_add(1);
        for i in 0..keys.len() {
            if out.len() >= max {
                break;
            }
            let Some(s) = self.partitions.get_mut(&keys[(start + i) % keys.len()]) else {
                continue;
            };
            if s.paused || s.position.is_none() {
                continue;
            }
            while out.len() < max {
                let Some(front) = s.buffered.front_mut() else {
                    break;
                };
                match front.records.next_record() {
                    Ok(Some(r)) => {
                        s.position = Some(r.offset + 1);
                        s.leader_epoch = (r.leader_epoch >= 0).then_some(r.leader_epoch);
                        out.push(r);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        // A bad batch: the position stays at it, and what
                        // was fetched after it (buffered or in flight) is
                        // dropped; the error ends the next poll.
                        s.buffered.clear();
                        if let Some(p) = s.position {
                            s.fetch_position = p;
                        }
                        s.retry_after = Some(backoff);
                        self.pending_error = Some(e);
                        break;
                    }
                }
                if front_done(s) {
                    let next = s.buffered.front().map_or(0, |f| f.next_offset);
                    s.position = Some(s.position.map_or(next, |p| p.max(next)));
                    s.buffered.pop_front();
                }
            }
            s.buffered_records = s.buffered.iter().map(|d| d.records.remaining()).sum();
        }
        out
    }

    /// Sends a fetch to every leader with fetchable partitions and fewer
    /// than [`FETCHES_PER_BROKER`] fetches in flight (one of only caught-up
    /// partitions waits while records are buffered).
    pub(super) fn send_fetches(&mut self, md: &Metadata) {
        let now = Instant::now();
        let threshold = self.config.max_poll_records;
        let fetchable: Vec<(TopicPartition, i64)> = self
            .partitions
            .iter()
            .filter(|(_, s)| {
                s.position.is_some()
                    && !s.paused
                    && !s.in_flight
                    && s.buffered_records < threshold
                    && s.retry_after.is_none_or(|t| t <= now)
            })
            .map(|(tp, s)| (tp.clone(), s.fetch_position))
            .collect();
        if fetchable.is_empty() {
            return;
        }
        let mut plans: BTreeMap<i32, FetchPlan> = BTreeMap::new();
        for (tp, offset) in fetchable {
            let Some(leader) = md.leader(&tp.topic, tp.partition) else {
                self.metadata_stale = true;
                continue;
            };
            if self.brokers_in_flight.get(&leader.id).copied().unwrap_or(0) >= FETCHES_PER_BROKER {
                continue;
            }
            let plan = plans.entry(leader.id).or_insert_with(|| FetchPlan {
                broker: leader.id,
                addr: leader.addr(),
                partitions: Vec::new(),
                leader_epochs: BTreeMap::new(),
            });
            plan.leader_epochs
                .insert(tp.clone(), md.leader_epoch(&tp.topic, tp.partition));
            plan.partitions.push((tp, offset));
        }
        // A fetch holding only caught-up partitions waits on the broker
        // for `fetch.max.wait.ms`, holding one of that broker's fetch slots
        // meanwhile: while the application still has buffered records,
        // the partitions behind them (fetchable again once they drain
        // below the threshold) would be left one fetch at a time. Such a
        // fetch goes out once nothing is buffered.
        let busy = self
            .partitions
            .values()
            .any(|s| !s.paused && s.buffered_records > 0);
        for (broker, plan) in plans {
            if busy
                && plan.partitions.iter().all(|(tp, _)| {
                    self.partitions
                        .get(tp)
                        .is_some_and(PartitionState::caught_up)
                })
            {
                continue;
            }
            for (tp, _) in &plan.partitions {
                if let Some(s) = self.partitions.get_mut(tp) {
                    s.in_flight = true;
                    s.retry_after = None;
                }
            }
            *self.brokers_in_flight.entry(broker).or_default() += 1;
            let conn = self.idle_conns.get_mut(&broker).and_then(Vec::pop);
            let tx = self.fetch_tx.clone();
            let settings = self.settings.clone();
            tokio::spawn(async move {
                let outcome = fetcher::run_fetch(plan, conn, settings).await;
                let _ = tx.send(outcome);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_is_caught_up_once_an_answer_says_nothing_is_past_its_fetch_position() {
        let mut s = PartitionState::default();
        assert!(
            !s.caught_up(),
            "never fetched: its high watermark is unknown"
        );
        s.high_watermark = 100;
        s.high_watermark_known = true;
        s.fetch_position = 40;
        assert!(!s.caught_up());
        s.fetch_position = 100;
        assert!(s.caught_up());
        // A seek back makes it fetchable with data again.
        s.fetch_position = 0;
        assert!(!s.caught_up());
    }
}
