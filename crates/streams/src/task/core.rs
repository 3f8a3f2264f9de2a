//! The processor graph of one task at run time: node instances, stores,
//! punctuation schedules, and the outbox of records to send (sinks and
//! changelogs). Forwarding runs child processors depth-first, as Kafka's
//! `ProcessorNode.process` chain does.

use std::collections::BTreeMap;

use crate::error::{Result, StreamsError};
use crate::processor::{
    Headers, ProcessorContext, PunctuationType, Punctuator, RawProcessor, RawRecord,
};
use crate::task::store::TaskStore;
use crate::task::OutputRecord;
use crate::task_id::TaskId;

/// A node instance.
pub(crate) struct NodeRt {
    pub name: String,
    pub children: Vec<usize>,
    pub stores: Vec<String>,
    /// `None` while the node runs (re-entry means a cycle).
    pub processor: Option<Box<dyn RawProcessor>>,
}

/// The metadata of the record being processed (Kafka's
/// `ProcessorRecordContext`).
#[derive(Debug, Clone, Default)]
pub(crate) struct RecordMeta {
    pub topic: Option<String>,
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
    pub headers: Headers,
}

/// A scheduled punctuation.
pub(crate) struct Punctuation {
    pub node: usize,
    pub interval: i64,
    pub ty: PunctuationType,
    pub next: i64,
    pub punctuator: Option<Punctuator>,
    pub cancelled: bool,
}

/// A task's graph and state.
pub(crate) struct TaskCore {
    pub task_id: TaskId,
    pub application_id: String,
    pub nodes: Vec<NodeRt>,
    pub stores: BTreeMap<String, TaskStore>,
    pub outbox: Vec<OutputRecord>,
    /// Stores whose cache went over budget during the current step.
    pub evicted: Vec<String>,
    pub punctuations: Vec<Punctuation>,
    /// Largest timestamp processed; -1 before the first record.
    pub stream_time: i64,
    pub wall_clock: i64,
    pub commit_requested: bool,
    pub meta: RecordMeta,
}

impl TaskCore {
    /// Runs node `idx` on `record`, with the record's timestamp and headers
    /// as the context's while it runs.
    pub(crate) fn run_node(&mut self, idx: usize, record: RawRecord) -> Result<()> {
        let mut p = self.nodes[idx].processor.take().ok_or_else(|| {
            StreamsError::Topology(format!("cycle through node {}", self.nodes[idx].name))
        })?;
        let saved_ts = std::mem::replace(&mut self.meta.timestamp, record.timestamp);
        let saved_headers = std::mem::replace(&mut self.meta.headers, record.headers.clone());
        let r = {
            let mut ctx = ProcessorContext::new(self, idx);
            p.process(&mut ctx, record)
        };
        self.meta.timestamp = saved_ts;
        self.meta.headers = saved_headers;
        self.nodes[idx].processor = Some(p);
        r
    }

    /// Initializes every node, parents before children.
    pub(crate) fn init(&mut self) -> Result<()> {
        for i in 0..self.nodes.len() {
            let mut p = self.nodes[i].processor.take().ok_or_else(|| {
                StreamsError::IllegalState(format!("node {} initialized twice", self.nodes[i].name))
            })?;
            let r = {
                let mut ctx = ProcessorContext::new(self, i);
                p.init(&mut ctx)
            };
            self.nodes[i].processor = Some(p);
            r?;
        }
        Ok(())
    }

    /// Flushes the cache of store `name`, forwarding flushed entries from
    /// the store's owning node when it registered a listener.
    pub(crate) fn flush_store_cache(&mut self, name: &str) -> Result<()> {
        let partition = self.task_id.partition;
        let Some(store) = self.stores.get_mut(name) else {
            return Ok(());
        };
        let entries = store.flush_cache(partition, &mut self.outbox)?;
        let listener = store.listener.clone();
        if let Some((node, l)) = listener {
            let saved = self.meta.clone();
            for (e, old) in entries {
                self.meta.timestamp = e.timestamp;
                let mut ctx = ProcessorContext::new(self, node);
                l(&mut ctx, &e, old)?;
            }
            self.meta = saved;
        }
        Ok(())
    }

    /// Flushes the caches that went over budget.
    pub(crate) fn flush_evicted(&mut self) -> Result<()> {
        while let Some(name) = self.evicted.pop() {
            self.flush_store_cache(&name)?;
        }
        Ok(())
    }

    /// Flushes every cache, in store-name order, then every store.
    pub(crate) fn flush_all(&mut self) -> Result<()> {
        let names: Vec<String> = self.stores.keys().cloned().collect();
        for n in &names {
            self.flush_store_cache(n)?;
        }
        self.evicted.clear();
        for s in self.stores.values_mut() {
            s.flush_inner()?;
        }
        Ok(())
    }

    /// Runs due punctuations of type `ty` at time `now`; returns whether
    /// any ran. A punctuation late by several intervals runs once.
    pub(crate) fn punctuate(&mut self, ty: PunctuationType, now: i64) -> Result<bool> {
        let mut ran = false;
        for i in 0..self.punctuations.len() {
            let due = {
                let p = &self.punctuations[i];
                !p.cancelled && p.ty == ty && p.next <= now
            };
            if !due {
                continue;
            }
            let Some(mut cb) = self.punctuations[i].punctuator.take() else {
                continue;
            };
            let node = self.punctuations[i].node;
            let saved = std::mem::replace(
                &mut self.meta,
                RecordMeta {
                    topic: None,
                    partition: -1,
                    offset: -1,
                    timestamp: now,
                    headers: Headers::new(),
                },
            );
            let r = {
                let mut ctx = ProcessorContext::new(self, node);
                cb(&mut ctx, now)
            };
            self.meta = saved;
            let p = &mut self.punctuations[i];
            p.punctuator = Some(cb);
            let mut next = p.next + p.interval;
            if now >= next {
                let missed = (now - p.next) / p.interval;
                next = p.next + (missed + 1) * p.interval;
            }
            p.next = next;
            ran = true;
            r?;
            self.flush_evicted()?;
        }
        Ok(ran)
    }

    /// Closes every processor and store.
    pub(crate) fn close(&mut self) -> Result<()> {
        let mut first = Ok(());
        for n in &mut self.nodes {
            if let Some(p) = &mut n.processor {
                if let Err(e) = p.close() {
                    if first.is_ok() {
                        first = Err(e);
                    }
                }
            }
        }
        for s in self.stores.values_mut() {
            if let Err(e) = s.close() {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}
