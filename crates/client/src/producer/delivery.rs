//! Delivering record outcomes after the producer's state is unlocked.
//!
//! A batch's outcome is decided under the state lock (its response is
//! matched, its memory freed, its idempotence sequence settled), but its
//! records' futures and callbacks run only once the lock is released: a
//! 1 MiB batch of 100-byte records completes about 10,000 records, and
//! running them under the lock held every `send` waiting for that long.
//! Kafka's producer too fires callbacks outside the accumulator's locks.
//!
//! Outcomes are queued in [`State::deliveries`] in the order they are
//! decided. Whoever releases the lock with outcomes queued and nobody
//! delivering becomes the deliverer ([`StateGuard`]'s `Drop`): it pops
//! one batch at a time, runs its records' completions without the lock and
//! goes on until the queue is empty. One deliverer at a time, and requests
//! to a broker completing in the order they were written (`sender::Turn`),
//! keep Kafka's promise that callbacks of one partition run in send order;
//! a callback may itself call the producer (it holds no lock). `flush` counts a
//! record as done only once it was delivered.

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::sync::{Arc, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use super::{Inner, State};
use crate::accumulator::TopicPartition;
use crate::error::{ClientError, Result};

/// The decided outcome of one batch's records.
#[derive(Debug)]
pub(super) enum Delivery {
    /// Written at `base` (-1: offsets unknown) with the broker's
    /// `append_time` (-1 unless the topic uses `LogAppendTime`).
    Written {
        tp: TopicPartition,
        records: Vec<Pending>,
        base: i64,
        append_time: i64,
    },
    /// Failed for good with `error`.
    Failed {
        records: Vec<Pending>,
        error: ClientError,
    },
}

impl Delivery {
    /// Resolves every record's future or runs its callback.
    fn run(self) {
        match self {
            Delivery::Written {
                tp,
                records,
                base,
                append_time,
            } => {
                // One copy of the name per batch, shared by its records.
                let topic: Arc<str> = Arc::from(tp.topic.as_str());
                for p in records {
                    let offset = if base < 0 {
                        -1
                    } else {
                        base + i64::from(p.index)
                    };
                    let timestamp = if append_time >= 0 {
                        append_time
                    } else {
                        p.timestamp
                    };
                    p.completion.complete(Ok(RecordMetadata {
                        topic: topic.clone(),
                        partition: tp.partition,
                        offset,
                        timestamp,
                    }));
                }
            }
            Delivery::Failed { records, error } => {
                for p in records {
                    p.completion.complete(Err(error.clone()));
                }
            }
        }
    }
}

/// The locked producer state; on release it delivers the outcomes queued
/// meanwhile (see the module docs).
pub(super) struct StateGuard<'a> {
    inner: &'a Inner,
    guard: Option<MutexGuard<'a, State>>,
}

impl<'a> StateGuard<'a> {
    pub(super) fn new(inner: &'a Inner) -> Self {
        Self {
            inner,
            guard: Some(lock_raw(inner)),
        }
    }
}

fn lock_raw(inner: &Inner) -> MutexGuard<'_, State> {
    inner.state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Deref for StateGuard<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        self.guard
            .as_deref()
            .expect("state guard used after release")
    }
}

impl DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut State {
        self.guard
            .as_deref_mut()
            .expect("state guard used after release")
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        let Some(mut st) = self.guard.take() else {
            return;
        };
        // While unwinding, leave the queue to the next release: a panicking
        // callback here would abort the process.
        if st.deliveries.is_empty() || st.delivering || std::thread::panicking() {
            return;
        }
        st.delivering = true;
        drop(st);
        deliver(self.inner);
    }
}

/// Runs queued outcomes until none is left; the caller set
/// `State::delivering`. Wakes `flush` and `send` waiters at the end.
fn deliver(inner: &Inner) {
    /// Gives up the deliverer's role if a completion panics, so later
    /// outcomes are still delivered.
    struct Abandon<'a>(Option<&'a Inner>);
    impl Drop for Abandon<'_> {
        fn drop(&mut self) {
            if let Some(inner) = self.0 {
                lock_raw(inner).delivering = false;
                inner.progress.notify_waiters();
            }
        }
    }
    let mut abandon = Abandon(Some(inner));
    loop {
        let next = {
            let mut st = lock_raw(inner);
            match st.deliveries.pop_front() {
                Some(d) => d,
                None => {
                    st.delivering = false;
                    break;
                }
            }
        };
        next.run();
    }
    abandon.0 = None;
    inner.progress.notify_waiters();
}

/// Where an acknowledged record was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Topic.
    pub topic: Arc<str>,
    /// Partition.
    pub partition: i32,
    /// Offset (-1 with `acks=0`, which gets no acknowledgement).
    pub offset: i64,
    /// The record's timestamp (the broker's append time for topics with
    /// `LogAppendTime`).
    pub timestamp: i64,
}

/// Resolves to the delivery outcome of one record.
#[derive(Debug)]
pub struct DeliveryFuture {
    pub(super) rx: oneshot::Receiver<Result<RecordMetadata>>,
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx).poll(cx).map(|r| {
            r.unwrap_or_else(|_| {
                Err(ClientError::InvalidArgument(
                    "producer dropped before the record was delivered".into(),
                ))
            })
        })
    }
}

/// How a record's outcome reaches the caller.
pub(crate) enum Completion {
    /// Through a [`DeliveryFuture`].
    Future(oneshot::Sender<Result<RecordMetadata>>),
    /// Through a callback, run by whoever delivers outcomes (module docs).
    Callback(Box<dyn FnOnce(Result<RecordMetadata>) + Send>),
}

impl Completion {
    /// Delivers the outcome.
    pub(crate) fn complete(self, outcome: Result<RecordMetadata>) {
        match self {
            Completion::Future(tx) => {
                let _ = tx.send(outcome);
            }
            Completion::Callback(f) => f(outcome),
        }
    }
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Completion::Future(_) => "Completion::Future",
            Completion::Callback(_) => "Completion::Callback",
        })
    }
}

/// A record waiting for its batch's acknowledgement.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) index: u32,
    pub(super) timestamp: i64,
    pub(super) completion: Completion,
}
