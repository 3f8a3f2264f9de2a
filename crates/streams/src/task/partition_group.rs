//! Kafka's `PartitionGroup`: one record queue per input partition of a
//! task; the next record comes from the queue whose head has the lowest
//! timestamp. While some queues are empty the task waits up to
//! `max.task.idle.ms` (measured from when it first found itself waiting)
//! before processing the others anyway ("enforced processing").

use std::collections::{BTreeMap, VecDeque};

use super::ConsumedRecord;

/// The input queues of one task, keyed by (topic, partition).
#[derive(Debug, Default)]
pub struct PartitionGroup {
    queues: BTreeMap<(String, i32), VecDeque<ConsumedRecord>>,
    waiting_since: Option<i64>,
}

impl PartitionGroup {
    /// Queues for `partitions`.
    pub fn new(partitions: impl IntoIterator<Item = (String, i32)>) -> Self {
        Self {
            queues: partitions
                .into_iter()
                .map(|p| (p, VecDeque::new()))
                .collect(),
            waiting_since: None,
        }
    }

    /// The partitions.
    pub fn partitions(&self) -> impl Iterator<Item = &(String, i32)> {
        self.queues.keys()
    }

    /// Whether the group has a queue for (topic, partition).
    pub fn contains(&self, topic: &str, partition: i32) -> bool {
        self.queues.contains_key(&(topic.to_string(), partition))
    }

    /// Appends records to a partition's queue; returns the queue's size.
    pub fn add(
        &mut self,
        topic: &str,
        partition: i32,
        records: impl IntoIterator<Item = ConsumedRecord>,
    ) -> usize {
        let q = self
            .queues
            .entry((topic.to_string(), partition))
            .or_default();
        q.extend(records);
        q.len()
    }

    /// Records buffered for one partition (for `buffered.records.per.partition`).
    pub fn buffered(&self, topic: &str, partition: i32) -> usize {
        self.queues
            .get(&(topic.to_string(), partition))
            .map_or(0, |q| q.len())
    }

    /// Records buffered in all.
    pub fn total_buffered(&self) -> usize {
        self.queues.values().map(|q| q.len()).sum()
    }

    /// Whether a record may be taken now (`now` is wall-clock ms).
    pub fn processable(&mut self, now: i64, max_task_idle_ms: i64) -> bool {
        let non_empty = self.queues.values().filter(|q| !q.is_empty()).count();
        if non_empty == 0 {
            return false;
        }
        if non_empty == self.queues.len() {
            self.waiting_since = None;
            return true;
        }
        if max_task_idle_ms < 0 {
            return false;
        }
        let since = *self.waiting_since.get_or_insert(now);
        now - since >= max_task_idle_ms
    }

    /// The lowest timestamp among the queues' head records.
    pub fn head_timestamp(&self) -> Option<i64> {
        self.queues
            .values()
            .filter_map(|q| q.front().map(|r| r.timestamp))
            .min()
    }

    /// Takes the head record with the lowest timestamp (ties: the first
    /// partition in (topic, partition) order).
    pub fn next_record(&mut self) -> Option<((String, i32), ConsumedRecord)> {
        let key = self
            .queues
            .iter()
            .filter_map(|(k, q)| q.front().map(|r| (r.timestamp, k)))
            .min_by_key(|(ts, _)| *ts)
            .map(|(_, k)| k.clone())?;
        let r = self.queues.get_mut(&key)?.pop_front()?;
        Some((key, r))
    }

    /// Keeps only the partitions satisfying `f` (and their records).
    pub fn retain(&mut self, mut f: impl FnMut(&(String, i32)) -> bool) {
        self.queues.retain(|k, _| f(k));
    }

    /// Drops every buffered record.
    pub fn clear(&mut self) {
        for q in self.queues.values_mut() {
            q.clear();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn rec(offset: i64, ts: i64) -> ConsumedRecord {
        ConsumedRecord {
            offset,
            timestamp: ts,
            key: None,
            value: None,
            headers: Default::default(),
        }
    }

    #[test]
    fn lowest_timestamp_first_and_idling() {
        let mut g = PartitionGroup::new([("a".to_string(), 0), ("b".to_string(), 0)]);
        g.add("a", 0, [rec(0, 5), rec(1, 7)]);
        assert!(!g.processable(100, 10));
        assert!(!g.processable(105, 10));
        assert!(g.processable(110, 10));
        g.add("b", 0, [rec(0, 6)]);
        assert!(g.processable(110, 10));
        let order: Vec<i64> =
            std::iter::from_fn(|| g.next_record().map(|(_, r)| r.timestamp)).collect();
        assert_eq!(order, vec![5, 6, 7]);
    }
}
